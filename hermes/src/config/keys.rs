//! Unknown keys where a typo costs money: under `kanban:` and `auxiliary.kanban_decomposer:`, a key
//! that neither this gateway nor upstream hermes-agent (0.19.0) defines is reported once, with
//! the closest known key, instead of being silently ignored (a misspelt
//! `dispatch_interval_secs` would otherwise run with the 60 s default and no word).

use std::collections::BTreeSet;
use std::fmt;
use std::path::Path;

use serde_norway::Value;

use super::table::{leaf_count, leaves, ReadBy};
use super::{Config, Got, KanbanConfig, Reader, Section};

// The names a key is checked against, from the table (`table`) and in its order, which is
// the order a tie between two equally close names is broken by (`decomposer` keeps its own).

/// `kanban.*` keys this gateway reads.
const KANBAN_OURS: &[&str] = &leaves::<{ leaf_count(KanbanConfig::KEYS, ReadBy::Hermes) }>(
    KanbanConfig::KEYS,
    ReadBy::Hermes,
);

/// `kanban.*` keys upstream's default config defines or its code reads.
const KANBAN_UPSTREAM: &[&str] = &leaves::<{ leaf_count(KanbanConfig::KEYS, ReadBy::Upstream) }>(
    KanbanConfig::KEYS,
    ReadBy::Upstream,
);

/// Something in `config.yaml` that was ignored but looks like a mistake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigWarning {
    /// The dotted key it is about.
    pub key: String,
    text: String,
}

impl ConfigWarning {
    pub(super) fn new(path: &Path, key: String, problem: String) -> ConfigWarning {
        let text = format!("{}: {key}: {problem}", path.display());
        ConfigWarning { key, text }
    }
}

impl fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Which of a config's warnings are news: a long-running process logs each warning once, when
/// the config that introduced it is first seen, and again only if it goes away and comes back.
#[derive(Debug, Default)]
pub struct WarningLog {
    shown: BTreeSet<String>,
}

impl WarningLog {
    /// The warnings of `config` not in the previous config seen.
    pub fn fresh<'c>(&mut self, config: &'c Config) -> Vec<&'c ConfigWarning> {
        let current: BTreeSet<String> = config.warnings.iter().map(|w| w.text.clone()).collect();
        let fresh = config
            .warnings
            .iter()
            .filter(|w| !self.shown.contains(&w.text))
            .collect();
        self.shown = current;
        fresh
    }
}

pub(super) fn check_kanban(reader: &Reader, s: &Section) {
    check(reader, s, &[KANBAN_OURS, KANBAN_UPSTREAM]);
}

/// Reports each key of section `s` that is in none of the `known` lists (a section's leaf
/// names, from the table), naming the closest known one.
pub(super) fn check(reader: &Reader, s: &Section, known: &[&[&str]]) {
    let Some(map) = s.map else { return };
    for key in map.keys() {
        let name = match key {
            Value::String(name) => name.clone(),
            other => Got(other).to_string(),
        };
        if known.iter().any(|list| list.contains(&name.as_str())) {
            continue;
        }
        let closest = closest(&name, known.iter().flat_map(|list| list.iter().copied()));
        reader.warn(
            s.dotted(&name),
            format!(
                "not a key hermes or upstream hermes-agent knows (ignored); did you mean {}?",
                s.dotted(closest)
            ),
        );
    }
}

/// The candidate nearest to `name` by Levenshtein distance (the first one on a tie).
fn closest<'k>(name: &str, candidates: impl Iterator<Item = &'k str>) -> &'k str {
    candidates
        .min_by_key(|candidate| strsim::levenshtein(name, candidate))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::super::KEYS;
    use super::*;

    fn warnings(text: &str) -> Vec<String> {
        Config::parse(text, Path::new("/h/config.yaml"))
            .unwrap()
            .warnings
            .iter()
            .map(|w| w.to_string())
            .collect()
    }

    #[test]
    fn the_closest_key_counts_characters_and_a_tie_goes_to_the_first() {
        assert_eq!(closest("é✓", ["e✓xy", "e✓"].into_iter()), "e✓");
        assert_eq!(closest("ab", ["ax", "xb"].into_iter()), "ax");
        assert_eq!(closest("ab", std::iter::empty()), "");
    }

    #[test]
    fn a_typo_names_the_closest_known_key() {
        let w = warnings("kanban:\n  dispatch_interval_secs: 5\n");
        assert_eq!(
            w,
            [
                "/h/config.yaml: kanban.dispatch_interval_secs: not a key hermes or upstream \
              hermes-agent knows (ignored); did you mean kanban.dispatch_interval_seconds?"
            ]
        );
        let w = warnings("auxiliary:\n  kanban_decomposer:\n    modle: m\n    time_out: 3\n");
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(
            w[0].contains("kanban_decomposer.modle: ")
                && w[0].ends_with("kanban_decomposer.model?")
        );
        assert!(
            w[1].ends_with("did you mean auxiliary.kanban_decomposer.timeout?"),
            "{w:?}"
        );
        let w = warnings("kanban:\n  7: x\n  decompose_max_attempt: 2\n");
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].contains("kanban.7: "), "{w:?}");
        assert!(
            w[1].ends_with("did you mean kanban.decompose_max_attempts?"),
            "{w:?}"
        );
    }

    #[test]
    fn every_key_either_implementation_defines_is_silent() {
        let mut text = String::from("kanban:\n");
        let kanban: BTreeSet<&str> = KANBAN_OURS.iter().chain(KANBAN_UPSTREAM).copied().collect();
        for key in kanban {
            text.push_str(&format!("  {key}: null\n"));
        }
        text.push_str("auxiliary:\n  kanban_decomposer:\n");
        let decomposer = KEYS
            .iter()
            .filter_map(|row| row.key.strip_prefix("auxiliary.kanban_decomposer."));
        for key in decomposer {
            if key != "fallback_chain" {
                text.push_str(&format!("    {key}: null\n"));
            }
        }
        // Other sections, and other auxiliary tasks, are upstream's business.
        text.push_str("  vision: {modle: x}\n  transient_retry: 1\nmodel:\n  defualt: x\n");
        assert_eq!(warnings(&text), Vec::<String>::new());
    }

    #[test]
    fn the_log_reports_a_warning_once_per_appearance() {
        let parse = |t: &str| Config::parse(t, Path::new("/h/config.yaml")).unwrap();
        let typo = parse("kanban:\n  auto_decompse: false\n");
        let two = parse("kanban:\n  auto_decompse: false\n  per_tick: 3\n");
        let clean = parse("kanban:\n  auto_decompose: false\n");
        let mut log = WarningLog::default();
        assert_eq!(log.fresh(&typo).len(), 1);
        assert_eq!(log.fresh(&typo).len(), 0, "the same config again");
        let news = log.fresh(&two);
        assert_eq!(news.len(), 1);
        assert_eq!(news[0].key, "kanban.per_tick");
        assert_eq!(log.fresh(&clean).len(), 0);
        assert_eq!(log.fresh(&typo).len(), 1, "the typo is back");
    }
}
