//! `hermes kanban decompose ID | --all`: paid decompose attempts from the command line.
//!
//! `ID` is a person's choice: exactly one attempt, whatever the card's budget, backoff or hold
//! state (B1, B7) — but never a request for a card that does not exist or is not in triage.
//! `--all` is an automatic path: it attempts only due cards, within the same budget, pause and
//! hourly ceiling as the gateway.

use std::collections::HashSet;
use std::sync::Arc;

use clap::Args;
use serde_json::json;
use tokio::sync::watch;

use super::{CliError, Context, Outcome};
use crate::clock::now_ms;
use crate::config::api_key;
use crate::decompose::attempt::{run_attempt, AttemptContext, AttemptOutcome, Refused};
use crate::decompose::roster;
use crate::store::{AutoGate, BeginRefusal, Origin, Status, Store};

/// Arguments of `kanban decompose`.
#[derive(Debug, Args)]
pub struct DecomposeArgs {
    /// The card to decompose now (always exactly one attempt, recorded like any other).
    #[arg(
        value_name = "ID",
        required_unless_present = "all",
        conflicts_with = "all"
    )]
    pub id: Option<String>,
    /// Attempt every due triage card, within the automatic budget.
    #[arg(long)]
    pub all: bool,
}

/// Runs the attempts and prints one line per card attempted.
pub fn run(ctx: &Context, args: &DecomposeArgs) -> Result<Outcome, CliError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow::anyhow!("cannot start the async runtime: {e}"))?;
    match &args.id {
        Some(id) => runtime.block_on(decompose_one(ctx, id)),
        None => runtime.block_on(decompose_all(ctx)),
    }
}

fn attempt_context(ctx: &Context) -> Result<AttemptContext, CliError> {
    Ok(AttemptContext::new(
        Arc::new(ctx.config.clone()),
        api_key(&ctx.home),
        roster(&ctx.home, &ctx.config),
        ctx.home.db_path(),
    )?)
}

/// Never fires: a command-line attempt is not cancelled by a shutdown signal (Ctrl-C kills the
/// process, and the attempt already counted stays counted).
fn no_shutdown() -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    // Leaked on purpose for the process's short life, so the channel never reads as closed.
    std::mem::forget(tx);
    rx
}

async fn decompose_one(ctx: &Context, id: &str) -> Result<Outcome, CliError> {
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
    match run_attempt(&attempt, id, Origin::Manual, no_shutdown()).await? {
        Ok(outcome) => report(ctx, &outcome),
        Err(Refused { refusal, .. }) => refuse(ctx, id, &refusal),
    }
}

async fn decompose_all(ctx: &Context) -> Result<Outcome, CliError> {
    let mut store = ctx.open_store()?;
    store.sync_decompose_state(now_ms(), true)?;
    let attempt = attempt_context(ctx)?;
    let kanban = &ctx.config.kanban;
    let mut tried: HashSet<String> = HashSet::new();
    let mut outcome = Outcome::Success;
    loop {
        let now = now_ms();
        match store.auto_gate(now, kanban.decompose_calls_per_hour)? {
            AutoGate::Open { .. } => {}
            AutoGate::Paused { until_ms, reason } => {
                note(&format!(
                    "sweep stopped: auto-decompose is paused until {} ({reason})",
                    crate::clock::utc(until_ms.div_euclid(1000))
                ));
                return Ok(Outcome::Failure);
            }
            AutoGate::CeilingReached { calls, limit } => {
                note(&format!(
                    "sweep stopped: {calls} paid calls in the last hour reached \
                     kanban.decompose_calls_per_hour ({limit})"
                ));
                return Ok(Outcome::Failure);
            }
        }
        // One card at a time, re-selected each round, so a card that became due or stopped
        // being due meanwhile is seen as it is now.
        let Some(id) = store.due_cards(now, 1, &tried)?.into_iter().next() else {
            break;
        };
        tried.insert(id.clone());
        let result = run_attempt(&attempt, &id, Origin::Sweep, no_shutdown()).await?;
        let Ok(done) = result else { continue };
        if report(ctx, &done)? == Outcome::Failure {
            outcome = Outcome::Failure;
        }
        if let Some(fault) = &done.provider_fault {
            let pause = fault.pause_for(kanban.provider_cooldown);
            store.set_pause(now_ms() + pause.as_millis() as i64, &fault.describe())?;
            note(&format!(
                "sweep stopped: {}; auto-decompose paused for {:.0}s",
                fault.describe(),
                pause.as_secs_f64()
            ));
            return Ok(Outcome::Failure);
        }
    }
    let waiting = triage_not_attempted(&store, &tried)?;
    if waiting > 0 {
        note(&format!(
            "{waiting} triage card(s) not attempted: parked, in backoff, held for a person or \
             opted out (`hermes kanban show ID` says which)"
        ));
    }
    Ok(outcome)
}

fn triage_not_attempted(store: &Store, tried: &HashSet<String>) -> Result<usize, CliError> {
    let filter = crate::store::ListFilter {
        status: Some(Status::Triage),
        ..Default::default()
    };
    Ok(store
        .list(&filter)?
        .iter()
        .filter(|t| !tried.contains(&t.id))
        .count())
}

fn report(ctx: &Context, outcome: &AttemptOutcome) -> Result<Outcome, CliError> {
    if ctx.json {
        ctx.print_json_line(&serde_json::to_value(outcome).map_err(anyhow::Error::from)?)?;
    } else {
        let detail = match &outcome.child_ids {
            Some(ids) if outcome.ok => format!("{} ({})", outcome.reason, ids.join(", ")),
            _ => outcome.reason.clone(),
        };
        let verdict = if outcome.ok { "ok" } else { "failed" };
        ctx.print(&format!("{}: {verdict}: {detail}", outcome.task_id))?;
    }
    Ok(if outcome.ok {
        Outcome::Success
    } else {
        Outcome::Failure
    })
}

/// A card that must cost nothing: the JSON line says why, and so does stderr (exit 1).
fn refuse(ctx: &Context, id: &str, refusal: &BeginRefusal) -> Result<Outcome, CliError> {
    if ctx.json {
        ctx.print_json_line(&json!({
            "task_id": id,
            "ok": false,
            "reason": refusal.to_string(),
            "fanout": false,
            "child_ids": null,
            "new_title": null,
        }))?;
    }
    match refusal {
        // Already names the card.
        BeginRefusal::NoSuchTask(_) => {
            Err(anyhow::anyhow!("{refusal}; no request was sent").into())
        }
        _ => Err(anyhow::anyhow!("{id}: {refusal}; no request was sent").into()),
    }
}

fn note(message: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "hermes: {message}");
}
