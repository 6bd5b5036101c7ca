//! S1: a card whose workers never complete is spawned at most `failure_limit` times in all,
//! across ticks, a gateway restart and a gateway SIGKILL.

use std::time::{Duration, Instant};

use judge::prelude::*;
use rstest::rstest;

use super::{ready_card, spawn_span, worker_config, Worker, FAILURE_LIMIT, PROBE_TICKS};

/// How often the window recounts the card's charged sessions once it has had enough sessions.
const POLL_CHARGED: Duration = Duration::from_millis(500);

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
    let census = board.census();
    let card = ready_card(&board, "a card no worker of it can finish");
    worker.arrange(&board, &card);

    let mut run = board.scenario();
    // A restart and a crash inside the window: the budget is the card's, not the process's.
    run.start()
        .first_session(&card)
        .restart()
        .crash_and_restart();
    // A real worker's session (an interpreter's start, its turns, the nudges, its exit) can
    // last many spawn spans, so the window is not a fixed count of them: it ends once the card
    // is charged past its budget, or once it has had no live worker for two spawn spans (a
    // gateway that respawns does so within one), within a generous cap.
    let span = spawn_span(&board);
    let cap = span.saturating_mul(u32::try_from(4 * (FAILURE_LIMIT + 2)).unwrap_or(16));
    let mut idle_since: Option<Instant> = None;
    let mut last_count = Instant::now();
    let mut settled = false;
    let mut charged_while_watched = 0;
    run.settle(
        cap,
        "a charged spawn past the budget or a quiet card",
        || {
            if census.live_for(&card) > 0 {
                idle_since = None;
            }
            let quiet = idle_since.get_or_insert_with(Instant::now).elapsed() >= span * 2;
            // Counting charged sessions reads the whole history: only when it may have changed.
            let past = aux.sessions_for(&card) > FAILURE_LIMIT
                && last_count.elapsed() >= POLL_CHARGED
                && {
                    last_count = Instant::now();
                    charged_while_watched = judge::charged_sessions(&board, &card);
                    charged_while_watched > FAILURE_LIMIT
                };
            settled = quiet || past;
            settled
        },
    );
    let closed_on_a_live_worker = !settled && census.live_for(&card) > 0;
    run.prove_ticks(PROBE_TICKS);
    let seen = run.stop();
    // A worker the restart stopped was the gateway's own doing: its run is not charged. A
    // session the window saw charged stays charged: a stop that then closes its run
    // `interrupted` (as a gateway whose stop ends no worker may still write) unspends nothing.
    let charged = judge::charged_sessions(&board, &card).max(charged_while_watched);

    // Within the budget while a worker still runs is no verdict: its end may bring the spawn
    // past the budget that the window did not cover.
    let arranged = if charged <= FAILURE_LIMIT && closed_on_a_live_worker {
        Err(format!(
            "the window closed after {:.1} s with a worker of the card still running",
            cap.as_secs_f64()
        ))
    } else {
        Ok(())
    };
    bound("charged worker sessions of the card", charged)
        .at_most(FAILURE_LIMIT)
        .provided(&arranged)
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
