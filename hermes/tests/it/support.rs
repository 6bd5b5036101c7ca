//! Shared plumbing on top of the suite's own (`fixtures`: its scratch home, allowlisted
//! environment, CLI runner, gateway guard and waits): the scratch home's calls of `hermes`, the
//! runtime the async library runs on, and the fake provider with the replies these tests need.

use std::ffi::OsStr;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use fixtures::aux_model::{AuxModel, Reply};
use fixtures::cli::CliOutput;
use fixtures::gateway::{Gateway, GatewaySpec};
use fixtures::home::Home;
use fixtures::target::Target;
use serde_json::Value;

/// How long any single CLI call may take before the test gives up on it.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// A throw-away scratch root (fixtures' [`Home`], with nothing in it yet): `HOME`, and
/// `HERMES_HOME=<home>/.hermes`.
pub struct Scratch {
    home: Home,
    /// How many gateways were started here: each gets its own log. (Atomic, so threads can
    /// share one scratch home and call `hermes` at once.)
    gateways: AtomicUsize,
}

/// The `hermes` binary under test.
pub fn reference() -> Target {
    Target::reference(env!("CARGO_BIN_EXE_hermes"))
}

impl Scratch {
    pub fn new() -> Scratch {
        Scratch {
            home: Home::bare(),
            gateways: AtomicUsize::new(0),
        }
    }

    pub fn root(&self) -> &Path {
        self.home.root()
    }

    pub fn home(&self) -> PathBuf {
        self.home.home()
    }

    pub fn hermes_home(&self) -> PathBuf {
        self.home.hermes_home()
    }

    pub fn db(&self) -> PathBuf {
        self.home.db_path()
    }

    /// Replaces `config.yaml` in one step, so a running gateway never reads half a file.
    pub fn write_config(&self, yaml: &str) {
        std::fs::create_dir_all(self.hermes_home()).expect("creating HERMES_HOME");
        self.home.write_config(yaml);
    }

    /// Runs `target ARGS` on the scratch home with fixtures' runner ([`fixtures::cli::run`]: its
    /// own process group, stdin closed, output captured), as fixtures' board does: the suite's
    /// environment (an allowlist, [`fixtures::env::for_target`]) less `unset`, plus `set`.
    ///
    /// # Panics
    /// When the call is still running after `timeout`.
    #[track_caller]
    pub fn call<S: AsRef<OsStr>>(
        &self,
        target: &Target,
        args: &[S],
        unset: &[&str],
        set: &[(&str, &str)],
        timeout: Duration,
    ) -> CliOutput {
        let mut env = fixtures::env::for_target(&self.home, target);
        env.retain(|(name, _)| {
            !unset.iter().any(|unset| name == unset) && !set.iter().any(|(set, _)| name == set)
        });
        env.extend(set.iter().map(|(name, value)| (name.into(), value.into())));
        let args = args.iter().map(|arg| arg.as_ref().to_owned()).collect();
        let out = fixtures::cli::run(target, args, env, self.root(), timeout);
        assert!(!out.timed_out, "did not finish within {timeout:?}:\n{out}");
        out
    }

    /// Runs `hermes ARGS` with the scratch environment less `unset`, plus `set`, checking the
    /// output never carries a panic report.
    #[track_caller]
    pub fn run_env<S: AsRef<OsStr>>(
        &self,
        args: &[S],
        unset: &[&str],
        set: &[(&str, &str)],
    ) -> CliOutput {
        let out = self.call(&reference(), args, unset, set, CALL_TIMEOUT);
        assert_no_panic(&out);
        out
    }

    /// Runs `hermes ARGS`, checking the output never carries a panic report.
    #[track_caller]
    pub fn run<S: AsRef<OsStr>>(&self, args: &[S]) -> CliOutput {
        self.run_env(args, &[], &[])
    }

    /// Runs `hermes ARGS` and requires exit 0.
    #[track_caller]
    pub fn ok<S: AsRef<OsStr>>(&self, args: &[S]) -> CliOutput {
        let out = self.run(args);
        assert!(out.success(), "hermes failed:\n{out}");
        out
    }

    /// Runs `hermes ARGS` (which must include `--json`), requires exit 0, returns the JSON.
    #[track_caller]
    pub fn json<S: AsRef<OsStr>>(&self, args: &[S]) -> Value {
        self.ok(args).json()
    }

