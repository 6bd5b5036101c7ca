//! One paid decompose attempt, end to end, with its bounds.
//!
//! The order is the point: the attempt is recorded on the card together with its claim (B1)
//! before any request leaves, every HTTP request gets a ledger row opened before it is sent and
//! closed after (B9), the reply is validated whole before the board is touched (B3), and the
//! apply transaction re-checks that the card is still in triage (B4). A failure of any kind is
//! written back as a `decompose_failed` event with the next due time (and, when provider-wide,
//! the board's pause), and the card is parked once its budget is spent. An attempt none of whose
//! requests reached the provider costs nothing and is given back instead (B5).
//!
//! Retries inside the attempt wait a jittered, doubling delay, or a 503's `Retry-After` when it
//! fits; no try starts unless it can end inside the attempt's span, which is what the claim
//! covers (`core::budget`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::aux_client::{AuxClient, AuxError, AuxSettings, Completion};
use crate::config::{Config, DecomposerEndpoint, DecomposerSetupError, Home, KeySource};
use crate::core::time::after;
use crate::core::{
    Applied, AttemptBudget, AttemptOutcome, BeginRefusal, FaultPause, LedgerOutcome, Origin, Plan,
    MAX_RETRY_AFTER,
};
use crate::decompose::prompt::{build_messages, PromptCard};
use crate::decompose::reply::{parse_reply, GraphLimits, Rejection};
use crate::output;
use crate::store::{
    now_ms, ApplyOptions, ApplyResult, AttemptTicket, BeginPolicy, BoardError, BoardHandle,
    FailureRecord, LedgerClose, LedgerOpen, NothingSentRecord, NothingSentRecorded, PauseRecord,
    UnreachableRecord,
};

/// How long a request already on its way may still answer once shutdown begins: it is paid
/// for, and its answer (a graph, or a refusal that pauses the board) must not be thrown away.
/// Kept below the gateway's shutdown grace, which SIGTERM must fit in.
pub const SHUTDOWN_ANSWER_WAIT: Duration = Duration::from_secs(3);

/// Everything one attempt needs that does not change between attempts of a tick.
#[derive(Clone)]
pub struct AttemptContext {
    pub config: Arc<Config>,
    pub client: Arc<AuxClient>,
    /// Profile names the model may route children to.
    pub roster: Arc<Vec<String>>,
    pub db_path: PathBuf,
    /// What resolving the endpoint had to skip (bad `.env` lines), for the caller to report.
    pub warnings: Arc<Vec<String>>,
    /// Where the client's key came from, or where it was looked for.
    pub key_source: Arc<KeySource>,
    /// The connection attempts record through, when the caller shares its own: a process keeps
    /// one connection per board, so that a swapped `-wal`/`-shm` is left behind by all of its
    /// users at once (see `store::files`). `None`: each attempt opens the board itself.
    pub board: Option<BoardHandle>,
}

impl AttemptContext {
    /// This context, recording through `board`.
    pub fn sharing(&self, board: &BoardHandle) -> AttemptContext {
        AttemptContext {
            board: Some(board.clone()),
            ..self.clone()
        }
    }
}

impl AttemptContext {
    /// Builds the aux client for decompose calls as `config` routes them
    /// (`auxiliary.kanban_decomposer` over `model.*`, see [`Config::decomposer_endpoint`]),
    /// reading keys from the environment and `home`'s `.env`. Fails (before anything is paid)
    /// when the config names no usable endpoint or model.
    pub fn from_config(
        config: Arc<Config>,
        home: &Home,
        roster: Vec<String>,
        db_path: PathBuf,
    ) -> Result<Self, AttemptSetupError> {
        let endpoint = config.decomposer_endpoint(home)?;
        Self::with_endpoint(config, endpoint, roster, db_path)
    }

    /// As [`AttemptContext::from_config`], with `api_key` as the only variable set
    /// (`OPENAI_API_KEY`).
    pub fn new(
        config: Arc<Config>,
        api_key: Option<String>,
        roster: Vec<String>,
        db_path: PathBuf,
    ) -> Result<Self, AttemptSetupError> {
        let endpoint = config.decomposer_endpoint_with(|name| {
            api_key.clone().filter(|_| name == "OPENAI_API_KEY")
        })?;
        Self::with_endpoint(config, endpoint, roster, db_path)
    }

