//! A whole cluster from one seed: nodes on their own `SimStorage`, the packet simulator,
//! clients, a fault placer and the checkers, run as discrete events ordered by (simulated time,
//! sequence). Every storage effect of a group completes after a seeded latency, in order on the
//! group's lane. A run has a fault phase (crashes, power losses, storage and network faults) and
//! then a liveness phase that heals everything and requires every client request to complete and
//! every replica of every group to converge.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use iggy_io::{FaultConfig, SimStorage};
use iggy_vsr::{
    Config, Destination, Effect, Message, Outcome, ReplyStatus, Safeguards, Status, TICK_MS,
};

use crate::checker::{Checker, Committed};
use crate::client::{self, Client};
use crate::consumer::{self, Consumer};
use crate::network::{Endpoint, Network, NetworkConfig};
use crate::node::{GroupKind, Layout, Node};
use crate::producer::{Producer, Routing, Shape};
use crate::rng::Stream;

const TICK_US: u64 = TICK_MS * 1000;

/// Which faults a run injects during its fault phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Faults {
    pub crashes: bool,
    pub power_loss: bool,
    pub storage: bool,
    pub network: bool,
    /// Faults aimed at the protocol's moments: a process crash right after a replica sends its
    /// `DoViewChange`, and a slow link under a `StartView` that answers a probe, with the prober
    /// restarting meanwhile.
    pub moments: bool,
    /// While a node is down and the other two hold every committed op, one of its partitions
    /// loses published data (its WAL frontier file), so the node's next boot rebuilds it empty
    /// and it catches up from its peers (`docs/recovery.md`, "A damaged partition"). Not in
    /// [`Faults::all`] yet: `iggy-sim --damage`.
    pub damage: bool,
    /// In about one seed in four, once in the fault phase, the primary of one group goes deaf
    /// for 12 to 18 s: nothing its peers send reaches it, what it sends still arrives, and no
    /// other fault is drawn meanwhile. The two others are a quorum that hears itself, so every
    /// group must take writes again within [`DEAF_STALL_US`] (checker `availability`).
    pub deaf: bool,
    /// Half the storage faults are a full disk instead: the node's disk has less room left
    /// than a log file (0 to 64 KiB) for 0.2 to 2 s, so the next segment or metadata log file
    /// it needs cannot be created (a primary refuses the request, a backup's journal is
    /// refused and tried again). A node that halts for it fails the run (checker
    /// `full-disk`). Not in [`Faults::all`] yet: `iggy-sim --full-disk`.
    pub full_disk: bool,
}

/// How often a seed draws the deaf fault ([`Faults::deaf`]).
const DEAF_CHANCE: f64 = 0.25;
/// The longest a group with a request waiting may go without a commit while only a deaf node
/// is faulty: the heartbeat timeout (5 s) after which its backups replace a deaf primary, a view
/// change, the clients' walk to the new primary, and one more view change when the deaf node's
/// own `StartViewChange` pulls a group into a view it would lead (another 5 s timeout follows
/// only then, and a second such pull needs another view change timeout of the deaf node).
pub const DEAF_STALL_US: u64 = 11_000_000;

/// How often a restart finds one of the node's partitions damaged (with [`Faults::damage`]).
const DAMAGE_AT_RESTART: f64 = 0.3;

/// How often a `DoViewChange` is followed at once by its sender's crash.
const CRASH_AFTER_DO_VIEW_CHANGE: f64 = 0.05;
/// How often the answer to a probe is held up, and its asker restarted before it arrives.
const SLOW_PROBE_ANSWER: f64 = 0.2;

impl Faults {
    #[must_use]
    pub fn all() -> Self {
        Self {
            crashes: true,
            power_loss: true,
            storage: true,
            network: true,
            moments: true,
            damage: false,
            deaf: true,
            full_disk: false,
        }
    }

    #[must_use]
    pub fn none() -> Self {
        Self {
            crashes: false,
            power_loss: false,
            storage: false,
            network: false,
            moments: false,
            damage: false,
            deaf: false,
            full_disk: false,
        }
    }
}

/// Producers beside the random clients: one per partition, each sending batches of `shape` at
/// its rate (see [`crate::producer`]).
#[derive(Clone, Debug)]
pub struct Workload {
    pub shape: Shape,
    /// Batches each producer sends in all.
    pub batches: u64,
    /// The node every producer connects to first (the article's: node 0); `None`, the
    /// partition's primary.
    pub connect_to: Option<u8>,
    /// When the producers start, in simulated microseconds.
    pub start_us: u64,
    /// A consumer per partition beside its producer (see [`crate::consumer`]).
    pub consumers: bool,
}

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    pub seed: u64,
    /// Partitions with replicated durability, and with persisted durability.
    pub replicated: u32,
    pub persisted: u32,
    pub clients_per_group: usize,
    pub requests_per_client: u64,
    /// A client waits up to this long after a reply before its next request (so requests keep
    /// coming through the fault phase).
    pub think_us: u64,
    /// How long the fault phase lasts, in simulated microseconds.
    pub fault_phase_us: u64,
    /// The most the liveness phase may take.
    pub liveness_us: u64,
    pub faults: Faults,
    pub network: NetworkConfig,
    pub vsr: Config,
    pub safeguards: Safeguards,
    /// Events kept for the trace printed on a failure.
    pub trace_events: usize,
    /// A group whose every delivered message and storage effect goes into the trace.
    pub watch: Option<u128>,
    /// Partitions' groups start at their metadata leaders' views (off: all at view 0).
    pub spread_primaries: bool,
    /// A replicated partition publishes after this many bytes (128 MiB in production).
    pub checkpoint_bytes: u64,
    /// Each node rations its groups' repair (3 new sessions a tick, 8 in flight).
    pub repair_ration: bool,
    /// Producers at a set rate, one per partition.
    pub workload: Option<Workload>,
    /// Disks that never lose power (`SimStorage::set_write_through`): for runs that crash
    /// processes only, one copy of each byte in memory instead of two. A power loss on such a
    /// disk loses nothing.
    pub write_through: bool,
    /// Draw the seed's history length from its own stream: half the seeds as given, three in
    /// ten 5 times longer and two in ten 25 times (requests per client and producer batches
    /// multiplied, think time and send interval divided): thousands of ops per group, past
    /// the 128-header window, the metadata checkpoint and many checkpoints of the replicated
    /// partitions. The ring is drawn too ([`ring_entries`]). Off: `requests_per_client`,
    /// `think_us`, the workload and the ring as given.
    pub draw_history: bool,
    /// Each partition keeps at most this many bytes (the nodes run retention: 0 keeps
    /// everything); acknowledged batches below a node's oldest retained op are not checked on it.
    /// With `draw_history` and 0 here, the seed draws it ([`retention_bytes`]).
    pub retention_bytes: u64,
    /// One committed request of a client in this many is followed by an impostor: the same
    /// number with another body, which the group must refuse (0, the default: never).
    pub reuse_one_in: u64,
    /// Each node's `pipeline_budget_bytes` (0, the default: none): its primaries refuse
    /// requests while the groups they lead hold this many bytes admitted and not committed.
    pub pipeline_budget_bytes: u64,
}

/// The retention a seed's partitions run, drawn from the seed with its history
/// (`Options::draw_history`): three seeds in ten keep 256 KiB a partition (four segments of the
/// simulator's 64 KiB), so a replica down long enough comes back below what its peers kept and
/// catches up by a partition transfer; the rest keep everything.
#[must_use]
pub fn retention_bytes(seed: u64) -> u64 {
    match Stream::new(seed, "retention").below(10) {
        0..=6 => 0,
        _ => 256 << 10,
    }
}

/// How much longer than given a seed's history is, drawn from the seed (`Options::draw_history`).
#[must_use]
pub fn history_factor(seed: u64) -> u64 {
    match Stream::new(seed, "history").below(10) {
        0..=4 => 1,
        5..=7 => 5,
        _ => 25,
    }
}

/// The prepare ring a seed's replicas keep, drawn from the seed with its history
/// (`Options::draw_history`): four seeds in ten keep the production ring (65,536 entries, more
/// than any history), three in ten 80 to 199 entries and three in ten 65 to 79 (just above the
/// pipeline), so a replica that was down or cut off comes back below its peers' rings and
/// repairs from their disks. `None`: the ring as configured.
#[must_use]
pub fn ring_entries(seed: u64) -> Option<usize> {
    let mut stream = Stream::new(seed, "ring");
    match stream.below(10) {
        0..=3 => None,
        4..=6 => Some(80 + usize::try_from(stream.below(120)).unwrap_or(0)),
        _ => Some(65 + usize::try_from(stream.below(15)).unwrap_or(0)),
    }
}

impl Options {
    /// The default run of a seed: a metadata group and 4 partitions (2 of each durability), 2
    /// clients per group, every fault.
    #[must_use]
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            replicated: 2,
            persisted: 2,
            clients_per_group: 2,
            requests_per_client: 40,
            think_us: 800_000,
            fault_phase_us: 20_000_000,
            liveness_us: 60_000_000,
            faults: Faults::all(),
            network: NetworkConfig::default(),
            vsr: Config::default(),
            safeguards: Safeguards::default(),
            trace_events: 64,
            watch: None,
            spread_primaries: true,
            checkpoint_bytes: 256 << 10,
            repair_ration: true,
            workload: None,
            write_through: false,
            draw_history: true,
            retention_bytes: 0,
            reuse_one_in: 0,
            pipeline_budget_bytes: 0,
        }
    }
}

impl Options {
    /// A node of many groups: the metadata group and 24 partitions (12 of each durability), a
    /// random client per group and a producer per partition (5 batches a second of 5 messages,
    /// 40 in all, routed by the node it is connected to), every fault.
    #[must_use]
    pub fn many_groups(seed: u64) -> Self {
        Self {
            replicated: 12,
            persisted: 12,
            clients_per_group: 1,
            requests_per_client: 20,
            workload: Some(Workload {
                shape: Shape {
                    batches_per_second: 5,
                    messages_per_batch: 5,
                    message_bytes: 64,
                },
                batches: 40,
                connect_to: None,
                start_us: 300_000,
                consumers: true,
            }),
            ..Self::new(seed)
        }
    }
}

