//! Claims (B1/B4 across processes), attempts given back when nothing was sent, the pause of an
//! unreachable provider, attempts abandoned by dead processes (ledger rows closed as `unknown`),
//! refusal episodes that pause once, and the guards at their extremes. Other processes are
//! simulated by writing their claims with their process tokens.

use std::collections::HashSet;
use std::time::Duration;

use rstest::rstest;
use rusqlite::params;
use serde_json::Value;

use super::tests::{ledger_of_attempt, other_process, scratch, triage_card};
use super::*;
use crate::core::{Backoff, CardBudget, CardRules, LedgerOutcome, UNREACHABLE_MIN_PAUSE};
use crate::process;

const MAX_ATTEMPTS: u32 = 3;
const CLAIM_MS: i64 = 600_000;

/// The card rules these tests run under: `max_attempts` attempts, a one-second backoff.
fn rules(max_attempts: u32) -> CardRules {
    CardRules {
        budget: CardBudget::new(max_attempts),
        backoff: Backoff::new(Duration::from_secs(1)),
    }
}

fn policy(origin: Origin, now_ms: i64, max_attempts: u32, calls_per_hour: u32) -> BeginPolicy {
    BeginPolicy {
        force: false,
        origin,
        now_ms,
        rules: rules(max_attempts),
        calls_per_hour,
        claim_until_ms: now_ms + CLAIM_MS,
    }
}

fn begin(
    store: &mut Store,
    id: &str,
    origin: Origin,
    now: i64,
) -> Result<AttemptTicket, BeginRefusal> {
    store
        .begin_attempt(id, &policy(origin, now, MAX_ATTEMPTS, 100))
        .unwrap()
}

fn close_row(store: &mut Store, id: i64, outcome: LedgerOutcome, at: i64) {
    store
        .ledger_close(id, &LedgerClose::new(at, outcome))
        .unwrap();
}

fn outcomes(store: &Store) -> Vec<String> {
    let mut stmt = store
        .conn
        .prepare("SELECT outcome FROM hermes_aux_ledger ORDER BY id")
        .unwrap();
    let rows = stmt.query_map([], |r| r.get(0)).unwrap();
    rows.collect::<Result<_, _>>().unwrap()
}

fn attempts(store: &Store, id: &str) -> u32 {
    store.get(id).unwrap().decompose.unwrap().attempts
}

fn events(store: &Store, id: &str, kind: &str) -> Vec<Value> {
    store
        .events_of(id)
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == kind)
        .map(|e| e.payload.unwrap_or(Value::Null))
        .collect()
}

/// Makes the card's claim belong to `owner`, expiring at `until_ms`.
fn hand_claim_to(store: &Store, id: &str, owner: &str, until_ms: i64) {
    let changed = other_process(store)
        .execute(
            "UPDATE hermes_decompose_claims SET owner = ?2, until_ms = ?3 WHERE task_id = ?1",
            params![id, owner, until_ms],
        )
        .unwrap();
    assert_eq!(changed, 1, "{id} has a claim");
}

/// A live process other than this one, as its lock file says (see `process`).
fn live_holder(store: &Store) -> process::TestHolder {
    process::TestHolder::alive(store.path(), 4242)
}

// ---------------------------------------------------------------------------------------------
// claims
// ---------------------------------------------------------------------------------------------

