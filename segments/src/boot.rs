//! A partition's boot analysis, shared by [`check`] (read-only) and `Partition::open`: the staged
//! install's state, the superblock, the WAL's plan, every trusted entry of every segment (its
//! kind, and for batches partition, naming and offset continuity), the sparse indexes, the
//! leftovers, the consumer offsets, the committed consumer offset stores not applied yet, the
//! commit point (the superblock's, raised to what the prepares read prove) and the committed
//! client sessions.
//! The analysis is complete before anything is changed; [`apply`] then carries out the
//! partition's own findings.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use iggy_format::Header;
use iggy_format::batch::BATCH_HEADER_SIZE;
use iggy_format::checksum::Checksum;
use iggy_format::constants::HEADER_SIZE;
use iggy_io::{EntryKind, ErrorKind, OpenMode, ReadFile, ReadStorage, Storage, WriteFile};
use iggy_superblock::{self as superblock, Opened};
use iggy_wal::{self as wal, FileInfo, Mode, Naming};

use crate::config::{Config, STAGING_SUFFIX};
use crate::entry::{self, Kind, OffsetEntry};
use crate::error::PartitionError;
use crate::index::{self, IndexEntry, IndexFile};
use crate::install::{self, InstallFinding};
use crate::offsets::{self, ConsumerKind};
use crate::report::{Finding, FindingKind, Report, SegmentInfo};
use crate::sessions::Session;

/// Reads the partition in `dir` and says what boot would find and do, without writing (the
/// storage may be read-only). `Ok(None)`: nothing of the partition exists. When an install did
/// not commit, the partition analysed is the one recovery restores (`.install-backup`).
pub fn check<R: ReadStorage>(
    storage: &R,
    dir: &Path,
    config: &Config,
) -> Result<Option<Report>, PartitionError> {
    Ok(plan(storage, dir, config)?.map(|planned| planned.report))
}

/// What boot decided about a partition before changing anything: the report (every path where
/// it will be once an uncommitted install is rolled back) and the WAL's plan.
pub(crate) struct Planned {
    pub report: Report,
    /// `None`: the WAL does not exist yet; the open creates it.
    pub wal: Option<wal::boot::Plan>,
}

/// The one analysis of a partition, shared by [`check`] and `Partition::open`: read-only, and
/// complete before the open changes anything, so a partition boot refuses is left as it was.
pub(crate) fn plan<R: ReadStorage>(
    storage: &R,
    dir: &Path,
    config: &Config,
) -> Result<Option<Planned>, PartitionError> {
    let install_findings = install::plan(storage, dir)?;
    let live = match install_findings
        .iter()
        .find(|f| f.kind == FindingKind::Install(InstallFinding::Uncommitted))
    {
        Some(_) => dir.join(install::BACKUP_DIR),
        None => dir.to_path_buf(),
    };
    let (record, superblock_repairs) = match superblock::read(storage, &live, &config.identity)? {
        Opened::Fresh => return Ok(None),
        Opened::Present {
            record, repairs, ..
        } => (record, repairs),
    };
    let superblock_temp = superblock_temp_finding(storage, &live)?;
    let mut wal_plan =
        wal::boot::plan_verifying(storage, &live, config.group, Naming::ByKey, config.verify)?;
    let wal_report = match &wal_plan {
        Some(plan) => plan.report().clone(),
        None => fresh_wal_report(&live, config, wal::boot::creation_findings(storage, &live)?),
    };
    // The segments are read as the WAL's boot will leave them (carried entries written back).
    let reading = wal_report.reading(storage);
    let mut report = analyze(&reading, &live, config, wal_report.clone(), &record.state)?;
    report.superblock_repairs = superblock_repairs;
    report.findings.extend(superblock_temp);
    if live != dir {
        // Name the files where they will be once recovery restored them.
        rebase_report(&mut report, &live, dir);
        if let Some(plan) = &mut wal_plan {
            plan.rebase(&live, dir);
        }
    }
    report.findings.splice(0..0, install_findings);
    report.dir = dir.to_path_buf();
    Ok(Some(Planned {
        report,
        wal: wal_plan,
    }))
}

