//! A `config.yaml` that is not a config file, as the reference says so: one WARN naming what
//! the file is instead, while the last good config stays in force.

use judge::prelude::*;
use rstest::rstest;

use crate::config_file::{run_with, NotAConfig};

#[rstest]
#[case::fifo(NotAConfig::Fifo, "not a regular file (a FIFO)")]
#[case::dev_zero(NotAConfig::DevZero, "not a regular file (a character device)")]
#[case::huge(NotAConfig::Huge, "over the 1024 KiB a configuration file may have")]
fn a_config_that_is_not_a_config_file_gets_one_warning_saying_what_it_is(
    #[case] what: NotAConfig,
    #[case] said: &str,
    #[with(Config::gateway())] board: Board,
) {
    let outcome = run_with(&board, what);
    let warnings = outcome
        .log
        .lines()
        .filter(|line| line.contains(" WARN ") && line.contains("config.yaml"))
        .collect::<Vec<_>>();
    holds(
        format!("one WARN says config.yaml is {said} and the last good config is kept"),
        warnings.len() == 1
            && warnings[0].contains(said)
            && warnings[0].contains("keeping the last good configuration"),
    )
    .over(&outcome.window)
    .note(|| format!("WARN lines naming config.yaml: {warnings:#?}"))
    .gap(GapKind::SilentMisconfiguration);
}
