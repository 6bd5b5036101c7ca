//! Worker runs: the spawn half of the board (S1–S5, S7–S9).
//!
//! A run is recorded **before** its worker is forked, in one `BEGIN IMMEDIATE` transaction
//! ([`Store::claim_run`]): the `task_runs` row, the card's claim (`running`, its lease, its
//! expiry), the spawn charged against the card's budget (`core::spawn`), and the spawn ledger's
//! row with the lock file the worker will hold. The same transaction counts the board's live
//! workers (open spawn-ledger rows) against `kanban.max_spawn` and reads the board's pause and
//! hourly ceiling, so no two processes can spawn past the cap, or spawn while the provider is
//! refused, between them.
//!
//! A run ends once, in [`Store::close_run`], whoever records it: the worker (a terminal tool
//! call, or what ended its session), the spawner that reaped it, or recovery after a restart.
//! That one transaction applies `SpawnRules::end`, closes the `task_runs` row, moves the card,
//! closes the run's requests left in flight, fills in the spawn ledger and records any pause the
//! end calls for. The spawn ledger's row itself stays open until the worker's processes are gone
//! ([`Store::worker_gone`]): until then the worker still counts against the cap.

use std::collections::HashSet;
use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension, Transaction};
use serde_json::{json, Value};

use super::board::{promote_ready, unreadable};
use super::claims::new_lease;
use super::decompose::{pause_unreachable, PauseRecord, UnreachableRecord};
use super::guards::{auto_gate, set_pause, AutoGate};
use super::state_rows::{
    add_event_in_run, spawn_cells, spawn_due_seen, spawn_started_seen, spawn_state_columns,
};
use super::{frame, lenient, SqlResultExt, Store, StoreError};
use crate::core::spawn::{Ended, RunEnd, SpawnBegin, SpawnStep};
use crate::core::{
    BeginRefusal, BlockKind, CardMove, Half, LedgerOutcome, RunOutcome, SpawnRefusal, SpawnRules,
    SpawnState,
};

/// The longest runtime a card's own `max_runtime_seconds` may ask for (the config key's range).
pub const MAX_RUNTIME: Duration = Duration::from_secs(86_400);

/// What [`Store::claim_run`] checks and records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpawnPolicy {
    /// Who spawns (`gateway`, `dispatch`): recorded on the spawn ledger and the events.
    pub origin: &'static str,
    /// The spawning process (see `process::token`).
    pub owner: String,
    /// The budget and backoff every card's spawns follow (a card's `max_retries` on top).
    pub rules: SpawnRules,
    /// `kanban.max_spawn`: live workers on the board at most, this one included.
    pub max_spawn: u32,
    /// `kanban.decompose_calls_per_hour`: the board's hourly ceiling, shared by both halves.
    pub calls_per_hour: u32,
    /// `kanban.worker_max_runtime_seconds` (a card's `max_runtime_seconds` overrides it).
    pub runtime: Duration,
    /// The lock file the worker will hold, already created and locked by the spawner.
    pub lock_path: String,
    pub now_ms: i64,
}

/// A recorded run, ready for its worker to be forked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunTicket {
    pub run_id: i64,
    pub task_id: String,
    /// The card's spawn number (1 for its first worker).
    pub spawn: u32,
    /// The card's assignee, whom the worker runs as (`-p`).
    pub profile: String,
    /// The run's fencing token, handed to the worker as `HERMES_KANBAN_CLAIM_LOCK`: every write
    /// the worker makes commits only while the run is open and still carries it.
    pub lease: String,
    /// How long the worker may run before it is stopped as timed out.
    pub runtime: Duration,
}

/// Why no run was recorded for a card (nothing was written, except a park).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClaimRefusal {
    #[error("no such task: {0}")]
    NoSuchTask(String),
    #[error("not ready (status {status})")]
    NotReady { status: String },
    #[error("no assignee: nobody to run it as")]
    NoAssignee,
    /// A run of the card is still open (a worker of any process, or another tool's).
    #[error("a run of it is still open (run {run_id})")]
    Running { run_id: i64 },
    /// The worker of an ended run of it still runs (S2).
    #[error("the worker of its run {run_id} still runs")]
    StillRunning { run_id: i64 },
    /// Its text cannot be read as text: it is set aside (parked) instead of sent lossily.
    #[error("{why}; set aside: fix the row, then `hermes kanban unpark` it")]
    Unreadable { why: String },
    #[error(transparent)]
    Card(#[from] SpawnRefusal),
    /// `kanban.max_spawn` live workers already run on the board (S5).
    #[error("{live} live workers on the board reach kanban.max_spawn ({max})")]
    Cap { live: u64, max: u32 },
    /// The board's pause or hourly ceiling (S4).
    #[error(transparent)]
    Board(BeginRefusal),
}

