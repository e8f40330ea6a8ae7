//! The acknowledgment bound (`docs/vsr.md`, "The acknowledgment bound"): under replicated
//! durability a replica acknowledges what its WAL has only queued, so a crash forgets
//! acknowledgments. The superblock carries the highest op the replica may acknowledge
//! ([`Durable::ack_bound`], never lowered); the replica raises it ahead of the prepares it
//! journals and acknowledges nothing above what is durable (safeguard `acknowledgment-bound`).
//! After a crash its `DoViewChange` names the bound: every op it may have forgotten is at or
//! below it, so once the other logs of a view change reach it, its log stands for a quorum
//! again (`merge.rs`), and its absence above it is a nack.
//!
//! How far ahead: as many ops as arrived in the last [`RATE_WINDOW_TICKS`] ticks. A slow group
//! (an op per window or fewer) raises it to each op as the op arrives, and that op's
//! acknowledgment waits for the write (two 4 KiB `fdatasync`s, about 0.2 ms here): its bound is
//! its head. A fast one writes it about twice per window without waiting, and its slack is
//! about a window's ops, which the other backup passes a window after a crash.

use super::{Phase, Replica};
use crate::effect::{ACK_BOUND_UNKNOWN, Effect};

/// The window of the arrival rate the lookahead follows (50 ms).
pub(crate) const RATE_WINDOW_TICKS: u64 = 5;
/// The most ops the bound is raised ahead at once.
const LOOKAHEAD_MAX: u64 = 1024;

/// The arrival rate the bound's lookahead follows: new prepares of the view (prepared by the
/// primary, or taken by a backup from its primary), not the ops a view start or a repair adds
/// to the log at once (a rejoin's hundreds of ops once raised the bound by as many, and a crash
/// then left it far above every survivor's log).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct AckRate {
    /// New prepares so far.
    arrived: u64,
    /// The tick and the arrivals when the current window began.
    window_start: (u64, u64),
    /// Arrivals in the last full window.
    window_ops: u64,
    /// When the next periodic publication is due, and the op the last one asked for.
    publish_at: u64,
    published: u64,
}

impl Replica {
    /// The highest op this replica may acknowledge (or count for itself, as primary) now: the
    /// durable bound under replicated durability, anything otherwise.
    pub(super) fn ack_limit(&self) -> u64 {
        if self.forgets && self.safeguards.acknowledgment_bound {
            self.durable.ack_bound
        } else {
            u64::MAX
        }
    }

    /// The ops the bound is raised ahead of the head: the last window's arrivals (none for a
    /// group at rest). Not more to cover a slow write: the write is queued on the lane ahead
    /// of the journal writes of the ops it covers, so a slow one delays their journaling as
    /// much as their acknowledgment (a lookahead of twice the ops that arrived during the last
    /// write grew to 50 ops behind a rejoin's repair, and a crash then left the bound above
    /// the survivor's log for seconds).
    fn lookahead(&self) -> u64 {
        self.ack_rate.window_ops.min(LOOKAHEAD_MAX)
    }

    /// Raises the bound to the head plus the lookahead once the head passes it or comes within
    /// half the lookahead of it (the head counts prepares still being journaled, so the raise
    /// goes out beside their writes, not after). A group at rest raises it to each op as it
    /// arrives: its bound is its head, and a crash forgets nothing a survivor's log lacks.
    pub(super) fn raise_ack_bound(&mut self) {
        if !self.forgets
            || !matches!(self.phase(), Phase::Primary | Phase::Backup)
            || self.durable.ack_bound == ACK_BOUND_UNKNOWN
        {
            return;
        }
        let head = self.journal.head();
        let wanted = self.ack_bound_wanted.max(self.durable.ack_bound);
        let lookahead = self.lookahead();
        if head <= wanted && head + lookahead / 2 < wanted {
            return;
        }
        if head + lookahead <= wanted {
            return;
        }
        if head > wanted {
            // Ops already held pass every bound asked for: their acknowledgments wait for this
            // write (once per write, not per step that finds them waiting).
            self.count("acknowledgment_waits_for_bound");
        }
        self.ack_bound_wanted = head + lookahead;
        self.count("ack_bound_raised");
        self.write_superblock();
    }

    /// A superblock write completed: a primary may count itself for more.
    pub(super) fn ack_bound_written(&mut self) {
        if self.phase() == Phase::Primary {
            self.advance_commit();
        }
    }

    /// A new prepare of the view arrived (prepared here as primary, or from the primary).
    pub(super) fn prepare_arrived(&mut self) {
        self.ack_rate.arrived += 1;
    }

    /// Each tick: publishes what was journaled since the last periodic publication, every
    /// `Config::publish_interval_ticks`. Whatever the host's own publications by size, a crash
    /// then forgets at most that long of the log, which a restarted replica must repair before
    /// it acknowledges anything new: with only the server's 16 MiB publications, a restarted
    /// backup repaired up to 16 MiB per partition before a view that needed it could commit
    /// (2 to 3.5 s of the fault harness's `kill-boot` gaps).
    pub(super) fn publish_tick(&mut self) {
        let every = self.config.publish_interval_ticks;
        if !self.forgets
            || every == 0
            || self.ticks < self.ack_rate.publish_at
            || !matches!(self.phase(), Phase::Primary | Phase::Backup)
        {
            return;
        }
        self.ack_rate.publish_at = self.ticks + every;
        let through = self.journal.journaled_head;
        // Not `<=`: after a view start cut the log below the last periodic publication, the
        // ops journaled again below it are still unpublished.
        if through == self.ack_rate.published {
            return;
        }
        self.ack_rate.published = through;
        self.count("periodic_publish");
        self.storage(
            |id| Effect::Publish { id, through },
            super::Pending::Publish(through),
        );
    }

    /// The host asks for what this replica journaled to be made durable now (a client's flush
    /// with fsync): the periodic publication's effect, at once, whatever its interval (also when
    /// the host set none). A replica of persisted durability publishes before it acknowledges, so
    /// it has nothing to add; nor has one outside a view.
    pub fn publish_now(&mut self) {
        if !self.forgets || !matches!(self.phase(), Phase::Primary | Phase::Backup) {
            return;
        }
        let through = self.journal.journaled_head;
        if through == self.ack_rate.published {
            return;
        }
        self.ack_rate.published = through;
        let every = self.config.publish_interval_ticks;
        self.ack_rate.publish_at = self.ticks + every;
        self.count("requested_publish");
        self.storage(
            |id| Effect::Publish { id, through },
            super::Pending::Publish(through),
        );
    }

    /// Each tick: the window of the arrival rate.
    pub(super) fn ack_rate_tick(&mut self) {
        let (tick, from) = self.ack_rate.window_start;
        if self.ticks >= tick + RATE_WINDOW_TICKS {
            let now = self.ack_rate.arrived;
            self.ack_rate.window_ops = now - from;
            self.ack_rate.window_start = (self.ticks, now);
        }
    }
}
