//! The sparse index of one segment: `{start_offset:020}.index` beside `{start_offset:020}.log`.
//!
//! Invariants:
//! - the index is derived data: written without a sync; a missing, torn, rotten or disagreeing
//!   index file is rewritten, never trusted over the log;
//! - entries are in log order; an entry is taken for the segment's first batch and then for the
//!   first batch at least `interval_bytes` past the previous entry's position;
//! - an entry names a batch by its first message offset, its base timestamp, the byte position
//!   of its WAL entry in the `.log` file, and its WAL op;
//! - since version 2 it also carries the segment's summary (next offset, counts, timestamps,
//!   the last consumer offset store of each consumer, and the checksum of the segment's last
//!   WAL entry): boot takes a sealed segment from it without reading the segment, when the
//!   WAL took that file from its seal and the checksums agree (`docs/format.md`, "Segment
//!   index");
//! - since version 3 the summary also carries the newest client session of each client in the
//!   segment ([`crate::sessions`]); a version 2 file has no sessions, so boot reads its segment
//!   and rewrites the file;
//! - since version 4 each session also carries its request's checksum (so a replay under the
//!   same number with another body is told apart after a restart); a version 3 file is read
//!   like a version 2 one.
//!
//! Layout (little-endian; see `docs/format.md`, "Segment index"):
//!
//! ```text
//!   0 checksum u128 (XXH3-128 of bytes [16, end)) | 16 magic "IGGYINDX" u64 | 24 version u16
//!  26 zero 6 B | 32 start_offset u64 | 40 interval_bytes u64 | 48 count u64 | 56 stores u64
//!  64 next_offset | 72 entries | 80 batches | 88 bytes | 96 min_timestamp | 104 max_timestamp
//! 112 first_op | 120 sessions u64 | 128 last_checksum u128 | 144 zero 16 B
//! 160 entries: count x [offset u64 | timestamp u64 | position u64 | op u64]
//!     stores: stores x [op u64 | offset u64 | id u32 | kind u8 | zero 11 B]
//!     sessions: sessions x [client u128 | request u64 | op u64 | base_offset u64
//!                           | message_count u32 | operation u32 | request_checksum u128]
//! ```
//!
//! Version 3 (read, never written): sessions of 48 bytes, without the request checksum.
//! Version 2: the same with zero at 120 and no sessions. Version 1:
//! the 64-byte header up to `count`, zero at 56, then the entries. None is taken as a
//! summary: boot reads the segment and rewrites the file.

use iggy_format::checksum::Checksum;
use iggy_format::{checksum, le};

use crate::entry::OffsetEntry;
use crate::offsets::ConsumerKind;
use crate::report::SegmentInfo;
use crate::sessions::Session;

pub const MAGIC: u64 = u64::from_le_bytes(*b"IGGYINDX");
pub const VERSION: u16 = 4;
pub const HEADER_SIZE: usize = 160;
pub const ENTRY_SIZE: usize = 32;
pub const STORE_SIZE: usize = 32;
pub const SESSION_SIZE: usize = 64;
/// A version 3 file's session (no request checksum).
pub const V3_SESSION_SIZE: usize = 48;
pub const EXTENSION: &str = "index";

/// A version 1 file's header (no summary, no stores).
pub const V1_HEADER_SIZE: usize = 64;
const CHECKSUMMED_OFFSET: usize = 16;
const MAGIC_OFFSET: usize = 16;
const VERSION_OFFSET: usize = 24;
const START_OFFSET_OFFSET: usize = 32;
const INTERVAL_OFFSET: usize = 40;
const COUNT_OFFSET: usize = 48;
const STORES_OFFSET: usize = 56;
const SUMMARY_OFFSET: usize = 64;
const SESSIONS_OFFSET: usize = 120;
const LAST_CHECKSUM_OFFSET: usize = 128;
const V1_ZERO_RANGES: [(usize, usize); 2] = [(VERSION_OFFSET + 2, START_OFFSET_OFFSET), (56, 64)];
const V2_ZERO_RANGES: [(usize, usize); 3] = [
    (VERSION_OFFSET + 2, START_OFFSET_OFFSET),
    (SESSIONS_OFFSET, LAST_CHECKSUM_OFFSET),
    (LAST_CHECKSUM_OFFSET + 16, HEADER_SIZE),
];
const ZERO_RANGES: [(usize, usize); 2] = [
    (VERSION_OFFSET + 2, START_OFFSET_OFFSET),
    (LAST_CHECKSUM_OFFSET + 16, HEADER_SIZE),
];

