//! Claims: the attempt in flight on a card (B1, B4 across processes).
//!
//! `begin_attempt` records a claim in the same transaction that counts the attempt; the
//! transaction that records the attempt's end removes it. While it is held, no automatic path in
//! any process picks the card, and no attempt of any origin begins on it. A claim is held while
//! its process is alive (whatever the clock says), and, when that cannot be known (a holder on
//! another host or in another pid namespace), until its expiry. The claim of a process that
//! died, or whose expiry passed, is void: its attempt is closed here as abandoned (its open
//! ledger rows become `unknown`, maybe billed), at the next start of a gateway or a sweep, on a
//! gateway tick, or when another attempt finds it.
//!
//! A claim also fences its attempt: it carries a random lease, and every later write of the
//! attempt (opening a request's ledger row, applying its answer, recording its failure or its
//! refund) commits only while the claim still carries that lease ([`claim_is_ours`]). A holder
//! that was frozen past its expiry (a stopped container) and wakes after another attempt took the
//! card over sends nothing more and applies nothing. What remains open: a holder frozen longer
//! than its claim span whose card nobody took over meanwhile finds its claim intact and goes on,
//! which is harmless (no other attempt paid for the card); and a holder of unknown liveness
//! that is still sending when its claim expires may have that request paid twice, once by it and
//! once by the attempt that took over (its answer is then discarded).

use std::collections::HashSet;
use std::path::Path;

use rusqlite::{params, Connection, OptionalExtension, Transaction};

use super::decompose::{read_state, write_step};
use super::{frame, lenient, SqlResultExt, Store, StoreError};
use crate::core::card::{Abandoned, Abandonment};
use crate::core::{CardBudget, CardRules, Half, LedgerOutcome, Origin};
use crate::process;

/// One claim row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub task_id: String,
    pub attempt: u32,
    pub origin: String,
    /// The holding process (see `process::token`).
    pub owner: String,
    pub claimed_at_ms: i64,
    pub until_ms: i64,
    /// The attempt's fencing token (`None` on a claim an older build wrote).
    pub lease: Option<String>,
}

/// Whether a claim still holds its card, and if not, why not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimState {
    /// Its process runs, or (when that cannot be checked) its expiry is ahead.
    Held,
    /// Its process is gone.
    Ended,
    /// Its process cannot be checked from here, and its expiry has passed.
    Expired,
}

impl Claim {
    /// Whether the claim still holds the card at `now_ms`, on the board at `board`.
    pub fn holds(&self, now_ms: i64, board: &Path) -> bool {
        self.state(now_ms, board) == ClaimState::Held
    }

    /// The claim's state at `now_ms`, on the board at `board` (its holders' lock files are
    /// beside it, see `process`).
    pub fn state(&self, now_ms: i64, board: &Path) -> ClaimState {
        match process::is_alive(&self.owner, board) {
            Some(true) => ClaimState::Held,
            Some(false) => ClaimState::Ended,
            None if self.until_ms > now_ms => ClaimState::Held,
            None => ClaimState::Expired,
        }
    }

    /// Who holds it, for messages: `gateway, pid 123`.
    pub fn holder(&self) -> String {
        format!("{}, {}", self.origin, process::describe(&self.owner))
    }
}

/// What closing abandoned attempts did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovered {
    /// Ledger rows left `in_flight` and now closed as `unknown` (maybe billed).
    pub closed_rows: usize,
    /// Cards whose claim had expired with its holder's liveness unknown (frozen, or on another
    /// host): the holder may still be running, but nothing it does now is applied.
    pub expired: Vec<String>,
    /// Cards whose abandoned attempt had sent a request: recorded as a failed attempt.
    pub failed: Vec<String>,
    /// Cards whose abandoned attempt never sent a request: not counted after all.
    pub refunded: Vec<String>,
    /// Cards parked because the abandoned attempt was their last.
    pub parked: Vec<ParkedCard>,
}

/// A card recovery parked, with the attempt that spent its budget: the gateway owes one WARN
/// per park, and knows by this pair a park it announced once already (its record lost, say,
/// with a `kanban.db-wal` deleted under it) from a new one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParkedCard {
    pub task_id: String,
    pub attempt: u32,
}

impl Recovered {
    /// Whether anything was found.
    pub fn is_empty(&self) -> bool {
        *self == Recovered::default()
    }
}

