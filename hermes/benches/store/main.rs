//! `cargo bench -p hermes`: what the board costs the dispatcher at scale.
//!
//! - `tick_selection/<cards>`: one dispatcher tick's board work — closing abandoned attempts
//!   (`recover_abandoned`, which finds nothing on a healthy board) and the automatic step's pick
//!   (`auto::pick`: the incremental `sync_decompose_state`, `auto_gate` and
//!   `due_cards(now, 3, ∅)`) — on boards of
//!   1k, 10k and 100k cards with 10 % in triage, half of those in backoff. It must not grow with
//!   the board (the due-card query walks an index and stops at its limit).
//! - `fanout_apply/<board>/<children>`: the apply transaction of an 8- and a 64-child fan-out
//!   (children, links, events, root update, promotion) on a 10k-card board, and of the 8-child
//!   one on a 100k-card board, to show how it scales.
//! - `ledger/record_one_row`: opening and closing one ledger row (two transactions), on the
//!   10k-card board.
//!
//! Boards live under cargo's bench scratch directory (the build's own disk, as a user's board
//! would) and are written once per size; see `board.rs` for their shape. The write benchmarks
//! reuse the tick boards (ticks write nothing) and remove what they add after each iteration,
//! so every iteration sees the same board. Every write commits with `synchronous=FULL`, as the
//! store always does, so write figures include the fsyncs.

mod board;

use std::cell::RefCell;
use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, ensure, Context as _};
use criterion::{BatchSize, BenchmarkId, Criterion};
use hermes::auto::{self, Picked};
use hermes::core::{CardBudget, LedgerOutcome};
use hermes::decompose::{ChildSpec, Plan};
use hermes::store::{
    now_ms, ApplyOptions, ApplyResult, LedgerClose, LedgerOpen, NewTask, Origin, Store, StoreError,
};
use rusqlite::Connection;

use board::{build, remove_cards, BenchBoard, CALLS_PER_HOUR};

/// Board sizes for the tick benchmark.
const TICK_SIZES: [usize; 3] = [1_000, 10_000, 100_000];

/// The fan-outs measured, as (board size, children).
const FANOUTS: [(usize, usize); 3] = [(10_000, 8), (10_000, 64), (100_000, 8)];

/// Size of the board the ledger benchmark runs on.
const LEDGER_BOARD_SIZE: usize = 10_000;

/// Cards the dispatcher asks for per tick (the default `kanban.auto_decompose_per_tick`).
const PER_TICK: usize = 3;

fn main() {
    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    if let Err(error) = run(&mut criterion) {
        eprintln!("bench store: error: {error:#}");
        std::process::exit(1);
    }
    criterion.final_summary();
}

