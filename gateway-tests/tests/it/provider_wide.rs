//! A refusal that concerns the whole provider account (401/402/403, a 429 with `Retry-After`)
//! costs one call, not one per waiting card: the gateway pauses every card while it lasts, and
//! resumes when it ends.

use std::time::{Duration, Instant};

use fixtures::observe;
use fixtures::prelude::*;
use rstest::rstest;

use crate::support::{
    await_bills, await_left_triage, gateway_config, span_of_ticks, start_gateway, watch_count,
};
use crate::{PROBE_TICKS, PROVIDER_FAULT_BOUND};

/// Triage cards waiting when the provider starts refusing.
const WAITING_CARDS: usize = 4;

/// How the provider refuses, and which gap kind a target that keeps calling it shows.
#[derive(Debug, Clone, Copy)]
enum Refusal {
    /// HTTP 402, insufficient quota: paused for `kanban.provider_cooldown_seconds`.
    Quota,
    /// HTTP 429 with `Retry-After`: paused for that long.
    RateLimited,
}

impl Refusal {
    fn reply(self, pause_secs: u64) -> Reply {
        match self {
            Refusal::Quota => Reply::http_error(402, "insufficient quota"),
            Refusal::RateLimited => Reply::http_error(429, "rate limited").retry_after(pause_secs),
        }
    }

    fn describe(self, pause_secs: u64) -> String {
        match self {
            Refusal::Quota => format!("402 (cooldown {pause_secs}s)"),
            Refusal::RateLimited => format!("429 (Retry-After: {pause_secs})"),
        }
    }

    fn gap_kind(self) -> GapKind {
        match self {
            Refusal::Quota => GapKind::ProviderFaultNotPaused,
            Refusal::RateLimited => GapKind::RetryAfterIgnored,
        }
    }
}

#[rstest]
#[case::http_402("provider_wide_402", Refusal::Quota)]
#[case::http_429("provider_wide_429", Refusal::RateLimited)]
fn provider_wide_refusal_costs_one_call_not_one_per_card(
    #[case] key: &str,
    #[case] refusal: Refusal,
) {
    let target = current_target();
    // Nothing may be decomposed while the pause lasts, so probes cannot prove ticks here: the
    // watch spans PROBE_TICKS of the target's ticks by the clock, and the gateway is shown
    // ticking before it (the first bill) and after it (every card decomposed once the pause
    // ends). The pause is set longer than the watch, with room to spare.
    let watch = span_of_ticks(target, PROBE_TICKS);
    let pause_secs = watch.as_secs_f64().ceil() as u64 + 2;
    let board = Board::new(&gateway_config(&format!(
        "kanban:\n  provider_cooldown_seconds: {pause_secs}\n  decompose_backoff_seconds: 0.05\n"
    )));
    let aux = board.aux();
    let cards: Vec<String> = (0..WAITING_CARDS)
        .map(|i| board.create(&format!("waiting card {i}"), &["--triage"]))
        .collect();
    aux.reply_default(refusal.reply(pause_secs));

    let gateway = start_gateway(&board);
    await_bills(&board, &gateway, 1, || aux.bills(), "any waiting card");
    let refused_at = Instant::now();
    let bills_while_paused = watch_count(&gateway, watch, || aux.bills());
    let watched = refused_at.elapsed();
    // The provider recovers; the pause must end on its own, and every card then gets through.
    aux.reply_default(Reply::default_single());
    await_left_triage(
        &board,
        &gateway,
        &cards,
        Duration::from_secs(pause_secs) + board.target().first_bill_timeout(),
        "every waiting card decomposed after the pause",
    );
    drop(gateway);
    observe::record(
        "bills_while_provider_paused",
        bills_while_paused,
        Some(PROVIDER_FAULT_BOUND),
    );

    known_gate(key, || {
        if bills_while_paused > PROVIDER_FAULT_BOUND {
            return Err(Gap::new(
                refusal.gap_kind(),
                format!(
                    "provider-wide {} cost {bills_while_paused} aux calls across {WAITING_CARDS} \
                     triage cards within {:.1}s of the first refusal (bound {PROVIDER_FAULT_BOUND})",
                    refusal.describe(pause_secs),
                    watched.as_secs_f64()
                ),
            ));
        }
        Ok(())
    });
}
