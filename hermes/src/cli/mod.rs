//! The `hermes` command line: parse (clap), resolve the home and config, run one verb.
//!
//! One file per verb, each exposing `run(&Context, &Args) -> Result<Outcome, CliError>`, so a
//! verb can be filled in or changed without touching this dispatcher. Exit codes: 0 success,
//! 1 failure (message on stderr as `hermes: error: …`, or under `--json` as one JSON object;
//! `crate::output` writes both), 2 usage errors (clap's own).

pub mod archive;
pub mod auto_decompose;
pub mod chat;
pub mod check;
pub mod completions;
pub mod create;
pub mod decompose;
pub mod dispatch;
pub mod events;
pub mod exit_status;
pub mod gateway;
pub mod init;
pub mod link;
pub mod list;
pub mod man;
pub mod render;
pub mod resume;
pub mod show;
pub mod table;
pub mod unblock;
pub mod unpark;
pub mod usage;

use std::ffi::OsString;
use std::fmt;
use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{ColorChoice, Parser, Subcommand};
use serde_json::Value;

use crate::config::{Config, Home};
use crate::output;
use crate::store::Store;

/// `hermes`: the kanban board, its CLI and the gateway that decomposes cards within bounds.
#[derive(Debug, Parser)]
#[command(
    name = "hermes",
    version = env!("HERMES_VERSION"),
    about,
    propagate_version = true,
    // Kept apart from each verb's own options in every help page.
    next_help_heading = "Global options"
)]
pub struct Cli {
    /// Print machine-readable JSON on stdout; an error is then one JSON object on stderr,
    /// `{"error": MESSAGE, "code": EXIT_CODE}`.
    #[arg(long, global = true)]
    pub json: bool,
    /// Colour the `error:` and `warning:` labels on stderr: auto (only on a terminal, and not
    /// when NO_COLOR is set), always or never.
    #[arg(long, global = true, value_name = "WHEN", default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
    /// Show times in text output in UTC instead of local time (JSON times are unix seconds
    /// either way).
    #[arg(long, global = true)]
    pub utc: bool,
    /// No notes or warnings on stderr; errors are still shown.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// More detail on stderr: the home, config file and board this run uses.
    #[arg(short, long, global = true)]
    pub verbose: bool,
    /// The board's home directory: its kanban.db, config.yaml and .env (overrides
    /// HERMES_HOME; default ~/.hermes).
    #[arg(long, global = true, value_name = "DIR")]
    pub home: Option<PathBuf>,
    /// The profile a worker runs as (upstream's `-p`); the gateway passes the card's assignee.
    /// The board, its config and its key stay the home's whatever the profile.
    #[arg(short = 'p', long = "profile", global = true, value_name = "NAME")]
    pub profile: Option<String>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Top-level commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Work with the kanban board.
    #[command(subcommand)]
    Kanban(KanbanCommand),
    /// Run the gateway.
    #[command(subcommand)]
    Gateway(GatewayCommand),
    /// Run one kanban worker session (the gateway starts these; see `hermes chat --help`).
    Chat(chat::ChatArgs),
    /// Print a shell completion script.
    #[command(visible_alias = "completion")]
    Completions(completions::CompletionsArgs),
    /// Print the man page of hermes, or of one of its commands, as roff.
    Man(man::ManArgs),
}

/// `hermes kanban …`.
#[derive(Debug, Subcommand)]
pub enum KanbanCommand {
    /// Create the board if it is missing (every command does this on first use too, and says
    /// so on stderr).
    Init(init::InitArgs),
    /// Create a card.
    Create(create::CreateArgs),
    /// Show one card with its links, comments, events and runs.
    Show(show::ShowArgs),
    /// List cards.
    #[command(visible_alias = "ls")]
    List(list::ListArgs),
    /// Make CHILD wait for PARENT.
    Link(link::LinkArgs),
    /// Archive cards.
    Archive(archive::ArchiveArgs),
    /// Ask the aux model to split a triage card (one paid attempt per card).
    Decompose(decompose::DecomposeArgs),
    /// Show the aux-call ledger: what was billed, when, with which model, and how it ended.
    Usage(usage::UsageArgs),
    /// Give a parked triage card a fresh automatic budget and make it due now.
    Unpark(unpark::UnparkArgs),
    /// Lift the board-wide pause on automatic decompose calls (a provider refusal, or an
    /// unreachable provider's backoff).
    Resume(resume::ResumeArgs),
    /// Switch a card's automatic decomposition on or off.
    AutoDecompose(auto_decompose::AutoDecomposeArgs),
    /// Spawn workers for ready cards once, under the gateway's bounds (a gateway does it every
    /// tick).
    Dispatch(dispatch::DispatchArgs),
    /// Send a card a worker blocked back to ready (a person's answer).
    Unblock(unblock::UnblockArgs),
}

