//! What only the reference has: the per-card attempt record and the aux-call ledger, `kanban
//! usage`, the `--no-auto-decompose` opt-out, the sweep's attempt budget and backoff, and the
//! bounds on hostile provider bodies (1 MiB cap, cut streams, transient retries). The `external`
//! nextest profile leaves this module out by name.

use fixtures::observe;
use fixtures::prelude::*;
use fixtures::snapshot::{BoardRows, Redactor};
use rstest::rstest;
use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::{decompose_all, decompose_card, graph_not_applied};

/// The card's attempt record (`hermes_decompose_state`), if it has one.
fn decompose_state(board: &Board, card: &str) -> Option<Map<String, Value>> {
    board
        .query(
            "SELECT * FROM hermes_decompose_state WHERE task_id = ?1",
            [card],
        )
        .into_iter()
        .next()
}

/// Attempts counted on the card.
fn attempts(board: &Board, card: &str) -> i64 {
    decompose_state(board, card)
        .and_then(|state| state.get("attempts").and_then(Value::as_i64))
        .unwrap_or(0)
}

/// The card's ledger rows (one per HTTP request), oldest first.
fn ledger(board: &Board, card: &str) -> Vec<Map<String, Value>> {
    board.query(
        "SELECT * FROM hermes_aux_ledger WHERE task_id = ?1 ORDER BY id",
        [card],
    )
}

/// Ledger outcomes of the card, oldest first.
fn outcomes(board: &Board, card: &str) -> Vec<String> {
    ledger(board, card)
        .iter()
        .map(|row| {
            row.get("outcome")
                .and_then(Value::as_str)
                .unwrap_or("<none>")
                .to_owned()
        })
        .collect()
}

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
        let decompose_state = decompose_state(board, card)
            .map_or(Value::Null, |state| Value::Object(redactor.object(&state)));
        let aux_ledger = ledger(board, card)
            .iter()
            .map(|row| Value::Object(redactor.object(row)))
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

/// A failed attempt has exactly one `decompose_failed` event with this attempt number and origin.
fn assert_failed_attempt_event(board: &Board, card: &str, attempt: i64, origin: &str) {
    let failed = board.events(card, "decompose_failed");
    assert!(
        failed.iter().any(|event| {
            event.payload["attempt"] == json!(attempt) && event.payload["origin"] == json!(origin)
        }),
        "a decompose_failed event for attempt {attempt} from {origin}\n{}",
        board.diag(card)
    );
}

