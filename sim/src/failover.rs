//! The article's failover cases on the simulator, measured: a three-node cluster of the metadata
//! group and 24 partitions, a producer per partition at a set rate, no random fault, a reliable
//! network; one node killed (the one that leads everything, or a backup), maybe restarted 30
//! simulated seconds later, or every node losing power at once. Each case returns what it
//! measured (per-group elections, write gaps, every failed send, boot's discards, repair times
//! and bytes) and what it checked (every acknowledged batch on the nodes that must hold it, none
//! twice, none refused ever committed). The tests in `tests/failover.rs` assert on them at a
//! scaled load; `iggy-sim failover` prints them at either scale (`docs/benchmarks.md`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::Instant;

use iggy_vsr::Status;

use crate::cluster::{Cluster, Faults, Options, Workload};
use crate::network::NetworkConfig;
use crate::node::{GroupKind, Store};
use crate::producer::{Outcome, Shape};

const SECOND: u64 = 1_000_000;

/// Each machine's outgoing bandwidth in the failover cases: 10 Gbit/s (the article's i4i.4xlarge
/// nodes have up to 25).
pub const EGRESS_BYTES_PER_SECOND: u64 = 1_250_000_000;

/// How big a run is.
#[derive(Clone, Copy, Debug)]
pub struct Scale {
    pub name: &'static str,
    /// Every producer's load.
    pub shape: Shape,
    /// The load of the restart cases (the article's run 3 wrote less than its stated rate: 16 MB
    /// per partition before the kill, 20 MB while node 0 was down).
    pub restart_shape: Shape,
    pub partitions: u32,
    /// Load before the kill, and how long after it the run is watched.
    pub warm_up_us: u64,
    pub observe_us: u64,
    /// How long the killed node stays down before its restart.
    pub down_us: u64,
    /// The checkpoint of the power-loss cases: small, so that the warm-up publishes a few
    /// times and the loss takes only what came after the newest publication.
    pub loss_checkpoint_bytes: u64,
    /// A consumer per partition beside its producer.
    pub consumers: bool,
}

impl Scale {
    /// The default test run's load: the article's cluster (24 partitions, node timings as in
    /// production) with small batches.
    #[must_use]
    pub fn scaled() -> Self {
        Self {
            name: "scaled",
            shape: Shape {
                batches_per_second: 20,
                messages_per_batch: 10,
                message_bytes: 100,
            },
            restart_shape: Shape {
                batches_per_second: 10,
                messages_per_batch: 10,
                message_bytes: 100,
            },
            partitions: 24,
            warm_up_us: 3 * SECOND,
            observe_us: 8 * SECOND,
            down_us: 30 * SECOND,
            loss_checkpoint_bytes: 8 << 10,
            consumers: true,
        }
    }

    /// The article's load: 24 producers, 40 batches a second of 250 messages of 1000 bytes,
    /// killed 20 s in; the restart cases at run 3's volume (3 batches a second: 16 MB per
    /// partition in 20 s, about 20 MB in the 30 s down).
    #[must_use]
    pub fn article() -> Self {
        Self {
            name: "article",
            shape: Shape::article(),
            restart_shape: Shape {
                batches_per_second: 3,
                ..Shape::article()
            },
            partitions: 24,
            warm_up_us: 20 * SECOND,
            observe_us: 8 * SECOND,
            down_us: 30 * SECOND,
            loss_checkpoint_bytes: 4 << 20,
            // The article's runs had producers only (consumers reading all 240 MB/s would
            // slow the simulator to about a third of real time).
            consumers: false,
        }
    }

    /// The article's scale when `SIM_ARTICLE_FULL` is set, the scaled one otherwise.
    #[must_use]
    pub fn from_env() -> Self {
        if std::env::var_os("SIM_ARTICLE_FULL").is_some() {
            Self::article()
        } else {
            Self::scaled()
        }
    }
}

/// What a case runs on.
#[derive(Clone, Copy, Debug)]
pub struct Setup {
    pub seed: u64,
    /// Primaries spread over the nodes (off: node 0 leads everything, the article's cluster).
    pub spread: bool,
    /// Persisted partitions (off: replicated).
    pub persisted: bool,
    /// Each node rations repair (3 new sessions a tick, 8 in flight).
    pub repair_ration: bool,
    /// The protocol's safeguards (all on, but to show what one prevents).
    pub safeguards: iggy_vsr::Safeguards,
}

impl Setup {
    /// The article's cluster: replicated partitions all led by node 0, repair rationed.
    #[must_use]
    pub fn article(seed: u64) -> Self {
        Self {
            seed,
            spread: false,
            persisted: false,
            repair_ration: true,
            safeguards: iggy_vsr::Safeguards::default(),
        }
    }
}

/// The options of a case: no random fault, a reliable network, no random client, a producer
/// per partition (connected to node 0 when primaries are not spread, the article's setup; to
/// the partition's primary when they are), publication at the production checkpoint (128 MiB),
/// disks that never lose power (the kills are process crashes; the power-loss cases turn that
/// off).
#[must_use]
pub fn options(setup: Setup, scale: &Scale, shape: Shape) -> Options {
    let Setup {
        seed,
        spread,
        persisted,
        repair_ration,
        safeguards,
    } = setup;
    Options {
        replicated: if persisted { 0 } else { scale.partitions },
        persisted: if persisted { scale.partitions } else { 0 },
        clients_per_group: 0,
        requests_per_client: 0,
        fault_phase_us: 3_600 * SECOND,
        faults: Faults::none(),
        network: NetworkConfig {
            // 10 Gbit/s out of each machine: repair and replication cost their bytes.
            egress_bytes_per_second: Some(EGRESS_BYTES_PER_SECOND),
            ..NetworkConfig::reliable()
        },
        spread_primaries: spread,
        repair_ration,
        checkpoint_bytes: 128 << 20,
        write_through: true,
        draw_history: false,
        safeguards,
        workload: Some(Workload {
            shape,
            batches: u64::MAX,
            connect_to: (!spread).then_some(0),
            start_us: 200_000,
            consumers: scale.consumers,
        }),
        ..Options::new(seed)
    }
}

