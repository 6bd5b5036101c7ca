//! The gateway as a real process against a real fake provider and a real board file: what it
//! bills and records when the world misbehaves around it — a log pipe that closes, a disk that
//! cannot take a write, a board file deleted or replaced under it, a SIGKILL mid-call — and how
//! its claims keep every other process (a person's `decompose ID`, a sweep, a second gateway)
//! from paying for a card it has in flight.

use std::path::Path;
use std::time::Duration;

use crate::support::Scratch;
use fixtures::aux_model::{AuxModel, Reply};
use fixtures::cli::CliOutput;
use fixtures::gateway::Gateway;
use fixtures::limits::set_file_size_limit;
use fixtures::wait::wait_until_or;
use rusqlite::{Connection, OpenFlags};
use serde_json::{json, Value};

/// How long any wait for the gateway may take before the test fails.
const WAIT: Duration = Duration::from_secs(20);

/// A fake provider answering every request with a single-task spec after `delay`, or with
/// `status`.
fn provider(delay: Duration, status: u16) -> AuxModel {
    let reply = if status == 200 {
        let content = json!({"fanout": false, "rationale": "small enough",
                             "title": "Specified", "body": "Done when it is done."});
        Reply::text(content.to_string())
    } else {
        Reply::raw(status, "text/plain", Vec::new())
    };
    let provider = AuxModel::start();
    provider.reply_default(reply.delayed(delay));
    provider
}

/// These tests are about the decompose half: no workers (`max_spawn: 0`), so a decomposed
/// card's worker never adds its own requests and rows (the spawn half is `workers`').
fn config(provider_url: &str, extra: &str) -> String {
    format!(
        "model:\n  base_url: {provider_url}\n  default: decomposer-test\n\
         auxiliary:\n  transient_retries: 0\n  timeout_seconds: 30\n\
         kanban:\n  dispatch_interval_seconds: 0.1\n  auto_decompose_per_tick: 10\n  max_spawn: 0\n{extra}"
    )
}

/// How many lines of `gateway`'s log contain `needle`.
fn count(gateway: &Gateway, needle: &str) -> usize {
    gateway.log().lines().filter(|l| l.contains(needle)).count()
}

/// A second gateway on `scratch`'s board, with its own lock directory.
fn second_gateway(scratch: &Scratch) -> Gateway {
    let locks = scratch.root().join("other-locks");
    Gateway::spawn(
        scratch
            .gateway_spec(&[])
            .env_var("HERMES_GATEWAY_LOCK_DIR", locks),
    )
}

fn read_only(db: &Path) -> Connection {
    let conn = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    conn
}

fn status(db: &Path, card: &str) -> String {
    read_only(db)
        .query_row("SELECT status FROM tasks WHERE id = ?1", [card], |r| {
            r.get(0)
        })
        .unwrap_or_default()
}

fn ledger_outcomes(db: &Path, card: &str) -> Vec<String> {
    let conn = read_only(db);
    let mut stmt = conn
        .prepare("SELECT outcome FROM hermes_aux_ledger WHERE task_id = ?1 ORDER BY id")
        .unwrap();
    let rows = stmt.query_map([card], |r| r.get(0)).unwrap();
    rows.collect::<Result<_, _>>().unwrap()
}

fn usage(scratch: &Scratch) -> Value {
    scratch.json(&["kanban", "usage", "--json"])
}

