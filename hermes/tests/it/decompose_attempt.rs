//! `run_attempt` end to end against the suite's fake provider and a scratch board: what one
//! attempt pays for (B1, B9), how it fails (B3, B5, B8), when the card is due again (B2), and that
//! a card which left triage during the call gets no rows (B4).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fixtures::aux_model::{AuxModel, Reply};
use hermes::config::Config;
use hermes::core::{Applied, AttemptOutcome, ProviderFault};
use hermes::decompose::attempt::{
    run_attempt, run_manual_attempt, AttemptContext, AttemptError, SHUTDOWN_ANSWER_WAIT,
};
use hermes::store::{now_ms, BeginRefusal, DecomposeState, NewTask, Origin, Status, Store};
use rstest::rstest;
use rusqlite::{Connection, OpenFlags};
use serde_json::{json, Value};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use fixtures::wait::wait_until;

use crate::support::{block_on, spawn};

const PROMPT_TOKENS: u64 = 120;
const COMPLETION_TOKENS: u64 = 34;

/// How long a test waits for a request to reach the provider.
const ARRIVAL: Duration = Duration::from_secs(10);

/// Waits until `reached` says the request reached the provider; panics after [`ARRIVAL`].
#[track_caller]
fn arrived(what: &str, reached: impl FnMut() -> bool) {
    wait_until(reached, ARRIVAL, what);
}

fn chat_reply(content: &str) -> Reply {
    json_reply(
        200,
        &json!({
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": COMPLETION_TOKENS,
                      "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS}
        }),
    )
}

/// `value` as a JSON body with `status`.
fn json_reply(status: u16, value: &Value) -> Reply {
    Reply::raw(status, "application/json", value.to_string())
}

/// An empty reply with `status`.
fn status_only(status: u16) -> Reply {
    Reply::raw(status, "text/plain", Vec::new())
}

fn three_child_graph() -> String {
    json!({
        "fanout": true,
        "rationale": "three steps",
        "tasks": [
            {"title": "Design the schema", "body": "tables and indexes", "assignee": "coder", "parents": []},
            {"title": "Write the migration", "body": "additive only", "assignee": null, "parents": [0]},
            {"title": "Review", "body": "", "assignee": "default", "parents": [0, 1]},
        ]
    })
    .to_string()
}

/// A provider answering every chat-completions POST with `reply`.
fn provider(reply: Reply) -> AuxModel {
    let server = AuxModel::start();
    server.reply_default(reply);
    server
}

/// The chat-completions requests the provider received.
fn requests(server: &AuxModel) -> Vec<Value> {
    server.aux_requests()
}

/// A scratch board with one triage card.
struct Board {
    _dir: tempfile::TempDir,
    db: PathBuf,
    card: String,
}

impl Board {
    fn new(title: &str) -> Board {
        Board::with(NewTask {
            title: title.into(),
            body: Some("the details".into()),
            triage: true,
            ..NewTask::default()
        })
    }

    fn with(task: NewTask) -> Board {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("kanban.db");
        let card = Store::open(&db).unwrap().create_task(&task).unwrap().id;
        Board {
            _dir: dir,
            db,
            card,
        }
    }

    fn store(&self) -> Store {
        Store::open(&self.db).unwrap()
    }

    /// Another triage card on the same board, for what the board-wide guards do to it.
    fn another_card(&self, title: &str) -> String {
        self.store()
            .create_task(&NewTask {
                title: title.into(),
                triage: true,
                ..NewTask::default()
            })
            .unwrap()
            .id
    }

    fn state(&self) -> DecomposeState {
        self.store().get(&self.card).unwrap().decompose.unwrap()
    }

    fn event_kinds(&self) -> Vec<String> {
        let events = self.store().events_of(&self.card).unwrap();
        events.into_iter().map(|e| e.kind).collect()
    }

    fn payloads(&self, kind: &str) -> Vec<Value> {
        let events = self.store().events_of(&self.card).unwrap();
        events
            .into_iter()
            .filter(|e| e.kind == kind)
            .map(|e| e.payload.unwrap_or(Value::Null))
            .collect()
    }

    fn ledger(&self) -> Vec<LedgerRow> {
        ledger_rows(&self.db)
    }

    fn count(&self, table: &str) -> i64 {
        read_only(&self.db)
            .query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
            .unwrap()
    }
}

fn read_only(db: &Path) -> Connection {
    let conn = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    conn
}

#[derive(Debug, Clone, PartialEq)]
struct LedgerRow {
    origin: String,
    attempt: u32,
    try_no: u32,
    outcome: String,
    http_status: Option<u16>,
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    closed: bool,
}

