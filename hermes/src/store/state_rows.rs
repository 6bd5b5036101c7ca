//! The rows a card's state is kept in, read and written the same way by every side of the
//! store: the decompose and spawn state rows, the events a transition writes with them, and the
//! clock cells of the ledgers' rows.
//!
//! A leaf of the store: the board, the claims, the ledger, decompose and the runs all build on
//! it, and it uses none of them, so none of them has to reach into another's file for a row
//! helper.

use rusqlite::{params, Connection, OptionalExtension, Transaction};
use serde_json::Value;

use super::pyjson::to_payload_text;
use super::{frame, lenient, SqlResultExt, StoreError};
use crate::clock::now_secs;
use crate::core::card::Step;
use crate::core::{DecomposeState, SpawnState};

/// Appends an event (no run). An absent or empty-object payload is stored as NULL, as upstream
/// does. Returns the event id.
pub(crate) fn add_event(
    tx: &Transaction<'_>,
    task_id: &str,
    kind: &str,
    payload: Option<&Value>,
) -> Result<i64, StoreError> {
    add_event_in_run(tx, task_id, None, kind, payload)
}

pub(crate) fn add_event_in_run(
    tx: &Transaction<'_>,
    task_id: &str,
    run_id: Option<i64>,
    kind: &str,
    payload: Option<&Value>,
) -> Result<i64, StoreError> {
    let text = payload
        .filter(|p| !matches!(p, Value::Null) && p.as_object().is_none_or(|o| !o.is_empty()))
        .map(to_payload_text);
    tx.execute(
        "INSERT INTO task_events (task_id, run_id, kind, payload, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![task_id, run_id, kind, text, now_secs()],
    )
    .sql(format!("recording a {kind} event"))?;
    Ok(tx.last_insert_rowid())
}

/// A card's decompose state, if it has a row; its cells read leniently (another tool's odd
/// cell reads as unknown).
pub(super) fn read_state(
    conn: &Connection,
    task_id: &str,
) -> Result<Option<DecomposeState>, StoreError> {
    conn.prepare_cached(&format!(
        "SELECT {} FROM hermes_decompose_state s WHERE task_id = ?1",
        state_columns("s")
    ))
    .and_then(|mut stmt| stmt.query_row([task_id], state_cells).optional())
    .sql("reading the card's decompose state")
}

/// The decompose state's cells of the row aliased `alias`, named as [`state_cells`] reads them:
/// the due time in the reader's frame (see `store::frame`).
pub(super) fn state_columns(alias: &str) -> String {
    let due = frame::seen(
        &format!("{alias}.due_at_ms"),
        &format!("{alias}.due_boot"),
        &format!("{alias}.due_boot_ms"),
    );
    format!(
        "{alias}.attempts AS d_attempts, {alias}.last_attempt_at_ms AS d_last_attempt_at_ms, \
         {alias}.last_error AS d_last_error, {due} AS d_due_at_ms, \
         {alias}.parked_at_ms AS d_parked_at_ms, {alias}.opt_out AS d_opt_out"
    )
}

/// A decompose state from a row that names its cells `d_attempts`, `d_due_at_ms`, … (a card's
/// own row, or one joined to its card).
pub(super) fn state_cells(r: &rusqlite::Row<'_>) -> rusqlite::Result<DecomposeState> {
    Ok(DecomposeState {
        attempts: lenient::count_u32(r, "d_attempts")?.unwrap_or(0),
        last_attempt_at_ms: lenient::int(r, "d_last_attempt_at_ms")?,
        last_error: lenient::text(r, "d_last_error")?,
        due_at_ms: lenient::int(r, "d_due_at_ms")?,
        parked_at_ms: lenient::int(r, "d_parked_at_ms")?,
        opt_out: lenient::int(r, "d_opt_out")?.is_some_and(|n| n != 0),
    })
}

/// Runs one transition of the card's state machine on its row as it is now (`decide` is one of
/// `CardRules`' transitions), and writes what it decided with [`write_step`].
pub(super) fn transition(
    tx: &Transaction<'_>,
    task_id: &str,
    decide: impl FnOnce(Option<&DecomposeState>) -> Step,
) -> Result<(), StoreError> {
    let before = read_state(tx, task_id)?;
    write_step(tx, task_id, before.as_ref(), &decide(before.as_ref()))
}

