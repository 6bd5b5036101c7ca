//! Where the board lives (`Home`) and what `config.yaml` / `.env` say (`Config`, `api_key`).
//!
//! `config.yaml` is shared with upstream hermes, which writes many keys we have no use for, so
//! every level ignores unknown keys. The keys we do read are checked strictly: a wrong type is
//! reported with its dotted path instead of silently falling back to a default, because a
//! misread bound (say, `decompose_calls_per_hour`) is money.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_norway::{Mapping, Value};

/// Errors from locating the home or reading its configuration files.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Neither `$HERMES_HOME` nor `$HOME` is set, so there is nowhere to put the board.
    #[error("cannot locate the board home: neither HERMES_HOME nor HOME is set")]
    NoHome,
    /// The file exists but could not be read.
    #[error("could not read {path}")]
    Read {
        /// The file that failed.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid YAML.
    #[error("{path}{}: invalid YAML: {detail}", line.map(|l| format!(": line {l}")).unwrap_or_default())]
    Syntax {
        /// The file that failed.
        path: PathBuf,
        /// 1-based line of the problem, when the parser knows it.
        line: Option<usize>,
        /// The parser's description.
        detail: String,
    },
    /// A key we read holds a value of the wrong type or out of range.
    #[error("{}: {key}: {problem}", path.display())]
    Invalid {
        /// The file that failed.
        path: PathBuf,
        /// Dotted key, e.g. `kanban.dispatch_interval_seconds` (or a section name).
        key: String,
        /// What was expected and what was found.
        problem: String,
    },
}

/// The board's home directory and the files in it.
///
/// Resolved once per process from `$HERMES_HOME` (default `$HOME/.hermes`) and
/// `$HERMES_GATEWAY_LOCK_DIR` (default `<home>/locks`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Home {
    root: PathBuf,
    lock_dir: PathBuf,
}

impl Home {
    /// Resolves the home from the process environment.
    pub fn from_env() -> Result<Home, ConfigError> {
        Home::from_vars(
            std::env::var_os("HERMES_HOME"),
            std::env::var_os("HOME"),
            std::env::var_os("HERMES_GATEWAY_LOCK_DIR"),
        )
    }

    /// Resolves the home from explicit variable values (empty counts as unset, as a shell
    /// `HERMES_HOME=` export usually means "not configured" rather than "the current directory").
    pub fn from_vars(
        hermes_home: Option<OsString>,
        home: Option<OsString>,
        lock_dir: Option<OsString>,
    ) -> Result<Home, ConfigError> {
        let non_empty = |v: Option<OsString>| v.filter(|s| !s.is_empty()).map(PathBuf::from);
        let root = match (non_empty(hermes_home), non_empty(home)) {
            (Some(explicit), _) => explicit,
            (None, Some(home)) => home.join(".hermes"),
            (None, None) => return Err(ConfigError::NoHome),
        };
        let lock_dir = non_empty(lock_dir).unwrap_or_else(|| root.join("locks"));
        Ok(Home { root, lock_dir })
    }

    /// A home rooted at `root` with the default lock directory.
    pub fn at(root: impl Into<PathBuf>) -> Home {
        let root = root.into();
        let lock_dir = root.join("locks");
        Home { root, lock_dir }
    }

    /// The home directory itself (`$HERMES_HOME`).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<home>/config.yaml`.
    pub fn config_path(&self) -> PathBuf {
        self.root.join("config.yaml")
    }

    /// `<home>/.env`.
    pub fn env_path(&self) -> PathBuf {
        self.root.join(".env")
    }

    /// `<home>/kanban.db`.
    pub fn db_path(&self) -> PathBuf {
        self.root.join("kanban.db")
    }

    /// Where the gateway keeps its singleton lock.
    pub fn lock_dir(&self) -> &Path {
        &self.lock_dir
    }
}

/// Everything `hermes` reads from `config.yaml`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Config {
    /// `model.*`: which OpenAI-compatible endpoint and model decompose calls go to.
    pub model: ModelConfig,
    /// `auxiliary.*`: limits on one aux HTTP request.
    pub auxiliary: AuxiliaryConfig,
    /// `kanban.*`: the dispatcher and the billing bounds.
    pub kanban: KanbanConfig,
}

/// `model.*`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ModelConfig {
    /// OpenAI-compatible base URL, e.g. `http://127.0.0.1:PORT/v1`.
    pub base_url: Option<String>,
    /// Model name sent in requests.
    pub default: Option<String>,
    /// Provider label; accepted for compatibility, not used.
    pub provider: Option<String>,
}