fn ledger_rows(db: &Path) -> Vec<LedgerRow> {
    let conn = read_only(db);
    let mut stmt = conn
        .prepare(
            "SELECT origin, attempt, try, outcome, http_status, prompt_tokens, completion_tokens,
                    ended_at_ms IS NOT NULL
             FROM hermes_aux_ledger ORDER BY id",
        )
        .unwrap();
    let rows = stmt
        .query_map([], |r| {
            Ok(LedgerRow {
                origin: r.get(0)?,
                attempt: r.get(1)?,
                try_no: r.get(2)?,
                outcome: r.get(3)?,
                http_status: r.get(4)?,
                prompt_tokens: r.get::<_, Option<i64>>(5)?.map(|n| n as u64),
                completion_tokens: r.get::<_, Option<i64>>(6)?.map(|n| n as u64),
                closed: r.get(7)?,
            })
        })
        .unwrap();
    rows.collect::<Result<_, _>>().unwrap()
}

fn config(server: &AuxModel) -> Config {
    let mut config = Config::default();
    config.model.base_url = Some(server.base_url());
    config.model.default = Some("decomposer-test".into());
    config.auxiliary.transient_retries = 0;
    config.auxiliary.timeout = Duration::from_secs(10);
    config.kanban.decompose_backoff = Duration::from_secs(60);
    config
}

fn context(config: Config, board: &Board) -> AttemptContext {
    AttemptContext::new(
        Arc::new(config),
        Some("sk-test-key".into()),
        vec!["coder".into(), "default".into()],
        board.db.clone(),
    )
    .unwrap()
}

/// The shutdown signal and its sender; the sender must outlive the attempt, since a closed
/// channel reads as a shutdown.
fn running() -> (watch::Sender<bool>, watch::Receiver<bool>) {
    watch::channel(false)
}

/// The board card's automatic attempt, started on the runtime under `shutdown` and returned once
/// its request has reached `server`: the test acts while that call is out.
fn attempt_in_flight(
    ctx: AttemptContext,
    board: &Board,
    server: &AuxModel,
    shutdown: watch::Receiver<bool>,
) -> JoinHandle<Result<AttemptOutcome, AttemptError>> {
    let card = board.card.clone();
    let run = spawn(async move { run_attempt(&ctx, &card, Origin::Gateway, shutdown).await });
    arrived("the request to reach the provider", || {
        server.billed_for(&board.card) > 0
    });
    run
}

/// An attempt's outcome, flattened for assertions.
#[derive(Debug, Clone)]
struct Seen {
    ok: bool,
    fanout: bool,
    requests: u32,
    attempt: u32,
    parked: bool,
    provider_fault: Option<ProviderFault>,
    child_ids: Option<Vec<String>>,
    new_title: Option<String>,
    reason: String,
}

impl From<AttemptOutcome> for Seen {
    fn from(outcome: AttemptOutcome) -> Seen {
        let (fanout, new_title) = match &outcome {
            AttemptOutcome::Applied {
                applied: Applied::Fanout { .. },
                ..
            } => (true, None),
            AttemptOutcome::Applied {
                applied: Applied::Single { new_title },
                ..
            } => (false, new_title.clone()),
            _ => (false, None),
        };
        Seen {
            ok: outcome.ok(),
            fanout,
            requests: outcome.requests(),
            attempt: outcome.attempt(),
            parked: matches!(outcome, AttemptOutcome::Failed { parked: true, .. }),
            provider_fault: outcome.fault().map(|f| f.fault.clone()),
            child_ids: outcome.child_ids().map(<[String]>::to_vec),
            new_title,
            reason: outcome.reason(),
        }
    }
}

/// A refused attempt: why, and what the outcome said.
#[derive(Debug)]
struct Refused {
    refusal: BeginRefusal,
    outcome: Seen,
}

fn attempt(ctx: &AttemptContext, board: &Board, origin: Origin) -> Seen {
    attempt_on(ctx, &board.card, origin)
}

fn refused(ctx: &AttemptContext, card: &str, origin: Origin) -> Refused {
    let (_keep, shutdown) = running();
    match block_on(run_attempt(ctx, card, origin, shutdown)).unwrap() {
        AttemptOutcome::Refused { refusal, task_id } => {
            let outcome = Seen::from(AttemptOutcome::Refused {
                refusal: refusal.clone(),
                task_id,
            });
            Refused { refusal, outcome }
        }
        outcome => panic!("expected a refusal, the attempt ran: {outcome:?}"),
    }
}

