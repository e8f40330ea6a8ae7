//! Boot: what on disk the log may trust. [`analyze`] reads (it needs only a [`ReadStorage`]) and
//! returns a [`Report`] plus the plan that `Open` and `Repair` then [`apply`]: the same plan, so
//! a `Check` report names exactly what `Open` does.
//!
//! Rules (see `docs/format.md`, "WAL boot"):
//! 1. No directory, or nothing in it but a leftover `frontier.tmp`: fresh.
//! 2. WAL files without a frontier: refuse (`HistoryWithoutFrontier`).
//! 3. The frontier is the valid slot with the higher sequence. Both unusable: refuse.
//! 4. Every retained file up to the frontier's head file must verify as one hash chain, op after
//!    op, file after file, and end exactly at the frontier's head op, offset and checksum. Any
//!    damage there refuses, naming file and offset: it is never truncated away.
//! 5. Everything past the frontier is discarded (zeroed in the head file, later files removed)
//!    and reported, even entries that verify: as far as entries continue the chain, plus the
//!    header's place where they stop (a recycled file holds an earlier use's bytes beyond).
//! 6. If one slot is unreadable, boot cannot tell whether it held the newest publication, so it
//!    adopts the entries past the valid slot's head that verify as a chain, up to zeros or the end
//!    of a file (or on into a later file that starts at the next op), and publishes them anew.
//!    An entry there that does not verify, or a later file with entries the chain does not
//!    reach, refuses: it may be published history.
//! 7. What boot trusts is written again and synced before the log is used (see `apply`).
//! 8. A publication in the carried ring newer than both slots is the frontier; the entries of
//!    the carried publications since the log was last synced are verified as they will lie once
//!    written back into the log, and boot writes them back (see `crate::carried`).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use iggy_format::Header;
use iggy_format::checksum::Checksum;
use iggy_format::constants::HEADER_SIZE;
use iggy_io::{EntryKind, ReadFile, ReadStorage};

pub(crate) use crate::apply::apply;
pub use crate::check_reads::{header_at, read_entries};
use crate::error::WalError;
use crate::frontier::{self, Frontier, SlotError};
use crate::offsets::Offsets;
use crate::retained::Retained;
pub use crate::retained::Verify;
use crate::scan::StopReason;

pub const FRONTIER_FILE: &str = "frontier";
pub const FRONTIER_TEMP_FILE: &str = "frontier.tmp";
pub const EXTENSION: &str = "wal";
/// The extension of a keyed log's files (a partition's segments).
pub const KEYED_EXTENSION: &str = "log";
/// A seal's extensions (`crate::seal`): the sealed file's name plus `.seal`.
pub const SEALED_EXTENSION: &str = "wal.seal";
pub const KEYED_SEALED_EXTENSION: &str = "log.seal";
/// The extension of a spare (a retired file kept for reuse: `Config::spare_files`), in either
/// naming.
pub const SPARE_EXTENSION: &str = "spare";
const _: () = assert!(SEALED_EXTENSION.len() == EXTENSION.len() + crate::seal::SUFFIX.len());

/// How a log names its files: `{key:020}.{extension}`, where the key is monotonic across files.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Naming {
    /// `{first_op:020}.wal`: the key is the file's first op (a consensus group's log).
    #[default]
    ByOp,
    /// `{key:020}.log`: the appender supplies each file's key (a partition names a segment by the
    /// offset of its first message). Boot learns a file's first op from its first header, or
    /// from the frontier for the head file. Files of other names in the directory belong to the
    /// caller and are not reported.
    ByKey,
}

impl Naming {
    #[must_use]
    pub fn extension(self) -> &'static str {
        match self {
            Self::ByOp => EXTENSION,
            Self::ByKey => KEYED_EXTENSION,
        }
    }

    /// The name of the file keyed `key`.
    #[must_use]
    pub fn file_name(self, key: u64) -> String {
        format!("{key:020}.{}", self.extension())
    }

    /// The key in a file name of this naming, if it is one.
    #[must_use]
    pub fn parse(self, name: &OsStr) -> Option<u64> {
        parse_numbered(name, self.extension())
    }
}

