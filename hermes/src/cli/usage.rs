//! `hermes kanban usage [--since WHEN] [--calls [--card ID]]`: what the aux-call ledger says was
//! paid (B9), as a summary or call by call.

use clap::Args;
use serde_json::{json, Value};

use super::render::{count, one_line, ATTEMPTS_EXPLAINED};
use super::table::{aligned, Align};
use super::{CliError, Context, Outcome};
use crate::clock::{now_ms, shown, shown_ms, shown_ms_exact};
use crate::config::{format_cost, Prices, PRICES_KEY};
use crate::store::{
    CallFilter, CardUsage, LedgerCall, ModelUsage, ResumeRecord, StoreError, UsageReport,
};

/// Arguments of `kanban usage`.
#[derive(Debug, Args)]
#[command(after_help = "\
Without --calls: per-card calls, tokens and models, board totals by model and by half (decompose \
calls and workers' turns, with the workers' runs), the hourly \
window, any pause in force and the last `kanban resume` (with --json, a `last_resume` object once \
there has been one). A card's attempts count its current automatic budget only: `kanban unpark` \
starts a fresh one, and a retried attempt makes more than one call.
Each call's model is the one its request named, as the ledger recorded it; calls recorded before \
the ledger kept models show `unknown model` (null with --json). With `kanban.prices` in \
config.yaml (USD per million prompt and completion tokens, per model), calls, cards and totals \
also show an estimated cost (`est. $0.0123`), or `no price` for a model without one; with no \
prices there is no cost at all. A config.yaml that cannot be used is reported as a warning, and \
the ledger shown with the default settings and no prices (usage bills nothing).
With --calls: one line per paid call, oldest first (a header row on a terminal): start time \
(local, or UTC with --utc), card, origin (gateway/sweep/manual, or worker for a worker's turn: \
then attempt is the run's turn), attempt, try, outcome, HTTP \
status, prompt+completion tokens, duration, model, and the estimate when prices are configured. \
With --json, one JSON object per line: \
{\"id\", \"started_at\", \"task_id\", \"origin\", \"attempt\", \"try\", \"outcome\", \
\"http_status\", \"prompt_tokens\", \"completion_tokens\", \"duration_ms\", \"detail\", \"model\"}, \
plus \"estimated_cost_usd\" (null for a model with no price) when prices are configured \
(started_at in unix seconds; null where unknown or still in flight).")]
pub struct UsageArgs {
    /// Only calls that started at or after WHEN: a duration back from now (`90s`, `30m`,
    /// `1h30m`, `2d`, `1w`, or plain seconds), a date or date-time in UTC unless it carries an
    /// offset (`2026-11-30`, `2026-11-30T14:05`, `2026-11-30 14:05:09`,
    /// `2026-11-30T14:05:09+02:00`), or `today` / `yesterday` (from midnight, local time, UTC
    /// with --utc).
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
#[derive(Debug, Clone, Copy)]
pub enum Since {
    /// This long before now (calendar units, `2d`, `1w`, counted in the display zone).
    Ago(jiff::Span),
    /// This moment (ms since the epoch).
    At(i64),
    /// The start of the day this many days before today, in the display zone.
    DaysBack(i64),
}

impl Since {
    /// The first millisecond of the period, seen from `now_ms` in `zone`. A span reaching
    /// before the representable range starts at its beginning (every call counts).
    fn start_ms(self, now_ms: i64, zone: &jiff::tz::TimeZone) -> Result<i64, CliError> {
        let now = crate::core::time::timestamp(now_ms).to_zoned_datetime(zone.clone());
        let start = match self {
            Since::At(ms) => return Ok(ms),
            Since::Ago(span) => now.checked_sub(span).map(|at| at.timestamp()),
            Since::DaysBack(days) => now
                .start_of_day()
                .and_then(|today| today.checked_sub(jiff::Span::new().days(days)))
                .map(|at| at.timestamp()),
        };
        Ok(start.unwrap_or(jiff::Timestamp::MIN).as_millisecond())
    }
}

/// Prints the summary, or the calls with `--calls`.
pub fn run(ctx: &Context, args: &UsageArgs) -> Result<Outcome, CliError> {
    let store = ctx.open_store()?;
    let now = now_ms();
    let since = args
        .since
        .map(|s| s.start_ms(now, &crate::clock::display_zone()))
        .transpose()?;
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
    let mut report = store.usage(since, now, ctx.config.kanban.decompose_calls_per_hour)?;
    price_report(&mut report, &ctx.config.kanban.prices);
    let last_resume = store.last_resume()?;
    if ctx.json {
        ctx.print_json(&report_json(&report, last_resume.as_ref())?)?;
        return Ok(Outcome::Success);
    }
    let mut lines = summary_lines(ctx, &report, last_resume.as_ref());
    lines.extend(report.cards.iter().map(card_line));
    let unrecorded = report.totals.models.iter().any(|m| m.model.is_none());
    lines.extend(notes(unrecorded, !ctx.config.kanban.prices.is_empty()));
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

/// The report as `--json` prints it: the store's report, with the last resume when there is one.
fn report_json(
    report: &UsageReport,
    last_resume: Option<&ResumeRecord>,
) -> Result<Value, CliError> {
    let mut value = serde_json::to_value(report).map_err(anyhow::Error::from)?;
    // Only when there is one, so the report keeps its shape for boards never resumed.
    if let (Some(r), Some(obj)) = (last_resume, value.as_object_mut()) {
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
    Ok(value)
}

/// The summary's first lines: the totals, by model and by half, the hourly window, the pauses
/// in force and the last resume.
fn summary_lines(
    ctx: &Context,
    report: &UsageReport,
    last_resume: Option<&ResumeRecord>,
) -> Vec<String> {
    let unknown = match report.totals.unknown {
        0 => String::new(),
        n => format!(", {n} unknown: maybe billed, left in flight by a process that died"),
    };
    let mut lines = vec![format!(
        "{} ({} ok, {} failed{unknown}), {} prompt + {} completion tokens{}{}",
        count(report.totals.calls, "paid call"),
        report.totals.ok,
        report.totals.failed,
        report.totals.prompt_tokens,
        report.totals.completion_tokens,
        cost_text(
            report.totals.estimated_cost_usd,
            report.totals.unpriced_calls
        )
        .map(|c| format!(", {c}"))
        .unwrap_or_default(),
        report
            .since
            .map(|s| format!(" since {}", shown(s)))
            .unwrap_or_default()
    )];
    if let Some(line) = models_line(&report.totals.models) {
        lines.push(line);
    }
    lines.extend(halves_line(&report.halves));
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
            shown_ms((pause.until * 1000.0).ceil() as i64),
            one_line(&pause.reason)
        ));
    }
    if let Some(resume) = last_resume {
        lines.push(format!(
            "last resumed by {} at {} (lifted a pause until {}: {})",
            one_line(&resume.by),
            shown_ms(resume.at_ms),
            shown_ms(resume.cleared.until_ms),
            one_line(&resume.cleared.reason)
        ));
    }
    lines
}

