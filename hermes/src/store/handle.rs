//! The board from async code: each call runs on the blocking pool, so a busy SQLite lock never
//! stalls the runtime.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::{Store, StoreError};

/// Why a board call from async code failed.
#[derive(Debug, thiserror::Error)]
pub enum BoardError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the board worker stopped unexpectedly: {0}")]
    Join(String),
}

/// One board connection shared by async tasks.
#[derive(Clone)]
pub struct BoardHandle {
    store: Arc<Mutex<Store>>,
    path: PathBuf,
    /// Device and inode of the file the connection opened.
    opened: Option<(u64, u64)>,
}

/// Whether the board's path still names the file a handle opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BoardFile {
    /// The same file (or its identity cannot be told).
    Same,
    /// Nothing is at the path any more.
    Missing,
    /// Another file is at the path.
    Replaced,
}

fn identity(path: &Path) -> std::io::Result<(u64, u64)> {
    std::fs::metadata(path).map(|meta| (meta.dev(), meta.ino()))
}

impl BoardHandle {
    /// Opens (creating on first use) the board at `path`.
    pub async fn open(path: &Path) -> Result<Self, BoardError> {
        Self::open_with(path, true).await
    }

    async fn open_with(path: &Path, create: bool) -> Result<Self, BoardError> {
        let path = path.to_owned();
        let (store, opened) = tokio::task::spawn_blocking({
            let path = path.clone();
            move || {
                let store = if create {
                    Store::open(&path)?
                } else {
                    Store::open_existing(&path)?
                };
                // Taken right after opening: the file the connection holds.
                Ok::<_, StoreError>((store, identity(&path).ok()))
            }
        })
        .await
        .map_err(|e| BoardError::Join(e.to_string()))??;
        Ok(Self {
            store: Arc::new(Mutex::new(store)),
            path,
            opened,
        })
    }

    /// Opens the board for a long-running process (the gateway, a sweep): every commit is also
    /// copied into `kanban.db` at once (see [`Store::checkpoint_every_commit`]).
    pub async fn open_long_lived(path: &Path) -> Result<Self, BoardError> {
        let board = Self::open(path).await?;
        board.call(|s| s.checkpoint_every_commit()).await?;
        Ok(board)
    }

    /// [`open_long_lived`](Self::open_long_lived), only if a board is at `path` (see
    /// [`Store::open_existing`]): how a running gateway reopens its board.
    pub async fn reopen_long_lived(path: &Path) -> Result<Self, BoardError> {
        let board = Self::open_with(path, false).await?;
        board.call(|s| s.checkpoint_every_commit()).await?;
        Ok(board)
    }

    /// Whether the path still names the file this handle opened.
    pub fn file(&self) -> BoardFile {
        match (identity(&self.path), self.opened) {
            (Err(e), _) if e.kind() == std::io::ErrorKind::NotFound => BoardFile::Missing,
            (Ok(now), Some(opened)) if now != opened => BoardFile::Replaced,
            _ => BoardFile::Same,
        }
    }

    /// Runs `f` against the board on the blocking pool.
    pub async fn call<T, F>(&self, f: F) -> Result<T, BoardError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Store) -> Result<T, StoreError> + Send + 'static,
    {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || {
            // A poisoned lock only means another call panicked mid-way; SQLite rolled that
            // transaction back, so the connection itself is still consistent.
            let mut guard = store
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            // Every caller of the handle works on the files at the board's path: a swapped
            // `-wal`/`-shm` reopens the board here, a swapped `kanban.db` refuses the call.
            guard.refreshed(f)
        })
        .await
        .map_err(|e| BoardError::Join(e.to_string()))?
        .map_err(BoardError::Store)
    }
}
