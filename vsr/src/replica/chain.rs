//! What the hash chain proves. Every header the replica holds is known good: its own storage's,
//! the view authority's (the primary's new prepares, a `StartView`, the merged log), or proved
//! against one that is: a prepare is proved when the next known entry names it as its parent,
//! or when it is the commit point the primary named (the anchor). A proved entry that differs
//! from what storage holds there proves storage's entry another log's: storage is cut below it.
//! Storage is extended only by bodies linked to what it holds, in op order.
//!
//! Entries of its own storage that a view start cut (it could not check them against the
//! adopted log: the log's commit point was past them) stay in memory as candidates: when the
//! view's entry above one is known and names it as its parent, it is proved and journaled again
//! from memory, never fetched; when that entry names another parent, it is dropped and fetched.

use iggy_format::Header;

use super::{Pending, Phase, Replica};
use crate::config::{JOURNAL_RETRY_TICKS, REPAIR_BATCH_MAX};
use crate::effect::Effect;

impl Replica {
    /// Forgets the slots after `op` and truncates storage there if it holds more (never below
    /// what executed or is executing).
    pub(super) fn forget_after(&mut self, op: u64) {
        let op = op.max(self.executed());
        self.journal.drop_after(op);
        if self.journal.storage_head > op {
            self.truncate_storage(op);
        }
    }

    /// A prepare whose header the hash chain proves: the next known entry names it as its
    /// parent, or it is the commit point the primary named.
    fn verified_by_chain(&self, header: &Header) -> bool {
        let checksum = header.checksum();
        let op = header.op;
        if op <= self.commit_min && self.journal.checksum(op).is_some() {
            return false;
        }
        if self
            .journal
            .header(op + 1)
            .is_some_and(|next| next.parent == checksum)
        {
            return true;
        }
        self.anchor == Some((op, checksum))
    }

    /// Keeps the entries storage holds above `keep` (which a view start is about to cut) as
    /// candidates, at most two repair rounds of them, the lowest first (the chain reaches them
    /// from the view's entries above).
    pub(super) fn keep_candidates(&mut self, keep: u64) {
        if !self.safeguards.keep_durable_log {
            return;
        }
        let most = 2 * usize::try_from(REPAIR_BATCH_MAX).unwrap_or(256);
        for op in keep + 1..=self.journal.storage_head {
            if self.candidates.len() >= most {
                break;
            }
            if let Some(slot) = self.journal.slot(op)
                && let Some(body) = slot.body.clone()
            {
                self.candidates.insert(op, (slot.header, body));
            }
        }
    }

    /// Proves or drops candidates against the entries now known above them, highest first, so
    /// a proof runs down the chain in one pass.
    fn prove_candidates(&mut self) {
        let executed = self.commit_min;
        self.candidates.retain(|op, _| *op > executed);
        let ops: Vec<u64> = self.candidates.keys().rev().copied().collect();
        for op in ops {
            let Some(next) = self.journal.header(op + 1).copied() else {
                continue;
            };
            let Some((header, body)) = self.candidates.remove(&op) else {
                continue;
            };
            if next.parent != header.checksum() {
                // Another log's from here down, as far as this replica can tell cheaply: the
                // rest is fetched (the view's entries are proved against the one above).
                self.count("candidate_disproved");
                self.candidates.clear();
                return;
            }
            if self
                .journal
                .header(op)
                .is_some_and(|h| h.checksum() != header.checksum())
            {
                continue;
            }
            self.count("candidate_proved");
            self.learn_commit(&header);
            self.journal.insert(header, Some(body));
        }
    }

    /// Whether op `op` is a candidate of this replica's own (repair need not fetch it while the
    /// chain may still prove it).
    pub(super) fn is_candidate(&self, op: u64) -> bool {
        self.candidates.contains_key(&op)
    }

    /// Moves buffered repair replies that the chain now proves into the journal.
    pub(super) fn verify_unverified(&mut self) {
        self.prove_candidates();
        while let Some(op) = self
            .unverified
            .iter()
            .rev()
            .find(|(_, (h, _))| self.verified_by_chain(h))
            .map(|(op, _)| *op)
        {
            if let Some((header, body)) = self.unverified.remove(&op) {
                if let Some(existing) = self.journal.header(op)
                    && existing.checksum() != header.checksum()
                {
                    // The chain proves this replica's entry there is another log's.
                    self.journal.drop_after(op);
                    if self.journal.storage_head >= op {
                        self.truncate_storage(op - 1);
                    }
                }
                self.learn_commit(&header);
                self.journal.insert(header, Some(body));
            }
        }
        let commit_min = self.commit_min;
        self.unverified.retain(|op, _| *op > commit_min);
        if !self.candidates.is_empty() {
            // Entries proved just now may prove the candidates below them.
            self.prove_candidates();
        }
    }

    /// Drops every storage entry after `after` (never below what executed or is executing).
    pub(super) fn truncate_storage(&mut self, after: u64) {
        let after = after.max(self.executed());
        self.journal.storage_truncated(after);
        self.storage(
            |id| Effect::Truncate { id, after },
            Pending::Truncate(after),
        );
    }

    /// Storage refused to journal `op`, the first op it had not journaled, for want of room (a
    /// full disk, no descriptor: nothing of it was written). Every op handed it after `op` is
    /// refused too, without being tried (the host refuses an op that does not follow its log's
    /// head). The log in memory stays; what storage holds is cut back to before `op` (a no-op
    /// there, but it marks every prepare and journal handed it since as cut), and the bodies
    /// are handed it again after [`JOURNAL_RETRY_TICKS`]. Nothing above `op` is acknowledged
    /// meanwhile (`acknowledge` counts only what storage journaled), so the replica is, to
    /// its peers, one whose disk is slow; it never halts for it.
    pub(super) fn journal_refused(&mut self, op: u64) {
        self.count("journal_refused");
        self.journal_retry_at = Some(self.ticks + JOURNAL_RETRY_TICKS);
        self.truncate_storage(op - 1);
    }

    /// Hands storage every body that extends its log in order.
    pub(super) fn journal_bodies(&mut self) {
        if self.phase() == Phase::Recovering || self.installing() {
            return;
        }
        if self.journal_retry_at.is_some_and(|at| self.ticks < at) {
            // Storage refused the last try for want of room: not again yet.
            return;
        }
        // A backup adopting a view journals nothing until the log_view is durable; the new
        // primary journals the merged log as soon as storage kept what it must.
        if let Some(starting) = &self.starting
            && (!starting.primary || !starting.truncated)
        {
            return;
        }
        loop {
            let next = self.journal.storage_head + 1;
            let Some(slot) = self.journal.slot(next) else {
                break;
            };
            let Some(body) = slot.body.clone() else {
                break;
            };
            let header = slot.header;
            if Some(header.parent) != self.journal.checksum(next - 1) {
                // Not linked to what storage holds: the log below it is not this view's.
                self.count("journal_unlinked");
                break;
            }
            self.journal.storage_head = next;
            self.storage(
                |id| Effect::Journal { id, header, body },
                Pending::Journal(next),
            );
        }
    }
}
