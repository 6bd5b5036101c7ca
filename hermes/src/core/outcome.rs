//! How one decompose attempt ended: one value, built once at the end of the attempt.

use serde_json::{json, Value};

use super::fault::{FaultPause, UnreachablePause};
use super::refusal::BeginRefusal;

/// What an applied reply did to the board.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// The card was split; the children in reply order.
    Fanout { child_ids: Vec<String> },
    /// The card was specified in place; its new title when the reply changed it.
    Single { new_title: Option<String> },
}

/// How one attempt ended.
#[derive(Debug, Clone, PartialEq)]
pub enum AttemptOutcome {
    /// The reply was valid and its graph (or spec) is on the board.
    Applied {
        task_id: String,
        /// The card's attempt number.
        attempt: u32,
        /// HTTP requests this attempt sent.
        requests: u32,
        applied: Applied,
    },
    /// The reply was valid, but the card had left triage meanwhile: nothing was written (B4).
    LeftTriage {
        task_id: String,
        attempt: u32,
        requests: u32,
        /// The card's status when the reply came back.
        status: String,
    },
    /// The attempt was paid for (or may have been) and produced nothing usable.
    Failed {
        task_id: String,
        attempt: u32,
        requests: u32,
        reason: String,
        /// This failure spent the card's last automatic attempt.
        parked: bool,
        /// Set when the failure was provider-wide; the pause was recorded with the failure.
        fault: Option<FaultPause>,
    },
    /// No request reached the provider (it could not be reached, or none could be sent), so
    /// nothing was paid and the attempt was not counted against the card's budget.
    NothingSent {
        task_id: String,
        reason: String,
        /// Set when the provider could not be reached; the board-wide pause was recorded.
        unreachable: Option<UnreachablePause>,
    },
    /// Not attempted, and nothing was paid.
    Refused {
        task_id: String,
        refusal: BeginRefusal,
    },
    /// The attempt's claim expired while it ran (its holder was frozen, or its life could not be
    /// checked) and another attempt took the card over: whatever came back was not applied and
    /// nothing was recorded on the card (the attempt that took over closed this one).
    Superseded {
        task_id: String,
        attempt: u32,
        requests: u32,
    },
}

impl AttemptOutcome {
    /// The card.
    pub fn task_id(&self) -> &str {
        match self {
            Self::Applied { task_id, .. }
            | Self::LeftTriage { task_id, .. }
            | Self::Failed { task_id, .. }
            | Self::NothingSent { task_id, .. }
            | Self::Refused { task_id, .. }
            | Self::Superseded { task_id, .. } => task_id,
        }
    }

    /// Whether the card was decomposed or specified.
    pub fn ok(&self) -> bool {
        matches!(self, Self::Applied { .. })
    }

    /// HTTP requests sent (0 when refused).
    pub fn requests(&self) -> u32 {
        match self {
            Self::Applied { requests, .. }
            | Self::LeftTriage { requests, .. }
            | Self::Failed { requests, .. }
            | Self::Superseded { requests, .. } => *requests,
            Self::NothingSent { .. } | Self::Refused { .. } => 0,
        }
    }

    /// The card's attempt number (0 when refused).
    pub fn attempt(&self) -> u32 {
        match self {
            Self::Applied { attempt, .. }
            | Self::LeftTriage { attempt, .. }
            | Self::Failed { attempt, .. }
            | Self::Superseded { attempt, .. } => *attempt,
            Self::NothingSent { .. } | Self::Refused { .. } => 0,
        }
    }

    /// The provider-wide fault this attempt ran into, with the pause recorded for it.
    pub fn fault(&self) -> Option<&FaultPause> {
        match self {
            Self::Failed { fault, .. } => fault.as_ref(),
            _ => None,
        }
    }

    /// The board-wide pause recorded because the provider could not be reached.
    pub fn unreachable(&self) -> Option<&UnreachablePause> {
        match self {
            Self::NothingSent { unreachable, .. } => unreachable.as_ref(),
            _ => None,
        }
    }

