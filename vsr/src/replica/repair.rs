//! Repair: a backup whose storage is behind the higher of its commit point and its head (or a
//! new primary fetching the bodies its merged log lacks) asks a peer for prepares, at most
//! [`REPAIR_BATCH_MAX`] a round, and the hash chain proves each as it arrives (`chain.rs`). A
//! replica serves `RequestPrepares` from its ring; below its oldest prepare it answers
//! `RangeEvicted`. A replica every peer answered that way is behind the ring: it leaves its
//! node's repair ration (its asking cannot succeed, and it would keep a slot from groups whose
//! asking can) and probes one peer at a time, slowly, with a one-op request, in case a peer's
//! ring holds the range again (a restarted peer rebuilds its ring from its disk).

use super::{Phase, Replica, bit};
use crate::config::REPAIR_BATCH_MAX;
use crate::effect::Effect;
use crate::message::{From, Message};

/// Rounds a replica remembers as in flight (their answers still to come).
const REPAIR_ROUNDS_MAX: usize = 8;
/// A range asked again waits `repair_retry_ticks` doubled this many times at most (1.6 s).
const REPAIR_BACKOFF_MAX: u32 = 3;
/// How long a round waits for its first answer (1 s) before it is asked again, when nothing
/// this replica asked has arrived since: the answers to other groups' rounds share the link
/// ahead of it (a node that restarted asks for 8 groups' rounds of up to 33.6 MB at once).
const REPAIR_FIRST_ANSWER_TICKS: u64 = 100;

/// A repair round in flight: the ops asked, when, and how many times in a row that range was
/// asked again because nothing of it arrived.
#[derive(Clone, Copy, Debug)]
pub(super) struct Round {
    first: u64,
    last: u64,
    asked: u64,
    retries: u32,
}

/// A replica behind every peer's ring probes one of them this often (5 s).
pub(crate) const BEHIND_RING_PROBE_TICKS: u64 = 500;

impl Replica {
    pub(super) fn needs_repair(&self) -> bool {
        let target = self.commit_max.max(self.journal.head());
        self.journal.storage_head < target
    }

    /// The replica that repairs (a backup in normal status, or a new primary merging its view)
    /// lacks prepares a peer can serve: what a node's [`crate::RepairRation`] counts as a
    /// session. A replica behind every peer's ring does not count: its asking cannot succeed.
    #[must_use]
    pub fn wants_repair(&self) -> bool {
        // A primary in normal status holds its whole log (its view started only once it did):
        // it never repairs.
        matches!(self.phase(), Phase::Backup | Phase::Merging)
            && self.needs_repair()
            && !self.behind_ring()
            && self.transfer.is_none()
    }

    /// Whether it asked every peer for ops they no longer hold (a state transfer's case).
    #[must_use]
    pub fn behind_ring(&self) -> bool {
        let (mask, head) = self.evicted_by;
        head == self.journal.storage_head
            && self.needs_repair()
            && (0..self.id.replicas)
                .filter(|r| *r != self.id.replica)
                .all(|r| mask & bit(r) != 0)
    }

    /// Whether a peer answered `RangeEvicted` at the storage head it has now, while it lacks
    /// prepares: that peer's log starts after what it needs (the first such peer, if any).
    pub(super) fn evicting_peer(&self) -> Option<u8> {
        let (mask, head) = self.evicted_by;
        if head != self.journal.storage_head || !self.needs_repair() {
            return None;
        }
        (0..self.id.replicas).find(|r| *r != self.id.replica && mask & bit(*r) != 0)
    }

    fn evicted_by_a_peer(&self) -> bool {
        self.evicting_peer().is_some()
    }

    /// Sets whether the next ticks may ask peers for prepares (the node's ration decides).
    pub fn permit_repair(&mut self, permitted: bool) {
        self.repair_permitted = permitted;
    }

    /// Repair on a tick: a round when due and the ration permits it, or, behind every peer's
    /// ring, a probe of one peer when due.
    pub(super) fn repair_tick(&mut self) {
        if self.transfer.is_some() || (self.transfers_snapshots() && self.evicted_by_a_peer()) {
            // Below a peer's log: its snapshot, not ops that peer no longer holds (another peer
            // may be down, so waiting for every peer's answer could wait for ever; installing a
            // snapshot is safe from any peer).
            self.transfer_tick();
            return;
        }
        if self.ticks < self.repair_at {
            return;
        }
        if self.behind_ring() {
            if self.ticks >= self.behind_probe_at {
                self.behind_probe_at = self.ticks + BEHIND_RING_PROBE_TICKS;
                self.probe_behind_ring();
            }
        } else if self.repair_permitted {
            self.repair();
        }
    }

