//! The three files of a board in WAL mode, told apart by device and inode: `kanban.db`, its
//! write-ahead log `-wal` and the log's index `-shm`.
//!
//! A connection is only safe while the paths still name the files it opened. A `-shm` replaced
//! by a copy of itself (what a sync or restore tool does) splits the processes on the board into
//! two groups with diverging indexes and no shared locks: each overwrites the other's commits. A
//! `-wal` deleted under a connection leaves it writing to a file nobody else reads. So a store
//! compares the paths with what it opened before every transaction and never writes (or
//! checkpoints) through a connection whose files were swapped.

use std::fmt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Device and inode: what a path resolves to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileId {
    pub dev: u64,
    pub ino: u64,
}

impl FileId {
    /// What `path` names now (following symlinks, as SQLite does); `None` when nothing is there.
    pub fn of(path: &Path) -> Option<FileId> {
        std::fs::metadata(path).ok().map(|meta| FileId {
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }
}

impl fmt::Display for FileId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "device {}, inode {}", self.dev, self.ino)
    }
}

/// Which of the board's files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BoardPart {
    /// `kanban.db` itself.
    Db,
    /// `kanban.db-wal`, the write-ahead log.
    Wal,
    /// `kanban.db-shm`, the log's shared index.
    Shm,
}

impl BoardPart {
    /// The suffix SQLite appends to the board's path.
    pub fn suffix(self) -> &'static str {
        match self {
            BoardPart::Db => "",
            BoardPart::Wal => "-wal",
            BoardPart::Shm => "-shm",
        }
    }

    /// The part's path beside the board at `db`.
    pub fn path(self, db: &Path) -> PathBuf {
        let mut name = db.as_os_str().to_owned();
        name.push(self.suffix());
        PathBuf::from(name)
    }
}

impl fmt::Display for BoardPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "kanban.db{}", self.suffix())
    }
}

/// What happened to one of the board's files since a connection opened it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileChange {
    pub part: BoardPart,
    /// `true`: nothing is at the path any more; `false`: another file is.
    pub deleted: bool,
}

impl fmt::Display for FileChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = if self.deleted {
            "was deleted"
        } else {
            "was replaced by another file"
        };
        write!(f, "{} {what}", self.part)
    }
}

/// The identities of a board's files as one connection opened them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BoardFiles {
    pub db: Option<FileId>,
    pub wal: Option<FileId>,
    pub shm: Option<FileId>,
    /// How many names `kanban.db` has (its `st_nlink`), read by the same `stat` as its
    /// identity: more than one, and processes reaching it through different names keep
    /// different write-ahead logs (see [`BoardFiles::links`]).
    pub db_links: u64,
}

impl BoardFiles {
    /// What the paths beside `db` name now.
    pub fn at(db: &Path) -> BoardFiles {
        let meta = std::fs::metadata(db).ok();
        BoardFiles {
            db: meta.as_ref().map(|meta| FileId {
                dev: meta.dev(),
                ino: meta.ino(),
            }),
            wal: FileId::of(&BoardPart::Wal.path(db)),
            shm: FileId::of(&BoardPart::Shm.path(db)),
            db_links: meta.map_or(0, |meta| meta.nlink()),
        }
    }

    /// `Some(n)` when `kanban.db` has more than one name. SQLite keeps the write-ahead log and
    /// its index beside the name a process opened, so a process that reaches the board through
    /// another hard link neither sees this one's commits nor is seen by it: each overwrites the
    /// other's pages (acknowledged rows lost, a malformed file, cards billed again). Such a
    /// board is read and written by nobody until one name is left.
    pub fn links(&self) -> Option<u64> {
        (self.db_links > 1).then_some(self.db_links)
    }

    /// What differs in `now` from these files as they were opened, `kanban.db` first. A file
    /// that did not exist when the connection opened (a board not in WAL mode) is not watched.
    pub fn changes(&self, now: &BoardFiles) -> Vec<FileChange> {
        [
            (BoardPart::Db, self.db, now.db),
            (BoardPart::Wal, self.wal, now.wal),
            (BoardPart::Shm, self.shm, now.shm),
        ]
        .into_iter()
        .filter_map(|(part, opened, current)| match (opened, current) {
            (Some(opened), current) if Some(opened) != current => Some(FileChange {
                part,
                deleted: current.is_none(),
            }),
            _ => None,
        })
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_name_the_files_deleted_or_replaced_and_ignore_new_ones() {
        let id = |ino| Some(FileId { dev: 1, ino });
        let opened = BoardFiles {
            db: id(1),
            wal: id(2),
            shm: None,
            db_links: 1,
        };
        assert!(opened.changes(&opened).is_empty());
        let now = BoardFiles {
            db: id(1),
            wal: None,
            shm: id(9),
            db_links: 1,
        };
        assert_eq!(
            opened.changes(&now),
            [FileChange {
                part: BoardPart::Wal,
                deleted: true
            }]
        );
        let now = BoardFiles {
            db: id(7),
            wal: id(2),
            shm: None,
            db_links: 2,
        };
        assert_eq!(now.links(), Some(2));
        assert_eq!(opened.links(), None);
        let changes = opened.changes(&now);
        assert_eq!(changes.len(), 1);
        assert_eq!(
            changes[0].to_string(),
            "kanban.db was replaced by another file"
        );
        assert_eq!(
            BoardPart::Shm.path(Path::new("/h/kanban.db")),
            Path::new("/h/kanban.db-shm")
        );
    }
}
