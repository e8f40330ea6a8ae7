//! One simulated node: a `SimStorage` holding a real node directory (the metadata group and the
//! partitions, booted through `recovery::boot`), one VSR replica per group, and the executor that
//! carries out each replica's storage effects on the group's ordered lane through the storage
//! crates' replicated entry points.

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;

use iggy_format::Header;
use iggy_format::operation;
use iggy_io::SimStorage;
use iggy_metadata::group::{GROUP_ID, MetadataGroup};
use iggy_metadata::{Durability, Op, Retention, codec};
use iggy_recovery::{BootConfig, Mode, NodeLock, PartitionKey};
use iggy_segments::offsets::ConsumerKind;
use iggy_segments::{Partition, Request};
use iggy_superblock::{Identity, VsrState};
use iggy_vsr::{Boot, Config, Durable, Effect, Outcome, RepairRation, Replica, Safeguards};

/// The cluster's layout, the same on every node.
#[derive(Clone, Debug)]
pub struct Layout {
    pub cluster: u128,
    pub replicas: u8,
    /// Partitions of topic 1 (replicated durability: acknowledged once queued in the WAL).
    pub replicated: u32,
    /// Partitions of topic 2 (persisted: published before acknowledged).
    pub persisted: u32,
    pub segment_size_bytes: u64,
    pub vsr: Config,
    pub safeguards: Safeguards,
    /// Each partition's group starts in the view of its metadata leader (primaries spread over
    /// the nodes); off, every group starts at view 0 (node 0 leads all, the article's cluster).
    pub spread_primaries: bool,
    /// Bytes a replicated partition appends before it publishes (its checkpoint).
    pub checkpoint_bytes: u64,
    /// Each node rations repair (3 new sessions a tick, 8 in flight); off, every group asks
    /// whenever it wants.
    pub repair_ration: bool,
}

impl Layout {
    fn ration(&self) -> RepairRation {
        if self.repair_ration {
            RepairRation::default()
        } else {
            RepairRation::new(usize::MAX, usize::MAX)
        }
    }

    /// Every group of the cluster: the metadata group, then the partitions.
    #[must_use]
    pub fn groups(&self) -> Vec<GroupKind> {
        let mut groups = vec![GroupKind::Metadata];
        for partition in 1..=self.replicated {
            groups.push(GroupKind::Partition {
                key: PartitionKey {
                    stream: 1,
                    topic: 1,
                    partition,
                },
                persisted: false,
            });
        }
        for partition in 1..=self.persisted {
            groups.push(GroupKind::Partition {
                key: PartitionKey {
                    stream: 1,
                    topic: 2,
                    partition,
                },
                persisted: true,
            });
        }
        groups
    }

    fn boot_config(&self, incarnation: u64) -> BootConfig {
        BootConfig {
            metadata_file_size_bytes: 64 << 10,
            segment_size_bytes: self.segment_size_bytes,
            index_interval_bytes: 1024,
            // A checkpoint's worth and the largest prepare (as in production): appends never
            // meet backpressure before the checkpoint publishes.
            unpublished_bytes_max: (16 << 20)
                .max(self.checkpoint_bytes + iggy_segments::config::PREPARE_BYTES_MAX),
            // Without the safeguard a partition's commit point is its superblock's alone.
            commit_from_log: self.safeguards.durable_commit_point,
            ..BootConfig::new(incarnation)
        }
    }