    /// Asks one peer (in turn) for the first op storage lacks, having forgotten that it said it
    /// no longer holds it: it says so again, or its answer ends this replica being behind.
    fn probe_behind_ring(&mut self) {
        let first = self.journal.storage_head + 1;
        let source = self.repair_source_for(first);
        self.evicted_by.0 &= !bit(source);
        self.count("behind_ring_probe");
        let message = Message::RequestPrepares {
            from: self.from(),
            first,
            last: first,
        };
        self.send(source, message);
    }

    /// Asks a peer for the prepares this replica lacks, at most `REPAIR_BATCH_MAX` a round:
    /// bodies of known headers from the lowest missing one, or, below the lowest known entry,
    /// the range under it (proved by the chain as they arrive).
    pub(super) fn repair(&mut self) {
        self.repair_at = self.ticks + self.config.repair_retry_ticks;
        if !self.wants_repair() {
            return;
        }
        let merging = self.phase() == Phase::Merging;
        if !self.safeguards.body_fetch && merging {
            return;
        }
        let target = self.commit_max.max(self.journal.head());
        let mut first = self.journal.storage_head + 1;
        // Its own cut entries are proved from the view's entries above them, not fetched.
        while first < target && self.is_candidate(first) {
            first += 1;
        }
        if merging
            && !self.safeguards.hole_check_lower_bound
            && let Some(starting) = &self.starting
        {
            // The check as it was: nothing at or below the merged commit point is looked for.
            first = first.max(starting.commit + 1);
        }
        let known = (first..=target).find(|op| {
            self.journal.header(*op).is_some() || self.anchor.is_some_and(|a| a.0 == *op)
        });
        let (from, to) = match known {
            Some(k) if k == first => {
                let last = (first..=target)
                    .take(usize::try_from(REPAIR_BATCH_MAX).unwrap_or(128))
                    .take_while(|op| !self.journal.has_body(*op))
                    .last()
                    .unwrap_or(first);
                (first, last)
            }
            // At most a round's worth ending at the known entry itself: a peer serves no more
            // than `REPAIR_BATCH_MAX`, and a range one longer loses its top, the one op the
            // known entry (often only the anchor) proves, so nothing below is ever proved.
            Some(k) => (first.max((k + 1).saturating_sub(REPAIR_BATCH_MAX)), k),
            None => (first, (first + REPAIR_BATCH_MAX - 1).min(target)),
        };
        let overlaps = |round: &&Round| round.first <= to && from <= round.last;
        let retry = self.config.repair_retry_ticks;
        let heard = self.repair_heard;
        // When an overlapped round may be asked again: a retry interval (doubled per retry)
        // after its last sign of life, and never before its first answer had a second to come.
        let due = |round: &Round| {
            let wait = retry << round.retries;
            if heard > round.asked {
                heard + wait
            } else {
                round.asked + wait.max(REPAIR_FIRST_ANSWER_TICKS)
            }
        };
        let overlapped = self.repair_rounds.iter().filter(overlaps);
        let retries = overlapped.clone().map(|r| r.retries).max();
        if let Some(due) = overlapped.map(due).max()
            && self.ticks < due
        {
            // Answers of rounds asked before are still arriving (128 prepares of a loaded
            // partition can take longer than a retry interval to cross the link and reach this
            // replica, and the answers of earlier rounds come first): asking again would only
            // fetch them twice. A round asked again and again waits twice as long each time
            // (up to 8 intervals) before the next.
            self.count("repair_round_still_arriving");
            return;
        }
        // Asked again, or asked anew: the overlapped rounds are replaced by this one.
        self.repair_rounds.retain(|r| !overlaps(&r));
        if self.repair_rounds.len() >= REPAIR_ROUNDS_MAX {
            self.repair_rounds.remove(0);
        }
        self.repair_rounds.push(Round {
            first: from,
            last: to,
            asked: self.ticks,
            retries: retries.map_or(0, |r| (r + 1).min(REPAIR_BACKOFF_MAX)),
        });
        // A round asked anew goes to the best source (a backup's primary, which holds its whole
        // log); only a round asked again tries the others in turn. Rotating on every round sent
        // every other one to the other backup, which may be the peer that just died: its round
        // then waited a second for a first answer (a restarted node's catch-up after a second
        // kill took 1.0 s instead of 0.1 s, the fault harness's `kill-boot`).
        // A peer that said it no longer holds what storage lacks is passed over.
        let (evicted, at) = self.evicted_by;
        let best = self
            .repair_sources(from)
            .into_iter()
            .find(|r| at != self.journal.storage_head || evicted & bit(*r) == 0);
        let source = match best {
            Some(best) if retries.is_none() => best,
            _ => self.repair_source_for(from),
        };
        let message = Message::RequestPrepares {
            from: self.from(),
            first: from,
            last: to,
        };
        self.send(source, message);
    }