/// The number in a name `{n:020}.{extension}`, if `name` is one (a log file's, a spare's).
pub(crate) fn parse_numbered(name: &OsStr, extension: &str) -> Option<u64> {
    let digits = name.to_str()?.strip_suffix(extension)?.strip_suffix('.')?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// The file name of the WAL file whose first entry is `first_op`.
#[must_use]
pub fn file_name(first_op: u64) -> String {
    Naming::ByOp.file_name(first_op)
}

/// The first op named by a WAL file name, if it is one.
#[must_use]
pub fn parse_file_name(name: &OsStr) -> Option<u64> {
    Naming::ByOp.parse(name)
}

/// How boot treats what it finds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// What a server runs: apply the plan, then serve.
    Open,
    /// Report only; change nothing (works on a read-only storage).
    Check,
    /// Apply the plan, then stop.
    Repair,
}

/// What boot does about a finding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    None,
    /// Zero the unpublished bytes past the frontier.
    DiscardUnpublished,
    /// Remove a file that lies wholly past the frontier (or a leftover temp file).
    RemoveFile,
    /// Rewrite the frontier (repairing an unreadable slot).
    RepairFrontier,
    /// Create what a crash left uncreated: the log itself, or its first file.
    Create,
    /// Write carried entries back into the log (they are durable in the ring, not in the log).
    RestoreCarried,
}

/// What boot found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FindingKind {
    /// Bytes past the frontier in the head file; `entries` of them verified as a chain.
    UnpublishedTail { entries: u64 },
    /// A whole file past the frontier.
    FileBeyondFrontier { entries: u64 },
    /// One frontier slot is unreadable.
    FrontierSlotDamaged { slot: usize, error: SlotError },
    /// Entries past the valid slot's head adopted because the other slot was unreadable.
    Adopted { entries: u64, head_op: u64 },
    /// A `frontier.tmp` left by an interrupted creation.
    LeftoverTemp,
    /// A file this log does not know; left alone.
    UnknownFile,
    /// The log was never created (no frontier: creation stopped before it); the group's open
    /// creates it.
    NotCreated,
    /// The head file of an empty log is missing (a crash after the frontier named it, before
    /// the file was made durable); open creates it empty.
    MissingHeadFile,
    /// Publication `sequence` carried these entries (ops `first_op..=head_op`) and the log does
    /// not hold them (they were never synced there): boot writes them back.
    CarriedRestored {
        sequence: u64,
        first_op: u64,
        head_op: u64,
    },
    /// One copy of a carried publication boot needs is unusable (`error`), or empty or holding
    /// an older publication (`None`); the other copy is used and boot rewrites both.
    CarriedCopyDamaged {
        record: usize,
        sequence: u64,
        error: Option<SlotError>,
    },
    /// Both copies of carried publication `sequence` are unusable: its entries must be in the
    /// log already (verified with the rest of the published prefix).
    CarriedPublicationUnreadable { sequence: u64 },
    /// A seal beside no file it may describe (its file removed, or the head file or past it,
    /// after a crash or a cut): removed.
    StaleSeal,
    /// A seal whose ends verify but whose entry sizes are not the file's (found only by
    /// `Verify::Everything`, which reads the file): removed by a boot that verifies everything.
    /// A plain boot takes such a seal (its ends verify), so the node's tools say to remove it
    /// by hand.
    SealDisagrees,
}

impl FindingKind {
    #[must_use]
    pub fn action(&self) -> Action {
        match self {
            Self::UnpublishedTail { .. } => Action::DiscardUnpublished,
            Self::FileBeyondFrontier { .. }
            | Self::LeftoverTemp
            | Self::StaleSeal
            | Self::SealDisagrees => Action::RemoveFile,
            Self::FrontierSlotDamaged { .. } | Self::Adopted { .. } => Action::RepairFrontier,
            Self::UnknownFile => Action::None,
            Self::NotCreated | Self::MissingHeadFile => Action::Create,
            Self::CarriedRestored { .. } => Action::RestoreCarried,
            Self::CarriedCopyDamaged { .. } => Action::RepairFrontier,
            Self::CarriedPublicationUnreadable { .. } => Action::None,
        }
    }
}

