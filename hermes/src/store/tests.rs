use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::Connection;
use serde_json::json;

use super::board::{
    add_event, add_link, insert_task_row, now_ms, now_secs, promote_ready, would_cycle, TaskRow,
};
use super::*;

/// A fresh board in a temporary directory.
pub(super) fn scratch() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("home/kanban.db")).unwrap();
    (dir, store)
}

/// A card with nothing but its title.
pub(super) fn card(title: &str) -> NewTask {
    NewTask {
        title: title.into(),
        ..NewTask::default()
    }
}

fn child_of(title: &str, parent: &str) -> NewTask {
    NewTask {
        title: title.into(),
        parents: vec![parent.into()],
        ..NewTask::default()
    }
}

/// The ids a listing returns, in its order.
fn listed(store: &Store, filter: &ListFilter) -> Vec<String> {
    store
        .list(filter)
        .unwrap()
        .into_iter()
        .map(|t| t.id)
        .collect()
}

fn count(conn: &Connection, sql: &str) -> i64 {
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

/// A second connection to the board file: another process, as far as SQLite is concerned.
pub(super) fn other_process(store: &Store) -> Connection {
    let conn = Connection::open(store.path()).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    conn
}

/// A card that waits for the decomposer.
pub(super) fn triage_card(store: &mut Store, title: &str) -> String {
    store
        .create_task(&NewTask {
            title: title.into(),
            triage: true,
            ..NewTask::default()
        })
        .unwrap()
        .id
}

/// Opens the ledger row of a gateway attempt's first try, unguarded.
pub(super) fn ledger_of_attempt(
    store: &mut Store,
    task_id: &str,
    attempt: u32,
    started_at_ms: i64,
) -> i64 {
    store
        .ledger_open(&LedgerOpen {
            fence: None,
            model: None,
            task_id: task_id.into(),
            origin: Origin::Gateway,
            attempt,
            try_no: 1,
            started_at_ms,
            guards: None,
        })
        .unwrap()
        .unwrap()
}

/// The kinds of a card's events, oldest first.
pub(super) fn kinds(store: &Store, id: &str) -> Vec<String> {
    store
        .events_of(id)
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect()
}

/// A board written by upstream hermes-agent 0.19.0's own CLI (its README lists every row),
/// kept with the tests so they need neither upstream nor anything outside the repository.
pub(crate) fn shared_board_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/upstream-0.19.0-board")
}

pub(super) fn copy_of_upstream_board(dir: &Path) -> PathBuf {
    let src = shared_board_dir();
    for name in ["kanban.db", "kanban.db-wal", "kanban.db-shm"] {
        if src.join(name).exists() {
            std::fs::copy(src.join(name), dir.join(name)).unwrap();
        }
    }
    // The shared copy is read-only; our copy must be writable like a real board.
    for name in ["kanban.db", "kanban.db-wal", "kanban.db-shm"] {
        let p = dir.join(name);
        if p.exists() {
            let mut perms = std::fs::metadata(&p).unwrap().permissions();
            #[allow(clippy::permissions_set_readonly_false)]
            perms.set_readonly(false);
            std::fs::set_permissions(&p, perms).unwrap();
        }
    }
    dir.join("kanban.db")
}

#[test]
fn a_fresh_board_is_created_with_its_directory_in_wal_mode() {
    let (dir, store) = scratch();
    assert!(dir.path().join("home/kanban.db").is_file());
    let mode: String = store
        .conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let version: i64 = store
        .conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 0);
    for table in [
        "tasks",
        "task_links",
        "task_comments",
        "task_events",
        "task_runs",
        "task_attachments",
        "kanban_notify_subs",
        "hermes_decompose_state",
        "hermes_aux_ledger",
        "hermes_board_state",
    ] {
        let n = count(
            &store.conn,
            &format!("SELECT count(*) FROM sqlite_master WHERE type='table' AND name='{table}'"),
        );
        assert_eq!(n, 1, "{table}");
    }
    for index in schema::INDEXES {
        let n = count(
            &store.conn,
            &format!(
                "SELECT count(*) FROM sqlite_master WHERE type='index' AND name='{}'",
                index.name
            ),
        );
        assert_eq!(n, 1, "{}", index.name);
    }
    // Reopening a current board changes nothing.
    drop(store);
    let again = Store::open(dir.path().join("home/kanban.db")).unwrap();
    assert!(schema::pending_statements(&again.conn).unwrap().is_empty());
}

