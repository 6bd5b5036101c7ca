//! Every paid call, visible (B9): one `hermes_aux_ledger` row per HTTP request, opened before
//! the request leaves and closed when it ends, so a crash mid-call still leaves its row. The
//! board-wide pause (B5) and the hourly ceiling (B6) are read from the same tables, which is
//! what makes them hold across restarts and across processes.

use rusqlite::{named_params, params};
use serde::Serialize;

use super::claims::claim_is_ours;
use super::guards::{auto_gate, board_pause, calls_since, unreachable_pause, AutoGate, HOUR_MS};
use super::{frame, lenient, SqlResultExt, Store, StoreError};
use crate::core::{BeginRefusal, Half, LedgerOutcome, Origin};

/// A ledger row about to be opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerOpen {
    pub task_id: String,
    pub origin: Origin,
    pub attempt: u32,
    /// 1 for the attempt's first request, then one more per transient retry.
    pub try_no: u32,
    pub started_at_ms: i64,
    /// For automatic attempts: the hourly ceiling. When set, the row (and so the request) is
    /// refused if the board is paused or the rolling hour already holds this many paid calls,
    /// so no request leaves once another one's refusal has been recorded (B5, B6).
    pub guards: Option<u32>,
    /// The attempt's lease: no row is opened (no request leaves) once another attempt took the
    /// card over. `None` only outside an attempt (tests, tools).
    pub fence: Option<String>,
    /// The model the request names, so the bill says what each call was priced as.
    pub model: Option<String>,
}

/// How a ledger row's request ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerClose {
    pub ended_at_ms: i64,
    pub outcome: LedgerOutcome,
    pub http_status: Option<u16>,
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    /// A short human-readable note (the error), if any.
    pub detail: Option<String>,
}

impl LedgerClose {
    /// The end of a request that says nothing more than its outcome.
    pub fn new(ended_at_ms: i64, outcome: LedgerOutcome) -> LedgerClose {
        LedgerClose {
            ended_at_ms,
            outcome,
            http_status: None,
            prompt_tokens: None,
            completion_tokens: None,
            detail: None,
        }
    }
}

/// `kanban usage`: what the ledger says was paid.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UsageReport {
    /// Unix seconds the report starts from, if limited.
    pub since: Option<i64>,
    pub totals: UsageTotals,
    /// The same calls split by half: decompose calls and workers' turns (which share the
    /// pause and the ceiling), with the workers' runs.
    pub halves: Halves,
    pub window: UsageWindow,
    pub pause: Option<UsagePause>,
    /// The pause in force because the provider could not be reached (present only then).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreachable: Option<UsagePause>,
    pub cards: Vec<CardUsage>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Totals over the report's period. `calls` are the requests that may have been billed: `ok`,
/// `failed`, `unknown` and any still in flight. Requests that never reached the provider are not
/// among them; they are `unreachable`. The two extra counts appear only when non-zero.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct UsageTotals {
    pub calls: u64,
    pub ok: u64,
    pub failed: u64,
    /// Left in flight by a process that died: maybe billed.
    #[serde(skip_serializing_if = "is_zero")]
    pub unknown: u64,
    /// Never reached the provider: not billed, not counted in `calls`.
    #[serde(skip_serializing_if = "is_zero")]
    pub unreachable: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// The same calls by the model they named.
    pub models: Vec<ModelUsage>,
    /// With `kanban.prices`: the estimated cost of the calls whose model has a price.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimated_cost_usd: Option<f64>,
    /// With `kanban.prices`: the calls whose model has no price (not in the estimate).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unpriced_calls: Option<u64>,
}

/// Calls that named one model (or, `model: None`, calls from before the ledger recorded it).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ModelUsage {
    pub model: Option<String>,
    pub calls: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// With `kanban.prices`: the estimate, or null when this model has no price. Absent when no
    /// prices are configured.
    #[allow(clippy::option_option)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimated_cost_usd: Option<Option<f64>>,
}

/// Calls and tokens of one half, over the report's period (`calls` as in [`UsageTotals`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct HalfUsage {
    pub calls: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