    fn with_endpoint(
        config: Arc<Config>,
        endpoint: DecomposerEndpoint,
        roster: Vec<String>,
        db_path: PathBuf,
    ) -> Result<Self, AttemptSetupError> {
        if let Some(key) = &endpoint.api_key {
            output::register_secret(key);
        }
        output::register_url(&endpoint.base_url);
        // A proxy's URL may carry credentials of its own.
        for name in crate::proxy::VARIABLES {
            if let Ok(proxy) = std::env::var(name) {
                output::register_url(&proxy);
            }
        }
        let key_source = Arc::new(endpoint.key_source);
        let client = AuxClient::new(AuxSettings {
            base_url: endpoint.base_url,
            model: endpoint.model,
            api_key: endpoint.api_key,
            timeout: endpoint.timeout,
            max_body_bytes: crate::aux_client::DEFAULT_MAX_BODY_BYTES,
            temperature: 0.2,
            max_tokens: 4000,
        })
        .map_err(AttemptSetupError::Client)?
        .with_extra_body(endpoint.extra_body);
        Ok(Self {
            config,
            client: Arc::new(client),
            roster: Arc::new(roster),
            db_path,
            warnings: Arc::new(endpoint.warnings),
            key_source,
            board: None,
        })
    }

    /// What decompose calls through this context bill, as the gateway announces it.
    pub fn billing(&self) -> Billing {
        let key = if self.key_source.found() {
            self.key_source.to_string()
        } else if self.client.sends_url_credentials() {
            "the base URL's userinfo (sent as Basic auth)".to_owned()
        } else {
            self.key_source.to_string()
        };
        Billing {
            endpoint: self.client.shown_endpoint().to_owned(),
            proxy: self
                .client
                .shown_proxy()
                .unwrap_or("none (direct)")
                .to_owned(),
            model: self.client.model().to_owned(),
            key,
            unauthorized: !self.key_source.found() && !self.client.sends_url_credentials(),
            where_read: self.key_source.where_read(),
        }
    }
}

/// Where decompose calls go, with which model, and where their key came from (never the key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Billing {
    /// The URL requests are sent to, without credentials, its query's values redacted.
    pub endpoint: String,
    /// The proxy they go through (`crate::proxy`), or `none (direct)`.
    pub proxy: String,
    /// The model every request names.
    pub model: String,
    /// Where the key came from: a variable and its file, a config key, the URL's userinfo, or
    /// `none`.
    pub key: String,
    /// No credentials at all: requests go without an `Authorization` header.
    pub unauthorized: bool,
    /// Where a key would be read from, in order.
    pub where_read: String,
}

impl Billing {
    /// `URL (model M, key: K)`: where a decompose call goes, as `-v` and checks show it.
    pub fn route(&self) -> String {
        format!(
            "{} (model {}, key: {})",
            self.endpoint, self.model, self.key
        )
    }

    /// The warning for requests that would go without any credentials, where a key is read
    /// from; `None` when they carry some.
    pub fn no_key_warning(&self) -> Option<String> {
        self.unauthorized.then(|| {
            format!(
                "no API key found: decompose requests to {} are sent without an Authorization \
                 header (a provider that needs one refuses them, and auto-decompose pauses); a \
                 key is read from {}",
                self.endpoint, self.where_read
            )
        })
    }
}

/// Why no attempt can be made at all with this configuration.
#[derive(Debug, thiserror::Error)]
pub enum AttemptSetupError {
    #[error(transparent)]
    Config(#[from] DecomposerSetupError),
    #[error("cannot build the provider client: {0}")]
    Client(AuxError),
}

/// Why an attempt could not be run or recorded: the board could not be used. It says how many
/// requests had already reached (or may have reached) the provider, since those may be billed
/// although their end is not on the board.
#[derive(Debug)]
pub struct AttemptError {
    /// Requests that may have reached the provider before the board failed.
    pub requests_sent: u32,
    /// What failed.
    pub board: BoardError,
}

impl AttemptSetupError {
    /// What a gateway (or a check of it) says when this stops auto-decompose.
    pub fn cannot_run(&self) -> String {
        format!("auto-decompose cannot run: {self}")
    }
}

impl AttemptError {
    fn after(requests_sent: u32) -> impl FnOnce(BoardError) -> AttemptError {
        move |board| AttemptError {
            requests_sent,
            board,
        }
    }
}

impl From<BoardError> for AttemptError {
    fn from(board: BoardError) -> Self {
        AttemptError {
            requests_sent: 0,
            board,
        }
    }
}

impl std::fmt::Display for AttemptError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.board.fmt(f)
    }
}

