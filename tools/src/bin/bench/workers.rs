//! The gateway's workers (the spawn half), on the reference and beside it upstream:
//! - a ready card → its worker's first request, on a gateway already ticking;
//! - reaping at stop: SIGTERM → the gateway and every one of its live workers gone (upstream's
//!   outlive its stop: that is reported, not timed);
//! - the gateway's own resident memory while 8 workers run.

use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use fixtures::aux_model::{AuxModel, Reply};
use fixtures::board::Board;
use fixtures::config::Config;
use fixtures::gateway::Gateway;
use fixtures::target::Target;

use crate::process::{memory, tree};
use crate::report::Figure;
use crate::stats::{Measure, Unit};

/// Live workers for the reaping and memory figures.
const LIVE_WORKERS: usize = 8;

/// How often a condition is looked at: the figures' resolution.
const POLL: Duration = Duration::from_millis(2);

/// How long any condition may take before the measurement gives up.
const PATIENCE: Duration = Duration::from_secs(90);

/// How long after SIGTERM the workers get to be gone before they count as outliving the stop:
/// the contract's 5 s stop, twice over.
const REAP_PATIENCE: Duration = Duration::from_secs(10);

/// A board whose gateway may run `max_spawn` workers.
fn board(target: &'static Target, max_spawn: u32) -> Board {
    Board::with_model(target, AuxModel::start(), Config::workers(max_spawn))
}

fn spawn(board: &Board) -> anyhow::Result<Gateway> {
    Gateway::try_spawn(board.gateway_spec().stop_grace(Duration::from_secs(10)))
        .with_context(|| format!("starting `gateway run` on {}", board.target().name()))
}

/// A ready card assigned to `default`, the profile every board has.
fn ready(board: &Board, title: &str) -> String {
    board.create(title, &["--assignee", "default"])
}

fn wait(what: &str, gateway: &Gateway, mut done: impl FnMut() -> bool) -> anyhow::Result<()> {
    let started = Instant::now();
    while !done() {
        if started.elapsed() > PATIENCE {
            bail!("{what}: not within {PATIENCE:?}\n{}", gateway.tail());
        }
        std::thread::sleep(POLL);
    }
    Ok(())
}

/// Seconds from a ready card's creation to its worker's first request, `runs` times on one
/// gateway of `target` (its worker completes the card: the fake's default script).
fn first_requests(target: &'static Target, runs: usize) -> anyhow::Result<Vec<f64>> {
    let board = board(target, 1);
    let gateway = spawn(&board)?;
    let mut samples = Vec::with_capacity(runs);
    for run in 0..runs {
        let card = ready(&board, &format!("ready card {run}"));
        let started = Instant::now();
        wait("the worker's first request", &gateway, || {
            board.aux().sessions_for(&card) > 0
        })?;
        samples.push(started.elapsed().as_secs_f64());
        wait("the card to be completed", &gateway, || {
            board.rows().status(&card) == "done" && board.census().live_for(&card) == 0
        })?;
        eprint!(
            "\rbench: {} worker first request {}/{runs}",
            target.name(),
            run + 1
        );
    }
    eprintln!();
    gateway.stop();
    Ok(samples)
}

/// Seconds from a ready card's creation to its worker's first request, on each target.
pub fn measure_first_request(
    reference: &'static Target,
    upstream: Option<&'static Target>,
    runs: usize,
) -> anyhow::Result<Figure> {
    let reference_samples = first_requests(reference, runs)?;
    let upstream_samples = upstream
        .map(|target| first_requests(target, runs))
        .transpose()?;
    Ok(Figure::new(
        "workers.first_request",
        "workers: a ready card → its worker's first request (gateway ticking)",
        Measure::of(Unit::Seconds, reference_samples),
        upstream_samples.and_then(|samples| Measure::of(Unit::Seconds, samples)),
    )
    .note(format!(
        "from `kanban create` returning to the fake recording the worker's first turn: up to one \
         tick (reference 0.1 s, upstream 1 s), the claim, the fork and exec of the worker, its \
         start and its first request; polled every {} ms",
        POLL.as_millis()
    )))
}

