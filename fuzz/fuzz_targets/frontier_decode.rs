//! Any bytes into the WAL frontier slot decoder, for both slots: no panic, and whatever decodes
//! re-encodes to the same bytes. Inputs are also decoded with their checksum resealed (short ones
//! padded with zeros), so the fuzzer reaches the checks behind the checksum.
#![no_main]

use iggy_wal::frontier::{self, SLOT_SIZE};
use libfuzzer_sys::fuzz_target;

fn check(bytes: &[u8]) {
    for slot in [0, 1] {
        if let Ok(decoded) = frontier::decode(bytes, slot) {
            // Version 1 is read too; this build writes its own version.
            if bytes[40..42] == frontier::VERSION.to_le_bytes() {
                assert_eq!(&frontier::encode(&decoded)[..], &bytes[..SLOT_SIZE]);
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    check(data);
    let mut sealed = data.to_vec();
    sealed.resize(sealed.len().max(SLOT_SIZE), 0);
    let sum = iggy_format::checksum(&sealed[32..SLOT_SIZE]);
    sealed[..16].copy_from_slice(&sum.to_le_bytes());
    check(&sealed);
    // And with the magic planted too, so the fuzzer reaches the checks behind it.
    sealed[32..40].copy_from_slice(&frontier::MAGIC.to_le_bytes());
    let sum = iggy_format::checksum(&sealed[32..SLOT_SIZE]);
    sealed[..16].copy_from_slice(&sum.to_le_bytes());
    check(&sealed);
});