impl std::error::Error for AttemptError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.board)
    }
}

/// One attempt's time budget under `cfg`: its requests are bounded by
/// [`Config::decompose_timeout`], as the client is.
pub fn budget(cfg: &Config) -> AttemptBudget {
    AttemptBudget::new(cfg.decompose_timeout(), cfg.auxiliary.transient_retries)
}

/// Runs one attempt on `task_id` and says how it ended.
///
/// `shutdown` flipping to `true` stops the attempt: no new try starts, and a request on its way
/// gets [`SHUTDOWN_ANSWER_WAIT`] to answer before it is aborted. An abort is recorded like any
/// other failure (the attempt was already counted before the request left).
pub async fn run_attempt(
    ctx: &AttemptContext,
    task_id: &str,
    origin: Origin,
    shutdown: watch::Receiver<bool>,
) -> Result<AttemptOutcome, AttemptError> {
    Ok(attempt(ctx, task_id, origin, false, shutdown).await?.0)
}

/// A person's attempt (`kanban decompose ID`): it keeps to the board-wide pause and hourly
/// ceiling (refused while either is in force) unless `force`, and then also says which guards in
/// force it went past.
pub async fn run_manual_attempt(
    ctx: &AttemptContext,
    task_id: &str,
    force: bool,
    shutdown: watch::Receiver<bool>,
) -> Result<(AttemptOutcome, Vec<BeginRefusal>), AttemptError> {
    attempt(ctx, task_id, Origin::Manual, force, shutdown).await
}

async fn attempt(
    ctx: &AttemptContext,
    task_id: &str,
    origin: Origin,
    force: bool,
    shutdown: watch::Receiver<bool>,
) -> Result<(AttemptOutcome, Vec<BeginRefusal>), AttemptError> {
    let cfg = ctx.config.clone();
    let store = match &ctx.board {
        Some(board) => board.clone(),
        None => BoardHandle::open(&ctx.db_path).await?,
    };

    let budget = budget(&cfg);
    let started = Instant::now();
    let now = now_ms();
    let policy = BeginPolicy {
        origin,
        force: policy_forced(force, origin),
        now_ms: now,
        rules: cfg.card_rules(),
        calls_per_hour: cfg.kanban.decompose_calls_per_hour,
        claim_until_ms: after(now, budget.claim_span()),
    };
    let id = task_id.to_owned();
    let ticket = match store.call(move |s| s.begin_attempt(&id, &policy)).await? {
        Ok(ticket) => ticket,
        Err(refusal) => {
            let refused = AttemptOutcome::Refused {
                task_id: task_id.to_owned(),
                refusal,
            };
            return Ok((refused, Vec::new()));
        }
    };
    let overrode = ticket.overrode.clone();
    let forced = policy_forced(force, origin);
    let outcome = paid_part(
        ctx,
        &store,
        &cfg,
        ticket,
        (origin, forced),
        started,
        shutdown,
    )
    .await?;
    Ok((outcome, overrode))
}

/// Whether an attempt goes past the board-wide guards: only a person's, and only when forced.
fn policy_forced(force: bool, origin: Origin) -> bool {
    force && !origin.is_automatic()
}

