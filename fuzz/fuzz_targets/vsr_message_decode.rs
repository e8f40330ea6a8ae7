//! Any bytes into the replica bus decoder: no panic, and whatever decodes re-encodes to the
//! same bytes (one encoding per message). Each input is decoded as given and again with its
//! size, body checksum and header checksum made right, so the fuzzer reaches the checks of
//! each command behind the checksums.
#![no_main]

use iggy_vsr::Message;
use libfuzzer_sys::fuzz_target;

const HEADER_SIZE: usize = 256;
const SIZE_OFFSET: usize = 92;

fn check(bytes: &[u8]) {
    if let Ok(message) = Message::decode(bytes) {
        assert_eq!(message.encode(), bytes, "{}", message.summary());
    }
}

fuzz_target!(|data: &[u8]| {
    check(data);
    if data.len() >= HEADER_SIZE && data.len() < 1 << 20 {
        let mut sealed = data.to_vec();
        let size = u32::try_from(sealed.len()).expect("under 1 MiB");
        sealed[SIZE_OFFSET..SIZE_OFFSET + 4].copy_from_slice(&size.to_le_bytes());
        let body = iggy_format::checksum(&sealed[HEADER_SIZE..]);
        sealed[16..32].copy_from_slice(&body.to_le_bytes());
        let header = iggy_format::checksum(&sealed[16..HEADER_SIZE]);
        sealed[..16].copy_from_slice(&header.to_le_bytes());
        check(&sealed);
    }
});
