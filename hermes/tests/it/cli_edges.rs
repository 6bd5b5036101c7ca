//! The CLI's edges as a person and a script meet them: help pages (global options apart, every
//! command's exit status), `show`'s events in words, `usage --calls` and `list` columns that
//! line up, a bare `decompose`, upstream's `completion`, and an empty `list`.

use crate::support::{fake_provider, single_task_reply, status_reply, Scratch};

/// Every command that runs something, as words after `hermes`.
const COMMANDS: &[&[&str]] = &[
    &["kanban", "init"],
    &["kanban", "create"],
    &["kanban", "show"],
    &["kanban", "list"],
    &["kanban", "link"],
    &["kanban", "archive"],
    &["kanban", "decompose"],
    &["kanban", "usage"],
    &["kanban", "unpark"],
    &["kanban", "resume"],
    &["kanban", "auto-decompose"],
    &["gateway", "run"],
    &["gateway", "check"],
    &["completions"],
    &["man"],
];

#[test]
fn every_commands_help_keeps_global_options_apart_and_says_its_exit_status() {
    let s = Scratch::new();
    for words in COMMANDS {
        let mut args = words.to_vec();
        args.push("--help");
        let help = s.ok(&args).stdout;
        let sections: Vec<&str> = help
            .lines()
            .filter(|l| l.ends_with(':') && !l.starts_with(' '))
            .collect();
        let own = sections.iter().position(|s| *s == "Options:");
        let global = sections.iter().position(|s| *s == "Global options:");
        let status = sections.iter().position(|s| *s == "Exit status:");
        assert!(
            own < global && global < status,
            "{words:?}: {sections:?}\n{help}"
        );
        let (options, rest) = help.split_once("Global options:").unwrap();
        assert!(
            !options.contains("--json") && rest.contains("--json"),
            "{words:?}:\n{help}"
        );
        assert!(
            help.contains("\n  0  ") && help.contains("\n  2  usage error"),
            "{words:?}:\n{help}"
        );
    }
    // The man page carries it too, from the same place.
    let man = s.ok(&["man", "kanban", "show"]).stdout;
    assert!(man.contains("Exit status:"), "{man}");
}

#[test]
fn the_help_of_a_verb() {
    let s = Scratch::new();
    insta::assert_snapshot!(s.ok(&["kanban", "unpark", "--help"]).stdout);
}

#[test]
fn a_bare_decompose_names_both_ways_to_call_it() {
    let s = Scratch::new();
    let out = s.run(&["kanban", "decompose"]);
    assert_eq!(out.code, Some(2), "{out}");
    assert!(out.stderr.contains("<ID|--all>"), "{out}");
    let json = s.run(&["kanban", "decompose", "--json"]);
    assert_eq!(json.code, Some(2), "{json}");
    assert!(json.stderr.contains("<ID|--all>"), "{json}");
}

#[test]
fn upstreams_completion_is_the_same_command() {
    let s = Scratch::new();
    let ours = s.ok(&["completions", "bash"]).stdout;
    assert!(ours.contains("complete "), "{ours}");
    assert_eq!(s.ok(&["completion", "bash"]).stdout, ours);
    // Upstream's form with no shell named prints bash's.
    assert_eq!(s.ok(&["completion"]).stdout, ours);
    assert_ne!(s.ok(&["completion", "zsh"]).stdout, ours);
}

#[test]
fn an_empty_list_prints_nothing_a_script_would_read_as_a_card() {
    let s = Scratch::new();
    let out = s.ok(&["kanban", "list"]);
    assert_eq!(out.stdout, "", "{out}");
    assert!(out.stderr.contains("no matching cards"), "{out}");
    assert_eq!(s.ok(&["-q", "kanban", "list"]).stderr, "");
    assert_eq!(s.json(&["kanban", "list", "--json"]), serde_json::json!([]));
    s.create("one", &[]);
    assert_eq!(s.ok(&["kanban", "list", "--status", "done"]).stdout, "");
    assert_eq!(s.ok(&["kanban", "list"]).stdout.lines().count(), 1);
}