impl ClaimRefusal {
    /// Whether the refusal parked the card just now (it owes its one WARN).
    pub fn parked_now(&self) -> bool {
        matches!(self, ClaimRefusal::Unreadable { .. })
    }
}

/// A run's end, as [`Store::close_run`] records it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunClose {
    pub run_id: i64,
    pub outcome: RunOutcome,
    /// For a block: its kind (a `dependency` block on no open parent is charged, see
    /// `BlockKind::run_outcome`).
    pub kind: Option<BlockKind>,
    /// The summary of a completion, the reason of a block, or what ended the run.
    pub reason: String,
    /// Who records it (`worker`, `gateway`, `dispatch`).
    pub by: String,
    /// The run's lease when the worker records its own end: nothing is written once the run
    /// was closed or taken from it. `None` for the spawner and recovery.
    pub fence: Option<String>,
    pub rules: SpawnRules,
    pub now_ms: i64,
    /// A board-wide pause to record with the end (a refused request, a rate-limit exit).
    pub pause: Option<PauseRecord>,
    /// The provider could not be reached: the board's growing pause to record with the end.
    pub unreachable: Option<UnreachableRecord>,
    /// `kanban_complete`'s `result` (upstream's `tasks.result`).
    pub result: Option<String>,
    /// `kanban_complete`'s `metadata`, kept on the run.
    pub metadata: Option<Value>,
}

impl RunClose {
    /// An end recorded by `by` under `rules` at `now_ms`, with nothing but an outcome and a
    /// reason (set the other fields for a block, a completion or a pause).
    pub fn new(
        run_id: i64,
        outcome: RunOutcome,
        reason: impl Into<String>,
        by: &str,
        rules: SpawnRules,
        now_ms: i64,
    ) -> Self {
        RunClose {
            run_id,
            outcome,
            kind: None,
            reason: reason.into(),
            by: by.to_owned(),
            fence: None,
            rules,
            now_ms,
            pause: None,
            unreachable: None,
            result: None,
            metadata: None,
        }
    }
}

/// What [`Store::close_run`] recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Closed {
    pub task_id: String,
    /// The outcome as recorded (a block's kind or a `held` run that had reached the provider
    /// may have changed it).
    pub outcome: RunOutcome,
    /// The end spent the card's budget: it is parked now (and owes one WARN).
    pub parked: bool,
    pub card: CardMove,
    /// The card's charged runs after the end, and its limit.
    pub failures: u32,
    pub limit: u32,
}

/// An open spawn-ledger row: a worker that may still be running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveSpawn {
    pub run_id: i64,
    pub task_id: String,
    pub pid: Option<u32>,
    pub owner: String,
    pub lock_path: String,
    pub started_at_ms: i64,
    /// Whether its run is still open (its worker has not recorded an end, nor has anyone else).
    pub run_open: bool,
    /// Its runtime limit, as recorded on the run.
    pub runtime: Duration,
}

/// How a worker's processes were found gone, for [`Store::worker_gone`].
#[derive(Debug, Clone, PartialEq)]
pub struct Gone {
    pub run_id: i64,
    /// The exit as the spawner saw it (`Some(code)`, `None` for a signal), or `None` when nobody
    /// could see it (a worker adopted after a restart, or left by a `kanban dispatch`).
    pub exit: Option<Option<i32>>,
    pub rules: SpawnRules,
    pub by: String,
    pub now_ms: i64,
    /// The board-wide pause a rate-limit or refused-for-good exit calls for (S4).
    pub pause: Option<PauseRecord>,
}