/// `auxiliary.*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuxiliaryConfig {
    /// Extra HTTP tries inside one attempt on 5xx / connection errors (at most
    /// [`MAX_TRANSIENT_RETRIES`]).
    pub transient_retries: u32,
    /// Wall-clock bound on one aux HTTP request, streaming included.
    pub timeout: Duration,
}

/// `kanban.*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KanbanConfig {
    /// Whether `gateway run` hosts the dispatcher at all.
    pub dispatch_in_gateway: bool,
    /// Dispatcher tick period (always > 0).
    pub dispatch_interval: Duration,
    /// Worker spawn limit per tick; spawning is out of scope, the key is only accepted.
    pub max_spawn: Option<u32>,
    /// Master switch for automatic decomposition (re-read every tick).
    pub auto_decompose: bool,
    /// Cards attempted per tick (always >= 1).
    pub auto_decompose_per_tick: u32,
    /// Assignee given to a decomposed root.
    pub orchestrator_profile: String,
    /// Assignee for children with no or an unknown assignee.
    pub default_assignee: String,
    /// After a decompose, promote parent-free `todo` cards to `ready`.
    pub auto_promote_children: bool,
    /// Paid attempts per card before it is parked.
    pub decompose_max_attempts: u32,
    /// Wait after the first failed attempt (doubles per failure, capped by the dispatcher).
    pub decompose_backoff: Duration,
    /// A fan-out with more children than this is rejected whole (always >= 1).
    pub decompose_max_children: u32,
    /// Board-wide ceiling on paid aux calls in any rolling hour.
    pub decompose_calls_per_hour: u32,
    /// Board-wide pause after 401/402/403 from the provider.
    pub provider_cooldown: Duration,
}

/// Upper bound on `auxiliary.transient_retries`; larger values are clamped to it, as upstream
/// does, so a config written for upstream keeps working without multiplying the bill further.
pub const MAX_TRANSIENT_RETRIES: u32 = 6;

// The defaults of SPEC §2, in one place.
const DEFAULT_TRANSIENT_RETRIES: u32 = 2;
const DEFAULT_AUX_TIMEOUT_SECS: u64 = 120;
const DEFAULT_DISPATCH_INTERVAL_SECS: u64 = 60;
const DEFAULT_PER_TICK: u32 = 3;
const DEFAULT_PROFILE: &str = "default";
const DEFAULT_MAX_ATTEMPTS: u32 = 3;
const DEFAULT_BACKOFF_SECS: u64 = 60;
const DEFAULT_MAX_CHILDREN: u32 = 8;
const DEFAULT_CALLS_PER_HOUR: u32 = 120;
const DEFAULT_PROVIDER_COOLDOWN_SECS: u64 = 900;

impl Default for AuxiliaryConfig {
    fn default() -> Self {
        AuxiliaryConfig {
            transient_retries: DEFAULT_TRANSIENT_RETRIES,
            timeout: Duration::from_secs(DEFAULT_AUX_TIMEOUT_SECS),
        }
    }
}

impl Default for KanbanConfig {
    fn default() -> Self {
        KanbanConfig {
            dispatch_in_gateway: true,
            dispatch_interval: Duration::from_secs(DEFAULT_DISPATCH_INTERVAL_SECS),
            max_spawn: None,
            auto_decompose: true,
            auto_decompose_per_tick: DEFAULT_PER_TICK,
            orchestrator_profile: DEFAULT_PROFILE.to_owned(),
            default_assignee: DEFAULT_PROFILE.to_owned(),
            auto_promote_children: true,
            decompose_max_attempts: DEFAULT_MAX_ATTEMPTS,
            decompose_backoff: Duration::from_secs(DEFAULT_BACKOFF_SECS),
            decompose_max_children: DEFAULT_MAX_CHILDREN,
            decompose_calls_per_hour: DEFAULT_CALLS_PER_HOUR,
            provider_cooldown: Duration::from_secs(DEFAULT_PROVIDER_COOLDOWN_SECS),
        }
    }
}

impl Config {
    /// Reads `<home>/config.yaml`; a missing file means all defaults.
    pub fn load(home: &Home) -> Result<Config, ConfigError> {
        let path = home.config_path();
        match std::fs::read_to_string(&path) {
            Ok(text) => Config::parse(&text, &path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Config::default()),
            Err(source) => Err(ConfigError::Read { path, source }),
        }
    }

