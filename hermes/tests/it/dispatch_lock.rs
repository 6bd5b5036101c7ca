//! The gateway's singleton lock as another process sees it: the file names its holder, and a
//! file left behind by a process that is gone blocks nobody (only a live flock does).

use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::Command;

use hermes::dispatch::{LockError, SingletonLock};

fn board(dir: &Path) -> PathBuf {
    let db = dir.join("kanban.db");
    fs::write(&db, b"").unwrap();
    db
}

/// The lock file's path for `db`, learnt by taking the lock once and letting it go.
fn lock_path(lock_dir: &Path, db: &Path) -> PathBuf {
    SingletonLock::acquire(lock_dir, db)
        .unwrap()
        .path()
        .to_owned()
}

/// The pid of a process that has already exited and been reaped.
fn dead_pid() -> u32 {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

#[test]
fn the_lock_file_names_the_holder() {
    let dir = tempfile::tempdir().unwrap();
    let db = board(dir.path());
    let lock = SingletonLock::acquire(&dir.path().join("locks"), &db).unwrap();
    assert!(lock.path().starts_with(dir.path().join("locks")));
    let text = fs::read_to_string(lock.path()).unwrap();
    assert_eq!(text, format!("{}\n", std::process::id()));
}

#[test]
fn a_stale_lock_file_from_a_dead_process_does_not_block() {
    let dir = tempfile::tempdir().unwrap();
    let db = board(dir.path());
    let locks = dir.path().join("locks");
    let path = lock_path(&locks, &db);
    fs::remove_file(&path).unwrap();

    // What a gateway killed mid-run leaves behind: the file with its pid, and no flock.
    let dead = dead_pid();
    fs::write(&path, format!("{dead}\n")).unwrap();
    let lock = SingletonLock::acquire(&locks, &db).unwrap();
    assert_eq!(lock.path(), path);
    assert_eq!(
        fs::read_to_string(&path).unwrap(),
        format!("{}\n", std::process::id()),
        "the new holder replaces the dead one's pid"
    );

    // A longer stale pid must not leave trailing digits behind either.
    drop(lock);
    fs::write(&path, "4194304123\n").unwrap();
    let _lock = SingletonLock::acquire(&locks, &db).unwrap();
    assert_eq!(
        fs::read_to_string(&path).unwrap(),
        format!("{}\n", std::process::id())
    );
}

#[test]
fn a_live_holder_that_left_no_pid_is_still_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = board(dir.path());
    let locks = dir.path().join("locks");
    let path = lock_path(&locks, &db);
    fs::write(&path, "not a pid").unwrap();

    // Another holder (a separate open of the file, as another process would have).
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    file.try_lock().unwrap();
    let held = file;

    let err = SingletonLock::acquire(&locks, &db).unwrap_err();
    match &err {
        LockError::Held { holder, lock, .. } => {
            assert_eq!(*holder, None, "an unreadable pid is reported as unknown");
            assert_eq!(lock, &path);
        }
        other => panic!("expected Held, got {other:?}"),
    }
    let message = err.to_string();
    assert!(message.contains("already dispatching"), "{message}");
    assert!(!message.contains("(pid"), "{message}");
    assert_eq!(
        fs::read_to_string(&path).unwrap(),
        "not a pid",
        "a refused gateway writes nothing"
    );

    drop(held);
    SingletonLock::acquire(&locks, &db).unwrap();
}
