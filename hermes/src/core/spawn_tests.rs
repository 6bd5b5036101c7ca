//! Every transition of a card's spawn state, at its boundaries (S1, S3, S8).

use std::time::Duration;

use super::*;

const NOW: i64 = 1_000_000;

fn rules(limit: u32) -> SpawnRules {
    SpawnRules {
        budget: SpawnBudget::new(limit),
        backoff: Backoff::new(Duration::from_secs(1)),
    }
}

fn kinds(step: &SpawnStep) -> Vec<&'static str> {
    step.records.iter().map(|r| r.kind).collect()
}

fn end(outcome: RunOutcome) -> RunEnd<'static> {
    RunEnd {
        run_id: 7,
        outcome,
        kind: None,
        reason: "why",
        by: "gateway",
        now_ms: NOW,
    }
}

fn counted(rules: &SpawnRules, before: Option<&SpawnState>) -> (SpawnState, u32) {
    match rules.begin(before, "gateway", NOW) {
        SpawnBegin::Counted { step, spawn } => {
            assert!(step.records.is_empty(), "a counted spawn writes no event");
            (step.after.expect("a counted spawn leaves a row"), spawn)
        }
        other => panic!("expected a counted spawn, got {other:?}"),
    }
}

#[test]
fn a_spawn_is_charged_before_its_worker_starts() {
    let (after, spawn) = counted(&rules(2), None);
    assert_eq!(spawn, 1);
    assert_eq!((after.spawns, after.failures), (1, 1));
    let (after, spawn) = counted(&rules(2), Some(&SpawnState { spawns: 4, ..after }));
    assert_eq!(spawn, 5);
    assert_eq!(after.failures, 2);
}

#[test]
fn every_end_but_four_keeps_its_charge() {
    let charged: Vec<RunOutcome> = RunOutcome::ALL
        .into_iter()
        .filter(|o| o.charged())
        .collect();
    assert_eq!(
        charged,
        [
            RunOutcome::Refused,
            RunOutcome::ProviderFailed,
            RunOutcome::MaxTurns,
            RunOutcome::ProtocolViolation,
            RunOutcome::Crashed,
            RunOutcome::TimedOut,
            RunOutcome::SpawnFailed,
            RunOutcome::Requeued,
        ]
    );
    for outcome in RunOutcome::ALL {
        assert_eq!(RunOutcome::parse(outcome.as_str()), Some(outcome));
    }
    assert_eq!(RunOutcome::parse("gave_up"), None);
}

#[test]
fn an_uncharged_end_gives_the_charge_back_and_names_itself() {
    let running = SpawnState {
        spawns: 1,
        failures: 1,
        ..SpawnState::default()
    };
    for (outcome, event, card) in [
        (RunOutcome::Completed, "completed", CardMove::Done),
        (RunOutcome::Interrupted, "run_interrupted", CardMove::Ready),
        (RunOutcome::Held, "run_held", CardMove::Ready),
    ] {
        let ended = rules(2).end(Some(&running), &end(outcome));
        assert_eq!(ended.step.after.as_ref().unwrap().failures, 0, "{outcome}");
        assert_eq!(kinds(&ended.step), [event]);
        assert_eq!((ended.parked, ended.card), (false, card));
    }
    // Giving back never goes below zero (a row another tool reset).
    let ended = rules(2).end(None, &end(RunOutcome::Completed));
    assert_eq!(ended.step.after.unwrap().failures, 0);
}

