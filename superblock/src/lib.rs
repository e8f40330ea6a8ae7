//! The superblock: a consensus group's durable VSR state in two copies that survive any single
//! fault. See `docs/format.md` ("Superblock") for the bytes and the decision rules.
//!
//! Invariants:
//! - a record's `sequence` is its parent's plus one, and `parent` is its parent's checksum;
//! - `log_view <= view` and `checkpoint_op <= commit_max` in every record, checked before writing
//!   and after reading;
//! - `view`, `log_view`, `commit_max`, `offset_frontier`, `incarnation` and `ack_bound` never
//!   decrease across records; `checkpoint_op` decreases only through
//!   [`Superblock::write_state_transfer`];
//! - an update writes and syncs copy A, then copy B; [`Superblock::state`] changes only after
//!   both are durable, so nothing is acted on (or sent) before it is;
//! - after a failed write or sync the handle is poisoned and refuses every later write;
//! - the superblock file comes into existence complete (written as `superblock.tmp`, synced,
//!   renamed, directory synced), and before any other file of the group: other files without a
//!   superblock mean the state was lost, never that the group is new.

pub mod copy;

use std::path::{Path, PathBuf};

use iggy_format::checksum::Checksum;
use iggy_io::{OpenMode, ReadFile, ReadStorage, Storage, WriteFile};

pub use copy::{CopyError, Damage, Identity, Record, Slot, VsrState};

/// File name of the superblock inside a group directory.
pub const FILE_NAME: &str = "superblock";
/// File name a superblock is created under before its rename into place.
pub const TEMP_FILE_NAME: &str = "superblock.tmp";

/// Why the superblock cannot be opened or written. Each refusal is its own variant.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SuperblockError {
    #[error("{path}: state lost: no superblock, but the group directory holds {files:?}")]
    StateLost { path: PathBuf, files: Vec<String> },
    #[error("{path}: both copies are unusable: copy A (offset 0): {a}; copy B (offset 4096): {b}")]
    BothInvalid {
        path: PathBuf,
        a: CopyError,
        b: CopyError,
    },
    #[error(
        "{path}: fork: both copies have sequence {sequence} but checksums {checksum_a:#034x} and {checksum_b:#034x}"
    )]
    Fork {
        path: PathBuf,
        sequence: u64,
        checksum_a: Checksum,
        checksum_b: Checksum,
    },
    #[error("{path}: sequence gap: copy A has {sequence_a}, copy B has {sequence_b}")]
    SequenceGap {
        path: PathBuf,
        sequence_a: u64,
        sequence_b: u64,
    },
    #[error(
        "{path}: broken parent link: sequence {sequence} names parent {parent:#034x}, but sequence {} has checksum {previous:#034x}", sequence - 1
    )]
    ParentMismatch {
        path: PathBuf,
        sequence: u64,
        parent: Checksum,
        previous: Checksum,
    },
    #[error("{path}: {field} goes backwards from sequence {} ({older}) to {sequence} ({newer})", sequence - 1)]
    NotMonotonic {
        path: PathBuf,
        field: &'static str,
        sequence: u64,
        older: u64,
        newer: u64,
    },
    #[error(
        "{path}: the copies belong to different nodes (sequences {sequence_a} and {sequence_b})"
    )]
    CopiesDisagree {
        path: PathBuf,
        sequence_a: u64,
        sequence_b: u64,
    },
    #[error("{path}: {field} mismatch: expected {expected}, found {found}")]
    IdentityMismatch {
        path: PathBuf,
        field: &'static str,
        expected: u128,
        found: u128,
    },
    #[error("{path}: copy {slot} (offset {offset}): unknown version {version}")]
    UnknownVersion {
        path: PathBuf,
        slot: Slot,
        offset: u64,
        version: u16,
    },
    #[error("{path}: copy {slot} (offset {offset}): invariant broken on disk: {reason}")]
    InvariantBroken {
        path: PathBuf,
        slot: Slot,
        offset: u64,
        reason: &'static str,
    },
    #[error("{path}: a superblock already exists")]
    AlreadyExists { path: PathBuf },
    #[error("{path}: poisoned by an earlier failed write; reopen to recover from disk")]
    Poisoned { path: PathBuf },
    #[error(transparent)]
    Io(#[from] iggy_io::Error),
}