/// One card's line of the summary.
fn card_line(card: &CardUsage) -> String {
    let cost = cost_text(card.estimated_cost_usd, card.unpriced_calls)
        .map(|c| format!("  {c}"))
        .unwrap_or_default();
    format!(
        "{}  {:>9} ({} ok, {} failed{}{})  {} on the current budget{}  {}{cost}  {}",
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
        card_models(&card.models),
        one_line(card.title.as_deref().unwrap_or("(card gone)"))
    )
}

fn print_calls(
    ctx: &Context,
    calls: &[LedgerCall],
    card: Option<&str>,
    since_ms: Option<i64>,
) -> Result<Outcome, CliError> {
    let prices = &ctx.config.kanban.prices;
    if ctx.json {
        for call in calls {
            ctx.print_json_line(&call_json(call, prices))?;
        }
        return Ok(Outcome::Success);
    }
    if calls.is_empty() {
        let mut note = "no paid calls".to_owned();
        if let Some(card) = card {
            note.push_str(&format!(" for {card}"));
        }
        if let Some(ms) = since_ms {
            note.push_str(&format!(" since {}", shown_ms(ms)));
        }
        // On stderr, as `list` does: a script reading stdout one call per line sees none.
        super::note(&note);
        return Ok(Outcome::Success);
    }
    ctx.print(&call_lines(calls, prices, ctx.headers()).join("\n"))?;
    // On stderr, so that stdout keeps one line per call.
    let unrecorded = calls.iter().any(|c| c.model.is_none());
    for note in notes(unrecorded, !prices.is_empty()) {
        super::note(&note);
    }
    Ok(Outcome::Success)
}

