//! The board is one file, as people and their tools treat it: a copy of `kanban.db` alone made
//! after a clean stop (a backup, rsync, a sync tool, restored later) is the whole board, so a
//! gateway started on the copy pays for nothing it had paid for; and `kanban.db-wal` /
//! `kanban.db-shm` swapped under a running gateway (a sync or restore tool replacing them with a
//! copy, a person deleting the WAL) lose nothing a CLI call acknowledged and turn no lost record
//! into a re-bill.

use std::path::{Path, PathBuf};
use std::time::Duration;

use fixtures::ticks::Window;
use judge::prelude::*;
use rstest::rstest;

use crate::support::spend_budget;
use crate::{MAX_FAILED_ATTEMPTS, PROBE_TICKS, SHORT_BACKOFF};

/// `kanban.db` with `suffix` (`-wal`, `-shm`) beside it.
pub fn board_part(board: &Board, suffix: &str) -> PathBuf {
    let mut path = board.rows().path().to_path_buf().into_os_string();
    path.push(suffix);
    PathBuf::from(path)
}

/// The cards a gateway ran on before it stopped: one that can never be decomposed (it spends its
/// budget and is parked where budgets exist), and one decomposed.
pub struct StoppedRun {
    pub poison: String,
    pub decomposed: String,
    /// Paid calls for the poison card before the stop.
    pub poison_bills: usize,
    pub window: Window,
}

/// Runs a gateway on `board` until its poison card has spent its budget (or the target's time
/// for that is up) and a fresh card is decomposed, then stops it with SIGTERM.
pub fn run_and_stop(board: &Board) -> StoppedRun {
    let aux = board.aux();
    let poison = board.create("an idea the decomposer can never split", &["--triage"]);
    aux.reply(&poison, Reply::malformed());
    let decomposed = board.create("an idea split at once", &["--triage"]);
    let mut run = board.scenario();
    run.start().first_bill(&poison);
    spend_budget(&mut run, &poison);
    run.until_left_triage(&decomposed, "the fresh card decomposed");
    // Whatever its exit code, a gateway that handled SIGTERM stopped by itself; one that had
    // to be killed did not get to close its board.
    let seen = run.stop();
    let stop = *seen.stopped();
    let mut window = seen.window;
    if stop.escalated {
        window.interrupt(
            Interruption::new(format!(
                "the gateway ignored SIGTERM and was killed: {stop:?}"
            ))
            .implying(GapKind::SlowShutdown),
        );
    }
    StoppedRun {
        poison_bills: aux.billed_for(&poison),
        poison,
        decomposed,
        window,
    }
}

#[rstest]
fn a_copy_of_kanban_db_alone_after_a_clean_stop_is_the_whole_board(
    #[with(Config::gateway().backoff(SHORT_BACKOFF))] board: Board,
) {
    let run = run_and_stop(&board);
    let at_the_stop = cards_of(&board);
    // A CLI verb after the stop: its clean exit too must leave kanban.db whole.
    let after_stop = board.create("an idea written down after the stop", &[]);
    let restored = Board::new(Config::gateway().backoff(SHORT_BACKOFF));
    restored.restore_board_file_from(&board);
    let in_the_copy = cards_of(&restored);
    let aux = restored.aux();
    aux.reply(&run.poison, Reply::malformed());

    let mut on_the_copy = restored.scenario().continuing(run.window);
    on_the_copy.start().prove_ticks(PROBE_TICKS);
    let rebilled = aux.billed_for(&run.poison);
    let decomposed_rebilled = aux.billed_for(&run.decomposed);
    let seen = on_the_copy.stop();

    let missing: Vec<&(String, String)> = at_the_stop
        .iter()
        .filter(|card| !in_the_copy.contains(card))
        .collect();
    bound(
        "cards (id and status) the gateway left, missing from a copy of kanban.db alone",
        missing.len(),
    )
    .at_most(0)
    .over(&seen)
    .note(|| format!("missing {missing:?}; the copy holds {in_the_copy:?}"))
    .gap(GapKind::BudgetNotPersisted);
    holds(
        "a card created by a CLI call after the stop is in a copy of kanban.db alone",
        in_the_copy.iter().any(|(id, _)| *id == after_stop),
    )
    .note(|| format!("the copy holds {in_the_copy:?}"))
    .gap(GapKind::BudgetNotPersisted);
    holds(
        "the copy holds the decomposition made before the stop",
        restored
            .rows()
            .find_task(&run.decomposed)
            .is_some_and(|task| !task.in_triage()),
    )
    .over(&seen)
    .context(|| restored.diag(&run.decomposed))
    .gap(GapKind::BudgetNotPersisted);
    bound(
        "bills for the decomposed card on the copy",
        decomposed_rebilled,
    )
    .at_most(0)
    .over(&seen)
    .gap(GapKind::RebilledAfterDecompose);
    bound(
        "bills for the poison card across the run and its copy",
        run.poison_bills + rebilled,
    )
    .at_most(MAX_FAILED_ATTEMPTS)
    .over(&seen)
    .note(|| {
        format!(
            "{} before the stop, {rebilled} on the copy; status on the copy: {}",
            run.poison_bills,
            restored.rows().status(&run.poison)
        )
    })
    .context(|| restored.diag(&run.poison))
    .gap(GapKind::BudgetNotPersisted);
}

/// Every card of `board`: its id and status.
pub fn cards_of(board: &Board) -> Vec<(String, String)> {
    board
        .rows()
        .tasks()
        .into_iter()
        .map(|task| (task.id, task.status))
        .collect()
}