#[test]
fn a_closed_log_pipe_does_not_stop_the_gateway() {
    let provider = provider(Duration::ZERO, 200);
    let scratch = Scratch::new();
    scratch.write_config(&config(&provider.base_url(), ""));
    let gateway = Gateway::spawn(scratch.gateway_spec(&[]).log_through_pipe());
    // What `gateway run 2>&1 | tee log` sees when tee exits: the reading end goes away.
    gateway.close_log_pipe();

    let card = scratch.create("logged into the void", &["--triage"]);
    wait_until_or(
        || status(&scratch.db(), &card) != "triage" || !gateway.running(),
        WAIT,
        "the card to be decomposed with nobody reading the log",
        || "the card stayed in triage".to_owned(),
    );
    assert!(gateway.running(), "the gateway died: {:?}", gateway.exit());
    assert_eq!(status(&scratch.db(), &card), "ready");
    assert_eq!(provider.billed_for(&card), 1);
    assert_eq!(
        gateway.stop().exit_code,
        Some(0),
        "a clean stop after losing its log"
    );
}

#[test]
fn a_board_that_cannot_be_written_costs_nothing_and_is_reported_once_with_its_cause() {
    let provider = provider(Duration::ZERO, 200);
    let scratch = Scratch::new();
    scratch.write_config(&config(&provider.base_url(), ""));
    scratch.ok(&["kanban", "init"]);
    // A write past the file size limit then fails with EFBIG instead of killing the process, as
    // a full disk does; its log goes through a pipe, which the limit does not touch.
    let gateway = Gateway::spawn(
        scratch
            .gateway_spec(&[])
            .ignore_file_size_signal()
            .log_through_pipe(),
    );
    // A first card shows the gateway ticking with its board open; then the disk "fills".
    let before = scratch.create("decomposed before", &["--triage"]);
    wait_until_or(
        || status(&scratch.db(), &before) == "ready",
        WAIT,
        "the first card",
        || gateway.log(),
    );
    set_file_size_limit(gateway.pid(), Some(1)).unwrap();
    let card = scratch.create("waits for disk space", &["--triage"]);
    wait_until_or(
        || count(&gateway, "cannot record an attempt") > 0,
        WAIT,
        "the gateway to report that it cannot record the attempt",
        || gateway.log(),
    );
    // Many ticks later (0.1 s each): still one WARN for the one condition, no request at all.
    std::thread::sleep(Duration::from_millis(1_500));
    assert_eq!(
        count(&gateway, "cannot record an attempt"),
        1,
        "{}",
        gateway.log()
    );
    assert_eq!(count(&gateway, "disk I/O error"), 1, "{}", gateway.log());
    let warn = gateway
        .log()
        .lines()
        .find(|l| l.contains("cannot record an attempt"))
        .map(str::to_owned)
        .unwrap_or_default();
    assert!(
        warn.contains("committing: disk I/O error"),
        "the WARN keeps the cause, not only the step: {warn}"
    );
    assert_eq!(provider.billed_for(&card), 0, "no request without a record");
    assert!(gateway.running());

    // The condition clears: the card is attempted, once.
    set_file_size_limit(gateway.pid(), None).unwrap();
    wait_until_or(
        || status(&scratch.db(), &card) != "triage",
        WAIT,
        "the card to be decomposed once the board takes writes again",
        || gateway.log(),
    );
    assert_eq!(provider.billed_for(&card), 1);
    wait_until_or(
        || count(&gateway, "attempts can be recorded again") == 1,
        WAIT,
        "the recovery to be logged",
        || gateway.log(),
    );
    assert_eq!(gateway.stop().exit_code, Some(0));
}

