//! The `hermes` binary end to end: the board verbs, their JSON shapes, and every kind of bad
//! input answered with a clear message and the right exit code (never a panic).

use std::time::Duration;

use crate::support::Scratch;
use fixtures::cli::CliOutput;
use rusqlite::Connection;
use serde_json::Value;

/// Upstream's task object keys, in upstream's order.
const TASK_KEYS: [&str; 21] = [
    "id",
    "title",
    "body",
    "assignee",
    "status",
    "priority",
    "tenant",
    "workspace_kind",
    "workspace_path",
    "branch_name",
    "project_id",
    "created_by",
    "created_at",
    "started_at",
    "completed_at",
    "result",
    "skills",
    "max_retries",
    "session_id",
    "workflow_template_id",
    "current_step_key",
];

fn keys(v: &Value) -> Vec<String> {
    v.as_object().expect("an object").keys().cloned().collect()
}

fn assert_task_shape(v: &Value) {
    let mut expected: Vec<String> = TASK_KEYS.iter().map(|k| k.to_string()).collect();
    if v.get("decompose").is_some() {
        expected.push("decompose".into());
    }
    assert_eq!(keys(v), expected, "{v:#}");
}

/// The last line of stderr, which under `--json` must be the error as one JSON object.
pub fn json_error(out: &CliOutput) -> Value {
    let line = out.stderr.lines().last().unwrap_or_default();
    serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("the error is not one JSON object ({e}): {out:?}"))
}

