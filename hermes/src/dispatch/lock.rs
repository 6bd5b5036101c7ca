//! The singleton lock: one dispatching gateway per board, or two gateways would bill every card
//! twice.
//!
//! An advisory `flock` on a file in `$HERMES_GATEWAY_LOCK_DIR` (std's [`File::try_lock`], which
//! is `flock(LOCK_EX | LOCK_NB)` on Unix: held per open file description, released when it is
//! closed). The kernel drops it when the holder dies, however it dies, so a gateway killed with
//! SIGKILL never leaves a stale lock behind.
//!
//! That lock is named after the board's path, and a board has many paths (a symlinked or
//! hardlinked home, another `HERMES_GATEWAY_LOCK_DIR`), and lock files can be deleted under a
//! running gateway. So before it dispatches, the gateway also holds [`BoardLock`]: a `flock` on
//! `kanban.db` itself, which every path and link to the board shares and no one can delete
//! without deleting the board. A second gateway that finds it taken dispatches nothing until it
//! is released. Besides both, the gateway holds the two locks upstream hermes-agent's
//! dispatchers use for the same board ([`UpstreamLocks`]), so that an upstream gateway beside it
//! never dispatches either.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::store::FileId;

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

/// Holds the lock until dropped (closing the file releases it).
#[derive(Debug)]
pub struct SingletonLock {
    _file: File,
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
        let board = canonical_board(db_path);
        let path = Self::path_for(lock_dir, db_path);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io(&path))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
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
            Err(TryLockError::Error(source)) => return Err(LockError::Io { path, source }),
        }
        // The pid is only for the refusal message of a second gateway.
        let write_pid = |file: &mut File| -> std::io::Result<()> {
            file.set_len(0)?;
            file.seek(SeekFrom::Start(0))?;
            writeln!(file, "{}", std::process::id())?;
            file.sync_data()
        };
        write_pid(&mut file).map_err(io(&path))?;
        Ok(Self { _file: file, path })
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The lock file of the board at `db_path` in `lock_dir`: one per board, so a shared lock
    /// directory can serve several boards.
    pub fn path_for(lock_dir: &Path, db_path: &Path) -> PathBuf {
        let board = canonical_board(db_path);
        lock_dir.join(format!(
            "gateway-{:016x}.lock",
            fnv1a(board.as_os_str().as_encoded_bytes())
        ))
    }

    /// Whether [`acquire`](Self::acquire) would take the lock now, creating nothing: a lock file
    /// that does not exist yet is free, one that exists is tried with a shared lock that is
    /// dropped at once (a gateway starting in that instant would take it for another gateway's).
    pub fn probe(lock_dir: &Path, db_path: &Path) -> LockProbe {
        let path = Self::path_for(lock_dir, db_path);
        let file = match File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return match may_create(&path) {
                    Ok(()) => LockProbe::Free { path },
                    Err(error) => LockProbe::Unusable { path, error },
                };
            }
            Err(error) => return LockProbe::Unusable { path, error },
        };
        match file.try_lock_shared() {
            Ok(()) => LockProbe::Free { path },
            Err(TryLockError::WouldBlock) => {
                let holder = fs::read_to_string(&path)
                    .ok()
                    .and_then(|text| text.trim().parse().ok());
                LockProbe::Held {
                    board: canonical_board(db_path),
                    path,
                    holder,
                }
            }
            Err(TryLockError::Error(error)) => LockProbe::Unusable { path, error },
        }
    }
}

/// What [`SingletonLock::probe`] found.
#[derive(Debug)]
pub enum LockProbe {
    /// Nobody holds it: a gateway would take it.
    Free { path: PathBuf },
    /// Another gateway holds it: a gateway would refuse to start.
    Held {
        board: PathBuf,
        path: PathBuf,
        holder: Option<u32>,
    },
    /// It could not be opened or created: a gateway would refuse to start.
    Unusable {
        path: PathBuf,
        error: std::io::Error,
    },
}

impl LockProbe {
    /// The refusal a gateway would give, when it would give one.
    pub fn refusal(self) -> Option<LockError> {
        match self {
            LockProbe::Free { .. } => None,
            LockProbe::Held {
                board,
                path,
                holder,
            } => Some(LockError::Held {
                board,
                lock: path,
                holder,
            }),
            LockProbe::Unusable { path, error } => Some(LockError::Io {
                path,
                source: error,
            }),
        }
    }
}

