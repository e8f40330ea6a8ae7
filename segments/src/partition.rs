//! A partition's message log: batches stored as the bodies of a keyed WAL whose files are the
//! partition's segments `{start_offset:020}.log`, each with a sparse `{start_offset:020}.index`.
//!
//! Invariants:
//! - data is written once: a batch is a WAL entry's body, so the WAL's published frontier is the
//!   partition's durability boundary and boot trusts nothing past it;
//! - offsets are continuous: each batch starts where the previous one ended, across segments,
//!   and a segment is named by its first batch's first offset;
//! - the next offset never goes back across crashes: it is the end of the last trusted batch, and
//!   boot refuses a log that ends below the superblock's `offset_frontier` (raised by retention
//!   before it deletes segments, set by an install to the installed log's end);
//! - retention deletes whole sealed, fully published segments, oldest first (a crash leaves a
//!   shorter prefix, never a hole); the segment being appended to is never deleted;
//! - an `.index` is derived: boot rebuilds every segment's index from its `.log` and rewrites an
//!   index file that is missing or disagrees; an index without its `.log` is removed;
//! - reads return verified batches (WAL header and body checksums) of the published prefix only.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use iggy_format::Header;
use iggy_format::batch::{self, BATCH_HEADER_SIZE, BatchError, BatchHeader};
use iggy_format::constants::HEADER_SIZE;
use iggy_io::{EntryKind, ErrorKind, Mapping, OpenMode, ReadFile, ReadStorage, Storage, WriteFile};
use iggy_superblock::{
    self as superblock, CopyRepair, Identity, Opened, RepairPolicy, Superblock, SuperblockError,
    VsrState,
};
use iggy_wal::{self as wal, FileInfo, Mode, Naming, Wal, WalError};

use crate::index::{self, IndexEntry};
use crate::install::{self, InstallFinding};
use crate::offsets::{self, ConsumerOffset, OffsetError};

/// The suffix of files received for a staged install (swept by boot).
pub const STAGING_SUFFIX: &str = ".staging";

/// How a partition is laid out and bounded.
#[derive(Clone, Debug)]
pub struct Config {
    /// The partition's consensus group (checked against its WAL frontier).
    pub group: u128,
    /// Stamped on every batch and checked at boot.
    pub partition_id: u64,
    /// Checked against the superblock.
    pub identity: Identity,
    pub incarnation: u64,
    /// A segment is rotated once the next batch would not fit (the topic's segment size).
    pub segment_size_bytes: u64,
    /// An index entry at least every this many bytes of log.
    pub index_interval_bytes: u64,
    /// Bytes appended but not published before appends fail with `Backpressure`.
    pub unpublished_bytes_max: u64,
    /// How reads of sealed segments get their bytes.
    pub read_path: ReadPath,
}

impl Config {
    /// Defaults: 1 GiB segments, an index entry every 4 KiB, 64 MiB unpublished, reads through
    /// memory maps of sealed segments.
    #[must_use]
    pub fn new(group: u128, partition_id: u64, identity: Identity) -> Self {
        Self {
            group,
            partition_id,
            identity,
            incarnation: 0,
            segment_size_bytes: 1 << 30,
            index_interval_bytes: 4096,
            unpublished_bytes_max: 64 << 20,
            read_path: ReadPath::Mapped,
        }
    }

    fn wal(&self) -> wal::Config {
        wal::Config {
            incarnation: self.incarnation,
            file_size_bytes: self.segment_size_bytes,
            unpublished_bytes_max: self.unpublished_bytes_max,
            naming: Naming::ByKey,
            ..wal::Config::new(self.group)
        }
    }
}

