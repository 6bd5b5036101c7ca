//! `hermes kanban decompose ID | --all`: paid decompose attempts from the command line.
//!
//! `ID` is a person's choice: exactly one attempt, whatever the card's budget, backoff or hold
//! state (B1, B7) — but never a request for a card that does not exist or is not in triage, nor
//! one past the board-wide pause or hourly ceiling unless `--force` says so (and then it says
//! which it went past). `--all` is the automatic step of `auto`, run as a sweep (a cron job may
//! run it): nothing while `kanban.auto_decompose` is off, and only due cards, within the same
//! budget, pause and hourly ceiling as the gateway.

use std::sync::Arc;

use clap::Args;

use super::{note, CliError, Context, Outcome};
use crate::auto::{self, SweepStop};
use crate::clock::shown_ms;
use crate::core::{ceiling_reached, paused_for, AttemptOutcome, BeginRefusal};
use crate::decompose::attempt::{run_manual_attempt, AttemptContext};
use crate::decompose::roster;
use crate::store::Status;

/// Arguments of `kanban decompose`.
#[derive(Debug, Args)]
// One of the two is needed, and a bare `decompose` says so naming both.
#[command(group(clap::ArgGroup::new("which").required(true).args(["id", "all"])))]
pub struct DecomposeArgs {
    /// The card to decompose now (always exactly one attempt, recorded like any other).
    #[arg(value_name = "ID", conflicts_with = "all")]
    pub id: Option<String>,
    /// Attempt every due triage card, within the automatic budget.
    #[arg(long)]
    pub all: bool,
    /// With ID: send the attempt even while the board-wide pause or the hourly ceiling is in
    /// force (it says which it went past).
    #[arg(long, conflicts_with = "all")]
    pub force: bool,
}

/// Runs the attempts and prints one line per card attempted.
pub fn run(ctx: &Context, args: &DecomposeArgs) -> Result<Outcome, CliError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow::anyhow!("cannot start the async runtime: {e}"))?;
    match &args.id {
        Some(id) => runtime.block_on(decompose_one(ctx, id, args.force)),
        None => runtime.block_on(decompose_all(ctx)),
    }
}

fn attempt_context(ctx: &Context) -> Result<AttemptContext, CliError> {
    let attempt = AttemptContext::from_config(
        Arc::new(ctx.config.clone()),
        &ctx.home,
        roster(&ctx.home, &ctx.config),
        ctx.home.db_path(),
    )?;
    for warning in attempt.warnings.iter() {
        ctx.warn(warning);
    }
    // Before any request: what it will bill, and where.
    crate::output::detail(&format!("route: POST {}", attempt.billing().route()));
    Ok(attempt)
}

async fn decompose_one(ctx: &Context, id: &str, force: bool) -> Result<Outcome, CliError> {
    // Checked before anything is built or counted, so these cases cost nothing.
    let store = ctx.open_store()?;
    let refusal = match store.task(id)? {
        None => Some(BeginRefusal::NoSuchTask(id.to_owned())),
        Some(task) if task.status != Status::Triage => Some(BeginRefusal::NotInTriage {
            status: task.status.as_str().to_owned(),
        }),
        Some(_) => None,
    };
    drop(store);
    if let Some(refusal) = refusal {
        return refuse(ctx, id, &refusal);
    }
    let attempt = attempt_context(ctx)?;
    let (outcome, overrode) = run_manual_attempt(&attempt, id, force, auto::no_shutdown()).await?;
    for guard in &overrode {
        note(&format!(
            "--force: went past the board-wide guard in force: {guard}"
        ));
    }
    match outcome {
        AttemptOutcome::Refused { refusal, .. } => refuse(ctx, id, &refusal),
        outcome => report(ctx, &outcome, force.then_some(overrode.as_slice())),
    }
}

