//! Little-endian field access on fixed-size byte arrays.
//!
//! The functions take the buffer as a slice and an offset known at compile time by the caller's
//! layout constants. They return `None` rather than panic when the field would run past the end,
//! so a decoder working on untrusted input can never index out of bounds.

/// Copies `N` bytes at `offset`, or `None` if they run past the end of `bytes`.
#[must_use]
pub fn array_at<const N: usize>(bytes: &[u8], offset: usize) -> Option<[u8; N]> {
    let end = offset.checked_add(N)?;
    bytes.get(offset..end)?.try_into().ok()
}

/// Reads a `u8` at `offset`.
#[must_use]
pub fn u8_at(bytes: &[u8], offset: usize) -> Option<u8> {
    bytes.get(offset).copied()
}

/// Reads a little-endian `u16` at `offset`.
#[must_use]
pub fn u16_at(bytes: &[u8], offset: usize) -> Option<u16> {
    array_at(bytes, offset).map(u16::from_le_bytes)
}

/// Reads a little-endian `u32` at `offset`.
#[must_use]
pub fn u32_at(bytes: &[u8], offset: usize) -> Option<u32> {
    array_at(bytes, offset).map(u32::from_le_bytes)
}

/// Reads a little-endian `u64` at `offset`.
#[must_use]
pub fn u64_at(bytes: &[u8], offset: usize) -> Option<u64> {
    array_at(bytes, offset).map(u64::from_le_bytes)
}

/// Reads a little-endian `u128` at `offset`.
#[must_use]
pub fn u128_at(bytes: &[u8], offset: usize) -> Option<u128> {
    array_at(bytes, offset).map(u128::from_le_bytes)
}

/// Writes `value` at `offset`. Panics if the field runs past the end: encoders write into buffers
/// whose size is fixed by the same layout constants, so an overrun is a layout bug, not bad input.
pub fn put(bytes: &mut [u8], offset: usize, value: &[u8]) {
    let end = offset + value.len();
    assert!(
        end <= bytes.len(),
        "field [{offset}, {end}) past a {}-byte buffer",
        bytes.len()
    );
    bytes[offset..end].copy_from_slice(value);
}

/// Writes a little-endian `u16` at `offset`.
pub fn put_u16(bytes: &mut [u8], offset: usize, value: u16) {
    put(bytes, offset, &value.to_le_bytes());
}

/// Writes a little-endian `u32` at `offset`.
pub fn put_u32(bytes: &mut [u8], offset: usize, value: u32) {
    put(bytes, offset, &value.to_le_bytes());
}

/// Writes a little-endian `u64` at `offset`.
pub fn put_u64(bytes: &mut [u8], offset: usize, value: u64) {
    put(bytes, offset, &value.to_le_bytes());
}

/// Writes a little-endian `u128` at `offset`.
pub fn put_u128(bytes: &mut [u8], offset: usize, value: u128) {
    put(bytes, offset, &value.to_le_bytes());
}

/// The offset (within `bytes`) of the first non-zero byte, if any: how every reserved range is
/// checked. An OR-reduction first (the compiler vectorizes it), the position only when needed.
#[must_use]
pub fn first_nonzero(bytes: &[u8]) -> Option<usize> {
    if bytes.iter().fold(0u8, |acc, &b| acc | b) == 0 {
        None
    } else {
        bytes.iter().position(|&b| b != 0)
    }
}

/// The offset (within `bytes`) of the first non-zero byte inside any of the `[start, end)`
/// ranges, in range order: how a record's several reserved regions are checked in one call.
#[must_use]
pub fn first_nonzero_in(bytes: &[u8], ranges: &[(usize, usize)]) -> Option<usize> {
    ranges
        .iter()
        .find_map(|&(start, end)| Some(start + first_nonzero(bytes.get(start..end)?)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_are_little_endian_and_bounded() {
        let mut bytes = [0u8; 20];
        put_u64(&mut bytes, 4, 0x0102_0304_0506_0708);
        assert_eq!(bytes[4], 0x08, "least significant byte first");
        assert_eq!(u64_at(&bytes, 4), Some(0x0102_0304_0506_0708));
        assert_eq!(
            u64_at(&bytes, 13),
            None,
            "a field past the end is None, not a panic"
        );
        assert_eq!(
            u128_at(&bytes, usize::MAX - 3),
            None,
            "offset overflow is None"
        );
        put_u16(&mut bytes, 0, 0xBEEF);
        assert_eq!(u16_at(&bytes, 0), Some(0xBEEF));
        put_u32(&mut bytes, 16, 7);
        assert_eq!(u32_at(&bytes, 16), Some(7));
        assert_eq!(u8_at(&bytes, 20), None);
        assert_eq!(first_nonzero(&[0, 0, 5, 0, 7]), Some(2));
        assert_eq!(first_nonzero(&[0; 64]), None);
        assert_eq!(first_nonzero(&[]), None);
        let record = [0, 0, 9, 0, 0, 0, 7, 0];
        assert_eq!(
            first_nonzero_in(&record, &[(0, 2), (4, 8)]),
            Some(6),
            "absolute offset"
        );
        assert_eq!(first_nonzero_in(&record, &[(0, 2), (3, 6)]), None);
    }
}