/// The board's path as the lock names it: resolved through symlinks, its directory's when the
/// board does not exist yet (the gateway creates it before it takes the lock).
fn canonical_board(db_path: &Path) -> PathBuf {
    fs::canonicalize(db_path)
        .ok()
        .or_else(|| {
            let dir = fs::canonicalize(db_path.parent()?).ok()?;
            Some(dir.join(db_path.file_name()?))
        })
        .unwrap_or_else(|| db_path.to_owned())
}

/// Whether `path` could be created: its nearest existing ancestor is a directory this process
/// may write to.
pub(crate) fn may_create(path: &Path) -> std::io::Result<()> {
    let dir = path
        .ancestors()
        .skip(1)
        .find(|dir| dir.as_os_str().is_empty() || dir.exists())
        .filter(|dir| !dir.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    may_access(dir, libc::W_OK | libc::X_OK)
}

/// Whether this process may use `path` as `mode` says (`access(2)`: `R_OK`, `W_OK`, `X_OK`).
pub(crate) fn may_access(path: &Path, mode: libc::c_int) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let name = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: `name` is a NUL-terminated path that lives across the call.
    if unsafe { libc::access(name.as_ptr(), mode) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The dispatcher locks on the board at `db_path` that some process holds now, with its pid,
/// as `/proc/locks` shows them (read only; a holder in another pid namespace does not show):
/// the board file itself and upstream's two, which a gateway holds while it dispatches.
pub fn dispatcher_locks_held(db_path: &Path) -> Vec<(PathBuf, u32)> {
    let upstream = UpstreamLocks::new(db_path);
    std::iter::once(db_path)
        .chain(upstream.paths())
        .filter_map(|path| {
            let holder = flock_holder(FileId::of(path)?)?;
            Some((path.to_owned(), holder))
        })
        .collect()
}

/// What [`UpstreamLocks::poll`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamLockState {
    /// Both locks are held (or could not even be opened, which upstream treats the same way):
    /// this gateway may dispatch.
    Held,
    /// Another process holds this lock file: do not dispatch yet.
    Busy(PathBuf),
    /// Another gateway holds the board itself (`kanban.db`, by device and inode), whatever path
    /// it reached it by: do not dispatch yet.
    BoardBusy {
        board: PathBuf,
        id: FileId,
        holder: Option<u32>,
    },
}

/// The locks upstream hermes-agent (0.19.0) takes for a board, held here for the gateway's
/// lifetime once taken:
///
/// - `<home>/kanban/.dispatcher.lock`: an upstream gateway takes it once at start and holds it
///   for its lifetime; one that finds it taken never dispatches, auto-decompose included (its
///   auto-decompose runs outside the per-tick lock, so holding this one is what keeps it away).
/// - `<board>.dispatch.lock` beside `kanban.db`: upstream takes it around each dispatcher tick
///   and skips the tick when it is taken.
///
/// Taken in that order, and each only once the one before is held, so a gateway that cannot
/// dispatch yet never blocks upstream's ticks. Both are retried on every [`poll`](Self::poll)
/// until held; a file that cannot even be created counts as held, as upstream does, so a
/// read-only directory cannot stop dispatching.
#[derive(Debug)]
pub struct UpstreamLocks {
    slots: [LockSlot; 2],
}

#[derive(Debug)]
struct LockSlot {
    path: PathBuf,
    /// The locked file, once locked.
    held: Option<File>,
    /// Could not be opened at all (see [`UpstreamLocks`]).
    unusable: bool,
}

impl UpstreamLocks {
    /// The locks for the board at `db_path`; nothing is taken yet.
    pub fn new(db_path: &Path) -> UpstreamLocks {
        let dir = match db_path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
            _ => PathBuf::from("."),
        };
        let mut tick = db_path.as_os_str().to_owned();
        tick.push(".dispatch.lock");
        let slot = |path: PathBuf| LockSlot {
            path,
            held: None,
            unusable: false,
        };
        UpstreamLocks {
            slots: [
                slot(dir.join("kanban").join(".dispatcher.lock")),
                slot(PathBuf::from(tick)),
            ],
        }
    }

    /// The lock files, in the order they are taken.
    pub fn paths(&self) -> [&Path; 2] {
        [&self.slots[0].path, &self.slots[1].path]
    }

    /// Takes whatever is not held yet, without waiting.
    pub fn poll(&mut self) -> UpstreamLockState {
        for slot in &mut self.slots {
            if slot.held.is_some() || slot.unusable {
                continue;
            }
            let opened = slot
                .path
                .parent()
                .map_or(Ok(()), fs::create_dir_all)
                .and_then(|()| {
                    OpenOptions::new()
                        .read(true)
                        .append(true)
                        .create(true)
                        .open(&slot.path)
                });
            let file = match opened {
                Ok(file) => file,
                Err(_) => {
                    slot.unusable = true;
                    continue;
                }
            };
            match file.try_lock() {
                Ok(()) => slot.held = Some(file),
                Err(TryLockError::WouldBlock) => {
                    return UpstreamLockState::Busy(slot.path.clone());
                }
                // A filesystem without flock: nothing to coordinate through.
                Err(TryLockError::Error(_)) => slot.unusable = true,
            }
        }
        UpstreamLockState::Held
    }

    /// The lock files that could not be used at all (treated as held).
    pub fn unusable(&self) -> Vec<&Path> {
        self.slots
            .iter()
            .filter(|s| s.unusable)
            .map(|s| s.path.as_path())
            .collect()
    }
}

