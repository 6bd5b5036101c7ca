//! Worker runs on a real board file: what a spawn records before its fork, every way a run
//! ends, the live-worker cap, the shared pause and ceiling, and unpark.

use std::collections::HashSet;
use std::time::Duration;

use rusqlite::params;

use super::super::tests::{scratch, triage_card};
use super::super::{LedgerClose, NewTask, Origin, PauseRecord, Store};
use super::*;
use crate::core::{Backoff, SpawnBudget};
use crate::store::{SpawnUnparkRefusal, WorkerRefusal, WorkerRequestOpen};

const NOW: i64 = 1_800_000_000_000;

fn rules(limit: u32) -> SpawnRules {
    SpawnRules {
        budget: SpawnBudget::new(limit),
        backoff: Backoff::new(Duration::from_secs(1)),
    }
}

fn policy(max_spawn: u32, now_ms: i64) -> SpawnPolicy {
    SpawnPolicy {
        origin: "gateway",
        owner: crate::process::token().to_owned(),
        rules: rules(2),
        max_spawn,
        calls_per_hour: 100,
        runtime: Duration::from_secs(60),
        lock_path: "/nonexistent/worker.lock".to_owned(),
        now_ms,
    }
}

fn ready_card(store: &mut Store, title: &str) -> String {
    store
        .create_task(&NewTask {
            title: title.into(),
            assignee: Some("Coder".into()),
            ..NewTask::default()
        })
        .unwrap()
        .id
}

fn claim(store: &mut Store, id: &str) -> RunTicket {
    store.claim_run(id, &policy(10, NOW)).unwrap().unwrap()
}

fn end(store: &mut Store, run_id: i64, outcome: RunOutcome, now_ms: i64) -> Option<Closed> {
    store
        .close_run(&RunClose::new(
            run_id,
            outcome,
            "why",
            "gateway",
            rules(2),
            now_ms,
        ))
        .unwrap()
}

/// Ends a run and lets its worker's processes go, as the spawner records both.
fn finish(store: &mut Store, run_id: i64, outcome: RunOutcome, now_ms: i64) -> Closed {
    let closed = end(store, run_id, outcome, now_ms).unwrap();
    let gone = Gone {
        run_id,
        exit: Some(Some(0)),
        rules: rules(2),
        by: "gateway".into(),
        now_ms,
        pause: None,
    };
    store.worker_gone(&gone).unwrap();
    closed
}

fn status(store: &Store, id: &str) -> String {
    store.get(id).unwrap().status.to_string()
}

fn event_kinds(store: &Store, id: &str) -> Vec<String> {
    store
        .events_of(id)
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect()
}

fn live(store: &Store) -> usize {
    store.live_spawns().unwrap().len()
}

fn open_request(store: &mut Store, ticket: &RunTicket, turn: u32) -> Result<i64, WorkerRefusal> {
    open_request_at(store, ticket, turn, NOW)
}

fn open_request_at(
    store: &mut Store,
    ticket: &RunTicket,
    turn: u32,
    at: i64,
) -> Result<i64, WorkerRefusal> {
    store
        .worker_ledger_open(&WorkerRequestOpen {
            run_id: ticket.run_id,
            task_id: ticket.task_id.clone(),
            lease: ticket.lease.clone(),
            turn,
            try_no: 1,
            started_at_ms: at,
            model: "m".into(),
            calls_per_hour: 3,
        })
        .unwrap()
}

#[test]
fn a_spawn_is_recorded_whole_before_its_worker_exists() {
    let (_dir, mut store) = scratch();
    let id = ready_card(&mut store, "build it");
    let ticket = claim(&mut store, &id);
    assert_eq!((ticket.spawn, ticket.profile.as_str()), (1, "coder"));
    assert_eq!(ticket.runtime, Duration::from_secs(60));
    let card = store.get(&id).unwrap();
    assert_eq!(card.status.to_string(), "running");
    assert!(
        card.started_at.is_some(),
        "a card that ran is a human hold for decompose"
    );
    let runs = store.runs_of(&id).unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["status"], "running");
    let state = store.spawn_state(&id).unwrap().unwrap();
    assert_eq!(
        (state.spawns, state.failures),
        (1, 1),
        "charged before the fork"
    );
    let spawns = store.live_spawns().unwrap();
    assert_eq!(spawns.len(), 1);
    assert!(spawns[0].run_open && spawns[0].pid.is_none());
    assert_eq!(event_kinds(&store, &id).last().unwrap(), "claimed");

    store.record_spawned(ticket.run_id, 4242).unwrap();
    assert_eq!(store.live_spawns().unwrap()[0].pid, Some(4242));
    assert_eq!(store.runs_of(&id).unwrap()[0]["worker_pid"], 4242);
    let spawned = store.events_of(&id).unwrap().pop().unwrap();
    assert_eq!(
        (spawned.kind.as_str(), spawned.run_id),
        ("spawned", Some(ticket.run_id))
    );
}

