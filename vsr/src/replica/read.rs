//! Linearizable reads: a read index proved current before anything is served.
//!
//! A read (a poll, a stored offset, a metadata listing) is served from a replica's storage,
//! which holds what that replica executed. To reflect every write acknowledged before the read
//! arrived, the replica that serves it must have executed through the commit point of a primary
//! that was still the group's primary when the read arrived. The host asks with
//! [`Replica::read`] and serves once the replica says [`Effect::ReadBarrier`] `ready`.
//!
//! Invariants:
//! - **The index covers every acknowledged write.** The primary's index for a read is its
//!   commit point when the read arrived, raised to the highest op of its log prepared in an
//!   earlier view (a new primary has not committed those again yet, and the old primary may
//!   have acknowledged any of them; safeguard `read-index-earlier-views`).
//! - **The primary proves it is current after the read arrived**: a quorum (itself counted)
//!   must show it is still in its view by a message sent in answer to something the primary
//!   sent after the read arrived: a `ReadRoundOk` of a round sent after it, or a `PrepareOk` of
//!   an op prepared after it. A backup in this view when it sent that answer had not joined a
//!   later view, so no later view had started (it needs a quorum, and the primary is not in
//!   it), and nothing acknowledged in one can be missing (safeguard `read-confirmation`).
//! - **A backup serves only through the primary's index**: it asks the primary of its view
//!   (`ReadIndex`), and serves once it has executed through the commit point the answer names.
//!   The answer is also a commit point the backup takes like a heartbeat's.
//! - Nothing is served by a replica out of normal status, or across a view change: every read
//!   waiting when the view or the role changes is refused, and so is one unanswered after
//!   `Config::read_timeout_ticks`. A refusal says nothing: the host asks again or elsewhere.

use std::collections::BTreeMap;

use iggy_format::Checksum;

use super::{Phase, Replica};
use crate::config::replication_quorum;
use crate::effect::Effect;
use crate::message::{From, Message};

/// Who waits for a read index at the primary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Asker {
    /// The host, for a read it serves from this replica.
    Local(u64),
    /// A backup's read (`ReadIndex` from that replica, with its nonce).
    Replica(u8, u64),
}

/// A read waiting at the primary for its proof.
#[derive(Clone, Copy, Debug)]
struct Waiting {
    asker: Asker,
    arrived_at: u64,
    /// The first round sent after it arrived: its answers prove the view.
    round: u64,
    /// The first op prepared after it arrived: a `PrepareOk` of it or a later op proves too.
    op: u64,
    /// The commit point the read must see.
    index: u64,
}

/// A backup's read asked of its primary.
#[derive(Clone, Copy, Debug)]
struct Asked {
    asked_at: u64,
    sent_at: u64,
    /// The primary's answer: the commit point to execute through.
    index: Option<u64>,
}

/// The reads of one replica.
#[derive(Clone, Debug)]
pub(crate) struct Reads {
    /// The view the state below holds for (all of it is dropped when the view moves).
    view: u32,
    waiting: Vec<Waiting>,
    asked: BTreeMap<u64, Asked>,
    /// The next round's nonce; rounds only count up, across views too.
    round_next: u64,
    /// The newest round sent, and when.
    round_sent: Option<(u64, u64)>,
    /// Per replica, in `view`: the newest round it confirmed and the newest op it acknowledged.
    confirmed_round: Vec<u64>,
    acknowledged_op: Vec<u64>,
}

impl Reads {
    /// No read yet, for a group of `replicas`.
    pub(crate) fn new(replicas: u8) -> Self {
        Self {
            view: 0,
            waiting: Vec::new(),
            asked: BTreeMap::new(),
            round_next: 0,
            round_sent: None,
            confirmed_round: vec![0; usize::from(replicas)],
            acknowledged_op: vec![0; usize::from(replicas)],
        }
    }
}

impl Replica {
    /// The host asks to serve a read from this replica's storage; `token` names it in the
    /// [`Effect::ReadBarrier`] that answers, once the replica has executed through a read index
    /// proved current (`ready`), or refused it (`ready: false`: no primary, a view change, no
    /// answer in time).
    pub fn read(&mut self, token: u64) {
        self.reads_follow_view();
        match self.phase() {
            Phase::Primary if self.durable_in(self.view, true) => {
                self.wait_for_read_proof(Asker::Local(token));
            }
            Phase::Backup if self.log_view == self.view && self.durable_in(self.view, true) => {
                let primary = self.primary_of(self.view);
                self.send(
                    primary,
                    Message::ReadIndex {
                        from: self.from(),
                        nonce: token,
                    },
                );
                self.reads.asked.insert(
                    token,
                    Asked {
                        asked_at: self.ticks,
                        sent_at: self.ticks,
                        index: None,
                    },
                );
            }
            _ => {
                self.count("read_refused_not_normal");
                self.read_answer(token, false);
            }
        }
        self.drive();
    }

