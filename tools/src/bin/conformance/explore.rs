//! `cargo conformance --explore`: generated schedules through the real processes of a target,
//! judged by the oracle (`fixtures::explore`). Progress goes to stderr (schedule i of N, elapsed,
//! what failed, each shrink run); the minimal failing schedules and the summary go to stdout, and
//! each failure is written to `target/conformance/explore/` for `--replay`.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use explorer::{saved, Check, Exploration, Failure, Gated, Plan, Progress, Run, Saved, Schedule};
use fixtures::gaps::GapList;
use fixtures::target::Target;
use fixtures::verdict::Outcome;
use tools::workspace::{named_file, Profile, Workspace};

/// The schedules per seed when neither `--schedules` nor `--minutes` says.
pub const DEFAULT_SCHEDULES: u64 = 20;

/// `--ci`: the fixed seeds and schedules per seed CI explores (and `cargo planted` runs), on the
/// reference and on a slower target. Fixed, so every CI run explores the same schedules.
pub const CI_REFERENCE: (&[u64], u64) = (&[1, 2, 3], 30);
pub const CI_EXTERNAL: (&[u64], u64) = (&[1], 2);

/// How long and how many runs one shrink may take on the reference, and on a slower target.
const REFERENCE_SHRINK: (Duration, u32) = (Duration::from_secs(180), 200);
const EXTERNAL_SHRINK: (Duration, u32) = (Duration::from_secs(300), 40);

/// What the command line asked the explorer for.
#[derive(Debug, Clone)]
pub struct Request {
    pub seeds: Vec<u64>,
    pub schedules: Option<u64>,
    /// `--ci`: seeds and schedules from [`CI_REFERENCE`] / [`CI_EXTERNAL`].
    pub ci: bool,
    pub minutes: Option<f64>,
    pub replay: Option<PathBuf>,
    pub shrink_minutes: Option<f64>,
    pub verbose: bool,
}

/// One target to explore: how it is run and judged, and how a person names it again.
pub struct Explored {
    pub target: &'static Target,
    pub gaps: GapList,
    /// What the target is, for the header line.
    pub describes: String,
    /// The `--target …` (and `--upstream-from …`) words that select it again.
    pub selector: String,
}

/// The reference binary: `HERMES_BIN` when set, else `hermes-tools` built now (only linked: it
/// shares this program's build).
pub fn reference_binary(ws: &Workspace) -> anyhow::Result<PathBuf> {
    match std::env::var_os("HERMES_BIN") {
        Some(path) => named_file("HERMES_BIN", PathBuf::from(path)),
        None => ws.build_tools_binary("hermes-tools", Profile::Debug),
    }
}

fn explore_dir(ws: &Workspace) -> PathBuf {
    ws.target_dir.join("conformance").join("explore")
}

/// Explores (or replays on) each target in turn; true when nothing unlisted was found.
pub fn run(ws: &Workspace, request: &Request, targets: &[Explored]) -> anyhow::Result<bool> {
    if let Some(minutes) = request.minutes {
        if !(minutes.is_finite() && minutes > 0.0) {
            bail!("--minutes {minutes}: give a positive number of minutes");
        }
    }
    if let Some(minutes) = request.shrink_minutes {
        if !(minutes.is_finite() && minutes >= 0.0) {
            bail!("--shrink-minutes {minutes}: give a number of minutes (0: no shrinking)");
        }
    }
    let replayed = match &request.replay {
        Some(path) => Some(saved::read(path).map_err(anyhow::Error::msg)?),
        None => None,
    };
    let mut held = true;
    for explored in targets {
        let dir = explore_dir(ws);
        let records_dir = dir.join("verdicts");
        let records = records_dir.join(format!("{}.jsonl", explored.target.name()));
        match std::fs::remove_file(&records) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => {
                return Err(error).with_context(|| format!("clearing {}", records.display()))
            }
        }
        let (shrink_time, shrink_runs) = shrink_limits(request, explored.target);
        let plan = Plan {
            target: explored.target,
            gaps: explored.gaps.clone(),
            records_dir,
            seed: 0,
            schedules: None,
            until: None,
            set_aside: Vec::new(),
            shrink_time,
            shrink_runs,
        };
        held &= match (&replayed, &request.replay) {
            (Some(schedule), Some(path)) => {
                replay(&plan, explored, schedule, path, request.verbose)
            }
            _ => explore_seeds(&plan, explored, request, &dir)?,
        };
    }
    Ok(held)
}

