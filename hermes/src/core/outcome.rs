//! How one decompose attempt ended: one value, built once at the end of the attempt; and how
//! each of its requests ended, as the ledger records it.

use serde_json::{json, Value};

use super::fault::{FaultPause, UnreachablePause};
use super::refusal::BeginRefusal;

/// How one request ended, as the `hermes_aux_ledger.outcome` column holds it. [`Self::as_str`] is
/// the only spelling of each value: SQL gets the values as bound parameters, so the attempt that
/// writes a row, the guards, recovery and `kanban usage` cannot read it under different words.
/// The strings are the board's bytes, which other tools read: never change one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LedgerOutcome {
    /// The provider answered with a usable reply.
    Ok,
    /// The row is open: its request is on its way (or its process died before closing it).
    InFlight,
    /// Its process ended before recording how it went: it may have been billed.
    Unknown,
    /// The request never reached the provider: not billed, not counted.
    Unreachable,
    /// The provider answered, but the reply was unusable: a paid call wasted.
    Rejected,
    /// The gateway's shutdown stopped the request.
    Aborted,
    Auth,
    Billing,
    RateLimited,
    ClientError,
    ServerError,
    Timeout,
    Transport,
    Malformed,
    TooLarge,
    InvalidSettings,
}

impl LedgerOutcome {
    pub const ALL: [LedgerOutcome; 16] = [
        Self::Ok,
        Self::InFlight,
        Self::Unknown,
        Self::Unreachable,
        Self::Rejected,
        Self::Aborted,
        Self::Auth,
        Self::Billing,
        Self::RateLimited,
        Self::ClientError,
        Self::ServerError,
        Self::Timeout,
        Self::Transport,
        Self::Malformed,
        Self::TooLarge,
        Self::InvalidSettings,
    ];

    /// The value in the ledger.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::InFlight => "in_flight",
            Self::Unknown => "unknown",
            Self::Unreachable => "unreachable",
            Self::Rejected => "rejected",
            Self::Aborted => "aborted",
            Self::Auth => "auth",
            Self::Billing => "billing",
            Self::RateLimited => "rate_limited",
            Self::ClientError => "client_error",
            Self::ServerError => "server_error",
            Self::Timeout => "timeout",
            Self::Transport => "transport",
            Self::Malformed => "malformed",
            Self::TooLarge => "too_large",
            Self::InvalidSettings => "invalid_settings",
        }
    }

    /// The outcome a ledger value spells, if this build knows it.
    pub fn parse(text: &str) -> Option<LedgerOutcome> {
        Self::ALL.into_iter().find(|o| o.as_str() == text)
    }
}

impl std::fmt::Display for LedgerOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which half of the board's spend a ledger row belongs to (`hermes_aux_ledger.purpose`): a
/// decompose call, or one turn of a worker. Both halves share the board's pause and hourly
/// ceiling (one provider key, one pause, one ceiling, whichever half spends); `kanban usage`
/// shows them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Half {
    Decompose,
    Worker,
}

impl Half {
    pub const ALL: [Half; 2] = [Half::Decompose, Half::Worker];

    /// The value in the ledger's `purpose` column.
    pub const fn as_str(self) -> &'static str {
        match self {
            Half::Decompose => "decompose",
            Half::Worker => "worker",
        }
    }
}

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
    fn every_ledger_outcome_round_trips_through_the_bytes_the_board_held() {
        // Written out a second time on purpose: these are the values boards already hold.
        let held = [
            "ok",
            "in_flight",
            "unknown",
            "unreachable",
            "rejected",
            "aborted",
            "auth",
            "billing",
            "rate_limited",
            "client_error",
            "server_error",
            "timeout",
            "transport",
            "malformed",
            "too_large",
            "invalid_settings",
        ];
        let spelt: Vec<&str> = LedgerOutcome::ALL.iter().map(|o| o.as_str()).collect();
        assert_eq!(spelt, held);
        for outcome in LedgerOutcome::ALL {
            assert_eq!(LedgerOutcome::parse(outcome.as_str()), Some(outcome));
            assert_eq!(outcome.to_string(), outcome.as_str());
        }
        assert_eq!(LedgerOutcome::parse("OK"), None);
        assert_eq!(LedgerOutcome::parse("reclaimed"), None);
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