fn rows(db: &std::path::Path, sql: &str) -> i64 {
    let conn = Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

#[allow(
    clippy::too_many_lines,
    reason = "a test reads as one scenario, top to bottom"
)]
#[test]
fn smoke_create_show_list_link_archive() {
    let s = Scratch::new();
    let init = s.ok(&["kanban", "init"]);
    assert!(init.stdout.contains("kanban.db"), "{init:?}");
    assert!(s.db().is_file());
    s.ok(&["kanban", "init"]); // idempotent

    let parent = s.json(&[
        "kanban",
        "create",
        "parent card",
        "--body",
        "the body",
        "--assignee",
        "Worker",
        "--json",
    ]);
    assert_task_shape(&parent);
    assert_eq!(parent["title"], "parent card");
    assert_eq!(parent["body"], "the body");
    assert_eq!(parent["assignee"], "worker");
    assert_eq!(parent["status"], "ready");
    assert_eq!(parent["created_by"], "user");
    assert_eq!(parent["skills"], serde_json::json!([]));
    assert!(parent["created_at"].as_i64().unwrap() > 1_600_000_000);
    let pid = parent["id"].as_str().unwrap().to_owned();

    let child = s.json(&[
        "kanban",
        "create",
        "child card",
        "--parent",
        &pid,
        "--priority",
        "-2",
        "--tenant",
        "acme",
        "--created-by",
        "bot",
        "--json",
    ]);
    assert_eq!(child["status"], "todo");
    assert_eq!(child["priority"], -2);
    assert_eq!(child["tenant"], "acme");
    assert_eq!(child["created_by"], "bot");
    let cid = child["id"].as_str().unwrap().to_owned();

    let triage = s.json(&["kanban", "--json", "create", "big idea", "--triage"]);
    assert_task_shape(&triage);
    assert_eq!(triage["status"], "triage");
    assert_eq!(triage["decompose"]["attempts"], 0);
    assert_eq!(triage["decompose"]["parked"], false);
    assert_eq!(triage["decompose"]["opt_out"], false);
    assert!(
        triage["decompose"]["next_attempt_at"].as_i64().unwrap()
            >= triage["created_at"].as_i64().unwrap()
    );
    let held = s.json(&[
        "kanban",
        "create",
        "hands off",
        "--triage",
        "--no-auto-decompose",
        "--json",
    ]);
    assert_eq!(held["decompose"]["opt_out"], true);
    assert_eq!(held["decompose"]["next_attempt_at"], Value::Null);

    let show = s.json(&["kanban", "show", &cid, "--json"]);
    assert_eq!(
        keys(&show),
        [
            "task",
            "latest_summary",
            "parents",
            "children",
            "comments",
            "events",
            "runs"
        ]
    );
    assert_task_shape(&show["task"]);
    assert_eq!(show["parents"], serde_json::json!([pid]));
    assert_eq!(show["children"], serde_json::json!([]));
    assert_eq!(show["comments"], serde_json::json!([]));
    assert_eq!(show["runs"], serde_json::json!([]));
    let events = show["events"].as_array().unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(
        keys(&events[0]),
        ["kind", "payload", "created_at", "run_id"]
    );
    assert_eq!(events[0]["kind"], "created");
    assert_eq!(events[0]["payload"]["parents"], serde_json::json!([pid]));
    assert_eq!(events[0]["payload"]["status"], "todo");

    let text = s.ok(&["kanban", "show", &cid]).stdout;
    assert!(
        text.contains("child card") && text.contains("todo") && text.contains(&pid),
        "{text}"
    );

    let list = s.json(&["kanban", "list", "--json"]);
    let listed: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed.len(), 4);
    assert_eq!(listed[0], pid);
    list.as_array().unwrap().iter().for_each(assert_task_shape);
    let todo = s.json(&["kanban", "list", "--status", "todo", "--json"]);
    assert_eq!(todo.as_array().unwrap().len(), 1);
    let worker = s.json(&["kanban", "ls", "--assignee", "worker", "--json"]);
    assert_eq!(worker.as_array().unwrap().len(), 1);
    let text = s.ok(&["kanban", "list"]).stdout;
    assert_eq!(text.lines().count(), 4, "{text}");
    assert!(
        text.lines()
            .any(|l| l.contains(&cid) && l.contains("todo") && l.contains("child card")),
        "{text}"
    );

    let other = s.create("other", &[]);
    let link = s.json(&["kanban", "link", &other, &pid, "--json"]);
    assert_eq!(link["already_linked"], false);
    assert_eq!(
        s.json(&["kanban", "show", &pid, "--json"])["task"]["status"],
        "todo"
    );
    assert!(s
        .ok(&["kanban", "link", &other, &pid])
        .stdout
        .contains("Already linked"));

    let archived = s.json(&["kanban", "archive", &other, "--json"]);
    assert_eq!(archived["archived"], serde_json::json!([other]));
    assert_eq!(archived["promoted"], serde_json::json!([pid]));
    let visible = s.json(&["kanban", "list", "--json"]);
    assert!(visible
        .as_array()
        .unwrap()
        .iter()
        .all(|t| t["id"] != other.as_str()));
    let everything = s.json(&["kanban", "list", "--archived", "--json"]);
    assert_eq!(everything.as_array().unwrap().len(), 5);
    let other_events = s.json(&["kanban", "show", &other, "--json"])["events"].clone();
    let kinds: Vec<&str> = other_events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["created", "archived"]);
}

#[test]
fn every_command_creates_the_board_on_first_use() {
    for verb in [
        &["kanban", "list"][..],
        &["kanban", "create", "x"],
        &["kanban", "show", "t_00000000"],
    ] {
        let s = Scratch::new();
        s.run(verb);
        assert!(s.db().is_file(), "{verb:?} did not create the board");
    }
}

