//! Liveness by a lock its holder holds: whether a process (and every descendant that inherited
//! the lock) is still running, told by an advisory `flock` on a file rather than by `/proc`.
//! The one way the board's processes prove themselves alive: a claim's holder (`process`) and a
//! worker's whole tree (`dispatch::spawn`) each hold a lock file; anyone else takes it
//! ([`HeldLock`]), tests it ([`probe`]) and cleans it up ([`remove_if_free`]) here.
//!
//! `/proc` can lie or hide: a recycled pid looks alive, `hidepid` (systemd's
//! `ProtectProc=invisible`) or another user hides a live one, another pid namespace shows
//! nothing. A lock cannot: the kernel drops it when the last descriptor of the open file that
//! holds it is closed, which happens at the latest when every process that inherited that
//! descriptor has exited, however they exit. So:
//! - a process that claims a card holds its own lock file for as long as it runs
//!   ([`HeldLock::hold`]);
//! - a worker's run is given a fresh lock file before its worker is forked
//!   ([`HeldLock::create`]): the spawner creates and locks it, the worker inherits the locked
//!   descriptor (as do its own children, [`inherit_in_child`]) and writes its pid into it
//!   ([`write_pid_in_child`]), and the spawner closes its copy. From then on the lock is held
//!   exactly while some process of the worker's tree still has it.
//!
//! Any process, of any user, in any pid namespace on the same filesystem, tells a live holder
//! from a dead one by trying a shared lock without waiting ([`probe`]); probes never see each
//! other as holders. What a lock cannot tell: a descendant that closed the inherited descriptor
//! (a daemon that closes every file) is not seen; a file that cannot be opened, or a filesystem
//! without `flock` (some network filesystems), makes a probe say [`Holder::Unknown`], which
//! every caller counts as alive.

use std::fs::{File, OpenOptions, TryLockError};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// A lock file this process created and holds.
#[derive(Debug)]
pub struct HeldLock {
    file: File,
    path: PathBuf,
}

