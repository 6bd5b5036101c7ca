//! What only the reference has: the per-card attempt record and the aux-call ledger, `kanban
//! usage`, the `--no-auto-decompose` opt-out, the sweep's attempt budget and backoff, and the
//! bounds on hostile provider bodies (1 MiB cap, cut streams, transient retries). The `external`
//! nextest profile leaves this module out by name, submodules included.
//!
//! | submodule | concern |
//! |---|---|
//! | `body_cap` | a reply body of exactly 1 MiB and one byte more |
//! | `budget` | the attempt budget and the hourly ceiling at their boundaries (0 included) |
//! | `clock` | rows a clock a day ahead recorded: read by the boot's clock, never re-dated |
//! | `endpoints` | a base URL's query kept after the path, `extra_body` that bills more refused, bounded prices, a config nested too deep |
//! | `one_file` | a copy of kanban.db alone after CLI verbs keeps every ledger row and attempt |
//! | `records` | ledger rows per try, unreachable requests, rows left in flight |
//! | `config_extremes` | absurd numbers for the bound keys |
//! | `gateway_check` | `gateway check` on every operator configuration: the route it reports, one free request, nothing billed |
//! | `hostile_input` | terminal controls, 2^64 − 1 tokens, odd rows, `unpark` in flight, `Retry-After` forms, a bad `.env`, a 900 KB error, off/on in a backoff, guards on `decompose ID` |
//! | `misconfiguration` | one warning per misspelt key on each verb, none for upstream's keys |
//! | `recovery` | `unpark`, `resume`, `usage --calls`, `auto-decompose ID on\|off`: effect, exit codes, `--json` |
//! | `unreadable` | cards whose text is not text: set aside unpaid, refused by hand, shown with U+FFFD |

mod body_cap;
mod budget;
mod clock;
mod config_extremes;
mod endpoints;
mod gateway_check;
mod hostile_input;
mod misconfiguration;
mod one_file;
mod records;
mod recovery;
mod unreadable;

use std::time::Duration;

use fixtures::aux_model::{contract_task, graph_value};
use fixtures::rows::Task;
use fixtures::snapshot::{BoardRows, Redactor};
use fixtures::verdict::case_label;
use judge::prelude::*;
use rstest::rstest;
use serde::Serialize;
use serde_json::{json, Value};

use crate::{
    applied_with_two_children, decompose_all, decompose_card, first_graph_gated, graph_not_applied,
    Decomposition,
};

/// The rows of a scenario plus the card's attempt record and ledger, one redaction for all.
#[derive(Serialize)]
struct AttemptRecords {
    rows: BoardRows,
    decompose_state: Value,
    aux_ledger: Vec<Value>,
}

impl AttemptRecords {
    fn capture(board: &Board, card: &str) -> AttemptRecords {
        let mut redactor = Redactor::new();
        let rows = BoardRows::capture_with(board, &[card], &mut redactor);
        let decompose_state = board
            .rows()
            .decompose_state(card)
            .map_or(Value::Null, |state| {
                Value::Object(redactor.object(&state.columns))
            });
        let aux_ledger = board
            .rows()
            .ledger(card)
            .iter()
            .map(|row| Value::Object(redactor.object(&row.columns)))
            .collect();
        AttemptRecords {
            rows,
            decompose_state,
            aux_ledger,
        }
    }
}

/// `kanban show ID --json` → `task.decompose`.
fn shown_decompose_state(board: &Board, card: &str) -> Value {
    board.cli_json(["kanban", "show", card, "--json"])["task"]["decompose"].clone()
}

/// Notes unless the card has exactly one `decompose_failed` event with this attempt number and
/// origin.
fn failed_attempt_event(
    board: &Board,
    card: &str,
    attempt: i64,
    origin: &str,
    findings: Findings,
) -> Findings {
    let failed = board.rows().events(card, "decompose_failed");
    findings.that(
        failed.iter().any(|event| {
            event.payload["attempt"] == json!(attempt) && event.payload["origin"] == json!(origin)
        }),
        || format!("no decompose_failed event for attempt {attempt} from {origin}"),
    )
}