impl Command {
    /// Whether the verb reads `config.yaml`: the ones that bill, or report or change what the
    /// bounds allow.
    pub fn reads_config(&self) -> bool {
        match self {
            Command::Gateway(_) | Command::Chat(_) => true,
            Command::Completions(_) | Command::Man(_) => false,
            Command::Kanban(verb) => matches!(
                verb,
                KanbanCommand::Decompose(_)
                    | KanbanCommand::Usage(_)
                    | KanbanCommand::Unpark(_)
                    | KanbanCommand::Dispatch(_)
            ),
        }
    }

    /// Whether the verb reads `config.yaml` itself, to report what it finds there (a broken
    /// file included) rather than to act on it: `gateway check`.
    pub fn reports_config(&self) -> bool {
        matches!(self, Command::Gateway(GatewayCommand::Check(_)))
    }

    /// Whether the verb runs on the defaults when `config.yaml` cannot be used (unreadable,
    /// unparsable, a value out of range), warning instead of refusing: only `kanban usage`,
    /// which reads the ledger and bills nothing, so what was billed stays visible while the
    /// config is being fixed. Every verb that bills, or changes what the bounds allow, refuses.
    pub fn survives_broken_config(&self) -> bool {
        matches!(self, Command::Kanban(KanbanCommand::Usage(_)))
    }
}

/// `hermes gateway …`.
#[derive(Debug, Subcommand)]
pub enum GatewayCommand {
    /// Run the gateway in the foreground (logs to stderr).
    Run(gateway::RunArgs),
    /// Say what `gateway run` would bill and whether it would start, spending nothing.
    Check(check::CheckArgs),
}

/// What every verb gets: where the board lives, the loaded config, and the output mode.
#[derive(Debug)]
pub struct Context {
    /// `$HERMES_HOME` and the paths in it.
    pub home: Home,
    /// `config.yaml` as loaded at start-up (long-running verbs may re-read it), for the verbs
    /// that read it ([`Command::reads_config`]); every other verb gets the defaults here and
    /// must not look.
    pub config: Config,
    /// `--json` was given.
    pub json: bool,
    /// `config.yaml` could not be used and `config` holds the defaults instead (only for
    /// [`Command::survives_broken_config`]; the error was printed as a warning).
    pub config_broken: bool,
}

impl Context {
    /// Opens the board, creating it on first use and saying so on stderr (a board appearing
    /// silently in a home the user did not mean is how a wrong HERMES_HOME goes unnoticed).
    pub fn open_store(&self) -> Result<Store, CliError> {
        let path = self.home.db_path();
        let new = !path.exists();
        let store = Store::open(&path)?;
        if new {
            note(&format!("created a new board at {}", path.display()));
        }
        Ok(store)
    }

    /// Writes `value` as pretty JSON plus a newline on stdout.
    pub fn print_json(&self, value: &Value) -> Result<(), CliError> {
        let text = serde_json::to_string_pretty(value).context("formatting JSON output")?;
        write_stdout(&output::json_for_terminal(&text))
    }

    /// Writes one JSON value on a single line (for streams of records).
    pub fn print_json_line(&self, value: &Value) -> Result<(), CliError> {
        write_stdout(&output::json_line(value))
    }

    /// Whether text tables start with a header row: only on a terminal, because scripts read
    /// the lines (the conformance suite among them) and a header would be a line to skip.
    pub fn headers(&self) -> bool {
        use std::io::IsTerminal;
        !self.json && io::stdout().is_terminal()
    }

