//! The staged install: state transfer replaces a partition's files wholesale, and a crash at any
//! step boots to the whole old partition or the whole new one. See `docs/recovery.md`.
//!
//! Invariants:
//! - received artifacts land in `*.staging` names (files) and `offsets.staging/`, each batch
//!   validated as it lands, and nothing live changes until [`Install::commit`];
//! - before anything live changes, `.install-backup/` holds every live file: hard links, except
//!   the superblock, which the install rewrites in place and so is copied;
//! - the one commit point is the rename of `.install-backup` to `.install-retired`, made durable
//!   by the directory fsync after it;
//! - [`recover`] runs before any file of the partition is opened: it removes `.install-building`
//!   and `.install-retired`, and if `.install-backup` exists it restores the old files from it.
//!   Restoring links the backup's files back (never moves them out), so a crash during recovery
//!   leaves the backup whole and recovery runs again to the same result.

use std::path::{Path, PathBuf};

use iggy_format::Header;
use iggy_format::batch;
use iggy_format::checksum::Checksum;
use iggy_format::constants::HEADER_SIZE;
use iggy_io::{EntryKind, OpenMode, ReadFile, ReadStorage, Storage, WriteFile};
use iggy_superblock::{RepairPolicy, Superblock, VsrState};
use iggy_wal::Naming;
use iggy_wal::frontier::{self, Frontier};

use crate::config::{Config, STAGING_SUFFIX};
use crate::entry::{self, Kind};
use crate::error::PartitionError;
use crate::index;
use crate::offsets::{self, ConsumerKind};
use crate::report::{Finding, FindingKind};

pub const BUILDING_DIR: &str = ".install-building";
pub const BACKUP_DIR: &str = ".install-backup";
pub const RETIRED_DIR: &str = ".install-retired";
/// The directory the received consumer offsets land in.
pub const OFFSETS_STAGING_DIR: &str = "offsets.staging";
/// The staged frontier an install renames into place.
pub const FRONTIER_STAGING: &str = "frontier.staging";

/// Where a staged install stood when boot found it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InstallFinding {
    /// `.install-building`: the backup was being built; nothing live changed. Removed.
    Abandoned,
    /// `.install-backup`: the install had begun to change live files but did not commit. The old
    /// files are restored from the backup.
    Uncommitted,
    /// `.install-retired`: the install committed; the old files are removed.
    Committed,
}

/// The install directories present in `dir` and what recovery does about each (read-only).
pub fn plan<R: ReadStorage>(storage: &R, dir: &Path) -> Result<Vec<Finding>, iggy_io::Error> {
    let mut findings = Vec::new();
    for (name, kind) in [
        (BUILDING_DIR, InstallFinding::Abandoned),
        (BACKUP_DIR, InstallFinding::Uncommitted),
        (RETIRED_DIR, InstallFinding::Committed),
    ] {
        if storage.exists(dir.join(name))? {
            findings.push(Finding {
                file: dir.join(name),
                kind: FindingKind::Install(kind),
            });
        }
    }
    Ok(findings)
}

/// Brings `dir` to the old or the new partition after a crash during an install (see the
/// module docs), and returns what it found. Runs before any file of the partition is opened.
pub fn recover<S: Storage>(storage: &S, dir: &Path) -> Result<Vec<Finding>, PartitionError> {
    let findings = plan(storage, dir)?;
    for finding in &findings {
        let FindingKind::Install(kind) = finding.kind else {
            continue;
        };
        tracing::warn!(dir = %dir.display(), ?kind, "recovering a staged install");
        match kind {
            InstallFinding::Abandoned => {
                storage.remove_dir_all(&finding.file)?;
                // Gone durably: a power loss after boot reported the partition clean does not
                // bring it back for the next boot to report again.
                storage.sync_dir(dir)?;
            }
            InstallFinding::Uncommitted => roll_back(storage, dir)?,
            InstallFinding::Committed => finish(storage, dir)?,
        }
    }
    Ok(findings)
}

