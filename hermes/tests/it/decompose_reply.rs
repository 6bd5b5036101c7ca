//! `parse_reply`: every rejection, the accepted shapes, hostile text, and a property test that
//! no reply — valid, invalid or random — yields an unsafe graph or a panic.

use hermes::decompose::{parse_reply, ChildSpec, GraphLimits, Plan, Rejection, RejectionKind};
use proptest::prelude::*;
use rstest::rstest;
use serde_json::{json, Value};

const MAX_CHILDREN: usize = 8;

fn roster() -> Vec<String> {
    vec![
        "default".to_owned(),
        "backend-dev".to_owned(),
        "qa".to_owned(),
    ]
}

fn parse(content: &str) -> Result<Plan, Rejection> {
    let roster = roster();
    let limits = GraphLimits {
        max_children: MAX_CHILDREN,
        default_assignee: "orchestrator",
        roster: &roster,
    };
    parse_reply(content, &limits)
}

fn fanout(tasks: Value) -> String {
    json!({"fanout": true, "rationale": "split", "tasks": tasks}).to_string()
}

fn task(title: &str, parents: Value) -> Value {
    json!({"title": title, "body": format!("spec for {title}"), "assignee": null, "parents": parents})
}

fn children(plan: Result<Plan, Rejection>) -> Vec<ChildSpec> {
    match plan {
        Ok(Plan::Fanout { children, .. }) => children,
        other => panic!("expected a fan-out, got {other:?}"),
    }
}

fn rejection(content: &str) -> Rejection {
    match parse(content) {
        Err(rejection) => rejection,
        Ok(plan) => panic!("expected a rejection, got {plan:?}"),
    }
}

#[test]
fn valid_three_child_graph_with_a_sibling_edge() {
    let content = fanout(json!([
        task("design", json!([])),
        task("build", json!([0])),
        {"title": "  test  ", "body": null, "assignee": " qa ", "parents": [1, 0, 1]},
    ]));
    let plan = parse(&content);
    assert_eq!(
        plan,
        Ok(Plan::Fanout {
            rationale: "split".to_owned(),
            children: vec![
                ChildSpec {
                    title: "design".into(),
                    body: "spec for design".into(),
                    assignee: "orchestrator".into(),
                    parents: vec![]
                },
                ChildSpec {
                    title: "build".into(),
                    body: "spec for build".into(),
                    assignee: "orchestrator".into(),
                    parents: vec![0]
                },
                // Duplicate parents collapse; order of first mention is kept.
                ChildSpec {
                    title: "test".into(),
                    body: String::new(),
                    assignee: "qa".into(),
                    parents: vec![1, 0]
                },
            ],
        })
    );
}

