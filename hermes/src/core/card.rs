//! A card's decompose state machine (B1, B2, B7): every change to a card's attempts, schedule,
//! park and opt-out, and the events that tell of it, decided in one place.
//!
//! Each transition takes the card's state as it is (`None` when the card has no state row) and
//! returns a [`Step`]: the state it leaves (`None` only when there was none and it adds none) and
//! the events to write. The store reads the row, asks here and writes what comes back, inside
//! the transaction that read it; nothing here reads the board or the clock. The bulk statement
//! that touches many rows at once (scheduling cards other tools wrote) keeps to these same rules
//! and says so where it is.

use serde_json::{json, Value};

use super::backoff::Backoff;
use super::budget::CardBudget;
use super::fault::{rate_limit_pause, ProviderFault};
use super::origin::Origin;
use super::refusal::BeginRefusal;
use super::time::after;

/// A card's decompose bookkeeping (`hermes_decompose_state`). A card without a row is treated
/// as [`DecomposeState::default`] with no due time of its own yet.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DecomposeState {
    /// Paid attempts recorded so far.
    pub attempts: u32,
    /// When the last attempt was recorded (ms since the epoch).
    pub last_attempt_at_ms: Option<i64>,
    /// Why the last attempt failed.
    pub last_error: Option<String>,
    /// When the card is next eligible for an automatic attempt; `None` = never.
    pub due_at_ms: Option<i64>,
    /// When the card was parked (its budget ran out, or it was set aside).
    pub parked_at_ms: Option<i64>,
    /// Auto-decompose switched off for this card (`--no-auto-decompose`).
    pub opt_out: bool,
}

impl DecomposeState {
    /// Whether an automatic path could pick the card once its due time comes: not parked and
    /// with a due time.
    fn schedulable(&self) -> bool {
        self.parked_at_ms.is_none() && self.due_at_ms.is_some()
    }
}

/// One event a transition writes on the card.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// The event's kind (`decompose_failed`, `decompose_parked`, …).
    pub kind: &'static str,
    pub payload: Value,
}

impl Record {
    /// `decompose_parked`: how many attempts the card had, why it was parked and which path
    /// parked it (`by`: the process that owes the card's one WARN, when it is a gateway).
    fn parked(attempts: u32, reason: &str, by: &str) -> Record {
        Record {
            kind: "decompose_parked",
            payload: json!({"attempts": attempts, "reason": reason, "by": by}),
        }
    }

    /// `decompose_failed`: which attempt, why, who made it and when the card is due again.
    fn failed(attempt: u32, reason: &str, origin: &str, due_ms: Option<i64>) -> Record {
        Record {
            kind: "decompose_failed",
            payload: json!({
                "attempt": attempt,
                "reason": reason,
                "origin": origin,
                "next_attempt_at": seconds(due_ms),
            }),
        }
    }
}

/// A time as the events carry it: unix seconds, fractional.
fn seconds(ms: Option<i64>) -> Option<f64> {
    ms.map(|ms| ms as f64 / 1000.0)
}

/// What a transition decided: the state to leave and the events to write.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub after: Option<DecomposeState>,
    pub records: Vec<Record>,
}

impl Step {
    /// Nothing changes.
    fn unchanged(before: Option<&DecomposeState>) -> Step {
        Step {
            after: before.cloned(),
            records: Vec::new(),
        }
    }

    /// The state changes to `after` and nothing is announced.
    fn to(after: DecomposeState) -> Step {
        Step {
            after: Some(after),
            records: Vec::new(),
        }
    }

    /// The state changes to `after` only where the card has a row; a card without one keeps
    /// having none.
    fn where_row(
        before: Option<&DecomposeState>,
        change: impl FnOnce(&mut DecomposeState),
    ) -> Step {
        let after = before.cloned().map(|mut state| {
            change(&mut state);
            state
        });
        Step {
            after,
            records: Vec::new(),
        }
    }

    fn record(mut self, record: Record) -> Step {
        self.records.push(record);
        self
    }
}

/// Why a card was parked, for the one WARN a gateway gives it (contract §7, B9).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParkCause<'a> {
    /// Its `attempt`-th automatic attempt failed and spent its budget.
    Failed { attempt: u32, last: &'a str },
    /// It was found with its budget spent but not yet parked.
    Spent { budget: CardBudget, attempts: u32 },
    /// Its last attempt was abandoned (its process ended) and that spent its budget.
    Abandoned,
    /// Its text cannot be sent.
    SetAside { why: &'a str },
}

impl ParkCause<'_> {
    /// The WARN's why.
    pub fn why(&self) -> String {
        match self {
            ParkCause::Failed { attempt, last } => {
                format!("{attempt} automatic attempts failed (last: {last})")
            }
            ParkCause::Spent { budget, attempts } => budget.spent_reason(*attempts),
            ParkCause::Abandoned => "its last automatic attempt was abandoned before it could \
                                     record how it went (its request may have been billed)"
                .to_owned(),
            ParkCause::SetAside { why } => {
                format!("set aside without a request: {why} (written by another tool?)")
            }
        }
    }
}