#[test]
fn a_valid_graph_is_applied_after_one_request() {
    let server = provider(chat_reply(&three_child_graph()));
    let board = Board::new("Add the audit log");
    let ctx = context(config(&server), &board);

    let outcome = attempt(&ctx, &board, Origin::Gateway);
    assert!(outcome.ok, "{outcome:?}");
    assert!(outcome.fanout);
    assert_eq!(
        (outcome.requests, outcome.attempt, outcome.parked),
        (1, 1, false)
    );
    assert_eq!(outcome.provider_fault, None);
    let child_ids = outcome.child_ids.clone().unwrap();
    assert_eq!(child_ids.len(), 3);

    let store = board.store();
    let titles: Vec<String> = child_ids
        .iter()
        .map(|id| store.get(id).unwrap().title)
        .collect();
    assert_eq!(
        titles,
        ["Design the schema", "Write the migration", "Review"]
    );
    assert_eq!(
        store.get(&child_ids[1]).unwrap().assignee.as_deref(),
        Some("default")
    );
    let root = store.get(&board.card).unwrap();
    assert_eq!(root.status, Status::Todo);
    assert_eq!(
        board.payloads("decomposed"),
        vec![json!({"child_ids": child_ids, "root_assignee": "default"})]
    );
    let state = root.decompose.unwrap();
    assert_eq!(
        (state.attempts, state.due_at_ms, state.parked_at_ms),
        (1, None, None)
    );

    assert_eq!(
        board.ledger(),
        vec![LedgerRow {
            origin: "gateway".into(),
            attempt: 1,
            try_no: 1,
            outcome: "ok".into(),
            http_status: Some(200),
            prompt_tokens: Some(PROMPT_TOKENS),
            completion_tokens: Some(COMPLETION_TOKENS),
            closed: true,
        }]
    );

    // The request itself: an aux call, not an agent turn, about this card.
    let sent = server.received();
    assert_eq!(sent.len(), 1);
    let body: Value = sent[0].json().unwrap();
    assert!(body.get("tools").is_none(), "{body}");
    assert_eq!(body["model"], json!("decomposer-test"));
    let user = body["messages"][1]["content"].as_str().unwrap();
    assert!(
        user.starts_with(&format!("Task id: {}\n", board.card)),
        "{user}"
    );
    assert!(user.contains("Add the audit log"), "{user}");
    assert_eq!(sent[0].header("authorization"), Some("Bearer sk-test-key"));

    // B4: a decomposed card is never billed again.
    let again = refused(&ctx, &board.card, Origin::Gateway);
    assert_eq!(
        again.refusal,
        BeginRefusal::NotInTriage {
            status: "todo".into()
        }
    );
    assert_eq!(requests(&server).len(), 1);
}

#[test]
fn a_single_reply_specifies_the_card_in_place() {
    let reply = json!({"fanout": false, "rationale": "small", "title": "Rotate the API key",
                       "body": "Steps: revoke, issue, deploy", "assignee": "coder"});
    let server = provider(chat_reply(&reply.to_string()));
    let board = Board::new("key thing");
    let ctx = context(config(&server), &board);

    let outcome = attempt(&ctx, &board, Origin::Manual);
    assert!(outcome.ok && !outcome.fanout, "{outcome:?}");
    assert_eq!(outcome.new_title.as_deref(), Some("Rotate the API key"));
    let task = board.store().get(&board.card).unwrap();
    assert_eq!(
        (task.title.as_str(), task.status),
        ("Rotate the API key", Status::Ready)
    );
    assert_eq!(task.assignee.as_deref(), Some("coder"));
    assert_eq!(board.count("tasks"), 1);
    assert!(board.event_kinds().contains(&"specified".to_owned()));
}

#[test]
fn a_malformed_reply_fails_the_attempt_and_the_card_waits_out_the_backoff() {
    let server = provider(chat_reply(
        "Sure! Here is my plan: first design, then build.",
    ));
    let board = Board::new("vague");
    let cfg = config(&server);
    let backoff = cfg.card_rules().backoff.due_ms(0, 1);
    assert_eq!(backoff, 60_000);
    let ctx = context(cfg, &board);

    let before = now_ms();
    let outcome = attempt(&ctx, &board, Origin::Gateway);
    let after = now_ms();
    assert!(!outcome.ok);
    assert!(
        outcome.reason.starts_with("reply rejected:"),
        "{}",
        outcome.reason
    );
    assert_eq!(
        (outcome.requests, outcome.attempt, outcome.parked),
        (1, 1, false)
    );
    assert_eq!(outcome.provider_fault, None);

    let state = board.state();
    assert_eq!(state.attempts, 1);
    assert_eq!(state.last_error.as_deref(), Some(outcome.reason.as_str()));
    let due = state.due_at_ms.unwrap();
    assert!(
        due >= before + backoff && due <= after + backoff,
        "{due} vs {before}..{after}"
    );
    let failed = board.payloads("decompose_failed");
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["attempt"], json!(1));
    assert_eq!(failed[0]["origin"], json!("gateway"));
    assert_eq!(failed[0]["reason"], json!(outcome.reason));
    assert_eq!(
        failed[0]["next_attempt_at"].as_f64(),
        Some(due as f64 / 1000.0)
    );
    assert_eq!(
        board.count("tasks"),
        1,
        "B3: a rejected reply writes no card"
    );
    assert_eq!(board.count("task_links"), 0);
    assert_eq!(
        board.store().get(&board.card).unwrap().status,
        Status::Triage
    );

    // In backoff the automatic paths do not pay again.
    let waiting = refused(&ctx, &board.card, Origin::Gateway);
    assert_eq!(waiting.refusal, BeginRefusal::InBackoff { until_ms: due });
    assert_eq!(waiting.outcome.requests, 0);
    assert_eq!(requests(&server).len(), 1);
}