/// An exclusive `flock` on `kanban.db` itself: one dispatcher per board, whatever path, symlink,
/// hardlink or lock directory reaches it (see the module docs).
///
/// `flock` and the POSIX record locks SQLite takes on the same file are independent on Linux, so
/// this lock never gets in SQLite's way. (std documents `try_lock` as `flock` on Unix "currently";
/// the test below finds this lock in `/proc/locks` as a `FLOCK`, so a change would fail it.) Its
/// descriptor is never closed while the process runs:
/// closing *any* descriptor of a file drops every POSIX lock the process holds on it, SQLite's
/// included. When the board file is replaced, the lock follows the file now at the path and the
/// old descriptor is kept until the process ends.
#[derive(Debug)]
pub struct BoardLock {
    db: PathBuf,
    /// The locked file.
    held: Option<(FileId, File)>,
    /// A descriptor of the file at the path whose lock another process holds, kept to try again.
    waiting: Option<(FileId, File)>,
    /// Descriptors of files that are no longer the board (see above), locked or not.
    retired: Vec<File>,
    /// The filesystem cannot lock this file at all: nothing to coordinate through.
    unusable: bool,
}

impl BoardLock {
    /// Lets go of the file locked so far (it is no longer at the board's path: moved to another
    /// home, deleted or replaced), so that a gateway wherever it is now can dispatch it. The
    /// `flock` is released, the descriptor kept (see above).
    pub fn let_go(&mut self) {
        if let Some((_, file)) = self.held.take() {
            let _ = file.unlock();
            self.retired.push(file);
        }
        self.unusable = false;
    }

    /// The lock for the board at `db_path`; nothing is taken yet.
    pub fn new(db_path: &Path) -> BoardLock {
        BoardLock {
            db: db_path.to_owned(),
            held: None,
            waiting: None,
            retired: Vec::new(),
            unusable: false,
        }
    }

    /// Holds the lock on the file now at the board's path, without waiting: `Held` when it is
    /// held (or cannot be used at all), `BoardBusy` when another process holds it.
    pub fn poll(&mut self) -> UpstreamLockState {
        let current = FileId::of(&self.db);
        if let Some((id, _)) = &self.held {
            if Some(*id) == current {
                return UpstreamLockState::Held;
            }
            self.let_go();
        }
        if self.unusable {
            return UpstreamLockState::Held;
        }
        let (id, file) = match self.waiting.take() {
            Some((id, file)) if Some(id) == current => (id, file),
            other => {
                if let Some((_, stale)) = other {
                    self.retired.push(stale);
                }
                // No board at the path (yet): the store creates it, and the next poll locks it.
                let Ok(file) = File::open(&self.db) else {
                    return UpstreamLockState::Held;
                };
                match file.metadata() {
                    Ok(meta) => {
                        use std::os::unix::fs::MetadataExt;
                        let id = FileId {
                            dev: meta.dev(),
                            ino: meta.ino(),
                        };
                        (id, file)
                    }
                    Err(_) => {
                        self.retired.push(file);
                        return UpstreamLockState::Held;
                    }
                }
            }
        };
        match file.try_lock() {
            Ok(()) => {
                self.held = Some((id, file));
                UpstreamLockState::Held
            }
            Err(TryLockError::WouldBlock) => {
                self.waiting = Some((id, file));
                UpstreamLockState::BoardBusy {
                    board: self.db.clone(),
                    id,
                    holder: flock_holder(id),
                }
            }
            Err(TryLockError::Error(_)) => {
                self.retired.push(file);
                self.unusable = true;
                UpstreamLockState::Held
            }
        }
    }
}

