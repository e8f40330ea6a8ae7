//! One replica of one group: the protocol of `docs/vsr.md`, as a value. Inputs are [`tick`],
//! [`on_message`] and [`on_completion`]; each returns nothing and leaves effects to
//! [`take_effects`]. In-memory state that depends on a durable step changes only when that step
//! completes, and records exactly what was written.
//!
//! This file holds the replica's state, its inputs and the step that follows every input
//! ([`Replica::drive`]); what checkers and hosts may read is in [`observe`]; each protocol
//! concept has a file of its own: [`primary`] (requests,
//! prepares, acknowledgments, the commit point), [`backup`] (prepares and commits of the view's
//! primary, acknowledgments), [`chain`] (what the hash chain proves, cuts), [`commit`]
//! (execution and replies), [`repair`], [`view_change`], [`view_start`] (a merged or adopted
//! log's durable steps, `StartView`), [`recovery`] (a restarted replica's probes); the merge
//! and the storage prefix kept are pure functions in [`crate::merge`], the safeguards in
//! [`crate::safeguards`], the client table in [`crate::clients`].
//!
//! [`tick`]: Replica::tick
//! [`on_message`]: Replica::on_message
//! [`on_completion`]: Replica::on_completion
//! [`take_effects`]: Replica::take_effects

mod ack_bound;
mod backup;
mod chain;
mod commit;
mod observe;
mod primary;
mod read;
mod recovery;
mod repair;
mod transfer;
mod view_change;
mod view_start;

use std::collections::{BTreeMap, VecDeque};

use iggy_format::{Checksum, Header};

use crate::clients::{ClientTable, Session};
use crate::config::Config;
use crate::effect::{ACK_BOUND_UNKNOWN, Destination, Durable, Effect, EffectId, Outcome};
use crate::journal::Journal;
use crate::merge::Dvc;
use crate::message::{From, Message, SnapshotRef};
use crate::safeguards::Safeguards;

/// Which replica of which group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Identity {
    pub cluster: u128,
    pub group: u128,
    pub replica: u8,
    pub replicas: u8,
}

/// What the host recovered from storage when it (re)started the replica.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Boot {
    /// The superblock's view, log_view, commit_max and incarnation. An incarnation of 0 says the
    /// group has never booted (a new group): the replica starts in normal status and records
    /// its incarnation before it sends anything; any other means it may have sent messages in
    /// an earlier life, so it recovers.
    pub durable: Durable,
    /// The op storage has executed through (its boot's commit point: the superblock's, raised
    /// to what the journaled prepares prove).
    pub applied: u64,
    /// The storage log's head op and that entry's header checksum.
    pub head: u64,
    pub head_checksum: Checksum,
    /// The log's last entries, oldest first, ending at `head` (at least every one above
    /// `applied`; more, within the ring's caps, to serve repair).
    pub entries: Vec<(Header, Vec<u8>)>,
    /// Storage may lack entries this replica acknowledged before the restart: boot discards
    /// what was not published, and under replicated durability a backup acknowledges before
    /// the WAL publishes. (False for a group that publishes before it acknowledges.)
    pub forgot_acknowledged: bool,
    /// Storage was rebuilt empty after damage (`docs/recovery.md`, "A damaged partition"): the
    /// replica lacks whatever it acknowledged in this view and earlier ones, whatever its
    /// durability. Its log stands for no quorum until it starts a later view or rejoins this
    /// one, as after [`Boot::forgot_acknowledged`]. At most the superblock's log_view.
    pub forgotten_through: Option<u32>,
    /// This boot's incarnation (never 0): a restarted replica's probes carry it, and the answer
    /// must echo it.
    pub incarnation: u64,
    /// The client table as storage left it: each client's last committed request at or below
    /// `applied` and its reply, so a request replayed after the restart is answered, never
    /// executed twice.
    pub clients: Vec<(u128, Session)>,
}

