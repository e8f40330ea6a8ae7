//! Any bytes into the 256-byte header decoder: no panic, and whatever decodes re-encodes to the
//! same bytes (a decoder that accepts two encodings of one header would break the hash chain).
#![no_main]

use iggy_format::Header;
use iggy_format::constants::HEADER_SIZE;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(header) = Header::decode(data) {
        assert_eq!(&header.encode()[..], &data[..HEADER_SIZE]);
    }
    if let Some(bytes) = data.get(..HEADER_SIZE).and_then(|b| <&[u8; HEADER_SIZE]>::try_from(b).ok()) {
        let _ = Header::decode_unverified(bytes);
    }
});
