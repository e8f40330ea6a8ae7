//! The primary's part of normal operation: a client's request becomes a prepare (the host builds,
//! stamps and journals it), the prepare goes to every backup and is sent again to those that have
//! not acknowledged it, and the commit point advances, in order, over each op a replication
//! quorum holds. Every 500 ms it broadcasts its commit point: the backups' heartbeat.

use iggy_format::{Checksum, PrepareMeta};

use super::{Inflight, Pending, Phase, Replica, bit};
use crate::Destination;
use crate::config::replication_quorum;
use crate::effect::{Effect, EffectId, Outcome};
use crate::message::{From, Message, ReplyStatus};

impl Replica {
    pub(super) fn primary_tick(&mut self) {
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

    /// Refuses a request: it was never admitted, the client may send it again anywhere. Sent
    /// even by a new group that has not yet recorded its first boot (which sends nothing else):
    /// a refusal says nothing about the log or a vote, and without it a client that asks a
    /// group in its first moments waits for its deadline (10 s on a server) instead of 50 ms.
    fn refuse_request(&mut self, client: u128, request: u64) {
        self.answer_uncommitted(client, request, ReplyStatus::NotAccepted);
    }

    /// Answers a request whose number the client already used for another body
    /// ([`ReplyStatus::Reused`]): nothing of it was or will be applied.
    fn answer_reused(&mut self, client: u128, request: u64) {
        self.answer_uncommitted(client, request, ReplyStatus::Reused);
    }

    /// A reply with no op and no body: `status` says why nothing was applied.
    fn answer_uncommitted(&mut self, client: u128, request: u64, status: ReplyStatus) {
        let message = Message::Reply {
            from: self.from(),
            client,
            request,
            op: 0,
            status,
            body: Vec::new(),
        };
        self.effects.push(Effect::Send {
            to: Destination::Client(client),
            message,
        });
    }

    pub(super) fn on_request(&mut self, client: u128, request: u64, operation: u32, body: Vec<u8>) {
        if self.phase() != Phase::Primary || !self.durable_in(self.view, true) {
            self.count("request_not_primary");
            self.refuse_request(client, request);
            return;
        }
        if client == 0 {
            self.count("request_without_client");
            return;
        }
        let request_checksum = crate::message::request_checksum(
            self.id.cluster,
            self.id.group,
            (client, request),
            operation,
            &body,
        );
        if let Some(session) = self.clients.get(client) {
            if request < session.request {
                self.count("request_stale");
                return;
            }
            if request == session.request {
                if self.safeguards.request_checksum
                    && session.request_checksum != 0
                    && session.request_checksum != request_checksum
                {
                    // The number of a committed request with another body: a client that
                    // reused its number. The old reply would tell it the new body was applied.
                    self.count("request_reused_with_another_body");
                    self.answer_reused(client, request);
                    return;
                }
                // Executed already (in this life or, from the table boot handed over, an
                // earlier one): the original reply, never a second execution.
                let message = Message::Reply {
                    from: self.from(),
                    client,
                    request,
                    op: session.op,
                    status: ReplyStatus::Committed,
                    body: session.reply.clone(),
                };
                self.count("request_answered_from_the_table");
                self.reply(client, message);
                return;
            }
        }
        // The same request prepared already (a try whose reply the client has not had yet):
        // its commit answers it. The checksum it was prepared under, if it is.
        let in_progress = self
            .prepares_in_flight
            .iter()
            .find(|(_, c, r, _, _)| *c == client && *r == request)
            .map(|(_, _, _, checksum, _)| *checksum)
            .or_else(|| {
                (self.commit_min + 1..=self.journal.head()).find_map(|op| {
                    self.journal
                        .header(op)
                        .filter(|h| h.client == client && h.request == request)
                        .map(|h| h.request_checksum)
                })
            });
        if let Some(prepared) = in_progress {
            if self.safeguards.request_checksum && prepared != request_checksum {
                self.count("request_reused_with_another_body");
                self.answer_reused(client, request);
                return;
            }
            self.count("request_in_progress");
            return;
        }
        if self.pipeline.len() + self.prepares_in_flight.len() >= self.config.pipeline_max {
            self.count("request_pipeline_full");
            self.refuse_request(client, request);
            return;
        }
        let bytes = body.len() as u64;
        if bytes > self.pipeline_room {
            // The node's pipelines hold their budget of bytes: refused like a full pipeline
            // (never admitted; the client sends it again once commits made room).
            self.count("request_pipeline_bytes");
            self.refuse_request(client, request);
            return;
        }
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
        self.prepares_in_flight
            .push_back((id, client, request, request_checksum, bytes));
    }

    pub(super) fn on_prepared(&mut self, id: EffectId, outcome: Outcome) {
        let Some(position) = self
            .prepares_in_flight
            .iter()
            .position(|(i, _, _, _, _)| *i == id)
        else {
            return;
        };
        let (_, client, request, _, _) =
            self.prepares_in_flight.remove(position).unwrap_or_default();
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
                self.refuse_request(client, request);
                return;
            }
            // `on_completion` let through only the two outcomes of a prepare.
            _ => return,
        };
        let op = header.op;
        if self.truncated_later(id, op) || op != self.journal.journaled_head + 1 {
            // A view change cut it before it was ever sent.
            return;
        }
        // The journal keeps the body; each backup's prepare is a copy of it (none on one node).
        self.journal.insert(header, Some(body));
        self.journal.journaled_head = op;
        self.prepare_arrived();
        if self.phase() != Phase::Primary || header.view != self.view {
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
        for to in 0..self.id.replicas {
            if to != self.id.replica
                && let Some(body) = self.journal.slot(op).and_then(|slot| slot.body.clone())
            {
                self.send(to, Message::Prepare { header, body });
            }
        }
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

    pub(super) fn on_prepare_ok(&mut self, from: From, op: u64, checksum: Checksum) {
        if self.phase() != Phase::Primary || from.view != self.view {
            return;
        }
        if self.journal.checksum(op) != Some(checksum) {
            self.count("prepare_ok_mismatch");
            return;
        }
        self.read_prepare_ok(from.replica, op);
        // A backup journals in order: its acknowledgment of `op` covers every op before it.
        for (_, inflight) in self.pipeline.range_mut(..=op) {
            inflight.acks |= bit(from.replica);
        }
        self.advance_commit();
    }

    pub(super) fn advance_commit(&mut self) {
        let quorum = replication_quorum(self.id.replicas);
        // Ops the commit point passed otherwise (a merged log's headers named it) are done.
        while self
            .pipeline
            .first_key_value()
            .is_some_and(|(op, _)| *op <= self.commit_max)
        {
            self.pipeline.pop_first();
        }
        while let Some((&op, inflight)) = self.pipeline.first_key_value() {
            let self_acked = op <= self.journal.journaled_head.min(self.ack_limit());
            let acks = (inflight.acks & !bit(self.id.replica)).count_ones() as usize
                + usize::from(self_acked);
            if op != self.commit_max + 1 || acks < quorum {
                break;
            }
            self.commit_max = op;
            self.pipeline.remove(&op);
        }
    }
}
