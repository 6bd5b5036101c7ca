//! Only one gateway dispatches a board: a second one on the same board is refused at once and
//! bills nothing, so no card is paid for twice. "The same board" is the file, not a path: a
//! second home whose `kanban.db` is a symlink to the first one's, or a second gateway started
//! after the lock files were deleted, never dispatches beside the first. A hard link made to the
//! board while its gateway runs lets no write through either name (SQLite keeps a log beside
//! each name, so two names are two diverging boards).

use std::time::Duration;

use fixtures::gateway::Gateway;
use fixtures::gateway::GatewaySpec;
use fixtures::target::Readiness;
use judge::prelude::*;
use rstest::rstest;

use crate::support::{another_gateway_spec, create_held_cards, span_of_ticks, STOP_GRACE};
use crate::PROBE_TICKS;

/// Cards created while the second gateway starts.
const CONTESTED_CARDS: usize = 3;

/// How many of the target's ticks each contested card's call takes: long enough for a second
/// dispatcher to find the card still in triage and pay for it again.
const SLOW_CALL_TICKS: u32 = 3;

#[rstest]
fn second_gateway_on_the_same_board_is_refused_and_bills_nothing(
    #[with(Config::gateway())] board: Board,
) {
    let target = board.target();
    let aux = board.aux();
    let mut run = board.scenario();
    run.start().prove_ticks(1);
    let first_start = run.time_to_first_bill();

    // A refused gateway never reports readiness, so none is awaited; its own log keeps its
    // output apart from the first one's.
    let second = Gateway::spawn(another_gateway_spec(&board, "second-gateway"));
    // A second gateway that is neither refused nor ticking yet when the contested calls end
    // proves nothing, however long each call takes: the first call of each card is held until
    // the second ended or had as long as the first took from its start to its first call,
    // twice over, plus two ticks. A second call (a card paid for again) is answered at once.
    let slow_call = target.tick_interval() * SLOW_CALL_TICKS;
    let gate = Gate::new();
    let held_reply = Reply::default_single().delayed(slow_call).gated(&gate);
    let contested = create_held_cards(&board, "contested idea", CONTESTED_CARDS, &held_reply);
    let second_had = fixtures::pace::ticking_after(first_start, target);
    let any_contested_billed = || contested.iter().any(|card| aux.billed_for(card) > 0);
    let held = try_wait_until(
        || !run.running() || (any_contested_billed() && second.ended_or_ran(second_had)),
        second_had + target.first_bill_timeout(),
        "a contested card in flight while the second gateway ended or had its time to tick",
    );
    gate.release();
    let in_flight = held
        .map_err(|timeout| timeout.to_string())
        .and_then(|()| aux.any_open_until_released(&contested, &gate))
        .map_err(|seen| {
            format!(
                "no contested card was in flight while the second gateway ended or had its \
                 time: {seen}"
            )
        });
    let refused = try_wait_until(
        || !second.running(),
        target.readiness_timeout(),
        "the second gateway to exit",
    );
    run.left_triage(
        &contested,
        target.first_bill_timeout(),
        "the contested cards decomposed by the first gateway",
    )
    .prove_ticks(1);
    let second_exit = second.exit();
    let second_log = second.log();
    drop(second);
    let seen = run.stop();
    let bills: Vec<usize> = contested.iter().map(|card| aux.billed_for(card)).collect();

    let exit = second_exit.map(|exit| (exit.code, exit.signal));
    holds(
        "a second gateway on the same board exits with a non-zero code of its own",
        refused.is_ok() && matches!(exit, Some((Some(code), None)) if code != 0),
    )
    .note(|| match &refused {
        Ok(()) => format!("it ended with {exit:?}"),
        Err(timeout) => format!("it kept running: {timeout}"),
    })
    .context(|| second_log.clone())
    .gap(GapKind::SecondDispatcher);
    bound(
        "most bills for one contested card",
        bills.iter().copied().max().unwrap_or(0),
    )
    .exactly(1)
    .over(&seen)
    .note(|| {
        format!(
            "bills per contested card: {bills:?}; the second gateway had {:.1}s to tick",
            second_had.as_secs_f64()
        )
    })
    .provided(&in_flight)
    .gap(GapKind::SecondDispatcher);
}

/// How a second home reaches the first board's `kanban.db`.
#[derive(Debug, Clone, Copy)]
enum Link {
    Symlink,
    Hardlink,
}

/// A second home whose `kanban.db` is `link` to `board`'s, with `board`'s config (the same fake
/// provider), its own lock directory and upstream lock files of its own: only the board file is
/// shared.
fn linked_home(board: &Board, link: Link) -> fixtures::home::Home {
    let home = fixtures::home::Home::new();
    let config = match std::fs::read_to_string(board.config_path()) {
        Ok(config) => config,
        Err(error) => panic!("cannot read {}: {error}", board.config_path().display()),
    };
    home.write_config(&config);
    let (original, linked) = (board.rows().path(), home.db_path());
    let made = match link {
        Link::Symlink => std::os::unix::fs::symlink(original, &linked),
        Link::Hardlink => std::fs::hard_link(original, &linked),
    };
    if let Err(error) = made {
        panic!(
            "cannot {link:?} {} to {}: {error}",
            linked.display(),
            original.display()
        );
    }
    home
}