/// The rules a card's transitions follow under one configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CardRules {
    /// How many automatic attempts a card gets.
    pub budget: CardBudget,
    /// How long it waits after each failure.
    pub backoff: Backoff,
}

/// A failed attempt, as [`CardRules::fail`] takes it.
#[derive(Debug, Clone, Copy)]
pub struct Failure<'a> {
    pub attempt: u32,
    pub origin: Origin,
    /// The card's summary of why.
    pub reason: &'a str,
    /// The provider-wide fault behind it, if any: a rate limit's `Retry-After` also holds the
    /// card back.
    pub fault: Option<&'a ProviderFault>,
    pub now_ms: i64,
}

/// What [`CardRules::fail`] decided.
#[derive(Debug, Clone, PartialEq)]
pub struct Failed {
    pub step: Step,
    /// The attempt spent the card's budget: it is parked (or stays so).
    pub parked: bool,
}

/// An attempt whose process ended before it recorded how it went, as [`CardRules::abandon`]
/// takes it.
#[derive(Debug, Clone, Copy)]
pub struct Abandonment<'a> {
    /// The attempt the claim named.
    pub attempt: u32,
    /// Who made it, as its claim says.
    pub origin: &'a str,
    /// What ended it (`its process died`, `its claim expired`).
    pub why: &'a str,
    /// Whether any of its requests may have reached the provider.
    pub sent: bool,
    /// Whether the card is still in triage.
    pub in_triage: bool,
    /// The path closing it.
    pub by: Origin,
    pub now_ms: i64,
}

/// What closing an abandoned attempt did to its card.
#[derive(Debug, Clone, PartialEq)]
pub enum Abandoned {
    /// It sent nothing and was given back.
    GivenBack(Step),
    /// It may have been billed: recorded as failed, and parked when that spent the budget.
    Failed { step: Step, parked: bool },
    /// Not the card's current attempt, or the card left triage: the card is left as it is.
    Untouched,
}

/// What [`CardRules::begin`] decided for an automatic attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum Begin {
    /// The attempt is counted: `attempt` is its number.
    Counted { step: Step, attempt: u32 },
    /// No attempt; `step` parks a card found with its budget spent but never parked.
    Refused { refusal: BeginRefusal, step: Step },
}

impl CardRules {
    /// A card's state when it is created: an opted-out card is never scheduled, a triage card is
    /// due from its creation, and any other card gets no row.
    pub fn created(triage: bool, opt_out: bool, created_ms: i64) -> Step {
        let after = if opt_out {
            Some(DecomposeState {
                opt_out: true,
                ..DecomposeState::default()
            })
        } else if triage {
            Some(DecomposeState {
                due_at_ms: Some(created_ms),
                ..DecomposeState::default()
            })
        } else {
            None
        };
        Step {
            after,
            records: Vec::new(),
        }
    }

    /// Counts an attempt before any request is sent (B1), or refuses an automatic one.
    ///
    /// `automatic` is `Some(hold)` for an automatic attempt, with the card's human hold if it
    /// has one (B7); `None` for a person's attempt, which the card's budget, backoff and holds do
    /// not stop. Until the outcome is known the card is treated as failed: its due time moves to
    /// after the attempt's backoff, so a crash mid-call cannot make it due again at once.
    pub fn begin(
        &self,
        before: Option<&DecomposeState>,
        automatic: Option<(Origin, Option<String>)>,
        now_ms: i64,
    ) -> Begin {
        let state = before.cloned().unwrap_or_default();
        if let Some((by, hold)) = automatic {
            if let Some((refusal, step)) = self.automatic_refusal(before, by, hold, now_ms) {
                return Begin::Refused { refusal, step };
            }
        }
        let attempt = state.attempts.saturating_add(1);
        // A card that is not automatically schedulable stays so after a manual attempt. A card
        // switched off keeps its schedule (for when it is switched back on), so its backoff
        // moves with the attempt too.
        let schedulable = before.is_none_or(DecomposeState::schedulable);
        let after = DecomposeState {
            attempts: attempt,
            last_attempt_at_ms: Some(now_ms),
            due_at_ms: schedulable.then(|| self.backoff.due_ms(now_ms, attempt)),
            ..state
        };
        Begin::Counted {
            step: Step::to(after),
            attempt,
        }
    }

