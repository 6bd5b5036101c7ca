//! The gateway as a real process against a real fake provider and a real board file: what it
//! bills and records when the world misbehaves around it — a log pipe that closes, a disk that
//! cannot take a write, a board file deleted or replaced under it, a SIGKILL mid-call — and how
//! its claims keep every other process (a person's `decompose ID`, a sweep, a second gateway)
//! from paying for a card it has in flight.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStderr, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::{Out, Scratch};
use fixtures::aux_model::{AuxModel, Reply};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
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

fn config(provider_url: &str, extra: &str) -> String {
    format!(
        "model:\n  base_url: {provider_url}\n  default: decomposer-test\n\
         auxiliary:\n  transient_retries: 0\n  timeout_seconds: 30\n\
         kanban:\n  dispatch_interval_seconds: 0.1\n  auto_decompose_per_tick: 10\n{extra}"
    )
}

/// A running `hermes gateway run`, its stderr collected line by line. Killed on drop.
struct Gateway {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Gateway {
    fn start(scratch: &Scratch) -> Gateway {
        Gateway::start_with(scratch, &[], |_| {})
    }

    /// Starts the gateway with extra environment, letting `setup` adjust the command.
    fn start_with(
        scratch: &Scratch,
        env: &[(&str, &Path)],
        setup: impl FnOnce(&mut std::process::Command),
    ) -> Gateway {
        let mut cmd = scratch.command(&["gateway", "run"]);
        for (key, value) in env {
            cmd.env(key, value);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        setup(&mut cmd);
        let mut child = cmd.spawn().expect("spawning the gateway");
        let stderr = child.stderr.take().expect("stderr is piped");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let mut gateway = Gateway {
            child,
            lines: lines.clone(),
        };
        let mut reader = BufReader::new(stderr);
        let mut first = String::new();
        let _ = reader.read_line(&mut first);
        assert!(
            first.contains("gateway started"),
            "the gateway did not start: {first:?} {:?}",
            gateway.child.try_wait()
        );
        lines.lock().unwrap().push(first);
        gateway.collect(reader);
        gateway
    }

    fn collect(&mut self, reader: BufReader<ChildStderr>) {
        let lines = self.lines.clone();
        std::thread::spawn(move || {
            for line in reader.lines().map_while(Result::ok) {
                lines.lock().unwrap().push(line);
            }
        });
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn log(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    fn count(&self, needle: &str) -> usize {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(needle))
            .count()
    }

    fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGTERM, then the exit code.
    fn stop(mut self) -> Option<i32> {
        let _ = kill(Pid::from_raw(self.pid() as i32), Signal::SIGTERM);
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool, diag: impl Fn() -> String) {
    let started = Instant::now();
    while !done() {
        assert!(
            started.elapsed() < WAIT,
            "timed out waiting for {what}\n{}",
            diag()
        );
        std::thread::sleep(Duration::from_millis(25));
    }
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
    let mut cmd = scratch.command(&["gateway", "run"]);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut reader = BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    reader.read_line(&mut first).unwrap();
    assert!(first.contains("gateway started"), "{first}");
    // What `gateway run 2>&1 | tee log` sees when tee exits: the reading end goes away.
    drop(reader);

    let card = scratch.create("logged into the void", &["--triage"]);
    wait_until(
        "the card to be decomposed with nobody reading the log",
        || status(&scratch.db(), &card) != "triage" || !matches!(child.try_wait(), Ok(None)),
        || "the card stayed in triage".to_owned(),
    );
    assert!(
        matches!(child.try_wait(), Ok(None)),
        "the gateway died: {:?}",
        child.try_wait()
    );
    assert_eq!(status(&scratch.db(), &card), "ready");
    assert_eq!(provider.billed_for(&card), 1);
    let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
    let exit = child.wait().unwrap();
    assert_eq!(exit.code(), Some(0), "a clean stop after losing its log");
}

/// Sets the gateway's file size limit: 1 byte makes every write to the board fail, as a full
/// disk does (the process's log goes to a pipe, which the limit does not touch).
fn limit_file_size(pid: u32, bytes: u64) {
    let limit = nix::libc::rlimit {
        rlim_cur: bytes,
        rlim_max: nix::libc::RLIM_INFINITY,
    };
    // SAFETY: prlimit only reads `limit`; a null old-limit pointer is allowed.
    let rc = unsafe {
        nix::libc::prlimit(
            pid as nix::libc::pid_t,
            nix::libc::RLIMIT_FSIZE,
            &limit,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(rc, 0, "prlimit: {}", std::io::Error::last_os_error());
}

#[test]
fn a_board_that_cannot_be_written_costs_nothing_and_is_reported_once_with_its_cause() {
    let provider = provider(Duration::ZERO, 200);
    let scratch = Scratch::new();
    scratch.write_config(&config(&provider.base_url(), ""));
    scratch.ok(&["kanban", "init"]);
    let mut gateway = Gateway::start_with(&scratch, &[], |cmd| {
        // SAFETY: between fork and exec this only sets a signal disposition (no allocation,
        // no locks). An ignored SIGXFSZ survives exec, so a write past the limit fails with
        // EFBIG instead of killing the process.
        unsafe {
            cmd.pre_exec(|| {
                nix::sys::signal::signal(Signal::SIGXFSZ, nix::sys::signal::SigHandler::SigIgn)
                    .map(|_| ())
                    .map_err(|errno| std::io::Error::from_raw_os_error(errno as i32))
            });
        }
    });
    // A first card shows the gateway ticking with its board open; then the disk "fills".
    let before = scratch.create("decomposed before", &["--triage"]);
    wait_until(
        "the first card",
        || status(&scratch.db(), &before) == "ready",
        || gateway.log(),
    );
    limit_file_size(gateway.pid(), 1);
    let card = scratch.create("waits for disk space", &["--triage"]);
    wait_until(
        "the gateway to report that it cannot record the attempt",
        || gateway.count("cannot record an attempt") > 0,
        || gateway.log(),
    );
    // Many ticks later (0.1 s each): still one WARN for the one condition, no request at all.
    std::thread::sleep(Duration::from_millis(1_500));
    assert_eq!(
        gateway.count("cannot record an attempt"),
        1,
        "{}",
        gateway.log()
    );
    assert_eq!(gateway.count("disk I/O error"), 1, "{}", gateway.log());
    let warn = gateway
        .lines
        .lock()
        .unwrap()
        .iter()
        .find(|l| l.contains("cannot record an attempt"))
        .cloned()
        .unwrap_or_default();
    assert!(
        warn.contains("committing: disk I/O error"),
        "the WARN keeps the cause, not only the step: {warn}"
    );
    assert_eq!(provider.billed_for(&card), 0, "no request without a record");
    assert!(gateway.running());

    // The condition clears: the card is attempted, once.
    limit_file_size(gateway.pid(), nix::libc::RLIM_INFINITY);
    wait_until(
        "the card to be decomposed once the board takes writes again",
        || status(&scratch.db(), &card) != "triage",
        || gateway.log(),
    );
    assert_eq!(provider.billed_for(&card), 1);
    wait_until(
        "the recovery to be logged",
        || gateway.count("attempts can be recorded again") == 1,
        || gateway.log(),
    );
    assert_eq!(gateway.stop(), Some(0));
}

#[test]
fn a_board_file_deleted_or_replaced_under_the_gateway_is_reopened() {
    let provider = provider(Duration::ZERO, 200);
    let scratch = Scratch::new();
    scratch.write_config(&config(&provider.base_url(), ""));
    let first = scratch.create("on the first board", &["--triage"]);
    let mut gateway = Gateway::start(&scratch);
    wait_until(
        "the first card",
        || status(&scratch.db(), &first) == "ready",
        || gateway.log(),
    );

    // Deleted: the next command (and the gateway) creates a fresh board at the same path.
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", scratch.db().display()));
    }
    let second = scratch.create("on a fresh board", &["--triage"]);
    wait_until(
        "the card on the recreated board",
        || status(&scratch.db(), &second) == "ready",
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
    wait_until(
        "the card on the replacement board",
        || status(&scratch.db(), &third) == "ready",
        || gateway.log(),
    );
    assert!(gateway.running());
    // Whether the gateway saw the path empty or already holding the next command's fresh
    // board depends on timing; either way, one WARN per change of file.
    assert_eq!(
        gateway.count("while the gateway ran; reopened it"),
        2,
        "{}",
        gateway.log()
    );
    assert_eq!(
        gateway.count("kanban.db was replaced by another file while the gateway ran"),
        gateway.count("while the gateway ran; reopened it")
            - gateway.count("kanban.db was deleted while"),
        "{}",
        gateway.log()
    );
    for card in [&first, &second, &third] {
        assert_eq!(provider.billed_for(card), 1, "{card}");
    }
    assert_eq!(gateway.stop(), Some(0));
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
    let gateway = Gateway::start(&scratch);
    wait_until(
        "the request to reach the provider",
        || provider.billed_for(&card) == 1,
        || gateway.log(),
    );
    gateway.kill9();
    assert_eq!(ledger_outcomes(&scratch.db(), &card), ["in_flight"]);

    let mut restarted = Gateway::start(&scratch);
    // The row is closed before the WARN about it is written: wait for both.
    wait_until(
        "the row to be closed and reported",
        || {
            ledger_outcomes(&scratch.db(), &card) == ["unknown"]
                && restarted.count("as `unknown` (maybe billed") >= 1
        },
        || restarted.log(),
    );
    // Not a stand-in for a condition: nothing may happen in this span (ten ticks), which is
    // what is being watched.
    std::thread::sleep(Duration::from_millis(1_000));
    assert_eq!(
        restarted.count("as `unknown` (maybe billed"),
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
    assert_eq!(restarted.stop(), Some(0));
}

fn decompose(scratch: &Scratch, card: &str) -> Out {
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
    let gateway = Gateway::start(&scratch);
    wait_until(
        "the gateway's request",
        || provider.billed_for(&card) == 1,
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
    let locks = scratch.dir.path().join("other-locks");
    let second = Gateway::start_with(&scratch, &[("HERMES_GATEWAY_LOCK_DIR", &locks)], |_| {});
    wait_until(
        "the first gateway's answer to be applied",
        || status(&scratch.db(), &card) != "triage",
        || format!("{}\n---\n{}", gateway.log(), second.log()),
    );
    assert_eq!(provider.billed_for(&card), 1, "one card, one paid call");
    assert_eq!(second.stop(), Some(0));
    assert_eq!(gateway.stop(), Some(0));
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
    let locks = scratch.dir.path().join("other-locks");
    let one = Gateway::start(&scratch);
    let two = Gateway::start_with(&scratch, &[("HERMES_GATEWAY_LOCK_DIR", &locks)], |_| {});
    wait_until(
        "every card decomposed",
        || cards.iter().all(|c| status(&scratch.db(), c) != "triage"),
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
    assert_eq!(one.stop(), Some(0));
    assert_eq!(two.stop(), Some(0));
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
         kanban:\n  dispatch_interval_seconds: 0.1\n  auto_decompose_per_tick: 3\n\
         \x20 provider_cooldown_seconds: 120\n  decompose_backoff_seconds: 0\n",
        provider.base_url()
    ));
    let cards: Vec<String> = (0..6)
        .map(|i| scratch.create(&format!("card {i}"), &["--triage"]))
        .collect();
    let gateway = Gateway::start(&scratch);
    wait_until(
        "the first refusal's pause",
        || pause_until(&scratch).is_some(),
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
    wait_until(
        "the calls in flight to land",
        || in_flight() == 0,
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
    assert_eq!(
        pause_until(&scratch),
        first_pause,
        "refusals of calls that were in flight together do not extend the pause"
    );
    let outcomes: Vec<String> = cards
        .iter()
        .flat_map(|c| ledger_outcomes(&scratch.db(), c))
        .collect();
    assert_eq!(outcomes.len(), bills);
    assert!(outcomes.iter().all(|o| o == "billing"), "{outcomes:?}");
    assert_eq!(gateway.stop(), Some(0));
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
