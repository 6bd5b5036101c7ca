//! S9 on every target: a spawn is a paid session end to end (the target's own worker, its turns
//! carrying the tools and its card), and every session the provider saw has its run and its
//! `spawned` event on the board. The reference's ledger and `usage` are `reference_only`'s.

use judge::prelude::*;
use rstest::rstest;

use super::{ready_card, spawn_span, worker_config, Worker, PROBE_TICKS};

#[rstest]
fn every_worker_session_is_a_paid_session_with_its_run_and_spawned_event_on_the_board(
    #[with(worker_config(2))] board: Board,
) {
    let aux = board.aux();
    let cards = [
        ready_card(&board, "finished by a worker answered as JSON"),
        ready_card(&board, "finished by a worker answered as a stream"),
    ];
    Worker::Real(vec![Reply::complete(), Reply::text("Done.")]).arrange(&board, &cards[0]);
    Worker::Real(vec![
        Reply::streamed_tool_call(
            "kanban_complete",
            serde_json::json!({"summary": "streamed"}),
        ),
        Reply::text("Done."),
    ])
    .arrange(&board, &cards[1]);

    let mut run = board.scenario();
    run.start()
        .first_session(&cards[0])
        .first_session(&cards[1])
        .until(
            spawn_span(&board).saturating_mul(3),
            "both cards done",
            || cards.iter().all(|card| board.rows().status(card) == "done"),
        )
        .prove_ticks(PROBE_TICKS);
    let seen = run.stop();

    let mut findings = Findings::new();
    for card in &cards {
        let requests = aux.worker_requests_for(card);
        let first = requests.iter().find(|request| request.opens_session());
        let tools = first
            .and_then(|request| request.received.json().ok())
            .and_then(|body| body["tools"].as_array().map(Vec::len))
            .unwrap_or(0);
        let sessions = aux.sessions_for(card);
        findings = findings
            .that(tools > 0, || {
                format!("{card}'s first request carried no tools")
            })
            .equal(
                &format!("{card}: runs on the board for its {sessions} session(s)"),
                &board.rows().runs(card).len(),
                &sessions,
            )
            .equal(
                &format!("{card}: spawned events for its {sessions} session(s)"),
                &board.rows().events(card, "spawned").len(),
                &sessions,
            )
            .equal(
                &format!("{card}: status"),
                &board.rows().status(card),
                &"done".to_owned(),
            );
    }
    findings
        .verdict("every worker session is a run on the board")
        .over(&seen)
        .context(|| format!("{}\n{}", board.diag(&cards[0]), board.diag(&cards[1])))
        .gap(GapKind::SpawnNotVisible);
}