/// One group through a kill.
#[derive(Clone, Debug)]
pub struct Election {
    pub group: u128,
    pub label: String,
    pub old_view: u32,
    pub old_primary: u8,
    /// The last commit broadcast a survivor received (of the old view's primary, by the time
    /// the survivors' timers could fire).
    pub last_heard_us: Option<u64>,
    /// When the new view's primary entered normal status, and who it is.
    pub elected_us: Option<u64>,
    pub new_primary: Option<u8>,
    /// The longest time between two consecutive acknowledged batches of the partition's
    /// producer, from 1 s before the kill to the end of the run (partitions only).
    pub write_gap_us: Option<u64>,
}

/// A send that did not commit.
#[derive(Clone, Debug)]
pub struct Failed {
    pub label: String,
    pub request: u64,
    pub sent_us: u64,
    pub done_us: u64,
    pub outcome: Outcome,
}

/// What a kill did.
#[derive(Clone, Debug)]
pub struct KillReport {
    pub scale: &'static str,
    pub spread: bool,
    pub dead: u8,
    pub kill_us: u64,
    /// Every group, the metadata group first.
    pub elections: Vec<Election>,
    pub failed: Vec<Failed>,
    pub committed: u64,
    /// Each consumer's next offset at the kill and at the end (it reads on from the new
    /// primary).
    pub consumed: Vec<(String, u64, u64)>,
    /// Offset stores the consumers were told committed.
    pub offset_stores: u64,
    /// Acknowledged batches checked on the survivors (every one found, none twice, no refused
    /// batch committed), or what was wrong.
    pub integrity: Result<u64, String>,
    pub simulated_us: u64,
    pub wall_s: f64,
}

impl PowerLossReport {
    /// Where the metadata group came back among all groups (0: first), and how long after the
    /// first group it was.
    #[must_use]
    pub fn metadata_rank(&self) -> Option<(usize, u64)> {
        let first = self.resumed.iter().filter_map(|r| r.1).min()?;
        let metadata = self.resumed.iter().find(|r| r.0 == "metadata")?.1?;
        let rank = self
            .resumed
            .iter()
            .filter(|r| r.1.is_some_and(|at| at < metadata))
            .count();
        Some((rank, metadata - first))
    }
}

impl KillReport {
    /// Groups whose view changed after the kill.
    #[must_use]
    pub fn changed(&self) -> Vec<&Election> {
        self.elections
            .iter()
            .filter(|e| e.elected_us.is_some())
            .collect()
    }
}

/// What a restart did, after its kill.
#[derive(Clone, Debug)]
pub struct RestartReport {
    pub kill: KillReport,
    pub restart_us: u64,
    /// The replicas' ring's body bytes when the case set them (`restart_past_ring`).
    pub ring_bytes: Option<u64>,
    /// When the first repair prepare for node 0 left a peer after the restart.
    pub first_repair_us: Option<u64>,
    /// `RangeEvicted` answers node 0 got after its restart (a peer no longer held the range),
    /// and of them the ones for a group it had installed a peer's state of (a stale install).
    pub range_evicted: u64,
    pub evicted_after_install: u64,
    /// Per group, the transfers node 0 started and installed after its restart.
    pub transfers: Vec<(String, u64, u64, Option<u64>)>,
    /// Repair rounds the peers read from disk after the restart, and the prepares they sent.
    pub disk_reads: (u64, u64),
    /// Per group (by the boot report's name): bytes boot discarded past the published frontier.
    pub discarded: BTreeMap<String, u64>,
    /// Per group: when node 0's replica entered normal status again, when it held everything
    /// its primary had committed, and the prepare bytes its repair fetched.
    pub recovered: Vec<Recovered>,
    /// The most repair sessions node 0 admitted in one tick, and had open at once.
    pub ration_peaks: (usize, usize),
    /// The most of node 0's groups that asked peers for prepares in one tick.
    pub peak_repair_senders: usize,
    /// Groups of node 0 that found every peer's ring past what they need.
    pub behind_ring: usize,
    /// Acknowledged batches checked on all three nodes at the end.
    pub integrity: Result<u64, String>,
}

/// One group of the restarted node.
#[derive(Clone, Debug)]
pub struct Recovered {
    pub label: String,
    pub adopted_us: Option<u64>,
    pub caught_up_us: Option<u64>,
    pub fetched_bytes: u64,
    /// The prepare bytes (header and body) of the ops it lacked after its boot, up to where it
    /// caught up: what it missed while down and what boot discarded. Repair need fetch no more.
    pub lacked_bytes: u64,
    /// What it missed: the ops from its boot head to where it caught up, in bytes. Where
    /// retention deleted some of them everywhere (`restart_past_retention`), estimated at the
    /// mean prepare size of the log it holds over that range; otherwise `lacked_bytes`.
    pub missed_bytes: u64,
}

fn failure_of(cluster: &Cluster) -> Result<(), String> {
    match cluster.failure() {
        Some((checker, what)) => Err(format!(
            "checker `{checker}` fired: {what}\n{}\n{}",
            cluster.status().join("\n"),
            cluster.trace().join("\n")
        )),
        None => Ok(()),
    }
}

/// Kills `dead` (a process crash) after the warm-up and watches for `scale.observe_us`.
pub fn kill(setup: Setup, scale: &Scale, dead: u8) -> Result<KillReport, String> {
    let started = Instant::now();
    let mut cluster = Cluster::new(options(setup, scale, scale.shape))?;
    kill_in(&mut cluster, scale, setup.spread, dead, started)
}

fn kill_in(
    cluster: &mut Cluster,
    scale: &Scale,
    spread: bool,
    dead: u8,
    started: Instant,
) -> Result<KillReport, String> {
    cluster.run_until(scale.warm_up_us);
    failure_of(cluster)?;
    let survivor = (dead + 1) % cluster.layout().replicas;
    let before: Vec<(GroupKind, u32, u8)> = cluster
        .layout()
        .groups()
        .into_iter()
        .map(|kind| {
            let r = cluster
                .replica(survivor, kind.id())
                .ok_or_else(|| format!("node {survivor} is down before the kill"))?;
            Ok((kind, r.view(), r.primary_of(r.view())))
        })
        .collect::<Result<_, String>>()?;
    let kill_us = cluster.now();
    let consumed_before: Vec<u64> = cluster.consumers().iter().map(|c| c.next_offset).collect();
    cluster.crash_node(dead, false);
    // What was in flight arrives; no survivor's timer can fire this soon.
    cluster.run_until(kill_us + 100_000);
    let survivors: Vec<u8> = (0..cluster.layout().replicas)
        .filter(|n| *n != dead)
        .collect();
    let heard: Vec<Option<u64>> = before
        .iter()
        .map(|(kind, _, _)| {
            survivors
                .iter()
                .filter_map(|s| cluster.commit_heard(*s, kind.id()))
                .max()
        })
        .collect();
    cluster.run_until(kill_us + scale.observe_us);
    failure_of(cluster)?;
    let elections = elections(cluster, kill_us, &before, &heard);
    let report = KillReport {
        scale: scale.name,
        spread,
        dead,
        kill_us,
        elections,
        failed: failed(cluster),
        committed: committed(cluster),
        consumed: cluster
            .consumers()
            .iter()
            .zip(consumed_before)
            .map(|(c, before)| (label_of(cluster, c.group), before, c.next_offset))
            .collect(),
        offset_stores: cluster
            .consumers()
            .iter()
            .map(|c| c.stored.len() as u64)
            .sum(),
        integrity: check_acknowledged(cluster, &survivors),
        simulated_us: cluster.now(),
        wall_s: started.elapsed().as_secs_f64(),
    };
    Ok(report)
}

