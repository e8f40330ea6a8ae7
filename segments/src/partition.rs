//! A partition's message log: entries of a keyed WAL whose files are the partition's segments
//! `{start_offset:020}.log`, each with a sparse `{start_offset:020}.index`. The entries are VSR
//! prepares: a primary builds each once ([`Partition::prepare`]), every backup journals the
//! primary's bytes ([`Partition::journal`]), so the segment files of every replica are the same.
//!
//! Invariants:
//! - data is written once: an entry's body is stored as the WAL entry body, so the WAL's
//!   published frontier is the partition's durability boundary and boot trusts nothing past it;
//! - offsets are continuous: each batch starts where the previous one ended, across segments,
//!   and a segment is named by the next offset when it was started (its first batch's);
//! - offsets and timestamps are stamped once, by the primary: a backup validates them, never
//!   restamps (restamping on each replica makes offsets diverge after a view change);
//! - the next offset never goes back across crashes: it is the end of the last trusted batch, and
//!   boot refuses a log that ends below the superblock's `offset_frontier` (raised by retention
//!   before it deletes segments, set by an install to the installed log's end);
//! - a cut ([`Partition::truncate_after`]) never reaches the commit point, and keeps segments,
//!   indexes and the next offset consistent with the log;
//! - a committed consumer offset store is applied to its offset file, recording its op; boot
//!   applies those a crash left unapplied;
//! - retention deletes whole sealed, fully published segments, oldest first (a crash leaves a
//!   shorter prefix, never a hole); the segment being appended to is never deleted;
//! - an `.index` is derived: boot rebuilds every segment's index from its `.log` and rewrites an
//!   index file that is missing or disagrees; an index without its `.log` is removed;
//! - reads return verified batches (WAL header and body checksums) up to the op they are given.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use iggy_io::{Mapping, Storage};
use iggy_superblock::{Superblock, VsrState};
use iggy_wal::{Mode, Wal};

use crate::boot::{self, empty_segment, fresh_wal_report};
use crate::config::Config;
use crate::entry::OffsetEntry;
use crate::error::PartitionError;
use crate::install;
use crate::offsets;
use crate::report::{Report, SegmentInfo};

pub(crate) struct Segment<R> {
    pub info: SegmentInfo,
    /// Opened by the first read, so that an append never fails after the WAL took its entry.
    pub reader: Option<Arc<R>>,
    pub map: Option<Arc<Mapping>>,
}

impl<R> Segment<R> {
    pub fn new(info: SegmentInfo) -> Self {
        Self {
            info,
            reader: None,
            map: None,
        }
    }
}

pub(crate) struct State<R> {
    pub segments: Vec<Segment<R>>,
    pub next_offset: u64,
    pub last_timestamp: u64,
    /// The op up to which the partition has committed (consumer offsets applied): a cut never
    /// goes below it.
    pub committed: u64,
    /// Consumer offset stores journaled past `committed`, oldest first.
    pub uncommitted_offsets: Vec<OffsetEntry>,
    /// The committed client sessions boot found, until the replica takes them
    /// ([`Partition::take_sessions`]).
    pub boot_sessions: Vec<crate::sessions::Session>,
    /// The consumers whose offset files a commit stored into without a sync since the
    /// partition last settled them ([`Partition::settle_offsets`]).
    pub unsynced_offsets: std::collections::BTreeSet<(offsets::ConsumerKind, u32)>,
}

/// A partition's size at one moment ([`Partition::figures`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Figures {
    pub segments: u64,
    /// The first retained offset and the one the next message gets: the messages held are the
    /// difference.
    pub first_offset: u64,
    pub next_offset: u64,
    /// Bytes of the segments' trusted entries.
    pub bytes: u64,
}

