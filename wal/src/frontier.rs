//! The published durable frontier: which prefix of the log boot may trust (pure codec).
//!
//! One file, `frontier`, two 4 KiB slots. Publication `sequence` is written into slot
//! `sequence % 2` and made durable with one `fdatasync`: the slot it overwrites holds publication
//! `sequence - 2`, already superseded by `sequence - 1` in the other slot, so at every instant one
//! slot holds the latest durable publication. Every field lives in the first 136 bytes and the
//! rest of a slot is zero in every publication, so a write torn at sector granularity leaves the
//! slot wholly old or wholly new; only damage inside a sector (rot, a device without atomic
//! sectors) makes a slot unreadable. See `docs/format.md`, "WAL frontier".
//!
//! ```text
//!    0  checksum           u128  XXH3-128 of bytes [32, 4096)
//!   16  slot               u16   0 or 1 (not checksummed); must equal sequence % 2
//!   18  zero               14 B  (not checksummed; must be zero)
//!   32  magic              u64   "IGGYFRNT"
//!   40  version            u16   1
//!   42  zero               6 B
//!   48  sequence           u64   publications so far (0 and 1 at creation)
//!   56  generation         u64   times the durable history was cut back (truncate_after)
//!   64  group              u128  the consensus group this log belongs to
//!   80  incarnation        u64   boot incarnation of the writer
//!   88  head_op            u64   the last published op (first_op - 1 when empty)
//!   96  head_checksum      u128  header checksum of the entry at head_op (the chain's parent)
//!  112  head_file          u64   first op of the file holding head_op
//!  120  published_length   u64   bytes of head_file covered by the published prefix
//!  128  head_file_key      u64   the key in that file's name (= head_file for op-named logs)
//!  136  zero               3960 B
//! ```

use iggy_format::checksum::{Checksum, checksum};
use iggy_format::le;

pub const SLOT_SIZE: usize = 4096;
pub const FILE_SIZE: u64 = 2 * SLOT_SIZE as u64;
pub const MAGIC: u64 = u64::from_le_bytes(*b"IGGYFRNT");
/// Version 2: the file also holds the carried ring after the slots (`crate::ring`); a build
/// that reads only the slots must not boot such a log.
pub const VERSION: u16 = 2;
/// End of the fields (a carried ring record keeps them at the same offsets).
pub const FIELDS_END: usize = RESERVED_OFFSET;

const CHECKSUMMED_OFFSET: usize = 32;
const SLOT_OFFSET: usize = 16;
const MAGIC_OFFSET: usize = 32;
const VERSION_OFFSET: usize = 40;
const SEQUENCE_OFFSET: usize = 48;
const GENERATION_OFFSET: usize = 56;
const GROUP_OFFSET: usize = 64;
const INCARNATION_OFFSET: usize = 80;
const HEAD_OP_OFFSET: usize = 88;
const HEAD_CHECKSUM_OFFSET: usize = 96;
const HEAD_FILE_OFFSET: usize = 112;
const PUBLISHED_LENGTH_OFFSET: usize = 120;
const HEAD_FILE_KEY_OFFSET: usize = 128;
const RESERVED_OFFSET: usize = 136;
const ZERO_RANGES: [(usize, usize); 3] = [
    (SLOT_OFFSET + 2, CHECKSUMMED_OFFSET),
    (VERSION_OFFSET + 2, SEQUENCE_OFFSET),
    (RESERVED_OFFSET, SLOT_SIZE),
];

const _: () = assert!(SLOT_SIZE as u64 == iggy_format::constants::SECTOR_SIZE);
const _: () = assert!(PUBLISHED_LENGTH_OFFSET + 8 == HEAD_FILE_KEY_OFFSET);
const _: () = assert!(HEAD_FILE_KEY_OFFSET + 8 == RESERVED_OFFSET);
const _: () = assert!(
    RESERVED_OFFSET <= 512,
    "every field in the first 512-byte sector"
);

/// One publication: the durable prefix of the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Frontier {
    pub sequence: u64,
    pub generation: u64,
    pub group: u128,
    pub incarnation: u64,
    pub head_op: u64,
    pub head_checksum: Checksum,
    pub head_file: u64,
    pub published_length: u64,
    /// The key naming the head file (see [`crate::boot::Naming`]).
    pub head_file_key: u64,
}