#[rstest]
fn rejected_reply_is_a_recorded_failed_attempt(board: Board) {
    let aux = board.aux();
    let root = board.create("cyclic plans", &["--triage"]);
    let before = board.rows().task(&root);
    aux.reply(
        &root,
        Reply::fanout(vec![
            contract_task("Write part a", json!([1])),
            contract_task("Write part b", json!([0])),
        ]),
    );

    let run = decompose_card(&board, &root);

    bound("requests for one decompose", aux.billed_for(&root))
        .exactly(1)
        .gap(GapKind::NotOneRequest);
    graph_not_applied(&board, &before, &run)
        .verdict("a cyclic reply is rejected whole")
        .context(|| board.diag(&root))
        .gap(GapKind::InvalidGraphApplied);
    bound("attempts counted", board.rows().attempts(&root))
        .exactly(1)
        .context(|| board.diag(&root))
        .gap(GapKind::CallNotVisible);
    let ledger = board.rows().ledger(&root);
    let mut findings = Findings::new()
        .equal("ledger rows", &ledger.len(), &1)
        .that(ledger.iter().all(|row| row.outcome != "in_flight"), || {
            "a ledger row is left open".to_owned()
        });
    findings = failed_attempt_event(&board, &root, 1, "manual", findings);
    findings
        .verdict("the paid call is in the ledger and the events")
        .context(|| board.diag(&root))
        .gap(GapKind::CallNotVisible);
    assert_rows_snapshot!(
        "records_rejected_graph",
        "a cyclic reply: rows untouched; the attempt, its ledger row and a decompose_failed event recorded",
        AttemptRecords::capture(&board, &root)
    );
}

/// The ledger, and so `usage`, judges each paid call by what it bought: a usable reply is `ok`;
/// an HTTP failure and a reply that arrived whole but was rejected are both `failed` (the latter
/// is money spent on an unusable answer, and a person reading `usage` must see it as such).
#[rstest]
fn usage_reports_every_paid_call(#[with(Config::plain().retries(0))] board: Board) {
    let aux = board.aux();
    let good = board.create("splits fine", &["--triage"]);
    let broken = board.create("provider fails", &["--triage"]);
    let rejected = board.create("reply rejected", &["--triage"]);
    aux.reply(&good, Reply::graph(2, &[]));
    aux.reply(&broken, Reply::http_error(500, "upstream exploded"));
    aux.reply(&rejected, Reply::malformed());
    for card in [&good, &broken, &rejected] {
        decompose_card(&board, card);
    }

    let usage = board.cli_json(["kanban", "usage", "--json"]);

    let totals = &usage["totals"];
    bound("calls reported", totals["calls"].as_u64().unwrap_or(0))
        .exactly(aux.bills())
        .context(|| usage.to_string())
        .gap(GapKind::CallNotVisible);
    let cards = usage["cards"].as_array().cloned().unwrap_or_default();
    let mut findings = Findings::new()
        .equal("totals.ok", &totals["ok"], &json!(1))
        .equal("totals.failed", &totals["failed"], &json!(2))
        .equal(
            "window.calls_last_hour",
            &usage["window"]["calls_last_hour"],
            &json!(3),
        );
    for (card, ok, failed) in [(&good, 1, 0), (&broken, 0, 1), (&rejected, 0, 1)] {
        let entry = cards
            .iter()
            .find(|entry| entry["task_id"] == json!(card))
            .cloned()
            .unwrap_or(Value::Null);
        findings = findings.equal(
            &format!("usage of {card} (calls, attempts, ok, failed)"),
            &[
                &entry["calls"],
                &entry["attempts"],
                &entry["ok"],
                &entry["failed"],
            ],
            &[&json!(1), &json!(1), &json!(ok), &json!(failed)],
        );
    }
    findings
        .verdict("usage judges each paid call by what it bought")
        .context(|| usage.to_string())
        .gap(GapKind::CallNotVisible);
    let mut redactor = Redactor::new();
    BoardRows::capture_with(&board, &[&good, &broken, &rejected], &mut redactor);
    assert_rows_snapshot!(
        "usage_ok_failed_rejected",
        "`kanban usage --json` after a decomposed card, an HTTP 500 and a rejected reply",
        redactor.value(&usage)
    );
}

