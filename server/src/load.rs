//! `iggy-server load` and `iggy-server verify`: producers on the client wire that record every
//! send and its outcome in a ledger, and the check that reads each node back and reports every
//! acknowledged message missing, duplicated, moved or damaged, per node and partition.
//!
//! A message's id is `run << 96 | producer << 64 | sequence` and its payload is a function of its
//! id and size ([`payload`], a seeded ChaCha8 stream), so the ledger needs one line per batch, not the bytes: `verify`
//! rebuilds each payload and compares it with what a node serves.
//!
//! The ledger is JSON lines: a header (`{"ledger":1,"run":..,"stream":..,"message_size":..,
//! "topics":[..]}`), then one line per batch: `{"topic":..,"partition":..,"producer":..,
//! "sequence":..,"count":..,"outcome":"ack","offset":..,"latency_us":..}`, or an outcome of
//! `"unknown"` (the connection or the cluster failed before the reply: the batch may or may not
//! be in the log) with the error. Acknowledged batches must be on every node exactly once, at the
//! offset the reply named; an unknown batch may be there at most once.

// The ledger is the load tool's own record, not a durable file of a node: plain `std::fs`.
#![allow(clippy::disallowed_types, clippy::disallowed_methods)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use iggy_client::{Client, ClientError};
use iggy_protocol::primitives::OptionEntry;
use serde::{Deserialize, Serialize};

/// A topic the load writes to: every partition gets a producer.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct LoadTopic {
    pub name: String,
    pub durability: String,
    pub partitions: u32,
}

#[derive(Clone, Debug)]
pub struct LoadConfig {
    /// The nodes' client ports; producer `i` starts on node `i % len` and moves on when its
    /// node fails.
    pub nodes: Vec<SocketAddr>,
    pub username: String,
    pub password: String,
    pub stream: String,
    pub topics: Vec<LoadTopic>,
    /// Create the stream and topics first (an existing one is an error).
    pub create: bool,
    /// Batches per second per producer; 0 sends the next batch as soon as the last is answered.
    pub rate: f64,
    pub batch_messages: u32,
    pub message_size: usize,
    pub duration: Duration,
    /// Also a consumer per partition (see [`ConsumerReport`]).
    pub consumers: bool,
    /// Created topics keep at most this many bytes a partition (`max_topic_size`; 0 keeps
    /// everything): the nodes run retention, and `verify --retained` reads what they kept.
    pub max_topic_size: u64,
    /// How long a producer or consumer waits for a reply before it takes its node for paused or
    /// cut off and moves to the next (the request's outcome unknown).
    pub request_timeout: Duration,
    /// Whose options created topics carry.
    pub topic_options: TopicOptions,
    /// The consumers start once the producers stopped and read back what they wrote, timed
    /// ([`ConsumerReport::mb_per_s`]); otherwise they read beside the producers.
    pub consume_after: bool,
}

/// Whose options `load --create` gives a topic: ours, or Apache Iggy's, so that one driver
/// measures both servers (`scripts/side-by-side.sh`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TopicOptions {
    /// `durability` = the topic's durability.
    Ours,
    /// Apache Iggy's keys (its server refuses ours with 4041, "Unsupported option key"): a
    /// replicated topic gets none (its default: no fsync), a persisted one `enforce_fsync`
    /// (an fsync each time a partition saves, by default every 1,024 messages or 1 MiB), and with
    /// `every_batch` also `messages_required_to_save = 1` (an fsync per batch before the reply,
    /// as ours does for persisted durability).
    Apache { every_batch: bool },
}

impl TopicOptions {
    /// The options of a created topic of `durability`.
    fn entries(self, durability: &str, max_topic_size: u64) -> Vec<OptionEntry> {
        let mut options = Vec::new();
        match self {
            Self::Ours => options.push(OptionEntry::string("durability", durability)),
            Self::Apache { every_batch } => {
                if durability == "persisted" {
                    options.push(OptionEntry::string("enforce_fsync", "true"));
                    if every_batch {
                        options.push(OptionEntry::string("messages_required_to_save", "1"));
                    }
                }
            }
        }
        if max_topic_size > 0 {
            options.push(OptionEntry::uint64("max_topic_size", max_topic_size));
        }
        options
    }
}

/// Ledger lines.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LedgerHeader {
    pub ledger: u32,
    pub run: u32,
    pub stream: String,
    pub message_size: usize,
    pub topics: Vec<LoadTopic>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LedgerBatch {
    pub topic: String,
    pub partition: u32,
    pub producer: u32,
    pub sequence: u64,
    pub count: u32,
    pub outcome: Outcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_us: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When the outcome came back, in wall-clock milliseconds since the Unix epoch: the fault
    /// harness measures write gaps from it (`scripts/fault-harness.sh`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_ms: Option<u64>,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Ack,
    Unknown,
}

/// What a load run did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LoadReport {
    pub producers: u32,
    pub seconds: f64,
    pub batches_acknowledged: u64,
    pub messages_acknowledged: u64,
    pub batches_unknown: u64,
    /// Payload megabytes acknowledged per second (10^6 bytes).
    pub mb_per_s: f64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
    /// The longest time any producer went without an acknowledgment (its write gap), ms.
    pub max_gap_ms: u64,
    /// Each producer's longest write gap, ms, by producer (topic order, then partition).
    pub gaps_ms: Vec<u64>,
    /// When each producer's longest gap began, ms after the load started.
    pub gap_starts_ms: Vec<u64>,
    /// Failures by kind ("connection", "status 10xxx", ...), each counted once per batch.
    pub errors: std::collections::BTreeMap<String, u64>,
    /// What the consumers read, with `--consumers`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consumers: Option<ConsumerReport>,
}

