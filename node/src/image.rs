//! Partition state transfer (`docs/vsr.md`, "Partition state transfer"; the image's layout in
//! `docs/format.md`, "Partition transfer image"): what a peer ships a replica whose log ends
//! before the oldest op retention left it, and how that replica installs it.
//!
//! The sender's image is its sealed, committed segments (`Partition::committed_segments`: their
//! bytes never change while they exist) behind a manifest that lists them and carries the partition's
//! consumer offsets and next offset. The replica's core moves it like the metadata group's
//! snapshot: chunks of `SNAPSHOT_CHUNK_BYTES_MAX`, named by a `SnapshotRef` whose op and checksum
//! are the last shipped entry's and whose trailer is the manifest's checksum. The receiver
//! stages the chunks in `transfer.staging` (a `*.staging` file: boot sweeps a half-received one),
//! then installs through the segments crate's staged install (`iggy_segments::Install`), which
//! verifies every entry and the hash chain as it lands and commits old-or-new, never a mix.
//!
//! Invariants:
//! - the image a node serves a partition from is built once and kept while asked (retention
//!   skips a partition whose image is in use), so every chunk of one transfer is of one image;
//! - the manifest is checked against the trailer, the last entry against the op and checksum
//!   the transfer named, and the segments' lengths against the image's: a mismatch refuses the
//!   install and nothing live changes;
//! - the installed log starts at the sender's oldest retained op and ends at the transfer's op,
//!   which the sender had committed;
//! - an install holds one entry in memory at a time (`Install::receive_segment_from`), never a
//!   segment.

use std::path::{Path, PathBuf};

use iggy_format::checksum::{Checksum, checksum};
use iggy_io::{OpenMode, ReadFile, ReadStorage, Storage, WriteFile};
use iggy_segments::offsets::{self, ConsumerKind};
use iggy_segments::{Install, Partition, StateArtifact};
use iggy_superblock::VsrState;
use iggy_vsr::{SNAPSHOT_CHUNK_BYTES_MAX, SnapshotRef};

/// The file a receiver stages an image's chunks in, in the partition's directory.
pub const STAGING_FILE: &str = "transfer.staging";

const MAGIC: &[u8; 8] = b"IGPIMAGE";
const VERSION: u32 = 1;
/// Magic, version, manifest length, group, op, checksum, next offset, two counts.
const FIXED: usize = 8 + 4 + 4 + 16 + 8 + 16 + 8 + 4 + 4;
const SEGMENT_SIZE: usize = 16;
const OFFSET_SIZE: usize = 16;
const CHUNK: u64 = SNAPSHOT_CHUNK_BYTES_MAX as u64;

/// What an image's manifest says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    pub group: u128,
    /// The last shipped entry: the installed log's head.
    pub op: u64,
    pub checksum: Checksum,
    /// One past the last shipped message.
    pub next_offset: u64,
    /// Each segment's start offset and length, oldest first, in image order.
    pub segments: Vec<(u64, u64)>,
    pub offsets: Vec<(ConsumerKind, u32, u64)>,
}

impl Manifest {
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let len = FIXED + self.segments.len() * SEGMENT_SIZE + self.offsets.len() * OFFSET_SIZE;
        let mut out = Vec::with_capacity(len);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_le_bytes());
        out.extend_from_slice(&self.group.to_le_bytes());
        out.extend_from_slice(&self.op.to_le_bytes());
        out.extend_from_slice(&self.checksum.to_le_bytes());
        out.extend_from_slice(&self.next_offset.to_le_bytes());
        out.extend_from_slice(
            &u32::try_from(self.segments.len())
                .unwrap_or(u32::MAX)
                .to_le_bytes(),
        );
        out.extend_from_slice(
            &u32::try_from(self.offsets.len())
                .unwrap_or(u32::MAX)
                .to_le_bytes(),
        );
        for (start, length) in &self.segments {
            out.extend_from_slice(&start.to_le_bytes());
            out.extend_from_slice(&length.to_le_bytes());
        }
        for (kind, id, offset) in &self.offsets {
            out.push(kind.code());
            out.extend_from_slice(&[0; 3]);
            out.extend_from_slice(&id.to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
        }
        out
    }

    /// The manifest's length, from the first bytes of an image.
    pub fn length(prefix: &[u8]) -> Result<usize, String> {
        if prefix.len() < 16 || &prefix[..8] != MAGIC {
            return Err("not a partition transfer image (bad magic)".into());
        }
        let version = u32::from_le_bytes(prefix[8..12].try_into().unwrap_or_default());
        if version != VERSION {
            return Err(format!(
                "image version {version}, this build reads {VERSION}"
            ));
        }
        Ok(u32::from_le_bytes(prefix[12..16].try_into().unwrap_or_default()) as usize)
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        let len = Self::length(bytes)?;
        if len != bytes.len() || len < FIXED {
            return Err(format!("manifest of {} bytes says {len}", bytes.len()));
        }
        let u64_at =
            |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap_or_default());
        let u128_at =
            |at: usize| u128::from_le_bytes(bytes[at..at + 16].try_into().unwrap_or_default());
        let u32_at =
            |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or_default());
        let segments = u32_at(64) as usize;
        let offsets = u32_at(68) as usize;
        if FIXED + segments * SEGMENT_SIZE + offsets * OFFSET_SIZE != len {
            return Err(format!(
                "manifest of {len} bytes cannot hold {segments} segments and {offsets} offsets"
            ));
        }
        let mut manifest = Self {
            group: u128_at(16),
            op: u64_at(32),
            checksum: u128_at(40),
            next_offset: u64_at(56),
            segments: Vec::with_capacity(segments),
            offsets: Vec::with_capacity(offsets),
        };
        let mut at = FIXED;
        for _ in 0..segments {
            manifest.segments.push((u64_at(at), u64_at(at + 8)));
            at += SEGMENT_SIZE;
        }
        for _ in 0..offsets {
            let kind = ConsumerKind::from_code(bytes[at])
                .ok_or_else(|| format!("consumer kind {} at manifest byte {at}", bytes[at]))?;
            manifest
                .offsets
                .push((kind, u32_at(at + 4), u64_at(at + 8)));
            at += OFFSET_SIZE;
        }
        Ok(manifest)
    }
}

