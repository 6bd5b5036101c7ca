//! A provider that cannot be reached costs nothing (contract §7 B5): a sweep and a person's decompose
//! made while nothing listens on the provider's port spend no card's budget, so once the
//! provider is back the card is decomposed, with one bill. The same holds for a host that never
//! answers the connection at all (its listen queue is full): the call ends when connecting gives
//! up, as a provider that could not be reached, not as a timed-out (maybe paid) call. A host that
//! answers the connection only on the second try, a second late, is reached.
//!
//! The budget is one attempt, so a target that charged the card for the outage would have parked
//! it, and no sweep would decompose it afterwards.

use std::time::{Duration, Instant};

use fixtures::relay::Relay;
use fixtures::target::Target;
use fixtures::verdict::Verdict;
use fixtures::wait::WaitTimeout;
use judge::prelude::*;
use rstest::rstest;

use crate::{applied_with_two_children, decompose_all, decompose_card, Decomposition};

/// A base URL on a local port nothing listens on, and where no other test's fake provider can
/// start listening meanwhile (see `fixtures::closed_port`).
pub fn unreachable_base_url() -> String {
    fixtures::closed_port::closed_port_url()
}

/// The board's settings with the provider up: one automatic attempt per card, no backoff.
pub fn one_attempt() -> Config {
    Config::plain().max_attempts(1).backoff(0.0)
}

/// The same settings with the provider's base URL on a port nothing listens on.
pub fn provider_down() -> Config {
    one_attempt().yaml(&format!("model:\n  base_url: {}\n", unreachable_base_url()))
}

/// How long the target may take, once the provider is back, to decompose the card: the
/// reference pauses auto-decompose for up to a few seconds after the outage.
fn back_timeout(target: &Target) -> Duration {
    if target.is_reference() {
        Duration::from_secs(20)
    } else {
        Duration::from_secs(120)
    }
}

#[rstest]
fn provider_back_after_an_outage_decomposes_the_card_with_one_bill() {
    let board = Board::new(provider_down());
    let aux = board.aux();
    let card = board.create("waits out an outage", &["--triage"]);
    aux.reply(&card, Reply::graph(2, &[]));

    let swept_down = decompose_all(&board);
    let tried_down = decompose_card(&board, &card);
    board.reconfigure(one_attempt());
    let (back, after) = sweep_until_decomposed(
        &board,
        &card,
        "a sweep to decompose the card once the provider is back",
    );

    let transcript = || {
        let sweeps: Vec<String> = after
            .iter()
            .rev()
            .take(3)
            .map(|sweep| sweep.output.to_string())
            .collect();
        format!(
            "{}\n{}\nlast sweeps after the outage ({} in all):\n{}",
            swept_down.output,
            tried_down.output,
            after.len(),
            sweeps.join("\n")
        )
    };
    one_bill_once_back(
        "bills for the card once the provider is back",
        &board,
        &card,
        &back,
        transcript,
    )
    .gap(GapKind::PauseNeverEnded);
    Findings::new()
        .equal("children", &board.rows().children_of(&card).len(), &2)
        .that(
            after
                .last()
                .and_then(|sweep| sweep.line_for(&card))
                .is_some_and(|line| line["ok"] == true),
            || "the sweep that decomposed the card reported no ok line for it".to_owned(),
        )
        .verdict("the card is decomposed once the provider is back")
        .context(transcript)
        .gap(GapKind::ReplyNotApplied);
    let reason = tried_down.line()["reason"].as_str().unwrap_or_default();
    holds(
        "a decompose while the provider is down fails and says why",
        tried_down.ok() == Some(false) && !reason.trim().is_empty(),
    )
    .context(|| tried_down.output.to_string())
    .gap(GapKind::UnclearRefusal);
}

/// Sweeps until one has decomposed `card` or [`back_timeout`] runs out (`awaited` names what the
/// wait was for), and returns that beside every sweep made: a target may need a few to get past
/// the pause the outage left.
fn sweep_until_decomposed(
    board: &Board,
    card: &str,
    awaited: &str,
) -> (Result<(), WaitTimeout>, Vec<Decomposition>) {
    let mut after: Vec<Decomposition> = Vec::new();
    let back = try_wait_until(
        || {
            after.push(decompose_all(board));
            board.rows().decomposition_visible(card)
        },
        back_timeout(board.target()),
        awaited,
    );
    (back, after)
}

/// The bills for `card` once its provider answers again (`what`): exactly one, as an outage that
/// charged the card would have parked it. A wait that ran out interrupts the verdict rather
/// than failing it.
fn one_bill_once_back<'a>(
    what: &str,
    board: &'a Board,
    card: &'a str,
    back: &Result<(), WaitTimeout>,
    transcript: impl Fn() -> String + 'a,
) -> Verdict<'a> {
    let bills = bound(what, board.aux().billed_for(card))
        .exactly(1)
        .note(|| board.setting(Setting::MaxAttempts))
        .context(move || format!("{}\n{}", transcript(), board.diag(card)));
    match back {
        Err(timeout) => bills.interrupted_by(timeout),
        Ok(()) => bills,
    }
}

