//! Consumer offsets: one small file per consumer and per consumer group under a partition's
//! `offsets/` directory, of two record slots written in turn.
//!
//! Invariants:
//! - a stored offset is durable when [`OffsetStore::store`] returns: a file's first store
//!   writes the whole file and syncs it under a temporary name, renames it over, and syncs the
//!   directory; every later one writes its record into the slot that does not hold the newest
//!   record and syncs that (`fdatasync`: no new inode, no directory sync);
//! - a partition's commit stores into a slot without the sync
//!   ([`OffsetStore::store_known`] with `sync` false): the store's log entry is what makes it
//!   durable until the partition settles the file ([`OffsetStore::settle`]), which it does
//!   before retention deletes a segment and at a clean shutdown; a boot finds a committed
//!   store newer than its file in the log and stores it again, synced;
//! - after any crash, a consumer's file holds the last offset whose synced store returned, or
//!   one stored after it, never a mix, never nothing: a torn slot is a store in flight, and the
//!   other slot holds one before it;
//! - a file with no slot that verifies (rotten, cut short, misdirected) is reported with its
//!   path and reason, never read as offset 0;
//! - leftover `*.tmp` files (a crash before the rename) are reported and ignored by loads;
//! - a file of version 2 (one record, 64 bytes) is read, and its next store replaces it with a
//!   file of two slots;
//! - a partition makes a consumer's file, holding a [`placeholder`] that reads as no offset,
//!   when it journals the consumer's first store ([`OffsetStore::prepare_file`]), so a store's
//!   commit writes in place and never needs room on the disk;
//! - after a crash, boot writes each file's current slot again and syncs it
//!   ([`OffsetStore::settle`]) before it serves what it read;
//! - what a partition knows of a file ([`Known`]: the slot of its current record, and the
//!   record) is what the file holds: kept only by the file's writers under the partition's
//!   lock (a store's journal and its commit), forgotten while a commit's store runs and by any
//!   store made around the partition, so a store writes its slot without reading the file and
//!   a poll reads a stored offset without opening it.
//!
//! Layout of one slot (64 bytes, little-endian; a file is two, 128 bytes; see `docs/format.md`,
//! "Consumer offsets"):
//!
//! ```text
//!  0 checksum u128 (XXH3-128 of bytes [16, 64)) | 16 magic "IGGYCOFF" u64 | 24 version u16
//! 26 kind u8 (1 consumer, 2 group) | 27 zero u8 | 28 id u32 | 32 offset u64 | 40 sequence u64
//! 48 op u64 (the partition log's entry that stored it; 0: stored directly) | 56..64 zero
//! ```

use std::path::{Path, PathBuf};

use iggy_format::{checksum, le};
use iggy_io::{OpenMode, ReadFile, ReadStorage, Storage, WriteFile};

/// One record slot.
pub const RECORD_SIZE: usize = 64;
/// A file: two slots.
pub const FILE_SIZE: usize = 2 * RECORD_SIZE;
/// A file of version 2: one record.
pub const LEGACY_FILE_SIZE: usize = RECORD_SIZE;
/// The offset a deleted consumer's file holds (`DeleteConsumerOffset`): a tombstone stored like
/// any offset, through the partition's log, so the file keeps the op that deleted it. No
/// partition reaches this offset.
pub const DELETED: u64 = u64::MAX;
pub const MAGIC: u64 = u64::from_le_bytes(*b"IGGYCOFF");
pub const VERSION: u16 = 3;
/// The version of a one-record file, still read.
pub const LEGACY_VERSION: u16 = 2;
/// The directory of a partition that holds its offsets.
pub const DIR_NAME: &str = "offsets";
/// The suffix of the temporary file a store writes before its rename.
const TEMP_SUFFIX: &str = ".tmp";

const CHECKSUMMED_OFFSET: usize = 16;
const MAGIC_OFFSET: usize = 16;
const VERSION_OFFSET: usize = 24;
const KIND_OFFSET: usize = 26;
const ID_OFFSET: usize = 28;
const OFFSET_OFFSET: usize = 32;
const SEQUENCE_OFFSET: usize = 40;
const OP_OFFSET: usize = 48;
const RESERVED_OFFSET: usize = 56;

const _: () = assert!(RESERVED_OFFSET + 8 == RECORD_SIZE);
const _: () = assert!(OP_OFFSET == SEQUENCE_OFFSET + 8);
const _: () = assert!(OFFSET_OFFSET == ID_OFFSET + 4);