#[rstest]
fn opted_out_card_is_left_to_people(board: Board) {
    let aux = board.aux();
    let fresh = board.create("a fresh idea", &["--triage"]);
    let opted_out = board.create("hands off", &["--triage", "--no-auto-decompose"]);
    aux.reply(&opted_out, Reply::graph(2, &[]));
    let shown = shown_decompose_state(&board, &opted_out);

    let sweep = decompose_all(&board);

    bound(
        "sweep bills for the opted-out card",
        aux.billed_for(&opted_out),
    )
    .at_most(0)
    .context(|| sweep.output.to_string())
    .gap(GapKind::HoldDecomposed);
    Findings::new()
        .equal(
            "show --json reports the opt-out",
            &shown["opt_out"],
            &json!(true),
        )
        .equal(
            "sweep bills for the fresh card",
            &aux.billed_for(&fresh),
            &1,
        )
        .that(sweep.line_for(&opted_out).is_none(), || {
            "the sweep reported the opted-out card".to_owned()
        })
        .verdict("the sweep leaves the opted-out card alone")
        .context(|| sweep.output.to_string())
        .gap(GapKind::HoldDecomposed);

    let run = decompose_card(&board, &opted_out);

    bound(
        "requests of a person's decompose",
        aux.billed_for(&opted_out),
    )
    .exactly(1)
    .context(|| run.output.to_string())
    .gap(GapKind::NotOneRequest);
    applied_with_two_children(&board, &opted_out, &run)
        .verdict("a person's decompose of an opted-out card is applied")
        .context(|| board.diag(&opted_out))
        .gap(GapKind::ReplyNotApplied);
}

#[rstest]
fn sweep_skips_a_card_in_backoff(#[with(Config::plain().backoff(3600.0))] board: Board) {
    let aux = board.aux();
    let doomed = board.create("never splits", &["--triage"]);
    aux.reply(&doomed, Reply::malformed());

    let first = decompose_all(&board);
    let second = decompose_all(&board);

    bound("sweep bills for a card in backoff", aux.billed_for(&doomed))
        .exactly(1)
        .context(|| format!("{}\n{}", first.output, second.output))
        .gap(GapKind::BackoffIgnored);
    let shown = shown_decompose_state(&board, &doomed);
    let mut findings = Findings::new()
        .equal("lines of the second sweep", &second.lines.len(), &0)
        .equal(
            "exit code of the second sweep (nothing attempted)",
            &second.output.code,
            &Some(0),
        )
        .equal(
            "exit code of the first sweep (a card failed)",
            &first.output.code,
            &Some(1),
        )
        .equal("attempts shown", &shown["attempts"], &json!(1))
        .that(shown["next_attempt_at"].is_number(), || {
            format!("the card has no next due time: {shown}")
        });
    findings = failed_attempt_event(&board, &doomed, 1, "sweep", findings);
    findings
        .verdict("the sweep records the failure and its next due time")
        .context(|| format!("{}\n{}", first.output, second.output))
        .gap(GapKind::BackoffIgnored);
}

