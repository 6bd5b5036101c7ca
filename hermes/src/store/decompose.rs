//! The decompose side of the board: the per-card attempt budget, due-card selection and the
//! apply transaction.
//!
//! The budget lives in `hermes_decompose_state`, one row per card that is (or was) a decompose
//! candidate. `due_at_ms` is the whole scheduling story: NULL means "never automatically"
//! (decomposed, parked, opted out), a time in the future means backoff, and a partial index on it
//! lets the dispatcher find the oldest due cards without reading the rest of the board.

use rusqlite::{params, Connection, OptionalExtension, Transaction};
use serde_json::json;

use std::time::Duration;

use super::board::{
    add_event, canonical_assignee, insert_task_row, promote_ready, unreadable, TaskRow,
};
use super::claims::{
    abandon, board_of, claim_is_ours, claim_of, new_lease, put_claim, release, ClaimState,
    Recovered,
};
use super::guards::{
    auto_gate, guards_in_force, set_pause, set_unreachable_pause, unreachable_streak, AutoGate,
};
use super::{frame, lenient, SqlResultExt, Status, Store, StoreError};
use crate::core::card::{Begin, Failure, Step};
use crate::core::time::after;
use crate::core::{
    unreachable_pause, BeginRefusal, CardRules, ChildSpec, DecomposeState, Origin, Plan,
    ProviderFault, UnreachablePause,
};

/// Block kinds that wait for a person; such cards are never decomposed automatically (B7).
pub const HUMAN_BLOCK_KINDS: [&str; 2] = ["needs_input", "capability"];

/// What [`Store::begin_attempt`] checks and records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BeginPolicy {
    pub origin: Origin,
    /// An explicit attempt (`Origin::Manual`) that goes past the board-wide pause and the
    /// hourly ceiling (`kanban decompose ID --force`); the guards it went past are on the
    /// ticket. Automatic attempts never do.
    pub force: bool,
    pub now_ms: i64,
    /// The card's budget (automatic attempts stop once a card has spent it) and its wait after
    /// a failure, which it waits from the attempt's start until the outcome is known.
    pub rules: CardRules,
    /// Board-wide ceiling on paid calls in any rolling hour (automatic attempts only).
    pub calls_per_hour: u32,
    /// When the claim recorded with the attempt expires if this process's liveness cannot be
    /// told (see `store::claims`): after the last moment the attempt may still be sending.
    pub claim_until_ms: i64,
}

/// A recorded attempt: the card as it was when the attempt was counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptTicket {
    pub task_id: String,
    /// 1 for the card's first attempt.
    pub attempt: u32,
    pub title: String,
    pub body: Option<String>,
    pub assignee: Option<String>,
    /// The claim's fencing token: every later write of this attempt carries it (see
    /// `store::claims`).
    pub lease: String,
    /// The board-wide guards in force that a forced explicit attempt went past.
    pub overrode: Vec<BeginRefusal>,
}

/// A failed attempt, as recorded on the card.
#[derive(Debug, Clone, PartialEq)]
pub struct FailureRecord {
    pub attempt: u32,
    /// The attempt's lease ([`AttemptTicket::lease`]): nothing is recorded once another attempt
    /// took the card over. `None` only outside an attempt (tests, tools).
    pub fence: Option<String>,
    pub origin: Origin,
    pub reason: String,
    /// The provider-wide fault behind the failure, if any (see [`CardRules::fail`]).
    pub fault: Option<ProviderFault>,
    /// The budget and backoff the card's next due time (or its park) follows.
    pub rules: CardRules,
    pub now_ms: i64,
    /// A provider-wide fault's board pause, recorded in the same transaction (B5).
    pub pause: Option<PauseRecord>,
}

/// A board-wide pause to record with a failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PauseRecord {
    pub until_ms: i64,
    pub reason: String,
    /// When the refused request was sent: a pause recorded since then by a request in flight
    /// at the same time is not extended (one refusal episode, one pause).
    pub request_started_ms: Option<i64>,
}

