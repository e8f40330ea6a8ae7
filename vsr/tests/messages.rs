//! The message codec: every message round-trips, each decode refusal has its reason, and a sealed
//! frame with any one bit flipped is refused (never decoded as another message).
#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    reason = "test code: a failed unwrap is a failed test; casts are of small test values"
)]

use iggy_format::{Header, Position, PrepareMeta, operation};
use iggy_vsr::message::{DecodeError, From, Message, ReplyStatus, SnapshotRef, ViewHeader};
use proptest::prelude::*;

fn from(replica: u8, view: u32) -> From {
    From {
        cluster: 0xC1,
        group: 1 << 96 | 7,
        replica,
        view,
    }
}

fn prepare(op: u64, body: &[u8]) -> Header {
    Header::prepare(
        Position {
            cluster: 0xC1,
            group: 1 << 96 | 7,
            after: op - 1,
            parent: u128::from(op) * 31,
        },
        operation::MESSAGES,
        &PrepareMeta {
            view: 3,
            commit: op.saturating_sub(2),
            replica: 0,
            client: 0xAB,
            request: op,
            request_checksum: 5,
            now_us: 1_000,
        },
        body,
    )
    .unwrap()
}

/// One message of every kind.
fn every_kind() -> Vec<Message> {
    let headers: Vec<Header> = (5..9).map(|op| prepare(op, &[op as u8; 10])).collect();
    vec![
        Message::Prepare {
            header: prepare(9, b"payload"),
            body: b"payload".to_vec(),
        },
        Message::PrepareOk {
            from: from(1, 3),
            op: 9,
            checksum: 77,
        },
        Message::Commit {
            from: from(0, 3),
            commit: 8,
            checksum: 99,
        },
        Message::StartViewChange { from: from(2, 4) },
        Message::DoViewChange {
            from: from(2, 4),
            log_view: 3,
            op: 8,
            commit: 4,
            commit_checksum: 12,
            headers: headers
                .iter()
                .enumerate()
                .map(|(i, h)| ViewHeader {
                    header: *h,
                    present: i % 2 == 0,
                    nack: i == 3,
                })
                .collect(),
            forgotten_view: Some(2),
            forgotten_bound: Some(11),
        },
        Message::StartView {
            from: from(1, 4),
            op: 8,
            commit: 4,
            commit_checksum: 12,
            nonce: 0xFEED,
            headers,
        },
        Message::RequestStartView {
            from: from(2, 3),
            nonce: 0xFEED,
        },
        Message::RequestPrepares {
            from: from(2, 4),
            first: 3,
            last: 40,
        },
        Message::RangeEvicted {
            from: from(1, 4),
            oldest: 17,
        },
        Message::RequestSnapshot {
            from: from(2, 4),
            offset: 256 << 10,
        },
        Message::SnapshotChunk {
            from: from(0, 4),
            snapshot: SnapshotRef {
                op: 960,
                checksum: 0x5EED,
                trailer: 0x7A11,
                length: 300_000,
            },
            offset: 256 << 10,
            bytes: vec![3; 300_000 - (256 << 10)],
        },
        Message::SnapshotChunk {
            from: from(1, 4),
            snapshot: SnapshotRef::default(),
            offset: 0,
            bytes: Vec::new(),
        },
        Message::ReadIndex {
            from: from(2, 4),
            nonce: 0x51,
        },
        Message::ReadIndexOk {
            from: from(1, 4),
            nonce: 0x51,
            commit: 30,
            checksum: 0xC0FFEE,
        },
        Message::ReadRound {
            from: from(1, 4),
            nonce: 9,
        },
        Message::ReadRoundOk {
            from: from(0, 4),
            nonce: 9,
        },
        Message::Ping {
            from: from(2, 4),
            hears: 0b101,
        },
        Message::Request {
            cluster: 0xC1,
            group: 0,
            client: 0xAB,
            request: 12,
            operation: operation::METADATA,
            body: b"create stream".to_vec(),
        },
        Message::Reply {
            from: from(1, 4),
            client: 0xAB,
            request: 12,
            op: 30,
            status: ReplyStatus::NotAccepted,
            body: Vec::new(),
        },
        Message::Reply {
            from: from(1, 4),
            client: 0xAB,
            request: 12,
            op: 0,
            status: ReplyStatus::Reused,
            body: Vec::new(),
        },
    ]
}