#[test]
fn a_board_file_deleted_or_replaced_under_the_gateway_is_reopened() {
    let provider = provider(Duration::ZERO, 200);
    let scratch = Scratch::new();
    scratch.write_config(&config(&provider.base_url(), ""));
    let first = scratch.create("on the first board", &["--triage"]);
    let gateway = scratch.gateway(&[], &[]);
    wait_until_or(
        || status(&scratch.db(), &first) == "ready",
        WAIT,
        "the first card",
        || gateway.log(),
    );

    // Deleted: the next command (and the gateway) creates a fresh board at the same path.
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", scratch.db().display()));
    }
    let second = scratch.create("on a fresh board", &["--triage"]);
    wait_until_or(
        || status(&scratch.db(), &second) == "ready",
        WAIT,
        "the card on the recreated board",
        || gateway.log(),
    );

    // Replaced: a board moved into place over the open one.
    let other = Scratch::new();
    let third = other.create("on a board moved into place", &["--triage"]);
    // hermes leaves a board's last commits in its WAL; a plain SQLite close folds them into the
    // file, so the file alone is the whole board (as a backup made with sqlite3 would be).
    let plain = Connection::open(other.db()).unwrap();
    plain
        .query_row("SELECT count(*) FROM tasks", [], |r| r.get::<_, i64>(0))
        .unwrap();
    drop(plain);
    assert!(!Path::new(&format!("{}-wal", other.db().display())).exists());
    for suffix in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", scratch.db().display()));
    }
    std::fs::rename(other.db(), scratch.db()).unwrap();
    wait_until_or(
        || status(&scratch.db(), &third) == "ready",
        WAIT,
        "the card on the replacement board",
        || gateway.log(),
    );
    assert!(gateway.running());
    // Whether the gateway saw the path empty or already holding the next command's fresh
    // board depends on timing; either way, one WARN per change of file.
    assert_eq!(
        count(&gateway, "while the gateway ran; reopened it"),
        2,
        "{}",
        gateway.log()
    );
    assert_eq!(
        count(
            &gateway,
            "kanban.db was replaced by another file while the gateway ran"
        ),
        count(&gateway, "while the gateway ran; reopened it")
            - count(&gateway, "kanban.db was deleted while"),
        "{}",
        gateway.log()
    );
    for card in [&first, &second, &third] {
        assert_eq!(provider.billed_for(card), 1, "{card}");
    }
    assert_eq!(gateway.stop().exit_code, Some(0));
}

#[test]
fn a_request_left_in_flight_by_a_sigkill_is_closed_as_unknown_at_the_next_start() {
    let provider = provider(Duration::from_secs(60), 200);
    let scratch = Scratch::new();
    // One attempt per card: the killed one was its last (B1 must hold after the restart).
    scratch.write_config(&config(
        &provider.base_url(),
        "  decompose_max_attempts: 1\n  decompose_backoff_seconds: 0\n",
    ));
    let card = scratch.create("killed mid-call", &["--triage"]);
    let gateway = scratch.gateway(&[], &[]);
    wait_until_or(
        || provider.billed_for(&card) == 1,
        WAIT,
        "the request to reach the provider",
        || gateway.log(),
    );
    gateway.kill9();
    assert_eq!(ledger_outcomes(&scratch.db(), &card), ["in_flight"]);

    let restarted = scratch.gateway(&[], &[]);
    // The row is closed before the WARN about it is written: wait for both.
    wait_until_or(
        || {
            ledger_outcomes(&scratch.db(), &card) == ["unknown"]
                && count(&restarted, "as `unknown` (maybe billed") >= 1
        },
        WAIT,
        "the row to be closed and reported",
        || restarted.log(),
    );
    // Not a stand-in for a condition: nothing may happen in this span (ten ticks), which is
    // what is being watched.
    std::thread::sleep(Duration::from_millis(1_000));
    assert_eq!(
        count(&restarted, "as `unknown` (maybe billed"),
        1,
        "reported once\n{}",
        restarted.log()
    );
    assert_eq!(provider.billed_for(&card), 1, "never billed again (B1)");
    assert_eq!(status(&scratch.db(), &card), "triage");
    let usage = usage(&scratch);
    assert_eq!(usage["totals"]["unknown"], json!(1), "{usage}");
    assert_eq!(usage["totals"]["calls"], json!(1), "{usage}");
    assert_eq!(usage["window"]["calls_last_hour"], json!(1), "{usage}");
    assert_eq!(usage["cards"][0]["parked"], json!(true), "{usage}");
    assert!(restarted.running());
    assert_eq!(restarted.stop().exit_code, Some(0));
}

