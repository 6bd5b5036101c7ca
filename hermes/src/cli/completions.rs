//! `hermes completions SHELL`: a completion script generated from the command line's definition
//! (clap_complete), so it never lags behind a new verb or flag.

use clap::Args;
use clap_complete::Shell;

use super::{write_stdout_raw, CliError, Outcome};

/// Arguments of `completions`.
#[derive(Debug, Args)]
#[command(after_help = "\
Load it in the running shell, or install it where the shell looks:
  bash: hermes completions bash > ~/.local/share/bash-completion/completions/hermes
  zsh:  hermes completions zsh > \"${fpath[1]}/_hermes\"
  fish: hermes completions fish > ~/.config/fish/completions/hermes.fish
`hermes completion [SHELL]`, upstream hermes-agent's spelling, is the same command.")]
pub struct CompletionsArgs {
    /// The shell to complete for (bash when none is named, as upstream's `completion`).
    #[arg(value_enum, default_value_t = Shell::Bash)]
    pub shell: Shell,
}

/// Prints the script on stdout.
pub fn run(args: &CompletionsArgs) -> Result<Outcome, CliError> {
    // Into memory first: clap_complete panics on a failed write, and a closed pipe is no bug.
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut super::command(), "hermes", &mut script);
    write_stdout_raw(&script)?;
    Ok(Outcome::Success)
}
