//! Where a retained file's entries start: in memory, or still in the file's seal.
//!
//! Boot takes a file before the head file from its seal by the seal's fixed fields and the
//! file's two ends (`crate::retained`), without reading the seal's sizes (4 bytes per entry).
//! They are read, with the seal's checksum, by the first read that needs an offset in the
//! file ([`crate::Wal::load_offsets`]); and a sealed file's offsets are let go again when more
//! than [`crate::Config::sealed_offsets_in_memory`] sealed files hold theirs in memory, so a
//! log's memory does not grow with what it retains (8 bytes per entry otherwise: 100 GB of
//! 1 KB entries would hold 800 MB).

use std::sync::Arc;

use iggy_format::checksum::Checksum;
use iggy_io::{ReadFile, Storage};

use crate::scan::{From, StopReason, scan};
use crate::seal;
use crate::{LogFile, State, Wal, WalError};

/// The default of [`crate::Config::sealed_offsets_in_memory`]: 16 files of 64 MiB, the last
/// GiB read or written.
pub(crate) const SEALED_IN_MEMORY: usize = 16;

/// A file's entry offsets: op `first_op + i` at offset `i`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Offsets {
    /// In memory.
    Loaded(Vec<u64>),
    /// In the file's seal: `entries` entries, the last one at `last`, as boot checked against
    /// the file itself. (The last entry's header checksum is the next file's `first_parent`.)
    Sealed { entries: u64, last: u64 },
}

impl Default for Offsets {
    fn default() -> Self {
        Self::Loaded(Vec::new())
    }
}

