//! Time the reference cannot trust (contract §7, "Time"): processes on one host measure waits
//! by the boot's clock, whatever any one wall clock says. A wall clock that jumps ahead or back
//! under a running gateway neither widens the hourly ceiling nor ends a provider pause; rows a
//! clock that ran ahead recorded keep no card and no pause waiting past their own wait once the
//! clock is right again, and are never re-dated; a sweep whose clock is hours behind bills no
//! card early and no call past the ceiling; and what a gateway on a wrong clock billed shows in
//! `usage --since` read on the right one.
//!
//! Wall clocks are moved by the clock shim (see `fixtures::faketime`): only `CLOCK_REALTIME` is
//! faked, the boot's clock runs true. Each test shows the fake clock reached the process it moved
//! (log lines or rows dated by it).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fixtures::faketime::{log_times, sweep_a_day_ahead, DatedAhead, FakeClock, AHEAD};
use judge::prelude::*;
use rstest::rstest;

use crate::support::{card_held_in_flight, span_of_ticks};
use crate::PROBE_TICKS;

/// How far the wall clock jumps ahead: past the ceiling's rolling hour and past the pause.
const JUMP: Duration = Duration::from_secs(2 * 3600 + 60);

/// Starts the gateway on `board` with its wall clock on `clock`.
fn on_clock<'b>(board: &'b Board, clock: &FakeClock) -> Scenario<'b> {
    board.scenario().with_spec(|mut spec| {
        for (name, value) in clock.env() {
            spec = spec.env_var(name, value);
        }
        spec
    })
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_secs()).unwrap_or(i64::MAX)
        })
}

/// Whether a line of `log` written after `since` (the test's real unix seconds) is dated at
/// least an hour ahead of the real clock: the jump reached the gateway.
fn jump_seen_in(log: &str, since: i64) -> bool {
    jump_of_seen_in(log, since, 1)
}

/// Whether a line of `log` written after `since` is dated at least an hour off the real clock
/// in `direction` (1 ahead, -1 behind): a jump that way reached the gateway.
fn jump_of_seen_in(log: &str, since: i64, direction: i64) -> bool {
    let jump = JUMP.as_secs() as i64;
    log_times(log).into_iter().any(|at| {
        if direction > 0 {
            at >= since + 3600 && at <= unix_now() + jump + 60
        } else {
            at <= since - 3600 && at >= since - jump - 60
        }
    })
}

/// The hourly ceiling of the ceiling test.
const CEILING: u32 = 2;

#[rstest]
#[case::ahead(1)]
#[case::behind(-1)]
fn a_jump_of_the_wall_clock_does_not_widen_the_hourly_ceiling(
    #[case] direction: i64,
    #[with(Config::gateway().calls_per_hour(CEILING))] board: Board,
) {
    let target = board.target();
    let aux = board.aux();
    let clock = FakeClock::new(board.root(), 0);
    let cards: Vec<String> = (0..CEILING * 2)
        .map(|i| board.create(&format!("idea {i}"), &["--triage"]))
        .collect();

    let mut run = on_clock(&board, &clock);
    // Nothing more may be decomposed at the ceiling, so probes cannot prove ticks: the watches
    // span ticks by the clock, between the gateway ticking before (the bills) and after (the
    // rest decomposed once the ceiling is raised).
    run.start()
        .bills(
            CEILING as usize,
            || aux.bills(),
            "the calls the hour has room for",
        )
        .watch(span_of_ticks(target, PROBE_TICKS));
    let jumped_at = unix_now();
    clock.set_offset(direction * JUMP.as_secs() as i64);
    run.watch(span_of_ticks(target, PROBE_TICKS));
    let after_jump = aux.bills();
    board.reconfigure(Config::gateway().calls_per_hour(100));
    let window = run.close_window();
    run.left_triage(
        &cards,
        target.first_bill_timeout(),
        "every card decomposed once the ceiling is raised",
    );
    let raised = run.stop();
    let log = raised.log();

    let way = if direction > 0 { "ahead" } else { "back" };
    holds(
        format!("the gateway's wall clock jumped {way}"),
        jump_of_seen_in(&log, jumped_at, direction),
    )
    .over(&raised)
    .context(|| log.clone())
    .gap(GapKind::HourlyCeilingExceeded);
    bound(
        format!(
            "paid calls at a ceiling of {CEILING} an hour, the wall clock jumped {} min {way}",
            JUMP.as_secs() / 60
        ),
        after_jump,
    )
    .exactly(CEILING)
    .over(&window)
    .note(|| format!("billed in order: {:?}", aux.billed_ids()))
    .gap(GapKind::HourlyCeilingExceeded);
    let decomposed = board.rows().left_triage(&cards).len();
    bound("cards decomposed once the ceiling is raised", decomposed)
        .exactly(cards.len())
        .over(&raised)
        .gap(GapKind::PauseNeverEnded);
}