/// Everything after the attempt was recorded: its requests, then its answer or its failure.
async fn paid_part(
    ctx: &AttemptContext,
    store: &BoardHandle,
    cfg: &Config,
    ticket: AttemptTicket,
    (origin, forced): (Origin, bool),
    started: Instant,
    shutdown: watch::Receiver<bool>,
) -> Result<AttemptOutcome, AttemptError> {
    let budget = budget(cfg);

    let tries = Tries {
        ctx,
        store,
        ticket: &ticket,
        origin,
        forced,
        budget,
        started,
    };
    let sent = tries.send(shutdown).await?;
    let delivered = sent.delivered;
    if sent.delivered == 0 {
        return nothing_sent(store, cfg, &ticket, sent.end).await;
    }
    let requests = sent.requests;
    let (reason, fault) = match sent.end {
        End::Aborted => ("aborted: the gateway is shutting down".to_owned(), None),
        End::Failed(err) => (format!("provider call failed: {err}"), err.provider_fault()),
        End::Stopped { last, why } => (
            format!("provider call failed: {last}; retry not sent: {why}"),
            last.provider_fault(),
        ),
        End::NotSent(why) => (format!("retry not sent: {why}"), None),
        End::Answered(Err(rejection)) => (format!("reply rejected: {rejection}"), None),
        End::Answered(Ok(plan)) => {
            return apply(store, cfg, &ticket, plan, origin, requests)
                .await
                .map_err(AttemptError::after(delivered));
        }
    };
    // The ledger rows of the requests keep their text (capped); the card keeps a summary.
    let reason = output::summary(&reason);

    let now = now_ms();
    let pause = fault.clone().map(|fault| {
        let lasts = fault.pause_for(cfg.kanban.provider_cooldown);
        FaultPause {
            until_ms: after(now, lasts),
            lasts,
            fault,
        }
    });
    let record = FailureRecord {
        attempt: ticket.attempt,
        fence: Some(ticket.lease.clone()),
        origin,
        reason: reason.clone(),
        fault,
        rules: cfg.card_rules(),
        now_ms: now,
        pause: pause.as_ref().map(|f| PauseRecord {
            until_ms: f.until_ms,
            reason: f.fault.describe(),
            request_started_ms: sent.last_started_ms,
        }),
    };
    let id = ticket.task_id.clone();
    let recorded = store
        .call(move |s| s.record_failure(&id, &record))
        .await
        .map_err(AttemptError::after(delivered))?;
    let Some(parked) = recorded else {
        return Ok(superseded(&ticket, requests));
    };
    Ok(AttemptOutcome::Failed {
        task_id: ticket.task_id,
        attempt: ticket.attempt,
        requests,
        reason,
        parked,
        fault: pause,
    })
}

/// Records an attempt whose requests never reached the provider: it is given back to the card,
/// and an unreachable provider pauses the board instead.
async fn nothing_sent(
    store: &BoardHandle,
    cfg: &Config,
    ticket: &AttemptTicket,
    end: End,
) -> Result<AttemptOutcome, AttemptError> {
    let (reason, unreachable) = match end {
        End::Failed(err) if err.is_undelivered() => {
            let reason = err.to_string();
            let record = UnreachableRecord {
                reason: output::summary(&match &err {
                    AuxError::Unreachable(connection) => connection.to_string(),
                    other => other.to_string(),
                }),
                backoff_base: cfg.kanban.decompose_backoff,
            };
            (reason, Some(record))
        }
        End::Aborted => (
            "aborted before any request left: the gateway is shutting down".to_owned(),
            None,
        ),
        End::NotSent(why) => (format!("request not sent: {why}"), None),
        End::Stopped { last, why } => (format!("{last}; retry not sent: {why}"), None),
        End::Failed(err) => (err.to_string(), None),
        // An answer is a delivered request; it never gets here.
        End::Answered(_) => ("answered".to_owned(), None),
    };
    let reason = output::summary(&reason);
    let record = NothingSentRecord {
        attempt: ticket.attempt,
        fence: Some(ticket.lease.clone()),
        now_ms: now_ms(),
        unreachable,
    };
    let id = ticket.task_id.clone();
    let unreachable = match store
        .call(move |s| s.record_nothing_sent(&id, &record))
        .await?
    {
        NothingSentRecorded::GivenBack(pause) => pause,
        NothingSentRecorded::ClaimLost => return Ok(superseded(ticket, 0)),
    };
    Ok(AttemptOutcome::NothingSent {
        task_id: ticket.task_id.clone(),
        reason,
        unreachable,
    })
}

/// The outcome of an attempt whose claim another attempt took over while it ran.
fn superseded(ticket: &AttemptTicket, requests: u32) -> AttemptOutcome {
    AttemptOutcome::Superseded {
        task_id: ticket.task_id.clone(),
        attempt: ticket.attempt,
        requests,
    }
}

/// How the paid part of an attempt ended.
enum End {
    /// Shutdown stopped it (a request on its way did not answer in time, or no try was left
    /// to start).
    Aborted,
    /// No usable answer: an HTTP or transport failure, or an unreadable body.
    Failed(AuxError),
    /// A transient failure whose retry was not sent (the board's guards, or the attempt's span).
    Stopped { last: AuxError, why: String },
    /// Not even the first request was sent.
    NotSent(String),
    /// The provider answered; the reply was validated whole.
    Answered(Result<Plan, Rejection>),
}

/// What the tries of an attempt came to.
struct Sent {
    end: End,
    /// Ledger rows opened (requests attempted).
    requests: u32,
    /// Requests that may have reached the provider (all but the undelivered ones).
    delivered: u32,
    /// When the last request was sent (unix ms).
    last_started_ms: Option<i64>,
}

