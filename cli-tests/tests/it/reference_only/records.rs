//! What the reference records about requests that did not simply succeed (contract §7 B5, B9): every
//! try of a retried attempt keeps its own ledger row; requests that never reached the provider
//! cost no card's budget and show in `usage` with the pause they caused; and requests a dead
//! process left `in_flight` are closed as `unknown` by the next sweep and shown in `usage`.

use judge::prelude::*;
use rstest::rstest;
use serde_json::{json, Value};

use crate::outage::provider_down;
use crate::{decompose_all, decompose_card, decompose_forced, while_decompose_is_out};

fn outcomes(board: &Board, card: &str) -> Vec<String> {
    board
        .rows()
        .ledger(card)
        .into_iter()
        .map(|row| row.outcome)
        .collect()
}

/// The `usage --json` entry of `card` (`Null` when it has none).
fn usage_of(usage: &Value, card: &str) -> Value {
    usage["cards"]
        .as_array()
        .and_then(|cards| cards.iter().find(|entry| entry["task_id"] == json!(card)))
        .cloned()
        .unwrap_or(Value::Null)
}

/// Whether a closed ledger row ended at or after its start (both in Unix milliseconds).
fn ended_after_it_started(row: &fixtures::rows::LedgerRow) -> bool {
    let at = |column: &str| row.columns.get(column).and_then(Value::as_i64);
    matches!((at("started_at_ms"), at("ended_at_ms")), (Some(start), Some(end)) if end >= start)
}

/// What a doubled unreachable pause (2 s) has left when read at once: more than the first one
/// (1 s) can have left, and no more than 2 s.
const DOUBLED_PAUSE_LEFT_SECS: std::ops::RangeInclusive<f64> = 1.5..=2.0;

/// How close to the test's own clock a call made during the test is dated, in seconds.
const RECENT_SECS: f64 = 600.0;

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |since| since.as_secs_f64())
}

#[rstest]
fn a_retried_attempt_keeps_a_ledger_row_per_try(#[with(Config::plain().retries(2))] board: Board) {
    let aux = board.aux();
    let card = board.create("a provider having a bad minute", &["--triage"]);
    aux.reply_in_turn(
        &card,
        vec![
            Reply::http_error(500, "upstream exploded"),
            Reply::http_error(502, "bad gateway"),
            Reply::graph(2, &[]),
        ],
    );

    let run = decompose_card(&board, &card);

    let ledger = board.rows().ledger(&card);
    Findings::new()
        .equal(
            "ledger outcomes",
            &outcomes(&board, &card),
            &vec![
                "server_error".to_owned(),
                "server_error".to_owned(),
                "ok".to_owned(),
            ],
        )
        .equal(
            "ledger statuses",
            &ledger.iter().map(|row| row.http_status).collect::<Vec<_>>(),
            &vec![Some(500), Some(502), Some(200)],
        )
        .equal(
            "ledger tries",
            &ledger
                .iter()
                .map(|row| row.columns.get("try").cloned().unwrap_or(Value::Null))
                .collect::<Vec<_>>(),
            &vec![json!(1), json!(2), json!(3)],
        )
        .that(ledger.iter().all(|row| row.attempt == Some(1)), || {
            "every try belongs to attempt 1".to_owned()
        })
        .that(ledger.iter().all(ended_after_it_started), || {
            "every try's row is closed no earlier than it was opened".to_owned()
        })
        .equal("attempts counted", &board.rows().attempts(&card), &1)
        .equal("ok", &run.ok(), &Some(true))
        .verdict("one attempt, a ledger row per try")
        .context(|| format!("{}\n{}", run.output, board.diag(&card)))
        .gap(GapKind::CallNotVisible);
    let usage = board.cli_json(["kanban", "usage", "--json"]);
    let entry = usage_of(&usage, &card);
    Findings::new()
        .equal("totals.calls", &usage["totals"]["calls"], &json!(3))
        .equal("totals.failed", &usage["totals"]["failed"], &json!(2))
        .equal("totals.ok", &usage["totals"]["ok"], &json!(1))
        .equal(
            "the card's calls and attempts",
            &[&entry["calls"], &entry["attempts"]],
            &[&json!(3), &json!(1)],
        )
        .that(
            entry["last_call_at"]
                .as_f64()
                .is_some_and(|at| (unix_now() - at).abs() < RECENT_SECS),
            || {
                format!(
                    "the card's last call is dated now: {}",
                    entry["last_call_at"]
                )
            },
        )
        .verdict("usage counts every try")
        .context(|| usage.to_string())
        .gap(GapKind::CallNotVisible);
}

