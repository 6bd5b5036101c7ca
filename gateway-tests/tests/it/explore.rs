//! The explorer's executor (`explorer::execute`) through the real processes: one schedule with
//! every kind of step and every provider behaviour, and one with workers of every kind through a
//! crash and a restart, keep every check on any target (upstream: only its listed gaps). The
//! executor's own checks are proven in `reference_only::explore`.

use explorer::findings::{gate_findings, Check};
use explorer::schedule::{
    Behaviour, BlockKindName, CardKind, CardPlan, Knob, KnobValue, Knobs, Schedule, Slot, Step,
    WorkerPlan,
};
use explorer::{execute, Run};
use fixtures::target::Target;
use fixtures::verdict::Judge;
use judge::prelude::*;

fn card(kind: CardKind, replies: &[Behaviour]) -> CardPlan {
    CardPlan {
        kind,
        replies: replies.to_vec(),
        worker: None,
    }
}

/// Every step kind and every behaviour, on a config with every bound key set small.
fn every_kind_of_step_and_reply() -> Schedule {
    let mut config = Knobs::default();
    for (knob, value) in [
        (Knob::MaxAttempts, KnobValue::Count(2)),
        (Knob::Backoff, KnobValue::Seconds(0.05)),
        (Knob::PerTick, KnobValue::Count(2)),
        (Knob::Retries, KnobValue::Count(1)),
        (Knob::CallsPerHour, KnobValue::Count(60)),
        (Knob::Cooldown, KnobValue::Seconds(1.0)),
        (Knob::MaxChildren, KnobValue::Count(4)),
        (Knob::CallTimeout, KnobValue::Seconds(0.5)),
    ] {
        config.apply(knob, Some(value));
    }
    let cards = vec![
        card(CardKind::Triage, &[Behaviour::Malformed]),
        card(
            CardKind::Triage,
            &[
                Behaviour::RateLimited {
                    retry_after_seconds: Some(1),
                },
                Behaviour::Fanout {
                    children: 3,
                    sibling_edges: true,
                },
            ],
        ),
        card(
            CardKind::Triage,
            &[Behaviour::Hang, Behaviour::Slow, Behaviour::Ok],
        ),
        card(
            CardKind::Triage,
            &[
                Behaviour::HugeFanout { over_cap_by: 1 },
                Behaviour::Cycle,
                Behaviour::CutStream,
            ],
        ),
        card(CardKind::NeedsInput, &[Behaviour::Ok]),
        card(
            CardKind::OptedOut,
            &[
                Behaviour::ServerError { status: 503 },
                Behaviour::Refused { status: 402 },
            ],
        ),
    ];
    let first = Slot::First;
    // Cards #0 and #3 spend their budget of 2 early; #5's refusal by hand pauses the board while
    // #1 waits out its own 429; #0 alone is unparked, and then the gateway ticks.
    let steps = vec![
        Step::Start { gateway: first },
        Step::LetTicksPass { ticks: 4 },
        Step::Decompose {
            card: 5,
            force: false,
        },
        Step::LetTicksPass { ticks: 3 },
        Step::Sweep,
        Step::Kill { gateway: first },
        Step::Restart { gateway: first },
        Step::Start {
            gateway: Slot::Second,
        },
        Step::LetTicksPass { ticks: 2 },
        Step::Stop {
            gateway: Slot::Second,
        },
        Step::ConcurrentSweeps { sweeps: 2 },
        Step::Unpark { card: 0 },
        Step::LetTicksPass { ticks: 4 },
        Step::Resume,
        Step::AutoDecompose { card: 5, on: true },
        Step::Archive { card: 2 },
        Step::Configure {
            key: Knob::KillSwitch,
            value: Some(KnobValue::Switch(false)),
        },
        Step::Decompose {
            card: 3,
            force: true,
        },
    ];
    Schedule {
        config,
        cards,
        steps,
    }
}

/// The checks that apply to `target` (the ledger and parking are the reference's own).
fn checks_for(target: &Target) -> Vec<Check> {
    Check::all()
        .into_iter()
        .filter(|check| match check {
            Check::Oracle(invariant) => !invariant.reference_only() || target.is_reference(),
            _ => true,
        })
        .collect()
}

/// Judges every check on `run` as this test's verdicts (one per check, passing or not).
fn judge_every_check(run: &Run, target: &Target) {
    let failures: Vec<String> = gate_findings(
        &Judge::current(),
        &checks_for(target),
        &run.findings,
        &run.span,
        &run.summary,
    )
    .into_iter()
    .filter_map(|gated| gated.judged.failure)
    .collect();
    assert!(
        failures.is_empty(),
        "{} check(s) failed:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn a_schedule_with_every_kind_of_step_and_reply_keeps_every_check() {
    let schedule = every_kind_of_step_and_reply();
    assert_eq!(schedule.check(), Ok(()), "{schedule}");
    let target = Target::current();
    let mut reached = Vec::new();
    let run = execute(&schedule, target, &mut |moment| reached.push(moment.index));

    let every_step: Vec<usize> = (0..schedule.steps.len()).collect();
    check(
        "the executor reached every step of the schedule",
        if reached == every_step {
            Ok(())
        } else {
            Err(format!("it reached steps {reached:?}; {:?}", run.findings))
        },
    )
    .gap(GapKind::ProcessCrashed);
    bound("decompose calls the schedule made", run.calls)
        .at_least(schedule.cards.len())
        .over(&run.span)
        .context(|| run.summary.clone())
        .gap(GapKind::DispatcherBlocked);
    judge_every_check(&run, target);
}

/// Ready cards with every kind of worker the explorer plans (the target's own, answered so, and
/// the stand-in's behaviours), through a crash and a restart while workers live.
fn workers_through_a_crash_and_a_restart() -> Schedule {
    use fixtures::workers::Behaviour as StandIn;
    let mut config = Knobs::default();
    for (knob, value) in [
        (Knob::MaxSpawn, KnobValue::Count(2)),
        (Knob::FailureLimit, KnobValue::Count(2)),
        (Knob::SpawnBackoff, KnobValue::Seconds(0.05)),
    ] {
        config.apply(knob, Some(value));
    }
    let ready = |worker: WorkerPlan| CardPlan {
        kind: CardKind::Ready,
        replies: vec![Behaviour::Ok],
        worker: Some(worker),
    };
    let cards = vec![
        ready(WorkerPlan::Completes),
        ready(WorkerPlan::StandIn {
            does: StandIn::Exits(1),
        }),
        ready(WorkerPlan::StandIn {
            does: StandIn::Forks,
        }),
        ready(WorkerPlan::Blocks {
            kind: BlockKindName::NeedsInput,
        }),
        card(CardKind::Triage, &[Behaviour::Ok]),
    ];
    let first = Slot::First;
    let steps = vec![
        Step::Start { gateway: first },
        Step::LetTicksPass { ticks: 3 },
        Step::Kill { gateway: first },
        Step::Restart { gateway: first },
        Step::LetTicksPass { ticks: 3 },
        Step::Restart { gateway: first },
        Step::LetTicksPass { ticks: 2 },
        Step::Stop { gateway: first },
    ];
    Schedule {
        config,
        cards,
        steps,
    }
}

#[test]
fn a_schedule_with_workers_through_a_crash_and_a_restart_keeps_every_check() {
    let schedule = workers_through_a_crash_and_a_restart();
    assert_eq!(schedule.check(), Ok(()), "{schedule}");
    let target = Target::current();
    let run = execute(&schedule, target, &mut |_| {});
    judge_every_check(&run, target);
}