#[test]
fn every_message_round_trips() {
    for message in every_kind() {
        let bytes = message.encode();
        assert_eq!(
            Message::decode(&bytes),
            Ok(message.clone()),
            "{}",
            message.name()
        );
        assert_eq!(
            u32::from_le_bytes(bytes[92..96].try_into().unwrap()) as usize,
            bytes.len(),
            "size at byte 92"
        );
        assert_eq!(bytes[98], message.command(), "command at byte 98");
    }
}

/// A transport writes `encode_parts` (a prepare's header, then its body where it lies) and
/// reads a frame as its header and its body (`decode_parts`): the same bytes as `encode`, the
/// same message as `decode`, and a prepare whose body does not match its header is refused.
#[test]
fn every_message_round_trips_in_two_parts() {
    for message in every_kind() {
        let (head, rest) = message.encode_parts();
        let mut bytes = head.clone();
        bytes.extend_from_slice(rest);
        assert_eq!(bytes, message.encode(), "{}", message.name());
        let header: [u8; 256] = bytes[..256].try_into().unwrap();
        assert_eq!(
            Message::decode_parts(&header, bytes[256..].to_vec()),
            Ok(message.clone()),
            "{}",
            message.name()
        );
        if let Message::Prepare { .. } = message {
            assert_eq!(
                head.len(),
                256,
                "a prepare's body is not copied behind its header"
            );
            let mut body = bytes[256..].to_vec();
            if let Some(byte) = body.last_mut() {
                *byte ^= 1;
                assert!(
                    Message::decode_parts(&header, body).is_err(),
                    "a flipped body bit"
                );
            }
        }
        if bytes.len() > 256 {
            assert!(
                Message::decode_parts(&header, bytes[256..bytes.len() - 1].to_vec()).is_err(),
                "{}: a body one byte short",
                message.name()
            );
        }
    }
}

#[test]
fn any_flipped_bit_of_a_sealed_frame_is_refused() {
    for message in every_kind() {
        let bytes = message.encode();
        for bit in 0..bytes.len() * 8 {
            let mut flipped = bytes.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            assert!(
                Message::decode(&flipped).is_err(),
                "{}: bit {bit} flipped still decodes",
                message.name()
            );
        }
    }
}

