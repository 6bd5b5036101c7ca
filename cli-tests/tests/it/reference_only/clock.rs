//! Rows a clock that ran ahead left dated in the future, as the CLI's recovery verbs answer them
//! once the clock is corrected: `kanban resume` re-dates them to now (saying so on stderr) and
//! lifts the pause, and the card whose backoff was dated a day ahead is swept again within its
//! own wait.

use std::time::Duration;

use fixtures::faketime::{sweep_a_day_ahead, DatedAhead};
use fixtures::rows::unix_ms_ago;
use judge::prelude::*;
use rstest::rstest;

#[rstest]
fn resume_redates_rows_dated_ahead_and_says_so(
    #[with(Config::plain().cooldown(900.0).backoff(0.05).retries(0))] board: Board,
) {
    let aux = board.aux();
    let DatedAhead {
        failed,
        refused,
        sweep: sweep_ahead,
    } = sweep_a_day_ahead(&board);
    let paused_before = board.cli_json(["kanban", "usage", "--json"])["pause"].clone();

    let resume = board.cli_unchecked(["kanban", "resume", "--json"]);
    aux.reply(&failed, Reply::default_single());
    aux.reply(&refused, Reply::default_single());
    let due: Vec<i64> = [&failed, &refused]
        .iter()
        .filter_map(|card| board.rows().decompose_state(card))
        .filter_map(|state| state.columns["due_at_ms"].as_i64())
        .collect();
    let now = unix_ms_ago(Duration::ZERO);
    let latest = due.iter().copied().max().unwrap_or(i64::MAX);
    // The cards' own backoff is 50 ms: the sweep runs once it has passed.
    let _ = try_wait_until(
        || unix_ms_ago(Duration::ZERO) > latest,
        Duration::from_secs(5),
        "the cards' own backoff to pass",
    );
    let sweep = board.cli_unchecked(["kanban", "decompose", "--all", "--json"]);

    holds(
        "the sweep a day ahead paused the board",
        !paused_before.is_null(),
    )
    .context(|| sweep_ahead.to_string())
    .gap(GapKind::ProviderFaultNotPaused);
    Findings::new()
        .equal("exit code of `kanban resume`", &resume.code, &Some(0))
        .that(
            resume.stderr.contains("re-dated")
                && resume.stderr.contains("ledger row(s)")
                && resume.stderr.contains("card schedule(s)"),
            || "`kanban resume` says it re-dated the rows dated in the future".to_owned(),
        )
        .equal(
            "resumed",
            &resume.json()["resumed"],
            &serde_json::json!(true),
        )
        .verdict("`kanban resume` re-dates rows dated ahead and lifts the pause")
        .context(|| resume.to_string())
        .gap(GapKind::RecoveryFailed);
    bound(
        "longest wait left on a card after `kanban resume`, in ms",
        u64::try_from(latest.saturating_sub(now)).unwrap_or(0),
    )
    .at_most(60_000u64)
    .note(|| format!("due at {due:?} (ms), now {now}"))
    .gap(GapKind::RecoveryFailed);
    bound(
        "cards a sweep after the correction left waiting",
        [&failed, &refused]
            .iter()
            .filter(|card| board.rows().status(card) == "triage")
            .count(),
    )
    .at_most(0)
    .context(|| format!("{sweep}\n{}\n{}", board.diag(&failed), board.diag(&refused)))
    .gap(GapKind::RecoveryFailed);
}
