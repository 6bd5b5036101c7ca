//! The `--json` line of `kanban decompose` (`task_id`, `ok`, `reason`, `fanout`, `child_ids`,
//! `new_title`) and its exit codes: 0 when the card was decomposed, 1 when it was not, 2 for a
//! usage error.

use fixtures::aux_model::child_title;
use fixtures::rows::child_ids;
use fixtures::snapshot::{BoardRows, Redactor};
use judge::prelude::*;
use rstest::rstest;
use serde_json::{json, Value};

use crate::{decompose, decompose_all, decompose_card, judge_exit_code, judge_json_line_shape};

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
    judge_json_line_shape(line, &root);
    let rows = board.rows();
    let titles: Vec<String> = child_ids(line)
        .iter()
        .map(|id| {
            rows.find_task(id)
                .map(|task| task.title)
                .unwrap_or_default()
        })
        .collect();
    let event_ids = rows
        .events(&root, "decomposed")
        .first()
        .map(|event| event.payload["child_ids"].clone());
    Findings::new()
        .equal("ok", &line["ok"], &json!(true))
        .equal("fanout", &line["fanout"], &json!(true))
        .that(line["new_title"].is_null(), || {
            "a fan-out does not retitle".to_owned()
        })
        .equal(
            "titles of child_ids",
            &titles,
            &(0..3).map(child_title).collect(),
        )
        .equal(
            "the decomposed event's child_ids",
            &event_ids,
            &Some(line["child_ids"].clone()),
        )
        .verdict("the fan-out line lists the children in reply order")
        .context(|| run.output.to_string())
        .gap(GapKind::WrongJsonLine);
    judge_exit_code("a decomposed `kanban decompose ID`", &run.output, 0);
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
        Reply::single(
            "Tightened title",
            "Goal: the concrete spec.\nDone when: it is reviewed.",
        ),
    );

    let run = decompose_card(&board, &root);

    let line = run.line();
    judge_json_line_shape(line, &root);
    Findings::new()
        .equal("ok", &line["ok"], &json!(true))
        .equal("fanout", &line["fanout"], &json!(false))
        .equal("new_title", &line["new_title"], &json!("Tightened title"))
        .equal("child_ids", &child_ids(line).len(), &0)
        .verdict("the single line carries the new title")
        .context(|| run.output.to_string())
        .gap(GapKind::WrongJsonLine);
    judge_exit_code("a promoted `kanban decompose ID`", &run.output, 0);
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
    judge_json_line_shape(line, &root);
    Findings::new()
        .equal("ok", &line["ok"], &json!(false))
        .equal("fanout", &line["fanout"], &json!(false))
        .that(
            line["reason"]
                .as_str()
                .is_some_and(|reason| !reason.trim().is_empty()),
            || "a failure says why: empty reason".to_owned(),
        )
        .equal("child_ids", &child_ids(line).len(), &0)
        .that(line["new_title"].is_null(), || {
            "a failure has no new title".to_owned()
        })
        .verdict("the failed line says why")
        .context(|| run.output.to_string())
        .gap(GapKind::WrongJsonLine);
    judge_exit_code("a failed `kanban decompose ID`", &run.output, 1);
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

    bound(
        "--json lines of a sweep over two triage cards",
        sweep.lines.len(),
    )
    .exactly(2)
    .context(|| sweep.output.to_string())
    .gap(GapKind::WrongJsonLine);
    let mut findings = Findings::new();
    for (card, ok) in [(&good, true), (&bad, false)] {
        match sweep.line_for(card) {
            Some(line) => {
                findings = findings
                    .that(json_line_ok(line, card), || {
                        format!("the line for {card} has the wrong shape: {line}")
                    })
                    .equal(&format!("ok of {card}"), &line["ok"], &json!(ok));
            }
            None => {
                findings = findings.that(false, || format!("no line for {card}"));
            }
        }
    }
    findings = findings
        .that(sweep.line_for(&done).is_none(), || {
            "a line for the card not in triage".to_owned()
        })
        .equal(
            "bills for the card not in triage",
            &aux.billed_for(&done),
            &0,
        );
    findings
        .verdict("one line per attempted card")
        .context(|| sweep.output.to_string())
        .gap(GapKind::WrongJsonLine);
    judge_exit_code(
        "`kanban decompose --all` with a failed card",
        &sweep.output,
        1,
    );
}

fn json_line_ok(line: &Value, card: &str) -> bool {
    crate::json_line_shape(line, card).is_ok()
}

#[rstest]
#[case::both_id_and_all(&["t_0000abcd", "--all"])]
#[case::neither_id_nor_all(&[])]
fn usage_errors_exit_2_and_bill_nothing(#[case] args: &[&str], board: Board) {
    let aux = board.aux();
    board.create("a triage card that must not be touched", &["--triage"]);

    let run = decompose(&board, args);

    bound("requests for a usage error", aux.bills())
        .at_most(0)
        .context(|| run.output.to_string())
        .gap(GapKind::BilledForNothing);
    holds(
        "a usage error says what is wrong on stderr",
        !run.output.stderr.trim().is_empty(),
    )
    .context(|| run.output.to_string())
    .gap(GapKind::UnclearRefusal);
    judge_exit_code("`kanban decompose` with a usage error", &run.output, 2);
}