/// An image a node serves one of its partitions from.
#[derive(Debug)]
pub struct Image {
    pub snapshot: SnapshotRef,
    manifest: Vec<u8>,
    /// Each segment's file and length, in image order.
    segments: Vec<(PathBuf, u64)>,
}

impl Image {
    /// The image of `partition`'s sealed, committed segments, `None` when it has none (its log
    /// is one segment: the asker repairs, or asks again once a segment sealed).
    pub fn build<S: Storage + Clone>(partition: &Partition<S>) -> Result<Option<Self>, String> {
        let segments = partition
            .committed_segments()
            .map_err(|e| format!("the committed segments: {e}"))?;
        let Some(last) = segments.last() else {
            return Ok(None);
        };
        let Some(head_checksum) = last.last_checksum else {
            return Ok(None);
        };
        let storage = partition.wal().storage();
        let scan = offsets::scan(storage, &partition.dir().join(offsets::DIR_NAME))
            .map_err(|e| format!("consumer offsets: {e}"))?;
        let manifest = Manifest {
            group: partition.config().group,
            op: last.first_op + last.entries - 1,
            checksum: head_checksum,
            next_offset: last.next_offset,
            segments: segments.iter().map(|s| (s.start_offset, s.bytes)).collect(),
            offsets: scan
                .offsets
                .iter()
                .map(|o| (o.kind, o.id, o.offset))
                .collect(),
        };
        let bytes = manifest.encode();
        let length = bytes.len() as u64 + segments.iter().map(|s| s.bytes).sum::<u64>();
        Ok(Some(Self {
            snapshot: SnapshotRef {
                op: manifest.op,
                checksum: manifest.checksum,
                trailer: checksum(&bytes),
                length,
            },
            manifest: bytes,
            segments: segments.into_iter().map(|s| (s.path, s.bytes)).collect(),
        }))
    }

    /// The image's bytes from `offset`, at most a chunk.
    pub fn chunk<R: ReadStorage>(&self, storage: &R, offset: u64) -> Result<Vec<u8>, String> {
        if offset >= self.snapshot.length || !offset.is_multiple_of(CHUNK) {
            return Err(format!(
                "no chunk at {offset} of an image of {} bytes",
                self.snapshot.length
            ));
        }
        let end = (offset + CHUNK).min(self.snapshot.length);
        let mut out = Vec::with_capacity(usize::try_from(end - offset).unwrap_or(0));
        let manifest_len = self.manifest.len() as u64;
        if offset < manifest_len {
            let to = end.min(manifest_len);
            let range = usize::try_from(offset).unwrap_or(usize::MAX)
                ..usize::try_from(to).unwrap_or(usize::MAX);
            out.extend_from_slice(&self.manifest[range]);
        }
        let mut base = manifest_len;
        for (path, len) in &self.segments {
            let (from, to) = (offset.max(base), end.min(base + len));
            if from < to {
                let file = storage
                    .open_read(path)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                let mut buf = vec![0u8; usize::try_from(to - from).unwrap_or(0)];
                file.read_exact_at(from - base, &mut buf)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                out.extend_from_slice(&buf);
            }
            base += len;
            if base >= end {
                break;
            }
        }
        Ok(out)
    }
}

