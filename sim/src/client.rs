//! Simulated clients: each sends requests to one group, one at a time, numbered from 1, to the
//! replica it believes leads (`view % n`, learned from replies). A `NotAccepted` reply or a
//! silence makes it try the next replica with the same request number; after a budget it gives
//! up and records the outcome as unknown (`TransientNotCommitted`). While the cluster heals it
//! never gives up, so every request it issues then must complete.

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
        }
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

    /// Acts at `now_us`: issues the next request, resends one that timed out, or gives one up.
    /// Returns the replica to send to and the message. `patient`: never give up.
    pub fn wake(&mut self, now_us: u64, rng: &mut Stream, patient: bool) -> Option<(u8, Message)> {
        if now_us < self.wake_us {
            return None;
        }
        match &mut self.pending {
            None => {
                if self.next_request > self.quota {
                    return None;
                }
                let request = self.next_request;
                self.next_request += 1;
                let (operation, body) = self.body(request, rng);
                let pending = Pending {
                    request,
                    operation,
                    body,
                    first_sent_us: now_us,
                    sent_us: now_us,
                    replica: self.leader_hint,
                };
                let message = self.message(&pending);
                let replica = pending.replica;
                self.pending = Some(pending);
                self.wake_us = now_us + REQUEST_TIMEOUT_US;
                Some((replica, message))
            }
            Some(pending) => {
                if !patient && now_us >= pending.first_sent_us + GIVE_UP_US {
                    // It went out and no reply came: the outcome is unknown.
                    self.pending = None;
                    self.not_committed += 1;
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
        match status {
            ReplyStatus::Committed => {
                self.leader_hint = from.replica;
                self.pending = None;
                self.committed += 1;
                self.wake_us = now_us + think_us;
                Some((request, op, body.to_vec()))
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