#[test]
fn the_in_flight_index_keeps_its_condition_and_serves_bound_outcomes() {
    let (_dir, store) = scratch();
    let sql: String = store
        .conn
        .query_row(
            "SELECT sql FROM sqlite_master WHERE name = 'hermes_idx_ledger_in_flight'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    // The bytes boards already hold (and the schema fingerprint is taken over).
    assert_eq!(
        sql,
        "CREATE INDEX hermes_idx_ledger_in_flight ON hermes_aux_ledger(task_id, attempt) \
         WHERE outcome = 'in_flight'"
    );
    // The condition is met by a bound value as by a literal: recovery's look for rows left in
    // flight still reads the small index, not the whole ledger.
    let plan: Vec<String> = store
        .conn
        .prepare("EXPLAIN QUERY PLAN SELECT COUNT(*) FROM hermes_aux_ledger WHERE outcome = ?1")
        .unwrap()
        .query_map([crate::core::LedgerOutcome::InFlight.as_str()], |r| {
            r.get::<_, String>(3)
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(
        plan.iter()
            .any(|step| step.contains("hermes_idx_ledger_in_flight")),
        "{plan:?}"
    );
}

#[test]
fn the_fresh_schema_matches_upstreams_columns_exactly() {
    let (_dir, store) = scratch();
    let upstream = Connection::open_with_flags(
        shared_board_dir().join("kanban.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    let shape = |c: &Connection, table: &str| -> Vec<(String, String, i64, Option<String>, i64)> {
        let mut stmt = c
            .prepare("SELECT name, type, \"notnull\", dflt_value, pk FROM pragma_table_info(?1)")
            .unwrap();
        stmt.query_map([table], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
    };
    for table in [
        "tasks",
        "task_links",
        "task_comments",
        "task_events",
        "task_runs",
        "task_attachments",
        "kanban_notify_subs",
    ] {
        let theirs = shape(&upstream, table);
        assert!(!theirs.is_empty(), "{table}");
        assert_eq!(shape(&store.conn, table), theirs, "{table}");
    }
}

#[test]
fn create_get_and_list() {
    let (_dir, mut store) = scratch();
    let a = store
        .create_task(&NewTask {
            title: "first".into(),
            body: Some("the body".into()),
            assignee: Some("  Alice ".into()),
            priority: 5,
            tenant: Some("acme".into()),
            ..NewTask::default()
        })
        .unwrap();
    assert!(a.id.starts_with("t_") && a.id.len() == 10, "{}", a.id);
    assert!(a.id[2..]
        .chars()
        .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    assert_eq!(a.status, Status::Ready);
    assert_eq!(a.assignee.as_deref(), Some("alice"));
    assert_eq!(a.created_by.as_deref(), Some("user"));
    assert_eq!(a.tenant.as_deref(), Some("acme"));
    assert_eq!(a.priority, 5);
    assert_eq!(a.workspace_kind, "scratch");
    assert!(a.decompose.is_none());
    assert!((a.created_at - now_secs()).abs() < 5);
    let b = store
        .create_task(&NewTask {
            created_by: Some("bot".into()),
            ..card("second")
        })
        .unwrap();
    assert_eq!(b.created_by.as_deref(), Some("bot"));

    assert_eq!(store.get(&a.id).unwrap(), a);
    assert_eq!(store.task("t_00000000").unwrap(), None);
    assert!(
        matches!(store.get("t_00000000"), Err(StoreError::NoSuchTask(id)) if id == "t_00000000")
    );

    let all = listed(&store, &ListFilter::default());
    assert_eq!(all, vec![a.id.clone(), b.id.clone()]);
    let alice = listed(
        &store,
        &ListFilter {
            assignee: Some("ALICE".into()),
            ..ListFilter::default()
        },
    );
    assert_eq!(alice.len(), 1);
    let triage = listed(
        &store,
        &ListFilter {
            status: Some(Status::Triage),
            ..ListFilter::default()
        },
    );
    assert!(triage.is_empty());
}

#[test]
fn bad_input_is_refused_without_writing() {
    let (_dir, mut store) = scratch();
    assert!(matches!(
        store.create_task(&card("   ")),
        Err(StoreError::Invalid(_))
    ));
    assert!(matches!(
        store.create_task(&NewTask {
            assignee: Some(" ".into()),
            ..card("x")
        }),
        Err(StoreError::Invalid(_))
    ));
    assert!(
        matches!(store.create_task(&child_of("orphan", "t_deadbeef")), Err(StoreError::NoSuchTask(id)) if id == "t_deadbeef")
    );
    assert_eq!(count(&store.conn, "SELECT count(*) FROM tasks"), 0);
    assert_eq!(count(&store.conn, "SELECT count(*) FROM task_events"), 0);
    assert_eq!(count(&store.conn, "SELECT count(*) FROM task_links"), 0);
}

#[test]
fn titles_round_trip_exactly() {
    let (_dir, mut store) = scratch();
    for title in [
        "it's \"quoted\"",
        "two\nlines\n",
        "🚀 ünïcödé",
        "'); DROP TABLE tasks; --",
        "  padded  ",
        "%_\\",
    ] {
        let t = store.create_task(&card(title)).unwrap();
        assert_eq!(store.get(&t.id).unwrap().title, title);
    }
    assert_eq!(count(&store.conn, "SELECT count(*) FROM tasks"), 6);
}

#[test]
fn status_follows_parents_and_triage() {
    let (_dir, mut store) = scratch();
    let open = store.create_task(&card("open parent")).unwrap();
    let waits = store.create_task(&child_of("waits", &open.id)).unwrap();
    assert_eq!(waits.status, Status::Todo);
    assert_eq!(store.parents_of(&waits.id).unwrap(), vec![open.id.clone()]);
    assert_eq!(store.children_of(&open.id).unwrap(), vec![waits.id.clone()]);

    let done = store.create_task(&card("done parent")).unwrap();
    store
        .conn
        .execute("UPDATE tasks SET status = 'done' WHERE id = ?1", [&done.id])
        .unwrap();
    assert_eq!(
        store
            .create_task(&child_of("free", &done.id))
            .unwrap()
            .status,
        Status::Ready
    );

    let gone = store.create_task(&card("archived parent")).unwrap();
    store.archive(std::slice::from_ref(&gone.id)).unwrap();
    assert_eq!(
        store
            .create_task(&child_of("also free", &gone.id))
            .unwrap()
            .status,
        Status::Ready
    );

    let triage = store
        .create_task(&NewTask {
            triage: true,
            ..child_of("idea", &open.id)
        })
        .unwrap();
    assert_eq!(triage.status, Status::Triage);
    assert_eq!(store.parents_of(&triage.id).unwrap(), vec![open.id.clone()]);
}

#[test]
fn created_event_has_upstreams_payload_and_comes_with_the_row() {
    let (_dir, mut store) = scratch();
    let p = store.create_task(&card("p")).unwrap();
    let c = store
        .create_task(&NewTask {
            assignee: Some("default".into()),
            parents: vec![p.id.clone(), p.id.clone()],
            ..card("c")
        })
        .unwrap();
    let events = store.events_of(&c.id).unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].kind, "created");
    assert_eq!(events[0].run_id, None);
    assert_eq!(
        events[0].payload,
        Some(
            json!({"assignee": "default", "status": "todo", "parents": [p.id], "tenant": null,
                    "branch_name": null, "skills": null, "goal_mode": null})
        )
    );
    let raw: String = store
        .conn
        .query_row(
            "SELECT payload FROM task_events WHERE task_id = ?1",
            [&c.id],
            |r| r.get(0),
        )
        .unwrap();
    assert!(
        raw.starts_with("{\"assignee\": \"default\", \"status\": \"todo\", \"parents\": ["),
        "{raw}"
    );
}

#[test]
fn triage_cards_get_a_due_decompose_row_and_opt_outs_do_not() {
    let (_dir, mut store) = scratch();
    let before = now_ms();
    let due = store
        .create_task(&NewTask {
            triage: true,
            ..card("split me")
        })
        .unwrap();
    let state = due.decompose.clone().unwrap();
    assert_eq!(state.attempts, 0);
    assert!(!state.opt_out);
    let due_at = state.due_at_ms.unwrap();
    assert!(due_at >= before && due_at <= now_ms(), "{due_at}");
    assert_eq!(due_at.div_euclid(1000), due.created_at);

    let held = store
        .create_task(&NewTask {
            triage: true,
            no_auto_decompose: true,
            ..card("hands off")
        })
        .unwrap();
    let state = held.decompose.unwrap();
    assert!(state.opt_out);
    assert_eq!(state.due_at_ms, None);

    let plain = store.create_task(&card("not triage")).unwrap();
    assert!(plain.decompose.is_none());
}

#[test]
fn link_rules() {
    let (_dir, mut store) = scratch();
    let a = store.create_task(&card("a")).unwrap();
    let b = store.create_task(&card("b")).unwrap();
    let c = store.create_task(&card("c")).unwrap();
    assert_eq!(b.status, Status::Ready);

    assert!(store.link(&a.id, &b.id).unwrap());
    assert_eq!(
        store.get(&b.id).unwrap().status,
        Status::Todo,
        "a ready child of an open parent waits"
    );
    assert_eq!(kinds(&store, &b.id), ["created", "linked"]);
    assert_eq!(
        store.events_of(&b.id).unwrap()[1].payload,
        Some(json!({"parent": a.id, "child": b.id}))
    );
    assert!(
        !store.link(&a.id, &b.id).unwrap(),
        "an existing link is not written twice"
    );
    assert_eq!(kinds(&store, &b.id), ["created", "linked"]);

    store.link(&b.id, &c.id).unwrap();
    assert!(matches!(
        store.link(&c.id, &a.id),
        Err(StoreError::Cycle { .. })
    ));
    let self_link = store.link(&a.id, &a.id).unwrap_err();
    assert!(matches!(self_link, StoreError::Cycle { .. }));
    assert!(self_link.to_string().contains("cannot depend on itself"));
    assert!(
        matches!(store.link(&a.id, "t_ffffffff"), Err(StoreError::NoSuchTask(id)) if id == "t_ffffffff")
    );
    assert!(
        matches!(store.link("t_eeeeeeee", &a.id), Err(StoreError::NoSuchTask(id)) if id == "t_eeeeeeee")
    );
    assert_eq!(count(&store.conn, "SELECT count(*) FROM task_links"), 2);

    // A done parent does not hold its child back.
    let done = store.create_task(&card("done")).unwrap();
    let free = store.create_task(&card("free")).unwrap();
    store
        .conn
        .execute("UPDATE tasks SET status = 'done' WHERE id = ?1", [&done.id])
        .unwrap();
    store.link(&done.id, &free.id).unwrap();
    assert_eq!(store.get(&free.id).unwrap().status, Status::Ready);
}

#[test]
fn archive_is_all_or_nothing_and_promotes_freed_children() {
    let (_dir, mut store) = scratch();
    let parent = store.create_task(&card("parent")).unwrap();
    let child = store.create_task(&child_of("child", &parent.id)).unwrap();
    let other = store.create_task(&card("other")).unwrap();

    let err = store
        .archive(&[parent.id.clone(), "t_12345678".into()])
        .unwrap_err();
    assert!(matches!(err, StoreError::NoSuchTask(ref id) if id == "t_12345678"));
    assert_eq!(store.get(&parent.id).unwrap().status, Status::Ready);
    assert_eq!(kinds(&store, &parent.id), ["created"]);

    let report = store.archive(std::slice::from_ref(&parent.id)).unwrap();
    assert_eq!(report.archived, vec![parent.id.clone()]);
    assert_eq!(report.promoted, vec![child.id.clone()]);
    assert_eq!(store.get(&parent.id).unwrap().status, Status::Archived);
    assert_eq!(kinds(&store, &parent.id), ["created", "archived"]);
    assert_eq!(store.get(&child.id).unwrap().status, Status::Ready);
    assert_eq!(kinds(&store, &child.id), ["created", "promoted"]);

    let again = store
        .archive(&[parent.id.clone(), other.id.clone()])
        .unwrap();
    assert_eq!(again.archived, vec![other.id.clone()]);
    assert_eq!(again.already_archived, vec![parent.id.clone()]);
    assert_eq!(kinds(&store, &parent.id), ["created", "archived"]);

    let visible = listed(&store, &ListFilter::default());
    assert_eq!(visible, vec![child.id.clone()]);
    let everything = listed(
        &store,
        &ListFilter {
            include_archived: true,
            ..ListFilter::default()
        },
    );
    assert_eq!(everything.len(), 3);
    let archived_only = listed(
        &store,
        &ListFilter {
            status: Some(Status::Archived),
            ..ListFilter::default()
        },
    );
    assert_eq!(archived_only.len(), 2);
}

#[test]
fn archiving_a_triage_card_retires_its_decompose_schedule() {
    let (_dir, mut store) = scratch();
    let t = store
        .create_task(&NewTask {
            triage: true,
            ..card("idea")
        })
        .unwrap();
    store.archive(std::slice::from_ref(&t.id)).unwrap();
    assert_eq!(store.get(&t.id).unwrap().decompose.unwrap().due_at_ms, None);
}

#[test]
fn transaction_helpers_compose_in_one_transaction() {
    let (_dir, mut store) = scratch();
    let root = store
        .create_task(&NewTask {
            triage: true,
            ..card("root")
        })
        .unwrap();
    let root_id = root.id.clone();
    // A failing closure rolls back everything the helpers wrote.
    let failed: Result<(), StoreError> = store.write(|tx| {
        let child = insert_task_row(tx, &row("child", Status::Todo))?;
        add_link(tx, &child, &root_id)?;
        add_event(
            tx,
            &child,
            "created",
            Some(&json!({"from_decompose_of": root_id})),
        )?;
        Err(StoreError::Invalid("changed my mind".into()))
    });
    assert!(failed.is_err());
    assert_eq!(count(&store.conn, "SELECT count(*) FROM tasks"), 1);
    assert_eq!(count(&store.conn, "SELECT count(*) FROM task_links"), 0);

    let promoted = store
        .write(|tx| {
            let first = insert_task_row(tx, &row("first", Status::Todo))?;
            let second = insert_task_row(tx, &row("second", Status::Todo))?;
            add_link(tx, &first, &second)?;
            add_link(tx, &first, &root_id)?;
            add_link(tx, &second, &root_id)?;
            assert!(would_cycle(tx, &root_id, &first)?);
            assert!(matches!(
                add_link(tx, &root_id, &first),
                Err(StoreError::Cycle { .. })
            ));
            let promoted = promote_ready(tx, &[first.clone(), second.clone(), root_id.clone()])?;
            Ok((first, promoted))
        })
        .unwrap();
    assert_eq!(
        promoted.1,
        vec![promoted.0.clone()],
        "only the parent-free child is promoted"
    );
    assert_eq!(kinds(&store, &promoted.0), ["promoted"]);
    assert_eq!(store.get(&root_id).unwrap().status, Status::Triage);
}

fn row(title: &str, status: Status) -> TaskRow<'_> {
    TaskRow {
        title,
        body: None,
        assignee: Some("default"),
        status,
        priority: 0,
        created_by: Some("default"),
        tenant: None,
        created_at: now_secs(),
    }
}

#[test]
fn the_upstream_board_opens_and_reads_completely() {
    let dir = tempfile::tempdir().unwrap();
    let db = copy_of_upstream_board(dir.path());
    let store = Store::open(&db).unwrap();
    let all = store
        .list(&ListFilter {
            include_archived: true,
            ..ListFilter::default()
        })
        .unwrap();
    assert_eq!(all.len(), 8);
    assert_eq!(store.list(&ListFilter::default()).unwrap().len(), 7);
    assert_eq!(count(&store.conn, "SELECT count(*) FROM task_links"), 5);
    assert_eq!(count(&store.conn, "SELECT count(*) FROM task_events"), 13);

    let root = store.get("t_00a72e45").unwrap();
    assert_eq!(root.title, "ship the feature");
    assert_eq!(root.status, Status::Todo);
    assert_eq!(root.body.as_deref(), Some("an idea with a body"));
    assert_eq!(
        store.parents_of("t_00a72e45").unwrap(),
        ["t_72fa6ca0", "t_e7cb60d4", "t_fbf79d3c"]
    );
    assert_eq!(kinds(&store, "t_00a72e45"), ["created", "decomposed"]);
    assert_eq!(
        store.events_of("t_00a72e45").unwrap()[1].payload,
        Some(
            json!({"child_ids": ["t_72fa6ca0", "t_e7cb60d4", "t_fbf79d3c"], "root_assignee": "default"})
        )
    );
    assert_eq!(
        store.get("t_4309fb9d").unwrap().title,
        "emoji 🚀 \"quotes\" and ünïcödé"
    );
    assert_eq!(store.get("t_0dd512ee").unwrap().status, Status::Archived);
    assert_eq!(store.events_of("t_72fa6ca0").unwrap()[1].payload, None);
    let total_events: usize = all
        .iter()
        .map(|t| store.events_of(&t.id).unwrap().len())
        .sum();
    assert_eq!(total_events, 13);
}

#[test]
fn migration_is_additive_on_an_older_board() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("kanban.db");
    {
        let old = Connection::open(&db).unwrap();
        old.execute_batch(
            "CREATE TABLE tasks (id TEXT PRIMARY KEY, title TEXT NOT NULL, body TEXT, assignee TEXT,
                 status TEXT NOT NULL, priority INTEGER DEFAULT 0, created_by TEXT,
                 created_at INTEGER NOT NULL, started_at INTEGER, completed_at INTEGER,
                 workspace_kind TEXT NOT NULL DEFAULT 'scratch', workspace_path TEXT,
                 claim_lock TEXT, claim_expires INTEGER, spawn_failures INTEGER);
             CREATE TABLE task_events (id INTEGER PRIMARY KEY AUTOINCREMENT, task_id TEXT NOT NULL,
                 kind TEXT NOT NULL, payload TEXT, created_at INTEGER NOT NULL);
             CREATE TABLE someone_elses (x TEXT);
             INSERT INTO someone_elses VALUES ('keep me');
             INSERT INTO tasks (id, title, status, created_at, spawn_failures) VALUES ('t_0000aaaa', 'old card', 'ready', 100, 2);
             INSERT INTO task_events (task_id, kind, payload, created_at) VALUES ('t_0000aaaa', 'created', NULL, 100);",
        )
        .unwrap();
    }
    let store = Store::open(&db).unwrap();
    let old = store.get("t_0000aaaa").unwrap();
    assert_eq!(old.title, "old card");
    assert_eq!(old.block_kind, None);
    assert_eq!(kinds(&store, "t_0000aaaa"), ["created"]);
    assert_eq!(store.events_of("t_0000aaaa").unwrap()[0].run_id, None);
    // Columns that only the old shape had stay, with their data.
    assert_eq!(
        count(
            &store.conn,
            "SELECT spawn_failures FROM tasks WHERE id = 't_0000aaaa'"
        ),
        2
    );
    assert_eq!(count(&store.conn, "SELECT count(*) FROM someone_elses"), 1);
    assert_eq!(
        count(&store.conn, "SELECT consecutive_failures FROM tasks"),
        0
    );
    assert_eq!(count(&store.conn, "SELECT goal_mode FROM tasks"), 0);
    assert_eq!(
        count(
            &store.conn,
            "SELECT count(*) FROM pragma_table_info('task_events') WHERE name = 'run_id'"
        ),
        1
    );
    assert_eq!(count(&store.conn, "PRAGMA user_version"), 0);
    assert!(schema::pending_statements(&store.conn).unwrap().is_empty());
}

#[test]
fn a_ledger_from_before_models_were_recorded_gains_the_column_and_reads_as_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("kanban.db");
    {
        // A ledger as this gateway wrote it before it had a `model` column.
        let old = Connection::open(&db).unwrap();
        old.execute_batch(
            "CREATE TABLE hermes_aux_ledger (id INTEGER PRIMARY KEY AUTOINCREMENT, task_id TEXT,
                 purpose TEXT NOT NULL, origin TEXT NOT NULL, attempt INTEGER,
                 try INTEGER NOT NULL DEFAULT 1, started_at_ms INTEGER NOT NULL,
                 ended_at_ms INTEGER, outcome TEXT NOT NULL, http_status INTEGER,
                 prompt_tokens INTEGER, completion_tokens INTEGER, detail TEXT);
             INSERT INTO hermes_aux_ledger (task_id, purpose, origin, attempt, try, started_at_ms,
                 ended_at_ms, outcome, http_status, prompt_tokens, completion_tokens)
             VALUES ('t_0000aaaa', 'decompose', 'manual', 1, 1, 1000, 2000, 'ok', 200, 120, 30);",
        )
        .unwrap();
    }
    let mut store = Store::open(&db).unwrap();
    assert_eq!(
        count(
            &store.conn,
            "SELECT count(*) FROM pragma_table_info('hermes_aux_ledger') WHERE name = 'model'"
        ),
        1
    );
    let calls = store.calls(&CallFilter::default()).unwrap();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].model, None);
    assert_eq!(calls[0].prompt_tokens, Some(120));

    // A row opened now records its model beside the old one's unknown.
    let id = store
        .create_task(&NewTask {
            title: "new".into(),
            triage: true,
            ..NewTask::default()
        })
        .unwrap()
        .id;
    store
        .ledger_open(&LedgerOpen {
            task_id: id.clone(),
            origin: Origin::Manual,
            attempt: 1,
            try_no: 1,
            started_at_ms: 3000,
            guards: None,
            fence: None,
            model: Some("gpt-4o-mini".into()),
        })
        .unwrap()
        .unwrap();
    let models: Vec<Option<String>> = store
        .calls(&CallFilter::default())
        .unwrap()
        .into_iter()
        .map(|c| c.model)
        .collect();
    assert_eq!(models, [None, Some("gpt-4o-mini".to_owned())]);
    let usage = store.usage(None, 4000, 10).unwrap();
    let totals: Vec<(Option<&str>, u64)> = usage
        .totals
        .models
        .iter()
        .map(|m| (m.model.as_deref(), m.calls))
        .collect();
    assert_eq!(totals, [(None, 1), (Some("gpt-4o-mini"), 1)]);
    assert_eq!(usage.totals.models[0].prompt_tokens, 120);
    let card = usage.cards.iter().find(|c| c.task_id == id).unwrap();
    assert_eq!(card.models.len(), 1);
    assert_eq!(card.models[0].model.as_deref(), Some("gpt-4o-mini"));
}

