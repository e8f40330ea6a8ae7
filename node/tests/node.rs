//! Three nodes of the library driven by the simplest host there is: every message delivered at
//! once, every lane run to its end straight away. What the server's own host does with threads
//! and sockets must come out the same: the groups elect, a client's batch commits on all three,
//! a clean shutdown keeps it, and the nodes boot back to it.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::collections::VecDeque;

use iggy_format::operation;
use iggy_io::{ReadFile, ReadStorage, SimStorage, Storage};
use iggy_metadata::{Durability, Op, Retention};
use iggy_node::{GroupKind, Node, NodeConfig, Unobserved};
use iggy_recovery::populate::FirstView;
use iggy_recovery::{BootConfig, PartitionKey};
use iggy_superblock::Identity;
use iggy_vsr::{Config, Destination, Message, ReplyStatus, Safeguards, Status};

const CLUSTER: u128 = 7;
const KEY: PartitionKey = PartitionKey {
    stream: 1,
    topic: 1,
    partition: 1,
};
const CLIENT: u128 = 0xc1;

fn boot_config(incarnation: u64) -> BootConfig {
    BootConfig {
        metadata_file_size_bytes: 64 << 10,
        segment_size_bytes: 64 << 10,
        index_interval_bytes: 1024,
        commit_from_log: true,
        ..BootConfig::new(incarnation)
    }
}