#[rstest]
#[case::no_retries(0, 1)]
#[case::two_retries(2, 3)]
fn server_errors_are_retried_inside_one_attempt(#[case] retries: u32, #[case] sent: u32) {
    let server = provider(Reply::raw(500, "text/plain", "upstream exploded"));
    let board = Board::new("unlucky");
    let mut cfg = config(&server);
    cfg.auxiliary.transient_retries = retries;
    let ctx = context(cfg, &board);

    let outcome = attempt(&ctx, &board, Origin::Sweep);
    assert!(!outcome.ok);
    assert_eq!(outcome.requests, sent);
    assert_eq!(requests(&server).len(), sent as usize);
    assert!(outcome.reason.contains("HTTP 500"), "{}", outcome.reason);
    let rows = board.ledger();
    assert_eq!(rows.len(), sent as usize, "one ledger row per request");
    for (index, row) in rows.iter().enumerate() {
        assert_eq!(row.try_no, index as u32 + 1);
        assert_eq!(row.attempt, 1, "retries belong to the same attempt");
        assert_eq!(
            (
                row.outcome.as_str(),
                row.http_status,
                row.origin.as_str(),
                row.closed
            ),
            ("server_error", Some(500), "sweep", true)
        );
    }
    assert_eq!(board.state().attempts, 1, "one attempt, however many tries");
    assert_eq!(board.payloads("decompose_failed").len(), 1);
}

#[rstest]
#[case::billing(402, ProviderFault::Billing { status: 402 }, "billing")]
#[case::bad_key(401, ProviderFault::Auth { status: 401 }, "auth")]
#[case::forbidden(403, ProviderFault::Auth { status: 403 }, "auth")]
fn a_provider_refusal_costs_one_request_and_is_reported_as_provider_wide(
    #[case] status: u16,
    #[case] fault: ProviderFault,
    #[case] label: &str,
) {
    let server = provider(status_only(status));
    let board = Board::new("cannot pay");
    let mut cfg = config(&server);
    cfg.auxiliary.transient_retries = 2;
    let ctx = context(cfg, &board);

    let outcome = attempt(&ctx, &board, Origin::Gateway);
    assert!(!outcome.ok);
    assert_eq!(outcome.provider_fault, Some(fault));
    assert_eq!(outcome.requests, 1, "a refusal is not retried");
    assert_eq!(requests(&server).len(), 1);
    let rows = board.ledger();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0].outcome.as_str(), rows[0].http_status),
        (label, Some(status))
    );
    assert_eq!(board.payloads("decompose_failed").len(), 1);
}

#[test]
fn a_rate_limit_keeps_the_card_waiting_at_least_as_long_as_retry_after() {
    let server = provider(status_only(429).header("Retry-After", "30"));
    let board = Board::new("too fast");
    let mut cfg = config(&server);
    cfg.kanban.decompose_backoff = Duration::from_secs(1);
    cfg.auxiliary.transient_retries = 2;
    let ctx = context(cfg, &board);

    let before = now_ms();
    let outcome = attempt(&ctx, &board, Origin::Gateway);
    assert_eq!(
        outcome.provider_fault,
        Some(ProviderFault::RateLimited {
            retry_after: Some(Duration::from_secs(30))
        })
    );
    assert_eq!(outcome.requests, 1);
    let due = board.state().due_at_ms.unwrap();
    assert!(
        due >= before + 30_000,
        "due {} ms from the start, not 30 s",
        due - before
    );
    let rows = board.ledger();
    assert_eq!(
        (rows[0].outcome.as_str(), rows[0].http_status),
        ("rate_limited", Some(429))
    );
}

#[test]
fn the_third_failure_parks_the_card_and_nothing_more_is_paid() {
    let server = provider(chat_reply("{\"fanout\": true, \"tasks\": []}"));
    let board = Board::new("poison");
    let mut cfg = config(&server);
    // Due again at once, so three automatic attempts run back to back.
    cfg.kanban.decompose_backoff = Duration::ZERO;
    let ctx = context(cfg, &board);

    for attempt_no in 1..=3 {
        let outcome = attempt(&ctx, &board, Origin::Gateway);
        assert!(!outcome.ok);
        assert_eq!(outcome.attempt, attempt_no);
        assert_eq!(outcome.parked, attempt_no == 3, "attempt {attempt_no}");
    }
    let state = board.state();
    assert_eq!((state.attempts, state.due_at_ms), (3, None));
    assert!(state.parked_at_ms.is_some());
    let parked = board.payloads("decompose_parked");
    assert_eq!(parked.len(), 1);
    assert_eq!(parked[0]["attempts"], json!(3));
    let failed = board.payloads("decompose_failed");
    assert_eq!(failed.len(), 3);
    assert_eq!(failed[2]["next_attempt_at"], Value::Null);
    assert_eq!(
        board.store().get(&board.card).unwrap().status,
        Status::Triage
    );

    for origin in [Origin::Gateway, Origin::Sweep] {
        let stop = refused(&ctx, &board.card, origin);
        assert_eq!(stop.refusal, BeginRefusal::Parked { attempts: 3 });
        assert_eq!(stop.outcome.requests, 0);
    }
    assert_eq!(
        requests(&server).len(),
        3,
        "B1: at most decompose_max_attempts paid"
    );

    // A person may still pay for one more; it is recorded, and the park is not announced again.
    let manual = attempt(&ctx, &board, Origin::Manual);
    assert_eq!((manual.attempt, manual.requests), (4, 1));
    assert_eq!(board.payloads("decompose_parked").len(), 1);
    assert_eq!(board.payloads("decompose_failed").len(), 4);
}

