//! Bounds that rest on features only the reference has: the per-card opt-out flag, the aux-call
//! ledger and parking, the board-wide hourly ceiling and its rolling window, a provider pause
//! kept on the board across restarts, and calls a crash left open closed as `unknown`. The
//! `external` nextest profile leaves this module out, submodules included.
//!
//! | submodule | concern |
//! |---|---|
//! | `claims` | a holder frozen past its claim, taken over, applies nothing when it wakes; a holder /proc hides still holds |
//! | `clock` | wall clocks jumped, ahead or behind, under the gateway and a sweep (the clock shim fakes `CLOCK_REALTIME`): waits measured by the boot's clock |
//! | `config_file` | config.yaml a FIFO, /dev/zero or 30 MB: one WARN saying what it is |
//! | `explore` | the explorer's own checks, each made to fire by acting on the gateway from outside |
//! | `misconfiguration` | typos warned once, JSON logs, ranges refused at start, bad edits mid-run |
//! | `notices` | a board that cannot be written: one WARN per condition, words that say what happened |
//! | `one_file` | the ledger and budgets a copy of `kanban.db` alone keeps; swapped WAL files warned about |
//! | `unreadable` | cards another tool wrote with text that is not text: set aside unpaid, one WARN each |
//! | `recovery` | `unpark`, `resume`, `auto-decompose ID off\|on` against a running gateway |
//! | `secrets` | no output of a whole run, nor the board, shows a secret in any form (key, URL password, query key, a key pasted into config) |
//! | `stops` | SIGTERM within 5 s while another process holds the board's write lock |
//! | `workers` | the workers' ledger rows and `usage` halves; a card parked by its spawn budget, warned about, unparked |

mod claims;
mod clock;
mod config_file;
mod explore;
mod misconfiguration;
mod notices;
mod one_file;
mod recovery;
mod secrets;
mod stops;
mod unreadable;
mod workers;

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use fixtures::cli::CliOutput;
use fixtures::target::current_target;
use judge::prelude::*;
use rstest::rstest;
use serde_json::Value;

use crate::support::span_of_ticks;
use crate::{MAX_FAILED_ATTEMPTS, PROBE_TICKS, PROVIDER_FAULT_BOUND, SHORT_BACKOFF};

#[rstest]
fn opted_out_card_is_never_auto_decomposed_but_can_be_by_hand(
    #[with(Config::gateway())] board: Board,
) {
    let aux = board.aux();
    let opted_out = board.create(
        "an idea its owner will split",
        &["--triage", "--no-auto-decompose"],
    );
    let fresh = board.create("a fresh idea", &["--triage"]);

    let mut run = board.scenario();
    run.start()
        .until_left_triage(&fresh, "the fresh card auto-decomposed")
        .prove_ticks(PROBE_TICKS);
    let automatic_bills = aux.billed_for(&opted_out);
    let seen = run.stop();

    bound("automatic bills for the opted-out card", automatic_bills)
        .at_most(0)
        .over(&seen)
        .note(|| format!("status={}", board.rows().status(&opted_out)))
        .context(|| board.diag(&opted_out))
        .gap(GapKind::HoldDecomposed);

    let by_hand = board.cli_unchecked(["kanban", "decompose", opted_out.as_str(), "--json"]);
    bound(
        "requests of a decompose by hand",
        aux.billed_for(&opted_out),
    )
    .exactly(1)
    .context(|| by_hand.to_string())
    .gap(GapKind::NotOneRequest);
    holds(
        "a decompose by hand applies the reply",
        by_hand.success() && board.rows().status(&opted_out) != "triage",
    )
    .context(|| format!("{by_hand}\n{}", board.diag(&opted_out)))
    .gap(GapKind::ReplyNotApplied);
}

/// What a ledger row says about one paid call: purpose, origin, attempt, HTTP status, closed as
/// a failure.
type LedgerEntry = (String, String, Option<i64>, Option<i64>, bool);

