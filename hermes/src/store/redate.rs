//! Rows dated in the future, as a clock that ran ahead and was then corrected leaves them: ledger
//! rows that keep the hourly ceiling "reached", due times and pauses that keep cards waiting
//! for as long as the clock was wrong.
//!
//! No row of ours is legitimately dated ahead of now: each records the moment it was written
//! (a ledger row's start, a card's last attempt, a pause's setting, a claim's taking), and every
//! wait is a span after that moment. So a record whose moment lies more than [`CLOCK_SKEW`] ahead
//! is re-dated as if it had been written now, its spans kept: a call dated tomorrow counts toward
//! the next hour, a backoff of a minute set tomorrow becomes a minute from now. That is the
//! longest wait the record could still justify (it was written at some moment up to now), so no
//! wait is shortened by it. The automatic paths do it before they look at the guards (the
//! gateway on every tick, a sweep when it starts), and so do `kanban resume` and `unpark`.

use rusqlite::{params, Connection, Transaction};
use serde::Serialize;

use super::{SqlResultExt, Store, StoreError};

/// How far ahead of this process's clock a row's moment may be before it counts as dated in
/// the future: hosts sharing a board disagree by this much without anything being wrong.
pub const CLOCK_SKEW_MS: i64 = 60_000;

/// The same, as a duration for messages.
pub const CLOCK_SKEW: std::time::Duration = std::time::Duration::from_millis(CLOCK_SKEW_MS as u64);

/// What [`Store::redate_future`] re-dated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Redated {
    /// Ledger rows (paid calls).
    pub calls: usize,
    /// Cards' decompose records (their last attempt, due time, park).
    pub cards: usize,
    /// Board-wide pauses.
    pub pauses: usize,
    /// Claims of attempts in flight.
    pub claims: usize,
}

impl Redated {
    /// Whether nothing was dated in the future.
    pub fn is_empty(&self) -> bool {
        *self == Redated::default()
    }

    /// `2 paid call(s), 1 card(s) and the pause`, for messages.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        for (n, what) in [
            (self.calls, "ledger row(s)"),
            (self.cards, "card schedule(s)"),
            (self.pauses, "board pause(s)"),
            (self.claims, "claim(s)"),
        ] {
            if n > 0 {
                parts.push(format!("{n} {what}"));
            }
        }
        parts.join(", ")
    }
}

impl Store {
    /// Re-dates the rows dated more than [`CLOCK_SKEW`] after `now_ms` (see the module docs).
    /// Writes nothing when there are none.
    pub fn redate_future(&mut self, now_ms: i64) -> Result<Redated, StoreError> {
        if !self.read(|conn| anything_ahead(conn, now_ms))? {
            return Ok(Redated::default());
        }
        self.write(|tx| redate_future(tx, now_ms))
    }
}

fn anything_ahead(conn: &Connection, now_ms: i64) -> Result<bool, StoreError> {
    conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM hermes_aux_ledger WHERE started_at_ms > ?1)
             OR EXISTS (SELECT 1 FROM hermes_decompose_state
                        WHERE last_attempt_at_ms > ?1
                           OR (last_attempt_at_ms IS NULL AND due_at_ms > ?1))
             OR EXISTS (SELECT 1 FROM hermes_board_state
                        WHERE until_ms IS NOT NULL AND updated_at_ms > ?1)
             OR EXISTS (SELECT 1 FROM hermes_decompose_claims WHERE claimed_at_ms > ?1)
             OR EXISTS (SELECT 1 FROM hermes_spawn_state WHERE due_at_ms > ?2)
             OR EXISTS (SELECT 1 FROM hermes_spawn_ledger WHERE started_at_ms > ?1)",
        params![
            now_ms.saturating_add(CLOCK_SKEW_MS),
            spawn_due_limit(now_ms)
        ],
        |r| r.get(0),
    )
    .sql("looking for rows dated in the future")
}