fn shrink_limits(request: &Request, target: &Target) -> (Duration, u32) {
    let (time, runs) = if target.is_reference() {
        REFERENCE_SHRINK
    } else {
        EXTERNAL_SHRINK
    };
    match request.shrink_minutes {
        Some(minutes) if minutes <= 0.0 => (Duration::ZERO, 0),
        Some(minutes) => (
            Duration::try_from_secs_f64(minutes * 60.0).unwrap_or(time),
            runs.max(1000),
        ),
        None => (time, runs),
    }
}

fn random_seed() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (now.as_nanos() as u64) ^ u64::from(std::process::id()).rotate_left(32)
}

fn explore_seeds(
    base: &Plan,
    explored: &Explored,
    request: &Request,
    dir: &Path,
) -> anyhow::Result<bool> {
    let (ci_seeds, ci_schedules) = if explored.target.is_reference() {
        CI_REFERENCE
    } else {
        CI_EXTERNAL
    };
    let seeds = if request.ci {
        ci_seeds.to_vec()
    } else if request.seeds.is_empty() {
        vec![random_seed()]
    } else {
        request.seeds.clone()
    };
    let started = Instant::now();
    let until = request
        .minutes
        .and_then(|minutes| Duration::try_from_secs_f64(minutes * 60.0).ok())
        .map(|span| started + span);
    let schedules = match (request.schedules, request.minutes) {
        _ if request.ci => Some(ci_schedules),
        (Some(n), _) => Some(n),
        (None, Some(_)) => None,
        (None, None) => Some(DEFAULT_SCHEDULES),
    };
    eprintln!(
        "\nexplore: `{}` — {}; gap list `{}`; seed(s) {}; {} per seed{}; a failure is shrunk \
         for at most {:.0} s or {} runs",
        explored.target.name(),
        explored.describes,
        base.gaps.label(),
        seeds
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        schedules.map_or("unlimited schedules".to_owned(), |n| format!(
            "{n} schedules"
        )),
        request
            .minutes
            .map_or(String::new(), |m| format!(", for at most {m} min")),
        base.shrink_time.as_secs_f64(),
        base.shrink_runs,
    );
    let mut totals = Exploration::default();
    let mut set_aside: Vec<Check> = Vec::new();
    for seed in seeds {
        let plan = Plan {
            seed,
            schedules,
            until,
            set_aside: set_aside.clone(),
            ..base.clone()
        };
        let mut shown = Shown {
            of: schedules,
            started,
            verbose: request.verbose,
            done: 0,
            explored,
            seed,
            dir,
            unwritten: None,
        };
        let exploration = explorer::explore(&plan, &mut |progress| shown.progress(progress));
        if let Some(error) = shown.unwritten {
            return Err(error);
        }
        set_aside = exploration.set_aside.clone();
        let failed = exploration.failed();
        totals.schedules += exploration.schedules;
        totals.runs += exploration.runs;
        totals.schedule_times.extend(exploration.schedule_times);
        totals.failures.extend(exploration.failures);
        if failed || until.is_some_and(|until| Instant::now() >= until) {
            break;
        }
    }
    totals.elapsed = started.elapsed();
    summarize(explored, &totals);
    Ok(!totals.failed())
}

/// Progress on stderr, and each failure on stdout (and in its file) as soon as it is judged.
struct Shown<'a> {
    of: Option<u64>,
    started: Instant,
    verbose: bool,
    done: u64,
    explored: &'a Explored,
    seed: u64,
    dir: &'a Path,
    /// A failure's file that could not be written (the exploration's error).
    unwritten: Option<anyhow::Error>,
}

/// How many findings a failing schedule's progress line lists (the rest are counted).
const FINDINGS_SHOWN: usize = 6;

