//! The checkers: they read replica state and completions, never inject a fault or draw a random
//! number. One canonical commit history per group (op, checksum, client, request) that every
//! replica's commits must match; no reply a client received is ever lost or changed; view,
//! log_view and commit_max never go back on a replica, across restarts.

use std::collections::BTreeMap;

use iggy_format::Checksum;
use iggy_vsr::Durable;

/// One committed op as the history holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Committed {
    pub checksum: Checksum,
    pub client: u128,
    pub request: u64,
}

/// What the checkers found.
#[derive(Debug, Default)]
pub struct Checker {
    /// The canonical commit history of each group.
    pub history: BTreeMap<u128, BTreeMap<u64, Committed>>,
    /// The committed reply each client received for each request.
    pub replies: BTreeMap<(u128, u64), (u128, u64, Vec<u8>)>,
    durable: BTreeMap<(u8, u128), Durable>,
    /// The op (and its checksum) each replica's log reached when its superblock last named a
    /// new log_view: that log must survive any crash (it was published first).
    vouched: BTreeMap<(u8, u128), (u32, u64, Checksum)>,
    /// What each replica holds in this life under a log_view: it booted with, journaled or
    /// started the view with its log through the op.
    held: BTreeMap<(u8, u128), (u32, u64)>,
    /// The first failure, with the checker that found it.
    pub failure: Option<(String, String)>,
    /// Per group, the highest op a client was told committed so far: a read asked after it
    /// must be served from a replica that executed through it (checker `linearizable`).
    pub acknowledged_max: BTreeMap<u128, u64>,
}

impl Checker {
    fn fail(&mut self, checker: &str, what: String) {
        if self.failure.is_none() {
            self.failure = Some((checker.to_string(), what));
        }
    }

    /// A client's request number served two bodies: an impostor was answered as committed.
    pub fn reuse(&mut self, what: String) {
        self.fail("request reuse", what);
    }

    /// Client `client` of `group` had `request`, which it sent with one body only, refused as
    /// reused by `replica`.
    pub fn refused_as_reused(&mut self, group: u128, client: u128, request: u64, replica: u8) {
        self.reuse(format!(
            "group {group:#x} client {client:#x}: request {request}, sent with one body only, \
             was refused as reused by replica {replica}"
        ));
    }

    /// A consumer read something the group never committed, or read an offset two ways.
    pub fn fail_consumer(&mut self, what: String) {
        self.fail("consumer", what);
    }

    /// A read served after its barrier by replica `node` of `group`, which had executed through
    /// `executed`, was asked when op `acknowledged` had been acknowledged to a client: the read
    /// must reflect it.
    pub fn read_served(
        &mut self,
        node: u8,
        group: u128,
        executed: u64,
        acknowledged: u64,
        asked_us: u64,
    ) {
        if executed < acknowledged {
            let what = format!(
                "a read of group {group:#x} asked at {asked_us} us was served by node {node}, \
                 which had executed through op {executed}; op {acknowledged} had been \
                 acknowledged before the read was asked"
            );
            self.fail("linearizable", what);
        }
    }

    /// Replica `node` of `group` executed `op` whose entry is `committed`.
    pub fn committed(&mut self, node: u8, group: u128, op: u64, committed: Committed) {
        let history = self.history.entry(group).or_default();
        match history.get(&op) {
            None => {
                history.insert(op, committed);
            }
            Some(canonical) if *canonical == committed => {}
            Some(canonical) => {
                let what = format!(
                    "group {group:#x} op {op}: node {node} committed {:#x} (client {:#x} request \
                     {}), the history has {:#x} (client {:#x} request {})",
                    committed.checksum,
                    committed.client,
                    committed.request,
                    canonical.checksum,
                    canonical.client,
                    canonical.request
                );
                self.fail("commit history", what);
            }
        }
        if committed.client != 0
            && let Some((g, reply_op, _)) = self.replies.get(&(committed.client, committed.request))
            && *g == group
            && *reply_op != op
        {
            let what = format!(
                "group {group:#x}: client {:#x} request {} was answered as op {reply_op}, op \
                 {op} commits it again",
                committed.client, committed.request
            );
            self.fail("replies", what);
        }
    }

