//! `cargo docs`: the tables in the docs that come from a run or from the code, generated and
//! checked, never pasted.
//!
//! A generated region of a Markdown file is written between two markers:
//!
//! ```text
//! <!-- generated: bench -->
//! …
//! <!-- end generated: bench -->
//! ```
//!
//! Its content comes from one source, by name: a table the code itself defines (`settings`, the
//! keys each target is configured with, their defaults and what the explorer draws;
//! `invariants`, what the oracle judges; `hermes-config`, the keys of the reference's
//! `config.yaml`), or the output of a real run kept in `docs/data/<name>.md` (`conformance`, `ci`, `bench`, `planted`, `mutants`,
//! `explore`), taken there from the run's own output with `--take`.
//!
//! ```sh
//! cargo docs                                        # rewrite every region from its source
//! cargo docs --check                                # CI: fail when a region is stale
//! cargo docs --take bench target/bench/report.md    # keep a run's output, then rewrite
//! ```

use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use clap::Parser;

use fixtures::config::Config;
use fixtures::settings::{Draw, Kind, SETTINGS};
use fixtures::target::Target;
use judge::Invariant;
use tools::workspace::Workspace;

#[derive(Debug, Parser)]
#[command(about = "Rewrite (or check) the docs' generated tables from the code and docs/data/")]
struct Args {
    /// Fail, changing nothing, when a generated region differs from its source.
    #[arg(long)]
    check: bool,
    /// Keep FILE (a run's own output) as docs/data/NAME.md, then rewrite the regions.
    #[arg(long, num_args = 2, value_names = ["NAME", "FILE"])]
    take: Option<Vec<String>>,
}

/// The files that may hold generated regions.
const FILES: &[&str] = &[
    "README.md",
    "GUIDE.md",
    "docs/contract.md",
    "docs/gateway.md",
    "docs/suite.md",
    "docs/targets.md",
    "docs/report.md",
    "docs/strength.md",
    "docs/ci.md",
    "docs/performance.md",
    "docs/design.md",
];

fn main() -> std::process::ExitCode {
    match run(Args::parse()) {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::from(1),
        Err(error) => {
            eprintln!("docs: error: {error:#}");
            std::process::ExitCode::from(2)
        }
    }
}

fn run(args: Args) -> anyhow::Result<bool> {
    let ws = Workspace::locate()?;
    let data = ws.root.join("docs").join("data");
    if let Some(take) = &args.take {
        let [name, file] = take.as_slice() else {
            bail!("--take needs a NAME and a FILE");
        };
        take_output(&ws, &data, name, Path::new(file))?;
    }
    let mut stale = Vec::new();
    for file in FILES {
        let path = ws.root.join(file);
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let fresh = regenerate(&text, &data).with_context(|| format!("in {file}"))?;
        if fresh != text {
            if args.check {
                stale.push((*file).to_owned());
            } else {
                std::fs::write(&path, &fresh)
                    .with_context(|| format!("writing {}", path.display()))?;
                eprintln!("docs: rewrote the generated regions of {file}");
            }
        }
    }
    if !stale.is_empty() {
        eprintln!(
            "docs: generated regions differ from their sources in: {}\n\
             run `cargo docs` (and commit), or `cargo docs --take NAME FILE` after a new run",
            stale.join(", ")
        );
        return Ok(false);
    }
    Ok(true)
}

/// Keeps `file` as `docs/data/<name>.md`, saying where it came from.
fn take_output(ws: &Workspace, data: &Path, name: &str, file: &Path) -> anyhow::Result<()> {
    if !name.bytes().all(|b| b.is_ascii_lowercase() || b == b'-') || name.is_empty() {
        bail!("{name:?} is not a source name (lowercase letters and dashes)");
    }
    let body =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    std::fs::create_dir_all(data)?;
    let kept = data.join(format!("{name}.md"));
    let shown = file
        .strip_prefix(&ws.root)
        .unwrap_or(file)
        .display()
        .to_string();
    std::fs::write(
        &kept,
        format!(
            "<!-- {shown} as written by the run at {}; kept with `cargo docs --take {name}`: do \
             not edit by hand -->\n{}",
            tools::workspace::head_commit(&ws.root),
            body.trim_end()
        ) + "\n",
    )
    .with_context(|| format!("writing {}", kept.display()))?;
    eprintln!("docs: kept {shown} as {}", kept.display());
    Ok(())
}