/// Moves every path of `report` under `from` to the same place under `to`.
fn rebase_report(report: &mut Report, from: &Path, to: &Path) {
    let rebase = |path: &mut PathBuf| {
        if let Ok(rest) = path.strip_prefix(from) {
            *path = to.join(rest);
        }
    };
    report.findings.iter_mut().for_each(|f| rebase(&mut f.file));
    report.segments.iter_mut().for_each(|s| rebase(&mut s.path));
    rebase(&mut report.wal.dir);
    report
        .wal
        .findings
        .iter_mut()
        .for_each(|f| rebase(&mut f.file));
    report
        .wal
        .files
        .iter_mut()
        .for_each(|f| rebase(&mut f.path));
    report.wal.carried.iter_mut().for_each(|c| rebase(&mut c.0));
}

/// The WAL report of a partition whose WAL does not exist yet: `findings` say what creating it
/// does (empty for a partition being created now).
pub(crate) fn fresh_wal_report(
    dir: &Path,
    config: &Config,
    findings: Vec<wal::Finding>,
) -> wal::Report {
    wal::Report {
        dir: dir.to_path_buf(),
        group: config.group,
        incarnation: config.incarnation,
        first_op: 1,
        head_op: 0,
        durable_bytes: 0,
        discarded_bytes: 0,
        sealed_bytes: 0,
        findings,
        files: Vec::new(),
        sealed: Vec::new(),
        carried: Vec::new(),
        spares: Vec::new(),
    }
}

/// The finding for a leftover `superblock.tmp` in `dir`, if there is one (the superblock's open
/// removes it).
pub(crate) fn superblock_temp_finding<R: ReadStorage>(
    storage: &R,
    dir: &Path,
) -> Result<Option<Finding>, PartitionError> {
    Ok(
        superblock::leftover_temp(storage, dir)?.map(|file| Finding {
            file,
            kind: FindingKind::SuperblockTemp,
        }),
    )
}

/// What the segments of a log record beyond their batches, in log order: the consumer offset
/// stores and client sessions (every one of a segment read entry by entry, a summary's newest
/// of each), and the highest commit point a read prepare names. Split at the commit point once
/// every segment is known.
#[derive(Default)]
pub(crate) struct Stores {
    stores: Vec<OffsetEntry>,
    sessions: Vec<Session>,
    /// The highest `commit` among the prepares read: every op up to it is committed (the
    /// prepare's primary had committed it, and the hash chain makes this log's prefix that
    /// primary's).
    proven_commit: u64,
}

impl Stores {
    fn add(&mut self, store: OffsetEntry) {
        self.stores.push(store);
    }

    fn add_session(&mut self, session: Session) {
        self.sessions.push(session);
    }

    /// The newest committed store of each consumer (`(offset, op)`), and every store past
    /// `commit`, oldest first.
    #[allow(clippy::type_complexity, reason = "the two halves of one split")]
    fn split(&self, commit: u64) -> (BTreeMap<(ConsumerKind, u32), (u64, u64)>, Vec<OffsetEntry>) {
        let mut committed = BTreeMap::new();
        let mut uncommitted = Vec::new();
        for store in &self.stores {
            if store.op <= commit {
                let slot = committed
                    .entry((store.kind, store.id))
                    .or_insert((store.offset, store.op));
                if slot.1 <= store.op {
                    *slot = (store.offset, store.op);
                }
            } else {
                uncommitted.push(*store);
            }
        }
        uncommitted.sort_by_key(|s| s.op);
        (committed, uncommitted)
    }
}

