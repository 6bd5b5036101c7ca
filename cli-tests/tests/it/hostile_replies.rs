//! Replies that must be rejected whole (SPEC B3 and §5): the card stays in triage with its
//! title and body, no row is written but the attempt's own records, and exactly one request was
//! paid for it.

use fixtures::observe;
use fixtures::prelude::*;
use fixtures::snapshot::BoardRows;
use rstest::rstest;
use serde_json::{json, Value};

use crate::{decompose_card, graph_not_applied};

/// A fan-out reply with these `tasks` entries.
fn fanout(tasks: Value) -> Reply {
    Reply::json(json!({"fanout": true, "rationale": "split", "tasks": tasks}))
}

/// A well-formed child entry waiting for `parents`.
fn child(title: &str, parents: Value) -> Value {
    json!({"title": title, "body": format!("spec of {title}"), "assignee": null, "parents": parents})
}

#[rstest]
#[case::cycle(
    "rejected_cycle",
    "a parent cycle",
    fanout(json!([child("a", json!([1])), child("b", json!([0]))]))
)]
#[case::self_parent(
    "rejected_self_parent",
    "a self-parent",
    fanout(json!([child("a", json!([0])), child("b", json!([]))]))
)]
#[case::parent_out_of_range(
    "rejected_parent_out_of_range",
    "an out-of-range parent index",
    fanout(json!([child("a", json!([])), child("b", json!([5]))]))
)]
#[case::parent_negative(
    "rejected_parent_negative",
    "a negative parent index",
    fanout(json!([child("a", json!([])), child("b", json!([-1]))]))
)]
#[case::parent_not_integer(
    "rejected_parent_not_integer",
    "a non-integer parent index",
    fanout(json!([child("a", json!([])), child("b", json!(["0"]))]))
)]
#[case::task_not_object(
    "rejected_task_not_object",
    "a non-object task",
    fanout(json!(["write the code", child("b", json!([]))]))
)]
#[case::blank_title(
    "rejected_blank_title",
    "a blank child title",
    fanout(json!([child("a", json!([])), child("   ", json!([]))]))
)]
#[case::fanout_without_tasks(
    "rejected_fanout_without_tasks",
    "a fan-out with no tasks",
    fanout(json!([]))
)]
#[case::single_without_title_or_body(
    "rejected_single_without_title_or_body",
    "a single promotion with neither title nor body",
    Reply::json(json!({"fanout": false, "rationale": "nothing to say"}))
)]
#[case::not_json("rejected_not_json", "a non-JSON", Reply::malformed())]
fn rejected_reply_leaves_the_board_unchanged(
    #[case] key: &str,
    #[case] what: &str,
    #[case] reply: Reply,
    board: Board,
) {
    let aux = board.aux();
    let root = board.create(
        "an idea the decomposer may botch",
        &["--triage", "--body", "the original body"],
    );
    let before = board.task(&root);
    aux.reply(&root, reply);

    let run = decompose_card(&board, &root);

    let bills = aux.billed_for(&root);
    observe::record("bills", bills, Some(1));
    assert_eq!(bills, 1, "one decompose, one request\n{}", run.output);
    if run.ok() == Some(false) {
        let reason = run.line()["reason"].as_str().unwrap_or_default();
        assert!(
            !reason.trim().is_empty(),
            "a failed decompose must say why\n{}",
            run.output
        );
    }
    known_gate(key, || {
        graph_not_applied(&board, &before, &run).map_err(|applied| {
            Gap::new(
                GapKind::InvalidGraphApplied,
                format!("{what} reply was applied: {applied}"),
            )
        })
    });
    assert_rows_snapshot!(
        key,
        format!("{what} reply: rejected whole, only the attempt's records change"),
        BoardRows::capture(&board, &[&root])
    );
}
