//! Producers that behave like the article's: each sends batches to one partition at a set rate,
//! one batch in flight, routed by the node it is connected to (that node names the group's
//! primary from its own replica, `Node::leader_of`), and records every send with its outcome.
//!
//! The retry rules are the SDK's as the article describes them: a refused batch is resent every
//! 50 ms to the node the connection follows (the primary its node names, or that node itself
//! when it names a dead one); 4 s after the first failure (2 s of resends, a routing lock, 2 s
//! more) the producer asks for the leader again and, if it is still not served, walks the
//! roster, 2 s per node, sending to each node directly; 6 s after the first failure it gives up. A batch that went out to a live node and got no
//! answer may have been prepared (the new view keeps what the old primary replicated), so giving
//! up on it reports `TransientNotCommitted` (the outcome is unknown); a batch every try of which
//! was refused, or never reached a live node, reports `TransientNotAccepted` (the cluster never
//! took it: sending it again is safe).

use iggy_format::operation;
use iggy_vsr::{Message, ReplyStatus};

use crate::client::reply_fields;

/// A refused send is resent after this long.
pub const RESEND_US: u64 = 50_000;
/// A send with no answer for this long counts as unanswered and is resent.
pub const SILENCE_US: u64 = 300_000;
/// After this long failing, the producer asks for the leader again, then walks the roster...
pub const FOLLOW_US: u64 = 4_000_000;
/// ...this long on each node.
pub const WALK_US: u64 = 2_000_000;
/// This long after its first failure a send is given up.
pub const GIVE_UP_AFTER_US: u64 = 6_000_000;
/// A dropped connection is noticed this long after the node died (the article's survivors saw
/// node 0's connections drop 10 to 12 ms after the kill).
pub const RESET_NOTICED_US: u64 = 10_000;

/// The batches a producer sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Sends a second (one in flight: a late reply delays the next).
    pub batches_per_second: u32,
    pub messages_per_batch: u32,
    pub message_bytes: u32,
}

impl Shape {
    /// The article's load: 40 batches a second of 250 messages of 1000 bytes.
    #[must_use]
    pub fn article() -> Self {
        Self {
            batches_per_second: 40,
            messages_per_batch: 250,
            message_bytes: 1000,
        }
    }

    fn interval_us(self) -> u64 {
        1_000_000 / u64::from(self.batches_per_second.max(1))
    }
}

/// How a send ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Committed as `op`, its messages at `base_offset..base_offset + count`.
    Committed {
        op: u64,
        base_offset: u64,
        count: u32,
    },
    /// Given up after it went out unanswered: it may or may not have committed.
    TransientNotCommitted,
    /// Given up with every try refused or never delivered: it did not commit.
    TransientNotAccepted,
}

/// One send, as the producer saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Send {
    pub request: u64,
    /// When it first went out, and when its outcome was known.
    pub sent_us: u64,
    pub done_us: u64,
    pub outcome: Outcome,
    /// Tries after the first.
    pub resent: u32,
}

/// What the cluster looks like to a producer at one moment: which nodes accept connections,
/// and who each one names as the group's primary.
#[derive(Clone, Debug)]
pub struct Routing {
    pub up: Vec<bool>,
    pub leader: Vec<Option<u8>>,
}

#[derive(Clone, Debug)]
struct Pending {
    request: u64,
    body: Vec<u8>,
    sent_us: u64,
    resent: u32,
    /// The node its last try went to and when, while that try is unanswered.
    awaiting: Option<(u8, u64)>,
    /// The node its last try went to: a reply comes back on that connection only.
    target: Option<u8>,
    /// A try went out to a live node and was never answered.
    unanswered: bool,
    /// When it first failed (a refusal, a silence, a dropped or refused connection).
    failing_since: Option<u64>,
    /// Walking the roster since this time, on the connected node (it no longer follows
    /// redirects).
    walking: Option<u64>,
}

/// One producer.
#[derive(Clone, Debug)]
pub struct Producer {
    pub id: u128,
    pub group: u128,
    cluster: u128,
    replicas: u8,
    shape: Shape,
    /// The node it is connected to.
    pub connected: u8,
    /// Batches to send in all.
    pub quota: u64,
    next_request: u64,
    next_send_us: u64,
    pending: Option<Pending>,
    /// When it next acts.
    pub wake_us: u64,
    /// Every send with an outcome, in order.
    pub sends: Vec<Send>,
    /// A send refused as reused (it never reuses a number): its number and the replica that
    /// refused it, for the checker.
    pub refused_as_reused: Option<(u64, u8)>,
}