/// The replica's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    Normal,
    ViewChange,
    /// Restarted: out of every quorum until a primary's `StartView` makes it a backup again.
    Recovering,
    /// A storage effect failed: silent until the host restarts it.
    Halted,
}

impl Status {
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Normal => "normal",
            Self::ViewChange => "view_change",
            Self::Recovering => "recovering",
            Self::Halted => "halted",
        }
    }
}

/// What the replica is doing: its status, refined by its role and whether a view start is under
/// way. Every rule that depends on "a backup in normal status whose view started here" asks this.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Normal status, primary of a view that started here: takes requests, prepares, commits.
    Primary,
    /// Normal status, backup of a view that started here: journals, acknowledges, repairs.
    Backup,
    /// Normal status, carrying an adopted `StartView` through its durable steps: silent.
    Adopting,
    /// A view change, not (or not yet) as the new primary with a merged log.
    ViewChange,
    /// A view change as the new primary, carrying its merged log through the body fetch and
    /// the durable steps.
    Merging,
    Recovering,
    Halted,
}

/// A storage effect in flight, by id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pending {
    Superblock(Durable),
    Prepare,
    Journal(u64),
    Truncate(u64),
    Publish(u64),
    Commit(u64),
    /// A chunk of a snapshot staged, at its offset.
    SnapshotChunk(SnapshotRef, u64),
    Install(SnapshotRef),
}

/// What the primary knows of a prepare it has not committed yet.
#[derive(Clone, Debug)]
pub(crate) struct Inflight {
    /// Replicas that acknowledged it (a bit per replica).
    pub acks: u64,
    /// When it was last sent to each backup.
    pub sent_at: Vec<u64>,
}

/// How a view is being started: the merged log (new primary) or an adopted `StartView` (backup).
#[derive(Clone, Debug)]
pub(crate) struct Starting {
    pub view: u32,
    /// The head and commit point of the view's log.
    pub head: u64,
    pub commit: u64,
    pub commit_checksum: Checksum,
    /// The headers above the commit point (inserted once the log_view is durable, for a backup;
    /// at once, for the new primary).
    pub headers: Vec<Header>,
    /// What the storage must keep: everything after this op is truncated first.
    pub keep: u64,
    /// Bodies this replica held of the view's headers (inserted with them).
    pub held: Vec<(Header, Vec<u8>)>,
    pub truncated: bool,
    pub publish: Option<EffectId>,
    pub published: bool,
    pub primary: bool,
}

/// The view change in progress.
#[derive(Clone, Debug, Default)]
pub(crate) struct ViewChange {
    pub started_at: u64,
    pub svc_from: u64,
    pub svc_sent_at: Option<u64>,
    pub dvc: Option<Message>,
    pub dvc_sent_at: Option<u64>,
    pub dvcs: BTreeMap<u8, Dvc>,
    /// Replicas that can serve each op the merge needs (new primary only).
    pub sources: BTreeMap<u64, u64>,
    pub merged: bool,
}

/// Counters of what the replica dropped or refused, by reason.
pub type Counters = BTreeMap<&'static str, u64>;

