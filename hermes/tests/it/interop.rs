//! A board is a file two implementations share: ours must read what upstream hermes-agent
//! 0.19.0 wrote, and upstream must read what we write.

use std::time::Duration;

use fixtures::target::Target;

use crate::support::{copy_upstream_board, Scratch};
use fixtures::cli::CliOutput;
use serde_json::{json, Value};

fn ids(list: &Value) -> Vec<String> {
    list.as_array()
        .expect("a JSON array")
        .iter()
        .map(|t| t["id"].as_str().expect("an id").to_owned())
        .collect()
}

#[test]
fn ours_reads_the_board_upstream_wrote() {
    let s = Scratch::new();
    copy_upstream_board(&s.hermes_home());

    let all = s.json(&["kanban", "list", "--archived", "--json"]);
    assert_eq!(
        ids(&all),
        [
            "t_9f474b0a",
            "t_3f5ca4ea",
            "t_00a72e45",
            "t_4309fb9d",
            "t_0dd512ee",
            "t_72fa6ca0",
            "t_e7cb60d4",
            "t_fbf79d3c"
        ]
    );
    let statuses: Vec<&str> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        statuses,
        ["ready", "todo", "todo", "triage", "archived", "ready", "ready", "todo"]
    );
    assert_eq!(all[3]["title"], "emoji 🚀 \"quotes\" and ünïcödé");
    assert!(all
        .as_array()
        .unwrap()
        .iter()
        .all(|t| t.get("decompose").is_none()));

    let visible = s.json(&["kanban", "list", "--json"]);
    assert_eq!(visible.as_array().unwrap().len(), 7);
    assert!(!ids(&visible).contains(&"t_0dd512ee".to_owned()));

    // The decomposed root waits for its three children; child 2 waits for child 0.
    let root = s.json(&["kanban", "show", "t_00a72e45", "--json"]);
    assert_eq!(
        root["parents"],
        json!(["t_72fa6ca0", "t_e7cb60d4", "t_fbf79d3c"])
    );
    assert_eq!(root["children"], json!([]));
    let kinds: Vec<&str> = root["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["created", "decomposed"]);
    assert_eq!(
        root["events"][1]["payload"]["child_ids"],
        json!(["t_72fa6ca0", "t_e7cb60d4", "t_fbf79d3c"])
    );
    let child0 = s.json(&["kanban", "show", "t_72fa6ca0", "--json"]);
    assert_eq!(child0["children"], json!(["t_00a72e45", "t_fbf79d3c"]));
    assert_eq!(
        child0["events"][0]["payload"],
        json!({"by": "default", "from_decompose_of": "t_00a72e45"})
    );
    assert_eq!(child0["events"][1]["kind"], "promoted");
    assert_eq!(child0["events"][1]["payload"], Value::Null);

    // All 5 links and 13 events, counted through the CLI.
    let mut links = 0;
    let mut events = 0;
    for id in ids(&all) {
        let shown = s.json(&["kanban", "show", &id, "--json"]);
        links += shown["parents"].as_array().unwrap().len();
        events += shown["events"].as_array().unwrap().len();
    }
    assert_eq!((links, events), (5, 13));

    // And ours keeps working on it.
    let added = s.create("added by the reference", &["--parent", "t_9f474b0a"]);
    let shown = s.json(&["kanban", "show", &added, "--json"]);
    assert_eq!(
        shown["task"]["status"], "todo",
        "t_9f474b0a is ready, not done: the new card waits"
    );
    assert_eq!(shown["parents"], json!(["t_9f474b0a"]));
}

fn upstream(s: &Scratch, target: &Target, args: &[&str]) -> CliOutput {
    let out = s.call(target, args, &[], &[], Duration::from_secs(120));
    assert_eq!(out.code, Some(0), "upstream {args:?} failed:\n{out}");
    out
}

/// Tests that run upstream hermes-agent itself: the `default` nextest profile leaves them out (a
/// machine without Python still runs everything else), `--profile with-upstream` runs them, and
/// there a missing upstream fails with the install instructions instead of passing unseen.
mod with_upstream {
    use super::*;

    #[test]
    fn upstream_reads_the_board_ours_wrote() {
        let target = fixtures::upstream::upstream();
        let s = Scratch::new();
        let parent = s.create("parent from the reference", &["--body", "with a body"]);
        let child = s.create(
            "child 🚀 \"quoted\"",
            &["--parent", &parent, "--assignee", "default"],
        );
        let idea = s.create("an idea", &["--triage"]);
        let gone = s.create("to be archived", &[]);
        s.ok(&["kanban", "archive", &gone]);

        let theirs = upstream(&s, target, &["kanban", "list", "--json"]).json();
        assert_eq!(ids(&theirs), [parent.clone(), child.clone(), idea.clone()]);
        let by_id = |id: &str| {
            theirs
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["id"] == id)
                .cloned()
                .unwrap()
        };
        assert_eq!(by_id(&child)["title"], "child 🚀 \"quoted\"");
        assert_eq!(by_id(&child)["status"], "todo");
        assert_eq!(by_id(&idea)["status"], "triage");
        assert_eq!(by_id(&parent)["body"], "with a body");
        let with_archived =
            upstream(&s, target, &["kanban", "list", "--archived", "--json"]).json();
        assert_eq!(with_archived.as_array().unwrap().len(), 4);

        let shown = upstream(&s, target, &["kanban", "show", &child, "--json"]).json();
        let ours = s.json(&["kanban", "show", &child, "--json"]);
        assert_eq!(shown["parents"], json!([parent]));
        assert_eq!(shown["events"], ours["events"]);
        // Our task object is upstream's plus nothing (this card has no decompose row).
        assert_eq!(shown["task"], ours["task"]);

        // A card upstream creates on our board reads back through ours.
        let made = upstream(
            &s,
            target,
            &[
                "kanban",
                "create",
                "made by upstream",
                "--parent",
                &parent,
                "--json",
            ],
        )
        .json();
        let made_id = made["id"].as_str().unwrap();
        let read = s.json(&["kanban", "show", made_id, "--json"]);
        assert_eq!(read["task"]["title"], "made by upstream");
        assert_eq!(read["task"]["status"], "todo");
        assert_eq!(read["parents"], json!([parent]));
        assert_eq!(read["events"][0]["kind"], "created");

        // Upstream's migrations left our own tables and rows alone.
        let idea_now = s.json(&["kanban", "show", &idea, "--json"]);
        assert_eq!(idea_now["task"]["decompose"]["attempts"], 0);
        s.create("still writable", &[]);
    }
}