impl Store {
    /// The ready cards a worker may be spawned for now, at most `limit`, never one in `exclude`:
    /// with an assignee, no open run and no live worker (S2), not parked and out of backoff
    /// (S1, S3), cards that never
    /// failed first (a failing card never takes a fresh card's slot), then by priority and age.
    pub fn spawnable(
        &self,
        now_ms: i64,
        limit: usize,
        exclude: &HashSet<String>,
    ) -> Result<Vec<String>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        self.read(|conn| {
            // A backoff's end in the reader's frame (see `store::frame`), as `spawn_cells` reads it.
            let due = spawn_due_seen("s");
            let mut stmt = conn
                .prepare_cached(&format!(
                    "SELECT t.id FROM tasks t
                     LEFT JOIN hermes_spawn_state s ON s.task_id = t.id
                     WHERE t.status = 'ready' AND TRIM(COALESCE(t.assignee, '')) != ''
                       AND s.parked_at_ms IS NULL
                       AND (s.due_at_ms IS NULL OR {due} <= ?1)
                       AND NOT EXISTS (SELECT 1 FROM task_runs r
                                       WHERE r.task_id = t.id AND r.ended_at IS NULL)
                       AND NOT EXISTS (SELECT 1 FROM hermes_spawn_ledger l
                                       WHERE l.task_id = t.id AND l.exited_at_ms IS NULL)
                     ORDER BY COALESCE(s.failures, 0) > 0, t.priority DESC, t.created_at, t.rowid"
                ))
                .sql("selecting cards to spawn")?;
            let mut rows = stmt.query([now_ms]).sql("selecting cards to spawn")?;
            let mut cards = Vec::new();
            while let Some(row) = rows.next().sql("selecting cards to spawn")? {
                let id: String = row.get(0).sql("reading a card to spawn")?;
                if !exclude.contains(&id) {
                    cards.push(id);
                    if cards.len() == limit {
                        break;
                    }
                }
            }
            Ok(cards)
        })
    }

    /// Records a run on `task_id` before its worker is forked (S1, S5): the claim, the charge,
    /// the spawn ledger's row — or says why there must be none.
    pub fn claim_run(
        &mut self,
        task_id: &str,
        policy: &SpawnPolicy,
    ) -> Result<Result<RunTicket, ClaimRefusal>, StoreError> {
        self.write(|tx| claim_run(tx, task_id, policy))
    }

    /// Records the forked worker's pid on its run, with upstream's `spawned` event.
    pub fn record_spawned(&mut self, run_id: i64, pid: u32) -> Result<(), StoreError> {
        self.write(|tx| {
            let task_id: Option<String> = tx
                .query_row(
                    "SELECT task_id FROM task_runs WHERE id = ?1",
                    [run_id],
                    |r| r.get(0),
                )
                .optional()
                .sql("reading the run")?;
            let Some(task_id) = task_id else {
                return Ok(());
            };
            tx.execute(
                "UPDATE task_runs SET worker_pid = ?2 WHERE id = ?1",
                params![run_id, pid],
            )
            .sql("recording the worker's pid")?;
            tx.execute(
                "UPDATE tasks SET worker_pid = ?2 WHERE id = ?1 AND current_run_id = ?3",
                params![task_id, pid, run_id],
            )
            .sql("recording the worker's pid")?;
            tx.execute(
                "UPDATE hermes_spawn_ledger SET pid = ?2 WHERE run_id = ?1",
                params![run_id, pid],
            )
            .sql("recording the worker's pid")?;
            add_event_in_run(
                tx,
                &task_id,
                Some(run_id),
                "spawned",
                Some(&json!({"pid": pid, "run_id": run_id})),
            )?;
            Ok(())
        })
    }

    /// Records how a run ended (see the module docs); `None`, having written nothing, when the
    /// run had already ended or (for a fenced end) is no longer the worker's.
    pub fn close_run(&mut self, close: &RunClose) -> Result<Option<Closed>, StoreError> {
        self.write(|tx| close_run(tx, close))
    }

    /// Records that a worker's processes are gone: its run, if nobody recorded its end, is
    /// closed as its exit says (a clean exit without a terminal call, a rate-limit or refused
    /// exit, a crash; an exit nobody saw counts as a crash), and its spawn-ledger row is closed,
    /// which frees its place under the cap. Returns what closing the run recorded, if it did.
    pub fn worker_gone(&mut self, gone: &Gone) -> Result<Option<Closed>, StoreError> {
        self.write(|tx| {
            let closed = if run_is_open(tx, gone.run_id)? {
                let (outcome, reason) = match gone.exit {
                    Some(code) => (RunOutcome::from_exit(code), describe_exit(code)),
                    None => (
                        RunOutcome::Crashed,
                        "its processes ended without recording how its run went; its exit status \
                         is unknown (it was not this process's child)"
                            .to_owned(),
                    ),
                };
                let close = RunClose {
                    pause: gone.pause.clone(),
                    ..RunClose::new(
                        gone.run_id,
                        outcome,
                        reason,
                        &gone.by,
                        gone.rules,
                        gone.now_ms,
                    )
                };
                close_run(tx, &close)?
            } else {
                None
            };
            tx.execute(
                "UPDATE hermes_spawn_ledger SET exited_at_ms = ?2
                 WHERE run_id = ?1 AND exited_at_ms IS NULL",
                params![gone.run_id, gone.now_ms],
            )
            .sql("closing the spawn ledger's row")?;
            Ok(closed)
        })
    }

    /// The board's live workers: every open spawn-ledger row, oldest first.
    pub fn live_spawns(&self) -> Result<Vec<LiveSpawn>, StoreError> {
        self.read(|conn| {
            let mut stmt = conn
                .prepare_cached(&format!(
                    "SELECT l.run_id, l.task_id, l.pid, l.owner, l.lock_path, {},
                            r.id IS NOT NULL AND r.ended_at IS NULL, r.max_runtime_seconds
                     FROM hermes_spawn_ledger l LEFT JOIN task_runs r ON r.id = l.run_id
                     WHERE l.exited_at_ms IS NULL ORDER BY l.run_id",
                    spawn_started_seen("l")
                ))
                .sql("reading live workers")?;
            let rows = stmt
                .query_map([], |r| {
                    Ok(LiveSpawn {
                        run_id: r.get(0)?,
                        task_id: lenient::text(r, 1)?.unwrap_or_default(),
                        pid: lenient::count_u32(r, 2)?,
                        owner: lenient::text(r, 3)?.unwrap_or_default(),
                        lock_path: lenient::text(r, 4)?.unwrap_or_default(),
                        started_at_ms: lenient::int(r, 5)?.unwrap_or(0),
                        run_open: r.get(6)?,
                        runtime: runtime_of(lenient::int(r, 7)?, MAX_RUNTIME),
                    })
                })
                .sql("reading live workers")?;
            rows.collect::<Result<_, _>>().sql("reading live workers")
        })
    }

    /// A card's spawn state, if it has a row.
    pub fn spawn_state(&self, task_id: &str) -> Result<Option<SpawnState>, StoreError> {
        self.read(|conn| read_spawn_state(conn, task_id))
    }
}

