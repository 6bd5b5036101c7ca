//! Where the board lives (`Home`) and what `config.yaml` / `.env` say (`Config`, `api_key`).
//!
//! `config.yaml` is shared with upstream hermes, which writes many keys we have no use for, so
//! unknown keys are ignored; under `kanban:` and `auxiliary.kanban_decomposer:`, where a typo
//! silently changes what is billed, a key neither implementation knows becomes a warning naming
//! the closest known key (`keys`). The keys we do read are checked strictly: a wrong type or a
//! number outside the key's documented range ([`NUMERIC_KEYS`]) is reported with its dotted path
//! instead of silently falling back to a default, because a misread bound (say,
//! `decompose_calls_per_hour`) is money.

mod decomposer;
mod in_force;
mod keys;
mod nesting;
mod prices;
mod table;
#[cfg(test)]
mod tests;

pub use decomposer::{
    DecomposerConfig, DecomposerEndpoint, DecomposerSetupError, EndpointSource, KeyPlace,
    KeySource, OPENAI_BASE_URL,
};
pub use in_force::{InForce, Source, WrittenKeys};
pub use keys::{ConfigWarning, WarningLog};
pub use nesting::MAX_NESTING;
pub use prices::{format_cost, Price, Prices, PRICES_KEY};
pub use table::{keys_table, KeySpec, Kind, Range, Upstream, KEYS};

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_norway::{Mapping, Value};

use crate::core::redact::key_shapes;

use table::{fits, flag, ignored, other, read_setting, seconds, section, text, whole, Setting};

use crate::core::spawn::MAX_FAILURE_LIMIT;

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
    /// The path names something other than a regular file (a FIFO, a device, a directory):
    /// reading it could block or never end, so it is not read at all.
    #[error("{}: not a regular file ({what}); hermes reads configuration only from a regular file", path.display())]
    NotRegular {
        /// The file that was refused.
        path: PathBuf,
        /// What it is instead.
        what: &'static str,
    },
    /// The file is larger than any configuration hermes reads.
    #[error(
        "{}: {size} bytes, over the {} KiB a configuration file may have; not read",
        path.display(),
        MAX_CONFIG_BYTES / 1024
    )]
    TooLarge {
        /// The file that was refused.
        path: PathBuf,
        /// Its size (at least; it may be growing).
        size: u64,
    },
    /// The file changed between two reads a moment apart: an editor is writing it (in place,
    /// perhaps caught between truncating and writing), and what was read may be half of it.
    #[error(
        "{}: changed while it was read (being written?); not used until it reads the same twice",
        path.display()
    )]
    Changing {
        /// The file.
        path: PathBuf,
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
    /// `auxiliary.*`: limits on one aux HTTP request, and the decomposer's own settings.
    pub auxiliary: AuxiliaryConfig,
    /// `kanban.*`: the dispatcher and the billing bounds.
    pub kanban: KanbanConfig,
    /// `agent.*`: the worker's agent loop.
    pub agent: AgentConfig,
    /// What was ignored but looks like a mistake (an unknown key, a setting upstream's rules
    /// make ineffective), in file order; the CLI prints these on stderr, the gateway logs them.
    pub warnings: Vec<ConfigWarning>,
    /// The file as read, kept to carry keys over a reload (see [`Config::keeping`]).
    pub raw: RawConfig,
}

/// What a config file said, as read: kept to carry the keys a later read leaves out over a
/// reload (see [`Config::keeping`]). It is no part of what the config means (two configs that
/// mean the same are equal however they were written), and it is never printed: it holds the
/// keys.
#[derive(Clone, Default)]
pub struct RawConfig {
    /// The file's top-level mapping.
    top: Mapping,
    /// The keys the file sets under `model`, `auxiliary` (and `auxiliary.kanban_decomposer`)
    /// and `kanban`, dotted: what a reload that no longer sets one of them would drop.
    pub set_keys: BTreeSet<String>,
}

impl PartialEq for RawConfig {
    fn eq(&self, _: &RawConfig) -> bool {
        true
    }
}

impl fmt::Debug for RawConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawConfig")
            .field("set_keys", &self.set_keys)
            .finish_non_exhaustive()
    }
}

