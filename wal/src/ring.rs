//! The carried ring: publications small enough to carry their own entries (pure codec).
//!
//! The frontier file holds, after its two slots, a ring of [`PAIRS`] pairs of records. A small
//! publication (its entries one contiguous run in the head file, at most [`CARRIED_MAX`]
//! bytes) writes its frontier *and a copy of those entries* into both records of pair
//! `sequence % PAIRS`, and syncs only the frontier file: one flush. The entries are written to
//! the log too, but that write is synced lazily, before a pair whose entries exist nowhere else
//! durably is reused. So a valid record names only durable bytes: they are in the record, under
//! its checksum. Boot writes carried entries back into the log. Two copies per publication:
//! one rotten copy leaves the other. See `docs/format.md`, "Carried ring".
//!
//! ```text
//!    0  checksum           u128  XXH3-128 of bytes [32, 256 + carried_len)
//!   16  record             u16   index in the ring, 2 * (sequence % PAIRS) + copy (not checksummed)
//!   18  zero               14 B  (not checksummed; must be zero)
//!   32  magic              u64   "IGGYCARY"
//!   40  version            u16   1
//!   42  zero               6 B
//!   48  sequence .. head_file_key: the frontier fields, at the slot's offsets (48..136)
//!  136  synced_sequence    u64   the last publication that synced the log files (the entries
//!                                through its head are durable in the log itself)
//!  144  carried_len        u32   bytes carried: the entries after the previous publication's
//!                                head, at [published_length - carried_len, published_length)
//!                                of head_file
//!  148  zero               108 B
//!  256  carried entries    carried_len bytes
//!  ...  zero               to the next 4 KiB boundary (the record's written length)
//! ```

use iggy_format::checksum::checksum;
use iggy_format::le;

use crate::frontier::{self, Frontier, SlotError};

/// Pairs in the ring: up to this many publications in a row carry their entries before one
/// syncs the log (the one after them is an ordinary two-flush publication).
pub const PAIRS: usize = 16;
/// Records in the ring (two copies of each publication).
pub const RECORDS: usize = 2 * PAIRS;
/// Bytes between records; a record writes only the 4 KiB sectors it uses.
pub const RECORD_SIZE: usize = 64 << 10;
/// Where the ring starts in the frontier file (after the two slots).
pub const RING_OFFSET: u64 = frontier::FILE_SIZE;
/// The frontier file with its ring (sparse: only written records take space).
pub const FILE_SIZE: u64 = RING_OFFSET + (RECORDS * RECORD_SIZE) as u64;
/// Where the carried entries start in a record.
pub const ENTRIES_OFFSET: usize = 256;
/// The most entry bytes a record carries.
pub const CARRIED_MAX: usize = RECORD_SIZE - ENTRIES_OFFSET;
pub const MAGIC: u64 = u64::from_le_bytes(*b"IGGYCARY");
pub const VERSION: u16 = 1;
/// A record is written in whole sectors.
pub const SECTOR: usize = 4096;
const _: () = assert!(SECTOR as u64 == iggy_format::constants::SECTOR_SIZE);
const _: () = assert!(RECORDS <= 64, "a bit per record in a u64");

const CHECKSUMMED_OFFSET: usize = 32;
const RECORD_OFFSET: usize = 16;
const MAGIC_OFFSET: usize = 32;
const VERSION_OFFSET: usize = 40;
const SYNCED_SEQUENCE_OFFSET: usize = 136;
const CARRIED_LEN_OFFSET: usize = 144;
const FIXED_ZERO_RANGES: [(usize, usize); 3] = [
    (RECORD_OFFSET + 2, CHECKSUMMED_OFFSET),
    (VERSION_OFFSET + 2, 48),
    (CARRIED_LEN_OFFSET + 4, ENTRIES_OFFSET),
];

