//! The board: `kanban.db` (SQLite) behind a small typed API.
//!
//! Every change is one `BEGIN IMMEDIATE` transaction that also writes its events, so a reader
//! never sees a card without its history and a writer that loses the lock leaves nothing behind.
//! The transaction-level helpers in `store::board` are shared with the decompose apply transaction.

pub(crate) mod board;
mod census;
mod claims;
#[cfg(test)]
mod claims_tests;
mod decompose;
#[cfg(test)]
mod decompose_tests;
mod files;
mod frame;
#[cfg(test)]
mod frame_tests;
mod guards;
mod handle;
mod ledger;
mod lenient;
mod pyjson;
mod recovery;
mod runs;
pub(crate) mod schema;
#[cfg(test)]
mod tests;
mod worker;

use std::fmt;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::{Duration, Instant};

use rusqlite::config::DbConfig;
use rusqlite::{Connection, ErrorCode, OpenFlags, Transaction, TransactionBehavior};
use serde_json::Value;

pub use crate::clock::now_ms;
pub use crate::core::{BeginRefusal, Origin};
pub use census::{census, Census, TriageCensus};
pub use claims::{new_lease, Claim, ClaimState, ParkedCard, Recovered};
pub use decompose::{
    ApplyOptions, ApplyResult, AttemptTicket, BeginPolicy, FailureRecord, NothingSentRecord,
    NothingSentRecorded, PauseRecord, SetAside, UnreachableRecord, HUMAN_BLOCK_KINDS,
};
pub use files::{BoardFiles, BoardPart, FileChange, FileId};
pub use guards::{AutoGate, Pause, HOUR_MS};
pub use handle::{BoardError, BoardFile, BoardHandle};
pub use ledger::{
    CardUsage, HalfUsage, Halves, LedgerClose, LedgerOpen, ModelUsage, UsagePause, UsageReport,
    UsageTotals, UsageWindow, WorkerUsage,
};
pub use recovery::{
    AutoDecomposeSwitch, CallFilter, ClearedPause, LedgerCall, ResumeRecord, UnparkRefusal,
    Unparked,
};
pub use runs::{
    ClaimRefusal, Closed, Gone, LiveSpawn, RunClose, RunTicket, SpawnPolicy, MAX_RUNTIME,
};
pub use worker::{
    SpawnUnparkRefusal, SpawnUnparked, UnblockRefusal, Unblocked, WorkerRefusal, WorkerRequestOpen,
    WorkerRun,
};

/// How long a write waits for another writer before giving up with [`StoreError::Locked`].
pub const BUSY_TIMEOUT: Duration = Duration::from_millis(5000);

/// Pause between tries when another process is switching a fresh board's journal mode.
const WAL_SWITCH_RETRY: Duration = Duration::from_millis(20);

/// How long closing a store waits for other processes' transactions so that it can copy the WAL
/// into `kanban.db` (see [`Store::checkpoint`]). Past it the close gives up: every commit is
/// still durable in the WAL, only `kanban.db` alone is not yet the whole board.
pub const CLOSE_CHECKPOINT_WAIT: Duration = Duration::from_millis(1000);

/// Pause between tries of a checkpoint another connection's checkpoint is in the way of.
const CHECKPOINT_RETRY: Duration = Duration::from_millis(5);

