//! A card in flight is paid for by nobody else (contract §7 B1, B4): sweeps started together bill each
//! card once, and a person's `decompose ID` (or a sweep) on a card another process has in flight
//! is refused without a request, saying until when the card is taken.

use std::time::{Duration, Instant};

use fixtures::prelude::*;
use regex::Regex;
use rstest::rstest;

use crate::{assert_no_crash, decompose_all, decompose_card, judge_exit_code, Decomposition};

/// Sweeps started at once.
const SWEEPS: usize = 5;
/// Cards they share.
const CARDS: usize = 4;

/// How long the provider holds each reply: longer than a process takes to start and pick a card
/// on the target, so every sweep is running while the cards are in flight.
fn reply_hold(target: &Target) -> Duration {
    if target.is_reference() {
        Duration::from_millis(300)
    } else {
        Duration::from_secs(3)
    }
}

/// How long a decompose holds its card: long enough that a second process started once the
/// first request has arrived is done before the reply lands, even on a loaded machine.
pub(crate) fn in_flight_hold(target: &Target) -> Duration {
    if target.is_reference() {
        Duration::from_secs(2)
    } else {
        Duration::from_secs(12)
    }
}

/// Runs `f` on its own thread for each of `n` copies, all started together, and returns what
/// each returned (a panic in one is raised here).
fn all_at_once<T: Send>(n: usize, f: impl Fn() -> T + Sync) -> Vec<T> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..n).map(|_| scope.spawn(&f)).collect();
        handles
            .into_iter()
            .map(|handle| match handle.join() {
                Ok(value) => value,
                Err(panic) => std::panic::resume_unwind(panic),
            })
            .collect()
    })
}

#[rstest]
fn parallel_sweeps_bill_each_card_once(#[with(Config::plain().backoff(0.0))] board: Board) {
    let aux = board.aux();
    let cards: Vec<String> = (0..CARDS)
        .map(|i| board.create(&format!("card {i} of a busy board"), &["--triage"]))
        .collect();
    for card in &cards {
        aux.reply(
            card,
            Reply::graph(2, &[]).delayed(reply_hold(board.target())),
        );
    }

    let sweeps: Vec<Decomposition> = all_at_once(SWEEPS, || decompose_all(&board));

    let transcript = || {
        sweeps
            .iter()
            .map(|sweep| sweep.output.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    };
    let bills: Vec<(String, usize)> = cards
        .iter()
        .map(|card| (card.clone(), aux.billed_for(card)))
        .collect();
    let extra: usize = bills.iter().map(|(_, n)| n.saturating_sub(1)).sum();
    bound("bills beyond one per card by parallel sweeps", extra)
        .at_most(0)
        .note(|| format!("bills per card {bills:?}"))
        .note(|| board.setting(Setting::Backoff))
        .context(transcript)
        .gap(GapKind::InFlightRebilled);
    let rows = board.rows();
    let mut findings = Findings::new();
    for card in &cards {
        findings
            .equal(
                &format!("decomposed events of {card}"),
                &rows.events(card, "decomposed").len(),
                &1,
            )
            .equal(
                &format!("children of {card}"),
                &rows.children_of(card).len(),
                &2,
            );
    }
    findings
        .verdict("every card is decomposed once by the sweeps")
        .context(transcript)
        .gap(GapKind::DoubleApply);
}

/// The claim message: it says the card is in flight and until when (a date and a time).
fn says_until_when(message: &str) -> bool {
    let pattern = Regex::new(r"(?i)in flight[^\n]*until[^\n]*\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}")
        .expect("valid pattern");
    pattern.is_match(message)
}

#[rstest]
fn a_card_in_flight_is_refused_to_a_second_decompose(board: Board) {
    let aux = board.aux();
    let card = board.create("slow to split", &["--triage"]);
    let hold = in_flight_hold(board.target());
    aux.reply(&card, Reply::graph(2, &[]).delayed(hold));

    let (first, arrived, second, sweep, done_at) = std::thread::scope(|scope| {
        let first = scope.spawn(|| decompose_card(&board, &card));
        let arrived = try_wait_until(
            || aux.billed_for(&card) > 0,
            board.target().cli_timeout(&["decompose"]),
            "the first decompose's request",
        );
        let second = board.cli_unchecked(["kanban", "decompose", card.as_str()]);
        let sweep = decompose_all(&board);
        let done_at = Instant::now();
        let first = match first.join() {
            Ok(run) => run,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        (first, arrived, second, sweep, done_at)
    });

    assert_no_crash(&second);
    let transcript = || format!("{}\n{}\n{}", first.output, second, sweep.output);
    // The first reply leaves the provider `hold` after the first request arrived: requests that
    // arrived before then were sent while the card was in flight.
    let times = aux.bill_times(&card);
    let reply_sent_at = times.first().map(|at| *at + hold);
    let while_in_flight = times
        .iter()
        .filter(|at| reply_sent_at.is_some_and(|sent| **at < sent))
        .count();
    // Only a second process that made up its mind while the card was in flight was put to the
    // test: a refusal after the reply landed proves nothing about claims.
    let cut_short = match (&arrived, reply_sent_at) {
        (Err(timeout), _) => Some(Interruption::from(timeout)),
        (Ok(()), Some(sent)) if while_in_flight <= 1 && done_at >= sent => Some(Interruption::new(
            "the second decompose and the sweep were not done before the first reply was sent",
        )),
        _ => None,
    };
    let mut requests = bound("requests for a card in flight", while_in_flight)
        .exactly(1)
        .note(|| format!("{} requests for the card in all", times.len()))
        .context(transcript);
    if let Some(cause) = cut_short {
        requests = requests.interrupted_by(cause);
    }
    requests.gap(GapKind::InFlightRebilled);
    holds(
        "the sweep leaves the card in flight alone",
        sweep.line_for(&card).is_none(),
    )
    .context(transcript)
    .gap(GapKind::InFlightRebilled);
    judge_exit_code("`kanban decompose ID` of a card in flight", &second, 1);
    holds(
        "the refusal says until when the card is in flight",
        says_until_when(&second.stderr),
    )
    .note(|| format!("stderr {:?}", second.stderr))
    .gap(GapKind::UnclearRefusal);
    let rows = board.rows();
    let mut findings = Findings::new();
    findings
        .equal("the first decompose's ok", &first.ok(), &Some(true))
        .equal("children", &rows.children_of(&card).len(), &2)
        .equal(
            "decomposed events",
            &rows.events(&card, "decomposed").len(),
            &1,
        );
    findings
        .verdict("the first decompose alone is applied")
        .context(|| format!("{}\n{}", transcript(), board.diag(&card)))
        .gap(GapKind::DoubleApply);
}
