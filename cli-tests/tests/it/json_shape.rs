//! The `--json` line of `kanban decompose` (`task_id`, `ok`, `reason`, `fanout`, `child_ids`,
//! `new_title`) and its exit codes: 0 when the card was decomposed, 1 when it was not, 2 for a
//! usage error.

use fixtures::observe;
use fixtures::prelude::*;
use fixtures::snapshot::{BoardRows, Redactor};
use rstest::rstest;
use serde_json::{json, Value};

use crate::{assert_json_line_shape, decompose, decompose_all, decompose_card, exit_code_is};

/// The line redacted with the same numbering as the board's rows.
fn redacted_line(board: &Board, root: &str, line: &Value) -> Value {
    let mut redactor = Redactor::new();
    BoardRows::capture_with(board, &[root], &mut redactor);
    redactor.value(line)
}

#[rstest]
fn fanout_line_lists_the_children_in_reply_order(board: Board) {
    let aux = board.aux();
    let root = board.create("split me", &["--triage"]);
    aux.reply(&root, Reply::graph(3, &[]));

    let run = decompose_card(&board, &root);

    let line = run.line();
    assert_json_line_shape(line, &root);
    assert_eq!(line["ok"], true, "{line}");
    assert_eq!(line["fanout"], true, "{line}");
    assert!(
        line["new_title"].is_null(),
        "a fan-out does not retitle: {line}"
    );
    let child_ids: Vec<String> = line["child_ids"]
        .as_array()
        .map(|ids| {
            ids.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    observe::record("child_ids", child_ids.len(), Some(3));
    let titles: Vec<String> = child_ids.iter().map(|id| board.task(id).title).collect();
    assert_eq!(titles, ["child 0", "child 1", "child 2"], "{line}");
    assert_eq!(
        board.events(&root, "decomposed")[0].payload["child_ids"],
        line["child_ids"],
        "the line and the decomposed event agree"
    );
    assert_eq!(run.output.code, Some(0), "{}", run.output);
    assert_rows_snapshot!(
        "json_line_fanout",
        "the --json line of a 3-child fan-out",
        redacted_line(&board, &root, line)
    );
}

#[rstest]
fn single_line_carries_the_new_title(board: Board) {
    let aux = board.aux();
    let root = board.create("rough", &["--triage"]);
    aux.reply(
        &root,
        Reply::single("Tightened title", "The concrete spec."),
    );

    let run = decompose_card(&board, &root);

    let line = run.line();
    assert_json_line_shape(line, &root);
    assert_eq!(line["ok"], true, "{line}");
    assert_eq!(line["fanout"], false, "{line}");
    assert_eq!(line["new_title"], json!("Tightened title"), "{line}");
    let children = line["child_ids"].as_array().map_or(0, Vec::len);
    observe::record("child_ids", children, Some(0));
    assert_eq!(children, 0, "a single promotion has no children: {line}");
    assert_eq!(run.output.code, Some(0), "{}", run.output);
    assert_rows_snapshot!(
        "json_line_single",
        "the --json line of a single-task promotion",
        redacted_line(&board, &root, line)
    );
}

#[rstest]
fn failed_line_says_why_and_exits_1(board: Board) {
    let aux = board.aux();
    let root = board.create("doomed", &["--triage"]);
    aux.reply(&root, Reply::malformed());

    let run = decompose_card(&board, &root);

    let line = run.line();
    assert_json_line_shape(line, &root);
    assert_eq!(line["ok"], false, "{line}");
    assert_eq!(line["fanout"], false, "{line}");
    assert!(
        line["reason"]
            .as_str()
            .is_some_and(|reason| !reason.trim().is_empty()),
        "a failure says why: {line}"
    );
    let children = line["child_ids"].as_array().map_or(0, Vec::len);
    observe::record("child_ids", children, Some(0));
    assert_eq!(children, 0, "a failure has no children: {line}");
    assert!(line["new_title"].is_null(), "{line}");
    known_gate("decompose_failure_exit_code", || {
        exit_code_is(&run.output, "a failed `kanban decompose ID`", 1)
    });
    assert_rows_snapshot!(
        "json_line_failed",
        "the --json line of a decompose whose reply was not JSON",
        redacted_line(&board, &root, line)
    );
}

#[rstest]
fn sweep_prints_one_line_per_attempted_card_and_exits_1_on_a_failure(board: Board) {
    let aux = board.aux();
    let good = board.create("splits fine", &["--triage"]);
    let bad = board.create("never splits", &["--triage"]);
    let done = board.create("not in triage", &[]);
    aux.reply(&good, Reply::graph(2, &[]));
    aux.reply(&bad, Reply::malformed());

    let sweep = decompose_all(&board);

    observe::record("lines", sweep.lines.len(), Some(2));
    assert_eq!(
        sweep.lines.len(),
        2,
        "one line per triage card\n{}",
        sweep.output
    );
    for (card, ok) in [(&good, true), (&bad, false)] {
        let Some(line) = sweep.line_for(card) else {
            panic!("no line for {card}\n{}", sweep.output);
        };
        assert_json_line_shape(line, card);
        assert_eq!(line["ok"], ok, "{line}");
    }
    assert!(sweep.line_for(&done).is_none(), "{}", sweep.output);
    assert_eq!(aux.billed_for(&done), 0);
    known_gate("sweep_failure_exit_code", || {
        exit_code_is(
            &sweep.output,
            "`kanban decompose --all` with a failed card",
            1,
        )
    });
}

#[rstest]
#[case::both_id_and_all(&["t_0000abcd", "--all"])]
#[case::neither_id_nor_all(&[])]
fn usage_errors_exit_2_and_bill_nothing(#[case] args: &[&str], board: Board) {
    let aux = board.aux();
    board.create("a triage card that must not be touched", &["--triage"]);

    let run = decompose(&board, args);

    observe::record("bills", aux.bills(), Some(0));
    assert_eq!(
        aux.bills(),
        0,
        "a usage error costs nothing\n{}",
        run.output
    );
    assert!(
        !run.output.stderr.trim().is_empty(),
        "a usage error says what is wrong on stderr\n{}",
        run.output
    );
    known_gate("decompose_usage_exit_code", || {
        let command = ["kanban", "decompose"]
            .iter()
            .chain(args)
            .copied()
            .collect::<Vec<_>>();
        exit_code_is(&run.output, &format!("`{}`", command.join(" ")), 2)
    });
}
