//! One replica of one group: the protocol of `docs/vsr.md`, as a value. Inputs are [`tick`],
//! [`on_message`] and [`on_completion`]; each returns nothing and leaves effects to
//! [`take_effects`]. In-memory state that depends on a durable step changes only when that step
//! completes, and records exactly what was written.
//!
//! [`tick`]: Replica::tick
//! [`on_message`]: Replica::on_message
//! [`on_completion`]: Replica::on_completion
//! [`take_effects`]: Replica::take_effects

use std::collections::{BTreeMap, VecDeque};

use iggy_format::{Checksum, Header, PrepareMeta};

use crate::clients::ClientTable;
use crate::config::{
    Config, HEADERS_MAX, REPAIR_BATCH_MAX, nack_quorum, replication_quorum, view_change_quorum,
};
use crate::effect::{Destination, Durable, Effect, EffectId, Outcome};
use crate::journal::Journal;
use crate::message::{From, Message, ReplyStatus, ViewHeader, frame_checksum};

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
    /// The superblock's view, log_view and commit_max.
    pub durable: Durable,
    /// The op storage has executed through.
    pub applied: u64,
    /// The storage log's head op and that entry's header checksum.
    pub head: u64,
    pub head_checksum: Checksum,
    /// The log's last entries, oldest first, ending at `head` (at least every one above
    /// `applied`; more, up to the ring's caps, to serve repair).
    pub entries: Vec<(Header, Vec<u8>)>,
    /// A replica of a new group starts in normal status; a restarted one recovers.
    pub restarted: bool,
    /// Storage may lack entries this replica acknowledged before the restart: boot discards
    /// what was not published, and under replicated durability a backup acknowledges before
    /// the WAL publishes. (False for a group that publishes before it acknowledges.)
    pub forgot_acknowledged: bool,
    /// This boot's incarnation: a restarted replica's probes carry it, and the answer must
    /// echo it.
    pub incarnation: u64,
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

/// The protocol's safeguards. Every one is on in production; the simulator turns one off at a
/// time to show that it finds the bug each prevents (`sim`, "safeguards").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Safeguards {
    /// No message naming a view leaves before the superblock holds it.
    pub durable_view_gate: bool,
    /// The agreed log is published before the superblock names its log_view.
    pub publish_before_log_view: bool,
    /// A header held above the commit point without its body counts as a nack.
    pub nack_header_without_body: bool,
    /// The new primary fetches the bodies it lacks before it starts the view.
    pub body_fetch: bool,
    /// The new primary's hole check starts at the lower of the merged commit point and what it
    /// has executed.
    pub hole_check_lower_bound: bool,
    /// A restarted replica takes only a `StartView` that echoes its incarnation (or a newer
    /// view's broadcast).
    pub incarnation_echo: bool,
    /// Adopting a log of the view the superblock already names as log_view keeps all of
    /// storage (up to the adopted head): this replica's acknowledgments in that view stay true.
    pub same_view_keeps_log: bool,
    /// A replica that restarted without what it acknowledged says so in its `DoViewChange`:
    /// no nack for an op of a view it forgot, and no quorum of the merge stands on its log
    /// until it has started a later view.
    pub forgotten_acknowledgments: bool,
}

impl Safeguards {
    /// The names of the safeguards, as `without` takes them.
    pub const NAMES: [&'static str; 8] = [
        "durable-view-gate",
        "publish-before-log-view",
        "nack-header-without-body",
        "body-fetch",
        "hole-check-lower-bound",
        "incarnation-echo",
        "same-view-keeps-log",
        "forgotten-acknowledgments",
    ];

    /// Every safeguard but the one named `name` (`None` for a name that is none of them).
    #[must_use]
    pub fn without(name: &str) -> Option<Self> {
        let mut s = Self::default();
        match name {
            "durable-view-gate" => s.durable_view_gate = false,
            "publish-before-log-view" => s.publish_before_log_view = false,
            "nack-header-without-body" => s.nack_header_without_body = false,
            "body-fetch" => s.body_fetch = false,
            "hole-check-lower-bound" => s.hole_check_lower_bound = false,
            "incarnation-echo" => s.incarnation_echo = false,
            "same-view-keeps-log" => s.same_view_keeps_log = false,
            "forgotten-acknowledgments" => s.forgotten_acknowledgments = false,
            _ => return None,
        }
        Some(s)
    }
}

impl Default for Safeguards {
    fn default() -> Self {
        Self {
            durable_view_gate: true,
            publish_before_log_view: true,
            nack_header_without_body: true,
            body_fetch: true,
            hole_check_lower_bound: true,
            incarnation_echo: true,
            same_view_keeps_log: true,
            forgotten_acknowledgments: true,
        }
    }
}

/// A storage effect in flight, by id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pending {
    Superblock(Durable),
    Prepare,
    Journal(u64),
    Truncate(u64),
    Publish(u64),
    Commit(u64),
}

/// What the primary knows of a prepare it has not committed yet.
#[derive(Clone, Debug)]
struct Inflight {
    /// Replicas that acknowledged it (a bit per replica).
    acks: u64,
    /// When it was last sent to each backup.
    sent_at: Vec<u64>,
}

/// A `DoViewChange` as the new primary keeps it.
#[derive(Clone, Debug)]
struct Dvc {
    log_view: u32,
    op: u64,
    commit: u64,
    commit_checksum: Checksum,
    headers: BTreeMap<u64, ViewHeader>,
    forgotten_view: Option<u32>,
}

impl Dvc {
    /// Whether the sender's log holds every op it acknowledged: it forgot nothing, or it has
    /// started a view after the ones it forgot.
    fn holds_its_acknowledgments(&self) -> bool {
        self.forgotten_view.is_none_or(|v| self.log_view > v)
    }

    /// Whether the sender lacking `header` proves it never acknowledged it.
    fn nacks_by_absence(&self, header: &Header) -> bool {
        self.forgotten_view.is_none_or(|v| header.view > v)
    }
}

/// How a view is being started: the merged log (new primary) or an adopted `StartView` (backup).
#[derive(Clone, Debug)]
struct Starting {
    view: u32,
    /// The head and commit point of the view's log.
    head: u64,
    commit: u64,
    commit_checksum: Checksum,
    /// The headers above the commit point (inserted once the log_view is durable, for a backup;
    /// at once, for the new primary).
    headers: Vec<Header>,
    /// What the storage must keep: everything after this op is truncated first.
    keep: u64,
    /// Bodies this replica held of the view's headers (inserted with them).
    held: Vec<(Header, Vec<u8>)>,
    truncated: bool,
    publish: Option<EffectId>,
    published: bool,
    primary: bool,
}

