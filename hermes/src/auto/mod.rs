//! The one automatic step: bring the board's decompose state up to date, consult the board-wide
//! guards (provider pause B5, hourly ceiling B6), pick the due cards (B2, B7) and attempt them.
//!
//! The gateway's tick ([`pick`], then one attempt task per card) and `kanban decompose --all`
//! ([`sweep`], one card at a time) both go through here, so a rule about which card may be paid
//! for next lives in one place.

use std::collections::HashSet;

use tokio::sync::watch;

use crate::clock::now_ms;
use crate::core::{AttemptOutcome, CardBudget, FaultPause, Origin, UnreachablePause};
use crate::decompose::attempt::{run_attempt, AttemptContext, AttemptError};
use crate::store::{
    AutoGate, BoardError, BoardHandle, ListFilter, Recovered, SetAside, Status, Store, StoreError,
};

/// What the automatic step may do now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Picked {
    /// The provider pause is in force (B5): nothing may be attempted.
    Paused { until_ms: i64, reason: String },
    /// The hourly ceiling is reached (B6): nothing may be attempted.
    Ceiling { calls: u64, limit: u32 },
    /// The cards to attempt now, oldest due first (possibly none), and the due cards set aside
    /// on the way because their rows cannot be read (parked, never paid for).
    Due {
        cards: Vec<String>,
        set_aside: Vec<SetAside>,
    },
}

/// Brings the decompose state up to date (every triage card `full`y, or only the cards added
/// since the last call), then picks at most `slots` due cards not in `exclude`, within the guards.
pub fn pick(
    store: &mut Store,
    now_ms: i64,
    calls_per_hour: u32,
    slots: usize,
    exclude: &HashSet<String>,
    full_sync: bool,
    by: Origin,
) -> Result<Picked, StoreError> {
    store.sync_decompose_state(now_ms, full_sync)?;
    match store.auto_gate(now_ms, calls_per_hour)? {
        AutoGate::Open { calls_left } => {
            let limit = slots.min(usize::try_from(calls_left).unwrap_or(usize::MAX));
            let (cards, set_aside) = store.pick_due(now_ms, limit, exclude, by)?;
            Ok(Picked::Due { cards, set_aside })
        }
        AutoGate::Paused { until_ms, reason } => Ok(Picked::Paused { until_ms, reason }),
        AutoGate::CeilingReached { calls, limit } => Ok(Picked::Ceiling { calls, limit }),
    }
}

/// Closes attempts whose process is gone (and claims of this process on cards not in
/// `ours_running`): their ledger rows left `in_flight` become `unknown` (maybe billed; they
/// still count toward the hourly ceiling), and each card gets the failure (or, when nothing was
/// sent, its attempt back). Run at every gateway start and tick, and when a sweep starts.
pub async fn recover(
    board: &BoardHandle,
    ours_running: &HashSet<String>,
    budget: CardBudget,
    by: Origin,
) -> Result<Recovered, BoardError> {
    let ours = ours_running.clone();
    board
        .call(move |s| s.recover_abandoned(now_ms(), &ours, budget, by))
        .await
}