/// Writes a received chunk into the partition's staging file (`staging`: the image it holds; a
/// chunk of another image starts the file anew). `Err`: the chunk does not fit the image.
pub fn stage_chunk<S: Storage>(
    storage: &S,
    dir: &Path,
    staging: &mut Option<SnapshotRef>,
    snapshot: SnapshotRef,
    offset: u64,
    bytes: &[u8],
) -> Result<Result<(), String>, iggy_io::Error> {
    if offset.saturating_add(bytes.len() as u64) > snapshot.length {
        return Ok(Err(format!(
            "a chunk of {} bytes at {offset} runs past the image's {} bytes",
            bytes.len(),
            snapshot.length
        )));
    }
    let path = dir.join(STAGING_FILE);
    let file = storage.open(&path, OpenMode::Create)?;
    if *staging != Some(snapshot) {
        file.set_len(0)?;
        *staging = Some(snapshot);
    }
    // Not synced: the install copies what it verifies into synced files of its own, and a
    // crash sweeps this file.
    file.write_all_at(offset, bytes)?;
    Ok(Ok(()))
}

/// Installs the staged image `snapshot` into `partition`'s directory (the partition must not be
/// written meanwhile: its lane is quiet) and boots the installed partition. `Ok(Err)`: the image
/// does not verify; nothing live changed.
pub fn install<S: Storage + Clone>(
    partition: &Partition<S>,
    snapshot: SnapshotRef,
) -> Result<Result<Partition<S>, String>, String> {
    let storage = partition.wal().storage().clone();
    let dir = partition.dir().to_path_buf();
    let path = dir.join(STAGING_FILE);
    let io = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let file = storage.open_read(&path).map_err(|e| io(&e))?;
    if file.len().map_err(|e| io(&e))? < snapshot.length {
        return Ok(Err(format!(
            "{} holds fewer bytes than the image's {}",
            path.display(),
            snapshot.length
        )));
    }
    let mut prefix = [0u8; 16];
    file.read_exact_at(0, &mut prefix).map_err(|e| io(&e))?;
    let manifest_len = match Manifest::length(&prefix) {
        Ok(len) if (len as u64) <= snapshot.length => len,
        Ok(len) => return Ok(Err(format!("a manifest of {len} bytes in a shorter image"))),
        Err(e) => return Ok(Err(e)),
    };
    let mut bytes = vec![0u8; manifest_len];
    file.read_exact_at(0, &mut bytes).map_err(|e| io(&e))?;
    if checksum(&bytes) != snapshot.trailer {
        return Ok(Err(
            "the manifest does not match the transfer's trailer".into()
        ));
    }
    let manifest = match Manifest::decode(&bytes) {
        Ok(manifest) => manifest,
        Err(e) => return Ok(Err(e)),
    };
    let shipped = manifest_len as u64 + manifest.segments.iter().map(|s| s.1).sum::<u64>();
    if manifest.group != partition.config().group
        || manifest.op != snapshot.op
        || manifest.checksum != snapshot.checksum
        || shipped != snapshot.length
    {
        return Ok(Err(format!(
            "the manifest (group {:#x}, op {}, {shipped} bytes) is not of this transfer (op {}, \
             {} bytes) or this partition",
            manifest.group, manifest.op, snapshot.op, snapshot.length
        )));
    }
    let mut install = Install::new(storage.clone(), &dir, partition.config().clone());
    let mut at = manifest_len as u64;
    for &(start, len) in &manifest.segments {
        // Entry by entry from the staged file: one entry in memory, verified as it lands.
        let base = at;
        let mut read = |offset: u64, buf: &mut [u8]| -> Result<(), String> {
            if offset + buf.len() as u64 > len {
                return Err(format!("past the segment's {len} bytes"));
            }
            file.read_exact_at(base + offset, buf)
                .map_err(|e| e.to_string())
        };
        if let Err(e) = install.receive_segment_from(start, len, &mut read) {
            return Ok(Err(format!("segment {start} of the image: {e}")));
        }
        at += len;
    }
    if install.head() != Some((manifest.op, manifest.checksum)) {
        return Ok(Err(format!(
            "the image's log ends at {:?}, not at op {}",
            install.head().map(|h| h.0),
            manifest.op
        )));
    }
    install
        .receive_state(StateArtifact {
            next_offset: manifest.next_offset,
            offsets: manifest.offsets.clone(),
            dedup: Vec::new(),
        })
        .map_err(|e| e.to_string())?;
    let current = partition.vsr_state();
    let vsr = VsrState {
        commit_max: current.commit_max.max(manifest.op),
        ..current
    };
    match install.commit(vsr) {
        Ok(()) => {}
        // Verified whole but refused (an artifact past the log's end): nothing live changed.
        Err(e @ iggy_segments::PartitionError::BehindOffsetFrontier { .. }) => {
            return Ok(Err(e.to_string()));
        }
        Err(e) => return Err(e.to_string()),
    }
    // Committed: the retired tree and the staging file go (a crash before leaves them for boot).
    iggy_segments::install::finish(&storage, &dir).map_err(|e| e.to_string())?;
    storage.unlink(&path).map_err(|e| io(&e))?;
    let config = partition.config().clone();
    match Partition::open(storage, &dir, config, iggy_wal::Mode::Open) {
        Ok(Some((installed, _))) => Ok(Ok(installed)),
        Ok(None) => Err(format!("{}: no partition after the install", dir.display())),
        Err(e) => Err(format!("booting the installed partition: {e}")),
    }
}
