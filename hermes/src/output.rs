//! Everything that leaves the process as text passes here: stdout and stderr of the CLI, the
//! gateway's log lines, and provider text on its way into the board. Secrets are redacted first
//! (`core::redact`: a URL's userinfo, and every key this process has learnt), then characters a
//! terminal would act on are made visible (`core::text`).
//!
//! The CLI's own lines on stderr are written here too, the one place for their shape: `hermes:
//! error: …` and `hermes: warning: …` (the label coloured per `--color`), or under `--json` an
//! error as one JSON object, `{"error": MESSAGE, "code": EXIT_CODE}`.
//!
//! The secrets are the process's own: the keys and base URLs of the configuration it loaded and
//! of the endpoint it resolved (environment and `.env` included), registered as they are read.

use std::borrow::Cow;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{PoisonError, RwLock};

use anstream::ColorChoice;
use anstyle::{AnsiColor, Style};
use serde_json::{json, Value};

use crate::config::Config;
use crate::core::redact::{self, url_secrets};
use crate::core::text;

/// Every form of every secret this process knows (`core::redact::forms`), longest first, so
/// that a form holding another is redacted whole.
static SECRETS: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Remembers `secret` (an API key) in every form it can be echoed in, so that no later output
/// of this process shows it.
pub fn register_secret(secret: &str) {
    let secret = secret.trim();
    if secret.is_empty() {
        return;
    }
    let mut secrets = SECRETS.write().unwrap_or_else(PoisonError::into_inner);
    let before = secrets.len();
    for form in redact::forms(secret) {
        if !secrets.contains(&form) {
            secrets.push(form);
        }
    }
    if secrets.len() != before {
        secrets.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    }
}

/// Remembers the secrets `url` carries (`core::redact::url_secrets`: its userinfo, the
/// basic-auth header made of it, its query's values).
pub fn register_url(url: &str) {
    for secret in url_secrets(url) {
        register_secret(&secret);
    }
}

/// Remembers the secrets `config` holds: the decomposer's `api_key` and the userinfo of every
/// base URL it names.
pub fn register_config(config: &Config) {
    let own = &config.auxiliary.kanban_decomposer;
    if let Some(key) = &own.api_key {
        register_secret(key);
    }
    for url in [&config.model.base_url, &own.base_url]
        .into_iter()
        .flatten()
    {
        register_url(url);
    }
}

/// `text` with every secret this process knows, and every URL's userinfo, redacted.
pub fn redact(text: &str) -> Cow<'_, str> {
    let secrets = SECRETS.read().unwrap_or_else(PoisonError::into_inner);
    match redact::redact(text, &secrets) {
        Cow::Borrowed(_) => Cow::Borrowed(text),
        Cow::Owned(owned) => Cow::Owned(owned),
    }
}

/// Provider text as the board keeps it: redacted, then capped (`core::text::cap`).
pub fn stored(text: &str) -> String {
    text::cap(&redact(text)).into_owned()
}

/// A failure's reason where the ledger keeps the text of its request: redacted, then cut to a
/// summary (`core::text::summary`).
pub fn summary(text: &str) -> String {
    text::summary(&redact(text)).into_owned()
}

/// A line (or lines) of text for a terminal or a log: redacted, and with every character a
/// terminal would act on made visible; line breaks stay.
pub fn for_terminal(text: &str) -> String {
    text::printable(&redact(text)).into_owned()
}

/// Serialized JSON for a terminal or a log: redacted, and with every character a terminal would
/// act on written as JSON's own `\u` escape (so the document decodes to the same text).
pub fn json_for_terminal(json: &str) -> String {
    text::json_printable(&redact(json)).into_owned()
}

/// `value` as one JSON line for a terminal (see [`json_for_terminal`]).
pub fn json_line(value: &Value) -> String {
    json_for_terminal(&value.to_string())
}

/// How much the CLI says on stderr beside its output and its errors (`-q`, `-v`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verbosity {
    /// `-q`: errors only.
    Quiet,
    /// Notes and warnings.
    Normal,
    /// `-v`: also the paths this run uses.
    Verbose,
}

/// 0 quiet, 1 normal, 2 verbose.
static VERBOSITY: AtomicU8 = AtomicU8::new(1);