#[test]
fn a_missing_key_column_is_a_schema_error_not_a_rewrite() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("kanban.db");
    Connection::open(&db)
        .unwrap()
        .execute_batch("CREATE TABLE tasks (title TEXT)")
        .unwrap();
    let err = Store::open(&db).unwrap_err();
    assert!(matches!(err, StoreError::Schema { .. }), "{err}");
    assert!(err.to_string().contains("tasks has no column id"), "{err}");
}

#[test]
fn a_corrupt_file_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("kanban.db");
    let cases: [Vec<u8>; 3] = [
        b"this is not a database, just some text that happens to be here\n".repeat(50),
        b"SQLi".to_vec(),
        {
            let mut bytes = b"SQLite format 3\0".to_vec();
            bytes.extend(std::iter::repeat_n(0xA5u8, 8192));
            bytes
        },
    ];
    for garbage in cases {
        std::fs::write(&db, &garbage).unwrap();
        let err = Store::open(&db).unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
        let message = err.to_string();
        assert!(
            message.contains("is not a readable SQLite database"),
            "{message}"
        );
        assert!(message.contains("left untouched"), "{message}");
        assert_eq!(std::fs::read(&db).unwrap(), garbage);
    }
}

#[test]
fn an_empty_file_is_a_fresh_board() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("kanban.db");
    std::fs::write(&db, b"").unwrap();
    let mut store = Store::open(&db).unwrap();
    store.create_task(&card("works")).unwrap();
}

