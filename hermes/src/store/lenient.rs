//! Reading counters and times that another tool (or a hand edit) may have written in any
//! SQLite type: a reader shows what it can instead of failing the whole verb on one odd cell.
//!
//! Integers are taken as they are; a real is saturated into `i64` (SQLite stores a number too
//! large for an integer column as a real); text is read as a number when it spells one; a blob
//! or text that is no number reads as unknown (`None`). Narrower types saturate.

use rusqlite::types::ValueRef;
use rusqlite::{Row, RowIndex};

/// The cell as an integer, saturated; `None` when it is NULL or holds no number.
pub(crate) fn int<I: RowIndex>(row: &Row<'_>, idx: I) -> rusqlite::Result<Option<i64>> {
    Ok(match row.get_ref(idx)? {
        ValueRef::Null | ValueRef::Blob(_) => None,
        ValueRef::Integer(n) => Some(n),
        // `as` saturates at both ends (SQLite never stores NaN).
        ValueRef::Real(x) => Some(x as i64),
        ValueRef::Text(bytes) => {
            let text = String::from_utf8_lossy(bytes);
            let text = text.trim();
            text.parse::<i64>().ok().or_else(|| {
                text.parse::<f64>()
                    .ok()
                    .filter(|x| !x.is_nan())
                    .map(|x| x as i64)
            })
        }
    })
}

/// A count: negative is unknown, past `u32::MAX` is `u32::MAX`.
pub(crate) fn count_u32<I: RowIndex>(row: &Row<'_>, idx: I) -> rusqlite::Result<Option<u32>> {
    Ok(int(row, idx)?.and_then(to_u32))
}

/// A token count: negative is unknown.
pub(crate) fn count_u64<I: RowIndex>(row: &Row<'_>, idx: I) -> rusqlite::Result<Option<u64>> {
    Ok(int(row, idx)?.and_then(|n| u64::try_from(n).ok()))
}

/// An `i64` as a `u32` count, saturating; negative is unknown.
pub(crate) fn to_u32(n: i64) -> Option<u32> {
    (n >= 0).then(|| u32::try_from(n).unwrap_or(u32::MAX))
}

/// The cell as text, whatever its type (a number is spelled out); `None` when it is NULL.
pub(crate) fn text<I: RowIndex>(row: &Row<'_>, idx: I) -> rusqlite::Result<Option<String>> {
    Ok(match row.get_ref(idx)? {
        ValueRef::Null => None,
        ValueRef::Integer(n) => Some(n.to_string()),
        ValueRef::Real(x) => Some(x.to_string()),
        ValueRef::Text(bytes) | ValueRef::Blob(bytes) => {
            Some(String::from_utf8_lossy(bytes).into_owned())
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::Connection;

    #[test]
    fn odd_cells_read_as_what_they_say_or_as_unknown() {
        let conn = Connection::open_in_memory().unwrap();
        let read = |sql: &str| {
            conn.query_row(sql, [], |r| {
                Ok((int(r, 0)?, count_u32(r, 0)?, count_u64(r, 0)?, text(r, 0)?))
            })
            .unwrap()
        };
        assert_eq!(
            read("SELECT 9223372036854775807"),
            (
                Some(i64::MAX),
                Some(u32::MAX),
                Some(i64::MAX as u64),
                Some(i64::MAX.to_string())
            )
        );
        assert_eq!(read("SELECT -5").1, None);
        assert_eq!(read("SELECT -5").2, None);
        assert_eq!(read("SELECT 1e300").0, Some(i64::MAX));
        assert_eq!(read("SELECT -1e300").0, Some(i64::MIN));
        assert_eq!(read("SELECT '42'").0, Some(42));
        assert_eq!(read("SELECT ' 1.5e3 '").0, Some(1500));
        assert_eq!(read("SELECT 'lots'").0, None);
        assert_eq!(read("SELECT x'00ff'").0, None);
        assert_eq!(read("SELECT NULL"), (None, None, None, None));
    }
}