    fn identity(&self, replica: u8) -> Identity {
        Identity {
            cluster: self.cluster,
            replica,
            replica_count: self.replicas,
        }
    }
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
pub enum Store {
    Metadata(MetadataGroup<SimStorage>),
    Partition {
        partition: Partition<SimStorage>,
        persisted: bool,
        /// The reply each journaled, uncommitted entry will get (`None`: no client waits for
        /// one), taken from its body while it was in memory: a commit need not read the entry
        /// back.
        replies: BTreeMap<u64, Option<Vec<u8>>>,
    },
}

/// One group on one node: its replica, its storage and its lane of storage effects.
pub struct Host {
    pub kind: GroupKind,
    pub replica: Replica,
    pub store: Store,
    /// Storage effects not yet carried out, in the order the replica emitted them.
    pub lane: VecDeque<Effect>,
    /// Whether the lane's head has a completion scheduled.
    pub lane_scheduled: bool,
}

/// A simulated node.
pub struct Node {
    pub index: u8,
    pub storage: SimStorage,
    /// Incremented at every boot: events of an earlier life are stale.
    pub life: u64,
    pub up: bool,
    pub hosts: BTreeMap<u128, Host>,
    /// The repair budget its groups share (a new one each life).
    pub ration: RepairRation,
    /// What the last boot discarded past each group's published frontier, in bytes (by the
    /// report's group name: `metadata`, `partition 1.1.1`).
    pub discarded: BTreeMap<String, u64>,
    lock: Option<NodeLock>,
}

impl Node {
    /// Creates node `index` of a new cluster: every node writes the same genesis (the metadata
    /// group's first two ops, identical bytes everywhere, and the empty partitions), then boots.
    pub fn create(layout: &Layout, index: u8, storage: SimStorage) -> Result<Self, String> {
        let config = layout.boot_config(0);
        let identity = layout.identity(index);
        let topic = |name: &str, partitions: u32, durability| Op::CreateTopic {
            stream: 1,
            name: name.into(),
            partitions,
            durability,
            segment_size_bytes: layout.segment_size_bytes,
            retention: Retention::default(),
            replication_factor: layout.replicas,
        };
        let genesis = [
            Op::CreateStream { name: "sim".into() },
            topic("replicated", layout.replicated, Durability::Replicated),
            topic("persisted", layout.persisted, Durability::Persisted),
        ];
        let partitions: Vec<(PartitionKey, u64)> = layout
            .groups()
            .into_iter()
            .filter_map(|kind| match kind {
                GroupKind::Partition { key, .. } => Some((key, layout.segment_size_bytes)),
                GroupKind::Metadata => None,
            })
            .collect();
        let first_view = if layout.spread_primaries {
            iggy_recovery::populate::FirstView::Leader
        } else {
            iggy_recovery::populate::FirstView::Zero
        };
        iggy_recovery::populate::genesis(
            &storage,
            identity,
            &config,
            &genesis,
            &partitions,
            first_view,
        )
        .map_err(|e| format!("node {index}: {e}"))?;
        let mut node = Self {
            index,
            storage,
            life: 0,
            up: false,
            hosts: BTreeMap::new(),
            ration: layout.ration(),
            discarded: BTreeMap::new(),
            lock: None,
        };
        node.boot(layout)?;
        Ok(node)
    }

