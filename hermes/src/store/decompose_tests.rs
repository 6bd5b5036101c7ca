//! The decompose side of the store: the attempt budget (B1), backoff and holds (B2, B7), the apply
//! transaction (B3, B4), due-card selection, and the ledger behind the pause and ceiling (B5, B6,
//! B9). Guards are set up with raw SQL on the board file, the way another process (or upstream's
//! CLI) would leave them.

use std::collections::HashSet;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use rstest::rstest;
use rusqlite::types::Value as SqlValue;
use rusqlite::{params, Connection};
use serde_json::{json, Value};

use super::tests::{kinds, ledger_of_attempt, other_process, scratch, triage_card};
use super::*;
use crate::core::{CardBudget, CardRules, ChildSpec, LedgerOutcome, Plan};

const MAX_ATTEMPTS: u32 = 3;
const CALLS_PER_HOUR: u32 = 2;
/// The test policy's backoff after a first failure, which is also the provisional due time of a
/// card's first attempt (`now + PROVISIONAL_STEP_MS`); it doubles per attempt after that.
const PROVISIONAL_STEP_MS: i64 = 1_000;

/// How long the test policy's claims last.
const CLAIM_MS: i64 = 600_000;

fn test_backoff() -> crate::core::Backoff {
    crate::core::Backoff::new(Duration::from_millis(PROVISIONAL_STEP_MS as u64))
}

fn test_rules() -> CardRules {
    CardRules {
        budget: CardBudget::new(MAX_ATTEMPTS),
        backoff: test_backoff(),
    }
}

fn policy(origin: Origin, now_ms: i64) -> BeginPolicy {
    BeginPolicy {
        force: false,
        origin,
        now_ms,
        rules: test_rules(),
        calls_per_hour: CALLS_PER_HOUR,
        claim_until_ms: now_ms + CLAIM_MS,
    }
}

/// The process that recorded the board's claims dies: they now name a process that is gone, as
/// after a SIGKILL.
fn crash(store: &Store) {
    other_process(store)
        .execute(
            "UPDATE hermes_decompose_claims SET owner = ?1",
            [crate::process::dead_token(store.path())],
        )
        .unwrap();
}

fn begin(
    store: &mut Store,
    id: &str,
    origin: Origin,
    now: i64,
) -> Result<AttemptTicket, BeginRefusal> {
    store.begin_attempt(id, &policy(origin, now)).unwrap()
}

fn state(store: &Store, id: &str) -> DecomposeState {
    store.get(id).unwrap().decompose.unwrap()
}

fn payloads_of(store: &Store, id: &str, kind: &str) -> Vec<Value> {
    store
        .events_of(id)
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == kind)
        .map(|e| e.payload.unwrap_or(Value::Null))
        .collect()
}

fn count(store: &Store, table: &str) -> i64 {
    store
        .conn
        .query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
        .unwrap()
}

/// Every row of every table the decompose side touches, sorted, so two dumps are equal exactly
/// when nothing was written.
fn dump(store: &Store) -> Vec<String> {
    let mut rows = Vec::new();
    for table in [
        "tasks",
        "task_links",
        "task_events",
        "hermes_decompose_state",
        "hermes_aux_ledger",
        "hermes_board_state",
    ] {
        let mut stmt = store
            .conn
            .prepare(&format!("SELECT * FROM {table}"))
            .unwrap();
        let width = stmt.column_count();
        let mut query = stmt.query([]).unwrap();
        while let Some(row) = query.next().unwrap() {
            let values: Vec<SqlValue> = (0..width).map(|i| row.get(i).unwrap()).collect();
            rows.push(format!("{table}: {values:?}"));
        }
    }
    rows.sort();
    rows
}

fn ledger(store: &mut Store, task_id: &str, started_at_ms: i64) -> i64 {
    ledger_of_attempt(store, task_id, 1, started_at_ms)
}

// ---------------------------------------------------------------------------------------------
// begin_attempt
// ---------------------------------------------------------------------------------------------

#[test]
fn the_attempt_is_counted_before_anything_else_and_a_crash_cannot_reset_it() {
    let (_dir, mut store) = scratch();
    let id = triage_card(&mut store, "split me");
    let now = now_ms();

    let ticket = begin(&mut store, &id, Origin::Gateway, now).unwrap();
    assert_eq!(ticket.attempt, 1);
    assert_eq!(ticket.title, "split me");
    let counted = state(&store, &id);
    assert_eq!(counted.attempts, 1);
    assert_eq!(counted.last_attempt_at_ms, Some(now));
    assert_eq!(
        counted.due_at_ms,
        Some(now + PROVISIONAL_STEP_MS),
        "until the outcome is known the card is treated as failed"
    );

    // The request leaves, then the process dies: no close, no failure record.
    ledger(&mut store, &id, now);
    crash(&store);
    let path = store.path().to_owned();
    drop(store);
    let mut store = Store::open(path).unwrap();
    // A restarting gateway resynchronises the whole board first; that must not reset the count.
    store.sync_decompose_state(now, true).unwrap();
    assert_eq!(state(&store, &id).attempts, 1);
    assert!(store
        .due_cards(now, 10, &HashSet::new())
        .unwrap()
        .is_empty());
    // The dead attempt is closed on the way: its request may have been billed.
    assert_eq!(
        begin(&mut store, &id, Origin::Gateway, now),
        Err(BeginRefusal::InBackoff {
            until_ms: now + PROVISIONAL_STEP_MS
        })
    );
    assert_eq!(state(&store, &id).attempts, 1);
    assert_eq!(payloads_of(&store, &id, "decompose_failed").len(), 1);
    assert_eq!(store.claim(&id).unwrap(), None);

    let later = now + PROVISIONAL_STEP_MS;
    assert_eq!(
        store.due_cards(later, 10, &HashSet::new()).unwrap(),
        vec![id.clone()]
    );
    let second = begin(&mut store, &id, Origin::Gateway, later).unwrap();
    assert_eq!(second.attempt, 2);
    assert_eq!(
        state(&store, &id).due_at_ms,
        Some(later + 2 * PROVISIONAL_STEP_MS)
    );
}

#[test]
fn concurrent_processes_count_one_due_slot_once() {
    let (_dir, mut store) = scratch();
    let id = triage_card(&mut store, "contended");
    let now = now_ms();
    let contenders = 4;
    let path = store.path().to_owned();
    let barrier = Arc::new(Barrier::new(contenders));
    let threads: Vec<_> = (0..contenders)
        .map(|_| {
            let path = path.clone();
            let id = id.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let mut store = Store::open(path).unwrap();
                barrier.wait();
                store
                    .begin_attempt(&id, &policy(Origin::Gateway, now))
                    .unwrap()
            })
        })
        .collect();
    let handles: Vec<_> = threads.into_iter().map(|h| h.join().unwrap()).collect();
    let tickets = handles.iter().filter(|r| r.is_ok()).count();
    assert_eq!(tickets, 1, "{handles:?}");
    // The winner's claim holds the card (its process is alive), whatever the due time says.
    assert!(handles
        .iter()
        .filter_map(|r| r.as_ref().err())
        .all(|refusal| matches!(refusal, BeginRefusal::Claimed { .. })));
    assert_eq!(state(&store, &id).attempts, 1);
}

#[test]
fn a_triage_card_without_decompose_state_is_attempted_and_scheduled() {
    let (_dir, mut store) = scratch();
    let now = now_ms();
    other_process(&store)
        .execute(
            "INSERT INTO tasks (id, title, status, created_at) VALUES ('t_0000beef', 'raw', 'triage', ?1)",
            [now / 1000],
        )
        .unwrap();
    let ticket = begin(&mut store, "t_0000beef", Origin::Sweep, now).unwrap();
    assert_eq!(ticket.attempt, 1);
    let counted = state(&store, "t_0000beef");
    assert_eq!(
        (counted.attempts, counted.due_at_ms),
        (1, Some(now + PROVISIONAL_STEP_MS))
    );
}

