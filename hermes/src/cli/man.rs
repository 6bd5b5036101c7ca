//! `hermes man [COMMAND]...`: the man page of `hermes`, or of one of its commands, generated from
//! the command line's definition (clap_mangen) and printed as roff.

use anyhow::Context as _;
use clap::Args;

use super::{write_stdout_raw, CliError, Outcome};

/// Arguments of `man`.
#[derive(Debug, Args)]
#[command(after_help = "\
Read it with `hermes man | man -l -`, or install it: `hermes man > hermes.1`, \
`hermes man kanban create > hermes-kanban-create.1`.")]
pub struct ManArgs {
    /// The command whose page to print (`kanban`, `kanban create`, ...); none for the page of
    /// `hermes` itself.
    #[arg(value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// Prints the page on stdout.
pub fn run(args: &ManArgs) -> Result<Outcome, CliError> {
    let mut cmd = super::command();
    // Gives each subcommand its page's name (`hermes-kanban-create`).
    cmd.build();
    let mut page = &cmd;
    for word in &args.command {
        page = page
            .get_subcommands()
            .find(|sub| sub.get_name() == word || sub.get_all_aliases().any(|a| a == word))
            .ok_or_else(|| {
                CliError::usage(format!(
                    "no command `{word}` under `{}`",
                    page.get_bin_name().unwrap_or(page.get_name())
                ))
            })?;
    }
    let mut roff = Vec::new();
    clap_mangen::Man::new(page.clone())
        .render(&mut roff)
        .context("rendering the man page")?;
    write_stdout_raw(&roff)?;
    Ok(Outcome::Success)
}
