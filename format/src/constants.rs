//! Sizes fixed by the on-disk formats. Changing any of these is a format change.

/// The unit of atomic writes assumed by the formats. Fixed-size records that must survive a torn
/// write (superblock copies, frontier slots) are padded to a multiple of this and written at
/// offsets aligned to it. 4 KiB covers both 512-byte and 4 KiB physical sectors.
pub const SECTOR_SIZE: u64 = 4096;

/// Size of the header in front of every WAL entry, in bytes.
pub const HEADER_SIZE: usize = 256;

/// Size of a checksum as stored on disk, in bytes (XXH3-128).
pub const CHECKSUM_SIZE: usize = 16;

const _: () = assert!(SECTOR_SIZE.is_power_of_two());
const _: () = assert!(SECTOR_SIZE.is_multiple_of(512));
const _: () = assert!(SECTOR_SIZE.is_multiple_of(HEADER_SIZE as u64));
