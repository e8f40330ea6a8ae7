//! Execution and replies. Committed ops are executed in order, one commit effect at a time,
//! through what is both committed and journaled. Each
//! executed request is recorded in the client table with its reply, on every replica, so
//! whichever becomes primary answers a replay the same way; the primary sends the reply.

use super::{Pending, Phase, Replica};
use crate::clients::Session;
use crate::effect::Effect;
use crate::message::{Message, ReplyStatus};

impl Replica {
    /// Executes what is committed and journaled, one commit effect at a time.
    pub(super) fn commit(&mut self) {
        if self.committing.is_some() || self.phase() == Phase::Recovering || self.installing() {
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
            self.committing = Some((id, target));
        }
    }

    pub(super) fn on_committed(&mut self, replies: Vec<(u64, Vec<u8>)>) {
        for (op, reply) in replies {
            let Some(header) = self.journal.header(op).copied() else {
                continue;
            };
            if header.client == 0 {
                continue;
            }
            self.clients.record(
                header.client,
                Session {
                    request: header.request,
                    op,
                    reply: reply.clone(),
                    request_checksum: header.request_checksum,
                },
            );
            if self.phase() == Phase::Primary {
                let message = Message::Reply {
                    from: self.from(),
                    client: header.client,
                    request: header.request,
                    op,
                    status: ReplyStatus::Committed,
                    body: reply,
                };
                self.reply(header.client, message);
            }
        }
    }
}
