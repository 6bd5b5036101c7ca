//! `hermes kanban usage [--since WHEN] [--calls [--card ID]]`: what the aux-call ledger says was
//! paid (B9), as a summary or call by call.

use std::time::Duration;

use clap::Args;
use serde_json::json;

use super::render::{count, one_line, ATTEMPTS_EXPLAINED};
use super::{CliError, Context, Outcome};
use crate::clock::{now_ms, utc};
use crate::store::{CallFilter, LedgerCall, StoreError};

/// Arguments of `kanban usage`.
#[derive(Debug, Args)]
#[command(after_help = "\
Without --calls: per-card calls and tokens, board totals, the model configured now, the hourly \
window, any pause in force and the last `kanban resume` (with --json, a `last_resume` object once \
there has been one). A card's attempts count its current automatic budget only: `kanban unpark` \
starts a fresh one, and a retried attempt makes more than one call.
The ledger records no model per call: the model line (on stderr with --calls) is what \
config.yaml names now. A config.yaml that cannot be used is reported as a warning, and the \
ledger shown with the default settings (usage bills nothing).
With --calls: one line per paid call, oldest first: start time (UTC), card, origin \
(gateway/sweep/manual), attempt, try, outcome, HTTP status, prompt+completion tokens, duration. \
With --json, one JSON object per line: {\"id\", \"started_at\", \"task_id\", \"origin\", \
\"attempt\", \"try\", \"outcome\", \"http_status\", \"prompt_tokens\", \"completion_tokens\", \
\"duration_ms\", \"detail\"} (started_at in unix seconds; null where unknown or still in flight).

Exit status: 0 success; 1 --card names no card; 2 usage error (a bad --since, --card without \
--calls).")]
pub struct UsageArgs {
    /// Only calls that started at or after WHEN: a duration back from now (`90s`, `30m`, `2h`,
    /// `1d`, or plain seconds) or a date/time in UTC unless it carries an offset (`2026-11-30`,
    /// `2026-11-30T14:05`, `2026-11-30 14:05:09`, `2026-11-30T14:05:09+02:00`).
    #[arg(long, value_name = "WHEN", value_parser = parse_since)]
    pub since: Option<Since>,
    /// List every paid call instead of the summary.
    #[arg(long)]
    pub calls: bool,
    /// With --calls: only this card's calls.
    #[arg(long, value_name = "ID", requires = "calls")]
    pub card: Option<String>,
}

/// The start of the period `--since` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Since {
    /// This long before now.
    Ago(Duration),
    /// This moment (ms since the epoch).
    At(i64),
}