/// A run's runtime limit: the card's own `max_runtime_seconds` when it sets a usable one, else
/// `default`, never more than [`MAX_RUNTIME`].
fn runtime_of(own_seconds: Option<i64>, default: Duration) -> Duration {
    own_seconds
        .filter(|s| *s > 0)
        .map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(u64::MAX)))
        .unwrap_or(default)
        .min(MAX_RUNTIME)
}

/// Words for an exit nobody recorded a run end for.
fn describe_exit(code: Option<i32>) -> String {
    match code {
        Some(0) => "the worker exited 0 without kanban_complete or kanban_block".to_owned(),
        Some(code) => format!("the worker exited with code {code}"),
        None => "the worker was ended by a signal".to_owned(),
    }
}

/// The card columns a claim needs.
struct ClaimCard {
    status: String,
    assignee: Option<String>,
    max_retries: Option<i64>,
    max_runtime_seconds: Option<i64>,
    unreadable: Option<String>,
}

fn claim_card(conn: &Connection, task_id: &str) -> Result<Option<ClaimCard>, StoreError> {
    conn.query_row(
        "SELECT status, assignee, max_retries, max_runtime_seconds, title, body
         FROM tasks WHERE id = ?1",
        [task_id],
        |r| {
            Ok(ClaimCard {
                status: lenient::text(r, 0)?.unwrap_or_default(),
                assignee: lenient::text(r, 1)?
                    .map(|a| a.trim().to_owned())
                    .filter(|a| !a.is_empty()),
                max_retries: lenient::int(r, 2)?,
                max_runtime_seconds: lenient::int(r, 3)?,
                unreadable: unreadable(r.get_ref(4)?, r.get_ref(5)?),
            })
        },
    )
    .optional()
    .sql("reading the card to spawn")
}

