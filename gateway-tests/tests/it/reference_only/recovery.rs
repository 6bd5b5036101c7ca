//! The operator's recovery verbs against a running gateway: `kanban unpark ID` gives a parked
//! card one more budget that the gateway spends with one bill, `kanban resume` lifts a provider
//! pause so the gateway bills again, and `kanban auto-decompose ID off|on` keeps the gateway away
//! from a card and brings it back. Judged by the bills the fake provider saw: what the verbs
//! print and how they exit is the CLI contract, judged in cli-tests; here a verb that failed
//! leaves its gateway verdicts with no arrangement to stand on.

use fixtures::cli::CliOutput;
use judge::prelude::*;
use rstest::rstest;

use crate::support::span_of_ticks;
use crate::{PROBE_TICKS, SHORT_BACKOFF};

/// The attempt budget of the unpark test: small, so the card parks within a few ticks.
const BUDGET: u32 = 2;

/// The arrangement a gateway verdict after a verb stands on: the verb ran (its exit code is
/// the CLI contract's, judged in cli-tests).
fn ran(verb: &CliOutput) -> Result<(), String> {
    if verb.success() {
        Ok(())
    } else {
        Err(format!(
            "the verb exited with {}:\n{verb}",
            verb.code_text()
        ))
    }
}

#[rstest]
fn a_parked_card_unparked_is_decomposed_by_the_gateway_with_one_bill(
    #[with(Config::gateway().backoff(SHORT_BACKOFF).max_attempts(BUDGET))] board: Board,
) {
    let aux = board.aux();
    let card = board.create("an idea the model failed until it parked", &["--triage"]);
    aux.reply(&card, Reply::malformed());

    let mut run = board.scenario();
    run.start()
        .until(
            board.target().first_bill_timeout(),
            "the card to be parked",
            || !board.rows().events(&card, "decompose_parked").is_empty(),
        )
        .prove_ticks(2);
    let parked_bills = aux.billed_for(&card);
    let parked_window = run.so_far();
    aux.reply(&card, Reply::graph(2, &[]));
    let unpark = board.cli_unchecked(["kanban", "unpark", card.as_str()]);
    run.until_left_triage(&card, "the unparked card decomposed by the gateway")
        .prove_ticks(2);
    let seen = run.stop();
    let bills = aux.billed_for(&card);

    bound("gateway bills before the card was parked", parked_bills)
        .exactly(BUDGET)
        .over(&parked_window)
        .context(|| board.diag(&card))
        .gap(GapKind::RebilledEveryTick);
    bound(
        "gateway bills after unpark",
        bills.saturating_sub(parked_bills),
    )
    .exactly(1)
    .over(&seen)
    .provided(&ran(&unpark))
    .context(|| format!("{unpark}\n{}", board.diag(&card)))
    .gap(GapKind::RecoveryFailed);
    holds(
        "the unparked card is decomposed by the gateway",
        board.rows().children_of(&card).len() == 2,
    )
    .over(&seen)
    .context(|| board.diag(&card))
    .gap(GapKind::RecoveryFailed);
}

#[rstest]
fn resume_lets_a_gateway_paused_by_a_refusal_bill_again(
    #[with(Config::gateway().cooldown(900.0).backoff(SHORT_BACKOFF))] board: Board,
) {
    let target = board.target();
    let aux = board.aux();
    let card = board.create("an idea behind a revoked key", &["--triage"]);
    aux.reply(&card, Reply::http_error(401, "invalid api key"));

    let mut run = board.scenario();
    run.start();
    // Nothing may be decomposed during the pause, so the watch spans ticks by the clock, after
    // the gateway showed it ticks (the first bill).
    run.first_bill(&card)
        .watch(span_of_ticks(target, PROBE_TICKS));
    let paused_bills = aux.billed_for(&card);
    let paused_window = run.so_far();
    aux.reply(&card, Reply::graph(2, &[]));
    let resume = board.cli_unchecked(["kanban", "resume"]);
    run.until_left_triage(&card, "the card decomposed after the resume")
        .prove_ticks(2);
    let seen = run.stop();
    let bills = aux.billed_for(&card);

    bound("gateway bills under the provider pause", paused_bills)
        .exactly(1)
        .over(&paused_window)
        .note(|| board.setting(Setting::Cooldown))
        .gap(GapKind::ProviderFaultNotPaused);
    bound(
        "gateway bills after resume",
        bills.saturating_sub(paused_bills),
    )
    .exactly(1)
    .over(&seen)
    .provided(&ran(&resume))
    .context(|| format!("{resume}\n{}", board.diag(&card)))
    .gap(GapKind::RecoveryFailed);
    holds(
        "the card is decomposed by the gateway after the resume",
        board.rows().children_of(&card).len() == 2,
    )
    .over(&seen)
    .context(|| board.diag(&card))
    .gap(GapKind::RecoveryFailed);
}

#[rstest]
fn auto_decompose_off_keeps_the_gateway_away_and_on_brings_it_back(
    #[with(Config::gateway())] board: Board,
) {
    let aux = board.aux();
    let card = board.create("an idea its owner wants to split", &["--triage"]);
    aux.reply(&card, Reply::graph(2, &[]));
    let off = board.cli_unchecked(["kanban", "auto-decompose", card.as_str(), "off"]);
    let fresh = board.create("a fresh idea", &["--triage"]);

    let mut run = board.scenario();
    run.start()
        .until_left_triage(&fresh, "the fresh card auto-decomposed")
        .prove_ticks(PROBE_TICKS);
    let bills_while_off = aux.billed_for(&card);
    let off_window = run.so_far();
    let on = board.cli_unchecked(["kanban", "auto-decompose", card.as_str(), "on"]);
    run.until_left_triage(&card, "the card switched on decomposed by the gateway")
        .prove_ticks(2);
    let seen = run.stop();
    let bills = aux.billed_for(&card);

    bound("gateway bills for a card switched off", bills_while_off)
        .at_most(0)
        .over(&off_window)
        .provided(&ran(&off))
        .context(|| board.diag(&card))
        .gap(GapKind::HoldDecomposed);
    bound(
        "gateway bills once the card is switched on",
        bills.saturating_sub(bills_while_off),
    )
    .exactly(1)
    .over(&seen)
    .provided(&ran(&on))
    .context(|| format!("{on}\n{}", board.diag(&card)))
    .gap(GapKind::RecoveryFailed);
    holds(
        "the switched-on card is decomposed by the gateway",
        board.rows().children_of(&card).len() == 2,
    )
    .over(&seen)
    .context(|| board.diag(&card))
    .gap(GapKind::RecoveryFailed);
}