/// One replica of one group.
#[derive(Debug)]
pub struct Replica {
    config: Config,
    safeguards: Safeguards,
    id: Identity,
    status: Status,
    view: u32,
    /// The view of the log the replica holds (may be written to the superblock: its log was
    /// published).
    log_view: u32,
    durable: Durable,
    /// The log_view this replica booted with when the boot lost acknowledged entries: it may
    /// have acknowledged any op of the views up to this one and no longer hold it.
    forgotten_view: Option<u32>,
    /// With a forgotten view: the highest op the replica may have acknowledged in its earlier
    /// lives (its superblock's acknowledgment bound at boot); `None`: unbounded.
    forgotten_bound: Option<u64>,
    /// The group acknowledges what its WAL has not published (replicated durability), so it
    /// keeps an acknowledgment bound (`ack_bound.rs`).
    forgets: bool,
    /// The acknowledgment bound asked for (written, or to be).
    ack_bound_wanted: u64,
    ack_rate: ack_bound::AckRate,
    /// The head named by the `StartView` that answered this life's probe in the view it forgot
    /// (`recovery.rs`): journaled through it, the replica holds every op it acknowledged there.
    rejoined_through: Option<u64>,
    superblock: Option<(EffectId, Durable)>,
    superblock_next: Option<Durable>,
    journal: Journal,
    commit_min: u64,
    commit_max: u64,
    /// Entries of its own storage a view start cut (they could not be checked against the
    /// adopted log), kept in memory as candidates: the hash chain proves one when the view's
    /// next entry names it as parent, and it is journaled again without being fetched
    /// (`chain.rs`); it is dropped when the chain names another.
    candidates: BTreeMap<u64, (Header, Vec<u8>)>,
    /// A known checksum without its header: the primary's commit point.
    anchor: Option<(u64, Checksum)>,
    /// The commit effect in flight and the op it executes through.
    committing: Option<(EffectId, u64)>,
    pending: BTreeMap<EffectId, Pending>,
    next_id: EffectId,
    ticks: u64,
    effects: Vec<Effect>,
    // Primary.
    pipeline: BTreeMap<u64, Inflight>,
    /// Requests handed to storage as prepares: (effect, client, request, request checksum,
    /// body bytes).
    prepares_in_flight: VecDeque<(EffectId, u128, u64, u128, u64)>,
    /// Body bytes of new requests the host lets this replica add to what its pipeline holds
    /// ([`Replica::set_pipeline_room`]): a node's budget over all the groups it leads.
    pipeline_room: u64,
    commit_broadcast_at: u64,
    // Backup.
    heartbeat_at: u64,
    /// The commit point the last reset of the liveness window saw (`commit-stall`).
    heartbeat_commit: u64,
    acked_through: u64,
    // View change and view start.
    view_change: ViewChange,
    starting: Option<Starting>,
    // Recovering.
    incarnation: u64,
    probe_at: u64,
    probes: u32,
    /// Storage refused a journal write for want of room (`journal_refused`): the tick from
    /// which the bodies are handed it again. Cleared by the next journal that completes.
    journal_retry_at: Option<u64>,
    // Repair.
    repair_at: u64,
    /// Whether the node's ration lets it ask peers this tick (a replica on its own: always).
    repair_permitted: bool,
    repair_source: u8,
    /// The rounds asked whose last op has not arrived, oldest first (at most 8).
    repair_rounds: Vec<repair::Round>,
    /// When an answer of any of them last arrived. While answers keep coming, no round that
    /// overlaps one of them is asked (see `repair`).
    repair_heard: u64,
    unverified: BTreeMap<u64, (Header, Vec<u8>)>,
    /// The peers that answered this replica's repair with `RangeEvicted` at the storage head
    /// it had then (a mask, and that head).
    evicted_by: (u64, u64),
    /// When a replica behind every peer's ring next probes one of them.
    behind_probe_at: u64,
    /// A snapshot transfer in progress (`transfer.rs`).
    transfer: Option<transfer::Transfer>,
    clients: ClientTable,
    counters: Counters,
    /// Reads waiting for their read index (`read.rs`).
    reads: read::Reads,
}

pub(crate) fn bit(replica: u8) -> u64 {
    1u64 << replica
}

