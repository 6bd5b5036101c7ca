//! The chat-completions client behind every paid decompose call.
//!
//! Each [`AuxClient::send_once`] is exactly one HTTP request: the caller owns the retry loop
//! because it writes one ledger row per request, and [`AuxError::is_transient`] tells it which
//! failures are worth another (paid) try. The whole exchange — connect, headers and body — is
//! bounded by one wall-clock timeout and the body by a byte cap, so a hung or hostile provider
//! costs at most `timeout` and `max_body_bytes`.

use std::fmt;
use std::time::{Duration, SystemTime};

use reqwest::header::{self, HeaderMap, HeaderValue};
use serde::Serialize;
use serde_json::Value;

use crate::core::{LedgerOutcome, ProviderFault};

/// Reply bodies above this many bytes are cut off and treated as malformed (contract §7 B8).
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;

/// How much of an error reply is read, only to log it: enough for a provider's message, not
/// enough for a hostile one to cost memory or time.
const ERROR_BODY_SNIPPET_BYTES: usize = 4 * 1024;
/// The longest a connection may take to open.
const MAX_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the error-reply reader may wait for that snippet.
const ERROR_BODY_SNIPPET_WAIT: Duration = Duration::from_secs(2);

/// Everything one client needs; the caller derives it from the board's configuration.
#[derive(Clone)]
pub struct AuxSettings {
    /// OpenAI-compatible base such as `http://127.0.0.1:8080/v1`, with or without a trailing slash.
    pub base_url: String,
    /// Model name sent in every request.
    pub model: String,
    /// Sent as `Authorization: Bearer …`; `None` (or blank) sends no such header.
    pub api_key: Option<String>,
    /// Wall-clock bound on one whole request, streaming included.
    pub timeout: Duration,
    /// Reply bodies larger than this are cut off while reading: [`AuxError::TooLarge`].
    pub max_body_bytes: usize,
    /// Sampling temperature sent in every request.
    pub temperature: f32,
    /// Completion token cap sent in every request.
    pub max_tokens: u32,
}

// Hand-written so that the key never reaches a log line through `{:?}`.
impl fmt::Debug for AuxSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuxSettings")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("temperature", &self.temperature)
            .field("max_tokens", &self.max_tokens)
            .finish()
    }
}

/// One chat message as sent to the provider.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
pub struct ChatMessage {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The message text.
    pub content: String,
}

impl ChatMessage {
    /// A `system` message.
    pub fn system(content: impl Into<String>) -> Self {
        Self {
            role: "system".to_owned(),
            content: content.into(),
        }
    }

    /// A `user` message.
    pub fn user(content: impl Into<String>) -> Self {
        Self {
            role: "user".to_owned(),
            content: content.into(),
        }
    }
}

/// Token counts as reported by the provider; either may be missing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Tokens in the request, when reported.
    pub prompt_tokens: Option<u64>,
    /// Tokens in the reply, when reported.
    pub completion_tokens: Option<u64>,
}

/// A successful exchange: the assistant's text, non-empty after trimming.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    /// The assistant message content, as the provider sent it.
    pub content: String,
    /// HTTP status of the reply (a 2xx).
    pub http_status: u16,
    /// Token counts, when the provider reported them.
    pub usage: Usage,
    /// True when the reply arrived as a server-sent-event stream.
    pub streamed: bool,
}

/// One tool call an agent turn asked for: `choices[0].message.tool_calls[i]`, or the same
/// assembled from a stream's `delta.tool_calls` pieces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// The provider's id for the call, echoed in the tool's answer (`tool_call_id`).
    pub id: String,
    /// The function's name.
    pub name: String,
    /// Its arguments as the provider sent them: JSON text (an object sent as such is written
    /// out as text).
    pub arguments: String,
}

/// A successful agent turn ([`AuxClient::send_turn`]): text, tool calls, or both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentTurn {
    /// The assistant's text, if any.
    pub content: Option<String>,
    /// The tool calls it asked for, in order.
    pub tool_calls: Vec<ToolCall>,
    pub http_status: u16,
    pub usage: Usage,
    pub streamed: bool,
}

/// Why one request did not produce a usable completion.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AuxError {
    /// 401 or 403: the key is missing, wrong or not allowed.
    #[error("provider rejected the credentials (HTTP {status})")]
    Auth { status: u16 },
    /// 402: the account cannot pay.
    #[error("provider refused for billing reasons (HTTP {status})")]
    Billing { status: u16 },
    /// 429, with the provider's `Retry-After` when it sent a readable one.
    #[error("provider rate limit hit (HTTP 429{})", fmt_retry_after(*.retry_after))]
    RateLimited { retry_after: Option<Duration> },
    /// Any other non-success status below 500 (redirects are not followed: each would be
    /// another request).
    #[error("provider rejected the request (HTTP {status})")]
    Client { status: u16 },
    /// 5xx, with the provider's `Retry-After` when it sent a readable one.
    #[error("provider failed (HTTP {status})")]
    Server {
        status: u16,
        retry_after: Option<Duration>,
    },
    /// The whole exchange did not finish within the configured bound.
    #[error("no complete reply within {}s from {url}", .after.as_secs_f64())]
    Timeout {
        /// The URL tried, as [`shown_url`] shows it.
        url: String,
        after: Duration,
    },
    /// No connection could be made (refused, DNS, TLS handshake, connect timeout): the request
    /// never reached the provider, so it cannot have been billed.
    #[error("provider unreachable: {0}")]
    Unreachable(Connection),
    /// The connection broke after the request was sent: it may have been billed.
    #[error("transport error: {0}")]
    Transport(Connection),
    /// A reply arrived but holds no usable completion.
    #[error("malformed reply: {0}")]
    Malformed(String),
    /// The reply body exceeded the byte cap and was cut off.
    #[error("reply larger than {limit} bytes")]
    TooLarge { limit: usize },
    /// The settings cannot make a valid request; no request was sent.
    #[error("invalid aux settings: {0}")]
    InvalidSettings(String),
}

/// A connection-level failure: the URL tried, and what the connection said. Every such error
/// names its URL through this one type, so that an operator sees which endpoint failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connection {
    /// The URL tried, as [`shown_url`] shows it.
    pub url: String,
    /// What failed, cause by cause (`error sending request: …: Connection refused`).
    pub detail: String,
}

impl fmt::Display for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.url, self.detail)
    }
}

