//! A card the gateway has in flight is paid for by nobody else, in any process: a person's
//! `kanban decompose ID` refuses it (exit 1, no request), `kanban decompose --all` skips it, and
//! a second gateway with a lock directory of its own bills it no second time. With no backoff,
//! nothing but the gateway's claim on the card stands in their way.

use std::time::Duration;

use fixtures::gateway::Gateway;
use judge::prelude::*;
use rstest::rstest;

use crate::support::{card_held_in_flight, create_held_cards, second_gateway_spec};

/// No wait after a failure, so a card in flight is due at once but for its claim.
const NO_BACKOFF: f64 = 0.0;

/// Cards billed by two gateways at once.
const SHARED_CARDS: usize = 6;

/// How long each of their calls takes: long enough for the other gateway's ticks to find the
/// card still in triage.
const SHARED_ANSWER: Duration = Duration::from_millis(700);

#[rstest]
fn a_card_in_flight_is_paid_for_by_no_other_process(
    #[with(Config::gateway().backoff(NO_BACKOFF))] board: Board,
) {
    let aux = board.aux();
    // The gateway's call is answered only once every other process had its chance at the card,
    // however slow the target.
    let (card, gate) = card_held_in_flight(&board, "slow to answer");

    let mut run = board.scenario();
    run.start().first_bill(&card);
    let by_hand = board.cli_unchecked(["kanban", "decompose", card.as_str(), "--json"]);
    let after_by_hand = aux.billed_for(&card);
    let sweep = board.cli_unchecked(["kanban", "decompose", "--all", "--json"]);
    let after_sweep = aux.billed_for(&card);
    // A target may refuse a second dispatcher on the board outright; if it runs, it gets as long
    // as the first gateway took from its start to its first call, twice over, to tick onto the
    // card while it is still in flight.
    let second = Gateway::spawn(second_gateway_spec(&board, "second-gateway"));
    let first_start = run.time_to_first_bill();
    let second_had = fixtures::pace::ticking_after(first_start, board.target());
    let second_ran = try_wait_until(
        || second.ended_or_ran(second_had),
        second_had + board.target().first_bill_timeout(),
        "the second gateway's time to tick",
    );
    gate.release();
    let in_flight = match aux.open_until_released(&card, &gate) {
        Ok(_) => second_ran.map_err(|timeout| timeout.to_string()),
        Err(seen) => Err(seen),
    }
    .map_err(|seen| format!("the card was not in flight while the other processes ran: {seen}"));
    run.until_left_triage(&card, "the gateway's answer applied")
        .prove_ticks(1);
    let bills = aux.billed_for(&card);
    let second_exit = second.exit();
    let second_log = second.log();
    drop(second);
    let seen = run.stop();

    bound(
        "exit code of a decompose by hand of a card in flight",
        by_hand.code.unwrap_or(-1),
    )
    .exactly(1)
    .context(|| by_hand.to_string())
    .provided(&in_flight)
    .gap(GapKind::WrongExitCode);
    bound(
        "requests of a decompose by hand of a card in flight",
        after_by_hand.saturating_sub(1),
    )
    .at_most(0)
    .context(|| format!("{by_hand}\n{}", board.diag(&card)))
    .provided(&in_flight)
    .gap(GapKind::InFlightRebilled);
    bound(
        "requests of a sweep for a card in flight",
        after_sweep.saturating_sub(after_by_hand),
    )
    .at_most(0)
    .context(|| format!("{sweep}\n{}", board.diag(&card)))
    .provided(&in_flight)
    .gap(GapKind::InFlightRebilled);
    bound("bills for the card in flight", bills)
        .exactly(1)
        .over(&seen)
        .note(|| {
            format!(
                "the second gateway {} ({:.1}s given to tick)",
                second_exit.map_or_else(|| "ran".to_owned(), |exit| format!("ended ({exit})")),
                second_had.as_secs_f64()
            )
        })
        .context(|| format!("{}\nsecond gateway's log:\n{second_log}", board.diag(&card)))
        .provided(&in_flight)
        .gap(GapKind::InFlightRebilled);
}

#[rstest]
fn two_gateways_with_their_own_lock_dirs_bill_each_card_once(
    #[with(Config::gateway().backoff(NO_BACKOFF))] board: Board,
) {
    let aux = board.aux();
    let mut run = board.scenario();
    // The first gateway dispatches before the second starts, so the second is the one a target
    // may refuse.
    run.start().prove_ticks(1);
    let first_start = run.time_to_first_bill();
    let second = Gateway::spawn(second_gateway_spec(&board, "second-gateway"));
    // The second gateway is not awaited (a refused one never gets ready), so a slow one could
    // start ticking only after the first had paid for every card, and a target with no claim
    // would pass. The first call of each card is held until the second had as long as the first
    // took from its start to its first call, twice over, plus two ticks; a call after it (a
    // card paid for a second time) is answered at once, so it shows.
    let gate = Gate::new();
    let held_reply = Reply::default_single().delayed(SHARED_ANSWER).gated(&gate);
    let cards = create_held_cards(&board, "shared idea", SHARED_CARDS, &held_reply);
    let second_had = fixtures::pace::ticking_after(first_start, board.target());
    let any_card_billed = || cards.iter().any(|card| aux.billed_for(card) > 0);
    let contested = try_wait_until(
        || !run.running() || (any_card_billed() && second.ended_or_ran(second_had)),
        second_had + board.target().first_bill_timeout(),
        "a shared card in flight while the second gateway had its time to tick",
    );
    gate.release();
    let in_flight = contested
        .map_err(|timeout| timeout.to_string())
        .and_then(|()| aux.any_open_until_released(&cards, &gate))
        .map_err(|seen| {
            format!("no shared card was in flight while the second gateway had its time: {seen}")
        });
    run.left_triage(
        &cards,
        board.target().first_bill_timeout(),
        "every card decomposed",
    );
    let bills: Vec<usize> = cards.iter().map(|card| aux.billed_for(card)).collect();
    let second_exit = second.exit();
    let second_log = second.log();
    drop(second);
    let seen = run.stop();

    bound(
        "most bills for one card between two gateways",
        bills.iter().copied().max().unwrap_or(0),
    )
    .exactly(1)
    .over(&seen)
    .note(|| {
        format!(
            "bills per card: {bills:?}; the second gateway {} ({:.1}s given to tick)",
            second_exit.map_or_else(|| "ran".to_owned(), |exit| format!("ended ({exit})")),
            second_had.as_secs_f64()
        )
    })
    .context(|| format!("second gateway's log:\n{second_log}"))
    .provided(&in_flight)
    .gap(GapKind::InFlightRebilled);
}
