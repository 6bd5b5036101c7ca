//! Large boards for the store benchmarks, written with raw SQL in one transaction.
//!
//! Creating 100k cards through `Store::create_task` would take minutes (one fsync'd transaction
//! each) and would measure the CLI, not the dispatcher. The board is still opened by
//! [`Store::open`] first, so its tables and indexes are exactly the ones users get, and the rows
//! follow the shape real boards have:
//!
//! | share | status | decompose state |
//! |---|---|---|
//! | 5 % | triage | due now (never attempted) |
//! | 5 % | triage | in backoff: 1–2 failed attempts, due 1–60 min from now |
//! | 20 % | todo | waits for a ready card of its group (a link) |
//! | 20 % | ready | — |
//! | 10 % | running | `started_at` set |
//! | 30 % | done | one in nine was decomposed once (a closed row: `due_at_ms` NULL) |
//! | 10 % | archived | — |
//!
//! Every card has its `created` event. The ledger holds one row per failed attempt; at most
//! [`LEDGER_ROWS_LAST_HOUR`] of them fall in the last hour, because the hourly ceiling keeps a
//! real board from ever holding more, and the rest are spread over the previous 30 days.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use hermes::store::Store;
use rusqlite::{params, Connection};

/// Paid calls in the rolling hour: below the default ceiling (120), so the gate stays open and
/// the selection query runs every tick, as it does on a busy but healthy board.
pub const LEDGER_ROWS_LAST_HOUR: usize = 100;

/// The hourly ceiling the benchmarks pass to `auto_gate` (the default of `kanban.decompose_calls_per_hour`).
pub const CALLS_PER_HOUR: u32 = 120;

const THIRTY_DAYS_MS: i64 = 30 * 24 * 3_600_000;

/// How many cards of each kind a board of `tasks` cards holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Census {
    pub tasks: usize,
    pub triage_due: usize,
    pub triage_backoff: usize,
}

/// A benchmark board on disk.
pub struct BenchBoard {
    pub path: PathBuf,
    pub census: Census,
}

/// A `t_` id that looks random (ids are random in real boards, so their index order is not
/// insertion order) but is the same on every run. Multiplying by an odd constant is a bijection
/// on `u32`, so ids never collide.
pub fn task_id(index: usize) -> String {
    let n = (index as u32).wrapping_mul(0x9E37_79B1) ^ 0x5bd1_e995;
    format!("t_{n:08x}")
}

/// Where card `index` (created at `created_at`) is in its life: status, started and completed
/// times, assignee. A group of ten holds one of each shape.
fn lifecycle(
    index: usize,
    created_at: i64,
) -> (&'static str, Option<i64>, Option<i64>, Option<&'static str>) {
    match index % 10 {
        0 => ("triage", None, None, None),
        1 | 2 => ("todo", None, None, Some("default")),
        3 | 4 => ("ready", None, None, Some("default")),
        5 => ("running", Some(created_at + 30), None, Some("default")),
        6..=8 => (
            "done",
            Some(created_at + 30),
            Some(created_at + 50),
            Some("default"),
        ),
        _ => ("archived", None, None, None),
    }
}