const _: () = assert!(LAST_CHECKSUM_OFFSET + 16 + 16 == HEADER_SIZE);

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

/// What a segment holds, as its appender or boot's scan derived it (version 2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    pub next_offset: u64,
    /// WAL entries of every kind.
    pub entries: u64,
    pub batches: u64,
    /// Where its last entry ends.
    pub bytes: u64,
    pub min_timestamp: u64,
    pub max_timestamp: u64,
    pub first_op: u64,
    /// The header checksum of its last WAL entry: the summary describes the entries this
    /// checksum commits to (each header names its parent), and no others.
    pub last_checksum: Checksum,
    /// The last consumer offset store of each consumer in the segment, by (kind, id).
    pub stores: Vec<OffsetEntry>,
    /// The newest session of each client in the segment, by client.
    pub sessions: Vec<Session>,
}

/// A decoded index file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexFile {
    pub version: u16,
    pub start_offset: u64,
    pub interval_bytes: u64,
    pub entries: Vec<IndexEntry>,
    /// `None` in a version 1 or 2 file (version 2's summary lacks the sessions, so it is not
    /// one boot may take).
    pub summary: Option<Summary>,
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
    #[error("{bytes} bytes after the index entries where {stores} stores need {expected}")]
    Stores {
        stores: u64,
        bytes: usize,
        expected: usize,
    },
    #[error("a consumer offset store of unknown kind {code}")]
    StoreKind { code: u8 },
    #[error("{bytes} bytes after the stores where {sessions} sessions need {expected}")]
    Sessions {
        sessions: u64,
        bytes: usize,
        expected: usize,
    },
    #[error("a session of client 0 at op {op}")]
    SessionClient { op: u64 },
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

/// The summary of `segment` (a segment without entries names checksum 0).
#[must_use]
pub fn summary_of(segment: &SegmentInfo) -> Summary {
    Summary {
        next_offset: segment.next_offset,
        entries: segment.entries,
        batches: segment.batches,
        bytes: segment.bytes,
        min_timestamp: segment.min_timestamp,
        max_timestamp: segment.max_timestamp,
        first_op: segment.first_op,
        last_checksum: segment.last_checksum.unwrap_or(0),
        stores: segment.stores.clone(),
        sessions: segment.sessions.clone(),
    }
}

/// The length of an index file of `entries` entries, `stores` stores and `sessions` sessions.
#[must_use]
pub fn encoded_len(entries: usize, stores: usize, sessions: usize) -> usize {
    HEADER_SIZE + entries * ENTRY_SIZE + stores * STORE_SIZE + sessions * SESSION_SIZE
}