/// The request loop of one attempt.
struct Tries<'a> {
    ctx: &'a AttemptContext,
    store: &'a BoardHandle,
    ticket: &'a AttemptTicket,
    origin: Origin,
    /// A person's attempt forced past the board-wide guards.
    forced: bool,
    budget: AttemptBudget,
    /// When the attempt was recorded (monotonic: the span must not bend with the wall clock).
    started: Instant,
}

impl Tries<'_> {
    /// Sends the attempt's request, retrying transient failures up to
    /// `auxiliary.transient_retries` times; each request gets its own ledger row, opened before
    /// it is sent.
    async fn send(&self, mut shutdown: watch::Receiver<bool>) -> Result<Sent, AttemptError> {
        let cfg = &self.ctx.config;
        let max_children = usize::try_from(cfg.kanban.decompose_max_children).unwrap_or(usize::MAX);
        let messages = build_messages(
            &PromptCard {
                id: &self.ticket.task_id,
                title: &self.ticket.title,
                body: self.ticket.body.as_deref(),
            },
            &self.ctx.roster,
            &cfg.kanban.default_assignee,
            max_children,
        );
        let limits = GraphLimits {
            max_children,
            default_assignee: &cfg.kanban.default_assignee,
            roster: &self.ctx.roster,
        };
        let mut sent = Sent {
            end: End::NotSent("no request was sent".into()),
            requests: 0,
            delivered: 0,
            last_started_ms: None,
        };
        for try_no in 1..=self.budget.tries {
            if *shutdown.borrow() {
                // Nothing leaves once shutdown began; the attempt itself stays counted.
                sent.end = End::Aborted;
                break;
            }
            if try_no > 1 {
                let End::Failed(last) = std::mem::replace(&mut sent.end, End::Aborted) else {
                    break;
                };
                match self.wait_before(try_no - 1, &last) {
                    Err(why) => {
                        sent.end = End::Stopped { last, why };
                        break;
                    }
                    Ok(wait) => {
                        let stopped = tokio::select! {
                            biased;
                            _ = wait_for_shutdown(&mut shutdown) => true,
                            _ = tokio::time::sleep(wait) => false,
                        };
                        if stopped {
                            sent.end = End::Aborted;
                            break;
                        }
                        sent.end = End::Failed(last);
                    }
                }
            } else if !self.budget.fits(self.started.elapsed(), Duration::ZERO) {
                sent.end = End::NotSent(
                    "the board was too slow to start the request inside the attempt's span".into(),
                );
                break;
            }
            let started_ms = now_ms();
            let open = LedgerOpen {
                task_id: self.ticket.task_id.clone(),
                origin: self.origin,
                attempt: self.ticket.attempt,
                try_no,
                started_at_ms: started_ms,
                // Paid calls, retries included, keep to the board's guards: none leaves once
                // another's refusal is recorded (B5), none breaks the hourly ceiling (B6) —
                // unless a person forced this attempt past them.
                guards: (!self.forced).then_some(cfg.kanban.decompose_calls_per_hour),
                fence: Some(self.ticket.lease.clone()),
                model: Some(self.ctx.client.model().to_owned()),
            };
            let ledger_id = match self
                .store
                .call(move |s| s.ledger_open(&open))
                .await
                .map_err(AttemptError::after(sent.delivered))?
            {
                Ok(id) => id,
                Err(refusal) => {
                    sent.end = match std::mem::replace(&mut sent.end, End::Aborted) {
                        End::Failed(last) => End::Stopped {
                            last,
                            why: refusal.to_string(),
                        },
                        _ => End::NotSent(refusal.to_string()),
                    };
                    break;
                }
            };
            sent.requests += 1;
            sent.last_started_ms = Some(started_ms);
            let result = self.request(&messages, &mut shutdown).await;
            // Parsed before the ledger row is closed, so the row can say whether the paid
            // answer was usable.
            let (end, close) = match result {
                None => (End::Aborted, ledger_failed(None)),
                Some(Err(err)) => {
                    let close = ledger_failed(Some(&err));
                    (End::Failed(err), close)
                }
                Some(Ok(done)) => {
                    let verdict = parse_reply(&done.content, &limits);
                    let close = ledger_answered(&done, verdict.as_ref().err());
                    (End::Answered(verdict), close)
                }
            };
            let undelivered = matches!(&end, End::Failed(err) if err.is_undelivered());
            if !undelivered {
                sent.delivered += 1;
            }
            self.store
                .call(move |s| s.ledger_close(ledger_id, &close))
                .await
                .map_err(AttemptError::after(sent.delivered))?;
            let retry = matches!(&end, End::Failed(err) if err.is_transient());
            sent.end = end;
            if !retry {
                break;
            }
        }
        Ok(sent)
    }

    /// One request. On shutdown, a request already on its way may still answer for
    /// [`SHUTDOWN_ANSWER_WAIT`]; `None` when it did not.
    async fn request(
        &self,
        messages: &[crate::aux_client::ChatMessage],
        shutdown: &mut watch::Receiver<bool>,
    ) -> Option<Result<Completion, AuxError>> {
        let request = self.ctx.client.send_once(messages);
        tokio::pin!(request);
        tokio::select! {
            // An answer already there wins over a shutdown seen at the same moment.
            biased;
            result = &mut request => Some(result),
            _ = wait_for_shutdown(shutdown) => {
                tokio::time::timeout(SHUTDOWN_ANSWER_WAIT, &mut request).await.ok()
            }
        }
    }

    /// How long to wait before retry number `retry` after `last`, or why not to retry: a
    /// jittered, doubling delay, or the provider's `Retry-After` when longer; either way the
    /// retry must still end inside the attempt's span.
    fn wait_before(&self, retry: u32, last: &AuxError) -> Result<Duration, String> {
        let jitter = f64::from(getrandom::u32().unwrap_or(u32::MAX / 2)) / f64::from(u32::MAX);
        let own = self.budget.delay.before(retry, jitter);
        let asked = last.retry_after().map(|asked| asked.min(MAX_RETRY_AFTER));
        let wait = asked.map_or(own, |asked| asked.max(own));
        if self.budget.fits(self.started.elapsed(), wait) {
            return Ok(wait);
        }
        Err(match asked {
            Some(asked) => format!(
                "the provider's Retry-After ({}s) does not fit in the attempt's time budget",
                asked.as_secs_f64()
            ),
            None => "no time left in the attempt's time budget".to_owned(),
        })
    }
}

