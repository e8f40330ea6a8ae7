//! A group's storage and the executor of its replica's storage effects: the metadata group or a
//! partition, each through its crate's replicated entry points (prepare, journal, truncate,
//! publish, commit, the superblock's VSR state). A storage error is `Outcome::Failed`: the
//! replica stops and the node's process restarts; boot decides what is kept.
//!
//! When a partition publishes: a persisted one publishes each journaled entry before the
//! replica may acknowledge it; a replicated one once `checkpoint_bytes` are unpublished, on a
//! new log_view and every 100 ms (the replica's `Publish` effects), and at a clean shutdown. Committed entries are written
//! out to the segment files unsynced, where consumers read them.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use iggy_format::{Header, operation};
use iggy_io::Storage;
use iggy_metadata::group::{GROUP_ID, GroupError, MetadataGroup};
use iggy_metadata::{Applied, Durability, codec};
use iggy_recovery::{BootConfig, PartitionKey};
use iggy_segments::offsets::ConsumerKind;
use iggy_segments::{Partition, Request};
use iggy_superblock::{Identity, VsrState};
use iggy_vsr::{Effect, Outcome};

/// How a prepare or a journal write refused for want of room starts its reason (`Ran::refused`).
pub const NO_ROOM: &str = "no room for the log's next file";

/// Refuses to journal `op` when it does not follow the log's head `head`: the replica hands
/// storage its ops in order, so only a refused journal before it (for want of room) leaves the
/// gap. The replica cuts storage back and hands them all again later
/// (`iggy_vsr` `journal_refused`); storage is as it was.
fn behind_a_refused_journal(op: u64, head: u64) -> Option<Outcome> {
    (op > head + 1).then(|| {
        Outcome::Refused(format!(
            "op {op} follows a journal refused for want of room (the log's head is op {head})"
        ))
    })
}

/// What a group is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupKind {
    Metadata,
    Partition { key: PartitionKey, persisted: bool },
}

impl GroupKind {
    #[must_use]
    pub fn id(self) -> u128 {
        match self {
            Self::Metadata => GROUP_ID,
            Self::Partition { key, .. } => key.group_id(),
        }
    }

    /// A partition of replicated durability: one that acknowledges before it publishes, and so
    /// publishes periodically and at its checkpoint.
    #[must_use]
    pub fn is_replicated_partition(self) -> bool {
        matches!(
            self,
            Self::Partition {
                persisted: false,
                ..
            }
        )
    }

    #[must_use]
    pub fn label(self) -> String {
        match self {
            Self::Metadata => "metadata".into(),
            Self::Partition { key, persisted } => format!(
                "partition {}{}",
                key.dir_name(),
                if persisted { " (persisted)" } else { "" }
            ),
        }
    }
}

/// A group's storage.
pub enum Store<S: Storage + Clone> {
    Metadata(Box<MetadataGroup<S>>),
    Partition {
        /// Shared with readers (polls): a partition synchronizes its own state.
        partition: Arc<Partition<S>>,
        persisted: bool,
        /// The reply each journaled, uncommitted entry will get (`None`: no client waits for
        /// one), taken from its body while it was in memory: a commit need not read the entry
        /// back.
        replies: BTreeMap<u64, Option<Vec<u8>>>,
        /// The peer's image whose chunks `transfer.staging` holds (partition state transfer).
        staging: Option<iggy_vsr::SnapshotRef>,
    },
}

/// What a node needs to create the partitions a metadata commit adds: its storage (rooted at
/// the node's directory), its boot configuration and its identity.
pub struct Catalog<S: Storage + Clone> {
    pub storage: S,
    pub boot: BootConfig,
    pub identity: Identity,
}

/// A partition a metadata commit created, open and ready for its replica.
pub struct Created<S: Storage + Clone> {
    pub key: PartitionKey,
    pub persisted: bool,
    pub retention: Retention,
    pub partition: Partition<S>,
}