/// The workers' half: its calls, and the runs they belong to (S9).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct WorkerUsage {
    #[serde(flatten)]
    pub usage: HalfUsage,
    /// Workers spawned over the period.
    pub spawns: u64,
    /// Those whose runs ended without completing and were charged to their card.
    pub charged: u64,
    /// Workers that may still be running now.
    pub live: u64,
    /// Cards parked by their spawn budget now.
    pub parked_cards: u64,
}

/// Both halves of the board's spend.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Halves {
    pub decompose: HalfUsage,
    pub worker: WorkerUsage,
}

/// The hourly ceiling's state now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UsageWindow {
    pub calls_last_hour: u64,
    pub limit: u32,
}

/// A pause in force.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UsagePause {
    /// Unix seconds.
    pub until: f64,
    pub reason: String,
}

/// One card's calls over the report's period.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CardUsage {
    pub task_id: String,
    pub title: Option<String>,
    pub status: Option<String>,
    pub calls: u64,
    pub ok: u64,
    pub failed: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub unknown: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub unreachable: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub attempts: u32,
    pub parked: bool,
    /// Unix seconds of the card's latest call.
    pub last_call_at: Option<f64>,
    /// The card's calls by the model they named.
    pub models: Vec<ModelUsage>,
    /// With `kanban.prices`: the estimated cost of the calls whose model has a price.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimated_cost_usd: Option<f64>,
    /// With `kanban.prices`: the calls whose model has no price (not in the estimate).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unpriced_calls: Option<u64>,
}

impl Store {
    /// Opens a ledger row for a request about to be sent; returns its id, or the guard's refusal
    /// when `guards` is set and the board is paused or at its ceiling (then nothing may be sent).
    pub fn ledger_open(
        &mut self,
        open: &LedgerOpen,
    ) -> Result<Result<i64, BeginRefusal>, StoreError> {
        self.write(|tx| {
            if !claim_is_ours(tx, &open.task_id, open.fence.as_deref())? {
                return Ok(Err(BeginRefusal::ClaimLost));
            }
            if let Some(limit) = open.guards {
                match auto_gate(tx, open.started_at_ms, limit)? {
                    AutoGate::Open { .. } => {}
                    AutoGate::Paused { until_ms, reason } => {
                        return Ok(Err(BeginRefusal::Paused { until_ms, reason }))
                    }
                    AutoGate::CeilingReached { calls, limit } => {
                        return Ok(Err(BeginRefusal::CeilingReached { calls, limit }))
                    }
                }
            }
            open_row(
                tx,
                &RowStart {
                    task_id: &open.task_id,
                    purpose: Half::Decompose,
                    origin: open.origin.as_str(),
                    attempt: open.attempt,
                    try_no: open.try_no,
                    started_at_ms: open.started_at_ms,
                    model: open.model.as_deref(),
                    run_id: None,
                },
            )
            .map(Ok)
        })
    }

    /// Closes a ledger row with how its request ended.
    pub fn ledger_close(&mut self, id: i64, close: &LedgerClose) -> Result<(), StoreError> {
        self.write(|tx| {
            tx.execute(
                &format!(
                    "UPDATE hermes_aux_ledger SET ended_at_ms = ?2, ended_boot_ms = {},
                         outcome = ?3, http_status = ?4, prompt_tokens = ?5,
                         completion_tokens = ?6, detail = ?7
                     WHERE id = ?1",
                    ended_boot_ms("?2")
                ),
                params![
                    id,
                    close.ended_at_ms,
                    close.outcome.as_str(),
                    close.http_status,
                    close.prompt_tokens.map(saturating_i64),
                    close.completion_tokens.map(saturating_i64),
                    close.detail
                ],
            )
            .sql("closing a ledger row")?;
            Ok(())
        })
    }