#[test]
fn a_card_is_refused_for_itself_before_the_board_holds_it_back() {
    let (_dir, mut store) = scratch();
    let unassigned = store
        .create_task(&NewTask {
            title: "nobody".into(),
            ..NewTask::default()
        })
        .unwrap()
        .id;
    let refuse = |store: &mut Store, id: &str, policy: &SpawnPolicy| {
        store.claim_run(id, policy).unwrap().unwrap_err()
    };
    assert_eq!(
        refuse(&mut store, &unassigned, &policy(10, NOW)),
        ClaimRefusal::NoAssignee
    );
    let triage = triage_card(&mut store, "to split");
    assert!(matches!(
        refuse(&mut store, &triage, &policy(10, NOW)),
        ClaimRefusal::NotReady { .. }
    ));
    let busy = ready_card(&mut store, "busy");
    let ticket = claim(&mut store, &busy);
    // A second run of a running card: it is no longer ready.
    assert!(matches!(
        refuse(&mut store, &busy, &policy(10, NOW)),
        ClaimRefusal::NotReady { .. }
    ));
    // An open run another tool left on a ready card keeps it from a second worker.
    store
        .conn
        .execute("UPDATE tasks SET status = 'ready' WHERE id = ?1", [&busy])
        .unwrap();
    assert_eq!(
        refuse(&mut store, &busy, &policy(10, NOW)),
        ClaimRefusal::Running {
            run_id: ticket.run_id
        }
    );

    // The cap counts every live worker: one runs, so a cap of one refuses, and zero is none.
    let next = ready_card(&mut store, "next");
    assert_eq!(
        refuse(&mut store, &next, &policy(1, NOW)),
        ClaimRefusal::Cap { live: 1, max: 1 }
    );
    assert_eq!(
        refuse(&mut store, &next, &policy(0, NOW)),
        ClaimRefusal::Cap { live: 1, max: 0 }
    );
    // A refusal writes nothing.
    assert_eq!(store.spawn_state(&next).unwrap(), None);
    assert_eq!(live(&store), 1);
}

#[test]
fn the_pause_and_the_ceiling_both_halves_share_hold_spawns_back() {
    let (_dir, mut store) = scratch();
    let id = ready_card(&mut store, "paid");
    store.set_pause(NOW + 60_000, "provider refused").unwrap();
    assert!(matches!(
        store.claim_run(&id, &policy(10, NOW)).unwrap(),
        Err(ClaimRefusal::Board(BeginRefusal::Paused { .. }))
    ));
    let ticket = store
        .claim_run(&id, &policy(10, NOW + 60_000))
        .unwrap()
        .unwrap();
    // Worker requests count toward the ceiling with decompose calls.
    for turn in 1..=3 {
        let row = open_request_at(&mut store, &ticket, turn, NOW + 60_000).unwrap();
        store
            .ledger_close(row, &LedgerClose::new(NOW, LedgerOutcome::Ok))
            .unwrap();
    }
    assert!(matches!(
        open_request_at(&mut store, &ticket, 4, NOW + 60_000),
        Err(WorkerRefusal::Guard(BeginRefusal::CeilingReached {
            calls: 3,
            limit: 3
        }))
    ));
    let other = ready_card(&mut store, "other");
    let mut tight = policy(10, NOW + 60_000);
    tight.calls_per_hour = 3;
    assert!(matches!(
        store.claim_run(&other, &tight).unwrap(),
        Err(ClaimRefusal::Board(BeginRefusal::CeilingReached { .. }))
    ));
}