section! {
    /// `model.*`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct ModelConfig {
        /// OpenAI-compatible base URL, e.g. `http://127.0.0.1:PORT/v1`.
        pub base_url: Option<String> = text("model.base_url", None).meaning(
            "the OpenAI-compatible endpoint decompose calls go to, unless \
             `auxiliary.kanban_decomposer` says otherwise",
        ),
        /// Model name sent in requests.
        pub default: Option<String> = text("model.default", None).meaning(
            "the model decompose calls name, unless `auxiliary.kanban_decomposer.model` says \
             otherwise (a bare `model: NAME`, as upstream writes it, means the same)",
        ),
        /// Provider label; accepted for compatibility, not used.
        pub provider: Option<String> = text("model.provider", None)
            .meaning("accepted for upstream's sake, not used"),
    }
}

section! {
    /// `auxiliary.*`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct AuxiliaryConfig {
        /// Extra HTTP tries inside one attempt on 5xx / connection errors (at most
        /// [`MAX_TRANSIENT_RETRIES`]).
        pub transient_retries: u32 = whole(
            "auxiliary.transient_retries",
            "retries",
            Some(2),
            0,
            MAX_TRANSIENT_RETRIES,
        )
        .clamped_above()
        .meaning("extra tries on 5xx / connection errors inside one attempt"),
        /// Wall-clock bound on one aux HTTP request, streaming included. Decompose calls use
        /// [`Config::decompose_timeout`], which also honours the decomposer's own `timeout`.
        pub timeout: Duration = REQUEST_TIMEOUT,
        /// `auxiliary.kanban_decomposer.*`, upstream's per-task settings for decompose calls.
        pub kanban_decomposer: DecomposerConfig =
            other("auxiliary.kanban_decomposer", "a mapping of the keys below")
                .meaning("upstream's settings for decompose calls, see below"),
    }
}

