//! `hermes gateway run`: the foreground gateway process.

use std::io::{self, Write};

use clap::Args;
use tracing::warn;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::EnvFilter;

use super::{CliError, Context, Outcome};
use crate::dispatch::{run_gateway, RUNTIME_SHUTDOWN_WAIT};
use crate::output;

/// Arguments of `gateway run`.
#[derive(Debug, Args)]
#[command(after_help = "\
Logs go to stderr, one line per event (RUST_LOG adjusts what is shown); with --json each line is \
one JSON object with `timestamp`, `level`, `message` and the event's fields, and stdout stays \
empty. SIGTERM or SIGINT stop the gateway cleanly.")]
pub struct RunArgs {}

/// Runs until SIGTERM or SIGINT; exit 0 after a clean stop.
pub fn run(ctx: &Context, _args: &RunArgs) -> Result<Outcome, CliError> {
    // One line per event on stderr (a JSON object with --json); RUST_LOG adjusts what is shown.
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(Stderr { json: ctx.json })
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
    // of a file on a stalled filesystem, a write to a locked board): SIGTERM must still end the
    // process. The board was closed, and its WAL folded in, before `run_gateway` returned, or
    // left as it is after a bounded wait (see `Dispatcher::shut_down`).
    runtime.shutdown_timeout(RUNTIME_SHUTDOWN_WAIT);
    ran?;
    Ok(Outcome::Success)
}

/// Log lines to stderr, dropped when stderr cannot take them (a reader that went away, a full
/// disk behind a redirect): logging never stops dispatching. Each line is redacted and its
/// control characters made visible on the way (`crate::output`), whatever field carried them.
#[derive(Debug, Clone, Copy)]
struct Stderr {
    /// Lines are JSON objects (`--json`).
    json: bool,
}

/// One log line's writer.
struct LineWriter {
    json: bool,
}

impl LineWriter {
    /// The line as it may reach a terminal. tracing hands over one whole event per write; a
    /// line break inside a text event is shown as `\n`, so no event can forge another line.
    fn shown(&self, buf: &[u8]) -> String {
        let text = String::from_utf8_lossy(buf);
        if self.json {
            return output::json_for_terminal(&text);
        }
        let (body, end) = match text.strip_suffix('\n') {
            Some(body) => (body, "\n"),
            None => (text.as_ref(), ""),
        };
        let body = output::redact(body);
        format!("{}{end}", crate::core::text::one_line(&body))
    }
}

impl Write for LineWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // Claims the whole line either way, so no caller retries or reports the loss.
        let _ = io::stderr().lock().write_all(self.shown(buf).as_bytes());
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
        LineWriter { json: self.json }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_line_always_counts_as_written() {
        let mut writer = Stderr { json: false }.make_writer();
        assert_eq!(writer.write(b"").ok(), Some(0));
        assert_eq!(writer.write(b"hermes: test line\n").ok(), Some(18));
        assert!(writer.flush().is_ok());
    }

    #[test]
    fn a_log_line_shows_no_control_character_and_no_second_line() {
        let text = LineWriter { json: false };
        assert_eq!(
            text.shown(b"WARN failed: \x1b[2Jfake\nINFO forged\n"),
            "WARN failed: \\u{1b}[2Jfake\\nINFO forged\n"
        );
        let json = LineWriter { json: true };
        let line = json.shown("{\"message\":\"a\u{9b}b\"}\n".as_bytes());
        assert_eq!(line, "{\"message\":\"a\\u009bb\"}\n");
    }
}
