//! The metadata consensus group on disk: its superblock, its WAL of ops, and `snapshot.bin`.
//!
//! Checkpoint order (each step durable before the next): the snapshot of the state at op `n`,
//! then the superblock's checkpoint (`n` and the checksum of the prepare at `n`), then the WAL
//! prefix up to `n` is dropped. A crash between any two steps leaves a disk that
//! [`MetadataGroup::open`] restores to exactly the state of replaying every published op:
//!
//! - superblock checkpoint `c`, snapshot at `c` with the same checksum: the snapshot, then the
//!   log from `c + 1`;
//! - snapshot newer than `c` (a crash before the superblock step): used only if the WAL still
//!   holds the prepare at the snapshot's op with the snapshot's checksum, else refused;
//! - snapshot older than `c`, missing while `c > 0`, or at `c` with another checksum: refused,
//!   each with its own error;
//! - a log that no longer reaches back to the snapshot: refused.

use std::path::{Path, PathBuf};

use iggy_io::{ReadStorage, Storage};
use iggy_superblock::{Identity, RepairPolicy, Superblock, SuperblockError, VsrState};
use iggy_wal::{Config, Wal, WalError};

use crate::codec::{self, DecodeError, PAYLOAD_VERSION};
use crate::{Applied, ApplyError, Op, State};

/// The WAL's directory inside the metadata directory.
pub const WAL_DIR: &str = "wal";
/// The metadata group's id in its WAL frontier.
pub const GROUP_ID: u128 = 0;
/// Ops the metadata journal holds.
pub const JOURNAL_OPS: u64 = 1024;
/// Ops kept in reserve past a checkpoint (the pipeline of ops in flight).
pub const JOURNAL_MARGIN_OPS: u64 = 64;
/// A checkpoint is taken every this many ops, so the log never outgrows the journal.
pub const CHECKPOINT_INTERVAL_OPS: u64 = JOURNAL_OPS - JOURNAL_MARGIN_OPS;
const _: () = assert!(CHECKPOINT_INTERVAL_OPS == 960);

/// Why the metadata group cannot be opened or changed.
#[derive(Debug, thiserror::Error)]
pub enum GroupError {
    #[error(transparent)]
    Superblock(Box<SuperblockError>),
    #[error(transparent)]
    Wal(Box<WalError>),
    #[error(transparent)]
    Snapshot(#[from] iggy_snapshot::SnapshotError),
    #[error("{dir}: the superblock names checkpoint {checkpoint_op} but there is no snapshot.bin")]
    SnapshotMissing { dir: PathBuf, checkpoint_op: u64 },
    #[error(
        "{dir}: snapshot.bin is at op {snapshot_op}, older than the superblock's checkpoint {checkpoint_op}"
    )]
    SnapshotBehind {
        dir: PathBuf,
        snapshot_op: u64,
        checkpoint_op: u64,
    },
    #[error("{dir}: snapshot.bin and the superblock disagree on the checksum of op {op}")]
    ChecksumDisagree { dir: PathBuf, op: u64 },
    #[error(
        "{dir}: snapshot.bin at op {snapshot_op} is newer than the checkpoint, but the WAL does not link it"
    )]
    SnapshotUnlinked { dir: PathBuf, snapshot_op: u64 },
    #[error("{dir}: the WAL starts at op {first_op}, past op {needed} that the restore needs")]
    LogGap {
        dir: PathBuf,
        first_op: u64,
        needed: u64,
    },
    #[error("{dir}: the superblock exists but the WAL does not")]
    LogMissing { dir: PathBuf },
    #[error("metadata op {op} in the WAL does not decode: {error}")]
    Decode { op: u64, error: DecodeError },
    #[error(transparent)]
    Payload(DecodeError),
    #[error(transparent)]
    Refused(#[from] ApplyError),
}

impl From<SuperblockError> for GroupError {
    fn from(error: SuperblockError) -> Self {
        Self::Superblock(Box::new(error))
    }
}

impl From<WalError> for GroupError {
    fn from(error: WalError) -> Self {
        Self::Wal(Box::new(error))
    }
}