    /// One line saying how it ended.
    pub fn reason(&self) -> String {
        match self {
            Self::Applied {
                applied: Applied::Fanout { child_ids },
                ..
            } => format!("decomposed into {} children", child_ids.len()),
            Self::Applied {
                applied: Applied::Single { .. },
                ..
            } => "single task (no fanout)".to_owned(),
            Self::LeftTriage { status, .. } => {
                format!("card left triage during the call (status {status}); nothing applied")
            }
            Self::Failed { reason, .. } => reason.clone(),
            Self::NothingSent { reason, .. } => {
                format!("{reason}; nothing was sent, so the attempt is not counted")
            }
            Self::Refused { refusal, .. } => refusal.to_string(),
            Self::Superseded { attempt, .. } => format!(
                "{}; the answer to attempt {attempt} was not applied",
                BeginRefusal::ClaimLost
            ),
        }
    }

    /// The children of an applied fan-out.
    pub fn child_ids(&self) -> Option<&[String]> {
        match self {
            Self::Applied {
                applied: Applied::Fanout { child_ids },
                ..
            } => Some(child_ids),
            _ => None,
        }
    }

    /// The `kanban decompose --json` line: `task_id, ok, reason, fanout, child_ids, new_title`.
    pub fn json_line(&self) -> Value {
        let (fanout, child_ids, new_title) = match self {
            Self::Applied {
                applied: Applied::Fanout { child_ids },
                ..
            } => (true, Some(child_ids.clone()), None),
            Self::Applied {
                applied: Applied::Single { new_title },
                ..
            } => (false, None, new_title.clone()),
            _ => (false, None, None),
        };
        json!({
            "task_id": self.task_id(),
            "ok": self.ok(),
            "reason": self.reason(),
            "fanout": fanout,
            "child_ids": child_ids,
            "new_title": new_title,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(value: &Value) -> Vec<&str> {
        value
            .as_object()
            .map(|o| o.keys().map(String::as_str).collect())
            .unwrap_or_default()
    }

    #[test]
    fn every_outcome_prints_the_same_json_shape() {
        let shape = [
            "task_id",
            "ok",
            "reason",
            "fanout",
            "child_ids",
            "new_title",
        ];
        let fanout = AttemptOutcome::Applied {
            task_id: "t_1".into(),
            attempt: 1,
            requests: 1,
            applied: Applied::Fanout {
                child_ids: vec!["t_2".into(), "t_3".into()],
            },
        };
        assert_eq!(
            fanout.json_line(),
            json!({"task_id": "t_1", "ok": true, "reason": "decomposed into 2 children",
                   "fanout": true, "child_ids": ["t_2", "t_3"], "new_title": null})
        );
        let single = AttemptOutcome::Applied {
            task_id: "t_1".into(),
            attempt: 1,
            requests: 1,
            applied: Applied::Single {
                new_title: Some("Sharper".into()),
            },
        };
        assert_eq!(single.json_line()["new_title"], json!("Sharper"));
        let failed = AttemptOutcome::Failed {
            task_id: "t_1".into(),
            attempt: 2,
            requests: 3,
            reason: "reply rejected: no JSON".into(),
            parked: false,
            fault: None,
        };
        assert_eq!(
            failed.json_line(),
            json!({"task_id": "t_1", "ok": false, "reason": "reply rejected: no JSON",
                   "fanout": false, "child_ids": null, "new_title": null})
        );
        let left = AttemptOutcome::LeftTriage {
            task_id: "t_1".into(),
            attempt: 1,
            requests: 1,
            status: "running".into(),
        };
        let refused = AttemptOutcome::Refused {
            task_id: "t_1".into(),
            refusal: BeginRefusal::OptedOut,
        };
        assert_eq!(
            refused.json_line()["reason"],
            json!("created with --no-auto-decompose")
        );
        assert_eq!((refused.requests(), refused.attempt()), (0, 0));
        let unsent = AttemptOutcome::NothingSent {
            task_id: "t_1".into(),
            reason: "provider unreachable: connection refused".into(),
            unreachable: None,
        };
        assert_eq!(
            unsent.json_line()["reason"],
            json!("provider unreachable: connection refused; nothing was sent, so the attempt is not counted")
        );
        assert!(!unsent.ok());
        for outcome in [fanout, single, failed, left, refused, unsent] {
            assert_eq!(keys(&outcome.json_line()), shape, "{outcome:?}");
        }
    }
}