impl Frontier {
    /// The slot this publication is written to.
    #[must_use]
    pub fn slot(&self) -> usize {
        usize::from(self.sequence % 2 == 1)
    }

    /// Byte offset of this publication's slot in the frontier file.
    #[must_use]
    pub fn offset(&self) -> u64 {
        if self.slot() == 0 {
            0
        } else {
            SLOT_SIZE as u64
        }
    }
}

/// Why a slot cannot be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SlotError {
    #[error("missing (file shorter than the slot)")]
    Missing,
    #[error("checksum mismatch (stored {stored:#034x}, computed {computed:#034x})")]
    Checksum {
        stored: Checksum,
        computed: Checksum,
    },
    #[error("bad magic {magic:#018x}")]
    Magic { magic: u64 },
    #[error("slot index {found} in slot {slot}, or sequence {sequence} in the wrong slot")]
    Misplaced {
        slot: usize,
        found: u16,
        sequence: u64,
    },
    #[error("non-zero byte {value:#04x} at slot offset {offset}")]
    NonZero { offset: usize, value: u8 },
    #[error(
        "unknown version {version} (this build reads frontier versions 1 and {VERSION}, carried \
         record version {})",
        crate::ring::VERSION
    )]
    UnknownVersion { version: u16 },
    #[error("carried length {len} past the record's room")]
    CarriedLength { len: usize },
    #[error("publication {sequence} verifies but contradicts itself (synced sequence or length)")]
    Inconsistent { sequence: u64 },
}

impl SlotError {
    /// A refusal rather than damage: the slot verifies but this build may not act on it.
    #[must_use]
    pub fn is_refusal(&self) -> bool {
        matches!(self, Self::UnknownVersion { .. })
    }
}

/// Encodes `frontier` for its slot.
#[must_use]
pub fn encode(frontier: &Frontier) -> [u8; SLOT_SIZE] {
    let mut bytes = [0u8; SLOT_SIZE];
    let slot = u16::from(frontier.slot() == 1);
    le::put_u16(&mut bytes, SLOT_OFFSET, slot);
    le::put_u64(&mut bytes, MAGIC_OFFSET, MAGIC);
    le::put_u16(&mut bytes, VERSION_OFFSET, VERSION);
    le::put_u64(&mut bytes, SEQUENCE_OFFSET, frontier.sequence);
    le::put_u64(&mut bytes, GENERATION_OFFSET, frontier.generation);
    le::put_u128(&mut bytes, GROUP_OFFSET, frontier.group);
    le::put_u64(&mut bytes, INCARNATION_OFFSET, frontier.incarnation);
    le::put_u64(&mut bytes, HEAD_OP_OFFSET, frontier.head_op);
    le::put_u128(&mut bytes, HEAD_CHECKSUM_OFFSET, frontier.head_checksum);
    le::put_u64(&mut bytes, HEAD_FILE_OFFSET, frontier.head_file);
    le::put_u64(
        &mut bytes,
        PUBLISHED_LENGTH_OFFSET,
        frontier.published_length,
    );
    le::put_u64(&mut bytes, HEAD_FILE_KEY_OFFSET, frontier.head_file_key);
    let sum = checksum(&bytes[CHECKSUMMED_OFFSET..]);
    le::put_u128(&mut bytes, 0, sum);
    bytes
}

/// Decodes both slots of a frontier file's bytes (a short file leaves a slot `Missing`).
pub fn decode_file(bytes: &[u8]) -> [Result<Frontier, SlotError>; 2] {
    [0usize, 1].map(|slot| decode(bytes.get(slot * SLOT_SIZE..).unwrap_or(&[]), slot))
}