impl Replica {
    /// A replica of group `id` booted from `boot`.
    ///
    /// # Panics
    /// On a configuration out of bounds, an identity with no such replica, or an incarnation
    /// of 0.
    #[must_use]
    pub fn new(config: Config, safeguards: Safeguards, id: Identity, boot: Boot) -> Self {
        let config = config.checked();
        assert!(id.replicas >= 1 && id.replicas <= 64 && id.replica < id.replicas);
        assert!(boot.incarnation != 0, "an incarnation is never 0");
        let mut journal = Journal::new(
            boot.entries
                .first()
                .map_or(boot.head, |(h, _)| h.op.saturating_sub(1)),
            boot.entries
                .first()
                .map_or(boot.head_checksum, |(h, _)| h.parent),
        );
        let mut proven = 0;
        for (header, body) in boot.entries {
            proven = proven.max(header.commit.min(header.op.saturating_sub(1)));
            journal.insert(header, Some(body));
        }
        journal.storage_head = boot.head;
        journal.journaled_head = boot.head;
        // A group that never booted sent nothing in an earlier life; any other may have.
        let fresh = boot.durable.incarnation == 0;
        let status = if fresh {
            Status::Normal
        } else {
            Status::Recovering
        };
        let mut clients = ClientTable::new(config.clients_max);
        let mut sessions = boot.clients;
        sessions.sort_by_key(|(client, s)| (s.op, *client));
        for (client, session) in sessions {
            clients.record(client, session);
        }
        let mut commit_max = boot.durable.commit_max.max(boot.applied);
        if safeguards.durable_commit_point {
            commit_max = commit_max.max(proven.min(boot.head));
        }
        let mut replica = Self {
            clients,
            probe_at: config.request_start_view_delay_ticks,
            heartbeat_at: config.heartbeat_timeout_ticks,
            heartbeat_commit: 0,
            config,
            safeguards,
            id,
            status,
            view: boot.durable.view,
            log_view: boot.durable.log_view,
            durable: boot.durable,
            forgotten_view: (!fresh && boot.forgot_acknowledged)
                .then_some(boot.durable.log_view)
                .max(boot.forgotten_through.map(|v| v.min(boot.durable.log_view))),
            // A rebuilt partition forgot everything it held, bound or not.
            forgotten_bound: (boot.forgotten_through.is_none()
                && boot.durable.ack_bound != ACK_BOUND_UNKNOWN)
                .then_some(boot.durable.ack_bound),
            forgets: boot.forgot_acknowledged,
            ack_bound_wanted: boot.durable.ack_bound,
            ack_rate: ack_bound::AckRate::default(),
            rejoined_through: None,
            superblock: None,
            superblock_next: None,
            journal,
            commit_min: boot.applied,
            commit_max,
            candidates: BTreeMap::new(),
            anchor: None,
            committing: None,
            pending: BTreeMap::new(),
            // Ids of this life never name an effect of an earlier one (whose completion may
            // still arrive at a host that did not drop it).
            next_id: (boot.incarnation << 32) | 1,
            ticks: 0,
            effects: Vec::new(),
            pipeline: BTreeMap::new(),
            prepares_in_flight: VecDeque::new(),
            pipeline_room: u64::MAX,
            commit_broadcast_at: 0,
            acked_through: boot.applied,
            view_change: ViewChange::default(),
            starting: None,
            incarnation: boot.incarnation,
            probes: 0,
            journal_retry_at: None,
            repair_at: 0,
            repair_permitted: true,
            repair_source: 0,
            repair_rounds: Vec::new(),
            repair_heard: 0,
            unverified: BTreeMap::new(),
            evicted_by: (0, 0),
            behind_probe_at: 0,
            transfer: None,
            counters: Counters::new(),
            reads: read::Reads::new(id.replicas),
        };
        if fresh {
            // Recorded before anything is sent: a restart after this boot recovers.
            replica.write_superblock();
        }
        if replica.phase() == Phase::Primary {
            let head = replica.journal.head();
            for op in replica.commit_max + 1..=head {
                replica.pipeline.insert(
                    op,
                    Inflight {
                        acks: bit(id.replica),
                        sent_at: vec![0; usize::from(id.replicas)],
                    },
                );
            }
        }
        replica.drive();
        replica
    }

    /// The effects emitted since the last call.
    pub fn take_effects(&mut self) -> Vec<Effect> {
        std::mem::take(&mut self.effects)
    }

    // ---- shared helpers ----

