//! What a test did to its board, as data: every CLI call with its arguments, span, exit and
//! output; every gateway started, stopped or killed; every config written; every row written as
//! another tool would. The fixtures record it as it happens, and the judge reads it beside the
//! request [journal](crate::journal) and the board's rows: which paid calls a person asked for,
//! when a pause was lifted by hand, which links a person made, whether a process ever died
//! uncleanly.
//!
//! A config written is kept as the suite's own config record, `C` (the fixtures' `Config`): this
//! floor does not know how settings are written, only that one was.

use std::ops::Deref;
use std::path::PathBuf;
use std::time::Instant;

use crate::journal::Received;
use crate::stop::StopReport;

/// One thing that happened, and when (monotonic, and wall clock for comparing with rows).
#[derive(Debug, Clone)]
pub struct Happening<C> {
    /// When it happened (for a CLI call: when it started).
    pub at: Instant,
    /// The same moment as unix milliseconds.
    pub at_unix_ms: i64,
    /// What happened.
    pub what: What<C>,
}

/// What happened.
#[derive(Debug, Clone)]
pub enum What<C> {
    /// A CLI call of the target.
    Cli(CliCall),
    /// `config.yaml` was written with this config (the first one when the board was made).
    Config(Box<C>),
    /// `config.yaml` was written by hand (a test's own bytes): what the config says is no longer
    /// known to the fixtures.
    ConfigByHand,
    /// `$HERMES_HOME/.env` was written with these bytes (the first, the fixtures' own, when the
    /// board was made).
    DotEnv(Vec<u8>),
    /// A guarded process (a gateway) started.
    GatewayStarted {
        /// Its pid.
        pid: u32,
        /// Where it logs.
        log: PathBuf,
    },
    /// A guarded process was stopped (SIGTERM, maybe escalated).
    GatewayStopped {
        /// Its pid.
        pid: u32,
        /// What the stop saw.
        report: StopReport,
    },
    /// A guarded process was SIGKILLed on purpose (a crash).
    GatewayKilled {
        /// Its pid.
        pid: u32,
    },
    /// The board file was put in place as a copy of another board's `kanban.db` alone (a backup
    /// restored): that board's history and the requests its provider had received come with it,
    /// since the rows they made are now this board's.
    RestoredFrom {
        /// The source board's history up to the copy.
        happenings: Vec<Happening<C>>,
        /// Every request the source board's provider had received up to the copy.
        received: Vec<Received>,
    },
    /// Rows were written as another tool sharing the board would.
    Arranged {
        /// The statement.
        sql: String,
        /// The card it was about, when it was about one.
        card: Option<String>,
    },
}

/// One CLI call as the history keeps it.
#[derive(Debug, Clone)]
pub struct CliCall {
    /// The arguments after the program (and its prefix), lossily as text.
    pub args: Vec<String>,
    /// When it ended.
    pub ended: Instant,
    /// Its exit code, when it exited by itself.
    pub code: Option<i32>,
    /// Whether it was killed for running past its timeout.
    pub timed_out: bool,
    /// What it printed.
    pub stdout: String,
    /// What it printed on stderr.
    pub stderr: String,
}

impl CliCall {
    /// Whether the call is `kanban <verb> …`.
    pub fn is(&self, verb: &str) -> bool {
        self.args.first().map(String::as_str) == Some("kanban")
            && self.args.get(1).map(String::as_str) == Some(verb)
    }

    /// Whether the call exited 0 in time.
    pub fn succeeded(&self) -> bool {
        self.code == Some(0) && !self.timed_out
    }

    /// Whether `flag` is among the arguments.
    pub fn has(&self, flag: &str) -> bool {
        self.args.iter().any(|arg| arg == flag)
    }

    /// The verb's positional arguments (after `kanban <verb>`, flags and their values left out
    /// where the flag is one of `valued`).
    pub fn positionals(&self, valued: &[&str]) -> Vec<&str> {
        let mut out = Vec::new();
        let mut skip = false;
        for arg in self.args.iter().skip(2) {
            if skip {
                skip = false;
                continue;
            }
            if arg.starts_with("--") {
                skip = valued.contains(&arg.as_str());
                continue;
            }
            out.push(arg.as_str());
        }
        out
    }
}

/// A run's happenings in the order they happened, and what the judge and the explorer read off
/// them.
#[derive(Debug, Clone)]
pub struct Happenings<C>(pub Vec<Happening<C>>);

impl<C> Deref for Happenings<C> {
    type Target = [Happening<C>];

    fn deref(&self) -> &[Happening<C>] {
        &self.0
    }
}

impl<C: Clone> Happenings<C> {
    /// Every CLI call, by start time.
    pub fn cli_calls(&self) -> Vec<(Instant, CliCall)> {
        self.iter()
            .filter_map(|happening| match &happening.what {
                What::Cli(call) => Some((happening.at, call.clone())),
                _ => None,
            })
            .collect()
    }

    /// Every config written, with when it was written.
    pub fn configs(&self) -> Vec<(Instant, C)> {
        self.iter()
            .filter_map(|happening| match &happening.what {
                What::Config(config) => Some((happening.at, (**config).clone())),
                _ => None,
            })
            .collect()
    }

    /// Every `.env` written, with when (the fixtures' own first).
    pub fn dotenvs(&self) -> Vec<(Instant, Vec<u8>)> {
        self.iter()
            .filter_map(|happening| match &happening.what {
                What::DotEnv(bytes) => Some((happening.at, bytes.clone())),
                _ => None,
            })
            .collect()
    }

    /// Whether any process of the run ended uncleanly: SIGKILLed on purpose, stopped only by
    /// escalating to SIGKILL, or a CLI call killed at its timeout. Rows it left in flight are
    /// then expected until a later process closes them.
    pub fn any_unclean_end(&self) -> bool {
        self.iter().any(|happening| match &happening.what {
            What::GatewayKilled { .. } => true,
            What::GatewayStopped { report, .. } => report.escalated,
            What::Cli(call) => call.timed_out,
            _ => false,
        })
    }

    /// The rows written as another tool would: each statement and the card it was about.
    pub fn arranged(&self) -> Vec<(String, Option<String>)> {
        self.iter()
            .filter_map(|happening| match &happening.what {
                What::Arranged { sql, card } => Some((sql.clone(), card.clone())),
                _ => None,
            })
            .collect()
    }

    /// The logs of every gateway started.
    pub fn gateway_logs(&self) -> Vec<PathBuf> {
        let mut logs: Vec<PathBuf> = self
            .iter()
            .filter_map(|happening| match &happening.what {
                What::GatewayStarted { log, .. } => Some(log.clone()),
                _ => None,
            })
            .collect();
        logs.sort();
        logs.dedup();
        logs
    }
}
