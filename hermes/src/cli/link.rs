//! `hermes kanban link PARENT CHILD`.

use clap::Args;
use serde_json::json;

use super::{CliError, Context, Outcome};

/// Arguments of `kanban link`.
#[derive(Debug, Args)]
pub struct LinkArgs {
    /// The card to wait for.
    pub parent: String,
    /// The card that waits.
    pub child: String,
}

/// Adds the dependency (refusing cycles and unknown ids).
pub fn run(ctx: &Context, args: &LinkArgs) -> Result<Outcome, CliError> {
    let mut store = ctx.open_store()?;
    let added = store.link(&args.parent, &args.child)?;
    if ctx.json {
        ctx.print_json(&json!({
            "parent": args.parent,
            "child": args.child,
            "already_linked": !added,
        }))?;
    } else if added {
        ctx.print(&format!("Linked {} -> {}", args.parent, args.child))?;
    } else {
        ctx.print(&format!("Already linked {} -> {}", args.parent, args.child))?;
    }
    Ok(Outcome::Success)
}