/// One finding: which file, where, how many bytes, what, and (by its kind) what boot does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub file: PathBuf,
    pub offset: u64,
    pub bytes: u64,
    pub kind: FindingKind,
}

/// What boot found and will do. `Check` returns it; `Open`/`Repair` return it after doing it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    pub dir: PathBuf,
    pub group: u128,
    /// The incarnation of the boot that published the trusted frontier.
    pub incarnation: u64,
    /// The first retained op (after dropped prefixes).
    pub first_op: u64,
    /// The head op boot trusts (the frontier's, or past it after adoption).
    pub head_op: u64,
    /// Bytes of the trusted prefix still on disk.
    pub durable_bytes: u64,
    /// Bytes past the frontier that boot discards.
    pub discarded_bytes: u64,
    /// Bytes of the trusted prefix boot took from seals instead of reading them (files before
    /// the head file; `Verify::Everything` reads them all: 0).
    pub sealed_bytes: u64,
    pub findings: Vec<Finding>,
    /// The files boot keeps and the trusted entries in each, oldest first.
    pub files: Vec<crate::FileInfo>,
    /// For each of `files`: the header checksum of its last entry when boot took the file from
    /// its seal (the seal's checks read that header and found it), `None` when it was read.
    /// A partition takes a sealed segment's summary only when it names this checksum.
    pub sealed: Vec<Option<Checksum>>,
    /// Entries boot relies on from the carried ring, where they go (file, offset, bytes): boot
    /// writes them back, and a reader of this report's files reads through them
    /// ([`read_entries`], [`header_at`]).
    pub carried: Vec<(PathBuf, u64, std::sync::Arc<[u8]>)>,
    /// Retired files kept for reuse (`{n:020}.spare`), by number: not part of the log; the
    /// next file the log needs is one of them, renamed (see `Config::spare_files`).
    pub spares: Vec<PathBuf>,
}

impl Report {
    /// `storage` read as this boot will leave it, with the carried entries it writes back in
    /// place: what a read-only caller (a `Check`, a partition's own boot analysis) reads the
    /// log's files through, so that it sees what `Open` will.
    pub fn reading<'a, R: ReadStorage>(&self, storage: &'a R) -> impl ReadStorage + 'a {
        self.overlay(storage)
    }

    pub(crate) fn overlay<'a, R: ReadStorage>(
        &self,
        storage: &'a R,
    ) -> crate::overlay::Overlay<'a, R> {
        let mut patches: std::collections::BTreeMap<PathBuf, Vec<crate::overlay::Patch>> =
            std::collections::BTreeMap::new();
        for (path, offset, bytes) in &self.carried {
            patches
                .entry(path.clone())
                .or_default()
                .push(crate::overlay::Patch {
                    offset: *offset,
                    bytes: std::sync::Arc::clone(bytes),
                });
        }
        crate::overlay::Overlay::new(storage, patches)
    }
}

impl Report {
    /// Whether boot changes anything on disk.
    #[must_use]
    pub fn is_clean(&self) -> bool {
        self.findings
            .iter()
            .all(|f| f.kind.action() == Action::None)
    }
}

/// A retained WAL file as boot verified it.
#[derive(Clone, Debug)]
pub(crate) struct BootFile {
    pub first_op: u64,
    /// The key in the file's name (its first op for op-named logs).
    pub key: u64,
    pub path: PathBuf,
    /// Offsets of the trusted entries, op `first_op + i` at offset `i` (in memory, or in the
    /// file's seal).
    pub offsets: Offsets,
    /// End of the trusted entries.
    pub end: u64,
    /// The parent the file's first entry names (the chain's head when the file was started).
    pub first_parent: Checksum,
    /// Its last entry's header checksum when its entries were taken from a seal that verified
    /// (it need not be written again); `None` when the file was read.
    pub sealed_last: Option<Checksum>,
}

/// What boot decided about a log before changing anything: the report and the plan behind it
/// ([`plan`]). [`crate::Wal::open_planned`] carries it out; a caller that decides to refuse
/// the group for other reasons drops it, and nothing was changed.
#[derive(Clone, Debug)]
pub struct Plan(pub(crate) Analysis);