thread_local! {
    /// The `ring_budget_bytes` [`Host`]'s nodes boot with on this test's thread (0: none).
    static RING_BUDGET: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// The `pipeline_budget_bytes` [`Host`]'s nodes boot with on this test's thread (0: none).
    static PIPELINE_BUDGET: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

fn config(replica: u8, incarnation: u64) -> NodeConfig {
    config_with(replica, incarnation, Config::default())
}

fn config_with(replica: u8, incarnation: u64, vsr: Config) -> NodeConfig {
    NodeConfig {
        metadata_vsr: None,
        cluster: CLUSTER,
        replica,
        replicas: 3,
        vsr,
        safeguards: Safeguards::default(),
        checkpoint_bytes: 256 << 10,
        repair_ration: true,
        boot: boot_config(incarnation),
        mirror_metadata: true,
        ring_budget_bytes: 0,
        pipeline_budget_bytes: 0,
    }
}

/// A new node's disk: the stream, a replicated topic of one partition.
fn genesis(replica: u8) -> SimStorage {
    genesis_with(replica, Retention::default())
}

/// [`genesis`], the topic retaining by `retention`.
fn genesis_with(replica: u8, retention: Retention) -> SimStorage {
    let storage = SimStorage::new(u64::from(replica) + 1);
    genesis_on(&storage, replica, retention);
    storage
}

/// [`genesis_with`] on `storage` (a recording disk, for a crash enumeration).
fn genesis_on(storage: &SimStorage, replica: u8, retention: Retention) {
    genesis_durable(storage, replica, retention, Durability::Replicated);
}

/// [`genesis_on`], the topic of `durability`.
fn genesis_durable(
    storage: &SimStorage,
    replica: u8,
    retention: Retention,
    durability: Durability,
) {
    let ops = [
        Op::CreateStream { name: "s".into() },
        Op::CreateTopic {
            stream: 1,
            name: "t".into(),
            partitions: 1,
            durability,
            segment_size_bytes: 64 << 10,
            retention,
            replication_factor: 3,
        },
    ];
    let identity = Identity {
        cluster: CLUSTER,
        replica,
        replica_count: 3,
    };
    iggy_recovery::populate::genesis(
        storage,
        identity,
        &boot_config(0),
        &ops,
        &[(KEY, 64 << 10)],
        FirstView::Zero,
    )
    .expect("genesis");
}

/// The host: three nodes, a FIFO of messages in flight, the replies clients got.
struct Host {
    nodes: Vec<Node<SimStorage>>,
    storages: Vec<SimStorage>,
    wire: VecDeque<(u8, u128, Message)>,
    replies: Vec<Message>,
    /// A node cut off: nothing reaches it, it is not ticked.
    down: Option<u8>,
    /// Every prepare put on the wire: (from, to, whether a read from disk served it, prepare).
    prepares: Vec<(u8, u8, bool, Message)>,
    /// Why a read from disk shipped nothing, by node.
    refused: Vec<(usize, String)>,
    /// How many snapshot chunks still to arrive with a byte flipped (a peer's rotten disk).
    rot_snapshot_chunks: usize,
    /// Every snapshot chunk put on the wire.
    snapshot_chunks: Vec<Message>,
}

impl Host {
    fn boot(storages: &[SimStorage], life: u64) -> Self {
        Self::boot_with(storages, life, &Config::default())
    }

    fn boot_with(storages: &[SimStorage], life: u64, vsr: &Config) -> Self {
        Self::boot_guarded(storages, life, vsr, Safeguards::default())
    }

    fn boot_guarded(
        storages: &[SimStorage],
        life: u64,
        vsr: &Config,
        safeguards: Safeguards,
    ) -> Self {
        let nodes = storages
            .iter()
            .zip(0u8..)
            .map(|(storage, i)| {
                let config = NodeConfig {
                    safeguards,
                    ring_budget_bytes: RING_BUDGET.get(),
                    pipeline_budget_bytes: PIPELINE_BUDGET.get(),
                    ..config_with(i, u64::from(i) << 48 | life, vsr.clone())
                };
                let (node, _) = Node::boot(storage.clone(), &config).expect("boot");
                node
            })
            .collect();
        let mut host = Self {
            nodes,
            storages: storages.to_vec(),
            wire: VecDeque::new(),
            replies: Vec::new(),
            down: None,
            prepares: Vec::new(),
            refused: Vec::new(),
            rot_snapshot_chunks: 0,
            snapshot_chunks: Vec::new(),
        };
        host.settle();
        host
    }

    /// Puts `sends` of node `i`'s `group` on the wire.
    fn send(&mut self, i: usize, group: u128, sends: Vec<(Destination, Message)>, read: bool) {
        for (to, mut message) in sends {
            if let Message::SnapshotChunk { .. } = &message {
                self.snapshot_chunks.push(message.clone());
            }
            if let Message::SnapshotChunk { bytes, .. } = &mut message
                && self.rot_snapshot_chunks > 0
                && let Some(byte) = bytes.last_mut()
            {
                self.rot_snapshot_chunks -= 1;
                *byte ^= 0x40;
            }
            match to {
                Destination::Replica(r) => {
                    if let Message::Prepare { .. } = message {
                        let from = u8::try_from(i).expect("three nodes");
                        self.prepares.push((from, r, read, message.clone()));
                    }
                    self.wire.push_back((r, group, message));
                }
                Destination::Client(_) => self.replies.push(message),
            }
        }
    }

    /// Drains every group's effects, runs every lane to its end, delivers every message, until
    /// nothing moves.
    fn settle(&mut self) {
        for _ in 0..10_000 {
            let mut moved = false;
            for i in 0..self.nodes.len() {
                let groups: Vec<u128> = self.nodes[i].groups.keys().copied().collect();
                for group in groups {
                    loop {
                        let drained = self.nodes[i].drain(group);
                        moved |= !drained.sends.is_empty();
                        self.send(i, group, drained.sends, false);
                        let Some(ran) = self.nodes[i].run_lane_head(group, 0, &mut Unobserved)
                        else {
                            break;
                        };
                        moved = true;
                        assert_eq!(ran.failed, None, "node {i}: {} failed", ran.name);
                    }
                }
                for retired in self.nodes[i].take_retired() {
                    iggy_node::retire(&self.storages[i], retired).expect("retire");
                }
                for read in self.nodes[i].take_reads() {
                    moved = true;
                    let served = read.run();
                    self.nodes[i].served();
                    if let Some(reason) = served.refused {
                        self.refused.push((i, reason));
                    }
                    self.send(i, served.group, served.sends, true);
                }
            }
            while let Some((to, group, message)) = self.wire.pop_front() {
                moved = true;
                if self.down != Some(to) {
                    self.nodes[usize::from(to)].deliver(group, message);
                }
            }
            if !moved {
                return;
            }
        }
        panic!("the cluster never settled");
    }

    /// Ticks every group of every node `ticks` times, settling after each.
    fn tick(&mut self, ticks: u32) {
        for _ in 0..ticks {
            for node in &mut self.nodes {
                if self.down == Some(node.index) {
                    continue;
                }
                let groups: Vec<u128> = node.groups.keys().copied().collect();
                node.ration_repair();
                node.maintain(0);
                for group in groups {
                    node.tick(group);
                }
            }
            self.settle();
        }
    }

    /// Puts client `CLIENT`'s batch `request` of `messages` messages for `group` on the wire to
    /// node `to`.
    fn send_batch(&mut self, to: u8, group: u128, request: u64, messages: u32) {
        self.wire
            .push_back((to, group, batch_request(group, request, messages)));
    }

    fn partition(&self, node: usize) -> &iggy_node::Group<SimStorage> {
        let id = GroupKind::Partition {
            key: KEY,
            persisted: false,
        }
        .id();
        &self.nodes[node].groups[&id]
    }
}

/// Client `CLIENT`'s request `request` for `group`: a batch of `messages` messages.
fn batch_request(group: u128, request: u64, messages: u32) -> Message {
    Message::Request {
        cluster: CLUSTER,
        group,
        client: CLIENT,
        request,
        operation: operation::MESSAGES,
        body: batch(request, messages),
    }
}

/// The id of the replicated partition `KEY` every test node hosts.
fn the_partition() -> u128 {
    GroupKind::Partition {
        key: KEY,
        persisted: false,
    }
    .id()
}

fn batch(request: u64, messages: u32) -> Vec<u8> {
    let messages: Vec<iggy_format::batch::NewMessage> = (0..messages)
        .map(|i| iggy_format::batch::NewMessage {
            id: u128::from(request) << 32 | u128::from(i),
            timestamp_delta: i,
            payload: vec![u8::try_from(i % 200).unwrap_or(0); 100],
            user_headers: Vec::new(),
        })
        .collect();
    iggy_format::batch::encode(request, &messages).expect("batch")
}

#[test]
fn three_nodes_commit_a_batch_that_survives_a_clean_restart() {
    let storages: Vec<SimStorage> = (0..3).map(genesis).collect();
    let mut host = Host::boot(&storages, 1);
    for node in &host.nodes {
        assert_eq!(node.groups.len(), 2, "the metadata and one partition");
    }
    let partition = GroupKind::Partition {
        key: KEY,
        persisted: false,
    }
    .id();
    for node in &host.nodes {
        assert_eq!(node.leader_of(partition), Some(0), "view 0's primary leads");
        assert_eq!(node.leader_of(GroupKind::Metadata.id()), Some(0));
    }

    host.send_batch(0, partition, 1, 10);
    host.settle();
    // The backups learn the commit from the primary's next heartbeat.
    host.tick(600);

    let reply = host
        .replies
        .iter()
        .find_map(|m| match m {
            Message::Reply {
                request: 1,
                status,
                op,
                ..
            } => Some((*status, *op)),
            _ => None,
        })
        .expect("the client got a reply");
    assert_eq!(reply.0, ReplyStatus::Committed);
    let op = reply.1;
    for i in 0..3 {
        let group = host.partition(i);
        assert!(
            group.replica.commit_min() >= op,
            "node {i} executed through {} < op {op}",
            group.replica.commit_min()
        );
        let partition = group.partition().expect("a partition");
        assert_eq!(
            partition.next_offset(),
            10,
            "node {i} holds the 10 messages"
        );
    }

    for node in host.nodes.drain(..) {
        node.shutdown().expect("clean shutdown");
    }
    // The shutdown synced what every group appended: the power may go now.
    for storage in &storages {
        storage.power_loss();
    }

    // Boot back: every node holds the batch and recovers to normal status.
    let mut host = Host::boot(&storages, 2);
    host.tick(600);
    for i in 0..3 {
        let group = host.partition(i);
        assert_eq!(group.replica.status(), Status::Normal, "node {i}");
        assert!(group.replica.commit_min() >= op, "node {i} lost the commit");
        let partition = group.partition().expect("a partition");
        assert_eq!(partition.next_offset(), 10, "node {i} lost messages");
    }
}

/// Node 0's lane of `partition` run by hand until nothing moves: a prepare keeps its write-out
/// aside in `write_outs`, a commit runs in memory (`Job::try_run_inline`, counted in `inline`),
/// or with `busy` is tried while its store is locked and then run as a storage thread would;
/// every other node and job as the simulator runs them.
fn run_by_hand(
    host: &mut Host,
    partition: u128,
    busy: bool,
    write_outs: &mut Vec<iggy_node::WriteOut<SimStorage>>,
    inline: &mut usize,
) {
    for _ in 0..1_000 {
        let mut moved = false;
        for i in 0..3 {
            let groups: Vec<u128> = host.nodes[i].groups.keys().copied().collect();
            for group in groups {
                loop {
                    let drained = host.nodes[i].drain(group);
                    moved |= !drained.sends.is_empty();
                    host.send(i, group, drained.sends, false);
                    let Some(job) = host.nodes[i].take_job_beside(group, &mut Unobserved) else {
                        break;
                    };
                    moved = true;
                    let done = if i == 0 && group == partition && job.name() == "prepare" {
                        let (done, write_out) = job.run_replying_first(0);
                        write_outs.push(write_out.expect("a prepare's write-out"));
                        done
                    } else if i == 0 && group == partition && job.name() == "commit" {
                        if busy {
                            let store = host.nodes[0].groups[&partition].store();
                            let Err(job) = Box::new(job).try_run_inline(0) else {
                                panic!("a busy store sends the commit elsewhere");
                            };
                            drop(store);
                            job.run(0)
                        } else {
                            *inline += 1;
                            Box::new(job)
                                .try_run_inline(0)
                                .unwrap_or_else(|_| panic!("a commit in memory runs inline"))
                        }
                    } else {
                        job.run(0)
                    };
                    let ran = host.nodes[i]
                        .complete(done, &mut Unobserved)
                        .expect("hosted");
                    assert_eq!(ran.failed, None, "node {i}: {}", ran.name);
                }
            }
        }
        while let Some((to, group, message)) = host.wire.pop_front() {
            moved = true;
            host.nodes[usize::from(to)].deliver(group, message);
        }
        if !moved {
            return;
        }
    }
    panic!("the cluster never settled");
}

/// The server's hand-offs (`Job::run_replying_first`, `Job::try_run_inline`): a partition's
/// prepare completes with its entry still buffered and the write of it to the segment files
/// handed back; the commit then runs in memory (`try_run_inline`), the client is answered and
/// the entry is served before that write ran; a commit whose store is busy comes back to go to
/// a storage thread; and a write-out that fails names the segment file and poisons the log, so
/// the partition's next effect fails too (the server then halts the node).
#[test]
fn a_commit_runs_in_memory_while_its_entries_wait_to_be_written_out() {
    let storages: Vec<SimStorage> = (0..3).map(genesis).collect();
    let mut host = Host::boot(&storages, 1);
    let partition = the_partition();
    let buffered = |host: &Host| {
        host.partition(0)
            .partition()
            .expect("a partition")
            .wal()
            .buffered_bytes()
    };
    let mut write_outs = Vec::new();
    let mut inline = 0;
    host.send_batch(0, partition, 1, 10);
    run_by_hand(&mut host, partition, false, &mut write_outs, &mut inline);
    assert_eq!(inline, 1, "batch 1's commit ran in memory");
    let committed = |host: &Host, request: u64| {
        host.replies.iter().any(|m| {
            matches!(m, Message::Reply { request: r, status: ReplyStatus::Committed, .. } if *r == request)
        })
    };
    assert!(committed(&host, 1), "the client is answered");
    assert!(
        buffered(&host) > 0,
        "the entry is still in the log's buffer: the commit wrote nothing"
    );
    let group = host.partition(0);
    let read = group
        .partition()
        .expect("a partition")
        .read_through(0, 1 << 20, group.replica.commit_min())
        .expect("read");
    assert_eq!(
        read.iter().map(|b| b.header.message_count).sum::<u32>(),
        10,
        "a poll reads the committed batch before the write-out (it writes the buffer itself)"
    );
    assert_eq!(buffered(&host), 0);
    for write_out in write_outs.drain(..) {
        write_out.run().expect("nothing left to write");
    }

    // Batch 2: its commit finds the store busy (a retention pass holds it) and comes back.
    host.send_batch(0, partition, 2, 10);
    run_by_hand(&mut host, partition, true, &mut write_outs, &mut inline);
    assert!(committed(&host, 2));
    assert!(
        buffered(&host) > 0,
        "a commit run as on a storage thread writes nothing out either"
    );
    for write_out in write_outs.drain(..) {
        write_out.run().expect("batch 2's write-out");
    }
    assert_eq!(buffered(&host), 0);

    // Batch 3: its write-out fails; the log is poisoned, and batch 4's prepare fails.
    host.send_batch(0, partition, 3, 10);
    run_by_hand(&mut host, partition, false, &mut write_outs, &mut inline);
    assert!(committed(&host, 3));
    let segment = host
        .partition(0)
        .partition()
        .expect("a partition")
        .wal()
        .files()[0]
        .path
        .clone();
    storages[0]
        .arm(&segment, iggy_io::Fault::WriteError)
        .expect("arm");
    let failure = write_outs
        .pop()
        .expect("batch 3's write-out")
        .run()
        .expect_err("the armed write fails");
    assert!(
        failure.contains(&segment.display().to_string()),
        "the failure names the file: {failure}"
    );
    let node = &mut host.nodes[0];
    node.deliver(partition, batch_request(partition, 4, 10));
    let mut failed = None;
    for _ in 0..10 {
        let _ = node.drain(partition);
        let Some(job) = node.take_job_beside(partition, &mut Unobserved) else {
            break;
        };
        let ran = node.complete(job.run(0), &mut Unobserved).expect("hosted");
        if ran.failed.is_some() {
            failed = ran.failed;
            break;
        }
    }
    assert!(failed.is_some(), "the poisoned log fails the next effect");
}

/// `Node::take_job_beside`: a replicated partition's publication runs beside its lane. The
/// prepare behind it is handed out, carried out and completed while the publication has not
/// run; a second publication arriving meanwhile waits for the first and is completed by the
/// one after it; and the published head covers what was appended before each.
#[test]
fn a_publication_beside_the_lane_holds_no_prepare_behind_it() {
    let storages: Vec<SimStorage> = (0..3).map(genesis).collect();
    let mut host = Host::boot(&storages, 1);
    let partition = the_partition();
    host.send_batch(0, partition, 1, 10);
    host.settle();
    let op1 = host.partition(0).replica.commit_min();
    assert!(op1 >= 1, "batch 1 committed");
    let published = |host: &Host| {
        host.partition(0)
            .partition()
            .expect("a partition")
            .wal()
            .published()
            .head_op
    };
    let before = published(&host);
    assert!(before < op1, "nothing asked batch 1 to be published yet");

    // The lane: the flush's publication, then batch 2's prepare.
    let node = &mut host.nodes[0];
    node.publish_now(partition).expect("hosted");
    node.deliver(partition, batch_request(partition, 2, 10));
    let drained = node.drain(partition);
    let publication = node
        .take_job_beside(partition, &mut Unobserved)
        .expect("the lane's head");
    assert!(
        publication.is_beside(),
        "{}: not beside the lane",
        publication.name()
    );
    let prepare = node
        .take_job_beside(partition, &mut Unobserved)
        .expect("the prepare is handed out while the publication is in flight");
    assert!(!prepare.is_beside());
    assert_eq!(prepare.name(), "prepare");
    let ran = node
        .complete(prepare.run(0), &mut Unobserved)
        .expect("hosted");
    assert_eq!(ran.failed, None);

    // A second publication while the first is in flight: queued, not handed out; the lane's
    // other effects (the acknowledgment bound's superblock write) still go.
    node.publish_now(partition).expect("hosted");
    let mut sends = drained.sends;
    loop {
        sends.extend(node.drain(partition).sends);
        let Some(job) = node.take_job_beside(partition, &mut Unobserved) else {
            break;
        };
        assert!(
            !job.is_beside() && job.name() != "publish",
            "{}",
            job.name()
        );
        let ran = node.complete(job.run(0), &mut Unobserved).expect("hosted");
        assert_eq!(ran.failed, None);
    }
    assert!(node.take_queued_publication(partition).is_none());
    assert!(
        node.publishing_beside(partition),
        "the second publication waits"
    );

    // The first ends: it covers batch 1; the queued one goes next and covers batch 2.
    let ran = node
        .complete(publication.run(0), &mut Unobserved)
        .expect("hosted");
    assert!(ran.beside && ran.failed.is_none());
    assert!(published(&host) >= op1, "the publication covers batch 1");
    let node = &mut host.nodes[0];
    let queued = node
        .take_queued_publication(partition)
        .expect("the queued publication");
    assert!(queued.is_beside());
    let ran = node
        .complete(queued.run(0), &mut Unobserved)
        .expect("hosted");
    assert_eq!(ran.failed, None);
    assert!(!host.nodes[0].publishing_beside(partition));
    assert!(
        published(&host) > op1,
        "the second publication covers batch 2's prepare"
    );

    // A batch past `checkpoint_bytes` (256 KiB here): the lane journals it without
    // publishing; the checkpoint is then wanted beside the lane, with no effect to complete.
    let before_checkpoint = published(&host);
    let node = &mut host.nodes[0];
    node.deliver(partition, batch_request(partition, 3, 2_500));
    loop {
        sends.extend(node.drain(partition).sends);
        let Some(job) = node.take_job_beside(partition, &mut Unobserved) else {
            break;
        };
        assert!(!job.is_beside(), "{}", job.name());
        let ran = node.complete(job.run(0), &mut Unobserved).expect("hosted");
        assert_eq!(ran.failed, None);
    }
    assert_eq!(
        published(&host),
        before_checkpoint,
        "the lane published the checkpoint itself"
    );
    let node = &mut host.nodes[0];
    let checkpoint = node
        .take_queued_publication(partition)
        .expect("the checkpoint, beside the lane");
    let ran = node
        .complete(checkpoint.run(0), &mut Unobserved)
        .expect("hosted");
    assert_eq!(ran.failed, None);
    assert!(
        published(&host) > before_checkpoint,
        "the checkpoint covers batch 3"
    );

    // The rest of the lane and the cluster go on as before.
    host.send(0, partition, sends, false);
    host.settle();
    assert!(
        host.partition(0).replica.commit_min() > op1 + 1,
        "batches 2 and 3 commit"
    );
}

/// A primary whose disk has no room for the partition's next segment refuses the batch that
/// needed it (`NotAccepted`: nothing appended) and goes on: its replica stays in normal status,
/// and once there is room the same request commits on every node.
#[test]
fn a_primary_with_no_room_for_the_next_segment_refuses_the_batch_and_goes_on() {
    let storages: Vec<SimStorage> = (0..3).map(genesis).collect();
    let mut host = Host::boot(&storages, 1);
    let partition = the_partition();
    // Node 0 (the primary) has 32 KiB more than it uses: less than one 64 KiB segment.
    storages[0].set_space_limit(Some(storages[0].used_bytes() + (32 << 10)));
    let status_of = |host: &Host, request: u64| {
        host.replies.iter().rev().find_map(|m| match m {
            Message::Reply {
                request: r, status, ..
            } if *r == request => Some(*status),
            _ => None,
        })
    };
    let mut refused = None;
    for request in 1..=60 {
        host.send_batch(0, partition, request, 20);
        host.settle();
        match status_of(&host, request) {
            Some(ReplyStatus::Committed) => {}
            Some(ReplyStatus::NotAccepted) => {
                refused = Some(request);
                break;
            }
            other => panic!("request {request}: {other:?}"),
        }
    }
    let refused = refused.expect("a batch met the full disk");
    assert!(
        refused > 1,
        "the first segment took batches before it filled"
    );
    let group = host.partition(0);
    assert_eq!(
        group.replica.status(),
        Status::Normal,
        "the primary goes on"
    );
    assert_eq!(group.replica.commit_min(), refused - 1);

    storages[0].set_space_limit(None);
    host.send_batch(0, partition, refused, 20);
    host.settle();
    assert_eq!(status_of(&host, refused), Some(ReplyStatus::Committed));
    host.tick(600);
    for i in 0..3 {
        let group = host.partition(i);
        assert!(group.replica.commit_min() >= refused, "node {i}");
        assert_eq!(
            group.partition().expect("a partition").next_offset(),
            refused * 20,
            "node {i} holds every committed batch once"
        );
    }
}

/// Issue #46: a primary whose backups are gone holds what it admitted in memory until it
/// commits, so the node admits requests only while its groups' pipelines hold less than
/// `pipeline_budget_bytes` of bodies; past it a request is refused `NotAccepted` before it is
/// prepared. Once the backups are back the admitted batches commit, the refused ones are
/// sent again and commit, and every node holds each once. Without the budget all ten batches
/// are admitted (the pipeline holds 64) and the node holds all of them.
#[test]
fn a_primary_admits_requests_only_within_the_nodes_pipeline_budget() {
    let storages: Vec<SimStorage> = (0..3).map(genesis).collect();
    let one = u64::try_from(batch(1, 20).len()).expect("a batch's size");
    // Room for three batches.
    PIPELINE_BUDGET.set(3 * one + one / 2);
    let mut host = Host::boot(&storages, 1);
    PIPELINE_BUDGET.set(0);
    let partition = the_partition();
    for request in 1..=10 {
        host.send_batch(0, partition, request, 20);
    }
    // Only node 0 hears anything: what it sends its backups is lost.
    while let Some((to, group, message)) = host.wire.pop_front() {
        assert_eq!(to, 0);
        host.nodes[0].deliver(group, message);
        loop {
            let drained = host.nodes[0].drain(group);
            for (to, message) in drained.sends {
                if let Destination::Client(_) = to {
                    host.replies.push(message);
                }
            }
            if host.nodes[0]
                .run_lane_head(group, 0, &mut Unobserved)
                .is_none()
            {
                break;
            }
        }
    }
    let refused: Vec<u64> = host
        .replies
        .iter()
        .filter_map(|m| match m {
            Message::Reply {
                request,
                status: ReplyStatus::NotAccepted,
                ..
            } => Some(*request),
            _ => None,
        })
        .collect();
    assert_eq!(
        refused,
        (4..=10).collect::<Vec<u64>>(),
        "{:?}",
        host.replies
    );
    assert_eq!(host.nodes[0].pipeline_bytes(), 3 * one);
    assert_eq!(
        host.partition(0)
            .replica
            .counters()
            .get("request_pipeline_bytes")
            .copied(),
        Some(7)
    );
    // The backups hear the primary again: what it admitted commits, and so does what it
    // refused, sent again.
    host.replies.clear();
    host.tick(100);
    for request in 4..=10 {
        host.send_batch(0, partition, request, 20);
        host.settle();
    }
    host.tick(100);
    let committed: std::collections::BTreeSet<u64> = host
        .replies
        .iter()
        .filter_map(|m| match m {
            Message::Reply {
                request,
                status: ReplyStatus::Committed,
                ..
            } => Some(*request),
            _ => None,
        })
        .collect();
    assert_eq!(committed, (1..=10).collect());
    assert_eq!(host.nodes[0].pipeline_bytes(), 0);
    for i in 0..3 {
        assert_eq!(
            host.partition(i)
                .partition()
                .expect("a partition")
                .next_offset(),
            200,
            "node {i} holds every committed batch once"
        );
    }
}

/// A backup whose disk is fuller than its primary's: storage refuses to journal the prepare
/// that needs the partition's next segment. The backup goes on in normal status, acknowledges
/// nothing past it, and the other two commit every batch; once there is room it journals what
/// it missed and holds every committed batch once, as its peers do.
#[test]
fn a_backup_with_no_room_to_journal_goes_on_and_catches_up_once_there_is_room() {
    let storages: Vec<SimStorage> = (0..3).map(genesis).collect();
    let mut host = Host::boot(&storages, 1);
    let partition = the_partition();
    // Node 2 (a backup) has 32 KiB more than it uses: less than one 64 KiB segment.
    storages[2].set_space_limit(Some(storages[2].used_bytes() + (32 << 10)));
    let batches = 60;
    for request in 1..=batches {
        host.send_batch(0, partition, request, 20);
        host.settle();
        let committed = host.replies.iter().any(|m| {
            matches!(m, Message::Reply { request: r, status: ReplyStatus::Committed, .. } if *r == request)
        });
        assert!(committed, "request {request} commits on nodes 0 and 1");
    }
    let backup = host.partition(2);
    assert_eq!(
        backup.replica.status(),
        Status::Normal,
        "the backup goes on"
    );
    let refused = backup.replica.counters().get("journal_refused").copied();
    assert!(refused.unwrap_or(0) > 0, "the backup's journal was refused");
    let held = backup.partition().expect("a partition").next_offset();
    assert!(held < batches * 20, "node 2 held only what fit: {held}");
    assert!(host.partition(0).replica.commit_min() >= batches);

    storages[2].set_space_limit(None);
    host.tick(600);
    for i in 0..3 {
        let group = host.partition(i);
        assert_eq!(group.replica.status(), Status::Normal, "node {i}");
        assert!(group.replica.commit_min() >= batches, "node {i}");
        assert_eq!(
            group.partition().expect("a partition").next_offset(),
            batches * 20,
            "node {i} holds every committed batch once"
        );
    }
}

/// A backup whose metadata log must start its next file on a full disk: storage refuses the
/// journal, the backup goes on in normal status (its metadata replica and the node), the other
/// two commit every op, and once there is room it journals and executes the ops it missed.
#[test]
fn a_metadata_backup_with_no_room_for_its_next_log_file_goes_on() {
    let storages: Vec<SimStorage> = (0..3).map(genesis).collect();
    let mut host = Host::boot(&storages, 1);
    let metadata = GroupKind::Metadata.id();
    let primary = host.nodes[0].leader_of(metadata).expect("a primary");
    let backup = (0..3u8).find(|i| *i != primary).expect("a backup");
    let b = usize::from(backup);
    // Less than one 64 KiB log file left on the backup.
    storages[b].set_space_limit(Some(storages[b].used_bytes() + (16 << 10)));
    metadata_request(
        &mut host,
        1,
        &Op::RegisterClient {
            client: CLIENT,
            session: 1,
        },
    );
    let before = host.nodes[0]
        .metadata_state()
        .expect("a state")
        .streams
        .len();
    // Streams with long names: some 300 bytes an op, so the log needs its next file.
    let streams = 400u64;
    for request in 2..=streams + 1 {
        let op = Op::CreateStream {
            name: format!("stream-{request:0>200}"),
        };
        host.wire.push_back((
            primary,
            metadata,
            Message::Request {
                cluster: CLUSTER,
                group: metadata,
                client: CLIENT,
                request,
                operation: operation::METADATA,
                body: iggy_metadata::codec::encode_op(&op).expect("op"),
            },
        ));
        host.settle();
    }
    fn group(host: &Host, i: usize) -> &iggy_node::Group<SimStorage> {
        &host.nodes[i].groups[&GroupKind::Metadata.id()]
    }
    let refused = group(&host, b)
        .replica
        .counters()
        .get("journal_refused")
        .copied();
    assert!(refused.unwrap_or(0) > 0, "the backup's journal was refused");
    assert_eq!(group(&host, b).replica.status(), Status::Normal);
    let committed = group(&host, usize::from(primary)).replica.commit_min();
    assert!(
        committed >= streams,
        "the primary committed every op: {committed}"
    );
    assert!(group(&host, b).replica.commit_min() < committed);

    storages[b].set_space_limit(None);
    host.tick(600);
    for i in 0..3 {
        assert_eq!(group(&host, i).replica.status(), Status::Normal, "node {i}");
        assert_eq!(group(&host, i).replica.commit_min(), committed, "node {i}");
        let state = host.nodes[i].metadata_state().expect("a state");
        assert_eq!(state.streams.len() - before, 400, "node {i}");
    }
}

#[test]
fn a_second_node_on_the_same_directory_is_refused() {
    let storage = genesis(0);
    let (node, _) = Node::boot(storage.clone(), &config(0, 1)).expect("boot");
    let Err(refused) = Node::boot(storage, &config(0, 2)) else {
        panic!("a second node booted while the first held the lock");
    };
    assert!(refused.contains("node 0"), "{refused}");
    drop(node);
}

/// The metadata request `op` of `client` numbered `request`, to the metadata group's primary.
fn metadata_request(host: &mut Host, request: u64, op: &Op) {
    let primary = host.nodes[0]
        .leader_of(GroupKind::Metadata.id())
        .expect("the metadata group has a primary");
    host.wire.push_back((
        primary,
        GroupKind::Metadata.id(),
        Message::Request {
            cluster: CLUSTER,
            group: GroupKind::Metadata.id(),
            client: CLIENT,
            request,
            operation: operation::METADATA,
            body: iggy_metadata::codec::encode_op(op).expect("op"),
        },
    ));
    host.settle();
    host.tick(600);
}

fn partition_id(stream: u32, topic: u32, partition: u32) -> u128 {
    GroupKind::Partition {
        key: PartitionKey {
            stream,
            topic,
            partition,
        },
        persisted: false,
    }
    .id()
}

/// Groups follow the committed metadata at run time: a topic created through the metadata group
/// becomes a group on every node (in the view whose primary the metadata chose), takes writes,
/// and survives a restart; deleting it drops the groups and removes their directories, and the
/// nodes boot back clean.
#[test]
fn a_topic_created_and_deleted_at_run_time_comes_and_goes_on_every_node() {
    let storages: Vec<SimStorage> = (0..3).map(genesis).collect();
    let mut host = Host::boot(&storages, 1);
    metadata_request(
        &mut host,
        1,
        &Op::RegisterClient {
            client: CLIENT,
            session: 1,
        },
    );
    metadata_request(
        &mut host,
        2,
        &Op::CreateTopic {
            stream: 1,
            name: "late".into(),
            partitions: 3,
            durability: Durability::Persisted,
            segment_size_bytes: 64 << 10,
            retention: Retention::default(),
            replication_factor: 3,
        },
    );
    let leaders: Vec<u8> = {
        let state = host.nodes[0].metadata().expect("mirrored");
        state.streams[&1].topics[&2]
            .partitions
            .iter()
            .map(|p| p.leader)
            .collect()
    };
    for (i, node) in host.nodes.iter().enumerate() {
        assert_eq!(node.groups.len(), 5, "node {i}: metadata, 1.1.1, 1.2.1-3");
        for (p, leader) in (1..=3).zip(&leaders) {
            let group = &node.groups[&partition_id(1, 2, p)];
            assert_eq!(
                group.kind,
                GroupKind::Partition {
                    key: PartitionKey {
                        stream: 1,
                        topic: 2,
                        partition: p
                    },
                    persisted: true
                }
            );
            assert_eq!(
                group.replica.leader(),
                Some(*leader),
                "node {i} partition 1.2.{p}"
            );
        }
    }
    // A write to the new partition commits on all three.
    let target = partition_id(1, 2, 2);
    host.send_batch(leaders[1], target, 3, 5);
    host.settle();
    host.tick(600);
    for (i, node) in host.nodes.iter().enumerate() {
        let partition = node.groups[&target].partition().expect("a partition");
        assert_eq!(partition.next_offset(), 5, "node {i}");
    }
    for node in host.nodes.drain(..) {
        node.shutdown().expect("clean shutdown");
    }
    let mut host = Host::boot(&storages, 2);
    host.tick(600);
    for (i, node) in host.nodes.iter().enumerate() {
        assert_eq!(node.groups.len(), 5, "node {i} after the restart");
        let partition = node.groups[&target].partition().expect("a partition");
        assert_eq!(partition.next_offset(), 5, "node {i} after the restart");
    }

    metadata_request(
        &mut host,
        4,
        &Op::DeleteTopic {
            stream: 1,
            topic: 2,
        },
    );
    for (i, node) in host.nodes.iter().enumerate() {
        assert_eq!(
            node.groups.len(),
            2,
            "node {i}: the topic's groups are gone"
        );
        for p in 1..=3 {
            assert!(
                !storages[i]
                    .exists(format!("partitions/1.2.{p}"))
                    .expect("exists"),
                "node {i}: partitions/1.2.{p} was not removed"
            );
        }
    }
    for node in host.nodes.drain(..) {
        node.shutdown().expect("clean shutdown");
    }
    for (i, storage) in storages.iter().enumerate() {
        let report =
            iggy_recovery::check(storage, std::path::Path::new(""), |_, _| {}).expect("check");
        assert_eq!(report.exit_code(), 0, "node {i}: {}", report.render());
    }
}

/// Issue #33: a peer serves a repair round below its ring from its log on disk, byte for byte
/// what it prepared, and refuses a range whose entry rotted on disk rather than ship it. A
/// backup cut off while 40 batches commit (the rings hold 8) catches up through reads from
/// disk, and ends with the primary's log.
#[test]
fn a_peer_serves_repair_below_its_ring_from_disk_byte_for_byte() {
    let storages: Vec<SimStorage> = (0..3).map(genesis).collect();
    let vsr = Config {
        pipeline_max: 4,
        ring_entries_max: 8,
        ..Config::default()
    };
    let mut host = Host::boot_with(&storages, 1, &vsr);
    let partition = GroupKind::Partition {
        key: KEY,
        persisted: false,
    }
    .id();
    host.down = Some(2);
    for request in 1..=40 {
        host.send_batch(0, partition, request, 5);
        host.settle();
    }
    assert_eq!(host.partition(0).partition().unwrap().next_offset(), 200);
    assert_eq!(host.partition(2).partition().unwrap().next_offset(), 0);
    // What the primary prepared, as it put it on the wire the first time.
    let prepared: std::collections::BTreeMap<u64, Vec<u8>> = host
        .prepares
        .iter()
        .filter(|(from, _, read, _)| *from == 0 && !*read)
        .filter_map(|(_, _, _, m)| match m {
            Message::Prepare { header, .. } => Some((header.op, m.encode())),
            _ => None,
        })
        .collect();
    let head = host.partition(0).replica.head();
    assert!(prepared.len() as u64 >= head - 1, "ops 1..={head} prepared");

    host.down = None;
    host.tick(1_000);
    let behind = &host.partition(2).replica;
    assert_eq!(behind.commit_min(), head, "{}", behind.describe());
    assert_eq!(host.partition(2).partition().unwrap().next_offset(), 200);
    let from_disk: Vec<&Message> = host
        .prepares
        .iter()
        .filter(|(from, to, read, _)| *from != 2 && *to == 2 && *read)
        .map(|(_, _, _, m)| m)
        .collect();
    assert!(
        from_disk.len() >= 30,
        "{} prepares read from disk for the backup",
        from_disk.len()
    );
    let mut compared = 0;
    for message in &from_disk {
        let Message::Prepare { header, .. } = message else {
            unreachable!()
        };
        if let Some(original) = prepared.get(&header.op) {
            assert_eq!(
                &message.encode(),
                original,
                "op {} as first prepared",
                header.op
            );
            compared += 1;
        }
    }
    assert!(compared >= 30, "{compared} of {} compared", from_disk.len());
    let logs: Vec<Vec<iggy_wal::Entry>> = (0..3)
        .map(|i| {
            let wal = host.partition(i).partition().unwrap().wal();
            wal.read(wal.first_op(), head).expect("read the log")
        })
        .collect();
    assert_eq!(logs[2], logs[0], "the backup's log is the primary's");

    // A byte of op 5's body rots on both peers' disks: a round asking for it ships nothing.
    for (i, storage) in storages.iter().enumerate().take(2) {
        let wal = host.partition(i).partition().unwrap().wal();
        let at = wal.locate(5).expect("op 5 is on disk");
        let file = wal
            .files()
            .into_iter()
            .find(|f| f.key == at.key)
            .expect("its file");
        storage
            .rot(&file.path, at.offset + at.size - 1, 0x40)
            .expect("rot");
    }
    let before = host.prepares.len();
    let view = host.partition(0).replica.view();
    host.wire.push_back((
        0,
        partition,
        Message::RequestPrepares {
            from: iggy_vsr::From {
                cluster: CLUSTER,
                group: partition,
                replica: 2,
                view,
            },
            first: 1,
            last: 10,
        },
    ));
    host.settle();
    assert!(
        host.prepares[before..].iter().all(|(_, _, read, _)| !read),
        "nothing of a range with a rotten entry is shipped"
    );
    let (node, reason) = host.refused.last().expect("the read refused");
    assert_eq!(*node, 0);
    assert!(reason.contains("ops 1..=10"), "{reason}");
}

/// The metadata state a node's group holds, as its encoding's checksum.
fn metadata_checksum(node: &Node<SimStorage>) -> (u64, u128) {
    let group = &node.groups[&GroupKind::Metadata.id()];
    match &*group.store() {
        iggy_node::Store::Metadata(metadata) => (
            metadata.applied_op(),
            iggy_format::checksum(&iggy_metadata::codec::encode(metadata.state())),
        ),
        iggy_node::Store::Partition { .. } => unreachable!("the metadata group"),
    }
}

/// Issue #33: a metadata replica that missed three checkpoints restarts behind both peers' logs
/// (they dropped what their snapshots hold). Repair's answers tell it so; it pulls a peer's
/// snapshot, refuses the first one (its chunk arrives rotten), installs the next, hosts the partition a topic created while it was down, repairs the ops after the
/// checkpoint and reaches the primary's state; the install survives its next restart.
#[test]
fn a_metadata_replica_that_missed_three_checkpoints_installs_a_peers_snapshot() {
    let storages: Vec<SimStorage> = (0..3).map(genesis).collect();
    let vsr = Config {
        ring_entries_max: 80,
        ..Config::default()
    };
    let mut host = Host::boot_with(&storages, 1, &vsr);
    let metadata = GroupKind::Metadata.id();
    let primary = host.nodes[0].leader_of(metadata).expect("a primary");
    let down: u8 = (primary + 1) % 3;
    let peer: u8 = 3 - primary - down;
    host.down = Some(down);
    let before_down = metadata_checksum(&host.nodes[usize::from(down)]).0;
    let request = |host: &mut Host, request: u64, op: &Op| {
        host.wire.push_back((
            primary,
            metadata,
            Message::Request {
                cluster: CLUSTER,
                group: metadata,
                client: CLIENT,
                request,
                operation: operation::METADATA,
                body: iggy_metadata::codec::encode_op(op).expect("op"),
            },
        ));
        host.settle();
    };
    request(
        &mut host,
        1,
        &Op::RegisterClient {
            client: CLIENT,
            session: 1,
        },
    );
    request(
        &mut host,
        2,
        &Op::CreateTopic {
            stream: 1,
            name: "late".into(),
            partitions: 1,
            durability: Durability::Replicated,
            segment_size_bytes: 64 << 10,
            retention: Retention::default(),
            replication_factor: 3,
        },
    );
    assert!(
        host.nodes[usize::from(primary)]
            .groups
            .contains_key(&partition_id(1, 2, 1)),
        "the topic was created"
    );
    let checkpoints = 3 * iggy_metadata::group::CHECKPOINT_INTERVAL_OPS;
    let mut next = 3;
    while metadata_checksum(&host.nodes[usize::from(primary)]).0 < checkpoints + 40 {
        request(
            &mut host,
            next,
            &Op::RegisterClient {
                client: 0x77,
                session: next,
            },
        );
        next += 1;
        assert!(next < 4_000, "the primary stopped committing");
    }
    host.tick(60);
    let (primary_op, _) = metadata_checksum(&host.nodes[usize::from(primary)]);
    for i in [primary, peer] {
        let group = &host.nodes[usize::from(i)].groups[&metadata];
        if let iggy_node::Store::Metadata(m) = &*group.store() {
            assert!(
                m.vsr_state().checkpoint_op >= checkpoints,
                "node {i} took three checkpoints"
            );
            assert!(
                m.wal().first_op() > before_down + 1,
                "node {i} dropped the ops"
            );
        }
    }

    // The replica restarts (a kill: no clean shutdown) and comes back.
    let index = usize::from(down);
    drop(host.nodes.remove(index));
    let config = config_with(down, u64::from(down) << 48 | 2, vsr.clone());
    let (node, _) = Node::boot(storages[index].clone(), &config).expect("boot");
    host.nodes.insert(index, node);
    // The first transfer's chunk (the whole snapshot) arrives rotten.
    host.rot_snapshot_chunks = 1;
    host.down = None;
    let mut ticks = 0;
    while metadata_checksum(&host.nodes[index]).0 < primary_op {
        host.tick(10);
        ticks += 10;
        let replica = &host.nodes[index].groups[&metadata].replica;
        assert!(ticks < 6_000, "not caught up: {}", replica.describe());
    }
    let counters = host.nodes[index].groups[&metadata]
        .replica
        .counters()
        .clone();
    assert!(
        counters.get("snapshot_installed") >= Some(&1),
        "{counters:?}"
    );
    assert_eq!(
        metadata_checksum(&host.nodes[index]),
        metadata_checksum(&host.nodes[usize::from(primary)]),
        "the installed replica reached the primary's state"
    );
    assert!(
        host.nodes[index]
            .groups
            .contains_key(&partition_id(1, 2, 1)),
        "the partition the topic created while it was down is hosted"
    );
    // One more op commits on all three: the installed log chains on from the checkpoint.
    request(
        &mut host,
        next,
        &Op::RegisterClient {
            client: 0x77,
            session: next,
        },
    );
    host.tick(60);
    let after = metadata_checksum(&host.nodes[usize::from(primary)]);
    assert_eq!(after.0, primary_op + 1);
    assert_eq!(metadata_checksum(&host.nodes[index]), after);

    // The rotten snapshot was refused whole, and the transfer started over.
    assert_eq!(
        counters.get("snapshot_install_refused"),
        Some(&1),
        "{counters:?}"
    );
    assert!(
        counters.get("snapshot_transfer_started") >= Some(&2),
        "{counters:?}"
    );

    // The install is durable: a restart boots to it.
    drop(host.nodes.remove(index));
    let config = config_with(down, u64::from(down) << 48 | 3, vsr.clone());
    let (node, _) = Node::boot(storages[index].clone(), &config).expect("boot");
    // Boot executes through the commit point its log proves (the last op's commit is only
    // known to it once the primary's next message says so): the state at or past the install.
    assert!(metadata_checksum(&node).0 >= primary_op);
    assert_eq!(node.groups[&metadata].replica.head(), after.0);
    assert!(node.groups.contains_key(&partition_id(1, 2, 1)));
}

/// A peer with no snapshot yet answers a snapshot request saying so (a zero `SnapshotChunk`:
/// its log starts at op 1, so the asker repairs instead); once it has one, with the chunk of its
/// live snapshot, naming it (checkpoint op and checksum, trailer, length: what the asker
/// verifies the whole against), byte for byte the file's; a request for an offset that is no
/// chunk's is refused and counted.
#[test]
fn a_peer_answers_a_snapshot_request_with_its_live_snapshot() {
    let storages: Vec<SimStorage> = (0..3).map(genesis).collect();
    let mut host = Host::boot(&storages, 1);
    let metadata = GroupKind::Metadata.id();
    let ask = |host: &mut Host, offset: u64| {
        let view = host.nodes[0].groups[&metadata].replica.view();
        host.wire.push_back((
            0,
            metadata,
            Message::RequestSnapshot {
                from: iggy_vsr::From {
                    cluster: CLUSTER,
                    group: metadata,
                    replica: 2,
                    view,
                },
                offset,
            },
        ));
        host.down = Some(2);
        host.settle();
        host.down = None;
    };
    // The genesis took no checkpoint: no snapshot.
    ask(&mut host, 0);
    assert_eq!(host.snapshot_chunks.len(), 1);
    assert!(
        matches!(&host.snapshot_chunks[0], Message::SnapshotChunk { snapshot, offset: 0, bytes, .. }
            if *snapshot == iggy_vsr::SnapshotRef::default() && bytes.is_empty()),
        "{:?}",
        host.snapshot_chunks[0].summary()
    );
    let (id, checksum) = match &mut *host.nodes[0].groups[&metadata].store() {
        iggy_node::Store::Metadata(m) => {
            m.checkpoint().expect("checkpoint");
            m.snapshot().expect("a snapshot now")
        }
        iggy_node::Store::Partition { .. } => unreachable!(),
    };
    ask(&mut host, 0);
    assert_eq!(host.snapshot_chunks.len(), 2);
    let Message::SnapshotChunk {
        snapshot,
        offset,
        bytes,
        ..
    } = &host.snapshot_chunks[1]
    else {
        unreachable!()
    };
    assert_eq!(*offset, 0);
    assert_eq!(
        (
            snapshot.op,
            snapshot.checksum,
            snapshot.trailer,
            snapshot.length
        ),
        (id.checkpoint_op, checksum, id.trailer, id.length)
    );
    let file = storages[0]
        .open_read("metadata/snapshot.bin")
        .unwrap()
        .read_all()
        .unwrap();
    assert_eq!(bytes, &file, "the chunk is the live file's bytes");
    ask(&mut host, 7);
    assert_eq!(
        host.snapshot_chunks.len(),
        2,
        "an offset that is no chunk's is not served"
    );
    let counters = host.nodes[0].groups[&metadata].replica.counters();
    assert_eq!(counters.get("snapshot_request_refused"), Some(&1));
}

/// What `iggy-fsck` reports on the node in `storage` (its check, with the nodes' boot
/// configuration).
fn fsck_check(storage: &SimStorage) -> Result<iggy_recovery::Report, iggy_recovery::RecoveryError> {
    iggy_recovery::check_with(
        &iggy_io::ReadOnly::new(storage.clone()),
        std::path::Path::new(""),
        &boot_config(0),
        |_, _| {},
    )
}

/// What a partition's log holds from op `first` through its head, entry by entry.
fn log_from(host: &Host, node: usize, first: u64) -> Vec<iggy_wal::Entry> {
    let wal = host.partition(node).partition().expect("a partition").wal();
    wal.read(first, wal.head().0).expect("read the log")
}

/// Four segments of 64 KiB kept at most.
const KEEP_FOUR_SEGMENTS: Retention = Retention {
    max_age_seconds: 0,
    max_bytes: 256 << 10,
};

/// A ring of 8 prepares: a replica down for a few hundred ops comes back below it.
fn small_ring() -> Config {
    Config {
        pipeline_max: 4,
        ring_entries_max: 8,
        ..Config::default()
    }
}

/// Boots three nodes on `storages` (their topic retaining [`KEEP_FOUR_SEGMENTS`]), commits
/// `shared` batches on all three, then cuts node 2 off while about 800 KiB in all commit on the
/// others (twelve segments, of which retention keeps four; consumer 7's offset stored at 1234
/// halfway), until both peers' logs start past node 2's head. Returns the host, node 2 still
/// cut off, and node 0's first op.
fn down_past_retention(storages: &[SimStorage], vsr: &Config, shared: u64) -> (Host, u64) {
    let mut host = Host::boot_with(storages, 1, vsr);
    let partition = partition_id(1, 1, 1);
    let offset_store = |request: u64, offset: u64| {
        let mut body = vec![0u8; 16];
        body[0] = iggy_segments::offsets::ConsumerKind::Consumer.code();
        body[4..8].copy_from_slice(&7u32.to_le_bytes());
        body[8..16].copy_from_slice(&offset.to_le_bytes());
        Message::Request {
            cluster: CLUSTER,
            group: partition,
            client: CLIENT,
            request,
            operation: operation::CONSUMER_OFFSET,
            body,
        }
    };
    for request in 1..=900 {
        if request == shared + 1 {
            host.tick(10);
            host.down = Some(2);
        }
        if request == 450 {
            host.wire
                .push_back((0, partition, offset_store(request, 1234)));
        } else {
            host.send_batch(0, partition, request, 5);
        }
        host.settle();
        if request % 100 == 0 {
            host.tick(100);
        }
    }
    host.tick(200);
    let first = |host: &Host, i: usize| {
        host.partition(i)
            .partition()
            .expect("a partition")
            .wal()
            .first_op()
    };
    let peer_first = first(&host, 0);
    assert!(
        peer_first > 300,
        "retention deleted the oldest ops: {peer_first}"
    );
    assert!(first(&host, 1) > 300);
    let behind_head = host.partition(2).replica.head();
    assert!(behind_head + 1 < peer_first, "the gap is gone on the peers");
    (host, peer_first)
}

/// Issue #33, item 2: a replica down while retention deleted, on both peers, every op it lacks
/// (their logs start past its head) learns so from repair's answers (`RangeEvicted`), pulls a
/// peer's image of its settled segments and consumer offsets, installs it, repairs the ops after
/// it and holds what the peers hold, entry for entry; the install survives its next restart.
/// Without the `snapshot-transfer` safeguard it stays behind for good.
#[test]
fn a_replica_behind_what_retention_left_installs_a_peers_committed_segments() {
    let storages: Vec<SimStorage> = (0..3)
        .map(|r| genesis_with(r, KEEP_FOUR_SEGMENTS))
        .collect();
    let vsr = small_ring();
    let (mut host, peer_first) = down_past_retention(&storages, &vsr, 0);
    let partition = partition_id(1, 1, 1);
    host.down = None;
    let head = host.partition(0).replica.head();
    let mut ticks = 0;
    while host.partition(2).replica.commit_min() < head {
        host.tick(10);
        ticks += 10;
        assert!(
            ticks < 3_000,
            "not caught up: {}",
            host.partition(2).replica.describe()
        );
    }
    let counters = host.partition(2).replica.counters().clone();
    assert_eq!(counters.get("snapshot_installed"), Some(&1), "{counters:?}");
    assert_eq!(
        counters.get("snapshot_transfer_started"),
        Some(&1),
        "one transfer, never started over: {counters:?}"
    );
    let installed = host.partition(2).partition().expect("a partition");
    let start = installed.wal().first_op();
    assert!(
        start >= peer_first,
        "the installed log starts where a peer's did"
    );
    assert_eq!(log_from(&host, 2, start), log_from(&host, 0, start));
    assert_eq!(
        installed.next_offset(),
        host.partition(0)
            .partition()
            .expect("a partition")
            .next_offset()
    );
    let stored = installed
        .offsets()
        .get(iggy_segments::offsets::ConsumerKind::Consumer, 7)
        .expect("offset")
        .map(|o| o.offset);
    assert_eq!(
        stored,
        Some(1234),
        "the consumer offset came with the image"
    );
    assert!(
        !storages[2]
            .exists(installed.dir().join(iggy_node::image::STAGING_FILE))
            .expect("exists"),
        "the staging file is gone"
    );

    // One more batch commits on all three: the installed log chains on.
    host.send_batch(0, partition, 901, 5);
    host.settle();
    host.tick(200);
    let head = host.partition(0).replica.head();
    assert_eq!(host.partition(2).replica.commit_min(), head);
    assert_eq!(log_from(&host, 2, start), log_from(&host, 0, start));

    // The install is durable: a restart (a kill) boots to it, keeping what it published (a
    // replicated partition publishes at its checkpoint: boot may discard a tail past it).
    let published = host
        .partition(2)
        .partition()
        .unwrap()
        .wal()
        .published()
        .head_op;
    let expected = log_from(&host, 0, start);
    drop(host.nodes.remove(2));
    let (node, _) = Node::boot(storages[2].clone(), &config_with(2, 2 << 48 | 2, vsr))
        .expect("boot after the install");
    let booted = node.groups[&partition]
        .partition()
        .expect("a partition")
        .wal();
    assert_eq!(booted.first_op(), start);
    assert!(booted.head().0 >= published && published > start);
    let entries = booted.read(start, booted.head().0).expect("read");
    assert_eq!(entries[..], expected[..entries.len()]);
}

/// Issue #33's crash enumeration of a partition transfer's receiver (`docs/testing.md`): node 2
/// of the case above records its disk from genesis, and every crash state from its heal until
/// it caught up (the repair answered `RangeEvicted`, the chunks staged, the install, the
/// reboot of the installed partition and the repair after it) is one `iggy-fsck` calls
/// consistent, from which the node boots to the old log or the installed one, never a mix:
/// - a log starting at the old first op is a prefix of the old log, and is booted only before
///   the install returned;
/// - any other log starts at the installed log's first op, holds the peer's entries from there
///   and reaches the image's last op (the transfer's op);
/// - no staging file and no retired tree is left in the partition's directory, and the booted
///   disk checks clean.
///
/// 16 states a crash point (2 torn), both directory orders; `NODE_CRASH_FULL=1` takes up to 64
/// (8 torn).
#[test]
fn every_crash_state_of_a_partition_transfer_boots_to_the_old_log_or_the_installed_one() {
    let recording = SimStorage::recording(5);
    genesis_on(&recording, 2, KEEP_FOUR_SEGMENTS);
    let storages = vec![
        genesis_with(0, KEEP_FOUR_SEGMENTS),
        genesis_with(1, KEEP_FOUR_SEGMENTS),
        recording.clone(),
    ];
    let vsr = small_ring();
    let (mut host, _) = down_past_retention(&storages, &vsr, 40);
    let old_first = host.partition(2).partition().unwrap().wal().first_op();
    let old_log = log_from(&host, 2, old_first);
    assert!(old_log.len() >= 30, "node 2 held {} ops", old_log.len());
    recording.mark("heal");
    host.down = None;
    let head = host.partition(0).replica.head();
    let installed = |host: &Host| {
        host.partition(2)
            .replica
            .counters()
            .get("snapshot_installed")
            .copied()
            .unwrap_or(0)
    };
    let mut ticks = 0;
    while host.partition(2).replica.commit_min() < head {
        let before = installed(&host);
        host.tick(1);
        if installed(&host) > before {
            recording.mark("installed");
        }
        ticks += 1;
        assert!(ticks < 3_000, "{}", host.partition(2).replica.describe());
    }
    recording.mark("caught-up");
    assert_eq!(installed(&host), 1);
    let trace = recording.trace();
    let new_first = host.partition(2).partition().unwrap().wal().first_op();
    assert!(new_first > old_log.last().unwrap().header.op + 1);
    let peer_log = log_from(&host, 0, new_first);
    let image_op = host
        .snapshot_chunks
        .iter()
        .find_map(|m| match m {
            Message::SnapshotChunk { snapshot, .. } => Some(snapshot.op),
            _ => None,
        })
        .expect("a chunk was shipped");
    let partition = partition_id(1, 1, 1);
    drop(host);

    let full = std::env::var_os("NODE_CRASH_FULL").is_some();
    let (mut old_boots, mut new_boots, mut after_install) = (0, 0, 0);
    for dir_order in [iggy_io::DirOrder::Ordered, iggy_io::DirOrder::Unordered] {
        let enumeration = iggy_io::EnumerationConfig {
            seed: 9,
            max_states_per_point: if full { 64 } else { 16 },
            torn_states_per_point: if full { 8 } else { 2 },
            max_points: None,
            start_at_mark: Some("heal".into()),
            dir_order,
        };
        let counts = iggy_io::enumerate(&trace, &enumeration, |crash| {
            let checked = fsck_check(&crash.storage).map_err(|e| format!("check failed: {e}"))?;
            if checked.exit_code() > 1 {
                return Err(format!("not consistent:\n{}", checked.render()));
            }
            let config = config_with(2, 2 << 48 | 9, vsr.clone());
            let (node, _) = Node::boot(crash.storage.clone(), &config)
                .map_err(|e| format!("boot failed: {e}"))?;
            let booted = node.groups[&partition].partition().ok_or("no partition")?;
            let dir = booted.dir().to_path_buf();
            let wal = booted.wal();
            let (first, last) = (wal.first_op(), wal.head().0);
            let entries = if last < first {
                Vec::new()
            } else {
                wal.read(first, last).map_err(|e| e.to_string())?
            };
            let was_installed = crash.marks.iter().any(|m| m == "installed");
            after_install += usize::from(was_installed);
            if first == old_first {
                if was_installed {
                    return Err("the old log booted after the install returned".into());
                }
                if old_log.get(..entries.len()) != Some(&entries[..]) {
                    return Err(format!("ops {first}..={last} are not the old log's"));
                }
                old_boots += 1;
            } else {
                if first != new_first || last < image_op {
                    return Err(format!(
                        "a log of ops {first}..={last}: neither the old log (from \
                         {old_first}) nor the installed one ({new_first}..={image_op})"
                    ));
                }
                if peer_log.get(..entries.len()) != Some(&entries[..]) {
                    return Err(format!("ops {first}..={last} are not the peer's"));
                }
                new_boots += 1;
            }
            drop(node);
            let left: Vec<String> = crash
                .storage
                .list_dir(&dir)
                .map_err(|e| e.to_string())?
                .into_iter()
                .map(|e| e.name.to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".staging") || n == iggy_segments::install::RETIRED_DIR)
                .collect();
            if !left.is_empty() {
                return Err(format!("left after boot in {}: {left:?}", dir.display()));
            }
            let after = fsck_check(&crash.storage).map_err(|e| e.to_string())?;
            if after.exit_code() != 0 {
                return Err(format!("after boot:\n{}", after.render()));
            }
            Ok(())
        })
        .unwrap_or_else(|failure| panic!("{failure}"));
        eprintln!("{dir_order:?}: {counts:?}");
    }
    eprintln!(
        "booted to the old log {old_boots} times, to the installed one {new_boots} \
         ({after_install} of them after the install returned)"
    );
    assert!(old_boots > 0 && new_boots > after_install && after_install > 0);
}