impl Since {
    fn start_ms(self, now_ms: i64) -> i64 {
        match self {
            Since::Ago(d) => {
                now_ms.saturating_sub(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            }
            Since::At(ms) => ms,
        }
    }
}

/// Prints the summary, or the calls with `--calls`.
pub fn run(ctx: &Context, args: &UsageArgs) -> Result<Outcome, CliError> {
    let store = ctx.open_store()?;
    let now = now_ms();
    let since = args.since.map(|s| s.start_ms(now));
    if args.calls {
        let filter = CallFilter {
            task_id: args.card.clone(),
            since_ms: since,
        };
        let calls = store.calls(&filter)?;
        if let Some(card) = &args.card {
            // A card with no row left (another tool deleted it) may still have calls to show.
            if calls.is_empty() && store.task(card)?.is_none() {
                return Err(StoreError::NoSuchTask(card.clone()).into());
            }
        }
        return print_calls(ctx, &calls, args.card.as_deref(), since);
    }
    let report = store.usage(since, now, ctx.config.kanban.decompose_calls_per_hour)?;
    let last_resume = store.last_resume()?;
    if ctx.json {
        let mut value = serde_json::to_value(&report).map_err(anyhow::Error::from)?;
        // Only when there is one, so the report keeps its shape for boards never resumed.
        if let (Some(r), Some(obj)) = (&last_resume, value.as_object_mut()) {
            obj.insert(
                "last_resume".to_owned(),
                json!({
                    "by": r.by,
                    "at": r.at_ms as f64 / 1000.0,
                    "cleared": {
                        "until": r.cleared.until_ms as f64 / 1000.0,
                        "reason": r.cleared.reason,
                    },
                }),
            );
        }
        ctx.print_json(&value)?;
        return Ok(Outcome::Success);
    }
    let unknown = match report.totals.unknown {
        0 => String::new(),
        n => format!(", {n} unknown: maybe billed, left in flight by a process that died"),
    };
    let mut lines = vec![format!(
        "{} ({} ok, {} failed{unknown}), {} prompt + {} completion tokens{}",
        count(report.totals.calls, "paid call"),
        report.totals.ok,
        report.totals.failed,
        report.totals.prompt_tokens,
        report.totals.completion_tokens,
        report
            .since
            .map(|s| format!(" since {}", utc(s)))
            .unwrap_or_default()
    )];
    lines.push(model_line(ctx));
    lines.push(format!(
        "last hour: {} of {} allowed ({}kanban.decompose_calls_per_hour{})",
        report.window.calls_last_hour,
        report.window.limit,
        if ctx.config_broken {
            "the default "
        } else {
            ""
        },
        if ctx.config_broken {
            ": config.yaml could not be used"
        } else {
            ""
        }
    ));
    if report.totals.unreachable > 0 {
        lines.push(format!(
            "{} never reached the provider (not billed, not counted above)",
            count(report.totals.unreachable, "request")
        ));
    }
    for pause in [&report.pause, &report.unreachable].into_iter().flatten() {
        lines.push(format!(
            "auto-decompose PAUSED until {}: {} (`hermes kanban resume` lifts it)",
            utc(pause.until as i64),
            one_line(&pause.reason)
        ));
    }
    if let Some(resume) = &last_resume {
        lines.push(format!(
            "last resumed by {} at {} (lifted a pause until {}: {})",
            one_line(&resume.by),
            utc(resume.at_ms.div_euclid(1000)),
            utc(resume.cleared.until_ms.div_euclid(1000)),
            one_line(&resume.cleared.reason)
        ));
    }
    for card in &report.cards {
        lines.push(format!(
            "{}  {:>9} ({} ok, {} failed{}{})  {} on the current budget{}  {}",
            card.task_id,
            count(card.calls, "call"),
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
            count(card.attempts, "attempt"),
            if card.parked { ", PARKED" } else { "" },
            one_line(card.title.as_deref().unwrap_or("(card gone)"))
        ));
    }
    if !report.cards.is_empty() {
        lines.push(format!("({ATTEMPTS_EXPLAINED})"));
    }
    if report.cards.iter().any(|card| card.parked) {
        lines.push(
            "(a PARKED card's budget is spent: `hermes kanban unpark ID` gives it a fresh one)"
                .to_owned(),
        );
    }
    ctx.print(&lines.join("\n"))?;
    Ok(Outcome::Success)
}

fn print_calls(
    ctx: &Context,
    calls: &[LedgerCall],
    card: Option<&str>,
    since_ms: Option<i64>,
) -> Result<Outcome, CliError> {
    if ctx.json {
        for call in calls {
            ctx.print_json_line(&call_json(call))?;
        }
        return Ok(Outcome::Success);
    }
    if calls.is_empty() {
        let mut note = "no paid calls".to_owned();
        if let Some(card) = card {
            note.push_str(&format!(" for {card}"));
        }
        if let Some(ms) = since_ms {
            note.push_str(&format!(" since {}", utc(ms.div_euclid(1000))));
        }
        ctx.print(&note)?;
        return Ok(Outcome::Success);
    }
    // stdout keeps one line per call; the model, which no row records, goes beside it.
    super::note(&model_line(ctx));
    let lines: Vec<String> = calls.iter().map(call_line).collect();
    ctx.print(&lines.join("\n"))?;
    Ok(Outcome::Success)
}

/// The model decompose calls name under the current config. The ledger keeps no model per
/// call (its schema has no such column), so this is what the config says now, labelled so.
fn model_line(ctx: &Context) -> String {
    const UNRECORDED: &str = "the ledger does not record each call's model";
    if ctx.config_broken {
        return format!("model: unknown, config.yaml could not be used ({UNRECORDED})");
    }
    let model = ctx
        .config
        .decomposer_model()
        .map(|m| one_line(&m))
        .unwrap_or_else(|| "none configured".to_owned());
    format!("model: {model} (as configured now; {UNRECORDED})")
}

fn call_json(call: &LedgerCall) -> serde_json::Value {
    json!({
        "id": call.id,
        "started_at": call.started_at_ms as f64 / 1000.0,
        "task_id": call.task_id,
        "origin": call.origin,
        "attempt": call.attempt,
        "try": call.try_no,
        "outcome": call.outcome,
        "http_status": call.http_status,
        "prompt_tokens": call.prompt_tokens,
        "completion_tokens": call.completion_tokens,
        "duration_ms": duration_ms(call),
        "detail": call.detail,
    })
}

fn duration_ms(call: &LedgerCall) -> Option<i64> {
    call.ended_at_ms
        .map(|end| end.saturating_sub(call.started_at_ms).max(0))
}

/// `2026-11-30 14:05:09.120 UTC  t_1234abcd  gateway  attempt 1 try 1  ok  HTTP 200  812+143 tokens  1.204s`
fn call_line(call: &LedgerCall) -> String {
    let ms = call.started_at_ms.rem_euclid(1000);
    let when = utc(call.started_at_ms.div_euclid(1000));
    let when = when.replace(" UTC", &format!(".{ms:03} UTC"));
    let tokens = match (call.prompt_tokens, call.completion_tokens) {
        (None, None) => "- tokens".to_owned(),
        (p, c) => format!(
            "{}+{} tokens",
            p.map_or("?".to_owned(), |n| n.to_string()),
            c.map_or("?".to_owned(), |n| n.to_string())
        ),
    };
    let took = match duration_ms(call) {
        Some(ms) => format!("{:.3}s", ms as f64 / 1000.0),
        None => "not finished".to_owned(),
    };
    format!(
        "{when}  {}  {:<7}  attempt {} try {}  {:<14}  {}  {tokens}  {took}",
        call.task_id.as_deref().unwrap_or("-"),
        call.origin,
        call.attempt.map_or("-".to_owned(), |n| n.to_string()),
        call.try_no,
        call.outcome,
        call.http_status
            .map_or("HTTP -  ".to_owned(), |s| format!("HTTP {s}")),
    )
}

/// `--since`: a duration back from now, or a date/time.
fn parse_since(text: &str) -> Result<Since, String> {
    let text = text.trim();
    if let Some(at) = parse_datetime(text)? {
        return Ok(Since::At(at));
    }
    parse_duration(text).map(Since::Ago)
}

/// `90s`, `30m`, `2h`, `1d` or plain (possibly fractional) seconds.
fn parse_duration(text: &str) -> Result<Duration, String> {
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
                "unknown unit {other:?}; use s, m, h or d (e.g. 30m), or a date such as 2026-11-30"
            ))
        }
    };
    let value: f64 = number.trim().parse().map_err(|_| {
        format!("{text:?} is neither a duration (90s, 30m, 2h, 1d) nor a date (2026-11-30)")
    })?;
    Duration::try_from_secs_f64(value * scale)
        .map_err(|_| format!("{text:?} is not a usable duration"))
}