#[test]
fn unknown_ids_exit_one_naming_the_id() {
    let s = Scratch::new();
    let known = s.create("known", &[]);
    for args in [
        vec!["kanban", "show", "t_nope0000"],
        vec!["kanban", "link", &known, "t_nope0000"],
        vec!["kanban", "link", "t_nope0000", &known],
        vec!["kanban", "archive", &known, "t_nope0000"],
        vec!["kanban", "create", "orphan", "--parent", "t_nope0000"],
    ] {
        let out = s.run(&args);
        assert_eq!(out.code, Some(1), "{args:?}: {out:?}");
        assert!(
            out.stderr
                .contains("hermes: error: no such task: t_nope0000"),
            "{args:?}: {out:?}"
        );
        assert!(out.stdout.is_empty(), "{args:?}: {out:?}");
        // The same error as one JSON object under --json, with the same exit code.
        let mut json_args = args.clone();
        json_args.push("--json");
        let out = s.run(&json_args);
        assert_eq!(out.code, Some(1), "{json_args:?}: {out:?}");
        assert_eq!(
            json_error(&out),
            serde_json::json!({"error": "no such task: t_nope0000", "code": 1}),
            "{json_args:?}"
        );
        assert!(out.stdout.is_empty(), "{json_args:?}: {out:?}");
    }
    // The failed archive and create wrote nothing.
    assert_eq!(
        s.json(&["kanban", "show", &known, "--json"])["task"]["status"],
        "ready"
    );
    assert_eq!(
        s.json(&["kanban", "list", "--archived", "--json"])
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn bad_arguments_exit_two_with_usage() {
    let s = Scratch::new();
    for args in [
        vec!["kanban"],
        vec!["kanban", "create"],
        vec!["kanban", "create", "x", "--priority", "high"],
        vec!["kanban", "create", "x", "--bogus"],
        vec!["kanban", "list", "--status", "limbo"],
        vec!["kanban", "show"],
        vec!["kanban", "link", "only-one"],
        vec!["kanban", "archive"],
        vec!["kanban", "decompose"],
        vec!["kanban", "frobnicate"],
        vec!["nonsense"],
    ] {
        let out = s.run(&args);
        assert_eq!(out.code, Some(2), "{args:?}: {out:?}");
        assert!(out.stderr.contains("Usage:"), "{args:?}: {out:?}");
        assert!(out.stdout.is_empty(), "{args:?}: {out:?}");
    }
}

#[test]
fn cycles_and_self_links_are_refused() {
    let s = Scratch::new();
    let a = s.create("a", &[]);
    let b = s.create("b", &["--parent", &a]);
    let out = s.run(&["kanban", "link", &b, &a]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stderr.contains("would create a cycle"), "{out:?}");
    let out = s.run(&["kanban", "link", &a, &a]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stderr.contains("cannot depend on itself"), "{out:?}");
}

#[test]
fn blank_titles_and_assignees_are_refused() {
    let s = Scratch::new();
    let out = s.run(&["kanban", "create", "   "]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stderr.contains("title cannot be empty"), "{out:?}");
    let out = s.run(&["kanban", "create", "x", "--assignee", ""]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stderr.contains("assignee cannot be empty"), "{out:?}");
    assert_eq!(s.json(&["kanban", "list", "--json"]), serde_json::json!([]));
}

#[test]
fn a_corrupt_board_is_reported_and_left_byte_for_byte() {
    let s = Scratch::new();
    std::fs::create_dir_all(s.hermes_home()).unwrap();
    let garbage: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(s.db(), &garbage).unwrap();
    for args in [
        vec!["kanban", "list"],
        vec!["kanban", "create", "x", "--json"],
        vec!["kanban", "init"],
    ] {
        let out = s.run(&args);
        assert_eq!(out.code, Some(1), "{args:?}: {out:?}");
        assert!(
            out.stderr.contains("is not a readable SQLite database"),
            "{out:?}"
        );
        assert!(out.stderr.contains("left untouched"), "{out:?}");
        assert!(out.stdout.is_empty(), "{out:?}");
    }
    assert_eq!(std::fs::read(s.db()).unwrap(), garbage);
    assert!(!s.hermes_home().join("kanban.db-wal").exists());
}

#[test]
fn a_locked_board_fails_within_the_busy_timeout_and_writes_nothing() {
    let s = Scratch::new();
    s.ok(&["kanban", "init"]);
    let holder = Connection::open(s.db()).unwrap();
    holder.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let out = s.run(&["kanban", "create", "while locked", "--json"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr
            .contains("database is locked by another writer (waited 5 s)"),
        "{out:?}"
    );
    assert!(out.stdout.is_empty(), "{out:?}");
    assert!(
        out.elapsed >= Duration::from_millis(4500) && out.elapsed <= Duration::from_millis(6500),
        "took {:?}",
        out.elapsed
    );
    holder.execute_batch("ROLLBACK").unwrap();
    drop(holder);
    assert_eq!(rows(&s.db(), "SELECT count(*) FROM tasks"), 0);
    assert_eq!(rows(&s.db(), "SELECT count(*) FROM task_events"), 0);
    s.create("after the lock", &[]);
}

#[test]
fn a_bad_config_names_the_key() {
    let cases = [
        (
            "kanban:\n  dispatch_interval_seconds: fast\n",
            "kanban.dispatch_interval_seconds: expected a number of seconds from 0.01 to 86400, \
             got \"fast\"",
        ),
        (
            "kanban:\n  decompose_max_attempts: -1\n",
            "kanban.decompose_max_attempts: expected a whole number of attempts from 0 to 100, \
             got -1",
        ),
        (
            "auxiliary:\n  timeout_seconds: 0\n",
            "auxiliary.timeout_seconds: expected a number of seconds from 0.01 to 3600, got 0",
        ),
        (
            "kanban:\n  auto_decompose_per_tick: 4000000000\n  decompose_calls_per_hour: 4000000000\n",
            "kanban.auto_decompose_per_tick: expected a whole number of cards from 1 to 1000, \
             got 4000000000",
        ),
        (
            "kanban:\n  provider_cooldown_seconds: 1e16\n",
            "kanban.provider_cooldown_seconds: expected a number of seconds from 1 to 86400, got",
        ),
        ("kanban: 3\n", "kanban: expected a mapping of keys, got 3"),
        ("kanban:\n  auto_decompose: [\n", "invalid YAML"),
    ];
    for (yaml, expected) in cases {
        let s = Scratch::new();
        s.write_config(yaml);
        let out = s.run(&["kanban", "decompose", "--all", "--json"]);
        assert_eq!(out.code, Some(1), "{yaml:?}: {out:?}");
        assert!(out.error().contains("config.yaml"), "{yaml:?}: {out:?}");
        assert!(out.error().contains(expected), "{yaml:?}: {out:?}");
        assert!(out.stdout.is_empty(), "{yaml:?}: {out:?}");

        // `usage` bills nothing: it warns with the same message and shows the ledger.
        for args in [
            vec!["kanban", "usage", "--json"],
            vec!["kanban", "usage"],
            vec!["kanban", "usage", "--calls"],
        ] {
            let out = s.run(&args);
            assert_eq!(out.code, Some(0), "{yaml:?} {args:?}: {out:?}");
            let warning = out.stderr.lines().next().unwrap_or("");
            assert!(
                warning.starts_with("hermes: warning: ")
                    && warning.contains("config.yaml")
                    && warning.contains(expected),
                "{yaml:?} {args:?}: {out:?}"
            );
            if args.contains(&"--json") {
                assert_eq!(out.json()["totals"]["calls"], 0, "{yaml:?}: {out:?}");
            }
        }
        let text = s.ok(&["kanban", "usage"]).stdout;
        assert!(text.starts_with("0 paid calls (0 ok, 0 failed)"), "{text}");
        assert!(
            text.contains("(the default kanban.decompose_calls_per_hour: config.yaml could not"),
            "{text}"
        );
        assert!(!text.contains("est. $"), "{text}");
    }
}

#[test]
fn unknown_config_keys_are_fine() {
    let s = Scratch::new();
    s.write_config(
        "model:\n  provider: custom\n  base_url: http://127.0.0.1:9/v1\n  default: fake\n\
         updates:\n  check: false\nkanban:\n  dispatch_in_gateway: false\n  failure_limit: 2\n\
         \x20 worker_log_backup_count: 1\nauxiliary:\n  vision: {timeout: 3}\n\
         \x20 kanban_decomposer:\n    provider: auto\n    model: ''\n    timeout: 180\n\
         \x20   extra_body: {}\n    reasoning_effort: ''\n",
    );
    s.ok(&["kanban", "init"]);
    let out = s.run(&["kanban", "create", "fine", "--json"]);
    assert!(out.success(), "{out:?}");
    assert_eq!(out.stderr, "", "upstream's own keys stay silent");
    out.json();
}

#[test]
fn a_misspelt_key_warns_on_stderr_with_the_closest_known_key() {
    let s = Scratch::new();
    s.write_config("kanban:\n  dispatch_interval_secs: 5\n  auto_decompose: false\n");
    let id = s.create("x", &["--triage"]);
    // The verbs that read config.yaml: those that bill, or report or change the bounds.
    for (args, code) in [
        (vec!["kanban", "usage", "--json"], 0),
        (vec!["kanban", "usage", "--calls"], 0),
        (vec!["kanban", "unpark", id.as_str()], 1),
        (vec!["kanban", "decompose", "--all", "--json"], 1),
    ] {
        let out = s.run(&args);
        assert_eq!(out.code, Some(code), "{args:?}: {out:?}");
        let warnings: Vec<&str> = out
            .stderr
            .lines()
            .filter(|l| l.starts_with("hermes: warning: "))
            .collect();
        assert_eq!(warnings.len(), 1, "{args:?}: {out:?}");
        assert!(
            warnings[0].contains("config.yaml: kanban.dispatch_interval_secs: ")
                && warnings[0].ends_with("did you mean kanban.dispatch_interval_seconds?"),
            "{args:?}: {out:?}"
        );
        if args.contains(&"--json") && code == 0 {
            // stdout still holds only JSON.
            for line in out.stdout.lines().filter(|l| !l.trim().is_empty()) {
                assert!(
                    line.starts_with(['{', '}', '[', ']', ' ', '"']),
                    "{args:?}: {out:?}"
                );
            }
        }
    }
}

#[test]
fn board_only_verbs_do_not_read_the_config() {
    let s = Scratch::new();
    s.write_config("kanban:\n  decompose_calls_per_hour: 4000000000\n  typo_key: 1\n");
    let id = s.create("still works", &["--triage"]);
    for args in [
        vec!["kanban", "init"],
        vec!["kanban", "list", "--json"],
        vec!["kanban", "show", id.as_str(), "--json"],
        vec!["kanban", "auto-decompose", id.as_str(), "off"],
        vec!["kanban", "resume"],
    ] {
        let out = s.run(&args);
        assert!(out.success(), "{args:?}: {out:?}");
        assert_eq!(out.stderr, "", "{args:?}");
    }
    // Every verb that bills or changes the bounds refuses it, before anything is billed;
    // `usage`, which only reads the ledger, warns and goes on.
    let out = s.run(&["kanban", "usage"]);
    assert!(out.success(), "{out:?}");
    assert!(
        out.stderr.starts_with("hermes: warning: ")
            && out
                .stderr
                .contains("kanban.decompose_calls_per_hour: expected"),
        "{out:?}"
    );
    for args in [
        vec!["kanban", "decompose", id.as_str()],
        vec!["kanban", "decompose", "--all"],
        vec!["kanban", "unpark", id.as_str()],
        vec!["gateway", "run"],
    ] {
        let out = s.run(&args);
        assert_eq!(out.code, Some(1), "{args:?}: {out:?}");
        assert!(
            out.stderr.contains(
                "kanban.decompose_calls_per_hour: expected a whole number of calls from 0 to \
                 100000, got 4000000000"
            ),
            "{args:?}: {out:?}"
        );
    }
}

#[test]
fn hostile_titles_round_trip_exactly() {
    let s = Scratch::new();
    for title in [
        "it's a \"quoted\" title",
        "line one\nline two\n\ttabbed",
        "emoji 🚀🔥 and ünïcödé 中文",
        "'); DROP TABLE tasks; --",
        "%_ LIKE \\ wildcards; SELECT * FROM task_events",
        "  leading and trailing spaces  ",
        "\u{1b}[31mred\u{1b}[0m",
    ] {
        let body = format!("body of {title}");
        let created = s.json(&["kanban", "create", title, "--body", &body, "--json"]);
        assert_eq!(created["title"], title);
        let shown = s.json(&["kanban", "show", created["id"].as_str().unwrap(), "--json"]);
        assert_eq!(shown["task"]["title"], title);
        assert_eq!(shown["task"]["body"], body.as_str());
    }
    let listed = s.json(&["kanban", "list", "--json"]);
    assert_eq!(listed.as_array().unwrap().len(), 7);
    // Text output keeps one card per line whatever the title holds.
    assert_eq!(s.ok(&["kanban", "list"]).stdout.lines().count(), 7);
}

#[test]
fn no_home_at_all_is_a_clear_error() {
    let s = Scratch::new();
    let out = s.run_env(&["kanban", "list"], &["HOME", "HERMES_HOME"], &[]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr.contains("neither HERMES_HOME nor HOME is set"),
        "{out:?}"
    );
}

#[test]
fn hermes_home_defaults_to_dot_hermes_under_home() {
    let s = Scratch::new();
    let out = s.run_env(&["kanban", "init"], &["HERMES_HOME"], &[]);
    assert!(out.success(), "{out:?}");
    assert!(s.home().join(".hermes/kanban.db").is_file());
}

#[test]
fn concurrent_first_use_of_a_fresh_board_loses_no_card() {
    let s = Scratch::new();
    // Eight calls at once, one thread each.
    std::thread::scope(|scope| {
        for i in 0..8 {
            let s = &s;
            scope.spawn(move || {
                s.ok(&[
                    "kanban",
                    "create",
                    &format!("racer {i}"),
                    "--triage",
                    "--json",
                ])
            });
        }
    });
    assert_eq!(rows(&s.db(), "SELECT count(*) FROM tasks"), 8);
    assert_eq!(
        rows(&s.db(), "SELECT count(*) FROM hermes_decompose_state"),
        8
    );
}

#[test]
fn usage_errors_under_json_are_json_objects_and_still_exit_two() {
    let s = Scratch::new();
    for args in [
        vec!["--json", "kanban"],
        vec!["kanban", "create", "--json"],
        vec!["kanban", "list", "--status", "limbo", "--json"],
        vec!["--json", "nonsense"],
        vec!["man", "nonsense", "--json"],
    ] {
        let out = s.run(&args);
        assert_eq!(out.code, Some(2), "{args:?}: {out:?}");
        let error = json_error(&out);
        assert_eq!(error["code"], 2, "{args:?}: {error}");
        assert!(
            error["error"].as_str().is_some_and(|m| !m.is_empty()),
            "{error}"
        );
        assert_eq!(error.as_object().map(|o| o.len()), Some(2), "{error}");
        assert!(out.stdout.is_empty(), "{args:?}: {out:?}");
    }
}

/// A run with the environment a terminal user has (no NO_COLOR), stderr still a pipe.
fn run_without_no_color(s: &Scratch, args: &[&str], env: &[(&str, &str)]) -> CliOutput {
    s.run_env(args, &["NO_COLOR", "CLICOLOR_FORCE"], env)
}

#[test]
fn color_follows_the_flag_and_no_color() {
    let s = Scratch::new();
    s.ok(&["kanban", "init"]);
    let failing = ["kanban", "show", "t_nope0000"];
    let with = |extra: &[&'static str]| {
        let mut args = failing.to_vec();
        args.extend_from_slice(extra);
        args
    };
    // NO_COLOR (the helper sets it), --color never, and a pipe under auto: plain text.
    for out in [
        s.run(&failing),
        s.run(&with(&["--color", "never"])),
        run_without_no_color(&s, &with(&["--color=never"]), &[]),
        run_without_no_color(&s, &failing, &[]),
    ] {
        assert_eq!(out.code, Some(1), "{out:?}");
        assert!(
            out.stderr.starts_with("hermes: error: no such task"),
            "{out:?}"
        );
        assert!(!out.stderr.contains('\u{1b}'), "{out:?}");
    }
    // Asked for, colour wins over NO_COLOR; CLICOLOR_FORCE asks too.
    for out in [
        s.run(&with(&["--color", "always"])),
        run_without_no_color(&s, &failing, &[("CLICOLOR_FORCE", "1")]),
    ] {
        assert_eq!(out.code, Some(1), "{out:?}");
        assert!(out.stderr.contains("\u{1b}["), "{out:?}");
        assert!(out.stderr.contains("no such task: t_nope0000"), "{out:?}");
    }
    // JSON is never coloured.
    let out = s.run(&with(&["--color", "always", "--json"]));
    assert!(!out.stderr.contains('\u{1b}'), "{out:?}");
    assert_eq!(json_error(&out)["code"], 1);
    // clap's own usage errors follow the flag too.
    let out = s.run(&["kanban", "frobnicate", "--color", "always"]);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("\u{1b}["), "{out:?}");
    let out = run_without_no_color(&s, &["kanban", "frobnicate", "--color", "never"], &[]);
    assert!(!out.stderr.contains('\u{1b}'), "{out:?}");
}

#[test]
fn version_names_the_commit_or_says_it_is_unknown() {
    let s = Scratch::new();
    let out = s.ok(&["--version"]);
    let line = out.stdout.trim_end();
    let rest = line
        .strip_prefix(&format!("hermes {} (", env!("CARGO_PKG_VERSION")))
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{line:?}"));
    if rest != "commit unknown" {
        let (hash, date) = rest.split_once(' ').unwrap_or_else(|| panic!("{line:?}"));
        assert!(
            hash.len() >= 7 && hash.chars().all(|c| c.is_ascii_hexdigit()),
            "{line:?}"
        );
        let digits: Vec<&str> = date.split('-').collect();
        assert!(
            digits.len() == 3 && digits.iter().all(|d| d.chars().all(|c| c.is_ascii_digit())),
            "{line:?}"
        );
    }
}

#[test]
fn completions_and_man_pages_need_no_home() {
    let s = Scratch::new();
    let run = |args: &[&str]| {
        let out = s.run_env(args, &["HOME", "HERMES_HOME"], &[]);
        assert!(out.success(), "{args:?}: {out:?}");
        assert!(out.stderr.is_empty(), "{args:?}: {out:?}");
        out.stdout
    };
    let bash = run(&["completions", "bash"]);
    assert!(
        bash.contains("kanban") && bash.contains("decompose"),
        "{bash}"
    );
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        assert!(run(&["completions", shell]).contains("kanban"), "{shell}");
    }
    let page = run(&["man"]);
    assert!(page.starts_with('.'), "{page}");
    assert!(page.contains(".TH hermes 1"), "{page}");
    assert!(page.contains("kanban"), "{page}");
    let page = run(&["man", "kanban", "create"]);
    assert!(page.contains(".TH hermes-kanban-create 1"), "{page}");
    assert!(page.contains("\\-\\-triage"), "{page}");
    assert!(!s.hermes_home().exists());
    let out = s.run(&["man", "kanban", "frobnicate"]);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("no command `frobnicate`"), "{out:?}");
}