/// What [`damaged_partition_while_a_peer_dies`] saw.
struct Rebuild {
    host: Host,
    storages: Vec<SimStorage>,
    /// The head of the ops only nodes 0 and 2 acknowledged (node 1 was cut off).
    acknowledged_head: u64,
    /// Node 2's boot report over its damaged partition.
    report: iggy_recovery::Report,
    /// The entries node 0 acknowledged, from op 1 to `acknowledged_head`.
    acknowledged: Vec<iggy_wal::Entry>,
    /// Node 2's disk's operations until its boot returned, when it was recording.
    trace: Vec<iggy_io::TraceOp>,
}

/// Three nodes of a persisted topic (each backup acknowledges what its log holds durably)
/// commit 300 batches; node 1 is cut off while 20 more commit on nodes 0 and 2 alone; node 2
/// stops and a sealed segment file of its partition is lost; node 0 dies as node 2 boots again,
/// and node 1 is back. Nodes 1 and 2 are then alone for 30 s.
/// `recording`: node 2's disk records its operations (for a crash enumeration), with the mark
/// `rebuild` before its second boot.
fn damaged_partition_while_a_peer_dies(safeguards: Safeguards, recording: bool) -> Rebuild {
    let storages: Vec<SimStorage> = (0..3u8)
        .map(|r| {
            let storage = if recording && r == 2 {
                SimStorage::recording(13)
            } else {
                SimStorage::new(u64::from(r) + 11)
            };
            genesis_durable(&storage, r, Retention::default(), Durability::Persisted);
            storage
        })
        .collect();
    let vsr = small_ring();
    let mut host = Host::boot_guarded(&storages, 1, &vsr, safeguards);
    let partition = partition_id(1, 1, 1);
    for request in 1..=320 {
        if request == 301 {
            host.tick(10);
            host.down = Some(1);
        }
        host.send_batch(0, partition, request, 5);
        host.settle();
        if request % 100 == 0 {
            host.tick(100);
        }
    }
    let acknowledged_head = host.partition(0).replica.head();
    assert_eq!(host.partition(2).replica.head(), acknowledged_head);
    assert!(host.partition(1).replica.head() + 20 <= acknowledged_head);
    let acknowledged = log_from(&host, 0, 1);
    // Node 2 stops; the second of its segment files (sealed, published) is lost.
    let files = host.partition(2).partition().unwrap().wal().files();
    assert!(files.len() >= 4, "{} segments", files.len());
    let lost = files[1].path.clone();
    drop(host.nodes.remove(2));
    storages[2].unlink(&lost).expect("lose a segment");
    storages[2]
        .sync_dir(lost.parent().expect("its directory"))
        .expect("lost for good");
    // Node 0 dies as node 2 boots; node 1 is back.
    host.down = Some(0);
    let config = NodeConfig {
        safeguards,
        ..config_with(2, 2 << 48 | 2, vsr)
    };
    storages[2].mark("rebuild");
    let (node, report) = Node::boot(storages[2].clone(), &config).expect("boots, rebuilding");
    let trace = if recording {
        storages[2].trace()
    } else {
        Vec::new()
    };
    host.nodes.push(node);
    host.tick(3_000);
    Rebuild {
        host,
        storages,
        acknowledged_head,
        report,
        acknowledged,
        trace,
    }
}

