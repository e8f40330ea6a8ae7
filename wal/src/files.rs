//! The log's files: creating one (preallocated, its name durable, or a spare taken into use),
//! cutting the log back (`truncate_after`), dropping a prefix (retired files kept as spares up
//! to `Config::spare_files`), and the zeros written ahead of small publications and past the
//! entries of a recycled file (`docs/format.md`, "Recycled files").

use std::path::{Path, PathBuf};
use std::sync::Arc;

use iggy_format::Header;
use iggy_format::constants::HEADER_SIZE;
use iggy_format::header::stored_checksum;
use iggy_io::{OpenMode, ReadFile, Storage, WriteFile};

use crate::frontier::{self, Frontier};
use crate::offsets::Offsets;
use crate::publish::wake_all_to_look_again;
use crate::ring;
use crate::seal::{self, Seal};
use crate::{CarryRun, Chunk, LogFile, State, StopReason, Wal, WalError, poisoned_error};

impl<S: Storage> Wal<S> {
    /// Creates the file whose first op is `first_op`, named by `key`, preallocated, and makes
    /// its name durable.
    pub(crate) fn create_file(
        &self,
        state: &mut State<S::File>,
        first_op: u64,
        key: u64,
    ) -> Result<(), WalError> {
        if let Some(last) = state.files.last()
            && key <= last.key
        {
            return Err(WalError::KeyNotIncreasing {
                dir: self.dir.clone(),
                key,
                last_key: last.key,
            });
        }
        let path = self.dir.join(self.config.naming.file_name(key));
        if let Some(spare) = state.spares.first().cloned() {
            match self.reuse_spare(&spare, &path) {
                Ok(file) => {
                    state.spares.remove(0);
                    state.files.push(LogFile {
                        first_op,
                        key,
                        path,
                        file: Arc::new(file.0),
                        offsets: Offsets::default(),
                        end: 0,
                        prepared: file.1,
                        first_parent: state.head_checksum,
                        sealed: false,
                        stale_tail: true,
                    });
                    return Ok(());
                }
                Err(error) => {
                    let error = WalError::from(error);
                    self.poison(state, &error);
                    return Err(error);
                }
            }
        }
        let mut created = false;
        let new_path = path.clone();
        let result = (|| {
            let file = self.storage.open(&path, OpenMode::CreateNew)?;
            created = true;
            file.allocate(0, self.config.file_size_bytes)?;
            if self.config.zero_fill {
                file.write_zeros(0, self.config.file_size_bytes)?;
            }
            // The preallocated extent (and its zeros) durable now, so that publishing into it
            // later is a data-only fdatasync.
            file.sync_all()?;
            // The file's name must be durable before a frontier may name it.
            self.storage.sync_dir(&self.dir)?;
            Ok::<_, iggy_io::Error>(LogFile {
                first_op,
                key,
                path,
                file: Arc::new(file),
                offsets: Offsets::default(),
                end: 0,
                prepared: if self.config.zero_fill {
                    self.config.file_size_bytes
                } else {
                    0
                },
                first_parent: state.head_checksum,
                sealed: false,
                stale_tail: false,
            })
        })();
        match result {
            Ok(file) => {
                state.files.push(file);
                Ok(())
            }
            // No room for the file (a full disk, a quota, no descriptor left): nothing of the
            // log changed, so the log stays usable; the new file goes again (an empty file no
            // frontier names, which boot would take for a later empty one anyway) and the
            // append that needed it fails. The next append tries again. Only if the file
            // cannot be removed is the log poisoned, since its name is then taken.
            Err(error)
                if error.is_exhaustion()
                    && (!created || self.storage.unlink(&new_path).is_ok()) =>
            {
                Err(WalError::from(error))
            }
            Err(error) => {
                let error = WalError::from(error);
                self.poison(state, &error);
                Err(error)
            }
        }
    }
    /// Takes the spare at `spare` into use as the log file at `path`: its first header zeroed
    /// and synced before the rename (so that, renamed but not yet named by a frontier, it is a
    /// later file with nothing in it, not a file whose first entry lies before the published
    /// head: boot refuses that as `ForeignFile`), then the rename made durable before a
    /// frontier may name the file. Returns the file and the bytes of it already written.
    fn reuse_spare(&self, spare: &Path, path: &Path) -> iggy_io::Result<(S::File, u64)> {
        if self.storage.exists(path)? {
            return Err(iggy_io::Error::new(
                iggy_io::Op::Rename,
                path,
                iggy_io::ErrorKind::AlreadyExists,
            ));
        }
        let file = self.storage.open(spare, OpenMode::Existing)?;
        let len = file.len()?;
        file.write_zeros(0, (ring::SECTOR as u64).min(len))?;
        if len < self.config.file_size_bytes {
            file.allocate(0, self.config.file_size_bytes)?;
            file.sync_all()?;
        } else {
            file.sync_data()?;
        }
        self.storage.rename(spare, path)?;
        self.storage.sync_dir(&self.dir)?;
        // Only the blocks it held before count as written (a spare shorter than a file was
        // allocated above, and the new blocks are not).
        Ok((file, len.min(self.config.file_size_bytes)))
    }