impl HeldLock {
    /// Creates the lock file at `path` (its directory too; the file must not exist yet) and
    /// locks it. Created fresh, so no other process can hold it already.
    pub fn create(path: &Path) -> io::Result<HeldLock> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)?;
        match file.try_lock() {
            Ok(()) => Ok(HeldLock {
                file,
                path: path.to_owned(),
            }),
            Err(TryLockError::WouldBlock) => Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!("{} was locked as soon as it was created", path.display()),
            )),
            Err(TryLockError::Error(err)) => {
                let _ = std::fs::remove_file(path);
                Err(err)
            }
        }
    }

    /// Opens (creating it if need be) the lock file at `path`, readable to everyone so that a
    /// process of another user can probe it, and locks it, waiting for a probe or a cleaner
    /// that holds it for a moment. A cleaner may unlink the file between its opening and its
    /// lock ([`remove_if_free`]): locked, it must still be the file at the path.
    pub fn hold(path: &Path) -> io::Result<HeldLock> {
        for _ in 0..3 {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o644)
                .open(path)?;
            file.lock()?;
            if same_file(&file, path) {
                return Ok(HeldLock {
                    file,
                    path: path.to_owned(),
                });
            }
        }
        Err(io::Error::other(format!(
            "{} kept disappearing while it was locked",
            path.display()
        )))
    }

    /// Whether the lock file is still at its path (a cleaner may delete it, or a person).
    pub fn at_its_path(&self) -> bool {
        same_file(&self.file, &self.path)
    }

    /// Where the lock file is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The descriptor holding the lock, for a child to inherit (the descriptor is close-on-exec
    /// until the child clears that flag on its copy, see [`inherit_in_child`]).
    pub fn raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// Gives the lock up and removes its file: for a lock whose worker was never started.
    pub fn discard(self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Clears close-on-exec on `fd` in a freshly forked child, so that the program it executes
/// (and that program's own children) inherit the lock. Only async-signal-safe calls: it runs
/// between `fork` and `exec`.
///
/// # Safety
/// Call only in a child between `fork` and `exec` (a `pre_exec` hook), with a descriptor that
/// is open there.
pub unsafe fn inherit_in_child(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor the caller guarantees open; no allocation.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Writes this process's pid into the lock file behind `fd`, from a freshly forked child: so
/// the worker's pid (its process group's id) is on disk before it runs anything, even if the
/// process that forked it dies before recording it anywhere else ([`recorded_pid`]). Only
/// async-signal-safe calls, no allocation.
///
/// # Safety
/// As [`inherit_in_child`].
pub unsafe fn write_pid_in_child(fd: RawFd) -> io::Result<()> {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut rest = u64::try_from(pid).unwrap_or(0);
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    let text = &digits[at..];
    // SAFETY: the buffer is valid for its length; pwrite on an open descriptor.
    let written = unsafe { libc::pwrite(fd, text.as_ptr().cast(), text.len(), 0) };
    if written < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The pid a worker wrote into its lock file ([`write_pid_in_child`]), if any.
pub fn recorded_pid(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Whether anything holds a lock file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    /// A process holds it: the tree it was made for is (at least partly) alive.
    Held,
    /// Nobody holds it: every process that held it has exited.
    Free,
    /// There is no such file: whatever it was made for is long gone (or was never started).
    Missing,
    /// It cannot be told (the file cannot be opened, or the filesystem refuses `flock`).
    Unknown(String),
}

impl Holder {
    /// Whether the holder is certainly gone.
    pub fn gone(&self) -> bool {
        matches!(self, Holder::Free | Holder::Missing)
    }
}

/// Tries a shared lock on `path` without waiting, and lets it go at once: refused, a holder
/// has it; granted, nobody does. Probes never refuse each other; one that meets a cleaner
/// ([`remove_if_free`]) at work errs towards "alive", never the other way.
pub fn probe(path: &Path) -> Holder {
    let file = match OpenOptions::new().read(true).open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Holder::Missing,
        Err(e) => return Holder::Unknown(format!("{}: {e}", path.display())),
    };
    match file.try_lock_shared() {
        Ok(()) => Holder::Free,
        Err(TryLockError::WouldBlock) => Holder::Held,
        Err(TryLockError::Error(e)) => Holder::Unknown(format!("{}: {e}", path.display())),
    }
}

/// Removes the lock file at `path` if nobody holds it (taking the lock for the moment of the
/// removal, and only while the file locked is still the one at the path, so a holder can never
/// lose its file under it); returns whether it is gone. Errors leave the file: a file left is
/// harmless.
pub fn remove_if_free(path: &Path) -> bool {
    let file = match OpenOptions::new().read(true).open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return true,
        Err(_) => return false,
    };
    if file.try_lock().is_err() || !same_file(&file, path) {
        return false;
    }
    std::fs::remove_file(path).is_ok()
}

/// Whether `file` is the file at `path` now (same device and inode).
fn same_file(file: &File, path: &Path) -> bool {
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(open), Ok(named)) => (open.dev(), open.ino()) == (named.dev(), named.ino()),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};

    use super::*;

    #[test]
    fn a_held_lock_reads_held_until_it_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("workers/a.lock");
        let lock = HeldLock::create(&path).unwrap();
        assert_eq!(probe(&path), Holder::Held);
        assert!(!remove_if_free(&path), "a held lock is never removed");
        assert!(
            HeldLock::create(&path).is_err(),
            "a lock file is created once"
        );
        drop(lock);
        assert_eq!(probe(&path), Holder::Free);
        assert!(remove_if_free(&path));
        assert_eq!(probe(&path), Holder::Missing);
        assert!(Holder::Missing.gone() && Holder::Free.gone() && !Holder::Held.gone());
    }

    #[test]
    fn a_child_that_inherits_the_lock_holds_it_after_its_parent_lets_go_and_until_it_exits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("child.lock");
        let lock = HeldLock::create(&path).unwrap();
        let fd = lock.raw_fd();
        let mut command = Command::new("sh");
        // The child forks a grandchild that outlives it: the lock stays held until both exit.
        command
            .args(["-c", "sleep 0.3 & read line"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null());
        // SAFETY: only fcntl, getpid and pwrite on an open descriptor, between fork and exec.
        unsafe {
            command.pre_exec(move || {
                inherit_in_child(fd)?;
                write_pid_in_child(fd)
            });
        }
        let mut child = command.spawn().unwrap();
        drop(lock);
        assert_eq!(probe(&path), Holder::Held, "the child holds the lock now");
        assert_eq!(
            recorded_pid(&path),
            Some(child.id()),
            "its pid is in the file"
        );
        drop(child.stdin.take());
        child.wait().unwrap();
        // The grandchild (sleep) still holds it for a moment.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while probe(&path) == Holder::Held {
            assert!(
                std::time::Instant::now() < deadline,
                "the lock was never let go"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert_eq!(probe(&path), Holder::Free);
    }

    #[test]
    fn a_held_file_is_locked_again_once_deleted_and_probes_never_hold_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("holder.lock");
        let held = HeldLock::hold(&path).unwrap();
        assert!(held.at_its_path());
        assert_eq!(probe(&path), Holder::Held);
        assert!(!remove_if_free(&path), "a held file is never removed");
        std::fs::remove_file(&path).unwrap();
        assert!(!held.at_its_path(), "a deleted file is noticed");
        let again = HeldLock::hold(&path).unwrap();
        assert_eq!(probe(&path), Holder::Held);
        drop((held, again));
        assert_eq!(probe(&path), Holder::Free);
        // A probe at work (its shared lock taken) keeps a cleaner away, and is not taken for a
        // holder by another probe.
        let probing = File::open(&path).unwrap();
        probing.try_lock_shared().unwrap();
        assert!(!remove_if_free(&path));
        assert_eq!(probe(&path), Holder::Free);
        drop(probing);
        assert!(remove_if_free(&path));
    }

    #[test]
    fn a_lock_that_cannot_be_opened_is_unknown() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("plain");
        std::fs::write(&file, "").unwrap();
        // A path through a file: neither held, nor free, nor missing.
        assert!(matches!(probe(&file.join("x")), Holder::Unknown(_)));
    }
}
