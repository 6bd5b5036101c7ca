//! A provider that never answers holds one card's call, not the dispatcher: other cards keep
//! being decomposed while it hangs, and SIGTERM still stops the gateway promptly.

use std::time::Duration;

use judge::prelude::*;
use rstest::rstest;

use crate::support::{blocked_probe_timeout, no_graph_findings, stop_note};
use crate::PROBE_TICKS;

/// Longer than the test: the provider never answers the hung card (dropping the provider ends
/// the hang at once).
const HANG: Duration = Duration::from_secs(600);

/// A call timeout beyond the test, so the hung call is still in flight while the probes are
/// proven: the dispatcher must not be waiting for it.
const LONG_TIMEOUT: f64 = 300.0;

/// The contract's bound on a SIGTERM'd gateway's exit, a call in flight or not.
const SIGTERM_BOUND: Duration = Duration::from_secs(5);

#[rstest]
fn hung_call_does_not_stop_the_dispatcher_or_the_shutdown(
    #[with(Config::gateway().call_timeout(LONG_TIMEOUT))] board: Board,
) {
    let aux = board.aux();
    let hung = board.create("a card whose provider never answers", &["--triage"]);
    aux.reply(&hung, Reply::hang(HANG));

    let mut run = board.scenario();
    run.start()
        .first_bill(&hung)
        .prove_ticks_within(PROBE_TICKS, blocked_probe_timeout(board.target()));
    let bills = aux.billed_for(&hung);
    // The precondition of every verdict below: the hung call was still open when the probes
    // were done and SIGTERM was sent. A target that ends it early by a timeout of its own has
    // shown nothing about a dispatcher beside a call in flight, nor about stopping with one.
    let in_flight = match aux
        .billed_calls()
        .into_iter()
        .find(|call| call.card().as_deref() == Some(hung.as_str()))
    {
        None => Err(format!("no call about {hung} reached the provider")),
        Some(call) => match call.answer.ended {
            None => Ok(()),
            Some(ended) => Err(format!(
                "the hung call ended ({:?}) {:.1}s after it arrived, before the probes were \
                 done and SIGTERM was sent",
                call.answer.end,
                ended.saturating_duration_since(call.arrived).as_secs_f64()
            )),
        },
    };
    let seen = run.stop();
    let stop = seen.stopped();

    bound(
        "tick probes decomposed while a call hangs",
        seen.window.probes().len(),
    )
    .exactly(PROBE_TICKS)
    .over(&seen)
    .note(|| board.setting(Setting::CallTimeout))
    .provided(&in_flight)
    .gap(GapKind::DispatcherBlocked);
    // Judged over the window's span, not its interruption: a blocked dispatcher is the verdict
    // above, and the call in flight is what this one is about.
    bound("bills for hung card", bills)
        .at_most(1)
        .over(seen.window.describe())
        .context(|| board.diag(&hung))
        .provided(&in_flight)
        .gap(GapKind::InFlightRebilled);
    holds(
        "gateway with a hung call in flight stops cleanly within 5 s of SIGTERM",
        stop.clean() && stop.elapsed <= SIGTERM_BOUND,
    )
    .note(|| stop_note(stop))
    .provided(&in_flight)
    .gap(GapKind::SlowShutdown);
    no_graph_findings(&board, &hung)
        .verdict("failed decomposition wrote no rows")
        .context(|| board.diag(&hung))
        .gap(GapKind::FailureWroteRows);
}
