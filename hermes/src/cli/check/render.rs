//! How `gateway check` reads to a person, and the warnings it derives from what it found.

use serde_json::Value;

use super::{Bound, ProbeOutcome, ProviderAnswer, Report};
use crate::cli::render::count;
use crate::cli::table::{aligned, Align};
use crate::clock::shown_ms;

/// The report as text: the verdict first, then what it rests on.
pub fn text(report: &Report) -> String {
    let mut lines = verdict(report);
    lines.push(String::new());
    lines.extend(aligned(&setup(report), &[]));
    if !report.bounds.is_empty() {
        lines.push(String::new());
        lines.push("bounds in force:".to_owned());
        lines.extend(bounds(&report.bounds).into_iter().map(|l| format!("  {l}")));
    }
    lines.push(String::new());
    lines.extend(board(report));
    if !report.warnings.is_empty() {
        lines.push(String::new());
        lines.push("warnings:".to_owned());
        lines.extend(report.warnings.iter().map(|w| format!("  - {w}")));
    }
    lines.join("\n")
}

fn verdict(report: &Report) -> Vec<String> {
    if report.would_start {
        return vec!["`hermes gateway run` would start.".to_owned()];
    }
    let mut lines = vec!["`hermes gateway run` would refuse to start:".to_owned()];
    lines.extend(report.refusals.iter().map(|r| format!("  - {r}")));
    lines
}

fn row(label: &str, value: impl Into<String>) -> Vec<String> {
    vec![label.to_owned(), value.into()]
}

/// Home, config, route, provider, dispatch and lock, one labelled line each.
fn setup(report: &Report) -> Vec<Vec<String>> {
    let config = &report.config;
    let mut rows = vec![row("home:", report.home.display().to_string())];
    let path = config.path.display();
    rows.push(row(
        "config:",
        match (&config.error, config.found) {
            (Some(error), _) => format!("{path}: cannot be used: {error}"),
            (None, true) => path.to_string(),
            (None, false) => format!("{path} (none: every setting at its default)"),
        },
    ));
    rows.extend(
        config
            .warnings
            .iter()
            .map(|w| row("", format!("warning: {w}"))),
    );
    if let Some(route) = &report.route {
        rows.push(row("route:", format!("POST {}", route.endpoint)));
        rows.push(row(
            "",
            format!("model {}, key: {}", route.model, route.api_key_from),
        ));
        if let Some(proxy) = &route.proxy {
            rows.push(row("", format!("through the proxy {proxy}")));
        }
        if !route.extra_body_fields.is_empty() {
            rows.push(row(
                "",
                format!("extra body fields: {}", route.extra_body_fields.join(", ")),
            ));
        }
    } else if config.error.is_none() {
        rows.push(row("route:", "none (see the warnings)"));
    }
    rows.push(row(
        "provider:",
        report.provider.as_ref().map_or_else(
            || "not asked".to_owned(),
            |answer| provider(answer, report.route.as_ref().map(|r| r.model.as_str())),
        ),
    ));
    rows.push(row(
        "dispatch:",
        format!(
            "{} (kanban.dispatch_in_gateway), auto-decompose {} (kanban.auto_decompose)",
            on_off(config.dispatch_in_gateway),
            on_off(config.auto_decompose)
        ),
    ));
    rows.push(row("lock:", lock(report)));
    rows
}

fn on_off(on: bool) -> &'static str {
    if on {
        "on"
    } else {
        "off"
    }
}

/// `GET URL: HTTP 200 in 12 ms, 3 models, m among them (nothing billed)`.
fn provider(answer: &ProviderAnswer, model: Option<&str>) -> String {
    let outcome = match &answer.outcome {
        ProbeOutcome::Answered {
            status,
            models,
            model_listed,
        } => {
            let listed = match (models, model_listed) {
                (Some(n), Some(listed)) => format!(
                    ", {}, {} {}",
                    count(*n, "model"),
                    model.unwrap_or("the model"),
                    if *listed {
                        "among them"
                    } else {
                        "not among them"
                    }
                ),
                _ => String::new(),
            };
            format!("HTTP {status} in {} ms{listed}", answer.elapsed_ms)
        }
        ProbeOutcome::Unreachable { detail } => format!("unreachable: {detail}"),
        ProbeOutcome::TimedOut { after_ms } => format!("no answer within {after_ms} ms"),
        ProbeOutcome::Failed { detail } => format!("failed: {detail}"),
    };
    format!("GET {}: {outcome} (nothing billed)", answer.url)
}

fn lock(report: &Report) -> String {
    let lock = &report.lock;
    let path = lock
        .path
        .as_ref()
        .map(|p| format!("{}: ", p.display()))
        .unwrap_or_default();
    match lock.state {
        "free" => format!("{path}free"),
        "held" => format!(
            "{path}held by another gateway{}",
            lock.holder
                .map(|pid| format!(" (pid {pid})"))
                .unwrap_or_default()
        ),
        "unusable" => format!("{path}cannot be used"),
        _ => "not needed: no dispatcher".to_owned(),
    }
}