/// The bound on one decompose call against a host that never answers the connection: short, so
/// that a target which waits for the whole call instead of giving up connecting still ends soon.
const NEVER_ACCEPTED_CALL_TIMEOUT: f64 = 2.0;

/// How long a sweep may take against a host that never answers the connection, from its first
/// connection attempt to its exit: its call timeout and room for a loaded machine. The process's
/// start-up is not counted: a slow interpreter must not decide a verdict on the call timeout.
const NEVER_ACCEPTED_SWEEP_BOUND: Duration = Duration::from_secs(7);

/// How long the test lets a sweep wait on that host before stopping it (a target that ignores
/// the call timeout): the timing verdict then fails, and the test goes on.
const NEVER_ACCEPTED_SWEEP_LIMIT: Duration = Duration::from_secs(20);

/// When the test stops that sweep, counted from its process's start: the limit above plus its
/// start-up, allowed eight times the target's measured CLI call for a loaded machine (a sweep
/// stopped before it ever tried to connect gives no verdict at all).
fn never_accepted_sweep_limit() -> Duration {
    NEVER_ACCEPTED_SWEEP_LIMIT + fixtures::pace::pace().cli_call().saturating_mul(8)
}

/// `config` with the provider's base URL at `base_url`.
fn through(config: Config, base_url: &str) -> Config {
    config.yaml(&format!("model:\n  base_url: {base_url}\n"))
}

#[rstest]
fn a_host_that_never_answers_the_connection_is_unreachable_and_costs_nothing() {
    let settings = one_attempt().call_timeout(NEVER_ACCEPTED_CALL_TIMEOUT);
    let board = Board::new(settings.clone());
    let aux = board.aux();
    let silent = Relay::unaccepted_watched(aux);
    board.reconfigure(through(settings.clone(), &silent.base_url()));
    let card = board.create("waits out a host that never answers", &["--triage"]);
    aux.reply(&card, Reply::graph(2, &[]));

    let swept_down = board.cli_within(
        ["kanban", "decompose", "--all", "--json"],
        never_accepted_sweep_limit(),
    );
    let ended = Instant::now();
    let took = silent
        .first_syn()
        .map(|tried| ended.saturating_duration_since(tried));
    let tried = took
        .map(|_| ())
        .ok_or_else(|| "the sweep never tried to connect to the host".to_owned());
    let attempts_spent = board
        .reads(Setting::MaxAttempts)
        .then(|| board.rows().attempts(&card));
    silent.accept();
    let (back, after) = sweep_until_decomposed(
        &board,
        &card,
        "a sweep to decompose the card once the host answers",
    );

    let transcript = || {
        let last = after
            .last()
            .map(|sweep| sweep.output.to_string())
            .unwrap_or_default();
        format!(
            "{swept_down}\nlast sweep after the host answered ({} in all):\n{last}",
            after.len()
        )
    };
    bound(
        "ms a sweep waited on a host that never answers the connection",
        took.map_or(u64::MAX, |took| {
            u64::try_from(took.as_millis()).unwrap_or(u64::MAX)
        }),
    )
    .at_most(u64::try_from(NEVER_ACCEPTED_SWEEP_BOUND.as_millis()).unwrap_or(u64::MAX))
    .note(|| board.setting(Setting::CallTimeout))
    .note(|| "from its first connection attempt to its exit".to_owned())
    .context(|| swept_down.to_string())
    .provided(&tried)
    .gap(GapKind::CallTimeoutIgnored);
    if let Some(attempts) = attempts_spent {
        bound(
            "attempts counted while the host never answered the connection",
            attempts,
        )
        .at_most(0)
        .context(|| format!("{swept_down}\n{}", board.diag(&card)))
        .gap(GapKind::UnreachableCharged);
    }
    one_bill_once_back(
        "bills for the card once the host answers",
        &board,
        &card,
        &back,
        transcript,
    )
    .gap(GapKind::UnreachableCharged);
}

/// A call bound whose connect share (half of it, on the reference) outlasts the second try of a
/// connection: a SYN is sent again after one second.
const SLOW_ACCEPT_CALL_TIMEOUT: f64 = 4.0;

#[rstest]
fn a_host_that_answers_the_connection_a_second_late_is_reached() {
    let settings = one_attempt().call_timeout(SLOW_ACCEPT_CALL_TIMEOUT);
    let board = Board::new(settings.clone());
    let aux = board.aux();
    let late = Relay::accepting_after_first_syn(aux);
    board.reconfigure(through(settings, &late.base_url()));
    let card = board.create("asks a host slow to answer", &["--triage"]);
    aux.reply(&card, Reply::graph(2, &[]));

    let run = decompose_card(&board, &card);

    bound(
        "requests for one decompose through a host slow to answer",
        aux.billed_for(&card),
    )
    .exactly(1)
    .note(|| board.setting(Setting::CallTimeout))
    .context(|| run.output.to_string())
    .gap(GapKind::NotOneRequest);
    applied_with_two_children(&board, &card, &run)
        .verdict("the decompose through a host slow to answer is applied")
        .context(|| format!("{}\n{}", run.output, board.diag(&card)))
        .gap(GapKind::ReplyNotApplied);
}