    fn read_answer(&mut self, token: u64, ready: bool) {
        self.effects.push(Effect::ReadBarrier { token, ready });
    }

    /// The commit point a read arriving now must see: the commit point, or the highest op
    /// prepared in an earlier view that this primary has not committed again yet.
    fn read_index(&self) -> u64 {
        if !self.safeguards.read_index_earlier_views {
            return self.commit_max;
        }
        let earlier = self
            .pipeline
            .keys()
            .rev()
            .find(|op| {
                self.journal
                    .header(**op)
                    .is_some_and(|header| header.view < self.view)
            })
            .copied()
            .unwrap_or(0);
        self.commit_max.max(earlier)
    }

    fn wait_for_read_proof(&mut self, asker: Asker) {
        let waiting = Waiting {
            asker,
            arrived_at: self.ticks,
            round: self.reads.round_next.max(1),
            op: self.journal.storage_head + 1,
            index: self.read_index(),
        };
        self.reads.round_next = waiting.round;
        self.reads.waiting.push(waiting);
        self.send_read_round();
    }

    /// Sends the next round if a read waits for its proof and none is in flight (or the one in
    /// flight went unanswered for a retransmit interval). A read still unproved once its round
    /// went unanswered that long is served by the next round too (it was sent after the read
    /// arrived): without the resend, a lost round left it waiting for its timeout unless a later
    /// read happened to ask for a round.
    fn send_read_round(&mut self) {
        let needed = self.reads.waiting.iter().any(|w| !self.read_proved(w));
        if !needed {
            return;
        }
        let in_flight = self.reads.round_sent.is_some_and(|(nonce, sent_at)| {
            self.confirmations(|r| self.reads.confirmed_round[r] >= nonce) + 1
                < replication_quorum(self.id.replicas)
                && self.ticks < sent_at + self.config.prepare_retransmit_ticks
        });
        if in_flight {
            return;
        }
        let nonce = self.reads.round_next;
        self.reads.round_next += 1;
        self.reads.round_sent = Some((nonce, self.ticks));
        let message = Message::ReadRound {
            from: self.from(),
            nonce,
        };
        self.broadcast(&message);
    }

    /// Whether a quorum (this primary counted) showed it is still in its view since `w` arrived.
    fn read_proved(&self, w: &Waiting) -> bool {
        !self.safeguards.read_confirmation
            || self.confirmations(|r| {
                self.reads.confirmed_round[r] >= w.round || self.reads.acknowledged_op[r] >= w.op
            }) + 1
                >= replication_quorum(self.id.replicas)
    }

    /// How many other replicas satisfy `proved` (by index).
    fn confirmations(&self, proved: impl Fn(usize) -> bool) -> usize {
        (0..usize::from(self.id.replicas))
            .filter(|r| *r != usize::from(self.id.replica) && proved(*r))
            .count()
    }

    /// Drops every read of another view or role: none of them may be answered from here now.
    fn reads_follow_view(&mut self) {
        let phase = self.phase();
        let stale = self.reads.view != self.view;
        if stale || phase != Phase::Primary {
            for waiting in std::mem::take(&mut self.reads.waiting) {
                if let Asker::Local(token) = waiting.asker {
                    self.count("read_refused_view_moved");
                    self.read_answer(token, false);
                }
            }
        }
        if stale || phase != Phase::Backup {
            for token in std::mem::take(&mut self.reads.asked).into_keys() {
                self.count("read_refused_view_moved");
                self.read_answer(token, false);
            }
        }
        if stale {
            self.reads.view = self.view;
            self.reads.round_sent = None;
            self.reads.confirmed_round.fill(0);
            self.reads.acknowledged_op.fill(0);
        }
    }

