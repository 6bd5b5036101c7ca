//! The worker: `hermes [-p PROFILE] chat -q "work kanban task <id>"`, as the gateway starts one
//! for a ready card (upstream's command line). A minimal agent loop on the main model
//! (`model.base_url`, `model.default`, `OPENAI_API_KEY`) with upstream's six kanban tools,
//! working one run of one card: the run the gateway recorded before forking it, named by the
//! environment the gateway gives every worker (`HERMES_KANBAN_TASK`, `HERMES_KANBAN_RUN_ID`,
//! `HERMES_KANBAN_CLAIM_LOCK`, `HERMES_KANBAN_DB`).
//!
//! It runs on the board's home and config, whatever its profile: one board, one provider key,
//! one pause and one ceiling, whichever half spends (contract §7 S4). See `session` for the loop
//! and its bounds, `tools` for what each tool does.

pub mod prompt;
pub mod session;
pub mod tools;

use std::path::PathBuf;

use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;

use crate::aux_client::{AuxClient, AuxSettings, DEFAULT_MAX_BODY_BYTES};
use crate::config::{api_key, Config, Home};
use crate::core::{ProviderFault, RunOutcome, EXIT_PROVIDER_REFUSED, EXIT_RATE_LIMITED};
use crate::output;
use crate::store::{now_ms, BoardError, BoardHandle, RunClose};
use prompt::{opening, PromptCard};
use session::{Finish, Session};
use tools::RunScope;

/// The run a worker was started for, from its environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerEnv {
    pub task_id: String,
    pub run_id: i64,
    pub lease: String,
    /// `HERMES_KANBAN_DB`, else the home's `kanban.db`.
    pub db_path: PathBuf,
    /// `-p`, else `HERMES_PROFILE`.
    pub profile: Option<String>,
}