#[rstest]
fn every_paid_call_of_a_parked_card_is_in_the_ledger(
    #[with(Config::gateway().backoff(SHORT_BACKOFF))] board: Board,
) {
    let aux = board.aux();
    let poison = board.create("an idea the decomposer can never split", &["--triage"]);
    aux.reply(&poison, Reply::malformed());

    let mut run = board.scenario();
    run.start()
        .until(
            board.target().first_bill_timeout(),
            "the poison card to be parked",
            || !board.rows().events(&poison, "decompose_parked").is_empty(),
        )
        .prove_ticks(PROBE_TICKS);
    let bills = aux.billed_for(&poison);
    let all_bills = aux.bills();
    let seen = run.stop();

    bound("bills for parked card", bills)
        .exactly(MAX_FAILED_ATTEMPTS)
        .over(&seen)
        .context(|| board.diag(&poison))
        .gap(GapKind::RebilledEveryTick);

    // One closed row per paid call; the outcome's label is the reference's to choose (an answer
    // whose content is unusable is not a transport failure), but it is never a success and
    // never left open.
    let rows = board.rows();
    let ledger: Vec<LedgerEntry> = rows
        .ledger(&poison)
        .iter()
        .map(|row| {
            (
                row.purpose.clone(),
                row.origin.clone(),
                row.attempt,
                row.http_status,
                row.closed_as_failure(),
            )
        })
        .collect();
    let expected: Vec<LedgerEntry> = (1..=3)
        .map(|attempt| {
            (
                "decompose".to_owned(),
                "gateway".to_owned(),
                Some(attempt),
                Some(200),
                true,
            )
        })
        .collect();
    let failed: Vec<Value> = rows
        .events(&poison, "decompose_failed")
        .into_iter()
        .map(|event| event.payload["attempt"].clone())
        .collect();
    let parked = rows.events(&poison, "decompose_parked");
    Findings::new()
        .equal(
            "ledger rows (purpose, origin, attempt, status, failed)",
            &ledger,
            &expected,
        )
        .equal(
            "decompose_failed attempts",
            &failed,
            &[1, 2, 3].map(Value::from).to_vec(),
        )
        .equal("decompose_parked events", &parked.len(), &1)
        .that(
            parked
                .first()
                .is_some_and(|event| event.payload["attempts"] == MAX_FAILED_ATTEMPTS),
            || format!("the parked event names {MAX_FAILED_ATTEMPTS} attempts: {parked:?}"),
        )
        .equal(
            "parked card status",
            &rows.status(&poison).as_str(),
            &"triage",
        )
        .verdict("every paid call is in the ledger and the events")
        .context(|| board.diag(&poison))
        .gap(GapKind::CallNotVisible);

    let usage = board.cli_json(["kanban", "usage", "--json"]);
    let card = usage["cards"]
        .as_array()
        .and_then(|cards| cards.iter().find(|card| card["task_id"] == poison.as_str()))
        .cloned()
        .unwrap_or(Value::Null);
    Findings::new()
        .equal(
            "total calls",
            &usage["totals"]["calls"],
            &Value::from(all_bills),
        )
        .equal(
            "the card's calls",
            &card["calls"],
            &Value::from(MAX_FAILED_ATTEMPTS),
        )
        .equal(
            "the card's failed calls",
            &card["failed"],
            &Value::from(MAX_FAILED_ATTEMPTS),
        )
        .equal("the card parked", &card["parked"], &Value::Bool(true))
        .verdict("`kanban usage` counts what the provider saw")
        .context(|| usage.to_string())
        .gap(GapKind::CallNotVisible);
}

/// The hourly ceiling in the ceiling test.
const HOURLY_CEILING: u32 = 3;

/// Cards waiting, more than the ceiling lets through.
const CARDS_OVER_CEILING: usize = 5;

