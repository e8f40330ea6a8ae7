//! The one error type of the storage layer: which operation, on which path, at which offset, and
//! why. Every layer above wraps it, so an operator always sees the file that failed.

use std::fmt;
use std::path::PathBuf;

pub type Result<T> = std::result::Result<T, Error>;

/// The storage operation that failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    Open,
    Read,
    Write,
    Len,
    SetLen,
    Allocate,
    SyncData,
    SyncAll,
    SyncDir,
    SyncFs,
    Rename,
    HardLink,
    Unlink,
    RemoveDirAll,
    CreateDir,
    ListDir,
    Exists,
    Lock,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Self::Open => "open",
            Self::Read => "read",
            Self::Write => "write",
            Self::Len => "len",
            Self::SetLen => "set_len",
            Self::Allocate => "allocate",
            Self::SyncData => "sync_data",
            Self::SyncAll => "sync_all",
            Self::SyncDir => "sync_dir",
            Self::SyncFs => "sync_filesystem",
            Self::Rename => "rename",
            Self::HardLink => "hard_link",
            Self::Unlink => "unlink",
            Self::RemoveDirAll => "remove_dir_all",
            Self::CreateDir => "create_dir",
            Self::ListDir => "list_dir",
            Self::Exists => "exists",
            Self::Lock => "lock",
        };
        f.write_str(name)
    }
}

/// Why a storage operation failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    NotFound,
    AlreadyExists,
    NotADirectory,
    IsADirectory,
    DirectoryNotEmpty,
    /// The path is absolute, contains `..`, or is otherwise not a plain relative path.
    InvalidPath(&'static str),
    /// A component of the path is a symbolic link; the storage layer never follows them, so a
    /// link cannot lead outside the root.
    Symlink,
    /// A read ended before the requested bytes (the file is shorter).
    UnexpectedEof,
    /// A write made no progress.
    WriteZero,
    /// The handle was opened before a simulated crash and is no longer valid.
    StaleHandle,
    /// A fault injected by `SimStorage`.
    Injected(&'static str),
    /// The path names something that is not a regular file (a FIFO, socket or device). It is
    /// never opened: opening a FIFO for reading would block, and opening a device may act on it.
    NotAFile,
    /// Another process (or, in `SimStorage`, another open of the node) holds the lock; the pid it
    /// wrote into the lock file, if it could be read.
    Locked {
        pid: Option<u32>,
    },
    /// The storage does not offer the operation (see `Storage::can_sync_filesystem`).
    Unsupported(&'static str),
    /// Any other error from the operating system (`errno`).
    Os(i32),
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotFound => f.write_str("not found"),
            Self::AlreadyExists => f.write_str("already exists"),
            Self::NotADirectory => f.write_str("not a directory"),
            Self::IsADirectory => f.write_str("is a directory"),
            Self::DirectoryNotEmpty => f.write_str("directory not empty"),
            Self::InvalidPath(why) => write!(f, "invalid path: {why}"),
            Self::Symlink => f.write_str("path contains a symbolic link (never followed)"),
            Self::UnexpectedEof => f.write_str("unexpected end of file"),
            Self::WriteZero => f.write_str("write made no progress"),
            Self::StaleHandle => f.write_str("stale handle (opened before a crash)"),
            Self::Injected(what) => write!(f, "injected fault: {what}"),
            Self::NotAFile => {
                f.write_str("not a regular file (a FIFO, socket or device: never opened)")
            }
            Self::Locked { pid: Some(pid) } => write!(f, "locked by process {pid}"),
            Self::Locked { pid: None } => f.write_str("locked by another process"),
            Self::Unsupported(what) => write!(f, "{what} is not supported by this storage"),
            Self::Os(errno) => write!(f, "{}", std::io::Error::from_raw_os_error(*errno)),
        }
    }
}

/// A failed storage operation, naming the operation, the path (relative to the storage root)
/// and, for reads and writes, the byte offset.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct Error {
    pub op: Op,
    pub path: PathBuf,
    pub offset: Option<u64>,
    pub kind: ErrorKind,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.op, self.path.display())?;
        if let Some(offset) = self.offset {
            write!(f, " at offset {offset}")?;
        }
        write!(f, ": {}", self.kind)
    }
}

impl Error {
    /// Whether the operation failed for want of a resource the node can get back (space on the
    /// file system, a quota, descriptors), not because the storage failed: the caller may refuse
    /// or try again later instead of treating the disk as lying.
    #[must_use]
    pub fn is_exhaustion(&self) -> bool {
        // ENFILE, EMFILE, ENOSPC, EDQUOT.
        matches!(self.kind, ErrorKind::Os(23 | 24 | 28 | 122))
    }

    pub fn new(op: Op, path: impl Into<PathBuf>, kind: ErrorKind) -> Self {
        Self {
            op,
            path: path.into(),
            offset: None,
            kind,
        }
    }

    #[must_use]
    pub fn at(mut self, offset: u64) -> Self {
        self.offset = Some(offset);
        self
    }

    /// Whether this error means the thing asked for does not exist.
    #[must_use]
    pub fn is_not_found(&self) -> bool {
        self.kind == ErrorKind::NotFound
    }
}