    /// Parses config text; `path` is only used in error messages.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let doc: Value = serde_norway::from_str(text).map_err(|e| ConfigError::Syntax {
            path: path.to_owned(),
            line: e.location().map(|l| l.line()),
            detail: e.to_string(),
        })?;
        let reader = Reader { path };
        let top = match &doc {
            Value::Null => return Ok(Config::default()),
            Value::Mapping(m) => m,
            other => {
                return Err(reader.invalid(
                    "(top level)",
                    format!("expected a mapping of sections, got {}", Got(other)),
                ))
            }
        };
        Ok(Config {
            model: reader.model(top)?,
            auxiliary: reader.auxiliary(top)?,
            kanban: reader.kanban(top)?,
        })
    }
}

/// Walks the parsed YAML, turning each key we know into its typed value or a precise error.
struct Reader<'a> {
    path: &'a Path,
}

/// One section's keys; absent or `null` keys fall back to defaults.
struct Section<'a> {
    name: &'static str,
    map: Option<&'a Mapping>,
}

impl Section<'_> {
    fn get(&self, key: &str) -> Option<&Value> {
        self.map
            .and_then(|m| m.get(key))
            .filter(|v| !matches!(v, Value::Null))
    }

    fn dotted(&self, key: &str) -> String {
        format!("{}.{key}", self.name)
    }
}