/// An attempt none of whose requests reached the provider, as recorded on the card.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NothingSentRecord {
    pub attempt: u32,
    /// As [`FailureRecord::fence`].
    pub fence: Option<String>,
    pub now_ms: i64,
    /// Set when the provider could not be reached: pause the board (B5).
    pub unreachable: Option<UnreachableRecord>,
}

/// What recording an attempt that sent nothing did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NothingSentRecorded {
    /// The attempt was given back; the pause in force when the provider could not be reached.
    GivenBack(Option<UnreachablePause>),
    /// The attempt's claim had been taken over meanwhile: nothing was written.
    ClaimLost,
}

impl NothingSentRecorded {
    /// The board-wide pause recorded for an unreachable provider, if any.
    pub fn pause(self) -> Option<UnreachablePause> {
        match self {
            NothingSentRecorded::GivenBack(pause) => pause,
            NothingSentRecorded::ClaimLost => None,
        }
    }
}

/// Why the provider could not be reached, and the base of the board's growing pause.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnreachableRecord {
    pub reason: String,
    /// `kanban.decompose_backoff_seconds` (see `core::unreachable_pause`).
    pub backoff_base: Duration,
}

/// Records the board-wide pause for a provider that could not be reached, inside the caller's
/// transaction: it grows with every request in a row that never reached it, whichever half sent
/// them (B5, S4).
pub(super) fn pause_unreachable(
    tx: &Transaction<'_>,
    unreachable: &UnreachableRecord,
    now_ms: i64,
) -> Result<UnreachablePause, StoreError> {
    let streak = unreachable_streak(tx, STREAK_LOOKBACK)?.max(1);
    let lasts = unreachable_pause(unreachable.backoff_base, streak);
    let until_ms = after(now_ms, lasts);
    let reason = format!(
        "provider unreachable ({streak} request(s) in a row never reached it): {}",
        unreachable.reason
    );
    set_unreachable_pause(tx, until_ms, &reason, now_ms)?;
    Ok(UnreachablePause {
        until_ms,
        lasts,
        streak,
        reason: unreachable.reason.clone(),
    })
}

/// How far back the unreachable streak is counted; the pause is capped long before.
const STREAK_LOOKBACK: u32 = 64;

/// Settings of the apply transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplyOptions {
    /// Assignee of a decomposed root.
    pub orchestrator: String,
    /// Promote parent-free `todo` cards to `ready` afterwards.
    pub auto_promote: bool,
    /// Recorded as the children's creator.
    pub author: String,
    pub now_ms: i64,
    /// As [`FailureRecord::fence`]: the plan is applied only while the attempt's claim is its own.
    pub fence: Option<String>,
}

/// What the apply transaction did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApplyResult {
    /// The children, in reply order.
    Fanout { child_ids: Vec<String> },
    /// The card was specified in place; its new title when the reply changed it.
    Single { new_title: Option<String> },
    /// The card left triage while the provider was answering; nothing was written (B4).
    LeftTriage { status: String },
    /// The attempt's claim was taken over by another attempt while the provider was answering
    /// (it had expired, its holder's life unknown): nothing was written.
    ClaimLost,
}

impl Store {
    /// Counts an attempt on `task_id` — before any request is sent (B1) — or says why there must
    /// be none. One `BEGIN IMMEDIATE` transaction, so two processes can never both count the
    /// same due slot. A refusal writes nothing, except that a card found with its budget spent
    /// but not yet parked is parked there and then (with its `decompose_parked` event).
    pub fn begin_attempt(
        &mut self,
        task_id: &str,
        policy: &BeginPolicy,
    ) -> Result<Result<AttemptTicket, BeginRefusal>, StoreError> {
        // Held before any claim of this process is recorded, so that no other process can take
        // a live claim of ours for a dead one's (see `process`). Should it fail, our claims are
        // of unknown liveness to others, which hold them until their expiry: safe.
        let _ = crate::process::hold_for(&self.path);
        self.write(|tx| begin_attempt(tx, task_id, policy))
    }

