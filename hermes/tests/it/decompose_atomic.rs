//! B3/B4 as a property: whatever the provider answers, one real attempt leaves the board EITHER
//! as it was (apart from the attempt's own records: its count, its ledger row and its
//! `decompose_failed`/`decompose_parked` events) OR holding exactly the whole graph the reply
//! declared. Never a part of it.
//!
//! Each case builds a reply from a valid graph and, most of the time, one corruption the
//! validator must catch (a cycle, a self-parent, an out-of-range or non-integer parent, a blank
//! or missing title, a task that is not an object, too many children, no JSON at all, ...), so
//! the expected verdict is known without reimplementing the validator.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use fixtures::aux_model::{AuxModel, Reply};
use hermes::config::Config;
use hermes::core::{Applied, AttemptOutcome};
use hermes::decompose::attempt::{run_attempt, AttemptContext};
use hermes::store::{NewTask, Origin, Store};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config as ProptestConfig, TestCaseError, TestRunner};
use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, OpenFlags};
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::support::block_on;

const MAX_CHILDREN: usize = 6;
const CASES: u32 = 64;

/// What the board must look like after the attempt.
#[derive(Debug, Clone)]
enum Expect {
    /// Every child in reply order, and the declared sibling edges as (parent, child) indices.
    Graph {
        titles: Vec<String>,
        edges: BTreeSet<(usize, usize)>,
    },
    /// The card specified in place under this title.
    Single { title: String },
    /// Rejected whole; the label says which corruption, for the failure report.
    Rejected(&'static str),
}

#[derive(Debug, Clone)]
struct Scenario {
    reply: String,
    expect: Expect,
    /// 1 makes the failure also park the card, so `decompose_parked` is exercised too.
    max_attempts: u32,
}

#[derive(Debug, Clone)]
struct Child {
    title: String,
    parents: Vec<usize>,
    assignee: Option<&'static str>,
}

#[derive(Debug, Clone, Copy)]
enum Corruption {
    Cycle,
    SelfParent,
    ParentOutOfRange,
    NegativeParent,
    FloatParent,
    StringParent,
    BlankTitle,
    MissingTitle,
    TaskNotObject,
    NoFanoutFlag,
    EmptyTasks,
}

fn title() -> impl Strategy<Value = String> {
    "[A-Za-z][a-z0-9]{0,8}( [a-z0-9]{1,8}){0,3}"
}

/// An acyclic fan-out: each child may wait only for earlier ones (duplicates allowed, as a model
/// might write them).
fn children(count: std::ops::RangeInclusive<usize>) -> impl Strategy<Value = Vec<Child>> {
    count.prop_flat_map(|n| {
        let per_child: Vec<_> = (0..n)
            .map(|i| {
                (
                    title(),
                    proptest::collection::vec(0..i.max(1), 0..=i.min(3)),
                    prop_oneof![Just(None), Just(Some("coder")), Just(Some("nobody"))],
                )
            })
            .collect();
        per_child.prop_map(|specs| {
            specs
                .into_iter()
                .map(|(title, parents, assignee)| Child {
                    title,
                    parents,
                    assignee,
                })
                .collect()
        })
    })
}

fn task_json(child: &Child) -> Value {
    json!({
        "title": child.title,
        "body": format!("Done when {} works.", child.title),
        "assignee": child.assignee,
        "parents": child.parents,
    })
}

fn fanout_json(children: &[Child]) -> Value {
    json!({
        "fanout": true,
        "rationale": "split by layer",
        "tasks": children.iter().map(task_json).collect::<Vec<_>>(),
    })
}

/// Models wrap their JSON in fences and prose; all three forms must be read the same.
fn wrap(reply: &Value, style: u8) -> String {
    match style % 3 {
        0 => reply.to_string(),
        1 => format!("```json\n{reply:#}\n```"),
        _ => format!("Here is the plan.\n{reply}\nLet me know."),
    }
}

fn valid_graph(children: &[Child]) -> Expect {
    let edges = children
        .iter()
        .enumerate()
        .flat_map(|(i, child)| child.parents.iter().map(move |&p| (p, i)))
        .collect();
    Expect::Graph {
        titles: children.iter().map(|c| c.title.clone()).collect(),
        edges,
    }
}

fn corrupt(children: &[Child], corruption: Corruption, pick: Index) -> (Value, &'static str) {
    let n = children.len();
    let k = pick.index(n);
    let mut reply = fanout_json(children);
    let tasks = reply["tasks"].as_array_mut().expect("tasks is an array");
    let label = match corruption {
        Corruption::Cycle if n >= 2 => {
            // k and its neighbour wait for each other.
            let other = (k + 1) % n;
            for (a, b) in [(k, other), (other, k)] {
                tasks[a]["parents"]
                    .as_array_mut()
                    .expect("parents is an array")
                    .push(json!(b));
            }
            "cycle"
        }
        Corruption::Cycle | Corruption::SelfParent => {
            tasks[k]["parents"] = json!([k]);
            "self parent"
        }
        Corruption::ParentOutOfRange => {
            tasks[k]["parents"] = json!([n + k]);
            "parent out of range"
        }
        Corruption::NegativeParent => {
            tasks[k]["parents"] = json!([-1 - k as i64]);
            "negative parent"
        }
        Corruption::FloatParent => {
            tasks[k]["parents"] = json!([0.5]);
            "float parent"
        }
        Corruption::StringParent => {
            tasks[k]["parents"] = json!(["0"]);
            "string parent"
        }
        Corruption::BlankTitle => {
            tasks[k]["title"] = json!(" \t ");
            "blank title"
        }
        Corruption::MissingTitle => {
            tasks[k]
                .as_object_mut()
                .expect("task is an object")
                .remove("title");
            "missing title"
        }
        Corruption::TaskNotObject => {
            tasks[k] = json!(children[k].title);
            "task not an object"
        }
        Corruption::NoFanoutFlag => {
            reply["fanout"] = json!("yes");
            "fanout not a boolean"
        }
        Corruption::EmptyTasks => {
            reply["tasks"] = json!([]);
            "empty tasks"
        }
    };
    (reply, label)
}

fn corruption() -> impl Strategy<Value = Corruption> {
    prop_oneof![
        Just(Corruption::Cycle),
        Just(Corruption::SelfParent),
        Just(Corruption::ParentOutOfRange),
        Just(Corruption::NegativeParent),
        Just(Corruption::FloatParent),
        Just(Corruption::StringParent),
        Just(Corruption::BlankTitle),
        Just(Corruption::MissingTitle),
        Just(Corruption::TaskNotObject),
        Just(Corruption::NoFanoutFlag),
        Just(Corruption::EmptyTasks),
    ]
}

fn scenario() -> impl Strategy<Value = Scenario> {
    let valid = (children(1..=MAX_CHILDREN), any::<u8>()).prop_map(|(children, style)| {
        (wrap(&fanout_json(&children), style), valid_graph(&children))
    });
    let corrupted = (
        children(1..=MAX_CHILDREN),
        corruption(),
        any::<Index>(),
        any::<u8>(),
    )
        .prop_map(|(children, corruption, pick, style)| {
            let (reply, label) = corrupt(&children, corruption, pick);
            (wrap(&reply, style), Expect::Rejected(label))
        });
    let too_many = (children(MAX_CHILDREN + 1..=MAX_CHILDREN + 3), any::<u8>()).prop_map(
        |(children, style)| {
            (
                wrap(&fanout_json(&children), style),
                Expect::Rejected("too many children"),
            )
        },
    );
    let not_json = "[A-Za-z ,.!?]{0,60}".prop_map(|text| (text, Expect::Rejected("not JSON")));
    let single = (title(), any::<u8>()).prop_map(|(title, style)| {
        let reply = json!({"fanout": false, "rationale": "small enough", "title": title,
                           "body": "Steps: one, two.", "assignee": "coder"});
        (wrap(&reply, style), Expect::Single { title })
    });
    let empty_single = Just((
        json!({"fanout": false, "rationale": "nothing to add"}).to_string(),
        Expect::Rejected("single with neither title nor body"),
    ));
    (
        prop_oneof![
            4 => valid,
            6 => corrupted,
            1 => too_many,
            1 => not_json,
            2 => single,
            1 => empty_single,
        ],
        prop_oneof![Just(1u32), Just(3u32)],
    )
        .prop_map(|((reply, expect), max_attempts)| Scenario {
            reply,
            expect,
            max_attempts,
        })
}

/// The rows an attempt could touch, as plain text for comparison.
#[derive(Debug, Clone, PartialEq)]
struct Snapshot {
    tasks: Vec<String>,
    links: BTreeSet<(String, String)>,
    /// (task id, kind, payload), in id order.
    events: Vec<(String, String, Option<String>)>,
}

fn snapshot(db: &Path) -> Snapshot {
    let conn = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let mut stmt = conn.prepare("SELECT * FROM tasks ORDER BY rowid").unwrap();
    let width = stmt.column_count();
    let tasks = stmt
        .query_map([], |r| {
            let values: Vec<SqlValue> = (0..width).map(|i| r.get(i)).collect::<Result<_, _>>()?;
            Ok(format!("{values:?}"))
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let links = conn
        .prepare("SELECT parent_id, child_id FROM task_links")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let events = conn
        .prepare("SELECT task_id, kind, payload FROM task_events ORDER BY id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    Snapshot {
        tasks,
        links,
        events,
    }
}

fn ledger_rows(db: &Path) -> i64 {
    let conn = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    conn.query_row("SELECT count(*) FROM hermes_aux_ledger", [], |r| r.get(0))
        .unwrap()
}

fn config(server: &AuxModel, max_attempts: u32) -> Config {
    let mut config = Config::default();
    config.model.base_url = Some(server.base_url());
    config.model.default = Some("decomposer-test".into());
    config.auxiliary.transient_retries = 0;
    config.auxiliary.timeout = Duration::from_secs(10);
    config.kanban.decompose_max_children = MAX_CHILDREN as u32;
    config.kanban.decompose_max_attempts = max_attempts;
    config
}

#[allow(
    clippy::too_many_lines,
    reason = "one generated case run and judged as one scenario, top to bottom"
)]
fn run_case(server: &AuxModel, scenario: &Scenario) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("kanban.db");
    let root = Store::open(&db)
        .unwrap()
        .create_task(&NewTask {
            title: "Ship the importer".into(),
            body: Some("CSV and JSON inputs".into()),
            triage: true,
            ..NewTask::default()
        })
        .unwrap()
        .id;
    let before = snapshot(&db);
    let ctx = AttemptContext::new(
        Arc::new(config(server, scenario.max_attempts)),
        None,
        vec!["coder".into(), "default".into()],
        db.clone(),
    )
    .unwrap();
    let hits_before = server.bills();
    let (_running, shutdown) = watch::channel(false);
    let outcome: AttemptOutcome =
        block_on(run_attempt(&ctx, &root, Origin::Gateway, shutdown)).unwrap();
    if let AttemptOutcome::Refused { refusal, .. } = &outcome {
        panic!("a fresh triage card was refused: {refusal:?}");
    }
    let after = snapshot(&db);

