//! The explorer's own checks, each made to fire through the real processes by something done to
//! the reference gateway from outside while a schedule runs (the executor's observer acts at a
//! step): a gateway SIGKILLed by someone else exited on its own; a gateway SIGSTOPped with a
//! probe waiting went silent; a gateway SIGSTOPped when it is told to stop needed SIGKILL. Each
//! verdict proves its precondition (the step was reached, the pid was the gateway's).
//!
//! These boards are the executor's own (an unjudged `fixtures::board::Board`): the oracle does not judge them on
//! drop, so the second process acting on the gateway needs no narrowing.

use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use explorer::findings::{Check, Finding};
use explorer::schedule::{Behaviour, CardKind, CardPlan, Knobs, Schedule, Slot, Step};
use explorer::{execute, Moment, Run};
use fixtures::target::Target;
use judge::prelude::*;

fn two_plain_cards() -> Vec<CardPlan> {
    (0..2)
        .map(|_| CardPlan {
            kind: CardKind::Triage,
            replies: vec![Behaviour::Ok],
            worker: None,
        })
        .collect()
}

/// Runs `steps` on the reference, calling `act` with the running gateway's pid before the steps
/// that `at` names; returns the run and the pids acted on.
fn run_acting(steps: Vec<Step>, at: &[usize], act: impl Fn(usize, Pid)) -> (Run, Vec<u32>) {
    let schedule = Schedule {
        config: Knobs::default(),
        cards: two_plain_cards(),
        steps,
    };
    let mut acted = Vec::new();
    let run = execute(&schedule, Target::current(), &mut |moment: &Moment<'_>| {
        if !at.contains(&moment.index) {
            return;
        }
        if let Some(pid) = moment.gateway_pids.first() {
            acted.push(*pid);
            if let Ok(raw) = i32::try_from(*pid) {
                act(moment.index, Pid::from_raw(raw));
            }
        }
    });
    (run, acted)
}

fn found(run: &Run, check: Check) -> Vec<&Finding> {
    run.findings
        .iter()
        .filter(|finding| finding.check == check)
        .collect()
}

fn start() -> Step {
    Step::Start {
        gateway: Slot::First,
    }
}

#[test]
fn a_gateway_killed_by_someone_else_is_found_to_have_exited_on_its_own() {
    let (run, acted) = run_acting(
        vec![start(), Step::LetTicksPass { ticks: 2 }, Step::Sweep],
        &[1],
        |_, pid| {
            let _ = kill(pid, Signal::SIGKILL);
        },
    );
    holds("the gateway was killed from outside", acted.len() == 1)
        .note(|| format!("{:?}", run.findings))
        .gap(GapKind::ProcessCrashed);
    let exited = found(&run, Check::GatewayAlive);
    let says_so = exited.iter().any(|finding| {
        finding.text.contains("exited on its own") && finding.text.contains("SIGKILL")
    });
    holds("the executor found the gateway exited on its own", says_so)
        .note(|| format!("{:?}", run.findings))
        .gap(GapKind::GatewayExited);
}

#[test]
fn a_gateway_that_went_silent_with_a_probe_waiting_is_found() {
    // Stopped (SIGSTOP) while a tick is proven, continued before the next step: alive, silent.
    let (run, acted) = run_acting(
        vec![
            start(),
            Step::LetTicksPass { ticks: 1 },
            Step::LetTicksPass { ticks: 1 },
        ],
        &[1, 2],
        |index, pid| {
            let signal = if index == 1 {
                Signal::SIGSTOP
            } else {
                Signal::SIGCONT
            };
            let _ = kill(pid, signal);
        },
    );
    holds(
        "the gateway was stopped and continued from outside",
        acted.len() == 2,
    )
    .note(|| format!("{:?}", run.findings))
    .gap(GapKind::ProcessCrashed);
    // Frozen at an arbitrary moment, the gateway may hold the board's write lock: then the
    // probe cannot even be created, which the executor finds as well. Either way, no pass.
    let mut silent = found(&run, Check::Ticks);
    silent.retain(|finding| finding.text.contains("at step 2"));
    let mut locked_out = found(&run, Check::Arranged);
    locked_out.retain(|finding| finding.text.contains("locked"));
    holds(
        "the executor found a probe left in triage by a silent gateway (or locked out by it)",
        silent.len() + locked_out.len() == 1,
    )
    .note(|| format!("{:?}", run.findings))
    .gap(GapKind::DispatcherBlocked);
    holds(
        "nothing else was found",
        run.findings.len() == silent.len() + locked_out.len(),
    )
    .note(|| format!("{:?}", run.findings))
    .gap(GapKind::DispatcherBlocked);
}

#[test]
fn a_gateway_that_needs_sigkill_to_stop_is_found() {
    // Stopped (SIGSTOP) just before it is told to stop: SIGTERM stays pending past the grace.
    let (run, acted) = run_acting(
        vec![
            start(),
            Step::LetTicksPass { ticks: 1 },
            Step::Stop {
                gateway: Slot::First,
            },
        ],
        &[2],
        |_, pid| {
            let _ = kill(pid, Signal::SIGSTOP);
        },
    );
    holds("the gateway was stopped from outside", acted.len() == 1)
        .note(|| format!("{:?}", run.findings))
        .gap(GapKind::ProcessCrashed);
    let unclean = found(&run, Check::CleanStop);
    holds(
        "the executor found a stop that needed SIGKILL",
        unclean.len() == 1 && unclean[0].text.contains("escalated to SIGKILL"),
    )
    .note(|| format!("{:?}", run.findings))
    .gap(GapKind::SlowShutdown);
    bound("seconds the run took", run.elapsed.as_secs())
        .at_most(Duration::from_secs(20).as_secs())
        .gap(GapKind::SlowShutdown);
}

#[test]
fn a_step_naming_a_card_the_schedule_lacks_is_found_not_skipped() {
    let schedule = Schedule {
        config: Knobs::default(),
        cards: two_plain_cards(),
        steps: vec![Step::Archive { card: 7 }],
    };
    assert!(schedule.check().is_err(), "a replay file would be refused");
    let run = execute(&schedule, Target::current(), &mut |_| {});
    let unarranged = found(&run, Check::Arranged);
    holds(
        "the executor found the step it could not carry out",
        unarranged.len() == 1 && unarranged[0].text.contains("card #7"),
    )
    .note(|| format!("{:?}", run.findings))
    .gap(GapKind::ProcessCrashed);
}
