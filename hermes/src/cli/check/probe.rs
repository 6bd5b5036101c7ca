//! The one request `gateway check` sends: `GET {base_url}/models`, which lists the provider's
//! models and bills nothing, with the key and the credentials a decompose call would carry.
//! Never a chat completion.

use std::time::{Duration, Instant};

use reqwest::header::{self, HeaderMap, HeaderValue};
use serde::Serialize;

use crate::aux_client::{request_url, shown_url};
use crate::config::DecomposerEndpoint;
use crate::core::error_chain;

/// The longest the free request may take (a decompose call's own bound, when shorter).
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The most of the model list that is read; a longer list is answered, but not counted.
const MODELS_BODY_CAP: usize = 1024 * 1024;

/// How the provider answered the free request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProviderAnswer {
    /// The URL asked, as it may be shown (no credentials, no query).
    pub url: String,
    #[serde(flatten)]
    pub outcome: ProbeOutcome,
    /// How long the answer took.
    pub elapsed_ms: u64,
}

/// What came back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum ProbeOutcome {
    /// An HTTP status: the provider is reachable.
    Answered {
        status: u16,
        /// Models in a 2xx list (`None`: not a list this client could read).
        models: Option<usize>,
        /// Whether the model decompose calls name is among them.
        model_listed: Option<bool>,
    },
    /// No connection at all (refused, DNS, TLS, connect timeout).
    Unreachable { detail: String },
    /// Connected, but no whole answer within the bound.
    TimedOut { after_ms: u64 },
    /// The request failed after it was sent, or could not be built.
    Failed { detail: String },
}

/// Asks `endpoint`'s provider for its models, within [`PROBE_TIMEOUT`].
pub async fn list_models(endpoint: &DecomposerEndpoint) -> ProviderAnswer {
    let started = Instant::now();
    let (url, outcome) = match models_url(&endpoint.base_url, endpoint.api_key.is_some()) {
        Ok(url) => {
            let shown = shown_url(&url);
            (shown, ask(url, endpoint).await)
        }
        Err(detail) => (endpoint.base_url.clone(), ProbeOutcome::Failed { detail }),
    };
    ProviderAnswer {
        url,
        outcome,
        elapsed_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    }
}

/// `{base_url}/models`, joined as every URL the reference sends to is
/// ([`crate::aux_client::endpoint_url`]): `models` appended to the base URL's path, its query
/// kept (`https://h/v1?api-version=1` asks `https://h/v1/models?api-version=1`). Without a key
/// the URL keeps its userinfo, sent as Basic auth as a decompose call would send it.
pub fn models_url(base_url: &str, keyed: bool) -> Result<reqwest::Url, String> {
    request_url(base_url, &["models"], keyed).map_err(|e| e.to_string())
}

async fn ask(url: reqwest::Url, endpoint: &DecomposerEndpoint) -> ProbeOutcome {
    let timeout = PROBE_TIMEOUT.min(endpoint.timeout);
    let client = match client(&url, endpoint.api_key.as_deref(), timeout) {
        Ok(client) => client,
        Err(detail) => return ProbeOutcome::Failed { detail },
    };
    let exchange = async {
        let response = client.get(url).send().await?;
        let status = response.status().as_u16();
        let body = read_capped(response).await?;
        Ok::<_, reqwest::Error>((status, body))
    };
    match tokio::time::timeout(timeout, exchange).await {
        Err(_) => ProbeOutcome::TimedOut {
            after_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
        },
        Ok(Err(e)) if e.is_connect() => ProbeOutcome::Unreachable {
            detail: error_chain(&e.without_url()),
        },
        Ok(Err(e)) => ProbeOutcome::Failed {
            detail: error_chain(&e.without_url()),
        },
        Ok(Ok((status, body))) => {
            let models = (200..300)
                .contains(&status)
                .then(|| body.as_deref().and_then(model_ids))
                .flatten();
            ProbeOutcome::Answered {
                status,
                model_listed: models.as_ref().map(|ids| ids.contains(&endpoint.model)),
                models: models.map(|ids| ids.len()),
            }
        }
    }
}

/// The client of the free request: the proxy a decompose call to `url` would go through
/// (`crate::proxy`), the key, no redirect followed.
fn client(
    url: &reqwest::Url,
    api_key: Option<&str>,
    timeout: Duration,
) -> Result<reqwest::Client, String> {
    let mut headers = HeaderMap::new();
    headers.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
    if let Some(key) = api_key.map(str::trim).filter(|k| !k.is_empty()) {
        let mut value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
            "the API key contains characters not allowed in an HTTP header".to_owned()
        })?;
        value.set_sensitive(true);
        headers.insert(header::AUTHORIZATION, value);
    }
    let (builder, _) = crate::proxy::client_builder(url)?;
    builder
        .user_agent(concat!("hermes/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(timeout)
        .default_headers(headers)
        // A redirect is reported as the status it is, never followed to another host.
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))
}

/// The body, unless it is longer than [`MODELS_BODY_CAP`] (then `None`: the status still
/// counts).
async fn read_capped(mut response: reqwest::Response) -> Result<Option<Vec<u8>>, reqwest::Error> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > MODELS_BODY_CAP {
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body))
}

/// The ids of an OpenAI-style model list, `{"data": [{"id": …}, …]}`.
fn model_ids(body: &[u8]) -> Option<Vec<String>> {
    let list: serde_json::Value = serde_json::from_slice(body).ok()?;
    let data = list.get("data")?.as_array()?;
    Some(
        data.iter()
            .filter_map(|model| model.get("id")?.as_str().map(str::to_owned))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn joined(base: &str) -> String {
        models_url(base, true)
            .map(String::from)
            .unwrap_or_else(|e| e)
    }

    #[test]
    fn models_is_joined_on_the_path_and_the_query_is_kept() {
        assert_eq!(joined("http://h:9/v1"), "http://h:9/v1/models");
        assert_eq!(joined("http://h:9/v1/"), "http://h:9/v1/models");
        assert_eq!(joined("http://h:9"), "http://h:9/models");
        assert_eq!(
            joined(" https://h/openai/v1?api-version=2024-06-01 "),
            "https://h/openai/v1/models?api-version=2024-06-01"
        );
        assert_eq!(joined("http://h/v1#frag"), "http://h/v1/models");
        assert_eq!(joined("http://u:p@h/v1"), "http://h/v1/models");
        assert_eq!(
            models_url("http://u:p@h/v1", false).map(String::from),
            Ok("http://u:p@h/v1/models".to_owned())
        );
        assert!(joined("ftp://h/v1").contains("must be http or https"));
        assert!(joined("not a url").contains("not a valid URL"));
    }

    #[test]
    fn a_model_list_is_read_and_anything_else_is_not() {
        let ids = model_ids(br#"{"object":"list","data":[{"id":"a"},{"id":"b"},{"x":1}]}"#);
        assert_eq!(ids, Some(vec!["a".to_owned(), "b".to_owned()]));
        assert_eq!(model_ids(b"<html>"), None);
        assert_eq!(model_ids(br#"{"models": []}"#), None);
    }
}
