//! Cards another tool wrote with text that is not text, as the reference answers them: a sweep
//! sets each aside without a request (parked, saying why on stderr), an explicit decompose
//! refuses it (exit 1, no request), and `show` renders the bytes that are not text as U+FFFD.

use fixtures::rows::NotText;
use judge::prelude::*;
use rstest::rstest;
use serde_json::Value;

#[rstest]
fn cards_whose_text_is_not_text_cost_nothing_and_say_why(board: Board) {
    let aux = board.aux();
    let unreadable = board.arrange_cards_not_text();
    let sweep = board.cli_unchecked(["kanban", "decompose", "--all", "--json"]);
    let rows = board.rows();
    for ((column, what), card) in NotText::BY_COLUMN.iter().zip(&unreadable) {
        let by_hand = board.cli_unchecked(["kanban", "decompose", card.as_str(), "--json"]);
        let show = board.cli_unchecked(["kanban", "show", card.as_str(), "--json"]);
        let shown: Value = serde_json::from_str(&show.stdout).unwrap_or(Value::Null);
        let why = if *what == NotText::Blob {
            "stored as a BLOB"
        } else {
            "not valid UTF-8"
        };
        Findings::new()
            .equal("requests", &aux.billed_for(card), &0)
            .that(
                sweep
                    .stderr
                    .contains(&format!("{card} set aside without a request"))
                    && sweep.stderr.contains(why),
                || format!("the sweep says {card} was set aside and why ({why:?})"),
            )
            .equal(
                "parked",
                &rows.decompose_state(card).map(|state| state.parked),
                &Some(true),
            )
            .equal("exit code of a decompose by hand", &by_hand.code, &Some(1))
            .that(
                by_hand.stderr.contains(why) && by_hand.stderr.contains("no request was sent"),
                || format!("the decompose by hand says why ({why:?}) and that nothing was sent"),
            )
            .that(
                shown["task"][*column]
                    .as_str()
                    .is_some_and(|text| text.contains('\u{fffd}')),
                || format!("`show` renders the {column} with U+FFFD: {}", shown["task"]),
            )
            .verdict(format!(
                "a card whose {column} is {} costs nothing and says why",
                what.describe()
            ))
            .context(|| format!("{sweep}\n{by_hand}\n{show}"))
            .gap(GapKind::BilledForNothing);
    }
}
