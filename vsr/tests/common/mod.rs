//! A hand-driven cluster for the replica's unit tests: each replica has an in-memory log and
//! superblock, its storage effects queue on its lane and complete only when the test says so
//! (so a race between a commit in flight and a view start can be staged exactly), and messages
//! wait in one outbox until the test delivers, drops or holds them. The storage refuses what the
//! storage crates refuse (a journal that does not extend the log, a cut below what executed).
#![allow(
    dead_code,
    clippy::unwrap_used,
    reason = "test code: each test uses a subset; a failed unwrap is a failed test"
)]

use std::collections::VecDeque;

use iggy_format::{Checksum, Header, Position, PrepareMeta, operation};
use iggy_vsr::{
    ACK_BOUND_UNKNOWN, Boot, Config, Destination, Durable, Effect, Identity, Message, Outcome,
    Replica, Safeguards, Session,
};

pub const CLUSTER: u128 = 7;
pub const GROUP: u128 = 9;

/// A log of prepares with their bodies, op 1 first.
pub type Log = Vec<(Header, Vec<u8>)>;

/// One replica and its in-memory storage.
pub struct Node {
    pub replica: Replica,
    /// The journaled log, op 1 first.
    pub log: Vec<(Header, Vec<u8>)>,
    pub superblock: Durable,
    /// Executed through.
    pub executed: u64,
    pub lane: VecDeque<Effect>,
    /// Storage refusals (what the real storage would have failed with).
    pub refused: Vec<String>,
    /// The oldest op its log still holds for a peer's repair read from disk (retention deleted
    /// the ones below): 1 keeps everything.
    pub retained_from: u64,
    /// The answers to the host's reads: (token, ready, the op storage had executed through
    /// when the answer came).
    pub reads: Vec<(u64, bool, u64)>,
    /// Booted as a group of replicated durability (it keeps an acknowledgment bound).
    pub forgets: bool,
}

impl Node {
    pub fn head(&self) -> (u64, Checksum) {
        self.log
            .last()
            .map_or((0, 0), |(h, _)| (h.op, h.checksum()))
    }
}

/// Three replicas (or `replicas`) and the messages between them.
pub struct Cluster {
    pub nodes: Vec<Node>,
    /// (from, to, message) not yet delivered.
    pub outbox: VecDeque<(u8, Destination, Message)>,
    pub config: Config,
}

/// A chain of `n` prepares of `view` after `(after, parent)`, each naming `commit_lag` ops below
/// it as its primary's commit point.
pub fn chain(after: u64, parent: Checksum, n: u64, view: u32, seed: u8) -> Vec<(Header, Vec<u8>)> {
    let mut out = Vec::new();
    let mut parent = parent;
    for op in after + 1..=after + n {
        let body = vec![seed; 8];
        let header = Header::prepare(
            Position {
                cluster: CLUSTER,
                group: GROUP,
                after: op - 1,
                parent,
            },
            operation::MESSAGES,
            &PrepareMeta {
                view,
                commit: op.saturating_sub(2),
                replica: u8::try_from(u64::from(view) % 3).unwrap(),
                client: 0xC0,
                request: op,
                ..PrepareMeta::default()
            },
            &body,
        )
        .unwrap();
        parent = header.checksum();
        out.push((header, body));
    }
    out
}

impl Cluster {
    /// A new cluster whose replicas hold `logs` (journaled and, through `executed`, executed),
    /// each booting with `durable` (incarnation 0: a new group, in normal status; otherwise a
    /// restart, recovering, incarnation `100 + index`).
    pub fn new(
        logs: Vec<Vec<(Header, Vec<u8>)>>,
        durable: Durable,
        executed: u64,
        safeguards: Safeguards,
    ) -> Self {
        Self::with_config(logs, durable, executed, safeguards, Config::default())
    }