fn elections(
    cluster: &Cluster,
    kill_us: u64,
    before: &[(GroupKind, u32, u8)],
    heard: &[Option<u64>],
) -> Vec<Election> {
    let replicas = u32::from(cluster.layout().replicas);
    before
        .iter()
        .zip(heard)
        .map(|((kind, view, primary), heard)| {
            let elected = cluster
                .view_log()
                .iter()
                .find(|(at, node, group, status, v)| {
                    *at > kill_us
                        && *group == kind.id()
                        && *status == Status::Normal
                        && *v > *view
                        && u32::from(*node) == *v % replicas
                });
            Election {
                group: kind.id(),
                label: kind.label(),
                old_view: *view,
                old_primary: *primary,
                last_heard_us: *heard,
                elected_us: elected.map(|e| e.0),
                new_primary: elected.map(|e| e.1),
                write_gap_us: write_gap(cluster, kind.id(), kill_us.saturating_sub(SECOND)),
            }
        })
        .collect()
}

/// The longest time without an acknowledged batch of `group`'s producer, from `from_us` to now.
fn write_gap(cluster: &Cluster, group: u128, from_us: u64) -> Option<u64> {
    let producer = cluster.producers().iter().find(|p| p.group == group)?;
    let mut last = from_us;
    let mut gap = 0;
    for send in &producer.sends {
        if let Outcome::Committed { .. } = send.outcome
            && send.done_us >= from_us
        {
            gap = gap.max(send.done_us - last);
            last = send.done_us;
        }
    }
    Some(gap.max(cluster.now() - last))
}

fn label_of(cluster: &Cluster, group: u128) -> String {
    cluster
        .layout()
        .groups()
        .into_iter()
        .find(|k| k.id() == group)
        .map_or_else(|| format!("{group:#x}"), GroupKind::label)
}

fn failed(cluster: &Cluster) -> Vec<Failed> {
    let mut out = Vec::new();
    for producer in cluster.producers() {
        for send in &producer.sends {
            if !matches!(send.outcome, Outcome::Committed { .. }) {
                out.push(Failed {
                    label: label_of(cluster, producer.group),
                    request: send.request,
                    sent_us: send.sent_us,
                    done_us: send.done_us,
                    outcome: send.outcome,
                });
            }
        }
    }
    out
}

fn committed(cluster: &Cluster) -> u64 {
    cluster
        .producers()
        .iter()
        .flat_map(|p| &p.sends)
        .filter(|s| matches!(s.outcome, Outcome::Committed { .. }))
        .count() as u64
}

/// Every batch a producer was told committed is journaled on each of `nodes` at its op with
/// the history's checksum; no batch is there twice; no batch given up as
/// `TransientNotAccepted` is there at all. Returns how many acknowledged batches were checked.
pub fn check_acknowledged(cluster: &Cluster, nodes: &[u8]) -> Result<u64, String> {
    let mut checked = 0;
    for producer in cluster.producers() {
        let label = label_of(cluster, producer.group);
        let history = cluster.checker.history.get(&producer.group);
        for &node in nodes {
            let n = &cluster.nodes()[usize::from(node)];
            if !n.up {
                return Err(format!("node {node} is down: nothing to check"));
            }
            let Some(partition) = n.hosts().get(&producer.group).and_then(|h| h.partition()) else {
                return Err(format!("node {node} has no {label}"));
            };
            let wal = partition.wal();
            let head = wal.head().0;
            // (request -> (op, checksum)) of this producer's batches on this node.
            let mut held: BTreeMap<u64, (u64, u128)> = BTreeMap::new();
            let mut op = wal.first_op().max(1);
            while op <= head {
                let last = head.min(op + 1023);
                let headers = wal
                    .read_headers(op, last)
                    .map_err(|e| format!("node {node} {label}: reading ops {op}..={last}: {e}"))?;
                for h in headers {
                    if h.client != producer.id {
                        continue;
                    }
                    if let Some((first, _)) = held.insert(h.request, (h.op, h.checksum())) {
                        return Err(format!(
                            "node {node} {label}: request {} of producer {:#x} is there twice \
                             (ops {first} and {})",
                            h.request, producer.id, h.op
                        ));
                    }
                }
                op = last + 1;
            }
            // With retention, what a node deleted below its oldest op is not checked on it.
            let retained_from = if cluster.layout().retention == iggy_metadata::Retention::default()
            {
                0
            } else {
                wal.first_op()
            };
            for send in &producer.sends {
                match send.outcome {
                    Outcome::Committed { op, .. } if op < retained_from => {}
                    Outcome::Committed { op, .. } => {
                        let canonical = history.and_then(|h| h.get(&op)).map(|c| c.checksum);
                        match held.get(&send.request) {
                            Some((at, checksum)) if *at == op && Some(*checksum) == canonical => {}
                            Some((at, checksum)) => {
                                return Err(format!(
                                    "node {node} {label}: acknowledged request {} (op {op}, \
                                     checksum {canonical:x?}) is op {at} checksum {checksum:#x}",
                                    send.request
                                ));
                            }
                            None => {
                                return Err(format!(
                                    "node {node} {label}: acknowledged request {} (op {op}) is \
                                     missing (head {head})",
                                    send.request
                                ));
                            }
                        }
                        if node == nodes[0] {
                            checked += 1;
                        }
                    }
                    Outcome::TransientNotAccepted => {
                        if let Some((at, _)) = held.get(&send.request) {
                            return Err(format!(
                                "node {node} {label}: request {} was reported \
                                 TransientNotAccepted but is op {at}",
                                send.request
                            ));
                        }
                    }
                    Outcome::TransientNotCommitted => {}
                }
            }
        }
    }
    for consumer in cluster.consumers() {
        let label = label_of(cluster, consumer.group);
        for &node in nodes {
            let n = &cluster.nodes()[usize::from(node)];
            let Some(partition) = n.hosts().get(&consumer.group).and_then(|h| h.partition()) else {
                return Err(format!("node {node} has no {label}"));
            };
            // The newest acknowledged store this node has executed is what its offset file
            // holds, or a later one.
            let executed = partition.committed();
            let Some(&(request, offset, op, _)) =
                consumer.stored.iter().rev().find(|s| s.2 <= executed)
            else {
                continue;
            };
            let dir = partition.dir().join(iggy_segments::offsets::DIR_NAME);
            let stored = iggy_segments::offsets::load(
                partition.wal().storage(),
                &dir,
                iggy_segments::offsets::ConsumerKind::Consumer,
                consumer.consumer,
            )
            .map_err(|e| format!("node {node} {label}: consumer offset: {e}"))?;
            if stored.is_none_or(|s| s.offset < offset) {
                return Err(format!(
                    "node {node} {label}: consumer {} stored offset {offset} (request {request}, \
                     op {op}) and the node has {stored:?}",
                    consumer.consumer
                ));
            }
        }
    }
    Ok(checked)
}