    /// Records a failed attempt: the card's next due time (or its park), the
    /// `decompose_failed` / `decompose_parked` events and any provider pause, in one transaction.
    /// Returns whether the attempt parked the card (spent its budget), or `None`, having written
    /// nothing, when the attempt's claim was taken over meanwhile (the attempt that took it
    /// closed this one already).
    pub fn record_failure(
        &mut self,
        task_id: &str,
        failure: &FailureRecord,
    ) -> Result<Option<bool>, StoreError> {
        self.write(|tx| {
            if !claim_is_ours(tx, task_id, failure.fence.as_deref())? {
                return Ok(None);
            }
            record_failure(tx, task_id, failure).map(Some)
        })
    }

    /// Records an attempt that sent nothing the provider received: the attempt is given back
    /// (not counted, the card due again), the claim released and, when the provider could not be
    /// reached, the board paused with a backoff that grows with every such request in a row.
    /// One transaction; returns the pause in force for an unreachable provider. Nothing is
    /// written once the attempt's claim was taken over.
    pub fn record_nothing_sent(
        &mut self,
        task_id: &str,
        record: &NothingSentRecord,
    ) -> Result<NothingSentRecorded, StoreError> {
        self.write(|tx| {
            if !claim_is_ours(tx, task_id, record.fence.as_deref())? {
                return Ok(NothingSentRecorded::ClaimLost);
            }
            transition(tx, task_id, |before| {
                CardRules::give_back(before, record.attempt, record.now_ms)
            })?;
            release(tx, task_id, record.fence.as_deref())?;
            let Some(unreachable) = &record.unreachable else {
                return Ok(NothingSentRecorded::GivenBack(None));
            };
            let pause = pause_unreachable(tx, unreachable, record.now_ms)?;
            Ok(NothingSentRecorded::GivenBack(Some(pause)))
        })
    }

    /// Applies a validated plan in one transaction that first re-checks the card is still in
    /// triage (B4): all of the graph, or none of it.
    pub fn apply_plan(
        &mut self,
        task_id: &str,
        plan: &Plan,
        opts: &ApplyOptions,
    ) -> Result<ApplyResult, StoreError> {
        self.write(|tx| apply_plan(tx, task_id, plan, opts))
    }

    /// Gives every triage card that has no decompose state (written by another tool, or before
    /// this board had budgets) a state row, due from its creation time.
    ///
    /// `full` scans every triage card; otherwise only cards newer than the newest row seen at
    /// the last sync, which keeps a tick's cost independent of the board's size.
    pub fn sync_decompose_state(&mut self, now_ms: i64, full: bool) -> Result<usize, StoreError> {
        let floor = if full { 0 } else { self.synced_rowid };
        let top: i64 = self.read(|conn| {
            conn.query_row("SELECT COALESCE(MAX(rowid), 0) FROM tasks", [], |r| {
                r.get(0)
            })
            .sql("reading the newest card")
        })?;
        if top <= floor {
            return Ok(0);
        }
        // `CardRules::created` for many cards at once (one statement, so a tick's cost stays
        // independent of the board): due from its creation, never later than now.
        let added = self.write(|tx| {
            tx.execute(
                &format!(
                    "INSERT OR IGNORE INTO hermes_decompose_state
                         (task_id, due_at_ms, due_boot, due_boot_ms)
                     SELECT t.id, MIN(t.created_at * 1000, ?2), {}, {} FROM tasks t
                     WHERE t.rowid > ?1 AND t.status = 'triage'",
                    frame::boot_id(),
                    frame::boot_ms_of("MIN(t.created_at * 1000, ?2)")
                ),
                params![floor, now_ms],
            )
            .sql("scheduling triage cards written by other tools")
        })?;
        self.synced_rowid = top;
        Ok(added)
    }

