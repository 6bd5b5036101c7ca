//! A provider that cannot be reached costs nothing (SPEC B5): a sweep and a person's decompose
//! made while nothing listens on the provider's port spend no card's budget, so once the
//! provider is back the card is decomposed, with one bill.
//!
//! The budget is one attempt, so a target that charged the card for the outage would have parked
//! it, and no sweep would decompose it afterwards.

use std::time::Duration;

use fixtures::prelude::*;
use rstest::rstest;

use crate::{decompose_all, decompose_card, Decomposition};

/// A base URL on a local port nothing listens on, and where no other test's fake provider can
/// start listening meanwhile (see `fixtures::closed_port`).
pub fn unreachable_base_url() -> String {
    fixtures::closed_port::closed_port_url()
}

/// The board's settings with the provider up: one automatic attempt per card, no backoff.
pub fn one_attempt() -> Config {
    Config::plain().max_attempts(1).backoff(0.0)
}

/// The same settings with the provider's base URL on a port nothing listens on.
pub fn provider_down() -> Config {
    one_attempt().yaml(&format!("model:\n  base_url: {}\n", unreachable_base_url()))
}

/// How long the target may take, once the provider is back, to decompose the card: the
/// reference pauses auto-decompose for up to a few seconds after the outage.
fn back_timeout(target: &Target) -> Duration {
    if target.is_reference() {
        Duration::from_secs(20)
    } else {
        Duration::from_secs(120)
    }
}

#[rstest]
fn provider_back_after_an_outage_decomposes_the_card_with_one_bill() {
    let board = Board::new(provider_down());
    let aux = board.aux();
    let card = board.create("waits out an outage", &["--triage"]);
    aux.reply(&card, Reply::graph(2, &[]));

    let swept_down = decompose_all(&board);
    let tried_down = decompose_card(&board, &card);
    board.reconfigure(one_attempt());
    let mut after: Vec<Decomposition> = Vec::new();
    let back = try_wait_until(
        || {
            after.push(decompose_all(&board));
            board.rows().decomposition_visible(&card)
        },
        back_timeout(board.target()),
        "a sweep to decompose the card once the provider is back",
    );

    let transcript = || {
        let sweeps: Vec<String> = after
            .iter()
            .rev()
            .take(3)
            .map(|sweep| sweep.output.to_string())
            .collect();
        format!(
            "{}\n{}\nlast sweeps after the outage ({} in all):\n{}",
            swept_down.output,
            tried_down.output,
            after.len(),
            sweeps.join("\n")
        )
    };
    let mut bills = bound(
        "bills for the card once the provider is back",
        aux.billed_for(&card),
    )
    .exactly(1)
    .note(|| board.setting(Setting::MaxAttempts))
    .context(|| format!("{}\n{}", transcript(), board.diag(&card)));
    if let Err(timeout) = &back {
        bills = bills.interrupted_by(timeout);
    }
    bills.gap(GapKind::PauseNeverEnded);
    let mut findings = Findings::new();
    findings
        .equal("children", &board.rows().children_of(&card).len(), &2)
        .that(
            after
                .last()
                .and_then(|sweep| sweep.line_for(&card))
                .is_some_and(|line| line["ok"] == true),
            || "the sweep that decomposed the card reported no ok line for it".to_owned(),
        );
    findings
        .verdict("the card is decomposed once the provider is back")
        .context(transcript)
        .gap(GapKind::ReplyNotApplied);
    let reason = tried_down.line()["reason"].as_str().unwrap_or_default();
    holds(
        "a decompose while the provider is down fails and says why",
        tried_down.ok() == Some(false) && !reason.trim().is_empty(),
    )
    .context(|| tried_down.output.to_string())
    .gap(GapKind::UnclearRefusal);
}