section! {
    /// `kanban.*`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct KanbanConfig {
        /// Whether `gateway run` hosts the dispatcher at all.
        pub dispatch_in_gateway: bool = flag("kanban.dispatch_in_gateway", true)
            .meaning("`false`: the gateway runs without a dispatcher"),
        /// Dispatcher tick period (always > 0).
        pub dispatch_interval: Duration =
            seconds("kanban.dispatch_interval_seconds", Some(60.0), 0.01, 86_400.0)
                .meaning("the gateway's tick"),
        /// Live workers on the board at once, from every path (S5); `0`: none.
        pub max_spawn: u32 = whole("kanban.max_spawn", "workers", Some(DEFAULT_MAX_SPAWN), 0, 1000)
            .meaning(
                "live workers on the board at once, from every path (`0`: none); re-read every \
                 tick: a lowered cap stops the newest workers beyond it",
            ),
        /// Runs of a card that may end without completing before it is parked (S1).
        pub failure_limit: u32 = whole("kanban.failure_limit", "runs", Some(2), 0, MAX_FAILURE_LIMIT)
            .meaning(
                "worker runs of a card that may end without completing before it is parked (a \
                 card's own `max_retries` overrides it)",
            ),
        /// Wait after a charged run, doubling per failure, capped at an hour (S3).
        pub spawn_backoff: Duration =
            seconds("kanban.spawn_backoff_seconds", Some(60.0), 0.0, 3600.0)
                .ours()
                .meaning("wait before a card's next worker after a failed run, doubling, capped at 1 h"),
        /// How long a worker may run before it is stopped and its run charged as timed out.
        pub worker_max_runtime: Duration =
            seconds("kanban.worker_max_runtime_seconds", Some(1800.0), 1.0, 86_400.0)
                .ours()
                .meaning(
                    "a worker running longer is stopped and its run charged as `timed_out` (a \
                     card's own `max_runtime_seconds` overrides it)",
                ),
        /// Master switch for automatic decomposition (re-read every tick).
        pub auto_decompose: bool = flag("kanban.auto_decompose", true)
            .meaning("re-read every tick: `false` stops paid calls from the next tick on"),
        /// Cards attempted per tick (always >= 1).
        pub auto_decompose_per_tick: u32 =
            whole("kanban.auto_decompose_per_tick", "cards", Some(3), 1, 1000)
                .clamped_below()
                .meaning("cards attempted (and in flight) per tick"),
        /// Assignee given to a decomposed root.
        pub orchestrator_profile: String =
            text("kanban.orchestrator_profile", Some(DEFAULT_PROFILE))
                .meaning("who owns a decomposed root"),
        /// Assignee for children with no or an unknown assignee.
        pub default_assignee: String = text("kanban.default_assignee", Some(DEFAULT_PROFILE))
            .meaning("who gets the children with no or an unknown assignee"),
        /// After a decompose, promote parent-free `todo` cards to `ready`.
        pub auto_promote_children: bool = flag("kanban.auto_promote_children", true)
            .meaning("after a decompose, promote parent-free `todo` cards to `ready`"),
        /// Paid attempts per card before it is parked.
        pub decompose_max_attempts: u32 =
            whole("kanban.decompose_max_attempts", "attempts", Some(3), 0, 100)
                .ours()
                .meaning("automatic attempts per card before it is parked"),
        /// Wait after the first failed attempt (doubles per failure, capped by the dispatcher).
        pub decompose_backoff: Duration =
            seconds("kanban.decompose_backoff_seconds", Some(60.0), 0.0, 3600.0)
                .ours()
                .meaning("wait after a failure, doubling per failure, capped at 1 h"),
        /// A fan-out with more children than this is rejected whole (always >= 1).
        pub decompose_max_children: u32 =
            whole("kanban.decompose_max_children", "children", Some(8), 1, 100)
                .ours()
                .meaning("a larger fan-out is rejected whole"),
        /// Board-wide ceiling on paid aux calls in any rolling hour.
        pub decompose_calls_per_hour: u32 =
            whole("kanban.decompose_calls_per_hour", "calls", Some(120), 0, 100_000)
                .ours()
                .meaning(
                    "board-wide ceiling on paid calls in any rolling hour, decompose calls and \
                     worker requests alike",
                ),
        /// Board-wide pause after 401/402/403 from the provider.
        pub provider_cooldown: Duration =
            seconds("kanban.provider_cooldown_seconds", Some(900.0), 1.0, 86_400.0)
                .ours()
                .meaning(
                    "board-wide pause of every automatic call (decompose and workers) after \
                     401/402/403",
                ),
        /// `kanban.prices`: USD per million tokens by model, for `kanban usage`'s estimates. Empty
        /// when none are configured (then no cost is shown at all).
        pub prices: Prices = other(PRICES_KEY, "a mapping of model name to `{input, output}`")
            .ours()
            .meaning("USD per million prompt / completion tokens, for `kanban usage`'s estimates"),
    }
    // Keys only upstream reads (its workers, subscriptions and diagnostics): known, so that a
    // config written for upstream loads without a warning for each.
    also: [
        ignored("kanban.auto_subscribe_on_create"),
        ignored("kanban.worker_log_rotate_bytes"),
        ignored("kanban.worker_log_backup_count"),
        ignored("kanban.max_in_progress_per_profile"),
        ignored("kanban.max_in_progress"),
        ignored("kanban.dispatch_stale_timeout_seconds"),
        ignored("kanban.diagnostics"),
    ]
}

section! {
    /// `agent.*`: the worker's agent loop.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct AgentConfig {
        /// Paid turns one worker run may take (S1: a spawn's requests stay within it, plus the
        /// retries inside each turn).
        pub max_turns: u32 = whole("agent.max_turns", "turns", Some(DEFAULT_MAX_TURNS), 1, 1000)
            .meaning("turns one worker run may take (each one paid request, plus its retries)"),
    }
}

/// Live workers per board when `kanban.max_spawn` is unset: a paid session each, so a board
/// nobody configured runs two at once (upstream's own memory-derived default starts at two).
pub const DEFAULT_MAX_SPAWN: u32 = 2;

/// Turns per worker run when `agent.max_turns` is unset: a third of upstream's 90, since the
/// reference worker's only tools are the six kanban tools, and a session that needs more turns
/// than this to reach a terminal call is looping.
pub const DEFAULT_MAX_TURNS: u32 = 30;

/// `auxiliary.timeout_seconds`, named where the decomposer's own `timeout` is weighed against it.
const REQUEST_TIMEOUT: KeySpec = seconds("auxiliary.timeout_seconds", Some(120.0), 0.01, 3600.0)
    .ours()
    .meaning("bound on one request, streaming included");