#[test]
fn a_hung_provider_ends_the_attempt_at_the_timeout() {
    let server = provider(chat_reply(&three_child_graph()).delayed(Duration::from_secs(30)));
    let board = Board::new("slow");
    let mut cfg = config(&server);
    cfg.auxiliary.timeout = Duration::from_millis(300);
    cfg.auxiliary.transient_retries = 2;
    let ctx = context(cfg, &board);

    let started = Instant::now();
    let outcome = attempt(&ctx, &board, Origin::Gateway);
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(300), "{took:?}");
    assert!(
        took < Duration::from_secs(3),
        "B8: the attempt took {took:?}"
    );
    assert!(!outcome.ok);
    assert!(
        outcome.reason.contains("no complete reply within 0.3s"),
        "{}",
        outcome.reason
    );
    assert_eq!(outcome.requests, 1, "a timeout is not retried");
    let rows = board.ledger();
    assert_eq!((rows.len(), rows[0].outcome.as_str()), (1, "timeout"));
    assert_eq!(board.payloads("decompose_failed").len(), 1);
    assert_eq!(board.count("tasks"), 1);
}

#[test]
fn shutdown_aborts_the_request_in_flight_and_records_it() {
    let server = provider(chat_reply(&three_child_graph()).delayed(Duration::from_secs(60)));
    let board = Board::new("interrupted");
    let mut cfg = config(&server);
    cfg.auxiliary.timeout = Duration::from_secs(30);
    let ctx = context(cfg, &board);

    let (stop, shutdown) = running();
    let run = attempt_in_flight(ctx, &board, &server, shutdown);
    // While the provider hangs, the row is there and still open.
    let open = board.ledger();
    assert_eq!(
        (open.len(), open[0].outcome.as_str(), open[0].closed),
        (1, "in_flight", false)
    );

    let flipped = Instant::now();
    stop.send(true).unwrap();
    let bound = SHUTDOWN_ANSWER_WAIT + Duration::from_secs(2);
    let outcome = Seen::from(
        block_on(async { tokio::time::timeout(bound, run).await })
            .expect("the attempt did not stop within its shutdown wait")
            .unwrap()
            .unwrap(),
    );
    let took = flipped.elapsed();
    assert!(
        took >= SHUTDOWN_ANSWER_WAIT && took < bound,
        "stopped {took:?} after shutdown: the request on its way gets {SHUTDOWN_ANSWER_WAIT:?} to answer, then is aborted"
    );
    assert!(!outcome.ok);
    assert!(outcome.reason.starts_with("aborted"), "{}", outcome.reason);
    let rows = board.ledger();
    assert_eq!(
        (rows.len(), rows[0].outcome.as_str(), rows[0].closed),
        (1, "aborted", true)
    );
    let failed = board.payloads("decompose_failed");
    assert_eq!(failed.len(), 1);
    assert!(
        failed[0]["reason"].as_str().unwrap().starts_with("aborted"),
        "{failed:?}"
    );
    assert_eq!(
        board.state().attempts,
        1,
        "the abort still counts: the request was sent"
    );
    assert_eq!(board.count("tasks"), 1, "no half-written graph");
}

/// What landed while the gateway was shutting down.
#[derive(Debug, Clone, Copy)]
enum Landed {
    /// A refusal: the board's pause must be recorded, or a restart pays for another probe.
    Refusal,
    /// A graph: it must be applied, or a restart pays for the card again.
    Graph,
}

#[rstest]
#[case::refusal(Landed::Refusal)]
#[case::graph(Landed::Graph)]
fn an_answer_that_lands_while_shutting_down_is_recorded(#[case] landed: Landed) {
    let reply = match landed {
        Landed::Refusal => status_only(402),
        Landed::Graph => chat_reply(&three_child_graph()),
    };
    let server = provider(reply.delayed(Duration::from_millis(800)));
    let board = Board::new("answered late");
    let mut cfg = config(&server);
    cfg.kanban.provider_cooldown = Duration::from_secs(900);
    let ctx = context(cfg, &board);

    let (stop, shutdown) = running();
    let run = attempt_in_flight(ctx, &board, &server, shutdown);
    let before = now_ms();
    stop.send(true).unwrap();
    let bound = SHUTDOWN_ANSWER_WAIT + Duration::from_secs(2);
    let outcome = block_on(async { tokio::time::timeout(bound, run).await })
        .expect("the attempt did not end within its shutdown wait")
        .unwrap()
        .unwrap();
    match landed {
        Landed::Refusal => {
            let seen = Seen::from(outcome);
            assert_eq!(
                seen.provider_fault,
                Some(ProviderFault::Billing { status: 402 }),
                "{seen:?}"
            );
            let pause = board.store().pause().unwrap();
            assert!(
                pause
                    .as_ref()
                    .is_some_and(|p| p.until_ms >= before + 899_000),
                "the pause was recorded: {pause:?}"
            );
            assert_eq!(board.ledger()[0].outcome, "billing");
        }
        Landed::Graph => {
            assert!(outcome.ok(), "{outcome:?}");
            assert_eq!(board.count("tasks"), 4, "the paid graph was applied");
            assert_eq!(board.ledger()[0].outcome, "ok");
        }
    }
    assert_eq!(requests(&server).len(), 1);
}