#[rstest]
fn a_forward_jump_of_the_wall_clock_does_not_end_a_provider_pause(
    #[with(Config::gateway().cooldown(3600.0).backoff(crate::SHORT_BACKOFF))] board: Board,
) {
    let target = board.target();
    let aux = board.aux();
    let clock = FakeClock::new(board.root(), 0);
    let cards: Vec<String> = (0..3)
        .map(|i| board.create(&format!("waiting card {i}"), &["--triage"]))
        .collect();
    aux.reply_default(Reply::http_error(401, "invalid api key"));

    let mut run = on_clock(&board, &clock);
    run.start()
        .bills(1, || aux.bills(), "the refused call")
        .until(target.first_bill_timeout(), "the pause recorded", || {
            cards
                .iter()
                .any(|card| !board.rows().events(card, "decompose_failed").is_empty())
        });
    let jumped_at = unix_now();
    clock.set_offset(JUMP.as_secs() as i64);
    // Nothing may be decomposed while paused: the watch spans ticks by the clock, between the
    // gateway ticking before (the refusal) and after (the cards decomposed after `resume`).
    run.watch(span_of_ticks(target, PROBE_TICKS));
    let after_jump = aux.bills();
    aux.reply_default(Reply::default_single());
    board.cli(["kanban", "resume"]);
    let window = run.close_window();
    run.left_triage(
        &cards,
        target.first_bill_timeout(),
        "every waiting card decomposed after `kanban resume`",
    );
    let resumed = run.stop();
    let log = resumed.log();

    holds(
        "the gateway's wall clock jumped ahead",
        jump_seen_in(&log, jumped_at),
    )
    .over(&resumed)
    .context(|| log.clone())
    .gap(GapKind::ProviderFaultNotPaused);
    bound(
        format!(
            "bills under a 60 min pause, the wall clock jumped {} min ahead",
            JUMP.as_secs() / 60
        ),
        after_jump,
    )
    .exactly(1)
    .over(&window)
    .note(|| format!("billed in order: {:?}", aux.billed_ids()))
    .gap(GapKind::ProviderFaultNotPaused);
    let decomposed = board.rows().left_triage(&cards).len();
    bound("waiting cards decomposed after `kanban resume`", decomposed)
        .exactly(cards.len())
        .over(&resumed)
        .gap(GapKind::RecoveryFailed);
}

/// The provider pause after the refusal in the clock-set-back test: short, so that the pause
/// has ended long before the test does, by the boot's clock.
const SHORT_PAUSE: f64 = 1.0;

