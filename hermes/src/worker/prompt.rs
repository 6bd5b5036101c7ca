//! What a worker's session starts from: the system prompt and the first user message. Every turn
//! of the session carries both, so the card is named in every request (the message is the one
//! the gateway passed with `-q`: `work kanban task <id>`).

use serde_json::{json, Value};

use crate::core::text::cut;

/// The most of a card's title the system prompt carries (as a decompose call's).
pub const MAX_TITLE_BYTES: usize = 400;
/// The most of a card's body the system prompt carries.
pub const MAX_BODY_BYTES: usize = 4000;

/// The message the gateway starts every worker with (`hermes chat -q …`).
pub fn task_message(task_id: &str) -> String {
    format!("work kanban task {task_id}")
}

/// The card a worker is given, as its system prompt shows it.
#[derive(Debug, Clone, Copy)]
pub struct PromptCard<'a> {
    pub task_id: &'a str,
    pub title: &'a str,
    pub body: Option<&'a str>,
    pub profile: &'a str,
    pub max_turns: u32,
}

/// The system prompt: the card, what the tools are for, and the bound on turns.
pub fn system_prompt(card: &PromptCard<'_>) -> String {
    let body = card
        .body
        .map(|b| cut(b, MAX_BODY_BYTES).into_owned())
        .filter(|b| !b.trim().is_empty())
        .unwrap_or_else(|| "(no description)".to_owned());
    format!(
        "You are `{profile}`, a worker on a kanban board, started for one card: {id} (also in \
         $HERMES_KANBAN_TASK).\n\n\
         Title: {title}\n\
         Description:\n{body}\n\n\
         Work through the card with the kanban tools, then end your session with exactly one \
         terminal call:\n\
         - kanban_complete with a short summary when the card's work is done;\n\
         - kanban_block with a reason when you cannot go on: kind `needs_input` or `capability` \
           hands the card to a person, `dependency` waits for an open parent card, `transient` \
           asks for another try later.\n\
         kanban_show reads a card, kanban_comment leaves a note, kanban_heartbeat says you are \
         still working, kanban_create adds a new card for work that is not this one.\n\
         You have at most {turns} turns; a session that ends without a terminal call counts as \
         a failed run of this card.",
        profile = card.profile,
        id = card.task_id,
        title = cut(card.title, MAX_TITLE_BYTES),
        turns = card.max_turns,
    )
}

/// The two messages every request of the session begins with.
pub fn opening(card: &PromptCard<'_>, message: &str) -> Vec<Value> {
    vec![
        json!({"role": "system", "content": system_prompt(card)}),
        json!({"role": "user", "content": message}),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_opens_with_the_card_and_the_gateways_message() {
        let card = PromptCard {
            task_id: "t_0123abcd",
            title: "Ship it",
            body: None,
            profile: "coder",
            max_turns: 30,
        };
        let messages = opening(&card, &task_message("t_0123abcd"));
        assert_eq!(messages.len(), 2);
        assert_eq!(messages[1]["content"], "work kanban task t_0123abcd");
        let system = messages[0]["content"].as_str().unwrap();
        assert!(system.contains("t_0123abcd") && system.contains("Ship it"));
        assert!(system.contains("(no description)") && system.contains("at most 30 turns"));
        // The system prompt never begins a line with the decompose call's `Task id:`.
        assert!(!system.lines().any(|l| l.starts_with("Task id:")));
    }

    #[test]
    fn a_huge_card_makes_a_bounded_prompt() {
        let title = "t".repeat(10_000);
        let body = "b".repeat(100_000);
        let card = PromptCard {
            task_id: "t_1",
            title: &title,
            body: Some(&body),
            profile: "p",
            max_turns: 1,
        };
        assert!(system_prompt(&card).len() < MAX_TITLE_BYTES + MAX_BODY_BYTES + 2_000);
    }
}