    /// The oldest due cards, at most `limit`, never one in `exclude`: in triage, not parked,
    /// not in backoff, not claimed by an attempt in flight, not opted out, not a human hold (B1,
    /// B2, B7), and readable (see [`Store::pick_due`]). Walks the due index in order and stops
    /// at `limit`, so the cost does not grow with the board.
    pub fn due_cards(
        &self,
        now_ms: i64,
        limit: usize,
        exclude: &std::collections::HashSet<String>,
    ) -> Result<Vec<String>, StoreError> {
        self.read(|conn| due_rows(conn, now_ms, limit, exclude).map(|(due, _)| due))
    }

    /// [`due_cards`](Self::due_cards) for an automatic path: due cards whose title or body
    /// cannot be read as text (another tool wrote invalid UTF-8 or a BLOB) are set aside on the
    /// way, parked in one transaction with the reason, so they never take a slot fresh cards
    /// need and are never paid for. Returns the due cards and the ones set aside now.
    pub fn pick_due(
        &mut self,
        now_ms: i64,
        limit: usize,
        exclude: &std::collections::HashSet<String>,
        by: Origin,
    ) -> Result<(Vec<String>, Vec<SetAside>), StoreError> {
        let (due, set_aside) = self.read(|conn| due_rows(conn, now_ms, limit, exclude))?;
        if !set_aside.is_empty() {
            self.write(|tx| {
                for card in &set_aside {
                    park_unreadable(tx, &card.task_id, &card.why, now_ms, by)?;
                }
                Ok(())
            })?;
        }
        Ok((due, set_aside))
    }
}

/// The due cards, oldest first: one walk of the due index per boot whose clock the due times
/// were recorded on (see `store::frame`), merged by when each is due in the reader's frame. A
/// boot's cards are in the order of its clock, so each walk stops after `limit` usable cards,
/// and the cost does not grow with the board (the boots are few: this host's, and one per
/// earlier boot or other host that scheduled a card still waiting).
fn due_rows(
    conn: &Connection,
    now_ms: i64,
    limit: usize,
    exclude: &std::collections::HashSet<String>,
) -> Result<(Vec<String>, Vec<SetAside>), StoreError> {
    if limit == 0 {
        return Ok((Vec::new(), Vec::new()));
    }
    let reader: Option<String> = conn
        .prepare_cached("SELECT boot FROM temp.hermes_frame")
        .and_then(|mut stmt| stmt.query_row([], |r| r.get(0)))
        .sql("reading the time frame")?;
    // Grows with what is found, never with `limit`: that comes from config and may be huge.
    let mut due: Vec<(i64, String)> = Vec::new();
    let mut set_aside = Vec::new();
    for boot in scheduled_boots(conn)? {
        let by_boot_clock = boot.is_some() && boot == reader;
        due_of_boot(
            conn,
            (boot.as_deref(), by_boot_clock),
            now_ms,
            (limit, exclude),
            &mut due,
            &mut set_aside,
        )?;
    }
    due.sort();
    Ok((
        due.into_iter().take(limit).map(|(_, id)| id).collect(),
        set_aside,
    ))
}

/// The boots (`None`: no boot recorded) of the cards that have a due time, each once, from the
/// due index: one short look-up per boot, not a scan.
fn scheduled_boots(conn: &Connection) -> Result<Vec<Option<String>>, StoreError> {
    let mut boots = Vec::new();
    let unbooted: Option<i64> = conn
        .prepare_cached(
            "SELECT 1 FROM hermes_decompose_state
             WHERE due_at_ms IS NOT NULL AND due_boot IS NULL LIMIT 1",
        )
        .and_then(|mut stmt| stmt.query_row([], |r| r.get(0)).optional())
        .sql("looking for due cards")?;
    if unbooted.is_some() {
        boots.push(None);
    }
    let mut after = String::new();
    let mut next = conn
        .prepare_cached(
            "SELECT MIN(due_boot) FROM hermes_decompose_state
             WHERE due_at_ms IS NOT NULL AND due_boot > ?1",
        )
        .sql("looking for due cards")?;
    while let Some(boot) = next
        .query_row([&after], |r| r.get::<_, Option<String>>(0))
        .sql("looking for due cards")?
    {
        after.clone_from(&boot);
        boots.push(Some(boot));
    }
    Ok(boots)
}

