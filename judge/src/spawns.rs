//! The spawn invariants (contract §8, 16–23): judged from the fake provider's worker sessions,
//! the census of worker processes, the test's history and the rows.
//!
//! A session is one spawn that reached the provider (its first request carries the system prompt
//! and `work kanban task <id>` only). It is **charged** unless it ended as the contract gives a
//! charge back: the fake told its worker to `kanban_complete`, or to hand the card to a person
//! (`kanban_block` of kind `needs_input` or `capability`), or the gateway's own stop ended it
//! (its run closed `interrupted` while a stop of the board's gateway was under way). A run that
//! never reached the provider (held by a pause, a spawn that failed) is no session, and costs
//! nothing here.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::calls::{ceiling_over, or_default, pause_over, CLOCK_SLACK_MS};
use crate::facts::{Call, Facts};
use fixtures::aux_model::WorkerRequest;
use fixtures::config::Setting;
use fixtures::history::What;
use fixtures::workers::census::SAMPLE_INTERVAL;

/// The contract's stop: SIGTERM ends a gateway and every worker of it within 5 s (S7).
pub const STOP_BOUND: Duration = Duration::from_secs(5);

/// What the census's sampling and two processes' clocks may add to a moment it judges.
const CENSUS_SLACK: Duration = Duration::from_secs(1);

/// How long workers started under a higher cap may still run after the edit that lowered it:
/// the next tick (added per config), the stop of a worker group (SIGTERM, SIGKILL after 2 s),
/// and slack.
const LOWERED_CAP_GRACE: Duration = Duration::from_secs(3);

/// How one session ended, as far as the charge goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    /// Told to `kanban_complete`.
    Completed,
    /// Told to hand the card to a person.
    HandedOff,
    /// Ended by the gateway's own stop.
    Interrupted,
    /// Any other end: charged.
    Charged,
}

/// One worker session of a card.
#[derive(Debug, Clone)]
pub(crate) struct Session<'f> {
    pub(crate) card: String,
    pub(crate) requests: Vec<&'f WorkerRequest>,
    pub(crate) ending: Ending,
}

impl Session<'_> {
    pub(crate) fn opened(&self) -> Instant {
        self.requests
            .first()
            .map_or_else(Instant::now, |r| r.received.arrived)
    }

    fn opened_unix_ms(&self) -> i64 {
        self.requests
            .first()
            .map_or(0, |r| r.received.arrived_unix_ms)
    }

    /// When its last request was answered.
    pub(crate) fn last_answered(&self) -> Instant {
        self.requests
            .iter()
            .map(|r| r.received.answered())
            .max()
            .unwrap_or_else(|| self.opened())
    }
}

/// Every card's sessions, in the order they opened, with how each ended.
pub(crate) fn sessions<'f>(facts: &'f Facts<'_>) -> BTreeMap<String, Vec<Session<'f>>> {
    let mut by_card: BTreeMap<String, BTreeMap<usize, Vec<&WorkerRequest>>> = BTreeMap::new();
    for request in facts.worker_requests.iter().filter(|r| r.agent_turn) {
        by_card
            .entry(request.card.clone())
            .or_default()
            .entry(request.session)
            .or_default()
            .push(request);
    }
    let interrupted = interrupted_spans(facts);
    by_card
        .into_iter()
        .map(|(card, numbered)| {
            let sessions = numbered
                .into_values()
                .filter(|requests| requests.iter().any(|r| r.opens_session()))
                .map(|requests| {
                    let mut session = Session {
                        card: card.clone(),
                        requests,
                        ending: Ending::Charged,
                    };
                    session.ending = ending_of(&session, &interrupted);
                    session
                })
                .collect();
            (card, sessions)
        })
        .collect()
}