impl Plan {
    /// What boot found and will do.
    #[must_use]
    pub fn report(&self) -> &Report {
        &self.0.report
    }

    /// Moves every path of the plan under `from` to the same place under `to`: a plan made on
    /// files that will be at `to` when it is carried out (a partition's staged install is
    /// rolled back between the two).
    pub fn rebase(&mut self, from: &Path, to: &Path) {
        let rebase = |path: &mut PathBuf| {
            if let Ok(rest) = path.strip_prefix(from) {
                *path = to.join(rest);
            }
        };
        let analysis = &mut self.0;
        rebase(&mut analysis.report.dir);
        analysis
            .report
            .findings
            .iter_mut()
            .for_each(|f| rebase(&mut f.file));
        analysis
            .report
            .files
            .iter_mut()
            .for_each(|f| rebase(&mut f.path));
        analysis.files.iter_mut().for_each(|f| rebase(&mut f.path));
        analysis.zero.iter_mut().for_each(|z| rebase(&mut z.0));
        analysis.remove.iter_mut().for_each(rebase);
        analysis
            .adopted_files
            .iter_mut()
            .for_each(|a| rebase(&mut a.0));
        analysis
            .report
            .carried
            .iter_mut()
            .for_each(|c| rebase(&mut c.0));
    }
}

/// Reads the log in `dir` and decides what boot trusts and does, without writing (the storage
/// may be read-only). `Ok(None)`: no log (fresh).
pub fn plan<R: ReadStorage>(
    storage: &R,
    dir: &Path,
    group: u128,
    naming: Naming,
) -> Result<Option<Plan>, WalError> {
    plan_verifying(storage, dir, group, naming, Verify::Sealed)
}

/// [`plan`], reading as much of the retained files as `verify` says.
pub fn plan_verifying<R: ReadStorage>(
    storage: &R,
    dir: &Path,
    group: u128,
    naming: Naming,
    verify: Verify,
) -> Result<Option<Plan>, WalError> {
    Ok(analyze(storage, dir, group, naming, verify)?.map(Plan))
}

/// The full result of the analysis: the report and the plan behind it.
#[derive(Clone, Debug)]
pub(crate) struct Analysis {
    pub report: Report,
    pub frontier: Frontier,
    /// A frontier to write (slot repair or adoption), with the next sequence.
    pub new_frontier: Option<Frontier>,
    pub files: Vec<BootFile>,
    pub head_checksum: Checksum,
    /// Zero `[from, to)` of the file.
    pub zero: Vec<(PathBuf, u64, u64)>,
    pub remove: Vec<PathBuf>,
    /// Files holding adopted entries: synced before the new frontier names them.
    pub adopted_files: Vec<(PathBuf, u64, u64)>,
    /// The carried publications boot relies on: both copies written again.
    pub carried: Vec<crate::ring::Carried>,
    /// Ring records that hold something (bit per record).
    pub ring_written: u64,
}

fn read_frontier<R: ReadStorage>(
    storage: &R,
    path: &Path,
) -> Result<[Result<Frontier, SlotError>; 2], WalError> {
    let file = storage.open_read(path)?;
    let len = file.len()?.min(frontier::FILE_SIZE);
    let mut bytes = vec![0u8; usize::try_from(len).unwrap_or(0)];
    file.read_exact_at(0, &mut bytes)?;
    Ok(frontier::decode_file(&bytes))
}

