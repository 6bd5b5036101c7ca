//! `auxiliary.kanban_decomposer`: the endpoint, model, key and request extras of decompose calls,
//! resolved with the precedence upstream hermes-agent (0.19.0) gives its auxiliary tasks, so a
//! config written for upstream bills the same model at the same endpoint here.
//!
//! The rules, as upstream applies them (blank values count as unset, and `model: auto` means
//! "the main model"):
//!
//! | `provider` | `base_url` | decompose calls go to | with the key |
//! |---|---|---|---|
//! | `auto` (default) | set, and `api_key` set | `base_url` | `api_key` |
//! | `auto` | otherwise | `model.base_url` | `OPENAI_API_KEY` |
//! | `custom` | set | `base_url` | `api_key`, else `OPENAI_API_KEY` |
//! | `custom` | unset | `model.base_url` | `OPENAI_API_KEY` |
//! | `openai` | either | `base_url`, else `https://api.openai.com/v1` | `api_key`, else `OPENAI_API_KEY` |
//! | any other name | set | `base_url` | `api_key`, else `<NAME>_API_KEY` |
//! | any other name | unset | refused: this gateway only speaks OpenAI-compatible chat completions | |
//!
//! `model` (when set) replaces `model.default` on every route. `key_env` / `api_key_env` name a
//! variable that stands in for a blank `api_key`, and every variable is read from the process
//! environment first, then from `$HERMES_HOME/.env`. Settings that these rules make ineffective
//! (a `base_url` without `api_key` under `auto`, an `api_key` without `base_url`) are kept as
//! upstream keeps them, with a warning.

use std::cell::OnceCell;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Map, Value as Json};
use serde_norway::Value;

use super::table::{other, seconds, secret, text, KeySpec};
use super::{
    keys, non_blank, read_dotenv, Config, ConfigError, DotEnv, Got, Home, NumericKey, Reader,
    Section,
};

/// `auxiliary.kanban_decomposer.*`: upstream's keys, all read here (by [`read`], which resolves
/// them together rather than one field per key). Their order breaks ties in the unknown-key
/// hint (the first of two equally close names is named).
pub(super) const KEYS: &[KeySpec] = &[
    text("auxiliary.kanban_decomposer.provider", None).meaning(
        "`auto` when unset, `custom`, `openai` or another provider's name: where decompose calls \
         go, see below",
    ),
    text("auxiliary.kanban_decomposer.model", None)
        .meaning("the model decompose calls name (blank or `auto`: `model.default`)"),
    text("auxiliary.kanban_decomposer.base_url", None)
        .meaning("the decomposer's own OpenAI-compatible endpoint, see below"),
    secret("auxiliary.kanban_decomposer.api_key").meaning("the decomposer's own key, see below"),
    TIMEOUT,
    other(
        "auxiliary.kanban_decomposer.extra_body",
        "a mapping of request fields",
    )
    .meaning("merged into every decompose request body, within limits, see below"),
    other(
        "auxiliary.kanban_decomposer.reasoning_effort",
        "a reasoning level",
    )
    .meaning("folded into `extra_body` as `reasoning`, as upstream does"),
    text("auxiliary.kanban_decomposer.key_env", None)
        .meaning("the variable read when `api_key` is blank"),
    text("auxiliary.kanban_decomposer.api_key_env", None)
        .meaning("the same, when `key_env` is not set"),
    text("auxiliary.kanban_decomposer.api_mode", None)
        .meaning("only `chat_completions` (or unset) can be served; another mode is refused"),
    other("auxiliary.kanban_decomposer.fallback_chain", "a list").meaning(
        "ignored, with a warning: this gateway never retries a decompose call on another provider",
    ),
];

const TIMEOUT: KeySpec = seconds("auxiliary.kanban_decomposer.timeout", None, 0.01, 3600.0)
    .meaning(
        "bounds a decompose request together with `auxiliary.timeout_seconds`: the stricter \
         applies",
    );

const TIMEOUT_RANGE: NumericKey = match TIMEOUT.numeric() {
    Some(range) => range,
    None => panic!("the timeout is a number of seconds"),
};

/// Where `provider: openai` goes when no `base_url` is given (upstream's alias).
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";

/// The reasoning levels upstream accepts in `reasoning_effort`.
const REASONING_LEVELS: [&str; 7] = ["minimal", "low", "medium", "high", "xhigh", "max", "ultra"];

