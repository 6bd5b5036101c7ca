//! Time across the processes that share a board (contract §7, "Time").
//!
//! No process's wall clock can be trusted to measure a wait: one may run ahead or behind, or be
//! stepped (a person, NTP at boot, a VM resumed) while a process runs. Processes on one host
//! share a clock no one sets: `CLOCK_BOOTTIME`, which counts from boot, suspends included, and is
//! never stepped, named by the kernel's boot id (`/proc/sys/kernel/random/boot_id`). So every
//! moment the bounds rest on (a paid call's start, a card's due time, a pause's end, a claim's
//! expiry) is recorded twice: as the writer's wall time (unix milliseconds, what upstream's
//! columns and other hosts understand) and as its boot's clock, with the boot id. A reader on the
//! same boot measures by the boot's clock, whatever anyone's wall clock says; only a reader on
//! another boot or host compares wall times, the only time they share.
//!
//! A reader sees every stored time in its own wall frame: a time recorded on its boot is the
//! boot's clock at that moment plus this process's [`Frame::offset_ms`] (its wall clock minus
//! the boot's), so comparing it with [`now_ms`] compares boot clocks; a time of another boot is
//! taken as recorded. Nothing is ever re-dated: a time is written once, by the process whose
//! moment it is.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use jiff::tz::TimeZone;

/// How this process reads the board's times: the boot it runs in (when the kernel names one and
/// has a boot clock) and its wall clock's distance from that boot's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    /// The kernel's boot id; `None` where there is none (no `/proc`, no `CLOCK_BOOTTIME`): every
    /// time is then read by the wall clock.
    pub boot: Option<&'static str>,
    /// Wall clock minus boot clock, in milliseconds.
    pub offset_ms: i64,
}

impl Frame {
    /// A frame with no boot: every time is read by the wall clock (as across hosts).
    pub const WALL: Frame = Frame {
        boot: None,
        offset_ms: 0,
    };
}

/// How far the wall clock may drift from the frame before the frame follows it: readings of the
/// two clocks a moment apart differ by a fraction of a millisecond, and the frame must not move
/// with every reading (a time written and read back must be the same number).
const FRAME_SLACK_MS: i64 = 1;

/// The frame as last followed (see [`FRAME_SLACK_MS`]).
static FRAME: Mutex<Option<i64>> = Mutex::new(None);

/// Unix seconds, for upstream's columns. A clock before 1970 reads as 0 rather than failing.
pub fn now_secs() -> i64 {
    now_ms().div_euclid(1000)
}

/// Unix milliseconds: this process's wall clock, as its frame reads it (within
/// [`FRAME_SLACK_MS`] of the system's wall clock, and on the boot clock's tick otherwise, so
/// that readings a moment apart never go backwards by a rounding).
pub fn now_ms() -> i64 {
    reading().0
}

/// This process's frame now (see the module docs).
pub fn frame() -> Frame {
    reading().1
}

/// The wall clock as the frame reads it, and the frame, from one reading of both clocks.
fn reading() -> (i64, Frame) {
    let wall = wall_ms();
    let (Some(boot), Some(boot_ms)) = (boot_id(), boot_clock_ms()) else {
        return (wall, Frame::WALL);
    };
    let mut followed = FRAME.lock().unwrap_or_else(PoisonError::into_inner);
    let offset = match *followed {
        Some(offset) if (wall - boot_ms.saturating_add(offset)).abs() <= FRAME_SLACK_MS => offset,
        _ => wall.saturating_sub(boot_ms),
    };
    *followed = Some(offset);
    let frame = Frame {
        boot: Some(boot),
        offset_ms: offset,
    };
    (boot_ms.saturating_add(offset), frame)
}

/// The kernel's boot id, read once (it cannot change while a process runs).
pub fn boot_id() -> Option<&'static str> {
    static BOOT: OnceLock<Option<String>> = OnceLock::new();
    BOOT.get_or_init(|| {
        let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        let id = id.trim();
        // A UUID: hex digits and dashes only (it is compared in SQL, never spliced into it).
        (!id.is_empty() && id.chars().all(|c| c.is_ascii_hexdigit() || c == '-'))
            .then(|| id.to_owned())
    })
    .as_deref()
}

/// Milliseconds since boot, suspends included (`CLOCK_BOOTTIME`), minus this process's time
/// namespace offset, so that processes in a container with its own offset (CRIU) read the
/// host's boot clock like every other.
fn boot_clock_ms() -> Option<i64> {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME).ok()?;
    let ms = now
        .tv_sec()
        .checked_mul(1000)?
        .checked_add(now.tv_nsec() / 1_000_000)?;
    Some(ms.saturating_sub(boot_namespace_offset_ms()))
}

/// The `boottime` line of `/proc/self/timens_offsets` in milliseconds (0 without one).
fn boot_namespace_offset_ms() -> i64 {
    static OFFSET: OnceLock<i64> = OnceLock::new();
    *OFFSET.get_or_init(|| {
        let Ok(text) = std::fs::read_to_string("/proc/self/timens_offsets") else {
            return 0;
        };
        text.lines()
            .find_map(|line| {
                let mut fields = line.split_whitespace();
                (fields.next()? == "boottime").then_some(())?;
                let secs: i64 = fields.next()?.parse().ok()?;
                let nanos: i64 = fields.next()?.parse().ok()?;
                Some(secs.saturating_mul(1000).saturating_add(nanos / 1_000_000))
            })
            .unwrap_or(0)
    })
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
    fn the_frame_reads_the_wall_clock_on_the_boot_clocks_tick() {
        let (first, frame) = reading();
        let wall = wall_ms();
        assert!(
            (wall - first).abs() <= 50,
            "{first} vs the wall clock {wall}"
        );
        if let Some(boot) = frame.boot {
            assert_eq!(boot.len(), 36, "{boot}");
            assert_eq!(boot_id(), Some(boot));
        }
        // Readings a moment apart keep the frame (a time written and read back is the same
        // number) and never go backwards.
        let mut last = first;
        for _ in 0..1000 {
            let (now, again) = reading();
            assert!(now >= last, "{now} after {last}");
            assert_eq!(again, frame);
            last = now;
        }
    }
}
