//! `snapshot.bin`: the container of the metadata state machine's checkpoint (the payload's own
//! encoding belongs to the `metadata` crate), written atomically and shipped to lagging replicas
//! in chunks of at most 256 KiB.
//!
//! ```text
//! [header: 128 bytes][payload: payload_length bytes][trailer: 16 bytes]
//! header =  0 magic "IGGYSNAP" u64 | 8 version u16 | 10 payload_version u16 | 12 zero u32
//!          16 checkpoint_op u64 | 24 payload_length u64 | 32 checkpoint_checksum u128
//!          48..128 zero
//! trailer = XXH3-128 of header and payload
//! ```
//!
//! Invariants:
//! - a decode verifies the trailer before trusting any field, refuses unknown versions,
//!   non-zero reserved bytes, and any length that disagrees with the bytes present (no trailing
//!   bytes, no allocation from an untrusted length);
//! - [`write`] replaces `snapshot.bin` atomically: `snapshot.bin.tmp`, `fdatasync`, rename,
//!   directory `fsync`;
//! - a chunked transfer assembles into `snapshot.bin.receiving`; the live snapshot is touched
//!   only by the final atomic rename, after the whole file verified against the transfer's id.

pub mod transfer;

use std::path::Path;

use iggy_format::checksum::{Checksum, checksum};
use iggy_format::le;
use iggy_io::{OpenMode, ReadFile, ReadStorage, Storage, WriteFile};

pub const FILE_NAME: &str = "snapshot.bin";
pub const TEMP_FILE_NAME: &str = "snapshot.bin.tmp";
pub const MAGIC: u64 = u64::from_le_bytes(*b"IGGYSNAP");
pub const VERSION: u16 = 1;
pub const HEADER_SIZE: usize = 128;
pub const TRAILER_SIZE: usize = 16;

const MAGIC_OFFSET: usize = 0;
const VERSION_OFFSET: usize = 8;
const PAYLOAD_VERSION_OFFSET: usize = 10;
const CHECKPOINT_OP_OFFSET: usize = 16;
const PAYLOAD_LENGTH_OFFSET: usize = 24;
const CHECKPOINT_CHECKSUM_OFFSET: usize = 32;
const RESERVED_OFFSET: usize = 48;

const _: () = assert!(CHECKPOINT_CHECKSUM_OFFSET + 16 == RESERVED_OFFSET);
const _: () = assert!(RESERVED_OFFSET < HEADER_SIZE);

/// What a snapshot vouches for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SnapshotHeader {
    /// The op of the checkpoint: the state after applying every op up to it.
    pub checkpoint_op: u64,
    /// The checksum of the prepare at `checkpoint_op` (the superblock records the same).
    pub checkpoint_checksum: Checksum,
    /// The version of the payload's encoding (owned by the state machine).
    pub payload_version: u16,
    pub payload_length: u64,
    /// The verified trailer: with the checkpoint and the length, the identity of this version
    /// in a chunked transfer (`transfer::SnapshotId::of`).
    pub trailer: Checksum,
}

/// Why bytes are not a valid snapshot. Each defect is distinct.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    #[error("{file}: {len} bytes is shorter than an empty snapshot ({})", HEADER_SIZE + TRAILER_SIZE)]
    Truncated { file: String, len: u64 },
    #[error("{file}: checksum trailer {stored:#034x}, computed {computed:#034x}")]
    Checksum {
        file: String,
        stored: Checksum,
        computed: Checksum,
    },
    #[error("{file}: bad magic {magic:#018x}")]
    Magic { file: String, magic: u64 },
    #[error("{file}: unknown snapshot version {version} (this build reads {VERSION})")]
    UnknownVersion { file: String, version: u16 },
    #[error("{file}: non-zero reserved byte at offset {offset}")]
    ReservedNotZero { file: String, offset: usize },
    #[error("{file}: payload_length {declared} but {actual} payload bytes are present")]
    LengthMismatch {
        file: String,
        declared: u64,
        actual: u64,
    },
    #[error(transparent)]
    Io(#[from] iggy_io::Error),
}

/// Encodes a snapshot.
#[must_use]
pub fn encode(
    checkpoint_op: u64,
    checkpoint_checksum: Checksum,
    payload_version: u16,
    payload: &[u8],
) -> Vec<u8> {
    let mut bytes = vec![0u8; HEADER_SIZE];
    le::put_u64(&mut bytes, MAGIC_OFFSET, MAGIC);
    le::put_u16(&mut bytes, VERSION_OFFSET, VERSION);
    le::put_u16(&mut bytes, PAYLOAD_VERSION_OFFSET, payload_version);
    le::put_u64(&mut bytes, CHECKPOINT_OP_OFFSET, checkpoint_op);
    le::put_u64(&mut bytes, PAYLOAD_LENGTH_OFFSET, payload.len() as u64);
    le::put_u128(&mut bytes, CHECKPOINT_CHECKSUM_OFFSET, checkpoint_checksum);
    bytes.extend_from_slice(payload);
    let trailer = checksum(&bytes);
    bytes.extend_from_slice(&trailer.to_le_bytes());
    bytes
}