/// Removes a committed install's retired tree (off the critical path; [`recover`] does it too).
pub fn finish<S: Storage>(storage: &S, dir: &Path) -> Result<(), PartitionError> {
    let retired = dir.join(RETIRED_DIR);
    if storage.exists(&retired)? {
        storage.remove_dir_all(&retired)?;
        // Durably gone (with the rollback's rename, when there was one): a power loss after
        // boot reported the partition clean does not bring it back.
        storage.sync_dir(dir)?;
    }
    Ok(())
}

/// Whether a live top-level name is part of the partition's state (not install machinery).
fn is_partition_file(name: &str) -> bool {
    !name.starts_with('.')
        && !name.ends_with(STAGING_SUFFIX)
        && name != OFFSETS_STAGING_DIR
        && !crate::rebuilt::is_rebuild_entry(name)
}

/// Restores the old partition from `.install-backup` (idempotent), then retires the backup.
fn roll_back<S: Storage>(storage: &S, dir: &Path) -> Result<(), PartitionError> {
    let backup = dir.join(BACKUP_DIR);
    let mut kept = Vec::new();
    for entry in storage.list_dir(&backup)? {
        let name = entry.name.to_string_lossy().into_owned();
        let live = dir.join(&name);
        if entry.kind == EntryKind::Dir {
            if storage.exists(&live)? {
                storage.remove_dir_all(&live)?;
            }
            storage.create_dir(&live)?;
            for inner in storage.list_dir(backup.join(&name))? {
                storage.hard_link(backup.join(&name).join(&inner.name), live.join(&inner.name))?;
            }
            // The restored directory's entries durable before the backup may go.
            storage.sync_dir(&live)?;
        } else {
            if storage.exists(&live)? {
                storage.unlink(&live)?;
            }
            storage.hard_link(backup.join(&name), &live)?;
        }
        kept.push(name);
    }
    for entry in storage.list_dir(dir)? {
        let name = entry.name.to_string_lossy().into_owned();
        if name.starts_with('.') || kept.contains(&name) {
            continue;
        }
        if entry.kind == EntryKind::Dir {
            storage.remove_dir_all(dir.join(&name))?;
        } else {
            storage.unlink(dir.join(&name))?;
        }
    }
    // The old files are back durably before the backup stops being the way back.
    storage.sync_dir(dir)?;
    storage.rename(&backup, dir.join(RETIRED_DIR))?;
    // `finish` makes the rename durable with its removal of the retired tree (one directory
    // sync for both): until then a crash finds the backup again and restores again, to the same
    // result.
    finish(storage, dir)
}

/// What the sender sends besides the segments: the partition's consumer offsets, next offset
/// and deduplication entries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StateArtifact {
    pub next_offset: u64,
    pub offsets: Vec<(ConsumerKind, u32, u64)>,
    /// Message ids and the offsets they were stored at (carried for the server's dedup).
    pub dedup: Vec<(u128, u64)>,
}

/// A segment received and verified into its staging file.
#[derive(Clone, Debug)]
struct Staged {
    start_offset: u64,
    next_offset: u64,
    first_op: u64,
    last_op: u64,
    last_checksum: Checksum,
    len: u64,
}

/// An install in progress into the (closed) partition in `dir`.
#[derive(Debug)]
pub struct Install<S: Storage> {
    storage: S,
    dir: PathBuf,
    config: Config,
    segments: Vec<Staged>,
    state: Option<StateArtifact>,
}

/// Fills `buf` with a received segment's bytes from `at` (its own offset); `Err` says why it
/// could not ([`Install::receive_segment_from`]).
pub type ReadAt<'a> = dyn FnMut(u64, &mut [u8]) -> Result<(), String> + 'a;

impl<S: Storage + Clone> Install<S> {
    /// Starts an install; any earlier one's leftovers must have been recovered.
    pub fn new(storage: S, dir: &Path, config: Config) -> Self {
        Self {
            storage,
            dir: dir.to_path_buf(),
            config,
            segments: Vec::new(),
            state: None,
        }
    }