/// Upper bound on `auxiliary.transient_retries`; larger values are clamped to it, as upstream
/// does, so a config written for upstream keeps working without multiplying the bill further.
pub const MAX_TRANSIENT_RETRIES: u32 = 6;

/// Who gets a card when nothing else says (contract §2).
const DEFAULT_PROFILE: &str = "default";

/// What a numeric key counts, for its error message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// A whole number of these (`cards`, `calls`, …).
    Whole(&'static str),
    /// Seconds, as an integer or a float.
    Seconds,
}

/// What a value beyond one end of the range does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Beyond {
    /// A clear error naming the key and the range.
    Refused,
    /// Taken as that end of the range (kept where upstream behaves so, so that a config written
    /// for upstream still loads).
    Clamped,
}

/// A numeric key's documented range, as the table ([`KEYS`]) gives it.
///
/// The ends are chosen so that any value inside is harmless: nothing is allocated from a count,
/// and every duration, added to any timestamp until the year 9999, stays far from overflow.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NumericKey {
    /// Dotted key, e.g. `kanban.auto_decompose_per_tick`.
    pub key: &'static str,
    pub unit: Unit,
    pub min: f64,
    pub max: f64,
    pub below_min: Beyond,
    pub above_max: Beyond,
}

impl NumericKey {
    /// The last segment of the dotted key.
    fn leaf(&self) -> &'static str {
        match self.key.rfind('.') {
            Some(dot) => &self.key[dot + 1..],
            None => self.key,
        }
    }

    /// `expected a whole number of cards from 1 to 1000`.
    fn expected(&self) -> String {
        match self.unit {
            Unit::Whole(what) => format!(
                "expected a whole number of {what} from {} to {}",
                self.min, self.max
            ),
            Unit::Seconds => format!(
                "expected a number of seconds from {} to {}",
                self.min, self.max
            ),
        }
    }
}

/// Every numeric key `hermes` reads, with its range, in the table's order.
pub const NUMERIC_KEYS: [NumericKey; table::numeric_count(&KEYS)] = table::numeric_keys(&KEYS);

/// The most a configuration file (`config.yaml`, `.env`) may hold. Upstream's own config is
/// about 15 kB; a file past this is a mistake (or an attack), and parsing it on every tick
/// would cost the gateway its CPU.
pub const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// Reads a configuration file whole, without ever blocking on it or reading without end: it is
/// opened non-blocking (so a FIFO without a writer cannot stall the open), must be a regular
/// file (a FIFO, `/dev/zero` or a directory is refused before any read) and at most
/// [`MAX_CONFIG_BYTES`] long, also while it grows. `Ok(None)`: no file at the path.
pub fn read_config_file(path: &Path) -> Result<Option<String>, ConfigError> {
    let Some(bytes) = read_config_bytes(path)? else {
        return Ok(None);
    };
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|e| ConfigError::Read {
            path: path.to_owned(),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("not UTF-8 text ({})", e.utf8_error()),
            ),
        })
}

/// The bytes of a config file (see [`read_config_file`]): only a regular file, at most
/// [`MAX_CONFIG_BYTES`], opened without blocking; `None` when there is none.
pub fn read_config_bytes(path: &Path) -> Result<Option<Vec<u8>>, ConfigError> {
    use std::io::Read;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};

    let read_error = |source| ConfigError::Read {
        path: path.to_owned(),
        source,
    };
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(read_error(e)),
    };
    let meta = file.metadata().map_err(read_error)?;
    let kind = meta.file_type();
    if !kind.is_file() {
        let what = if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_char_device() {
            "a character device"
        } else if kind.is_block_device() {
            "a block device"
        } else if kind.is_dir() {
            "a directory"
        } else if kind.is_socket() {
            "a socket"
        } else {
            "not a file"
        };
        return Err(ConfigError::NotRegular {
            path: path.to_owned(),
            what,
        });
    }
    let too_large = |size| ConfigError::TooLarge {
        path: path.to_owned(),
        size,
    };
    if meta.len() > MAX_CONFIG_BYTES {
        return Err(too_large(meta.len()));
    }
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    let read = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    if read > MAX_CONFIG_BYTES {
        return Err(too_large(read));
    }
    Ok(Some(bytes))
}

/// How recently a file must have changed for one read of it not to be trusted alone: an editor
/// that writes in place (truncate, then write) may be caught between the two.
pub const SETTLE_AGE: Duration = Duration::from_secs(2);