/// What the consumers read: one a partition, polling it as a consumer of its own (an id from
/// the run and the producer, so it starts at the partition's first message) with the `Next`
/// strategy and auto-commit, starting on the node after its producer's and
/// moving on when its node fails. After the producers stop, each reads on until it has read
/// through its producer's last acknowledged message (or [`CONSUMER_DRAIN`] passes without a
/// new message read).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ConsumerReport {
    /// Messages of this run read in order, each for the first time.
    pub consumed: u64,
    /// Messages of other runs read in order (what the partition held before this load).
    pub other_runs: u64,
    /// Messages read again (a poll after a reconnect, or on a node whose copy of the stored
    /// offset trails: at least once).
    pub reread: u64,
    /// The most messages one consumer read again in a row (between two first reads): what a
    /// reconnect cost it. Issue #45 bounds it by one poll's count (`POLL_COUNT`, 1,000).
    #[serde(default)]
    pub reread_at_once: u64,
    /// Offsets a consumer never saw although it read past them, beyond the reach of every poll
    /// that failed before (see `lost_with_a_reply`): a gap no lost answer explains.
    pub skipped: u64,
    /// Offsets passed over within the reach of a failed poll. Auto-commit stores the offset
    /// before the answer goes out, so an answer lost with its connection (a node killed
    /// mid-poll) leaves the consumer's stored offset past messages it never got: at most once,
    /// as Iggy's auto-commit. That store may reach the node the consumer reads from next only
    /// later (that node executes the partition's ops behind the primary), so the jump may come
    /// several polls after the failure. A failed poll's answer ends at most a poll's count past
    /// where it started, and it started at most at the highest offset the consumer had read or a
    /// lost answer could have stored: the reach. The log's own density is verify's
    /// `offset_gaps`, checked on every node.
    pub lost_with_a_reply: u64,
    /// A few forward jumps: from, to, the node that served the jump, polls since the last
    /// failed one, and whether a lost answer's reach covers it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jump_examples: Vec<String>,
    /// Messages of this run whose payload is not the one sent.
    pub damaged: u64,
    /// Offsets read again (within the last [`CHANGE_WINDOW`] offsets read) that held another
    /// message than the first read there: a message served before its op committed and later
    /// replaced (a dirty read). Never in a correct cluster.
    #[serde(default)]
    pub changed: u64,
    /// A few of them: offset, the node that served the second read, both message ids.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed_examples: Vec<String>,
    /// Acknowledged messages of this run the consumer never read, at any offset. At most
    /// `lost_with_a_reply` in a correct cluster (those offsets hold acknowledged messages or
    /// ones whose outcome is unknown).
    #[serde(default)]
    pub missed: u64,
    /// Partitions whose consumer read through its producer's last acknowledged message.
    pub caught_up: u32,
    /// Failed polls by kind.
    pub errors: std::collections::BTreeMap<String, u64>,
    /// With [`LoadConfig::consume_after`]: how long the consumers took to read what the
    /// producers wrote (from their start to the last one's end), and the payload megabytes
    /// (10^6 bytes) read per second in that time.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub seconds: f64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub mb_per_s: f64,
}

fn is_zero(value: &f64) -> bool {
    *value == 0.0
}

/// The consumer id of producer `producer`'s consumer in run `run`.
#[must_use]
pub fn consumer_id(run: u32, producer: u32) -> u32 {
    run.wrapping_mul(0x9e37_79b1).wrapping_add(producer) & 0x7fff_ffff
}
/// How many of the latest offsets a consumer remembers the message of, to tell a re-read of
/// the same message from a changed one.
pub const CHANGE_WINDOW: u64 = 1 << 16;
/// How long consumers read on after the producers stop without reading anything new: a
/// consumer still catching up (a group that stalled under the kills leaves a backlog) goes on.
pub const CONSUMER_DRAIN: Duration = Duration::from_secs(60);

/// Messages a consumer's poll asks for.
const POLL_COUNT: u32 = 1_000;

/// How far a consumer's stored offset may have been moved by poll answers it never got. A poll
/// that failed may still have been answered, and auto-commit stored the offset of that
/// answer's last message: the answer started at most at the highest offset stored so far (what
/// the consumer read, or an earlier lost answer's end) and held at most [`POLL_COUNT`]
/// messages. A forward jump that lands within the reach is an answer lost with a failed poll,
/// whenever it shows (the store reaches the node read next when that node executes it); one
/// beyond is a gap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct LostReach(Option<u64>);

impl LostReach {
    /// A poll failed while the consumer expected offset `expected` next.
    fn failed(&mut self, expected: Option<u64>) {
        let start = expected.unwrap_or(0).max(self.0.unwrap_or(0));
        self.0 = Some(start + u64::from(POLL_COUNT));
    }

    /// Whether a jump landing on `offset` is explained by a lost answer.
    fn covers(self, offset: u64) -> bool {
        self.0.is_some_and(|reach| offset <= reach)
    }
}

/// Message `sequence` of `producer` in run `run`.
#[must_use]
pub fn message_id(run: u32, producer: u32, sequence: u64) -> u128 {
    u128::from(run) << 96 | u128::from(producer) << 64 | u128::from(sequence)
}

/// The run, producer and sequence of message `id`: the inverse of [`message_id`].
#[must_use]
#[allow(clippy::cast_possible_truncation)] // each field is cut out of its own bits
pub fn split_id(id: u128) -> (u32, u32, u64) {
    ((id >> 96) as u32, (id >> 64) as u32, id as u64)
}