    /// `kanban usage`: calls and tokens per card and in total since `since_ms` (all time when
    /// `None`), with the hourly window and any pause in force at `now_ms`.
    pub fn usage(
        &self,
        since_ms: Option<i64>,
        now_ms: i64,
        calls_per_hour: u32,
    ) -> Result<UsageReport, StoreError> {
        self.read(|conn| {
            let since = since_ms.unwrap_or(i64::MIN);
            // Each call's start in this reader's frame (see `store::frame`).
            let started = started_seen("l");
            let mut stmt = conn
                .prepare(&format!(
                    // Token sums are taken in two halves (the high and the low 32 bits of each
                    // row's count, a negative one as 0), so that no sum can overflow SQLite's
                    // integer (`SUM` fails on overflow): rows another tool wrote, or a provider
                    // that reports 2^64 - 1 tokens, still add up, to a saturated total.
                    "SELECT l.task_id, t.title, t.status,
                            SUM(l.outcome != :unreachable),
                            SUM(l.outcome = :ok),
                            SUM(l.outcome NOT IN (:ok, :in_flight, :unknown, :unreachable)),
                            SUM(MAX(COALESCE(CAST(l.prompt_tokens AS INTEGER), 0), 0) >> 32),
                            SUM(MAX(COALESCE(CAST(l.prompt_tokens AS INTEGER), 0), 0) & 4294967295),
                            SUM(MAX(COALESCE(CAST(l.completion_tokens AS INTEGER), 0), 0) >> 32),
                            SUM(MAX(COALESCE(CAST(l.completion_tokens AS INTEGER), 0), 0) & 4294967295),
                            s.attempts,
                            s.parked_at_ms IS NOT NULL,
                            MAX(CAST({started} AS INTEGER)),
                            SUM(l.outcome = :unknown),
                            SUM(l.outcome = :unreachable)
                     FROM hermes_aux_ledger l
                     LEFT JOIN tasks t ON t.id = l.task_id
                     LEFT JOIN hermes_decompose_state s ON s.task_id = l.task_id
                     WHERE {started} >= :since
                     GROUP BY l.task_id
                     ORDER BY MAX({started}) DESC, l.task_id",
                ))
                .sql("reading the ledger")?;
            let bound = named_params! {
                ":since": since,
                ":ok": LedgerOutcome::Ok.as_str(),
                ":in_flight": LedgerOutcome::InFlight.as_str(),
                ":unknown": LedgerOutcome::Unknown.as_str(),
                ":unreachable": LedgerOutcome::Unreachable.as_str(),
            };
            let rows = stmt
                .query_map(bound, |r| {
                    Ok(CardUsage {
                        task_id: lenient::text(r, 0)?.unwrap_or_default(),
                        // Another tool's title may not be text: shown as best it can be.
                        title: lenient::text(r, 1)?,
                        status: lenient::text(r, 2)?,
                        calls: count(r.get(3)?),
                        ok: count(r.get(4)?),
                        failed: count(r.get(5)?),
                        unknown: count(r.get(13)?),
                        unreachable: count(r.get(14)?),
                        prompt_tokens: halves_sum(r.get(6)?, r.get(7)?),
                        completion_tokens: halves_sum(r.get(8)?, r.get(9)?),
                        attempts: lenient::count_u32(r, 10)?.unwrap_or(0),
                        parked: r.get(11)?,
                        last_call_at: lenient::int(r, 12)?.map(|ms| ms as f64 / 1000.0),
                        models: Vec::new(),
                        estimated_cost_usd: None,
                        unpriced_calls: None,
                    })
                })
                .sql("reading the ledger")?;
            let mut cards: Vec<CardUsage> =
                rows.collect::<Result<_, _>>().sql("reading the ledger")?;
            let mut by_model = conn
                .prepare(&format!(
                    // As above, token sums in two halves.
                    "SELECT l.task_id, l.model,
                            SUM(l.outcome != ?2),
                            SUM(MAX(COALESCE(CAST(l.prompt_tokens AS INTEGER), 0), 0) >> 32),
                            SUM(MAX(COALESCE(CAST(l.prompt_tokens AS INTEGER), 0), 0) & 4294967295),
                            SUM(MAX(COALESCE(CAST(l.completion_tokens AS INTEGER), 0), 0) >> 32),
                            SUM(MAX(COALESCE(CAST(l.completion_tokens AS INTEGER), 0), 0) & 4294967295)
                     FROM hermes_aux_ledger l
                     WHERE {started} >= ?1
                     GROUP BY l.task_id, l.model
                     HAVING SUM(l.outcome != ?2) > 0
                     ORDER BY l.task_id, l.model",
                ))
                .sql("reading the ledger")?;
            let groups = by_model
                .query_map(params![since, LedgerOutcome::Unreachable.as_str()], |r| {
                    Ok((
                        lenient::text(r, 0)?.unwrap_or_default(),
                        ModelUsage {
                            model: lenient::text(r, 1)?,
                            calls: count(r.get(2)?),
                            prompt_tokens: halves_sum(r.get(3)?, r.get(4)?),
                            completion_tokens: halves_sum(r.get(5)?, r.get(6)?),
                            estimated_cost_usd: None,
                        },
                    ))
                })
                .sql("reading the ledger")?;
            let at: std::collections::HashMap<String, usize> = cards
                .iter()
                .enumerate()
                .map(|(i, c)| (c.task_id.clone(), i))
                .collect();
            for group in groups {
                let (task_id, usage) = group.sql("reading the ledger")?;
                if let Some(&i) = at.get(&task_id) {
                    cards[i].models.push(usage);
                }
            }
            let mut totals = cards.iter().fold(UsageTotals::default(), |mut t, c| {
                t.calls = t.calls.saturating_add(c.calls);
                t.ok = t.ok.saturating_add(c.ok);
                t.failed = t.failed.saturating_add(c.failed);
                t.unknown = t.unknown.saturating_add(c.unknown);
                t.unreachable = t.unreachable.saturating_add(c.unreachable);
                t.prompt_tokens = saturated_tokens(t.prompt_tokens, c.prompt_tokens);
                t.completion_tokens = saturated_tokens(t.completion_tokens, c.completion_tokens);
                t
            });
            for usage in cards.iter().flat_map(|c| &c.models) {
                match totals.models.iter_mut().find(|m| m.model == usage.model) {
                    Some(m) => {
                        m.calls = m.calls.saturating_add(usage.calls);
                        m.prompt_tokens = saturated_tokens(m.prompt_tokens, usage.prompt_tokens);
                        m.completion_tokens =
                            saturated_tokens(m.completion_tokens, usage.completion_tokens);
                    }
                    None => totals.models.push(usage.clone()),
                }
            }
            totals.models.sort_by(|a, b| a.model.cmp(&b.model));
            let in_force = |pause: Option<super::Pause>| {
                pause.filter(|p| p.until_ms > now_ms).map(|p| UsagePause {
                    until: p.until_ms as f64 / 1000.0,
                    reason: p.reason,
                })
            };
            let pause = in_force(board_pause(conn)?);
            let unreachable = in_force(unreachable_pause(conn)?);
            Ok(UsageReport {
                since: since_ms.map(|ms| ms.div_euclid(1000)),
                halves: halves(conn, since)?,
                totals,
                window: UsageWindow {
                    calls_last_hour: calls_since(conn, now_ms.saturating_sub(HOUR_MS))?,
                    limit: calls_per_hour,
                },
                pause,
                unreachable,
                cards,
            })
        })
    }
}

