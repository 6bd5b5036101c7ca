//! A card's spawn state machine (S1, S3, S8): how many of its workers may end without
//! completing before it is parked, how long it waits between spawns, and what every way a run
//! can end does to the card and to its budget — decided in one place.
//!
//! The shape is `card`'s: each transition takes the card's spawn state as it is (`None` when it
//! has no row) and returns a [`SpawnStep`], the state to leave and the events to write. The
//! store reads the row, asks here and writes what comes back, inside the transaction that read
//! it. Nothing here reads the board, the clock or a process.
//!
//! A spawn is charged **before** its worker is forked: [`SpawnRules::begin`] counts a failure
//! that the run's end gives back when it was not one ([`RunOutcome::charged`]). So a worker and
//! a gateway that both die mid-run leave the card charged, and no restart or crash can hand a
//! card a fresh budget.

use serde_json::{json, Value};

use super::backoff::Backoff;
use super::card::Record;

/// A card's spawn bookkeeping (`hermes_spawn_state`). A card without a row has never been
/// spawned: [`SpawnState::default`], due at once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpawnState {
    /// Workers spawned for the card, all time.
    pub spawns: u32,
    /// Runs charged against the budget since the last unpark, the one in flight included (it is
    /// charged when it starts and given back if it ends without failing).
    pub failures: u32,
    /// Not spawned again before this time (ms since the epoch): its backoff. `None`: no wait.
    pub due_at_ms: Option<i64>,
    /// When the card was parked because its budget was spent.
    pub parked_at_ms: Option<i64>,
    /// Why its last charged run failed.
    pub last_error: Option<String>,
}

/// How many runs of a card may end without completing before it is parked (S1):
/// `kanban.failure_limit`, or the card's own `max_retries` (as upstream lets a card override it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpawnBudget {
    pub limit: u32,
}

/// The most a card's own `max_retries` may raise its budget to (the config key's range).
pub const MAX_FAILURE_LIMIT: u32 = 100;

impl SpawnBudget {
    pub const fn new(limit: u32) -> SpawnBudget {
        SpawnBudget { limit }
    }

    /// Whether a card with `failures` charged runs may be spawned no more.
    pub const fn spent(&self, failures: u32) -> bool {
        failures >= self.limit
    }

    /// Why a card with `failures` charged runs was parked: the words its event and the WARN
    /// share.
    pub fn spent_reason(&self, failures: u32) -> String {
        format!(
            "{failures} worker runs ended without completing; kanban.failure_limit is {}",
            self.limit
        )
    }
}

/// The rules every card's spawns follow under one configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpawnRules {
    pub budget: SpawnBudget,
    /// The wait after each charged run, doubling per failure (S3).
    pub backoff: Backoff,
}

impl SpawnRules {
    /// These rules for a card whose `max_retries` column says `max_retries` (a negative or absurd
    /// value another tool wrote is read as the range's end).
    pub fn for_card(self, max_retries: Option<i64>) -> SpawnRules {
        let Some(own) = max_retries else {
            return self;
        };
        let limit = u32::try_from(own.clamp(0, i64::from(MAX_FAILURE_LIMIT))).unwrap_or(0);
        SpawnRules {
            budget: SpawnBudget::new(limit),
            ..self
        }
    }
}