/// What a metadata commit changed in the node's set of partitions: the ones created (their
/// directories made durable before the commit's checkpoint could list them) and the ones its
/// deletes removed from the metadata (the node drops their groups and removes their
/// directories).
pub struct Changes<S: Storage + Clone> {
    pub created: Vec<Created<S>>,
    pub deleted: Vec<PartitionKey>,
    /// The committed metadata state, when the node mirrors it for readers.
    pub mirror: Option<Arc<iggy_metadata::State>>,
    /// A partition state transfer installed: the partition booted on the installed files, for
    /// readers (the store holds it already).
    pub installed: Option<Arc<Partition<S>>>,
    /// Partitions kept by the commit, with their topic's retention as it now stands (a topic's
    /// update may have changed it): the node's retention passes follow it.
    pub retention: Vec<(PartitionKey, Retention)>,
    /// Partitions the commit created in the metadata that this node had no room to create (a
    /// full disk, no descriptors: `PartitionError::is_exhaustion`), and why: the node keeps every
    /// other group running and tries them again ([`crate::Node::maintain`]). Their directories
    /// are left holding only `iggy_recovery::NOT_CREATED_FILE`.
    pub unavailable: Vec<(PartitionKey, String)>,
    /// A partition's prepare or journal write: the partition whose buffered entries are still
    /// to be written out to its segment files ([`WriteOut`]; [`execute`] and
    /// [`crate::Job::run`] do it before they return, a host may do it after it sent the
    /// completion on).
    pub write_out: Option<WriteOut<S>>,
}

/// The write of a partition's buffered entries to its segment files (unsynced) that follows an
/// entry's prepare or journal write, where consumers will read them once committed (boot
/// discards what no publication covered; a cut removes what it drops from the files too).
/// Nothing an acknowledgment promises rests on it: under replicated durability the entries are
/// durable once a publication covers them, which writes and syncs them itself, and a poll that
/// reads past what was written writes the buffer out itself (`Partition::read_through`). So a
/// host may run it after the effect's completion, while the replica commits the entry and its
/// reply leaves: the partition's next effects wait for it only where they take the WAL's lock,
/// which it holds while it writes (a commit does not take it). It used to be the commit's,
/// which held the reply behind the copy into the page cache.
pub struct WriteOut<S: Storage + Clone> {
    partition: Arc<Partition<S>>,
}

impl<S: Storage + Clone> WriteOut<S> {
    /// Writes the buffered entries out, unless a publication is in flight (it writes them).
    /// A failure poisons the partition's WAL (every later effect on it fails): the host halts
    /// the node as on any storage failure.
    pub fn run(self) -> Result<(), String> {
        self.partition
            .wal()
            .write_buffered_if_idle()
            .map_err(|e| format!("writing journaled entries to the segment files: {e}"))
    }
}

impl<S: Storage + Clone> Default for Changes<S> {
    fn default() -> Self {
        Self {
            created: Vec::new(),
            deleted: Vec::new(),
            retention: Vec::new(),
            mirror: None,
            installed: None,
            unavailable: Vec::new(),
            write_out: None,
        }
    }
}

/// Carries out one storage effect on `store` (`now_us`: the host's clock, for a primary's
/// stamps; a replicated partition publishes once `checkpoint_bytes` are unpublished). A storage
/// error is `Outcome::Failed`: the replica stops, the node restarts.
pub fn execute<S: Storage + Clone>(
    store: &mut Store<S>,
    effect: Effect,
    now_us: u64,
    checkpoint_bytes: u64,
) -> Outcome {
    let (outcome, changes) = execute_with(store, effect, now_us, checkpoint_bytes, None, false);
    match changes.write_out.map(WriteOut::run) {
        Some(Err(reason)) => Outcome::Failed(reason),
        _ => outcome,
    }
}