#[rstest]
fn sweep_budget_parks_a_card_and_a_person_may_still_try_once(
    #[with(Config::plain().max_attempts(2).backoff(0.0))] board: Board,
) {
    let aux = board.aux();
    let doomed = board.create("never splits", &["--triage"]);
    aux.reply(&doomed, Reply::malformed());

    let sweeps: Vec<Decomposition> = (0..3).map(|_| decompose_all(&board)).collect();

    let transcript = || {
        sweeps
            .iter()
            .map(|sweep| sweep.output.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    };
    bound("sweep bills with a budget of 2", aux.billed_for(&doomed))
        .exactly(2)
        .context(transcript)
        .gap(GapKind::RebilledEveryTick);
    Findings::new()
        .equal("lines of the third sweep", &sweeps[2].lines.len(), &0)
        .equal(
            "decompose_parked events",
            &board.rows().events(&doomed, "decompose_parked").len(),
            &1,
        )
        .equal(
            "parked, as shown",
            &shown_decompose_state(&board, &doomed)["parked"],
            &json!(true),
        )
        .equal("status", &board.rows().status(&doomed).as_str(), &"triage")
        .verdict("the spent budget parks the card in triage")
        .context(transcript)
        .gap(GapKind::RebilledEveryTick);

    let explicit = decompose_card(&board, &doomed);

    bound("bills after a person's decompose", aux.billed_for(&doomed))
        .exactly(3)
        .context(|| explicit.output.to_string())
        .gap(GapKind::NotOneRequest);
    holds(
        "a person's decompose of a parked card fails",
        explicit.ok() == Some(false),
    )
    .context(|| explicit.output.to_string())
    .gap(GapKind::ReplyNotApplied);
    assert_rows_snapshot!(
        "records_parked_then_explicit",
        "two failed sweeps park the card (budget 2); a third sweep skips it; an explicit decompose pays once more",
        AttemptRecords::capture(&board, &doomed)
    );
}

/// A valid 3-child graph whose reply body is over 1 MiB.
fn oversized_graph() -> Reply {
    let padding = "x".repeat(400 * 1024);
    let tasks = (0..3)
        .map(|i| {
            let mut task = contract_task(&format!("Huge part {i}"), json!([]));
            task["body"] = Value::from(padding.clone());
            task
        })
        .collect();
    Reply::fanout(tasks)
}

/// The verdicts of a hostile body: one attempt counted as failed, and no rows.
fn judge_failed_without_rows(board: &Board, root_before: &Task, run: &Decomposition) {
    let root = &root_before.id;
    graph_not_applied(board, root_before, run)
        .verdict("a hostile body is not applied")
        .context(|| format!("{}\n{}", run.output, board.diag(root)))
        .gap(GapKind::HostileReplyApplied);
    let mut findings = Findings::new();
    findings = findings.equal("attempts", &board.rows().attempts(root), &1);
    findings = failed_attempt_event(board, root, 1, "manual", findings);
    let outcomes: Vec<String> = board
        .rows()
        .ledger(root)
        .into_iter()
        .map(|row| row.outcome)
        .collect();
    findings = findings.that(
        outcomes
            .iter()
            .all(|outcome| outcome != "ok" && outcome != "in_flight"),
        || format!("every request is closed as a failure: {outcomes:?}"),
    );
    findings
        .verdict("a hostile body is one failed attempt, recorded")
        .context(|| board.diag(root))
        .gap(GapKind::CallNotVisible);
}

#[rstest]
fn reply_body_over_one_mib_is_refused(board: Board) {
    let aux = board.aux();
    let root = board.create("bait", &["--triage"]);
    let before = board.rows().task(&root);
    aux.reply(&root, oversized_graph());

    let run = decompose_card(&board, &root);

    bound("requests for an oversized body", aux.billed_for(&root))
        .exactly(1)
        .context(|| run.output.to_string())
        .gap(GapKind::NotOneRequest);
    judge_failed_without_rows(&board, &before, &run);
    assert_rows_snapshot!(
        "records_oversized_body",
        "a reply body over 1 MiB: cut off, counted as a failed attempt, no rows",
        AttemptRecords::capture(&board, &root)
    );
}

#[rstest]
fn stream_cut_before_done_fails_without_rows(#[with(Config::plain().retries(0))] board: Board) {
    let aux = board.aux();
    let root = board.create("cut short", &["--triage"]);
    let before = board.rows().task(&root);
    aux.reply(&root, Reply::cut_stream(graph_value(2, &[]).to_string()));

    let run = decompose_card(&board, &root);

    bound("requests for a cut stream", aux.billed_for(&root))
        .exactly(1)
        .context(|| run.output.to_string())
        .gap(GapKind::NotOneRequest);
    judge_failed_without_rows(&board, &before, &run);
    assert_rows_snapshot!(
        "records_cut_stream",
        "an SSE stream that ends before its finish reason and [DONE]: a failed attempt, no rows",
        AttemptRecords::capture(&board, &root)
    );
}

#[rstest]
#[case::two_retries(2)]
#[case::no_retries(0)]
fn http_500_is_retried_within_one_attempt(#[case] retries: u32) {
    let board = Board::new(Config::plain().retries(retries));
    let aux = board.aux();
    let root = board.create("flaky provider", &["--triage"]);
    let before = board.rows().task(&root);
    aux.reply(&root, Reply::http_error(500, "upstream exploded"));

    let run = decompose_card(&board, &root);

    let requests = retries as usize + 1;
    bound("requests in the one attempt", aux.billed_for(&root))
        .exactly(requests)
        .note(|| board.setting(Setting::Retries))
        .context(|| run.output.to_string())
        .gap(GapKind::NotOneRequest);
    bound(
        "ledger rows of the one attempt",
        board.rows().ledger(&root).len(),
    )
    .exactly(requests)
    .gap(GapKind::CallNotVisible);
    judge_failed_without_rows(&board, &before, &run);
    let label = case_label().unwrap_or_default();
    assert_rows_snapshot!(
        format!("records_http_500_{label}"),
        format!(
            "HTTP 500 with auxiliary.transient_retries: {retries}: one attempt of {requests} requests"
        ),
        AttemptRecords::capture(&board, &root)
    );
}

/// Twice the reference's longest wait before each retry (equal jitter over 0.5 s, then 1 s): a
/// retry this late waited past its delay; the other half is room for a loaded machine.
const LATE_RETRY_WAITS: [Duration; 2] =
    [Duration::from_millis(1_000), Duration::from_millis(2_000)];

#[rstest]
fn retries_come_within_their_longest_wait(#[with(Config::plain().retries(2))] board: Board) {
    let aux = board.aux();
    let root = board.create("a provider failing three times", &["--triage"]);
    aux.reply(&root, Reply::http_error(500, "upstream exploded"));

    let run = decompose_card(&board, &root);

    bound("requests in the one attempt", aux.billed_for(&root))
        .exactly(3)
        .note(|| board.setting(Setting::Retries))
        .context(|| run.output.to_string())
        .gap(GapKind::NotOneRequest);
    let gaps = aux.gaps_between_bills(&root);
    let late: Vec<String> = gaps
        .iter()
        .zip(LATE_RETRY_WAITS)
        .enumerate()
        .filter(|(_, (gap, late))| **gap >= *late)
        .map(|(retry, (gap, _))| format!("retry {} after {} ms", retry + 1, gap.as_millis()))
        .collect();
    bound("retries sent after twice their longest wait", late.len())
        .at_most(0)
        .note(|| late.join("; "))
        .context(|| run.output.to_string())
        .gap(GapKind::RetriesNotSpaced);
}

/// A card in flight in a process whose life cannot be checked from here (another host sharing
/// the board) stays claimed for the whole span its attempt may send in: a second decompose of it
/// is refused without a request, however long the first one's call takes.
#[rstest]
fn a_claim_from_another_host_holds_the_card_for_its_attempts_span(board: Board) {
    let aux = board.aux();
    let card = board.create("in flight on another host", &["--triage"]);
    // The first reply is let go only once the second decompose and `kanban show` are done,
    // however long they take; a second call is answered at once, so a target that bills the
    // claimed card shows it instead of waiting on itself.
    let gate = Gate::new();
    first_graph_gated(aux, &card, &gate);

    let (first, (second, arrived, shown, span)) =
        crate::while_decompose_is_out(&board, &card, &gate, |arrived| {
            let span = board.rows().claim_span_ms(&card);
            let claimed = board.rows().arrange_claim_from_another_host(&card);
            let second = decompose_card(&board, &card);
            let shown = board.cli(["kanban", "show", card.as_str()]);
            let arrived =
                arrived
                    .map_err(|timeout| timeout.to_string())
                    .and_then(|()| match claimed {
                        1 => Ok(()),
                        rows => Err(format!(
                            "moving the claim to another host changed {rows} rows"
                        )),
                    });
            (second, arrived, shown, span)
        });
    let in_flight = arrived
        .and_then(|()| aux.open_until_released(&card, &gate).map(|_| ()))
        .map_err(|seen| {
            format!(
                "the card was not in flight on another host while the second decompose ran: {seen}"
            )
        });
    // The claim must outlast every moment the attempt may still be sending, or a holder whose
    // life cannot be checked is taken over mid-attempt (contract §7, B1): 10 s to start, the
    // timeout of every try, the longest waits between tries, and 30 s of grace.
    let config = board.config();
    let timeout = config
        .in_force(board.target(), Setting::CallTimeout)
        .unwrap_or(120.0);
    let retries = config
        .in_force(board.target(), Setting::Retries)
        .unwrap_or(2.0) as u32;
    let waits: f64 = (1..=retries)
        .map(|retry| (0.5 * 2f64.powi(retry as i32 - 1)).min(8.0))
        .sum();
    let owed_ms = ((10.0 + timeout * f64::from(retries + 1) + waits + 30.0) * 1000.0) as i64;
    bound(
        "the claim's span, in ms, short of every moment its attempt may send",
        owed_ms - span.unwrap_or(0),
    )
    .at_most(0)
    .note(|| format!("claim span {span:?} ms; timeout {timeout} s, {retries} retries"))
    .provided(&in_flight)
    .gap(GapKind::InFlightRebilled);

    bound(
        "requests for a card in flight on another host",
        aux.billed_for(&card),
    )
    .exactly(1)
    .context(|| format!("{}\n{}", first.output, second.output))
    .provided(&in_flight)
    .gap(GapKind::InFlightRebilled);
    holds(
        "`kanban show` of the card says it is in flight and until when",
        shown.stdout.contains("in flight: attempt 1") && shown.stdout.contains("claimed until"),
    )
    .context(|| shown.to_string())
    .provided(&in_flight)
    .gap(GapKind::CallNotVisible);
}