#[test]
fn a_charged_end_backs_off_doubling_then_parks_at_the_limit() {
    let rules = rules(3);
    let (first, _) = counted(&rules, None);
    let ended = rules.end(Some(&first), &end(RunOutcome::Crashed));
    let after = ended.step.after.clone().unwrap();
    assert_eq!(after.failures, 1);
    assert_eq!(after.due_at_ms, Some(NOW + 1_000));
    assert_eq!(after.last_error.as_deref(), Some("crashed: why"));
    assert_eq!(kinds(&ended.step), ["spawn_failed"]);
    assert_eq!(ended.step.records[0].payload["next_spawn_at"], 1_001.0);
    assert_eq!((ended.parked, ended.card), (false, CardMove::Ready));

    // The second spawn waits its backoff: refused a millisecond early, counted on time.
    match rules.begin(Some(&after), "gateway", NOW + 999) {
        SpawnBegin::Refused {
            refusal: SpawnRefusal::InBackoff { until_ms },
            parked_now: false,
            ..
        } => assert_eq!(until_ms, NOW + 1_000),
        other => panic!("expected the backoff, got {other:?}"),
    }
    let (second, _) = counted(
        &rules,
        Some(&SpawnState {
            due_at_ms: Some(NOW),
            ..after
        }),
    );
    let ended = rules.end(Some(&second), &end(RunOutcome::TimedOut));
    let after = ended.step.after.clone().unwrap();
    assert_eq!(after.due_at_ms, Some(NOW + 2_000), "the wait doubles");

    let (third, _) = counted(
        &rules,
        Some(&SpawnState {
            due_at_ms: None,
            ..after
        }),
    );
    let ended = rules.end(Some(&third), &end(RunOutcome::Requeued));
    let after = ended.step.after.clone().unwrap();
    assert!(ended.parked);
    assert_eq!(ended.card, CardMove::Blocked(None));
    assert_eq!(
        (after.failures, after.due_at_ms, after.parked_at_ms),
        (3, None, Some(NOW))
    );
    assert_eq!(kinds(&ended.step), ["spawn_failed", "spawn_parked"]);
    let parked = &ended.step.records[1].payload;
    assert_eq!(parked["failures"], 3);
    assert_eq!(parked["limit"], 3);
    assert_eq!(parked["by"], "gateway");
    assert!(parked["reason"]
        .as_str()
        .unwrap()
        .contains("last: requeued: why"));

    // Parked, it is never counted again, and parking again writes nothing.
    match rules.begin(Some(&after), "gateway", NOW + 10_000_000) {
        SpawnBegin::Refused {
            refusal: SpawnRefusal::Parked { failures: 3 },
            step,
            parked_now: false,
        } => assert!(step.records.is_empty()),
        other => panic!("expected the park, got {other:?}"),
    }
}

#[test]
fn a_limit_of_one_parks_at_the_first_failure_and_zero_never_spawns() {
    let (running, _) = counted(&rules(1), None);
    let ended = rules(1).end(Some(&running), &end(RunOutcome::ProtocolViolation));
    assert!(ended.parked);
    match rules(0).begin(None, "dispatch", NOW) {
        SpawnBegin::Refused {
            refusal: SpawnRefusal::Parked { failures: 0 },
            step,
            parked_now: true,
        } => {
            assert_eq!(kinds(&step), ["spawn_parked"]);
            assert_eq!(step.records[0].payload["by"], "dispatch");
            assert_eq!(step.after.unwrap().parked_at_ms, Some(NOW));
        }
        other => panic!("expected a park, got {other:?}"),
    }
}

#[test]
fn a_budget_lowered_under_a_card_parks_it_at_its_next_spawn() {
    let state = SpawnState {
        spawns: 3,
        failures: 2,
        ..SpawnState::default()
    };
    assert!(matches!(
        rules(3).begin(Some(&state), "gateway", NOW),
        SpawnBegin::Counted { spawn: 4, .. }
    ));
    assert!(matches!(
        rules(2).begin(Some(&state), "gateway", NOW),
        SpawnBegin::Refused {
            parked_now: true,
            ..
        }
    ));
}

#[test]
fn a_cards_own_max_retries_overrides_the_limit_within_its_range() {
    let base = rules(2);
    assert_eq!(base.for_card(None).budget.limit, 2);
    assert_eq!(base.for_card(Some(5)).budget.limit, 5);
    assert_eq!(base.for_card(Some(-3)).budget.limit, 0);
    assert_eq!(
        base.for_card(Some(i64::MAX)).budget.limit,
        MAX_FAILURE_LIMIT
    );
}