fn run(criterion: &mut Criterion) -> anyhow::Result<()> {
    let scratch = tempfile::Builder::new()
        .prefix("store-bench-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .context("creating the benchmark's scratch directory")?;
    // One clock reading for the whole run: backoff deadlines stay in the future however long
    // the benchmarks take, so every tick sees the same due set.
    let now = now_ms();
    let boards = tick_selection(criterion, scratch.path(), now)?;
    let board_of = |size: usize| {
        boards
            .iter()
            .find(|board| board.census.tasks == size)
            .with_context(|| format!("no {size}-card board was built"))
    };
    fanout_apply(criterion, &board_of)?;
    ledger_row(criterion, board_of(LEDGER_BOARD_SIZE)?)?;
    Ok(())
}

/// What one dispatcher tick asks of the board (see `dispatch::Dispatcher::tick`).
fn tick(store: &mut Store, now: i64, exclude: &HashSet<String>) -> Result<Vec<String>, StoreError> {
    // As the gateway's tick runs them: each through one board call, which looks at the board's
    // files once.
    store.refreshed(|s| {
        s.recover_abandoned(now, exclude, CardBudget::new(MAX_ATTEMPTS), Origin::Gateway)
    })?;
    let picked = store.refreshed(|s| {
        auto::pick(
            s,
            now,
            CALLS_PER_HOUR,
            PER_TICK,
            exclude,
            false,
            Origin::Gateway,
        )
    })?;
    match picked {
        Picked::Due { cards, .. } => Ok(cards),
        Picked::Paused { .. } | Picked::Ceiling { .. } => Ok(Vec::new()),
    }
}

/// The default `kanban.decompose_max_attempts`.
const MAX_ATTEMPTS: u32 = 3;

/// Builds the boards, times a tick on each, and hands the boards on.
fn tick_selection(
    criterion: &mut Criterion,
    scratch: &Path,
    now: i64,
) -> anyhow::Result<Vec<BenchBoard>> {
    let mut group = criterion.benchmark_group("tick_selection");
    let mut boards = Vec::new();
    for size in TICK_SIZES {
        let dir = scratch.join(format!("tick-{size}"));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let board = build(&dir, size, now)?;
        let (path, census) = (&board.path, board.census);
        let mut store = Store::open(path).context("opening the tick board")?;
        // The gateway's start-up sync; ticks after it only look at newer cards.
        store.sync_decompose_state(now, true)?;
        let exclude = HashSet::new();
        let picked = tick(&mut store, now, &exclude)?;
        ensure!(
            picked.len() == PER_TICK && census.triage_due >= PER_TICK,
            "a tick on the {size}-card board picked {picked:?}; the board has {} due cards",
            census.triage_due
        );
        verify_due(path, &picked, now)?;

        let failure = Failure::default();
        group.bench_with_input(BenchmarkId::from_parameter(size), &size, |b, _| {
            b.iter(|| {
                tick(&mut store, now, &exclude).unwrap_or_else(|error| {
                    failure.note(
                        anyhow::Error::new(error)
                            .context(format!("a tick on the {size}-card board")),
                    )
                })
            })
        });
        failure.into_result()?;
        boards.push(board);
    }
    group.finish();
    Ok(boards)
}

/// Checks that the cards a tick picked are due triage cards, so the benchmark times a selection
/// that is right, not merely fast.
fn verify_due(path: &Path, picked: &[String], now: i64) -> anyhow::Result<()> {
    let conn = Connection::open(path).context("opening the board to check the pick")?;
    for id in picked {
        let (status, due): (String, Option<i64>) = conn
            .query_row(
                "SELECT t.status, s.due_at_ms FROM tasks t
                 JOIN hermes_decompose_state s ON s.task_id = t.id WHERE t.id = ?1",
                [id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .with_context(|| format!("reading picked card {id}"))?;
        if status != "triage" || due.is_none_or(|due| due > now) {
            bail!("the tick picked {id}, which is {status} and due at {due:?} (now {now})");
        }
    }
    Ok(())
}

/// A fan-out of `children` children shaped like a work breakdown: child `k` waits for child
/// `(k - 1) / 2`, so only the first is ready at once and every link kind is written.
fn fanout_plan(children: usize) -> Plan {
    Plan::Fanout {
        rationale: "split into independent steps".to_owned(),
        children: (0..children)
            .map(|k| ChildSpec {
                title: format!("step {k} of the work"),
                body: format!("what step {k} must deliver, and how to check it"),
                assignee: "default".to_owned(),
                parents: if k == 0 {
                    Vec::new()
                } else {
                    vec![(k - 1) / 2]
                },
            })
            .collect(),
    }
}

fn fanout_apply<'a>(
    criterion: &mut Criterion,
    board_of: &dyn Fn(usize) -> anyhow::Result<&'a BenchBoard>,
) -> anyhow::Result<()> {
    let mut group = criterion.benchmark_group("fanout_apply");
    group.sample_size(20);
    for (size, children) in FANOUTS {
        let board = board_of(size)?;
        let store = RefCell::new(Store::open(&board.path).context("opening the board")?);
        let mut cleaner =
            Connection::open(&board.path).context("opening the board for clean-up")?;
        let plan = fanout_plan(children);
        // The previous iteration's root and children, removed before the next one begins.
        let leftovers: RefCell<Vec<String>> = RefCell::new(Vec::new());
        let failure = Failure::default();
        let id = BenchmarkId::new(format!("{}k", size / 1000), children);
        group.bench_with_input(id, &children, |b, _| {
            b.iter_batched(
                || {
                    fresh_root(&store, &mut cleaner, &leftovers)
                        .unwrap_or_else(|error| failure.note(error))
                },
                |root| {
                    let opts = ApplyOptions {
                        fence: None,
                        orchestrator: "default".to_owned(),
                        auto_promote: true,
                        author: "decomposer".to_owned(),
                        now_ms: now_ms(),
                    };
                    let applied = store.borrow_mut().apply_plan(&root, &plan, &opts);
                    match applied {
                        Ok(ApplyResult::Fanout { child_ids }) => {
                            let mut left = leftovers.borrow_mut();
                            left.push(root);
                            left.extend(child_ids);
                        }
                        Ok(other) => failure.note(anyhow::anyhow!(
                            "applying a {children}-child fan-out did {other:?}"
                        )),
                        Err(error) => failure.note(
                            anyhow::Error::new(error)
                                .context(format!("applying a {children}-child fan-out")),
                        ),
                    }
                },
                BatchSize::PerIteration,
            )
        });
        failure.into_result()?;
        remove_cards(&mut cleaner, &leftovers.borrow())?;
    }
    group.finish();
    Ok(())
}

/// The first error inside a timed closure, which cannot return one: the benchmark carries on
/// with a dummy value and fails once criterion hands control back.
#[derive(Default)]
struct Failure(RefCell<Option<anyhow::Error>>);

impl Failure {
    fn note<T: Default>(&self, error: anyhow::Error) -> T {
        self.0.borrow_mut().get_or_insert(error);
        T::default()
    }

    fn into_result(self) -> anyhow::Result<()> {
        match self.0.into_inner() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }
}

/// Removes what the previous iteration added and creates the triage card the next one
/// decomposes (untimed).
fn fresh_root(
    store: &RefCell<Store>,
    cleaner: &mut Connection,
    leftovers: &RefCell<Vec<String>>,
) -> anyhow::Result<String> {
    remove_cards(cleaner, &leftovers.borrow())?;
    leftovers.borrow_mut().clear();
    let card = store
        .borrow_mut()
        .create_task(&NewTask {
            title: "a card worth splitting".to_owned(),
            body: Some("several independent steps".to_owned()),
            triage: true,
            ..NewTask::default()
        })
        .context("creating the card to decompose")?;
    Ok(card.id)
}

fn ledger_row(criterion: &mut Criterion, board: &BenchBoard) -> anyhow::Result<()> {
    let store = RefCell::new(Store::open(&board.path).context("opening the board")?);
    let cleaner = Connection::open(&board.path).context("opening the board for clean-up")?;
    let task_id = board::task_id(0);
    let mut group = criterion.benchmark_group("ledger");
    group.sample_size(30);
    let failure = Failure::default();
    let opened: RefCell<Vec<i64>> = RefCell::new(Vec::new());
    group.bench_function("record_one_row", |b| {
        b.iter_batched(
            || {
                // Keep the rolling hour at the board's own count, as the ceiling keeps it on a
                // real board, instead of letting the benchmark fill the ledger.
                for id in opened.borrow_mut().drain(..) {
                    if let Err(error) =
                        cleaner.execute("DELETE FROM hermes_aux_ledger WHERE id = ?1", [id])
                    {
                        failure.note::<()>(anyhow::Error::new(error));
                    }
                }
            },
            |()| {
                let started = now_ms();
                let open = LedgerOpen {
                    fence: None,
                    model: None,
                    task_id: task_id.clone(),
                    origin: Origin::Gateway,
                    attempt: 1,
                    try_no: 1,
                    started_at_ms: started,
                    guards: None,
                };
                let mut store = store.borrow_mut();
                let recorded = store.ledger_open(&open).and_then(|id| {
                    let id = id.map_err(|refusal| StoreError::Invalid(refusal.to_string()))?;
                    opened.borrow_mut().push(id);
                    store.ledger_close(
                        id,
                        &LedgerClose {
                            ended_at_ms: started + 1,
                            outcome: LedgerOutcome::Ok,
                            http_status: Some(200),
                            prompt_tokens: Some(100),
                            completion_tokens: Some(250),
                            detail: None,
                        },
                    )
                });
                if let Err(error) = recorded {
                    failure.note::<()>(anyhow::Error::new(error).context("recording a row"));
                }
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
    failure.into_result()
}