/// Encodes a segment's index and summary (version 4).
#[must_use]
pub fn encode(
    start_offset: u64,
    interval_bytes: u64,
    entries: &[IndexEntry],
    summary: &Summary,
) -> Vec<u8> {
    let stores_at = HEADER_SIZE + entries.len() * ENTRY_SIZE;
    let sessions_at = stores_at + summary.stores.len() * STORE_SIZE;
    let mut bytes = vec![0u8; sessions_at + summary.sessions.len() * SESSION_SIZE];
    le::put_u64(&mut bytes, MAGIC_OFFSET, MAGIC);
    le::put_u16(&mut bytes, VERSION_OFFSET, VERSION);
    le::put_u64(&mut bytes, START_OFFSET_OFFSET, start_offset);
    le::put_u64(&mut bytes, INTERVAL_OFFSET, interval_bytes);
    le::put_u64(&mut bytes, COUNT_OFFSET, entries.len() as u64);
    le::put_u64(&mut bytes, STORES_OFFSET, summary.stores.len() as u64);
    le::put_u64(&mut bytes, SESSIONS_OFFSET, summary.sessions.len() as u64);
    let fields = [
        summary.next_offset,
        summary.entries,
        summary.batches,
        summary.bytes,
        summary.min_timestamp,
        summary.max_timestamp,
        summary.first_op,
    ];
    for (i, value) in fields.iter().enumerate() {
        le::put_u64(&mut bytes, SUMMARY_OFFSET + 8 * i, *value);
    }
    le::put_u128(&mut bytes, LAST_CHECKSUM_OFFSET, summary.last_checksum);
    for (i, entry) in entries.iter().enumerate() {
        let at = HEADER_SIZE + i * ENTRY_SIZE;
        le::put_u64(&mut bytes, at, entry.offset);
        le::put_u64(&mut bytes, at + 8, entry.timestamp);
        le::put_u64(&mut bytes, at + 16, entry.position);
        le::put_u64(&mut bytes, at + 24, entry.op);
    }
    for (i, store) in summary.stores.iter().enumerate() {
        let at = stores_at + i * STORE_SIZE;
        le::put_u64(&mut bytes, at, store.op);
        le::put_u64(&mut bytes, at + 8, store.offset);
        le::put_u32(&mut bytes, at + 16, store.id);
        bytes[at + 20] = store.kind.code();
    }
    for (i, session) in summary.sessions.iter().enumerate() {
        let at = sessions_at + i * SESSION_SIZE;
        le::put_u128(&mut bytes, at, session.client);
        le::put_u64(&mut bytes, at + 16, session.request);
        le::put_u64(&mut bytes, at + 24, session.op);
        le::put_u64(&mut bytes, at + 32, session.base_offset);
        le::put_u32(&mut bytes, at + 40, session.message_count);
        le::put_u32(&mut bytes, at + 44, session.operation);
        le::put_u128(&mut bytes, at + 48, session.request_checksum);
    }
    let sum = checksum::checksum(&bytes[CHECKSUMMED_OFFSET..]);
    le::put_u128(&mut bytes, 0, sum);
    bytes
}