#[test]
fn a_completion_gives_the_charge_back_finishes_the_card_and_frees_its_children() {
    let (_dir, mut store) = scratch();
    let id = ready_card(&mut store, "parent");
    let child = store
        .create_task(&NewTask {
            title: "child".into(),
            assignee: Some("coder".into()),
            parents: vec![id.clone()],
            ..NewTask::default()
        })
        .unwrap()
        .id;
    assert_eq!(status(&store, &child), "todo");
    let ticket = claim(&mut store, &id);
    let row = open_request(&mut store, &ticket, 1).unwrap();
    store
        .ledger_close(
            row,
            &LedgerClose {
                prompt_tokens: Some(100),
                completion_tokens: Some(20),
                ..LedgerClose::new(NOW, LedgerOutcome::Ok)
            },
        )
        .unwrap();
    // A second request left in flight when the run ends may have been billed.
    let left = open_request(&mut store, &ticket, 2).unwrap();
    let closed = store
        .close_run(&RunClose {
            fence: Some(ticket.lease.clone()),
            result: Some("shipped".into()),
            ..RunClose::new(
                ticket.run_id,
                RunOutcome::Completed,
                "did it",
                "worker",
                rules(2),
                NOW,
            )
        })
        .unwrap()
        .unwrap();
    assert_eq!(closed.card, CardMove::Done);
    assert!(!closed.parked);
    let card = store.get(&id).unwrap();
    assert_eq!(card.status.to_string(), "done");
    assert_eq!(card.result.as_deref(), Some("shipped"));
    assert_eq!(status(&store, &child), "ready");
    assert_eq!(store.spawn_state(&id).unwrap().unwrap().failures, 0);
    let run = &store.runs_of(&id).unwrap()[0];
    assert_eq!(
        (run["outcome"].as_str(), run["summary"].as_str()),
        (Some("completed"), Some("did it"))
    );
    let outcome: String = store
        .conn
        .query_row(
            "SELECT outcome FROM hermes_aux_ledger WHERE id = ?1",
            [left],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(outcome, "unknown");
    let (requests, prompt, charged): (i64, i64, bool) = store
        .conn
        .query_row(
            "SELECT requests, prompt_tokens, charged FROM hermes_spawn_ledger WHERE run_id = ?1",
            [ticket.run_id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!((requests, prompt, charged), (2, 100, false));
    assert!(event_kinds(&store, &id).contains(&"completed".to_owned()));
    // The worker is still counted until its processes are gone; a run ends once.
    assert_eq!(live(&store), 1);
    assert_eq!(
        end(&mut store, ticket.run_id, RunOutcome::Crashed, NOW),
        None
    );
    assert!(matches!(
        open_request(&mut store, &ticket, 3),
        Err(WorkerRefusal::RunClosed)
    ));
}

#[test]
fn a_worker_fenced_out_of_its_run_records_nothing() {
    let (_dir, mut store) = scratch();
    let id = ready_card(&mut store, "taken");
    let ticket = claim(&mut store, &id);
    let forged = RunClose {
        fence: Some("not-the-lease".into()),
        ..RunClose::new(
            ticket.run_id,
            RunOutcome::Completed,
            "",
            "worker",
            rules(2),
            NOW,
        )
    };
    assert_eq!(store.close_run(&forged).unwrap(), None);
    assert_eq!(status(&store, &id), "running");
}

#[test]
fn failing_runs_back_off_doubling_and_park_the_card_at_the_limit() {
    let (_dir, mut store) = scratch();
    let id = ready_card(&mut store, "flaky");
    let first = claim(&mut store, &id);
    let closed = finish(&mut store, first.run_id, RunOutcome::Crashed, NOW);
    assert_eq!(
        (closed.card, closed.failures, closed.limit),
        (CardMove::Ready, 1, 2)
    );
    assert_eq!(status(&store, &id), "ready");
    assert_eq!(
        store.spawn_state(&id).unwrap().unwrap().due_at_ms,
        Some(NOW + 1_000)
    );
    let none = HashSet::new();
    assert!(store.spawnable(NOW + 999, 10, &none).unwrap().is_empty());
    assert_eq!(
        store.spawnable(NOW + 1_000, 10, &none).unwrap(),
        std::slice::from_ref(&id)
    );
    assert!(matches!(
        store.claim_run(&id, &policy(10, NOW + 999)).unwrap(),
        Err(ClaimRefusal::Card(SpawnRefusal::InBackoff { .. }))
    ));

    let second = store
        .claim_run(&id, &policy(10, NOW + 1_000))
        .unwrap()
        .unwrap();
    assert_eq!(second.spawn, 2);
    let closed = finish(
        &mut store,
        second.run_id,
        RunOutcome::ProtocolViolation,
        NOW + 2_000,
    );
    assert!(closed.parked);
    let card = store.get(&id).unwrap();
    assert_eq!(
        (card.status.to_string(), card.block_kind),
        ("blocked".to_owned(), None)
    );
    let kinds = event_kinds(&store, &id);
    assert_eq!(kinds.iter().filter(|k| *k == "spawn_failed").count(), 2);
    assert_eq!(kinds.iter().filter(|k| *k == "spawn_parked").count(), 1);
    assert!(store
        .spawnable(NOW + 10_000_000, 10, &none)
        .unwrap()
        .is_empty());

    // A person's unpark: a fresh budget, back to ready, spawned again.
    let unparked = store.unpark_spawns(&id, rules(2), "ops").unwrap().unwrap();
    assert_eq!(
        (unparked.failures_before, unparked.status.as_str()),
        (2, "ready")
    );
    assert_eq!(store.spawn_state(&id).unwrap().unwrap().failures, 0);
    assert_eq!(
        store.spawnable(NOW + 2_000, 10, &none).unwrap(),
        std::slice::from_ref(&id)
    );
    assert!(matches!(
        store.unpark_spawns(&id, rules(2), "ops").unwrap(),
        Err(SpawnUnparkRefusal::NotParked {
            failures: 0,
            limit: 2,
            ..
        })
    ));
}

#[test]
fn a_card_is_not_spawned_again_while_the_worker_of_its_ended_run_still_runs() {
    let (_dir, mut store) = scratch();
    let id = ready_card(&mut store, "ran on");
    let ticket = claim(&mut store, &id);
    end(&mut store, ticket.run_id, RunOutcome::Requeued, NOW).unwrap();
    assert_eq!(status(&store, &id), "ready");
    let later = NOW + 10_000;
    assert!(store
        .spawnable(later, 10, &HashSet::new())
        .unwrap()
        .is_empty());
    assert_eq!(
        store.claim_run(&id, &policy(10, later)).unwrap(),
        Err(ClaimRefusal::StillRunning {
            run_id: ticket.run_id
        })
    );
    let gone = Gone {
        run_id: ticket.run_id,
        exit: Some(Some(0)),
        rules: rules(2),
        by: "gateway".into(),
        now_ms: later,
        pause: None,
    };
    assert_eq!(
        store.worker_gone(&gone).unwrap(),
        None,
        "its end was recorded already"
    );
    assert_eq!(store.spawnable(later, 10, &HashSet::new()).unwrap(), [id]);
}

#[test]
fn fresh_cards_are_offered_before_failing_ones() {
    let (_dir, mut store) = scratch();
    let failing = ready_card(&mut store, "failing");
    let run = claim(&mut store, &failing);
    finish(&mut store, run.run_id, RunOutcome::Crashed, NOW - 10_000);
    let fresh = ready_card(&mut store, "fresh");
    let none = HashSet::new();
    assert_eq!(
        store.spawnable(NOW, 10, &none).unwrap(),
        [fresh.clone(), failing.clone()]
    );
    assert_eq!(
        store.spawnable(NOW, 1, &none).unwrap(),
        std::slice::from_ref(&fresh)
    );
    let skip: HashSet<String> = [fresh].into();
    assert_eq!(store.spawnable(NOW, 1, &skip).unwrap(), [failing]);
}

#[test]
fn blocks_hand_the_card_over_or_are_charged() {
    let (_dir, mut store) = scratch();
    let block = |store: &mut Store, ticket: &RunTicket, kind: BlockKind| {
        store
            .close_run(&RunClose {
                kind: Some(kind),
                fence: Some(ticket.lease.clone()),
                ..RunClose::new(
                    ticket.run_id,
                    RunOutcome::Blocked,
                    "stuck",
                    "worker",
                    rules(2),
                    NOW,
                )
            })
            .unwrap()
            .unwrap()
    };
    let asks = ready_card(&mut store, "asks");
    let t = claim(&mut store, &asks);
    let closed = block(&mut store, &t, BlockKind::NeedsInput);
    assert_eq!((closed.outcome, closed.failures), (RunOutcome::Blocked, 0));
    let card = store.get(&asks).unwrap();
    assert_eq!(card.block_kind.as_deref(), Some("needs_input"));
    assert_eq!(card.status.to_string(), "blocked");
    assert!(
        store
            .spawnable(NOW, 10, &HashSet::new())
            .unwrap()
            .is_empty(),
        "a card handed to a person is never offered"
    );

    // A dependency on nothing open is upstream's every-tick loop: charged, back to ready later.
    let orphan = ready_card(&mut store, "orphan");
    let t = claim(&mut store, &orphan);
    let closed = block(&mut store, &t, BlockKind::Dependency);
    assert_eq!((closed.outcome, closed.failures), (RunOutcome::Requeued, 1));
    assert_eq!(status(&store, &orphan), "ready");

    // On an open parent it waits, uncharged.
    let waits = ready_card(&mut store, "waits");
    let t = claim(&mut store, &waits);
    let parent = ready_card(&mut store, "parent");
    store
        .conn
        .execute(
            "INSERT INTO task_links (parent_id, child_id) VALUES (?1, ?2)",
            params![parent, waits],
        )
        .unwrap();
    let closed = block(&mut store, &t, BlockKind::Dependency);
    assert_eq!(
        (closed.outcome, closed.card),
        (RunOutcome::Blocked, CardMove::WaitsForParents)
    );
    assert_eq!(status(&store, &waits), "todo");
}

#[test]
fn a_held_run_that_reached_the_provider_is_refused_and_charged() {
    let (_dir, mut store) = scratch();
    let quiet = ready_card(&mut store, "nothing sent");
    let t = claim(&mut store, &quiet);
    let closed = end(&mut store, t.run_id, RunOutcome::Held, NOW).unwrap();
    assert_eq!((closed.outcome, closed.failures), (RunOutcome::Held, 0));

    let spent = ready_card(&mut store, "something sent");
    let t = claim(&mut store, &spent);
    let row = open_request(&mut store, &t, 1).unwrap();
    store
        .ledger_close(row, &LedgerClose::new(NOW, LedgerOutcome::Ok))
        .unwrap();
    let closed = end(&mut store, t.run_id, RunOutcome::Held, NOW).unwrap();
    assert_eq!((closed.outcome, closed.failures), (RunOutcome::Refused, 1));
}

#[test]
fn a_worker_gone_without_a_record_is_read_from_its_exit_and_frees_its_place() {
    let (_dir, mut store) = scratch();
    let gone = |run_id, exit, pause| Gone {
        run_id,
        exit,
        rules: rules(5),
        by: "gateway".into(),
        now_ms: NOW,
        pause,
    };
    let clean = ready_card(&mut store, "clean exit");
    let t = claim(&mut store, &clean);
    let closed = store
        .worker_gone(&gone(t.run_id, Some(Some(0)), None))
        .unwrap()
        .unwrap();
    assert_eq!(closed.outcome, RunOutcome::ProtocolViolation);
    assert_eq!(live(&store), 0);

    let limited = ready_card(&mut store, "rate limited");
    let t = claim(&mut store, &limited);
    let pause = PauseRecord {
        until_ms: NOW + 60_000,
        reason: "a worker exited 75".into(),
        request_started_ms: None,
    };
    let closed = store
        .worker_gone(&gone(t.run_id, Some(Some(75)), Some(pause)))
        .unwrap()
        .unwrap();
    assert_eq!(closed.outcome, RunOutcome::Refused);
    assert_eq!(store.pause().unwrap().unwrap().until_ms, NOW + 60_000);

    // Paused now: the last two are claimed past the pause.
    let later = |store: &mut Store, id: &str| {
        store
            .claim_run(id, &policy(10, NOW + 60_000))
            .unwrap()
            .unwrap()
    };
    let unseen = ready_card(&mut store, "adopted");
    let t = later(&mut store, &unseen);
    let closed = store
        .worker_gone(&gone(t.run_id, None, None))
        .unwrap()
        .unwrap();
    assert_eq!(closed.outcome, RunOutcome::Crashed);
    assert!(closed.failures == 1);

    // A worker that recorded its own end: its processes going only frees its place.
    let done = ready_card(&mut store, "done first");
    let t = later(&mut store, &done);
    end(&mut store, t.run_id, RunOutcome::Completed, NOW).unwrap();
    assert_eq!(live(&store), 1);
    assert_eq!(
        store
            .worker_gone(&gone(t.run_id, Some(None), None))
            .unwrap(),
        None
    );
    assert_eq!(live(&store), 0);
    assert_eq!(status(&store, &done), "done");
}

#[test]
fn a_card_whose_text_is_not_text_is_set_aside_once() {
    let (_dir, mut store) = scratch();
    let id = ready_card(&mut store, "bad bytes");
    store
        .conn
        .execute(
            "UPDATE tasks SET title = CAST(x'ff00' AS TEXT) WHERE id = ?1",
            [&id],
        )
        .unwrap();
    let refusal = store.claim_run(&id, &policy(10, NOW)).unwrap().unwrap_err();
    assert!(refusal.parked_now(), "{refusal}");
    assert_eq!(status(&store, &id), "blocked");
    assert_eq!(
        event_kinds(&store, &id)
            .iter()
            .filter(|k| *k == "spawn_parked")
            .count(),
        1
    );
    assert_eq!(live(&store), 0);
}

#[test]
fn recovering_decompose_attempts_never_touches_a_workers_requests() {
    let (_dir, mut store) = scratch();
    let id = ready_card(&mut store, "working");
    let t = claim(&mut store, &id);
    let row = open_request(&mut store, &t, 1).unwrap();
    let recovered = store
        .recover_abandoned(
            NOW,
            &HashSet::new(),
            crate::core::CardBudget::new(3),
            Origin::Gateway,
        )
        .unwrap();
    assert_eq!(recovered.closed_rows, 0);
    let outcome: String = store
        .conn
        .query_row(
            "SELECT outcome FROM hermes_aux_ledger WHERE id = ?1",
            [row],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(outcome, "in_flight");
}

#[test]
fn heartbeats_and_comments_are_recorded_for_the_worker_that_owns_the_run() {
    let (_dir, mut store) = scratch();
    let id = ready_card(&mut store, "long");
    let t = claim(&mut store, &id);
    assert!(store
        .heartbeat(t.run_id, &t.lease, Some("half way"), NOW)
        .unwrap());
    assert!(!store.heartbeat(t.run_id, "stolen", None, NOW).unwrap());
    let comment = store.comment(&id, "coder", "a note", NOW).unwrap();
    assert!(comment > 0);
    assert_eq!(store.comments_of(&id).unwrap()[0].body, "a note");
    assert!(matches!(
        store.comment("t_00000000", "coder", "x", NOW),
        Err(StoreError::NoSuchTask(_))
    ));
    assert!(matches!(
        store.comment(&id, "coder", "  ", NOW),
        Err(StoreError::Invalid(_))
    ));
    let kinds = event_kinds(&store, &id);
    assert!(kinds.contains(&"heartbeat".to_owned()) && kinds.contains(&"commented".to_owned()));
    assert!(matches!(
        store.unpark_spawns(&id, rules(2), "ops").unwrap(),
        Err(SpawnUnparkRefusal::Running { .. })
    ));
}

#[test]
fn a_person_unblocks_a_block_but_not_a_park() {
    use crate::store::UnblockRefusal;
    let (_dir, mut store) = scratch();
    let asks = ready_card(&mut store, "asks");
    let t = claim(&mut store, &asks);
    store
        .close_run(&RunClose {
            kind: Some(BlockKind::Capability),
            ..RunClose::new(
                t.run_id,
                RunOutcome::Blocked,
                "no access",
                "worker",
                rules(2),
                NOW,
            )
        })
        .unwrap();
    let done = store.unblock(&asks, "ops").unwrap().unwrap();
    assert_eq!(
        (done.kind.as_deref(), done.status.as_str()),
        (Some("capability"), "ready")
    );
    assert_eq!(store.get(&asks).unwrap().block_kind, None);
    assert_eq!(event_kinds(&store, &asks).last().unwrap(), "unblocked");
    assert!(matches!(
        store.unblock(&asks, "ops").unwrap(),
        Err(UnblockRefusal::NotBlocked { .. })
    ));
    let parked = ready_card(&mut store, "parked");
    let t = claim(&mut store, &parked);
    let closed = store
        .close_run(&RunClose::new(
            t.run_id,
            RunOutcome::Crashed,
            "x",
            "gateway",
            rules(1),
            NOW,
        ))
        .unwrap()
        .unwrap();
    assert!(closed.parked);
    assert!(matches!(
        store.unblock(&parked, "ops").unwrap(),
        Err(UnblockRefusal::Parked { .. })
    ));
    assert!(matches!(
        store.unblock("t_00000000", "ops").unwrap(),
        Err(UnblockRefusal::NoSuchTask(_))
    ));
}