/// The retained log as boot sees it.
#[derive(Clone, Copy, Debug)]
struct Log {
    first_op: u64,
    head_op: u64,
}

/// The restore rules of the module docs, in one place for [`MetadataGroup::open`] and
/// [`check`]: the op the restored state starts from (the snapshot's, or 0), or the refusal.
/// `checksum_at(op)` reads the header checksum of a retained op.
fn decide(
    dir: &Path,
    vsr: &VsrState,
    snapshot: Option<&iggy_snapshot::SnapshotHeader>,
    log: Log,
    checksum_at: impl FnOnce(u64) -> Result<u128, GroupError>,
) -> Result<u64, GroupError> {
    let dir = dir.to_path_buf();
    let checkpoint_op = vsr.checkpoint_op;
    let base_op = match snapshot {
        None if checkpoint_op == 0 => 0,
        None => return Err(GroupError::SnapshotMissing { dir, checkpoint_op }),
        Some(header) => {
            let snapshot_op = header.checkpoint_op;
            if snapshot_op < checkpoint_op {
                return Err(GroupError::SnapshotBehind {
                    dir,
                    snapshot_op,
                    checkpoint_op,
                });
            }
            if snapshot_op == checkpoint_op && header.checkpoint_checksum != vsr.checkpoint_checksum
            {
                return Err(GroupError::ChecksumDisagree {
                    dir,
                    op: snapshot_op,
                });
            }
            if snapshot_op > checkpoint_op {
                let linked = snapshot_op >= log.first_op
                    && snapshot_op <= log.head_op
                    && checksum_at(snapshot_op)? == header.checkpoint_checksum;
                if !linked {
                    return Err(GroupError::SnapshotUnlinked { dir, snapshot_op });
                }
            }
            snapshot_op
        }
    };
    if log.head_op > base_op && base_op + 1 < log.first_op {
        return Err(GroupError::LogGap {
            dir,
            first_op: log.first_op,
            needed: base_op + 1,
        });
    }
    Ok(base_op)
}

/// What [`check`] found: what `open` would repair, discard and restore from.
#[derive(Clone, Debug)]
pub struct Checked {
    pub superblock_repairs: Vec<iggy_superblock::CopyRepair>,
    /// The WAL's boot report; `None` when creation stopped before the WAL existed (open
    /// finishes it: `wal_creation` says what that does).
    pub wal: Option<iggy_wal::Report>,
    /// What finishing the WAL's creation does (empty when the WAL exists).
    pub wal_creation: Vec<iggy_wal::Finding>,
    /// Temporary files a crash left (`superblock.tmp`, `snapshot.bin.tmp`,
    /// `snapshot.bin.receiving`): open removes them.
    pub leftovers: Vec<PathBuf>,
    /// The op of the snapshot the restore starts from (0: no snapshot).
    pub base_op: u64,
    /// The state the restore yields (what a node's partitions are checked against).
    pub state: State,
}

/// The temporary files in the metadata directory that boot removes.
fn leftovers<R: ReadStorage>(storage: &R, dir: &Path) -> Result<Vec<PathBuf>, GroupError> {
    let mut found: Vec<PathBuf> = iggy_superblock::leftover_temp(storage, dir)
        .map_err(SuperblockError::from)?
        .into_iter()
        .collect();
    found.extend(iggy_snapshot::leftovers(storage, dir)?);
    Ok(found)
}

/// The state at `base_op` (the snapshot's payload, or a new state), then every op after it up
/// to `head`, read in bounded batches by `read(from, to)`.
fn restore(
    replica_count: u8,
    snapshot: Option<&(iggy_snapshot::SnapshotHeader, Vec<u8>)>,
    base_op: u64,
    head: u64,
    mut read: impl FnMut(u64, u64) -> Result<Vec<iggy_wal::Entry>, GroupError>,
) -> Result<State, GroupError> {
    let mut state = match snapshot {
        None => State::new(replica_count),
        Some((header, payload)) => {
            codec::decode(header.payload_version, payload).map_err(GroupError::Payload)?
        }
    };
    let mut op = base_op + 1;
    while op <= head {
        let last = head.min(op + 1023);
        for entry in read(op, last)? {
            let decoded = codec::decode_op(&entry.body).map_err(|error| GroupError::Decode {
                op: entry.header.op,
                error,
            })?;
            // A refused op is a deterministic no-op: it was refused the first time too.
            let _ = state.apply(&decoded);
        }
        op = last + 1;
    }
    Ok(state)
}

