//! The board-wide guards on automatic attempts, kept in the board itself so they hold across
//! restarts and processes: the provider pause after a refusal and the pause while the provider
//! cannot be reached (B5), and the hourly ceiling on paid calls (B6). Both the attempt side
//! (`store::decompose`) and the ledger side (`store::ledger`) read them from here.

use rusqlite::{params, Connection, OptionalExtension};
use serde::Serialize;

use super::{frame, SqlResultExt, Store, StoreError};
use crate::core::{BeginRefusal, LedgerOutcome};

/// One hour in milliseconds: the ceiling's rolling window.
pub const HOUR_MS: i64 = 3_600_000;

pub(crate) const PAUSE_KEY: &str = "provider_pause";
pub(crate) const UNREACHABLE_KEY: &str = "provider_unreachable";

/// A board-wide pause.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pause {
    pub until_ms: i64,
    pub reason: String,
    /// When it was recorded (unix ms).
    pub set_at_ms: i64,
}

/// Whether automatic attempts may run now (B5, B6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AutoGate {
    Open { calls_left: u64 },
    Paused { until_ms: i64, reason: String },
    CeilingReached { calls: u64, limit: u32 },
}

impl Store {
    /// Whether automatic attempts may run now: the provider pause (B5) and the hourly ceiling
    /// (B6), both read from the board so they hold across restarts and processes.
    pub fn auto_gate(&self, now_ms: i64, calls_per_hour: u32) -> Result<AutoGate, StoreError> {
        self.read(|conn| auto_gate(conn, now_ms, calls_per_hour))
    }

    /// Paid calls (ledger rows) started at or after `since_ms`. The product counts them inside
    /// its gate's own read; this is for unit tests.
    #[cfg(test)]
    pub fn calls_since(&self, since_ms: i64) -> Result<u64, StoreError> {
        self.read(|conn| calls_since(conn, since_ms))
    }

    /// The board-wide provider pause, if one was ever set (it may have expired).
    pub fn pause(&self) -> Result<Option<Pause>, StoreError> {
        self.read(board_pause)
    }

    /// The board-wide pause in force at `now_ms`, whichever kind it is (the longer, when both
    /// run): what holds back every automatic attempt until it ends.
    pub fn pause_in_force(&self, now_ms: i64) -> Result<Option<Pause>, StoreError> {
        self.read(|conn| pause_in_force(conn, now_ms))
    }

    /// The board-wide pause for an unreachable provider, if one was ever set (it may have
    /// expired). The product reads it inside its gate's own read; this is for unit tests.
    #[cfg(test)]
    pub fn unreachable_pause(&self) -> Result<Option<Pause>, StoreError> {
        self.read(unreachable_pause)
    }

    /// Pauses automatic attempts board-wide until `until_ms`. A later pause never shortens a
    /// longer one already in force. The product records a pause only with the failure that
    /// caused it; this is how unit tests arrange one.
    #[cfg(test)]
    pub fn set_pause(&mut self, until_ms: i64, reason: &str) -> Result<(), StoreError> {
        let now = crate::clock::now_ms();
        self.write(|tx| set_pause(tx, until_ms, reason, now, None))
    }
}

pub(crate) fn auto_gate(
    conn: &Connection,
    now_ms: i64,
    calls_per_hour: u32,
) -> Result<AutoGate, StoreError> {
    if let Some(pause) = pause_in_force(conn, now_ms)? {
        return Ok(AutoGate::Paused {
            until_ms: pause.until_ms,
            reason: pause.reason,
        });
    }
    let calls = calls_since(conn, now_ms.saturating_sub(HOUR_MS))?;
    if calls >= u64::from(calls_per_hour) {
        return Ok(AutoGate::CeilingReached {
            calls,
            limit: calls_per_hour,
        });
    }
    Ok(AutoGate::Open {
        calls_left: u64::from(calls_per_hour) - calls,
    })
}

/// Every board-wide guard in force at `now_ms`, as the refusals they give: the pause (the
/// longer one, when a refusal's and an unreachable provider's both run) and the hourly ceiling.
/// What an explicit `kanban decompose ID` is refused by, and what `--force` goes past.
pub(crate) fn guards_in_force(
    conn: &Connection,
    now_ms: i64,
    calls_per_hour: u32,
) -> Result<Vec<BeginRefusal>, StoreError> {
    let mut in_force = Vec::new();
    if let Some(pause) = pause_in_force(conn, now_ms)? {
        in_force.push(BeginRefusal::Paused {
            until_ms: pause.until_ms,
            reason: pause.reason,
        });
    }
    let calls = calls_since(conn, now_ms.saturating_sub(HOUR_MS))?;
    if calls >= u64::from(calls_per_hour) {
        in_force.push(BeginRefusal::CeilingReached {
            calls,
            limit: calls_per_hour,
        });
    }
    Ok(in_force)
}

/// Calls that may have been billed (every ledger row but those that never reached the provider)
/// started at or after `since_ms`.
///
/// Each row's start is read in the reader's frame (see `store::frame`): the calls of the
/// reader's boot by their boot clock (an index on it), the others by their wall time (the index
/// on it, past which only the last hour's rows are looked at).
pub(crate) fn calls_since(conn: &Connection, since_ms: i64) -> Result<u64, StoreError> {
    let same_boot = frame::same_boot("boot", "started_boot_ms");
    let sql = format!(
        "SELECT (SELECT COUNT(*) FROM hermes_aux_ledger
                 WHERE boot = {boot} AND started_boot_ms >= ?1 - {offset} AND outcome != ?2)
              + (SELECT COUNT(*) FROM hermes_aux_ledger
                 WHERE started_at_ms >= ?1 AND NOT COALESCE({same_boot}, 0) AND outcome != ?2)",
        boot = frame::FRAME_BOOT,
        offset = frame::FRAME_OFFSET,
    );
    conn.prepare_cached(&sql)
        .and_then(|mut stmt| {
            stmt.query_row(
                params![since_ms, LedgerOutcome::Unreachable.as_str()],
                |r| r.get::<_, i64>(0),
            )
        })
        .map(|n| u64::try_from(n).unwrap_or(0))
        .sql("counting paid calls")
}

