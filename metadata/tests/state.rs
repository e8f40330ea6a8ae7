//! The metadata state machine: validation (a refused op changes nothing), leader spread, the
//! client table, and the payload codec (round trips through snapshot.bin, refusals).
#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    reason = "test code: a failed unwrap is a failed test; casts are of small test values"
)]

use std::path::Path;

use iggy_metadata::codec::{self, DecodeError, PAYLOAD_VERSION};
use iggy_metadata::{Applied, ApplyError, Durability, Op, Retention, State};
use proptest::prelude::*;

fn topic(stream: u32, name: &str, partitions: u32) -> Op {
    topic_with(stream, name, partitions, 3, 1 << 30)
}

fn topic_with(
    stream: u32,
    name: &str,
    partitions: u32,
    replication_factor: u8,
    segment_size_bytes: u64,
) -> Op {
    Op::CreateTopic {
        stream,
        name: name.into(),
        partitions,
        durability: Durability::Replicated,
        segment_size_bytes,
        retention: Retention::default(),
        replication_factor,
    }
}

#[test]
fn refused_ops_change_nothing_and_each_has_its_reason() {
    let mut state = State::new(3);
    assert_eq!(
        state.apply(&Op::CreateStream {
            name: "orders".into()
        }),
        Ok(Applied::Stream(1))
    );
    assert_eq!(state.apply(&topic(1, "eu", 6)), Ok(Applied::Topic(1)));
    let before = state.clone();
    let refusals = [
        (
            Op::CreateStream {
                name: "orders".into(),
            },
            "duplicate stream",
        ),
        (
            Op::CreateStream {
                name: String::new(),
            },
            "empty name",
        ),
        (
            Op::CreateStream {
                name: "x".repeat(256),
            },
            "long name",
        ),
        (topic(9, "eu", 1), "unknown stream"),
        (topic(1, "eu", 1), "duplicate topic"),
        (
            topic_with(1, "us", 1, 4, 1 << 30),
            "replication factor past the cluster",
        ),
        (topic_with(1, "us", 1, 3, 0), "segment size 0"),
        (topic(1, "huge", 200_000), "too many partitions"),
        (
            Op::DeleteTopic {
                stream: 1,
                topic: 5,
            },
            "unknown topic",
        ),
        (
            Op::DeleteConsumerGroup {
                stream: 1,
                topic: 1,
                group: 3,
            },
            "unknown group",
        ),
        (
            Op::RecordReply {
                client: 7,
                session: 1,
                request: 1,
                reply_checksum: 0,
            },
            "no session",
        ),
    ];
    for (op, why) in refusals {
        assert!(state.apply(&op).is_err(), "{why} was accepted");
        assert_eq!(state, before, "{why} changed the state");
    }
}

#[test]
fn partition_leaders_are_spread_over_the_replicas() {
    let mut state = State::new(3);
    state.apply(&Op::CreateStream { name: "s".into() }).unwrap();
    state.apply(&topic(1, "t", 30)).unwrap();
    assert_eq!(
        state.apply(&Op::CreatePartitions {
            stream: 1,
            topic: 1,
            count: 3
        }),
        Ok(Applied::Partitions {
            first: 31,
            count: 3
        })
    );
    let mut per_replica = [0usize; 3];
    for partition in &state.streams[&1].topics[&1].partitions {
        per_replica[usize::from(partition.leader)] += 1;
    }
    assert_eq!(per_replica, [11, 11, 11]);
    assert_eq!(state.partition_count, 33);
    state.apply(&Op::DeleteStream { stream: 1 }).unwrap();
    assert_eq!(state.partition_count, 0);
}

#[test]
fn the_client_table_makes_requests_at_most_once() {
    let mut state = State::new(1);
    state
        .apply(&Op::RegisterClient {
            client: 7,
            session: 2,
        })
        .unwrap();
    let reply = Op::RecordReply {
        client: 7,
        session: 2,
        request: 1,
        reply_checksum: 0xAB,
    };
    assert_eq!(state.apply(&reply), Ok(Applied::Client));
    assert_eq!(
        state.apply(&Op::RecordReply {
            client: 7,
            session: 2,
            request: 1,
            reply_checksum: 0xCD
        }),
        Ok(Applied::Duplicate {
            reply_checksum: 0xAB
        }),
        "a retried request gets the first reply, not a second execution"
    );
    assert_eq!(
        state.apply(&Op::RegisterClient {
            client: 7,
            session: 1
        }),
        Err(ApplyError::StaleSession {
            client: 7,
            session: 1
        })
    );
    state
        .apply(&Op::RegisterClient {
            client: 7,
            session: 3,
        })
        .unwrap();
    assert_eq!(
        state.clients[&7].last_request, 0,
        "a new session starts afresh"
    );
}

