//! Which process holds a claim, and whether it is still running: told by a lock the holder
//! holds (`liveness`), never by looking for it in `/proc`.
//!
//! A process that claims a card first holds a lock file of its own beside the board
//! (`kanban.db.holders/<nonce>.lock`, [`liveness::HeldLock::hold`]) until it exits; the kernel
//! lets go of it when the process ends, however it ends. Its claims carry a token naming that
//! file. Another process tells whether the holder lives by probing the file
//! ([`liveness::probe`]): held, the holder lives; free, it is gone. That answer needs no view
//! of the holder's process at all, so `hidepid`, systemd's `ProtectProc=invisible`, another
//! user, another pid namespace or a container sharing the board's directory cannot hide a live
//! holder (reading `/proc/<pid>` could, and a live holder taken for dead was paid for twice).
//!
//! A holder whose file cannot be tried (it is missing, unreadable to this user, or on a
//! filesystem without locks) is of unknown liveness, and counts as alive until its claim's
//! expiry, past which none of its requests can still be sending; so does a claim of an older
//! build, whose token names no lock file.

use std::collections::HashMap;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, PoisonError};

use crate::liveness::{self, HeldLock, Holder};

const VERSION: &str = "p2";
const UNKNOWN: &str = "?";

/// This process's token: `p2/<host>/<pid>/<nonce>`, the nonce naming its lock file.
pub fn token() -> &'static str {
    static TOKEN: OnceLock<String> = OnceLock::new();
    TOKEN.get_or_init(|| {
        let host = host().unwrap_or_else(|| UNKNOWN.to_owned());
        format!("{VERSION}/{host}/{}/{}", std::process::id(), nonce())
    })
}

/// A random name, unique to this process run.
fn nonce() -> String {
    let high = getrandom::u64().unwrap_or(0);
    let low = getrandom::u64().unwrap_or_else(|_| u64::from(std::process::id()));
    format!("{high:016x}{low:016x}")
}

/// The directory of the holders' lock files of the board at `board`: beside the file the path
/// leads to (symlinks followed), so that every path to one board finds the same files.
pub fn holders_dir(board: &Path) -> PathBuf {
    let real = std::fs::canonicalize(board).unwrap_or_else(|_| board.to_owned());
    let mut name = real.file_name().unwrap_or_default().to_owned();
    name.push(".holders");
    real.with_file_name(name)
}

fn lock_file(dir: &Path, nonce: &str) -> PathBuf {
    dir.join(format!("{nonce}.lock"))
}

/// The lock files this process holds, by holders' directory: their descriptors stay open (and
/// locked) until the process ends.
static HELD: Mutex<Option<HashMap<PathBuf, HeldLock>>> = Mutex::new(None);

/// Makes sure this process holds its lock file beside the board at `board` before it claims a
/// card there (see the module docs). Idempotent and cheap once held; a file deleted meanwhile
/// is made and locked again. An error leaves this process's claims of unknown liveness to
/// others (so they hold until their expiry): safe, only slower to recover from a crash.
pub fn hold_for(board: &Path) -> io::Result<()> {
    let dir = holders_dir(board);
    let Some(nonce) = Parsed::from(token()).map(|parsed| parsed.nonce) else {
        return Ok(());
    };
    let path = lock_file(&dir, nonce);
    let mut held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
    let held = held.get_or_insert_with(HashMap::new);
    if held
        .get(&dir)
        .is_some_and(|lock| lock.path() == path && lock.at_its_path())
    {
        return Ok(());
    }
    // Readable to everyone (the umask permitting), so that a process of another user can try
    // it; the directory is shared like /tmp, each file owned by its holder.
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o1777)
        .create(&dir)?;
    held.insert(dir, HeldLock::hold(&path)?);
    Ok(())
}