    /// Receives one whole segment (the sender's `.log` up to its trusted end), oldest first.
    /// Every entry is verified as it lands: WAL header and body checksums, ops and parent links
    /// continuing the previous segment, the group, the entry's kind, and for a batch every
    /// message checksum, the partition id, and offsets continuing the previous segment from the
    /// one the file is named by. The file is synced: it must be durable before the commit
    /// renames it into place.
    pub fn receive_segment(
        &mut self,
        start_offset: u64,
        bytes: &[u8],
    ) -> Result<(), PartitionError> {
        let mut read = |at: u64, buf: &mut [u8]| -> Result<(), String> {
            let from = usize::try_from(at).map_err(|e| e.to_string())?;
            let piece = bytes
                .get(from..from + buf.len())
                .ok_or_else(|| "past the segment's end".to_string())?;
            buf.copy_from_slice(piece);
            Ok(())
        };
        self.receive_segment_from(start_offset, bytes.len() as u64, &mut read)
    }

    /// [`Install::receive_segment`] of a segment of `len` bytes that `read(at, buf)` fills
    /// piece by piece (a staged transfer image on disk): one entry in memory at a time, so an
    /// install of 1 GiB segments holds at most the largest prepare, not a segment. Each entry
    /// is verified before it is written to the staged file. `read`'s error is the reason the
    /// bytes could not be had (reported as an I/O failure of the staged file).
    pub fn receive_segment_from(
        &mut self,
        start_offset: u64,
        len: u64,
        read: &mut ReadAt<'_>,
    ) -> Result<(), PartitionError> {
        let path = self.dir.join(format!(
            "{}{STAGING_SUFFIX}",
            Naming::ByKey.file_name(start_offset)
        ));
        let bad = |offset: u64, reason: String| PartitionError::Corrupt {
            file: path.clone(),
            offset,
            reason,
        };
        let previous = self.segments.last();
        let mut op = previous.map(|s| s.last_op + 1);
        let mut parent = previous.map(|s| s.last_checksum);
        let mut next_offset = previous.map_or(start_offset, |s| s.next_offset);
        if next_offset != start_offset {
            return Err(PartitionError::OffsetGap {
                file: path,
                offset: 0,
                expected: next_offset,
                found: start_offset,
            });
        }
        // Opened at the first verified entry: a segment refused at its first entry touches
        // nothing.
        let mut file = None;
        let mut position = 0u64;
        let mut first_op = None;
        let mut last_checksum = 0;
        let mut entry = Vec::new();
        while position < len {
            let at = position;
            if len - position < HEADER_SIZE as u64 {
                return Err(bad(at, "truncated header".into()));
            }
            entry.resize(HEADER_SIZE, 0);
            read(at, &mut entry).map_err(|e| bad(at, format!("reading the header: {e}")))?;
            let header = Header::decode(&entry).map_err(|e| bad(at, e.to_string()))?;
            let size = u64::from(header.size);
            if size < HEADER_SIZE as u64
                || size > HEADER_SIZE as u64 + crate::PREPARE_BYTES_MAX
                || size > len - position
            {
                return Err(bad(at, "entry runs past the end".into()));
            }
            entry.resize(usize::try_from(size).unwrap_or(usize::MAX), 0);
            read(at + HEADER_SIZE as u64, &mut entry[HEADER_SIZE..])
                .map_err(|e| bad(at, format!("reading the body: {e}")))?;
            let body = &entry[HEADER_SIZE..];
            if !header.body_matches(body) {
                return Err(bad(at, "body checksum mismatch".into()));
            }
            if op.is_some_and(|expected| expected != header.op) {
                return Err(bad(
                    at,
                    format!("op {} where {op:?} was expected", header.op),
                ));
            }
            if parent.is_some_and(|expected| expected != header.parent) {
                return Err(bad(
                    at,
                    format!("op {} does not link to its predecessor", header.op),
                ));
            }
            if header.group != self.config.group {
                return Err(bad(
                    at,
                    format!("op {} belongs to group {:#x}", header.op, header.group),
                ));
            }
            let kind = entry::peek(&header, body).map_err(|error| PartitionError::BadEntry {
                file: path.clone(),
                offset: at,
                op: header.op,
                reason: error.to_string(),
            })?;
            if let Kind::Messages(_) = kind {
                let batch = batch::decode(body).map_err(|error| PartitionError::BadBatch {
                    file: path.clone(),
                    offset: at,
                    error,
                })?;
                if batch.header.partition_id != self.config.partition_id {
                    return Err(PartitionError::PartitionMismatch {
                        file: path.clone(),
                        offset: at,
                        expected: self.config.partition_id,
                        found: batch.header.partition_id,
                    });
                }
                if batch.header.base_offset != next_offset {
                    return Err(PartitionError::OffsetGap {
                        file: path.clone(),
                        offset: at,
                        expected: next_offset,
                        found: batch.header.base_offset,
                    });
                }
                next_offset += u64::from(batch.header.message_count);
            }
            first_op.get_or_insert(header.op);
            last_checksum = header.checksum();
            op = Some(header.op + 1);
            parent = Some(last_checksum);
            // Verified: written (unsynced) where it stands in the segment.
            let staged = match &mut file {
                Some(staged) => staged,
                None => {
                    let staged = self.storage.open(&path, OpenMode::Create)?;
                    staged.set_len(0)?;
                    file.insert(staged)
                }
            };
            staged.write_all_at(at, &entry)?;
            position += size;
        }
        let (Some(first_op), Some(next_op), Some(file)) = (first_op, op, file) else {
            return Err(PartitionError::EmptySegment { file: path });
        };
        // Durable before the commit renames it into place.
        file.sync_data()?;
        self.segments.push(Staged {
            start_offset,
            next_offset,
            first_op,
            last_op: next_op - 1,
            last_checksum,
            len,
        });
        Ok(())
    }

