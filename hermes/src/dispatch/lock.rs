//! The singleton lock: one dispatching gateway per board, or two gateways would bill every card
//! twice.
//!
//! An advisory `flock` on a file in `$HERMES_GATEWAY_LOCK_DIR`. The kernel drops it when the
//! holder dies, however it dies, so a gateway killed with SIGKILL never leaves a stale lock behind.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

/// Why the lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "another gateway{} is already dispatching the board at {board}; refusing to start a second \
         one (it would bill every card twice). Lock file: {lock}",
        holder.map(|pid| format!(" (pid {pid})")).unwrap_or_default()
    )]
    Held {
        board: PathBuf,
        lock: PathBuf,
        holder: Option<u32>,
    },
    #[error("cannot use the gateway lock at {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Holds the lock until dropped.
#[derive(Debug)]
pub struct SingletonLock {
    _lock: Flock<File>,
    path: PathBuf,
}

impl SingletonLock {
    /// Takes the lock for the board at `db_path`, without waiting.
    pub fn acquire(lock_dir: &Path, db_path: &Path) -> Result<Self, LockError> {
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| LockError::Io { path, source }
        };
        fs::create_dir_all(lock_dir).map_err(io(lock_dir))?;
        // One lock per board, so a shared lock dir can serve several boards.
        let board = fs::canonicalize(db_path).unwrap_or_else(|_| db_path.to_owned());
        let path = lock_dir.join(format!(
            "gateway-{:016x}.lock",
            fnv1a(board.as_os_str().as_encoded_bytes())
        ));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io(&path))?;
        let mut lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => lock,
            Err((mut file, Errno::EWOULDBLOCK)) => {
                let mut text = String::new();
                let holder = file
                    .read_to_string(&mut text)
                    .ok()
                    .and_then(|_| text.trim().parse().ok());
                return Err(LockError::Held {
                    board,
                    lock: path,
                    holder,
                });
            }
            Err((_, errno)) => {
                return Err(LockError::Io {
                    path,
                    source: errno.into(),
                })
            }
        };
        // The pid is only for the refusal message of a second gateway.
        let write_pid = |file: &mut File| -> std::io::Result<()> {
            file.set_len(0)?;
            file.seek(SeekFrom::Start(0))?;
            writeln!(file, "{}", std::process::id())?;
            file.sync_data()
        };
        write_pid(&mut lock).map_err(io(&path))?;
        Ok(Self { _lock: lock, path })
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A stable hash (unlike std's, which may change between releases): two gateway builds must
/// agree on the lock file name for the same board.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_the_same_board_is_refused_and_released_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("kanban.db");
        std::fs::write(&db, b"").unwrap();
        let first = SingletonLock::acquire(&dir.path().join("locks"), &db).unwrap();
        let err = SingletonLock::acquire(&dir.path().join("locks"), &db).unwrap_err();
        match &err {
            LockError::Held { holder, .. } => assert_eq!(*holder, Some(std::process::id())),
            other => panic!("expected Held, got {other:?}"),
        }
        assert!(err.to_string().contains("already dispatching"), "{err}");
        drop(first);
        SingletonLock::acquire(&dir.path().join("locks"), &db).unwrap();
    }

    #[test]
    fn different_boards_do_not_share_a_lock() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.db"), dir.path().join("b.db"));
        std::fs::write(&a, b"").unwrap();
        std::fs::write(&b, b"").unwrap();
        let _a = SingletonLock::acquire(dir.path(), &a).unwrap();
        let _b = SingletonLock::acquire(dir.path(), &b).unwrap();
    }
}