/// One line per bound: key, value, where it came from.
fn bounds(bounds: &[Bound]) -> Vec<String> {
    let mut rows = vec![vec![
        "KEY".to_owned(),
        "VALUE".to_owned(),
        "FROM".to_owned(),
    ]];
    rows.extend(bounds.iter().map(|b| {
        let value = match (&b.value, b.seconds) {
            (Value::Null, _) => "not set".to_owned(),
            (value, true) => format!("{} s", value.as_f64().unwrap_or_default()),
            (value, false) => value.to_string(),
        };
        let from = match (b.source, b.source_key) {
            ("file", _) => "config.yaml".to_owned(),
            (_, Some(key)) => format!("{key} (upstream's key; the stricter applies)"),
            _ => "default".to_owned(),
        };
        vec![b.key.to_owned(), value, from]
    }));
    aligned(&rows, &[Align::Left, Align::Right])
}

fn board(report: &Report) -> Vec<String> {
    let board = &report.board;
    let mut lines = vec![format!("board: {}", board.path.display())];
    if !board.exists {
        lines.push("  no board yet: `hermes gateway run` creates it".to_owned());
    }
    if board.schema_current == Some(false) {
        lines.push(
            "  written by another tool or an older build: `gateway run` adds its own tables \
             and columns when it opens it"
                .to_owned(),
        );
    }
    if let Some(t) = &board.triage {
        lines.push(format!(
            "  triage cards: {} due now, {} waiting (backoff), {} in flight, {} parked, {} held \
             for a person or opted out",
            t.due, t.waiting, t.in_flight, t.parked, t.held
        ));
        lines.push(format!(
            "  the next tick attempts at most {} (kanban.auto_decompose_per_tick)",
            count(board.per_tick, "card")
        ));
    }
    if let Some(calls) = board.calls_last_hour {
        lines.push(format!(
            "  paid calls in the last hour: {calls} of {} (kanban.decompose_calls_per_hour)",
            board.calls_per_hour
        ));
    }
    lines
}

/// What would not stop `gateway run` but limits or spoils what it bills.
pub fn warnings(report: &Report) -> Vec<String> {
    let mut warnings = Vec::new();
    let config = &report.config;
    if config.error.is_none() && !config.dispatch_in_gateway {
        warnings.push(
            "kanban.dispatch_in_gateway is false: the gateway runs without a dispatcher and \
             bills nothing"
                .to_owned(),
        );
    }
    if config.error.is_none() && !config.auto_decompose {
        warnings.push(
            "kanban.auto_decompose is false: the gateway sends no decompose call until it is \
             true"
                .to_owned(),
        );
    }
    if let (Some(answer), Some(route)) = (&report.provider, &report.route) {
        warnings.extend(provider_warning(&answer.outcome, &route.model));
    }
    warnings.extend(board_warnings(report));
    warnings
}

fn provider_warning(outcome: &ProbeOutcome, model: &str) -> Option<String> {
    match outcome {
        ProbeOutcome::Answered {
            model_listed: Some(false),
            ..
        } => Some(format!(
            "the provider's model list does not name {model}: decompose calls may be refused"
        )),
        ProbeOutcome::Answered {
            status: status @ 401..=403,
            ..
        } => Some(format!(
            "the provider refuses these credentials (HTTP {status}): a decompose call would be \
             refused, and auto-decompose paused for kanban.provider_cooldown_seconds"
        )),
        ProbeOutcome::Answered {
            status: status @ (429 | 500..),
            ..
        } => Some(format!(
            "the provider answers HTTP {status}: decompose calls may fail until it recovers"
        )),
        ProbeOutcome::Answered { .. } => None,
        ProbeOutcome::Unreachable { detail } => Some(format!(
            "provider unreachable ({detail}): decompose calls would bill nothing, and \
             auto-decompose would pause"
        )),
        ProbeOutcome::TimedOut { after_ms } => {
            Some(format!("the provider gave no answer within {after_ms} ms"))
        }
        ProbeOutcome::Failed { detail } => Some(format!("the free request failed: {detail}")),
    }
}

fn board_warnings(report: &Report) -> Vec<String> {
    let board = &report.board;
    let mut warnings = Vec::new();
    if let (Some(until), Some(reason)) = (board.paused_until, &board.pause_reason) {
        warnings.push(format!(
            "auto-decompose is paused until {}: {reason} (`hermes kanban resume` lifts it)",
            shown_ms((until * 1000.0).ceil() as i64)
        ));
    }
    if board
        .calls_last_hour
        .is_some_and(|calls| calls >= u64::from(board.calls_per_hour))
    {
        warnings.push(format!(
            "the hourly ceiling is reached (kanban.decompose_calls_per_hour {}): no automatic \
             call until calls of the last hour age out",
            board.calls_per_hour
        ));
    }
    if report.lock.state != "held" {
        for held in &report.lock.dispatcher_locks_held {
            warnings.push(format!(
                "process {} holds {}: the gateway would start but dispatch nothing until it is \
                 released",
                held.pid,
                held.path.display()
            ));
        }
    }
    if !board.not_dispatched.is_empty() {
        let boards: Vec<String> = board
            .not_dispatched
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        warnings.push(format!(
            "this gateway dispatches only {}, not upstream's other boards: {}",
            board.path.display(),
            boards.join(", ")
        ));
    }
    warnings
}
