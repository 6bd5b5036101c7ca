//! What the worker tests share: a scratch board whose gateway spawns workers, the fake
//! provider's answers to a worker's turns (tool calls as a JSON completion or as SSE deltas),
//! stand-in workers through `$HERMES_BIN`, readers of the spawn half's rows, and a census of
//! worker processes that ends every one of them when the test ends, failing or not.

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use fixtures::aux_model::{AuxModel, Reply};
use fixtures::gateway::Gateway;
use rusqlite::{Connection, OpenFlags};
use serde_json::{json, Value};

use crate::support::Scratch;

/// How long any wait of these tests may take before it fails.
pub const WAIT: Duration = Duration::from_secs(30);

/// A board whose gateway spawns workers, its fake provider, and the census of its workers.
pub struct WorkerBoard {
    pub scratch: Scratch,
    pub provider: AuxModel,
    /// The `kanban` settings last written (restored after a tick proof).
    kanban: std::cell::RefCell<String>,
}

impl WorkerBoard {
    /// A board with `kanban` settings on top of a fast tick and no decompose retries.
    pub fn new(kanban: &str) -> WorkerBoard {
        let provider = AuxModel::start();
        let scratch = Scratch::new();
        let board = WorkerBoard {
            scratch,
            provider,
            kanban: std::cell::RefCell::new(String::new()),
        };
        board.configure(kanban);
        board
    }

    /// Rewrites `config.yaml` with these `kanban` settings (one step: a running gateway never
    /// reads half a file).
    pub fn configure(&self, kanban: &str) {
        kanban.clone_into(&mut self.kanban.borrow_mut());
        self.write_config(kanban, "worker-model");
    }

    fn write_config(&self, kanban: &str, model: &str) {
        self.scratch.write_config(&format!(
            "model:\n  base_url: {}\n  default: {model}\n\
             auxiliary:\n  transient_retries: 0\n  timeout_seconds: 10\n\
             kanban:\n  dispatch_interval_seconds: 0.1\n{kanban}",
            self.provider.base_url()
        ));
    }

    /// Proves that the gateway ran two whole ticks from now, whatever the board's pauses and
    /// caps hold back: each tick re-reads `config.yaml` first, and a broken edit is warned
    /// about once per condition while the last good config runs on. Two different breakages,
    /// each awaited, put a whole tick between now and the second warning; the good settings
    /// are written back after.
    pub fn prove_ticks(&self, gateway: &Gateway) {
        let good = self.kanban.borrow().clone();
        for bad in ["7", "8"] {
            // A model named by a number: not a string, so the edit is refused.
            self.write_config(&good, bad);
            let needle =
                format!("expected a string, got {bad}; keeping the last good configuration");
            fixtures::wait::wait_until_or(
                || gateway.log().contains(&needle),
                WAIT,
                "a tick to read the broken config",
                || gateway.tail(),
            );
        }
        self.write_config(&good, "worker-model");
    }

    /// A ready card assigned to `coder`.
    pub fn ready_card(&self, title: &str) -> String {
        self.scratch.create(title, &["--assignee", "coder"])
    }

    /// The gateway, with `env` on top of the scratch environment.
    pub fn gateway(&self, env: &[(&str, &str)]) -> Gateway {
        self.scratch.gateway(&[], env)
    }

    /// The gateway with workers played by a stand-in script (`$HERMES_BIN`).
    pub fn gateway_with(&self, stand_in: &StandIn) -> Gateway {
        let bin = stand_in.path.to_string_lossy().into_owned();
        self.gateway(&[("HERMES_BIN", &bin)])
    }

    pub fn db(&self) -> Connection {
        let conn = Connection::open_with_flags(self.scratch.db(), OpenFlags::SQLITE_OPEN_READ_ONLY)
            .expect("opening the board read-only");
        conn.busy_timeout(Duration::from_secs(5)).unwrap();
        conn
    }