/// `auxiliary.kanban_decomposer.*` as written, checked but not yet resolved against the
/// environment.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct DecomposerConfig {
    /// `provider`, lowercased; `None` for `auto` or blank.
    pub provider: Option<String>,
    /// `model`; `None` for blank or `auto`, meaning `model.default`.
    pub model: Option<String>,
    /// `base_url`.
    pub base_url: Option<String>,
    /// `api_key`.
    pub api_key: Option<String>,
    /// `key_env` (or `api_key_env`): the variable read when `api_key` is blank.
    pub key_env: Option<String>,
    /// `api_mode`; only `chat_completions` (or unset) can be served.
    pub api_mode: Option<String>,
    /// `timeout`: bounds a decompose request together with `auxiliary.timeout_seconds` (see
    /// [`Config::decompose_timeout`]).
    pub timeout: Option<Duration>,
    /// `extra_body`, with `reasoning_effort` folded in as upstream does; merged into every
    /// decompose request body. Never holds a key the request's bounds depend on (checked when
    /// the config is read).
    pub extra_body: Map<String, Json>,
}

// Hand-written so that the key never reaches a log line through `{:?}`.
impl fmt::Debug for DecomposerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DecomposerConfig")
            .field("provider", &self.provider)
            .field("model", &self.model)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("key_env", &self.key_env)
            .field("api_mode", &self.api_mode)
            .field("timeout", &self.timeout)
            .field("extra_body", &self.extra_body)
            .finish()
    }
}

/// Which settings a decompose call was resolved from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndpointSource {
    /// `model.base_url` (the main model's endpoint).
    Main,
    /// `auxiliary.kanban_decomposer` (its `base_url`, or the `openai` alias).
    Decomposer,
}

/// A place a decompose call's key is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyPlace {
    /// `auxiliary.kanban_decomposer.api_key` in `config.yaml`.
    ConfigKey,
    /// A variable: the process environment first, then `<home>/.env`.
    Variable(String),
}

impl fmt::Display for KeyPlace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyPlace::ConfigKey => {
                f.write_str("auxiliary.kanban_decomposer.api_key in config.yaml")
            }
            KeyPlace::Variable(name) => f.write_str(name),
        }
    }
}

/// Where the key of decompose calls was found or, when it was found nowhere, where it was
/// looked for: what the gateway's start line and its no-key WARN name (never the key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// `auxiliary.kanban_decomposer.api_key` in `config.yaml`.
    ConfigKey,
    /// A variable of the process environment.
    Environment(String),
    /// A variable of `<home>/.env` (the environment did not set it).
    DotEnv { name: String, path: PathBuf },
    /// No key anywhere: the places looked in, in order, and the `.env` file read for the
    /// variables (`None` when the lookup did not read one).
    Missing {
        looked_in: Vec<KeyPlace>,
        dotenv: Option<PathBuf>,
    },
}

impl KeySource {
    /// Whether a key was found.
    pub fn found(&self) -> bool {
        !matches!(self, KeySource::Missing { .. })
    }

    /// Where a key would be read from, in order, for a message that says none was found:
    /// `OPENAI_API_KEY (from the environment, else /h/.env)`.
    pub fn where_read(&self) -> String {
        let (places, dotenv): (&[KeyPlace], Option<&PathBuf>) = match self {
            KeySource::Missing { looked_in, dotenv } => (looked_in, dotenv.as_ref()),
            KeySource::ConfigKey => (&[KeyPlace::ConfigKey], None),
            KeySource::Environment(_) | KeySource::DotEnv { .. } => (&[], None),
        };
        let mut text = places
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", else ");
        if places.iter().any(|p| matches!(p, KeyPlace::Variable(_))) {
            text.push_str(&match dotenv {
                Some(path) => format!(
                    " (a variable from the environment, else from {})",
                    path.display()
                ),
                None => " (a variable from the environment)".to_owned(),
            });
        }
        text
    }
}

impl fmt::Display for KeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeySource::ConfigKey => {
                f.write_str("auxiliary.kanban_decomposer.api_key in config.yaml")
            }
            KeySource::Environment(name) => write!(f, "{name} in the environment"),
            KeySource::DotEnv { name, path } => write!(f, "{name} in {}", path.display()),
            KeySource::Missing { .. } => f.write_str("none"),
        }
    }
}

/// Where decompose calls go and how, after the precedence rules and the environment.
#[derive(Clone, PartialEq, Eq)]
pub struct DecomposerEndpoint {
    /// OpenAI-compatible base URL; requests go to `{base_url}/chat/completions`.
    pub base_url: String,
    /// Model name sent in every request.
    pub model: String,
    /// Sent as `Authorization: Bearer …`.
    pub api_key: Option<String>,
    /// Wall-clock bound on one request ([`Config::decompose_timeout`]).
    pub timeout: Duration,
    /// Merged into every request body.
    pub extra_body: Map<String, Json>,
    /// Which settings `base_url` came from.
    pub source: EndpointSource,
    /// Where `api_key` came from, or where it was looked for.
    pub key_source: KeySource,
    /// Lines of `.env` skipped while looking up the key (see [`super::parse_dotenv_bytes`]).
    pub warnings: Vec<String>,
}

impl fmt::Debug for DecomposerEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DecomposerEndpoint")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .field("extra_body", &self.extra_body)
            .field("source", &self.source)
            .field("key_source", &self.key_source)
            .field("warnings", &self.warnings)
            .finish()
    }
}