/// The view change in progress.
#[derive(Clone, Debug, Default)]
struct ViewChange {
    started_at: u64,
    svc_from: u64,
    svc_sent_at: Option<u64>,
    dvc: Option<Message>,
    dvc_sent_at: Option<u64>,
    dvcs: BTreeMap<u8, Dvc>,
    /// Replicas that can serve each op the merge needs (new primary only).
    sources: BTreeMap<u64, u64>,
    merged: bool,
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
    superblock: Option<(EffectId, Durable)>,
    superblock_next: Option<Durable>,
    journal: Journal,
    commit_min: u64,
    commit_max: u64,
    /// A known checksum without its header: the primary's commit point.
    anchor: Option<(u64, Checksum)>,
    committing: Option<EffectId>,
    pending: BTreeMap<EffectId, Pending>,
    next_id: EffectId,
    ticks: u64,
    effects: Vec<Effect>,
    // Primary.
    pipeline: BTreeMap<u64, Inflight>,
    prepares_in_flight: VecDeque<(EffectId, u128, u64)>,
    commit_broadcast_at: u64,
    // Backup.
    heartbeat_at: u64,
    acked_through: u64,
    // View change and view start.
    view_change: ViewChange,
    starting: Option<Starting>,
    // Recovering.
    incarnation: u64,
    probe_at: u64,
    probes: u32,
    // Repair.
    repair_at: u64,
    /// Whether the node's ration lets it ask peers this tick (a replica on its own: always).
    repair_permitted: bool,
    repair_source: u8,
    unverified: BTreeMap<u64, (Header, Vec<u8>)>,
    /// The peers that answered this replica's repair with `RangeEvicted` at the storage head
    /// it had then (a mask, and that head).
    evicted_by: (u64, u64),
    clients: ClientTable,
    counters: Counters,
}

fn bit(replica: u8) -> u64 {
    1u64 << replica
}