/// The spec of a gateway in `home` (not waiting for readiness: a target may rightly refuse to
/// dispatch a board another gateway dispatches), logging to `name`.log in its root.
fn gateway_in(board: &Board, home: &fixtures::home::Home, name: &str) -> GatewaySpec {
    let target = board.target();
    GatewaySpec::new(
        target.program(),
        target.argv(["gateway", "run"]),
        home.root(),
        &home.root().join(format!("{name}.log")),
    )
    .env(fixtures::env::for_target(home, target))
    .readiness(Readiness::Immediate, Duration::ZERO)
    .stop_grace(STOP_GRACE)
}

/// Cards attempted per tick in the contests: the most calls a late refusal may find in flight
/// when one gateway dispatches.
const CONTEST_PER_TICK: u32 = 3;

/// Cards waiting when the provider starts refusing.
const CONTEST_CARDS: usize = 6;

/// A refusal that lands after the reference's 2 s probe window: each dispatcher has fanned out
/// to its per-tick slots by then, so two dispatchers pay for twice as many calls.
const LATE_REFUSAL: Duration = Duration::from_millis(2_500);

/// The board-wide pause after the refusal, where a target has one: it ends before the test
/// does, so the card created afterwards shows who dispatches.
const CONTEST_COOLDOWN: f64 = 8.0;

/// The config of the contests.
fn contest_config() -> Config {
    Config::gateway()
        .per_tick(CONTEST_PER_TICK)
        .cooldown(CONTEST_COOLDOWN)
        .backoff(0.0)
}

/// What a second gateway did while the first dispatched.
struct Contest {
    bills: usize,
    /// Whether the second gateway had ended, or had run its time to tick, before the cards came.
    second_up: Result<(), String>,
    /// The first gateway's scenario, stopped once the refusals landed.
    first: Seen,
    second_running: bool,
    second_exit: Option<fixtures::gateway::Exit>,
    second_log: String,
    /// Whether a card created after the first gateway stopped was decomposed by the second one
    /// (`None`: the second one was not running to take over).
    took_over: Option<bool>,
}

/// Starts `second` beside the running `first`, then lets a provider-wide refusal land late on
/// waiting cards: one dispatcher pays for at most its calls in flight, two pay for theirs each.
/// Then stops the first and, if the second still runs, shows it taking the board over.
fn contest(mut first: Scenario<'_>, second: GatewaySpec) -> Contest {
    let board = first.board();
    let target = board.target();
    let aux = board.aux();
    let first_start = first.time_to_first_bill();
    let second = Gateway::spawn(second);
    // Both are up (or the second has refused) before anything can be billed. Up means more than
    // a line in the log: a second gateway still starting while the refusals land pays for none
    // of them, and the count reads as one dispatcher's. It gets as long as the first took from
    // its start to its first call, twice over, plus two ticks.
    let second_had = fixtures::pace::ticking_after(first_start, target);
    let _ = try_wait_until(
        || {
            !second.running()
                || (second.log().contains("gateway started")
                    && second.started_at().elapsed() >= second_had)
        },
        target.readiness_timeout().max(second_had),
        "the second gateway to start",
    );
    let second_up = if second.ended_or_ran(second_had) {
        Ok(())
    } else {
        Err(format!(
            "the second gateway had run {:.1}s of the {:.1}s it needs to tick when the cards came",
            second.started_at().elapsed().as_secs_f64(),
            second_had.as_secs_f64()
        ))
    };
    let before = aux.mark();
    aux.reply_default(Reply::http_error(402, "insufficient quota").delayed(LATE_REFUSAL));
    for i in 0..CONTEST_CARDS {
        board.create(&format!("waiting card {i}"), &["--triage"]);
    }
    first
        .bills(1, || aux.bills_since(before), "any waiting card")
        .watch(LATE_REFUSAL * 2 + span_of_ticks(target, PROBE_TICKS));
    let bills = aux.bills_since(before);
    let first = first.stop();
    aux.reply_default(Reply::default_single());
    let second_running = second.running();
    let took_over = second_running.then(|| {
        let later = board.create("an idea for whoever dispatches now", &["--triage"]);
        try_wait_until(
            || board.rows().status(&later) != "triage",
            Duration::from_secs_f64(CONTEST_COOLDOWN) + target.first_bill_timeout(),
            "the second gateway to decompose a card once the first stopped",
        )
        .is_ok()
    });
    let second_exit = second.exit();
    let second_log = second.log();
    drop(second);
    Contest {
        bills,
        second_up,
        first,
        second_running,
        second_exit,
        second_log,
        took_over,
    }
}

