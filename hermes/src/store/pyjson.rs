//! Event payloads as upstream writes them (`", "` and `": "` separators, UTF-8 kept as is), so
//! `task_events.payload` text looks the same whichever implementation wrote the row.

use serde_json::ser::{Formatter, Serializer};
use serde_json::Value;
use std::io;

struct SpacedSeparators;

impl Formatter for SpacedSeparators {
    fn begin_array_value<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }

    fn begin_object_key<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }

    fn begin_object_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        w.write_all(b": ")
    }
}

/// Serialises `value` in upstream's payload style.
pub(crate) fn to_payload_text(value: &Value) -> String {
    let mut out = Vec::new();
    let mut ser = Serializer::with_formatter(&mut out, SpacedSeparators);
    // Writing a `Value` into a Vec cannot fail: there is no I/O and every key is a string.
    if serde::Serialize::serialize(value, &mut ser).is_err() {
        return value.to_string();
    }
    String::from_utf8(out).unwrap_or_else(|_| value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn matches_upstream_spacing_and_keeps_key_order_and_unicode() {
        let v = json!({"assignee": "default", "status": "ready", "parents": ["a", "b"], "tenant": null, "t": "🚀 \"q\"\n"});
        assert_eq!(
            to_payload_text(&v),
            r#"{"assignee": "default", "status": "ready", "parents": ["a", "b"], "tenant": null, "t": "🚀 \"q\"\n"}"#
        );
        assert_eq!(to_payload_text(&json!([])), "[]");
        assert_eq!(to_payload_text(&json!({})), "{}");
    }
}
