//! Property tests of the message batch: random batches round-trip, survive the server's stamp,
//! and any single bit flip anywhere in a batch is detected.
#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    reason = "test code: a failed unwrap is a failed test; casts are of small test values"
)]

use iggy_format::batch::{self, NewMessage};
use proptest::prelude::*;

fn any_message() -> impl Strategy<Value = NewMessage> {
    (
        any::<u128>(),
        any::<u32>(),
        proptest::collection::vec(any::<u8>(), 0..200),
        proptest::collection::vec(any::<u8>(), 0..40),
    )
        .prop_map(|(id, timestamp_delta, payload, user_headers)| NewMessage {
            id,
            timestamp_delta,
            payload,
            user_headers,
        })
}

fn any_batch() -> impl Strategy<Value = (u64, Vec<NewMessage>)> {
    (any::<u64>(), proptest::collection::vec(any_message(), 1..8))
}

proptest! {
    #[test]
    fn random_batches_round_trip((origin, messages) in any_batch(), stamp in any::<(u64, u64, u64)>()) {
        let mut bytes = batch::encode(origin, &messages).unwrap();
        for pass in 0..2 {
            let decoded = batch::decode(&bytes).unwrap();
            prop_assert_eq!(decoded.header.origin_timestamp, origin);
            prop_assert_eq!(decoded.header.message_count as usize, messages.len());
            for (index, (got, want)) in decoded.messages().zip(&messages).enumerate() {
                prop_assert_eq!(got.id, want.id);
                prop_assert_eq!(got.offset_delta as usize, index);
                prop_assert_eq!(got.timestamp_delta, want.timestamp_delta);
                prop_assert_eq!(got.payload, &want.payload[..]);
                prop_assert_eq!(got.user_headers, &want.user_headers[..]);
            }
            if pass == 0 {
                let header = batch::stamp(&mut bytes, stamp.0, stamp.1, stamp.2).unwrap();
                prop_assert_eq!((header.partition_id, header.base_offset, header.base_timestamp), stamp);
            }
        }
    }

    #[test]
    fn any_single_bit_flip_is_detected((origin, messages) in any_batch(), bit in any::<proptest::sample::Index>()) {
        let mut bytes = batch::encode(origin, &messages).unwrap();
        let bit = bit.index(bytes.len() * 8);
        bytes[bit / 8] ^= 1 << (bit % 8);
        prop_assert!(batch::decode(&bytes).is_err(), "flip of bit {} accepted", bit);
    }

    #[test]
    fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..2000)) {
        let _ = batch::decode(&bytes);
    }
}
