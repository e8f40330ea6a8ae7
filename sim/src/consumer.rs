//! Consumers: each polls one partition from its primary (the one the node it is connected to
//! names) and, every few polls, stores its offset through the partition's group, as the
//! article's consumers send polls and offset commits to the partition's primary.
//!
//! A poll goes to the node the consumer is connected to (the simulator does not put polls on the
//! network): that node's replica is asked for a read barrier (`iggy_node::Node::read`), and once
//! it answers ready the poll is served from that node's storage, batches from the consumer's
//! next offset up to what its replica has executed, and checked against every write
//! acknowledged before it was asked (checker `linearizable`). The consumer checks what it reads: batches follow each other without a gap or an
//! overlap, each is an op the group committed, and an offset read twice (again after a failover,
//! from another primary) is the same op. An offset store is a request like a producer's
//! (resent every 50 ms when refused, every 300 ms when unanswered, never given up: a later store
//! supersedes it).

use std::collections::BTreeMap;

use iggy_format::operation;
use iggy_segments::offsets::ConsumerKind;
use iggy_vsr::{Message, ReplyStatus};

use crate::client::reply_fields;

use crate::producer::{RESEND_US, Routing, SILENCE_US};

/// A consumer polls this often...
pub const POLL_US: u64 = 100_000;
/// ...reading at most this many batch bytes a poll...
pub const POLL_BYTES: u64 = 4 << 20;
/// ...and stores its offset every this many polls.
pub const STORE_EVERY: u32 = 5;
/// In the seeds whose consumers rest ([`consumers_rest`]), a consumer draws after each
/// acknowledged store whether to stop for a while (one in this many)...
pub const REST_ONE_IN: u64 = 4;
/// ...and for how long, in simulated microseconds: the producers go on meanwhile, so retention
/// may delete the segment holding its last store before the next (what the partition must keep
/// its offset file through).
pub const REST_US: (u64, u64) = (3_000_000, 15_000_000);

/// Whether a seed's consumers rest ([`REST_ONE_IN`]): one seed in two, drawn from the seed.
#[must_use]
pub fn consumers_rest(seed: u64) -> bool {
    crate::rng::Stream::new(seed, "consumers-rest").below(2) == 0
}

/// An offset store in flight.
#[derive(Clone, Debug)]
struct Store {
    request: u64,
    offset: u64,
    sent_us: u64,
    target: u8,
    answered: bool,
}

/// One consumer of one partition.
#[derive(Clone, Debug)]
pub struct Consumer {
    /// The session its offset stores go out under.
    pub id: u128,
    pub group: u128,
    /// Its id among the partition's consumers.
    pub consumer: u32,
    cluster: u128,
    pub connected: u8,
    /// The next message offset it reads.
    pub next_offset: u64,
    /// Each batch read, by base offset: its op and message count.
    pub seen: BTreeMap<u64, (u64, u32)>,
    pub polls: u64,
    polls_since_store: u32,
    next_request: u64,
    store: Option<Store>,
    /// Every offset store acknowledged: (request, offset, the op that stored it, when).
    pub stored: Vec<(u64, u64, u64, u64)>,
    /// How many stores were acknowledged when it last drew whether to rest (see
    /// `Cluster::consumer`).
    pub rest_drawn_at: usize,
    pub wake_us: u64,
    /// The token of its read waiting for a barrier, if any.
    pub reading: Option<u64>,
}

/// What a poll found wrong.
pub type Fault = String;

impl Consumer {
    #[must_use]
    pub fn new(
        id: u128,
        group: u128,
        consumer: u32,
        cluster: u128,
        connected: u8,
        start_us: u64,
    ) -> Self {
        Self {
            id,
            group,
            consumer,
            cluster,
            connected,
            next_offset: 0,
            seen: BTreeMap::new(),
            polls: 0,
            polls_since_store: 0,
            next_request: 1,
            store: None,
            stored: Vec::new(),
            rest_drawn_at: 0,
            wake_us: start_us,
            reading: None,
        }
    }

