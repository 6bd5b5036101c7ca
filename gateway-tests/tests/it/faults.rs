//! Every other way one card's decomposition can fail, through the seed's rebill gate: HTTP
//! refusals, a hang past the call timeout, a stream cut before `[DONE]`, and fan-outs the
//! decomposer must reject whole (too many children, a cycle).

use std::time::Duration;

use fixtures::observe;
use fixtures::prelude::*;
use rstest::rstest;
use serde_json::json;

use crate::support::{
    assert_no_graph, await_first_bill, blocked_probe_timeout, gateway_config, rebilled_every_tick,
    start_gateway,
};
use crate::{MAX_CHILDREN, MAX_FAILED_ATTEMPTS, PROBE_TICKS};

/// A target rightly pauses every card after a 401/402/403 (or for a 429's `Retry-After`); a short
/// cooldown lets the tick probes through afterwards, so this file can count one card's bills
/// over proven ticks. The pause itself is proven in `provider_wide`. The key is the reference's;
/// other targets ignore it.
const SHORT_PAUSE: &str = "kanban:\n  provider_cooldown_seconds: 1\n";

/// `Retry-After` seconds on the 429s here: short for the same reason.
const SHORT_RETRY_AFTER: u64 = 1;

/// A call timeout far below the hang, so a target that honours it ends the attempt quickly.
const SHORT_TIMEOUT: &str = "auxiliary:\n  timeout_seconds: 0.5\n";

/// Longer than any test here runs: the fake provider never answers within it (dropping the
/// provider ends the hang at once).
const HANG: Duration = Duration::from_secs(600);

/// A valid three-child graph, so that a client which accepts a stream without its end would
/// write rows.
fn three_child_graph() -> String {
    let tasks: Vec<_> = (0..3)
        .map(
            |i| json!({"title": format!("child {i}"), "body": "", "assignee": null, "parents": []}),
        )
        .collect();
    json!({"fanout": true, "rationale": "split", "tasks": tasks}).to_string()
}

#[rstest]
#[case::http_429(
    "http_429",
    Reply::http_error(429, "rate limited").retry_after(SHORT_RETRY_AFTER),
    SHORT_PAUSE
)]
#[case::http_401("http_401", Reply::http_error(401, "invalid api key"), SHORT_PAUSE)]
#[case::http_402("http_402", Reply::http_error(402, "insufficient quota"), SHORT_PAUSE)]
#[case::http_403("http_403", Reply::http_error(403, "model not allowed"), SHORT_PAUSE)]
#[case::hang_past_timeout("hang_past_timeout", Reply::hang(HANG), SHORT_TIMEOUT)]
#[case::stream_cut_before_done(
    "stream_cut_before_done",
    Reply::cut_stream(three_child_graph()),
    ""
)]
fn failing_triage_card_is_not_rebilled_every_tick(
    #[case] failure: &str,
    #[case] reply: Reply,
    #[case] extra_config: &str,
) {
    let board = Board::new(&gateway_config(extra_config));
    let aux = board.aux();
    let doomed = board.create("an idea the decomposer can never split", &["--triage"]);
    aux.reply(&doomed, reply);

    let gateway = start_gateway(&board);
    await_first_bill(&board, &gateway, &doomed);
    // Bounded: a dispatcher blocked by this failure fails fast instead of waiting out minutes.
    let ticks = try_prove_ticks_within(
        &board,
        &gateway,
        PROBE_TICKS,
        blocked_probe_timeout(board.target()),
    );
    let bills = aux.billed_for(&doomed);
    drop(gateway);
    observe::record("bills_for_doomed_card", bills, Some(MAX_FAILED_ATTEMPTS));

    assert_no_graph(&board, &doomed);
    known_gate(failure, || {
        ticks?;
        rebilled_every_tick(bills, &board.task(&doomed).status)
    });
}

#[rstest]
#[case::too_many_children(
    "fanout_over_max_children",
    Reply::graph(MAX_CHILDREN + 1, &[])
)]
#[case::cycle("fanout_with_cycle", Reply::graph(3, &[(0, &[2]), (1, &[0]), (2, &[1])]))]
fn rejected_fanout_writes_no_rows_and_is_not_rebilled_every_tick(
    #[case] failure: &str,
    #[case] reply: Reply,
    #[with(GATEWAY_CONFIG)] board: Board,
) {
    let aux = board.aux();
    let root = board.create("an idea split the wrong way", &["--triage"]);
    aux.reply(&root, reply);
    let tasks_before = board.task_count();

    let gateway = start_gateway(&board);
    await_first_bill(&board, &gateway, &root);
    let ticks = try_prove_ticks_within(
        &board,
        &gateway,
        PROBE_TICKS,
        blocked_probe_timeout(board.target()),
    );
    let bills = aux.billed_for(&root);
    drop(gateway);
    observe::record(
        "bills_for_rejected_fanout",
        bills,
        Some(MAX_FAILED_ATTEMPTS),
    );

    known_gate(failure, || {
        let probes = ticks?;
        let children = board.children_of(&root);
        let new_rows = board
            .task_count()
            .saturating_sub(tasks_before + probes.len());
        let decomposed = board.events(&root, "decomposed").len();
        let status = board.task(&root).status;
        if !children.is_empty() || new_rows > 0 || decomposed > 0 || status != "triage" {
            return Err(Gap::new(
                GapKind::UnboundedFanout,
                format!(
                    "rejected fan-out created {} child rows ({new_rows} new task rows, \
                     {decomposed} decomposed events), root status={status} \
                     (bound 0 rows, root stays in triage)",
                    children.len()
                ),
            ));
        }
        rebilled_every_tick(bills, &status)
    });
}
