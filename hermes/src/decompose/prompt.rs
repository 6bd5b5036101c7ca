//! The two messages of a decompose request.
//!
//! The user message starts with `Task id: <id>` on its own line: providers and recorders key
//! replies on it, so the system prompt never contains that phrase and card text comes after it.
//! Card text is capped so that a huge card cannot turn into a huge (and costly) request.

use std::fmt::Write as _;

use crate::aux_client::ChatMessage;

/// Card titles longer than this many characters are cut in the prompt.
pub const MAX_PROMPT_TITLE_CHARS: usize = 400;
/// Card bodies longer than this many characters are cut in the prompt.
pub const MAX_PROMPT_BODY_CHARS: usize = 4000;
/// At most this many roster names are listed.
pub const MAX_PROMPT_ROSTER_NAMES: usize = 50;
/// Roster names longer than this many characters are cut in the prompt.
pub const MAX_PROMPT_ROSTER_NAME_CHARS: usize = 80;

/// The card being decomposed, as the prompt needs it.
#[derive(Debug, Clone, Copy)]
pub struct PromptCard<'a> {
    /// Task id, e.g. `t_0123abcd`.
    pub id: &'a str,
    /// Card title.
    pub title: &'a str,
    /// Card body, if any.
    pub body: Option<&'a str>,
}

/// The system prompt and the user message for one decompose attempt.
pub fn build_messages(
    card: &PromptCard<'_>,
    roster: &[String],
    default_assignee: &str,
    max_children: usize,
) -> Vec<ChatMessage> {
    vec![
        ChatMessage::system(system_prompt(max_children)),
        ChatMessage::user(user_message(card, roster, default_assignee, max_children)),
    ]
}

fn system_prompt(max_children: usize) -> String {
    format!(
        "You plan work on a kanban board. You receive one card and decide whether it should be \
split into smaller cards or kept as a single, better-specified card.\n\
\n\
Answer with exactly one JSON object and nothing else: no prose before or after it.\n\
\n\
To split the card, answer:\n\
{{\"fanout\": true, \"rationale\": \"<why this split>\", \"tasks\": [\n\
  {{\"title\": \"<short imperative title>\", \"body\": \"<what done looks like>\", \
\"assignee\": \"<a name from the roster, or null>\", \"parents\": [<indices>]}}\n\
]}}\n\
- Use between 2 and {max_children} tasks; never more than {max_children}.\n\
- \"parents\" lists the 0-based positions, in this same \"tasks\" array, of the tasks that must \
finish before this one can start. Use [] when it can start at once. A task never lists itself, \
and the links must not form a loop.\n\
- Every task needs a non-empty title of at most 200 characters.\n\
\n\
To keep it as one card, answer:\n\
{{\"fanout\": false, \"rationale\": \"<why no split>\", \"title\": \"<clearer title or null>\", \
\"body\": \"<clearer description or null>\", \"assignee\": \"<a name from the roster, or null>\"}}\n\
- Give at least one of title and body.\n\
\n\
Only use assignee names from the roster you are given; use null when none fits."
    )
}

fn user_message(
    card: &PromptCard<'_>,
    roster: &[String],
    default_assignee: &str,
    max_children: usize,
) -> String {
    let mut message = String::new();
    // Infallible: writing to a String cannot fail.
    let _ = writeln!(message, "Task id: {}", card.id);

    let (title, title_cut) = cap_chars(card.title.trim(), MAX_PROMPT_TITLE_CHARS);
    let title_note = if title_cut { " (cut short)" } else { "" };
    let _ = writeln!(message, "Title{title_note}: {title}");

    match card.body.map(str::trim).filter(|body| !body.is_empty()) {
        Some(body) => {
            let (body, body_cut) = cap_chars(body, MAX_PROMPT_BODY_CHARS);
            let body_note = if body_cut {
                format!(" (only the first {MAX_PROMPT_BODY_CHARS} characters)")
            } else {
                String::new()
            };
            let _ = writeln!(message, "\nBody{body_note}:\n{body}");
        }
        None => {
            let _ = writeln!(message, "\nBody: (none given)");
        }
    }

    let _ = writeln!(message, "\nRoster of assignees:");
    if roster.is_empty() {
        let _ = writeln!(message, "(empty: use null for every assignee)");
    }
    for name in roster.iter().take(MAX_PROMPT_ROSTER_NAMES) {
        let (name, _) = cap_chars(name.trim(), MAX_PROMPT_ROSTER_NAME_CHARS);
        let _ = writeln!(message, "- {name}");
    }
    if roster.len() > MAX_PROMPT_ROSTER_NAMES {
        let _ = writeln!(
            message,
            "(and {} more not listed)",
            roster.len() - MAX_PROMPT_ROSTER_NAMES
        );
    }

    let _ = writeln!(
        message,
        "\nDefault assignee (used for null or unknown names): {default_assignee}"
    );
    let _ = write!(
        message,
        "Maximum number of tasks in a split: {max_children}"
    );
    message
}

