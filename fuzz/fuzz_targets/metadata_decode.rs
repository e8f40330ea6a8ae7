//! Any bytes into the metadata payload, op and reply decoders: no panic, no allocation beyond what the
//! bytes justify (a count larger than the bytes could hold is refused first), and whatever
//! decodes re-encodes to the same bytes.
#![no_main]

use iggy_metadata::codec;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(state) = codec::decode(codec::PAYLOAD_VERSION, data) {
        assert_eq!(codec::encode(&state), data);
    }
    if let Ok(op) = codec::decode_op(data) {
        assert_eq!(codec::encode_op(&op).expect("a decoded op encodes"), data);
    }
    let _ = codec::decode_reply(data);
});