/// Replaces the file at `path` with a copy of itself, as a sync or restore tool does: the
/// same bytes under a new inode. A file that is not there is left alone.
pub fn replace_with_a_copy(path: &Path) {
    let staging = path.with_extension("sync-tmp");
    if std::fs::copy(path, &staging).is_ok() {
        if let Err(error) = std::fs::rename(&staging, path) {
            panic!(
                "cannot put the copy of {} in place: {error}",
                path.display()
            );
        }
    }
}

/// How often the WAL's files are swapped under the gateway, each swap followed by a card
/// created (and acknowledged) through the CLI.
const SWAPS: usize = 8;

/// How long each swap's card may take to be decomposed.
const SWAP_CARD_TIMEOUT: Duration = Duration::from_secs(20);

/// What swapping the WAL's files under a running gateway left: the cards the CLI acknowledged,
/// and the poison card's bills.
pub struct Swapped {
    pub acknowledged: Vec<String>,
    pub poison: String,
    /// The window, and how the restarted gateway stopped (its log included).
    pub seen: Seen,
}

/// Runs a gateway that keeps writing (a poison card spending its budget, cards decomposed),
/// swapping `kanban.db-shm` for a copy of itself and deleting `kanban.db-wal` in turns while
/// cards are created through the CLI; then restarts it, as a person would after such a day, and
/// stops it once the restarted gateway is proven ticking.
pub fn swap_wal_files_under_a_gateway(board: &Board) -> Swapped {
    let aux = board.aux();
    let poison = board.create("an idea the decomposer can never split", &["--triage"]);
    aux.reply(&poison, Reply::malformed());
    let mut run = board.scenario();
    run.start().first_bill(&poison);
    let mut acknowledged = Vec::new();
    for swap in 0..SWAPS {
        if !run.ok() {
            break;
        }
        let part = if swap % 2 == 0 { "-shm" } else { "-wal" };
        if part == "-wal" {
            // A file that is not there yet (a target without a WAL) is already deleted.
            let _ = std::fs::remove_file(board_part(board, part));
        } else {
            replace_with_a_copy(&board_part(board, part));
        }
        // A CLI call right after the WAL went may fail (exit 1, nothing acknowledged) while the
        // gateway's connection still maps the index of the log that is gone; the board must be
        // usable again within a few ticks, not stay stuck on I/O errors.
        let title = format!("created after swap {swap} ({part})");
        let mut refused = Vec::new();
        let mut created = None;
        let usable = try_wait_until(
            || {
                let output =
                    board.cli_unchecked(["kanban", "create", title.as_str(), "--triage", "--json"]);
                if output.success() {
                    created = output.json()["id"].as_str().map(str::to_owned);
                } else {
                    refused.push(output.stderr.clone());
                }
                created.is_some()
            },
            SWAP_CARD_TIMEOUT,
            format!("a card created through the CLI after swap {swap} ({part})"),
        );
        let Some(card) = created else {
            run.interrupt(
                Interruption::new(format!(
                    "{usable:?}: the board stayed unusable after swap {swap} ({part})"
                ))
                .implying(GapKind::DispatcherBlocked)
                .with_detail(refused.join("\n")),
            );
            break;
        };
        acknowledged.push(card.clone());
        run.left_triage(
            std::slice::from_ref(&card),
            SWAP_CARD_TIMEOUT,
            &format!("the card created after swap {swap} ({part}) decomposed"),
        );
    }
    spend_budget(&mut run, &poison);
    run.restart().prove_ticks(PROBE_TICKS);
    Swapped {
        acknowledged,
        poison,
        seen: run.stop(),
    }
}

#[rstest]
fn wal_files_swapped_under_the_gateway_lose_nothing_acknowledged(
    #[with(Config::gateway().backoff(SHORT_BACKOFF))] board: Board,
) {
    let swapped = swap_wal_files_under_a_gateway(&board);
    let bills = board.aux().billed_for(&swapped.poison);
    let seen = &swapped.seen;

    let rows = board.rows();
    let lost: Vec<&String> = swapped
        .acknowledged
        .iter()
        .filter(|card| rows.find_task(card).is_none())
        .collect();
    bound(
        "cards a CLI call acknowledged, missing after the restart",
        lost.len(),
    )
    .at_most(0)
    .over(seen)
    .note(|| format!("missing: {lost:?} of {}", swapped.acknowledged.len()))
    .gap(GapKind::BudgetNotPersisted);
    bound(
        "bills for the poison card across the swaps and a restart",
        bills,
    )
    .at_most(MAX_FAILED_ATTEMPTS)
    .over(seen)
    .context(|| board.diag(&swapped.poison))
    .gap(GapKind::BudgetNotPersisted);
    let stuck = swapped
        .acknowledged
        .iter()
        .filter(|card| rows.find_task(card).is_some_and(|task| task.in_triage()))
        .count();
    bound("cards created between swaps left in triage", stuck)
        .at_most(0)
        .over(seen)
        .gap(GapKind::DispatcherBlocked);
    let most = swapped
        .acknowledged
        .iter()
        .map(|card| board.aux().billed_for(card))
        .max()
        .unwrap_or(0);
    // A WAL deleted right after a commit that no checkpoint had copied yet (a reader of the
    // board held the checkpoint back) takes that commit with it: the card's applied reply can be
    // lost once, and the card billed once more. Never more: the next swap waits for the card.
    bound("most bills for one card created between swaps", most)
        .at_most(2)
        .over(seen)
        .gap(GapKind::RebilledAfterDecompose);
}
