//! `hermes gateway run`: the foreground gateway process.

use clap::Args;
use tracing_subscriber::EnvFilter;

use super::{CliError, Context, Outcome};
use crate::dispatch::run_gateway;

/// Arguments of `gateway run`.
#[derive(Debug, Args)]
pub struct RunArgs {}

/// Runs until SIGTERM or SIGINT; exit 0 after a clean stop.
pub fn run(ctx: &Context, _args: &RunArgs) -> Result<Outcome, CliError> {
    // One plain line per event on stderr; RUST_LOG adjusts what is shown.
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_target(false)
        .try_init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        // The loop, attempts in flight and SQLite calls on the blocking pool: two workers are
        // plenty, and keep the idle footprint small.
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| anyhow::anyhow!("cannot start the async runtime: {e}"))?;
    runtime.block_on(run_gateway(ctx.home.clone()))?;
    Ok(Outcome::Success)
}
