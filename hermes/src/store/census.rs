//! A look at a board that changes nothing, not even the files beside it: what `hermes gateway
//! check` reports of the cards the next tick would consider and the board-wide guards.
//!
//! SQLite opened read-only still creates `-wal` and `-shm` beside a WAL board and leaves them
//! behind, so a board with no `-wal` (no process has it open) is read as immutable, and one
//! with a `-wal` through the files already there. Nothing is migrated: a board from another
//! tool, or from before this build's tables, is reported as such, and counted as the gateway's
//! first tick would schedule it.

use std::ffi::OsStr;
use std::fs;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rusqlite::{params, Connection, OpenFlags};

use super::decompose::HUMAN_BLOCK_KINDS;
use super::guards::{calls_since, pause_in_force, HOUR_MS};
use super::schema::pending_statements;
use super::{frame, BoardPart, Pause, SqlResultExt, StoreError};

/// Triage cards by what the next automatic step would do with them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TriageCensus {
    /// Due now: the next tick attempts them (at most `kanban.auto_decompose_per_tick`).
    pub due: u64,
    /// In backoff after a failure, or with no automatic attempt scheduled.
    pub waiting: u64,
    /// An attempt holds a claim on them (a request may be on its way).
    pub in_flight: u64,
    /// Their automatic budget is spent (`kanban unpark`).
    pub parked: u64,
    /// Held for a person (a run started, a human block) or opted out: never attempted
    /// automatically.
    pub held: u64,
}

/// What a board holds that bears on what the gateway would bill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Census {
    /// The schema is this build's: `false` means the gateway adds what is missing when it opens
    /// the board (a board another tool wrote), and there are no guards to read yet.
    pub schema_current: bool,
    pub triage: TriageCensus,
    /// The board-wide pause in force, if any (B5).
    pub pause: Option<Pause>,
    /// Paid calls in the last rolling hour (B6).
    pub calls_last_hour: u64,
}

/// Reads the board at `db` as it is at `now_ms`, without writing anything anywhere.
pub fn census(db: &Path, now_ms: i64) -> Result<Census, StoreError> {
    let conn = open_read_only(db)?;
    let located = |source| StoreError::Sql {
        context: format!("reading {}", db.display()),
        source,
    };
    let tables: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'tasks'",
            [],
            |r| r.get(0),
        )
        .map_err(located)?;
    if tables == 0 {
        // An empty file: SQLite (and the gateway) take it for an empty board.
        return Ok(Census {
            schema_current: false,
            triage: TriageCensus::default(),
            pause: None,
            calls_last_hour: 0,
        });
    }
    let schema_current = pending_statements(&conn)?.is_empty();
    let census = if schema_current {
        // The reader's time frame, in a temporary table kept in memory: nothing is written
        // beside the board, or to it.
        conn.execute_batch("PRAGMA temp_store = MEMORY")
            .sql("keeping temporary tables in memory")?;
        frame::install(&conn)?;
        frame::set(&conn, crate::clock::frame())?;
        Census {
            schema_current,
            triage: triage(&conn, now_ms, SCHEDULED)?,
            pause: pause_in_force(&conn, now_ms)?,
            calls_last_hour: calls_since(&conn, now_ms.saturating_sub(HOUR_MS))?,
        }
    } else {
        Census {
            schema_current,
            triage: triage(&conn, now_ms, UNSCHEDULED)?,
            pause: None,
            calls_last_hour: 0,
        }
    };
    Ok(census)
}

/// A card held for a person (B7): a run started, or a block only a person lifts. `?2` and `?3`
/// are [`HUMAN_BLOCK_KINDS`], as in the due query.
const HELD: &str = "(t.started_at IS NOT NULL OR t.block_kind IN (?2, ?3))";