/// Why no decompose call can be made with this configuration (nothing is sent, nothing paid).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecomposerSetupError {
    #[error("config.yaml: {0} is not set; it names the provider the decomposer calls")]
    MissingKey(&'static str),
    #[error(
        "config.yaml: auxiliary.kanban_decomposer.provider is {0:?}, which this gateway can reach \
         only through auxiliary.kanban_decomposer.base_url (an OpenAI-compatible endpoint); set \
         base_url, or use provider: custom or auto"
    )]
    NeedsBaseUrl(String),
    #[error(
        "config.yaml: auxiliary.kanban_decomposer.api_mode is {0:?}; this gateway speaks only \
         chat_completions"
    )]
    UnsupportedApiMode(String),
}

impl Config {
    /// The wall-clock bound on one decompose request: the stricter of
    /// `auxiliary.timeout_seconds` (default 120 s) and `auxiliary.kanban_decomposer.timeout`
    /// (when set). Either key can only shorten a request, never lengthen it past the other.
    pub fn decompose_timeout(&self) -> Duration {
        match self.auxiliary.kanban_decomposer.timeout {
            Some(own) => own.min(self.auxiliary.timeout),
            None => self.auxiliary.timeout,
        }
    }

    /// `auxiliary.kanban_decomposer.timeout` when it is the stricter bound of a decompose
    /// request (see [`Config::decompose_timeout`]), `None` when `auxiliary.timeout_seconds` is.
    pub fn decompose_timeout_key(&self) -> Option<&'static str> {
        let own = self.auxiliary.kanban_decomposer.timeout?;
        (own < self.auxiliary.timeout).then_some(TIMEOUT.key)
    }

    /// The model decompose calls name: the decomposer's own `model`, else `model.default`.
    pub fn decomposer_model(&self) -> Option<String> {
        self.auxiliary
            .kanban_decomposer
            .model
            .clone()
            .or_else(|| self.model.default.clone())
    }

    /// Resolves where decompose calls go, reading keys from the process environment and then
    /// from `<home>/.env`.
    pub fn decomposer_endpoint(
        &self,
        home: &Home,
    ) -> Result<DecomposerEndpoint, DecomposerSetupError> {
        let dotenv: OnceCell<DotEnv> = OnceCell::new();
        let dotenv_path = home.env_path();
        let mut endpoint = self.resolve_endpoint(
            |name| {
                if let Some(value) = std::env::var(name).ok().and_then(|v| non_blank(&v)) {
                    return Some((value, KeySource::Environment(name.to_owned())));
                }
                let value = dotenv
                    .get_or_init(|| read_dotenv(home))
                    .vars
                    .get(name)
                    .and_then(|v| non_blank(v))?;
                Some((
                    value,
                    KeySource::DotEnv {
                        name: name.to_owned(),
                        path: dotenv_path.clone(),
                    },
                ))
            },
            Some(home.env_path()),
        )?;
        endpoint.warnings = dotenv
            .into_inner()
            .map(|env| env.warnings)
            .unwrap_or_default();
        Ok(endpoint)
    }

    /// [`Config::decomposer_endpoint`] with an explicit variable lookup (blank means unset);
    /// a variable found counts as one of the environment.
    pub fn decomposer_endpoint_with(
        &self,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<DecomposerEndpoint, DecomposerSetupError> {
        self.resolve_endpoint(
            |name| var(name).map(|value| (value, KeySource::Environment(name.to_owned()))),
            None,
        )
    }

    /// The precedence rules, with `var` saying what a variable holds and where it was found.
    fn resolve_endpoint(
        &self,
        var: impl Fn(&str) -> Option<(String, KeySource)>,
        dotenv: Option<PathBuf>,
    ) -> Result<DecomposerEndpoint, DecomposerSetupError> {
        let own = &self.auxiliary.kanban_decomposer;
        if let Some(mode) = own
            .api_mode
            .as_deref()
            .filter(|m| !m.eq_ignore_ascii_case("chat_completions"))
        {
            return Err(DecomposerSetupError::UnsupportedApiMode(mode.to_owned()));
        }
        let model = self
            .decomposer_model()
            .ok_or(DecomposerSetupError::MissingKey("model.default"))?;
        let lookup = |places: &[KeyPlace]| {
            places.iter().find_map(|place| match place {
                KeyPlace::ConfigKey => own.api_key.clone().map(|key| (key, KeySource::ConfigKey)),
                KeyPlace::Variable(name) => var(name),
            })
        };
        // The decomposer's own key: `api_key`, else the variable `key_env` names.
        let own_places = || {
            let mut places = vec![KeyPlace::ConfigKey];
            places.extend(own.key_env.clone().map(KeyPlace::Variable));
            places
        };
        let with = |fallback: String| {
            let mut places = own_places();
            places.push(KeyPlace::Variable(fallback));
            places
        };
        let openai = || "OPENAI_API_KEY".to_owned();
        let main = || -> Result<(String, Vec<KeyPlace>, EndpointSource), DecomposerSetupError> {
            let base = self
                .model
                .base_url
                .clone()
                .ok_or(DecomposerSetupError::MissingKey("model.base_url"))?;
            Ok((
                base,
                vec![KeyPlace::Variable(openai())],
                EndpointSource::Main,
            ))
        };
        let (base_url, places, source) = match own.provider.as_deref() {
            None => match &own.base_url {
                Some(base) if lookup(&own_places()).is_some() => {
                    (base.clone(), own_places(), EndpointSource::Decomposer)
                }
                _ => main()?,
            },
            Some("custom") => match &own.base_url {
                Some(base) => (base.clone(), with(openai()), EndpointSource::Decomposer),
                None => main()?,
            },
            Some("openai") => (
                own.base_url
                    .clone()
                    .unwrap_or_else(|| OPENAI_BASE_URL.to_owned()),
                with(openai()),
                EndpointSource::Decomposer,
            ),
            Some(named) => match &own.base_url {
                Some(base) => (
                    base.clone(),
                    with(provider_key_var(named)),
                    EndpointSource::Decomposer,
                ),
                None => return Err(DecomposerSetupError::NeedsBaseUrl(named.to_owned())),
            },
        };
        let (api_key, key_source) = match lookup(&places) {
            Some((key, found)) => (Some(key), found),
            None => (
                None,
                KeySource::Missing {
                    looked_in: places,
                    dotenv,
                },
            ),
        };
        Ok(DecomposerEndpoint {
            base_url,
            model,
            api_key,
            timeout: self.decompose_timeout(),
            extra_body: own.extra_body.clone(),
            source,
            key_source,
            warnings: Vec::new(),
        })
    }
}