/// Whose offset it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ConsumerKind {
    Consumer,
    Group,
}

impl ConsumerKind {
    /// The byte that stands for the kind on disk.
    #[must_use]
    pub fn code(self) -> u8 {
        match self {
            Self::Consumer => 1,
            Self::Group => 2,
        }
    }

    /// The kind a byte stands for.
    #[must_use]
    pub fn from_code(code: u8) -> Option<Self> {
        match code {
            1 => Some(Self::Consumer),
            2 => Some(Self::Group),
            _ => None,
        }
    }

    /// The kind in words (and the prefix of its offset files).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Consumer => "consumer",
            Self::Group => "group",
        }
    }
}

/// One stored offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConsumerOffset {
    pub kind: ConsumerKind,
    pub id: u32,
    pub offset: u64,
    /// How many times this consumer's offset was stored (for forensics).
    pub sequence: u64,
    /// The partition log's op whose commit stored it (0: stored directly, not through the log).
    pub op: u64,
}

/// Why an offset file cannot be trusted, or a store failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OffsetError {
    #[error("{file}: consumer offset file is corrupt: {reason}")]
    Corrupt { file: PathBuf, reason: String },
    #[error(
        "{file}: names {found:?} but is stored as {expected:?} (a misdirected or renamed file)"
    )]
    WrongOwner {
        file: PathBuf,
        expected: (ConsumerKind, u32),
        found: (ConsumerKind, u32),
    },
    #[error("{file}: unknown consumer offset version {version}")]
    UnknownVersion { file: PathBuf, version: u16 },
    #[error(transparent)]
    Io(#[from] iggy_io::Error),
}

/// The name of `kind` `id`'s offset file.
#[must_use]
pub fn file_name(kind: ConsumerKind, id: u32) -> String {
    format!("{}.{id:010}", kind.name())
}

/// Whether `name` is a name an offsets directory holds: an offset file, or a store's
/// temporary file.
#[must_use]
pub fn is_file_name(name: &str) -> bool {
    parse_file_name(name.strip_suffix(TEMP_SUFFIX).unwrap_or(name)).is_some()
}

fn parse_file_name(name: &str) -> Option<(ConsumerKind, u32)> {
    let (prefix, id) = name.split_once('.')?;
    let kind = match prefix {
        "consumer" => ConsumerKind::Consumer,
        "group" => ConsumerKind::Group,
        _ => return None,
    };
    (id.len() == 10 && id.bytes().all(|b| b.is_ascii_digit())).then_some(())?;
    Some((kind, id.parse().ok()?))
}

/// The record a consumer's file holds from the journaling of its first store until that store
/// commits ([`OffsetStore::prepare_file`]): no offset (readers take [`DELETED`] as none),
/// sequence 0, op 0.
#[must_use]
pub fn placeholder(kind: ConsumerKind, id: u32) -> ConsumerOffset {
    ConsumerOffset {
        kind,
        id,
        offset: DELETED,
        sequence: 0,
        op: 0,
    }
}

/// Encodes one record (a slot of an offset file).
#[must_use]
pub fn encode(offset: &ConsumerOffset) -> [u8; RECORD_SIZE] {
    let mut bytes = [0u8; RECORD_SIZE];
    le::put_u64(&mut bytes, MAGIC_OFFSET, MAGIC);
    le::put_u16(&mut bytes, VERSION_OFFSET, VERSION);
    bytes[KIND_OFFSET] = offset.kind.code();
    le::put_u32(&mut bytes, ID_OFFSET, offset.id);
    le::put_u64(&mut bytes, OFFSET_OFFSET, offset.offset);
    le::put_u64(&mut bytes, SEQUENCE_OFFSET, offset.sequence);
    le::put_u64(&mut bytes, OP_OFFSET, offset.op);
    let sum = checksum::checksum(&bytes[CHECKSUMMED_OFFSET..]);
    le::put_u128(&mut bytes, 0, sum);
    bytes
}

