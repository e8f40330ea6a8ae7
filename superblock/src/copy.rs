//! The byte layout of one superblock copy (pure: no I/O). See `docs/format.md`, "Superblock".
//!
//! ```text
//!    0  checksum             u128  XXH3-128 of bytes [32, 4096)
//!   16  copy                 u16   slot this copy was written for: 0 = A, 1 = B (not checksummed)
//!   18  zero                 14 B  (not checksummed; must be zero)
//!   32  magic                u64   "IGGYSUPB"
//!   40  version              u16   1
//!   42  replica              u8
//!   43  replica_count        u8
//!   44  zero                 u32
//!   48  sequence             u64   1 for the first record, +1 per update
//!   56  zero                 u64
//!   64  parent               u128  checksum of the previous record (0 for sequence 1)
//!   80  cluster              u128
//!   96  view                 u32
//!  100  log_view             u32
//!  104  commit_max           u64
//!  112  checkpoint_op        u64
//!  120  offset_frontier      u64
//!  128  checkpoint_checksum  u128
//!  144  incarnation          u64
//!  152  ack_bound            u64   (version 2; zero in version 1, read as unbounded)
//!  160  zero                 3936 B (reserved for growth)
//! ```
//!
//! Invariants checked on decode (after the checksum): magic, version, zero bytes, `copy` equal to
//! the slot it was read from, `log_view <= view`, `checkpoint_op <= commit_max`, `sequence >= 1`.

use iggy_format::checksum::{Checksum, checksum};
use iggy_format::le;

/// Size of one copy: one 4 KiB sector, so a torn write of one copy cannot reach the other.
pub const COPY_SIZE: usize = 4096;
/// Number of copies.
pub const COPIES: usize = 2;
/// Size of the superblock file.
pub const FILE_SIZE: u64 = (COPY_SIZE * COPIES) as u64;
pub const MAGIC: u64 = u64::from_le_bytes(*b"IGGYSUPB");
pub const VERSION: u16 = 2;
/// The version before `ack_bound`: still read (its bound is unknown, so [`ACK_BOUND_UNKNOWN`]).
pub const VERSION_1: u16 = 1;
/// The `ack_bound` of a record written before the field existed: the replica may have
/// acknowledged any op.
pub const ACK_BOUND_UNKNOWN: u64 = u64::MAX;

pub const CHECKSUM_OFFSET: usize = 0;
pub const COPY_OFFSET: usize = 16;
pub const CHECKSUMMED_OFFSET: usize = 32;
pub const MAGIC_OFFSET: usize = 32;
pub const VERSION_OFFSET: usize = MAGIC_OFFSET + 8;
pub const REPLICA_OFFSET: usize = VERSION_OFFSET + 2;
pub const REPLICA_COUNT_OFFSET: usize = REPLICA_OFFSET + 1;
pub const SEQUENCE_OFFSET: usize = 48;
pub const PARENT_OFFSET: usize = 64;
pub const CLUSTER_OFFSET: usize = PARENT_OFFSET + 16;
pub const VIEW_OFFSET: usize = CLUSTER_OFFSET + 16;
pub const LOG_VIEW_OFFSET: usize = VIEW_OFFSET + 4;
pub const COMMIT_MAX_OFFSET: usize = LOG_VIEW_OFFSET + 4;
pub const CHECKPOINT_OP_OFFSET: usize = COMMIT_MAX_OFFSET + 8;
pub const OFFSET_FRONTIER_OFFSET: usize = CHECKPOINT_OP_OFFSET + 8;
pub const CHECKPOINT_CHECKSUM_OFFSET: usize = OFFSET_FRONTIER_OFFSET + 8;
pub const INCARNATION_OFFSET: usize = CHECKPOINT_CHECKSUM_OFFSET + 16;
pub const ACK_BOUND_OFFSET: usize = INCARNATION_OFFSET + 8;
pub const RESERVED_OFFSET: usize = ACK_BOUND_OFFSET + 8;

/// Byte ranges that must be zero: `[start, end)`.
const ZERO_RANGES: [(usize, usize); 4] = [
    (COPY_OFFSET + 2, CHECKSUMMED_OFFSET),
    (REPLICA_COUNT_OFFSET + 1, SEQUENCE_OFFSET),
    (SEQUENCE_OFFSET + 8, PARENT_OFFSET),
    (RESERVED_OFFSET, COPY_SIZE),
];