/// [`execute`], and a metadata commit's changes to the node's partitions: with a `catalog`,
/// the partitions the committed ops created are created (each durable) before the commit's
/// checkpoint, if one is due, can list them; `mirror`: the committed state is cloned for
/// readers after a commit that executed anything.
pub fn execute_with<S: Storage + Clone>(
    store: &mut Store<S>,
    effect: Effect,
    now_us: u64,
    checkpoint_bytes: u64,
    catalog: Option<&Catalog<S>>,
    mirror: bool,
) -> (Outcome, Changes<S>) {
    if let (Store::Metadata(group), Effect::Commit { through, .. }) = (&mut *store, &effect) {
        return commit_metadata(group, *through, catalog, mirror);
    }
    if let (Store::Metadata(group), Effect::InstallSnapshot { snapshot, .. }) =
        (&mut *store, &effect)
    {
        return install_snapshot(group, *snapshot, catalog, mirror);
    }
    if let Effect::InstallSnapshot { snapshot, .. } = &effect
        && let Store::Partition { .. } = store
    {
        return install_image(store, *snapshot);
    }
    let write_out = match (&*store, &effect) {
        (Store::Partition { partition, .. }, Effect::Prepare { .. } | Effect::Journal { .. }) => {
            Some(WriteOut {
                partition: partition.clone(),
            })
        }
        _ => None,
    };
    let outcome = execute_effect(store, effect, now_us, checkpoint_bytes);
    let write_out =
        write_out.filter(|_| matches!(outcome, Outcome::Prepared { .. } | Outcome::Done));
    (
        outcome,
        Changes {
            write_out,
            ..Changes::default()
        },
    )
}

/// The metadata group's commit through `through`: the ops executed, then the partitions they
/// created made (with a `catalog`), then the checkpoint if one is due.
fn commit_metadata<S: Storage + Clone>(
    group: &mut MetadataGroup<S>,
    through: u64,
    catalog: Option<&Catalog<S>>,
    mirror: bool,
) -> (Outcome, Changes<S>) {
    let failed = |e: &dyn std::fmt::Display| (Outcome::Failed(e.to_string()), Changes::default());
    let before = catalog.map(|_| iggy_recovery::known_partitions(group.state()));
    let committed = match group.commit_deferring_checkpoint(through) {
        Ok(committed) => committed,
        Err(e) => return failed(&e),
    };
    let mut changes = Changes::default();
    let reshaped = committed.iter().any(|c| {
        matches!(
            c.result,
            Some(Ok(Applied::Topic(_)
                | Applied::Partitions { .. }
                | Applied::Deleted))
        )
    });
    if let (Some(catalog), Some(before), true) = (catalog, before, reshaped) {
        // The commit point durable first: a boot then restores a state that includes these ops,
        // so the directories created or removed next always match the state boot lists (a
        // backup may execute a commit its log does not yet prove).
        let vsr = group.vsr_state();
        if vsr.commit_max < through
            && let Err(e) = group.write_vsr(VsrState {
                commit_max: through,
                ..vsr
            })
        {
            return failed(&e);
        }
        if let Err(e) = reconcile(catalog, group.state(), &before, &mut changes) {
            return failed(&e);
        }
    }
    if group.checkpoint_due()
        && let Err(e) = group.checkpoint()
    {
        if !e.is_exhaustion() {
            return failed(&e);
        }
        // No room for the snapshot (a full disk): the last checkpoint stands and the next
        // commit tries again; the journal's margin takes the ops meanwhile, and past it a
        // journal or prepare is refused until a checkpoint frees the log's prefix.
        tracing::warn!(%e, "metadata checkpoint put off: no room for its snapshot");
    }
    if mirror && !committed.is_empty() {
        changes.mirror = Some(Arc::new(group.state().clone()));
    }
    let replies = committed
        .into_iter()
        .filter(|c| c.client != 0)
        .map(|c| (c.op, c.reply))
        .collect();
    (Outcome::Committed { replies }, changes)
}

