//! Log a condition once when it starts, not on every tick it lasts.

use tracing::{info, warn};

/// Remembers the condition last reported, by key.
#[derive(Debug, Default)]
pub(crate) struct Notice {
    active: Option<String>,
}

impl Notice {
    /// Logs `message` at WARN unless the condition `key` is already the one reported.
    pub(crate) fn warn_keyed(&mut self, key: &str, message: &str) {
        if self.start(key) {
            warn!("{message}");
        }
    }

    /// Logs `message` at WARN unless the same message is already the one reported.
    pub(crate) fn warn(&mut self, message: String) {
        if self.start(&message) {
            warn!("{message}");
        }
    }

    /// Logs `message` at INFO unless the same message is already the one reported.
    pub(crate) fn info(&mut self, message: String) {
        if self.start(&message) {
            info!("{message}");
        }
    }

    /// Forgets the condition; returns whether one was active.
    pub(crate) fn clear(&mut self) -> bool {
        self.active.take().is_some()
    }

    fn start(&mut self, key: &str) -> bool {
        if self.active.as_deref() == Some(key) {
            return false;
        }
        self.active = Some(key.to_owned());
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_condition_is_reported_once_until_cleared() {
        let mut notice = Notice::default();
        assert!(notice.start("paused"));
        assert!(!notice.start("paused"));
        assert!(notice.start("ceiling"));
        assert!(notice.clear());
        assert!(!notice.clear());
        assert!(notice.start("ceiling"));
    }
}