/// How a run ended: `task_runs.outcome` (and `status`, once it has ended). [`Self::as_str`] is
/// the only spelling of each; upstream's own names where the meaning is the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunOutcome {
    /// The worker called `kanban_complete`: the card is done.
    Completed,
    /// The worker handed the card to a person (`needs_input`, `capability`), or to a parent
    /// that is still open (`dependency`).
    Blocked,
    /// The gateway stopped the worker (SIGTERM/SIGINT, or a lowered `kanban.max_spawn`).
    Interrupted,
    /// The board's pause or hourly ceiling held the worker's first request back, or the provider
    /// could not be reached: nothing reached the provider.
    Held,
    /// The provider refused a request (401/402/403/429), the board's guard held a later request
    /// back, or the worker exited with a rate-limit (75) or refused-for-good (78) code.
    Refused,
    /// A request failed (5xx after its retries, a timeout, a malformed or cut reply), or the
    /// provider became unreachable after earlier requests had reached it.
    ProviderFailed,
    /// The worker used `agent.max_turns` turns without a terminal call.
    MaxTurns,
    /// The session ended cleanly without `kanban_complete` or `kanban_block` (upstream's name).
    ProtocolViolation,
    /// A nonzero or signalled exit, or an end nothing recorded (its exit status unknown).
    Crashed,
    /// The worker ran past its runtime limit and was stopped.
    TimedOut,
    /// The worker could not be started at all.
    SpawnFailed,
    /// The worker blocked the card in a way that sends it straight back to `ready`: a
    /// `dependency` block with no open parent, or a `transient` one.
    Requeued,
}

impl RunOutcome {
    pub const ALL: [RunOutcome; 12] = [
        Self::Completed,
        Self::Blocked,
        Self::Interrupted,
        Self::Held,
        Self::Refused,
        Self::ProviderFailed,
        Self::MaxTurns,
        Self::ProtocolViolation,
        Self::Crashed,
        Self::TimedOut,
        Self::SpawnFailed,
        Self::Requeued,
    ];

    /// The value in `task_runs.outcome` and the spawn ledger.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Blocked => "blocked",
            Self::Interrupted => "interrupted",
            Self::Held => "held",
            Self::Refused => "refused",
            Self::ProviderFailed => "provider_failed",
            Self::MaxTurns => "max_turns",
            Self::ProtocolViolation => "protocol_violation",
            Self::Crashed => "crashed",
            Self::TimedOut => "timed_out",
            Self::SpawnFailed => "spawn_failed",
            Self::Requeued => "requeued",
        }
    }

    /// The outcome a stored value spells, if this build knows it.
    pub fn parse(text: &str) -> Option<RunOutcome> {
        Self::ALL.into_iter().find(|o| o.as_str() == text)
    }

    /// Whether a run that ended so is charged against the card's spawn budget (S1). Every end
    /// is, but four: a completion, a hand-off to a person or to an open parent, the gateway's
    /// own stop, and a run nothing of which reached the provider because the board's guards (or
    /// an unreachable provider) held it back — those cost nothing and pause every spawn anyway.
    pub const fn charged(self) -> bool {
        !matches!(
            self,
            Self::Completed | Self::Blocked | Self::Interrupted | Self::Held
        )
    }

    /// How the gateway reads the exit of a worker that did not record how its run ended (the
    /// run is still open when its process is gone): `code` is its exit code, `None` when a
    /// signal ended it. A clean exit without a terminal call is a protocol violation; 75 and
    /// 78 are upstream's rate-limit and refused-for-good codes; anything else is a crash.
    pub const fn from_exit(code: Option<i32>) -> RunOutcome {
        match code {
            Some(0) => Self::ProtocolViolation,
            Some(EXIT_RATE_LIMITED | EXIT_PROVIDER_REFUSED) => Self::Refused,
            _ => Self::Crashed,
        }
    }
}

impl std::fmt::Display for RunOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A worker's exit code for "the provider rate-limited me" (upstream's
/// `KANBAN_RATE_LIMIT_EXIT_CODE`): the board pauses as for a 429 without `Retry-After`.
pub const EXIT_RATE_LIMITED: i32 = 75;
/// A worker's exit code for "the provider refused me for good" (upstream's
/// `KANBAN_TERMINAL_PROVIDER_EXIT_CODE`): the board pauses as for a 401/402/403.
pub const EXIT_PROVIDER_REFUSED: i32 = 78;

/// Why a worker blocked its card (`tasks.block_kind`; upstream's four kinds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockKind {
    /// A person must answer a question.
    NeedsInput,
    /// A person must grant something the worker cannot do.
    Capability,
    /// Another card must finish first.
    Dependency,
    /// Something that may clear by itself.
    Transient,
}

