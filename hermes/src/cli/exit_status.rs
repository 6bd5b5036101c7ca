//! Every command's exit status, in one table, and the one place that renders it into the
//! command's help (and so its man page): an "Exit status:" section after the rest.

/// What each exit code of one command means. Exit 2 is every command's usage error, added by
/// [`section`]; 101 is a bug (documented once, on `hermes` itself).
struct Codes {
    /// The command's path under `hermes` (`["kanban", "create"]`).
    path: &'static [&'static str],
    codes: &'static [(u8, &'static str)],
}

/// The exit codes of every command that runs something.
const TABLE: &[Codes] = &[
    Codes {
        path: &["kanban", "init"],
        codes: &[
            (0, "the board is ready"),
            (1, "it cannot be created or opened"),
        ],
    },
    Codes {
        path: &["kanban", "create"],
        codes: &[
            (0, "created"),
            (
                1,
                "not created: an unknown parent, or the board cannot be written",
            ),
        ],
    },
    Codes {
        path: &["kanban", "show"],
        codes: &[(0, "shown"), (1, "no such card")],
    },
    Codes {
        path: &["kanban", "list"],
        codes: &[
            (0, "listed (also when no card matches)"),
            (1, "the board cannot be read"),
        ],
    },
    Codes {
        path: &["kanban", "link"],
        codes: &[
            (0, "linked, or already linked"),
            (
                1,
                "no such card, or the link would make a cycle (nothing written)",
            ),
        ],
    },
    Codes {
        path: &["kanban", "archive"],
        codes: &[(0, "archived"), (1, "an unknown id: nothing archived")],
    },
    Codes {
        path: &["kanban", "decompose"],
        codes: &[
            (
                0,
                "every attempt made succeeded (with --all: also when none was due)",
            ),
            (
                1,
                "an attempt failed, or was refused before anything was sent (no such card, not \
                 in triage, in flight, the board-wide pause or hourly ceiling without --force; \
                 with --all: the kill switch, a pause or the ceiling stopped the sweep)",
            ),
        ],
    },
    Codes {
        path: &["kanban", "usage"],
        codes: &[(0, "shown"), (1, "--card names no card")],
    },
    Codes {
        path: &["kanban", "unpark"],
        codes: &[
            (0, "unparked"),
            (
                1,
                "no such card, not in triage, not parked, or an attempt in flight (the reason on \
                 stderr, nothing written)",
            ),
        ],
    },
    Codes {
        path: &["kanban", "resume"],
        codes: &[
            (0, "lifted, or no pause was in force"),
            (1, "the board cannot be written"),
        ],
    },
    Codes {
        path: &["kanban", "auto-decompose"],
        codes: &[(0, "done (or already so)"), (1, "no such card")],
    },
    Codes {
        path: &["kanban", "dispatch"],
        codes: &[
            (0, "the pass ran, whether or not it spawned a worker"),
            (
                1,
                "another dispatcher (a gateway, or another dispatch) holds the board, or the \
                 board could not be used",
            ),
        ],
    },
    Codes {
        path: &["kanban", "unblock"],
        codes: &[
            (0, "unblocked"),
            (
                1,
                "no such card, not blocked, or parked by its spawn budget (nothing written)",
            ),
        ],
    },
    Codes {
        path: &["chat"],
        codes: &[
            (
                0,
                "the run's end is recorded (or the run was no longer this worker's)",
            ),
            (
                1,
                "it could not run: outside a run a gateway started, or the board could not be \
                 used",
            ),
            (
                75,
                "the provider rate-limited the worker (the board is paused)",
            ),
            (
                78,
                "the provider refused the worker for good (the board is paused)",
            ),
            (143, "SIGTERM or SIGINT stopped it"),
        ],
    },
    Codes {
        path: &["gateway", "run"],
        codes: &[
            (0, "stopped cleanly (SIGTERM or SIGINT)"),
            (
                1,
                "could not start: a bad config.yaml, a board it cannot use, or another gateway \
                 already dispatching the board",
            ),
        ],
    },
    Codes {
        path: &["gateway", "check"],
        codes: &[
            (
                0,
                "`gateway run` would start (the warnings say what would limit its billing)",
            ),
            (
                1,
                "`gateway run` would refuse to start (the reasons are listed first), or the \
                 check itself failed",
            ),
        ],
    },
    Codes {
        path: &["completions"],
        codes: &[(0, "printed"), (1, "stdout could not be written")],
    },
    Codes {
        path: &["man"],
        codes: &[(0, "printed"), (1, "stdout could not be written")],
    },
];

