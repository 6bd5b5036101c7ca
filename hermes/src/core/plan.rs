//! What a validated decompose reply asks the board to do. Produced by the reply parser, consumed
//! by the store's apply transaction; nothing here has been checked against the DB yet.

/// One child of a validated fan-out, in reply order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildSpec {
    /// Trimmed, non-empty, at most 200 characters.
    pub title: String,
    /// Kept as the model wrote it (may be empty).
    pub body: String,
    /// A roster name, or the configured default assignee.
    pub assignee: String,
    /// Indices of sibling children this one waits for; validated: in range, not itself, acyclic.
    pub parents: Vec<usize>,
}

/// A whole reply, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Split the card into children (at least one, at most `decompose_max_children`).
    Fanout {
        rationale: String,
        children: Vec<ChildSpec>,
    },
    /// Keep the card as one unit of work with a tightened spec; at least one of title/body is set.
    Single {
        rationale: String,
        title: Option<String>,
        body: Option<String>,
        /// Used only when the card has no assignee yet.
        assignee: String,
    },
}
