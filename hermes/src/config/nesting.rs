//! How deeply `config.yaml` may nest, checked before the document is loaded.
//!
//! The YAML scanner keeps one pending "simple key" per open flow collection and walks them all
//! for every token it reads, so a file of nested flow sequences (`[[[[…`) costs time in the
//! square of its size: 200 KB took 28 s, 1 MiB about a quarter of an hour. The loader reads the
//! whole document before its own recursion limit is looked at, so that limit comes too late.
//! Here the document is walked event by event with the same parser and the walk stops at the
//! first collection nested deeper than [`MAX_NESTING`]: the scanner then never holds more than
//! that many levels plus its bounded look-ahead (a simple key goes stale after 1024
//! characters), so the check costs time in proportion to the file, and so does the load after
//! it, which never sees a deeper document. No configuration hermes or upstream reads nests
//! deeper than 5.

use std::mem::MaybeUninit;

use unsafe_libyaml_norway as unsafe_yaml;

/// The deepest a collection may sit in `config.yaml` (the top-level mapping is depth 1).
pub const MAX_NESTING: usize = 64;

/// Where the walk stopped, when the document nests deeper than [`MAX_NESTING`]: the 1-based
/// line of the first collection past it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooDeep {
    pub line: usize,
}

/// The first collection of `text` nested deeper than [`MAX_NESTING`], if any. A document the
/// parser cannot read is not judged here (the loader reports its syntax error, having met no
/// deep nesting before it).
pub fn too_deep(text: &str) -> Option<TooDeep> {
    let mut parser = Parser::new(text)?;
    let mut depth = 0usize;
    loop {
        match parser.next()? {
            Event::Open { line } => {
                depth += 1;
                if depth > MAX_NESTING {
                    return Some(TooDeep { line });
                }
            }
            Event::Close => depth = depth.saturating_sub(1),
            Event::Other => {}
            Event::End => return None,
        }
    }
}

enum Event {
    /// A sequence or mapping starts, at this 1-based line.
    Open {
        line: usize,
    },
    Close,
    Other,
    End,
}

/// libyaml's event parser over a borrowed text, freed on drop.
struct Parser<'t> {
    raw: Box<MaybeUninit<unsafe_yaml::yaml_parser_t>>,
    _text: &'t str,
}

impl<'t> Parser<'t> {
    fn new(text: &'t str) -> Option<Parser<'t>> {
        let mut raw = Box::new(MaybeUninit::<unsafe_yaml::yaml_parser_t>::uninit());
        // SAFETY: `yaml_parser_initialize` zeroes and sets up the struct it is given (a fresh
        // allocation); the input stays borrowed for as long as the parser lives (`_text`), and
        // the parser is deleted exactly once, in `drop`, only after a successful initialize.
        unsafe {
            let parser = raw.as_mut_ptr();
            if unsafe_yaml::yaml_parser_initialize(parser).fail {
                return None;
            }
            unsafe_yaml::yaml_parser_set_input_string(parser, text.as_ptr(), text.len() as _);
        }
        Some(Parser { raw, _text: text })
    }

    /// The next event, or `None` once the parser failed.
    fn next(&mut self) -> Option<Event> {
        let mut event = MaybeUninit::<unsafe_yaml::yaml_event_t>::uninit();
        // SAFETY: the parser was initialized in `new`; `yaml_parser_parse` fills `event` when it
        // succeeds, and the event is read, then deleted, only then.
        unsafe {
            if unsafe_yaml::yaml_parser_parse(self.raw.as_mut_ptr(), event.as_mut_ptr()).fail {
                return None;
            }
            let event = event.as_mut_ptr();
            let kind = match (*event).type_ {
                unsafe_yaml::YAML_SEQUENCE_START_EVENT | unsafe_yaml::YAML_MAPPING_START_EVENT => {
                    Event::Open {
                        line: ((*event).start_mark.line as usize).saturating_add(1),
                    }
                }
                unsafe_yaml::YAML_SEQUENCE_END_EVENT | unsafe_yaml::YAML_MAPPING_END_EVENT => {
                    Event::Close
                }
                unsafe_yaml::YAML_STREAM_END_EVENT => Event::End,
                _ => Event::Other,
            };
            unsafe_yaml::yaml_event_delete(event);
            Some(kind)
        }
    }
}

impl Drop for Parser<'_> {
    fn drop(&mut self) {
        // SAFETY: initialized in `new` (a `Parser` exists only after that succeeded).
        unsafe { unsafe_yaml::yaml_parser_delete(self.raw.as_mut_ptr()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn nesting_up_to_the_limit_is_read_and_past_it_is_refused_at_its_line() {
        assert_eq!(
            too_deep("kanban:\n  prices:\n    m: {input: 1, output: 2}\n"),
            None
        );
        assert_eq!(too_deep(""), None);
        // The top-level mapping is one level: 63 sequences inside it make 64.
        let at_limit = format!("x: {}{}\n", "[".repeat(63), "]".repeat(63));
        assert_eq!(too_deep(&at_limit), None);
        let past = format!("a: 1\nx: {}{}\n", "[".repeat(64), "]".repeat(64));
        assert_eq!(too_deep(&past), Some(TooDeep { line: 2 }));
        let block: String = (0..70).map(|i| format!("{}k:\n", " ".repeat(i))).collect();
        assert_eq!(
            too_deep(&format!("{block}{} 1\n", " ".repeat(70))),
            Some(TooDeep { line: 65 })
        );
        // Text the parser cannot read is left to the loader's own error.
        assert_eq!(too_deep("x: [1, 2\ny: }"), None);
    }

    #[test]
    fn a_mebibyte_of_nested_flow_sequences_is_refused_at_once() {
        let size = 1024 * 1024 - 16;
        for text in [
            format!("x: {}", "[".repeat(size)),
            format!("x: {}{}", "[".repeat(size / 2), "]".repeat(size / 2)),
            format!("x: {}", "{a: ".repeat(size / 4)),
            format!("x: {}", "[a, ".repeat(size / 4)),
        ] {
            let started = Instant::now();
            assert_eq!(too_deep(&text), Some(TooDeep { line: 1 }));
            // Linear: the walk stops after the limit and the scanner's bounded look-ahead (the
            // quadratic parse took minutes); a generous bound for a loaded debug build.
            assert!(
                started.elapsed() < Duration::from_secs(2),
                "{:?}",
                started.elapsed()
            );
        }
    }
}
