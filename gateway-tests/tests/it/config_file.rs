//! `config.yaml` that is not a config file, under a running gateway: replaced by a FIFO (a read
//! that never ends), symlinked to `/dev/zero` (a file without end), or grown to 30 MB. The
//! gateway keeps dispatching with its last good config, without spending memory or CPU on the
//! file, and SIGTERM still stops it within 5 s.

use std::path::Path;
use std::time::{Duration, Instant};

use fixtures::gateway::StopReport;
use fixtures::ticks::Window;
use judge::prelude::*;
use rstest::rstest;

use crate::support::STOP_GRACE;
use crate::PROBE_TICKS;

/// What `config.yaml` is replaced with.
#[derive(Debug, Clone, Copy)]
pub enum NotAConfig {
    /// A named pipe nobody writes to.
    Fifo,
    /// A symlink to `/dev/zero`.
    DevZero,
    /// A 30 MB file (comments: valid YAML, if a reader got that far).
    Huge,
}

/// Bytes of the huge config.
const HUGE_BYTES: usize = 30 * 1024 * 1024;

/// Most CPU the gateway may use while its config is huge, in CPU-seconds per second: a
/// dispatcher ticking 10 times a second needs a small fraction of this.
const MOST_CPU_SHARE: f64 = 0.3;

/// Most memory the gateway may hold while reading its config: the reference idles under 30 MB.
const MOST_RSS_BYTES: u64 = 200 * 1024 * 1024;

/// SIGTERM must stop a gateway within this, whatever its config is.
const STOP_WITHIN: Duration = Duration::from_secs(5);

/// Replaces the file at `path` with `what`.
pub fn replace_config(path: &Path, what: NotAConfig) {
    let staging = path.with_extension("replacing");
    let _ = std::fs::remove_file(&staging);
    let made = match what {
        NotAConfig::Fifo => nix::unistd::mkfifo(&staging, nix::sys::stat::Mode::S_IRWXU)
            .map_err(std::io::Error::from),
        NotAConfig::DevZero => std::os::unix::fs::symlink("/dev/zero", &staging),
        NotAConfig::Huge => {
            let line = "# a comment line to make the file large, as a mistaken tool might\n";
            std::fs::write(&staging, line.repeat(HUGE_BYTES / line.len()))
        }
    };
    if let Err(error) = made.and_then(|()| std::fs::rename(&staging, path)) {
        panic!("cannot replace {} with {what:?}: {error}", path.display());
    }
}

/// CPU time (user + system) of `pid` so far, and its resident memory.
pub fn cpu_and_rss(pid: u32) -> Option<(Duration, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) in its parentheses.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // `/proc` counts CPU time in USER_HZ, which Linux fixes at 100 whatever the kernel's HZ.
    let per_second = 100;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss_kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some((
        Duration::from_millis(ticks * 1000 / per_second),
        rss_kib * 1024,
    ))
}

/// What a gateway did with a config that is not one.
pub struct Outcome {
    pub window: Window,
    pub cpu_share: f64,
    pub most_rss: u64,
    pub stop: StopReport,
    pub log: String,
}

/// Runs a gateway on `board`, replaces its config with `what`, proves it keeps ticking, and
/// stops it.
pub fn run_with(board: &Board, what: NotAConfig) -> Outcome {
    let target = board.target();
    let mut run = board.scenario();
    run.start().prove_ticks(1);
    replace_config(&board.config_path(), what);
    let before = cpu_and_rss(run.pid());
    let started = Instant::now();
    let mut most_rss = 0;
    for probe in 0..PROBE_TICKS {
        if !run.ok() {
            break;
        }
        // Created without a harness panic: a target whose own CLI cannot run with this config
        // (it reads config.yaml too) fails the verdicts instead.
        let created = board.cli_within(
            [
                "kanban",
                "create",
                &format!("tick probe {probe}"),
                "--triage",
                "--json",
            ],
            target.cli_timeout(&["kanban", "create"]),
        );
        let Some(id) = created
            .success()
            .then(|| created.json()["id"].as_str().map(str::to_owned))
            .flatten()
        else {
            run.interrupt(
                Interruption::new(format!(
                    "`kanban create` failed with config.yaml replaced by {what:?} ({})",
                    created.code_text()
                ))
                // A CLI that cannot get past the config file reads it without bound.
                .implying(GapKind::UnboundedConfigRead)
                .with_detail(created.to_string()),
            );
            break;
        };
        run.left_triage(
            std::slice::from_ref(&id),
            target.probe_timeout(),
            &format!("tick probe {probe} decomposed"),
        );
        if let Some((_, rss)) = cpu_and_rss(run.pid()) {
            most_rss = most_rss.max(rss);
        }
    }
    let after = cpu_and_rss(run.pid());
    let cpu_share = match (before, after) {
        (Some((before, _)), Some((after, _))) => {
            after.saturating_sub(before).as_secs_f64() / started.elapsed().as_secs_f64().max(0.001)
        }
        _ => 0.0,
    };
    let seen = run.stop();
    Outcome {
        cpu_share,
        most_rss,
        stop: *seen.stopped(),
        log: seen.log(),
        window: seen.window,
    }
}

#[rstest]
#[case::fifo(NotAConfig::Fifo)]
#[case::dev_zero(NotAConfig::DevZero)]
#[case::huge(NotAConfig::Huge)]
fn a_config_that_is_not_a_config_file_stops_neither_dispatching_nor_a_prompt_shutdown(
    #[case] what: NotAConfig,
    #[with(Config::gateway())] board: Board,
) {
    let outcome = run_with(&board, what);
    let window = &outcome.window;

    holds(
        format!("the gateway keeps dispatching with config.yaml replaced by {what:?}"),
        window.ok(),
    )
    .over(window)
    .gap(GapKind::DispatcherBlocked);
    bound(
        format!("CPU share (per mille) of a gateway whose config.yaml is {what:?}"),
        (outcome.cpu_share * 1000.0) as u64,
    )
    .at_most((MOST_CPU_SHARE * 1000.0) as u64)
    .over(window)
    .gap(GapKind::UnboundedConfigRead);
    bound(
        format!("resident MiB of a gateway whose config.yaml is {what:?}"),
        outcome.most_rss / (1024 * 1024),
    )
    .at_most(MOST_RSS_BYTES / (1024 * 1024))
    .over(window)
    .gap(GapKind::UnboundedConfigRead);
    holds(
        format!(
            "SIGTERM stops a gateway whose config.yaml is {what:?} within {}s",
            STOP_WITHIN.as_secs()
        ),
        outcome.stop.clean() && outcome.stop.elapsed < STOP_WITHIN,
    )
    .note(|| format!("{:?} (grace {STOP_GRACE:?})", outcome.stop))
    .context(|| outcome.log.clone())
    .gap(GapKind::SlowShutdown);
}
