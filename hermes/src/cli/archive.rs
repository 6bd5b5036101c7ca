//! `hermes kanban archive ID...`.

use clap::Args;
use serde_json::json;

use super::{CliError, Context, Outcome};

/// Arguments of `kanban archive`.
#[derive(Debug, Args)]
pub struct ArchiveArgs {
    /// Cards to archive; all or none (one unknown id archives nothing).
    #[arg(required = true, value_name = "ID")]
    pub ids: Vec<String>,
}

/// Archives the cards in one transaction.
pub fn run(ctx: &Context, args: &ArchiveArgs) -> Result<Outcome, CliError> {
    let mut store = ctx.open_store()?;
    let report = store.archive(&args.ids)?;
    if ctx.json {
        ctx.print_json(&json!({
            "archived": report.archived,
            "already_archived": report.already_archived,
            "promoted": report.promoted,
        }))?;
    } else {
        let mut lines: Vec<String> = report
            .archived
            .iter()
            .map(|id| format!("Archived {id}"))
            .collect();
        lines.extend(
            report
                .already_archived
                .iter()
                .map(|id| format!("Already archived {id}")),
        );
        lines.extend(
            report
                .promoted
                .iter()
                .map(|id| format!("Promoted {id} to ready")),
        );
        ctx.print(&lines.join("\n"))?;
    }
    Ok(Outcome::Success)
}
