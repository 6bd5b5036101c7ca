//! `hermes gateway check`: what `gateway run` would bill, and whether it would start, without
//! spending anything. It reads `config.yaml`, `.env` and the board (opened so that nothing is
//! written, see `store::census`), looks at the gateway's lock without taking it, and sends one
//! free request, `GET {base_url}/models`; never a chat completion.

mod probe;
mod render;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use serde::Serialize;

use super::{CliError, Context, Outcome};
use crate::config::{read_config_file, Config, Home, InForce, WrittenKeys};
use crate::decompose::attempt::AttemptContext;
use crate::decompose::roster;
use crate::dispatch::{dispatcher_locks_held, may_access, may_create, LockProbe, SingletonLock};
use crate::output;
use crate::store::{census, Census};

pub use probe::{models_url, ProbeOutcome, ProviderAnswer, PROBE_TIMEOUT};

/// Arguments of `gateway check`.
#[derive(Debug, Args)]
#[command(after_help = "\
Prints where decompose calls go (endpoint, model, where the key comes from; never the key), \
every bound in force and where its value came from (its default, config.yaml, or an upstream \
key standing in for it), the board's triage cards by what the next tick would do with them, the \
board-wide pause and the calls of the last hour, and the gateway's lock. It asks the provider one \
free question, GET {base_url}/models, with the key a decompose call would carry (at most 5 s; \
--offline skips it): nothing is billed, the board is opened without writing (a missing board is \
reported, not created), and the lock is looked at, not taken.
With --json: one object with the same content (`would_start`, `refusals`, `warnings`, `config`, \
`route`, `provider`, `bounds`, `board`, `lock`).")]
pub struct CheckArgs {
    /// Send no request at all: the provider is not asked.
    #[arg(long)]
    pub offline: bool,
}

/// Everything the check found.
#[derive(Debug, Serialize)]
pub struct Report {
    /// Whether `gateway run` would start now.
    pub would_start: bool,
    /// Why it would not (each as `gateway run` would say it).
    pub refusals: Vec<String>,
    /// What would not stop it but limits or spoils what it bills.
    pub warnings: Vec<String>,
    pub home: PathBuf,
    pub config: ConfigReport,
    /// Where decompose calls go (the gateway's and `kanban decompose`'s alike), when the
    /// config can route them.
    pub route: Option<Route>,
    /// How the provider answered the free request (`None`: not asked).
    pub provider: Option<ProviderAnswer>,
    pub bounds: Vec<Bound>,
    pub board: BoardReport,
    pub lock: LockReport,
}

/// `config.yaml` and `.env`.
#[derive(Debug, Serialize)]
pub struct ConfigReport {
    pub path: PathBuf,
    /// The file exists (without it every setting is at its default).
    pub found: bool,
    /// Why it cannot be used (the gateway would refuse to start).
    pub error: Option<String>,
    /// What was ignored but looks like a mistake (`config.yaml`, `.env`).
    pub warnings: Vec<String>,
    pub dispatch_in_gateway: bool,
    pub auto_decompose: bool,
}

/// Where decompose calls go.
#[derive(Debug, Serialize)]
pub struct Route {
    /// The URL every decompose request is POSTed to, as it may be shown.
    pub endpoint: String,
    pub model: String,
    /// Where the key comes from (never the key).
    pub api_key_from: String,
    /// No credentials at all: requests would go without an `Authorization` header.
    pub unauthorized: bool,
    /// The proxy every decompose request (and the free one) goes through, as it may be shown;
    /// `None` when they go direct.
    pub proxy: Option<String>,
    /// The fields `extra_body` adds to every request (their names; values may be private).
    pub extra_body_fields: Vec<String>,
}

/// One bound in force.
#[derive(Debug, Serialize)]
pub struct Bound {
    pub key: &'static str,
    pub value: serde_json::Value,
    #[serde(skip)]
    pub seconds: bool,
    /// `default`, `file` or `upstream_key`.
    pub source: &'static str,
    /// The upstream key the value came from, with `upstream_key`.
    pub source_key: Option<&'static str>,
}

/// The board the gateway dispatches.
#[derive(Debug, Serialize)]
pub struct BoardReport {
    pub path: PathBuf,
    pub exists: bool,
    /// The schema is this build's (`false`: the gateway completes it when it opens the board).
    pub schema_current: Option<bool>,
    pub triage: Option<TriageReport>,
    /// Cards the next tick attempts at most (`kanban.auto_decompose_per_tick`).
    pub per_tick: u32,
    /// The board-wide pause in force.
    pub paused_until: Option<f64>,
    pub pause_reason: Option<String>,
    pub calls_last_hour: Option<u64>,
    pub calls_per_hour: u32,
    /// Upstream's other boards in this home, which this gateway does not dispatch.
    pub not_dispatched: Vec<PathBuf>,
}