impl Shown<'_> {
    fn counter(&self) -> String {
        let of = self.of.map_or(String::new(), |n| format!("/{n}"));
        format!(
            "[{:>3}{of} {:>6.1}s]",
            self.done + 1,
            self.started.elapsed().as_secs_f64()
        )
    }

    fn progress(&mut self, progress: Progress<'_>) {
        let mut err = std::io::stderr().lock();
        match progress {
            Progress::Started { index, schedule } => {
                let _ = write!(
                    err,
                    "  {} schedule {index} ({}) …",
                    self.counter(),
                    schedule.size()
                );
                if self.verbose {
                    let _ = writeln!(err);
                    for line in schedule.to_string().lines() {
                        let _ = writeln!(err, "      {line}");
                    }
                }
            }
            Progress::Step(moment) => {
                if self.verbose {
                    let _ = writeln!(err, "      → {}. {}", moment.index + 1, moment.step);
                }
            }
            Progress::Passed { run, .. } => {
                self.done += 1;
                let _ = writeln!(
                    err,
                    " ok in {:.1} s ({} decompose call{})",
                    run.elapsed.as_secs_f64(),
                    run.calls,
                    if run.calls == 1 { "" } else { "s" }
                );
                if self.verbose {
                    let _ = writeln!(err, "      ({})", run.span);
                    for note in &run.notes {
                        let _ = writeln!(err, "      note: {note}");
                    }
                }
            }
            Progress::Failed { run, failing, .. } => {
                self.done += 1;
                let _ = writeln!(err, " FAILED in {:.1} s:", run.elapsed.as_secs_f64());
                for finding in failing.iter().take(FINDINGS_SHOWN) {
                    let _ = writeln!(err, "      {finding}");
                }
                if failing.len() > FINDINGS_SHOWN {
                    let _ = writeln!(err, "      … and {} more", failing.len() - FINDINGS_SHOWN);
                }
                let _ = writeln!(err, "    shrinking …");
            }
            Progress::ShrinkRun {
                runs,
                schedule,
                failed,
            } => {
                let _ = writeln!(
                    err,
                    "      shrink run {runs:>3}: {} ({})",
                    if failed { "still fails" } else { "passes" },
                    schedule.size()
                );
            }
            Progress::Judged(failure) => {
                let _ = writeln!(
                    err,
                    "    shrunk in {} runs, {:.1} s{} to {}",
                    failure.shrink_runs,
                    failure.shrink_time.as_secs_f64(),
                    if failure.shrink_capped {
                        " (stopped at the limit: it may shrink further)"
                    } else {
                        ""
                    },
                    failure.schedule.size()
                );
                drop(err);
                if let Err(error) = report_failure(self.explored, self.seed, failure, self.dir) {
                    self.unwritten.get_or_insert(error);
                }
                return;
            }
        }
        let _ = err.flush();
    }
}

fn outcome_word(gated: &Gated) -> &'static str {
    match gated.judged.outcome {
        Outcome::KnownGap => "KNOWN GAP",
        Outcome::Mismatch => "MISMATCH",
        Outcome::Fail => "FAIL",
        Outcome::Pass | Outcome::Fixed => "pass",
    }
}

fn finding_lines(gated: &[Gated]) -> Vec<String> {
    gated
        .iter()
        .map(|gated| {
            format!(
                "{} {}",
                outcome_word(gated),
                gated
                    .judged
                    .message
                    .as_deref()
                    .unwrap_or(gated.check.words())
            )
        })
        .collect()
}

fn replay_command(explored: &Explored, path: &Path) -> String {
    format!(
        "cargo conformance --explore {} --replay {}",
        explored.selector,
        path.display()
    )
}

