//! Three nodes as the server runs them (a tick thread each, storage threads, real files), wired
//! by channels instead of sockets: a client's batches commit, a topic created at run time
//! becomes a group on every node and takes a write, and a clean stop keeps everything for the
//! next boot. Waits are on replies, each with a deadline that fails the test (a hung node is a
//! failure, not a timeout of the run).

use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use iggy_format::operation;
use iggy_io::OsStorage;
use iggy_metadata::codec::Reply;
use iggy_metadata::{Applied, Durability, Op, Retention};
use iggy_node::{GroupKind, Node, NodeConfig};
use iggy_recovery::populate::FirstView;
use iggy_recovery::{BootConfig, PartitionKey};

use iggy_server::bus::{self, BusConfig, BusCounters, BusSender};

mod common;
use common::free_addresses;
use iggy_server::runtime::{Input, Outbox, Runtime, Views};
use iggy_superblock::Identity;
use iggy_vsr::{Config, Message, ReplyStatus, Safeguards};

const CLUSTER: u128 = 7;
const CLIENT: u128 = 0xc1;
const FIRST: PartitionKey = PartitionKey {
    stream: 1,
    topic: 1,
    partition: 1,
};

fn boot_config(incarnation: u64) -> BootConfig {
    BootConfig {
        metadata_file_size_bytes: 256 << 10,
        segment_size_bytes: 256 << 10,
        index_interval_bytes: 4096,
        ..BootConfig::new(incarnation)
    }
}

fn node_config(replica: u8, incarnation: u64) -> NodeConfig {
    node_config_with(replica, incarnation, Config::default())
}

fn node_config_with(replica: u8, incarnation: u64, vsr: Config) -> NodeConfig {
    NodeConfig {
        metadata_vsr: None,
        cluster: CLUSTER,
        replica,
        replicas: 3,
        vsr,
        safeguards: Safeguards::default(),
        checkpoint_bytes: 1 << 20,
        repair_ration: true,
        boot: boot_config(incarnation),
        mirror_metadata: true,
        ring_budget_bytes: 0,
        pipeline_budget_bytes: 0,
    }
}

fn genesis(storage: &OsStorage, replica: u8) {
    genesis_of(storage, replica, 3);
}

/// A node of a cluster of `replicas`: a stream and a topic of one replicated partition.
fn genesis_of(storage: &OsStorage, replica: u8, replicas: u8) {
    let ops = [
        Op::CreateStream { name: "s".into() },
        Op::CreateTopic {
            stream: 1,
            name: "t".into(),
            partitions: 1,
            durability: Durability::Replicated,
            segment_size_bytes: 256 << 10,
            retention: Retention::default(),
            replication_factor: replicas,
        },
    ];
    let identity = Identity {
        cluster: CLUSTER,
        replica,
        replica_count: replicas,
    };
    iggy_recovery::populate::genesis(
        storage,
        identity,
        &boot_config(0),
        &ops,
        &[(FIRST, 256 << 10)],
        FirstView::Zero,
    )
    .expect("genesis");
}

type Inboxes = Arc<Mutex<Vec<Sender<Input<OsStorage>>>>>;

/// Routes replica messages to the peers' inboxes and replies to the test's client.
struct Router {
    peers: Inboxes,
    replies: Sender<Message>,
}

impl Outbox for Router {
    fn to_replica(&mut self, replica: u8, message: Message) {
        let peers = self.peers.lock().expect("peers");
        if let Some(peer) = peers.get(usize::from(replica)) {
            let _ = peer.send(Input::Message(message));
        }
    }
    fn to_client(&mut self, _client: u128, message: Message) {
        let _ = self.replies.send(message);
    }
}

/// Sends replica messages over the TCP bus and replies to the test's client.
struct TcpOutbox {
    bus: BusSender,
    replies: Sender<Message>,
}