#[test]
fn since_takes_compound_spans_dates_and_days() {
    let s = Scratch::new();
    s.ok(&["kanban", "init"]);
    for since in [
        "1h30m",
        "2d",
        "1w",
        "90s",
        "45",
        "yesterday",
        "today",
        "2026-11-30",
        "2026-11-30T10:00",
        "2026-11-30T10:00+01:00",
        "2026-11-30 10:00:05.250Z",
    ] {
        let out = s.ok(&["kanban", "usage", "--calls", "--since", since]);
        // Nothing on stdout, where a script reads one call per line; the note on stderr.
        assert!(
            out.stdout.is_empty() && out.stderr.contains("no paid calls since "),
            "{since}: {out:?}"
        );
        s.ok(&["kanban", "usage", "--json", "--since", since]);
    }
    for bad in ["3 fortnights", "-3m", "2026-02-30", "soon"] {
        let arg = format!("--since={bad}");
        let out = s.run(&["kanban", "usage", arg.as_str()]);
        assert_eq!(out.code, Some(2), "{bad}: {out:?}");
        assert!(out.stdout.is_empty(), "{bad}: {out:?}");
        assert!(
            out.stderr.contains("1h30m") && out.stderr.contains("2026-11-30T10:00"),
            "the error names the accepted forms: {out:?}"
        );
    }
}

