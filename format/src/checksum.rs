//! Checksum families, chosen per use by measurement (see `docs/format.md`, "Checksums").
//!
//! - [`checksum`] (XXH3-128) guards every record the toolkit defines: entry headers, entry bodies,
//!   the hash chain of the log (`parent`), superblock copies, frontier slots, snapshots. 128 bits
//!   make an accidental match of a stale or misdirected record negligible even across billions of
//!   entries, and XXH3 is faster than CRC32C from 256 bytes up on this machine.
//! - [`checksum_64`] (XXH3-64) is the message-batch checksum that Apache Iggy's clients already
//!   compute; it is kept so a client's batch can be validated and stored verbatim.
//! - [`crc32c`] is offered for small fixed records where a 32-bit check is all the field holds
//!   (nothing in format version 1 uses it).
//!
//! "Set in stone": the functions below are part of the on-disk format. Changing one means a
//! version bump of every format that uses it.

use xxhash_rust::xxh3;

/// A 128-bit checksum as stored on disk (16 bytes little-endian).
pub type Checksum = u128;

/// XXH3-128 (seed 0) of `bytes`.
#[must_use]
pub fn checksum(bytes: &[u8]) -> Checksum {
    xxh3::xxh3_128(bytes)
}

/// XXH3-128 over several slices, equal to [`checksum`] of their concatenation.
#[must_use]
pub fn checksum_parts(parts: &[&[u8]]) -> Checksum {
    let mut hasher = xxh3::Xxh3::new();
    for part in parts {
        hasher.update(part);
    }
    hasher.digest128()
}

/// XXH3-64 (seed 0) of `bytes`: the Iggy message and batch checksum.
#[must_use]
pub fn checksum_64(bytes: &[u8]) -> u64 {
    xxh3::xxh3_64(bytes)
}

/// CRC32C (Castagnoli) of `bytes`.
#[must_use]
pub fn crc32c(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pins the functions to known values: a dependency upgrade that changed any of them would
    /// silently make every file on disk unreadable.
    #[test]
    fn checksums_are_stable() {
        assert_eq!(checksum(b""), 0x99aa_06d3_0147_98d8_6001_c324_468d_497f);
        assert_eq!(checksum_64(b""), 0x2d06_8005_38d3_94c2);
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        let data = b"hash chained write-ahead log";
        assert_eq!(checksum_parts(&[&data[..4], &data[4..]]), checksum(data));
        assert_ne!(checksum(b"a"), checksum(b"b"));
    }
}
