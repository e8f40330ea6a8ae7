//! Reading the retained files at boot: each file before the head file from its seal when the
//! seal's checks pass (`crate::seal`), every other file scanned, in parallel, entry by entry.

use std::path::PathBuf;

use iggy_format::Header;
use iggy_format::checksum::Checksum;
use iggy_format::constants::HEADER_SIZE;
use iggy_io::{ReadFile, ReadStorage};

use crate::offsets::Offsets;
use crate::scan::{From, Scan, StopReason, scan};
use crate::seal::SealHeader;

/// How much of the retained files boot reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Verify {
    /// Files before the head file whose seal verifies and whose two ends match it are taken
    /// from the seal; the rest is read and verified entry by entry (what every boot does).
    #[default]
    Sealed,
    /// Every retained entry is read and verified, seals or not (`iggy-fsck --deep`).
    Everything,
}

/// The retained files of a boot, and what each must hold.
pub(crate) struct Retained<'a> {
    pub(crate) files: &'a [(u64, PathBuf)],
    pub(crate) keys: &'a [u64],
    /// Files `..sealed_through` (those before the head file) may be taken from a seal.
    pub(crate) sealed_through: usize,
    pub(crate) until: &'a (dyn Fn(usize) -> u64 + Sync),
    pub(crate) group: u128,
}

impl Retained<'_> {
    /// Each file's entries, from its seal or from a scan, and whether they came from a seal.
    /// A seal is used only when it says what its file must hold and its file's two ends are
    /// what it says ([`Self::usable_seal`]); the result is what scanning every file gives
    /// whenever that verifies.
    pub(crate) fn read<R: ReadStorage>(
        &self,
        storage: &R,
        verify: Verify,
        disagreeing: &mut Vec<PathBuf>,
    ) -> (Vec<iggy_io::Result<Scan>>, Vec<bool>) {
        let count = self.files.len();
        // A seal's checks are a few small reads of two files (their latency, not the bytes, is
        // the cost: cold, each is a device round trip), so they go in parallel, more at once
        // than there are cores, for a device that serves several reads at a time.
        let sealable = match verify {
            Verify::Sealed => self.sealed_through,
            Verify::Everything => 0,
        };
        let readers = if storage.reads_in_parallel() {
            SEAL_READERS
        } else {
            1
        };
        let mut seals: Vec<Option<Scan>> =
            in_parallel(sealable, readers, |index| self.usable_seal(storage, index));
        seals.resize_with(count, || None);
        // The files without a usable seal, scanned in parallel. The links between files (a
        // sealed one's checksums included: its ends were read and checked) are checked by the
        // caller in file order, as for scanned files: a seal whose ends verify carries the
        // file's real first parent and last checksum, so a link it breaks is the log's own.
        let mut scans: Vec<Option<iggy_io::Result<Scan>>> = (0..count).map(|_| None).collect();
        let missing: Vec<usize> = (0..count).filter(|&i| seals[i].is_none()).collect();
        let files: Vec<(u64, PathBuf)> = missing.iter().map(|&i| self.files[i].clone()).collect();
        let until = |k: usize| (self.until)(missing[k]);
        for (&index, result) in missing
            .iter()
            .zip(scan_in_parallel(storage, &files, &until, self.group))
        {
            scans[index] = Some(result);
        }
        let sealed = seals.iter().map(Option::is_some).collect();
        if verify == Verify::Everything {
            // Every seal boot would take is compared with what its file holds: one that says
            // other sizes (written wrong, or rotten: boot checks only its fixed fields and the
            // file's two ends) is removed.
            for (index, scan) in scans.iter().enumerate().take(self.sealed_through) {
                if self.usable_seal(storage, index).is_none() {
                    continue;
                }
                let whole = storage
                    .open_read(crate::seal::path_for(&self.files[index].1))
                    .and_then(|file| file.read_all())
                    .ok()
                    .and_then(|bytes| crate::seal::decode(&bytes).ok());
                let agrees = matches!((scan, whole), (Some(Ok(scan)), Some(seal))
                    if scan.offsets.loaded() == Some(seal.offsets.as_slice())
                        && scan.end == seal.end);
                if !agrees {
                    disagreeing.push(crate::seal::path_for(&self.files[index].1));
                }
            }
        }
        let results = seals
            .into_iter()
            .zip(scans)
            .map(|(seal, scan)| match seal {
                Some(seal) => Ok(seal),
                None => scan.unwrap_or_else(|| unreachable!("every file without a seal scanned")),
            })
            .collect();
        (results, sealed)
    }

    /// File `index`'s seal as a scan would have found it, when the seal's fixed fields say what
    /// the file must hold and the seal is exactly as long as they say; `None` otherwise (no seal,
    /// torn, stale, another file's: the file is scanned; a seal that cannot be read is no
    /// different). Three small reads of the seal: its header, its length, its last size. The
    /// sizes between are read (and the seal's checksum verified) by the first read that needs
    /// them (`crate::Wal::load_offsets`), which scans the file if they do not verify.
    fn usable_seal<R: ReadStorage>(&self, storage: &R, index: usize) -> Option<Scan> {
        let (first_op, path) = &self.files[index];
        let seal_file = storage.open_read(crate::seal::path_for(path)).ok()?;
        let seal_len = seal_file.len().ok()?;
        let mut header = [0u8; crate::seal::HEADER_BYTES];
        seal_file.read_exact_at(0, &mut header).ok()?;
        let seal = crate::seal::decode_header(&header, seal_len).ok()?;
        let entries = (self.until)(index).checked_add(1)?.checked_sub(*first_op)?;
        let file = storage.open_read(path).ok()?;
        let file_len = file.len().ok()?;
        let fits = seal.group == self.group
            && seal.key == self.keys[index]
            && seal.first_op == *first_op
            && entries > 0
            && seal.entries == entries
            && seal.end <= file_len;
        if !fits {
            return None;
        }
        let mut last_size = [0u8; 4];
        seal_file
            .read_exact_at(SealHeader::size_offset(entries - 1), &mut last_size)
            .ok()?;
        let last_size = u64::from(u32::from_le_bytes(last_size));
        if last_size < HEADER_SIZE as u64 {
            return None;
        }
        let last_offset = seal.end.checked_sub(last_size)?;
        // The file's two ends must be what the seal says: its first entry names the seal's
        // parent, its last is the seal's last checksum and ends where the seal does. Two reads
        // per file; they tell a file swapped in from another history, or a seal of another
        // file, from the file the seal describes. What lies between is verified by every read
        // that serves it (and by `Verify::Everything`).
        let header_at = |offset: u64| -> Option<(Header, Checksum)> {
            let mut bytes = [0u8; HEADER_SIZE];
            file.read_exact_at(offset, &mut bytes).ok()?;
            let header = Header::decode(&bytes).ok()?;
            Some((header, iggy_format::header::stored_checksum(&bytes)))
        };
        let (first, _) = header_at(0)?;
        let (last, last_checksum) = header_at(last_offset)?;
        let ends_match = first.op == *first_op
            && first.parent == seal.first_parent
            && first.group == self.group
            && last.op == *first_op + entries - 1
            && last.group == self.group
            && last_checksum == seal.last_checksum
            && last_offset + u64::from(last.size) == seal.end;
        ends_match.then_some(Scan {
            first_op: *first_op,
            offsets: Offsets::Sealed {
                entries,
                last: last_offset,
            },
            last_checksum: Some(seal.last_checksum),
            first_parent: Some(seal.first_parent),
            end: seal.end,
            stop: StopReason::Reached,
        })
    }
}