    /// Takes the spares boot found as this log's (their numbers continue past the highest).
    pub(crate) fn adopt_spares(&self, state: &mut State<S::File>, spares: &[PathBuf]) {
        state.next_spare = spares
            .iter()
            .filter_map(|path| path.file_name().and_then(parse_spare))
            .max()
            .map_or(0, |n| n + 1);
        state.spares = spares.to_vec();
    }

    /// Drops every entry after `op` (a view change cutting an uncommitted suffix). Durable
    /// before it returns: the cut is published first, then the bytes past it are zeroed and
    /// later files removed.
    pub fn truncate_after(&self, op: u64) -> Result<(), WalError> {
        let mut guard = self.lock_idle()?;
        let state = &mut *guard;
        let first_op = state.first_op();
        if op == state.head_op {
            return Ok(());
        }
        if op > state.head_op || op + 1 < first_op {
            return Err(WalError::OutOfRange {
                what: "truncate_after",
                op,
                first_op,
                head_op: state.head_op,
            });
        }
        // The file cut into becomes the head, whose offsets are needed: loaded first, so that a
        // file that cannot give them (seal and file both fail to verify) refuses the cut with
        // nothing changed.
        let index = state
            .files
            .iter()
            .rposition(|f| f.first_op <= op)
            .unwrap_or(0);
        self.load_offsets(state, index)?;
        let result = self.truncate_locked(state, op);
        if let Err(error) = &result {
            self.poison(state, error);
        }
        result
    }

