//! Any bytes into the carried ring record decoder, as every record of the ring: no panic, and
//! whatever decodes re-encodes to the same bytes (its written length). Inputs are also decoded
//! with magic, version and checksum planted, so the fuzzer reaches the checks behind them.
#![no_main]

use iggy_wal::ring;
use libfuzzer_sys::fuzz_target;

fn check(bytes: &[u8]) {
    for record in 0..ring::RECORDS {
        if let Ok(decoded) = ring::decode(bytes, record) {
            let encoded = ring::encode(&decoded, record);
            assert_eq!(&encoded[..], &bytes[..encoded.len()]);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    check(data);
    let mut sealed = data.to_vec();
    sealed.resize(sealed.len().max(ring::ENTRIES_OFFSET), 0);
    sealed[32..40].copy_from_slice(&ring::MAGIC.to_le_bytes());
    sealed[40..42].copy_from_slice(&ring::VERSION.to_le_bytes());
    let len = u32::from_le_bytes([sealed[144], sealed[145], sealed[146], sealed[147]]) as usize;
    let end = (ring::ENTRIES_OFFSET + len).min(sealed.len());
    let sum = iggy_format::checksum(&sealed[32..end]);
    sealed[..16].copy_from_slice(&sum.to_le_bytes());
    check(&sealed);
});