/// The node's partitions against the metadata `state` the node's were `before`: the ones it no
/// longer lists go to `changes.deleted`, the ones it newly lists are created (each durable) into
/// `changes.created`.
fn reconcile<S: Storage + Clone>(
    catalog: &Catalog<S>,
    state: &iggy_metadata::State,
    before: &std::collections::BTreeSet<PartitionKey>,
    changes: &mut Changes<S>,
) -> Result<(), String> {
    let after = iggy_recovery::known_partitions(state);
    changes.deleted = before.difference(&after).copied().collect();
    changes.retention = after
        .intersection(before)
        .map(|&key| (key, retention(state, key)))
        .collect();
    for &key in after.difference(before) {
        let created = iggy_recovery::create_partition(
            &catalog.storage,
            Path::new(""),
            &catalog.boot,
            catalog.identity,
            state,
            key,
            false,
        );
        let partition = match created {
            Ok(partition) => partition,
            // A full disk or no descriptors: a resource the node can get back. Any other
            // failure is the storage's, and halts the replica as before.
            Err(e) if e.is_exhaustion() => {
                // Not a failure of the commit: the op is committed on the other nodes, which
                // host the partition; this one tries again later, as a replica that recovers.
                // What the failed create left is removed, and the directory marked as never
                // created, so that the next try (here or at boot) starts clean: a directory with a
                // superblock would be a partition that once booted, a missing one a lost one.
                let reason = match iggy_recovery::mark_not_created(
                    &catalog.storage,
                    Path::new(""),
                    key,
                ) {
                    Ok(()) => e.to_string(),
                    Err(marking) => format!(
                        "{e} (and marking it as never created: {marking}; a boot that finds it missing refuses)"
                    ),
                };
                changes.unavailable.push((key, reason));
                continue;
            }
            Err(e) => return Err(format!("creating partition {}: {e}", key.dir_name())),
        };
        changes.created.push(Created {
            key,
            persisted: persisted(state, key),
            retention: retention(state, key),
            partition,
        });
    }
    Ok(())
}

/// The snapshot's identity in the snapshot crate's terms.
fn snapshot_id(snapshot: iggy_vsr::SnapshotRef) -> iggy_snapshot::transfer::SnapshotId {
    iggy_snapshot::transfer::SnapshotId {
        checkpoint_op: snapshot.op,
        trailer: snapshot.trailer,
        length: snapshot.length,
    }
}

/// Installs the metadata snapshot staged from a peer's chunks (`MetadataGroup::install_staged`),
/// then reconciles the node's partitions with the installed state, as a commit that created and
/// deleted them would (with a `catalog`): the partitions it lists that the old state did not are
/// created, the ones it no longer lists retired.
fn install_snapshot<S: Storage + Clone>(
    group: &mut MetadataGroup<S>,
    snapshot: iggy_vsr::SnapshotRef,
    catalog: Option<&Catalog<S>>,
    mirror: bool,
) -> (Outcome, Changes<S>) {
    let failed = |e: &dyn std::fmt::Display| (Outcome::Failed(e.to_string()), Changes::default());
    let before = iggy_recovery::known_partitions(group.state());
    match group.install_staged(snapshot_id(snapshot), snapshot.op, snapshot.checksum) {
        Ok(Ok(())) => {}
        Ok(Err(refused)) => return (Outcome::Refused(refused), Changes::default()),
        Err(e) => return failed(&e),
    }
    let mut changes = Changes::default();
    if let Some(catalog) = catalog
        && let Err(e) = reconcile(catalog, group.state(), &before, &mut changes)
    {
        return failed(&e);
    }
    if mirror {
        changes.mirror = Some(Arc::new(group.state().clone()));
    }
    let clients = crate::boot::sessions(group.state());
    (Outcome::Installed { clients }, changes)
}

/// Installs a partition's staged image (`crate::image::install`): the store's partition is
/// replaced by the one booted on the installed files; its client table is the sessions the
/// installed log holds.
fn install_image<S: Storage + Clone>(
    store: &mut Store<S>,
    snapshot: iggy_vsr::SnapshotRef,
) -> (Outcome, Changes<S>) {
    let Store::Partition {
        partition,
        replies,
        staging,
        ..
    } = store
    else {
        return (
            Outcome::Refused("not a partition".into()),
            Changes::default(),
        );
    };
    *staging = None;
    // The write-out of an earlier prepare or journal write, left to another thread
    // (`WriteOut`), may still be to come: what the old log buffers goes to its files now, so
    // that it finds nothing to write into files the install replaces.
    if let Err(e) = partition.wal().write_buffered() {
        return (Outcome::Failed(e.to_string()), Changes::default());
    }
    let installed = match crate::image::install(partition, snapshot) {
        Ok(Ok(installed)) => installed,
        Ok(Err(refused)) => {
            tracing::warn!(dir = %partition.dir().display(), op = snapshot.op, %refused, "a peer's partition image refused: nothing installed");
            return (Outcome::Refused(refused), Changes::default());
        }
        Err(e) => return (Outcome::Failed(e), Changes::default()),
    };
    let clients = crate::boot::partition_sessions(&installed, installed.committed());
    replies.retain(|op, _| *op > snapshot.op);
    *partition = Arc::new(installed);
    let changes = Changes {
        installed: Some(partition.clone()),
        ..Changes::default()
    };
    (Outcome::Installed { clients }, changes)
}