/// `url` as it may be shown: without its userinfo, which is a credential (sent as Basic auth
/// when no key is configured), and with the value of every query parameter redacted (some
/// providers take a key there, `?key=…`), its names kept so the path and the query it really
/// goes to can be read: `https://h/v1/chat/completions?api-version=<redacted>`. A part of the
/// query that is not `name=value` is redacted whole; the fragment is never sent, so not shown.
pub fn shown_url(url: &reqwest::Url) -> String {
    let mut shown = url.clone();
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.set_query(None);
    shown.set_fragment(None);
    let mut text = String::from(shown);
    if let Some(query) = url.query() {
        let redacted = crate::core::redact::REDACTED;
        let parts: Vec<String> = query
            .split('&')
            .map(|part| match part.split_once('=') {
                Some((name, _)) if !name.is_empty() => format!("{name}={redacted}"),
                _ => redacted.to_owned(),
            })
            .collect();
        text.push('?');
        text.push_str(&parts.join("&"));
    }
    text
}

fn fmt_retry_after(retry_after: Option<Duration>) -> String {
    match retry_after {
        Some(wait) => format!(", {}", crate::core::describe_retry_after(wait)),
        None => String::new(),
    }
}

impl AuxError {
    /// Worth another try within the same attempt: 5xx and connections that broke off only.
    /// Timeouts are not (the provider may be hung, and another try costs another `timeout`),
    /// nor 4xx (the same request would fail the same way), nor malformed or oversized replies,
    /// nor a provider that cannot be reached (the whole board waits for it instead).
    pub fn is_transient(&self) -> bool {
        matches!(self, AuxError::Server { .. } | AuxError::Transport(_))
    }

    /// The request never reached the provider: it cannot have been billed.
    pub fn is_undelivered(&self) -> bool {
        matches!(self, AuxError::Unreachable(_))
    }

    /// How long the provider asked to wait before trying again, if it said.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            AuxError::Server { retry_after, .. } | AuxError::RateLimited { retry_after } => {
                *retry_after
            }
            _ => None,
        }
    }

    /// The provider-wide fault this error is, if any: every card pauses for it, not just one (B5).
    pub fn provider_fault(&self) -> Option<ProviderFault> {
        match self {
            AuxError::Auth { status } => Some(ProviderFault::Auth { status: *status }),
            AuxError::Billing { status } => Some(ProviderFault::Billing { status: *status }),
            AuxError::RateLimited { retry_after } => Some(ProviderFault::RateLimited {
                retry_after: *retry_after,
            }),
            _ => None,
        }
    }

    /// The HTTP status that caused this error, when one arrived.
    pub fn http_status(&self) -> Option<u16> {
        match self {
            AuxError::Auth { status }
            | AuxError::Billing { status }
            | AuxError::Client { status }
            | AuxError::Server { status, .. } => Some(*status),
            AuxError::RateLimited { .. } => Some(429),
            AuxError::Timeout { .. }
            | AuxError::Unreachable(_)
            | AuxError::Transport(_)
            | AuxError::Malformed(_)
            | AuxError::TooLarge { .. }
            | AuxError::InvalidSettings(_) => None,
        }
    }

    /// What the ledger's `outcome` column records for this error.
    pub fn outcome(&self) -> LedgerOutcome {
        match self {
            AuxError::Auth { .. } => LedgerOutcome::Auth,
            AuxError::Billing { .. } => LedgerOutcome::Billing,
            AuxError::RateLimited { .. } => LedgerOutcome::RateLimited,
            AuxError::Client { .. } => LedgerOutcome::ClientError,
            AuxError::Server { .. } => LedgerOutcome::ServerError,
            AuxError::Timeout { .. } => LedgerOutcome::Timeout,
            AuxError::Unreachable(_) => LedgerOutcome::Unreachable,
            AuxError::Transport(_) => LedgerOutcome::Transport,
            AuxError::Malformed(_) => LedgerOutcome::Malformed,
            AuxError::TooLarge { .. } => LedgerOutcome::TooLarge,
            AuxError::InvalidSettings(_) => LedgerOutcome::InvalidSettings,
        }
    }
}

/// A chat-completions client holding one connection pool, so retries reuse connections.
pub struct AuxClient {
    http: reqwest::Client,
    endpoint: reqwest::Url,
    /// `endpoint` as messages show it ([`shown_url`]).
    shown_endpoint: String,
    /// The proxy requests go through (see `crate::proxy`), as messages show it.
    shown_proxy: Option<String>,
    settings: AuxSettings,
    /// Provider-specific request fields merged into every body (see [`AuxClient::with_extra_body`]).
    extra_body: serde_json::Map<String, Value>,
}

/// Why `extra_body` may not set request field `name` to `value`, if it may not: the one rule for
/// what a decompose request may carry beyond its own fields. A decompose call is one ordinary
/// completion: nothing may change what it is (`model`, `messages`), turn it into an agent's turn
/// (tools), stream it, or make the provider bill more than that one completion (several
/// choices or candidates, a web search, audio output, a dearer service tier). The configuration
/// refuses such a field with this reason; the client drops it too, so no caller gets it past.
pub fn refused_body_field(name: &str, value: &Value) -> Option<String> {
    let one = Value::from(1);
    match name {
        "model" => Some("not allowed: set auxiliary.kanban_decomposer.model instead".to_owned()),
        "messages" => Some("not allowed: the decomposer writes the prompt".to_owned()),
        "tools" | "tool_choice" | "functions" | "function_call" | "parallel_tool_calls" => Some(
            "not allowed: a decompose call never offers tools (providers and recorders tell aux \
             calls from agent turns by their absence)"
                .to_owned(),
        ),
        "stream_options" => Some(
            "not allowed: whether the reply streams is the client's choice (it reads both)"
                .to_owned(),
        ),
        "stream" if value != &Value::Bool(false) => Some(format!(
            "only false is allowed (the client asks for a plain reply and reads a stream \
             anyway), got {value}"
        )),
        // Each extra choice, or candidate, is billed as completion tokens of its own.
        "n" | "best_of" if value != &one => Some(format!(
            "only 1 is allowed (each extra choice is billed and none would be read), got {value}"
        )),
        "web_search_options" => {
            Some("not allowed: a web search is billed on top of the completion".to_owned())
        }
        "plugins" if mentions_web_plugin(value) => Some(
            "not allowed: the web plugin's search is billed on top of the completion".to_owned(),
        ),
        "modalities" if value != &serde_json::json!(["text"]) => Some(format!(
            "only [text] is allowed (audio output is billed at audio rates), got {value}"
        )),
        "audio" => Some("not allowed: audio output is billed at audio rates".to_owned()),
        "service_tier" if !matches!(value.as_str(), Some("auto" | "default" | "flex")) => {
            Some(format!(
                "only auto, default or flex is allowed (another tier bills each token at a \
                 higher rate), got {value}"
            ))
        }
        _ => None,
    }
}

