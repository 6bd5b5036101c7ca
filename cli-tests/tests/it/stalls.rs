//! A reply that starts and then stops (contract §7 B8, §2 `auxiliary.timeout_seconds`: a bound on one
//! request, streaming included): the status line and headers sent and then nothing, or part of
//! the body (some SSE events, half a chunked JSON document) and then nothing. The call ends at
//! the call timeout, measured from the provider's side (when the client hung up), not at the
//! stall's end; it is one failed attempt and writes no rows. When two timeouts are configured,
//! the stricter one ends the call, whichever key holds it.

use std::time::{Duration, Instant};

use fixtures::aux_model::graph_value;
use fixtures::aux_model::{AnswerEnd, Received};
use fixtures::rows::Task;
use judge::prelude::*;
use rstest::rstest;

use crate::{assert_no_crash, graph_not_applied, json_lines, Decomposition};

/// The call timeout of these tests: short, so the tests are, and far above a local exchange.
const CALL_TIMEOUT: f64 = 1.0;

/// A timeout that must not be the one that applies: far above [`CALL_TIMEOUT`], far below the
/// stall.
const LOOSE_TIMEOUT: f64 = 30.0;

/// Longer than any test: the stalled body never resumes by itself (dropping the provider ends
/// it at once).
const STALL: Duration = Duration::from_secs(600);

/// How long after the timeout the client may hang up: the timer starts before the request
/// arrives and ends in a runtime shared with other work, on a loaded machine.
const HANG_UP_SLACK: Duration = Duration::from_millis(1500);

/// How long `kanban decompose` may go on beyond the timeout, from its request's arrival: the
/// hang-up, recording the failure, exiting. The process's start-up is not counted: a slow
/// interpreter under load must not decide a verdict on the call timeout.
const CLI_SLACK: Duration = Duration::from_secs(5);

/// When the test stops a decompose that still waits on the stalled body (a target that ignores
/// the timeout): the timing verdicts then fail, and the test goes on.
const CLI_LIMIT: Duration = Duration::from_secs(40);

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The settings: one request per attempt, the decomposer's timeout `secs`.
fn timed_out_after(secs: f64) -> Config {
    Config::plain().retries(0).call_timeout(secs)
}

/// A reply that stalls as the case says.
fn stalled(shape: &str) -> Reply {
    let graph = graph_value(2, &[]).to_string();
    match shape {
        "after_head" => Reply::json(graph_value(2, &[])).stalled_after_head(STALL),
        "mid_event_stream" => Reply::event_stream(graph).stalled_mid_body(STALL),
        "mid_chunked_json" => Reply::json(graph_value(2, &[]))
            .chunked()
            .stalled_mid_body(STALL),
        other => unreachable!("no stall shape {other}"),
    }
}

/// `kanban decompose ID --json`, stopped after [`CLI_LIMIT`]; with when it ended.
fn decompose_stalled(board: &Board, card: &str) -> (Decomposition, Instant) {
    let output = board.cli_within(["kanban", "decompose", card, "--json"], CLI_LIMIT);
    let ended = Instant::now();
    // A decompose stopped at the limit is judged by the timing verdicts, not as a crash.
    let lines = if output.timed_out {
        Vec::new()
    } else {
        assert_no_crash(&output);
        json_lines(&output)
    };
    (Decomposition { output, lines }, ended)
}

/// The card's one request as the provider saw it, once its answer ended (the client hung up, or
/// the test stopped it).
fn the_stalled_request(board: &Board, card: &str) -> Option<Received> {
    let ended = |board: &Board| {
        board
            .aux()
            .billed_calls()
            .into_iter()
            .find(|call| call.card().as_deref() == Some(card))
            .filter(|call| call.answer.end.is_some())
    };
    let _ = try_wait_until(
        || ended(board).is_some(),
        Duration::from_secs(10),
        "the stalled answer to end",
    );
    ended(board)
}