    /// After every input: answers the reads whose proof and execution are in.
    pub(super) fn progress_reads(&mut self) {
        self.reads_follow_view();
        if !self.reads.waiting.is_empty() {
            let mut waiting = std::mem::take(&mut self.reads.waiting);
            waiting.retain(|w| {
                if !self.read_proved(w) {
                    return true;
                }
                match w.asker {
                    Asker::Local(token) => {
                        if self.commit_min < w.index {
                            return true;
                        }
                        self.read_answer(token, true);
                    }
                    Asker::Replica(replica, nonce) => {
                        if self.commit_max < w.index {
                            return true;
                        }
                        let message = Message::ReadIndexOk {
                            from: self.from(),
                            nonce,
                            commit: self.commit_max,
                            checksum: self.journal.checksum(self.commit_max).unwrap_or(0),
                        };
                        self.send(replica, message);
                    }
                }
                false
            });
            self.reads.waiting = waiting;
        }
        let ready: Vec<u64> = self
            .reads
            .asked
            .iter()
            .filter(|(_, a)| a.index.is_some_and(|index| self.commit_min >= index))
            .map(|(token, _)| *token)
            .collect();
        for token in ready {
            self.reads.asked.remove(&token);
            self.read_answer(token, true);
        }
    }

    /// On a tick: rounds resent, backups' questions resent, reads unanswered too long refused.
    pub(super) fn reads_tick(&mut self) {
        self.reads_follow_view();
        let timeout = self.config.read_timeout_ticks;
        let ticks = self.ticks;
        let (expired, waiting): (Vec<Waiting>, Vec<Waiting>) =
            std::mem::take(&mut self.reads.waiting)
                .into_iter()
                .partition(|w| ticks >= w.arrived_at + timeout);
        self.reads.waiting = waiting;
        for w in expired {
            self.count("read_refused_timeout");
            if let Asker::Local(token) = w.asker {
                self.read_answer(token, false);
            }
        }
        self.send_read_round();
        let expired: Vec<u64> = self
            .reads
            .asked
            .iter()
            .filter(|(_, a)| ticks >= a.asked_at + timeout)
            .map(|(token, _)| *token)
            .collect();
        for token in expired {
            self.reads.asked.remove(&token);
            self.count("read_refused_timeout");
            self.read_answer(token, false);
        }
        let every = self.config.prepare_retransmit_ticks;
        let resend: Vec<u64> = self
            .reads
            .asked
            .iter_mut()
            .filter(|(_, a)| a.index.is_none() && ticks >= a.sent_at + every)
            .map(|(token, a)| {
                a.sent_at = ticks;
                *token
            })
            .collect();
        let primary = self.primary_of(self.view);
        for nonce in resend {
            let message = Message::ReadIndex {
                from: self.from(),
                nonce,
            };
            self.send(primary, message);
        }
    }

    pub(super) fn on_read_index(&mut self, from: From, nonce: u64) {
        self.reads_follow_view();
        if self.phase() != Phase::Primary
            || from.view != self.view
            || !self.durable_in(self.view, true)
        {
            self.count("read_index_not_primary");
            return;
        }
        // One question per read: a resend of one still waiting is the same read.
        let asker = Asker::Replica(from.replica, nonce);
        if self.reads.waiting.iter().any(|w| w.asker == asker) {
            return;
        }
        self.wait_for_read_proof(asker);
    }

    pub(super) fn on_read_index_ok(
        &mut self,
        from: From,
        nonce: u64,
        commit: u64,
        checksum: Checksum,
    ) {
        self.reads_follow_view();
        if self.phase() != Phase::Backup
            || from.view != self.view
            || from.replica != self.primary_of(self.view)
        {
            return;
        }
        if let Some(asked) = self.reads.asked.get_mut(&nonce) {
            asked.index = Some(commit);
        }
        // The primary's commit point, as its heartbeat would carry it.
        self.on_commit(from, commit, checksum);
    }

    pub(super) fn on_read_round(&mut self, from: From, nonce: u64) {
        if self.phase() != Phase::Backup
            || from.view != self.view
            || from.replica != self.primary_of(self.view)
            || self.log_view != self.view
            || !self.durable_in(self.view, true)
        {
            return;
        }
        let message = Message::ReadRoundOk {
            from: self.from(),
            nonce,
        };
        self.send(from.replica, message);
    }

    pub(super) fn on_read_round_ok(&mut self, from: From, nonce: u64) {
        self.reads_follow_view();
        if self.phase() != Phase::Primary || from.view != self.view {
            return;
        }
        let r = usize::from(from.replica);
        self.reads.confirmed_round[r] = self.reads.confirmed_round[r].max(nonce);
        // The next round goes out at once for the reads that arrived after this one was sent.
        self.send_read_round();
    }

    /// A backup's `PrepareOk` in this view of `op`: it proves the view for every read that
    /// arrived before `op` was prepared.
    pub(super) fn read_prepare_ok(&mut self, from: u8, op: u64) {
        self.reads_follow_view();
        let r = usize::from(from);
        self.reads.acknowledged_op[r] = self.reads.acknowledged_op[r].max(op);
    }
}
