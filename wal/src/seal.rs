//! A file's seal: the summary of a WAL file the durable frontier has passed, so that boot can
//! take the file's entries without reading them (pure codec, and the rule for trusting one).
//!
//! A seal is derived data, like a segment's sparse index: written once, without a sync, when
//! a publication first names a later file (the file then holds exactly its entries, all
//! durable). It names the entries' sizes, the parent the first entry names and the last entry's
//! header checksum. Boot uses a seal only for a file before the head file, only when it
//! verifies (checksum, group, key, first op, exactly as many entries as the file must hold,
//! inside the file's length), and only when the file's first and last headers are what it says
//! (`crate::retained`); otherwise the file is scanned as before. Its two checksums are then the
//! file's real ends, and the links between files are checked as for scanned ones, ending at the
//! frontier's `head_checksum`: each header commits to its parent, so the last header names the
//! whole history before it. A seal torn, lost, stale (left by a crash or a cut) or foreign
//! only costs the scan it would have saved. See `docs/format.md`, "Seals".
//!
//! ```text
//!    0  checksum        u128  XXH3-128 of bytes [16, end of file)
//!   16  magic           u64   "IGGYSEAL"
//!   24  version         u16   1
//!   26  zero            6 B
//!   32  group           u128
//!   48  key             u64   the key in the sealed file's name
//!   56  first_op        u64
//!   64  entries         u64
//!   72  end             u64   the end of the last entry (the sum of the sizes)
//!   80  first_parent    u128  the parent the first entry names
//!   96  last_checksum   u128  the last entry's header checksum
//!  112  zero            16 B
//!  128  sizes           entries x u32: each entry's size, header included, in op order
//! ```

use std::path::{Path, PathBuf};

use iggy_format::checksum::{Checksum, checksum};
use iggy_format::le;

pub const MAGIC: u64 = u64::from_le_bytes(*b"IGGYSEAL");
pub const VERSION: u16 = 1;
pub const HEADER_BYTES: usize = 128;
/// A seal's name: its file's name with this suffix.
pub const SUFFIX: &str = ".seal";

const CHECKSUMMED_OFFSET: usize = 16;
const MAGIC_OFFSET: usize = 16;
const VERSION_OFFSET: usize = 24;
const GROUP_OFFSET: usize = 32;
const KEY_OFFSET: usize = 48;
const FIRST_OP_OFFSET: usize = 56;
const ENTRIES_OFFSET: usize = 64;
const END_OFFSET: usize = 72;
const FIRST_PARENT_OFFSET: usize = 80;
const LAST_CHECKSUM_OFFSET: usize = 96;
const RESERVED_OFFSET: usize = 112;
const ZERO_RANGES: [(usize, usize); 2] = [
    (VERSION_OFFSET + 2, GROUP_OFFSET),
    (RESERVED_OFFSET, HEADER_BYTES),
];

const _: () = assert!(LAST_CHECKSUM_OFFSET + 16 == RESERVED_OFFSET);
const _: () = assert!(RESERVED_OFFSET + 16 == HEADER_BYTES);

/// What a seal says about its file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seal {
    pub group: u128,
    pub key: u64,
    pub first_op: u64,
    /// Entry `i` (op `first_op + i`) starts at `offsets[i]`; the first at 0.
    pub offsets: Vec<u64>,
    pub end: u64,
    pub first_parent: Checksum,
    pub last_checksum: Checksum,
}

/// Why a seal is not used (boot then scans its file; `iggy-inspect` shows the reason).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    #[error("shorter than its {HEADER_BYTES}-byte header ({len} bytes)")]
    Short { len: usize },
    #[error("checksum mismatch (stored {stored:#034x}, computed {computed:#034x})")]
    Checksum {
        stored: Checksum,
        computed: Checksum,
    },
    #[error("bad magic {magic:#018x}")]
    Magic { magic: u64 },
    #[error("unknown version {version} (this build reads seal version {VERSION})")]
    UnknownVersion { version: u16 },
    #[error("non-zero byte {value:#04x} at offset {offset}")]
    NonZero { offset: usize, value: u8 },
    #[error("{entries} entries need {expected} bytes, the seal has {len}")]
    Length {
        entries: u64,
        expected: u64,
        len: usize,
    },
    #[error("sizes add up to {sum}, the seal says the entries end at {end}")]
    End { sum: u64, end: u64 },
    #[error("an entry of {size} bytes is smaller than a header")]
    Size { size: u32 },
}

