//! A provider that refuses or cannot be reached, at the awkward moments: a refusal that arrives
//! late (after the calls it would have stopped were sent), one that arrives while the gateway
//! shuts down, the end of a pause when the provider had answered well before it, and a provider
//! nobody can connect to (which costs nothing, so it must spend no card's budget).

use std::time::{Duration, Instant};

use fixtures::target::current_target;
use judge::prelude::*;
use rstest::rstest;

use crate::support::{closed_port_url, span_of_ticks, STOP_GRACE};
use crate::{PROBE_TICKS, PROVIDER_FAULT_BOUND, SHORT_BACKOFF};

/// Cards waiting when the provider starts refusing.
const WAITING_CARDS: usize = 6;

/// Cards attempted per tick: the most calls a late refusal may find in flight.
const PER_TICK: u32 = 3;

/// A cooldown longer than any test here: one refusal pauses everything that follows.
const LONG_COOLDOWN: f64 = 120.0;

/// A refusal that takes longer than the reference's 2 s probe window, so the gateway has fanned
/// out before it lands.
const LATE: Duration = Duration::from_millis(2_500);

#[rstest]
#[case::answered_at_once(Duration::ZERO, PROVIDER_FAULT_BOUND)]
#[case::answered_after_the_probe_window(LATE, PER_TICK as usize)]
fn a_refusal_costs_one_call_at_once_and_at_most_the_calls_in_flight_when_late(
    #[case] delay: Duration,
    #[case] most_bills: usize,
    #[with(Config::gateway().per_tick(PER_TICK).cooldown(LONG_COOLDOWN).backoff(0.0))] board: Board,
) {
    let target = board.target();
    let aux = board.aux();
    for i in 0..WAITING_CARDS {
        board.create(&format!("waiting card {i}"), &["--triage"]);
    }
    aux.reply_default(Reply::http_error(402, "insufficient quota").delayed(delay));

    let mut run = board.scenario();
    run.start();
    // Every call sent before the first refusal landed has answered after twice the delay; the
    // watch goes on for as many ticks as the other tests prove, all under the pause.
    run.bills(1, || aux.bills(), "any waiting card")
        .watch(delay * 2 + span_of_ticks(target, PROBE_TICKS));
    let bills = aux.bills();
    run.kill9();
    let seen = run.stop();

    bound("bills while the provider refuses", bills)
        .at_most(most_bills)
        .over(&seen)
        .note(|| {
            format!(
                "every reply a 402 after {:.1}s; {WAITING_CARDS} cards waiting; billed in order: \
                 {:?}; {}; {}",
                delay.as_secs_f64(),
                aux.billed_ids(),
                board.setting(Setting::PerTick),
                board.setting(Setting::Cooldown)
            )
        })
        .gap(GapKind::ProviderFaultNotPaused);
}

/// How long the provider takes to refuse the probe in the shutdown test.
const REFUSAL_DELAY: Duration = Duration::from_millis(1_500);

/// How long before the refusal lands SIGTERM is sent.
const SIGTERM_AHEAD: Duration = Duration::from_millis(800);

