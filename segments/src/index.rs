//! The sparse index of one segment: `{start_offset:020}.index` beside `{start_offset:020}.log`.
//!
//! Invariants:
//! - the index is derived data: boot rebuilds it from the `.log` and compares; a missing, torn,
//!   rotten or disagreeing index file is rewritten, never trusted over the log;
//! - entries are in log order; an entry is taken for the segment's first batch and then for the
//!   first batch at least `interval_bytes` past the previous entry's position;
//! - an entry names a batch by its first message offset, its base timestamp, the byte position
//!   of its WAL entry in the `.log` file, and its WAL op.
//!
//! Layout (little-endian; see `docs/format.md`, "Segment index"):
//!
//! ```text
//!   0 checksum u128 (XXH3-128 of bytes [16, end)) | 16 magic "IGGYINDX" u64 | 24 version u16
//!  26 zero 6 B | 32 start_offset u64 | 40 interval_bytes u64 | 48 count u64 | 56 zero 8 B
//!  64 entries: count x [offset u64 | timestamp u64 | position u64 | op u64]
//! ```

use iggy_format::{checksum, le};

pub const MAGIC: u64 = u64::from_le_bytes(*b"IGGYINDX");
pub const VERSION: u16 = 1;
pub const HEADER_SIZE: usize = 64;
pub const ENTRY_SIZE: usize = 32;
pub const EXTENSION: &str = "index";

const CHECKSUMMED_OFFSET: usize = 16;
const MAGIC_OFFSET: usize = 16;
const VERSION_OFFSET: usize = 24;
const START_OFFSET_OFFSET: usize = 32;
const INTERVAL_OFFSET: usize = 40;
const COUNT_OFFSET: usize = 48;
const ZERO_RANGES: [(usize, usize); 2] = [(VERSION_OFFSET + 2, START_OFFSET_OFFSET), (56, 64)];

const _: () = assert!(COUNT_OFFSET + 8 + 8 == HEADER_SIZE);

/// One sparse index entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IndexEntry {
    /// The offset of the batch's first message.
    pub offset: u64,
    /// The batch's base timestamp (server-stamped, non-decreasing in a partition).
    pub timestamp: u64,
    /// The byte position of the batch's WAL entry in the `.log` file.
    pub position: u64,
    /// The batch's WAL op.
    pub op: u64,
}

/// A decoded index file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexFile {
    pub start_offset: u64,
    pub interval_bytes: u64,
    pub entries: Vec<IndexEntry>,
}

/// Why an index file is not used (it is rebuilt instead).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IndexError {
    #[error("{len} bytes: shorter than its header or not a whole number of entries")]
    Length { len: usize },
    #[error("checksum mismatch")]
    Checksum,
    #[error("bad magic {magic:#018x}")]
    Magic { magic: u64 },
    #[error("unknown index version {version}")]
    UnknownVersion { version: u16 },
    #[error("non-zero reserved byte at {offset}")]
    NonZero { offset: usize },
    #[error("count {count} does not match the {entries} entries present")]
    Count { count: u64, entries: usize },
    #[error("for segment {found}, not {expected}")]
    Segment { expected: u64, found: u64 },
}

/// The index file name of the segment starting at `start_offset`.
#[must_use]
pub fn file_name(start_offset: u64) -> String {
    format!("{start_offset:020}.{EXTENSION}")
}