#[rstest]
#[case::not_json(
    "Sorry, I can't produce a task graph for this one.",
    RejectionKind::NotJson,
    "reply holds no JSON object"
)]
#[case::empty("", RejectionKind::NotJson, "reply holds no JSON object")]
#[case::truncated(
    "{\"fanout\": true, \"tasks\": [",
    RejectionKind::NotJson,
    "reply holds no JSON object"
)]
#[case::array(
    "[1, 2, 3]",
    RejectionKind::NotAnObject,
    "reply JSON is an array, not an object"
)]
#[case::string(
    "\"fanout\"",
    RejectionKind::NotAnObject,
    "reply JSON is a string, not an object"
)]
#[case::no_flag(
    r#"{"tasks": []}"#,
    RejectionKind::NoFanoutFlag,
    "reply has no \"fanout\" flag"
)]
#[case::string_flag(
    r#"{"fanout": "true"}"#,
    RejectionKind::NoFanoutFlag,
    "\"fanout\" must be true or false, not a string"
)]
#[case::number_flag(
    r#"{"fanout": 1}"#,
    RejectionKind::NoFanoutFlag,
    "\"fanout\" must be true or false, not a number"
)]
#[case::no_tasks(
    r#"{"fanout": true}"#,
    RejectionKind::EmptyTasks,
    "fanout true without \"tasks\""
)]
#[case::tasks_object(
    r#"{"fanout": true, "tasks": {"title": "a"}}"#,
    RejectionKind::EmptyTasks,
    "\"tasks\" must be an array, not an object"
)]
#[case::empty_tasks(
    r#"{"fanout": true, "tasks": []}"#,
    RejectionKind::EmptyTasks,
    "fanout true with an empty \"tasks\" list"
)]
#[case::task_string(
    r#"{"fanout": true, "tasks": [{"title": "a"}, {"title": "b"}, {"title": "c"}, "d"]}"#,
    RejectionKind::TaskNotObject,
    "tasks[3] is not an object (it is a string)"
)]
#[case::no_title(
    r#"{"fanout": true, "tasks": [{"title": "a"}, {"body": "b"}]}"#,
    RejectionKind::BlankTitle,
    "tasks[1] has no title"
)]
#[case::null_title(
    r#"{"fanout": true, "tasks": [{"title": null}]}"#,
    RejectionKind::BlankTitle,
    "tasks[0] has no title"
)]
#[case::blank_title(
    r#"{"fanout": true, "tasks": [{"title": "a"}, {"title": " \n\t "}]}"#,
    RejectionKind::BlankTitle,
    "tasks[1] has a blank title"
)]
#[case::number_title(
    r#"{"fanout": true, "tasks": [{"title": 7}]}"#,
    RejectionKind::BlankTitle,
    "tasks[0].title must be a string, not a number"
)]
#[case::bad_body(
    r#"{"fanout": true, "tasks": [{"title": "a", "body": ["x"]}]}"#,
    RejectionKind::BadBody,
    "tasks[0].body must be a string or null, not an array"
)]
#[case::parents_number(
    r#"{"fanout": true, "tasks": [{"title": "a"}, {"title": "b", "parents": 0}]}"#,
    RejectionKind::BadParents,
    "tasks[1].parents must be an array of task indices, not a number"
)]
#[case::parents_string(
    r#"{"fanout": true, "tasks": [{"title": "a", "parents": "0"}]}"#,
    RejectionKind::BadParents,
    "tasks[0].parents must be an array of task indices, not a string"
)]
#[case::parent_fraction(
    r#"{"fanout": true, "tasks": [{"title": "a"}, {"title": "b", "parents": [1.5]}]}"#,
    RejectionKind::ParentNotInteger,
    "tasks[1] has parent 1.5, which is not an integer index"
)]
#[case::parent_whole_float(
    r#"{"fanout": true, "tasks": [{"title": "a"}, {"title": "b", "parents": [0.0]}]}"#,
    RejectionKind::ParentNotInteger,
    "tasks[1] has parent 0.0, which is not an integer index"
)]
#[case::parent_exponent(
    r#"{"fanout": true, "tasks": [{"title": "a"}, {"title": "b", "parents": [0e0]}]}"#,
    RejectionKind::ParentNotInteger,
    "tasks[1] has parent 0.0, which is not an integer index"
)]
#[case::parent_string(
    r#"{"fanout": true, "tasks": [{"title": "a"}, {"title": "b", "parents": ["0"]}]}"#,
    RejectionKind::ParentNotInteger,
    "tasks[1] has parent \"0\", which is a string and not an integer index"
)]
#[case::parent_bool(
    r#"{"fanout": true, "tasks": [{"title": "a"}, {"title": "b", "parents": [true]}]}"#,
    RejectionKind::ParentNotInteger,
    "tasks[1] has parent true, which is a boolean and not an integer index"
)]
#[case::parent_null(
    r#"{"fanout": true, "tasks": [{"title": "a"}, {"title": "b", "parents": [null]}]}"#,
    RejectionKind::ParentNotInteger,
    "tasks[1] has parent null, which is null and not an integer index"
)]
#[case::parent_negative(
    r#"{"fanout": true, "tasks": [{"title": "a"}, {"title": "b", "parents": [-1]}]}"#,
    RejectionKind::ParentOutOfRange,
    "tasks[1] has parent -1, which is negative"
)]
#[case::parent_too_big(
    r#"{"fanout": true, "tasks": [{"title": "a"}, {"title": "b", "parents": [2]}]}"#,
    RejectionKind::ParentOutOfRange,
    "tasks[1] has parent 2, but there are only 2 tasks"
)]
#[case::parent_huge(
    r#"{"fanout": true, "tasks": [{"title": "a", "parents": [18446744073709551615]}]}"#,
    RejectionKind::ParentOutOfRange,
    "tasks[0] has parent 18446744073709551615, but there are only 1 tasks"
)]
#[case::self_parent(
    r#"{"fanout": true, "tasks": [{"title": "a"}, {"title": "b", "parents": [0, 1]}]}"#,
    RejectionKind::SelfParent,
    "tasks[1] names itself as parent"
)]
#[case::two_cycle(r#"{"fanout": true, "tasks": [{"title": "a", "parents": [1]}, {"title": "b", "parents": [0]}]}"#, RejectionKind::Cycle, "tasks[0] is on a parent cycle (0 waits for 1 waits for 0)")]
#[case::cycle_behind_a_tail(r#"{"fanout": true, "tasks": [{"title": "root"}, {"title": "tail", "parents": [3]}, {"title": "x", "parents": [0, 4]}, {"title": "y", "parents": [2]}, {"title": "z", "parents": [3]}]}"#, RejectionKind::Cycle, "tasks[3] is on a parent cycle (3 waits for 2 waits for 4 waits for 3)")]
#[case::empty_single(
    r#"{"fanout": false, "rationale": "fine as is"}"#,
    RejectionKind::EmptySingle,
    "fanout false with neither title nor body"
)]
#[case::blank_single(
    r#"{"fanout": false, "title": "  ", "body": ""}"#,
    RejectionKind::EmptySingle,
    "fanout false with neither title nor body"
)]
#[case::single_number_title(
    r#"{"fanout": false, "title": 3}"#,
    RejectionKind::BlankTitle,
    "title must be a string or null, not a number"
)]
#[case::single_object_body(
    r#"{"fanout": false, "body": {}}"#,
    RejectionKind::BadBody,
    "body must be a string or null, not an object"
)]
fn rejections(#[case] content: &str, #[case] kind: RejectionKind, #[case] reason: &str) {
    let rejection = rejection(content);
    assert_eq!((rejection.kind, rejection.reason.as_str()), (kind, reason));
    assert_eq!(rejection.to_string(), reason);
}