#[rstest]
fn unknown_and_non_triage_cards_are_refused_for_every_origin(
    #[values(Origin::Gateway, Origin::Sweep, Origin::Manual)] origin: Origin,
) {
    let (_dir, mut store) = scratch();
    let ready = store
        .create_task(&NewTask {
            title: "plain".into(),
            ..NewTask::default()
        })
        .unwrap()
        .id;
    let archived = triage_card(&mut store, "gone");
    store.archive(std::slice::from_ref(&archived)).unwrap();
    let before = dump(&store);
    let now = now_ms();

    assert_eq!(
        begin(&mut store, "t_deadbeef", origin, now),
        Err(BeginRefusal::NoSuchTask("t_deadbeef".into()))
    );
    assert_eq!(
        begin(&mut store, &ready, origin, now),
        Err(BeginRefusal::NotInTriage {
            status: "ready".into()
        })
    );
    assert_eq!(
        begin(&mut store, &archived, origin, now),
        Err(BeginRefusal::NotInTriage {
            status: "archived".into()
        })
    );
    assert_eq!(dump(&store), before, "a refusal writes nothing");
}

/// A reason the automatic paths must leave a triage card alone.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Guard {
    /// Budget spent and marked parked.
    Parked,
    /// Budget spent (say `decompose_max_attempts` was lowered) but not marked yet.
    BudgetSpent,
    Backoff,
    OptedOut,
    HasRun,
    NeedsInput,
    Capability,
    /// A state row with no due time that is neither parked nor opted out.
    NotScheduled,
    Paused,
    CeilingReached,
}

const BACKOFF_MS: i64 = 60_000;

/// A board with one triage card held by `guard`.
fn guarded_board(guard: Guard, now: i64) -> (tempfile::TempDir, Store, String) {
    let (dir, mut store) = scratch();
    let id = store
        .create_task(&NewTask {
            title: format!("held by {guard:?}"),
            triage: true,
            no_auto_decompose: guard == Guard::OptedOut,
            ..NewTask::default()
        })
        .unwrap()
        .id;
    let raw = other_process(&store);
    // Due a moment ago, so the guard under test is the only reason to refuse.
    raw.execute(
        "UPDATE hermes_decompose_state SET due_at_ms = ?2 WHERE task_id = ?1 AND opt_out = 0",
        params![id, now - 1],
    )
    .unwrap();
    let set_state = |sql: &str| {
        raw.execute(
            &format!("UPDATE hermes_decompose_state SET {sql} WHERE task_id = ?1"),
            [&id],
        )
        .unwrap()
    };
    let set_task = |sql: &str| {
        raw.execute(&format!("UPDATE tasks SET {sql} WHERE id = ?1"), [&id])
            .unwrap()
    };
    match guard {
        Guard::Parked => set_state(&format!(
            "attempts = 3, parked_at_ms = {}, due_at_ms = NULL",
            now - 1
        )),
        Guard::BudgetSpent => set_state(&format!("attempts = 3, due_at_ms = {}", now - 1)),
        Guard::Backoff => set_state(&format!("attempts = 1, due_at_ms = {}", now + BACKOFF_MS)),
        Guard::OptedOut => 0,
        Guard::HasRun => set_task(&format!("started_at = {}", now / 1000 - 10)),
        Guard::NeedsInput => set_task("block_kind = 'needs_input'"),
        Guard::Capability => set_task("block_kind = 'capability'"),
        Guard::NotScheduled => set_state("due_at_ms = NULL"),
        Guard::Paused => {
            store
                .set_pause(now + BACKOFF_MS, "provider requires payment (HTTP 402)")
                .unwrap();
            0
        }
        Guard::CeilingReached => {
            for _ in 0..CALLS_PER_HOUR {
                ledger(&mut store, "t_someone", now - 1000);
            }
            0
        }
    };
    (dir, store, id)
}

fn expected_refusal(guard: Guard, now: i64) -> BeginRefusal {
    match guard {
        Guard::Parked | Guard::BudgetSpent => BeginRefusal::Parked { attempts: 3 },
        Guard::Backoff => BeginRefusal::InBackoff {
            until_ms: now + BACKOFF_MS,
        },
        Guard::OptedOut => BeginRefusal::OptedOut,
        Guard::HasRun => BeginRefusal::Hold {
            why: "the card has run before".into(),
        },
        Guard::NeedsInput => BeginRefusal::Hold {
            why: "blocked on needs_input".into(),
        },
        Guard::Capability => BeginRefusal::Hold {
            why: "blocked on capability".into(),
        },
        Guard::NotScheduled => BeginRefusal::NotScheduled,
        Guard::Paused => BeginRefusal::Paused {
            until_ms: now + BACKOFF_MS,
            reason: "provider requires payment (HTTP 402)".into(),
        },
        Guard::CeilingReached => BeginRefusal::CeilingReached {
            calls: u64::from(CALLS_PER_HOUR),
            limit: CALLS_PER_HOUR,
        },
    }
}

#[rstest]
fn automatic_attempts_are_refused_by_every_guard_without_writing(
    #[values(
        Guard::Parked,
        Guard::BudgetSpent,
        Guard::Backoff,
        Guard::OptedOut,
        Guard::HasRun,
        Guard::NeedsInput,
        Guard::Capability,
        Guard::NotScheduled,
        Guard::Paused,
        Guard::CeilingReached
    )]
    guard: Guard,
    #[values(Origin::Gateway, Origin::Sweep)] origin: Origin,
) {
    let now = now_ms();
    let (_dir, mut store, id) = guarded_board(guard, now);
    let before = dump(&store);
    assert_eq!(
        begin(&mut store, &id, origin, now),
        Err(expected_refusal(guard, now))
    );
    if guard == Guard::BudgetSpent {
        // The one refusal that writes: it records the park the last attempt never recorded.
        let parked = state(&store, &id);
        assert_eq!(
            (parked.attempts, parked.due_at_ms, parked.parked_at_ms),
            (3, None, Some(now))
        );
        assert_eq!(payloads_of(&store, &id, "decompose_parked").len(), 1);
    } else {
        assert_eq!(
            dump(&store),
            before,
            "{guard:?}: the refusal wrote something"
        );
    }
    assert!(
        store
            .due_cards(now, 10, &HashSet::new())
            .unwrap()
            .is_empty()
            || matches!(guard, Guard::Paused | Guard::CeilingReached),
        "{guard:?}: a card the attempt refuses must not be offered as due"
    );
}

