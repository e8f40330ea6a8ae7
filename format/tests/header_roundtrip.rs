//! Property tests of the 256-byte entry header: every encodable header round-trips, and every
//! single-bit flip of an encoded header is rejected.

#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    reason = "test code: a failed unwrap is a failed test; casts are of small test values"
)]

use iggy_format::constants::HEADER_SIZE;
use iggy_format::{Command, Header};
use proptest::prelude::*;

fn any_header() -> impl Strategy<Value = Header> {
    (
        (
            any::<u128>(),
            any::<u128>(),
            any::<u128>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
        ),
        (
            any::<u32>(),
            256u32..=u32::MAX, // HEADER_SIZE and up
            1u8..=255,
            any::<u8>(),
            any::<u32>(),
        ),
        (any::<u128>(), any::<u64>(), any::<u128>(), any::<u128>()),
    )
        .prop_map(
            |(
                (checksum_body, parent, cluster, op, commit, timestamp_ns),
                (view, size, command, replica, operation),
                (client, request, request_checksum, group),
            )| Header {
                checksum_body,
                parent,
                cluster,
                op,
                commit,
                timestamp_ns,
                view,
                size,
                command: Command::from_u8(command),
                replica,
                operation,
                client,
                request,
                request_checksum,
                group,
            },
        )
}

proptest! {
    #[test]
    fn encode_then_decode_is_identity(header in any_header()) {
        let bytes = header.encode();
        prop_assert_eq!(Header::decode(&bytes), Ok(header));
        prop_assert_eq!(header.checksum(), iggy_format::header::stored_checksum(&bytes));
    }

    #[test]
    fn any_single_bit_flip_is_rejected(header in any_header(), bit in 0usize..HEADER_SIZE * 8) {
        let mut bytes = header.encode();
        bytes[bit / 8] ^= 1 << (bit % 8);
        prop_assert!(Header::decode(&bytes).is_err(), "flip of bit {} accepted", bit);
    }

    #[test]
    fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = Header::decode(&bytes);
    }
}