    /// One column of every row a query returns.
    pub fn column<T: rusqlite::types::FromSql>(&self, sql: &str, params: &[&str]) -> Vec<T> {
        let conn = self.db();
        let mut stmt = conn.prepare(sql).expect("a valid query");
        let rows = stmt
            .query_map(rusqlite::params_from_iter(params), |r| r.get(0))
            .expect("a readable board");
        rows.collect::<Result<_, _>>().expect("readable rows")
    }

    pub fn status(&self, card: &str) -> String {
        self.column("SELECT status FROM tasks WHERE id = ?1", &[card])
            .pop()
            .unwrap_or_default()
    }

    /// The card's runs' outcomes, oldest first (`running` while one is open).
    pub fn run_outcomes(&self, card: &str) -> Vec<String> {
        self.column(
            "SELECT COALESCE(outcome, status) FROM task_runs WHERE task_id = ?1 ORDER BY id",
            &[card],
        )
    }

    /// How many of the card's events are of `kind`.
    pub fn events(&self, card: &str, kind: &str) -> usize {
        self.column::<i64>(
            "SELECT COUNT(*) FROM task_events WHERE task_id = ?1 AND kind = ?2",
            &[card, kind],
        )[0] as usize
    }

    /// Workers the board counts as live: open spawn-ledger rows.
    pub fn live_rows(&self) -> usize {
        self.column::<i64>(
            "SELECT COUNT(*) FROM hermes_spawn_ledger WHERE exited_at_ms IS NULL",
            &[],
        )[0] as usize
    }

    /// Every worker pid the spawn ledger recorded.
    pub fn worker_pids(&self) -> Vec<u32> {
        self.column::<Option<i64>>("SELECT pid FROM hermes_spawn_ledger ORDER BY run_id", &[])
            .into_iter()
            .flatten()
            .filter_map(|pid| u32::try_from(pid).ok())
            .collect()
    }

    /// A census of this board's workers: every pid its spawn ledger records, and `stand_in`'s.
    pub fn census(&self, stand_in: Option<&StandIn>) -> Census {
        let mut census = Census::default();
        let db = self.scratch.db();
        census.watch(move || {
            let Ok(conn) = Connection::open_with_flags(&db, OpenFlags::SQLITE_OPEN_READ_ONLY)
            else {
                return Vec::new();
            };
            let _ = conn.busy_timeout(Duration::from_secs(5));
            let Ok(mut stmt) = conn.prepare("SELECT pid FROM hermes_spawn_ledger") else {
                return Vec::new();
            };
            stmt.query_map([], |r| r.get::<_, Option<i64>>(0))
                .map(|rows| {
                    rows.flatten()
                        .flatten()
                        .filter_map(|pid| u32::try_from(pid).ok())
                        .collect()
                })
                .unwrap_or_default()
        });
        if let Some(stand_in) = stand_in {
            let pids = stand_in.pids.clone();
            census.watch(move || {
                std::fs::read_to_string(&pids)
                    .unwrap_or_default()
                    .split_whitespace()
                    .filter_map(|pid| pid.parse().ok())
                    .collect()
            });
        }
        census
    }

    /// Answer every turn of `card`'s workers with `reply` (the provider's worker script, one
    /// reply repeating).
    pub fn answer(&self, card: &str, reply: Reply) {
        self.provider.worker_reply(card, vec![reply]);
    }

    /// The worker turns the provider received for `card`, in arrival order.
    pub fn turns(&self, card: &str) -> Vec<Value> {
        self.provider
            .agent_requests()
            .into_iter()
            .filter(|body| fixtures::aux_model::worker_task_of(body).as_deref() == Some(card))
            .collect()
    }

    /// Sessions the provider saw for `card`: first turns (system and user message only).
    pub fn sessions(&self, card: &str) -> usize {
        self.turns(card)
            .iter()
            .filter(|body| body["messages"].as_array().is_some_and(|m| m.len() == 2))
            .count()
    }

    /// `hermes kanban usage --json`.
    pub fn usage(&self) -> Value {
        self.scratch.json(&["kanban", "usage", "--json"])
    }
}

