//! Cards a person is holding are never decomposed by the gateway, while a fresh card beside them
//! is. (The `--no-auto-decompose` opt-out is the reference's own flag: see `reference_only`.)

use std::time::{SystemTime, UNIX_EPOCH};

use fixtures::observe;
use fixtures::prelude::*;
use rstest::rstest;

use crate::support::{await_left_triage, start_gateway};
use crate::PROBE_TICKS;

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_secs()).unwrap_or(i64::MAX)
        })
}

#[rstest]
fn human_holds_are_never_auto_decomposed_while_a_fresh_card_is(
    #[with(GATEWAY_CONFIG)] board: Board,
) {
    let aux = board.aux();
    let prior_run = board.create("a card that already ran once", &["--triage"]);
    let needs_input = board.create("a card waiting for its owner's answer", &["--triage"]);
    let capability = board.create("a card waiting for a missing capability", &["--triage"]);
    // No CLI verb leaves a triage card in these states; a worker run and a typed block routed
    // back to triage (upstream's block recurrence) do.
    board.simulate_other_writer(
        "UPDATE tasks SET started_at = ?1 WHERE id = ?2",
        params![unix_now(), prior_run],
    );
    board.simulate_other_writer(
        "UPDATE tasks SET block_kind = 'needs_input' WHERE id = ?1",
        [&needs_input],
    );
    board.simulate_other_writer(
        "UPDATE tasks SET block_kind = 'capability' WHERE id = ?1",
        [&capability],
    );
    let fresh = board.create("a fresh idea", &["--triage"]);
    let holds = [
        ("prior runs", prior_run),
        ("block_kind needs_input", needs_input),
        ("block_kind capability", capability),
    ];

    let gateway = start_gateway(&board);
    await_left_triage(
        &board,
        &gateway,
        std::slice::from_ref(&fresh),
        board.target().first_bill_timeout(),
        "the fresh card auto-decomposed",
    );
    prove_ticks(&board, &gateway, PROBE_TICKS);
    let held_bills: Vec<usize> = holds.iter().map(|(_, id)| aux.billed_for(id)).collect();
    drop(gateway);
    observe::record("bills_for_held_cards", held_bills.iter().sum(), Some(0));

    assert_eq!(
        aux.billed_for(&fresh),
        1,
        "the fresh card beside the holds is decomposed with one call (bound 1)\n{}",
        board.diag(&fresh)
    );
    known_gate("human_holds_auto_decomposed", || {
        let broken: Vec<String> = holds
            .iter()
            .zip(&held_bills)
            .filter_map(|((hold, id), &bills)| {
                let status = board.task(id).status;
                (bills > 0 || status != "triage")
                    .then(|| format!("{hold} card billed {bills} aux calls, status={status}"))
            })
            .collect();
        if !broken.is_empty() {
            return Err(Gap::new(
                GapKind::HoldDecomposed,
                format!(
                    "human holds auto-decomposed over >= {PROBE_TICKS} dispatcher ticks: {} \
                     (bound 0 calls, status triage)",
                    broken.join("; ")
                ),
            ));
        }
        Ok(())
    });
}
