//! Chunked transfer of `snapshot.bin` to a lagging replica: the sender serves chunks of at most
//! 256 KiB of one snapshot version; the receiver assembles them, in any order, into a staging
//! file, verifies the whole snapshot against the version it asked for, and installs it by
//! syncing that file and renaming it over the live one. A chunk of another version, or one that
//! does not fit, fails the transfer without touching the live snapshot.

use std::path::{Path, PathBuf};

use iggy_format::checksum::Checksum;
use iggy_io::{OpenMode, ReadFile, ReadStorage, Storage, WriteFile};

use crate::{
    CHECKPOINT_OP_OFFSET, FILE_NAME, HEADER_SIZE, SnapshotError, SnapshotHeader, TRAILER_SIZE,
    decode, publish, read_all, trailer,
};

/// Largest chunk, in bytes.
pub const CHUNK_BYTES_MAX: u64 = 256 << 10;
/// The staging file of a transfer in progress.
pub const RECEIVING_FILE_NAME: &str = "snapshot.bin.receiving";

/// Which snapshot a transfer is of: its checkpoint, its trailer checksum and its length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SnapshotId {
    pub checkpoint_op: u64,
    pub trailer: Checksum,
    pub length: u64,
}

impl SnapshotId {
    /// The identity of the snapshot `header` was decoded from.
    #[must_use]
    pub fn of(header: &SnapshotHeader) -> Self {
        Self {
            checkpoint_op: header.checkpoint_op,
            trailer: header.trailer,
            length: (HEADER_SIZE + TRAILER_SIZE) as u64 + header.payload_length,
        }
    }
}

/// Why a transfer step failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TransferError {
    #[error("chunk of snapshot {found:?}, but this transfer is of {expected:?}")]
    WrongVersion {
        expected: SnapshotId,
        found: SnapshotId,
    },
    #[error(
        "chunk [{offset}, {end}) does not fit a snapshot of {length} bytes or exceeds {CHUNK_BYTES_MAX} bytes"
    )]
    BadChunk { offset: u64, end: u64, length: u64 },
    #[error("the transfer is incomplete: {missing} bytes missing")]
    Incomplete { missing: u64 },
    #[error(
        "the assembled snapshot is not the one asked for: trailer {found:#034x}, expected {expected:#034x}"
    )]
    Mismatch { expected: Checksum, found: Checksum },
    #[error("no snapshot of {0:?} here to serve")]
    Gone(SnapshotId),
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    #[error(transparent)]
    Io(#[from] iggy_io::Error),
}

/// The identity of the snapshot in `dir`, if any.
pub fn current_id<R: ReadStorage>(
    storage: &R,
    dir: &Path,
) -> Result<Option<SnapshotId>, TransferError> {
    let path = dir.join(FILE_NAME);
    if !storage.exists(&path)? {
        return Ok(None);
    }
    let bytes = read_all(storage, &path)?;
    let (header, _) = decode(&path.display().to_string(), &bytes)?;
    Ok(Some(SnapshotId::of(&header)))
}

/// Serves `[offset, offset + len)` of the snapshot `id` from `dir` (the sender's side).
///
/// The identity is checked by length, checkpoint and trailer, read from the same open file as
/// the chunk (so a rename in between cannot mix two versions); the whole file is not
/// re-verified per chunk, which would make a transfer quadratic in the snapshot's size.
/// [`current_id`] verified it when the transfer began, and the receiver verifies the assembled
/// whole before installing it.
pub fn chunk<R: ReadStorage>(
    storage: &R,
    dir: &Path,
    id: &SnapshotId,
    offset: u64,
    len: u64,
) -> Result<Vec<u8>, TransferError> {
    let end = offset.saturating_add(len);
    if len == 0 || len > CHUNK_BYTES_MAX || end > id.length {
        return Err(TransferError::BadChunk {
            offset,
            end,
            length: id.length,
        });
    }
    let path = dir.join(FILE_NAME);
    if !storage.exists(&path)? {
        return Err(TransferError::Gone(*id));
    }
    let file = storage.open_read(&path)?;
    let length = file.len()?;
    if length != id.length || length < (HEADER_SIZE + TRAILER_SIZE) as u64 {
        return Err(TransferError::Gone(*id));
    }
    let mut checkpoint_op = [0u8; 8];
    file.read_exact_at(CHECKPOINT_OP_OFFSET as u64, &mut checkpoint_op)?;
    let mut trailer_bytes = [0u8; TRAILER_SIZE];
    file.read_exact_at(length - TRAILER_SIZE as u64, &mut trailer_bytes)?;
    if u64::from_le_bytes(checkpoint_op) != id.checkpoint_op
        || u128::from_le_bytes(trailer_bytes) != id.trailer
    {
        return Err(TransferError::Gone(*id));
    }
    let mut bytes = vec![0u8; usize::try_from(len).unwrap_or(0)];
    file.read_exact_at(offset, &mut bytes)?;
    Ok(bytes)
}