/// Boot's choice between the two frontier slots of `path`: the newest valid slot, and whether
/// the other needs repair (recorded in `findings`); a slot that verified but may not be used
/// refuses. The offline tools call this too, so they state boot's verdict, not their own.
pub fn choose_frontier(
    path: &Path,
    slots: [Result<Frontier, SlotError>; 2],
    findings: &mut Vec<Finding>,
) -> Result<(Frontier, bool), WalError> {
    for (slot, result) in slots.iter().enumerate() {
        if let Err(error) = result
            && error.is_refusal()
        {
            let offset = (slot * frontier::SLOT_SIZE) as u64;
            return Err(WalError::FrontierRefused {
                path: path.into(),
                slot,
                offset,
                error: *error,
            });
        }
    }
    let damaged = |slot: usize, error: SlotError| Finding {
        file: path.to_path_buf(),
        offset: (slot * frontier::SLOT_SIZE) as u64,
        bytes: frontier::SLOT_SIZE as u64,
        kind: FindingKind::FrontierSlotDamaged { slot, error },
    };
    match slots {
        // Slot = sequence % 2 (checked by decode), so two valid slots never share a sequence.
        [Ok(a), Ok(b)] => Ok((if a.sequence > b.sequence { a } else { b }, false)),
        [Ok(a), Err(error)] => {
            findings.push(damaged(1, error));
            Ok((a, true))
        }
        [Err(error), Ok(b)] => {
            findings.push(damaged(0, error));
            Ok((b, true))
        }
        [Err(slot_0), Err(slot_1)] => Err(WalError::FrontierUnreadable {
            path: path.into(),
            slots: Box::new([slot_0, slot_1]),
        }),
    }
}

