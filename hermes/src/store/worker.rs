//! What a worker does to the board from inside its run: its requests' ledger rows (opened under
//! the board's pause and hourly ceiling, S4), its heartbeats and comments; and a person's
//! `unpark` of a card its spawn budget parked. Every write of the worker is fenced by its run:
//! it commits only while the run is open and still carries the worker's lease, so a worker whose
//! run was closed (stopped, timed out, taken over) changes nothing more and sends nothing more.

use rusqlite::{params, Connection, OptionalExtension};
use serde_json::json;

use super::board::{add_event, add_event_in_run};
use super::guards::{auto_gate, AutoGate};
use super::ledger::{open_row, RowStart};
use super::runs::{read_spawn_state, write_spawn_step};
use super::{lenient, SqlResultExt, Store, StoreError};
use crate::core::{BeginRefusal, CardMove, Half, SpawnRules};

/// A worker's view of its run, read at its start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerRun {
    pub task_id: String,
    pub profile: Option<String>,
    pub title: String,
    pub body: Option<String>,
}

/// A worker's request about to leave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerRequestOpen {
    pub run_id: i64,
    pub task_id: String,
    /// The run's lease (`HERMES_KANBAN_CLAIM_LOCK`).
    pub lease: String,
    /// The run's turn (1 for the first), stored in the ledger's `attempt`.
    pub turn: u32,
    /// The try within the turn, stored in `try`.
    pub try_no: u32,
    pub started_at_ms: i64,
    pub model: String,
    /// `kanban.decompose_calls_per_hour`, the ceiling both halves share.
    pub calls_per_hour: u32,
}

/// Why a worker's request may not leave.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkerRefusal {
    /// The run was closed or taken from this worker: it must stop.
    #[error("the run is no longer this worker's (it was closed or taken over)")]
    RunClosed,
    /// The board's pause or hourly ceiling holds every automatic call back (S4).
    #[error(transparent)]
    Guard(BeginRefusal),
}

/// What unparking a card's spawns did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpawnUnparked {
    pub task_id: String,
    /// Charged runs before the reset.
    pub failures_before: u32,
    /// The card's status now (`ready`, or `todo` while a parent is open).
    pub status: String,
}

/// Why a card's spawns were not unparked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpawnUnparkRefusal {
    #[error("no such task: {0}")]
    NoSuchTask(String),
    #[error(
        "{task_id} is not parked by its spawn budget ({failures} of {limit} worker runs failed)"
    )]
    NotParked {
        task_id: String,
        failures: u32,
        limit: u32,
    },
    #[error(
        "{task_id} has a worker run in flight (run {run_id}); unpark it once that run has ended"
    )]
    Running { task_id: String, run_id: i64 },
}

/// What unblocking a card did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unblocked {
    pub task_id: String,
    /// The block's kind, if it had one.
    pub kind: Option<String>,
    /// `ready`, or `todo` while a parent is open.
    pub status: String,
}

/// Why a card was not unblocked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnblockRefusal {
    #[error("no such task: {0}")]
    NoSuchTask(String),
    #[error("{task_id} is not blocked (status {status})")]
    NotBlocked { task_id: String, status: String },
    #[error(
        "{task_id} is parked by its spawn budget, not blocked by a worker: `hermes kanban unpark \
         {task_id}` gives it a fresh budget"
    )]
    Parked { task_id: String },
}

impl Store {
    /// The worker's run, while it is open and carries `lease`.
    pub fn worker_run(&self, run_id: i64, lease: &str) -> Result<Option<WorkerRun>, StoreError> {
        self.read(|conn| {
            if !run_is_ours(conn, run_id, lease)? {
                return Ok(None);
            }
            conn.query_row(
                "SELECT t.id, r.profile, t.title, t.body
                 FROM task_runs r JOIN tasks t ON t.id = r.task_id WHERE r.id = ?1",
                [run_id],
                |r| {
                    Ok(WorkerRun {
                        task_id: lenient::text(r, 0)?.unwrap_or_default(),
                        profile: lenient::text(r, 1)?,
                        // A card whose text is not text is set aside before any worker starts
                        // (`Store::claim_run`); one that turned so since reads lossily.
                        title: lenient::text(r, 2)?.unwrap_or_default(),
                        body: lenient::text(r, 3)?,
                    })
                },
            )
            .optional()
            .sql("reading the worker's run")
        })
    }