/// Verifies the segments the WAL trusts and derives the rest of the report. `vsr` is the
/// superblock's state: its offset frontier bounds the log from below, and its commit point says
/// which consumer offset stores are committed.
pub(crate) fn analyze<R: ReadStorage>(
    storage: &R,
    dir: &Path,
    config: &Config,
    wal_report: wal::Report,
    vsr: &superblock::VsrState,
) -> Result<Report, PartitionError> {
    let mut findings = Vec::new();
    let mut segments: Vec<SegmentInfo> = Vec::new();
    let mut stores = Stores::default();
    // Segments taken from their summaries, by index: checked against the commit point below.
    let mut summarized_at = Vec::new();
    let count = wal_report.files.len();
    for (i, file) in wal_report.files.iter().enumerate() {
        let expected = segments.last().map(|s| s.next_offset);
        let sealed = wal_report.sealed.get(i).copied().flatten();
        let summarized = match sealed {
            Some(last) if config.verify == wal::boot::Verify::Sealed => {
                summarized_segment(storage, dir, file, config, expected, last)?
            }
            _ => None,
        };
        let segment = if let Some(segment) = summarized {
            // Taken from its index file's summary: the file agrees with the log by the checks
            // made, so there is nothing to rebuild.
            summarized_at.push(i);
            segment
        } else {
            read_segment(
                storage,
                dir,
                file,
                config,
                expected,
                &mut stores,
                &mut findings,
            )?
        };
        if segment.entries == 0 && i + 1 < count {
            return Err(PartitionError::EmptySegment {
                file: file.path.clone(),
            });
        }
        segments.push(segment);
    }
    // The commit point: the superblock's, or what a prepare read proves (the head segment is
    // always read, and its prepares name their primaries' commit points), within the log.
    let head_op = wal_report.head_op;
    let proven = if config.commit_from_log {
        stores.proven_commit
    } else {
        0
    };
    let commit = vsr.commit_max.max(proven).min(head_op);
    for i in summarized_at {
        let segment = &segments[i];
        let past_commit = segment.stores.iter().any(|s| s.op > commit)
            || segment.sessions.iter().any(|s| s.op > commit);
        if past_commit {
            // A summary keeps each consumer's and client's newest only, and that one is not
            // committed: which of the segment's earlier ones are cannot be told without it.
            let expected = i.checked_sub(1).map(|p| segments[p].next_offset);
            let file = &wal_report.files[i];
            segments[i] = read_segment(
                storage,
                dir,
                file,
                config,
                expected,
                &mut stores,
                &mut findings,
            )?;
        } else {
            for store in &segment.stores {
                stores.add(*store);
            }
            for session in &segment.sessions {
                stores.add_session(*session);
            }
        }
    }
    if storage.exists(dir)? {
        for entry in storage.list_dir(dir)? {
            let name = entry.name.to_string_lossy();
            let path = dir.join(&*name);
            let staged_file = entry.kind == EntryKind::File && name.ends_with(STAGING_SUFFIX);
            let staged_offsets =
                entry.kind == EntryKind::Dir && name == crate::install::OFFSETS_STAGING_DIR;
            if staged_file || staged_offsets {
                findings.push(Finding {
                    file: path,
                    kind: FindingKind::StagingLeftover,
                });
            } else if let Some(start) = index::parse_file_name(&name)
                && !segments.iter().any(|s| s.start_offset == start)
            {
                findings.push(Finding {
                    file: path,
                    kind: FindingKind::OrphanIndex,
                });
            }
        }
    }
    let offsets_dir = dir.join(offsets::DIR_NAME);
    let offsets_scan = offsets::scan(storage, &offsets_dir)?;
    if let Some(damaged) = offsets_scan.damaged.into_iter().next() {
        return Err(damaged.into());
    }
    for leftover in offsets_scan.leftovers {
        findings.push(Finding {
            file: leftover,
            kind: FindingKind::OffsetsLeftover,
        });
    }
    for damaged in offsets_scan.damaged_slots {
        findings.push(Finding {
            file: damaged.file,
            kind: FindingKind::OffsetSlotDamaged {
                slot: damaged.slot,
                reason: damaged.reason,
                kept: damaged.kept,
            },
        });
    }
    // Committed stores whose file is older: a crash between the commit and the store.
    let (committed_stores, uncommitted_offsets) = stores.split(commit);
    for ((kind, id), (offset, op)) in committed_stores {
        let stored = offsets_scan
            .offsets
            .iter()
            .find(|o| o.kind == kind && o.id == id);
        if stored.is_none_or(|stored| stored.op < op) {
            findings.push(Finding {
                file: offsets_dir.join(offsets::file_name(kind, id)),
                kind: FindingKind::OffsetNotApplied {
                    kind,
                    id,
                    offset,
                    op,
                },
            });
        }
    }
    let derived = segments.last().map_or(0, |s| s.next_offset);
    if derived < vsr.offset_frontier {
        return Err(PartitionError::BehindOffsetFrontier {
            dir: dir.to_path_buf(),
            log_end: derived,
            offset_frontier: vsr.offset_frontier,
        });
    }
    Ok(Report {
        dir: dir.to_path_buf(),
        superblock_repairs: Vec::new(),
        wal: wal_report,
        findings,
        segments,
        next_offset: derived,
        offsets: offsets_scan.offsets,
        uncommitted_offsets,
        commit,
        sessions: crate::sessions::committed(stores.sessions.iter().copied(), commit),
    })
}

