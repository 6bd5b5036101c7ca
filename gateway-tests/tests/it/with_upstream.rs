//! A mixed pair: the target's gateway and an upstream hermes-agent gateway started on the same
//! board, in either order. Upstream holds `$HERMES_HOME/kanban/.dispatcher.lock` for its
//! lifetime and dispatches only while it holds it; the reference holds the same lock (and
//! upstream's per-board `kanban.db.dispatch.lock`) for its own lifetime and dispatches nothing
//! while another process holds either. So whichever starts first dispatches, and the other never
//! bills a card.
//!
//! These tests need upstream installed (see `fixtures::upstream`): the nextest `default` profile
//! leaves this module out, `cargo nextest run --profile with-upstream` runs it, and a run that
//! selects it without upstream fails with the install instructions.

use std::time::Duration;

use fixtures::gateway::Gateway;
use fixtures::upstream::{self, upstream};
use judge::prelude::*;
use rstest::rstest;

use crate::support::{start_gateway, STOP_GRACE};

/// Cards created once both gateways run.
const CONTESTED_CARDS: usize = 3;

/// How long the provider holds each contested card's call: several of upstream's one-second
/// ticks (and dozens of the reference's), so a second dispatcher would find the card still in
/// triage and pay for it again.
const SLOW_CALL: Duration = Duration::from_secs(3);

/// The `User-Agent` prefix of the reference's HTTP client: the fake provider tells the two
/// gateways' calls apart by it.
const REFERENCE_AGENT: &str = "hermes/";

/// Which gateway starts first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum First {
    /// Upstream, then the target's.
    Upstream,
    /// The target's, then upstream.
    Target,
}

/// Who sent each aux call, by the client's `User-Agent`: the reference's or another client.
fn calls_by_agent(board: &Board) -> (usize, usize) {
    let aux_calls = board
        .aux()
        .received()
        .into_iter()
        .filter(|request| request.method == "POST" && request.path.ends_with("/chat/completions"))
        .collect::<Vec<_>>();
    let by_reference = aux_calls
        .iter()
        .filter(|request| {
            request
                .header("user-agent")
                .is_some_and(|agent| agent.starts_with(REFERENCE_AGENT))
        })
        .count();
    (by_reference, aux_calls.len() - by_reference)
}

/// Whether upstream's own log says its dispatcher has decided: it stood down, or it holds the
/// lock and has entered its tick loop (five seconds after taking the lock).
fn upstream_decided(board: &Board) -> bool {
    let log = std::fs::read_to_string(upstream::own_log_path(board)).unwrap_or_default();
    log.contains("will NOT dispatch") || log.contains("kanban dispatcher: embedded in gateway")
}