/// Whether an OpenRouter-style `plugins` list names the web search plugin.
fn mentions_web_plugin(value: &Value) -> bool {
    let Some(plugins) = value.as_array() else {
        // Not a list: nothing the provider could read as a plugin, but nothing to check either.
        return !value.is_null();
    };
    plugins
        .iter()
        .any(|plugin| plugin.get("id").and_then(Value::as_str) == Some("web"))
}

impl fmt::Debug for AuxClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuxClient")
            .field("endpoint", &self.endpoint.as_str())
            .field("settings", &self.settings)
            .field("extra_body", &self.extra_body)
            .finish()
    }
}

/// The request body; no `tools` key on purpose (providers and recorders tell aux calls from agent
/// turns by its absence), and `stream: false` although streamed replies are read anyway.
#[derive(Serialize)]
struct ChatRequest<'a> {
    model: &'a str,
    messages: &'a [ChatMessage],
    temperature: f32,
    max_tokens: u32,
    stream: bool,
}

impl ChatRequest<'_> {
    /// The body with `extra` merged in: extra fields are added, and replace `temperature` and
    /// `max_tokens` (as upstream's client lets them), but never one [`refused_body_field`]
    /// refuses, nor `stream` (this body's own).
    fn to_json(&self, extra: &serde_json::Map<String, Value>) -> serde_json::Result<Vec<u8>> {
        if extra.is_empty() {
            return serde_json::to_vec(self);
        }
        // Through the text form, so that numbers keep their shortest spelling (`0.2`, not the
        // f32's `0.20000000298023224`).
        let mut body: serde_json::Map<String, Value> =
            serde_json::from_slice(&serde_json::to_vec(self)?)?;
        for (key, value) in extra {
            if key != "stream" && refused_body_field(key, value).is_none() {
                body.insert(key.clone(), value.clone());
            }
        }
        serde_json::to_vec(&body)
    }
}

impl AuxClient {
    /// Checks the settings and builds the HTTP client; sends nothing.
    pub fn new(settings: AuxSettings) -> Result<Self, AuxError> {
        let has_key = settings
            .api_key
            .as_deref()
            .is_some_and(|key| !key.trim().is_empty());
        let endpoint = request_url(&settings.base_url, &["chat", "completions"], has_key)?;
        if !settings.temperature.is_finite() {
            return Err(AuxError::InvalidSettings(format!(
                "temperature must be a finite number, got {}",
                settings.temperature
            )));
        }

        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        if let Some(key) = settings
            .api_key
            .as_deref()
            .map(str::trim)
            .filter(|k| !k.is_empty())
        {
            // The error names no part of the key: it could end up in a log.
            let mut value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                AuxError::InvalidSettings(
                    "API key contains characters not allowed in an HTTP header".to_owned(),
                )
            })?;
            value.set_sensitive(true);
            headers.insert(header::AUTHORIZATION, value);
        }

        // The client reads no proxy setting of its own: the one decided there (and named in the
        // start line) is the one used.
        let (builder, proxy) =
            crate::proxy::client_builder(&endpoint).map_err(AuxError::InvalidSettings)?;
        let shown_proxy = proxy.as_ref().map(shown_url);
        let http = builder
            .user_agent(concat!("hermes/", env!("CARGO_PKG_VERSION")))
            // A connection that cannot even be opened in this time is a provider that cannot be
            // reached (nothing was sent), not a hung reply.
            .connect_timeout(connect_timeout(settings.timeout))
            .default_headers(headers)
            // Following a redirect would be a second request inside one ledger row.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|err| AuxError::InvalidSettings(format!("cannot build HTTP client: {err}")))?;

        Ok(Self {
            http,
            shown_proxy,
            shown_endpoint: shown_url(&endpoint),
            endpoint,
            settings,
            extra_body: serde_json::Map::new(),
        })
    }

    /// Merges `extra` into every request body (upstream's `extra_body`: provider routing, a
    /// reasoning level, …). Fields that would change what the call is or how much of it is
    /// billed are dropped (see [`refused_body_field`]); `temperature` and `max_tokens` may be
    /// replaced.
    pub fn with_extra_body(mut self, extra: serde_json::Map<String, Value>) -> Self {
        self.extra_body = extra;
        self
    }

    /// One POST `{base_url}/chat/completions`, bounded by the configured timeout and body cap.
    pub async fn send_once(&self, messages: &[ChatMessage]) -> Result<Completion, AuxError> {
        let body = ChatRequest {
            model: &self.settings.model,
            messages,
            temperature: self.settings.temperature,
            max_tokens: self.settings.max_tokens,
            stream: false,
        }
        .to_json(&self.extra_body)
        .map_err(|err| AuxError::InvalidSettings(format!("cannot encode request: {err}")))?;
        let (http_status, reply) = self.bounded(body).await?;
        let content = reply.content.unwrap_or_default();
        if content.trim().is_empty() {
            return Err(AuxError::Malformed("empty reply".to_owned()));
        }
        Ok(Completion {
            content,
            http_status,
            usage: reply.usage,
            streamed: reply.streamed,
        })
    }

    /// One agent turn: a POST `{base_url}/chat/completions` carrying `messages` (any chat
    /// messages, tool results included) and `tools` (function schemas), bounded like
    /// [`Self::send_once`]. Its reply must hold text or tool calls (a JSON completion or an SSE
    /// stream of deltas, tool-call pieces included).
    pub async fn send_turn(
        &self,
        messages: &[Value],
        tools: &[Value],
    ) -> Result<AgentTurn, AuxError> {
        let body = serde_json::json!({
            "model": self.settings.model,
            "messages": messages,
            "tools": tools,
            "tool_choice": "auto",
            "temperature": self.settings.temperature,
            "max_tokens": self.settings.max_tokens,
            "stream": false,
        });
        let body = serde_json::to_vec(&body)
            .map_err(|err| AuxError::InvalidSettings(format!("cannot encode request: {err}")))?;
        let (http_status, reply) = self.bounded(body).await?;
        let content = reply.content.filter(|c| !c.trim().is_empty());
        if content.is_none() && reply.tool_calls.is_empty() {
            return Err(AuxError::Malformed(
                "empty reply: neither text nor a tool call".to_owned(),
            ));
        }
        Ok(AgentTurn {
            content,
            tool_calls: reply.tool_calls,
            http_status,
            usage: reply.usage,
            streamed: reply.streamed,
        })
    }

    /// [`Self::exchange`] within the configured timeout.
    async fn bounded(&self, body: Vec<u8>) -> Result<(u16, ParsedReply), AuxError> {
        let timeout = self.settings.timeout;
        match tokio::time::timeout(timeout, self.exchange(body)).await {
            Ok(result) => result,
            Err(_elapsed) => Err(AuxError::Timeout {
                url: self.shown_endpoint.clone(),
                after: timeout,
            }),
        }
    }

    /// The URL requests go to.
    pub fn endpoint(&self) -> &str {
        self.endpoint.as_str()
    }

    /// The model every request names.
    pub fn model(&self) -> &str {
        &self.settings.model
    }

    /// The URL requests go to, as it may be shown ([`shown_url`]).
    pub fn shown_endpoint(&self) -> &str {
        &self.shown_endpoint
    }

    /// The proxy requests go through, as it may be shown; `None` when they go direct.
    pub fn shown_proxy(&self) -> Option<&str> {
        self.shown_proxy.as_deref()
    }

    /// A 502 or 504 through a proxy is the proxy saying it could not reach the provider (or
    /// heard nothing back in time): nothing reached the provider that it could bill, so it is
    /// an unreachable provider (no card's budget spent, the board paused), not a failed attempt.
    fn proxy_could_not_reach(&self, status: u16) -> Option<AuxError> {
        let proxy = self.shown_proxy.as_deref()?;
        matches!(status, 502 | 504).then(|| {
            AuxError::Unreachable(Connection {
                url: self.shown_endpoint.clone(),
                detail: format!(
                    "the proxy {proxy} answered HTTP {status}: it could not reach the provider"
                ),
            })
        })
    }

    /// Whether requests carry the base URL's userinfo as Basic auth: only when no key is set
    /// (a key takes its place, see [`AuxClient::new`]).
    pub fn sends_url_credentials(&self) -> bool {
        !self.endpoint.username().is_empty() || self.endpoint.password().is_some()
    }

    async fn exchange(&self, body: Vec<u8>) -> Result<(u16, ParsedReply), AuxError> {
        let mut response = self
            .http
            .post(self.endpoint.clone())
            .body(body)
            .send()
            .await
            .map_err(|err| send_error(err, &self.shown_endpoint))?;

        let status = response.status();
        if !status.is_success() {
            if let Some(error) = self.proxy_could_not_reach(status.as_u16()) {
                return Err(error);
            }
            let error = status_error(status.as_u16(), response.headers(), SystemTime::now());
            log_error_snippet(response, &error);
            return Err(error);
        }

        let limit = self.settings.max_body_bytes;
        if response
            .content_length()
            .is_some_and(|len| len > limit as u64)
        {
            return Err(AuxError::TooLarge { limit });
        }

        let is_event_stream = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| {
                value
                    .trim_start()
                    .to_ascii_lowercase()
                    .starts_with("text/event-stream")
            });

        let reply = if is_event_stream {
            read_event_stream(&mut response, limit, &self.shown_endpoint).await?
        } else {
            let body = read_capped(&mut response, limit, &self.shown_endpoint).await?;
            parse_json_or_sse_body(&body)?
        };
        Ok((status.as_u16(), reply))
    }
}