#[test]
fn each_refusal_has_its_reason() {
    let message = Message::Commit {
        from: from(0, 3),
        commit: 8,
        checksum: 99,
    };
    let bytes = message.encode();
    assert_eq!(
        Message::decode(&bytes[..100]),
        Err(DecodeError::Truncated { len: 100 })
    );
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(matches!(
        Message::decode(&longer),
        Err(DecodeError::Size { .. })
    ));
    let reseal = |mut bytes: Vec<u8>| {
        let sum = iggy_format::checksum(&bytes[16..256]);
        bytes[..16].copy_from_slice(&sum.to_le_bytes());
        bytes
    };
    let mut version = bytes.clone();
    version[96] = 9;
    assert_eq!(
        Message::decode(&reseal(version)),
        Err(DecodeError::Version(9))
    );
    let mut command = bytes.clone();
    command[98] = 77;
    assert_eq!(
        Message::decode(&reseal(command)),
        Err(DecodeError::Command(77))
    );
    let mut reserved = bytes.clone();
    reserved[200] = 1;
    assert_eq!(
        Message::decode(&reseal(reserved)),
        Err(DecodeError::Reserved { offset: 200 })
    );
    let mut unused = bytes.clone();
    unused[136] = 1; // a nonce on a commit
    assert!(matches!(
        Message::decode(&reseal(unused)),
        Err(DecodeError::Invalid(_))
    ));
    let mut checksum = bytes;
    checksum[70] ^= 1;
    assert_eq!(Message::decode(&checksum), Err(DecodeError::Checksum));
    // A view change that says it forgot a view after its own log_view.
    let dvc = |forgotten_view| Message::DoViewChange {
        from: from(1, 5),
        log_view: 3,
        op: 0,
        commit: 0,
        commit_checksum: 0,
        headers: Vec::new(),
        forgotten_view,
        forgotten_bound: None,
    };
    let mut later = dvc(Some(3)).encode();
    assert_eq!(Message::decode(&later), Ok(dvc(Some(3))));
    later[136] = 5; // forgotten view 4 > log_view 3
    assert_eq!(
        Message::decode(&reseal(later)),
        Err(DecodeError::Invalid(
            "a forgotten view after the log_view of a view change"
        ))
    );
    // An acknowledgment bound (request, byte 80) with nothing forgotten.
    let mut unforgetting = dvc(None).encode();
    unforgetting[80] = 9;
    assert_eq!(
        Message::decode(&reseal(unforgetting)),
        Err(DecodeError::Invalid(
            "an acknowledgment bound without a forgotten view"
        ))
    );
}

/// A snapshot chunk must lie within its snapshot, be at most 256 KiB and not be empty; a chunk
/// of no snapshot carries nothing.
#[test]
fn a_misshapen_snapshot_chunk_is_refused() {
    let snapshot = SnapshotRef {
        op: 960,
        checksum: 1,
        trailer: 2,
        length: 1_000,
    };
    let chunk = |snapshot: SnapshotRef, offset: u64, len: usize| Message::SnapshotChunk {
        from: from(0, 1),
        snapshot,
        offset,
        bytes: vec![9; len],
    };
    let refused = |message: Message| {
        matches!(
            Message::decode(&message.encode()),
            Err(DecodeError::Invalid(_))
        )
    };
    assert!(Message::decode(&chunk(snapshot, 0, 1_000).encode()).is_ok());
    assert!(refused(chunk(snapshot, 1, 1_000)), "past the end");
    assert!(refused(chunk(snapshot, 0, 0)), "empty");
    let big = SnapshotRef {
        length: 1 << 20,
        ..snapshot
    };
    assert!(refused(chunk(big, 0, (256 << 10) + 1)), "over 256 KiB");
    assert!(
        refused(chunk(SnapshotRef::default(), 0, 5)),
        "bytes of no snapshot"
    );
    assert!(
        refused(chunk(SnapshotRef::default(), 7, 0)),
        "an offset into no snapshot"
    );
}

proptest! {
    /// Any bytes: no panic; whatever decodes re-encodes to the same bytes.
    #[test]
    fn decoding_any_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        if let Ok(message) = Message::decode(&bytes) {
            prop_assert_eq!(message.encode(), bytes);
        }
    }
}

proptest! {
    /// The primary checksums a request without building its frame (`request_checksum`): the
    /// same value as the frame's own checksum, which a reply echoes and the client table keeps
    /// (a different value would take every retry after an upgrade for a reused number).
    #[test]
    fn a_request_checksum_is_its_frames(
        client in 1u128..,
        request in any::<u64>(),
        operation in any::<u32>(),
        body in proptest::collection::vec(any::<u8>(), 0..600),
    ) {
        let message = Message::Request {
            cluster: 0xC1,
            group: 1 << 96 | 7,
            client,
            request,
            operation,
            body: body.clone(),
        };
        prop_assert_eq!(
            iggy_vsr::message::request_checksum(0xC1, 1 << 96 | 7, (client, request), operation, &body),
            iggy_vsr::message::frame_checksum(&message.encode())
        );
    }
}