    fn truncate_locked(&self, state: &mut State<S::File>, op: u64) -> Result<(), WalError> {
        // Everything kept must be durable before a frontier names it.
        self.flush(state)?;
        for (_, file) in std::mem::take(&mut state.dirty) {
            file.sync_data()?;
        }
        let index = state
            .files
            .iter()
            .rposition(|f| f.first_op <= op)
            .unwrap_or(0);
        let keep = usize::try_from(op + 1 - state.files[index].first_op).unwrap_or(0);
        // The cut file becomes the head: its offsets (loaded by the caller) are kept.
        let cut_first_op = state.files[index].first_op;
        state
            .loaded_sealed
            .retain(|&first_op| first_op < cut_first_op);
        let file = &state.files[index];
        let (new_end, head_checksum) = if keep == 0 {
            // Nothing kept in this file: the new head is the entry before it, named by the
            // first entry's parent (or the current frontier's when that is the same place).
            let mut header = [0u8; HEADER_SIZE];
            file.file.read_exact_at(0, &mut header)?;
            (
                0,
                Header::decode(&header)
                    .map(|h| h.parent)
                    .map_err(|error| WalError::Corrupt {
                        file: file.path.clone(),
                        offset: 0,
                        reason: StopReason::Header(error),
                    })?,
            )
        } else {
            let (offset, end) = file
                .offsets
                .span(keep as u64 - 1, file.end)
                .unwrap_or_else(|| unreachable!("the cut file's offsets were loaded"));
            let mut header = [0u8; HEADER_SIZE];
            file.file.read_exact_at(offset, &mut header)?;
            (end, stored_checksum(&header))
        };
        let next = Frontier {
            sequence: state.published.sequence + 1,
            generation: state.published.generation + 1,
            incarnation: self.config.incarnation,
            head_op: op,
            head_checksum,
            head_file: file.first_op,
            published_length: new_end,
            head_file_key: file.key,
            ..state.published
        };
        self.frontier_file()?
            .write_all_at(next.offset(), &frontier::encode(&next))?;
        // The cut is durable before anything past it is touched.
        self.frontier_file()?.sync_data()?;
        state.published = next;
        if state.ring_written != 0 {
            // The ring's records name entries the cut removed. They are older than the cut's
            // slot, so boot ignores them, unless that slot rots and boot falls back to the
            // other: then the newest ring record would bring the cut entries back. Emptied
            // (a record whose first sector is zero was never written).
            for record in (0..ring::RECORDS).filter(|r| state.ring_written & (1 << r) != 0) {
                self.frontier_file()?
                    .write_zeros(ring::offset(record), ring::SECTOR as u64)?;
            }
            self.frontier_file()?.sync_data()?;
            state.ring_written = 0;
        }
        // Everything kept was synced above.
        state.synced_sequence = next.sequence;
        state.carry = Some(CarryRun::default());
        let old_end = file.end;
        file.file.write_zeros(new_end, old_end - new_end)?;
        // Zeroed so the dropped entries cannot reappear behind entries appended over them.
        file.file.sync_data()?;
        let mut removed: Vec<LogFile<S::File>> = state.files.drain(index + 1..).collect();
        for file in &mut removed {
            self.remove_seal(file);
            self.storage.unlink(&file.path)?;
        }
        // The cut file takes new entries: its seal no longer describes it.
        self.remove_seal(&mut state.files[index]);
        state.sealed_below = state.sealed_below.min(state.files[index].first_op);
        if !removed.is_empty() {
            // The removals are durable before a file of the same name can be created again.
            self.storage.sync_dir(&self.dir)?;
        }
        let head = &mut state.files[index];
        head.offsets.loaded_mut().truncate(keep);
        head.end = new_end;
        state.head_op = op;
        self.head_op.store(op, std::sync::atomic::Ordering::Release);
        state.head_checksum = head_checksum;
        // Callers waiting on ops past the cut learn it's gone; the rest need a leader.
        wake_all_to_look_again(&mut state.waiters);
        state.published_bytes = state.appended_bytes;
        Ok(())
    }