    /// Writes `text` plus a newline on stdout, redacted and with control characters made
    /// visible (line breaks kept).
    pub fn print(&self, text: &str) -> Result<(), CliError> {
        write_stdout(&output::for_terminal(text))
    }
}

fn write_stdout(text: &str) -> Result<(), CliError> {
    write_stdout_raw(format!("{text}\n").as_bytes())
}

/// Writes `bytes` on stdout as they are: generated text (a completion script, a man page) that
/// holds nothing from outside.
fn write_stdout_raw(bytes: &[u8]) -> Result<(), CliError> {
    let mut out = io::stdout().lock();
    out.write_all(bytes)
        .and_then(|_| out.flush())
        .context("writing to stdout")?;
    Ok(())
}

/// `hermes: MESSAGE` on stderr: what a verb reports beside its output.
pub fn note(message: &str) {
    output::note(message);
}

impl Context {
    /// Reports what `config.yaml` or `.env` made this verb ignore, as `hermes: warning: …`.
    pub fn warn(&self, warning: &str) {
        output::warning(warning);
    }
}

/// How a verb that ran to the end turned out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Exit 0.
    Success,
    /// Exit 1: the verb already reported why (e.g. a decompose attempt that failed).
    Failure,
}

/// A verb's error: printed as `hermes: error: <message chain>`.
pub struct CliError {
    error: anyhow::Error,
    usage: bool,
}

impl CliError {
    /// A usage problem clap could not catch (exit 2).
    pub fn usage(message: impl fmt::Display) -> CliError {
        CliError {
            error: anyhow::anyhow!("{message}"),
            usage: true,
        }
    }

    /// A verb this build does not provide (exit 1).
    pub fn not_implemented(verb: &str) -> CliError {
        CliError {
            error: anyhow::anyhow!("`{verb}` is not implemented in this build"),
            usage: false,
        }
    }

    /// The process exit code for this error.
    pub fn exit_code(&self) -> u8 {
        if self.usage {
            2
        } else {
            1
        }
    }

    /// The underlying error.
    pub fn error(&self) -> &anyhow::Error {
        &self.error
    }
}

impl<E: Into<anyhow::Error>> From<E> for CliError {
    fn from(e: E) -> Self {
        CliError {
            error: e.into(),
            usage: false,
        }
    }
}

impl fmt::Debug for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#}", self.error)
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#}", self.error)
    }
}

/// The process entry point shared by every binary that embeds the CLI.
pub fn main() -> ExitCode {
    install_panic_hook();
    match std::panic::catch_unwind(|| run(std::env::args_os())) {
        Ok(code) => code,
        Err(_) => ExitCode::from(101),
    }
}

/// Parses `args` (program name first) and runs the command.
pub fn run<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args = upstream_chat_query(args.into_iter().map(Into::into).collect());
    // Read ahead of clap, so that its own errors and help follow --color and --json too.
    let (color, json) = early_flags(&args);
    output::set_color(color.unwrap_or(anstream::ColorChoice::Auto));
    output::set_json_errors(json);
    let parsed = command()
        .try_get_matches_from(&args)
        .and_then(|matches| <Cli as clap::FromArgMatches>::from_arg_matches(&matches));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) => return clap_error(&e, &args),
    };
    output::set_color(anstream_choice(cli.color));
    output::set_json_errors(cli.json);
    output::set_verbosity(if cli.quiet {
        output::Verbosity::Quiet
    } else if cli.verbose {
        output::Verbosity::Verbose
    } else {
        output::Verbosity::Normal
    });
    crate::clock::set_show_utc(cli.utc);
    match execute(cli) {
        Ok(Outcome::Success) => ExitCode::SUCCESS,
        Ok(Outcome::Failure) => ExitCode::from(1),
        Err(e) => {
            if !is_broken_pipe(&e.error) {
                output::error(&e.to_string(), e.exit_code());
                if e.usage && !output::json_errors() {
                    output::stderr_line("Run `hermes --help` for usage.");
                }
            }
            ExitCode::from(e.exit_code())
        }
    }
}

