//! One paid decompose attempt, end to end, with its bounds.
//!
//! The order is the point: the attempt is recorded on the card (B1) before any request leaves,
//! every HTTP request gets a ledger row opened before it is sent and closed after (B9), the reply
//! is validated whole before the board is touched (B3), and the apply transaction re-checks that
//! the card is still in triage (B4). A failure of any kind is written back as a `decompose_failed`
//! event with the next due time, and the card is parked once its budget is spent.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use crate::aux_client::{AuxClient, AuxError, AuxSettings, Completion};
use crate::config::Config;
use crate::decompose::prompt::{build_messages, PromptCard};
use crate::decompose::reply::{parse_reply, GraphLimits, Rejection};
use crate::decompose::Plan;
use crate::store::{
    now_ms, ApplyOptions, ApplyResult, AttemptTicket, BeginPolicy, BeginRefusal, FailureRecord,
    LedgerClose, LedgerOpen, Origin, Store, StoreError,
};

/// Cap on the exponential backoff between failed attempts (B2).
pub const MAX_BACKOFF: Duration = Duration::from_secs(3600);
/// Cap on a provider's `Retry-After` (B5).
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);
/// Board-wide pause after a 429 that carried no usable `Retry-After`.
pub const DEFAULT_RATE_LIMIT_PAUSE: Duration = Duration::from_secs(60);

/// Everything one attempt needs that does not change between attempts of a tick.
#[derive(Clone)]
pub struct AttemptContext {
    pub config: Arc<Config>,
    pub client: Arc<AuxClient>,
    /// Profile names the model may route children to.
    pub roster: Arc<Vec<String>>,
    pub db_path: PathBuf,
}

impl AttemptContext {
    /// Builds the aux client from the config. Fails (before anything is paid) when the config
    /// names no provider endpoint or model.
    pub fn new(
        config: Arc<Config>,
        api_key: Option<String>,
        roster: Vec<String>,
        db_path: PathBuf,
    ) -> Result<Self, AttemptSetupError> {
        let base_url = config
            .model
            .base_url
            .clone()
            .filter(|url| !url.trim().is_empty())
            .ok_or(AttemptSetupError::MissingKey("model.base_url"))?;
        let model = config
            .model
            .default
            .clone()
            .filter(|m| !m.trim().is_empty())
            .ok_or(AttemptSetupError::MissingKey("model.default"))?;
        let client = AuxClient::new(AuxSettings {
            base_url,
            model,
            api_key,
            timeout: config.auxiliary.timeout,
            max_body_bytes: crate::aux_client::DEFAULT_MAX_BODY_BYTES,
            temperature: 0.2,
            max_tokens: 4000,
        })
        .map_err(AttemptSetupError::Client)?;
        Ok(Self {
            config,
            client: Arc::new(client),
            roster: Arc::new(roster),
            db_path,
        })
    }
}

/// Why no attempt can be made at all with this configuration.
#[derive(Debug, thiserror::Error)]
pub enum AttemptSetupError {
    #[error("config.yaml: {0} is not set; it names the provider the decomposer calls")]
    MissingKey(&'static str),
    #[error("cannot build the provider client: {0}")]
    Client(AuxError),
}

/// A provider-wide fault: the dispatcher pauses every card, not just this one (B5).
#[derive(Debug, Clone, PartialEq)]
pub enum ProviderFault {
    /// 401/403: the key is wrong or revoked.
    Auth { status: u16 },
    /// 402: the account cannot pay.
    Billing { status: u16 },
    /// 429: the provider asked us to slow down.
    RateLimited { retry_after: Option<Duration> },
}

impl ProviderFault {
    fn from_error(err: &AuxError) -> Option<Self> {
        match err {
            AuxError::Auth { status } => Some(Self::Auth { status: *status }),
            AuxError::Billing { status } => Some(Self::Billing { status: *status }),
            AuxError::RateLimited { retry_after } => Some(Self::RateLimited {
                retry_after: *retry_after,
            }),
            _ => None,
        }
    }

    /// How long every automatic attempt should wait after this fault.
    pub fn pause_for(&self, provider_cooldown: Duration) -> Duration {
        match self {
            Self::Auth { .. } | Self::Billing { .. } => provider_cooldown,
            Self::RateLimited { retry_after } => retry_after
                .unwrap_or(DEFAULT_RATE_LIMIT_PAUSE)
                .min(MAX_RETRY_AFTER),
        }
    }

