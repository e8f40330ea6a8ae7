//! Retention: whole sealed, published (and, on a replica, committed) segments are deleted from
//! the oldest, after the consumer offset files their stores went into are synced and the
//! superblock's offset frontier is raised past them.

use iggy_io::Storage;
use iggy_superblock::VsrState;

use crate::error::PartitionError;
use crate::index;
use crate::partition::{Partition, Segment, State};
use crate::report::SegmentInfo;

impl<S: Storage + Clone> Partition<S> {
    /// Deletes whole sealed, published segments from the oldest: those whose newest batch is
    /// older than `max_age_us` before `now_us`, and then as many as it takes to bring the
    /// partition's bytes to `max_bytes` or below. Returns how many were deleted. A segment
    /// holding an entry past the commit point of a replicated partition stays (a view change
    /// may still cut it). The superblock's offset frontier is raised past them first, so the
    /// next offset cannot go back.
    /// The sealed segments whose every entry is committed, oldest first: what a peer's state
    /// transfer ships (`docs/vsr.md`, "Repair"). Their entries are written out to the files
    /// first (unsynced, as any read of the log does), so the files hold every byte the segments
    /// count; a committed entry is never cut, so those bytes do not change while the segment
    /// exists. Unlike the segments retention may delete they need not be published: what the
    /// cluster committed is what the receiver installs, whatever this replica's disk holds durably.
    pub fn committed_segments(&self) -> Result<Vec<SegmentInfo>, PartitionError> {
        self.wal.write_buffered()?;
        Ok(self.sealed_committed())
    }

    /// The sealed segments whose every entry is committed, oldest first, as the partition counts
    /// them (nothing is written: what a `DeleteSegments` counts in).
    #[must_use]
    pub fn sealed_committed(&self) -> Vec<SegmentInfo> {
        let state = self.lock();
        let committed = state.committed;
        state.segments[..state.segments.len().saturating_sub(1)]
            .iter()
            .take_while(|s| s.info.entries > 0 && s.info.first_op + s.info.entries - 1 <= committed)
            .map(|s| s.info.clone())
            .collect()
    }

    /// How many of the oldest segments are settled: sealed, fully published and (on a replica)
    /// committed, so that no boot discards and no view change cuts any of their entries (what
    /// retention may delete).
    fn settled(&self, state: &State<S::Reader>) -> usize {
        let published = self.wal.published();
        let replicated = self.config.replicated;
        let committed = state.committed;
        state.segments[..state.segments.len().saturating_sub(1)]
            .iter()
            .take_while(|segment| {
                let info = &segment.info;
                let last_op = info.first_op + info.entries - 1;
                // Only fully published segments, and never the one the frontier names as
                // holding the published head (the WAL keeps that file: see
                // `Wal::drop_prefix`).
                last_op <= published.head_op
                    && info.first_op < published.head_file
                    && (!replicated || last_op <= committed)
            })
            .count()
    }

    pub fn apply_retention(
        &self,
        now_us: u64,
        max_age_us: Option<u64>,
        max_bytes: Option<u64>,
    ) -> Result<usize, PartitionError> {
        self.apply_retention_below(now_us, max_age_us, max_bytes, 0)
    }

    /// [`Partition::apply_retention`], which also deletes the settled segments whose every
    /// message is below offset `floor` (an operator's `DeleteSegments`; 0: none).
    pub fn apply_retention_below(
        &self,
        now_us: u64,
        max_age_us: Option<u64>,
        max_bytes: Option<u64>,
        floor: u64,
    ) -> Result<usize, PartitionError> {
        let mut state = self.lock();
        let settled = self.settled(&state);
        let mut total: u64 = state.segments.iter().map(|s| s.info.bytes).sum();
        let mut count = 0;
        for segment in &state.segments[..settled] {
            let info = &segment.info;
            let expired =
                max_age_us.is_some_and(|age| info.max_timestamp.saturating_add(age) < now_us);
            let oversize = max_bytes.is_some_and(|max| total > max);
            let below = info.next_offset <= floor;
            if !(expired || oversize || below) {
                break;
            }
            total -= info.bytes;
            count += 1;
        }
        if count == 0 {
            return Ok(0);
        }
        // The consumer offset stores of the segments to delete are committed and stored, but
        // maybe not synced: the segments are what a boot would store them again from, so the
        // files are made durable before any segment goes (a failure leaves everything).
        self.settle_offsets_locked(&mut state)?;
        let last = &state.segments[count - 1].info;
        let frontier = last.next_offset;
        let last_op = last.first_op + last.entries - 1;
        {
            let mut superblock = self.lock_superblock();
            let current = *superblock.state();
            // On a replica the deleted entries are committed (`settled`), and the durable
            // commit point must cover them: a boot whose commit point stayed below them would
            // hold a log that starts above its commit point, and the first view that cuts that
            // log back to the commit point would ask for a cut below the first retained op.
            let commit_max = if self.config.replicated {
                current.commit_max.max(last_op)
            } else {
                current.commit_max
            };
            if current.offset_frontier < frontier || current.commit_max < commit_max {
                let next = VsrState {
                    offset_frontier: current.offset_frontier.max(frontier),
                    commit_max,
                    ..current
                };
                // Durable before any segment goes: boot's next offset never falls below it,
                // nor its commit point below what retention deleted.
                superblock.write(next)?;
            }
        }
        // Only now do the segments leave the partition: a failed superblock write above leaves
        // everything as it was.
        let deleted: Vec<Segment<S::Reader>> = state.segments.drain(..count).collect();
        drop(state);
        let removed = self.wal.drop_prefix(last_op)?;
        // Paired with the rule above: the partition and its WAL delete the same files.
        assert_eq!(
            removed, count,
            "retention and the WAL disagree on what to delete"
        );
        for segment in &deleted {
            let path = self.dir.join(index::file_name(segment.info.start_offset));
            if self.storage.exists(&path)? {
                self.storage.unlink(&path)?;
            }
        }
        // The index removals durable (an orphan index is harmless: boot removes it).
        self.storage.sync_dir(&self.dir)?;
        Ok(count)
    }
}