/// Writes a board of `tasks` cards at `dir/kanban.db`, as of `now_ms`.
pub fn build(dir: &Path, tasks: usize, now_ms: i64) -> anyhow::Result<BenchBoard> {
    let path = dir.join("kanban.db");
    // The real schema and indexes, then a plain connection for the bulk load.
    drop(Store::open(&path).with_context(|| format!("creating {}", path.display()))?);
    let mut conn =
        Connection::open(&path).with_context(|| format!("opening {}", path.display()))?;
    let tx = conn.transaction().context("starting the bulk load")?;
    let mut census = Census {
        tasks,
        triage_due: 0,
        triage_backoff: 0,
    };
    let now_secs = now_ms / 1000;
    {
        let mut task = tx.prepare(
            "INSERT INTO tasks (id, title, body, assignee, status, priority, created_by, created_at, started_at, completed_at)
             VALUES (?1, ?2, ?3, ?4, ?5, 0, 'user', ?6, ?7, ?8)",
        )?;
        let mut event = tx.prepare(
            "INSERT INTO task_events (task_id, kind, payload, created_at) VALUES (?1, 'created', '{\"by\": \"user\"}', ?2)",
        )?;
        let mut link =
            tx.prepare("INSERT INTO task_links (parent_id, child_id) VALUES (?1, ?2)")?;
        let mut state = tx.prepare(
            "INSERT INTO hermes_decompose_state (task_id, attempts, last_attempt_at_ms, last_error, due_at_ms)
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        let mut ledger = tx.prepare(
            "INSERT INTO hermes_aux_ledger (task_id, purpose, origin, attempt, try, started_at_ms, ended_at_ms, outcome, http_status)
             VALUES (?1, 'decompose', 'gateway', ?2, 1, ?3, ?4, 'server_error', 500)",
        )?;
        let mut ledger_rows = 0usize;
        for index in 0..tasks {
            let id = task_id(index);
            // Oldest first, one card a minute, ending now.
            let created_at = now_secs - 60 * (tasks - index) as i64;
            let group = index / 10;
            let (status, started_at, completed_at, assignee) = lifecycle(index, created_at);
            task.execute(params![
                id,
                format!("card {index}"),
                format!("what card {index} is about"),
                assignee,
                status,
                created_at,
                started_at,
                completed_at
            ])?;
            event.execute(params![id, created_at])?;
            match index % 10 {
                0 if group % 2 == 0 => {
                    state.execute(params![
                        id,
                        0,
                        None::<i64>,
                        None::<String>,
                        created_at * 1000
                    ])?;
                    census.triage_due += 1;
                }
                0 => {
                    let attempts = 1 + (group as i64 / 2) % 2;
                    let due = now_ms + 60_000 * (1 + (group % 60) as i64);
                    // The most recent failures are in the rolling hour, up to the ceiling's
                    // share; older ones are spread over the past month.
                    let last_attempt = if ledger_rows < LEDGER_ROWS_LAST_HOUR {
                        now_ms - 30_000 * ledger_rows as i64
                    } else {
                        now_ms - 3_600_000 - (ledger_rows as i64 * 7_919_000) % THIRTY_DAYS_MS
                    };
                    state.execute(params![
                        id,
                        attempts,
                        last_attempt,
                        "HTTP 500: upstream exploded",
                        due
                    ])?;
                    ledger.execute(params![id, attempts, last_attempt, last_attempt + 200])?;
                    ledger_rows += 1;
                    census.triage_backoff += 1;
                }
                1 | 2 => {
                    // Waits for the ready card of its group.
                    link.execute(params![task_id(group * 10 + 3), id])?;
                }
                6 if group % 3 == 0 => {
                    state.execute(params![
                        id,
                        1,
                        created_at * 1000,
                        None::<String>,
                        None::<i64>
                    ])?;
                }
                _ => {}
            }
        }
    }
    // No ANALYZE: the store never runs it, so users' boards have no planner statistics either.
    tx.commit().context("committing the bulk load")?;
    Ok(BenchBoard { path, census })
}

/// Deletes cards and everything that hangs off them, so a benchmark that adds rows every
/// iteration keeps measuring a board of the same size.
pub fn remove_cards(conn: &mut Connection, ids: &[String]) -> anyhow::Result<()> {
    let tx = conn.transaction().context("starting the clean-up")?;
    for id in ids {
        tx.execute(
            "DELETE FROM task_links WHERE parent_id = ?1 OR child_id = ?1",
            [id],
        )?;
        tx.execute("DELETE FROM task_events WHERE task_id = ?1", [id])?;
        tx.execute(
            "DELETE FROM hermes_decompose_state WHERE task_id = ?1",
            [id],
        )?;
        tx.execute("DELETE FROM tasks WHERE id = ?1", [id])?;
    }
    tx.commit().context("committing the clean-up")?;
    Ok(())
}