impl Store {
    /// The claim on `task_id`, if there is a row (held or not).
    pub fn claim(&self, task_id: &str) -> Result<Option<Claim>, StoreError> {
        self.read(|conn| claim_of(conn, task_id))
    }

    /// Closes every attempt whose claim no longer holds (its process died, or its expiry passed
    /// while its liveness cannot be known), plus claims of this process on cards not in
    /// `ours_running` (an attempt of ours whose end could not be recorded), plus ledger rows left
    /// `in_flight` with no claim at all (a crash of an older build). A card whose abandoned
    /// attempt sent a request gets a `decompose_failed` event (and is parked when that was its
    /// last automatic attempt under `budget`); one that never sent a request gets its
    /// attempt back. One transaction; nothing is written when nothing is found.
    pub fn recover_abandoned(
        &mut self,
        now_ms: i64,
        ours_running: &HashSet<String>,
        budget: CardBudget,
        by: Origin,
    ) -> Result<Recovered, StoreError> {
        if !self.read(|conn| anything_to_recover(conn, now_ms, ours_running))? {
            return Ok(Recovered::default());
        }
        let (recovered, owners) = self.write(|tx| {
            let mut recovered = Recovered::default();
            for claim in claims(tx)? {
                let ours_lost =
                    claim.owner == process::token() && !ours_running.contains(&claim.task_id);
                let state = if ours_lost {
                    ClaimState::Ended
                } else {
                    claim.state(now_ms, board_of(tx))
                };
                if state != ClaimState::Held {
                    abandon(tx, &claim, state, now_ms, budget, by, &mut recovered)?;
                }
            }
            recovered.closed_rows += close_unclaimed_rows(tx, now_ms)?;
            let owners: Vec<String> = claims(tx)?.into_iter().map(|c| c.owner).collect();
            Ok((recovered, owners))
        })?;
        // Once their claims are closed, the lock files of the holders that are gone go too.
        process::let_go_of_dead(&self.path, &owners);
        Ok(recovered)
    }
}

fn anything_to_recover(
    conn: &Connection,
    now_ms: i64,
    ours_running: &HashSet<String>,
) -> Result<bool, StoreError> {
    let stale = claims(conn)?.iter().any(|claim| {
        (claim.owner == process::token() && !ours_running.contains(&claim.task_id))
            || !claim.holds(now_ms, board_of(conn))
    });
    Ok(stale || unclaimed_rows(conn)? > 0)
}

/// The board a connection has open, where its claims' holders keep their lock files.
pub(crate) fn board_of(conn: &Connection) -> &Path {
    Path::new(conn.path().unwrap_or_default())
}

/// A claim's columns, its times in the reader's frame (see `store::frame`).
fn claim_columns() -> String {
    format!(
        "task_id, attempt, origin, owner, {}, {}, lease",
        frame::seen("claimed_at_ms", "boot", "claimed_boot_ms"),
        frame::seen("until_ms", "boot", "until_boot_ms")
    )
}

pub(crate) fn claim_of(conn: &Connection, task_id: &str) -> Result<Option<Claim>, StoreError> {
    conn.prepare_cached(&format!(
        "SELECT {} FROM hermes_decompose_claims WHERE task_id = ?1",
        claim_columns()
    ))
    .and_then(|mut stmt| stmt.query_row([task_id], claim_row).optional())
    .sql("reading the card's claim")
}

fn claims(conn: &Connection) -> Result<Vec<Claim>, StoreError> {
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT {} FROM hermes_decompose_claims ORDER BY task_id",
            claim_columns()
        ))
        .sql("reading claims")?;
    let rows = stmt.query_map([], claim_row).sql("reading claims")?;
    rows.collect::<Result<_, _>>().sql("reading claims")
}

fn claim_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Claim> {
    // Read leniently: a claim another tool wrote must not stop every tick.
    Ok(Claim {
        task_id: r.get(0)?,
        attempt: lenient::count_u32(r, 1)?.unwrap_or(0),
        origin: lenient::text(r, 2)?.unwrap_or_default(),
        owner: lenient::text(r, 3)?.unwrap_or_default(),
        claimed_at_ms: lenient::int(r, 4)?.unwrap_or(0),
        until_ms: lenient::int(r, 5)?.unwrap_or(0),
        lease: lenient::text(r, 6)?,
    })
}

