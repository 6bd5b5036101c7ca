//! `cargo planted`: how many realistic bugs the conformance suite catches.
//!
//! Each file in `tools/planted/*.patch` is one bug a developer could really write in the
//! reference gateway (multi-line, semantic, anywhere in `hermes/src`), with a header before its
//! diff that says what it breaks:
//!
//! ```text
//! Bug: an unpark gives every parked card a fresh budget, not only the one named
//! Bound: B1
//! ```
//!
//! The harness checks out the current commit into a scratch work tree (`target/planted/tree`,
//! with its own target directory, so the bugs build incrementally and the developer's tree is
//! never touched), runs the suite crates once clean (they must pass, or no score means
//! anything), then plants each bug in turn, runs `cli-tests` and `gateway-tests` (and the
//! explorer's CI seeds, unless `--no-explore`), and reverts it. A bug is caught when any test
//! (or the explorer) fails with it planted. The table goes to stdout and
//! `target/planted/report.json`.
//!
//! ```sh
//! cargo planted                 # every bug (about two to three minutes each on two cores)
//! cargo planted --list          # the bugs and what each breaks
//! cargo planted --only unpark   # the bugs whose file name contains `unpark`
//! ```

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context as _};
use clap::Parser;
use serde::Serialize;

use tools::workspace::Workspace;

#[derive(Debug, Parser)]
#[command(
    about = "Plant each realistic bug in tools/planted/ and count the ones the suite catches"
)]
struct Args {
    /// Only the bugs whose file name contains one of these (`--only unpark,ceiling`).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// List the bugs and exit.
    #[arg(long)]
    list: bool,
    /// Run only the suite crates' tests, not the explorer's CI seeds.
    #[arg(long)]
    no_explore: bool,
    /// Skip the clean baseline run (it must pass for the score to mean anything).
    #[arg(long)]
    no_baseline: bool,
}

/// One planted bug, as its file describes it.
#[derive(Debug, Clone, Serialize)]
struct Bug {
    name: String,
    what: String,
    bound: String,
    files: Vec<String>,
    #[serde(skip)]
    path: PathBuf,
}

/// How one bug fared.
#[derive(Debug, Clone, Serialize)]
struct Outcome {
    bug: Bug,
    /// `caught`, `missed`, or `did not apply` / `did not build`.
    verdict: String,
    /// The tests that failed with it planted (the first few).
    failed: Vec<String>,
    seconds: f64,
}

fn main() -> std::process::ExitCode {
    match run(Args::parse()) {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::from(1),
        Err(error) => {
            eprintln!("planted: error: {error:#}");
            std::process::ExitCode::from(2)
        }
    }
}

fn run(args: Args) -> anyhow::Result<bool> {
    let ws = Workspace::locate()?;
    let mut bugs = read_bugs(&ws.root.join("tools").join("planted"))?;
    if !args.only.is_empty() {
        bugs.retain(|bug| {
            args.only
                .iter()
                .any(|only| bug.name.contains(only.as_str()))
        });
    }
    if args.list || bugs.is_empty() {
        for bug in &bugs {
            println!(
                "{:<44} {:<6} {}  [{}]",
                bug.name,
                bug.bound,
                bug.what,
                bug.files.join(", ")
            );
        }
        if bugs.is_empty() {
            bail!("no bug matches");
        }
        return Ok(true);
    }
    let out = ws.target_dir.join("planted");
    let tree = out.join("tree");
    let target = out.join("target");
    prepare_tree(&ws, &tree)?;
    if !args.no_baseline {
        eprintln!("planted: the clean tree first (it must pass)");
        let (failed, _) = run_suite(&ws, &tree, &target, !args.no_explore)?;
        if !failed.is_empty() {
            bail!(
                "the clean tree fails {} test(s) ({}): no bug count means anything until it passes",
                failed.len(),
                failed.join(", ")
            );
        }
    }
    let mut outcomes = Vec::new();
    for (index, bug) in bugs.iter().enumerate() {
        eprintln!(
            "planted: [{}/{}] {} — {}",
            index + 1,
            bugs.len(),
            bug.name,
            bug.what
        );
        outcomes.push(try_bug(&ws, &tree, &target, bug, !args.no_explore)?);
    }
    let caught = outcomes.iter().filter(|o| o.verdict == "caught").count();
    let counted = outcomes
        .iter()
        .filter(|o| o.verdict == "caught" || o.verdict == "missed")
        .count();
    let summary = format!(
        "{}\ncaught {caught} of {counted} ({:.0} %)\n",
        table(&outcomes),
        100.0 * caught as f64 / counted.max(1) as f64
    );
    print!("{summary}");
    std::fs::create_dir_all(&out)?;
    // For `cargo docs --take planted target/planted/report.md`.
    std::fs::write(out.join("report.md"), &summary)?;
    std::fs::write(
        out.join("report.json"),
        serde_json::to_string_pretty(&serde_json::json!({
            "caught": caught,
            "counted": counted,
            "bugs": outcomes,
        }))?,
    )?;
    Ok(counted == outcomes.len())
}

