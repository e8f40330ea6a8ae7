//! Any bytes into the superblock copy decoder, for both slots: no panic, and whatever decodes
//! re-encodes to the same bytes.
#![no_main]

use iggy_superblock::copy::{self, COPY_SIZE, Slot};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for slot in Slot::ALL {
        if let Ok((record, checksum)) = copy::decode(data, slot) {
            assert_eq!(&copy::encode(&record, slot)[..], &data[..COPY_SIZE]);
            assert_eq!(copy::record_checksum(&record), checksum);
        }
    }
});
