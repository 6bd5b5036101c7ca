//! One bounded decompose attempt: prompt, reply parsing and whole-graph validation.
pub mod plan;

pub use plan::{ChildSpec, Plan};