/// The payload of message `id`: the id itself (when it fits), then a SplitMix64 stream seeded
/// by the id, so a moved or damaged message cannot pass for another. Cheap on purpose (two
/// multiplies a word, where it was a ChaCha8 stream): the driver makes and checks a payload per
/// message on the same cores as the server it measures.
#[must_use]
pub fn payload(id: u128, size: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(size.max(16) + 8);
    out.extend_from_slice(&id.to_le_bytes());
    let mut state = twox_hash::XxHash3_64::oneshot(&id.to_le_bytes());
    while out.len() < size {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        out.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    out.truncate(size);
    out
}

fn error_kind(error: &ClientError) -> String {
    match error {
        ClientError::Io { source, .. }
            if matches!(
                source.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            "no reply in time".into()
        }
        ClientError::Io { .. } => "connection".into(),
        ClientError::Evicted { reason, .. } => format!("evicted ({reason:?})"),
        ClientError::Status { status, .. } => format!("status {status}"),
        ClientError::Protocol { .. } => "protocol".into(),
    }
}

/// A connection that survives node failures: on a connection error it moves to the next node
/// and logs in again, under a new client id (the old session's requests are not replayed: their
/// batches are recorded as unknown).
struct Producer {
    nodes: Vec<SocketAddr>,
    next_node: usize,
    client: Option<Client>,
    id_base: u128,
    connections: u128,
    username: String,
    password: String,
    request_timeout: Duration,
}

impl Producer {
    /// Not connected yet; the first connection goes to node `first_node` (mod the roster).
    fn new(config: &LoadConfig, first_node: usize, id_base: u128) -> Self {
        Self {
            nodes: config.nodes.clone(),
            next_node: first_node,
            client: None,
            id_base,
            connections: 0,
            username: config.username.clone(),
            password: config.password.clone(),
            request_timeout: config.request_timeout,
        }
    }

    /// The address of the node the current connection went to.
    fn serving(&self) -> SocketAddr {
        self.nodes[(self.next_node + self.nodes.len() - 1) % self.nodes.len()]
    }

    /// The connection, or a new one; `None` once `stop` is set or no node has answered for
    /// [`RECONNECT_PATIENCE`].
    fn connected(&mut self, stop: &AtomicBool) -> Option<&mut Client> {
        let mut failures = 0u32;
        let give_up = Instant::now() + RECONNECT_PATIENCE;
        while self.client.is_none() {
            if stop.load(Ordering::Relaxed) || Instant::now() > give_up {
                return None;
            }
            let address = self.nodes[self.next_node % self.nodes.len()];
            self.next_node += 1;
            self.connections += 1;
            let tried = Instant::now();
            let attempt =
                Client::connect(address, self.id_base | self.connections).and_then(|mut client| {
                    client.set_reply_timeout(self.request_timeout)?;
                    client.login(&self.username, &self.password)?;
                    Ok(client)
                });
            match attempt {
                Ok(client) => {
                    tracing::debug!(%address, ms = u64::try_from(tried.elapsed().as_millis()).unwrap_or(u64::MAX), "load: logged in");
                    self.client = Some(client);
                }
                Err(error) => {
                    failures += 1;
                    tracing::debug!(%address, ms = u64::try_from(tried.elapsed().as_millis()).unwrap_or(u64::MAX), "load: no login: {error}");
                    if (failures as usize).is_multiple_of(self.nodes.len()) {
                        // Every node refused: back off before the next round.
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
            }
        }
        self.client.as_mut()
    }
}

/// How long a producer tries the nodes in turn before it gives up (longer than a restart of the
/// whole cluster).
const RECONNECT_PATIENCE: Duration = Duration::from_secs(60);

struct Shared {
    ledger: Mutex<BufWriter<std::fs::File>>,
    stop: AtomicBool,
    /// Per producer: one past the offset of its last acknowledged message (0: none yet).
    acked_end: Vec<std::sync::atomic::AtomicU64>,
    /// Set once every producer has stopped: the consumers' drain begins.
    producers_done: AtomicBool,
    /// Per producer: the first sequence and the message count of each acknowledged batch.
    acked: Vec<Mutex<Vec<(u64, u32)>>>,
}

impl Shared {
    fn record(&self, line: &LedgerBatch) {
        if let Ok(text) = serde_json::to_string(line)
            && let Ok(mut ledger) = self.ledger.lock()
        {
            // A line per batch, written through: a load that is killed keeps what it recorded.
            let _ = writeln!(ledger, "{text}").and_then(|()| ledger.flush());
        }
    }
}

struct ProducerResult {
    latencies: Histogram<u64>,
    acknowledged: u64,
    messages: u64,
    unknown: u64,
    max_gap: Duration,
    /// When the longest gap began, after the load started.
    gap_start: Duration,
    errors: std::collections::BTreeMap<String, u64>,
}

/// Runs the load and writes the ledger to `ledger`. `stop` ends it early (as the duration does).
pub fn load(
    config: &LoadConfig,
    ledger: &Path,
    stop: Option<Arc<AtomicBool>>,
) -> Result<LoadReport, String> {
    if config.nodes.is_empty() {
        return Err("no nodes to send to".into());
    }
    if config.message_size < 16 {
        return Err(format!(
            "--message-size {}: at least 16 bytes (the id is the payload's first 16)",
            config.message_size
        ));
    }
    // The run's id: in every message id and client id, so two loads (even started in the same
    // second, from two processes) never share either.
    let run = {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos());
        let mixed = twox_hash::XxHash3_64::oneshot(
            &[
                nanos.to_le_bytes(),
                u128::from(std::process::id()).to_le_bytes(),
            ]
            .concat(),
        );
        u32::try_from(mixed & 0x7fff_ffff).unwrap_or(1).max(1)
    };
    if config.create {
        let mut admin = Producer::new(config, 0, message_id(run, u32::MAX, 0));
        let never = AtomicBool::new(false);
        let client = admin.connected(&never).ok_or_else(|| {
            format!(
                "no node of {:?} accepted a login within {} s",
                config.nodes,
                RECONNECT_PATIENCE.as_secs()
            )
        })?;
        client
            .create_stream(&config.stream)
            .map_err(|e| format!("creating stream {:?}: {e}", config.stream))?;
        for topic in &config.topics {
            let options = config
                .topic_options
                .entries(&topic.durability, config.max_topic_size);
            client
                .create_topic_with(&config.stream, &topic.name, topic.partitions, options)
                .map_err(|e| format!("creating topic {:?}: {e}", topic.name))?;
        }
    }
    let file = std::fs::File::create(ledger)
        .map_err(|e| format!("creating the ledger {}: {e}", ledger.display()))?;
    let mut writer = BufWriter::new(file);
    let header = LedgerHeader {
        ledger: 1,
        run,
        stream: config.stream.clone(),
        message_size: config.message_size,
        topics: config.topics.clone(),
    };
    writeln!(
        writer,
        "{}",
        serde_json::to_string(&header).map_err(|e| e.to_string())?
    )
    .map_err(|e| format!("{}: {e}", ledger.display()))?;
    let partitions: u32 = config.topics.iter().map(|t| t.partitions).sum();
    let shared = Arc::new(Shared {
        ledger: Mutex::new(writer),
        stop: AtomicBool::new(false),
        acked_end: (0..partitions)
            .map(|_| std::sync::atomic::AtomicU64::new(0))
            .collect(),
        producers_done: AtomicBool::new(false),
        acked: (0..partitions).map(|_| Mutex::new(Vec::new())).collect(),
    });
    let started = Instant::now();
    let mut threads = Vec::new();
    // The consumers' (producer, topic, partition), started with the producers or after them.
    let mut readers = Vec::new();
    let start_consumers = |readers: Vec<(u32, String, u32)>| {
        readers
            .into_iter()
            .map(|(producer, topic, partition)| {
                let shared = Arc::clone(&shared);
                let config = config.clone();
                std::thread::spawn(move || {
                    consume(&config, &shared, run, producer, &topic, partition)
                })
            })
            .collect::<Vec<_>>()
    };
    let mut producer_index = 0u32;
    for topic in &config.topics {
        for partition in 0..topic.partitions {
            let producer = producer_index;
            producer_index += 1;
            let shared = Arc::clone(&shared);
            let config = config.clone();
            let topic = topic.name.clone();
            if config.consumers {
                readers.push((producer, topic.clone(), partition));
            }
            threads.push(std::thread::spawn(move || {
                produce(&config, &shared, run, producer, &topic, partition, started)
            }));
        }
    }
    let mut consumers = if config.consume_after {
        Vec::new()
    } else {
        start_consumers(std::mem::take(&mut readers))
    };
    // The duration, or the caller's stop.
    let end = started + config.duration;
    while Instant::now() < end && !stop.as_ref().is_some_and(|s| s.load(Ordering::Relaxed)) {
        std::thread::sleep(Duration::from_millis(20).min(end - Instant::now().min(end)));
    }
    shared.stop.store(true, Ordering::Relaxed);
    let mut latencies = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3)
        .map_err(|e| format!("histogram: {e}"))?;
    let mut report = LoadReport {
        producers: producer_index,
        ..LoadReport::default()
    };
    for thread in threads {
        let result = thread.join().map_err(|_| "a producer panicked")?;
        let _ = latencies.add(&result.latencies);
        report.batches_acknowledged += result.acknowledged;
        report.messages_acknowledged += result.messages;
        report.batches_unknown += result.unknown;
        let gap = u64::try_from(result.max_gap.as_millis()).unwrap_or(u64::MAX);
        report.max_gap_ms = report.max_gap_ms.max(gap);
        report.gaps_ms.push(gap);
        report
            .gap_starts_ms
            .push(u64::try_from(result.gap_start.as_millis()).unwrap_or(u64::MAX));
        for (kind, count) in result.errors {
            *report.errors.entry(kind).or_default() += count;
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    shared.producers_done.store(true, Ordering::Relaxed);
    let reading = Instant::now();
    if config.consume_after {
        consumers = start_consumers(readers);
    }
    if config.consumers {
        let mut read = ConsumerReport::default();
        for consumer in consumers {
            let one = consumer.join().map_err(|_| "a consumer panicked")?;
            read.consumed += one.consumed;
            read.other_runs += one.other_runs;
            read.reread += one.reread;
            read.reread_at_once = read.reread_at_once.max(one.reread_at_once);
            read.skipped += one.skipped;
            read.lost_with_a_reply += one.lost_with_a_reply;
            read.damaged += one.damaged;
            read.changed += one.changed;
            read.missed += one.missed;
            if read.changed_examples.len() < 16 {
                read.changed_examples.extend(one.changed_examples);
            }
            if read.jump_examples.len() < 16 {
                read.jump_examples.extend(one.jump_examples);
            }
            read.caught_up += one.caught_up;
            for (kind, count) in one.errors {
                *read.errors.entry(kind).or_default() += count;
            }
        }
        if config.consume_after {
            read.seconds = reading.elapsed().as_secs_f64();
            #[allow(clippy::cast_precision_loss)]
            {
                read.mb_per_s =
                    (read.consumed as f64 * config.message_size as f64) / read.seconds / 1e6;
            }
        }
        report.consumers = Some(read);
    }
    report.seconds = elapsed;
    #[allow(clippy::cast_precision_loss)]
    {
        report.mb_per_s =
            (report.messages_acknowledged as f64 * config.message_size as f64) / elapsed / 1e6;
    }
    report.p50_us = latencies.value_at_quantile(0.5);
    report.p99_us = latencies.value_at_quantile(0.99);
    report.p999_us = latencies.value_at_quantile(0.999);
    report.max_us = latencies.max();
    let mut writer = shared
        .ledger
        .lock()
        .map_err(|_| "the ledger's lock is poisoned")?;
    writer
        .flush()
        .map_err(|e| format!("{}: {e}", ledger.display()))?;
    writer
        .get_ref()
        .sync_all()
        .map_err(|e| format!("{}: {e}", ledger.display()))?;
    Ok(report)
}

fn produce(
    config: &LoadConfig,
    shared: &Shared,
    run: u32,
    producer: u32,
    topic: &str,
    partition: u32,
    started: Instant,
) -> ProducerResult {
    let mut result = ProducerResult {
        latencies: Histogram::new_with_bounds(1, 600_000_000, 3)
            .unwrap_or_else(|e| panic!("histogram bounds: {e}")),
        acknowledged: 0,
        messages: 0,
        unknown: 0,
        max_gap: Duration::ZERO,
        gap_start: Duration::ZERO,
        errors: std::collections::BTreeMap::new(),
    };
    let mut connection = Producer::new(
        config,
        producer as usize,
        message_id(run, producer, 0) | 1 << 48,
    );
    let mut sequence = 0u64;
    let mut last_ack = started;
    let interval = (config.rate > 0.0).then(|| Duration::from_secs_f64(1.0 / config.rate));
    let mut batch_index = 0u32;
    while !shared.stop.load(Ordering::Relaxed) {
        if let Some(interval) = interval {
            let due = started + interval * batch_index;
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
        }
        batch_index += 1;
        let Some(client) = connection.connected(&shared.stop) else {
            if !shared.stop.load(Ordering::Relaxed) {
                *result.errors.entry("no node answered".into()).or_default() += 1;
            }
            break;
        };
        let messages: Vec<(u128, Vec<u8>)> = (0..u64::from(config.batch_messages))
            .map(|i| {
                let id = message_id(run, producer, sequence + i);
                (id, payload(id, config.message_size))
            })
            .collect();
        let sent = Instant::now();
        let outcome = client.send(&config.stream, topic, partition, &messages);
        let latency = sent.elapsed();
        let mut line = LedgerBatch {
            topic: topic.to_string(),
            partition,
            producer,
            sequence,
            count: config.batch_messages,
            outcome: Outcome::Ack,
            offset: None,
            latency_us: Some(u64::try_from(latency.as_micros()).unwrap_or(u64::MAX)),
            error: None,
            at_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .ok()
                .and_then(|d| u64::try_from(d.as_millis()).ok()),
        };
        match outcome {
            Ok(offset) => {
                let now = Instant::now();
                if now - last_ack > result.max_gap {
                    result.max_gap = now - last_ack;
                    result.gap_start = last_ack - started;
                }
                last_ack = now;
                result
                    .latencies
                    .saturating_record(u64::try_from(latency.as_micros()).unwrap_or(u64::MAX));
                result.acknowledged += 1;
                result.messages += u64::from(config.batch_messages);
                line.offset = Some(offset);
                if let Some(end) = shared.acked_end.get(producer as usize) {
                    end.fetch_max(offset + u64::from(config.batch_messages), Ordering::Relaxed);
                }
                if let Some(acked) = shared.acked.get(producer as usize)
                    && let Ok(mut acked) = acked.lock()
                {
                    acked.push((sequence, config.batch_messages));
                }
            }
            Err(error) => {
                *result.errors.entry(error_kind(&error)).or_default() += 1;
                result.unknown += 1;
                line.outcome = Outcome::Unknown;
                line.latency_us = None;
                line.error = Some(error.to_string());
                // Start over on another node: this connection's state is unknown. The next
                // batch goes at once (after a breath), not at its slot: a client retries on a
                // connection error, and the gap measured is the cluster's, not the schedule's
                // (at 2 batches a second, waiting for the slot added up to 500 ms to every gap).
                connection.client = None;
                batch_index = batch_index.saturating_sub(1);
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        shared.record(&line);
        sequence += u64::from(config.batch_messages);
    }
    let tail = Instant::now() - last_ack;
    if result.acknowledged > 0 && tail > result.max_gap {
        result.max_gap = tail;
        result.gap_start = last_ack - started;
    }
    result
}

/// What `verify` found on one node for one partition (`verify --json` prints one a line).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PartitionCheck {
    pub node: String,
    pub topic: String,
    pub partition: u32,
    pub acknowledged: u64,
    /// Messages the node serves for this partition (of this run or any other).
    pub served: u64,
    /// Acknowledged messages the node does not serve (with `verify --retained`, only those at
    /// or above the first offset it serves).
    pub missing: u64,
    /// With `verify --retained`: acknowledged messages below the first offset the node serves,
    /// which retention deleted.
    #[serde(default)]
    pub retained: u64,
    /// Messages of this run served more than once.
    pub duplicated: u64,
    /// Acknowledged messages served at another offset than their reply named.
    pub moved: u64,
    /// Messages of this run whose payload is not the one sent.
    pub damaged: u64,
    /// Offsets read again (within the last [`CHANGE_WINDOW`] offsets read) that held another
    /// message than the first read there: a message served before its op committed and later
    /// replaced (a dirty read). Never in a correct cluster.
    #[serde(default)]
    pub changed: u64,
    /// A few of them: offset, the node that served the second read, both message ids.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed_examples: Vec<String>,
    /// Acknowledged messages of this run the consumer never read, at any offset. At most
    /// `lost_with_a_reply` in a correct cluster (those offsets hold acknowledged messages or
    /// ones whose outcome is unknown).
    #[serde(default)]
    pub missed: u64,
    /// Messages of unknown-outcome batches that made it (each at most once).
    pub unknown_present: u64,
    /// The lowest offset of an acknowledged message the node does not serve.
    pub missing_from: Option<u64>,
    /// Runs of missing acknowledged messages in send order (the producer's sequence). A log cut
    /// back once (every node killed, unpublished tails discarded) loses one run; a hole in the
    /// middle of what a node keeps shows as messages sent before the run served above it.
    pub lost_runs: u64,
    /// Messages of this run sent before the first missing acknowledged message but served at or
    /// above its offset: with one lost run, anything here means the node kept something above
    /// the loss, so the loss was not a suffix of its log.
    pub kept_above_loss: u64,
    /// The lowest offset at which the node serves a message of this run sent after the first
    /// missing acknowledged one. After a cut the log continues from the cut, at or below the
    /// lowest missing offset; later messages kept at their old offsets above it mean a hole.
    pub resumed_at: Option<u64>,
    /// Places where the offsets the node serves are not consecutive (a skipped or repeated
    /// offset). Offsets are dense in every correct log.
    pub offset_gaps: u64,
    /// Up to 5 examples of what went wrong, as text.
    pub examples: Vec<String>,
}

impl PartitionCheck {
    #[must_use]
    pub fn clean(&self) -> bool {
        self.missing + self.duplicated + self.moved + self.damaged + self.offset_gaps == 0
    }

    /// Whether what is missing is at most one suffix of the node's log as it was when it was
    /// lost (the log may have continued from the cut since): one run of missing messages in
    /// send order, nothing sent before it kept above it, what was sent after it resumed at or
    /// below it, offsets dense, and nothing duplicated, moved or damaged. Meaningful when this
    /// run was the partition's only writer from the loss until its own end.
    #[must_use]
    pub fn lost_only_a_suffix(&self) -> bool {
        self.lost_runs <= 1
            && self.kept_above_loss == 0
            && self
                .resumed_at
                .is_none_or(|at| self.missing_from.is_some_and(|from| at <= from))
            && self.offset_gaps + self.duplicated + self.moved + self.damaged == 0
    }
}

/// A message of the ledger's run: the offset its reply named, if it was acknowledged.
#[derive(Clone, Debug)]
pub struct Expected {
    pub offset: Option<u64>,
    pub acknowledged: bool,
}

/// Reads a ledger: its header and, per (topic, partition), every message of the run it records.
#[allow(clippy::type_complexity)]
pub fn read_ledger(
    path: &Path,
) -> Result<
    (
        LedgerHeader,
        HashMap<(String, u32), HashMap<u128, Expected>>,
    ),
    String,
> {
    let file = std::fs::File::open(path)
        .map_err(|e| format!("opening the ledger {}: {e}", path.display()))?;
    let mut lines = BufReader::new(file).lines();
    let first = lines
        .next()
        .ok_or_else(|| format!("{}: empty ledger", path.display()))?
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let header: LedgerHeader = serde_json::from_str(&first)
        .map_err(|e| format!("{} line 1: not a ledger header: {e}", path.display()))?;
    let mut expected: HashMap<(String, u32), HashMap<u128, Expected>> = HashMap::new();
    for topic in &header.topics {
        for partition in 0..topic.partitions {
            expected.insert((topic.name.clone(), partition), HashMap::new());
        }
    }
    for (number, line) in lines.enumerate() {
        let line = line.map_err(|e| format!("{}: {e}", path.display()))?;
        if line.is_empty() {
            continue;
        }
        let batch: LedgerBatch = serde_json::from_str(&line)
            .map_err(|e| format!("{} line {}: {e}", path.display(), number + 2))?;
        let messages = expected
            .get_mut(&(batch.topic.clone(), batch.partition))
            .ok_or_else(|| {
                format!(
                    "{} line {}: topic {:?} partition {} is not in the header",
                    path.display(),
                    number + 2,
                    batch.topic,
                    batch.partition
                )
            })?;
        for i in 0..u64::from(batch.count) {
            messages.insert(
                message_id(header.run, batch.producer, batch.sequence + i),
                Expected {
                    offset: batch.offset.map(|o| o + i),
                    acknowledged: batch.outcome == Outcome::Ack,
                },
            );
        }
    }
    Ok((header, expected))
}

/// Checks a ledger against every node in `nodes`: each partition is read from offset 0 on each
/// node in turn. A node still catching up (a backup a heartbeat behind, a node just restarted) is
/// read again until it serves every acknowledged message or `patience` (a budget per node) runs
/// out. `retained`: the topics retain, so each node is held to the acknowledged messages from
/// the first offset it serves on (those below are counted as `retained`, not missing); a read
/// that skips ahead because retention deleted the rest of what it was reading meanwhile starts
/// that partition's read again (a node whose first offset is not past the skip has a hole,
/// counted as an offset gap).
pub fn verify(
    ledger: &Path,
    nodes: &[SocketAddr],
    username: &str,
    password: &str,
    patience: Duration,
    retained: bool,
) -> Result<Vec<PartitionCheck>, String> {
    let (header, expected) = read_ledger(ledger)?;
    let mut checks = Vec::new();
    let mut keys: Vec<_> = expected.keys().cloned().collect();
    keys.sort();
    for (n, address) in nodes.iter().enumerate() {
        let mut client = Client::connect(*address, message_id(header.run, u32::MAX - 1, n as u64))
            .map_err(|e| format!("node {address}: {e}"))?;
        client
            .login(username, password)
            .map_err(|e| format!("node {address}: {e}"))?;
        // One budget per node: a node that lacks a whole range is not waited for per partition.
        let deadline = Instant::now() + patience;
        for key in &keys {
            let messages = &expected[key];
            let mut served: Vec<iggy_client::Polled> = Vec::new();
            let kept_from = |served: &[iggy_client::Polled]| {
                if retained {
                    served.first().map_or(0, |m| m.offset)
                } else {
                    0
                }
            };
            loop {
                let from = kept_from(&served);
                let acknowledged = messages
                    .values()
                    .filter(|m| m.acknowledged && m.offset.is_none_or(|o| o >= from))
                    .count();
                let next = served.last().map_or(0, |m| m.offset + 1);
                let page = client
                    .poll(&header.stream, &key.0, key.1, next, 1000)
                    .map_err(|e| {
                        format!(
                            "node {address}: polling {}/{} partition {}: {e}",
                            header.stream, key.0, key.1
                        )
                    })?;
                if retained
                    && next > 0
                    && let Some(jump) = page.first().map(|m| m.offset).filter(|&o| o > next)
                {
                    // A read that skips ahead: retention may have deleted what follows what was
                    // read since this node's read began. If the node's first offset is now at
                    // or past the skip, that is what happened: read it again from there. A
                    // hole in its log (the first offset below the skip) stays a gap.
                    let now_first = client
                        .poll(&header.stream, &key.0, key.1, 0, 1)
                        .map_err(|e| {
                            format!(
                                "node {address}: polling {}/{} partition {}: {e}",
                                header.stream, key.0, key.1
                            )
                        })?
                        .first()
                        .map(|m| m.offset);
                    if now_first.is_some_and(|first| first >= jump) {
                        served.clear();
                        continue;
                    }
                }
                if !page.is_empty() {
                    served.extend(page);
                    continue;
                }
                let present = served
                    .iter()
                    .filter(|m| messages.get(&m.id).is_some_and(|e| e.acknowledged))
                    .count();
                if present >= acknowledged || Instant::now() > deadline {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            checks.push(check_partition(
                &address.to_string(),
                key,
                messages,
                &served,
                header.message_size,
                kept_from(&served),
            ));
        }
    }
    Ok(checks)
}

/// `kept_from`: acknowledged messages below this offset are `retained`, not missing.
fn check_partition(
    node: &str,
    key: &(String, u32),
    messages: &HashMap<u128, Expected>,
    served: &[iggy_client::Polled],
    message_size: usize,
    kept_from: u64,
) -> PartitionCheck {
    let mut check = PartitionCheck {
        node: node.to_string(),
        topic: key.0.clone(),
        partition: key.1,
        acknowledged: messages.values().filter(|m| m.acknowledged).count() as u64,
        served: served.len() as u64,
        ..PartitionCheck::default()
    };
    let mut seen: HashMap<u128, u32> = HashMap::new();
    let example = |check: &mut PartitionCheck, text: String| {
        if check.examples.len() < 5 {
            check.examples.push(text);
        }
    };
    for message in served {
        let Some(wanted) = messages.get(&message.id) else {
            continue;
        };
        let times = seen.entry(message.id).or_default();
        *times += 1;
        if *times == 2 {
            check.duplicated += 1;
            example(
                &mut check,
                format!(
                    "message {:#x} again at offset {}",
                    message.id, message.offset
                ),
            );
        }
        if message.payload != payload(message.id, message_size) {
            check.damaged += 1;
            example(
                &mut check,
                format!(
                    "message {:#x} at offset {}: payload differs",
                    message.id, message.offset
                ),
            );
        }
        if wanted.acknowledged
            && *times == 1
            && let Some(offset) = wanted.offset
            && offset != message.offset
        {
            check.moved += 1;
            example(
                &mut check,
                format!(
                    "message {:#x} at offset {}, acknowledged at {offset}",
                    message.id, message.offset
                ),
            );
        }
        if !wanted.acknowledged && *times == 1 {
            check.unknown_present += 1;
        }
    }
    for pair in served.windows(2) {
        if pair[1].offset != pair[0].offset + 1 {
            check.offset_gaps += 1;
            example(
                &mut check,
                format!(
                    "offset {} follows offset {}",
                    pair[1].offset, pair[0].offset
                ),
            );
        }
    }
    // The acknowledged messages in send order (one producer a partition, so the id's sequence
    // bits order them), each with whether the node serves it and the offset its reply named.
    let mut sent: Vec<(u128, bool, u64)> = messages
        .iter()
        .filter(|(_, m)| m.acknowledged)
        .map(|(id, m)| (*id, seen.contains_key(id), m.offset.unwrap_or(0)))
        .collect();
    let before = sent.len();
    sent.retain(|&(_, present, offset)| present || offset >= kept_from);
    check.retained = (before - sent.len()) as u64;
    sent.sort_unstable();
    let mut previous_present = true;
    for &(_, present, _) in &sent {
        if !present && previous_present {
            check.lost_runs += 1;
        }
        previous_present = present;
    }
    let missing: Vec<u64> = sent.iter().filter(|m| !m.1).map(|m| m.2).collect();
    check.missing = missing.len() as u64;
    if let Some(&(first_lost, _, _)) = sent.iter().find(|m| !m.1) {
        let lowest = missing.iter().copied().min().unwrap_or(0);
        check.missing_from = Some(lowest);
        check.kept_above_loss = served
            .iter()
            .filter(|m| messages.contains_key(&m.id) && m.id < first_lost && m.offset >= lowest)
            .count() as u64;
        check.resumed_at = served
            .iter()
            .filter(|m| messages.contains_key(&m.id) && m.id > first_lost)
            .map(|m| m.offset)
            .min();
        let text = format!(
            "{} acknowledged messages missing, offsets {} to {}, in {} run(s) of the send order",
            missing.len(),
            lowest,
            missing.iter().copied().max().unwrap_or(0),
            check.lost_runs
        );
        example(&mut check, text);
    }
    check
}

/// One consumer (see [`ConsumerReport`]).
fn consume(
    config: &LoadConfig,
    shared: &Shared,
    run: u32,
    producer: u32,
    topic: &str,
    partition: u32,
) -> ConsumerReport {
    let mut report = ConsumerReport::default();
    let mut connection = Producer::new(
        config,
        producer as usize + 1,
        message_id(run, producer, 0) | 2 << 48,
    );
    let never = AtomicBool::new(false);
    let mut expected: Option<u64> = None;
    // Which sequences of this run's producer were read (a bit each), and the message read at
    // each of the latest offsets.
    let mut seen: Vec<u64> = Vec::new();
    let mut at_offset: std::collections::BTreeMap<u64, u128> = std::collections::BTreeMap::new();
    let mut drain_until: Option<Instant> = None;
    let mut drain_from: Option<u64> = None;
    let mut lost_reach = LostReach::default();
    // Polls answered since the last failed one (for the jump examples).
    let mut since_failure: u64 = 0;
    // Messages read again since the last first read.
    let mut reread_run: u64 = 0;
    loop {
        if shared.producers_done.load(Ordering::Relaxed) {
            if drain_from != expected {
                // Progress (or the drain's start): the patience starts again.
                drain_from = expected;
                drain_until = None;
            }
            let until = *drain_until.get_or_insert_with(|| Instant::now() + CONSUMER_DRAIN);
            let end = shared
                .acked_end
                .get(producer as usize)
                .map_or(0, |e| e.load(Ordering::Relaxed));
            if expected.unwrap_or(0) >= end {
                report.caught_up = 1;
                break;
            }
            if Instant::now() > until {
                break;
            }
        }
        let Some(client) = connection.connected(&never) else {
            *report.errors.entry("no node answered".into()).or_default() += 1;
            break;
        };
        let polled = client.poll_as(
            &config.stream,
            topic,
            partition,
            consumer_id(run, producer),
            iggy_protocol::PollingStrategy::Next,
            POLL_COUNT,
            true,
        );
        let messages = match polled {
            Ok(messages) => messages,
            Err(error) => {
                *report.errors.entry(error_kind(&error)).or_default() += 1;
                connection.client = None;
                lost_reach.failed(expected);
                since_failure = 0;
                continue;
            }
        };
        since_failure += 1;
        if messages.is_empty() {
            // Nothing new yet: the producer is ahead by less than a batch, or stopped.
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        let node = connection.serving();
        for message in messages {
            let next = expected.unwrap_or(message.offset);
            let (of_run, of_producer, sequence) = split_id(message.id);
            if of_run == run && of_producer == producer {
                let word = usize::try_from(sequence / 64).unwrap_or(usize::MAX);
                if word >= seen.len() {
                    seen.resize(word + 1, 0);
                }
                seen[word] |= 1 << (sequence % 64);
            }
            if message.offset < next {
                report.reread += 1;
                reread_run += 1;
                report.reread_at_once = report.reread_at_once.max(reread_run);
                if let Some(&before) = at_offset.get(&message.offset)
                    && before != message.id
                {
                    report.changed += 1;
                    if report.changed_examples.len() < 4 {
                        report.changed_examples.push(format!(
                            "{topic} partition {partition} offset {}: read {before:#x} first, \
                             then {:#x} from {node}",
                            message.offset, message.id
                        ));
                    }
                }
                continue;
            }
            reread_run = 0;
            at_offset.insert(message.offset, message.id);
            if message.offset > next {
                let reached = lost_reach.covers(message.offset);
                if reached {
                    report.lost_with_a_reply += message.offset - next;
                } else {
                    report.skipped += message.offset - next;
                }
                if report.jump_examples.len() < 4 {
                    report.jump_examples.push(format!(
                        "{topic} partition {partition}: {next} -> {} from {node}, {since_failure} \
                         polls after the last failed one (reach {:?}){}",
                        message.offset,
                        lost_reach.0,
                        if reached { "" } else { ": UNEXPLAINED" }
                    ));
                }
            }
            expected = Some(message.offset + 1);
            if (message.id >> 96) as u32 == run {
                report.consumed += 1;
                if message.payload != payload(message.id, config.message_size) {
                    report.damaged += 1;
                }
            } else {
                report.other_runs += 1;
            }
        }
        if let Some(next) = expected {
            let keep = at_offset.split_off(&next.saturating_sub(CHANGE_WINDOW));
            at_offset = keep;
        }
    }
    if let Some(acked) = shared.acked.get(producer as usize)
        && let Ok(acked) = acked.lock()
    {
        for &(first, count) in acked.iter() {
            for sequence in first..first + u64::from(count) {
                let word = usize::try_from(sequence / 64).unwrap_or(usize::MAX);
                if seen
                    .get(word)
                    .is_none_or(|w| w & (1 << (sequence % 64)) == 0)
                {
                    report.missed += 1;
                }
            }
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jump_is_a_lost_answer_only_within_a_failed_polls_reach() {
        let mut reach = LostReach::default();
        // No poll failed: any jump is a gap.
        assert!(!reach.covers(101));
        // A poll failed expecting 100: its answer ended at most 1,000 on.
        reach.failed(Some(100));
        assert!(reach.covers(101));
        assert!(reach.covers(1_100));
        assert!(!reach.covers(1_101));
        // Read on to 400 (the lost store not yet seen), then a second failure: that answer may
        // have started where the first one ended.
        reach.failed(Some(400));
        assert!(reach.covers(2_100));
        assert!(!reach.covers(2_101));
        // A failure far past the reach starts from what was read.
        reach.failed(Some(5_000));
        assert!(reach.covers(6_000));
        assert!(!reach.covers(6_001));
    }

    const SIZE: usize = 32;

    /// A ledger of one producer: `acknowledged[i]` is message i's offset, `None` if its batch's
    /// outcome is unknown.
    fn ledger(acknowledged: &[Option<u64>]) -> HashMap<u128, Expected> {
        acknowledged
            .iter()
            .enumerate()
            .map(|(i, offset)| {
                (
                    message_id(7, 0, i as u64),
                    Expected {
                        offset: *offset,
                        acknowledged: offset.is_some(),
                    },
                )
            })
            .collect()
    }

    /// What a node serves: (offset, the message's sequence in this run or a foreign id).
    fn served(log: &[(u64, u128)]) -> Vec<iggy_client::Polled> {
        log.iter()
            .map(|&(offset, id)| iggy_client::Polled {
                offset,
                id,
                payload: payload(id, SIZE),
            })
            .collect()
    }

    fn ours(sequence: u64) -> u128 {
        message_id(7, 0, sequence)
    }

    fn check(messages: &HashMap<u128, Expected>, log: &[(u64, u128)]) -> PartitionCheck {
        check_partition(
            "node",
            &("t".to_string(), 0),
            messages,
            &served(log),
            SIZE,
            0,
        )
    }

    #[test]
    fn an_id_splits_back_into_its_run_producer_and_sequence() {
        let id = message_id(0xdead_beef, u32::MAX - 1, u64::MAX - 3);
        assert_eq!(split_id(id), (0xdead_beef, u32::MAX - 1, u64::MAX - 3));
        assert_eq!(split_id(message_id(1, 2, 3)), (1, 2, 3));
    }

    #[test]
    fn a_whole_log_is_clean() {
        let messages = ledger(&[Some(0), Some(1), Some(2)]);
        let found = check(&messages, &[(0, ours(0)), (1, ours(1)), (2, ours(2))]);
        assert!(found.clean(), "{found:?}");
        assert!(found.lost_only_a_suffix());
        assert_eq!(found.acknowledged, 3);
    }

    /// The CI run of 2026-12-03: every node killed, offsets 2.. discarded, and the same load
    /// carried on from the cut, so its later messages sit at the lost ones' offsets.
    #[test]
    fn a_cut_then_writes_from_the_cut_is_a_suffix() {
        let messages = ledger(&[Some(0), Some(1), Some(2), Some(3), Some(2), Some(3)]);
        let found = check(
            &messages,
            &[(0, ours(0)), (1, ours(1)), (2, ours(4)), (3, ours(5))],
        );
        assert!(!found.clean());
        assert_eq!((found.missing, found.missing_from), (2, Some(2)));
        assert_eq!((found.lost_runs, found.resumed_at), (1, Some(2)));
        assert!(found.lost_only_a_suffix(), "{found:?}");
    }

    #[test]
    fn a_hole_in_the_middle_is_not_a_suffix() {
        let messages = ledger(&[Some(0), Some(1), Some(2), Some(3)]);
        // Offsets skip the lost one.
        let found = check(&messages, &[(0, ours(0)), (1, ours(1)), (3, ours(3))]);
        assert_eq!(found.offset_gaps, 1);
        assert!(!found.lost_only_a_suffix(), "{found:?}");
        // Dense offsets, the lost one's place taken by another run's message: the later
        // message kept its old offset above the loss.
        let found = check(
            &messages,
            &[
                (0, ours(0)),
                (1, ours(1)),
                (2, message_id(9, 0, 0)),
                (3, ours(3)),
            ],
        );
        assert_eq!((found.offset_gaps, found.resumed_at), (0, Some(3)));
        assert!(!found.lost_only_a_suffix(), "{found:?}");
    }

    #[test]
    fn two_losses_are_not_one_suffix() {
        let messages = ledger(&[Some(0), Some(1), Some(2), Some(1), Some(2)]);
        let found = check(&messages, &[(0, ours(0)), (1, ours(2)), (2, ours(4))]);
        assert_eq!(found.lost_runs, 2, "{found:?}");
        assert!(!found.lost_only_a_suffix());
    }

    #[test]
    fn unknown_batches_may_appear_once_but_not_twice() {
        let messages = ledger(&[Some(0), None, Some(2)]);
        let found = check(&messages, &[(0, ours(0)), (1, ours(1)), (2, ours(2))]);
        assert!(found.clean(), "{found:?}");
        assert_eq!(found.unknown_present, 1);
        let found = check(
            &messages,
            &[(0, ours(0)), (1, ours(1)), (2, ours(1)), (3, ours(2))],
        );
        assert_eq!((found.duplicated, found.moved), (1, 1), "{found:?}");
    }
}