#[rstest]
fn a_manual_attempt_passes_every_card_guard_and_only_a_forced_one_the_board_guards(
    #[values(
        Guard::Parked,
        Guard::BudgetSpent,
        Guard::Backoff,
        Guard::OptedOut,
        Guard::HasRun,
        Guard::NeedsInput,
        Guard::Capability,
        Guard::NotScheduled,
        Guard::Paused,
        Guard::CeilingReached
    )]
    guard: Guard,
) {
    let now = now_ms();
    let (_dir, mut store, id) = guarded_board(guard, now);
    let prior = state(&store, &id);
    let ledger_rows = count(&store, "hermes_aux_ledger");

    let board_guard = matches!(guard, Guard::Paused | Guard::CeilingReached);
    if board_guard {
        let before = dump(&store);
        assert_eq!(
            begin(&mut store, &id, Origin::Manual, now),
            Err(expected_refusal(guard, now)),
            "a person's attempt keeps to the board-wide guards unless forced"
        );
        assert_eq!(
            dump(&store),
            before,
            "{guard:?}: the refusal wrote something"
        );
    }
    let forced = BeginPolicy {
        force: true,
        ..policy(Origin::Manual, now)
    };
    let ticket = store.begin_attempt(&id, &forced).unwrap().unwrap();
    let overrode = if board_guard {
        vec![expected_refusal(guard, now)]
    } else {
        vec![]
    };
    assert_eq!(ticket.overrode, overrode, "{guard:?}");
    assert_eq!(ticket.attempt, prior.attempts + 1);
    let after = state(&store, &id);
    assert_eq!(after.attempts, prior.attempts + 1);
    assert_eq!(after.last_attempt_at_ms, Some(now));
    assert_eq!(after.opt_out, prior.opt_out);
    assert_eq!(after.parked_at_ms, prior.parked_at_ms);
    match guard {
        // Not automatically schedulable before, so not after either: a person's one attempt
        // must not enrol the card in automatic billing.
        Guard::Parked | Guard::OptedOut | Guard::NotScheduled => {
            assert_eq!(after.due_at_ms, None, "{guard:?}");
            assert!(store
                .due_cards(now + 10 * BACKOFF_MS, 10, &HashSet::new())
                .unwrap()
                .is_empty());
        }
        _ => assert_eq!(
            after.due_at_ms,
            Some(test_backoff().due_ms(now, ticket.attempt)),
            "{guard:?}"
        ),
    }
    assert_eq!(
        count(&store, "hermes_aux_ledger"),
        ledger_rows,
        "beginning an attempt opens no ledger row by itself"
    );
}

#[test]
fn block_kinds_that_do_not_wait_for_a_person_are_not_holds() {
    let (_dir, mut store) = scratch();
    let id = triage_card(&mut store, "blocked on a dependency");
    other_process(&store)
        .execute(
            "UPDATE tasks SET block_kind = 'dependency' WHERE id = ?1",
            [&id],
        )
        .unwrap();
    let now = now_ms();
    assert_eq!(
        store.due_cards(now, 5, &HashSet::new()).unwrap(),
        vec![id.clone()]
    );
    assert_eq!(
        begin(&mut store, &id, Origin::Gateway, now)
            .unwrap()
            .attempt,
        1
    );
}

/// How a process that died mid-attempt left the board.
#[derive(Debug, Clone, Copy)]
enum Crashed {
    /// An older build: no claim on the card, only its count and its open ledger row.
    WithoutClaim,
    /// This build: the claim names the dead process; a restarting gateway closes it first.
    WithClaim,
}

#[rstest]
#[case::without_claim(Crashed::WithoutClaim)]
#[case::with_claim(Crashed::WithClaim)]
fn a_card_whose_last_attempt_never_ended_is_parked_instead_of_offered_on_every_tick(
    #[case] crashed: Crashed,
) {
    let (_dir, mut store) = scratch();
    let poison = triage_card(&mut store, "poison");
    let t0 = now_ms();
    for attempt in 1..MAX_ATTEMPTS {
        let at = t0 + i64::from(attempt) * 10_000;
        begin(&mut store, &poison, Origin::Gateway, at).unwrap();
        store
            .record_failure(&poison, &failure(attempt, Origin::Gateway, at))
            .unwrap();
    }
    // The last attempt is counted and its request leaves; then the process dies (SIGKILL, power
    // loss) before the outcome is written, so the card is never marked parked.
    let last = t0 + i64::from(MAX_ATTEMPTS) * 10_000;
    assert_eq!(
        begin(&mut store, &poison, Origin::Gateway, last)
            .unwrap()
            .attempt,
        MAX_ATTEMPTS
    );
    ledger_of_attempt(&mut store, &poison, MAX_ATTEMPTS, last);
    crash(&store);
    let fresh = triage_card(&mut store, "fresh");
    set_due(&store, &fresh, last + 5 * PROVISIONAL_STEP_MS);

    // A restarted gateway with one slot per tick: the poison card is the oldest due.
    let later = last + 10 * PROVISIONAL_STEP_MS;
    let none = HashSet::new();
    match crashed {
        Crashed::WithoutClaim => {
            other_process(&store)
                .execute("DELETE FROM hermes_decompose_claims", [])
                .unwrap();
        }
        Crashed::WithClaim => {
            let recovered = store
                .recover_abandoned(later, &none, CardBudget::new(MAX_ATTEMPTS), Origin::Gateway)
                .unwrap();
            assert_eq!(
                recovered,
                Recovered {
                    closed_rows: 1,
                    expired: vec![],
                    failed: vec![poison.clone()],
                    refunded: vec![],
                    parked: vec![parked_at_last_attempt(&poison)],
                }
            );
        }
    }
    for _tick in 0..2 {
        for id in store.due_cards(later, 1, &none).unwrap() {
            if id == poison {
                assert_eq!(
                    begin(&mut store, &id, Origin::Gateway, later),
                    Err(BeginRefusal::Parked {
                        attempts: MAX_ATTEMPTS
                    })
                );
            }
        }
    }
    assert_eq!(
        store.due_cards(later, 1, &none).unwrap(),
        vec![fresh],
        "B2: a card whose budget is spent must not take the slot on every tick"
    );
    let parked = state(&store, &poison);
    assert_eq!((parked.due_at_ms, parked.parked_at_ms), (None, Some(later)));
    let announced = payloads_of(&store, &poison, "decompose_parked");
    assert_eq!(announced.len(), 1, "{announced:?}");
    assert_eq!(announced[0]["attempts"], json!(MAX_ATTEMPTS));
}

// ---------------------------------------------------------------------------------------------
// record_failure
// ---------------------------------------------------------------------------------------------

fn failure(attempt: u32, origin: Origin, now: i64) -> FailureRecord {
    FailureRecord {
        fence: None,
        attempt,
        origin,
        reason: format!("reply rejected: attempt {attempt}"),
        fault: None,
        rules: test_rules(),
        now_ms: now,
        pause: None,
    }
}

#[test]
fn a_failure_schedules_the_card_and_says_when_in_its_event() {
    let (_dir, mut store) = scratch();
    let id = triage_card(&mut store, "flaky");
    let now = now_ms();
    begin(&mut store, &id, Origin::Sweep, now).unwrap();
    let next = test_backoff().due_ms(now, 1);
    store
        .record_failure(&id, &failure(1, Origin::Sweep, now))
        .unwrap();

    let failed = payloads_of(&store, &id, "decompose_failed");
    assert_eq!(failed.len(), 1);
    let keys: Vec<&str> = failed[0]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["attempt", "reason", "origin", "next_attempt_at"]);
    assert_eq!(failed[0]["attempt"], json!(1));
    assert_eq!(failed[0]["reason"], json!("reply rejected: attempt 1"));
    assert_eq!(failed[0]["origin"], json!("sweep"));
    assert_eq!(
        failed[0]["next_attempt_at"].as_f64(),
        Some(next as f64 / 1000.0)
    );
    assert!(payloads_of(&store, &id, "decompose_parked").is_empty());

    let after = state(&store, &id);
    assert_eq!(after.due_at_ms, Some(next));
    assert_eq!(after.parked_at_ms, None);
    assert_eq!(
        after.last_error.as_deref(),
        Some("reply rejected: attempt 1")
    );
    assert_eq!(store.get(&id).unwrap().status, Status::Triage);
}

