//! A provider that never answers holds one card's call, not the dispatcher: other cards keep
//! being decomposed while it hangs, and SIGTERM still stops the gateway promptly.

use std::time::Duration;

use fixtures::observe;
use fixtures::prelude::*;
use rstest::rstest;

use crate::support::{
    assert_no_graph, await_first_bill, blocked_probe_timeout, gateway_config, start_gateway,
    STOP_GRACE,
};
use crate::PROBE_TICKS;

/// Longer than the test: the provider never answers the hung card (dropping the provider ends
/// the hang at once).
const HANG: Duration = Duration::from_secs(600);

/// The contract's bound on a SIGTERM'd gateway's exit, a call in flight or not.
const SIGTERM_BOUND: Duration = Duration::from_secs(5);

#[rstest]
fn hung_call_does_not_stop_the_dispatcher_or_the_shutdown() {
    // A call timeout beyond the test, so the hung call is still in flight while the probes are
    // proven: the dispatcher must not be waiting for it.
    let board = Board::new(&gateway_config("auxiliary:\n  timeout_seconds: 300\n"));
    let aux = board.aux();
    let hung = board.create("a card whose provider never answers", &["--triage"]);
    aux.reply(&hung, Reply::hang(HANG));

    let gateway = start_gateway(&board);
    await_first_bill(&board, &gateway, &hung);
    let ticks = try_prove_ticks_within(
        &board,
        &gateway,
        PROBE_TICKS,
        blocked_probe_timeout(board.target()),
    );
    let bills = aux.billed_for(&hung);
    let stop = gateway.stop();
    observe::record("bills_for_hung_card", bills, Some(1));

    assert_eq!(
        bills,
        1,
        "a call still in flight is never sent a second time (bound 1)\n{}",
        board.diag(&hung)
    );
    assert_no_graph(&board, &hung);
    known_gate("hung_call_blocks_dispatcher", || {
        let probes = ticks?;
        assert_eq!(probes.len(), PROBE_TICKS);
        Ok(())
    });
    known_gate("sigterm_with_call_in_flight", || {
        if !stop.clean() || stop.elapsed > SIGTERM_BOUND {
            return Err(Gap::new(
                GapKind::SlowShutdown,
                format!(
                    "gateway with a hung call in flight took {:.1}s to stop after SIGTERM \
                     (exit code {:?}, escalated to SIGKILL after {}s: {}) (bound {}s, exit 0)",
                    stop.elapsed.as_secs_f64(),
                    stop.exit_code,
                    STOP_GRACE.as_secs(),
                    stop.escalated,
                    SIGTERM_BOUND.as_secs()
                ),
            ));
        }
        Ok(())
    });
}
