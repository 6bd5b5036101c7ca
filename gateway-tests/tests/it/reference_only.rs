//! Bounds that rest on features only the reference has: the per-card opt-out flag, the aux-call
//! ledger and parking, the board-wide hourly ceiling, and a provider pause kept on the board
//! across restarts. The `external` nextest profile leaves this module out.

use std::time::{Duration, Instant};

use fixtures::observe;
use fixtures::prelude::*;
use rstest::rstest;
use serde_json::Value;

use crate::support::{
    await_bills, await_left_triage, gateway_config, span_of_ticks, start_gateway, watch_count,
};
use crate::{MAX_FAILED_ATTEMPTS, PROBE_TICKS, PROVIDER_FAULT_BOUND};

#[rstest]
fn opted_out_card_is_never_auto_decomposed_but_can_be_by_hand(
    #[with(GATEWAY_CONFIG)] board: Board,
) {
    let aux = board.aux();
    let opted_out = board.create(
        "an idea its owner will split",
        &["--triage", "--no-auto-decompose"],
    );
    let fresh = board.create("a fresh idea", &["--triage"]);

    let gateway = start_gateway(&board);
    await_left_triage(
        &board,
        &gateway,
        std::slice::from_ref(&fresh),
        board.target().first_bill_timeout(),
        "the fresh card auto-decomposed",
    );
    prove_ticks(&board, &gateway, PROBE_TICKS);
    let automatic_bills = aux.billed_for(&opted_out);
    drop(gateway);
    observe::record("bills_for_opted_out_card", automatic_bills, Some(0));

    assert_eq!(automatic_bills, 0, "{}", board.diag(&opted_out));
    assert_eq!(board.task(&opted_out).status, "triage");
    let by_hand = board.cli_json(["kanban", "decompose", opted_out.as_str(), "--json"]);
    assert_eq!(by_hand["ok"], Value::Bool(true), "{by_hand}");
    assert_eq!(aux.billed_for(&opted_out), 1, "{}", board.diag(&opted_out));
    assert_ne!(board.task(&opted_out).status, "triage");
}

#[rstest]
fn every_paid_call_of_a_parked_card_is_in_the_ledger() {
    let board = Board::new(&gateway_config(
        "kanban:\n  decompose_backoff_seconds: 0.05\n",
    ));
    let aux = board.aux();
    let poison = board.create("an idea the decomposer can never split", &["--triage"]);
    aux.reply(&poison, Reply::malformed());

    let gateway = start_gateway(&board);
    wait_until_or(
        || !gateway.running() || !board.events(&poison, "decompose_parked").is_empty(),
        board.target().first_bill_timeout(),
        "the poison card to be parked",
        || board.diag(&poison),
    );
    prove_ticks(&board, &gateway, PROBE_TICKS);
    let bills = aux.billed_for(&poison);
    let all_bills = aux.bills();
    drop(gateway);
    observe::record("bills_for_parked_card", bills, Some(MAX_FAILED_ATTEMPTS));

    assert_eq!(bills, MAX_FAILED_ATTEMPTS, "{}", board.diag(&poison));
    // One closed row per paid call; the outcome's label is the reference's to choose (an answer
    // whose content is unusable is not a transport failure), but it is never a success and
    // never left open.
    let ledger = board.query(
        "SELECT purpose, origin, attempt, http_status, \
                outcome NOT IN ('ok', 'in_flight') AS failed \
         FROM hermes_aux_ledger WHERE task_id = ?1 ORDER BY id",
        [&poison],
    );
    let expected: Vec<Value> = (1..=MAX_FAILED_ATTEMPTS)
        .map(|attempt| {
            serde_json::json!({"purpose": "decompose", "origin": "gateway", "attempt": attempt,
                               "http_status": 200, "failed": 1})
        })
        .collect();
    let ledger: Vec<Value> = ledger.into_iter().map(Value::Object).collect();
    assert_eq!(
        ledger, expected,
        "one closed, failed ledger row per paid call"
    );
    let failed: Vec<Value> = board
        .events(&poison, "decompose_failed")
        .into_iter()
        .map(|event| event.payload["attempt"].clone())
        .collect();
    assert_eq!(
        failed,
        [1, 2, 3].map(Value::from),
        "{}",
        board.diag(&poison)
    );
    let parked = board.events(&poison, "decompose_parked");
    assert_eq!(parked.len(), 1, "{}", board.diag(&poison));
    assert_eq!(parked[0].payload["attempts"], MAX_FAILED_ATTEMPTS);
    assert_eq!(
        board.task(&poison).status,
        "triage",
        "a parked card stays in triage"
    );

    let usage = board.cli_json(["kanban", "usage", "--json"]);
    assert_eq!(
        usage["totals"]["calls"], all_bills,
        "the ledger counts what the provider saw\n{usage}"
    );
    let card = usage["cards"]
        .as_array()
        .and_then(|cards| cards.iter().find(|card| card["task_id"] == poison.as_str()));
    let card = card.unwrap_or_else(|| panic!("{poison} missing from usage\n{usage}"));
    assert_eq!(card["calls"], MAX_FAILED_ATTEMPTS, "{usage}");
    assert_eq!(card["failed"], MAX_FAILED_ATTEMPTS, "{usage}");
    assert_eq!(card["parked"], Value::Bool(true), "{usage}");
}