const OPEN: &str = "<!-- generated: ";
const CLOSE: &str = "<!-- end generated: ";

/// `text` with every generated region rewritten from its source.
fn regenerate(text: &str, data: &Path) -> anyhow::Result<String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(OPEN) {
        let after_open = &rest[start + OPEN.len()..];
        let name_end = after_open
            .find(" -->")
            .context("a `<!-- generated: NAME -->` marker is not closed")?;
        let name = after_open[..name_end].trim();
        let close = format!("{CLOSE}{name} -->");
        let body_start = start + OPEN.len() + name_end + " -->".len();
        let end = rest[body_start..]
            .find(&close)
            .with_context(|| format!("region {name:?} has no `{close}`"))?;
        out.push_str(&rest[..body_start]);
        out.push('\n');
        out.push_str(source(name, data)?.trim_end());
        out.push('\n');
        out.push_str(&close);
        rest = &rest[body_start + end + close.len()..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The content of the region `name`.
fn source(name: &str, data: &Path) -> anyhow::Result<String> {
    match name {
        "settings" => Ok(settings_table()),
        "invariants" => Ok(invariants_table()),
        "hermes-config" => Ok(hermes::config::keys_table()),
        _ => {
            let path: PathBuf = data.join(format!("{name}.md"));
            std::fs::read_to_string(&path).with_context(|| {
                format!(
                    "region {name:?} comes from {}, which is missing: keep a run's output there \
                     with `cargo docs --take {name} FILE`",
                    path.display()
                )
            })
        }
    }
}

/// What each target is configured with, the contract's default and what the explorer draws,
/// from the one table of settings (`fixtures::settings::SETTINGS`).
fn settings_table() -> String {
    let reference = Target::reference("hermes");
    let external = Target::external("upstream", "python", Vec::new());
    let mut out = String::from(
        "| setting | bound | the reference reads | upstream-dialect targets read | the contract's default | the explorer draws |\n\
         |---|---|---|---|---|---|\n",
    );
    for row in &SETTINGS {
        let name = |target: &Target| {
            Config::key_for(target, row.setting).map_or("—".to_owned(), |key| format!("`{key}`"))
        };
        let default = match (row.kind, row.default) {
            (Kind::Switch, Some(on)) => if on == 0.0 { "off" } else { "on" }.to_owned(),
            (_, Some(default)) => format!("{default}"),
            (_, None) => "—".to_owned(),
        };
        let draws = match row.explore.map(|explore| explore.draw) {
            Some(Draw::Counts(min, max)) => format!("{min}–{max}"),
            Some(Draw::Seconds(values)) => {
                let values: Vec<String> = values.iter().map(|secs| format!("{secs}")).collect();
                format!("{} s", values.join(", "))
            }
            Some(Draw::Switch) => "on, off".to_owned(),
            None => "—".to_owned(),
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            row.words,
            row.bound,
            name(&reference),
            name(&external),
            default,
            draws
        ));
    }
    out
}

/// The oracle's invariants and the kind each fails as, from `fixtures::oracle`.
fn invariants_table() -> String {
    let mut out =
        String::from("| the verdict | fails as | promise | judged on |\n|---|---|---|---|\n");
    for invariant in Invariant::ALL {
        out.push_str(&format!(
            "| {} | `{}` | {} | {} |\n",
            invariant.words(),
            invariant.kind(),
            invariant.kind().promise(),
            if invariant.reference_only() {
                "the reference"
            } else {
                "every target"
            }
        ));
    }
    out
}
