//! The node as threads: one tick thread owns the [`Node`] and never touches storage; each
//! group's lane runs on a pool of storage threads, one effect of a lane at a time in the order the
//! replica emitted them (the node hands out a lane's next effect only after the previous one
//! completed), and completions come back to the tick thread over its inbox. Peers' repair rounds
//! that left a replica's ring are read back from disk on a read thread, a bounded number a tick
//! (`iggy_node::serve`), and their answers come back over the inbox too. Messages from peers
//! and clients come in over the same inbox; what the replicas send goes out through an
//! [`Outbox`] (the replica bus and the client port, or channels in a test).
//!
//! A replica that halts (its storage failed) stops the runtime with an error naming the group
//! and the reason: the process exits and its supervisor restarts it, and boot takes over.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use iggy_io::Storage;
use iggy_node::{Done, GroupKind, Job, Node, Ran, Read, Served, Unobserved};
use iggy_recovery::PartitionKey;
use iggy_segments::Partition;
use iggy_vsr::{Destination, Message, Status};

/// The replicas' tick: 10 ms, as the simulator's.
pub const TICK: Duration = Duration::from_millis(10);

/// The longest a read waits for its barrier's answer: past the replica's own read timeout
/// (2 s), so a replica's refusal normally comes first.
const READ_BARRIER_WAIT: Duration = Duration::from_secs(3);

/// Where a node's replicas' messages go.
pub trait Outbox: Send + 'static {
    /// A message for another node's replica of `message.group()`.
    fn to_replica(&mut self, replica: u8, message: Message);
    /// A reply for a client.
    fn to_client(&mut self, client: u128, message: Message);
}

/// What readers off the tick thread see of the node, refreshed by the tick thread: the
/// committed metadata (after each metadata commit, before its reply goes out), the partitions
/// (for the read pool) and who leads each group (every tick).
pub struct Views<S: Storage + Clone> {
    pub metadata: RwLock<Arc<iggy_metadata::State>>,
    pub partitions: RwLock<BTreeMap<PartitionKey, Arc<Partition<S>>>>,
    pub leaders: RwLock<BTreeMap<u128, u8>>,
    /// Partition groups this node could not create (`iggy_node::Node::unavailable`).
    pub unavailable: RwLock<std::collections::BTreeSet<u128>>,
    /// What the runtime and the client port count, for the metrics endpoint.
    pub metrics: crate::metrics::NodeMetrics,
    /// Reads waiting for their group's read barrier ([`Views::read_barrier`]), by token.
    reads: Mutex<std::collections::HashMap<u64, tokio::sync::oneshot::Sender<bool>>>,
    read_tokens: std::sync::atomic::AtomicU64,
    /// The inbox's bound in bytes ([`INBOX_BYTES`] unless [`Views::bound_inbox`] raised it).
    inbox_bytes_max: std::sync::atomic::AtomicU64,
    /// How many replicas each group has.
    replicas: u8,
    /// On a node that is the whole cluster, the groups whose replica was once normal with its
    /// whole log executed (never removed: [`Views::is_current`]).
    solo_current: RwLock<std::collections::BTreeSet<u128>>,
}

impl<S: Storage + Clone> Views<S> {
    /// Empty views (a state of `replicas` replicas) until the runtime refreshes them.
    pub fn new(replicas: u8) -> Arc<Self> {
        Arc::new(Self {
            metadata: RwLock::new(Arc::new(iggy_metadata::State::new(replicas))),
            partitions: RwLock::new(BTreeMap::new()),
            leaders: RwLock::new(BTreeMap::new()),
            unavailable: RwLock::new(std::collections::BTreeSet::new()),
            metrics: crate::metrics::NodeMetrics::default(),
            reads: Mutex::new(std::collections::HashMap::new()),
            read_tokens: std::sync::atomic::AtomicU64::new(1),
            inbox_bytes_max: std::sync::atomic::AtomicU64::new(INBOX_BYTES),
            replicas,
            solo_current: RwLock::new(std::collections::BTreeSet::new()),
        })
    }

    /// Whether what this node holds of `group` (its storage, and for the metadata group its
    /// views) reflects every write the cluster ever acknowledged in it, with no read barrier to
    /// ask: only on a node that is the whole cluster, once the group's replica was normal with
    /// its whole log executed (so what the previous lives acknowledged). From then on that one
    /// replica executes each write, and the views and storage hold it, before its reply goes
    /// out, and no other replica can acknowledge one. On a node of several a barrier's round is
    /// what proves it ([`Views::read_barrier`]).
    pub fn is_current(&self, group: u128) -> bool {
        self.solo_current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(&group)
    }

    /// [`Views::is_current`] of the metadata group.
    pub fn metadata_is_current(&self) -> bool {
        self.is_current(GroupKind::Metadata.id())
    }