/// The seal's path for the log file at `file`.
#[must_use]
pub fn path_for(file: &Path) -> PathBuf {
    let mut name = file.as_os_str().to_os_string();
    name.push(SUFFIX);
    PathBuf::from(name)
}

/// The log file a seal at `name` (a file name) belongs to, if it is a seal's name.
#[must_use]
pub fn sealed_name(name: &std::ffi::OsStr) -> Option<&std::ffi::OsStr> {
    name.to_str()?
        .strip_suffix(SUFFIX)
        .map(std::ffi::OsStr::new)
}

/// Encodes `seal` (every offset is the sum of the sizes before it: entries lie back to back
/// from the file's start).
#[must_use]
pub fn encode(seal: &Seal) -> Vec<u8> {
    let entries = seal.offsets.len();
    let mut bytes = vec![0u8; HEADER_BYTES + 4 * entries];
    le::put_u64(&mut bytes, MAGIC_OFFSET, MAGIC);
    le::put_u16(&mut bytes, VERSION_OFFSET, VERSION);
    le::put_u128(&mut bytes, GROUP_OFFSET, seal.group);
    le::put_u64(&mut bytes, KEY_OFFSET, seal.key);
    le::put_u64(&mut bytes, FIRST_OP_OFFSET, seal.first_op);
    le::put_u64(&mut bytes, ENTRIES_OFFSET, entries as u64);
    le::put_u64(&mut bytes, END_OFFSET, seal.end);
    le::put_u128(&mut bytes, FIRST_PARENT_OFFSET, seal.first_parent);
    le::put_u128(&mut bytes, LAST_CHECKSUM_OFFSET, seal.last_checksum);
    for (i, &offset) in seal.offsets.iter().enumerate() {
        let next = seal.offsets.get(i + 1).copied().unwrap_or(seal.end);
        // An entry's size is a header's `size` field: a u32.
        let size = u32::try_from(next - offset).unwrap_or(u32::MAX);
        le::put_u32(&mut bytes, HEADER_BYTES + 4 * i, size);
    }
    let sum = checksum(&bytes[CHECKSUMMED_OFFSET..]);
    le::put_u128(&mut bytes, 0, sum);
    bytes
}

/// A seal's fixed fields, read without its sizes (what boot checks: `crate::retained`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SealHeader {
    pub group: u128,
    pub key: u64,
    pub first_op: u64,
    pub entries: u64,
    pub end: u64,
    pub first_parent: Checksum,
    pub last_checksum: Checksum,
}

impl SealHeader {
    /// Where the size of entry `index` lies in the seal.
    #[must_use]
    pub fn size_offset(index: u64) -> u64 {
        HEADER_BYTES as u64 + 4 * index
    }
}

/// Decodes a seal's first [`HEADER_BYTES`] bytes, and checks that a seal of `len` bytes holds
/// exactly the sizes they count. The checksum covers the sizes too, so it is not checked here:
/// [`decode`] checks it.
pub fn decode_header(header: &[u8], len: u64) -> Result<SealHeader, SealError> {
    if header.len() < HEADER_BYTES || len < HEADER_BYTES as u64 {
        return Err(SealError::Short {
            len: usize::try_from(len).unwrap_or(usize::MAX).min(header.len()),
        });
    }
    let u64_at = |offset| le::u64_at(header, offset).unwrap_or_default();
    let u128_at = |offset| le::u128_at(header, offset).unwrap_or_default();
    let magic = u64_at(MAGIC_OFFSET);
    if magic != MAGIC {
        return Err(SealError::Magic { magic });
    }
    let version = le::u16_at(header, VERSION_OFFSET).unwrap_or_default();
    if version != VERSION {
        return Err(SealError::UnknownVersion { version });
    }
    if let Some(offset) = le::first_nonzero_in(&header[..HEADER_BYTES], &ZERO_RANGES) {
        return Err(SealError::NonZero {
            offset,
            value: header[offset],
        });
    }
    let entries = u64_at(ENTRIES_OFFSET);
    let expected = entries
        .checked_mul(4)
        .and_then(|sizes| sizes.checked_add(HEADER_BYTES as u64));
    if expected != Some(len) {
        return Err(SealError::Length {
            entries,
            expected: expected.unwrap_or(u64::MAX),
            len: usize::try_from(len).unwrap_or(usize::MAX),
        });
    }
    Ok(SealHeader {
        group: u128_at(GROUP_OFFSET),
        key: u64_at(KEY_OFFSET),
        first_op: u64_at(FIRST_OP_OFFSET),
        entries,
        end: u64_at(END_OFFSET),
        first_parent: u128_at(FIRST_PARENT_OFFSET),
        last_checksum: u128_at(LAST_CHECKSUM_OFFSET),
    })
}