/// How sealed segments are read (the head segment is always read with `read_at`: it grows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadPath {
    /// `read_at` into a buffer per batch.
    ReadAt,
    /// A read-only memory map per sealed segment, where the storage offers one.
    Mapped,
}

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
    #[error("invalid batch: {0}")]
    Batch(#[from] BatchError),
    #[error("{file}: the batch at byte {offset} is malformed: {error}")]
    BadBatch {
        file: PathBuf,
        offset: u64,
        error: BatchError,
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

/// What boot does about a partition finding (beyond the WAL's own, in [`Report::wal`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Rewrite the segment's index file from its `.log`.
    RebuildIndex,
    /// Remove a file that is no part of the partition (orphan index, staging leftover).
    RemoveFile,
    /// Restore the live files from `.install-backup` (an install that did not commit).
    RollbackInstall,
    /// Remove a finished or abandoned install's directory.
    RemoveInstallDir,
}

/// What boot found in a partition directory, beyond the WAL's findings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FindingKind {
    /// The index file is missing, does not verify, or disagrees with the log.
    IndexRebuild { reason: String },
    /// An index file whose segment is gone (a crash during retention).
    OrphanIndex,
    /// A file (or the `offsets.staging/` directory) left by an install that never committed.
    StagingLeftover,
    /// A `*.tmp` file in `offsets/` left by an interrupted store.
    OffsetsLeftover,
    /// The staged install's state on disk and what recovery does.
    Install(InstallFinding),
    /// A `superblock.tmp` left by a creation whose rename was lost: removed.
    SuperblockTemp,
}

impl FindingKind {
    #[must_use]
    pub fn action(&self) -> Action {
        match self {
            Self::IndexRebuild { .. } => Action::RebuildIndex,
            Self::OrphanIndex
            | Self::StagingLeftover
            | Self::OffsetsLeftover
            | Self::SuperblockTemp => Action::RemoveFile,
            Self::Install(InstallFinding::Uncommitted) => Action::RollbackInstall,
            Self::Install(_) => Action::RemoveInstallDir,
        }
    }
}

/// One finding: the file, and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub file: PathBuf,
    pub kind: FindingKind,
}

/// One segment as boot verified it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentInfo {
    pub path: PathBuf,
    /// The offset of its first message (its name).
    pub start_offset: u64,
    /// One past its last message.
    pub next_offset: u64,
    pub first_op: u64,
    pub batches: u64,
    /// Bytes of trusted entries.
    pub bytes: u64,
    pub min_timestamp: u64,
    pub max_timestamp: u64,
    pub index: Vec<IndexEntry>,
}

/// What boot found and did in a partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    pub dir: PathBuf,
    pub superblock_repairs: Vec<CopyRepair>,
    /// The WAL's report: what it discards past its frontier, adopts or repairs.
    pub wal: wal::Report,
    pub findings: Vec<Finding>,
    pub segments: Vec<SegmentInfo>,
    pub next_offset: u64,
    pub offsets: Vec<ConsumerOffset>,
}

impl Report {
    /// Whether boot changes nothing on disk.
    #[must_use]
    pub fn is_clean(&self) -> bool {
        self.superblock_repairs.is_empty() && self.wal.is_clean() && self.findings.is_empty()
    }
}

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
struct Planned {
    report: Report,
    /// `None`: the WAL does not exist yet; the open creates it.
    wal: Option<wal::boot::Plan>,
}

/// The one analysis of a partition, shared by [`check`] and [`Partition::open`]: read-only, and
/// complete before the open changes anything, so a partition boot refuses is left as it was.
fn plan<R: ReadStorage>(
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
    let mut wal_plan = wal::boot::plan(storage, &live, config.group, Naming::ByKey)?;
    let wal_report = match &wal_plan {
        Some(plan) => plan.report().clone(),
        None => fresh_wal_report(&live, config, wal::boot::creation_findings(storage, &live)?),
    };
    let mut report = analyze(
        storage,
        &live,
        config,
        wal_report,
        record.state.offset_frontier,
    )?;
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
}

/// The WAL report of a partition whose WAL does not exist yet: `findings` say what creating it
/// does (empty for a partition being created now).
fn fresh_wal_report(dir: &Path, config: &Config, findings: Vec<wal::Finding>) -> wal::Report {
    wal::Report {
        dir: dir.to_path_buf(),
        group: config.group,
        incarnation: config.incarnation,
        first_op: 1,
        head_op: 0,
        durable_bytes: 0,
        discarded_bytes: 0,
        findings,
        files: Vec::new(),
    }
}

