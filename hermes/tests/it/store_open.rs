//! What closing a board leaves on disk, and what a store does when the files around
//! `kanban.db` are swapped under it: after a close `kanban.db` alone is the whole board (the WAL
//! is emptied into it); a `-wal` or `-shm` replaced or deleted under an open store reopens the
//! board before the next transaction; a replaced `kanban.db` closes the store for good.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hermes::store::{BoardPart, FileChange, NewTask, Store, StoreError, CLOSE_CHECKPOINT_WAIT};
use rusqlite::{Connection, OpenFlags};

fn part(db: &Path, part: BoardPart) -> PathBuf {
    part.path(db)
}

fn wal_len(db: &Path) -> u64 {
    std::fs::metadata(part(db, BoardPart::Wal))
        .map(|m| m.len())
        .unwrap_or(0)
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

/// Cards in a copy of `kanban.db` alone, as a backup of that one file would hold them.
fn cards_in_a_copy_of_the_file_alone(db: &Path) -> i64 {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("kanban.db");
    std::fs::copy(db, &copy).unwrap();
    cards_seen_by_a_fresh_reader(&copy)
}

#[test]
fn after_a_close_kanban_db_alone_is_the_whole_board() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("kanban.db");
    for n in 1..=3 {
        let mut store = Store::open(&db).unwrap();
        store.create_task(&card(&format!("card {n}"))).unwrap();
        assert!(wal_len(&db) > 0, "the commit went through the WAL");
        drop(store);
        assert_eq!(wal_len(&db), 0, "the close emptied the WAL into kanban.db");
        assert_eq!(cards_in_a_copy_of_the_file_alone(&db), n);
    }
}

#[test]
fn a_reader_holding_the_wal_delays_the_close_by_a_bounded_wait_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("kanban.db");
    drop(Store::open(&db).unwrap());
    // A reader in the middle of a transaction pins the WAL: nothing past its snapshot can be
    // copied into kanban.db until it ends.
    let reader = Connection::open(&db).unwrap();
    reader.execute_batch("BEGIN").unwrap();
    let _: i64 = reader
        .query_row("SELECT count(*) FROM tasks", [], |r| r.get(0))
        .unwrap();
    let mut store = Store::open(&db).unwrap();
    store.create_task(&card("committed while read")).unwrap();
    let started = Instant::now();
    drop(store);
    let waited = started.elapsed();
    assert!(
        waited < CLOSE_CHECKPOINT_WAIT + Duration::from_millis(500),
        "close waited {waited:?} for the reader"
    );
    assert!(wal_len(&db) > 0, "the commit is still in the WAL");
    reader.execute_batch("COMMIT").unwrap();
    drop(reader);
    assert_eq!(cards_seen_by_a_fresh_reader(&db), 1);
    // The next close folds it in.
    drop(Store::open(&db).unwrap());
    assert_eq!(cards_in_a_copy_of_the_file_alone(&db), 1);
}

/// Replaces the file at `path` with a copy of itself, as a sync or restore tool does.
fn replace_with_a_copy(path: &Path) {
    let copy = path.with_extension("copy");
    std::fs::copy(path, &copy).unwrap();
    std::fs::rename(&copy, path).unwrap();
}

#[test]
fn a_wal_index_replaced_under_a_store_reopens_the_board_before_the_next_write() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("kanban.db");
    let mut store = Store::open(&db).unwrap();
    store.create_task(&card("before")).unwrap();
    replace_with_a_copy(&part(&db, BoardPart::Shm));
    // Another process writes through the index now at the path.
    let mut other = Store::open(&db).unwrap();
    other.create_task(&card("by another process")).unwrap();
    assert!(
        matches!(
            store.list(&Default::default()),
            Err(StoreError::FilesChanged { .. })
        ),
        "a read through the stale index is refused"
    );
    store.create_task(&card("after")).unwrap();
    assert_eq!(
        store.take_file_changes(),
        [FileChange {
            part: BoardPart::Shm,
            deleted: false
        }]
    );
    assert_eq!(store.list(&Default::default()).unwrap().len(), 3);
    drop(other);
    drop(store);
    assert_eq!(cards_in_a_copy_of_the_file_alone(&db), 3);
}

#[test]
fn a_wal_deleted_under_a_long_lived_store_loses_no_commit() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("kanban.db");
    // As the gateway's: every commit is also copied into kanban.db at once.
    let mut store = Store::open(&db).unwrap();
    store.checkpoint_every_commit().unwrap();
    store.create_task(&card("one")).unwrap();
    std::fs::remove_file(part(&db, BoardPart::Wal)).unwrap();
    store.create_task(&card("two")).unwrap();
    assert_eq!(
        store.take_file_changes(),
        [FileChange {
            part: BoardPart::Wal,
            deleted: true
        }]
    );
    drop(store);
    assert_eq!(cards_in_a_copy_of_the_file_alone(&db), 2);
}

#[test]
fn a_replaced_board_file_closes_the_store_for_good() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("kanban.db");
    let mut store = Store::open(&db).unwrap();
    store.create_task(&card("on the old file")).unwrap();
    replace_with_a_copy(&db);
    for _ in 0..2 {
        let refused = store.create_task(&card("never written")).unwrap_err();
        assert!(
            refused.to_string().starts_with(
                "kanban.db was replaced by another file while this process had the board"
            ),
            "{refused}"
        );
    }
    drop(store);
    assert_eq!(cards_seen_by_a_fresh_reader(&db), 1);
}