/// Decodes a seal's bytes, its checksum verified.
pub fn decode(bytes: &[u8]) -> Result<Seal, SealError> {
    if bytes.len() < HEADER_BYTES {
        return Err(SealError::Short { len: bytes.len() });
    }
    let stored = le::u128_at(bytes, 0).unwrap_or_default();
    let computed = checksum(&bytes[CHECKSUMMED_OFFSET..]);
    if stored != computed {
        return Err(SealError::Checksum { stored, computed });
    }
    let header = decode_header(bytes, bytes.len() as u64)?;
    let (entries, end) = (header.entries, header.end);
    let mut offsets = Vec::with_capacity(usize::try_from(entries).unwrap_or(0));
    let mut sum = 0u64;
    for size in bytes[HEADER_BYTES..].chunks_exact(4) {
        let size = u32::from_le_bytes([size[0], size[1], size[2], size[3]]);
        if (size as usize) < iggy_format::constants::HEADER_SIZE {
            return Err(SealError::Size { size });
        }
        offsets.push(sum);
        sum += u64::from(size);
    }
    if sum != end {
        return Err(SealError::End { sum, end });
    }
    Ok(Seal {
        group: header.group,
        key: header.key,
        first_op: header.first_op,
        offsets,
        end,
        first_parent: header.first_parent,
        last_checksum: header.last_checksum,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Seal {
        Seal {
            group: 7,
            key: 100,
            first_op: 11,
            offsets: vec![0, 300, 556],
            end: 1000,
            first_parent: 0xAB,
            last_checksum: 0xCD,
        }
    }

    #[test]
    fn a_seal_decodes_to_what_was_encoded() {
        let seal = sample();
        assert_eq!(decode(&encode(&seal)), Ok(seal));
    }

    #[test]
    fn every_flipped_bit_and_every_cut_is_refused() {
        let bytes = encode(&sample());
        for bit in 0..bytes.len() * 8 {
            let mut damaged = bytes.clone();
            damaged[bit / 8] ^= 1 << (bit % 8);
            assert!(decode(&damaged).is_err(), "bit {bit} flipped decoded");
        }
        for len in 0..bytes.len() {
            assert!(decode(&bytes[..len]).is_err(), "cut at {len} decoded");
        }
    }

    #[test]
    fn the_header_alone_decodes_to_the_seal_fields_and_checks_the_length() {
        let seal = sample();
        let bytes = encode(&seal);
        let len = bytes.len() as u64;
        let header = decode_header(&bytes[..HEADER_BYTES], len);
        assert_eq!(
            header,
            Ok(SealHeader {
                group: 7,
                key: 100,
                first_op: 11,
                entries: 3,
                end: 1000,
                first_parent: 0xAB,
                last_checksum: 0xCD,
            })
        );
        assert_eq!(SealHeader::size_offset(2), len - 4);
        for wrong in [len - 1, len + 1, len - 4, HEADER_BYTES as u64] {
            assert!(
                decode_header(&bytes[..HEADER_BYTES], wrong).is_err(),
                "a seal of {wrong} bytes for 3 entries"
            );
        }
        // Every bit of the fixed fields the header decode checks (not the checksum, which
        // covers the sizes): a flipped magic, version, reserved byte or count is refused.
        for bit in (16 * 8..HEADER_BYTES * 8).filter(|bit| {
            let byte = bit / 8;
            !(GROUP_OFFSET..ENTRIES_OFFSET).contains(&byte)
                && !(END_OFFSET..RESERVED_OFFSET).contains(&byte)
        }) {
            let mut damaged = bytes[..HEADER_BYTES].to_vec();
            damaged[bit / 8] ^= 1 << (bit % 8);
            assert!(
                decode_header(&damaged, len).is_err(),
                "bit {bit} flipped decoded"
            );
        }
    }

    #[test]
    fn a_seal_is_named_after_its_file() {
        let path = path_for(Path::new("log/00000000000000000011.wal"));
        assert_eq!(path, Path::new("log/00000000000000000011.wal.seal"));
        let name = path.file_name().unwrap_or_default();
        assert_eq!(
            sealed_name(name),
            Some(std::ffi::OsStr::new("00000000000000000011.wal"))
        );
    }
}
