//! Absurd numbers in `config.yaml` neither crash the gateway nor switch its bounds off: it either
//! refuses the config at start (exit 1, naming the key) or runs with every bound in force. A
//! per-tick count and an hourly ceiling in the billions must not make it allocate for them;
//! a cooldown of 10^16 seconds must not wrap around to no pause at all.

use fixtures::gateway::GatewayError;
use fixtures::target::current_target;
use judge::prelude::*;
use rstest::rstest;

use crate::support::span_of_ticks;
use crate::{PROBE_TICKS, PROVIDER_FAULT_BOUND, SHORT_BACKOFF};

/// Cards waiting under the absurd settings.
const WAITING_CARDS: usize = 5;

/// Counts far past anything a tick can use (and within the keys' integer type).
const BILLIONS: u32 = 4_000_000_000;

/// A cooldown whose end, added to now in milliseconds, overflows a signed 64-bit time.
const ABSURD_COOLDOWN: f64 = 1e16;

/// Starts the scenario's gateway, taking an exit before readiness as an answer (the refusal,
/// with the exit and the log tail) rather than a harness failure: refusing an out-of-range
/// value at start is allowed.
fn start_or_refuse(run: &mut Scenario<'_>) -> Option<String> {
    match run.try_start() {
        Ok(_) => None,
        Err(GatewayError::ExitedEarly { exit, tail, .. }) => {
            Some(format!("exited ({exit}) before it was ready:\n{tail}"))
        }
        Err(error) => panic!("{error}"),
    }
}

/// Whether a refusal is the contract's: exit 1, and the message names one of `keys`.
fn refused_as_documented(refusal: &str, keys: &[&str]) -> bool {
    refusal.starts_with("exited (exit code 1)") && keys.iter().any(|key| refusal.contains(key))
}

#[rstest]
fn per_tick_and_hourly_ceiling_in_the_billions_neither_crash_nor_unbound_the_gateway() {
    let board = Board::new(
        Config::gateway()
            .per_tick(BILLIONS)
            .calls_per_hour(BILLIONS),
    );
    let aux = board.aux();
    let cards: Vec<String> = (0..WAITING_CARDS)
        .map(|i| board.create(&format!("waiting card {i}"), &["--triage"]))
        .collect();

    let mut run = board.scenario();
    let refusal = start_or_refuse(&mut run);
    if refusal.is_none() {
        run.left_triage(
            &cards,
            board.target().first_bill_timeout(),
            "every waiting card decomposed",
        )
        .prove_ticks(2);
    }
    let bills: Vec<usize> = cards.iter().map(|card| aux.billed_for(card)).collect();
    let seen = run.stop();

    let keys = ["auto_decompose_per_tick", "decompose_calls_per_hour"];
    holds(
        "a gateway on billions of cards per tick and calls per hour runs, or refuses them at \
         start with exit 1 naming the key",
        refusal
            .as_deref()
            .is_none_or(|refusal| refused_as_documented(refusal, &keys)),
    )
    .over(&seen)
    .note(|| refusal.clone().unwrap_or_default())
    .gap(GapKind::GatewayExited);
    bound(
        "most bills for one card under billions per tick",
        bills.iter().copied().max().unwrap_or(0),
    )
    .at_most(1)
    .over(&seen)
    .note(|| format!("bills per card: {bills:?}"))
    .gap(GapKind::RebilledAfterDecompose);
}

#[rstest]
fn a_cooldown_of_1e16_seconds_still_pauses_after_a_refusal() {
    let target = current_target();
    let board = Board::new(
        Config::gateway()
            .cooldown(ABSURD_COOLDOWN)
            .backoff(SHORT_BACKOFF),
    );
    let aux = board.aux();
    for i in 0..WAITING_CARDS {
        board.create(&format!("waiting card {i}"), &["--triage"]);
    }
    aux.reply_default(Reply::http_error(401, "invalid api key"));

    let mut run = board.scenario();
    let refusal = start_or_refuse(&mut run);
    // Nothing may be decomposed during the pause: the watch spans ticks by the clock, after the
    // gateway showed it ticks (the first bill).
    if refusal.is_none() {
        run.bills(1, || aux.bills(), "any waiting card")
            .watch(span_of_ticks(target, PROBE_TICKS));
    }
    let bills = aux.bills();
    let seen = run.stop();

    holds(
        "a gateway on a cooldown of 1e16 seconds runs, or refuses it at start with exit 1 \
         naming the key",
        refusal
            .as_deref()
            .is_none_or(|refusal| refused_as_documented(refusal, &["provider_cooldown_seconds"])),
    )
    .over(&seen)
    .note(|| refusal.clone().unwrap_or_default())
    .gap(GapKind::GatewayExited);
    bound("bills after a 401 under a cooldown of 1e16 seconds", bills)
        .at_most(PROVIDER_FAULT_BOUND)
        .over(&seen)
        .note(|| {
            format!(
                "{WAITING_CARDS} cards waiting; billed in order: {:?}; {}",
                aux.billed_ids(),
                board.setting(Setting::Cooldown)
            )
        })
        .gap(GapKind::ProviderFaultNotPaused);
}
