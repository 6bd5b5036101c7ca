//! One bounded decompose attempt: prompt, reply parsing and whole-graph validation.
pub mod plan;
pub mod prompt;
pub mod reply;

pub use plan::{ChildSpec, Plan};
pub use prompt::{build_messages, PromptCard};
pub use reply::{parse_reply, GraphLimits, Rejection, RejectionKind};
