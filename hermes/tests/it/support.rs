//! Shared plumbing: a scratch home with a clean environment, a runner that captures output and
//! never waits forever, a gateway guard, the runtime the async library runs on, and the suite's
//! fake provider with the replies these tests need.

use std::ffi::OsStr;
use std::future::Future;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fixtures::aux_model::{AuxModel, Reply};
use serde_json::Value;

/// How long any single CLI call may take before the test gives up on it.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// What one process run produced.
#[derive(Debug)]
pub struct Out {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Out {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    /// The message of the error that ended the run: under `--json` the `error` of the JSON object
    /// that is stderr's last line, else stderr as it is.
    pub fn error(&self) -> String {
        let last = self.stderr.lines().last().unwrap_or_default();
        match serde_json::from_str::<Value>(last) {
            Ok(Value::Object(error)) => match error.get("error") {
                Some(Value::String(message)) => message.clone(),
                _ => panic!("a JSON error without a message: {last}"),
            },
            _ => self.stderr.clone(),
        }
    }

    /// Stdout parsed as exactly one JSON document (nothing else may be printed there).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}):\n{}", self.stdout))
    }
}

/// Removes everything from the inherited environment that could point a test at a real board
/// or a real provider.
pub fn scrub(cmd: &mut Command) {
    for (key, _) in std::env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        if key.starts_with("HERMES_") || key.ends_with("_API_KEY") || key.ends_with("_TOKEN") {
            cmd.env_remove(key);
        }
    }
    cmd.env_remove("HOME");
}

/// Runs `cmd` to completion with a deadline, capturing stdout and stderr.
pub fn run_command(mut cmd: Command, timeout: Duration) -> Out {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {cmd:?}: {e}"));
    let mut stdout_pipe = child.stdout.take().expect("stdout is piped");
    let mut stderr_pipe = child.stderr.take().expect("stderr is piped");
    let stdout_reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = stdout_pipe.read_to_end(&mut s);
        s
    });
    let stderr_reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = stderr_pipe.read_to_end(&mut s);
        s
    });
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for the child") {
            break status;
        }
        if started.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} did not finish within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let elapsed = started.elapsed();
    let stdout =
        String::from_utf8_lossy(&stdout_reader.join().expect("stdout reader")).into_owned();
    let stderr =
        String::from_utf8_lossy(&stderr_reader.join().expect("stderr reader")).into_owned();
    Out {
        code: status.code(),
        stdout,
        stderr,
        elapsed,
    }
}

/// A throw-away `HOME` with `HERMES_HOME=<home>/.hermes`.
pub struct Scratch {
    pub dir: tempfile::TempDir,
}

impl Scratch {
    pub fn new() -> Scratch {
        Scratch {
            dir: tempfile::tempdir().expect("a temp dir"),
        }
    }

    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    pub fn hermes_home(&self) -> PathBuf {
        self.home().join(".hermes")
    }

    pub fn db(&self) -> PathBuf {
        self.hermes_home().join("kanban.db")
    }

    /// Replaces `config.yaml` in one step (write aside, rename), so a running gateway never
    /// reads half a file.
    pub fn write_config(&self, yaml: &str) {
        std::fs::create_dir_all(self.hermes_home()).expect("creating HERMES_HOME");
        let aside = self.hermes_home().join(".config.yaml.new");
        std::fs::write(&aside, yaml).expect("writing config.yaml");
        std::fs::rename(&aside, self.hermes_home().join("config.yaml"))
            .expect("replacing config.yaml");
    }

    /// The `hermes` binary under test with the scratch environment.
    pub fn command<S: AsRef<OsStr>>(&self, args: &[S]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_hermes"));
        scrub(&mut cmd);
        cmd.args(args)
            .current_dir(self.dir.path())
            .env("HOME", self.home())
            .env("HERMES_HOME", self.hermes_home())
            .env("HERMES_GATEWAY_LOCK_DIR", self.dir.path().join("gw-locks"))
            .env("NO_COLOR", "1")
            .env("TERM", "dumb");
        cmd
    }

    /// Runs `hermes ARGS`, checking the output never carries a panic report.
    pub fn run<S: AsRef<OsStr>>(&self, args: &[S]) -> Out {
        let out = run_command(self.command(args), CALL_TIMEOUT);
        assert_no_panic(&out);
        out
    }

    /// Runs `hermes ARGS` and requires exit 0.
    pub fn ok<S: AsRef<OsStr>>(&self, args: &[S]) -> Out {
        let out = self.run(args);
        assert!(
            out.success(),
            "hermes {:?} failed: {out:#?}",
            args.iter()
                .map(|a| a.as_ref().to_owned())
                .collect::<Vec<_>>()
        );
        out
    }

    /// Runs `hermes ARGS` (which must include `--json`), requires exit 0, returns the JSON.
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

pub fn assert_no_panic(out: &Out) {
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

/// A running `hermes gateway run`, its stderr collected line by line. Stopped with SIGTERM by
/// [`Gateway::stop`], or killed when dropped.
pub struct Gateway {
    pub child: std::process::Child,
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Scratch {
    /// Starts `hermes gateway run` (plus `extra_args`) with `env` on top of the scratch
    /// environment, and waits for its "gateway started" line.
    pub fn gateway(&self, extra_args: &[&str], env: &[(&str, &str)]) -> Gateway {
        let mut args = vec!["gateway", "run"];
        args.extend_from_slice(extra_args);
        let mut cmd = self.command(&args);
        for (key, value) in env {
            cmd.env(key, value);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawning the gateway");
        let stderr = child.stderr.take().expect("stderr is piped");
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = lines.clone();
        let reader = std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                sink.lock().expect("the log lock").push(line);
            }
        });
        let gateway = Gateway {
            child,
            lines,
            reader: Some(reader),
        };
        gateway.wait_for(Duration::from_secs(30), |l| l.contains("gateway started"));
        gateway
    }
}

impl Gateway {
    /// Every stderr line so far.
    pub fn log(&self) -> Vec<String> {
        self.lines.lock().expect("the log lock").clone()
    }

    /// Waits until a stderr line satisfies `found`, and returns it.
    pub fn wait_for(&self, timeout: Duration, found: impl Fn(&str) -> bool) -> String {
        wait_until(timeout, || self.log().into_iter().find(|l| found(l))).unwrap_or_else(|| {
            panic!(
                "no such gateway log line in {timeout:?}:\n{}",
                self.log().join("\n")
            )
        })
    }

    /// SIGTERM, then the exit code and the whole log once the process is gone.
    pub fn stop(mut self) -> (Option<i32>, Vec<String>) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let status = wait_until(Duration::from_secs(20), || {
            self.child.try_wait().ok().flatten()
        });
        let code = match status {
            Some(status) => status.code(),
            None => {
                let _ = self.child.kill();
                panic!(
                    "the gateway ignored SIGTERM for 20 s:\n{}",
                    self.log().join("\n")
                );
            }
        };
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        (code, self.log())
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Polls `probe` every 20 ms until it yields something or `timeout` passes.
pub fn wait_until<T>(timeout: Duration, mut probe: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(found) = probe() {
            return Some(found);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
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
