//! `hermes kanban unblock ID`: a person's answer to a worker's block (S8).

use clap::Args;
use serde_json::json;

use super::{operator, CliError, Context, Outcome};

/// Arguments of `kanban unblock`.
#[derive(Debug, Args)]
#[command(after_help = "\
A card a worker blocked (`needs_input`, `capability`, or any other kind) is never spawned again \
until a person answers: this sends it back to `ready` (or `todo` while a parent is open), clears \
its block kind and records an `unblocked` event; the gateway spawns a worker for it at its next \
tick. Its spawn budget is unchanged (a block is not a failure). A card parked by its spawn budget \
is refused: `hermes kanban unpark ID` is its verb.

With --json: {\"task_id\", \"unblocked\": true, \"kind\", \"status\"}.")]
pub struct UnblockArgs {
    /// The blocked card.
    #[arg(value_name = "ID")]
    pub id: String,
    /// Who is answering, recorded in the event (default: $USER, else `user`).
    #[arg(long, value_name = "NAME")]
    pub by: Option<String>,
}

/// Unblocks the card or says why not.
pub fn run(ctx: &Context, args: &UnblockArgs) -> Result<Outcome, CliError> {
    let mut store = ctx.open_store()?;
    let by = operator(args.by.as_deref());
    let done = store.unblock(&args.id, &by)?.map_err(anyhow::Error::from)?;
    if ctx.json {
        ctx.print_json(&json!({
            "task_id": done.task_id,
            "unblocked": true,
            "kind": done.kind,
            "status": done.status,
        }))?;
        return Ok(Outcome::Success);
    }
    ctx.print(&format!(
        "Unblocked {} ({}): {}",
        done.task_id,
        done.kind.as_deref().unwrap_or("no kind"),
        done.status
    ))?;
    Ok(Outcome::Success)
}
