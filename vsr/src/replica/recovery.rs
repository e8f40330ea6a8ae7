//! Coming back: a restarted replica restores the view and log_view its superblock holds, gives
//! up any claim to lead, and recovers, out of every quorum (it drops prepares, acknowledges
//! nothing, ignores `StartViewChange` and `DoViewChange`). 100 ms after boot it asks who leads
//! (`RequestStartView` with its incarnation), then every second; only the primary of a started view
//! answers, echoing the incarnation (`view_start.rs`). After four unanswered probes it starts an
//! ordinary view change into the next view, offering the log it recovered: how a cluster whose
//! nodes all restarted together starts again. A `StartViewChange` or `DoViewChange` of a later
//! view than its own makes it join that view change at once instead (safeguard
//! `recovering-joins-view-change`): its `DoViewChange` is the one its fourth unanswered probe
//! would have sent, saying what it forgot, so waiting out the probes bought nothing but time,
//! and a group whose other replicas were changing view waited about five seconds for it.
//!
//! A replica whose boot lost acknowledged entries (replicated durability) stands for no quorum
//! of a merge until it starts a later view (`crate::merge`), or until it has rejoined the view
//! it forgot through the primary's answer to this life's probe and journaled through the head
//! that answer named. Every op it acknowledged in that view, in any earlier life, was prepared
//! by that primary, which never cuts its log within its view: the answer's head is at or above
//! each of them, and the hash chain makes the entries it journals the ones it acknowledged. Ops
//! of earlier views it acknowledged are in that view's log if they committed. Without this, a
//! kill of a backup followed by a kill of the primary left views unable to start until all
//! three replicas were up (`docs/vsr.md`, "What survives the view change").

use super::{Phase, Replica};
use crate::message::Message;

impl Replica {
    pub(super) fn recovering_tick(&mut self) {
        if self.ticks < self.probe_at {
            return;
        }
        if self.probes >= self.config.request_start_view_probes {
            self.count("recovery_probes_unanswered");
            self.start_view_change(self.view + 1);
            return;
        }
        self.probes += 1;
        self.probe_at = self.ticks + self.config.request_start_view_interval_ticks;
        let message = Message::RequestStartView {
            from: self.from(),
            nonce: self.incarnation,
        };
        self.broadcast(&message);
    }

    /// Clears the forgotten view once the replica rejoined it and journaled through the head
    /// the primary's answer named (see the module's documentation).
    pub(super) fn restore_acknowledgments(&mut self) {
        let Some(through) = self.rejoined_through else {
            return;
        };
        if !self.safeguards.rejoin_restores_acknowledgments
            || self.forgotten_view != Some(self.view)
            || self.log_view != self.view
        {
            // Moved on to another view (or not a rule in force): nothing to restore here.
            self.rejoined_through = None;
            return;
        }
        if self.phase() != Phase::Backup
            || !self.durable_in(self.view, true)
            || self.journal.journaled_head < through
        {
            return;
        }
        self.forgotten_view = None;
        self.rejoined_through = None;
        self.count("forgotten_acknowledgments_restored");
    }
}
