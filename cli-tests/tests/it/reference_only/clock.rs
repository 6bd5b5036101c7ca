//! Rows a clock that ran ahead recorded, as the CLI's recovery verbs answer them once the clock
//! is right again (contract §7, "Time"): on the same boot they are read by the boot's clock, so
//! `kanban resume` lifts the pause they set and nothing needs re-dating, the rows keep the wall
//! times they were recorded with, and the card whose backoff began on that clock is swept again
//! within its own wait.

use std::time::Duration;

use fixtures::faketime::{sweep_a_day_ahead, DatedAhead};
use fixtures::rows::unix_ms_ago;
use judge::prelude::*;
use rstest::rstest;

#[rstest]
fn rows_a_clock_ahead_recorded_wait_only_their_own_wait_and_are_never_rewritten(
    #[with(Config::plain().cooldown(900.0).backoff(0.05).retries(0))] board: Board,
) {
    let aux = board.aux();
    let DatedAhead {
        failed,
        refused,
        sweep: sweep_ahead,
    } = sweep_a_day_ahead(&board);
    let paused_before = board.cli_json(["kanban", "usage", "--json"])["pause"].clone();
    let recorded = |card: &str| -> Vec<i64> {
        board
            .rows()
            .ledger(card)
            .iter()
            .filter_map(|row| row.columns["started_at_ms"].as_i64())
            .collect()
    };
    let ahead: Vec<i64> = [&failed, &refused]
        .iter()
        .flat_map(|c| recorded(c))
        .collect();

    let resume = board.cli_unchecked(["kanban", "resume", "--json"]);
    aux.reply(&failed, Reply::default_single());
    aux.reply(&refused, Reply::default_single());
    // The cards' own backoff is 50 ms, by the boot's clock: it has passed by now, whatever the
    // wall times of the rows say; a sweep on the right clock picks both.
    let sweep = board.cli_unchecked(["kanban", "decompose", "--all", "--json"]);
    let now = unix_ms_ago(Duration::ZERO);

    holds(
        "the sweep a day ahead paused the board and dated its rows a day ahead",
        !paused_before.is_null()
            && ahead.len() == 2
            && ahead.iter().all(|at| *at > now + 3_600_000),
    )
    .note(|| format!("pause {paused_before}; rows started at {ahead:?} (ms), now {now}"))
    .context(|| sweep_ahead.to_string())
    .gap(GapKind::ProviderFaultNotPaused);
    Findings::new()
        .equal("exit code of `kanban resume`", &resume.code, &Some(0))
        .equal(
            "resumed",
            &resume.json()["resumed"],
            &serde_json::json!(true),
        )
        .that(!resume.stderr.contains("re-dated"), || {
            "`kanban resume` re-dates nothing: the rows are read by the boot's clock".to_owned()
        })
        .verdict("`kanban resume` lifts the pause a clock a day ahead recorded")
        .context(|| resume.to_string())
        .gap(GapKind::RecoveryFailed);
    bound(
        "cards a sweep on the right clock left waiting, their own waits over",
        [&failed, &refused]
            .iter()
            .filter(|card| board.rows().status(card) == "triage")
            .count(),
    )
    .at_most(0)
    .context(|| format!("{sweep}\n{}\n{}", board.diag(&failed), board.diag(&refused)))
    .gap(GapKind::RecoveryFailed);
    // Each card's first row is the one the clock ahead recorded.
    let after: Vec<i64> = [&failed, &refused]
        .iter()
        .filter_map(|c| recorded(c).first().copied())
        .collect();
    holds(
        "the rows keep the wall times the clock ahead recorded",
        after == ahead,
    )
    .note(|| format!("before {ahead:?}, after {after:?}"))
    .gap(GapKind::CallNotVisible);
}