/// Reads the log in `dir` and decides what boot trusts and does. `Ok(None)`: fresh.
pub(crate) fn analyze<R: ReadStorage>(
    storage: &R,
    dir: &Path,
    group: u128,
    naming: Naming,
    verify: Verify,
) -> Result<Option<Analysis>, WalError> {
    if !storage.exists(dir)? {
        return Ok(None);
    }
    let mut findings = Vec::new();
    let mut wal_files = Vec::new();
    let mut seal_files = Vec::new();
    let mut spares = Vec::new();
    let mut has_frontier = false;
    for entry in storage.list_dir(dir)? {
        let path = dir.join(&entry.name);
        if entry.name == FRONTIER_FILE && entry.kind == EntryKind::File {
            has_frontier = true;
        } else if entry.name == FRONTIER_TEMP_FILE {
            findings.push(Finding {
                file: path,
                offset: 0,
                bytes: 0,
                kind: FindingKind::LeftoverTemp,
            });
        } else if let Some(key) = naming
            .parse(&entry.name)
            .filter(|_| entry.kind == EntryKind::File)
        {
            wal_files.push((key, path));
        } else if let Some(key) = crate::seal::sealed_name(&entry.name)
            .and_then(|name| naming.parse(name))
            .filter(|_| entry.kind == EntryKind::File)
        {
            seal_files.push((key, path));
        } else if let Some(number) =
            crate::files::parse_spare(&entry.name).filter(|_| entry.kind == EntryKind::File)
        {
            spares.push((number, path));
        } else if naming == Naming::ByOp {
            findings.push(Finding {
                file: path,
                offset: 0,
                bytes: 0,
                kind: FindingKind::UnknownFile,
            });
        }
    }
    wal_files.sort();
    if !has_frontier {
        if wal_files.is_empty() {
            return Ok(None);
        }
        let files = wal_files
            .iter()
            .map(|(_, p)| p.display().to_string())
            .collect();
        return Err(WalError::HistoryWithoutFrontier {
            dir: dir.into(),
            files,
        });
    }
    let frontier_path = dir.join(FRONTIER_FILE);
    let slots = read_frontier(storage, &frontier_path)?;
    let (slot_frontier, fallback) = choose_frontier(&frontier_path, slots, &mut findings)?;
    let ring = crate::carried::read_ring(&storage.open_read(&frontier_path)?)?;
    let (frontier, carried) =
        crate::carried::choose(&frontier_path, slot_frontier, &ring, &mut findings)?;
    if frontier.group != group {
        return Err(WalError::GroupMismatch {
            path: frontier_path,
            expected: group,
            found: frontier.group,
        });
    }

    // Rule 4: the published prefix, file by file.
    let mut files = Vec::new();
    let mut parent: Option<Checksum> = None;
    let mut next_op: Option<u64> = None;
    let head_index = wal_files
        .iter()
        .position(|(key, _)| *key == frontier.head_file_key);
    let retained_count = head_index.map_or(
        wal_files
            .iter()
            .take_while(|(key, _)| *key < frontier.head_file_key)
            .count(),
        |i| i + 1,
    );
    let empty_log = frontier.published_length == 0 && frontier.head_op + 1 == frontier.head_file;
    if head_index.is_none() && !empty_log {
        return Err(WalError::LostPublishedFile {
            file: dir.join(naming.file_name(frontier.head_file_key)),
            head_op: frontier.head_op,
        });
    }
    if head_index.is_none()
        && let Some((_, path)) = wal_files.first().filter(|_| retained_count > 0)
    {
        // An empty log has no history: a file ordered before its head file is not this log's
        // (nor an unpublished tail, which follows the head). Never delete it as one.
        let header = first_header(&storage.open_read(path)?)?.ok();
        return Err(WalError::ForeignFile {
            file: path.clone(),
            first_op: header.map_or(0, |h| h.op),
            group: header.map_or(group, |h| h.group),
            head_op: frontier.head_op,
        });
    }
    let keys: Vec<u64> = wal_files.iter().map(|(key, _)| *key).collect();
    // From here on the log is read as it will be with the carried entries written back.
    let (restore, patches) =
        crate::carried::restore(storage, dir, naming, &keys, &carried, &mut findings)?;
    let storage = &crate::overlay::Overlay::new(storage, patches);
    let wal_files = first_ops(storage, naming, &frontier, wal_files, retained_count)?;
    let retained = &wal_files[..retained_count];
    let until = |index: usize| {
        if Some(index) == head_index {
            frontier.head_op
        } else {
            wal_files
                .get(index + 1)
                .map_or(frontier.head_op, |(next, _)| next - 1)
        }
    };
    if let Some(index) = head_index {
        let path = &wal_files[index].1;
        let len = storage.open_read(path)?.len()?;
        if len < frontier.published_length {
            return Err(WalError::LostPublishedBytes {
                file: path.clone(),
                len,
                published_length: frontier.published_length,
            });
        }
    }
    // Each file is verified as its own chain, in parallel, or taken from its seal; the links
    // between files and every refusal are then checked in file order, so the error named is the
    // first one on disk.
    let sealed_through = head_index.unwrap_or(0);
    let reads = Retained {
        files: retained,
        keys: &keys,
        sealed_through,
        until: &until,
        group,
    };
    let mut disagreeing = Vec::new();
    let (scans, sealed) = reads.read(storage, verify, &mut disagreeing);
    findings.extend(disagreeing.into_iter().map(|file| Finding {
        file,
        offset: 0,
        bytes: 0,
        kind: FindingKind::SealDisagrees,
    }));
    for (index, ((first_op, path), result)) in retained.iter().zip(scans).enumerate() {
        let key = keys[index];
        if let Some(expected) = next_op
            && expected != *first_op
        {
            return Err(WalError::Hole {
                file: path.clone(),
                expected,
                found: *first_op,
            });
        }
        let result = result?;
        let is_head = Some(index) == head_index;
        let clean_end = matches!(result.stop, StopReason::Zeros | StopReason::EndOfFile);
        if !is_head
            && clean_end
            && let Some((next_op, next_path)) = wal_files.get(index + 1)
        {
            // The file ends cleanly before the next file begins: a file in between is missing.
            let expected = *first_op + result.offsets.len();
            return Err(WalError::Hole {
                file: next_path.clone(),
                expected,
                found: *next_op,
            });
        }
        if let (Some(expected), Some(found)) = (parent, result.first_parent)
            && expected != found
        {
            // The link into this file: its first entry must name the previous file's last.
            let reason = StopReason::Parent { op: *first_op };
            return Err(corrupt(path.clone(), 0, reason));
        }
        if result.stop != StopReason::Reached {
            return Err(corrupt(path.clone(), result.end, result.stop));
        }
        let first_parent = result
            .first_parent
            .or(parent)
            .unwrap_or(frontier.head_checksum);
        parent = result.last_checksum.or(parent);
        next_op = Some(until(index) + 1);
        files.push(BootFile {
            first_op: *first_op,
            key,
            path: path.clone(),
            offsets: result.offsets,
            end: result.end,
            first_parent,
            sealed_last: result.last_checksum.filter(|_| sealed[index]),
        });
    }
    if head_index.is_none() {
        // Created, but the first file never made it: an empty log (a missing head file of a
        // non-empty log was refused above); open recreates the file.
        files.push(BootFile {
            first_op: frontier.head_file,
            key: frontier.head_file_key,
            path: dir.join(naming.file_name(frontier.head_file_key)),
            offsets: Offsets::default(),
            end: 0,
            first_parent: frontier.head_checksum,
            sealed_last: None,
        });
    }
    // A seal is kept only beside a file before the head file (one boot may take entries from):
    // any other (its file gone, or the head or past it, after a crash or a cut) is removed.
    for (key, path) in seal_files {
        if !keys[..sealed_through].contains(&key) {
            findings.push(Finding {
                file: path,
                offset: 0,
                bytes: 0,
                kind: FindingKind::StaleSeal,
            });
        }
    }
    let head_file = files
        .last()
        .cloned()
        .unwrap_or_else(|| unreachable!("head file pushed"));
    let head_checksum = parent.unwrap_or(frontier.head_checksum);
    if head_file.end != frontier.published_length || head_checksum != frontier.head_checksum {
        return Err(WalError::HeadMismatch {
            file: head_file.path.clone(),
            head_op: frontier.head_op,
            end: head_file.end,
            published_length: frontier.published_length,
            checksum: head_checksum,
            head_checksum: frontier.head_checksum,
        });
    }
    let mut analysis = Analysis {
        report: Report {
            dir: dir.to_path_buf(),
            group,
            incarnation: frontier.incarnation,
            first_op: files.first().map_or(frontier.head_file, |f| f.first_op),
            head_op: frontier.head_op,
            durable_bytes: 0,
            discarded_bytes: 0,
            sealed_bytes: files
                .iter()
                .filter(|f| f.sealed_last.is_some())
                .map(|f| f.end)
                .sum(),
            findings,
            files: Vec::new(),
            sealed: Vec::new(),
            carried: restore,
            spares: {
                spares.sort();
                spares.into_iter().map(|(_, path)| path).collect()
            },
        },
        frontier,
        new_frontier: None,
        files,
        head_checksum,
        zero: Vec::new(),
        remove: Vec::new(),
        adopted_files: Vec::new(),
        carried,
        ring_written: ring.written,
    };
    crate::past::past_the_frontier(
        storage,
        &mut analysis,
        &wal_files[retained_count..],
        &keys[retained_count..],
        fallback,
    )?;
    analysis.report.durable_bytes = analysis.files.iter().map(|f| f.end).sum();
    analysis.report.sealed = analysis.files.iter().map(|f| f.sealed_last).collect();
    analysis.report.files = analysis
        .files
        .iter()
        .map(|f| crate::FileInfo {
            key: f.key,
            first_op: f.first_op,
            entries: f.offsets.len(),
            end: f.end,
            path: f.path.clone(),
        })
        .collect();
    for finding in &analysis.report.findings {
        match finding.kind.action() {
            Action::DiscardUnpublished => {
                analysis.report.discarded_bytes += finding.bytes;
                let to = finding.offset + finding.bytes;
                analysis
                    .zero
                    .push((finding.file.clone(), finding.offset, to));
            }
            Action::RemoveFile => {
                if matches!(finding.kind, FindingKind::FileBeyondFrontier { .. }) {
                    analysis.report.discarded_bytes += finding.bytes;
                }
                analysis.remove.push(finding.file.clone());
            }
            Action::RepairFrontier | Action::Create | Action::RestoreCarried | Action::None => {}
        }
    }
    Ok(Some(analysis))
}

