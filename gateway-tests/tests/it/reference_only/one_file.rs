//! What the reference's own records keep when the board is handled as one file: a copy of
//! `kanban.db` alone after a clean stop holds every paid call and the parked budget; with
//! `-wal`/`-shm` swapped under the gateway every request still has its ledger row, and the
//! gateway says what happened (one WARN per swap noticed).

use judge::prelude::*;
use rstest::rstest;

use crate::one_file::{run_and_stop, swap_wal_files_under_a_gateway};
use crate::{MAX_FAILED_ATTEMPTS, SHORT_BACKOFF};

#[rstest]
fn a_copy_of_kanban_db_alone_holds_every_paid_call_and_the_parked_budget(
    #[with(Config::gateway().backoff(SHORT_BACKOFF))] board: Board,
) {
    let run = run_and_stop(&board);
    let restored = Board::new(Config::gateway().backoff(SHORT_BACKOFF));
    restored.restore_board_file_from(&board);
    let rows = restored.rows();

    bound(
        "ledger rows of the poison card in the copy",
        rows.ledger(&run.poison).len(),
    )
    .exactly(run.poison_bills)
    .over(&run.window)
    .context(|| restored.diag(&run.poison))
    .gap(GapKind::CallNotVisible);
    let state = rows.decompose_state(&run.poison);
    Findings::new()
        .equal(
            "attempts counted",
            &state.as_ref().map(|s| s.attempts),
            &Some(MAX_FAILED_ATTEMPTS as i64),
        )
        .equal("parked", &state.as_ref().map(|s| s.parked), &Some(true))
        .verdict("the copy keeps the poison card's spent budget")
        .over(&run.window)
        .context(|| restored.diag(&run.poison))
        .gap(GapKind::BudgetNotPersisted);
}

#[rstest]
fn wal_files_swapped_under_the_gateway_keep_every_paid_call_and_are_warned_about(
    #[with(Config::gateway().backoff(SHORT_BACKOFF))] board: Board,
) {
    let swapped = swap_wal_files_under_a_gateway(&board);
    let log = swapped.seen.log();
    let aux = board.aux();
    let rows = board.rows();
    let cards: Vec<&String> = std::iter::once(&swapped.poison)
        .chain(&swapped.acknowledged)
        .collect();
    let unrecorded: Vec<(String, usize, usize)> = cards
        .iter()
        .map(|card| {
            (
                card.to_string(),
                aux.billed_for(card),
                rows.ledger(card).len(),
            )
        })
        .filter(|(_, bills, rows)| bills != rows)
        .collect();
    bound(
        "cards whose requests and ledger rows differ after the swaps",
        unrecorded.len(),
    )
    .at_most(0)
    .over(&swapped.seen)
    .note(|| format!("(card, requests, ledger rows): {unrecorded:?}"))
    .gap(GapKind::CallNotVisible);

    let warned = |part: &str| {
        log.lines()
            .filter(|line| line.contains(" WARN ") && line.contains(&format!("{part} was")))
            .count()
    };
    for part in ["kanban.db-shm", "kanban.db-wal"] {
        let count = warned(part);
        holds(
            format!("the gateway warned that {part} was swapped, at most once per swap"),
            (1..=swapped.acknowledged.len()).contains(&count),
        )
        .over(&swapped.seen)
        .note(|| format!("{count} WARN lines naming {part}"))
        .context(|| log.clone())
        .gap(GapKind::CallNotVisible);
    }
}
