//! `hermes kanban list`.

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::Args;
use serde_json::Value;

use super::render::{is_parked, task_json, task_lines};
use super::{CliError, Context, Outcome};
use crate::store::{ListFilter, Status};

/// Arguments of `kanban list`.
#[derive(Debug, Args)]
#[command(after_help = "\
One line per card, oldest first: id, status, assignee, title (nothing on stdout when no card \
matches; a note on stderr says so); a parked card (a triage card whose automatic decompose \
budget is spent, or a card whose workers' runs spent kanban.failure_limit) shows `[parked]` \
before its title. Parked is not a status: `--parked` lists only those cards, and `hermes kanban \
unpark ID` gives one a fresh budget.
With --json: an array of cards; a card with decompose bookkeeping has a `decompose` object whose \
`parked` is true once its budget is spent, a card that had workers a `spawn` object (`spawns`, \
`failures`, `parked`, `next_spawn_at`, `last_error`).")]
pub struct ListArgs {
    /// Only cards in this status.
    #[arg(
        long,
        value_name = "STATUS",
        value_parser = PossibleValuesParser::new(Status::ALL.map(Status::as_str))
            .try_map(|s| s.parse::<Status>())
    )]
    pub status: Option<Status>,
    /// Only cards assigned to this profile.
    #[arg(long)]
    pub assignee: Option<String>,
    /// Include archived cards.
    #[arg(long)]
    pub archived: bool,
    /// Only parked cards: triage cards whose automatic decompose budget is spent, and cards
    /// whose workers' runs spent kanban.failure_limit (`hermes kanban unpark ID` gives one a
    /// fresh budget).
    #[arg(long)]
    pub parked: bool,
}

/// Lists cards, oldest first: a JSON array of cards, or one line per card (a parked card's
/// marked, see [`super::render::task_cells`]).
pub fn run(ctx: &Context, args: &ListArgs) -> Result<Outcome, CliError> {
    let store = ctx.open_store()?;
    let mut tasks = store.list(&ListFilter {
        status: args.status,
        assignee: args.assignee.clone(),
        include_archived: args.archived,
    })?;
    if args.parked {
        tasks.retain(is_parked);
    }
    if ctx.json {
        ctx.print_json(&Value::Array(tasks.iter().map(task_json).collect()))?;
    } else if tasks.is_empty() {
        // Not on stdout: a script reads each line there as a card.
        super::note("no matching cards");
    } else {
        ctx.print(&task_lines(&tasks, ctx.headers()).join("\n"))?;
    }
    Ok(Outcome::Success)
}