/// One carried publication, as one of its two records holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Carried {
    pub frontier: Frontier,
    /// The last publication before it that synced the log files.
    pub synced_sequence: u64,
    /// The entries it made durable (headers and bodies, back to back).
    pub entries: Vec<u8>,
}

impl Carried {
    /// Where the carried entries lie in `frontier.head_file`.
    #[must_use]
    pub fn log_offset(&self) -> u64 {
        self.frontier.published_length - self.entries.len() as u64
    }
}

/// The two records of the publication numbered `sequence`.
#[must_use]
pub fn records_of(sequence: u64) -> [usize; 2] {
    let pair = usize::try_from(sequence % PAIRS as u64).unwrap_or(0);
    [2 * pair, 2 * pair + 1]
}

/// Byte offset of record `record` in the frontier file.
#[must_use]
pub fn offset(record: usize) -> u64 {
    RING_OFFSET + (record * RECORD_SIZE) as u64
}

/// The bytes a record of `entries` carried bytes writes: whole sectors.
#[must_use]
pub fn written_len(entries: usize) -> usize {
    (ENTRIES_OFFSET + entries).div_ceil(SECTOR) * SECTOR
}

/// Encodes `carried` as record `record` (one of [`records_of`] its sequence).
#[must_use]
pub fn encode(carried: &Carried, record: usize) -> Vec<u8> {
    assert!(carried.entries.len() <= CARRIED_MAX, "carried entries fit");
    let mut bytes = vec![0u8; written_len(carried.entries.len())];
    let fields = frontier::encode(&carried.frontier);
    bytes[48..frontier::FIELDS_END].copy_from_slice(&fields[48..frontier::FIELDS_END]);
    le::put_u16(
        &mut bytes,
        RECORD_OFFSET,
        u16::try_from(record).unwrap_or(u16::MAX),
    );
    le::put_u64(&mut bytes, MAGIC_OFFSET, MAGIC);
    le::put_u16(&mut bytes, VERSION_OFFSET, VERSION);
    le::put_u64(&mut bytes, SYNCED_SEQUENCE_OFFSET, carried.synced_sequence);
    le::put_u32(
        &mut bytes,
        CARRIED_LEN_OFFSET,
        u32::try_from(carried.entries.len()).unwrap_or(u32::MAX),
    );
    bytes[ENTRIES_OFFSET..ENTRIES_OFFSET + carried.entries.len()].copy_from_slice(&carried.entries);
    let sum = checksum(&bytes[CHECKSUMMED_OFFSET..ENTRIES_OFFSET + carried.entries.len()]);
    le::put_u128(&mut bytes, 0, sum);
    bytes
}

/// What a record's first sector says about it before it is verified: `None` for a record never
/// written (all zero), else the bytes the whole record occupies (at least one sector), so the
/// caller knows how much to read.
#[must_use]
pub fn claimed_len(first_sector: &[u8]) -> Option<usize> {
    if first_sector.iter().all(|b| *b == 0) {
        return None;
    }
    let len = le::u32_at(first_sector, CARRIED_LEN_OFFSET).unwrap_or_default();
    let len = usize::try_from(len).unwrap_or(usize::MAX).min(CARRIED_MAX);
    Some(written_len(len))
}