#[test]
fn the_budget_parks_once_even_when_a_parked_card_fails_again_by_hand() {
    let (_dir, mut store) = scratch();
    let id = triage_card(&mut store, "poison");
    let t0 = now_ms();
    for attempt in 1..=MAX_ATTEMPTS {
        let at = t0 + i64::from(attempt) * 10_000;
        assert_eq!(
            begin(&mut store, &id, Origin::Gateway, at).unwrap().attempt,
            attempt
        );
        store
            .record_failure(&id, &failure(attempt, Origin::Gateway, at))
            .unwrap();
    }
    let parked_at = t0 + i64::from(MAX_ATTEMPTS) * 10_000;
    let parked = state(&store, &id);
    assert_eq!(
        (parked.attempts, parked.due_at_ms, parked.parked_at_ms),
        (3, None, Some(parked_at))
    );
    let last_failed = payloads_of(&store, &id, "decompose_failed").pop().unwrap();
    assert_eq!(last_failed["next_attempt_at"], Value::Null);
    assert_eq!(
        payloads_of(&store, &id, "decompose_parked"),
        vec![json!({"attempts": 3, "reason": "reply rejected: attempt 3", "by": "gateway"})]
    );
    assert_eq!(
        begin(&mut store, &id, Origin::Gateway, parked_at + BACKOFF_MS),
        Err(BeginRefusal::Parked { attempts: 3 })
    );

    // A person tries again and it fails again: recorded, still parked, not announced twice.
    let later = parked_at + BACKOFF_MS;
    assert_eq!(
        begin(&mut store, &id, Origin::Manual, later)
            .unwrap()
            .attempt,
        4
    );
    store
        .record_failure(&id, &failure(4, Origin::Manual, later))
        .unwrap();
    // A failure that would otherwise schedule the card cannot reschedule a parked one.
    assert_eq!(
        begin(&mut store, &id, Origin::Manual, later + 1)
            .unwrap()
            .attempt,
        5
    );
    store
        .record_failure(&id, &failure(5, Origin::Manual, later + 1))
        .unwrap();

    let failed = payloads_of(&store, &id, "decompose_failed");
    assert_eq!(failed.len(), 5);
    assert_eq!(failed[3]["origin"], json!("manual"));
    assert!(
        failed[3..].iter().all(|p| p["next_attempt_at"].is_null()),
        "{failed:?}"
    );
    assert_eq!(payloads_of(&store, &id, "decompose_parked").len(), 1);
    let still = state(&store, &id);
    assert_eq!(
        (still.attempts, still.due_at_ms, still.parked_at_ms),
        (5, None, Some(parked_at))
    );
    assert_eq!(
        kinds(&store, &id)
            .iter()
            .filter(|k| k.starts_with("decompose_"))
            .count(),
        6
    );
}

#[test]
fn a_failed_manual_attempt_on_an_opted_out_card_keeps_it_unscheduled() {
    let (_dir, mut store) = scratch();
    let id = store
        .create_task(&NewTask {
            title: "hands off".into(),
            triage: true,
            no_auto_decompose: true,
            ..NewTask::default()
        })
        .unwrap()
        .id;
    let now = now_ms();
    begin(&mut store, &id, Origin::Manual, now).unwrap();
    store
        .record_failure(&id, &failure(1, Origin::Manual, now))
        .unwrap();
    let after = state(&store, &id);
    assert_eq!(
        (after.opt_out, after.due_at_ms, after.parked_at_ms),
        (true, None, None)
    );
    assert_eq!(
        payloads_of(&store, &id, "decompose_failed")[0]["next_attempt_at"],
        Value::Null
    );
    assert!(store
        .due_cards(now + BACKOFF_MS, 10, &HashSet::new())
        .unwrap()
        .is_empty());
}

// ---------------------------------------------------------------------------------------------
// apply_plan
// ---------------------------------------------------------------------------------------------

fn child(title: &str, assignee: &str, parents: &[usize]) -> ChildSpec {
    ChildSpec {
        title: title.into(),
        body: format!("body of {title}"),
        assignee: assignee.into(),
        parents: parents.to_vec(),
    }
}

fn options(orchestrator: &str) -> ApplyOptions {
    ApplyOptions {
        fence: None,
        orchestrator: orchestrator.into(),
        auto_promote: true,
        author: "auto-decomposer".into(),
        now_ms: now_ms(),
    }
}

#[test]
fn a_fanout_writes_the_whole_graph() {
    let (_dir, mut store) = scratch();
    let root = store
        .create_task(&NewTask {
            title: "ship the feature".into(),
            triage: true,
            tenant: Some("acme".into()),
            ..NewTask::default()
        })
        .unwrap()
        .id;
    let now = now_ms();
    begin(&mut store, &root, Origin::Gateway, now).unwrap();
    let plan = Plan::Fanout {
        rationale: "three steps".into(),
        children: vec![
            child("design", "default", &[]),
            child("build", "coder", &[0]),
            child("review", "reviewer", &[0, 1]),
        ],
    };
    let result = store
        .apply_plan(&root, &plan, &options(" Orchestrator "))
        .unwrap();
    let ApplyResult::Fanout { child_ids } = result else {
        panic!("{result:?}")
    };
    assert_eq!(child_ids.len(), 3);

    let children: Vec<Task> = child_ids.iter().map(|id| store.get(id).unwrap()).collect();
    let titles: Vec<&str> = children.iter().map(|t| t.title.as_str()).collect();
    assert_eq!(titles, ["design", "build", "review"]);
    assert_eq!(children[1].assignee.as_deref(), Some("coder"));
    assert_eq!(children[2].body.as_deref(), Some("body of review"));
    // Only the parent-free child is promoted; the others wait for their siblings.
    let statuses: Vec<Status> = children.iter().map(|t| t.status).collect();
    assert_eq!(statuses, [Status::Ready, Status::Todo, Status::Todo]);
    for (index, task) in children.iter().enumerate() {
        assert_eq!(task.tenant.as_deref(), Some("acme"), "tenant is inherited");
        assert_eq!(task.created_by.as_deref(), Some("auto-decomposer"));
        assert!(task.decompose.is_none(), "children are not triage cards");
        let created = payloads_of(&store, &task.id, "created");
        assert_eq!(
            created,
            vec![json!({"by": "auto-decomposer", "from_decompose_of": root})]
        );
        assert!(
            store.children_of(&task.id).unwrap().contains(&root),
            "child {index} does not hold the root back"
        );
    }
    assert_eq!(kinds(&store, &child_ids[0]), ["created", "promoted"]);
    assert_eq!(kinds(&store, &child_ids[1]), ["created", "linked"]);
    assert_eq!(
        kinds(&store, &child_ids[2]),
        ["created", "linked", "linked"]
    );
    assert_eq!(
        payloads_of(&store, &child_ids[2], "linked"),
        vec![
            json!({"parent": child_ids[0], "child": child_ids[2]}),
            json!({"parent": child_ids[1], "child": child_ids[2]}),
        ]
    );

    let mut sorted_children = child_ids.clone();
    sorted_children.sort();
    assert_eq!(
        store.parents_of(&root).unwrap(),
        sorted_children,
        "the root waits for every child"
    );
    assert_eq!(
        store.parents_of(&child_ids[1]).unwrap(),
        vec![child_ids[0].clone()]
    );
    let mut review_parents = vec![child_ids[0].clone(), child_ids[1].clone()];
    review_parents.sort();
    assert_eq!(store.parents_of(&child_ids[2]).unwrap(), review_parents);
    assert_eq!(count(&store, "task_links"), 3 + 3);

    let root_task = store.get(&root).unwrap();
    assert_eq!(root_task.status, Status::Todo);
    assert_eq!(root_task.assignee.as_deref(), Some("orchestrator"));
    assert_eq!(
        payloads_of(&store, &root, "decomposed"),
        vec![json!({"child_ids": child_ids, "root_assignee": "orchestrator"})]
    );
    let closed = root_task.decompose.unwrap();
    assert_eq!((closed.due_at_ms, closed.last_error), (None, None));
    assert!(store
        .due_cards(now + 10 * BACKOFF_MS, 10, &HashSet::new())
        .unwrap()
        .is_empty());
}

