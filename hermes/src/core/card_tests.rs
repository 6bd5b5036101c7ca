//! Every transition of a card's decompose state, at its boundaries.

use std::time::Duration;

use serde_json::json;

use super::*;

const NOW: i64 = 1_000_000;

fn rules(max: u32) -> CardRules {
    CardRules {
        budget: CardBudget::new(max),
        backoff: Backoff::new(Duration::from_secs(1)),
    }
}

fn due(at: i64) -> DecomposeState {
    DecomposeState {
        due_at_ms: Some(at),
        ..DecomposeState::default()
    }
}

fn kinds(step: &Step) -> Vec<&'static str> {
    step.records.iter().map(|r| r.kind).collect()
}

fn failure(attempt: u32, fault: Option<&ProviderFault>) -> Failure<'_> {
    Failure {
        attempt,
        origin: Origin::Gateway,
        reason: "reply rejected",
        fault,
        now_ms: NOW,
    }
}

#[test]
fn a_card_is_created_due_opted_out_or_without_a_row() {
    assert_eq!(CardRules::created(true, false, 7).after, Some(due(7)));
    let opted_out = CardRules::created(true, true, 7).after.unwrap();
    assert_eq!((opted_out.opt_out, opted_out.due_at_ms), (true, None));
    assert_eq!(CardRules::created(false, false, 7).after, None);
    assert!(CardRules::created(true, false, 7).records.is_empty());
}

#[test]
fn an_attempt_is_counted_and_waits_out_its_backoff_until_it_ends() {
    let Begin::Counted { step, attempt } =
        rules(3).begin(Some(&due(NOW)), Some((Origin::Gateway, None)), NOW)
    else {
        panic!("a due card is attempted");
    };
    assert_eq!(attempt, 1);
    let after = step.after.unwrap();
    assert_eq!(after.attempts, 1);
    assert_eq!(after.last_attempt_at_ms, Some(NOW));
    assert_eq!(after.due_at_ms, Some(NOW + 1_000));
    assert!(step.records.is_empty());
    // A card with no row yet is schedulable; one switched off or parked stays unscheduled after
    // a person's attempt.
    let Begin::Counted { step, .. } = rules(3).begin(None, None, NOW) else {
        panic!("a person's attempt is counted");
    };
    assert_eq!(step.after.unwrap().due_at_ms, Some(NOW + 1_000));
    let parked = DecomposeState {
        attempts: 3,
        parked_at_ms: Some(1),
        ..DecomposeState::default()
    };
    let Begin::Counted { step, attempt } = rules(3).begin(Some(&parked), None, NOW) else {
        panic!("a person's attempt goes past the card's budget");
    };
    assert_eq!(attempt, 4);
    assert_eq!(step.after.unwrap().due_at_ms, None);
}

#[test]
fn automatic_attempts_are_refused_in_order_and_a_spent_card_is_parked_once() {
    let auto = Some((Origin::Sweep, None));
    let refused = |rules: CardRules, state: Option<&DecomposeState>, hold: Option<&str>| match rules
        .begin(state, Some((Origin::Sweep, hold.map(str::to_owned))), NOW)
    {
        Begin::Refused { refusal, step } => (refusal, step),
        Begin::Counted { .. } => panic!("attempted"),
    };
    let opted_out = DecomposeState {
        opt_out: true,
        attempts: 9,
        ..due(0)
    };
    assert_eq!(
        refused(rules(3), Some(&opted_out), None).0,
        BeginRefusal::OptedOut
    );
    // At the budget, not before.
    let two = DecomposeState {
        attempts: 2,
        ..due(0)
    };
    assert!(matches!(
        rules(3).begin(Some(&two), auto.clone(), NOW),
        Begin::Counted { attempt: 3, .. }
    ));
    let three = DecomposeState {
        attempts: 3,
        ..due(0)
    };
    let (refusal, step) = refused(rules(3), Some(&three), None);
    assert_eq!(refusal, BeginRefusal::Parked { attempts: 3 });
    let after = step.after.clone().unwrap();
    assert_eq!((after.due_at_ms, after.parked_at_ms), (None, Some(NOW)));
    assert_eq!(
        step.records,
        vec![Record {
            kind: "decompose_parked",
            payload: json!({
                "attempts": 3,
                "reason": "3 attempts reached kanban.decompose_max_attempts (3)",
                "by": "sweep"
            }),
        }]
    );
    // Already parked: refused with nothing written.
    let (refusal, step) = refused(rules(3), Some(&after), None);
    assert_eq!(refusal, BeginRefusal::Parked { attempts: 3 });
    assert_eq!(step.after.as_ref(), Some(&after));
    assert!(step.records.is_empty());
    // A budget of 0 parks even a card without a row.
    let (refusal, step) = refused(rules(0), None, None);
    assert_eq!(refusal, BeginRefusal::Parked { attempts: 0 });
    assert_eq!(kinds(&step), ["decompose_parked"]);
    // Holds, then the schedule.
    assert_eq!(
        refused(rules(3), Some(&due(0)), Some("blocked on needs_input")).0,
        BeginRefusal::Hold {
            why: "blocked on needs_input".into()
        }
    );
    assert_eq!(
        refused(rules(3), Some(&DecomposeState::default()), None).0,
        BeginRefusal::NotScheduled
    );
    assert_eq!(
        refused(rules(3), Some(&due(NOW + 1)), None).0,
        BeginRefusal::InBackoff { until_ms: NOW + 1 }
    );
    assert!(matches!(
        rules(3).begin(Some(&due(NOW)), auto, NOW),
        Begin::Counted { .. }
    ));
}