    /// On a node that is the whole cluster, takes the groups (`only`: that one) whose replica
    /// is now normal with its whole log executed into [`Views::is_current`]; the metadata views
    /// first take what that replica executed. Every tick, and at each completion of the
    /// group's storage (before the replies it released go out).
    fn refresh_current(&self, node: &Node<S>, only: Option<u128>) {
        if self.replicas != 1 {
            return;
        }
        let caught_up: Vec<u128> = {
            let current = self
                .solo_current
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let groups: Box<dyn Iterator<Item = (&u128, &iggy_node::Group<S>)>> = match only {
                Some(id) => Box::new(node.groups.get_key_value(&id).into_iter()),
                None => Box::new(node.groups.iter()),
            };
            groups
                .filter(|(id, g)| {
                    !current.contains(*id)
                        && g.replica.status() == Status::Normal
                        && g.replica.commit_min() == g.replica.head()
                })
                .map(|(id, _)| *id)
                .collect()
        };
        if caught_up.is_empty() {
            return;
        }
        if caught_up.contains(&GroupKind::Metadata.id()) {
            // The views hold what the metadata replica executed before they are called current.
            self.refresh_metadata(node);
        }
        self.solo_current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend(caught_up);
    }

    /// Raises the inbox's bound in bytes above what the budgets before it admit: every node's
    /// client requests in flight (`in_flight_bytes` each, forwarded here) and each peer's bus
    /// queue, so that the bound drops nothing they let in.
    pub fn bound_inbox(&self, replicas: u8, in_flight_bytes: u64) {
        let admitted = u64::from(replicas)
            .saturating_mul(in_flight_bytes)
            .saturating_add(
                u64::from(replicas.saturating_sub(1)).saturating_mul(crate::bus::QUEUE_BYTES),
            );
        self.inbox_bytes_max.store(
            admitted.max(INBOX_BYTES),
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// Asks this node's replica of `group` for a read barrier (`iggy_vsr::Replica::read`) over
    /// `inbox`: `true` once the replica has executed through a read index its group's primary
    /// proved current after the ask, so what this node's storage and views hold now reflects
    /// every write acknowledged before it; `false` when it refused (no primary, a view change,
    /// no answer within its timeout) or the runtime is gone. `true` at once, asking nothing,
    /// for a group [`Views::is_current`] holds (a node that is the whole cluster).
    pub async fn read_barrier(&self, inbox: &Mutex<Sender<Input<S>>>, group: u128) -> bool {
        if self.is_current(group) {
            return true;
        }
        let token = self
            .read_tokens
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (answer, ready) = tokio::sync::oneshot::channel();
        self.reads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(token, answer);
        let sent = inbox
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .send(Input::Read { group, token });
        let ready = sent.is_ok()
            && tokio::time::timeout(READ_BARRIER_WAIT, ready)
                .await
                .is_ok_and(|answer| answer.unwrap_or(false));
        self.reads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&token);
        ready
    }

    /// Hands the replica's answer to the read `token` to whoever waits for it.
    fn answer_read(&self, token: u64, ready: bool) {
        let waiting = self
            .reads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&token);
        if let Some(answer) = waiting {
            let _ = answer.send(ready);
        }
    }

    pub fn metadata(&self) -> Arc<iggy_metadata::State> {
        self.metadata
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    pub fn partition(&self, key: PartitionKey) -> Option<Arc<Partition<S>>> {
        self.partitions
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&key)
            .cloned()
    }

    /// Whether `group` is a partition this node could not create.
    pub fn is_unavailable(&self, group: u128) -> bool {
        self.unavailable
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(&group)
    }

    pub fn leader(&self, group: u128) -> Option<u8> {
        self.leaders
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&group)
            .copied()
    }

    fn refresh_metadata(&self, node: &Node<S>) {
        // Groups come and go only with metadata commits: counted here, before the commit's
        // reply goes out.
        self.metrics.groups.store(
            node.groups.len() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
        if let Some(state) = node.metadata() {
            *self
                .metadata
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = state.clone();
        }
        let partitions = node
            .groups
            .values()
            .filter_map(|g| match g.kind {
                GroupKind::Partition { key, .. } => g.partition().map(|p| (key, p.clone())),
                GroupKind::Metadata => None,
            })
            .collect();
        *self
            .partitions
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = partitions;
    }

    /// Sums the replicas' event counters into the metrics.
    fn refresh_events(&self, node: &Node<S>) {
        let mut sum: BTreeMap<&'static str, u64> = BTreeMap::new();
        for group in node.groups.values() {
            for (event, count) in group.replica.counters() {
                *sum.entry(event).or_default() += count;
            }
        }
        *self
            .metrics
            .replica_events
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = sum;
    }

    fn refresh_leaders(&self, node: &Node<S>) {
        use std::sync::atomic::Ordering::Relaxed;
        self.refresh_current(node, None);
        let led = node
            .groups
            .values()
            .filter(|g| g.replica.leader() == Some(node.index))
            .count() as u64;
        let without = node
            .groups
            .values()
            .filter(|g| g.replica.leader().is_none())
            .count() as u64;
        self.metrics.groups_led_here.store(led, Relaxed);
        self.metrics.groups_without_primary.store(without, Relaxed);
        self.metrics
            .pipeline_bytes
            .store(node.pipeline_bytes(), Relaxed);
        self.metrics
            .partitions_unavailable
            .store(node.unavailable().len() as u64, Relaxed);
        let unavailable = node
            .unavailable()
            .keys()
            .map(|key| key.group_id())
            .collect();
        *self
            .unavailable
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = unavailable;
        let leaders = node
            .groups
            .iter()
            .filter_map(|(id, g)| g.replica.leader().map(|l| (*id, l)))
            .collect();
        *self
            .leaders
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = leaders;
    }
}