/// Walks the due cards of one boot (`boot`; read by its clock when it is the reader's, else by
/// their wall time) until `limit` usable ones are found, adding them to `due` with when each is
/// due in the reader's frame, and the unreadable ones to `set_aside`.
fn due_of_boot(
    conn: &Connection,
    (boot, by_boot_clock): (Option<&str>, bool),
    now_ms: i64,
    (limit, exclude): (usize, &std::collections::HashSet<String>),
    due: &mut Vec<(i64, String)>,
    set_aside: &mut Vec<SetAside>,
) -> Result<(), StoreError> {
    let (seen, is_due, order) = if by_boot_clock {
        (
            format!("s.due_boot_ms + {}", frame::FRAME_OFFSET),
            format!("s.due_boot_ms <= ?1 - {}", frame::FRAME_OFFSET),
            "s.due_boot_ms",
        )
    } else {
        (
            "s.due_at_ms".to_owned(),
            "s.due_at_ms <= ?1".to_owned(),
            "s.due_at_ms",
        )
    };
    let claim_until = frame::seen("c.until_ms", "c.boot", "c.until_boot_ms");
    let mut stmt = conn
        .prepare_cached(&format!(
            // CROSS JOIN pins the due index as the outer loop. Given the choice (and no ANALYZE
            // statistics), SQLite starts from idx_tasks_status instead, reads every triage card
            // and sorts them all: 7 ms a tick at 100k cards, growing with the board. This way
            // it stops after `limit` rows.
            "SELECT s.task_id, t.title, t.body, {seen} FROM hermes_decompose_state s
             CROSS JOIN tasks t ON t.id = s.task_id
             WHERE s.due_at_ms IS NOT NULL AND s.due_boot IS ?4 AND {is_due}
               AND s.parked_at_ms IS NULL AND s.opt_out = 0
               AND NOT EXISTS (SELECT 1 FROM hermes_decompose_claims c
                               WHERE c.task_id = s.task_id AND {claim_until} > ?1)
               AND t.status = 'triage' AND t.started_at IS NULL
               AND (t.block_kind IS NULL OR t.block_kind NOT IN (?2, ?3))
             ORDER BY {order}, s.task_id"
        ))
        .sql("selecting due cards")?;
    // The holds come from the one list; a list of another length does not compile here.
    let [first_hold, second_hold] = HUMAN_BLOCK_KINDS;
    let mut rows = stmt
        .query(params![now_ms, first_hold, second_hold, boot])
        .sql("selecting due cards")?;
    let mut found = 0;
    while let Some(row) = rows.next().sql("selecting due cards")? {
        let id: String = row.get(0).sql("reading a due card")?;
        if exclude.contains(&id) {
            continue;
        }
        let (title, body) = (
            row.get_ref(1).sql("reading a due card")?,
            row.get_ref(2).sql("reading a due card")?,
        );
        match unreadable(title, body) {
            Some(why) => set_aside.push(SetAside { task_id: id, why }),
            None => {
                let when = lenient::int(row, 3).sql("reading a due card")?.unwrap_or(0);
                due.push((when, id));
                found += 1;
                if found == limit {
                    break;
                }
            }
        }
    }
    Ok(())
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

/// The card columns an attempt needs, read inside the attempt's transaction.
struct CardRow {
    status: String,
    title: String,
    body: Option<String>,
    assignee: Option<String>,
    started_at: Option<i64>,
    block_kind: Option<String>,
    /// Why the title or body cannot be sent as they are (another tool wrote them), if so; the
    /// two fields above are then only a rendering.
    unreadable: Option<String>,
}

fn card_row(conn: &Connection, task_id: &str) -> Result<Option<CardRow>, StoreError> {
    conn.query_row(
        "SELECT status, title, body, assignee, started_at, block_kind FROM tasks WHERE id = ?1",
        [task_id],
        |r| {
            Ok(CardRow {
                status: lenient::text(r, "status")?.unwrap_or_default(),
                title: lenient::text(r, "title")?.unwrap_or_default(),
                body: lenient::text(r, "body")?,
                assignee: lenient::text(r, "assignee")?,
                started_at: r.get(4)?,
                block_kind: lenient::text(r, "block_kind")?,
                unreadable: unreadable(r.get_ref(1)?, r.get_ref(2)?),
            })
        },
    )
    .optional()
    .sql("reading the card")
}

/// Parks a card whose text cannot be sent (see [`CardRow::unreadable`]), with its
/// `decompose_parked` event (see [`CardRules::set_aside`]).
fn park_unreadable(
    tx: &Transaction<'_>,
    task_id: &str,
    why: &str,
    now_ms: i64,
    by: Origin,
) -> Result<(), StoreError> {
    transition(tx, task_id, |before| {
        CardRules::set_aside(before, why, by, now_ms)
    })
}

/// A card an automatic path set aside because its text cannot be read (see
/// [`Store::pick_due`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetAside {
    pub task_id: String,
    /// What is wrong with its row.
    pub why: String,
}