impl Reader<'_> {
    fn invalid(&self, key: impl Into<String>, problem: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            path: self.path.to_owned(),
            key: key.into(),
            problem: problem.into(),
        }
    }

    fn section<'m>(
        &self,
        top: &'m Mapping,
        name: &'static str,
    ) -> Result<Section<'m>, ConfigError> {
        match top.get(name) {
            None | Some(Value::Null) => Ok(Section { name, map: None }),
            Some(Value::Mapping(m)) => Ok(Section { name, map: Some(m) }),
            Some(other) => Err(self.invalid(
                name,
                format!("expected a mapping of keys, got {}", Got(other)),
            )),
        }
    }

    fn model(&self, top: &Mapping) -> Result<ModelConfig, ConfigError> {
        // Upstream's own default config writes `model: ""` or `model: <name>`: a bare string
        // is the model name, so a config upstream wrote still loads here.
        if let Some(Value::String(name)) = top.get("model") {
            return Ok(ModelConfig {
                default: non_blank(name),
                ..ModelConfig::default()
            });
        }
        let s = self.section(top, "model")?;
        Ok(ModelConfig {
            base_url: self.opt_string(&s, "base_url")?,
            default: self.opt_string(&s, "default")?,
            provider: self.opt_string(&s, "provider")?,
        })
    }

    fn auxiliary(&self, top: &Mapping) -> Result<AuxiliaryConfig, ConfigError> {
        let s = self.section(top, "auxiliary")?;
        let d = AuxiliaryConfig::default();
        Ok(AuxiliaryConfig {
            transient_retries: self
                .count(&s, "transient_retries", 0)?
                .unwrap_or(d.transient_retries)
                .min(MAX_TRANSIENT_RETRIES),
            timeout: self
                .positive_secs(&s, "timeout_seconds")?
                .unwrap_or(d.timeout),
        })
    }

    fn kanban(&self, top: &Mapping) -> Result<KanbanConfig, ConfigError> {
        let s = self.section(top, "kanban")?;
        let d = KanbanConfig::default();
        Ok(KanbanConfig {
            dispatch_in_gateway: self
                .boolean(&s, "dispatch_in_gateway")?
                .unwrap_or(d.dispatch_in_gateway),
            dispatch_interval: self
                .positive_secs(&s, "dispatch_interval_seconds")?
                .unwrap_or(d.dispatch_interval),
            max_spawn: self.count(&s, "max_spawn", 0)?,
            auto_decompose: self
                .boolean(&s, "auto_decompose")?
                .unwrap_or(d.auto_decompose),
            auto_decompose_per_tick: self
                .per_tick(&s, "auto_decompose_per_tick")?
                .unwrap_or(d.auto_decompose_per_tick),
            orchestrator_profile: self
                .opt_string(&s, "orchestrator_profile")?
                .unwrap_or(d.orchestrator_profile),
            default_assignee: self
                .opt_string(&s, "default_assignee")?
                .unwrap_or(d.default_assignee),
            auto_promote_children: self
                .boolean(&s, "auto_promote_children")?
                .unwrap_or(d.auto_promote_children),
            decompose_max_attempts: self
                .count(&s, "decompose_max_attempts", 0)?
                .unwrap_or(d.decompose_max_attempts),
            decompose_backoff: self
                .non_negative_secs(&s, "decompose_backoff_seconds")?
                .unwrap_or(d.decompose_backoff),
            decompose_max_children: self
                .count(&s, "decompose_max_children", 1)?
                .unwrap_or(d.decompose_max_children),
            decompose_calls_per_hour: self
                .count(&s, "decompose_calls_per_hour", 0)?
                .unwrap_or(d.decompose_calls_per_hour),
            provider_cooldown: self
                .positive_secs(&s, "provider_cooldown_seconds")?
                .unwrap_or(d.provider_cooldown),
        })
    }

    /// A string; blank means unset.
    fn opt_string(&self, s: &Section, key: &str) -> Result<Option<String>, ConfigError> {
        match s.get(key) {
            None => Ok(None),
            Some(Value::String(v)) => Ok(non_blank(v)),
            Some(other) => Err(self.invalid(
                s.dotted(key),
                format!("expected a string, got {}", Got(other)),
            )),
        }
    }

    /// A boolean; the YAML 1.1 spellings upstream's parser accepts (`yes`, `off`, …) count too,
    /// so a switch flipped in a config written for upstream means the same here.
    fn boolean(&self, s: &Section, key: &str) -> Result<Option<bool>, ConfigError> {
        match s.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(Value::String(v)) => match v.trim().to_ascii_lowercase().as_str() {
                "true" | "yes" | "on" | "y" => Ok(Some(true)),
                "false" | "no" | "off" | "n" => Ok(Some(false)),
                _ => Err(self.invalid(
                    s.dotted(key),
                    format!(
                        "expected true or false, got {}",
                        Got(&Value::String(v.clone()))
                    ),
                )),
            },
            Some(other) => Err(self.invalid(
                s.dotted(key),
                format!("expected true or false, got {}", Got(other)),
            )),
        }
    }

    /// A whole number >= `min`, no larger than `u32::MAX`.
    fn count(&self, s: &Section, key: &str, min: u32) -> Result<Option<u32>, ConfigError> {
        let Some(v) = s.get(key) else { return Ok(None) };
        let expected = if min == 0 {
            "expected a whole number >= 0".to_owned()
        } else {
            format!("expected a whole number >= {min}")
        };
        match v.as_i64() {
            Some(n) => u32::try_from(n)
                .ok()
                .filter(|n| *n >= min)
                .map(Some)
                .ok_or_else(|| self.invalid(s.dotted(key), format!("{expected}, got {n}"))),
            None => Err(self.invalid(s.dotted(key), format!("{expected}, got {}", Got(v)))),
        }
    }

    /// `auto_decompose_per_tick`: any whole number; values below 1 mean 1.
    fn per_tick(&self, s: &Section, key: &str) -> Result<Option<u32>, ConfigError> {
        let Some(v) = s.get(key) else { return Ok(None) };
        match v.as_i64() {
            Some(n) => Ok(Some(u32::try_from(n.max(1)).unwrap_or(u32::MAX))),
            None => Err(self.invalid(
                s.dotted(key),
                format!("expected a whole number of cards, got {}", Got(v)),
            )),
        }
    }

    fn positive_secs(&self, s: &Section, key: &str) -> Result<Option<Duration>, ConfigError> {
        self.secs(s, key, false)
    }

    fn non_negative_secs(&self, s: &Section, key: &str) -> Result<Option<Duration>, ConfigError> {
        self.secs(s, key, true)
    }

    /// Seconds as an integer or a float; must be finite, and > 0 unless `zero_ok`.
    fn secs(&self, s: &Section, key: &str, zero_ok: bool) -> Result<Option<Duration>, ConfigError> {
        let Some(v) = s.get(key) else { return Ok(None) };
        let bound = if zero_ok { ">= 0" } else { "> 0" };
        let Some(secs) = v.as_f64() else {
            return Err(self.invalid(
                s.dotted(key),
                format!("expected a number of seconds, got {}", Got(v)),
            ));
        };
        let in_range = secs.is_finite() && if zero_ok { secs >= 0.0 } else { secs > 0.0 };
        let duration = Duration::try_from_secs_f64(secs).ok().filter(|_| in_range);
        // A positive value too small to survive the nanosecond rounding would become a zero
        // interval, which timers reject.
        let duration = duration.filter(|d| zero_ok || !d.is_zero());
        duration.map(Some).ok_or_else(|| {
            self.invalid(
                s.dotted(key),
                format!(
                    "expected a finite number of seconds {bound}, got {}",
                    Got(v)
                ),
            )
        })
    }
}