/// What the tick thread hears.
pub enum Input<S: Storage + Clone> {
    /// A message for one of this node's replicas (from a peer or a client).
    Message(Message),
    /// A storage thread carried out a lane's head.
    Done(Box<Done<S>>),
    /// The read thread read back a peer's repair round from disk.
    Served(Box<Served>),
    /// The bus saw a peer's connection close: the groups it leads change view at once.
    PeerClosed(u8),
    /// A read barrier for `group` ([`Views::read_barrier`]), answered under `token`.
    Read { group: u128, token: u64 },
    /// Publish what `group`'s replica journaled now (a client's flush with fsync waits for it).
    Publish { group: u128 },
    /// A storage thread failed to write a partition's buffered entries out after it sent the
    /// completion of their prepare or journal write ([`iggy_node::WriteOut`]): the node halts,
    /// as on any storage failure.
    WriteOutFailed { group: u128, reason: String },
    /// A clean stop: shut the node down (publish, commit points, clean marker) and return.
    Stop,
}

/// At most this many messages from peers and clients wait in the tick thread's inbox (storage
/// completions are never held back): past it a peer's message is dropped, as on a full bus
/// queue, and a client's request is refused `TransientNotAccepted`, so that a burst the tick
/// thread cannot keep up with holds bounded memory instead of growing the node.
pub const INBOX_MESSAGES: u64 = 16_384;

/// ... and at most about this many bytes of them (frame headers and bodies), whatever their
/// count: 16,384 prepares of 15 MiB would otherwise be 240 GiB. A node raises it above what
/// the budgets before it let in ([`Views::bound_inbox`]: each node's client requests in flight,
/// 256 MiB by default, forwarded here, and each peer's bus queue, 128 MiB), so that it drops
/// nothing they admitted: a backstop. At 256 MiB it dropped forwarded requests of 50 clients
/// sending 15 MiB each at once, whose clients then waited out their deadline
/// (`scripts/hostile-clients.sh`, `big-bodies`). A message larger than the bound is still
/// taken when the inbox holds no bytes.
pub const INBOX_BYTES: u64 = 1 << 30;

impl<S: Storage + Clone> Views<S> {
    /// Queues a peer's or client's `message` for the tick thread unless the inbox holds
    /// [`INBOX_MESSAGES`] or its bound in bytes ([`INBOX_BYTES`], or what
    /// [`Views::bound_inbox`] set); whether it was queued.
    pub fn enqueue(&self, inbox: &Sender<Input<S>>, message: Message) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let bytes = crate::bus::queued_bytes(&message);
        if self.metrics.inbox_messages.fetch_add(1, Relaxed) >= INBOX_MESSAGES {
            self.metrics.inbox_messages.fetch_sub(1, Relaxed);
            self.metrics.inbox_refused.fetch_add(1, Relaxed);
            return false;
        }
        let held = self.metrics.inbox_bytes.fetch_add(bytes, Relaxed);
        if held > 0 && held + bytes > self.inbox_bytes_max.load(Relaxed) {
            self.metrics.inbox_bytes.fetch_sub(bytes, Relaxed);
            self.metrics.inbox_messages.fetch_sub(1, Relaxed);
            self.metrics.inbox_refused.fetch_add(1, Relaxed);
            return false;
        }
        if inbox.send(Input::Message(message)).is_err() {
            self.metrics.inbox_bytes.fetch_sub(bytes, Relaxed);
            self.metrics.inbox_messages.fetch_sub(1, Relaxed);
            return false;
        }
        true
    }

    /// The tick thread took `message` out of the inbox: room for it again. Saturating, as a
    /// test may queue a message without [`Views::enqueue`].
    fn taken(&self, message: &Message) {
        let bytes = crate::bus::queued_bytes(message);
        let less = |by: u64| move |n: u64| Some(n.saturating_sub(by));
        let relaxed = std::sync::atomic::Ordering::Relaxed;
        let _ = self
            .metrics
            .inbox_messages
            .fetch_update(relaxed, relaxed, less(1));
        let _ = self
            .metrics
            .inbox_bytes
            .fetch_update(relaxed, relaxed, less(bytes));
    }
}