#[test]
fn a_claim_is_recorded_with_the_attempt_and_released_with_its_end() {
    let (_dir, mut store) = scratch();
    let failed = triage_card(&mut store, "fails");
    let applied = triage_card(&mut store, "splits");
    let unsent = triage_card(&mut store, "never sent");
    let now = now_ms();
    let none = HashSet::new();

    for id in [&failed, &applied, &unsent] {
        let ticket = begin(&mut store, id, Origin::Gateway, now).unwrap();
        let claim = store.claim(id).unwrap().unwrap();
        assert_eq!(
            (
                claim.attempt,
                claim.origin.as_str(),
                claim.owner.as_str(),
                claim.until_ms
            ),
            (ticket.attempt, "gateway", process::token(), now + CLAIM_MS)
        );
    }
    // Claimed cards are not due, even once their backoff has passed.
    assert!(store.due_cards(now + 5_000, 10, &none).unwrap().is_empty());

    store
        .record_failure(
            &failed,
            &FailureRecord {
                fence: None,
                attempt: 1,
                origin: Origin::Gateway,
                reason: "reply rejected".into(),
                fault: None,
                rules: rules(MAX_ATTEMPTS),
                now_ms: now,
                pause: None,
            },
        )
        .unwrap();
    store
        .apply_plan(
            &applied,
            &crate::core::Plan::Single {
                rationale: "fine".into(),
                title: Some("sharper".into()),
                body: None,
                assignee: "default".into(),
            },
            &ApplyOptions {
                fence: None,
                orchestrator: "default".into(),
                auto_promote: true,
                author: "auto-decomposer".into(),
                now_ms: now,
            },
        )
        .unwrap();
    let pause = store
        .record_nothing_sent(
            &unsent,
            &NothingSentRecord {
                fence: None,
                attempt: 1,
                now_ms: now,
                unreachable: None,
            },
        )
        .unwrap();
    assert_eq!(pause, NothingSentRecorded::GivenBack(None));
    for id in [&failed, &applied, &unsent] {
        assert_eq!(store.claim(id).unwrap(), None, "{id}: released");
    }
    assert_eq!(
        store.due_cards(now + 1_000, 10, &none).unwrap(),
        vec![unsent.clone(), failed.clone()]
    );
    assert_eq!(
        attempts(&store, &unsent),
        0,
        "nothing was sent: not counted"
    );
}

#[rstest]
fn a_live_holder_keeps_the_card_from_every_origin_whatever_the_clock_says(
    #[values(Origin::Gateway, Origin::Sweep, Origin::Manual)] origin: Origin,
) {
    let (_dir, mut store) = scratch();
    let id = triage_card(&mut store, "in flight elsewhere");
    let now = now_ms();
    begin(&mut store, &id, Origin::Gateway, now).unwrap();
    let other = live_holder(&store);
    // Expired by the clock (a clock that jumped forward, or a reply slower than its span):
    // the holder is alive, so its request may still be applied.
    hand_claim_to(&store, &id, &other.token, now - 1);
    let before = attempts(&store, &id);
    match begin(&mut store, &id, origin, now + 2 * CLAIM_MS) {
        Err(BeginRefusal::Claimed { until_ms, by }) => {
            assert_eq!(until_ms, now - 1);
            assert!(by.contains("pid 4242"), "names the holder: {by}");
        }
        other => panic!("expected a claim refusal, got {other:?}"),
    }
    assert_eq!(attempts(&store, &id), before, "a refusal counts nothing");
    let none = HashSet::new();
    let recovered = store
        .recover_abandoned(
            now + 2 * CLAIM_MS,
            &none,
            CardBudget::new(MAX_ATTEMPTS),
            Origin::Gateway,
        )
        .unwrap();
    assert!(recovered.is_empty(), "a live holder is left alone");
}

#[test]
fn a_claim_of_unknown_liveness_holds_until_it_expires() {
    let (_dir, mut store) = scratch();
    let id = triage_card(&mut store, "claimed from another host");
    let now = now_ms();
    begin(&mut store, &id, Origin::Sweep, now).unwrap();
    hand_claim_to(&store, &id, &process::elsewhere_token(), now + 60_000);
    assert!(matches!(
        begin(&mut store, &id, Origin::Manual, now + 59_999),
        Err(BeginRefusal::Claimed { .. })
    ));
    let none = HashSet::new();
    assert!(store
        .recover_abandoned(
            now + 59_999,
            &none,
            CardBudget::new(MAX_ATTEMPTS),
            Origin::Gateway
        )
        .unwrap()
        .is_empty());
    // Past its expiry no request of that attempt can still be sending: the attempt is over.
    let recovered = store
        .recover_abandoned(
            now + 60_000,
            &none,
            CardBudget::new(MAX_ATTEMPTS),
            Origin::Gateway,
        )
        .unwrap();
    assert_eq!(recovered.refunded, vec![id.clone()]);
    assert_eq!(store.claim(&id).unwrap(), None);
}

