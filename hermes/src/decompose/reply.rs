//! Turns the decomposer's reply text into a [`Plan`], or rejects it whole.
//!
//! Nothing here is applied partially: the whole graph is checked (size, shapes, parent indices,
//! cycles) before a `Plan` exists, so the store never sees a reply it would have to undo.

use std::collections::VecDeque;
use std::fmt;

use serde_json::{Map, Value};

use crate::aux_client::json_kind;
use crate::core::{ChildSpec, Plan};

/// Titles longer than this many characters are cut (a card title is one line, not a document).
pub const MAX_TITLE_CHARS: usize = 200;

/// What the board allows a reply to ask for.
#[derive(Debug, Clone, Copy)]
pub struct GraphLimits<'a> {
    /// A fan-out with more children is rejected whole.
    pub max_children: usize,
    /// Assignee for children that name none, or a name not on the roster.
    pub default_assignee: &'a str,
    /// Assignees a reply may name.
    pub roster: &'a [String],
}

/// Why a reply was rejected; `reason` names the offending task index where there is one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct Rejection {
    /// Machine-readable class of the failure.
    pub kind: RejectionKind,
    /// One human-readable sentence.
    pub reason: String,
}

/// The class of a [`Rejection`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RejectionKind {
    /// No JSON object could be found in the text.
    NotJson,
    /// The JSON found is not an object.
    NotAnObject,
    /// `fanout` is missing or not a boolean.
    NoFanoutFlag,
    /// More children than `max_children`.
    TooManyChildren,
    /// `tasks` is missing, not an array, or empty.
    EmptyTasks,
    /// A `tasks` entry is not an object.
    TaskNotObject,
    /// A title is missing, not a string, or blank.
    BlankTitle,
    /// A body is neither a string nor null.
    BadBody,
    /// `parents` is not an array.
    BadParents,
    /// A parent index is not an integer.
    ParentNotInteger,
    /// A parent index is negative or not below the number of tasks.
    ParentOutOfRange,
    /// A task names itself as parent.
    SelfParent,
    /// The parent links form a cycle.
    Cycle,
    /// `fanout: false` with neither title nor body.
    EmptySingle,
}

impl RejectionKind {
    /// Stable snake_case label, for event payloads and logs.
    pub fn label(self) -> &'static str {
        match self {
            RejectionKind::NotJson => "not_json",
            RejectionKind::NotAnObject => "not_an_object",
            RejectionKind::NoFanoutFlag => "no_fanout_flag",
            RejectionKind::TooManyChildren => "too_many_children",
            RejectionKind::EmptyTasks => "empty_tasks",
            RejectionKind::TaskNotObject => "task_not_object",
            RejectionKind::BlankTitle => "blank_title",
            RejectionKind::BadBody => "bad_body",
            RejectionKind::BadParents => "bad_parents",
            RejectionKind::ParentNotInteger => "parent_not_integer",
            RejectionKind::ParentOutOfRange => "parent_out_of_range",
            RejectionKind::SelfParent => "self_parent",
            RejectionKind::Cycle => "cycle",
            RejectionKind::EmptySingle => "empty_single",
        }
    }
}

impl fmt::Display for RejectionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

fn reject<T>(kind: RejectionKind, reason: impl Into<String>) -> Result<T, Rejection> {
    Err(Rejection {
        kind,
        reason: reason.into(),
    })
}

/// Parses and validates one decompose reply.
pub fn parse_reply(content: &str, limits: &GraphLimits<'_>) -> Result<Plan, Rejection> {
    let reply = extract_object(content)?;
    let rationale = reply
        .get("rationale")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    match reply.get("fanout") {
        Some(Value::Bool(true)) => parse_fanout(&reply, rationale, limits),
        Some(Value::Bool(false)) => parse_single(&reply, rationale, limits),
        None => reject(RejectionKind::NoFanoutFlag, "reply has no \"fanout\" flag"),
        Some(other) => reject(
            RejectionKind::NoFanoutFlag,
            format!("\"fanout\" must be true or false, not {}", json_kind(other)),
        ),
    }
}

