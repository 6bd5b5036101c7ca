//! How many automatic attempts a card gets (B1), and how long one attempt may go on, and so how
//! long its claim on the card must last (B1, B5).
//!
//! An attempt is its requests (each bounded by the aux timeout) and the waits between them. Its
//! claim must outlast every moment at which one of its requests could still be sending, so that
//! no other process pays for the same card meanwhile; the attempt in turn never starts a request
//! that could not finish inside that span. Everything here saturates: any configured value gives
//! a span, never an overflow.

use std::time::Duration;

/// Room before the first request (recording the attempt and opening its ledger row, each of
/// which may wait out a busy board).
pub const START_SLACK: Duration = Duration::from_secs(10);
/// Room after the last request (recording the reply or the failure).
pub const CLAIM_GRACE: Duration = Duration::from_secs(30);
/// The first wait between tries; it doubles per retry.
pub const RETRY_BASE: Duration = Duration::from_millis(500);
/// The longest wait between tries that the attempt chooses itself (a provider's `Retry-After`
/// may ask for longer, and is honoured when it fits the attempt's span).
pub const RETRY_CAP: Duration = Duration::from_secs(8);
/// The most extra tries one attempt makes, whatever the configuration says.
pub const MAX_RETRIES: u32 = 16;

/// A card's automatic attempt budget (B1): once a card has had `max` attempts, no automatic one
/// is made for it until a person unparks it. Every site that judges a card's budget asks this type, so
/// the gateway, a sweep, recovery and `unpark` cannot disagree on where the budget ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CardBudget {
    /// `kanban.decompose_max_attempts`.
    pub max: u32,
}

impl CardBudget {
    pub const fn new(max: u32) -> CardBudget {
        CardBudget { max }
    }

    /// Whether a card that has had `attempts` attempts may have no more automatic ones.
    pub const fn spent(&self, attempts: u32) -> bool {
        attempts >= self.max
    }

    /// Why a card with `attempts` attempts was found with its budget spent (and parked): the
    /// words the gateway's WARN and the board's park record share.
    pub fn spent_reason(&self, attempts: u32) -> String {
        format!(
            "{attempts} attempts reached kanban.decompose_max_attempts ({})",
            self.max
        )
    }
}

/// The wait before a retry: exponential, with "equal jitter" (half of it fixed, half random),
/// so that cards failing together do not retry together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryDelay {
    pub base: Duration,
    pub cap: Duration,
}

impl Default for RetryDelay {
    fn default() -> Self {
        RetryDelay {
            base: RETRY_BASE,
            cap: RETRY_CAP,
        }
    }
}

impl RetryDelay {
    /// The longest wait before retry number `retry` (1 for the first retry).
    pub fn max_before(&self, retry: u32) -> Duration {
        let doublings = retry.saturating_sub(1).min(31);
        self.base.saturating_mul(1u32 << doublings).min(self.cap)
    }

    /// The wait before retry number `retry`, for a uniform random `unit` in `[0, 1]`.
    pub fn before(&self, retry: u32, unit: f64) -> Duration {
        let max = self.max_before(retry);
        let unit = if unit.is_finite() {
            unit.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let half = max / 2;
        half + half.mul_f64(unit)
    }

    /// The sum of the longest waits before retries `1..=retries`.
    pub fn max_total(&self, retries: u32) -> Duration {
        let mut total = Duration::ZERO;
        let mut retry = 1;
        // Doubling reaches the cap within a few dozen steps; the rest are all the cap.
        while retry <= retries && self.max_before(retry) < self.cap {
            total = total.saturating_add(self.max_before(retry));
            retry += 1;
        }
        let capped = retries.saturating_sub(retry - 1);
        total.saturating_add(self.cap.saturating_mul(capped))
    }
}

/// One attempt's time budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptBudget {
    /// Bound on one request.
    pub timeout: Duration,
    /// Requests at most: the first plus the retries.
    pub tries: u32,
    pub delay: RetryDelay,
}

impl AttemptBudget {
    /// The budget for requests bounded by `timeout` with up to `retries` retries (at most
    /// [`MAX_RETRIES`]).
    pub fn new(timeout: Duration, retries: u32) -> AttemptBudget {
        AttemptBudget {
            timeout,
            tries: 1 + retries.min(MAX_RETRIES),
            delay: RetryDelay::default(),
        }
    }