    fn automatic_refusal(
        &self,
        before: Option<&DecomposeState>,
        by: Origin,
        hold: Option<String>,
        now_ms: i64,
    ) -> Option<(BeginRefusal, Step)> {
        let refuse = |refusal| Some((refusal, Step::unchanged(before)));
        let state = before.cloned().unwrap_or_default();
        if state.opt_out {
            return refuse(BeginRefusal::OptedOut);
        }
        // A card with no state row yet has had no attempt; with a budget of 0 it gets none.
        let attempts = state.attempts;
        if state.parked_at_ms.is_some() {
            return refuse(BeginRefusal::Parked { attempts });
        }
        if self.budget.spent(attempts) {
            // The budget is spent but the card was never parked: its last attempt died before
            // recording its end, or the budget was lowered since. Left due, it would be picked
            // and refused on every tick, holding a slot fresh cards need (B2).
            let reason = self.budget.spent_reason(attempts);
            let after = DecomposeState {
                due_at_ms: None,
                parked_at_ms: Some(now_ms),
                ..state
            };
            let step = Step::to(after).record(Record::parked(attempts, &reason, by.as_str()));
            return Some((BeginRefusal::Parked { attempts }, step));
        }
        if let Some(why) = hold {
            return refuse(BeginRefusal::Hold { why });
        }
        match before.map(|s| s.due_at_ms) {
            Some(None) => refuse(BeginRefusal::NotScheduled),
            Some(Some(due)) if due > now_ms => refuse(BeginRefusal::InBackoff { until_ms: due }),
            _ => None,
        }
    }

    /// Records a failed attempt (B1, B2): the card waits out its backoff (and a rate limit's
    /// `Retry-After`), or is parked once the attempt spent its budget.
    pub fn fail(&self, before: Option<&DecomposeState>, failure: &Failure<'_>) -> Failed {
        let Failure {
            attempt,
            origin,
            reason,
            fault,
            now_ms,
        } = *failure;
        let park = self.budget.spent(attempt);
        let mut next = self.backoff.due_ms(now_ms, attempt);
        if let Some(ProviderFault::RateLimited {
            retry_after: Some(wait),
        }) = fault
        {
            next = next.max(after(now_ms, rate_limit_pause(Some(*wait))));
        }
        let already_parked = before.is_some_and(|s| s.parked_at_ms.is_some());
        // A card that was not schedulable (switched off, parked) does not become so by failing.
        let schedulable = before.is_some_and(DecomposeState::schedulable);
        let due = (!park && schedulable).then_some(next);
        let mut step = Step::where_row(before, |state| {
            state.last_error = Some(reason.to_owned());
            state.due_at_ms = due;
            if park {
                state.parked_at_ms = state.parked_at_ms.or(Some(now_ms));
            }
        })
        .record(Record::failed(attempt, reason, origin.as_str(), due));
        if park && !already_parked {
            step = step.record(Record::parked(attempt, reason, origin.as_str()));
        }
        Failed { step, parked: park }
    }

    /// Gives back attempt `attempt`, which sent nothing the provider received: it is not
    /// counted, and a scheduled card is due again now. Only the card's latest attempt is given
    /// back.
    pub fn give_back(before: Option<&DecomposeState>, attempt: u32, now_ms: i64) -> Step {
        match before {
            Some(state) if state.attempts == attempt && state.attempts > 0 => {
                Step::to(DecomposeState {
                    attempts: state.attempts - 1,
                    due_at_ms: state.due_at_ms.map(|due| due.min(now_ms)),
                    ..state.clone()
                })
            }
            _ => Step::unchanged(before),
        }
    }

    /// An attempt ended with an answer (applied, or the card had left triage meanwhile): the
    /// card is no longer waiting for an automatic attempt.
    pub fn answered(before: Option<&DecomposeState>) -> Step {
        Step::where_row(before, |state| {
            state.due_at_ms = None;
            state.last_error = None;
        })
    }

    /// The card was archived: it is never due again.
    pub fn retired(before: Option<&DecomposeState>) -> Step {
        Step::where_row(before, |state| state.due_at_ms = None)
    }