    /// The last entry received so far: its op and header checksum (`None`: no segment yet).
    #[must_use]
    pub fn head(&self) -> Option<(u64, Checksum)> {
        self.segments.last().map(|s| (s.last_op, s.last_checksum))
    }

    /// Receives the state artifact: the consumer offsets land in `offsets.staging/`.
    pub fn receive_state(&mut self, state: StateArtifact) -> Result<(), PartitionError> {
        let staging = self.dir.join(OFFSETS_STAGING_DIR);
        if self.storage.exists(&staging)? {
            self.storage.remove_dir_all(&staging)?;
        }
        let store = offsets::OffsetStore::new(self.storage.clone(), &staging);
        for (kind, id, offset) in &state.offsets {
            // Each store syncs its file and the directory.
            store.store(*kind, *id, *offset)?;
        }
        self.state = Some(state);
        Ok(())
    }

    /// Replaces the live partition with the received one (see the module docs for the steps and
    /// why a crash at any of them boots to the old or the new partition). `vsr` is the
    /// superblock state the transfer brings; its `offset_frontier` becomes the end of the
    /// received log.
    pub fn commit(self, vsr: VsrState) -> Result<(), PartitionError> {
        let storage = &self.storage;
        let dir = &self.dir;
        let state = self.state.clone().unwrap_or_default();
        let Some(last) = self.segments.last() else {
            return Err(PartitionError::EmptySegment {
                file: dir.join("(no segments received)"),
            });
        };
        // Offsets are continuous: the installed log's end is the next offset. An artifact that
        // claims more does not describe these segments.
        let next_offset = last.next_offset;
        if state.next_offset > next_offset {
            return Err(PartitionError::BehindOffsetFrontier {
                dir: dir.clone(),
                log_end: next_offset,
                offset_frontier: state.next_offset,
            });
        }
        self.stage_frontier(last)?;
        if !storage.exists(dir.join(OFFSETS_STAGING_DIR))? {
            storage.create_dir(dir.join(OFFSETS_STAGING_DIR))?;
        }
        // The staged names become durable with the directory sync that makes the backup the way
        // back (below): nothing relies on them before, and a crash before leaves the old
        // partition live with leftovers the sweep removes.

        // 1. The backup: links to every live file, a copy of the superblock.
        let building = dir.join(BUILDING_DIR);
        storage.create_dir(&building)?;
        for entry in storage.list_dir(dir)? {
            let name = entry.name.to_string_lossy().into_owned();
            if !is_partition_file(&name) {
                continue;
            }
            if entry.kind == EntryKind::Dir {
                storage.create_dir(building.join(&name))?;
                for inner in storage.list_dir(dir.join(&name))? {
                    storage.hard_link(
                        dir.join(&name).join(&inner.name),
                        building.join(&name).join(&inner.name),
                    )?;
                }
                // The linked entries durable before the backup is relied on.
                storage.sync_dir(building.join(&name))?;
            } else if name == iggy_superblock::FILE_NAME {
                let bytes = storage.open_read(dir.join(&name))?.read_all()?;
                let copy = storage.open(building.join(&name), OpenMode::CreateNew)?;
                // The copy's bytes durable before it may be restored.
                copy.write_all_and_sync_data(0, &bytes)?;
            } else {
                storage.hard_link(dir.join(&name), building.join(&name))?;
            }
        }
        // The backup's entries durable before its rename makes it the way back.
        storage.sync_dir(&building)?;
        storage.rename(&building, dir.join(BACKUP_DIR))?;
        // From here a crash rolls back.
        storage.sync_dir(dir)?;

        // 2. Move the new files in.
        let new_names: Vec<String> = self
            .segments
            .iter()
            .map(|s| Naming::ByKey.file_name(s.start_offset))
            .collect();
        for entry in storage.list_dir(dir)? {
            let name = entry.name.to_string_lossy().into_owned();
            let old_segment =
                Naming::ByKey.parse(entry.name.as_ref()).is_some() && !new_names.contains(&name);
            // Seals describe the old segments (the new ones are sealed by their first
            // publications), like the indexes.
            let seal = iggy_wal::seal::sealed_name(entry.name.as_ref()).is_some();
            if old_segment || seal || index::parse_file_name(&name).is_some() {
                storage.unlink(dir.join(&name))?;
            }
        }
        for name in &new_names {
            storage.rename(dir.join(format!("{name}{STAGING_SUFFIX}")), dir.join(name))?;
        }
        storage.rename(
            dir.join(FRONTIER_STAGING),
            dir.join(iggy_wal::boot::FRONTIER_FILE),
        )?;
        if storage.exists(dir.join(offsets::DIR_NAME))? {
            storage.remove_dir_all(dir.join(offsets::DIR_NAME))?;
        }
        storage.rename(dir.join(OFFSETS_STAGING_DIR), dir.join(offsets::DIR_NAME))?;
        let (mut superblock, _) = Superblock::open(
            storage.clone(),
            dir,
            &self.config.identity,
            RepairPolicy::Repair,
        )?
        .ok_or_else(|| PartitionError::EmptySegment {
            file: dir.join(iggy_superblock::FILE_NAME),
        })?;
        // State transfer may move the offset frontier back: the installed log defines offsets.
        superblock.write_state_transfer(VsrState {
            offset_frontier: next_offset,
            ..vsr
        })?;
        // Every new name durable before the commit point.
        storage.sync_dir(dir)?;

        // 3. The commit point.
        storage.rename(dir.join(BACKUP_DIR), dir.join(RETIRED_DIR))?;
        // The install is committed once this returns.
        storage.sync_dir(dir)?;
        Ok(())
    }

    /// Writes `frontier.staging`: a new frontier that publishes exactly the received segments.
    fn stage_frontier(&self, last: &Staged) -> Result<(), PartitionError> {
        let published = Frontier {
            sequence: 0,
            generation: 0,
            group: self.config.group,
            incarnation: self.config.incarnation,
            head_op: last.last_op,
            head_checksum: last.last_checksum,
            head_file: last.first_op,
            published_length: last.len,
            head_file_key: last.start_offset,
        };
        let file = self
            .storage
            .open(self.dir.join(FRONTIER_STAGING), OpenMode::Create)?;
        // Nothing of an earlier attempt survives (no ring record), and the ring has its room.
        file.set_len(0)?;
        file.set_len(iggy_wal::ring::FILE_SIZE)?;
        for sequence in [0, 1] {
            let slot = Frontier {
                sequence,
                ..published
            };
            file.write_all_at(slot.offset(), &frontier::encode(&slot))?;
        }
        // Durable before the commit renames it into place.
        file.sync_data()?;
        Ok(())
    }
}