/// A running node: its inbox, and the tick thread to join.
pub struct Runtime<S: Storage + Clone + Send + 'static> {
    inbox: Sender<Input<S>>,
    tick: Option<JoinHandle<Result<(), String>>>,
}

/// Wall-clock microseconds (Iggy's timestamps), never below the last value handed out: a
/// primary stamps batches with it, and a partition's timestamps must not go back when the
/// clock does.
#[derive(Clone, Default)]
pub struct Clock(Arc<Mutex<u64>>);

impl Clock {
    pub fn now_us(&self) -> u64 {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        let mut last = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *last = (*last).max(wall);
        *last
    }
}

impl<S: Storage + Clone + Send + 'static> Runtime<S> {
    /// The inbox a runtime will read ([`Runtime::start`]): made first, so the bus and the client
    /// port can deliver into it before the runtime exists.
    pub fn inbox_channel() -> (Sender<Input<S>>, Receiver<Input<S>>) {
        channel()
    }

    /// Starts the tick thread and `storage_threads` storage threads for a booted node, reading
    /// the inbox made by [`Runtime::inbox_channel`].
    pub fn start(
        node: Node<S>,
        storage: S,
        outbox: impl Outbox,
        storage_threads: usize,
        (inbox, inputs): (Sender<Input<S>>, Receiver<Input<S>>),
        views: Arc<Views<S>>,
    ) -> std::io::Result<Self> {
        views.refresh_metadata(&node);
        views.refresh_leaders(&node);
        // One queue all storage threads take from, each job waking one idle thread. (A
        // `Mutex<Receiver>` woke two a job: the thread that held the lock through its wait, and
        // on its release the next in line, which went back to sleep on the empty queue.)
        let (storage_jobs, job_queue) = crossbeam_channel::unbounded::<Work<S>>();
        let clock = Clock::default();
        let index = node.index;
        let mut pool = Vec::new();
        for i in 0..storage_threads.max(1) {
            let queue = job_queue.clone();
            let done = inbox.clone();
            let clock = clock.clone();
            let storage = storage.clone();
            pool.push(
                std::thread::Builder::new()
                    .name(format!("node{index}-storage{i}"))
                    .spawn(move || storage_thread(&queue, &done, &clock, &storage))?,
            );
        }
        // Peers' repair rounds read back from disk run on a thread of their own: a lane's
        // effect never waits behind one.
        let (reads, read_queue) = channel::<Read<S>>();
        let served = inbox.clone();
        let reader = std::thread::Builder::new()
            .name(format!("node{index}-reads"))
            .spawn(move || {
                for read in read_queue {
                    if served.send(Input::Served(Box::new(read.run()))).is_err() {
                        return;
                    }
                }
            })?;
        // Replicated partitions' publications run on a thread of their own, beside their lanes
        // (`Node::take_job_beside`): a lane's prepares never wait behind an fdatasync.
        let (publications, publication_queue) = channel::<Job<S>>();
        let published = inbox.clone();
        let publish_clock = clock.clone();
        let publisher = std::thread::Builder::new()
            .name(format!("node{index}-publish"))
            .spawn(move || {
                for job in publication_queue {
                    let done = job.run(publish_clock.now_us());
                    if published.send(Input::Done(Box::new(done))).is_err() {
                        return;
                    }
                }
            })?;
        let tick_clock = clock.clone();
        let tick = std::thread::Builder::new()
            .name(format!("node{index}-tick"))
            .spawn(move || {
                let jobs = Lanes {
                    storage: storage_jobs,
                    publications,
                    clock: tick_clock,
                    inline: RefCell::new(VecDeque::new()),
                };
                let result = run(node, &inputs, (&jobs, &reads), outbox, &views);
                // Closing the job channels ends the storage threads once they drain them.
                drop(jobs);
                drop(reads);
                for thread in pool {
                    let _ = thread.join();
                }
                let _ = reader.join();
                let _ = publisher.join();
                result
            })?;
        Ok(Self {
            inbox,
            tick: Some(tick),
        })
    }

    /// The inbox, for the bus and the client port.
    pub fn inbox(&self) -> Sender<Input<S>> {
        self.inbox.clone()
    }

    /// A clean stop; returns the shutdown's result (or why the node had stopped before).
    pub fn stop(mut self) -> Result<(), String> {
        self.stop_in_place()
    }

    /// [`Runtime::stop`] for an owner that keeps the value.
    pub fn stop_in_place(&mut self) -> Result<(), String> {
        let _ = self.inbox.send(Input::Stop);
        self.join()
    }

    /// Whether the tick thread ended (a halt, or after a stop).
    pub fn finished(&self) -> bool {
        self.tick.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Waits for the tick thread: a halt returns its reason.
    pub fn join(&mut self) -> Result<(), String> {
        match self.tick.take() {
            Some(handle) => handle
                .join()
                .unwrap_or_else(|_| Err("the tick thread panicked".into())),
            None => Ok(()),
        }
    }
}

