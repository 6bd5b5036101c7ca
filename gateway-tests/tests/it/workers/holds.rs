//! S8: a card a worker handed to a person (`needs_input`) is never spawned again, nor
//! decomposed, without a person's action, however often the hand-off recurs.

use std::time::Instant;

use judge::prelude::*;
use rstest::rstest;

use super::{ready_card, spawn_span, worker_config, Worker, PROBE_TICKS};

/// Whether `card`'s `session`-th worker was told to block (its answer's tool) and the card has
/// left `running` since.
fn blocked_by_session(board: &Board, card: &str, session: usize) -> bool {
    let told = board.aux().worker_requests_for(card).iter().any(|request| {
        request.session == session
            && request
                .answered_tool()
                .is_some_and(|(tool, _)| tool == "kanban_block")
    });
    told && board.rows().status(card) != "running"
}

#[rstest]
fn a_card_handed_to_a_person_twice_is_neither_spawned_nor_decomposed_again(
    #[with(worker_config(2))] board: Board,
) {
    let aux = board.aux();
    let card = ready_card(&board, "needs a person's answer");
    Worker::Real(vec![
        Reply::block("needs_input"),
        Reply::text("Waiting for you."),
    ])
    .arrange(&board, &card);

    let mut run = board.scenario();
    let span = spawn_span(&board).saturating_mul(3);
    run.start()
        .first_session(&card)
        .until(span, "the first hand-off", || {
            blocked_by_session(&board, &card, 1)
        });
    // A person answers: the card goes back to work, and its worker hands it back again.
    let unblocked = board.cli_unchecked(["kanban", "unblock", card.as_str()]);
    run.sessions(&card, 2)
        .until(span, "the second hand-off", || {
            blocked_by_session(&board, &card, 2)
        });
    let handed_back = Instant::now();
    run.prove_ticks(PROBE_TICKS);
    let spawned_after = aux
        .session_starts(&card)
        .into_iter()
        .filter(|start| *start > handed_back)
        .count();
    let billed_after = aux
        .bill_times(&card)
        .into_iter()
        .filter(|billed| *billed > handed_back)
        .count();
    let status = board.rows().status(&card);
    let seen = run.stop();

    let arranged = if unblocked.success() {
        Ok(())
    } else {
        Err(format!("`kanban unblock` failed:\n{unblocked}"))
    };
    Findings::new()
        .equal(
            "worker sessions after the second hand-off",
            &spawned_after,
            &0,
        )
        .equal(
            "decompose calls after the second hand-off",
            &billed_after,
            &0,
        )
        .verdict("a card handed to a person waits for a person")
        .provided(&arranged)
        .over(&seen)
        .note(move || format!("status={status}"))
        .context(|| board.diag(&card))
        .gap(GapKind::HandOffRespawned);
}
