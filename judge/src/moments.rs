//! Moments of reference rows on the test's own clock (contract §7, "Time"): below the
//! invariants that read them, so that each module of the oracle can.

use serde_json::{Map, Value};

type Row = Map<String, Value>;

fn text<'r>(row: &'r Row, column: &str) -> Option<&'r str> {
    row.get(column).and_then(Value::as_str)
}

fn int(row: &Row, column: &str) -> Option<i64> {
    row.get(column).and_then(Value::as_i64)
}

/// A moment of a reference row on the test's own (true) wall clock: the reference records each
/// moment the bounds rest on twice (contract §7, "Time"), as its process's wall time (`wall`,
/// which a faked clock moves) and on this boot's clock (`boot_ms`, beside the row's `boot`),
/// which no process's wall clock moves. A moment of this boot is read by the boot's clock; any
/// other (another boot, an older build, a row by hand, a target without the columns) by its wall
/// time.
pub(crate) fn moment(row: &Row, wall: &str, boot_ms: &str) -> Option<i64> {
    match (text(row, "boot"), int(row, boot_ms), this_boot()) {
        (Some(boot), Some(at), Some((ours, offset))) if boot == ours => Some(at + offset),
        _ => int(row, wall),
    }
}

/// This machine's boot id and the test process's wall clock minus the boot's clock (the test
/// process's clock is never faked).
fn this_boot() -> Option<(&'static str, i64)> {
    static BOOT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let id = BOOT
        .get_or_init(|| {
            std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                .ok()
                .map(|id| id.trim().to_owned())
        })
        .as_deref()?;
    let boot = nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME).ok()?;
    let boot_ms = boot.tv_sec() * 1000 + boot.tv_nsec() / 1_000_000;
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_millis();
    Some((id, i64::try_from(wall).ok()? - boot_ms))
}
