//! Secrets out of text: a URL's userinfo (`https://user:password@host`) and every known secret
//! value, in every form it can be echoed in, are replaced by [`REDACTED`]; and, for text a
//! configuration file supplied, anything shaped like a key is too ([`key_shapes`]). The rules
//! are pure; which secrets the process knows is `crate::output`'s business.
//!
//! A secret leaves in other forms than the one configured: a provider echoes the URL it was
//! called with percent-decoded (`p%40ss` as `p@ss`), or the query percent-encoded, a request
//! dump shows a basic-auth header as base64 of `user:password`, a JSON error escapes quotes.
//! [`forms`] and [`url_secrets`] spell out each form once, so one redactor knows them all.

use std::borrow::Cow;

use base64::Engine;
use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

/// What stands where a secret was.
pub const REDACTED: &str = "<redacted>";

/// Secret values shorter than this are not searched for in free text (a one-letter "key" would
/// blank every word holding that letter); inside a URL's userinfo they are still redacted.
pub const MIN_SECRET_LEN: usize = 4;

/// Percent-encoding of everything but RFC 3986's unreserved characters (`-._~`): how a URL
/// component is usually encoded. `NON_ALPHANUMERIC` (every `-` encoded too) is the other form.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// `text` with the userinfo of every URL in it and every occurrence of each of `secrets`
/// replaced by [`REDACTED`]. `secrets` are searched for as given, longest first is the caller's
/// order to keep (see [`forms`]), so that a form holding another is replaced whole.
pub fn redact<'a, S: AsRef<str>>(text: &'a str, secrets: &[S]) -> Cow<'a, str> {
    let mut out = redact_userinfo(text);
    for secret in secrets {
        let secret = secret.as_ref();
        if secret.len() >= MIN_SECRET_LEN && out.contains(secret) {
            out = Cow::Owned(out.replace(secret, REDACTED));
        }
    }
    out
}

/// Every form of `secret` worth searching text for: as given, percent-decoded, percent-encoded
/// (both usual ways), and each of those as it reads inside a JSON string; the short ones left
/// out (see [`MIN_SECRET_LEN`]), longest first, without repeats.
pub fn forms(secret: &str) -> Vec<String> {
    let mut base = vec![secret.to_owned()];
    if let Ok(decoded) = percent_decode_str(secret).decode_utf8() {
        base.push(decoded.into_owned());
    }
    for plain in base.clone() {
        base.push(utf8_percent_encode(&plain, COMPONENT).to_string());
        base.push(utf8_percent_encode(&plain, NON_ALPHANUMERIC).to_string());
    }
    let mut all: Vec<String> = Vec::new();
    for form in base {
        if let Some(escaped) = json_escaped(&form) {
            all.push(escaped);
        }
        all.push(form);
    }
    all.retain(|form| form.len() >= MIN_SECRET_LEN);
    all.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    all.dedup();
    all
}

/// A secret as it reads inside a JSON string, when that differs from the secret itself.
fn json_escaped(secret: &str) -> Option<String> {
    let quoted = serde_json::to_string(secret).ok()?;
    let inner = &quoted[1..quoted.len() - 1];
    (inner != secret).then(|| inner.to_owned())
}

/// Where the token holding a URL ends: whitespace, or a character that quotes or brackets text
/// around a URL in a message.
fn ends_token(c: char) -> bool {
    c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '<' | '>' | '\\')
}

/// Every `scheme://userinfo@` becomes `scheme://<redacted>@`. The userinfo runs to the last `@`
/// of the URL's token, so a password holding an unescaped `/`, `?` or `@` is still covered (a
/// later `@` in a path makes it cover more, never less).
fn redact_userinfo(text: &str) -> Cow<'_, str> {
    if !text.contains("://") || !text.contains('@') {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut changed = false;
    while let Some(at) = rest.find("://") {
        let (before, after) = rest.split_at(at + 3);
        out.push_str(before);
        let token_end = after.find(ends_token).unwrap_or(after.len());
        let token = &after[..token_end];
        match token.rfind('@') {
            Some(userinfo_end) if userinfo_end > 0 && token[..userinfo_end] != *REDACTED => {
                out.push_str(REDACTED);
                rest = &after[userinfo_end..];
                changed = true;
            }
            _ => rest = after,
        }
    }
    out.push_str(rest);
    if changed {
        Cow::Owned(out)
    } else {
        Cow::Borrowed(text)
    }
}

