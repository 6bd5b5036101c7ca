//! What the reference's own records keep when the board is handled as one file: a copy of
//! `kanban.db` alone after a clean stop holds every paid call and the parked budget; with
//! `-wal`/`-shm` swapped under the gateway every request still has its ledger row, and the
//! gateway says what happened (one WARN per swap noticed).

use judge::prelude::*;
use rstest::rstest;

use crate::one_file::{run_and_stop, swap_wal_files_under_a_gateway};
use crate::{MAX_FAILED_ATTEMPTS, SHORT_BACKOFF};

#[rstest]
fn a_copy_of_kanban_db_alone_holds_every_paid_call_and_the_parked_budget(
    #[with(Config::gateway().backoff(SHORT_BACKOFF))] board: Board,
) {
    let run = run_and_stop(&board);
    let restored = Board::new(Config::gateway().backoff(SHORT_BACKOFF));
    restored.restore_board_file_from(&board);
    let rows = restored.rows();

    bound(
        "ledger rows of the poison card in the copy",
        rows.ledger(&run.poison).len(),
    )
    .exactly(run.poison_bills)
    .over(&run.window)
    .context(|| restored.diag(&run.poison))
    .gap(GapKind::CallNotVisible);
    let state = rows.decompose_state(&run.poison);
    Findings::new()
        .equal(
            "attempts counted",
            &state.as_ref().map(|s| s.attempts),
            &Some(MAX_FAILED_ATTEMPTS as i64),
        )
        .equal("parked", &state.as_ref().map(|s| s.parked), &Some(true))
        .verdict("the copy keeps the poison card's spent budget")
        .over(&run.window)
        .context(|| restored.diag(&run.poison))
        .gap(GapKind::BudgetNotPersisted);
}

#[rstest]
fn wal_files_swapped_under_the_gateway_keep_every_paid_call_and_are_warned_about(
    #[with(Config::gateway().backoff(SHORT_BACKOFF))] board: Board,
) {
    let swapped = swap_wal_files_under_a_gateway(&board);
    let log = swapped.seen.log();
    let aux = board.aux();
    let rows = board.rows();
    let cards: Vec<&String> = std::iter::once(&swapped.poison)
        .chain(&swapped.acknowledged)
        .collect();
    let unrecorded: Vec<(String, usize, usize)> = cards
        .iter()
        .map(|card| {
            (
                card.to_string(),
                aux.billed_for(card),
                rows.ledger(card).len(),
            )
        })
        .filter(|(_, bills, rows)| bills != rows)
        .collect();
    bound(
        "cards whose requests and ledger rows differ after the swaps",
        unrecorded.len(),
    )
    .at_most(0)
    .over(&swapped.seen)
    .note(|| format!("(card, requests, ledger rows): {unrecorded:?}"))
    .gap(GapKind::CallNotVisible);

    let warned = |part: &str| {
        log.lines()
            .filter(|line| line.contains(" WARN ") && line.contains(&format!("{part} was")))
            .count()
    };
    for part in ["kanban.db-shm", "kanban.db-wal"] {
        let count = warned(part);
        holds(
            format!("the gateway warned that {part} was swapped, at most once per swap"),
            (1..=swapped.acknowledged.len()).contains(&count),
        )
        .over(&swapped.seen)
        .note(|| format!("{count} WARN lines naming {part}"))
        .context(|| log.clone())
        .gap(GapKind::CallNotVisible);
    }
}

/// A board moved to another home while its gateway runs (`mv`, a restore elsewhere): the first
/// gateway creates no empty board at the old path and dispatches nothing there, and it lets go
/// of the moved file, so a gateway in the new home dispatches the board.
#[rstest]
fn a_board_moved_to_another_home_is_dispatched_there_and_not_recreated_here(
    #[with(Config::gateway())] board: Board,
) {
    use std::time::Duration;

    use fixtures::gateway::{Gateway, GatewaySpec};
    use fixtures::target::Readiness;

    let target = board.target();
    let mut run = board.scenario();
    run.start().prove_ticks(1);
    let home = fixtures::home::Home::new();
    match std::fs::read_to_string(board.config_path()) {
        Ok(config) => home.write_config(&config),
        Err(error) => panic!("cannot read {}: {error}", board.config_path().display()),
    }
    let old = board.rows().path().to_owned();
    for suffix in ["", "-wal", "-shm"] {
        let from = std::path::PathBuf::from(format!("{}{suffix}", old.display()));
        let to = std::path::PathBuf::from(format!("{}{suffix}", home.db_path().display()));
        if from.exists() {
            if let Err(error) = std::fs::rename(&from, &to) {
                panic!(
                    "cannot move {} to {}: {error}",
                    from.display(),
                    to.display()
                );
            }
        }
    }
    // Ticks pass on the first gateway with nothing at its board's path.
    run.watch(crate::support::span_of_ticks(target, crate::PROBE_TICKS));
    let recreated = old.exists();
    let second = Gateway::spawn(
        GatewaySpec::new(
            target.program(),
            target.argv(["gateway", "run"]),
            home.root(),
            &home.root().join("moved-home-gateway.log"),
        )
        .env(fixtures::env::for_target(&home, target))
        .readiness(Readiness::Immediate, Duration::ZERO),
    );
    let created = board.cli_with_env(
        [
            "kanban",
            "create",
            "an idea on the moved board",
            "--triage",
            "--json",
        ],
        fixtures::env::for_target(&home, target),
    );
    let card = created.json()["id"].as_str().unwrap_or_default().to_owned();
    let moved = fixtures::rows::Rows::new(home.db_path());
    let dispatched = try_wait_until(
        || moved.status(&card) != "triage",
        target.first_bill_timeout() + target.tick_interval() * 2,
        "the gateway in the new home to decompose a card of the moved board",
    );
    let second_log = second.log();
    drop(second);
    let seen = run.stop();
    let log = seen.log();

    holds(
        "no board is created at the old path while its gateway runs",
        !recreated && !old.exists(),
    )
    .over(&seen)
    .context(|| log.clone())
    .gap(GapKind::RowsUnreadable);
    holds(
        "the gateway in the new home dispatches the moved board",
        dispatched.is_ok(),
    )
    .note(|| format!("{created}"))
    .context(|| format!("first gateway:\n{log}\nsecond gateway:\n{second_log}"))
    .gap(GapKind::SecondDispatcher);
    holds(
        "the first gateway says its board is gone from its path",
        log.contains("kanban.db is gone from"),
    )
    .context(|| log.clone())
    .gap(GapKind::UnclearRefusal);
}
