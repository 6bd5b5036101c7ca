//! The board from async code: each call runs on the blocking pool, so a busy SQLite lock never
//! stalls the runtime.

use std::path::Path;
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
}

impl BoardHandle {
    /// Opens (creating on first use) the board at `path`.
    pub async fn open(path: &Path) -> Result<Self, BoardError> {
        let path = path.to_owned();
        let store = tokio::task::spawn_blocking(move || Store::open(&path))
            .await
            .map_err(|e| BoardError::Join(e.to_string()))??;
        Ok(Self {
            store: Arc::new(Mutex::new(store)),
        })
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
            f(&mut guard)
        })
        .await
        .map_err(|e| BoardError::Join(e.to_string()))?
        .map_err(BoardError::Store)
    }
}