fn decompose(scratch: &Scratch, card: &str) -> CliOutput {
    scratch.run(&["kanban", "decompose", card, "--json"])
}

#[test]
fn a_card_the_gateway_has_in_flight_is_paid_for_by_nobody_else() {
    let provider = provider(Duration::from_secs(4), 200);
    let scratch = Scratch::new();
    // Backoff 0: the provisional due time no longer protects the card; only the claim does.
    scratch.write_config(&config(
        &provider.base_url(),
        "  decompose_backoff_seconds: 0\n",
    ));
    let card = scratch.create("slow to answer", &["--triage"]);
    let gateway = scratch.gateway(&[], &[]);
    wait_until_or(
        || provider.billed_for(&card) == 1,
        WAIT,
        "the gateway's request",
        || gateway.log(),
    );

    // A person's explicit attempt: refused, with when the claim ends, and no request.
    let by_hand = decompose(&scratch, &card);
    assert_eq!(by_hand.code, Some(1), "{by_hand:#?}");
    assert!(
        by_hand
            .stderr
            .contains("claimed by a decompose attempt in flight (gateway, pid")
            && by_hand.stderr.contains("until at least")
            && by_hand.stderr.contains("no request was sent"),
        "{}",
        by_hand.stderr
    );
    assert_eq!(by_hand.json()["ok"], json!(false));
    let shown = scratch.ok(&["kanban", "show", &card]);
    assert!(
        shown.stdout.contains("in flight: attempt 1 (gateway, pid"),
        "{}",
        shown.stdout
    );
    // A sweep: skips it.
    let sweep = scratch.run(&["kanban", "decompose", "--all", "--json"]);
    assert_eq!(sweep.stdout, "", "{sweep:#?}");
    // A second gateway, with its own lock directory: does not pay for it either.
    let second = second_gateway(&scratch);
    wait_until_or(
        || status(&scratch.db(), &card) != "triage",
        WAIT,
        "the first gateway's answer to be applied",
        || format!("{}\n---\n{}", gateway.log(), second.log()),
    );
    assert_eq!(provider.billed_for(&card), 1, "one card, one paid call");
    assert_eq!(second.stop().exit_code, Some(0));
    assert_eq!(gateway.stop().exit_code, Some(0));
}

#[test]
fn two_gateways_on_one_board_bill_each_card_once() {
    let provider = provider(Duration::from_millis(700), 200);
    let scratch = Scratch::new();
    scratch.write_config(&config(
        &provider.base_url(),
        "  decompose_backoff_seconds: 0\n",
    ));
    let cards: Vec<String> = (0..6)
        .map(|i| scratch.create(&format!("card {i}"), &["--triage"]))
        .collect();
    let one = scratch.gateway(&[], &[]);
    let two = second_gateway(&scratch);
    wait_until_or(
        || cards.iter().all(|c| status(&scratch.db(), c) != "triage"),
        WAIT,
        "every card decomposed",
        || {
            format!(
                "{:?}\n{}\n---\n{}",
                provider.billed_ids(),
                one.log(),
                two.log()
            )
        },
    );
    for card in &cards {
        assert_eq!(
            provider.billed_for(card),
            1,
            "{card}: {:?}",
            provider.billed_ids()
        );
    }
    assert_eq!(one.stop().exit_code, Some(0));
    assert_eq!(two.stop().exit_code, Some(0));
}

/// The pause in force, as `kanban usage --json` shows it (unix seconds).
fn pause_until(scratch: &Scratch) -> Option<f64> {
    usage(scratch)["pause"]["until"].as_f64()
}

