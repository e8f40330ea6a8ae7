//! The metadata consensus group on disk: its superblock, its WAL of prepares, and
//! `snapshot.bin`, as a replicated state machine. A primary prepares an op
//! ([`MetadataGroup::prepare`]), every backup journals the primary's bytes
//! ([`MetadataGroup::journal`]); each is durable before it returns (metadata is persisted).
//! [`MetadataGroup::commit`] executes journaled prepares in order and returns their replies;
//! [`MetadataGroup::truncate_after`] cuts an uncommitted suffix and never reaches the commit
//! point. Boot restores the snapshot and replays only up to the commit point (the superblock's
//! `commit_max`, raised to the one the head prepare names; with one replica, every journaled
//! op: a quorum of one): the uncommitted suffix stays journaled, unapplied.
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
//!
//! Install order (a replica below a peer's log takes that peer's snapshot,
//! [`MetadataGroup::install_staged`]; each step durable before the next): the snapshot staged and
//! verified as `snapshot.bin.receiving`, then the superblock's checkpoint (its op and checksum):
//! the install's commit point; then the staged file renamed over `snapshot.bin`; then the log,
//! which ends below the checkpoint, moved aside to `wal.superseded` and a new empty one made
//! after the checkpoint, chained to its checksum; then `wal.superseded` removed. Boot takes a
//! crash at any step to the old group (before the commit point: the staged file is a leftover
//! it removes) or to the installed one (after: it finishes the rename, recreates the log when it
//! ends below the checkpoint or is missing, and removes `wal.superseded`), never a mix.

use std::path::{Path, PathBuf};

use iggy_io::{ReadStorage, Storage};
use iggy_snapshot::transfer::SnapshotId;
use iggy_superblock::{Identity, RepairPolicy, Superblock, SuperblockError, VsrState};
use iggy_wal::{Config, Wal, WalError};

use crate::codec::{self, DecodeError, PAYLOAD_VERSION};
use iggy_format::{Header, Position, PrepareMeta, operation};

use crate::{Applied, ApplyError, Executed, Op, PartitionKeys, State};

/// The WAL's directory inside the metadata directory.
pub const WAL_DIR: &str = "wal";
/// Where an install moves the log its checkpoint superseded, until it is removed.
pub const SUPERSEDED_WAL_DIR: &str = "wal.superseded";
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
    #[error(
        "{dir}: wal.superseded holds ops up to {head_op}, past the checkpoint {checkpoint_op}: not \
         the log an install replaced"
    )]
    SupersededAhead {
        dir: PathBuf,
        head_op: u64,
        checkpoint_op: u64,
    },
    #[error("metadata op {op} in the WAL does not decode: {error}")]
    Decode { op: u64, error: DecodeError },
    #[error(transparent)]
    Payload(DecodeError),
    #[error(transparent)]
    Refused(#[from] ApplyError),
    #[error("{dir}: prepare of op {op} refused: {reason}")]
    BadPrepare {
        dir: PathBuf,
        op: u64,
        reason: String,
    },
    #[error("{dir}: {what} op {op} is below the commit point {commit}")]
    BelowCommit {
        dir: PathBuf,
        what: &'static str,
        op: u64,
        commit: u64,
    },
    #[error(
        "{dir}: op {op} does not fit the journal ({JOURNAL_OPS} ops past checkpoint {checkpoint_op})"
    )]
    JournalFull {
        dir: PathBuf,
        op: u64,
        checkpoint_op: u64,
    },
}

impl From<SuperblockError> for GroupError {
    fn from(error: SuperblockError) -> Self {
        Self::Superblock(Box::new(error))
    }
}

impl From<iggy_io::Error> for GroupError {
    fn from(error: iggy_io::Error) -> Self {
        Self::Wal(Box::new(WalError::from(error)))
    }
}

/// A transfer step's failure: a storage error, or the reason a chunk or a snapshot is refused.
fn refusal(error: iggy_snapshot::transfer::TransferError) -> Result<String, GroupError> {
    match error {
        iggy_snapshot::transfer::TransferError::Io(e) => Err(e.into()),
        refused => Ok(refused.to_string()),
    }
}

impl From<WalError> for GroupError {
    fn from(error: WalError) -> Self {
        Self::Wal(Box::new(error))
    }
}

