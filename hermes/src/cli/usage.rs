//! `hermes kanban usage [--since DURATION]`: what the aux-call ledger says was paid (B9).

use std::time::Duration;

use clap::Args;

use super::render::one_line;
use super::{CliError, Context, Outcome};
use crate::clock::{now_ms, utc};

/// Arguments of `kanban usage`.
#[derive(Debug, Args)]
pub struct UsageArgs {
    /// Only calls newer than this: `90s`, `30m`, `2h`, `1d`, or plain seconds.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub since: Option<Duration>,
}

/// Prints per-card calls and tokens, board totals, the hourly window and any pause.
pub fn run(ctx: &Context, args: &UsageArgs) -> Result<Outcome, CliError> {
    let store = ctx.open_store()?;
    let now = now_ms();
    let since = args
        .since
        .map(|d| now.saturating_sub(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)));
    let report = store.usage(since, now, ctx.config.kanban.decompose_calls_per_hour)?;
    if ctx.json {
        ctx.print_json(&serde_json::to_value(&report).map_err(anyhow::Error::from)?)?;
        return Ok(Outcome::Success);
    }
    let unknown = match report.totals.unknown {
        0 => String::new(),
        n => format!(", {n} unknown: maybe billed, left in flight by a process that died"),
    };
    let mut lines = vec![format!(
        "{} paid calls ({} ok, {} failed{unknown}), {} prompt + {} completion tokens{}",
        report.totals.calls,
        report.totals.ok,
        report.totals.failed,
        report.totals.prompt_tokens,
        report.totals.completion_tokens,
        report
            .since
            .map(|s| format!(" since {}", utc(s)))
            .unwrap_or_default()
    )];
    lines.push(format!(
        "last hour: {} of {} allowed (kanban.decompose_calls_per_hour)",
        report.window.calls_last_hour, report.window.limit
    ));
    if report.totals.unreachable > 0 {
        lines.push(format!(
            "{} request(s) never reached the provider (not billed, not counted above)",
            report.totals.unreachable
        ));
    }
    for pause in [&report.pause, &report.unreachable].into_iter().flatten() {
        lines.push(format!(
            "auto-decompose PAUSED until {}: {}",
            utc(pause.until as i64),
            pause.reason
        ));
    }
    for card in &report.cards {
        lines.push(format!(
            "{}  {:>3} calls ({} ok, {} failed{}{})  attempts {}{}  {}",
            card.task_id,
            card.calls,
            card.ok,
            card.failed,
            match card.unknown {
                0 => String::new(),
                n => format!(", {n} unknown"),
            },
            match card.unreachable {
                0 => String::new(),
                n => format!("; {n} never reached the provider"),
            },
            card.attempts,
            if card.parked { " PARKED" } else { "" },
            one_line(card.title.as_deref().unwrap_or("(card gone)"))
        ));
    }
    ctx.print(&lines.join("\n"))?;
    Ok(Outcome::Success)
}

/// `90s`, `30m`, `2h`, `1d` or plain (possibly fractional) seconds.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = match text.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((at, _)) => text.split_at(at),
        None => (text, "s"),
    };
    let scale = match unit {
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86_400.0,
        other => {
            return Err(format!(
                "unknown unit {other:?}; use s, m, h or d (e.g. 30m)"
            ))
        }
    };
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (e.g. 90s, 30m, 2h, 1d)"))?;
    Duration::try_from_secs_f64(value * scale)
        .map_err(|_| format!("{text:?} is not a usable duration"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("1d"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_duration("45"), Ok(Duration::from_secs(45)));
        assert_eq!(parse_duration("0.5"), Ok(Duration::from_millis(500)));
        assert!(parse_duration("-3m").is_err());
        assert!(parse_duration("3w").is_err());
        assert!(parse_duration("soon").is_err());
    }
}