/// Kills node 0 (which leads everything unless primaries are spread), restarts it
/// `scale.down_us` later and watches until each of its groups holds what its primary committed
/// (or 30 s pass).
pub fn restart(setup: Setup, scale: &Scale) -> Result<RestartReport, String> {
    restart_with(setup, scale, scale.restart_shape, None)
}

/// The article's run 1: node 0 (leading everything) is killed under load and restarted
/// `scale.down_us` later, the replicas' rings holding only 3.2 s of each partition's load (the
/// article's held 6.4 s, and node 0 missed about 250 MB a partition), so each partition misses
/// many times its ring (about 9 times). It catches up by repair from the peers' disks: no
/// state transfer, no `RangeEvicted`. The restart cases' load, so that the full scale's disks
/// fit in memory (its full load would write 36 GB over three nodes).
pub fn restart_past_ring(setup: Setup, scale: &Scale) -> Result<RestartReport, String> {
    let shape = scale.restart_shape;
    // A batch's body: its messages with their 64-byte headers (the ring counts body bytes).
    let batch = u64::from(shape.messages_per_batch) * (u64::from(shape.message_bytes) + 64);
    let ring = u64::from(shape.batches_per_second) * batch * 32 / 10;
    restart_with(setup, scale, shape, Some(ring))
}

/// Issue #33's state transfer: `restart_past_ring` with retention on every partition (a
/// fifth of what a partition takes while node 0 is down, publishing every 256 KiB), so the peers
/// delete the range node 0 missed before it is back: each partition catches up by one transfer
/// of a peer's settled segments, then repair after it.
pub fn restart_past_retention(setup: Setup, scale: &Scale) -> Result<RestartReport, String> {
    let shape = scale.restart_shape;
    let batch = u64::from(shape.messages_per_batch) * (u64::from(shape.message_bytes) + 64);
    let ring = u64::from(shape.batches_per_second) * batch * 32 / 10;
    let missed = u64::from(shape.batches_per_second) * batch * scale.down_us / SECOND;
    let retention = (missed / 5).max(256 << 10);
    restart_with_options(setup, scale, shape, Some(ring), |options| {
        options.retention_bytes = retention;
        options.checkpoint_bytes = 256 << 10;
    })
}

fn restart_with(
    setup: Setup,
    scale: &Scale,
    shape: Shape,
    ring_bytes: Option<u64>,
) -> Result<RestartReport, String> {
    restart_with_options(setup, scale, shape, ring_bytes, |_| {})
}