#[test]
fn a_refusal_after_the_probe_window_costs_at_most_the_calls_already_in_flight() {
    // Every answer is a 402 that takes longer than the gateway's 2 s probe window, so the
    // gateway has fanned out (up to its per-tick slots) before the first refusal lands.
    let provider = provider(Duration::from_millis(2_500), 402);
    let scratch = Scratch::new();
    scratch.write_config(&format!(
        "model:\n  base_url: {}\n  default: decomposer-test\n\
         auxiliary:\n  transient_retries: 0\n  timeout_seconds: 30\n\
         kanban:\n  dispatch_interval_seconds: 0.1\n  auto_decompose_per_tick: 3\n  max_spawn: 0\n\
         \x20 provider_cooldown_seconds: 120\n  decompose_backoff_seconds: 0\n",
        provider.base_url()
    ));
    let cards: Vec<String> = (0..6)
        .map(|i| scratch.create(&format!("card {i}"), &["--triage"]))
        .collect();
    let gateway = scratch.gateway(&[], &[]);
    wait_until_or(
        || pause_until(&scratch).is_some(),
        WAIT,
        "the first refusal's pause",
        || gateway.log(),
    );
    let first_pause = pause_until(&scratch);
    // Every request already sent answers (with its own 402) within one more delay.
    let in_flight = || {
        cards
            .iter()
            .flat_map(|c| ledger_outcomes(&scratch.db(), c))
            .filter(|o| o == "in_flight")
            .count()
    };
    wait_until_or(
        || in_flight() == 0,
        WAIT,
        "the calls in flight to land",
        || gateway.log(),
    );
    std::thread::sleep(Duration::from_millis(500));
    let bills = provider.bills();
    assert!(
        (1..=3).contains(&bills),
        "a late refusal costs at most the calls already in flight (auto_decompose_per_tick: 3), \
         not one per card: {bills} bills: {:?}",
        provider.billed_ids()
    );
    // `usage` converts the pause's end from the boot's clock to wall time as it reads it, so two
    // reads may differ by a millisecond; a refusal that extended the pause would move it by the
    // ~2 s between the first answer and the later ones.
    let (now, first) = (pause_until(&scratch), first_pause);
    assert!(
        matches!((now, first), (Some(now), Some(first)) if (now - first).abs() < 0.01),
        "refusals of calls that were in flight together do not extend the pause: \
         {now:?} after them, {first:?} at the first"
    );
    let outcomes: Vec<String> = cards
        .iter()
        .flat_map(|c| ledger_outcomes(&scratch.db(), c))
        .collect();
    assert_eq!(outcomes.len(), bills);
    assert!(outcomes.iter().all(|o| o == "billing"), "{outcomes:?}");
    assert_eq!(gateway.stop().exit_code, Some(0));
}

#[test]
fn a_sweep_first_closes_requests_a_dead_process_left_in_flight() {
    let provider = provider(Duration::ZERO, 200);
    let scratch = Scratch::new();
    scratch.write_config(&config(&provider.base_url(), ""));
    let card = scratch.create("left in flight", &["--triage"]);
    // What a process killed mid-call by an older build leaves: an open row and no claim.
    let conn = Connection::open(scratch.db()).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    conn.execute(
        "INSERT INTO hermes_aux_ledger (task_id, purpose, origin, attempt, try, started_at_ms, outcome)
         VALUES (?1, 'decompose', 'gateway', 1, 1, 1, 'in_flight')",
        [&card],
    )
    .unwrap();
    drop(conn);

    let sweep = scratch.run(&["kanban", "decompose", "--all", "--json"]);
    assert_eq!(sweep.code, Some(0), "{sweep:#?}");
    assert!(
        sweep
            .stderr
            .contains("closed 1 ledger row(s) left in flight by an attempt that did not record"),
        "{}",
        sweep.stderr
    );
    assert_eq!(ledger_outcomes(&scratch.db(), &card), ["unknown", "ok"]);
    let usage = usage(&scratch);
    assert_eq!(
        (&usage["totals"]["calls"], &usage["totals"]["unknown"]),
        (&json!(2), &json!(1)),
        "{usage}"
    );
}