#[rstest]
fn hourly_ceiling_holds_across_a_restart(
    #[with(Config::gateway().calls_per_hour(HOURLY_CEILING))] board: Board,
) {
    let target = board.target();
    let aux = board.aux();
    let cards: Vec<String> = (0..CARDS_OVER_CEILING)
        .map(|i| board.create(&format!("idea {i}"), &["--triage"]))
        .collect();

    let mut run = board.scenario();
    run.start()
        .bills(HOURLY_CEILING as usize, || aux.bills(), "the first cards");
    // Nothing may be decomposed at the ceiling, so probes cannot prove ticks: each watch spans
    // PROBE_TICKS ticks by the clock, between the gateway ticking before (the bills above) and
    // after (the rest decomposed once the ceiling is raised).
    run.watch(span_of_ticks(target, PROBE_TICKS));
    let before_restart = aux.bills();
    run.restart();
    run.watch(span_of_ticks(target, PROBE_TICKS));
    let after_restart = aux.bills();
    // Worded now: the verdicts below are about the ceiling in force before it was raised.
    let ceiling = board.setting(Setting::CallsPerHour);
    board.reconfigure(Config::gateway().calls_per_hour(100));
    let window = run.close_window();
    run.left_triage(
        &cards,
        target.first_bill_timeout(),
        "every card decomposed once the ceiling is raised",
    );
    let raised = run.stop();

    bound("paid calls at the hourly ceiling", before_restart)
        .exactly(HOURLY_CEILING)
        .over(&window)
        .gap(GapKind::HourlyCeilingExceeded);
    bound("paid calls in the hour across a restart", after_restart)
        .exactly(HOURLY_CEILING)
        .over(&window)
        .note(|| ceiling.clone())
        .gap(GapKind::HourlyCeilingExceeded);
    let per_card: Vec<usize> = cards.iter().map(|card| aux.billed_for(card)).collect();
    bound(
        "cards decomposed once the ceiling is raised",
        per_card.iter().filter(|n| **n == 1).count(),
    )
    .exactly(CARDS_OVER_CEILING)
    .over(&raised)
    .note(|| format!("bills per card: {per_card:?}"))
    .gap(GapKind::RebilledAfterDecompose);
}

#[rstest]
fn provider_pause_survives_a_restart() {
    let target = current_target();
    let watch = span_of_ticks(target, PROBE_TICKS);
    // Long enough to cover a restart and the watch after it, with room to spare.
    let pause_secs = (watch.as_secs_f64() * 2.0).ceil() as u64 + 3;
    let board = Board::new(
        Config::gateway()
            .cooldown(pause_secs as f64)
            .backoff(SHORT_BACKOFF),
    );
    let aux = board.aux();
    let cards: Vec<String> = (0..3)
        .map(|i| board.create(&format!("waiting card {i}"), &["--triage"]))
        .collect();
    aux.reply_default(Reply::http_error(402, "insufficient quota"));

    let mut run = board.scenario();
    run.start().bills(1, || aux.bills(), "any waiting card");
    let refused_at = Instant::now();
    run.restart();
    // As in `provider_wide`: the watch spans PROBE_TICKS ticks by the clock, with the gateway
    // ticking before it (the refusal) and after it (the cards decomposed once the pause ends).
    run.watch(watch);
    let after_restart = aux.bills();
    if refused_at.elapsed() >= Duration::from_secs(pause_secs) {
        run.interrupt(Interruption::new(format!(
            "the watch ended {:.1}s after the refusal, past the {pause_secs}s pause: the \
             restart took too long for the count to tell anything",
            refused_at.elapsed().as_secs_f64()
        )));
    }
    aux.reply_default(Reply::default_single());
    let window = run.close_window();
    run.left_triage(
        &cards,
        Duration::from_secs(pause_secs) + target.first_bill_timeout(),
        "every waiting card decomposed after the pause",
    );
    let resumed = run.stop();

    bound("bills while paused across a restart", after_restart)
        .exactly(PROVIDER_FAULT_BOUND)
        .over(&window)
        .gap(GapKind::ProviderFaultNotPaused);
    let decomposed = board.rows().left_triage(&cards).len();
    bound("waiting cards decomposed after the pause", decomposed)
        .exactly(cards.len())
        .over(&resumed)
        .gap(GapKind::PauseNeverEnded);
}