#[test]
fn without_auto_promote_children_stay_todo() {
    let (_dir, mut store) = scratch();
    let root = triage_card(&mut store, "root");
    let plan = Plan::Fanout {
        rationale: String::new(),
        children: vec![child("only", "default", &[])],
    };
    let opts = ApplyOptions {
        fence: None,
        auto_promote: false,
        ..options("default")
    };
    let ApplyResult::Fanout { child_ids } = store.apply_plan(&root, &plan, &opts).unwrap() else {
        panic!("expected a fan-out")
    };
    assert_eq!(store.get(&child_ids[0]).unwrap().status, Status::Todo);
    assert_eq!(kinds(&store, &child_ids[0]), ["created"]);
}

/// Promotion follows the change, not the board: a stale `todo` card elsewhere (written by another
/// tool and never promoted) is not this transaction's business, and walking every `todo` card
/// made each apply cost time in proportion to the board.
#[test]
fn a_fanout_promotes_only_the_cards_it_freed() {
    let (_dir, mut store) = scratch();
    let root = triage_card(&mut store, "root");
    other_process(&store)
        .execute(
            "INSERT INTO tasks (id, title, status, created_at) VALUES ('t_0000beef', 'stale', 'todo', 1)",
            [],
        )
        .unwrap();
    let plan = Plan::Fanout {
        rationale: String::new(),
        children: vec![
            child("first", "default", &[]),
            child("second", "default", &[0]),
        ],
    };
    let ApplyResult::Fanout { child_ids } =
        store.apply_plan(&root, &plan, &options("default")).unwrap()
    else {
        panic!("expected a fan-out")
    };
    assert_eq!(store.get(&child_ids[0]).unwrap().status, Status::Ready);
    assert_eq!(store.get(&child_ids[1]).unwrap().status, Status::Todo);
    assert_eq!(store.get("t_0000beef").unwrap().status, Status::Todo);
    assert!(kinds(&store, "t_0000beef").is_empty());
}

#[test]
fn a_fanout_that_fails_midway_leaves_nothing_behind() {
    let (_dir, mut store) = scratch();
    let root = triage_card(&mut store, "root");
    let now = now_ms();
    begin(&mut store, &root, Origin::Gateway, now).unwrap();
    let before = dump(&store);
    // A blank assignee is refused by the store only when it reaches the second child, after
    // the first child's rows were already written inside the transaction.
    let plan = Plan::Fanout {
        rationale: String::new(),
        children: vec![child("fine", "default", &[]), child("broken", "   ", &[0])],
    };
    let err = store
        .apply_plan(&root, &plan, &options("default"))
        .unwrap_err();
    assert!(matches!(err, StoreError::Invalid(_)), "{err}");
    assert_eq!(
        dump(&store),
        before,
        "a failed apply must roll back every row, the schedule too"
    );
}

fn single(title: Option<&str>, body: Option<&str>, assignee: &str) -> Plan {
    Plan::Single {
        rationale: "one unit".into(),
        title: title.map(Into::into),
        body: body.map(Into::into),
        assignee: assignee.into(),
    }
}

#[test]
fn a_single_tightens_the_card_in_place() {
    let (_dir, mut store) = scratch();
    let unassigned = triage_card(&mut store, "vague");
    let owned = store
        .create_task(&NewTask {
            title: "keep me".into(),
            body: Some("same body".into()),
            assignee: Some("alice".into()),
            triage: true,
            ..NewTask::default()
        })
        .unwrap()
        .id;
    let now = now_ms();
    begin(&mut store, &unassigned, Origin::Manual, now).unwrap();

    let result = store
        .apply_plan(
            &unassigned,
            &single(Some("Precise title"), Some("Steps: 1, 2"), " Coder"),
            &options("default"),
        )
        .unwrap();
    assert_eq!(
        result,
        ApplyResult::Single {
            new_title: Some("Precise title".into())
        }
    );
    let task = store.get(&unassigned).unwrap();
    assert_eq!(task.title, "Precise title");
    assert_eq!(task.body.as_deref(), Some("Steps: 1, 2"));
    assert_eq!(
        task.assignee.as_deref(),
        Some("coder"),
        "an unassigned card takes the reply's assignee"
    );
    assert_eq!(
        task.status,
        Status::Ready,
        "triage -> todo, then promoted: it has no parents"
    );
    assert_eq!(
        kinds(&store, &unassigned),
        ["created", "specified", "promoted"]
    );
    assert_eq!(
        payloads_of(&store, &unassigned, "specified"),
        vec![json!({"changed_fields": ["title", "body", "assignee"]})]
    );
    assert_eq!(task.decompose.unwrap().due_at_ms, None);
    assert_eq!(count(&store, "tasks"), 2, "a single creates no card");

    // Same title, same body, an owner already: nothing changes but the status.
    let result = store
        .apply_plan(
            &owned,
            &single(Some("keep me"), Some("same body"), "bob"),
            &options("default"),
        )
        .unwrap();
    assert_eq!(result, ApplyResult::Single { new_title: None });
    let task = store.get(&owned).unwrap();
    assert_eq!(
        (
            task.title.as_str(),
            task.body.as_deref(),
            task.assignee.as_deref()
        ),
        ("keep me", Some("same body"), Some("alice"))
    );
    assert_eq!(payloads_of(&store, &owned, "specified"), vec![Value::Null]);
    assert_eq!(task.status, Status::Ready);
}

#[test]
fn a_single_for_a_card_with_an_open_parent_stays_todo() {
    let (_dir, mut store) = scratch();
    let parent = store
        .create_task(&NewTask {
            title: "first".into(),
            ..NewTask::default()
        })
        .unwrap()
        .id;
    let id = store
        .create_task(&NewTask {
            title: "second".into(),
            parents: vec![parent],
            triage: true,
            ..NewTask::default()
        })
        .unwrap()
        .id;
    store
        .apply_plan(
            &id,
            &single(None, Some("details"), "default"),
            &options("default"),
        )
        .unwrap();
    assert_eq!(store.get(&id).unwrap().status, Status::Todo);
    assert_eq!(
        payloads_of(&store, &id, "specified"),
        vec![json!({"changed_fields": ["body", "assignee"]})]
    );
}

#[rstest]
#[case::moved_to_todo("todo")]
#[case::blocked("blocked")]
#[case::archived("archived")]
fn a_card_that_left_triage_during_the_call_gets_no_rows(#[case] status: &str) {
    let (_dir, mut store) = scratch();
    let root = triage_card(&mut store, "root");
    let now = now_ms();
    begin(&mut store, &root, Origin::Gateway, now).unwrap();
    // A person moves the card while the provider is still answering.
    other_process(&store)
        .execute(
            "UPDATE tasks SET status = ?2 WHERE id = ?1",
            params![root, status],
        )
        .unwrap();
    let tables = ["tasks", "task_links", "task_events"];
    let counts: Vec<i64> = tables.iter().map(|t| count(&store, t)).collect();

    for plan in [
        Plan::Fanout {
            rationale: String::new(),
            children: vec![child("a", "default", &[]), child("b", "default", &[0])],
        },
        single(Some("new title"), None, "default"),
    ] {
        let result = store.apply_plan(&root, &plan, &options("default")).unwrap();
        assert_eq!(
            result,
            ApplyResult::LeftTriage {
                status: status.into()
            }
        );
        let after: Vec<i64> = tables.iter().map(|t| count(&store, t)).collect();
        assert_eq!(
            after, counts,
            "B4: nothing written for a card that left triage"
        );
    }
    let task = store.get(&root).unwrap();
    assert_eq!(
        (task.title.as_str(), task.status.as_str()),
        ("root", status)
    );
    assert_eq!(
        task.decompose.unwrap().due_at_ms,
        None,
        "the card is no longer waiting"
    );
}

