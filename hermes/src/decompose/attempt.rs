//! One paid decompose attempt, end to end, with its bounds.
//!
//! The order is the point: the attempt is recorded on the card (B1) before any request leaves,
//! every HTTP request gets a ledger row opened before it is sent and closed after (B9), the reply
//! is validated whole before the board is touched (B3), and the apply transaction re-checks that
//! the card is still in triage (B4). A failure of any kind is written back as a `decompose_failed`
//! event with the next due time, and the card is parked once its budget is spent.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::watch;

use crate::aux_client::{AuxClient, AuxError, AuxSettings, Completion};
use crate::config::Config;
use crate::core::time::after;
use crate::core::{
    Applied, AttemptOutcome, Backoff, BeginRefusal, FaultPause, Origin, Plan, ProviderFault,
    MAX_RETRY_AFTER,
};
use crate::decompose::prompt::{build_messages, PromptCard};
use crate::decompose::reply::{parse_reply, GraphLimits, Rejection};
use crate::store::{
    now_ms, ApplyOptions, ApplyResult, AttemptTicket, BeginPolicy, BoardHandle, FailureRecord,
    LedgerClose, LedgerOpen, PauseRecord,
};

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

/// Why an attempt could not be run or recorded; the board may be unreachable.
pub use crate::store::BoardError as AttemptError;

/// The card's backoff under `cfg`.
pub fn backoff(cfg: &Config) -> Backoff {
    Backoff::new(cfg.kanban.decompose_backoff)
}

/// Runs one attempt on `task_id` and says how it ended.
///
/// `shutdown` flipping to `true` aborts the request in flight; the abort is recorded like any
/// other failure (the attempt was already counted before the request left).
pub async fn run_attempt(
    ctx: &AttemptContext,
    task_id: &str,
    origin: Origin,
    shutdown: watch::Receiver<bool>,
) -> Result<AttemptOutcome, AttemptError> {
    let cfg = ctx.config.clone();
    let store = BoardHandle::open(&ctx.db_path).await?;

    let policy = BeginPolicy {
        origin,
        now_ms: now_ms(),
        max_attempts: cfg.kanban.decompose_max_attempts,
        calls_per_hour: cfg.kanban.decompose_calls_per_hour,
        backoff: backoff(&cfg),
    };
    let id = task_id.to_owned();
    let ticket = match store.call(move |s| s.begin_attempt(&id, &policy)).await? {
        Ok(ticket) => ticket,
        Err(refusal) => {
            return Ok(AttemptOutcome::Refused {
                task_id: task_id.to_owned(),
                refusal,
            })
        }
    };

    let (sent, requests) = send(ctx, &store, &ticket, origin, shutdown).await?;
    let (reason, fault) = match sent {
        Sent::Aborted => ("aborted: the gateway is shutting down".to_owned(), None),
        Sent::Failed(err) => (format!("provider call failed: {err}"), err.provider_fault()),
        Sent::RetryRefused { last, refusal } => (
            format!("provider call failed: {last}; retry not sent: {refusal}"),
            last.provider_fault(),
        ),
        Sent::Answered(Err(rejection)) => (format!("reply rejected: {rejection}"), None),
        Sent::Answered(Ok(plan)) => {
            return apply(&store, &cfg, &ticket, plan, origin, requests).await;
        }
    };

    let park = ticket.attempt >= cfg.kanban.decompose_max_attempts;
    let now = now_ms();
    let mut next_due_ms = backoff(&cfg).due_ms(now, ticket.attempt);
    if let Some(ProviderFault::RateLimited {
        retry_after: Some(wait),
    }) = &fault
    {
        next_due_ms = next_due_ms.max(after(now, (*wait).min(MAX_RETRY_AFTER)));
    }
    let fault = fault.map(|fault| {
        let lasts = fault.pause_for(cfg.kanban.provider_cooldown);
        FaultPause {
            until_ms: after(now, lasts),
            lasts,
            fault,
        }
    });
    let record = FailureRecord {
        attempt: ticket.attempt,
        origin,
        reason: reason.clone(),
        next_due_ms: (!park).then_some(next_due_ms),
        park,
        now_ms: now,
        pause: fault.as_ref().map(|f| PauseRecord {
            until_ms: f.until_ms,
            reason: f.fault.describe(),
        }),
    };
    let id = ticket.task_id.clone();
    store.call(move |s| s.record_failure(&id, &record)).await?;
    Ok(AttemptOutcome::Failed {
        task_id: ticket.task_id,
        attempt: ticket.attempt,
        requests,
        reason,
        parked: park,
        fault,
    })
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

/// Applies a validated plan and says what it did.
async fn apply(
    store: &BoardHandle,
    cfg: &Config,
    ticket: &AttemptTicket,
    plan: Plan,
    origin: Origin,
    requests: u32,
) -> Result<AttemptOutcome, AttemptError> {
    let opts = ApplyOptions {
        orchestrator: cfg.kanban.orchestrator_profile.clone(),
        auto_promote: cfg.kanban.auto_promote_children,
        author: match origin {
            Origin::Manual => "decomposer".to_owned(),
            Origin::Gateway | Origin::Sweep => "auto-decomposer".to_owned(),
        },
        now_ms: now_ms(),
    };
    let id = ticket.task_id.clone();
    let result = store.call(move |s| s.apply_plan(&id, &plan, &opts)).await?;
    let (task_id, attempt) = (ticket.task_id.clone(), ticket.attempt);
    Ok(match result {
        ApplyResult::Fanout { child_ids } => AttemptOutcome::Applied {
            task_id,
            attempt,
            requests,
            applied: Applied::Fanout { child_ids },
        },
        ApplyResult::Single { new_title } => AttemptOutcome::Applied {
            task_id,
            attempt,
            requests,
            applied: Applied::Single { new_title },
        },
        // Nothing was written (B4); the card is no longer ours to retry.
        ApplyResult::LeftTriage { status } => AttemptOutcome::LeftTriage {
            task_id,
            attempt,
            requests,
            status,
        },
    })
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

async fn wait_for_shutdown(shutdown: &mut watch::Receiver<bool>) {
    // A closed channel means the owner is gone: treat it as a shutdown.
    let _ = shutdown.wait_for(|stop| *stop).await;
}