/// Errors from the board.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The file exists but is not a SQLite database we can read; it was not modified.
    #[error("kanban.db at {} is not a readable SQLite database ({detail}); it was left untouched", path.display())]
    Corrupt {
        /// The database file.
        path: PathBuf,
        /// What the check found.
        detail: String,
    },
    /// Another process held the write lock for longer than [`BUSY_TIMEOUT`]; nothing was written.
    #[error(
        "kanban.db at {}: database is locked by another writer (waited {} s); nothing was written",
        path.display(),
        BUSY_TIMEOUT.as_secs()
    )]
    Locked {
        /// The database file.
        path: PathBuf,
    },
    /// No card has this id.
    #[error("no such task: {0}")]
    NoSuchTask(String),
    /// The requested dependency would make the graph cyclic (or link a card to itself).
    #[error("{}", cycle_message(parent, child))]
    Cycle {
        /// The card that would be waited for.
        parent: String,
        /// The card that would wait.
        child: String,
    },
    /// The request itself is unusable (empty title, empty assignee, …).
    #[error("{0}")]
    Invalid(String),
    /// The file is a database, but its tables cannot be brought to the shape we need.
    #[error("kanban.db schema: {detail}")]
    Schema {
        /// What is wrong.
        detail: String,
    },
    /// A filesystem operation around the database failed.
    #[error("{context} {}", path.display())]
    Io {
        /// What we were doing.
        context: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The operating system's random source failed while making an id.
    #[error("could not generate a task id")]
    Entropy(#[source] getrandom::Error),
    /// A file of the board was deleted or replaced while this process had it open (a sync or
    /// restore tool, a person): nothing was read or written through the stale connection.
    #[error(
        "{change} while this process had the board at {} open; nothing was read or written \
         through the old file",
        path.display()
    )]
    FilesChanged {
        /// The database file.
        path: PathBuf,
        /// What happened.
        change: FileChange,
    },
    /// `kanban.db` has more than one hard link (see `BoardFiles::links`): nothing was read or
    /// written, by this process or any other hermes process, until one name is left.
    #[error(
        "kanban.db at {} has {links} hard links: SQLite keeps the write-ahead log beside each \
         name, so processes reaching the board through different links neither see each \
         other's writes nor are seen (records lost, a malformed file, cards billed again); \
         nothing was read or written. Keep one link to the file (symlinks to it are fine; a \
         backup tool that hard-links must copy instead)",
        path.display()
    )]
    HardLinked {
        /// The database file.
        path: PathBuf,
        /// Its link count.
        links: u64,
    },
    /// SQLite refused an operation.
    #[error("{context}")]
    Sql {
        /// What we were doing.
        context: String,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
}

fn cycle_message(parent: &str, child: &str) -> String {
    if parent == child {
        format!("a task cannot depend on itself: {parent}")
    } else {
        format!("linking {parent} -> {child} would create a cycle")
    }
}

/// Attaches a description of the operation to a SQLite error.
pub(crate) trait SqlResultExt<T> {
    /// Maps the error to [`StoreError::Sql`] with `context`.
    fn sql(self, context: impl Into<String>) -> Result<T, StoreError>;
}

impl<T> SqlResultExt<T> for Result<T, rusqlite::Error> {
    fn sql(self, context: impl Into<String>) -> Result<T, StoreError> {
        self.map_err(|source| StoreError::Sql {
            context: context.into(),
            source,
        })
    }
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

fn is_not_a_database(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt)
    )
}

/// Turns a lock timeout anywhere below into [`StoreError::Locked`] naming the file.
fn locate(path: &Path, e: StoreError) -> StoreError {
    match e {
        StoreError::Sql { ref source, .. } if is_busy(source) => StoreError::Locked {
            path: path.to_owned(),
        },
        other => other,
    }
}

/// A card's lifecycle state, as upstream names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Status {
    /// Waiting for a specifier / decomposer.
    Triage,
    /// Waiting for its parents.
    Todo,
    /// Parked until a time.
    Scheduled,
    /// Dispatchable.
    Ready,
    /// A worker has it.
    Running,
    /// Needs a person.
    Blocked,
    /// Waiting for review.
    Review,
    /// Finished.
    Done,
    /// Hidden from default listings.
    Archived,
}

impl Status {
    /// Every status, in lifecycle order.
    pub const ALL: [Status; 9] = [
        Status::Triage,
        Status::Todo,
        Status::Scheduled,
        Status::Ready,
        Status::Running,
        Status::Blocked,
        Status::Review,
        Status::Done,
        Status::Archived,
    ];