#[test]
fn applying_to_an_unknown_card_is_an_error_and_writes_nothing() {
    let (_dir, mut store) = scratch();
    triage_card(&mut store, "bystander");
    let before = dump(&store);
    let err = store
        .apply_plan(
            "t_00000000",
            &single(Some("x"), None, "default"),
            &options("default"),
        )
        .unwrap_err();
    assert!(
        matches!(err, StoreError::NoSuchTask(ref id) if id == "t_00000000"),
        "{err}"
    );
    assert_eq!(dump(&store), before);
}

// ---------------------------------------------------------------------------------------------
// due_cards and sync_decompose_state
// ---------------------------------------------------------------------------------------------

fn set_due(store: &Store, id: &str, due_at_ms: i64) {
    other_process(store)
        .execute(
            "UPDATE hermes_decompose_state SET due_at_ms = ?2 WHERE task_id = ?1",
            params![id, due_at_ms],
        )
        .unwrap();
}

#[test]
fn due_cards_are_the_oldest_due_first_and_never_a_held_one() {
    let now = now_ms();
    let (_dir, mut store) = scratch();
    let mut eligible = Vec::new();
    for (title, due) in [
        ("third", now - 1_000),
        ("first", now - 30_000),
        ("second", now - 20_000),
    ] {
        let id = triage_card(&mut store, title);
        set_due(&store, &id, due);
        eligible.push((due, id));
    }
    eligible.sort();
    let oldest_first: Vec<String> = eligible.into_iter().map(|(_, id)| id).collect();

    // One of each kind of card that must never be offered, all due long ago.
    let raw = other_process(&store);
    let mut never = Vec::new();
    for (title, sql) in [
        (
            "backoff",
            "UPDATE hermes_decompose_state SET due_at_ms = ?2 + 60000 WHERE task_id = ?1",
        ),
        (
            "parked",
            "UPDATE hermes_decompose_state SET parked_at_ms = ?2 WHERE task_id = ?1",
        ),
        (
            "has run",
            "UPDATE tasks SET started_at = ?2 / 1000 WHERE id = ?1",
        ),
        (
            "needs input",
            "UPDATE tasks SET block_kind = 'needs_input' WHERE id = ?1 AND ?2 > 0",
        ),
        (
            "capability",
            "UPDATE tasks SET block_kind = 'capability' WHERE id = ?1 AND ?2 > 0",
        ),
        (
            "left triage",
            "UPDATE tasks SET status = 'todo' WHERE id = ?1 AND ?2 > 0",
        ),
    ] {
        let id = triage_card(&mut store, title);
        set_due(&store, &id, now - 60_000);
        assert_eq!(raw.execute(sql, params![id, now]).unwrap(), 1, "{title}");
        never.push(id);
    }
    let opted_out = store
        .create_task(&NewTask {
            title: "opted out".into(),
            triage: true,
            no_auto_decompose: true,
            ..NewTask::default()
        })
        .unwrap()
        .id;
    set_due(&store, &opted_out, now - 60_000);
    never.push(opted_out);

    let none = HashSet::new();
    assert_eq!(store.due_cards(now, 100, &none).unwrap(), oldest_first);
    assert_eq!(store.due_cards(now, 2, &none).unwrap(), oldest_first[..2]);
    assert!(store.due_cards(now, 0, &none).unwrap().is_empty());
    assert!(
        store
            .due_cards(now - 40_000, 100, &none)
            .unwrap()
            .is_empty(),
        "not due yet"
    );

    // Excluded cards (already in flight) do not use up the limit.
    let in_flight: HashSet<String> = [oldest_first[0].clone()].into();
    assert_eq!(
        store.due_cards(now, 2, &in_flight).unwrap(),
        oldest_first[1..]
    );

    // The backoff card becomes due when its time comes; the others never do.
    let later = store.due_cards(now + 120_000, 100, &none).unwrap();
    assert_eq!(
        later,
        [oldest_first.clone(), vec![never[0].clone()]].concat()
    );
}

#[test]
fn equal_due_times_are_ordered_by_id() {
    let (_dir, mut store) = scratch();
    let now = now_ms();
    let mut ids: Vec<String> = (0..5)
        .map(|i| triage_card(&mut store, &format!("card {i}")))
        .collect();
    for id in &ids {
        set_due(&store, id, now - 5_000);
    }
    ids.sort();
    assert_eq!(store.due_cards(now, 10, &HashSet::new()).unwrap(), ids);
}

fn insert_raw_triage(conn: &Connection, id: &str, created_at_secs: i64) {
    conn.execute(
        "INSERT INTO tasks (id, title, status, created_at) VALUES (?1, ?2, 'triage', ?3)",
        params![
            id,
            format!("written by another tool: {id}"),
            created_at_secs
        ],
    )
    .unwrap();
}

#[test]
fn cards_written_by_another_tool_are_scheduled_by_sync() {
    let (_dir, mut store) = scratch();
    let ours = triage_card(&mut store, "ours");
    let now = now_ms();
    let raw = other_process(&store);
    insert_raw_triage(&raw, "t_aaaa0001", now / 1000 - 100);
    raw.execute(
        "INSERT INTO tasks (id, title, status, created_at) VALUES ('t_aaaa0002', 'not triage', 'ready', ?1)",
        [now / 1000],
    )
    .unwrap();
    let none = HashSet::new();
    assert_eq!(store.due_cards(now, 10, &none).unwrap(), vec![ours.clone()]);

    // Incremental on a fresh handle covers the whole board once.
    assert_eq!(store.sync_decompose_state(now, false).unwrap(), 1);
    let synced = state(&store, "t_aaaa0001");
    assert_eq!(synced.attempts, 0);
    assert_eq!(
        synced.due_at_ms,
        Some((now / 1000 - 100) * 1000),
        "due from its creation time"
    );
    assert!(store.get("t_aaaa0002").unwrap().decompose.is_none());
    assert_eq!(
        store.due_cards(now, 10, &none).unwrap(),
        vec!["t_aaaa0001".to_owned(), ours.clone()]
    );

    // A newer card is picked up incrementally; one created "in the future" is due now, not later.
    insert_raw_triage(&raw, "t_aaaa0003", now / 1000 + 3600);
    assert_eq!(store.sync_decompose_state(now, false).unwrap(), 1);
    assert_eq!(state(&store, "t_aaaa0003").due_at_ms, Some(now));

    // Nothing new: no write at all. Another process holding the write lock proves it, since a
    // write transaction would wait for it (and fail after the busy timeout).
    raw.execute_batch("BEGIN IMMEDIATE").unwrap();
    let started = Instant::now();
    assert_eq!(store.sync_decompose_state(now, false).unwrap(), 0);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    raw.execute_batch("COMMIT").unwrap();
}

#[test]
fn only_a_full_sync_sees_an_older_card_moved_into_triage() {
    let (_dir, mut store) = scratch();
    let old = store
        .create_task(&NewTask {
            title: "was ready".into(),
            ..NewTask::default()
        })
        .unwrap()
        .id;
    let now = now_ms();
    assert_eq!(store.sync_decompose_state(now, false).unwrap(), 0);
    other_process(&store)
        .execute("UPDATE tasks SET status = 'triage' WHERE id = ?1", [&old])
        .unwrap();
    assert_eq!(
        store.sync_decompose_state(now, false).unwrap(),
        0,
        "no new row since the last sync"
    );
    assert!(store.get(&old).unwrap().decompose.is_none());
    assert_eq!(store.sync_decompose_state(now, true).unwrap(), 1);
    assert!(state(&store, &old).due_at_ms.is_some());
    // Existing state is never overwritten: a full sync again adds nothing.
    assert_eq!(store.sync_decompose_state(now, true).unwrap(), 0);
}

