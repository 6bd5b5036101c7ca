//! Retries inside one attempt (contract §7 B5): the tries of one `kanban decompose ID` are spaced by a
//! jittered, doubling delay, a 503's `Retry-After` is waited for when it fits the attempt, and
//! one that does not fit ends the retries instead of the attempt's bound.
//!
//! The first retry waits at least half of 0.5 s and the second at least half of 1 s ("equal
//! jitter"); a `Retry-After: 2` is waited for, and the next try comes before the reply could
//! have been waited for twice.

use std::time::{Duration, Instant};

use judge::prelude::*;
use rstest::rstest;

use crate::{applied_with_two_children, decompose_card};

/// The least wait before each retry, in order.
const LEAST_WAITS: [Duration; 2] = [Duration::from_millis(250), Duration::from_millis(500)];

fn millis(gaps: &[Duration]) -> String {
    let shown: Vec<String> = gaps
        .iter()
        .map(|gap| format!("{} ms", gap.as_millis()))
        .collect();
    format!("gaps between tries [{}]", shown.join(", "))
}

#[rstest]
fn tries_after_server_errors_are_spaced_and_the_third_succeeds(
    #[with(Config::plain().retries(2))] board: Board,
) {
    let aux = board.aux();
    let card = board.create("a provider having a bad minute", &["--triage"]);
    aux.reply_in_turn(
        &card,
        vec![
            Reply::http_error(500, "upstream exploded"),
            Reply::http_error(500, "upstream exploded again"),
            Reply::graph(2, &[]),
        ],
    );

    let run = decompose_card(&board, &card);

    bound(
        "requests of one attempt with two retries",
        aux.billed_for(&card),
    )
    .exactly(3)
    .note(|| board.setting(Setting::Retries))
    .context(|| run.output.to_string())
    .gap(GapKind::NotOneRequest);
    let gaps = aux.gaps_between_bills(&card);
    let short: Vec<String> = gaps
        .iter()
        .zip(LEAST_WAITS)
        .enumerate()
        .filter(|(_, (gap, least))| gap < &least)
        .map(|(retry, (gap, least))| {
            format!(
                "retry {} came after {} ms, not {} ms",
                retry + 1,
                gap.as_millis(),
                least.as_millis()
            )
        })
        .collect();
    bound("retries sent before their least wait", short.len())
        .at_most(0)
        .note(|| millis(&gaps))
        .note(|| short.join("; "))
        .gap(GapKind::RetriesNotSpaced);
    applied_with_two_children(&board, &card, &run)
        .verdict("the try that succeeds is applied")
        .context(|| format!("{}\n{}", run.output, board.diag(&card)))
        .gap(GapKind::ReplyNotApplied);
}

#[rstest]
fn a_503_retry_after_that_fits_is_waited_for(#[with(Config::plain().retries(1))] board: Board) {
    let aux = board.aux();
    let card = board.create("a provider asking for two seconds", &["--triage"]);
    aux.reply_in_turn(
        &card,
        vec![
            Reply::http_error(503, "overloaded, come back in 2 s").retry_after(2),
            Reply::graph(2, &[]),
        ],
    );

    let run = decompose_card(&board, &card);

    bound(
        "requests of one attempt with one retry",
        aux.billed_for(&card),
    )
    .exactly(2)
    .context(|| run.output.to_string())
    .gap(GapKind::NotOneRequest);
    let gaps = aux.gaps_between_bills(&card);
    let waited = gaps.first().copied().unwrap_or_default();
    holds(
        "the retry waits out Retry-After: 2 and no more than twice that",
        waited >= Duration::from_secs(2) && waited < Duration::from_secs(4),
    )
    .note(|| millis(&gaps))
    .gap(GapKind::RetryAfterIgnored);
    holds(
        "the retry after the wait is applied",
        run.ok() == Some(true),
    )
    .context(|| format!("{}\n{}", run.output, board.diag(&card)))
    .gap(GapKind::ReplyNotApplied);
}

/// A bound on each request small enough that a `Retry-After` of [`TOO_LONG_RETRY_AFTER`] cannot
/// fit in the attempt (which the reference bounds by 10 s + this per try + its own waits).
const SHORT_CALL_TIMEOUT: f64 = 1.0;
/// Just too long for an attempt of two tries of [`SHORT_CALL_TIMEOUT`]: on the reference such an
/// attempt may last 10 s + 2 × 1 s + 0.5 s (the longest wait before one retry) = 12.5 s, and a
/// retry after 12 s would end past that, at 13 s. One retry's wait more (1 s) would let it fit.
const TOO_LONG_RETRY_AFTER: u64 = 12;

#[rstest]
fn a_retry_after_that_does_not_fit_the_attempt_ends_the_retries(
    #[with(Config::plain().retries(1).call_timeout(SHORT_CALL_TIMEOUT))] board: Board,
) {
    let aux = board.aux();
    let card = board.create("a provider asking for too long", &["--triage"]);
    aux.reply(
        &card,
        Reply::http_error(503, "overloaded for a while").retry_after(TOO_LONG_RETRY_AFTER),
    );

    let run = decompose_card(&board, &card);
    let ended = Instant::now();
    // The attempt's time runs from its first request: the target's start-up is not the
    // attempt's, and a slow interpreter under load must not decide this verdict.
    let first_request = aux.bill_times(&card).first().copied();
    let took = first_request.map(|sent| ended.saturating_duration_since(sent));

    bound(
        "requests when Retry-After does not fit the attempt",
        aux.billed_for(&card),
    )
    .exactly(1)
    .note(|| {
        format!(
            "Retry-After: {TOO_LONG_RETRY_AFTER}; {}; {}",
            board.setting(Setting::CallTimeout),
            board.setting(Setting::Retries)
        )
    })
    .context(|| run.output.to_string())
    .gap(GapKind::RetryAfterIgnored);
    holds(
        "the attempt ends without waiting out a Retry-After that does not fit",
        took.is_some_and(|took| took < Duration::from_secs(TOO_LONG_RETRY_AFTER)),
    )
    .note(|| match took {
        Some(took) => format!(
            "the decompose ended {} ms after its first request",
            took.as_millis()
        ),
        None => "the decompose sent no request".to_owned(),
    })
    .context(|| run.output.to_string())
    .provided(
        &took
            .map(|_| ())
            .ok_or_else(|| "the decompose sent no request".to_owned()),
    )
    .gap(GapKind::RetryAfterIgnored);
    holds(
        "the failed attempt says why",
        run.ok() == Some(false)
            && run.line()["reason"]
                .as_str()
                .is_some_and(|reason| !reason.trim().is_empty()),
    )
    .context(|| run.output.to_string())
    .gap(GapKind::UnclearRefusal);
}
