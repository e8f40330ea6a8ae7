//! A node: its groups (the metadata group and every partition the metadata lists), each one VSR
//! replica over its storage with an ordered lane of storage effects, the repair ration its
//! groups share, and the routing fact it answers clients with (who leads a group, from its own
//! replica). No threads and no network: the host (the simulator, the server) delivers messages,
//! ticks every 10 ms, routes what [`Node::drain`] returns, and runs each lane's head when it
//! chooses: [`Node::take_job`] hands it out, [`Job::run`] carries it out (the simulator on its
//! one thread after a seeded latency, the server on a storage thread), [`Node::complete`] gives
//! the replica its completion; one effect of a lane at a time, in order. [`Node::run_lane_head`]
//! does the three at once.
//!
//! Invariants:
//! - a group's storage effects run in the order its replica emitted them, one at a time, and its
//!   replica hears each completion before the next effect of the lane runs;
//! - boot is `iggy_recovery::boot_with` in `Open` mode, under the node's lock, held for the
//!   node's life; a group boot refuses stops the node's boot;
//! - the node's partitions follow the committed metadata: a metadata commit that creates
//!   partitions creates their directories (durably, before a checkpoint lists them) and their
//!   groups, in the view the spread rule gives; one that deletes them drops their groups and
//!   removes their directories ([`Node::take_retired`]);
//! - a partition whose topic retains by age or size has retention run over it once a second,
//!   off its lane under its store lock, except while it serves a peer's state transfer (the
//!   image's segments stay while asked);
//! - a clean shutdown records each replica's commit point, publishes every group with its log
//!   synced, and only when every group succeeded writes the clean-shutdown marker.

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::store::Retention;
use iggy_io::Storage;
use iggy_recovery::{BootConfig, Mode, NodeLock, PartitionKey, Report};
use iggy_segments::Partition;
use iggy_vsr::{
    Config, Destination, Durable, Effect, Identity, Message, Outcome, RepairRation, Replica,
    Safeguards, Status,
};

use crate::boot::{metadata_boot, partition_boot, record_commit_point};
use crate::image::Image;
use crate::serve::{
    Asked, READS_IN_FLIGHT_MAX, READS_PER_TICK, READS_QUEUED_MAX, Read, Source, Task, Wanted,
};
use crate::store::{Catalog, Changes, GroupKind, Store, WriteOut, execute_with};

/// A node runs retention over its partitions once every this many ticks (1 s).
pub const RETENTION_TICKS: u64 = 100;
/// An image not asked for this long is dropped, and retention runs on its partition again
/// (1.5 s: an asker waiting on a chunk asks again within a second).
pub const IMAGE_IDLE_TICKS: u64 = 150;
/// Partitions a node serves state transfers of at once; a transfer's first chunk asked beyond
/// is not answered (the asker asks the next peer).
pub const TRANSFERS_SERVED_MAX: usize = 2;

/// How a node runs its groups.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    pub cluster: u128,
    /// This node's index, and how many replicas each group has.
    pub replica: u8,
    pub replicas: u8,
    pub vsr: Config,
    /// The metadata group's replicas' configuration, when it is not `vsr` (a host may size its
    /// ring apart). Either way the node turns `snapshot_transfer` on for every group (the
    /// metadata group ships its snapshot, a partition its committed segments).
    pub metadata_vsr: Option<Config>,
    pub safeguards: Safeguards,
    /// Bytes a replicated partition appends before it publishes (its checkpoint; 128 MiB in
    /// production).
    pub checkpoint_bytes: u64,
    /// The node rations its groups' repair (3 new sessions a tick, 8 in flight); off, every
    /// group asks whenever it wants.
    pub repair_ration: bool,
    /// What boot opens the groups with (sizes, budgets, this boot's incarnation), and creates
    /// partitions with.
    pub boot: BootConfig,
    /// Keep a copy of the committed metadata state for readers ([`Node::metadata`]), cloned
    /// after each metadata commit by whoever runs it.
    pub mirror_metadata: bool,
    /// The memory every partition's prepare ring may hold together (0: no budget, each ring up
    /// to `vsr.ring_bytes_max`): shared evenly, each ring gets the smaller of `ring_bytes_max`
    /// and its share (at least [`RING_SHARE_MIN`]), so that a node's memory does not grow with
    /// the partitions a client creates. A smaller ring serves less repair from memory; the
    /// rest is read from the log on disk.
    pub ring_budget_bytes: u64,
    /// The body bytes of requests every group this node leads may hold admitted and not yet
    /// committed, together (0: no budget, each group up to `vsr.pipeline_max` prepares). A
    /// request past it is refused `NotAccepted` before it is prepared, as one past a full
    /// pipeline is, except that a group whose pipeline is empty always admits one (see
    /// [`Node::deliver`]): the node holds at most this plus one request a group it leads. A
    /// pipeline's bodies stay in memory until they commit, above the prepare ring's budget:
    /// without this, groups that cannot commit (their backups gone) hold up to 64 requests
    /// each.
    pub pipeline_budget_bytes: u64,
}

/// The smallest prepare ring a share of [`NodeConfig::ring_budget_bytes`] gives a partition.
pub const RING_SHARE_MIN: u64 = 1 << 20;

impl NodeConfig {
    fn ration(&self) -> RepairRation {
        if self.repair_ration {
            RepairRation::default()
        } else {
            RepairRation::new(usize::MAX, usize::MAX)
        }
    }
}

/// One group on the node: its replica, its storage and its lane of storage effects.
pub struct Group<S: Storage + Clone> {
    pub kind: GroupKind,
    pub replica: Replica,
    /// Locked by whoever carries out the lane's head (one at a time).
    store: Arc<Mutex<Store<S>>>,
    /// A partition's handle for readers, who need no lock.
    partition: Option<Arc<Partition<S>>>,
    /// Storage effects not yet carried out, in the order the replica emitted them.
    pub lane: VecDeque<Effect>,
    /// Whether the host has the lane's head in hand (a run scheduled, or on a thread).
    pub lane_busy: bool,
    /// Publications carried out beside the lane ([`Node::take_job_beside`]): the one in
    /// flight, the ones that arrived meanwhile (carried out together once it ends), and
    /// whether the lane's head waits for them to end.
    beside: Beside,
    /// A partition's topic's retention (zero: keeps everything), as the metadata said when
    /// the group was hosted.
    pub retention: Retention,
    /// The image a partition serves peers' state transfers from, built at the first chunk
    /// asked, and the node tick a chunk of it was last asked at.
    image: Arc<Mutex<Option<Arc<Image>>>>,
    image_asked: Option<u64>,
    /// The replica's [`Replica::pipeline_bytes`] when the node last looked: its part of
    /// [`Node::pipeline_bytes`].
    pipeline_bytes: u64,
}