/// Runs the restore's decisions without writing (the storage may be read-only): superblock
/// copies, the WAL's boot analysis, the snapshot and log rules of the module docs, and the
/// replay of the ops the restore applies (read-only). `Ok(None)`: no group here.
pub fn check<R: ReadStorage>(
    storage: &R,
    dir: &Path,
    identity: &Identity,
) -> Result<Option<Checked>, GroupError> {
    Ok(plan(storage, dir, identity)?.map(|(checked, _)| checked))
}

/// The one analysis of the group, shared by [`check`] and [`MetadataGroup::open_reporting`]:
/// read-only and complete (the state is restored too) before the open changes anything, so a
/// group boot refuses is left as it was. Also returns the WAL's boot plan (`None`: no WAL yet).
fn plan<R: ReadStorage>(
    storage: &R,
    dir: &Path,
    identity: &Identity,
) -> Result<Option<(Checked, Option<iggy_wal::boot::Plan>)>, GroupError> {
    let (record, superblock_repairs) = match iggy_superblock::read(storage, dir, identity)? {
        iggy_superblock::Opened::Fresh => return Ok(None),
        iggy_superblock::Opened::Present {
            record, repairs, ..
        } => (record, repairs),
    };
    let leftovers = leftovers(storage, dir)?;
    let wal_dir = dir.join(WAL_DIR);
    let Some(wal) = iggy_wal::boot::plan(storage, &wal_dir, GROUP_ID, iggy_wal::Naming::ByOp)?
    else {
        // Creation writes the superblock, then the WAL: a crash in between leaves the
        // superblock at its creation record and no log. Nothing was ever acknowledged, so the
        // open finishes the creation; a superblock that has moved on without its log refuses.
        if record.sequence == 1 {
            let checked = Checked {
                superblock_repairs,
                wal: None,
                wal_creation: iggy_wal::boot::creation_findings(storage, &wal_dir)?,
                leftovers,
                base_op: 0,
                state: State::new(identity.replica_count),
            };
            return Ok(Some((checked, None)));
        }
        return Err(GroupError::LogMissing {
            dir: dir.to_path_buf(),
        });
    };
    let report = wal.report();
    let snapshot = iggy_snapshot::read(storage, dir)?;
    let log = Log {
        first_op: report.first_op,
        head_op: report.head_op,
    };
    let base_op = decide(
        dir,
        &record.state,
        snapshot.as_ref().map(|(header, _)| header),
        log,
        |op| Ok(iggy_wal::boot::header_at(storage, report, op)?.checksum()),
    )?;
    // Every published op after the snapshot, in order.
    let state = restore(
        identity.replica_count,
        snapshot.as_ref(),
        base_op,
        report.head_op,
        |from, to| Ok(iggy_wal::boot::read_entries(storage, report, from, to)?),
    )?;
    let checked = Checked {
        superblock_repairs,
        wal: Some(report.clone()),
        wal_creation: Vec::new(),
        leftovers,
        base_op,
        state,
    };
    Ok(Some((checked, Some(wal))))
}

/// The metadata group: state, log and checkpoint, on one storage.
pub struct MetadataGroup<S: Storage + Clone> {
    storage: S,
    dir: PathBuf,
    wal: Wal<S>,
    superblock: Superblock<S>,
    state: State,
    applied_op: u64,
}

impl<S: Storage + Clone> MetadataGroup<S> {
    /// Creates the metadata group of a new node in `dir`: the superblock first (so files
    /// without one mean lost state, never a new node), then the empty WAL.
    pub fn create(
        storage: S,
        dir: &Path,
        identity: Identity,
        wal: Config,
    ) -> Result<Self, GroupError> {
        let superblock = Superblock::create(storage.clone(), dir, identity, VsrState::default())?;
        let wal = Wal::create(storage.clone(), &dir.join(WAL_DIR), wal, 1, 0)?;
        let state = State::new(identity.replica_count);
        Ok(Self {
            storage,
            dir: dir.to_path_buf(),
            wal,
            superblock,
            state,
            applied_op: 0,
        })
    }