/// The pid holding a `flock` on the file `id`, as `/proc/locks` lists it.
fn flock_holder(id: FileId) -> Option<u32> {
    let locks = fs::read_to_string("/proc/locks").ok()?;
    let (major, minor) = (libc::major(id.dev), libc::minor(id.dev));
    let file = format!("{major:02x}:{minor:02x}:{}", id.ino);
    locks.lines().find_map(|line| {
        // `1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF`
        let fields: Vec<&str> = line.split_whitespace().collect();
        let pid = fields.get(4)?;
        (fields.get(1) == Some(&"FLOCK") && fields.get(5) == Some(&file.as_str()))
            .then(|| pid.parse().ok())
            .flatten()
    })
}

/// Logs the upstream locks' state once per change, and answers whether the gateway may
/// dispatch: the gateway calls [`DispatchGate::may_dispatch`] at start and before every tick.
#[derive(Debug)]
pub struct DispatchGate {
    board: BoardLock,
    locks: UpstreamLocks,
    last: Option<UpstreamLockState>,
}

impl DispatchGate {
    /// The gate for the board at `db_path`; takes nothing until the first call.
    pub fn new(db_path: &Path) -> DispatchGate {
        DispatchGate {
            board: BoardLock::new(db_path),
            locks: UpstreamLocks::new(db_path),
            last: None,
        }
    }

    /// Lets go of the board's lock (see [`BoardLock::let_go`]): the gateway's board is no
    /// longer at its path.
    pub fn let_go_of_board(&mut self) {
        self.board.let_go();
        self.last = None;
    }

    /// Tries to take the locks not held yet; `true` when all are held. One WARN naming the
    /// file when a lock is found taken, one INFO when they are all held.
    pub fn may_dispatch(&mut self) -> bool {
        // The board first: a gateway of ours that waits for another never holds upstream's
        // locks, which would stop an upstream gateway's ticks.
        let state = match self.board.poll() {
            UpstreamLockState::Held => self.locks.poll(),
            busy => busy,
        };
        if self.last.as_ref() != Some(&state) {
            match &state {
                UpstreamLockState::BoardBusy { board, id, holder } => tracing::warn!(
                    board = %board.display(),
                    "another gateway{} dispatches this board ({} is the file at {id}, whatever \
                     path, link or lock directory reaches it); not dispatching until it stops",
                    holder.map(|pid| format!(" (pid {pid})")).unwrap_or_default(),
                    board.display()
                ),
                UpstreamLockState::Busy(path) => tracing::warn!(
                    lock = %path.display(),
                    "another dispatcher (an upstream hermes-agent gateway) holds {}; not \
                     dispatching until it is released",
                    path.display()
                ),
                UpstreamLockState::Held => {
                    for path in self.locks.unusable() {
                        tracing::warn!(
                            lock = %path.display(),
                            "cannot use the dispatcher lock {}; dispatching without it, as \
                             upstream does",
                            path.display()
                        );
                    }
                    if self.last.is_some() {
                        tracing::info!("dispatcher locks acquired; dispatching");
                    }
                }
            }
            self.last = Some(state.clone());
        }
        state == UpstreamLockState::Held
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
    fn a_probe_sees_what_acquire_would_and_creates_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("kanban.db");
        let locks = dir.path().join("locks");
        // No board and no lock directory yet: free, and still nothing there.
        assert!(matches!(
            SingletonLock::probe(&locks, &db),
            LockProbe::Free { .. }
        ));
        assert!(!locks.exists());
        std::fs::write(&db, b"").unwrap();
        let held = SingletonLock::acquire(&locks, &db).unwrap();
        match SingletonLock::probe(&locks, &db) {
            LockProbe::Held { path, holder, .. } => {
                assert_eq!(path, held.path());
                assert_eq!(holder, Some(std::process::id()));
            }
            other => panic!("expected Held, got {other:?}"),
        }
        drop(held);
        let probe = SingletonLock::probe(&locks, &db);
        assert!(matches!(probe, LockProbe::Free { .. }), "{probe:?}");
        assert!(probe.refusal().is_none());
        // What the probe found free, acquire takes.
        assert!(SingletonLock::acquire(&locks, &db).is_ok());
    }

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

    /// Holds `path` as another process would (a separate open file description).
    fn hold(path: &Path) -> File {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(path)
            .unwrap();
        file.try_lock().unwrap();
        file
    }

    #[test]
    fn upstream_locks_are_beside_the_board_and_under_its_kanban_dir() {
        let locks = UpstreamLocks::new(Path::new("/h/kanban.db"));
        assert_eq!(
            locks.paths(),
            [
                Path::new("/h/kanban/.dispatcher.lock"),
                Path::new("/h/kanban.db.dispatch.lock")
            ]
        );
    }