impl Outbox for TcpOutbox {
    fn to_replica(&mut self, replica: u8, message: Message) {
        self.bus.send(replica, message);
    }
    fn to_client(&mut self, _client: u128, message: Message) {
        let _ = self.replies.send(message);
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Transport {
    Channels,
    Tcp,
}

struct Cluster {
    runtimes: Vec<Runtime<OsStorage>>,
    views: Vec<Arc<Views<OsStorage>>>,
    inboxes: Inboxes,
    replies: Receiver<Message>,
    reply_tx: Sender<Message>,
    counters: Vec<Arc<BusCounters>>,
    _tokio: Option<tokio::runtime::Runtime>,
}

impl Cluster {
    fn start(storages: &[OsStorage], life: u64, transport: Transport) -> Self {
        Self::start_with(storages, life, transport, &Config::default())
    }

    fn start_with(storages: &[OsStorage], life: u64, transport: Transport, vsr: &Config) -> Self {
        let inboxes: Inboxes = Arc::new(Mutex::new(Vec::new()));
        let (reply_tx, replies) = channel();
        let tokio = (transport == Transport::Tcp).then(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("tokio")
        });
        let addresses = free_addresses(storages.len());
        let mut runtimes = Vec::new();
        let mut all_views = Vec::new();
        let mut counters = Vec::new();
        for (storage, i) in storages.iter().zip(0u8..) {
            let views = Views::new(3);
            all_views.push(views.clone());
            let config = node_config_with(i, u64::from(i) << 48 | life, vsr.clone());
            let (node, _) = Node::boot(storage.clone(), &config).expect("boot");
            let (inbox, inputs) = Runtime::<OsStorage>::inbox_channel();
            inboxes.lock().expect("inboxes").push(inbox.clone());
            let runtime = match &tokio {
                None => {
                    let router = Router {
                        peers: inboxes.clone(),
                        replies: reply_tx.clone(),
                    };
                    Runtime::start(
                        node,
                        storage.clone(),
                        router,
                        2,
                        (inbox, inputs),
                        views.clone(),
                    )
                }
                Some(tokio) => {
                    let config = BusConfig {
                        cluster: CLUSTER,
                        replica: i,
                        peers: addresses.clone(),
                        key: b"test key".to_vec(),
                        tls: None,
                    };
                    let counted = Arc::new(BusCounters::default());
                    counters.push(counted.clone());
                    let deliver = inbox.clone();
                    let (bus, _) = tokio
                        .block_on(bus::start(
                            config,
                            move |_peer, message| {
                                let _ = deliver.send(Input::Message(message));
                            },
                            counted,
                        ))
                        .expect("the bus starts");
                    let outbox = TcpOutbox {
                        bus,
                        replies: reply_tx.clone(),
                    };
                    Runtime::start(
                        node,
                        storage.clone(),
                        outbox,
                        2,
                        (inbox, inputs),
                        views.clone(),
                    )
                }
            }
            .expect("start");
            runtimes.push(runtime);
        }
        Self {
            runtimes,
            views: all_views,
            inboxes,
            replies,
            reply_tx,
            counters,
            _tokio: tokio,
        }
    }

    /// Sends a request to every node (whichever leads the group takes it; the others refuse)
    /// and waits for its committed reply; returns the op.
    fn commit(&self, group: u128, request: u64, operation: u32, body: &[u8]) -> (u64, Vec<u8>) {
        self.commit_to(None, group, request, operation, body)
    }

    /// Sends a batch to node `via` only and waits for its committed reply; returns the op.
    fn commit_via(&self, via: usize, group: u128, request: u64, body: &[u8]) -> u64 {
        self.commit_to(Some(via), group, request, operation::MESSAGES, body)
            .0
    }

    /// Sends a request to node `via` (every node: `None`) and waits for its committed reply.
    fn commit_to(
        &self,
        via: Option<usize>,
        group: u128,
        request: u64,
        operation: u32,
        body: &[u8],
    ) -> (u64, Vec<u8>) {
        let inboxes = self.inboxes.lock().expect("inboxes").clone();
        for (i, inbox) in inboxes.iter().enumerate() {
            if via.is_some_and(|v| v != i) {
                continue;
            }
            inbox
                .send(Input::Message(Message::Request {
                    cluster: CLUSTER,
                    group,
                    client: CLIENT,
                    request,
                    operation,
                    body: body.to_vec(),
                }))
                .expect("a running node");
        }
        loop {
            let reply = self
                .replies
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| {
                    panic!("request {request} to group {group:#x}: no committed reply within 60 s")
                });
            if let Message::Reply {
                request: r,
                status: ReplyStatus::Committed,
                op,
                body,
                ..
            } = reply
                && r == request
            {
                return (op, body);
            }
        }
    }

    /// Stops node `i` cleanly: what is sent to it from now on is lost.
    fn stop_node(&mut self, i: usize) {
        self.runtimes[i].stop_in_place().expect("a clean stop");
    }