#[test]
fn the_hourly_ceiling_stops_a_retry_and_a_person_unless_forced() {
    let server = provider(status_only(503));
    let board = Board::new("ceiling");
    let mut cfg = config(&server);
    cfg.auxiliary.transient_retries = 2;
    cfg.kanban.decompose_calls_per_hour = 2;
    let ctx = context(cfg, &board);

    let outcome = attempt(&ctx, &board, Origin::Gateway);
    assert_eq!(
        outcome.requests, 2,
        "B6: the third try would be the hour's third paid call"
    );
    assert!(
        outcome.reason.contains("retry not sent"),
        "{}",
        outcome.reason
    );
    assert_eq!(board.ledger().len(), 2);
    assert_eq!(requests(&server).len(), 2);

    // The hour is full: the next automatic attempt on another card is refused before it is
    // counted.
    let second = board.another_card("second");
    let stop = refused(&ctx, &second, Origin::Sweep);
    assert_eq!(
        stop.refusal,
        BeginRefusal::CeilingReached { calls: 2, limit: 2 }
    );
    let attempts_of_second = || {
        board
            .store()
            .get(&second)
            .unwrap()
            .decompose
            .unwrap()
            .attempts
    };
    assert_eq!(attempts_of_second(), 0);

    // A person's explicit attempt keeps to the ceiling too: refused before it is counted.
    let (_keep, shutdown) = running();
    let (held, overrode) =
        block_on(run_manual_attempt(&ctx, &second, false, shutdown.clone())).unwrap();
    assert!(
        matches!(
            held,
            AttemptOutcome::Refused {
                refusal: BeginRefusal::CeilingReached { calls: 2, limit: 2 },
                ..
            }
        ),
        "{held:?}"
    );
    assert!(overrode.is_empty());
    assert_eq!(attempts_of_second(), 0);
    // Forced, it goes past the ceiling, retries included, and says so.
    let (forced, overrode) = block_on(run_manual_attempt(&ctx, &second, true, shutdown)).unwrap();
    assert_eq!(
        overrode,
        [BeginRefusal::CeilingReached { calls: 2, limit: 2 }]
    );
    assert_eq!(Seen::from(forced).requests, 3);
    assert_eq!(attempts_of_second(), 1);
    assert_eq!(requests(&server).len(), 5);
}

fn attempt_on(ctx: &AttemptContext, card: &str, origin: Origin) -> Seen {
    block_on(attempt_on_async(ctx, card, origin))
}

async fn attempt_on_async(ctx: &AttemptContext, card: &str, origin: Origin) -> Seen {
    let (_keep, shutdown) = running();
    match run_attempt(ctx, card, origin, shutdown).await.unwrap() {
        AttemptOutcome::Refused { refusal, .. } => panic!("attempt refused: {refusal:?}"),
        outcome => Seen::from(outcome),
    }
}

/// How long the provider holds each reply in the tests that look at the board while it does: long
/// enough for the test thread to see the request arrive and act before the reply lands.
const THINKING: Duration = Duration::from_secs(1);