    /// Restores the group from disk (see the module docs). `Ok(None)`: no group here.
    pub fn open(
        storage: S,
        dir: &Path,
        identity: &Identity,
        wal: Config,
    ) -> Result<Option<Self>, GroupError> {
        Ok(Self::open_reporting(storage, dir, identity, wal)?.map(|(group, _)| group))
    }

    /// [`MetadataGroup::open`], also returning what it found and did, in the form [`check`]
    /// reports it: the same analysis (and restored state), made before anything is changed.
    pub fn open_reporting(
        storage: S,
        dir: &Path,
        identity: &Identity,
        wal: Config,
    ) -> Result<Option<(Self, Checked)>, GroupError> {
        let Some((checked, wal_plan)) = plan(&storage, dir, identity)? else {
            // Nothing here; a leftover superblock.tmp of an unfinished creation is removed.
            Superblock::open(storage.clone(), dir, identity, RepairPolicy::Repair)?;
            return Ok(None);
        };
        let (superblock, _) =
            Superblock::open(storage.clone(), dir, identity, RepairPolicy::Repair)?.ok_or_else(
                || GroupError::LogMissing {
                    dir: dir.to_path_buf(),
                },
            )?;
        // Nothing reads them; removed before anything could write them again.
        iggy_snapshot::remove_leftovers(&storage, dir)?;
        let wal_dir = dir.join(WAL_DIR);
        let wal = match wal_plan {
            Some(plan) => Wal::open_planned(storage.clone(), &wal_dir, wal, plan)?.0,
            None => Wal::create(storage.clone(), &wal_dir, wal, 1, 0)?,
        };
        let applied_op = wal.head().0.max(checked.base_op);
        let group = Self {
            storage,
            dir: dir.to_path_buf(),
            wal,
            superblock,
            state: checked.state.clone(),
            applied_op,
        };
        Ok(Some((group, checked)))
    }

    /// Logs `op`, makes it durable (metadata is published before it is acknowledged), and
    /// applies it. The outer error is a storage failure; the inner one the op's refusal.
    pub fn submit(&mut self, op: &Op) -> Result<Result<Applied, ApplyError>, GroupError> {
        let body = match codec::encode_op(op) {
            Ok(body) => body,
            Err(refused) => return Ok(Err(refused)),
        };
        let number = self.wal.append_body(&body, 0, 0)?;
        self.wal.wait_published(number)?;
        self.applied_op = number;
        let result = self.state.apply(op);
        if number - self.superblock.state().checkpoint_op >= CHECKPOINT_INTERVAL_OPS {
            self.checkpoint()?;
        }
        Ok(result)
    }

    /// Checkpoints the state at the last applied op: snapshot, then superblock, then the WAL
    /// prefix (each durable before the next).
    pub fn checkpoint(&mut self) -> Result<(), GroupError> {
        let op = self.applied_op;
        if op == 0 || op == self.superblock.state().checkpoint_op {
            return Ok(());
        }
        let checksum = self.wal.read(op, op)?[0].header.checksum();
        let payload = codec::encode(&self.state);
        iggy_snapshot::write(
            &self.storage,
            &self.dir,
            op,
            checksum,
            PAYLOAD_VERSION,
            &payload,
        )?;
        let current = *self.superblock.state();
        self.superblock.write(VsrState {
            commit_max: current.commit_max.max(op),
            checkpoint_op: op,
            checkpoint_checksum: checksum,
            ..current
        })?;
        self.wal.drop_prefix(op)?;
        Ok(())
    }

    pub fn state(&self) -> &State {
        &self.state
    }

    pub fn applied_op(&self) -> u64 {
        self.applied_op
    }

    pub fn superblock(&self) -> &Superblock<S> {
        &self.superblock
    }
}
