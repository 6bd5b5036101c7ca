//! A card in flight is paid for by nobody else (contract §7 B1, B4): sweeps started together bill each
//! card once, and a person's `decompose ID` (or a sweep) on a card another process has in flight
//! is refused without a request, saying until when the card is taken.

use std::time::Duration;

use fixtures::prelude::*;
use regex::Regex;
use rstest::rstest;

use crate::{
    assert_no_crash, decompose_all, decompose_card, judge_exit_code_provided, Decomposition,
};

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
    // The first call is answered only once the second decompose and the sweep are done, however
    // long the target takes to start them; any later call is answered at once, so a target with
    // no claim shows it instead of waiting on itself.
    let gate = Gate::new();
    aux.reply_in_turn(
        &card,
        vec![Reply::graph(2, &[]).gated(&gate), Reply::graph(2, &[])],
    );

    let (first, arrived, second, sweep) = std::thread::scope(|scope| {
        let first = scope.spawn(|| decompose_card(&board, &card));
        let arrived = try_wait_until(
            || aux.billed_for(&card) > 0,
            board.target().cli_timeout(&["decompose"]),
            "the first decompose's request",
        );
        let second = board.cli_unchecked(["kanban", "decompose", card.as_str()]);
        let sweep = decompose_all(&board);
        gate.release();
        let first = match first.join() {
            Ok(run) => run,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        (first, arrived, second, sweep)
    });
    assert_no_crash(&second);
    let transcript = || format!("{}\n{}\n{}", first.output, second, sweep.output);
    // Requests that arrived before the first reply was let go were sent while the card was in
    // flight; only a first call still open then put the other two processes to the test.
    let times = aux.bill_times(&card);
    let released = gate.released_at();
    let while_in_flight = times
        .iter()
        .filter(|at| released.is_some_and(|released| **at < released))
        .count();
    let in_flight = match &arrived {
        Err(timeout) => Err(timeout.to_string()),
        Ok(()) => aux.open_until_released(&card, &gate).map(|_| ()),
    }
    .map_err(|seen| {
        format!("the card was not in flight while the second decompose and the sweep ran: {seen}")
    });
    bound("requests for a card in flight", while_in_flight)
        .exactly(1)
        .note(|| format!("{} requests for the card in all", times.len()))
        .context(transcript)
        .provided(&in_flight)
        .gap(GapKind::InFlightRebilled);
    holds(
        "the sweep leaves the card in flight alone",
        sweep.line_for(&card).is_none(),
    )
    .context(transcript)
    .provided(&in_flight)
    .gap(GapKind::InFlightRebilled);
    judge_exit_code_provided(
        "`kanban decompose ID` of a card in flight",
        &second,
        1,
        &in_flight,
    );
    holds(
        "the refusal says until when the card is in flight",
        says_until_when(&second.stderr),
    )
    .note(|| format!("stderr {:?}", second.stderr))
    .provided(&in_flight)
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
        .provided(&in_flight)
        .gap(GapKind::DoubleApply);
}
