//! What an operator does instead of editing `kanban.db` by hand (B9): give a parked card a fresh
//! budget, lift the board-wide provider pause, switch a card's auto-decompose opt-out, and read
//! the ledger call by call. Every change is one transaction with its event or note, so the
//! board always says who changed what and when.

use rusqlite::{params, Connection, OptionalExtension, Transaction};
use serde::Serialize;
use serde_json::json;

use super::claims::{abandon, claim_of, ClaimState, Recovered};
use super::decompose::{read_state, write_step};
use super::guards::{board_pause, unreachable_pause, PAUSE_KEY, UNREACHABLE_KEY};
use crate::core::card::scheduled;
use crate::core::{CardBudget, CardRules, Origin};

use super::{frame, lenient, BeginRefusal, SqlResultExt, Status, Store, StoreError};

/// The board-state key recording the last `kanban resume`.
const RESUME_KEY: &str = "provider_pause_cleared";

/// What `unpark` did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unparked {
    pub task_id: String,
    /// The attempts the card had used before its budget was reset.
    pub attempts_before: u32,
    /// When the card is next due for an automatic attempt (now), or `None` when the card is
    /// opted out of auto-decompose (it stays out until switched back on).
    pub next_attempt_at_ms: Option<i64>,
}

/// Why `unpark` changed nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnparkRefusal {
    #[error("no such task: {0}")]
    NoSuchTask(String),
    #[error("{task_id} is not in triage (status {status}); only a triage card can be unparked")]
    NotInTriage { task_id: String, status: String },
    #[error(
        "{task_id} is not parked ({attempts} of {max_attempts} automatic attempts used); nothing \
         to unpark"
    )]
    NotParked {
        task_id: String,
        attempts: u32,
        max_attempts: u32,
    },
    /// An attempt is in flight: its end decides whether the card is parked, so unparking now
    /// would be undone by it (the refusal `kanban decompose ID` gives, word for word).
    #[error("{task_id}: {claimed}; unpark it once that attempt has ended")]
    InFlight {
        task_id: String,
        claimed: BeginRefusal,
    },
}

/// The board-wide pauses that `resume` lifted (a provider's refusal, an unreachable
/// provider's backoff), as one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClearedPause {
    /// When the pause would have ended (ms since the epoch).
    pub until_ms: i64,
    /// Why it was set.
    pub reason: String,
}

/// The last `kanban resume` that lifted a pause.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResumeRecord {
    /// Who ran it.
    pub by: String,
    /// When (ms since the epoch).
    pub at_ms: i64,
    /// The pause it lifted.
    pub cleared: ClearedPause,
}

/// What switching a card's auto-decompose did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AutoDecomposeSwitch {
    pub task_id: String,
    /// The setting now.
    pub enabled: bool,
    /// Whether this call changed it (`false`: it already was so; nothing was written).
    pub changed: bool,
    /// When the card is next due for an automatic attempt, if it is scheduled.
    pub next_attempt_at_ms: Option<i64>,
}

/// Which ledger rows `calls` returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallFilter {
    /// Only this card's calls.
    pub task_id: Option<String>,
    /// Only calls started at or after this time (ms since the epoch).
    pub since_ms: Option<i64>,
}

/// One paid call: a ledger row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LedgerCall {
    pub id: i64,
    pub task_id: Option<String>,
    /// `gateway`, `sweep` or `manual`.
    pub origin: String,
    pub attempt: Option<u32>,
    /// 1 for an attempt's first request, then one more per retry.
    pub try_no: u32,
    pub started_at_ms: i64,
    pub ended_at_ms: Option<i64>,
    /// `ok`, a failure label, `in_flight` or `unknown`.
    pub outcome: String,
    pub http_status: Option<u16>,
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    pub detail: Option<String>,
    /// The model the request named; `None` on rows from before the ledger recorded it.
    pub model: Option<String>,
}

