//! S5: live workers never exceed `max_spawn`, and a lowered cap is met from the next tick (its
//! stop's grace after it).

use std::time::{Duration, Instant};

use judge::prelude::*;
use rstest::rstest;

use super::{ready_card, worker_config, Worker, PROBE_TICKS};

/// Cards waiting for a worker: more than the cap allows at once.
const CARDS: usize = 4;

/// How long the workers started under the old cap may still run after the edit's next tick:
/// the contract's stop of a worker group (SIGTERM, SIGKILL after 2 s), and a second of slack.
const LOWERED_CAP_GRACE: Duration = Duration::from_secs(3);

#[rstest]
fn live_workers_never_exceed_max_spawn_and_a_lowered_cap_holds_from_the_next_tick(
    #[with(worker_config(2))] board: Board,
) {
    let cards: Vec<String> = (0..CARDS)
        .map(|i| ready_card(&board, &format!("long work {i}")))
        .collect();
    for card in &cards {
        Worker::StandIn(Behaviour::Sleeps).arrange(&board, card);
    }
    let census = board.census();

    let mut run = board.scenario();
    run.start().first_session(&cards[0]);
    run.until(
        board.target().first_bill_timeout(),
        "two live workers",
        || census.live_total() >= 2,
    )
    .prove_ticks(PROBE_TICKS);
    let under_two = census
        .record()
        .most_live_since(census.record().samples[0].at);

    board.reconfigure(board.config().max_spawn(1));
    let edited = Instant::now();
    // Ticks after the edit (each reads the config first), then the stop's grace.
    run.prove_ticks(PROBE_TICKS).watch(LOWERED_CAP_GRACE);
    let lowered_from = Instant::now();
    run.prove_ticks(PROBE_TICKS);
    let under_one = census.record().most_live_since(lowered_from);
    let seen = run.stop();

    let filled = if under_two >= 2 {
        Ok(())
    } else {
        Err(format!(
            "only {under_two} live worker(s) with four cards waiting"
        ))
    };
    Findings::new()
        .that(under_two <= 2, || {
            format!("{under_two} live workers under max_spawn 2")
        })
        .that(under_one <= 1, || {
            format!(
                "{under_one} live workers under max_spawn 1, {:.1} s after the edit",
                lowered_from.saturating_duration_since(edited).as_secs_f64()
            )
        })
        .verdict("live workers stay within max_spawn")
        .provided(&filled)
        .over(&seen)
        .context(|| format!("census: {:?}", census.record().samples))
        .gap(GapKind::SpawnCapExceeded);
}
