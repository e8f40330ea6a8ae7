//! Simulated clients: each sends requests to one group, one at a time, numbered from 1, to the
//! replica it believes leads (`view % n`, learned from replies). A `NotAccepted` reply or a
//! silence makes it try the next replica with the same request number; after a budget it gives
//! up and records the outcome as unknown (`TransientNotCommitted`). While the cluster heals it
//! never gives up, so every request it issues then must complete.
//!
//! With `reuse_one_in` set, a client misbehaves now and then: after a request committed it sends
//! one more under the same number with another body (an *impostor*). The group must refuse it
//! (`ReplyStatus::Reused`); a committed reply to it is the checker `request reuse`'s failure.

use iggy_format::operation;
use iggy_metadata::{Op, codec};
use iggy_vsr::{From, Message, ReplyStatus};

use crate::rng::Stream;

/// Resend to the next replica after this much silence.
pub const REQUEST_TIMEOUT_US: u64 = 300_000;
/// After a refusal, wait this long before the next replica.
pub const REFUSED_RETRY_US: u64 = 50_000;
/// Give up (outcome unknown) after this long, while faults are on.
pub const GIVE_UP_US: u64 = 10_000_000;

/// What a client's group is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Metadata,
    Partition,
}

/// A request in flight.
#[derive(Clone, Debug)]
pub struct Pending {
    pub request: u64,
    pub operation: u32,
    pub body: Vec<u8>,
    pub first_sent_us: u64,
    pub sent_us: u64,
    pub replica: u8,
    /// An impostor: the number of a committed request with another body.
    pub impostor: bool,
}

/// One simulated client.
#[derive(Clone, Debug)]
pub struct Client {
    pub id: u128,
    pub group: u128,
    pub kind: Kind,
    pub cluster: u128,
    replicas: u8,
    /// Requests to issue in all.
    pub quota: u64,
    pub next_request: u64,
    pub pending: Option<Pending>,
    /// When it next acts.
    pub wake_us: u64,
    pub committed: u64,
    pub not_committed: u64,
    pub refused: u64,
    pub resent: u64,
    leader_hint: u8,
    /// One committed request in this many is followed by an impostor (0: never).
    reuse_one_in: u64,
    /// The draws of impostors, a stream of its own: turning them on changes no other draw.
    reuse: Stream,
    /// The last request the client saw commit, and impostors sent and refused.
    last_committed: Option<(u64, u32)>,
    pub impostors: u64,
    pub impostors_refused: u64,
    /// A request of its own (sent with one body only) refused as reused: its number and the
    /// replica that refused it, for the checker (`Checker::refused_as_reused`).
    pub refused_as_reused: Option<(u64, u8)>,
}

impl Client {
    #[must_use]
    pub fn new(id: u128, group: u128, kind: Kind, cluster: u128, replicas: u8, quota: u64) -> Self {
        Self {
            id,
            group,
            kind,
            cluster,
            replicas,
            quota,
            next_request: 1,
            pending: None,
            wake_us: 0,
            committed: 0,
            not_committed: 0,
            refused: 0,
            resent: 0,
            leader_hint: 0,
            reuse_one_in: 0,
            reuse: Stream::new(0, "reuse"),
            last_committed: None,
            impostors: 0,
            impostors_refused: 0,
            refused_as_reused: None,
        }
    }

    /// Sends an impostor after one committed request in `one_in` (drawn from a stream of the
    /// run's `seed` and this client's id).
    #[must_use]
    pub fn with_reuse(mut self, seed: u64, one_in: u64) -> Self {
        self.reuse_one_in = one_in;
        self.reuse = Stream::new(
            seed ^ u64::try_from(self.id & 0xffff_ffff).unwrap_or(0),
            "reuse",
        );
        self
    }

    /// When the request in flight first went out.
    #[must_use]
    pub fn pending_since(&self) -> Option<u64> {
        self.pending.as_ref().map(|p| p.first_sent_us)
    }

    /// Every request issued has an outcome (committed or given up) and the quota is reached.
    #[must_use]
    pub fn done(&self) -> bool {
        self.pending.is_none() && self.next_request > self.quota
    }

    fn body(&self, request: u64, rng: &mut Stream) -> (u32, Vec<u8>) {
        match self.kind {
            Kind::Metadata => {
                let op = if request == 1 {
                    Op::RegisterClient {
                        client: self.id,
                        session: 1,
                    }
                } else {
                    Op::CreateStream {
                        name: format!("c{:x}-{request}", self.id),
                    }
                };
                (
                    operation::METADATA,
                    codec::encode_op(&op).unwrap_or_default(),
                )
            }
            Kind::Partition => {
                let count = 1 + u32::try_from(rng.below(3)).unwrap_or(0);
                let messages: Vec<iggy_format::batch::NewMessage> = (0..count)
                    .map(|i| iggy_format::batch::NewMessage {
                        id: u128::from(request) << 32 | u128::from(i),
                        timestamp_delta: i,
                        payload: vec![
                            u8::try_from(request % 251).unwrap_or(0);
                            usize::try_from(16 + rng.below(300)).unwrap_or(16)
                        ],
                        user_headers: Vec::new(),
                    })
                    .collect();
                (
                    operation::MESSAGES,
                    iggy_format::batch::encode(request, &messages).unwrap_or_default(),
                )
            }
        }
    }