#[rstest]
fn a_refusal_that_lands_during_shutdown_still_pauses_the_restarted_gateway() {
    let target = current_target();
    let ticks = span_of_ticks(target, PROBE_TICKS);
    // The restarted gateway is watched for twice as long as this gateway's own start took to
    // bill; the pause, chosen up front, holds the stop, that watch and as much again for a
    // machine whose load changes (twice the run's measured pace, twice over).
    let room = fixtures::pace::pace().starts(2, ticks) + ticks;
    let pause_secs = (REFUSAL_DELAY + STOP_GRACE + room).as_secs_f64().ceil() as u64 + 2;
    let board = Board::new(
        Config::gateway()
            .cooldown(pause_secs as f64)
            .backoff(SHORT_BACKOFF),
    );
    let aux = board.aux();
    let cards: Vec<String> = (0..3)
        .map(|i| board.create(&format!("waiting card {i}"), &["--triage"]))
        .collect();
    aux.reply_default(Reply::http_error(402, "insufficient quota").delayed(REFUSAL_DELAY));

    let mut run = board.scenario();
    run.start().bills(1, || aux.bills(), "the first call");
    let first_start = run.time_to_first_bill();
    run.watch(REFUSAL_DELAY - SIGTERM_AHEAD);
    let refused_at = Instant::now() + SIGTERM_AHEAD;
    let mut stopped = None;
    let mut watched = Duration::ZERO;
    if run.ok() {
        // SIGTERM now: the refusal lands while the gateway shuts down.
        run.restart();
        stopped = run.last_stop().copied();
        watched = first_start * 2 + ticks;
        run.watch(watched);
    }
    let after_restart = aux.bills();
    let since_refusal = refused_at.elapsed();
    let restarted_and_watched = if stopped.is_none() {
        Err("the gateway was not restarted".to_owned())
    } else if since_refusal >= Duration::from_secs(pause_secs) {
        Err(format!(
            "the watch after the restart ended {:.1}s after the refusal, past the {pause_secs}s \
             pause, so the count cannot tell a pause from none",
            since_refusal.as_secs_f64()
        ))
    } else {
        Ok(())
    };
    aux.reply_default(Reply::default_single());
    let window = run.close_window();
    run.left_triage(
        &cards,
        Duration::from_secs(pause_secs) + target.first_bill_timeout(),
        "every waiting card decomposed after the pause",
    );
    let resumed = run.stop();

    bound(
        "bills while paused by a refusal that landed during shutdown",
        after_restart,
    )
    .exactly(PROVIDER_FAULT_BOUND)
    .over(&window)
    .note(|| {
        format!(
            "SIGTERM {:.1}s before the refusal landed; the stop: {stopped:?}; the restarted \
             gateway watched {:.1}s (its first start billed after {:.1}s); billed in order: \
             {:?}; {}",
            SIGTERM_AHEAD.as_secs_f64(),
            watched.as_secs_f64(),
            first_start.as_secs_f64(),
            aux.billed_ids(),
            board.setting(Setting::Cooldown)
        )
    })
    .provided(&restarted_and_watched)
    .gap(GapKind::ProviderFaultNotPaused);
    let decomposed = board.rows().left_triage(&cards).len();
    bound("waiting cards decomposed after the pause", decomposed)
        .exactly(cards.len())
        .over(&resumed)
        .gap(GapKind::PauseNeverEnded);
}

/// The shortest `Retry-After` of the 429s in the pause-end test: long enough to create the
/// waiting cards inside the pause on the reference, short next to the test (a slower CLI gets a
/// longer pause, see the test).
const PAUSE_SECS: u64 = 3;

/// How long after a pause's end its calls are counted: a few ticks, and well inside the pause
/// that a second 429 starts.
const AFTER_PAUSE: Duration = Duration::from_millis(1_500);

#[rstest]
fn when_a_pause_ends_one_call_probes_the_provider_before_any_fan_out(
    #[with(Config::gateway().per_tick(PER_TICK).backoff(0.0))] board: Board,
) {
    let aux = board.aux();
    // The provider answers first: the gateway knows it works well before the gate closes.
    let answered = board.create("a card answered before the provider refuses", &["--triage"]);

    let mut run = board.scenario();
    run.start()
        .until_left_triage(&answered, "the first card decomposed");
    // The waiting cards must all be waiting when the pause ends, or a target that fans out shows
    // nothing (each card would come on a tick of its own). The pause holds their creation twice
    // over at the pace of a CLI call measured now, beside the running gateway (a run's pace,
    // measured on an idle board, is far quicker than a CLI beside a gateway that keeps calling),
    // and never less than `PAUSE_SECS`.
    let measured = Instant::now();
    let _ = board.cli_unchecked(["kanban", "list", "--json"]);
    let creating = measured
        .elapsed()
        .saturating_mul(u32::try_from(WAITING_CARDS).unwrap_or(u32::MAX))
        .saturating_mul(2);
    let pause_secs = PAUSE_SECS.max(creating.as_secs_f64().ceil() as u64);
    aux.reply_default(Reply::http_error(429, "rate limited").retry_after(pause_secs));
    let refused = board.create("the card whose call starts the pause", &["--triage"]);
    run.first_bill(&refused);
    let paused_at = Instant::now();
    let before_the_end = aux.mark();
    for i in 0..WAITING_CARDS {
        board.create(&format!("waiting card {i}"), &["--triage"]);
    }
    let created_in = paused_at.elapsed();
    let waiting_at_the_end = if created_in < Duration::from_secs(pause_secs) {
        Ok(())
    } else {
        Err(format!(
            "the {WAITING_CARDS} waiting cards took {:.1}s to create, past the {pause_secs}s \
             pause: they were not all waiting when it ended",
            created_in.as_secs_f64()
        ))
    };
    run.watch((Duration::from_secs(pause_secs) + AFTER_PAUSE).saturating_sub(paused_at.elapsed()));
    let at_the_end = aux.bills_since(before_the_end);
    let seen = run.stop();

    bound("calls when the pause ended", at_the_end)
        .at_most(PROVIDER_FAULT_BOUND)
        .over(&seen)
        .note(|| {
            format!(
                "every call a 429 with Retry-After: {pause_secs} once the first card was \
                 decomposed; {WAITING_CARDS} cards waiting; billed in order: {:?}; {}",
                aux.billed_ids(),
                board.setting(Setting::PerTick)
            )
        })
        .provided(&waiting_at_the_end)
        .gap(GapKind::ProviderFaultNotPaused);
}

