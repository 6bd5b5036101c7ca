//! S4: one key, one pause: a worker's refusal pauses every automatic call on the board (spawns,
//! workers' requests, decompose calls), so it costs the requests already in flight, not one
//! session per ready card.

use judge::prelude::*;
use rstest::rstest;

use super::{ready_card, spawn_span, worker_config, Worker};

/// Ready cards whose workers all meet the refusal.
const CARDS: usize = 4;

/// Live workers at once: the most sessions that may be in flight when the refusal lands.
const MAX_SPAWN: u32 = 2;

#[rstest]
#[case::payment_required(Reply::http_error(402, "insufficient credits"))]
#[case::rate_limited(Reply::http_error(429, "slow down").retry_after(600))]
fn a_workers_refusal_pauses_every_automatic_call_on_the_board(
    #[case] refusal: Reply,
    #[with(worker_config(MAX_SPAWN).cooldown(600.0))] board: Board,
) {
    let aux = board.aux();
    let cards: Vec<String> = (0..CARDS)
        .map(|i| ready_card(&board, &format!("card {i} on a refusing provider")))
        .collect();
    for card in &cards {
        Worker::Real(vec![refusal.clone()]).arrange(&board, card);
    }

    let mut run = board.scenario();
    run.start().first_session(&cards[0]);
    let refused = || {
        aux.worker_requests()
            .iter()
            .any(|request| matches!(request.received.answer.status, 401..=403 | 429))
    };
    run.until(spawn_span(&board), "the first refusal to land", &refused);
    // A triage card after the refusal: the pause is the decomposer's too.
    let idea = board.create("an idea to split while the provider refuses", &["--triage"]);
    run.watch(spawn_span(&board).saturating_mul(3));
    let sessions = aux.sessions();
    let bills = aux.billed_for(&idea);
    let seen = run.stop();

    let arranged = if refused() {
        Ok(())
    } else {
        Err("no worker request was refused".to_owned())
    };
    Findings::new()
        .that(sessions <= MAX_SPAWN as usize, || {
            format!(
                "{sessions} worker sessions, more than the {MAX_SPAWN} in flight at the refusal"
            )
        })
        .equal("decompose calls after the refusal", &bills, &0)
        .verdict("a worker's refusal pauses every automatic call")
        .provided(&arranged)
        .over(&seen)
        .context(|| {
            cards
                .iter()
                .chain([&idea])
                .map(|card| board.diag(card))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .gap(GapKind::WorkerRefusalNotPaused);
}