/// One log line for what [`recover`] found, if anything.
pub fn describe_recovered(recovered: &Recovered) -> Option<String> {
    if recovered.is_empty() {
        return None;
    }
    let mut parts = Vec::new();
    if recovered.closed_rows > 0 {
        parts.push(format!(
            "closed {} ledger row(s) left in flight by an attempt that did not record how they \
             went, as `unknown` (maybe billed; counted toward the hourly ceiling)",
            recovered.closed_rows
        ));
    }
    if !recovered.expired.is_empty() {
        parts.push(format!(
            "the claim on {} had expired and its holder's process cannot be checked from here \
             (frozen, or on another host): it may still be running, but nothing it sends or \
             answers now is applied",
            recovered.expired.join(", ")
        ));
    }
    if !recovered.failed.is_empty() {
        parts.push(format!(
            "recorded the abandoned attempt as failed on {}",
            recovered.failed.join(", ")
        ));
    }
    if !recovered.parked.is_empty() {
        parts.push(format!(
            "parked {} (that was its last attempt)",
            recovered
                .parked
                .iter()
                .map(|card| card.task_id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if !recovered.refunded.is_empty() {
        parts.push(format!(
            "gave the attempt back to {} (it never sent a request)",
            recovered.refunded.join(", ")
        ));
    }
    Some(parts.join("; "))
}

/// Runs one automatic attempt on a picked card.
pub async fn attempt(
    ctx: &AttemptContext,
    task_id: &str,
    origin: Origin,
    shutdown: watch::Receiver<bool>,
) -> Result<AttemptOutcome, AttemptError> {
    run_attempt(ctx, task_id, origin, shutdown).await
}

/// What the kill switch says when it is off; the gateway's tick and the sweep both stop on it.
pub const SWITCHED_OFF: &str = "auto-decompose is off (kanban.auto_decompose: false)";

/// Why a sweep ended.
#[derive(Debug, Clone, PartialEq)]
pub enum SweepStop {
    /// `kanban.auto_decompose` is off: nothing was attempted.
    SwitchedOff,
    /// No due card is left.
    Done,
    /// The board was paused (by an earlier refusal, here or in another process).
    Paused { until_ms: i64, reason: String },
    /// The hourly ceiling was reached.
    Ceiling { calls: u64, limit: u32 },
    /// An attempt of this sweep ran into a provider-wide fault; the pause is recorded.
    Fault(FaultPause),
    /// The provider could not be reached; the board-wide pause is recorded.
    Unreachable(UnreachablePause),
}

/// How a sweep went.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepReport {
    pub stop: SweepStop,
    /// Triage cards the sweep did not attempt (parked, in backoff, held, opted out, claimed),
    /// counted when it ran out of due cards.
    pub not_attempted: usize,
    /// What was found abandoned by dead processes when the sweep started.
    pub recovered: Recovered,
    /// Due cards set aside (parked without a request) because their rows cannot be read.
    pub set_aside: Vec<SetAside>,
}

/// `kanban decompose --all`: attempts every due card, one at a time and re-selected each round
/// (so a card that became due or stopped being due meanwhile is seen as it is now), within the
/// same kill switch, budget, pause and ceiling as the gateway. `on_outcome` sees every attempt
/// that ran.
pub async fn sweep(
    ctx: &AttemptContext,
    mut on_outcome: impl FnMut(&AttemptOutcome) -> anyhow::Result<()>,
) -> anyhow::Result<SweepReport> {
    if !ctx.config.kanban.auto_decompose {
        return Ok(stopped(
            SweepStop::SwitchedOff,
            Recovered::default(),
            Vec::new(),
        ));
    }
    let board = BoardHandle::open_long_lived(&ctx.db_path).await?;
    // One connection for the sweep and its attempts (see `AttemptContext::board`).
    let ctx = &ctx.sharing(&board);
    let recovered = recover(
        &board,
        &HashSet::new(),
        ctx.config.card_rules().budget,
        Origin::Sweep,
    )
    .await?;
    let calls_per_hour = ctx.config.kanban.decompose_calls_per_hour;
    let mut tried: HashSet<String> = HashSet::new();
    let mut set_aside_all = Vec::new();
    let mut full_sync = true;
    loop {
        let exclude = tried.clone();
        let picked = board
            .call(move |s| {
                pick(
                    s,
                    now_ms(),
                    calls_per_hour,
                    1,
                    &exclude,
                    full_sync,
                    Origin::Sweep,
                )
            })
            .await?;
        full_sync = false;
        let id = match picked {
            Picked::Paused { until_ms, reason } => {
                return Ok(stopped(
                    SweepStop::Paused { until_ms, reason },
                    recovered,
                    set_aside_all,
                ))
            }
            Picked::Ceiling { calls, limit } => {
                return Ok(stopped(
                    SweepStop::Ceiling { calls, limit },
                    recovered,
                    set_aside_all,
                ))
            }
            Picked::Due { cards, set_aside } => {
                set_aside_all.extend(set_aside);
                match cards.into_iter().next() {
                    Some(id) => id,
                    None => break,
                }
            }
        };
        tried.insert(id.clone());
        let outcome = attempt(ctx, &id, Origin::Sweep, no_shutdown()).await?;
        if let AttemptOutcome::Refused { .. } = outcome {
            continue;
        }
        on_outcome(&outcome)?;
        if let Some(fault) = outcome.fault() {
            return Ok(stopped(
                SweepStop::Fault(fault.clone()),
                recovered,
                set_aside_all,
            ));
        }
        if let Some(pause) = outcome.unreachable() {
            return Ok(stopped(
                SweepStop::Unreachable(pause.clone()),
                recovered,
                set_aside_all,
            ));
        }
    }
    let not_attempted = board
        .call(move |s| {
            let filter = ListFilter {
                status: Some(Status::Triage),
                ..Default::default()
            };
            Ok(s.list(&filter)?
                .iter()
                .filter(|t| !tried.contains(&t.id))
                .count())
        })
        .await?;
    Ok(SweepReport {
        stop: SweepStop::Done,
        not_attempted,
        recovered,
        set_aside: set_aside_all,
    })
}

fn stopped(stop: SweepStop, recovered: Recovered, set_aside: Vec<SetAside>) -> SweepReport {
    SweepReport {
        stop,
        not_attempted: 0,
        recovered,
        set_aside,
    }
}

/// The one line that says a card was set aside: its row cannot be read, so it is parked and
/// never paid for.
pub fn describe_set_aside(card: &SetAside) -> String {
    format!(
        "{} set aside without a request: {} (written by another tool?); it is parked: fix the \
         row, then `hermes kanban unpark {}`",
        card.task_id, card.why, card.task_id
    )
}

/// Never fires: a command-line attempt is not cancelled by a shutdown signal (Ctrl-C kills the
/// process, and the attempt already counted stays counted).
pub fn no_shutdown() -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    // Leaked on purpose for the process's short life, so the channel never reads as closed.
    std::mem::forget(tx);
    rx
}