#[test]
fn a_locked_board_gives_locked_and_leaves_no_row() {
    let (dir, mut store) = scratch();
    let holder = Connection::open(dir.path().join("home/kanban.db")).unwrap();
    holder.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let started = Instant::now();
    let err = store.create_task(&card("blocked write")).unwrap_err();
    let waited = started.elapsed();
    assert!(matches!(err, StoreError::Locked { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("database is locked by another writer (waited 5 s)"),
        "{err}"
    );
    assert!(
        waited >= Duration::from_millis(4500) && waited < Duration::from_secs(8),
        "{waited:?}"
    );
    holder.execute_batch("COMMIT").unwrap();
    assert_eq!(count(&store.conn, "SELECT count(*) FROM tasks"), 0);
    assert_eq!(count(&store.conn, "SELECT count(*) FROM task_events"), 0);
    // The same store writes fine once the lock is gone.
    store.create_task(&card("after")).unwrap();
}

#[test]
fn status_names_round_trip() {
    for st in Status::ALL {
        assert_eq!(st.as_str().parse::<Status>().unwrap(), st);
    }
    assert!("Ready".parse::<Status>().is_err());
    assert!(Status::Ready.is_open() && !Status::Done.is_open() && !Status::Archived.is_open());
}

#[test]
fn a_row_with_an_unknown_status_is_reported_not_panicked_on() {
    let (_dir, mut store) = scratch();
    let t = store.create_task(&card("odd")).unwrap();
    store
        .conn
        .execute("UPDATE tasks SET status = 'limbo' WHERE id = ?1", [&t.id])
        .unwrap();
    let err = store.get(&t.id).unwrap_err();
    assert!(err.to_string().contains("limbo"), "{err}");
}

#[test]
fn a_board_with_a_second_hard_link_is_refused_before_anything_is_read_or_written() {
    let (dir, mut store) = scratch();
    let first = store.create_task(&card("before the link")).unwrap().id;
    let second_name = dir.path().join("backup-kanban.db");
    std::fs::hard_link(store.path(), &second_name).unwrap();
    let refused = |result: Result<(), StoreError>| {
        matches!(result, Err(StoreError::HardLinked { links: 2, .. }))
    };
    assert!(refused(
        store.create_task(&card("through two names")).map(drop)
    ));
    assert!(refused(store.list(&ListFilter::default()).map(drop)));
    assert!(refused(store.refreshed(|s| s.get(&first).map(drop))));
    // Every other process is refused at its open, through either name.
    assert!(refused(Store::open(&second_name).map(drop)));
    assert!(refused(Store::open(store.path()).map(drop)));
    let message = Store::open(&second_name).err().unwrap().to_string();
    assert!(message.contains("2 hard links") && message.contains("nothing was read or written"));
    // One name again: the board is whole, with nothing written while it had two.
    std::fs::remove_file(&second_name).unwrap();
    let titles: Vec<String> = store
        .list(&ListFilter::default())
        .unwrap()
        .into_iter()
        .map(|t| t.title)
        .collect();
    assert_eq!(titles, ["before the link"]);
}

/// What the check before each transaction costs: one `stat` of each of the board's three files,
/// the link count read from the same `stat` as the identity.
#[test]
fn the_check_before_a_transaction_costs_microseconds() {
    let (_dir, store) = scratch();
    let runs = 2_000u32;
    let started = Instant::now();
    for _ in 0..runs {
        let files = BoardFiles::at(store.path());
        assert_eq!(files.links(), None);
    }
    let each = started.elapsed() / runs;
    // A few microseconds here; the bound only catches a check that grew a file read or a sync.
    assert!(each < Duration::from_millis(1), "{each:?} per check");
}