impl Producer {
    /// Producer `id` of partition group `group` of the cluster `layout`, connected first to
    /// `connected`, starting at `start_us`.
    #[must_use]
    pub fn new(
        id: u128,
        group: u128,
        layout: &crate::node::Layout,
        shape: Shape,
        connected: u8,
        quota: u64,
        start_us: u64,
    ) -> Self {
        Self {
            id,
            group,
            cluster: layout.cluster,
            replicas: layout.replicas,
            shape,
            connected,
            quota,
            next_request: 1,
            next_send_us: start_us,
            pending: None,
            wake_us: start_us,
            sends: Vec::new(),
            refused_as_reused: None,
        }
    }

    /// When the batch in flight first went out.
    #[must_use]
    pub fn pending_since(&self) -> Option<u64> {
        self.pending.as_ref().map(|p| p.sent_us)
    }

    /// Every batch sent has an outcome and the quota is reached.
    #[must_use]
    pub fn done(&self) -> bool {
        self.pending.is_none() && self.next_request > self.quota
    }

    /// Sends nothing new after the batch in flight.
    pub fn stop(&mut self) {
        self.quota = self.next_request - 1;
    }

    /// The request in flight, if any.
    #[must_use]
    pub fn in_flight(&self) -> Option<u64> {
        self.pending.as_ref().map(|p| p.request)
    }

    fn body(&self, request: u64) -> Vec<u8> {
        let fill = u8::try_from(request % 251).unwrap_or(0);
        let payload = vec![fill; usize::try_from(self.shape.message_bytes).unwrap_or(0)];
        let messages: Vec<iggy_format::batch::NewMessage> = (0..self.shape.messages_per_batch)
            .map(|i| iggy_format::batch::NewMessage {
                id: u128::from(request) << 32 | u128::from(i),
                timestamp_delta: i,
                payload: payload.clone(),
                user_headers: Vec::new(),
            })
            .collect();
        iggy_format::batch::encode(request, &messages).unwrap_or_default()
    }

    fn message(&self, pending: &Pending) -> Message {
        Message::Request {
            cluster: self.cluster,
            group: self.group,
            client: self.id,
            request: pending.request,
            operation: operation::MESSAGES,
            body: pending.body.clone(),
        }
    }

    /// Acts at `now_us`: sends the next batch when its time has come, or tries the one in
    /// flight again, or gives it up. Returns the node to send to and the message. `patient`:
    /// never give up (the cluster is healing and must take every batch).
    pub fn wake(&mut self, now_us: u64, routing: &Routing, patient: bool) -> Option<(u8, Message)> {
        if now_us < self.wake_us {
            return None;
        }
        let Some(pending) = &mut self.pending else {
            if self.next_request > self.quota {
                return None;
            }
            if now_us < self.next_send_us {
                self.wake_us = self.next_send_us;
                return None;
            }
            let request = self.next_request;
            self.next_request += 1;
            self.next_send_us = now_us + self.shape.interval_us();
            self.pending = Some(Pending {
                request,
                body: self.body(request),
                sent_us: now_us,
                resent: 0,
                awaiting: None,
                target: None,
                unanswered: false,
                failing_since: None,
                walking: None,
            });
            return self.attempt(now_us, routing);
        };
        if let Some((_, at)) = pending.awaiting
            && now_us >= at + SILENCE_US
        {
            pending.awaiting = None;
            pending.unanswered = true;
            pending.failing_since.get_or_insert(at);
        }
        if pending.awaiting.is_some() {
            // Still within its answer's time: wait.
            self.wake_us = pending.awaiting.map_or(now_us, |(_, at)| at + SILENCE_US);
            return None;
        }
        if let Some(since) = pending.failing_since {
            if !patient && now_us >= since + GIVE_UP_AFTER_US {
                let outcome = if pending.unanswered {
                    Outcome::TransientNotCommitted
                } else {
                    Outcome::TransientNotAccepted
                };
                let send = Send {
                    request: pending.request,
                    sent_us: pending.sent_us,
                    done_us: now_us,
                    outcome,
                    resent: pending.resent,
                };
                self.sends.push(send);
                self.pending = None;
                self.wake_us = now_us;
                return self.wake(now_us, routing, patient);
            }
            let replicas = self.replicas;
            match pending.walking {
                None if now_us >= since + FOLLOW_US => {
                    // Ask for the leader again: a live one is followed (this node, if it leads
                    // now), otherwise the walk starts at the next node.
                    let named = routing
                        .leader
                        .get(usize::from(self.connected))
                        .copied()
                        .flatten()
                        .filter(|l| is_up(routing, *l));
                    match named {
                        Some(leader) => self.connected = leader,
                        None => {
                            self.connected = (self.connected + 1) % replicas;
                            pending.walking = Some(now_us);
                        }
                    }
                }
                Some(at) if now_us >= at + WALK_US => {
                    self.connected = (self.connected + 1) % replicas;
                    pending.walking = Some(now_us);
                }
                _ => {}
            }
        }
        pending.resent += 1;
        self.attempt(now_us, routing)
    }

