//! A board-wide pause (contract §7 B5) ends when its time is up or when a person lifts it (`kanban
//! resume`), never earlier: a later refusal that asks for a shorter wait leaves the longer pause
//! in force, and one that asks for a longer wait extends it, so the sweeps after either still
//! bill nothing.

use std::time::{Duration, Instant};

use fixtures::aux_model::AuxModel;
use fixtures::verdict::Verdict;
use judge::prelude::*;
use rstest::rstest;

use crate::{decompose_all, decompose_card, decompose_forced};

/// The Retry-After of the first, short pause where nothing has to happen inside it.
const SHORT_PAUSE_SECS: u64 = 1;

/// The Retry-After of a short pause a person's decompose must be refused inside: a second, or
/// on a slow target long enough for what lies between the pause's start and that refusal (the
/// sweep's exit, a card created, the decompose's start-up: about two CLI calls), each call
/// allowed four times its measured pace for a loaded machine. The test still proves the refusal
/// came inside the pause.
fn short_pause_for_a_cli_call() -> u64 {
    let two_loaded_calls = fixtures::pace::pace().cli_call().saturating_mul(8);
    two_loaded_calls
        .as_secs_f64()
        .ceil()
        .max(SHORT_PAUSE_SECS as f64) as u64
}

/// When the provider answered the first call about `card`, if one reached it.
fn answered(aux: &AuxModel, card: &str) -> Option<Instant> {
    aux.billed_calls()
        .iter()
        .find(|call| call.card().as_deref() == Some(card))
        .map(|call| call.answered())
}

/// How long after the short pause's end the sweep runs, so that it is over by any clock.
const PAST_THE_END: Duration = Duration::from_millis(200);

/// The fresh card the sweep after the refusals finds: one the provider would split if it were
/// called, so a bill for it is the pause not holding.
fn card_waiting_out_the_pause(board: &Board) -> String {
    let waiting = board.create("an idea waiting out the pause", &["--triage"]);
    board.aux().reply(&waiting, Reply::graph(2, &[]));
    waiting
}

/// The verdict before the sweep's: a person's decompose among the refusals sent one request
/// (`requests`), so exactly one refusal came of it for the sweep to heed.
fn one_request_by_hand<'a>(
    what: &str,
    requests: usize,
    transcript: impl FnOnce() -> String + 'a,
) -> Verdict<'a> {
    bound(what, requests).exactly(1).context(transcript)
}

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
    let waiting = card_waiting_out_the_pause(&board);
    let before_the_sweep = aux.mark();

    let sweep = decompose_all(&board);

    // A sweep that bills nothing tells of the shorter refusal only if both refusals were given:
    // with no 429 during the pause there was nothing to shorten it.
    let refused_twice = match (answered(aux, &unpaid), answered(aux, &by_hand)) {
        (Some(_), Some(_)) => Ok(()),
        (None, _) => Err("the first sweep sent no call, so no 402 paused the board".to_owned()),
        (Some(_), None) => {
            Err("the decompose by hand sent no call, so no 429 was given".to_owned())
        }
    };
    let transcript = || format!("{}\n{}\n{}", pausing.output, manual.output, sweep.output);
    one_request_by_hand(
        "requests of a decompose by hand during the pause",
        manual_requests,
        transcript,
    )
    .gap(GapKind::NotOneRequest);
    sweep_billed_nothing(
        &board,
        "bills of a sweep after the shorter refusal",
        aux.bills_since(before_the_sweep),
        &waiting,
        transcript,
    )
    .provided(&refused_twice)
    .gap(GapKind::ProviderFaultNotPaused);
}

