//! `hermes gateway run`: the foreground gateway process.

use clap::Args;

use super::{CliError, Context, Outcome};

/// Arguments of `gateway run`.
#[derive(Debug, Args)]
pub struct RunArgs {}

/// Not provided by this build yet.
pub fn run(_ctx: &Context, _args: &RunArgs) -> Result<Outcome, CliError> {
    Err(CliError::not_implemented("gateway run"))
}
