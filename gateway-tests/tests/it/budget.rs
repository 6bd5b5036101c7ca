//! A failing card's attempt budget at its boundary: it is billed exactly its budget (3 by
//! default, and a second value, so an off-by-one or an ignored setting shows), a SIGKILL during
//! its last attempt still spends it (the restarted gateway parks the card at once), and a
//! budget lowered below the attempts already spent parks the card before it is billed again.

use std::time::Duration;

use judge::prelude::*;
use nix::sys::signal::Signal;
use rstest::rstest;

use crate::support::{rebill_note, span_of_ticks};
use crate::{MAX_FAILED_ATTEMPTS, PROBE_TICKS, SHORT_BACKOFF};

/// How long the provider holds the third attempt's call: far longer than it takes to kill the
/// gateway once the call arrived.
const SLOW_FAILURE: Duration = Duration::from_secs(30);

/// The backoff in force when the last attempt begins: the card it leaves would not be due again
/// for an hour, so within the test only the restarted gateway closing that attempt can park it.
const LONG_BACKOFF: f64 = 600.0;

/// How long the restarted gateway gets to park the card whose last attempt it found abandoned:
/// it does so at its first tick, which comes at once, so this is start-up time with a wide
/// margin.
const PARK_TIMEOUT: Duration = Duration::from_secs(10);

fn parked(board: &Board, card: &str) -> bool {
    !board.rows().events(card, "decompose_parked").is_empty()
}

fn server_error() -> Reply {
    Reply::http_error(500, "upstream exploded")
}

#[rstest]
fn sigkill_during_the_last_attempt_still_spends_the_budget(
    #[with(Config::gateway().backoff(SHORT_BACKOFF))] board: Board,
) {
    let aux = board.aux();
    let card = board.create("an idea the decomposer can never split", &["--triage"]);
    // The second failure is held until the long backoff is written, so the last attempt
    // begins under it whatever the machine's load.
    let second_failure = Gate::new();
    aux.reply_in_turn(
        &card,
        vec![
            server_error(),
            server_error().gated(&second_failure),
            server_error().delayed(SLOW_FAILURE),
        ],
    );

    let mut run = board.scenario();
    run.start()
        .bills(2, || aux.billed_for(&card), "the card's second paid call");
    board.reconfigure(Config::gateway().backoff(LONG_BACKOFF));
    second_failure.release();
    let long_backoff_first = aux
        .call_open_until_released(&card, 1, &second_failure)
        .map(|_| ())
        .map_err(|seen| {
            format!("the long backoff was not written during the second attempt: {seen}")
        });
    run.bills(
        MAX_FAILED_ATTEMPTS,
        || aux.billed_for(&card),
        "the card's last paid call",
    );
    if run.ok() {
        let crash = run.kill9();
        assert_eq!(crash.signal, Some(Signal::SIGKILL as i32), "{crash}");
        // From now on the provider fails at once: a target that bills the card again shows it
        // on every tick instead of hanging on it.
        aux.reply(&card, server_error());
        run.restart();
        if board.reads(Setting::MaxAttempts) {
            run.settle(
                PARK_TIMEOUT,
                "the card parked by the restarted gateway",
                || parked(&board, &card),
            );
        }
        run.prove_ticks(PROBE_TICKS);
    }
    let bills = aux.billed_for(&card);
    let is_parked = parked(&board, &card);
    // The restarted gateway's own lines: the park it found owes one WARN there, which the
    // oracle excuses once any process of the run was killed.
    let restarted_log = run.log_since_start();
    let seen = run.stop();

    bound("bills for a card killed during its last attempt", bills)
        .at_most(MAX_FAILED_ATTEMPTS)
        .over(&seen)
        .note(|| rebill_note(&board, &card, &[Setting::MaxAttempts, Setting::Backoff]))
        .context(|| board.diag(&card))
        .gap(GapKind::BudgetNotPersisted);
    // The card's next due time is an hour away, so only the restart can have parked it.
    if board.reads(Setting::MaxAttempts) {
        holds(
            "the restarted gateway parks a card whose last attempt it found abandoned",
            is_parked,
        )
        .over(&seen)
        .context(|| board.diag(&card))
        .provided(&long_backoff_first)
        .gap(GapKind::BudgetNotPersisted);
        let warned = fixtures::gateway::parked_warnings(&restarted_log)
            .iter()
            .filter(|warned| **warned == card)
            .count();
        holds(
            "the restarted gateway gives the abandoned card it parked one WARN",
            is_parked && warned == 1,
        )
        .over(&seen)
        .note(|| format!("parked: {is_parked}; {warned} parked WARN line(s) since the restart"))
        .context(|| restarted_log.clone())
        .provided(&long_backoff_first)
        .gap(GapKind::ParkUnreported);
    }
}