/// An open partition.
pub struct Partition<S: Storage + Clone> {
    pub(crate) storage: S,
    pub(crate) dir: PathBuf,
    pub(crate) config: Config,
    pub(crate) wal: Wal<S>,
    pub(crate) superblock: Mutex<Superblock<S>>,
    pub(crate) state: Mutex<State<S::Reader>>,
    /// What the partition knows of its consumers' offset files ([`offsets::Known`]), kept by
    /// the two that write them, both under `state`'s lock: a store's journal
    /// ([`offsets::OffsetStore::prepare_known`]) and its commit. Readers only look. Dropped by
    /// [`Partition::offsets`], whose store bypasses it.
    pub(crate) offset_files: Mutex<HashMap<(offsets::ConsumerKind, u32), offsets::Known>>,
}

impl<S: Storage + Clone> std::fmt::Debug for Partition<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Partition")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl<S: Storage + Clone> Partition<S> {
    /// Creates an empty partition in `dir` in view `config.initial_view` (the superblock's
    /// incarnation `config.initial_incarnation`): the superblock first (its rename is the moment
    /// the partition exists), then the WAL, whose first segment is `00000000000000000000.log`.
    pub fn create(storage: S, dir: &Path, config: Config) -> Result<Self, PartitionError> {
        let state = VsrState {
            view: config.initial_view,
            log_view: config.initial_view,
            incarnation: config.initial_incarnation,
            ..VsrState::default()
        };
        Self::create_with(storage, dir, config, state, &|_| false)
    }

    /// Creates an empty partition in `dir` whose superblock holds `state`, beside the entries
    /// a rebuild from peers keeps there (its marker and the damaged files moved aside:
    /// [`crate::rebuilt`]). `state` carries the old replica's view and log_view, which never go
    /// back.
    pub fn create_rebuilt(
        storage: S,
        dir: &Path,
        config: Config,
        state: VsrState,
    ) -> Result<Self, PartitionError> {
        Self::create_with(
            storage,
            dir,
            config,
            state,
            &crate::rebuilt::is_rebuild_entry,
        )
    }

    fn create_with(
        storage: S,
        dir: &Path,
        config: Config,
        state: VsrState,
        beside: &dyn Fn(&str) -> bool,
    ) -> Result<Self, PartitionError> {
        if storage.exists(dir)?
            && storage
                .list_dir(dir)?
                .iter()
                .any(|e| !beside(&e.name.to_string_lossy()))
        {
            return Err(PartitionError::AlreadyExists {
                dir: dir.to_path_buf(),
            });
        }
        let superblock =
            Superblock::create_beside(storage.clone(), dir, config.identity, state, beside)?;
        let wal = Wal::create_keyed(storage.clone(), dir, config.wal(), 1, 0, 0)?;
        let fresh = fresh_wal_report(dir, &config, Vec::new());
        let report = boot::analyze(&storage, dir, &config, fresh, &state)?;
        Ok(Self::from_parts(
            storage, dir, config, wal, superblock, &report,
        ))
    }

    /// Boots the partition in `dir` (`Open` or `Repair`): decides everything first (the
    /// analysis [`crate::check`] runs), then rolls back or finishes a staged install, repairs
    /// the superblock, boots the WAL (discarding what lies past its frontier), rebuilds
    /// indexes, stores committed consumer offsets a crash left unapplied and sweeps leftovers.
    /// A partition it refuses is left exactly as it was. `Ok(None)`: no partition (a leftover
    /// `superblock.tmp` of an unfinished creation is removed).
    pub fn open(
        storage: S,
        dir: &Path,
        config: Config,
        mode: Mode,
    ) -> Result<Option<(Self, Report)>, PartitionError> {
        assert!(mode != Mode::Check, "Check mode is `check()`");
        let Some(planned) = boot::plan(&storage, dir, &config)? else {
            Superblock::open(
                storage.clone(),
                dir,
                &config.identity,
                config.superblock_policy(),
            )?;
            return Ok(None);
        };
        let report = planned.report;
        install::recover(&storage, dir)?;
        let (superblock, superblock_repairs) = Superblock::open(
            storage.clone(),
            dir,
            &config.identity,
            config.superblock_policy(),
        )?
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
        boot::apply(&storage, dir, &config, &report, mode)?;
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
        // Boot's commit point: the superblock's, raised to what the log's prepares prove.
        let committed = report
            .commit
            .max(superblock.state().commit_max)
            .min(wal.head().0);
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
                committed,
                uncommitted_offsets: report.uncommitted_offsets.clone(),
                boot_sessions: report.sessions.clone(),
                unsynced_offsets: std::collections::BTreeSet::new(),
            }),
            offset_files: Mutex::new(HashMap::new()),
        };
        let mut state = partition.lock();
        if state.segments.is_empty() {
            // A fresh partition: the WAL made its first file.
            let next_offset = state.next_offset;
            for file in partition.wal.files() {
                state
                    .segments
                    .push(Segment::new(empty_segment(&file, next_offset)));
            }
        }
        drop(state);
        partition
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State<S::Reader>> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn lock_offset_files(
        &self,
    ) -> MutexGuard<'_, HashMap<(offsets::ConsumerKind, u32), offsets::Known>> {
        self.offset_files
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn lock_superblock(&self) -> MutexGuard<'_, Superblock<S>> {
        self.superblock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Makes every appended entry durable (one WAL publication; concurrent callers share it).
    pub fn publish(&self) -> Result<(), PartitionError> {
        self.wal.publish()?;
        Ok(())
    }

    /// The partition's part of a clean shutdown: publishes everything appended with the log
    /// synced (so the next boot needs nothing from the carried ring), settles the offset files,
    /// and fails if a failed write poisoned the log or the superblock, whose state then may not
    /// be durable (that shutdown is not clean).
    pub fn prepare_shutdown(&self) -> Result<(), PartitionError> {
        self.wal.publish_synced()?;
        self.settle_offsets()?;
        self.lock_superblock().ensure_healthy()?;
        // The head segment's index, as `close` writes it: without it every boot after a clean
        // shutdown rebuilt it, and `iggy-fsck` called a cleanly stopped node one to repair.
        let state = self.lock();
        if let Some(head) = state.segments.last()
            && head.info.batches > 0
        {
            self.write_index(&head.info)?;
        }
        Ok(())
    }

    /// Returns once the entry at WAL `op` is durable (group commit).
    pub fn wait_published(&self, op: u64) -> Result<(), PartitionError> {
        self.wal.wait_published(op)?;
        Ok(())
    }

    /// Bytes appended but not yet published: what a checkpoint publishes.
    pub fn unpublished_bytes(&self) -> u64 {
        self.wal.unpublished_bytes()
    }

    /// The offset the next message gets.
    pub fn next_offset(&self) -> u64 {
        self.lock().next_offset
    }

    /// The op up to which the partition has committed: what [`Partition::commit`] reached on
    /// a replica (`Config::replicated`), the published head on a single node.
    pub fn committed(&self) -> u64 {
        let state = self.lock();
        self.committed_locked(&state)
    }

    pub(crate) fn committed_locked(&self, state: &State<S::Reader>) -> u64 {
        if self.config.replicated {
            state.committed
        } else {
            self.wal.published().head_op
        }
    }

    /// The committed client sessions boot found (each client's last committed request, the op
    /// and what its client was told), handed over once: what the replica's client table starts
    /// from, so that a request replayed after a restart is answered, not appended again.
    pub fn take_sessions(&self) -> Vec<crate::sessions::Session> {
        std::mem::take(&mut self.lock().boot_sessions)
    }

    /// The segments, oldest first.
    pub fn segments(&self) -> Vec<SegmentInfo> {
        self.lock()
            .segments
            .iter()
            .map(|s| s.info.clone())
            .collect()
    }

    /// What the partition holds, for the stats an operator reads (`GetStats`, `GetTopic`):
    /// counted under the lock, nothing cloned.
    pub fn figures(&self) -> Figures {
        let state = self.lock();
        let first = state
            .segments
            .first()
            .map_or(state.next_offset, |s| s.info.start_offset);
        Figures {
            segments: state.segments.len() as u64,
            first_offset: first,
            next_offset: state.next_offset,
            bytes: state.segments.iter().map(|s| s.info.bytes).sum(),
        }
    }

    /// The first retained offset.
    pub fn first_offset(&self) -> u64 {
        let state = self.lock();
        state
            .segments
            .first()
            .map_or(state.next_offset, |s| s.info.start_offset)
    }

    /// The durable VSR state (view, log_view, commit, checkpoint, offset frontier).
    pub fn vsr_state(&self) -> VsrState {
        *self.lock_superblock().state()
    }

    /// Makes `state` the durable VSR state (both superblock copies written and synced before it
    /// returns). The offset frontier is the partition's own: it is kept, whatever `state` says.
    pub fn write_vsr(&self, state: VsrState) -> Result<(), PartitionError> {
        let mut superblock = self.lock_superblock();
        let current = *superblock.state();
        superblock.write(VsrState {
            offset_frontier: current.offset_frontier,
            ..state
        })?;
        Ok(())
    }

    /// Writes a segment's index file and summary (derived data: no sync; boot checks it
    /// against the log).
    pub(crate) fn write_index(&self, info: &SegmentInfo) -> Result<(), PartitionError> {
        boot::write_index_file(&self.storage, &self.dir, info, &self.config)
    }

    /// Makes durable every offset file a commit stored into without a sync: each file's current
    /// slot is written again, the same bytes, and synced ([`offsets::OffsetStore::settle`]), so
    /// a write-back that failed before (which a later sync alone would not bring back) is
    /// written anew. A file whose settle fails stays unsettled, and the error is returned:
    /// the caller must not rely on the files then.
    pub fn settle_offsets(&self) -> Result<(), PartitionError> {
        let mut state = self.lock();
        self.settle_offsets_locked(&mut state)
    }

    pub(crate) fn settle_offsets_locked(
        &self,
        state: &mut State<S::Reader>,
    ) -> Result<(), PartitionError> {
        if state.unsynced_offsets.is_empty() {
            return Ok(());
        }
        let store = self.offset_store();
        while let Some(&(kind, id)) = state.unsynced_offsets.first() {
            store.settle(kind, id, true)?;
            state.unsynced_offsets.remove(&(kind, id));
        }
        Ok(())
    }

    /// Clean shutdown: publishes what was appended, settles the offset files and writes the
    /// head segment's index.
    pub fn close(self) -> Result<(), PartitionError> {
        self.publish()?;
        self.settle_offsets()?;
        let state = self.lock();
        if let Some(head) = state.segments.last() {
            self.write_index(&head.info)?;
        }
        Ok(())
    }

    /// The consumer offsets of this partition, read and written directly: what the partition
    /// knew of its files is forgotten, since a store through this bypasses it. The partition's
    /// own reads go through [`Partition::stored_offset`].
    pub fn offsets(&self) -> offsets::OffsetStore<S> {
        self.lock_offset_files().clear();
        self.offset_store()
    }

    pub(crate) fn offset_store(&self) -> offsets::OffsetStore<S> {
        offsets::OffsetStore::new(self.storage.clone(), &self.dir.join(offsets::DIR_NAME))
    }

    /// The consumer's stored offset, if it stored one: from what the partition knows of its
    /// file once a store of it was journaled or committed in this partition's life, else read
    /// from the file.
    pub fn stored_offset(
        &self,
        kind: offsets::ConsumerKind,
        id: u32,
    ) -> Result<Option<offsets::ConsumerOffset>, offsets::OffsetError> {
        if let Some(known) = self.lock_offset_files().get(&(kind, id)) {
            return Ok(known.stored());
        }
        self.offset_store().get(kind, id)
    }

    /// The WAL under the partition.
    pub fn wal(&self) -> &Wal<S> {
        &self.wal
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn config(&self) -> &Config {
        &self.config
    }
}