#[test]
fn five_hundred_children_are_rejected_whole() {
    let tasks: Vec<Value> = (0..500)
        .map(|i| task(&format!("child {i}"), json!([])))
        .collect();
    let rejection = rejection(&fanout(Value::Array(tasks)));
    assert_eq!(rejection.kind, RejectionKind::TooManyChildren);
    assert_eq!(
        rejection.reason,
        "fanout of 500 exceeds decompose_max_children 8"
    );
}

#[test]
fn exactly_max_children_is_accepted_and_one_more_is_not() {
    let tasks =
        |n: usize| Value::Array((0..n).map(|i| task(&format!("c{i}"), json!([]))).collect());
    assert_eq!(
        children(parse(&fanout(tasks(MAX_CHILDREN)))).len(),
        MAX_CHILDREN
    );
    assert_eq!(
        rejection(&fanout(tasks(MAX_CHILDREN + 1))).kind,
        RejectionKind::TooManyChildren
    );
}

#[test]
fn size_is_checked_before_the_tasks_themselves() {
    let tasks: Vec<Value> = (0..20).map(|_| json!("not an object")).collect();
    assert_eq!(
        rejection(&fanout(Value::Array(tasks))).kind,
        RejectionKind::TooManyChildren
    );
}

#[rstest]
#[case::json_fence("Here you go:\n```json\n{\"fanout\": false, \"title\": \"A\"}\n```\nThanks!")]
#[case::bare_fence("```\n{\"fanout\": false, \"title\": \"A\"}\n```")]
#[case::one_line_fence("```{\"fanout\": false, \"title\": \"A\"}```")]
#[case::unclosed_fence("```json\n{\"fanout\": false, \"title\": \"A\"}")]
#[case::prose_around("Sure! My plan: {\"fanout\": false, \"title\": \"A\"} Let me know.")]
#[case::stray_braces_before("I use {braces} a lot. {\"fanout\": false, \"title\": \"A\"}")]
#[case::fence_with_prose_object_first(
    "Think {x}.\n```json\n{\"fanout\": false, \"title\": \"A\"}\n```"
)]
#[case::whitespace_and_bom("\u{feff}\n\n  {\"fanout\": false, \"title\": \"A\"}  \n")]
fn json_is_found_inside_fences_and_prose(#[case] content: &str) {
    let plan = parse(content);
    assert!(
        matches!(&plan, Ok(Plan::Single { title: Some(title), .. }) if title == "A"),
        "{content:?} gave {plan:?}"
    );
}

#[test]
fn braces_and_quotes_inside_strings_do_not_end_the_object() {
    let content = r#"Plan follows. {"fanout": true, "rationale": "a } brace and \" quote {", "tasks": [{"title": "fn main() { }", "body": "}}}\"{{{"}]} trailing }"#;
    let kids = children(parse(content));
    assert_eq!(kids.len(), 1);
    assert_eq!(kids[0].title, "fn main() { }");
    assert_eq!(kids[0].body, "}}}\"{{{");
}

