//! `hermes kanban auto-decompose ID on|off`: a card's opt-out of automatic decomposition,
//! after creation (`create --no-auto-decompose` sets it at creation).

use clap::{Args, ValueEnum};
use serde_json::json;

use super::{operator, round_up_secs, CliError, Context, Outcome};
use crate::clock::now_ms;

/// `on` or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Switch {
    /// Let the gateway and `decompose --all` decompose the card.
    #[value(alias = "enable", alias = "true", alias = "yes")]
    On,
    /// Never decompose the card automatically (an explicit `kanban decompose ID` still may).
    #[value(alias = "disable", alias = "false", alias = "no")]
    Off,
}

/// Arguments of `kanban auto-decompose`.
#[derive(Debug, Args)]
#[command(after_help = "\
`off` opts the card out of automatic decomposition, as `create --no-auto-decompose` does; `on` \
opts it back in. Neither touches the card's attempt budget or its backoff: a card switched back \
on is due when its backoff ends (now, if it has none), and a parked card stays parked (`kanban \
unpark`). Each change adds an \
`auto_decompose_disabled` / `auto_decompose_enabled` event; asking for the setting the card \
already has changes nothing.

With --json: {\"task_id\", \"auto_decompose\": true|false, \"changed\", \"next_attempt_at\"} \
(unix seconds, or null when the card is not scheduled).")]
pub struct AutoDecomposeArgs {
    /// The card.
    #[arg(value_name = "ID")]
    pub id: String,
    /// `on` or `off`.
    #[arg(value_enum)]
    pub switch: Switch,
    /// Who is changing it, recorded in the event (default: $USER, else `user`).
    #[arg(long, value_name = "NAME")]
    pub by: Option<String>,
}

/// Switches the card's setting.
pub fn run(ctx: &Context, args: &AutoDecomposeArgs) -> Result<Outcome, CliError> {
    let mut store = ctx.open_store()?;
    let by = operator(args.by.as_deref());
    let enabled = args.switch == Switch::On;
    let done = store.set_auto_decompose(&args.id, enabled, now_ms(), &by)?;
    if ctx.json {
        ctx.print_json(&json!({
            "task_id": done.task_id,
            "auto_decompose": done.enabled,
            "changed": done.changed,
            "next_attempt_at": done.next_attempt_at_ms.map(round_up_secs),
        }))?;
        return Ok(Outcome::Success);
    }
    let state = if done.enabled { "on" } else { "off" };
    let text = match (done.changed, done.next_attempt_at_ms) {
        (false, _) => format!("Auto-decompose of {} was already {state}", done.task_id),
        (true, Some(due)) if due > now_ms() => format!(
            "Auto-decompose of {} is {state}; its backoff runs until {}",
            done.task_id,
            crate::clock::shown_ms(due)
        ),
        (true, Some(_)) => format!("Auto-decompose of {} is {state}; due now", done.task_id),
        (true, None) => format!("Auto-decompose of {} is {state}", done.task_id),
    };
    ctx.print(&text)?;
    Ok(Outcome::Success)
}