    /// Boots node `i` again from `storage` (life `life`) and runs it in place of the stopped one.
    fn restart_node(&mut self, i: usize, storage: &OsStorage, life: u64, vsr: &Config) {
        let index = u8::try_from(i).expect("three nodes");
        let config = node_config_with(index, u64::from(index) << 48 | life, vsr.clone());
        let (node, _) = Node::boot(storage.clone(), &config).expect("boot");
        let (inbox, inputs) = Runtime::<OsStorage>::inbox_channel();
        self.inboxes.lock().expect("inboxes")[i] = inbox.clone();
        let router = Router {
            peers: self.inboxes.clone(),
            replies: self.reply_tx.clone(),
        };
        self.views[i] = Views::new(3);
        self.runtimes[i] = Runtime::start(
            node,
            storage.clone(),
            router,
            2,
            (inbox, inputs),
            self.views[i].clone(),
        )
        .expect("start");
    }

    fn stop(self) {
        for runtime in self.runtimes {
            runtime.stop().expect("a clean stop");
        }
    }
}

fn batch(request: u64, messages: u32) -> Vec<u8> {
    let messages: Vec<iggy_format::batch::NewMessage> = (0..messages)
        .map(|i| iggy_format::batch::NewMessage {
            id: u128::from(request) << 32 | u128::from(i),
            timestamp_delta: i,
            payload: vec![7; 100],
            user_headers: Vec::new(),
        })
        .collect();
    iggy_format::batch::encode(request, &messages).expect("batch")
}

fn partition_id(key: PartitionKey) -> u128 {
    GroupKind::Partition {
        key,
        persisted: false,
    }
    .id()
}

/// Messages each node's partition `key` holds after a boot.
fn offsets_after_boot(storages: &[OsStorage], key: PartitionKey, life: u64) -> Vec<u64> {
    storages
        .iter()
        .zip(0u8..)
        .map(|(storage, i)| {
            let (node, _) = Node::boot(storage.clone(), &node_config(i, u64::from(i) << 48 | life))
                .expect("boot");
            let offset = node.groups[&partition_id(key)]
                .partition()
                .expect("a partition")
                .next_offset();
            node.shutdown().expect("shutdown");
            offset
        })
        .collect()
}

/// Issue #33 on the server's threads: node 2 is stopped while 150 batches commit on nodes 0 and 1
/// (rings of 70 entries), then boots again; node 1 stops, so the next batch commits only once
/// node 2 has caught up through node 0's repair rounds, read from its disk on its read thread.
/// Without `repair-from-disk` node 2 stays behind the ring and that batch never commits (the
/// wait for its reply fails after 60 s).
#[test]
fn a_node_back_from_past_the_ring_catches_up_from_a_peers_disk() {
    let (_dirs, storages) = three_new_nodes();
    let vsr = Config {
        ring_entries_max: 70,
        ..Config::default()
    };
    let group = partition_id(FIRST);
    let mut cluster = Cluster::start_with(&storages, 1, Transport::Channels, &vsr);
    cluster.commit_via(0, group, 1, &batch(1, 4));
    cluster.stop_node(2);
    for request in 2..=151 {
        cluster.commit_via(0, group, request, &batch(request, 4));
    }
    cluster.restart_node(2, &storages[2], 2, &vsr);
    cluster.stop_node(1);
    cluster.commit_via(0, group, 152, &batch(152, 4));
    cluster.restart_node(1, &storages[1], 2, &vsr);
    cluster.stop();
    let offsets = offsets_after_boot(&storages, FIRST, 3);
    assert_eq!(offsets[0], 152 * 4, "{offsets:?}");
    assert_eq!(offsets[2], 152 * 4, "node 2 caught up: {offsets:?}");
}

