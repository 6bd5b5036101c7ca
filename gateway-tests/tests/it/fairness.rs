//! Cards whose decomposition keeps failing never take the per-tick slots from fresh cards.

use fixtures::prelude::*;
use rstest::rstest;

use crate::support::{blocked_probe_timeout, start_gateway};

/// Cards attempted per tick here: exactly as many slots as there are poison cards.
const SLOTS_PER_TICK: u32 = 2;

/// "Within a few proven ticks": probes created after the fresh card, each decomposed before the
/// next is created. The fresh card is older than all of them.
const FAIRNESS_TICKS: usize = 3;

#[rstest]
fn fresh_card_is_decomposed_although_failing_cards_came_first(
    #[with(Config::gateway().per_tick(SLOTS_PER_TICK))] board: Board,
) {
    let aux = board.aux();
    let poison: Vec<String> = (0..SLOTS_PER_TICK)
        .map(|i| board.create(&format!("poison card {i}"), &["--triage"]))
        .collect();
    for card in &poison {
        aux.reply(card, Reply::malformed());
    }

    let mut window = Window::start();
    let gateway = start_gateway(&board);
    for card in &poison {
        window.first_bill(&board, &gateway, card);
    }
    let fresh = board.create("a fresh idea", &["--triage"]);
    window.prove_ticks_within(
        &board,
        &gateway,
        FAIRNESS_TICKS,
        blocked_probe_timeout(board.target()),
    );
    let fresh_bills = aux.billed_for(&fresh);
    let poison_bills: Vec<usize> = poison.iter().map(|card| aux.billed_for(card)).collect();
    drop(gateway);

    let fresh_status = board.rows().status(&fresh);
    holds(
        format!("fresh card left triage within {FAIRNESS_TICKS} tick probes"),
        fresh_status != "triage",
    )
    .over(&window)
    .note(|| {
        format!(
            "status={fresh_status}, billed {fresh_bills}, while {SLOTS_PER_TICK} poison cards were \
             billed {poison_bills:?} times; {}",
            board.setting(Setting::PerTick)
        )
    })
    .context(|| board.diag(&fresh))
    .gap(GapKind::StarvedCard);
    bound("bills for fresh card", fresh_bills)
        .at_most(1)
        .over(window.describe())
        .context(|| board.diag(&fresh))
        .gap(GapKind::RebilledAfterDecompose);
}