const _: () = assert!(COPY_SIZE as u64 == iggy_format::constants::SECTOR_SIZE);
const _: () = assert!(REPLICA_COUNT_OFFSET == 43);
const _: () = assert!(VIEW_OFFSET == 96);
const _: () = assert!(CHECKPOINT_CHECKSUM_OFFSET == 128);
const _: () = assert!(INCARNATION_OFFSET == 144);
const _: () = assert!(ACK_BOUND_OFFSET == 152);
const _: () = assert!(RESERVED_OFFSET == 160);
const _: () = assert!(RESERVED_OFFSET < COPY_SIZE);

/// Which copy: A at offset 0, B at offset 4096. A is always written (and synced) first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Slot {
    A,
    B,
}

impl Slot {
    pub const ALL: [Self; COPIES] = [Self::A, Self::B];

    #[must_use]
    pub fn index(self) -> u16 {
        match self {
            Self::A => 0,
            Self::B => 1,
        }
    }

    /// Byte offset of this copy in the superblock file.
    #[must_use]
    pub fn offset(self) -> u64 {
        u64::from(self.index()) * COPY_SIZE as u64
    }
}

impl std::fmt::Display for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::A => "A",
            Self::B => "B",
        })
    }
}

/// Which node and cluster a superblock belongs to. Checked on every open.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Identity {
    pub cluster: u128,
    pub replica: u8,
    pub replica_count: u8,
}

/// A consensus group's durable VSR state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct VsrState {
    /// The highest view this replica has promised to (never decreases).
    pub view: u32,
    /// The last view in which this replica's status was normal (`<= view`, never decreases).
    pub log_view: u32,
    /// The highest op known committed (never decreases).
    pub commit_max: u64,
    /// The op of the latest durable checkpoint (`<= commit_max`).
    pub checkpoint_op: u64,
    /// The checksum of the prepare at `checkpoint_op`.
    pub checkpoint_checksum: Checksum,
    /// Durable lower bound of the partition's next message offset (never decreases).
    pub offset_frontier: u64,
    /// Boot incarnation of the replica (never decreases).
    pub incarnation: u64,
    /// The highest op this replica may acknowledge (never decreases): under replicated
    /// durability a replica acknowledges what its WAL has not published yet, and after a crash
    /// this bound says how far what it forgot can reach (`docs/vsr.md`, "The acknowledgment
    /// bound"). [`ACK_BOUND_UNKNOWN`] for a record of version 1.
    pub ack_bound: u64,
}

/// One decoded, verified superblock record (the same in both copies when all is well).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Record {
    pub sequence: u64,
    pub parent: Checksum,
    pub identity: Identity,
    pub state: VsrState,
}

/// Why one copy cannot be used. `Damaged` copies are repairable from the other copy; the others
/// are refusals (a copy that verifies but is not something this build may act on).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CopyError {
    #[error("copy is damaged: {0}")]
    Damaged(Damage),
    #[error("unknown superblock version {version} (this build reads {VERSION_1} and {VERSION})")]
    UnknownVersion { version: u16 },
    #[error("invariant broken on disk: {0}")]
    InvariantBroken(&'static str),
}

/// How a copy is damaged (torn, rotten, never written, misdirected).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Damage {
    #[error("missing (file shorter than the copy)")]
    Missing,
    #[error("checksum mismatch (stored {stored:#034x}, computed {computed:#034x})")]
    Checksum {
        stored: Checksum,
        computed: Checksum,
    },
    #[error("bad magic {magic:#018x}")]
    Magic { magic: u64 },
    #[error("copy index {found} in slot {slot} (a misdirected write)")]
    Misplaced { slot: Slot, found: u16 },
    #[error("non-zero byte {value:#04x} at copy offset {offset}")]
    NonZero { offset: usize, value: u8 },
}

/// The checksum of a record: what every copy of it stores and what the next record's `parent`
/// names.
#[must_use]
pub fn record_checksum(record: &Record) -> Checksum {
    le::u128_at(&encode(record, Slot::A), CHECKSUM_OFFSET).unwrap_or_default()
}

/// Encodes `record` as the copy for `slot`.
#[must_use]
pub fn encode(record: &Record, slot: Slot) -> [u8; COPY_SIZE] {
    encode_with_version(record, slot, VERSION)
}

