//! Replies that must be applied: a fan-out with a sibling edge, JSON wrapped in code fences, a
//! single-task promotion, titles full of characters that break careless quoting, and replies
//! sent chunked with no `Content-Length`.

use fixtures::aux_model::ROSTER_DEFAULT;
use fixtures::aux_model::{child_title, contract_task, graph_value, sse_content_event};
use fixtures::rows::Event;
use fixtures::snapshot::BoardRows;
use judge::prelude::*;
use rstest::rstest;
use serde_json::{json, Value};

use crate::{applied_with_two_children, decompose_card, Decomposition};

/// The children the one `decomposed` event of `root` lists, in reply order (empty, with a
/// finding, when there is not exactly one such event).
fn decomposed_child_ids(board: &Board, root: &str, findings: &mut Findings) -> Vec<String> {
    let events = board.rows().events(root, "decomposed");
    *findings = std::mem::take(findings).equal("decomposed events", &events.len(), &1);
    events.first().map(Event::child_ids).unwrap_or_default()
}

/// The verdict that a decompose made exactly one request and said `ok`.
fn judge_one_good_request(board: &Board, root: &str, run: &Decomposition) {
    bound("requests for one decompose", board.aux().billed_for(root))
        .exactly(1)
        .context(|| run.output.to_string())
        .gap(GapKind::NotOneRequest);
}

#[rstest]
fn three_child_graph_is_applied_with_its_sibling_edge(board: Board) {
    let aux = board.aux();
    let root = board.create("ship the feature", &["--triage"]);
    aux.reply(&root, Reply::graph(3, &[(2, &[0])]));

    let run = decompose_card(&board, &root);

    judge_one_good_request(&board, &root, &run);
    let rows = board.rows();
    let mut findings = Findings::new();
    findings = findings.equal("ok", &run.ok(), &Some(true));
    let children = decomposed_child_ids(&board, &root, &mut findings);
    let titles = rows.titles_of(&children);
    let mut linked = rows.children_of(&root);
    linked.sort();
    let mut expected_linked = children.clone();
    expected_linked.sort();
    let statuses: Vec<String> = children.iter().map(|id| rows.status(id)).collect();
    let root_row = rows.find_task(&root);
    let root_status = root_row.as_ref().map(|row| row.status.clone());
    findings = findings
        .equal(
            "child titles in reply order",
            &titles,
            &(0..3).map(child_title).collect(),
        )
        .equal("children linked under the root", &linked, &expected_linked)
        .that(
            children.len() == 3 && rows.has_link(&children[0], &children[2]),
            || "declared dependency child 0 -> child 2 was not persisted".to_owned(),
        )
        .equal("links (3 child->root, 1 sibling)", &rows.links().len(), &4)
        .equal("task rows", &board.task_count(), &4)
        .equal(
            "child statuses (parent-free children promoted)",
            &statuses,
            &vec!["ready".to_owned(), "ready".to_owned(), "todo".to_owned()],
        )
        .equal(
            "root status (waits for its children)",
            &root_status.as_deref(),
            &Some("todo"),
        )
        .that(root_row.is_some_and(|row| row.assignee.is_some()), || {
            "the root goes to the orchestrator: no assignee".to_owned()
        });
    findings
        .verdict("the fan-out is applied as replied")
        .context(|| board.diag(&root))
        .gap(GapKind::ReplyNotApplied);
    assert_rows_snapshot!(
        "fanout_three_children",
        "a valid 3-child fan-out where child 2 waits for child 0",
        BoardRows::capture(&board, &[&root])
    );
}

#[rstest]
#[case::bare_fence("```\n{graph}\n```")]
#[case::json_fence("```json\n{graph}\n```")]
#[case::prose_around_fence("Here is the plan:\n\n```json\n{graph}\n```\n\nGood luck!")]
fn json_inside_code_fences_is_accepted(#[case] template: &str, board: Board) {
    let aux = board.aux();
    let root = board.create("fenced reply", &["--triage"]);
    let graph = graph_value(2, &[(1, &[0])]);
    aux.reply(
        &root,
        Reply::text(template.replace("{graph}", &graph.to_string())),
    );

    let run = decompose_card(&board, &root);

    judge_one_good_request(&board, &root, &run);
    let rows = board.rows();
    let mut findings = Findings::new();
    findings = findings.equal("ok", &run.ok(), &Some(true));
    let children = decomposed_child_ids(&board, &root, &mut findings);
    let titles = rows.titles_of(&children);
    findings = findings
        .equal("child titles", &titles, &(0..2).map(child_title).collect())
        .that(
            children.len() == 2 && rows.has_link(&children[0], &children[1]),
            || "declared dependency child 0 -> child 1 was not persisted".to_owned(),
        );
    findings
        .verdict("the fenced fan-out is applied as replied")
        .context(|| format!("{}\n{}", run.output, board.diag(&root)))
        .gap(GapKind::ReplyNotApplied);
}