/// Decodes a segment's index file (version 1 to 4), checking it belongs to the segment at
/// `start_offset`. Allocates no more than the bytes present justify.
pub fn decode(bytes: &[u8], start_offset: u64) -> Result<IndexFile, IndexError> {
    let len = bytes.len();
    if len < V1_HEADER_SIZE {
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
    let (header, zero_ranges, stores, sessions): (usize, &[(usize, usize)], u64, u64) =
        match version {
            1 => (V1_HEADER_SIZE, &V1_ZERO_RANGES, 0, 0),
            2..=VERSION if len < HEADER_SIZE => return Err(IndexError::Length { len }),
            2 => (HEADER_SIZE, &V2_ZERO_RANGES, u64_at(STORES_OFFSET), 0),
            3 | VERSION => (
                HEADER_SIZE,
                &ZERO_RANGES,
                u64_at(STORES_OFFSET),
                u64_at(SESSIONS_OFFSET),
            ),
            _ => return Err(IndexError::UnknownVersion { version }),
        };
    if let Some(offset) = le::first_nonzero_in(bytes, zero_ranges) {
        return Err(IndexError::NonZero { offset });
    }
    let found = u64_at(START_OFFSET_OFFSET);
    if found != start_offset {
        return Err(IndexError::Segment {
            expected: start_offset,
            found,
        });
    }
    let count = u64_at(COUNT_OFFSET);
    let body = len - header;
    // The counts must account for every byte: `count` entries, then `stores` stores.
    let entries_fit = usize::try_from(count)
        .ok()
        .and_then(|count| count.checked_mul(ENTRY_SIZE))
        .filter(|bytes| *bytes <= body);
    let Some(entries_bytes) = entries_fit else {
        return Err(IndexError::Count {
            count,
            entries: body / ENTRY_SIZE,
        });
    };
    let stores_expected = usize::try_from(stores)
        .unwrap_or(usize::MAX)
        .saturating_mul(STORE_SIZE);
    let session_size = if version == 3 {
        V3_SESSION_SIZE
    } else {
        SESSION_SIZE
    };
    let sessions_expected = usize::try_from(sessions)
        .unwrap_or(usize::MAX)
        .saturating_mul(session_size);
    let after_entries = body - entries_bytes;
    // The stores, then the sessions, account for every byte after the entries.
    let stores_bytes = after_entries.saturating_sub(sessions_expected);
    if after_entries < sessions_expected && version >= 3 {
        return Err(IndexError::Sessions {
            sessions,
            bytes: after_entries,
            expected: sessions_expected,
        });
    }
    if stores_bytes != stores_expected {
        return Err(if version == 1 {
            IndexError::Length { len }
        } else {
            IndexError::Stores {
                stores,
                bytes: stores_bytes,
                expected: stores_expected,
            }
        });
    }
    let entries = (0..entries_bytes / ENTRY_SIZE)
        .map(|i| {
            let at = header + i * ENTRY_SIZE;
            IndexEntry {
                offset: u64_at(at),
                timestamp: u64_at(at + 8),
                position: u64_at(at + 16),
                op: u64_at(at + 24),
            }
        })
        .collect();
    let summary = if version < VERSION {
        None
    } else {
        let stores_at = header + entries_bytes;
        let mut decoded = Vec::with_capacity(stores_bytes / STORE_SIZE);
        for i in 0..stores_bytes / STORE_SIZE {
            let at = stores_at + i * STORE_SIZE;
            let code = bytes[at + 20];
            let kind = ConsumerKind::from_code(code).ok_or(IndexError::StoreKind { code })?;
            if let Some(offset) = le::first_nonzero_in(bytes, &[(at + 21, at + STORE_SIZE)]) {
                return Err(IndexError::NonZero { offset });
            }
            decoded.push(OffsetEntry {
                op: u64_at(at),
                offset: u64_at(at + 8),
                id: le::u32_at(bytes, at + 16).unwrap_or_default(),
                kind,
            });
        }
        let sessions_at = stores_at + stores_bytes;
        let mut decoded_sessions = Vec::with_capacity(sessions_expected / SESSION_SIZE);
        for i in 0..sessions_expected / SESSION_SIZE {
            let at = sessions_at + i * SESSION_SIZE;
            let session = Session {
                client: le::u128_at(bytes, at).unwrap_or_default(),
                request: u64_at(at + 16),
                op: u64_at(at + 24),
                base_offset: u64_at(at + 32),
                message_count: le::u32_at(bytes, at + 40).unwrap_or_default(),
                operation: le::u32_at(bytes, at + 44).unwrap_or_default(),
                request_checksum: le::u128_at(bytes, at + 48).unwrap_or_default(),
            };
            if session.client == 0 {
                return Err(IndexError::SessionClient { op: session.op });
            }
            decoded_sessions.push(session);
        }
        let field = |i: usize| u64_at(SUMMARY_OFFSET + 8 * i);
        Some(Summary {
            next_offset: field(0),
            entries: field(1),
            batches: field(2),
            bytes: field(3),
            min_timestamp: field(4),
            max_timestamp: field(5),
            first_op: field(6),
            last_checksum: le::u128_at(bytes, LAST_CHECKSUM_OFFSET).unwrap_or_default(),
            stores: decoded,
            sessions: decoded_sessions,
        })
    };
    Ok(IndexFile {
        version,
        start_offset,
        interval_bytes: u64_at(INTERVAL_OFFSET),
        entries,
        summary,
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

    fn summary() -> Summary {
        Summary {
            next_offset: 150,
            entries: 7,
            batches: 5,
            bytes: 20_480,
            min_timestamp: 5_000,
            max_timestamp: 5_004,
            first_op: 7,
            last_checksum: 0x1234_5678_9abc_def0_0fed_cba9_8765_4321,
            stores: vec![
                OffsetEntry {
                    op: 9,
                    kind: ConsumerKind::Consumer,
                    id: 3,
                    offset: 120,
                },
                OffsetEntry {
                    op: 12,
                    kind: ConsumerKind::Group,
                    id: 1,
                    offset: 140,
                },
            ],
            sessions: vec![
                Session {
                    client: 0xC1,
                    request: 4,
                    op: 8,
                    operation: iggy_format::operation::MESSAGES,
                    base_offset: 110,
                    message_count: 10,
                    request_checksum: 0x5e55_1011,
                },
                Session {
                    client: 0xC2,
                    request: 9,
                    op: 12,
                    operation: iggy_format::operation::CONSUMER_OFFSET,
                    base_offset: 0,
                    message_count: 0,
                    request_checksum: 0x5e55_1012,
                },
            ],
        }
    }

    #[test]
    fn round_trip_and_every_bit_flip_is_detected() {
        let bytes = encode(100, 4096, &sample(), &summary());
        let decoded = decode(&bytes, 100).unwrap();
        assert_eq!(decoded.entries, sample());
        assert_eq!(decoded.interval_bytes, 4096);
        assert_eq!(decoded.summary, Some(summary()));
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
        for cut in [1, ENTRY_SIZE, STORE_SIZE + 1, SESSION_SIZE] {
            assert!(
                decode(&bytes[..bytes.len() - cut], 100).is_err(),
                "cut {cut}"
            );
        }
        assert_eq!(parse_file_name(&file_name(100)), Some(100));
        assert_eq!(parse_file_name("00000000000000000100.log"), None);
    }

    /// A version 1 file (what nodes wrote before summaries) still decodes, without one.
    #[test]
    fn a_version_1_file_decodes_without_a_summary() {
        let entries = sample();
        let mut bytes = vec![0u8; V1_HEADER_SIZE + entries.len() * ENTRY_SIZE];
        le::put_u64(&mut bytes, MAGIC_OFFSET, MAGIC);
        le::put_u16(&mut bytes, VERSION_OFFSET, 1);
        le::put_u64(&mut bytes, START_OFFSET_OFFSET, 100);
        le::put_u64(&mut bytes, INTERVAL_OFFSET, 4096);
        le::put_u64(&mut bytes, COUNT_OFFSET, entries.len() as u64);
        for (i, entry) in entries.iter().enumerate() {
            let at = V1_HEADER_SIZE + i * ENTRY_SIZE;
            le::put_u64(&mut bytes, at, entry.offset);
            le::put_u64(&mut bytes, at + 8, entry.timestamp);
            le::put_u64(&mut bytes, at + 16, entry.position);
            le::put_u64(&mut bytes, at + 24, entry.op);
        }
        let sum = checksum::checksum(&bytes[CHECKSUMMED_OFFSET..]);
        le::put_u128(&mut bytes, 0, sum);
        let decoded = decode(&bytes, 100).unwrap();
        assert_eq!(decoded.entries, entries);
        assert_eq!(decoded.summary, None);
    }

    /// A version 2 file (a summary without sessions) decodes, but is no summary boot may take.
    #[test]
    fn a_version_2_file_decodes_without_a_summary() {
        let without = Summary {
            sessions: Vec::new(),
            ..summary()
        };
        let mut bytes = encode(100, 4096, &sample(), &without);
        le::put_u16(&mut bytes, VERSION_OFFSET, 2);
        let sum = checksum::checksum(&bytes[CHECKSUMMED_OFFSET..]);
        le::put_u128(&mut bytes, 0, sum);
        let decoded = decode(&bytes, 100).unwrap();
        assert_eq!((decoded.version, decoded.entries), (2, sample()));
        assert_eq!(decoded.summary, None);
    }

    /// A version 3 file (sessions without their request checksums) decodes, but is no summary
    /// boot may take: its sessions could not tell a replay from a reused number.
    #[test]
    fn a_version_3_file_decodes_without_a_summary() {
        let full = summary();
        let stores_at = HEADER_SIZE + sample().len() * ENTRY_SIZE;
        let sessions_at = stores_at + full.stores.len() * STORE_SIZE;
        let v4 = encode(100, 4096, &sample(), &full);
        let mut bytes = v4[..sessions_at].to_vec();
        for i in 0..full.sessions.len() {
            let at = sessions_at + i * SESSION_SIZE;
            bytes.extend_from_slice(&v4[at..at + V3_SESSION_SIZE]);
        }
        le::put_u16(&mut bytes, VERSION_OFFSET, 3);
        let sum = checksum::checksum(&bytes[CHECKSUMMED_OFFSET..]);
        le::put_u128(&mut bytes, 0, sum);
        let decoded = decode(&bytes, 100).unwrap();
        assert_eq!((decoded.version, decoded.entries), (3, sample()));
        assert_eq!(decoded.summary, None);
        // One byte short of its sessions: refused, as a version 4 file would be.
        let mut short = bytes[..bytes.len() - 1].to_vec();
        let sum = checksum::checksum(&short[CHECKSUMMED_OFFSET..]);
        le::put_u128(&mut short, 0, sum);
        assert!(decode(&short, 100).is_err());
    }
}
