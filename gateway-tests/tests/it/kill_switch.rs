//! `kanban.auto_decompose: false`, written while the gateway runs, stops paid calls from the
//! next tick on, and turning it back on resumes them.

use fixtures::observe;
use fixtures::prelude::*;
use rstest::rstest;

use crate::support::{
    await_left_triage, gateway_config, span_of_ticks, start_gateway, watch_count,
};
use crate::PROBE_TICKS;

/// Cards created while the switch is off: each would be billed on the next tick were it on.
const CARDS_WHILE_OFF: usize = 2;

#[rstest]
fn kill_switch_stops_paid_calls_from_the_next_tick(#[with(GATEWAY_CONFIG)] board: Board) {
    let target = board.target();
    let aux = board.aux();
    let gateway = start_gateway(&board);
    prove_ticks(&board, &gateway, 1);

    board.write_config(&gateway_config("kanban:\n  auto_decompose: false\n"));
    let bills_at_flip = aux.bills();
    // A tick that read the old config just before the write selects its cards at its start;
    // two tick periods later every tick in progress began after the write. Nothing is in triage
    // meanwhile, so nothing may be billed either (counted with the watch below: bills only grow).
    watch_count(&gateway, span_of_ticks(target, 1), || aux.bills());
    let waiting: Vec<String> = (0..CARDS_WHILE_OFF)
        .map(|i| board.create(&format!("idea while switched off {i}"), &["--triage"]))
        .collect();
    // Probes cannot prove ticks while nothing may be decomposed: the watch spans PROBE_TICKS of
    // the target's ticks by the clock. The gateway is shown ticking before it (the probe above)
    // and after it (the same cards decomposed once the switch is back on), so the span was
    // ticks the gateway ran with the switch off.
    let bills_while_off =
        watch_count(&gateway, span_of_ticks(target, PROBE_TICKS), || aux.bills()) - bills_at_flip;
    let still_waiting = waiting
        .iter()
        .all(|card| board.task(card).status == "triage");

    board.write_config(GATEWAY_CONFIG);
    await_left_triage(
        &board,
        &gateway,
        &waiting,
        target.first_bill_timeout(),
        "the waiting cards decomposed once the switch is back on",
    );
    drop(gateway);
    observe::record("bills_while_switched_off", bills_while_off, Some(0));

    assert_eq!(
        bills_while_off,
        0,
        "paid calls while kanban.auto_decompose was false (bound 0), billed for {:?}",
        &aux.billed_ids()[bills_at_flip..]
    );
    assert!(
        still_waiting,
        "a card left triage while auto-decompose was off\n{}",
        waiting.iter().map(|c| board.diag(c)).collect::<String>()
    );
    for card in &waiting {
        assert_eq!(
            aux.billed_for(card),
            1,
            "one call per card once the switch is back on (bound 1)\n{}",
            board.diag(card)
        );
    }
}