    /// A short label for logs and the pause record.
    pub fn describe(&self) -> String {
        match self {
            Self::Auth { status } => format!("provider refused the API key (HTTP {status})"),
            Self::Billing { status } => format!("provider requires payment (HTTP {status})"),
            Self::RateLimited {
                retry_after: Some(after),
            } => {
                format!(
                    "provider rate limit (HTTP 429, Retry-After {}s)",
                    after.as_secs_f64()
                )
            }
            Self::RateLimited { retry_after: None } => "provider rate limit (HTTP 429)".to_owned(),
        }
    }
}

/// What one attempt did. Serialises to the `decompose --json` line.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AttemptOutcome {
    pub task_id: String,
    pub ok: bool,
    pub reason: String,
    pub fanout: bool,
    pub child_ids: Option<Vec<String>>,
    pub new_title: Option<String>,
    /// HTTP requests this attempt sent (0 when it was refused before paying).
    #[serde(skip)]
    pub requests: u32,
    /// Set when the failure was provider-wide.
    #[serde(skip)]
    pub provider_fault: Option<ProviderFault>,
    /// Set when this failure spent the card's last automatic attempt.
    #[serde(skip)]
    pub parked: bool,
    /// The card's attempt number (0 when refused before paying).
    #[serde(skip)]
    pub attempt: u32,
}

impl AttemptOutcome {
    /// An outcome that has not succeeded (yet): a refusal, or the start of a paid attempt whose
    /// result is filled in as it goes.
    fn not_ok(task_id: &str, reason: String) -> Self {
        Self {
            task_id: task_id.to_owned(),
            ok: false,
            reason,
            fanout: false,
            child_ids: None,
            new_title: None,
            requests: 0,
            provider_fault: None,
            parked: false,
            attempt: 0,
        }
    }
}

/// Why an attempt could not be run or recorded; the board may be unreachable.
#[derive(Debug, thiserror::Error)]
pub enum AttemptError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the board worker stopped unexpectedly: {0}")]
    Join(String),
}

/// The card was not attempted, and nothing was paid.
#[derive(Debug, Clone)]
pub struct Refused {
    pub refusal: BeginRefusal,
    pub outcome: AttemptOutcome,
}

/// Runs one attempt on `task_id`.
///
/// `shutdown` flipping to `true` aborts the request in flight; the abort is recorded like any
/// other failure (the attempt was already counted before the request left).
pub async fn run_attempt(
    ctx: &AttemptContext,
    task_id: &str,
    origin: Origin,
    shutdown: watch::Receiver<bool>,
) -> Result<Result<AttemptOutcome, Refused>, AttemptError> {
    let cfg = ctx.config.clone();
    let store = BoardHandle::open(&ctx.db_path).await?;

    let now = now_ms();
    let policy = BeginPolicy {
        origin,
        now_ms: now,
        max_attempts: cfg.kanban.decompose_max_attempts,
        calls_per_hour: cfg.kanban.decompose_calls_per_hour,
        // Until the outcome is known, the card is treated as failed: a crash mid-call must not
        // make it due again at once.
        provisional_due_ms: {
            let cfg = cfg.clone();
            Box::new(move |attempt| now + backoff_ms(&cfg, attempt))
        },
    };
    let id = task_id.to_owned();
    let ticket = match store.call(move |s| s.begin_attempt(&id, &policy)).await? {
        Ok(ticket) => ticket,
        Err(refusal) => {
            let outcome = AttemptOutcome::not_ok(task_id, refusal.to_string());
            return Ok(Err(Refused { refusal, outcome }));
        }
    };

    let (sent, requests) = send(ctx, &store, &ticket, origin, shutdown).await?;
    let mut outcome = AttemptOutcome::not_ok(&ticket.task_id, String::new());
    outcome.requests = requests;
    outcome.attempt = ticket.attempt;

    let failure_reason = match sent {
        Sent::Aborted => "aborted: the gateway is shutting down".to_owned(),
        Sent::Failed(err) => {
            outcome.provider_fault = ProviderFault::from_error(&err);
            format!("provider call failed: {err}")
        }
        Sent::RetryRefused { last, refusal } => {
            outcome.provider_fault = ProviderFault::from_error(&last);
            format!("provider call failed: {last}; retry not sent: {refusal}")
        }
        Sent::Answered(Err(rejection)) => format!("reply rejected: {rejection}"),
        Sent::Answered(Ok(plan)) => {
            apply(&store, &cfg, &ticket.task_id, plan, origin, &mut outcome).await?;
            return Ok(Ok(outcome));
        }
    };

    let park = ticket.attempt >= cfg.kanban.decompose_max_attempts;
    let mut next_due_ms = now_ms() + backoff_ms(&cfg, ticket.attempt);
    if let Some(ProviderFault::RateLimited {
        retry_after: Some(after),
    }) = &outcome.provider_fault
    {
        next_due_ms = next_due_ms.max(now_ms() + after.min(&MAX_RETRY_AFTER).as_millis() as i64);
    }
    let record = FailureRecord {
        attempt: ticket.attempt,
        origin,
        reason: failure_reason.clone(),
        next_due_ms: (!park).then_some(next_due_ms),
        park,
        now_ms: now_ms(),
    };
    let id = ticket.task_id.clone();
    store.call(move |s| s.record_failure(&id, &record)).await?;
    outcome.reason = failure_reason;
    outcome.parked = park;
    Ok(Ok(outcome))
}