impl BlockKind {
    pub const ALL: [BlockKind; 4] = [
        Self::NeedsInput,
        Self::Capability,
        Self::Dependency,
        Self::Transient,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::NeedsInput => "needs_input",
            Self::Capability => "capability",
            Self::Dependency => "dependency",
            Self::Transient => "transient",
        }
    }

    /// The kind named `text`; none named means `needs_input` (a block a worker does not
    /// explain is one a person must look at).
    pub fn parse(text: Option<&str>) -> Result<BlockKind, String> {
        let Some(text) = text.map(str::trim).filter(|t| !t.is_empty()) else {
            return Ok(Self::NeedsInput);
        };
        Self::ALL
            .into_iter()
            .find(|k| k.as_str() == text)
            .ok_or_else(|| {
                let known: Vec<&str> = Self::ALL.iter().map(|k| k.as_str()).collect();
                format!(
                    "unknown block kind {text:?} (expected one of: {})",
                    known.join(", ")
                )
            })
    }

    /// Whether a card blocked so waits for a person: it is never spawned or auto-decomposed
    /// again until a person acts (S8, B7).
    pub const fn waits_for_a_person(self) -> bool {
        matches!(self, Self::NeedsInput | Self::Capability)
    }

    /// How a run that blocked its card this way ends: a hand-off to a person, or a wait on a
    /// parent that is still open, is not charged; a `dependency` block on no open parent (which
    /// would send the card straight back to `ready`, upstream's every-tick loop) and a
    /// `transient` one are.
    pub const fn run_outcome(self, open_parents: bool) -> RunOutcome {
        match self {
            Self::NeedsInput | Self::Capability => RunOutcome::Blocked,
            Self::Dependency if open_parents => RunOutcome::Blocked,
            Self::Dependency | Self::Transient => RunOutcome::Requeued,
        }
    }
}

/// Where a card goes when its run ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CardMove {
    /// `done` (its waiting children are promoted).
    Done,
    /// `blocked`, with the kind (`None`: parked by its spawn budget).
    Blocked(Option<BlockKind>),
    /// `todo`: it waits for a parent that is still open.
    WaitsForParents,
    /// Back to `ready` (its backoff, if any, in its spawn state).
    Ready,
}

impl CardMove {
    /// Where a card goes after a run that ended with `outcome` (`kind` for a block), when the
    /// end `parked` it or not.
    pub const fn after(outcome: RunOutcome, kind: Option<BlockKind>, parked: bool) -> CardMove {
        if parked {
            return CardMove::Blocked(None);
        }
        match (outcome, kind) {
            (RunOutcome::Completed, _) => CardMove::Done,
            (RunOutcome::Blocked, Some(BlockKind::Dependency)) => CardMove::WaitsForParents,
            (RunOutcome::Blocked, kind) => CardMove::Blocked(match kind {
                Some(kind) => Some(kind),
                None => Some(BlockKind::NeedsInput),
            }),
            _ => CardMove::Ready,
        }
    }

    /// The card's status after the move.
    pub const fn status(self) -> &'static str {
        match self {
            CardMove::Done => "done",
            CardMove::Blocked(_) => "blocked",
            CardMove::WaitsForParents => "todo",
            CardMove::Ready => "ready",
        }
    }
}

/// What a spawn transition decided: the state to leave and the events to write.
#[derive(Debug, Clone, PartialEq)]
pub struct SpawnStep {
    pub after: Option<SpawnState>,
    pub records: Vec<Record>,
}

impl SpawnStep {
    fn unchanged(before: Option<&SpawnState>) -> SpawnStep {
        SpawnStep {
            after: before.cloned(),
            records: Vec::new(),
        }
    }

    fn to(after: SpawnState) -> SpawnStep {
        SpawnStep {
            after: Some(after),
            records: Vec::new(),
        }
    }