/// What `hermes` itself says of exit codes, for every command.
const ALL_COMMANDS: &str = "\
Exit status: 0 success; 1 failure (`hermes: error: …` on stderr, or one JSON object with \
--json); 2 usage error (nothing was done); 101 a bug. Each command's help says what its codes \
mean.";

/// Adds the "Exit status:" section to `cmd`'s help and to every subcommand's, from the table.
pub fn document(cmd: clap::Command) -> clap::Command {
    let cmd = with_section(cmd, ALL_COMMANDS.to_owned());
    document_below(cmd, &[])
}

fn document_below(cmd: clap::Command, path: &[&str]) -> clap::Command {
    let names: Vec<String> = cmd
        .get_subcommands()
        .map(|sub| sub.get_name().to_owned())
        .collect();
    names.into_iter().fold(cmd, |cmd, name| {
        let mut below: Vec<&str> = path.to_vec();
        below.push(&name);
        let section = codes_of(&below).map(section);
        cmd.mut_subcommand(&name, |sub| {
            let sub = match section {
                Some(text) => with_section(sub, text),
                None => sub,
            };
            document_below(sub, &below)
        })
    })
}

fn codes_of(path: &[&str]) -> Option<&'static [(u8, &'static str)]> {
    TABLE
        .iter()
        .find(|entry| entry.path == path)
        .map(|entry| entry.codes)
}

/// The section: one line per code, then the usage error every command shares.
fn section(codes: &[(u8, &str)]) -> String {
    let mut text = String::from("Exit status:");
    let usage = (
        2,
        "usage error (a bad or missing argument): nothing was done",
    );
    for (code, meaning) in codes.iter().chain([&usage]) {
        text.push_str(&format!("\n  {code}  {}", hanging(meaning)));
    }
    text
}

/// Where a meaning's lines are broken, so that a continued line keeps its indent (help is
/// wrapped at the terminal's width, but without indent; 80 columns fits nearly every one).
const WIDTH: usize = 80;

/// `meaning` broken into lines of at most [`WIDTH`] columns after the code, each continued
/// line indented under the first.
fn hanging(meaning: &str) -> String {
    const INDENT: &str = "     ";
    let mut lines = vec![String::new()];
    for word in meaning.split_whitespace() {
        let line = lines.last_mut().expect("one line at least");
        if !line.is_empty() && INDENT.len() + line.len() + 1 + word.len() > WIDTH {
            lines.push(word.to_owned());
        } else {
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
    }
    lines.join(&format!("\n{INDENT}"))
}

fn with_section(cmd: clap::Command, section: String) -> clap::Command {
    let text = match cmd.get_after_help() {
        Some(before) => format!("{before}\n\n{section}"),
        None => section,
    };
    cmd.after_help(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The leaves of `cmd`: the commands that run something.
    fn leaves(cmd: &clap::Command, path: Vec<String>, into: &mut Vec<Vec<String>>) {
        if cmd.get_subcommands().next().is_none() {
            into.push(path);
            return;
        }
        for sub in cmd.get_subcommands() {
            let mut below = path.clone();
            below.push(sub.get_name().to_owned());
            leaves(sub, below, into);
        }
    }

    #[test]
    fn every_command_documents_its_exit_status_once() {
        let cmd = crate::cli::command();
        let mut all = Vec::new();
        leaves(&cmd, Vec::new(), &mut all);
        assert!(all.len() >= 15, "{all:?}");
        for path in &all {
            let words: Vec<&str> = path.iter().map(String::as_str).collect();
            assert!(codes_of(&words).is_some(), "{words:?} has no exit status");
            let mut sub = &cmd;
            for word in &words {
                sub = sub.find_subcommand(word).unwrap();
            }
            let help = sub
                .get_after_help()
                .map(ToString::to_string)
                .unwrap_or_default();
            assert_eq!(
                help.matches("Exit status:").count(),
                1,
                "{words:?}:\n{help}"
            );
            assert!(help.contains("\n  2  usage error"), "{words:?}:\n{help}");
        }
        for entry in TABLE {
            assert!(
                all.iter()
                    .any(|p| p.iter().map(String::as_str).eq(entry.path.iter().copied())),
                "{:?} is no command",
                entry.path
            );
        }
    }
}
