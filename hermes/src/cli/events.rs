//! How `kanban show` tells a card's events to a person: one line each, its payload said in
//! words for the kinds this board writes (times as local or UTC timestamps, not unix seconds),
//! and as `key=value` pairs for a kind written by another tool. `--json` keeps the payload as
//! it is stored.

use serde_json::{Map, Value};

use super::render::count;
use super::round_up_secs;
use crate::clock::shown;

/// The event's summary: what happened, from its kind and payload (without the time).
pub fn summary(kind: &str, payload: Option<&Value>) -> String {
    let empty = Map::new();
    let fields = payload.and_then(Value::as_object).unwrap_or(&empty);
    let known = match kind {
        "created" => Some(created(fields)),
        "linked" => text(fields, "parent").map(|parent| format!("now waits for {parent}")),
        "promoted" => Some("promoted to ready: every parent is done".to_owned()),
        "archived" => Some("archived".to_owned()),
        "decomposed" => Some(decomposed(fields)),
        "specified" => Some(specified(fields)),
        "decompose_failed" => Some(failed(fields)),
        "decompose_parked" => Some(parked(fields)),
        "decompose_unparked" => Some(unparked(fields)),
        "auto_decompose_enabled" => Some(format!("auto-decompose switched on{}", by(fields))),
        "auto_decompose_disabled" => Some(format!("auto-decompose switched off{}", by(fields))),
        _ => None,
    };
    // A payload not shaped as this board writes it (another tool's) is shown whole instead.
    match (known, payload) {
        (Some(line), Some(Value::Object(_)) | None) => format!("{kind}: {line}"),
        (_, payload) => format!("{kind}{}", pairs(payload)),
    }
}

fn text<'a>(fields: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    fields.get(key).and_then(Value::as_str)
}

