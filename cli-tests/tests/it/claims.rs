//! A card in flight is paid for by nobody else (contract §7 B1, B4): sweeps started together bill each
//! card once, and a person's `decompose ID` (or a sweep) on a card another process has in flight
//! is refused without a request, saying until when the card is taken.

use fixtures::aux_model::AuxModel;
use judge::prelude::*;
use regex::Regex;
use rstest::rstest;

use crate::{
    assert_no_crash, decompose_all, first_graph_gated, judge_exit_code_provided,
    while_decompose_is_out, Decomposition,
};

/// Sweeps started at once.
const SWEEPS: usize = 5;
/// Cards they share.
const CARDS: usize = 4;

#[rstest]
fn parallel_sweeps_bill_each_card_once(#[with(Config::plain().backoff(0.0))] board: Board) {
    let aux = board.aux();
    let cards: Vec<String> = (0..CARDS)
        .map(|i| board.create(&format!("card {i} of a busy board"), &["--triage"]))
        .collect();
    // Each card's first call is answered only once every sweep has ended or is waiting on such
    // a call: however slow the target is to start five processes, none of them decides after
    // the cards were let go. Later calls are answered at once, so a target that bills a held
    // card again shows it instead of waiting on itself.
    let gate = Gate::new();
    for card in &cards {
        first_graph_gated(aux, card, &gate);
    }

    let (sweeps, all_looked) = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..SWEEPS)
            .map(|_| scope.spawn(|| decompose_all(&board)))
            .collect();
        // A sweep has one call out at a time (both targets try their cards in turn), so once
        // the sweeps that ended and the held calls still open add up to every sweep, each
        // sweep has looked at the board while cards were held.
        let all_looked = try_wait_until(
            || {
                let ended = handles.iter().filter(|sweep| sweep.is_finished()).count();
                ended + held_open(aux) >= SWEEPS
            },
            board.target().cli_timeout(&["decompose", "--all"]),
            "every sweep to end or wait on a held reply",
        );
        let held = held_open(aux);
        gate.release();
        let sweeps: Vec<Decomposition> = handles
            .into_iter()
            .map(|handle| match handle.join() {
                Ok(value) => value,
                Err(panic) => std::panic::resume_unwind(panic),
            })
            .collect();
        (sweeps, all_looked.map(|()| held))
    });
    let all_running = match all_looked {
        Err(timeout) => Err(timeout.to_string()),
        Ok(held) => cards
            .iter()
            .try_for_each(|card| aux.open_until_released(card, &gate).map(|_| ()))
            .map_err(|seen| format!("{held} held call(s) open at the release; {seen}")),
    }
    .map_err(|seen| format!("not every sweep ran while every card was in flight: {seen}"));

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
        .provided(&all_running)
        .gap(GapKind::InFlightRebilled);
    let rows = board.rows();
    let mut findings = Findings::new();
    for card in &cards {
        findings = findings
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
        .provided(&all_running)
        .gap(GapKind::DoubleApply);
}

/// How many calls held back by a gate are still open (arrived, not yet answered).
fn held_open(aux: &AuxModel) -> usize {
    aux.billed_calls()
        .iter()
        .filter(|call| call.answer.gated && call.answer.ended.is_none())
        .count()
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
    first_graph_gated(aux, &card, &gate);

    let (first, (arrived, second, sweep)) =
        while_decompose_is_out(&board, &card, &gate, |arrived| {
            let second = board.cli_unchecked(["kanban", "decompose", card.as_str()]);
            (arrived, second, decompose_all(&board))
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
    Findings::new()
        .equal("the first decompose's ok", &first.ok(), &Some(true))
        .equal("children", &rows.children_of(&card).len(), &2)
        .equal(
            "decomposed events",
            &rows.events(&card, "decomposed").len(),
            &1,
        )
        .verdict("the first decompose alone is applied")
        .context(|| format!("{}\n{}", transcript(), board.diag(&card)))
        .provided(&in_flight)
        .gap(GapKind::DoubleApply);
}
