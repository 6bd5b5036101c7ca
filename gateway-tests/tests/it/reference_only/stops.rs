//! SIGTERM ends the gateway within the contract's 5 s whatever the disk does (§6): here another
//! process holds the board's write lock for longer than the shutdown's grace while an attempt is
//! in flight, so the attempt's end cannot be recorded and the WAL cannot be folded in. The
//! gateway stops anyway, and leaves nothing half-written: SQLite's transactions are whole or
//! absent, and the attempt's ledger row, still in flight, is closed at the next start.

use std::time::Duration;

use judge::prelude::*;
use rstest::rstest;

use crate::support::{no_graph_findings, stop_note};

/// The contract's bound on a SIGTERM'd gateway's exit.
const SIGTERM_BOUND: Duration = Duration::from_secs(5);

/// Longer than the test: the provider never answers on its own.
const HANG: Duration = Duration::from_secs(600);

#[rstest]
fn sigterm_ends_the_gateway_within_5_s_while_the_board_is_locked_by_another_process(
    #[with(Config::gateway().call_timeout(300.0).retries(0))] board: Board,
) {
    let aux = board.aux();
    let card = board.create(
        "in flight while another process locks the board",
        &["--triage"],
    );
    aux.reply(&card, Reply::hang(HANG));
    let mut run = board.scenario();
    run.start().first_bill(&card);
    // Another process's write transaction, held past the gateway's grace (and its own 5 s busy
    // wait): every write of the gateway waits on it.
    let lock = board.rows().hold_write_lock();
    let seen = run.stop();
    let stop = *seen.stopped();
    drop(lock);
    // The next start closes the attempt the stopped gateway could not record.
    let mut restarted = board.scenario();
    restarted.start().prove_ticks(1);
    let restarted = restarted.stop();
    let outcomes: Vec<String> = board
        .rows()
        .ledger(&card)
        .iter()
        .map(|row| row.outcome.clone())
        .collect();

    holds(
        "SIGTERM ends the gateway cleanly within 5 s while another process holds the board's \
         write lock",
        stop.clean() && stop.elapsed <= SIGTERM_BOUND,
    )
    .note(|| stop_note(&stop))
    .gap(GapKind::SlowShutdown);
    no_graph_findings(&board, &card)
        .equal(
            "the attempt's ledger rows",
            &outcomes,
            &vec!["unknown".to_owned()],
        )
        .verdict("nothing half-written, and the attempt closed as `unknown` at the next start")
        .context(|| format!("{}\n{}", restarted.log(), board.diag(&card)))
        .gap(GapKind::FailureWroteRows);
}