/// Reads `file` entry by entry (or, for a partition whose creation stopped before its first file
/// was made, takes it as empty), recording its stores and sessions in `stores`, and reports an
/// index file that disagrees with it.
fn read_segment<R: ReadStorage>(
    storage: &R,
    dir: &Path,
    file: &FileInfo,
    config: &Config,
    expected: Option<u64>,
    stores: &mut Stores,
    findings: &mut Vec<Finding>,
) -> Result<SegmentInfo, PartitionError> {
    let segment = if storage.exists(&file.path)? {
        let reader = storage.open_read(&file.path)?;
        scan_segment(&reader, file, config, expected, stores)?
    } else {
        // The first file of a partition whose creation stopped before it was made.
        empty_segment(file, expected.unwrap_or(file.key))
    };
    let index_path = dir.join(index::file_name(segment.start_offset));
    if let Some(reason) = index_disagreement(storage, &index_path, &segment, config)? {
        findings.push(Finding {
            file: index_path,
            kind: FindingKind::IndexRebuild { reason },
        });
    }
    Ok(segment)
}

/// A segment with no entries (yet): named `file.key`, its offsets starting at `next_offset`.
pub(crate) fn empty_segment(file: &FileInfo, next_offset: u64) -> SegmentInfo {
    SegmentInfo {
        path: file.path.clone(),
        start_offset: file.key,
        next_offset,
        first_op: file.first_op,
        entries: 0,
        batches: 0,
        bytes: 0,
        min_timestamp: 0,
        max_timestamp: 0,
        index: Vec::new(),
        stores: Vec::new(),
        sessions: Vec::new(),
        last_checksum: None,
    }
}

