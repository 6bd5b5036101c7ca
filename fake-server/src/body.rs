//! An answer's body as segments, so that a body of hundreds of megabytes of padding costs no
//! memory, and its length is known before a byte is written (for a `Content-Length`, or a stall
//! halfway through).

/// One run of a body's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// These bytes.
    Bytes(Vec<u8>),
    /// `len` times `byte`.
    Repeat {
        /// The byte repeated.
        byte: u8,
        /// How many times.
        len: u64,
    },
}

impl Segment {
    fn len(&self) -> u64 {
        match self {
            Segment::Bytes(bytes) => bytes.len() as u64,
            Segment::Repeat { len, .. } => *len,
        }
    }
}

/// An answer's body: its segments, in order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Body(Vec<Segment>);

impl Body {
    /// A body of exactly these bytes.
    pub fn bytes(bytes: impl Into<Vec<u8>>) -> Body {
        Body(vec![Segment::Bytes(bytes.into())])
    }

    /// A body of these segments, in order.
    pub fn segments(segments: Vec<Segment>) -> Body {
        Body(segments)
    }

    /// The same body followed by `len` times `byte`.
    #[must_use]
    pub fn then_repeat(mut self, byte: u8, len: u64) -> Body {
        self.0.push(Segment::Repeat { byte, len });
        self
    }

    /// The same body followed by `bytes`.
    #[must_use]
    pub fn then_bytes(mut self, bytes: impl Into<Vec<u8>>) -> Body {
        self.0.push(Segment::Bytes(bytes.into()));
        self
    }

    /// Its length in bytes.
    pub fn len(&self) -> u64 {
        self.0.iter().map(Segment::len).sum()
    }

    /// Whether it has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends the body's bytes `start..end` to `out`.
    pub(crate) fn copy_range(&self, start: u64, end: u64, out: &mut Vec<u8>) {
        let mut offset = 0u64;
        for segment in &self.0 {
            let len = segment.len();
            let (from, to) = (start.max(offset), end.min(offset + len));
            if from < to {
                // Both lie within this segment, whose length came from a `usize` or fits in
                // memory as `to - from` bytes of one piece.
                let (from_in, to_in) = ((from - offset) as usize, (to - offset) as usize);
                match segment {
                    Segment::Bytes(bytes) => out.extend_from_slice(&bytes[from_in..to_in]),
                    Segment::Repeat { byte, .. } => {
                        out.resize(out.len() + (to_in - from_in), *byte);
                    }
                }
            }
            offset += len;
            if offset >= end {
                break;
            }
        }
    }
}

impl From<Vec<u8>> for Body {
    fn from(bytes: Vec<u8>) -> Body {
        Body::bytes(bytes)
    }
}

impl From<&str> for Body {
    fn from(text: &str) -> Body {
        Body::bytes(text)
    }
}

impl From<String> for Body {
    fn from(text: String) -> Body {
        Body::bytes(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_spans_segments_and_padding_costs_nothing_until_copied() {
        let body = Body::bytes("head:")
            .then_repeat(b'x', 1 << 40)
            .then_bytes("\ntail");
        assert_eq!(body.len(), 5 + (1 << 40) + 5);
        let mut out = Vec::new();
        body.copy_range(3, 8, &mut out);
        assert_eq!(out, b"d:xxx");
        out.clear();
        body.copy_range(body.len() - 7, body.len(), &mut out);
        assert_eq!(out, b"xx\ntail");
    }
}