/// Buckets for a board with decompose state. The `due` bucket is the due query's condition
/// (`decompose::due_rows`), which a test holds it to; a card with no state row yet is scheduled
/// from its creation by the next tick, so it is due unless held.
const SCHEDULED: &str = "SELECT CASE
        WHEN s.task_id IS NULL THEN CASE WHEN {HELD} THEN 'held' ELSE 'due' END
        WHEN s.parked_at_ms IS NOT NULL THEN 'parked'
        WHEN s.opt_out != 0 OR {HELD} THEN 'held'
        WHEN EXISTS (SELECT 1 FROM hermes_decompose_claims c
                     WHERE c.task_id = t.id AND {CLAIM_UNTIL} > ?1) THEN 'in_flight'
        WHEN s.due_at_ms IS NOT NULL AND {DUE} <= ?1 THEN 'due'
        ELSE 'waiting' END AS bucket, COUNT(*)
    FROM tasks t LEFT JOIN hermes_decompose_state s ON s.task_id = t.id
    WHERE t.status = 'triage' GROUP BY bucket";

/// Buckets for a board without this build's tables: the gateway's first tick schedules every
/// triage card from its creation.
const UNSCHEDULED: &str = "SELECT CASE WHEN {HELD} THEN 'held' ELSE 'due' END AS bucket,
        COUNT(*) FROM tasks t WHERE t.status = 'triage' GROUP BY bucket";

fn triage(conn: &Connection, now_ms: i64, buckets: &str) -> Result<TriageCensus, StoreError> {
    // Times in this reader's frame, as the due query reads them (see `store::frame`).
    let sql = buckets
        .replace("{HELD}", HELD)
        .replace(
            "{CLAIM_UNTIL}",
            &frame::seen("c.until_ms", "c.boot", "c.until_boot_ms"),
        )
        .replace(
            "{DUE}",
            &frame::seen("s.due_at_ms", "s.due_boot", "s.due_boot_ms"),
        );
    let mut stmt = conn.prepare(&sql).sql("counting triage cards")?;
    let [first_hold, second_hold] = HUMAN_BLOCK_KINDS;
    let mut rows = stmt
        .query(params![now_ms, first_hold, second_hold])
        .sql("counting triage cards")?;
    let mut census = TriageCensus::default();
    while let Some(row) = rows.next().sql("counting triage cards")? {
        let bucket: String = row.get(0).sql("counting triage cards")?;
        let count = u64::try_from(row.get::<_, i64>(1).sql("counting triage cards")?).unwrap_or(0);
        let slot = match bucket.as_str() {
            "due" => &mut census.due,
            "parked" => &mut census.parked,
            "held" => &mut census.held,
            "in_flight" => &mut census.in_flight,
            _ => &mut census.waiting,
        };
        *slot += count;
    }
    Ok(census)
}

/// The board opened so that nothing is written: immutable when no process has a WAL open on
/// it, else read-only through the WAL files already there.
fn open_read_only(db: &Path) -> Result<Connection, StoreError> {
    let mode = if wal_mode(db)? && !BoardPart::Wal.path(db).exists() {
        "immutable=1"
    } else {
        "mode=ro"
    };
    let uri = format!("file:{}?{mode}", uri_path(db.as_os_str()));
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
        | OpenFlags::SQLITE_OPEN_URI
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(&uri, flags).map_err(|source| StoreError::Sql {
        context: format!("opening {} read-only", db.display()),
        source,
    })?;
    conn.busy_timeout(super::BUSY_TIMEOUT)
        .sql("setting the busy timeout")?;
    Ok(conn)
}

/// Whether the file's header says it is in WAL mode (its read and write versions are 2).
fn wal_mode(db: &Path) -> Result<bool, StoreError> {
    let mut header = [0u8; 20];
    let read = fs::File::open(db).and_then(|mut file| file.read(&mut header));
    match read {
        Ok(n) => Ok(n == header.len() && header[18] == 2 && header[19] == 2),
        Err(source) => Err(StoreError::Io {
            context: "could not read",
            path: db.to_owned(),
            source,
        }),
    }
}

