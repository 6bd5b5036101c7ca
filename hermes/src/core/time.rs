//! Time as the board stores it, computed without ever overflowing: unix seconds in upstream's
//! columns, unix milliseconds in ours. Every sum saturates, so a huge configured duration means
//! "practically never" instead of wrapping into the past.

use std::time::Duration;

/// A duration in whole milliseconds, saturating at `i64::MAX`.
pub fn ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// `at_ms + duration`, saturating.
pub fn after(at_ms: i64, duration: Duration) -> i64 {
    at_ms.saturating_add(ms(duration))
}

/// Milliseconds from `from_ms` until `until_ms` as seconds, never negative (for messages).
pub fn secs_between(from_ms: i64, until_ms: i64) -> f64 {
    (until_ms.saturating_sub(from_ms) as f64 / 1000.0).max(0.0)
}

/// Unix seconds as `YYYY-MM-DD HH:MM:SS UTC` (for messages that carry no display zone).
pub fn utc(secs: i64) -> String {
    utc_ms(secs.saturating_mul(1000))
}

/// Unix milliseconds as `YYYY-MM-DD HH:MM:SS UTC`.
pub fn utc_ms(ms: i64) -> String {
    format!("{} UTC", timestamp(ms).strftime("%Y-%m-%d %H:%M:%S"))
}

/// Unix milliseconds as a `jiff` timestamp, clamped to the range it can represent (years
/// -9999 to 9999), so that a saturated "never" still has a date to show.
pub fn timestamp(ms: i64) -> jiff::Timestamp {
    jiff::Timestamp::from_millisecond(ms).unwrap_or(if ms < 0 {
        jiff::Timestamp::MIN
    } else {
        jiff::Timestamp::MAX
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(1_795_981_327), "2026-11-29 19:42:07 UTC");
        assert_eq!(utc(-1), "1969-12-31 23:59:59 UTC");
        // The far ends still format instead of overflowing.
        assert!(utc(i64::MAX).ends_with(" UTC"));
        assert!(utc(i64::MIN).ends_with(" UTC"));
        assert!(utc_ms(i64::MAX).ends_with(" UTC"));
    }

    #[test]
    fn sums_saturate() {
        assert_eq!(ms(Duration::MAX), i64::MAX);
        assert_eq!(ms(Duration::from_millis(1500)), 1500);
        assert_eq!(after(i64::MAX - 5, Duration::from_secs(1)), i64::MAX);
        assert_eq!(after(1_000, Duration::from_secs_f64(1e16)), i64::MAX);
        assert_eq!(after(1_000, Duration::from_millis(1)), 1_001);
        assert_eq!(secs_between(5_000, 2_000), 0.0);
        assert_eq!(secs_between(0, 1_500), 1.5);
    }
}
