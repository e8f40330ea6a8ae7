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
//!
//! The XXH3 functions come from `twox-hash`, which picks AVX2 or SSE2 at run time: a portable
//! build hashes as fast as one built for the machine, without the `SIGILL` of a binary built for
//! AVX2 on a CPU without it. The tests check them against `xxhash-rust`, an independent
//! implementation.

use twox_hash::{XxHash3_64, XxHash3_128};

/// A 128-bit checksum as stored on disk (16 bytes little-endian).
pub type Checksum = u128;

/// XXH3-128 (seed 0) of `bytes`.
#[must_use]
pub fn checksum(bytes: &[u8]) -> Checksum {
    XxHash3_128::oneshot(bytes)
}

/// XXH3-128 over several slices, equal to [`checksum`] of their concatenation.
#[must_use]
pub fn checksum_parts(parts: &[&[u8]]) -> Checksum {
    let mut hasher = XxHash3_128::new();
    for part in parts {
        hasher.write(part);
    }
    hasher.finish_128()
}

/// XXH3-64 (seed 0) of `bytes`: the Iggy message and batch checksum.
#[must_use]
pub fn checksum_64(bytes: &[u8]) -> u64 {
    XxHash3_64::oneshot(bytes)
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

    /// Every size class of XXH3 (0-16, 17-128, 129-240 bytes, and the striped path with its
    /// block and tail boundaries) agrees with an independent implementation, one-shot and in parts.
    #[test]
    fn xxh3_agrees_with_an_independent_implementation() {
        let data: Vec<u8> = (0..20_000u32)
            .map(|i| i.wrapping_mul(2_654_435_761).to_le_bytes()[1])
            .collect();
        for len in (0..=1_100).chain([1_023, 1_024, 1_025, 4_095, 4_096, 4_097, 19_999]) {
            let bytes = &data[..len];
            assert_eq!(checksum(bytes), xxhash_rust::xxh3::xxh3_128(bytes), "{len}");
            assert_eq!(
                checksum_64(bytes),
                xxhash_rust::xxh3::xxh3_64(bytes),
                "{len}"
            );
            let cut = len / 3;
            assert_eq!(
                checksum_parts(&[&bytes[..cut], &bytes[cut..]]),
                checksum(bytes),
                "{len}"
            );
        }
    }
}
