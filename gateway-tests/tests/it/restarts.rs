//! The budget lives on the board, not in the gateway's memory: restarts (graceful, or SIGKILL in
//! the middle of a paid call) never start a poison card's billing over, and a SIGKILL while a
//! graph is being written leaves all of it or none of it.

use std::time::{Duration, Instant};

use fixtures::target::current_target;
use judge::prelude::*;
use nix::sys::signal::Signal;
use rstest::rstest;

use crate::support::no_graph_findings;
use crate::{DEFAULT_MAX_CHILDREN, MAX_FAILED_ATTEMPTS, PROBE_TICKS, SHORT_BACKOFF};

/// How long the provider holds a poison card's call before failing it: far longer than it takes
/// the test to kill the gateway once the call arrived, so the kill lands mid-call.
const SLOW_FAILURE: Duration = Duration::from_secs(30);

/// Children of the graph written while the gateway is killed, on a target whose child cap the
/// test can raise: many, so that a writer that is not atomic would leave a wide window of
/// partial rows. Elsewhere the graph stays within the contract's cap.
const BIG_GRAPH: usize = 48;

/// How often the board is looked at while waiting for the first trace of the graph.
const TIGHT_POLL: Duration = Duration::from_millis(1);

fn slow_failure() -> Reply {
    Reply::http_error(500, "upstream exploded").delayed(SLOW_FAILURE)
}

#[rstest]
fn poison_card_budget_survives_restarts_and_sigkill_mid_call(
    // A short backoff, so that each run of a target that reads it reaches the card's next
    // attempt at once: only the budget can stop the billing.
    #[with(Config::gateway().backoff(SHORT_BACKOFF))] board: Board,
) {
    let aux = board.aux();
    let poison = board.create("an idea the decomposer can never split", &["--triage"]);
    aux.reply(&poison, slow_failure());
    let over_budget = || aux.billed_for(&poison) > MAX_FAILED_ATTEMPTS;

    // Run 1 dies by SIGKILL while its first paid call is in flight.
    let mut run = board.scenario();
    run.start();
    let mut runs = 1;
    run.first_bill(&poison);
    if run.ok() {
        let crash = run.kill9();
        assert_eq!(crash.signal, Some(Signal::SIGKILL as i32), "{crash}");

        // Run 2 is stopped by SIGTERM while its paid call is in flight, if it makes one: a
        // target that backs off longer than the wait below simply has no call to interrupt.
        run.restart();
        runs += 1;
        let second_call = try_wait_until(
            || !run.running() || aux.billed_for(&poison) >= 2,
            board.target().first_bill_timeout(),
            "a second paid call for the poison card",
        );
        if second_call.is_err() {
            run.note("run 2 made no call to interrupt");
        }
        run.restart();
        runs += 1;

        // Run 3: the provider now fails at once; the card spends whatever budget it has left.
        aux.reply(&poison, Reply::http_error(500, "upstream exploded"));
        run.prove_ticks(PROBE_TICKS);

        // Run 4, after a graceful restart with nothing in flight (pointless once over budget).
        if run.ok() && !over_budget() {
            run.restart();
            runs += 1;
            run.prove_ticks(PROBE_TICKS);
        }
    }
    let bills = aux.billed_for(&poison);
    let seen = run.stop();

    bound("bills for poison card across runs", bills)
        .at_most(MAX_FAILED_ATTEMPTS)
        .over(&seen)
        .note(|| {
            format!(
                "{runs} gateway runs, one SIGKILLed and one SIGTERMed mid-call; status={}",
                board.rows().status(&poison)
            )
        })
        .context(|| board.diag(&poison))
        .gap(GapKind::BudgetNotPersisted);
    no_graph_findings(&board, &poison)
        .verdict("failed decomposition wrote no rows")
        .context(|| board.diag(&poison))
        .gap(GapKind::FailureWroteRows);
}

#[rstest]
fn sigkill_while_a_graph_is_written_leaves_all_children_or_none() {
    // A fan-out past the contract's cap is valid only where the cap can be raised.
    let graph = if Config::reads(current_target(), Setting::MaxChildren) {
        BIG_GRAPH
    } else {
        DEFAULT_MAX_CHILDREN
    };
    let board = Board::new(Config::gateway().max_children(BIG_GRAPH as u32));
    let aux = board.aux();
    let root = board.create("a large feature", &["--triage"]);
    aux.reply(&root, Reply::graph(graph, &[(1, &[0]), (graph - 1, &[1])]));

    let mut run = board.scenario();
    run.start().first_bill(&root);
    // Kill at the first trace of the graph a reader can see: a writer that commits child by
    // child is caught with part of it written; an atomic one shows all of it at once.
    let deadline = Instant::now() + board.target().first_bill_timeout();
    while run.ok()
        && !board.rows().decomposition_visible(&root)
        && run.running()
        && Instant::now() < deadline
    {
        std::thread::sleep(TIGHT_POLL);
    }
    if let Some(exit) = run.exit() {
        let tail = run.tail();
        run.interrupt(
            Interruption::new(format!("gateway exited ({exit}) before it was killed"))
                .implying(GapKind::GatewayExited)
                .with_detail(tail),
        );
    } else {
        let crash = run.kill9();
        assert_eq!(crash.signal, Some(Signal::SIGKILL as i32), "{crash}");
    }

    let rows = board.rows();
    let children = rows.children_of(&root).len();
    let status = rows.status(&root);
    let decomposed = rows.events(&root, "decomposed").len();
    let task_rows = board.task_count();
    let nothing = children == 0 && status == "triage" && decomposed == 0 && task_rows == 1;
    let everything =
        children == graph && status != "triage" && decomposed == 1 && task_rows == 1 + graph;
    holds("SIGKILL left all children or none", nothing || everything)
        .note(|| {
            format!(
                "{children} of {graph} children linked, {task_rows} task rows, root \
                 status={status}, {decomposed} decomposed events"
            )
        })
        .context(|| board.diag(&root))
        .gap(GapKind::PartialGraph);

    // Whatever the kill left, a restarted gateway pays for the root at most once more, and never
    // again once its graph is written.
    run.restart();
    run.prove_ticks(2);
    let bills = aux.billed_for(&root);
    let seen = run.stop();
    bound("bills for root killed while written", bills)
        .at_most(if everything { 1 } else { 2 })
        .over(&seen)
        .context(|| board.diag(&root))
        .gap(GapKind::RebilledAfterDecompose);
    Findings::new()
        .equal(
            "children after the restart",
            &rows.children_of(&root).len(),
            &graph,
        )
        .equal(
            "task rows (root + children + tick probes)",
            &board.task_count(),
            &(1 + graph + seen.window.probes().len()),
        )
        .verdict("the graph is whole after the restart")
        .context(|| board.diag(&root))
        .gap(GapKind::PartialGraph);
}
