//! Any bytes into the message batch decoder: no panic; whatever decodes re-encodes (from its
//! messages) to the same frames; and a batch built from the fuzz input as payloads round-trips
//! (so the fuzzer also drives valid batches, which raw bytes almost never are).
#![no_main]

use iggy_format::batch::{self, NewMessage};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(decoded) = batch::decode(data) {
        let messages: Vec<NewMessage> = decoded
            .messages()
            .map(|m| NewMessage {
                id: m.id,
                timestamp_delta: m.timestamp_delta,
                payload: m.payload.to_vec(),
                user_headers: m.user_headers.to_vec(),
            })
            .collect();
        let again = batch::encode(decoded.header.origin_timestamp, &messages).expect("encodes");
        assert_eq!(&again[256..], &data[256..], "frames re-encode to the same bytes");
    }
    let messages: Vec<NewMessage> = data
        .chunks(64)
        .take(64)
        .enumerate()
        .map(|(i, chunk)| NewMessage {
            id: i as u128,
            timestamp_delta: chunk.len() as u32,
            payload: chunk.to_vec(),
            user_headers: chunk.get(..chunk.len() / 4).unwrap_or_default().to_vec(),
        })
        .collect();
    if let Ok(mut bytes) = batch::encode(7, &messages) {
        let header = batch::stamp(&mut bytes, 1, 2, 3).expect("a fresh batch stamps");
        assert_eq!(header.message_count as usize, messages.len());
    }
});