/// The card's attempt count and the newest ledger row's outcome, as another reader sees them.
fn witnessed(board: &Board) -> (u32, String) {
    let conn = read_only(&board.db);
    let attempts: u32 = conn
        .query_row(
            "SELECT attempts FROM hermes_decompose_state WHERE task_id = ?1",
            [&board.card],
            |r| r.get(0),
        )
        .unwrap_or(0);
    let outcome: String = conn
        .query_row(
            "SELECT outcome FROM hermes_aux_ledger ORDER BY id DESC LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap_or_default();
    (attempts, outcome)
}

#[test]
fn the_attempt_and_its_ledger_row_are_written_before_the_request_leaves() {
    let board = Board::new("witnessed");
    // Each try is held, so the board is looked at while the provider has the request.
    let server = provider(status_only(500).delayed(THINKING));
    let mut cfg = config(&server);
    cfg.auxiliary.transient_retries = 1;
    let ctx = context(cfg, &board);

    let (_keep, shutdown) = running();
    let card = board.card.clone();
    let run = spawn(async move { run_attempt(&ctx, &card, Origin::Gateway, shutdown).await });
    let mut seen = Vec::new();
    for tries in 1..=2 {
        arrived("the try to reach the provider", || {
            server.billed_for(&board.card) >= tries
        });
        seen.push(witnessed(&board));
    }
    block_on(run).unwrap().unwrap();
    assert_eq!(
        seen,
        vec![(1, "in_flight".to_owned()), (1, "in_flight".to_owned())],
        "B1/B9: counted and itemised before the provider sees the request"
    );
}

#[test]
fn a_card_that_left_triage_during_the_call_gets_no_rows() {
    let board = Board::new("taken by hand");
    let server = provider(chat_reply(&three_child_graph()).delayed(THINKING));
    let ctx = context(config(&server), &board);
    let events_before = board.count("task_events");

    let (_keep, shutdown) = running();
    let run = attempt_in_flight(ctx, &board, &server, shutdown);
    // The card leaves triage while the provider is "thinking", as a person might move it.
    let conn = Connection::open(&board.db).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    conn.execute(
        "UPDATE tasks SET status = ?2 WHERE id = ?1",
        [board.card.as_str(), "running"],
    )
    .unwrap();
    drop(conn);
    let outcome = Seen::from(block_on(run).unwrap().unwrap());

    assert!(!outcome.ok, "{outcome:?}");
    assert!(outcome.reason.contains("left triage"), "{}", outcome.reason);
    assert_eq!(outcome.child_ids, None);
    assert_eq!(board.count("tasks"), 1, "B4: no child rows");
    assert_eq!(board.count("task_links"), 0);
    assert_eq!(board.count("task_events"), events_before);
    let task = board.store().get(&board.card).unwrap();
    assert_eq!(task.status, Status::Running, "the person's move stands");
    assert_eq!(task.decompose.unwrap().due_at_ms, None);
    assert_eq!(board.ledger()[0].outcome, "ok", "the call itself was paid");
}

#[test]
fn refused_attempts_send_nothing_and_count_nothing() {
    let server = provider(chat_reply(&three_child_graph()));
    let board = Board::with(NewTask {
        title: "hands off".into(),
        triage: true,
        no_auto_decompose: true,
        ..NewTask::default()
    });
    let ctx = context(config(&server), &board);

    let opted_out = refused(&ctx, &board.card, Origin::Gateway);
    assert_eq!(opted_out.refusal, BeginRefusal::OptedOut);
    assert_eq!(
        (opted_out.outcome.requests, opted_out.outcome.attempt),
        (0, 0)
    );
    assert!(!opted_out.outcome.ok);
    let unknown = refused(&ctx, "t_0badc0de", Origin::Manual);
    assert_eq!(
        unknown.refusal,
        BeginRefusal::NoSuchTask("t_0badc0de".into())
    );
    assert_eq!(unknown.outcome.reason, "no such task: t_0badc0de");
    assert!(requests(&server).is_empty());
    assert_eq!(board.state().attempts, 0);
    assert!(board.ledger().is_empty());

    // B7: an explicit attempt may still decompose an opted-out card.
    let manual = attempt(&ctx, &board, Origin::Manual);
    assert!(manual.ok, "{manual:?}");
    assert_eq!(manual.child_ids.map(|c| c.len()), Some(3));
}

#[test]
fn retries_wait_a_jittered_doubling_delay_and_each_keeps_its_row() {
    let server = provider(status_only(500));
    let board = Board::new("flaky");
    let mut cfg = config(&server);
    cfg.auxiliary.transient_retries = 2;
    let ctx = context(cfg, &board);

    let outcome = attempt(&ctx, &board, Origin::Gateway);
    assert_eq!(outcome.requests, 3);
    let gaps = server.gaps_between_bills(&board.card);
    assert_eq!(gaps.len(), 2);
    // Equal jitter: at least half of 0.5 s, then of 1 s; at most the whole (plus the call).
    assert!(
        gaps[0] >= Duration::from_millis(250) && gaps[0] < Duration::from_millis(1_500),
        "{gaps:?}"
    );
    assert!(
        gaps[1] >= Duration::from_millis(500) && gaps[1] < Duration::from_millis(2_000),
        "{gaps:?}"
    );
    let rows = board.ledger();
    assert_eq!(rows.iter().map(|r| r.try_no).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(board.state().attempts, 1);
}

#[test]
fn a_503_retry_after_that_fits_the_attempt_is_honoured() {
    let server = provider(status_only(503).header("Retry-After", "2"));
    let board = Board::new("busy provider");
    let mut cfg = config(&server);
    cfg.auxiliary.transient_retries = 1;
    let ctx = context(cfg, &board);

    let outcome = attempt(&ctx, &board, Origin::Gateway);
    assert_eq!(outcome.requests, 2);
    let gaps = server.gaps_between_bills(&board.card);
    assert!(
        gaps[0] >= Duration::from_secs(2) && gaps[0] < Duration::from_secs(4),
        "waited {gaps:?} for Retry-After: 2"
    );
}

#[test]
fn a_retry_after_longer_than_the_attempt_allows_stops_the_retries() {
    let server = provider(status_only(503).header("Retry-After", "3600"));
    let board = Board::new("busy for an hour");
    let mut cfg = config(&server);
    cfg.auxiliary.transient_retries = 2;
    cfg.auxiliary.timeout = Duration::from_secs(5);
    let ctx = context(cfg, &board);

    let started = Instant::now();
    let outcome = attempt(&ctx, &board, Origin::Gateway);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "did not wait an hour"
    );
    assert_eq!(outcome.requests, 1);
    assert!(
        outcome.reason.contains("Retry-After (3600s) does not fit"),
        "{}",
        outcome.reason
    );
    assert_eq!(requests(&server).len(), 1);
    assert_eq!(board.payloads("decompose_failed").len(), 1);
}

/// A base URL nothing listens on.
fn refused_base_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("http://127.0.0.1:{port}/v1")
}

