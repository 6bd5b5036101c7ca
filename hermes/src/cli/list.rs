//! `hermes kanban list`.

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::Args;
use serde_json::Value;

use super::render::{task_json, task_line};
use super::{CliError, Context, Outcome};
use crate::store::{ListFilter, Status};

/// Arguments of `kanban list`.
#[derive(Debug, Args)]
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
}

/// Lists cards, oldest first: a JSON array of cards, or one line per card.
pub fn run(ctx: &Context, args: &ListArgs) -> Result<Outcome, CliError> {
    let store = ctx.open_store()?;
    let tasks = store.list(&ListFilter {
        status: args.status,
        assignee: args.assignee.clone(),
        include_archived: args.archived,
    })?;
    if ctx.json {
        ctx.print_json(&Value::Array(tasks.iter().map(task_json).collect()))?;
    } else if tasks.is_empty() {
        ctx.print("(no matching tasks)")?;
    } else {
        let lines: Vec<String> = tasks.iter().map(task_line).collect();
        ctx.print(&lines.join("\n"))?;
    }
    Ok(Outcome::Success)
}