/// Decodes and verifies one record (a slot, or a version 2 file).
pub fn decode(file: &Path, bytes: &[u8]) -> Result<ConsumerOffset, OffsetError> {
    let corrupt = |reason: String| OffsetError::Corrupt {
        file: file.to_path_buf(),
        reason,
    };
    if bytes.len() != RECORD_SIZE {
        return Err(corrupt(format!(
            "{} bytes, expected {RECORD_SIZE}",
            bytes.len()
        )));
    }
    let stored = le::u128_at(bytes, 0).unwrap_or_default();
    let computed = checksum::checksum(&bytes[CHECKSUMMED_OFFSET..]);
    if stored != computed {
        return Err(corrupt(format!(
            "checksum {stored:#034x}, computed {computed:#034x}"
        )));
    }
    if le::u64_at(bytes, MAGIC_OFFSET) != Some(MAGIC) {
        return Err(corrupt("bad magic".into()));
    }
    let version = le::u16_at(bytes, VERSION_OFFSET).unwrap_or_default();
    if version != VERSION && version != LEGACY_VERSION {
        return Err(OffsetError::UnknownVersion {
            file: file.to_path_buf(),
            version,
        });
    }
    let kind = match bytes[KIND_OFFSET] {
        1 => ConsumerKind::Consumer,
        2 => ConsumerKind::Group,
        other => return Err(corrupt(format!("unknown consumer kind {other}"))),
    };
    if bytes[KIND_OFFSET + 1] != 0 || le::first_nonzero(&bytes[RESERVED_OFFSET..]).is_some() {
        return Err(corrupt("reserved bytes are not zero".into()));
    }
    Ok(ConsumerOffset {
        kind,
        id: le::u32_at(bytes, ID_OFFSET).unwrap_or_default(),
        offset: le::u64_at(bytes, OFFSET_OFFSET).unwrap_or_default(),
        sequence: le::u64_at(bytes, SEQUENCE_OFFSET).unwrap_or_default(),
        op: le::u64_at(bytes, OP_OFFSET).unwrap_or_default(),
    })
}

/// Reads the offset of one consumer: `Ok(None)` if it never stored one.
pub fn load<R: ReadStorage>(
    storage: &R,
    dir: &Path,
    kind: ConsumerKind,
    id: u32,
) -> Result<Option<ConsumerOffset>, OffsetError> {
    let found = read_file(storage, &dir.join(file_name(kind, id)), kind, id)?;
    Ok(found.map(|found| found.newest).filter(is_stored))
}

/// Whether `record` is a stored offset, not the [`placeholder`] a file holds before its first
/// store commits (which reads as no file: no offset).
fn is_stored(record: &ConsumerOffset) -> bool {
    record.sequence != 0
}

/// An offset file as read: its newest record, the slot holding it (`None`: a version 2 file of
/// one record), and the other slot when it holds bytes that do not verify.
#[derive(Clone, Debug)]
struct Found {
    newest: ConsumerOffset,
    /// The bytes of the newest record, as read.
    bytes: [u8; RECORD_SIZE],
    slot: Option<usize>,
    damaged: Option<(usize, String)>,
}

/// A slot of an offset file that holds bytes that do not verify, beside one that does: the
/// file reads as the good one. Either the store in flight when a crash tore it, or rot (of
/// the newest record, the file then reads as the store before it); the two look alike.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DamagedSlot {
    pub file: PathBuf,
    pub slot: usize,
    pub reason: String,
    /// The record the file reads as.
    pub kept: ConsumerOffset,
}

/// Reads `kind` `id`'s offset file at `path` (`Ok(None)`: there is none): the valid slot with
/// the higher sequence. A slot that does not verify beside one that does is a store a crash
/// tore, and says nothing; a file with no valid slot is refused with both slots' reasons.
fn read_file<R: ReadStorage>(
    storage: &R,
    path: &Path,
    kind: ConsumerKind,
    id: u32,
) -> Result<Option<Found>, OffsetError> {
    if !storage.exists(path)? {
        return Ok(None);
    }
    let file = storage.open_read(path)?;
    let len = usize::try_from(file.len()?).unwrap_or(usize::MAX);
    let found = if len == LEGACY_FILE_SIZE {
        let mut bytes = [0u8; LEGACY_FILE_SIZE];
        file.read_exact_at(0, &mut bytes)?;
        Found {
            newest: decode(path, &bytes)?,
            bytes,
            slot: None,
            damaged: None,
        }
    } else if len == FILE_SIZE {
        let mut bytes = [0u8; FILE_SIZE];
        file.read_exact_at(0, &mut bytes)?;
        let slots = decode_slots(path, &bytes);
        let mut reasons = Vec::new();
        let mut damaged = None;
        for (slot, decoded) in slots.iter().enumerate() {
            match decoded {
                Slot::Empty => reasons.push(format!("slot {slot} is empty")),
                Slot::Record(_) => {}
                Slot::Damaged(reason) => {
                    reasons.push(format!("slot {slot}: {reason}"));
                    damaged = Some((slot, reason.clone()));
                }
            }
        }
        let (slot, newest) = current(&slots).ok_or_else(|| OffsetError::Corrupt {
            file: path.to_path_buf(),
            reason: format!("no slot verifies ({})", reasons.join("; ")),
        })?;
        let mut record = [0u8; RECORD_SIZE];
        record.copy_from_slice(&bytes[slot * RECORD_SIZE..(slot + 1) * RECORD_SIZE]);
        Found {
            newest,
            bytes: record,
            slot: Some(slot),
            damaged,
        }
    } else {
        let reason = format!("{len} bytes, expected {FILE_SIZE}");
        return Err(OffsetError::Corrupt {
            file: path.to_path_buf(),
            reason,
        });
    };
    let newest = found.newest;
    if (newest.kind, newest.id) != (kind, id) {
        return Err(OffsetError::WrongOwner {
            file: path.to_path_buf(),
            expected: (kind, id),
            found: (newest.kind, newest.id),
        });
    }
    Ok(Some(found))
}

