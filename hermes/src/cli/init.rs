//! `hermes kanban init`: create the board if it is missing (idempotent).

use clap::Args;
use serde_json::json;

use super::{CliError, Context, Outcome};

/// `kanban init` takes no arguments beyond `--json`.
#[derive(Debug, Args)]
pub struct InitArgs {}

/// Opens (and so creates or migrates) the board and says where it is.
pub fn run(ctx: &Context, _args: &InitArgs) -> Result<Outcome, CliError> {
    // Says where the board is on stdout: no note on stderr besides.
    let store = crate::store::Store::open(ctx.home.db_path())?;
    let path = store.path().display().to_string();
    if ctx.json {
        ctx.print_json(&json!({ "db_path": path }))?;
    } else {
        ctx.print(&format!("Kanban board ready at {path}"))?;
    }
    Ok(Outcome::Success)
}