/// The hourly ceiling of the window test.
const WINDOW_CEILING: u32 = 3;

/// Paid calls arranged inside the rolling hour (30 minutes ago): they count.
const CALLS_INSIDE_THE_HOUR: usize = 2;

/// Paid calls arranged just outside it (61 minutes ago): they do not.
const CALLS_BEFORE_THE_HOUR: usize = 5;

#[rstest]
fn the_hourly_ceiling_counts_the_calls_of_the_last_hour_and_no_older_ones(
    #[with(Config::gateway().calls_per_hour(WINDOW_CEILING))] board: Board,
) {
    let target = board.target();
    let aux = board.aux();
    // Paid for earlier by another process: the board's ledger says so, this provider never saw
    // those calls.
    let earlier = board.create("work decomposed earlier", &[]);
    let rows = board.rows();
    rows.arrange_paid_calls(
        &earlier,
        Duration::from_secs(30 * 60),
        CALLS_INSIDE_THE_HOUR,
    );
    rows.arrange_paid_calls(
        &earlier,
        Duration::from_secs(61 * 60),
        CALLS_BEFORE_THE_HOUR,
    );
    let cards: Vec<String> = (0..WINDOW_CEILING)
        .map(|i| board.create(&format!("idea {i}"), &["--triage"]))
        .collect();
    let room = WINDOW_CEILING as usize - CALLS_INSIDE_THE_HOUR;

    let mut run = board.scenario();
    run.start();
    // Nothing more may be decomposed once the hour is full, so probes cannot prove ticks: the
    // watch spans PROBE_TICKS ticks by the clock, between the gateway ticking before (the bill)
    // and after (the rest decomposed once the ceiling is raised).
    run.bills(room, || aux.bills(), "the calls the hour has room for")
        .watch(span_of_ticks(target, PROBE_TICKS));
    let bills = aux.bills();
    // Worded now: the verdicts below are about the ceiling in force before it was raised.
    let ceiling = board.setting(Setting::CallsPerHour);
    board.reconfigure(Config::gateway().calls_per_hour(100));
    let window = run.close_window();
    run.left_triage(
        &cards,
        target.first_bill_timeout(),
        "every card decomposed once the ceiling is raised",
    );
    let raised = run.stop();

    bound(
        "paid calls with 2 of the ceiling's 3 spent 30 minutes ago and 5 more 61 minutes ago",
        bills,
    )
    .exactly(room)
    .over(&window)
    .note(|| ceiling.clone())
    .gap(GapKind::HourlyCeilingExceeded);
    let decomposed = board.rows().left_triage(&cards).len();
    bound("cards decomposed once the ceiling is raised", decomposed)
        .exactly(cards.len())
        .over(&raised)
        .gap(GapKind::PauseNeverEnded);
}

/// How long the provider holds the call the gateway is killed in.
const SLOW_ANSWER: Duration = Duration::from_secs(30);

/// How long the restarted gateway gets to close the abandoned call: it does so before its first
/// tick.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

