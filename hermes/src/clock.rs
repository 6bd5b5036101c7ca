//! Time as the board stores it: unix seconds in upstream's columns, unix milliseconds in ours
//! (backoff and ledger times need sub-second resolution).
//!
//! The wall clock cannot be trusted to measure a wait: it jumps (a person, a VM resumed, NTP
//! stepping), and every wait the bounds rest on (a card's backoff, a provider pause, the hourly
//! ceiling's window) is kept as wall-clock times on the board so that it holds across restarts
//! and processes. So within one process [`now_ms`] never runs ahead of the monotonic clock: a
//! forward jump of the wall clock is not taken as time waited (it is caught up with at most
//! [`MAX_CATCH_UP`] of the time that really passes, as NTP slews), while a backward jump is
//! followed at once, which can only make waits longer. Across processes the wall clock is the
//! only time they share: a process started after a forward jump takes the new wall time as it
//! finds it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use jiff::tz::TimeZone;

/// The share of monotonic time by which this process's clock may catch up with a wall clock
/// that jumped ahead of it: one millisecond per second, twice what NTP slews at most, so that
/// ordinary drift never builds up while a jump of an hour takes a thousand hours to absorb.
pub const MAX_CATCH_UP: f64 = 0.001;

/// Where this process's clock was last set to the wall clock: when (monotonic) and to what.
/// Readings are measured from it, not from the reading before, so rounding never adds up.
static ANCHOR: Mutex<Option<(Instant, i64)>> = Mutex::new(None);

/// Unix seconds, for upstream's columns. A clock before 1970 reads as 0 rather than failing.
pub fn now_secs() -> i64 {
    now_ms().div_euclid(1000)
}

/// Unix milliseconds, for our own `*_ms` columns: the wall clock, never ahead of the monotonic
/// time elapsed since this process first asked (see the module docs).
pub fn now_ms() -> i64 {
    let wall = wall_ms();
    let at = Instant::now();
    // A poisoned lock only means another thread panicked between two plain stores.
    let mut anchor = ANCHOR
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let (now, moved) = steady(*anchor, at, wall);
    if moved {
        *anchor = Some((at, now));
    }
    now
}

/// The reading at monotonic `at` with the wall clock at `wall`, from `anchor`; and whether the
/// anchor moves to it (it follows the wall clock whenever the wall clock is not ahead).
fn steady(anchor: Option<(Instant, i64)>, at: Instant, wall: i64) -> (i64, bool) {
    let Some((then, then_ms)) = anchor else {
        return (wall, true);
    };
    let elapsed = at.saturating_duration_since(then).as_secs_f64() * 1000.0;
    let steady = then_ms.saturating_add(elapsed as i64);
    if wall <= steady {
        return (wall, true);
    }
    let catch_up = (elapsed * MAX_CATCH_UP).round() as i64;
    let caught_up = steady.saturating_add(catch_up);
    (wall.min(caught_up), false)
}

/// The wall clock in unix milliseconds, as the system tells it.
fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

pub use crate::core::time::{utc, utc_ms};

/// Times in text output are UTC (`--utc`) rather than local.
static SHOW_UTC: AtomicBool = AtomicBool::new(false);

/// Whether text output shows times in UTC from now on (`--utc`) instead of local time.
pub fn set_show_utc(utc: bool) {
    SHOW_UTC.store(utc, Ordering::Relaxed);
}

/// The zone times are shown (and `today`/`yesterday` read) in: UTC under `--utc`, else the
/// system's (`TZ`, else `/etc/localtime`; UTC when neither can be read).
pub fn display_zone() -> TimeZone {
    if SHOW_UTC.load(Ordering::Relaxed) {
        TimeZone::UTC
    } else {
        TimeZone::system()
    }
}

/// Unix seconds for text output: `2026-12-01 14:03:05 +01:00` in local time, or
/// `2026-12-01 13:03:05 UTC` under `--utc`.
pub fn shown(secs: i64) -> String {
    shown_ms(secs.saturating_mul(1000))
}

/// Unix milliseconds for text output, to the second (see [`shown`]).
pub fn shown_ms(ms: i64) -> String {
    show_in(ms, &display_zone(), false)
}

/// Unix milliseconds for text output, to the millisecond (`2026-12-01 14:03:05.120 +01:00`).
pub fn shown_ms_exact(ms: i64) -> String {
    show_in(ms, &display_zone(), true)
}

fn show_in(ms: i64, zone: &TimeZone, millis: bool) -> String {
    let time = if millis { "%H:%M:%S%.3f" } else { "%H:%M:%S" };
    let at = crate::core::time::timestamp(ms).to_zoned_datetime(zone.clone());
    if zone == &TimeZone::UTC {
        format!("{} UTC", at.strftime(&format!("%Y-%m-%d {time}")))
    } else {
        at.strftime(&format!("%Y-%m-%d {time} %:z")).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn times_are_shown_with_their_offset_or_as_utc() {
        let ms = 1_795_981_327_120;
        assert_eq!(
            show_in(ms, &TimeZone::UTC, false),
            "2026-11-29 19:42:07 UTC"
        );
        assert_eq!(
            show_in(ms, &TimeZone::UTC, true),
            "2026-11-29 19:42:07.120 UTC"
        );
        let paris = TimeZone::fixed(jiff::tz::offset(1));
        assert_eq!(show_in(ms, &paris, false), "2026-11-29 20:42:07 +01:00");
        // The far ends still have a date instead of failing.
        assert!(show_in(i64::MAX, &paris, false).starts_with("9999-"));
        assert!(show_in(i64::MIN, &paris, true).starts_with('-'));
    }

    #[test]
    fn a_forward_jump_is_not_time_waited_and_a_backward_one_is_followed() {
        let start = Instant::now();
        let t0 = 1_000_000_000;
        assert_eq!(steady(None, start, t0), (t0, true));
        let anchor = Some((start, t0));
        let later = start + Duration::from_secs(10);
        // Ten seconds pass; the wall clock says so: followed.
        assert_eq!(steady(anchor, later, t0 + 10_000), (t0 + 10_000, true));
        // Ten seconds pass; the wall clock jumped two hours: ten seconds and 10 ms of catch-up.
        assert_eq!(steady(anchor, later, t0 + 7_200_000), (t0 + 10_010, false));
        // The wall clock is set back an hour: followed at once.
        assert_eq!(
            steady(anchor, later, t0 - 3_600_000),
            (t0 - 3_600_000, true)
        );
        // Drift within the catch-up allowance is followed exactly.
        assert_eq!(steady(anchor, later, t0 + 10_005), (t0 + 10_005, false));
    }

    #[test]
    fn readings_a_fraction_of_a_millisecond_apart_never_fall_behind_the_wall_clock() {
        let start = Instant::now();
        let t0 = 1_000_000_000;
        let mut anchor = Some((start, t0));
        // A thousand readings 0.9 ms apart, the wall clock keeping time: the reading stays
        // within a millisecond of it, however many there are.
        for i in 1..=1000u32 {
            let at = start + Duration::from_micros(900) * i;
            let wall = t0 + i64::from(i) * 9 / 10;
            let (now, moved) = steady(anchor, at, wall);
            assert!(
                wall - now <= 1,
                "reading {i}: {now} is {} ms behind",
                wall - now
            );
            if moved {
                anchor = Some((at, now));
            }
        }
    }
}