fn restart_with_options(
    setup: Setup,
    scale: &Scale,
    shape: Shape,
    ring_bytes: Option<u64>,
    adjust: impl FnOnce(&mut Options),
) -> Result<RestartReport, String> {
    let started = Instant::now();
    let spread = setup.spread;
    let mut options = options(setup, scale, shape);
    if let Some(bytes) = ring_bytes {
        options.vsr.ring_bytes_max = bytes;
    }
    adjust(&mut options);
    let mut cluster = Cluster::new(options)?;
    let kill = kill_in(
        &mut cluster,
        &Scale {
            observe_us: scale.down_us,
            ..*scale
        },
        spread,
        0,
        started,
    )?;
    let groups = cluster.layout().groups();
    let fetched_before: Vec<u64> = groups
        .iter()
        .map(|k| cluster.repair_bytes(0, k.id()))
        .collect();
    let restart_us = cluster.now();
    let disk_before = cluster.disk_reads();
    cluster.restart_node(0);
    failure_of(&cluster)?;
    let discarded = cluster.nodes()[0].discarded.clone();
    // Where each group's log ended after boot, and where it was when it caught up.
    let boot_heads: Vec<u64> = groups
        .iter()
        .map(|k| {
            cluster
                .replica(0, k.id())
                .map_or(0, iggy_vsr::Replica::journaled_head)
        })
        .collect();
    let mut caught_heads = vec![0u64; groups.len()];
    let caught_up = watch(
        &mut cluster,
        &groups,
        restart_us + 30 * SECOND,
        |c, kind| {
            let Some(mine) = c.replica(0, kind.id()) else {
                return false;
            };
            let primary = mine.primary_of(mine.view());
            c.replica(primary, kind.id()).is_some_and(|theirs| {
                mine.status() == Status::Normal
                    && primary != 0
                    && !mine.wants_repair()
                    && mine.journaled_head() >= theirs.commit_max()
            })
        },
    )?;
    for (i, kind) in groups.iter().enumerate() {
        caught_heads[i] = cluster
            .replica(0, kind.id())
            .map_or(0, iggy_vsr::Replica::journaled_head);
    }
    let recovered = groups
        .iter()
        .enumerate()
        .map(|(i, kind)| -> Result<Recovered, String> {
            Ok(Recovered {
                label: kind.label(),
                adopted_us: cluster
                    .view_log()
                    .iter()
                    .find(|(at, node, group, status, _)| {
                        *at >= restart_us
                            && *node == 0
                            && *group == kind.id()
                            && *status == Status::Normal
                    })
                    .map(|e| e.0),
                caught_up_us: caught_up[i],
                fetched_bytes: cluster.repair_bytes(0, kind.id()) - fetched_before[i],
                lacked_bytes: prepare_bytes(&cluster, 0, *kind, boot_heads[i], caught_heads[i])?,
                missed_bytes: missed_bytes(&cluster, *kind, boot_heads[i], caught_heads[i])?,
            })
        })
        .collect::<Result<Vec<Recovered>, String>>()?;
    // Every node holds every acknowledged batch once what is in flight has landed: the
    // producers stop, the last prepares reach the backup the quorum did not wait for.
    cluster.stop_producers();
    let settle = cluster.now() + SECOND;
    cluster.run_until(settle);
    failure_of(&cluster)?;
    let ration_peaks = cluster.nodes()[0]
        .ration()
        .map_or((0, 0), |r| (r.peak_new, r.peak_in_flight));
    Ok(RestartReport {
        kill,
        restart_us,
        ring_bytes,
        first_repair_us: groups
            .iter()
            .filter_map(|k| cluster.first_repair_at(0, k.id()))
            .min(),
        range_evicted: cluster.range_evicted_to(0),
        evicted_after_install: cluster.evicted_after_install(0),
        transfers: groups
            .iter()
            .map(|k| {
                let counter = |name: &str| {
                    cluster
                        .replica(0, k.id())
                        .and_then(|r| r.counters().get(name).copied())
                        .unwrap_or(0)
                };
                (
                    k.label(),
                    counter("snapshot_transfer_started"),
                    counter("snapshot_installed"),
                    cluster.installed_at(0, k.id()),
                )
            })
            .collect(),
        disk_reads: (
            cluster.disk_reads().0 - disk_before.0,
            cluster.disk_reads().1 - disk_before.1,
        ),
        discarded,
        recovered,
        ration_peaks,
        peak_repair_senders: cluster.peak_repair_senders(0),
        behind_ring: groups
            .iter()
            .filter(|k| {
                cluster
                    .replica(0, k.id())
                    .is_some_and(iggy_vsr::Replica::behind_ring)
            })
            .count(),
        integrity: check_acknowledged(&cluster, &[0, 1, 2]),
    })
}

/// Node 0's missed bytes of `kind` from op `after` (excluded) through `through`: exact while
/// its log holds them all, else the ops missed times the mean prepare size of what it holds of
/// them (retention deleted the rest everywhere).
fn missed_bytes(
    cluster: &Cluster,
    kind: GroupKind,
    after: u64,
    through: u64,
) -> Result<u64, String> {
    let first = cluster.nodes()[0]
        .hosts()
        .get(&kind.id())
        .and_then(|h| h.partition())
        .map_or(1, |p| p.wal().first_op());
    if first <= after + 1 || through <= after {
        return prepare_bytes(cluster, 0, kind, after, through);
    }
    if through < first {
        return Ok(0);
    }
    let held = prepare_bytes(cluster, 0, kind, first - 1, through)?;
    Ok(held * (through - after) / (through - first + 1))
}

/// The prepare bytes (header and body) of `node`'s log of `kind` from op `after` (excluded)
/// through `through`, as journaled.
fn prepare_bytes(
    cluster: &Cluster,
    node: u8,
    kind: GroupKind,
    after: u64,
    through: u64,
) -> Result<u64, String> {
    if through <= after {
        return Ok(0);
    }
    let Some(host) = cluster.nodes()[usize::from(node)].hosts().get(&kind.id()) else {
        return Ok(0);
    };
    let store = host.store();
    let wal = match &*store {
        Store::Partition { partition, .. } => partition.wal(),
        Store::Metadata(group) => group.wal(),
    };
    let mut bytes = 0;
    let mut op = (after + 1).max(wal.first_op());
    while op <= through {
        let last = through.min(op + 1023);
        for header in wal
            .read_headers(op, last)
            .map_err(|e| format!("node {node} {}: ops {op}..={last}: {e}", kind.label()))?
        {
            bytes += u64::from(header.size);
        }
        op = last + 1;
    }
    Ok(bytes)
}

/// What a clean stop of every node, and their start together, did.
#[derive(Clone, Debug)]
pub struct RestartAllReport {
    pub stop_us: u64,
    /// Acknowledged batches before the stop, and the ops each partition held then (fewest,
    /// most).
    pub acknowledged: u64,
    pub partition_ops: (u64, u64),
    /// When each group was in normal status on every node again.
    pub resumed: Vec<(String, Option<u64>)>,
    /// Prepare bytes repair fetched on any node after the start (nothing was lost: none).
    pub fetched_bytes: u64,
    /// Groups with no primary at the end.
    pub leaderless: Vec<String>,
    /// Every acknowledged batch on all three nodes, none twice, or what was wrong.
    pub integrity: Result<u64, String>,
}

/// After the warm-up the producers stop, what is in flight lands, and every node shuts down
/// cleanly (each publishes everything with its log synced, records its commit point and marks
/// its clean shutdown); then all three start together and every group resumes through its
/// unanswered probes. Watched until every group is back on every node (or 30 s), then 2 s more.
pub fn restart_all(setup: Setup, scale: &Scale) -> Result<RestartAllReport, String> {
    let mut cluster = Cluster::new(options(setup, scale, scale.restart_shape))?;
    cluster.run_until(scale.warm_up_us);
    failure_of(&cluster)?;
    cluster.stop_producers();
    cluster.run_until(scale.warm_up_us + SECOND);
    failure_of(&cluster)?;
    let groups = cluster.layout().groups();
    let replicas = cluster.layout().replicas;
    let fetched = |c: &Cluster| -> u64 {
        (0..replicas)
            .flat_map(|n| groups.iter().map(move |k| (n, k.id())))
            .map(|(n, g)| c.repair_bytes(n, g))
            .sum()
    };
    let fetched_before = fetched(&cluster);
    let acknowledged = committed(&cluster);
    let heads: Vec<u64> = groups
        .iter()
        .filter(|k| matches!(k, GroupKind::Partition { .. }))
        .filter_map(|k| cluster.replica(0, k.id()).map(iggy_vsr::Replica::head))
        .collect();
    let partition_ops = (
        heads.iter().min().copied().unwrap_or(0),
        heads.iter().max().copied().unwrap_or(0),
    );
    let stop_us = cluster.now();
    for node in 0..replicas {
        cluster.shutdown_node(node)?;
    }
    for node in 0..replicas {
        cluster.restart_node(node);
    }
    failure_of(&cluster)?;
    let resumed = watch(&mut cluster, &groups, stop_us + 30 * SECOND, |c, kind| {
        (0..replicas).all(|n| {
            c.replica(n, kind.id())
                .is_some_and(|r| r.status() == Status::Normal)
        })
    })?;
    let settle = cluster.now() + 2 * SECOND;
    cluster.run_until(settle);
    failure_of(&cluster)?;
    let leaderless = groups
        .iter()
        .filter(|k| cluster.nodes()[0].leader_of(k.id()).is_none())
        .map(|k| k.label())
        .collect();
    Ok(RestartAllReport {
        stop_us,
        acknowledged,
        partition_ops,
        resumed: groups
            .iter()
            .zip(resumed)
            .map(|(k, at)| (k.label(), at))
            .collect(),
        fetched_bytes: fetched(&cluster) - fetched_before,
        leaderless,
        integrity: check_acknowledged(&cluster, &[0, 1, 2]),
    })
}