/// Plants `bug` in `tree`, runs the suite on it and takes the bug out again: caught, missed,
/// did not apply or did not build, with the tests that failed.
fn try_bug(
    ws: &Workspace,
    tree: &Path,
    target: &Path,
    bug: &Bug,
    explore: bool,
) -> anyhow::Result<Outcome> {
    let started = Instant::now();
    let verdict = plant(tree, &bug.path).and_then(|planted| {
        if !planted {
            return Ok(("did not apply".to_owned(), Vec::new()));
        }
        let result = run_suite(ws, tree, target, explore);
        revert(tree)?;
        let (failed, built) = result?;
        Ok(match (built, failed.is_empty()) {
            (false, _) => ("did not build".to_owned(), failed),
            (true, false) => ("caught".to_owned(), failed),
            (true, true) => ("missed".to_owned(), failed),
        })
    })?;
    let shown: Vec<&str> = verdict.1.iter().take(3).map(String::as_str).collect();
    let more = verdict.1.len().saturating_sub(shown.len());
    eprintln!(
        "planted:   {} ({}{})",
        verdict.0,
        shown.join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        }
    );
    Ok(Outcome {
        bug: bug.clone(),
        verdict: verdict.0,
        failed: verdict.1.into_iter().take(5).collect(),
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Every `*.patch` in `dir`, sorted by name, with its header read.
fn read_bugs(dir: &Path) -> anyhow::Result<Vec<Bug>> {
    let mut bugs = Vec::new();
    let entries = std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
    for entry in entries {
        let path = entry?.path();
        if path.extension().and_then(|e| e.to_str()) != Some("patch") {
            continue;
        }
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let header = |key: &str| {
            text.lines()
                .take_while(|line| !line.starts_with("diff --git"))
                .find_map(|line| line.strip_prefix(key))
                .map(|value| value.trim().to_owned())
        };
        let files: Vec<String> = text
            .lines()
            .filter_map(|line| line.strip_prefix("+++ b/"))
            .map(str::to_owned)
            .collect();
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("?")
            .to_owned();
        bugs.push(Bug {
            what: header("Bug:")
                .with_context(|| format!("{} has no `Bug:` line", path.display()))?,
            bound: header("Bound:").unwrap_or_else(|| "?".to_owned()),
            files,
            name,
            path,
        });
    }
    bugs.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(bugs)
}

fn git(tree: &Path) -> Command {
    let mut command = Command::new("git");
    command.arg("-C").arg(tree);
    command
}

fn checked(mut command: Command, what: &str) -> anyhow::Result<()> {
    let status = command
        .status()
        .with_context(|| format!("running {what}"))?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}

/// A scratch work tree at the current commit (the working tree's uncommitted changes are not in
/// it: commit the bugs' target first).
fn prepare_tree(ws: &Workspace, tree: &Path) -> anyhow::Result<()> {
    if tree.exists() {
        let mut remove = git(&ws.root);
        remove.args(["worktree", "remove", "--force"]).arg(tree);
        let _ = remove.status();
        if tree.exists() {
            std::fs::remove_dir_all(tree)?;
        }
        let mut prune = git(&ws.root);
        prune.args(["worktree", "prune"]);
        let _ = prune.status();
    }
    let mut add = git(&ws.root);
    add.args(["worktree", "add", "--detach", "--force"])
        .arg(tree)
        .arg("HEAD")
        .stdout(Stdio::null());
    checked(add, "git worktree add")
}

/// Applies the patch; `false` when it does not apply to this commit.
fn plant(tree: &Path, patch: &Path) -> anyhow::Result<bool> {
    let mut check = git(tree);
    check.args(["apply", "--check"]).arg(patch);
    check.stderr(Stdio::null());
    if !check.status()?.success() {
        return Ok(false);
    }
    let mut apply = git(tree);
    apply.arg("apply").arg(patch);
    checked(apply, "git apply")?;
    Ok(true)
}

fn revert(tree: &Path) -> anyhow::Result<()> {
    let mut reset = git(tree);
    reset.args(["checkout", "--", "."]);
    checked(reset, "git checkout -- .")
}

/// Runs the suite crates (and the explorer's CI seeds) in `tree`: the tests that failed, and
/// whether the tree built at all.
fn run_suite(
    ws: &Workspace,
    tree: &Path,
    target: &Path,
    explore: bool,
) -> anyhow::Result<(Vec<String>, bool)> {
    let junit = tree
        .join("target")
        .join("nextest")
        .join("ci")
        .join("junit.xml");
    let _ = std::fs::remove_file(&junit);
    let mut nextest = Command::new(&ws.cargo);
    nextest
        .current_dir(tree)
        .env("CARGO_TARGET_DIR", target)
        .env("NEXTEST_PROFILE", "ci")
        .env("CI", "true")
        .env("INSTA_UPDATE", "no")
        .args([
            "nextest",
            "run",
            "-p",
            "cli-tests",
            "-p",
            "gateway-tests",
            "--no-fail-fast",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let status = nextest.status().context("running cargo nextest")?;
    // nextest's store is under the tree's `target/` whatever CARGO_TARGET_DIR says.
    let junit_at_target = target.join("nextest").join("ci").join("junit.xml");
    let junit = if junit.exists() {
        junit
    } else {
        junit_at_target
    };
    if !junit.exists() {
        // No report: nothing ran, so the tree did not build.
        return Ok((vec![format!("the build ({status})")], status.success()));
    }
    let mut failed: Vec<String> = tools::junit::read(&junit)?
        .into_iter()
        .filter(|case| !case.passed)
        .map(|case| case.key)
        .collect();
    if explore {
        let mut explorer = Command::new(&ws.cargo);
        explorer
            .current_dir(tree)
            .env("CARGO_TARGET_DIR", target)
            .args([
                "run",
                "-q",
                "-p",
                "tools",
                "--bin",
                "conformance",
                "--",
                "--explore",
                "--ci",
                "--shrink-minutes",
                "0",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if !explorer.status().context("running the explorer")?.success() {
            failed.push("the explorer's CI seeds".to_owned());
        }
    }
    Ok((failed, true))
}

fn table(outcomes: &[Outcome]) -> String {
    let mut out = String::from(
        "| bug | bound | where | verdict | first failing test |\n|---|---|---|---|---|\n",
    );
    for outcome in outcomes {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            outcome.bug.what,
            outcome.bug.bound,
            outcome.bug.files.join(", "),
            outcome.verdict,
            outcome.failed.first().map_or("—", String::as_str)
        ));
    }
    out
}