/// Reports what clap refused (or prints the help or version it was asked for).
fn clap_error(e: &clap::Error, args: &[OsString]) -> ExitCode {
    let code = u8::try_from(e.exit_code()).unwrap_or(2);
    if e.use_stderr() && output::json_errors() {
        let message =
            if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                format!("a subcommand is required; {}", usage_for(args))
            } else {
                // clap's first paragraph is the message; the rest is usage and a tip.
                let rendered = e.render().to_string();
                let first = rendered.split("\n\n").next().unwrap_or_default();
                let first = first.strip_prefix("error: ").unwrap_or(first);
                first.split_whitespace().collect::<Vec<_>>().join(" ")
            };
        output::error(&message, code);
        return ExitCode::from(code);
    }
    // clap prints help/version on stdout and usage errors on stderr.
    let _ = e.print();
    if e.use_stderr() && !e.render().to_string().contains("Usage:") {
        // Value errors (a non-numeric --priority, an unknown --status) come without the usage
        // line; a person fixing the command wants to see it.
        output::stderr_line(&output::for_terminal(&format!("\n{}", usage_for(args))));
    }
    ExitCode::from(code)
}

/// Upstream's worker command line, `hermes [-p NAME] chat -q MESSAGE`, where `-q` is the
/// message; everywhere else `-q` is `--quiet`. So when the verb is `chat`, a `-q` after it is
/// read as `--query` (the global flags before it keep their meaning).
fn upstream_chat_query(mut args: Vec<OsString>) -> Vec<OsString> {
    const WITH_VALUE: [&str; 4] = ["--home", "-p", "--profile", "--color"];
    let mut at = 1;
    while let Some(word) = args.get(at).and_then(|a| a.to_str()) {
        if WITH_VALUE.contains(&word) {
            at += 2;
        } else if word.starts_with('-') {
            at += 1;
        } else {
            break;
        }
    }
    if args.get(at).and_then(|a| a.to_str()) != Some("chat") {
        return args;
    }
    for arg in args.iter_mut().skip(at + 1) {
        if arg == "--" {
            break;
        }
        if arg == "-q" {
            *arg = OsString::from("--query");
        }
    }
    args
}

/// `--color WHEN` and `--json` as given before any `--`, for the errors clap reports before
/// there is a parsed command line.
fn early_flags(args: &[OsString]) -> (Option<anstream::ColorChoice>, bool) {
    let mut color = None;
    let mut json = false;
    let mut words = args.iter().skip(1).filter_map(|a| a.to_str());
    while let Some(word) = words.next() {
        let when = match word {
            "--" => break,
            "--json" => {
                json = true;
                continue;
            }
            "--color" => words.next(),
            _ => word.strip_prefix("--color="),
        };
        if let Some(when) =
            when.and_then(|w| <ColorChoice as clap::ValueEnum>::from_str(w, false).ok())
        {
            color = Some(anstream_choice(when));
        }
    }
    (color, json)
}

fn anstream_choice(choice: ColorChoice) -> anstream::ColorChoice {
    match choice {
        ColorChoice::Auto => anstream::ColorChoice::Auto,
        ColorChoice::Always => anstream::ColorChoice::Always,
        ColorChoice::Never => anstream::ColorChoice::Never,
    }
}