/// Why a worker could not start its session.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error(
        "hermes chat runs only as a kanban worker the gateway started: {0} is not set (this \
         reference has no interactive chat)"
    )]
    NotAWorker(&'static str),
    #[error("{name} is not a run id: {value:?}")]
    BadRunId { name: &'static str, value: String },
    #[error(transparent)]
    Board(#[from] BoardError),
    #[error("cannot install the {0} handler: {1}")]
    Signal(&'static str, std::io::Error),
}

impl WorkerEnv {
    /// Reads the worker's environment through `var` (`std::env::var` in the product).
    pub fn from_vars(
        var: impl Fn(&str) -> Option<String>,
        home: &Home,
        profile: Option<String>,
    ) -> Result<WorkerEnv, WorkerError> {
        let required = |name: &'static str| {
            var(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
                .ok_or(WorkerError::NotAWorker(name))
        };
        let task_id = required("HERMES_KANBAN_TASK")?;
        let raw_run = required("HERMES_KANBAN_RUN_ID")?;
        let run_id = raw_run.parse().map_err(|_| WorkerError::BadRunId {
            name: "HERMES_KANBAN_RUN_ID",
            value: raw_run.clone(),
        })?;
        let lease = required("HERMES_KANBAN_CLAIM_LOCK")?;
        let db_path = var("HERMES_KANBAN_DB")
            .filter(|v| !v.trim().is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| home.db_path());
        let profile = profile.or_else(|| var("HERMES_PROFILE").filter(|p| !p.trim().is_empty()));
        Ok(WorkerEnv {
            task_id,
            run_id,
            lease,
            db_path,
            profile,
        })
    }
}

/// Runs the worker's session and returns its exit code: 0 once its run's end is recorded (or
/// the run was no longer its own), 75 / 78 after the provider rate-limited / refused it (the
/// board is paused; upstream's codes), 143 when SIGTERM or SIGINT stopped it. An error that
/// keeps it from recording is returned: the process exits 1 and the gateway records the run.
pub async fn run_worker(
    home: &Home,
    config: Config,
    env: WorkerEnv,
    message: String,
) -> Result<u8, WorkerError> {
    let stop = stop_on_signals()?;
    let board = BoardHandle::open(&env.db_path).await?;
    let lease = env.lease.clone();
    let run_id = env.run_id;
    let Some(run) = board.call(move |s| s.worker_run(run_id, &lease)).await? else {
        output::note(&format!(
            "run {} of {} is not open under this worker's claim; nothing to do",
            env.run_id, env.task_id
        ));
        return Ok(0);
    };
    let profile = env
        .profile
        .clone()
        .or(run.profile.clone())
        .unwrap_or_else(|| "default".to_owned());
    let scope = RunScope {
        run_id: env.run_id,
        task_id: run.task_id.clone(),
        lease: env.lease.clone(),
        profile: profile.clone(),
        rules: config.spawn_rules(),
    };
    let client = match main_model(home, &config) {
        Ok(client) => client,
        Err(why) => return cannot_start(&board, &scope, why).await,
    };
    let card = PromptCard {
        task_id: &run.task_id,
        title: &run.title,
        body: run.body.as_deref(),
        profile: &profile,
        max_turns: config.agent.max_turns,
    };
    let session = Session {
        messages: opening(&card, &message),
        board,
        client,
        scope,
        config,
        stop,
        delivered: 0,
    };
    Ok(match session.run().await? {
        Finish::Recorded {
            fault: Some(ProviderFault::RateLimited { .. }),
            ..
        } => exit_code(EXIT_RATE_LIMITED),
        Finish::Recorded { fault: Some(_), .. } => exit_code(EXIT_PROVIDER_REFUSED),
        Finish::Recorded { .. } | Finish::Lost => 0,
        Finish::Stopped => STOPPED,
    })
}

/// The exit code of a worker stopped by a signal it handled: 128 + SIGTERM.
pub const STOPPED: u8 = 143;

fn exit_code(code: i32) -> u8 {
    u8::try_from(code).unwrap_or(1)
}

/// The client for the main model, or why the config cannot route a worker's requests.
fn main_model(home: &Home, config: &Config) -> Result<AuxClient, String> {
    let base_url = config
        .model
        .base_url
        .clone()
        .ok_or("config.yaml names no model.base_url for the worker's requests")?;
    let model = config
        .model
        .default
        .clone()
        .ok_or("config.yaml names no model.default for the worker's requests")?;
    let key = api_key(home);
    if let Some(key) = &key {
        output::register_secret(key);
    }
    output::register_url(&base_url);
    AuxClient::new(AuxSettings {
        base_url,
        model,
        api_key: key,
        timeout: config.auxiliary.timeout,
        max_body_bytes: DEFAULT_MAX_BODY_BYTES,
        temperature: 0.2,
        max_tokens: 4000,
    })
    .map_err(|e| e.to_string())
}

/// A worker that cannot run at all records its run as never started (charged: a worker that
/// cannot start would otherwise be spawned again and again) and exits 1.
async fn cannot_start(
    board: &BoardHandle,
    scope: &RunScope,
    why: String,
) -> Result<u8, WorkerError> {
    output::warning(&format!("the worker cannot start: {why}"));
    let close = RunClose {
        fence: Some(scope.lease.clone()),
        ..RunClose::new(
            scope.run_id,
            RunOutcome::SpawnFailed,
            format!("the worker cannot start: {why}"),
            "worker",
            scope.rules,
            now_ms(),
        )
    };
    board.call(move |s| s.close_run(&close)).await?;
    Ok(1)
}

/// A channel that turns true at the first SIGTERM or SIGINT (handlers installed before any
/// request can leave).
fn stop_on_signals() -> Result<watch::Receiver<bool>, WorkerError> {
    let mut term =
        signal(SignalKind::terminate()).map_err(|e| WorkerError::Signal("SIGTERM", e))?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| WorkerError::Signal("SIGINT", e))?;
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        output::note("stopping: a signal asked this worker to end");
        let _ = tx.send(true);
    });
    Ok(rx)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn the_environment_names_the_run_or_the_worker_refuses_to_start() {
        let home = Home::at("/h");
        let vars: HashMap<&str, &str> = [
            ("HERMES_KANBAN_TASK", "t_0123abcd"),
            ("HERMES_KANBAN_RUN_ID", "12"),
            ("HERMES_KANBAN_CLAIM_LOCK", "lease"),
            ("HERMES_PROFILE", "coder"),
        ]
        .into();
        let read = |vars: &HashMap<&str, &str>| {
            let vars = vars.clone();
            WorkerEnv::from_vars(move |n| vars.get(n).map(|v| (*v).to_owned()), &home, None)
        };
        let env = read(&vars).unwrap();
        assert_eq!((env.run_id, env.profile.as_deref()), (12, Some("coder")));
        assert_eq!(env.db_path, PathBuf::from("/h/kanban.db"));
        let mut bad = vars.clone();
        bad.insert("HERMES_KANBAN_RUN_ID", "twelve");
        assert!(matches!(read(&bad), Err(WorkerError::BadRunId { .. })));
        let mut none = vars.clone();
        none.remove("HERMES_KANBAN_TASK");
        let err = read(&none).unwrap_err();
        assert!(
            err.to_string().contains("HERMES_KANBAN_TASK is not set"),
            "{err}"
        );
        let mut pinned = vars;
        pinned.insert("HERMES_KANBAN_DB", "/elsewhere/kanban.db");
        assert_eq!(
            read(&pinned).unwrap().db_path,
            PathBuf::from("/elsewhere/kanban.db")
        );
    }
}