/// A fresh random token: an attempt's or a run's lease, a worker's lock file name.
pub fn new_lease() -> Result<String, StoreError> {
    let high = getrandom::u32().map_err(StoreError::Entropy)?;
    let low = getrandom::u32().map_err(StoreError::Entropy)?;
    Ok(format!("{high:08x}{low:08x}"))
}

/// Records this process's claim on `task_id` for `attempt` with `lease` (replacing a stale one).
pub(crate) fn put_claim(
    tx: &Transaction<'_>,
    task_id: &str,
    attempt: u32,
    origin: &str,
    span: (i64, i64),
    lease: &str,
) -> Result<(), StoreError> {
    let (now_ms, until_ms) = span;
    tx.execute(
        &format!(
            "INSERT INTO hermes_decompose_claims
                 (task_id, attempt, origin, owner, claimed_at_ms, until_ms, lease, boot,
                  claimed_boot_ms, until_boot_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, {}, {}, {})
             ON CONFLICT(task_id) DO UPDATE SET
                 attempt = excluded.attempt, origin = excluded.origin, owner = excluded.owner,
                 claimed_at_ms = excluded.claimed_at_ms, until_ms = excluded.until_ms,
                 lease = excluded.lease, boot = excluded.boot,
                 claimed_boot_ms = excluded.claimed_boot_ms,
                 until_boot_ms = excluded.until_boot_ms",
            frame::boot_id(),
            frame::boot_ms_of("?5"),
            frame::boot_ms_of("?6"),
        ),
        params![
            task_id,
            attempt,
            origin,
            process::token(),
            now_ms,
            until_ms,
            lease
        ],
    )
    .sql("claiming the card")?;
    Ok(())
}

/// Whether the claim on `task_id` is still the one an attempt recorded with `fence` (its lease):
/// the check every write of that attempt makes in its own transaction. `None` is a write made
/// outside any attempt (tests, tools): it is not fenced.
pub(crate) fn claim_is_ours(
    conn: &Connection,
    task_id: &str,
    fence: Option<&str>,
) -> Result<bool, StoreError> {
    let Some(lease) = fence else {
        return Ok(true);
    };
    let found: Option<i64> = conn
        .query_row(
            "SELECT 1 FROM hermes_decompose_claims WHERE task_id = ?1 AND lease = ?2",
            params![task_id, lease],
            |r| r.get(0),
        )
        .optional()
        .sql("checking the attempt's claim")?;
    Ok(found.is_some())
}

/// Removes the claim an attempt recorded with `fence` (see [`claim_is_ours`]); with `None`,
/// this process's claim on `task_id`, if it still has one.
pub(crate) fn release(
    tx: &Transaction<'_>,
    task_id: &str,
    fence: Option<&str>,
) -> Result<(), StoreError> {
    match fence {
        Some(lease) => tx.execute(
            "DELETE FROM hermes_decompose_claims WHERE task_id = ?1 AND lease = ?2",
            params![task_id, lease],
        ),
        None => tx.execute(
            "DELETE FROM hermes_decompose_claims WHERE task_id = ?1 AND owner = ?2",
            params![task_id, process::token()],
        ),
    }
    .sql("releasing the card's claim")?;
    Ok(())
}

/// Why an abandoned attempt's process is no longer trusted with its card, for messages.
fn why_abandoned(claim: &Claim, state: ClaimState) -> String {
    match state {
        ClaimState::Expired => format!(
            "the claim of the {} attempt ({}) expired at {} and its process cannot be checked \
             from here (frozen, or on another host)",
            claim.origin,
            process::describe(&claim.owner),
            crate::core::time::utc_ms(claim.until_ms)
        ),
        // An attempt of this very process whose end could not be recorded (its board could not
        // be written) is not one whose process ended: the words say which.
        ClaimState::Ended | ClaimState::Held if claim.owner == process::token() => {
            format!("{} could not write the board", claim.holder())
        }
        ClaimState::Ended | ClaimState::Held => format!("{} ended", claim.holder()),
    }
}

