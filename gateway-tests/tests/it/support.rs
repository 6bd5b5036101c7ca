//! Plumbing the gateway tests share: starting the gateway, the timeouts of tests that expect a
//! blocked dispatcher, and the words and findings several tests' verdicts use. The verdicts
//! themselves stay in the tests.

use std::time::Duration;

use fixtures::gateway::{Gateway, GatewaySpec, StopReport};
use fixtures::target::{Readiness, Target};
use judge::prelude::*;

use crate::MAX_FAILED_ATTEMPTS;

pub use fixtures::scenario::STOP_GRACE;

/// Starts `gateway run` on `board` under a guard that stops it within [`STOP_GRACE`].
///
/// # Panics
/// With the log tail when the gateway cannot start or never gets ready (the scenario cannot run
/// at all).
pub fn start_gateway(board: &Board) -> Gateway {
    Gateway::spawn(board.gateway_spec().stop_grace(STOP_GRACE))
}

/// How long one probe may stay in triage in a test where a blocked dispatcher is the failure
/// looked for: many of the target's ticks (and its CLI start-up), yet short enough that a target
/// whose dispatcher blocks for minutes fails in seconds.
pub fn blocked_probe_timeout(target: &Target) -> Duration {
    if target.is_reference() {
        Duration::from_secs(10)
    } else {
        Duration::from_secs(20)
    }
}

/// The wall-clock span of `ticks` dispatcher ticks of `target`, plus one for a tick in progress.
///
/// Used only where probes cannot prove ticks because nothing may be decomposed at all (the kill
/// switch is off, the provider is paused, the hourly ceiling is reached); each such test also
/// shows the gateway ticking before and after the span.
pub fn span_of_ticks(target: &Target, ticks: usize) -> Duration {
    let ticks = u32::try_from(ticks + 1).unwrap_or(u32::MAX);
    target.tick_interval().saturating_mul(ticks)
}

/// How long a failing card's target gets to spend the card's whole budget: far more than the
/// reference needs with its short backoff (under 2 s), and several upstream ticks.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(10);

/// Gives a failing card's target time to spend the card's whole budget (up to
/// [`SETTLE_TIMEOUT`]), so that the ticks proven afterwards cover the moment a broken budget
/// would bill once more. A target that backs off longer gets a window that says so.
pub fn spend_budget(run: &mut Scenario<'_>, card: &str) {
    let board = run.board();
    run.settle(
        SETTLE_TIMEOUT,
        &format!("{MAX_FAILED_ATTEMPTS} bills for {card}"),
        || board.aux().billed_for(card) >= MAX_FAILED_ATTEMPTS,
    );
}

/// The note of a rebill verdict: the card's status and `settings` in the target's terms.
pub fn rebill_note(board: &Board, card: &str, settings: &[Setting]) -> String {
    let mut note = format!("status={}", board.rows().status(card));
    for setting in settings {
        note.push_str(&format!("; {}", board.setting(*setting)));
    }
    note
}

/// What every failed decomposition leaves on any sane target, as findings for the test's own
/// verdict: no child rows, no links under the card, no `decomposed` event, and the card still in
/// triage.
pub fn no_graph_findings(board: &Board, card: &str) -> Findings {
    let rows = board.rows();
    let findings = Findings::new()
        .equal("children", &rows.children_of(card), &Vec::new())
        .equal(
            "decomposed events",
            &rows.events(card, "decomposed").len(),
            &0,
        )
        .equal("status", &rows.status(card).as_str(), &"triage");
    findings
}

/// The spec of another `gateway run` on `board`, logging to `name`.log beside the board, not
/// waiting for readiness: a target may rightly refuse to dispatch a board another gateway
/// dispatches, and a refused gateway never gets ready.
pub fn another_gateway_spec(board: &Board, name: &str) -> GatewaySpec {
    let mut spec = board
        .gateway_spec()
        .readiness(Readiness::Immediate, Duration::ZERO)
        .stop_grace(STOP_GRACE);
    spec.log = board.root().join(format!("{name}.log"));
    spec
}

/// [`another_gateway_spec`] with a lock directory of its own, so that the reference's singleton
/// lock does not stop it.
pub fn second_gateway_spec(board: &Board, name: &str) -> GatewaySpec {
    another_gateway_spec(board, name).env_var(
        "HERMES_GATEWAY_LOCK_DIR",
        board.root().join(format!("{name}-locks")),
    )
}

/// A base URL on this machine where nothing listens, and where no other test's fake provider
/// can start listening meanwhile (see `fixtures::closed_port`).
pub fn closed_port_url() -> String {
    fixtures::closed_port::closed_port_url()
}

/// Whole milliseconds of `duration`, as verdicts count them.
pub fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Creates `count` triage cards titled `{title} {i}` beside a running gateway, each answered
/// first by `held` and then at once. Until every card has its own reply, `held` is the default
/// too: a gateway may bill a card between its creation and its reply being set, and that call
/// must be held as well.
pub fn create_held_cards(board: &Board, title: &str, count: usize, held: &Reply) -> Vec<String> {
    let aux = board.aux();
    aux.reply_default(held.clone());
    let cards = (0..count)
        .map(|i| {
            let card = board.create(&format!("{title} {i}"), &["--triage"]);
            aux.reply_in_turn(&card, vec![held.clone(), Reply::default_single()]);
            card
        })
        .collect();
    aux.reply_default(Reply::default_single());
    cards
}

/// How a stop went, for the note of a verdict on a prompt SIGTERM.
pub fn stop_note(stop: &StopReport) -> String {
    format!(
        "took {:.1}s, exit code {:?}, escalated to SIGKILL after {}s: {}",
        stop.elapsed.as_secs_f64(),
        stop.exit_code,
        STOP_GRACE.as_secs(),
        stop.escalated
    )
}

/// Creates a triage card whose first call is answered only once `gate` is released, and any
/// later call at once: held in flight by the first process to bill it, while a target with no
/// claim shows a second bill instead of waiting on itself.
pub fn card_held_in_flight(board: &Board, title: &str) -> (String, Gate) {
    let card = board.create(title, &["--triage"]);
    let gate = Gate::new();
    board.aux().reply_in_turn(
        &card,
        vec![
            Reply::default_single().gated(&gate),
            Reply::default_single(),
        ],
    );
    (card, gate)
}