/// Reads the WAL header and the first bytes of the body of every trusted entry of one segment
/// (their checksums were verified by the WAL's boot) and checks its kind, and for a batch its
/// partition, naming and offset continuity; builds the sparse index on the way and records the
/// consumer offset stores in `stores`.
pub(crate) fn scan_segment<F: ReadFile>(
    reader: &F,
    file: &FileInfo,
    config: &Config,
    expected: Option<u64>,
    stores: &mut Stores,
) -> Result<SegmentInfo, PartitionError> {
    let map = reader.map()?;
    let mut segment = empty_segment(file, expected.unwrap_or(file.key));
    let mut position = 0u64;
    let mut next = expected;
    let mut buffer = [0u8; HEADER_SIZE + BATCH_HEADER_SIZE];
    for _ in 0..file.entries {
        let bytes: &[u8] = match &map {
            Some(map) => {
                let from = usize::try_from(position).unwrap_or(usize::MAX);
                map.get(from..(from + buffer.len()).min(map.len()))
                    .unwrap_or(&[])
            }
            None => {
                let len = (file.end - position).min(buffer.len() as u64);
                let len = usize::try_from(len).unwrap_or(0);
                reader.read_exact_at(position, &mut buffer[..len])?;
                &buffer[..len]
            }
        };
        let header_bytes = bytes.get(..HEADER_SIZE).unwrap_or(&[]);
        let header = Header::decode(header_bytes).map_err(|e| PartitionError::Corrupt {
            file: file.path.clone(),
            offset: position,
            reason: e.to_string(),
        })?;
        segment.last_checksum = header_bytes
            .try_into()
            .ok()
            .map(iggy_format::header::stored_checksum);
        stores.proven_commit = stores.proven_commit.max(header.commit);
        let kind =
            entry::peek(&header, bytes.get(HEADER_SIZE..).unwrap_or(&[])).map_err(|error| {
                match error {
                    entry::EntryError::Batch(error) => PartitionError::BadBatch {
                        file: file.path.clone(),
                        offset: position,
                        error,
                    },
                    entry::EntryError::Invalid(reason) => PartitionError::BadEntry {
                        file: file.path.clone(),
                        offset: position,
                        op: header.op,
                        reason,
                    },
                }
            })?;
        if let Some(session) = Session::of(&header, &kind) {
            stores.add_session(session);
            segment.note_session(session);
        }
        match kind {
            Kind::Messages(batch) => {
                check_batch(&file.path, position, &batch, config, &mut next, &segment)?;
                add_batch(
                    &mut segment,
                    &batch,
                    position,
                    header.op,
                    config.index_interval_bytes,
                );
            }
            Kind::ConsumerOffset { kind, id, offset } => {
                let store = OffsetEntry {
                    op: header.op,
                    kind,
                    id,
                    offset,
                };
                stores.add(store);
                segment.note_store(store);
            }
            Kind::Noop => {}
        }
        segment.entries += 1;
        position += u64::from(header.size);
    }
    segment.bytes = position;
    if segment.batches == 0
        && let Some(expected) = expected
        && expected != file.key
    {
        return Err(PartitionError::NameMismatch {
            file: file.path.clone(),
            key: file.key,
            found: expected,
        });
    }
    Ok(segment)
}

/// The continuity checks of one stored batch.
fn check_batch(
    path: &Path,
    position: u64,
    batch: &iggy_format::batch::BatchHeader,
    config: &Config,
    next: &mut Option<u64>,
    segment: &SegmentInfo,
) -> Result<(), PartitionError> {
    if batch.partition_id != config.partition_id {
        return Err(PartitionError::PartitionMismatch {
            file: path.to_path_buf(),
            offset: position,
            expected: config.partition_id,
            found: batch.partition_id,
        });
    }
    if segment.batches == 0 && batch.base_offset != segment.start_offset {
        return Err(PartitionError::NameMismatch {
            file: path.to_path_buf(),
            key: segment.start_offset,
            found: batch.base_offset,
        });
    }
    if let Some(expected) = *next
        && batch.base_offset != expected
    {
        return Err(PartitionError::OffsetGap {
            file: path.to_path_buf(),
            offset: position,
            expected,
            found: batch.base_offset,
        });
    }
    *next = Some(batch.base_offset + u64::from(batch.message_count));
    Ok(())
}

/// Counts the batch `batch` at `position` (entry `op`) in `segment`: its timestamps, next
/// offset and sparse index. The one accounting for appends and for boot's scan, so both derive
/// the same segment from the same log.
pub(crate) fn add_batch(
    segment: &mut SegmentInfo,
    batch: &iggy_format::batch::BatchHeader,
    position: u64,
    op: u64,
    interval: u64,
) {
    if segment.batches == 0 {
        segment.min_timestamp = batch.base_timestamp;
    }
    add_to_index(
        &mut segment.index,
        IndexEntry {
            offset: batch.base_offset,
            timestamp: batch.base_timestamp,
            position,
            op,
        },
        interval,
    );
    segment.batches += 1;
    segment.max_timestamp = segment.max_timestamp.max(batch.base_timestamp);
    segment.next_offset = batch.base_offset + u64::from(batch.message_count);
}