/// What a call with no recorded model shows in place of one.
const UNKNOWN_MODEL: &str = "unknown model";

fn model_name(model: Option<&str>) -> String {
    model.map_or_else(|| UNKNOWN_MODEL.to_owned(), one_line)
}

/// `by half: decompose 3 calls, 812+143 tokens; workers 5 calls, 900+80 tokens in 2 runs
/// (1 charged to its card, 0 live)`, once a worker has ever run; and the cards its budget
/// parked.
fn halves_line(halves: &crate::store::Halves) -> Vec<String> {
    let (decompose, worker) = (&halves.decompose, &halves.worker);
    if worker.spawns == 0 && worker.usage.calls == 0 && worker.live == 0 {
        return Vec::new();
    }
    let mut lines = vec![format!(
        "by half: decompose {}, {}+{} tokens; workers {}, {}+{} tokens in {} ({} charged to \
         its card, {} live)",
        count(decompose.calls, "call"),
        decompose.prompt_tokens,
        decompose.completion_tokens,
        count(worker.usage.calls, "call"),
        worker.usage.prompt_tokens,
        worker.usage.completion_tokens,
        count(worker.spawns, "run"),
        worker.charged,
        worker.live
    )];
    if worker.parked_cards > 0 {
        lines.push(format!(
            "{} parked by failed worker runs (kanban.failure_limit): `hermes kanban list --parked`",
            count(worker.parked_cards, "card")
        ));
    }
    lines
}

/// `by model: m1 2 calls, 812+143 tokens, est. $0.0002; …`, or nothing without calls.
fn models_line(models: &[ModelUsage]) -> Option<String> {
    if models.is_empty() {
        return None;
    }
    let parts: Vec<String> = models
        .iter()
        .map(|m| {
            let cost = match m.estimated_cost_usd {
                None => String::new(),
                Some(None) => format!(", {NO_PRICE}"),
                Some(Some(usd)) => format!(", {}", estimate(usd)),
            };
            format!(
                "{} {}, {}+{} tokens{cost}",
                model_name(m.model.as_deref()),
                count(m.calls, "call"),
                m.prompt_tokens,
                m.completion_tokens
            )
        })
        .collect();
    Some(format!("by model: {}", parts.join("; ")))
}

/// A card's models, for its line: one name, or several joined by commas.
fn card_models(models: &[ModelUsage]) -> String {
    if models.is_empty() {
        return "-".to_owned();
    }
    models
        .iter()
        .map(|m| model_name(m.model.as_deref()))
        .collect::<Vec<_>>()
        .join(",")
}

/// What a call whose model has no price in `kanban.prices` shows in place of a cost.
const NO_PRICE: &str = "no price";

/// An estimated cost as shown: `est. $0.0123`.
fn estimate(usd: f64) -> String {
    format!("est. {}", format_cost(usd))
}

/// A card's or the board's cost, when prices are configured: the estimate over the priced
/// calls, and how many calls had no price.
fn cost_text(usd: Option<f64>, unpriced: Option<u64>) -> Option<String> {
    let usd = usd?;
    let unpriced = unpriced.unwrap_or(0);
    Some(match unpriced {
        0 => estimate(usd),
        n => format!("{} (+{} with {NO_PRICE})", estimate(usd), count(n, "call")),
    })
}