/// A reply whose one tool call is `name` with `arguments`, as a JSON completion.
pub fn tool_call(name: &str, arguments: Value) -> Reply {
    let body = json!({
        "id": "chatcmpl-worker",
        "object": "chat.completion",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": null,
            "tool_calls": [{"id": "call_1", "type": "function",
                            "function": {"name": name, "arguments": arguments.to_string()}}],
        }}],
        "usage": {"prompt_tokens": 200, "completion_tokens": 20},
    });
    Reply::raw(200, "application/json", body.to_string())
}

/// The same tool call as an SSE stream of deltas, its arguments cut into pieces.
pub fn streamed_tool_call(name: &str, arguments: Value) -> Reply {
    let text = arguments.to_string();
    let (first, rest) = text.split_at(text.len() / 2);
    let event = |delta: Value| {
        format!(
            "data: {}\n\n",
            json!({"object": "chat.completion.chunk",
                   "choices": [{"index": 0, "delta": delta, "finish_reason": null}]})
        )
    };
    let body = [
        event(json!({"role": "assistant", "content": null})),
        event(json!({"tool_calls": [{"index": 0, "id": "call_s", "type": "function",
                                     "function": {"name": name, "arguments": first}}]})),
        event(json!({"tool_calls": [{"index": 0, "function": {"arguments": rest}}]})),
        "data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\
         \"finish_reason\":\"tool_calls\"}],\"usage\":{\"prompt_tokens\":210,\"completion_tokens\":9}}\n\n"
            .to_owned(),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat();
    Reply::raw(200, "text/event-stream", body)
}

/// `kanban_complete` with a summary.
pub fn complete() -> Reply {
    tool_call("kanban_complete", json!({"summary": "done by the worker"}))
}

/// `kanban_block` of `kind`.
pub fn block(kind: &str) -> Reply {
    tool_call("kanban_block", json!({"reason": "stuck", "kind": kind}))
}

/// A worker played by a shell script (`$HERMES_BIN`): what a real worker cannot be driven
/// into (an exit code, ignoring SIGTERM, a grandchild, running on). Each start appends its pid
/// (and its grandchild's) to `pids`, and the census ends them all when the test ends.
pub struct StandIn {
    pub path: PathBuf,
    pub pids: PathBuf,
}

impl StandIn {
    /// A stand-in running `body` (sh), after recording `$$`. `$PIDS` names the pid file,
    /// `$HERMES_KANBAN_TASK` and the rest of a worker's environment are set.
    pub fn new(dir: &Path, body: &str) -> StandIn {
        let path = dir.join("stand-in.sh");
        let pids = dir.join("stand-in.pids");
        let script = format!(
            "#!/bin/sh\nPIDS='{}'\necho $$ >> \"$PIDS\"\n{body}\n",
            pids.display()
        );
        std::fs::write(&path, script).expect("writing the stand-in");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
            .expect("making the stand-in executable");
        StandIn { path, pids }
    }

    /// Every pid the stand-ins recorded.
    pub fn pids(&self) -> Vec<u32> {
        std::fs::read_to_string(&self.pids)
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|pid| pid.parse().ok())
            .collect()
    }
}

/// Whether `pid` names a running process (a zombie has exited).
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rfind(')')
            .and_then(|end| stat[end + 1..].split_whitespace().next())
            .is_some_and(|state| !matches!(state, "Z" | "X"))
    })
}

/// Ends every process it was told of when dropped: no worker outlives its test.
#[derive(Default)]
pub struct Census {
    sources: Vec<Box<dyn Fn() -> Vec<u32>>>,
}

impl Census {
    /// Counts the processes `pids` names from now on.
    pub fn watch(&mut self, pids: impl Fn() -> Vec<u32> + 'static) {
        self.sources.push(Box::new(pids));
    }

    /// The watched processes still running.
    pub fn alive(&self) -> BTreeSet<u32> {
        self.sources
            .iter()
            .flat_map(|pids| pids())
            .filter(|pid| alive(*pid))
            .collect()
    }
}

impl Drop for Census {
    fn drop(&mut self) {
        for pid in self.alive() {
            if let Ok(pid) = i32::try_from(pid) {
                // Its group first (a worker leads one), then itself.
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
}
