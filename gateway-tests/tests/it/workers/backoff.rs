//! S3: after a charged run a card waits its spawn backoff (doubling per charged run) before its
//! next worker, and a failing card never takes the place of a fresh one.

use std::time::{Duration, Instant};

use judge::prelude::*;
use rstest::rstest;

use super::{ready_card, spawn_span, Worker};

/// The spawn backoff this test sets (the reference reads it; a target that reads no key for it
/// is held to the contract's 60 s).
const SPAWN_BACKOFF: f64 = 0.5;

#[rstest]
fn a_failing_card_waits_its_backoff_and_never_takes_a_fresh_cards_place(
    #[with(Config::workers(1).failure_limit(3).spawn_backoff(SPAWN_BACKOFF))] board: Board,
) {
    let aux = board.aux();
    let census = board.census();
    let failing = ready_card(&board, "a card whose workers crash");
    Worker::StandIn(Behaviour::Exits(1)).arrange(&board, &failing);

    let mut run = board.scenario();
    run.start().first_session(&failing);
    // A long worker takes the one slot while the failing card waits; a fresh card comes; once
    // the failing card is due again, the slot frees: the fresh card must have it.
    let holder = ready_card(&board, "a long piece of work");
    Worker::StandIn(Behaviour::Sleeps).arrange(&board, &holder);
    run.first_session(&holder);
    let fresh = ready_card(&board, "a fresh card");
    let fresh_created = Instant::now();
    let backoff = board
        .config()
        .in_force(board.target(), Setting::SpawnBackoff)
        .unwrap_or(60.0);
    let due = Duration::from_secs_f64(backoff.min(5.0)) + board.target().tick_interval();
    run.watch(due);
    // The slot frees when the test kills the long worker, or earlier if the target ended it
    // itself (a claim it reclaimed, say): from then on, with the fresh card waiting, the slot is
    // contested all the same.
    let killed = census.kill(&holder);
    let held_until = if killed > 0 {
        Some(Instant::now())
    } else {
        census
            .record()
            .groups_of(&holder)
            .map(|group| group.last_seen)
            .max()
    };
    let freed_at = held_until.map_or_else(Instant::now, |end| end.max(fresh_created));
    run.settle(
        spawn_span(&board).saturating_mul(2),
        "the fresh card's worker",
        || aux.sessions_for(&fresh) >= 1,
    )
    .settle(
        spawn_span(&board).saturating_mul(2) + Duration::from_secs_f64(backoff.min(5.0) * 3.0),
        "the failing card's third worker",
        || aux.sessions_for(&failing) >= 3,
    );
    let starts = aux.session_starts(&failing);
    // The freed slot is the fresh card's. A card whose last run was charged taking it first
    // (the failing card, or the long card whose worker was just killed), with the fresh card's
    // worker coming later or never, is the bug itself, not an unreached arrangement.
    let first_after = |card: &str| {
        aux.session_starts(card)
            .into_iter()
            .find(|start| *start >= freed_at)
    };
    let fresh_after = first_after(&fresh);
    let charged_after = [
        ("failing", first_after(&failing)),
        ("long", first_after(&holder)),
    ]
    .into_iter()
    .filter_map(|(which, start)| start.map(|at| (which, at)))
    .min_by_key(|(_, at)| *at);
    let seen = run.stop();

    let mut findings = Findings::new();
    for (index, pair) in starts.windows(2).enumerate() {
        let wait = pair[1].saturating_duration_since(pair[0]);
        // After the n-th charged run, base × 2ⁿ⁻¹; start to start is at least that.
        let owed = Duration::from_secs_f64(backoff * 2f64.powi(i32::try_from(index).unwrap_or(0)));
        findings = findings.that(wait >= owed, || {
            format!(
                "the failing card's worker {} came {:.2} s after the one before, not {:.2} s",
                index + 2,
                wait.as_secs_f64(),
                owed.as_secs_f64()
            )
        });
    }
    let arranged = match (held_until, fresh_after.or(charged_after.map(|(_, at)| at))) {
        (None, _) => Err("the long worker never held the slot".to_owned()),
        (_, None) => Err("no card got a worker after the slot freed".to_owned()),
        _ => Ok(()),
    };
    if let Some((which, taken)) = charged_after {
        findings = findings.that(fresh_after.is_some_and(|fresh| fresh <= taken), || {
            let fresh = fresh_after.map_or_else(
                || "the fresh card's worker never came".to_owned(),
                |fresh| {
                    let later = fresh.saturating_duration_since(taken).as_secs_f64();
                    format!("the fresh card's worker came {later:.2} s later")
                },
            );
            let after = taken.saturating_duration_since(freed_at).as_secs_f64();
            format!("the {which} card's worker took the freed slot {after:.2} s after it freed; {fresh}")
        });
    }
    findings
        .verdict("a failing card waits its spawn backoff, behind fresh cards")
        .provided(&arranged)
        .over(&seen)
        .context(|| {
            format!(
                "{}\n{}\n{}\n{}",
                board.setting(Setting::SpawnBackoff),
                board.diag(&failing),
                board.diag(&holder),
                board.diag(&fresh)
            )
        })
        .gap(GapKind::SpawnBackoffIgnored);
}