    /// A client received the committed reply `(op, body)` for `request`.
    pub fn reply(&mut self, group: u128, client: u128, request: u64, op: u64, body: &[u8]) {
        let highest = self.acknowledged_max.entry(group).or_default();
        *highest = (*highest).max(op);
        match self.replies.get(&(client, request)) {
            None => {
                self.replies
                    .insert((client, request), (group, op, body.to_vec()));
            }
            Some((g, o, b)) if *g == group && *o == op && b == body => {}
            Some((_, o, _)) => {
                let what = format!(
                    "client {client:#x} request {request}: first answered as op {o}, now as op \
                     {op} (or another reply)"
                );
                self.fail("replies", what);
            }
        }
        if let Some(committed) = self.history.get(&group).and_then(|h| h.get(&op))
            && (committed.client != client || committed.request != request)
        {
            let what = format!(
                "client {client:#x} request {request} answered as op {op}, which is client \
                 {:#x} request {} in the history",
                committed.client, committed.request
            );
            self.fail("replies", what);
        }
    }

    /// Replica `node` of `group` was rebuilt empty from its peers after a fault destroyed its
    /// storage (`Faults::damage`): what its superblock and log vouched for went with the
    /// storage, by the fault's hand, not by a protocol bug. Its history here starts again; the
    /// group's safety now rests on its rebuild marker (its log stands for no quorum until it
    /// caught up), which the commit history, replies and acknowledged-batch checkers judge.
    pub fn rebuilt(&mut self, node: u8, group: u128) {
        self.durable.remove(&(node, group));
        self.vouched.remove(&(node, group));
        self.held.remove(&(node, group));
    }

    /// Replica `node` of `group` holds `durable` in its superblock.
    pub fn durable(&mut self, node: u8, group: u128, durable: Durable) {
        if let Some(before) = self.durable.get(&(node, group))
            && (durable.view < before.view
                || durable.log_view < before.log_view
                || durable.commit_max < before.commit_max)
        {
            let what = format!(
                "node {node} group {group:#x}: superblock went back from view {} log_view {} \
                 commit {} to view {} log_view {} commit {}",
                before.view,
                before.log_view,
                before.commit_max,
                durable.view,
                durable.log_view,
                durable.commit_max
            );
            self.fail("monotonic", what);
        }
        self.durable.insert((node, group), durable);
    }

    /// Replica `node` of `group` made `log_view` durable while its log reached `op`.
    pub fn log_view_written(
        &mut self,
        node: u8,
        group: u128,
        log_view: u32,
        op: u64,
        checksum: Checksum,
    ) {
        self.vouched.insert((node, group), (log_view, op, checksum));
        self.held.insert((node, group), (log_view, op));
    }

    /// Replica `node` of `group` made `log_view` durable: the log it now holds under that view
    /// (`checksum` of each op it knows, up to `head`) must hold every committed op it reaches,
    /// as committed. A view whose log lacks one (a merge that missed a committed op) may never
    /// commit anything that shows it (the replicas that executed the op cannot join it), so the
    /// commit history alone would not see it.
    pub fn view_log(
        &mut self,
        node: u8,
        group: u128,
        log_view: u32,
        head: u64,
        checksum: impl Fn(u64) -> Option<Checksum>,
    ) {
        let Some(history) = self.history.get(&group) else {
            return;
        };
        // The recent history is where a view change can go wrong (older ops are executed
        // everywhere and below every log's cut).
        let differs = history
            .range(..=head)
            .rev()
            .take(1024)
            .find(|(op, committed)| checksum(**op).is_some_and(|c| c != committed.checksum))
            .map(|(op, committed)| (*op, committed.checksum));
        if let Some((op, committed)) = differs {
            let what = format!(
                "node {node} group {group:#x}: the log it holds under log_view {log_view} has                  {:#x} at op {op}, where {committed:#x} committed: the view's log lost a                  committed op",
                checksum(op).unwrap_or(0)
            );
            self.fail("view log", what);
        }
    }

