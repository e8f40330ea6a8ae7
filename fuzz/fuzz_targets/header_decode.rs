//! Any bytes into the 256-byte header decoder: no panic, and whatever decodes re-encodes to the
//! same bytes (a decoder that accepts two encodings of one header would break the hash chain).
//! Each input is decoded as given and with its checksum resealed, so the fuzzer reaches the
//! checks behind the checksum.
#![no_main]

use iggy_format::Header;
use iggy_format::constants::HEADER_SIZE;
use iggy_format::header::CHECKSUMMED_OFFSET;
use libfuzzer_sys::fuzz_target;

fn check(bytes: &[u8]) {
    if let Ok(header) = Header::decode(bytes) {
        assert_eq!(&header.encode()[..], &bytes[..HEADER_SIZE]);
    }
}

fuzz_target!(|data: &[u8]| {
    check(data);
    if let Some(bytes) = data.get(..HEADER_SIZE) {
        let mut sealed: [u8; HEADER_SIZE] = bytes.try_into().expect("sliced to size");
        let _ = Header::decode_unverified(&sealed);
        let sum = iggy_format::checksum(&sealed[CHECKSUMMED_OFFSET..]);
        sealed[..16].copy_from_slice(&sum.to_le_bytes());
        check(&sealed);
    }
});
