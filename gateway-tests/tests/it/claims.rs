//! A card the gateway has in flight is paid for by nobody else, in any process: a person's
//! `kanban decompose ID` refuses it (exit 1, no request), `kanban decompose --all` skips it, and
//! a second gateway with a lock directory of its own bills it no second time. With no backoff,
//! nothing but the gateway's claim on the card stands in their way.

use std::time::Duration;

use fixtures::prelude::*;
use rstest::rstest;

use crate::support::{second_gateway_spec, start_gateway};

/// How long the provider takes to answer the card in flight: the other processes all run
/// inside it.
const SLOW_ANSWER: Duration = Duration::from_secs(4);

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
    let card = board.create("slow to answer", &["--triage"]);
    aux.reply(&card, Reply::default_single().delayed(SLOW_ANSWER));

    let mut window = Window::start();
    let gateway = start_gateway(&board);
    window.first_bill(&board, &gateway, &card);
    let by_hand = board.cli_unchecked(["kanban", "decompose", card.as_str(), "--json"]);
    let after_by_hand = aux.billed_for(&card);
    let sweep = board.cli_unchecked(["kanban", "decompose", "--all", "--json"]);
    let after_sweep = aux.billed_for(&card);
    // A target may refuse a second dispatcher on the board outright; if it runs, its ticks
    // must skip the card as well.
    let second = Gateway::spawn(second_gateway_spec(&board, "second-gateway"));
    window
        .left_triage(
            &board,
            &gateway,
            std::slice::from_ref(&card),
            board.target().first_bill_timeout(),
            "the gateway's answer applied",
        )
        .prove_ticks(&board, &gateway, 1);
    let bills = aux.billed_for(&card);
    let second_log = second.log();
    drop(second);
    drop(gateway);

    bound(
        "exit code of a decompose by hand of a card in flight",
        by_hand.code.unwrap_or(-1),
    )
    .exactly(1)
    .context(|| by_hand.to_string())
    .gap(GapKind::WrongExitCode);
    bound(
        "requests of a decompose by hand of a card in flight",
        after_by_hand.saturating_sub(1),
    )
    .at_most(0)
    .context(|| format!("{by_hand}\n{}", board.diag(&card)))
    .gap(GapKind::InFlightRebilled);
    bound(
        "requests of a sweep for a card in flight",
        after_sweep.saturating_sub(after_by_hand),
    )
    .at_most(0)
    .context(|| format!("{sweep}\n{}", board.diag(&card)))
    .gap(GapKind::InFlightRebilled);
    bound("bills for the card in flight", bills)
        .exactly(1)
        .over(&window)
        .context(|| format!("{}\nsecond gateway's log:\n{second_log}", board.diag(&card)))
        .gap(GapKind::InFlightRebilled);
}

#[rstest]
fn two_gateways_with_their_own_lock_dirs_bill_each_card_once(
    #[with(Config::gateway().backoff(NO_BACKOFF))] board: Board,
) {
    let aux = board.aux();
    let mut window = Window::start();
    let first = start_gateway(&board);
    // The first gateway dispatches before the second starts, so the second is the one a target
    // may refuse; the cards come once both are up.
    window.prove_ticks(&board, &first, 1);
    let second = Gateway::spawn(second_gateway_spec(&board, "second-gateway"));
    let cards: Vec<String> = (0..SHARED_CARDS)
        .map(|i| {
            let card = board.create(&format!("shared idea {i}"), &["--triage"]);
            aux.reply(&card, Reply::default_single().delayed(SHARED_ANSWER));
            card
        })
        .collect();
    window.left_triage(
        &board,
        &first,
        &cards,
        board.target().first_bill_timeout(),
        "every card decomposed",
    );
    let bills: Vec<usize> = cards.iter().map(|card| aux.billed_for(card)).collect();
    let second_exit = second.exit();
    let second_log = second.log();
    drop(second);
    drop(first);

    bound(
        "most bills for one card between two gateways",
        bills.iter().copied().max().unwrap_or(0),
    )
    .exactly(1)
    .over(&window)
    .note(|| {
        format!(
            "bills per card: {bills:?}; the second gateway {}",
            second_exit.map_or_else(|| "ran".to_owned(), |exit| format!("ended ({exit})"))
        )
    })
    .context(|| format!("second gateway's log:\n{second_log}"))
    .gap(GapKind::InFlightRebilled);
}