    /// A prepare arrived: an answer of a round in flight shows the link still delivers them;
    /// a round's last answer ends it and makes the next round due at once.
    pub(super) fn repair_answer_arrived(&mut self, op: u64) {
        if let Some(i) = self
            .repair_rounds
            .iter()
            .position(|r| (r.first..=r.last).contains(&op))
        {
            self.repair_heard = self.ticks;
            if op == self.repair_rounds[i].last {
                self.repair_rounds.remove(i);
                self.repair_at = self.repair_at.min(self.ticks);
            }
        }
    }

    /// Who to ask, in turn: the view's primary first (a backup), the replicas that announced
    /// the bodies (the new primary); the next in turn on every call.
    pub(super) fn repair_source_for(&mut self, op: u64) -> u8 {
        let candidates = self.repair_sources(op);
        if candidates.is_empty() {
            return self.id.replica;
        }
        let pick = candidates[usize::from(self.repair_source) % candidates.len()];
        self.repair_source = self.repair_source.wrapping_add(1);
        pick
    }

    /// The replicas that can serve `op`, the best first: the view's primary (a backup), the
    /// replicas that announced its body (the new primary), then the others.
    fn repair_sources(&self, op: u64) -> Vec<u8> {
        let replicas = self.id.replicas;
        if self.is_primary() {
            let mask = self.view_change.sources.get(&op).copied().unwrap_or(0);
            let from_dvcs: Vec<u8> = (0..replicas)
                .filter(|r| *r != self.id.replica && mask & bit(*r) != 0)
                .collect();
            if from_dvcs.is_empty() {
                (0..replicas).filter(|r| *r != self.id.replica).collect()
            } else {
                from_dvcs
            }
        } else {
            let primary = self.primary_of(self.view);
            std::iter::once(primary)
                .chain((0..replicas).filter(|r| *r != self.id.replica && *r != primary))
                .collect()
        }
    }

    /// Serves a peer's repair round: from the ring what it holds, and below the ring from disk
    /// (every op evicted from the ring was journaled first, so the log holds it unless retention
    /// or a checkpoint deleted it since: the host answers `RangeEvicted` for those).
    pub(super) fn on_request_prepares(&mut self, from: From, first: u64, last: u64) {
        let last = last.min(first.saturating_add(REPAIR_BATCH_MAX - 1));
        let oldest = self.journal.oldest();
        let mut start = first;
        if first < oldest {
            if self.safeguards.repair_from_disk {
                // The whole round from disk, up to what storage journaled (all of it below the
                // ring is), so its prepares arrive in order: the asker takes the round's last
                // op as its end, and a top served from the ring at once, ahead of a bottom read
                // a tick later, had it ask the bottom again (1.6x the bytes it lacked).
                let through = last.min(self.journal.journaled_head);
                self.read_prepares(from.replica, first, through);
                start = through + 1;
            } else {
                let message = Message::RangeEvicted {
                    from: self.from(),
                    oldest,
                };
                self.send(from.replica, message);
                start = oldest;
            }
        }
        for op in start..=last {
            if let Some(slot) = self.journal.slot(op)
                && let Some(body) = slot.body.clone()
            {
                let header = slot.header;
                self.send(from.replica, Message::Prepare { header, body });
            }
        }
    }

    /// Asks the host to read `first..=last` back from the log and send them to `to`.
    fn read_prepares(&mut self, to: u8, first: u64, last: u64) {
        if to == self.id.replica || !self.marked() {
            return;
        }
        self.count("repair_served_from_disk");
        let from = self.from();
        self.effects.push(Effect::ReadPrepares {
            to,
            from,
            first,
            last,
        });
    }

    pub(super) fn on_range_evicted(&mut self, from: From, oldest: u64) {
        let head = self.journal.storage_head;
        if oldest > head + 1 {
            self.count("range_evicted");
            if self.evicted_by.1 != head {
                // Its storage moved since the last answers: they no longer say anything.
                self.evicted_by = (0, head);
            }
            self.evicted_by.0 |= bit(from.replica);
        }
    }
}