fn ending_of(session: &Session<'_>, interrupted: &[(String, i64, i64)]) -> Ending {
    let told: Vec<(String, Option<String>)> = session
        .requests
        .iter()
        .filter_map(|r| r.answered_tool())
        .collect();
    if told.iter().any(|(tool, _)| tool == "kanban_complete") {
        return Ending::Completed;
    }
    if told.iter().any(|(tool, kind)| {
        tool == "kanban_block" && matches!(kind.as_deref(), Some("needs_input" | "capability"))
    }) {
        return Ending::HandedOff;
    }
    let opened = session.opened_unix_ms();
    if interrupted
        .iter()
        .any(|(card, from, to)| *card == session.card && (*from..=*to).contains(&opened))
    {
        return Ending::Interrupted;
    }
    Ending::Charged
}

/// The spans (unix ms) of runs closed `interrupted` while a stop of the board's gateway was
/// under way: the reference's spawn ledger to the millisecond where it has one, else
/// `task_runs` to the second.
fn interrupted_spans(facts: &Facts<'_>) -> Vec<(String, i64, i64)> {
    let Some(db) = facts.db() else {
        return Vec::new();
    };
    let stops: Vec<(i64, i64)> = facts
        .happenings
        .iter()
        .filter_map(|h| match &h.what {
            What::GatewayStopped { report, .. } => {
                let elapsed = i64::try_from(report.elapsed.as_millis()).unwrap_or(i64::MAX);
                Some((h.at_unix_ms.saturating_sub(elapsed), h.at_unix_ms))
            }
            _ => None,
        })
        .collect();
    let during_a_stop = |ended_ms: i64| {
        stops.iter().any(|(began, ended)| {
            (began - CLOCK_SLACK_MS..=ended + 1000 + CLOCK_SLACK_MS).contains(&ended_ms)
        })
    };
    let text = |row: &serde_json::Map<String, Value>, column: &str| {
        row.get(column).and_then(Value::as_str).map(str::to_owned)
    };
    let int = |row: &serde_json::Map<String, Value>, column: &str| {
        row.get(column).and_then(Value::as_i64)
    };
    let ledger = db.rows("hermes_spawn_ledger");
    let rows: Vec<(String, i64, i64)> = if ledger.is_empty() {
        db.rows("task_runs")
            .iter()
            .filter(|row| text(row, "outcome").as_deref() == Some("interrupted"))
            .filter_map(|row| {
                let ended = int(row, "ended_at")? * 1000;
                Some((
                    text(row, "task_id")?,
                    int(row, "started_at")? * 1000 - 1000,
                    ended + 1000,
                ))
            })
            .collect()
    } else {
        ledger
            .iter()
            .filter(|row| text(row, "outcome").as_deref() == Some("interrupted"))
            .filter_map(|row| {
                Some((
                    text(row, "task_id")?,
                    int(row, "started_at_ms")? - CLOCK_SLACK_MS,
                    int(row, "exited_at_ms")?,
                ))
            })
            .collect()
    };
    rows.into_iter()
        .filter(|(_, _, ended)| during_a_stop(*ended))
        .collect()
}