    /// From the attempt's start to the last moment one of its requests may still be sending.
    pub fn sending_span(&self) -> Duration {
        START_SLACK
            .saturating_add(self.timeout.saturating_mul(self.tries))
            .saturating_add(self.delay.max_total(self.tries - 1))
    }

    /// How long the attempt's claim on its card lasts.
    pub fn claim_span(&self) -> Duration {
        self.sending_span().saturating_add(CLAIM_GRACE)
    }

    /// Whether a request started after waiting `wait`, `elapsed` into the attempt, is sure to
    /// end inside [`Self::sending_span`].
    pub fn fits(&self, elapsed: Duration, wait: Duration) -> bool {
        elapsed.saturating_add(wait).saturating_add(self.timeout) <= self.sending_span()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_card_budget_is_spent_at_its_max_and_not_before() {
        let budget = CardBudget::new(3);
        assert!(!budget.spent(2));
        assert!(budget.spent(3));
        assert!(budget.spent(4));
        // A budget of 0 is spent before the first attempt.
        let none = CardBudget::new(0);
        assert!(none.spent(0));
        let all = CardBudget::new(u32::MAX);
        assert!(!all.spent(u32::MAX - 1));
        assert!(all.spent(u32::MAX));
        assert_eq!(
            budget.spent_reason(4),
            "4 attempts reached kanban.decompose_max_attempts (3)"
        );
    }

    #[test]
    fn retry_delays_double_jitter_and_cap() {
        let delay = RetryDelay::default();
        assert_eq!(delay.max_before(1), Duration::from_millis(500));
        assert_eq!(delay.max_before(2), Duration::from_secs(1));
        assert_eq!(delay.max_before(5), Duration::from_secs(8));
        assert_eq!(delay.max_before(u32::MAX), RETRY_CAP);
        assert_eq!(delay.before(1, 0.0), Duration::from_millis(250));
        assert_eq!(delay.before(1, 1.0), Duration::from_millis(500));
        assert_eq!(delay.before(2, 0.5), Duration::from_millis(750));
        assert_eq!(delay.before(3, f64::NAN), Duration::from_secs(1));
        assert_eq!(delay.before(3, 7.0), Duration::from_secs(2));
        assert_eq!(delay.max_total(0), Duration::ZERO);
        assert_eq!(delay.max_total(2), Duration::from_millis(1500));
        // 0.5 + 1 + 2 + 4, then the cap.
        assert_eq!(delay.max_total(6), Duration::from_millis(23_500));
        assert_eq!(
            delay.max_total(u32::MAX),
            Duration::from_millis(7_500) + RETRY_CAP * (u32::MAX - 4)
        );
    }

    #[test]
    fn the_span_covers_every_try_and_every_wait() {
        let budget = AttemptBudget::new(Duration::from_secs(120), 2);
        assert_eq!(budget.tries, 3);
        assert_eq!(
            budget.sending_span(),
            START_SLACK + Duration::from_secs(360) + Duration::from_millis(1500)
        );
        assert_eq!(budget.claim_span(), budget.sending_span() + CLAIM_GRACE);
        assert!(budget.fits(Duration::ZERO, Duration::ZERO));
        assert!(budget.fits(Duration::from_secs(240), Duration::from_millis(1500)));
        // A Retry-After that would push the last try past the span is not waited for.
        assert!(!budget.fits(Duration::from_secs(241), Duration::from_secs(20)));
    }

    #[test]
    fn extreme_settings_saturate() {
        let budget = AttemptBudget::new(Duration::MAX, u32::MAX);
        assert_eq!(budget.tries, 1 + MAX_RETRIES);
        assert_eq!(budget.sending_span(), Duration::MAX);
        assert_eq!(budget.claim_span(), Duration::MAX);
        assert!(budget.fits(Duration::MAX, Duration::MAX));
        let tiny = AttemptBudget::new(Duration::from_nanos(1), 0);
        assert_eq!(tiny.sending_span(), START_SLACK + Duration::from_nanos(1));
        assert!(!tiny.fits(START_SLACK, Duration::from_secs(1)));
    }
}