/// Writes what a transition of the card's state machine decided (see `core::card`): the state
/// it leaves, then its events. Only the cells that changed are written, so a cell this build
/// reads leniently is never rewritten by a transition that did not touch it.
pub(super) fn write_step(
    tx: &Transaction<'_>,
    task_id: &str,
    before: Option<&DecomposeState>,
    step: &Step,
) -> Result<(), StoreError> {
    match (before, &step.after) {
        (_, None) => {}
        (None, Some(after)) => {
            tx.execute(
                &format!(
                    "INSERT INTO hermes_decompose_state (task_id, attempts, last_attempt_at_ms,
                         last_error, due_at_ms, parked_at_ms, opt_out, due_boot, due_boot_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, {}, {})",
                    frame::boot_of("?5"),
                    frame::boot_ms_of("?5")
                ),
                params![
                    task_id,
                    after.attempts,
                    after.last_attempt_at_ms,
                    after.last_error,
                    after.due_at_ms,
                    after.parked_at_ms,
                    after.opt_out
                ],
            )
            .sql("recording the card's decompose state")?;
        }
        (Some(before), Some(after)) => update_changed(tx, task_id, before, after)?,
    }
    for record in &step.records {
        add_event(tx, task_id, record.kind, Some(&record.payload))?;
    }
    Ok(())
}

fn update_changed(
    tx: &Transaction<'_>,
    task_id: &str,
    before: &DecomposeState,
    after: &DecomposeState,
) -> Result<(), StoreError> {
    use rusqlite::types::Value as Cell;
    let int = |n: Option<i64>| n.map_or(Cell::Null, Cell::Integer);
    let cells = [
        (
            "attempts",
            before.attempts != after.attempts,
            Cell::Integer(after.attempts.into()),
        ),
        (
            "last_attempt_at_ms",
            before.last_attempt_at_ms != after.last_attempt_at_ms,
            int(after.last_attempt_at_ms),
        ),
        (
            "last_error",
            before.last_error != after.last_error,
            after.last_error.clone().map_or(Cell::Null, Cell::Text),
        ),
        (
            "due_at_ms",
            before.due_at_ms != after.due_at_ms,
            int(after.due_at_ms),
        ),
        (
            "parked_at_ms",
            before.parked_at_ms != after.parked_at_ms,
            int(after.parked_at_ms),
        ),
        (
            "opt_out",
            before.opt_out != after.opt_out,
            Cell::Integer(after.opt_out.into()),
        ),
    ];
    let mut set = Vec::new();
    let mut values = vec![Cell::Text(task_id.to_owned())];
    for (name, _, value) in cells.into_iter().filter(|(_, changed, _)| *changed) {
        values.push(value);
        let param = format!("?{}", values.len());
        if name == "due_at_ms" {
            // Its boot's clock is written with it, always (see `store::frame`).
            set.push(format!(
                "due_boot = {}, due_boot_ms = {}",
                frame::boot_of(&param),
                frame::boot_ms_of(&param)
            ));
        }
        set.push(format!("{name} = {param}"));
    }
    if set.is_empty() {
        return Ok(());
    }
    tx.execute(
        &format!(
            "UPDATE hermes_decompose_state SET {} WHERE task_id = ?1",
            set.join(", ")
        ),
        rusqlite::params_from_iter(values),
    )
    .sql("recording the card's decompose state")?;
    Ok(())
}

/// The spawn state's cells of the row aliased `alias`, named as [`spawn_cells`] reads them: the
/// backoff's end in the reader's frame (see `store::frame`).
pub(super) fn spawn_state_columns(alias: &str) -> String {
    format!(
        "{alias}.spawns AS s_spawns, {alias}.failures AS s_failures, {} AS s_due_at_ms, \
         {alias}.parked_at_ms AS s_parked_at_ms, {alias}.last_error AS s_last_error",
        spawn_due_seen(alias)
    )
}

/// A spawn state from a row that names its cells `s_spawns`, `s_due_at_ms`, … (a card's own
/// row, or one joined to its card), read leniently.
pub(super) fn spawn_cells(r: &rusqlite::Row<'_>) -> rusqlite::Result<SpawnState> {
    Ok(SpawnState {
        spawns: lenient::count_u32(r, "s_spawns")?.unwrap_or(0),
        failures: lenient::count_u32(r, "s_failures")?.unwrap_or(0),
        due_at_ms: lenient::int(r, "s_due_at_ms")?,
        parked_at_ms: lenient::int(r, "s_parked_at_ms")?,
        last_error: lenient::text(r, "s_last_error")?,
    })
}

/// A card's spawn backoff end, in the reader's frame, for the row aliased `alias`.
pub(super) fn spawn_due_seen(alias: &str) -> String {
    frame::seen(
        &format!("{alias}.due_at_ms"),
        &format!("{alias}.due_boot"),
        &format!("{alias}.due_boot_ms"),
    )
}

/// A worker's start, in the reader's frame, for the spawn-ledger row aliased `alias`.
pub(super) fn spawn_started_seen(alias: &str) -> String {
    frame::seen(
        &format!("{alias}.started_at_ms"),
        &format!("{alias}.boot"),
        &format!("{alias}.started_boot_ms"),
    )
}

/// A ledger row's end on its boot's clock, for an end `wall` written now: only when the row
/// was opened on the reader's boot (its start's clock is the one the end is measured on).
pub(crate) fn ended_boot_ms(wall: &str) -> String {
    format!(
        "CASE WHEN {} THEN {} END",
        frame::same_boot("boot", "started_boot_ms"),
        frame::boot_ms_of(wall)
    )
}