/// How long after a first read of a recently changed file the second is made.
pub const REREAD_AFTER: Duration = Duration::from_millis(50);

/// Reads a configuration file (see [`read_config_file`]), twice when it changed within
/// [`SETTLE_AGE`]: the two reads, [`REREAD_AFTER`] apart, must find the same text in the same
/// file, else the file is being written and is not used ([`ConfigError::Changing`]). A file that
/// has not changed for longer is read once.
pub fn read_settled(path: &Path) -> Result<Option<String>, ConfigError> {
    let before = ConfigStamp::of(path);
    let first = read_config_file(path)?;
    let after = ConfigStamp::of(path);
    if before == after && before.is_none_or(|stamp| !stamp.changed_within(SETTLE_AGE)) {
        return Ok(first);
    }
    std::thread::sleep(REREAD_AFTER);
    let second = read_config_file(path)?;
    if second == first && ConfigStamp::of(path) == after {
        Ok(second)
    } else {
        Err(ConfigError::Changing {
            path: path.to_owned(),
        })
    }
}

/// The value at `parts` (a dotted key, split) under `top`.
fn lookup<'m>(top: &'m Mapping, parts: &[&str]) -> Option<&'m Value> {
    let (first, rest) = parts.split_first()?;
    let value = top.get(*first)?;
    match (rest.is_empty(), value) {
        (true, value) => Some(value),
        (false, Value::Mapping(inner)) => lookup(inner, rest),
        (false, _) => None,
    }
}

/// Sets `value` at `parts` under `top`, making the mappings on the way (a section that is not
/// a mapping is replaced by one).
fn insert_at(top: &mut Mapping, parts: &[&str], value: Value) {
    let Some((first, rest)) = parts.split_first() else {
        return;
    };
    if rest.is_empty() {
        top.insert(Value::from(*first), value);
        return;
    }
    let entry = top
        .entry(Value::from(*first))
        .or_insert_with(|| Value::Mapping(Mapping::new()));
    if !entry.is_mapping() {
        *entry = Value::Mapping(Mapping::new());
    }
    if let Value::Mapping(inner) = entry {
        insert_at(inner, rest, value);
    }
}

/// The dotted keys hermes reads that `top` sets (see [`RawConfig::set_keys`]): keys only
/// upstream reads, and misspelt ones, are no settings of ours to keep.
fn set_keys(top: &Mapping) -> BTreeSet<String> {
    let mut keys = written_keys(top);
    keys.retain(|key| KEYS.iter().any(|spec| spec.key == key));
    keys
}

/// The dotted keys `top` writes in the sections hermes reads.
fn written_keys(top: &Mapping) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    for section in ["model", "auxiliary", "kanban"] {
        let Some(value) = top.get(section).filter(|value| !value.is_null()) else {
            continue;
        };
        let Value::Mapping(entries) = value else {
            keys.insert(section.to_owned());
            continue;
        };
        for (key, value) in entries.iter().filter(|(_, value)| !value.is_null()) {
            let Some(key) = key.as_str() else { continue };
            match value {
                Value::Mapping(own) if section == "auxiliary" && key == "kanban_decomposer" => {
                    keys.extend(
                        own.keys()
                            .filter_map(|k| k.as_str())
                            .map(|k| format!("auxiliary.kanban_decomposer.{k}")),
                    );
                }
                _ => {
                    keys.insert(format!("{section}.{key}"));
                }
            }
        }
    }
    keys
}

/// What identifies one version of `config.yaml` without reading it: the file, its size and
/// its modification and change times. Equal stamps mean the same text (an edit in place or a
/// replacement changes one of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigStamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl ConfigStamp {
    /// Whether the file was changed (its content or its inode) within `age` of now, by the wall
    /// clock (a modification time in the future counts as recent).
    pub fn changed_within(&self, age: Duration) -> bool {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| {
                i128::try_from(since.as_nanos()).unwrap_or(i128::MAX)
            });
        let newest = self.mtime_ns.max(self.ctime_ns);
        now - newest < i128::try_from(age.as_nanos()).unwrap_or(i128::MAX)
    }

    /// The stamp of the file at `path` now (`None` when there is none, or it cannot be told).
    pub fn of(path: &Path) -> Option<ConfigStamp> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(path).ok()?;
        let ns = |secs: i64, nanos: i64| i128::from(secs) * 1_000_000_000 + i128::from(nanos);
        Some(ConfigStamp {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime_ns: ns(meta.mtime(), meta.mtime_nsec()),
            ctime_ns: ns(meta.ctime(), meta.ctime_nsec()),
        })
    }
}