/// Adds `entry` if it is the segment's first or lies `interval` bytes past the last entry.
pub(crate) fn add_to_index(index: &mut Vec<IndexEntry>, entry: IndexEntry, interval: u64) {
    if index
        .last()
        .is_none_or(|last| entry.position >= last.position + interval)
    {
        index.push(entry);
    }
}

/// The segment of `file` as its index file's summary describes it, when boot may take it from
/// there instead of reading the segment (`docs/format.md`, "Segment index"): the WAL took the
/// file from its seal, whose last entry's checksum is `sealed_last`; the summary names that
/// checksum (so it describes exactly the entries the chain commits to), the file's first op,
/// entry count and end, the partition's index interval, a name that continues the previous
/// segment (`expected`) and an index inside the segment. Anything else, or an index file that
/// does not decode (a version 2 file has no sessions): `None`, and the segment is read. Its
/// stores and sessions are checked against the commit point once that is known.
fn summarized_segment<R: ReadStorage>(
    storage: &R,
    dir: &Path,
    file: &FileInfo,
    config: &Config,
    expected: Option<u64>,
    sealed_last: Checksum,
) -> Result<Option<SegmentInfo>, PartitionError> {
    let path = dir.join(index::file_name(file.key));
    let Ok(reader) = storage.open_read(&path) else {
        // Missing, or not a regular file: the segment is read, and its check reports it.
        return Ok(None);
    };
    let len = reader.len()?;
    // No more than a summary of this many entries can take.
    let most = index::HEADER_SIZE as u64
        + file
            .entries
            .saturating_mul((index::ENTRY_SIZE + index::STORE_SIZE + index::SESSION_SIZE) as u64);
    if len > most {
        return Ok(None);
    }
    let mut bytes = vec![0u8; usize::try_from(len).unwrap_or(0)];
    reader.read_exact_at(0, &mut bytes)?;
    let Ok(decoded) = index::decode(&bytes, file.key) else {
        return Ok(None);
    };
    let Some(summary) = decoded.summary else {
        return Ok(None);
    };
    let index_inside = decoded
        .entries
        .windows(2)
        .all(|w| w[0].position < w[1].position)
        && decoded.entries.iter().all(|e| {
            e.position < summary.bytes && e.offset >= file.key && e.offset < summary.next_offset
        })
        && decoded
            .entries
            .first()
            .is_none_or(|first| first.offset == file.key);
    let agrees = summary.last_checksum == sealed_last
        && summary.first_op == file.first_op
        && summary.entries == file.entries
        && summary.bytes == file.end
        && decoded.interval_bytes == config.index_interval_bytes
        && summary.min_timestamp <= summary.max_timestamp
        // A segment is named by the offset it starts at, which continues the previous one.
        && expected.is_none_or(|next| next == file.key)
        && if summary.batches == 0 {
            summary.next_offset == file.key && decoded.entries.is_empty()
        } else {
            summary.next_offset > file.key && !decoded.entries.is_empty()
        }
        && index_inside;
    if !agrees {
        return Ok(None);
    }
    Ok(Some(SegmentInfo {
        path: file.path.clone(),
        start_offset: file.key,
        next_offset: summary.next_offset,
        first_op: file.first_op,
        entries: summary.entries,
        batches: summary.batches,
        bytes: summary.bytes,
        min_timestamp: summary.min_timestamp,
        max_timestamp: summary.max_timestamp,
        index: decoded.entries,
        stores: summary.stores,
        sessions: summary.sessions,
        last_checksum: Some(summary.last_checksum),
    }))
}