/// How the paid part of an attempt ended.
enum Sent {
    /// Shutdown interrupted the request.
    Aborted,
    /// No usable answer: an HTTP or transport failure, or an unreadable body.
    Failed(AuxError),
    /// A transient failure whose retry the hourly ceiling did not allow (B6).
    RetryRefused {
        last: AuxError,
        refusal: BeginRefusal,
    },
    /// The provider answered; the reply was validated whole.
    Answered(Result<Plan, Rejection>),
}

/// Sends the attempt's request, retrying transient failures up to
/// `auxiliary.transient_retries` times; each request gets its own ledger row, opened before it
/// is sent. Returns how it ended and how many requests were sent.
async fn send(
    ctx: &AttemptContext,
    store: &BoardHandle,
    ticket: &AttemptTicket,
    origin: Origin,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(Sent, u32), AttemptError> {
    let cfg = &ctx.config;
    let messages = build_messages(
        &PromptCard {
            id: &ticket.task_id,
            title: &ticket.title,
            body: ticket.body.as_deref(),
        },
        &ctx.roster,
        &cfg.kanban.default_assignee,
        cfg.kanban.decompose_max_children as usize,
    );
    let limits = GraphLimits {
        max_children: cfg.kanban.decompose_max_children as usize,
        default_assignee: &cfg.kanban.default_assignee,
        roster: &ctx.roster,
    };
    let mut requests = 0u32;
    let mut last = Sent::Failed(AuxError::Transport("no request sent".into()));
    for try_no in 1..=1 + cfg.auxiliary.transient_retries {
        if *shutdown.borrow() {
            // Nothing leaves once shutdown began; the attempt itself stays counted.
            last = Sent::Aborted;
            break;
        }
        let open = LedgerOpen {
            task_id: ticket.task_id.clone(),
            origin,
            attempt: ticket.attempt,
            try_no,
            started_at_ms: now_ms(),
            // Retries are paid calls too: they may not break the hourly ceiling (B6).
            enforce_ceiling: (origin != Origin::Manual && try_no > 1)
                .then_some(cfg.kanban.decompose_calls_per_hour),
        };
        let ledger_id = match store.call(move |s| s.ledger_open(&open)).await? {
            Ok(id) => id,
            Err(refusal) => {
                // Only a retry can be refused here, so a previous try's failure stands.
                if let Sent::Failed(err) = last {
                    last = Sent::RetryRefused { last: err, refusal };
                }
                break;
            }
        };
        requests += 1;
        let result = tokio::select! {
            biased;
            _ = wait_for_shutdown(&mut shutdown) => None,
            result = ctx.client.send_once(&messages) => Some(result),
        };
        // Parsed before the ledger row is closed, so the row can say whether the paid answer
        // was usable.
        let (sent, close) = match result {
            None => (Sent::Aborted, ledger_failed(None)),
            Some(Err(err)) => {
                let close = ledger_failed(Some(&err));
                (Sent::Failed(err), close)
            }
            Some(Ok(done)) => {
                let verdict = parse_reply(&done.content, &limits);
                let close = ledger_answered(&done, verdict.as_ref().err());
                store
                    .call(move |s| s.ledger_close(ledger_id, &close))
                    .await?;
                return Ok((Sent::Answered(verdict), requests));
            }
        };
        store
            .call(move |s| s.ledger_close(ledger_id, &close))
            .await?;
        let retry = matches!(&sent, Sent::Failed(err) if err.is_transient());
        last = sent;
        if !retry {
            break;
        }
    }
    Ok((last, requests))
}

/// Applies a validated plan; fills in the outcome's success (or why nothing was applied).
async fn apply(
    store: &BoardHandle,
    cfg: &Config,
    task_id: &str,
    plan: Plan,
    origin: Origin,
    outcome: &mut AttemptOutcome,
) -> Result<(), AttemptError> {
    let opts = ApplyOptions {
        orchestrator: cfg.kanban.orchestrator_profile.clone(),
        auto_promote: cfg.kanban.auto_promote_children,
        author: match origin {
            Origin::Manual => "decomposer".to_owned(),
            Origin::Gateway | Origin::Sweep => "auto-decomposer".to_owned(),
        },
        now_ms: now_ms(),
    };
    let id = task_id.to_owned();
    match store.call(move |s| s.apply_plan(&id, &plan, &opts)).await? {
        ApplyResult::Fanout { child_ids } => {
            outcome.ok = true;
            outcome.fanout = true;
            outcome.reason = format!("decomposed into {} children", child_ids.len());
            outcome.child_ids = Some(child_ids);
        }
        ApplyResult::Single { new_title } => {
            outcome.ok = true;
            outcome.reason = "single task (no fanout)".to_owned();
            outcome.new_title = new_title;
        }
        ApplyResult::LeftTriage { status } => {
            // Nothing was written (B4); the card is no longer ours to retry.
            outcome.reason =
                format!("card left triage during the call (status {status}); nothing applied");
        }
    }
    Ok(())
}

/// The ledger row of a request the provider answered: `ok` when the reply was usable,
/// `rejected` (a paid call wasted on an unusable reply) when it was not.
fn ledger_answered(done: &Completion, rejection: Option<&Rejection>) -> LedgerClose {
    LedgerClose {
        ended_at_ms: now_ms(),
        outcome: if rejection.is_some() {
            "rejected"
        } else {
            "ok"
        }
        .to_owned(),
        http_status: Some(done.http_status),
        prompt_tokens: done.usage.prompt_tokens,
        completion_tokens: done.usage.completion_tokens,
        detail: rejection.map(|r| r.to_string()),
    }
}

/// The ledger row of a request that got no answer: `err`, or aborted by shutdown when `None`.
fn ledger_failed(err: Option<&AuxError>) -> LedgerClose {
    let (outcome, http_status, detail) = match err {
        None => ("aborted", None, "the gateway was shutting down".to_owned()),
        Some(err) => (err.outcome(), err.http_status(), err.to_string()),
    };
    LedgerClose {
        ended_at_ms: now_ms(),
        outcome: outcome.to_owned(),
        http_status,
        detail: Some(detail),
        ..LedgerClose::default()
    }
}

/// The wait after the `attempt`-th failure: `decompose_backoff_seconds` doubled per failure,
/// capped at an hour (B2).
pub fn backoff_ms(cfg: &Config, attempt: u32) -> i64 {
    let base = cfg.kanban.decompose_backoff.as_secs_f64();
    let factor = 2f64.powi(attempt.saturating_sub(1).min(30) as i32);
    let secs = (base * factor).min(MAX_BACKOFF.as_secs_f64());
    (secs * 1000.0).round() as i64
}

async fn wait_for_shutdown(shutdown: &mut watch::Receiver<bool>) {
    // A closed channel means the owner is gone: treat it as a shutdown.
    let _ = shutdown.wait_for(|stop| *stop).await;
}

/// A board connection used from async code: each call runs on the blocking pool so a busy
/// SQLite lock never stalls the runtime.
#[derive(Clone)]
pub struct BoardHandle {
    store: Arc<Mutex<Store>>,
}

impl BoardHandle {
    pub async fn open(path: &std::path::Path) -> Result<Self, AttemptError> {
        let path = path.to_owned();
        let store = tokio::task::spawn_blocking(move || Store::open(&path))
            .await
            .map_err(|e| AttemptError::Join(e.to_string()))??;
        Ok(Self {
            store: Arc::new(Mutex::new(store)),
        })
    }

    pub async fn call<T, F>(&self, f: F) -> Result<T, AttemptError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Store) -> Result<T, StoreError> + Send + 'static,
    {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || {
            // A poisoned lock only means another call panicked mid-way; SQLite rolled that
            // transaction back, so the connection itself is still consistent.
            let mut guard = store
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            f(&mut guard)
        })
        .await
        .map_err(|e| AttemptError::Join(e.to_string()))?
        .map_err(AttemptError::Store)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        let mut cfg = Config::default();
        cfg.kanban.decompose_backoff = Duration::from_secs(60);
        assert_eq!(backoff_ms(&cfg, 1), 60_000);
        assert_eq!(backoff_ms(&cfg, 2), 120_000);
        assert_eq!(backoff_ms(&cfg, 3), 240_000);
        assert_eq!(backoff_ms(&cfg, 40), 3_600_000);
        cfg.kanban.decompose_backoff = Duration::ZERO;
        assert_eq!(backoff_ms(&cfg, 5), 0);
    }

    #[test]
    fn provider_faults_pause_for_the_right_time() {
        let cooldown = Duration::from_secs(900);
        assert_eq!(
            ProviderFault::Billing { status: 402 }.pause_for(cooldown),
            cooldown
        );
        assert_eq!(
            ProviderFault::Auth { status: 401 }.pause_for(cooldown),
            cooldown
        );
        let hour = Duration::from_secs(3600);
        let huge = ProviderFault::RateLimited {
            retry_after: Some(Duration::from_secs(99_999)),
        };
        assert_eq!(huge.pause_for(cooldown), hour);
        let none = ProviderFault::RateLimited { retry_after: None };
        assert_eq!(none.pause_for(cooldown), DEFAULT_RATE_LIMIT_PAUSE);
    }
}