    prop_assert_eq!(server.bills() - hits_before, 1, "one request per attempt");
    prop_assert_eq!(ledger_rows(&db), 1);
    prop_assert_eq!(
        &after.events[..before.events.len()],
        &before.events[..],
        "history is only ever appended to"
    );
    let new_events = &after.events[before.events.len()..];
    let root_kinds: Vec<&str> = new_events
        .iter()
        .filter(|(task, _, _)| *task == root)
        .map(|(_, kind, _)| kind.as_str())
        .collect();

    match &scenario.expect {
        Expect::Rejected(why) => {
            prop_assert!(!outcome.ok(), "{} was accepted: {:?}", why, outcome);
            prop_assert_eq!(&after.tasks, &before.tasks, "{}: task rows changed", why);
            prop_assert_eq!(&after.links, &before.links, "{}: links changed", why);
            prop_assert!(
                new_events.iter().all(|(task, _, _)| *task == root),
                "{}: events on other cards: {:?}",
                why,
                new_events
            );
            let expected: &[&str] = if scenario.max_attempts == 1 {
                &["decompose_failed", "decompose_parked"]
            } else {
                &["decompose_failed"]
            };
            prop_assert_eq!(&root_kinds[..], expected, "{}", why);
        }
        Expect::Graph { titles, edges } => {
            prop_assert!(outcome.ok(), "a valid graph failed: {:?}", outcome);
            let child_ids = outcome
                .child_ids()
                .map(<[String]>::to_vec)
                .unwrap_or_default();
            prop_assert_eq!(child_ids.len(), titles.len());
            let store = Store::open(&db).unwrap();
            for (id, title) in child_ids.iter().zip(titles) {
                prop_assert_eq!(&store.get(id).unwrap().title, title);
            }
            prop_assert_eq!(
                after.tasks.len(),
                1 + titles.len(),
                "no other card appeared"
            );
            let mut expected_links: BTreeSet<(String, String)> = child_ids
                .iter()
                .map(|child| (child.clone(), root.clone()))
                .collect();
            expected_links.extend(
                edges
                    .iter()
                    .map(|&(p, c)| (child_ids[p].clone(), child_ids[c].clone())),
            );
            prop_assert_eq!(&after.links, &expected_links);
            prop_assert_ne!(store.get(&root).unwrap().status.as_str(), "triage");
            prop_assert_eq!(&root_kinds[..], &["decomposed"]);
            let decomposed = store
                .events_of(&root)
                .unwrap()
                .into_iter()
                .find(|e| e.kind == "decomposed")
                .and_then(|e| e.payload);
            prop_assert_eq!(
                decomposed.map(|p| p["child_ids"].clone()),
                Some(json!(child_ids))
            );
        }
        Expect::Single { title } => {
            prop_assert!(
                matches!(
                    outcome,
                    AttemptOutcome::Applied {
                        applied: Applied::Single { .. },
                        ..
                    }
                ),
                "a valid single failed: {:?}",
                outcome
            );
            prop_assert_eq!(after.tasks.len(), 1);
            prop_assert!(after.links.is_empty());
            let task = Store::open(&db).unwrap().get(&root).unwrap();
            prop_assert_eq!(&task.title, title);
            prop_assert_ne!(task.status.as_str(), "triage");
            prop_assert_eq!(root_kinds.iter().filter(|k| **k == "specified").count(), 1);
            prop_assert!(!root_kinds.iter().any(|k| k.starts_with("decompose")));
        }
    }
    Ok(())
}

#[test]
fn an_attempt_writes_the_whole_graph_or_nothing() {
    // One provider for every case; only the reply changes between cases.
    let server = AuxModel::start();

    let mut runner = TestRunner::new(ProptestConfig {
        cases: CASES,
        // The failing reply is printed in full; nothing is written next to the sources.
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let result = runner.run(&scenario(), |scenario| {
        server.reply_default(Reply::text(scenario.reply.clone()));
        run_case(&server, &scenario)
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
}