/// The notes under a listing: why a model may be unknown, and what a cost is.
fn notes(unrecorded: bool, priced: bool) -> Vec<String> {
    let mut notes = Vec::new();
    if unrecorded {
        notes.push(format!(
            "({UNKNOWN_MODEL}: a call recorded before the ledger kept each call's model)"
        ));
    }
    if priced {
        notes.push(format!(
            "(est.: estimated from {PRICES_KEY}, USD per million prompt and completion tokens; \
             the provider's invoice is what was billed)"
        ));
    }
    notes
}

/// Fills the report's estimates from `prices`; with none configured it is left without any.
fn price_report(report: &mut UsageReport, prices: &Prices) {
    if prices.is_empty() {
        return;
    }
    let price_models = |models: &mut [ModelUsage]| -> (f64, u64) {
        let (mut usd, mut unpriced) = (0.0, 0u64);
        for m in models {
            let price = m.model.as_ref().and_then(|name| prices.get(name));
            let cost = price.map(|p| p.cost(m.prompt_tokens, m.completion_tokens));
            match cost {
                Some(c) => usd += c,
                None => unpriced = unpriced.saturating_add(m.calls),
            }
            m.estimated_cost_usd = Some(cost);
        }
        (usd, unpriced)
    };
    for card in &mut report.cards {
        let (usd, unpriced) = price_models(&mut card.models);
        card.estimated_cost_usd = Some(usd);
        card.unpriced_calls = Some(unpriced);
    }
    let (usd, unpriced) = price_models(&mut report.totals.models);
    report.totals.estimated_cost_usd = Some(usd);
    report.totals.unpriced_calls = Some(unpriced);
}

/// One call's estimated cost: `None` without prices, `Some(None)` when its model has none.
#[allow(clippy::option_option)]
fn call_cost(call: &LedgerCall, prices: &Prices) -> Option<Option<f64>> {
    if prices.is_empty() {
        return None;
    }
    let price = call.model.as_ref().and_then(|name| prices.get(name));
    Some(price.map(|p| {
        p.cost(
            call.prompt_tokens.unwrap_or(0),
            call.completion_tokens.unwrap_or(0),
        )
    }))
}

fn call_json(call: &LedgerCall, prices: &Prices) -> serde_json::Value {
    let mut value = json!({
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
        "model": call.model,
    });
    // Present only with prices configured: null then means "this model has no price".
    if let (Some(cost), Some(obj)) = (call_cost(call, prices), value.as_object_mut()) {
        obj.insert("estimated_cost_usd".to_owned(), json!(cost));
    }
    value
}

fn duration_ms(call: &LedgerCall) -> Option<i64> {
    call.ended_at_ms
        .map(|end| end.saturating_sub(call.started_at_ms).max(0))
}

/// The cells of one call's line: `2026-11-30 14:05:09.120 UTC`, `t_1234abcd`, `gateway`,
/// `attempt 1 try 1`, `ok`, `HTTP 200`, `812+143 tokens`, `1.204s`, `gpt-4o-mini`, and the
/// estimate when prices are configured (`est. $0.0002`).
fn call_cells(call: &LedgerCall, prices: &Prices) -> Vec<String> {
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
    let mut cells = vec![
        shown_ms_exact(call.started_at_ms),
        call.task_id.clone().unwrap_or_else(|| "-".to_owned()),
        call.origin.clone(),
        format!(
            "attempt {} try {}",
            call.attempt.map_or("-".to_owned(), |n| n.to_string()),
            call.try_no
        ),
        call.outcome.clone(),
        call.http_status
            .map_or("HTTP -".to_owned(), |s| format!("HTTP {s}")),
        tokens,
        took,
        model_name(call.model.as_deref()),
    ];
    match call_cost(call, prices) {
        None => {}
        Some(None) => cells.push(NO_PRICE.to_owned()),
        Some(Some(usd)) => cells.push(estimate(usd)),
    }
    cells
}