/// The board-wide pause in force at `now_ms`: the longer one, when a refusal's and an
/// unreachable provider's both run.
pub(crate) fn pause_in_force(conn: &Connection, now_ms: i64) -> Result<Option<Pause>, StoreError> {
    let pauses = [board_pause(conn)?, unreachable_pause(conn)?];
    Ok(pauses
        .into_iter()
        .flatten()
        .filter(|p| p.until_ms > now_ms)
        .max_by_key(|p| p.until_ms))
}

pub(crate) fn board_pause(conn: &Connection) -> Result<Option<Pause>, StoreError> {
    pause_at(conn, PAUSE_KEY)
}

pub(crate) fn unreachable_pause(conn: &Connection) -> Result<Option<Pause>, StoreError> {
    pause_at(conn, UNREACHABLE_KEY)
}

fn pause_at(conn: &Connection, key: &str) -> Result<Option<Pause>, StoreError> {
    let sql = format!(
        "SELECT {}, value, {} FROM hermes_board_state
         WHERE key = ?1 AND until_ms IS NOT NULL",
        frame::seen("until_ms", "boot", "until_boot_ms"),
        frame::seen("updated_at_ms", "boot", "updated_boot_ms"),
    );
    conn.prepare_cached(&sql)
        .and_then(|mut stmt| {
            stmt.query_row([key], |r| {
                Ok(Pause {
                    until_ms: r.get(0)?,
                    reason: r.get::<_, Option<String>>(1)?.unwrap_or_default(),
                    set_at_ms: r.get(2)?,
                })
            })
            .optional()
        })
        .sql("reading a board pause")
}

/// Records the provider pause inside the caller's transaction; a pause already in force that
/// lasts at least as long is kept. So is one recorded since `refused_request_started_ms`: the
/// refusal that set it and this one belong to the same episode (requests that were in flight
/// together), and the episode pauses once, not once per request.
pub(crate) fn set_pause(
    conn: &Connection,
    until_ms: i64,
    reason: &str,
    now_ms: i64,
    refused_request_started_ms: Option<i64>,
) -> Result<(), StoreError> {
    let kept = board_pause(conn)?.is_some_and(|current| {
        // An expired pause always ends before a new one, so only one in force can be kept.
        let in_force = current.until_ms > now_ms;
        current.until_ms >= until_ms
            || (in_force
                && refused_request_started_ms.is_some_and(|started| current.set_at_ms >= started))
    });
    if kept {
        return Ok(());
    }
    put_pause(conn, PAUSE_KEY, until_ms, reason, now_ms)
}

/// Records the unreachable-provider pause inside the caller's transaction (a longer one in
/// force is kept).
pub(crate) fn set_unreachable_pause(
    conn: &Connection,
    until_ms: i64,
    reason: &str,
    now_ms: i64,
) -> Result<(), StoreError> {
    if unreachable_pause(conn)?.is_some_and(|current| current.until_ms >= until_ms) {
        return Ok(());
    }
    put_pause(conn, UNREACHABLE_KEY, until_ms, reason, now_ms)
}

fn put_pause(
    conn: &Connection,
    key: &str,
    until_ms: i64,
    reason: &str,
    now_ms: i64,
) -> Result<(), StoreError> {
    conn.execute(
        &format!(
            "INSERT INTO hermes_board_state
                 (key, value, until_ms, updated_at_ms, boot, until_boot_ms, updated_boot_ms)
             VALUES (?1, ?2, ?3, ?4, {}, {}, {})
             ON CONFLICT(key) DO UPDATE SET
                 value = excluded.value, until_ms = excluded.until_ms,
                 updated_at_ms = excluded.updated_at_ms, boot = excluded.boot,
                 until_boot_ms = excluded.until_boot_ms,
                 updated_boot_ms = excluded.updated_boot_ms",
            frame::boot_id(),
            frame::boot_ms_of("?3"),
            frame::boot_ms_of("?4"),
        ),
        params![key, reason, until_ms, now_ms],
    )
    .sql("recording a board pause")?;
    Ok(())
}

/// Requests in a row, newest first, that never reached the provider (looking back at most
/// `limit` finished rows).
pub(crate) fn unreachable_streak(conn: &Connection, limit: u32) -> Result<u32, StoreError> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT outcome FROM hermes_aux_ledger WHERE outcome != ?2
             ORDER BY id DESC LIMIT ?1",
        )
        .sql("reading recent ledger rows")?;
    let mut rows = stmt
        .query(params![limit, LedgerOutcome::InFlight.as_str()])
        .sql("reading recent ledger rows")?;
    let mut streak = 0;
    while let Some(row) = rows.next().sql("reading recent ledger rows")? {
        let outcome: String = row.get(0).sql("reading a ledger row")?;
        if outcome != LedgerOutcome::Unreachable.as_str() {
            break;
        }
        streak += 1;
    }
    Ok(streak)
}