fn claim_run(
    tx: &Transaction<'_>,
    task_id: &str,
    policy: &SpawnPolicy,
) -> Result<Result<RunTicket, ClaimRefusal>, StoreError> {
    let Some(card) = claim_card(tx, task_id)? else {
        return Ok(Err(ClaimRefusal::NoSuchTask(task_id.to_owned())));
    };
    if card.status != "ready" {
        return Ok(Err(ClaimRefusal::NotReady {
            status: card.status,
        }));
    }
    let Some(profile) = card.assignee.clone() else {
        return Ok(Err(ClaimRefusal::NoAssignee));
    };
    if let Some(run_id) = open_run_of(tx, task_id)? {
        return Ok(Err(ClaimRefusal::Running { run_id }));
    }
    // A worker whose run ended may still run (it went on after its terminal call, or it is
    // being stopped): the card waits until every process of it is gone (S2).
    if let Some(run_id) = live_worker_of(tx, task_id)? {
        return Ok(Err(ClaimRefusal::StillRunning { run_id }));
    }
    let rules = policy.rules.for_card(card.max_retries);
    let before = read_spawn_state(tx, task_id)?;
    if let Some(why) = card.unreadable {
        set_aside(tx, task_id, before.as_ref(), &why, policy)?;
        return Ok(Err(ClaimRefusal::Unreadable { why }));
    }
    let (step, spawn) = match rules.begin(before.as_ref(), policy.origin, policy.now_ms) {
        SpawnBegin::Refused {
            refusal,
            step,
            parked_now,
        } => {
            write_spawn_step(tx, task_id, None, before.as_ref(), &step)?;
            if parked_now {
                move_card(tx, task_id, CardMove::Blocked(None), policy.now_ms, None)?;
            }
            return Ok(Err(ClaimRefusal::Card(refusal)));
        }
        SpawnBegin::Counted { step, spawn } => (step, spawn),
    };
    // The card's own guards passed; the board's come last, so a card refused for itself is
    // never reported as held back by the board.
    if let Some(refusal) = board_refusal(tx, policy)? {
        return Ok(Err(refusal));
    }
    write_spawn_step(tx, task_id, None, before.as_ref(), &step)?;
    let lease = new_lease()?;
    let runtime = runtime_of(card.max_runtime_seconds, policy.runtime);
    let run_id = insert_run(tx, task_id, &profile, &lease, runtime, policy.now_ms)?;
    tx.execute(
        &format!(
            "INSERT INTO hermes_spawn_ledger
                 (run_id, task_id, spawn, origin, profile, owner, lock_path, started_at_ms,
                  outcome, boot, started_boot_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'running', {}, {})",
            frame::boot_id(),
            frame::boot_ms_of("?8")
        ),
        params![
            run_id,
            task_id,
            spawn,
            policy.origin,
            profile,
            policy.owner,
            policy.lock_path,
            policy.now_ms
        ],
    )
    .sql("recording the spawn")?;
    add_event_in_run(
        tx,
        task_id,
        Some(run_id),
        "claimed",
        Some(&json!({"run_id": run_id, "profile": profile, "spawn": spawn, "by": policy.origin})),
    )?;
    Ok(Ok(RunTicket {
        run_id,
        task_id: task_id.to_owned(),
        spawn,
        profile,
        lease,
        runtime,
    }))
}

/// Parks a card whose text cannot be sent, with its `spawn_parked` event, unless it is already.
fn set_aside(
    tx: &Transaction<'_>,
    task_id: &str,
    before: Option<&SpawnState>,
    why: &str,
    policy: &SpawnPolicy,
) -> Result<(), StoreError> {
    if before.is_some_and(|s| s.parked_at_ms.is_some()) {
        return Ok(());
    }
    let state = before.cloned().unwrap_or_default();
    let reason = format!("set aside without a worker: {why}");
    let after = SpawnState {
        due_at_ms: None,
        parked_at_ms: Some(policy.now_ms),
        last_error: Some(reason.clone()),
        ..state
    };
    let step = SpawnStep {
        after: Some(after),
        records: vec![crate::core::card::Record {
            kind: "spawn_parked",
            payload: json!({
                "failures": before.map_or(0, |s| s.failures),
                "limit": policy.rules.budget.limit,
                "reason": reason,
                "by": policy.origin,
            }),
        }],
    };
    write_spawn_step(tx, task_id, None, before, &step)?;
    move_card(tx, task_id, CardMove::Blocked(None), policy.now_ms, None)
}

/// The board-wide reason no worker may start now: the live-worker cap (S5), then the pause and
/// the hourly ceiling every automatic call keeps to (S4).
fn board_refusal(
    conn: &Connection,
    policy: &SpawnPolicy,
) -> Result<Option<ClaimRefusal>, StoreError> {
    let live = live_count(conn)?;
    if live >= u64::from(policy.max_spawn) {
        return Ok(Some(ClaimRefusal::Cap {
            live,
            max: policy.max_spawn,
        }));
    }
    Ok(
        match auto_gate(conn, policy.now_ms, policy.calls_per_hour)? {
            AutoGate::Open { .. } => None,
            AutoGate::Paused { until_ms, reason } => {
                Some(ClaimRefusal::Board(BeginRefusal::Paused {
                    until_ms,
                    reason,
                }))
            }
            AutoGate::CeilingReached { calls, limit } => {
                Some(ClaimRefusal::Board(BeginRefusal::CeilingReached {
                    calls,
                    limit,
                }))
            }
        },
    )
}

/// Open spawn-ledger rows: workers that may still be running.
pub(crate) fn live_count(conn: &Connection) -> Result<u64, StoreError> {
    conn.query_row(
        "SELECT COUNT(*) FROM hermes_spawn_ledger WHERE exited_at_ms IS NULL",
        [],
        |r| r.get::<_, i64>(0),
    )
    .map(|n| u64::try_from(n).unwrap_or(0))
    .sql("counting live workers")
}