/// Issue #33, the receiver's own log damaged: a node whose partition lost published data (a
/// segment file gone) boots anyway. Its boot moves the partition's files into `.damaged-*` and
/// creates it anew, empty, in its old views, behind a rebuild marker (`rebuild-from-peers` in
/// the report), and its replica catches up from the peers' disks. Until then its empty log
/// stands for no view-change quorum, though its topic is persisted (nothing forgotten on an
/// ordinary restart): node 1 and the rebuilt node 2, alone after node 0 died, start no view
/// without the 20 batches only nodes 0 and 2 acknowledged. Once node 0 is back every node holds
/// them, and a later boot of node 2 rebuilds nothing.
#[test]
fn a_damaged_partition_is_rebuilt_from_its_peers_and_stands_for_no_quorum_until_it_has() {
    let Rebuild {
        mut host,
        storages,
        acknowledged_head,
        report,
        acknowledged,
        ..
    } = damaged_partition_while_a_peer_dies(Safeguards::default(), false);
    let rebuilt: Vec<_> = report
        .findings
        .iter()
        .filter(|f| f.action == iggy_recovery::Action::RebuildFromPeers)
        .collect();
    assert_eq!(rebuilt.len(), 1, "{}", report.render());
    assert_eq!(rebuilt[0].group, "partition 1.1.1");
    let dir = host.partition(2).partition().unwrap().dir().to_path_buf();
    let names: Vec<String> = storages[2]
        .list_dir(&dir)
        .unwrap()
        .into_iter()
        .map(|e| e.name.to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().any(|n| n == iggy_segments::rebuilt::FILE_NAME));
    let damaged = names
        .iter()
        .find(|n| n.starts_with(iggy_segments::rebuilt::DAMAGED_PREFIX))
        .expect("the damaged files are kept");
    assert!(
        storages[2].list_dir(dir.join(damaged)).unwrap().len() >= 4,
        "the superblock and the segments that were left"
    );
    // Alone, nodes 1 and 2 start no view: node 2's log stands for no quorum.
    for i in [1, 2] {
        let replica = &host.partition(i).replica;
        assert_ne!(replica.status(), Status::Normal, "{}", replica.describe());
        assert!(replica.head() < acknowledged_head);
    }
    let waits = host
        .partition(1)
        .replica
        .counters()
        .get("merge_waits_for_a_holder")
        .copied();
    let waits2 = host
        .partition(2)
        .replica
        .counters()
        .get("merge_waits_for_a_holder")
        .copied();
    assert!(
        waits.unwrap_or(0) + waits2.unwrap_or(0) > 0,
        "the new primary waited for a log that holds its acknowledgments"
    );

    // Node 0 is back: the view starts with every acknowledged batch, and node 2 catches up.
    host.down = None;
    let mut ticks = 0;
    while (0..3).any(|i| host.partition(i).replica.commit_min() < acknowledged_head) {
        host.tick(10);
        ticks += 10;
        assert!(ticks < 5_000, "{}", host.partition(2).replica.describe());
    }
    for i in 0..3 {
        assert_eq!(
            log_from(&host, i, 1)[..acknowledged.len()],
            acknowledged[..],
            "node {i} holds every acknowledged batch"
        );
    }
    // A later boot of node 2 opens the rebuilt partition: nothing is rebuilt again.
    drop(host.nodes.remove(2));
    let (node, report) = Node::boot(
        storages[2].clone(),
        &config_with(2, 2 << 48 | 3, small_ring()),
    )
    .expect("boots");
    drop(node);
    assert!(
        report
            .findings
            .iter()
            .all(|f| f.action != iggy_recovery::Action::RebuildFromPeers),
        "{}",
        report.render()
    );
    // `iggy-fsck`'s check: clean, and it names the damaged files kept for the operator.
    let check = |storage: &SimStorage| fsck_check(storage).unwrap();
    let checked = check(&storages[2]);
    assert_eq!(checked.exit_code(), 0, "{}", checked.render());
    let note = checked
        .findings
        .iter()
        .find(|f| f.kind == "rebuilt-partition")
        .expect("the rebuild is reported");
    assert!(note.what.contains(damaged.as_str()), "{}", note.what);
    // A rotten marker: the views the replica forgot are unknown, so the check refuses and the
    // node does not start.
    storages[2]
        .rot(dir.join(iggy_segments::rebuilt::FILE_NAME), 13, 0x01)
        .unwrap();
    let checked = check(&storages[2]);
    assert_eq!(checked.exit_code(), 4, "{}", checked.render());
    let refused = Node::boot(
        storages[2].clone(),
        &config_with(2, 2 << 48 | 4, small_ring()),
    )
    .err()
    .expect("refused");
    assert!(refused.contains("rebuild marker"), "{refused}");
}

