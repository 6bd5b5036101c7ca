//! Cards another tool wrote with text that is not text (a title in Latin-1 bytes, a body stored
//! as a BLOB): a sweep goes on past them to the cards it can decompose, and `kanban list` and
//! `kanban show` print what they can instead of failing the whole board.

use fixtures::cli::CliOutput;
use fixtures::rows::NotText;
use judge::prelude::*;
use rstest::rstest;
use serde_json::Value;

/// The ids in a `kanban list --json` output, when it is a JSON array of cards.
fn listed_ids(output: &CliOutput) -> Option<Vec<String>> {
    let listed: Value = serde_json::from_str(&output.stdout).ok()?;
    Some(
        listed
            .as_array()?
            .iter()
            .filter_map(|card| card["id"].as_str().map(str::to_owned))
            .collect(),
    )
}

#[rstest]
fn a_sweep_goes_past_cards_whose_text_is_not_text_and_list_and_show_print_them(board: Board) {
    let aux = board.aux();
    let unreadable = board.arrange_cards_not_text();
    let fresh = board.create("a fresh idea", &["--triage"]);

    let sweep = board.cli_unchecked(["kanban", "decompose", "--all", "--json"]);
    holds(
        "a sweep decomposes a fresh card past cards whose text is not text",
        board.rows().status(&fresh) != "triage" && aux.billed_for(&fresh) == 1,
    )
    .note(|| {
        format!(
            "fresh card: status {}, {} bills",
            board.rows().status(&fresh),
            aux.billed_for(&fresh)
        )
    })
    .context(|| sweep.to_string())
    .gap(GapKind::UnreadableCardBlocks);

    let list = board.cli_unchecked(["kanban", "list", "--json"]);
    let listed = listed_ids(&list);
    let missing: Vec<&String> = unreadable
        .iter()
        .chain(std::iter::once(&fresh))
        .filter(|card| !listed.as_ref().is_some_and(|ids| ids.contains(card)))
        .collect();
    holds(
        "`kanban list --json` lists every card, those whose text is not text included",
        list.success() && missing.is_empty(),
    )
    .note(|| format!("exit {}; missing {missing:?}", list.code_text()))
    .context(|| list.to_string())
    .gap(GapKind::UnreadableCardBlocks);

    for ((column, what), card) in NotText::BY_COLUMN.iter().zip(&unreadable) {
        let show = board.cli_unchecked(["kanban", "show", card.as_str(), "--json"]);
        let shown = serde_json::from_str::<Value>(&show.stdout)
            .ok()
            .and_then(|shown| shown["task"]["id"].as_str().map(str::to_owned));
        holds(
            format!(
                "`kanban show --json` prints a card whose {column} is {}",
                what.describe()
            ),
            show.success() && shown.as_deref() == Some(card.as_str()),
        )
        .note(|| format!("exit {}", show.code_text()))
        .context(|| show.to_string())
        .gap(GapKind::UnreadableCardBlocks);
    }
}
