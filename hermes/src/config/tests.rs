//! The config reader: defaults, every key, wrong types and ranges, `.env`, the home.
use super::*;

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse(text, Path::new("/h/config.yaml"))
}

fn err(text: &str) -> String {
    match parse(text) {
        Ok(c) => panic!("expected an error for {text:?}, got {c:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn missing_and_empty_configs_are_all_defaults() {
    let d = Config::default();
    assert_eq!(parse("").unwrap(), d);
    assert_eq!(parse("# only a comment\n").unwrap(), d);
    assert_eq!(parse("kanban:\nauxiliary:\nmodel:\n").unwrap(), d);
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(Config::load(&Home::at(dir.path())).unwrap(), d);
}

#[test]
fn defaults_match_the_spec() {
    let c = Config::default();
    assert_eq!(
        c.model,
        ModelConfig {
            base_url: None,
            default: None,
            provider: None
        }
    );
    assert_eq!(c.auxiliary.transient_retries, 2);
    assert_eq!(c.auxiliary.timeout, Duration::from_secs(120));
    let k = c.kanban;
    assert!(k.dispatch_in_gateway);
    assert_eq!(k.dispatch_interval, Duration::from_secs(60));
    assert_eq!(k.max_spawn, 2);
    assert_eq!(k.failure_limit, 2);
    assert_eq!(k.spawn_backoff, Duration::from_secs(60));
    assert_eq!(k.worker_max_runtime, Duration::from_secs(1800));
    assert!(k.auto_decompose);
    assert_eq!(k.auto_decompose_per_tick, 3);
    assert_eq!(k.orchestrator_profile, "default");
    assert_eq!(k.default_assignee, "default");
    assert!(k.auto_promote_children);
    assert_eq!(k.decompose_max_attempts, 3);
    assert_eq!(k.decompose_backoff, Duration::from_secs(60));
    assert_eq!(k.decompose_max_children, 8);
    assert_eq!(k.decompose_calls_per_hour, 120);
    assert_eq!(k.provider_cooldown, Duration::from_secs(900));
    assert_eq!(c.agent.max_turns, 30);
}

#[test]
fn every_key_is_read() {
    let c = parse(
        "model:\n  base_url: http://127.0.0.1:9/v1\n  default: fake-model\n  provider: custom\n\
         auxiliary:\n  transient_retries: 0\n  timeout_seconds: 7\n\
         kanban:\n  dispatch_in_gateway: false\n  dispatch_interval_seconds: 0.25\n  max_spawn: 0\n\
         \x20 auto_decompose: false\n  auto_decompose_per_tick: 10\n  orchestrator_profile: boss\n\
         \x20 default_assignee: worker\n  auto_promote_children: false\n  decompose_max_attempts: 5\n\
         \x20 decompose_backoff_seconds: 0\n  decompose_max_children: 4\n  decompose_calls_per_hour: 9\n\
         \x20 provider_cooldown_seconds: 30\n  failure_limit: 4\n  spawn_backoff_seconds: 0.5\n\
         \x20 worker_max_runtime_seconds: 90\nagent:\n  max_turns: 12\n",
    )
    .unwrap();
    assert_eq!(c.model.base_url.as_deref(), Some("http://127.0.0.1:9/v1"));
    assert_eq!(c.model.default.as_deref(), Some("fake-model"));
    assert_eq!(c.model.provider.as_deref(), Some("custom"));
    assert_eq!(
        c.auxiliary,
        AuxiliaryConfig {
            transient_retries: 0,
            timeout: Duration::from_secs(7),
            kanban_decomposer: DecomposerConfig::default(),
        }
    );
    let k = c.kanban;
    assert!(!k.dispatch_in_gateway);
    assert_eq!(k.dispatch_interval, Duration::from_millis(250));
    assert_eq!(k.max_spawn, 0);
    assert_eq!(k.failure_limit, 4);
    assert_eq!(k.spawn_backoff, Duration::from_millis(500));
    assert_eq!(k.worker_max_runtime, Duration::from_secs(90));
    assert_eq!(c.agent.max_turns, 12);
    assert!(!k.auto_decompose);
    assert_eq!(k.auto_decompose_per_tick, 10);
    assert_eq!(k.orchestrator_profile, "boss");
    assert_eq!(k.default_assignee, "worker");
    assert!(!k.auto_promote_children);
    assert_eq!(k.decompose_max_attempts, 5);
    assert_eq!(k.decompose_backoff, Duration::ZERO);
    assert_eq!(k.decompose_max_children, 4);
    assert_eq!(k.decompose_calls_per_hour, 9);
    assert_eq!(k.provider_cooldown, Duration::from_secs(30));
}

#[test]
fn durations_accept_integer_and_float_spellings() {
    for (text, expected) in [
        ("2", Duration::from_secs(2)),
        ("0.5", Duration::from_millis(500)),
        (".5", Duration::from_millis(500)),
        ("1e-1", Duration::from_millis(100)),
        ("1.5e1", Duration::from_secs(15)),
    ] {
        let c = parse(&format!("kanban:\n  dispatch_interval_seconds: {text}\n")).unwrap();
        assert_eq!(c.kanban.dispatch_interval, expected, "{text}");
    }
}

#[test]
fn unknown_keys_are_ignored_at_every_level() {
    let c = parse(
        "toolsets: [web]\nupdates: {check: false}\nmodel:\n  default: m\n  context_length: 9\n\
         auxiliary:\n  vision: {provider: auto}\n  transient_retries: 1\n\
         kanban:\n  auto_subscribe_on_create: true\n  failure_limit: 2\n  no_such_key: 1\n",
    )
    .unwrap();
    assert_eq!(c.model.default.as_deref(), Some("m"));
    assert_eq!(c.auxiliary.transient_retries, 1);
    assert_eq!(c.kanban, KanbanConfig::default());
    // Ignored, and under `kanban:` also reported (see `keys`).
    assert_eq!(c.warnings.len(), 1);
    assert_eq!(c.warnings[0].key, "kanban.no_such_key");
}

#[test]
fn model_as_a_bare_string_is_the_model_name() {
    assert_eq!(
        parse("model: some/model\n")
            .unwrap()
            .model
            .default
            .as_deref(),
        Some("some/model")
    );
    assert_eq!(parse("model: ''\n").unwrap().model, ModelConfig::default());
}

#[test]
fn wrong_types_name_the_dotted_key() {
    let cases = [
        (
            "kanban:\n  dispatch_interval_seconds: fast\n",
            "kanban.dispatch_interval_seconds: expected a number of seconds from 0.01 to 86400, got \"fast\"",
        ),
        (
            "kanban:\n  max_spawn: -1\n",
            "kanban.max_spawn: expected a whole number of workers from 0 to 1000, got -1",
        ),
        (
            "kanban:\n  max_spawn: 1.5\n",
            "kanban.max_spawn: expected a whole number of workers from 0 to 1000, got 1.5",
        ),
        (
            "kanban:\n  auto_decompose: maybe\n",
            "kanban.auto_decompose: expected true or false, got \"maybe\"",
        ),
        (
            "kanban:\n  auto_decompose: 1\n",
            "kanban.auto_decompose: expected true or false, got 1",
        ),
        (
            "kanban:\n  dispatch_in_gateway: [1]\n",
            "kanban.dispatch_in_gateway: expected true or false, got a list",
        ),
        (
            "kanban:\n  auto_promote_children: {}\n",
            "kanban.auto_promote_children: expected true or false, got a mapping",
        ),
        (
            "kanban:\n  auto_decompose_per_tick: 2.5\n",
            "kanban.auto_decompose_per_tick: expected a whole number of cards from 1 to 1000, got 2.5",
        ),
        (
            "kanban:\n  orchestrator_profile: 3\n",
            "kanban.orchestrator_profile: expected a string, got 3",
        ),
        (
            "kanban:\n  default_assignee: true\n",
            "kanban.default_assignee: expected a string, got true",
        ),
        (
            "kanban:\n  decompose_max_attempts: three\n",
            "kanban.decompose_max_attempts: expected a whole number of attempts from 0 to 100, got \"three\"",
        ),
        (
            "kanban:\n  decompose_max_children: 0\n",
            "kanban.decompose_max_children: expected a whole number of children from 1 to 100, got 0",
        ),
        (
            "kanban:\n  decompose_calls_per_hour: 5000000000\n",
            "kanban.decompose_calls_per_hour: expected a whole number of calls from 0 to 100000, got 5000000000",
        ),
        (
            "kanban:\n  decompose_backoff_seconds: soon\n",
            "kanban.decompose_backoff_seconds: expected a number of seconds from 0 to 3600, got \"soon\"",
        ),
        (
            "kanban:\n  provider_cooldown_seconds: '900'\n",
            "kanban.provider_cooldown_seconds: expected a number of seconds from 1 to 86400, got \"900\"",
        ),
        (
            "auxiliary:\n  transient_retries: -2\n",
            "auxiliary.transient_retries: expected a whole number of retries from 0 to 6, got -2",
        ),
        (
            "auxiliary:\n  timeout_seconds: [1]\n",
            "auxiliary.timeout_seconds: expected a number of seconds from 0.01 to 3600, got a list",
        ),
        (
            "model:\n  base_url: 8080\n",
            "model.base_url: expected a string, got 8080",
        ),
        (
            "model:\n  default: [a]\n",
            "model.default: expected a string, got a list",
        ),
        (
            "model:\n  provider: false\n",
            "model.provider: expected a string, got false",
        ),
    ];
    for (text, expected) in cases {
        let message = err(text);
        assert!(message.starts_with("/h/config.yaml: "), "{message}");
        assert!(message.ends_with(expected), "for {text:?}: {message}");
    }
}

/// The YAML text of `value` for a key of `spec`'s unit.
fn yaml_number(spec: &NumericKey, value: f64) -> String {
    match spec.unit {
        Unit::Whole(_) => format!("{}", value as i64),
        Unit::Seconds => format!("{value:?}"),
    }
}

/// `spec.key: value` as a config file.
fn config_setting(spec: &NumericKey, value: &str) -> String {
    let mut text = String::new();
    let segments: Vec<&str> = spec.key.split('.').collect();
    for (depth, segment) in segments.iter().enumerate() {
        text.push_str(&"  ".repeat(depth));
        text.push_str(segment);
        text.push(':');
        text.push(if depth + 1 == segments.len() {
            ' '
        } else {
            '\n'
        });
    }
    text.push_str(value);
    text.push('\n');
    text
}

/// The value `spec.key` was read as: a count, or seconds.
fn read_back(config: &Config, spec: &NumericKey) -> f64 {
    let k = &config.kanban;
    let a = &config.auxiliary;
    match spec.key {
        "auxiliary.transient_retries" => f64::from(a.transient_retries),
        "auxiliary.timeout_seconds" => a.timeout.as_secs_f64(),
        "auxiliary.kanban_decomposer.timeout" => a
            .kanban_decomposer
            .timeout
            .expect("timeout was set")
            .as_secs_f64(),
        "kanban.dispatch_interval_seconds" => k.dispatch_interval.as_secs_f64(),
        "kanban.max_spawn" => f64::from(k.max_spawn),
        "kanban.failure_limit" => f64::from(k.failure_limit),
        "kanban.spawn_backoff_seconds" => k.spawn_backoff.as_secs_f64(),
        "kanban.worker_max_runtime_seconds" => k.worker_max_runtime.as_secs_f64(),
        "agent.max_turns" => f64::from(config.agent.max_turns),
        "kanban.auto_decompose_per_tick" => f64::from(k.auto_decompose_per_tick),
        "kanban.decompose_max_attempts" => f64::from(k.decompose_max_attempts),
        "kanban.decompose_backoff_seconds" => k.decompose_backoff.as_secs_f64(),
        "kanban.decompose_max_children" => f64::from(k.decompose_max_children),
        "kanban.decompose_calls_per_hour" => f64::from(k.decompose_calls_per_hour),
        "kanban.provider_cooldown_seconds" => k.provider_cooldown.as_secs_f64(),
        other => panic!("no read-back for {other}: add it here and to NUMERIC_KEYS' test"),
    }
}

#[test]
fn every_numeric_key_holds_at_both_ends_of_its_range() {
    for spec in &NUMERIC_KEYS {
        // One step past each end: a whole number, or a second (and a hair) for durations.
        let steps: &[f64] = match spec.unit {
            Unit::Whole(_) => &[1.0],
            Unit::Seconds => &[1.0, 1e-3],
        };
        for (end, value) in [("min", spec.min), ("max", spec.max)] {
            let config = parse(&config_setting(spec, &yaml_number(spec, value)))
                .unwrap_or_else(|e| panic!("{} at its {end} {value}: {e}", spec.key));
            assert_eq!(read_back(&config, spec), value, "{} {end}", spec.key);
        }
        for step in steps {
            for (end, value, beyond, limit) in [
                ("min", spec.min - step, spec.below_min, spec.min),
                ("max", spec.max + step, spec.above_max, spec.max),
            ] {
                let text = config_setting(spec, &yaml_number(spec, value));
                match beyond {
                    Beyond::Clamped => {
                        let config = parse(&text).unwrap();
                        assert_eq!(read_back(&config, spec), limit, "{} past {end}", spec.key);
                    }
                    Beyond::Refused => {
                        let message = err(&text);
                        let expected = format!("{}: {}, got ", spec.key, spec.expected());
                        assert!(
                            message.contains(&expected),
                            "{} past its {end} ({value}): {message}",
                            spec.key
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn the_documented_ranges() {
    let shown: Vec<String> = NUMERIC_KEYS
        .iter()
        .map(|k| format!("{}: {}", k.key, k.expected()))
        .collect();
    assert_eq!(
        shown,
        [
            "auxiliary.transient_retries: expected a whole number of retries from 0 to 6",
            "auxiliary.timeout_seconds: expected a number of seconds from 0.01 to 3600",
            "auxiliary.kanban_decomposer.timeout: expected a number of seconds from 0.01 to 3600",
            "kanban.dispatch_interval_seconds: expected a number of seconds from 0.01 to 86400",
            "kanban.max_spawn: expected a whole number of workers from 0 to 1000",
            "kanban.failure_limit: expected a whole number of runs from 0 to 100",
            "kanban.spawn_backoff_seconds: expected a number of seconds from 0 to 3600",
            "kanban.worker_max_runtime_seconds: expected a number of seconds from 1 to 86400",
            "kanban.auto_decompose_per_tick: expected a whole number of cards from 1 to 1000",
            "kanban.decompose_max_attempts: expected a whole number of attempts from 0 to 100",
            "kanban.decompose_backoff_seconds: expected a number of seconds from 0 to 3600",
            "kanban.decompose_max_children: expected a whole number of children from 1 to 100",
            "kanban.decompose_calls_per_hour: expected a whole number of calls from 0 to 100000",
            "kanban.provider_cooldown_seconds: expected a number of seconds from 1 to 86400",
            "agent.max_turns: expected a whole number of turns from 1 to 1000",
        ]
    );
}

#[test]
fn the_example_from_the_issue() {
    assert!(
        err("kanban:\n  auto_decompose_per_tick: 4000000000\n").ends_with(
            "kanban.auto_decompose_per_tick: expected a whole number of cards from 1 to 1000, got \
         4000000000"
        )
    );
    // Beyond every integer type: the YAML reader itself refuses it, naming the key and line;
    // never a wrap.
    let message = err("kanban:\n  decompose_calls_per_hour: 18446744073709551616\n");
    assert!(
        message.contains("line 2") && message.contains("kanban.decompose_calls_per_hour"),
        "{message}"
    );
    assert!(
        err("kanban:\n  decompose_calls_per_hour: 18446744073709551615\n")
            .contains("got 18446744073709551615")
    );
}

#[test]
fn hostile_durations_are_refused_with_the_range() {
    for spec in NUMERIC_KEYS.iter().filter(|k| k.unit == Unit::Seconds) {
        for bad in [
            "1e16", "1.0e300", ".inf", "-.inf", ".nan", ".NaN", "-1", "-1e-300", "1e400",
        ] {
            let message = err(&config_setting(spec, bad));
            assert!(
                message.contains(&format!("{}: {}, got ", spec.key, spec.expected())),
                "{} = {bad}: {message}",
                spec.key
            );
        }
        // Negative zero and tiny values are zero, which only a key whose range starts at 0 takes.
        for tiny in ["-0.0", "-0", "1e-300", "5e-324", "0.000000001"] {
            let text = config_setting(spec, tiny);
            if spec.min == 0.0 {
                let config = parse(&text).unwrap();
                assert!(read_back(&config, spec) < 1e-6, "{} = {tiny}", spec.key);
            } else {
                assert!(err(&text).contains(spec.key), "{} = {tiny}", spec.key);
            }
        }
    }
}

#[test]
fn per_tick_below_one_means_one_and_retries_are_clamped() {
    for v in ["0", "-4"] {
        let c = parse(&format!("kanban:\n  auto_decompose_per_tick: {v}\n")).unwrap();
        assert_eq!(c.kanban.auto_decompose_per_tick, 1);
    }
    for v in ["7", "50", "4000000000", "18446744073709551615"] {
        let c = parse(&format!("auxiliary:\n  transient_retries: {v}\n")).unwrap();
        assert_eq!(c.auxiliary.transient_retries, MAX_TRANSIENT_RETRIES, "{v}");
    }
}

#[test]
fn yaml_one_one_boolean_spellings_are_accepted() {
    assert!(
        !parse("kanban:\n  auto_decompose: 'off'\n")
            .unwrap()
            .kanban
            .auto_decompose
    );
    assert!(
        !parse("kanban:\n  auto_decompose: no\n")
            .unwrap()
            .kanban
            .auto_decompose
    );
    assert!(
        parse("kanban:\n  auto_decompose: Yes\n")
            .unwrap()
            .kanban
            .auto_decompose
    );
}

#[test]
fn sections_that_are_not_mappings_are_named() {
    assert!(err("kanban: 3\n").ends_with("kanban: expected a mapping of keys, got 3"));
    assert!(err("auxiliary: [a]\n").ends_with("auxiliary: expected a mapping of keys, got a list"));
    assert!(err("model: 7\n").ends_with("model: expected a mapping of keys, got 7"));
    assert!(err("- a\n- b\n").contains("(top level): expected a mapping of sections, got a list"));
}

#[test]
fn syntax_errors_carry_path_and_line() {
    let message = err("kanban:\n  auto_decompose: true\n  bad: [unclosed\n");
    assert!(message.starts_with("/h/config.yaml: line "), "{message}");
    assert!(message.contains("invalid YAML"), "{message}");
}

#[test]
fn home_resolution() {
    let h = Home::from_vars(Some("/x/hh".into()), Some("/x/home".into()), None).unwrap();
    assert_eq!(h.root(), Path::new("/x/hh"));
    assert_eq!(h.db_path(), Path::new("/x/hh/kanban.db"));
    assert_eq!(h.config_path(), Path::new("/x/hh/config.yaml"));
    assert_eq!(h.env_path(), Path::new("/x/hh/.env"));
    assert_eq!(h.lock_dir(), Path::new("/x/hh/locks"));
    let h = Home::from_vars(Some("".into()), Some("/x/home".into()), Some("/l".into())).unwrap();
    assert_eq!(h.root(), Path::new("/x/home/.hermes"));
    assert_eq!(h.lock_dir(), Path::new("/l"));
    assert!(matches!(
        Home::from_vars(None, None, None),
        Err(ConfigError::NoHome)
    ));
    assert!(matches!(
        Home::from_vars(Some("".into()), Some("".into()), None),
        Err(ConfigError::NoHome)
    ));
}

#[test]
fn dotenv_lines() {
    let vars = parse_dotenv(
        "# a comment\n\nOPENAI_API_KEY=sk-1\nexport QUOTED=\"two words\"\nSINGLE='x y'\n\
         SPACED = padded  \nTRAIL=value # note\nHASH=a#b\nnot a pair\n=novalue\nMISMATCH=\"open\n",
    );
    assert_eq!(vars.get("OPENAI_API_KEY").map(String::as_str), Some("sk-1"));
    assert_eq!(vars.get("QUOTED").map(String::as_str), Some("two words"));
    assert_eq!(vars.get("SINGLE").map(String::as_str), Some("x y"));
    assert_eq!(vars.get("SPACED").map(String::as_str), Some("padded"));
    assert_eq!(vars.get("TRAIL").map(String::as_str), Some("value"));
    assert_eq!(vars.get("HASH").map(String::as_str), Some("a#b"));
    assert_eq!(vars.get("MISMATCH").map(String::as_str), Some("\"open"));
    assert_eq!(vars.len(), 7, "{vars:?}");
    assert_eq!(
        parse_dotenv("K=1\nK=2\n").get("K").map(String::as_str),
        Some("2")
    );
}

/// What a general dotenv parser (dotenvy) does otherwise: a quote is not carried to the next
/// line, and `$NAME`, `\` and spaces in a value are kept as written.
#[test]
fn a_dotenv_value_is_taken_as_written_and_an_open_quote_ends_with_its_line() {
    let vars = parse_dotenv("A=\"open\nOPENAI_API_KEY=sk-$HOME\\q x\n");
    assert_eq!(vars.get("A").map(String::as_str), Some("\"open"));
    assert_eq!(
        vars.get("OPENAI_API_KEY").map(String::as_str),
        Some("sk-$HOME\\q x")
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(".env"), "HERMES_DOTENV_PROBE=1\n").unwrap();
    assert_eq!(read_dotenv(&Home::at(dir.path())).vars.len(), 1);
    assert!(
        std::env::var_os("HERMES_DOTENV_PROBE").is_none(),
        "the process environment is never written"
    );
}

#[test]
fn a_bad_dotenv_line_is_skipped_with_its_number_and_the_rest_is_kept() {
    let bytes = b"# keys\nBROKEN=\xff\xfe\r\nno equals sign\n = lonely\nOPENAI_API_KEY=sk-kept\r\n";
    let env = parse_dotenv_bytes(bytes, Path::new("/h/.env"));
    assert_eq!(
        env.vars.get("OPENAI_API_KEY").map(String::as_str),
        Some("sk-kept")
    );
    assert_eq!(env.vars.len(), 1, "{:?}", env.vars);
    assert_eq!(env.warnings.len(), 3, "{:?}", env.warnings);
    assert!(env.warnings[0].starts_with("/h/.env: line 2: not valid UTF-8; the line is skipped"));
    assert!(env.warnings[1].starts_with("/h/.env: line 3: no `=`"));
    assert!(env.warnings[2].starts_with("/h/.env: line 4: no variable name"));
    // The invalid bytes themselves are never echoed.
    assert!(!env.warnings.iter().any(|w| w.contains('\u{fffd}')));
}

#[test]
fn api_key_prefers_the_process_environment() {
    let dotenv = || parse_dotenv("OPENAI_API_KEY=from-file\n");
    assert_eq!(
        api_key_from(Some("from-env".into()), dotenv).as_deref(),
        Some("from-env")
    );
    assert_eq!(api_key_from(None, dotenv).as_deref(), Some("from-file"));
    assert_eq!(
        api_key_from(Some("  ".into()), dotenv).as_deref(),
        Some("from-file")
    );
    assert_eq!(api_key_from(None, BTreeMap::new).as_deref(), None);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(".env"), "export OPENAI_API_KEY='sk-x'\n").unwrap();
    assert_eq!(
        read_dotenv(&Home::at(dir.path()))
            .vars
            .get("OPENAI_API_KEY")
            .map(String::as_str),
        Some("sk-x")
    );
}

#[test]
fn only_a_regular_file_within_the_size_limit_is_read_as_config() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    assert_eq!(read_config_file(&path).unwrap(), None, "missing: no file");
    std::fs::write(&path, "kanban:\n  auto_decompose: false\n").unwrap();
    assert!(read_config_file(&path).unwrap().is_some());

    std::fs::remove_file(&path).unwrap();
    nix::unistd::mkfifo(&path, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let started = std::time::Instant::now();
    let fifo = read_config_file(&path).unwrap_err().to_string();
    assert!(
        started.elapsed() < std::time::Duration::from_secs(1),
        "a FIFO never blocks"
    );
    assert!(
        fifo.ends_with(
            "not a regular file (a FIFO); hermes reads configuration only from a regular file"
        ),
        "{fifo}"
    );

    std::fs::remove_file(&path).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &path).unwrap();
    let zero = read_config_file(&path).unwrap_err().to_string();
    assert!(
        zero.contains("not a regular file (a character device)"),
        "{zero}"
    );

    std::fs::remove_file(&path).unwrap();
    std::fs::create_dir(&path).unwrap();
    assert!(read_config_file(&path)
        .unwrap_err()
        .to_string()
        .contains("(a directory)"));
    std::fs::remove_dir(&path).unwrap();

    // At the limit it is read; one byte more is refused, unread.
    let at_limit = "#".repeat(MAX_CONFIG_BYTES as usize);
    std::fs::write(&path, &at_limit).unwrap();
    assert_eq!(
        read_config_file(&path).unwrap().map(|t| t.len()),
        Some(at_limit.len())
    );
    std::fs::write(&path, format!("{at_limit}#")).unwrap();
    let large = read_config_file(&path).unwrap_err().to_string();
    assert!(
        large.contains("1048577 bytes, over the 1024 KiB"),
        "{large}"
    );

    std::fs::write(&path, b"kanban: caf\xe9\n").unwrap();
    let latin1 = read_config_file(&path).unwrap_err();
    assert!(matches!(latin1, ConfigError::Read { .. }), "{latin1:?}");
}

#[test]
fn prices_are_read_per_model() {
    assert!(parse("").unwrap().kanban.prices.is_empty());
    let c = parse(
        "kanban:\n  prices:\n    gpt-4o-mini: {input: 0.15, output: 0.6}\n    \
         local/llama: {input: 0, output: 0}\n    big:\n      input: 3\n      output: 15\n",
    )
    .unwrap();
    let p = &c.kanban.prices;
    assert_eq!(p.len(), 3);
    assert_eq!(
        p["gpt-4o-mini"],
        Price {
            input: 0.15,
            output: 0.6
        }
    );
    assert_eq!(
        p["local/llama"],
        Price {
            input: 0.0,
            output: 0.0
        }
    );
    assert_eq!(p["big"].output, 15.0);
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    // An empty mapping, or none, is no prices.
    assert!(parse("kanban:\n  prices: {}\n")
        .unwrap()
        .kanban
        .prices
        .is_empty());
    assert!(parse("kanban:\n  prices:\n")
        .unwrap()
        .kanban
        .prices
        .is_empty());
}

#[test]
fn bad_prices_name_the_key() {
    for (yaml, expected) in [
        (
            "kanban:\n  prices: 3\n",
            "/h/config.yaml: kanban.prices: expected a mapping of model name",
        ),
        (
            "kanban:\n  prices:\n    m: 0.5\n",
            "kanban.prices.m: expected {input: USD, output: USD} per million tokens, got 0.5",
        ),
        (
            "kanban:\n  prices:\n    m: {input: -1, output: 1}\n",
            "kanban.prices.m.input: expected a non-negative number (USD per million tokens) of at \
             most 1000000, got -1",
        ),
        (
            "kanban:\n  prices:\n    m: {input: 1, output: .nan}\n",
            "kanban.prices.m.output: expected a non-negative number",
        ),
        (
            "kanban:\n  prices:\n    m: {input: 1, output: .inf}\n",
            "kanban.prices.m.output: expected a non-negative number",
        ),
        (
            "kanban:\n  prices:\n    m: {input: 1e308, output: 1}\n",
            "kanban.prices.m.input: expected a non-negative number (USD per million tokens) of \
             at most 1000000, got 1e308",
        ),
        (
            "kanban:\n  prices:\n    m: {input: '1', output: 1}\n",
            "kanban.prices.m.input: expected a non-negative number (USD per million tokens) of at \
             most 1000000, got \"1\"",
        ),
        (
            "kanban:\n  prices:\n    m: {input: 1}\n",
            "kanban.prices.m.output: missing",
        ),
        (
            "kanban:\n  prices:\n    m: {input: 1, output: 2, cached: 0.5}\n",
            "kanban.prices.m: unknown field \"cached\"; a price has only input and output",
        ),
        (
            "kanban:\n  prices:\n    7: {input: 1, output: 2}\n",
            "kanban.prices: a model name must be a string, got 7",
        ),
    ] {
        let e = err(yaml);
        assert!(e.contains(expected), "{yaml:?}: {e}");
    }
}

#[test]
fn a_misspelt_prices_key_is_still_hinted() {
    let c = parse("kanban:\n  price:\n    m: {input: 1, output: 2}\n").unwrap();
    assert!(c.kanban.prices.is_empty());
    let hints: Vec<String> = c.warnings.iter().map(ToString::to_string).collect();
    assert!(
        hints
            .iter()
            .any(|w| w.contains("kanban.price:") && w.contains("did you mean kanban.prices?")),
        "{hints:?}"
    );
}

#[test]
fn a_reload_that_drops_keys_keeps_their_running_values() {
    let path = Path::new("/h/config.yaml");
    let running = parse(
        "model:\n  default: m\nauxiliary:\n  kanban_decomposer:\n    timeout: 30\n\
         kanban:\n  auto_decompose: false\n  decompose_max_attempts: 5\n",
    )
    .unwrap();
    assert_eq!(
        running
            .raw
            .set_keys
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        [
            "auxiliary.kanban_decomposer.timeout",
            "kanban.auto_decompose",
            "kanban.decompose_max_attempts",
            "model.default"
        ]
    );
    // Caught mid-write: the first lines only, one value changed.
    let torn = parse("model:\n  default: other\n").unwrap();
    assert!(
        torn.kanban.auto_decompose,
        "alone, a missing switch is its default"
    );
    let dropped: Vec<String> = running
        .raw
        .set_keys
        .difference(&torn.raw.set_keys)
        .cloned()
        .collect();
    let kept = running.keeping(&torn, &dropped, path).unwrap();
    assert!(!kept.kanban.auto_decompose, "the running value is kept");
    assert_eq!(kept.kanban.decompose_max_attempts, 5);
    assert_eq!(
        kept.auxiliary.kanban_decomposer.timeout,
        Some(Duration::from_secs(30))
    );
    assert_eq!(
        kept.model.default.as_deref(),
        Some("other"),
        "what it sets, it sets"
    );
    // A section written as something else is replaced by the kept keys' mapping.
    let odd = parse("kanban: 3\n");
    assert!(odd.is_err());
}

#[test]
fn a_file_changed_a_moment_ago_is_read_twice_to_the_same_text() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, "kanban:\n  auto_decompose: false\n").unwrap();
    let started = std::time::Instant::now();
    let fresh = read_settled(&path).unwrap();
    assert!(
        started.elapsed() >= REREAD_AFTER,
        "a fresh file is read again"
    );
    assert_eq!(fresh.as_deref(), Some("kanban:\n  auto_decompose: false\n"));
    let old = std::time::SystemTime::now() - Duration::from_secs(60);
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(old)
        .unwrap();
    // Its change time moved with the new modification time: still read twice, still the same.
    assert_eq!(read_settled(&path).unwrap(), fresh);
    assert_eq!(read_settled(&dir.path().join("none.yaml")).unwrap(), None);
}
