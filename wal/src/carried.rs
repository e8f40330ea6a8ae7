//! Boot's side of the carried ring (`crate::ring`): which carried publications it relies on,
//! the entries it verifies through them, and writing those back into the log.
//!
//! The newest valid record newer than both slots is the frontier. It names the last publication
//! that synced the log (`synced_sequence`); the entries of every publication after that one may
//! exist only in the ring, so each of them is read from a valid copy and laid over the log's
//! bytes where the entries belong (`crate::overlay`), and the published prefix is verified
//! through them like any other. A publication whose copies are both unusable leaves its
//! entries to the log: if they are not there, verification refuses with the file and offset.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use iggy_io::{ReadFile, ReadStorage, Storage, WriteFile};

use crate::boot::{Finding, FindingKind, Naming};
use crate::error::WalError;
use crate::frontier::{Frontier, SlotError};
use crate::overlay::Patch;
use crate::ring::{self, Carried};

/// The ring as read: each record (`None`: never written), and which records hold anything.
#[derive(Clone, Debug, Default)]
pub struct Ring {
    pub records: Vec<Option<Result<Carried, SlotError>>>,
    /// Bit `i` set: record `i` holds something (valid or not).
    pub written: u64,
}

/// Reads every record of the ring from the frontier file (holes and a file too short for the
/// ring read as never written).
pub fn read_ring<F: ReadFile>(file: &F) -> iggy_io::Result<Ring> {
    let len = file.len()?;
    let mut ring = Ring::default();
    for record in 0..ring::RECORDS {
        let at = ring::offset(record);
        let end = at + ring::RECORD_SIZE as u64;
        let holds_data =
            at + ring::SECTOR as u64 <= len && file.seek_data(at)?.is_some_and(|data| data < end);
        if !holds_data {
            ring.records.push(None);
            continue;
        }
        let mut first = vec![0u8; ring::SECTOR];
        file.read_exact_at(at, &mut first)?;
        let Some(claimed) = ring::claimed_len(&first) else {
            ring.records.push(None);
            continue;
        };
        ring.written |= 1 << record;
        let available = usize::try_from(len - at).unwrap_or(usize::MAX);
        let mut bytes = first;
        bytes.resize(claimed.min(available), 0);
        if bytes.len() > ring::SECTOR {
            file.read_exact_at(at + ring::SECTOR as u64, &mut bytes[ring::SECTOR..])?;
        }
        ring.records.push(Some(ring::decode(&bytes, record)));
    }
    Ok(ring)
}

/// The ring decoded from the whole frontier file's bytes (what the offline tools hold).
#[must_use]
pub fn decode_ring(bytes: &[u8]) -> Ring {
    let mut ring = Ring::default();
    for record in 0..ring::RECORDS {
        let at = usize::try_from(ring::offset(record)).unwrap_or(usize::MAX);
        let region = bytes.get(at..).unwrap_or(&[]);
        let region = &region[..region.len().min(ring::RECORD_SIZE)];
        let claimed = region.get(..ring::SECTOR).and_then(ring::claimed_len);
        match claimed {
            None => ring.records.push(None),
            Some(_) => {
                ring.written |= 1 << record;
                ring.records.push(Some(ring::decode(region, record)));
            }
        }
    }
    ring
}

/// Boot's frontier given the slots' choice `slot_frontier` and the ring, and the carried
/// publications it relies on (oldest first; empty when the frontier is a slot). Findings name
/// damaged copies and unreadable publications among those.
pub fn choose(
    path: &Path,
    slot_frontier: Frontier,
    ring: &Ring,
    findings: &mut Vec<Finding>,
) -> Result<(Frontier, Vec<Carried>), WalError> {
    for (record, result) in ring.records.iter().enumerate() {
        if let Some(Err(error)) = result
            && error.is_refusal()
        {
            return Err(WalError::CarriedRefused {
                path: path.into(),
                record,
                offset: ring::offset(record),
                error: *error,
            });
        }
    }
    let valid = |record: usize| match ring.records.get(record) {
        Some(Some(Ok(carried))) => Some(carried),
        _ => None,
    };
    let newest = (0..ring::RECORDS)
        .filter_map(valid)
        .filter(|c| c.frontier.sequence > slot_frontier.sequence)
        .max_by_key(|c| c.frontier.sequence);
    let Some(newest) = newest else {
        return Ok((slot_frontier, Vec::new()));
    };
    let (from, to) = (newest.synced_sequence + 1, newest.frontier.sequence);
    if to - newest.synced_sequence > ring::PAIRS as u64 {
        // More unsynced publications than the ring holds: not written by this code.
        let record = ring::records_of(to)[0];
        return Err(WalError::CarriedRefused {
            path: path.into(),
            record,
            offset: ring::offset(record),
            error: SlotError::Inconsistent { sequence: to },
        });
    }
    let mut needed = Vec::new();
    for sequence in from..=to {
        let copies = ring::records_of(sequence);
        let found = copies
            .iter()
            .find_map(|r| valid(*r).filter(|c| c.frontier.sequence == sequence));
        let Some(carried) = found else {
            findings.push(Finding {
                file: path.to_path_buf(),
                offset: ring::offset(copies[0]),
                bytes: 0,
                kind: FindingKind::CarriedPublicationUnreadable { sequence },
            });
            continue;
        };
        for record in copies {
            let error = match ring.records.get(record) {
                Some(Some(Ok(c))) if c == carried => continue,
                Some(Some(Err(error))) => Some(*error),
                _ => None,
            };
            findings.push(Finding {
                file: path.to_path_buf(),
                offset: ring::offset(record),
                bytes: ring::written_len(carried.entries.len()) as u64,
                kind: FindingKind::CarriedCopyDamaged {
                    record,
                    sequence,
                    error,
                },
            });
        }
        needed.push(carried.clone());
    }
    Ok((newest.frontier, needed))
}

