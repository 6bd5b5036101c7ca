//! Limits at their boundary, through the gateway: exactly `auto_decompose_per_tick` cards in
//! flight while every reply hangs (not one more, not one fewer), as many at once right after a
//! first good answer, and a fan-out of exactly the child cap applied while one child more is
//! rejected whole. (The attempt budget's boundary is in `budget`.)

use std::time::{Duration, Instant};

use judge::prelude::*;
use rstest::rstest;

use crate::support::{blocked_probe_timeout, span_of_ticks};
use crate::{DEFAULT_MAX_CHILDREN, PROBE_TICKS, SHORT_BACKOFF};

/// Cards attempted per tick in the in-flight test.
const PER_TICK: u32 = 3;

/// Cards waiting: more than fit in one tick's slots.
const WAITING_CARDS: usize = 5;

/// Longer than the test: no hung call ends by itself while it runs.
const HANG: Duration = Duration::from_secs(600);

/// A call timeout beyond the test, so every hung call stays in flight.
const LONG_TIMEOUT: f64 = 300.0;

#[rstest]
fn exactly_per_tick_cards_are_in_flight_while_every_reply_hangs(
    #[with(Config::gateway().per_tick(PER_TICK).call_timeout(LONG_TIMEOUT))] board: Board,
) {
    let target = board.target();
    let aux = board.aux();
    let cards: Vec<String> = (0..WAITING_CARDS)
        .map(|i| {
            let card = board.create(&format!("a card whose provider hangs {i}"), &["--triage"]);
            aux.reply(&card, Reply::hang(HANG));
            card
        })
        .collect();
    let limit = PER_TICK as usize;

    let mut run = board.scenario();
    run.start();
    // A target may send one call first and fan out only once the provider proves to answer
    // (the reference waits 2 s); then it has `PER_TICK` in flight, and every later tick finds
    // no free slot. The watch spans ticks by the clock: nothing can be decomposed meanwhile.
    run.bills(1, || aux.bills(), "any waiting card")
        .settle(
            blocked_probe_timeout(target),
            &format!("{limit} cards in flight"),
            || aux.bills() >= limit,
        )
        .watch(span_of_ticks(target, PROBE_TICKS));
    let billed = aux.billed_ids();
    let distinct = cards.iter().filter(|card| billed.contains(*card)).count();
    // Nothing is judged about stopping here, and SIGTERM would wait for the hung calls.
    run.kill9();
    let seen = run.stop();

    bound("calls while every reply hangs", billed.len())
        .at_most(limit)
        .over(&seen)
        .note(|| {
            format!(
                "billed in order: {billed:?}; {}",
                board.setting(Setting::PerTick)
            )
        })
        .gap(GapKind::PerTickExceeded);
    bound("cards in flight at once while every reply hangs", distinct)
        .at_least(limit)
        .over(&seen)
        .note(|| {
            format!(
                "billed in order: {billed:?}; {}",
                board.setting(Setting::PerTick)
            )
        })
        .gap(GapKind::DispatcherBlocked);
}

/// The configured child cap of the second case: below the contract's, so a target that ignores
/// the setting applies the fan-out one over it.
const LOWER_CAP: u32 = 5;

/// How long every reply is held in the fan-out test: long enough that the calls sent in one tick
/// are all in flight together, and shorter than the reference's 2 s probe window, so that only
/// an answer (not the window running out) can let its gateway fan out.
const HELD_REPLY: Duration = Duration::from_secs(1);

/// The most calls in flight together: for each call, the calls that arrived before it was
/// answered (every reply is held exactly `held` after its call arrived).
fn most_in_flight_together(arrivals: &[Instant], held: Duration) -> usize {
    arrivals
        .iter()
        .map(|first| {
            arrivals
                .iter()
                .filter(|at| *at >= first && at.duration_since(*first) < held)
                .count()
        })
        .max()
        .unwrap_or(0)
}

#[rstest]
fn after_a_first_good_answer_the_next_tick_sends_per_tick_calls_at_once(
    #[with(Config::gateway().per_tick(PER_TICK))] board: Board,
) {
    let target = board.target();
    let aux = board.aux();
    // One card more than a tick's slots: whichever goes first, as a probe or not, the others
    // fill a whole tick once it is answered.
    let cards: Vec<String> = (0..=PER_TICK)
        .map(|i| {
            board.create(
                &format!("a card answered after a second {i}"),
                &["--triage"],
            )
        })
        .collect();
    aux.reply_default(Reply::default_single().delayed(HELD_REPLY));
    let limit = PER_TICK as usize;

    let mut run = board.scenario();
    run.start()
        .left_triage(&cards, target.first_bill_timeout(), "every card decomposed");
    let seen = run.stop();
    let mut arrivals: Vec<Instant> = cards.iter().flat_map(|card| aux.bill_times(card)).collect();
    arrivals.sort();
    let together = most_in_flight_together(&arrivals, HELD_REPLY);

    bound(
        "calls in flight together once the provider answered",
        together,
    )
    .at_least(limit)
    .over(&seen)
    .note(|| {
        format!(
            "every reply held {:.1}s; billed in order: {:?}; {}",
            HELD_REPLY.as_secs_f64(),
            aux.billed_ids(),
            board.setting(Setting::PerTick)
        )
    })
    .gap(GapKind::DispatcherBlocked);
}

#[rstest]
#[case::contract_cap(None)]
#[case::configured_cap(Some(LOWER_CAP))]
fn a_fanout_at_the_child_cap_is_applied_and_one_child_more_is_rejected(
    #[case] configured: Option<u32>,
) {
    let mut config = Config::gateway().backoff(SHORT_BACKOFF);
    if let Some(cap) = configured {
        config = config.max_children(cap);
    }
    let board = Board::new(config);
    // A target without the setting is judged by the contract's cap.
    let cap = match configured {
        Some(cap) if board.reads(Setting::MaxChildren) => cap as usize,
        _ => DEFAULT_MAX_CHILDREN,
    };
    let aux = board.aux();
    let at_cap = board.create("a feature of exactly the cap's size", &["--triage"]);
    let over_cap = board.create("a feature one part too big", &["--triage"]);
    aux.reply(&at_cap, Reply::graph(cap, &[]));
    aux.reply(&over_cap, Reply::graph(cap + 1, &[]));

    let mut run = board.scenario();
    run.start()
        .until_left_triage(&at_cap, "the fan-out at the cap applied")
        .first_bill(&over_cap)
        .prove_ticks(2);
    let seen = run.stop();

    let rows = board.rows();
    let applied = rows.children_of(&at_cap).len();
    bound("children of a fan-out at the child cap", applied)
        .exactly(cap)
        .over(&seen)
        .note(|| board.setting(Setting::MaxChildren))
        .context(|| board.diag(&at_cap))
        .gap(GapKind::ReplyNotApplied);
    let over = rows.children_of(&over_cap).len();
    let status = rows.status(&over_cap);
    let findings =
        Findings::new()
            .equal("children", &over, &0)
            .equal("status", &status.as_str(), &"triage");
    findings
        .verdict("a fan-out one child over the cap wrote no rows")
        .over(&seen)
        .note(|| board.setting(Setting::MaxChildren))
        .context(|| board.diag(&over_cap))
        .gap(GapKind::UnboundedFanout);
}