impl Offsets {
    /// The number of entries.
    pub(crate) fn len(&self) -> u64 {
        match self {
            Self::Loaded(offsets) => offsets.len() as u64,
            Self::Sealed { entries, .. } => *entries,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The last entry's offset.
    pub(crate) fn last(&self) -> Option<u64> {
        match self {
            Self::Loaded(offsets) => offsets.last().copied(),
            Self::Sealed { last, .. } => Some(*last),
        }
    }

    /// The offsets, when in memory.
    pub(crate) fn loaded(&self) -> Option<&[u64]> {
        match self {
            Self::Loaded(offsets) => Some(offsets),
            Self::Sealed { .. } => None,
        }
    }

    /// The offsets to change, when in memory. A file is changed only once loaded: boot scans
    /// the head file and every file after it, and a cut loads the file it cuts into first.
    pub(crate) fn loaded_mut(&mut self) -> &mut Vec<u64> {
        match self {
            Self::Loaded(offsets) => offsets,
            Self::Sealed { .. } => {
                unreachable!("a sealed file's offsets are loaded before a change")
            }
        }
    }

    /// Entry `index`'s offset and end (`end` is the file's), when in memory.
    pub(crate) fn span(&self, index: u64, end: u64) -> Option<(u64, u64)> {
        let offsets = self.loaded()?;
        let index = usize::try_from(index).ok()?;
        let offset = *offsets.get(index)?;
        Some((offset, offsets.get(index + 1).copied().unwrap_or(end)))
    }
}

impl<S: Storage> Wal<S> {
    /// The file at `index` (of the state's files) holding `op`, with the entry's offset and end;
    /// the file's offsets are loaded first if they are in its seal.
    pub(crate) fn span_of(
        &self,
        state: &mut State<S::File>,
        index: usize,
        op: u64,
    ) -> Result<(Arc<S::File>, u64, u64), WalError> {
        self.load_offsets(state, index)?;
        let file = &state.files[index];
        let span = op
            .checked_sub(file.first_op)
            .and_then(|position| file.offsets.span(position, file.end))
            .ok_or_else(|| WalError::OutOfRange {
                what: "an entry's place",
                op,
                first_op: file.first_op,
                head_op: file.first_op + file.offsets.len().saturating_sub(1),
            });
        let file = Arc::clone(&file.file);
        // After the span is taken: the file just loaded may be the one that goes.
        self.let_go_of_offsets(state);
        let (offset, end) = span?;
        Ok((file, offset, end))
    }

    /// Brings the offsets of the file at `index` into memory if they are in its seal: the seal
    /// read whole and its checksum verified, and it must say what boot checked (entry count,
    /// end, the last entry's place). When it does not, the file itself is scanned and must hold
    /// exactly that, its last entry naming what the next file's first names as its parent; the
    /// seal is then written again from the scan (derived data). A file that fails both is
    /// refused with the place its scan stopped.
    pub(crate) fn load_offsets(
        &self,
        state: &mut State<S::File>,
        index: usize,
    ) -> Result<(), WalError> {
        let file = &state.files[index];
        let Offsets::Sealed { entries, last } = file.offsets else {
            return Ok(());
        };
        // A sealed file is never the last: its last entry is what the next file's first names.
        let last_checksum = state
            .files
            .get(index + 1)
            .map(|next| next.first_parent)
            .unwrap_or_else(|| unreachable!("a sealed file has a file after it"));
        let from_seal = self.seal_offsets(file, entries, last, last_checksum);
        let (offsets, in_seal) = match from_seal {
            Ok(offsets) => (offsets, true),
            Err(reason) => {
                tracing::warn!(
                    file = %file.path.display(),
                    %reason,
                    "the WAL file's seal does not verify: reading the file instead"
                );
                let offsets = self.scan_offsets(file, entries, last, last_checksum)?;
                let seal = self.seal_of(file, offsets.clone(), last_checksum);
                let written = self.write_seal(&file.path, &seal);
                if let Err(error) = &written {
                    tracing::warn!(file = %file.path.display(), %error, "could not write the WAL file's seal again");
                }
                (offsets, written.is_ok())
            }
        };
        let first_op = file.first_op;
        state.files[index].offsets = Offsets::Loaded(offsets);
        // Only offsets a seal on disk holds may go again (the others would cost a scan).
        if in_seal {
            state.loaded_sealed.push_back(first_op);
        }
        Ok(())
    }

    /// The offsets in `file`'s seal, when it verifies and says what boot took from it.
    fn seal_offsets(
        &self,
        file: &LogFile<S::File>,
        entries: u64,
        last: u64,
        last_checksum: Checksum,
    ) -> Result<Vec<u64>, String> {
        let path = seal::path_for(&file.path);
        let bytes = self
            .storage
            .open_read(&path)
            .and_then(|seal| seal.read_all())
            .map_err(|error| error.to_string())?;
        let seal = seal::decode(&bytes).map_err(|error| error.to_string())?;
        let agrees = seal.group == self.config.group
            && seal.key == file.key
            && seal.first_op == file.first_op
            && seal.offsets.len() as u64 == entries
            && seal.offsets.last() == Some(&last)
            && seal.end == file.end
            && seal.first_parent == file.first_parent
            && seal.last_checksum == last_checksum;
        if agrees {
            Ok(seal.offsets)
        } else {
            Err(format!(
                "it no longer says what boot took from it ({} entries ending at {})",
                entries, file.end
            ))
        }
    }

    /// The offsets of `file`'s `entries` entries, read and verified from the file itself.
    fn scan_offsets(
        &self,
        file: &LogFile<S::File>,
        entries: u64,
        last: u64,
        last_checksum: Checksum,
    ) -> Result<Vec<u64>, WalError> {
        let scanned = scan(
            &*file.file,
            From {
                start: 0,
                first_op: file.first_op,
                parent: Some(file.first_parent),
                until_op: Some(file.first_op + entries - 1),
                group: self.config.group,
            },
        )?;
        let holds = scanned.stop == StopReason::Reached
            && scanned.offsets.len() == entries
            && scanned.offsets.last() == Some(last)
            && scanned.end == file.end
            && scanned.last_checksum == Some(last_checksum);
        match scanned.offsets {
            Offsets::Loaded(offsets) if holds => Ok(offsets),
            _ => Err(crate::boot::corrupt(
                file.path.clone(),
                scanned.end,
                if scanned.stop == StopReason::Reached {
                    StopReason::Parent {
                        op: file.first_op + entries,
                    }
                } else {
                    scanned.stop
                },
            )),
        }
    }

    /// Lets the oldest loaded sealed files' offsets go while more than
    /// [`crate::Config::sealed_offsets_in_memory`] are in memory (their seals hold them; the
    /// head file's never go).
    pub(crate) fn let_go_of_offsets(&self, state: &mut State<S::File>) {
        while state.loaded_sealed.len() > self.config.sealed_offsets_in_memory.max(1) {
            let Some(first_op) = state.loaded_sealed.pop_front() else {
                break;
            };
            let count = state.files.len();
            if let Some(file) = state.files[..count.saturating_sub(1)]
                .iter_mut()
                .find(|f| f.first_op == first_op && f.sealed)
                && let Some(last) = file.offsets.last()
            {
                file.offsets = Offsets::Sealed {
                    entries: file.offsets.len(),
                    last,
                };
            }
        }
    }
}