/// Finds the one JSON object in the text: the whole text, else a code fence, else the first
/// balanced `{…}` span that parses. Models wrap JSON in prose and fences often enough that a
/// strict whole-text parse would waste paid replies.
fn extract_object(content: &str) -> Result<Map<String, Value>, Rejection> {
    let text = content.trim_start_matches('\u{feff}').trim();
    let mut found_non_object: Option<&'static str> = None;
    let mut consider = |candidate: &str| -> Option<Map<String, Value>> {
        match serde_json::from_str::<Value>(candidate.trim()) {
            Ok(Value::Object(object)) => Some(object),
            Ok(other) => {
                found_non_object.get_or_insert(json_kind(&other));
                None
            }
            Err(_) => None,
        }
    };

    if let Some(object) = consider(text) {
        return Ok(object);
    }
    for fenced in code_fences(text) {
        if let Some(object) = consider(fenced) {
            return Ok(object);
        }
    }
    for span in balanced_brace_spans(text) {
        if let Some(object) = consider(span) {
            return Ok(object);
        }
    }
    match found_non_object {
        Some(kind) => reject(
            RejectionKind::NotAnObject,
            format!("reply JSON is {kind}, not an object"),
        ),
        None => reject(RejectionKind::NotJson, "reply holds no JSON object"),
    }
}

/// Contents of each ```` ``` ```` fence, with an optional language tag on the opening line.
fn code_fences(text: &str) -> Vec<&str> {
    let mut fences = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find("```") {
        let after_ticks = &rest[open + 3..];
        // The language tag (```json) runs to the end of the opening line.
        let body_start = match after_ticks.find('\n') {
            Some(newline) if !after_ticks[..newline].contains('{') => newline + 1,
            _ => 0,
        };
        let body = &after_ticks[body_start..];
        match body.find("```") {
            Some(close) => {
                fences.push(&body[..close]);
                rest = &body[close + 3..];
            }
            None => {
                // An unclosed fence (a reply cut short) may still hold the whole object.
                fences.push(body);
                break;
            }
        }
    }
    fences
}

/// Top-level `{…}` spans in order, matched with awareness of JSON strings and escapes so that
/// braces inside titles do not end a span early. One linear pass: hostile input of many `{`
/// cannot make this quadratic.
fn balanced_brace_spans(text: &str) -> Vec<&str> {
    let mut spans = Vec::new();
    let mut depth = 0usize;
    let mut start = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (index, byte) in text.bytes().enumerate() {
        if depth == 0 {
            if byte == b'{' {
                depth = 1;
                start = index;
                in_string = false;
                escaped = false;
            }
            continue;
        }
        if in_string {
            if escaped {
                escaped = false;
            } else if byte == b'\\' {
                escaped = true;
            } else if byte == b'"' {
                in_string = false;
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    // `{` and `}` are ASCII, so both ends are char boundaries.
                    spans.push(&text[start..=index]);
                }
            }
            _ => {}
        }
    }
    spans
}

fn parse_fanout(
    reply: &Map<String, Value>,
    rationale: String,
    limits: &GraphLimits<'_>,
) -> Result<Plan, Rejection> {
    let tasks = match reply.get("tasks") {
        Some(Value::Array(tasks)) => tasks,
        None | Some(Value::Null) => {
            return reject(RejectionKind::EmptyTasks, "fanout true without \"tasks\"")
        }
        Some(other) => {
            return reject(
                RejectionKind::EmptyTasks,
                format!("\"tasks\" must be an array, not {}", json_kind(other)),
            )
        }
    };
    if tasks.is_empty() {
        return reject(
            RejectionKind::EmptyTasks,
            "fanout true with an empty \"tasks\" list",
        );
    }
    // Checked before anything else: a huge reply is rejected without walking it.
    if tasks.len() > limits.max_children {
        return reject(
            RejectionKind::TooManyChildren,
            format!(
                "fanout of {} exceeds decompose_max_children {}",
                tasks.len(),
                limits.max_children
            ),
        );
    }

    let count = tasks.len();
    let children = tasks
        .iter()
        .enumerate()
        .map(|(index, task)| parse_child(index, task, count, limits))
        .collect::<Result<Vec<_>, _>>()?;
    check_acyclic(&children)?;
    Ok(Plan::Fanout {
        rationale,
        children,
    })
}