/// What a reply body yields before the emptiness check.
struct ParsedReply {
    /// `None` only beside tool calls: a reply with neither is refused while it is parsed.
    content: Option<String>,
    tool_calls: Vec<ToolCall>,
    usage: Usage,
    streamed: bool,
}

/// Half the request's bound, at most [`MAX_CONNECT_TIMEOUT`]: a connect that takes longer than
/// that is a host that does not answer.
fn connect_timeout(timeout: Duration) -> Duration {
    (timeout / 2).min(MAX_CONNECT_TIMEOUT)
}

#[cfg(test)]
fn chat_completions_url(base_url: &str) -> Result<reqwest::Url, AuxError> {
    endpoint_url(base_url, &["chat", "completions"])
}

/// The URL a request to `path` under `base_url` is sent to ([`endpoint_url`]), with what it
/// authorizes by: with a key (`keyed`), the URL's userinfo is dropped, since the configured key
/// is what authorizes a call and credentials in the URL would otherwise be sent as Basic auth
/// in its place (contract §5); without one, the userinfo is kept, and sent so.
pub fn request_url(base_url: &str, path: &[&str], keyed: bool) -> Result<reqwest::Url, AuxError> {
    let mut url = endpoint_url(base_url, path)?;
    if keyed {
        let _ = url.set_username("");
        let _ = url.set_password(None);
    }
    Ok(url)
}

/// The URL of `path` under an OpenAI-compatible base: the path segments are appended to the
/// base's path (trailing slashes dropped), and its query and userinfo are kept as they are, so
/// `http://h/v1?api-version=X` gives `http://h/v1/chat/completions?api-version=X`. Every URL the
/// reference sends to is built here: joined on the parsed path, never by gluing text (which
/// would put the path inside the query).
pub fn endpoint_url(base_url: &str, path: &[&str]) -> Result<reqwest::Url, AuxError> {
    let base = base_url.trim();
    if base.is_empty() {
        return Err(AuxError::InvalidSettings(
            "model base URL is empty".to_owned(),
        ));
    }
    let mut url = reqwest::Url::parse(base).map_err(|err| {
        AuxError::InvalidSettings(format!("model base URL {base:?} is not a valid URL: {err}"))
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(AuxError::InvalidSettings(format!(
            "model base URL {base:?} must be http or https, not {}",
            url.scheme()
        )));
    }
    // Only read as a base by the client; a fragment is never sent.
    url.set_fragment(None);
    // The raw (percent-encoded) path, so that an escape in it is kept as it is, not escaped
    // again.
    let base_path = url.path().trim_end_matches('/').to_owned();
    url.set_path(&format!("{base_path}/{}", path.join("/")));
    Ok(url)
}

/// An error before any reply arrived: no connection at all means nothing was delivered.
fn send_error(err: reqwest::Error, url: &str) -> AuxError {
    let undelivered = err.is_connect();
    match transport_error(err, url) {
        AuxError::Transport(connection) if undelivered => AuxError::Unreachable(connection),
        other => other,
    }
}

/// Flattens the error chain: reqwest's own message ("error sending request") hides the cause
/// ("Connection refused") in its sources. The URL is ours (`url`, [`shown_url`]): reqwest's would
/// carry the userinfo and the query.
fn transport_error(err: reqwest::Error, url: &str) -> AuxError {
    let err = err.without_url();
    let mut message = err.to_string();
    let mut source = std::error::Error::source(&err);
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    AuxError::Transport(Connection {
        url: url.to_owned(),
        detail: message,
    })
}

fn status_error(status: u16, headers: &HeaderMap, now: SystemTime) -> AuxError {
    match status {
        401 | 403 => AuxError::Auth { status },
        402 => AuxError::Billing { status },
        429 => AuxError::RateLimited {
            retry_after: retry_after(headers, now),
        },
        500..=599 => AuxError::Server {
            status,
            retry_after: retry_after(headers, now),
        },
        _ => AuxError::Client { status },
    }
}

fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    headers
        .get(header::RETRY_AFTER)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| parse_retry_after(value, now))
}