impl Store {
    /// Gives a parked triage card a fresh automatic budget and makes it due now, with a
    /// `decompose_unparked` event. A card counts as parked once it is marked so or has used
    /// its automatic `budget`. Refuses (writing nothing) any other card.
    pub fn unpark(
        &mut self,
        task_id: &str,
        budget: CardBudget,
        now_ms: i64,
        by: &str,
    ) -> Result<Result<Unparked, UnparkRefusal>, StoreError> {
        self.write(|tx| unpark(tx, task_id, budget, now_ms, by))
    }

    /// Lifts every board-wide pause in force (a provider's refusal, an unreachable provider's
    /// backoff), recording who did it and what it lifted; `None` when no pause was in force
    /// (then nothing is written).
    pub fn resume_auto_decompose(
        &mut self,
        now_ms: i64,
        by: &str,
    ) -> Result<Option<ClearedPause>, StoreError> {
        self.write(|tx| {
            let Some(pause) = pause_in_force(tx, now_ms)? else {
                return Ok(None);
            };
            tx.execute(
                "DELETE FROM hermes_board_state WHERE key IN (?1, ?2)",
                [PAUSE_KEY, UNREACHABLE_KEY],
            )
            .sql("lifting the provider pause")?;
            let record = json!({"by": by, "until_ms": pause.until_ms, "reason": pause.reason});
            tx.execute(
                &format!(
                    "INSERT INTO hermes_board_state
                         (key, value, until_ms, updated_at_ms, boot, until_boot_ms,
                          updated_boot_ms)
                     VALUES (?1, ?2, NULL, ?3, {}, NULL, {})
                     ON CONFLICT(key) DO UPDATE SET value = excluded.value, until_ms = NULL,
                         updated_at_ms = excluded.updated_at_ms, boot = excluded.boot,
                         until_boot_ms = NULL, updated_boot_ms = excluded.updated_boot_ms",
                    frame::boot_id(),
                    frame::boot_ms_of("?3")
                ),
                params![RESUME_KEY, record.to_string(), now_ms],
            )
            .sql("recording the resume")?;
            Ok(Some(pause))
        })
    }