    /// One try of the batch in flight: redial if the connection is gone, then send to the
    /// primary the connected node names, or to the connected node itself when it names none or
    /// a node that refuses connections, or while walking the roster (it answers for itself).
    fn attempt(&mut self, now_us: u64, routing: &Routing) -> Option<(u8, Message)> {
        let replicas = self.replicas;
        if !is_up(routing, self.connected) {
            // The redial goes on to the next node that takes a connection.
            if let Some(next) = (1..=replicas)
                .map(|step| (self.connected + step) % replicas)
                .find(|n| is_up(routing, *n))
            {
                self.connected = next;
            }
        }
        let pending = self.pending.as_mut()?;
        let connected = self.connected;
        if !is_up(routing, connected) {
            // No node takes a connection: it never went out.
            pending.failing_since.get_or_insert(now_us);
            self.wake_us = now_us + RESEND_US;
            return None;
        }
        let target = if pending.walking.is_some() {
            connected
        } else {
            routing
                .leader
                .get(usize::from(connected))
                .copied()
                .flatten()
                .filter(|l| is_up(routing, *l))
                .unwrap_or(connected)
        };
        pending.awaiting = Some((target, now_us));
        pending.target = Some(target);
        self.wake_us = now_us + SILENCE_US;
        let pending = pending.clone();
        Some((target, self.message(&pending)))
    }

    /// The connections to node `node` dropped (it died [`RESET_NOTICED_US`] ago): a try
    /// awaiting its answer went out unanswered, and is tried again at once.
    pub fn node_died(&mut self, node: u8, now_us: u64) {
        if let Some(pending) = &mut self.pending
            && pending.awaiting.is_some_and(|(n, _)| n == node)
        {
            pending.awaiting = None;
            pending.unanswered = true;
            pending.failing_since.get_or_insert(now_us);
            self.wake_us = now_us;
        }
    }

    /// Since when the batch in flight has waited unanswered, if its last try went to `node`
    /// (a resend on the same connection is the same wait).
    #[must_use]
    pub fn awaiting_on(&self, node: u8) -> Option<u64> {
        let pending = self.pending.as_ref()?;
        let (n, at) = pending.awaiting?;
        (n == node).then(|| pending.failing_since.unwrap_or(at).min(at))
    }

    /// `node` closed the connection (the server's isolation check: it heard no peer for a
    /// second while this request waited): the try is unanswered, and the producer dials the
    /// next node of the roster.
    pub fn connection_closed(&mut self, node: u8, now_us: u64) {
        if let Some(pending) = &mut self.pending
            && pending.awaiting.is_some_and(|(n, _)| n == node)
        {
            pending.awaiting = None;
            pending.unanswered = true;
            pending.failing_since.get_or_insert(now_us);
        }
        if self.connected == node {
            self.connected = (node + 1) % self.replicas;
        }
        self.wake_us = now_us;
    }

    /// A reply arrived. Only the node the last try went to can answer (a reply travels back on
    /// the connection its request came in on; a new primary committing an older try's batch
    /// has no connection to answer on). Returns a committed reply's `(request, op, body)` for
    /// the checker.
    pub fn on_reply(&mut self, now_us: u64, message: &Message) -> Option<(u64, u64, Vec<u8>)> {
        let (from, request, op, status, body) = reply_fields(message)?;
        let pending = self.pending.as_mut()?;
        if request != pending.request || pending.target != Some(from.replica) {
            return None;
        }
        match status {
            ReplyStatus::Committed => {
                let base_offset = body
                    .get(..8)
                    .and_then(|b| b.try_into().ok())
                    .map_or(0, u64::from_le_bytes);
                let count = body
                    .get(8..12)
                    .and_then(|b| b.try_into().ok())
                    .map_or(0, u32::from_le_bytes);
                self.sends.push(Send {
                    request,
                    sent_us: pending.sent_us,
                    done_us: now_us,
                    outcome: Outcome::Committed {
                        op,
                        base_offset,
                        count,
                    },
                    resent: pending.resent,
                });
                self.pending = None;
                self.wake_us = self.next_send_us.max(now_us);
                Some((request, op, body.to_vec()))
            }
            ReplyStatus::Reused => {
                // A producer sends one body under each number: the group confused two.
                self.refused_as_reused = Some((request, from.replica));
                pending.awaiting = None;
                self.wake_us = now_us + RESEND_US;
                None
            }
            ReplyStatus::NotAccepted | ReplyStatus::NotCommitted => {
                if status == ReplyStatus::NotCommitted {
                    pending.unanswered = true;
                }
                pending.awaiting = None;
                pending.failing_since.get_or_insert(now_us);
                self.wake_us = now_us + RESEND_US;
                None
            }
        }
    }
}

fn is_up(routing: &Routing, node: u8) -> bool {
    routing.up.get(usize::from(node)).copied().unwrap_or(false)
}