impl Replica {
    /// A replica of group `id` booted from `boot`.
    #[must_use]
    pub fn new(config: Config, safeguards: Safeguards, id: Identity, boot: Boot) -> Self {
        let config = config.checked();
        assert!(id.replicas >= 1 && id.replicas <= 64 && id.replica < id.replicas);
        let mut journal = Journal::new(
            boot.entries
                .first()
                .map_or(boot.head, |(h, _)| h.op.saturating_sub(1)),
            boot.entries
                .first()
                .map_or(boot.head_checksum, |(h, _)| h.parent),
        );
        for (header, body) in boot.entries {
            journal.insert(header, Some(body));
        }
        journal.storage_head = boot.head;
        journal.journaled_head = boot.head;
        let status = if boot.restarted {
            Status::Recovering
        } else {
            Status::Normal
        };
        let mut replica = Self {
            clients: ClientTable::new(config.clients_max),
            probe_at: config.request_start_view_delay_ticks,
            heartbeat_at: config.heartbeat_timeout_ticks,
            config,
            safeguards,
            id,
            status,
            view: boot.durable.view,
            log_view: boot.durable.log_view,
            durable: boot.durable,
            forgotten_view: (boot.restarted && boot.forgot_acknowledged)
                .then_some(boot.durable.log_view),
            superblock: None,
            superblock_next: None,
            journal,
            commit_min: boot.applied,
            commit_max: boot.durable.commit_max.max(boot.applied),
            anchor: None,
            committing: None,
            pending: BTreeMap::new(),
            next_id: 1,
            ticks: 0,
            effects: Vec::new(),
            pipeline: BTreeMap::new(),
            prepares_in_flight: VecDeque::new(),
            commit_broadcast_at: 0,
            acked_through: boot.applied,
            view_change: ViewChange::default(),
            starting: None,
            incarnation: boot.incarnation,
            probes: 0,
            repair_at: 0,
            repair_permitted: true,
            repair_source: 0,
            unverified: BTreeMap::new(),
            evicted_by: (0, 0),
            counters: Counters::new(),
        };
        if replica.status == Status::Normal && replica.is_primary() {
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

    // ---- observation (checkers read these; none changes anything) ----

    #[must_use]
    pub fn identity(&self) -> Identity {
        self.id
    }

    #[must_use]
    pub fn status(&self) -> Status {
        self.status
    }

    #[must_use]
    pub fn view(&self) -> u32 {
        self.view
    }

    #[must_use]
    pub fn log_view(&self) -> u32 {
        self.log_view
    }

    /// Whether this replica sent (or, as the new primary, counted) its `DoViewChange` for the
    /// view change it is in.
    #[must_use]
    pub fn sent_do_view_change(&self) -> bool {
        self.status == Status::ViewChange && self.view_change.dvc_sent_at.is_some()
    }

    /// The view whose start (truncate, publish, superblock) is under way, if any.
    #[must_use]
    pub fn starting_view(&self) -> Option<u32> {
        self.starting.as_ref().map(|s| s.view)
    }

    #[must_use]
    pub fn durable(&self) -> Durable {
        self.durable
    }

    /// The op this replica has executed through.
    #[must_use]
    pub fn commit_min(&self) -> u64 {
        self.commit_min
    }

    /// The highest op it knows to be committed.
    #[must_use]
    pub fn commit_max(&self) -> u64 {
        self.commit_max
    }

    /// The highest op of its log it knows the header of.
    #[must_use]
    pub fn head(&self) -> u64 {
        self.journal.head()
    }

    /// The last op its storage journaled.
    #[must_use]
    pub fn journaled_head(&self) -> u64 {
        self.journal.journaled_head
    }

    /// The header of op `op`, if this replica holds it.
    #[must_use]
    pub fn header(&self, op: u64) -> Option<Header> {
        self.journal.header(op).copied()
    }

    /// The checksum of op `op`, if known.
    #[must_use]
    pub fn checksum(&self, op: u64) -> Option<Checksum> {
        self.journal.checksum(op)
    }

    /// Whether it holds the body of op `op` (can serve it).
    #[must_use]
    pub fn holds(&self, op: u64) -> bool {
        self.journal.has_body(op)
    }

    #[must_use]
    pub fn is_primary(&self) -> bool {
        self.primary_of(self.view) == self.id.replica
    }

    /// Who leads the group as far as this replica knows: its view's primary while it is in
    /// normal status in a view that has started here; `None` during a view change or
    /// recovery (a client asking then is told to retry). The routing fact a node answers
    /// clients with.
    #[must_use]
    pub fn leader(&self) -> Option<u8> {
        (self.status == Status::Normal && self.starting.is_none())
            .then(|| self.primary_of(self.view))
    }

    /// The primary of `view`.
    #[must_use]
    pub fn primary_of(&self, view: u32) -> u8 {
        u8::try_from(u64::from(view) % u64::from(self.id.replicas)).unwrap_or(0)
    }

    /// Whether it asked every peer for ops they no longer hold (a state transfer's case).
    #[must_use]
    pub fn behind_ring(&self) -> bool {
        let (mask, head) = self.evicted_by;
        head == self.journal.storage_head
            && self.needs_repair()
            && (0..self.id.replicas)
                .filter(|r| *r != self.id.replica)
                .all(|r| mask & bit(r) != 0)
    }

    #[must_use]
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The ring's slots and body bytes.
    #[must_use]
    pub fn ring_size(&self) -> (usize, u64) {
        self.journal.size()
    }

    /// A one-line status, in the article's form.
    #[must_use]
    pub fn describe(&self) -> String {
        format!(
            "status={} view={} log_view={} commit={}..{} head={} journaled={} primary={} \
             repair={}",
            self.status.name(),
            self.view,
            self.log_view,
            self.commit_min,
            self.commit_max,
            self.journal.head(),
            self.journal.journaled_head,
            self.is_primary(),
            if self.needs_repair() { "yes" } else { "none" }
        )
    }

    /// The effects emitted since the last call.
    pub fn take_effects(&mut self) -> Vec<Effect> {
        std::mem::take(&mut self.effects)
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

    fn send(&mut self, to: u8, message: Message) {
        if to == self.id.replica {
            return;
        }
        self.effects.push(Effect::Send {
            to: Destination::Replica(to),
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
        let wanted = Durable {
            view: self.view,
            log_view: self.log_view,
            commit_max: self.commit_max.max(self.durable.commit_max),
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

    // ---- inputs ----

    /// One tick of the replica's clock.
    pub fn tick(&mut self) {
        self.ticks += 1;
        if self.status == Status::Halted {
            return;
        }
        match self.status {
            Status::Normal if self.is_primary() && self.starting.is_none() => {
                if self.ticks >= self.commit_broadcast_at {
                    self.commit_broadcast_at = self.ticks + self.config.commit_broadcast_ticks;
                    if self.durable_in(self.view, true) {
                        let checksum = self.journal.checksum(self.commit_max).unwrap_or(0);
                        let message = Message::Commit {
                            from: self.from(),
                            commit: self.commit_max,
                            checksum,
                        };
                        self.broadcast(&message);
                    }
                }
                self.retransmit_prepares();
            }
            Status::Normal => {
                if self.ticks >= self.heartbeat_at {
                    self.count("heartbeat_timeout");
                    self.start_view_change(self.view + 1);
                } else if self.ticks >= self.repair_at
                    && self.starting.is_none()
                    && self.repair_permitted
                {
                    self.repair();
                }
            }
            Status::ViewChange => {
                if self.ticks >= self.view_change.started_at + self.config.view_change_timeout_ticks
                {
                    self.count("view_change_timeout");
                    self.start_view_change(self.view + 1);
                } else {
                    let resend = self.config.view_change_resend_ticks;
                    if self
                        .view_change
                        .svc_sent_at
                        .is_some_and(|at| self.ticks >= at + resend)
                    {
                        self.view_change.svc_sent_at = None;
                    }
                    if self
                        .view_change
                        .dvc_sent_at
                        .is_some_and(|at| self.ticks >= at + resend)
                    {
                        self.view_change.dvc_sent_at = None;
                    }
                    if self.ticks >= self.repair_at && self.repair_permitted {
                        self.repair();
                    }
                }
            }
            Status::Recovering => {
                if self.ticks >= self.probe_at {
                    if self.probes >= self.config.request_start_view_probes {
                        self.count("recovery_probes_unanswered");
                        self.start_view_change(self.view + 1);
                    } else {
                        self.probes += 1;
                        self.probe_at = self.ticks + self.config.request_start_view_interval_ticks;
                        let message = Message::RequestStartView {
                            from: self.from(),
                            nonce: self.incarnation,
                        };
                        self.broadcast(&message);
                    }
                }
            }
            Status::Halted => {}
        }
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
            } => self.on_do_view_change(
                from,
                Dvc {
                    log_view,
                    op,
                    commit,
                    commit_checksum,
                    headers: headers.into_iter().map(|h| (h.header.op, h)).collect(),
                    forgotten_view,
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
            Message::Request {
                client,
                request,
                operation,
                body,
                ..
            } => self.on_request(client, request, operation, body),
            Message::Reply { .. } => self.count("reply_to_replica"),
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
            self.status = Status::Halted;
            self.effects.clear();
            return;
        }
        match pending {
            Pending::Superblock(written) => {
                self.superblock = None;
                self.durable = written;
                if let Some(next) = self.superblock_next.take() {
                    let _ = next;
                    self.write_superblock();
                }
            }
            Pending::Prepare => self.on_prepared(id, outcome),
            Pending::Journal(op) => {
                if !self.truncated_later(id, op) && op == self.journal.journaled_head + 1 {
                    self.journal.journaled_head = op;
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
        self.acknowledge();
        self.commit();
        self.journal.evict(
            self.commit_min,
            self.config.ring_entries_max,
            self.config.ring_bytes_max,
        );
    }

    /// Hands storage every body that extends its log in order.
    fn journal_bodies(&mut self) {
        if self.status == Status::Recovering {
            return;
        }
        // A backup adopting a view journals nothing until the log_view is durable; the new
        // primary journals the merged log as soon as storage kept what it must.
        if let Some(starting) = &self.starting
            && (!starting.primary || !starting.truncated)
        {
            return;
        }
        loop {
            let next = self.journal.storage_head + 1;
            let Some(slot) = self.journal.slot(next) else {
                break;
            };
            let Some(body) = slot.body.clone() else {
                break;
            };
            let header = slot.header;
            if Some(header.parent) != self.journal.checksum(next - 1) {
                // Not linked to what storage holds: the log below it is not this view's.
                self.count("journal_unlinked");
                break;
            }
            self.journal.storage_head = next;
            self.storage(
                |id| Effect::Journal { id, header, body },
                Pending::Journal(next),
            );
        }
    }

    /// Executes what is committed and journaled, one commit effect at a time.
    fn commit(&mut self) {
        if self.committing.is_some() || self.status == Status::Recovering {
            return;
        }
        let target = self.commit_max.min(self.journal.journaled_head);
        if target > self.commit_min {
            let id = self.storage(
                |id| Effect::Commit {
                    id,
                    through: target,
                },
                Pending::Commit(target),
            );
            self.committing = Some(id);
        }
    }

    fn on_committed(&mut self, replies: Vec<(u64, Vec<u8>)>) {
        for (op, reply) in replies {
            let Some(header) = self.journal.header(op).copied() else {
                continue;
            };
            if header.client == 0 {
                continue;
            }
            self.clients
                .record(header.client, header.request, op, reply.clone());
            if self.status == Status::Normal && self.is_primary() {
                let message = Message::Reply {
                    from: self.from(),
                    client: header.client,
                    request: header.request,
                    op,
                    status: ReplyStatus::Committed,
                    body: reply,
                };
                self.effects.push(Effect::Send {
                    to: Destination::Client(header.client),
                    message,
                });
            }
        }
    }

    // ---- normal operation ----

    fn on_request(&mut self, client: u128, request: u64, operation: u32, body: Vec<u8>) {
        let refuse = |replica: &mut Self| {
            let message = Message::Reply {
                from: replica.from(),
                client,
                request,
                op: 0,
                status: ReplyStatus::NotAccepted,
                body: Vec::new(),
            };
            replica.effects.push(Effect::Send {
                to: Destination::Client(client),
                message,
            });
        };
        if self.status != Status::Normal
            || !self.is_primary()
            || self.starting.is_some()
            || !self.durable_in(self.view, true)
        {
            self.count("request_not_primary");
            refuse(self);
            return;
        }
        if client == 0 {
            self.count("request_without_client");
            return;
        }
        if let Some(session) = self.clients.get(client) {
            if request < session.request {
                self.count("request_stale");
                return;
            }
            if request == session.request {
                let message = Message::Reply {
                    from: self.from(),
                    client,
                    request,
                    op: session.op,
                    status: ReplyStatus::Committed,
                    body: session.reply.clone(),
                };
                self.effects.push(Effect::Send {
                    to: Destination::Client(client),
                    message,
                });
                return;
            }
        }
        let in_progress = self
            .prepares_in_flight
            .iter()
            .any(|(_, c, r)| *c == client && *r == request)
            || (self.commit_min + 1..=self.journal.head()).any(|op| {
                self.journal
                    .header(op)
                    .is_some_and(|h| h.client == client && h.request == request)
            });
        if in_progress {
            self.count("request_in_progress");
            return;
        }
        if self.pipeline.len() + self.prepares_in_flight.len() >= self.config.pipeline_max {
            self.count("request_pipeline_full");
            refuse(self);
            return;
        }
        let request_checksum = frame_checksum(
            &Message::Request {
                cluster: self.id.cluster,
                group: self.id.group,
                client,
                request,
                operation,
                body: body.clone(),
            }
            .encode(),
        );
        let meta = PrepareMeta {
            view: self.view,
            commit: self.commit_max,
            replica: self.id.replica,
            client,
            request,
            request_checksum,
            now_us: 0,
        };
        self.journal.storage_head += 1;
        let id = self.storage(
            |id| Effect::Prepare {
                id,
                meta,
                operation,
                body,
            },
            Pending::Prepare,
        );
        self.prepares_in_flight.push_back((id, client, request));
    }

    fn on_prepared(&mut self, id: EffectId, outcome: Outcome) {
        let Some(position) = self
            .prepares_in_flight
            .iter()
            .position(|(i, _, _)| *i == id)
        else {
            return;
        };
        let (_, client, request) = self.prepares_in_flight.remove(position).unwrap_or_default();
        let (header, body) = match outcome {
            Outcome::Prepared { header, body } => (header, body),
            Outcome::Refused(_) => {
                // Storage appended nothing: the prepares behind it take its op.
                self.count("request_refused");
                let cut_since = self
                    .pending
                    .range(id + 1..)
                    .any(|(_, p)| matches!(p, Pending::Truncate(_)));
                if !cut_since {
                    self.journal.storage_head -= 1;
                }
                let message = Message::Reply {
                    from: self.from(),
                    client,
                    request,
                    op: 0,
                    status: ReplyStatus::NotAccepted,
                    body: Vec::new(),
                };
                self.effects.push(Effect::Send {
                    to: Destination::Client(client),
                    message,
                });
                return;
            }
            _ => return,
        };
        let op = header.op;
        if self.truncated_later(id, op) || op != self.journal.journaled_head + 1 {
            // A view change cut it before it was ever sent.
            return;
        }
        self.journal.insert(header, Some(body.clone()));
        self.journal.journaled_head = op;
        if self.status != Status::Normal || !self.is_primary() || header.view != self.view {
            // The view moved on while storage prepared it: it stays in the log, uncommitted.
            return;
        }
        let replicas = usize::from(self.id.replicas);
        self.pipeline.insert(
            op,
            Inflight {
                acks: bit(self.id.replica),
                sent_at: vec![self.ticks; replicas],
            },
        );
        self.broadcast(&Message::Prepare { header, body });
        self.advance_commit();
    }

    fn retransmit_prepares(&mut self) {
        let every = self.config.prepare_retransmit_ticks;
        let ticks = self.ticks;
        let mut resend = Vec::new();
        for (&op, inflight) in &mut self.pipeline {
            for to in 0..self.id.replicas {
                let i = usize::from(to);
                if inflight.acks & bit(to) == 0 && ticks >= inflight.sent_at[i] + every {
                    inflight.sent_at[i] = ticks;
                    resend.push((op, to));
                }
            }
        }
        for (op, to) in resend {
            if let Some(slot) = self.journal.slot(op)
                && let Some(body) = slot.body.clone()
            {
                let header = slot.header;
                self.send(to, Message::Prepare { header, body });
            }
        }
    }

    fn on_prepare(&mut self, header: Header, body: Vec<u8>) {
        let op = header.op;
        if self.status == Status::Recovering {
            self.count("prepare_while_recovering");
            return;
        }
        if header.view > self.view {
            // A newer view's primary: ask it for its view rather than take its prepares.
            self.count("prepare_of_newer_view");
            let message = Message::RequestStartView {
                from: self.from(),
                nonce: self.incarnation,
            };
            let primary = self.primary_of(header.view);
            self.send(primary, message);
            return;
        }
        let checksum = header.checksum();
        if self
            .journal
            .header(op)
            .is_some_and(|h| h.checksum() == checksum)
        {
            // A known header: its body (repair), or a retransmission.
            if op <= self.journal.journaled_head
                && self.status == Status::Normal
                && !self.is_primary()
                && self.starting.is_none()
            {
                self.acked_through = self.acked_through.min(op - 1);
            }
            self.journal.insert(header, Some(body));
            return;
        }
        let current = header.view == self.view
            && self.status == Status::Normal
            && !self.is_primary()
            && self.starting.is_none()
            && header.replica == self.primary_of(self.view);
        if current {
            // A new prepare of this view's primary: the view's authority.
            if op <= self.commit_min {
                return;
            }
            if self.journal.header(op).is_some() {
                // A slot of another log there (a view this replica did not see start): the
                // primary's log wins from here on.
                self.forget_after(op - 1);
            }
            self.commit_max = self.commit_max.max(header.commit.min(op - 1));
            self.journal.insert(header, Some(body));
            return;
        }
        if op > self.commit_min
            && self.unverified.len() < 2 * usize::try_from(REPAIR_BATCH_MAX).unwrap_or(256)
        {
            // Proved (or not) by the chain in `verify_unverified`.
            self.unverified.insert(op, (header, body));
        } else {
            self.count("prepare_unverified");
        }
    }

    /// Forgets the slots after `op` and truncates storage there if it holds more.
    fn forget_after(&mut self, op: u64) {
        let op = op.max(self.commit_min);
        self.journal.drop_after(op);
        if self.journal.storage_head > op {
            self.truncate_storage(op);
        }
    }

    /// A prepare whose header the hash chain proves: the next known entry names it as its
    /// parent, or it is the commit point the primary named.
    fn verified_by_chain(&self, header: &Header) -> bool {
        let checksum = header.checksum();
        let op = header.op;
        if op <= self.commit_min && self.journal.checksum(op).is_some() {
            return false;
        }
        if self
            .journal
            .header(op + 1)
            .is_some_and(|next| next.parent == checksum)
        {
            return true;
        }
        self.anchor == Some((op, checksum))
    }

    /// Moves buffered repair replies that the chain now proves into the journal.
    fn verify_unverified(&mut self) {
        while let Some(op) = self
            .unverified
            .iter()
            .rev()
            .find(|(_, (h, _))| self.verified_by_chain(h))
            .map(|(op, _)| *op)
        {
            if let Some((header, body)) = self.unverified.remove(&op) {
                if let Some(existing) = self.journal.header(op)
                    && existing.checksum() != header.checksum()
                {
                    // The chain proves this replica's entry there is another log's.
                    self.journal.drop_after(op);
                    if self.journal.storage_head >= op {
                        self.truncate_storage(op - 1);
                    }
                }
                self.journal.insert(header, Some(body));
            }
        }
        let commit_min = self.commit_min;
        self.unverified.retain(|op, _| *op > commit_min);
    }

    fn truncate_storage(&mut self, after: u64) {
        let after = after.max(self.commit_min);
        self.journal.storage_truncated(after);
        self.storage(
            |id| Effect::Truncate { id, after },
            Pending::Truncate(after),
        );
    }

    /// A backup acknowledges, in order, every journaled op of this view above its commit point
    /// it has not acknowledged yet, once the superblock holds the view as its log_view.
    fn acknowledge(&mut self) {
        if self.status != Status::Normal
            || self.is_primary()
            || self.starting.is_some()
            || !self.durable_in(self.view, true)
            || self.log_view != self.view
        {
            return;
        }
        let primary = self.primary_of(self.view);
        let through = self.journal.journaled_head;
        let from = self.acked_through.max(self.commit_min) + 1;
        for op in from..=through {
            if let Some(header) = self.journal.header(op) {
                let message = Message::PrepareOk {
                    from: self.from(),
                    op,
                    checksum: header.checksum(),
                };
                self.send(primary, message);
            }
        }
        self.acked_through = self.acked_through.max(through);
    }

    fn on_prepare_ok(&mut self, from: From, op: u64, checksum: Checksum) {
        if self.status != Status::Normal
            || !self.is_primary()
            || from.view != self.view
            || self.starting.is_some()
        {
            return;
        }
        if self.journal.checksum(op) != Some(checksum) {
            self.count("prepare_ok_mismatch");
            return;
        }
        // A backup journals in order: its acknowledgment of `op` covers every op before it.
        for (_, inflight) in self.pipeline.range_mut(..=op) {
            inflight.acks |= bit(from.replica);
        }
        self.advance_commit();
    }

    fn advance_commit(&mut self) {
        let quorum = replication_quorum(self.id.replicas);
        while let Some((&op, inflight)) = self.pipeline.first_key_value() {
            let self_acked = op <= self.journal.journaled_head;
            let acks = (inflight.acks & !bit(self.id.replica)).count_ones() as usize
                + usize::from(self_acked);
            if op != self.commit_max + 1 || acks < quorum {
                break;
            }
            self.commit_max = op;
            self.pipeline.remove(&op);
        }
    }

    fn on_commit(&mut self, from: From, commit: u64, checksum: Checksum) {
        if from.view > self.view && self.status != Status::Recovering {
            self.count("commit_of_newer_view");
            let message = Message::RequestStartView {
                from: self.from(),
                nonce: self.incarnation,
            };
            self.send(from.replica, message);
            return;
        }
        if from.view != self.view
            || self.status != Status::Normal
            || self.is_primary()
            || from.replica != self.primary_of(self.view)
        {
            return;
        }
        // Only a commit broadcast resets the liveness window.
        self.heartbeat_at = self.ticks + self.config.heartbeat_timeout_ticks;
        if self.starting.is_some() {
            return;
        }
        if commit > self.commit_max {
            self.commit_max = commit;
        }
        if commit > self.commit_min && self.journal.checksum(commit).is_none() {
            self.anchor = Some((commit, checksum));
        }
    }

    // ---- repair ----

    fn needs_repair(&self) -> bool {
        let target = self.commit_max.max(self.journal.head());
        self.journal.storage_head < target
    }

    /// The replica that repairs (a backup in normal status, or a new primary merging its view)
    /// lacks prepares: what a node's [`crate::RepairRation`] counts as a session.
    #[must_use]
    pub fn wants_repair(&self) -> bool {
        let merging = self.status == Status::ViewChange
            && self.is_primary()
            && self.starting.as_ref().is_some_and(|s| s.primary);
        // A primary in normal status holds its whole log (its view started only once it did):
        // it never repairs.
        let backup = self.status == Status::Normal && !self.is_primary();
        (backup || merging) && self.needs_repair()
    }

    /// Sets whether the next ticks may ask peers for prepares (the node's ration decides).
    pub fn permit_repair(&mut self, permitted: bool) {
        self.repair_permitted = permitted;
    }

    /// Asks a peer for the prepares this replica lacks, at most `REPAIR_BATCH_MAX` a round:
    /// bodies of known headers from the lowest missing one, or, below the lowest known entry,
    /// the range under it (proved by the chain as they arrive).
    fn repair(&mut self) {
        self.repair_at = self.ticks + self.config.repair_retry_ticks;
        if !self.wants_repair() {
            return;
        }
        let merging = self.status == Status::ViewChange;
        if !self.safeguards.body_fetch && merging {
            return;
        }
        let mut first = self.journal.storage_head + 1;
        if merging
            && !self.safeguards.hole_check_lower_bound
            && let Some(starting) = &self.starting
        {
            // The check as it was: nothing at or below the merged commit point is looked for.
            first = first.max(starting.commit + 1);
        }
        let target = self.commit_max.max(self.journal.head());
        let known = (first..=target).find(|op| {
            self.journal.header(*op).is_some() || self.anchor.is_some_and(|a| a.0 == *op)
        });
        let (from, to) = match known {
            Some(k) if k == first => {
                let last = (first..=target)
                    .take(usize::try_from(REPAIR_BATCH_MAX).unwrap_or(128))
                    .take_while(|op| !self.journal.has_body(*op))
                    .last()
                    .unwrap_or(first);
                (first, last)
            }
            // At most a round's worth ending at the known entry itself: a peer serves no more
            // than `REPAIR_BATCH_MAX`, and a range one longer loses its top, the one op the
            // known entry (often only the anchor) proves, so nothing below is ever proved.
            Some(k) => (first.max((k + 1).saturating_sub(REPAIR_BATCH_MAX)), k),
            None => (first, (first + REPAIR_BATCH_MAX - 1).min(target)),
        };
        let source = self.repair_source_for(from);
        let message = Message::RequestPrepares {
            from: self.from(),
            first: from,
            last: to,
        };
        self.send(source, message);
    }

    /// Who to ask: the view's primary first (a backup), the replicas that announced the bodies
    /// (the new primary), rotating on every retry.
    fn repair_source_for(&mut self, op: u64) -> u8 {
        let replicas = self.id.replicas;
        let candidates: Vec<u8> = if self.is_primary() {
            let mask = self.view_change.sources.get(&op).copied().unwrap_or(0);
            let from_dvcs: Vec<u8> = (0..replicas)
                .filter(|r| *r != self.id.replica && mask & bit(*r) != 0)
                .collect();
            if from_dvcs.is_empty() {
                (0..replicas).filter(|r| *r != self.id.replica).collect()
            } else {
                from_dvcs
            }
        } else {
            let primary = self.primary_of(self.view);
            std::iter::once(primary)
                .chain((0..replicas).filter(|r| *r != self.id.replica && *r != primary))
                .collect()
        };
        if candidates.is_empty() {
            return self.id.replica;
        }
        let pick = candidates[usize::from(self.repair_source) % candidates.len()];
        self.repair_source = self.repair_source.wrapping_add(1);
        pick
    }

    fn on_request_prepares(&mut self, from: From, first: u64, last: u64) {
        let last = last.min(first.saturating_add(REPAIR_BATCH_MAX - 1));
        let oldest = self.journal.oldest();
        let mut start = first;
        if first < oldest {
            let message = Message::RangeEvicted {
                from: self.from(),
                oldest,
            };
            self.send(from.replica, message);
            start = oldest;
        }
        for op in start..=last {
            if let Some(slot) = self.journal.slot(op)
                && let Some(body) = slot.body.clone()
            {
                let header = slot.header;
                self.send(from.replica, Message::Prepare { header, body });
            }
        }
    }

    fn on_range_evicted(&mut self, from: From, oldest: u64) {
        let head = self.journal.storage_head;
        if oldest > head + 1 {
            self.count("range_evicted");
            if self.evicted_by.1 != head {
                // Its storage moved since the last answers: they no longer say anything.
                self.evicted_by = (0, head);
            }
            self.evicted_by.0 |= bit(from.replica);
        }
    }

    // ---- view change ----

    fn start_view_change(&mut self, view: u32) {
        if view <= self.view {
            return;
        }
        self.view = view;
        self.status = Status::ViewChange;
        self.view_change = ViewChange {
            started_at: self.ticks,
            ..ViewChange::default()
        };
        self.starting = None;
        self.pipeline.clear();
        self.unverified.clear();
        self.write_superblock();
    }

    fn on_start_view_change(&mut self, from: From) {
        if self.status == Status::Recovering {
            return;
        }
        if from.view > self.view {
            self.start_view_change(from.view);
        }
        if from.view == self.view && self.status == Status::ViewChange {
            self.view_change.svc_from |= bit(from.replica);
        }
    }

    fn on_do_view_change(&mut self, from: From, dvc: Dvc) {
        if self.status == Status::Recovering || self.primary_of(from.view) != self.id.replica {
            return;
        }
        if from.view > self.view {
            self.start_view_change(from.view);
        }
        if from.view == self.view && self.status == Status::ViewChange && !self.view_change.merged {
            self.view_change.svc_from |= bit(from.replica);
            self.view_change.dvcs.insert(from.replica, dvc);
        }
    }

    /// This replica's `DoViewChange`: fixed once per view, so resends are byte-identical.
    fn own_dvc(&mut self) -> Message {
        if let Some(dvc) = &self.view_change.dvc {
            return dvc.clone();
        }
        let commit = self.commit_max.min(self.journal.head());
        let head = self.journal.head();
        let from_op = (commit + 1).max(head.saturating_sub(HEADERS_MAX as u64 - 1));
        let forgotten_view = self
            .forgotten_view
            .filter(|_| self.safeguards.forgotten_acknowledgments);
        let headers = (from_op..=head)
            .filter_map(|op| {
                let slot = self.journal.slot(op)?;
                let present = slot.body.is_some();
                // Journaled before acknowledged: a header held but not journaled is an op this
                // replica never acknowledged, unless it is of a view it forgot.
                let forgot = forgotten_view.is_some_and(|v| slot.header.view <= v);
                Some(ViewHeader {
                    header: slot.header,
                    present,
                    nack: op > self.journal.journaled_head && !forgot,
                })
            })
            .collect();
        let message = Message::DoViewChange {
            from: self.from(),
            log_view: self.durable.log_view,
            op: head,
            commit,
            commit_checksum: self.journal.checksum(commit).unwrap_or(0),
            headers,
            forgotten_view,
        };
        self.view_change.dvc = Some(message.clone());
        message
    }

    fn progress_view_change(&mut self) {
        if self.status != Status::ViewChange || !self.durable_in(self.view, false) {
            return;
        }
        if self.view_change.svc_sent_at.is_none() {
            self.view_change.svc_sent_at = Some(self.ticks);
            let message = Message::StartViewChange { from: self.from() };
            self.broadcast(&message);
        }
        let others = (self.view_change.svc_from & !bit(self.id.replica)).count_ones() as usize;
        if others + 1 < view_change_quorum(self.id.replicas) {
            return;
        }
        let primary = self.primary_of(self.view);
        if self.view_change.dvc_sent_at.is_none() {
            self.view_change.dvc_sent_at = Some(self.ticks);
            let dvc = self.own_dvc();
            if primary == self.id.replica {
                if let Message::DoViewChange {
                    log_view,
                    op,
                    commit,
                    commit_checksum,
                    headers,
                    forgotten_view,
                    ..
                } = dvc
                {
                    self.view_change.dvcs.insert(
                        self.id.replica,
                        Dvc {
                            log_view,
                            op,
                            commit,
                            commit_checksum,
                            headers: headers.into_iter().map(|h| (h.header.op, h)).collect(),
                            forgotten_view,
                        },
                    );
                }
            } else {
                self.send(primary, dvc);
            }
        }
        if primary == self.id.replica && !self.view_change.merged {
            self.merge();
        }
    }

    /// The new primary merges a quorum of `DoViewChange`s (see `docs/vsr.md`, "What survives
    /// the view change"): the latest log_view is the authority; an op above the merged commit
    /// point is dropped (with everything after it) on a nack quorum; an op neither provably
    /// dead nor servable by anyone waits for more `DoViewChange`s.
    fn merge(&mut self) {
        let replicas = self.id.replicas;
        if self.view_change.dvcs.len() < view_change_quorum(replicas)
            || !self.view_change.dvcs.contains_key(&self.id.replica)
        {
            return;
        }
        let dvcs = &self.view_change.dvcs;
        // A log that may lack ops its sender acknowledged stands for no one: the quorum must
        // hold a copy of every op that may have committed (each committed op is on a quorum
        // of logs, and an absent replica or a forgetful one may be where it is). With every
        // replica heard, the best log that survived wins (all of them restarted: what was
        // acknowledged after the last publication is gone from all of them).
        let holding = dvcs
            .values()
            .filter(|d| d.holds_its_acknowledgments())
            .count();
        if holding < view_change_quorum(replicas) && dvcs.len() < usize::from(replicas) {
            self.count("merge_waits_for_a_holder");
            return;
        }
        let max_log_view = dvcs.values().map(|d| d.log_view).max().unwrap_or(0);
        let (commit, commit_checksum) = dvcs
            .values()
            .map(|d| (d.commit, d.commit_checksum))
            .max_by_key(|(c, _)| *c)
            .unwrap_or((0, 0));
        let authority_head = dvcs
            .values()
            .filter(|d| d.log_view == max_log_view)
            .map(|d| d.op)
            .max()
            .unwrap_or(commit);
        let mut head = commit;
        let mut headers = Vec::new();
        let mut sources = BTreeMap::new();
        for op in commit + 1..=authority_head {
            let Some(header) = dvcs
                .values()
                .filter(|d| d.log_view == max_log_view)
                .find_map(|d| d.headers.get(&op).map(|h| h.header))
            else {
                break;
            };
            let checksum = header.checksum();
            let mut nacks = 0;
            let mut present = 0u64;
            for (&replica, d) in dvcs {
                match d
                    .headers
                    .get(&op)
                    .filter(|h| h.header.checksum() == checksum)
                {
                    None if d.nacks_by_absence(&header) => nacks += 1,
                    None => {}
                    Some(h) => {
                        if h.present {
                            present |= bit(replica);
                        }
                        if self.safeguards.nack_header_without_body && h.nack {
                            nacks += 1;
                        }
                    }
                }
            }
            if nacks >= nack_quorum(replicas) {
                break;
            }
            if present == 0 {
                if dvcs.len() < usize::from(replicas) {
                    // Neither provably dead nor servable: wait for another DoViewChange.
                    return;
                }
                // Every replica answered and none holds the body: the nacks fell short only
                // because replicas that restarted without their unpublished log cannot nack.
                // No copy of the op survives anywhere, so waiting cannot bring it back; the log
                // ends before it (under replicated durability, what was acknowledged after the
                // last publication of more than one node is gone).
                break;
            }
            head = op;
            headers.push(header);
            sources.insert(op, present);
        }
        if !self.safeguards.body_fetch {
            // Without the fetch (the fix of "The write we put back" undone): the log ends where
            // this replica's own journal stops holding the merged ops.
            let own = headers
                .iter()
                .take_while(|h| {
                    self.journal.has_body(h.op) && self.journal.checksum(h.op) == Some(h.checksum())
                })
                .last()
                .map_or(commit, |h| h.op);
            head = head.min(own);
            headers.retain(|h| h.op <= own);
        }
        // Committed ops this replica lacks can be served by those that executed them.
        for (&replica, d) in dvcs {
            for op in self.commit_min + 1..=d.commit.min(commit) {
                *sources.entry(op).or_default() |= bit(replica);
            }
        }
        self.view_change.merged = true;
        self.view_change.sources = sources;
        let keep = self.consistent_prefix(max_log_view, (commit, commit_checksum), &headers, head);
        // Memory keeps only what is proved: the storage prefix `keep`, and the merged headers
        // (with the bodies this replica holds of them). Anything else it held above `keep` may
        // be another log's (a view it led or saw, never committed).
        let held = self.held_bodies(&headers);
        self.journal.drop_after(keep);
        for header in &headers {
            self.journal.insert(*header, None);
        }
        for (header, body) in held {
            self.journal.insert(header, Some(body));
        }
        if self.journal.checksum(commit).is_none() {
            self.anchor = Some((commit, commit_checksum));
        }
        self.commit_max = self.commit_max.max(commit);
        self.starting = Some(Starting {
            view: self.view,
            head,
            commit,
            commit_checksum,
            headers,
            keep,
            held: Vec::new(),
            truncated: false,
            publish: None,
            published: false,
            primary: true,
        });
        self.truncate_to_keep(keep);
        self.repair_at = self.ticks;
    }

    /// The bodies this replica holds of `headers` (same checksum).
    fn held_bodies(&self, headers: &[Header]) -> Vec<(Header, Vec<u8>)> {
        headers
            .iter()
            .filter_map(|h| {
                let slot = self.journal.slot(h.op)?;
                let body = slot.body.clone()?;
                (slot.header.checksum() == h.checksum()).then_some((*h, body))
            })
            .collect()
    }

    /// The longest prefix of storage that belongs to the log being adopted: the log of view
    /// `log_view` whose commit point is `commit` (checksum `commit_checksum`), with `headers`
    /// above it, ending at `head`.
    ///
    /// When the superblock already names `log_view`, storage is a prefix of that view's log
    /// (the view's start cut everything else before the log_view was written, and the view
    /// only appends): all of it up to `head` stays, and this replica's acknowledgments in that
    /// view stay true. Cutting it there would lose an op the commit point counted on (a
    /// recovering replica behind the primary's commit point dropped its acknowledged ops:
    /// seed 748). Otherwise storage may hold another log above what executed: the executed
    /// ops always, up to the commit point when storage's entry there is the committed one,
    /// then every header that matches.
    fn consistent_prefix(
        &self,
        log_view: u32,
        (commit, commit_checksum): (u64, Checksum),
        headers: &[Header],
        head: u64,
    ) -> u64 {
        let storage_head = self.journal.storage_head;
        if self.safeguards.same_view_keeps_log && self.durable.log_view == log_view {
            let mut keep = storage_head.min(head);
            if keep >= commit
                && self
                    .journal
                    .checksum(commit)
                    .is_some_and(|c| c != commit_checksum)
            {
                keep = commit.saturating_sub(1);
            }
            if let Some(differs) = headers.iter().find(|h| {
                h.op <= keep
                    && self
                        .journal
                        .checksum(h.op)
                        .is_some_and(|c| c != h.checksum())
            }) {
                keep = differs.op - 1;
            }
            return keep.max(self.commit_min);
        }
        let mut keep = self.commit_min;
        if storage_head >= commit && self.journal.checksum(commit) == Some(commit_checksum) {
            keep = commit;
            for header in headers {
                if header.op == keep + 1
                    && storage_head >= header.op
                    && self.journal.checksum(header.op) == Some(header.checksum())
                {
                    keep = header.op;
                } else {
                    break;
                }
            }
        }
        keep.max(self.commit_min)
            .min(storage_head.max(self.commit_min))
    }

    /// Truncates storage after `keep` for a view start (marking the start truncated when there
    /// is nothing to cut).
    fn truncate_to_keep(&mut self, keep: u64) {
        if self.journal.storage_head > keep {
            self.truncate_storage(keep);
        } else if let Some(starting) = &mut self.starting {
            starting.truncated = true;
        }
    }

    /// Carries a view start (merged log or adopted `StartView`) through its durable steps:
    /// truncate, journal (the new primary), publish, then the superblock naming the log_view.
    fn progress_start(&mut self) {
        let Some(starting) = self.starting.clone() else {
            return;
        };
        if starting.view != self.view || !starting.truncated {
            return;
        }
        let journaled_to = if starting.primary {
            starting.head
        } else {
            starting.keep.min(self.journal.journaled_head)
        };
        if starting.primary && self.safeguards.body_fetch {
            let ready = if self.safeguards.hole_check_lower_bound {
                // Every op from the lower of the merged commit point and what this replica
                // executed is journaled (storage appends in order: no hole below the head).
                self.journal.journaled_head >= starting.head
            } else {
                // The check as it was: bodies held above the merged commit point.
                (starting.commit + 1..=starting.head).all(|op| self.journal.has_body(op))
            };
            if !ready {
                return;
            }
        }
        if !starting.published {
            if starting.publish.is_none() {
                if self.safeguards.publish_before_log_view {
                    let through = journaled_to.min(self.journal.journaled_head);
                    let id = self.storage(
                        |id| Effect::Publish { id, through },
                        Pending::Publish(through),
                    );
                    if let Some(s) = &mut self.starting {
                        s.publish = Some(id);
                    }
                    return;
                }
                if let Some(s) = &mut self.starting {
                    s.published = true;
                }
            } else {
                return;
            }
        }
        if self.log_view != starting.view {
            self.log_view = starting.view;
            self.commit_max = self.commit_max.max(starting.commit);
            self.write_superblock();
        }
        if !self.durable_in(starting.view, true) {
            return;
        }
        self.finish_start(starting);
    }

    fn finish_start(&mut self, starting: Starting) {
        self.starting = None;
        self.status = Status::Normal;
        self.heartbeat_at = self.ticks + self.config.heartbeat_timeout_ticks;
        self.commit_broadcast_at = self.ticks;
        self.repair_at = self.ticks;
        self.view_change = ViewChange::default();
        if starting.primary {
            let replicas = usize::from(self.id.replicas);
            self.pipeline.clear();
            for op in self.commit_max + 1..=starting.head {
                self.pipeline.insert(
                    op,
                    Inflight {
                        acks: bit(self.id.replica),
                        sent_at: vec![self.ticks; replicas],
                    },
                );
            }
            let message = self.start_view_message(0);
            self.broadcast(&message);
            self.advance_commit();
        } else {
            for header in &starting.headers {
                if header.op > self.commit_min {
                    self.journal.insert(*header, None);
                }
            }
            for (header, body) in starting.held {
                if header.op > self.commit_min {
                    self.journal.insert(header, Some(body));
                }
            }
            if starting.commit > self.commit_min && self.journal.checksum(starting.commit).is_none()
            {
                self.anchor = Some((starting.commit, starting.commit_checksum));
            }
            self.acked_through = self.commit_max;
        }
    }

    fn start_view_message(&self, nonce: u64) -> Message {
        let commit = self.commit_max.min(self.journal.head());
        let head = self.journal.head();
        let from_op = (commit + 1).max(head.saturating_sub(HEADERS_MAX as u64 - 1));
        Message::StartView {
            from: self.from(),
            op: head,
            commit,
            commit_checksum: self.journal.checksum(commit).unwrap_or(0),
            nonce,
            headers: self.journal.headers(from_op, head),
        }
    }

    fn on_request_start_view(&mut self, from: From, nonce: u64) {
        if self.status != Status::Normal
            || !self.is_primary()
            || self.starting.is_some()
            || self.log_view != self.view
            || !self.durable_in(self.view, true)
        {
            return;
        }
        let message = self.start_view_message(nonce);
        self.send(from.replica, message);
    }

    #[allow(clippy::too_many_arguments, reason = "the fields of one message")]
    fn on_start_view(
        &mut self,
        from: From,
        op: u64,
        commit: u64,
        commit_checksum: Checksum,
        nonce: u64,
        headers: Vec<Header>,
    ) {
        if from.replica != self.primary_of(from.view) || from.view < self.view {
            return;
        }
        match self.status {
            Status::Recovering => {
                let echoed = nonce == self.incarnation;
                let newer = from.view > self.durable.view;
                if self.safeguards.incarnation_echo && !echoed && !newer {
                    self.count("start_view_not_echoed");
                    return;
                }
            }
            Status::Normal if from.view == self.view && self.starting.is_none() => {
                // Already in this view (a probe's answer racing the broadcast).
                return;
            }
            _ => {}
        }
        if self.starting.as_ref().is_some_and(|s| s.view == from.view) {
            return;
        }
        let headers: Vec<Header> = headers
            .into_iter()
            .filter(|h| h.op > commit && h.op <= op)
            .collect();
        // What the storage may keep: the executed ops, then whatever agrees with the view's log.
        let keep = self.consistent_prefix(from.view, (commit, commit_checksum), &headers, op);
        self.view = from.view;
        self.status = Status::Normal;
        self.pipeline.clear();
        self.unverified.clear();
        self.view_change = ViewChange::default();
        self.heartbeat_at = self.ticks + self.config.heartbeat_timeout_ticks;
        // Memory keeps only what is proved: the storage prefix `keep`, then (once the log_view
        // is durable) the view's headers with the bodies held of them.
        let held = self.held_bodies(&headers);
        self.journal.drop_after(keep);
        self.starting = Some(Starting {
            view: from.view,
            head: op,
            commit,
            commit_checksum,
            headers,
            keep,
            held,
            truncated: false,
            publish: None,
            published: false,
            primary: false,
        });
        self.truncate_to_keep(keep);
        // A backup adopting a view is in normal status but silent (no acknowledgment) until the
        // log_view is durable.
        self.write_superblock();
    }
}