/// Decodes the slot at index `slot` (0 or 1) from `bytes`.
pub fn decode(bytes: &[u8], slot: usize) -> Result<Frontier, SlotError> {
    let Some(bytes) = bytes.get(..SLOT_SIZE) else {
        return Err(SlotError::Missing);
    };
    let u64_at = |offset| le::u64_at(bytes, offset).unwrap_or_default();
    let u128_at = |offset| le::u128_at(bytes, offset).unwrap_or_default();
    let stored = u128_at(0);
    let computed = checksum(&bytes[CHECKSUMMED_OFFSET..]);
    if stored != computed {
        return Err(SlotError::Checksum { stored, computed });
    }
    let magic = u64_at(MAGIC_OFFSET);
    if magic != MAGIC {
        return Err(SlotError::Magic { magic });
    }
    if let Some(offset) = le::first_nonzero_in(bytes, &ZERO_RANGES) {
        return Err(SlotError::NonZero {
            offset,
            value: bytes[offset],
        });
    }
    let version = le::u16_at(bytes, VERSION_OFFSET).unwrap_or_default();
    // Version 1 is a file of the two slots alone (no ring): read as a log without carried
    // publications, and never carried into (its file has no room for the ring).
    if !(1..=VERSION).contains(&version) {
        return Err(SlotError::UnknownVersion { version });
    }
    let frontier = decode_fields(bytes);
    let found = le::u16_at(bytes, SLOT_OFFSET).unwrap_or_default();
    if usize::from(found) != slot || frontier.slot() != slot {
        return Err(SlotError::Misplaced {
            slot,
            found,
            sequence: frontier.sequence,
        });
    }
    Ok(frontier)
}

/// The frontier fields at bytes 48..136 (of a slot or a carried record), unverified.
#[must_use]
pub fn decode_fields(bytes: &[u8]) -> Frontier {
    let u64_at = |offset| le::u64_at(bytes, offset).unwrap_or_default();
    let u128_at = |offset| le::u128_at(bytes, offset).unwrap_or_default();
    Frontier {
        sequence: u64_at(SEQUENCE_OFFSET),
        generation: u64_at(GENERATION_OFFSET),
        group: u128_at(GROUP_OFFSET),
        incarnation: u64_at(INCARNATION_OFFSET),
        head_op: u64_at(HEAD_OP_OFFSET),
        head_checksum: u128_at(HEAD_CHECKSUM_OFFSET),
        head_file: u64_at(HEAD_FILE_OFFSET),
        published_length: u64_at(PUBLISHED_LENGTH_OFFSET),
        head_file_key: u64_at(HEAD_FILE_KEY_OFFSET),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A frontier with every field set, for the codecs' tests (the ring's too).
    pub(crate) fn sample(sequence: u64) -> Frontier {
        Frontier {
            sequence,
            generation: 1,
            group: 7,
            incarnation: 2,
            head_op: 99,
            head_checksum: 0xABCD,
            head_file: 50,
            published_length: 123_456,
            head_file_key: 4_000,
        }
    }

    #[test]
    fn round_trip_and_slot_placement() {
        for sequence in [0u64, 1, 2, 77] {
            let frontier = sample(sequence);
            let bytes = encode(&frontier);
            assert_eq!(decode(&bytes, frontier.slot()), Ok(frontier));
            let other = 1 - frontier.slot();
            assert!(matches!(
                decode(&bytes, other),
                Err(SlotError::Misplaced { .. })
            ));
        }
        assert_eq!(sample(3).offset(), SLOT_SIZE as u64);
        assert_eq!(sample(4).offset(), 0);
    }

    /// Every byte of every range that must be zero, set with a valid checksum, is refused
    /// naming its offset (bytes 42..48 after the version included).
    #[test]
    fn every_reserved_byte_is_checked_behind_a_valid_checksum() {
        for (start, end) in ZERO_RANGES {
            for offset in start..end {
                let mut bytes = encode(&sample(4));
                bytes[offset] = 0xA5;
                let sum = checksum(&bytes[CHECKSUMMED_OFFSET..]);
                le::put_u128(&mut bytes, 0, sum);
                assert_eq!(
                    decode(&bytes, 0),
                    Err(SlotError::NonZero {
                        offset,
                        value: 0xA5
                    }),
                    "offset {offset}"
                );
            }
        }
        assert!(ZERO_RANGES.contains(&(42, 48)));
    }

    #[test]
    fn every_single_bit_flip_is_detected() {
        let bytes = encode(&sample(5));
        for bit in 0..SLOT_SIZE * 8 {
            let mut damaged = bytes;
            damaged[bit / 8] ^= 1 << (bit % 8);
            assert!(decode(&damaged, 1).is_err(), "bit {bit}");
        }
    }
}
