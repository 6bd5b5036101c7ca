//! Text that came from outside (a provider's error, a card's title, a row another tool wrote) on
//! its way to a terminal, a log or the board.
//!
//! One rule says which characters may not reach a terminal raw ([`is_unsafe`]): C0 and C1
//! controls and DEL (ESC starts CSI and OSC sequences, BEL rings, `\r` overwrites a line) and the
//! bidirectional overrides and isolates that make a line read differently from what it holds.
//! Every place output leaves the process applies it: [`printable`] for text (line breaks kept),
//! [`one_line`] for a field inside a line, [`json_printable`] for serialized JSON (where the
//! characters stay the same text, written as JSON's own `\u` escapes).
//!
//! Provider text kept on the board is cut once, here, to [`STORED_TEXT_CAP`] with its original
//! size noted ([`cap`]), and summarised to [`SUMMARY_CAP`] where a second place refers to it
//! ([`summary`]).

use std::borrow::Cow;
use std::fmt::Write as _;

/// The most bytes of provider text the board keeps in one place (a ledger row's detail).
pub const STORED_TEXT_CAP: usize = 4 * 1024;

/// The most bytes of a provider's own message an error carries: the error's words around it
/// still fit in [`STORED_TEXT_CAP`], so the note of the message's original size survives.
pub const PROVIDER_MESSAGE_CAP: usize = STORED_TEXT_CAP - 512;

/// The most bytes of a failure's reason kept where it is only a summary (the card's
/// `decompose_failed` event and last error, the command's own line): the whole text, capped,
/// is in the ledger row of the request.
pub const SUMMARY_CAP: usize = 300;

/// Whether `c` may not reach a terminal as it is.
pub fn is_unsafe(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` with every unsafe character but the line break written visibly (`\u{1b}`, `\t`),
/// for output that may span lines.
pub fn printable(text: &str) -> Cow<'_, str> {
    escape(text, |c| c != '\n' && is_unsafe(c))
}

/// `text` with every unsafe character written visibly, line breaks included: one field that
/// stays on its line.
pub fn one_line(text: &str) -> Cow<'_, str> {
    escape(text, is_unsafe)
}

fn escape(text: &str, unsafe_char: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !text.chars().any(&unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if unsafe_char(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Serialized JSON with every unsafe character written as a `\u` escape. serde_json already
/// escapes C0 controls inside strings; DEL, C1 controls and bidirectional marks it leaves raw.
/// Such a character can only stand inside a JSON string, where its escape means the same text,
/// so the document stays valid and decodes to the same values. Line breaks, tabs and carriage
/// returns are left alone: serde_json writes them only as whitespace between tokens.
pub fn json_printable(json: &str) -> Cow<'_, str> {
    let escaped = |c: char| is_unsafe(c) && !matches!(c, '\n' | '\r' | '\t');
    if !json.chars().any(escaped) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if escaped(c) {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                let _ = write!(out, "\\u{unit:04x}");
            }
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// `text` cut to at most `max` bytes (at a character boundary), saying how long it was:
/// `… [cut: 921600 bytes in all]`. Text that fits is returned as it is.
pub fn cut(text: &str, max: usize) -> Cow<'_, str> {
    cut_noting(text, max, "")
}

fn cut_noting<'a>(text: &'a str, max: usize, more: &str) -> Cow<'a, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let note = format!(" … [cut: {} bytes in all{more}]", text.len());
    let keep = floor_char_boundary(text, max.saturating_sub(note.len()));
    Cow::Owned(format!("{}{note}", &text[..keep]))
}

/// Provider text as the board keeps it: at most [`STORED_TEXT_CAP`] bytes.
pub fn cap(text: &str) -> Cow<'_, str> {
    cut(text, STORED_TEXT_CAP)
}

/// A failure's reason where the ledger row of its request keeps the text (capped): at most
/// [`SUMMARY_CAP`] bytes, saying where the rest is.
pub fn summary(text: &str) -> Cow<'_, str> {
    cut_noting(
        text,
        SUMMARY_CAP,
        "; the first 4 KB are in the ledger: hermes kanban usage --calls",
    )
}

fn floor_char_boundary(text: &str, at: usize) -> usize {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOSTILE: &str = "a\u{1b}[2Jb\u{1b}]0;owned\u{7}c\u{9b}31md\u{7f}e\u{202e}f\r\n";

    #[test]
    fn every_control_and_bidi_mark_is_made_visible() {
        assert_eq!(
            one_line(HOSTILE),
            "a\\u{1b}[2Jb\\u{1b}]0;owned\\u{7}c\\u{9b}31md\\u{7f}e\\u{202e}f\\r\\n"
        );
        assert_eq!(
            printable(HOSTILE),
            "a\\u{1b}[2Jb\\u{1b}]0;owned\\u{7}c\\u{9b}31md\\u{7f}e\\u{202e}f\\r\n"
        );
        // Nothing to do: no copy, and emoji (with their joiners) stay as they are.
        let plain = "ship it 🚀 👩‍💻 é\n";
        assert!(matches!(printable(plain), Cow::Borrowed(_)));
        assert_eq!(one_line("tab\there"), "tab\\there");
    }

    #[test]
    fn json_keeps_its_meaning_with_no_raw_control_left() {
        let value = serde_json::json!({"reason": HOSTILE, "n": 1});
        let text = serde_json::to_string_pretty(&value).unwrap();
        let shown = json_printable(&text);
        assert!(!shown.chars().any(|c| is_unsafe(c) && c != '\n'), "{shown}");
        let back: serde_json::Value = serde_json::from_str(&shown).unwrap();
        assert_eq!(back, value);
        assert!(
            shown.contains("\\u009b") && shown.contains("\\u202e"),
            "{shown}"
        );
    }

    #[test]
    fn long_text_is_cut_at_a_character_boundary_with_its_size() {
        let long = "é".repeat(3000);
        let kept = cap(&long);
        assert!(kept.len() <= STORED_TEXT_CAP, "{}", kept.len());
        assert!(kept.ends_with(" … [cut: 6000 bytes in all]"), "{kept}");
        assert!(kept.starts_with("éé"));
        assert_eq!(summary("short"), "short");
        let short = summary(&long);
        assert!(short.len() <= SUMMARY_CAP, "{}", short.len());
        assert!(
            short.ends_with("in the ledger: hermes kanban usage --calls]"),
            "{short}"
        );
        assert_eq!(cut("abcdef", 3), " … [cut: 6 bytes in all]");
    }
}