#[rstest]
fn a_longer_refusal_during_a_pause_extends_it(
    #[with(Config::plain().cooldown(900.0).retries(0).backoff(0.0))] board: Board,
) {
    let aux = board.aux();
    let limited = board.create("an idea sent while rate limited", &["--triage"]);
    let short_pause = Duration::from_secs(short_pause_for_a_cli_call());
    aux.reply(
        &limited,
        Reply::http_error(429, "rate limited").retry_after(short_pause.as_secs()),
    );
    let pausing = decompose_all(&board);
    // The short pause runs from the 429's answer.
    let short_pause_ends = answered(aux, &limited).map(|at| at + short_pause);
    // During the short pause a person decomposes a card by hand (forced past the pause), and the
    // provider answers that call with a 402: the board must now wait out the cooldown, not the
    // 429's pause.
    let by_hand = board.create("an idea a person splits during the pause", &["--triage"]);
    aux.reply(&by_hand, Reply::http_error(402, "payment required"));
    let manual = decompose_forced(&board, &by_hand);
    let manual_requests = aux.billed_for(&by_hand);
    let waiting = card_waiting_out_the_pause(&board);
    // What is awaited is the clock passing the 429's end, so this sleeps until that moment.
    let short_pause_over = short_pause_ends.unwrap_or_else(Instant::now) + PAST_THE_END;
    std::thread::sleep(short_pause_over.saturating_duration_since(Instant::now()));
    // Only a 402 given while the short pause was in force asks for it to be extended: one given
    // after it ended would pause a board that was not paused.
    let during_the_pause = match (short_pause_ends, answered(aux, &by_hand)) {
        (None, _) => Err("the first sweep sent no call, so no 429 paused the board".to_owned()),
        (Some(_), None) => {
            Err("the decompose by hand sent no call, so no 402 was given".to_owned())
        }
        (Some(ends), Some(given)) if given >= ends => Err(format!(
            "the 402 was given {:.1}s after the {} s pause had ended",
            given.duration_since(ends).as_secs_f64(),
            short_pause.as_secs()
        )),
        (Some(_), Some(_)) => Ok(()),
    };
    let before_the_sweep = aux.mark();

    let sweep = decompose_all(&board);

    let transcript = || format!("{}\n{}\n{}", pausing.output, manual.output, sweep.output);
    one_request_by_hand(
        "requests of a decompose by hand during the pause",
        manual_requests,
        transcript,
    )
    .gap(GapKind::NotOneRequest);
    sweep_billed_nothing(
        &board,
        "bills of a sweep after the short pause ended, under the longer refusal's",
        aux.bills_since(before_the_sweep),
        &waiting,
        transcript,
    )
    .provided(&during_the_pause)
    .gap(GapKind::ProviderFaultNotPaused);
}

#[rstest]
fn a_refusal_that_lands_after_an_earlier_pause_ended_pauses_again(
    #[with(Config::plain().cooldown(900.0).retries(0).backoff(0.0))] board: Board,
) {
    let aux = board.aux();
    let slow = board.create("an idea whose refusal comes late", &["--triage"]);
    // The slow refusal is held until the sweep's short pause has ended, however long the target
    // takes to run the sweep; a later call about the card (a target that sweeps a card in
    // flight) is refused at once, so the sweep never waits on the held one.
    let gate = Gate::new();
    aux.reply_in_turn(
        &slow,
        vec![
            Reply::http_error(429, "rate limited for a minute")
                .retry_after(60)
                .gated(&gate),
            Reply::http_error(429, "rate limited for a minute").retry_after(60),
        ],
    );
    let limited = board.create("an idea refused at once", &["--triage"]);
    aux.reply(
        &limited,
        Reply::http_error(429, "rate limited").retry_after(SHORT_PAUSE_SECS),
    );

    // The slow request leaves first; while it waits, a sweep's request is refused and pauses the
    // board for a second. The slow refusal lands after that pause ended, and must pause again.
    let (manual, arrived, pausing, short_pause_ends) = std::thread::scope(|scope| {
        let manual = scope.spawn(|| decompose_card(&board, &slow));
        let arrived = try_wait_until(
            || aux.billed_for(&slow) > 0,
            board.target().cli_timeout(&["decompose"]),
            "the slow decompose's request",
        );
        let pausing = decompose_all(&board);
        let short_pause_ends =
            answered(aux, &limited).map(|at| at + Duration::from_secs(SHORT_PAUSE_SECS));
        // What is awaited is the clock passing the short pause's end, so this sleeps until then.
        let let_go_at = short_pause_ends.unwrap_or_else(Instant::now) + PAST_THE_END;
        std::thread::sleep(let_go_at.saturating_duration_since(Instant::now()));
        gate.release();
        let manual = match manual.join() {
            Ok(run) => run,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        (manual, arrived, pausing, short_pause_ends)
    });
    // Proven: the slow call was out while the sweep was refused, and its refusal was let go only
    // after the pause that refusal set had ended.
    let landed_late = match (&arrived, short_pause_ends) {
        (Err(timeout), _) => Err(timeout.to_string()),
        (Ok(()), None) => Err("the sweep sent no call, so no first pause was set".to_owned()),
        (Ok(()), Some(ends)) => aux.open_until_released(&slow, &gate).and_then(|released| {
            if released > ends {
                Ok(())
            } else {
                Err("the slow refusal was let go before the first pause ended".to_owned())
            }
        }),
    }
    .map_err(|seen| format!("no refusal landed after an earlier pause ended: {seen}"));
    let manual_requests = aux.billed_for(&slow);
    let waiting = card_waiting_out_the_pause(&board);
    let before_the_sweep = aux.mark();

    let sweep = decompose_all(&board);

    let transcript = || format!("{}\n{}\n{}", manual.output, pausing.output, sweep.output);
    one_request_by_hand(
        "requests of the slow decompose by hand",
        manual_requests,
        transcript,
    )
    .gap(GapKind::NotOneRequest);
    sweep_billed_nothing(
        &board,
        "bills of a sweep after a refusal that landed once the first pause ended",
        aux.bills_since(before_the_sweep),
        &waiting,
        transcript,
    )
    .provided(&landed_late)
    .gap(GapKind::ProviderFaultNotPaused);
}