/// The header over [`call_cells`] (on a terminal only, see `Context::headers`).
fn call_header(prices: &Prices) -> Vec<String> {
    let mut header: Vec<String> = [
        "STARTED", "CARD", "ORIGIN", "ATTEMPT", "OUTCOME", "HTTP", "TOKENS", "DURATION", "MODEL",
    ]
    .map(str::to_owned)
    .to_vec();
    if !prices.is_empty() {
        header.push("EST. COST".to_owned());
    }
    header
}

/// The calls' lines, their columns aligned (the duration's to the right).
fn call_lines(calls: &[LedgerCall], prices: &Prices, header: bool) -> Vec<String> {
    let rows: Vec<Vec<String>> = header
        .then(|| call_header(prices))
        .into_iter()
        .chain(calls.iter().map(|c| call_cells(c, prices)))
        .collect();
    let mut align = vec![Align::Left; 7];
    align.push(Align::Right);
    aligned(&rows, &align)
}

/// What `--since` accepts, for its help and its usage error.
const SINCE_FORMS: &str = "a duration back from now (90s, 30m, 1h30m, 2d, 1w, or plain \
     seconds), a date or date-time, UTC unless it carries an offset (2026-11-30, \
     2026-11-30T10:00, 2026-11-30 10:00:05.250, 2026-11-30T10:00+01:00), today or yesterday";