/// `Retry-After` as delay-seconds (integer or, leniently, fractional) or an HTTP date; a date in
/// the past means "now", and a number too large to represent (or infinity) reads as
/// [`Duration::MAX`], for the caller to cap. Anything else (a negative number, NaN, text that is
/// neither) is unreadable: `None`.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<f64>() {
        if seconds.is_nan() || seconds < 0.0 {
            return None;
        }
        return Some(Duration::try_from_secs_f64(seconds).unwrap_or(Duration::MAX));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Logs the start of an error reply at debug level. The status already decided the error, so
/// the body is read off the caller's path: a provider that sends a 500 and then stalls must not
/// turn a server error into a timeout.
fn log_error_snippet(mut response: reqwest::Response, error: &AuxError) {
    if !tracing::enabled!(tracing::Level::DEBUG) {
        return;
    }
    let outcome = error.outcome().as_str();
    tokio::spawn(async move {
        let mut snippet = Vec::new();
        let read = async {
            while snippet.len() < ERROR_BODY_SNIPPET_BYTES {
                match response.chunk().await {
                    Ok(Some(chunk)) => snippet.extend_from_slice(&chunk),
                    Ok(None) | Err(_) => break,
                }
            }
        };
        let _ = tokio::time::timeout(ERROR_BODY_SNIPPET_WAIT, read).await;
        snippet.truncate(ERROR_BODY_SNIPPET_BYTES);
        tracing::debug!(
            outcome,
            body = %String::from_utf8_lossy(&snippet),
            "aux provider returned an error status"
        );
    });
}

/// The whole body, refusing to hold more than `limit` bytes.
async fn read_capped(
    response: &mut reqwest::Response,
    limit: usize,
    url: &str,
) -> Result<Vec<u8>, AuxError> {
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|err| transport_error(err, url))?
    {
        if body.len().saturating_add(chunk.len()) > limit {
            return Err(AuxError::TooLarge { limit });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Parses the stream as it arrives, so a provider that sends `[DONE]` and then holds the
/// connection open is not waited on.
async fn read_event_stream(
    response: &mut reqwest::Response,
    limit: usize,
    url: &str,
) -> Result<ParsedReply, AuxError> {
    let mut stream = SseReader::default();
    let mut received = 0usize;
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|err| transport_error(err, url))?
    {
        received = received.saturating_add(chunk.len());
        if received > limit {
            return Err(AuxError::TooLarge { limit });
        }
        if stream.feed(&chunk)? {
            return Ok(stream.into_reply());
        }
    }
    stream.finish()
}

/// A JSON body, or — for providers that stream without saying so — an SSE body.
fn parse_json_or_sse_body(body: &[u8]) -> Result<ParsedReply, AuxError> {
    match serde_json::from_slice::<Value>(body) {
        Ok(reply) => parse_json_reply(&reply),
        Err(json_err) => {
            let text = String::from_utf8_lossy(body);
            if text.trim_start().starts_with("data:") {
                let mut stream = SseReader::default();
                if stream.feed(body)? {
                    return Ok(stream.into_reply());
                }
                stream.finish()
            } else {
                Err(AuxError::Malformed(format!(
                    "reply is not JSON: {json_err}"
                )))
            }
        }
    }
}

fn parse_json_reply(reply: &Value) -> Result<ParsedReply, AuxError> {
    if let Some(message) = provider_error_message(reply) {
        return Err(AuxError::Malformed(format!("provider error: {message}")));
    }
    let tool_calls = match reply.pointer("/choices/0/message/tool_calls") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(calls)) => calls
            .iter()
            .map(whole_tool_call)
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(AuxError::Malformed(format!(
                "choices[0].message.tool_calls is {}, not a list",
                json_kind(other)
            )))
        }
    };
    let content = match reply.pointer("/choices/0/message/content") {
        // An agent's turn may be tool calls alone.
        None | Some(Value::Null) if !tool_calls.is_empty() => None,
        None => {
            return Err(AuxError::Malformed(
                "reply has no choices[0].message.content".to_owned(),
            ))
        }
        Some(Value::String(text)) => Some(text.clone()),
        Some(other) => {
            return Err(AuxError::Malformed(format!(
                "choices[0].message.content is {}, not a string",
                json_kind(other)
            )))
        }
    };
    Ok(ParsedReply {
        content,
        tool_calls,
        usage: reply.get("usage").map(parse_usage).unwrap_or_default(),
        streamed: false,
    })
}

/// One whole tool call of a JSON completion.
fn whole_tool_call(call: &Value) -> Result<ToolCall, AuxError> {
    let name = call
        .pointer("/function/name")
        .and_then(Value::as_str)
        .filter(|name| !name.is_empty())
        .ok_or_else(|| AuxError::Malformed("a tool call names no function".to_owned()))?;
    Ok(ToolCall {
        id: call
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        name: name.to_owned(),
        arguments: arguments_text(call.pointer("/function/arguments")),
    })
}

/// A tool call's arguments as JSON text: a string as it is, an object written out, nothing as
/// `{}`.
fn arguments_text(arguments: Option<&Value>) -> String {
    match arguments {
        None | Some(Value::Null) => "{}".to_owned(),
        Some(Value::String(text)) => text.clone(),
        Some(other) => other.to_string(),
    }
}

/// The message of an `error` object (or string) that some providers send with a 2xx status, cut
/// to what the board would keep of it with its original size noted: a provider's megabyte of
/// error text is not carried further than the reply's own buffer.
fn provider_error_message(reply: &Value) -> Option<String> {
    use crate::core::text::{cut, PROVIDER_MESSAGE_CAP};
    let message = whole_provider_error_message(reply)?;
    Some(cut(&message, PROVIDER_MESSAGE_CAP).into_owned())
}

fn whole_provider_error_message(reply: &Value) -> Option<String> {
    let error = reply.get("error")?;
    match error {
        Value::Null => None,
        Value::String(message) => Some(message.clone()),
        Value::Object(fields) => Some(match fields.get("message").and_then(Value::as_str) {
            Some(message) => message.to_owned(),
            None => error.to_string(),
        }),
        other => Some(other.to_string()),
    }
}

fn parse_usage(usage: &Value) -> Usage {
    Usage {
        prompt_tokens: usage.get("prompt_tokens").and_then(Value::as_u64),
        completion_tokens: usage.get("completion_tokens").and_then(Value::as_u64),
    }
}

/// What kind of JSON value this is, for error messages ("got a number").
pub(crate) fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The most tool calls one streamed turn may assemble.
const MAX_TOOL_CALLS: usize = 64;