/// Whether the process behind `token`, holding a claim on the board at `board`, is running:
/// `Some(true)` or `Some(false)` when its lock file says so, `None` when that cannot be told
/// (see the module docs).
pub fn is_alive(token: &str, board: &Path) -> Option<bool> {
    if token == self::token() {
        return Some(true);
    }
    let parsed = Parsed::from(token)?;
    match liveness::probe(&lock_file(&holders_dir(board), parsed.nonce)) {
        Holder::Held => Some(true),
        Holder::Free => Some(false),
        // A holder may claim without its file (`hold_for` failed: a directory it cannot
        // write), so a missing file says nothing of it.
        Holder::Missing | Holder::Unknown(_) => None,
    }
}

/// Deletes the lock files beside the board at `board` of holders that are gone and that no
/// claim names any more (`named` holds the claims' tokens), so that one file per process that
/// ever claimed a card does not pile up. A file is deleted only while this process holds its
/// lock, so a live holder's file is never touched. Errors are ignored: a file left is harmless.
pub fn let_go_of_dead(board: &Path, named: &[String]) {
    let dir = holders_dir(board);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    let own = Parsed::from(token()).map(|parsed| parsed.nonce.to_owned());
    let named: Vec<&str> = named
        .iter()
        .filter_map(|token| Parsed::from(token).map(|parsed| parsed.nonce))
        .collect();
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(nonce) = path
            .file_name()
            .and_then(|name| name.to_str())
            .and_then(|name| name.strip_suffix(".lock"))
        else {
            continue;
        };
        if own.as_deref() == Some(nonce) || named.contains(&nonce) {
            continue;
        }
        liveness::remove_if_free(&path);
    }
}

/// A short description of the holder, for messages: `pid 123` (plus the host when it is not
/// this one).
pub fn describe(token: &str) -> String {
    match (Parsed::from(token), Parsed::from(self::token())) {
        (Some(theirs), Some(ours)) if theirs.host == ours.host => format!("pid {}", theirs.pid),
        (Some(theirs), _) => format!("pid {} on {}", theirs.pid, theirs.host),
        (None, _) => describe_older(token),
    }
}

/// An older build's token (`p1/<host>/<pid namespace>/<pid>/<start time>`) names its pid too.
fn describe_older(token: &str) -> String {
    let parts: Vec<&str> = token.split('/').collect();
    match parts.as_slice() {
        ["p1", host, _, pid, _] => format!("pid {pid} on {host}"),
        _ => "another process".to_owned(),
    }
}

struct Parsed<'a> {
    host: &'a str,
    pid: &'a str,
    nonce: &'a str,
}

impl<'a> Parsed<'a> {
    fn from(token: &'a str) -> Option<Parsed<'a>> {
        let mut parts = token.split('/');
        if parts.next()? != VERSION {
            return None;
        }
        let parsed = Parsed {
            host: parts.next()?,
            pid: parts.next()?,
            nonce: parts.next()?,
        };
        let plain = |c: char| c.is_ascii_hexdigit();
        (parts.next().is_none() && !parsed.nonce.is_empty() && parsed.nonce.chars().all(plain))
            .then_some(parsed)
    }
}

fn host() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let name = name.trim().replace('/', "_");
    (!name.is_empty()).then_some(name)
}

/// A holder on this host for the tests: its token, and (while it is open) its lock.
#[cfg(test)]
pub(crate) struct TestHolder {
    pub token: String,
    lock: Option<HeldLock>,
}

#[cfg(test)]
impl TestHolder {
    /// A live holder of pid `pid` beside `board`: its lock file locked by this test (another
    /// open file description conflicts like another process).
    pub(crate) fn alive(board: &Path, pid: u32) -> TestHolder {
        let dir = holders_dir(board);
        std::fs::create_dir_all(&dir).expect("creating the holders' directory");
        let nonce = nonce();
        let lock = HeldLock::hold(&lock_file(&dir, &nonce)).expect("holding a lock file");
        let host = host().unwrap_or_else(|| UNKNOWN.to_owned());
        TestHolder {
            token: format!("{VERSION}/{host}/{pid}/{nonce}"),
            lock: Some(lock),
        }
    }

    /// The holder's process ends: its lock goes with it.
    pub(crate) fn die(&mut self) {
        self.lock = None;
    }
}

/// The token of a process that has exited, its lock file left beside `board`.
#[cfg(test)]
pub(crate) fn dead_token(board: &Path) -> String {
    let mut holder = TestHolder::alive(board, 1);
    holder.die();
    holder.token.clone()
}