fn execute(cli: Cli) -> Result<Outcome, CliError> {
    // These describe the command line itself: no home, no board, no config.
    match &cli.command {
        Command::Completions(a) => return completions::run(a),
        Command::Man(a) => return man::run(a),
        Command::Kanban(_) | Command::Gateway(_) | Command::Chat(_) => {}
    }
    let home = match &cli.home {
        Some(dir) if dir.as_os_str().is_empty() => {
            return Err(CliError::usage("--home needs a directory"))
        }
        Some(dir) => Home::from_vars(
            Some(dir.clone().into_os_string()),
            None,
            std::env::var_os("HERMES_GATEWAY_LOCK_DIR"),
        )?,
        None => Home::from_env()?,
    };
    output::detail(&format!("home: {}", home.root().display()));
    if cli.command.reads_config() {
        output::detail(&format!("config: {}", home.config_path().display()));
    }
    output::detail(&format!("board: {}", home.db_path().display()));
    // Board-only verbs do not read config.yaml at all: a config written by upstream is 15 kB
    // of YAML, whose parsing would cost more than the rest of a `kanban create`. A broken or
    // misspelt config is reported by every verb that uses it, before anything is billed.
    let mut config_broken = false;
    let config = if cli.command.reads_config() && !cli.command.reports_config() {
        match Config::load(&home) {
            Ok(config) => config,
            Err(e) if cli.command.survives_broken_config() => {
                crate::output::warning(&format!(
                    "{:#}; showing the ledger with the default settings",
                    anyhow::Error::from(e)
                ));
                config_broken = true;
                Config::default()
            }
            Err(e) => return Err(e.into()),
        }
    } else {
        Config::default()
    };
    output::register_config(&config);
    if let Ok(key) = std::env::var("OPENAI_API_KEY") {
        output::register_secret(&key);
    }
    // The gateway logs these itself (and again when an edit introduces one).
    if !matches!(cli.command, Command::Gateway(_)) {
        for warning in &config.warnings {
            output::warning(&warning.to_string());
        }
    }
    let ctx = Context {
        home,
        config,
        json: cli.json,
        config_broken,
    };
    match &cli.command {
        Command::Kanban(verb) => match verb {
            KanbanCommand::Init(a) => init::run(&ctx, a),
            KanbanCommand::Create(a) => create::run(&ctx, a),
            KanbanCommand::Show(a) => show::run(&ctx, a),
            KanbanCommand::List(a) => list::run(&ctx, a),
            KanbanCommand::Link(a) => link::run(&ctx, a),
            KanbanCommand::Archive(a) => archive::run(&ctx, a),
            KanbanCommand::Decompose(a) => decompose::run(&ctx, a),
            KanbanCommand::Usage(a) => usage::run(&ctx, a),
            KanbanCommand::Unpark(a) => unpark::run(&ctx, a),
            KanbanCommand::Resume(a) => resume::run(&ctx, a),
            KanbanCommand::AutoDecompose(a) => auto_decompose::run(&ctx, a),
            KanbanCommand::Dispatch(a) => dispatch::run(&ctx, a),
            KanbanCommand::Unblock(a) => unblock::run(&ctx, a),
        },
        Command::Gateway(GatewayCommand::Run(a)) => gateway::run(&ctx, a),
        Command::Gateway(GatewayCommand::Check(a)) => check::run(&ctx, a),
        Command::Chat(a) => chat::run(&ctx, a, cli.profile.clone()),
        // Already answered above; answering again is as right.
        Command::Completions(a) => completions::run(a),
        Command::Man(a) => man::run(a),
    }
}

/// Who a recovery verb records as having acted: `--by`, else `$USER`, else `user`.
pub fn operator(by: Option<&str>) -> String {
    by.map(str::to_owned)
        .or_else(|| std::env::var("USER").ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "user".to_owned())
}

/// Milliseconds as unix seconds, rounded up (a card is never due earlier than shown), as
/// `show --json` prints `next_attempt_at`.
pub fn round_up_secs(ms: i64) -> i64 {
    ms.div_euclid(1000) + i64::from(ms.rem_euclid(1000) != 0)
}

/// The command line's definition as every help page, completion script and man page shows it:
/// the derived one, with each command's exit status ([`exit_status`]).
pub fn command() -> clap::Command {
    exit_status::document(<Cli as clap::CommandFactory>::command())
}

/// The usage line of the deepest subcommand named in `args`.
fn usage_for(args: &[OsString]) -> String {
    let mut cmd = command();
    cmd.build();
    let words: Vec<&str> = args
        .iter()
        .skip(1)
        .filter_map(|a| a.to_str())
        .filter(|a| !a.starts_with('-'))
        .collect();
    deepest_usage(&mut cmd, &words)
}

fn deepest_usage(cmd: &mut clap::Command, words: &[&str]) -> String {
    if let Some((first, rest)) = words.split_first() {
        if let Some(sub) = cmd.find_subcommand_mut(first) {
            return deepest_usage(sub, rest);
        }
    }
    cmd.render_usage().to_string()
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain()
        .filter_map(|c| c.downcast_ref::<io::Error>())
        .any(|io| io.kind() == io::ErrorKind::BrokenPipe)
}