/// What retention keeps of one partition: its topic's limits by age and size, and the
/// partition's own floor (`DeleteSegments`). All zero: keeps everything.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retention {
    pub max_age_seconds: u64,
    pub max_bytes: u64,
    /// Settled segments wholly below this offset go.
    pub floor: u64,
}

impl Retention {
    /// Whether a retention pass could delete anything.
    #[must_use]
    pub fn retains(&self) -> bool {
        self.max_age_seconds > 0 || self.max_bytes > 0 || self.floor > 0
    }
}

/// Partition `key`'s retention, by the metadata `state` (zero: keeps everything).
#[must_use]
pub fn retention(state: &iggy_metadata::State, key: PartitionKey) -> Retention {
    let Some(topic) = state
        .streams
        .get(&key.stream)
        .and_then(|s| s.topics.get(&key.topic))
    else {
        return Retention::default();
    };
    let floor = topic.partition(key.partition).map_or(0, |p| p.floor);
    Retention {
        max_age_seconds: topic.retention.max_age_seconds,
        max_bytes: topic.retention.max_bytes,
        floor,
    }
}

/// Whether partition `key`'s topic is persisted, by the metadata `state`.
#[must_use]
pub fn persisted(state: &iggy_metadata::State, key: PartitionKey) -> bool {
    state
        .streams
        .get(&key.stream)
        .and_then(|s| s.topics.get(&key.topic))
        .is_some_and(|t| t.durability == Durability::Persisted)
}