/// A clean stop and start of every node: its account.
#[must_use]
pub fn render_restart_all(report: &RestartAllReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "every node stops cleanly at {} s and all start together; {} acknowledged batches, \
         {} to {} ops per partition",
        seconds(report.stop_us),
        report.acknowledged,
        report.partition_ops.0,
        report.partition_ops.1
    );
    let back: Vec<u64> = report.resumed.iter().filter_map(|r| r.1).collect();
    let _ = writeln!(
        out,
        "{} of {} groups normal on every node again, {} to {} s after the stop (through \
         unanswered probes); {} without a primary",
        back.len(),
        report.resumed.len(),
        back.iter()
            .min()
            .map_or_else(|| "-".into(), |a| seconds(a - report.stop_us)),
        back.iter()
            .max()
            .map_or_else(|| "-".into(), |a| seconds(a - report.stop_us)),
        report.leaderless.len()
    );
    let _ = writeln!(out, "repair fetched {} B", report.fetched_bytes);
    let _ = writeln!(
        out,
        "integrity: {}",
        match &report.integrity {
            Ok(n) => format!("{n} acknowledged batches on all three nodes, none twice"),
            Err(e) => format!("FAILED: {e}"),
        }
    );
    out
}

/// What a power loss of every node at once did.
#[derive(Clone, Debug)]
pub struct PowerLossReport {
    pub persisted: bool,
    pub loss_us: u64,
    /// Acknowledged batches before the loss, and those of them whose op was above every
    /// node's newest publication of their partition (what the loss may take).
    pub acknowledged: u64,
    pub unpublished_everywhere: u64,
    /// Acknowledged batches missing after the restart, and those of them that were published
    /// on some node (must be none).
    pub lost: u64,
    pub lost_published: Vec<String>,
    /// Acknowledged batches found, once the restarted cluster settled, on every one of the
    /// three nodes at their op (every one not lost, when all is well).
    pub held_everywhere: u64,
    /// When each group was in normal status again on every node, the metadata group first in
    /// the list, and whether some replica of it started a view change after its probes went
    /// unanswered.
    pub resumed: Vec<(String, Option<u64>, bool)>,
}

/// Every node loses power at once after the warm-up (producers stop first, so that what they
/// were told is fixed), and all three boot together; watched until every group is back on every
/// node (or 30 s).
pub fn power_loss_all(setup: Setup, scale: &Scale) -> Result<PowerLossReport, String> {
    let persisted = setup.persisted;
    let mut cluster = Cluster::new(Options {
        checkpoint_bytes: scale.loss_checkpoint_bytes,
        write_through: false,
        ..options(setup, scale, scale.restart_shape)
    })?;
    cluster.run_until(scale.warm_up_us);
    failure_of(&cluster)?;
    cluster.stop_producers();
    // The last sends complete; nothing new is asked for.
    cluster.run_until(scale.warm_up_us + SECOND);
    failure_of(&cluster)?;
    let groups = cluster.layout().groups();
    // Each partition's newest publication on any node.
    let mut published: BTreeMap<u128, u64> = BTreeMap::new();
    for node in cluster.nodes() {
        for (group, host) in node.hosts() {
            if let Some(partition) = host.partition() {
                let head = partition.wal().published().head_op;
                let best = published.entry(*group).or_default();
                *best = (*best).max(head);
            }
        }
    }
    let acked: Vec<(u128, u64, u64)> = cluster
        .producers()
        .iter()
        .flat_map(|p| {
            p.sends.iter().filter_map(move |s| match s.outcome {
                Outcome::Committed { op, .. } => Some((p.group, s.request, op)),
                _ => None,
            })
        })
        .collect();
    let unpublished_everywhere = acked
        .iter()
        .filter(|(g, _, op)| *op > published.get(g).copied().unwrap_or(0))
        .count() as u64;
    let loss_us = cluster.now();
    for node in 0..cluster.layout().replicas {
        cluster.crash_node(node, true);
    }
    for node in 0..cluster.layout().replicas {
        cluster.restart_node(node);
    }
    failure_of(&cluster)?;
    let replicas = cluster.layout().replicas;
    let resumed = watch(&mut cluster, &groups, loss_us + 30 * SECOND, |c, kind| {
        (0..replicas).all(|n| {
            c.replica(n, kind.id())
                .is_some_and(|r| r.status() == Status::Normal)
        })
    })?;
    // The exact moments: each replica's first normal status after the loss, the group's the
    // latest of its replicas'.
    let resumed: Vec<Option<u64>> = groups
        .iter()
        .zip(resumed)
        .map(|(kind, polled)| {
            polled?;
            (0..cluster.layout().replicas)
                .map(|n| {
                    cluster
                        .view_log()
                        .iter()
                        .find(|(at, node, group, status, _)| {
                            *at >= loss_us
                                && *node == n
                                && *group == kind.id()
                                && *status == Status::Normal
                        })
                        .map(|e| e.0)
                })
                .collect::<Option<Vec<u64>>>()
                .and_then(|times| times.into_iter().max())
        })
        .collect();
    // What the restarted cluster holds of what was acknowledged (node by node: the primary's
    // log is the group's).
    let mut lost = 0;
    let mut lost_published = Vec::new();
    for (group, request, op) in &acked {
        let label = label_of(&cluster, *group);
        let producer_id = cluster
            .producers()
            .iter()
            .find(|p| p.group == *group)
            .map_or(0, |p| p.id);
        let Some(leader) = cluster.nodes()[0].leader_of(*group) else {
            return Err(format!("{label} has no primary after the restart"));
        };
        let Some(partition) = cluster.nodes()[usize::from(leader)]
            .hosts()
            .get(group)
            .and_then(|h| h.partition())
        else {
            return Err(format!("node {leader} has no {label}"));
        };
        let present = *op <= partition.wal().head().0
            && partition
                .wal()
                .read(*op, *op)
                .map_err(|e| format!("{label} op {op}: {e}"))?
                .first()
                .is_some_and(|e| e.header.client == producer_id && e.header.request == *request);
        if !present {
            lost += 1;
            if *op <= published.get(group).copied().unwrap_or(0) {
                lost_published.push(format!("{label} request {request} (op {op})"));
            }
        }
    }
    // Every node catches up (the repairs after the view changes), then each holds what the
    // group kept.
    let settle = cluster.now() + 3 * SECOND;
    cluster.run_until(settle);
    failure_of(&cluster)?;
    let mut held_everywhere = 0;
    for (group, request, op) in &acked {
        let producer_id = cluster
            .producers()
            .iter()
            .find(|p| p.group == *group)
            .map_or(0, |p| p.id);
        let mut everywhere = true;
        for node in cluster.nodes() {
            let Some(partition) = node.hosts().get(group).and_then(|h| h.partition()) else {
                everywhere = false;
                break;
            };
            let wal = partition.wal();
            let here = *op <= wal.head().0
                && *op >= wal.first_op()
                && wal
                    .read_headers(*op, *op)
                    .map_err(|e| format!("node {} op {op}: {e}", node.index))?
                    .first()
                    .is_some_and(|h| h.client == producer_id && h.request == *request);
            everywhere &= here;
        }
        held_everywhere += u64::from(everywhere);
    }
    let probed: BTreeSet<u128> = groups
        .iter()
        .filter(|k| {
            (0..cluster.layout().replicas).any(|n| {
                cluster.replica(n, k.id()).is_some_and(|r| {
                    r.counters()
                        .get("recovery_probes_unanswered")
                        .is_some_and(|c| *c > 0)
                })
            })
        })
        .map(|k| k.id())
        .collect();
    Ok(PowerLossReport {
        persisted,
        loss_us,
        acknowledged: acked.len() as u64,
        unpublished_everywhere,
        lost,
        lost_published,
        held_everywhere,
        resumed: groups
            .iter()
            .zip(resumed)
            .map(|(k, at)| (k.label(), at, probed.contains(&k.id())))
            .collect(),
    })
}

