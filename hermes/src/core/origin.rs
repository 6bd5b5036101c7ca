//! Who asked for a decompose attempt.

/// Who asked for an attempt. Only `Manual` ignores the card's budget, backoff and holds: a person
/// chose to pay for it. The board-wide pause and hourly ceiling hold it too, unless the person
/// forces it past them (`kanban decompose ID --force`).
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

    /// Whether the card's automatic guards (budget, backoff, holds) apply; the board-wide ones
    /// (pause, ceiling) apply to every origin but a forced `Manual`.
    pub fn is_automatic(self) -> bool {
        self != Origin::Manual
    }
}