#[test]
fn text_times_are_local_with_their_offset_and_utc_under_the_flag() {
    let s = Scratch::new();
    let id = s.create("a card", &[]);
    let show = |extra: &[&str]| {
        let mut args = vec!["kanban", "show", id.as_str()];
        args.extend_from_slice(extra);
        // Etc/GMT-1 is one hour east of UTC (POSIX signs are inverted).
        let out = s.run_env(&args, &[], &[("TZ", "Etc/GMT-1")]);
        assert!(out.success(), "{out:?}");
        let line = out
            .stdout
            .lines()
            .find(|l| l.contains("created:"))
            .and_then(|l| l.split(" by ").next())
            .map(str::to_owned);
        line.unwrap_or_else(|| panic!("no created line: {out:?}"))
    };
    let local = show(&[]);
    assert!(local.ends_with(" +01:00"), "{local}");
    let utc = show(&["--utc"]);
    assert!(utc.ends_with(" UTC"), "{utc}");
    // JSON keeps unix seconds whatever the zone.
    let json = s.json(&["kanban", "show", id.as_str(), "--json", "--utc"]);
    assert!(json["task"]["created_at"].is_i64(), "{json}");
}

#[test]
fn a_new_board_is_named_once_on_stderr_and_quiet_hides_notes_not_errors() {
    let s = Scratch::new();
    let first = s.ok(&["kanban", "list", "--json"]);
    let db = s.db().display().to_string();
    assert_eq!(
        first.stderr.trim(),
        format!("hermes: created a new board at {db}"),
        "{first:?}"
    );
    assert_eq!(
        s.ok(&["kanban", "list", "--json"]).stderr,
        "",
        "only the first time"
    );

    let quiet = Scratch::new();
    let out = quiet.ok(&["-q", "kanban", "create", "x"]);
    assert_eq!(out.stderr, "", "{out:?}");
    assert!(quiet.db().is_file());
    let missing = quiet.run(&["kanban", "show", "t_00000000", "--quiet"]);
    assert_eq!(missing.code, Some(1), "{missing:?}");
    assert!(
        missing.stderr.contains("error"),
        "errors still show: {missing:?}"
    );
    let both = quiet.run(&["-q", "-v", "kanban", "list"]);
    assert_eq!(both.code, Some(2), "{both:?}");
}