    /// Removes whole files whose entries are all at or before `op` (after a checkpoint or
    /// retention). Neither the last file nor the one holding the published head is removed.
    /// `op` must be published.
    pub fn drop_prefix(&self, op: u64) -> Result<usize, WalError> {
        let mut state = self.lock();
        if let Some(cause) = &state.poisoned {
            return Err(poisoned_error(&self.dir, cause));
        }
        if op > state.published.head_op {
            let first_op = state.first_op();
            return Err(WalError::OutOfRange {
                what: "drop_prefix",
                op,
                first_op,
                head_op: state.published.head_op,
            });
        }
        // A file goes when every entry in it is at or before `op`, and never the file holding
        // the published head: the frontier names it, and boot refuses a frontier whose head
        // file is gone (`LostPublishedFile`). Entries appended since may already have started
        // later files, so the last file is not necessarily that one.
        let published_file = state.published.head_file;
        let count = state
            .files
            .windows(2)
            .take_while(|pair| pair[1].first_op <= op + 1 && pair[0].first_op < published_file)
            .count();
        let mut removed_files: Vec<LogFile<S::File>> = state.files.drain(..count).collect();
        if let Some(first) = state.files.first().map(|f| f.first_op) {
            state.loaded_sealed.retain(|&first_op| first_op >= first);
        }
        // The oldest retired files become spares while there is room; the rest are unlinked.
        let room = self.config.spare_files.saturating_sub(state.spares.len());
        let first_spare = state.next_spare;
        let kept = room.min(removed_files.len());
        state.next_spare += kept as u64;
        drop(state);
        // Seals first: a crash between leaves a file without one (scanned), not a seal beside
        // no file.
        removed_files
            .iter_mut()
            .for_each(|file| self.remove_seal(file));
        let removed: Vec<PathBuf> = removed_files.into_iter().map(|f| f.path).collect();
        // Oldest first, each removal durable before the next: a crash leaves a shorter prefix,
        // never a hole, even on a file system that persists directory changes out of order
        // (found by the unordered crash enumeration of the metadata group's checkpoints). The
        // last sync also makes the removals durable before the caller relies on them, and before
        // a file of the same name could be created again. A file kept as a spare is renamed
        // instead of unlinked, with the same sync: a spare is never a hole either (boot does not
        // read spares as the log's), and it is offered for reuse only once its rename is
        // durable, so a crash can never leave it under two names.
        let mut spares = Vec::new();
        let result = removed.iter().enumerate().try_for_each(|(index, path)| {
            if index < kept {
                let spare = self.dir.join(spare_name(first_spare + index as u64));
                self.storage.rename(path, &spare)?;
                spares.push(spare);
            } else {
                self.storage.unlink(path)?;
            }
            self.storage.sync_dir(&self.dir)
        });
        let mut state = self.lock();
        state.spares.extend(spares);
        if let Err(error) = result {
            let error = WalError::from(error);
            self.poison(&mut state, &error);
            return Err(error);
        }
        Ok(removed.len())
    }
}

impl<S: Storage> Wal<S> {
    /// Writes the seal of every file the published frontier has passed that has none yet: such
    /// a file holds exactly its entries, all durable, and none will be added. Derived data,
    /// written without a sync (`crate::seal`): a seal that is lost, torn or fails to be written
    /// only costs the next boot a scan of its file, so a failure here is logged, not an error.
    pub(crate) fn seal_passed(&self, state: &mut State<S::File>) {
        let head_file = state.published.head_file;
        if head_file <= state.sealed_below {
            return;
        }
        for index in 0..state.files.len().saturating_sub(1) {
            let (file, next) = (&state.files[index], &state.files[index + 1]);
            if file.sealed || file.first_op >= head_file {
                continue;
            }
            // A file without a seal has its offsets in memory (only a sealed one lets them go).
            let Some(offsets) = file.offsets.loaded() else {
                continue;
            };
            let seal = self.seal_of(file, offsets.to_vec(), next.first_parent);
            let first_op = file.first_op;
            match self.write_seal(&file.path, &seal) {
                // Its offsets are in the seal now: they may go when more recent files need room.
                Ok(()) => state.loaded_sealed.push_back(first_op),
                Err(error) => tracing::warn!(
                    file = %file.path.display(),
                    %error,
                    "could not write the WAL file's seal (the next boot scans the file instead)"
                ),
            }
            state.files[index].sealed = true;
        }
        state.sealed_below = head_file;
        self.let_go_of_offsets(state);
    }

    /// The seal of `file`, whose entries start at `offsets` and whose last entry's header
    /// checksum is `last_checksum` (the next file's first parent).
    pub(crate) fn seal_of(
        &self,
        file: &LogFile<S::File>,
        offsets: Vec<u64>,
        last_checksum: iggy_format::checksum::Checksum,
    ) -> Seal {
        Seal {
            group: self.config.group,
            key: file.key,
            first_op: file.first_op,
            offsets,
            end: file.end,
            first_parent: file.first_parent,
            last_checksum,
        }
    }