/// One slot of an offset file as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Slot {
    /// All zero: never written (slot 1 before a file's second store).
    Empty,
    Record(ConsumerOffset),
    /// Bytes that do not verify, and why.
    Damaged(String),
}

/// Decodes the two slots of a file of version 3 (`bytes` of [`FILE_SIZE`]; a shorter tail is
/// a damaged slot).
#[must_use]
pub fn decode_slots(file: &Path, bytes: &[u8]) -> [Slot; 2] {
    let slot = |n: usize| {
        let record = bytes
            .get(n * RECORD_SIZE..(n + 1) * RECORD_SIZE)
            .unwrap_or(&[]);
        if record.len() == RECORD_SIZE && record.iter().all(|b| *b == 0) {
            return Slot::Empty;
        }
        match decode(file, record) {
            Ok(offset) => Slot::Record(offset),
            Err(OffsetError::Corrupt { reason, .. }) => Slot::Damaged(reason),
            Err(other) => Slot::Damaged(other.to_string()),
        }
    };
    [slot(0), slot(1)]
}

/// The slot a file reads as: of the records that verify, the one of the higher sequence (the
/// first on a tie, as after boot wrote one over a damaged other). `None`: no slot verifies.
#[must_use]
pub fn current(slots: &[Slot; 2]) -> Option<(usize, ConsumerOffset)> {
    let mut newest: Option<(usize, ConsumerOffset)> = None;
    for (slot, decoded) in slots.iter().enumerate() {
        if let Slot::Record(offset) = decoded
            && newest.is_none_or(|(_, n)| offset.sequence > n.sequence)
        {
            newest = Some((slot, *offset));
        }
    }
    newest
}

/// The byte offset of `slot` in a file of two.
fn slot_at(slot: usize) -> u64 {
    if slot == 0 { 0 } else { FILE_SIZE as u64 / 2 }
}

/// Everything in an offsets directory: the offsets that verify, the files that do not (each with
/// its error), the files read from one slot because the other does not verify, and leftover
/// temporary files.
#[derive(Debug, Default)]
pub struct Scan {
    pub offsets: Vec<ConsumerOffset>,
    pub damaged: Vec<OffsetError>,
    pub damaged_slots: Vec<DamagedSlot>,
    pub leftovers: Vec<PathBuf>,
}

/// Reads every offset file in `dir` (read-only; a missing directory is empty).
pub fn scan<R: ReadStorage>(storage: &R, dir: &Path) -> Result<Scan, OffsetError> {
    let mut result = Scan::default();
    if !storage.exists(dir)? {
        return Ok(result);
    }
    for entry in storage.list_dir(dir)? {
        let name = entry.name.to_string_lossy();
        if name.ends_with(TEMP_SUFFIX) {
            result.leftovers.push(dir.join(&*name));
            continue;
        }
        let Some((kind, id)) = parse_file_name(&name) else {
            continue;
        };
        let path = dir.join(&*name);
        match read_file(storage, &path, kind, id) {
            Ok(Some(found)) => {
                if let Some((slot, reason)) = found.damaged {
                    result.damaged_slots.push(DamagedSlot {
                        file: path,
                        slot,
                        reason,
                        kept: found.newest,
                    });
                }
                if is_stored(&found.newest) {
                    result.offsets.push(found.newest);
                }
            }
            Ok(None) => {}
            Err(OffsetError::Io(error)) => return Err(OffsetError::Io(error)),
            Err(damaged) => result.damaged.push(damaged),
        }
    }
    Ok(result)
}