/// `OPENROUTER_API_KEY` for `openrouter`: the variable upstream reads a named provider's key from.
fn provider_key_var(provider: &str) -> String {
    let name: String = provider
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("{name}_API_KEY")
}

/// Reads the section; `section.map` is `None` when it is absent.
pub(super) fn read(reader: &Reader, s: &Section) -> Result<DecomposerConfig, ConfigError> {
    keys::check_decomposer(reader, s);
    let provider = reader
        .opt_string(s, "provider")?
        .map(|p| p.to_ascii_lowercase())
        .filter(|p| p != "auto");
    let model = reader
        .opt_string(s, "model")?
        .filter(|m| !m.eq_ignore_ascii_case("auto"));
    let base_url = reader.opt_string(s, "base_url")?;
    let api_key = reader.secret_string(s, "api_key")?;
    let key_env = match reader.opt_string(s, "key_env")? {
        Some(name) => Some(name),
        None => reader.opt_string(s, "api_key_env")?,
    };
    let api_mode = reader.opt_string(s, "api_mode")?;
    let timeout = reader.seconds(s, &TIMEOUT_RANGE)?;
    let mut extra_body = extra_body(reader, s)?;
    if !extra_body.contains_key("reasoning") {
        if let Some(reasoning) = reasoning(reader, s) {
            extra_body.insert("reasoning".to_owned(), reasoning);
        }
    }
    if s.get("fallback_chain").is_some() {
        reader.warn(
            s.dotted("fallback_chain"),
            "ignored: this gateway never retries a decompose call on another provider (each \
             fallback would be another paid call)",
        );
    }
    let keyed = api_key.is_some() || key_env.is_some();
    match (provider.as_deref(), base_url.is_some(), keyed) {
        (None, true, false) => reader.warn(
            s.dotted("base_url"),
            "ignored: with provider auto it is used only together with api_key (as upstream \
             hermes-agent does), so decompose calls go to model.base_url; set provider: custom to \
             use it with OPENAI_API_KEY",
        ),
        (None | Some("custom"), false, true) => reader.warn(
            s.dotted(if api_key.is_some() {
                "api_key"
            } else {
                "key_env"
            }),
            "ignored without base_url (as upstream hermes-agent does): decompose calls go to \
             model.base_url with OPENAI_API_KEY",
        ),
        _ => {}
    }
    Ok(DecomposerConfig {
        provider,
        model,
        base_url,
        api_key,
        key_env,
        api_mode,
        timeout,
        extra_body,
    })
}

/// `extra_body` as a JSON object, refusing the keys a decompose request's bounds depend on.
fn extra_body(reader: &Reader, s: &Section) -> Result<Map<String, Json>, ConfigError> {
    let key = s.dotted("extra_body");
    let map = match s.get("extra_body") {
        None => return Ok(Map::new()),
        Some(Value::Mapping(map)) => map,
        Some(other) => {
            return Err(reader.invalid(
                key,
                format!("expected a mapping of request fields, got {}", Got(other)),
            ))
        }
    };
    let mut body = Map::new();
    for (name, value) in map {
        let Value::String(name) = name else {
            return Err(reader.invalid(
                &key,
                format!("field names must be strings, got {}", Got(name)),
            ));
        };
        let field = format!("{key}.{name}");
        let json = to_json(value).map_err(|problem| reader.invalid(&field, problem))?;
        if let Some(why) = crate::aux_client::refused_body_field(name, &json) {
            return Err(reader.invalid(&field, why));
        }
        body.insert(name.clone(), json);
    }
    Ok(body)
}

