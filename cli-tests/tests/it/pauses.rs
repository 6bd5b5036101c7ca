//! A board-wide pause (contract §7 B5) ends when its time is up or when a person lifts it (`kanban
//! resume`), never earlier: a later refusal that asks for a shorter wait leaves the longer pause
//! in force, and one that asks for a longer wait extends it, so the sweeps after either still
//! bill nothing.

use std::time::{Duration, Instant};

use fixtures::prelude::*;
use fixtures::verdict::Verdict;
use rstest::rstest;

use crate::{decompose_all, decompose_card, decompose_forced};

/// The Retry-After of the first, short pause.
const SHORT_PAUSE_SECS: u64 = 1;

/// How long after the short pause's end the sweep runs, so that it is over by any clock.
const PAST_THE_END: Duration = Duration::from_millis(200);

/// The verdict every test here ends on: the sweep after the refusals billed nothing (`bills`),
/// since the pause that should be in force held it back; `waiting` is the fresh card it found.
fn sweep_billed_nothing<'a>(
    board: &'a Board,
    what: &str,
    bills: usize,
    waiting: &'a str,
    transcript: impl Fn() -> String + 'a,
) -> Verdict<'a> {
    let aux = board.aux();
    bound(what, bills)
        .exactly(0)
        .note(|| board.setting(Setting::Cooldown))
        .note(move || format!("billed in order: {:?}", aux.billed_ids()))
        .context(move || format!("{}\n{}", transcript(), board.diag(waiting)))
}

#[rstest]
fn a_shorter_refusal_during_a_pause_never_shortens_it(
    #[with(Config::plain().cooldown(900.0).retries(0).backoff(0.0))] board: Board,
) {
    let aux = board.aux();
    let unpaid = board.create("an idea behind an unpaid invoice", &["--triage"]);
    aux.reply(&unpaid, Reply::http_error(402, "payment required"));
    let pausing = decompose_all(&board);
    // A person may still decompose a card by hand while the board is paused, forcing it past the
    // pause. The provider answers that call with a 429 whose Retry-After has already run out.
    let by_hand = board.create("an idea a person splits during the pause", &["--triage"]);
    aux.reply(
        &by_hand,
        Reply::http_error(429, "slow down, or not").retry_after(0),
    );
    let manual = decompose_forced(&board, &by_hand);
    let manual_requests = aux.billed_for(&by_hand);
    let waiting = board.create("an idea waiting out the pause", &["--triage"]);
    aux.reply(&waiting, Reply::graph(2, &[]));
    let before_the_sweep = aux.bills();

    let sweep = decompose_all(&board);

    let transcript = || format!("{}\n{}\n{}", pausing.output, manual.output, sweep.output);
    bound(
        "requests of a decompose by hand during the pause",
        manual_requests,
    )
    .exactly(1)
    .context(transcript)
    .gap(GapKind::NotOneRequest);
    sweep_billed_nothing(
        &board,
        "bills of a sweep after the shorter refusal",
        aux.bills().saturating_sub(before_the_sweep),
        &waiting,
        transcript,
    )
    .gap(GapKind::ProviderFaultNotPaused);
}

#[rstest]
fn a_longer_refusal_during_a_pause_extends_it(
    #[with(Config::plain().cooldown(900.0).retries(0).backoff(0.0))] board: Board,
) {
    let aux = board.aux();
    let limited = board.create("an idea sent while rate limited", &["--triage"]);
    aux.reply(
        &limited,
        Reply::http_error(429, "rate limited").retry_after(SHORT_PAUSE_SECS),
    );
    let pausing = decompose_all(&board);
    let short_pause_over = Instant::now() + Duration::from_secs(SHORT_PAUSE_SECS) + PAST_THE_END;
    // During the short pause a person decomposes a card by hand (forced past the pause), and the
    // provider answers that call with a 402: the board must now wait out the cooldown, not the
    // 429's second.
    let by_hand = board.create("an idea a person splits during the pause", &["--triage"]);
    aux.reply(&by_hand, Reply::http_error(402, "payment required"));
    let manual = decompose_forced(&board, &by_hand);
    let manual_requests = aux.billed_for(&by_hand);
    let waiting = board.create("an idea waiting out the pause", &["--triage"]);
    aux.reply(&waiting, Reply::graph(2, &[]));
    // What is awaited is the clock passing the 429's end, so this sleeps until that moment.
    std::thread::sleep(short_pause_over.saturating_duration_since(Instant::now()));
    let before_the_sweep = aux.bills();

    let sweep = decompose_all(&board);

    let transcript = || format!("{}\n{}\n{}", pausing.output, manual.output, sweep.output);
    bound(
        "requests of a decompose by hand during the pause",
        manual_requests,
    )
    .exactly(1)
    .context(transcript)
    .gap(GapKind::NotOneRequest);
    sweep_billed_nothing(
        &board,
        "bills of a sweep after the short pause ended, under the longer refusal's",
        aux.bills().saturating_sub(before_the_sweep),
        &waiting,
        transcript,
    )
    .gap(GapKind::ProviderFaultNotPaused);
}

/// How long the provider holds the reply to a decompose by hand that was sent before the first
/// pause: past that pause's end ([`SHORT_PAUSE_SECS`]) by a second or more.
const LATE_REPLY_HOLD: Duration = Duration::from_secs(3);

#[rstest]
fn a_refusal_that_lands_after_an_earlier_pause_ended_pauses_again(
    #[with(Config::plain().cooldown(900.0).retries(0).backoff(0.0))] board: Board,
) {
    let aux = board.aux();
    let slow = board.create("an idea whose refusal comes late", &["--triage"]);
    aux.reply(
        &slow,
        Reply::http_error(429, "rate limited for a minute")
            .retry_after(60)
            .delayed(LATE_REPLY_HOLD),
    );
    let limited = board.create("an idea refused at once", &["--triage"]);
    aux.reply(
        &limited,
        Reply::http_error(429, "rate limited").retry_after(SHORT_PAUSE_SECS),
    );

    // The slow request leaves first; while it waits, a sweep's request is refused and pauses the
    // board for a second. The slow refusal lands after that pause ended, and must pause again.
    let (manual, arrived, pausing) = std::thread::scope(|scope| {
        let manual = scope.spawn(|| decompose_card(&board, &slow));
        let arrived = try_wait_until(
            || aux.billed_for(&slow) > 0,
            board.target().cli_timeout(&["decompose"]),
            "the slow decompose's request",
        );
        let pausing = decompose_all(&board);
        let manual = match manual.join() {
            Ok(run) => run,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        (manual, arrived, pausing)
    });
    let manual_requests = aux.billed_for(&slow);
    let waiting = board.create("an idea waiting out the pause", &["--triage"]);
    aux.reply(&waiting, Reply::graph(2, &[]));
    let before_the_sweep = aux.bills();

    let sweep = decompose_all(&board);

    let transcript = || format!("{}\n{}\n{}", manual.output, pausing.output, sweep.output);
    bound("requests of the slow decompose by hand", manual_requests)
        .exactly(1)
        .context(transcript)
        .gap(GapKind::NotOneRequest);
    let mut late = sweep_billed_nothing(
        &board,
        "bills of a sweep after a refusal that landed once the first pause ended",
        aux.bills().saturating_sub(before_the_sweep),
        &waiting,
        transcript,
    );
    if let Err(timeout) = &arrived {
        late = late.interrupted_by(Interruption::from(timeout));
    }
    late.gap(GapKind::ProviderFaultNotPaused);
}