fn open_run_of(conn: &Connection, task_id: &str) -> Result<Option<i64>, StoreError> {
    conn.query_row(
        "SELECT id FROM task_runs WHERE task_id = ?1 AND ended_at IS NULL ORDER BY id LIMIT 1",
        [task_id],
        |r| r.get(0),
    )
    .optional()
    .sql("looking for an open run")
}

fn live_worker_of(conn: &Connection, task_id: &str) -> Result<Option<i64>, StoreError> {
    conn.query_row(
        "SELECT run_id FROM hermes_spawn_ledger WHERE task_id = ?1 AND exited_at_ms IS NULL
         LIMIT 1",
        [task_id],
        |r| r.get(0),
    )
    .optional()
    .sql("looking for a live worker")
}

fn run_is_open(conn: &Connection, run_id: i64) -> Result<bool, StoreError> {
    let open: Option<i64> = conn
        .query_row(
            "SELECT 1 FROM task_runs WHERE id = ?1 AND ended_at IS NULL",
            [run_id],
            |r| r.get(0),
        )
        .optional()
        .sql("reading the run")?;
    Ok(open.is_some())
}

/// Inserts the `task_runs` row and claims the card for it: `running`, with upstream's claim
/// columns (the lease, an expiry past the runtime limit), started now if it never was.
fn insert_run(
    tx: &Transaction<'_>,
    task_id: &str,
    profile: &str,
    lease: &str,
    runtime: Duration,
    now_ms: i64,
) -> Result<i64, StoreError> {
    let now = now_ms.div_euclid(1000);
    let runtime_secs = i64::try_from(runtime.as_secs()).unwrap_or(i64::MAX);
    let expires = now
        .saturating_add(runtime_secs)
        .saturating_add(CLAIM_GRACE_SECS);
    tx.execute(
        "INSERT INTO task_runs (task_id, profile, status, claim_lock, claim_expires,
                               max_runtime_seconds, started_at)
         VALUES (?1, ?2, 'running', ?3, ?4, ?5, ?6)",
        params![task_id, profile, lease, expires, runtime_secs, now],
    )
    .sql("recording the run")?;
    let run_id = tx.last_insert_rowid();
    tx.execute(
        "UPDATE tasks SET status = 'running', claim_lock = ?2, claim_expires = ?3,
             current_run_id = ?4, worker_pid = NULL, started_at = COALESCE(started_at, ?5),
             block_kind = NULL
         WHERE id = ?1",
        params![task_id, lease, expires, run_id, now],
    )
    .sql("claiming the card")?;
    Ok(run_id)
}

/// Room past a run's runtime limit in its claim's expiry, for the spawner to stop the worker
/// and record the end.
const CLAIM_GRACE_SECS: i64 = 60;

/// The card columns closing a run needs.
struct RunRow {
    task_id: String,
    lease: Option<String>,
    open: bool,
}

fn run_row(conn: &Connection, run_id: i64) -> Result<Option<RunRow>, StoreError> {
    conn.query_row(
        "SELECT task_id, claim_lock, ended_at IS NULL FROM task_runs WHERE id = ?1",
        [run_id],
        |r| {
            Ok(RunRow {
                task_id: lenient::text(r, 0)?.unwrap_or_default(),
                lease: lenient::text(r, 1)?,
                open: r.get(2)?,
            })
        },
    )
    .optional()
    .sql("reading the run")
}