/// A copy that open found unusable or stale, and that repair rewrites from the chosen record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CopyRepair {
    pub slot: Slot,
    pub reason: RepairReason,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RepairReason {
    /// Torn, rotten, never written or misdirected.
    Damaged(Damage),
    /// A valid copy one sequence behind (a crash between the two copy writes).
    Stale { sequence: u64 },
}

impl std::fmt::Display for CopyRepair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.reason {
            RepairReason::Damaged(damage) => write!(f, "copy {} damaged: {damage}", self.slot),
            RepairReason::Stale { sequence } => {
                write!(f, "copy {} stale (sequence {sequence})", self.slot)
            }
        }
    }
}

/// What [`read`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Opened {
    /// Nothing of this group exists on disk: it may be created.
    Fresh,
    /// The record to use, and the copies that need repair.
    Present {
        record: Record,
        checksum: Checksum,
        repairs: Vec<CopyRepair>,
    },
}

fn file_path(dir: &Path) -> PathBuf {
    dir.join(FILE_NAME)
}

/// Reads the superblock of the group in `dir` and decides what boot may trust, without writing.
/// This is the one decision procedure: [`Superblock::open`] and the offline tools both call it.
pub fn read<R: ReadStorage>(
    storage: &R,
    dir: &Path,
    expected: &Identity,
) -> Result<Opened, SuperblockError> {
    read_beside(storage, dir, expected, &|_| false)
}

/// [`read`], where a directory without a superblock whose only entries are ones `beside` accepts
/// (besides `superblock.tmp`) is fresh, not lost state.
fn read_beside<R: ReadStorage>(
    storage: &R,
    dir: &Path,
    expected: &Identity,
    beside: &dyn Fn(&str) -> bool,
) -> Result<Opened, SuperblockError> {
    let path = file_path(dir);
    if !storage.exists(&path)? {
        let files: Vec<String> = if storage.exists(dir)? {
            storage
                .list_dir(dir)?
                .into_iter()
                .map(|entry| entry.name.to_string_lossy().into_owned())
                .filter(|name| name != TEMP_FILE_NAME && !beside(name))
                .collect()
        } else {
            Vec::new()
        };
        return if files.is_empty() {
            Ok(Opened::Fresh)
        } else {
            Err(SuperblockError::StateLost { path, files })
        };
    }
    let file = storage.open_read(&path)?;
    let mut bytes = vec![0u8; copy::COPY_SIZE * copy::COPIES];
    let len = usize::try_from(file.len()?.min(copy::FILE_SIZE)).unwrap_or(0);
    file.read_exact_at(0, &mut bytes[..len])?;
    bytes.truncate(len);
    let decoded = Slot::ALL.map(|slot| {
        let start = usize::try_from(slot.offset()).unwrap_or(usize::MAX);
        copy::decode(bytes.get(start..).unwrap_or(&[]), slot)
    });
    let [a, b] = decoded;
    let (record, checksum, repairs) = choose(&path, a, b)?;
    check_identity(&path, expected, &record.identity)?;
    Ok(Opened::Present {
        record,
        checksum,
        repairs,
    })
}

/// The `superblock.tmp` in `dir`, if one is there: a creation that stopped before its rename
/// (the group then reads as fresh) or whose rename was lost. Nothing reads it; the open with
/// [`RepairPolicy::Repair`] removes it, and a creation replaces it.
pub fn leftover_temp<R: ReadStorage>(storage: &R, dir: &Path) -> iggy_io::Result<Option<PathBuf>> {
    let temp = dir.join(TEMP_FILE_NAME);
    Ok(storage.exists(&temp)?.then_some(temp))
}

