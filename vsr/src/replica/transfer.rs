//! Snapshot transfer: a replica below a peer's log (the peer answered its repair with
//! `RangeEvicted` above its storage head: its log starts after a checkpoint) pulls that peer's
//! snapshot, when its group has them ([`crate::Config::snapshot_transfer`]), instead of asking
//! for ops that peer no longer holds. One peer's answer is enough: waiting for every peer's could
//! wait for ever with one of them down, and a snapshot is safe to take from any peer.
//!
//! The asker asks that peer for chunks of at most
//! [`SNAPSHOT_CHUNK_BYTES_MAX`], [`CHUNKS_IN_FLIGHT`] at a time; the first answer names the
//! snapshot (its checkpoint op and checksum, trailer and length). Each chunk is staged by the
//! host (`Effect::WriteSnapshotChunk`: nothing live changes); once all are, the replica, a backup
//! in normal status with nothing else of its lane in flight, asks the host to install the
//! snapshot (`Effect::InstallSnapshot`), which verifies it whole first. Installed, the replica's
//! log starts at the checkpoint: executed and committed through it, the ring above it kept, the
//! client table the snapshot's; repair goes on from the op after it. A chunk unanswered for a
//! second is asked of the next peer; a snapshot that does not verify, or a chunk refused, starts
//! the transfer over from the next peer; a peer with no snapshot ends it (its log starts at op
//! 1, so repair goes on). While it transfers, the replica holds no repair-ration slot, votes in
//! view changes, and acknowledges nothing it has not journaled (as any backup).
//!
//! Safe because a checkpoint is taken only at an op its replica executed, so committed: the
//! snapshot is the state of the cluster's committed log through its op, and the replica's own
//! log below that op (behind every peer's) held nothing the cluster does not.

use std::collections::{BTreeMap, BTreeSet};

use super::{Pending, Phase, Replica};
use crate::clients::{ClientTable, Session};
use crate::effect::Effect;
use crate::message::{From, Message, SNAPSHOT_CHUNK_BYTES_MAX, SnapshotRef};

/// Chunks asked and not yet answered, at most.
pub(crate) const CHUNKS_IN_FLIGHT: usize = 4;
const CHUNK: u64 = SNAPSHOT_CHUNK_BYTES_MAX as u64;
/// A chunk asked this long ago with no answer is asked again, of the next peer (1 s).
const CHUNK_RETRY_TICKS: u64 = 100;

/// A transfer in progress.
#[derive(Clone, Debug)]
pub(super) struct Transfer {
    /// The peer asked.
    source: u8,
    /// The snapshot, once a chunk named it.
    snapshot: Option<SnapshotRef>,
    /// Chunks asked and not answered: offset, and when asked.
    asked: BTreeMap<u64, u64>,
    /// Chunks handed to storage, and those it staged.
    staging: BTreeSet<u64>,
    staged: BTreeSet<u64>,
    /// The install is in flight.
    installing: bool,
}

impl Transfer {
    fn chunks(&self) -> u64 {
        self.snapshot.map_or(0, |s| s.length.div_ceil(CHUNK))
    }

    fn chunk_len(&self, offset: u64) -> u64 {
        self.snapshot
            .map_or(0, |s| s.length.saturating_sub(offset).min(CHUNK))
    }
}

impl Replica {
    /// Whether this replica pulls a snapshot when it is behind every peer's log.
    pub(super) fn transfers_snapshots(&self) -> bool {
        self.config.snapshot_transfer && self.safeguards.snapshot_transfer
    }

    /// Whether a snapshot transfer is under way (its install included).
    #[must_use]
    pub fn transferring(&self) -> bool {
        self.transfer.is_some()
    }

    /// Whether an install is in flight: nothing else is journaled or executed meanwhile.
    pub(super) fn installing(&self) -> bool {
        self.transfer.as_ref().is_some_and(|t| t.installing)
    }

    /// The transfer's step on a backup's tick: starts it, asks what is due, installs when every
    /// chunk is staged.
    pub(super) fn transfer_tick(&mut self) {
        if self.transfer.is_none() {
            // The peer whose log starts after what this replica needs has a snapshot past it.
            let source = match self.evicting_peer() {
                Some(peer) => peer,
                None => self.repair_source_for(self.journal.storage_head + 1),
            };
            self.count("snapshot_transfer_started");
            self.transfer = Some(Transfer {
                source,
                snapshot: None,
                asked: BTreeMap::new(),
                staging: BTreeSet::new(),
                staged: BTreeSet::new(),
                installing: false,
            });
        }
        let ticks = self.ticks;
        let stalled = match &self.transfer {
            Some(t) if !t.installing => t
                .asked
                .values()
                .any(|asked| ticks >= asked + CHUNK_RETRY_TICKS),
            _ => return,
        };
        if stalled {
            // The peer is slow, gone or partitioned away: the next one is asked.
            let next = self.repair_source_for(self.journal.storage_head + 1);
            self.count("snapshot_chunk_retry");
            if let Some(transfer) = self.transfer.as_mut() {
                transfer.asked.clear();
                transfer.source = next;
            }
        }
        let Some(transfer) = self.transfer.as_mut() else {
            return;
        };
        // Until a chunk names the snapshot, its first chunk; then the chunks neither asked nor
        // staged, up to the bound in flight.
        let room = CHUNKS_IN_FLIGHT.saturating_sub(transfer.asked.len());
        let wanted: Vec<u64> = if transfer.snapshot.is_none() {
            (transfer.asked.is_empty())
                .then_some(0)
                .into_iter()
                .collect()
        } else {
            (0..transfer.chunks())
                .map(|k| k * CHUNK)
                .filter(|o| {
                    !transfer.asked.contains_key(o)
                        && !transfer.staging.contains(o)
                        && !transfer.staged.contains(o)
                })
                .take(room)
                .collect()
        };
        for &offset in &wanted {
            transfer.asked.insert(offset, ticks);
        }
        let source = transfer.source;
        let complete = transfer.snapshot.is_some()
            && transfer.staged.len() as u64 == transfer.chunks()
            && transfer.staging.is_empty();
        for offset in wanted {
            let message = Message::RequestSnapshot {
                from: self.from(),
                offset,
            };
            self.send(source, message);
        }
        if complete {
            self.install();
        }
    }