#[rstest]
#[case::upstream_first(First::Upstream)]
#[case::target_first(First::Target)]
fn a_mixed_pair_on_one_board_never_both_dispatch(#[case] first: First) {
    // Before the board: without upstream this fails with the install instructions.
    let upstream = upstream();
    let board = Board::new(Config::gateway());
    // Whichever dispatches, upstream's gateway may pay for cards on this board in its own way:
    // without the reference's `max_tokens` or its ledger. Those are upstream's listed gaps,
    // judged on the upstream target; here only what both must keep is judged.
    for invariant in [
        Invariant::Request,
        Invariant::Ledger,
        Invariant::UsageShowsCalls,
        Invariant::Backoff,
        Invariant::Parked,
    ] {
        board.narrow_oracle(
            invariant,
            "upstream's gateway shares the board: its own requests and records are judged on the \
             upstream target",
        );
    }
    let target = board.target();
    let aux = board.aux();
    let upstream_spec =
        upstream::gateway_spec(&board, upstream, "upstream-gateway").stop_grace(STOP_GRACE);

    // The scenario runs whichever gateway starts first; the second runs beside it.
    let (mut run, second_gateway, first_timeout) = match first {
        First::Upstream => {
            let mut run = board.scenario().with_spec(|_| upstream_spec);
            // The reference's probe timeout is far shorter than upstream's first tick may take.
            run.start()
                .prove_ticks_within(1, upstream.first_bill_timeout());
            let ours = start_gateway(&board);
            (run, ours, upstream.first_bill_timeout())
        }
        First::Target => {
            let mut run = board.scenario();
            run.start().prove_ticks(1);
            let upstream_gateway = Gateway::spawn(upstream_spec);
            // Until upstream has decided whether it dispatches, it has had no chance to bill.
            // An upstream that exits meanwhile ends the wait; its verdict below says so.
            run.until(
                upstream.first_bill_timeout(),
                "upstream's dispatcher to stand down or start ticking (its logs/gateway.log)",
                || !upstream_gateway.running() || upstream_decided(&board),
            );
            (run, upstream_gateway, target.first_bill_timeout())
        }
    };
    let contested: Vec<String> = (0..CONTESTED_CARDS)
        .map(|i| {
            let card = board.create(&format!("contested idea {i}"), &["--triage"]);
            aux.reply(&card, Reply::graph(2, &[]).delayed(SLOW_CALL));
            card
        })
        .collect();
    run.left_triage(
        &contested,
        first_timeout + SLOW_CALL * u32::try_from(CONTESTED_CARDS).unwrap_or(u32::MAX),
        "the contested cards decomposed by the first gateway",
    )
    .prove_ticks_within(1, first_timeout);
    let second_running = second_gateway.running();
    let second_log = second_gateway.log();
    drop(second_gateway);
    let seen = run.stop();
    let bills: Vec<usize> = contested.iter().map(|card| aux.billed_for(card)).collect();
    let (by_reference, by_other) = calls_by_agent(&board);
    let by_second = match first {
        First::Upstream => by_reference,
        First::Target if target.is_reference() => by_other,
        // Two gateways of one client cannot be told apart by it; the bills per card still can.
        First::Target => 0,
    };

    holds(
        "the second gateway of a mixed pair runs beside the first",
        second_running,
    )
    .over(&seen)
    .context(|| second_log.clone())
    .gap(GapKind::GatewayExited);
    bound(
        "most bills for one contested card of a mixed pair",
        bills.iter().copied().max().unwrap_or(0),
    )
    .exactly(1)
    .over(&seen)
    .note(|| format!("bills per contested card: {bills:?}"))
    .context(|| board.diag(&contested[0]))
    .gap(GapKind::SecondDispatcher);
    bound(
        "aux calls sent by the second gateway of a mixed pair",
        by_second,
    )
    .at_most(0)
    .over(&seen)
    .note(|| {
        format!(
            "{by_reference} calls from the reference's client, {by_other} from another; \
                 {first:?} started first"
        )
    })
    .context(|| second_log.clone())
    .gap(GapKind::SecondDispatcher);
}

/// Upstream's Python reads the wall clock the clock tests move (`fixtures::faketime`, the
/// workspace's own shim): a card its CLI creates on a clock a day ahead is dated a day ahead,
/// as the reference's rows are in the `clock` tests.
#[test]
fn upstream_dates_its_rows_by_the_moved_wall_clock() {
    let upstream = upstream();
    // Only the clock is in question here: upstream's own card is nothing for the oracle to judge.
    let board = fixtures::board::Board::new(Config::plain());
    let ahead = fixtures::faketime::FakeClock::new(board.root(), AHEAD_SECS);
    let mut env = fixtures::env::for_target(board.home(), upstream);
    env.extend(ahead.env());
    let args = ["kanban", "create", "dated a day ahead"].map(std::ffi::OsString::from);
    let timeout = upstream.cli_timeout(&args);
    let before = unix_now();
    let created = fixtures::cli::run(upstream, args.to_vec(), env, board.root(), timeout);
    let after = unix_now();
    assert!(created.success(), "upstream's create failed:\n{created}");
    let tasks = board.rows().tasks();
    assert_eq!(tasks.len(), 1, "{tasks:?}");
    let dated = tasks[0].created_at.expect("upstream dates its cards");
    assert!(
        (before + AHEAD_SECS..=after + AHEAD_SECS).contains(&dated),
        "the card is dated {dated}, not a day after {before}..{after}"
    );
}

const AHEAD_SECS: i64 = fixtures::faketime::AHEAD.as_secs() as i64;

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_secs()).unwrap_or(i64::MAX)
        })
}
