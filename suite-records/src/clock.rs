//! A moment, taken on both clocks at once: the monotonic clock orders and spaces what one
//! process saw (requests, CLI calls, gateway starts), and the wall clock compares it with the
//! times a board's rows hold (unix seconds or milliseconds, written by other processes).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// One moment on both clocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Moment {
    /// On this process's monotonic clock.
    pub at: Instant,
    /// The same moment on the wall clock, as unix milliseconds.
    pub unix_ms: i64,
}

impl Moment {
    /// Now.
    pub fn now() -> Moment {
        Moment::of(Instant::now())
    }

    /// `at` (a moment already past, or now), with its wall-clock time.
    pub fn of(at: Instant) -> Moment {
        Moment {
            at,
            unix_ms: unix_ms_ago(at.elapsed()),
        }
    }
}

/// Unix milliseconds `ago` before now (saturating at the epoch).
pub fn unix_ms_ago(ago: Duration) -> i64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    let then = now.saturating_sub(ago);
    i64::try_from(then.as_millis()).unwrap_or(i64::MAX)
}

/// Unix milliseconds now.
pub fn unix_ms_now() -> i64 {
    unix_ms_ago(Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_moment_is_the_same_on_both_clocks() {
        let before = unix_ms_now();
        let moment = Moment::now();
        let after = unix_ms_now();
        assert!((before..=after).contains(&moment.unix_ms));
        let earlier = Moment::of(moment.at - Duration::from_millis(1500));
        assert!(
            (moment.unix_ms - earlier.unix_ms - 1500).abs() <= 5,
            "{earlier:?} {moment:?}"
        );
    }

    #[test]
    fn a_moment_before_the_epoch_saturates() {
        assert_eq!(unix_ms_ago(Duration::MAX), 0);
    }
}