/// A token of unknown liveness: its lock file cannot be found (another host's filesystem).
#[cfg(test)]
pub(crate) fn elsewhere_token() -> String {
    format!("{VERSION}/another-host/1/{}", nonce())
}

#[cfg(test)]
mod tests {
    use std::fs::{File, TryLockError};

    use super::*;

    fn board() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let board = dir.path().join("kanban.db");
        std::fs::write(&board, b"").unwrap();
        (dir, board)
    }

    #[test]
    fn this_process_is_alive_and_its_token_is_stable() {
        let (_dir, board) = board();
        assert_eq!(token(), token());
        assert_eq!(is_alive(token(), &board), Some(true));
        assert_eq!(describe(token()), format!("pid {}", std::process::id()));
    }

    #[test]
    fn a_holder_lives_while_it_holds_its_lock_and_is_gone_once_it_does_not() {
        let (_dir, board) = board();
        let mut holder = TestHolder::alive(&board, 4242);
        assert_eq!(is_alive(&holder.token, &board), Some(true));
        assert_eq!(describe(&holder.token), "pid 4242");
        // Asking leaves it held.
        assert_eq!(is_alive(&holder.token, &board), Some(true));
        holder.die();
        assert_eq!(is_alive(&holder.token, &board), Some(false));
    }

    #[test]
    fn every_path_to_the_board_finds_the_same_lock_files() {
        let (dir, board) = board();
        let link = dir.path().join("elsewhere.db");
        std::os::unix::fs::symlink(&board, &link).unwrap();
        let holder = TestHolder::alive(&board, 7);
        assert_eq!(holders_dir(&link), holders_dir(&board));
        assert_eq!(is_alive(&holder.token, &link), Some(true));
    }

    #[test]
    fn this_process_holds_its_own_lock_once_it_claims_and_after_its_file_is_deleted() {
        let (_dir, board) = board();
        hold_for(&board).unwrap();
        let nonce = Parsed::from(token()).unwrap().nonce;
        let path = lock_file(&holders_dir(&board), nonce);
        let other = File::open(&path).unwrap();
        assert!(matches!(
            other.try_lock_shared(),
            Err(TryLockError::WouldBlock)
        ));
        hold_for(&board).unwrap();
        // Deleted by a cleaner: made and locked again at the next claim.
        std::fs::remove_file(&path).unwrap();
        hold_for(&board).unwrap();
        let again = File::open(&path).unwrap();
        assert!(matches!(
            again.try_lock_shared(),
            Err(TryLockError::WouldBlock)
        ));
    }

    #[test]
    fn holders_that_cannot_be_told_are_of_unknown_liveness() {
        let (_dir, board) = board();
        assert_eq!(is_alive(&elsewhere_token(), &board), None);
        // A claim of an older build names no lock file, only a pid: /proc is not asked.
        let older = format!("p1/host/pid:[1]/{}/123", std::process::id());
        assert_eq!(is_alive(&older, &board), None);
        assert_eq!(
            describe(&older),
            format!("pid {} on host", std::process::id())
        );
        for junk in [
            "",
            "p2",
            "p2/a/b",
            "p2/a/1/not-hex",
            "p2/a/1/ab/extra",
            "zz/a/b/c",
        ] {
            assert_eq!(is_alive(junk, &board), None, "{junk:?}");
        }
    }

    #[test]
    fn the_files_of_dead_holders_no_claim_names_are_deleted_and_no_other() {
        let (_dir, board) = board();
        let live = TestHolder::alive(&board, 1);
        let named_dead = dead_token(&board);
        let unnamed_dead = dead_token(&board);
        let file_of =
            |token: &str| lock_file(&holders_dir(&board), Parsed::from(token).unwrap().nonce);
        let_go_of_dead(&board, std::slice::from_ref(&named_dead));
        assert!(file_of(&live.token).exists());
        assert!(file_of(&named_dead).exists());
        assert!(!file_of(&unnamed_dead).exists());
        assert_eq!(is_alive(&live.token, &board), Some(true));
    }
}