async fn decompose_all(ctx: &Context) -> Result<Outcome, CliError> {
    let attempt = attempt_context(ctx)?;
    let mut outcome = Outcome::Success;
    let swept = auto::sweep(&attempt, |done| {
        // The error keeps its chain, so a closed stdout is still recognised as one.
        if report(ctx, done, None).map_err(|e| e.error)? == Outcome::Failure {
            outcome = Outcome::Failure;
        }
        Ok(())
    })
    .await?;
    if let Some(line) = auto::describe_recovered(&swept.recovered) {
        note(&line);
    }
    for card in &swept.set_aside {
        note(&auto::describe_set_aside(card));
    }
    match swept.stop {
        SweepStop::SwitchedOff => Err(anyhow::anyhow!(
            "{}: `decompose --all` sends nothing; `hermes kanban decompose ID` still decomposes \
             one card by hand",
            auto::SWITCHED_OFF
        )
        .into()),
        SweepStop::Done => {
            if swept.not_attempted > 0 {
                note(&format!(
                    "{} not attempted: parked, in backoff, held for a person or opted out \
                     (`hermes kanban show ID` says which, `hermes kanban list --parked` lists \
                     the parked ones)",
                    super::render::count(swept.not_attempted, "triage card")
                ));
            }
            Ok(outcome)
        }
        SweepStop::Paused { until_ms, reason } => {
            note(&format!(
                "sweep stopped: auto-decompose is paused until {} ({reason})",
                shown_ms(until_ms)
            ));
            Ok(Outcome::Failure)
        }
        SweepStop::Ceiling { calls, limit } => {
            note(&format!("sweep stopped: {}", ceiling_reached(calls, limit)));
            Ok(Outcome::Failure)
        }
        SweepStop::Fault(fault) => {
            note(&format!(
                "sweep stopped: {}; {}",
                fault.fault.describe(),
                paused_for(fault.lasts)
            ));
            Ok(Outcome::Failure)
        }
        SweepStop::Unreachable(pause) => {
            note(&format!(
                "sweep stopped: provider unreachable ({}); no card's budget was spent; {}",
                pause.reason,
                paused_for(pause.lasts)
            ));
            Ok(Outcome::Failure)
        }
    }
}

/// Prints how an attempt ended; `overrode` (with `--force`) adds the guards it went past to the
/// JSON line as `overrode: [{"guard", "detail"}]`.
fn report(
    ctx: &Context,
    outcome: &AttemptOutcome,
    overrode: Option<&[BeginRefusal]>,
) -> Result<Outcome, CliError> {
    if ctx.json {
        let mut line = outcome.json_line();
        if let (Some(guards), Some(object)) = (overrode, line.as_object_mut()) {
            let guards: Vec<serde_json::Value> = guards
                .iter()
                .map(|g| serde_json::json!({"guard": g.board_guard(), "detail": g.to_string()}))
                .collect();
            object.insert("overrode".to_owned(), guards.into());
        }
        ctx.print_json_line(&line)?;
    } else {
        let detail = match outcome.child_ids() {
            Some(ids) => format!("{} ({})", outcome.reason(), ids.join(", ")),
            None => outcome.reason(),
        };
        let verdict = if outcome.ok() { "ok" } else { "failed" };
        ctx.print(&format!(
            "{}: {verdict}: {}",
            outcome.task_id(),
            crate::core::text::one_line(&detail)
        ))?;
    }
    Ok(if outcome.ok() {
        Outcome::Success
    } else {
        Outcome::Failure
    })
}

/// A card that must cost nothing: the JSON line says why, and so does stderr (exit 1).
fn refuse(ctx: &Context, id: &str, refusal: &BeginRefusal) -> Result<Outcome, CliError> {
    if ctx.json {
        let line = AttemptOutcome::Refused {
            task_id: id.to_owned(),
            refusal: refusal.clone(),
        };
        ctx.print_json_line(&line.json_line())?;
    }
    match refusal {
        // Already names the card.
        BeginRefusal::NoSuchTask(_) => {
            Err(anyhow::anyhow!("{refusal}; no request was sent").into())
        }
        _ if refusal.board_guard().is_some() => Err(anyhow::anyhow!(
            "{id}: {refusal}; no request was sent (`--force` sends it anyway)"
        )
        .into()),
        _ => Err(anyhow::anyhow!("{id}: {refusal}; no request was sent").into()),
    }
}