    /// Replica `node` of `group` journaled `op` while its superblock named `log_view`.
    pub fn journaled(&mut self, node: u8, group: u128, log_view: u32, op: u64) {
        let held = self.held.entry((node, group)).or_insert((log_view, op));
        if held.0 < log_view {
            *held = (log_view, op);
        } else if held.0 == log_view {
            held.1 = held.1.max(op);
        }
    }

    /// Replica `node` of `group` is cutting its log after `after` (recorded as the cut reaches
    /// storage: a cut that fails half done may still have taken effect). Only the start of a
    /// later view than the one its superblock vouches for may cut what that log_view vouched
    /// for: within the view, this replica's acknowledgments counted on those ops.
    pub fn truncating(
        &mut self,
        node: u8,
        group: u128,
        after: u64,
        checksum: Option<Checksum>,
        starting: Option<u32>,
    ) {
        if let Some(&(log_view, op)) = self.held.get(&(node, group))
            && op > after
        {
            if starting.is_none_or(|view| view <= log_view) {
                let what = format!(
                    "node {node} group {group:#x}: cuts its log after op {after} though it holds \
                     its log through op {op} under log_view {log_view} (booted with it or \
                     journaled it) and no later view is starting: a log_view's log only grows"
                );
                self.fail("held log", what);
                return;
            }
            self.held.insert((node, group), (log_view, after));
        }
        let Some(&(log_view, op, _)) = self.vouched.get(&(node, group)) else {
            return;
        };
        if op <= after {
            return;
        }
        if starting.is_none_or(|view| view <= log_view) {
            let what = format!(
                "node {node} group {group:#x}: cuts its log after op {after} while its \
                 superblock's log_view {log_view} vouches for its log through op {op}, and no \
                 later view is starting: ops it acknowledged in that view would be gone"
            );
            self.fail("durable log_view", what);
            return;
        }
        match checksum {
            Some(checksum) => {
                self.vouched
                    .insert((node, group), (log_view, after, checksum));
            }
            None => {
                self.vouched.remove(&(node, group));
            }
        }
    }

    /// Replica `node` of `group` booted: the log its superblock's log_view vouched for is there
    /// (its head reaches the op and the entry is the same one).
    pub fn booted(
        &mut self,
        node: u8,
        group: u128,
        (log_view, head): (u32, u64),
        applied: u64,
        checksum: impl Fn(u64) -> Option<Checksum>,
    ) {
        self.held.insert((node, group), (log_view, head));
        let Some(&(vouched_view, op, expected)) = self.vouched.get(&(node, group)) else {
            return;
        };
        let log_view = vouched_view;
        let held = op <= applied || (head >= op && checksum(op) == Some(expected));
        if !held {
            let what = format!(
                "node {node} group {group:#x}: its superblock names log_view {log_view}, whose \
                 log reached op {op}, but after the crash its log ends at {head}: the log was \
                 not on disk when the log_view was written"
            );
            self.fail("durable log_view", what);
        }
    }

    /// At the end: every reply a client received is an op of the history (nothing was lost).
    pub fn final_replies(&mut self) {
        let mut lost = None;
        for (&(client, request), (group, op, _)) in &self.replies {
            let found = self.history.get(group).and_then(|h| h.get(op));
            if found.is_none_or(|c| c.client != client || c.request != request) {
                lost = Some(format!(
                    "client {client:#x} request {request} was answered as op {op} of group \
                     {group:#x}, which no replica committed"
                ));
                break;
            }
        }
        if let Some(what) = lost {
            self.fail("replies", what);
        }
    }
}
