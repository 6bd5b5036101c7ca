//! The gateway's workers (the spawn half), measured on the reference; upstream is measured
//! beside it once the suite drives upstream's workers:
//! - a ready card → its worker's first request, on a gateway already ticking;
//! - reaping at stop: SIGTERM → the gateway and every one of its live workers gone;
//! - the gateway's own resident memory while 8 workers run.

use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use fixtures::aux_model::{worker_task_of, AuxModel, Reply};
use fixtures::board::Board;
use fixtures::config::{Config, Setting};
use fixtures::gateway::Gateway;
use fixtures::target::Target;
use serde_json::json;

use crate::process::{memory, tree};
use crate::report::Figure;
use crate::stats::{Measure, Unit};

/// Live workers for the reaping and memory figures.
const LIVE_WORKERS: usize = 8;

/// How often a condition is looked at: the figures' resolution.
const POLL: Duration = Duration::from_millis(2);

/// How long any condition may take before the measurement gives up.
const PATIENCE: Duration = Duration::from_secs(60);

/// A board whose gateway may run `max_spawn` workers.
fn board(target: &'static Target, max_spawn: u32) -> Board {
    let config = Config::gateway().with_number(Setting::MaxSpawn, Some(f64::from(max_spawn)));
    Board::with_model(target, AuxModel::start(), config)
}

fn spawn(board: &Board) -> anyhow::Result<Gateway> {
    Gateway::try_spawn(board.gateway_spec().stop_grace(Duration::from_secs(10)))
        .with_context(|| format!("starting `gateway run` on {}", board.target().name()))
}

/// A worker's turn that completes its card.
fn complete() -> Reply {
    let body = json!({
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": null,
            "tool_calls": [{"id": "call_1", "type": "function", "function": {
                "name": "kanban_complete", "arguments": "{\"summary\":\"done\"}"}}],
        }}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1},
    });
    Reply::raw(200, "application/json", body.to_string())
}

/// Whether the provider has received a worker turn for `card`.
fn turned(board: &Board, card: &str) -> bool {
    board
        .aux()
        .agent_requests()
        .iter()
        .any(|body| worker_task_of(body).as_deref() == Some(card))
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

/// Seconds from a ready card's creation (the gateway ticking every 0.1 s) to its worker's first
/// request at the provider, `runs` times on one gateway.
pub fn measure_first_request(reference: &'static Target, runs: usize) -> anyhow::Result<Figure> {
    let board = board(reference, 1);
    let gateway = spawn(&board)?;
    let mut samples = Vec::with_capacity(runs);
    for run in 0..runs {
        let card = board.create(&format!("ready card {run}"), &["--assignee", "coder"]);
        board.aux().reply(&card, complete());
        let started = Instant::now();
        wait("the worker's first request", &gateway, || {
            turned(&board, &card)
        })?;
        samples.push(started.elapsed().as_secs_f64());
        wait("the card to be completed", &gateway, || {
            board.rows().task(&card)["status"] == "done"
        })?;
        eprint!("\rbench: worker first request {}/{runs}", run + 1);
    }
    eprintln!();
    gateway.stop();
    Ok(Figure::new(
        "workers.first_request",
        "workers: a ready card → its worker's first request (gateway ticking)",
        Measure::of(Unit::Seconds, samples),
        None,
    )
    .note(format!(
        "from `kanban create` returning to the fake recording the worker's first turn: up to one \
         0.1 s tick, the claim, fork and exec of `hermes chat`, its start and its first request; \
         polled every {} ms; reference only until the suite drives upstream's workers",
        POLL.as_millis()
    )))
}

/// Eight workers in flight (each waiting on its first request), then SIGTERM: the gateway's
/// resident memory beside them, and how long until it and every worker are gone.
pub fn measure_reaping(reference: &'static Target, runs: usize) -> anyhow::Result<Vec<Figure>> {
    let mut reaps = Vec::with_capacity(runs);
    let mut gateway_rss = Vec::with_capacity(runs);
    let mut worker_rss = Vec::with_capacity(runs);
    for run in 0..runs {
        let board = board(reference, LIVE_WORKERS as u32);
        board
            .aux()
            .reply_default(Reply::hang(Duration::from_secs(300)));
        let cards: Vec<String> = (0..LIVE_WORKERS)
            .map(|i| board.create(&format!("held card {i}"), &["--assignee", "coder"]))
            .collect();
        let gateway = spawn(&board)?;
        wait("every worker's first request", &gateway, || {
            cards.iter().all(|card| turned(&board, card))
        })?;
        let workers: Vec<u32> = tree(gateway.pid())
            .into_iter()
            .filter(|pid| *pid != gateway.pid())
            .collect();
        if workers.len() < LIVE_WORKERS {
            bail!(
                "{} live workers found, {LIVE_WORKERS} expected",
                workers.len()
            );
        }
        let leader = memory(gateway.pid()).context("reading the gateway's memory")?;
        gateway_rss.push(leader.rss as f64);
        worker_rss.push(
            workers
                .iter()
                .filter_map(|&pid| memory(pid))
                .map(|m| m.rss)
                .sum::<u64>() as f64,
        );
        let started = Instant::now();
        let report = gateway.stop();
        if !report.clean() {
            bail!(
                "the gateway did not stop cleanly: {report:?}\n{}",
                gateway.tail()
            );
        }
        wait("every worker gone", &gateway, || {
            workers
                .iter()
                .all(|&pid| memory(pid).is_none_or(|m| m.rss == 0))
        })?;
        reaps.push(started.elapsed().as_secs_f64());
        eprint!("\rbench: reaping {}/{runs}", run + 1);
    }
    eprintln!();
    let worker_note = Measure::of(Unit::Bytes, worker_rss).map_or(String::new(), |m| m.show());
    Ok(vec![
        Figure::new(
            "workers.reap_at_stop",
            format!("workers: SIGTERM → the gateway and its {LIVE_WORKERS} live workers gone"),
            Measure::of(Unit::Seconds, reaps),
            None,
        )
        .note(
            "each worker waiting on a hung provider request; the gateway closes their runs, \
             SIGTERMs each group (SIGKILL after 2 s) within its 5 s stop; reference only",
        ),
        Figure::new(
            "workers.gateway_rss_8_live",
            format!("workers: gateway RSS with {LIVE_WORKERS} live workers"),
            Measure::of(Unit::Bytes, gateway_rss),
            None,
        )
        .note(format!(
            "VmRSS of the gateway process alone; its {LIVE_WORKERS} `hermes chat` workers \
             together: {worker_note}; reference only"
        )),
    ])
}