/// Replaces the default panic report (multi-line, with a backtrace hint) with one line; the
/// process then exits 101 from `main`. Only a bug can get here: bad input is an error.
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown cause".to_owned());
        let place = info
            .location()
            .map(|l| format!(" ({}:{})", l.file(), l.line()))
            .unwrap_or_default();
        output::internal_error(&format!("{message}{place}; this is a bug"));
    }));
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
        command().debug_assert();
    }

    #[test]
    fn json_is_accepted_before_and_after_the_verb() {
        for args in [
            ["hermes", "kanban", "--json", "list"],
            ["hermes", "kanban", "list", "--json"],
            ["hermes", "--json", "kanban", "list"],
        ] {
            let cli = Cli::try_parse_from(args).unwrap();
            assert!(cli.json, "{args:?}");
        }
    }

    #[test]
    fn usage_errors_exit_two() {
        for args in [
            vec!["hermes", "kanban"],
            vec!["hermes", "kanban", "create"],
            vec!["hermes", "kanban", "create", "x", "--priority", "high"],
            vec!["hermes", "kanban", "list", "--status", "nope"],
            vec!["hermes", "kanban", "archive"],
            vec!["hermes", "kanban", "decompose"],
            vec!["hermes", "kanban", "decompose", "t_1", "--all"],
            vec!["hermes", "kanban", "decompose", "--all", "--force"],
            vec!["hermes", "kanban", "frobnicate"],
            vec!["hermes", "kanban", "unpark"],
            vec!["hermes", "kanban", "resume", "extra"],
            vec!["hermes", "kanban", "auto-decompose", "t_1"],
            vec!["hermes", "kanban", "auto-decompose", "t_1", "maybe"],
            vec!["hermes", "kanban", "usage", "--card", "t_1"],
            vec!["hermes", "kanban", "usage", "--calls", "--since", "soon"],
            vec!["hermes", "kanban", "usage", "--since", "2026-02-30"],
        ] {
            let e = Cli::try_parse_from(&args).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{args:?}");
        }
    }

    #[test]
    fn color_and_json_are_read_ahead_of_clap_up_to_a_double_dash() {
        let early = |args: &[&str]| {
            let args: Vec<OsString> = args.iter().map(OsString::from).collect();
            early_flags(&args)
        };
        use anstream::ColorChoice::{Always, Never};
        assert_eq!(
            early(&["hermes", "--color", "never", "x"]),
            (Some(Never), false)
        );
        assert_eq!(
            early(&["hermes", "x", "--color=always", "--json"]),
            (Some(Always), true)
        );
        assert_eq!(early(&["hermes", "--color", "sometimes"]), (None, false));
        assert_eq!(
            early(&["hermes", "--", "--json", "--color=never"]),
            (None, false)
        );
    }

    #[test]
    fn upstreams_chat_dash_q_is_the_message_and_nowhere_else() {
        let rewrite = |args: &[&str]| -> Vec<String> {
            upstream_chat_query(args.iter().map(OsString::from).collect())
                .into_iter()
                .map(|a| a.into_string().unwrap())
                .collect()
        };
        assert_eq!(
            rewrite(&[
                "hermes",
                "-p",
                "coder",
                "chat",
                "-q",
                "work kanban task t_1"
            ]),
            [
                "hermes",
                "-p",
                "coder",
                "chat",
                "--query",
                "work kanban task t_1"
            ]
        );
        assert_eq!(
            rewrite(&["hermes", "--home", "/h", "-q", "chat", "-q", "m"]),
            ["hermes", "--home", "/h", "-q", "chat", "--query", "m"]
        );
        assert_eq!(
            rewrite(&["hermes", "kanban", "create", "chat", "-q"]),
            ["hermes", "kanban", "create", "chat", "-q"]
        );
        let cli = Cli::try_parse_from(rewrite(&["hermes", "-p", "x", "chat", "-q", "m"])).unwrap();
        assert_eq!(cli.profile.as_deref(), Some("x"));
        assert!(matches!(cli.command, Command::Chat(chat::ChatArgs { ref query }) if query == "m"));
    }

    #[test]
    fn cli_errors_know_their_exit_codes() {
        assert_eq!(CliError::usage("x").exit_code(), 2);
        assert_eq!(CliError::not_implemented("kanban usage").exit_code(), 1);
        let e: CliError = anyhow::anyhow!("inner").context("outer").into();
        assert_eq!(e.to_string(), "outer: inner");
    }
}
