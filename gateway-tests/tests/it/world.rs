//! The world misbehaving around a running gateway: its log pipe closes, its board cannot be
//! written (a full disk), its board file is deleted or replaced. None of it stops the dispatcher
//! or makes it pay for what it cannot record.

use fixtures::gateway::GatewaySpec;
use fixtures::limits::set_file_size_limit;
use judge::prelude::*;
use rstest::rstest;

use crate::support::span_of_ticks;
use crate::PROBE_TICKS;

#[rstest]
fn a_closed_log_pipe_stops_neither_dispatching_nor_a_clean_shutdown(
    #[with(Config::gateway())] board: Board,
) {
    let aux = board.aux();
    let mut run = board.scenario().with_spec(GatewaySpec::log_through_pipe);
    // A decomposed probe shows the gateway up and logging before its reader goes away.
    run.start().prove_ticks(1);
    run.close_log_pipe();
    let card = board.create("a card nobody's log will mention", &["--triage"]);
    run.until_left_triage(
        &card,
        "a card created after the log pipe closed, decomposed",
    )
    .prove_ticks(1);
    let bills = aux.billed_for(&card);
    let seen = run.stop();
    let stop = seen.stopped();

    bound("bills for a card created after the log pipe closed", bills)
        .exactly(1)
        .over(&seen)
        .context(|| board.diag(&card))
        .gap(GapKind::DispatcherBlocked);
    holds(
        "a gateway that lost its log pipe stops cleanly on SIGTERM",
        stop.clean(),
    )
    .note(|| {
        format!(
            "took {:.1}s, exit code {:?}, signal {:?}, escalated to SIGKILL: {}",
            stop.elapsed.as_secs_f64(),
            stop.exit_code,
            stop.signal,
            stop.escalated
        )
    })
    .gap(GapKind::SlowShutdown);
}

/// What a file size limit of one byte leaves writable of a board: nothing.
const NO_ROOM: Option<u64> = Some(1);

#[rstest]
fn a_board_the_gateway_cannot_write_costs_nothing_until_it_can(
    #[with(Config::gateway())] board: Board,
) {
    let target = board.target();
    let aux = board.aux();
    // The log goes through a pipe, which the file size limit does not touch.
    let mut run = board
        .scenario()
        .with_spec(|spec| spec.log_through_pipe().ignore_file_size_signal());
    run.start().prove_ticks(1);
    if let Err(error) = set_file_size_limit(run.pid(), NO_ROOM) {
        panic!("{error}");
    }
    // Written by the CLI, which has no limit: only the gateway cannot write.
    let card = board.create("waits for disk space", &["--triage"]);
    // Nothing can be recorded, so nothing may be decomposed: the watch spans ticks by the clock,
    // between the probe above and the card decomposed once the board can be written again.
    run.watch(span_of_ticks(target, PROBE_TICKS));
    let bills_while_full = aux.billed_for(&card);
    if let Err(error) = set_file_size_limit(run.pid(), None) {
        panic!("{error}");
    }
    let window = run.close_window();
    run.until_left_triage(&card, "the card decomposed once the board can be written")
        .prove_ticks(1);
    let bills = aux.billed_for(&card);
    let writable = run.stop();

    bound(
        "requests for a card while the board cannot be written",
        bills_while_full,
    )
    .at_most(0)
    .over(&window)
    .context(|| board.diag(&card))
    .gap(GapKind::BudgetNotPersisted);
    holds(
        "the card is decomposed once the board can be written again",
        board.rows().status(&card) != "triage",
    )
    .over(&writable)
    .context(|| board.diag(&card))
    .gap(GapKind::DispatcherBlocked);
    bound("bills for the card in all", bills)
        .at_most(1)
        .over(&writable)
        .context(|| board.diag(&card))
        .gap(GapKind::BudgetNotPersisted);
}

/// Removes `kanban.db` and its WAL files, as a person clearing a board would.
fn remove_board_files(board: &Board) {
    let db = board.rows().path().to_path_buf();
    for suffix in ["", "-wal", "-shm"] {
        let mut path = db.clone().into_os_string();
        path.push(suffix);
        // A file that is not there (no WAL yet) is already what this wants.
        let _ = std::fs::remove_file(path);
    }
}

/// Moves `from`'s board into `to`'s place as a person would move any SQLite database in WAL
/// mode: the file together with its write-ahead log, which may hold its latest commits.
fn move_board_files(from: &Board, to: &Board) {
    for suffix in ["", "-wal"] {
        let with_suffix = |board: &Board| {
            let mut path = board.rows().path().to_path_buf().into_os_string();
            path.push(suffix);
            std::path::PathBuf::from(path)
        };
        let (source, destination) = (with_suffix(from), with_suffix(to));
        if suffix.is_empty() || source.exists() {
            if let Err(error) = std::fs::rename(&source, &destination) {
                panic!("cannot move {} into place: {error}", source.display());
            }
        }
    }
}

#[rstest]
fn a_board_file_replaced_under_the_gateway_is_served_at_its_path(
    #[with(Config::gateway())] board: Board,
) {
    let aux = board.aux();
    for invariant in [Invariant::Request, Invariant::Graph, Invariant::Ledger] {
        board.narrow_oracle(
            invariant,
            "the board file is deleted, then replaced by another board's, mid-run: calls and \
             rows of files no longer there, and a card another board's CLI made",
        );
    }
    let mut run = board.scenario();
    run.start().prove_ticks(1);

    // Deleted: the next command creates a fresh board at the same path.
    remove_board_files(&board);
    let recreated = board.create("a card on a recreated board", &["--triage"]);
    run.until_left_triage(&recreated, "the card on the recreated board decomposed");

    let recreated_served = board
        .rows()
        .try_task(&recreated)
        .is_some_and(|task| !task.in_triage());

    // Replaced: another board, written elsewhere, moved into place over the open one.
    let elsewhere = Board::new(Config::plain());
    let moved = elsewhere.create("a card on a board moved into place", &["--triage"]);
    remove_board_files(&board);
    move_board_files(&elsewhere, &board);
    run.until_left_triage(&moved, "the card on the board moved into place decomposed")
        .prove_ticks(1);
    let bills = [aux.billed_for(&recreated), aux.billed_for(&moved)];
    let seen = run.stop();

    let moved_served = board
        .rows()
        .try_task(&moved)
        .is_some_and(|task| !task.in_triage());
    let decomposed = usize::from(recreated_served) + usize::from(moved_served);
    bound("cards on a replaced board file decomposed", decomposed)
        .exactly(2)
        .over(&seen)
        .note(|| {
            format!(
                "bills: recreated board {}, moved board {}",
                bills[0], bills[1]
            )
        })
        .context(|| format!("{}\n{}", board.diag(&recreated), board.diag(&moved)))
        .gap(GapKind::DispatcherBlocked);
    bound(
        "most bills for one card on a replaced board file",
        bills.iter().copied().max().unwrap_or(0),
    )
    .at_most(1)
    .over(&seen)
    .gap(GapKind::RebilledAfterDecompose);
}