/// How much the CLI says on stderr from now on.
pub fn set_verbosity(verbosity: Verbosity) {
    let level = match verbosity {
        Verbosity::Quiet => 0,
        Verbosity::Normal => 1,
        Verbosity::Verbose => 2,
    };
    VERBOSITY.store(level, Ordering::Relaxed);
}

fn verbosity_at_least(level: u8) -> bool {
    VERBOSITY.load(Ordering::Relaxed) >= level
}

/// Errors are JSON objects (`--json`).
static JSON_ERRORS: AtomicBool = AtomicBool::new(false);

const ERROR: Style = AnsiColor::Red.on_default().bold();
const WARNING: Style = AnsiColor::Yellow.on_default().bold();

/// How the CLI's stderr lines are coloured from now on: `Auto` colours only a terminal and
/// honours `NO_COLOR`, `CLICOLOR` and `CLICOLOR_FORCE`; clap's help and usage errors follow too.
pub fn set_color(choice: ColorChoice) {
    choice.write_global();
}

/// Whether errors are written as JSON objects from now on (`--json`).
pub fn set_json_errors(json: bool) {
    JSON_ERRORS.store(json, Ordering::Relaxed);
}

/// Whether errors are written as JSON objects (`--json`).
pub fn json_errors() -> bool {
    JSON_ERRORS.load(Ordering::Relaxed)
}

/// Reports the error that ends the process with `code`: `hermes: error: MESSAGE`, or under
/// `--json` `{"error": MESSAGE, "code": CODE}` on one line.
pub fn error(message: &str, code: u8) {
    if json_errors() {
        json_error(message, code);
    } else {
        labelled(ERROR, "error", message);
    }
}

/// Reports a bug the process is about to exit 101 for (`hermes: internal error: …`).
pub fn internal_error(message: &str) {
    if json_errors() {
        json_error(&format!("internal error: {message}"), 101);
    } else {
        labelled(ERROR, "internal error", message);
    }
}

/// `hermes: warning: MESSAGE`: something this run ignored or could not use, and went on. Text
/// under `--json` too: stdout carries the run's JSON, and the run has not failed. Not under
/// `-q`.
pub fn warning(message: &str) {
    if verbosity_at_least(1) {
        labelled(WARNING, "warning", message);
    }
}

/// `hermes: MESSAGE`: what a verb reports beside its output. Not under `-q`.
pub fn note(message: &str) {
    if verbosity_at_least(1) {
        stderr_line(&for_terminal(&format!("hermes: {message}")));
    }
}

/// `hermes: MESSAGE`, only under `-v`: detail of how the run was set up.
pub fn detail(message: &str) {
    if verbosity_at_least(2) {
        stderr_line(&for_terminal(&format!("hermes: {message}")));
    }
}

fn json_error(message: &str, code: u8) {
    stderr_line(&json_line(&json!({"error": message, "code": code})));
}

fn labelled(style: Style, label: &str, message: &str) {
    // Made safe before it is painted: the escapes added here are the only ones on the line.
    let message = for_terminal(message);
    stderr_line(&format!("hermes: {}: {message}", paint(style, label)));
}

/// `text` in `style` when stderr takes colour (see [`set_color`]).
fn paint(style: Style, text: &str) -> String {
    if anstream::AutoStream::choice(&io::stderr()) == ColorChoice::Never {
        text.to_owned()
    } else {
        format!("{style}{text}{style:#}")
    }
}

/// `line` plus a newline on stderr, as it is (already made safe by the caller). A closed stderr
/// is no reason to crash, as `eprintln!` would.
pub fn stderr_line(line: &str) {
    let _ = writeln!(io::stderr().lock(), "{line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_leaves_is_redacted_then_escaped() {
        register_secret("sk-output-test-0001");
        register_url("http://ops:s3cr3t-pw@127.0.0.1:9/v1");
        let line = for_terminal(
            "\u{1b}[31mkey sk-output-test-0001 at http://ops:s3cr3t-pw@127.0.0.1:9/v1; s3cr3t-pw\n",
        );
        assert_eq!(
            line,
            "\\u{1b}[31mkey <redacted> at http://<redacted>@127.0.0.1:9/v1; <redacted>\n"
        );
        let json = json_line(&serde_json::json!({"reason": "sk-output-test-0001\u{9b}"}));
        assert_eq!(json, r#"{"reason":"<redacted>\u009b"}"#);
        assert!(stored(&"x".repeat(10_000)).len() <= text::STORED_TEXT_CAP);
    }
}
