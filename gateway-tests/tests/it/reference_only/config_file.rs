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

/// An editor that writes `config.yaml` in place (truncate, then write) caught mid-write: the
/// gateway reads the first half of the file, stable for a few ticks, which no longer sets the
/// kill switch. A reload never drops a key the running config set back to its default, so the
/// switch stays off and nothing is billed; one WARN names the keys the half file left out.
#[rstest]
fn a_torn_in_place_edit_never_turns_the_kill_switch_back_on(
    #[with(Config::gateway().kill_switch(false))] board: Board,
) {
    use std::io::Write;

    let target = board.target();
    let aux = board.aux();
    let card = board.create("an idea while auto-decompose is off", &["--triage"]);
    let whole = match std::fs::read_to_string(board.config_path()) {
        Ok(text) => text,
        Err(error) => panic!("cannot read {}: {error}", board.config_path().display()),
    };
    // The half before the kanban section, which carries the switch.
    let half = whole
        .find("kanban:")
        .map_or(String::new(), |at| whole[..at].to_owned());
    let mut run = board.scenario();
    run.start().watch(crate::support::span_of_ticks(target, 1));
    let mut file = match std::fs::File::options()
        .write(true)
        .truncate(true)
        .open(board.config_path())
    {
        Ok(file) => file,
        Err(error) => panic!("cannot open {}: {error}", board.config_path().display()),
    };
    let _ = file.write_all(half.as_bytes());
    let _ = file.flush();
    // Longer than a tick and than the reader's two reads: the half file is what it finds.
    run.watch(crate::support::span_of_ticks(target, crate::PROBE_TICKS));
    let _ = file.write_all(&whole.as_bytes()[half.len()..]);
    drop(file);
    run.watch(crate::support::span_of_ticks(target, 1));
    let seen = run.stop();
    let log = seen.log();

    holds(
        "the half file left out the kill switch (the scenario ran)",
        !half.is_empty() && !half.contains("auto_decompose") && whole.contains("auto_decompose"),
    )
    .note(|| format!("half:\n{half}"))
    .gap(GapKind::KillSwitchIgnored);
    bound(
        "bills while auto-decompose is off, config.yaml caught mid-write",
        aux.billed_for(&card),
    )
    .at_most(0)
    .over(&seen)
    .context(|| log.clone())
    .gap(GapKind::KillSwitchIgnored);
    holds(
        "one WARN names the keys the half file no longer sets, kept at their running values",
        log.lines()
            .filter(|line| {
                line.contains(" WARN ")
                    && line.contains("no longer sets")
                    && line.contains("kanban.auto_decompose")
            })
            .count()
            == 1,
    )
    .context(|| log.clone())
    .gap(GapKind::SilentMisconfiguration);
}
