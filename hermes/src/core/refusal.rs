//! Why an attempt was not made (and nothing was paid).

use super::time::utc_ms;

/// Why no attempt was recorded (and nothing paid).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BeginRefusal {
    #[error("no such task: {0}")]
    NoSuchTask(String),
    /// Another attempt holds the card: its request may still be on its way (B1, B4).
    #[error("claimed by a decompose attempt in flight ({by}) until at least {}", utc_ms(*until_ms))]
    Claimed { until_ms: i64, by: String },
    #[error("task is not in triage (status {status}); nothing to decompose")]
    NotInTriage { status: String },
    #[error("parked after {attempts} failed attempts; decompose it by hand to try again")]
    Parked { attempts: u32 },
    #[error("in backoff until {}", utc_ms(*until_ms))]
    InBackoff { until_ms: i64 },
    #[error("created with --no-auto-decompose")]
    OptedOut,
    #[error("a human hold: {why}")]
    Hold { why: String },
    #[error("not scheduled for automatic decomposition")]
    NotScheduled,
    #[error("auto-decompose is paused until {}: {reason}", utc_ms(*until_ms))]
    Paused { until_ms: i64, reason: String },
    #[error("{}", ceiling_reached(*calls, *limit))]
    CeilingReached { calls: u64, limit: u32 },
    /// The attempt's own claim expired and another attempt took the card over (B1, B4).
    #[error("this attempt's claim on the card expired and another attempt took the card over")]
    ClaimLost,
    /// The card's text cannot be read as text (another tool wrote it): nothing faithful could be
    /// sent for it.
    #[error("{why}; nothing can be sent for it (fix the row, then `hermes kanban unpark` it)")]
    Unreadable { why: String },
}

/// Why the hourly ceiling holds automatic attempts back (B6): the words a refused attempt, the
/// gateway's waiting WARN and a stopped sweep share.
pub fn ceiling_reached(calls: u64, limit: u32) -> String {
    format!("{calls} paid calls in the last hour reached kanban.decompose_calls_per_hour ({limit})")
}

impl BeginRefusal {
    /// The board-wide guard this refusal is (`pause`, `ceiling`), which an explicit `kanban
    /// decompose ID --force` may go past; `None` for a refusal about the card itself.
    pub fn board_guard(&self) -> Option<&'static str> {
        match self {
            BeginRefusal::Paused { .. } => Some("pause"),
            BeginRefusal::CeilingReached { .. } => Some("ceiling"),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ceiling_reads_the_same_wherever_it_is_told() {
        let words = "7 paid calls in the last hour reached kanban.decompose_calls_per_hour (7)";
        assert_eq!(ceiling_reached(7, 7), words);
        assert_eq!(
            BeginRefusal::CeilingReached { calls: 7, limit: 7 }.to_string(),
            words
        );
    }
}