/// Incremental server-sent-events decoder for chat-completion chunks.
///
/// Lines may end in `\n`, `\r\n` or `\r`, and a terminator may be split across network chunks;
/// an event is the `data:` lines before a blank line, joined with `\n`.
#[derive(Default)]
struct SseReader {
    /// Bytes of the line not yet terminated (kept as bytes: a UTF-8 sequence may be split).
    line: Vec<u8>,
    /// The previous byte was `\r`, so a following `\n` belongs to the same terminator.
    after_cr: bool,
    /// `data:` lines of the event being assembled.
    event_data: Vec<String>,
    content: String,
    /// Tool calls assembled from `delta.tool_calls` pieces, by their `index`.
    tool_calls: Vec<ToolCall>,
    usage: Usage,
    finish_reason: Option<String>,
}

impl SseReader {
    /// Consumes bytes; `Ok(true)` once `[DONE]` has been seen (anything after it is ignored).
    fn feed(&mut self, bytes: &[u8]) -> Result<bool, AuxError> {
        for &byte in bytes {
            if self.after_cr {
                self.after_cr = false;
                if byte == b'\n' {
                    continue;
                }
            }
            match byte {
                b'\n' | b'\r' => {
                    self.after_cr = byte == b'\r';
                    let line = std::mem::take(&mut self.line);
                    if self.end_line(&line)? {
                        return Ok(true);
                    }
                }
                other => self.line.push(other),
            }
        }
        Ok(false)
    }

    /// End of input: a final event without its blank line still counts, but a stream that
    /// never said it was complete is not turned into a success from a fragment.
    fn finish(mut self) -> Result<ParsedReply, AuxError> {
        let line = std::mem::take(&mut self.line);
        if self.end_line(&line)? {
            return Ok(self.into_reply());
        }
        if !self.event_data.is_empty() {
            let data = self.event_data.join("\n");
            if data.trim() != "[DONE]" && serde_json::from_str::<Value>(&data).is_err() {
                return Err(AuxError::Malformed(
                    "stream ended mid-event before [DONE]".to_owned(),
                ));
            }
        }
        if self.end_event()? || self.finish_reason.is_some() {
            Ok(self.into_reply())
        } else {
            Err(AuxError::Malformed("stream ended before [DONE]".to_owned()))
        }
    }

    fn into_reply(self) -> ParsedReply {
        ParsedReply {
            content: Some(self.content),
            tool_calls: self.tool_calls,
            usage: self.usage,
            streamed: true,
        }
    }

    /// Adds one chunk's `delta.tool_calls` pieces: the first piece of a call brings its id and
    /// name, every piece may bring more of its arguments.
    fn add_tool_call_pieces(&mut self, pieces: &Value) -> Result<(), AuxError> {
        let Some(pieces) = pieces.as_array() else {
            return Err(AuxError::Malformed(format!(
                "stream delta tool_calls is {}, not a list",
                json_kind(pieces)
            )));
        };
        for piece in pieces {
            let index = piece
                .get("index")
                .and_then(Value::as_u64)
                .and_then(|i| usize::try_from(i).ok())
                .unwrap_or(self.tool_calls.len().saturating_sub(1));
            if index > self.tool_calls.len() || index >= MAX_TOOL_CALLS {
                return Err(AuxError::Malformed(format!(
                    "stream tool call index {index} out of order"
                )));
            }
            if index == self.tool_calls.len() {
                self.tool_calls.push(ToolCall {
                    id: String::new(),
                    name: String::new(),
                    arguments: String::new(),
                });
            }
            let call = &mut self.tool_calls[index];
            if let Some(id) = piece.get("id").and_then(Value::as_str) {
                call.id = id.to_owned();
            }
            if let Some(name) = piece.pointer("/function/name").and_then(Value::as_str) {
                call.name.push_str(name);
            }
            match piece.pointer("/function/arguments") {
                None | Some(Value::Null) => {}
                Some(Value::String(more)) => call.arguments.push_str(more),
                Some(other) => call.arguments.push_str(&other.to_string()),
            }
        }
        Ok(())
    }

    fn end_line(&mut self, line: &[u8]) -> Result<bool, AuxError> {
        if line.is_empty() {
            return self.end_event();
        }
        let line = std::str::from_utf8(line)
            .map_err(|_| AuxError::Malformed("stream line is not UTF-8".to_owned()))?;
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        // Comments (empty field name), `event:`, `id:` and `retry:` carry nothing we need.
        if field == "data" {
            self.event_data.push(value.to_owned());
        }
        Ok(false)
    }

    fn end_event(&mut self) -> Result<bool, AuxError> {
        if self.event_data.is_empty() {
            return Ok(false);
        }
        let data = std::mem::take(&mut self.event_data).join("\n");
        if data.trim() == "[DONE]" {
            return Ok(true);
        }
        let chunk: Value = serde_json::from_str(&data)
            .map_err(|err| AuxError::Malformed(format!("stream chunk is not JSON: {err}")))?;
        if let Some(message) = provider_error_message(&chunk) {
            return Err(AuxError::Malformed(format!(
                "provider error in stream: {message}"
            )));
        }
        if let Some(choice) = chunk.pointer("/choices/0") {
            match choice.pointer("/delta/content") {
                None | Some(Value::Null) => {}
                Some(Value::String(piece)) => self.content.push_str(piece),
                Some(other) => {
                    return Err(AuxError::Malformed(format!(
                        "stream delta content is {}, not a string",
                        json_kind(other)
                    )))
                }
            }
            if let Some(pieces) = choice.pointer("/delta/tool_calls").filter(|v| !v.is_null()) {
                self.add_tool_call_pieces(pieces)?;
            }
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                self.finish_reason = Some(reason.to_owned());
            }
        }
        if let Some(usage) = chunk.get("usage").filter(|usage| usage.is_object()) {
            self.usage = parse_usage(usage);
        }
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sse(body: &str) -> Result<ParsedReply, AuxError> {
        let mut reader = SseReader::default();
        if reader.feed(body.as_bytes())? {
            return Ok(reader.into_reply());
        }
        reader.finish()
    }

    fn connection(detail: &str) -> Connection {
        Connection {
            url: "http://127.0.0.1:9/v1/chat/completions".into(),
            detail: detail.into(),
        }
    }

    #[test]
    fn a_shown_url_carries_no_credentials_and_no_query_values() {
        let shown = |text: &str| reqwest::Url::parse(text).map(|url| shown_url(&url)).ok();
        assert_eq!(
            shown("https://ops:s3cr3t@llm.example:8443/v1/chat/completions").as_deref(),
            Some("https://llm.example:8443/v1/chat/completions")
        );
        assert_eq!(
            shown("http://token@127.0.0.1:9/v1?key=sk-in-query#frag").as_deref(),
            Some("http://127.0.0.1:9/v1?key=<redacted>")
        );
        assert_eq!(
            shown("http://h/v1/chat/completions?api-version=2024-06-01&sk-bare&=x").as_deref(),
            Some("http://h/v1/chat/completions?api-version=<redacted>&<redacted>&<redacted>")
        );
        assert_eq!(
            shown("http://127.0.0.1:9/v1/chat/completions").as_deref(),
            Some("http://127.0.0.1:9/v1/chat/completions")
        );
        let error = AuxError::Unreachable(connection("tcp connect error: Connection refused"));
        assert_eq!(
            error.to_string(),
            "provider unreachable: http://127.0.0.1:9/v1/chat/completions: tcp connect error: \
             Connection refused"
        );
    }

