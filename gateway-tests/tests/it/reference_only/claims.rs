//! A claim whose holder's life cannot be checked (a gateway in another pid namespace, a frozen
//! container) expires by the clock; the attempt that takes the card over then owns it, and the
//! woken holder's answer is fenced off at apply time by the claim's lease.
//!
//! The frozen holder is a real gateway stopped with SIGSTOP while its request is on its way.
//! Its claim is then made one of unknown liveness whose expiry has passed, as a gateway in a
//! container frozen past its claim span leaves it (a frozen process on this host is still seen
//! alive through `/proc`, and its real span is over 40 s). A sweep takes the card over and
//! holds its own reply back; meanwhile the holder is woken and gets its answer.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use fixtures::aux_model::contract_task;
use judge::prelude::*;
use rstest::rstest;
use serde_json::json;

/// How long the provider holds the frozen holder's answer: it is sent while the holder is
/// stopped, and read when it wakes.
const HOLDER_ANSWER: Duration = Duration::from_secs(2);

/// How long the provider holds the taker's answer: the woken holder is done long before.
const TAKER_ANSWER: Duration = Duration::from_secs(8);

/// The bound on one request: longer than the holder is frozen, so that its request is still
/// answered, not timed out, when it wakes.
const CALL_TIMEOUT_SECS: f64 = 40.0;

/// A fan-out whose children's titles all start with `who`.
fn graph_of(who: &str) -> Reply {
    Reply::fanout(vec![
        contract_task(&format!("{who}: part one"), json!([])),
        contract_task(&format!("{who}: part two"), json!([0])),
    ])
}

