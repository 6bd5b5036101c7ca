//! When a card's calls go out, seen from the provider: a call that hangs ends at the call timeout
//! (not before, and not at the hang's end), and a failing card waits its backoff between
//! attempts, doubling. Counts alone cannot see either: a hang bills once whether or not it is
//! cut short, and a card with no backoff still parks at its budget.

use std::time::Duration;

use judge::prelude::*;
use rstest::rstest;

use crate::support::millis;
use crate::SHORT_BACKOFF;

/// The call timeout of the hang test: short, so the test is, and long against a tick.
const CALL_TIMEOUT: f64 = 1.0;

/// How long after the timeout the next call may come: the card's short backoff, a tick, and
/// recording the failure on a loaded machine. Far below the hang.
const AFTER_TIMEOUT_SLACK: Duration = Duration::from_secs(4);

/// Longer than the test: the provider never answers the hung call by itself.
const HANG: Duration = Duration::from_secs(600);

/// How long the card may take to be decomposed by its second attempt: the timeout, the slack,
/// and start-up.
const SECOND_ATTEMPT_WITHIN: Duration = Duration::from_secs(15);

#[rstest]
fn a_hung_first_call_ends_at_the_call_timeout_and_the_second_attempt_succeeds(
    #[with(Config::gateway().call_timeout(CALL_TIMEOUT).backoff(SHORT_BACKOFF))] board: Board,
) {
    let aux = board.aux();
    let card = board.create("a card whose first call hangs", &["--triage"]);
    aux.reply_in_turn(&card, vec![Reply::hang(HANG), Reply::graph(2, &[])]);

    let mut run = board.scenario();
    run.start().first_bill(&card).left_triage(
        std::slice::from_ref(&card),
        SECOND_ATTEMPT_WITHIN,
        "the card decomposed by its second attempt",
    );
    let bills = aux.billed_for(&card);
    let gap = aux
        .gaps_between_bills(&card)
        .first()
        .copied()
        .unwrap_or_default();
    let children = board.rows().children_of(&card).len();
    let seen = run.stop();

    let timeout = Duration::from_secs_f64(CALL_TIMEOUT);
    bound("bills for a card whose first call hangs", bills)
        .exactly(2)
        .over(&seen)
        .note(|| {
            format!(
                "{children} children; {}",
                board.setting(Setting::CallTimeout)
            )
        })
        .context(|| board.diag(&card))
        .gap(GapKind::CallTimeoutIgnored);
    bound("ms from the hung call to the next call", millis(gap))
        .at_least(millis(timeout))
        .over(&seen)
        .note(|| board.setting(Setting::CallTimeout))
        .gap(GapKind::CallTimeoutIgnored);
    bound(
        "ms from the hung call to the next call, at most",
        millis(gap),
    )
    .at_most(millis(timeout + AFTER_TIMEOUT_SLACK))
    .over(&seen)
    .note(|| format!("the hang lasts {}s", HANG.as_secs()))
    .gap(GapKind::CallTimeoutIgnored);
}

/// The first backoff of the backoff test: long against a tick (so a card with no backoff is
/// plainly too early), short enough that three attempts take about a second.
const FIRST_BACKOFF: f64 = 0.4;

/// The contract's default first backoff, by which a target without the setting is judged.
const CONTRACT_BACKOFF: f64 = 60.0;

#[rstest]
fn a_failing_card_waits_its_backoff_between_bills_doubling(
    #[with(Config::gateway().backoff(FIRST_BACKOFF))] board: Board,
) {
    let aux = board.aux();
    let card = board.create("an idea the decomposer can never split", &["--triage"]);
    aux.reply(&card, Reply::malformed());
    let first = Duration::from_secs_f64(if board.reads(Setting::Backoff) {
        FIRST_BACKOFF
    } else {
        CONTRACT_BACKOFF
    });

    let mut run = board.scenario();
    run.start()
        .bills(3, || aux.billed_for(&card), "three paid calls for the card");
    let gaps = aux.gaps_between_bills(&card);
    let seen = run.stop();

    let gap = |i: usize| millis(gaps.get(i).copied().unwrap_or_default());
    let note = || {
        format!(
            "gaps between bills: {gaps:?}; {}",
            board.setting(Setting::Backoff)
        )
    };
    bound("ms between the first and second bills", gap(0))
        .at_least(millis(first))
        .over(&seen)
        .note(note)
        .gap(GapKind::BackoffIgnored);
    bound("ms between the second and third bills", gap(1))
        .at_least(millis(first * 2))
        .over(&seen)
        .note(note)
        .gap(GapKind::BackoffIgnored);
}