    fn record(mut self, kind: &'static str, payload: Value) -> SpawnStep {
        self.records.push(Record { kind, payload });
        self
    }
}

/// Why no worker was spawned for a card (its own reasons; the board's are the caller's).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpawnRefusal {
    /// Its budget is spent: it waits for `hermes kanban unpark`.
    #[error("parked after {failures} worker runs ended without completing")]
    Parked { failures: u32 },
    /// It waits out its backoff (S3).
    #[error("in spawn backoff until {}", super::time::utc_ms(*until_ms))]
    InBackoff { until_ms: i64 },
}

/// What [`SpawnRules::begin`] decided.
#[derive(Debug, Clone, PartialEq)]
pub enum SpawnBegin {
    /// The spawn is counted (and charged until its run ends otherwise): `spawn` is the card's
    /// spawn number.
    Counted { step: SpawnStep, spawn: u32 },
    /// No spawn; `parked_now` when `step` parks a card found with its budget spent.
    Refused {
        refusal: SpawnRefusal,
        step: SpawnStep,
        parked_now: bool,
    },
}

/// A run's end, as [`SpawnRules::end`] takes it.
#[derive(Debug, Clone, Copy)]
pub struct RunEnd<'a> {
    pub run_id: i64,
    pub outcome: RunOutcome,
    /// The block's kind, for a run that blocked its card.
    pub kind: Option<BlockKind>,
    /// The worker's summary (a completion), its reason (a block), or what ended it.
    pub reason: &'a str,
    /// Who recorded the end (`worker`, `gateway`, `dispatch`): the process that owes a park its
    /// one WARN.
    pub by: &'a str,
    pub now_ms: i64,
}

/// What [`SpawnRules::end`] decided.
#[derive(Debug, Clone, PartialEq)]
pub struct Ended {
    pub step: SpawnStep,
    /// The end spent the card's budget: it is parked.
    pub parked: bool,
    /// Where the card goes.
    pub card: CardMove,
}

/// A time as events carry it: unix seconds, fractional.
fn seconds(ms: Option<i64>) -> Option<f64> {
    ms.map(|ms| ms as f64 / 1000.0)
}

impl SpawnRules {
    /// Counts a spawn before its worker is forked (S1), charging it until its run ends
    /// otherwise; or refuses a card that is parked, in backoff, or found with its budget spent
    /// (that one is parked here and then, with its `spawn_parked` event).
    pub fn begin(&self, before: Option<&SpawnState>, by: &str, now_ms: i64) -> SpawnBegin {
        let state = before.cloned().unwrap_or_default();
        if state.parked_at_ms.is_some() {
            return SpawnBegin::Refused {
                refusal: SpawnRefusal::Parked {
                    failures: state.failures,
                },
                step: SpawnStep::unchanged(before),
                parked_now: false,
            };
        }
        if self.budget.spent(state.failures) {
            // Its last run's end was never recorded as parking it (the budget was lowered
            // since, say): left ready, it would be offered and refused on every tick.
            let reason = self.budget.spent_reason(state.failures);
            let failures = state.failures;
            let after = SpawnState {
                due_at_ms: None,
                parked_at_ms: Some(now_ms),
                ..state
            };
            return SpawnBegin::Refused {
                refusal: SpawnRefusal::Parked { failures },
                step: SpawnStep::to(after)
                    .record("spawn_parked", self.parked(failures, &reason, by)),
                parked_now: true,
            };
        }
        if let Some(due) = state.due_at_ms.filter(|due| *due > now_ms) {
            return SpawnBegin::Refused {
                refusal: SpawnRefusal::InBackoff { until_ms: due },
                step: SpawnStep::unchanged(before),
                parked_now: false,
            };
        }
        let spawn = state.spawns.saturating_add(1);
        let after = SpawnState {
            spawns: spawn,
            failures: state.failures.saturating_add(1),
            ..state
        };
        SpawnBegin::Counted {
            step: SpawnStep::to(after),
            spawn,
        }
    }

