//! `hermes [-p PROFILE] chat -q MESSAGE`: a kanban worker's session, as the gateway starts one
//! for a ready card (see `crate::worker`).

use clap::Args;

use super::{CliError, Context, Outcome};
use crate::worker::{run_worker, WorkerEnv};

/// Arguments of `chat`.
#[derive(Debug, Args)]
#[command(after_help = "\
Runs one worker session for the run named by the environment the gateway gives its workers: \
HERMES_KANBAN_TASK, HERMES_KANBAN_RUN_ID, HERMES_KANBAN_CLAIM_LOCK (and HERMES_KANBAN_DB for the \
board, else the home's kanban.db). The session takes turns on the main model (model.base_url, \
model.default, OPENAI_API_KEY) with the kanban tools until a kanban_complete or kanban_block \
call, at most agent.max_turns turns; every request is in the ledger (`kanban usage --calls`).")]
pub struct ChatArgs {
    /// The session's first message: the gateway sends `work kanban task <id>` (as upstream's
    /// `-q MESSAGE`, which means the same after `chat`).
    #[arg(long = "query", value_name = "MESSAGE")]
    pub query: String,
}

/// Runs the worker's session to its end.
pub fn run(ctx: &Context, args: &ChatArgs, profile: Option<String>) -> Result<Outcome, CliError> {
    let env = WorkerEnv::from_vars(|name| std::env::var(name).ok(), &ctx.home, profile)
        .map_err(anyhow::Error::from)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow::anyhow!("cannot start the async runtime: {e}"))?;
    let code = runtime
        .block_on(run_worker(
            &ctx.home,
            ctx.config.clone(),
            env,
            args.query.clone(),
        ))
        .map_err(anyhow::Error::from)?;
    if code == 0 {
        return Ok(Outcome::Success);
    }
    // The session said why on stderr; the code is what the gateway reads.
    std::process::exit(i32::from(code));
}