    #[test]
    fn upstream_locks_are_taken_in_order_and_retried_until_held() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("kanban.db");
        let [dispatcher, tick] = UpstreamLocks::new(&db).paths().map(Path::to_owned);

        let upstream_gateway = hold(&dispatcher);
        let mut ours = UpstreamLocks::new(&db);
        assert_eq!(ours.poll(), UpstreamLockState::Busy(dispatcher.clone()));
        // Not dispatching, so upstream's per-tick lock is left alone.
        drop(hold(&tick));

        drop(upstream_gateway);
        let upstream_tick = hold(&tick);
        assert_eq!(ours.poll(), UpstreamLockState::Busy(tick.clone()));
        drop(upstream_tick);
        assert_eq!(ours.poll(), UpstreamLockState::Held);

        // Held from now on: upstream finds both taken.
        for path in [&dispatcher, &tick] {
            let file = OpenOptions::new()
                .read(true)
                .append(true)
                .open(path)
                .unwrap();
            assert!(matches!(file.try_lock(), Err(TryLockError::WouldBlock)));
        }
        assert_eq!(ours.poll(), UpstreamLockState::Held);
        drop(ours);
        drop(hold(&dispatcher));
        drop(hold(&tick));
    }

    #[test]
    fn an_unusable_lock_file_counts_as_held() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("kanban.db");
        // A file where the lock directory should be: nothing can be created under it.
        std::fs::write(dir.path().join("kanban"), b"").unwrap();
        let mut locks = UpstreamLocks::new(&db);
        assert_eq!(locks.poll(), UpstreamLockState::Held);
        assert_eq!(
            locks.unusable(),
            [dir.path().join("kanban/.dispatcher.lock")]
        );
        drop(locks);
        let mut gate = DispatchGate::new(&db);
        assert!(gate.may_dispatch());
    }

    #[test]
    fn the_gate_opens_when_the_other_dispatcher_goes() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("kanban.db");
        let other = hold(&dir.path().join("kanban/.dispatcher.lock"));
        let mut gate = DispatchGate::new(&db);
        assert!(!gate.may_dispatch());
        assert!(!gate.may_dispatch());
        drop(other);
        assert!(gate.may_dispatch());
        assert!(gate.may_dispatch());
    }

    #[test]
    fn the_board_lock_is_the_file_whatever_path_reaches_it_and_follows_a_replaced_file() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("kanban.db");
        std::fs::write(&db, b"").unwrap();
        let link = dir.path().join("elsewhere.db");
        std::os::unix::fs::symlink(&db, &link).unwrap();
        let mut first = BoardLock::new(&db);
        assert_eq!(first.poll(), UpstreamLockState::Held);
        let mut second = BoardLock::new(&link);
        match second.poll() {
            UpstreamLockState::BoardBusy { holder, .. } => {
                assert_eq!(holder, Some(std::process::id()))
            }
            other => panic!("expected BoardBusy, got {other:?}"),
        }
        // Replaced: the first follows the new file (and the second may not have it either).
        std::fs::write(dir.path().join("new.db"), b"").unwrap();
        std::fs::rename(dir.path().join("new.db"), &db).unwrap();
        assert_eq!(first.poll(), UpstreamLockState::Held);
        assert!(matches!(second.poll(), UpstreamLockState::BoardBusy { .. }));
        drop(first);
        assert_eq!(second.poll(), UpstreamLockState::Held);
    }

    #[test]
    fn a_board_moved_away_is_let_go_so_its_new_home_can_lock_it() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("kanban.db");
        std::fs::write(&db, b"").unwrap();
        let mut first = BoardLock::new(&db);
        assert_eq!(first.poll(), UpstreamLockState::Held);
        let moved = dir.path().join("new-home.db");
        std::fs::rename(&db, &moved).unwrap();
        let mut at_new_home = BoardLock::new(&moved);
        assert!(matches!(
            at_new_home.poll(),
            UpstreamLockState::BoardBusy { .. }
        ));
        // The first notices the board gone and lets go of it, its descriptor kept.
        first.let_go();
        assert_eq!(at_new_home.poll(), UpstreamLockState::Held);
        assert_eq!(first.retired.len(), 1);
        // A file replaced under a holder is let go of as it follows the new one.
        std::fs::write(&db, b"").unwrap();
        assert_eq!(first.poll(), UpstreamLockState::Held);
        std::fs::rename(&db, dir.path().join("third.db")).unwrap();
        std::fs::write(&db, b"").unwrap();
        assert_eq!(first.poll(), UpstreamLockState::Held);
        let mut third = BoardLock::new(&dir.path().join("third.db"));
        assert_eq!(third.poll(), UpstreamLockState::Held);
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
