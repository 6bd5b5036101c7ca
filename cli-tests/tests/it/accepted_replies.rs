//! Replies that must be applied: a fan-out with a sibling edge, JSON wrapped in code fences, a
//! single-task promotion, and titles full of characters that break careless quoting.

use fixtures::observe;
use fixtures::prelude::*;
use fixtures::snapshot::BoardRows;
use rstest::rstest;
use serde_json::{json, Value};

use crate::decompose_card;

/// The children's titles by id, in the order the `decomposed` event lists them.
fn decomposed_child_ids(board: &Board, root: &str) -> Vec<String> {
    let events = board.events(root, "decomposed");
    assert_eq!(
        events.len(),
        1,
        "exactly one decomposed event\n{}",
        board.diag(root)
    );
    events[0].payload["child_ids"]
        .as_array()
        .map(|ids| {
            ids.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

#[rstest]
fn three_child_graph_is_applied_with_its_sibling_edge(board: Board) {
    let aux = board.aux();
    let root = board.create("ship the feature", &["--triage"]);
    aux.reply(&root, Reply::graph(3, &[(2, &[0])]));

    let run = decompose_card(&board, &root);

    assert_eq!(run.ok(), Some(true), "{}", run.output);
    assert_eq!(aux.billed_for(&root), 1, "one decompose, one request");
    let children = decomposed_child_ids(&board, &root);
    let titles: Vec<String> = children.iter().map(|id| board.task(id).title).collect();
    assert_eq!(
        titles,
        ["child 0", "child 1", "child 2"],
        "child_ids in reply order"
    );
    observe::record("child_rows", children.len(), Some(3));
    let mut linked = board.children_of(&root);
    linked.sort();
    let mut expected = children.clone();
    expected.sort();
    assert_eq!(linked, expected, "every child is linked under the root");
    assert!(
        board.has_link(&children[0], &children[2]),
        "declared dependency child 0 -> child 2 was not persisted\n{}",
        board.diag(&root)
    );
    assert_eq!(
        board.links().len(),
        3 + 1,
        "3 child->root links and 1 sibling edge"
    );
    assert_eq!(board.task_count(), 1 + 3);
    let statuses: Vec<String> = children.iter().map(|id| board.task(id).status).collect();
    assert_eq!(
        statuses,
        ["ready", "ready", "todo"],
        "parent-free children are promoted; child 2 waits for child 0"
    );
    let root_row = board.task(&root);
    assert_eq!(root_row.status, "todo", "the root waits for its children");
    assert!(
        root_row.assignee.is_some(),
        "the root goes to the orchestrator"
    );
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
    let graph = json!({
        "fanout": true,
        "rationale": "split",
        "tasks": [
            {"title": "fenced 0", "body": "b0", "assignee": null, "parents": []},
            {"title": "fenced 1", "body": "b1", "assignee": null, "parents": [0]},
        ],
    });
    aux.reply(
        &root,
        Reply::text(template.replace("{graph}", &graph.to_string())),
    );

    let run = decompose_card(&board, &root);

    assert_eq!(run.ok(), Some(true), "{}", run.output);
    assert_eq!(aux.billed_for(&root), 1);
    let children = decomposed_child_ids(&board, &root);
    observe::record("child_rows", children.len(), Some(2));
    let titles: Vec<String> = children.iter().map(|id| board.task(id).title).collect();
    assert_eq!(titles, ["fenced 0", "fenced 1"], "{}", board.diag(&root));
    assert!(board.has_link(&children[0], &children[1]));
}

#[rstest]
fn single_task_promotion_retitles_and_leaves_triage(board: Board) {
    let aux = board.aux();
    let root = board.create(
        "rough idea",
        &["--triage", "--body", "something about notes"],
    );
    aux.reply(
        &root,
        Reply::single(
            "Write the release notes",
            "List every user-visible change since 0.18, one line each.",
        ),
    );

    let run = decompose_card(&board, &root);

    assert_eq!(run.ok(), Some(true), "{}", run.output);
    assert_eq!(aux.billed_for(&root), 1);
    observe::record("child_rows", board.task_count() - 1, Some(0));
    let row = board.task(&root);
    assert_eq!(row.title, "Write the release notes");
    assert_eq!(
        row.body.as_deref(),
        Some("List every user-visible change since 0.18, one line each.")
    );
    assert!(
        row.status == "todo" || row.status == "ready",
        "a promoted card leaves triage for todo (ready when parent-free), got {}",
        row.status
    );
    assert!(row.assignee.is_some(), "a promoted card gets an assignee");
    assert_eq!(board.task_count(), 1, "a single promotion creates no rows");
    assert!(board.links().is_empty());
    assert_eq!(
        board.events(&root, "specified").len(),
        1,
        "{}",
        board.diag(&root)
    );
    assert_eq!(run.line()["new_title"], json!("Write the release notes"));
    assert_rows_snapshot!(
        "single_promotion",
        "a `fanout: false` reply retitles the card and moves it out of triage",
        BoardRows::capture(&board, &[&root])
    );
}

/// Titles (and bodies) that break string-built SQL, naive JSON and shell quoting, and
/// multi-byte text.
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
        .map(|text| json!({"title": text, "body": format!("body: {text}"), "assignee": null, "parents": []}))
        .collect();
    aux.reply(
        &root,
        Reply::json(json!({"fanout": true, "rationale": "split", "tasks": tasks})),
    );

    let run = decompose_card(&board, &root);

    assert_eq!(run.ok(), Some(true), "{}", run.output);
    assert_eq!(
        board.task(&root).title,
        r#"Robert'); DROP TABLE tasks;-- "quoted" 🚀"#,
        "the root's own title survives `create`"
    );
    let children = decomposed_child_ids(&board, &root);
    observe::record("child_rows", children.len(), Some(HOSTILE_TEXTS.len()));
    let stored: Vec<(String, Option<String>)> = children
        .iter()
        .map(|id| {
            let task = board.task(id);
            (task.title, task.body)
        })
        .collect();
    let expected: Vec<(String, Option<String>)> = HOSTILE_TEXTS
        .iter()
        .map(|text| ((*text).to_owned(), Some(format!("body: {text}"))))
        .collect();
    assert_eq!(stored, expected, "titles and bodies stored verbatim");
    assert_rows_snapshot!(
        "hostile_titles",
        "quotes, newlines, emoji and SQL metacharacters stored verbatim in child rows",
        BoardRows::capture(&board, &[&root])
    );
}