/// How a run ended.
#[derive(Debug)]
pub struct Report {
    pub seed: u64,
    pub simulated_us: u64,
    pub wall: Duration,
    pub committed_ops: u64,
    pub replies: u64,
    pub not_committed: u64,
    pub crashes: u64,
    /// Peers' repair rounds read back from disk (below a ring), and the prepares they sent.
    pub disk_reads: u64,
    pub disk_read_prepares: u64,
    pub view_changes: u64,
    /// Snapshots metadata replicas installed from a peer (below that peer's log).
    pub snapshots_installed: u64,
    /// Of them, partitions' state transfers (a peer's committed segments).
    pub partitions_installed: u64,
    pub behind_ring: u64,
    /// Sends of the producers with an outcome.
    pub producer_sends: u64,
    /// Ops committed in each group (the history's length), by group.
    pub group_ops: Vec<u64>,
    /// Faults that took two nodes at once, and clean stops of every node.
    pub two_node_crashes: u64,
    pub stop_alls: u64,
    /// Deaf faults ([`Faults::deaf`]): 0 or 1.
    pub deaf_faults: u64,
    /// Full disks ([`Faults::full_disk`]), and the journal writes they had refused.
    pub full_disks: u64,
    pub journals_refused: u64,
    /// Requests a primary refused because its node's pipelines held their byte budget.
    pub pipeline_refusals: u64,
    /// How much longer than given the history was drawn (1 when not drawn).
    pub history_factor: u64,
    /// The prepare ring's entries the partitions' replicas kept.
    pub ring_entries: usize,
    /// What each partition kept at most (0: everything; drawn with the history).
    pub retention_bytes: u64,
    /// Partitions damaged at rest and rebuilt from their peers (`Faults::damage`).
    pub rebuilt: u64,
    /// Consumers' polls served after their read barrier, and refused by it.
    pub reads_served: u64,
    pub reads_refused: u64,
    /// Impostors clients sent (`Options::reuse_one_in`), and those the groups refused.
    pub impostors: u64,
    pub impostors_refused: u64,
    /// The first checker that fired, what it found, and the state then.
    pub failure: Option<Failure>,
}

/// A checker failure.
#[derive(Debug)]
pub struct Failure {
    pub checker: String,
    pub what: String,
    /// The last events, one per line.
    pub trace: Vec<String>,
    /// One status line per replica.
    pub status: Vec<String>,
}

impl Failure {
    /// The failure, its status lines and trace, for a terminal.
    #[must_use]
    pub fn render(&self) -> String {
        let mut out = format!("checker `{}` fired: {}\n", self.checker, self.what);
        out.push_str("replicas:\n");
        for line in &self.status {
            out.push_str("  ");
            out.push_str(line);
            out.push('\n');
        }
        out.push_str("last events:\n");
        for line in &self.trace {
            out.push_str("  ");
            out.push_str(line);
            out.push('\n');
        }
        out
    }
}

#[derive(Clone, Debug)]
enum Event {
    Tick {
        node: u8,
        life: u64,
    },
    Deliver {
        to: Endpoint,
        /// One encoding shared by every copy of a message (a broadcast, a duplicate).
        bytes: std::sync::Arc<Vec<u8>>,
    },
    Lane {
        node: u8,
        life: u64,
        group: u128,
    },
    Client {
        client: usize,
    },
    Producer {
        producer: usize,
    },
    Consumer {
        consumer: usize,
    },
    Fault,
    Restart {
        node: u8,
    },
    /// A crash placed at a protocol moment (dropped if that life ended or the moment passed).
    MomentCrash {
        node: u8,
        life: u64,
        restart_after_us: u64,
    },
    NetworkRepair,
    StorageCalm {
        node: u8,
    },
    /// The producers notice that a dead node's connections dropped.
    DeathNoticed {
        node: u8,
    },
    /// The deaf fault starts now, or as soon as the cluster is healthy ([`Faults::deaf`]).
    Deaf,
    DeafEnd,
}

/// The deaf fault under way: one node hears none of its peers (they hear it).
#[derive(Debug)]
struct Deaf {
    node: u8,
    since_us: u64,
    /// Per group: the highest commit point the other nodes reached, since when a request has
    /// waited without progress (reset when the commit point moves, when a request is answered,
    /// and while its clients and producers have all finished), and when it last progressed.
    groups: BTreeMap<u128, (u64, Option<u64>, u64)>,
    next_check_us: u64,
}

/// The deaf fault is drawn for a moment between these two of the fault phase; from then on no
/// other fault starts, and it starts once the others ended and the cluster is healthy (given up
/// at the second moment).
const DEAF_FROM_US: u64 = 1_000_000;
const DEAF_UNTIL_US: u64 = 8_000_000;

/// A running cluster.
/// A consumer's read waiting for its node's barrier (`iggy_node::Node::read`).
#[derive(Clone, Copy, Debug)]
struct PendingRead {
    consumer: usize,
    node: u8,
    group: u128,
    /// The highest op acknowledged to a client of the group when the read was asked.
    acknowledged: u64,
    asked_us: u64,
}

/// A consumer waits this long for its read's barrier before it asks again (past the replica's
/// own 2 s read timeout: a crash dropped the question).
const READ_PATIENCE_US: u64 = 3_000_000;

pub struct Cluster {
    options: Options,
    layout: Layout,
    now: u64,
    seq: u64,
    events: BTreeMap<(u64, u64), Event>,
    nodes: Vec<Node>,
    clients: Vec<Client>,
    producers: Vec<Producer>,
    consumers: Vec<Consumer>,
    /// Consumers' reads waiting for their barrier, by token (see [`Cluster::consumer`]).
    pending_reads: BTreeMap<u64, PendingRead>,
    read_tokens: u64,
    /// Reads served after their barrier, and refused by it.
    pub(crate) reads_served: u64,
    pub(crate) reads_refused: u64,
    network: Network,
    latency: Stream,
    faults: Stream,
    /// Draws of [`Faults::damage`] (a stream of its own: runs without it draw as before).
    damage: Stream,
    /// Partitions damaged at rest and rebuilt from their peers by their node's boot.
    pub(crate) rebuilt: u64,
    moments: Stream,
    partitions: Stream,
    workload: Stream,
    /// Draws of the consumers' rests, when the seed's consumers rest
    /// ([`consumer::consumers_rest`]; a stream of its own: runs without rests draw as before).
    rests: Option<Stream>,
    pub checker: Checker,
    trace: VecDeque<String>,
    healing: bool,
    crashes: u64,
    disk_reads: u64,
    disk_read_prepares: u64,
    snapshots_installed: u64,
    partitions_installed: u64,
    view_changes: u64,
    restart_pending: Vec<bool>,
    storage_faulty: Vec<bool>,
    /// Which nodes' disks are full ([`Faults::full_disk`]; each also `storage_faulty`), the
    /// draws of it (a stream of its own), and how many there were.
    disk_full: Vec<bool>,
    full_disk_draws: Stream,
    full_disks: u64,
    /// Journal writes refused for want of room, counted as they complete.
    journals_refused: u64,
    /// Budget refusals counted by replicas that have since crashed.
    pipeline_refusals: u64,
    /// When each node last heard a commit broadcast of each group.
    commit_heard: BTreeMap<(u8, u128), u64>,
    /// Every change of a replica's status or view: (time, node, group, status, view).
    view_log: Vec<(u64, u8, u128, Status, u32)>,
    /// Bytes of prepares (header and body) each node was sent for each group in answer to its
    /// repair requests.
    repair_bytes: BTreeMap<(u8, u128), u64>,
    /// Since each node's last [`Cluster::restart_node`]: when each of its groups was sent its
    /// first repair prepare, and how many `RangeEvicted` it was sent.
    repair_first: BTreeMap<(u8, u128), u64>,
    range_evicted: BTreeMap<u8, u64>,
    /// When each (node, group) first installed a peer's state, and the `RangeEvicted` answers a
    /// node got for a group after it installed (a transfer that did not catch it up).
    installed_at: BTreeMap<(u8, u128), u64>,
    evicted_after_install: BTreeMap<u8, u64>,
    /// The effects being drained answer a `RequestPrepares`.
    serving_repair: bool,
    /// While a replica handles an impostor (a client's request number again with another
    /// body, [`Client::with_reuse`]): the client and the number. A committed reply it sends
    /// them then answers the impostor with the other body's outcome (checker `request reuse`).
    answering_impostor: Option<(u128, u64)>,
    /// The groups of the node ticking now that sent a `RequestPrepares` in this tick, and the
    /// most of them any tick of each node saw.
    repair_senders: std::collections::BTreeSet<u128>,
    peak_repair_senders: Vec<usize>,
    /// A node died and its producers' connections have not noticed yet: sends still go to it.
    death_unnoticed: Vec<bool>,
    two_node_crashes: u64,
    stop_alls: u64,
    /// Draws of [`Faults::deaf`] (a stream of its own), and the fault while it lasts.
    deaf_draws: Stream,
    /// The deaf fault waits for a healthy cluster: no other fault is drawn meanwhile.
    deaf_waiting: bool,
    deaf: Option<Deaf>,
    deaf_faults: u64,
    /// When each node last heard a peer (the server's isolation check): a message of a peer
    /// replica, or a peer up behind a whole link (the server's pings).
    heard_peer: Vec<u64>,
    /// When a client, producer or consumer of each group last had a committed reply (checker
    /// `availability`: an answered request waits no more, whether or not it committed anew).
    replied_at: BTreeMap<u128, u64>,
}

/// A node that heard no peer for this long closes the connection of a producer whose request
/// waited as long on it, as the server's client port does (`docs/server.md`, "Failure
/// detection"), so that the producer moves to another node.
const ISOLATED_US: u64 = 1_000_000;