    /// Boots the node from its disk through `recovery::boot`, one replica per group. A group
    /// whose superblock records an earlier boot recovers; a new one starts in normal status.
    pub fn boot(&mut self, layout: &Layout) -> Result<(), String> {
        self.life += 1;
        let incarnation = u64::from(self.index) << 48 | self.life;
        let config = layout.boot_config(incarnation);
        let (state, report) =
            iggy_recovery::boot_with(self.storage.clone(), Path::new(""), Mode::Open, &config)
                .map_err(|e| format!("node {}: boot: {e}", self.index))?;
        if let Some(refused) = report
            .groups
            .iter()
            .find(|g| g.status == iggy_recovery::Status::Refuse || g.error.is_some())
        {
            return Err(format!(
                "node {}: boot refused {}: {}",
                self.index,
                refused.group,
                refused.error.clone().unwrap_or_default()
            ));
        }
        self.discarded.clear();
        for finding in &report.findings {
            if finding.action == iggy_recovery::Action::DiscardUnpublished {
                *self.discarded.entry(finding.group.clone()).or_default() += finding.bytes;
            }
        }
        let mut metadata = state.metadata;
        let mut partitions = state.partitions;
        self.lock = Some(state.lock);
        self.hosts.clear();
        self.ration = layout.ration();
        for kind in layout.groups() {
            let id = iggy_vsr::Identity {
                cluster: layout.cluster,
                group: kind.id(),
                replica: self.index,
                replicas: layout.replicas,
            };
            let (store, boot) = match kind {
                GroupKind::Metadata => {
                    let group = metadata
                        .take()
                        .ok_or_else(|| format!("node {}: no metadata group", self.index))?;
                    let boot = metadata_boot(&group, incarnation, &layout.vsr)?;
                    (Store::Metadata(group), boot)
                }
                GroupKind::Partition { key, persisted } => {
                    let partition = partitions.remove(&key).ok_or_else(|| {
                        format!(
                            "node {}: partition {} not booted",
                            self.index,
                            key.dir_name()
                        )
                    })?;
                    let boot = partition_boot(&partition, persisted, incarnation, layout)?;
                    (
                        Store::Partition {
                            partition,
                            persisted,
                            replies: BTreeMap::new(),
                        },
                        boot,
                    )
                }
            };
            let replica = Replica::new(layout.vsr.clone(), layout.safeguards, id, boot);
            self.hosts.insert(
                kind.id(),
                Host {
                    kind,
                    replica,
                    store,
                    lane: VecDeque::new(),
                    lane_scheduled: false,
                },
            );
        }
        self.up = true;
        Ok(())
    }

    /// The ration's decision for this tick: which groups may ask peers for prepares.
    pub fn ration_repair(&mut self) {
        let wanting = self
            .hosts
            .iter()
            .filter(|(_, h)| h.replica.wants_repair())
            .map(|(g, _)| *g)
            .collect();
        self.ration.tick(&wanting);
        for (group, host) in &mut self.hosts {
            host.replica.permit_repair(self.ration.permits(*group));
        }
    }

    /// Who leads `group`, from this node's own replica of it (`None`: down, not hosted, or in
    /// a view change or recovery).
    #[must_use]
    pub fn leader_of(&self, group: u128) -> Option<u8> {
        if !self.up {
            return None;
        }
        self.hosts.get(&group).and_then(|h| h.replica.leader())
    }

    /// A clean shutdown: every group publishes what it appended with its log synced, the node
    /// writes the clean-shutdown marker when all of them succeeded (so its next boot skips
    /// the rewrites of trusted state), then the process exits. Returns the first failure.
    pub fn shutdown(&mut self, layout: &Layout) -> Result<(), String> {
        let mut result = Ok(());
        for host in self.hosts.values_mut() {
            // The commit point, exact, for the next boot (the process exits: the replica's view
            // of its superblock does not matter any more). Part of the durable commit point.
            if !layout.safeguards.durable_commit_point {
                continue;
            }
            let recorded = record_commit_point(host);
            if let Err(e) = recorded
                && result.is_ok()
            {
                result = Err(format!("node {}: {}: {e}", self.index, host.kind.label()));
            }
        }
        for host in self.hosts.values() {
            let prepared = match &host.store {
                Store::Partition { partition, .. } => {
                    partition.prepare_shutdown().map_err(|e| e.to_string())
                }
                Store::Metadata(group) => group.prepare_shutdown().map_err(|e| e.to_string()),
            };
            if let Err(e) = prepared
                && result.is_ok()
            {
                result = Err(format!("node {}: {}: {e}", self.index, host.kind.label()));
            }
        }
        if result.is_ok() {
            // Every group synced what it trusts: the next boot may skip the rewrites.
            result = iggy_recovery::write_clean_shutdown(&self.storage, Path::new(""))
                .map_err(|e| format!("node {}: clean-shutdown marker: {e}", self.index));
        }
        self.crash(false);
        result
    }