/// Triage cards by what the next tick would do with them.
#[derive(Debug, Serialize)]
pub struct TriageReport {
    pub due: u64,
    pub waiting: u64,
    pub in_flight: u64,
    pub parked: u64,
    pub held: u64,
}

/// The gateway's singleton lock, and the dispatcher locks others hold.
#[derive(Debug, Serialize)]
pub struct LockReport {
    pub path: Option<PathBuf>,
    /// `free`, `held`, `unusable`, or `not_needed` (no dispatcher).
    pub state: &'static str,
    pub holder: Option<u32>,
    /// Dispatcher locks on the board some process holds now.
    pub dispatcher_locks_held: Vec<HeldLock>,
}

/// A dispatcher lock another process holds.
#[derive(Debug, Serialize)]
pub struct HeldLock {
    pub path: PathBuf,
    pub pid: u32,
}

/// Runs the check; exit 0 when `gateway run` would start, 1 when it would refuse.
pub fn run(ctx: &Context, args: &CheckArgs) -> Result<Outcome, CliError> {
    let report = gather(&ctx.home, args.offline)?;
    if ctx.json {
        let value = serde_json::to_value(&report).map_err(anyhow::Error::from)?;
        ctx.print_json(&value)?;
    } else {
        ctx.print(&render::text(&report))?;
    }
    Ok(if report.would_start {
        Outcome::Success
    } else {
        Outcome::Failure
    })
}

/// What the configuration says, read as `gateway run` reads it.
struct Loaded {
    config: Option<Config>,
    report: ConfigReport,
    written: WrittenKeys,
}

fn gather(home: &Home, offline: bool) -> Result<Report, CliError> {
    let loaded = load_config(home);
    let config = loaded.config.clone().unwrap_or_default();
    let mut refusals: Vec<String> = loaded.report.error.iter().cloned().collect();
    let mut warnings = Vec::new();
    let (route, endpoint) = route(home, &config, loaded.config.is_some(), &mut warnings);
    let provider = match (&endpoint, offline) {
        (Some(endpoint), false) => Some(ask_provider(endpoint)?),
        _ => None,
    };
    let bounds = if loaded.config.is_some() {
        config
            .bounds_in_force(&loaded.written)
            .into_iter()
            .map(bound)
            .collect()
    } else {
        Vec::new()
    };
    let now = crate::clock::now_ms();
    let dispatching = config.kanban.dispatch_in_gateway;
    let (board, board_refusal) = board(home, &config, now);
    refusals.extend(board_refusal);
    let lock = lock(home, dispatching, &mut refusals);
    let mut report = Report {
        would_start: refusals.is_empty(),
        refusals,
        warnings: Vec::new(),
        home: home.root().to_owned(),
        config: loaded.report,
        route,
        provider,
        bounds,
        board,
        lock,
    };
    warnings.extend(render::warnings(&report));
    report.warnings = warnings;
    Ok(report)
}

fn load_config(home: &Home) -> Loaded {
    let path = home.config_path();
    let (text, error) = match read_config_file(&path) {
        Ok(text) => (text, None),
        Err(e) => (None, Some(e.to_string())),
    };
    let found = text.is_some() || error.is_some();
    let parsed = match (&text, error) {
        (_, Some(error)) => Err(error),
        (Some(text), None) => Config::parse(text, &path).map_err(|e| e.to_string()),
        (None, None) => Ok(Config::default()),
    };
    let written = text.as_deref().map(WrittenKeys::of).unwrap_or_default();
    let (config, error) = match parsed {
        Ok(config) => {
            output::register_config(&config);
            (Some(config), None)
        }
        Err(error) => (None, Some(error)),
    };
    let defaults = Config::default();
    let shown = config.as_ref().unwrap_or(&defaults);
    Loaded {
        report: ConfigReport {
            path,
            found,
            error,
            warnings: shown.warnings.iter().map(ToString::to_string).collect(),
            dispatch_in_gateway: shown.kanban.dispatch_in_gateway,
            auto_decompose: shown.kanban.auto_decompose,
        },
        config,
        written,
    }
}

/// Where decompose calls go, as the gateway would announce it, and the resolved endpoint the
/// free request uses (with its key).
fn route(
    home: &Home,
    config: &Config,
    usable: bool,
    warnings: &mut Vec<String>,
) -> (Option<Route>, Option<crate::config::DecomposerEndpoint>) {
    if !usable {
        return (None, None);
    }
    let context = AttemptContext::from_config(
        Arc::new(config.clone()),
        home,
        roster(home, config),
        home.db_path(),
    );
    let context = match context {
        Ok(context) => context,
        Err(e) => {
            warnings.push(e.cannot_run());
            return (None, None);
        }
    };
    warnings.extend(context.warnings.iter().cloned());
    let billing = context.billing();
    warnings.extend(billing.no_key_warning());
    let endpoint = config.decomposer_endpoint(home).ok();
    let route = Route {
        endpoint: billing.endpoint,
        model: billing.model,
        api_key_from: billing.key,
        unauthorized: billing.unauthorized,
        proxy: context.client.shown_proxy().map(str::to_owned),
        extra_body_fields: config
            .auxiliary
            .kanban_decomposer
            .extra_body
            .keys()
            .cloned()
            .collect(),
    };
    (Some(route), endpoint)
}