pub(crate) fn close_run(
    tx: &Transaction<'_>,
    close: &RunClose,
) -> Result<Option<Closed>, StoreError> {
    let Some(run) = run_row(tx, close.run_id)?.filter(|r| r.open) else {
        return Ok(None);
    };
    if close.fence.is_some() && close.fence != run.lease {
        return Ok(None);
    }
    let task_id = run.task_id;
    let outcome = recorded_outcome(tx, close, &task_id)?;
    let max_retries: Option<i64> = tx
        .query_row(
            "SELECT max_retries FROM tasks WHERE id = ?1",
            [&task_id],
            |r| lenient::int(r, 0),
        )
        .optional()
        .sql("reading the card")?
        .flatten();
    let rules = close.rules.for_card(max_retries);
    let before = read_spawn_state(tx, &task_id)?;
    let end = RunEnd {
        run_id: close.run_id,
        outcome,
        kind: close.kind,
        reason: &close.reason,
        by: &close.by,
        now_ms: close.now_ms,
    };
    let Ended { step, parked, card } = rules.end(before.as_ref(), &end);
    write_spawn_step(tx, &task_id, Some(close.run_id), before.as_ref(), &step)?;
    let failures = step.after.as_ref().map_or(0, |s| s.failures);
    end_run_row(tx, close, outcome)?;
    let card_is_this_runs: Option<i64> = tx
        .query_row(
            "SELECT 1 FROM tasks WHERE id = ?1 AND current_run_id = ?2",
            params![task_id, close.run_id],
            |r| r.get(0),
        )
        .optional()
        .sql("reading the card")?;
    if card_is_this_runs.is_some() {
        let result = close
            .result
            .as_deref()
            .or((outcome == RunOutcome::Completed).then_some(close.reason.as_str()));
        move_card(tx, &task_id, card, close.now_ms, result)?;
    }
    close_requests_in_flight(tx, close.run_id, close.now_ms)?;
    fill_spawn_ledger(tx, close.run_id, outcome, &close.reason)?;
    if let Some(pause) = &close.pause {
        set_pause(
            tx,
            pause.until_ms,
            &pause.reason,
            close.now_ms,
            pause.request_started_ms,
        )?;
    }
    if let Some(unreachable) = &close.unreachable {
        pause_unreachable(tx, unreachable, close.now_ms)?;
    }
    Ok(Some(Closed {
        task_id,
        outcome,
        parked,
        card,
        failures,
        limit: rules.budget.limit,
    }))
}

/// The outcome a run's end is recorded as: a block's kind decides whether it is charged (a
/// `dependency` block on no open parent is, see `BlockKind::run_outcome`), and a run ended as
/// `held` that had in fact reached the provider is `refused` (only a run that cost nothing goes
/// uncharged).
fn recorded_outcome(
    conn: &Connection,
    close: &RunClose,
    task_id: &str,
) -> Result<RunOutcome, StoreError> {
    if let (RunOutcome::Blocked, Some(kind)) = (close.outcome, close.kind) {
        return Ok(kind.run_outcome(has_open_parent(conn, task_id)?));
    }
    if close.outcome == RunOutcome::Held && delivered(conn, close.run_id)? > 0 {
        return Ok(RunOutcome::Refused);
    }
    Ok(close.outcome)
}

