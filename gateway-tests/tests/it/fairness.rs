//! Cards whose decomposition keeps failing never take the per-tick slots from fresh cards.

use judge::prelude::*;
use rstest::rstest;

use crate::support::blocked_probe_timeout;

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

    let mut run = board.scenario();
    run.start();
    for card in &poison {
        run.first_bill(card);
    }
    let fresh = board.create("a fresh idea", &["--triage"]);
    run.prove_ticks_within(FAIRNESS_TICKS, blocked_probe_timeout(board.target()));
    let fresh_bills = aux.billed_for(&fresh);
    let poison_bills: Vec<usize> = poison.iter().map(|card| aux.billed_for(card)).collect();
    let seen = run.stop();

    let fresh_status = board.rows().status(&fresh);
    holds(
        format!("fresh card left triage within {FAIRNESS_TICKS} tick probes"),
        fresh_status != "triage",
    )
    .over(&seen)
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
        .over(seen.window.describe())
        .context(|| board.diag(&fresh))
        .gap(GapKind::RebilledAfterDecompose);
}

#[rstest]
fn cards_whose_text_is_not_text_never_take_a_fresh_cards_slot(
    #[with(Config::gateway().per_tick(SLOTS_PER_TICK))] board: Board,
) {
    let aux = board.aux();
    // One per way text can go wrong: as many as the per-tick slots.
    let unreadable = board.arrange_cards_not_text();
    let fresh = board.create("a fresh idea", &["--triage"]);

    let mut run = board.scenario();
    run.start()
        .left_triage(
            std::slice::from_ref(&fresh),
            blocked_probe_timeout(board.target()),
            "the fresh card decomposed",
        )
        .prove_ticks_within(FAIRNESS_TICKS, blocked_probe_timeout(board.target()));
    let bills: Vec<usize> = unreadable.iter().map(|card| aux.billed_for(card)).collect();
    let seen = run.stop();

    holds(
        "a fresh card is decomposed although cards whose text is not text came first",
        board.rows().status(&fresh) != "triage",
    )
    .over(&seen)
    .note(|| {
        format!(
            "bills for those cards: {bills:?}; {}",
            board.setting(Setting::PerTick)
        )
    })
    .context(|| board.diag(&fresh))
    .gap(GapKind::UnreadableCardBlocks);
    bound(
        "most bills for one card whose text is not text",
        bills.iter().copied().max().unwrap_or(0),
    )
    .at_most(crate::MAX_FAILED_ATTEMPTS)
    .over(&seen)
    .gap(GapKind::RebilledEveryTick);
}