    fn parked(&self, failures: u32, reason: &str, by: &str) -> Value {
        json!({"failures": failures, "limit": self.budget.limit, "reason": reason, "by": by})
    }

    /// Records how a run ended (S1, S3, S8): a charged end keeps the charge its spawn made,
    /// puts the card in its doubling backoff, or parks it once the budget is spent; any other
    /// end gives the charge back. The run's one end event is written here: `completed`,
    /// `blocked`, `run_interrupted`, `run_held`, or `spawn_failed` for a charged end (then
    /// `spawn_parked` when it parks the card).
    pub fn end(&self, before: Option<&SpawnState>, end: &RunEnd<'_>) -> Ended {
        let state = before.cloned().unwrap_or_default();
        if !end.outcome.charged() {
            let after = SpawnState {
                failures: state.failures.saturating_sub(1),
                ..state
            };
            let step = SpawnStep::to(after).record(uncharged_event(end), uncharged_payload(end));
            return Ended {
                step,
                parked: false,
                card: CardMove::after(end.outcome, end.kind, false),
            };
        }
        // The spawn charged itself; a row another tool wrote may not say so.
        let failures = state.failures.max(1);
        let park = self.budget.spent(failures);
        let due = (!park).then(|| self.backoff.due_ms(end.now_ms, failures));
        let after = SpawnState {
            failures,
            due_at_ms: due,
            parked_at_ms: if park {
                state.parked_at_ms.or(Some(end.now_ms))
            } else {
                state.parked_at_ms
            },
            last_error: Some(format!("{}: {}", end.outcome, end.reason)),
            ..state
        };
        let mut step = SpawnStep::to(after).record(
            "spawn_failed",
            json!({
                "run_id": end.run_id,
                "outcome": end.outcome.as_str(),
                "reason": end.reason,
                "failures": failures,
                "limit": self.budget.limit,
                "next_spawn_at": seconds(due),
            }),
        );
        if park {
            let reason = format!(
                "{} (last: {}: {})",
                self.budget.spent_reason(failures),
                end.outcome,
                end.reason
            );
            step = step.record("spawn_parked", self.parked(failures, &reason, end.by));
        }
        Ended {
            step,
            parked: park,
            card: CardMove::after(end.outcome, end.kind, park),
        }
    }

    /// A person gives a parked card a fresh spawn budget: no charged runs, no backoff. A card
    /// counts as parked once it is marked so or has spent its budget; any other is refused with
    /// its charged runs, and nothing changes.
    pub fn unpark(&self, before: Option<&SpawnState>, by: &str) -> Result<SpawnStep, u32> {
        let Some(state) =
            before.filter(|s| s.parked_at_ms.is_some() || self.budget.spent(s.failures))
        else {
            return Err(before.map_or(0, |s| s.failures));
        };
        let after = SpawnState {
            failures: 0,
            due_at_ms: None,
            parked_at_ms: None,
            last_error: None,
            ..state.clone()
        };
        Ok(SpawnStep::to(after).record(
            "spawn_unparked",
            json!({"failures": state.failures, "by": by}),
        ))
    }
}

/// The event an end that is not charged writes.
fn uncharged_event(end: &RunEnd<'_>) -> &'static str {
    match end.outcome {
        RunOutcome::Completed => "completed",
        RunOutcome::Blocked => "blocked",
        RunOutcome::Interrupted => "run_interrupted",
        _ => "run_held",
    }
}

fn uncharged_payload(end: &RunEnd<'_>) -> Value {
    match end.outcome {
        RunOutcome::Completed => json!({"run_id": end.run_id, "summary": end.reason}),
        RunOutcome::Blocked => json!({
            "run_id": end.run_id,
            "reason": end.reason,
            "kind": end.kind.map(BlockKind::as_str),
        }),
        _ => json!({"run_id": end.run_id, "reason": end.reason, "by": end.by}),
    }
}

#[cfg(test)]
#[path = "spawn_tests.rs"]
mod tests;