/// The finding for a leftover `superblock.tmp` in `dir`, if there is one (the superblock's open
/// removes it).
fn superblock_temp_finding<R: ReadStorage>(
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

/// Verifies the segments the WAL trusts and derives the rest of the report.
fn analyze<R: ReadStorage>(
    storage: &R,
    dir: &Path,
    config: &Config,
    wal_report: wal::Report,
    offset_frontier: u64,
) -> Result<Report, PartitionError> {
    let mut findings = Vec::new();
    let mut segments: Vec<SegmentInfo> = Vec::new();
    let count = wal_report.files.len();
    for (i, file) in wal_report.files.iter().enumerate() {
        let expected = segments.last().map(|s| s.next_offset);
        let segment = if storage.exists(&file.path)? {
            let reader = storage.open_read(&file.path)?;
            scan_segment(&reader, file, config, expected)?
        } else {
            // The first file of a partition whose creation stopped before it was made.
            empty_segment(file)
        };
        if segment.batches == 0 && i + 1 < count {
            return Err(PartitionError::EmptySegment {
                file: file.path.clone(),
            });
        }
        let index_path = dir.join(index::file_name(segment.start_offset));
        if let Some(reason) = index_disagreement(storage, &index_path, &segment, config)? {
            findings.push(Finding {
                file: index_path,
                kind: FindingKind::IndexRebuild { reason },
            });
        }
        segments.push(segment);
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
    let offsets_scan = offsets::scan(storage, &dir.join(offsets::DIR_NAME))?;
    if let Some(damaged) = offsets_scan.damaged.into_iter().next() {
        return Err(damaged.into());
    }
    for leftover in offsets_scan.leftovers {
        findings.push(Finding {
            file: leftover,
            kind: FindingKind::OffsetsLeftover,
        });
    }
    let derived = segments.last().map_or(0, |s| s.next_offset);
    if derived < offset_frontier {
        return Err(PartitionError::BehindOffsetFrontier {
            dir: dir.to_path_buf(),
            log_end: derived,
            offset_frontier,
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
    })
}

fn empty_segment(file: &FileInfo) -> SegmentInfo {
    SegmentInfo {
        path: file.path.clone(),
        start_offset: file.key,
        next_offset: file.key,
        first_op: file.first_op,
        batches: 0,
        bytes: 0,
        min_timestamp: 0,
        max_timestamp: 0,
        index: Vec::new(),
    }
}

/// Reads the WAL and batch headers of every trusted entry of one segment (their checksums were
/// verified by the WAL's boot) and checks partition, naming and offset continuity; builds the
/// sparse index on the way.
fn scan_segment<F: ReadFile>(
    reader: &F,
    file: &FileInfo,
    config: &Config,
    expected: Option<u64>,
) -> Result<SegmentInfo, PartitionError> {
    let map = reader.map()?;
    let mut segment = empty_segment(file);
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
        let corrupt = |reason: String| PartitionError::Corrupt {
            file: file.path.clone(),
            offset: position,
            reason,
        };
        let header = Header::decode(bytes.get(..HEADER_SIZE).unwrap_or(&[]))
            .map_err(|e| corrupt(e.to_string()))?;
        let body_len = usize::try_from(header.size).unwrap_or(0) - HEADER_SIZE;
        let batch = batch::peek_header(bytes.get(HEADER_SIZE..).unwrap_or(&[]), body_len).map_err(
            |error| PartitionError::BadBatch {
                file: file.path.clone(),
                offset: position,
                error,
            },
        )?;
        check_batch(&file.path, position, &batch, config, &mut next, &segment)?;
        if segment.batches == 0 {
            segment.min_timestamp = batch.base_timestamp;
        }
        add_to_index(
            &mut segment.index,
            IndexEntry {
                offset: batch.base_offset,
                timestamp: batch.base_timestamp,
                position,
                op: header.op,
            },
            config.index_interval_bytes,
        );
        segment.batches += 1;
        segment.max_timestamp = segment.max_timestamp.max(batch.base_timestamp);
        segment.next_offset = batch.base_offset + u64::from(batch.message_count);
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
    batch: &BatchHeader,
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

/// Adds `entry` if it is the segment's first or lies `interval` bytes past the last entry.
fn add_to_index(index: &mut Vec<IndexEntry>, entry: IndexEntry, interval: u64) {
    if index
        .last()
        .is_none_or(|last| entry.position >= last.position + interval)
    {
        index.push(entry);
    }
}

/// Why the index file of `segment` cannot be used as it is, if it cannot.
fn index_disagreement<R: ReadStorage>(
    storage: &R,
    path: &Path,
    segment: &SegmentInfo,
    config: &Config,
) -> Result<Option<String>, PartitionError> {
    if !storage.exists(path)? {
        // An empty segment (a new partition's first) has nothing to index yet.
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
    let expected_len = (index::HEADER_SIZE + segment.index.len() * index::ENTRY_SIZE) as u64;
    if len != expected_len {
        return Ok(Some(format!(
            "{len} bytes where the log gives {expected_len}"
        )));
    }
    let mut bytes = vec![0u8; usize::try_from(len).unwrap_or(0)];
    file.read_exact_at(0, &mut bytes)?;
    Ok(match index::decode(&bytes, segment.start_offset) {
        Err(error) => Some(error.to_string()),
        Ok(file) if file.entries != segment.index => Some("disagrees with the log".into()),
        Ok(file) if file.interval_bytes != config.index_interval_bytes => Some(format!(
            "interval {} where the partition uses {}",
            file.interval_bytes, config.index_interval_bytes
        )),
        Ok(_) => None,
    })
}

/// One batch read back: verified, the bytes as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredBatch {
    pub op: u64,
    pub header: BatchHeader,
    pub bytes: Vec<u8>,
}

impl StoredBatch {
    /// One past the last message's offset.
    #[must_use]
    pub fn next_offset(&self) -> u64 {
        self.header.base_offset + u64::from(self.header.message_count)
    }
}

/// What an append did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Appended {
    pub op: u64,
    pub base_offset: u64,
    pub message_count: u32,
    pub timestamp: u64,
}

struct Segment<R> {
    info: SegmentInfo,
    /// Opened by the first read, so that an append never fails after the WAL took its batch.
    reader: Option<Arc<R>>,
    map: Option<Arc<Mapping>>,
}

impl<R> Segment<R> {
    fn new(info: SegmentInfo) -> Self {
        Self {
            info,
            reader: None,
            map: None,
        }
    }
}

struct State<R> {
    segments: Vec<Segment<R>>,
    next_offset: u64,
    last_timestamp: u64,
}

/// An open partition.
pub struct Partition<S: Storage + Clone> {
    storage: S,
    dir: PathBuf,
    config: Config,
    wal: Wal<S>,
    superblock: Mutex<Superblock<S>>,
    state: Mutex<State<S::Reader>>,
}

impl<S: Storage + Clone> std::fmt::Debug for Partition<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Partition")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl<S: Storage + Clone> Partition<S> {
    /// Creates an empty partition in `dir`: the superblock first (its rename is the moment the
    /// partition exists), then the WAL, whose first segment is `00000000000000000000.log`.
    pub fn create(storage: S, dir: &Path, config: Config) -> Result<Self, PartitionError> {
        if storage.exists(dir)? && !storage.list_dir(dir)?.is_empty() {
            return Err(PartitionError::AlreadyExists {
                dir: dir.to_path_buf(),
            });
        }
        let superblock =
            Superblock::create(storage.clone(), dir, config.identity, VsrState::default())?;
        let wal = Wal::create_keyed(storage.clone(), dir, config.wal(), 1, 0, 0)?;
        let fresh = fresh_wal_report(dir, &config, Vec::new());
        let report = analyze(&storage, dir, &config, fresh, 0)?;
        Ok(Self::from_parts(
            storage, dir, config, wal, superblock, &report,
        ))
    }

    /// Boots the partition in `dir` (`Open` or `Repair`): decides everything first (the
    /// analysis [`check`] runs), then rolls back or finishes a staged install, repairs the
    /// superblock, boots the WAL (discarding what lies past its frontier), rebuilds indexes and
    /// sweeps leftovers. A partition it refuses is left exactly as it was. `Ok(None)`: no
    /// partition (a leftover `superblock.tmp` of an unfinished creation is removed).
    pub fn open(
        storage: S,
        dir: &Path,
        config: Config,
        mode: Mode,
    ) -> Result<Option<(Self, Report)>, PartitionError> {
        assert!(mode != Mode::Check, "Check mode is `check()`");
        let Some(planned) = plan(&storage, dir, &config)? else {
            Superblock::open(storage.clone(), dir, &config.identity, RepairPolicy::Repair)?;
            return Ok(None);
        };
        let report = planned.report;
        install::recover(&storage, dir)?;
        let (superblock, superblock_repairs) =
            Superblock::open(storage.clone(), dir, &config.identity, RepairPolicy::Repair)?
                .ok_or_else(|| PartitionError::StateChanged {
                    dir: dir.to_path_buf(),
                })?;
        if superblock_repairs != report.superblock_repairs {
            // The plan decided them; a difference means another writer despite the node lock.
            return Err(PartitionError::StateChanged {
                dir: dir.to_path_buf(),
            });
        }
        let wal = match planned.wal {
            Some(plan) => Wal::open_planned(storage.clone(), dir, config.wal(), plan)?.0,
            // Creation stopped after the superblock: finish it.
            None => Wal::create_keyed(storage.clone(), dir, config.wal(), 1, 0, 0)?,
        };
        apply(&storage, dir, &config, &report, mode)?;
        let partition = Self::from_parts(storage, dir, config, wal, superblock, &report);
        Ok(Some((partition, report)))
    }

    fn from_parts(
        storage: S,
        dir: &Path,
        config: Config,
        wal: Wal<S>,
        superblock: Superblock<S>,
        report: &Report,
    ) -> Self {
        let segments: Vec<Segment<S::Reader>> =
            report.segments.iter().cloned().map(Segment::new).collect();
        let last_timestamp = report
            .segments
            .iter()
            .map(|s| s.max_timestamp)
            .max()
            .unwrap_or(0);
        let partition = Self {
            storage,
            dir: dir.to_path_buf(),
            config,
            wal,
            superblock: Mutex::new(superblock),
            state: Mutex::new(State {
                segments,
                next_offset: report.next_offset,
                last_timestamp,
            }),
        };
        let mut state = partition.lock();
        if state.segments.is_empty() {
            // A fresh partition: the WAL made its first file.
            for file in partition.wal.files() {
                state.segments.push(Segment::new(empty_segment(&file)));
            }
        }
        drop(state);
        partition
    }

    fn lock(&self) -> MutexGuard<'_, State<S::Reader>> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Validates a client's batch, stamps it with the next offset and `now_us` (kept
    /// non-decreasing), and queues it in the WAL. Durable once published ([`Self::publish`]).
    pub fn append(&self, batch: &mut [u8], now_us: u64) -> Result<Appended, PartitionError> {
        let mut state = self.lock();
        let base_offset = state.next_offset;
        let timestamp = now_us.max(state.last_timestamp);
        let stamped = batch::stamp(batch, self.config.partition_id, base_offset, timestamp)?;
        // The WAL header's clock is in nanoseconds; batch timestamps are microseconds. Appends
        // are serialized by the partition lock, so the op is the head's successor.
        let op =
            self.wal
                .append_body_keyed(batch, 0, timestamp.saturating_mul(1000), base_offset)?;
        let location = self
            .wal
            .locate(op)
            .unwrap_or_else(|| unreachable!("op {op} was just appended"));
        let rotated = state
            .segments
            .last()
            .is_none_or(|s| s.info.start_offset != location.key);
        // From here nothing may fail: the WAL holds the batch, and the offsets must move on.
        if rotated {
            if let Some(sealed) = state.segments.last()
                && let Err(error) = self.write_index(&sealed.info)
            {
                // Derived data: boot rebuilds a missing or partial index from the log.
                tracing::warn!(segment = %sealed.info.path.display(), %error, "segment index not written");
            }
            let path = self.dir.join(Naming::ByKey.file_name(location.key));
            let info = SegmentInfo {
                path,
                start_offset: location.key,
                next_offset: location.key,
                first_op: op,
                batches: 0,
                bytes: 0,
                min_timestamp: timestamp,
                max_timestamp: timestamp,
                index: Vec::new(),
            };
            state.segments.push(Segment::new(info));
        }
        let state = &mut *state;
        let segment = &mut state
            .segments
            .last_mut()
            .unwrap_or_else(|| unreachable!("a head segment"))
            .info;
        if segment.batches == 0 {
            segment.min_timestamp = timestamp;
        }
        add_to_index(
            &mut segment.index,
            IndexEntry {
                offset: base_offset,
                timestamp,
                position: location.offset,
                op,
            },
            self.config.index_interval_bytes,
        );
        segment.batches += 1;
        segment.bytes = location.offset + location.size;
        segment.max_timestamp = timestamp;
        segment.next_offset = base_offset + u64::from(stamped.message_count);
        state.next_offset = segment.next_offset;
        state.last_timestamp = timestamp;
        Ok(Appended {
            op,
            base_offset,
            message_count: stamped.message_count,
            timestamp,
        })
    }

    /// Makes every appended batch durable (one WAL publication; concurrent callers share it).
    pub fn publish(&self) -> Result<(), PartitionError> {
        self.wal.publish()?;
        Ok(())
    }

    /// Returns once the batch at WAL `op` is durable (group commit).
    pub fn wait_published(&self, op: u64) -> Result<(), PartitionError> {
        self.wal.wait_published(op)?;
        Ok(())
    }

    /// The offset the next message gets.
    pub fn next_offset(&self) -> u64 {
        self.lock().next_offset
    }

    /// The segments, oldest first.
    pub fn segments(&self) -> Vec<SegmentInfo> {
        self.lock()
            .segments
            .iter()
            .map(|s| s.info.clone())
            .collect()
    }

    /// The first retained offset.
    pub fn first_offset(&self) -> u64 {
        let state = self.lock();
        state
            .segments
            .first()
            .map_or(state.next_offset, |s| s.info.start_offset)
    }

    /// The published batches holding `offset` and after, up to `max_bytes` of batch bytes (at
    /// least one batch when any is there). Each batch is verified (WAL header and body
    /// checksums) as it is read. An offset before the first retained one reads from the first.
    pub fn read(&self, offset: u64, max_bytes: u64) -> Result<Vec<StoredBatch>, PartitionError> {
        let published_op = self.wal.published().head_op;
        let mut out = Vec::new();
        let mut total = 0u64;
        let mut from = offset;
        loop {
            let Some((reader, map, start)) = self.locate_read(from)? else {
                return Ok(out);
            };
            let before = from;
            let mut position = start.position;
            let mut op = start.op;
            let end = reader.len()?;
            while op <= published_op {
                let Some(stored) = read_entry(&*reader, map.as_deref(), position, op, end)? else {
                    break; // end of this segment
                };
                position += (HEADER_SIZE + stored.bytes.len()) as u64;
                op += 1;
                if stored.next_offset() <= from {
                    continue;
                }
                total += stored.bytes.len() as u64;
                from = stored.next_offset();
                out.push(stored);
                if total >= max_bytes {
                    return Ok(out);
                }
            }
            if op > published_op || from == before {
                // Past the published head, or a segment that gave nothing new.
                return Ok(out);
            }
        }
    }

    /// The reader, mapping (sealed segments, when `ReadPath::Mapped`) and starting index entry
    /// for reading `offset`. `None` when nothing is stored at or after it.
    #[allow(
        clippy::type_complexity,
        reason = "a private triple, named at its one use"
    )]
    fn locate_read(
        &self,
        offset: u64,
    ) -> Result<Option<(Arc<S::Reader>, Option<Arc<Mapping>>, IndexEntry)>, PartitionError> {
        let mut state = self.lock();
        if offset >= state.next_offset {
            return Ok(None);
        }
        let count = state.segments.len();
        let index = state
            .segments
            .partition_point(|s| s.info.start_offset <= offset)
            .saturating_sub(1);
        let sealed = index + 1 < count;
        let mapped = self.config.read_path == ReadPath::Mapped;
        let segment = &mut state.segments[index];
        let Some(start) = segment
            .info
            .index
            .get(
                segment
                    .info
                    .index
                    .partition_point(|e| e.offset <= offset)
                    .saturating_sub(1),
            )
            .copied()
        else {
            return Ok(None);
        };
        let reader = match &segment.reader {
            Some(reader) => Arc::clone(reader),
            None => {
                let reader = Arc::new(self.storage.open_read(&segment.info.path)?);
                segment.reader = Some(Arc::clone(&reader));
                reader
            }
        };
        if sealed && mapped && segment.map.is_none() {
            segment.map = reader.map()?.map(Arc::new);
        }
        let map = if sealed { segment.map.clone() } else { None };
        Ok(Some((reader, map, start)))
    }

    /// The offset of the first message whose timestamp is at or after `timestamp` (published
    /// batches only); `None` if every message is older.
    pub fn find_by_timestamp(&self, timestamp: u64) -> Result<Option<u64>, PartitionError> {
        let start = {
            let state = self.lock();
            let Some(segment) = state
                .segments
                .iter()
                .find(|s| s.info.batches > 0 && s.info.max_timestamp >= timestamp)
            else {
                return Ok(None);
            };
            let index = &segment.info.index;
            let at = index
                .partition_point(|e| e.timestamp < timestamp)
                .saturating_sub(1);
            index.get(at).map(|e| e.offset)
        };
        let Some(mut from) = start else {
            return Ok(None);
        };
        loop {
            let batches = self.read(from, 1 << 20)?;
            if batches.is_empty() {
                return Ok(None);
            }
            for stored in &batches {
                let decoded = batch::decode(&stored.bytes)?;
                for message in decoded.messages() {
                    let at = stored.header.base_timestamp + u64::from(message.timestamp_delta);
                    if at >= timestamp {
                        return Ok(Some(
                            stored.header.base_offset + u64::from(message.offset_delta),
                        ));
                    }
                }
                from = stored.next_offset();
            }
        }
    }

    /// Deletes whole sealed, published segments from the oldest: those whose newest batch is
    /// older than `max_age_us` before `now_us`, and then as many as it takes to bring the
    /// partition's bytes to `max_bytes` or below. Returns how many were deleted. The superblock's
    /// offset frontier is raised past them first, so the next offset cannot go back.
    pub fn apply_retention(
        &self,
        now_us: u64,
        max_age_us: Option<u64>,
        max_bytes: Option<u64>,
    ) -> Result<usize, PartitionError> {
        let published = self.wal.published();
        let mut state = self.lock();
        let mut total: u64 = state.segments.iter().map(|s| s.info.bytes).sum();
        let mut count = 0;
        for segment in &state.segments[..state.segments.len().saturating_sub(1)] {
            let info = &segment.info;
            let last_op = info.first_op + info.batches - 1;
            let expired =
                max_age_us.is_some_and(|age| info.max_timestamp.saturating_add(age) < now_us);
            let oversize = max_bytes.is_some_and(|max| total > max);
            // Only fully published segments, and never the one the frontier names as holding
            // the published head (the WAL keeps that file: see `Wal::drop_prefix`).
            let deletable = last_op <= published.head_op && info.first_op < published.head_file;
            if !deletable || !(expired || oversize) {
                break;
            }
            total -= info.bytes;
            count += 1;
        }
        if count == 0 {
            return Ok(0);
        }
        let last = &state.segments[count - 1].info;
        let frontier = last.next_offset;
        let last_op = last.first_op + last.batches - 1;
        {
            let mut superblock = self
                .superblock
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if superblock.state().offset_frontier < frontier {
                let next = VsrState {
                    offset_frontier: frontier,
                    ..*superblock.state()
                };
                // Durable before any segment goes: boot's next offset never falls below it.
                superblock.write(next)?;
            }
        }
        // Only now do the segments leave the partition: a failed superblock write above leaves
        // everything as it was.
        let deleted: Vec<Segment<S::Reader>> = state.segments.drain(..count).collect();
        drop(state);
        let removed = self.wal.drop_prefix(last_op)?;
        // Paired with the rule above: the partition and its WAL delete the same files.
        assert_eq!(
            removed, count,
            "retention and the WAL disagree on what to delete"
        );
        for segment in &deleted {
            let path = self.dir.join(index::file_name(segment.info.start_offset));
            if self.storage.exists(&path)? {
                self.storage.unlink(&path)?;
            }
        }
        // The index removals durable (an orphan index is harmless: boot removes it).
        self.storage.sync_dir(&self.dir)?;
        Ok(count)
    }

    /// Writes a segment's index file (derived data: no sync; boot checks it against the log).
    fn write_index(&self, info: &SegmentInfo) -> Result<(), PartitionError> {
        write_index_file(&self.storage, &self.dir, info, &self.config)
    }

    /// Clean shutdown: publishes what was appended and writes the head segment's index.
    pub fn close(self) -> Result<(), PartitionError> {
        self.publish()?;
        let state = self.lock();
        if let Some(head) = state.segments.last() {
            self.write_index(&head.info)?;
        }
        Ok(())
    }

    /// The consumer offsets of this partition.
    pub fn offsets(&self) -> offsets::OffsetStore<S> {
        offsets::OffsetStore::new(self.storage.clone(), &self.dir.join(offsets::DIR_NAME))
    }

    /// The WAL under the partition.
    pub fn wal(&self) -> &Wal<S> {
        &self.wal
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

fn write_index_file<S: Storage>(
    storage: &S,
    dir: &Path,
    info: &SegmentInfo,
    config: &Config,
) -> Result<(), PartitionError> {
    let bytes = index::encode(info.start_offset, config.index_interval_bytes, &info.index);
    let path = dir.join(index::file_name(info.start_offset));
    let file = storage.open(&path, OpenMode::Create)?;
    file.set_len(0)?;
    file.write_all_at(0, &bytes)?;
    Ok(())
}

/// Carries out boot's plan for the partition's own findings (Open and Repair).
fn apply<S: Storage>(
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

/// Reads and verifies the entry at `position` of a segment, expected to be `op`. `None` at the
/// segment's end (zeros or the end of file).
fn read_entry<F: ReadFile>(
    reader: &F,
    map: Option<&Mapping>,
    position: u64,
    op: u64,
    end: u64,
) -> Result<Option<StoredBatch>, PartitionError> {
    if position + HEADER_SIZE as u64 > end {
        return Ok(None);
    }
    let corrupt = |reason: String| PartitionError::Corrupt {
        file: reader.path().to_path_buf(),
        offset: position,
        reason,
    };
    let mut header_bytes = [0u8; HEADER_SIZE];
    let from = usize::try_from(position).unwrap_or(usize::MAX);
    match map {
        Some(map) if from + HEADER_SIZE <= map.len() => {
            header_bytes.copy_from_slice(&map[from..from + HEADER_SIZE]);
        }
        _ => reader.read_exact_at(position, &mut header_bytes)?,
    }
    if header_bytes.iter().all(|b| *b == 0) {
        return Ok(None);
    }
    let header = Header::decode(&header_bytes).map_err(|e| corrupt(e.to_string()))?;
    if header.op != op {
        return Err(corrupt(format!("op {} where {op} was expected", header.op)));
    }
    let body_len = usize::try_from(header.size).unwrap_or(0) - HEADER_SIZE;
    let body_from = from + HEADER_SIZE;
    let body = match map {
        Some(map) if body_from + body_len <= map.len() => {
            map[body_from..body_from + body_len].to_vec()
        }
        _ => {
            let mut body = vec![0u8; body_len];
            reader.read_exact_at(position + HEADER_SIZE as u64, &mut body)?;
            body
        }
    };
    if !header.body_matches(&body) {
        return Err(corrupt("body checksum mismatch".into()));
    }
    let batch =
        batch::peek_header(&body, body.len()).map_err(|error| PartitionError::BadBatch {
            file: reader.path().to_path_buf(),
            offset: position,
            error,
        })?;
    Ok(Some(StoredBatch {
        op,
        header: batch,
        bytes: body,
    }))
}
