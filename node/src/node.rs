//! A node: its groups (the metadata group and every partition the metadata lists), each one VSR
//! replica over its storage with an ordered lane of storage effects, the repair ration its
//! groups share, and the routing fact it answers clients with (who leads a group, from its own
//! replica). No threads and no network: the host (the simulator, the server) delivers messages,
//! ticks every 10 ms, routes what [`Node::drain`] returns, and runs each lane's head when it
//! chooses ([`Node::run_lane_head`]: the simulator after a seeded latency, the server on a
//! storage thread), one effect of a lane at a time, in order.
//!
//! Invariants:
//! - a group's storage effects run in the order its replica emitted them, one at a time, and its
//!   replica hears each completion before the next effect of the lane runs;
//! - boot is `iggy_recovery::boot_with` in `Open` mode, under the node's lock, held for the
//!   node's life; a group boot refuses stops the node's boot;
//! - a clean shutdown records each replica's commit point, publishes every group with its log
//!   synced, and only when every group succeeded writes the clean-shutdown marker.

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;

use iggy_io::Storage;
use iggy_metadata::Durability;
use iggy_recovery::{BootConfig, Mode, NodeLock, Report};
use iggy_vsr::{
    Config, Destination, Durable, Effect, Identity, Message, Outcome, RepairRation, Replica,
    Safeguards, Status,
};

use crate::boot::{metadata_boot, partition_boot, record_commit_point};
use crate::store::{GroupKind, Store, execute};

/// How a node runs its groups.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    pub cluster: u128,
    /// This node's index, and how many replicas each group has.
    pub replica: u8,
    pub replicas: u8,
    pub vsr: Config,
    pub safeguards: Safeguards,
    /// Bytes a replicated partition appends before it publishes (its checkpoint; 128 MiB in
    /// production).
    pub checkpoint_bytes: u64,
    /// The node rations its groups' repair (3 new sessions a tick, 8 in flight); off, every
    /// group asks whenever it wants.
    pub repair_ration: bool,
    /// What boot opens the groups with (sizes, budgets, this boot's incarnation).
    pub boot: BootConfig,
}

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
    pub store: Store<S>,
    /// Storage effects not yet carried out, in the order the replica emitted them.
    pub lane: VecDeque<Effect>,
    /// Whether the host has the lane's head in hand (a run scheduled, or on a thread).
    pub lane_busy: bool,
}

/// What a group's replica emitted since the last drain: messages to route, and whether its lane
/// went from idle to busy (the host starts running it).
#[derive(Debug, Default)]
pub struct Drained {
    pub sends: Vec<(Destination, Message)>,
    pub lane_started: bool,
}

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
    /// More effects wait on the lane.
    pub more: bool,
    /// The replica's status and view before and after it took the completion.
    pub before: (Status, u32),
    pub after: (Status, u32),
}

/// Hooks a host's checkers use to watch each storage effect (all no-ops by default).
pub trait Observer {
    /// Before the store carries `effect` out (the replica as it was).
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
    checkpoint_bytes: u64,
    safeguards: Safeguards,
    /// Held for the node's life: no other process writes its directory meanwhile.
    _lock: NodeLock,
}

