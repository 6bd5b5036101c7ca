//! The board's times as this process reads and writes them (see `crate::clock`): every moment a
//! bound rests on is kept as the writer's wall time (`…_ms`, unix milliseconds) beside its boot's
//! clock (`…boot_ms`) and the boot's id (`…boot`). A connection knows the reader's frame (its
//! boot, and its wall clock's distance from the boot's clock) in a one-row temporary table, set
//! before every transaction, so that every statement reads a stored time in the reader's wall
//! frame ([`seen`]) and writes its boot's clock beside a wall time ([`boot_id`],
//! [`boot_ms_of`]), whichever function runs it.
//!
//! A time recorded on the reader's boot is read by the boot's clock: no wall clock, the
//! reader's or the writer's, ahead, behind or stepped, moves it. A time of another boot or host
//! (or written by an older build, or by hand: see the triggers in `store::schema`) is read as
//! its wall time, the only clock the two share.

use rusqlite::{params, Connection};

use super::{SqlResultExt, StoreError};
use crate::clock::Frame;

/// The reader's boot id, in SQL (NULL when the reader has no boot clock).
pub(crate) const FRAME_BOOT: &str = "(SELECT boot FROM temp.hermes_frame)";
/// The reader's wall clock minus its boot's clock, in SQL.
pub(crate) const FRAME_OFFSET: &str = "(SELECT offset_ms FROM temp.hermes_frame)";

/// Creates the connection's frame table (a temporary table: every connection has its own, and
/// writing it takes no lock on the board).
pub(crate) fn install(conn: &Connection) -> Result<(), StoreError> {
    conn.execute_batch(
        "CREATE TEMP TABLE IF NOT EXISTS hermes_frame (
             id INTEGER PRIMARY KEY CHECK (id = 1),
             boot TEXT,
             offset_ms INTEGER NOT NULL
         );
         INSERT OR IGNORE INTO temp.hermes_frame (id, boot, offset_ms) VALUES (1, NULL, 0);",
    )
    .sql("creating the connection's time frame")
}

/// Sets the reader's frame for the statements that follow.
pub(crate) fn set(conn: &Connection, frame: Frame) -> Result<(), StoreError> {
    conn.execute(
        "UPDATE temp.hermes_frame SET boot = ?1, offset_ms = ?2 WHERE id = 1",
        params![frame.boot, frame.offset_ms],
    )
    .sql("setting the connection's time frame")?;
    Ok(())
}

/// Whether the stored time whose boot columns are `boot` and `boot_ms` was recorded on the
/// reader's boot (NULL, so false, when the reader has none).
pub(crate) fn same_boot(boot: &str, boot_ms: &str) -> String {
    format!("({boot} = {FRAME_BOOT} AND {boot_ms} IS NOT NULL)")
}

/// A stored time in the reader's wall frame: by the boot's clock when it was recorded on the
/// reader's boot, else its wall time `wall`.
pub(crate) fn seen(wall: &str, boot: &str, boot_ms: &str) -> String {
    format!(
        "CASE WHEN {} THEN {boot_ms} + {FRAME_OFFSET} ELSE {wall} END",
        same_boot(boot, boot_ms)
    )
}

/// The boot column of a row whose times are written now (the reader's boot).
pub(crate) fn boot_id() -> &'static str {
    FRAME_BOOT
}

/// The boot column of the single time `wall` written now: NULL along with it.
pub(crate) fn boot_of(wall: &str) -> String {
    format!("CASE WHEN {wall} IS NULL THEN NULL ELSE {FRAME_BOOT} END")
}

/// The boot-clock column of a time `wall` (an SQL expression in the reader's wall frame):
/// NULL when the reader has no boot clock, or `wall` is NULL.
pub(crate) fn boot_ms_of(wall: &str) -> String {
    format!("CASE WHEN {FRAME_BOOT} IS NULL THEN NULL ELSE {wall} - {FRAME_OFFSET} END")
}