fn parse_child(
    index: usize,
    task: &Value,
    count: usize,
    limits: &GraphLimits<'_>,
) -> Result<ChildSpec, Rejection> {
    let Value::Object(task) = task else {
        return reject(
            RejectionKind::TaskNotObject,
            format!(
                "tasks[{index}] is not an object (it is {})",
                json_kind(task)
            ),
        );
    };
    let title = match task.get("title") {
        Some(Value::String(title)) => match clean_title(title) {
            Some(title) => title,
            None => {
                return reject(
                    RejectionKind::BlankTitle,
                    format!("tasks[{index}] has a blank title"),
                )
            }
        },
        None | Some(Value::Null) => {
            return reject(
                RejectionKind::BlankTitle,
                format!("tasks[{index}] has no title"),
            )
        }
        Some(other) => {
            return reject(
                RejectionKind::BlankTitle,
                format!(
                    "tasks[{index}].title must be a string, not {}",
                    json_kind(other)
                ),
            )
        }
    };
    let body = match task.get("body") {
        Some(Value::String(body)) => body.clone(),
        None | Some(Value::Null) => String::new(),
        Some(other) => {
            return reject(
                RejectionKind::BadBody,
                format!(
                    "tasks[{index}].body must be a string or null, not {}",
                    json_kind(other)
                ),
            )
        }
    };
    let parents = parse_parents(index, task.get("parents"), count)?;
    Ok(ChildSpec {
        title,
        body,
        assignee: normalize_assignee(task.get("assignee"), limits),
        parents,
    })
}

fn parse_parents(
    index: usize,
    parents: Option<&Value>,
    count: usize,
) -> Result<Vec<usize>, Rejection> {
    let entries = match parents {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(entries)) => entries,
        Some(other) => {
            return reject(
                RejectionKind::BadParents,
                format!(
                    "tasks[{index}].parents must be an array of task indices, not {}",
                    json_kind(other)
                ),
            )
        }
    };
    let mut parents: Vec<usize> = Vec::with_capacity(entries.len());
    for entry in entries {
        // `as_i64`/`as_u64` are `None` for floats, so `1.0` and `1e0` are refused with `1.5`:
        // an index that only happens to be whole is still not what the format asks for.
        let parent = match entry {
            Value::Number(number) => match (number.as_u64(), number.as_i64()) {
                (Some(parent), _) => parent,
                (None, Some(negative)) => {
                    return reject(
                        RejectionKind::ParentOutOfRange,
                        format!("tasks[{index}] has parent {negative}, which is negative"),
                    )
                }
                (None, None) => {
                    return reject(
                        RejectionKind::ParentNotInteger,
                        format!(
                            "tasks[{index}] has parent {number}, which is not an integer index"
                        ),
                    )
                }
            },
            other => {
                return reject(
                    RejectionKind::ParentNotInteger,
                    format!(
                        "tasks[{index}] has parent {other}, which is {} and not an integer index",
                        json_kind(other)
                    ),
                )
            }
        };
        let parent = match usize::try_from(parent) {
            Ok(parent) if parent < count => parent,
            _ => {
                return reject(
                    RejectionKind::ParentOutOfRange,
                    format!("tasks[{index}] has parent {parent}, but there are only {count} tasks"),
                )
            }
        };
        if parent == index {
            return reject(
                RejectionKind::SelfParent,
                format!("tasks[{index}] names itself as parent"),
            );
        }
        if !parents.contains(&parent) {
            parents.push(parent);
        }
    }
    Ok(parents)
}