    /// The name stored in `tasks.status`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Triage => "triage",
            Status::Todo => "todo",
            Status::Scheduled => "scheduled",
            Status::Ready => "ready",
            Status::Running => "running",
            Status::Blocked => "blocked",
            Status::Review => "review",
            Status::Done => "done",
            Status::Archived => "archived",
        }
    }

    /// Whether children still wait for a parent in this state.
    pub fn is_open(self) -> bool {
        !matches!(self, Status::Done | Status::Archived)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A status name that is not one of [`Status::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown status {0:?} (expected one of: triage, todo, scheduled, ready, running, blocked, review, done, archived)")]
pub struct UnknownStatus(pub String);

impl FromStr for Status {
    type Err = UnknownStatus;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Status::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| UnknownStatus(s.to_owned()))
    }
}

/// Our per-card decompose bookkeeping (`hermes_decompose_state`), when the card has a row.
pub use crate::core::DecomposeState;

/// One card, with the columns the CLI shows (upstream's `show --json` set plus `block_kind`).
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    /// `t_` + 8 lowercase hex digits.
    pub id: String,
    /// As the creator typed it.
    pub title: String,
    /// Free text, if any.
    pub body: Option<String>,
    /// Profile name (lowercase), if assigned.
    pub assignee: Option<String>,
    /// Lifecycle state.
    pub status: Status,
    /// Tiebreaker; higher first in upstream's listings.
    pub priority: i64,
    /// Tenant namespace.
    pub tenant: Option<String>,
    /// `scratch`, `worktree` or `dir`.
    pub workspace_kind: String,
    /// Workspace location, when fixed.
    pub workspace_path: Option<String>,
    /// Git branch for worktree workspaces.
    pub branch_name: Option<String>,
    /// Linked project.
    pub project_id: Option<String>,
    /// Who created the card.
    pub created_by: Option<String>,
    /// Unix seconds.
    pub created_at: i64,
    /// Unix seconds of the first run, if any (a card with runs is a human hold).
    pub started_at: Option<i64>,
    /// Unix seconds of completion.
    pub completed_at: Option<i64>,
    /// Result text from completion.
    pub result: Option<String>,
    /// Skills pinned to the card (parsed from the JSON column; unparsable = none).
    pub skills: Vec<String>,
    /// Per-card failure limit.
    pub max_retries: Option<i64>,
    /// Originating session.
    pub session_id: Option<String>,
    /// Workflow routing (forward-compatible columns upstream keeps).
    pub workflow_template_id: Option<String>,
    /// Workflow step.
    pub current_step_key: Option<String>,
    /// Typed block reason (`needs_input`, `capability`, …).
    pub block_kind: Option<String>,
    /// Decompose bookkeeping, if the card has any.
    pub decompose: Option<DecomposeState>,
    /// Spawn bookkeeping, if a worker was ever spawned for the card (or it was set aside).
    pub spawn: Option<crate::core::SpawnState>,
}

/// What `create_task` needs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewTask {
    /// Required; stored exactly as given (must not be blank).
    pub title: String,
    /// Optional body.
    pub body: Option<String>,
    /// Optional assignee; trimmed and lowercased like upstream's profile names.
    pub assignee: Option<String>,
    /// Cards this one waits for.
    pub parents: Vec<String>,
    /// Park the card in `triage` (for a decomposer) instead of `todo`/`ready`.
    pub triage: bool,
    /// Tiebreaker.
    pub priority: i64,
    /// Tenant namespace.
    pub tenant: Option<String>,
    /// Defaults to `user`.
    pub created_by: Option<String>,
    /// Never attempt this card automatically (an explicit `kanban decompose ID` still may).
    pub no_auto_decompose: bool,
}

/// Which cards `list` returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListFilter {
    /// Only this status (asking for `archived` implies `include_archived`).
    pub status: Option<Status>,
    /// Only this assignee (compared after the same normalisation as on create).
    pub assignee: Option<String>,
    /// Include archived cards.
    pub include_archived: bool,
}

/// One `task_events` row.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Row id (events are returned in id order).
    pub id: i64,
    /// The card.
    pub task_id: String,
    /// The run the event belongs to, if any.
    pub run_id: Option<i64>,
    /// `created`, `linked`, `promoted`, `decomposed`, …
    pub kind: String,
    /// Parsed JSON payload; text that is not JSON is kept as a JSON string.
    pub payload: Option<Value>,
    /// Unix seconds.
    pub created_at: i64,
}

/// One `task_comments` row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comment {
    /// Row id.
    pub id: i64,
    /// The card.
    pub task_id: String,
    /// Who wrote it.
    pub author: String,
    /// The text.
    pub body: String,
    /// Unix seconds.
    pub created_at: i64,
}

/// What `archive` did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ArchiveReport {
    /// Cards moved to `archived` now, in request order.
    pub archived: Vec<String>,
    /// Cards that already were archived (left as they were).
    pub already_archived: Vec<String>,
    /// Cards promoted to `ready` because their last open parent went away.
    pub promoted: Vec<String>,
}

/// An open board.
pub struct Store {
    conn: Connection,
    path: PathBuf,
    /// The newest `tasks` rowid already given decompose state (see `sync_decompose_state`).
    synced_rowid: i64,
    /// The board's files as this connection opened them (see `store::files`).
    files: BoardFiles,
    /// Set once `kanban.db` itself is no longer the file this store opened: the store is then
    /// closed for good (rows of another board must never be written with ids from this one).
    detached: Option<FileChange>,
    /// `-wal`/`-shm` changes this store reopened the board for, not yet taken by the caller.
    noticed: Vec<FileChange>,
    /// See [`Store::checkpoint_every_commit`].
    checkpoint_every_commit: bool,
    /// Set while a caller that has just [`refresh`](Store::refresh)ed runs its calls (a
    /// `BoardHandle` call): the files are not looked at again before each of them.
    refreshed: bool,
    /// The reader's time frame as last set on the connection (see `store::frame`); `None`
    /// until it is, and after the connection was reopened.
    frame_set: std::cell::Cell<Option<crate::clock::Frame>>,
    /// A frame to read and write with instead of this process's (tests of other boots).
    frame_override: Option<crate::clock::Frame>,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        // `kanban.db` alone must be the whole board once the process is gone: people copy,
        // sync and restore that one file. Never through a connection whose files were swapped,
        // whose index may describe another log.
        let wal_has_frames =
            fs::metadata(BoardPart::Wal.path(&self.path)).is_ok_and(|meta| meta.len() > 0);
        if wal_has_frames && self.current() {
            let _ = self.checkpoint_here(CLOSE_CHECKPOINT_WAIT);
        }
    }
}

impl Store {
    /// Opens the board at `db_path`, creating the directory and the file when missing.
    ///
    /// An existing file is checked before anything could write to it: its schema must be
    /// readable (which is also SQLite's own check of the header), otherwise
    /// [`StoreError::Corrupt`] is returned and the file is left byte-for-byte as it was. (Damage
    /// deeper in the file surfaces as a read error when it is reached; a full integrity check
    /// would cost every command time in proportion to the board's size.) The schema is then
    /// brought up to date additively (see `store::schema`).
    pub fn open(db_path: impl AsRef<Path>) -> Result<Store, StoreError> {
        Self::open_with(db_path.as_ref(), true)
    }

    /// Opens the board at `db_path` only if there is one: a board moved or deleted from under a
    /// running gateway must not be replaced by an empty one at the old path (its cards would
    /// seem gone, and the gateway would dispatch an empty board).
    pub fn open_existing(db_path: impl AsRef<Path>) -> Result<Store, StoreError> {
        Self::open_with(db_path.as_ref(), false)
    }

    fn open_with(path: &Path, create: bool) -> Result<Store, StoreError> {
        let path = path.to_owned();
        let existed = match fs::metadata(&path) {
            Ok(meta) if meta.is_dir() => {
                return Err(StoreError::Corrupt {
                    path,
                    detail: "it is a directory".into(),
                })
            }
            Ok(meta) if meta.nlink() > 1 => {
                return Err(StoreError::HardLinked {
                    path,
                    links: meta.nlink(),
                })
            }
            // SQLite treats an empty file as an empty database, as upstream does.
            Ok(_) => true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !create => {
                return Err(StoreError::Io {
                    context: "no board (moved or deleted?) at",
                    path,
                    source: e,
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    fs::create_dir_all(dir).map_err(|source| StoreError::Io {
                        context: "could not create the board directory",
                        path: dir.to_owned(),
                        source,
                    })?;
                }
                false
            }
            Err(source) => {
                return Err(StoreError::Io {
                    context: "could not inspect",
                    path,
                    source,
                });
            }
        };

        // SQLite may be built not to sync the directory when it creates the WAL (see
        // `.cargo/config.toml`), so whenever this open may create it (or the board itself), the
        // directory is synced here: the file's entry must survive a power cut as its frames do.
        let wal_existed = existed && fs::metadata(BoardPart::Wal.path(&path)).is_ok();

        let conn = connect(&path, !existed)?;
        let mut store = Store {
            conn,
            path,
            synced_rowid: 0,
            files: BoardFiles::default(),
            detached: None,
            noticed: Vec::new(),
            checkpoint_every_commit: false,
            refreshed: false,
            frame_set: std::cell::Cell::new(None),
            frame_override: None,
        };
        if existed {
            store.probe()?;
        }
        store.configure()?;
        store.migrate()?;
        if !wal_existed {
            store.sync_directory();
        }
        store.files = BoardFiles::at(&store.path);
        Ok(store)
    }

    /// Whether the paths still name the files this connection opened.
    fn current(&self) -> bool {
        let now = BoardFiles::at(&self.path);
        self.detached.is_none() && now.links().is_none() && self.files.changes(&now).is_empty()
    }

    /// Makes sure the connection still works on the files at the board's path, before a
    /// transaction. A `-wal` or `-shm` deleted or replaced since it opened (with `kanban.db`
    /// itself unchanged) reopens the board, which is then the same board through its current
    /// log; [`take_file_changes`](Self::take_file_changes) says so. A replaced or deleted
    /// `kanban.db` closes this store for good: every later call fails with
    /// [`StoreError::FilesChanged`], and the caller opens the board anew.
    pub fn refresh(&mut self) -> Result<(), StoreError> {
        if let Some(change) = self.detached {
            return Err(self.changed(change));
        }
        let now = BoardFiles::at(&self.path);
        let changes = self.files.changes(&now);
        if changes.is_empty() {
            return self.one_name(&now);
        }
        if let Some(&db) = changes.iter().find(|c| c.part == BoardPart::Db) {
            self.close_connection()?;
            self.detached = Some(db);
            return Err(self.changed(db));
        }
        for change in changes {
            if !self.noticed.contains(&change) {
                self.noticed.push(change);
            }
        }
        self.reopen()?;
        let files = self.files;
        self.one_name(&files)
    }

    /// Copies every commit into `kanban.db` right after it is synced (a passive checkpoint: it
    /// never waits), for the stores of long-running processes (the gateway, a sweep). Their WAL
    /// then holds hardly anything only the WAL knows: a WAL deleted or a WAL index replaced
    /// under them loses no record they had committed, and a copy of kanban.db made mid-run misses
    /// at most the last moment's commits. A short CLI call does without: its close folds the WAL
    /// in, and two more syncs per commit would slow every verb.
    pub fn checkpoint_every_commit(&mut self) -> Result<(), StoreError> {
        self.checkpoint_every_commit = true;
        self.configure()
    }

    /// Runs `f` right after a [`refresh`](Self::refresh), without looking at the files again
    /// before each transaction inside it (three `stat`s each): how a `BoardHandle` call runs.
    pub fn refreshed<T>(
        &mut self,
        f: impl FnOnce(&mut Store) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.refresh()?;
        self.refreshed = true;
        let out = f(self);
        self.refreshed = false;
        out
    }

    /// Refuses a board that has more than one name (see `BoardFiles::links`), before anything
    /// is read or written through it.
    fn one_name(&self, files: &BoardFiles) -> Result<(), StoreError> {
        match files.links() {
            Some(links) => Err(StoreError::HardLinked {
                path: self.path.clone(),
                links,
            }),
            None => Ok(()),
        }
    }

    /// The `-wal`/`-shm` changes this store reopened the board for since the last call.
    pub fn take_file_changes(&mut self) -> Vec<FileChange> {
        std::mem::take(&mut self.noticed)
    }

    fn changed(&self, change: FileChange) -> StoreError {
        StoreError::FilesChanged {
            path: self.path.clone(),
            change,
        }
    }

    /// Closes the connection, leaving an empty in-memory one in its place. Closing never
    /// checkpoints (see `connect`), so a stale index writes nothing into `kanban.db`.
    fn close_connection(&mut self) -> Result<(), StoreError> {
        let placeholder =
            Connection::open_in_memory().sql("replacing a connection to a swapped board file")?;
        self.frame_set.set(None);
        drop(std::mem::replace(&mut self.conn, placeholder));
        Ok(())
    }

    fn reopen(&mut self) -> Result<(), StoreError> {
        // The old connection goes first: the connections of one process to one database file
        // share one mapping of its index, so a new one opened beside it would map the stale
        // index again. Should the new one fail to open, the placeholder stays and the next
        // call tries again (the recorded files still differ from the paths).
        self.close_connection()?;
        self.frame_set.set(None);
        self.conn = connect(&self.path, false)?;
        self.probe()?;
        self.configure()?;
        self.files = BoardFiles::at(&self.path);
        Ok(())
    }

    /// Copies every commit in the WAL into `kanban.db` and empties the WAL, waiting up to
    /// `wait` for other processes' transactions; returns whether it got there (otherwise every
    /// commit is still durable in the WAL, and a later close tries again).
    pub fn checkpoint(&mut self, wait: Duration) -> Result<bool, StoreError> {
        self.refresh()?;
        self.checkpoint_here(wait)
    }

    fn checkpoint_here(&mut self, wait: Duration) -> Result<bool, StoreError> {
        let deadline = Instant::now() + wait;
        let done = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            self.conn
                .busy_timeout(left)
                .sql("setting the busy timeout")?;
            // TRUNCATE: synced into kanban.db, then the WAL cut to zero bytes, so that a board
            // restored beside it later can never have stale frames replayed over it.
            let attempt = self
                .conn
                .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                    r.get::<_, i64>(0)
                });
            match attempt {
                Ok(0) => break true,
                // Another connection's checkpoint holds the lock and SQLite does not wait for
                // it; its snapshot may predate this connection's last commit.
                Ok(_) if Instant::now() < deadline => std::thread::sleep(CHECKPOINT_RETRY),
                Err(e) if is_busy(&e) && Instant::now() < deadline => {
                    std::thread::sleep(CHECKPOINT_RETRY)
                }
                Ok(_) => break false,
                Err(e) if is_busy(&e) => break false,
                Err(source) => {
                    let _ = self.conn.busy_timeout(BUSY_TIMEOUT);
                    return Err(StoreError::Sql {
                        context: "copying the WAL into kanban.db".into(),
                        source,
                    });
                }
            }
        };
        self.conn
            .busy_timeout(BUSY_TIMEOUT)
            .sql("setting the busy timeout")?;
        Ok(done)
    }

    /// Makes the board's directory entries (the board and its WAL) durable. Errors are ignored,
    /// as SQLite ignores them: some filesystems cannot sync a directory at all.
    fn sync_directory(&self) {
        let dir = match self.path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        if let Ok(dir) = fs::File::open(dir) {
            let _ = dir.sync_all();
        }
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Fails with `Corrupt` when SQLite cannot read the file as a database.
    fn probe(&self) -> Result<(), StoreError> {
        // Reading the schema touches the pages every later statement needs first.
        let verdict = self.conn.query_row(
            "SELECT count(*), COALESCE(sum(length(sql)), 0) FROM sqlite_master",
            [],
            |r| r.get::<_, i64>(0),
        );
        match verdict {
            Ok(_) => Ok(()),
            Err(e) if is_not_a_database(&e) => Err(StoreError::Corrupt {
                path: self.path.clone(),
                detail: e.to_string(),
            }),
            Err(e) if is_busy(&e) => Err(StoreError::Locked {
                path: self.path.clone(),
            }),
            Err(source) => Err(StoreError::Sql {
                context: "checking the database".into(),
                source,
            }),
        }
    }

    fn configure(&self) -> Result<(), StoreError> {
        self.enable_wal()?;
        // FULL: every commit syncs the WAL, so a recorded attempt survives a power cut (B1).
        self.conn
            .execute_batch("PRAGMA synchronous=FULL")
            .sql("setting synchronous=FULL")?;
        if self.checkpoint_every_commit {
            self.conn
                .execute_batch("PRAGMA wal_autocheckpoint=1")
                .sql("setting wal_autocheckpoint")?;
        }
        Ok(())
    }

    /// Switches the file to WAL unless it already is. Changing the journal mode needs every
    /// other connection out of the way, and SQLite reports a conflict at once instead of
    /// calling the busy handler, so processes opening a fresh board together retry here,
    /// within the same [`BUSY_TIMEOUT`] as any write.
    fn enable_wal(&self) -> Result<(), StoreError> {
        let deadline = Instant::now() + BUSY_TIMEOUT;
        loop {
            let attempt = self
                .conn
                .query_row("PRAGMA journal_mode", [], |r| r.get::<_, String>(0))
                .and_then(|mode| {
                    if mode.eq_ignore_ascii_case("wal") {
                        Ok(mode)
                    } else {
                        // Some filesystems refuse WAL; SQLite then reports the mode it kept and
                        // the board still works (with coarser locking), so that is not an error.
                        self.conn
                            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get::<_, String>(0))
                    }
                });
            match attempt {
                Ok(_) => return Ok(()),
                Err(e) if is_busy(&e) && Instant::now() < deadline => {
                    std::thread::sleep(WAL_SWITCH_RETRY);
                }
                Err(e) if is_busy(&e) => {
                    return Err(StoreError::Locked {
                        path: self.path.clone(),
                    })
                }
                Err(source) => {
                    return Err(StoreError::Sql {
                        context: "switching to WAL mode".into(),
                        source,
                    })
                }
            }
        }
    }

    fn migrate(&mut self) -> Result<(), StoreError> {
        // The common case, every open after the first: one pragma and one row, instead of
        // reading every table's columns.
        if schema::known_current(&self.conn)? {
            return Ok(());
        }
        // Plan again under the write lock: another process may have migrated meanwhile. A
        // complete schema is marked too (one small write, once per schema change).
        let now = crate::clock::now_ms();
        self.write(|tx| schema::apply(tx, now).map(|_| ()))
    }

    /// Runs `f` in one `BEGIN IMMEDIATE` transaction: committed when `f` succeeds, rolled back
    /// otherwise. A lock held by another writer past [`BUSY_TIMEOUT`] becomes
    /// [`StoreError::Locked`].
    pub(crate) fn write<T>(
        &mut self,
        f: impl FnOnce(&Transaction<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        if !self.refreshed {
            self.refresh()?;
        }
        self.sync_frame()?;
        let path = &self.path;
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .sql("starting a write transaction")
            .map_err(|e| locate(path, e))?;
        let out = f(&tx).map_err(|e| locate(path, e))?;
        tx.commit().sql("committing").map_err(|e| locate(path, e))?;
        Ok(out)
    }

    /// Runs a read against the connection, reporting lock timeouts as `Locked`.
    pub(crate) fn read<T>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        if let Some(change) = self.detached {
            return Err(self.changed(change));
        }
        if !self.refreshed {
            let now = BoardFiles::at(&self.path);
            if let Some(&change) = self.files.changes(&now).first() {
                return Err(self.changed(change));
            }
            self.one_name(&now)?;
        }
        self.sync_frame()?;
        f(&self.conn).map_err(|e| locate(&self.path, e))
    }

    /// Sets the reader's time frame on the connection when it moved since it was last set (a
    /// step of the wall clock, see `crate::clock`): every statement after reads and writes the
    /// board's times in it.
    fn sync_frame(&self) -> Result<(), StoreError> {
        let frame = self.frame_override.unwrap_or_else(crate::clock::frame);
        if self.frame_set.get() != Some(frame) {
            // Created on the connection's first use, not at its open: a file that is not a
            // database must be refused by the probe first, untouched.
            if self.frame_set.get().is_none() {
                frame::install(&self.conn)?;
            }
            frame::set(&self.conn, frame)?;
            self.frame_set.set(Some(frame));
        }
        Ok(())
    }

    /// Reads and writes the board's times in `frame` from now on, instead of this process's:
    /// for tests of a reader on another boot.
    #[cfg(test)]
    pub(crate) fn use_frame(&mut self, frame: crate::clock::Frame) {
        self.frame_override = Some(frame);
    }

    /// Creates a card and its `created` event (plus its links and decompose row) atomically.
    ///
    /// Status: `triage` with `--triage`; otherwise `todo` when any parent is still open
    /// (not `done`/`archived`), else `ready`.
    pub fn create_task(&mut self, new: &NewTask) -> Result<Task, StoreError> {
        let id = self.write(|tx| board::create_task(tx, new))?;
        self.get(&id)
    }

    /// The card with this id, if any.
    pub fn task(&self, id: &str) -> Result<Option<Task>, StoreError> {
        self.read(|c| board::task_by_id(c, id))
    }

    /// The card with this id, or [`StoreError::NoSuchTask`].
    pub fn get(&self, id: &str) -> Result<Task, StoreError> {
        self.task(id)?
            .ok_or_else(|| StoreError::NoSuchTask(id.to_owned()))
    }

    /// Cards matching `filter`, oldest first (`created_at`, then insertion order).
    pub fn list(&self, filter: &ListFilter) -> Result<Vec<Task>, StoreError> {
        self.read(|c| board::list_tasks(c, filter))
    }

    /// Ids of the cards `id` waits for, sorted.
    pub fn parents_of(&self, id: &str) -> Result<Vec<String>, StoreError> {
        self.read(|c| board::parent_ids(c, id))
    }

    /// Ids of the cards waiting for `id`, sorted.
    pub fn children_of(&self, id: &str) -> Result<Vec<String>, StoreError> {
        self.read(|c| board::child_ids(c, id))
    }

    /// The card's events in id order.
    pub fn events_of(&self, id: &str) -> Result<Vec<Event>, StoreError> {
        self.read(|c| board::events_of(c, id))
    }

    /// The card's comments, oldest first.
    pub fn comments_of(&self, id: &str) -> Result<Vec<Comment>, StoreError> {
        self.read(|c| board::comments_of(c, id))
    }

    /// The card's runs as JSON objects with upstream's `show --json` keys, in start order.
    pub fn runs_of(&self, id: &str) -> Result<Vec<Value>, StoreError> {
        self.read(|c| board::runs_of(c, id))
    }

    /// The most recent non-empty run summary, as upstream's `show` reports it.
    pub fn latest_summary(&self, id: &str) -> Result<Option<String>, StoreError> {
        self.read(|c| board::latest_summary(c, id))
    }

    /// Makes `child` wait for `parent`, with a `linked` event on the child.
    ///
    /// Refuses self-links and cycles ([`StoreError::Cycle`]) and unknown ids
    /// ([`StoreError::NoSuchTask`]). A `ready` child of an open parent goes back to `todo`.
    /// Returns whether a new link was written (an existing link is left as it is).
    pub fn link(&mut self, parent: &str, child: &str) -> Result<bool, StoreError> {
        self.write(|tx| board::link_with_event(tx, parent, child))
    }

    /// Archives the cards (an `archived` event each), all or nothing: one unknown id fails the
    /// whole call before anything is written. Children left without open parents are promoted.
    pub fn archive(&mut self, ids: &[String]) -> Result<ArchiveReport, StoreError> {
        self.write(|tx| board::archive(tx, ids))
    }
}

/// Opens a connection to the board at `path` as every store uses it.
fn connect(path: &Path, create: bool) -> Result<Connection, StoreError> {
    // Without CREATE for an existing file, so a file removed under us is an error rather than a
    // silently empty board.
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if create {
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
    }
    let conn = Connection::open_with_flags(path, flags).map_err(|source| StoreError::Sql {
        context: format!("opening {}", path.display()),
        source,
    })?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .sql("setting the busy timeout")?;
    // Closing never checkpoints by itself: SQLite's own close-time checkpoint (and the WAL's
    // deletion after it) would also run through a connection whose files were swapped. The
    // store checkpoints on close when its files are still its own (`Drop for Store`).
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
        .sql("keeping the WAL on close")?;
    // The connection's time frame (`store::frame`) and SQLite's own sorts live in memory: a
    // temporary file would cost every statement that reads the frame a write and a read.
    conn.execute_batch("PRAGMA temp_store = MEMORY")
        .sql("keeping temporary tables in memory")?;
    // Room for every statement a tick runs (the default 16 made them evict each other, and a
    // tick parse its SQL again every time).
    conn.set_prepared_statement_cache_capacity(64);
    Ok(conn)
}

/// A JSON value in the compact style upstream stores event payloads in.
pub fn payload_text(value: &Value) -> String {
    pyjson::to_payload_text(value)
}