fn begin_attempt(
    tx: &Transaction<'_>,
    task_id: &str,
    policy: &BeginPolicy,
) -> Result<Result<AttemptTicket, BeginRefusal>, StoreError> {
    let Some(card) = card_row(tx, task_id)? else {
        return Ok(Err(BeginRefusal::NoSuchTask(task_id.to_owned())));
    };
    if card.status != Status::Triage.as_str() {
        return Ok(Err(BeginRefusal::NotInTriage {
            status: card.status,
        }));
    }
    // Whatever the origin: another attempt's request may still be on its way (B1, B4).
    if let Some(claim) = claim_of(tx, task_id)? {
        let state = claim.state(policy.now_ms, board_of(tx));
        if state == ClaimState::Held {
            return Ok(Err(BeginRefusal::Claimed {
                until_ms: claim.until_ms,
                by: claim.holder(),
            }));
        }
        // Its process is gone (or its claim expired): close that attempt first, so its requests
        // are accounted for.
        abandon(
            tx,
            &claim,
            state,
            policy.now_ms,
            policy.rules.budget,
            policy.origin,
            &mut Recovered::default(),
        )?;
    }
    let state = read_state(tx, task_id)?;
    if let Some(why) = &card.unreadable {
        if policy.origin.is_automatic() && state.as_ref().is_none_or(|s| s.parked_at_ms.is_none()) {
            park_unreadable(tx, task_id, why, policy.now_ms, policy.origin)?;
        }
        return Ok(Err(BeginRefusal::Unreadable { why: why.clone() }));
    }
    // A person's attempt keeps to the board-wide guards like any other, unless forced past them.
    let mut overrode = Vec::new();
    if !policy.origin.is_automatic() {
        let mut in_force = guards_in_force(tx, policy.now_ms, policy.calls_per_hour)?;
        if policy.force {
            overrode = in_force;
        } else if !in_force.is_empty() {
            return Ok(Err(in_force.swap_remove(0)));
        }
    }
    let automatic = policy
        .origin
        .is_automatic()
        .then(|| (policy.origin, hold(&card)));
    let attempt = match policy.rules.begin(state.as_ref(), automatic, policy.now_ms) {
        Begin::Refused { refusal, step } => {
            write_step(tx, task_id, state.as_ref(), &step)?;
            return Ok(Err(refusal));
        }
        Begin::Counted { step, attempt } => {
            // The card's own guards passed; the board-wide ones come last, so a card refused for
            // itself is never reported as held back by the board.
            if policy.origin.is_automatic() {
                if let Some(refusal) = board_refusal(tx, policy)? {
                    return Ok(Err(refusal));
                }
            }
            write_step(tx, task_id, state.as_ref(), &step)?;
            attempt
        }
    };
    let lease = new_lease()?;
    put_claim(
        tx,
        task_id,
        attempt,
        policy.origin.as_str(),
        (policy.now_ms, policy.claim_until_ms),
        &lease,
    )?;
    Ok(Ok(AttemptTicket {
        task_id: task_id.to_owned(),
        attempt,
        title: card.title,
        body: card.body,
        assignee: card.assignee,
        lease,
        overrode,
    }))
}