/// Decodes record `record` from `bytes` (its written length, or more).
pub fn decode(bytes: &[u8], record: usize) -> Result<Carried, SlotError> {
    let Some(head) = bytes.get(..ENTRIES_OFFSET) else {
        return Err(SlotError::Missing);
    };
    let carried_len = le::u32_at(head, CARRIED_LEN_OFFSET).unwrap_or_default();
    let carried_len = usize::try_from(carried_len).unwrap_or(usize::MAX);
    if carried_len > CARRIED_MAX {
        return Err(SlotError::CarriedLength { len: carried_len });
    }
    let Some(bytes) = bytes.get(..written_len(carried_len)) else {
        return Err(SlotError::Missing);
    };
    let end = ENTRIES_OFFSET + carried_len;
    let stored = le::u128_at(bytes, 0).unwrap_or_default();
    let computed = checksum(&bytes[CHECKSUMMED_OFFSET..end]);
    if stored != computed {
        return Err(SlotError::Checksum { stored, computed });
    }
    let magic = le::u64_at(bytes, MAGIC_OFFSET).unwrap_or_default();
    if magic != MAGIC {
        return Err(SlotError::Magic { magic });
    }
    let tail = [(end, bytes.len())];
    if let Some(offset) = le::first_nonzero_in(bytes, &FIXED_ZERO_RANGES)
        .or_else(|| le::first_nonzero_in(bytes, &tail))
    {
        return Err(SlotError::NonZero {
            offset,
            value: bytes[offset],
        });
    }
    let version = le::u16_at(bytes, VERSION_OFFSET).unwrap_or_default();
    if version != VERSION {
        return Err(SlotError::UnknownVersion { version });
    }
    let frontier = frontier::decode_fields(bytes);
    let found = le::u16_at(bytes, RECORD_OFFSET).unwrap_or_default();
    if usize::from(found) != record || !records_of(frontier.sequence).contains(&record) {
        return Err(SlotError::Misplaced {
            slot: record,
            found,
            sequence: frontier.sequence,
        });
    }
    let synced_sequence = le::u64_at(bytes, SYNCED_SEQUENCE_OFFSET).unwrap_or_default();
    if synced_sequence >= frontier.sequence || carried_len as u64 > frontier.published_length {
        // A checksummed record that contradicts itself was not written by this code.
        return Err(SlotError::Inconsistent {
            sequence: frontier.sequence,
        });
    }
    Ok(Carried {
        frontier,
        synced_sequence,
        entries: bytes[ENTRIES_OFFSET..end].to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(sequence: u64, entries: usize) -> Carried {
        Carried {
            frontier: crate::frontier::tests::sample(sequence),
            synced_sequence: sequence - 3,
            entries: (0..entries)
                .map(|i| (i as u64 * 7 + sequence).to_le_bytes()[0])
                .collect(),
        }
    }

    #[test]
    fn round_trip_in_both_copies_and_nowhere_else() {
        for (sequence, len) in [
            (5u64, 0usize),
            (16, 1),
            (17, 3840),
            (40, 3841),
            (99, CARRIED_MAX),
        ] {
            let carried = sample(sequence, len);
            for record in records_of(sequence) {
                let bytes = encode(&carried, record);
                assert_eq!(bytes.len() % SECTOR, 0);
                assert_eq!(claimed_len(&bytes[..SECTOR]), Some(bytes.len()));
                assert_eq!(decode(&bytes, record), Ok(carried.clone()));
                let elsewhere = (record + 2) % RECORDS;
                assert!(matches!(
                    decode(&bytes, elsewhere),
                    Err(SlotError::Misplaced { .. })
                ));
            }
        }
        assert_eq!(claimed_len(&[0u8; SECTOR]), None);
    }

    #[test]
    fn every_single_bit_flip_of_a_record_is_detected() {
        let carried = sample(21, 700);
        let record = records_of(21)[1];
        let bytes = encode(&carried, record);
        for bit in 0..bytes.len() * 8 {
            let mut damaged = bytes.clone();
            damaged[bit / 8] ^= 1 << (bit % 8);
            assert!(decode(&damaged, record).is_err(), "bit {bit}");
        }
    }

    #[test]
    fn a_torn_record_does_not_verify() {
        // The first sector new, the second still the older record's: the checksum covers both.
        let old = encode(&sample(5, 6000), 10);
        let new = encode(&sample(21, 6000), 10);
        let mut torn = new.clone();
        torn[SECTOR..].copy_from_slice(&old[SECTOR..]);
        assert!(matches!(decode(&torn, 10), Err(SlotError::Checksum { .. })));
    }
}
