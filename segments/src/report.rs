//! What boot found and does in a partition: its findings (beyond the WAL's own), its segments
//! as boot verified them, and its report.

use std::path::PathBuf;

use iggy_format::checksum::Checksum;
use iggy_superblock::CopyRepair;
use iggy_wal as wal;

use crate::entry::OffsetEntry;
use crate::index::IndexEntry;
use crate::install::InstallFinding;
use crate::offsets::{ConsumerKind, ConsumerOffset};
use crate::sessions::Session;

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
    /// Store a committed consumer offset the crashed process had not stored yet.
    ApplyCommitted,
    /// Write a consumer offset file's good slot over its damaged one.
    RepairSlot,
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
    /// A slot of a consumer offset file does not verify beside one that does: the file reads
    /// as the good one (`kept`), the store a crash tore or, if it was rot of the newest, the
    /// store before it; boot writes `kept` over the damaged slot.
    OffsetSlotDamaged {
        slot: usize,
        reason: String,
        kept: ConsumerOffset,
    },
    /// A committed consumer offset store (the log's entry `op`, at or below the superblock's
    /// commit point) whose offset file is older: a crash came between the commit and the store.
    OffsetNotApplied {
        kind: ConsumerKind,
        id: u32,
        offset: u64,
        op: u64,
    },
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
            Self::OffsetNotApplied { .. } => Action::ApplyCommitted,
            Self::OffsetSlotDamaged { .. } => Action::RepairSlot,
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
    /// Entries of every kind.
    pub entries: u64,
    /// Of them, message batches.
    pub batches: u64,
    /// Bytes of trusted entries.
    pub bytes: u64,
    pub min_timestamp: u64,
    pub max_timestamp: u64,
    pub index: Vec<IndexEntry>,
    /// The last consumer offset store of each consumer in the segment, by (kind, id).
    pub stores: Vec<OffsetEntry>,
    /// The newest session of each client in the segment, by client.
    pub sessions: Vec<Session>,
    /// The header checksum of its last entry (`None` without entries): its summary names it.
    pub last_checksum: Option<Checksum>,
}

impl SegmentInfo {
    /// Records `store`, the segment's newest of its consumer.
    pub(crate) fn note_store(&mut self, store: OffsetEntry) {
        let key = |entry: &OffsetEntry| (entry.kind.code(), entry.id);
        match self.stores.binary_search_by_key(&key(&store), key) {
            Ok(at) => self.stores[at] = store,
            Err(at) => self.stores.insert(at, store),
        }
    }

    /// Records `session`, the segment's newest of its client.
    pub(crate) fn note_session(&mut self, session: Session) {
        crate::sessions::note(&mut self.sessions, session);
    }
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
    /// Consumer offset stores journaled past the commit point, oldest first: applied when they
    /// commit, dropped if a view change cuts them.
    pub uncommitted_offsets: Vec<OffsetEntry>,
    /// The commit point boot restores: the superblock's, raised to what the log proves (the
    /// head segment's prepares each carry their primary's commit point), at most the head op.
    pub commit: u64,
    /// The committed session of each client (see [`crate::sessions`]), by client.
    pub sessions: Vec<Session>,
}

impl Report {
    /// Whether boot changes nothing on disk.
    #[must_use]
    pub fn is_clean(&self) -> bool {
        self.superblock_repairs.is_empty() && self.wal.is_clean() && self.findings.is_empty()
    }
}