#[rstest]
fn an_unreachable_provider_spends_no_budget_and_pauses_the_board() {
    let board = Board::new(provider_down());
    let card = board.create("waits out an outage", &["--triage"]);

    let sweep = decompose_all(&board);
    // A person forcing a decompose past the board's pause finds the provider still down.
    let explicit = decompose_forced(&board, &card);

    let transcript = || format!("{}\n{}", sweep.output, explicit.output);
    let shown =
        board.cli_json(["kanban", "show", card.as_str(), "--json"])["task"]["decompose"].clone();
    Findings::new()
        .equal("attempts counted", &board.rows().attempts(&card), &0)
        .equal("parked, as shown", &shown["parked"], &json!(false))
        .equal(
            "decompose_failed events",
            &board.rows().events(&card, "decompose_failed").len(),
            &0,
        )
        .equal(
            "ledger outcomes",
            &outcomes(&board, &card),
            &vec!["unreachable".to_owned(), "unreachable".to_owned()],
        )
        .verdict("an unreachable provider spends no card's budget")
        .context(|| format!("{}\n{}", transcript(), board.diag(&card)))
        .gap(GapKind::RebilledEveryTick);
    let usage = board.cli_json(["kanban", "usage", "--json"]);
    let entry = usage_of(&usage, &card);
    let until = usage["unreachable"]["until"].as_f64().unwrap_or(0.0);
    Findings::new()
        .equal("totals.calls", &usage["totals"]["calls"], &json!(0))
        .equal(
            "totals.unreachable",
            &usage["totals"]["unreachable"],
            &json!(2),
        )
        .equal(
            "the card's calls and unreachable requests",
            &[&entry["calls"], &entry["unreachable"]],
            &[&json!(0), &json!(2)],
        )
        .equal(
            "window.calls_last_hour",
            &usage["window"]["calls_last_hour"],
            &json!(0),
        )
        .that(until > unix_now(), || {
            format!("no unreachable pause in force: {}", usage["unreachable"])
        })
        // The pause starts at 1 s and doubles with each request in a row that never reached the
        // provider: the second one's is 2 s.
        .that(
            DOUBLED_PAUSE_LEFT_SECS.contains(&(until - unix_now())),
            || {
                format!(
                    "after two unreachable requests in a row the pause is not the doubled 2 s: {} s left",
                    until - unix_now()
                )
            },
        )
        .that(
            usage["unreachable"]["reason"]
                .as_str()
                .is_some_and(|reason| reason.contains("unreachable")),
            || format!("the pause does not say why: {}", usage["unreachable"]),
        )
        .verdict("usage shows the unreachable requests and the pause")
        .context(|| usage.to_string())
        .gap(GapKind::CallNotVisible);
    holds(
        "the sweep stops at the unreachable provider and says so",
        sweep.output.code == Some(1) && sweep.output.stderr.contains("unreachable"),
    )
    .context(|| sweep.output.to_string())
    .gap(GapKind::UnclearRefusal);
}

#[rstest]
fn a_sweep_closes_requests_left_in_flight_as_unknown(board: Board) {
    let aux = board.aux();
    let card = board.create("its last request never came back", &["--triage"]);
    aux.reply(&card, Reply::graph(2, &[]));
    // What a process killed mid-call by a build without claims leaves: an open row, no claim.
    board
        .rows()
        .arrange_request_left_in_flight(&card, "gateway");

    let sweep = decompose_all(&board);

    Findings::new()
        .equal(
            "ledger outcomes",
            &outcomes(&board, &card),
            &vec!["unknown".to_owned(), "ok".to_owned()],
        )
        .that(
            sweep
                .output
                .stderr
                .contains("closed 1 ledger row(s) left in flight"),
            || "the sweep does not say it closed the row".to_owned(),
        )
        .equal("requests of the sweep", &aux.billed_for(&card), &1)
        .verdict("the sweep closes the row left in flight as unknown")
        .context(|| format!("{}\n{}", sweep.output, board.diag(&card)))
        .gap(GapKind::CallNotVisible);
    let usage = board.cli_json(["kanban", "usage", "--json"]);
    let entry = usage_of(&usage, &card);
    Findings::new()
        .equal(
            "totals.calls (maybe billed included)",
            &usage["totals"]["calls"],
            &json!(2),
        )
        .equal("totals.unknown", &usage["totals"]["unknown"], &json!(1))
        .equal(
            "window.calls_last_hour (unknown counts toward the ceiling)",
            &usage["window"]["calls_last_hour"],
            &json!(2),
        )
        .equal(
            "the card's calls and unknown requests",
            &[&entry["calls"], &entry["unknown"]],
            &[&json!(2), &json!(1)],
        )
        .verdict("usage shows the unknown request")
        .context(|| usage.to_string())
        .gap(GapKind::CallNotVisible);
}

#[rstest]
fn a_sweep_closing_a_dead_process_request_leaves_a_live_processes_card_alone(
    #[with(Config::plain().backoff(0.0))] board: Board,
) {
    let aux = board.aux();
    let live = board.create("split by a person right now", &["--triage"]);
    let gate = Gate::new();
    aux.reply(&live, Reply::graph(2, &[]).gated(&gate));
    let dead = board.create("its process died mid-call", &["--triage"]);
    aux.reply(&dead, Reply::graph(2, &[]));
    // The sweep has something of a dead process's to close, so it looks at every claim: the
    // live process's claim must survive that look.
    board
        .rows()
        .arrange_request_left_in_flight(&dead, "gateway");

    let (first, (arrived, sweep)) = while_decompose_is_out(&board, &live, &gate, |arrived| {
        (arrived, decompose_all(&board))
    });

    let transcript = || format!("{}\n{}", first.output, sweep.output);
    let in_flight = match &arrived {
        Err(timeout) => Err(timeout.to_string()),
        Ok(()) => aux.open_until_released(&live, &gate).map(|_| ()),
    }
    .map_err(|seen| format!("the live card was not in flight while the sweep ran: {seen}"));
    bound(
        "requests for a live process's card while a sweep closes a dead one's",
        aux.billed_for(&live),
    )
    .exactly(1)
    .context(|| format!("{}\n{}", transcript(), board.diag(&live)))
    .provided(&in_flight)
    .gap(GapKind::InFlightRebilled);
    Findings::new()
        .equal("the live decompose's ok", &first.ok(), &Some(true))
        .equal(
            "ledger outcomes of the dead process's card",
            &outcomes(&board, &dead),
            &vec!["unknown".to_owned(), "ok".to_owned()],
        )
        .equal(
            "children of the live card",
            &board.rows().children_of(&live).len(),
            &2,
        )
        .verdict("the sweep closes the dead request and the live decompose is applied")
        .context(transcript)
        .provided(&in_flight)
        .gap(GapKind::DoubleApply);
}