/// The secrets a URL carries: its userinfo (the whole `user:password`, the password alone, each
/// as written and decoded), the basic-auth header value made of it (base64 of the decoded
/// `user:password`, as the client sends it), and the value of every query parameter (some
/// providers take a key there, and which parameter holds one cannot be told). Each still to be
/// expanded with [`forms`].
pub fn url_secrets(url: &str) -> Vec<String> {
    let Some(start) = url.find("://").map(|at| at + 3) else {
        return Vec::new();
    };
    let after = url[start..].trim_end();
    let token = &after[..after.find(char::is_whitespace).unwrap_or(after.len())];
    let mut secrets = Vec::new();
    let authority_end = token.rfind('@');
    if let Some(end) = authority_end {
        let userinfo = &token[..end];
        secrets.push(userinfo.to_owned());
        let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
        if !password.is_empty() {
            secrets.push(password.to_owned());
        }
        let decode = |part: &str| percent_decode_str(part).decode_utf8_lossy().into_owned();
        let basic = format!("{}:{}", decode(user), decode(password));
        secrets.push(base64::engine::general_purpose::STANDARD.encode(basic));
    }
    let rest = &token[authority_end.map_or(0, |end| end + 1)..];
    if let Some((_, query)) = rest.split_once('?') {
        let query = query.split('#').next().unwrap_or_default();
        for part in query.split('&') {
            let value = part.split_once('=').map_or(part, |(_, value)| value);
            if !value.is_empty() {
                secrets.push(value.to_owned());
                // A form-encoded `+` is a space once decoded.
                secrets.push(value.replace('+', " "));
            }
        }
    }
    secrets
}

/// Prefixes providers give their keys (OpenAI and compatibles, Anthropic, xAI, Groq, Hugging
/// Face, GitHub, GitLab, Slack, Google, AWS).
const KEY_PREFIXES: [&str; 14] = [
    "sk-",
    "sk_",
    "pk-",
    "rk-",
    "xai-",
    "gsk_",
    "hf_",
    "ghp_",
    "gho_",
    "github_pat_",
    "glpat-",
    "xoxb-",
    "AIza",
    "AKIA",
];

/// Words that make a `NAME=value` (or `NAME: value`) an assignment of a secret.
const SECRET_NAME_WORDS: [&str; 7] = [
    "KEY",
    "TOKEN",
    "SECRET",
    "PASSW",
    "PWD",
    "CREDENTIAL",
    "AUTH",
];

/// Text a configuration file supplied (a value echoed in a config error, a key named in a
/// warning), with everything shaped like a secret redacted: a value assigned to a secret's name
/// (`OPENAI_API_KEY=…`, as a `.env` line pasted into YAML reads), a token with a provider's key
/// prefix (`sk-…`), and a long token of mixed letters and digits (or of hex digits). Before the
/// file is read no key is known, so shape is all there is to go by; applied only to what the
/// file supplied, never to paths or to hermes's own words.
pub fn key_shapes(text: &str) -> Cow<'_, str> {
    let mut out = String::with_capacity(text.len());
    let mut changed = false;
    let mut rest = text;
    while !rest.is_empty() {
        let start = rest.find(is_token_char).unwrap_or(rest.len());
        out.push_str(&rest[..start]);
        rest = &rest[start..];
        let end = rest.find(|c| !is_token_char(c)).unwrap_or(rest.len());
        let token = &rest[..end];
        rest = &rest[end..];
        match secret_part(token) {
            Some(at) => {
                out.push_str(&token[..at]);
                out.push_str(REDACTED);
                changed = true;
            }
            None => out.push_str(token),
        }
    }
    if changed {
        Cow::Owned(out)
    } else {
        Cow::Borrowed(text)
    }
}

/// Characters a key (or a `NAME=key` assignment) is made of.
fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '~' | '+' | '/' | '=' | ':')
}

/// Where the secret in `token` starts, if it holds one.
fn secret_part(token: &str) -> Option<usize> {
    if let Some(at) = token.find(['=', ':']) {
        let name = token[..at].to_ascii_uppercase();
        let value = token[at + 1..].trim_start_matches(['=', ':']);
        if !value.is_empty() && SECRET_NAME_WORDS.iter().any(|word| name.contains(word)) {
            return Some(token.len() - value.len());
        }
    }
    // A key may follow a `name=` that does not say it is one: judge what follows the last
    // separator, and the token whole.
    let tail_start = token.rfind(['=', ':']).map_or(0, |at| at + 1);
    [0, tail_start]
        .into_iter()
        .find(|&start| looks_like_key(&token[start..]))
}