#[rstest]
fn a_call_left_in_flight_by_a_sigkill_is_closed_as_unknown_at_the_next_start(
    // One attempt per card: the killed one was its last, so the budget must hold after it.
    #[with(Config::gateway().max_attempts(1).backoff(0.0))] board: Board,
) {
    let aux = board.aux();
    let card = board.create("killed mid-call", &["--triage"]);
    aux.reply(&card, Reply::default_single().delayed(SLOW_ANSWER));
    let outcomes = || -> Vec<String> {
        board
            .rows()
            .ledger(&card)
            .into_iter()
            .map(|row| row.outcome)
            .collect()
    };

    let mut run = board.scenario();
    run.start().first_bill(&card);
    let mut after_kill = Vec::new();
    if run.ok() {
        let crash = run.kill9();
        assert_eq!(crash.signal, Some(Signal::SIGKILL as i32), "{crash}");
        after_kill = outcomes();
        run.restart();
        run.settle(CLOSE_TIMEOUT, "the abandoned call closed", || {
            outcomes().iter().all(|outcome| outcome != "in_flight")
        })
        .prove_ticks(2);
    }
    let bills = aux.billed_for(&card);
    let all_bills = aux.bills();
    let seen = run.stop();

    bound("bills for a card killed during its only attempt", bills)
        .exactly(1)
        .over(&seen)
        .context(|| board.diag(&card))
        .gap(GapKind::BudgetNotPersisted);
    let usage = board.cli_json(["kanban", "usage", "--json"]);
    let card_usage = usage["cards"]
        .as_array()
        .and_then(|cards| cards.iter().find(|entry| entry["task_id"] == card.as_str()))
        .cloned()
        .unwrap_or(Value::Null);
    let parked = board
        .rows()
        .decompose_state(&card)
        .is_some_and(|state| state.parked);
    Findings::new()
        .equal(
            "ledger outcomes after the SIGKILL",
            &after_kill,
            &vec!["in_flight".to_owned()],
        )
        .equal(
            "ledger outcomes after the restart",
            &outcomes(),
            &vec!["unknown".to_owned()],
        )
        .equal("the card parked", &parked, &true)
        .equal(
            "usage: unknown calls",
            &usage["totals"]["unknown"],
            &Value::from(1),
        )
        .equal(
            "usage: the card's unknown calls",
            &card_usage["unknown"],
            &Value::from(1),
        )
        .equal(
            "usage: the card's calls",
            &card_usage["calls"],
            &Value::from(1),
        )
        .equal(
            "usage: paid calls (the card's and the tick probes')",
            &usage["totals"]["calls"],
            &Value::from(all_bills),
        )
        .equal(
            "usage: calls in the last hour",
            &usage["window"]["calls_last_hour"],
            &Value::from(all_bills),
        )
        .verdict("a call a SIGKILL left in flight is closed as unknown and still counted")
        .over(&seen)
        .context(|| format!("{usage}\n{}", board.diag(&card)))
        .gap(GapKind::CallNotVisible);
}

/// Cards waiting behind the refused pick in the probe test: more than a tick's slots.
const BEHIND_THE_REFUSED_PICK: usize = 4;

/// Cards attempted per tick in the probe test.
const PROBE_TEST_PER_TICK: u32 = 3;

/// How long the probe test watches after the first bill: past the reference's 2 s probe window,
/// after which a probe that proved nothing would have let the gateway fan out.
const PAST_THE_PROBE_WINDOW: Duration = Duration::from_secs(3);