fn has_open_parent(conn: &Connection, task_id: &str) -> Result<bool, StoreError> {
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

/// Requests of a run that may have reached the provider (every ledger row of it but those that
/// never did).
fn delivered(conn: &Connection, run_id: i64) -> Result<u64, StoreError> {
    conn.query_row(
        "SELECT COUNT(*) FROM hermes_aux_ledger WHERE run_id = ?1 AND purpose = ?2
           AND outcome != ?3",
        params![
            run_id,
            Half::Worker.as_str(),
            LedgerOutcome::Unreachable.as_str()
        ],
        |r| r.get::<_, i64>(0),
    )
    .map(|n| u64::try_from(n).unwrap_or(0))
    .sql("counting the run's requests")
}

fn end_run_row(
    tx: &Transaction<'_>,
    close: &RunClose,
    outcome: RunOutcome,
) -> Result<(), StoreError> {
    let (summary, error) = match outcome {
        RunOutcome::Completed | RunOutcome::Blocked => (Some(close.reason.as_str()), None),
        _ => (None, Some(close.reason.as_str())),
    };
    let metadata = close.metadata.as_ref().map(super::payload_text);
    tx.execute(
        "UPDATE task_runs SET status = ?2, outcome = ?2, ended_at = ?3, summary = ?4, error = ?5,
             metadata = COALESCE(?6, metadata)
         WHERE id = ?1",
        params![
            close.run_id,
            outcome.as_str(),
            close.now_ms.div_euclid(1000),
            summary,
            error,
            metadata
        ],
    )
    .sql("closing the run")?;
    Ok(())
}

/// Moves a card out of `running` as a run's end says, clearing its claim; a completion stores
/// its `result` and promotes the cards that waited only for it.
fn move_card(
    tx: &Transaction<'_>,
    task_id: &str,
    card: CardMove,
    now_ms: i64,
    result: Option<&str>,
) -> Result<(), StoreError> {
    let kind = match card {
        CardMove::Blocked(kind) => kind.map(BlockKind::as_str),
        CardMove::WaitsForParents => Some(BlockKind::Dependency.as_str()),
        CardMove::Done | CardMove::Ready => None,
    };
    let done = card == CardMove::Done;
    tx.execute(
        "UPDATE tasks SET status = ?2, block_kind = ?3, claim_lock = NULL, claim_expires = NULL,
             worker_pid = NULL, current_run_id = NULL,
             completed_at = CASE WHEN ?4 THEN ?5 ELSE completed_at END,
             result = CASE WHEN ?4 THEN COALESCE(?6, result) ELSE result END
         WHERE id = ?1",
        params![
            task_id,
            card.status(),
            kind,
            done,
            now_ms.div_euclid(1000),
            result
        ],
    )
    .sql("moving the card")?;
    if done {
        let children = super::board::child_ids(tx, task_id)?;
        promote_ready(tx, &children)?;
    }
    Ok(())
}

/// A run's requests still open when it ends may have been billed: `unknown`, as a decompose
/// attempt's are.
fn close_requests_in_flight(
    tx: &Transaction<'_>,
    run_id: i64,
    now_ms: i64,
) -> Result<(), StoreError> {
    tx.execute(
        &format!(
            "UPDATE hermes_aux_ledger SET outcome = ?2, ended_at_ms = ?3, ended_boot_ms = {},
                 detail = 'the run ended with this request in flight; it may have been billed'
             WHERE run_id = ?1 AND outcome = ?4",
            super::state_rows::ended_boot_ms("?3")
        ),
        params![
            run_id,
            LedgerOutcome::Unknown.as_str(),
            now_ms,
            LedgerOutcome::InFlight.as_str()
        ],
    )
    .sql("closing the run's requests")?;
    Ok(())
}

/// The run's end on its spawn-ledger row: the outcome, whether it was charged, and its requests
/// and tokens (S9).
fn fill_spawn_ledger(
    tx: &Transaction<'_>,
    run_id: i64,
    outcome: RunOutcome,
    detail: &str,
) -> Result<(), StoreError> {
    tx.execute(
        "UPDATE hermes_spawn_ledger SET outcome = ?2, charged = ?3, detail = ?4,
             requests = (SELECT COUNT(*) FROM hermes_aux_ledger WHERE run_id = ?1),
             prompt_tokens = (SELECT SUM(MAX(COALESCE(CAST(prompt_tokens AS INTEGER), 0), 0))
                              FROM hermes_aux_ledger WHERE run_id = ?1),
             completion_tokens = (SELECT SUM(MAX(COALESCE(CAST(completion_tokens AS INTEGER), 0), 0))
                                  FROM hermes_aux_ledger WHERE run_id = ?1)
         WHERE run_id = ?1",
        params![
            run_id,
            outcome.as_str(),
            outcome.charged(),
            crate::core::text::cut(detail, crate::core::text::PROVIDER_MESSAGE_CAP).as_ref()
        ],
    )
    .sql("recording the run on the spawn ledger")?;
    Ok(())
}

/// A card's spawn state, if it has a row; its cells read leniently.
pub(crate) fn read_spawn_state(
    conn: &Connection,
    task_id: &str,
) -> Result<Option<SpawnState>, StoreError> {
    conn.prepare_cached(&format!(
        "SELECT {} FROM hermes_spawn_state s WHERE task_id = ?1",
        spawn_state_columns("s")
    ))
    .and_then(|mut stmt| stmt.query_row([task_id], spawn_cells).optional())
    .sql("reading the card's spawn state")
}

/// Writes what a spawn transition decided: the state, then its events (tied to `run_id` when
/// the transition is about a run).
pub(crate) fn write_spawn_step(
    tx: &Transaction<'_>,
    task_id: &str,
    run_id: Option<i64>,
    before: Option<&SpawnState>,
    step: &SpawnStep,
) -> Result<(), StoreError> {
    if let Some(after) = &step.after {
        if before != Some(after) {
            // The backoff's end on this boot's clock too, always with it (see `store::frame`).
            tx.execute(
                &format!(
                    "INSERT INTO hermes_spawn_state
                         (task_id, spawns, failures, due_at_ms, parked_at_ms, last_error,
                          due_boot, due_boot_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, {}, {})
                     ON CONFLICT(task_id) DO UPDATE SET spawns = excluded.spawns,
                         failures = excluded.failures, due_at_ms = excluded.due_at_ms,
                         parked_at_ms = excluded.parked_at_ms, last_error = excluded.last_error,
                         due_boot = excluded.due_boot, due_boot_ms = excluded.due_boot_ms",
                    frame::boot_of("?4"),
                    frame::boot_ms_of("?4")
                ),
                params![
                    task_id,
                    after.spawns,
                    after.failures,
                    after.due_at_ms,
                    after.parked_at_ms,
                    after.last_error
                ],
            )
            .sql("recording the card's spawn state")?;
        }
    }
    for record in &step.records {
        add_event_in_run(tx, task_id, run_id, record.kind, Some(&record.payload))?;
    }
    Ok(())
}

#[cfg(test)]
#[path = "runs_tests.rs"]
mod tests;
