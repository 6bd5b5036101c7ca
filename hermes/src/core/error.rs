//! Errors as one line with every cause, so a log says why, not only what.

use std::error::Error;

/// `error: cause: cause's cause …`, skipping a cause whose text the line already ends with.
pub fn error_chain(error: &(dyn Error + 'static)) -> String {
    let mut line = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !text.is_empty() && !line.ends_with(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = cause.source();
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("committing")]
    struct Outer(#[source] std::io::Error);

    #[derive(Debug, thiserror::Error)]
    #[error(transparent)]
    struct Transparent(#[from] Outer);

    #[test]
    fn every_cause_is_kept_once() {
        let full = std::io::Error::other("database or disk is full");
        let err = Transparent(Outer(full));
        assert_eq!(error_chain(&err), "committing: database or disk is full");
        let plain = std::io::Error::other("plain");
        assert_eq!(error_chain(&plain), "plain");
    }
}