/// The same with the `forgotten-acknowledgments` safeguard off: the rebuilt node's empty log
/// counts in node 1's view change, the view starts without the 20 batches nodes 0 and 2
/// acknowledged, and the next batch takes the first one's op.
#[test]
fn without_forgotten_acknowledgments_a_rebuilt_partition_loses_acknowledged_batches() {
    let safeguards = Safeguards {
        forgotten_acknowledgments: false,
        ..Safeguards::default()
    };
    let Rebuild {
        mut host,
        acknowledged_head,
        acknowledged,
        ..
    } = damaged_partition_while_a_peer_dies(safeguards, false);
    let started = (1..3).any(|i| host.partition(i).replica.status() == Status::Normal);
    assert!(started, "a view started on nodes 1 and 2");
    assert!(host.partition(1).replica.head() < acknowledged_head);
    // The next batch takes the place of an acknowledged one in the view's log.
    host.down = None;
    host.send_batch(1, partition_id(1, 1, 1), 321, 5);
    host.settle();
    host.tick(500);
    let next = acknowledged_head - 19;
    let view_log = log_from(&host, 1, next);
    assert_ne!(
        view_log.first(),
        acknowledged.get(usize::try_from(next - 1).unwrap()),
        "op {next} is still the acknowledged batch"
    );
}

