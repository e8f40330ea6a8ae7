//! A replica's commit and cut. `commit(op)` applies the consumer offset stores up to `op`;
//! `truncate_after(op)` drops an uncommitted suffix a view change replaced, keeping the
//! segments, their indexes, the next offset and the offset frontier consistent with the log.
//!
//! A cut is durable when it returns: the WAL publishes the cut first (everything kept durable,
//! then its frontier names the new head), then zeroes what lies past it and removes later
//! segments. The indexes are derived data: a later segment's index is removed and the head's
//! rewritten without a sync, since boot checks every index against its log.

use iggy_io::Storage;
use iggy_wal::FileInfo;

use crate::boot::{self, Stores};
use crate::error::PartitionError;
use crate::index;
use crate::partition::{Partition, Segment};

impl<S: Storage + Clone> Partition<S> {
    /// Commits every entry up to `op`: the consumer offset stores among them are stored, in log
    /// order, into their files without a sync (durable through their log entries, which
    /// retention deletes only after [`Partition::settle_offsets`]). Committing at or below the
    /// commit point is a no-op; `op` must be journaled. The durable commit point is the
    /// superblock's (`write_vsr`), raised at boot to what the log's prepares prove: boot stores
    /// what a crash left unapplied up to it.
    pub fn commit(&self, op: u64) -> Result<(), PartitionError> {
        let mut state = self.lock();
        if op <= state.committed {
            return Ok(());
        }
        // Not `Wal::head`: a commit does not wait for a write of the log's buffer under way.
        let head = self.wal.head_op();
        if op > head {
            return Err(PartitionError::Refused {
                dir: self.dir.clone(),
                op,
                reason: format!("commit past the head op {head}"),
            });
        }
        let store = self.offset_store();
        while let Some(entry) = state.uncommitted_offsets.first().copied() {
            if entry.op > op {
                break;
            }
            // What the journal (or an earlier commit) knew of the file: the slot to write
            // without reading it. Forgotten while the store runs: a store that fails leaves
            // the file unknown.
            let key = (entry.kind, entry.id);
            let known = self.lock_offset_files().remove(&key);
            // Unsynced: the entry stays in the log until the file is settled
            // (`Partition::settle_offsets`, before retention deletes it), and a boot after a
            // crash that took the write stores it again from there.
            state.unsynced_offsets.insert(key);
            let stored =
                store.store_known(entry.kind, entry.id, entry.offset, entry.op, known, false)?;
            self.lock_offset_files().insert(key, stored);
            state.uncommitted_offsets.remove(0);
            // Stored: a failure of the next store must not store this one twice, or lose the
            // progress made.
            state.committed = entry.op;
        }
        state.committed = op;
        Ok(())
    }

    /// Drops every entry after `op`, an uncommitted suffix a view change replaced; `op` at or
    /// above the commit point. Later segments and their indexes go, the head segment is
    /// rescanned to the cut, the next offset and timestamp follow the log, and consumer offset
    /// stores in the cut are forgotten (they never committed, so none was stored). Durable when
    /// it returns. A cut that would bring the next offset below the superblock's offset
    /// frontier is refused before anything is changed.
    pub fn truncate_after(&self, op: u64) -> Result<(), PartitionError> {
        let mut state = self.lock();
        let commit = self.committed_locked(&state);
        if op < commit {
            return Err(PartitionError::BelowCommit {
                dir: self.dir.clone(),
                what: "truncate after",
                op,
                commit,
            });
        }
        let (head, _) = self.wal.head();
        if op >= head {
            return Ok(()); // nothing past `op` (the WAL refuses a cut past its head itself)
        }
        // The entries kept must be in the files to be rescanned.
        self.wal.write_buffered()?;
        let files = self.wal.files();
        assert_eq!(
            files.len(),
            state.segments.len(),
            "the partition's segments are the WAL's files"
        );
        let first_op = files.first().map_or(1, |f| f.first_op);
        let Some(at) = files.iter().rposition(|f| f.first_op <= op).or_else(|| {
            // Everything retained is cut: the first file stays, empty.
            (op + 1 == first_op).then_some(0)
        }) else {
            return Err(PartitionError::Refused {
                dir: self.dir.clone(),
                op,
                reason: format!("a cut below the first retained op {first_op}"),
            });
        };
        let file = &files[at];
        let keep = op + 1 - file.first_op.min(op + 1);
        let end = if keep < file.entries {
            self.wal.locate(op + 1)?.offset
        } else {
            file.end
        };
        let kept = FileInfo {
            entries: keep,
            end,
            ..file.clone()
        };
        let expected = at
            .checked_sub(1)
            .and_then(|i| state.segments.get(i))
            .map(|s| s.info.next_offset);
        let reader = self.storage.open_read(&kept.path)?;
        let mut stores = Stores::default();
        let head_segment = boot::scan_segment(&reader, &kept, &self.config, expected, &mut stores)?;
        drop(reader);
        let offset_frontier = self.lock_superblock().state().offset_frontier;
        if head_segment.next_offset < offset_frontier {
            return Err(PartitionError::BehindOffsetFrontier {
                dir: self.dir.clone(),
                log_end: head_segment.next_offset,
                offset_frontier,
            });
        }
        // Decided: the cut is made durable by the WAL first.
        self.wal.truncate_after(op)?;
        let dropped: Vec<Segment<S::Reader>> = state.segments.drain(at + 1..).collect();
        state.segments[at] = Segment::new(head_segment);
        let head_info = state.segments[at].info.clone();
        state.next_offset = head_info.next_offset;
        state.last_timestamp = state
            .segments
            .iter()
            .map(|s| s.info.max_timestamp)
            .max()
            .unwrap_or(0);
        state.uncommitted_offsets.retain(|entry| entry.op <= op);
        drop(state);
        for segment in &dropped {
            let path = self.dir.join(index::file_name(segment.info.start_offset));
            if self.storage.exists(&path)? {
                self.storage.unlink(&path)?;
            }
        }
        if head_info.batches > 0 {
            self.write_index(&head_info)?;
        } else {
            let path = self.dir.join(index::file_name(head_info.start_offset));
            if self.storage.exists(&path)? {
                self.storage.unlink(&path)?;
            }
        }
        Ok(())
    }
}