#[test]
fn an_unreachable_provider_spends_no_budget_and_pauses_the_board() {
    let board = Board::new("provider down");
    let mut cfg = Config::default();
    cfg.model.base_url = Some(refused_base_url());
    cfg.model.default = Some("decomposer-test".into());
    cfg.auxiliary.transient_retries = 2;
    cfg.kanban.decompose_backoff = Duration::from_millis(50);
    let ctx = context(cfg, &board);

    let (_keep, shutdown) = running();
    let outcome = block_on(run_attempt(&ctx, &board.card, Origin::Gateway, shutdown)).unwrap();
    let pause = match &outcome {
        AttemptOutcome::NothingSent {
            unreachable: Some(pause),
            ..
        } => pause.clone(),
        other => panic!("expected an unreachable provider, got {other:?}"),
    };
    assert_eq!((pause.streak, pause.lasts), (1, Duration::from_secs(1)));
    assert!(
        outcome.reason().contains("not counted"),
        "{}",
        outcome.reason()
    );
    assert_eq!(board.state().attempts, 0, "no card budget spent");
    assert!(board.payloads("decompose_failed").is_empty());
    let rows = board.ledger();
    assert_eq!(
        rows.iter().map(|r| r.outcome.as_str()).collect::<Vec<_>>(),
        ["unreachable"],
        "one try: an unreachable provider is not retried within the attempt"
    );
    let usage = board.store().usage(None, now_ms(), 100).unwrap();
    assert_eq!((usage.totals.calls, usage.totals.unreachable), (0, 1));

    // The board waits: the next automatic attempt is refused before anything is counted.
    let other = board.another_card("another");
    let stop = refused(&ctx, &other, Origin::Sweep);
    assert!(
        matches!(&stop.refusal, BeginRefusal::Paused { reason, .. } if reason.contains("unreachable")),
        "{:?}",
        stop.refusal
    );
}

#[test]
fn a_refusal_recorded_meanwhile_stops_another_attempts_retry() {
    let board = Board::new("refused late");
    let flaky = board.another_card("flaky");
    let server = provider(status_only(500));
    server.reply(
        &board.card,
        status_only(402).delayed(Duration::from_millis(100)),
    );
    let mut cfg = config(&server);
    cfg.auxiliary.transient_retries = 2;
    let ctx = context(cfg, &board);

    // Both requests leave together; the 402 lands while the other waits to retry its 500.
    let (refusal, retried) = block_on(async {
        tokio::join!(
            attempt_on_async(&ctx, &board.card, Origin::Gateway),
            attempt_on_async(&ctx, &flaky, Origin::Gateway)
        )
    });
    assert_eq!(
        refusal.provider_fault,
        Some(ProviderFault::Billing { status: 402 })
    );
    assert_eq!(retried.requests, 1, "{retried:?}");
    assert!(
        retried
            .reason
            .contains("retry not sent: auto-decompose is paused"),
        "{}",
        retried.reason
    );
    assert_eq!(requests(&server).len(), 2, "no call after the refusal");
}

#[test]
fn a_cooldown_of_1e16_seconds_pauses_for_good() {
    let server = provider(status_only(401));
    let board = Board::new("bad key");
    let mut cfg = config(&server);
    cfg.kanban.provider_cooldown = Duration::from_secs_f64(1e16);
    let ctx = context(cfg, &board);

    let (_keep, shutdown) = running();
    let outcome = block_on(run_attempt(&ctx, &board.card, Origin::Gateway, shutdown)).unwrap();
    assert_eq!(outcome.fault().map(|f| f.until_ms), Some(i64::MAX));
    let pause = board.store().pause().unwrap();
    assert_eq!(pause.map(|p| p.until_ms), Some(i64::MAX));
    let other = board.another_card("waits");
    let stop = refused(&ctx, &other, Origin::Gateway);
    assert!(
        matches!(stop.refusal, BeginRefusal::Paused { .. }),
        "{:?}",
        stop.refusal
    );
    assert_eq!(requests(&server).len(), 1);
}