/// Every crash state of a damaged partition's rebuild (the marker's write, the superblock moved
/// aside, the other files after it, the new partition's creation, and the rest of the node's
/// boot) boots again (`Node::boot`) to a rebuilt partition: empty, behind the same marker
/// (the old replica's view and log_view), the old superblock kept in a `.damaged-*`
/// directory, and the node checks clean with `iggy-fsck`'s check afterwards. Both directory
/// orders, 16 states a crash point (2 torn); `NODE_CRASH_FULL=1` up to 64 (8 torn).
#[test]
fn every_crash_state_of_a_rebuild_boots_to_the_same_rebuilt_partition() {
    let Rebuild {
        host,
        storages,
        trace,
        ..
    } = damaged_partition_while_a_peer_dies(Safeguards::default(), true);
    let dir = host.partition(2).partition().unwrap().dir().to_path_buf();
    let expected = iggy_segments::rebuilt::read(&storages[2], &dir)
        .unwrap()
        .expect("a marker");
    let partition = partition_id(1, 1, 1);
    drop(host);
    let full = std::env::var_os("NODE_CRASH_FULL").is_some();
    let mut rebuilt_again = 0;
    for dir_order in [iggy_io::DirOrder::Ordered, iggy_io::DirOrder::Unordered] {
        let enumeration = iggy_io::EnumerationConfig {
            seed: 11,
            max_states_per_point: if full { 64 } else { 16 },
            torn_states_per_point: if full { 8 } else { 2 },
            max_points: None,
            start_at_mark: Some("rebuild".into()),
            dir_order,
        };
        let counts = iggy_io::enumerate(&trace, &enumeration, |crash| {
            let config = config_with(2, 2 << 48 | 7, small_ring());
            let (node, report) = Node::boot(crash.storage.clone(), &config)
                .map_err(|e| format!("boot failed: {e}"))?;
            rebuilt_again += usize::from(
                report
                    .findings
                    .iter()
                    .any(|f| f.action == iggy_recovery::Action::RebuildFromPeers),
            );
            let booted = node.groups[&partition].partition().ok_or("no partition")?;
            let wal = booted.wal();
            if wal.head().0 != 0 || booted.next_offset() != 0 {
                return Err(format!("not empty: head {}", wal.head().0));
            }
            let marker =
                iggy_segments::rebuilt::read(&crash.storage, &dir).map_err(|e| e.to_string())?;
            if marker != Some(expected) {
                return Err(format!("marker {marker:?}, expected {expected:?}"));
            }
            let vsr = booted.vsr_state();
            if (vsr.view, vsr.log_view) < (expected.view, expected.forgotten_through) {
                return Err(format!("views went back: {vsr:?}"));
            }
            drop(node);
            let kept = crash
                .storage
                .list_dir(&dir)
                .map_err(|e| e.to_string())?
                .into_iter()
                .filter(|e| {
                    e.name
                        .to_string_lossy()
                        .starts_with(iggy_segments::rebuilt::DAMAGED_PREFIX)
                })
                .any(|e| {
                    crash
                        .storage
                        .exists(dir.join(&e.name).join(iggy_superblock::FILE_NAME))
                        .unwrap_or(false)
                });
            if !kept {
                return Err("the old superblock is not kept".into());
            }
            let after = fsck_check(&crash.storage).map_err(|e| e.to_string())?;
            if after.exit_code() != 0 {
                return Err(format!("after boot:\n{}", after.render()));
            }
            Ok(())
        })
        .unwrap_or_else(|failure| panic!("{failure}"));
        eprintln!("{dir_order:?}: {counts:?}");
    }
    eprintln!("{rebuilt_again} crash states rebuilt again");
    assert!(rebuilt_again > 0);
}