impl GroupError {
    /// Whether it failed for want of space or descriptors ([`iggy_io::Error::is_exhaustion`]):
    /// the log's next file, or a checkpoint's snapshot, could not be written. Either leaves the
    /// group as it was (the log without the op, the last checkpoint standing), so the caller may
    /// refuse the op, or put the checkpoint off, and try again later.
    #[must_use]
    pub fn is_exhaustion(&self) -> bool {
        match self {
            Self::Wal(e) => matches!(&**e, WalError::Io(e) if e.is_exhaustion()),
            Self::Snapshot(iggy_snapshot::SnapshotError::Io(e)) => e.is_exhaustion(),
            _ => false,
        }
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
    /// The op the restored state is applied through: the commit point.
    pub commit_op: u64,
    /// The journaled head (past `commit_op`: prepares journaled but not committed).
    pub head_op: u64,
    /// The state the restore yields (what a node's partitions are checked against).
    pub state: State,
    /// The snapshot the restore starts from, once any unfinished install is finished (the one
    /// a peer's transfer is served).
    pub snapshot: Option<iggy_snapshot::SnapshotHeader>,
    /// An install a crash interrupted after its commit point, which open finishes.
    pub install: Option<InstallRollForward>,
    /// A `wal.superseded` an install left: open removes it.
    pub superseded_log: Option<PathBuf>,
    /// The partitions the snapshot's state lists (`(stream, topic, partition)`): a node
    /// creates a partition's directory before it takes a checkpoint that lists it, so one of
    /// these without its directory lost it, while a partition only a replayed op lists may be
    /// a create the crash interrupted.
    pub base_partitions: PartitionKeys,
}

/// What boot finishes of an install whose superblock step (its commit point) was durable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstallRollForward {
    /// The installed checkpoint.
    pub checkpoint_op: u64,
    /// `snapshot.bin.receiving` still holds it: renamed over `snapshot.bin`.
    pub publish_staged: bool,
    /// The log ends below the checkpoint, or is gone: a new empty one is made after it.
    pub reset_log: bool,
    /// The first and head op of the log the checkpoint superseded (`None`: no log left).
    pub superseded: Option<(u64, u64)>,
}

/// Moves the log in `dir` aside (if there is one) and makes a new empty one whose first op is
/// `op + 1`, chained to `checksum`; then removes the old one. Each step durable.
fn reset_log<S: Storage + Clone>(
    storage: &S,
    dir: &Path,
    config: Config,
    op: u64,
    checksum: u128,
) -> Result<Wal<S>, GroupError> {
    let wal_dir = dir.join(WAL_DIR);
    let aside = dir.join(SUPERSEDED_WAL_DIR);
    if storage.exists(&wal_dir)? {
        if storage.exists(&aside)? {
            storage.remove_dir_all(&aside)?;
        }
        storage.rename(&wal_dir, &aside)?;
        storage.sync_dir(dir)?;
    }
    let wal = Wal::create(storage.clone(), &wal_dir, config, op + 1, checksum)?;
    remove_superseded(storage, dir)?;
    Ok(wal)
}