impl Cluster {
    /// Creates the cluster of `options` (every node writes the same genesis and boots).
    pub fn new(mut options: Options) -> Result<Self, String> {
        let seed = options.seed;
        if options.draw_history {
            let factor = history_factor(seed);
            options.requests_per_client *= factor;
            options.think_us /= factor;
            if let Some(workload) = &mut options.workload {
                workload.batches = workload.batches.saturating_mul(factor);
                workload.shape.batches_per_second = workload
                    .shape
                    .batches_per_second
                    .saturating_mul(u32::try_from(factor).unwrap_or(1));
            }
        }
        // The drawn ring is every group's, the metadata group's too: a metadata replica that
        // falls below its peers' checkpoints (their logs dropped what their snapshots hold)
        // pulls a snapshot (issue #33).
        let metadata_vsr = None;
        if options.draw_history
            && let Some(entries) = ring_entries(seed)
        {
            options.vsr.ring_entries_max = entries;
        }
        if options.draw_history && options.retention_bytes == 0 {
            options.retention_bytes = retention_bytes(seed);
        }
        let layout = Layout {
            cluster: 0x1667_0000 | u128::from(seed % 0xFFFF),
            replicas: 3,
            replicated: options.replicated,
            persisted: options.persisted,
            segment_size_bytes: 64 << 10,
            vsr: options.vsr.clone(),
            safeguards: options.safeguards,
            spread_primaries: options.spread_primaries,
            checkpoint_bytes: options.checkpoint_bytes,
            repair_ration: options.repair_ration,
            metadata_vsr,
            retention: iggy_metadata::Retention {
                max_age_seconds: 0,
                max_bytes: options.retention_bytes,
            },
            pipeline_budget_bytes: options.pipeline_budget_bytes,
        };
        let mut disks = Stream::new(seed, "disks");
        let mut nodes = Vec::new();
        for index in 0..layout.replicas {
            let storage = SimStorage::new(disks.draw());
            storage.set_write_through(options.write_through);
            nodes.push(Node::create(&layout, index, storage)?);
        }
        let mut clients = Vec::new();
        for kind in layout.groups() {
            for _ in 0..options.clients_per_group {
                // Unique across groups: the client tables and the reply checker key on it.
                let id = 0x0C11_E000 + clients.len() as u128;
                let client_kind = match kind {
                    GroupKind::Metadata => client::Kind::Metadata,
                    GroupKind::Partition { .. } => client::Kind::Partition,
                };
                clients.push(
                    Client::new(
                        id | 1 << 100,
                        kind.id(),
                        client_kind,
                        layout.cluster,
                        layout.replicas,
                        options.requests_per_client,
                    )
                    .with_reuse(options.seed, options.reuse_one_in),
                );
            }
        }
        let mut producers = Vec::new();
        if let Some(workload) = &options.workload {
            let partitions = u64::from(layout.replicated + layout.persisted).max(1);
            let interval = 1_000_000 / u64::from(workload.shape.batches_per_second.max(1));
            for kind in layout.groups() {
                if let GroupKind::Partition { .. } = kind {
                    // Producers are not in step: each starts a share of the interval later.
                    let start_us =
                        workload.start_us + producers.len() as u64 * interval / partitions;
                    let connected = workload
                        .connect_to
                        .unwrap_or_else(|| nodes[0].leader_of(kind.id()).unwrap_or(0));
                    producers.push(Producer::new(
                        (0x0B0D_0000 + producers.len() as u128) | (1 << 101),
                        kind.id(),
                        &layout,
                        workload.shape,
                        connected,
                        workload.batches,
                        start_us,
                    ));
                }
            }
        }
        let mut consumers = Vec::new();
        if let Some(workload) = options.workload.as_ref().filter(|w| w.consumers) {
            for producer in &producers {
                consumers.push(Consumer::new(
                    (0x0C0E_0000 + consumers.len() as u128) | (1 << 102),
                    producer.group,
                    1,
                    layout.cluster,
                    producer.connected,
                    workload.start_us + 50_000,
                ));
            }
        }
        let replicas = usize::from(layout.replicas);
        let mut cluster = Self {
            network: Network::new(options.network.clone(), Stream::new(seed, "network")),
            latency: Stream::new(seed, "storage-latency"),
            faults: Stream::new(seed, "faults"),
            damage: Stream::new(seed, "damage"),
            rebuilt: 0,
            moments: Stream::new(seed, "moments"),
            partitions: Stream::new(seed, "partitions"),
            workload: Stream::new(seed, "workload"),
            rests: (options.draw_history && consumer::consumers_rest(seed))
                .then(|| Stream::new(seed, "rests")),
            trace: VecDeque::new(),
            options,
            layout,
            now: 0,
            seq: 0,
            events: BTreeMap::new(),
            nodes,
            clients,
            producers,
            consumers,
            pending_reads: BTreeMap::new(),
            read_tokens: 0,
            reads_served: 0,
            reads_refused: 0,
            checker: Checker::default(),
            healing: false,
            crashes: 0,
            disk_reads: 0,
            disk_read_prepares: 0,
            snapshots_installed: 0,
            partitions_installed: 0,
            view_changes: 0,
            restart_pending: vec![false; replicas],
            storage_faulty: vec![false; replicas],
            disk_full: vec![false; replicas],
            full_disk_draws: Stream::new(seed, "full-disk"),
            full_disks: 0,
            journals_refused: 0,
            pipeline_refusals: 0,
            commit_heard: BTreeMap::new(),
            view_log: Vec::new(),
            repair_bytes: BTreeMap::new(),
            repair_first: BTreeMap::new(),
            range_evicted: BTreeMap::new(),
            installed_at: BTreeMap::new(),
            evicted_after_install: BTreeMap::new(),
            serving_repair: false,
            answering_impostor: None,
            repair_senders: std::collections::BTreeSet::new(),
            peak_repair_senders: vec![0; replicas],
            death_unnoticed: vec![false; replicas],
            two_node_crashes: 0,
            stop_alls: 0,
            deaf_draws: Stream::new(seed, "deaf"),
            deaf_waiting: false,
            deaf: None,
            deaf_faults: 0,
            heard_peer: vec![0; replicas],
            replied_at: BTreeMap::new(),
        };
        for node in 0..cluster.layout.replicas {
            cluster.start_ticking(node);
        }
        for client in 0..cluster.clients.len() {
            let at = 1_000 + cluster.workload.below(200_000);
            cluster.schedule(at, Event::Client { client });
        }
        for producer in 0..cluster.producers.len() {
            let at = cluster.producers[producer].wake_us;
            cluster.schedule(at, Event::Producer { producer });
        }
        for consumer in 0..cluster.consumers.len() {
            let at = cluster.consumers[consumer].wake_us;
            cluster.schedule(at, Event::Consumer { consumer });
        }
        if cluster.options.faults != Faults::none() {
            let at = cluster.faults.between(500_000, 2_000_000);
            cluster.schedule(at, Event::Fault);
        }
        if cluster.options.faults.deaf
            && cluster.layout.replicas > 2
            && cluster.deaf_draws.chance(DEAF_CHANCE)
        {
            let at = cluster
                .deaf_draws
                .between(DEAF_FROM_US, DEAF_FROM_US + 3_000_000);
            cluster.schedule(at, Event::Deaf);
        }
        Ok(cluster)
    }

    fn schedule(&mut self, after_us: u64, event: Event) {
        self.seq += 1;
        self.events.insert((self.now + after_us, self.seq), event);
    }

    fn note(&mut self, line: String) {
        trace_note(&mut self.trace, self.options.trace_events, self.now, line);
    }

    /// Runs to the end: the fault phase, then the liveness phase.
    pub fn run(mut self) -> Report {
        let started = Instant::now();
        let deadline = self.options.fault_phase_us + self.options.liveness_us;
        while let Some(((at, _), event)) = self.events.pop_first() {
            self.now = at;
            if !self.healing && self.now >= self.options.fault_phase_us {
                self.heal();
            }
            self.handle(event);
            if self.checker.failure.is_some() {
                break;
            }
            if self.healing && self.converged() {
                break;
            }
            if self.now >= deadline {
                let what = self.stuck();
                self.checker.failure = Some(("liveness".into(), what));
                break;
            }
        }
        if self.checker.failure.is_none() {
            self.checker.final_replies();
        }
        if self.checker.failure.is_none()
            && let Err(what) = self.stored_offsets()
        {
            self.checker.failure = Some(("stored-offsets".into(), what));
        }
        let failure = self.checker.failure.take().map(|(checker, what)| Failure {
            checker,
            what,
            trace: self.trace.iter().cloned().collect(),
            status: self.status_lines(),
        });
        Report {
            seed: self.options.seed,
            simulated_us: self.now,
            wall: started.elapsed(),
            committed_ops: self.checker.history.values().map(|h| h.len() as u64).sum(),
            replies: self.checker.replies.len() as u64,
            not_committed: self.clients.iter().map(|c| c.not_committed).sum(),
            crashes: self.crashes,
            disk_reads: self.disk_reads,
            disk_read_prepares: self.disk_read_prepares,
            view_changes: self.view_changes,
            snapshots_installed: self.snapshots_installed,
            partitions_installed: self.partitions_installed,
            behind_ring: self
                .nodes
                .iter()
                .flat_map(|n| n.hosts().values())
                .filter(|h| h.replica.behind_ring())
                .count() as u64,
            producer_sends: self.producers.iter().map(|p| p.sends.len() as u64).sum(),
            group_ops: self
                .layout
                .groups()
                .iter()
                .map(|k| {
                    self.checker
                        .history
                        .get(&k.id())
                        .map_or(0, |h| h.len() as u64)
                })
                .collect(),
            two_node_crashes: self.two_node_crashes,
            stop_alls: self.stop_alls,
            deaf_faults: self.deaf_faults,
            full_disks: self.full_disks,
            journals_refused: self.journals_refused,
            pipeline_refusals: self.pipeline_refusals
                + (0..self.layout.replicas)
                    .map(|n| self.pipeline_refusals_of(n))
                    .sum::<u64>(),
            history_factor: if self.options.draw_history {
                history_factor(self.options.seed)
            } else {
                1
            },
            ring_entries: self.options.vsr.ring_entries_max,
            retention_bytes: self.options.retention_bytes,
            rebuilt: self.rebuilt,
            reads_served: self.reads_served,
            reads_refused: self.reads_refused,
            impostors: self.clients.iter().map(|c| c.impostors).sum(),
            impostors_refused: self.clients.iter().map(|c| c.impostors_refused).sum(),
            failure,
        }
    }

    /// At the end, every node up, and on a node as it boots: each node's partition reads, for
    /// every consumer, the offset of the newest acknowledged store it has executed, or a later
    /// one (`stored-offsets`): a store the node committed and then lost (a power loss that took
    /// its file's write after retention deleted its log entry) reads as an older offset.
    fn stored_offsets(&self) -> Result<(), String> {
        (0..self.nodes.len()).try_for_each(|index| self.stored_offsets_on(index))
    }

    fn stored_offsets_on(&self, index: usize) -> Result<(), String> {
        let node = &self.nodes[index];
        for consumer in &self.consumers {
            let Some(partition) = node
                .hosts()
                .get(&consumer.group)
                .and_then(|h| h.partition())
            else {
                continue;
            };
            let executed = partition.committed();
            let Some(&(request, offset, op, _)) =
                consumer.stored.iter().rev().find(|s| s.2 <= executed)
            else {
                continue;
            };
            let stored = partition
                .stored_offset(
                    iggy_segments::offsets::ConsumerKind::Consumer,
                    consumer.consumer,
                )
                .map_err(|e| {
                    format!(
                        "node {index} group {:#x}: consumer {}: {e}",
                        consumer.group, consumer.consumer
                    )
                })?;
            if stored.is_none_or(|s| s.offset < offset) {
                return Err(format!(
                    "node {index} group {:#x}: consumer {} stored offset {offset} (request \
                         {request}, op {op}, executed through {executed}) and the node reads \
                         {stored:?}",
                    consumer.group, consumer.consumer
                ));
            }
        }
        Ok(())
    }