/// Scans `files[i]` from its start up to `until(i)` (first link unchecked), on one thread per
/// core where the storage reads in parallel; results in file order.
fn scan_in_parallel<R: ReadStorage>(
    storage: &R,
    files: &[(u64, PathBuf)],
    until: &(dyn Fn(usize) -> u64 + Sync),
    group: u128,
) -> Vec<iggy_io::Result<Scan>> {
    let scan_one = |index: usize| -> iggy_io::Result<Scan> {
        let (first_op, path) = &files[index];
        let file = storage.open_read(path)?;
        scan(
            &file,
            From {
                start: 0,
                first_op: *first_op,
                parent: None,
                until_op: Some(until(index)),
                group,
            },
        )
    };
    let threads = if storage.reads_in_parallel() {
        std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
    } else {
        1
    };
    in_parallel(files.len(), threads, scan_one)
}

/// Threads checking seals at once (each mostly waits on a small read).
const SEAL_READERS: usize = 8;

/// `work(i)` for every `i` in `0..count`, on up to `threads` threads; results in order.
fn in_parallel<T: Send>(count: usize, threads: usize, work: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let threads = threads.clamp(1, count.max(1));
    if threads == 1 {
        return (0..count).map(work).collect();
    }
    let mut results: Vec<Option<T>> = (0..count).map(|_| None).collect();
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|worker| {
                let work = &work;
                scope.spawn(move || {
                    (worker..count)
                        .step_by(threads)
                        .map(|index| (index, work(index)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for worker in workers {
            let done = worker
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            for (index, result) in done {
                results[index] = Some(result);
            }
        }
    });
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| unreachable!("every index done")))
        .collect()
}
