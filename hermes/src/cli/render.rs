//! How cards look on stdout: upstream's JSON shapes (same keys, same order) and short text.

use serde_json::{json, Value};

use crate::core::SpawnState;
use crate::store::{DecomposeState, Event, Task};

/// A card as upstream's `--json` prints it, plus our `decompose` object when the card has
/// decompose bookkeeping.
pub fn task_json(task: &Task) -> Value {
    let mut v = json!({
        "id": task.id,
        "title": task.title,
        "body": task.body,
        "assignee": task.assignee,
        "status": task.status.as_str(),
        "priority": task.priority,
        "tenant": task.tenant,
        "workspace_kind": task.workspace_kind,
        "workspace_path": task.workspace_path,
        "branch_name": task.branch_name,
        "project_id": task.project_id,
        "created_by": task.created_by,
        "created_at": task.created_at,
        "started_at": task.started_at,
        "completed_at": task.completed_at,
        "result": task.result,
        "skills": task.skills,
        "max_retries": task.max_retries,
        "session_id": task.session_id,
        "workflow_template_id": task.workflow_template_id,
        "current_step_key": task.current_step_key,
    });
    if let (Some(state), Some(obj)) = (&task.decompose, v.as_object_mut()) {
        obj.insert("decompose".into(), decompose_json(state));
    }
    if let (Some(state), Some(obj)) = (&task.spawn, v.as_object_mut()) {
        obj.insert("spawn".into(), spawn_json(state));
    }
    v
}

/// `{"spawns", "failures", "parked", "next_spawn_at", "last_error"}`: the card's workers
/// (`failures` counts the runs charged against `kanban.failure_limit`, a run in flight
/// included); `next_spawn_at` rounded up like `next_attempt_at`.
pub fn spawn_json(state: &SpawnState) -> Value {
    json!({
        "spawns": state.spawns,
        "failures": state.failures,
        "parked": state.parked_at_ms.is_some(),
        "next_spawn_at": state.due_at_ms.map(|ms| ms.div_euclid(1000) + i64::from(ms.rem_euclid(1000) != 0)),
        "last_error": state.last_error,
    })
}

/// `{"attempts", "parked", "next_attempt_at", "opt_out", "last_error"}`; `next_attempt_at` is
/// in unix seconds like every other `*_at` key, rounded up so the card is never due earlier
/// than shown.
pub fn decompose_json(state: &DecomposeState) -> Value {
    json!({
        "attempts": state.attempts,
        "parked": state.parked_at_ms.is_some(),
        "next_attempt_at": state.due_at_ms.map(|ms| ms.div_euclid(1000) + i64::from(ms.rem_euclid(1000) != 0)),
        "opt_out": state.opt_out,
        "last_error": state.last_error,
    })
}

/// An event as upstream's `show --json` prints it.
pub fn event_json(e: &Event) -> Value {
    json!({
        "kind": e.kind,
        "payload": e.payload,
        "created_at": e.created_at,
        "run_id": e.run_id,
    })
}

/// Text with control characters (newlines, tabs, escapes) made visible, so one card is always
/// one terminal line and a hostile title cannot repaint the screen (`core::text::one_line`).
pub fn one_line(text: &str) -> String {
    crate::core::text::one_line(text).into_owned()
}

/// `1 call`, `2 calls`: a count with its noun in the right number. `noun` is the singular;
/// the plural adds `s`, or `ies` in place of a final `y` (`try`, `tries`).
pub fn count(n: impl TryInto<u64>, noun: &str) -> String {
    let n = n.try_into().unwrap_or(u64::MAX);
    if n == 1 {
        return format!("1 {noun}");
    }
    match noun.strip_suffix('y') {
        Some(stem) => format!("{n} {stem}ies"),
        None => format!("{n} {noun}s"),
    }
}

/// Whether one of the card's automatic budgets is spent — its decompose attempts, or its
/// workers' runs (`kanban unpark` gives it a fresh one).
pub fn is_parked(task: &Task) -> bool {
    task.decompose
        .as_ref()
        .is_some_and(|d| d.parked_at_ms.is_some())
        || task
            .spawn
            .as_ref()
            .is_some_and(|s| s.parked_at_ms.is_some())
}

/// What a parked card's text shows before its title in `list`.
pub const PARKED_MARK: &str = "[parked]";

/// The `list` cells of a card: id, status, assignee, then [`PARKED_MARK`] on a parked card
/// and the title.
pub fn task_cells(task: &Task) -> Vec<String> {
    let assignee = task
        .assignee
        .as_deref()
        .map(one_line)
        .unwrap_or_else(|| "-".to_owned());
    let mark = if is_parked(task) {
        format!("{PARKED_MARK} ")
    } else {
        String::new()
    };
    vec![
        task.id.clone(),
        task.status.as_str().to_owned(),
        assignee,
        format!("{mark}{}", one_line(&task.title)),
    ]
}

/// `list`'s lines, their columns aligned (a header row first when `header`; scripts read the
/// lines, so only on a terminal).
pub fn task_lines(tasks: &[Task], header: bool) -> Vec<String> {
    let rows: Vec<Vec<String>> = header
        .then(|| {
            ["ID", "STATUS", "ASSIGNEE", "TITLE"]
                .map(str::to_owned)
                .to_vec()
        })
        .into_iter()
        .chain(tasks.iter().map(task_cells))
        .collect();
    super::table::aligned(&rows, &[])
}

/// How `show` and `usage` explain the attempt counter: it counts the current budget only.
pub const ATTEMPTS_EXPLAINED: &str = "attempts count the card's current automatic budget \
     (kanban.decompose_max_attempts): `hermes kanban unpark` starts a fresh one, and an attempt \
     retried after a transient error makes more than one call, so a card may show more calls \
     than attempts";

pub use crate::clock::shown;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_in_text_output() {
        assert_eq!(one_line("a\nb\tc\u{1b}[2J 🚀"), "a\\nb\\tc\\u{1b}[2J 🚀");
    }

    #[test]
    fn counts_read_right() {
        assert_eq!(count(1u32, "call"), "1 call");
        assert_eq!(count(0u32, "call"), "0 calls");
        assert_eq!(count(2u64, "attempt"), "2 attempts");
        assert_eq!(count(1u32, "try"), "1 try");
        assert_eq!(count(3u32, "try"), "3 tries");
    }

    #[test]
    fn next_attempt_rounds_up_to_the_second() {
        let state = DecomposeState {
            attempts: 1,
            last_attempt_at_ms: None,
            last_error: None,
            due_at_ms: Some(10_001),
            parked_at_ms: None,
            opt_out: false,
        };
        assert_eq!(decompose_json(&state)["next_attempt_at"], 11);
        let exact = DecomposeState {
            due_at_ms: Some(10_000),
            ..state
        };
        assert_eq!(decompose_json(&exact)["next_attempt_at"], 10);
    }
}