/// Issue #33's metadata snapshot on the server's threads: node 2 is stopped while the metadata
/// group commits past three checkpoints on nodes 0 and 1 (their logs then start after op 2,880),
/// then boots again; node 1 stops, so the next metadata op commits only once node 2 has pulled
/// node 0's snapshot (served by its read thread, staged and installed on node 2's lane) and
/// repaired the ops after it. Without `snapshot-transfer` node 2 stays behind every peer's log and
/// that op never commits (the wait for its reply fails after 60 s).
#[test]
fn a_metadata_node_back_from_past_three_checkpoints_installs_a_peers_snapshot() {
    let (_dirs, storages) = three_new_nodes();
    let vsr = Config {
        ring_entries_max: 70,
        ..Config::default()
    };
    let metadata = GroupKind::Metadata.id();
    let mut cluster = Cluster::start_with(&storages, 1, Transport::Channels, &vsr);
    let op = |request: u64, op: &Op| (request, iggy_metadata::codec::encode_op(op).expect("an op"));
    let register = |request: u64| {
        op(
            request,
            &Op::RegisterClient {
                client: 0x77,
                session: request,
            },
        )
    };
    let (request, body) = op(
        1,
        &Op::RegisterClient {
            client: CLIENT,
            session: 1,
        },
    );
    let (first, _) = cluster.commit(metadata, request, operation::METADATA, &body);
    // The metadata group starts in view 0: node 0 leads it.
    let (request_no, body) = register(2);
    cluster.commit_to(Some(0), metadata, request_no, operation::METADATA, &body);
    cluster.stop_node(2);
    let target = 3 * iggy_metadata::group::CHECKPOINT_INTERVAL_OPS + 20;
    let mut request = 3;
    loop {
        let (request_no, body) = register(request);
        let (committed, _) =
            cluster.commit_to(Some(0), metadata, request_no, operation::METADATA, &body);
        request += 1;
        if committed >= first + target {
            break;
        }
    }
    cluster.restart_node(2, &storages[2], 2, &vsr);
    cluster.stop_node(1);
    let (request_no, body) = register(request);
    let (last, _) = cluster.commit_to(Some(0), metadata, request_no, operation::METADATA, &body);
    cluster.restart_node(1, &storages[1], 2, &vsr);
    cluster.stop();
    // Node 2's metadata, booted again: the installed checkpoint, and the op that needed it.
    let (node, _) = Node::boot(storages[2].clone(), &node_config(2, 2 << 48 | 3)).expect("boot");
    match &*node.groups[&metadata].store() {
        iggy_node::Store::Metadata(m) => {
            assert!(
                m.vsr_state().checkpoint_op >= 3 * iggy_metadata::group::CHECKPOINT_INTERVAL_OPS,
                "node 2 holds a checkpoint past the three it missed: {:?}",
                m.vsr_state()
            );
            assert_eq!(m.head_op(), last, "node 2 journaled the op that needed it");
        }
        iggy_node::Store::Partition { .. } => unreachable!("the metadata group"),
    }
    node.shutdown().expect("shutdown");
}

#[test]
fn three_threaded_nodes_commit_create_a_topic_at_run_time_and_stop_cleanly() {
    scenario(Transport::Channels);
}

/// The same over the TCP replica bus on loopback.
#[test]
fn the_same_over_the_tcp_replica_bus() {
    let counters = scenario(Transport::Tcp);
    for (i, counted) in counters.iter().enumerate() {
        let frames = counted.frames_in.load(std::sync::atomic::Ordering::Relaxed);
        assert!(frames > 0, "node {i} heard nothing over the bus");
        assert_eq!(
            counted
                .bad_frames
                .load(std::sync::atomic::Ordering::Relaxed),
            0
        );
        assert_eq!(
            counted
                .refused_handshakes
                .load(std::sync::atomic::Ordering::Relaxed),
            0
        );
    }
}

/// Three new nodes' directories (kept while the handles live) and their storages, each with
/// the genesis written.
/// Issue #48: a node that is the whole cluster answers read barriers without asking its
/// replica once the group's replica was normal with its whole log executed
/// (`Views::is_current`), which a partition's is by the time its first committed reply goes
/// out: from then on that one replica executes every write before its reply, and no other
/// replica can acknowledge one. (The nodes of three in `scenario` never do.)
#[test]
fn a_node_that_is_the_whole_cluster_answers_read_barriers_without_a_round() {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage = OsStorage::open(dir.path()).expect("open");
    genesis_of(&storage, 0, 1);
    let config = NodeConfig {
        replicas: 1,
        ..node_config(0, 1)
    };
    let (node, _) = Node::boot(storage.clone(), &config).expect("boot");
    let views = Views::new(1);
    let (inbox, inputs) = Runtime::<OsStorage>::inbox_channel();
    let (reply_tx, replies) = channel();
    let router = Router {
        peers: Arc::new(Mutex::new(vec![inbox.clone()])),
        replies: reply_tx,
    };
    let runtime = Runtime::start(
        node,
        storage.clone(),
        router,
        2,
        (inbox.clone(), inputs),
        views.clone(),
    )
    .expect("start");
    let group = partition_id(FIRST);
    inbox
        .send(Input::Message(Message::Request {
            cluster: CLUSTER,
            group,
            client: CLIENT,
            request: 1,
            operation: operation::MESSAGES,
            body: batch(1, 10),
        }))
        .expect("a running node");
    loop {
        let reply = replies
            .recv_timeout(Duration::from_secs(60))
            .expect("a committed reply within 60 s");
        if let Message::Reply {
            request: 1,
            status: ReplyStatus::Committed,
            ..
        } = reply
        {
            break;
        }
    }
    assert!(views.is_current(group), "the partition's reads still ask");
    // Asked over an inbox whose receiver is gone: only an answer that asks nothing is ready.
    let (unread, _) = Runtime::<OsStorage>::inbox_channel();
    let ready = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio")
        .block_on(views.read_barrier(&Mutex::new(unread), group));
    assert!(ready);
    runtime.stop().expect("a clean stop");
}