/// The entries `carried` puts back: where each publication's entries go (a file the listing
/// `keys` holds; a file dropped since is skipped), the patches to verify through, and a finding
/// for each whose bytes the log does not hold yet.
pub(crate) fn restore<R: ReadStorage>(
    storage: &R,
    dir: &Path,
    naming: Naming,
    keys: &[u64],
    carried: &[Carried],
    findings: &mut Vec<Finding>,
) -> Result<RestorePlan, WalError> {
    let mut restore = Vec::new();
    let mut patches: BTreeMap<PathBuf, Vec<Patch>> = BTreeMap::new();
    for c in carried.iter().filter(|c| !c.entries.is_empty()) {
        if !keys.contains(&c.frontier.head_file_key) {
            continue;
        }
        let path = dir.join(naming.file_name(c.frontier.head_file_key));
        let offset = c.log_offset();
        let file = storage.open_read(&path)?;
        let held = file.len()? >= offset + c.entries.len() as u64 && {
            let mut bytes = vec![0u8; c.entries.len()];
            file.read_exact_at(offset, &mut bytes)?;
            bytes == c.entries
        };
        if !held {
            let entries = carried_entries(&c.entries);
            findings.push(Finding {
                file: path.clone(),
                offset,
                bytes: c.entries.len() as u64,
                kind: FindingKind::CarriedRestored {
                    sequence: c.frontier.sequence,
                    first_op: c.frontier.head_op + 1 - entries,
                    head_op: c.frontier.head_op,
                },
            });
        }
        let bytes: Arc<[u8]> = c.entries.as_slice().into();
        restore.push((path.clone(), offset, Arc::clone(&bytes)));
        patches
            .entry(path)
            .or_default()
            .push(Patch { offset, bytes });
    }
    Ok((restore, patches))
}

/// What [`restore`] plans: the writes, and the patches to read through.
pub(crate) type RestorePlan = (
    Vec<(PathBuf, u64, Arc<[u8]>)>,
    BTreeMap<PathBuf, Vec<Patch>>,
);

/// How many entries `bytes` (whole entries back to back, as a record carries them) holds.
#[must_use]
pub fn carried_entries(bytes: &[u8]) -> u64 {
    let mut count = 0;
    let mut at = 0usize;
    while at + iggy_format::constants::HEADER_SIZE <= bytes.len() {
        let size = iggy_format::le::u32_at(bytes, at + iggy_format::header::SIZE_OFFSET)
            .unwrap_or_default();
        let size = usize::try_from(size).unwrap_or(usize::MAX);
        if size < iggy_format::constants::HEADER_SIZE {
            break;
        }
        at = at.saturating_add(size);
        count += 1;
    }
    count
}

/// Writes the carried entries boot relies on back into the log and syncs each file written, so
/// the log holds them durably before anything else happens (every boot that relies on the ring:
/// the log's copy may be in a crashed process's page cache only). Unsynced when `sync` is off:
/// the caller syncs the file system before the log is used (`Config::defer_boot_syncs`).
pub(crate) fn write_back<S: Storage>(
    storage: &S,
    analysis: &crate::boot::Analysis,
    sync: bool,
) -> Result<(), WalError> {
    let mut written: Vec<&Path> = Vec::new();
    let mut files = Vec::new();
    for (path, offset, bytes) in &analysis.report.carried {
        let file = storage.open(path, iggy_io::OpenMode::Existing)?;
        file.write_all_at(*offset, bytes)?;
        if !written.contains(&path.as_path()) {
            written.push(path);
            files.push(file);
        }
    }
    if sync {
        for file in files {
            file.sync_data()?;
        }
    }
    Ok(())
}