/// Display columns where each cell of `line` starts (cells are two or more spaces apart).
fn cell_starts(line: &str) -> Vec<usize> {
    use unicode_width::UnicodeWidthChar;
    let (mut starts, mut column, mut gap) = (vec![0], 0, 0);
    for ch in line.chars() {
        if ch == ' ' {
            gap += 1;
        } else {
            if gap >= 2 {
                starts.push(column);
            }
            gap = 0;
        }
        column += ch.width().unwrap_or(0);
    }
    starts
}

#[test]
fn list_and_usage_calls_columns_line_up_whatever_the_text() {
    let provider = fake_provider(status_reply(500));
    let s = Scratch::new();
    s.write_config(&format!(
        "model:\n  base_url: {}\n  default: fake-model\nauxiliary:\n  transient_retries: 0\n",
        provider.base_url()
    ));
    let failing = s.create(
        "模型 wide title",
        &["--triage", "--assignee", "ünïcödé-and-a-long-name"],
    );
    s.run(&["kanban", "decompose", &failing]);
    provider.reply_default(single_task_reply());
    let ok = s.create("plain", &["--triage", "--assignee", "\u{1b}[31mred"]);
    s.ok(&["kanban", "decompose", &ok]);
    s.ok(&["kanban", "decompose", "--all"]);

    let calls = s.ok(&["--utc", "kanban", "usage", "--calls"]).stdout;
    let lines: Vec<&str> = calls.lines().collect();
    assert_eq!(lines.len(), 2, "{calls}");
    let starts: Vec<Vec<usize>> = lines.iter().map(|l| cell_starts(l)).collect();
    // STARTED, CARD, ORIGIN and ATTEMPT start alike on every line (later cells hold spaces).
    assert_eq!(starts[0][..4], starts[1][..4], "{calls}");
    assert!(lines.iter().all(|l| !l.contains('\u{1b}')));

    let list = s.ok(&["kanban", "list"]).stdout;
    let starts: Vec<Vec<usize>> = list.lines().map(cell_starts).collect();
    assert!(
        starts.len() == 2 && starts[0][..3] == starts[1][..3],
        "{list}"
    );
    assert!(list.contains("\\u{1b}[31mred"), "{list}");
}

#[test]
fn show_tells_events_in_words_and_json_keeps_them_as_stored() {
    let provider = fake_provider(status_reply(500));
    let s = Scratch::new();
    s.write_config(&format!(
        "model:\n  base_url: {}\n  default: fake-model\nauxiliary:\n  transient_retries: 0\n\
         kanban:\n  decompose_backoff_seconds: 30\n",
        provider.base_url()
    ));
    let id = s.create("card", &["--triage"]);
    s.run(&["kanban", "decompose", &id]);
    s.ok(&["kanban", "auto-decompose", &id, "off", "--by", "ops"]);

    let text = s.ok(&["--utc", "kanban", "show", &id]).stdout;
    let events: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("Events ("))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .collect();
    assert_eq!(events.len(), 3, "{text}");
    let time = regex::Regex::new(r"^  \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC  ").unwrap();
    assert!(events.iter().all(|e| time.is_match(e)), "{text}");
    assert!(events[0].ends_with("created: created in triage"), "{text}");
    let failed = regex::Regex::new(
        r"decompose_failed: attempt 1 \(manual\) failed: .*500.*; next attempt from \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$",
    )
    .unwrap();
    assert!(failed.is_match(events[1]), "{text}");
    assert!(
        events[2].ends_with("auto_decompose_disabled: auto-decompose switched off by ops"),
        "{text}"
    );
    assert!(
        !text.contains("next_attempt_at") && !text.contains('{'),
        "{text}"
    );

    let json = s.json(&["kanban", "show", &id, "--json"]);
    let payload = &json["events"][1]["payload"];
    assert_eq!(json["events"][1]["kind"], "decompose_failed");
    assert!(payload["next_attempt_at"].as_f64().is_some(), "{payload}");
    assert_eq!(payload["attempt"], 1);
}