    /// Why the liveness phase did not converge.
    fn stuck(&self) -> String {
        let busy: Vec<String> = self
            .clients
            .iter()
            .filter(|c| !c.done())
            .map(|c| format!("client {:#x} (group {:#x})", c.id, c.group))
            .take(3)
            .collect();
        let behind = self
            .nodes
            .iter()
            .flat_map(|n| n.hosts().values())
            .any(|h| h.replica.behind_ring());
        format!(
            "the healed cluster did not converge within {} s{}; waiting: {}",
            self.options.liveness_us / 1_000_000,
            if behind {
                " (a replica is behind every peer's ring)"
            } else {
                " (stuck: a real bug, every committed op is on a quorum)"
            },
            if busy.is_empty() {
                "replicas only".to_string()
            } else {
                busy.join(", ")
            }
        )
    }

    fn status_lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for node in &self.nodes {
            if !node.up {
                lines.push(format!("replica {}: CRASHED", node.index));
                continue;
            }
            for host in node.hosts().values() {
                lines.push(format!(
                    "replica {}: live | {} {}",
                    node.index,
                    host.kind.label(),
                    host.replica.describe()
                ));
            }
        }
        lines
    }

    fn heal(&mut self) {
        self.healing = true;
        self.deaf = None;
        self.network.heal();
        self.note("heal: network healed, faults stopped".into());
        for node in 0..self.layout.replicas {
            self.nodes[usize::from(node)]
                .storage
                .set_faults(FaultConfig::default());
            self.storage_faulty[usize::from(node)] = false;
            self.disk_has_room(node);
            if !self.nodes[usize::from(node)].up && !self.restart_pending[usize::from(node)] {
                self.restart_pending[usize::from(node)] = true;
                self.schedule(1_000, Event::Restart { node });
            }
        }
        for client in 0..self.clients.len() {
            self.schedule(1_000, Event::Client { client });
        }
        for producer in 0..self.producers.len() {
            self.schedule(1_000, Event::Producer { producer });
        }
    }

    fn converged(&self) -> bool {
        if !self.clients.iter().all(Client::done) || !self.producers.iter().all(Producer::done) {
            return false;
        }
        for kind in self.layout.groups() {
            let mut heads = Vec::new();
            for node in &self.nodes {
                let Some(host) = node.hosts().get(&kind.id()) else {
                    return false;
                };
                let r = &host.replica;
                if !node.up
                    || r.status() != Status::Normal
                    || r.commit_min() != r.head()
                    || r.commit_max() != r.head()
                {
                    return false;
                }
                heads.push((r.view(), r.head(), r.checksum(r.head())));
            }
            if heads.windows(2).any(|w| w[0] != w[1]) {
                return false;
            }
        }
        true
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Tick { node, life } => {
                let n = &self.nodes[usize::from(node)];
                if !n.up || n.life != life {
                    return;
                }
                let groups: Vec<u128> = n.hosts().keys().copied().collect();
                let now = self.now;
                if let Some(inner) = self.nodes[usize::from(node)].node.as_mut() {
                    inner.ration_repair();
                    inner.maintain(now);
                }
                self.repair_senders.clear();
                for group in groups {
                    let ticked = self.nodes[usize::from(node)]
                        .node
                        .as_mut()
                        .and_then(|inner| inner.tick(group));
                    if let Some((before, after)) = ticked
                        && before != after
                    {
                        self.view_changed(node, group, before, after);
                    }
                    self.drain(node, group);
                }
                self.serve_reads(node);
                let peak = &mut self.peak_repair_senders[usize::from(node)];
                *peak = (*peak).max(self.repair_senders.len());
                self.schedule(TICK_US, Event::Tick { node, life });
                self.close_if_isolated(node);
                self.check_deaf();
            }
            Event::Deliver { to, bytes } => self.deliver(to, &bytes),
            Event::Lane { node, life, group } => self.lane(node, life, group),
            Event::Client { client } => self.client(client),
            Event::Producer { producer } => self.producer(producer),
            Event::Consumer { consumer } => self.consumer(consumer),
            Event::Fault => self.fault(),
            Event::Restart { node } => self.restart(node),
            Event::MomentCrash {
                node,
                life,
                restart_after_us,
            } => {
                let n = &self.nodes[usize::from(node)];
                if n.up
                    && n.life == life
                    && self.moment_ok()
                    && self.deaf.is_none()
                    && !self.deaf_waiting
                {
                    self.note(format!("moment: node {node} crashes"));
                    self.crash(node, false);
                    self.restart_pending[usize::from(node)] = true;
                    self.schedule(restart_after_us, Event::Restart { node });
                }
            }
            Event::NetworkRepair => {
                if !self.healing {
                    self.network.repair();
                    self.note("network: links restored".into());
                }
            }
            Event::DeathNoticed { node } => {
                self.death_unnoticed[usize::from(node)] = false;
                for index in 0..self.producers.len() {
                    self.producers[index].node_died(node, self.now);
                    let wake = self.producers[index]
                        .wake_us
                        .saturating_sub(self.now)
                        .max(1);
                    self.schedule(wake, Event::Producer { producer: index });
                }
            }
            Event::StorageCalm { node } => {
                self.nodes[usize::from(node)]
                    .storage
                    .set_faults(FaultConfig::default());
                self.storage_faulty[usize::from(node)] = false;
                self.disk_has_room(node);
            }
            Event::Deaf => self.deafen(),
            Event::DeafEnd => {
                if let Some(deaf) = self.deaf.take() {
                    self.network.repair();
                    self.note(format!("deaf: node {} hears its peers again", deaf.node));
                }
            }
        }
    }

    /// The server's isolation check on `node`'s client port: heard no peer for a second, it
    /// closes the connection of every producer whose request has waited on it as long.
    fn close_if_isolated(&mut self, node: u8) {
        // The server's peers ping each other every 250 ms: a node hears every peer that is up
        // and whose link to it is whole, whether or not the replicas send anything (a primary's
        // backups send each other nothing until a view change).
        if (0..self.layout.replicas)
            .any(|p| p != node && self.nodes[usize::from(p)].up && !self.network.is_cut(p, node))
        {
            self.heard_peer[usize::from(node)] = self.now;
        }
        if self.now.saturating_sub(self.heard_peer[usize::from(node)]) < ISOLATED_US {
            return;
        }
        for index in 0..self.producers.len() {
            let waited = self.producers[index]
                .awaiting_on(node)
                .is_some_and(|at| self.now.saturating_sub(at) >= ISOLATED_US);
            if waited {
                self.producers[index].connection_closed(node, self.now);
                self.schedule(1, Event::Producer { producer: index });
            }
        }
    }

    /// Starts the deaf fault: with the cluster healthy, no replica short of the acknowledgments
    /// it gave and the network whole, the primary of a group drawn at random stops hearing its
    /// peers for 12 to 18 s (until the heal at the latest).
    fn deafen(&mut self) {
        if self.healing {
            return;
        }
        let ready = self.healthy()
            && !self.network.is_partitioned()
            && self.nodes.iter().all(|n| {
                n.hosts()
                    .values()
                    .all(|h| !h.replica.forgot_acknowledgments())
            });
        if !ready {
            self.deaf_waiting = self.now < DEAF_UNTIL_US;
            if self.deaf_waiting {
                self.schedule(100_000, Event::Deaf);
            }
            return;
        }
        self.deaf_waiting = false;
        let groups = self.layout.groups();
        let index = usize::try_from(self.deaf_draws.below(groups.len() as u64)).unwrap_or(0);
        let group = groups[index].id();
        let Some(node) = self.nodes[0]
            .hosts()
            .get(&group)
            .and_then(|h| h.replica.leader())
        else {
            return;
        };
        for other in (0..self.layout.replicas).filter(|o| *o != node) {
            self.network.cut_link(other, node);
        }
        let lasts = self.deaf_draws.between(12_000_000, 18_000_000);
        self.schedule(lasts, Event::DeafEnd);
        self.deaf_faults += 1;
        self.deaf = Some(Deaf {
            node,
            since_us: self.now,
            groups: BTreeMap::new(),
            next_check_us: self.now,
        });
        self.note(format!(
            "deaf: node {node} (primary of group {group:x}) hears none of its peers for {lasts} us"
        ));
    }

    /// Checker `availability`, while the deaf fault lasts: the two other nodes hear each other
    /// and every node is up, so a group with a request waiting commits again, or answers it,
    /// within [`DEAF_STALL_US`] (its backups replace a deaf primary after the heartbeat
    /// timeout).
    fn check_deaf(&mut self) {
        let Some(deaf) = self.deaf.as_mut() else {
            return;
        };
        if self.now < deaf.next_check_us {
            return;
        }
        // The previous check: progress seen now happened after it.
        let checked = deaf.next_check_us.saturating_sub(100_000);
        deaf.next_check_us = self.now + 100_000;
        for kind in self.layout.groups() {
            let group = kind.id();
            let commit = self
                .nodes
                .iter()
                .filter(|n| n.index != deaf.node)
                .filter_map(|n| n.hosts().get(&group).map(|h| h.replica.commit_max()))
                .max()
                .unwrap_or(0);
            let waiting = self
                .clients
                .iter()
                .filter(|c| c.group == group)
                .filter_map(Client::pending_since)
                .chain(
                    self.producers
                        .iter()
                        .filter(|p| p.group == group)
                        .filter_map(Producer::pending_since),
                )
                .min()
                .map(|at| at.max(deaf.since_us));
            let finished = self
                .clients
                .iter()
                .filter(|c| c.group == group)
                .all(Client::done)
                && self
                    .producers
                    .iter()
                    .filter(|p| p.group == group)
                    .all(Producer::done);
            let replied = self.replied_at.get(&group).copied().unwrap_or(0);
            let entry = deaf.groups.entry(group).or_insert((commit, None, 0));
            // Progress: the commit point moved, or a request was answered since the wait
            // began (a resend of a committed request is answered from the client table
            // without a new commit). A wait is then counted again from the progress at the
            // earliest: a request still waiting after the group committed (its client walking
            // the roster on a backup that refuses it, say, while its own op committed) waits
            // on a group that takes writes. Many-groups seed 593 counted it from its first
            // send across the commit that took its op, then on after its producer gave it
            // up with nothing left to send.
            let progress = if commit > entry.0 {
                Some(checked)
            } else {
                entry.1.filter(|since| replied > *since).map(|_| replied)
            };
            if let Some(at) = progress {
                *entry = (commit, None, at);
            }
            if finished {
                // Its clients and producers sent their last request and have every outcome
                // (the last given up, say): the group owes no write. A client between two
                // requests is not finished: a wait given up goes on counting into the next.
                entry.1 = None;
            } else if entry.1.is_none() {
                // Counted from the last answer or commit at the earliest (a wait that began
                // before either is not forgiven twice).
                let progressed = entry.2;
                entry.1 = waiting.map(|at| at.max(replied).max(progressed));
            }
            if let Some(since) = entry.1
                && self.now.saturating_sub(since) > DEAF_STALL_US
            {
                let what = format!(
                    "group {group:x} took no write for {} ms with a request waiting, while \
                     only node {} was faulty (deaf since {} ms): its commit point stayed at {}",
                    (self.now - since) / 1_000,
                    deaf.node,
                    deaf.since_us / 1_000,
                    entry.0
                );
                self.checker.failure = Some(("availability".into(), what));
                return;
            }
        }
    }

    fn view_changed(&mut self, node: u8, group: u128, before: (Status, u32), after: (Status, u32)) {
        if after.1 > before.1 {
            self.view_changes += 1;
        }
        self.view_log
            .push((self.now, node, group, after.0, after.1));
        self.note(format!(
            "replica {node} group {group:#x}: {} view {} -> {} view {}",
            before.0.name(),
            before.1,
            after.0.name(),
            after.1
        ));
    }

    /// Routes a replica's new effects: sends to the network, storage effects to its lane (whose
    /// head runs after a seeded latency).
    fn drain(&mut self, node: u8, group: u128) {
        let Some(inner) = self.nodes[usize::from(node)].node.as_mut() else {
            return;
        };
        let drained = inner.drain(group);
        self.route(node, group, drained.sends);
        if drained.lane_started {
            let life = self.nodes[usize::from(node)].life;
            let latency = self.latency.between(20, 2_000);
            self.schedule(latency, Event::Lane { node, life, group });
        }
        for (token, ready) in drained.reads {
            self.read_answered(node, token, ready);
        }
    }

    /// Serves the peers' repair rounds `node` reads from disk this tick (the node's bound),
    /// each at once: its prepares count as repair bytes sent.
    fn serve_reads(&mut self, node: u8) {
        let Some(inner) = self.nodes[usize::from(node)].node.as_mut() else {
            return;
        };
        let reads = inner.take_reads();
        for read in reads {
            let (group, label) = (read.group, read.label.clone());
            let served = read.run();
            self.disk_reads += 1;
            self.disk_read_prepares += served
                .sends
                .iter()
                .filter(|(_, m)| matches!(m, Message::Prepare { .. }))
                .count() as u64;
            if let Some(inner) = self.nodes[usize::from(node)].node.as_mut() {
                inner.served();
            }
            if let Some(reason) = &served.refused {
                self.note(format!(
                    "replica {node} {label}: a repair read from disk refused: {reason}"
                ));
            }
            self.serving_repair = true;
            self.route(node, group, served.sends);
            self.serving_repair = false;
        }
    }

    /// Sends what `node`'s replica of `group` emitted to the network.
    fn route(&mut self, node: u8, group: u128, sends: Vec<(Destination, Message)>) {
        // A broadcast is the same message to each peer, one after another: encoded once.
        let mut last: Option<(Message, std::sync::Arc<Vec<u8>>)> = None;
        for (to, message) in sends {
            if let Message::RequestPrepares { .. } = message {
                self.repair_senders.insert(group);
            }
            if let (
                Some((client, request)),
                Message::Reply {
                    client: c,
                    request: r,
                    op,
                    status: ReplyStatus::Committed,
                    ..
                },
            ) = (self.answering_impostor, &message)
                && (*c, *r) == (client, request)
            {
                self.checker.reuse(format!(
                    "group {group:#x}: replica {node} answered client {client:#x}'s request \
                     {request}, sent again with another body, as committed (op {op})"
                ));
            }
            if self.serving_repair
                && let (Message::Prepare { body, .. }, Destination::Replica(r)) = (&message, to)
            {
                *self.repair_bytes.entry((r, group)).or_default() +=
                    (body.len() + iggy_format::constants::HEADER_SIZE) as u64;
                self.repair_first.entry((r, group)).or_insert(self.now);
            }
            if let (Message::RangeEvicted { .. }, Destination::Replica(r)) = (&message, to) {
                *self.range_evicted.entry(r).or_default() += 1;
                if self.installed_at.contains_key(&(r, group)) {
                    *self.evicted_after_install.entry(r).or_default() += 1;
                }
            }
            if self.serving_repair
                && let (Message::SnapshotChunk { bytes, .. }, Destination::Replica(r)) =
                    (&message, to)
            {
                // A transfer's bytes count as what repair shipped the replica.
                *self.repair_bytes.entry((r, group)).or_default() += bytes.len() as u64;
                self.repair_first.entry((r, group)).or_insert(self.now);
            }
            let slow = self.aim_at(node, to, &message);
            let bytes = match &last {
                Some((previous, bytes)) if *previous == message => bytes.clone(),
                _ => {
                    let bytes = std::sync::Arc::new(message.encode());
                    last = Some((message, bytes.clone()));
                    bytes
                }
            };
            let to = match to {
                Destination::Replica(r) => Endpoint::Node(r),
                Destination::Client(c) => match self.client_endpoint(c) {
                    Some(endpoint) => endpoint,
                    None => continue,
                },
            };
            self.send_bytes(Endpoint::Node(node), to, &bytes, slow);
        }
    }

    /// Places a fault at a protocol moment `message` (from `node` to `to`) marks; returns how
    /// much later than the network would deliver it this one message arrives.
    fn aim_at(&mut self, node: u8, to: Destination, message: &Message) -> u64 {
        if self.healing || !self.options.faults.moments || self.deaf.is_some() || self.deaf_waiting
        {
            return 0;
        }
        match (message, to) {
            (Message::DoViewChange { .. }, _) => {
                if self.moments.chance(CRASH_AFTER_DO_VIEW_CHANGE) {
                    // Before anything else the replica emitted reaches its disk.
                    let life = self.nodes[usize::from(node)].life;
                    let restart_after_us = self.moments.between(100_000, 2_000_000);
                    self.schedule(
                        1,
                        Event::MomentCrash {
                            node,
                            life,
                            restart_after_us,
                        },
                    );
                }
                0
            }
            (Message::StartView { nonce, .. }, Destination::Replica(asker))
                if *nonce != 0 && self.moments.chance(SLOW_PROBE_ANSWER) =>
            {
                // The asker adopts a later answer and journals on; it restarts so that this
                // answer arrives while its next life is still probing.
                let slow = self.moments.between(2_500_000, 5_000_000);
                let life = self.nodes[usize::from(asker)].life;
                self.schedule(
                    slow - 600_000,
                    Event::MomentCrash {
                        node: asker,
                        life,
                        restart_after_us: 100_000,
                    },
                );
                self.note(format!(
                    "moment: node {node}'s answer to node {asker}'s probe takes {slow} us more"
                ));
                slow
            }
            _ => 0,
        }
    }

    /// Whether a crash now keeps the fault model's promise (one failed node at a time): every
    /// node up and healthy and, with replicated partitions, every replica journaled through its
    /// group's commit point (a view change may be under way).
    fn moment_ok(&self) -> bool {
        if self.healing
            || self.nodes.iter().any(|n| !n.up)
            || self.restart_pending.iter().any(|p| *p)
            || self.storage_faulty.iter().any(|f| *f)
        {
            return false;
        }
        if self.layout.replicated == 0 {
            return true;
        }
        self.layout.groups().into_iter().all(|kind| {
            let replicas: Vec<&iggy_vsr::Replica> = self
                .nodes
                .iter()
                .filter_map(|n| n.hosts().get(&kind.id()).map(|h| &h.replica))
                .collect();
            let commit = replicas.iter().map(|r| r.commit_max()).max().unwrap_or(0);
            replicas.iter().all(|r| r.journaled_head() >= commit)
        })
    }

    fn client_endpoint(&self, id: u128) -> Option<Endpoint> {
        if let Some(i) = self.clients.iter().position(|c| c.id == id) {
            return Some(Endpoint::Client(i));
        }
        if let Some(i) = self.consumers.iter().position(|c| c.id == id) {
            return Some(Endpoint::Consumer(i));
        }
        self.producers
            .iter()
            .position(|p| p.id == id)
            .map(Endpoint::Producer)
    }

    /// What a producer of `group` sees of the cluster now.
    fn routing(&self, group: u128) -> Routing {
        Routing {
            up: self
                .nodes
                .iter()
                .zip(&self.death_unnoticed)
                .map(|(n, unnoticed)| n.up || *unnoticed)
                .collect(),
            leader: self.nodes.iter().map(|n| n.leader_of(group)).collect(),
        }
    }

    /// Puts `bytes` from `from` on the network to node `to`: each copy the network delivers
    /// arrives after its delay (plus `extra_us`).
    fn send_bytes(
        &mut self,
        from: Endpoint,
        to: Endpoint,
        bytes: &std::sync::Arc<Vec<u8>>,
        extra_us: u64,
    ) {
        let now = self.now;
        for delay in self.network.route(from, to, bytes.len(), now) {
            self.schedule(
                delay + extra_us,
                Event::Deliver {
                    to,
                    bytes: bytes.clone(),
                },
            );
        }
    }

    /// A consumer's turn: a poll of its partition through the node it is connected to (after a
    /// read barrier on that node's replica: `iggy_node::Node::read`), then an offset store
    /// through the primary when one is due. A poll asked while the last one still waits for its
    /// barrier is skipped.
    fn consumer(&mut self, index: usize) {
        let now = self.now;
        if now < self.consumers[index].wake_us {
            return;
        }
        let stores = self.consumers[index].stored.len();
        if let Some(rests) = self.rests.as_mut()
            && stores > self.consumers[index].rest_drawn_at
        {
            self.consumers[index].rest_drawn_at = stores;
            if rests.below(consumer::REST_ONE_IN) == 0 {
                let rest = rests.between(consumer::REST_US.0, consumer::REST_US.1);
                self.consumers[index].wake_us = now + rest;
                self.schedule(rest, Event::Consumer { consumer: index });
                return;
            }
        }
        let group = self.consumers[index].group;
        let routing = self.routing(group);
        self.consumers[index].wake_us = now + consumer::POLL_US;
        self.schedule(consumer::POLL_US, Event::Consumer { consumer: index });
        let Some(target) = self.consumers[index].target(&routing) else {
            return;
        };
        if let Some(token) = self.consumers[index].reading {
            let waiting = self.pending_reads.get(&token).is_some_and(|read| {
                now < read.asked_us + READ_PATIENCE_US && self.nodes[usize::from(read.node)].up
            });
            if !waiting {
                self.pending_reads.remove(&token);
                self.consumers[index].reading = None;
            }
        }
        if self.consumers[index].reading.is_none() {
            // `target` moved the connection to a live node if its own is down.
            let node = self.consumers[index].connected;
            let n = &mut self.nodes[usize::from(node)];
            if let Some(inner) = n.node.as_mut().filter(|_| n.up) {
                self.read_tokens += 1;
                let token = self.read_tokens;
                if inner.read(group, token).is_some() {
                    let acknowledged = self
                        .checker
                        .acknowledged_max
                        .get(&group)
                        .copied()
                        .unwrap_or(0);
                    self.pending_reads.insert(
                        token,
                        PendingRead {
                            consumer: index,
                            node,
                            group,
                            acknowledged,
                            asked_us: now,
                        },
                    );
                    self.consumers[index].reading = Some(token);
                    self.drain(node, group);
                }
            }
        }
        if let Some(message) = self.consumers[index].store_message(now, target) {
            let bytes = std::sync::Arc::new(message.encode());
            self.send_bytes(Endpoint::Consumer(index), Endpoint::Node(target), &bytes, 0);
        }
    }

    /// A read barrier answered on `node`: a ready read is served there at once, from what the
    /// replica executed, and checked (checker `linearizable`: it reflects every write
    /// acknowledged before it was asked; checker `consumer`: what the consumer reads).
    fn read_answered(&mut self, node: u8, token: u64, ready: bool) {
        let Some(read) = self.pending_reads.remove(&token) else {
            return;
        };
        if self.consumers[read.consumer].reading == Some(token) {
            self.consumers[read.consumer].reading = None;
        }
        if !ready || read.node != node {
            self.reads_refused += 1;
            return;
        }
        let n = &self.nodes[usize::from(node)];
        let Some(host) = n.hosts().get(&read.group).filter(|_| n.up) else {
            return;
        };
        let executed = host.replica.commit_min();
        let first = host.partition().map_or(0, |p| p.first_offset());
        if first > self.consumers[read.consumer].next_offset {
            // Retention deleted what the consumer had not read yet, on this node (nodes retain
            // on their own, and a node that installed a peer's segments starts where that peer
            // did): it reads on from this node's first offset.
            self.consumers[read.consumer].next_offset = first;
        }
        let next_offset = self.consumers[read.consumer].next_offset;
        let polled = host
            .partition()
            .map(|partition| partition.read_through(next_offset, consumer::POLL_BYTES, executed));
        self.reads_served += 1;
        self.checker
            .read_served(node, read.group, executed, read.acknowledged, read.asked_us);
        match polled {
            Some(Ok(batches)) => {
                let batches: Vec<(u64, u32, u64)> = batches
                    .iter()
                    .map(|b| (b.header.base_offset, b.header.message_count, b.op))
                    .collect();
                let history = self.checker.history.get(&read.group);
                let result = self.consumers[read.consumer]
                    .polled(&batches, |op| history.is_some_and(|h| h.contains_key(&op)));
                if let Err(what) = result {
                    self.checker.fail_consumer(what);
                }
            }
            Some(Err(error)) => self.note(format!(
                "consumer {}: poll of node {node} failed: {error}",
                read.consumer
            )),
            None => {}
        }
    }

    fn producer(&mut self, index: usize) {
        let patient = self.healing;
        let now = self.now;
        if now < self.producers[index].wake_us {
            return;
        }
        let routing = self.routing(self.producers[index].group);
        let sent = self.producers[index].wake(now, &routing, patient);
        if let Some((replica, message)) = sent {
            let bytes = std::sync::Arc::new(message.encode());
            self.send_bytes(
                Endpoint::Producer(index),
                Endpoint::Node(replica),
                &bytes,
                0,
            );
        }
        let producer = &self.producers[index];
        if !producer.done() {
            let after = producer.wake_us.saturating_sub(now).max(1);
            self.schedule(after, Event::Producer { producer: index });
        }
    }

    /// Carries out the head of a group's lane and hands the replica its completion
    /// (`iggy_node::Node::run_lane_head`, the checkers watching).
    fn lane(&mut self, node: u8, life: u64, group: u128) {
        let now = self.now;
        let n = &mut self.nodes[usize::from(node)];
        if !n.up || n.life != life {
            return;
        }
        let Some(inner) = n.node.as_mut() else {
            return;
        };
        let mut watcher = Watcher {
            checker: &mut self.checker,
            trace: &mut self.trace,
            trace_events: self.options.trace_events,
            now,
            watch: self.options.watch,
            watched: None,
        };
        let installed = |node: &iggy_node::Node<SimStorage>| {
            node.groups
                .get(&group)
                .and_then(|g| g.replica.counters().get("snapshot_installed").copied())
                .unwrap_or(0)
        };
        let installed_before = installed(inner);
        let Some(ran) = inner.run_lane_head(group, now, &mut watcher) else {
            return;
        };
        if installed(inner) > installed_before {
            self.snapshots_installed += 1;
            if group != iggy_metadata::group::GROUP_ID {
                self.partitions_installed += 1;
            }
            self.installed_at.entry((node, group)).or_insert(self.now);
            self.note(format!(
                "replica {node} group {group:#x}: installed a peer's snapshot"
            ));
        }
        if ran
            .refused
            .as_ref()
            .is_some_and(|r| r.starts_with(iggy_node::store::NO_ROOM))
            && ran.name == "journal"
        {
            self.journals_refused += 1;
        }
        if let Some(reason) = &ran.failed {
            let line = format!(
                "replica {node} group {group:#x}: {} failed: {reason}",
                ran.name
            );
            self.note(line.clone());
            if self.disk_full[usize::from(node)] {
                // A full disk is refused, tried again, never a reason to stop.
                self.checker.failure = Some(("full-disk".into(), line));
                return;
            }
            // The replica stopped: the node restarts (its process dies with the error).
            if !self.restart_pending[usize::from(node)] {
                self.crash(node, false);
                self.restart_pending[usize::from(node)] = true;
                self.schedule(100_000, Event::Restart { node });
            }
            return;
        }
        if ran.after.0 == Status::Halted && self.disk_full[usize::from(node)] {
            // A full disk is refused, tried again, never a reason to stop.
            self.checker.failure = Some((
                "full-disk".into(),
                format!(
                    "replica {node} group {group:#x} halted on its {} while its disk was full",
                    ran.name
                ),
            ));
            return;
        }
        if ran.before != ran.after {
            self.view_changed(node, group, ran.before, ran.after);
        }
        self.drain(node, group);
        let hosted = self.nodes[usize::from(node)].hosts().contains_key(&group);
        if ran.more && hosted {
            let latency = self.latency.between(20, 2_000);
            self.schedule(latency, Event::Lane { node, life, group });
        }
    }

    fn deliver(&mut self, to: Endpoint, bytes: &[u8]) {
        let message = match Message::decode(bytes) {
            Ok(message) => message,
            Err(error) => {
                self.note(format!("dropped a frame that does not verify: {error}"));
                return;
            }
        };
        match to {
            Endpoint::Client(index) => {
                let group = self.clients[index].group;
                let client_id = self.clients[index].id;
                let think = if self.healing {
                    0
                } else {
                    self.workload.below(self.options.think_us)
                };
                if let Some((request, op, body)) =
                    self.clients[index].on_reply(self.now, think, &message)
                {
                    self.checker.reply(group, client_id, request, op, &body);
                    self.replied_at.insert(group, self.now);
                }
                if let Some((request, replica)) = self.clients[index].refused_as_reused.take() {
                    self.checker
                        .refused_as_reused(group, client_id, request, replica);
                }
                let wake = self.clients[index].wake_us.saturating_sub(self.now).max(1);
                self.schedule(wake, Event::Client { client: index });
            }
            Endpoint::Producer(index) => {
                let producer = &mut self.producers[index];
                let (group, id) = (producer.group, producer.id);
                if let Some((request, op, body)) = producer.on_reply(self.now, &message) {
                    self.checker.reply(group, id, request, op, &body);
                    self.replied_at.insert(group, self.now);
                }
                if let Some((request, replica)) = producer.refused_as_reused.take() {
                    self.checker.refused_as_reused(group, id, request, replica);
                }
                let wake = self.producers[index]
                    .wake_us
                    .saturating_sub(self.now)
                    .max(1);
                self.schedule(wake, Event::Producer { producer: index });
            }
            Endpoint::Consumer(index) => {
                let consumer = &mut self.consumers[index];
                let (group, id) = (consumer.group, consumer.id);
                if let Some((request, op, body)) = consumer.on_reply(self.now, &message) {
                    self.checker.reply(group, id, request, op, &body);
                    self.replied_at.insert(group, self.now);
                }
            }
            Endpoint::Node(node) => {
                let group = message.group();
                if self.options.watch == Some(group) && self.nodes[usize::from(node)].up {
                    self.note(format!("to replica {node}: {}", message.summary()));
                }
                let n = &mut self.nodes[usize::from(node)];
                if !n.up {
                    return;
                }
                let Some(inner) = n.node.as_mut() else {
                    return;
                };
                if !inner.groups.contains_key(&group) {
                    return;
                }
                if let Message::Commit { .. } = message {
                    self.commit_heard.insert((node, group), self.now);
                }
                if message.sender().is_some_and(|from| from.replica != node) {
                    self.heard_peer[usize::from(node)] = self.now;
                }
                let serving = matches!(message, Message::RequestPrepares { .. });
                let impostor = match &message {
                    Message::Request {
                        client,
                        request,
                        body,
                        ..
                    } => self
                        .clients
                        .iter()
                        .find(|c| c.id == *client)
                        .and_then(|c| c.pending.as_ref())
                        .filter(|p| p.impostor && p.request == *request && p.body == *body)
                        .map(|_| (*client, *request)),
                    _ => None,
                };
                if let Some((before, after)) = inner.deliver(group, message)
                    && before != after
                {
                    self.view_changed(node, group, before, after);
                }
                self.serving_repair = serving;
                self.answering_impostor = impostor;
                self.drain(node, group);
                self.serving_repair = false;
                self.answering_impostor = None;
            }
        }
    }

    fn client(&mut self, index: usize) {
        let patient = self.healing;
        let now = self.now;
        let client = &mut self.clients[index];
        if now < client.wake_us {
            return;
        }
        let sent = client.wake(now, &mut self.workload, patient);
        let wake = client.wake_us;
        if let Some((replica, message)) = sent {
            let bytes = std::sync::Arc::new(message.encode());
            self.send_bytes(Endpoint::Client(index), Endpoint::Node(replica), &bytes, 0);
        }
        if !self.clients[index].done() {
            let after = wake.saturating_sub(now).max(1);
            self.schedule(after, Event::Client { client: index });
        }
    }

    /// Every node up and every replica of every group in normal status holding every op its
    /// group committed: a node may fail now without a committed op falling below a quorum.
    fn healthy(&self) -> bool {
        if self.nodes.iter().any(|n| !n.up) || self.restart_pending.iter().any(|p| *p) {
            return false;
        }
        if self.storage_faulty.iter().any(|f| *f) {
            return false;
        }
        if self.layout.replicated == 0 {
            // Every group journals durably before it acknowledges: with every node up, one
            // may fail at any moment, view changes included.
            return true;
        }
        self.caught_up(None)
    }

    /// Whether every replica of every group, on every node but `skip`, is normal and journaled
    /// through the highest commit point among them.
    fn caught_up(&self, skip: Option<u8>) -> bool {
        for kind in self.layout.groups() {
            let replicas: Vec<&iggy_vsr::Replica> = self
                .nodes
                .iter()
                .filter(|n| Some(n.index) != skip)
                .filter_map(|n| n.hosts().get(&kind.id()).map(|h| &h.replica))
                .collect();
            let commit = replicas.iter().map(|r| r.commit_max()).max().unwrap_or(0);
            if replicas
                .iter()
                .any(|r| r.status() != Status::Normal || r.journaled_head() < commit)
            {
                return false;
            }
        }
        true
    }

    /// Whether every node but `down` is up, and each replica on them is normal and journaled
    /// through its group's commit point: then they hold every committed op between them, and
    /// `down`'s storage may be lost whole (one faulty replica, the fault model's bound).
    fn healthy_besides(&self, down: u8) -> bool {
        let others_up = self
            .nodes
            .iter()
            .filter(|n| n.index != down)
            .all(|n| n.up && !self.restart_pending[usize::from(n.index)]);
        others_up && self.caught_up(Some(down))
    }

    fn fault(&mut self) {
        if self.healing {
            return;
        }
        let next = self.faults.between(300_000, 2_000_000);
        self.schedule(next, Event::Fault);
        if self.deaf.is_some() || self.deaf_waiting {
            // The deaf fault is the only fault while it lasts, and waits for the others to end.
            return;
        }
        let faults = self.options.faults;
        let choice = self.faults.below(5);
        let node = u8::try_from(self.faults.below(u64::from(self.layout.replicas))).unwrap_or(0);
        match choice {
            0 | 1 if (faults.crashes || faults.power_loss) && self.healthy() => {
                // One node, or two at once: with every replica of every group journaled
                // through its commit point (`healthy`), the one left holds every committed op,
                // so nothing acknowledged can be lost, replicated durability included.
                let replicas = u64::from(self.layout.replicas);
                let mut down = vec![node];
                if replicas > 2 && self.faults.chance(0.25) {
                    let step = 1 + self.faults.below(replicas - 1);
                    down.push(u8::try_from((u64::from(node) + step) % replicas).unwrap_or(0));
                    self.two_node_crashes += 1;
                }
                for node in down {
                    let power = faults.power_loss && (!faults.crashes || self.faults.chance(0.5));
                    self.crash(node, power);
                    self.restart_pending[usize::from(node)] = true;
                    let after = self.faults.between(200_000, 4_000_000);
                    self.schedule(after, Event::Restart { node });
                }
            }
            4 if faults.crashes && self.healthy() && self.faults.chance(0.3) => {
                // Every node stops cleanly (each publishes everything and marks its clean
                // shutdown) and they start again together: every group resumes through its
                // unanswered probes.
                self.note("stop-all: every node shuts down cleanly".into());
                self.stop_alls += 1;
                let after = self.faults.between(200_000, 2_000_000);
                for node in 0..self.layout.replicas {
                    if let Err(error) = self.shutdown_node(node) {
                        self.checker.failure = Some(("shutdown".into(), error));
                        return;
                    }
                    self.crashes += 1;
                    self.restart_pending[usize::from(node)] = true;
                    self.schedule(after, Event::Restart { node });
                }
            }
            2 if faults.network && !self.network.is_partitioned() => {
                let replicas = u64::from(self.layout.replicas);
                if replicas > 2 && self.partitions.chance(0.3) {
                    // Two nodes that cannot hear each other while both hear the rest: a backup
                    // gives up on a primary the others still follow.
                    let step = 1 + self.partitions.below(replicas - 1);
                    let other = u8::try_from((u64::from(node) + step) % replicas).unwrap_or(0);
                    self.network.cut_link(node, other);
                    self.network.cut_link(other, node);
                    self.note(format!(
                        "network: nodes {node} and {other} cut from each other"
                    ));
                } else if self.faults.chance(0.5) {
                    let one_way = self.faults.chance(0.3);
                    self.network.isolate(node, self.layout.replicas, one_way);
                    self.note(format!(
                        "network: node {node} isolated{}",
                        if one_way { " (outgoing only)" } else { "" }
                    ));
                } else {
                    let extra = self.faults.between(20_000, 400_000);
                    self.network.clog(node, self.layout.replicas, extra);
                    self.note(format!("network: node {node} clogged (+{extra} us)"));
                }
                let after = self.faults.between(500_000, 5_000_000);
                self.schedule(after, Event::NetworkRepair);
            }
            3 if faults.storage && self.healthy() => {
                let storage = &self.nodes[usize::from(node)].storage;
                if faults.full_disk && self.full_disk_draws.chance(0.5) {
                    let room = self.full_disk_draws.below(64 << 10);
                    storage.set_space_limit(Some(storage.used_bytes() + room));
                    self.disk_full[usize::from(node)] = true;
                    self.full_disks += 1;
                    self.note(format!(
                        "storage: node {node}'s disk full ({room} bytes left)"
                    ));
                } else {
                    storage.set_faults(iggy_io::soak::faults());
                    self.note(format!("storage: faults on node {node}"));
                }
                self.storage_faulty[usize::from(node)] = true;
                let after = self.faults.between(200_000, 2_000_000);
                self.schedule(after, Event::StorageCalm { node });
            }
            _ => {}
        }
    }

    /// Ends a full disk on `node` ([`Faults::full_disk`]), if it has one.
    fn disk_has_room(&mut self, node: u8) {
        if std::mem::take(&mut self.disk_full[usize::from(node)]) {
            self.nodes[usize::from(node)].storage.set_space_limit(None);
            self.note(format!("storage: node {node}'s disk has room again"));
        }
    }

    /// Requests node `node`'s replicas refused for its pipeline budget in this life.
    fn pipeline_refusals_of(&self, node: u8) -> u64 {
        self.nodes[usize::from(node)]
            .hosts()
            .values()
            .filter_map(|h| h.replica.counters().get("request_pipeline_bytes"))
            .sum()
    }

    fn crash(&mut self, node: u8, power_loss: bool) {
        self.crashes += 1;
        self.pipeline_refusals += self.pipeline_refusals_of(node);
        self.nodes[usize::from(node)].crash(power_loss);
        if power_loss && self.nodes.iter().all(|n| !n.up) {
            // Every node lost power: under replicated durability what no node had published is
            // gone by design (the failover cases count it exactly), so reads after this are held
            // only to what is acknowledged from now on.
            self.checker.acknowledged_max.clear();
        }
        if !self.producers.is_empty() {
            self.death_unnoticed[usize::from(node)] = true;
            self.schedule(
                crate::producer::RESET_NOTICED_US,
                Event::DeathNoticed { node },
            );
        }
        self.note(format!(
            "node {node}: {}",
            if power_loss {
                "power loss"
            } else {
                "process crash"
            }
        ));
    }

    fn restart(&mut self, node: u8) {
        self.restart_pending[usize::from(node)] = false;
        let n = &mut self.nodes[usize::from(node)];
        if n.up {
            return;
        }
        // Boot runs without injected faults: a fault during boot would only restart it again.
        let faulty = self.storage_faulty[usize::from(node)];
        if faulty {
            n.storage.set_faults(FaultConfig::default());
        }
        // Nor with a full disk: it ends here (a boot that finds no room leaves the partition
        // out, `unavailable_partitions`, which the runs do not draw).
        let was_full = self.disk_full[usize::from(node)];
        self.disk_has_room(node);
        // Only while the other nodes hold everything: losing a second copy is beyond what
        // three replicas promise to survive.
        let may_damage = self.options.faults.damage && self.healthy_besides(node);
        let n = &mut self.nodes[usize::from(node)];
        let damaged = if may_damage && self.damage.chance(DAMAGE_AT_RESTART) {
            damage_a_partition(&n.storage, &mut self.damage)
        } else {
            None
        };
        if let Err(error) = n.boot(&self.layout) {
            self.checker.failure = Some(("boot".into(), error));
            return;
        }
        let rebuilt_marker = damaged.as_ref().map(|(_, dir)| {
            iggy_segments::rebuilt::read(&n.storage, dir)
                .ok()
                .flatten()
                .is_some()
        });
        if faulty && !was_full && !self.healing {
            n.storage.set_faults(iggy_io::soak::faults());
        }
        if let (Some((group, dir)), Some(rebuilt)) = (damaged, rebuilt_marker) {
            // Rebuilt (its marker is there) unless the partition held no published data.
            if rebuilt {
                self.rebuilt += 1;
                self.checker.rebuilt(node, group);
            }
            self.note(format!(
                "node {node}: partition {} lost its WAL frontier while down{}",
                dir.display(),
                if rebuilt {
                    "; rebuilt from its peers"
                } else {
                    ""
                }
            ));
        }
        let n = &self.nodes[usize::from(node)];
        let life = n.life;
        for (&group, host) in n.hosts() {
            let r = &host.replica;
            self.checker.booted(
                node,
                group,
                (r.durable().log_view, r.journaled_head()),
                r.commit_min(),
                |op| r.checksum(op),
            );
        }
        self.note(format!("node {node}: restarted (life {life})"));
        if let Err(what) = self.stored_offsets_on(usize::from(node)) {
            self.checker.failure = Some(("stored-offsets".into(), what));
            return;
        }
        self.start_ticking(node);
    }

    /// A booted node's first tick, and what its replicas emitted while they booted.
    fn start_ticking(&mut self, node: u8) {
        let life = self.nodes[usize::from(node)].life;
        self.schedule(TICK_US, Event::Tick { node, life });
        let groups: Vec<u128> = self.nodes[usize::from(node)]
            .hosts()
            .keys()
            .copied()
            .collect();
        for group in groups {
            self.drain(node, group);
        }
    }

    // ---- for scenario tests ----

    /// Advances the simulation until `until_us` (or a checker fires).
    pub fn run_until(&mut self, until_us: u64) {
        while let Some((&(at, _), _)) = self.events.first_key_value() {
            if at > until_us || self.checker.failure.is_some() {
                break;
            }
            let Some(((at, _), event)) = self.events.pop_first() else {
                break;
            };
            self.now = at;
            self.handle(event);
        }
        self.now = self.now.max(until_us);
    }

    #[must_use]
    pub fn now(&self) -> u64 {
        self.now
    }

    #[must_use]
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    pub fn nodes_mut(&mut self) -> &mut [Node] {
        &mut self.nodes
    }

    #[must_use]
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Crashes node `node` now (a power loss, or a process crash).
    pub fn crash_node(&mut self, node: u8, power_loss: bool) {
        self.crash(node, power_loss);
    }

    /// Shuts node `node` down cleanly now (every partition publishes first).
    pub fn shutdown_node(&mut self, node: u8) -> Result<(), String> {
        self.note(format!("node {node}: clean shutdown"));
        let result = self.nodes[usize::from(node)].shutdown();
        if !self.producers.is_empty() {
            self.death_unnoticed[usize::from(node)] = true;
            self.schedule(
                crate::producer::RESET_NOTICED_US,
                Event::DeathNoticed { node },
            );
        }
        result
    }

    /// Restarts node `node` now.
    pub fn restart_node(&mut self, node: u8) {
        self.repair_first.retain(|(n, _), _| *n != node);
        self.range_evicted.remove(&node);
        self.restart(node);
    }

    /// The network, for scripted partitions.
    pub fn network(&mut self) -> &mut Network {
        &mut self.network
    }

    /// Stops the fault placer and heals the network: what the liveness phase does.
    pub fn heal_now(&mut self) {
        self.heal();
    }

    /// Whether every client finished and every group converged.
    #[must_use]
    pub fn is_converged(&self) -> bool {
        self.converged()
    }

    /// The status lines of every replica.
    #[must_use]
    pub fn status(&self) -> Vec<String> {
        self.status_lines()
    }

    /// The trace kept so far.
    #[must_use]
    pub fn trace(&self) -> Vec<String> {
        self.trace.iter().cloned().collect()
    }

    /// The clients.
    #[must_use]
    pub fn clients(&self) -> &[Client] {
        &self.clients
    }

    /// The producers.
    #[must_use]
    pub fn producers(&self) -> &[Producer] {
        &self.producers
    }

    /// The consumers.
    #[must_use]
    pub fn consumers(&self) -> &[Consumer] {
        &self.consumers
    }

    /// Every producer sends nothing new after the batch it has in flight.
    pub fn stop_producers(&mut self) {
        for producer in &mut self.producers {
            producer.stop();
        }
    }

    /// When `node` last heard a commit broadcast of `group`.
    #[must_use]
    pub fn commit_heard(&self, node: u8, group: u128) -> Option<u64> {
        self.commit_heard.get(&(node, group)).copied()
    }

    /// Every change of a replica's status or view so far: (time, node, group, status, view).
    #[must_use]
    pub fn view_log(&self) -> &[(u64, u8, u128, Status, u32)] {
        &self.view_log
    }

    /// The most groups of `node` that asked peers for prepares in one tick.
    #[must_use]
    pub fn peak_repair_senders(&self, node: u8) -> usize {
        self.peak_repair_senders[usize::from(node)]
    }

    /// When `node`'s replica of `group` was first sent a repair prepare since the node's last
    /// [`Cluster::restart_node`].
    #[must_use]
    pub fn first_repair_at(&self, node: u8, group: u128) -> Option<u64> {
        self.repair_first.get(&(node, group)).copied()
    }

    /// `RangeEvicted` answers sent to `node` since its last [`Cluster::restart_node`].
    #[must_use]
    pub fn range_evicted_to(&self, node: u8) -> u64 {
        self.range_evicted.get(&node).copied().unwrap_or(0)
    }

    /// `RangeEvicted` answers `node` got for a group after it installed a peer's state.
    #[must_use]
    pub fn evicted_after_install(&self, node: u8) -> u64 {
        self.evicted_after_install.get(&node).copied().unwrap_or(0)
    }

    /// When `node` first installed a peer's state of `group`.
    #[must_use]
    pub fn installed_at(&self, node: u8, group: u128) -> Option<u64> {
        self.installed_at.get(&(node, group)).copied()
    }

    /// Peers' repair rounds read from disk so far, and the prepares they sent.
    #[must_use]
    pub fn disk_reads(&self) -> (u64, u64) {
        (self.disk_reads, self.disk_read_prepares)
    }

    /// Bytes of prepares `node` was sent for `group` in answer to its repair requests.
    #[must_use]
    pub fn repair_bytes(&self, node: u8, group: u128) -> u64 {
        self.repair_bytes.get(&(node, group)).copied().unwrap_or(0)
    }

    /// The replica of `group` on `node`, when the node is up.
    #[must_use]
    pub fn replica(&self, node: u8, group: u128) -> Option<&iggy_vsr::Replica> {
        let n = &self.nodes[usize::from(node)];
        n.up.then(|| n.hosts().get(&group).map(|h| &h.replica))
            .flatten()
    }

    /// The first checker failure, if one fired.
    #[must_use]
    pub fn failure(&self) -> Option<&(String, String)> {
        self.checker.failure.as_ref()
    }
}