/// The refusal for a retained entry that does not verify at `offset` of `file`: an entry of a
/// header version this build does not read is a refusal of its own (nothing is damaged), the
/// rest is damage.
pub(crate) fn corrupt(file: PathBuf, offset: u64, reason: StopReason) -> WalError {
    match reason {
        StopReason::Header(iggy_format::HeaderError::UnknownVersion { version }) => {
            WalError::UnknownEntryVersion {
                file,
                offset,
                version,
            }
        }
        reason => WalError::Corrupt {
            file,
            offset,
            reason,
        },
    }
}

/// Pairs each listed file (sorted by key) with its first op. Op-named files say it in their
/// name. A keyed log's head file has it in the frontier; a file before the head (published
/// history) must start with a verified header, or boot refuses naming offset 0; a file after
/// the head whose first header does not verify gets `u64::MAX` (it holds nothing to adopt).
fn first_ops<R: ReadStorage>(
    storage: &R,
    naming: Naming,
    frontier: &Frontier,
    listed: Vec<(u64, PathBuf)>,
    retained_count: usize,
) -> Result<Vec<(u64, PathBuf)>, WalError> {
    if naming == Naming::ByOp {
        return Ok(listed);
    }
    let mut resolved = Vec::with_capacity(listed.len());
    for (index, (key, path)) in listed.into_iter().enumerate() {
        if key == frontier.head_file_key {
            resolved.push((frontier.head_file, path));
            continue;
        }
        let file = storage.open_read(&path)?;
        match first_header_op(&file)? {
            Ok(op) => resolved.push((op, path)),
            Err(reason) if index < retained_count => {
                return Err(corrupt(path, 0, reason));
            }
            Err(_) => resolved.push((u64::MAX, path)),
        }
    }
    Ok(resolved)
}