fn execute_effect<S: Storage + Clone>(
    store: &mut Store<S>,
    effect: Effect,
    now_us: u64,
    checkpoint_bytes: u64,
) -> Outcome {
    let failed = |e: &dyn std::fmt::Display| Outcome::Failed(e.to_string());
    match (store, effect) {
        (
            _,
            Effect::Send { .. }
            | Effect::ReadPrepares { .. }
            | Effect::ReadSnapshot { .. }
            | Effect::ReadBarrier { .. },
        ) => Outcome::Done,
        (
            Store::Metadata(group),
            Effect::WriteSnapshotChunk {
                snapshot,
                offset,
                bytes,
                ..
            },
        ) => match group.stage_chunk(snapshot_id(snapshot), offset, &bytes) {
            Ok(Ok(())) => Outcome::Done,
            Ok(Err(refused)) => Outcome::Refused(refused),
            Err(e) => failed(&e),
        },
        (Store::Metadata(group), Effect::InstallSnapshot { snapshot, .. }) => {
            install_snapshot(group, snapshot, None, false).0
        }
        (
            Store::Partition {
                partition, staging, ..
            },
            Effect::WriteSnapshotChunk {
                snapshot,
                offset,
                bytes,
                ..
            },
        ) => match crate::image::stage_chunk(
            partition.wal().storage(),
            partition.dir(),
            staging,
            snapshot,
            offset,
            &bytes,
        ) {
            Ok(Ok(())) => Outcome::Done,
            Ok(Err(refused)) => Outcome::Refused(refused),
            Err(e) => failed(&e),
        },
        (store @ Store::Partition { .. }, Effect::InstallSnapshot { snapshot, .. }) => {
            install_image(store, snapshot).0
        }
        (Store::Metadata(group), Effect::WriteSuperblock { durable, .. }) => {
            let current = group.vsr_state();
            let state = VsrState {
                view: durable.view,
                log_view: durable.log_view,
                // Never below what a commit that created or removed partitions made durable.
                commit_max: durable.commit_max.max(current.commit_max),
                incarnation: durable.incarnation,
                ack_bound: durable.ack_bound.max(current.ack_bound),
                ..current
            };
            group
                .write_vsr(state)
                .map_or_else(|e| failed(&e), |()| Outcome::Done)
        }
        (Store::Partition { partition, .. }, Effect::WriteSuperblock { durable, .. }) => {
            let current = partition.vsr_state();
            let state = VsrState {
                view: durable.view,
                log_view: durable.log_view,
                // Never below what a state transfer's install recorded (the replica's own
                // record of it may be older: a write that only raises the acknowledgment
                // bound carries the commit point it last wrote).
                commit_max: durable.commit_max.max(current.commit_max),
                incarnation: durable.incarnation,
                ack_bound: durable.ack_bound.max(current.ack_bound),
                ..current
            };
            partition
                .write_vsr(state)
                .map_or_else(|e| failed(&e), |()| Outcome::Done)
        }
        (Store::Metadata(group), Effect::Prepare { meta, body, .. }) => {
            let Ok(op) = codec::decode_op(&body) else {
                return Outcome::Refused("not a metadata op".into());
            };
            let meta = iggy_format::PrepareMeta { now_us, ..meta };
            match group.prepare(&op, &meta) {
                Ok(Ok((header, body))) => Outcome::Prepared { header, body },
                Ok(Err(refused)) => Outcome::Refused(refused.to_string()),
                // No room for the log's next file: nothing was appended.
                Err(e) if e.is_exhaustion() => Outcome::Refused(format!("{NO_ROOM}: {e}")),
                Err(e @ GroupError::JournalFull { .. }) => Outcome::Refused(e.to_string()),
                Err(e) => failed(&e),
            }
        }
        (
            Store::Partition {
                partition,
                persisted,
                replies,
                ..
            },
            Effect::Prepare {
                meta,
                operation,
                body,
                ..
            },
        ) => {
            let meta = iggy_format::PrepareMeta { now_us, ..meta };
            let request = match operation {
                operation::MESSAGES => Request::Batch(body),
                operation::CONSUMER_OFFSET => match consumer_offset(&body) {
                    Some((kind, id, offset)) => Request::StoreOffset { kind, id, offset },
                    None => return Outcome::Refused("not a consumer offset store".into()),
                },
                _ => return Outcome::Refused("not a partition operation".into()),
            };
            match partition.prepare(request, &meta) {
                Ok(prepared) => {
                    if let Err(e) =
                        after_journal(partition, *persisted, prepared.header.op, checkpoint_bytes)
                    {
                        return failed(&e);
                    }
                    replies.insert(
                        prepared.header.op,
                        partition_reply(&prepared.header, &prepared.body),
                    );
                    Outcome::Prepared {
                        header: prepared.header,
                        body: prepared.body,
                    }
                }
                Err(iggy_segments::PartitionError::Batch(e)) => Outcome::Refused(e.to_string()),
                // No room for the partition's next segment (the disk filled between two of the
                // host's looks at its free space): nothing was appended, the log is as it was;
                // the request is refused and the replica goes on.
                Err(e) if e.is_exhaustion() => Outcome::Refused(format!("{NO_ROOM}: {e}")),
                Err(e) => failed(&e),
            }
        }
        (Store::Metadata(group), Effect::Journal { header, body, .. }) => {
            if let Some(refused) = behind_a_refused_journal(header.op, group.head_op()) {
                return refused;
            }
            match group.journal(&header, &body) {
                Ok(()) => Outcome::Done,
                Err(e) if e.is_exhaustion() => Outcome::Refused(format!("{NO_ROOM}: {e}")),
                // Checkpoints put off for want of room filled the journal: refused until one
                // frees its prefix.
                Err(e @ GroupError::JournalFull { .. }) => Outcome::Refused(e.to_string()),
                Err(e) => failed(&e),
            }
        }
        (
            Store::Partition {
                partition,
                persisted,
                replies,
                ..
            },
            Effect::Journal { header, body, .. },
        ) => {
            if let Some(refused) = behind_a_refused_journal(header.op, partition.wal().head().0) {
                return refused;
            }
            match partition.journal(&header, &body) {
                Ok(_) => {
                    replies.insert(header.op, partition_reply(&header, &body));
                    after_journal(partition, *persisted, header.op, checkpoint_bytes)
                        .map_or_else(|e| failed(&e), |()| Outcome::Done)
                }
                // No room for the next segment (a disk fuller than the primary's): nothing was
                // appended; the replica tries again later and acknowledges nothing meanwhile.
                Err(e) if e.is_exhaustion() => Outcome::Refused(format!("{NO_ROOM}: {e}")),
                Err(e) => failed(&e),
            }
        }
        (Store::Metadata(group), Effect::Truncate { after, .. }) => group
            .truncate_after(after)
            .map_or_else(|e| failed(&e), |()| Outcome::Done),
        (
            Store::Partition {
                partition, replies, ..
            },
            Effect::Truncate { after, .. },
        ) => {
            replies.retain(|op, _| *op <= after);
            partition
                .truncate_after(after)
                .map_or_else(|e| failed(&e), |()| Outcome::Done)
        }
        (Store::Metadata(_), Effect::Publish { .. }) => Outcome::Done,
        (Store::Partition { partition, .. }, Effect::Publish { .. }) => partition
            .publish()
            .map_or_else(|e| failed(&e), |()| Outcome::Done),
        (Store::Metadata(group), Effect::Commit { through, .. }) => {
            commit_metadata(group, through, None, false).0
        }
        (
            Store::Partition {
                partition, replies, ..
            },
            Effect::Commit { through, .. },
        ) => {
            let from = partition.committed() + 1;
            if let Err(e) = partition.commit(through) {
                return failed(&e);
            }
            // The entries went to the segment files after their prepare or journal write
            // (`WriteOut`), or a publication wrote them; one a publication in flight left
            // buffered is written by the next write-out, publication or read that needs it.
            let mut out = Vec::new();
            let mut unknown = Vec::new();
            for op in from..=through {
                match replies.remove(&op) {
                    Some(reply) => out.push((op, reply)),
                    None => unknown.push(op),
                }
            }
            // Journaled in an earlier life (boot read it back): read it again to answer.
            for op in unknown {
                match partition.wal().read(op, op) {
                    Ok(entries) => {
                        for entry in entries {
                            out.push((op, partition_reply(&entry.header, &entry.body)));
                        }
                    }
                    Err(e) => return failed(&e),
                }
            }
            replies.retain(|op, _| *op > through);
            let mut out: Vec<(u64, Vec<u8>)> = out
                .into_iter()
                .filter_map(|(op, reply)| reply.map(|r| (op, r)))
                .collect();
            out.sort_by_key(|(op, _)| *op);
            Outcome::Committed { replies: out }
        }
    }
}

