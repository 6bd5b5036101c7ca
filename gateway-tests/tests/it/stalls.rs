//! A reply that starts and then stops, through a running gateway (contract §7 B8): a body stalled after
//! its head or mid-stream blocks neither the tick loop nor the shutdown while its call is in
//! flight, and the call ends at the call timeout, seen from the provider's side as the gateway
//! hanging up, so the card's next attempt comes and succeeds.

use std::time::{Duration, Instant};

use fixtures::aux_model::graph_value;
use fixtures::aux_model::{AnswerEnd, Received};
use judge::prelude::*;
use rstest::rstest;

use crate::support::{blocked_probe_timeout, millis, no_graph_findings, stop_note};
use crate::{PROBE_TICKS, SHORT_BACKOFF};

/// Longer than any test: a stalled body never resumes by itself (dropping the provider ends the
/// stall at once).
const STALL: Duration = Duration::from_secs(600);

/// A call timeout beyond the test, so the stalled call is still in flight while the probes are
/// proven: the dispatcher must not be waiting for it.
const LONG_TIMEOUT: f64 = 300.0;

/// The call timeout of the tests whose stalled call must end: short, and long against a tick.
const CALL_TIMEOUT: f64 = 1.0;

/// How long after the timeout the gateway may hang up: its timer starts before the request
/// arrives, on a loaded machine.
const HANG_UP_SLACK: Duration = Duration::from_millis(1500);

/// How long the card may take to be decomposed by its second attempt: the timeout, the backoff,
/// a tick, and start-up.
const SECOND_ATTEMPT_WITHIN: Duration = Duration::from_secs(15);

/// The contract's bound on a SIGTERM'd gateway's exit, a call in flight or not.
const SIGTERM_BOUND: Duration = Duration::from_secs(5);

/// A healthy 2-child graph, stalled as the case says.
fn stalled(shape: &str) -> Reply {
    let graph = graph_value(2, &[]);
    match shape {
        "after_head" => Reply::json(graph).stalled_after_head(STALL),
        "mid_event_stream" => Reply::event_stream(graph.to_string()).stalled_mid_body(STALL),
        other => unreachable!("no stall shape {other}"),
    }
}

/// The card's first call as the provider saw it.
fn first_call(board: &Board, card: &str) -> Option<Received> {
    board
        .aux()
        .billed_calls()
        .into_iter()
        .find(|call| call.card().as_deref() == Some(card))
}

#[rstest]
#[case::after_head("after_head")]
#[case::mid_event_stream("mid_event_stream")]
fn a_stalled_body_in_flight_stops_neither_the_dispatcher_nor_the_shutdown(
    #[case] shape: &str,
    #[with(Config::gateway().call_timeout(LONG_TIMEOUT))] board: Board,
) {
    let aux = board.aux();
    let stalled_card = board.create("a card whose reply stops halfway", &["--triage"]);
    aux.reply(&stalled_card, stalled(shape));

    let mut run = board.scenario();
    run.start()
        .first_bill(&stalled_card)
        .prove_ticks_within(PROBE_TICKS, blocked_probe_timeout(board.target()));
    let bills = aux.billed_for(&stalled_card);
    let during = first_call(&board, &stalled_card);
    let seen = run.stop();
    let stop = seen.stopped();

    // The precondition: the probes were proven while the stall was in progress.
    let stalled_meanwhile = during.as_ref().is_some_and(|call| {
        call.answer.head_sent.is_some()
            && call.answer.end.is_none()
            && call.answer.stall.map(|stall| stall.after_bytes) == Some(call.answer.body_bytes_sent)
    });
    holds(
        "the stalled answer was still in flight while the probes were proven",
        stalled_meanwhile,
    )
    .note(|| format!("{:?}", during.as_ref().map(|call| &call.answer)))
    .gap(GapKind::DispatcherBlocked);
    bound(
        "tick probes decomposed while a body stalls",
        seen.window.probes().len(),
    )
    .exactly(PROBE_TICKS)
    .over(&seen)
    .note(|| board.setting(Setting::CallTimeout))
    .gap(GapKind::DispatcherBlocked);
    bound("bills for the card whose body stalls", bills)
        .at_most(1)
        .over(seen.window.describe())
        .context(|| board.diag(&stalled_card))
        .gap(GapKind::InFlightRebilled);
    holds(
        "gateway with a stalled body in flight stops cleanly within 5 s of SIGTERM",
        stop.clean() && stop.elapsed <= SIGTERM_BOUND,
    )
    .note(|| stop_note(stop))
    .gap(GapKind::SlowShutdown);
    no_graph_findings(&board, &stalled_card)
        .verdict("a stalled body wrote no rows")
        .context(|| board.diag(&stalled_card))
        .gap(GapKind::FailureWroteRows);
}

#[rstest]
#[case::after_head("after_head")]
#[case::mid_event_stream("mid_event_stream")]
fn a_stalled_body_ends_at_the_call_timeout_and_the_next_attempt_succeeds(
    #[case] shape: &str,
    #[with(Config::gateway().call_timeout(CALL_TIMEOUT).backoff(SHORT_BACKOFF))] board: Board,
) {
    let aux = board.aux();
    let card = board.create("a card whose first reply stops halfway", &["--triage"]);
    aux.reply_in_turn(&card, vec![stalled(shape), Reply::graph(2, &[])]);

    let mut run = board.scenario();
    run.start().first_bill(&card).left_triage(
        std::slice::from_ref(&card),
        SECOND_ATTEMPT_WITHIN,
        "the card decomposed by its second attempt",
    );
    let bills = aux.billed_for(&card);
    let first = first_call(&board, &card);
    let children = board.rows().children_of(&card).len();
    let seen = run.stop();

    let timeout = Duration::from_secs_f64(CALL_TIMEOUT);
    // Until the gateway hung up, or until now when it never did.
    let held = first.as_ref().map(|call| {
        call.answer
            .ended
            .unwrap_or_else(Instant::now)
            .saturating_duration_since(call.arrived)
    });
    bound("bills for a card whose first body stalls", bills)
        .exactly(2)
        .over(&seen)
        .note(|| {
            format!(
                "{children} children; {}",
                board.setting(Setting::CallTimeout)
            )
        })
        .context(|| board.diag(&card))
        .gap(GapKind::CallTimeoutIgnored);
    holds(
        "the gateway hung up on the stalled body",
        first
            .as_ref()
            .is_some_and(|call| call.answer.end == Some(AnswerEnd::ClientClosed)),
    )
    .over(&seen)
    .note(|| format!("{:?}", first.as_ref().map(|call| &call.answer)))
    .gap(GapKind::CallTimeoutIgnored);
    bound(
        "ms the gateway held the stalled body before hanging up",
        held.map_or(u64::MAX, millis),
    )
    // Judged over the window's span, not its interruption: how long the body was held only
    // grows while the test waits, and the missing second attempt is the verdict above.
    .at_most(millis(timeout + HANG_UP_SLACK))
    .over(seen.window.describe())
    .note(|| format!("the stall lasts {}s", STALL.as_secs()))
    .gap(GapKind::CallTimeoutIgnored);
    bound(
        "ms the gateway held the stalled body before hanging up, at least",
        held.map_or(0, millis),
    )
    .at_least(millis(timeout.mul_f64(0.9)))
    .over(seen.window.describe())
    .note(|| board.setting(Setting::CallTimeout))
    .gap(GapKind::CallTimeoutIgnored);
}