/// Removes a leftover `superblock.tmp` (see [`leftover_temp`]), durably.
fn remove_leftover_temp<S: Storage>(storage: &S, dir: &Path) -> Result<(), SuperblockError> {
    if let Some(temp) = leftover_temp(storage, dir)? {
        tracing::warn!(file = %temp.display(), "removing a leftover superblock.tmp");
        storage.unlink(&temp)?;
        // Gone durably, so that the next boot does not report it again.
        storage.sync_dir(dir)?;
    }
    Ok(())
}

/// Turns a copy that verified but may not be used into its refusal.
fn refusal(path: &Path, slot: Slot, error: CopyError) -> Option<SuperblockError> {
    let path = path.to_path_buf();
    let offset = slot.offset();
    match error {
        CopyError::Damaged(_) => None,
        CopyError::UnknownVersion { version } => Some(SuperblockError::UnknownVersion {
            path,
            slot,
            offset,
            version,
        }),
        CopyError::InvariantBroken(reason) => Some(SuperblockError::InvariantBroken {
            path,
            slot,
            offset,
            reason,
        }),
    }
}

type Decoded = Result<(Record, Checksum), CopyError>;

/// The decision rules (documented in `docs/format.md`).
fn choose(
    path: &Path,
    a: Decoded,
    b: Decoded,
) -> Result<(Record, Checksum, Vec<CopyRepair>), SuperblockError> {
    for (slot, result) in [(Slot::A, &a), (Slot::B, &b)] {
        if let Err(error) = result
            && let Some(refusal) = refusal(path, slot, *error)
        {
            return Err(refusal);
        }
    }
    let damaged = |slot, error: CopyError| match error {
        CopyError::Damaged(damage) => CopyRepair {
            slot,
            reason: RepairReason::Damaged(damage),
        },
        _ => unreachable!("refusals returned above"),
    };
    match (a, b) {
        (Err(a), Err(b)) => Err(SuperblockError::BothInvalid {
            path: path.to_path_buf(),
            a,
            b,
        }),
        (Ok((record, sum)), Err(b)) => Ok((record, sum, vec![damaged(Slot::B, b)])),
        (Err(a), Ok((record, sum))) => Ok((record, sum, vec![damaged(Slot::A, a)])),
        (Ok((ra, sa)), Ok((rb, sb))) => {
            let path = path.to_path_buf();
            if ra.identity != rb.identity {
                return Err(SuperblockError::CopiesDisagree {
                    path,
                    sequence_a: ra.sequence,
                    sequence_b: rb.sequence,
                });
            }
            if ra.sequence == rb.sequence {
                return if sa == sb {
                    Ok((ra, sa, Vec::new()))
                } else {
                    Err(SuperblockError::Fork {
                        path,
                        sequence: ra.sequence,
                        checksum_a: sa,
                        checksum_b: sb,
                    })
                };
            }
            let ((newer, newer_sum), (older, older_sum), stale_slot) = if ra.sequence > rb.sequence
            {
                ((ra, sa), (rb, sb), Slot::B)
            } else {
                ((rb, sb), (ra, sa), Slot::A)
            };
            if newer.sequence - older.sequence > 1 {
                return Err(SuperblockError::SequenceGap {
                    path,
                    sequence_a: ra.sequence,
                    sequence_b: rb.sequence,
                });
            }
            if newer.parent != older_sum {
                return Err(SuperblockError::ParentMismatch {
                    path,
                    sequence: newer.sequence,
                    parent: newer.parent,
                    previous: older_sum,
                });
            }
            if let Some((field, old, new)) = regression(&older.state, &newer.state, true) {
                return Err(SuperblockError::NotMonotonic {
                    path,
                    field,
                    sequence: newer.sequence,
                    older: old,
                    newer: new,
                });
            }
            let repair = CopyRepair {
                slot: stale_slot,
                reason: RepairReason::Stale {
                    sequence: older.sequence,
                },
            };
            Ok((newer, newer_sum, vec![repair]))
        }
    }
}