fn report_failure(
    explored: &Explored,
    seed: u64,
    failure: &Failure,
    dir: &Path,
) -> anyhow::Result<()> {
    let name = explored.target.name();
    let file = if failure.is_new() {
        format!("{name}-seed{seed}.json")
    } else {
        format!("{name}-seed{seed}-known-{}.json", failure.index)
    };
    let path = dir.join(file);
    let replay = replay_command(explored, &path);
    let lines = finding_lines(&failure.gated);
    saved::write(
        &path,
        &Saved {
            format: saved::FORMAT,
            target: name.to_owned(),
            seed: Some(seed),
            schedule_index: Some(failure.index),
            replay: replay.clone(),
            findings: lines.clone(),
            schedule: failure.schedule.clone(),
        },
    )
    .map_err(anyhow::Error::msg)?;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "\n{} on `{name}`: seed {seed}, schedule {}, shrunk to:",
        if failure.is_new() {
            "FAIL"
        } else {
            "KNOWN GAP(S)"
        },
        failure.index
    );
    print_schedule(&mut out, &failure.schedule);
    print_run(&mut out, &failure.run, &lines);
    if let Some(reproduced) = failure.reproduced {
        let _ = writeln!(
            out,
            "  run again: {}",
            if reproduced {
                "failed again"
            } else {
                "did NOT fail again (timing-dependent: replay it a few times)"
            }
        );
    }
    let _ = writeln!(out, "  written to {}\n  replay: {replay}", path.display());
    Ok(())
}

fn print_schedule(out: &mut impl std::io::Write, schedule: &Schedule) {
    for line in schedule.to_string().lines() {
        let _ = writeln!(out, "    {line}");
    }
}

fn print_run(out: &mut impl std::io::Write, run: &Run, lines: &[String]) {
    let _ = writeln!(out, "  what it showed ({}):", run.span);
    for line in lines {
        let _ = writeln!(out, "    {line}");
    }
    for note in &run.notes {
        let _ = writeln!(out, "  note: {note}");
    }
}

fn summarize(explored: &Explored, totals: &Exploration) {
    let times = &totals.schedule_times;
    let mean = if times.is_empty() {
        0.0
    } else {
        times.iter().map(Duration::as_secs_f64).sum::<f64>() / times.len() as f64
    };
    let longest = times.iter().max().map_or(0.0, Duration::as_secs_f64);
    let new = totals.failures.iter().filter(|f| f.is_new()).count();
    let known: usize = totals.failures.iter().filter(|f| !f.is_new()).count();
    println!(
        "\nexplored {} schedules on `{}` in {:.1} s ({mean:.1} s per schedule, longest \
         {longest:.1} s; {} runs with shrinking): {}",
        totals.schedules,
        explored.target.name(),
        totals.elapsed.as_secs_f64(),
        totals.runs,
        match (new, known) {
            (0, 0) => "nothing found".to_owned(),
            (0, known) => format!("{known} known gap schedule(s), no FAIL"),
            (new, known) => format!("{new} FAIL, {known} known gap schedule(s)"),
        }
    );
}

fn replay(
    base: &Plan,
    explored: &Explored,
    schedule: &Schedule,
    path: &Path,
    verbose: bool,
) -> bool {
    let stem = path.file_stem().map_or_else(
        || "replay".to_owned(),
        |stem| stem.to_string_lossy().into_owned(),
    );
    let test = format!("explore::replay::{stem}");
    eprintln!(
        "\nexplore: replaying {} on `{}` — {}; gap list `{}`",
        path.display(),
        explored.target.name(),
        explored.describes,
        base.gaps.label()
    );
    let mut out = std::io::stdout().lock();
    print_schedule(&mut out, schedule);
    let (run, gated) = explorer::replay(schedule, base, &test, &mut |progress| {
        if let Progress::Step(moment) = progress {
            if verbose {
                eprintln!("      → {}. {}", moment.index + 1, moment.step);
            }
        }
    });
    let lines = finding_lines(&gated);
    print_run(&mut out, &run, &lines);
    let failed = gated.iter().any(Gated::fails);
    let _ = writeln!(
        out,
        "\nreplayed in {:.1} s on `{}`: {}",
        run.elapsed.as_secs_f64(),
        explored.target.name(),
        if failed {
            "FAIL"
        } else if gated.is_empty() {
            "nothing found"
        } else {
            "known gaps only"
        }
    );
    !failed
}