/// Runs in 10 ms steps until `done` has held for every group (or `limit_us`): when it first
/// held for each, to the step.
fn watch(
    cluster: &mut Cluster,
    groups: &[GroupKind],
    limit_us: u64,
    done: impl Fn(&Cluster, GroupKind) -> bool,
) -> Result<Vec<Option<u64>>, String> {
    let mut at: Vec<Option<u64>> = vec![None; groups.len()];
    while cluster.now() < limit_us && at.iter().any(Option::is_none) {
        let next = cluster.now() + 10_000;
        cluster.run_until(next);
        failure_of(cluster)?;
        for (slot, kind) in at.iter_mut().zip(groups) {
            if slot.is_none() && done(cluster, *kind) {
                *slot = Some(cluster.now());
            }
        }
    }
    Ok(at)
}

/// `fetched` as a multiple of `lacked`, for a report.
fn ratio(fetched: u64, lacked: u64) -> String {
    if lacked == 0 {
        if fetched == 0 {
            "nothing lacked, nothing fetched".into()
        } else {
            "nothing lacked".into()
        }
    } else {
        format!("{:.2}x", fetched as f64 / lacked as f64)
    }
}

fn seconds(us: u64) -> String {
    format!("{:.3}", us as f64 / 1e6)
}

/// A kill's timeline, for a terminal and `docs/benchmarks.md` (times in seconds after the kill).
#[must_use]
pub fn render_kill(report: &KillReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "kill node {} at {} s ({} load, primaries {}), simulated {} s in {:.1} wall s",
        report.dead,
        seconds(report.kill_us),
        report.scale,
        if report.spread {
            "spread"
        } else {
            "all on node 0"
        },
        seconds(report.simulated_us),
        report.wall_s
    );
    let after = |at: u64| seconds(at.saturating_sub(report.kill_us));
    let changed = report.changed();
    let _ = writeln!(
        out,
        "{} of {} groups changed view",
        changed.len(),
        report.elections.len()
    );
    for e in &report.elections {
        let _ = writeln!(
            out,
            "  {:<28} view {} (node {}) -> {}; last commit heard {}; write gap {}",
            e.label,
            e.old_view,
            e.old_primary,
            match (e.elected_us, e.new_primary) {
                (Some(at), Some(p)) => format!(
                    "node {p} at {} s ({} s after the last commit heard)",
                    after(at),
                    e.last_heard_us
                        .map_or_else(|| "?".into(), |h| seconds(at.saturating_sub(h)))
                ),
                _ => "unchanged".into(),
            },
            e.last_heard_us.map_or_else(
                || "never".into(),
                |h| format!("{:.3} s", (h as f64 - report.kill_us as f64) / 1e6)
            ),
            e.write_gap_us
                .map_or_else(|| "-".into(), |g| format!("{} s", seconds(g)))
        );
    }
    let not_committed = report
        .failed
        .iter()
        .filter(|f| f.outcome == Outcome::TransientNotCommitted)
        .count();
    let _ = writeln!(
        out,
        "sends: {} acknowledged, {} failed ({} TransientNotCommitted, {} TransientNotAccepted)",
        report.committed,
        report.failed.len(),
        not_committed,
        report.failed.len() - not_committed
    );
    for f in report.failed.iter().take(6) {
        let _ = writeln!(
            out,
            "  {} request {}: sent {} s, {:?} at {} s",
            f.label,
            f.request,
            after(f.sent_us),
            f.outcome,
            after(f.done_us)
        );
    }
    let stalled = report.consumed.iter().filter(|(_, a, b)| b <= a).count();
    if !report.consumed.is_empty() {
        let _ = writeln!(
            out,
            "consumers: {} of {} read on past the kill; {} offset stores acknowledged",
            report.consumed.len() - stalled,
            report.consumed.len(),
            report.offset_stores
        );
    }
    let _ = writeln!(
        out,
        "integrity: {}",
        match &report.integrity {
            Ok(n) if report.consumed.is_empty() => {
                format!("{n} acknowledged batches on every survivor, none twice")
            }
            Ok(n) => format!(
                "{n} acknowledged batches on every survivor, none twice; every consumer's \
                 acknowledged offset stored"
            ),
            Err(e) => format!("FAILED: {e}"),
        }
    );
    out
}