/// The gateway's first pick sends nothing (a card whose budget a lowered setting left spent, so
/// it is parked instead): a probe without a request proves nothing about the provider, so the
/// next tick sends one probe call, and a provider that refuses it costs that one call, not one
/// per card.
#[rstest]
fn a_first_pick_that_sends_nothing_is_followed_by_one_probe_call_not_a_fan_out() {
    let board = Board::new(Config::plain().max_attempts(2).backoff(0.0));
    let aux = board.aux();
    let spent = board.create("a card that failed once", &["--triage"]);
    aux.reply(&spent, Reply::malformed());
    // One failed attempt by a sweep: 1 of 2 attempts spent, due again at once, oldest due.
    let sweep = board.cli_unchecked(["kanban", "decompose", "--all", "--json"]);
    assert_eq!(board.rows().attempts(&spent), 1, "{sweep}");
    let waiting: Vec<String> = (0..BEHIND_THE_REFUSED_PICK)
        .map(|i| board.create(&format!("waiting card {i}"), &["--triage"]))
        .collect();
    board.reconfigure(
        Config::gateway()
            .per_tick(PROBE_TEST_PER_TICK)
            .max_attempts(1)
            .backoff(0.0)
            .cooldown(120.0),
    );
    aux.reply_default(Reply::http_error(402, "insufficient quota"));

    let mut run = board.scenario();
    run.start()
        .bills(
            1,
            || waiting.iter().map(|card| aux.billed_for(card)).sum(),
            "any waiting card",
        )
        .watch(PAST_THE_PROBE_WINDOW);
    let refused_calls: usize = waiting.iter().map(|card| aux.billed_for(card)).sum();
    let seen = run.stop();

    bound(
        "calls refused after a first pick that sent nothing",
        refused_calls,
    )
    .at_most(PROVIDER_FAULT_BOUND)
    .over(&seen)
    .note(|| {
        format!(
            "the first pick {spent} parked: {}; billed in order: {:?}; {}",
            !board.rows().events(&spent, "decompose_parked").is_empty(),
            aux.billed_ids(),
            board.setting(Setting::PerTick)
        )
    })
    .gap(GapKind::ProviderFaultNotPaused);
}

/// How long the provider holds the slow card's reply: many of the reference's ticks.
const SLOWER_THAN_TICKS: Duration = Duration::from_secs(1);

#[rstest]
fn a_reply_slower_than_a_tick_is_one_ok_call_and_no_failure(
    #[with(Config::gateway())] board: Board,
) {
    let target = board.target();
    let aux = board.aux();
    let slow = board.create("an idea the provider thinks over", &["--triage"]);
    aux.reply(&slow, Reply::graph(2, &[]).delayed(SLOWER_THAN_TICKS));

    let mut run = board.scenario();
    run.start().first_bill(&slow);
    // While the slow call is out, a request a dead process left open appears: the next tick
    // closes it, and must tell it from the gateway's own attempt in flight.
    let dead = board.create("its process died mid-call", &["--no-auto-decompose"]);
    board.rows().arrange_request_left_in_flight(&dead, "sweep");
    run.until(
        target.first_bill_timeout(),
        "the dead process's request closed",
        || {
            board
                .rows()
                .ledger(&dead)
                .iter()
                .all(|row| row.outcome != "in_flight")
        },
    )
    .left_triage(
        std::slice::from_ref(&slow),
        target.first_bill_timeout() + SLOWER_THAN_TICKS,
        "the slow card decomposed",
    )
    .prove_ticks(2);
    let seen = run.stop();

    bound("bills for the slow card", aux.billed_for(&slow))
        .exactly(1)
        .over(&seen)
        .context(|| board.diag(&slow))
        .gap(GapKind::InFlightRebilled);
    let rows = board.rows();
    let outcomes: Vec<String> = rows
        .ledger(&slow)
        .into_iter()
        .map(|row| row.outcome)
        .collect();
    Findings::new()
        .equal("ledger outcomes", &outcomes, &vec!["ok".to_owned()])
        .equal(
            "decompose_failed events",
            &rows.events(&slow, "decompose_failed").len(),
            &0,
        )
        .equal("children", &rows.children_of(&slow).len(), &2)
        .verdict("the slow call is one ok ledger row, and no failure is recorded")
        .over(&seen)
        .context(|| board.diag(&slow))
        .gap(GapKind::CallNotVisible);
}

#[rstest]
fn a_triage_card_another_tool_wrote_is_scheduled_and_decomposed(
    #[with(Config::gateway())] board: Board,
) {
    let aux = board.aux();
    let foreign = board.create("written by upstream's own CLI", &["--triage"]);
    aux.reply(&foreign, Reply::graph(2, &[]));
    let removed = board.rows().arrange_written_by_another_tool(&foreign);
    assert_eq!(removed, 1, "the card had no decompose schedule to remove");

    let mut run = board.scenario();
    run.start()
        .until_left_triage(&foreign, "the card another tool wrote decomposed")
        .prove_ticks(2);
    let seen = run.stop();

    bound(
        "bills for the card another tool wrote",
        aux.billed_for(&foreign),
    )
    .exactly(1)
    .over(&seen)
    .context(|| board.diag(&foreign))
    .gap(GapKind::ReplyNotApplied);
    holds(
        "the card another tool wrote is decomposed",
        board.rows().children_of(&foreign).len() == 2,
    )
    .over(&seen)
    .context(|| board.diag(&foreign))
    .gap(GapKind::ReplyNotApplied);
}