impl Config {
    /// The rules every card's decompose state follows under this configuration: its attempt
    /// budget (`kanban.decompose_max_attempts`) and its backoff after a failure
    /// (`kanban.decompose_backoff_seconds`).
    pub fn card_rules(&self) -> crate::core::CardRules {
        crate::core::CardRules {
            budget: crate::core::CardBudget::new(self.kanban.decompose_max_attempts),
            backoff: crate::core::Backoff::new(self.kanban.decompose_backoff),
        }
    }

    /// The rules every card's spawns follow under this configuration (S1, S3): its budget
    /// (`kanban.failure_limit`) and its backoff after a charged run
    /// (`kanban.spawn_backoff_seconds`). A card's own `max_retries` is applied on top
    /// ([`crate::core::SpawnRules::for_card`]).
    pub fn spawn_rules(&self) -> crate::core::SpawnRules {
        crate::core::SpawnRules {
            budget: crate::core::SpawnBudget::new(self.kanban.failure_limit),
            backoff: crate::core::Backoff::new(self.kanban.spawn_backoff),
        }
    }

    /// Reads `<home>/config.yaml` (see [`read_config_file`], [`read_settled`]); a missing
    /// file means all defaults.
    pub fn load(home: &Home) -> Result<Config, ConfigError> {
        let path = home.config_path();
        match read_settled(&path)? {
            Some(text) => Config::parse(&text, &path),
            None => Ok(Config::default()),
        }
    }

    /// Parses config text; `path` is only used in messages.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        // Before the loader sees it: a deeply nested document costs the loader time in the square
        // of its size (see `nesting`).
        if let Some(deep) = nesting::too_deep(text) {
            return Err(ConfigError::Syntax {
                path: path.to_owned(),
                line: Some(deep.line),
                detail: format!(
                    "nested more than {MAX_NESTING} levels deep; hermes reads no deeper \
                     configuration (nor does upstream write one)"
                ),
            });
        }
        let doc: Value = serde_norway::from_str(text).map_err(|e| ConfigError::Syntax {
            path: path.to_owned(),
            line: e.location().map(|l| l.line()),
            detail: key_shapes(&e.to_string()).into_owned(),
        })?;
        Config::from_document(&doc, path)
    }

    /// `fresh`, a later read of the same file, with every key this config set and `fresh` does
    /// not (`dropped`) kept at this config's value instead of going back to its default: how a
    /// running gateway reads an edit, since a file caught mid-write by an editor writing in place
    /// drops keys too (the kill switch among them), and a key a person meant to reset is named
    /// in a WARN. `path` is only used in messages.
    pub fn keeping(
        &self,
        fresh: &Config,
        dropped: &[String],
        path: &Path,
    ) -> Result<Config, ConfigError> {
        let mut merged = fresh.raw.top.clone();
        for key in dropped {
            let parts: Vec<&str> = key.split('.').collect();
            if let Some(value) = lookup(&self.raw.top, &parts) {
                insert_at(&mut merged, &parts, value.clone());
            }
        }
        Config::from_document(&Value::Mapping(merged), path)
    }

    fn from_document(doc: &Value, path: &Path) -> Result<Config, ConfigError> {
        let reader = Reader {
            path,
            warnings: RefCell::new(Vec::new()),
        };
        let top = match doc {
            Value::Null => return Ok(Config::default()),
            Value::Mapping(m) => m,
            other => {
                return Err(reader.invalid(
                    "(top level)",
                    format!("expected a mapping of sections, got {}", Got(other)),
                ))
            }
        };
        let model = reader.model(top)?;
        let auxiliary = reader.auxiliary(top)?;
        let kanban = reader.kanban(top)?;
        let agent = reader.agent(top)?;
        Ok(Config {
            model,
            auxiliary,
            kanban,
            agent,
            raw: RawConfig {
                top: top.clone(),
                set_keys: set_keys(top),
            },
            warnings: reader.warnings.into_inner(),
        })
    }
}