/// `YYYY-MM-DD`, optionally followed by `T` or a space and `HH:MM[:SS[.fff]]`, optionally
/// followed by `Z` or `±HH:MM`; UTC without an offset. `Ok(None)` when `text` does not start
/// like a date at all (it may be a duration); an error when it does but is not a valid one.
fn parse_datetime(text: &str) -> Result<Option<i64>, String> {
    let bytes = text.as_bytes();
    // ASCII up to the day, so that slicing there never splits a character.
    let looks_like_date = bytes.len() >= 10
        && bytes[..10].is_ascii()
        && bytes[4] == b'-'
        && bytes[7] == b'-'
        && bytes[..4].iter().all(u8::is_ascii_digit);
    if !looks_like_date {
        return Ok(None);
    }
    let bad = || {
        format!(
            "{text:?} is not a date/time; use 2026-11-30, 2026-11-30T14:05[:09], optionally with Z \
             or an offset such as +02:00"
        )
    };
    let num = |s: &str| -> Result<i64, String> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        s.parse::<i64>().map_err(|_| bad())
    };
    let (year, month, day) = (num(&text[..4])?, num(&text[5..7])?, num(&text[8..10])?);
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return Err(bad());
    }
    let mut rest = &text[10..];
    let mut secs_of_day = 0i64;
    let mut millis = 0i64;
    if let Some(time) = rest.strip_prefix('T').or_else(|| rest.strip_prefix(' ')) {
        let end = time.find(['Z', 'z', '+', '-']).unwrap_or(time.len());
        let (clock, after) = time.split_at(end);
        let mut parts = clock.splitn(3, ':');
        let hour = num(parts.next().unwrap_or(""))?;
        let minute = num(parts.next().ok_or_else(bad)?)?;
        let (second, fraction) = match parts.next() {
            None => (0, ""),
            Some(s) => match s.split_once('.') {
                Some((whole, fraction)) => (num(whole)?, fraction),
                None => (num(s)?, ""),
            },
        };
        if hour > 23 || minute > 59 || second > 59 {
            return Err(bad());
        }
        if !fraction.is_empty() {
            let digits: String = fraction.chars().take(3).collect();
            num(fraction)?;
            millis = num(&format!("{digits:0<3}"))?;
        }
        secs_of_day = hour * 3600 + minute * 60 + second;
        rest = after;
    }
    let offset_secs = match rest {
        "" | "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes()[0] {
                b'+' => 1,
                b'-' => -1,
                _ => return Err(bad()),
            };
            let (h, m) = rest[1..].split_once(':').ok_or_else(bad)?;
            let (h, m) = (num(h)?, num(m)?);
            if h > 23 || m > 59 {
                return Err(bad());
            }
            sign * (h * 3600 + m * 60)
        }
    };
    let secs = days_from_civil(year, month, day) * 86_400 + secs_of_day - offset_secs;
    Ok(Some(secs * 1000 + millis))
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        4 | 6 | 9 | 11 => 30,
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        _ => 31,
    }
}