/// Closes the attempt behind a claim that no longer holds (`state` says why), and removes the
/// claim.
pub(crate) fn abandon(
    tx: &Transaction<'_>,
    claim: &Claim,
    state: ClaimState,
    now_ms: i64,
    budget: CardBudget,
    by: Origin,
    recovered: &mut Recovered,
) -> Result<(), StoreError> {
    let why = why_abandoned(claim, state);
    if state == ClaimState::Expired {
        recovered.expired.push(claim.task_id.clone());
    }
    let detail =
        format!("abandoned: {why} before recording how this request went; it may have been billed");
    let closed = tx
        .execute(
            &format!(
                "UPDATE hermes_aux_ledger SET outcome = ?3, ended_at_ms = ?4, ended_boot_ms = {},
                     detail = ?5
                 WHERE task_id = ?1 AND attempt = ?2 AND outcome = ?6 AND purpose = ?7",
                super::ledger::ended_boot_ms("?4")
            ),
            params![
                claim.task_id,
                claim.attempt,
                LedgerOutcome::Unknown.as_str(),
                now_ms,
                detail,
                LedgerOutcome::InFlight.as_str(),
                Half::Decompose.as_str()
            ],
        )
        .sql("closing the abandoned attempt's ledger rows")?;
    recovered.closed_rows += closed;
    let sent: i64 = tx
        .query_row(
            "SELECT COUNT(*) FROM hermes_aux_ledger
             WHERE task_id = ?1 AND attempt = ?2 AND outcome != ?3 AND purpose = ?4",
            params![
                claim.task_id,
                claim.attempt,
                LedgerOutcome::Unreachable.as_str(),
                Half::Decompose.as_str()
            ],
            |r| r.get(0),
        )
        .sql("counting the abandoned attempt's requests")?;
    let status: Option<String> = tx
        .query_row(
            "SELECT status FROM tasks WHERE id = ?1",
            [&claim.task_id],
            |r| r.get(0),
        )
        .optional()
        .sql("reading the card")?;
    let before = read_state(tx, &claim.task_id)?;
    // Only the attempt the claim names is closed; a later one (there cannot be one while the
    // claim stands, but a hand-edited board may say otherwise) is left alone.
    let abandoned = CardRules::abandon(
        budget,
        before.as_ref(),
        &Abandonment {
            attempt: claim.attempt,
            origin: &claim.origin,
            why: &why,
            sent: sent > 0,
            in_triage: status.as_deref() == Some("triage"),
            by,
            now_ms,
        },
    );
    match abandoned {
        Abandoned::Untouched => {}
        Abandoned::GivenBack(step) => {
            write_step(tx, &claim.task_id, before.as_ref(), &step)?;
            recovered.refunded.push(claim.task_id.clone());
        }
        Abandoned::Failed { step, parked } => {
            write_step(tx, &claim.task_id, before.as_ref(), &step)?;
            recovered.failed.push(claim.task_id.clone());
            if parked {
                recovered.parked.push(ParkedCard {
                    task_id: claim.task_id.clone(),
                    attempt: claim.attempt,
                });
            }
        }
    }
    tx.execute(
        "DELETE FROM hermes_decompose_claims WHERE task_id = ?1 AND owner = ?2",
        params![claim.task_id, claim.owner],
    )
    .sql("removing the abandoned claim")?;
    Ok(())
}

fn unclaimed_rows(conn: &Connection) -> Result<i64, StoreError> {
    conn.query_row(
        "SELECT COUNT(*) FROM hermes_aux_ledger l WHERE l.outcome = ?1 AND l.purpose = ?2
           AND NOT EXISTS (SELECT 1 FROM hermes_decompose_claims c
                           WHERE c.task_id = l.task_id AND c.attempt = l.attempt)",
        params![LedgerOutcome::InFlight.as_str(), Half::Decompose.as_str()],
        |r| r.get(0),
    )
    .sql("looking for ledger rows left in flight")
}

fn close_unclaimed_rows(tx: &Transaction<'_>, now_ms: i64) -> Result<usize, StoreError> {
    tx.execute(
        &format!("UPDATE hermes_aux_ledger SET outcome = ?1, ended_at_ms = ?2, ended_boot_ms = {},
             detail = 'left in flight by a process that ended before recording how it went; it may have been billed'
         WHERE outcome = ?3 AND purpose = ?4
           AND NOT EXISTS (SELECT 1 FROM hermes_decompose_claims c
                           WHERE c.task_id = hermes_aux_ledger.task_id
                             AND c.attempt = hermes_aux_ledger.attempt)",
            super::ledger::ended_boot_ms("?2")
        ),
        params![
            LedgerOutcome::Unknown.as_str(),
            now_ms,
            LedgerOutcome::InFlight.as_str(),
            Half::Decompose.as_str()
        ],
    )
    .sql("closing ledger rows left in flight")
}