    fn message(&self, pending: &Pending) -> Message {
        Message::Request {
            cluster: self.cluster,
            group: self.group,
            client: self.id,
            request: pending.request,
            operation: pending.operation,
            body: pending.body.clone(),
        }
    }

    /// Sends `request` for the first time (to the replica believed to lead): it is pending.
    fn issue(
        &mut self,
        now_us: u64,
        request: u64,
        operation: u32,
        body: Vec<u8>,
        impostor: bool,
    ) -> (u8, Message) {
        let pending = Pending {
            request,
            operation,
            body,
            first_sent_us: now_us,
            sent_us: now_us,
            replica: self.leader_hint,
            impostor,
        };
        let message = self.message(&pending);
        let replica = pending.replica;
        self.pending = Some(pending);
        self.wake_us = now_us + REQUEST_TIMEOUT_US;
        (replica, message)
    }

    /// Acts at `now_us`: issues the next request, resends one that timed out, or gives one up.
    /// Returns the replica to send to and the message. `patient`: never give up.
    pub fn wake(&mut self, now_us: u64, rng: &mut Stream, patient: bool) -> Option<(u8, Message)> {
        if now_us < self.wake_us {
            return None;
        }
        match &mut self.pending {
            None => {
                if let Some((request, operation)) = self.last_committed.take()
                    && self.reuse_one_in > 0
                    && self.reuse.below(self.reuse_one_in) == 0
                {
                    // Another body under the committed number: the next request's (a metadata
                    // client's is another stream's name, a producer's other messages).
                    let (_, body) = self.body(request + 1_000_000, &mut self.reuse.clone());
                    self.impostors += 1;
                    return Some(self.issue(now_us, request, operation, body, true));
                }
                if self.next_request > self.quota {
                    return None;
                }
                let request = self.next_request;
                self.next_request += 1;
                let (operation, body) = self.body(request, rng);
                Some(self.issue(now_us, request, operation, body, false))
            }
            Some(pending) => {
                if !patient && now_us >= pending.first_sent_us + GIVE_UP_US {
                    // It went out and no reply came: the outcome is unknown.
                    let impostor = pending.impostor;
                    self.pending = None;
                    if !impostor {
                        self.not_committed += 1;
                    }
                    self.wake_us = now_us;
                    return None;
                }
                pending.replica = (pending.replica + 1) % self.replicas;
                pending.sent_us = now_us;
                self.resent += 1;
                let pending = pending.clone();
                self.wake_us = now_us + REQUEST_TIMEOUT_US;
                Some((pending.replica, self.message(&pending)))
            }
        }
    }

    /// A reply arrived; the next request follows after `think_us`. Returns the committed
    /// reply's `(request, op, body)` for the checker.
    pub fn on_reply(
        &mut self,
        now_us: u64,
        think_us: u64,
        message: &Message,
    ) -> Option<(u64, u64, Vec<u8>)> {
        let (from, request, op, status, body) = reply_fields(message)?;
        let pending = self.pending.as_ref()?;
        if request != pending.request {
            return None;
        }
        let impostor = pending.impostor;
        match status {
            ReplyStatus::Committed if impostor => {
                // A late copy of the committed request's own reply (the network duplicates
                // and delays): the client cannot tell it from an answer to the impostor, so
                // the simulator judges the replica that sends one (`Cluster::route`). Waits on.
                None
            }
            ReplyStatus::Committed => {
                self.leader_hint = from.replica;
                self.last_committed = Some((request, pending.operation));
                self.pending = None;
                self.committed += 1;
                self.wake_us = now_us + think_us;
                Some((request, op, body.to_vec()))
            }
            ReplyStatus::Reused => {
                if impostor {
                    self.impostors_refused += 1;
                } else {
                    // A request of its own refused as reused: the group holds another body
                    // under a number this client sent one body under.
                    self.refused_as_reused = Some((request, from.replica));
                }
                self.pending = None;
                self.wake_us = now_us + think_us;
                None
            }
            ReplyStatus::NotAccepted | ReplyStatus::NotCommitted => {
                self.refused += 1;
                self.leader_hint =
                    u8::try_from(u64::from(from.view) % u64::from(self.replicas)).unwrap_or(0);
                if let Some(pending) = &mut self.pending {
                    // The next try goes to the primary the refusal names (its view's), after a
                    // pause.
                    pending.replica = (self.leader_hint + self.replicas - 1) % self.replicas;
                }
                self.wake_us = now_us + REFUSED_RETRY_US;
                None
            }
        }
    }
}

/// A reply's fields, when `message` is a `Reply`: who sent it, the request and op it answers,
/// its status and its body.
pub(crate) fn reply_fields(message: &Message) -> Option<(From, u64, u64, ReplyStatus, &[u8])> {
    match message {
        Message::Reply {
            from,
            request,
            op,
            status,
            body,
            ..
        } => Some((*from, *request, *op, *status, body)),
        _ => None,
    }
}