    /// Closes an attempt whose process ended before recording how it went (B1): one that sent
    /// nothing is given back; one that may have been billed counts as failed, and parks the card
    /// when it spent the budget. Its card keeps its due time otherwise: the attempt already
    /// moved it past its backoff when it began.
    pub fn abandon(
        budget: CardBudget,
        before: Option<&DecomposeState>,
        abandoned: &Abandonment<'_>,
    ) -> Abandoned {
        let current = before.is_some_and(|s| s.attempts == abandoned.attempt);
        if !abandoned.sent {
            return if current {
                Abandoned::GivenBack(Self::give_back(before, abandoned.attempt, abandoned.now_ms))
            } else {
                Abandoned::Untouched
            };
        }
        let Some(state) = before.filter(|_| current && abandoned.in_triage) else {
            return Abandoned::Untouched;
        };
        let park = state.parked_at_ms.is_none() && budget.spent(state.attempts);
        let reason = format!(
            "abandoned: {} before recording how attempt {} went (its request may have been \
             billed; an answer that still comes is not applied)",
            abandoned.why, abandoned.attempt
        );
        let after = DecomposeState {
            last_error: Some(reason.clone()),
            due_at_ms: if park { None } else { state.due_at_ms },
            parked_at_ms: if park {
                Some(abandoned.now_ms)
            } else {
                state.parked_at_ms
            },
            ..state.clone()
        };
        let due = after.due_at_ms;
        let mut step = Step::to(after).record(Record::failed(
            abandoned.attempt,
            &reason,
            abandoned.origin,
            due,
        ));
        if park {
            step = step.record(Record::parked(
                state.attempts,
                &reason,
                abandoned.by.as_str(),
            ));
        }
        Abandoned::Failed { step, parked: park }
    }

    /// Parks a card whose text cannot be sent, without a request: no automatic path picks it
    /// again until a person fixes the row and unparks it. Its attempts are left as they were.
    pub fn set_aside(before: Option<&DecomposeState>, why: &str, by: Origin, now_ms: i64) -> Step {
        let state = before.cloned().unwrap_or_default();
        let reason = format!("set aside without a request: {why}");
        let attempts = state.attempts;
        let after = DecomposeState {
            due_at_ms: None,
            parked_at_ms: state.parked_at_ms.or(Some(now_ms)),
            last_error: Some(reason.clone()),
            ..state
        };
        Step::to(after).record(Record::parked(attempts, &reason, by.as_str()))
    }

    /// A person gives a parked card a fresh budget (B1): its attempts start again from 0 and it
    /// is due now (unless switched off). A card counts as parked once it is marked so or has
    /// used its budget; any other card is refused with its attempts, and nothing changes.
    pub fn unpark(
        budget: CardBudget,
        before: Option<&DecomposeState>,
        by: &str,
        now_ms: i64,
    ) -> Result<Step, u32> {
        let Some(state) = before.filter(|s| s.parked_at_ms.is_some() || budget.spent(s.attempts))
        else {
            return Err(before.map_or(0, |s| s.attempts));
        };
        let due = (!state.opt_out).then_some(now_ms);
        let after = DecomposeState {
            attempts: 0,
            parked_at_ms: None,
            last_error: None,
            due_at_ms: due,
            ..state.clone()
        };
        Ok(Step::to(after).record(Record {
            kind: "decompose_unparked",
            payload: json!({
                "attempts": state.attempts,
                "by": by,
                "next_attempt_at": seconds(due),
            }),
        }))
    }

    /// Switches a card's auto-decompose on or off (B7), with an event when it changes; `None`
    /// when it already was so. Off keeps the card's due time, so a card in backoff that is
    /// switched off and on again still waits it out; its budget is never touched here. On
    /// schedules a triage card that is not parked and never had a due time now.
    pub fn switch(
        before: Option<&DecomposeState>,
        enabled: bool,
        in_triage: bool,
        by: &str,
        now_ms: i64,
    ) -> Option<Step> {
        // A card without a state row has never been opted out.
        let was_enabled = before.is_none_or(|s| !s.opt_out);
        if was_enabled == enabled {
            return None;
        }
        let state = before.cloned().unwrap_or_default();
        let kept = state.due_at_ms;
        let due = if enabled {
            let schedulable = in_triage && state.parked_at_ms.is_none();
            schedulable.then(|| kept.unwrap_or(now_ms))
        } else {
            kept
        };
        let kind = if enabled {
            "auto_decompose_enabled"
        } else {
            "auto_decompose_disabled"
        };
        let after = DecomposeState {
            opt_out: !enabled,
            due_at_ms: due,
            ..state
        };
        Some(Step::to(after).record(Record {
            kind,
            payload: json!({"by": by}),
        }))
    }
}

/// When a card is scheduled for an automatic attempt: never while it is switched off, whatever
/// due time it keeps for when it is back.
pub fn scheduled(state: Option<&DecomposeState>) -> Option<i64> {
    state.filter(|s| !s.opt_out).and_then(|s| s.due_at_ms)
}

#[cfg(test)]
#[path = "card_tests.rs"]
mod tests;