    /// Opens the ledger row of a worker's request, or says why it may not leave: the run is no
    /// longer the worker's, or the board is paused or at its hourly ceiling (S4, S9).
    pub fn worker_ledger_open(
        &mut self,
        open: &WorkerRequestOpen,
    ) -> Result<Result<i64, WorkerRefusal>, StoreError> {
        self.write(|tx| {
            if !run_is_ours(tx, open.run_id, &open.lease)? {
                return Ok(Err(WorkerRefusal::RunClosed));
            }
            match auto_gate(tx, open.started_at_ms, open.calls_per_hour)? {
                AutoGate::Open { .. } => {}
                AutoGate::Paused { until_ms, reason } => {
                    return Ok(Err(WorkerRefusal::Guard(BeginRefusal::Paused {
                        until_ms,
                        reason,
                    })))
                }
                AutoGate::CeilingReached { calls, limit } => {
                    return Ok(Err(WorkerRefusal::Guard(BeginRefusal::CeilingReached {
                        calls,
                        limit,
                    })))
                }
            }
            open_row(
                tx,
                &RowStart {
                    task_id: &open.task_id,
                    purpose: Half::Worker,
                    origin: Half::Worker.as_str(),
                    attempt: open.turn,
                    try_no: open.try_no,
                    started_at_ms: open.started_at_ms,
                    model: Some(&open.model),
                    run_id: Some(open.run_id),
                },
            )
            .map(Ok)
        })
    }

    /// Records a worker's heartbeat on its run and card (`kanban_heartbeat`); false when the
    /// run is no longer the worker's.
    pub fn heartbeat(
        &mut self,
        run_id: i64,
        lease: &str,
        note: Option<&str>,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        self.write(|tx| {
            if !run_is_ours(tx, run_id, lease)? {
                return Ok(false);
            }
            let now = now_ms.div_euclid(1000);
            tx.execute(
                "UPDATE task_runs SET last_heartbeat_at = ?2 WHERE id = ?1",
                params![run_id, now],
            )
            .sql("recording a heartbeat")?;
            let task_id: String = tx
                .query_row(
                    "SELECT task_id FROM task_runs WHERE id = ?1",
                    [run_id],
                    |r| r.get(0),
                )
                .sql("reading the run")?;
            tx.execute(
                "UPDATE tasks SET last_heartbeat_at = ?2 WHERE id = ?1 AND current_run_id = ?3",
                params![task_id, now, run_id],
            )
            .sql("recording a heartbeat")?;
            add_event_in_run(
                tx,
                &task_id,
                Some(run_id),
                "heartbeat",
                Some(&json!({"note": note})),
            )?;
            Ok(true)
        })
    }

    /// Adds a comment to a card (`kanban_comment`), with a `commented` event; returns its id.
    pub fn comment(
        &mut self,
        task_id: &str,
        author: &str,
        body: &str,
        now_ms: i64,
    ) -> Result<i64, StoreError> {
        if body.trim().is_empty() {
            return Err(StoreError::Invalid("a comment cannot be empty".into()));
        }
        self.write(|tx| {
            let exists: Option<i64> = tx
                .query_row("SELECT 1 FROM tasks WHERE id = ?1", [task_id], |r| r.get(0))
                .optional()
                .sql("reading the card")?;
            if exists.is_none() {
                return Err(StoreError::NoSuchTask(task_id.to_owned()));
            }
            tx.execute(
                "INSERT INTO task_comments (task_id, author, body, created_at)
                 VALUES (?1, ?2, ?3, ?4)",
                params![task_id, author, body, now_ms.div_euclid(1000)],
            )
            .sql("adding a comment")?;
            let id = tx.last_insert_rowid();
            add_event(
                tx,
                task_id,
                "commented",
                Some(&json!({"author": author, "comment_id": id})),
            )?;
            Ok(id)
        })
    }

    /// Gives a card parked by its spawn budget a fresh budget (`spawn_unparked`) and sends it
    /// back to `ready` (or `todo` while a parent is open), to be spawned at the next tick.
    pub fn unpark_spawns(
        &mut self,
        task_id: &str,
        rules: SpawnRules,
        by: &str,
    ) -> Result<Result<SpawnUnparked, SpawnUnparkRefusal>, StoreError> {
        self.write(|tx| {
            let card: Option<(Option<i64>, String)> = tx
                .query_row(
                    "SELECT max_retries, status FROM tasks WHERE id = ?1",
                    [task_id],
                    |r| {
                        Ok((
                            lenient::int(r, 0)?,
                            lenient::text(r, 1)?.unwrap_or_default(),
                        ))
                    },
                )
                .optional()
                .sql("reading the card")?;
            let Some((max_retries, status)) = card else {
                return Ok(Err(SpawnUnparkRefusal::NoSuchTask(task_id.to_owned())));
            };
            let rules = rules.for_card(max_retries);
            let run_id: Option<i64> = tx
                .query_row(
                    "SELECT id FROM task_runs WHERE task_id = ?1 AND ended_at IS NULL LIMIT 1",
                    [task_id],
                    |r| r.get(0),
                )
                .optional()
                .sql("looking for an open run")?;
            if let Some(run_id) = run_id {
                return Ok(Err(SpawnUnparkRefusal::Running {
                    task_id: task_id.to_owned(),
                    run_id,
                }));
            }
            let before = read_spawn_state(tx, task_id)?;
            let step = match rules.unpark(before.as_ref(), by) {
                Ok(step) => step,
                Err(failures) => {
                    return Ok(Err(SpawnUnparkRefusal::NotParked {
                        task_id: task_id.to_owned(),
                        failures,
                        limit: rules.budget.limit,
                    }))
                }
            };
            write_spawn_step(tx, task_id, None, before.as_ref(), &step)?;
            let status = if status == CardMove::Blocked(None).status() {
                let back = if waits_for_parent(tx, task_id)? {
                    CardMove::WaitsForParents.status()
                } else {
                    CardMove::Ready.status()
                };
                // Only the park's own block (no kind): a card a person must answer stays so.
                tx.execute(
                    "UPDATE tasks SET status = ?2 WHERE id = ?1 AND status = 'blocked'
                       AND block_kind IS NULL",
                    params![task_id, back],
                )
                .sql("sending the card back")?;
                current_status(tx, task_id)?
            } else {
                status
            };
            Ok(Ok(SpawnUnparked {
                task_id: task_id.to_owned(),
                failures_before: before.map_or(0, |s| s.failures),
                status,
            }))
        })
    }
}