    /// [`Cluster::new`] with the replicas' `config`.
    pub fn with_config(
        logs: Vec<Vec<(Header, Vec<u8>)>>,
        durable: Durable,
        executed: u64,
        safeguards: Safeguards,
        config: Config,
    ) -> Self {
        let boots = logs
            .into_iter()
            .map(|log| (log, durable, executed))
            .collect();
        Self::with_boots(boots, safeguards, config)
    }

    /// A cluster whose replica `i` boots from `boots[i]`: its log, superblock and the op it
    /// executed through.
    pub fn with_boots(
        boots: Vec<(Log, Durable, u64)>,
        safeguards: Safeguards,
        config: Config,
    ) -> Self {
        let replicas = u8::try_from(boots.len()).unwrap();
        let nodes = boots
            .into_iter()
            .enumerate()
            .map(|(i, (log, durable, executed))| {
                let index = u8::try_from(i).unwrap();
                let head = log.last().map_or(0, |(h, _)| h.op);
                Node {
                    replica: boot_replica(
                        &config,
                        safeguards,
                        (index, replicas),
                        &log,
                        (durable, executed),
                        false,
                        100 + u64::from(index),
                    ),
                    log,
                    superblock: durable,
                    executed: executed.min(head),
                    lane: VecDeque::new(),
                    refused: Vec::new(),
                    retained_from: 1,
                    reads: Vec::new(),
                    forgets: false,
                }
            })
            .collect();
        let mut cluster = Self {
            nodes,
            outbox: VecDeque::new(),
            config,
        };
        for i in 0..cluster.nodes.len() {
            cluster.collect(i);
        }
        cluster
    }

    /// A new group of `replicas` empty replicas of replicated durability: each acknowledges what
    /// its storage has only queued, and so keeps an acknowledgment bound.
    pub fn replicated(replicas: usize, safeguards: Safeguards) -> Self {
        let boots = vec![(Vec::new(), Durable::default(), 0); replicas];
        let mut cluster = Self::with_boots(boots, safeguards, Config::default());
        cluster.outbox.clear();
        let count = u8::try_from(replicas).unwrap();
        for i in 0..replicas {
            let node = &mut cluster.nodes[i];
            node.lane.clear();
            node.forgets = true;
            node.replica = boot_replica(
                &cluster.config,
                safeguards,
                (u8::try_from(i).unwrap(), count),
                &node.log,
                (node.superblock, 0),
                true,
                100 + u64::try_from(i).unwrap(),
            );
            cluster.collect(i);
        }
        cluster
    }

    /// Restarts replica `i` from its storage, which keeps only the first `keep` entries of its
    /// log (the rest were unpublished): its queued effects and the messages on their way to it
    /// are gone, and it boots with incarnation `200 + i`, saying it forgot what it acknowledged
    /// when `forgot_acknowledged`.
    pub fn restart(
        &mut self,
        i: usize,
        keep: usize,
        forgot_acknowledged: bool,
        safeguards: Safeguards,
    ) {
        let index = u8::try_from(i).unwrap();
        let replicas = u8::try_from(self.nodes.len()).unwrap();
        let node = &mut self.nodes[i];
        node.log.truncate(keep);
        node.lane.clear();
        if forgot_acknowledged && !node.forgets {
            // It never kept an acknowledgment bound: what it forgot is unbounded.
            node.superblock.ack_bound = ACK_BOUND_UNKNOWN;
        }
        node.forgets = forgot_acknowledged;
        node.executed = node.executed.min(u64::try_from(keep).unwrap());
        node.replica = boot_replica(
            &self.config,
            safeguards,
            (index, replicas),
            &node.log,
            (node.superblock, node.executed),
            forgot_acknowledged,
            200 + u64::from(index),
        );
        self.outbox
            .retain(|(_, to, _)| !matches!(to, Destination::Replica(r) if *r == index));
        self.collect(i);
    }