/// One run of eight workers in flight, then SIGTERM: the gateway's resident memory beside
/// them, the workers' together, and how long until the gateway and every worker were gone
/// (`None` when a worker outlived the stop by [`REAP_PATIENCE`]).
fn reap_once(target: &'static Target) -> anyhow::Result<(f64, f64, Option<f64>)> {
    let board = board(target, LIVE_WORKERS as u32);
    board
        .aux()
        .worker_reply_default(vec![Reply::hang(Duration::from_secs(300))]);
    let cards: Vec<String> = (0..LIVE_WORKERS)
        .map(|i| ready(&board, &format!("held card {i}")))
        .collect();
    let gateway = spawn(&board)?;
    wait("every worker's first request", &gateway, || {
        cards.iter().all(|card| board.aux().sessions_for(card) > 0)
    })?;
    let workers: Vec<u32> = tree(gateway.pid())
        .into_iter()
        .filter(|pid| *pid != gateway.pid())
        .collect();
    if board.census().live_total() < LIVE_WORKERS {
        bail!(
            "{:?} live workers found, {LIVE_WORKERS} expected",
            board.census().live()
        );
    }
    let leader = memory(gateway.pid()).context("reading the gateway's memory")?;
    let worker_rss = workers
        .iter()
        .filter_map(|&pid| memory(pid))
        .map(|m| m.rss)
        .sum::<u64>() as f64;
    let started = Instant::now();
    let report = gateway.stop();
    if report.escalated {
        bail!(
            "the gateway needed SIGKILL to stop: {report:?}\n{}",
            gateway.tail()
        );
    }
    let census = board.census();
    while census.live_total() > 0 && started.elapsed() < REAP_PATIENCE {
        std::thread::sleep(POLL);
    }
    let reaped = (census.live_total() == 0).then(|| started.elapsed().as_secs_f64());
    // The board's census ends whatever outlived the stop when the board goes.
    Ok((leader.rss as f64, worker_rss, reaped))
}

/// Eight workers in flight (each waiting on its first request), then SIGTERM, `runs` times per
/// target: reaping at stop and the gateway's memory with eight live workers.
pub fn measure_reaping(
    reference: &'static Target,
    upstream: Option<&'static Target>,
    runs: usize,
) -> anyhow::Result<Vec<Figure>> {
    let targets: Vec<&'static Target> = std::iter::once(reference).chain(upstream).collect();
    let mut reaps = vec![Vec::new(); targets.len()];
    let mut outlived = vec![0usize; targets.len()];
    let mut gateway_rss = vec![Vec::new(); targets.len()];
    let mut worker_rss = vec![Vec::new(); targets.len()];
    for run in 0..runs {
        for (index, target) in targets.iter().enumerate() {
            let (leader, workers, reaped) = reap_once(target)
                .with_context(|| format!("run {} of the reaping figure", run + 1))?;
            gateway_rss[index].push(leader);
            worker_rss[index].push(workers);
            match reaped {
                Some(seconds) => reaps[index].push(seconds),
                None => outlived[index] += 1,
            }
        }
        eprint!("\rbench: reaping {}/{runs}", run + 1);
    }
    eprintln!();
    let measure = |unit, samples: &[f64]| Measure::of(unit, samples.to_vec());
    let workers_note: Vec<String> = targets
        .iter()
        .zip(&worker_rss)
        .map(|(target, rss)| {
            let shown = measure(Unit::Bytes, rss).map_or(String::new(), |m| m.show());
            format!("{}: {shown}", target.name())
        })
        .collect();
    let outlived_note: Vec<String> = targets
        .iter()
        .zip(&outlived)
        .filter(|(_, n)| **n > 0)
        .map(|(target, n)| {
            format!(
                "{}: in {n} of {runs} runs a worker outlived the stop by {} s (not timed)",
                target.name(),
                REAP_PATIENCE.as_secs()
            )
        })
        .collect();
    Ok(vec![
        Figure::new(
            "workers.reap_at_stop",
            format!("workers: SIGTERM → the gateway and its {LIVE_WORKERS} live workers gone"),
            measure(Unit::Seconds, &reaps[0]),
            reaps
                .get(1)
                .and_then(|samples| measure(Unit::Seconds, samples)),
        )
        .note(format!(
            "each worker waiting on a hung provider request; the reference closes their runs and \
             SIGTERMs each group (SIGKILL after 2 s) within its 5 s stop; {}",
            if outlived_note.is_empty() {
                "every worker gone on every target".to_owned()
            } else {
                outlived_note.join("; ")
            }
        )),
        Figure::new(
            "workers.gateway_rss_8_live",
            format!("workers: gateway RSS with {LIVE_WORKERS} live workers"),
            measure(Unit::Bytes, &gateway_rss[0]),
            gateway_rss
                .get(1)
                .and_then(|samples| measure(Unit::Bytes, samples)),
        )
        .note(format!(
            "VmRSS of the gateway process alone; its {LIVE_WORKERS} workers together: {}",
            workers_note.join("; ")
        )),
    ])
}