    pub(crate) fn write_seal(&self, file: &Path, seal: &Seal) -> iggy_io::Result<()> {
        let path = seal::path_for(file);
        // A stale seal of the same name (a file cut back and filled again) goes first: the new
        // one is a new file, never a mix of the two.
        if self.storage.exists(&path)? {
            self.storage.unlink(&path)?;
        }
        let handle = self.storage.open(&path, OpenMode::CreateNew)?;
        handle.write_all_at(0, &seal::encode(seal))
    }

    /// Removes the seal of `file` if one was written (best effort: a seal left behind is found
    /// stale by the next boot, or fails its checks of the file's two ends; never trusted).
    pub(crate) fn remove_seal(&self, file: &mut LogFile<S::File>) {
        if std::mem::take(&mut file.sealed) {
            let _ = self.storage.unlink(seal::path_for(&file.path));
        }
    }
}

/// Publications that write less than this to the head file write zeros ahead of it.
const SMALL_PUBLICATION: u64 = 64 << 10;
/// How far ahead of the entries those zeros reach.
const ZEROS_AHEAD: u64 = 1 << 20;

/// Zeros a publication writes past its entries in the head file.
#[derive(Clone, Copy)]
pub(crate) struct Pad {
    pub(crate) first_op: u64,
    pub(crate) from: u64,
    pub(crate) to: u64,
}

/// The zeros a publication of `chunks` writes ahead of the head file's end, if any: when it is
/// small and the end is near the prepared (written) part of the file. In an `fallocate`d block
/// that was never written, the first write makes its `fdatasync` update the file's block map as
/// well (about 100 us here: docs/benchmarks.md); small publications would pay that every few
/// blocks, so they prepare a megabyte at a time. Large ones pay it once per publication anyway.
pub(crate) fn zeros_ahead<F>(
    head: &LogFile<F>,
    chunks: &[Chunk<F>],
    file_size: u64,
) -> Option<Pad> {
    let written: u64 = chunks
        .iter()
        .filter(|chunk| chunk.first_op == head.first_op)
        .map(|chunk| chunk.bytes.len() as u64)
        .sum();
    if written == 0 || written >= SMALL_PUBLICATION || head.prepared >= head.end + SMALL_PUBLICATION
    {
        return None;
    }
    let from = head.prepared.max(head.end);
    let to = (head.end + ZEROS_AHEAD).min(file_size);
    (to > from).then_some(Pad {
        first_op: head.first_op,
        from,
        to,
    })
}

/// The zeros a publication writes past its entries in a head file whose tail may hold bytes
/// that are not this log's ([`LogFile::stale_tail`]): through the end of the 4 KiB block that
/// holds the next header's place, so that at every sync the chain is followed by zeros, as in a
/// fresh file (boot's rule 6 adopts a chain only up to zeros). `None` when nothing new goes to
/// the head file since the previous publication, whose entries there ended at `since` (its
/// zeros are still there), or the file ends there.
pub(crate) fn terminator<F>(head: &LogFile<F>, since: u64, file_size: u64) -> Option<Pad> {
    if !head.stale_tail || head.end <= since {
        return None;
    }
    let to = (head.end + HEADER_SIZE as u64)
        .next_multiple_of(ring::SECTOR as u64)
        .min(file_size);
    (to > head.end).then_some(Pad {
        first_op: head.first_op,
        from: head.end,
        to,
    })
}

/// The name of spare number `n`: `{n:020}.spare`.
pub(crate) fn spare_name(n: u64) -> String {
    format!("{n:020}.{}", crate::boot::SPARE_EXTENSION)
}

/// The number of a spare's file name, if `name` is one.
pub(crate) fn parse_spare(name: &std::ffi::OsStr) -> Option<u64> {
    crate::boot::parse_numbered(name, crate::boot::SPARE_EXTENSION)
}

pub(crate) fn mark_dirty<F>(dirty: &mut Vec<(u64, Arc<F>)>, first_op: u64, file: &Arc<F>) {
    if !dirty.iter().any(|(op, _)| *op == first_op) {
        dirty.push((first_op, Arc::clone(file)));
    }
}