#[test]
fn blocks_hand_the_card_to_a_person_or_charge_the_run() {
    use BlockKind::*;
    assert_eq!(NeedsInput.run_outcome(false), RunOutcome::Blocked);
    assert_eq!(Capability.run_outcome(true), RunOutcome::Blocked);
    assert_eq!(Dependency.run_outcome(true), RunOutcome::Blocked);
    // Upstream's loop: a dependency on nothing open would be ready again at once.
    assert_eq!(Dependency.run_outcome(false), RunOutcome::Requeued);
    assert_eq!(Transient.run_outcome(true), RunOutcome::Requeued);
    assert!(NeedsInput.waits_for_a_person() && Capability.waits_for_a_person());
    assert!(!Dependency.waits_for_a_person() && !Transient.waits_for_a_person());

    assert_eq!(
        CardMove::after(RunOutcome::Blocked, Some(NeedsInput), false),
        CardMove::Blocked(Some(NeedsInput))
    );
    assert_eq!(
        CardMove::after(RunOutcome::Blocked, Some(Dependency), false),
        CardMove::WaitsForParents
    );
    assert_eq!(
        CardMove::after(RunOutcome::Blocked, None, false),
        CardMove::Blocked(Some(NeedsInput))
    );
    assert_eq!(
        CardMove::after(RunOutcome::Requeued, Some(Transient), false),
        CardMove::Ready
    );

    assert_eq!(BlockKind::parse(None), Ok(NeedsInput));
    assert_eq!(BlockKind::parse(Some("  ")), Ok(NeedsInput));
    assert_eq!(BlockKind::parse(Some("capability")), Ok(Capability));
    let err = BlockKind::parse(Some("later")).unwrap_err();
    assert!(
        err.contains("\"later\"") && err.contains("transient"),
        "{err}"
    );

    let ended = rules(2).end(
        Some(&SpawnState {
            failures: 1,
            ..SpawnState::default()
        }),
        &RunEnd {
            kind: Some(Capability),
            ..end(RunOutcome::Blocked)
        },
    );
    assert_eq!(kinds(&ended.step), ["blocked"]);
    assert_eq!(ended.step.records[0].payload["kind"], "capability");
}

#[test]
fn exits_no_run_recorded_are_read_as_upstream_reads_them() {
    assert_eq!(
        RunOutcome::from_exit(Some(0)),
        RunOutcome::ProtocolViolation
    );
    assert_eq!(RunOutcome::from_exit(Some(1)), RunOutcome::Crashed);
    assert_eq!(RunOutcome::from_exit(Some(75)), RunOutcome::Refused);
    assert_eq!(RunOutcome::from_exit(Some(78)), RunOutcome::Refused);
    assert_eq!(RunOutcome::from_exit(None), RunOutcome::Crashed);
    assert!(RunOutcome::from_exit(Some(0)).charged());
}

#[test]
fn unpark_gives_a_fresh_budget_only_to_a_parked_card() {
    let rules = rules(2);
    let parked = SpawnState {
        spawns: 2,
        failures: 2,
        parked_at_ms: Some(NOW),
        last_error: Some("crashed".into()),
        ..SpawnState::default()
    };
    let step = rules.unpark(Some(&parked), "ops").unwrap();
    let after = step.after.clone().unwrap();
    assert_eq!(
        after,
        SpawnState {
            spawns: 2,
            ..SpawnState::default()
        }
    );
    assert_eq!(kinds(&step), ["spawn_unparked"]);
    assert_eq!(step.records[0].payload["failures"], 2);
    // Spent but never marked parked counts as parked.
    assert!(rules
        .unpark(
            Some(&SpawnState {
                parked_at_ms: None,
                ..parked.clone()
            }),
            "ops"
        )
        .is_ok());
    assert_eq!(rules.unpark(None, "ops"), Err(0));
    assert_eq!(
        rules.unpark(
            Some(&SpawnState {
                failures: 1,
                ..SpawnState::default()
            }),
            "ops"
        ),
        Err(1)
    );
}