/// Removes `wal.superseded`, durably, if an install left one.
fn remove_superseded<S: Storage>(storage: &S, dir: &Path) -> Result<(), GroupError> {
    let aside = dir.join(SUPERSEDED_WAL_DIR);
    if storage.exists(&aside)? {
        storage.remove_dir_all(&aside)?;
        storage.sync_dir(dir)?;
    }
    Ok(())
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

/// The state at `base_op` (the snapshot's payload, or a new state), then every prepare after
/// it through `through` executed in order, read in bounded batches by `read(from, to)`; and the
/// partitions the state at `base_op` lists.
fn restore(
    replica_count: u8,
    snapshot: Option<&(iggy_snapshot::SnapshotHeader, Vec<u8>)>,
    base_op: u64,
    through: u64,
    mut read: impl FnMut(u64, u64) -> Result<Vec<iggy_wal::Entry>, GroupError>,
) -> Result<(State, PartitionKeys), GroupError> {
    let mut state = match snapshot {
        None => State::new(replica_count),
        Some((header, payload)) => {
            codec::decode(header.payload_version, payload).map_err(GroupError::Payload)?
        }
    };
    let base_partitions = state.partition_keys();
    let mut op = base_op + 1;
    while op <= through {
        let last = through.min(op + 1023);
        for entry in read(op, last)? {
            execute(&mut state, &entry)?;
        }
        op = last + 1;
    }
    Ok((state, base_partitions))
}

/// Executes one committed prepare on `state`. A refused op is a deterministic no-op: it was
/// refused the first time too, with the same reply.
fn execute(state: &mut State, entry: &iggy_wal::Entry) -> Result<Executed, GroupError> {
    let decoded = codec::decode_op(&entry.body).map_err(|error| GroupError::Decode {
        op: entry.header.op,
        error,
    })?;
    let header = &entry.header;
    Ok(state.execute_at(
        (header.view, header.timestamp_ns / 1_000),
        header.op,
        (header.client, header.request, header.request_checksum),
        &decoded,
    ))
}

/// The op a boot restores the state through: the superblock's commit point raised to
/// `proven` (the commit point the head prepare names: its primary had committed every op up to
/// it, and the hash chain makes this log's prefix that primary's), never below the snapshot
/// (taken only at a committed op), or with a single replica every journaled op (a quorum of one
/// commits what it journals).
fn commit_point(replica_count: u8, vsr: &VsrState, proven: u64, base_op: u64, head_op: u64) -> u64 {
    if replica_count == 1 {
        head_op.max(base_op)
    } else {
        vsr.commit_max.max(proven).min(head_op).max(base_op)
    }
}

/// Runs the restore's decisions without writing (the storage may be read-only): superblock
/// copies, the WAL's boot analysis, the snapshot and log rules of the module docs, and the
/// replay of the ops the restore applies (read-only). `Ok(None)`: no group here.
pub fn check<R: ReadStorage>(
    storage: &R,
    dir: &Path,
    identity: &Identity,
) -> Result<Option<Checked>, GroupError> {
    check_verifying(storage, dir, identity, iggy_wal::boot::Verify::Sealed)
}

/// [`check`], reading as much of the WAL's retained files as `verify` says.
pub fn check_verifying<R: ReadStorage>(
    storage: &R,
    dir: &Path,
    identity: &Identity,
    verify: iggy_wal::boot::Verify,
) -> Result<Option<Checked>, GroupError> {
    Ok(plan(storage, dir, identity, verify)?.map(|(checked, _)| checked))
}

/// The one analysis of the group, shared by [`check`] and [`MetadataGroup::open_reporting`]:
/// read-only and complete (the state is restored too) before the open changes anything, so a
/// group boot refuses is left as it was. Also returns the WAL's boot plan (`None`: no WAL yet).
fn plan<R: ReadStorage>(
    storage: &R,
    dir: &Path,
    identity: &Identity,
    verify: iggy_wal::boot::Verify,
) -> Result<Option<(Checked, Option<iggy_wal::boot::Plan>)>, GroupError> {
    let (record, superblock_repairs) = match iggy_superblock::read(storage, dir, identity)? {
        iggy_superblock::Opened::Fresh => return Ok(None),
        iggy_superblock::Opened::Present {
            record, repairs, ..
        } => (record, repairs),
    };
    let mut leftovers = leftovers(storage, dir)?;
    let wal_dir = dir.join(WAL_DIR);
    let superseded_log = {
        let aside = dir.join(SUPERSEDED_WAL_DIR);
        storage.exists(&aside)?.then_some(aside)
    };
    // An install whose superblock step was durable before its rename: the staged snapshot is
    // the checkpoint's.
    let checkpoint_op = record.state.checkpoint_op;
    if let Some(aside) = &superseded_log
        && let Some(superseded) = iggy_wal::boot::plan_verifying(
            storage,
            aside,
            GROUP_ID,
            iggy_wal::Naming::ByOp,
            iggy_wal::boot::Verify::Sealed,
        )?
        && superseded.report().head_op >= checkpoint_op
    {
        // An install moves aside only a log that ends below its checkpoint: this one is not
        // an install's leftover, and removing it could lose ops.
        return Err(GroupError::SupersededAhead {
            dir: dir.to_path_buf(),
            head_op: superseded.report().head_op,
            checkpoint_op,
        });
    }
    let mut snapshot = iggy_snapshot::read(storage, dir)?;
    let mut publish_staged = false;
    if checkpoint_op > 0
        && snapshot
            .as_ref()
            .is_none_or(|(header, _)| header.checkpoint_op < checkpoint_op)
        && let Some(staged) = iggy_snapshot::transfer::read_staged(storage, dir)?
        && staged.0.checkpoint_op == checkpoint_op
        && staged.0.checkpoint_checksum == record.state.checkpoint_checksum
    {
        snapshot = Some(staged);
        publish_staged = true;
        leftovers.retain(|f| !f.ends_with(iggy_snapshot::transfer::RECEIVING_FILE_NAME));
    }
    let installed = snapshot
        .as_ref()
        .is_some_and(|(header, _)| checkpoint_op > 0 && header.checkpoint_op == checkpoint_op);
    // The analysis of an install past its commit point whose log is made anew (`superseded`:
    // what the old log held, if any is left).
    let roll_forward = |superseded: Option<(u64, u64)>| {
        let install = InstallRollForward {
            checkpoint_op,
            publish_staged,
            reset_log: true,
            superseded,
        };
        installed_checked(
            identity,
            snapshot.as_ref(),
            superblock_repairs.clone(),
            leftovers.clone(),
            install,
            superseded_log.clone(),
        )
    };
    let Some(wal) = iggy_wal::boot::plan_verifying(
        storage,
        &wal_dir,
        GROUP_ID,
        iggy_wal::Naming::ByOp,
        verify,
    )?
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
                commit_op: 0,
                head_op: 0,
                state: State::new(identity.replica_count),
                snapshot: None,
                install: None,
                superseded_log,
                base_partitions: PartitionKeys::new(),
            };
            return Ok(Some((checked, None)));
        }
        // An install moved the log aside after its commit point and stopped before the new
        // one existed: the checkpoint holds everything, and the log is made anew after it. (A
        // log missing with nothing moved aside was lost: refused below.)
        if installed && superseded_log.is_some() {
            return Ok(Some((roll_forward(None)?, None)));
        }
        return Err(GroupError::LogMissing {
            dir: dir.to_path_buf(),
        });
    };
    let report = wal.report();
    if installed && report.head_op < checkpoint_op {
        // The log ends below the installed checkpoint: an install stopped after its commit
        // point, before the log was made anew. Nothing of it is needed.
        return Ok(Some((
            roll_forward(Some((report.first_op, report.head_op)))?,
            None,
        )));
    }
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
    // Every committed op after the snapshot, in order.
    let proven = if report.head_op >= report.first_op.max(1) {
        iggy_wal::boot::header_at(storage, report, report.head_op)?.commit
    } else {
        0
    };
    let commit_op = commit_point(
        identity.replica_count,
        &record.state,
        proven,
        base_op,
        report.head_op,
    );
    let (state, base_partitions) = restore(
        identity.replica_count,
        snapshot.as_ref(),
        base_op,
        commit_op,
        |from, to| Ok(iggy_wal::boot::read_entries(storage, report, from, to)?),
    )?;
    let checked = Checked {
        superblock_repairs,
        wal: Some(report.clone()),
        wal_creation: Vec::new(),
        leftovers,
        base_op,
        commit_op,
        head_op: report.head_op,
        state,
        snapshot: snapshot.as_ref().map(|(header, _)| *header),
        install: publish_staged.then_some(InstallRollForward {
            checkpoint_op,
            publish_staged,
            reset_log: false,
            superseded: None,
        }),
        superseded_log,
        base_partitions,
    };
    Ok(Some((checked, Some(wal))))
}

