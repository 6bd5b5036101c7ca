//! `hermes gateway run`: the foreground gateway process.

use std::io::{self, Write};

use clap::Args;
use tracing::warn;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::EnvFilter;

use super::{CliError, Context, Outcome};
use crate::dispatch::run_gateway;

/// Arguments of `gateway run`.
#[derive(Debug, Args)]
#[command(after_help = "\
Logs go to stderr, one line per event (RUST_LOG adjusts what is shown); with --json each line is \
one JSON object with `timestamp`, `level`, `message` and the event's fields, and stdout stays \
empty. SIGTERM or SIGINT stop the gateway cleanly.

Exit status: 0 after a clean stop; 1 the gateway could not start (a bad config.yaml, the board, \
or another gateway already dispatching it); 2 usage error.")]
pub struct RunArgs {}

/// How long the runtime's last blocking tasks get once the gateway has stopped.
const RUNTIME_SHUTDOWN_WAIT: std::time::Duration = std::time::Duration::from_millis(200);

/// Runs until SIGTERM or SIGINT; exit 0 after a clean stop.
pub fn run(ctx: &Context, _args: &RunArgs) -> Result<Outcome, CliError> {
    // One line per event on stderr (a JSON object with --json); RUST_LOG adjusts what is shown.
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(Stderr)
        // Its own report of a failed write goes through `eprintln!`, which panics when stderr
        // is gone: a closed log pipe would stop the dispatcher.
        .log_internal_errors(false)
        .with_ansi(false)
        .with_target(false);
    let _ = if ctx.json {
        logs.json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init()
    } else {
        logs.try_init()
    };
    for warning in &ctx.config.warnings {
        warn!(key = %warning.key, "{warning}");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        // The loop, attempts in flight and SQLite calls on the blocking pool: two workers are
        // plenty, and keep the idle footprint small.
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| anyhow::anyhow!("cannot start the async runtime: {e}"))?;
    let ran = runtime.block_on(run_gateway(ctx.home.clone()));
    // Dropping a runtime waits for every blocking task, and one may be stuck for good (a read
    // of a file on a stalled filesystem): SIGTERM must still end the process. The board was
    // closed, and its WAL folded in, before `run_gateway` returned.
    runtime.shutdown_timeout(RUNTIME_SHUTDOWN_WAIT);
    ran?;
    Ok(Outcome::Success)
}

/// Log lines to stderr, dropped when stderr cannot take them (a reader that went away, a full
/// disk behind a redirect): logging never stops dispatching.
#[derive(Debug, Clone, Copy)]
struct Stderr;

/// One log line's writer.
struct LineWriter;

impl Write for LineWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // Claims the whole line either way, so no caller retries or reports the loss.
        let _ = io::stderr().lock().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        let _ = io::stderr().lock().flush();
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Stderr {
    type Writer = LineWriter;

    fn make_writer(&'a self) -> Self::Writer {
        LineWriter
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_line_always_counts_as_written() {
        let mut writer = Stderr.make_writer();
        assert_eq!(writer.write(b"").ok(), Some(0));
        assert_eq!(writer.write(b"hermes: test line\n").ok(), Some(18));
        assert!(writer.flush().is_ok());
    }
}