/// A restart's timeline (times in seconds after the new process started).
#[must_use]
pub fn render_restart(report: &RestartReport) -> String {
    let mut out = render_kill(&report.kill);
    let _ = writeln!(
        out,
        "restart node 0 at {} s ({} s after the kill)",
        seconds(report.restart_us),
        seconds(report.restart_us - report.kill.kill_us)
    );
    let after =
        |at: Option<u64>| at.map_or_else(|| "never".into(), |a| seconds(a - report.restart_us));
    if let Some(bytes) = report.ring_bytes {
        let _ = writeln!(
            out,
            "rings of {bytes} B of bodies (3.2 s of a partition's load)"
        );
    }
    let _ = writeln!(
        out,
        "repair: at most {} new sessions a tick, {} open at once, {} groups asking in one tick; \
         first prepare at {} s; {} rounds read from the peers' disks ({} prepares); {} \
         RangeEvicted{}",
        report.ration_peaks.0,
        report.ration_peaks.1,
        report.peak_repair_senders,
        after(report.first_repair_us),
        report.disk_reads.0,
        report.disk_reads.1,
        report.range_evicted,
        if report.behind_ring > 0 {
            format!(
                "; {} groups left behind every peer's ring",
                report.behind_ring
            )
        } else {
            String::new()
        }
    );
    let started: u64 = report.transfers.iter().map(|t| t.1).sum();
    let installed: u64 = report.transfers.iter().map(|t| t.2).sum();
    let installs: Vec<u64> = report.transfers.iter().filter_map(|t| t.3).collect();
    let _ = writeln!(
        out,
        "state transfer: {started} started, {installed} installed by {} groups (first at {} s, \
         last at {} s); {} RangeEvicted after an install",
        installs.len(),
        after(installs.iter().min().copied()),
        after(installs.iter().max().copied()),
        report.evicted_after_install
    );
    for r in &report.recovered {
        let discarded = report
            .discarded
            .get(&r.label.replace(" (persisted)", ""))
            .copied()
            .unwrap_or(0);
        let missed = if r.missed_bytes == r.lacked_bytes {
            String::new()
        } else {
            format!(
                " (missed about {} B, fetched {} of it)",
                r.missed_bytes,
                ratio(r.fetched_bytes, r.missed_bytes)
            )
        };
        let _ = writeln!(
            out,
            "  {:<28} discarded {:>10} B; normal at {} s; caught up at {} s; lacked {} B, \
             fetched {} B ({}){missed}",
            r.label,
            discarded,
            after(r.adopted_us),
            after(r.caught_up_us),
            r.lacked_bytes,
            r.fetched_bytes,
            ratio(r.fetched_bytes, r.lacked_bytes)
        );
    }
    let last = report
        .recovered
        .iter()
        .map(|r| r.caught_up_us)
        .collect::<Option<Vec<u64>>>()
        .and_then(|all| all.into_iter().max());
    let _ = writeln!(
        out,
        "timeline: first repair prepare at {} s, last group caught up at {} s",
        after(report.first_repair_us),
        after(last)
    );
    let lacked: u64 = report.recovered.iter().map(|r| r.lacked_bytes).sum();
    let fetched: u64 = report.recovered.iter().map(|r| r.fetched_bytes).sum();
    let _ = writeln!(
        out,
        "repair fetched {fetched} B for {lacked} B lacked after boot ({}); the worst group {}",
        ratio(fetched, lacked),
        report
            .recovered
            .iter()
            .filter(|r| r.lacked_bytes > 0)
            .map(|r| r.fetched_bytes as f64 / r.lacked_bytes as f64)
            .fold(None, |worst: Option<f64>, x| Some(
                worst.map_or(x, |w| w.max(x))
            ))
            .map_or_else(|| "-".into(), |w| format!("{w:.2}x"))
    );
    let _ = writeln!(
        out,
        "integrity: {}",
        match &report.integrity {
            Ok(n) => format!("{n} acknowledged batches on all three nodes, none twice"),
            Err(e) => format!("FAILED: {e}"),
        }
    );
    out
}

/// A power loss's account.
#[must_use]
pub fn render_power_loss(report: &PowerLossReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "every node loses power at {} s ({} partitions)",
        seconds(report.loss_us),
        if report.persisted {
            "persisted"
        } else {
            "replicated"
        }
    );
    let _ = writeln!(
        out,
        "acknowledged before the loss: {}; above every node's newest publication: {}; lost: {}; \
         lost though published somewhere: {}; on all three nodes afterwards: {}",
        report.acknowledged,
        report.unpublished_everywhere,
        report.lost,
        report.lost_published.len(),
        report.held_everywhere
    );
    match report.metadata_rank() {
        Some((0, _)) => {
            let _ = writeln!(out, "the metadata group was back first");
        }
        Some((rank, behind)) => {
            let _ = writeln!(
                out,
                "the metadata group was back {} of {}, {} s after the first group: every \
                 group's probes run out in the same tick (the metadata group's first, it is \
                 ticked first), then the elections run side by side and finish in the order \
                 of their messages' and disks' latencies; no partition's election waits for \
                 the metadata group",
                rank + 1,
                report.resumed.len(),
                seconds(behind)
            );
        }
        None => {
            let _ = writeln!(out, "the metadata group did not come back");
        }
    }
    for (label, at, probed) in &report.resumed {
        let _ = writeln!(
            out,
            "  {:<28} normal on every node at {}{}",
            label,
            at.map_or_else(
                || "never".into(),
                |a| format!("{} s after", seconds(a - report.loss_us))
            ),
            if *probed {
                " (after unanswered probes)"
            } else {
                ""
            }
        );
    }
    out
}
