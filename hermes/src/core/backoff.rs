//! How long a card waits after a failed attempt (B2).

use std::time::Duration;

use super::time::after;

/// Cap on the exponential backoff between failed attempts (B2).
pub const MAX_BACKOFF: Duration = Duration::from_secs(3600);

/// The wait after a card's failed attempts: `base` after the first, doubling per failure, never
/// more than `cap`. Plain data, so the store can apply it inside its own transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub base: Duration,
    pub cap: Duration,
}

impl Backoff {
    /// `base` doubling per failure, capped at [`MAX_BACKOFF`].
    pub fn new(base: Duration) -> Backoff {
        Backoff {
            base,
            cap: MAX_BACKOFF,
        }
    }

    /// The wait after the `attempt`-th failure (1 for the first).
    pub fn after_failure(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(63);
        let factor = 1u64 << doublings;
        let wait = u32::try_from(factor)
            .map(|f| self.base.saturating_mul(f))
            .unwrap_or(Duration::MAX);
        wait.min(self.cap)
    }

    /// When a card whose `attempt`-th attempt failed at `now_ms` is due again.
    pub fn due_ms(&self, now_ms: i64, attempt: u32) -> i64 {
        after(now_ms, self.after_failure(attempt))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        let backoff = Backoff::new(Duration::from_secs(60));
        assert_eq!(backoff.after_failure(1), Duration::from_secs(60));
        assert_eq!(backoff.after_failure(2), Duration::from_secs(120));
        assert_eq!(backoff.after_failure(3), Duration::from_secs(240));
        assert_eq!(backoff.after_failure(40), MAX_BACKOFF);
        assert_eq!(backoff.after_failure(u32::MAX), MAX_BACKOFF);
        assert_eq!(backoff.due_ms(1_000, 1), 61_000);
        assert_eq!(
            Backoff::new(Duration::ZERO).after_failure(5),
            Duration::ZERO
        );
    }

    #[test]
    fn extreme_bases_saturate_instead_of_wrapping() {
        let huge = Backoff {
            base: Duration::MAX,
            cap: Duration::MAX,
        };
        assert_eq!(huge.after_failure(1), Duration::MAX);
        assert_eq!(huge.after_failure(u32::MAX), Duration::MAX);
        assert_eq!(huge.due_ms(i64::MAX - 1, 3), i64::MAX);
        let seconds = Backoff {
            base: Duration::from_secs_f64(f64::from(u32::MAX)),
            cap: Duration::MAX,
        };
        assert_eq!(seconds.due_ms(0, 64), i64::MAX);
    }
}