/// Issue #46: a committed topic whose partitions one node's full disk cannot create leaves that
/// node running every other group, with the partitions unavailable there (and why), while the
/// other two serve them; a restart on the still-full disk boots without them instead of
/// failing; once space is freed the node creates them, recovering, and catches up from its
/// peers. Without it the metadata commit failed on node 2 (`settle`'s lane check fires) and the
/// committed op failed its boot again.
#[test]
fn a_partition_a_full_disk_cannot_create_is_unavailable_on_that_node_only() {
    let storages: Vec<SimStorage> = (0..3).map(genesis).collect();
    let mut host = Host::boot(&storages, 1);
    metadata_request(
        &mut host,
        1,
        &Op::RegisterClient {
            client: CLIENT,
            session: 1,
        },
    );
    // Node 2's disk holds 32 KiB more than it uses: less than one 64 KiB segment.
    let full = || storages[2].set_space_limit(Some(storages[2].used_bytes() + (32 << 10)));
    full();
    metadata_request(
        &mut host,
        2,
        &Op::CreateTopic {
            stream: 1,
            name: "late".into(),
            partitions: 2,
            durability: Durability::Replicated,
            segment_size_bytes: 64 << 10,
            retention: Retention::default(),
            replication_factor: 3,
        },
    );
    let created = [
        PartitionKey {
            stream: 1,
            topic: 2,
            partition: 1,
        },
        PartitionKey {
            stream: 1,
            topic: 2,
            partition: 2,
        },
    ];
    for i in 0..2 {
        assert_eq!(host.nodes[i].groups.len(), 4, "node {i} hosts both");
    }
    assert_eq!(host.nodes[2].groups.len(), 2, "node 2: metadata and 1.1.1");
    let unavailable: Vec<PartitionKey> = host.nodes[2].unavailable().keys().copied().collect();
    assert_eq!(unavailable, created);
    let reason = &host.nodes[2].unavailable()[&created[0]].reason;
    assert!(
        reason.contains("os error 28") || reason.contains("28"),
        "{reason}"
    );
    // The two that host them elect a primary (node 2's replica, which may have been chosen,
    // does not exist) and commit a write.
    host.tick(600);
    let target = created[1].group_id();
    let leader = host.nodes[0].groups[&target]
        .replica
        .leader()
        .expect("the partition has a primary on nodes 0 and 1");
    assert_ne!(leader, 2);
    host.send_batch(leader, target, 3, 5);
    host.settle();
    host.tick(100);
    for i in 0..2 {
        let partition = host.nodes[i].groups[&target].partition().expect("hosted");
        assert_eq!(partition.next_offset(), 5, "node {i}");
    }
    // A restart on the still-full disk boots without them. Each directory holds only the mark
    // of a create that found no room, so boot creates it as one made after the checkpoint,
    // never as a lost directory (rebuilt from peers, or refused).
    for node in host.nodes.drain(..) {
        node.shutdown().expect("clean shutdown");
    }
    for key in &created {
        let dir = format!("partitions/{}", key.dir_name());
        let names: Vec<String> = storages[2]
            .list_dir(&dir)
            .expect("the directory stays")
            .into_iter()
            .map(|e| e.name.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            vec![iggy_recovery::NOT_CREATED_FILE.to_string()],
            "{dir}"
        );
    }
    let report = fsck_check(&storages[2]).expect("check");
    assert!(
        report
            .findings
            .iter()
            .all(|f| f.kind != "missing-partition"),
        "{}",
        report.render()
    );
    full();
    let mut host = Host::boot(&storages, 2);
    assert_eq!(host.nodes[2].groups.len(), 2, "node 2 booted without them");
    let unavailable: Vec<PartitionKey> = host.nodes[2].unavailable().keys().copied().collect();
    assert_eq!(unavailable, created, "node 2 after the restart");
    // Space freed: the next try creates them, and node 2's replica catches up from its peers.
    storages[2].set_space_limit(None);
    host.tick(1_200);
    assert!(host.nodes[2].unavailable().is_empty());
    assert_eq!(host.nodes[2].groups.len(), 4);
    let partition = host.nodes[2].groups[&target].partition().expect("created");
    assert_eq!(partition.next_offset(), 5, "node 2 repaired the write");
    for node in host.nodes.drain(..) {
        node.shutdown().expect("clean shutdown");
    }
    for (i, storage) in storages.iter().enumerate() {
        let report = fsck_check(storage).expect("check");
        assert_eq!(report.exit_code(), 0, "node {i}: {}", report.render());
    }
}