/// What a partition knows of a consumer's file of two slots without reading it: the slot that
/// holds the file's current record, and that record. A partition keeps it from its last read or
/// store of the file ([`crate::Partition::stored_offset`]), so a store writes its slot without
/// reading the file first and a poll reads the offset without opening it; anything else that
/// writes the file must drop it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Known {
    pub slot: usize,
    pub record: ConsumerOffset,
}

impl Known {
    /// The offset it reads as: none for the [`placeholder`].
    #[must_use]
    pub fn stored(&self) -> Option<ConsumerOffset> {
        Some(self.record).filter(is_stored)
    }
}

/// Stores consumer offsets of one partition in `dir` (created on first use).
#[derive(Debug)]
pub struct OffsetStore<S: Storage> {
    storage: S,
    dir: PathBuf,
}

impl<S: Storage> OffsetStore<S> {
    pub fn new(storage: S, dir: &Path) -> Self {
        Self {
            storage,
            dir: dir.to_path_buf(),
        }
    }

    /// The consumer's stored offset, if it stored one.
    pub fn get(&self, kind: ConsumerKind, id: u32) -> Result<Option<ConsumerOffset>, OffsetError> {
        load(&self.storage, &self.dir, kind, id)
    }

    /// Durably stores `offset` for the consumer, directly (not through the partition's log);
    /// returns the stored record.
    pub fn store(
        &self,
        kind: ConsumerKind,
        id: u32,
        offset: u64,
    ) -> Result<ConsumerOffset, OffsetError> {
        self.store_committed(kind, id, offset, 0)
    }

    /// Makes the record `kind` `id`'s file reads as durable (boot does this to every file after
    /// a crash, before it trusts what it read): a store whose sync failed can be read back from
    /// the page cache and yet never reach the disk (a failed sync drops the pages' write-back,
    /// and a later sync alone does not bring it back), so the slot boot read is written again,
    /// the same bytes, and synced. A slot that does not verify beside it (a store a crash tore,
    /// or rot) is written over with the same record instead. A file of version 2 is left as it
    /// is (its stores were renamed into place after their sync). Nothing when there is no file.
    /// `sync`: false when the caller syncs the file system before it trusts the file (a node's
    /// boot, which defers its syncs to one).
    pub fn settle(&self, kind: ConsumerKind, id: u32, sync: bool) -> Result<(), OffsetError> {
        let path = self.dir.join(file_name(kind, id));
        let Some(found) = read_file(&self.storage, &path, kind, id)? else {
            return Ok(());
        };
        let Some(slot) = found.slot else {
            return Ok(());
        };
        let at = slot_at(found.damaged.map_or(slot, |(damaged, _)| damaged));
        let file = self.storage.open(&path, OpenMode::Existing)?;
        if sync {
            file.write_all_and_sync_data(at, &found.bytes)?;
        } else {
            file.write_all_at(at, &found.bytes)?;
        }
        Ok(())
    }

    /// Durably stores `offset` for the consumer as the commit of the partition log's entry `op`
    /// (recorded in the file, so a boot can tell a committed store it has not applied yet).
    pub fn store_committed(
        &self,
        kind: ConsumerKind,
        id: u32,
        offset: u64,
        op: u64,
    ) -> Result<ConsumerOffset, OffsetError> {
        self.store_known(kind, id, offset, op, None, true)
            .map(|known| known.record)
    }