#[test]
fn a_dead_holders_attempt_is_closed_when_the_card_is_next_begun() {
    let (_dir, mut store) = scratch();
    let sent = triage_card(&mut store, "paid, then killed");
    let unsent = triage_card(&mut store, "killed before sending");
    let now = now_ms();
    begin(&mut store, &sent, Origin::Gateway, now).unwrap();
    begin(&mut store, &unsent, Origin::Gateway, now).unwrap();
    ledger_of_attempt(&mut store, &sent, 1, now);
    let dead = process::dead_token(store.path());
    hand_claim_to(&store, &sent, &dead, now + CLAIM_MS);
    hand_claim_to(&store, &unsent, &dead, now + CLAIM_MS);

    // A person's attempt on each: the dead claim is void at once, not at its expiry.
    let later = now + 10;
    let again = begin(&mut store, &sent, Origin::Manual, later).unwrap();
    assert_eq!(again.attempt, 2, "the killed attempt stays counted");
    assert_eq!(outcomes(&store), ["unknown"]);
    let failed = events(&store, &sent, "decompose_failed");
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(
        failed[0]["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("abandoned:")),
        "{failed:?}"
    );
    let fresh = begin(&mut store, &unsent, Origin::Manual, later).unwrap();
    assert_eq!(
        fresh.attempt, 1,
        "nothing was sent: the killed attempt is given back"
    );
    assert!(events(&store, &unsent, "decompose_failed").is_empty());
}

// ---------------------------------------------------------------------------------------------
// recovery of abandoned attempts
// ---------------------------------------------------------------------------------------------

#[test]
fn rows_left_in_flight_are_closed_as_unknown_and_still_count_toward_the_ceiling() {
    let (_dir, mut store) = scratch();
    let killed = triage_card(&mut store, "killed mid-call");
    let last = triage_card(&mut store, "killed on its last attempt");
    let now = now_ms();
    begin(&mut store, &killed, Origin::Gateway, now).unwrap();
    ledger_of_attempt(&mut store, &killed, 1, now);
    other_process(&store)
        .execute(
            "UPDATE hermes_decompose_state SET attempts = ?2 WHERE task_id = ?1",
            params![last, MAX_ATTEMPTS - 1],
        )
        .unwrap();
    begin(&mut store, &last, Origin::Gateway, now).unwrap();
    ledger_of_attempt(&mut store, &last, MAX_ATTEMPTS, now);
    // An older build's crash: a row in flight and no claim at all.
    ledger_of_attempt(&mut store, "t_0000dead", 1, now);
    let dead = process::dead_token(store.path());
    hand_claim_to(&store, &killed, &dead, now + CLAIM_MS);
    hand_claim_to(&store, &last, &dead, now + CLAIM_MS);
    let before = store.calls_since(now - 1).unwrap();

    let none = HashSet::new();
    let recovered = store
        .recover_abandoned(
            now + 5,
            &none,
            CardBudget::new(MAX_ATTEMPTS),
            Origin::Gateway,
        )
        .unwrap();
    let mut failed = vec![killed.clone(), last.clone()];
    failed.sort();
    assert_eq!(
        recovered,
        Recovered {
            closed_rows: 3,
            expired: vec![],
            failed,
            refunded: vec![],
            parked: vec![parked_at_last_attempt(&last)],
        }
    );
    assert_eq!(outcomes(&store), ["unknown", "unknown", "unknown"]);
    assert_eq!(
        store.calls_since(now - 1).unwrap(),
        before,
        "maybe billed: still counted toward the hourly ceiling"
    );
    let usage = store.usage(None, now + 5, 100).unwrap();
    assert_eq!(
        (
            usage.totals.calls,
            usage.totals.unknown,
            usage.totals.failed,
            usage.totals.ok
        ),
        (3, 3, 0, 0)
    );
    // B1 holds after a SIGKILL on the last allowed attempt: parked, never offered again.
    let state = store.get(&last).unwrap().decompose.unwrap();
    assert!(state.parked_at_ms.is_some() && state.due_at_ms.is_none());
    assert_eq!(events(&store, &last, "decompose_parked").len(), 1);
    assert!(matches!(
        begin(&mut store, &last, Origin::Gateway, now + 10 * CLAIM_MS),
        Err(BeginRefusal::Parked { .. })
    ));
    // Nothing more to find: a second pass writes nothing.
    assert!(store
        .recover_abandoned(
            now + 6,
            &none,
            CardBudget::new(MAX_ATTEMPTS),
            Origin::Gateway
        )
        .unwrap()
        .is_empty());
}

#[test]
fn this_processs_own_claims_are_left_alone_while_their_attempts_run() {
    let (_dir, mut store) = scratch();
    let running = triage_card(&mut store, "running");
    let lost = triage_card(&mut store, "its end could not be recorded");
    let now = now_ms();
    begin(&mut store, &running, Origin::Gateway, now).unwrap();
    begin(&mut store, &lost, Origin::Gateway, now).unwrap();
    ledger_of_attempt(&mut store, &lost, 1, now);
    let ours: HashSet<String> = [running.clone()].into();
    let recovered = store
        .recover_abandoned(
            now + 5,
            &ours,
            CardBudget::new(MAX_ATTEMPTS),
            Origin::Gateway,
        )
        .unwrap();
    assert_eq!(recovered.failed, vec![lost.clone()]);
    assert_eq!(recovered.closed_rows, 1);
    assert!(store.claim(&running).unwrap().is_some());
    assert_eq!(store.claim(&lost).unwrap(), None);
}

// ---------------------------------------------------------------------------------------------
// unreachable provider
// ---------------------------------------------------------------------------------------------

fn unreachable(store: &mut Store, id: &str, at: i64) -> crate::core::UnreachablePause {
    let ticket = begin(store, id, Origin::Gateway, at).unwrap();
    let row = ledger_of_attempt(store, id, ticket.attempt, at);
    close_row(store, row, LedgerOutcome::Unreachable, at);
    store
        .record_nothing_sent(
            id,
            &NothingSentRecord {
                fence: None,
                attempt: ticket.attempt,
                now_ms: at,
                unreachable: Some(UnreachableRecord {
                    reason: "tcp connect error: Connection refused".into(),
                    backoff_base: Duration::from_millis(50),
                }),
            },
        )
        .unwrap()
        .pause()
        .unwrap()
}

#[test]
fn an_unreachable_provider_costs_no_budget_and_pauses_the_board_longer_each_time() {
    let (_dir, mut store) = scratch();
    let id = triage_card(&mut store, "waits for the provider");
    let now = now_ms();

    let first = unreachable(&mut store, &id, now);
    assert_eq!(
        (first.streak, first.lasts, first.until_ms),
        (1, UNREACHABLE_MIN_PAUSE, now + 1_000)
    );
    assert_eq!(attempts(&store, &id), 0, "no card budget spent");
    assert!(store.claim(&id).unwrap().is_none());
    assert!(matches!(
        store.auto_gate(now + 999, 100).unwrap(),
        AutoGate::Paused { until_ms, .. } if until_ms == now + 1_000
    ));
    assert_eq!(store.calls_since(now - 1).unwrap(), 0, "not billed");

    let second = unreachable(&mut store, &id, now + 1_000);
    assert_eq!((second.streak, second.lasts), (2, Duration::from_secs(2)));
    let third = unreachable(&mut store, &id, now + 3_000);
    assert_eq!((third.streak, third.lasts), (3, Duration::from_secs(4)));
    assert_eq!(attempts(&store, &id), 0);

    let usage = store.usage(None, now + 3_000, 100).unwrap();
    assert_eq!((usage.totals.calls, usage.totals.unreachable), (0, 3));
    let shown = usage.unreachable.expect("the pause is shown");
    assert_eq!(shown.until, (now + 7_000) as f64 / 1000.0);
    assert!(
        shown.reason.contains("Connection refused"),
        "{}",
        shown.reason
    );

    // A request that reaches the provider ends the streak.
    let ticket = begin(&mut store, &id, Origin::Manual, now + 7_000).unwrap();
    let row = ledger_of_attempt(&mut store, &id, ticket.attempt, now + 7_000);
    close_row(&mut store, row, LedgerOutcome::ServerError, now + 7_000);
    store
        .record_failure(
            &id,
            &FailureRecord {
                fence: None,
                attempt: ticket.attempt,
                origin: Origin::Manual,
                reason: "HTTP 500".into(),
                fault: None,
                rules: rules(MAX_ATTEMPTS),
                now_ms: now + 7_000,
                pause: None,
            },
        )
        .unwrap();
    let fresh = unreachable(&mut store, &id, now + 8_000);
    assert_eq!(fresh.streak, 1);
}

// ---------------------------------------------------------------------------------------------
// the provider pause: one per refusal episode; every automatic request checks it
// ---------------------------------------------------------------------------------------------

fn refused(store: &mut Store, id: &str, now: i64, until: i64, request_started: i64) {
    // A person's attempt, forced past a pause an earlier refusal may have set.
    let forced = BeginPolicy {
        force: true,
        ..policy(Origin::Manual, request_started, MAX_ATTEMPTS, 100)
    };
    let ticket = store.begin_attempt(id, &forced).unwrap().unwrap();
    store
        .record_failure(
            id,
            &FailureRecord {
                fence: None,
                attempt: ticket.attempt,
                origin: Origin::Gateway,
                reason: "provider call failed: HTTP 402".into(),
                fault: None,
                rules: rules(MAX_ATTEMPTS),
                now_ms: now,
                pause: Some(PauseRecord {
                    until_ms: until,
                    reason: "provider requires payment (HTTP 402)".into(),
                    request_started_ms: Some(request_started),
                }),
            },
        )
        .unwrap();
}

#[test]
fn refusals_of_requests_in_flight_together_pause_once() {
    let (_dir, mut store) = scratch();
    let cards: Vec<String> = (0..3)
        .map(|i| triage_card(&mut store, &format!("card {i}")))
        .collect();
    let t0 = now_ms();
    let cooldown = 900_000;
    // Three requests left at t0; their refusals land one after another.
    refused(&mut store, &cards[0], t0 + 100, t0 + 100 + cooldown, t0);
    refused(&mut store, &cards[1], t0 + 700, t0 + 700 + cooldown, t0);
    refused(
        &mut store,
        &cards[2],
        t0 + 2_500,
        t0 + 2_500 + cooldown,
        t0 + 1,
    );
    assert_eq!(
        store.pause().unwrap().map(|p| p.until_ms),
        Some(t0 + 100 + cooldown),
        "the episode's first refusal set the pause; the others do not extend it"
    );
    // A request sent after the pause was recorded (a person's, say) starts a new episode.
    refused(
        &mut store,
        &cards[0],
        t0 + 5_000,
        t0 + 5_000 + cooldown,
        t0 + 4_000,
    );
    assert_eq!(
        store.pause().unwrap().map(|p| p.until_ms),
        Some(t0 + 5_000 + cooldown)
    );
}

#[rstest]
#[case::paused("paused")]
#[case::unreachable("unreachable")]
fn no_automatic_request_leaves_once_the_board_is_paused(#[case] how: &str) {
    let (_dir, mut store) = scratch();
    let id = triage_card(&mut store, "in flight");
    // Created before `now`, so that it is due at `now`.
    let other = triage_card(&mut store, "found it unreachable");
    let now = now_ms();
    match how {
        "paused" => store
            .set_pause(now + 60_000, "provider requires payment")
            .unwrap(),
        _ => {
            unreachable(&mut store, &other, now);
        }
    }
    let open = LedgerOpen {
        fence: None,
        model: None,
        task_id: id.clone(),
        origin: Origin::Gateway,
        attempt: 1,
        try_no: 2,
        started_at_ms: now + 10,
        guards: Some(100),
    };
    let before = outcomes(&store).len();
    assert!(matches!(
        store.ledger_open(&open).unwrap(),
        Err(BeginRefusal::Paused { .. })
    ));
    assert_eq!(outcomes(&store).len(), before, "no row, so no request");
    // A person's request is theirs to send.
    let manual = LedgerOpen {
        fence: None,
        model: None,
        origin: Origin::Manual,
        guards: None,
        ..open
    };
    assert!(store.ledger_open(&manual).unwrap().is_ok());
}

// ---------------------------------------------------------------------------------------------
// guards at their extremes
// ---------------------------------------------------------------------------------------------

#[test]
fn a_budget_of_zero_attempts_means_none_automatically_but_a_person_may_still_pay() {
    let (_dir, mut store) = scratch();
    let id = triage_card(&mut store, "no budget");
    let now = now_ms();
    for origin in [Origin::Gateway, Origin::Sweep] {
        assert_eq!(
            store
                .begin_attempt(&id, &policy(origin, now, 0, 100))
                .unwrap(),
            Err(BeginRefusal::Parked { attempts: 0 })
        );
    }
    let state = store.get(&id).unwrap().decompose.unwrap();
    assert!(
        state.parked_at_ms.is_some(),
        "parked once, not offered every tick"
    );
    assert_eq!(events(&store, &id, "decompose_parked").len(), 1);
    assert!(store
        .begin_attempt(&id, &policy(Origin::Manual, now, 0, 100))
        .unwrap()
        .is_ok());
}

#[test]
fn a_ceiling_of_zero_calls_means_no_automatic_call_at_all() {
    let (_dir, mut store) = scratch();
    let id = triage_card(&mut store, "no calls allowed");
    let now = now_ms();
    assert_eq!(
        store.auto_gate(now, 0).unwrap(),
        AutoGate::CeilingReached { calls: 0, limit: 0 }
    );
    assert_eq!(
        store
            .begin_attempt(&id, &policy(Origin::Gateway, now, MAX_ATTEMPTS, 0))
            .unwrap(),
        Err(BeginRefusal::CeilingReached { calls: 0, limit: 0 })
    );
    assert_eq!(
        store
            .begin_attempt(&id, &policy(Origin::Manual, now, MAX_ATTEMPTS, 0))
            .unwrap(),
        Err(BeginRefusal::CeilingReached { calls: 0, limit: 0 }),
        "a person's attempt keeps to the ceiling too"
    );
    let forced = BeginPolicy {
        force: true,
        ..policy(Origin::Manual, now, MAX_ATTEMPTS, 0)
    };
    let ticket = store.begin_attempt(&id, &forced).unwrap().unwrap();
    assert_eq!(
        ticket.overrode,
        [BeginRefusal::CeilingReached { calls: 0, limit: 0 }]
    );
}

#[test]
fn the_largest_limits_select_without_allocating_for_them() {
    let (_dir, mut store) = scratch();
    let ids: Vec<String> = (0..3)
        .map(|i| triage_card(&mut store, &format!("card {i}")))
        .collect();
    let now = now_ms() + 1;
    let none = HashSet::new();
    let due = store.due_cards(now, usize::MAX, &none).unwrap();
    assert_eq!(due.len(), ids.len());
    assert_eq!(
        store.auto_gate(now, u32::MAX).unwrap(),
        AutoGate::Open {
            calls_left: u64::from(u32::MAX)
        }
    );
    // The span of an attempt that never ends: the claim holds "forever", not in the past.
    let forever = store
        .begin_attempt(
            &ids[0],
            &BeginPolicy {
                claim_until_ms: crate::core::time::after(now, Duration::MAX),
                rules: CardRules {
                    budget: CardBudget::new(u32::MAX),
                    backoff: Backoff {
                        base: Duration::MAX,
                        cap: Duration::MAX,
                    },
                },
                ..policy(Origin::Gateway, now, u32::MAX, u32::MAX)
            },
        )
        .unwrap()
        .unwrap();
    assert_eq!(forever.attempt, 1);
    assert_eq!(store.claim(&ids[0]).unwrap().unwrap().until_ms, i64::MAX);
    assert_eq!(
        store.get(&ids[0]).unwrap().decompose.unwrap().due_at_ms,
        Some(i64::MAX)
    );
}

#[test]
fn a_cooldown_of_1e16_seconds_is_a_pause_that_holds() {
    let (_dir, mut store) = scratch();
    let now = now_ms();
    let until = crate::core::time::after(now, Duration::from_secs_f64(1e16));
    assert_eq!(until, i64::MAX, "saturated, not wrapped into the past");
    store
        .set_pause(until, "provider refused the API key (HTTP 401)")
        .unwrap();
    for later in [now, now + HOUR_MS, now + 100 * 365 * 24 * HOUR_MS] {
        assert!(
            matches!(
                store.auto_gate(later, 100).unwrap(),
                AutoGate::Paused { .. }
            ),
            "paused at {later}"
        );
    }
}

#[test]
fn a_full_board_writes_nothing_and_its_error_keeps_the_cause() {
    let (_dir, mut store) = scratch();
    let id = triage_card(&mut store, "no room for the record");
    let now = now_ms();
    let ticket = begin(&mut store, &id, Origin::Gateway, now).unwrap();
    let pages: i64 = store
        .conn
        .query_row("PRAGMA page_count", [], |r| r.get(0))
        .unwrap();
    store
        .conn
        .execute_batch(&format!("PRAGMA max_page_count = {pages}"))
        .unwrap();
    let err = store
        .record_failure(
            &id,
            &FailureRecord {
                fence: None,
                attempt: ticket.attempt,
                origin: Origin::Gateway,
                // Needs pages the board may not grow.
                reason: "x".repeat(200_000),
                fault: None,
                rules: rules(MAX_ATTEMPTS),
                now_ms: now,
                pause: None,
            },
        )
        .unwrap_err();
    let chain = crate::core::error_chain(&err);
    assert!(
        chain.ends_with(": database or disk is full"),
        "the cause is kept: {chain}"
    );
    assert!(store.claim(&id).unwrap().is_some(), "rolled back whole");
    assert!(events(&store, &id, "decompose_failed").is_empty());
}

#[test]
fn an_attempt_whose_claim_was_taken_over_writes_nothing_more() {
    let (_dir, mut store) = scratch();
    let id = triage_card(&mut store, "taken over");
    let now = now_ms();
    let mine = begin(&mut store, &id, Origin::Gateway, now).unwrap();
    // Another attempt took the card over: the claim now carries its lease, not ours.
    other_process(&store)
        .execute(
            "UPDATE hermes_decompose_claims SET lease = 'another-attempt', attempt = 2 WHERE task_id = ?1",
            [&id],
        )
        .unwrap();
    let before = outcomes(&store);
    let fence = Some(mine.lease.clone());
    assert_eq!(
        store
            .ledger_open(&LedgerOpen {
                fence: fence.clone(),
                model: None,
                task_id: id.clone(),
                origin: Origin::Gateway,
                attempt: mine.attempt,
                try_no: 1,
                started_at_ms: now,
                guards: Some(100),
            })
            .unwrap(),
        Err(BeginRefusal::ClaimLost),
        "no request leaves"
    );
    assert_eq!(outcomes(&store), before);
    let failed = store
        .record_failure(
            &id,
            &FailureRecord {
                fence: fence.clone(),
                attempt: mine.attempt,
                origin: Origin::Gateway,
                reason: "late".into(),
                fault: None,
                rules: rules(MAX_ATTEMPTS),
                now_ms: now,
                pause: None,
            },
        )
        .unwrap();
    assert_eq!(failed, None, "the failure is not recorded");
    let plan = crate::core::Plan::Single {
        rationale: "late".into(),
        title: Some("the woken holder's title".into()),
        body: None,
        assignee: "default".into(),
    };
    let applied = store
        .apply_plan(
            &id,
            &plan,
            &ApplyOptions {
                fence: fence.clone(),
                orchestrator: "default".into(),
                auto_promote: true,
                author: "auto-decomposer".into(),
                now_ms: now,
            },
        )
        .unwrap();
    assert_eq!(applied, ApplyResult::ClaimLost);
    let card = store.get(&id).unwrap();
    assert_eq!(
        (card.title.as_str(), card.status),
        ("taken over", Status::Triage)
    );
    assert_eq!(card.decompose.unwrap().parked_at_ms, None);
    assert_eq!(
        store
            .record_nothing_sent(
                &id,
                &NothingSentRecord {
                    fence,
                    attempt: mine.attempt,
                    now_ms: now,
                    unreachable: None,
                },
            )
            .unwrap(),
        NothingSentRecorded::ClaimLost
    );
    let claim = store.claim(&id).unwrap().unwrap();
    assert_eq!(
        (claim.lease.as_deref(), claim.attempt),
        (Some("another-attempt"), 2),
        "the other attempt's claim stands"
    );
}

/// How recovery reports a card whose abandoned attempt was its last.
fn parked_at_last_attempt(task_id: &str) -> super::ParkedCard {
    super::ParkedCard {
        task_id: task_id.to_owned(),
        attempt: MAX_ATTEMPTS,
    }
}