/// [`Store::redate_future`] inside the caller's transaction.
pub(crate) fn redate_future(tx: &Transaction<'_>, now_ms: i64) -> Result<Redated, StoreError> {
    let ahead = now_ms.saturating_add(CLOCK_SKEW_MS);
    let calls = tx
        .execute(
            "UPDATE hermes_aux_ledger SET
                 ended_at_ms = CASE WHEN ended_at_ms IS NULL THEN NULL
                                    ELSE ended_at_ms - (started_at_ms - ?1) END,
                 started_at_ms = ?1
             WHERE started_at_ms > ?2",
            params![now_ms, ahead],
        )
        .sql("re-dating ledger rows dated in the future")?;
    // Every row at once, outside `core::card`'s transitions on purpose: only the dates move, by
    // the same amount, so each card keeps the wait its last transition gave it.
    let attempted = tx
        .execute(
            "UPDATE hermes_decompose_state SET
                 due_at_ms = CASE WHEN due_at_ms IS NULL THEN NULL
                                  ELSE due_at_ms - (last_attempt_at_ms - ?1) END,
                 parked_at_ms = CASE WHEN parked_at_ms IS NULL THEN NULL
                                     ELSE MIN(parked_at_ms, ?1) END,
                 last_attempt_at_ms = ?1
             WHERE last_attempt_at_ms > ?2",
            params![now_ms, ahead],
        )
        .sql("re-dating cards' attempts dated in the future")?;
    // A card never attempted is due from when it was scheduled (its creation, say): a due time
    // in the future can only be a wrong clock's.
    let scheduled = tx
        .execute(
            "UPDATE hermes_decompose_state SET due_at_ms = ?1
             WHERE last_attempt_at_ms IS NULL AND due_at_ms > ?2",
            params![now_ms, ahead],
        )
        .sql("re-dating cards' schedules dated in the future")?;
    let pauses = tx
        .execute(
            "UPDATE hermes_board_state SET
                 until_ms = until_ms - (updated_at_ms - ?1),
                 updated_at_ms = ?1
             WHERE until_ms IS NOT NULL AND updated_at_ms > ?2",
            params![now_ms, ahead],
        )
        .sql("re-dating board pauses dated in the future")?;
    let claims = tx
        .execute(
            "UPDATE hermes_decompose_claims SET
                 until_ms = until_ms - (claimed_at_ms - ?1),
                 claimed_at_ms = ?1
             WHERE claimed_at_ms > ?2",
            params![now_ms, ahead],
        )
        .sql("re-dating claims dated in the future")?;
    let spawns = redate_spawns(tx, now_ms)?;
    Ok(Redated {
        calls,
        cards: attempted + scheduled + spawns,
        pauses,
        claims,
    })
}

/// The latest a card's spawn backoff can legitimately end: the longest backoff from now, plus the
/// skew. A spawn state keeps no moment of its last failure to re-date from, but its backoff was
/// set from one that cannot lie ahead, so a due time beyond this is a wrong clock's.
fn spawn_due_limit(now_ms: i64) -> i64 {
    crate::core::time::after(now_ms, crate::core::MAX_BACKOFF).saturating_add(CLOCK_SKEW_MS)
}