#[test]
fn a_budget_of_u32_max_never_overflows() {
    let worn = DecomposeState {
        attempts: u32::MAX - 1,
        ..due(0)
    };
    let Begin::Counted { attempt, .. } =
        rules(u32::MAX).begin(Some(&worn), Some((Origin::Gateway, None)), NOW)
    else {
        panic!("one attempt is left");
    };
    assert_eq!(attempt, u32::MAX);
    let spent = DecomposeState {
        attempts: u32::MAX,
        ..due(0)
    };
    let Begin::Counted { attempt, .. } = rules(u32::MAX).begin(Some(&spent), None, NOW) else {
        panic!("a person's attempt is counted");
    };
    assert_eq!(attempt, u32::MAX, "saturates");
}

#[test]
fn a_failure_schedules_the_backoff_or_parks_at_the_budget() {
    let counted = DecomposeState {
        attempts: 1,
        ..due(NOW + 1_000)
    };
    let failed = rules(3).fail(Some(&counted), &failure(1, None));
    assert!(!failed.parked);
    let after = failed.step.after.clone().unwrap();
    assert_eq!(after.due_at_ms, Some(NOW + 1_000));
    assert_eq!(after.last_error.as_deref(), Some("reply rejected"));
    assert_eq!(
        failed.step.records,
        vec![Record {
            kind: "decompose_failed",
            payload: json!({
                "attempt": 1,
                "reason": "reply rejected",
                "origin": "gateway",
                "next_attempt_at": (NOW + 1_000) as f64 / 1000.0
            }),
        }]
    );
    // The third failure doubles twice.
    let third = DecomposeState {
        attempts: 3,
        ..due(NOW)
    };
    let failed = rules(4).fail(Some(&third), &failure(3, None));
    assert_eq!(failed.step.after.unwrap().due_at_ms, Some(NOW + 4_000));
    // At the budget: parked, announced once.
    let failed = rules(3).fail(Some(&third), &failure(3, None));
    assert!(failed.parked);
    let parked = failed.step.after.clone().unwrap();
    assert_eq!((parked.due_at_ms, parked.parked_at_ms), (None, Some(NOW)));
    assert_eq!(
        kinds(&failed.step),
        ["decompose_failed", "decompose_parked"]
    );
    assert_eq!(
        failed.step.records[0].payload["next_attempt_at"],
        json!(null)
    );
    assert_eq!(failed.step.records[1].payload["attempts"], json!(3));
    let again = rules(3).fail(Some(&parked), &failure(4, None));
    assert!(again.parked);
    assert_eq!(again.step.after.as_ref().unwrap().parked_at_ms, Some(NOW));
    assert_eq!(kinds(&again.step), ["decompose_failed"]);
}

#[test]
fn a_rate_limit_holds_the_card_past_its_backoff_and_a_card_without_a_row_gets_none() {
    let counted = DecomposeState {
        attempts: 1,
        ..due(NOW)
    };
    let limited = ProviderFault::RateLimited {
        retry_after: Some(Duration::from_secs(90)),
    };
    let failed = rules(3).fail(Some(&counted), &failure(1, Some(&limited)));
    assert_eq!(failed.step.after.unwrap().due_at_ms, Some(NOW + 90_000));
    // Unscheduled stays unscheduled.
    let off = DecomposeState {
        attempts: 1,
        opt_out: true,
        ..DecomposeState::default()
    };
    assert_eq!(
        rules(3)
            .fail(Some(&off), &failure(1, None))
            .step
            .after
            .unwrap()
            .due_at_ms,
        None
    );
    // No row: the event is written, no row is added.
    let failed = rules(3).fail(None, &failure(1, None));
    assert_eq!(failed.step.after, None);
    assert_eq!(kinds(&failed.step), ["decompose_failed"]);
}