/// The first field that goes back from `older` to `newer`, if any. With `state_transfer`, the
/// checkpoint and the offset frontier may go back: a peer's (possibly older) checkpoint and the
/// offsets of the log installed with it replace the local ones. `choose` cannot tell a state
/// transfer from an ordinary update, so it compares copies with them exempt.
fn regression(
    older: &VsrState,
    newer: &VsrState,
    state_transfer: bool,
) -> Option<(&'static str, u64, u64)> {
    let fields = [
        ("view", u64::from(older.view), u64::from(newer.view)),
        (
            "log_view",
            u64::from(older.log_view),
            u64::from(newer.log_view),
        ),
        ("commit_max", older.commit_max, newer.commit_max),
        ("incarnation", older.incarnation, newer.incarnation),
        ("ack_bound", older.ack_bound, newer.ack_bound),
        (
            "offset_frontier",
            older.offset_frontier,
            newer.offset_frontier,
        ),
        ("checkpoint_op", older.checkpoint_op, newer.checkpoint_op),
    ];
    let checked = if state_transfer {
        &fields[..5]
    } else {
        &fields[..]
    };
    checked.iter().find(|(_, old, new)| new < old).copied()
}

fn check_identity(
    path: &Path,
    expected: &Identity,
    found: &Identity,
) -> Result<(), SuperblockError> {
    let mismatch = |field, expected: u128, found: u128| {
        Err(SuperblockError::IdentityMismatch {
            path: path.to_path_buf(),
            field,
            expected,
            found,
        })
    };
    if expected.cluster != found.cluster {
        return mismatch("cluster", expected.cluster, found.cluster);
    }
    if expected.replica != found.replica {
        return mismatch("replica", expected.replica.into(), found.replica.into());
    }
    if expected.replica_count != found.replica_count {
        return mismatch(
            "replica_count",
            expected.replica_count.into(),
            found.replica_count.into(),
        );
    }
    Ok(())
}

/// Whether [`Superblock::open`] rewrites damaged or stale copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RepairPolicy {
    /// Rewrite them through the normal write path before returning, and the good copies too
    /// (the same bytes: what this boot trusts may be a crashed process's page cache only).
    Repair,
    /// Rewrite only the damaged or stale copies: for a boot after a clean shutdown, whose
    /// process synced every write it made, so the good copies are durable already.
    RepairDamaged,
    /// As [`RepairPolicy::Repair`], without syncing the copies: for a boot whose caller syncs
    /// the file system before the group is used (`iggy_io::Storage::sync_filesystem`). Each
    /// copy is written from the chosen record, so a crash before that sync leaves every copy
    /// as it was or as the chosen record (a torn write of a copy's same bytes is those bytes):
    /// the next boot chooses the same record.
    RepairUnsynced,
    /// Leave the file untouched and only report them.
    ReportOnly,
}

impl RepairPolicy {
    /// What a writing boot uses: [`RepairPolicy::RepairDamaged`] right after a clean shutdown
    /// (its process synced every write), [`RepairPolicy::Repair`] otherwise, or
    /// [`RepairPolicy::RepairUnsynced`] instead of `Repair` when the caller defers boot syncs.
    pub fn at_boot(previous_shutdown_clean: bool, defer_syncs: bool) -> Self {
        match (previous_shutdown_clean, defer_syncs) {
            (true, _) => Self::RepairDamaged,
            (false, false) => Self::Repair,
            (false, true) => Self::RepairUnsynced,
        }
    }
}

/// An open superblock through which the group's durable state is updated.
#[derive(Debug)]
pub struct Superblock<S: Storage> {
    storage: S,
    path: PathBuf,
    /// Opened by the first update and kept: a group that boots and idles holds no descriptor
    /// for its superblock (a node of 10,000 partitions has a file limit to respect).
    file: Option<S::File>,
    record: Record,
    checksum: Checksum,
    poisoned: bool,
}

impl<S: Storage> Superblock<S> {
    /// Creates the superblock of a new group in `dir` (created if missing) with sequence 1.
    /// Refuses if anything of the group exists already (see [`read`]).
    pub fn create(
        storage: S,
        dir: &Path,
        identity: Identity,
        state: VsrState,
    ) -> Result<Self, SuperblockError> {
        Self::create_beside(storage, dir, identity, state, &|_| false)
    }

