//! The board-wide guards on automatic attempts, kept in the board itself so they hold across
//! restarts and processes: the provider pause (B5) and the hourly ceiling on paid calls (B6).
//! Both the attempt side (`store::decompose`) and the ledger side (`store::ledger`) read them
//! from here.

use rusqlite::{params, Connection, OptionalExtension};
use serde::Serialize;

use super::{SqlResultExt, Store, StoreError};

/// One hour in milliseconds: the ceiling's rolling window.
pub const HOUR_MS: i64 = 3_600_000;

const PAUSE_KEY: &str = "provider_pause";

/// The board-wide provider pause.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pause {
    pub until_ms: i64,
    pub reason: String,
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

    /// Paid calls (ledger rows) started at or after `since_ms`.
    pub fn calls_since(&self, since_ms: i64) -> Result<u64, StoreError> {
        self.read(|conn| calls_since(conn, since_ms))
    }

    /// The board-wide provider pause, if one was ever set (it may have expired).
    pub fn pause(&self) -> Result<Option<Pause>, StoreError> {
        self.read(board_pause)
    }

    /// Pauses automatic attempts board-wide until `until_ms`. A later pause never shortens a
    /// longer one already in force.
    pub fn set_pause(&mut self, until_ms: i64, reason: &str) -> Result<(), StoreError> {
        let now = crate::clock::now_ms();
        self.write(|tx| set_pause(tx, until_ms, reason, now))
    }
}

pub(crate) fn auto_gate(
    conn: &Connection,
    now_ms: i64,
    calls_per_hour: u32,
) -> Result<AutoGate, StoreError> {
    if let Some(pause) = board_pause(conn)?.filter(|p| p.until_ms > now_ms) {
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

pub(crate) fn calls_since(conn: &Connection, since_ms: i64) -> Result<u64, StoreError> {
    conn.query_row(
        "SELECT COUNT(*) FROM hermes_aux_ledger WHERE started_at_ms >= ?1",
        [since_ms],
        |r| r.get::<_, i64>(0),
    )
    .map(|n| u64::try_from(n).unwrap_or(0))
    .sql("counting paid calls")
}

pub(crate) fn board_pause(conn: &Connection) -> Result<Option<Pause>, StoreError> {
    conn.query_row(
        "SELECT until_ms, value FROM hermes_board_state WHERE key = ?1 AND until_ms IS NOT NULL",
        [PAUSE_KEY],
        |r| {
            Ok(Pause {
                until_ms: r.get(0)?,
                reason: r.get::<_, Option<String>>(1)?.unwrap_or_default(),
            })
        },
    )
    .optional()
    .sql("reading the provider pause")
}

/// Records the pause inside the caller's transaction; a pause already in force that lasts at
/// least as long is kept.
pub(crate) fn set_pause(
    conn: &Connection,
    until_ms: i64,
    reason: &str,
    now_ms: i64,
) -> Result<(), StoreError> {
    // An expired pause always ends before a new one, so only a pause still in force can
    // outlast this one.
    if board_pause(conn)?.is_some_and(|current| current.until_ms >= until_ms) {
        return Ok(());
    }
    conn.execute(
        "INSERT INTO hermes_board_state (key, value, until_ms, updated_at_ms)
         VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT(key) DO UPDATE SET
             value = excluded.value, until_ms = excluded.until_ms,
             updated_at_ms = excluded.updated_at_ms",
        params![PAUSE_KEY, reason, until_ms, now_ms],
    )
    .sql("recording the provider pause")?;
    Ok(())
}