fn looks_like_key(token: &str) -> bool {
    let token = token.trim_end_matches(['.', ':', '=']);
    let prefixed = KEY_PREFIXES
        .iter()
        .any(|prefix| token.starts_with(prefix) && token.len() >= prefix.len() + 8);
    let has = |test: fn(&char) -> bool| token.chars().any(|c| test(&c));
    let mixed = token.len() >= 20
        && has(char::is_ascii_uppercase)
        && has(char::is_ascii_lowercase)
        && has(char::is_ascii_digit);
    let hex = token.len() >= 32
        && token.chars().all(|c| c.is_ascii_hexdigit())
        && has(char::is_ascii_digit)
        && has(char::is_ascii_alphabetic);
    prefixed || mixed || hex
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONE: [&str; 0] = [];

    #[test]
    fn userinfo_is_redacted_wherever_a_url_stands() {
        assert_eq!(
            redact(
                "model base URL \"http://alice:hunter2@[::1/v1\" is not a valid URL",
                &NONE
            ),
            "model base URL \"http://<redacted>@[::1/v1\" is not a valid URL"
        );
        assert_eq!(
            redact("a https://u:p/ss@host:8080/v1 and ftp://x@y z", &NONE),
            "a https://<redacted>@host:8080/v1 and ftp://<redacted>@y z"
        );
        let plain = "http://127.0.0.1:9/v1/chat/completions, mail me@example.org";
        assert!(matches!(redact(plain, &NONE), Cow::Borrowed(_)));
        // Idempotent: redacting twice changes nothing more.
        let once = redact("http://a:b@h/", &NONE).into_owned();
        assert_eq!(redact(&once, &NONE), once);
    }

    #[test]
    fn known_secrets_are_redacted_in_every_form() {
        let secrets: Vec<String> = ["sk-live-1234567890", "pa\"ss%40word"]
            .iter()
            .flat_map(|s| forms(s))
            .collect();
        for (text, expected) in [
            (
                "Incorrect API key provided: sk-live-1234567890.",
                "Incorrect API key provided: <redacted>.",
            ),
            (
                r#"{"detail":"pa\"ss leaked"}"#,
                r#"{"detail":"pa\"ss leaked"}"#,
            ),
            (
                r#"{"detail":"pa\"ss@word leaked"}"#,
                r#"{"detail":"<redacted> leaked"}"#,
            ),
            ("decoded: pa\"ss@word", "decoded: <redacted>"),
            ("as sent: pa%22ss%40word", "as sent: <redacted>"),
            (
                "every byte: sk%2Dlive%2D1234567890",
                "every byte: <redacted>",
            ),
        ] {
            assert_eq!(redact(text, &secrets), expected, "{text}");
        }
        assert_eq!(
            redact("abc", &forms("abc")),
            "abc",
            "too short to search for"
        );
        let all = forms("a b/c");
        assert!(all.windows(2).all(|w| w[0].len() >= w[1].len()), "{all:?}");
        assert!(all.contains(&"a%20b%2Fc".to_owned()), "{all:?}");
    }

    #[test]
    fn a_urls_secrets_are_its_userinfo_its_basic_auth_and_its_query_values() {
        let secrets = url_secrets("http://alice:hun%40ter2@host/v1?api-key=sk-q-0001&v=2024-06-01");
        for expected in [
            "alice:hun%40ter2",
            "hun%40ter2",
            // base64("alice:hun@ter2"): the header the client sends, decoded credentials.
            "YWxpY2U6aHVuQHRlcjI=",
            "sk-q-0001",
            "2024-06-01",
        ] {
            assert!(
                secrets.iter().any(|s| s == expected),
                "{expected}: {secrets:?}"
            );
        }
        let known: Vec<String> = secrets.iter().flat_map(|s| forms(s)).collect();
        assert_eq!(
            redact(
                "rejected hun@ter2 and sk-q-0001 (Basic YWxpY2U6aHVuQHRlcjI=)",
                &known
            ),
            "rejected <redacted> and <redacted> (Basic <redacted>)"
        );
        assert_eq!(url_secrets("http://token@host/v1")[0], "token");
        assert!(url_secrets("http://host/v1").is_empty());
        assert!(url_secrets("not a url").is_empty());
    }

    #[test]
    fn config_text_shaped_like_a_key_is_redacted() {
        for (text, expected) in [
            (
                "got \"OPENAI_API_KEY=sk-proj-Abc123def456\"",
                "got \"OPENAI_API_KEY=<redacted>\"",
            ),
            ("export MY_TOKEN=abc", "export MY_TOKEN=<redacted>"),
            ("got \"sk-ant-api03-abcdefgh\"", "got \"<redacted>\""),
            ("got \"Zx9QwErTy7UiOp3AsDf1\"", "got \"<redacted>\""),
            (
                "got \"0123456789abcdef0123456789abcdef\"",
                "got \"<redacted>\"",
            ),
            (
                "url=https://h/v1?key=AIzaSyA-1234567890",
                "url=https://h/v1?key=<redacted>",
            ),
        ] {
            assert_eq!(key_shapes(text), expected, "{text}");
        }
        for plain in [
            "kanban.dispatch_interval_seconds: expected a number of seconds from 0.01 to 86400",
            "did you mean kanban.decompose_max_attempts?",
            "kanban.prices.claude-3-5-sonnet-20241022.input",
            "got \"gpt-4o-mini-2024-07-18\"",
            "primary: true",
        ] {
            assert!(
                matches!(key_shapes(plain), Cow::Borrowed(_)),
                "{plain}: {}",
                key_shapes(plain)
            );
        }
    }
}
