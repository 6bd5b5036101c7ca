//! S1: a card whose workers never complete is spawned at most `failure_limit` times in all,
//! across ticks, a gateway restart and a gateway SIGKILL.

use judge::prelude::*;
use rstest::rstest;

use super::{ready_card, spawn_span, worker_config, Worker, FAILURE_LIMIT, PROBE_TICKS};

#[rstest]
#[case::clean_exit_without_a_terminal_call(Worker::StandIn(Behaviour::Exits(0)))]
#[case::crash(Worker::StandIn(Behaviour::Exits(1)))]
#[case::sigkill(Worker::StandIn(Behaviour::Killed))]
#[case::text_and_no_tool_call(Worker::Real(vec![Reply::text("I think it is done.")]))]
#[case::dependency_block_on_no_parent(Worker::Real(vec![
    Reply::block("dependency"),
    Reply::text("Waiting on the other card."),
]))]
fn a_card_whose_workers_never_complete_is_spawned_at_most_failure_limit_times(
    #[case] worker: Worker,
    #[with(worker_config(2))] board: Board,
) {
    let aux = board.aux();
    let card = ready_card(&board, "a card no worker of it can finish");
    worker.arrange(&board, &card);

    let mut run = board.scenario();
    // A restart and a crash inside the window: the budget is the card's, not the process's.
    run.start()
        .first_session(&card)
        .restart()
        .crash_and_restart();
    let room = spawn_span(&board).saturating_mul(u32::try_from(FAILURE_LIMIT + 2).unwrap_or(4));
    run.settle(room, "a spawn past the budget", || {
        aux.sessions_for(&card) > FAILURE_LIMIT
    })
    .prove_ticks(PROBE_TICKS);
    let seen = run.stop();
    // A worker the restart stopped was the gateway's own doing: its run is not charged.
    let charged = judge::charged_sessions(&board, &card);

    bound("charged worker sessions of the card", charged)
        .at_most(FAILURE_LIMIT)
        .over(&seen)
        .note(|| {
            format!(
                "{} sessions in all; {}; runs {:?}",
                aux.sessions_for(&card),
                board.setting(Setting::FailureLimit),
                board.rows().runs(&card)
            )
        })
        .context(|| board.diag(&card))
        .gap(GapKind::RespawnedPastBudget);
}
