//! Failures that concern the whole provider account, not one card: every automatic attempt
//! pauses while they last (B5).

use std::time::Duration;

use super::backoff::{Backoff, MAX_BACKOFF};

/// Cap on a provider's `Retry-After` (B5).
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);
/// The shortest board-wide pause a `Retry-After` sets: `0`, `0.001` or a date already past
/// would otherwise let the next tick knock again at once.
pub const MIN_RETRY_AFTER: Duration = Duration::from_secs(1);
/// Board-wide pause after a 429 that carried no usable `Retry-After` (none, a negative number,
/// or text that is neither seconds nor an HTTP date).
pub const DEFAULT_RATE_LIMIT_PAUSE: Duration = Duration::from_secs(60);

/// The board-wide pause after a 429 whose `Retry-After` read as `retry_after` (a number too
/// large to represent reads as [`Duration::MAX`]): between [`MIN_RETRY_AFTER`] and
/// [`MAX_RETRY_AFTER`], [`DEFAULT_RATE_LIMIT_PAUSE`] when it was unreadable.
pub fn rate_limit_pause(retry_after: Option<Duration>) -> Duration {
    retry_after
        .unwrap_or(DEFAULT_RATE_LIMIT_PAUSE)
        .clamp(MIN_RETRY_AFTER, MAX_RETRY_AFTER)
}

/// `Retry-After 30s`, or `Retry-After past the 3600 s cap`, for messages.
pub fn describe_retry_after(after: Duration) -> String {
    if after > MAX_RETRY_AFTER {
        format!("Retry-After past the {} s cap", MAX_RETRY_AFTER.as_secs())
    } else {
        format!("Retry-After {}s", after.as_secs_f64())
    }
}

/// `auto-decompose paused for 60s`: how long a board-wide pause just recorded lasts, in the
/// words the gateway's WARN and a stopped sweep share.
pub fn paused_for(lasts: Duration) -> String {
    format!("auto-decompose paused for {:.0}s", lasts.as_secs_f64())
}

/// A provider-wide fault: the board pauses every card, not just this one (B5).
#[derive(Debug, Clone, PartialEq)]
pub enum ProviderFault {
    /// 401/403: the key is wrong or revoked.
    Auth { status: u16 },
    /// 402: the account cannot pay.
    Billing { status: u16 },
    /// 429: the provider asked us to slow down.
    RateLimited { retry_after: Option<Duration> },
}

impl ProviderFault {
    /// How long every automatic attempt should wait after this fault.
    pub fn pause_for(&self, provider_cooldown: Duration) -> Duration {
        match self {
            Self::Auth { .. } | Self::Billing { .. } => provider_cooldown,
            Self::RateLimited { retry_after } => rate_limit_pause(*retry_after),
        }
    }

    /// A short label for logs and the pause record.
    pub fn describe(&self) -> String {
        match self {
            Self::Auth { status } => format!("provider refused the API key (HTTP {status})"),
            Self::Billing { status } => format!("provider requires payment (HTTP {status})"),
            Self::RateLimited {
                retry_after: Some(after),
            } => format!(
                "provider rate limit (HTTP 429, {})",
                describe_retry_after(*after)
            ),
            Self::RateLimited { retry_after: None } => "provider rate limit (HTTP 429)".to_owned(),
        }
    }
}

/// A provider fault and the board-wide pause it was recorded with.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultPause {
    pub fault: ProviderFault,
    /// How long the pause lasts from when it was recorded.
    pub lasts: Duration,
    /// When it ends (unix ms).
    pub until_ms: i64,
}

/// The shortest board-wide pause after a request that never reached the provider: even with
/// `decompose_backoff_seconds: 0`, a refused port is not knocked on every tick.
pub const UNREACHABLE_MIN_PAUSE: Duration = Duration::from_secs(1);

/// The board-wide pause after the `streak`-th request in a row that never reached the provider
/// (connection refused, DNS, TLS): the card backoff's base (at least
/// [`UNREACHABLE_MIN_PAUSE`]), doubling per request in the streak, capped like a card's backoff.
/// Such a request costs nothing, so no card's budget pays for it (B5).
pub fn unreachable_pause(backoff_base: Duration, streak: u32) -> Duration {
    Backoff {
        base: backoff_base.max(UNREACHABLE_MIN_PAUSE),
        cap: MAX_BACKOFF,
    }
    .after_failure(streak)
}

/// The board-wide pause recorded because the provider could not be reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnreachablePause {
    /// When it ends (unix ms).
    pub until_ms: i64,
    /// How long it lasts from when it was recorded.
    pub lasts: Duration,
    /// Requests in a row that never reached the provider, this one included.
    pub streak: u32,
    /// What the connection attempt said.
    pub reason: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_is_told_in_whole_seconds() {
        assert_eq!(
            paused_for(Duration::from_secs(900)),
            "auto-decompose paused for 900s"
        );
        assert_eq!(
            paused_for(Duration::from_millis(1_400)),
            "auto-decompose paused for 1s"
        );
    }

    #[test]
    fn an_unreachable_provider_pauses_longer_each_time() {
        let base = Duration::from_millis(50);
        assert_eq!(unreachable_pause(base, 1), Duration::from_secs(1));
        assert_eq!(unreachable_pause(base, 2), Duration::from_secs(2));
        assert_eq!(unreachable_pause(base, 4), Duration::from_secs(8));
        assert_eq!(unreachable_pause(base, u32::MAX), MAX_BACKOFF);
        let minute = Duration::from_secs(60);
        assert_eq!(unreachable_pause(minute, 1), minute);
        assert_eq!(unreachable_pause(Duration::MAX, 1), MAX_BACKOFF);
    }

    #[test]
    fn provider_faults_pause_for_the_right_time() {
        let cooldown = Duration::from_secs(900);
        assert_eq!(
            ProviderFault::Billing { status: 402 }.pause_for(cooldown),
            cooldown
        );
        assert_eq!(
            ProviderFault::Auth { status: 401 }.pause_for(cooldown),
            cooldown
        );
        let hour = Duration::from_secs(3600);
        let huge = ProviderFault::RateLimited {
            retry_after: Some(Duration::from_secs(99_999)),
        };
        assert_eq!(huge.pause_for(cooldown), hour);
        let none = ProviderFault::RateLimited { retry_after: None };
        assert_eq!(none.pause_for(cooldown), DEFAULT_RATE_LIMIT_PAUSE);
    }

    #[test]
    fn every_retry_after_pauses_between_the_floor_and_the_cap() {
        let pause = |secs: Option<f64>| rate_limit_pause(secs.map(Duration::from_secs_f64));
        assert_eq!(pause(Some(0.0)), MIN_RETRY_AFTER);
        assert_eq!(pause(Some(0.001)), MIN_RETRY_AFTER);
        assert_eq!(pause(Some(1.5)), Duration::from_millis(1500));
        assert_eq!(pause(Some(90.0)), Duration::from_secs(90));
        assert_eq!(pause(None), DEFAULT_RATE_LIMIT_PAUSE);
        assert_eq!(rate_limit_pause(Some(Duration::MAX)), MAX_RETRY_AFTER);
        assert_eq!(
            describe_retry_after(Duration::MAX),
            "Retry-After past the 3600 s cap"
        );
        assert_eq!(
            describe_retry_after(Duration::from_secs(2)),
            "Retry-After 2s"
        );
    }
}