/// Encodes with an arbitrary version: for tests of version refusal only.
#[doc(hidden)]
#[must_use]
pub fn encode_with_version(record: &Record, slot: Slot, version: u16) -> [u8; COPY_SIZE] {
    let mut bytes = [0u8; COPY_SIZE];
    let state = &record.state;
    le::put_u16(&mut bytes, COPY_OFFSET, slot.index());
    le::put_u64(&mut bytes, MAGIC_OFFSET, MAGIC);
    le::put_u16(&mut bytes, VERSION_OFFSET, version);
    bytes[REPLICA_OFFSET] = record.identity.replica;
    bytes[REPLICA_COUNT_OFFSET] = record.identity.replica_count;
    le::put_u64(&mut bytes, SEQUENCE_OFFSET, record.sequence);
    le::put_u128(&mut bytes, PARENT_OFFSET, record.parent);
    le::put_u128(&mut bytes, CLUSTER_OFFSET, record.identity.cluster);
    le::put_u32(&mut bytes, VIEW_OFFSET, state.view);
    le::put_u32(&mut bytes, LOG_VIEW_OFFSET, state.log_view);
    le::put_u64(&mut bytes, COMMIT_MAX_OFFSET, state.commit_max);
    le::put_u64(&mut bytes, CHECKPOINT_OP_OFFSET, state.checkpoint_op);
    le::put_u64(&mut bytes, OFFSET_FRONTIER_OFFSET, state.offset_frontier);
    le::put_u128(
        &mut bytes,
        CHECKPOINT_CHECKSUM_OFFSET,
        state.checkpoint_checksum,
    );
    le::put_u64(&mut bytes, INCARNATION_OFFSET, state.incarnation);
    if version != VERSION_1 {
        le::put_u64(&mut bytes, ACK_BOUND_OFFSET, state.ack_bound);
    }
    let sum = checksum(&bytes[CHECKSUMMED_OFFSET..]);
    le::put_u128(&mut bytes, CHECKSUM_OFFSET, sum);
    bytes
}

/// Decodes and verifies the copy read from `slot`. Returns the record and its checksum.
pub fn decode(bytes: &[u8], slot: Slot) -> Result<(Record, Checksum), CopyError> {
    let damaged = |damage| Err(CopyError::Damaged(damage));
    let Some(bytes) = bytes.get(..COPY_SIZE) else {
        return damaged(Damage::Missing);
    };
    let field = |offset| le::u128_at(bytes, offset).unwrap_or_default();
    let field_u64 = |offset| le::u64_at(bytes, offset).unwrap_or_default();
    let field_u32 = |offset| le::u32_at(bytes, offset).unwrap_or_default();
    let stored = field(CHECKSUM_OFFSET);
    let computed = checksum(&bytes[CHECKSUMMED_OFFSET..]);
    if stored != computed {
        return damaged(Damage::Checksum { stored, computed });
    }
    let magic = field_u64(MAGIC_OFFSET);
    if magic != MAGIC {
        return damaged(Damage::Magic { magic });
    }
    let found = le::u16_at(bytes, COPY_OFFSET).unwrap_or_default();
    if found != slot.index() {
        return damaged(Damage::Misplaced { slot, found });
    }
    if let Some(offset) = le::first_nonzero_in(bytes, &ZERO_RANGES) {
        return damaged(Damage::NonZero {
            offset,
            value: bytes[offset],
        });
    }
    let version = le::u16_at(bytes, VERSION_OFFSET).unwrap_or_default();
    let ack_bound = match version {
        VERSION => field_u64(ACK_BOUND_OFFSET),
        VERSION_1 => {
            if let Some(offset) =
                le::first_nonzero_in(bytes, &[(ACK_BOUND_OFFSET, RESERVED_OFFSET)])
            {
                return damaged(Damage::NonZero {
                    offset,
                    value: bytes[offset],
                });
            }
            ACK_BOUND_UNKNOWN
        }
        _ => return Err(CopyError::UnknownVersion { version }),
    };
    let record = Record {
        sequence: field_u64(SEQUENCE_OFFSET),
        parent: field(PARENT_OFFSET),
        identity: Identity {
            cluster: field(CLUSTER_OFFSET),
            replica: bytes[REPLICA_OFFSET],
            replica_count: bytes[REPLICA_COUNT_OFFSET],
        },
        state: VsrState {
            view: field_u32(VIEW_OFFSET),
            log_view: field_u32(LOG_VIEW_OFFSET),
            commit_max: field_u64(COMMIT_MAX_OFFSET),
            checkpoint_op: field_u64(CHECKPOINT_OP_OFFSET),
            checkpoint_checksum: field(CHECKPOINT_CHECKSUM_OFFSET),
            offset_frontier: field_u64(OFFSET_FRONTIER_OFFSET),
            incarnation: field_u64(INCARNATION_OFFSET),
            ack_bound,
        },
    };
    check_invariants(&record).map_err(CopyError::InvariantBroken)?;
    Ok((record, stored))
}