/// The first backoff in the lowered-budget test: the card's third attempt would be due 1 s
/// after its second failure, time enough for the lowered budget to be read first.
const LOWERING_BACKOFF: f64 = 0.5;

/// The budget before and after it is lowered.
const BUDGET_BEFORE: u32 = 3;
const BUDGET_AFTER: u32 = 2;

#[rstest]
fn a_budget_lowered_below_the_attempts_spent_parks_the_card_before_another_bill(
    #[with(Config::gateway().backoff(LOWERING_BACKOFF).max_attempts(BUDGET_BEFORE))] board: Board,
) {
    let target = board.target();
    let aux = board.aux();
    let card = board.create("an idea the decomposer can never split", &["--triage"]);
    aux.reply(&card, Reply::malformed());

    let mut run = board.scenario();
    run.start().bills(
        BUDGET_AFTER as usize,
        || aux.billed_for(&card),
        "the card's second paid call",
    );
    board.reconfigure(
        Config::gateway()
            .backoff(LOWERING_BACKOFF)
            .max_attempts(BUDGET_AFTER),
    );
    // The card has spent the new budget but was never parked: the next time it is due, the
    // gateway must park it instead of paying for it.
    if board.reads(Setting::MaxAttempts) {
        run.settle(
            Duration::from_secs(10),
            "the card parked under the lowered budget",
            || parked(&board, &card),
        );
    } else {
        run.watch(span_of_ticks(target, PROBE_TICKS));
    }
    run.prove_ticks(PROBE_TICKS);
    let bills = aux.billed_for(&card);
    let seen = run.stop();

    bound("bills for a card whose budget was lowered to 2", bills)
        .at_most(BUDGET_AFTER)
        .over(&seen)
        .note(|| rebill_note(&board, &card, &[Setting::MaxAttempts, Setting::Backoff]))
        .context(|| board.diag(&card))
        .gap(GapKind::RebilledEveryTick);
}

#[rstest]
#[case::budget_3(3)]
#[case::budget_2(2)]
fn a_failing_card_is_billed_exactly_its_attempt_budget(#[case] budget: u32) {
    let board = Board::new(
        Config::gateway()
            .backoff(SHORT_BACKOFF)
            .max_attempts(budget),
    );
    // A target without the setting is judged by the contract's default budget.
    let expected = if board.reads(Setting::MaxAttempts) {
        budget as usize
    } else {
        MAX_FAILED_ATTEMPTS
    };
    let aux = board.aux();
    let card = board.create("an idea the decomposer can never split", &["--triage"]);
    aux.reply(&card, Reply::malformed());

    let mut run = board.scenario();
    run.start()
        .first_bill(&card)
        .settle(
            Duration::from_secs(10),
            &format!("{expected} bills for the card"),
            || aux.billed_for(&card) >= expected,
        )
        .prove_ticks(PROBE_TICKS);
    let bills = aux.billed_for(&card);
    let seen = run.stop();

    bound("bills for a card that always fails", bills)
        .exactly(expected)
        .over(&seen)
        .note(|| rebill_note(&board, &card, &[Setting::MaxAttempts, Setting::Backoff]))
        .context(|| board.diag(&card))
        .gap(GapKind::RebilledEveryTick);
}