    /// The node a poll or a store goes to now: the primary the connected node names, or the
    /// connected node itself (redialing the next live one when it is down).
    #[must_use]
    pub fn target(&mut self, routing: &Routing) -> Option<u8> {
        let replicas = u8::try_from(routing.up.len()).unwrap_or(1).max(1);
        if !routing
            .up
            .get(usize::from(self.connected))
            .copied()
            .unwrap_or(false)
        {
            self.connected = (1..=replicas)
                .map(|step| (self.connected + step) % replicas)
                .find(|n| routing.up.get(usize::from(*n)).copied().unwrap_or(false))?;
        }
        let named = routing
            .leader
            .get(usize::from(self.connected))
            .copied()
            .flatten()
            .filter(|l| routing.up.get(usize::from(*l)).copied().unwrap_or(false));
        Some(named.unwrap_or(self.connected))
    }

    /// Takes the batches a poll returned (`(base_offset, message_count, op)` in order) and checks
    /// them; `committed(op)` says whether the group's history holds the op.
    pub fn polled(
        &mut self,
        batches: &[(u64, u32, u64)],
        committed: impl Fn(u64) -> bool,
    ) -> Result<(), Fault> {
        self.polls += 1;
        self.polls_since_store += 1;
        for &(base, count, op) in batches {
            if base != self.next_offset {
                return Err(format!(
                    "consumer {} of group {:#x} expected offset {} and read a batch at {base} \
                     (op {op})",
                    self.consumer, self.group, self.next_offset
                ));
            }
            if !committed(op) {
                return Err(format!(
                    "consumer {} of group {:#x} read op {op} (offset {base}), which the group \
                     never committed",
                    self.consumer, self.group
                ));
            }
            if let Some((seen_op, seen_count)) = self.seen.insert(base, (op, count))
                && (seen_op, seen_count) != (op, count)
            {
                return Err(format!(
                    "consumer {} of group {:#x} read offset {base} as op {seen_op} and now as op \
                     {op}",
                    self.consumer, self.group
                ));
            }
            self.next_offset = base + u64::from(count);
        }
        Ok(())
    }

    /// Whether it should store its offset now: none in flight, enough polls since the last, and
    /// it read past what it stored last.
    #[must_use]
    pub fn wants_store(&self) -> bool {
        let last = self.stored.last().map_or(0, |s| s.1);
        self.store.is_none() && self.polls_since_store >= STORE_EVERY && self.next_offset > last
    }

    /// The offset store to send to `target` now, if one is due or needs resending.
    pub fn store_message(&mut self, now_us: u64, target: u8) -> Option<Message> {
        let due = self.wants_store();
        match &mut self.store {
            None if due => {
                self.polls_since_store = 0;
                let request = self.next_request;
                self.next_request += 1;
                self.store = Some(Store {
                    request,
                    offset: self.next_offset,
                    sent_us: now_us,
                    target,
                    answered: false,
                });
            }
            Some(store)
                if (store.answered && now_us >= store.sent_us + RESEND_US)
                    || now_us >= store.sent_us + SILENCE_US =>
            {
                store.sent_us = now_us;
                store.target = target;
                store.answered = false;
            }
            _ => return None,
        }
        let store = self.store.as_ref()?;
        let mut body = vec![0u8; iggy_segments::entry::CONSUMER_OFFSET_BODY_SIZE];
        body[0] = ConsumerKind::Consumer.code();
        body[4..8].copy_from_slice(&self.consumer.to_le_bytes());
        body[8..16].copy_from_slice(&store.offset.to_le_bytes());
        Some(Message::Request {
            cluster: self.cluster,
            group: self.group,
            client: self.id,
            request: store.request,
            operation: operation::CONSUMER_OFFSET,
            body,
        })
    }

    /// A reply to an offset store arrived. Returns the committed reply's `(request, op, body)`
    /// for the checker.
    pub fn on_reply(&mut self, now_us: u64, message: &Message) -> Option<(u64, u64, Vec<u8>)> {
        let (from, request, op, status, body) = reply_fields(message)?;
        let store = self.store.as_mut()?;
        if request != store.request || from.replica != store.target {
            return None;
        }
        if status == ReplyStatus::Committed {
            self.stored.push((store.request, store.offset, op, now_us));
            self.store = None;
            Some((request, op, body.to_vec()))
        } else {
            store.answered = true;
            None
        }
    }
}
