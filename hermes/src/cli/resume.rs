//! `hermes kanban resume`: lift the board-wide provider pause.

use clap::Args;
use serde_json::json;

use super::{operator, CliError, Context, Outcome};
use crate::clock::{now_ms, shown_ms};

/// Arguments of `kanban resume`.
#[derive(Debug, Args)]
#[command(after_help = "\
Lifts the board-wide pauses on automatic calls, decompose calls and workers alike: the one a \
provider refusal (401/402/403, or 429, to either half) set, and the backoff after requests that \
never reached the provider. The next gateway tick then probes the provider again with one \
decompose call, and spawns workers again. The pause's reason, \
who lifted it and when are kept and shown by `kanban usage`. With no pause in force this is a \
no-op that says so.

With --json: {\"resumed\": true|false, \"by\", \"at\", \"cleared\": {\"until\", \"reason\"} | null} \
(times in unix seconds).")]
pub struct ResumeArgs {
    /// Who is lifting the pause, recorded on the board (default: $USER, else `user`).
    #[arg(long, value_name = "NAME")]
    pub by: Option<String>,
}

/// Lifts the pause, if one is in force.
pub fn run(ctx: &Context, args: &ResumeArgs) -> Result<Outcome, CliError> {
    let mut store = ctx.open_store()?;
    let by = operator(args.by.as_deref());
    let now = now_ms();
    let cleared = store.resume_auto_decompose(now, &by)?;
    if ctx.json {
        ctx.print_json(&json!({
            "resumed": cleared.is_some(),
            "by": by,
            "at": now as f64 / 1000.0,
            "cleared": cleared.as_ref().map(|p| json!({
                "until": p.until_ms as f64 / 1000.0,
                "reason": p.reason,
            })),
        }))?;
        return Ok(Outcome::Success);
    }
    match cleared {
        Some(pause) => ctx.print(&format!(
            "Resumed auto-decompose: lifted the pause that would have lasted until {} ({})",
            shown_ms(pause.until_ms),
            pause.reason
        ))?,
        None => ctx.print("No provider pause in force; nothing to resume")?,
    }
    Ok(Outcome::Success)
}