/// `kanban.decompose_calls_per_hour` in the ceiling test.
const HOURLY_CEILING: usize = 3;

/// Cards waiting, more than the ceiling lets through.
const CARDS_OVER_CEILING: usize = 5;

#[rstest]
fn hourly_ceiling_holds_across_a_restart() {
    let target = current_target();
    let board = Board::new(&gateway_config(&format!(
        "kanban:\n  decompose_calls_per_hour: {HOURLY_CEILING}\n"
    )));
    let aux = board.aux();
    let cards: Vec<String> = (0..CARDS_OVER_CEILING)
        .map(|i| board.create(&format!("idea {i}"), &["--triage"]))
        .collect();

    let mut gateway = start_gateway(&board);
    await_bills(
        &board,
        &gateway,
        HOURLY_CEILING,
        || aux.bills(),
        "the first cards",
    );
    // Nothing may be decomposed at the ceiling, so probes cannot prove ticks: each watch spans
    // PROBE_TICKS ticks by the clock, between the gateway ticking before (the bills above) and
    // after (the rest decomposed once the ceiling is raised).
    let before_restart = watch_count(&gateway, span_of_ticks(target, PROBE_TICKS), || aux.bills());
    gateway.restart();
    let after_restart = watch_count(&gateway, span_of_ticks(target, PROBE_TICKS), || aux.bills());
    board.write_config(&gateway_config(
        "kanban:\n  decompose_calls_per_hour: 100\n",
    ));
    await_left_triage(
        &board,
        &gateway,
        &cards,
        target.first_bill_timeout(),
        "every card decomposed once the ceiling is raised",
    );
    drop(gateway);
    observe::record("bills_in_the_hour", after_restart, Some(HOURLY_CEILING));

    assert_eq!(
        before_restart, HOURLY_CEILING,
        "paid calls at the hourly ceiling"
    );
    assert_eq!(
        after_restart, HOURLY_CEILING,
        "paid calls at the hourly ceiling after a restart (bound {HOURLY_CEILING})"
    );
    for card in &cards {
        assert_eq!(aux.billed_for(card), 1, "{}", board.diag(card));
    }
}

#[rstest]
fn provider_pause_survives_a_restart() {
    let target = current_target();
    let watch = span_of_ticks(target, PROBE_TICKS);
    // Long enough to cover a restart and the watch after it, with room to spare.
    let pause_secs = (watch.as_secs_f64() * 2.0).ceil() as u64 + 3;
    let board = Board::new(&gateway_config(&format!(
        "kanban:\n  provider_cooldown_seconds: {pause_secs}\n  decompose_backoff_seconds: 0.05\n"
    )));
    let aux = board.aux();
    let cards: Vec<String> = (0..3)
        .map(|i| board.create(&format!("waiting card {i}"), &["--triage"]))
        .collect();
    aux.reply_default(Reply::http_error(402, "insufficient quota"));

    let mut gateway = start_gateway(&board);
    await_bills(&board, &gateway, 1, || aux.bills(), "any waiting card");
    let refused_at = Instant::now();
    gateway.restart();
    // As in `provider_wide`: the watch spans PROBE_TICKS ticks by the clock, with the gateway
    // ticking before it (the refusal) and after it (the cards decomposed once the pause ends).
    let after_restart = watch_count(&gateway, watch, || aux.bills());
    let watched_until = refused_at.elapsed();
    aux.reply_default(Reply::default_single());
    await_left_triage(
        &board,
        &gateway,
        &cards,
        Duration::from_secs(pause_secs) + target.first_bill_timeout(),
        "every waiting card decomposed after the pause",
    );
    drop(gateway);
    observe::record(
        "bills_while_paused_across_restart",
        after_restart,
        Some(PROVIDER_FAULT_BOUND),
    );

    assert!(
        watched_until < Duration::from_secs(pause_secs),
        "the watch ended {watched_until:?} after the refusal, past the {pause_secs}s pause: \
         the restart took too long for this test to tell anything"
    );
    assert_eq!(
        after_restart, PROVIDER_FAULT_BOUND,
        "paid calls while the provider pause lasted, across a restart (bound {PROVIDER_FAULT_BOUND})"
    );
}