    /// The process dies: replicas, their pending effects and every handle go; the disk keeps
    /// what the kernel has (a power loss also loses what was not synced).
    pub fn crash(&mut self, power_loss: bool) {
        self.hosts.clear();
        self.lock = None;
        self.up = false;
        if power_loss {
            self.storage.power_loss();
        } else {
            self.storage.crash_process();
        }
    }
}

/// A log's head op, its checksum, and its tail of entries.
type Tail = (u64, u128, Vec<(Header, Vec<u8>)>);

/// The log's head, and the tail boot hands the replica: every entry above what storage executed
/// (at most a pipeline: boot's commit point is the one the head prepare names), and below it as
/// many as the ring holds (its entry and byte caps), read newest first in bounded batches. The
/// rest of the log stays on disk.
fn entries_of(
    wal: &iggy_wal::Wal<SimStorage>,
    applied: u64,
    config: &Config,
) -> Result<Tail, String> {
    let (head, head_checksum) = wal.head();
    let first = wal.first_op().max(1);
    let mut entries: Vec<(Header, Vec<u8>)> = Vec::new();
    let mut bytes = 0u64;
    let mut to = head;
    'read: while to >= first && to > 0 {
        let from = to.saturating_sub(63).max(first);
        let batch = wal
            .read(from, to)
            .map_err(|e| format!("reading the journal back: {e}"))?;
        for entry in batch.into_iter().rev() {
            let above_applied = entry.header.op > applied;
            let fits = entries.len() < config.ring_entries_max
                && bytes + entry.body.len() as u64 <= config.ring_bytes_max;
            if !above_applied && !fits {
                break 'read;
            }
            bytes += entry.body.len() as u64;
            entries.push((entry.header, entry.body));
        }
        to = from - 1;
    }
    entries.reverse();
    Ok((head, head_checksum, entries))
}

fn durable_of(state: &VsrState) -> Durable {
    Durable {
        view: state.view,
        log_view: state.log_view,
        commit_max: state.commit_max,
        incarnation: state.incarnation,
    }
}

/// Writes the replica's commit point into its group's superblock (a clean shutdown's last word
/// on it: exact, where a boot otherwise raises the superblock's to what the log proves).
fn record_commit_point(host: &mut Host) -> Result<(), String> {
    let commit_max = host.replica.commit_max();
    let raise = |state: VsrState| VsrState {
        commit_max: state.commit_max.max(commit_max),
        ..state
    };
    match &mut host.store {
        Store::Metadata(group) => {
            let state = group.vsr_state();
            if state.commit_max < commit_max {
                group.write_vsr(raise(state)).map_err(|e| e.to_string())?;
            }
        }
        Store::Partition { partition, .. } => {
            let state = partition.vsr_state();
            if state.commit_max < commit_max {
                partition
                    .write_vsr(raise(state))
                    .map_err(|e| e.to_string())?;
            }
        }
    }
    Ok(())
}

fn metadata_boot(
    group: &MetadataGroup<SimStorage>,
    incarnation: u64,
    config: &Config,
) -> Result<Boot, String> {
    let applied = group.applied_op();
    let (head, head_checksum, entries) = entries_of(group.wal(), applied, config)?;
    // The metadata state machine's own client table: each session's last executed request
    // and its reply.
    let clients = group
        .state()
        .clients
        .iter()
        // A session a client's request opened (one a node's own op registered has no op).
        .filter(|(_, s)| s.last_op != 0)
        .map(|(client, s)| {
            (
                *client,
                iggy_vsr::Session {
                    request: s.last_request,
                    op: s.last_op,
                    reply: s.reply.clone(),
                },
            )
        })
        .collect();
    Ok(Boot {
        durable: durable_of(&group.vsr_state()),
        applied,
        head,
        head_checksum,
        entries,
        // Journaled and synced before it is acknowledged.
        forgot_acknowledged: false,
        incarnation,
        clients,
    })
}