#[test]
fn hostile_text_in_titles_and_bodies_is_kept_as_written() {
    let titles = [
        "Robert'); DROP TABLE tasks;-- 🦀",
        "emoji 👩‍👩‍👧‍👦 and 日本語 and RTL \u{202e}txet",
        "\"quoted\" and 'single' and `tick`",
        "percent %s %d and backslash \\ and NUL-free",
    ];
    let body = "line one\nline two\r\n\ttabbed; SELECT * FROM tasks WHERE 1=1; --\n  ";
    let tasks: Vec<Value> = titles
        .iter()
        .map(|t| json!({"title": t, "body": body, "parents": []}))
        .collect();
    let kids = children(parse(&fanout(Value::Array(tasks))));
    for (kid, title) in kids.iter().zip(titles) {
        assert_eq!(kid.title, title);
        assert_eq!(kid.body, body, "bodies are not trimmed");
    }
}

#[test]
fn titles_are_trimmed_and_capped_at_200_characters() {
    let long = format!("  {}  ", "é🦀".repeat(150));
    let kids = children(parse(&fanout(json!([{"title": long}]))));
    assert_eq!(kids[0].title.chars().count(), 200);
    assert!(kids[0].title.starts_with("é🦀"));

    let plan = parse(&json!({"fanout": false, "title": "x".repeat(1000)}).to_string());
    assert!(matches!(plan, Ok(Plan::Single { title: Some(t), .. }) if t.len() == 200));
}

#[rstest]
#[case::roster_name(json!("backend-dev"), "backend-dev")]
#[case::padded_roster_name(json!("  qa\n"), "qa")]
#[case::unknown(json!("someone-else"), "orchestrator")]
#[case::wrong_case(json!("QA"), "orchestrator")]
#[case::blank(json!("   "), "orchestrator")]
#[case::null(Value::Null, "orchestrator")]
#[case::number(json!(3), "orchestrator")]
#[case::list(json!(["qa"]), "orchestrator")]
fn assignees_outside_the_roster_fall_back_to_the_default(
    #[case] assignee: Value,
    #[case] expected: &str,
) {
    let kids = children(parse(&fanout(
        json!([{"title": "a", "assignee": assignee.clone()}]),
    )));
    assert_eq!(kids[0].assignee, expected);
    let single = parse(&json!({"fanout": false, "title": "a", "assignee": assignee}).to_string());
    assert!(matches!(single, Ok(Plan::Single { assignee, .. }) if assignee == expected));
}

#[test]
fn single_keeps_what_it_has_and_drops_blanks() {
    let plan = parse(
        r#"{"fanout": false, "rationale": "small", "title": "  ", "body": "  do the thing  "}"#,
    );
    assert_eq!(
        plan,
        Ok(Plan::Single {
            rationale: "small".to_owned(),
            title: None,
            body: Some("  do the thing  ".to_owned()),
            assignee: "orchestrator".to_owned(),
        })
    );
}