/// Both halves of the spend since `since` (see [`Halves`]).
fn halves(conn: &rusqlite::Connection, since: i64) -> Result<Halves, StoreError> {
    // Each row's start in this reader's frame (see `store::frame`).
    let started = started_seen("l");
    let half = |purpose: Half| -> Result<HalfUsage, StoreError> {
        conn.query_row(
            // Token sums in two halves, as the usage query does.
            &format!(
                "SELECT SUM(outcome != ?3),
                        SUM(MAX(COALESCE(CAST(prompt_tokens AS INTEGER), 0), 0) >> 32),
                        SUM(MAX(COALESCE(CAST(prompt_tokens AS INTEGER), 0), 0) & 4294967295),
                        SUM(MAX(COALESCE(CAST(completion_tokens AS INTEGER), 0), 0) >> 32),
                        SUM(MAX(COALESCE(CAST(completion_tokens AS INTEGER), 0), 0) & 4294967295)
                 FROM hermes_aux_ledger l WHERE purpose = ?1 AND {started} >= ?2"
            ),
            params![purpose.as_str(), since, LedgerOutcome::Unreachable.as_str()],
            |r| {
                Ok(HalfUsage {
                    calls: count(r.get(0)?),
                    prompt_tokens: halves_sum(r.get(1)?, r.get(2)?),
                    completion_tokens: halves_sum(r.get(3)?, r.get(4)?),
                })
            },
        )
        .sql("reading the ledger's halves")
    };
    let (spawns, charged, live): (Option<i64>, Option<i64>, Option<i64>) = conn
        .query_row(
            &format!(
                "SELECT COUNT(*), SUM(charged = 1),
                        (SELECT COUNT(*) FROM hermes_spawn_ledger WHERE exited_at_ms IS NULL)
                 FROM hermes_spawn_ledger l WHERE {} >= ?1",
                super::runs::spawn_started_seen("l")
            ),
            [since],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .sql("reading the spawn ledger")?;
    let parked: Option<i64> = conn
        .query_row(
            "SELECT COUNT(*) FROM hermes_spawn_state WHERE parked_at_ms IS NOT NULL",
            [],
            |r| r.get(0),
        )
        .sql("reading the spawn ledger")?;
    Ok(Halves {
        decompose: half(Half::Decompose)?,
        worker: WorkerUsage {
            usage: half(Half::Worker)?,
            spawns: count(spawns),
            charged: count(charged),
            live: count(live),
            parked_cards: count(parked),
        },
    })
}

/// A ledger row's start, in the reader's frame, for the row aliased `alias`.
pub(crate) fn started_seen(alias: &str) -> String {
    frame::seen(
        &format!("{alias}.started_at_ms"),
        &format!("{alias}.boot"),
        &format!("{alias}.started_boot_ms"),
    )
}

/// A ledger row's end on its boot's clock, for an end `wall` written now: only when the row
/// was opened on the reader's boot (its start's clock is the one the end is measured on).
pub(crate) fn ended_boot_ms(wall: &str) -> String {
    format!(
        "CASE WHEN {} THEN {} END",
        frame::same_boot("boot", "started_boot_ms"),
        frame::boot_ms_of(wall)
    )
}

/// A ledger row as it is opened, in flight: whichever half sends the request.
pub(crate) struct RowStart<'a> {
    pub task_id: &'a str,
    pub purpose: Half,
    /// Who sends it (`Origin::as_str`, or the worker half's own name).
    pub origin: &'a str,
    /// The attempt (a decompose call) or the run's turn (a worker's request).
    pub attempt: u32,
    pub try_no: u32,
    pub started_at_ms: i64,
    pub model: Option<&'a str>,
    /// The worker run the request belongs to; `None` for a decompose call.
    pub run_id: Option<i64>,
}