/// A journaled entry of a persisted partition is published before it is acknowledged; a
/// replicated one is published at its checkpoint.
fn after_journal<S: Storage + Clone>(
    partition: &Partition<S>,
    persisted: bool,
    op: u64,
    checkpoint_bytes: u64,
) -> Result<(), iggy_segments::PartitionError> {
    if persisted {
        partition.wait_published(op)
    } else if partition.unpublished_bytes() >= checkpoint_bytes {
        partition.publish()
    } else {
        Ok(())
    }
}

/// A partition's reply to the client of an entry (`iggy_segments::Session::reply`: a batch's
/// base offset and message count, nothing for other kinds; the same bytes boot rebuilds the
/// client table with); `None` for an entry no client sent (`client` 0: a no-op).
fn partition_reply(header: &Header, body: &[u8]) -> Option<Vec<u8>> {
    let kind = iggy_segments::entry::peek(header, body).ok()?;
    iggy_segments::Session::of(header, &kind).map(|s| s.reply())
}

/// A consumer offset store's request body: kind, id and offset (16 bytes).
fn consumer_offset(body: &[u8]) -> Option<(ConsumerKind, u32, u64)> {
    if body.len() != iggy_segments::entry::CONSUMER_OFFSET_BODY_SIZE {
        return None;
    }
    let kind = ConsumerKind::from_code(body[0])?;
    let id = u32::from_le_bytes(body[4..8].try_into().ok()?);
    let offset = u64::from_le_bytes(body[8..16].try_into().ok()?);
    Some((kind, id, offset))
}
