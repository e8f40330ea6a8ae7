//! Coming back: a restarted replica restores the view and log_view its superblock holds, gives
//! up any claim to lead, and recovers, out of every quorum (it drops prepares, acknowledges
//! nothing, ignores `StartViewChange` and `DoViewChange`). A second after boot it asks who leads
//! (`RequestStartView` with its incarnation), every second; only the primary of a started view
//! answers, echoing the incarnation (`view_start.rs`). After four unanswered probes it starts an
//! ordinary view change into the next view, offering the log it recovered: how a cluster whose
//! nodes all restarted together starts again.

use super::Replica;
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
}