    pub(crate) fn phase(&self) -> Phase {
        match self.status {
            Status::Halted => Phase::Halted,
            Status::Recovering => Phase::Recovering,
            Status::ViewChange => {
                if self.starting.as_ref().is_some_and(|s| s.primary) {
                    Phase::Merging
                } else {
                    Phase::ViewChange
                }
            }
            Status::Normal => {
                if self.starting.is_some() {
                    Phase::Adopting
                } else if self.is_primary() {
                    Phase::Primary
                } else {
                    Phase::Backup
                }
            }
        }
    }

    fn count(&mut self, what: &'static str) {
        *self.counters.entry(what).or_default() += 1;
    }

    fn from(&self) -> From {
        From {
            cluster: self.id.cluster,
            group: self.id.group,
            replica: self.id.replica,
            view: self.view,
        }
    }

    /// Whether a group that never booted has recorded that it has: until then it sends
    /// nothing (a restart must find it recovering).
    fn marked(&self) -> bool {
        self.durable.incarnation != 0
    }

    fn send(&mut self, to: u8, message: Message) {
        if to == self.id.replica {
            return;
        }
        if !self.marked() {
            self.count("send_before_first_boot_recorded");
            return;
        }
        self.effects.push(Effect::Send {
            to: Destination::Replica(to),
            message,
        });
    }

    fn reply(&mut self, client: u128, message: Message) {
        if !self.marked() {
            self.count("send_before_first_boot_recorded");
            return;
        }
        self.effects.push(Effect::Send {
            to: Destination::Client(client),
            message,
        });
    }

    fn broadcast(&mut self, message: &Message) {
        for to in 0..self.id.replicas {
            if to != self.id.replica {
                self.send(to, message.clone());
            }
        }
    }

    fn storage(&mut self, make: impl FnOnce(EffectId) -> Effect, pending: Pending) -> EffectId {
        let id = self.next_id;
        self.next_id += 1;
        self.pending.insert(id, pending);
        self.effects.push(make(id));
        id
    }

    /// Asks for `durable` to be written (after the write in flight, if any; a newer request
    /// replaces an older one not yet issued).
    fn write_superblock(&mut self) {
        // The commit point goes to the superblock with a view's steps, whose publications keep
        // it within the durable log. A write that only raises the acknowledgment bound (the
        // same view and log_view) leaves it: written with every raise, it ran ahead of what
        // the WAL had published, and after every node was killed (replicated durability then
        // loses the suffix nobody published) a boot's commit point named ops no log held any
        // more: reads waited on a read index past the log (`server/tests/kill.rs`).
        let same_view = self.marked()
            && self.view == self.durable.view
            && self.log_view == self.durable.log_view;
        let wanted = Durable {
            view: self.view,
            log_view: self.log_view,
            commit_max: if same_view {
                self.durable.commit_max
            } else {
                self.commit_max.max(self.durable.commit_max)
            },
            // The first boot's, once recorded: it marks a group that has booted.
            incarnation: if self.marked() {
                self.durable.incarnation
            } else {
                self.incarnation
            },
            ack_bound: self.ack_bound_wanted.max(self.durable.ack_bound),
        };
        if self.superblock.is_some() {
            self.superblock_next = Some(wanted);
            return;
        }
        if wanted == self.durable {
            return;
        }
        let id = self.storage(
            |id| Effect::WriteSuperblock {
                id,
                durable: wanted,
            },
            Pending::Superblock(wanted),
        );
        self.superblock = Some((id, wanted));
    }

    /// Whether the superblock holds `view` (and, with `log_view`, that as the log_view).
    fn durable_in(&self, view: u32, log_view: bool) -> bool {
        if !self.safeguards.durable_view_gate {
            return true;
        }
        self.durable.view >= view && (!log_view || self.durable.log_view >= view)
    }

    /// The highest op executed or being executed: committed, never cut.
    fn executed(&self) -> u64 {
        self.committing
            .map_or(self.commit_min, |(_, through)| through.max(self.commit_min))
    }