/// The invariants every record keeps, on disk and before it is written.
pub fn check_invariants(record: &Record) -> Result<(), &'static str> {
    if record.sequence == 0 {
        return Err("sequence is 0");
    }
    if record.state.log_view > record.state.view {
        return Err("log_view > view");
    }
    if record.state.checkpoint_op > record.state.commit_max {
        return Err("checkpoint_op > commit_max");
    }
    if record.identity.replica >= record.identity.replica_count {
        return Err("replica index >= replica_count");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> Record {
        Record {
            sequence: 3,
            parent: 99,
            identity: Identity {
                cluster: 1,
                replica: 0,
                replica_count: 3,
            },
            state: VsrState {
                view: 2,
                log_view: 2,
                commit_max: 10,
                ..VsrState::default()
            },
        }
    }

    /// A version 1 copy (written before the acknowledgment bound) still reads, its bound
    /// unknown; a version 1 copy with a bound's bytes set is damaged, and version 2 keeps it.
    #[test]
    fn a_version_1_copy_reads_with_an_unknown_acknowledgment_bound() {
        let mut r = record();
        r.state.ack_bound = 77;
        let v1 = encode_with_version(&r, Slot::A, VERSION_1);
        assert_eq!(v1[ACK_BOUND_OFFSET..RESERVED_OFFSET], [0; 8]);
        let (read, _) = decode(&v1, Slot::A).unwrap();
        assert_eq!(read.state.ack_bound, ACK_BOUND_UNKNOWN);
        assert_eq!(read.state.view, 2);
        let v2 = encode(&r, Slot::A);
        assert_eq!(decode(&v2, Slot::A).unwrap().0.state.ack_bound, 77);
        let mut forged = v2;
        forged[VERSION_OFFSET..VERSION_OFFSET + 2].copy_from_slice(&VERSION_1.to_le_bytes());
        let sum = checksum(&forged[CHECKSUMMED_OFFSET..]);
        le::put_u128(&mut forged, CHECKSUM_OFFSET, sum);
        assert_eq!(
            decode(&forged, Slot::A),
            Err(CopyError::Damaged(Damage::NonZero {
                offset: ACK_BOUND_OFFSET,
                value: 77
            }))
        );
    }

    #[test]
    fn both_copies_share_one_checksum_and_differ_only_in_the_copy_index() {
        let a = encode(&record(), Slot::A);
        let b = encode(&record(), Slot::B);
        assert_eq!(a[..16], b[..16]);
        assert_ne!(a[16..18], b[16..18]);
        assert_eq!(a[18..], b[18..]);
        assert_eq!(decode(&a, Slot::A).unwrap().1, record_checksum(&record()));
        assert_eq!(
            decode(&a, Slot::B),
            Err(CopyError::Damaged(Damage::Misplaced {
                slot: Slot::B,
                found: 0
            }))
        );
    }

    /// Every byte of every range that must be zero, set with the checksum made valid again, is
    /// refused naming its offset: a checksum that verifies is not enough (each range, 56..64
    /// between the sequence and the parent included, is checked).
    #[test]
    fn every_reserved_byte_is_checked_behind_a_valid_checksum() {
        for (start, end) in ZERO_RANGES {
            for offset in start..end {
                let mut bytes = encode(&record(), Slot::A);
                bytes[offset] = 0x5A;
                let sum = checksum(&bytes[CHECKSUMMED_OFFSET..]);
                le::put_u128(&mut bytes, CHECKSUM_OFFSET, sum);
                assert_eq!(
                    decode(&bytes, Slot::A),
                    Err(CopyError::Damaged(Damage::NonZero {
                        offset,
                        value: 0x5A
                    })),
                    "offset {offset}"
                );
            }
        }
        assert!(ZERO_RANGES.contains(&(56, 64)));
    }
}
