//! Who asked for a decompose attempt.

/// Who asked for an attempt. Only `Manual` ignores the budget, backoff, holds and board guards:
/// a person chose to pay for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Origin {
    /// The gateway's dispatcher tick.
    Gateway,
    /// `kanban decompose --all`.
    Sweep,
    /// `kanban decompose ID`.
    Manual,
}

impl Origin {
    /// The label stored in the ledger and in events.
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Gateway => "gateway",
            Origin::Sweep => "sweep",
            Origin::Manual => "manual",
        }
    }

    /// Whether the board's automatic guards (budget, backoff, holds, pause, ceiling) apply.
    pub fn is_automatic(self) -> bool {
        self != Origin::Manual
    }
}