    /// [`OffsetStore::store_committed`], given what is `known` of the file (`None`: read it
    /// first); returns what is known of it after the store. `sync` false leaves a store into a
    /// slot of an existing file unsynced: for a caller that keeps the store's log entry until
    /// it has settled the file ([`OffsetStore::settle`]), as a partition's commit does (a boot
    /// stores again, from the log, what a crash took from the file). A new file is always
    /// synced (its rename must not expose unsynced bytes).
    pub fn store_known(
        &self,
        kind: ConsumerKind,
        id: u32,
        offset: u64,
        op: u64,
        known: Option<Known>,
        sync: bool,
    ) -> Result<Known, OffsetError> {
        let path = self.dir.join(file_name(kind, id));
        let (before, newest) = match known {
            Some(known) => (known.record.sequence, Some(known.slot)),
            None => {
                self.make_dir()?;
                match read_file(&self.storage, &path, kind, id) {
                    Ok(found) => (
                        found.as_ref().map_or(0, |f| f.newest.sequence),
                        found.and_then(|f| f.slot),
                    ),
                    Err(OffsetError::Io(error)) => return Err(error.into()),
                    // A damaged file is replaced: the new record is the truth from now on.
                    Err(_) => (0, None),
                }
            }
        };
        let record = ConsumerOffset {
            kind,
            id,
            offset,
            sequence: before + 1,
            op,
        };
        if let Some(newest) = newest {
            // Into the slot that does not hold the newest record: a crash that tears it leaves
            // the newest as it was. Unsynced, a crash may leave either slot as it was before
            // any of the stores since the file's last sync, each slot still a whole record.
            let file = self.storage.open(&path, OpenMode::Existing)?;
            if sync {
                file.write_all_and_sync_data(slot_at(1 - newest), &encode(&record))?;
            } else {
                file.write_all_at(slot_at(1 - newest), &encode(&record))?;
            }
            return Ok(Known {
                slot: 1 - newest,
                record,
            });
        }
        // A new file (or one of version 2, or a damaged one).
        self.replace(&path, &record)?;
        Ok(Known { slot: 0, record })
    }

    /// Makes sure `kind` `id` has a file of two slots before a store of it is journaled, so that
    /// the store, when it commits, writes in place and needs no new block or inode: on a full
    /// disk the journal write is refused (and tried again) instead of the commit failing, which
    /// it may not. Creates the file holding a [`placeholder`] when there is none, and replaces a
    /// file of version 2 with one of two slots holding its record; durable when it returns. A
    /// damaged file is left for the store to replace (and reported until then).
    pub fn prepare_file(&self, kind: ConsumerKind, id: u32) -> Result<(), OffsetError> {
        self.prepare_known(kind, id).map(|_| ())
    }

    /// [`OffsetStore::prepare_file`], returning what is known of the file after it (`None`: a
    /// damaged file, left for the store).
    pub fn prepare_known(&self, kind: ConsumerKind, id: u32) -> Result<Option<Known>, OffsetError> {
        self.make_dir()?;
        let path = self.dir.join(file_name(kind, id));
        let record = match read_file(&self.storage, &path, kind, id) {
            Ok(Some(Found {
                slot: Some(slot),
                newest,
                ..
            })) => {
                return Ok(Some(Known {
                    slot,
                    record: newest,
                }));
            }
            Ok(Some(legacy)) => legacy.newest,
            Ok(None) => placeholder(kind, id),
            Err(OffsetError::Io(error)) => return Err(error.into()),
            Err(_) => return Ok(None),
        };
        self.replace(&path, &record)?;
        Ok(Some(Known { slot: 0, record }))
    }

    /// Creates the offsets directory if there is none, durably.
    fn make_dir(&self) -> Result<(), OffsetError> {
        if !self.storage.exists(&self.dir)? {
            self.storage.create_dir(&self.dir)?;
            // The directory must be durable in the partition before files in it can be.
            self.storage
                .sync_dir(self.dir.parent().unwrap_or(Path::new("")))?;
        }
        Ok(())
    }

    /// Replaces the file at `path` with a file of two slots, `record` in the first: written and
    /// synced under a temporary name, renamed over, the directory synced.
    fn replace(&self, path: &Path, record: &ConsumerOffset) -> Result<(), OffsetError> {
        let mut bytes = [0u8; FILE_SIZE];
        bytes[..RECORD_SIZE].copy_from_slice(&encode(record));
        let mut temp = path.as_os_str().to_owned();
        temp.push(TEMP_SUFFIX);
        let temp = PathBuf::from(temp);
        let file = self.storage.open(&temp, OpenMode::Create)?;
        file.set_len(0)?;
        // The new bytes are durable before the rename can expose them.
        file.write_all_and_sync_data(0, &bytes)?;
        drop(file);
        self.storage.rename(&temp, path)?;
        // The rename is the commit: durable before the caller may rely on the offset.
        self.storage.sync_dir(&self.dir)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        assert_eq!(
            parse_file_name(&file_name(ConsumerKind::Group, 42)),
            Some((ConsumerKind::Group, 42))
        );
        assert_eq!(parse_file_name("consumer.12"), None);
        assert_eq!(parse_file_name("other.0000000001"), None);
    }
}