/// The op of a file's first entry, from its header alone (the scan verifies the rest).
fn first_header_op<F: ReadFile>(file: &F) -> iggy_io::Result<Result<u64, StopReason>> {
    Ok(first_header(file)?.map(|header| header.op))
}

/// A file's first entry header, verified on its own (the scan verifies the rest).
pub(crate) fn first_header<F: ReadFile>(file: &F) -> iggy_io::Result<Result<Header, StopReason>> {
    if file.len()? < HEADER_SIZE as u64 {
        return Ok(Err(StopReason::EndOfFile));
    }
    let mut bytes = [0u8; HEADER_SIZE];
    file.read_exact_at(0, &mut bytes)?;
    if bytes.iter().all(|b| *b == 0) {
        return Ok(Err(StopReason::Zeros));
    }
    Ok(Header::decode(&bytes).map_err(StopReason::Header))
}

/// What creating the log in `dir` does, for a group whose log does not exist yet ([`check`]
/// returned `None`) and that its open will create: a leftover `frontier.tmp` is removed and the
/// log is created. Reported so that a check names every change the open makes.
pub fn creation_findings<R: ReadStorage>(
    storage: &R,
    dir: &Path,
) -> Result<Vec<Finding>, WalError> {
    let mut findings = Vec::new();
    let temp = dir.join(FRONTIER_TEMP_FILE);
    if storage.exists(&temp)? {
        findings.push(Finding {
            file: temp,
            offset: 0,
            bytes: 0,
            kind: FindingKind::LeftoverTemp,
        });
    }
    findings.push(Finding {
        file: dir.join(FRONTIER_FILE),
        offset: 0,
        bytes: 0,
        kind: FindingKind::NotCreated,
    });
    Ok(findings)
}

/// Runs boot in `Check` mode: what `Open` would find and do, without writing.
pub fn check<R: ReadStorage>(
    storage: &R,
    dir: &Path,
    group: u128,
) -> Result<Option<Report>, WalError> {
    check_named(storage, dir, group, Naming::ByOp)
}

/// [`check`] for a log of any [`Naming`].
pub fn check_named<R: ReadStorage>(
    storage: &R,
    dir: &Path,
    group: u128,
    naming: Naming,
) -> Result<Option<Report>, WalError> {
    check_verifying(storage, dir, group, naming, Verify::Sealed)
}

/// [`check_named`], reading as much of the retained files as `verify` says.
pub fn check_verifying<R: ReadStorage>(
    storage: &R,
    dir: &Path,
    group: u128,
    naming: Naming,
    verify: Verify,
) -> Result<Option<Report>, WalError> {
    Ok(analyze(storage, dir, group, naming, verify)?.map(|analysis| analysis.report))
}
