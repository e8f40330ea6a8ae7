//! Any bytes into the segment index decoder: no panic, no allocation beyond the bytes given, and
//! whatever decodes as the current version with its summary re-encodes to the same bytes. Inputs are also decoded with the magic planted
//! and the checksum resealed, so the fuzzer reaches the checks behind them.
#![no_main]

use iggy_segments::index;
use libfuzzer_sys::fuzz_target;

fn check(bytes: &[u8]) {
    let start = bytes
        .get(32..40)
        .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or_default()));
    if let Ok(file) = index::decode(bytes, start)
        && file.version == index::VERSION
        && let Some(summary) = &file.summary
    {
        assert_eq!(
            index::encode(start, file.interval_bytes, &file.entries, summary),
            bytes
        );
    }
}

fuzz_target!(|data: &[u8]| {
    check(data);
    if data.len() >= index::HEADER_SIZE {
        let mut sealed = data.to_vec();
        sealed[16..24].copy_from_slice(&index::MAGIC.to_le_bytes());
        let sum = iggy_format::checksum(&sealed[16..]);
        sealed[..16].copy_from_slice(&sum.to_le_bytes());
        check(&sealed);
    }
});
