//! `hermes kanban create TITLE …`.

use clap::Args;

use super::render::{one_line, task_json};
use super::{CliError, Context, Outcome};
use crate::store::NewTask;

/// Arguments of `kanban create`.
#[derive(Debug, Args)]
pub struct CreateArgs {
    /// The card's title (stored exactly as given).
    pub title: String,
    /// Longer description.
    #[arg(long)]
    pub body: Option<String>,
    /// Profile that should work on the card.
    #[arg(long)]
    pub assignee: Option<String>,
    /// A card this one waits for (repeatable).
    #[arg(long = "parent", value_name = "ID")]
    pub parents: Vec<String>,
    /// Park the card in triage for the decomposer instead of todo/ready.
    #[arg(long)]
    pub triage: bool,
    /// Tiebreaker (higher first).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub priority: i64,
    /// Tenant namespace.
    #[arg(long)]
    pub tenant: Option<String>,
    /// Who is creating the card.
    #[arg(long, value_name = "NAME")]
    pub created_by: Option<String>,
    /// Never decompose this card automatically (an explicit `kanban decompose ID` still may).
    #[arg(long)]
    pub no_auto_decompose: bool,
}

/// Creates the card and prints it.
pub fn run(ctx: &Context, args: &CreateArgs) -> Result<Outcome, CliError> {
    let mut store = ctx.open_store()?;
    let task = store.create_task(&NewTask {
        title: args.title.clone(),
        body: args.body.clone(),
        assignee: args.assignee.clone(),
        parents: args.parents.clone(),
        triage: args.triage,
        priority: args.priority,
        tenant: args.tenant.clone(),
        created_by: args.created_by.clone(),
        no_auto_decompose: args.no_auto_decompose,
    })?;
    if ctx.json {
        ctx.print_json(&task_json(&task))?;
    } else {
        ctx.print(&format!(
            "Created {}  ({}, assignee={})",
            task.id,
            task.status,
            task.assignee
                .as_deref()
                .map(one_line)
                .unwrap_or_else(|| "-".into())
        ))?;
    }
    Ok(Outcome::Success)
}