/// How long the provider stays unreachable on the reference: two tries (its pause after a
/// refused connection is at least 1 s, then doubles). A target with a slower tick gets as many
/// ticks as the other tests prove.
const UNREACHABLE_SPAN: Duration = Duration::from_millis(1_500);

/// The longest pause an unreachable span this short can leave behind on the reference (1 s,
/// then 2 s, after the two tries), with room for a third try: the card waits it out once the
/// provider is back.
const UNREACHABLE_PAUSE: Duration = Duration::from_secs(4);

#[rstest]
fn an_unreachable_provider_spends_no_cards_budget(
    #[with(Config::gateway().backoff(SHORT_BACKOFF))] board: Board,
) {
    let target = board.target();
    let aux = board.aux();

    // The gateway is shown ticking first (a probe decomposed while the provider answers): a
    // target not awaited for readiness may take longer to start than the span below, and a
    // gateway that never tried the unreachable provider spends no budget by not running.
    let mut run = board.scenario();
    run.start().prove_ticks(1);
    let ticking = run.interrupted().map_or(Ok(()), |cut| {
        Err(format!(
            "the gateway was not shown ticking before the provider went away: {cut}"
        ))
    });
    // `model.base_url` at a port where nothing listens: the request never reaches a provider.
    let unreachable = Config::gateway()
        .backoff(SHORT_BACKOFF)
        .yaml(&format!("model:\n  base_url: {}\n", closed_port_url()));
    board.reconfigure(unreachable);
    // A tick that read the old config just before the write has begun its work by now; the
    // card comes after it, so only ticks under the unreachable provider find it.
    run.watch(span_of_ticks(target, 1));
    let card = board.create("an idea nobody can be asked about", &["--triage"]);
    let span = if target.is_reference() {
        UNREACHABLE_SPAN
    } else {
        span_of_ticks(target, PROBE_TICKS)
    };
    run.watch(span);
    let attempts_spent = board
        .reads(Setting::MaxAttempts)
        .then(|| board.rows().attempts(&card));
    board.reconfigure(Config::gateway().backoff(SHORT_BACKOFF));
    run.left_triage(
        std::slice::from_ref(&card),
        UNREACHABLE_PAUSE + target.first_bill_timeout(),
        "the card decomposed once the provider is back",
    );
    let bills = aux.billed_for(&card);
    let seen = run.stop();

    if let Some(attempts) = attempts_spent {
        bound(
            "attempts counted while the provider was unreachable",
            attempts,
        )
        .at_most(0)
        .note(|| format!("unreachable for {:.1}s", span.as_secs_f64()))
        .context(|| board.diag(&card))
        .provided(&ticking)
        .gap(GapKind::UnreachableCharged);
    }
    holds(
        "a card that waited out an unreachable provider is decomposed once it is back",
        board.rows().status(&card) != "triage",
    )
    .over(&seen)
    .context(|| board.diag(&card))
    .provided(&ticking)
    .gap(GapKind::UnreachableCharged);
    bound("bills for the card once the provider is back", bills)
        .exactly(1)
        .over(&seen)
        .context(|| board.diag(&card))
        .gap(GapKind::RebilledAfterDecompose);
}
