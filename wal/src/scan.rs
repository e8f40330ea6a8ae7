//! Reading entries back from a WAL file: every header and body checksum, the op sequence and the
//! parent link are verified; the scan stops at the first entry that does not verify and says why.
//! Reads go through a window of at least 1 MiB, so a boot replay costs one `pread` per window,
//! not two per entry.

use iggy_format::checksum::{Checksum, checksum};
use iggy_format::constants::HEADER_SIZE;
use iggy_format::{Header, HeaderError};
use iggy_io::ReadFile;

use crate::offsets::Offsets;

const WINDOW_BYTES: usize = 1 << 20;

/// Why a scan stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The requested last op was reached.
    Reached,
    /// The end of the file.
    EndOfFile,
    /// A header-sized region of zeros: never written.
    Zeros,
    /// The header does not verify.
    Header(HeaderError),
    /// The entry runs past the end of the file.
    Truncated { size: u64 },
    /// The body does not match the header's body checksum.
    Body { op: u64 },
    /// A verified header with the wrong op.
    Op { expected: u64, found: u64 },
    /// A verified header whose parent is not the previous entry's checksum.
    Parent { op: u64 },
    /// A verified header of another consensus group's entry.
    Group { op: u64, found: u128 },
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Reached => f.write_str("reached the requested op"),
            Self::EndOfFile => f.write_str("end of file"),
            Self::Zeros => f.write_str("zeros (never written)"),
            Self::Header(error) => write!(f, "bad header: {error}"),
            Self::Truncated { size } => {
                write!(f, "entry of {size} bytes runs past the end of file")
            }
            Self::Body { op } => write!(f, "body checksum mismatch in op {op}"),
            Self::Op { expected, found } => write!(f, "op {found} where {expected} was expected"),
            Self::Parent { op } => write!(f, "op {op} does not link to the previous entry"),
            Self::Group { op, found } => write!(f, "op {op} belongs to group {found:#x}"),
        }
    }
}

/// The result of a scan: the verified entries, where they end, and why the scan stopped there.
/// Entry `i` is op `first_op + i`; only its offset is kept (8 bytes per entry: a boot keeps
/// millions of them).
#[derive(Clone, Debug)]
pub(crate) struct Scan {
    pub first_op: u64,
    pub offsets: Offsets,
    /// The header checksum of the last verified entry (the next entry's parent).
    pub last_checksum: Option<Checksum>,
    /// The `parent` of the first verified entry (to check the link when it was not given).
    pub first_parent: Option<Checksum>,
    pub end: u64,
    pub stop: StopReason,
}

/// A read window over a file.
struct Window<'f, F> {
    file: &'f F,
    len: u64,
    start: u64,
    bytes: Vec<u8>,
    /// The whole file, where the storage can map it (no copy out of the page cache).
    map: Option<iggy_io::Mapping>,
}

impl<'f, F: ReadFile> Window<'f, F> {
    /// `len` bytes at `offset` (the caller checked they are inside the file).
    fn get(&mut self, offset: u64, len: usize) -> iggy_io::Result<&[u8]> {
        if let Some(map) = &self.map {
            // Inside `self.len`, which is no more than what was mapped.
            let from = usize::try_from(offset).unwrap_or(usize::MAX);
            return Ok(&map[from..from + len]);
        }
        let end = offset + len as u64;
        let inside = offset >= self.start && end <= self.start + self.bytes.len() as u64;
        if !inside {
            let want = len.max(WINDOW_BYTES) as u64;
            let available = self.len.saturating_sub(offset).min(want);
            self.bytes
                .resize(usize::try_from(available).unwrap_or(usize::MAX), 0);
            self.file.read_exact_at(offset, &mut self.bytes)?;
            self.start = offset;
        }
        let from = usize::try_from(offset - self.start).unwrap_or(usize::MAX);
        Ok(&self.bytes[from..from + len])
    }
}

/// Where a scan starts, what it expects there, and how far it goes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct From {
    /// The byte offset of the first entry.
    pub start: u64,
    /// Its op.
    pub first_op: u64,
    /// Its parent (not checked when `None`: the first retained entry after a dropped prefix).
    pub parent: Option<Checksum>,
    /// The last op to verify (as far as entries verify when `None`).
    pub until_op: Option<u64>,
    /// The consensus group every entry must belong to.
    pub group: u128,
}

/// Scans `file` as `from` says.
pub(crate) fn scan<F: ReadFile>(file: &F, from: From) -> iggy_io::Result<Scan> {
    let From {
        start,
        first_op,
        parent,
        until_op,
        group,
    } = from;
    let map = file.map()?;
    // The scan stays inside what was mapped, even if the file grew since.
    let len = map.as_ref().map_or(file.len()?, |map| map.len() as u64);
    let mut window = Window {
        file,
        len,
        start: 0,
        bytes: Vec::new(),
        map,
    };
    let mut offsets = Vec::new();
    let mut last_checksum = None;
    let mut first_parent = None;
    let mut offset = start;
    let mut expected_op = first_op;
    let mut expected_parent = parent;
    let stop = loop {
        if until_op.is_some_and(|until| expected_op > until) {
            break StopReason::Reached;
        }
        if offset + HEADER_SIZE as u64 > len {
            break StopReason::EndOfFile;
        }
        let bytes = window.get(offset, HEADER_SIZE)?;
        let header = match Header::decode(bytes) {
            Ok(header) => header,
            // Zeros only matter when the header does not verify: test them after, not before.
            Err(_) if is_zero(bytes) => break StopReason::Zeros,
            Err(error) => break StopReason::Header(error),
        };
        // Verified by decode: this is the entry's identity and the next entry's parent.
        let stored =
            iggy_format::header::stored_checksum(bytes.try_into().unwrap_or(&[0u8; HEADER_SIZE]));
        // `u64::MAX` is never an op (it has no successor); boot also uses it for "unknown".
        if header.op != expected_op || header.op == u64::MAX {
            break StopReason::Op {
                expected: expected_op,
                found: header.op,
            };
        }
        if expected_parent.is_some_and(|parent| parent != header.parent) {
            break StopReason::Parent { op: header.op };
        }
        if header.group != group {
            break StopReason::Group {
                op: header.op,
                found: header.group,
            };
        }
        let size = u64::from(header.size);
        if offset + size > len {
            break StopReason::Truncated { size };
        }
        let body_len = usize::try_from(size).unwrap_or(usize::MAX) - HEADER_SIZE;
        let body = window.get(offset + HEADER_SIZE as u64, body_len)?;
        if checksum(body) != header.checksum_body {
            break StopReason::Body { op: header.op };
        }
        first_parent = first_parent.or(Some(header.parent));
        offsets.push(offset);
        last_checksum = Some(stored);
        offset += size;
        expected_op += 1;
        expected_parent = Some(stored);
    };
    Ok(Scan {
        first_op,
        offsets: Offsets::Loaded(offsets),
        last_checksum,
        first_parent,
        end: offset,
        stop,
    })
}

/// Whether every byte is zero (an OR-reduction the compiler vectorizes; no early exit).
pub(crate) fn is_zero(bytes: &[u8]) -> bool {
    bytes.iter().fold(0u8, |acc, &b| acc | b) == 0
}
