//! `hermes kanban usage [--since DURATION]`: the aux-call ledger.

use clap::Args;

use super::{CliError, Context, Outcome};

/// Arguments of `kanban usage`.
#[derive(Debug, Args)]
pub struct UsageArgs {
    /// Only calls newer than this (e.g. `1h`, `30m`).
    #[arg(long, value_name = "DURATION")]
    pub since: Option<String>,
}

/// Not provided by this build yet.
pub fn run(_ctx: &Context, _args: &UsageArgs) -> Result<Outcome, CliError> {
    Err(CliError::not_implemented("kanban usage"))
}