/// Every verdict on one decompose of `card` answered by a stalled body, with `timeout` the one
/// that must apply.
fn judge_stalled_call(board: &Board, card: &str, before: &Task, timeout: Duration, what: &str) {
    let (run, ended) = decompose_stalled(board, card);
    let request = the_stalled_request(board, card);
    // From the request's arrival to the process's end.
    let took = request
        .as_ref()
        .map(|call| ended.saturating_duration_since(call.arrived));
    let sent = took
        .map(|_| ())
        .ok_or_else(|| "the decompose sent no request".to_owned());
    // Until the client hung up, or until now when it never did.
    let held = request.as_ref().map(|call| {
        call.answer
            .ended
            .unwrap_or_else(Instant::now)
            .saturating_duration_since(call.arrived)
    });
    // The precondition: the stall was reached, so the client saw the head (and any body sent).
    if let Some(call) = &request {
        let reached = call.answer.head_sent.is_some()
            && call.answer.stall.map(|stall| stall.after_bytes)
                == Some(call.answer.body_bytes_sent);
        assert!(reached, "the client hung up before the stall: {call:?}");
    }
    let transcript = || format!("{}\n{}", run.output, board.diag(card));

    bound("requests for one decompose", board.aux().billed_for(card))
        .exactly(1)
        .context(transcript)
        .gap(GapKind::NotOneRequest);
    bound(
        format!("ms the client held {what} before hanging up"),
        held.map_or(u64::MAX, millis),
    )
    .at_most(millis(timeout + HANG_UP_SLACK))
    .note(|| {
        format!(
            "{}; the stall lasts {}s",
            board.setting(Setting::CallTimeout),
            STALL.as_secs()
        )
    })
    .context(transcript)
    .gap(GapKind::CallTimeoutIgnored);
    bound(
        format!("ms the client held {what} before hanging up, at least"),
        held.map_or(0, millis),
    )
    .at_least(millis(timeout.mul_f64(0.9)))
    .note(|| board.setting(Setting::CallTimeout))
    .context(transcript)
    .gap(GapKind::CallTimeoutIgnored);
    holds(
        format!("the client hung up on {what}"),
        request
            .as_ref()
            .is_some_and(|call| call.answer.end == Some(AnswerEnd::ClientClosed)),
    )
    .note(|| format!("{:?}", request.as_ref().map(|call| &call.answer)))
    .gap(GapKind::CallTimeoutIgnored);
    bound(
        format!("ms a decompose waited on {what}"),
        took.map_or(u64::MAX, millis),
    )
    .at_most(millis(timeout + CLI_SLACK))
    .note(|| "from its request's arrival to its exit".to_owned())
    .context(|| run.output.to_string())
    .provided(&sent)
    .gap(GapKind::CallTimeoutIgnored);
    graph_not_applied(board, before, &run)
        .verdict(format!("{what} is not applied"))
        .context(transcript)
        .gap(GapKind::HostileReplyApplied);
    if board.reads(Setting::MaxAttempts) {
        let outcomes: Vec<String> = board
            .rows()
            .ledger(card)
            .into_iter()
            .map(|row| row.outcome)
            .collect();
        Findings::new()
            .equal("attempts", &board.rows().attempts(card), &1)
            .equal(
                "decompose_failed events",
                &board.rows().events(card, "decompose_failed").len(),
                &1,
            )
            .equal("ledger outcomes", &outcomes, &vec!["timeout".to_owned()])
            .verdict(format!(
                "{what} is one failed attempt, recorded as a timeout"
            ))
            .context(transcript)
            .gap(GapKind::CallNotVisible);
    }
}

#[rstest]
#[case::after_head("after_head")]
#[case::mid_event_stream("mid_event_stream")]
#[case::mid_chunked_json("mid_chunked_json")]
fn a_reply_that_stalls_ends_at_the_call_timeout_as_one_failed_attempt(#[case] shape: &str) {
    let board = Board::new(timed_out_after(CALL_TIMEOUT));
    let card = board.create("a reply that starts, then stops", &["--triage"]);
    board.aux().reply(&card, stalled(shape));
    let before = board.rows().task(&card);

    judge_stalled_call(
        &board,
        &card,
        &before,
        Duration::from_secs_f64(CALL_TIMEOUT),
        "a stalled body",
    );
}

/// `auxiliary.kanban_decomposer.timeout` (upstream's key for the decomposer) and
/// `auxiliary.timeout_seconds` both bound the call: the stricter ends it, whichever holds it.
#[rstest]
#[case::decomposer_timeout_stricter(CALL_TIMEOUT, LOOSE_TIMEOUT)]
#[case::aux_timeout_stricter(LOOSE_TIMEOUT, CALL_TIMEOUT)]
fn the_stricter_of_two_call_timeouts_ends_a_stalled_body(
    #[case] decomposer_timeout: f64,
    #[case] aux_timeout: f64,
) {
    // `auxiliary.timeout_seconds` has no setter: it is the one key here no target is given
    // by default.
    let board = Board::new(
        timed_out_after(decomposer_timeout)
            .yaml(&format!("auxiliary:\n  timeout_seconds: {aux_timeout}\n")),
    );
    let card = board.create("two timeouts, one stalled body", &["--triage"]);
    board.aux().reply(&card, stalled("mid_chunked_json"));
    let before = board.rows().task(&card);

    judge_stalled_call(
        &board,
        &card,
        &before,
        Duration::from_secs_f64(decomposer_timeout.min(aux_timeout)),
        "a stalled body under two timeouts",
    );
}