/// A path as the path of a `file:` URI: every byte that is not plainly safe percent-encoded,
/// so `?`, `#`, `%` and bytes that are not UTF-8 reach SQLite as they are.
fn uri_path(path: &OsStr) -> String {
    let mut uri = String::new();
    for &byte in path.as_bytes() {
        if byte.is_ascii_alphanumeric() || b"/-_.~".contains(&byte) {
            uri.push(char::from(byte));
        } else {
            uri.push_str(&format!("%{byte:02X}"));
        }
    }
    uri
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::super::tests::{other_process, triage_card};
    use super::super::{NewTask, Store};
    use super::*;

    fn files_beside(db: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(db.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn the_buckets_follow_the_due_query_and_nothing_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("odd ?#% name.db");
        let now = crate::clock::now_ms();
        let mut store = Store::open(&db).unwrap();
        let due = triage_card(&mut store, "due");
        let parked = triage_card(&mut store, "parked");
        let held = triage_card(&mut store, "held");
        let waiting = triage_card(&mut store, "waiting");
        let opted_out = store
            .create_task(&NewTask {
                title: "opted out".into(),
                triage: true,
                no_auto_decompose: true,
                ..NewTask::default()
            })
            .unwrap()
            .id;
        let raw = other_process(&store);
        raw.execute(
            "UPDATE hermes_decompose_state SET due_at_ms = ?1",
            [now - 1],
        )
        .unwrap();
        raw.execute(
            "UPDATE hermes_decompose_state SET parked_at_ms = ?1 WHERE task_id = ?2",
            params![now, parked],
        )
        .unwrap();
        raw.execute(
            "UPDATE tasks SET block_kind = ?1 WHERE id = ?2",
            params![HUMAN_BLOCK_KINDS[0], held],
        )
        .unwrap();
        raw.execute(
            "UPDATE hermes_decompose_state SET due_at_ms = ?1 WHERE task_id = ?2",
            params![now + 60_000, waiting],
        )
        .unwrap();
        drop(raw);
        let expected_due = store.due_cards(now, usize::MAX, &HashSet::new()).unwrap();
        assert_eq!(expected_due, [due]);
        drop(store);
        // Closed, the board is whole in its one file (the store folded its WAL in).
        for part in [BoardPart::Wal, BoardPart::Shm] {
            let _ = fs::remove_file(part.path(&db));
        }
        let before = files_beside(&db);
        assert_eq!(before.len(), 1, "{before:?}");

        let found = census(&db, now).unwrap();
        assert!(found.schema_current);
        assert_eq!(
            found.triage,
            TriageCensus {
                due: 1,
                waiting: 1,
                in_flight: 0,
                parked: 1,
                held: 2,
            },
            "{opted_out} is opted out"
        );
        assert_eq!((found.pause, found.calls_last_hour), (None, 0));
        assert_eq!(files_beside(&db), before, "the census left files behind");

        // While another process has the board open, through its WAL, still writing nothing.
        let mut open = Store::open(&db).unwrap();
        triage_card(&mut open, "new while open");
        let while_open = files_beside(&db);
        assert!(while_open.len() > before.len(), "{while_open:?}");
        assert_eq!(census(&db, now + 10_000).unwrap().triage.due, 2);
        assert_eq!(files_beside(&db), while_open);
    }

    #[test]
    fn a_board_another_tool_wrote_is_counted_as_the_first_tick_would_schedule_it() {
        let dir = tempfile::tempdir().unwrap();
        let db = super::super::tests::copy_of_upstream_board(dir.path());
        let before = files_beside(&db);
        let found = census(&db, crate::clock::now_ms()).unwrap();
        assert!(!found.schema_current);
        let triage = found.triage;
        assert_eq!(
            triage.waiting + triage.in_flight + triage.parked,
            0,
            "{triage:?}"
        );
        assert_eq!(files_beside(&db), before);
    }

    #[test]
    fn an_empty_file_is_an_empty_board_and_a_missing_one_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("kanban.db");
        fs::write(&db, b"").unwrap();
        assert_eq!(census(&db, 0).unwrap().triage, TriageCensus::default());
        assert!(census(&dir.path().join("missing.db"), 0).is_err());
        assert_eq!(files_beside(&db), ["kanban.db"]);
    }
}