/// Decodes and verifies a whole snapshot file's bytes; `file` names it in errors.
pub fn decode<'a>(
    file: &str,
    bytes: &'a [u8],
) -> Result<(SnapshotHeader, &'a [u8]), SnapshotError> {
    let file = file.to_string();
    let len = bytes.len();
    // Every length below is derived from this one subtraction, checked: no arithmetic on a
    // length read from (or implied by) untrusted bytes can underflow.
    let Some(payload_len) = len.checked_sub(HEADER_SIZE + TRAILER_SIZE) else {
        return Err(SnapshotError::Truncated {
            file,
            len: len as u64,
        });
    };
    let body = &bytes[..HEADER_SIZE + payload_len];
    let stored = le::u128_at(bytes, body.len()).unwrap_or_default();
    let computed = checksum(body);
    if stored != computed {
        return Err(SnapshotError::Checksum {
            file,
            stored,
            computed,
        });
    }
    let magic = le::u64_at(bytes, MAGIC_OFFSET).unwrap_or_default();
    if magic != MAGIC {
        return Err(SnapshotError::Magic { file, magic });
    }
    let version = le::u16_at(bytes, VERSION_OFFSET).unwrap_or_default();
    if version != VERSION {
        return Err(SnapshotError::UnknownVersion { file, version });
    }
    let reserved = [(12usize, 16usize), (RESERVED_OFFSET, HEADER_SIZE)];
    if let Some(offset) = le::first_nonzero_in(bytes, &reserved) {
        return Err(SnapshotError::ReservedNotZero { file, offset });
    }
    let declared = le::u64_at(bytes, PAYLOAD_LENGTH_OFFSET).unwrap_or_default();
    let actual = payload_len as u64;
    if declared != actual {
        return Err(SnapshotError::LengthMismatch {
            file,
            declared,
            actual,
        });
    }
    let header = SnapshotHeader {
        checkpoint_op: le::u64_at(bytes, CHECKPOINT_OP_OFFSET).unwrap_or_default(),
        checkpoint_checksum: le::u128_at(bytes, CHECKPOINT_CHECKSUM_OFFSET).unwrap_or_default(),
        payload_version: le::u16_at(bytes, PAYLOAD_VERSION_OFFSET).unwrap_or_default(),
        payload_length: declared,
        trailer: trailer(bytes),
    };
    Ok((header, &body[HEADER_SIZE..]))
}

/// The checksum trailer of encoded snapshot bytes: the identity of one snapshot version.
#[must_use]
pub fn trailer(bytes: &[u8]) -> Checksum {
    bytes
        .len()
        .checked_sub(TRAILER_SIZE)
        .and_then(|at| le::u128_at(bytes, at))
        .unwrap_or_default()
}

/// Reads and verifies `dir/snapshot.bin`; `Ok(None)` if there is none.
pub fn read<R: ReadStorage>(
    storage: &R,
    dir: &Path,
) -> Result<Option<(SnapshotHeader, Vec<u8>)>, SnapshotError> {
    let path = dir.join(FILE_NAME);
    if !storage.exists(&path)? {
        return Ok(None);
    }
    let bytes = read_all(storage, &path)?;
    let (header, payload) = decode(&path.display().to_string(), &bytes)?;
    Ok(Some((header, payload.to_vec())))
}

pub(crate) fn read_all<R: ReadStorage>(storage: &R, path: &Path) -> Result<Vec<u8>, SnapshotError> {
    Ok(storage.open_read(path)?.read_all()?)
}

/// The files a crash can leave beside `snapshot.bin` in `dir`: a `snapshot.bin.tmp` whose
/// rename never happened, a `snapshot.bin.receiving` of a transfer that never finished. Nothing
/// reads them; the metadata group's boot removes them ([`remove_leftovers`]).
pub fn leftovers<R: ReadStorage>(
    storage: &R,
    dir: &Path,
) -> Result<Vec<std::path::PathBuf>, SnapshotError> {
    let mut found = Vec::new();
    for name in [TEMP_FILE_NAME, transfer::RECEIVING_FILE_NAME] {
        if storage.exists(dir.join(name))? {
            found.push(dir.join(name));
        }
    }
    Ok(found)
}

/// Removes the [`leftovers`] in `dir`, durably.
pub fn remove_leftovers<S: Storage>(storage: &S, dir: &Path) -> Result<(), SnapshotError> {
    let found = leftovers(storage, dir)?;
    for path in &found {
        storage.unlink(path)?;
    }
    if !found.is_empty() {
        // Gone durably, so that the next boot does not report them again.
        storage.sync_dir(dir)?;
    }
    Ok(())
}

/// Atomically replaces `dir/snapshot.bin` with the encoded bytes (which must decode).
pub fn install<S: Storage>(storage: &S, dir: &Path, bytes: &[u8]) -> Result<(), SnapshotError> {
    assert!(
        decode("install", bytes).is_ok(),
        "installing bytes that do not decode"
    );
    let temp = dir.join(TEMP_FILE_NAME);
    let file = storage.open(&temp, OpenMode::Create)?;
    file.set_len(0)?;
    // The whole snapshot is durable before the rename can expose it.
    file.write_all_and_sync_data(0, bytes)?;
    drop(file);
    publish(storage, dir, &temp)
}

/// Renames `from` (complete, verified and already synced) over `dir/snapshot.bin`.
pub(crate) fn publish<S: Storage>(
    storage: &S,
    dir: &Path,
    from: &Path,
) -> Result<(), SnapshotError> {
    storage.rename(from, dir.join(FILE_NAME))?;
    // The rename is the commit: durable before the superblock may name this checkpoint.
    storage.sync_dir(dir)?;
    Ok(())
}

/// Encodes and atomically writes a snapshot; returns its trailer (its version's identity).
pub fn write<S: Storage>(
    storage: &S,
    dir: &Path,
    checkpoint_op: u64,
    checkpoint_checksum: Checksum,
    payload_version: u16,
    payload: &[u8],
) -> Result<Checksum, SnapshotError> {
    let bytes = encode(checkpoint_op, checkpoint_checksum, payload_version, payload);
    install(storage, dir, &bytes)?;
    Ok(trailer(&bytes))
}
