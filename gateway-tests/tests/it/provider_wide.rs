//! A refusal that concerns the whole provider account (401, 402, 403, a 429 with `Retry-After`)
//! costs one call, not one per waiting card: the gateway pauses every card while it lasts, and
//! resumes when it ends.

use std::time::Duration;

use fixtures::target::current_target;
use judge::prelude::*;
use rstest::rstest;

use crate::support::span_of_ticks;
use crate::{PROBE_TICKS, PROVIDER_FAULT_BOUND, SHORT_BACKOFF};

/// Triage cards waiting when the provider starts refusing.
const WAITING_CARDS: usize = 4;

/// How the provider refuses, and which gap kind a target that keeps calling it shows.
#[derive(Debug, Clone, Copy)]
enum Refusal {
    /// HTTP 401, a key the provider does not accept: paused for the target's provider cooldown.
    Unauthorized,
    /// HTTP 402, insufficient quota: paused for the target's provider cooldown.
    Quota,
    /// HTTP 403, a model the account may not use: paused for the target's provider cooldown.
    Forbidden,
    /// HTTP 429 with `Retry-After`: paused for that long.
    RateLimited,
}

impl Refusal {
    fn reply(self, pause_secs: u64) -> Reply {
        match self {
            Refusal::Unauthorized => Reply::http_error(401, "invalid api key"),
            Refusal::Quota => Reply::http_error(402, "insufficient quota"),
            Refusal::Forbidden => Reply::http_error(403, "model not allowed"),
            Refusal::RateLimited => Reply::http_error(429, "rate limited").retry_after(pause_secs),
        }
    }

    fn gap_kind(self) -> GapKind {
        match self {
            Refusal::Unauthorized | Refusal::Quota | Refusal::Forbidden => {
                GapKind::ProviderFaultNotPaused
            }
            Refusal::RateLimited => GapKind::RetryAfterIgnored,
        }
    }
}

#[rstest]
#[case::http_401(Refusal::Unauthorized)]
#[case::http_402(Refusal::Quota)]
#[case::http_403(Refusal::Forbidden)]
#[case::http_429(Refusal::RateLimited)]
fn provider_wide_refusal_costs_one_call_not_one_per_card(#[case] refusal: Refusal) {
    let target = current_target();
    // Nothing may be decomposed while the pause lasts, so probes cannot prove ticks here: the
    // watch spans PROBE_TICKS of the target's ticks by the clock, and the gateway is shown
    // ticking before it (the first bill) and, where the pause's length is known, after it (every
    // card decomposed once the pause ends). The pause is set longer than the watch.
    let watch = span_of_ticks(target, PROBE_TICKS);
    let pause_secs = watch.as_secs_f64().ceil() as u64 + 2;
    let board = Board::new(
        Config::gateway()
            .cooldown(pause_secs as f64)
            .backoff(SHORT_BACKOFF),
    );
    let aux = board.aux();
    let cards: Vec<String> = (0..WAITING_CARDS)
        .map(|i| board.create(&format!("waiting card {i}"), &["--triage"]))
        .collect();
    aux.reply_default(refusal.reply(pause_secs));

    let mut run = board.scenario();
    run.start()
        .bills(1, || aux.bills(), "any waiting card")
        .watch(watch);
    let pause_is_known = match refusal {
        Refusal::RateLimited => {
            run.note(format!("Retry-After: {pause_secs}"));
            true
        }
        Refusal::Unauthorized | Refusal::Quota | Refusal::Forbidden => {
            run.note(board.setting(Setting::Cooldown));
            board.reads(Setting::Cooldown)
        }
    };
    let bills_while_paused = aux.bills();
    bound("bills while provider paused", bills_while_paused)
        .at_most(PROVIDER_FAULT_BOUND)
        .over(&run)
        .note(|| format!("{WAITING_CARDS} triage cards waiting"))
        .context(|| format!("aux calls by card: {:?}", aux.billed_ids()))
        .gap(refusal.gap_kind());

    // The provider recovers; the pause must end on its own, and every card then gets through.
    // Only where the pause's length is the test's to set: another target's own cooldown may
    // rightly outlast any wait here.
    if pause_is_known {
        aux.reply_default(Reply::default_single());
        run.close_window();
        run.left_triage(
            &cards,
            Duration::from_secs(pause_secs) + target.first_bill_timeout(),
            "every waiting card decomposed after the pause",
        );
        let decomposed = board.rows().left_triage(&cards).len();
        let resumed = run.stop();
        bound("waiting cards decomposed after the pause", decomposed)
            .exactly(WAITING_CARDS)
            .over(&resumed)
            .gap(GapKind::PauseNeverEnded);
    }
}
