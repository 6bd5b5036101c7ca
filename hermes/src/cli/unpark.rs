//! `hermes kanban unpark ID`: a fresh automatic budget for a parked card.

use clap::Args;
use serde_json::json;

use super::render::count;
use super::{operator, round_up_secs, CliError, Context, Outcome};
use crate::clock::{now_ms, shown_ms};

/// Arguments of `kanban unpark`.
#[derive(Debug, Args)]
#[command(after_help = "\
Resets the card's automatic attempt budget (kanban.decompose_max_attempts) to zero and makes it \
due for the next gateway tick or `decompose --all`, with a `decompose_unparked` event on the card. \
Only a triage card whose budget is spent (parked) can be unparked; a card opted out of \
auto-decompose keeps its opt-out (see `kanban auto-decompose`).

A card parked by its workers (kanban.failure_limit runs ended without completing; it is \
`blocked`) gets a fresh spawn budget instead: no failed runs, no backoff, back to `ready` (or \
`todo` while a parent is open), with a `spawn_unparked` event; the gateway spawns a worker for \
it at its next tick. With --json: {\"task_id\", \"unparked\": true, \"half\": \"spawn\", \
\"failures_before\", \"status\"}.

A card whose attempt is still in flight is refused until that attempt has ended (its end may park \
the card again): the refusal says which process holds it and until when, as `kanban decompose ID` \
does.

With --json: {\"task_id\", \"unparked\": true, \"attempts_before\", \"next_attempt_at\"} \
(next_attempt_at in unix seconds, null when the card is opted out).")]
pub struct UnparkArgs {
    /// The parked card.
    #[arg(value_name = "ID")]
    pub id: String,
    /// Who is unparking it, recorded in the event (default: $USER, else `user`).
    #[arg(long, value_name = "NAME")]
    pub by: Option<String>,
}

/// Unparks the card or says why not.
pub fn run(ctx: &Context, args: &UnparkArgs) -> Result<Outcome, CliError> {
    let mut store = ctx.open_store()?;
    let by = operator(args.by.as_deref());
    let parked_by_workers = store
        .task(&args.id)?
        .and_then(|task| task.spawn)
        .is_some_and(|spawn| {
            spawn.parked_at_ms.is_some() || ctx.config.spawn_rules().budget.spent(spawn.failures)
        });
    if parked_by_workers {
        return unpark_spawns(ctx, &mut store, &args.id, &by);
    }
    let done = store
        .unpark(&args.id, ctx.config.card_rules().budget, now_ms(), &by)?
        .map_err(anyhow::Error::from)?;
    if ctx.json {
        ctx.print_json(&json!({
            "task_id": done.task_id,
            "unparked": true,
            "attempts_before": done.attempts_before,
            "next_attempt_at": done.next_attempt_at_ms.map(round_up_secs),
        }))?;
        return Ok(Outcome::Success);
    }
    let next = match done.next_attempt_at_ms {
        Some(ms) => format!("due now ({})", shown_ms(ms)),
        None => format!(
            "still opted out of auto-decompose (`hermes kanban auto-decompose {} on` to schedule it)",
            done.task_id
        ),
    };
    ctx.print(&format!(
        "Unparked {}: budget reset after {}; {next}",
        done.task_id,
        count(done.attempts_before, "attempt")
    ))?;
    Ok(Outcome::Success)
}

/// Unparks a card its workers' failures parked.
fn unpark_spawns(
    ctx: &Context,
    store: &mut crate::store::Store,
    id: &str,
    by: &str,
) -> Result<Outcome, CliError> {
    let done = store
        .unpark_spawns(id, ctx.config.spawn_rules(), by)?
        .map_err(anyhow::Error::from)?;
    if ctx.json {
        ctx.print_json(&json!({
            "task_id": done.task_id,
            "unparked": true,
            "half": "spawn",
            "failures_before": done.failures_before,
            "status": done.status,
        }))?;
        return Ok(Outcome::Success);
    }
    ctx.print(&format!(
        "Unparked {}: spawn budget reset after {}; {} (a worker is spawned at the gateway's next \
         tick)",
        done.task_id,
        count(done.failures_before, "failed run"),
        done.status
    ))?;
    Ok(Outcome::Success)
}