/// Spawn backoffs dated past the longest backoff end after the longest backoff from now, and a
/// worker's start dated ahead becomes now (so its runtime limit is not stretched).
fn redate_spawns(tx: &Transaction<'_>, now_ms: i64) -> Result<usize, StoreError> {
    let longest = crate::core::time::after(now_ms, crate::core::MAX_BACKOFF);
    let cards = tx
        .execute(
            "UPDATE hermes_spawn_state SET due_at_ms = ?1 WHERE due_at_ms > ?2",
            params![longest, spawn_due_limit(now_ms)],
        )
        .sql("re-dating spawn backoffs dated in the future")?;
    tx.execute(
        "UPDATE hermes_spawn_ledger SET started_at_ms = ?1 WHERE started_at_ms > ?2",
        params![now_ms, now_ms.saturating_add(CLOCK_SKEW_MS)],
    )
    .sql("re-dating workers' starts dated in the future")?;
    Ok(cards)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::LedgerOutcome;
    use crate::store::{LedgerClose, LedgerOpen, NewTask, Origin};

    #[test]
    fn rows_dated_ahead_are_redated_to_now_with_their_spans_kept() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path().join("kanban.db")).unwrap();
        let now = 1_000_000_000_000;
        let day = 86_400_000;
        let card = store
            .create_task(&NewTask {
                title: "waits".into(),
                triage: true,
                ..NewTask::default()
            })
            .unwrap()
            .id;
        let row = store
            .ledger_open(&LedgerOpen {
                task_id: card.clone(),
                origin: Origin::Gateway,
                attempt: 1,
                try_no: 1,
                started_at_ms: now + day,
                guards: None,
                fence: None,
                model: None,
            })
            .unwrap()
            .unwrap();
        store
            .ledger_close(
                row,
                &LedgerClose::new(now + day + 250, LedgerOutcome::Malformed),
            )
            .unwrap();
        store
            .write(|tx| {
                tx.execute(
                    "UPDATE hermes_decompose_state SET last_attempt_at_ms = ?2, due_at_ms = ?3
                     WHERE task_id = ?1",
                    params![card, now + day, now + day + 60_000],
                )
                .sql("arranging")?;
                crate::store::guards::set_pause(tx, now + day + 900_000, "401", now + day, None)
            })
            .unwrap();
        // Within the skew: nothing to do.
        assert!(store.redate_future(now + day - 1).unwrap().is_empty());
        let redated = store.redate_future(now).unwrap();
        assert_eq!(
            redated,
            Redated {
                calls: 1,
                cards: 1,
                pauses: 1,
                claims: 0
            }
        );
        assert_eq!(
            redated.describe(),
            "1 ledger row(s), 1 card schedule(s), 1 board pause(s)"
        );
        let calls = store.calls(&Default::default()).unwrap();
        assert_eq!(
            (calls[0].started_at_ms, calls[0].ended_at_ms),
            (now, Some(now + 250))
        );
        let state = store.get(&card).unwrap().decompose.unwrap();
        assert_eq!(
            (state.last_attempt_at_ms, state.due_at_ms),
            (Some(now), Some(now + 60_000))
        );
        let pause = store.pause().unwrap().unwrap();
        assert_eq!((pause.set_at_ms, pause.until_ms), (now, now + 900_000));
        assert!(store.redate_future(now).unwrap().is_empty());
    }
}

#[cfg(test)]
mod spawn_tests {
    use super::*;
    use crate::store::NewTask;

    #[test]
    fn a_spawn_backoff_dated_past_the_longest_wait_ends_within_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path().join("kanban.db")).unwrap();
        let now = 1_000_000_000_000;
        let hour = 3_600_000;
        let card = store
            .create_task(&NewTask {
                title: "backs off".into(),
                assignee: Some("coder".into()),
                ..NewTask::default()
            })
            .unwrap()
            .id;
        store
            .write(|tx| {
                tx.execute(
                    "INSERT INTO hermes_spawn_state (task_id, spawns, failures, due_at_ms)
                     VALUES (?1, 1, 1, ?2)",
                    params![card, now + 30 * hour],
                )
                .sql("arranging")
            })
            .unwrap();
        // A backoff within the longest wait is left as it is.
        assert!(store
            .redate_future(now + 30 * hour - hour)
            .unwrap()
            .is_empty());
        let redated = store.redate_future(now).unwrap();
        assert_eq!(redated.cards, 1);
        assert_eq!(
            store.spawn_state(&card).unwrap().unwrap().due_at_ms,
            Some(now + hour)
        );
        assert!(store.redate_future(now).unwrap().is_empty(), "once");
    }
}