#[rstest]
fn single_task_promotion_retitles_and_leaves_triage(board: Board) {
    let aux = board.aux();
    let root = board.create(
        "rough idea",
        &["--triage", "--body", "something about notes"],
    );
    let body = "Goal: list every user-visible change since 0.18, one line each.\n\
                Done when: the notes are reviewed.";
    aux.reply(&root, Reply::single("Write the release notes", body));

    let run = decompose_card(&board, &root);

    judge_one_good_request(&board, &root, &run);
    let rows = board.rows();
    let Some(row) = rows.find_task(&root) else {
        holds("the promoted card still exists", false)
            .context(|| board.diag(&root))
            .gap(GapKind::ReplyNotApplied);
        return;
    };
    Findings::new()
        .equal("ok", &run.ok(), &Some(true))
        .equal("title", &row.title.as_str(), &"Write the release notes")
        .equal("body", &row.body.as_deref(), &Some(body))
        .that(row.status == "todo" || row.status == "ready", || {
            format!(
                "a promoted card leaves triage for todo (ready when parent-free), got {}",
                row.status
            )
        })
        .that(row.assignee.is_some(), || {
            "a promoted card gets an assignee".to_owned()
        })
        .equal("task rows", &board.task_count(), &1)
        .equal("links", &rows.links().len(), &0)
        .equal(
            "specified events",
            &rows.events(&root, "specified").len(),
            &1,
        )
        .equal(
            "the --json line's new_title",
            &run.line()["new_title"],
            &json!("Write the release notes"),
        )
        .verdict("the single promotion is applied as replied")
        .context(|| format!("{}\n{}", run.output, board.diag(&root)))
        .gap(GapKind::ReplyNotApplied);
    assert_rows_snapshot!(
        "single_promotion",
        "a `fanout: false` reply retitles the card and moves it out of triage",
        BoardRows::capture(&board, &[&root])
    );
}

#[rstest]
fn single_with_a_title_and_no_body_keeps_the_cards_body(board: Board) {
    let aux = board.aux();
    let body = "Goal: say what changed since 0.18.\nDone when: the notes are reviewed.";
    let root = board.create("rough idea", &["--triage", "--body", body]);
    // The contract's single form lets the body be null: the card's own body stays.
    aux.reply(
        &root,
        Reply::json(json!({
            "fanout": false,
            "rationale": "One unit of work; only its title was vague.",
            "title": "Write the release notes",
            "body": null,
            "assignee": ROSTER_DEFAULT,
        })),
    );

    let run = decompose_card(&board, &root);

    judge_one_good_request(&board, &root, &run);
    let row = board.rows().find_task(&root);
    Findings::new()
        .equal("ok", &run.ok(), &Some(true))
        .equal(
            "title",
            &row.as_ref().map(|row| row.title.as_str()),
            &Some("Write the release notes"),
        )
        .equal(
            "body",
            &row.as_ref().and_then(|row| row.body.as_deref()),
            &Some(body),
        )
        .that(
            row.as_ref().is_some_and(|row| row.status != "triage"),
            || "the card leaves triage".to_owned(),
        )
        .verdict("a single with a new title and no body is applied, the body kept")
        .context(|| format!("{}\n{}", run.output, board.diag(&root)))
        .gap(GapKind::ReplyNotApplied);
}

/// Titles (and bodies) that break string-built SQL, naive JSON and shell quoting, and
/// multi-byte text. Each is a valid title under the contract (at most 80 characters).
const HOSTILE_TEXTS: [&str; 6] = [
    r#"He said "ship it" and left"#,
    "Robert'); DROP TABLE tasks;--",
    "line one\nline two",
    "🚀 launch ✨ 日本語 ünïcödé",
    r"100% of _under_scores_, back\slashes \\ and a literal \n",
    "{\"fanout\": true} `backticks` $(whoami) ${HOME}",
];