/// The first `max` characters, and whether anything was cut.
fn cap_chars(text: &str, max: usize) -> (&str, bool) {
    match text.char_indices().nth(max) {
        Some((cut, _)) => (&text[..cut], true),
        None => (text, false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roster() -> Vec<String> {
        vec!["default".to_owned(), "backend-dev".to_owned()]
    }

    fn user_text(card: &PromptCard<'_>) -> String {
        let messages = build_messages(card, &roster(), "default", 8);
        assert_eq!(messages.len(), 2);
        assert_eq!(messages[0].role, "system");
        assert_eq!(messages[1].role, "user");
        messages[1].content.clone()
    }

    #[test]
    fn first_line_is_the_task_id() {
        let text = user_text(&PromptCard {
            id: "t_0123abcd",
            title: "Ship it",
            body: Some("all of it"),
        });
        assert_eq!(text.lines().next(), Some("Task id: t_0123abcd"));
        assert!(text.contains("Ship it") && text.contains("all of it"));
        assert!(text.contains("- backend-dev"));
        assert!(text.contains("Default assignee (used for null or unknown names): default"));
    }

    #[test]
    fn system_prompt_never_carries_a_task_id_line_and_names_the_bound() {
        let messages = build_messages(
            &PromptCard {
                id: "t_1",
                title: "x",
                body: None,
            },
            &[],
            "d",
            5,
        );
        assert!(!messages[0].content.contains("Task id:"));
        assert!(messages[0].content.contains("never more than 5"));
        assert!(messages[0].content.contains("0-based"));
    }

    #[test]
    fn missing_or_blank_body_gets_a_placeholder() {
        for body in [None, Some("  \n ")] {
            let text = user_text(&PromptCard {
                id: "t_1",
                title: "x",
                body,
            });
            assert!(text.contains("Body: (none given)"), "{text}");
        }
    }

    #[test]
    fn huge_title_and_body_are_capped() {
        let title = "T".repeat(10_000);
        let body = "B".repeat(1_000_000);
        let text = user_text(&PromptCard {
            id: "t_1",
            title: &title,
            body: Some(&body),
        });
        assert!(text.contains(&"T".repeat(MAX_PROMPT_TITLE_CHARS)));
        assert!(!text.contains(&"T".repeat(MAX_PROMPT_TITLE_CHARS + 1)));
        assert!(text.contains(&"B".repeat(MAX_PROMPT_BODY_CHARS)));
        assert!(!text.contains(&"B".repeat(MAX_PROMPT_BODY_CHARS + 1)));
        assert!(text.len() < 6_000, "user message is {} bytes", text.len());
    }

    #[test]
    fn unicode_is_cut_on_character_boundaries() {
        let title = "🦀é".repeat(1_000);
        let body = "ß✓\u{301}".repeat(5_000);
        let text = user_text(&PromptCard {
            id: "t_1",
            title: &title,
            body: Some(&body),
        });
        let title_line = text.lines().nth(1).unwrap_or_default();
        let shown = title_line
            .split_once(": ")
            .map(|(_, t)| t)
            .unwrap_or_default();
        assert_eq!(shown.chars().count(), MAX_PROMPT_TITLE_CHARS);
    }

    #[test]
    fn long_roster_is_capped() {
        let roster: Vec<String> = (0..500).map(|i| format!("worker-{i}")).collect();
        let messages = build_messages(
            &PromptCard {
                id: "t_1",
                title: "x",
                body: None,
            },
            &roster,
            "d",
            8,
        );
        let text = &messages[1].content;
        assert!(text.contains("- worker-49") && !text.contains("- worker-50\n"));
        assert!(text.contains("(and 450 more not listed)"));
    }
}