    #[test]
    fn base_url_with_or_without_trailing_slash() {
        for base in [
            "http://127.0.0.1:9/v1",
            "http://127.0.0.1:9/v1/",
            " http://127.0.0.1:9/v1// ",
        ] {
            let url = chat_completions_url(base).map(|url| url.to_string());
            assert_eq!(
                url,
                Ok("http://127.0.0.1:9/v1/chat/completions".to_owned()),
                "{base}"
            );
        }
    }

    #[test]
    fn a_base_urls_query_stays_a_query_after_the_path() {
        for (base, expected) in [
            (
                "http://h/v1?api-version=2024-06-01",
                "http://h/v1/chat/completions?api-version=2024-06-01",
            ),
            (
                "https://u:p@h:8443/openai/deployments/d/?api-version=x&key=k#frag",
                "https://u:p@h:8443/openai/deployments/d/chat/completions?api-version=x&key=k",
            ),
            ("http://h", "http://h/chat/completions"),
            ("http://h/", "http://h/chat/completions"),
            ("http://h?x=1", "http://h/chat/completions?x=1"),
            ("http://h/v1%2Fa/", "http://h/v1%2Fa/chat/completions"),
        ] {
            let url = chat_completions_url(base).map(|url| url.to_string());
            assert_eq!(url, Ok(expected.to_owned()), "{base}");
        }
        assert_eq!(
            endpoint_url("http://h/v1?k=v", &["models"]).map(|u| u.to_string()),
            Ok("http://h/v1/models?k=v".to_owned())
        );
    }

    #[test]
    fn base_url_must_be_http() {
        for base in ["", "ftp://example.invalid/v1", "not a url"] {
            let err = chat_completions_url(base).err();
            assert!(
                matches!(err, Some(AuxError::InvalidSettings(_))),
                "{base}: {err:?}"
            );
        }
    }