/// The analysis of a group an install left past its commit point with no log to keep: the
/// checkpoint's state, nothing after it.
fn installed_checked(
    identity: &Identity,
    snapshot: Option<&(iggy_snapshot::SnapshotHeader, Vec<u8>)>,
    superblock_repairs: Vec<iggy_superblock::CopyRepair>,
    leftovers: Vec<PathBuf>,
    install: InstallRollForward,
    superseded_log: Option<PathBuf>,
) -> Result<Checked, GroupError> {
    let op = install.checkpoint_op;
    let (state, base_partitions) = restore(identity.replica_count, snapshot, op, op, |_, _| {
        Ok(Vec::new())
    })?;
    Ok(Checked {
        superblock_repairs,
        wal: None,
        wal_creation: Vec::new(),
        leftovers,
        base_op: op,
        commit_op: op,
        head_op: op,
        state,
        snapshot: snapshot.map(|(header, _)| *header),
        install: Some(install),
        superseded_log,
        base_partitions,
    })
}

/// One committed prepare and its reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Committed {
    pub op: u64,
    pub client: u128,
    pub request: u64,
    /// The reply bytes the client gets (a duplicate's are its first execution's).
    pub reply: Vec<u8>,
    /// The op's outcome; `None` for a duplicate request.
    pub result: Option<Result<Applied, ApplyError>>,
}