#[test]
fn only_the_latest_attempt_is_given_back() {
    let counted = DecomposeState {
        attempts: 2,
        ..due(NOW + 5_000)
    };
    let back = CardRules::give_back(Some(&counted), 2, NOW).after.unwrap();
    assert_eq!((back.attempts, back.due_at_ms), (1, Some(NOW)));
    assert_eq!(
        CardRules::give_back(Some(&counted), 1, NOW).after,
        Some(counted.clone())
    );
    let none = DecomposeState::default();
    assert_eq!(CardRules::give_back(Some(&none), 0, NOW).after, Some(none));
    assert_eq!(CardRules::give_back(None, 1, NOW).after, None);
    let off = DecomposeState {
        attempts: 1,
        ..DecomposeState::default()
    };
    assert_eq!(
        CardRules::give_back(Some(&off), 1, NOW)
            .after
            .unwrap()
            .due_at_ms,
        None
    );
}

#[test]
fn an_abandoned_attempt_is_given_back_failed_parked_or_left_alone() {
    let abandonment = |sent, in_triage, attempt| Abandonment {
        attempt,
        origin: "gateway",
        why: "its process died",
        sent,
        in_triage,
        by: Origin::Sweep,
        now_ms: NOW,
    };
    let counted = DecomposeState {
        attempts: 2,
        ..due(NOW + 2_000)
    };
    let budget = CardBudget::new(3);
    match CardRules::abandon(budget, Some(&counted), &abandonment(false, true, 2)) {
        Abandoned::GivenBack(step) => assert_eq!(step.after.unwrap().attempts, 1),
        other => panic!("{other:?}"),
    }
    for (sent, in_triage, attempt) in [(false, true, 1), (true, true, 1), (true, false, 2)] {
        assert_eq!(
            CardRules::abandon(
                budget,
                Some(&counted),
                &abandonment(sent, in_triage, attempt)
            ),
            Abandoned::Untouched
        );
    }
    let Abandoned::Failed { step, parked } =
        CardRules::abandon(budget, Some(&counted), &abandonment(true, true, 2))
    else {
        panic!("a billed attempt fails");
    };
    assert!(!parked);
    assert_eq!(step.after.as_ref().unwrap().due_at_ms, Some(NOW + 2_000));
    assert_eq!(kinds(&step), ["decompose_failed"]);
    assert_eq!(
        step.records[0].payload["reason"],
        json!(
            "abandoned: its process died before recording how attempt 2 went (its request may \
             have been billed; an answer that still comes is not applied)"
        )
    );
    let Abandoned::Failed { step, parked } = CardRules::abandon(
        CardBudget::new(2),
        Some(&counted),
        &abandonment(true, true, 2),
    ) else {
        panic!("a billed attempt fails");
    };
    assert!(parked);
    let after = step.after.clone().unwrap();
    assert_eq!((after.due_at_ms, after.parked_at_ms), (None, Some(NOW)));
    assert_eq!(kinds(&step), ["decompose_failed", "decompose_parked"]);
    assert_eq!(step.records[1].payload["by"], json!("sweep"));
    assert_eq!(step.records[0].payload["origin"], json!("gateway"));
}

#[test]
fn an_unreadable_card_is_set_aside_with_its_attempts_kept() {
    let counted = DecomposeState {
        attempts: 2,
        ..due(NOW)
    };
    let step = CardRules::set_aside(Some(&counted), "title is not UTF-8", Origin::Gateway, NOW);
    let after = step.after.clone().unwrap();
    assert_eq!(
        (after.attempts, after.due_at_ms, after.parked_at_ms),
        (2, None, Some(NOW))
    );
    assert_eq!(
        step.records[0].payload,
        json!({"attempts": 2, "reason": "set aside without a request: title is not UTF-8", "by": "gateway"})
    );
    let again = CardRules::set_aside(Some(&after), "still", Origin::Gateway, NOW + 1);
    assert_eq!(again.after.unwrap().parked_at_ms, Some(NOW));
}