/// `reasoning_effort` as upstream folds it into the body: `{"enabled": false}` for none,
/// `{"enabled": true, "effort": level}` for a level, nothing (with a warning) otherwise.
fn reasoning(reader: &Reader, s: &Section) -> Option<Json> {
    let key = s.dotted("reasoning_effort");
    let level = match s.get("reasoning_effort")? {
        Value::Bool(false) => return Some(serde_json::json!({"enabled": false})),
        Value::Bool(true) => return None,
        Value::String(level) => level.trim().to_ascii_lowercase(),
        other => {
            reader.warn(
                key,
                format!("ignored: expected a reasoning level, got {}", Got(other)),
            );
            return None;
        }
    };
    match level.as_str() {
        "" => None,
        "none" | "false" | "disabled" => Some(serde_json::json!({"enabled": false})),
        level if REASONING_LEVELS.contains(&level) => {
            Some(serde_json::json!({"enabled": true, "effort": level}))
        }
        other => {
            reader.warn(
                key,
                format!(
                    "ignored: {other:?} is not a reasoning level (none, {})",
                    REASONING_LEVELS.join(", ")
                ),
            );
            None
        }
    }
}

/// A YAML value as JSON; mappings need string keys and numbers must be finite.
fn to_json(value: &Value) -> Result<Json, String> {
    Ok(match value {
        Value::Null => Json::Null,
        Value::Bool(b) => Json::Bool(*b),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Json::from(i)
            } else if let Some(u) = n.as_u64() {
                Json::from(u)
            } else {
                let f = n.as_f64().unwrap_or(f64::NAN);
                serde_json::Number::from_f64(f)
                    .map(Json::Number)
                    .ok_or_else(|| format!("expected a finite number, got {}", Got(value)))?
            }
        }
        Value::String(text) => Json::String(text.clone()),
        Value::Sequence(items) => Json::Array(items.iter().map(to_json).collect::<Result<_, _>>()?),
        Value::Mapping(map) => {
            let mut object = Map::new();
            for (k, v) in map {
                let Value::String(k) = k else {
                    return Err(format!("field names must be strings, got {}", Got(k)));
                };
                object.insert(k.clone(), to_json(v)?);
            }
            Json::Object(object)
        }
        Value::Tagged(tagged) => {
            return Err(format!(
                "a value tagged {} cannot be sent as JSON",
                tagged.tag
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::path::Path;

    fn parse(text: &str) -> Config {
        Config::parse(text, Path::new("/h/config.yaml")).unwrap()
    }

    fn err(text: &str) -> String {
        match Config::parse(text, Path::new("/h/config.yaml")) {
            Ok(c) => panic!("expected an error for {text:?}, got {c:?}"),
            Err(e) => e.to_string(),
        }
    }

    const MAIN: &str = "model:\n  base_url: http://main/v1\n  default: expensive-frontier-model\n";

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| map.get(name).cloned()
    }

    fn resolve(decomposer: &str, env: &[(&str, &str)]) -> DecomposerEndpoint {
        let config = parse(&format!(
            "{MAIN}auxiliary:\n  kanban_decomposer:\n{decomposer}"
        ));
        config.decomposer_endpoint_with(vars(env)).unwrap()
    }

    fn route(e: &DecomposerEndpoint) -> (&str, &str, Option<&str>, EndpointSource) {
        (&e.base_url, &e.model, e.api_key.as_deref(), e.source)
    }

    const ENV: &[(&str, &str)] = &[
        ("OPENAI_API_KEY", "sk-env"),
        ("OPENROUTER_API_KEY", "sk-or"),
    ];

    #[test]
    fn with_nothing_set_the_main_model_is_used() {
        let e = parse(MAIN).decomposer_endpoint_with(vars(ENV)).unwrap();
        assert_eq!(
            route(&e),
            (
                "http://main/v1",
                "expensive-frontier-model",
                Some("sk-env"),
                EndpointSource::Main
            )
        );
        assert_eq!(e.timeout, Duration::from_secs(120));
        assert!(e.extra_body.is_empty());
    }

    #[test]
    fn the_model_key_replaces_the_main_model_on_every_route() {
        let e = resolve("    model: cheap-small-model\n", ENV);
        assert_eq!(
            route(&e),
            (
                "http://main/v1",
                "cheap-small-model",
                Some("sk-env"),
                EndpointSource::Main
            )
        );
        // `auto` means the main model, as upstream reads it.
        let e = resolve("    model: Auto\n", ENV);
        assert_eq!(e.model, "expensive-frontier-model");
        let e = resolve(
            "    provider: custom\n    base_url: http://dec/v1\n    model: small\n",
            ENV,
        );
        assert_eq!(
            route(&e),
            (
                "http://dec/v1",
                "small",
                Some("sk-env"),
                EndpointSource::Decomposer
            )
        );
    }

    #[test]
    fn provider_auto_uses_base_url_only_with_its_own_key() {
        let e = resolve("    base_url: http://dec/v1\n    api_key: sk-dec\n", ENV);
        assert_eq!(
            route(&e),
            (
                "http://dec/v1",
                "expensive-frontier-model",
                Some("sk-dec"),
                EndpointSource::Decomposer
            )
        );
        let config = parse(&format!(
            "{MAIN}auxiliary:\n  kanban_decomposer:\n    provider: auto\n    base_url: http://dec/v1\n"
        ));
        let e = config.decomposer_endpoint_with(vars(ENV)).unwrap();
        assert_eq!(e.source, EndpointSource::Main);
        assert_eq!(e.base_url, "http://main/v1");
        let warned: Vec<String> = config.warnings.iter().map(|w| w.to_string()).collect();
        assert_eq!(warned.len(), 1, "{warned:?}");
        assert!(
            warned[0].starts_with("/h/config.yaml: auxiliary.kanban_decomposer.base_url: ignored"),
            "{warned:?}"
        );
    }

    #[test]
    fn key_env_stands_in_for_a_blank_api_key() {
        let env = [("OPENAI_API_KEY", "sk-env"), ("DEC_KEY", "sk-from-var")];
        let e = resolve(
            "    base_url: http://dec/v1\n    api_key: ''\n    key_env: DEC_KEY\n",
            &env,
        );
        assert_eq!(e.api_key.as_deref(), Some("sk-from-var"));
        assert_eq!(e.source, EndpointSource::Decomposer);
        let e = resolve(
            "    base_url: http://dec/v1\n    api_key_env: DEC_KEY\n",
            &env,
        );
        assert_eq!(e.api_key.as_deref(), Some("sk-from-var"));
        // The variable unset: the key is missing, so `auto` falls back to the main endpoint.
        let e = resolve("    base_url: http://dec/v1\n    key_env: NOT_SET\n", &env);
        assert_eq!(e.source, EndpointSource::Main);
    }

    #[test]
    fn custom_uses_its_base_url_with_the_environments_key_or_the_main_endpoint() {
        let e = resolve("    provider: custom\n    base_url: http://dec/v1\n", ENV);
        assert_eq!(
            route(&e),
            (
                "http://dec/v1",
                "expensive-frontier-model",
                Some("sk-env"),
                EndpointSource::Decomposer
            )
        );
        let e = resolve(
            "    provider: CUSTOM\n    base_url: http://dec/v1\n    api_key: sk-own\n",
            ENV,
        );
        assert_eq!(
            e.api_key.as_deref(),
            Some("sk-own"),
            "api_key overrides the environment"
        );
        let e = resolve("    provider: custom\n", ENV);
        assert_eq!(e.source, EndpointSource::Main);
    }

    #[test]
    fn openai_and_named_providers() {
        let e = resolve("    provider: openai\n", ENV);
        assert_eq!(
            route(&e),
            (
                OPENAI_BASE_URL,
                "expensive-frontier-model",
                Some("sk-env"),
                EndpointSource::Decomposer
            )
        );
        let e = resolve(
            "    provider: openrouter\n    base_url: https://or.example/api/v1\n",
            ENV,
        );
        assert_eq!(e.base_url, "https://or.example/api/v1");
        assert_eq!(e.api_key.as_deref(), Some("sk-or"));
        let config = parse(&format!(
            "{MAIN}auxiliary:\n  kanban_decomposer:\n    provider: anthropic\n"
        ));
        let refused = config.decomposer_endpoint_with(vars(ENV)).unwrap_err();
        assert_eq!(
            refused,
            DecomposerSetupError::NeedsBaseUrl("anthropic".to_owned())
        );
        assert!(refused.to_string().contains("set base_url"), "{refused}");
        assert_eq!(provider_key_var("custom:my-box"), "CUSTOM_MY_BOX_API_KEY");
    }

    #[test]
    fn a_missing_main_model_or_an_unsupported_api_mode_is_a_setup_error() {
        let bare = Config::default();
        assert_eq!(
            bare.decomposer_endpoint_with(vars(ENV)).unwrap_err(),
            DecomposerSetupError::MissingKey("model.default")
        );
        let model_only = parse("auxiliary:\n  kanban_decomposer:\n    model: m\n");
        assert_eq!(
            model_only.decomposer_endpoint_with(vars(ENV)).unwrap_err(),
            DecomposerSetupError::MissingKey("model.base_url")
        );
        let config = parse(&format!(
            "{MAIN}auxiliary:\n  kanban_decomposer:\n    api_mode: codex_responses\n"
        ));
        assert!(matches!(
            config.decomposer_endpoint_with(vars(ENV)),
            Err(DecomposerSetupError::UnsupportedApiMode(_))
        ));
        let config = parse(&format!(
            "{MAIN}auxiliary:\n  kanban_decomposer:\n    api_mode: chat_completions\n"
        ));
        assert!(config.decomposer_endpoint_with(vars(ENV)).is_ok());
    }

    #[test]
    fn the_stricter_timeout_wins() {
        let t = |text: &str| parse(text).decompose_timeout();
        assert_eq!(t(""), Duration::from_secs(120));
        assert_eq!(
            t("auxiliary:\n  kanban_decomposer:\n    timeout: 180\n"),
            Duration::from_secs(120),
            "upstream's default 180 s does not lengthen the reference's 120 s"
        );
        assert_eq!(
            t("auxiliary:\n  kanban_decomposer:\n    timeout: 7.5\n"),
            Duration::from_millis(7500)
        );
        assert_eq!(
            t("auxiliary:\n  timeout_seconds: 3\n  kanban_decomposer:\n    timeout: 30\n"),
            Duration::from_secs(3)
        );
        assert_eq!(
            t("auxiliary:\n  timeout_seconds: 300\n  kanban_decomposer:\n    timeout: 200\n"),
            Duration::from_secs(200)
        );
    }

    #[test]
    fn extra_body_is_kept_as_json_with_reasoning_folded_in() {
        let config = parse(
            "auxiliary:\n  kanban_decomposer:\n    reasoning_effort: High\n    extra_body:\n      \
             provider: {order: [anthropic, google], sort: price}\n      temperature: 0.1\n      \
             max_tokens: 900\n      stream: false\n      n: 1\n      top_p: .5\n      \
             best_of: 1\n      service_tier: flex\n      modalities: [text]\n      \
             plugins: [{id: response-healing}]\n",
        );
        let body = &config.auxiliary.kanban_decomposer.extra_body;
        assert_eq!(
            Json::Object(body.clone()),
            serde_json::json!({
                "provider": {"order": ["anthropic", "google"], "sort": "price"},
                "temperature": 0.1, "max_tokens": 900, "stream": false, "n": 1, "top_p": 0.5,
                "best_of": 1, "service_tier": "flex", "modalities": ["text"],
                "plugins": [{"id": "response-healing"}],
                "reasoning": {"enabled": true, "effort": "high"},
            })
        );
        let config = parse(
            "auxiliary:\n  kanban_decomposer:\n    reasoning_effort: high\n    extra_body:\n      \
             reasoning: {effort: low}\n",
        );
        assert_eq!(
            config.auxiliary.kanban_decomposer.extra_body["reasoning"],
            serde_json::json!({"effort": "low"}),
            "an explicit extra_body.reasoning wins over the shorthand"
        );
        for (value, expected) in [
            ("none", Some(serde_json::json!({"enabled": false}))),
            ("false", Some(serde_json::json!({"enabled": false}))),
            ("''", None),
            ("true", None),
        ] {
            let config = parse(&format!(
                "auxiliary:\n  kanban_decomposer:\n    reasoning_effort: {value}\n"
            ));
            assert_eq!(
                config
                    .auxiliary
                    .kanban_decomposer
                    .extra_body
                    .get("reasoning"),
                expected.as_ref(),
                "{value}"
            );
            assert!(config.warnings.is_empty(), "{value}: {:?}", config.warnings);
        }
        let config = parse("auxiliary:\n  kanban_decomposer:\n    reasoning_effort: turbo\n");
        assert!(config.auxiliary.kanban_decomposer.extra_body.is_empty());
        assert_eq!(config.warnings.len(), 1);
        assert!(config.warnings[0]
            .to_string()
            .contains("\"turbo\" is not a reasoning level"));
    }

    #[test]
    fn extra_body_cannot_remove_the_bounds() {
        for (field, value, expected) in [
            ("tools", "[{type: function}]", "never offers tools"),
            ("tool_choice", "auto", "never offers tools"),
            ("functions", "[]", "never offers tools"),
            ("function_call", "none", "never offers tools"),
            ("parallel_tool_calls", "false", "never offers tools"),
            ("stream", "true", "only false is allowed"),
            ("stream_options", "{include_usage: true}", "client's choice"),
            ("n", "2", "only 1 is allowed"),
            ("best_of", "3", "only 1 is allowed"),
            ("web_search_options", "{}", "web search is billed"),
            ("plugins", "[{id: web}]", "web plugin"),
            ("modalities", "[text, audio]", "only [text] is allowed"),
            ("audio", "{voice: alloy}", "audio output"),
            ("service_tier", "priority", "only auto, default or flex"),
            (
                "model",
                "other",
                "set auxiliary.kanban_decomposer.model instead",
            ),
            ("messages", "[]", "the decomposer writes the prompt"),
        ] {
            let message = err(&format!(
                "auxiliary:\n  kanban_decomposer:\n    extra_body:\n      {field}: {value}\n"
            ));
            assert!(
                message.contains(&format!("auxiliary.kanban_decomposer.extra_body.{field}: ")),
                "{message}"
            );
            assert!(message.contains(expected), "{field}: {message}");
        }
        for (text, expected) in [
            (
                "    extra_body: [1]\n",
                "expected a mapping of request fields, got a list",
            ),
            (
                "    extra_body:\n      1: x\n",
                "field names must be strings, got 1",
            ),
            (
                "    extra_body:\n      x: .nan\n",
                "expected a finite number",
            ),
            (
                "    extra_body:\n      x: !tag 1\n",
                "cannot be sent as JSON",
            ),
        ] {
            let message = err(&format!("auxiliary:\n  kanban_decomposer:\n{text}"));
            assert!(message.contains(expected), "{text:?}: {message}");
        }
    }

    #[test]
    fn ineffective_settings_warn_as_upstream_ignores_them() {
        let warned = |text: &str| -> Vec<String> {
            parse(&format!("auxiliary:\n  kanban_decomposer:\n{text}"))
                .warnings
                .iter()
                .map(|w| w.to_string())
                .collect()
        };
        let w = warned("    api_key: sk-x\n");
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("auxiliary.kanban_decomposer.api_key: ignored without base_url"));
        let w = warned("    provider: custom\n    key_env: SOME_VAR\n");
        assert!(w[0].contains("auxiliary.kanban_decomposer.key_env: ignored without base_url"));
        let w = warned("    fallback_chain: [{provider: openrouter}]\n");
        assert!(
            w[0].contains("never retries a decompose call on another provider"),
            "{w:?}"
        );
        assert!(warned("    provider: openai\n    api_key: sk-x\n").is_empty());
        assert!(warned("    base_url: http://x/v1\n    api_key: sk-x\n").is_empty());
    }

    #[test]
    fn the_key_source_says_where_the_key_came_from_or_was_looked_for() {
        let env = [("OPENAI_API_KEY", "sk-env"), ("DEC_KEY", "sk-dec")];
        let source = |decomposer: &str, env: &[(&str, &str)]| resolve(decomposer, env).key_source;
        assert_eq!(
            source("", &env),
            KeySource::Environment("OPENAI_API_KEY".into())
        );
        assert_eq!(
            source("    base_url: http://dec/v1\n    api_key: sk-own\n", &env),
            KeySource::ConfigKey
        );
        assert_eq!(
            source("    base_url: http://dec/v1\n    key_env: DEC_KEY\n", &env),
            KeySource::Environment("DEC_KEY".into())
        );
        let missing = source(
            "    provider: custom\n    base_url: http://dec/v1\n    key_env: DEC_KEY\n",
            &[],
        );
        assert_eq!(
            missing,
            KeySource::Missing {
                looked_in: vec![
                    KeyPlace::ConfigKey,
                    KeyPlace::Variable("DEC_KEY".into()),
                    KeyPlace::Variable("OPENAI_API_KEY".into()),
                ],
                dotenv: None,
            }
        );
        assert_eq!(missing.to_string(), "none");
        assert_eq!(
            missing.where_read(),
            "auxiliary.kanban_decomposer.api_key in config.yaml, else DEC_KEY, else \
             OPENAI_API_KEY (a variable from the environment)"
        );
        let named = source(
            "    provider: openrouter\n    base_url: https://or.example/api/v1\n",
            &[],
        );
        assert!(
            named.where_read().contains("else OPENROUTER_API_KEY"),
            "{named:?}"
        );
    }

    #[test]
    fn a_key_in_dotenv_is_said_to_come_from_that_file() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path());
        std::fs::write(home.env_path(), "DEC_KEY_FROM_DOTENV_ONLY=sk-file\n").unwrap();
        let config = parse(&format!(
            "{MAIN}auxiliary:\n  kanban_decomposer:\n    provider: custom\n    \
             base_url: http://dec/v1\n    key_env: DEC_KEY_FROM_DOTENV_ONLY\n"
        ));
        let endpoint = config.decomposer_endpoint(&home).unwrap();
        assert_eq!(endpoint.api_key.as_deref(), Some("sk-file"));
        assert_eq!(
            endpoint.key_source.to_string(),
            format!("DEC_KEY_FROM_DOTENV_ONLY in {}", home.env_path().display())
        );
    }

    #[test]
    fn debug_never_shows_the_key() {
        let config = parse(&format!(
            "{MAIN}auxiliary:\n  kanban_decomposer:\n    base_url: http://dec/v1\n    api_key: sk-very-secret\n"
        ));
        let shown = format!("{config:?}");
        assert!(!shown.contains("sk-very-secret"), "{shown}");
        let endpoint = config.decomposer_endpoint_with(vars(&[])).unwrap();
        assert!(!format!("{endpoint:?}").contains("sk-very-secret"));
    }
}