    /// Raises the commit point to what `header` proves: its primary had committed every op up
    /// to its `commit` (the hash chain makes this log's prefix that primary's).
    fn learn_commit(&mut self, header: &Header) {
        if self.safeguards.durable_commit_point {
            self.commit_max = self
                .commit_max
                .max(header.commit.min(header.op.saturating_sub(1)));
        }
    }

    // ---- inputs ----

    /// One tick of the replica's clock.
    pub fn tick(&mut self) {
        self.ticks += 1;
        match self.phase() {
            Phase::Halted => return,
            Phase::Primary => self.primary_tick(),
            Phase::Backup | Phase::Adopting => {
                if self.ticks >= self.heartbeat_at {
                    self.count("heartbeat_timeout");
                    self.start_view_change(self.view + 1);
                } else if self.phase() == Phase::Backup {
                    self.repair_tick();
                }
            }
            Phase::ViewChange | Phase::Merging => self.view_change_tick(),
            Phase::Recovering => self.recovering_tick(),
        }
        self.reads_tick();
        self.ack_rate_tick();
        self.publish_tick();
        self.drive();
    }

    /// A message arrived (already decoded and verified).
    pub fn on_message(&mut self, message: Message) {
        if self.status == Status::Halted {
            return;
        }
        let (cluster, group) = message.cluster_and_group();
        if cluster != self.id.cluster || group != self.id.group {
            self.count("wrong_group");
            return;
        }
        if let Some(from) = message.sender()
            && (from.replica >= self.id.replicas || from.replica == self.id.replica)
        {
            self.count("bad_sender");
            return;
        }
        match message {
            Message::Prepare { header, body } => self.on_prepare(header, body),
            Message::PrepareOk { from, op, checksum } => self.on_prepare_ok(from, op, checksum),
            Message::Commit {
                from,
                commit,
                checksum,
            } => self.on_commit(from, commit, checksum),
            Message::StartViewChange { from } => self.on_start_view_change(from),
            Message::DoViewChange {
                from,
                log_view,
                op,
                commit,
                commit_checksum,
                headers,
                forgotten_view,
                forgotten_bound,
            } => self.on_do_view_change(
                from,
                Dvc {
                    log_view,
                    op,
                    commit,
                    commit_checksum,
                    headers: headers.into_iter().map(|h| (h.header.op, h)).collect(),
                    forgotten_view,
                    forgotten_bound,
                },
            ),
            Message::StartView {
                from,
                op,
                commit,
                commit_checksum,
                nonce,
                headers,
            } => self.on_start_view(from, op, commit, commit_checksum, nonce, headers),
            Message::RequestStartView { from, nonce } => self.on_request_start_view(from, nonce),
            Message::RequestPrepares { from, first, last } => {
                self.on_request_prepares(from, first, last);
            }
            Message::RangeEvicted { from, oldest } => self.on_range_evicted(from, oldest),
            Message::RequestSnapshot { from, offset } => self.on_request_snapshot(from, offset),
            Message::SnapshotChunk {
                from,
                snapshot,
                offset,
                bytes,
            } => self.on_snapshot_chunk(from, snapshot, offset, bytes),
            Message::Request {
                client,
                request,
                operation,
                body,
                ..
            } => self.on_request(client, request, operation, body),
            Message::ReadIndex { from, nonce } => self.on_read_index(from, nonce),
            Message::ReadIndexOk {
                from,
                nonce,
                commit,
                checksum,
            } => self.on_read_index_ok(from, nonce, commit, checksum),
            Message::ReadRound { from, nonce } => self.on_read_round(from, nonce),
            Message::ReadRoundOk { from, nonce } => self.on_read_round_ok(from, nonce),
            Message::Reply { .. } => self.count("reply_to_replica"),
            Message::Ping { .. } => self.count("ping_to_replica"),
        }
        self.drive();
    }