    /// Moves replica `i`'s new effects: sends to the outbox, storage effects to its lane.
    pub fn collect(&mut self, i: usize) {
        let from = u8::try_from(i).unwrap();
        for effect in self.nodes[i].replica.take_effects() {
            match effect {
                Effect::Send { to, message } => self.outbox.push_back((from, to, message)),
                Effect::ReadPrepares {
                    to,
                    from: named,
                    first,
                    last,
                } => {
                    // The host's read from disk: what retention left of its log, byte for byte.
                    let oldest = self.nodes[i].retained_from;
                    if first < oldest {
                        let message = Message::RangeEvicted {
                            from: named,
                            oldest,
                        };
                        self.outbox
                            .push_back((from, Destination::Replica(to), message));
                    }
                    let first = first.max(oldest);
                    for (header, body) in &self.nodes[i].log {
                        if (first..=last).contains(&header.op) {
                            let message = Message::Prepare {
                                header: *header,
                                body: body.clone(),
                            };
                            self.outbox
                                .push_back((from, Destination::Replica(to), message));
                        }
                    }
                }
                // This harness keeps no snapshots: a peer's chunk read never comes back.
                Effect::ReadSnapshot { .. } => {}
                Effect::ReadBarrier { token, ready } => {
                    let executed = self.nodes[i].executed;
                    self.nodes[i].reads.push((token, ready, executed));
                }
                storage => self.nodes[i].lane.push_back(storage),
            }
        }
    }

    /// Completes the head of replica `i`'s lane; false when the lane is empty.
    pub fn complete_one(&mut self, i: usize) -> bool {
        let Some(effect) = self.nodes[i].lane.pop_front() else {
            return false;
        };
        let id = effect.id().unwrap();
        let outcome = execute(&mut self.nodes[i], effect);
        self.nodes[i].replica.on_completion(id, outcome);
        self.collect(i);
        true
    }

    /// Completes every storage effect of every replica (and what they cause) until none is left.
    pub fn settle_storage(&mut self) {
        loop {
            let mut any = false;
            for i in 0..self.nodes.len() {
                while self.complete_one(i) {
                    any = true;
                }
            }
            if !any {
                break;
            }
        }
    }

    /// Delivers every message in the outbox (and what they cause) whose (from, to, message)
    /// `keep` accepts; drops the others. Storage settles between deliveries.
    pub fn deliver_where(&mut self, mut keep: impl FnMut(u8, u8, &Message) -> bool) -> usize {
        let mut delivered = 0;
        for _ in 0..100_000 {
            self.settle_storage();
            let Some((from, to, message)) = self.outbox.pop_front() else {
                return delivered;
            };
            let Destination::Replica(to) = to else {
                continue;
            };
            if !keep(from, to, &message) {
                continue;
            }
            delivered += 1;
            let i = usize::from(to);
            self.nodes[i].replica.on_message(message);
            self.collect(i);
        }
        panic!("the messages never stopped");
    }

    pub fn deliver_all(&mut self) -> usize {
        self.deliver_where(|_, _, _| true)
    }

    /// `ticks` ticks of every replica, delivering messages (that `keep` accepts) after each.
    pub fn run(&mut self, ticks: u64, mut keep: impl FnMut(u8, u8, &Message) -> bool) {
        for _ in 0..ticks {
            for i in 0..self.nodes.len() {
                self.nodes[i].replica.tick();
                self.collect(i);
            }
            self.deliver_where(&mut keep);
        }
    }

    /// `ticks` ticks of the replicas in `replicas` only (the others are dead or frozen),
    /// delivering messages (that `keep` accepts) after each.
    pub fn run_some(
        &mut self,
        ticks: u64,
        replicas: std::ops::Range<usize>,
        mut keep: impl FnMut(u8, u8, &Message) -> bool,
    ) {
        for _ in 0..ticks {
            for i in replicas.clone() {
                self.nodes[i].replica.tick();
                self.collect(i);
            }
            self.deliver_where(&mut keep);
        }
    }

    /// Replica 0 (the primary) takes `requests` one every 100 ms (ten ticks), each delivered
    /// with what it causes before the next.
    pub fn requests_at_a_pace(&mut self, requests: std::ops::RangeInclusive<u64>) {
        for r in requests {
            self.nodes[0].replica.on_message(request(r));
            self.collect(0);
            self.deliver_all();
            self.run(10, |_, _, _| true);
        }
    }

