//! A backup's part of normal operation: a new prepare of its view's primary is the view's
//! authority (any other prepare waits for the hash chain, `chain.rs`), journaled bodies are
//! acknowledged in order with one `PrepareOk` for the newest (an acknowledgment of op N counts
//! for every op up to N), and the primary's commit broadcast resets the liveness window and
//! moves the commit point, checked against the backup's own entry there.

use iggy_format::{Checksum, Header};

use super::{Phase, Replica};
use crate::config::REPAIR_BATCH_MAX;
use crate::message::{From, Message};

impl Replica {
    pub(super) fn on_prepare(&mut self, header: Header, body: Vec<u8>) {
        let op = header.op;
        self.repair_answer_arrived(op);
        if self.phase() == Phase::Recovering {
            self.count("prepare_while_recovering");
            return;
        }
        if op <= self.journal.storage_head {
            self.count("prepare_already_stored");
        } else if self.journal.has_body(op) {
            self.count("prepare_already_held");
        }
        if header.view > self.view {
            // A newer view's primary: ask it for its view rather than take its prepares.
            self.count("prepare_of_newer_view");
            let message = Message::RequestStartView {
                from: self.from(),
                nonce: self.incarnation,
            };
            let primary = self.primary_of(header.view);
            self.send(primary, message);
            return;
        }
        let checksum = header.checksum();
        if self
            .journal
            .header(op)
            .is_some_and(|h| h.checksum() == checksum)
        {
            // A known header: its body (repair), or a retransmission.
            if op <= self.journal.journaled_head && self.phase() == Phase::Backup {
                self.acked_through = self.acked_through.min(op - 1);
            }
            self.journal.insert(header, Some(body));
            return;
        }
        let current = header.view == self.view
            && self.phase() == Phase::Backup
            && header.replica == self.primary_of(self.view);
        if current {
            // A new prepare of this view's primary: the view's authority.
            if op <= self.executed() {
                return;
            }
            if self.journal.header(op).is_some() {
                // A slot of another log there (a view this replica did not see start): the
                // primary's log wins from here on.
                self.forget_after(op - 1);
            }
            self.commit_max = self.commit_max.max(header.commit.min(op - 1));
            // While storage refuses to journal (no room), the bodies past a pipeline above what
            // it journaled are not kept: the header is, and repair fetches the body once
            // storage journals again. Memory stays bounded however long the disk stays full.
            let held = self.journal_retry_at.is_none()
                || op.saturating_sub(self.journal.journaled_head)
                    <= u64::try_from(self.config.pipeline_max).unwrap_or(u64::MAX);
            if !held {
                self.count("prepare_body_dropped_while_refused");
            }
            self.journal.insert(header, held.then_some(body));
            self.prepare_arrived();
            return;
        }
        if op > self.commit_min
            && self.unverified.len() < 2 * usize::try_from(REPAIR_BATCH_MAX).unwrap_or(256)
        {
            // Proved (or not) by the chain in `verify_unverified`.
            self.unverified.insert(op, (header, body));
        } else {
            self.count("prepare_unverified");
        }
    }

    /// A backup acknowledges, once the superblock holds the view as its log_view, the newest op
    /// of this view it journaled and has not acknowledged: one `PrepareOk`, which counts for
    /// every op before it (it journals in order). A retransmitted prepare lowers what counts as
    /// acknowledged to the op before it, even an op this backup executed: its primary may not
    /// know the op committed (many-groups seed 480: a new primary whose `DoViewChange`s named
    /// an older commit point prepared again an op both backups had executed, and without their
    /// acknowledgment nothing but a new request could ever commit it).
    pub(super) fn acknowledge(&mut self) {
        if self.phase() != Phase::Backup
            || !self.durable_in(self.view, true)
            || self.log_view != self.view
            || !self.marked()
        {
            return;
        }
        // Never above the acknowledgment bound the superblock holds (`ack_bound.rs`).
        let through = self.journal.journaled_head.min(self.ack_limit());
        let from = self.acked_through + 1;
        if through < from {
            return;
        }
        if let Some(header) = self.journal.header(through) {
            let message = Message::PrepareOk {
                from: self.from(),
                op: through,
                checksum: header.checksum(),
            };
            let primary = self.primary_of(self.view);
            self.send(primary, message);
            self.acked_through = through;
        }
    }

    pub(super) fn on_commit(&mut self, from: From, commit: u64, checksum: Checksum) {
        if from.view > self.view && self.phase() != Phase::Recovering {
            self.count("commit_of_newer_view");
            let message = Message::RequestStartView {
                from: self.from(),
                nonce: self.incarnation,
            };
            self.send(from.replica, message);
            return;
        }
        let phase = self.phase();
        if from.view != self.view
            || !matches!(phase, Phase::Backup | Phase::Adopting)
            || from.replica != self.primary_of(self.view)
        {
            return;
        }
        // Only a commit broadcast resets the liveness window, and (`commit-stall`) only one that
        // shows the primary committing: its commit point moved since the last reset, or it
        // covers every op this backup journaled. A primary that no longer hears its backups
        // (a one-way partition) still broadcasts its commit point; without the rule its
        // backups would follow it, and the group would take no write, for as long as it lasts.
        // (Not the ops acknowledged: a retransmitted prepare lowers that to the commit point
        // for a moment, and a broadcast landing then passed for progress.)
        let progress = commit > self.heartbeat_commit || self.journal.journaled_head <= commit;
        if progress || !self.safeguards.commit_stall {
            self.heartbeat_at = self.ticks + self.config.heartbeat_timeout_ticks;
            self.heartbeat_commit = self.heartbeat_commit.max(commit);
        } else {
            self.count("commit_stalled");
        }
        if phase == Phase::Adopting {
            return;
        }
        if commit > self.executed()
            && self
                .journal
                .checksum(commit)
                .is_some_and(|held| held != checksum)
        {
            // The entry this replica holds there is another log's (the primary's commit point
            // names its own): forgotten and cut, and the commit point's becomes the anchor the
            // repaired entries are proved against.
            self.count("commit_checksum_mismatch");
            self.forget_after(commit - 1);
        }
        if commit > self.commit_max {
            self.commit_max = commit;
        }
        if commit > self.commit_min && self.journal.checksum(commit).is_none() {
            self.anchor = Some((commit, checksum));
        }
    }

    /// The host saw the connection from `replica` close (its process exited, or the network
    /// ended the connection): evidence the primary is gone that need not wait out the
    /// heartbeat window. A backup (or one adopting a `StartView`) of a view whose primary is
    /// `replica` starts the view change at once, as its heartbeat timeout would; anything else
    /// ignores it. A view change is always safe; one started on a closed connection of a live
    /// primary costs an election, as a lost heartbeat would (safeguard-free: liveness only).
    pub fn peer_connection_closed(&mut self, replica: u8) {
        if !matches!(self.phase(), Phase::Backup | Phase::Adopting)
            || replica != self.primary_of(self.view)
            || replica == self.id.replica
        {
            return;
        }
        self.count("primary_connection_closed");
        self.start_view_change(self.view + 1);
        self.drive();
    }
}