fn ids(fields: &Map<String, Value>, key: &str) -> Vec<String> {
    fields
        .get(key)
        .and_then(Value::as_array)
        .map(|ids| {
            ids.iter()
                .map(|id| id.as_str().map_or_else(|| id.to_string(), str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn by(fields: &Map<String, Value>) -> String {
    text(fields, "by")
        .map(|who| format!(" by {who}"))
        .unwrap_or_default()
}

/// A time the payload carries in unix seconds (fractional or whole), as text output shows
/// times.
fn time(value: Option<&Value>) -> Option<String> {
    let secs = value?.as_f64()?;
    // Rounded up to the second, as a due time is shown: never earlier than it is.
    Some(shown(round_up_secs((secs * 1000.0).ceil() as i64)))
}

fn created(fields: &Map<String, Value>) -> String {
    if let Some(root) = text(fields, "from_decompose_of") {
        return format!("created by decomposing {root}{}", by(fields));
    }
    let mut line = format!("created in {}", text(fields, "status").unwrap_or("?"));
    if let Some(assignee) = text(fields, "assignee") {
        line.push_str(&format!(" for {assignee}"));
    }
    let parents = ids(fields, "parents");
    if !parents.is_empty() {
        line.push_str(&format!(", waiting for {}", parents.join(", ")));
    }
    line
}

fn decomposed(fields: &Map<String, Value>) -> String {
    let children = ids(fields, "child_ids");
    let mut line = format!("split into {}", count(children.len(), "card"));
    if !children.is_empty() {
        line.push_str(&format!(": {}", children.join(", ")));
    }
    if let Some(owner) = text(fields, "root_assignee") {
        line.push_str(&format!("; this card now goes to {owner}"));
    }
    line
}

fn specified(fields: &Map<String, Value>) -> String {
    let changed = ids(fields, "changed_fields");
    if changed.is_empty() {
        "kept as one task, unchanged".to_owned()
    } else {
        format!("kept as one task; its {} rewritten", changed.join(", "))
    }
}

fn failed(fields: &Map<String, Value>) -> String {
    let attempt = fields
        .get("attempt")
        .map_or_else(|| "?".to_owned(), Value::to_string);
    let origin = text(fields, "origin")
        .map(|o| format!(" ({o})"))
        .unwrap_or_default();
    let reason = text(fields, "reason").unwrap_or("no reason recorded");
    let next = match time(fields.get("next_attempt_at")) {
        Some(at) => format!("; next attempt from {at}"),
        None => "; no automatic attempt scheduled".to_owned(),
    };
    format!("attempt {attempt}{origin} failed: {reason}{next}")
}

fn parked(fields: &Map<String, Value>) -> String {
    let attempts = fields
        .get("attempts")
        .and_then(Value::as_u64)
        .map(|n| format!(" after {}", count(n, "attempt")))
        .unwrap_or_default();
    let reason = text(fields, "reason")
        .map(|r| format!(": {r}"))
        .unwrap_or_default();
    format!("parked{attempts}{}{reason}", by(fields))
}

fn unparked(fields: &Map<String, Value>) -> String {
    let before = fields
        .get("attempts")
        .and_then(Value::as_u64)
        .map(|n| format!(" ({} on the spent budget)", count(n, "attempt")))
        .unwrap_or_default();
    let next = match time(fields.get("next_attempt_at")) {
        Some(at) => format!("; next attempt from {at}"),
        None => "; opted out, so not scheduled".to_owned(),
    };
    format!("unparked{}{before}{next}", by(fields))
}

/// ` key=value, …` for a payload this board does not write; times (`*_at` numbers) shown as
/// times, other values as compact JSON.
fn pairs(payload: Option<&Value>) -> String {
    match payload {
        None => String::new(),
        Some(Value::Object(fields)) if fields.is_empty() => String::new(),
        Some(Value::Object(fields)) => {
            let shown: Vec<String> = fields
                .iter()
                .map(|(key, value)| {
                    let at = key.ends_with("_at").then(|| time(Some(value))).flatten();
                    let value = match (at, value) {
                        (Some(at), _) => at,
                        (None, Value::String(text)) => text.clone(),
                        (None, other) => other.to_string(),
                    };
                    format!("{key}={value}")
                })
                .collect();
            format!(": {}", shown.join(", "))
        }
        Some(Value::String(text)) => format!(": {text}"),
        Some(other) => format!(": {other}"),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn said(kind: &str, payload: Value) -> String {
        crate::clock::set_show_utc(true);
        summary(kind, Some(&payload))
    }

    #[test]
    fn this_boards_events_are_said_in_words_with_times() {
        assert_eq!(
            said(
                "decompose_failed",
                json!({"attempt": 2, "reason": "HTTP 500", "origin": "gateway",
                       "next_attempt_at": 1_795_981_327.12})
            ),
            "decompose_failed: attempt 2 (gateway) failed: HTTP 500; next attempt from \
             2026-11-29 19:42:08 UTC"
        );
        assert_eq!(
            said(
                "decompose_parked",
                json!({"attempts": 3, "reason": "budget spent", "by": "gateway"})
            ),
            "decompose_parked: parked after 3 attempts by gateway: budget spent"
        );
        assert_eq!(
            said(
                "decompose_unparked",
                json!({"attempts": 3, "by": "ops", "next_attempt_at": null})
            ),
            "decompose_unparked: unparked by ops (3 attempts on the spent budget); opted out, so \
             not scheduled"
        );
        assert_eq!(
            said(
                "decomposed",
                json!({"child_ids": ["t_1", "t_2"], "root_assignee": "default"})
            ),
            "decomposed: split into 2 cards: t_1, t_2; this card now goes to default"
        );
        assert_eq!(
            said(
                "created",
                json!({"assignee": "default", "status": "ready", "parents": ["t_9"]})
            ),
            "created: created in ready for default, waiting for t_9"
        );
        assert_eq!(
            said("specified", json!({"changed_fields": ["title", "body"]})),
            "specified: kept as one task; its title, body rewritten"
        );
        assert_eq!(
            summary("promoted", None),
            "promoted: promoted to ready: every parent is done"
        );
        assert_eq!(
            said("auto_decompose_disabled", json!({"by": "ops"})),
            "auto_decompose_disabled: auto-decompose switched off by ops"
        );
    }

    #[test]
    fn another_tools_events_are_shown_as_pairs_with_times() {
        assert_eq!(
            said(
                "claimed",
                json!({"worker": "w1", "lease_at": 1_795_981_327, "n": [1]})
            ),
            "claimed: worker=w1, lease_at=2026-11-29 19:42:07 UTC, n=[1]"
        );
        assert_eq!(summary("completed", None), "completed");
        assert_eq!(
            said("linked", json!("not an object")),
            "linked: not an object"
        );
    }
}
