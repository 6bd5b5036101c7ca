//! S7: a gateway reaps what it started. At its stop every worker's group ends within the stop
//! (a worker that ignores SIGTERM and its grandchild included) and no worker request follows;
//! after a SIGKILL the next gateway adopts the orphans (counted against the cap, not charged)
//! and ends them at its own stop.

use std::time::{Duration, Instant};

use judge::prelude::*;
use rstest::rstest;

use super::{ready_card, worker_config, Worker, PROBE_TICKS};

/// The contract's stop: SIGTERM ends a gateway and its workers within 5 s.
const STOP_BOUND: Duration = Duration::from_secs(5);

/// Waits (at most until `bound` after `stop_began`) for the census to see no live worker, and
/// gives back the workers still live then, per card.
fn live_after_stop(board: &Board, stop_began: Instant, bound: Duration) -> Vec<(String, usize)> {
    let census = board.census();
    let deadline = stop_began + bound;
    while Instant::now() < deadline && census.live_total() > 0 {
        std::thread::sleep(fixtures::wait::POLL_INTERVAL);
    }
    census.live().into_iter().collect()
}

#[rstest]
fn stopping_the_gateway_ends_every_worker_group_within_the_stop(
    #[with(worker_config(2))] board: Board,
) {
    let cards = [
        ready_card(&board, "a worker that ignores SIGTERM"),
        ready_card(&board, "a worker with a grandchild"),
    ];
    Worker::StandIn(Behaviour::IgnoresTerm).arrange(&board, &cards[0]);
    Worker::StandIn(Behaviour::Forks).arrange(&board, &cards[1]);
    let census = board.census();

    let mut run = board.scenario();
    run.start()
        .first_session(&cards[0])
        .first_session(&cards[1]);
    run.until(
        Duration::from_secs(5),
        "both workers (and the grandchild) live",
        || {
            census.live_total() == 2
                && census
                    .record()
                    .groups_of(&cards[1])
                    .any(|group| group.pids.len() >= 2)
        },
    );
    let arranged = if run.ok() {
        Ok(())
    } else {
        Err("the two workers were never live at once".to_owned())
    };
    let stop_began = Instant::now();
    let seen = run.stop();
    let left = live_after_stop(&board, stop_began, STOP_BOUND);
    let requests_after = board
        .aux()
        .worker_requests()
        .iter()
        .filter(|request| request.received.arrived > stop_began + STOP_BOUND)
        .count();

    Findings::new()
        .equal("live workers 5 s after SIGTERM", &left, &Vec::new())
        .equal("worker requests after the stop", &requests_after, &0)
        .verdict("the gateway's stop ends every worker")
        .provided(&arranged)
        .over(&seen)
        .context(|| format!("{}\n{}", board.diag(&cards[0]), board.diag(&cards[1])))
        .gap(GapKind::WorkerOutlivedStop);
}

#[rstest]
fn after_a_gateway_sigkill_the_next_gateway_adopts_the_orphans_and_ends_them_at_its_stop(
    #[with(worker_config(2))] board: Board,
) {
    let cards = [
        ready_card(&board, "orphaned once"),
        ready_card(&board, "orphaned twice"),
        ready_card(&board, "waiting for a slot"),
    ];
    for card in &cards {
        Worker::StandIn(Behaviour::Sleeps).arrange(&board, card);
    }
    let census = board.census();

    let mut run = board.scenario();
    run.start().first_session(&cards[0]);
    run.until(Duration::from_secs(10), "two live workers", || {
        census.live_total() == 2
    });
    let orphans = census.live();
    let crashed = Instant::now();
    run.crash_and_restart().prove_ticks(PROBE_TICKS);
    let still_orphans = census.live();
    let most_after = census.record().most_live_since(crashed);
    let stop_began = Instant::now();
    let seen = run.stop();
    let left = live_after_stop(&board, stop_began, STOP_BOUND);

    let arranged = if orphans.values().sum::<usize>() == 2 && still_orphans == orphans {
        Ok(())
    } else {
        Err(format!(
            "live before the crash {orphans:?}, after the restart's ticks {still_orphans:?}"
        ))
    };
    let sessions: usize = cards
        .iter()
        .map(|card| board.aux().sessions_for(card))
        .sum();
    Findings::new()
        .that(most_after <= 2, || {
            format!("{most_after} live workers under max_spawn 2")
        })
        .equal("worker sessions (no card spawned again)", &sessions, &2)
        .equal(
            "live workers 5 s after the next gateway's SIGTERM",
            &left,
            &Vec::new(),
        )
        .verdict("the next gateway adopts a crashed gateway's workers")
        .provided(&arranged)
        .over(&seen)
        .context(|| {
            cards
                .iter()
                .map(|card| board.diag(card))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .gap(GapKind::OrphanNotAdopted);
}