#[test]
fn sync_on_an_empty_board_writes_nothing() {
    let (_dir, mut store) = scratch();
    let raw = other_process(&store);
    raw.execute_batch("BEGIN IMMEDIATE").unwrap();
    assert_eq!(store.sync_decompose_state(now_ms(), true).unwrap(), 0);
    raw.execute_batch("COMMIT").unwrap();
}

// ---------------------------------------------------------------------------------------------
// The ledger, the pause and the ceiling
// ---------------------------------------------------------------------------------------------

#[derive(Debug, PartialEq)]
struct LedgerRow {
    task_id: String,
    origin: String,
    attempt: u32,
    try_no: u32,
    outcome: String,
    http_status: Option<u16>,
    prompt_tokens: Option<i64>,
    completion_tokens: Option<i64>,
    ended: bool,
}

fn ledger_rows(store: &Store) -> Vec<LedgerRow> {
    let mut stmt = store
        .conn
        .prepare(
            "SELECT task_id, origin, attempt, try, outcome, http_status, prompt_tokens,
                    completion_tokens, ended_at_ms IS NOT NULL
             FROM hermes_aux_ledger ORDER BY id",
        )
        .unwrap();
    let rows = stmt
        .query_map([], |r| {
            Ok(LedgerRow {
                task_id: r.get(0)?,
                origin: r.get(1)?,
                attempt: r.get(2)?,
                try_no: r.get(3)?,
                outcome: r.get(4)?,
                http_status: r.get(5)?,
                prompt_tokens: r.get(6)?,
                completion_tokens: r.get(7)?,
                ended: r.get(8)?,
            })
        })
        .unwrap();
    rows.collect::<Result<_, _>>().unwrap()
}

#[test]
fn every_request_gets_a_row_opened_before_and_closed_after() {
    let (_dir, mut store) = scratch();
    let id = triage_card(&mut store, "billed");
    let now = now_ms();
    let open = |try_no| LedgerOpen {
        fence: None,
        model: None,
        task_id: id.clone(),
        origin: Origin::Sweep,
        attempt: 1,
        try_no,
        started_at_ms: now,
        guards: None,
    };
    let first = store.ledger_open(&open(1)).unwrap().unwrap();
    assert_eq!(
        ledger_rows(&store),
        vec![LedgerRow {
            task_id: id.clone(),
            origin: "sweep".into(),
            attempt: 1,
            try_no: 1,
            outcome: "in_flight".into(),
            http_status: None,
            prompt_tokens: None,
            completion_tokens: None,
            ended: false,
        }],
        "the row exists while the request is in flight"
    );
    store
        .ledger_close(
            first,
            &LedgerClose {
                http_status: Some(503),
                detail: Some("provider failed (HTTP 503)".into()),
                ..LedgerClose::new(now + 10, LedgerOutcome::ServerError)
            },
        )
        .unwrap();
    let second = store.ledger_open(&open(2)).unwrap().unwrap();
    assert_ne!(first, second);
    store
        .ledger_close(
            second,
            &LedgerClose {
                ended_at_ms: now + 20,
                outcome: LedgerOutcome::Ok,
                http_status: Some(200),
                prompt_tokens: Some(120),
                completion_tokens: Some(34),
                detail: None,
            },
        )
        .unwrap();
    let rows = ledger_rows(&store);
    assert_eq!(rows.len(), 2);
    assert_eq!(
        (rows[0].outcome.as_str(), rows[0].http_status, rows[0].ended),
        ("server_error", Some(503), true)
    );
    assert_eq!(
        (
            rows[1].try_no,
            rows[1].outcome.as_str(),
            rows[1].prompt_tokens,
            rows[1].completion_tokens
        ),
        (2, "ok", Some(120), Some(34))
    );
    assert_eq!(store.calls_since(now).unwrap(), 2);
    assert_eq!(store.calls_since(now + 1).unwrap(), 0);
}

#[test]
fn the_ceiling_refuses_a_request_at_the_limit_and_forgets_calls_older_than_an_hour() {
    let (_dir, mut store) = scratch();
    let now = now_ms();
    ledger(&mut store, "t_00000001", now - HOUR_MS - 1);
    ledger(&mut store, "t_00000001", now - HOUR_MS + 1_000);
    let open = LedgerOpen {
        fence: None,
        model: None,
        task_id: "t_00000002".into(),
        origin: Origin::Gateway,
        attempt: 1,
        try_no: 2,
        started_at_ms: now,
        guards: Some(2),
    };
    // One call in the window: room for one more.
    assert!(store.ledger_open(&open).unwrap().is_ok());
    let before = dump(&store);
    assert_eq!(
        store.ledger_open(&open).unwrap(),
        Err(BeginRefusal::CeilingReached { calls: 2, limit: 2 })
    );
    assert_eq!(dump(&store), before, "a refused request leaves no row");
    // Without enforcement (a person's choice) the row is written whatever the count.
    let manual = LedgerOpen {
        fence: None,
        model: None,
        guards: None,
        ..open.clone()
    };
    assert!(store.ledger_open(&manual).unwrap().is_ok());
    // Once the older call leaves the window, the same request fits again.
    let later = LedgerOpen {
        fence: None,
        model: None,
        started_at_ms: now + 2_000,
        guards: Some(3),
        ..open
    };
    assert!(store.ledger_open(&later).unwrap().is_ok());
}

#[test]
fn usage_totals_cards_window_and_pause() {
    let (_dir, mut store) = scratch();
    let a = triage_card(&mut store, "card a");
    let b = triage_card(&mut store, "card b");
    let now = now_ms();
    begin(&mut store, &a, Origin::Gateway, now).unwrap();
    let close = |store: &mut Store, row, outcome, tokens: Option<(u64, u64)>| {
        store
            .ledger_close(
                row,
                &LedgerClose {
                    ended_at_ms: now,
                    outcome,
                    http_status: None,
                    prompt_tokens: tokens.map(|t| t.0),
                    completion_tokens: tokens.map(|t| t.1),
                    detail: None,
                },
            )
            .unwrap()
    };
    let old = ledger(&mut store, &a, now - 2 * HOUR_MS);
    close(&mut store, old, LedgerOutcome::Timeout, None);
    let r1 = ledger(&mut store, &a, now - 10_000);
    close(&mut store, r1, LedgerOutcome::ServerError, None);
    let r2 = ledger(&mut store, &a, now - 5_000);
    close(&mut store, r2, LedgerOutcome::Ok, Some((100, 20)));
    ledger(&mut store, &b, now - 1_000); // still in flight
    let orphan = ledger(&mut store, "t_99999999", now - 3_000);
    close(&mut store, orphan, LedgerOutcome::Aborted, None);

    let all = store.usage(None, now, 50).unwrap();
    assert_eq!(all.since, None);
    assert_eq!(
        all.totals,
        UsageTotals {
            calls: 5,
            ok: 1,
            failed: 3,
            unknown: 0,
            unreachable: 0,
            prompt_tokens: 100,
            completion_tokens: 20,
            // The rows here name no model, as rows from before the ledger recorded it.
            models: vec![ModelUsage {
                model: None,
                calls: 5,
                prompt_tokens: 100,
                completion_tokens: 20,
                estimated_cost_usd: None,
            }],
            estimated_cost_usd: None,
            unpriced_calls: None,
        },
        "an in-flight call is paid for but neither ok nor failed yet"
    );
    assert_eq!(
        all.window,
        UsageWindow {
            calls_last_hour: 4,
            limit: 50
        }
    );
    assert_eq!(all.pause, None);
    let order: Vec<&str> = all.cards.iter().map(|c| c.task_id.as_str()).collect();
    assert_eq!(
        order,
        [b.as_str(), "t_99999999", a.as_str()],
        "most recent call first"
    );
    let card_a = &all.cards[2];
    assert_eq!(
        (
            card_a.calls,
            card_a.ok,
            card_a.failed,
            card_a.prompt_tokens,
            card_a.completion_tokens
        ),
        (3, 1, 2, 100, 20)
    );
    assert_eq!(
        (card_a.title.as_deref(), card_a.status.as_deref()),
        (Some("card a"), Some("triage"))
    );
    assert_eq!((card_a.attempts, card_a.parked), (1, false));
    assert_eq!(card_a.last_call_at, Some((now - 5_000) as f64 / 1000.0));
    assert_eq!(
        (all.cards[1].title.as_deref(), all.cards[1].attempts),
        (None, 0)
    );

    let recent = store.usage(Some(now - HOUR_MS), now, 50).unwrap();
    assert_eq!(recent.since, Some((now - HOUR_MS).div_euclid(1000)));
    assert_eq!(recent.totals.calls, 4);
    assert_eq!(recent.cards[2].calls, 2);

    store
        .set_pause(now + 60_000, "provider rate limit (HTTP 429)")
        .unwrap();
    let paused = store.usage(None, now, 50).unwrap();
    assert_eq!(
        paused.pause,
        Some(UsagePause {
            until: (now + 60_000) as f64 / 1000.0,
            reason: "provider rate limit (HTTP 429)".into()
        })
    );
    assert_eq!(
        store.usage(None, now + 60_000, 50).unwrap().pause,
        None,
        "an expired pause is not reported"
    );
}