    /// Creates a card and returns its id.
    pub fn create(&self, title: &str, extra: &[&str]) -> String {
        let mut args = vec!["kanban", "create", title, "--json"];
        args.extend_from_slice(extra);
        let v = self.json(&args);
        v["id"].as_str().expect("created card has an id").to_owned()
    }
}

#[track_caller]
pub fn assert_no_panic(out: &CliOutput) {
    for marker in ["panicked", "RUST_BACKTRACE", "stack backtrace"] {
        assert!(
            !out.stderr.contains(marker),
            "stderr shows a panic ({marker}):\n{}",
            out.stderr
        );
    }
}

/// A board written by upstream hermes-agent 0.19.0's own CLI (its README lists every row),
/// kept with the tests so they need neither upstream nor anything outside the repository.
pub fn shared_board_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/upstream-0.19.0-board")
}

/// Copies the shared upstream board (and its WAL sidecars) into `dest_dir`, writable.
pub fn copy_upstream_board(dest_dir: &Path) {
    std::fs::create_dir_all(dest_dir).expect("creating the board dir");
    let src = shared_board_dir();
    for name in ["kanban.db", "kanban.db-wal", "kanban.db-shm"] {
        let from = src.join(name);
        if !from.exists() {
            continue;
        }
        let to = dest_dir.join(name);
        std::fs::copy(&from, &to).expect("copying the shared board");
        let mut perms = std::fs::metadata(&to).expect("stat").permissions();
        #[allow(clippy::permissions_set_readonly_false)]
        perms.set_readonly(false);
        std::fs::set_permissions(&to, perms).expect("making the copy writable");
    }
}

/// The suite's fake provider, answering every chat-completions call with `reply` until told
/// otherwise ([`AuxModel::reply_default`], or per card with [`AuxModel::reply`]).
pub fn fake_provider(reply: Reply) -> AuxModel {
    let provider = AuxModel::start();
    provider.reply_default(reply);
    provider
}

/// A chat-completions reply whose content is `content`.
pub fn chat_reply(content: &str) -> Reply {
    Reply::raw(
        200,
        "application/json",
        serde_json::json!({
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 120, "completion_tokens": 30},
        })
        .to_string(),
    )
}

/// A reply that specifies the card as a single task.
pub fn single_task_reply() -> Reply {
    chat_reply(
        r#"{"fanout": false, "rationale": "small", "title": "done", "body": "b", "assignee": "default"}"#,
    )
}

/// An empty reply with HTTP `status`.
pub fn status_reply(status: u16) -> Reply {
    Reply::raw(status, "text/plain", Vec::new())
}

impl Scratch {
    /// `hermes gateway run` (plus `extra_args`) on the scratch home, guarded by fixtures'
    /// [`Gateway`], each start with a log of its own.
    pub fn gateway_spec(&self, extra_args: &[&str]) -> GatewaySpec {
        let target = reference();
        let started = self.gateways.fetch_add(1, Ordering::Relaxed) + 1;
        let mut args = vec!["gateway", "run"];
        args.extend_from_slice(extra_args);
        GatewaySpec::new(
            target.program(),
            target.argv(args),
            self.root(),
            &self.root().join(format!("gateway-{started}.log")),
        )
        .env(fixtures::env::for_target(&self.home, &target))
        .readiness(target.readiness(), target.readiness_timeout())
    }

    /// Starts [`gateway_spec`](Self::gateway_spec) with `env` on top of the scratch
    /// environment, and waits for its "gateway started" line.
    pub fn gateway(&self, extra_args: &[&str], env: &[(&str, &str)]) -> Gateway {
        let spec = env
            .iter()
            .fold(self.gateway_spec(extra_args), |spec, (name, value)| {
                spec.env_var(name, value)
            });
        Gateway::spawn(spec)
    }
}

thread_local! {
    /// The runtime the test's async calls run on: one per test thread, multi-threaded, so a task
    /// spawned on it goes on while the test thread reads the board or the provider's record.
    /// (Connections a client pools belong to the runtime that opened them, so one test keeps
    /// one runtime.) The fake provider runs on a runtime of its own.
    static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime for the test");
}

/// Runs `future` to completion on the test's runtime.
pub fn block_on<F: Future>(future: F) -> F::Output {
    RUNTIME.with(|runtime| runtime.block_on(future))
}

/// Starts `future` on the test's runtime and returns at once.
pub fn spawn<F>(future: F) -> tokio::task::JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    RUNTIME.with(|runtime| runtime.spawn(future))
}
