//! One simulated node: a `SimStorage` holding a real node directory, and, while it is up, the
//! node of many groups (`iggy_node::Node`) booted from it. What is the simulator's alone lives
//! here: the cluster's fixed layout and genesis, lives (a crash drops the node and its pending
//! effects), process crashes and power losses.

use std::collections::BTreeMap;

use iggy_io::SimStorage;
use iggy_metadata::{Durability, Op, Retention};
use iggy_recovery::{BootConfig, PartitionKey};
use iggy_superblock::Identity;
use iggy_vsr::{Config, Safeguards};

pub use iggy_node::{GroupKind, Store, execute};

/// One group of a node (its replica, storage and lane).
pub type Host = iggy_node::Group<SimStorage>;

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
    /// The metadata group's replicas' configuration when it is not `vsr`.
    pub metadata_vsr: Option<Config>,
    /// Every topic's retention (zero: keeps everything): the nodes delete the oldest settled
    /// segments past it.
    pub retention: Retention,
    /// Each node's `pipeline_budget_bytes` (0: none).
    pub pipeline_budget_bytes: u64,
}

impl Layout {
    /// How node `index` runs its groups in the life whose boot has `incarnation`.
    fn node_config(&self, index: u8, incarnation: u64) -> iggy_node::NodeConfig {
        iggy_node::NodeConfig {
            metadata_vsr: self.metadata_vsr.clone(),
            cluster: self.cluster,
            replica: index,
            replicas: self.replicas,
            vsr: self.vsr.clone(),
            safeguards: self.safeguards,
            checkpoint_bytes: self.checkpoint_bytes,
            repair_ration: self.repair_ration,
            boot: self.boot_config(incarnation),
            mirror_metadata: false,
            ring_budget_bytes: 0,
            pipeline_budget_bytes: self.pipeline_budget_bytes,
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
            spread_primaries: self.spread_primaries,
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

/// A simulated node.
pub struct Node {
    pub index: u8,
    pub storage: SimStorage,
    /// Incremented at every boot: events of an earlier life are stale.
    pub life: u64,
    pub up: bool,
    /// The node of this life (`None` while it is down).
    pub node: Option<iggy_node::Node<SimStorage>>,
    /// What the last boot discarded past each group's published frontier, in bytes (by the
    /// report's group name: `metadata`, `partition 1.1.1`).
    pub discarded: BTreeMap<String, u64>,
}

/// The groups of a node that is down: none.
static NO_GROUPS: BTreeMap<u128, Host> = BTreeMap::new();

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
            retention: layout.retention,
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
            node: None,
            discarded: BTreeMap::new(),
        };
        node.boot(layout)?;
        Ok(node)
    }

    /// Boots the node from its disk (`iggy_node::Node::boot`): a group whose superblock records
    /// an earlier boot recovers; a new one starts in normal status.
    pub fn boot(&mut self, layout: &Layout) -> Result<(), String> {
        self.life += 1;
        let incarnation = u64::from(self.index) << 48 | self.life;
        let config = layout.node_config(self.index, incarnation);
        let (node, _) = iggy_node::Node::boot(self.storage.clone(), &config)?;
        self.discarded.clone_from(&node.discarded);
        self.node = Some(node);
        self.up = true;
        Ok(())
    }

    /// Its groups (none while it is down).
    #[must_use]
    pub fn hosts(&self) -> &BTreeMap<u128, Host> {
        self.node.as_ref().map_or(&NO_GROUPS, |n| &n.groups)
    }

    /// The repair ration of its groups, while it is up.
    #[must_use]
    pub fn ration(&self) -> Option<&iggy_vsr::RepairRation> {
        self.node.as_ref().map(|n| &n.ration)
    }

    /// Who leads `group`, from this node's own replica of it (`None`: down, not hosted, or in
    /// a view change or recovery).
    #[must_use]
    pub fn leader_of(&self, group: u128) -> Option<u8> {
        if !self.up {
            return None;
        }
        self.node.as_ref().and_then(|n| n.leader_of(group))
    }

    /// A clean shutdown (`iggy_node::Node::shutdown`), then the process exits.
    pub fn shutdown(&mut self) -> Result<(), String> {
        let result = self.node.take().map_or(Ok(()), iggy_node::Node::shutdown);
        self.crash(false);
        result
    }

    /// The process dies: replicas, their pending effects and every handle go; the disk keeps
    /// what the kernel has (a power loss also loses what was not synced).
    pub fn crash(&mut self, power_loss: bool) {
        self.node = None;
        self.up = false;
        if power_loss {
            self.storage.power_loss();
        } else {
            self.storage.crash_process();
        }
    }
}