/// The checkers and the trace, watching each storage effect a node's lane runs.
struct Watcher<'a> {
    checker: &'a mut Checker,
    trace: &'a mut VecDeque<String>,
    trace_events: usize,
    now: u64,
    /// The group whose effects go into the trace.
    watch: Option<u128>,
    /// The line of the effect under way, when its group is watched.
    watched: Option<String>,
}

impl Watcher<'_> {
    fn note(&mut self, line: String) {
        trace_note(self.trace, self.trace_events, self.now, line);
    }
}

/// Appends `line`, stamped with the simulated time, to a trace that keeps its last `keep` lines.
fn trace_note(trace: &mut VecDeque<String>, keep: usize, now_us: u64, line: String) {
    if keep == 0 {
        return;
    }
    if trace.len() >= keep {
        trace.pop_front();
    }
    trace.push_back(format!("{:>10.3}s {line}", now_us as f64 / 1e6));
}

impl iggy_node::Observer for Watcher<'_> {
    fn before_effect(
        &mut self,
        node: u8,
        group: u128,
        replica: &iggy_vsr::Replica,
        effect: &Effect,
    ) {
        if let Effect::Truncate { after, .. } = effect {
            let checksum = replica.checksum(*after);
            let starting = replica.starting_view();
            self.checker
                .truncating(node, group, *after, checksum, starting);
        }
        if self.watch == Some(group) {
            self.watched = Some(match effect {
                Effect::WriteSuperblock { durable, .. } => format!(
                    "replica {node}: superblock view {} log_view {} commit {}",
                    durable.view, durable.log_view, durable.commit_max
                ),
                Effect::Prepare { .. } => format!("replica {node}: prepare"),
                Effect::Journal { header, .. } => {
                    format!(
                        "replica {node}: journal op {} view {}",
                        header.op, header.view
                    )
                }
                Effect::Truncate { after, .. } => format!("replica {node}: truncate after {after}"),
                Effect::Publish { through, .. } => format!("replica {node}: publish {through}"),
                Effect::Commit { through, .. } => format!("replica {node}: commit {through}"),
                Effect::WriteSnapshotChunk {
                    snapshot, offset, ..
                } => format!(
                    "replica {node}: stage snapshot {} chunk at {offset}",
                    snapshot.op
                ),
                Effect::InstallSnapshot { snapshot, .. } => {
                    format!("replica {node}: install snapshot {}", snapshot.op)
                }
                Effect::Send { .. }
                | Effect::ReadPrepares { .. }
                | Effect::ReadSnapshot { .. }
                | Effect::ReadBarrier { .. } => String::new(),
            });
        }
    }

    fn effect_done(
        &mut self,
        node: u8,
        group: u128,
        replica: &iggy_vsr::Replica,
        ran: &iggy_node::Ran,
        outcome: &Outcome,
    ) {
        if let Some(line) = self.watched.take() {
            let described = replica.describe();
            self.note(format!("{line}: {} | {described}", outcome_name(outcome)));
        }
        if ran.failed.is_some() {
            return;
        }
        if let Some((from, through)) = ran.commit {
            for op in from + 1..=through {
                if let Some(header) = replica.header(op) {
                    self.checker.committed(
                        node,
                        group,
                        op,
                        Committed {
                            checksum: header.checksum(),
                            client: header.client,
                            request: header.request,
                        },
                    );
                }
            }
        }
        if let Some(durable) = ran.durable {
            self.checker.durable(node, group, durable);
        }
    }

    fn effect_completed(
        &mut self,
        node: u8,
        group: u128,
        replica: &iggy_vsr::Replica,
        ran: &iggy_node::Ran,
    ) {
        if let Some(op) = ran.journaled {
            let log_view = replica.durable().log_view;
            self.checker.journaled(node, group, log_view, op);
        }
        if let Some(durable) = ran.durable
            && durable.log_view > ran.log_view_before
        {
            let op = replica.journaled_head();
            let checksum = replica.checksum(op).unwrap_or(0);
            self.checker
                .log_view_written(node, group, durable.log_view, op, checksum);
            let head = replica.head();
            self.checker
                .view_log(node, group, durable.log_view, head, |op| {
                    replica.checksum(op)
                });
        }
    }
}