#[rstest]
fn rows_a_clock_that_ran_ahead_recorded_keep_nothing_waiting_past_its_own_wait(
    #[with(Config::plain().cooldown(SHORT_PAUSE).backoff(0.05).retries(0))] board: Board,
) {
    let target = board.target();
    let aux = board.aux();
    // A sweep run while the clock was a day ahead: a failure (its backoff), a refusal (the
    // board's pause) and their ledger rows, all dated a day ahead.
    let DatedAhead {
        failed,
        refused,
        sweep,
    } = sweep_a_day_ahead(&board);
    let started_at = |board: &Board| -> Vec<i64> {
        board
            .rows()
            .ledger(&failed)
            .iter()
            .chain(&board.rows().ledger(&refused))
            .filter_map(|row| row.columns["started_at_ms"].as_i64())
            .collect()
    };
    let dated_ahead = started_at(&board);
    aux.reply_default(Reply::default_single());
    aux.reply(&failed, Reply::default_single());
    aux.reply(&refused, Reply::default_single());

    // The clock is right again: a gateway on the real clock.
    board.reconfigure(Config::gateway().cooldown(SHORT_PAUSE).backoff(0.05));
    let mut run = board.scenario();
    run.start().left_triage(
        &[failed.clone(), refused.clone()],
        Duration::from_secs_f64(SHORT_PAUSE) + target.first_bill_timeout(),
        "both cards decomposed within their own waits",
    );
    let seen = run.stop();
    let now_ms = unix_now() * 1000;
    let calls = board.cli(["kanban", "usage", "--calls", "--json"]);

    holds(
        "the sweep's rows were dated a day ahead",
        dated_ahead.len() == 2 && dated_ahead.iter().all(|at| *at > now_ms + 3_600_000),
    )
    .note(|| format!("ledger rows started at {dated_ahead:?} (ms), now {now_ms}"))
    .context(|| sweep.to_string())
    .gap(GapKind::BackoffIgnored);
    bound(
        "cards left waiting by rows a corrected clock dated a day ahead",
        [&failed, &refused]
            .iter()
            .filter(|card| board.rows().status(card) == "triage")
            .count(),
    )
    .at_most(0)
    .over(&seen)
    .context(|| format!("{}\n{}", board.diag(&failed), board.diag(&refused)))
    .gap(GapKind::PauseNeverEnded);
    // What the sweep recorded is its record: read by the boot's clock, never rewritten.
    let first_rows = |board: &Board| -> Vec<i64> {
        [&failed, &refused]
            .iter()
            .filter_map(|card| board.rows().ledger(card).first().cloned())
            .filter_map(|row| row.columns["started_at_ms"].as_i64())
            .collect()
    };
    holds(
        "the ledger rows keep the wall times the sweep recorded",
        first_rows(&board) == dated_ahead,
    )
    .note(|| format!("before {dated_ahead:?}, after {:?}", first_rows(&board)))
    .gap(GapKind::CallNotVisible);
    let shown: Vec<f64> = calls_json(&calls.stdout)
        .iter()
        .filter(|call| {
            [&failed, &refused]
                .iter()
                .any(|card| call["task_id"] == ***card)
        })
        .filter_map(|call| call["started_at"].as_f64())
        .collect();
    holds(
        "`usage --calls` shows the sweep's calls when they were made, by this clock",
        shown.len() >= 2
            && shown
                .iter()
                .all(|at| (*at * 1000.0) as i64 <= now_ms + 60_000),
    )
    .note(|| format!("started_at shown {shown:?} (s), now {now_ms} (ms)"))
    .gap(GapKind::CallNotVisible);
}