/// The metadata group: state, log and checkpoint, on one storage.
pub struct MetadataGroup<S: Storage + Clone> {
    storage: S,
    dir: PathBuf,
    identity: Identity,
    wal: Wal<S>,
    superblock: Superblock<S>,
    state: State,
    /// The op the state is applied through (the commit point): a cut never goes below it.
    commit_op: u64,
    /// How the log is laid out (an install makes a new one).
    wal_config: Config,
    /// A peer's snapshot being received, staged in `snapshot.bin.receiving`.
    receiving: Option<iggy_snapshot::transfer::Receiver<S>>,
    /// The live snapshot's identity and checkpoint checksum (what a peer's transfer is
    /// served), `None` before the first checkpoint.
    snapshot: Option<(SnapshotId, u128)>,
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
        let wal_config = wal.clone();
        let wal = Wal::create(storage.clone(), &dir.join(WAL_DIR), wal, 1, 0)?;
        let state = State::new(identity.replica_count);
        Ok(Self {
            storage,
            dir: dir.to_path_buf(),
            identity,
            wal,
            superblock,
            state,
            commit_op: 0,
            wal_config,
            receiving: None,
            snapshot: None,
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
        let policy = RepairPolicy::at_boot(wal.previous_shutdown_clean, wal.defer_boot_syncs);
        let Some((checked, wal_plan)) =
            plan(&storage, dir, identity, iggy_wal::boot::Verify::Sealed)?
        else {
            // Nothing here; a leftover superblock.tmp of an unfinished creation is removed.
            Superblock::open(storage.clone(), dir, identity, policy)?;
            return Ok(None);
        };
        let (superblock, _) = Superblock::open(storage.clone(), dir, identity, policy)?
            .ok_or_else(|| GroupError::LogMissing {
                dir: dir.to_path_buf(),
            })?;
        // An install past its commit point is finished first: its staged snapshot is not a
        // leftover.
        if let Some(install) = &checked.install
            && install.publish_staged
        {
            iggy_snapshot::transfer::publish_staged(&storage, dir)?;
        }
        // Nothing reads them; removed before anything could write them again.
        iggy_snapshot::remove_leftovers(&storage, dir)?;
        let wal_dir = dir.join(WAL_DIR);
        let wal_config = wal.clone();
        let wal = match (wal_plan, &checked.install) {
            (_, Some(install)) if install.reset_log => reset_log(
                &storage,
                dir,
                wal,
                install.checkpoint_op,
                superblock.state().checkpoint_checksum,
            )?,
            (Some(plan), _) => Wal::open_planned(storage.clone(), &wal_dir, wal, plan)?.0,
            (None, _) => Wal::create(storage.clone(), &wal_dir, wal, 1, 0)?,
        };
        remove_superseded(&storage, dir)?;
        let group = Self {
            storage,
            dir: dir.to_path_buf(),
            identity: *identity,
            wal,
            superblock,
            state: checked.state.clone(),
            commit_op: checked.commit_op,
            wal_config,
            receiving: None,
            snapshot: checked
                .snapshot
                .map(|h| (SnapshotId::of(&h), h.checkpoint_checksum)),
        };
        Ok(Some((group, checked)))
    }

    /// The primary's half: builds the prepare of `op` at the head (stamped with `meta`: view,
    /// commit, client and request) and journals it; returns it for the backups. The outer
    /// error is a storage failure; the inner one refuses an op the log cannot hold (a name
    /// out of bounds).
    pub fn prepare(
        &mut self,
        op: &Op,
        meta: &PrepareMeta,
    ) -> Result<Result<(Header, Vec<u8>), ApplyError>, GroupError> {
        let body = match codec::encode_op(op) {
            Ok(body) => body,
            Err(refused) => return Ok(Err(refused)),
        };
        let (head, parent) = self.wal.head();
        let position = Position {
            cluster: self.identity.cluster,
            group: GROUP_ID,
            after: head,
            parent,
        };
        let header =
            Header::prepare(position, operation::METADATA, meta, &body).ok_or_else(|| {
                GroupError::BadPrepare {
                    dir: self.dir.clone(),
                    op: head + 1,
                    reason: format!("a body of {} bytes", body.len()),
                }
            })?;
        self.journal(&header, &body)?;
        Ok(Ok((header, body)))
    }

    /// A backup's half: checks the primary's prepare (this cluster's, a metadata op that
    /// decodes, the head's successor by op and parent, within the journal) and journals its
    /// bytes; durable before it returns. Journaling the head again is a no-op.
    pub fn journal(&mut self, header: &Header, body: &[u8]) -> Result<(), GroupError> {
        let refuse = |reason: String| GroupError::BadPrepare {
            dir: self.dir.clone(),
            op: header.op,
            reason,
        };
        if header.cluster != self.identity.cluster {
            return Err(refuse(format!(
                "another cluster's prepare ({:#x})",
                header.cluster
            )));
        }
        if header.operation != operation::METADATA {
            return Err(refuse(format!(
                "operation {} ({}) is not a metadata operation",
                header.operation,
                operation::name(header.operation)
            )));
        }
        if let Err(error) = codec::decode_op(body) {
            return Err(refuse(format!("the op does not decode: {error}")));
        }
        if header.op > self.superblock.state().checkpoint_op + JOURNAL_OPS
            && self.commit_op > self.superblock.state().checkpoint_op
        {
            // The state is applied past the checkpoint without one having been taken: a boot
            // restored it through the commit point its log proves. Taken now, it frees the
            // journal's prefix.
            self.checkpoint()?;
        }
        let checkpoint_op = self.superblock.state().checkpoint_op;
        if header.op > checkpoint_op + JOURNAL_OPS {
            return Err(GroupError::JournalFull {
                dir: self.dir.clone(),
                op: header.op,
                checkpoint_op,
            });
        }
        if let iggy_wal::Appended::Queued { op } = self.wal.append(header, body)? {
            self.wal.wait_published(op)?;
        }
        Ok(())
    }

    /// Executes every journaled prepare up to `op` in order and returns their replies; takes a
    /// checkpoint when the interval is reached. At or below the commit point it does nothing;
    /// `op` must be journaled. The durable commit point is the superblock's (`write_vsr`).
    pub fn commit(&mut self, op: u64) -> Result<Vec<Committed>, GroupError> {
        let committed = self.commit_deferring_checkpoint(op)?;
        if self.checkpoint_due() {
            self.checkpoint()?;
        }
        Ok(committed)
    }

    /// Whether the commit point is a checkpoint interval past the last checkpoint.
    #[must_use]
    pub fn checkpoint_due(&self) -> bool {
        self.commit_op - self.superblock.state().checkpoint_op >= CHECKPOINT_INTERVAL_OPS
    }

    /// [`MetadataGroup::commit`] without the checkpoint: a node creates the directories of the
    /// partitions the ops created before it checkpoints a state that lists them
    /// ([`Checked::base_partitions`]), then calls [`MetadataGroup::checkpoint`] when
    /// [`MetadataGroup::checkpoint_due`].
    pub fn commit_deferring_checkpoint(&mut self, op: u64) -> Result<Vec<Committed>, GroupError> {
        if op <= self.commit_op {
            return Ok(Vec::new());
        }
        let head = self.wal.head().0;
        if op > head {
            return Err(GroupError::BadPrepare {
                dir: self.dir.clone(),
                op,
                reason: format!("commit past the journaled head {head}"),
            });
        }
        let mut committed = Vec::new();
        while self.commit_op < op {
            let from = self.commit_op + 1;
            let to = op.min(from + 1023);
            for entry in self.wal.read(from, to)? {
                let executed = execute(&mut self.state, &entry)?;
                self.commit_op = entry.header.op;
                committed.push(Committed {
                    op: entry.header.op,
                    client: entry.header.client,
                    request: entry.header.request,
                    reply: executed.reply,
                    result: executed.result,
                });
            }
        }
        Ok(committed)
    }

    /// Drops every journaled prepare after `op` (an uncommitted suffix a view change
    /// replaced); `op` at or above the commit point. Durable before it returns.
    pub fn truncate_after(&mut self, op: u64) -> Result<(), GroupError> {
        if op < self.commit_op {
            return Err(GroupError::BelowCommit {
                dir: self.dir.clone(),
                what: "truncate after",
                op,
                commit: self.commit_op,
            });
        }
        if op >= self.wal.head().0 {
            return Ok(());
        }
        self.wal.truncate_after(op)?;
        Ok(())
    }

    /// Makes `state` the durable VSR state (view, log_view, commit_max; both superblock copies
    /// synced before it returns). The checkpoint is the group's own: kept, whatever `state`
    /// says.
    pub fn write_vsr(&mut self, state: VsrState) -> Result<(), GroupError> {
        let current = *self.superblock.state();
        self.superblock.write(VsrState {
            checkpoint_op: current.checkpoint_op,
            checkpoint_checksum: current.checkpoint_checksum,
            offset_frontier: current.offset_frontier,
            ..state
        })?;
        Ok(())
    }

    /// The durable VSR state.
    pub fn vsr_state(&self) -> VsrState {
        *self.superblock.state()
    }

    /// A single node's (or a test's) whole round, the caller acting as the whole cluster:
    /// prepares `op`, commits it, and with more than one replica also makes the commit point
    /// durable in the superblock, so a boot replays it. Prepares a crash left journaled past the
    /// commit point were never acknowledged: the caller decides they did not commit, and they
    /// are cut first. The outer error is a storage failure; the inner one the op's refusal.
    pub fn submit(&mut self, op: &Op) -> Result<Result<Applied, ApplyError>, GroupError> {
        Ok(self
            .submit_with(op, &PrepareMeta::default())?
            .and_then(|committed| {
                committed.result.unwrap_or_else(|| {
                    unreachable!("a prepare with no client is never a duplicate")
                })
            }))
    }

    /// [`MetadataGroup::submit`] of a client's request (`meta` names the client and request):
    /// returns what the commit gave, the reply bytes included.
    pub fn submit_with(
        &mut self,
        op: &Op,
        meta: &PrepareMeta,
    ) -> Result<Result<Committed, ApplyError>, GroupError> {
        if self.head_op() > self.commit_op {
            self.truncate_after(self.commit_op)?;
        }
        let (header, _) = match self.prepare(op, meta)? {
            Ok(prepared) => prepared,
            Err(refused) => return Ok(Err(refused)),
        };
        let committed = self.commit(header.op)?;
        if self.identity.replica_count > 1 {
            let current = self.vsr_state();
            self.write_vsr(VsrState {
                commit_max: current.commit_max.max(header.op),
                ..current
            })?;
        }
        let last = committed
            .into_iter()
            .last()
            .unwrap_or_else(|| unreachable!("the commit of a new prepare executes it"));
        Ok(Ok(last))
    }

    /// Checkpoints the state at the commit point: snapshot, then superblock, then the WAL
    /// prefix (each durable before the next).
    pub fn checkpoint(&mut self) -> Result<(), GroupError> {
        let op = self.commit_op;
        if op == 0 || op == self.superblock.state().checkpoint_op {
            return Ok(());
        }
        let checksum = self.wal.read(op, op)?[0].header.checksum();
        let payload = codec::encode(&self.state);
        let trailer = iggy_snapshot::write(
            &self.storage,
            &self.dir,
            op,
            checksum,
            PAYLOAD_VERSION,
            &payload,
        )?;
        let id = SnapshotId {
            checkpoint_op: op,
            trailer,
            length: (iggy_snapshot::HEADER_SIZE + payload.len() + iggy_snapshot::TRAILER_SIZE)
                as u64,
        };
        self.snapshot = Some((id, checksum));
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

    /// Stages one chunk of a peer's snapshot `id` (a chunk of another snapshot than the one
    /// being received starts anew). Nothing live changes. The outer error is a storage failure;
    /// the inner one a chunk refused (it does not fit the snapshot).
    pub fn stage_chunk(
        &mut self,
        id: SnapshotId,
        offset: u64,
        bytes: &[u8],
    ) -> Result<Result<(), String>, GroupError> {
        use iggy_snapshot::transfer::Receiver;
        let receiver = match self.receiving.take() {
            Some(receiver) if receiver.id() == id => receiver,
            _ => match Receiver::start(self.storage.clone(), &self.dir, id) {
                Ok(receiver) => receiver,
                Err(e) => return Ok(Err(refusal(e)?)),
            },
        };
        let receiver = self.receiving.insert(receiver);
        match receiver.accept(&id, offset, bytes) {
            Ok(()) => Ok(Ok(())),
            Err(e) => Ok(Err(refusal(e)?)),
        }
    }

    /// Installs the staged snapshot `id`, which must hold checkpoint `op` whose prepare's
    /// checksum is `checksum` and be past the commit point (the module docs' install order).
    /// The outer error is a storage failure (the
    /// group may be past the commit point: only a boot may go on from it); the inner one a
    /// refusal that left the group as it was (a snapshot that does not verify, or no use).
    pub fn install_staged(
        &mut self,
        id: SnapshotId,
        op: u64,
        checksum: u128,
    ) -> Result<Result<(), String>, GroupError> {
        let Some(receiver) = self.receiving.take() else {
            return Ok(Err("no snapshot is being received".into()));
        };
        if receiver.id() != id {
            return Ok(Err(format!(
                "the snapshot received is {:?}, not {id:?}",
                receiver.id()
            )));
        }
        let (header, payload) = match receiver.stage() {
            Ok(staged) => staged,
            Err(e) => return Ok(Err(refusal(e)?)),
        };
        if header.checkpoint_op != op || header.checkpoint_checksum != checksum {
            return Ok(Err(format!(
                "the snapshot holds checkpoint {} ({:#x}), not {op} ({checksum:#x})",
                header.checkpoint_op, header.checkpoint_checksum
            )));
        }
        if op <= self.commit_op || op <= self.wal.head().0 {
            return Ok(Err(format!(
                "checkpoint {op} is no further than this group (commit point {}, log head {})",
                self.commit_op,
                self.wal.head().0
            )));
        }
        let state = match codec::decode(header.payload_version, &payload) {
            Ok(state) => state,
            Err(e) => return Ok(Err(format!("the snapshot's state does not decode: {e}"))),
        };
        // The commit point: from here boot finishes the install.
        let current = *self.superblock.state();
        self.superblock.write(VsrState {
            commit_max: current.commit_max.max(op),
            checkpoint_op: op,
            checkpoint_checksum: checksum,
            ..current
        })?;
        iggy_snapshot::transfer::publish_staged(&self.storage, &self.dir)?;
        self.snapshot = Some((id, checksum));
        self.wal = reset_log(
            &self.storage,
            &self.dir,
            self.wal_config.clone(),
            op,
            checksum,
        )?;
        self.state = state;
        self.commit_op = op;
        Ok(Ok(()))
    }

    /// The live snapshot a peer's transfer is served: its identity and checkpoint checksum
    /// (`None`: no checkpoint taken yet).
    #[must_use]
    pub fn snapshot(&self) -> Option<(SnapshotId, u128)> {
        self.snapshot
    }

    /// Bytes `offset..` (at most a chunk) of the live snapshot, checked against its identity
    /// as they are read (`iggy_snapshot::transfer::chunk`).
    pub fn snapshot_chunk(
        &self,
        offset: u64,
    ) -> Result<Option<(SnapshotId, u128, Vec<u8>)>, String> {
        let Some((id, checksum)) = self.snapshot else {
            return Ok(None);
        };
        let len = id
            .length
            .saturating_sub(offset)
            .min(iggy_snapshot::transfer::CHUNK_BYTES_MAX);
        iggy_snapshot::transfer::chunk(&self.storage, &self.dir, &id, offset, len)
            .map(|bytes| Some((id, checksum, bytes)))
            .map_err(|e| format!("{}: {e}", self.dir.join(iggy_snapshot::FILE_NAME).display()))
    }

    pub fn state(&self) -> &State {
        &self.state
    }

    /// The op the state is applied through: the commit point.
    pub fn applied_op(&self) -> u64 {
        self.commit_op
    }

    /// The journaled head (prepares past [`MetadataGroup::applied_op`] are not committed).
    pub fn head_op(&self) -> u64 {
        self.wal.head().0
    }

    /// The group's part of a clean shutdown: publishes everything with the log synced, and
    /// fails if a failed write poisoned the log or the superblock (see
    /// `iggy_segments::Partition::prepare_shutdown`).
    pub fn prepare_shutdown(&self) -> Result<(), GroupError> {
        self.wal.publish_synced()?;
        self.superblock.ensure_healthy()?;
        Ok(())
    }

    pub fn superblock(&self) -> &Superblock<S> {
        &self.superblock
    }

    /// The WAL of prepares (what a primary reads to repair a lagging backup's journal).
    pub fn wal(&self) -> &Wal<S> {
        &self.wal
    }
}