#[test]
fn decode_refuses_with_the_offset() {
    let mut state = State::new(3);
    state.apply(&Op::CreateStream { name: "s".into() }).unwrap();
    state.apply(&topic(1, "t", 2)).unwrap();
    state
        .apply(&Op::RegisterClient {
            client: 1,
            session: 1,
        })
        .unwrap();
    let bytes = codec::encode(&state);
    assert_eq!(codec::decode(PAYLOAD_VERSION, &bytes).unwrap(), state);
    assert_eq!(
        codec::decode(2, &bytes),
        Err(DecodeError::UnknownVersion(2))
    );
    let mut trailing = bytes.clone();
    trailing.push(0);
    assert!(matches!(
        codec::decode(1, &trailing),
        Err(DecodeError::Invalid { .. })
    ));
    assert!(codec::decode(1, &bytes[..bytes.len() - 1]).is_err());
    // A count far larger than the bytes could hold is refused before anything is built.
    let mut huge = bytes.clone();
    huge[5..9].copy_from_slice(&u32::MAX.to_le_bytes());
    match codec::decode(1, &huge) {
        Err(DecodeError::Invalid { offset: 9, reason }) => {
            assert!(reason.contains("cannot fit"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
}

fn any_op() -> impl Strategy<Value = Op> {
    let name = "[a-c]{1,3}";
    prop_oneof![
        name.prop_map(|name| Op::CreateStream { name }),
        (1u32..5).prop_map(|stream| Op::DeleteStream { stream }),
        (1u32..5, name, 0u32..6, any::<bool>(), 1u8..4).prop_map(
            |(stream, name, partitions, persisted, replication_factor)| {
                Op::CreateTopic {
                    stream,
                    name,
                    partitions,
                    durability: if persisted {
                        Durability::Persisted
                    } else {
                        Durability::Replicated
                    },
                    segment_size_bytes: 1 << 20,
                    retention: Retention {
                        max_age_seconds: 60,
                        max_bytes: 1 << 30,
                    },
                    replication_factor,
                }
            }
        ),
        (1u32..5, 1u32..4).prop_map(|(stream, topic)| Op::DeleteTopic { stream, topic }),
        (1u32..5, 1u32..4, 1u32..4).prop_map(|(stream, topic, count)| Op::CreatePartitions {
            stream,
            topic,
            count
        }),
        (1u32..5, 1u32..4, name).prop_map(|(stream, topic, name)| Op::CreateConsumerGroup {
            stream,
            topic,
            name
        }),
        (1u32..5, 1u32..4, 1u32..4).prop_map(|(stream, topic, group)| Op::DeleteConsumerGroup {
            stream,
            topic,
            group
        }),
        (0u128..4, 1u64..4).prop_map(|(client, session)| Op::RegisterClient { client, session }),
        (0u128..4, 1u64..4, 1u64..10, any::<u128>()).prop_map(
            |(client, session, request, reply_checksum)| {
                Op::RecordReply {
                    client,
                    session,
                    request,
                    reply_checksum,
                }
            }
        ),
    ]
}

proptest! {
    /// Any op sequence gives a state that survives encoding and a snapshot.bin round trip, and
    /// replaying the same ops gives the same state (determinism).
    #[test]
    fn states_survive_a_snapshot_round_trip(ops in proptest::collection::vec(any_op(), 0..60)) {
        let mut state = State::new(3);
        let mut again = State::new(3);
        for op in &ops {
            let first = state.apply(op);
            prop_assert_eq!(first, again.apply(op));
        }
        prop_assert_eq!(&state, &again);
        let payload = codec::encode(&state);
        prop_assert_eq!(&codec::decode(PAYLOAD_VERSION, &payload).unwrap(), &state);

        prop_assert!(ops.iter().all(|op| codec::encode_op(op).map(|body| codec::decode_op(&body) == Ok(op.clone())).unwrap_or(true)));
        let storage = iggy_io::SimStorage::new(1);
        iggy_io::Storage::create_dir(&storage, "metadata").unwrap();
        iggy_snapshot::write(&storage, Path::new("metadata"), ops.len() as u64, 9, PAYLOAD_VERSION, &payload).unwrap();
        let (header, body) = iggy_snapshot::read(&storage, Path::new("metadata")).unwrap().unwrap();
        prop_assert_eq!(codec::decode(header.payload_version, &body).unwrap(), state);
    }

    #[test]
    fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let _ = codec::decode(PAYLOAD_VERSION, &bytes);
    }
}
