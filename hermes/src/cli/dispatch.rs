//! `hermes kanban dispatch [--max N]`: one spawn pass from the command line, as upstream has
//! it, but under every bound the gateway keeps (contract §7 S5): the live-worker cap
//! (`kanban.max_spawn`, `0` meaning none), each card's spawn budget and backoff, the pause and
//! the hourly ceiling.

use clap::Args;
use serde_json::json;

use super::{CliError, Context, Outcome};
use crate::dispatch::spawn::dispatch_once;
use crate::dispatch::DispatchGate;
use crate::store::BoardHandle;

/// Arguments of `kanban dispatch`.
#[derive(Debug, Args)]
#[command(after_help = "\
Spawns a worker for each ready card with an assignee that may have one now, as the gateway's \
tick does, into the places kanban.max_spawn leaves free (counting the live workers of every \
process), at most --max of them; `kanban.max_spawn: 0` and `--max 0` both mean none. The \
workers run on after this command returns: a gateway started later adopts them. Refused while \
a gateway (or another dispatch) dispatches the board: it spawns its workers itself.

With --json: {\"spawned\": [{\"task_id\", \"run_id\", \"pid\"}], \"live\", \"max_spawn\", \
\"held\"} (held: why the board held every spawn back, or null).")]
pub struct DispatchArgs {
    /// Spawn at most this many workers in this pass.
    #[arg(long, value_name = "N")]
    pub max: Option<u32>,
}

/// Runs one spawn pass.
pub fn run(ctx: &Context, args: &DispatchArgs) -> Result<Outcome, CliError> {
    let db_path = ctx.home.db_path();
    drop(ctx.open_store()?);
    let mut gate = DispatchGate::new(&db_path);
    if !gate.may_dispatch() {
        return Err(anyhow::anyhow!(
            "another dispatcher (a running gateway, or another `kanban dispatch`) holds the \
             board at {}; it spawns the workers itself",
            db_path.display()
        )
        .into());
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow::anyhow!("cannot start the async runtime: {e}"))?;
    let pass = runtime.block_on(async {
        let board = BoardHandle::open(&db_path).await?;
        dispatch_once(ctx.home.clone(), &board, &ctx.config, args.max).await
    })?;
    drop(gate);
    if ctx.json {
        let spawned: Vec<_> = pass
            .spawned
            .iter()
            .map(|s| json!({"task_id": s.task_id, "run_id": s.run_id, "pid": s.pid}))
            .collect();
        ctx.print_json(&json!({
            "spawned": spawned,
            "live": pass.live,
            "max_spawn": pass.cap,
            "held": pass.held,
        }))?;
        return Ok(Outcome::Success);
    }
    let mut lines: Vec<String> = pass
        .spawned
        .iter()
        .map(|s| {
            format!(
                "spawned a worker for {} (run {}, pid {})",
                s.task_id, s.run_id, s.pid
            )
        })
        .collect();
    if let Some(held) = &pass.held {
        lines.push(held.clone());
    } else if pass.spawned.is_empty() {
        lines.push(format!(
            "no worker spawned ({} live, kanban.max_spawn {})",
            pass.live, pass.cap
        ));
    }
    ctx.print(&lines.join("\n"))?;
    Ok(Outcome::Success)
}