/// Cards whose replies are slow enough that a tick finds the ceiling's calls still in flight.
const SLOW_CARDS: usize = 5;
/// The ceiling the slow cards meet: fewer than the cards, fewer than a tick may send.
const IN_FLIGHT_CEILING: u32 = 2;

#[rstest]
fn the_hourly_ceiling_counts_the_calls_still_in_flight(
    #[with(Config::gateway().calls_per_hour(IN_FLIGHT_CEILING).per_tick(SLOW_CARDS as u32))]
    board: Board,
) {
    let aux = board.aux();
    // Each reply is held back longer than the probe window, so that every call the ceiling
    // allows is still open when the next tick looks at the hour.
    for i in 0..SLOW_CARDS {
        let card = board.create(&format!("a slow idea {i}"), &["--triage"]);
        aux.reply(
            &card,
            Reply::default_single().delayed(Duration::from_secs(3)),
        );
    }

    let mut run = board.scenario();
    run.start()
        .bills(
            IN_FLIGHT_CEILING as usize,
            || aux.bills(),
            "the calls the ceiling allows",
        )
        // Nothing more may be decomposed once the hour is full, so probes cannot prove ticks:
        // the span is the scenario (and covers the moment the open calls answer).
        .watch(span_of_ticks(board.target(), 40));
    let bills = aux.bills();
    let seen = run.stop();

    bound(
        "paid calls under a ceiling of 2 while they are in flight",
        bills,
    )
    .at_most(IN_FLIGHT_CEILING)
    .over(&seen)
    .note(|| board.setting(Setting::CallsPerHour))
    .gap(GapKind::HourlyCeilingExceeded);
}

/// The outcome `usage --calls --json` gives `card`'s calls, oldest first.
fn usage_outcomes(board: &Board, card: &str) -> (Vec<String>, CliOutput) {
    let output = board.cli_unchecked(["kanban", "usage", "--calls", "--card", card, "--json"]);
    let outcomes = output
        .stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|row| row["outcome"].as_str().map(str::to_owned))
        .collect();
    (outcomes, output)
}

#[rstest]
fn usage_shows_a_call_in_flight_and_after_the_crash_that_left_it(
    #[with(Config::gateway().call_timeout(30.0))] board: Board,
) {
    let aux = board.aux();
    let card = board.create("an idea the provider sits on", &["--triage"]);
    aux.reply(&card, Reply::hang(Duration::from_secs(60)));

    let mut run = board.scenario();
    run.start().first_bill(&card);
    let in_flight = usage_outcomes(&board, &card);
    run.kill9();
    let after_crash = usage_outcomes(&board, &card);
    run.restart().prove_ticks(1);
    let after_restart = usage_outcomes(&board, &card);
    let seen = run.stop();

    Findings::new()
        .equal(
            "while the call is in flight",
            &in_flight.0,
            &vec!["in_flight".to_owned()],
        )
        .equal(
            "after the crash",
            &after_crash.0,
            &vec!["in_flight".to_owned()],
        )
        .equal(
            "after the restarted gateway ticked",
            &after_restart.0,
            &vec!["unknown".to_owned()],
        )
        .verdict("usage --calls shows the call in flight, and after the crash that left it")
        .over(&seen)
        .context(|| format!("{}\n{}\n{}", in_flight.1, after_crash.1, after_restart.1))
        .gap(GapKind::CallNotVisible);
}