fn non_blank(s: &str) -> Option<String> {
    let trimmed = s.trim();
    (!trimmed.is_empty()).then(|| trimmed.to_owned())
}

/// Renders a YAML value for "got …" in error messages.
struct Got<'a>(&'a Value);

impl fmt::Display for Got<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Value::Null => f.write_str("nothing (null)"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Number(n) => write!(f, "{n}"),
            Value::String(s) => write!(f, "{s:?}"),
            Value::Sequence(_) => f.write_str("a list"),
            Value::Mapping(_) => f.write_str("a mapping"),
            Value::Tagged(t) => write!(f, "a value tagged {}", t.tag),
        }
    }
}

/// Parses `.env` text: `KEY=value` lines, blank lines and `#` comments ignored, an optional
/// `export ` prefix, matching surrounding quotes stripped. Later lines win.
pub fn parse_dotenv(text: &str) -> BTreeMap<String, String> {
    let mut vars = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line
            .strip_prefix("export ")
            .map(str::trim_start)
            .unwrap_or(line);
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim();
        if key.is_empty() || key.contains(char::is_whitespace) {
            continue;
        }
        vars.insert(key.to_owned(), dotenv_value(value.trim()));
    }
    vars
}

fn dotenv_value(raw: &str) -> String {
    for quote in ['"', '\''] {
        if raw.len() >= 2 && raw.starts_with(quote) && raw.ends_with(quote) {
            return raw[1..raw.len() - 1].to_owned();
        }
    }
    // Unquoted values may carry a trailing ` # comment`; a `#` glued to the value is kept
    // because keys and tokens can legitimately contain one.
    match raw.find(" #").or_else(|| raw.find("\t#")) {
        Some(cut) => raw[..cut].trim_end().to_owned(),
        None => raw.to_owned(),
    }
}

/// Reads `<home>/.env`; a missing or unreadable file yields no variables.
pub fn read_dotenv(home: &Home) -> BTreeMap<String, String> {
    std::fs::read_to_string(home.env_path())
        .map(|text| parse_dotenv(&text))
        .unwrap_or_default()
}

/// The provider key: `OPENAI_API_KEY` from the process environment first, else from `.env`.
/// Blank values count as unset.
pub fn api_key(home: &Home) -> Option<String> {
    let from_env = std::env::var("OPENAI_API_KEY").ok();
    api_key_from(from_env, || read_dotenv(home))
}

