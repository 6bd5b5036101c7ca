//! Plumbing the gateway tests share: config composition, starting the gateway, bounded waits
//! and the wording of the bounds. Verdicts stay in the tests.

use std::time::{Duration, Instant};

use fixtures::board::deep_merge;
use fixtures::prelude::*;
use fixtures::wait::POLL_INTERVAL;
use serde_norway::Value as Yaml;

use crate::{MAX_FAILED_ATTEMPTS, PROBE_TICKS};

/// How long SIGTERM may take before the guard escalates to SIGKILL: the contract's 5 s, plus a
/// second of slack for process start-up noise. A target that ignores SIGTERM mid-call costs this
/// much, not the guard's default 20 s.
pub const STOP_GRACE: Duration = Duration::from_secs(6);

/// The seed's gateway settings with `extra` (YAML) merged over them, `extra` winning.
///
/// # Panics
/// When either text is not a YAML mapping: a typo in a test's own config.
pub fn gateway_config(extra: &str) -> String {
    let parse = |text: &str| match serde_norway::from_str::<Yaml>(text) {
        Ok(Yaml::Null) => Yaml::Mapping(Default::default()),
        Ok(value @ Yaml::Mapping(_)) => value,
        Ok(other) => panic!("test config must be a YAML mapping, got {other:?}:\n{text}"),
        Err(error) => panic!("test config is not YAML ({error}):\n{text}"),
    };
    let merged = deep_merge(parse(GATEWAY_CONFIG), parse(extra));
    match serde_norway::to_string(&merged) {
        Ok(text) => text,
        Err(error) => panic!("cannot render the merged test config: {error}"),
    }
}

/// Starts `gateway run` on `board` under a guard that stops it within [`STOP_GRACE`].
///
/// # Panics
/// With the log tail when the gateway cannot start or never gets ready.
pub fn start_gateway(board: &Board) -> Gateway {
    Gateway::spawn(board.gateway_spec().stop_grace(STOP_GRACE))
}

/// Waits for the gateway's first paid call about `card`, and checks the gateway is still up.
///
/// # Panics
/// When no call comes within the target's first-bill timeout, or the gateway exited.
pub fn await_first_bill(board: &Board, gateway: &Gateway, card: &str) {
    wait_until_or(
        || !gateway.running() || board.aux().billed_for(card) >= 1,
        board.target().first_bill_timeout(),
        format!("the first paid auto-decompose call for {card}"),
        || board.diag(card),
    );
    assert_running(gateway);
}

/// Waits until `count()` (bills of some kind) reaches `at_least`, and checks the gateway is
/// still up.
///
/// # Panics
/// When the count is not reached within the target's first-bill timeout, or the gateway exited.
pub fn await_bills(
    board: &Board,
    gateway: &Gateway,
    at_least: usize,
    count: impl Fn() -> usize,
    what: &str,
) {
    wait_until_or(
        || !gateway.running() || count() >= at_least,
        board.target().first_bill_timeout(),
        format!("{at_least} paid auto-decompose call(s) for {what}"),
        || {
            format!(
                "aux calls so far, by card: {:?}\ngateway log tail:\n{}",
                board.aux().billed_ids(),
                gateway.tail()
            )
        },
    );
    assert_running(gateway);
}

/// Waits until every card in `cards` has left triage, within `timeout`.
///
/// # Panics
/// When one is still in triage when the time is up (with its diagnosis), or the gateway exited.
pub fn await_left_triage(
    board: &Board,
    gateway: &Gateway,
    cards: &[String],
    timeout: Duration,
    what: &str,
) {
    let in_triage = |card: &String| {
        board
            .try_task(card)
            .is_none_or(|task| task.status == "triage")
    };
    let waited = try_wait_until(
        || !gateway.running() || !cards.iter().any(in_triage),
        timeout,
        what,
    );
    assert_running(gateway);
    if let Err(timeout) = waited {
        let stuck: Vec<String> = cards.iter().filter(|c| in_triage(c)).cloned().collect();
        let diagnoses: Vec<String> = stuck.iter().map(|card| board.diag(card)).collect();
        panic!(
            "{timeout}; still in triage: {stuck:?}\n{}",
            diagnoses.join("\n")
        );
    }
}

/// Asserts the gateway process is still running.
///
/// # Panics
/// With its exit and log tail when it is not.
pub fn assert_running(gateway: &Gateway) {
    if let Some(exit) = gateway.exit() {
        panic!(
            "the gateway exited ({exit}) while the test needed it\n{}",
            gateway.tail()
        );
    }
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

/// Watches `count` for `span` (or until the gateway exits) and returns its last value.
///
/// This is not a sleep standing in for a condition: the condition is that nothing happens for
/// the whole span, and the span itself is what is being waited out.
pub fn watch_count(gateway: &Gateway, span: Duration, count: impl Fn() -> usize) -> usize {
    let started = Instant::now();
    while gateway.running() && started.elapsed() < span {
        std::thread::sleep(POLL_INTERVAL);
    }
    count()
}

/// The seed's rebill verdict: a card that cannot be decomposed, billed more than
/// [`MAX_FAILED_ATTEMPTS`] times over [`PROBE_TICKS`] proven ticks.
pub fn rebilled_every_tick(bills: usize, status: &str) -> Result<(), Gap> {
    if bills > MAX_FAILED_ATTEMPTS {
        return Err(Gap::new(
            GapKind::RebilledEveryTick,
            format!(
                "doomed card billed {bills} aux decompose calls over >= {} dispatcher ticks \
                 (bound {MAX_FAILED_ATTEMPTS}); status={status}",
                PROBE_TICKS + 1
            ),
        ));
    }
    Ok(())
}

/// Asserts that no graph was written for `card`: no child rows, no `decomposed` event.
///
/// # Panics
/// With the card's diagnosis when a graph exists.
pub fn assert_no_graph(board: &Board, card: &str) {
    assert_eq!(
        board.children_of(card),
        Vec::<String>::new(),
        "a failed decomposition wrote child rows\n{}",
        board.diag(card)
    );
    assert!(
        board.events(card, "decomposed").is_empty(),
        "a failed decomposition left a `decomposed` event\n{}",
        board.diag(card)
    );
}
