//! `hermes kanban decompose [ID] [--all]`: one paid attempt per card named.

use clap::Args;

use super::{CliError, Context, Outcome};

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

/// Not provided by this build yet.
pub fn run(_ctx: &Context, _args: &DecomposeArgs) -> Result<Outcome, CliError> {
    Err(CliError::not_implemented("kanban decompose"))
}