fn ask_provider(endpoint: &crate::config::DecomposerEndpoint) -> Result<ProviderAnswer, CliError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow::anyhow!("cannot start the async runtime: {e}"))?;
    Ok(runtime.block_on(probe::list_models(endpoint)))
}

fn bound(bound: InForce) -> Bound {
    use crate::config::Source;
    let (source, source_key) = match bound.source {
        Source::Default => ("default", None),
        Source::File => ("file", None),
        Source::UpstreamKey(key) => ("upstream_key", Some(key)),
    };
    Bound {
        key: bound.key,
        value: bound.value,
        seconds: bound.seconds,
        source,
        source_key,
    }
}

/// The board as `gateway run` would find it, and why it could not use it, if it could not.
fn board(home: &Home, config: &Config, now_ms: i64) -> (BoardReport, Option<String>) {
    let path = home.db_path();
    let mut report = BoardReport {
        exists: path.exists(),
        schema_current: None,
        triage: None,
        per_tick: config.kanban.auto_decompose_per_tick,
        paused_until: None,
        pause_reason: None,
        calls_last_hour: None,
        calls_per_hour: config.kanban.decompose_calls_per_hour,
        not_dispatched: upstream_boards(home.root()),
        path: path.clone(),
    };
    if let Some(why) = board_unusable(&path) {
        return (report, Some(why));
    }
    if !report.exists {
        return (report, None);
    }
    match census(&path, now_ms) {
        Ok(found) => {
            fill_census(&mut report, found);
            (report, None)
        }
        Err(e) => (report, Some(e.to_string())),
    }
}

fn fill_census(report: &mut BoardReport, found: Census) {
    let t = found.triage;
    report.schema_current = Some(found.schema_current);
    report.triage = Some(TriageReport {
        due: t.due,
        waiting: t.waiting,
        in_flight: t.in_flight,
        parked: t.parked,
        held: t.held,
    });
    report.calls_last_hour = Some(found.calls_last_hour);
    if let Some(pause) = found.pause {
        report.paused_until = Some(pause.until_ms as f64 / 1000.0);
        report.pause_reason = Some(pause.reason);
    }
}

/// Why `gateway run` could not open (or create) the board at `path` for writing.
fn board_unusable(path: &Path) -> Option<String> {
    let Ok(meta) = std::fs::metadata(path) else {
        return may_create(path)
            .err()
            .map(|e| format!("cannot create the board at {}: {e}", path.display()));
    };
    if meta.is_dir() {
        return Some(format!("{} is a directory, not a board", path.display()));
    }
    use std::os::unix::fs::MetadataExt;
    // Every open refuses a board with a second name, whether the gateway dispatches or not.
    if meta.nlink() > 1 {
        return Some(
            crate::store::StoreError::HardLinked {
                path: path.to_owned(),
                links: meta.nlink(),
            }
            .to_string(),
        );
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    may_access(path, libc::R_OK | libc::W_OK)
        .and_then(|()| may_access(dir, libc::W_OK | libc::X_OK))
        .err()
        .map(|e| format!("cannot write the board at {}: {e}", path.display()))
}

/// Upstream's named boards (`<home>/kanban/boards/<slug>/kanban.db`): an upstream gateway
/// dispatches them all, this one only `<home>/kanban.db`.
fn upstream_boards(root: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(root.join("kanban").join("boards")) else {
        return Vec::new();
    };
    let mut boards: Vec<PathBuf> = entries
        .flatten()
        .map(|entry| entry.path().join("kanban.db"))
        .filter(|db| db.is_file())
        .collect();
    boards.sort();
    boards
}

/// The singleton lock as `gateway run` would find it (a refusal when it is taken).
fn lock(home: &Home, dispatching: bool, refusals: &mut Vec<String>) -> LockReport {
    let db = home.db_path();
    let held: Vec<HeldLock> = dispatcher_locks_held(&db)
        .into_iter()
        .map(|(path, pid)| HeldLock { path, pid })
        .collect();
    if !dispatching {
        return LockReport {
            path: None,
            state: "not_needed",
            holder: None,
            dispatcher_locks_held: held,
        };
    }
    let probe = SingletonLock::probe(home.lock_dir(), &db);
    let (path, state, holder) = match &probe {
        LockProbe::Free { path } => (path.clone(), "free", None),
        LockProbe::Held { path, holder, .. } => (path.clone(), "held", *holder),
        LockProbe::Unusable { path, .. } => (path.clone(), "unusable", None),
    };
    if let Some(refusal) = probe.refusal() {
        refusals.push(refusal.to_string());
    }
    LockReport {
        path: Some(path),
        state,
        holder,
        dispatcher_locks_held: held,
    }
}