/// Walks the parsed YAML, turning each key we know into its typed value or a precise error.
struct Reader<'a> {
    path: &'a Path,
    warnings: RefCell<Vec<ConfigWarning>>,
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
    /// An error about `key`: the key and the problem (which may echo the file's text) pass the
    /// shape rule for secrets (`core::redact::key_shapes`), since no key is known yet.
    fn invalid(&self, key: impl Into<String>, problem: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            path: self.path.to_owned(),
            key: key_shapes(&key.into()).into_owned(),
            problem: key_shapes(&problem.into()).into_owned(),
        }
    }

    fn warn(&self, key: impl Into<String>, problem: impl Into<String>) {
        // As `invalid`: a warning names keys and echoes text of the file.
        self.warnings.borrow_mut().push(ConfigWarning::new(
            self.path,
            key_shapes(&key.into()).into_owned(),
            key_shapes(&problem.into()).into_owned(),
        ));
    }

    fn section<'m>(
        &self,
        top: &'m Mapping,
        name: &'static str,
    ) -> Result<Section<'m>, ConfigError> {
        self.section_in(top, name, name)
    }

    /// The mapping under `key` of `parent`, named `name` (dotted) in messages.
    fn section_in<'m>(
        &self,
        parent: &'m Mapping,
        key: &str,
        name: &'static str,
    ) -> Result<Section<'m>, ConfigError> {
        match parent.get(key) {
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
        ModelConfig::read(self, &s)
    }

    fn auxiliary(&self, top: &Mapping) -> Result<AuxiliaryConfig, ConfigError> {
        let s = self.section(top, "auxiliary")?;
        // Checked before any key is read, so that a `kanban_decomposer` that is not a mapping
        // at all is the error reported rather than a wrong value next to it.
        self.decomposer_section(&s)?;
        AuxiliaryConfig::read(self, &s)
    }

    /// `auxiliary.kanban_decomposer`, checked to be a mapping (or absent).
    fn decomposer_section<'m>(&self, auxiliary: &Section<'m>) -> Result<Section<'m>, ConfigError> {
        match auxiliary.map {
            Some(map) => self.section_in(map, "kanban_decomposer", "auxiliary.kanban_decomposer"),
            None => Ok(Section {
                name: "auxiliary.kanban_decomposer",
                map: None,
            }),
        }
    }

    fn kanban(&self, top: &Mapping) -> Result<KanbanConfig, ConfigError> {
        let s = self.section(top, "kanban")?;
        keys::check_kanban(self, &s);
        KanbanConfig::read(self, &s)
    }

    fn agent(&self, top: &Mapping) -> Result<AgentConfig, ConfigError> {
        let s = self.section(top, "agent")?;
        AgentConfig::read(self, &s)
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

    /// A string that may be a secret (an API key): as [`Reader::opt_string`], but an error names
    /// only the kind of value found, never the value.
    fn secret_string(&self, s: &Section, key: &str) -> Result<Option<String>, ConfigError> {
        match s.get(key) {
            None => Ok(None),
            Some(Value::String(v)) => Ok(non_blank(v)),
            Some(other) => Err(self.invalid(
                s.dotted(key),
                format!(
                    "expected a string, got {} (not shown: it may be a secret)",
                    kind_of(other)
                ),
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

    /// A whole number within `spec`'s range (or clamped to it where `spec` says so).
    fn whole(&self, s: &Section, spec: &NumericKey) -> Result<Option<u32>, ConfigError> {
        let Some(v) = s.get(spec.leaf()) else {
            return Ok(None);
        };
        let refuse = || self.invalid(spec.key, format!("{}, got {}", spec.expected(), Got(v)));
        // Integers beyond i64 (YAML allows them) are simply above any range.
        let n: i128 = match (v.as_i64(), v.as_u64()) {
            (Some(n), _) => i128::from(n),
            (None, Some(n)) => i128::from(n),
            (None, None) => return Err(refuse()),
        };
        // Both ends are small whole numbers, so these conversions are exact.
        let (min, max) = (spec.min as i128, spec.max as i128);
        let n = if n < min {
            match spec.below_min {
                Beyond::Refused => return Err(refuse()),
                Beyond::Clamped => min,
            }
        } else if n > max {
            match spec.above_max {
                Beyond::Refused => return Err(refuse()),
                Beyond::Clamped => max,
            }
        } else {
            n
        };
        u32::try_from(n).map(Some).map_err(|_| refuse())
    }

    /// Seconds as an integer or a float within `spec`'s range. NaN, infinities and values
    /// beyond either end are refused, so no later arithmetic on a duration can overflow.
    fn seconds(&self, s: &Section, spec: &NumericKey) -> Result<Option<Duration>, ConfigError> {
        let Some(v) = s.get(spec.leaf()) else {
            return Ok(None);
        };
        let refuse = || self.invalid(spec.key, format!("{}, got {}", spec.expected(), Got(v)));
        let secs = v.as_f64().ok_or_else(refuse)?;
        // NaN fails both comparisons; -0.0 equals 0.0 and counts as zero.
        if !(secs >= spec.min && secs <= spec.max) {
            return Err(refuse());
        }
        let secs = if secs == 0.0 { 0.0 } else { secs };
        Duration::try_from_secs_f64(secs)
            .map(Some)
            .map_err(|_| refuse())
    }
}

fn non_blank(s: &str) -> Option<String> {
    let trimmed = s.trim();
    (!trimmed.is_empty()).then(|| trimmed.to_owned())
}

/// What kind of YAML value this is, without its content.
fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "nothing (null)",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Sequence(_) => "a list",
        Value::Mapping(_) => "a mapping",
        Value::Tagged(_) => "a tagged value",
    }
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

/// What `.env` says: its variables, and a warning per line that had to be skipped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DotEnv {
    pub vars: BTreeMap<String, String>,
    /// `<path>: line N: …; the line is skipped`, in file order.
    pub warnings: Vec<String>,
}

/// Parses `.env` text: `KEY=value` lines, blank lines and `#` comments ignored, an optional
/// `export ` prefix, matching surrounding quotes stripped. Later lines win.
pub fn parse_dotenv(text: &str) -> BTreeMap<String, String> {
    parse_dotenv_bytes(text.as_bytes(), Path::new(".env")).vars
}

/// Parses `.env` line by line: a line that is not UTF-8, has no `=`, or names no usable key is
/// skipped with a warning naming its line number (`path` is only used in the warning), and
/// every other line is kept. One bad byte must not cost the key on the next line.
pub fn parse_dotenv_bytes(bytes: &[u8], path: &Path) -> DotEnv {
    let mut env = DotEnv::default();
    for (index, raw) in bytes.split(|b| *b == b'\n').enumerate() {
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        let skipped = |problem: &str| {
            format!(
                "{}: line {}: {problem}; the line is skipped (the other lines are read)",
                path.display(),
                index + 1
            )
        };
        let Ok(line) = std::str::from_utf8(raw) else {
            env.warnings.push(skipped("not valid UTF-8"));
            continue;
        };
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line
            .strip_prefix("export ")
            .map(str::trim_start)
            .unwrap_or(line);
        let Some((key, value)) = line.split_once('=') else {
            env.warnings.push(skipped("no `=` (expected KEY=value)"));
            continue;
        };
        let key = key.trim();
        if key.is_empty() || key.contains(char::is_whitespace) {
            env.warnings
                .push(skipped("no variable name before `=` (expected KEY=value)"));
            continue;
        }
        env.vars.insert(key.to_owned(), dotenv_value(value.trim()));
    }
    env
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

/// Reads `<home>/.env` as `config.yaml` is read (a regular file of bounded size, never
/// blocking); a missing file yields no variables, an unreadable one a warning.
pub fn read_dotenv(home: &Home) -> DotEnv {
    let path = home.env_path();
    match read_config_bytes(&path) {
        Ok(Some(bytes)) => parse_dotenv_bytes(&bytes, &path),
        Ok(None) => DotEnv::default(),
        Err(e) => DotEnv {
            vars: BTreeMap::new(),
            warnings: vec![format!("{e}; ignored")],
        },
    }
}

/// The provider key: `OPENAI_API_KEY` from the process environment first, else from `.env`.
/// Blank values count as unset.
pub fn api_key(home: &Home) -> Option<String> {
    let from_env = std::env::var("OPENAI_API_KEY").ok();
    api_key_from(from_env, || read_dotenv(home).vars)
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