fn three_new_nodes() -> (Vec<tempfile::TempDir>, Vec<OsStorage>) {
    let dirs: Vec<tempfile::TempDir> = (0..3)
        .map(|_| tempfile::tempdir().expect("tempdir"))
        .collect();
    let storages: Vec<OsStorage> = dirs
        .iter()
        .map(|d| OsStorage::open(d.path()).expect("open"))
        .collect();
    for (storage, i) in storages.iter().zip(0u8..) {
        genesis(storage, i);
    }
    (dirs, storages)
}

fn scenario(transport: Transport) -> Vec<Arc<BusCounters>> {
    let (_dirs, storages) = three_new_nodes();
    let cluster = Cluster::start(&storages, 1, transport);
    cluster.commit(partition_id(FIRST), 1, operation::MESSAGES, &batch(1, 10));
    cluster.commit(partition_id(FIRST), 2, operation::MESSAGES, &batch(2, 10));

    // A topic of two partitions, created through the metadata group while the nodes run.
    let topic = Op::CreateTopic {
        stream: 1,
        name: "late".into(),
        partitions: 2,
        durability: Durability::Replicated,
        segment_size_bytes: 256 << 10,
        retention: Retention::default(),
        replication_factor: 3,
    };
    let metadata = |request, op: &Op| {
        let (_, reply) = cluster.commit(
            GroupKind::Metadata.id(),
            request,
            operation::METADATA,
            &iggy_metadata::codec::encode_op(op).expect("op"),
        );
        iggy_metadata::codec::decode_reply(&reply).expect("a metadata reply")
    };
    let registered = metadata(
        3,
        &Op::RegisterClient {
            client: CLIENT,
            session: 1,
        },
    );
    assert_eq!(registered, Reply::Applied(Applied::Client));
    assert_eq!(metadata(4, &topic), Reply::Applied(Applied::Topic(2)));
    let late = PartitionKey {
        stream: 1,
        topic: 2,
        partition: 2,
    };
    // The new group takes a write once it has a primary: the request is resent until one
    // commits it (a node that has not hosted the group yet ignores it).
    let mut committed = None;
    for _ in 0..200 {
        for inbox in cluster.inboxes.lock().expect("inboxes").iter() {
            let _ = inbox.send(Input::Message(Message::Request {
                cluster: CLUSTER,
                group: partition_id(late),
                client: CLIENT,
                request: 5,
                operation: operation::MESSAGES,
                body: batch(5, 5),
            }));
        }
        // Every answer to this round (the nodes that do not lead refuse), up to 300 ms.
        while let Ok(reply) = cluster.replies.recv_timeout(Duration::from_millis(300)) {
            if let Message::Reply {
                request: 5,
                status: ReplyStatus::Committed,
                op,
                ..
            } = reply
            {
                committed = Some(op);
                break;
            }
        }
        if committed.is_some() {
            break;
        }
    }
    assert!(
        committed.is_some(),
        "the partition created at run time never committed a write"
    );
    // A node of three always asks its replicas for a read barrier: only a round proves that no
    // other replica acknowledged a write it lacks.
    for views in &cluster.views {
        assert!(!views.metadata_is_current());
        assert!(!views.is_current(partition_id(FIRST)));
        assert!(!views.is_current(partition_id(late)));
    }
    let counters = cluster.counters.clone();
    cluster.stop();

    // A clean stop leaves nothing for boot to do: every node checks clean (its head segments'
    // indexes written, everything published).
    for storage in &storages {
        let report = iggy_recovery::check_with(
            storage,
            std::path::Path::new(""),
            &boot_config(0),
            |_, _| {},
        )
        .expect("check");
        assert!(report.is_clean(), "{report:?}");
    }

    // Everything the clean stop kept: the primary of the first partition (node 0, view 0) holds
    // both batches, a quorum holds the first; the new partition holds its batch on a quorum.
    let first = offsets_after_boot(&storages, FIRST, 2);
    assert_eq!(
        first[0], 20,
        "the primary lost a committed batch: {first:?}"
    );
    assert!(
        first.iter().filter(|o| **o >= 10).count() >= 2,
        "no quorum holds batch 1: {first:?}"
    );
    let late_offsets = offsets_after_boot(&storages, late, 3);
    assert!(
        late_offsets.iter().filter(|o| **o == 5).count() >= 1,
        "{late_offsets:?}"
    );
    counters
}
