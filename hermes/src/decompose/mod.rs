//! One bounded decompose attempt: prompt, reply parsing and whole-graph validation into a
//! [`Plan`] (defined in `core`, so the store can apply it without looking up here).
pub mod attempt;
pub mod prompt;
pub mod reply;

pub use crate::core::{ChildSpec, Plan};
pub use prompt::{build_messages, PromptCard};
pub use reply::{parse_reply, GraphLimits, Rejection, RejectionKind};

use crate::config::{Config, Home};

/// The assignee names a decompose reply may route work to: `default`, each profile directory
/// under `$HERMES_HOME/profiles`, and the configured default assignee and orchestrator. Any
/// other name in a reply falls back to `kanban.default_assignee`.
pub fn roster(home: &Home, config: &Config) -> Vec<String> {
    let mut names = vec![
        "default".to_owned(),
        config.kanban.default_assignee.clone(),
        config.kanban.orchestrator_profile.clone(),
    ];
    if let Ok(entries) = std::fs::read_dir(home.root().join("profiles")) {
        for entry in entries.flatten() {
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            if let (true, Some(name)) = (is_dir, entry.file_name().to_str()) {
                if !name.starts_with('.') {
                    names.push(name.to_owned());
                }
            }
        }
    }
    let mut names: Vec<String> = names
        .into_iter()
        .map(|n| n.trim().to_lowercase())
        .filter(|n| !n.is_empty())
        .collect();
    names.sort();
    names.dedup();
    names
}