    /// A storage effect completed.
    pub fn on_completion(&mut self, id: EffectId, outcome: Outcome) {
        let Some(pending) = self.pending.remove(&id) else {
            return;
        };
        if self.status == Status::Halted {
            return;
        }
        if let Outcome::Failed(_) = outcome {
            self.count("storage_failed");
            self.halt();
            return;
        }
        if matches!(
            (&pending, &outcome),
            (Pending::Journal(_), Outcome::Refused(_))
        ) && !self.safeguards.journal_refusal
        {
            // Without `journal-refusal`: a refused journal write is a storage failure.
            self.count("storage_failed");
            self.halt();
            return;
        }
        // Each effect ends one way; any other answer is the host's bug, and reasoning on from
        // it (a prepare's op never appended, say) would desynchronise the log: stop.
        let expected = match (pending, &outcome) {
            (Pending::Prepare, Outcome::Prepared { .. } | Outcome::Refused(_))
            | (Pending::Journal(_), Outcome::Done | Outcome::Refused(_))
            | (Pending::Commit(_), Outcome::Committed { .. })
            | (Pending::SnapshotChunk(..), Outcome::Done | Outcome::Refused(_))
            | (Pending::Install(_), Outcome::Installed { .. } | Outcome::Refused(_)) => true,
            (
                Pending::Prepare
                | Pending::Commit(_)
                | Pending::SnapshotChunk(..)
                | Pending::Install(_),
                _,
            ) => false,
            (_, outcome) => *outcome == Outcome::Done,
        };
        if !expected {
            self.count("outcome_of_another_effect");
            self.halt();
            return;
        }
        match pending {
            Pending::Superblock(written) => {
                self.superblock = None;
                self.durable = written;
                self.ack_bound_written();
                if self.superblock_next.take().is_some() {
                    self.write_superblock();
                }
            }
            Pending::Prepare => self.on_prepared(id, outcome),
            Pending::Journal(op) => {
                if !self.truncated_later(id, op) && op == self.journal.journaled_head + 1 {
                    if outcome == Outcome::Done {
                        self.journal.journaled_head = op;
                        self.journal_retry_at = None;
                    } else {
                        self.journal_refused(op);
                    }
                }
            }
            Pending::Truncate(after) => {
                if let Some(starting) = &mut self.starting
                    && starting.keep == after
                {
                    starting.truncated = true;
                }
            }
            Pending::Publish(_) => {
                if let Some(starting) = &mut self.starting
                    && starting.publish == Some(id)
                {
                    starting.published = true;
                }
            }
            Pending::SnapshotChunk(snapshot, offset) => {
                self.on_chunk_staged(snapshot, offset, outcome == Outcome::Done);
            }
            Pending::Install(snapshot) => {
                let clients = match outcome {
                    Outcome::Installed { clients } => Some(clients),
                    _ => None,
                };
                self.on_installed(snapshot, clients);
            }
            Pending::Commit(through) => {
                self.committing = None;
                self.commit_min = self.commit_min.max(through);
                if let Outcome::Committed { replies } = outcome {
                    self.on_committed(replies);
                }
            }
        }
        self.drive();
    }

    fn halt(&mut self) {
        self.status = Status::Halted;
        self.effects.clear();
    }

    /// Whether a truncate issued after effect `id` drops `op` (storage completes its lane in
    /// order, so the entry `id` wrote is gone once that truncate runs).
    fn truncated_later(&self, id: EffectId, op: u64) -> bool {
        self.pending
            .range(id + 1..)
            .any(|(_, p)| matches!(p, Pending::Truncate(after) if op > *after))
    }

    // ---- the state-driven step after every input ----

    fn drive(&mut self) {
        if self.status == Status::Halted {
            return;
        }
        self.verify_unverified();
        self.journal_bodies();
        self.progress_view_change();
        self.progress_start();
        self.raise_ack_bound();
        self.acknowledge();
        self.restore_acknowledgments();
        self.commit();
        self.progress_reads();
        self.journal.evict(
            self.commit_min,
            self.config.ring_entries_max,
            self.config.ring_bytes_max,
        );
    }
}
