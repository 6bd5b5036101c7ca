//! Which process holds a claim, and whether it is still running.
//!
//! A claim names its process by a token that stays unique across pid reuse: host name, pid
//! namespace, pid and the process's start time (from `/proc`). A process reading a claim can
//! then tell a live holder (the claim holds, whatever the clock says) from a dead one (the claim
//! is void: nothing of that attempt can still be applied). A token from another host or pid
//! namespace, or on a system without `/proc`, is of unknown liveness: only its expiry counts.

use std::sync::OnceLock;

const VERSION: &str = "p1";
const UNKNOWN: &str = "?";

/// This process's token.
pub fn token() -> &'static str {
    static TOKEN: OnceLock<String> = OnceLock::new();
    TOKEN.get_or_init(|| {
        let pid = std::process::id();
        let start = start_time(pid).unwrap_or_else(|| UNKNOWN.to_owned());
        format!(
            "{VERSION}/{}/{}/{pid}/{start}",
            host().unwrap_or_else(|| UNKNOWN.to_owned()),
            pid_namespace().unwrap_or_else(|| UNKNOWN.to_owned()),
        )
    })
}

/// Whether the process behind `token` is running: `Some(true)` or `Some(false)` when that can
/// be known from here, `None` when it cannot.
pub fn is_alive(token: &str) -> Option<bool> {
    let parsed = Parsed::from(token)?;
    let ours = Parsed::from(self::token())?;
    let knowable = [parsed.host, parsed.pid_ns, parsed.start]
        .iter()
        .all(|part| *part != UNKNOWN)
        && (parsed.host, parsed.pid_ns) == (ours.host, ours.pid_ns);
    if !knowable {
        return None;
    }
    let pid: u32 = parsed.pid.parse().ok()?;
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let (state, start) = stat_fields(&stat)?;
            // A zombie has exited; only its parent has not collected it yet.
            Some(!matches!(state, "Z" | "X" | "x") && start == parsed.start)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(false),
        Err(_) => None,
    }
}

/// A short description of the holder, for messages: `pid 123` (plus the host when it is not
/// this one).
pub fn describe(token: &str) -> String {
    match (Parsed::from(token), Parsed::from(self::token())) {
        (Some(theirs), Some(ours)) if theirs.host == ours.host => format!("pid {}", theirs.pid),
        (Some(theirs), _) => format!("pid {} on {}", theirs.pid, theirs.host),
        (None, _) => "another process".to_owned(),
    }
}

struct Parsed<'a> {
    host: &'a str,
    pid_ns: &'a str,
    pid: &'a str,
    start: &'a str,
}

impl<'a> Parsed<'a> {
    fn from(token: &'a str) -> Option<Parsed<'a>> {
        let mut parts = token.split('/');
        if parts.next()? != VERSION {
            return None;
        }
        let parsed = Parsed {
            host: parts.next()?,
            pid_ns: parts.next()?,
            pid: parts.next()?,
            start: parts.next()?,
        };
        parts.next().is_none().then_some(parsed)
    }
}

fn host() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let name = name.trim().replace('/', "_");
    (!name.is_empty()).then_some(name)
}

fn pid_namespace() -> Option<String> {
    let link = std::fs::read_link("/proc/self/ns/pid").ok()?;
    Some(link.to_string_lossy().replace('/', "_"))
}

fn start_time(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat_fields(&stat).map(|(_, start)| start.to_owned())
}

/// The state (field 3) and start time (field 22) of a `/proc/PID/stat` line. The command name
/// (field 2) is in parentheses and may itself hold spaces and parentheses, so fields are
/// counted from the last `)`.
fn stat_fields(stat: &str) -> Option<(&str, &str)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some((fields.first()?, fields.get(19)?))
}

/// The token of the running process `pid` (of this host and pid namespace).
#[cfg(test)]
pub(crate) fn token_of(pid: u32) -> String {
    let ours = Parsed::from(token()).expect("this process's token parses");
    let start = start_time(pid).unwrap_or_else(|| UNKNOWN.to_owned());
    format!("{VERSION}/{}/{}/{pid}/{start}", ours.host, ours.pid_ns)
}

/// A token of unknown liveness: a process on another host.
#[cfg(test)]
pub(crate) fn elsewhere_token() -> String {
    format!("{VERSION}/another-host/{UNKNOWN}/1/1")
}

/// The token of a process that has exited: for tests that simulate a crash inside one process.
#[cfg(test)]
pub(crate) fn dead_token() -> String {
    let mut child = std::process::Command::new("true")
        .spawn()
        .expect("spawning `true`");
    let pid = child.id();
    let start = start_time(pid).unwrap_or_else(|| "1".to_owned());
    let _ = child.wait();
    let ours = Parsed::from(token()).expect("this process's token parses");
    format!("{VERSION}/{}/{}/{pid}/{start}", ours.host, ours.pid_ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_its_token_is_stable() {
        assert_eq!(token(), token());
        assert_eq!(is_alive(token()), Some(true));
        assert_eq!(describe(token()), format!("pid {}", std::process::id()));
    }

    #[test]
    fn a_finished_process_is_dead_and_a_reused_pid_is_not_mistaken_for_it() {
        assert_eq!(is_alive(&dead_token()), Some(false));
        let ours = Parsed::from(token()).unwrap();
        // Our own pid with another start time: a different process that once had this pid.
        let reused = format!(
            "{VERSION}/{}/{}/{}/{}",
            ours.host,
            ours.pid_ns,
            std::process::id(),
            "0"
        );
        assert_eq!(is_alive(&reused), Some(false));
    }

    #[test]
    fn tokens_from_elsewhere_are_of_unknown_liveness() {
        let ours = Parsed::from(token()).unwrap();
        let other_host = format!(
            "{VERSION}/elsewhere/{}/{}/{}",
            ours.pid_ns,
            std::process::id(),
            ours.start
        );
        assert_eq!(is_alive(&other_host), None);
        assert_eq!(
            describe(&other_host),
            format!("pid {} on elsewhere", std::process::id())
        );
        for junk in ["", "p1", "p1/a/b/c", "p1/a/b/c/d/e", "zz/a/b/c/d"] {
            assert_eq!(is_alive(junk), None, "{junk:?}");
        }
        let unknown_start = format!("{VERSION}/{}/{}/1/?", ours.host, ours.pid_ns);
        assert_eq!(is_alive(&unknown_start), None);
    }

    #[test]
    fn stat_lines_with_odd_command_names_parse() {
        let line =
            "42 (a (weird) name) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(stat_fields(line), Some(("S", "987654")));
        assert_eq!(stat_fields("42 (short) S 1"), None);
        assert_eq!(stat_fields("no parens"), None);
    }
}