    /// The last `kanban resume` that lifted a pause, if any.
    pub fn last_resume(&self) -> Result<Option<ResumeRecord>, StoreError> {
        self.read(|conn| {
            let row: Option<(Option<String>, i64)> = conn
                .query_row(
                    &format!(
                        "SELECT value, {} FROM hermes_board_state WHERE key = ?1",
                        frame::seen("updated_at_ms", "boot", "updated_boot_ms")
                    ),
                    [RESUME_KEY],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()
                .sql("reading the last resume")?;
            // A note this build cannot read (another tool's, or a damaged one) shows as none
            // rather than failing `usage`.
            Ok(row.and_then(|(value, at_ms)| {
                let value: serde_json::Value = serde_json::from_str(value.as_deref()?).ok()?;
                Some(ResumeRecord {
                    by: value.get("by")?.as_str()?.to_owned(),
                    at_ms,
                    cleared: ClearedPause {
                        until_ms: value.get("until_ms")?.as_i64()?,
                        reason: value.get("reason")?.as_str()?.to_owned(),
                    },
                })
            }))
        })
    }

    /// Switches a card's auto-decompose on (`enabled`) or off, with an
    /// `auto_decompose_enabled` / `auto_decompose_disabled` event when it changes. Switching on
    /// makes a triage card that is not parked due now (unless it already had a due time).
    pub fn set_auto_decompose(
        &mut self,
        task_id: &str,
        enabled: bool,
        now_ms: i64,
        by: &str,
    ) -> Result<AutoDecomposeSwitch, StoreError> {
        self.write(|tx| set_auto_decompose(tx, task_id, enabled, now_ms, by))
    }

    /// Ledger rows, oldest first.
    pub fn calls(&self, filter: &CallFilter) -> Result<Vec<LedgerCall>, StoreError> {
        self.read(|conn| calls(conn, filter))
    }
}

fn status(conn: &Connection, task_id: &str) -> Result<Option<String>, StoreError> {
    conn.query_row("SELECT status FROM tasks WHERE id = ?1", [task_id], |r| {
        r.get(0)
    })
    .optional()
    .sql("reading the card")
}

fn unpark(
    tx: &Transaction<'_>,
    task_id: &str,
    budget: CardBudget,
    now_ms: i64,
    by: &str,
) -> Result<Result<Unparked, UnparkRefusal>, StoreError> {
    let Some(status) = status(tx, task_id)? else {
        return Ok(Err(UnparkRefusal::NoSuchTask(task_id.to_owned())));
    };
    if status != Status::Triage.as_str() {
        return Ok(Err(UnparkRefusal::NotInTriage {
            task_id: task_id.to_owned(),
            status,
        }));
    }
    if let Some(claim) = claim_of(tx, task_id)? {
        let state = claim.state(now_ms, super::claims::board_of(tx));
        if state == ClaimState::Held {
            return Ok(Err(UnparkRefusal::InFlight {
                task_id: task_id.to_owned(),
                claimed: BeginRefusal::Claimed {
                    until_ms: claim.until_ms,
                    by: claim.holder(),
                },
            }));
        }
        // The attempt's process is gone (or its claim expired): its end is recorded first, so
        // the budget reset below is the last word on the card.
        abandon(
            tx,
            &claim,
            state,
            now_ms,
            budget,
            Origin::Manual,
            &mut Recovered::default(),
        )?;
    }
    let before = read_state(tx, task_id)?;
    let step = match CardRules::unpark(budget, before.as_ref(), by, now_ms) {
        Ok(step) => step,
        Err(attempts) => {
            return Ok(Err(UnparkRefusal::NotParked {
                task_id: task_id.to_owned(),
                attempts,
                max_attempts: budget.max,
            }))
        }
    };
    write_step(tx, task_id, before.as_ref(), &step)?;
    Ok(Ok(Unparked {
        task_id: task_id.to_owned(),
        attempts_before: before.map_or(0, |s| s.attempts),
        next_attempt_at_ms: scheduled(step.after.as_ref()),
    }))
}

/// The pauses in force as one: until the last of them ends, for all their reasons.
fn pause_in_force(conn: &Connection, now_ms: i64) -> Result<Option<ClearedPause>, StoreError> {
    let in_force: Vec<_> = [board_pause(conn)?, unreachable_pause(conn)?]
        .into_iter()
        .flatten()
        .filter(|p| p.until_ms > now_ms)
        .collect();
    let Some(until_ms) = in_force.iter().map(|p| p.until_ms).max() else {
        return Ok(None);
    };
    let reasons: Vec<&str> = in_force.iter().map(|p| p.reason.as_str()).collect();
    Ok(Some(ClearedPause {
        until_ms,
        reason: reasons.join("; "),
    }))
}

fn set_auto_decompose(
    tx: &Transaction<'_>,
    task_id: &str,
    enabled: bool,
    now_ms: i64,
    by: &str,
) -> Result<AutoDecomposeSwitch, StoreError> {
    let Some(status) = status(tx, task_id)? else {
        return Err(StoreError::NoSuchTask(task_id.to_owned()));
    };
    let before = read_state(tx, task_id)?;
    let in_triage = status == Status::Triage.as_str();
    let Some(step) = CardRules::switch(before.as_ref(), enabled, in_triage, by, now_ms) else {
        return Ok(AutoDecomposeSwitch {
            task_id: task_id.to_owned(),
            enabled,
            changed: false,
            next_attempt_at_ms: scheduled(before.as_ref()),
        });
    };
    write_step(tx, task_id, before.as_ref(), &step)?;
    Ok(AutoDecomposeSwitch {
        task_id: task_id.to_owned(),
        enabled,
        changed: true,
        next_attempt_at_ms: scheduled(step.after.as_ref()),
    })
}

fn calls(conn: &Connection, filter: &CallFilter) -> Result<Vec<LedgerCall>, StoreError> {
    // Each call's start and end in the reader's frame (see `store::frame`).
    let started = super::ledger::started_seen("l");
    let ended = frame::seen("l.ended_at_ms", "l.boot", "l.ended_boot_ms");
    let mut stmt = conn
        .prepare(&format!(
            "SELECT id, task_id, origin, attempt, try, {started}, {ended}, outcome,
                    http_status, prompt_tokens, completion_tokens, detail, model
             FROM hermes_aux_ledger l
             WHERE (?1 IS NULL OR task_id = ?1) AND {started} >= ?2
             ORDER BY {started}, id"
        ))
        .sql("reading the ledger")?;
    let rows = stmt
        .query_map(
            params![filter.task_id, filter.since_ms.unwrap_or(i64::MIN)],
            |r| {
                Ok(LedgerCall {
                    id: r.get(0)?,
                    task_id: lenient::text(r, 1)?,
                    origin: lenient::text(r, 2)?.unwrap_or_default(),
                    attempt: lenient::count_u32(r, 3)?,
                    try_no: lenient::count_u32(r, 4)?.unwrap_or(0),
                    started_at_ms: lenient::int(r, 5)?.unwrap_or(0),
                    ended_at_ms: lenient::int(r, 6)?,
                    outcome: lenient::text(r, 7)?.unwrap_or_default(),
                    http_status: lenient::int(r, 8)?.and_then(|n| u16::try_from(n).ok()),
                    // Negative counts can only come from another tool's bad row: shown as unknown.
                    prompt_tokens: lenient::count_u64(r, 9)?,
                    completion_tokens: lenient::count_u64(r, 10)?,
                    detail: lenient::text(r, 11)?,
                    model: lenient::text(r, 12)?,
                })
            },
        )
        .sql("reading the ledger")?;
    rows.collect::<Result<_, _>>().sql("reading the ledger")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::LedgerOutcome;
    use crate::store::tests::{card, kinds, triage_card};
    use crate::store::{LedgerClose, LedgerOpen, Origin};

    fn board() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("kanban.db")).unwrap();
        (dir, store)
    }

    fn set_state(store: &Store, id: &str, attempts: u32, parked: bool) {
        store
            .conn
            .execute(
                "UPDATE hermes_decompose_state SET attempts = ?2, due_at_ms = CASE WHEN ?3 THEN NULL ELSE due_at_ms END,
                 parked_at_ms = CASE WHEN ?3 THEN 5 ELSE NULL END, last_error = 'boom' WHERE task_id = ?1",
                params![id, attempts, parked],
            )
            .unwrap();
    }

    #[test]
    fn unpark_resets_the_budget_and_makes_the_card_due_now() {
        let (_dir, mut store) = board();
        let id = triage_card(&mut store, "poison");
        set_state(&store, &id, 3, true);
        let done = store
            .unpark(&id, CardBudget::new(3), 1_000_000, "alice")
            .unwrap()
            .unwrap();
        assert_eq!(
            done,
            Unparked {
                task_id: id.clone(),
                attempts_before: 3,
                next_attempt_at_ms: Some(1_000_000)
            }
        );
        let state = store.get(&id).unwrap().decompose.unwrap();
        assert_eq!(state.attempts, 0);
        assert_eq!(state.parked_at_ms, None);
        assert_eq!(state.due_at_ms, Some(1_000_000));
        assert_eq!(state.last_error, None);
        let events = store.events_of(&id).unwrap();
        let last = events.last().unwrap();
        assert_eq!(last.kind, "decompose_unparked");
        assert_eq!(
            last.payload,
            Some(json!({"attempts": 3, "by": "alice", "next_attempt_at": 1000.0}))
        );
        // Spent but never marked parked (the budget was lowered since) counts as parked too.
        set_state(&store, &id, 2, false);
        assert!(store
            .unpark(&id, CardBudget::new(2), 5, "bob")
            .unwrap()
            .is_ok());
    }

    #[test]
    fn unpark_refuses_what_is_not_parked_and_writes_nothing() {
        let (_dir, mut store) = board();
        let fresh = triage_card(&mut store, "fresh");
        set_state(&store, &fresh, 1, false);
        let ready = store.create_task(&card("ready")).unwrap().id;
        let before_fresh = kinds(&store, &fresh);
        assert_eq!(
            store.unpark(&fresh, CardBudget::new(3), 1, "a").unwrap(),
            Err(UnparkRefusal::NotParked {
                task_id: fresh.clone(),
                attempts: 1,
                max_attempts: 3
            })
        );
        assert_eq!(store.get(&fresh).unwrap().decompose.unwrap().attempts, 1);
        assert_eq!(kinds(&store, &fresh), before_fresh);
        let refused = store
            .unpark(&ready, CardBudget::new(3), 1, "a")
            .unwrap()
            .unwrap_err();
        assert_eq!(
            refused.to_string(),
            format!("{ready} is not in triage (status ready); only a triage card can be unparked")
        );
        assert_eq!(
            store
                .unpark("t_00000000", CardBudget::new(3), 1, "a")
                .unwrap(),
            Err(UnparkRefusal::NoSuchTask("t_00000000".to_owned()))
        );
    }

    #[test]
    fn an_opted_out_card_is_unparked_but_stays_unscheduled() {
        let (_dir, mut store) = board();
        let id = triage_card(&mut store, "held");
        set_state(&store, &id, 3, true);
        store.set_auto_decompose(&id, false, 1, "a").unwrap();
        let done = store
            .unpark(&id, CardBudget::new(3), 9, "a")
            .unwrap()
            .unwrap();
        assert_eq!(done.next_attempt_at_ms, None);
        assert_eq!(store.get(&id).unwrap().decompose.unwrap().due_at_ms, None);
    }

    #[test]
    fn resume_lifts_a_pause_in_force_and_records_who() {
        let (_dir, mut store) = board();
        assert_eq!(store.resume_auto_decompose(1_000, "alice").unwrap(), None);
        assert_eq!(store.last_resume().unwrap(), None);
        store
            .set_pause(i64::MAX / 2, "provider refused the API key (HTTP 401)")
            .unwrap();
        let cleared = store
            .resume_auto_decompose(2_000, "alice")
            .unwrap()
            .unwrap();
        assert_eq!(cleared.reason, "provider refused the API key (HTTP 401)");
        assert_eq!(store.pause().unwrap(), None);
        assert_eq!(
            store.last_resume().unwrap(),
            Some(ResumeRecord {
                by: "alice".to_owned(),
                at_ms: 2_000,
                cleared
            })
        );
        // An expired pause is not in force: nothing to lift, nothing written.
        store.set_pause(1_500, "old").unwrap();
        assert_eq!(store.resume_auto_decompose(3_000, "bob").unwrap(), None);
        assert_eq!(store.last_resume().unwrap().unwrap().by, "alice");
    }

    #[test]
    fn resume_lifts_an_unreachable_providers_backoff_too() {
        let (_dir, mut store) = board();
        store
            .write(|tx| {
                crate::store::guards::set_unreachable_pause(tx, 9_000, "provider unreachable", 1)
            })
            .unwrap();
        store
            .set_pause(5_000, "provider refused the API key (HTTP 401)")
            .unwrap();
        let cleared = store.resume_auto_decompose(2_000, "ops").unwrap().unwrap();
        assert_eq!(cleared.until_ms, 9_000);
        assert_eq!(
            cleared.reason,
            "provider refused the API key (HTTP 401); provider unreachable"
        );
        assert_eq!(store.pause().unwrap(), None);
        assert_eq!(store.unreachable_pause().unwrap(), None);
        assert_eq!(store.resume_auto_decompose(2_001, "ops").unwrap(), None);
    }

    #[test]
    fn switching_auto_decompose_off_and_on() {
        let (_dir, mut store) = board();
        let id = triage_card(&mut store, "card");
        let due = store.get(&id).unwrap().decompose.unwrap().due_at_ms;
        let off = store.set_auto_decompose(&id, false, 50, "a").unwrap();
        assert!(off.changed && !off.enabled);
        assert_eq!(off.next_attempt_at_ms, None);
        let state = store.get(&id).unwrap().decompose.unwrap();
        assert!(state.opt_out);
        assert_eq!(state.due_at_ms, due, "kept for when it is switched back on");
        let again = store.set_auto_decompose(&id, false, 60, "a").unwrap();
        assert!(!again.changed);
        assert_eq!(again.next_attempt_at_ms, None, "not scheduled while off");
        let on = store.set_auto_decompose(&id, true, 70, "b").unwrap();
        assert!(on.changed && on.enabled);
        assert_eq!(
            on.next_attempt_at_ms, due,
            "switched back on, the card keeps the due time it had"
        );
        assert!(!store.get(&id).unwrap().decompose.unwrap().opt_out);
        assert_eq!(
            kinds(&store, &id),
            [
                "created",
                "auto_decompose_disabled",
                "auto_decompose_enabled"
            ]
        );
        // A parked card switched back on stays parked (unpark is the way out).
        set_state(&store, &id, 3, true);
        store.set_auto_decompose(&id, false, 80, "a").unwrap();
        let on = store.set_auto_decompose(&id, true, 90, "a").unwrap();
        assert_eq!(on.next_attempt_at_ms, None);
        // A card that is not in triage keeps no schedule either way.
        let ready = store.create_task(&card("ready")).unwrap().id;
        let off = store.set_auto_decompose(&ready, false, 1, "a").unwrap();
        assert!(off.changed);
        let on = store.set_auto_decompose(&ready, true, 2, "a").unwrap();
        assert_eq!(on.next_attempt_at_ms, None);
        assert!(matches!(
            store.set_auto_decompose("t_00000000", true, 1, "a"),
            Err(StoreError::NoSuchTask(_))
        ));
    }

    #[test]
    fn calls_are_listed_oldest_first_and_filtered() {
        let (_dir, mut store) = board();
        let a = triage_card(&mut store, "a");
        let b = triage_card(&mut store, "b");
        for (card, at, outcome) in [
            (&a, 100, LedgerOutcome::Ok),
            (&b, 200, LedgerOutcome::ServerError),
            (&a, 300, LedgerOutcome::Timeout),
        ] {
            let row = store
                .ledger_open(&LedgerOpen {
                    fence: None,
                    model: None,
                    task_id: card.clone(),
                    origin: Origin::Gateway,
                    attempt: 1,
                    try_no: 1,
                    started_at_ms: at,
                    guards: None,
                })
                .unwrap()
                .unwrap();
            store
                .ledger_close(
                    row,
                    &LedgerClose {
                        ended_at_ms: at + 40,
                        outcome,
                        http_status: Some(200),
                        prompt_tokens: Some(10),
                        completion_tokens: Some(5),
                        detail: None,
                    },
                )
                .unwrap();
        }
        let all = store.calls(&CallFilter::default()).unwrap();
        assert_eq!(
            all.iter().map(|c| c.started_at_ms).collect::<Vec<_>>(),
            [100, 200, 300]
        );
        assert_eq!(all[1].outcome, "server_error");
        assert_eq!(all[0].ended_at_ms, Some(140));
        let only_a = store
            .calls(&CallFilter {
                task_id: Some(a.clone()),
                since_ms: Some(150),
            })
            .unwrap();
        assert_eq!(only_a.len(), 1);
        assert_eq!(only_a[0].outcome, "timeout");
    }
}
