//! The sweep's budgets at their boundaries (contract §7 B1, B6): `decompose_max_attempts` sweeps bill a
//! failing card exactly that many times (0 included: the card is parked the first time it is
//! picked), `decompose_calls_per_hour: 0` lets no sweep pay at all, and in every case a
//! person's `decompose ID` still makes exactly one attempt.

use judge::prelude::*;
use rstest::rstest;
use serde_json::json;

use super::shown_decompose_state;
use crate::{decompose_all, decompose_card, decompose_forced, Decomposition};

fn transcript(runs: &[Decomposition]) -> String {
    runs.iter()
        .map(|run| run.output.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The verdicts on a person's decompose after the sweeps (forced past the board-wide guards
/// when `forced`): one more request, one more attempt.
fn judge_one_explicit_attempt(
    board: &Board,
    card: &str,
    (bills_before, attempts_before): (usize, i64),
    forced: bool,
) {
    let run = if forced {
        decompose_forced(board, card)
    } else {
        decompose_card(board, card)
    };
    bound(
        "requests of a person's decompose after the sweeps",
        board.aux().billed_for(card) - bills_before,
    )
    .exactly(1)
    .context(|| run.output.to_string())
    .gap(GapKind::NotOneRequest);
    bound(
        "attempts a person's decompose adds",
        board.rows().attempts(card) - attempts_before,
    )
    .exactly(1)
    .context(|| format!("{}\n{}", run.output, board.diag(card)))
    .gap(GapKind::CallNotVisible);
}

#[rstest]
#[case::budget_0(0)]
#[case::budget_1(1)]
#[case::budget_3(3)]
fn sweeps_bill_a_failing_card_exactly_its_attempt_budget(#[case] budget: u32) {
    let board = Board::new(Config::plain().max_attempts(budget).backoff(0.0));
    let aux = board.aux();
    let doomed = board.create("never splits", &["--triage"]);
    aux.reply(&doomed, Reply::malformed());

    // As many sweeps as the budget: the failure that spends it parks the card. (A budget of 0
    // is spent before the first attempt: the first sweep to pick the card parks it.)
    let mut sweeps: Vec<Decomposition> =
        (0..budget.max(1)).map(|_| decompose_all(&board)).collect();
    let parked_when_spent = shown_decompose_state(&board, &doomed)["parked"].clone();
    let parked_events = board.rows().events(&doomed, "decompose_parked").len();
    // One sweep more: it must find the card parked and pay nothing.
    sweeps.push(decompose_all(&board));

    bound("sweep bills for a failing card", aux.billed_for(&doomed))
        .exactly(budget)
        .note(|| board.setting(Setting::MaxAttempts))
        .context(|| transcript(&sweeps))
        .gap(GapKind::RebilledEveryTick);
    Findings::new()
        .equal(
            "parked, as shown once the budget is spent",
            &parked_when_spent,
            &json!(true),
        )
        .equal("decompose_parked events", &parked_events, &1)
        .equal(
            "attempts counted",
            &board.rows().attempts(&doomed),
            &i64::from(budget),
        )
        .equal(
            "lines of the sweep after the budget",
            &sweeps.last().map_or(0, |sweep| sweep.lines.len()),
            &0,
        )
        .equal("status", &board.rows().status(&doomed).as_str(), &"triage")
        .verdict("the spent budget parks the card")
        .context(|| format!("{}\n{}", transcript(&sweeps), board.diag(&doomed)))
        .gap(GapKind::RebilledEveryTick);
    judge_one_explicit_attempt(
        &board,
        &doomed,
        (aux.billed_for(&doomed), board.rows().attempts(&doomed)),
        false,
    );
}

#[rstest]
fn no_sweep_pays_with_an_hourly_ceiling_of_zero(
    #[with(Config::plain().calls_per_hour(0))] board: Board,
) {
    let aux = board.aux();
    let cards: Vec<String> = (0..2)
        .map(|i| board.create(&format!("idea {i} under a zero ceiling"), &["--triage"]))
        .collect();

    let sweep = decompose_all(&board);

    bound("sweep bills under a ceiling of zero", aux.bills())
        .at_most(0)
        .note(|| board.setting(Setting::CallsPerHour))
        .context(|| sweep.output.to_string())
        .gap(GapKind::HourlyCeilingExceeded);
    let mut findings = Findings::new()
        .equal("lines of the sweep", &sweep.lines.len(), &0)
        .that(
            sweep.output.stderr.contains("decompose_calls_per_hour"),
            || "the sweep does not say the hourly ceiling stopped it".to_owned(),
        );
    for card in &cards {
        findings = findings.equal(
            &format!("attempts counted on {card}"),
            &board.rows().attempts(card),
            &0,
        );
    }
    findings
        .verdict("the ceiling stops the sweep before anything is counted")
        .context(|| sweep.output.to_string())
        .gap(GapKind::HourlyCeilingExceeded);
    judge_one_explicit_attempt(&board, &cards[0], (0, 0), true);
}

#[rstest]
fn a_retry_the_hourly_ceiling_stops_leaves_a_counted_failed_attempt(
    #[with(Config::plain().calls_per_hour(1).retries(2).backoff(0.0))] board: Board,
) {
    let aux = board.aux();
    let card = board.create("a provider failing under a tight ceiling", &["--triage"]);
    aux.reply(&card, Reply::http_error(500, "upstream exploded"));

    let sweep = decompose_all(&board);

    bound("sweep bills under a ceiling of one", aux.billed_for(&card))
        .exactly(1)
        .note(|| board.setting(Setting::CallsPerHour))
        .context(|| sweep.output.to_string())
        .gap(GapKind::HourlyCeilingExceeded);
    // The first try was paid: the attempt it belongs to is spent, though the ceiling kept its
    // retries from leaving.
    let rows = board.rows();
    Findings::new()
        .equal("attempts counted", &rows.attempts(&card), &1)
        .equal(
            "decompose_failed events",
            &rows.events(&card, "decompose_failed").len(),
            &1,
        )
        .equal(
            "the sweep's line says ok",
            &sweep.line_for(&card).map(|line| line["ok"].clone()),
            &Some(json!(false)),
        )
        .verdict("the paid try's attempt is recorded as failed")
        .context(|| format!("{}\n{}", sweep.output, board.diag(&card)))
        .gap(GapKind::BudgetNotPersisted);
}
