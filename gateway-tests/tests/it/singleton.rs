//! Only one gateway dispatches a board: a second one on the same board is refused at once and
//! bills nothing, so no card is paid for twice.

use std::time::Duration;

use fixtures::prelude::*;
use rstest::rstest;

use crate::support::{start_gateway, STOP_GRACE};

/// Cards created while the second gateway starts.
const CONTESTED_CARDS: usize = 3;

/// How many of the target's ticks each contested card's call takes: long enough for a second
/// dispatcher to find the card still in triage and pay for it again.
const SLOW_CALL_TICKS: u32 = 3;

#[rstest]
fn second_gateway_on_the_same_board_is_refused_and_bills_nothing(
    #[with(Config::gateway())] board: Board,
) {
    let target = board.target();
    let aux = board.aux();
    let mut window = Window::start();
    let first = start_gateway(&board);
    window.prove_ticks(&board, &first, 1);

    // A refused gateway never reports readiness, so none is awaited; its own log keeps its
    // output apart from the first one's.
    let mut second_spec = board
        .gateway_spec()
        .readiness(Readiness::Immediate, Duration::ZERO)
        .stop_grace(STOP_GRACE);
    second_spec.log = board.root().join("second-gateway.log");
    let second = Gateway::spawn(second_spec);
    let slow_call = target.tick_interval() * SLOW_CALL_TICKS;
    let contested: Vec<String> = (0..CONTESTED_CARDS)
        .map(|i| {
            let card = board.create(&format!("contested idea {i}"), &["--triage"]);
            aux.reply(&card, Reply::default_single().delayed(slow_call));
            card
        })
        .collect();
    let refused = try_wait_until(
        || !second.running(),
        target.readiness_timeout(),
        "the second gateway to exit",
    );
    window
        .left_triage(
            &board,
            &first,
            &contested,
            target.first_bill_timeout(),
            "the contested cards decomposed by the first gateway",
        )
        .prove_ticks(&board, &first, 1);
    let second_exit = second.exit();
    let second_log = second.log();
    drop(second);
    drop(first);
    let bills: Vec<usize> = contested.iter().map(|card| aux.billed_for(card)).collect();

    let exit = second_exit.map(|exit| (exit.code, exit.signal));
    holds(
        "a second gateway on the same board exits with a non-zero code of its own",
        refused.is_ok() && matches!(exit, Some((Some(code), None)) if code != 0),
    )
    .note(|| match &refused {
        Ok(()) => format!("it ended with {exit:?}"),
        Err(timeout) => format!("it kept running: {timeout}"),
    })
    .context(|| second_log.clone())
    .gap(GapKind::SecondDispatcher);
    bound(
        "most bills for one contested card",
        bills.iter().copied().max().unwrap_or(0),
    )
    .exactly(1)
    .over(&window)
    .note(|| format!("bills per contested card: {bills:?}"))
    .gap(GapKind::SecondDispatcher);
}