/// Assembles one snapshot version from chunks (the receiver's side).
#[derive(Debug)]
pub struct Receiver<S: Storage> {
    storage: S,
    dir: PathBuf,
    id: SnapshotId,
    file: S::File,
    /// Received byte ranges, merged, sorted.
    received: Vec<(u64, u64)>,
}

impl<S: Storage> Receiver<S> {
    /// Starts receiving `id` into `dir` (any earlier staging file is discarded).
    pub fn start(storage: S, dir: &Path, id: SnapshotId) -> Result<Self, TransferError> {
        let path = dir.join(RECEIVING_FILE_NAME);
        let file = storage.open(&path, OpenMode::Create)?;
        file.set_len(0)?;
        Ok(Self {
            storage,
            dir: dir.to_path_buf(),
            id,
            file,
            received: Vec::new(),
        })
    }

    /// Accepts one chunk of snapshot `id`. A chunk of another version, or one that does not
    /// fit, is refused; the live snapshot is never touched.
    pub fn accept(
        &mut self,
        id: &SnapshotId,
        offset: u64,
        bytes: &[u8],
    ) -> Result<(), TransferError> {
        if *id != self.id {
            return Err(TransferError::WrongVersion {
                expected: self.id,
                found: *id,
            });
        }
        let end = offset.saturating_add(bytes.len() as u64);
        if bytes.is_empty() || bytes.len() as u64 > CHUNK_BYTES_MAX || end > self.id.length {
            return Err(TransferError::BadChunk {
                offset,
                end,
                length: self.id.length,
            });
        }
        self.file.write_all_at(offset, bytes)?;
        self.received.push((offset, end));
        self.received.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(self.received.len());
        for &(start, stop) in &self.received {
            match merged.last_mut() {
                Some(last) if start <= last.1 => last.1 = last.1.max(stop),
                _ => merged.push((start, stop)),
            }
        }
        self.received = merged;
        Ok(())
    }

    /// Bytes still missing.
    #[must_use]
    pub fn missing(&self) -> u64 {
        self.id.length
            - self
                .received
                .iter()
                .map(|(start, end)| end - start)
                .sum::<u64>()
    }

    /// Verifies the assembled snapshot against the id and makes the staging file durable,
    /// leaving it staged (`snapshot.bin.receiving`): an install that commits elsewhere first
    /// (the metadata group's superblock) publishes it with [`publish_staged`]. Returns the
    /// header and the payload.
    pub fn stage(self) -> Result<(SnapshotHeader, Vec<u8>), TransferError> {
        self.verify_and_sync()
    }

    /// The whole staged file verified against the id, then made durable (file and directory).
    fn verify_and_sync(&self) -> Result<(SnapshotHeader, Vec<u8>), TransferError> {
        let missing = self.missing();
        if missing > 0 {
            return Err(TransferError::Incomplete { missing });
        }
        let path = self.dir.join(RECEIVING_FILE_NAME);
        let bytes = read_all(&self.storage, &path)?;
        let found = trailer(&bytes);
        if found != self.id.trailer {
            return Err(TransferError::Mismatch {
                expected: self.id.trailer,
                found,
            });
        }
        let (header, payload) = decode(&path.display().to_string(), &bytes)?;
        // Durable, name included, before the caller commits to it: the metadata group's install
        // next writes a superblock naming this checkpoint, and boot finishes the install from
        // this file.
        self.file.sync_data()?;
        self.storage.sync_dir(&self.dir)?;
        Ok((header, payload.to_vec()))
    }

    /// The snapshot this transfer is of.
    #[must_use]
    pub fn id(&self) -> SnapshotId {
        self.id
    }

    /// Verifies the assembled snapshot against the id and installs it atomically.
    pub fn finish(self) -> Result<SnapshotHeader, TransferError> {
        let (header, _) = self.verify_and_sync()?;
        // The staging file already holds the verified bytes: durable, it becomes the snapshot
        // by rename, with no second copy written.
        drop(self.file);
        publish_staged(&self.storage, &self.dir)?;
        Ok(header)
    }
}

/// The staged snapshot of `dir` (`snapshot.bin.receiving`), if there is one and it verifies
/// whole: what an install committed before its rename uses. `Ok(None)`: none, or one a crash
/// left half-received (a leftover).
pub fn read_staged<R: ReadStorage>(
    storage: &R,
    dir: &Path,
) -> Result<Option<(SnapshotHeader, Vec<u8>)>, SnapshotError> {
    let path = dir.join(RECEIVING_FILE_NAME);
    if !storage.exists(&path)? {
        return Ok(None);
    }
    let bytes = read_all(storage, &path)?;
    Ok(decode(&path.display().to_string(), &bytes)
        .ok()
        .map(|(header, payload)| (header, payload.to_vec())))
}

/// Renames the staged snapshot over `snapshot.bin`, durably.
pub fn publish_staged<S: Storage>(storage: &S, dir: &Path) -> Result<(), SnapshotError> {
    publish(storage, dir, &dir.join(RECEIVING_FILE_NAME))
}
