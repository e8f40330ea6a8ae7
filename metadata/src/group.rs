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
use iggy_wal::{Config, Mode, Wal, WalError};

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
    /// finishes it).
    pub wal: Option<iggy_wal::Report>,
    /// The op of the snapshot the restore starts from (0: no snapshot).
    pub base_op: u64,
}

/// Runs the restore's decisions without writing (the storage may be read-only): superblock
/// copies, the WAL's boot analysis, and the snapshot and log rules of the module docs. It does
/// not replay ops. `Ok(None)`: no group here.
pub fn check<R: ReadStorage>(
    storage: &R,
    dir: &Path,
    identity: &Identity,
) -> Result<Option<Checked>, GroupError> {
    let (record, superblock_repairs) = match iggy_superblock::read(storage, dir, identity)? {
        iggy_superblock::Opened::Fresh => return Ok(None),
        iggy_superblock::Opened::Present {
            record, repairs, ..
        } => (record, repairs),
    };
    let wal_dir = dir.join(WAL_DIR);
    let wal = iggy_wal::check(storage, &wal_dir, GROUP_ID)?;
    let Some(report) = wal else {
        if record.sequence == 1 {
            return Ok(Some(Checked {
                superblock_repairs,
                wal: None,
                base_op: 0,
            }));
        }
        return Err(GroupError::LogMissing {
            dir: dir.to_path_buf(),
        });
    };
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
        |op| Ok(iggy_wal::boot::header_at(storage, &report, op)?.checksum()),
    )?;
    Ok(Some(Checked {
        superblock_repairs,
        wal: Some(report),
        base_op,
    }))
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
    /// reports it (boot reports the group without analysing it a second time).
    pub fn open_reporting(
        storage: S,
        dir: &Path,
        identity: &Identity,
        wal: Config,
    ) -> Result<Option<(Self, Checked)>, GroupError> {
        let Some((superblock, superblock_repairs)) =
            Superblock::open(storage.clone(), dir, identity, RepairPolicy::Repair)?
        else {
            return Ok(None);
        };
        let wal_dir = dir.join(WAL_DIR);
        let mut wal_report = None;
        let wal = match Wal::open(storage.clone(), &wal_dir, wal.clone(), Mode::Open)? {
            Some((wal, report)) => {
                wal_report = Some(report);
                wal
            }
            // Creation writes the superblock, then the WAL: a crash in between leaves the
            // superblock at its creation record and no log. Nothing was ever acknowledged, so
            // creation is finished; a superblock that has moved on without its log refuses.
            None if superblock.record().sequence == 1 => {
                Wal::create(storage.clone(), &wal_dir, wal, 1, 0)?
            }
            None => {
                return Err(GroupError::LogMissing {
                    dir: dir.to_path_buf(),
                });
            }
        };
        let snapshot = iggy_snapshot::read(&storage, dir)?;
        let log = Log {
            first_op: wal.first_op(),
            head_op: wal.head().0,
        };
        let base_op = decide(
            dir,
            superblock.state(),
            snapshot.as_ref().map(|(header, _)| header),
            log,
            |op| Ok(wal.read(op, op)?[0].header.checksum()),
        )?;
        let mut state = match snapshot {
            None => State::new(identity.replica_count),
            Some((header, payload)) => {
                codec::decode(header.payload_version, &payload).map_err(GroupError::Payload)?
            }
        };
        let head = wal.head().0;
        if head > base_op {
            // Replay in bounded batches: every published op after the snapshot, in order.
            let mut op = base_op + 1;
            while op <= head {
                let last = head.min(op + 1023);
                for entry in wal.read(op, last)? {
                    let decoded =
                        codec::decode_op(&entry.body).map_err(|error| GroupError::Decode {
                            op: entry.header.op,
                            error,
                        })?;
                    // A refused op is a deterministic no-op: it was refused the first time too.
                    let _ = state.apply(&decoded);
                }
                op = last + 1;
            }
        }
        let applied_op = head.max(base_op);
        let checked = Checked {
            superblock_repairs,
            wal: wal_report,
            base_op,
        };
        let group = Self {
            storage,
            dir: dir.to_path_buf(),
            wal,
            superblock,
            state,
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