#[rstest]
fn rejected_reply_is_a_recorded_failed_attempt(board: Board) {
    let aux = board.aux();
    let root = board.create("cyclic plans", &["--triage"]);
    let before = board.task(&root);
    aux.reply(
        &root,
        Reply::json(json!({"fanout": true, "rationale": "loop", "tasks": [
            {"title": "a", "body": "", "assignee": null, "parents": [1]},
            {"title": "b", "body": "", "assignee": null, "parents": [0]},
        ]})),
    );

    let run = decompose_card(&board, &root);

    assert_eq!(aux.billed_for(&root), 1);
    if let Err(applied) = graph_not_applied(&board, &before, &run) {
        panic!("a cyclic reply was applied: {applied}");
    }
    let counted = attempts(&board, &root);
    observe::record(
        "attempts_counted",
        usize::try_from(counted).unwrap_or(0),
        Some(1),
    );
    assert_eq!(counted, 1, "the attempt is counted\n{}", board.diag(&root));
    let outcomes = outcomes(&board, &root);
    assert_eq!(
        outcomes.len(),
        1,
        "one ledger row per request: {outcomes:?}"
    );
    assert_ne!(outcomes[0], "in_flight", "the ledger row is closed");
    assert_failed_attempt_event(&board, &root, 1, "manual");
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
fn usage_reports_every_paid_call(#[with("auxiliary: {transient_retries: 0}")] board: Board) {
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
    let calls = totals["calls"]
        .as_u64()
        .and_then(|n| usize::try_from(n).ok());
    observe::record("calls_reported", calls.unwrap_or(0), Some(3));
    assert_eq!(
        calls,
        Some(aux.bills()),
        "usage counts what was billed: {usage}"
    );
    assert_eq!(totals["ok"], json!(1), "{usage}");
    assert_eq!(totals["failed"], json!(2), "{usage}");
    assert_eq!(usage["window"]["calls_last_hour"], json!(3), "{usage}");
    let cards = usage["cards"].as_array().cloned().unwrap_or_default();
    for (card, ok, failed) in [(&good, 1, 0), (&broken, 0, 1), (&rejected, 0, 1)] {
        let Some(entry) = cards.iter().find(|entry| entry["task_id"] == json!(card)) else {
            panic!("no usage entry for {card}: {usage}");
        };
        assert_eq!(entry["calls"], json!(1), "{entry}");
        assert_eq!(entry["attempts"], json!(1), "{entry}");
        assert_eq!(entry["ok"], json!(ok), "{entry}");
        assert_eq!(entry["failed"], json!(failed), "{entry}");
    }
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
    assert_eq!(
        shown_decompose_state(&board, &opted_out)["opt_out"],
        json!(true),
        "show --json reports the opt-out"
    );

    let sweep = decompose_all(&board);

    assert_eq!(aux.billed_for(&fresh), 1, "{}", sweep.output);
    let swept = aux.billed_for(&opted_out);
    observe::record("sweep_bills_for_opted_out", swept, Some(0));
    assert_eq!(
        swept, 0,
        "the sweep never bills an opted-out card\n{}",
        sweep.output
    );
    assert!(sweep.line_for(&opted_out).is_none(), "{}", sweep.output);

    let run = decompose_card(&board, &opted_out);

    assert_eq!(
        aux.billed_for(&opted_out),
        1,
        "a person's decompose is one request"
    );
    assert_eq!(run.ok(), Some(true), "{}", run.output);
    assert_eq!(
        board.children_of(&opted_out).len(),
        2,
        "{}",
        board.diag(&opted_out)
    );
}

#[rstest]
fn sweep_skips_a_card_in_backoff(
    #[with("kanban: {decompose_backoff_seconds: 3600}")] board: Board,
) {
    let aux = board.aux();
    let doomed = board.create("never splits", &["--triage"]);
    aux.reply(&doomed, Reply::malformed());

    let first = decompose_all(&board);
    let second = decompose_all(&board);

    let bills = aux.billed_for(&doomed);
    observe::record("bills", bills, Some(1));
    assert_eq!(
        bills, 1,
        "in backoff, the sweep does not bill it again\n{}\n{}",
        first.output, second.output
    );
    assert!(
        second.lines.is_empty(),
        "nothing attempted, nothing printed\n{}",
        second.output
    );
    assert_eq!(
        second.output.code,
        Some(0),
        "nothing attempted is not a failure\n{}",
        second.output
    );
    assert_eq!(
        first.output.code,
        Some(1),
        "an attempted card failed\n{}",
        first.output
    );
    let shown = shown_decompose_state(&board, &doomed);
    assert_eq!(shown["attempts"], json!(1), "{shown}");
    assert!(
        shown["next_attempt_at"].is_number(),
        "the card has a next due time: {shown}"
    );
    assert_failed_attempt_event(&board, &doomed, 1, "sweep");
}

#[rstest]
fn sweep_budget_parks_a_card_and_a_person_may_still_try_once(
    #[with("kanban: {decompose_max_attempts: 2, decompose_backoff_seconds: 0}")] board: Board,
) {
    let aux = board.aux();
    let doomed = board.create("never splits", &["--triage"]);
    aux.reply(&doomed, Reply::malformed());

    let sweeps: Vec<_> = (0..3).map(|_| decompose_all(&board)).collect();

    let swept = aux.billed_for(&doomed);
    observe::record("sweep_bills", swept, Some(2));
    let transcript: Vec<String> = sweeps
        .iter()
        .map(|sweep| sweep.output.to_string())
        .collect();
    assert_eq!(
        swept,
        2,
        "the budget is 2 attempts\n{}",
        transcript.join("\n")
    );
    assert!(
        sweeps[2].lines.is_empty(),
        "a parked card is not attempted\n{}",
        sweeps[2].output
    );
    assert_eq!(
        board.events(&doomed, "decompose_parked").len(),
        1,
        "{}",
        board.diag(&doomed)
    );
    assert_eq!(
        shown_decompose_state(&board, &doomed)["parked"],
        json!(true)
    );
    assert_eq!(
        board.task(&doomed).status,
        "triage",
        "a parked card stays in triage"
    );

    let explicit = decompose_card(&board, &doomed);

    assert_eq!(
        aux.billed_for(&doomed),
        3,
        "a person's decompose of a parked card is exactly one request\n{}",
        explicit.output
    );
    assert_eq!(explicit.ok(), Some(false), "{}", explicit.output);
    assert_rows_snapshot!(
        "records_parked_then_explicit",
        "two failed sweeps park the card (budget 2); a third sweep skips it; an explicit decompose pays once more",
        AttemptRecords::capture(&board, &doomed)
    );
}

/// A valid 3-child graph whose reply body is over 1 MiB.
fn oversized_graph() -> Reply {
    let padding = "x".repeat(400 * 1024);
    Reply::json(json!({"fanout": true, "rationale": "padded", "tasks": [
        {"title": "huge 0", "body": padding, "assignee": null, "parents": []},
        {"title": "huge 1", "body": padding, "assignee": null, "parents": []},
        {"title": "huge 2", "body": padding, "assignee": null, "parents": []},
    ]}))
}

/// Common verdict of a hostile body: one attempt counted as failed, and no rows.
fn assert_failed_without_rows(board: &Board, root_before: &Task, run: &crate::Decomposition) {
    let root = &root_before.id;
    if let Err(applied) = graph_not_applied(board, root_before, run) {
        panic!("a hostile reply was applied: {applied}");
    }
    assert_eq!(
        attempts(board, root),
        1,
        "one attempt\n{}",
        board.diag(root)
    );
    assert_failed_attempt_event(board, root, 1, "manual");
    let outcomes = outcomes(board, root);
    assert!(
        outcomes
            .iter()
            .all(|outcome| outcome != "ok" && outcome != "in_flight"),
        "every request is closed as a failure: {outcomes:?}"
    );
}

#[rstest]
fn reply_body_over_one_mib_is_refused(board: Board) {
    let aux = board.aux();
    let root = board.create("bait", &["--triage"]);
    let before = board.task(&root);
    aux.reply(&root, oversized_graph());

    let run = decompose_card(&board, &root);

    let bills = aux.billed_for(&root);
    observe::record("bills", bills, Some(1));
    assert_eq!(bills, 1, "an oversized body is not retried\n{}", run.output);
    assert_failed_without_rows(&board, &before, &run);
    assert_rows_snapshot!(
        "records_oversized_body",
        "a reply body over 1 MiB: cut off, counted as a failed attempt, no rows",
        AttemptRecords::capture(&board, &root)
    );
}

#[rstest]
fn stream_cut_before_done_fails_without_rows(
    #[with("auxiliary: {transient_retries: 0}")] board: Board,
) {
    let aux = board.aux();
    let root = board.create("cut short", &["--triage"]);
    let before = board.task(&root);
    let graph = json!({"fanout": true, "rationale": "split", "tasks": [
        {"title": "streamed 0", "body": "b", "assignee": null, "parents": []},
        {"title": "streamed 1", "body": "b", "assignee": null, "parents": []},
    ]});
    aux.reply(&root, Reply::cut_stream(graph.to_string()));

    let run = decompose_card(&board, &root);

    let bills = aux.billed_for(&root);
    observe::record("bills", bills, Some(1));
    assert_eq!(bills, 1, "{}", run.output);
    assert_failed_without_rows(&board, &before, &run);
    assert_rows_snapshot!(
        "records_cut_stream",
        "an SSE stream that ends before its finish reason and [DONE]: a failed attempt, no rows",
        AttemptRecords::capture(&board, &root)
    );
}

#[rstest]
#[case::default_retries("records_http_500_two_retries", 2)]
#[case::no_retries("records_http_500_no_retries", 0)]
fn http_500_is_retried_within_one_attempt(#[case] name: &str, #[case] retries: usize) {
    let board = Board::new(&format!("auxiliary: {{transient_retries: {retries}}}"));
    let aux = board.aux();
    let root = board.create("flaky provider", &["--triage"]);
    let before = board.task(&root);
    aux.reply(&root, Reply::http_error(500, "upstream exploded"));

    let run = decompose_card(&board, &root);

    let bills = aux.billed_for(&root);
    observe::record("bills", bills, Some(retries + 1));
    assert_eq!(
        bills,
        retries + 1,
        "transient_retries: {retries} means {} requests in the one attempt\n{}",
        retries + 1,
        run.output
    );
    assert_eq!(
        ledger(&board, &root).len(),
        retries + 1,
        "one ledger row per request"
    );
    assert_failed_without_rows(&board, &before, &run);
    assert_rows_snapshot!(
        name,
        format!(
            "HTTP 500 with auxiliary.transient_retries: {retries}: one attempt of {} requests",
            retries + 1
        ),
        AttemptRecords::capture(&board, &root)
    );
}
