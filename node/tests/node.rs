//! Three nodes of the library driven by the simplest host there is: every message delivered at
//! once, every lane run to its end straight away. What the server's own host does with threads
//! and sockets must come out the same: the groups elect, a client's batch commits on all three,
//! a clean shutdown keeps it, and the nodes boot back to it.

use std::collections::VecDeque;

use iggy_format::operation;
use iggy_io::SimStorage;
use iggy_metadata::{Durability, Op, Retention};
use iggy_node::{GroupKind, Node, NodeConfig, Store, Unobserved};
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

fn config(replica: u8, incarnation: u64) -> NodeConfig {
    NodeConfig {
        cluster: CLUSTER,
        replica,
        replicas: 3,
        vsr: Config::default(),
        safeguards: Safeguards::default(),
        checkpoint_bytes: 256 << 10,
        repair_ration: true,
        boot: boot_config(incarnation),
    }
}

/// A new node's disk: the stream, a replicated topic of one partition.
fn genesis(replica: u8) -> SimStorage {
    let storage = SimStorage::new(u64::from(replica) + 1);
    let ops = [
        Op::CreateStream { name: "s".into() },
        Op::CreateTopic {
            stream: 1,
            name: "t".into(),
            partitions: 1,
            durability: Durability::Replicated,
            segment_size_bytes: 64 << 10,
            retention: Retention::default(),
            replication_factor: 3,
        },
    ];
    let identity = Identity {
        cluster: CLUSTER,
        replica,
        replica_count: 3,
    };
    iggy_recovery::populate::genesis(
        &storage,
        identity,
        &boot_config(0),
        &ops,
        &[(KEY, 64 << 10)],
        FirstView::Zero,
    )
    .expect("genesis");
    storage
}

/// The host: three nodes, a FIFO of messages in flight, the replies clients got.
struct Host {
    nodes: Vec<Node<SimStorage>>,
    wire: VecDeque<(u8, u128, Message)>,
    replies: Vec<Message>,
}

impl Host {
    fn boot(storages: &[SimStorage], life: u64) -> Self {
        let nodes = storages
            .iter()
            .zip(0u8..)
            .map(|(storage, i)| {
                let (node, report) =
                    Node::boot(storage.clone(), &config(i, u64::from(i) << 48 | life))
                        .expect("boot");
                assert_eq!(
                    report.summary.groups, 2,
                    "node {i}: the metadata and one partition"
                );
                node
            })
            .collect();
        let mut host = Self {
            nodes,
            wire: VecDeque::new(),
            replies: Vec::new(),
        };
        host.settle();
        host
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
                        for (to, message) in drained.sends {
                            moved = true;
                            match to {
                                Destination::Replica(r) => self.wire.push_back((r, group, message)),
                                Destination::Client(_) => self.replies.push(message),
                            }
                        }
                        let Some(ran) = self.nodes[i].run_lane_head(group, 0, &mut Unobserved)
                        else {
                            break;
                        };
                        moved = true;
                        assert_eq!(ran.failed, None, "node {i}: {} failed", ran.name);
                    }
                }
            }
            while let Some((to, group, message)) = self.wire.pop_front() {
                moved = true;
                self.nodes[usize::from(to)].deliver(group, message);
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
                let groups: Vec<u128> = node.groups.keys().copied().collect();
                node.ration_repair();
                for group in groups {
                    node.tick(group);
                }
            }
            self.settle();
        }
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
    let partition = GroupKind::Partition {
        key: KEY,
        persisted: false,
    }
    .id();
    for node in &host.nodes {
        assert_eq!(node.leader_of(partition), Some(0), "view 0's primary leads");
        assert_eq!(node.leader_of(GroupKind::Metadata.id()), Some(0));
    }

    host.wire.push_back((
        0,
        partition,
        Message::Request {
            cluster: CLUSTER,
            group: partition,
            client: CLIENT,
            request: 1,
            operation: operation::MESSAGES,
            body: batch(1, 10),
        },
    ));
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
        let Store::Partition { partition, .. } = &group.store else {
            panic!("node {i}: not a partition store");
        };
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
        let Store::Partition { partition, .. } = &group.store else {
            panic!("node {i}: not a partition store");
        };
        assert_eq!(partition.next_offset(), 10, "node {i} lost messages");
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
