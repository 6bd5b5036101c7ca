//! What closing a board leaves on disk: the WAL stays (so a CLI call pays one `fsync`, not five),
//! every commit in it is readable by the next process, and it is emptied into `kanban.db` once it
//! has grown past `WAL_CHECKPOINT_PAGES`.

use std::path::{Path, PathBuf};

use hermes::store::{NewTask, Store, WAL_CHECKPOINT_PAGES};
use rusqlite::{Connection, OpenFlags};

fn wal(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push("-wal");
    PathBuf::from(name)
}

fn wal_len(db: &Path) -> u64 {
    std::fs::metadata(wal(db)).map(|m| m.len()).unwrap_or(0)
}

fn card(title: &str) -> NewTask {
    NewTask {
        title: title.to_owned(),
        triage: true,
        ..NewTask::default()
    }
}

/// Cards as a reader that has never seen this board counts them.
fn cards_seen_by_a_fresh_reader(db: &Path) -> i64 {
    let conn = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    conn.query_row("SELECT count(*) FROM tasks", [], |r| r.get(0))
        .unwrap()
}

#[test]
fn closing_a_board_leaves_the_wal_and_loses_no_commit() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("kanban.db");
    drop(Store::open(&db).unwrap());
    let mut store = Store::open(&db).unwrap();
    store.create_task(&card("one")).unwrap();
    drop(store);
    assert!(wal(&db).exists(), "the WAL is kept on close");
    assert!(wal_len(&db) > 0, "the commit is in the WAL");
    assert_eq!(cards_seen_by_a_fresh_reader(&db), 1);

    // A second process appends to the WAL it finds instead of starting over.
    let before = wal_len(&db);
    let mut store = Store::open(&db).unwrap();
    store.create_task(&card("two")).unwrap();
    drop(store);
    assert!(wal_len(&db) > before, "{} <= {before}", wal_len(&db));
    assert_eq!(cards_seen_by_a_fresh_reader(&db), 2);
}

#[test]
fn a_wal_past_the_threshold_is_emptied_into_the_board_on_close() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("kanban.db");
    let threshold = WAL_CHECKPOINT_PAGES * (4096 + 24);
    let mut created = 0;
    let mut largest = 0;
    // Each call in its own store, as the CLI does; stop at the first close that empties it.
    loop {
        let mut store = Store::open(&db).unwrap();
        store
            .create_task(&card(&format!("card {created}")))
            .unwrap();
        created += 1;
        let open_len = wal_len(&db);
        drop(store);
        largest = largest.max(open_len);
        if wal_len(&db) == 0 {
            assert!(
                open_len > threshold,
                "emptied at {open_len} bytes, below the {threshold}-byte threshold"
            );
            break;
        }
        assert!(
            open_len <= threshold,
            "a {open_len}-byte WAL past the {threshold}-byte threshold was left on close"
        );
        assert!(created < 1000, "the WAL was never emptied");
    }
    assert!(largest > threshold);
    assert_eq!(cards_seen_by_a_fresh_reader(&db), created);
    // The board file itself now holds every card: without its WAL it still reads them all.
    std::fs::remove_file(wal(&db)).unwrap();
    let _ = std::fs::remove_file(dir.path().join("kanban.db-shm"));
    assert_eq!(cards_seen_by_a_fresh_reader(&db), created);
}

#[test]
fn a_busy_board_does_not_make_close_wait() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("kanban.db");
    let threshold = WAL_CHECKPOINT_PAGES * (4096 + 24);
    // A reader in the middle of a transaction (as a gateway's tick may be) pins the WAL.
    drop(Store::open(&db).unwrap());
    let reader = Connection::open(&db).unwrap();
    reader.execute_batch("BEGIN").unwrap();
    let _: i64 = reader
        .query_row("SELECT count(*) FROM tasks", [], |r| r.get(0))
        .unwrap();
    let mut store = Store::open(&db).unwrap();
    while wal_len(&db) <= threshold {
        store.create_task(&card("filler")).unwrap();
    }
    let started = std::time::Instant::now();
    drop(store);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(1),
        "close waited {:?} for the reader",
        started.elapsed()
    );
    reader.execute_batch("COMMIT").unwrap();
}