/// The card's human hold, if it has one (B7): it has run before, or it is blocked on a person.
fn hold(card: &CardRow) -> Option<String> {
    if card.started_at.is_some() {
        return Some("the card has run before".to_owned());
    }
    card.block_kind
        .as_deref()
        .filter(|k| HUMAN_BLOCK_KINDS.contains(k))
        .map(|kind| format!("blocked on {kind}"))
}

/// The board-wide guard that holds an automatic attempt back, if one does.
fn board_refusal(
    conn: &Connection,
    policy: &BeginPolicy,
) -> Result<Option<BeginRefusal>, StoreError> {
    Ok(
        match auto_gate(conn, policy.now_ms, policy.calls_per_hour)? {
            AutoGate::Open { .. } => None,
            AutoGate::Paused { until_ms, reason } => {
                Some(BeginRefusal::Paused { until_ms, reason })
            }
            AutoGate::CeilingReached { calls, limit } => {
                Some(BeginRefusal::CeilingReached { calls, limit })
            }
        },
    )
}

fn record_failure(
    tx: &Transaction<'_>,
    task_id: &str,
    failure: &FailureRecord,
) -> Result<bool, StoreError> {
    let before = read_state(tx, task_id)?;
    let failed = failure.rules.fail(
        before.as_ref(),
        &Failure {
            attempt: failure.attempt,
            origin: failure.origin,
            reason: &failure.reason,
            fault: failure.fault.as_ref(),
            now_ms: failure.now_ms,
        },
    );
    write_step(tx, task_id, before.as_ref(), &failed.step)?;
    if let Some(pause) = &failure.pause {
        set_pause(
            tx,
            pause.until_ms,
            &pause.reason,
            failure.now_ms,
            pause.request_started_ms,
        )?;
    }
    release(tx, task_id, failure.fence.as_deref())?;
    Ok(failed.parked)
}

fn apply_plan(
    tx: &Transaction<'_>,
    task_id: &str,
    plan: &Plan,
    opts: &ApplyOptions,
) -> Result<ApplyResult, StoreError> {
    let Some(card) = card_row(tx, task_id)? else {
        return Err(StoreError::NoSuchTask(task_id.to_owned()));
    };
    // Another attempt took the card over (this one's claim expired while it waited): the card
    // is that attempt's now, and this answer is not applied, whatever it says.
    if !claim_is_ours(tx, task_id, opts.fence.as_deref())? {
        return Ok(ApplyResult::ClaimLost);
    }
    // Whatever happens next, the card is no longer waiting for an automatic attempt, and this
    // attempt is over.
    release(tx, task_id, opts.fence.as_deref())?;
    transition(tx, task_id, CardRules::answered)?;
    if card.status != Status::Triage.as_str() {
        return Ok(ApplyResult::LeftTriage {
            status: card.status,
        });
    }
    let result = match plan {
        Plan::Fanout { children, .. } => ApplyResult::Fanout {
            child_ids: apply_fanout(tx, task_id, children, opts)?,
        },
        Plan::Single {
            title,
            body,
            assignee,
            ..
        } => apply_single(
            tx,
            task_id,
            &card,
            title.as_deref(),
            body.as_deref(),
            assignee,
        )?,
    };
    if opts.auto_promote {
        // The only cards this transaction can have freed: the new children, or the card itself.
        let freed = match &result {
            ApplyResult::Fanout { child_ids } => child_ids.clone(),
            _ => vec![task_id.to_owned()],
        };
        promote_ready(tx, &freed)?;
    }
    Ok(result)
}

