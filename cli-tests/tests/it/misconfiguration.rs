//! A config written by upstream works as it is, on every target: the keys upstream's own default
//! config carries under `kanban:` and `auxiliary.kanban_decomposer:` are read without a word
//! about them, and cost the decomposition nothing. (Warnings about keys no implementation
//! defines are the reference's own: `reference_only::misconfiguration`.)

use fixtures::cli::CliOutput;
use fixtures::upstream::{DEFAULT_KEYS, DEFAULT_KEYS_YAML};
use judge::prelude::*;
use rstest::rstest;

use crate::{assert_no_crash, decompose_card};

/// The stderr lines of `output` that name any of `keys`.
pub fn lines_naming(output: &CliOutput, keys: &[&str]) -> Vec<String> {
    output
        .stderr
        .lines()
        .filter(|line| keys.iter().any(|key| line.contains(key)))
        .map(str::to_owned)
        .collect()
}

#[rstest]
fn upstreams_own_keys_are_read_in_silence(
    #[with(Config::plain().yaml(DEFAULT_KEYS_YAML))] board: Board,
) {
    let aux = board.aux();
    let card = board.create("an idea on a board configured by upstream", &["--triage"]);
    aux.reply(&card, Reply::graph(2, &[]));

    let run = decompose_card(&board, &card);
    let sweep_card = board.create("another idea on that board", &["--triage"]);
    aux.reply(&sweep_card, Reply::graph(2, &[]));
    let sweep = board.cli_unchecked(["kanban", "decompose", "--all", "--json"]);
    assert_no_crash(&sweep);

    let named: Vec<String> = [&run.output, &sweep]
        .into_iter()
        .flat_map(|output| lines_naming(output, &DEFAULT_KEYS))
        .collect();
    bound(
        "stderr lines naming one of upstream's own keys",
        named.len(),
    )
    .at_most(0)
    .note(|| named.join(" | "))
    .context(|| format!("{}\n{sweep}", run.output))
    .gap(GapKind::SilentMisconfiguration);
    bound(
        "requests under upstream's own keys",
        aux.billed_for(&card) + aux.billed_for(&sweep_card),
    )
    .exactly(2)
    .context(|| format!("{}\n{sweep}", run.output))
    .gap(GapKind::NotOneRequest);
    holds(
        "both cards are decomposed under upstream's own keys",
        board.rows().children_of(&card).len() == 2
            && board.rows().children_of(&sweep_card).len() == 2,
    )
    .context(|| format!("{}\n{sweep}\n{}", run.output, board.diag(&card)))
    .gap(GapKind::ReplyNotApplied);
}
