//! Replies that must be rejected whole (contract §7 B3 and §5): the card stays in triage with its
//! title and body, no row is written but the attempt's own records, and exactly one request was
//! paid for it.
//!
//! Each reply breaks the contract in exactly one way, named by its case; everything else about
//! it is what the contract asks for (see `fixtures::aux_model`).

use fixtures::aux_model::{contract_task, graph_value, sse_content_event, ROSTER_DEFAULT};
use fixtures::snapshot::BoardRows;
use fixtures::verdict::case_label;
use judge::prelude::*;
use rstest::rstest;
use serde_json::json;

use crate::{decompose_card, graph_not_applied};

/// Two contract tasks, `a` and `b`, waiting for `a_parents` and `b_parents`.
fn pair(a_parents: serde_json::Value, b_parents: serde_json::Value) -> Reply {
    Reply::fanout(vec![
        contract_task("Write part a", a_parents),
        contract_task("Write part b", b_parents),
    ])
}

/// A contract task whose title is `title`, whatever it is.
fn titled(title: &str) -> serde_json::Value {
    contract_task(title, json!([]))
}

/// A stream whose first event carries a whole, valid graph, and whose second event is cut off
/// in the middle of its JSON: the connection ended before the stream said it was complete.
fn cut_mid_event() -> Reply {
    let whole = sse_content_event(&graph_value(2, &[]).to_string());
    Reply::raw(
        200,
        "text/event-stream",
        format!("{whole}data: {{\"choices\":[{{\"delta\":{{\"content\""),
    )
}

#[rstest]
#[case::cycle("a parent cycle", pair(json!([1]), json!([0])))]
#[case::self_parent("a self-parent", pair(json!([0]), json!([])))]
#[case::parent_out_of_range("an out-of-range parent index", pair(json!([]), json!([5])))]
#[case::parent_at_task_count("a parent index equal to the task count", pair(json!([]), json!([2])))]
#[case::parent_negative("a negative parent index", pair(json!([]), json!([-1])))]
#[case::parent_not_integer("a non-integer parent index", pair(json!([]), json!(["0"])))]
#[case::task_not_object(
    "a non-object task",
    Reply::fanout(vec![json!("write the code"), titled("Write part b")])
)]
#[case::blank_title(
    "a blank child title",
    Reply::fanout(vec![titled("Write part a"), titled("   ")])
)]
#[case::fanout_without_tasks("a fan-out with no tasks", Reply::fanout(vec![]))]
#[case::single_without_title_or_body(
    "a single promotion with neither title nor body",
    Reply::json(json!({
        "fanout": false,
        "rationale": "The card is one unit of work.",
        "assignee": ROSTER_DEFAULT,
    }))
)]
#[case::single_with_blank_title_and_body(
    "a single promotion whose title and body are blank",
    Reply::json(json!({
        "fanout": false,
        "rationale": "The card is one unit of work.",
        "title": "  ",
        "body": " \n ",
        "assignee": ROSTER_DEFAULT,
    }))
)]
#[case::not_json("a non-JSON", Reply::malformed())]
#[case::stream_cut_mid_event(
    "a stream cut in the middle of an event, after a whole graph,",
    cut_mid_event()
)]
fn rejected_reply_leaves_the_board_unchanged(
    #[case] fault: &str,
    #[case] reply: Reply,
    board: Board,
) {
    let aux = board.aux();
    let root = board.create(
        "an idea the decomposer may botch",
        &["--triage", "--body", "the original body"],
    );
    let before = board.rows().task(&root);
    aux.reply(&root, reply);

    let run = decompose_card(&board, &root);

    graph_not_applied(&board, &before, &run)
        .verdict("the reply is rejected whole")
        .note(|| format!("{fault} reply was applied"))
        .context(|| format!("{}\n{}", run.output, board.diag(&root)))
        .gap(GapKind::InvalidGraphApplied);
    bound("requests for one decompose", aux.billed_for(&root))
        .exactly(1)
        .context(|| run.output.to_string())
        .gap(GapKind::NotOneRequest);
    let reason = run.line()["reason"].as_str().unwrap_or_default();
    holds(
        "a failed decompose says why",
        run.ok() != Some(false) || !reason.trim().is_empty(),
    )
    .context(|| run.output.to_string())
    .gap(GapKind::UnclearRefusal);
    let label = case_label().unwrap_or_default();
    assert_rows_snapshot!(
        format!("rejected_{label}"),
        format!("{fault} reply: rejected whole, only the attempt's records change"),
        BoardRows::capture(&board, &[&root])
    );
}