/// `--since`: a span back from now (jiff's friendly format), a moment (ISO 8601 / RFC 3339,
/// naive ones in UTC), or the start of today or yesterday.
fn parse_since(text: &str) -> Result<Since, String> {
    let text = text.trim();
    let bad = || format!("{text:?} is not a time: use {SINCE_FORMS}");
    match text.to_ascii_lowercase().as_str() {
        "today" => return Ok(Since::DaysBack(0)),
        "yesterday" => return Ok(Since::DaysBack(1)),
        _ => {}
    }
    if let Ok(at) = text.parse::<jiff::Timestamp>() {
        return Ok(Since::At(at.as_millisecond()));
    }
    if let Ok(at) = text.parse::<jiff::ZonedDateTime>() {
        return Ok(Since::At(at.timestamp().as_millisecond()));
    }
    // A date-time without an offset is UTC: the suite and scripts name moments that way, and
    // a reading that moved with the reader's TZ would count different calls on each machine.
    if let Ok(at) = text.parse::<jiff::civil::DateTime>() {
        let at = at
            .to_zoned_datetime(jiff::tz::TimeZone::UTC)
            .map_err(|_| bad())?;
        return Ok(Since::At(at.timestamp().as_millisecond()));
    }
    // Plain seconds, as before units were required.
    let span = if text.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        format!("{text}s").parse::<jiff::Span>()
    } else {
        text.parse::<jiff::Span>()
    }
    .map_err(|_| bad())?;
    if span.is_negative() {
        return Err(format!(
            "{text:?} points into the future: use {SINCE_FORMS}"
        ));
    }
    Ok(Since::Ago(span))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Price;
    use crate::store::{CardUsage, UsageTotals};

    /// Where `--since TEXT` starts, seen from `now` (ms) in UTC.
    fn start(text: &str, now: i64) -> Result<i64, String> {
        let since = parse_since(text)?;
        since
            .start_ms(now, &jiff::tz::TimeZone::UTC)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn spans_count_back_from_now() {
        let now = 1_795_981_327_120; // 2026-11-29 19:42:07.120 UTC
        for (text, back_s) in [
            ("90s", 90),
            ("30m", 1800),
            ("2h", 7200),
            ("1h30m", 5400),
            ("1d", 86_400),
            ("2d", 172_800),
            ("1w", 604_800),
            ("45", 45),
            ("2 hours 5 minutes", 7500),
        ] {
            assert_eq!(start(text, now), Ok(now - back_s * 1000), "{text}");
        }
        assert_eq!(start("0.5", now), Ok(now - 500));
        assert_eq!(start("0", now), Ok(now));
        // So far back that no date is left: from the beginning of representable time.
        assert!(start("175000000h", now).is_ok_and(|ms| ms < 0));
    }

    #[test]
    fn moments_and_days() {
        let now = 1_795_981_327_120;
        assert_eq!(start("1970-01-01", now), Ok(0));
        assert_eq!(start("2000-02-29", now), Ok(951_782_400_000));
        assert_eq!(start("2026-11-29T19:42:07Z", now), Ok(1_795_981_327_000));
        assert_eq!(start("2026-11-29 19:42:07.25", now), Ok(1_795_981_327_250));
        assert_eq!(
            start("2026-11-29T21:42:07+02:00", now),
            Ok(1_795_981_327_000)
        );
        assert_eq!(start("2026-11-29T19:42", now), Ok(1_795_981_320_000));
        let midnight = 1_795_910_400_000; // 2026-11-29 00:00 UTC
        assert_eq!(start("today", now), Ok(midnight));
        assert_eq!(start("Yesterday", now), Ok(midnight - 86_400_000));
        let paris = jiff::tz::TimeZone::fixed(jiff::tz::offset(1));
        assert_eq!(
            parse_since("today").map(|s| s.start_ms(now, &paris).ok()),
            Ok(Some(midnight - 3_600_000))
        );
    }

    #[test]
    fn a_bad_since_names_the_accepted_forms() {
        for bad in [
            "2026-02-30",
            "2026-13-01",
            "2026-11-29T25:00",
            "2026-11-29X",
            "2026-1a-01",
            "2026-11-29T19:42:07.x",
            "2026-1é-01",
            "soon",
            "-3m",
            "3 fortnights",
            "",
        ] {
            let e = parse_since(bad).expect_err(bad);
            assert!(e.contains("1h30m") && e.contains("yesterday"), "{bad}: {e}");
        }
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
            model: Some("gpt-4o-mini".to_owned()),
        };
        crate::clock::set_show_utc(true);
        let none = Prices::new();
        let line = |call: &LedgerCall, prices: &Prices| call_cells(call, prices).join("  ");
        assert_eq!(
            line(&call, &none),
            "2026-11-29 19:42:07.120 UTC  t_1234abcd  gateway  attempt 2 try 1  ok  HTTP 200  \
             812+143 tokens  1.204s  gpt-4o-mini"
        );
        let mut prices = Prices::new();
        prices.insert(
            "gpt-4o-mini".to_owned(),
            Price {
                input: 0.15,
                output: 0.60,
            },
        );
        assert!(line(&call, &prices).ends_with("1.204s  gpt-4o-mini  est. $0.0002"));
        assert_eq!(call_json(&call, &prices)["model"], "gpt-4o-mini");
        let cost = call_json(&call, &prices)["estimated_cost_usd"]
            .as_f64()
            .unwrap();
        assert!((cost - 0.000_207_6).abs() < 1e-12, "{cost}");
        assert!(call_json(&call, &none).get("estimated_cost_usd").is_none());
        let old = LedgerCall {
            model: None,
            ..call.clone()
        };
        assert!(line(&old, &prices).ends_with("1.204s  unknown model  no price"));
        assert_eq!(call_json(&old, &prices)["model"], serde_json::Value::Null);
        assert_eq!(
            call_json(&old, &prices)["estimated_cost_usd"],
            serde_json::Value::Null
        );
        let in_flight = LedgerCall {
            ended_at_ms: None,
            outcome: "in_flight".to_owned(),
            http_status: None,
            prompt_tokens: None,
            completion_tokens: None,
            ..call.clone()
        };
        assert!(line(&in_flight, &none).ends_with("HTTP -  - tokens  not finished  gpt-4o-mini"));
        // Every column starts where its header does, whatever the cells' widths and characters.
        let odd = LedgerCall {
            task_id: Some("t_\u{1b}[2J模型".to_owned()),
            origin: "sweep".to_owned(),
            model: Some("模型-名".to_owned()),
            ..in_flight.clone()
        };
        for prices in [&none, &prices] {
            let lines = call_lines(
                &[call.clone(), odd.clone(), in_flight.clone()],
                prices,
                true,
            );
            let starts = |line: &str| -> Vec<usize> {
                // Display columns where each cell starts (cells are two spaces apart).
                let mut starts = vec![0];
                let mut col = 0;
                let mut gap = 0;
                for ch in line.chars() {
                    if ch == ' ' {
                        gap += 1;
                    } else {
                        if gap >= 2 {
                            starts.push(col);
                        }
                        gap = 0;
                    }
                    col += crate::cli::table::width(ch.encode_utf8(&mut [0; 4]));
                }
                starts
            };
            let mut header = starts(&lines[0]);
            assert_eq!(header.len(), call_header(prices).len(), "{lines:#?}");
            // The duration is right-aligned: the model after it starts where its header does.
            header.remove(7);
            for line in &lines[1..] {
                let cells = starts(line);
                assert!(header.iter().all(|c| cells.contains(c)), "{lines:#?}");
            }
        }
    }

    #[test]
    fn a_report_is_priced_per_model_and_summed() {
        let model = |name: Option<&str>, calls, p, c| ModelUsage {
            model: name.map(str::to_owned),
            calls,
            prompt_tokens: p,
            completion_tokens: c,
            estimated_cost_usd: None,
        };
        let mix = vec![
            model(Some("big"), 2, 1_000_000, 100_000),
            model(Some("free-tier"), 1, 500, 50),
            model(None, 3, 900, 90),
        ];
        let card = CardUsage {
            task_id: "t_1".to_owned(),
            title: None,
            status: None,
            calls: 6,
            ok: 6,
            failed: 0,
            unknown: 0,
            unreachable: 0,
            prompt_tokens: 0,
            completion_tokens: 0,
            attempts: 1,
            parked: false,
            last_call_at: None,
            models: mix.clone(),
            estimated_cost_usd: None,
            unpriced_calls: None,
        };
        let mut report = UsageReport {
            halves: crate::store::Halves::default(),
            since: None,
            totals: UsageTotals {
                models: mix,
                ..UsageTotals::default()
            },
            window: crate::store::UsageWindow {
                calls_last_hour: 0,
                limit: 1,
            },
            pause: None,
            unreachable: None,
            cards: vec![card],
        };
        let unpriced = report.clone();
        price_report(&mut report, &Prices::new());
        assert_eq!(report, unpriced, "no prices: no estimate at all");

        let mut prices = Prices::new();
        prices.insert(
            "big".to_owned(),
            Price {
                input: 3.0,
                output: 15.0,
            },
        );
        price_report(&mut report, &prices);
        let card = &report.cards[0];
        // 1M prompt tokens at $3 + 100k completion tokens at $15.
        assert_eq!(card.estimated_cost_usd, Some(4.5));
        assert_eq!(card.unpriced_calls, Some(4));
        assert_eq!(card.models[0].estimated_cost_usd, Some(Some(4.5)));
        assert_eq!(card.models[1].estimated_cost_usd, Some(None));
        assert_eq!(report.totals.estimated_cost_usd, Some(4.5));
        assert_eq!(
            cost_text(card.estimated_cost_usd, card.unpriced_calls).as_deref(),
            Some("est. $4.5000 (+4 calls with no price)")
        );
        assert_eq!(
            cost_text(Some(0.0123), Some(0)).as_deref(),
            Some("est. $0.0123")
        );
        assert_eq!(cost_text(None, None), None);
        assert_eq!(
            models_line(&report.totals.models).as_deref(),
            Some(
                "by model: big 2 calls, 1000000+100000 tokens, est. $4.5000; free-tier 1 call, \
                 500+50 tokens, no price; unknown model 3 calls, 900+90 tokens, no price"
            )
        );
        assert_eq!(
            card_models(&report.cards[0].models),
            "big,free-tier,unknown model"
        );
    }

    #[test]
    fn notes_appear_only_when_they_apply() {
        assert!(notes(false, false).is_empty());
        assert_eq!(notes(true, false).len(), 1);
        assert!(notes(true, false)[0].starts_with("(unknown model: "));
        assert!(notes(false, true)[0].contains("kanban.prices"));
    }
}