/// Why the index file of `segment` cannot be used as it is, if it cannot.
fn index_disagreement<R: ReadStorage>(
    storage: &R,
    path: &Path,
    segment: &SegmentInfo,
    config: &Config,
) -> Result<Option<String>, PartitionError> {
    if !storage.exists(path)? {
        // A segment without batches (a new partition's first) has nothing to index yet.
        return Ok((segment.batches > 0).then(|| "missing".into()));
    }
    let file = match storage.open_read(path) {
        Ok(file) => file,
        // A directory, FIFO or device in its place: never read; boot removes it and writes
        // the index.
        Err(error) if matches!(error.kind, ErrorKind::NotAFile | ErrorKind::IsADirectory) => {
            return Ok(Some(format!("is not usable: {}", error.kind)));
        }
        Err(error) => return Err(error.into()),
    };
    let len = file.len()?;
    let expected_len = index::encoded_len(
        segment.index.len(),
        segment.stores.len(),
        segment.sessions.len(),
    ) as u64;
    // A version 1 file (no summary) has a 64-byte header and no stores; a version 2 one no
    // sessions; a version 3 one shorter sessions.
    let version_1_len = (index::V1_HEADER_SIZE + segment.index.len() * index::ENTRY_SIZE) as u64;
    let version_2_len = index::encoded_len(segment.index.len(), segment.stores.len(), 0) as u64;
    let version_3_len = version_2_len + (segment.sessions.len() * index::V3_SESSION_SIZE) as u64;
    if ![expected_len, version_1_len, version_2_len, version_3_len].contains(&len) {
        return Ok(Some(format!(
            "{len} bytes where the log gives {expected_len}"
        )));
    }
    let mut bytes = vec![0u8; usize::try_from(len).unwrap_or(0)];
    file.read_exact_at(0, &mut bytes)?;
    let summary = index::summary_of(segment);
    Ok(match index::decode(&bytes, segment.start_offset) {
        Err(error) => Some(error.to_string()),
        Ok(file) if file.entries != segment.index => Some("disagrees with the log".into()),
        Ok(file) if file.interval_bytes != config.index_interval_bytes => Some(format!(
            "interval {} where the partition uses {}",
            file.interval_bytes, config.index_interval_bytes
        )),
        Ok(IndexFile {
            summary: None,
            version,
            ..
        }) => Some(match version {
            1 => "version 1 (no summary)".into(),
            2 => "version 2 (no client sessions)".into(),
            _ => format!("version {version} (no request checksums)"),
        }),
        Ok(file) if file.summary.as_ref() != Some(&summary) => {
            Some("its summary disagrees with the log".into())
        }
        Ok(_) => None,
    })
}

/// Writes a segment's index file and summary (derived data: no sync; boot checks it against
/// the log, or, for a sealed segment, against its seal's last checksum).
pub(crate) fn write_index_file<S: Storage>(
    storage: &S,
    dir: &Path,
    info: &SegmentInfo,
    config: &Config,
) -> Result<(), PartitionError> {
    let summary = index::summary_of(info);
    let bytes = index::encode(
        info.start_offset,
        config.index_interval_bytes,
        &info.index,
        &summary,
    );
    let path = dir.join(index::file_name(info.start_offset));
    let file = storage.open(&path, OpenMode::Create)?;
    file.set_len(0)?;
    file.write_all_at(0, &bytes)?;
    Ok(())
}