impl Store {
    /// A person's answer to a block (S8): the card goes back to `ready` (or `todo` while a
    /// parent is open) with its kind cleared and an `unblocked` event, and is spawned again from
    /// the next tick. Its spawn budget is left as it is: a block was never charged. A card parked
    /// by its spawn budget is refused (`unpark` is its verb).
    pub fn unblock(
        &mut self,
        task_id: &str,
        by: &str,
    ) -> Result<Result<Unblocked, UnblockRefusal>, StoreError> {
        self.write(|tx| {
            let card: Option<(String, Option<String>)> = tx
                .query_row(
                    "SELECT status, block_kind FROM tasks WHERE id = ?1",
                    [task_id],
                    |r| {
                        Ok((
                            lenient::text(r, 0)?.unwrap_or_default(),
                            lenient::text(r, 1)?,
                        ))
                    },
                )
                .optional()
                .sql("reading the card")?;
            let Some((status, kind)) = card else {
                return Ok(Err(UnblockRefusal::NoSuchTask(task_id.to_owned())));
            };
            if status != "blocked" {
                return Ok(Err(UnblockRefusal::NotBlocked {
                    task_id: task_id.to_owned(),
                    status,
                }));
            }
            let parked = read_spawn_state(tx, task_id)?.is_some_and(|s| s.parked_at_ms.is_some());
            if parked && kind.is_none() {
                return Ok(Err(UnblockRefusal::Parked {
                    task_id: task_id.to_owned(),
                }));
            }
            let back = if waits_for_parent(tx, task_id)? {
                CardMove::WaitsForParents.status()
            } else {
                CardMove::Ready.status()
            };
            tx.execute(
                "UPDATE tasks SET status = ?2, block_kind = NULL WHERE id = ?1",
                params![task_id, back],
            )
            .sql("unblocking the card")?;
            add_event(
                tx,
                task_id,
                "unblocked",
                Some(&json!({"by": by, "kind": kind, "status": back})),
            )?;
            Ok(Ok(Unblocked {
                task_id: task_id.to_owned(),
                kind,
                status: back.to_owned(),
            }))
        })
    }
}

fn current_status(conn: &Connection, task_id: &str) -> Result<String, StoreError> {
    conn.query_row("SELECT status FROM tasks WHERE id = ?1", [task_id], |r| {
        lenient::text(r, 0).map(Option::unwrap_or_default)
    })
    .sql("reading the card")
}

fn waits_for_parent(conn: &Connection, task_id: &str) -> Result<bool, StoreError> {
    let open: Option<i64> = conn
        .query_row(
            "SELECT 1 FROM task_links l JOIN tasks p ON p.id = l.parent_id
             WHERE l.child_id = ?1 AND p.status NOT IN ('done', 'archived') LIMIT 1",
            [task_id],
            |r| r.get(0),
        )
        .optional()
        .sql("looking for an open parent")?;
    Ok(open.is_some())
}

/// Whether run `run_id` is open and still carries `lease`: the fence of every worker write.
pub(crate) fn run_is_ours(conn: &Connection, run_id: i64, lease: &str) -> Result<bool, StoreError> {
    let found: Option<i64> = conn
        .query_row(
            "SELECT 1 FROM task_runs WHERE id = ?1 AND ended_at IS NULL AND claim_lock = ?2",
            params![run_id, lease],
            |r| r.get(0),
        )
        .optional()
        .sql("checking the worker's run")?;
    Ok(found.is_some())
}