/// The start offset named by an index file name, if it is one.
#[must_use]
pub fn parse_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(EXTENSION)?.strip_suffix('.')?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// Encodes a segment's index.
#[must_use]
pub fn encode(start_offset: u64, interval_bytes: u64, entries: &[IndexEntry]) -> Vec<u8> {
    let mut bytes = vec![0u8; HEADER_SIZE + entries.len() * ENTRY_SIZE];
    le::put_u64(&mut bytes, MAGIC_OFFSET, MAGIC);
    le::put_u16(&mut bytes, VERSION_OFFSET, VERSION);
    le::put_u64(&mut bytes, START_OFFSET_OFFSET, start_offset);
    le::put_u64(&mut bytes, INTERVAL_OFFSET, interval_bytes);
    le::put_u64(&mut bytes, COUNT_OFFSET, entries.len() as u64);
    for (i, entry) in entries.iter().enumerate() {
        let at = HEADER_SIZE + i * ENTRY_SIZE;
        le::put_u64(&mut bytes, at, entry.offset);
        le::put_u64(&mut bytes, at + 8, entry.timestamp);
        le::put_u64(&mut bytes, at + 16, entry.position);
        le::put_u64(&mut bytes, at + 24, entry.op);
    }
    let sum = checksum::checksum(&bytes[CHECKSUMMED_OFFSET..]);
    le::put_u128(&mut bytes, 0, sum);
    bytes
}

/// Decodes a segment's index file, checking it belongs to the segment at `start_offset`.
/// Allocates no more than the bytes present justify.
pub fn decode(bytes: &[u8], start_offset: u64) -> Result<IndexFile, IndexError> {
    let len = bytes.len();
    if len < HEADER_SIZE || !(len - HEADER_SIZE).is_multiple_of(ENTRY_SIZE) {
        return Err(IndexError::Length { len });
    }
    let u64_at = |offset| le::u64_at(bytes, offset).unwrap_or_default();
    if le::u128_at(bytes, 0).unwrap_or_default() != checksum::checksum(&bytes[CHECKSUMMED_OFFSET..])
    {
        return Err(IndexError::Checksum);
    }
    let magic = u64_at(MAGIC_OFFSET);
    if magic != MAGIC {
        return Err(IndexError::Magic { magic });
    }
    let version = le::u16_at(bytes, VERSION_OFFSET).unwrap_or_default();
    if version != VERSION {
        return Err(IndexError::UnknownVersion { version });
    }
    if let Some(offset) = le::first_nonzero_in(bytes, &ZERO_RANGES) {
        return Err(IndexError::NonZero { offset });
    }
    let found = u64_at(START_OFFSET_OFFSET);
    if found != start_offset {
        return Err(IndexError::Segment {
            expected: start_offset,
            found,
        });
    }
    let entries = (len - HEADER_SIZE) / ENTRY_SIZE;
    let count = u64_at(COUNT_OFFSET);
    if count != entries as u64 {
        return Err(IndexError::Count { count, entries });
    }
    let entries = (0..entries)
        .map(|i| {
            let at = HEADER_SIZE + i * ENTRY_SIZE;
            IndexEntry {
                offset: u64_at(at),
                timestamp: u64_at(at + 8),
                position: u64_at(at + 16),
                op: u64_at(at + 24),
            }
        })
        .collect();
    Ok(IndexFile {
        start_offset,
        interval_bytes: u64_at(INTERVAL_OFFSET),
        entries,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<IndexEntry> {
        (0..5u64)
            .map(|i| IndexEntry {
                offset: 100 + i * 10,
                timestamp: 5_000 + i,
                position: i * 4096,
                op: 7 + i,
            })
            .collect()
    }

    #[test]
    fn round_trip_and_every_bit_flip_is_detected() {
        let bytes = encode(100, 4096, &sample());
        let decoded = decode(&bytes, 100).unwrap();
        assert_eq!(decoded.entries, sample());
        assert_eq!(decoded.interval_bytes, 4096);
        assert_eq!(
            decode(&bytes, 99),
            Err(IndexError::Segment {
                expected: 99,
                found: 100
            })
        );
        for bit in 0..bytes.len() * 8 {
            let mut damaged = bytes.clone();
            damaged[bit / 8] ^= 1 << (bit % 8);
            assert!(decode(&damaged, 100).is_err(), "bit {bit}");
        }
        assert!(decode(&bytes[..bytes.len() - 1], 100).is_err());
        assert_eq!(parse_file_name(&file_name(100)), Some(100));
        assert_eq!(parse_file_name("00000000000000000100.log"), None);
    }
}