/// Carries out boot's plan for the partition's own findings (Open and Repair).
pub(crate) fn apply<S: Storage + Clone>(
    storage: &S,
    dir: &Path,
    config: &Config,
    report: &Report,
    mode: Mode,
) -> Result<(), PartitionError> {
    let mut changed = false;
    if mode == Mode::Repair {
        // A repair reports the partition clean when it returns, so that must survive a power
        // loss: an index that verified may be in the page cache only, its name too (written at
        // rotation or close, without a sync, by the process that crashed). Rebuilt ones are
        // synced below; the directory sync at the end makes the names durable.
        for segment in &report.segments {
            let path = dir.join(index::file_name(segment.start_offset));
            let rebuilt = report.findings.iter().any(|f| f.file == path);
            if !rebuilt && storage.exists(&path)? {
                storage.open(&path, OpenMode::Existing)?.sync_data()?;
                changed = true;
            }
        }
    }
    for finding in &report.findings {
        match &finding.kind {
            FindingKind::IndexRebuild { reason } => {
                tracing::info!(file = %finding.file.display(), %reason, "rebuilding segment index");
                let start = report
                    .segments
                    .iter()
                    .find(|s| dir.join(index::file_name(s.start_offset)) == finding.file);
                if let Some(segment) = start {
                    match storage.open(&finding.file, OpenMode::Existing) {
                        Err(e) if e.kind == ErrorKind::IsADirectory => {
                            storage.remove_dir_all(&finding.file)?;
                        }
                        Err(e) if e.kind == ErrorKind::NotAFile => storage.unlink(&finding.file)?,
                        _ => {}
                    }
                    write_index_file(storage, dir, segment, config)?;
                    let file = storage.open(&finding.file, OpenMode::Existing)?;
                    // Durable before boot (or `iggy-fsck --repair`) reports the partition clean:
                    // a power loss right after must not bring the old index back.
                    file.sync_data()?;
                    changed = true;
                }
            }
            FindingKind::SuperblockTemp => {} // removed by the superblock's open
            FindingKind::OffsetNotApplied {
                kind,
                id,
                offset,
                op,
            } => {
                tracing::warn!(file = %finding.file.display(), op, "storing a committed consumer offset");
                // Durable when it returns (the store syncs its file and the directory).
                offsets::OffsetStore::new(storage.clone(), &dir.join(offsets::DIR_NAME))
                    .store_committed(*kind, *id, *offset, *op)?;
            }
            FindingKind::OffsetSlotDamaged { slot, reason, kept } => {
                // Written over as every offset file is settled, below.
                tracing::warn!(
                    file = %finding.file.display(), slot, reason, sequence = kept.sequence,
                    "a consumer offset slot does not verify: writing the good one over it"
                );
            }
            FindingKind::OrphanIndex
            | FindingKind::StagingLeftover
            | FindingKind::OffsetsLeftover => {
                tracing::warn!(file = %finding.file.display(), "removing a leftover file");
                if finding.file.ends_with(crate::install::OFFSETS_STAGING_DIR) {
                    storage.remove_dir_all(&finding.file)?;
                } else {
                    storage.unlink(&finding.file)?;
                }
                changed = true;
            }
            FindingKind::Install(_) => {}
        }
    }
    // After a crash, every offset file's current slot written again and synced before the
    // partition serves it (`OffsetStore::settle`): a store whose sync failed may be in the page
    // cache only. A clean shutdown left no store in doubt (a failed one halts the node): only
    // the files with a damaged slot.
    let mut settle: Vec<(offsets::ConsumerKind, u32)> = report
        .findings
        .iter()
        .filter_map(|f| match &f.kind {
            FindingKind::OffsetSlotDamaged { kept, .. } => Some((kept.kind, kept.id)),
            _ => None,
        })
        .collect();
    if !config.previous_shutdown_clean {
        settle.extend(report.offsets.iter().map(|o| (o.kind, o.id)));
    }
    settle.sort_unstable();
    settle.dedup();
    let store = offsets::OffsetStore::new(storage.clone(), &dir.join(offsets::DIR_NAME));
    for (kind, id) in settle {
        store.settle(kind, id, !config.defer_boot_syncs)?;
    }
    if changed {
        // The sweep (and the names of rebuilt or synced indexes) durable before new files of
        // those names may appear, and before the partition is reported clean.
        storage.sync_dir(dir)?;
        storage.sync_dir(dir.join(offsets::DIR_NAME)).or_else(|e| {
            if storage.exists(dir.join(offsets::DIR_NAME))? {
                Err(e)
            } else {
                Ok(())
            }
        })?;
    }
    Ok(())
}
