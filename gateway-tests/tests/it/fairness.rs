//! Cards whose decomposition keeps failing never take the per-tick slots from fresh cards.

use fixtures::observe;
use fixtures::prelude::*;
use rstest::rstest;

use crate::support::{await_first_bill, blocked_probe_timeout, gateway_config, start_gateway};

/// `kanban.auto_decompose_per_tick` here: exactly as many slots as there are poison cards.
const SLOTS_PER_TICK: usize = 2;

/// "Within a few proven ticks": probes created after the fresh card, each decomposed before the
/// next is created. The fresh card is older than all of them.
const FAIRNESS_TICKS: usize = 3;

#[rstest]
fn fresh_card_is_decomposed_although_failing_cards_came_first() {
    let board = Board::new(&gateway_config(&format!(
        "kanban:\n  auto_decompose_per_tick: {SLOTS_PER_TICK}\n"
    )));
    let aux = board.aux();
    let poison: Vec<String> = (0..SLOTS_PER_TICK)
        .map(|i| board.create(&format!("poison card {i}"), &["--triage"]))
        .collect();
    for card in &poison {
        aux.reply(card, Reply::malformed());
    }

    let gateway = start_gateway(&board);
    for card in &poison {
        await_first_bill(&board, &gateway, card);
    }
    let fresh = board.create("a fresh idea", &["--triage"]);
    let ticks = try_prove_ticks_within(
        &board,
        &gateway,
        FAIRNESS_TICKS,
        blocked_probe_timeout(board.target()),
    );
    let fresh_bills = aux.billed_for(&fresh);
    let poison_bills: Vec<usize> = poison.iter().map(|card| aux.billed_for(card)).collect();
    drop(gateway);
    observe::record("bills_for_fresh_card", fresh_bills, Some(1));

    let fresh_status = board.task(&fresh).status;
    known_gate("fresh_card_starved", || {
        if fresh_status == "triage" {
            return Err(Gap::new(
                GapKind::StarvedCard,
                format!(
                    "fresh card still in triage after {FAIRNESS_TICKS} tick probes were \
                     attempted (billed {fresh_bills}) while {SLOTS_PER_TICK} poison cards were \
                     billed {poison_bills:?} times (auto_decompose_per_tick {SLOTS_PER_TICK}; \
                     bound: out of triage within {FAIRNESS_TICKS} proven ticks)"
                ),
            ));
        }
        ticks?;
        Ok(())
    });
    if fresh_status != "triage" {
        assert_eq!(
            fresh_bills,
            1,
            "the fresh card is decomposed with one call (bound 1)\n{}",
            board.diag(&fresh)
        );
    }
}