    pub fn replica(&self, i: usize) -> &Replica {
        &self.nodes[i].replica
    }
}

/// Replica `index` of `replicas` booted from `log` (its storage), its superblock and the op it
/// executed through.
fn boot_replica(
    config: &Config,
    safeguards: Safeguards,
    (index, replicas): (u8, u8),
    log: &Log,
    (durable, executed): (Durable, u64),
    forgot_acknowledged: bool,
    incarnation: u64,
) -> Replica {
    let (head, head_checksum) = log.last().map_or((0, 0), |(h, _)| (h.op, h.checksum()));
    Replica::new(
        config.clone(),
        safeguards,
        Identity {
            cluster: CLUSTER,
            group: GROUP,
            replica: index,
            replicas,
        },
        Boot {
            durable,
            applied: executed.min(head),
            head,
            head_checksum,
            entries: log.clone(),
            forgot_acknowledged,
            forgotten_through: None,
            incarnation,
            clients: Vec::new(),
        },
    )
}

/// A client's request of `MESSAGES` with a small body.
pub fn request(request: u64) -> Message {
    Message::Request {
        cluster: CLUSTER,
        group: GROUP,
        client: 0xC1,
        request,
        operation: operation::MESSAGES,
        body: vec![7; 4],
    }
}

/// Carries out one storage effect on `node`'s in-memory storage, refusing what the storage
/// crates refuse.
fn execute(node: &mut Node, effect: Effect) -> Outcome {
    match effect {
        Effect::Send { .. }
        | Effect::ReadPrepares { .. }
        | Effect::ReadSnapshot { .. }
        | Effect::ReadBarrier { .. } => Outcome::Done,
        // This harness keeps no snapshots (its groups are configured without them).
        Effect::WriteSnapshotChunk { .. } | Effect::InstallSnapshot { .. } => {
            Outcome::Refused("no snapshots here".into())
        }
        Effect::WriteSuperblock { durable, .. } => {
            node.superblock = durable;
            Outcome::Done
        }
        Effect::Prepare {
            meta,
            operation,
            body,
            ..
        } => {
            let (after, parent) = node.head();
            let header = Header::prepare(
                Position {
                    cluster: CLUSTER,
                    group: GROUP,
                    after,
                    parent,
                },
                operation,
                &meta,
                &body,
            )
            .unwrap();
            node.log.push((header, body.clone()));
            Outcome::Prepared { header, body }
        }
        Effect::Journal { header, body, .. } => {
            let (head, checksum) = node.head();
            if header.op != head + 1 || header.parent != checksum {
                node.refused.push(format!(
                    "journal op {} does not extend the log at {head}",
                    header.op
                ));
                return Outcome::Failed("does not extend the log".into());
            }
            node.log.push((header, body));
            Outcome::Done
        }
        Effect::Truncate { after, .. } => {
            if after < node.executed {
                node.refused.push(format!(
                    "truncate after {after} below the commit point {}",
                    node.executed
                ));
                return Outcome::Failed("below the commit point".into());
            }
            node.log.truncate(usize::try_from(after).unwrap());
            Outcome::Done
        }
        Effect::Publish { .. } => Outcome::Done,
        Effect::Commit { through, .. } => {
            let mut replies = Vec::new();
            for op in node.executed + 1..=through {
                let (header, _) = &node.log[usize::try_from(op - 1).unwrap()];
                if header.client != 0 {
                    replies.push((op, op.to_le_bytes().to_vec()));
                }
            }
            node.executed = node.executed.max(through);
            Outcome::Committed { replies }
        }
    }
}

/// A session for `Boot::clients`.
pub fn session(request: u64, op: u64, reply: &[u8]) -> Session {
    Session {
        request,
        op,
        reply: reply.to_vec(),
        request_checksum: 0,
    }
}