/// Runs seed `options.seed` to its end.
pub fn run(options: Options) -> Report {
    let seed = options.seed;
    match Cluster::new(options) {
        Ok(cluster) => cluster.run(),
        Err(error) => Report {
            seed,
            simulated_us: 0,
            wall: Duration::ZERO,
            committed_ops: 0,
            replies: 0,
            not_committed: 0,
            crashes: 0,
            disk_reads: 0,
            disk_read_prepares: 0,
            view_changes: 0,
            snapshots_installed: 0,
            partitions_installed: 0,
            behind_ring: 0,
            producer_sends: 0,
            group_ops: Vec::new(),
            two_node_crashes: 0,
            stop_alls: 0,
            deaf_faults: 0,
            full_disks: 0,
            journals_refused: 0,
            pipeline_refusals: 0,
            history_factor: 1,
            ring_entries: 0,
            retention_bytes: 0,
            rebuilt: 0,
            reads_served: 0,
            reads_refused: 0,
            impostors: 0,
            impostors_refused: 0,
            failure: Some(Failure {
                checker: "setup".into(),
                what: error,
                trace: Vec::new(),
                status: Vec::new(),
            }),
        },
    }
}

fn outcome_name(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Failed(reason) => format!("failed ({reason})"),
        Outcome::Refused(reason) => format!("refused ({reason})"),
        _ => "done".into(),
    }
}

/// Removes the WAL frontier file of one of the partitions in `storage` (durably), as a lost or
/// corrupted file would: its log becomes history nothing vouches for. Returns its group and
/// directory, `None` when the node has no partition.
fn damage_a_partition(
    storage: &SimStorage,
    draws: &mut Stream,
) -> Option<(u128, std::path::PathBuf)> {
    use iggy_io::{ReadStorage, Storage};
    let root = std::path::Path::new(iggy_recovery::PARTITIONS_DIR);
    let mut keys: Vec<iggy_recovery::PartitionKey> = storage
        .list_dir(root)
        .ok()?
        .into_iter()
        .filter_map(|e| iggy_recovery::PartitionKey::parse(&e.name.to_string_lossy()))
        .collect();
    keys.sort_by_key(|k| k.group_id());
    let key = *keys.get(usize::try_from(draws.below(keys.len() as u64)).ok()?)?;
    let dir = root.join(key.dir_name());
    let frontier = dir.join("frontier");
    if storage.exists(&frontier).ok()? {
        storage.unlink(&frontier).ok()?;
        storage.sync_dir(&dir).ok()?;
    }
    Some((key.group_id(), dir))
}