#[rstest]
fn a_holder_woken_after_its_claim_was_taken_over_applies_nothing(
    #[with(Config::gateway().backoff(0.0).retries(0).call_timeout(CALL_TIMEOUT_SECS))] board: Board,
) {
    let aux = board.aux();
    let card = board.create("an idea in flight in a frozen container", &["--triage"]);
    aux.reply_in_turn(
        &card,
        vec![
            graph_of("frozen holder").delayed(HOLDER_ANSWER),
            graph_of("taker").delayed(TAKER_ANSWER),
        ],
    );

    let mut run = board.scenario();
    run.start().first_bill(&card);
    run.signal(Signal::SIGSTOP);
    let arranged = board.rows().arrange_claim_expired_elsewhere(&card);

    let (sweep, holder_done, taker_answer_at) = std::thread::scope(|scope| {
        let sweep = scope.spawn(|| board.cli_unchecked(["kanban", "decompose", "--all", "--json"]));
        let took_over = try_wait_until(
            || aux.billed_for(&card) >= 2,
            board.target().cli_timeout(&["decompose"]),
            "the sweep's request for the card taken over",
        );
        // What is awaited is the provider sending the frozen holder's answer: a time.
        let holder_answer_at = aux.bill_times(&card).first().map(|at| *at + HOLDER_ANSWER);
        if let Some(at) = holder_answer_at {
            std::thread::sleep(at.saturating_duration_since(Instant::now()));
        }
        run.signal(Signal::SIGCONT);
        let holder_done = try_wait_until(
            || {
                board
                    .rows()
                    .ledger(&card)
                    .first()
                    .is_some_and(|row| row.outcome == "ok")
            },
            TAKER_ANSWER,
            "the woken holder recording its answer",
        )
        .map(|()| Instant::now());
        let sweep = match sweep.join() {
            Ok(run) => run,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        let taker_answer_at = aux.bill_times(&card).get(1).map(|at| *at + TAKER_ANSWER);
        (sweep, took_over.and(holder_done), taker_answer_at)
    });
    let log = run.log_since_start();
    let seen = run.stop();

    assert_eq!(arranged, 1, "the card in flight had no claim to arrange");
    let rows = board.rows();
    let children = rows.titles_of(&rows.children_of(&card));
    let transcript = || format!("{sweep}\ngateway log:\n{log}\n{}", board.diag(&card));
    // The woken holder must have had its answer in hand while the taker's was still held back.
    let interruption = match (&holder_done, taker_answer_at) {
        (Err(timeout), _) => Some(Interruption::from(timeout)),
        (Ok(done), Some(taker)) if *done >= taker => Some(Interruption::new(
            "the woken holder got its answer only after the taker's was sent",
        )),
        _ => None,
    };
    let mut applied = bound(
        "graphs applied to the card taken over",
        rows.events(&card, "decomposed").len(),
    )
    .exactly(1)
    .context(transcript);
    if let Some(cause) = interruption.clone() {
        applied = applied.interrupted_by(cause);
    }
    applied.gap(GapKind::DoubleApply);
    let mut taker_only = holds(
        "the children are the taker's: the woken holder's answer is not applied",
        !children.is_empty() && children.iter().all(|title| title.starts_with("taker:")),
    )
    .note(|| format!("children: {children:?}"))
    .context(transcript);
    if let Some(cause) = interruption {
        taker_only = taker_only.interrupted_by(cause);
    }
    taker_only.gap(GapKind::DoubleApply);
    bound("bills for the card", aux.billed_for(&card))
        .exactly(2)
        .over(&seen)
        .context(transcript)
        .gap(GapKind::InFlightRebilled);
    let abandoned = rows.failure_reasons(&card);
    Findings::new()
        .equal("the sweep's exit code", &sweep.code, &Some(0))
        .that(
            abandoned.len() == 1
                && abandoned[0].contains("expired")
                && !abandoned[0].contains(" ended"),
            || format!("the taken-over attempt's failure does not say it expired: {abandoned:?}"),
        )
        .that(
            sweep.stderr.contains("had expired") && !sweep.stderr.contains("  "),
            || {
                "the sweep's recovery line does not say the claim expired, or has a run of spaces"
                    .to_owned()
            },
        )
        .that(log.contains("was not applied"), || {
            "the gateway does not say the woken attempt's answer was not applied".to_owned()
        })
        .verdict("the takeover and the fenced answer are said as they happened")
        .context(transcript)
        .gap(GapKind::UnclearRefusal);
}

/// A live holder a reader cannot see in `/proc` (a `hidepid` mount, systemd's
/// `ProtectProc=invisible`, a sweep run as another user): its claim names a pid no reader finds,
/// yet the holder holds its lock, so it is alive. A sweep leaves the card alone, an explicit
/// `decompose ID` refuses it, and the holder's own answer is the one applied (B1).
#[rstest]
fn a_holder_hidden_from_proc_still_holds_its_card(
    #[with(Config::gateway().backoff(0.0))] board: Board,
) {
    let aux = board.aux();
    let (card, gate) =
        crate::support::card_held_in_flight(&board, "in flight while /proc hides its holder");
    let mut run = board.scenario();
    run.start().first_bill(&card);
    let hidden = board.rows().arrange_claim_holder_hidden(&card);
    let sweep = board.cli_unchecked(["kanban", "decompose", "--all", "--json"]);
    let manual = board.cli_unchecked(["kanban", "decompose", &card, "--json"]);
    let while_held = aux.billed_for(&card);
    let abandoned = board.rows().failure_reasons(&card);
    gate.release();
    run.until_left_triage(&card, "the holder's own answer applied");
    let seen = run.stop();
    let arranged = if hidden == 1 {
        Ok(())
    } else {
        Err(format!(
            "the card in flight had {hidden} claim(s) to arrange"
        ))
    };

    bound(
        "requests of a sweep and an explicit decompose for a card whose holder /proc hides",
        while_held.saturating_sub(1),
    )
    .at_most(0)
    .context(|| format!("{sweep}\n{manual}\n{}", board.diag(&card)))
    .provided(&arranged)
    .gap(GapKind::InFlightRebilled);
    holds(
        "the hidden holder's attempt is not closed as abandoned, and `decompose ID` refuses",
        abandoned.is_empty() && manual.code == Some(1) && manual.stderr.contains("claimed"),
    )
    .note(|| format!("failures recorded: {abandoned:?}"))
    .context(|| manual.to_string())
    .provided(&arranged)
    .gap(GapKind::InFlightRebilled);
    bound("bills for the card in flight", aux.billed_for(&card))
        .exactly(1)
        .over(&seen)
        .context(|| board.diag(&card))
        .provided(&arranged)
        .gap(GapKind::InFlightRebilled);
}
