//! Liveness by a lock its holder holds: whether a process (and every descendant that inherited
//! the lock) is still running, told by an advisory `flock` on a file rather than by `/proc`.
//!
//! `/proc` can lie or hide: a recycled pid looks alive, `hidepid` hides a live one, another pid
//! namespace shows nothing. A lock cannot: the kernel drops it when the last descriptor of the
//! open file that holds it is closed, which happens at the latest when every process that
//! inherited that descriptor has exited. So a worker's run is given a lock file before its
//! worker is forked; the spawner creates and locks it, the worker inherits the locked
//! descriptor (as do its own children), and the spawner closes its copy. From then on the lock
//! is held exactly while some process of the worker's tree still has it: any process, in any
//! pid namespace on the same filesystem, tells a live worker from a dead one by trying the lock
//! ([`probe`]).
//!
//! What it cannot tell: a descendant that closed the inherited descriptor (a daemon that closes
//! every file) is not seen; a filesystem without `flock` (some network filesystems) makes every
//! probe say [`Holder::Unknown`].

use std::fs::{File, OpenOptions, TryLockError};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
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

/// Tries the lock at `path` without waiting, and lets it go at once. Two probes at the same
/// moment may see each other as a holder: a probe errs towards "alive", never the other way.
pub fn probe(path: &Path) -> Holder {
    let file = match OpenOptions::new().read(true).open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Holder::Missing,
        Err(e) => return Holder::Unknown(format!("{}: {e}", path.display())),
    };
    match file.try_lock() {
        Ok(()) => Holder::Free,
        Err(TryLockError::WouldBlock) => Holder::Held,
        Err(TryLockError::Error(e)) => Holder::Unknown(format!("{}: {e}", path.display())),
    }
}

/// Removes the lock file at `path` if nobody holds it (taking the lock for the moment of the
/// removal, so a holder can never lose its file under it); returns whether it is gone.
pub fn remove_if_free(path: &Path) -> bool {
    let file = match OpenOptions::new().read(true).open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return true,
        Err(_) => return false,
    };
    if file.try_lock().is_err() {
        return false;
    }
    std::fs::remove_file(path).is_ok()
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
    fn a_lock_that_cannot_be_opened_is_unknown() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("plain");
        std::fs::write(&file, "").unwrap();
        // A path through a file: neither held, nor free, nor missing.
        assert!(matches!(probe(&file.join("x")), Holder::Unknown(_)));
    }
}