    /// [`Superblock::create`] in a directory that may already hold entries `beside` accepts
    /// (a partition rebuilt from its peers keeps its rebuild marker and damaged files there).
    pub fn create_beside(
        storage: S,
        dir: &Path,
        identity: Identity,
        state: VsrState,
        beside: &dyn Fn(&str) -> bool,
    ) -> Result<Self, SuperblockError> {
        let path = file_path(dir);
        match read_beside(&storage, dir, &identity, beside) {
            Ok(Opened::Fresh) => {}
            Ok(Opened::Present { .. }) => return Err(SuperblockError::AlreadyExists { path }),
            Err(error) => return Err(error),
        }
        let record = Record {
            sequence: 1,
            parent: 0,
            identity,
            state,
        };
        copy::check_invariants(&record).unwrap_or_else(|reason| panic!("creating with {reason}"));
        if !storage.exists(dir)? {
            storage.create_dir(dir)?;
            // The group directory must be durable in its parent before anything relies on it.
            storage.sync_dir(dir.parent().unwrap_or(Path::new("")))?;
        }
        let temp = dir.join(TEMP_FILE_NAME);
        if storage.exists(&temp)? {
            storage.unlink(&temp)?;
        }
        let file = storage.open(&temp, OpenMode::CreateNew)?;
        for slot in Slot::ALL {
            file.write_all_at(slot.offset(), &copy::encode(&record, slot))?;
        }
        // Both copies must be durable before the name makes the superblock exist.
        file.sync_data()?;
        storage.rename(&temp, &path)?;
        // The rename is the moment the group exists; it must be durable before we return.
        storage.sync_dir(dir)?;
        drop(file);
        let checksum = copy::record_checksum(&record);
        Ok(Self {
            storage,
            path,
            // Opened under its final name by the first update, so every later error and trace
            // names the real file.
            file: None,
            record,
            checksum,
            poisoned: false,
        })
    }

    /// Opens the superblock of an existing group, repairing or reporting bad copies.
    /// Returns `Ok(None)` when the group is [`Opened::Fresh`]. With [`RepairPolicy::Repair`] a
    /// leftover `superblock.tmp` is removed (see [`leftover_temp`]), fresh group or not.
    pub fn open(
        storage: S,
        dir: &Path,
        expected: &Identity,
        policy: RepairPolicy,
    ) -> Result<Option<(Self, Vec<CopyRepair>)>, SuperblockError> {
        let opened = read(&storage, dir, expected)?;
        if policy != RepairPolicy::ReportOnly {
            remove_leftover_temp(&storage, dir)?;
        }
        let (record, checksum, repairs) = match opened {
            Opened::Fresh => return Ok(None),
            Opened::Present {
                record,
                checksum,
                repairs,
            } => (record, checksum, repairs),
        };
        let path = file_path(dir);
        let mut superblock = Self {
            storage,
            path,
            file: None,
            record,
            checksum,
            poisoned: false,
        };
        if policy != RepairPolicy::ReportOnly {
            for repair in &repairs {
                // What the check reports as `repair-copy`, in the boot's log too.
                tracing::warn!(file = %superblock.path.display(), %repair, "repairing a superblock copy");
            }
        }
        if matches!(policy, RepairPolicy::Repair | RepairPolicy::RepairUnsynced) {
            // Every copy is written from the chosen record: the reported repairs, and the copies
            // that read as good. A good copy may be in the page cache only, written by an update
            // whose sync failed before the process died (after a failed fsync the kernel may keep
            // pages that no later fsync writes); writing its same bytes again makes what this boot
            // trusts durable. Copy A first, then B, as in an update.
            let sync = policy == RepairPolicy::Repair;
            for slot in Slot::ALL {
                superblock.write_copy_with(slot, &record, sync)?;
            }
            superblock.file = None;
        } else if policy == RepairPolicy::RepairDamaged && !repairs.is_empty() {
            for slot in Slot::ALL {
                if repairs.iter().any(|r| r.slot == slot) {
                    superblock.write_copy(slot, &record)?;
                }
            }
            superblock.file = None;
        }
        Ok(Some((superblock, repairs)))
    }

