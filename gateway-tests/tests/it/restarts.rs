//! The budget lives on the board, not in the gateway's memory: restarts (graceful, or SIGKILL in
//! the middle of a paid call) never start a poison card's billing over, and a SIGKILL while a
//! graph is being written leaves all of it or none of it.

use std::time::{Duration, Instant};

use fixtures::observe;
use fixtures::prelude::*;
use nix::sys::signal::Signal;
use rstest::rstest;

use crate::support::{
    assert_no_graph, assert_running, await_bills, await_first_bill, gateway_config, start_gateway,
};
use crate::{MAX_FAILED_ATTEMPTS, PROBE_TICKS};

/// How long the provider holds a poison card's call before failing it: far longer than it takes
/// the test to kill the gateway once the call arrived, so the kill lands mid-call.
const SLOW_FAILURE: Duration = Duration::from_secs(30);

/// Children of the graph written while the gateway is killed: many, so that a writer that is
/// not atomic would leave a wide window of partial rows.
const BIG_GRAPH: usize = 48;

/// How often the board is looked at while waiting for the first trace of the graph.
const TIGHT_POLL: Duration = Duration::from_millis(1);

fn slow_failure() -> Reply {
    Reply::http_error(500, "upstream exploded").delayed(SLOW_FAILURE)
}

#[rstest]
fn poison_card_budget_survives_restarts_and_sigkill_mid_call() {
    // A short backoff, so that each run reaches the card's next attempt at once: only the
    // budget can stop the billing.
    let board = Board::new(&gateway_config(
        "kanban:\n  decompose_backoff_seconds: 0.05\n",
    ));
    let aux = board.aux();
    let poison = board.create("an idea the decomposer can never split", &["--triage"]);
    aux.reply(&poison, slow_failure());
    let over_budget = || aux.billed_for(&poison) > MAX_FAILED_ATTEMPTS;

    // Run 1 dies by SIGKILL while its first paid call is in flight.
    let mut gateway = start_gateway(&board);
    let mut runs = 1;
    await_first_bill(&board, &gateway, &poison);
    let crash = gateway.kill9();
    assert_eq!(crash.signal, Some(Signal::SIGKILL as i32), "{crash}");

    // Run 2 is stopped by SIGTERM while its paid call is in flight.
    gateway.restart();
    runs += 1;
    await_bills(&board, &gateway, 2, || aux.billed_for(&poison), &poison);
    gateway.restart();
    runs += 1;

    // Run 3: the provider now fails at once; the card spends whatever budget it has left.
    aux.reply(&poison, Reply::http_error(500, "upstream exploded"));
    prove_ticks(&board, &gateway, PROBE_TICKS);

    // Run 4, after a graceful restart with nothing in flight (pointless once over budget).
    if !over_budget() {
        gateway.restart();
        runs += 1;
        prove_ticks(&board, &gateway, PROBE_TICKS);
    }
    let bills = aux.billed_for(&poison);
    drop(gateway);
    observe::record(
        "bills_for_poison_card_across_runs",
        bills,
        Some(MAX_FAILED_ATTEMPTS),
    );

    assert_no_graph(&board, &poison);
    known_gate("budget_across_restarts", || {
        if bills > MAX_FAILED_ATTEMPTS {
            return Err(Gap::new(
                GapKind::BudgetNotPersisted,
                format!(
                    "poison card billed {bills} aux decompose calls across {runs} gateway runs, \
                     one SIGKILLed and one SIGTERMed mid-call (bound {MAX_FAILED_ATTEMPTS}); \
                     status={}",
                    board.task(&poison).status
                ),
            ));
        }
        Ok(())
    });
}

/// Whether any trace of a decomposition of `root` is visible: a second task row, a link, or the
/// root out of triage. Unreadable counts as not yet.
fn graph_visible(board: &Board, root: &str) -> bool {
    board
        .try_query(
            "SELECT (SELECT COUNT(*) FROM tasks) > 1 \
                 OR EXISTS (SELECT 1 FROM task_links WHERE child_id = ?1) \
                 OR (SELECT status FROM tasks WHERE id = ?1) != 'triage' AS visible",
            [root],
        )
        .ok()
        .and_then(|rows| rows.first().and_then(|row| row.get("visible")?.as_i64()))
        == Some(1)
}

#[rstest]
fn sigkill_while_a_graph_is_written_leaves_all_children_or_none() {
    // The reference rejects fan-outs over its default eight children; this graph is valid on
    // purpose, so the limit is raised (other targets ignore the key).
    let board = Board::new(&gateway_config(&format!(
        "kanban:\n  decompose_max_children: {BIG_GRAPH}\n"
    )));
    let aux = board.aux();
    let root = board.create("a large feature", &["--triage"]);
    aux.reply(
        &root,
        Reply::graph(BIG_GRAPH, &[(1, &[0]), (BIG_GRAPH - 1, &[1])]),
    );

    let mut gateway = start_gateway(&board);
    await_first_bill(&board, &gateway, &root);
    // Kill at the first trace of the graph a reader can see: a writer that commits child by
    // child is caught with part of it written; an atomic one shows all of it at once.
    let deadline = Instant::now() + board.target().first_bill_timeout();
    while !graph_visible(&board, &root) && gateway.running() && Instant::now() < deadline {
        std::thread::sleep(TIGHT_POLL);
    }
    assert_running(&gateway);
    let crash = gateway.kill9();
    assert_eq!(crash.signal, Some(Signal::SIGKILL as i32), "{crash}");

    let children = board.children_of(&root);
    let status = board.task(&root).status;
    let decomposed = board.events(&root, "decomposed").len();
    let rows = board.task_count();
    let nothing = children.is_empty() && status == "triage" && decomposed == 0 && rows == 1;
    let everything = children.len() == BIG_GRAPH
        && status != "triage"
        && decomposed == 1
        && rows == 1 + BIG_GRAPH;
    assert!(
        nothing || everything,
        "SIGKILL left a partial graph: {} of {BIG_GRAPH} children linked, {rows} task rows, \
         root status={status}, {decomposed} decomposed events (bound: all or none)\n{}",
        children.len(),
        board.diag(&root)
    );

    // Whatever the kill left, a restarted gateway pays for the root at most once more, and never
    // again once its graph is written.
    gateway.restart();
    let probes = prove_ticks(&board, &gateway, 2);
    let bills = aux.billed_for(&root);
    drop(gateway);
    observe::record("bills_for_root_killed_while_written", bills, Some(1));
    if everything {
        assert_eq!(
            bills,
            1,
            "a written graph is never paid for again (bound 1)\n{}",
            board.diag(&root)
        );
    }
    let children = board.children_of(&root);
    assert_eq!(children.len(), BIG_GRAPH, "{}", board.diag(&root));
    assert_eq!(
        board.task_count(),
        1 + BIG_GRAPH + probes.len(),
        "{}",
        board.diag(&root)
    );
    assert!(
        bills <= 2,
        "billed {bills} times for one root\n{}",
        board.diag(&root)
    );
}