fn partition_boot(
    partition: &Partition<SimStorage>,
    persisted: bool,
    incarnation: u64,
    layout: &Layout,
) -> Result<Boot, String> {
    let durable = durable_of(&partition.vsr_state());
    let applied = partition.committed();
    let (head, head_checksum, entries) = entries_of(partition.wal(), applied, &layout.vsr)?;
    let clients = partition
        .take_sessions()
        .into_iter()
        .filter(|s| s.op <= applied)
        .map(|s| {
            (
                s.client,
                iggy_vsr::Session {
                    request: s.request,
                    op: s.op,
                    reply: s.reply(),
                },
            )
        })
        .collect();
    Ok(Boot {
        durable,
        applied,
        head,
        head_checksum,
        entries,
        // Replicated durability acknowledges what the WAL queued; boot keeps only what it
        // published. Persisted publishes before it acknowledges.
        forgot_acknowledged: !persisted,
        incarnation,
        clients,
    })
}

/// Carries out one storage effect on `store` (`now_us`: the simulated clock, for a primary's
/// stamps; a replicated partition publishes once `checkpoint_bytes` are unpublished). A storage
/// error is `Outcome::Failed`: the replica stops, the node restarts.
pub fn execute(store: &mut Store, effect: Effect, now_us: u64, checkpoint_bytes: u64) -> Outcome {
    let failed = |e: &dyn std::fmt::Display| Outcome::Failed(e.to_string());
    match (store, effect) {
        (_, Effect::Send { .. }) => Outcome::Done,
        (Store::Metadata(group), Effect::WriteSuperblock { durable, .. }) => {
            let state = VsrState {
                view: durable.view,
                log_view: durable.log_view,
                commit_max: durable.commit_max,
                incarnation: durable.incarnation,
                ..group.vsr_state()
            };
            group
                .write_vsr(state)
                .map_or_else(|e| failed(&e), |()| Outcome::Done)
        }
        (Store::Partition { partition, .. }, Effect::WriteSuperblock { durable, .. }) => {
            let state = VsrState {
                view: durable.view,
                log_view: durable.log_view,
                commit_max: durable.commit_max,
                incarnation: durable.incarnation,
                ..partition.vsr_state()
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
                Err(e) => failed(&e),
            }
        }
        (
            Store::Partition {
                partition,
                persisted,
                replies,
            },
            Effect::Prepare {
                meta,
                operation,
                mut body,
                ..
            },
        ) => {
            let meta = iggy_format::PrepareMeta { now_us, ..meta };
            let request = match operation {
                operation::MESSAGES => Request::Messages(&mut body),
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
                Err(e) => failed(&e),
            }
        }
        (Store::Metadata(group), Effect::Journal { header, body, .. }) => group
            .journal(&header, &body)
            .map_or_else(|e| failed(&e), |()| Outcome::Done),
        (
            Store::Partition {
                partition,
                persisted,
                replies,
            },
            Effect::Journal { header, body, .. },
        ) => match partition.journal(&header, &body) {
            Ok(_) => {
                replies.insert(header.op, partition_reply(&header, &body));
                after_journal(partition, *persisted, header.op, checkpoint_bytes)
                    .map_or_else(|e| failed(&e), |()| Outcome::Done)
            }
            Err(e) => failed(&e),
        },
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
        (Store::Metadata(group), Effect::Commit { through, .. }) => match group.commit(through) {
            Ok(committed) => Outcome::Committed {
                replies: committed
                    .into_iter()
                    .filter(|c| c.client != 0)
                    .map(|c| (c.op, c.reply))
                    .collect(),
            },
            Err(e) => failed(&e),
        },
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
            // Committed entries go to the segment files (unsynced), where consumers read them
            // (`Partition::read_through` does the same): what a killed process leaves on disk
            // past the frontier, for boot to discard.
            if let Err(e) = partition.wal().write_buffered() {
                return failed(&e);
            }
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
fn after_journal(
    partition: &Partition<SimStorage>,
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