    /// Asks the host to install the staged snapshot, once nothing else of the lane is in
    /// flight (a commit or a journal write of the log it replaces).
    fn install(&mut self) {
        let quiet = self.committing.is_none()
            && self
                .pending
                .values()
                .all(|p| matches!(p, Pending::Superblock(_)));
        if self.phase() != Phase::Backup || !quiet {
            return;
        }
        let Some(transfer) = self.transfer.as_mut() else {
            return;
        };
        let Some(snapshot) = transfer.snapshot else {
            return;
        };
        transfer.installing = true;
        self.count("snapshot_install");
        self.storage(
            |id| Effect::InstallSnapshot { id, snapshot },
            Pending::Install(snapshot),
        );
    }

    /// A peer asks for a chunk of this replica's snapshot: the host reads it.
    pub(super) fn on_request_snapshot(&mut self, from: From, offset: u64) {
        if !self.marked() || !offset.is_multiple_of(CHUNK) {
            self.count("snapshot_request_refused");
            return;
        }
        self.count("snapshot_chunk_served");
        let me = self.from();
        self.effects.push(Effect::ReadSnapshot {
            to: from.replica,
            from: me,
            offset,
        });
    }

    /// A chunk of a peer's snapshot arrived.
    pub(super) fn on_snapshot_chunk(
        &mut self,
        from: From,
        snapshot: SnapshotRef,
        offset: u64,
        bytes: Vec<u8>,
    ) {
        let storage_head = self.journal.storage_head;
        let Some(transfer) = self.transfer.as_mut() else {
            self.count("snapshot_chunk_unasked");
            return;
        };
        if transfer.installing {
            self.count("snapshot_chunk_while_installing");
            return;
        }
        if snapshot.is_none() {
            if from.replica == transfer.source {
                // It has no snapshot, so its log starts at op 1: repair can reach it.
                self.count("snapshot_none");
                self.transfer = None;
                self.evicted_by = (0, storage_head);
            }
            return;
        }
        if transfer.snapshot != Some(snapshot) {
            if from.replica != transfer.source || snapshot.op <= storage_head {
                self.count("snapshot_chunk_stale");
                return;
            }
            // The first chunk, or the source took a newer checkpoint: this snapshot, anew.
            transfer.snapshot = Some(snapshot);
            transfer.asked.clear();
            transfer.staging.clear();
            transfer.staged.clear();
        }
        if !offset.is_multiple_of(CHUNK) || bytes.len() as u64 != transfer.chunk_len(offset) {
            self.count("snapshot_chunk_misshapen");
            return;
        }
        transfer.asked.remove(&offset);
        if transfer.staging.contains(&offset) || transfer.staged.contains(&offset) {
            return;
        }
        transfer.staging.insert(offset);
        self.storage(
            |id| Effect::WriteSnapshotChunk {
                id,
                snapshot,
                offset,
                bytes,
            },
            Pending::SnapshotChunk(snapshot, offset),
        );
        // The next chunk is asked at once, not at the next tick.
        if self.phase() == Phase::Backup {
            self.transfer_tick();
        }
    }

    /// A chunk was staged (or refused: the transfer starts over from the next peer).
    pub(super) fn on_chunk_staged(&mut self, snapshot: SnapshotRef, offset: u64, staged: bool) {
        let Some(transfer) = self.transfer.as_mut() else {
            return;
        };
        if transfer.snapshot != Some(snapshot) {
            return;
        }
        transfer.staging.remove(&offset);
        if staged {
            transfer.staged.insert(offset);
            if self.phase() == Phase::Backup {
                self.transfer_tick();
            }
        } else {
            self.count("snapshot_chunk_refused");
            self.transfer = None;
            self.repair_source = self.repair_source.wrapping_add(1);
        }
    }

    /// The install ended: installed, the log starts at the snapshot's checkpoint; refused (it did
    /// not verify), the transfer starts over from the next peer.
    pub(super) fn on_installed(
        &mut self,
        snapshot: SnapshotRef,
        clients: Option<Vec<(u128, Session)>>,
    ) {
        self.transfer = None;
        let Some(clients) = clients else {
            self.count("snapshot_install_refused");
            self.repair_source = self.repair_source.wrapping_add(1);
            return;
        };
        self.count("snapshot_installed");
        let op = snapshot.op;
        self.journal.rebase(op, snapshot.checksum);
        self.commit_min = self.commit_min.max(op);
        self.commit_max = self.commit_max.max(op);
        self.acked_through = self.acked_through.max(op);
        self.candidates.retain(|o, _| *o > op);
        self.unverified.retain(|o, _| *o > op);
        if self.anchor.is_some_and(|(o, _)| o <= op) {
            self.anchor = None;
        }
        self.repair_rounds.clear();
        self.evicted_by = (0, op);
        self.repair_at = self.ticks;
        let mut table = ClientTable::new(self.config.clients_max);
        let mut sessions = clients;
        sessions.sort_by_key(|(client, s)| (s.op, *client));
        for (client, session) in sessions {
            table.record(client, session);
        }
        self.clients = table;
    }
}