fn judge_contest(board: &Board, contest: &Contest, how: &str) {
    bound(
        format!("bills for a late refusal with a second gateway {how}"),
        contest.bills,
    )
    .at_most(CONTEST_PER_TICK as usize)
    .over(&contest.first)
    .note(|| {
        format!(
            "every reply a 402 after {:.1}s; billed in order (the first ones before the \
             refusals): {:?}; {}; the second gateway {}",
            LATE_REFUSAL.as_secs_f64(),
            board.aux().billed_ids(),
            board.setting(Setting::PerTick),
            if contest.second_running {
                "kept running".to_owned()
            } else {
                format!("ended ({:?})", contest.second_exit)
            }
        )
    })
    .context(|| format!("second gateway's log:\n{}", contest.second_log))
    .provided(&contest.second_up)
    .gap(GapKind::SecondDispatcher);
    // Refusing is fine only with an error exit; waiting is fine only if it was truly waiting
    // for this board (it takes over once the first stops).
    let refused_with_an_error = matches!(
        contest.second_exit,
        Some(fixtures::gateway::Exit { code: Some(code), .. }) if code != 0
    );
    holds(
        format!(
            "a second gateway {how} refuses with an error exit, or waits and takes the board \
             over once the first stops"
        ),
        contest.took_over.unwrap_or(refused_with_an_error),
    )
    .over(&contest.first)
    .note(|| {
        format!(
            "exit: {:?}; took over: {:?}",
            contest.second_exit, contest.took_over
        )
    })
    .context(|| format!("second gateway's log:\n{}", contest.second_log))
    .gap(GapKind::SecondDispatcher);
}

#[rstest]
#[case::symlink(Link::Symlink)]
fn a_second_home_linking_the_same_board_file_never_dispatches_it_beside_the_first(
    #[case] link: Link,
    #[with(contest_config())] board: Board,
) {
    let mut first = board.scenario();
    first.start().prove_ticks(1);
    let home = linked_home(&board, link);
    let second = gateway_in(&board, &home, "linked-home-gateway");
    let contest = contest(first, second);
    judge_contest(
        &board,
        &contest,
        &format!("in a home whose kanban.db is a {link:?}"),
    );
}

/// A hard link to the board made while its gateway runs (a hard-linking snapshot backup does
/// this): a write through either name would go to that name's own write-ahead log, unseen by
/// processes on the other (acknowledged cards lost, a malformed file, cards billed again). No
/// write is acknowledged through either name while both exist, and once the extra name is gone
/// the gateway dispatches the board again.
#[rstest]
fn a_hard_link_made_while_the_gateway_runs_lets_no_write_through_either_name(
    #[with(Config::gateway())] board: Board,
) {
    let mut run = board.scenario();
    run.start().prove_ticks(1);
    let home = linked_home(&board, Link::Hardlink);
    // The second home's whole environment: its `kanban.db` is the link.
    let second_name = fixtures::env::for_target(&home, board.target());
    let mut writes = Vec::new();
    for (name, env) in [
        ("the board's own name", vec![]),
        ("the new link", second_name),
    ] {
        let output = board.cli_with_env(
            [
                "kanban",
                "create",
                &format!("created through {name}"),
                "--triage",
                "--json",
            ],
            env,
        );
        writes.push((name, output));
    }
    let acknowledged: Vec<&str> = writes
        .iter()
        .filter(|(_, output)| output.success())
        .map(|(name, _)| *name)
        .collect();
    let _ = std::fs::remove_file(home.db_path());
    let later = board.create("an idea once the link is gone", &["--triage"]);
    run.until_left_triage(&later, "the card created once the link is gone decomposed");
    let seen = run.stop();

    bound(
        "writes acknowledged while kanban.db has two hard links",
        acknowledged.len(),
    )
    .at_most(0)
    .note(|| format!("acknowledged through: {acknowledged:?}"))
    .context(|| {
        writes
            .iter()
            .map(|(name, output)| format!("through {name}:\n{output}"))
            .collect::<Vec<_>>()
            .join("\n")
    })
    .gap(GapKind::SecondDispatcher);
    holds(
        "the gateway dispatches the board again once the extra link is gone",
        board.rows().status(&later) != "triage",
    )
    .over(&seen)
    .context(|| board.diag(&later))
    .gap(GapKind::DispatcherBlocked);
}

/// The lock files a gateway may hold for `board`: its lock directory's, and upstream's two.
fn remove_lock_files(board: &Board) {
    let hermes_home = board.hermes_home();
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(board.home().lock_dir())
        .map(|entries| entries.flatten().map(|entry| entry.path()).collect())
        .unwrap_or_default();
    files.push(hermes_home.join("kanban").join(".dispatcher.lock"));
    files.push(hermes_home.join("kanban.db.dispatch.lock"));
    for file in files {
        // A lock file a target does not use is already what this wants.
        let _ = std::fs::remove_file(file);
    }
}

#[rstest]
fn lock_files_deleted_under_a_running_gateway_do_not_let_a_second_one_dispatch(
    #[with(contest_config())] board: Board,
) {
    let mut first = board.scenario();
    first.start().prove_ticks(1);
    remove_lock_files(&board);
    let contest = contest(first, another_gateway_spec(&board, "second-gateway"));
    judge_contest(
        &board,
        &contest,
        "started after the lock files were deleted",
    );
}