    /// Refuses (`Poisoned`) when a failed write poisoned this handle: its state may not be
    /// durable. What a clean shutdown checks before it says so.
    pub fn ensure_healthy(&self) -> Result<(), SuperblockError> {
        if self.poisoned {
            return Err(SuperblockError::Poisoned {
                path: self.path.clone(),
            });
        }
        Ok(())
    }

    /// The current durable record's state: what the replica may act on.
    pub fn state(&self) -> &VsrState {
        &self.record.state
    }

    /// The current durable record.
    pub fn record(&self) -> &Record {
        &self.record
    }

    /// The checksum of the current record.
    pub fn checksum(&self) -> Checksum {
        self.checksum
    }

    /// The storage this superblock writes through.
    pub fn storage(&self) -> &S {
        &self.storage
    }

    /// Makes `state` durable as the next record. Panics if it breaks an invariant (a caller bug
    /// that would otherwise corrupt the durable state): `log_view > view`, `checkpoint_op >
    /// commit_max`, or a field going backwards.
    pub fn write(&mut self, state: VsrState) -> Result<(), SuperblockError> {
        if let Some((field, old, new)) = regression(&self.record.state, &state, false) {
            panic!("superblock update moves {field} back from {old} to {new}");
        }
        self.write_record(state)
    }

    /// Like [`Superblock::write`], but the checkpoint and the offset frontier may move back:
    /// state transfer installs a peer's (possibly older) checkpoint and the log that goes with
    /// it. Every other field still may not decrease.
    pub fn write_state_transfer(&mut self, state: VsrState) -> Result<(), SuperblockError> {
        if let Some((field, old, new)) = regression(&self.record.state, &state, true) {
            panic!("state-transfer update moves {field} back from {old} to {new}");
        }
        self.write_record(state)
    }

    fn write_record(&mut self, state: VsrState) -> Result<(), SuperblockError> {
        if self.poisoned {
            return Err(SuperblockError::Poisoned {
                path: self.path.clone(),
            });
        }
        let record = Record {
            sequence: self.record.sequence + 1,
            parent: self.checksum,
            identity: self.record.identity,
            state,
        };
        assert!(
            state.log_view <= state.view,
            "log_view {} > view {}",
            state.log_view,
            state.view
        );
        assert!(
            state.checkpoint_op <= state.commit_max,
            "checkpoint_op {} > commit_max {}",
            state.checkpoint_op,
            state.commit_max
        );
        // Copy A first, then B: a crash leaves at most one copy torn or stale, never both.
        self.write_copy(Slot::A, &record)?;
        self.write_copy(Slot::B, &record)?;
        self.checksum = copy::record_checksum(&record);
        self.record = record;
        Ok(())
    }

    /// Writes one copy and makes it durable; poisons the handle on failure.
    fn write_copy(&mut self, slot: Slot, record: &Record) -> Result<(), SuperblockError> {
        self.write_copy_with(slot, record, true)
    }

    /// Writes one copy, synced or not (a boot whose caller syncs the file system after);
    /// poisons the handle on failure.
    fn write_copy_with(
        &mut self,
        slot: Slot,
        record: &Record,
        sync: bool,
    ) -> Result<(), SuperblockError> {
        if self.poisoned {
            return Err(SuperblockError::Poisoned {
                path: self.path.clone(),
            });
        }
        let bytes = copy::encode(record, slot);
        // This copy must be durable before the other is touched (and before the caller acts on
        // the new state): one copy is always intact. Write and sync go out as one step.
        let file = match &mut self.file {
            Some(file) => file,
            None => match self.storage.open(&self.path, OpenMode::Existing) {
                Ok(file) => self.file.insert(file),
                // Nothing was written: the durable state is as it was (not poisoned).
                Err(error) => return Err(error.into()),
            },
        };
        let result = if sync {
            file.write_all_and_sync_data(slot.offset(), &bytes)
        } else {
            file.write_all_at(slot.offset(), &bytes)
        };
        if let Err(error) = result {
            self.poisoned = true;
            return Err(error.into());
        }
        Ok(())
    }
}
