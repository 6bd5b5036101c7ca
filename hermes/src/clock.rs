//! Wall-clock time as the board stores it: unix seconds in upstream's columns, unix
//! milliseconds in ours (backoff and ledger times need sub-second resolution).

use std::time::{SystemTime, UNIX_EPOCH};

/// Unix seconds, for upstream's columns. A clock before 1970 reads as 0 rather than failing.
pub fn now_secs() -> i64 {
    now_ms().div_euclid(1000)
}

/// Unix milliseconds, for our own `*_ms` columns.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

pub use crate::core::time::{utc, utc_ms};
