//! Any bytes into the superblock copy decoder, for both slots: no panic, and whatever decodes
//! re-encodes to the same bytes. Each input is decoded twice: as given (almost always a checksum
//! mismatch) and with its checksum resealed, so the fuzzer reaches the checks behind it.
#![no_main]

use iggy_superblock::copy::{self, CHECKSUMMED_OFFSET, COPY_SIZE, Slot};
use libfuzzer_sys::fuzz_target;

fn check(bytes: &[u8]) {
    for slot in Slot::ALL {
        if let Ok((record, checksum)) = copy::decode(bytes, slot) {
            assert_eq!(&copy::encode(&record, slot)[..], &bytes[..COPY_SIZE]);
            assert_eq!(copy::record_checksum(&record), checksum);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    check(data);
    // Short inputs are padded with zeros (the reserved tail of a real copy is zero anyway).
    let mut sealed = data.to_vec();
    sealed.resize(sealed.len().max(COPY_SIZE), 0);
    let sum = iggy_format::checksum(&sealed[CHECKSUMMED_OFFSET..COPY_SIZE]);
    sealed[..16].copy_from_slice(&sum.to_le_bytes());
    check(&sealed);
});
