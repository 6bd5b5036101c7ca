//! Failures that concern the whole provider account, not one card: every automatic attempt
//! pauses while they last (B5).

use std::time::Duration;

/// Cap on a provider's `Retry-After` (B5).
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);
/// Board-wide pause after a 429 that carried no usable `Retry-After`.
pub const DEFAULT_RATE_LIMIT_PAUSE: Duration = Duration::from_secs(60);

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
            Self::RateLimited { retry_after } => retry_after
                .unwrap_or(DEFAULT_RATE_LIMIT_PAUSE)
                .min(MAX_RETRY_AFTER),
        }
    }

    /// A short label for logs and the pause record.
    pub fn describe(&self) -> String {
        match self {
            Self::Auth { status } => format!("provider refused the API key (HTTP {status})"),
            Self::Billing { status } => format!("provider requires payment (HTTP {status})"),
            Self::RateLimited {
                retry_after: Some(after),
            } => {
                format!(
                    "provider rate limit (HTTP 429, Retry-After {}s)",
                    after.as_secs_f64()
                )
            }
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