#[test]
fn rationale_that_is_not_a_string_becomes_empty() {
    let plan = parse(r#"{"fanout": false, "rationale": 42, "title": "t"}"#);
    assert!(matches!(plan, Ok(Plan::Single { rationale, .. }) if rationale.is_empty()));
    let plan = parse(r#"{"fanout": true, "tasks": [{"title": "t"}]}"#);
    assert!(matches!(plan, Ok(Plan::Fanout { rationale, .. }) if rationale.is_empty()));
}

#[test]
fn deeply_nested_json_is_rejected_not_a_stack_overflow() {
    let deep = format!("{}{}", "{\"a\":".repeat(100_000), "}".repeat(100_000));
    assert_eq!(rejection(&deep).kind, RejectionKind::NotJson);
    let deep_arrays = format!(
        "{{\"fanout\": true, \"tasks\": {}{}}}",
        "[".repeat(50_000),
        "]".repeat(50_000)
    );
    assert!(parse(&deep_arrays).is_err());
}

#[test]
fn many_open_braces_are_handled_in_linear_time() {
    let hostile = "{".repeat(1_000_000);
    let started = std::time::Instant::now();
    assert_eq!(rejection(&hostile).kind, RejectionKind::NotJson);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
}

// ---- property tests ---------------------------------------------------------------------------

/// A parent entry as a model might write it, valid or not.
#[derive(Debug, Clone)]
enum ParentEntry {
    Index(i64),
    Float(f64),
    Text(String),
    Flag(bool),
}

impl ParentEntry {
    fn to_json(&self) -> Value {
        match self {
            ParentEntry::Index(i) => json!(i),
            ParentEntry::Float(f) => json!(f),
            ParentEntry::Text(s) => json!(s),
            ParentEntry::Flag(b) => json!(b),
        }
    }
}

fn parent_entry() -> impl Strategy<Value = ParentEntry> {
    prop_oneof![
        8 => (-2i64..14).prop_map(ParentEntry::Index),
        1 => (-2.0f64..14.0).prop_map(ParentEntry::Float),
        1 => "[0-9]{1,2}".prop_map(ParentEntry::Text),
        1 => any::<bool>().prop_map(ParentEntry::Flag),
    ]
}

fn graph() -> impl Strategy<Value = Vec<Vec<ParentEntry>>> {
    prop::collection::vec(prop::collection::vec(parent_entry(), 0..4), 0..12)
}

/// An independent judge of the same rules, written the plain way (DFS with colours).
fn oracle_accepts(graph: &[Vec<ParentEntry>]) -> bool {
    let n = graph.len();
    if n == 0 || n > MAX_CHILDREN {
        return false;
    }
    let mut edges = vec![Vec::new(); n];
    for (i, entries) in graph.iter().enumerate() {
        for entry in entries {
            match entry {
                ParentEntry::Index(p) if *p >= 0 && (*p as usize) < n && *p as usize != i => {
                    edges[i].push(*p as usize)
                }
                _ => return false,
            }
        }
    }
    fn on_cycle(node: usize, edges: &[Vec<usize>], colour: &mut [u8]) -> bool {
        colour[node] = 1;
        for &next in &edges[node] {
            if colour[next] == 1 || (colour[next] == 0 && on_cycle(next, edges, colour)) {
                return true;
            }
        }
        colour[node] = 2;
        false
    }
    let mut colour = vec![0u8; n];
    (0..n).all(|i| colour[i] != 0 || !on_cycle(i, &edges, &mut colour))
}

fn is_acyclic(children: &[ChildSpec]) -> bool {
    let mut placed = vec![false; children.len()];
    for _ in 0..children.len() {
        let Some(next) = (0..children.len())
            .find(|&i| !placed[i] && children[i].parents.iter().all(|&p| placed[p]))
        else {
            return false;
        };
        placed[next] = true;
    }
    true
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_graphs_are_rejected_or_safe(graph in graph()) {
        let tasks: Vec<Value> = graph
            .iter()
            .enumerate()
            .map(|(i, parents)| {
                json!({"title": format!("t{i}"), "parents": parents.iter().map(ParentEntry::to_json).collect::<Vec<_>>()})
            })
            .collect();
        let result = parse(&fanout(Value::Array(tasks)));
        prop_assert_eq!(result.is_ok(), oracle_accepts(&graph), "{:?}", result);
        if let Ok(plan) = result {
            let Plan::Fanout { children, .. } = plan else {
                return Err(TestCaseError::fail("fanout true gave a single"));
            };
            prop_assert!(!children.is_empty() && children.len() <= MAX_CHILDREN);
            for (i, child) in children.iter().enumerate() {
                prop_assert!(child.parents.iter().all(|&p| p < children.len() && p != i));
                let mut unique = child.parents.clone();
                unique.sort_unstable();
                unique.dedup();
                prop_assert_eq!(unique.len(), child.parents.len());
            }
            prop_assert!(is_acyclic(&children));
        }
    }

    #[test]
    fn arbitrary_text_never_panics(text in any::<String>()) {
        let _ = parse(&text);
    }

    #[test]
    fn arbitrary_text_around_a_valid_reply_never_panics(
        before in "[^{}]{0,40}",
        after in any::<String>(),
        title in any::<String>(),
    ) {
        let reply = json!({"fanout": false, "title": title}).to_string();
        let result = parse(&format!("{before}{reply}{after}"));
        // A title that is blank after trimming leaves nothing to apply.
        if title.trim().is_empty() {
            prop_assert!(result.is_err());
        } else {
            let is_single = matches!(result, Ok(Plan::Single { .. }));
            prop_assert!(is_single, "{:?}", result);
        }
    }
}