enum Work<S: Storage + Clone> {
    Job(Box<Job<S>>),
    Retire(iggy_node::Retired<S>),
}

fn storage_thread<S: Storage + Clone>(
    queue: &crossbeam_channel::Receiver<Work<S>>,
    done: &Sender<Input<S>>,
    clock: &Clock,
    storage: &S,
) {
    loop {
        match queue.recv() {
            Ok(Work::Job(job)) => {
                // The completion leaves before the entries are copied into the page cache.
                let (completion, write_out) = job.run_replying_first(clock.now_us());
                let group = completion.group;
                if done.send(Input::Done(Box::new(completion))).is_err() {
                    return;
                }
                if let Some(Err(reason)) = write_out.map(iggy_node::WriteOut::run)
                    && done.send(Input::WriteOutFailed { group, reason }).is_err()
                {
                    return;
                }
            }
            Ok(Work::Retire(retired)) => {
                let key = retired.key;
                if let Err(reason) = iggy_node::retire(storage, retired) {
                    tracing::error!(partition = %key.dir_name(), %reason, "removing a deleted partition failed; boot removes it");
                }
            }
            Err(_) => return,
        }
    }
}

/// When each group's replica on this node left normal status, for the log line that says how
/// long its view change took.
#[derive(Default)]
struct ViewWatch {
    left_normal: BTreeMap<u128, Instant>,
}