/// Days from 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
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
        assert!(parse_duration("1e30d").is_err());
    }

    #[test]
    fn since_takes_a_duration_or_a_date() {
        assert_eq!(
            parse_since("30m"),
            Ok(Since::Ago(Duration::from_secs(1800)))
        );
        assert_eq!(parse_since("1970-01-01"), Ok(Since::At(0)));
        assert_eq!(parse_since("2000-02-29"), Ok(Since::At(951_782_400_000)));
        assert_eq!(
            parse_since("2026-11-29T19:42:07Z"),
            Ok(Since::At(1_795_981_327_000))
        );
        assert_eq!(
            parse_since("2026-11-29 19:42:07.25"),
            Ok(Since::At(1_795_981_327_250))
        );
        assert_eq!(
            parse_since("2026-11-29T21:42:07+02:00"),
            Ok(Since::At(1_795_981_327_000))
        );
        assert_eq!(
            parse_since("2026-11-29T19:42"),
            Ok(Since::At(1_795_981_320_000))
        );
        for bad in [
            "2026-02-30",
            "2026-13-01",
            "2026-11-29T25:00",
            "2026-11-29T19",
            "2026-11-29T19:42:07+2",
            "2026-11-29X",
            "2026-1a-01",
            "2026-11-29T19:42:07.x",
            "2026-1é-01",
            "2026-11-29T1é:00",
        ] {
            assert!(parse_since(bad).is_err(), "{bad}");
        }
        assert!(parse_since("yesterday").is_err());
    }

    #[test]
    fn start_of_the_period() {
        assert_eq!(Since::Ago(Duration::from_secs(2)).start_ms(10_000), 8_000);
        assert_eq!(
            Since::Ago(Duration::MAX).start_ms(10_000),
            10_000 - i64::MAX
        );
        assert_eq!(Since::At(5).start_ms(10_000), 5);
    }

    #[test]
    fn a_call_line() {
        let call = LedgerCall {
            id: 1,
            task_id: Some("t_1234abcd".to_owned()),
            origin: "gateway".to_owned(),
            attempt: Some(2),
            try_no: 1,
            started_at_ms: 1_795_981_327_120,
            ended_at_ms: Some(1_795_981_328_324),
            outcome: "ok".to_owned(),
            http_status: Some(200),
            prompt_tokens: Some(812),
            completion_tokens: Some(143),
            detail: None,
        };
        assert_eq!(
            call_line(&call),
            "2026-11-29 19:42:07.120 UTC  t_1234abcd  gateway  attempt 2 try 1  ok              \
             HTTP 200  812+143 tokens  1.204s"
        );
        let in_flight = LedgerCall {
            ended_at_ms: None,
            outcome: "in_flight".to_owned(),
            http_status: None,
            prompt_tokens: None,
            completion_tokens: None,
            ..call
        };
        assert!(call_line(&in_flight).ends_with("HTTP -    - tokens  not finished"));
    }
}