fn apply_fanout(
    tx: &Transaction<'_>,
    root: &str,
    children: &[ChildSpec],
    opts: &ApplyOptions,
) -> Result<Vec<String>, StoreError> {
    let (tenant, workspace_kind, workspace_path): (Option<String>, Option<String>, Option<String>) =
        tx.query_row(
            "SELECT tenant, workspace_kind, workspace_path FROM tasks WHERE id = ?1",
            [root],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .sql("reading the root card")?;
    let created_at = opts.now_ms.div_euclid(1000);
    let mut ids = Vec::with_capacity(children.len());
    for child in children {
        let assignee = canonical_assignee(&child.assignee)?;
        let id = insert_task_row(
            tx,
            &TaskRow {
                title: &child.title,
                body: Some(&child.body),
                assignee: Some(&assignee),
                status: Status::Todo,
                priority: 0,
                created_by: Some(&opts.author),
                tenant: tenant.as_deref(),
                created_at,
            },
        )?;
        // Children work where their root works.
        tx.execute(
            "UPDATE tasks SET workspace_kind = COALESCE(?2, workspace_kind), workspace_path = ?3 WHERE id = ?1",
            params![id, workspace_kind, workspace_path],
        )
        .sql("placing a child in its root's workspace")?;
        add_event(
            tx,
            &id,
            "created",
            Some(&json!({"by": opts.author, "from_decompose_of": root})),
        )?;
        ids.push(id);
    }
    // The reply was validated whole (indices in range, acyclic) before this transaction began;
    // the children are brand new, so no link here can close a loop through older cards.
    for (index, child) in children.iter().enumerate() {
        for &parent in &child.parents {
            let (parent_id, child_id) = (&ids[parent], &ids[index]);
            tx.execute(
                "INSERT OR IGNORE INTO task_links (parent_id, child_id) VALUES (?1, ?2)",
                params![parent_id, child_id],
            )
            .sql("linking siblings")?;
            add_event(
                tx,
                child_id,
                "linked",
                Some(&json!({"parent": parent_id, "child": child_id})),
            )?;
        }
    }
    for id in &ids {
        // The root waits for every child.
        tx.execute(
            "INSERT OR IGNORE INTO task_links (parent_id, child_id) VALUES (?1, ?2)",
            params![id, root],
        )
        .sql("linking a child under its root")?;
    }
    let orchestrator = canonical_assignee(&opts.orchestrator)?;
    tx.execute(
        "UPDATE tasks SET status = 'todo', assignee = ?2 WHERE id = ?1",
        params![root, orchestrator],
    )
    .sql("moving the root out of triage")?;
    add_event(
        tx,
        root,
        "decomposed",
        Some(&json!({"child_ids": ids, "root_assignee": orchestrator})),
    )?;
    Ok(ids)
}

fn apply_single(
    tx: &Transaction<'_>,
    task_id: &str,
    card: &CardRow,
    title: Option<&str>,
    body: Option<&str>,
    assignee: &str,
) -> Result<ApplyResult, StoreError> {
    let new_title = title.filter(|t| *t != card.title);
    let new_body = body.filter(|b| Some(*b) != card.body.as_deref());
    let new_assignee = match card.assignee {
        Some(_) => None,
        None => Some(canonical_assignee(assignee)?),
    };
    let mut changed = Vec::new();
    if new_title.is_some() {
        changed.push("title");
    }
    if new_body.is_some() {
        changed.push("body");
    }
    if new_assignee.is_some() {
        changed.push("assignee");
    }
    tx.execute(
        "UPDATE tasks SET status = 'todo',
             title = COALESCE(?2, title), body = COALESCE(?3, body), assignee = COALESCE(?4, assignee)
         WHERE id = ?1",
        params![task_id, new_title, new_body, new_assignee],
    )
    .sql("specifying the card")?;
    let payload = (!changed.is_empty()).then(|| json!({"changed_fields": changed}));
    add_event(tx, task_id, "specified", payload.as_ref())?;
    Ok(ApplyResult::Single {
        new_title: new_title.map(str::to_owned),
    })
}
