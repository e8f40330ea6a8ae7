//! Any bytes into the snapshot decoder: no panic; whatever decodes re-encodes to the same
//! bytes. Inputs are also decoded with the trailer resealed (and the magic planted), so the
//! fuzzer reaches the checks behind the checksum.
#![no_main]

use libfuzzer_sys::fuzz_target;

fn check(bytes: &[u8]) {
    if let Ok((header, payload)) = iggy_snapshot::decode("fuzz", bytes) {
        let again = iggy_snapshot::encode(
            header.checkpoint_op,
            header.checkpoint_checksum,
            header.payload_version,
            payload,
        );
        assert_eq!(&again[..], bytes);
    }
}

/// `bytes` with the magic planted and the trailer resealed, at their own length (so short
/// inputs reach the length checks behind a valid trailer).
fn resealed(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut sealed = bytes.to_vec();
    let len = sealed.len();
    if len < 16 {
        return None;
    }
    if len >= 8 + 16 {
        sealed[..8].copy_from_slice(&iggy_snapshot::MAGIC.to_le_bytes());
    }
    let sum = iggy_format::checksum(&sealed[..len - 16]);
    sealed[len - 16..].copy_from_slice(&sum.to_le_bytes());
    Some(sealed)
}

fuzz_target!(|data: &[u8]| {
    check(data);
    if let Some(sealed) = resealed(data) {
        check(&sealed);
    }
    let mut sealed = data.to_vec();
    sealed.resize(sealed.len().max(iggy_snapshot::HEADER_SIZE + iggy_snapshot::TRAILER_SIZE), 0);
    sealed[..8].copy_from_slice(&iggy_snapshot::MAGIC.to_le_bytes());
    let len = sealed.len();
    let sum = iggy_format::checksum(&sealed[..len - 16]);
    sealed[len - 16..].copy_from_slice(&sum.to_le_bytes());
    check(&sealed);
});