/// Applies a validated plan and says what it did.
async fn apply(
    store: &BoardHandle,
    cfg: &Config,
    ticket: &AttemptTicket,
    plan: Plan,
    origin: Origin,
    requests: u32,
) -> Result<AttemptOutcome, BoardError> {
    let opts = ApplyOptions {
        orchestrator: cfg.kanban.orchestrator_profile.clone(),
        auto_promote: cfg.kanban.auto_promote_children,
        author: match origin {
            Origin::Manual => "decomposer".to_owned(),
            Origin::Gateway | Origin::Sweep => "auto-decomposer".to_owned(),
        },
        now_ms: now_ms(),
        fence: Some(ticket.lease.clone()),
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
        ApplyResult::ClaimLost => superseded(ticket, requests),
    })
}

/// The ledger row of a request the provider answered: `ok` when the reply was usable,
/// `rejected` (a paid call wasted on an unusable reply) when it was not.
fn ledger_answered(done: &Completion, rejection: Option<&Rejection>) -> LedgerClose {
    LedgerClose {
        ended_at_ms: now_ms(),
        outcome: if rejection.is_some() {
            LedgerOutcome::Rejected
        } else {
            LedgerOutcome::Ok
        },
        http_status: Some(done.http_status),
        prompt_tokens: done.usage.prompt_tokens,
        completion_tokens: done.usage.completion_tokens,
        detail: rejection.map(|r| output::stored(&r.to_string())),
    }
}

/// The ledger row of a request that got no answer: `err`, or aborted by shutdown when `None`.
fn ledger_failed(err: Option<&AuxError>) -> LedgerClose {
    let (outcome, http_status, detail) = match err {
        None => (
            LedgerOutcome::Aborted,
            None,
            "the gateway was shutting down".to_owned(),
        ),
        Some(err) => (
            err.outcome(),
            err.http_status(),
            output::stored(&err.to_string()),
        ),
    };
    LedgerClose {
        http_status,
        detail: Some(detail),
        ..LedgerClose::new(now_ms(), outcome)
    }
}

async fn wait_for_shutdown(shutdown: &mut watch::Receiver<bool>) {
    // A closed channel means the owner is gone: treat it as a shutdown.
    let _ = shutdown.wait_for(|stop| *stop).await;
}
