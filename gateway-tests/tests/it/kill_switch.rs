//! `kanban.auto_decompose: false`, written while the gateway runs, stops paid calls from the
//! next tick on, and turning it back on resumes them.

use judge::prelude::*;
use rstest::rstest;

use crate::support::span_of_ticks;
use crate::PROBE_TICKS;

/// Cards created while the switch is off: each would be billed on the next tick were it on.
const CARDS_WHILE_OFF: usize = 2;

#[rstest]
fn kill_switch_stops_paid_calls_from_the_next_tick(#[with(Config::gateway())] board: Board) {
    let target = board.target();
    let aux = board.aux();
    let mut run = board.scenario();
    run.start().prove_ticks(1);

    board.reconfigure(Config::gateway().kill_switch(false));
    let flipped = aux.mark();
    // A tick that read the old config just before the write selects its cards at its start;
    // two tick periods later every tick in progress began after the write. Nothing is in triage
    // meanwhile, so nothing may be billed either (counted with the watch below: bills only grow).
    run.watch(span_of_ticks(target, 1));
    let waiting: Vec<String> = (0..CARDS_WHILE_OFF)
        .map(|i| board.create(&format!("idea while switched off {i}"), &["--triage"]))
        .collect();
    // Probes cannot prove ticks while nothing may be decomposed: the watch spans PROBE_TICKS of
    // the target's ticks by the clock. The gateway is shown ticking before it (the probe above)
    // and after it (the same cards decomposed once the switch is back on), so the span was
    // ticks the gateway ran with the switch off.
    run.watch(span_of_ticks(target, PROBE_TICKS));
    let bills_while_off = aux.bills_since(flipped);
    let left_triage: Vec<String> = board
        .rows()
        .left_triage(&waiting)
        .into_iter()
        .cloned()
        .collect();

    board.reconfigure(Config::gateway());
    let window = run.close_window();
    run.left_triage(
        &waiting,
        target.first_bill_timeout(),
        "the waiting cards decomposed once the switch is back on",
    );
    let resumed = run.stop();

    bound("bills while switched off", bills_while_off)
        .at_most(0)
        .over(&window)
        .note(|| {
            format!(
                "billed for {:?}; {}",
                aux.billed_ids_since(flipped),
                board.setting(Setting::KillSwitch)
            )
        })
        .gap(GapKind::KillSwitchIgnored);
    bound(
        "cards that left triage while switched off",
        left_triage.len(),
    )
    .at_most(0)
    .over(&window)
    .context(|| left_triage.iter().map(|card| board.diag(card)).collect())
    .gap(GapKind::KillSwitchIgnored);
    let bills_after: Vec<usize> = waiting.iter().map(|card| aux.billed_for(card)).collect();
    bound(
        "bills for the waiting cards once switched back on",
        bills_after.iter().sum::<usize>(),
    )
    .exactly(CARDS_WHILE_OFF)
    .over(&resumed)
    .note(|| format!("one call per card expected, got {bills_after:?}"))
    .gap(GapKind::KillSwitchIgnored);
}