impl<S: Storage + Clone> Group<S> {
    fn new(kind: GroupKind, replica: Replica, store: Store<S>) -> Self {
        let partition = match &store {
            Store::Partition { partition, .. } => Some(partition.clone()),
            Store::Metadata(_) => None,
        };
        Self {
            kind,
            replica,
            store: Arc::new(Mutex::new(store)),
            partition,
            lane: VecDeque::new(),
            lane_busy: false,
            beside: Beside::default(),
            retention: Retention::default(),
            image: Arc::new(Mutex::new(None)),
            image_asked: None,
            pipeline_bytes: 0,
        }
    }

    /// The group's storage, locked (it waits while a storage thread carries out an effect).
    pub fn store(&self) -> MutexGuard<'_, Store<S>> {
        lock(&self.store)
    }

    /// The partition, for reads (`None`: the metadata group).
    #[must_use]
    pub fn partition(&self) -> Option<&Arc<Partition<S>>> {
        self.partition.as_ref()
    }
}

/// Queues a peer's read: a request asked again while its read still waits is the same read, and
/// one past [`READS_QUEUED_MAX`] is dropped (its replica asks again).
fn queue_read(reads: &mut VecDeque<Wanted>, wanted: Wanted) {
    if reads.len() < READS_QUEUED_MAX && !reads.contains(&wanted) {
        reads.push_back(wanted);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A storage thread that panicked mid-effect halts its replica (the completion never
    // comes); the store itself is whatever the storage crates left, as after a crash.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What a group's replica emitted since the last drain: messages to route, and whether its lane
/// went from idle to busy (the host starts running it).
#[derive(Debug, Default)]
pub struct Drained {
    pub sends: Vec<(Destination, Message)>,
    pub lane_started: bool,
    /// Answers to the host's reads ([`Node::read`]): the token, and whether it may serve it
    /// from this node's storage now.
    pub reads: Vec<(u64, bool)>,
}

/// A replica's status and view, before or after an input.
pub type StatusView = (Status, u32);

/// What running a lane's head did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ran {
    /// The effect's name (`Effect::name`).
    pub name: &'static str,
    /// A commit: the op executed through before it, and the op it executed through.
    pub commit: Option<(u64, u64)>,
    /// A superblock write: what it wrote.
    pub durable: Option<Durable>,
    /// A prepare or journal that completed: the op it journaled.
    pub journaled: Option<u64>,
    /// The superblock's log_view before the effect.
    pub log_view_before: u32,
    /// The storage failed (the replica halted: the host restarts the process).
    pub failed: Option<String>,
    /// More effects wait on the lane (for a publication beside the lane: the lane's head
    /// waited for it, and may go now).
    pub more: bool,
    /// A publication carried out beside the lane ([`Node::take_job_beside`]).
    pub beside: bool,
    /// Storage refused the effect (a prepare's batch, or no room: [`crate::store::NO_ROOM`]):
    /// why.
    pub refused: Option<String>,
    /// The replica's status and view before and after it took the completion.
    pub before: (Status, u32),
    pub after: (Status, u32),
}

impl Ran {
    /// What is known of `effect` as it is taken off `replica`'s lane.
    fn taking(effect: &Effect, replica: &Replica) -> Self {
        Self {
            name: effect.name(),
            commit: match effect {
                Effect::Commit { through, .. } => Some((replica.commit_min(), *through)),
                _ => None,
            },
            durable: match effect {
                Effect::WriteSuperblock { durable, .. } => Some(*durable),
                _ => None,
            },
            journaled: match effect {
                Effect::Journal { header, .. } => Some(header.op),
                _ => None,
            },
            log_view_before: replica.durable().log_view,
            failed: None,
            more: false,
            beside: false,
            refused: None,
            before: (replica.status(), replica.view()),
            after: (replica.status(), replica.view()),
        }
    }
}

/// Hooks a host's checkers use to watch each storage effect (all no-ops by default).
pub trait Observer {
    /// When the effect is taken off the lane to be carried out (the replica as it was).
    fn before_effect(&mut self, _node: u8, _group: u128, _replica: &Replica, _effect: &Effect) {}
    /// After the store carried it out, before the replica hears of it.
    fn effect_done(
        &mut self,
        _node: u8,
        _group: u128,
        _replica: &Replica,
        _ran: &Ran,
        _outcome: &Outcome,
    ) {
    }
    /// After the replica took the completion (not after a failure: it halted).
    fn effect_completed(&mut self, _node: u8, _group: u128, _replica: &Replica, _ran: &Ran) {}
}

/// An observer that watches nothing.
pub struct Unobserved;

impl Observer for Unobserved {}

/// The head of a group's lane, taken off it to be carried out ([`Job::run`], on any thread).
pub struct Job<S: Storage + Clone> {
    pub group: u128,
    id: u64,
    effect: Effect,
    store: Arc<Mutex<Store<S>>>,
    ran: Ran,
    checkpoint_bytes: u64,
    catalog: Option<Arc<Catalog<S>>>,
    mirror: bool,
    /// The metadata group's.
    metadata: bool,
    /// A publication beside the lane: the partition, and the ids of the `Publish` effects it
    /// completes (none for a checkpoint).
    beside: Option<(Arc<Partition<S>>, Vec<u64>)>,
}

impl<S: Storage + Clone> Job<S> {
    /// The effect's name.
    #[must_use]
    pub fn name(&self) -> &'static str {
        self.ran.name
    }

    /// A publication carried out beside the lane ([`Node::take_job_beside`]): the host runs
    /// it on a thread of its own, not the lane's, and takes the lane's next job meanwhile.
    #[must_use]
    pub fn is_beside(&self) -> bool {
        self.beside.is_some()
    }

    /// Carries out a partition's commit here and now, when it is work in memory: the commit
    /// point raised, the replies taken from the store (each op's was kept at its prepare or
    /// journal write), the consumer offset stores among the entries written to their prepared
    /// files unsynced; it never waits for the WAL's lock, which a write-out holds through its
    /// write ([`Job::run_replying_first`]). So a host may run it on the thread that routes its
    /// replies. Any other job comes back, as does a commit whose store is busy (a retention
    /// pass holds it through its deletes and syncs) or that would read an entry back from the
    /// log to answer it (journaled in an earlier life): those go to a storage thread.
    ///
    /// # Errors
    ///
    /// The job itself, when it is not such a commit.
    pub fn try_run_inline(self: Box<Self>, now_us: u64) -> Result<Done<S>, Box<Self>> {
        let Effect::Commit { through, .. } = self.effect else {
            return Err(self);
        };
        if self.metadata || self.beside.is_some() {
            return Err(self);
        }
        let store = self.store.clone();
        let Ok(mut store) = store.try_lock() else {
            return Err(self);
        };
        let Store::Partition {
            partition, replies, ..
        } = &*store
        else {
            return Err(self);
        };
        let from = partition.committed() + 1;
        if !(from..=through).all(|op| replies.contains_key(&op)) {
            return Err(self);
        }
        // A commit leaves nothing to write out; were there anything, it is written here.
        let (done, write_out) = self.execute_on(&mut store, now_us);
        Ok(written_out(done, write_out))
    }

    /// Carries the effect out on the group's store (`now_us`: the host's clock, for a
    /// primary's stamps).
    #[must_use]
    pub fn run(self, now_us: u64) -> Done<S> {
        let (done, write_out) = self.run_replying_first(now_us);
        written_out(done, write_out)
    }

    /// [`Job::run`], less a partition prepare's or journal write's write of the buffered
    /// entries to the segment files, which comes back for the host to run once it has sent
    /// the completion on ([`WriteOut`]): the replica commits the entry and its reply leaves
    /// while the entry is copied into the page cache (a tenth of a millisecond or more for a
    /// batch of 250 KB, more while the disk writes back). The lane's next job may start
    /// meanwhile; it waits for the write only where it takes the WAL's lock. A write that
    /// fails must halt the node.
    #[must_use]
    pub fn run_replying_first(self, now_us: u64) -> (Done<S>, Option<WriteOut<S>>) {
        if let Some((partition, ids)) = self.beside {
            // Not under the store's lock: the lane's next effects run meanwhile, and the WAL
            // publishes what was appended while they append more.
            let outcome = partition
                .publish()
                .map_or_else(|e| Outcome::Failed(e.to_string()), |()| Outcome::Done);
            let done = Done {
                group: self.group,
                id: self.id,
                outcome,
                ran: self.ran,
                changes: Changes::default(),
                ids,
            };
            return (done, None);
        }
        let store = self.store.clone();
        let mut store = lock(&store);
        self.execute_on(&mut store, now_us)
    }

    /// The effect carried out on `store`, the group's store locked by the caller.
    fn execute_on(self, store: &mut Store<S>, now_us: u64) -> (Done<S>, Option<WriteOut<S>>) {
        let (outcome, mut changes) = execute_with(
            store,
            self.effect,
            now_us,
            self.checkpoint_bytes,
            self.catalog.as_deref(),
            self.mirror,
        );
        let write_out = changes.write_out.take();
        let done = Done {
            group: self.group,
            id: self.id,
            outcome,
            ran: self.ran,
            changes,
            ids: Vec::new(),
        };
        (done, write_out)
    }
}

/// `done` once its write-out, if any, ran here: a write that fails fails the effect.
fn written_out<S: Storage + Clone>(mut done: Done<S>, write_out: Option<WriteOut<S>>) -> Done<S> {
    if let Some(Err(reason)) = write_out.map(WriteOut::run) {
        done.outcome = Outcome::Failed(reason);
    }
    done
}

/// A carried-out job, for [`Node::complete`].
pub struct Done<S: Storage + Clone> {
    pub group: u128,
    id: u64,
    outcome: Outcome,
    ran: Ran,
    changes: Changes<S>,
    /// The `Publish` effects a publication beside the lane completes.
    ids: Vec<u64>,
}

/// A group's publications beside its lane ([`Node::take_job_beside`]).
#[derive(Default)]
struct Beside {
    /// The host takes this group's jobs with [`Node::take_job_beside`].
    on: bool,
    /// One is in flight.
    in_flight: bool,
    /// `Publish` effects that arrived while it was: the next publication completes them all.
    queued: Vec<u64>,
    /// The partition's checkpoint is due (`checkpoint_bytes` unpublished): the next
    /// publication is wanted even with no `Publish` effect queued.
    checkpoint: bool,
    /// The lane's head is an effect that waits for the publication in flight to end.
    lane_waits: bool,
}

/// A group the metadata deleted: its store (a storage thread may still hold it until its last
/// effect ends) and its directory to remove ([`retire`]).
pub struct Retired<S: Storage + Clone> {
    pub key: PartitionKey,
    store: Arc<Mutex<Store<S>>>,
}

/// Removes a deleted partition's directory once no effect of its group runs any more.
pub fn retire<S: Storage + Clone>(storage: &S, retired: Retired<S>) -> Result<(), String> {
    let Retired { key, store } = retired;
    // Waits for an effect in flight, then closes the partition's files (readers may still hold
    // the partition: their open files survive the unlink).
    drop(lock(&store));
    drop(store);
    iggy_recovery::remove_partition(storage, Path::new(""), key)
        .map_err(|e| format!("removing deleted partition {}: {e}", key.dir_name()))
}

/// A partition this node could not create (see [`Node::unavailable`]).
#[derive(Clone, Debug)]
pub struct Unavailable {
    pub reason: String,
    /// Tries so far.
    pub tries: u32,
    next_try: u64,
}

/// How often an unavailable partition's create is tried again (10 s).
const UNAVAILABLE_RETRY_TICKS: u64 = 1_000;

/// A node of many groups.
pub struct Node<S: Storage + Clone> {
    pub index: u8,
    pub groups: BTreeMap<u128, Group<S>>,
    /// The repair budget its groups share.
    pub ration: RepairRation,
    /// What boot discarded past each group's published frontier, in bytes (by the report's
    /// group name: `metadata`, `partition 1.1.1`).
    pub discarded: BTreeMap<String, u64>,
    storage: S,
    config: NodeConfig,
    catalog: Arc<Catalog<S>>,
    /// The committed metadata state, when mirrored.
    metadata: Option<Arc<iggy_metadata::State>>,
    /// Deleted groups whose directories wait to be removed.
    retired: Vec<Retired<S>>,
    /// Peers' repair rounds to serve from disk, oldest first, and how many reads are out.
    reads: VecDeque<Wanted>,
    reads_in_flight: usize,
    /// Partitions whose retention pass is due, and the host's clock when it was queued.
    retention: VecDeque<(u128, u64)>,
    /// Ticks counted by [`Node::maintain`].
    ticks: u64,
    /// Transfers' first chunks not answered: the node served [`TRANSFERS_SERVED_MAX`] already.
    pub transfers_turned_away: u64,
    /// Partitions the metadata lists that this node could not create (at a commit or at boot),
    /// with why and the tick of the next try ([`Node::maintain`]): every other group runs.
    unavailable: BTreeMap<PartitionKey, Unavailable>,
    /// The groups' [`Group::pipeline_bytes`] summed: what [`NodeConfig::pipeline_budget_bytes`]
    /// bounds.
    pipeline_bytes: u64,
    /// Held for the node's life: no other process writes its directory meanwhile.
    _lock: NodeLock,
}

impl<S: Storage + Clone> Node<S> {
    /// Boots the node in `storage`'s root through `recovery::boot`, one replica per group: the
    /// metadata group and every partition it lists (persisted when its topic is). A group whose
    /// superblock records an earlier boot recovers; a new one starts in normal status. Refuses
    /// (naming the group and why) when boot refuses a group.
    pub fn boot(storage: S, config: &NodeConfig) -> Result<(Self, Report), String> {
        // Every group of a node is a replica's, one-replica groups included.
        let config = &NodeConfig {
            boot: BootConfig {
                consensus: true,
                // A damaged partition is rebuilt from its peers rather than stopping the node.
                rebuild_from_peers: true,
                // A partition boot cannot create is left to its peers and tried again.
                unavailable_partitions: config.replicas > 1,
                ..config.boot.clone()
            },
            ..config.clone()
        };
        let index = config.replica;
        let started = std::time::Instant::now();
        let (state, report) =
            iggy_recovery::boot_with(storage.clone(), Path::new(""), Mode::Open, &config.boot)
                .map_err(|e| format!("node {index}: boot: {e}"))?;
        if let Some(refused) = report
            .groups
            .iter()
            .find(|g| g.status == iggy_recovery::Status::Refuse || g.error.is_some())
        {
            return Err(format!(
                "node {index}: boot refused {}: {}",
                refused.group,
                refused.error.clone().unwrap_or_default()
            ));
        }
        for finding in report
            .findings
            .iter()
            .filter(|f| f.action == iggy_recovery::Action::RebuildFromPeers)
        {
            tracing::warn!(
                replica = index,
                group = %finding.group,
                "{}: {}",
                finding.file.display(),
                finding.what
            );
        }
        let mut unavailable = BTreeMap::new();
        for finding in report
            .findings
            .iter()
            .filter(|f| f.kind == iggy_recovery::UNAVAILABLE_PARTITION)
        {
            tracing::warn!(replica = index, group = %finding.group, "{}: {}", finding.file.display(), finding.what);
        }
        let mut discarded = BTreeMap::new();
        for finding in &report.findings {
            if finding.action == iggy_recovery::Action::DiscardUnpublished {
                *discarded.entry(finding.group.clone()).or_default() += finding.bytes;
            }
        }
        let metadata = state
            .metadata
            .ok_or_else(|| format!("node {index}: no metadata group"))?;
        let identity = state
            .identity
            .ok_or_else(|| format!("node {index}: no identity"))?;
        let catalog = Arc::new(Catalog {
            storage: storage.clone(),
            boot: config.boot.clone(),
            identity,
        });
        let mirror = config
            .mirror_metadata
            .then(|| Arc::new(metadata.state().clone()));
        for key in iggy_recovery::known_partitions(metadata.state()) {
            if !state.partitions.contains_key(&key) {
                let reason = report
                    .findings
                    .iter()
                    .find(|f| {
                        f.kind == iggy_recovery::UNAVAILABLE_PARTITION && f.group == key.label()
                    })
                    .map_or_else(|| "not opened at boot".to_string(), |f| f.what.clone());
                unavailable.insert(
                    key,
                    Unavailable {
                        reason,
                        tries: 1,
                        next_try: UNAVAILABLE_RETRY_TICKS,
                    },
                );
            }
        }
        let partitions: Vec<(PartitionKey, Partition<S>, bool, Retention)> = state
            .partitions
            .into_iter()
            .map(|(key, partition)| {
                let persisted = crate::store::persisted(metadata.state(), key);
                let retention = crate::store::retention(metadata.state(), key);
                (key, partition, persisted, retention)
            })
            .collect();
        let mut node = Self {
            index,
            groups: BTreeMap::new(),
            ration: config.ration(),
            discarded,
            storage,
            config: config.clone(),
            catalog,
            metadata: mirror,
            retired: Vec::new(),
            reads: VecDeque::new(),
            reads_in_flight: 0,
            retention: VecDeque::new(),
            ticks: 0,
            transfers_turned_away: 0,
            unavailable,
            pipeline_bytes: 0,
            _lock: state.lock,
        };
        let recovered = started.elapsed();
        let boot = metadata_boot(&metadata, config.boot.incarnation)?;
        node.host(
            GroupKind::Metadata,
            boot,
            Store::Metadata(Box::new(metadata)),
        );
        for (key, partition, persisted, retention) in partitions {
            node.host_partition(key, partition, persisted, retention)?;
        }
        node.share_ring_budget();
        let (tail_entries, tail_bytes) = node
            .groups
            .values()
            .map(|g| g.replica.ring_size())
            .fold((0, 0), |(e, b), (ge, gb)| (e + ge, b + gb));
        tracing::info!(
            replica = index,
            groups = node.groups.len(),
            recovery_ms = recovered.as_secs_f64() * 1e3,
            tails_ms = (started.elapsed() - recovered).as_secs_f64() * 1e3,
            tail_entries,
            tail_bytes,
            "groups booted: storage recovered, then each replica's uncommitted tail read back from its log"
        );
        Ok((node, report))
    }

    fn identity(&self, group: u128) -> Identity {
        Identity {
            cluster: self.config.cluster,
            group,
            replica: self.index,
            replicas: self.config.replicas,
        }
    }

    fn host(&mut self, kind: GroupKind, boot: iggy_vsr::Boot, store: Store<S>) {
        let config = match (&self.config.metadata_vsr, kind) {
            (Some(config), GroupKind::Metadata) => config.clone(),
            _ => self.config.vsr.clone(),
        };
        let config = iggy_vsr::Config {
            // The metadata group ships its snapshot, a partition its committed segments
            // (`crate::image`).
            snapshot_transfer: true,
            ..config
        };
        let replica = Replica::new(
            config,
            self.config.safeguards,
            self.identity(kind.id()),
            boot,
        );
        if let Some(old) = self
            .groups
            .insert(kind.id(), Group::new(kind, replica, store))
        {
            self.pipeline_bytes -= old.pipeline_bytes;
        }
    }

    /// Gives each partition's replica its share of [`NodeConfig::ring_budget_bytes`]: once
    /// after each change of the partitions hosted (boot, a commit's creates and deletes, a
    /// retried create), not per partition, which would make a boot of many partitions
    /// quadratic.
    fn share_ring_budget(&mut self) {
        let budget = self.config.ring_budget_bytes;
        if budget == 0 {
            return;
        }
        let partitions = self
            .groups
            .values()
            .filter(|g| g.kind != GroupKind::Metadata)
            .count()
            .max(1) as u64;
        let share = (budget / partitions)
            .max(RING_SHARE_MIN)
            .min(self.config.vsr.ring_bytes_max);
        for group in self.groups.values_mut() {
            if group.kind != GroupKind::Metadata {
                group.replica.set_ring_bytes_max(share);
            }
        }
    }

    fn host_partition(
        &mut self,
        key: PartitionKey,
        partition: Partition<S>,
        persisted: bool,
        retention: Retention,
    ) -> Result<(), String> {
        let kind = GroupKind::Partition { key, persisted };
        let boot = partition_boot(&partition, persisted, self.config.boot.incarnation)?;
        let store = Store::Partition {
            partition: Arc::new(partition),
            persisted,
            replies: BTreeMap::new(),
            staging: None,
        };
        self.host(kind, boot, store);
        if let Some(group) = self.groups.get_mut(&kind.id()) {
            group.retention = retention;
        }
        Ok(())
    }

    /// The committed metadata state, when the node mirrors it ([`NodeConfig::mirror_metadata`]).
    #[must_use]
    pub fn metadata(&self) -> Option<&Arc<iggy_metadata::State>> {
        self.metadata.as_ref()
    }

    /// The ration's decision for this tick: which groups may ask peers for prepares.
    pub fn ration_repair(&mut self) {
        let wanting = self
            .groups
            .iter()
            .filter(|(_, g)| g.replica.wants_repair())
            .map(|(id, _)| *id)
            .collect();
        self.ration.tick(&wanting);
        for (id, group) in &mut self.groups {
            group.replica.permit_repair(self.ration.permits(*id));
        }
    }

    /// Who leads `group`, from this node's own replica of it (`None`: not hosted, or in a view
    /// change or recovery).
    #[must_use]
    pub fn leader_of(&self, group: u128) -> Option<u8> {
        self.groups.get(&group).and_then(|g| g.replica.leader())
    }

    /// One tick of `group`'s replica; returns its (status, view) before and after.
    pub fn tick(&mut self, group: u128) -> Option<((Status, u32), (Status, u32))> {
        let g = self.groups.get_mut(&group)?;
        let before = (g.replica.status(), g.replica.view());
        g.replica.tick();
        Some((before, (g.replica.status(), g.replica.view())))
    }

    /// A message for `group`'s replica; returns its (status, view) before and after. A
    /// client's request is admitted within [`NodeConfig::pipeline_budget_bytes`].
    pub fn deliver(
        &mut self,
        group: u128,
        message: Message,
    ) -> Option<((Status, u32), (Status, u32))> {
        let budget = self.config.pipeline_budget_bytes;
        let held = self.pipeline_bytes;
        let request = matches!(message, Message::Request { .. });
        let g = self.groups.get_mut(&group)?;
        let before = (g.replica.status(), g.replica.view());
        if request {
            // A group whose pipeline is empty always admits one request, whatever the others
            // hold: its backups can tell a primary that stopped committing only by what it
            // prepares (`commit-stall`), so a primary refusing a group's every request
            // because other groups' pipelines are stuck (it no longer hears its peers) would
            // hold that group without writes for as long as it lasts (simulator, deaf seeds).
            let room = if budget == 0 || g.pipeline_bytes == 0 {
                u64::MAX
            } else {
                budget.saturating_sub(held)
            };
            g.replica.set_pipeline_room(room);
        }
        g.replica.on_message(message);
        let after = (g.replica.status(), g.replica.view());
        if request {
            self.account_pipeline(group);
        }
        Some((before, after))
    }

    /// Body bytes of the requests this node's groups admitted as primaries and have not
    /// committed ([`NodeConfig::pipeline_budget_bytes`] bounds it), as of each group's last
    /// [`Node::deliver`] of a request or [`Node::drain`].
    #[must_use]
    pub fn pipeline_bytes(&self) -> u64 {
        self.pipeline_bytes
    }

    /// Takes `group`'s pipeline bytes into the node's sum.
    fn account_pipeline(&mut self, group: u128) {
        if let Some(g) = self.groups.get_mut(&group) {
            let now = g.replica.pipeline_bytes();
            self.pipeline_bytes = self.pipeline_bytes - g.pipeline_bytes + now;
            g.pipeline_bytes = now;
        }
    }

    /// The host saw the connection from peer `replica` close: every group this node backs up
    /// under that peer starts a view change at once (`iggy_vsr::Replica::peer_connection_closed`).
    /// Returns the groups whose (status, view) changed, with both.
    pub fn peer_connection_closed(&mut self, replica: u8) -> Vec<(u128, StatusView, StatusView)> {
        let mut changed = Vec::new();
        for (id, g) in &mut self.groups {
            let before = (g.replica.status(), g.replica.view());
            g.replica.peer_connection_closed(replica);
            let after = (g.replica.status(), g.replica.view());
            if before != after {
                changed.push((*id, before, after));
            }
        }
        changed
    }

    /// Asks `group`'s replica for a read barrier (`iggy_vsr::Replica::read`): its answer comes
    /// out of [`Node::drain`] as `(token, ready)`. `None`: the group is not hosted here.
    pub fn read(&mut self, group: u128, token: u64) -> Option<()> {
        self.groups.get_mut(&group)?.replica.read(token);
        Some(())
    }

    /// Asks `group`'s replica to publish what it journaled now (`Replica::publish_now`); none if
    /// this node hosts no such group.
    pub fn publish_now(&mut self, group: u128) -> Option<()> {
        self.groups.get_mut(&group)?.replica.publish_now();
        Some(())
    }

    /// Takes `group`'s new effects: sends are returned in the order emitted, storage effects
    /// join its lane.
    pub fn drain(&mut self, group: u128) -> Drained {
        let mut drained = Drained::default();
        self.account_pipeline(group);
        let Some(g) = self.groups.get_mut(&group) else {
            return drained;
        };
        for effect in g.replica.take_effects() {
            match effect {
                Effect::Send { to, message } => drained.sends.push((to, message)),
                Effect::ReadBarrier { token, ready } => drained.reads.push((token, ready)),
                Effect::ReadPrepares {
                    to,
                    from,
                    first,
                    last,
                } => queue_read(
                    &mut self.reads,
                    Wanted {
                        group,
                        to,
                        from,
                        asked: Asked::Prepares { first, last },
                    },
                ),
                Effect::ReadSnapshot { to, from, offset } => queue_read(
                    &mut self.reads,
                    Wanted {
                        group,
                        to,
                        from,
                        asked: Asked::SnapshotChunk { offset },
                    },
                ),
                storage => {
                    g.lane.push_back(storage);
                    if !g.lane_busy {
                        g.lane_busy = true;
                        drained.lane_started = true;
                    }
                }
            }
        }
        drained
    }

    /// The node's own step on a tick (`now_us`: the host's clock), after the groups'
    /// [`Node::ration_repair`]: every [`RETENTION_TICKS`], once the last pass ran to its end, a
    /// retention pass is queued for each partition whose topic retains by age or size and that
    /// serves no transfer (its image's segments must stay while asked); an image not asked for
    /// [`IMAGE_IDLE_TICKS`] is dropped.
    pub fn maintain(&mut self, now_us: u64) {
        self.ticks += 1;
        let ticks = self.ticks;
        self.retry_unavailable();
        for group in self.groups.values_mut() {
            if group
                .image_asked
                .is_some_and(|at| ticks >= at + IMAGE_IDLE_TICKS)
            {
                group.image_asked = None;
                *lock(&group.image) = None;
            }
        }
        // A pass starts only once the last one ran to its end: the queue holds each partition
        // at most once, however many there are.
        if !ticks.is_multiple_of(RETENTION_TICKS) || !self.retention.is_empty() {
            return;
        }
        for (id, group) in &self.groups {
            let retains = group.retention.retains();
            if group.partition.is_some() && retains && group.image_asked.is_none() {
                self.retention.push_back((*id, now_us));
            }
        }
    }

    /// The partitions this node could not create, and why.
    #[must_use]
    pub fn unavailable(&self) -> &BTreeMap<PartitionKey, Unavailable> {
        &self.unavailable
    }

    /// Tries again to create each unavailable partition whose time has come. Its replica starts
    /// recovering (its peers committed ops meanwhile): it asks who leads and repairs or
    /// transfers what it lacks. On the tick thread: a create preallocates one segment and
    /// syncs, and it happens only while a partition is unavailable.
    fn retry_unavailable(&mut self) {
        let due: Vec<PartitionKey> = self
            .unavailable
            .iter()
            .filter(|(_, u)| self.ticks >= u.next_try)
            .map(|(key, _)| *key)
            .collect();
        if due.is_empty() {
            return;
        }
        let Some(state) = self.metadata_state() else {
            return;
        };
        for key in due {
            if !iggy_recovery::known_partitions(&state).contains(&key) {
                self.unavailable.remove(&key);
                continue;
            }
            let created = iggy_recovery::create_partition(
                &self.storage,
                Path::new(""),
                &self.config.boot,
                self.catalog.identity,
                &state,
                key,
                true,
            );
            let outcome = created.map_err(|e| e.to_string()).and_then(|partition| {
                self.host_partition(
                    key,
                    partition,
                    crate::store::persisted(&state, key),
                    crate::store::retention(&state, key),
                )
            });
            match outcome {
                Ok(()) => {
                    self.share_ring_budget();
                    tracing::info!(replica = self.index, partition = %key.label(), "an unavailable partition was created: its replica recovers from its peers");
                    self.unavailable.remove(&key);
                }
                Err(e) => {
                    let _ = iggy_recovery::mark_not_created(&self.storage, Path::new(""), key);
                    if let Some(u) = self.unavailable.get_mut(&key) {
                        u.tries += 1;
                        u.next_try = self.ticks + UNAVAILABLE_RETRY_TICKS;
                        if u.reason != e {
                            tracing::warn!(replica = self.index, partition = %key.label(), reason = %e, "an unavailable partition still cannot be created");
                        }
                        u.reason = e;
                    }
                }
            }
        }
    }

    /// The committed metadata state: the mirror, or the metadata group's own.
    pub fn metadata_state(&self) -> Option<Arc<iggy_metadata::State>> {
        if let Some(state) = &self.metadata {
            return Some(state.clone());
        }
        let group = self.groups.get(&GroupKind::Metadata.id())?;
        match &*group.store() {
            Store::Metadata(metadata) => Some(Arc::new(metadata.state().clone())),
            Store::Partition { .. } => None,
        }
    }

    /// The work to run off the lanes this tick: peers' repair rounds and transfer chunks to read
    /// from disk, and retention passes (at most half of them). At most [`READS_PER_TICK`], and
    /// no more than [`READS_IN_FLIGHT_MAX`] handed out and not yet [`Node::served`]. A round of a group gone
    /// since is dropped, and so is a transfer's chunk of a partition beyond the
    /// [`TRANSFERS_SERVED_MAX`] a node serves at once.
    pub fn take_reads(&mut self) -> Vec<Read<S>> {
        let mut reads = Vec::new();
        let mut retaining = 0;
        while reads.len() < READS_PER_TICK && self.reads_in_flight < READS_IN_FLIGHT_MAX {
            // Retention takes at most half a tick's reads: peers' repair is never starved.
            if retaining < READS_PER_TICK / 2
                && let Some((id, now_us)) = self.retention.pop_front()
            {
                retaining += 1;
                let Some(g) = self.groups.get(&id) else {
                    continue;
                };
                let task = Task::Retain {
                    now_us,
                    retention: g.retention,
                };
                self.reads_in_flight += 1;
                let source = Source::Locked(g.store.clone());
                reads.push(Read::new(id, g.kind.label(), task, source, None));
                continue;
            }
            let Some(wanted) = self.reads.pop_front() else {
                break;
            };
            let serving = self
                .groups
                .iter()
                .filter(|(id, g)| **id != wanted.group && g.image_asked.is_some())
                .count();
            let ticks = self.ticks;
            let Some(g) = self.groups.get_mut(&wanted.group) else {
                continue;
            };
            let transfer = matches!(wanted.asked, Asked::SnapshotChunk { .. });
            let source = match &g.partition {
                Some(partition) if transfer => {
                    if g.image_asked.is_none() && serving >= TRANSFERS_SERVED_MAX {
                        self.transfers_turned_away += 1;
                        continue;
                    }
                    g.image_asked = Some(ticks);
                    Source::Partition(partition.clone())
                }
                Some(partition) => Source::Partition(partition.clone()),
                None => Source::Locked(g.store.clone()),
            };
            self.reads_in_flight += 1;
            let image = transfer.then(|| g.image.clone());
            reads.push(Read::new(
                wanted.group,
                g.kind.label(),
                Task::Serve(wanted),
                source,
                image,
            ));
        }
        reads
    }

    /// A read handed out by [`Node::take_reads`] ended (its answer is the host's to send).
    pub fn served(&mut self) {
        self.reads_in_flight = self.reads_in_flight.saturating_sub(1);
    }

    /// Takes the head of `group`'s lane to be carried out, `observer` watching. `None`: no such
    /// group, or the lane is empty (and no longer busy).
    pub fn take_job(&mut self, group: u128, observer: &mut dyn Observer) -> Option<Job<S>> {
        self.take_job_with(group, observer, false)
    }

    /// [`Node::take_job`] for a host that carries a replicated partition's publications out
    /// beside its lane: a `Publish` effect of a replica in normal status (the periodic one,
    /// or a client's flush) comes back as a job to run on another thread ([`Job::is_beside`]),
    /// and the lane goes on at once with the prepares, journal writes, commits and
    /// superblock writes after it, which the WAL appends while it publishes (its
    /// publication covers at least what was appended before the effect, as on the lane).
    /// Any other effect waits for the publication to end. A publication ends with its
    /// completion as on the lane; until then no view start counts on it (a view start's
    /// publication, in a view change, stays on the lane). At most one is in flight per group:
    /// the periodic ones that arrive meanwhile are carried out together after it. Before
    /// this an fdatasync of up to `checkpoint_bytes` held every prepare of its partition
    /// behind it (the p99 of the unsynced loads, `docs/benchmarks.md`).
    pub fn take_job_beside(&mut self, group: u128, observer: &mut dyn Observer) -> Option<Job<S>> {
        self.take_job_with(group, observer, true)
    }

    fn take_job_with(
        &mut self,
        group: u128,
        observer: &mut dyn Observer,
        beside: bool,
    ) -> Option<Job<S>> {
        let index = self.index;
        let g = self.groups.get_mut(&group)?;
        g.beside.on |= beside;
        let Some(head) = g.lane.front() else {
            g.lane_busy = false;
            return None;
        };
        let publication = matches!(head, Effect::Publish { .. })
            && beside
            && g.kind.is_replicated_partition()
            && g.replica.status() == Status::Normal
            && g.partition.is_some();
        if g.beside.in_flight {
            if publication {
                // The one in flight may have started before this effect's entries were
                // appended: the next publication, once it ends, covers them.
                if let Some(Effect::Publish { id, .. }) = g.lane.pop_front() {
                    g.beside.queued.push(id);
                }
                return self.take_job_with(group, observer, beside);
            }
            if !matches!(
                head,
                Effect::Prepare { .. }
                    | Effect::Journal { .. }
                    | Effect::Commit { .. }
                    | Effect::WriteSuperblock { .. }
            ) {
                // The lane stays busy: the publication's completion takes it up again.
                g.beside.lane_waits = true;
                return None;
            }
        }
        let effect = g.lane.pop_front()?;
        let ran = Ran::taking(&effect, &g.replica);
        observer.before_effect(index, group, &g.replica, &effect);
        let metadata = g.kind == GroupKind::Metadata;
        let id = effect.id().unwrap_or(0);
        let beside = if publication {
            g.beside.in_flight = true;
            g.beside.checkpoint = false;
            g.partition.clone().map(|p| (p, vec![id]))
        } else {
            None
        };
        // A replicated partition's checkpoint, when its publications run beside the lane, is
        // one of them too ([`Node::take_queued_publication`]); the lane publishes only past
        // twice the checkpoint (the publications fell behind), which bounds what a kill can
        // forget as before.
        let checkpoint_bytes = if g.beside.on {
            // Below the WAL's bound on unpublished bytes less one prepare, as the lane's own
            // checkpoint always was (past it an append is refused, and the replica halts).
            let bound = self
                .config
                .boot
                .unpublished_bytes_max
                .saturating_sub(iggy_segments::PREPARE_BYTES_MAX);
            self.config
                .checkpoint_bytes
                .saturating_mul(2)
                .min(bound)
                .max(self.config.checkpoint_bytes)
        } else {
            self.config.checkpoint_bytes
        };
        let ran = Ran {
            beside: beside.is_some(),
            ..ran
        };
        Some(Job {
            group,
            id,
            effect,
            store: g.store.clone(),
            ran,
            checkpoint_bytes,
            catalog: metadata.then(|| self.catalog.clone()),
            mirror: metadata && self.config.mirror_metadata,
            metadata,
            beside,
        })
    }

    /// The next publication beside `group`'s lane, if none is in flight and one is wanted:
    /// the `Publish` effects queued behind the last one (one job completes them all), or the
    /// partition's checkpoint. The host runs it like [`Node::take_job_beside`]'s, after every
    /// completion of the group.
    pub fn take_queued_publication(&mut self, group: u128) -> Option<Job<S>> {
        let g = self.groups.get_mut(&group)?;
        if g.beside.in_flight || (g.beside.queued.is_empty() && !g.beside.checkpoint) {
            return None;
        }
        let partition = g.partition.clone()?;
        let ids = std::mem::take(&mut g.beside.queued);
        g.beside.checkpoint = false;
        g.beside.in_flight = true;
        // The effect is only the job's name: the publication completes `ids`.
        let effect = Effect::Publish { id: 0, through: 0 };
        Some(Job {
            group,
            id: 0,
            ran: Ran {
                beside: true,
                ..Ran::taking(&effect, &g.replica)
            },
            effect,
            store: g.store.clone(),
            checkpoint_bytes: self.config.checkpoint_bytes,
            catalog: None,
            mirror: false,
            metadata: false,
            beside: Some((partition, ids)),
        })
    }

    /// Whether `group` has a publication beside its lane in flight, or `Publish` effects
    /// queued behind it (a stop waits for them; not for a checkpoint, which the shutdown's
    /// own publication covers).
    #[must_use]
    pub fn publishing_beside(&self, group: u128) -> bool {
        self.groups
            .get(&group)
            .is_some_and(|g| g.beside.in_flight || !g.beside.queued.is_empty())
    }

    /// Hands the replica of a carried-out job its completion, `observer` watching, and applies
    /// what a metadata commit changed (new groups hosted, deleted ones retired). `None`: the
    /// group is gone (deleted meanwhile). A storage failure halts the replica: the host
    /// restarts the node.
    pub fn complete(&mut self, done: Done<S>, observer: &mut dyn Observer) -> Option<Ran> {
        let index = self.index;
        let Done {
            group,
            id,
            outcome,
            mut ran,
            changes,
            ids,
        } = done;
        let g = self.groups.get_mut(&group)?;
        if ran.beside {
            if let Outcome::Failed(reason) = &outcome {
                ran.failed = Some(reason.clone());
            }
            g.beside.in_flight = false;
            observer.effect_done(index, group, &g.replica, &ran, &outcome);
            for id in ids {
                g.replica.on_completion(id, outcome.clone());
            }
            ran.after = (g.replica.status(), g.replica.view());
            // The lane's head waited for it: the host takes the lane up again.
            ran.more = std::mem::take(&mut g.beside.lane_waits);
            if ran.failed.is_none() {
                observer.effect_completed(index, group, &g.replica, &ran);
            }
            return Some(ran);
        }
        ran.journaled = match &outcome {
            Outcome::Prepared { header, .. } => Some(header.op),
            Outcome::Done => ran.journaled,
            _ => None,
        };
        match &outcome {
            Outcome::Failed(reason) => ran.failed = Some(reason.clone()),
            Outcome::Refused(reason) => ran.refused = Some(reason.clone()),
            _ => {}
        }
        ran.more = !g.lane.is_empty();
        if g.beside.on
            && ran.journaled.is_some()
            && g.kind.is_replicated_partition()
            && g.partition
                .as_ref()
                .is_some_and(|p| p.unpublished_bytes() >= self.config.checkpoint_bytes)
        {
            g.beside.checkpoint = true;
        }
        observer.effect_done(index, group, &g.replica, &ran, &outcome);
        g.replica.on_completion(id, outcome);
        ran.after = (g.replica.status(), g.replica.view());
        if ran.failed.is_none() {
            if !ran.more {
                g.lane_busy = false;
            }
            observer.effect_completed(index, group, &g.replica, &ran);
        }
        if let Some(installed) = &changes.installed {
            g.partition = Some(installed.clone());
        }
        if let Err(reason) = self.apply(changes) {
            // A created partition exists on disk but its group could not be hosted: the host
            // restarts the node as on any storage failure, and boot opens it.
            ran.failed = Some(reason);
        }
        Some(ran)
    }

    /// Hosts the partitions a metadata commit created, retires the ones it deleted, and gives
    /// the ones it kept their topic's retention as it now stands.
    fn apply(&mut self, changes: Changes<S>) -> Result<(), String> {
        let Changes {
            created,
            deleted,
            retention,
            mirror,
            installed: _,
            unavailable,
            write_out: _,
        } = changes;
        for (key, retention) in retention {
            let id = GroupKind::Partition {
                key,
                persisted: false,
            }
            .id();
            if let Some(group) = self.groups.get_mut(&id) {
                group.retention = retention;
            }
        }
        for (key, reason) in unavailable {
            tracing::warn!(
                replica = self.index,
                partition = %key.label(),
                %reason,
                "a committed partition could not be created here: it is unavailable on this node (its other replicas serve it); trying again every 10 s"
            );
            self.unavailable.insert(
                key,
                Unavailable {
                    reason,
                    tries: 1,
                    next_try: self.ticks + UNAVAILABLE_RETRY_TICKS,
                },
            );
        }
        if let Some(state) = mirror {
            self.metadata = Some(state);
        }
        for key in deleted {
            self.unavailable.remove(&key);
            let kind = GroupKind::Partition {
                key,
                persisted: false,
            };
            let id = kind.id();
            if let Some(group) = self.groups.remove(&id) {
                self.pipeline_bytes -= group.pipeline_bytes;
                // The ration forgets it at its next tick (it no longer wants repair).
                self.retired.push(Retired {
                    key,
                    store: group.store,
                });
            }
        }
        for created in created {
            self.host_partition(
                created.key,
                created.partition,
                created.persisted,
                created.retention,
            )?;
        }
        self.share_ring_budget();
        Ok(())
    }

    /// The groups metadata commits deleted, whose directories the host removes ([`retire`],
    /// on a storage thread).
    pub fn take_retired(&mut self) -> Vec<Retired<S>> {
        std::mem::take(&mut self.retired)
    }

    /// Takes the head of `group`'s lane, carries it out on this thread and completes it: the
    /// simulator's way. `None`: no such group, or the lane is empty (and no longer busy).
    pub fn run_lane_head(
        &mut self,
        group: u128,
        now_us: u64,
        observer: &mut dyn Observer,
    ) -> Option<Ran> {
        let job = self.take_job(group, observer)?;
        let done = job.run(now_us);
        self.complete(done, observer)
    }

    /// A clean shutdown: every replica's commit point is recorded in its superblock (with the
    /// durable commit point), every group publishes what it appended with its log synced, and
    /// the node writes the clean-shutdown marker when all of them succeeded (so its next boot
    /// skips the rewrites of trusted state). Deleted partitions' directories are removed first.
    /// Returns the first failure. The node is gone after (its lock released).
    pub fn shutdown(mut self) -> Result<(), String> {
        let index = self.index;
        let mut result = Ok(());
        for retired in self.take_retired() {
            if let Err(e) = retire(&self.storage, retired)
                && result.is_ok()
            {
                result = Err(format!("node {index}: {e}"));
            }
        }
        if self.config.safeguards.durable_commit_point {
            for group in self.groups.values_mut() {
                if let Err(e) = record_commit_point(group)
                    && result.is_ok()
                {
                    result = Err(format!("node {index}: {}: {e}", group.kind.label()));
                }
            }
        }
        for group in self.groups.values() {
            let prepared = match &*group.store() {
                Store::Partition { partition, .. } => {
                    partition.prepare_shutdown().map_err(|e| e.to_string())
                }
                Store::Metadata(metadata) => metadata.prepare_shutdown().map_err(|e| e.to_string()),
            };
            if let Err(e) = prepared
                && result.is_ok()
            {
                result = Err(format!("node {index}: {}: {e}", group.kind.label()));
            }
        }
        if result.is_ok() {
            // Every group synced what it trusts: the next boot may skip the rewrites.
            result = iggy_recovery::write_clean_shutdown(&self.storage, Path::new(""))
                .map_err(|e| format!("node {index}: clean-shutdown marker: {e}"));
        }
        result
    }
}