/// Kahn's algorithm over "waits for" edges; on failure names a task that lies on a cycle (not
/// merely downstream of one) and the cycle itself.
fn check_acyclic(children: &[ChildSpec]) -> Result<(), Rejection> {
    let count = children.len();
    let mut waiting_on: Vec<usize> = children.iter().map(|child| child.parents.len()).collect();
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); count];
    for (index, child) in children.iter().enumerate() {
        for &parent in &child.parents {
            dependents[parent].push(index);
        }
    }
    let mut ready: VecDeque<usize> = (0..count).filter(|&i| waiting_on[i] == 0).collect();
    let mut ordered = 0usize;
    while let Some(index) = ready.pop_front() {
        ordered += 1;
        for &dependent in &dependents[index] {
            waiting_on[dependent] -= 1;
            if waiting_on[dependent] == 0 {
                ready.push_back(dependent);
            }
        }
    }
    if ordered == count {
        return Ok(());
    }
    reject(RejectionKind::Cycle, describe_cycle(children, &waiting_on))
}

/// Names a task on a cycle, and the cycle, among the tasks Kahn's algorithm left over (those
/// still `waiting_on` a parent). Only the message depends on it: the reply is rejected either way.
fn describe_cycle(children: &[ChildSpec], waiting_on: &[usize]) -> String {
    // Every task left over still waits on a left-over parent, so walking parents from any of
    // them must come back to a task already seen: that task is on a cycle.
    let unplaced = |task: &usize| waiting_on[*task] > 0;
    let start = (0..children.len()).find(unplaced).unwrap_or_default();
    let mut path = vec![start];
    let mut current = start;
    while let Some(&next) = children[current].parents.iter().find(|p| unplaced(p)) {
        if let Some(position) = path.iter().position(|&seen| seen == next) {
            let mut cycle: Vec<String> = path[position..].iter().map(usize::to_string).collect();
            cycle.push(next.to_string());
            return format!(
                "tasks[{next}] is on a parent cycle ({})",
                cycle.join(" waits for ")
            );
        }
        path.push(next);
        current = next;
    }
    // Unreachable by the argument above.
    format!("tasks[{start}] is on a parent cycle")
}

fn parse_single(
    reply: &Map<String, Value>,
    rationale: String,
    limits: &GraphLimits<'_>,
) -> Result<Plan, Rejection> {
    let title = match reply.get("title") {
        Some(Value::String(title)) => clean_title(title),
        None | Some(Value::Null) => None,
        Some(other) => {
            return reject(
                RejectionKind::BlankTitle,
                format!("title must be a string or null, not {}", json_kind(other)),
            )
        }
    };
    let body = match reply.get("body") {
        Some(Value::String(body)) if body.trim().is_empty() => None,
        Some(Value::String(body)) => Some(body.clone()),
        None | Some(Value::Null) => None,
        Some(other) => {
            return reject(
                RejectionKind::BadBody,
                format!("body must be a string or null, not {}", json_kind(other)),
            )
        }
    };
    if title.is_none() && body.is_none() {
        return reject(
            RejectionKind::EmptySingle,
            "fanout false with neither title nor body",
        );
    }
    Ok(Plan::Single {
        rationale,
        title,
        body,
        assignee: normalize_assignee(reply.get("assignee"), limits),
    })
}

/// Trimmed and capped at [`MAX_TITLE_CHARS`] characters; `None` when blank.
fn clean_title(title: &str) -> Option<String> {
    let trimmed = title.trim();
    if trimmed.is_empty() {
        return None;
    }
    let capped = match trimmed.char_indices().nth(MAX_TITLE_CHARS) {
        Some((cut, _)) => trimmed[..cut].trim_end(),
        None => trimmed,
    };
    Some(capped.to_owned())
}

/// A roster name as written (trimmed); anything else falls back to the default, because an
/// invented assignee would leave the child with nobody to pick it up.
fn normalize_assignee(assignee: Option<&Value>, limits: &GraphLimits<'_>) -> String {
    assignee
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|name| !name.is_empty() && limits.roster.iter().any(|known| known == name))
        .unwrap_or(limits.default_assignee)
        .to_owned()
}