/// `ring_budget_bytes`: the partitions' rings share the budget, and the shares follow creates
/// and deletes; the metadata group's ring keeps its size. Without the budget every ring keeps
/// `ring_bytes_max` (64 MiB), so a node's memory grew with each partition a client created.
#[test]
fn the_partitions_prepare_rings_share_the_nodes_ring_budget() {
    RING_BUDGET.set(12 << 20);
    let storages: Vec<SimStorage> = (0..3).map(genesis).collect();
    let mut host = Host::boot(&storages, 1);
    let rings = |host: &Host, i: usize| -> (Vec<u64>, u64) {
        let mut partitions = Vec::new();
        let mut metadata = 0;
        for group in host.nodes[i].groups.values() {
            if group.kind == GroupKind::Metadata {
                metadata = group.replica.ring_bytes_max();
            } else {
                partitions.push(group.replica.ring_bytes_max());
            }
        }
        (partitions, metadata)
    };
    let default = Config::default().ring_bytes_max;
    for i in 0..3 {
        assert_eq!(
            rings(&host, i),
            (vec![12 << 20], default),
            "node {i}: one partition"
        );
    }
    metadata_request(
        &mut host,
        1,
        &Op::RegisterClient {
            client: CLIENT,
            session: 1,
        },
    );
    metadata_request(
        &mut host,
        2,
        &Op::CreateTopic {
            stream: 1,
            name: "wide".into(),
            partitions: 3,
            durability: Durability::Replicated,
            segment_size_bytes: 64 << 10,
            retention: Retention::default(),
            replication_factor: 3,
        },
    );
    for i in 0..3 {
        assert_eq!(
            rings(&host, i),
            (vec![3 << 20; 4], default),
            "node {i}: four partitions share 12 MiB"
        );
    }
    metadata_request(
        &mut host,
        3,
        &Op::DeleteTopic {
            stream: 1,
            topic: 2,
        },
    );
    for i in 0..3 {
        assert_eq!(
            rings(&host, i),
            (vec![12 << 20], default),
            "node {i}: the one left has it all again"
        );
    }
}

/// Issue #47: a topic's update (`Op::UpdateTopic`) renames it and gives every node's replicas of
/// its partitions the new retention, which their retention passes follow; the other topics'
/// partitions keep theirs. Without the refresh a replica kept the retention it was created with
/// until its node restarted.
#[test]
fn a_topics_update_reaches_every_nodes_retention_passes() {
    let storages: Vec<SimStorage> = (0..3).map(genesis).collect();
    let mut host = Host::boot(&storages, 1);
    metadata_request(
        &mut host,
        1,
        &Op::RegisterClient {
            client: CLIENT,
            session: 1,
        },
    );
    metadata_request(
        &mut host,
        2,
        &Op::CreateTopic {
            stream: 1,
            name: "kept".into(),
            partitions: 2,
            durability: Durability::Replicated,
            segment_size_bytes: 64 << 10,
            retention: Retention::default(),
            replication_factor: 3,
        },
    );
    let wanted = Retention {
        max_age_seconds: 3_600,
        max_bytes: 1 << 20,
    };
    metadata_request(
        &mut host,
        3,
        &Op::UpdateTopic {
            stream: 1,
            topic: 2,
            name: "trimmed".into(),
            retention: wanted,
        },
    );
    // A `DeleteSegments` raises one partition's floor (issue #47): its retention passes
    // follow it on every node, its sibling's do not.
    metadata_request(
        &mut host,
        4,
        &Op::DeleteSegments {
            stream: 1,
            topic: 2,
            partition: 1,
            below: 40,
        },
    );
    for (i, node) in host.nodes.iter().enumerate() {
        for (partition, floor) in [(1, 40), (2, 0)] {
            let group = &node.groups[&partition_id(1, 2, partition)];
            assert_eq!(
                group.retention,
                iggy_node::store::Retention {
                    max_age_seconds: wanted.max_age_seconds,
                    max_bytes: wanted.max_bytes,
                    floor,
                },
                "node {i} partition {partition}"
            );
        }
        assert_eq!(
            node.groups[&partition_id(1, 1, 1)].retention,
            iggy_node::store::Retention::default(),
            "node {i}: the other topic's partition"
        );
        let state = node.metadata_state().expect("the metadata state");
        assert_eq!(state.streams[&1].topics[&2].name, "trimmed");
    }
}