impl ViewWatch {
    /// A replica's (status, view) went from `before` to `after`: counts a new view, and when the
    /// replica is normal again logs the view, its primary and how long this node's replica spent
    /// outside normal status (`at_unix_ms` lets a script line it up with a kill).
    fn changed<S: Storage + Clone>(
        &mut self,
        node: &Node<S>,
        views: &Views<S>,
        group: u128,
        before: (Status, u32),
        after: (Status, u32),
    ) {
        if before == after {
            return;
        }
        if after.1 != before.1 {
            views
                .metrics
                .view_changes
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        if before.0 == Status::Normal && after.0 != Status::Normal {
            self.left_normal.insert(group, Instant::now());
        }
        if after.0 == Status::Normal {
            let spent = self.left_normal.remove(&group).map(|at| at.elapsed());
            let label = node
                .groups
                .get(&group)
                .map_or_else(|| format!("group {group:#x}"), |g| g.kind.label());
            tracing::info!(
                node = node.index,
                group = ?label,
                view = after.1,
                primary = node.leader_of(group),
                from_view = before.1,
                from_status = before.0.name(),
                view_change_ms = spent.map(|d| d.as_secs_f64() * 1e3),
                at_unix_ms = now_unix_ms(),
                "view change done"
            );
        }
    }
}

/// When each of this node's replicas began to repair (it lacks prepares a peer holds), so that
/// the end of a catch-up is logged with its length: after a restart, a replica counts for no
/// quorum above what it holds until it repaired what it missed (`docs/vsr.md`, "Repair").
#[derive(Default)]
struct RepairWatch {
    since: BTreeMap<u128, Instant>,
}

impl RepairWatch {
    /// Called once a tick.
    fn tick<S: Storage + Clone>(&mut self, node: &Node<S>) {
        for (group, g) in &node.groups {
            let wants = g.replica.wants_repair();
            match (wants, self.since.get(group)) {
                (true, None) => {
                    self.since.insert(*group, Instant::now());
                }
                (false, Some(at)) => {
                    tracing::info!(
                        node = node.index,
                        group = %g.kind.label(),
                        repair_ms = at.elapsed().as_secs_f64() * 1e3,
                        at_unix_ms = now_unix_ms(),
                        "repair done: the replica holds every prepare it lacked"
                    );
                    self.since.remove(group);
                }
                _ => {}
            }
        }
        self.since
            .retain(|group, _| node.groups.contains_key(group));
    }
}

fn now_unix_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// Sends what `group`'s replica emitted and hands its lane's head to the storage threads.
/// `repair` says the sends answer a peer's `RequestPrepares`: their prepares are counted as
/// repair bytes sent to that peer.
fn flush<S: Storage + Clone>(
    node: &mut Node<S>,
    group: u128,
    jobs: &Lanes<S>,
    outbox: &mut impl Outbox,
    views: &Views<S>,
    repair: bool,
) {
    let drained = node.drain(group);
    for (token, ready) in drained.reads {
        views.answer_read(token, ready);
    }
    send_all(drained.sends, outbox, views, repair);
    if drained.lane_started {
        dispatch(node, group, jobs);
    }
}

/// Sends `sends`; with `repair`, the prepares among them are counted as repair bytes sent to
/// their peer.
fn send_all<S: Storage + Clone>(
    sends: Vec<(Destination, Message)>,
    outbox: &mut impl Outbox,
    views: &Views<S>,
    repair: bool,
) {
    for (to, message) in sends {
        if repair
            && let (Destination::Replica(peer), Message::Prepare { body, .. }) = (to, &message)
        {
            views.metrics.observe_repair_sent(
                peer,
                (body.len() + iggy_format::constants::HEADER_SIZE) as u64,
            );
        }
        match to {
            Destination::Replica(replica) => outbox.to_replica(replica, message),
            Destination::Client(client) => outbox.to_client(client, message),
        }
    }
}

/// The tick thread's loop.
fn run<S: Storage + Clone>(
    mut node: Node<S>,
    inputs: &Receiver<Input<S>>,
    (jobs, reads): (&Lanes<S>, &Sender<Read<S>>),
    mut outbox: impl Outbox,
    views: &Views<S>,
) -> Result<(), String> {
    let mut next_tick = Instant::now() + TICK;
    let mut watch = ViewWatch::default();
    let mut repairs = RepairWatch::default();
    let mut ticks: u64 = 0;
    loop {
        let mut touched: Vec<u128> = Vec::new();
        match next_input(
            jobs,
            inputs,
            next_tick.saturating_duration_since(Instant::now()),
        ) {
            Ok(Input::Message(message)) => {
                views.taken(&message);
                let group = message.group();
                let repair = matches!(message, Message::RequestPrepares { .. });
                if !node.groups.contains_key(&group) {
                    // A request for a group this node does not host (yet: it learns of a new
                    // partition when it executes the metadata commit) was never admitted:
                    // the client may send it again, here or anywhere.
                    if let Some((client, reply)) = refusal_for(node.index, &message) {
                        outbox.to_client(client, reply);
                    }
                } else if let Some((before, after)) = node.deliver(group, message) {
                    watch.changed(&node, views, group, before, after);
                    if repair {
                        // At once, so the count holds only this request's answers.
                        flush(&mut node, group, jobs, &mut outbox, views, true);
                    } else {
                        touched.push(group);
                    }
                }
            }
            Ok(Input::Done(done)) => {
                let group = done.group;
                // A view change may end with a completion (its superblock write): logged too.
                let before = node
                    .groups
                    .get(&group)
                    .map(|g| (g.replica.status(), g.replica.view()));
                if let Some(ran) = node.complete(*done, &mut Unobserved) {
                    if let Some(before) = before {
                        watch.changed(&node, views, group, before, ran.after);
                    }
                    if let Some(reason) = ran.failed {
                        let label = node
                            .groups
                            .get(&group)
                            .map_or_else(|| format!("group {group:#x}"), |g| g.kind.label());
                        return Err(format!(
                            "node {}: {label}: {} failed: {reason}",
                            node.index, ran.name
                        ));
                    }
                    if let Some(reason) = &ran.refused
                        && reason.starts_with(iggy_node::store::NO_ROOM)
                    {
                        no_room(views, &node, group, ran.name, reason);
                    }
                    completed(&mut node, group, &ran, jobs);
                    if ran.name == "install_snapshot" && group != GroupKind::Metadata.id() {
                        // A partition state transfer installed: readers poll the partition
                        // booted on the installed files.
                        views.refresh_metadata(&node);
                    }
                }
                touched.push(group);
                if group == GroupKind::Metadata.id() {
                    // A metadata commit may have hosted new groups: they start at once, and
                    // readers see the new state before the commit's reply goes out.
                    touched.extend(node.groups.keys().copied());
                    views.refresh_metadata(&node);
                }
                views.refresh_current(&node, Some(group));
            }
            Ok(Input::Served(served)) => {
                node.served();
                let Served {
                    group,
                    sends,
                    refused,
                    retained,
                } = *served;
                let label = || {
                    node.groups
                        .get(&group)
                        .map_or_else(|| format!("group {group:#x}"), |g| g.kind.label())
                };
                if let Some(reason) = refused {
                    tracing::warn!(node = node.index, group = %label(), %reason, "a read off the lanes failed (a peer's repair round, a transfer chunk or a retention pass): nothing of it sent");
                }
                if retained > 0 {
                    tracing::info!(node = node.index, group = %label(), segments = retained, "retention deleted the oldest segments");
                }
                send_all(sends, &mut outbox, views, true);
            }
            Ok(Input::PeerClosed(peer)) => {
                let changed = node.peer_connection_closed(peer);
                if !changed.is_empty() {
                    tracing::info!(
                        node = node.index,
                        peer,
                        groups = changed.len(),
                        "a peer's replica connection closed: the groups it led change view now"
                    );
                }
                for (group, before, after) in changed {
                    watch.changed(&node, views, group, before, after);
                    touched.push(group);
                }
            }
            Ok(Input::Read { group, token }) => {
                if node.read(group, token).is_some() {
                    touched.push(group);
                } else {
                    views.answer_read(token, false);
                }
            }
            Ok(Input::Publish { group }) => {
                if node.publish_now(group).is_some() {
                    touched.push(group);
                }
            }
            Ok(Input::WriteOutFailed { group, reason }) => {
                return Err(write_out_failed(&node, group, &reason));
            }
            Ok(Input::Stop) => return stop(node, inputs, jobs),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return stop(node, inputs, jobs),
        }
        if Instant::now() >= next_tick {
            next_tick += TICK;
            node.ration_repair();
            node.maintain(u64::try_from(now_unix_ms() * 1000).unwrap_or(u64::MAX));
            let groups: Vec<u128> = node.groups.keys().copied().collect();
            for group in &groups {
                if let Some((before, after)) = node.tick(*group) {
                    watch.changed(&node, views, *group, before, after);
                }
            }
            repairs.tick(&node);
            for read in node.take_reads() {
                let _ = reads.send(read);
            }
            views.refresh_leaders(&node);
            ticks += 1;
            if ticks.is_multiple_of(100) {
                views.refresh_events(&node);
            }
            touched = groups;
        }
        touched.sort_unstable();
        touched.dedup();
        for group in touched {
            flush(&mut node, group, jobs, &mut outbox, views, false);
        }
        for retired in node.take_retired() {
            let _ = jobs.storage.send(Work::Retire(retired));
        }
    }
}

/// Where a lane's jobs go: the storage threads, the thread that carries out publications
/// beside the lanes (`Node::take_job_beside`), and the tick thread itself for a partition's
/// commit ([`dispatch`]).
struct Lanes<S: Storage + Clone> {
    storage: crossbeam_channel::Sender<Work<S>>,
    publications: Sender<Job<S>>,
    clock: Clock,
    /// Completions of the commits the tick thread carried out itself, taken before the
    /// inbox's next input ([`next_input`]).
    inline: RefCell<VecDeque<Box<Done<S>>>>,
}

/// The tick thread's next input: the completion of a commit it carried out itself first, then
/// the inbox's.
fn next_input<S: Storage + Clone>(
    jobs: &Lanes<S>,
    inputs: &Receiver<Input<S>>,
    timeout: Duration,
) -> Result<Input<S>, RecvTimeoutError> {
    if let Some(done) = jobs.inline.borrow_mut().pop_front() {
        return Ok(Input::Done(done));
    }
    inputs.recv_timeout(timeout)
}

/// A replica's storage refused an op for want of room (`iggy_node::store::NO_ROOM`: its log's
/// next file could not be created, the disk filled between two looks at its free space). The
/// node goes on; it says its disk is low until the next look (every node then refuses client
/// writes with 4010), counts it, and logs the first and every power of two.
fn no_room<S: Storage + Clone>(
    views: &Views<S>,
    node: &Node<S>,
    group: u128,
    what: &str,
    reason: &str,
) {
    use std::sync::atomic::Ordering::Relaxed;
    let metrics = &views.metrics;
    metrics.no_room.store(true, Relaxed);
    let prepare = what == "prepare";
    let count = if prepare {
        &metrics.prepares_refused_no_room
    } else {
        &metrics.journals_refused_no_room
    };
    let before = count.fetch_add(1, Relaxed);
    if before != 0 && !before.is_power_of_two() {
        return;
    }
    let label = node
        .groups
        .get(&group)
        .map_or_else(|| format!("group {group:#x}"), |g| g.kind.label());
    if prepare {
        tracing::warn!(node = node.index, group = %label, refused = before + 1, %reason, "a client write was refused: no room for the log's next file; the node goes on, every node refuses writes until the next look at the free space, then they are tried again");
    } else {
        tracing::warn!(node = node.index, group = %label, refused = before + 1, %reason, "a replica could not journal an op: no room for the log's next file; it acknowledges nothing past it and tries again every 100 ms, the node goes on and refuses client writes until the next look at the free space");
    }
}

/// Hands a lane's head to the storage threads, and the publications ahead of it to the
/// publishing thread. A partition's commit is carried out here, on the tick thread, when it
/// is work in memory (`Job::try_run_inline`: its replies ready at once, its entries written
/// to the segment files after their prepare): a send's path then crosses two threads fewer,
/// each a wake-up that waited 60 to 90 us for a core on this two-core machine
/// (`docs/benchmarks.md`).
fn dispatch<S: Storage + Clone>(node: &mut Node<S>, group: u128, jobs: &Lanes<S>) {
    while let Some(job) = node.take_job_beside(group, &mut Unobserved) {
        if job.is_beside() {
            let _ = jobs.publications.send(job);
            continue;
        }
        match Box::new(job).try_run_inline(jobs.clock.now_us()) {
            Ok(done) => jobs.inline.borrow_mut().push_back(Box::new(done)),
            Err(job) => {
                let _ = jobs.storage.send(Work::Job(job));
            }
        }
        return;
    }
}

/// After a job of `group` completed: the publication beside its lane now wanted (the ones
/// queued behind the last, or its checkpoint), and the lane's next job if one waits.
fn completed<S: Storage + Clone>(node: &mut Node<S>, group: u128, ran: &Ran, jobs: &Lanes<S>) {
    if let Some(job) = node.take_queued_publication(group) {
        let _ = jobs.publications.send(job);
    }
    if ran.more {
        dispatch(node, group, jobs);
    }
}

/// A clean stop: no more messages or ticks; each lane runs to its end (effects the replicas
/// emitted before the stop are carried out, so storage matches what they were told), then the
/// node shuts down.
fn stop<S: Storage + Clone>(
    mut node: Node<S>,
    inputs: &Receiver<Input<S>>,
    jobs: &Lanes<S>,
) -> Result<(), String> {
    while node
        .groups
        .iter()
        .any(|(id, g)| g.lane_busy || node.publishing_beside(*id))
    {
        match next_input(jobs, inputs, Duration::from_secs(60)) {
            Ok(Input::Done(done)) => {
                let group = done.group;
                match node.complete(*done, &mut Unobserved) {
                    Some(ran) if ran.failed.is_some() => {
                        if let Some(g) = node.groups.get_mut(&group) {
                            g.lane.clear();
                            g.lane_busy = false;
                        }
                    }
                    Some(ran) => completed(&mut node, group, &ran, jobs),
                    _ => {}
                }
            }
            Ok(Input::WriteOutFailed { group, reason }) => {
                return Err(write_out_failed(&node, group, &reason));
            }
            Ok(_) => {}
            Err(_) => {
                return Err(format!(
                    "node {}: a storage effect did not complete within 60 s of the stop",
                    node.index
                ));
            }
        }
    }
    node.shutdown()
}

/// The halt's reason when a write of a partition's buffered entries to its segment files
/// failed.
fn write_out_failed<S: Storage + Clone>(node: &Node<S>, group: u128, reason: &str) -> String {
    let label = node
        .groups
        .get(&group)
        .map_or_else(|| format!("group {group:#x}"), |g| g.kind.label());
    format!("node {}: {label}: write-out failed: {reason}", node.index)
}

/// The `NotAccepted` reply to `message` if it is a client's request.
fn refusal_for(index: u8, message: &Message) -> Option<(u128, Message)> {
    let Message::Request {
        cluster,
        group,
        client,
        request,
        ..
    } = message
    else {
        return None;
    };
    Some((
        *client,
        Message::Reply {
            from: iggy_vsr::From {
                cluster: *cluster,
                group: *group,
                replica: index,
                view: 0,
            },
            client: *client,
            request: *request,
            op: 0,
            status: iggy_vsr::ReplyStatus::NotAccepted,
            body: Vec::new(),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The inbox takes at most [`INBOX_MESSAGES`] messages of peers and clients; the next is
    /// refused and counted, and one taken by the tick thread makes room again.
    #[test]
    fn the_inbox_refuses_messages_past_its_bound() {
        let views = Views::<iggy_io::SimStorage>::new(3);
        let (inbox, inputs) = channel();
        let ping = || Message::Ping {
            from: iggy_vsr::From {
                cluster: 1,
                group: 0,
                replica: 1,
                view: 0,
            },
            hears: 0,
        };
        for _ in 0..INBOX_MESSAGES {
            assert!(views.enqueue(&inbox, ping()));
        }
        assert!(
            !views.enqueue(&inbox, ping()),
            "one past the bound was queued"
        );
        assert_eq!(
            views
                .metrics
                .inbox_refused
                .load(std::sync::atomic::Ordering::Relaxed),
            1
        );
        let Ok(Input::Message(taken)) = inputs.try_recv() else {
            panic!("a message was queued");
        };
        views.taken(&taken);
        assert!(views.enqueue(&inbox, ping()), "room was not made again");
    }

    #[test]
    fn the_inbox_refuses_bytes_past_its_bound() {
        let views = Views::<iggy_io::SimStorage>::new(3);
        let (inbox, inputs) = channel();
        let request = |request: u64, bytes: usize| Message::Request {
            cluster: 1,
            group: 1 << 96,
            client: 7,
            request,
            operation: 1,
            body: vec![0; bytes],
        };
        // Larger than the bound alone: taken, since the inbox holds nothing.
        let big = usize::try_from(INBOX_BYTES).unwrap() + 1;
        assert!(
            views.enqueue(&inbox, request(1, big)),
            "the largest request goes through"
        );
        assert!(
            !views.enqueue(&inbox, request(2, 1 << 20)),
            "a MiB more was queued past the bound"
        );
        let Ok(Input::Message(taken)) = inputs.try_recv() else {
            panic!("a message was queued");
        };
        views.taken(&taken);
        // 15 MiB requests: the bound holds about 68 of them, not 16,384.
        let mut queued = 0;
        while views.enqueue(&inbox, request(3 + queued, 15 << 20)) {
            queued += 1;
            assert!(queued < 100, "no byte bound");
        }
        assert_eq!(queued, INBOX_BYTES / ((15 << 20) + 256), "{queued} queued");
        assert_eq!(
            views
                .metrics
                .inbox_refused
                .load(std::sync::atomic::Ordering::Relaxed),
            2
        );
    }
}