/// How many of `card`'s sessions were charged: what S1 bounds.
pub(crate) fn charged(sessions: &[Session<'_>]) -> usize {
    sessions
        .iter()
        .filter(|s| s.ending == Ending::Charged)
        .count()
}

/// Successful `unpark` calls naming `card`, by start.
fn unparks_of(facts: &Facts<'_>, card: &str) -> Vec<Instant> {
    facts
        .succeeded("unpark")
        .filter(|(_, call)| call.positionals(&["--by"]).contains(&card))
        .map(|(at, _)| *at)
        .collect()
}

/// Invariant 16: each card's charged sessions between unparks stay within its spawn budget, and each
/// session's turns within `agent.max_turns` turns of `1 + transient_retries` tries.
pub(crate) fn budget(facts: &Facts<'_>) -> Vec<String> {
    let limit = or_default(facts.loosest(Setting::FailureLimit), Setting::FailureLimit);
    let turns = or_default(facts.loosest(Setting::MaxTurns), Setting::MaxTurns)
        * (1.0 + or_default(facts.loosest(Setting::Retries), Setting::Retries));
    let mut found = Vec::new();
    for (card, sessions) in sessions(facts) {
        let unparks = unparks_of(facts, &card);
        let mut stretches: Vec<Vec<&Session<'_>>> = vec![Vec::new()];
        for session in &sessions {
            let opened = session.opened();
            let since = unparks.iter().filter(|u| **u <= opened).count();
            while stretches.len() <= since {
                stretches.push(Vec::new());
            }
            stretches[since].push(session);
        }
        for (stretch, sessions) in stretches.iter().enumerate() {
            let charged = sessions
                .iter()
                .filter(|s| s.ending == Ending::Charged)
                .count();
            if charged as f64 > limit {
                found.push(format!(
                    "{card}: {charged} charged worker sessions{}, past the spawn budget of {limit}",
                    if stretch == 0 {
                        String::new()
                    } else {
                        format!(" after unpark {stretch}")
                    }
                ));
            }
        }
        for (number, session) in sessions.iter().enumerate() {
            if session.requests.len() as f64 > turns {
                found.push(format!(
                    "{card}: session {} made {} requests, past {turns} turns and tries",
                    number + 1,
                    session.requests.len()
                ));
            }
        }
    }
    found
}

/// Invariant 17: at most one live worker per card at any sample of the census; on the reference, no two
/// spawn-ledger rows of one card overlap.
pub(crate) fn one_per_card(facts: &Facts<'_>) -> Vec<String> {
    let mut found = Vec::new();
    if let Some(census) = &facts.census {
        let mut reported = std::collections::BTreeSet::new();
        for sample in &census.samples {
            for (card, groups) in &sample.live {
                if groups.len() > 1 && reported.insert(card.clone()) {
                    found.push(format!(
                        "{card}: {} live workers at once at {} (process groups {groups:?})",
                        groups.len(),
                        facts.at(sample.at)
                    ));
                }
            }
        }
    }
    if let Some(db) = facts.db() {
        let mut spans: BTreeMap<String, Vec<(i64, i64)>> = BTreeMap::new();
        for row in db.rows("hermes_spawn_ledger") {
            let (Some(card), Some(from)) = (
                row.get("task_id").and_then(Value::as_str),
                row.get("started_at_ms").and_then(Value::as_i64),
            ) else {
                continue;
            };
            let to = row
                .get("exited_at_ms")
                .and_then(Value::as_i64)
                .unwrap_or(i64::MAX);
            spans.entry(card.to_owned()).or_default().push((from, to));
        }
        for (card, mut spans) in spans {
            spans.sort_unstable();
            if spans.windows(2).any(|pair| pair[1].0 < pair[0].1) {
                found.push(format!(
                    "{card}: two spawn-ledger rows of the card overlap in time"
                ));
            }
        }
    }
    found
}

/// Invariant 18: a card's next session after a charged one waits its spawn backoff (base × 2ⁿ⁻¹ after its
/// n-th charged session, at most an hour), start to start, unless a person unparked it.
pub(crate) fn backoff(facts: &Facts<'_>) -> Vec<String> {
    let mut found = Vec::new();
    for (card, sessions) in sessions(facts) {
        let unparks = unparks_of(facts, &card);
        let mut charged_so_far = 0i32;
        for pair in sessions.windows(2) {
            let (earlier, later) = (&pair[0], &pair[1]);
            if unparks
                .iter()
                .any(|u| *u >= earlier.opened() && *u <= later.opened())
            {
                charged_so_far = 0;
                continue;
            }
            if earlier.ending != Ending::Charged {
                continue;
            }
            charged_so_far += 1;
            let base = or_default(
                facts.in_force_at(earlier.opened(), Setting::SpawnBackoff),
                Setting::SpawnBackoff,
            );
            let owed = (base * 2f64.powi(charged_so_far - 1)).min(3600.0);
            let waited = later.opened().saturating_duration_since(earlier.opened());
            if waited.as_secs_f64() + 0.05 < owed {
                found.push(format!(
                    "{card}: worker session at {} only {:.2} s after a charged one, not its \
                     {owed:.2} s backoff",
                    facts.at(later.opened()),
                    waited.as_secs_f64()
                ));
            }
        }
    }
    found
}

/// Invariant 19: no worker request while a board-wide pause is in force (whichever half met the refusal),
/// past the requests in flight when it landed; in every rolling hour both halves' requests
/// together stay within the ceiling.
pub(crate) fn pause_and_ceiling(facts: &Facts<'_>) -> Vec<String> {
    let both: Vec<&Call> = facts.calls.iter().chain(&facts.worker_calls).collect();
    let worker = |call: &Call| facts.worker_calls.iter().any(|w| std::ptr::eq(w, call));
    // What only the decompose half did is invariant 3's and 4's to report.
    let mut found = pause_over(facts, &both, |refusal, call| {
        worker(refusal) || worker(call)
    });
    if !facts.worker_calls.is_empty() {
        let decompose_only = ceiling_over(facts, &facts.calls.iter().collect::<Vec<_>>());
        found.extend(
            ceiling_over(facts, &both)
                .into_iter()
                .filter(|finding| !decompose_only.contains(finding)),
        );
    }
    found
}

/// Invariant 20: live workers never exceed `max_spawn`: at each census sample, the loosest cap in force
/// over the span a lowered cap may take to be met (the tick and the stop's grace).
pub(crate) fn cap(facts: &Facts<'_>) -> Vec<String> {
    let Some(census) = &facts.census else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for sample in &census.samples {
        let total = sample.total();
        if total == 0 {
            continue;
        }
        let tick = or_default(facts.in_force_at(sample.at, Setting::Tick), Setting::Tick);
        let grace = LOWERED_CAP_GRACE + Duration::from_secs_f64(tick.clamp(0.0, 60.0));
        let from = sample.at.checked_sub(grace).unwrap_or(facts.started);
        let cap = facts
            .configs
            .iter()
            .filter(|(written, _)| *written <= sample.at)
            .filter(|(written, _)| *written >= from)
            .chain(
                facts
                    .configs
                    .iter()
                    .rev()
                    .find(|(written, _)| *written <= from),
            )
            .filter_map(|(_, config)| config.in_force(facts.target, Setting::MaxSpawn))
            .reduce(f64::max)
            .unwrap_or_else(|| or_default(None, Setting::MaxSpawn));
        if total as f64 > cap {
            found.push(format!(
                "{total} live workers at {}, past max_spawn {cap}",
                facts.at(sample.at)
            ));
        }
    }
    found.dedup();
    found
}

/// The graceful stops of the board's gateways after which none ran for the stop's bound: when
/// the stop began.
fn final_stops(facts: &Facts<'_>) -> Vec<Instant> {
    let mut stops = Vec::new();
    for (index, happening) in facts.happenings.iter().enumerate() {
        let What::GatewayStopped { report, .. } = &happening.what else {
            continue;
        };
        if report.already_exited {
            continue;
        }
        let began = happening
            .at
            .checked_sub(report.elapsed)
            .unwrap_or(happening.at);
        let restarted = facts.happenings[index + 1..].iter().any(|later| {
            matches!(later.what, What::GatewayStarted { .. })
                && later.at <= began + STOP_BOUND + CENSUS_SLACK
        });
        if !restarted {
            stops.push(began);
        }
    }
    stops
}

/// Invariant 21: no worker process outlives a gateway's stop by more than its bound, and no worker request
/// arrives after it (while no gateway of the board runs).
pub(crate) fn reaped(facts: &Facts<'_>) -> Vec<String> {
    let mut found = Vec::new();
    let starts: Vec<Instant> = facts
        .happenings
        .iter()
        .filter(|h| matches!(h.what, What::GatewayStarted { .. }))
        .map(|h| h.at)
        .collect();
    for began in final_stops(facts) {
        let deadline = began + STOP_BOUND + CENSUS_SLACK;
        let next_start = starts.iter().copied().find(|start| *start > began);
        let quiet = |at: Instant| at > deadline && next_start.is_none_or(|start| at < start);
        if let Some(census) = &facts.census {
            for group in &census.groups {
                if group.first_seen < began && quiet(group.last_seen) {
                    found.push(format!(
                        "{}: worker group {} still live at {}, {:.1} s after the gateway's \
                         SIGTERM at {}",
                        group.card,
                        group.pgid,
                        facts.at(group.last_seen),
                        group
                            .last_seen
                            .saturating_duration_since(began)
                            .as_secs_f64(),
                        facts.at(began)
                    ));
                }
            }
        }
        for request in &facts.worker_requests {
            if quiet(request.received.arrived) {
                found.push(format!(
                    "{}: worker request at {}, after the gateway's stop at {}",
                    request.card,
                    facts.at(request.received.arrived),
                    facts.at(began)
                ));
            }
        }
    }
    found
}

/// When the census must look again before [`reaped`] can be judged: the last stop's bound, when
/// a worker was live at the census's last sample and that moment has not come yet.
pub(crate) fn reaped_needs_until(facts: &Facts<'_>) -> Option<Instant> {
    let census = facts.census.as_ref()?;
    let last = census.samples.last()?;
    let began = final_stops(facts).into_iter().max()?;
    let deadline = began + STOP_BOUND + CENSUS_SLACK + SAMPLE_INTERVAL;
    (last.total() > 0 && Instant::now() < deadline).then_some(deadline)
}

/// Invariant 22: a card a worker handed to a person gets no session and no decompose call until a
/// person's verb names it.
pub(crate) fn hand_offs(facts: &Facts<'_>) -> Vec<String> {
    let mut found = Vec::new();
    for (card, sessions) in sessions(facts) {
        for session in sessions.iter().filter(|s| s.ending == Ending::HandedOff) {
            let handed = session.last_answered();
            let person = facts
                .cli
                .iter()
                .filter(|(at, call)| {
                    *at >= handed
                        && call.succeeded()
                        && !call.is("show")
                        && !call.is("list")
                        && call.positionals(&[]).contains(&card.as_str())
                })
                .map(|(at, _)| *at)
                .min();
            let until = person.unwrap_or_else(|| Instant::now() + Duration::from_secs(1));
            let later_sessions = sessions
                .iter()
                .filter(|s| s.opened() > handed && s.opened() < until)
                .count();
            let calls = facts
                .calls_for(&card)
                .filter(|c| c.received.arrived > handed && c.received.arrived < until)
                .count();
            if later_sessions + calls > 0 {
                found.push(format!(
                    "{card}: {later_sessions} worker session(s) and {calls} decompose call(s) \
                     after its worker handed it to a person at {}, with no person's action",
                    facts.at(handed)
                ));
            }
        }
    }
    found
}

/// Invariant 23: on the reference, one closed worker ledger row per worker request, and a spawn-ledger
/// row for every session.
pub(crate) fn ledger(facts: &Facts<'_>) -> Vec<String> {
    let Some(db) = facts.db() else {
        return Vec::new();
    };
    let mut found = Vec::new();
    let worker_rows: Vec<_> = db
        .rows("hermes_aux_ledger")
        .iter()
        .filter(|row| row.get("purpose").and_then(Value::as_str) == Some("worker"))
        .collect();
    let open = worker_rows
        .iter()
        .filter(|row| row.get("ended_at_ms").is_none_or(Value::is_null))
        .count();
    if open > 0 {
        found.push(format!("{open} worker ledger row(s) never closed"));
    }
    for (card, sessions) in sessions(facts) {
        // A stand-in's request is the suite's, not the target's worker's: no ledger row owed.
        let requests = facts
            .worker_requests
            .iter()
            .filter(|r| r.card == card && r.agent_turn && !r.from_stand_in)
            .count();
        let rows = worker_rows
            .iter()
            .filter(|row| row.get("task_id").and_then(Value::as_str) == Some(card.as_str()))
            .filter(|row| row.get("outcome").and_then(Value::as_str) != Some("held"))
            .count();
        if rows < requests {
            found.push(format!(
                "{card}: {requests} worker requests at the provider, {rows} worker ledger rows"
            ));
        }
        let spawns = db
            .rows("hermes_spawn_ledger")
            .iter()
            .filter(|row| row.get("task_id").and_then(Value::as_str) == Some(card.as_str()))
            .count();
        if spawns < sessions.len() {
            found.push(format!(
                "{card}: {} worker sessions at the provider, {spawns} spawn-ledger rows",
                sessions.len()
            ));
        }
    }
    found
}
