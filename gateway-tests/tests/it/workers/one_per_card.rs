//! S2: at most one live worker per card at any instant, a worker that outlived its gateway or
//! ran on after its run ended included.

use judge::prelude::*;
use rstest::rstest;

use super::{ready_card, spawn_span, worker_config, Worker, PROBE_TICKS};

/// The most workers of `card` the census saw live at once over the whole run, with when.
fn most_at_once(board: &Board, card: &str) -> (usize, String) {
    let record = board.census().record();
    let (most, at) = record.most_per_card(card);
    let first = record.samples.first().map(|s| s.at);
    let when = match (at, first) {
        (Some(at), Some(first)) => format!(
            "most at +{:.1}s",
            at.saturating_duration_since(first).as_secs_f64()
        ),
        _ => "no sample".to_owned(),
    };
    (most, when)
}

#[rstest]
fn a_worker_alive_across_a_gateway_crash_keeps_its_card_from_a_second_worker(
    #[with(worker_config(2))] board: Board,
) {
    let card = ready_card(&board, "worked on across a crash");
    Worker::StandIn(Behaviour::Sleeps).arrange(&board, &card);

    let mut run = board.scenario();
    run.start().first_session(&card).crash_and_restart();
    // The restarted gateway ticks (probes) while the first worker still runs.
    run.prove_ticks(PROBE_TICKS);
    let alive = match board.census().live_for(&card) {
        1 => Ok(()),
        n => Err(format!(
            "{n} live workers of the card after the restart's ticks"
        )),
    };
    let seen = run.stop();
    let (most, when) = most_at_once(&board, &card);

    bound("live workers of one card at once", most)
        .at_most(1)
        .provided(&alive)
        .over(&seen)
        .note(|| format!("{when}; sessions {}", board.aux().sessions_for(&card)))
        .context(|| board.diag(&card))
        .gap(GapKind::StackedWorkers);
}

/// Whether the census saw `card`'s first worker run on after its own run had ended: its group
/// (the stand-in) live after the target's worker in it (which ends only after its terminal
/// call) was gone.
fn ran_on_after_its_run(board: &Board, card: &str) -> Result<(), String> {
    let record = board.census().record();
    let first = record.groups_of(card).next().cloned();
    match first {
        Some(first) if first.outlived_a_process() => Ok(()),
        Some(first) => Err(format!(
            "its first worker's group never outlived a process of its own: {:?}",
            first.pids
        )),
        None => Err("the census never saw a worker of the card".to_owned()),
    }
}

#[rstest]
fn a_worker_running_on_after_its_run_ended_keeps_its_card_from_a_second_worker(
    #[with(worker_config(2))] board: Board,
) {
    let card = ready_card(&board, "handed back while its worker runs on");
    // The real worker blocks on a dependency no card provides, which sends the card back (or
    // holds it); its stand-in parent runs on after it.
    Worker::StandIn(Behaviour::RunsOn).arrange(&board, &card);
    board.aux().worker_reply(
        &card,
        vec![Reply::block("dependency"), Reply::text("Waiting.")],
    );

    let mut run = board.scenario();
    run.start()
        .first_session(&card)
        .settle(
            spawn_span(&board).saturating_mul(3),
            "a second worker of the card",
            || board.aux().sessions_for(&card) >= 2,
        )
        .prove_ticks(PROBE_TICKS);
    let seen = run.stop();
    let (most, when) = most_at_once(&board, &card);

    bound("live workers of one card at once", most)
        .at_most(1)
        .provided(&ran_on_after_its_run(&board, &card))
        .over(&seen)
        .note(|| {
            format!(
                "{when}; sessions {}; runs {:?}",
                board.aux().sessions_for(&card),
                board.rows().runs(&card)
            )
        })
        .context(|| board.diag(&card))
        .gap(GapKind::StackedWorkers);
}
