//! Secrets out of text: a URL's userinfo (`https://user:password@host`) and any known secret
//! value (an API key) are replaced by [`REDACTED`]. The rule is pure; which secrets the process
//! knows is `crate::output`'s business.

use std::borrow::Cow;

/// What stands where a secret was.
pub const REDACTED: &str = "<redacted>";

/// Secret values shorter than this are not searched for in free text (a one-letter "key" would
/// blank every word holding that letter); inside a URL's userinfo they are still redacted.
pub const MIN_SECRET_LEN: usize = 4;

/// `text` with the userinfo of every URL in it and every occurrence of each of `secrets` (and of
/// its JSON-escaped form) replaced by [`REDACTED`].
pub fn redact<'a, S: AsRef<str>>(text: &'a str, secrets: &[S]) -> Cow<'a, str> {
    let mut out = redact_userinfo(text);
    for secret in secrets {
        let secret = secret.as_ref();
        if secret.len() < MIN_SECRET_LEN {
            continue;
        }
        let escaped = json_escaped(secret);
        for form in [Some(secret), escaped.as_deref()].into_iter().flatten() {
            if out.contains(form) {
                out = Cow::Owned(out.replace(form, REDACTED));
            }
        }
    }
    out
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

/// The secrets a URL carries in its userinfo: the whole `user:password` and the password alone
/// (as written, and as the URL would decode it is not needed: the text of a message repeats the
/// URL as it was configured).
pub fn userinfo_secrets(url: &str) -> Vec<String> {
    let Some(start) = url.find("://").map(|at| at + 3) else {
        return Vec::new();
    };
    let after = &url[start..];
    let token = &after[..after.find(char::is_whitespace).unwrap_or(after.len())];
    let Some(end) = token.rfind('@') else {
        return Vec::new();
    };
    let userinfo = &token[..end];
    let mut secrets = vec![userinfo.to_owned()];
    if let Some((_, password)) = userinfo.split_once(':') {
        if !password.is_empty() {
            secrets.push(password.to_owned());
        }
    }
    secrets
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
    fn known_secrets_are_redacted_in_free_text_and_in_json() {
        let secrets = ["sk-live-1234567890", "pa\"ss"];
        assert_eq!(
            redact("Incorrect API key provided: sk-live-1234567890.", &secrets),
            "Incorrect API key provided: <redacted>."
        );
        assert_eq!(
            redact(r#"{"detail":"pa\"ss leaked"}"#, &secrets),
            r#"{"detail":"<redacted> leaked"}"#
        );
        assert_eq!(redact("abc", &["abc"]), "abc", "too short to search for");
    }

    #[test]
    fn a_urls_userinfo_gives_its_secrets() {
        assert_eq!(
            userinfo_secrets("http://alice:hunter2@host/v1"),
            ["alice:hunter2", "hunter2"]
        );
        assert_eq!(userinfo_secrets("http://token@host/v1"), ["token"]);
        assert!(userinfo_secrets("http://host/v1").is_empty());
        assert!(userinfo_secrets("not a url").is_empty());
    }
}