    #[test]
    fn retry_after_forms() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(parse_retry_after("30", now), Some(Duration::from_secs(30)));
        assert_eq!(
            parse_retry_after(" 1.5 ", now),
            Some(Duration::from_millis(1500))
        );
        let later = httpdate::fmt_http_date(now + Duration::from_secs(90));
        assert_eq!(
            parse_retry_after(&later, now),
            Some(Duration::from_secs(90))
        );
        let earlier = httpdate::fmt_http_date(now - Duration::from_secs(90));
        assert_eq!(parse_retry_after(&earlier, now), Some(Duration::ZERO));
        for junk in ["soon", "-5", "-0.5", "NaN", "-inf", ""] {
            assert_eq!(parse_retry_after(junk, now), None, "{junk:?}");
        }
        for huge in ["99999999999999999999", "1e300", "inf"] {
            assert_eq!(
                parse_retry_after(huge, now),
                Some(Duration::MAX),
                "{huge:?}"
            );
        }
        assert_eq!(
            parse_retry_after("0.001", now),
            Some(Duration::from_millis(1))
        );
    }

    #[test]
    fn sse_tolerates_crlf_comments_events_and_multiline_data() {
        let body = ": keep-alive\r\n\r\nevent: message\r\ndata: {\"choices\":[{\"delta\":\r\ndata: {\"content\":\"he\"}}]}\r\n\r\ndata: {\"choices\":[{\"delta\":{\"content\":\"llo\"}}]}\r\rdata: [DONE]\r\n\r\n";
        let reply = sse(body).ok().and_then(|reply| reply.content);
        assert_eq!(reply.as_deref(), Some("hello"));
    }

    #[test]
    fn sse_split_at_every_byte_boundary() {
        let body =
            "data: {\"choices\":[{\"delta\":{\"content\":\"é✓\"}}]}\r\n\r\ndata: [DONE]\r\n\r\n";
        let mut reader = SseReader::default();
        let mut done = false;
        for byte in body.as_bytes() {
            done = matches!(reader.feed(std::slice::from_ref(byte)), Ok(true));
            if done {
                break;
            }
        }
        assert!(done, "[DONE] seen");
        assert_eq!(reader.into_reply().content.as_deref(), Some("é✓"));
    }

    #[test]
    fn sse_final_done_without_blank_line_counts() {
        let reply = sse("data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]");
        assert_eq!(
            reply.ok().and_then(|reply| reply.content).as_deref(),
            Some("x")
        );
    }

    #[test]
    fn sse_cut_mid_chunk_is_malformed() {
        let err =
            sse("data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: {\"choi").err();
        assert_eq!(
            err,
            Some(AuxError::Malformed(
                "stream ended mid-event before [DONE]".to_owned()
            ))
        );
    }

    #[test]
    fn sse_error_object_is_malformed_with_its_message() {
        let err = sse("data: {\"error\":{\"message\":\"quota gone\"}}\n\n").err();
        assert_eq!(
            err,
            Some(AuxError::Malformed(
                "provider error in stream: quota gone".to_owned()
            ))
        );
    }

    #[test]
    fn json_content_must_be_a_string() {
        for body in [
            r#"{"choices":[{"message":{"content":null}}]}"#,
            r#"{"choices":[{"message":{"content":5}}]}"#,
            r#"{"choices":[]}"#,
            r#"{}"#,
            r#"[1]"#,
        ] {
            let err = parse_json_or_sse_body(body.as_bytes()).err();
            assert!(
                matches!(err, Some(AuxError::Malformed(_))),
                "{body}: {err:?}"
            );
        }
    }

    #[test]
    fn outcome_labels_and_transience() {
        let cases = [
            (AuxError::Auth { status: 401 }, "auth", false, Some(401)),
            (
                AuxError::Billing { status: 402 },
                "billing",
                false,
                Some(402),
            ),
            (
                AuxError::RateLimited { retry_after: None },
                "rate_limited",
                false,
                Some(429),
            ),
            (
                AuxError::Client { status: 404 },
                "client_error",
                false,
                Some(404),
            ),
            (
                AuxError::Server {
                    status: 503,
                    retry_after: None,
                },
                "server_error",
                true,
                Some(503),
            ),
            (
                AuxError::Unreachable(connection("connection refused")),
                "unreachable",
                false,
                None,
            ),
            (
                AuxError::Timeout {
                    url: "http://127.0.0.1:9/v1/chat/completions".into(),
                    after: Duration::from_secs(1),
                },
                "timeout",
                false,
                None,
            ),
            (
                AuxError::Transport(connection("reset")),
                "transport",
                true,
                None,
            ),
            (AuxError::Malformed("x".into()), "malformed", false, None),
            (AuxError::TooLarge { limit: 1 }, "too_large", false, None),
        ];
        for (error, outcome, transient, status) in cases {
            assert_eq!(error.is_undelivered(), outcome == "unreachable", "{error}");
            assert_eq!(error.outcome().as_str(), outcome);
            assert_eq!(error.is_transient(), transient, "{error}");
            assert_eq!(error.http_status(), status, "{error}");
        }
    }

    #[test]
    fn extra_body_is_merged_but_cannot_change_the_call() {
        let messages = [ChatMessage::user("Task id: t_1")];
        let request = ChatRequest {
            model: "m",
            messages: &messages,
            temperature: 0.25,
            max_tokens: 100,
            stream: false,
        };
        let extra: serde_json::Map<String, Value> = serde_json::from_value(serde_json::json!({
            "provider": {"sort": "price"}, "temperature": 0.0, "max_tokens": 50,
            "model": "other", "messages": [], "stream": true, "stream_options": {}, "n": 3,
            "tools": [], "tool_choice": "auto", "functions": [], "function_call": "auto",
            "parallel_tool_calls": true, "best_of": 4, "web_search_options": {},
            "service_tier": "priority", "modalities": ["text", "audio"], "audio": {},
            "plugins": [{"id": "web"}],
        }))
        .unwrap();
        let body: Value = serde_json::from_slice(&request.to_json(&extra).unwrap()).unwrap();
        assert_eq!(
            body,
            serde_json::json!({
                "model": "m", "messages": [{"role": "user", "content": "Task id: t_1"}],
                "temperature": 0.0, "max_tokens": 50, "stream": false,
                "provider": {"sort": "price"},
            })
        );
        let plain: Value =
            serde_json::from_slice(&request.to_json(&serde_json::Map::new()).unwrap()).unwrap();
        assert_eq!(plain["temperature"], 0.25);
        let tenths = ChatRequest {
            temperature: 0.2,
            ..request
        };
        let text = String::from_utf8(tenths.to_json(&extra).unwrap()).unwrap();
        assert!(text.contains("\"max_tokens\":50"), "{text}");
        let text = String::from_utf8(
            ChatRequest {
                temperature: 0.2,
                ..tenths
            }
            .to_json(&serde_json::from_value(serde_json::json!({"top_p": 0.5})).unwrap())
            .unwrap(),
        )
        .unwrap();
        assert!(text.contains("\"temperature\":0.2,"), "{text}");
        assert!(plain.get("tools").is_none());
    }

    #[test]
    fn a_json_turn_may_be_tool_calls_alone_and_their_arguments_any_json() {
        let reply = serde_json::json!({"choices": [{"message": {
        "role": "assistant", "content": null,
        "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "kanban_complete", "arguments": "{\"summary\":\"ok\"}"}},
            {"id": "c2", "type": "function",
             "function": {"name": "kanban_comment", "arguments": {"body": "x"}}},
        ]}}]});
        let parsed = parse_json_reply(&reply).unwrap();
        assert_eq!(parsed.content, None);
        assert_eq!(parsed.tool_calls.len(), 2);
        assert_eq!(parsed.tool_calls[0].name, "kanban_complete");
        assert_eq!(parsed.tool_calls[0].arguments, "{\"summary\":\"ok\"}");
        assert_eq!(parsed.tool_calls[1].arguments, "{\"body\":\"x\"}");
        // Without tool calls the content rules are a decompose call's.
        let text_only = serde_json::json!({"choices": [{"message": {"content": null}}]});
        assert!(parse_json_reply(&text_only).is_err());
        let nameless = serde_json::json!({"choices": [{"message": {"tool_calls": [{"id": "c"}]}}]});
        assert!(matches!(
            parse_json_reply(&nameless),
            Err(AuxError::Malformed(_))
        ));
        let not_a_list = serde_json::json!({"choices": [{"message": {"tool_calls": 3}}]});
        assert!(matches!(
            parse_json_reply(&not_a_list),
            Err(AuxError::Malformed(_))
        ));
    }

    #[test]
    fn a_streamed_turn_assembles_its_tool_calls_from_their_pieces() {
        let chunk = |delta: serde_json::Value| {
            format!(
                "data: {}\n\n",
                serde_json::json!({"choices": [{"delta": delta}]})
            )
        };
        let body = [
            chunk(serde_json::json!({"role": "assistant", "content": ""})),
            chunk(
                serde_json::json!({"tool_calls": [{"index": 0, "id": "call_1",
                "function": {"name": "kanban_block", "arguments": ""}}]}),
            ),
            chunk(serde_json::json!({"tool_calls": [{"index": 0,
                "function": {"arguments": "{\"reason\":"}}]})),
            chunk(serde_json::json!({"tool_calls": [{"index": 0,
                "function": {"arguments": "\"stuck\"}"}}]})),
            chunk(
                serde_json::json!({"tool_calls": [{"index": 1, "id": "call_2",
                "function": {"name": "kanban_heartbeat", "arguments": "{}"}}]}),
            ),
            "data: [DONE]\n\n".to_owned(),
        ]
        .concat();
        let reply = sse(&body).unwrap();
        assert_eq!(reply.content.as_deref(), Some(""));
        let calls = reply.tool_calls;
        assert_eq!(calls.len(), 2);
        assert_eq!(
            (
                calls[0].id.as_str(),
                calls[0].name.as_str(),
                calls[0].arguments.as_str()
            ),
            ("call_1", "kanban_block", "{\"reason\":\"stuck\"}")
        );
        assert_eq!(calls[1].name, "kanban_heartbeat");
        let skipping = chunk(serde_json::json!({"tool_calls": [{"index": 5, "id": "x"}]}));
        assert!(matches!(sse(&skipping), Err(AuxError::Malformed(_))));
    }

    #[test]
    fn debug_never_shows_the_key() {
        let settings = AuxSettings {
            base_url: "http://127.0.0.1:9/v1".into(),
            model: "m".into(),
            api_key: Some("sk-very-secret".into()),
            timeout: Duration::from_secs(1),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            temperature: 0.2,
            max_tokens: 100,
        };
        let shown = format!("{settings:?}");
        assert!(!shown.contains("sk-very-secret"), "{shown}");
        let client = AuxClient::new(settings).map(|client| format!("{client:?}"));
        assert!(client.is_ok_and(|shown| !shown.contains("sk-very-secret")));
    }
}