#[test]
fn unpark_takes_a_parked_or_spent_card_and_refuses_any_other() {
    let budget = CardBudget::new(3);
    let parked = DecomposeState {
        attempts: 1,
        parked_at_ms: Some(5),
        last_error: Some("boom".into()),
        ..DecomposeState::default()
    };
    let step = CardRules::unpark(budget, Some(&parked), "alice", NOW).unwrap();
    let after = step.after.clone().unwrap();
    assert_eq!(
        (
            after.attempts,
            after.parked_at_ms,
            after.last_error,
            after.due_at_ms
        ),
        (0, None, None, Some(NOW))
    );
    assert_eq!(
        step.records[0].payload,
        json!({"attempts": 1, "by": "alice", "next_attempt_at": NOW as f64 / 1000.0})
    );
    let spent = DecomposeState {
        attempts: 3,
        opt_out: true,
        ..DecomposeState::default()
    };
    let step = CardRules::unpark(budget, Some(&spent), "alice", NOW).unwrap();
    assert_eq!(
        step.after.unwrap().due_at_ms,
        None,
        "switched off stays off"
    );
    let fresh = DecomposeState {
        attempts: 2,
        ..due(0)
    };
    assert_eq!(CardRules::unpark(budget, Some(&fresh), "a", NOW), Err(2));
    assert_eq!(
        CardRules::unpark(CardBudget::new(0), None, "a", NOW),
        Err(0)
    );
}

#[test]
fn switching_keeps_the_budget_and_the_backoff() {
    let backing_off = DecomposeState {
        attempts: 2,
        ..due(NOW + 9)
    };
    assert_eq!(
        CardRules::switch(Some(&backing_off), true, true, "a", NOW),
        None
    );
    let off = CardRules::switch(Some(&backing_off), false, true, "a", NOW).unwrap();
    let after = off.after.clone().unwrap();
    assert_eq!(
        (after.opt_out, after.attempts, after.due_at_ms),
        (true, 2, Some(NOW + 9))
    );
    assert_eq!(scheduled(Some(&after)), None);
    assert_eq!(
        off.records,
        vec![Record {
            kind: "auto_decompose_disabled",
            payload: json!({"by": "a"})
        }]
    );
    let on = CardRules::switch(Some(&after), true, true, "b", NOW).unwrap();
    let back = on.after.unwrap();
    assert_eq!((back.opt_out, back.attempts), (false, 2));
    assert_eq!(scheduled(Some(&back)), Some(NOW + 9));
    // A card that never had a due time is due now; one out of triage or parked is not.
    let never = DecomposeState {
        opt_out: true,
        ..DecomposeState::default()
    };
    let on = |in_triage, state: &DecomposeState| {
        CardRules::switch(Some(state), true, in_triage, "b", NOW)
            .unwrap()
            .after
            .unwrap()
            .due_at_ms
    };
    assert_eq!(on(true, &never), Some(NOW));
    assert_eq!(on(false, &never), None);
    let parked = DecomposeState {
        parked_at_ms: Some(1),
        ..never
    };
    assert_eq!(on(true, &parked), None);
    assert!(
        CardRules::switch(None, false, true, "a", NOW)
            .unwrap()
            .after
            .unwrap()
            .opt_out
    );
}

#[test]
fn an_answer_or_an_archive_closes_the_schedule_only_where_there_is_a_row() {
    let failed = DecomposeState {
        last_error: Some("x".into()),
        ..due(NOW)
    };
    let answered = CardRules::answered(Some(&failed)).after.unwrap();
    assert_eq!((answered.due_at_ms, answered.last_error), (None, None));
    assert_eq!(CardRules::answered(None).after, None);
    let retired = CardRules::retired(Some(&failed)).after.unwrap();
    assert_eq!(
        (retired.due_at_ms, retired.last_error.as_deref()),
        (None, Some("x"))
    );
    assert_eq!(CardRules::retired(None).after, None);
}

#[test]
fn every_park_warning_reads_as_its_cause() {
    assert_eq!(
        ParkCause::Failed {
            attempt: 3,
            last: "HTTP 500"
        }
        .why(),
        "3 automatic attempts failed (last: HTTP 500)"
    );
    assert_eq!(
        ParkCause::Spent {
            budget: CardBudget::new(2),
            attempts: 2
        }
        .why(),
        "2 attempts reached kanban.decompose_max_attempts (2)"
    );
    assert!(ParkCause::Abandoned
        .why()
        .starts_with("its last automatic attempt was abandoned"));
    assert_eq!(
        ParkCause::SetAside { why: "bad bytes" }.why(),
        "set aside without a request: bad bytes (written by another tool?)"
    );
}