#[test]
fn a_pause_in_force_is_never_shortened_but_an_expired_one_is_replaced() {
    let (_dir, mut store) = scratch();
    let now = now_ms();
    assert_eq!(store.pause().unwrap(), None);
    store
        .set_pause(now + 600_000, "provider requires payment (HTTP 402)")
        .unwrap();
    store
        .set_pause(now + 30_000, "provider rate limit (HTTP 429)")
        .unwrap();
    assert_eq!(
        store.pause().unwrap().map(|p| (p.until_ms, p.reason)),
        Some((
            now + 600_000,
            "provider requires payment (HTTP 402)".to_owned()
        ))
    );
    store
        .set_pause(now + 900_000, "provider refused the API key (HTTP 401)")
        .unwrap();
    assert_eq!(
        store.pause().unwrap().map(|p| p.until_ms),
        Some(now + 900_000),
        "a longer pause extends"
    );

    // The long pause has run out (as if time passed): a short new one takes its place.
    other_process(&store)
        .execute(
            "UPDATE hermes_board_state SET until_ms = ?1 WHERE key = 'provider_pause'",
            [now - 1],
        )
        .unwrap();
    assert_eq!(
        store.auto_gate(now, 10).unwrap(),
        AutoGate::Open { calls_left: 10 }
    );
    store
        .set_pause(now + 30_000, "provider rate limit (HTTP 429)")
        .unwrap();
    assert_eq!(
        store.pause().unwrap().map(|p| (p.until_ms, p.reason)),
        Some((now + 30_000, "provider rate limit (HTTP 429)".to_owned()))
    );
}

#[test]
fn the_auto_gate_reads_the_pause_before_the_ceiling() {
    let (_dir, mut store) = scratch();
    let now = now_ms();
    assert_eq!(
        store.auto_gate(now, 3).unwrap(),
        AutoGate::Open { calls_left: 3 }
    );
    ledger(&mut store, "t_00000001", now - 1_000);
    assert_eq!(
        store.auto_gate(now, 3).unwrap(),
        AutoGate::Open { calls_left: 2 }
    );
    ledger(&mut store, "t_00000001", now - 500);
    ledger(&mut store, "t_00000001", now - 100);
    assert_eq!(
        store.auto_gate(now, 3).unwrap(),
        AutoGate::CeilingReached { calls: 3, limit: 3 }
    );
    assert_eq!(
        store.auto_gate(now + HOUR_MS - 999, 3).unwrap(),
        AutoGate::Open { calls_left: 1 },
        "the window rolls: the oldest call left it"
    );
    store.set_pause(now + 5_000, "cooling down").unwrap();
    assert_eq!(
        store.auto_gate(now, 3).unwrap(),
        AutoGate::Paused {
            until_ms: now + 5_000,
            reason: "cooling down".into()
        }
    );
    assert_eq!(
        store.auto_gate(now + 5_000, 3).unwrap(),
        AutoGate::CeilingReached { calls: 3, limit: 3 }
    );
}

#[test]
fn a_card_whose_text_is_not_text_is_set_aside_once_and_never_takes_a_slot() {
    let (_dir, mut store) = scratch();
    let latin1 = triage_card(&mut store, "latin-1 title");
    let blob = triage_card(&mut store, "blob body");
    let fresh = triage_card(&mut store, "fresh");
    let other = other_process(&store);
    other
        .execute(
            "UPDATE tasks SET title = CAST(?1 AS TEXT) WHERE id = ?2",
            params![b"caf\xe9".to_vec(), latin1],
        )
        .unwrap();
    other
        .execute(
            "UPDATE tasks SET body = ?1 WHERE id = ?2",
            params![vec![0u8, 159, 146, 150], blob],
        )
        .unwrap();
    // The fresh card is due last (cards made in the same millisecond are ordered by id): the
    // unreadable ones ahead of it must not take its slot.
    other
        .execute(
            "UPDATE hermes_decompose_state SET due_at_ms = due_at_ms + 1000 WHERE task_id = ?1",
            [&fresh],
        )
        .unwrap();
    let now = now_ms() + 2000;
    let none = HashSet::new();
    let (due, set_aside) = store.pick_due(now, 1, &none, Origin::Gateway).unwrap();
    assert_eq!(due, [fresh], "the one slot goes to the fresh card");
    // Both are set aside, in due order (by id when they were made in the same millisecond).
    let why = |card: &str| {
        set_aside
            .iter()
            .find(|aside| aside.task_id == card)
            .map(|aside| aside.why.clone())
    };
    assert_eq!(set_aside.len(), 2, "{set_aside:?}");
    let latin1_why = why(&latin1).expect("the Latin-1 card set aside");
    assert!(latin1_why.contains("not valid UTF-8"), "{latin1_why}");
    let blob_why = why(&blob).expect("the BLOB card set aside");
    assert!(
        blob_why.contains("stored as a BLOB of 4 bytes"),
        "{blob_why}"
    );
    // Parked: never picked again, and its row is shown as best it can be.
    assert!(store
        .pick_due(now, 5, &none, Origin::Gateway)
        .unwrap()
        .1
        .is_empty());
    assert_eq!(kinds(&store, &latin1), ["created", "decompose_parked"]);
    let shown = store.get(&latin1).unwrap();
    assert_eq!(shown.title, "caf\u{fffd}");
    assert!(shown.decompose.unwrap().parked_at_ms.is_some());
    assert_eq!(store.list(&ListFilter::default()).unwrap().len(), 3);
    // By hand: refused, nothing written.
    let refused = store
        .begin_attempt(&blob, &policy(Origin::Manual, now))
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(refused, BeginRefusal::Unreadable { .. }),
        "{refused:?}"
    );
    assert_eq!(kinds(&store, &blob), ["created", "decompose_parked"]);
}

/// How recovery reports a card whose abandoned attempt was its last.
fn parked_at_last_attempt(task_id: &str) -> super::ParkedCard {
    super::ParkedCard {
        task_id: task_id.to_owned(),
        attempt: MAX_ATTEMPTS,
    }
}