fn api_key_from(
    process_value: Option<String>,
    dotenv: impl FnOnce() -> BTreeMap<String, String>,
) -> Option<String> {
    let usable = |v: String| {
        let trimmed = v.trim().to_owned();
        (!trimmed.is_empty()).then_some(trimmed)
    };
    process_value
        .and_then(usable)
        .or_else(|| dotenv().remove("OPENAI_API_KEY").and_then(usable))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("/h/config.yaml"))
    }

    fn err(text: &str) -> String {
        match parse(text) {
            Ok(c) => panic!("expected an error for {text:?}, got {c:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn missing_and_empty_configs_are_all_defaults() {
        let d = Config::default();
        assert_eq!(parse("").unwrap(), d);
        assert_eq!(parse("# only a comment\n").unwrap(), d);
        assert_eq!(parse("kanban:\nauxiliary:\nmodel:\n").unwrap(), d);
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Config::load(&Home::at(dir.path())).unwrap(), d);
    }

    #[test]
    fn defaults_match_the_spec() {
        let c = Config::default();
        assert_eq!(
            c.model,
            ModelConfig {
                base_url: None,
                default: None,
                provider: None
            }
        );
        assert_eq!(c.auxiliary.transient_retries, 2);
        assert_eq!(c.auxiliary.timeout, Duration::from_secs(120));
        let k = c.kanban;
        assert!(k.dispatch_in_gateway);
        assert_eq!(k.dispatch_interval, Duration::from_secs(60));
        assert_eq!(k.max_spawn, None);
        assert!(k.auto_decompose);
        assert_eq!(k.auto_decompose_per_tick, 3);
        assert_eq!(k.orchestrator_profile, "default");
        assert_eq!(k.default_assignee, "default");
        assert!(k.auto_promote_children);
        assert_eq!(k.decompose_max_attempts, 3);
        assert_eq!(k.decompose_backoff, Duration::from_secs(60));
        assert_eq!(k.decompose_max_children, 8);
        assert_eq!(k.decompose_calls_per_hour, 120);
        assert_eq!(k.provider_cooldown, Duration::from_secs(900));
    }

    #[test]
    fn every_key_is_read() {
        let c = parse(
            "model:\n  base_url: http://127.0.0.1:9/v1\n  default: fake-model\n  provider: custom\n\
             auxiliary:\n  transient_retries: 0\n  timeout_seconds: 7\n\
             kanban:\n  dispatch_in_gateway: false\n  dispatch_interval_seconds: 0.25\n  max_spawn: 0\n\
             \x20 auto_decompose: false\n  auto_decompose_per_tick: 10\n  orchestrator_profile: boss\n\
             \x20 default_assignee: worker\n  auto_promote_children: false\n  decompose_max_attempts: 5\n\
             \x20 decompose_backoff_seconds: 0\n  decompose_max_children: 4\n  decompose_calls_per_hour: 9\n\
             \x20 provider_cooldown_seconds: 30\n",
        )
        .unwrap();
        assert_eq!(c.model.base_url.as_deref(), Some("http://127.0.0.1:9/v1"));
        assert_eq!(c.model.default.as_deref(), Some("fake-model"));
        assert_eq!(c.model.provider.as_deref(), Some("custom"));
        assert_eq!(
            c.auxiliary,
            AuxiliaryConfig {
                transient_retries: 0,
                timeout: Duration::from_secs(7)
            }
        );
        let k = c.kanban;
        assert!(!k.dispatch_in_gateway);
        assert_eq!(k.dispatch_interval, Duration::from_millis(250));
        assert_eq!(k.max_spawn, Some(0));
        assert!(!k.auto_decompose);
        assert_eq!(k.auto_decompose_per_tick, 10);
        assert_eq!(k.orchestrator_profile, "boss");
        assert_eq!(k.default_assignee, "worker");
        assert!(!k.auto_promote_children);
        assert_eq!(k.decompose_max_attempts, 5);
        assert_eq!(k.decompose_backoff, Duration::ZERO);
        assert_eq!(k.decompose_max_children, 4);
        assert_eq!(k.decompose_calls_per_hour, 9);
        assert_eq!(k.provider_cooldown, Duration::from_secs(30));
    }

    #[test]
    fn durations_accept_integer_and_float_spellings() {
        for (text, expected) in [
            ("2", Duration::from_secs(2)),
            ("0.5", Duration::from_millis(500)),
            (".5", Duration::from_millis(500)),
            ("1e-1", Duration::from_millis(100)),
            ("1.5e1", Duration::from_secs(15)),
        ] {
            let c = parse(&format!("kanban:\n  dispatch_interval_seconds: {text}\n")).unwrap();
            assert_eq!(c.kanban.dispatch_interval, expected, "{text}");
        }
    }

    #[test]
    fn unknown_keys_are_ignored_at_every_level() {
        let c = parse(
            "toolsets: [web]\nupdates: {check: false}\nmodel:\n  default: m\n  context_length: 9\n\
             auxiliary:\n  vision: {provider: auto}\n  transient_retries: 1\n\
             kanban:\n  auto_subscribe_on_create: true\n  failure_limit: 2\n",
        )
        .unwrap();
        assert_eq!(c.model.default.as_deref(), Some("m"));
        assert_eq!(c.auxiliary.transient_retries, 1);
        assert_eq!(c.kanban, KanbanConfig::default());
    }

    #[test]
    fn model_as_a_bare_string_is_the_model_name() {
        assert_eq!(
            parse("model: some/model\n")
                .unwrap()
                .model
                .default
                .as_deref(),
            Some("some/model")
        );
        assert_eq!(parse("model: ''\n").unwrap().model, ModelConfig::default());
    }

    #[test]
    fn wrong_types_name_the_dotted_key() {
        let cases = [
            (
                "kanban:\n  dispatch_interval_seconds: fast\n",
                "kanban.dispatch_interval_seconds: expected a number of seconds, got \"fast\"",
            ),
            (
                "kanban:\n  max_spawn: -1\n",
                "kanban.max_spawn: expected a whole number >= 0, got -1",
            ),
            (
                "kanban:\n  max_spawn: 1.5\n",
                "kanban.max_spawn: expected a whole number >= 0, got 1.5",
            ),
            (
                "kanban:\n  auto_decompose: maybe\n",
                "kanban.auto_decompose: expected true or false, got \"maybe\"",
            ),
            (
                "kanban:\n  auto_decompose: 1\n",
                "kanban.auto_decompose: expected true or false, got 1",
            ),
            (
                "kanban:\n  dispatch_in_gateway: [1]\n",
                "kanban.dispatch_in_gateway: expected true or false, got a list",
            ),
            (
                "kanban:\n  auto_promote_children: {}\n",
                "kanban.auto_promote_children: expected true or false, got a mapping",
            ),
            (
                "kanban:\n  auto_decompose_per_tick: 2.5\n",
                "kanban.auto_decompose_per_tick: expected a whole number of cards, got 2.5",
            ),
            (
                "kanban:\n  orchestrator_profile: 3\n",
                "kanban.orchestrator_profile: expected a string, got 3",
            ),
            (
                "kanban:\n  default_assignee: true\n",
                "kanban.default_assignee: expected a string, got true",
            ),
            (
                "kanban:\n  decompose_max_attempts: three\n",
                "kanban.decompose_max_attempts: expected a whole number >= 0, got \"three\"",
            ),
            (
                "kanban:\n  decompose_max_children: 0\n",
                "kanban.decompose_max_children: expected a whole number >= 1, got 0",
            ),
            (
                "kanban:\n  decompose_calls_per_hour: 5000000000\n",
                "kanban.decompose_calls_per_hour: expected a whole number >= 0, got 5000000000",
            ),
            (
                "kanban:\n  decompose_backoff_seconds: soon\n",
                "kanban.decompose_backoff_seconds: expected a number of seconds, got \"soon\"",
            ),
            (
                "kanban:\n  provider_cooldown_seconds: '900'\n",
                "kanban.provider_cooldown_seconds: expected a number of seconds, got \"900\"",
            ),
            (
                "auxiliary:\n  transient_retries: -2\n",
                "auxiliary.transient_retries: expected a whole number >= 0, got -2",
            ),
            (
                "auxiliary:\n  timeout_seconds: [1]\n",
                "auxiliary.timeout_seconds: expected a number of seconds, got a list",
            ),
            (
                "model:\n  base_url: 8080\n",
                "model.base_url: expected a string, got 8080",
            ),
            (
                "model:\n  default: [a]\n",
                "model.default: expected a string, got a list",
            ),
            (
                "model:\n  provider: false\n",
                "model.provider: expected a string, got false",
            ),
        ];
        for (text, expected) in cases {
            let message = err(text);
            assert!(message.starts_with("/h/config.yaml: "), "{message}");
            assert!(message.ends_with(expected), "for {text:?}: {message}");
        }
    }

    #[test]
    fn durations_out_of_range_are_rejected() {
        for key in ["dispatch_interval_seconds", "provider_cooldown_seconds"] {
            for bad in ["0", "-1", "-0.5", ".nan", ".inf", "-.inf", "1e-12"] {
                let message = err(&format!("kanban:\n  {key}: {bad}\n"));
                assert!(
                    message.contains(&format!(
                        "kanban.{key}: expected a finite number of seconds > 0"
                    )),
                    "{key}={bad}: {message}"
                );
            }
        }
        for bad in ["0", "-3"] {
            let message = err(&format!("auxiliary:\n  timeout_seconds: {bad}\n"));
            assert!(
                message
                    .contains("auxiliary.timeout_seconds: expected a finite number of seconds > 0"),
                "{message}"
            );
        }
        for bad in ["-1", ".nan", ".inf", "1e300"] {
            let message = err(&format!("kanban:\n  decompose_backoff_seconds: {bad}\n"));
            assert!(
                message.contains(
                    "kanban.decompose_backoff_seconds: expected a finite number of seconds >= 0"
                ),
                "{bad}: {message}"
            );
        }
    }

    #[test]
    fn per_tick_below_one_means_one_and_retries_are_clamped() {
        for v in ["0", "-4"] {
            let c = parse(&format!("kanban:\n  auto_decompose_per_tick: {v}\n")).unwrap();
            assert_eq!(c.kanban.auto_decompose_per_tick, 1);
        }
        let c = parse("auxiliary:\n  transient_retries: 50\n").unwrap();
        assert_eq!(c.auxiliary.transient_retries, MAX_TRANSIENT_RETRIES);
    }

    #[test]
    fn yaml_one_one_boolean_spellings_are_accepted() {
        assert!(
            !parse("kanban:\n  auto_decompose: 'off'\n")
                .unwrap()
                .kanban
                .auto_decompose
        );
        assert!(
            !parse("kanban:\n  auto_decompose: no\n")
                .unwrap()
                .kanban
                .auto_decompose
        );
        assert!(
            parse("kanban:\n  auto_decompose: Yes\n")
                .unwrap()
                .kanban
                .auto_decompose
        );
    }

    #[test]
    fn sections_that_are_not_mappings_are_named() {
        assert!(err("kanban: 3\n").ends_with("kanban: expected a mapping of keys, got 3"));
        assert!(
            err("auxiliary: [a]\n").ends_with("auxiliary: expected a mapping of keys, got a list")
        );
        assert!(err("model: 7\n").ends_with("model: expected a mapping of keys, got 7"));
        assert!(
            err("- a\n- b\n").contains("(top level): expected a mapping of sections, got a list")
        );
    }

    #[test]
    fn syntax_errors_carry_path_and_line() {
        let message = err("kanban:\n  auto_decompose: true\n  bad: [unclosed\n");
        assert!(message.starts_with("/h/config.yaml: line "), "{message}");
        assert!(message.contains("invalid YAML"), "{message}");
    }

    #[test]
    fn home_resolution() {
        let h = Home::from_vars(Some("/x/hh".into()), Some("/x/home".into()), None).unwrap();
        assert_eq!(h.root(), Path::new("/x/hh"));
        assert_eq!(h.db_path(), Path::new("/x/hh/kanban.db"));
        assert_eq!(h.config_path(), Path::new("/x/hh/config.yaml"));
        assert_eq!(h.env_path(), Path::new("/x/hh/.env"));
        assert_eq!(h.lock_dir(), Path::new("/x/hh/locks"));
        let h =
            Home::from_vars(Some("".into()), Some("/x/home".into()), Some("/l".into())).unwrap();
        assert_eq!(h.root(), Path::new("/x/home/.hermes"));
        assert_eq!(h.lock_dir(), Path::new("/l"));
        assert!(matches!(
            Home::from_vars(None, None, None),
            Err(ConfigError::NoHome)
        ));
        assert!(matches!(
            Home::from_vars(Some("".into()), Some("".into()), None),
            Err(ConfigError::NoHome)
        ));
    }

    #[test]
    fn dotenv_lines() {
        let vars = parse_dotenv(
            "# a comment\n\nOPENAI_API_KEY=sk-1\nexport QUOTED=\"two words\"\nSINGLE='x y'\n\
             SPACED = padded  \nTRAIL=value # note\nHASH=a#b\nnot a pair\n=novalue\nMISMATCH=\"open\n",
        );
        assert_eq!(vars.get("OPENAI_API_KEY").map(String::as_str), Some("sk-1"));
        assert_eq!(vars.get("QUOTED").map(String::as_str), Some("two words"));
        assert_eq!(vars.get("SINGLE").map(String::as_str), Some("x y"));
        assert_eq!(vars.get("SPACED").map(String::as_str), Some("padded"));
        assert_eq!(vars.get("TRAIL").map(String::as_str), Some("value"));
        assert_eq!(vars.get("HASH").map(String::as_str), Some("a#b"));
        assert_eq!(vars.get("MISMATCH").map(String::as_str), Some("\"open"));
        assert_eq!(vars.len(), 7, "{vars:?}");
        assert_eq!(
            parse_dotenv("K=1\nK=2\n").get("K").map(String::as_str),
            Some("2")
        );
    }

    #[test]
    fn api_key_prefers_the_process_environment() {
        let dotenv = || parse_dotenv("OPENAI_API_KEY=from-file\n");
        assert_eq!(
            api_key_from(Some("from-env".into()), dotenv).as_deref(),
            Some("from-env")
        );
        assert_eq!(api_key_from(None, dotenv).as_deref(), Some("from-file"));
        assert_eq!(
            api_key_from(Some("  ".into()), dotenv).as_deref(),
            Some("from-file")
        );
        assert_eq!(api_key_from(None, BTreeMap::new).as_deref(), None);
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(".env"), "export OPENAI_API_KEY='sk-x'\n").unwrap();
        assert_eq!(
            read_dotenv(&Home::at(dir.path()))
                .get("OPENAI_API_KEY")
                .map(String::as_str),
            Some("sk-x")
        );
    }
}