#[test]
fn verbose_names_the_paths_in_use() {
    let s = Scratch::new();
    s.ok(&["kanban", "init"]);
    let out = s.ok(&["kanban", "usage", "-v"]);
    let home = s.hermes_home().display().to_string();
    for line in [
        format!("hermes: home: {home}"),
        format!("hermes: config: {home}/config.yaml"),
        format!("hermes: board: {home}/kanban.db"),
    ] {
        assert!(out.stderr.lines().any(|l| l == line), "{line}: {out:?}");
    }
    assert!(!s.ok(&["kanban", "list"]).stderr.contains("board:"));
}

#[test]
fn home_overrides_hermes_home() {
    let s = Scratch::new();
    let other = s.root().join("elsewhere");
    let other_arg = other.display().to_string();
    let id = s.json(&[
        "--home",
        other_arg.as_str(),
        "kanban",
        "create",
        "here",
        "--json",
    ])["id"]
        .as_str()
        .map(str::to_owned)
        .unwrap();
    assert!(other.join("kanban.db").is_file());
    assert!(!s.db().exists(), "HERMES_HOME is left alone");
    let listed = s
        .ok(&["kanban", "list", "--home", other_arg.as_str()])
        .stdout;
    assert!(listed.contains(&id), "{listed}");
    let empty = s.run(&["--home", "", "kanban", "list"]);
    assert_eq!(empty.code, Some(2), "{empty:?}");
}

#[test]
fn tables_have_no_header_row_when_piped() {
    let s = Scratch::new();
    let id = s.create("a card", &["--triage"]);
    let list = s.ok(&["kanban", "list"]).stdout;
    assert!(list.starts_with(&id), "{list}");
    assert!(!list.contains("STATUS"), "{list}");
}