#[rstest]
fn hostile_titles_survive_into_child_rows(board: Board) {
    let aux = board.aux();
    let root = board.create(
        r#"Robert'); DROP TABLE tasks;-- "quoted" 🚀"#,
        &["--triage", "--body", "line one\nline two 日本語"],
    );
    let tasks: Vec<Value> = HOSTILE_TEXTS
        .iter()
        .map(|text| {
            let mut task = contract_task(text, json!([]));
            task["body"] = Value::from(format!("body: {text}"));
            task
        })
        .collect();
    aux.reply(&root, Reply::fanout(tasks));

    let run = decompose_card(&board, &root);

    judge_one_good_request(&board, &root, &run);
    let rows = board.rows();
    let mut findings = Findings::new();
    findings = findings.equal("ok", &run.ok(), &Some(true)).equal(
        "the root's own title",
        &rows.title(&root).as_str(),
        &r#"Robert'); DROP TABLE tasks;-- "quoted" 🚀"#,
    );
    let children = decomposed_child_ids(&board, &root, &mut findings);
    let stored: Vec<(String, Option<String>)> = children
        .iter()
        .map(|id| {
            rows.find_task(id).map_or_else(
                || ("<no such task>".to_owned(), None),
                |task| (task.title, task.body),
            )
        })
        .collect();
    let expected: Vec<(String, Option<String>)> = HOSTILE_TEXTS
        .iter()
        .map(|text| ((*text).to_owned(), Some(format!("body: {text}"))))
        .collect();
    findings = findings.equal("titles and bodies stored verbatim", &stored, &expected);
    findings
        .verdict("hostile titles are stored verbatim")
        .context(|| board.diag(&root))
        .gap(GapKind::ReplyNotApplied);
    assert_rows_snapshot!(
        "hostile_titles",
        "quotes, newlines, emoji and SQL metacharacters stored verbatim in child rows",
        BoardRows::capture(&board, &[&root])
    );
}

/// A stream whose last line is `data: [DONE]` with no line end at all: no blank line closes the
/// final event, and no chunk carries a finish reason, so only the `[DONE]` says it is complete.
#[rstest]
fn a_stream_ended_by_a_bare_final_done_is_applied(board: Board) {
    let aux = board.aux();
    let root = board.create("streamed to its last byte", &["--triage"]);
    let body = format!(
        "{}data: [DONE]",
        sse_content_event(&graph_value(2, &[]).to_string())
    );
    aux.reply(&root, Reply::raw(200, "text/event-stream", body));

    let run = decompose_card(&board, &root);

    judge_one_good_request(&board, &root, &run);
    applied_with_two_children(&board, &root, &run)
        .verdict("a stream ended by a bare final [DONE] is applied")
        .context(|| format!("{}\n{}", run.output, board.diag(&root)))
        .gap(GapKind::ReplyNotApplied);
}

/// A reply sent with `Transfer-Encoding: chunked` and no `Content-Length`, in chunks of a few
/// dozen bytes (cut anywhere, mid-event and mid-character), is a healthy reply: it leaves exactly
/// the rows the same reply sent whole leaves on a board of its own.
#[rstest]
#[case::json_completion(Reply::graph(3, &[(2, &[0])]))]
#[case::event_stream(Reply::event_stream(graph_value(3, &[(2, &[0])]).to_string()))]
fn a_chunked_reply_leaves_the_rows_the_same_reply_sent_whole_leaves(#[case] reply: Reply) {
    let decomposed = |reply: Reply| {
        let board = Board::new(Config::plain());
        let root = board.create("ship the feature", &["--triage", "--body", "in parts"]);
        board.aux().reply(&root, reply);
        let run = decompose_card(&board, &root);
        (board, root, run)
    };
    let (whole_board, whole_root, whole_run) = decomposed(reply.clone());
    let (board, root, run) = decomposed(reply.chunked());

    // The precondition: the second reply went out chunked, to its end.
    let answers: Vec<_> = board
        .aux()
        .billed_calls()
        .into_iter()
        .map(|call| call.answer)
        .collect();
    assert!(
        answers
            .iter()
            .all(|answer| matches!(answer.framing, fixtures::aux_model::Framing::Chunked { .. })),
        "{answers:?}"
    );
    judge_one_good_request(&board, &root, &run);
    Findings::new()
        .equal("ok", &run.ok(), &Some(true))
        .equal("children", &board.rows().children_of(&root).len(), &3)
        .equal(
            "rows (as after the same reply sent whole)",
            &BoardRows::capture(&board, &[&root]),
            &BoardRows::capture(&whole_board, &[&whole_root]),
        )
        .verdict("a chunked reply is applied as the same reply sent whole")
        .context(|| {
            format!(
                "{}\n{}\nsent whole:\n{}",
                run.output,
                board.diag(&root),
                whole_run.output
            )
        })
        .gap(GapKind::ReplyNotApplied);
}