impl<S: Storage + Clone> Node<S> {
    /// Boots the node in `storage`'s root through `recovery::boot`, one replica per group: the
    /// metadata group and every partition it lists (persisted when its topic is). A group whose
    /// superblock records an earlier boot recovers; a new one starts in normal status. Refuses
    /// (naming the group and why) when boot refuses a group.
    pub fn boot(storage: S, config: &NodeConfig) -> Result<(Self, Report), String> {
        let index = config.replica;
        let incarnation = config.boot.incarnation;
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
        let mut discarded = BTreeMap::new();
        for finding in &report.findings {
            if finding.action == iggy_recovery::Action::DiscardUnpublished {
                *discarded.entry(finding.group.clone()).or_default() += finding.bytes;
            }
        }
        let metadata = state
            .metadata
            .ok_or_else(|| format!("node {index}: no metadata group"))?;
        let identity = |group: u128| Identity {
            cluster: config.cluster,
            group,
            replica: index,
            replicas: config.replicas,
        };
        let mut groups = BTreeMap::new();
        let durability = |key: &iggy_recovery::PartitionKey| {
            metadata
                .state()
                .streams
                .get(&key.stream)
                .and_then(|s| s.topics.get(&key.topic))
                .map(|t| t.durability)
        };
        let mut partitions = Vec::new();
        for (key, partition) in state.partitions {
            let persisted = durability(&key) == Some(Durability::Persisted);
            partitions.push((key, partition, persisted));
        }
        let boot = metadata_boot(&metadata, incarnation, &config.vsr)?;
        let group = |kind: GroupKind, boot, store| Group {
            kind,
            replica: Replica::new(
                config.vsr.clone(),
                config.safeguards,
                identity(kind.id()),
                boot,
            ),
            store,
            lane: VecDeque::new(),
            lane_busy: false,
        };
        let kind = GroupKind::Metadata;
        groups.insert(kind.id(), group(kind, boot, Store::Metadata(metadata)));
        for (key, partition, persisted) in partitions {
            let kind = GroupKind::Partition { key, persisted };
            let boot = partition_boot(&partition, persisted, incarnation, &config.vsr)?;
            let store = Store::Partition {
                partition,
                persisted,
                replies: BTreeMap::new(),
            };
            groups.insert(kind.id(), group(kind, boot, store));
        }
        let node = Self {
            index,
            groups,
            ration: config.ration(),
            discarded,
            storage,
            checkpoint_bytes: config.checkpoint_bytes,
            safeguards: config.safeguards,
            _lock: state.lock,
        };
        Ok((node, report))
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

    /// A message for `group`'s replica; returns its (status, view) before and after.
    pub fn deliver(
        &mut self,
        group: u128,
        message: Message,
    ) -> Option<((Status, u32), (Status, u32))> {
        let g = self.groups.get_mut(&group)?;
        let before = (g.replica.status(), g.replica.view());
        g.replica.on_message(message);
        Some((before, (g.replica.status(), g.replica.view())))
    }

    /// Takes `group`'s new effects: sends are returned in the order emitted, storage effects
    /// join its lane.
    pub fn drain(&mut self, group: u128) -> Drained {
        let mut drained = Drained::default();
        let Some(g) = self.groups.get_mut(&group) else {
            return drained;
        };
        for effect in g.replica.take_effects() {
            match effect {
                Effect::Send { to, message } => drained.sends.push((to, message)),
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

    /// Runs the head of `group`'s lane on its store (`now_us`: the host's clock) and hands its
    /// replica the completion, `observer` watching. `None`: no such group, or the lane is empty
    /// (and no longer busy). A storage failure halts the replica: the host restarts the node.
    pub fn run_lane_head(
        &mut self,
        group: u128,
        now_us: u64,
        observer: &mut dyn Observer,
    ) -> Option<Ran> {
        let index = self.index;
        let checkpoint_bytes = self.checkpoint_bytes;
        let g = self.groups.get_mut(&group)?;
        let Some(effect) = g.lane.pop_front() else {
            g.lane_busy = false;
            return None;
        };
        let id = effect.id().unwrap_or(0);
        let mut ran = Ran {
            name: effect.name(),
            commit: match &effect {
                Effect::Commit { through, .. } => Some((g.replica.commit_min(), *through)),
                _ => None,
            },
            durable: match &effect {
                Effect::WriteSuperblock { durable, .. } => Some(*durable),
                _ => None,
            },
            journaled: match &effect {
                Effect::Journal { header, .. } => Some(header.op),
                _ => None,
            },
            log_view_before: g.replica.durable().log_view,
            failed: None,
            more: false,
            before: (g.replica.status(), g.replica.view()),
            after: (g.replica.status(), g.replica.view()),
        };
        observer.before_effect(index, group, &g.replica, &effect);
        let outcome = execute(&mut g.store, effect, now_us, checkpoint_bytes);
        ran.journaled = match &outcome {
            Outcome::Prepared { header, .. } => Some(header.op),
            Outcome::Done => ran.journaled,
            _ => None,
        };
        if let Outcome::Failed(reason) = &outcome {
            ran.failed = Some(reason.clone());
        }
        ran.more = !g.lane.is_empty();
        observer.effect_done(index, group, &g.replica, &ran, &outcome);
        g.replica.on_completion(id, outcome);
        ran.after = (g.replica.status(), g.replica.view());
        if ran.failed.is_none() {
            if !ran.more {
                g.lane_busy = false;
            }
            observer.effect_completed(index, group, &g.replica, &ran);
        }
        Some(ran)
    }

    /// A clean shutdown: every replica's commit point is recorded in its superblock (with the
    /// durable commit point), every group publishes what it appended with its log synced, and
    /// the node writes the clean-shutdown marker when all of them succeeded (so its next boot
    /// skips the rewrites of trusted state). Returns the first failure. The node is gone after
    /// (its lock released).
    pub fn shutdown(mut self) -> Result<(), String> {
        let index = self.index;
        let mut result = Ok(());
        if self.safeguards.durable_commit_point {
            for group in self.groups.values_mut() {
                if let Err(e) = record_commit_point(group)
                    && result.is_ok()
                {
                    result = Err(format!("node {index}: {}: {e}", group.kind.label()));
                }
            }
        }
        for group in self.groups.values() {
            let prepared = match &group.store {
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
