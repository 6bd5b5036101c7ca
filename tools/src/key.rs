//! The gate key of a test: `<package>::<test path>`, with rstest's `case_<N>_<label>` segments
//! replaced by their label, so a key survives cases being reordered. The verdict records carry it,
//! and a JUnit `testcase` (name + classname) maps to it by the same rule.

/// `seed::rebill::case_2_http_500` → `seed::rebill::http_500`. A `case_<N>` segment without a
/// label stays as it is: there is nothing better to call it.
pub fn normalise_path(test_path: &str) -> String {
    test_path
        .split("::")
        .map(|segment| case_label(segment).unwrap_or(segment))
        .collect::<Vec<_>>()
        .join("::")
}

/// The key of a JUnit test case: the package is the classname before its first `::`
/// (`gateway-tests::it` → `gateway-tests`).
pub fn of_junit(classname: &str, name: &str) -> String {
    format!("{}::{}", package_of(classname), normalise_path(name))
}

/// `gateway-tests::it` → `gateway-tests`.
pub fn package_of(classname: &str) -> &str {
    classname.split("::").next().unwrap_or(classname)
}

fn case_label(segment: &str) -> Option<&str> {
    let rest = segment.strip_prefix("case_")?;
    let (number, label) = rest.split_once('_')?;
    let numbered = !number.is_empty() && number.chars().all(|c| c.is_ascii_digit());
    (numbered && !label.is_empty()).then_some(label)
}

/// A key as people read it: `seed::failing_card::http_500` → `seed › failing card (http 500)`
/// when the last segment was a case label, `[reference only]` for reference-only modules.
pub fn scenario(key: &str, had_case: bool) -> String {
    let path = key.split_once("::").map_or(key, |(_, path)| path);
    let mut segments: Vec<&str> = path.split("::").collect();
    let reference_only = segments.contains(&"reference_only");
    segments.retain(|s| *s != "reference_only");
    let case = if had_case && segments.len() > 1 {
        segments.pop()
    } else {
        None
    };
    let words = |s: &str| s.replace('_', " ");
    let mut text = segments
        .iter()
        .map(|s| words(s))
        .collect::<Vec<_>>()
        .join(" › ");
    if reference_only {
        text.push_str(" [reference only]");
    }
    if let Some(case) = case {
        text.push_str(&format!(" ({})", words(case)));
    }
    text
}

/// Whether a nextest test path ends in an rstest case (`case_<N>` or `case_<N>_<label>`).
pub fn has_case(test_path: &str) -> bool {
    test_path.rsplit("::").next().is_some_and(|last| {
        last.strip_prefix("case_").is_some_and(|rest| {
            rest.split('_')
                .next()
                .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_labels_replace_their_segment() {
        assert_eq!(
            of_junit(
                "gateway-tests::it",
                "faults::failing_triage_card_is_not_rebilled_every_tick::case_1_http_429"
            ),
            "gateway-tests::faults::failing_triage_card_is_not_rebilled_every_tick::http_429"
        );
        assert_eq!(normalise_path("a::case_12_two_words"), "a::two_words");
    }

    #[test]
    fn segments_that_only_look_like_cases_stay() {
        for path in [
            "a::case_3",
            "a::case_x_label",
            "a::case__label",
            "a::case_3_",
            "a::cases_1_x",
        ] {
            assert_eq!(normalise_path(path), path);
        }
        assert_eq!(
            of_junit("fixtures", "key::tests::x"),
            "fixtures::key::tests::x"
        );
    }

    #[test]
    fn scenarios_read_as_words() {
        assert_eq!(
            scenario("gateway-tests::seed::failing_card::http_500", true),
            "seed › failing card (http 500)"
        );
        assert_eq!(
            scenario("cli-tests::reference_only::ledger_is_kept", false),
            "ledger is kept [reference only]"
        );
        assert!(has_case("x::case_2_http_500"));
        assert!(has_case("x::case_2"));
        assert!(!has_case("x::y"));
    }
}
