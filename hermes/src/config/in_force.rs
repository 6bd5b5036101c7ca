//! The bounds a configuration puts in force, and where each value came from: what `hermes
//! gateway check` shows before anything is billed. The keys, kinds and defaults are the table's
//! (`table`); this only pairs each value in force with its origin.

use std::collections::BTreeSet;

use serde_json::Value as Json;
use serde_norway::Value;

use super::{Config, Kind};

/// Where a value in force came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The key is not written: its default.
    Default,
    /// `config.yaml` writes the key.
    File,
    /// Another key, one upstream hermes-agent defines, stands in for it (it is stricter).
    UpstreamKey(&'static str),
}

/// One bound: its key, the value in force and where that came from.
#[derive(Debug, Clone, PartialEq)]
pub struct InForce {
    /// The dotted key.
    pub key: &'static str,
    /// Its value in force: a number (seconds for a duration), a flag, or null when unset.
    pub value: Json,
    /// Whether the value is a number of seconds.
    pub seconds: bool,
    pub source: Source,
}

/// The dotted keys a `config.yaml` text writes (with a value other than null), as its reader
/// sees them: a bare `model: NAME`, upstream's form, writes `model.default`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WrittenKeys(BTreeSet<String>);

impl WrittenKeys {
    /// The keys `text` writes; none when it is not a YAML mapping (a broken file is reported by
    /// the reader, not here).
    pub fn of(text: &str) -> WrittenKeys {
        let mut written = BTreeSet::new();
        if let Ok(Value::Mapping(top)) = serde_norway::from_str::<Value>(text) {
            collect(&top, "", &mut written);
            if matches!(top.get("model"), Some(Value::String(_))) {
                written.insert("model.default".to_owned());
            }
        }
        WrittenKeys(written)
    }

    /// Whether the text writes `key`.
    pub fn contains(&self, key: &str) -> bool {
        self.0.contains(key)
    }
}

fn collect(map: &serde_norway::Mapping, prefix: &str, into: &mut BTreeSet<String>) {
    for (name, value) in map {
        let Value::String(name) = name else { continue };
        let key = format!("{prefix}{name}");
        match value {
            Value::Null => {}
            Value::Mapping(inner) => {
                collect(inner, &format!("{key}."), into);
                into.insert(key);
            }
            _ => {
                into.insert(key);
            }
        }
    }
}

impl Config {
    /// Every bound in force (each key of the table that holds a number or a switch), in the
    /// table's order, with where its value came from; `written` is what `config.yaml` writes.
    pub fn bounds_in_force(&self, written: &WrittenKeys) -> Vec<InForce> {
        let values = [
            self.model.in_force(),
            self.auxiliary.in_force(),
            self.kanban.in_force(),
            self.agent.in_force(),
        ];
        values
            .into_iter()
            .flatten()
            .filter_map(|(row, value)| {
                let seconds = match row.kind {
                    Kind::Seconds { .. } => true,
                    Kind::Flag { .. } | Kind::Whole { .. } => false,
                    _ => return None,
                };
                let source = if written.contains(row.key) {
                    Source::File
                } else {
                    Source::Default
                };
                Some(InForce {
                    key: row.key,
                    value,
                    seconds,
                    source,
                })
            })
            .map(|bound| self.stricter_upstream(bound))
            .collect()
    }

    /// A decompose request's bound is the stricter of `auxiliary.timeout_seconds` and the
    /// decomposer's own `timeout` (upstream's key): the value in force is the one that applies.
    fn stricter_upstream(&self, bound: InForce) -> InForce {
        match self.decompose_timeout_key() {
            Some(key) if bound.key == super::REQUEST_TIMEOUT.key => InForce {
                value: Json::from(self.decompose_timeout().as_secs_f64()),
                source: Source::UpstreamKey(key),
                ..bound
            },
            _ => bound,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn bounds(text: &str) -> Vec<InForce> {
        let config = Config::parse(text, Path::new("/h/config.yaml")).unwrap();
        config.bounds_in_force(&WrittenKeys::of(text))
    }

    fn find<'b>(bounds: &'b [InForce], key: &str) -> &'b InForce {
        bounds
            .iter()
            .find(|b| b.key == key)
            .unwrap_or_else(|| panic!("{key} not among {bounds:#?}"))
    }

    #[test]
    fn every_number_and_switch_of_the_table_is_a_bound_and_nothing_else_is() {
        let all = bounds("");
        let keys: Vec<&str> = all.iter().map(|b| b.key).collect();
        for row in super::super::KEYS {
            let bound = matches!(
                row.kind,
                Kind::Flag { .. } | Kind::Whole { .. } | Kind::Seconds { .. }
            ) && !row.key.starts_with("auxiliary.kanban_decomposer.");
            assert_eq!(keys.contains(&row.key), bound, "{}", row.key);
        }
        assert!(all.iter().all(|b| b.source == Source::Default), "{all:#?}");
    }

    #[test]
    fn a_written_key_comes_from_the_file_and_a_null_one_is_the_default() {
        let all = bounds(
            "kanban:\n  decompose_max_attempts: 5\n  decompose_backoff_seconds: null\n  \
             dispatch_interval_seconds: 0.5\n  max_spawn: 4\n",
        );
        let attempts = find(&all, "kanban.decompose_max_attempts");
        assert_eq!(
            (attempts.value.clone(), attempts.source),
            (Json::from(5), Source::File)
        );
        let backoff = find(&all, "kanban.decompose_backoff_seconds");
        assert_eq!(
            (backoff.value.clone(), backoff.source),
            (Json::from(60.0), Source::Default)
        );
        assert!(backoff.seconds);
        assert_eq!(find(&all, "kanban.dispatch_interval_seconds").value, 0.5);
        assert_eq!(find(&all, "kanban.max_spawn").value, 4);
        assert_eq!(find(&bounds(""), "kanban.max_spawn").value, 2);
    }

    #[test]
    fn the_decomposers_stricter_timeout_is_in_force_from_upstreams_key() {
        let stricter = bounds("auxiliary:\n  kanban_decomposer:\n    timeout: 30\n");
        let timeout = find(&stricter, "auxiliary.timeout_seconds");
        assert_eq!(timeout.value, 30.0);
        assert_eq!(
            timeout.source,
            Source::UpstreamKey("auxiliary.kanban_decomposer.timeout")
        );
        // Upstream's default 180 does not lengthen ours.
        let looser =
            bounds("auxiliary:\n  timeout_seconds: 90\n  kanban_decomposer:\n    timeout: 180\n");
        let timeout = find(&looser, "auxiliary.timeout_seconds");
        assert_eq!(
            (timeout.value.clone(), timeout.source),
            (Json::from(90.0), Source::File)
        );
    }

    #[test]
    fn written_keys_follow_the_reader() {
        let written = WrittenKeys::of("model: gpt\nkanban:\n  auto_decompose: off\n  x: ~\n");
        assert!(written.contains("model.default"));
        assert!(written.contains("kanban.auto_decompose"));
        assert!(!written.contains("kanban.x"));
        assert_eq!(WrittenKeys::of(": not yaml: ["), WrittenKeys::default());
    }
}
