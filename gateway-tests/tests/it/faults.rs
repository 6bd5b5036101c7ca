//! Every other way one card's decomposition can fail, through the seed's rebill bound: HTTP
//! refusals, a hang past the call timeout, a stream cut before `[DONE]`, a connection dropped
//! once the request was read, and fan-outs the decomposer must reject whole (too many children,
//! a cycle).

use std::time::Duration;

use fixtures::aux_model::graph_value;
use fixtures::relay::Relay;
use judge::prelude::*;
use rstest::rstest;

use crate::support::{blocked_probe_timeout, no_graph_findings, rebill_note, spend_budget};
use crate::{DEFAULT_MAX_CHILDREN, MAX_FAILED_ATTEMPTS, PROBE_TICKS, SHORT_BACKOFF};

/// A target rightly pauses every card after a 401/402/403 (or for a 429's `Retry-After`); a short
/// cooldown lets the tick probes through afterwards, so this file can count one card's bills
/// over proven ticks. The pause itself is proven in `provider_wide`. Only a target that reads a
/// cooldown setting gets it.
const SHORT_PAUSE: f64 = 1.0;

/// `Retry-After` seconds on the 429s here: short for the same reason.
const SHORT_RETRY_AFTER: u64 = 1;

/// A call timeout far below the hang, so a target that honours it ends each attempt quickly and
/// spends its whole budget well inside the window.
const SHORT_TIMEOUT: f64 = 0.3;

/// Longer than any test here runs: the fake provider never answers within it (dropping the
/// provider ends the hang at once).
const HANG: Duration = Duration::from_secs(600);

/// Settings of a card whose provider refuses it.
fn refused() -> Config {
    Config::gateway()
        .cooldown(SHORT_PAUSE)
        .backoff(SHORT_BACKOFF)
}

#[rstest]
#[case::http_429(
    Reply::http_error(429, "rate limited").retry_after(SHORT_RETRY_AFTER),
    refused(),
    &[Setting::Backoff]
)]
#[case::http_401(Reply::http_error(401, "invalid api key"), refused(), &[Setting::Cooldown, Setting::Backoff])]
#[case::http_402(Reply::http_error(402, "insufficient quota"), refused(), &[Setting::Cooldown, Setting::Backoff])]
#[case::http_403(Reply::http_error(403, "model not allowed"), refused(), &[Setting::Cooldown, Setting::Backoff])]
#[case::hang_past_timeout(
    Reply::hang(HANG),
    Config::gateway().call_timeout(SHORT_TIMEOUT).backoff(SHORT_BACKOFF),
    &[Setting::CallTimeout, Setting::Backoff]
)]
#[case::stream_cut_before_done(
    Reply::cut_stream(graph_value(3, &[]).to_string()),
    Config::gateway().backoff(SHORT_BACKOFF),
    &[Setting::Backoff]
)]
fn failing_triage_card_is_not_rebilled_every_tick(
    #[case] reply: Reply,
    #[case] config: Config,
    #[case] settings: &[Setting],
) {
    let board = Board::new(config);
    let doomed = board.create("an idea the decomposer can never split", &["--triage"]);
    board.aux().reply(&doomed, reply);
    judge_doomed_card(&board, &doomed, settings);
}

/// A provider that reads each request about the card to its end and then drops the connection
/// without a reply. The request was delivered, and may have been billed: each such call is a
/// failed attempt of the card, never a provider that could not be reached (which would give the
/// attempt back, and pay again after every pause, without end).
#[rstest]
fn a_card_whose_connection_drops_after_the_request_is_billed_within_its_budget() {
    let config = Config::gateway().backoff(SHORT_BACKOFF);
    let board = Board::new(config.clone());
    let relay = Relay::open(board.aux());
    board.reconfigure(config.yaml(&format!("model:\n  base_url: {}\n", relay.base_url())));
    let doomed = board.create(
        "an idea whose every reply is lost on the way",
        &["--triage"],
    );
    relay.drop_after_request(&doomed);
    judge_doomed_card(&board, &doomed, &[Setting::Backoff]);
}

/// Runs a gateway on `board` until `doomed` has had time to spend its budget and the ticks after
/// it are proven, then states the rebill bound and that the failures wrote no rows.
fn judge_doomed_card(board: &Board, doomed: &str, settings: &[Setting]) {
    let aux = board.aux();
    let mut run = board.scenario();
    run.start();
    // Bounded: a dispatcher blocked by this failure fails fast instead of waiting out minutes.
    run.first_bill(doomed);
    spend_budget(&mut run, doomed);
    run.prove_ticks_within(PROBE_TICKS, blocked_probe_timeout(board.target()));
    let bills = aux.billed_for(doomed);
    let seen = run.stop();

    bound("bills for doomed card", bills)
        .at_most(MAX_FAILED_ATTEMPTS)
        .over(&seen)
        .note(|| rebill_note(board, doomed, settings))
        .context(|| board.diag(doomed))
        .gap(GapKind::RebilledEveryTick);
    no_graph_findings(board, doomed)
        .verdict("failed decomposition wrote no rows")
        .context(|| board.diag(doomed))
        .gap(GapKind::FailureWroteRows);
}

#[rstest]
#[case::too_many_children(Reply::graph(DEFAULT_MAX_CHILDREN + 1, &[]), GapKind::UnboundedFanout)]
#[case::cycle(
    Reply::graph(3, &[(0, &[2]), (1, &[0]), (2, &[1])]),
    GapKind::InvalidGraphApplied
)]
fn rejected_fanout_writes_no_rows_and_is_not_rebilled_every_tick(
    #[case] reply: Reply,
    #[case] applied_as: GapKind,
    #[with(Config::gateway().backoff(SHORT_BACKOFF))] board: Board,
) {
    let aux = board.aux();
    let root = board.create("an idea split the wrong way", &["--triage"]);
    aux.reply(&root, reply);
    let tasks_before = board.task_count();

    let mut run = board.scenario();
    run.start().first_bill(&root);
    spend_budget(&mut run, &root);
    run.prove_ticks_within(PROBE_TICKS, blocked_probe_timeout(board.target()));
    let bills = aux.billed_for(&root);
    let seen = run.stop();

    let rows = board.rows();
    let children = rows.children_of(&root).len();
    let new_rows = board
        .task_count()
        .saturating_sub(tasks_before + seen.window.probes().len());
    let decomposed = rows.events(&root, "decomposed").len();
    let status = rows.status(&root);
    Findings::new()
        .equal("child rows", &children, &0)
        .equal("new task rows", &new_rows, &0)
        .equal("decomposed events", &decomposed, &0)
        .equal("root status", &status.as_str(), &"triage")
        .verdict("rejected fan-out wrote no rows")
        .context(|| board.diag(&root))
        .gap(applied_as);
    bound("bills for rejected fan-out", bills)
        .at_most(MAX_FAILED_ATTEMPTS)
        .over(&seen)
        .note(|| rebill_note(&board, &root, &[Setting::Backoff]))
        .context(|| board.diag(&root))
        .gap(GapKind::RebilledEveryTick);
}