/// The `--calls --json` lines of `usage`, one JSON object each.
fn calls_json(stdout: &str) -> Vec<serde_json::Value> {
    stdout
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

/// How far behind the real clock the sweep of the next test runs.
const BEHIND_SECS: i64 = -2 * 3600;

/// A gateway at its hourly ceiling, every card failed once and in a 600 s backoff; then a sweep
/// whose wall clock is two hours behind. The sweep bills nothing (the calls of the last hour are
/// the last hour's on its clock too, and the backoffs are 600 s from when they began), and the
/// gateway, still at its ceiling, bills nothing more either: nothing was re-dated to the sweep's
/// clock.
#[rstest]
fn a_sweep_two_hours_behind_bills_no_card_early_and_nothing_past_the_ceiling(
    #[with(Config::gateway().calls_per_hour(CEILING).backoff(600.0).retries(0))] board: Board,
) {
    let target = board.target();
    let aux = board.aux();
    let cards: Vec<String> = (0..CEILING)
        .map(|i| board.create(&format!("fails once {i}"), &["--triage"]))
        .collect();
    aux.reply_default(Reply::malformed());
    let mut run = board.scenario();
    run.start().bills(
        CEILING as usize,
        || aux.bills(),
        "the calls the hour has room for",
    );
    let at_ceiling = aux.mark();
    let behind = FakeClock::new(board.root(), BEHIND_SECS);
    let probe = board.cli_with_env(
        ["kanban", "create", "dated by the clock behind", "--json"],
        behind.env(),
    );
    let sweep = board.cli_with_env(["kanban", "decompose", "--all", "--json"], behind.env());
    let by_sweep = aux.bills_since(at_ceiling);
    run.watch(span_of_ticks(target, PROBE_TICKS));
    let seen = run.stop();
    let clock_behind = probe
        .json()
        .get("id")
        .and_then(|id| id.as_str())
        .and_then(|id| board.rows().task(id).created_at)
        .filter(|&at| at <= unix_now() + BEHIND_SECS + 600)
        .map(|_| ())
        .ok_or_else(|| format!("the CLI's clock was not two hours behind:\n{probe}"));

    bound(
        "bills of a sweep two hours behind, with the gateway at its ceiling and every card in \
         a 600 s backoff",
        by_sweep,
    )
    .at_most(0)
    .context(|| format!("{sweep}\n{}", board.diag(&cards[0])))
    .provided(&clock_behind)
    .gap(GapKind::HourlyCeilingExceeded);
    bound(
        "bills after the gateway reached its ceiling, a sweep two hours behind run meanwhile",
        aux.bills_since(at_ceiling),
    )
    .at_most(0)
    .over(&seen)
    .note(|| format!("billed in order: {:?}", aux.billed_ids()))
    .provided(&clock_behind)
    .gap(GapKind::HourlyCeilingExceeded);
}

/// The cards of the next test fail once each and wait 600 s, with no ceiling in the way.
#[rstest]
fn a_sweep_two_hours_behind_does_not_bill_a_card_in_its_backoff(
    #[with(Config::gateway().backoff(600.0).retries(0))] board: Board,
) {
    let aux = board.aux();
    let card = board.create("fails once, then waits 600 s", &["--triage"]);
    aux.reply(&card, Reply::malformed());
    let mut run = board.scenario();
    run.start().first_bill(&card).until(
        board.target().first_bill_timeout(),
        "the failure recorded",
        || !board.rows().events(&card, "decompose_failed").is_empty(),
    );
    let seen = run.stop();
    let behind = FakeClock::new(board.root(), BEHIND_SECS);
    let sweep = board.cli_with_env(["kanban", "decompose", "--all", "--json"], behind.env());
    let shown = board.cli_json(["kanban", "show", &card, "--json"]);
    let due = shown["task"]["decompose"]["next_attempt_at"].as_i64();

    bound(
        "bills for a card in a 600 s backoff, a sweep two hours behind run seconds later",
        aux.billed_for(&card),
    )
    .exactly(1)
    .over(&seen)
    .context(|| format!("{sweep}\n{}", board.diag(&card)))
    .gap(GapKind::BackoffIgnored);
    holds(
        "the card is still due about 600 s after its failure, on the real clock",
        due.is_some_and(|at| at >= unix_now() + 500 && at <= unix_now() + 660),
    )
    .note(|| format!("next_attempt_at {due:?}, now {}", unix_now()))
    .gap(GapKind::BackoffIgnored);
}

/// A gateway whose wall clock is two hours behind (stepped, or never set) records its calls at
/// its wall time; on the same boot, `usage --since 30m` read on the right clock still counts
/// them, and a sweep on the right clock keeps the ceiling they reached.
#[rstest]
fn calls_of_a_gateway_on_a_clock_behind_count_on_the_right_clock(
    #[with(Config::gateway().calls_per_hour(CEILING).backoff(0.0).retries(0))] board: Board,
) {
    let aux = board.aux();
    let behind = FakeClock::new(board.root(), BEHIND_SECS);
    let cards: Vec<String> = (0..CEILING + 2)
        .map(|i| board.create(&format!("idea {i}"), &["--triage"]))
        .collect();
    aux.reply_default(Reply::malformed());
    let mut run = on_clock(&board, &behind);
    run.start().bills(
        CEILING as usize,
        || aux.bills(),
        "the calls the hour has room for",
    );
    let seen = run.stop();
    let usage = board.cli_json(["kanban", "usage", "--since", "30m", "--json"]);
    let counted = usage["totals"]["calls"].as_u64().unwrap_or(0);
    let before_sweep = aux.bills();
    let sweep = board.cli_unchecked(["kanban", "decompose", "--all", "--json"]);
    let log = seen.log();
    let dated_behind = log_times(&log)
        .into_iter()
        .any(|at| at <= unix_now() + BEHIND_SECS + 600);

    holds(
        "the gateway's wall clock was two hours behind",
        dated_behind,
    )
    .context(|| log.clone())
    .gap(GapKind::CallNotVisible);
    bound(
        "calls of the last 30 min `usage --since 30m` counts, a gateway on a clock two hours \
         behind having made them",
        counted,
    )
    .exactly(CEILING as u64)
    .context(|| usage.to_string())
    .gap(GapKind::CallNotVisible);
    bound(
        "bills of a sweep on the right clock after those calls reached the ceiling",
        aux.bills() - before_sweep,
    )
    .at_most(0)
    .context(|| format!("{sweep}\n{}", board.diag(&cards[0])))
    .gap(GapKind::HourlyCeilingExceeded);
}

/// A process whose clock ran a day ahead finds the gateway's claim on a card past its expiry.
/// Its holder is alive, on this host and in this pid namespace, so the claim still holds: a
/// sweep on that clock bills the card no second time and does not close the gateway's attempt
/// as abandoned, and the gateway's own answer is the one applied (B1). Only a holder whose life
/// cannot be told from here is judged by the expiry.
#[rstest]
fn a_sweep_on_a_clock_a_day_ahead_leaves_a_live_gateways_attempt_alone(
    #[with(Config::gateway().backoff(0.0))] board: Board,
) {
    let aux = board.aux();
    let (card, gate) = card_held_in_flight(&board, "in flight while another clock runs ahead");

    let mut run = board.scenario();
    run.start().first_bill(&card);
    let ahead_secs = AHEAD.as_secs() as i64;
    let ahead = FakeClock::new(board.root(), ahead_secs);
    // Not for triage, so the gateway leaves it alone: its creation time shows the clock the
    // sweep runs on reached this target's CLI.
    let probe = board.cli_with_env(
        ["kanban", "create", "dated by the clock ahead", "--json"],
        ahead.env(),
    );
    let sweep = board.cli_with_env(["kanban", "decompose", "--all", "--json"], ahead.env());
    let after_sweep = aux.billed_for(&card);
    let abandoned_by_sweep = board.rows().failure_reasons(&card);
    gate.release();
    let clock_ahead = probe
        .json()
        .get("id")
        .and_then(|id| id.as_str())
        .and_then(|id| board.rows().task(id).created_at)
        // An hour's slack for the calls between the two readings of the clock.
        .filter(|&at| at >= unix_now() + ahead_secs - 3_600)
        .map(|_| ())
        .ok_or_else(|| format!("the CLI's clock was not a day ahead:\n{probe}"));
    let arranged = aux
        .open_until_released(&card, &gate)
        .map(|_| ())
        .map_err(|seen| format!("the card was not in flight while the sweep ran: {seen}"))
        .and(clock_ahead);
    run.until_left_triage(&card, "the gateway's answer applied")
        .prove_ticks(1);
    let seen = run.stop();

    bound(
        "requests of a sweep a day ahead for a card a live gateway has in flight",
        after_sweep.saturating_sub(1),
    )
    .at_most(0)
    .context(|| format!("{sweep}\n{}", board.diag(&card)))
    .provided(&arranged)
    .gap(GapKind::InFlightRebilled);
    holds(
        "the live gateway's attempt is not closed as abandoned by the sweep",
        abandoned_by_sweep.is_empty(),
    )
    .note(|| format!("failures recorded: {abandoned_by_sweep:?}"))
    .context(|| format!("{sweep}\n{}", board.diag(&card)))
    .provided(&arranged)
    .gap(GapKind::InFlightRebilled);
    bound("bills for the card in flight", aux.billed_for(&card))
        .exactly(1)
        .over(&seen)
        .context(|| board.diag(&card))
        .provided(&arranged)
        .gap(GapKind::InFlightRebilled);
}
