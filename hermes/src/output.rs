//! Everything that leaves the process as text passes here: stdout and stderr of the CLI, the
//! gateway's log lines, and provider text on its way into the board. Secrets are redacted first
//! (`core::redact`: a URL's userinfo, and every key this process has learnt), then characters a
//! terminal would act on are made visible (`core::text`).
//!
//! The secrets are the process's own: the keys and base URLs of the configuration it loaded and
//! of the endpoint it resolved (environment and `.env` included), registered as they are read.

use std::borrow::Cow;
use std::sync::{PoisonError, RwLock};

use serde_json::Value;

use crate::config::Config;
use crate::core::redact::{self, userinfo_secrets};
use crate::core::text;

static SECRETS: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Remembers `secret` (an API key), so that no later output of this process shows it.
pub fn register_secret(secret: &str) {
    let secret = secret.trim();
    if secret.is_empty() {
        return;
    }
    let mut secrets = SECRETS.write().unwrap_or_else(PoisonError::into_inner);
    if !secrets.iter().any(|known| known == secret) {
        secrets.push(secret.to_owned());
    }
}

/// Remembers the userinfo of `url` (the whole `user:password` and the password).
pub fn register_url(url: &str) {
    for secret in userinfo_secrets(url) {
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