/// Opens a ledger row for a request about to leave, its start on the wall clock and on this
/// boot's clock (see `store::frame`): the one writer of a request's start, for both halves.
pub(crate) fn open_row(
    tx: &rusqlite::Transaction<'_>,
    row: &RowStart<'_>,
) -> Result<i64, StoreError> {
    tx.execute(
        &format!(
            "INSERT INTO hermes_aux_ledger
                 (task_id, purpose, origin, attempt, try, started_at_ms, outcome, model, run_id,
                  boot, started_boot_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, {}, {})",
            frame::boot_id(),
            frame::boot_ms_of("?6")
        ),
        params![
            row.task_id,
            row.purpose.as_str(),
            row.origin,
            row.attempt,
            row.try_no,
            row.started_at_ms,
            LedgerOutcome::InFlight.as_str(),
            row.model,
            row.run_id
        ],
    )
    .sql("opening a ledger row")?;
    Ok(tx.last_insert_rowid())
}

/// A count SQLite summed (NULL for no rows), as a count.
fn count(n: Option<i64>) -> u64 {
    n.and_then(|n| u64::try_from(n).ok()).unwrap_or(0)
}

/// The largest token count the board holds, in a row or in any sum of rows: SQLite's largest
/// integer. A count at it means "at least this many".
pub const MAX_TOKENS: u64 = i64::MAX as u64;

/// A provider-reported count as SQLite's integer; an absurd one is kept as the largest.
fn saturating_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A token sum from its two halves (see the usage query), saturated at [`MAX_TOKENS`].
fn halves_sum(high: Option<i64>, low: Option<i64>) -> u64 {
    let sum = (i128::from(high.unwrap_or(0)) << 32) + i128::from(low.unwrap_or(0));
    u64::try_from(sum.clamp(0, i128::from(MAX_TOKENS))).unwrap_or(MAX_TOKENS)
}

/// Two token counts added, saturated at [`MAX_TOKENS`].
fn saturated_tokens(a: u64, b: u64) -> u64 {
    a.saturating_add(b).min(MAX_TOKENS)
}
