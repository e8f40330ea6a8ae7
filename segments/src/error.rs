//! Why a partition refused or failed.

use std::path::PathBuf;

use iggy_format::batch::BatchError;
use iggy_superblock::SuperblockError;
use iggy_wal::WalError;

use crate::offsets::OffsetError;

/// Why a partition refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum PartitionError {
    #[error(transparent)]
    Io(#[from] iggy_io::Error),
    /// Boxed: `WalError` is large, and every `Result` here would carry its size.
    #[error(transparent)]
    Wal(Box<WalError>),
    /// Boxed, like `Wal`.
    #[error(transparent)]
    Superblock(Box<SuperblockError>),
    #[error(transparent)]
    Offsets(#[from] OffsetError),
    #[error("{dir}: a partition already exists")]
    AlreadyExists { dir: PathBuf },
    /// The marker of a rebuild from peers does not verify: the views the old replica may have
    /// acknowledged in are unknown.
    #[error("{path}: the rebuild marker does not verify: {reason}")]
    Rebuilt { path: PathBuf, reason: String },
    #[error("invalid batch: {0}")]
    Batch(#[from] BatchError),
    #[error("{file}: the batch at byte {offset} is malformed: {error}")]
    BadBatch {
        file: PathBuf,
        offset: u64,
        error: BatchError,
    },
    #[error(
        "{file}: the entry at byte {offset} (op {op}) is not a valid partition entry: {reason}"
    )]
    BadEntry {
        file: PathBuf,
        offset: u64,
        op: u64,
        reason: String,
    },
    #[error("{file}: the batch at byte {offset} belongs to partition {found}, not {expected}")]
    PartitionMismatch {
        file: PathBuf,
        offset: u64,
        expected: u64,
        found: u64,
    },
    #[error("{file}: named for offset {key}, but its first batch starts at offset {found}")]
    NameMismatch { file: PathBuf, key: u64, found: u64 },
    #[error(
        "{file}: the batch at byte {offset} starts at offset {found}, not {expected}: offsets \
         must be continuous"
    )]
    OffsetGap {
        file: PathBuf,
        offset: u64,
        expected: u64,
        found: u64,
    },
    #[error("{file}: an empty segment before the last one")]
    EmptySegment { file: PathBuf },
    #[error(
        "{dir}: the log ends at offset {log_end}, below the superblock's offset frontier \
         {offset_frontier}: published batches are missing"
    )]
    BehindOffsetFrontier {
        dir: PathBuf,
        log_end: u64,
        offset_frontier: u64,
    },
    #[error("{dir}: the partition changed while it was being opened (another writer?)")]
    StateChanged { dir: PathBuf },
    #[error("{file}: the entry at byte {offset} does not verify on read: {reason}")]
    Corrupt {
        file: PathBuf,
        offset: u64,
        reason: String,
    },
    #[error("{dir}: prepare of op {op} refused: {reason}")]
    Refused {
        dir: PathBuf,
        op: u64,
        reason: String,
    },
    #[error("{dir}: {what} op {op} is at or below the commit point {commit}")]
    BelowCommit {
        dir: PathBuf,
        what: &'static str,
        op: u64,
        commit: u64,
    },
}

impl From<WalError> for PartitionError {
    fn from(error: WalError) -> Self {
        Self::Wal(Box::new(error))
    }
}

impl From<SuperblockError> for PartitionError {
    fn from(error: SuperblockError) -> Self {
        Self::Superblock(Box::new(error))
    }
}

impl PartitionError {
    /// Whether it failed for want of space or descriptors ([`iggy_io::Error::is_exhaustion`]).
    #[must_use]
    pub fn is_exhaustion(&self) -> bool {
        match self {
            Self::Io(e) => e.is_exhaustion(),
            Self::Wal(e) => matches!(&**e, WalError::Io(e) if e.is_exhaustion()),
            Self::Superblock(e) => matches!(&**e, SuperblockError::Io(e) if e.is_exhaustion()),
            Self::Offsets(OffsetError::Io(e)) => e.is_exhaustion(),
            _ => false,
        }
    }
}
