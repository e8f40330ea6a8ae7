//! The metadata state machine: validation (a refused op changes nothing), leader spread, the
//! client table, and the payload codec (round trips through snapshot.bin, refusals).
#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    reason = "test code: a failed unwrap is a failed test; casts are of small test values"
)]

use std::path::Path;

use iggy_metadata::codec::{self, DecodeError, PAYLOAD_VERSION, Reply};
use iggy_metadata::{Applied, ApplyError, CLIENTS_MAX, Durability, Op, Retention, State};
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

/// A new partition's primary is the replica leading the fewest groups, the metadata group's
/// primary (its view at the create) counted, and deleted partitions give their share back.
#[test]
fn new_partitions_go_to_the_replica_leading_the_fewest_groups() {
    let leaders = |state: &State, stream: u32, topic: u32| -> Vec<u8> {
        state.streams[&stream].topics[&topic]
            .partitions
            .iter()
            .map(|p| p.leader)
            .collect()
    };
    let mut state = State::new(3);
    state.apply(&Op::CreateStream { name: "s".into() }).unwrap();
    // View 0: the metadata group's primary is replica 0, so the first partition goes to 1.
    state.apply(&topic(1, "a", 4)).unwrap();
    assert_eq!(leaders(&state, 1, 1), [1, 2, 0, 1]);
    assert_eq!(state.primaries, [1, 2, 1]);
    // Prepared in view 2: the metadata primary is replica 2 now, which counts against it.
    state.apply_in_view(&topic(1, "b", 2), 2).unwrap();
    assert_eq!(leaders(&state, 1, 2), [0, 0]);
    assert_eq!(state.primaries, [3, 2, 1]);
    state
        .apply(&Op::DeleteTopic {
            stream: 1,
            topic: 1,
        })
        .unwrap();
    assert_eq!(state.primaries, [2, 0, 0]);
    state.apply(&topic(1, "c", 3)).unwrap();
    assert_eq!(leaders(&state, 1, 3), [1, 2, 1]);
    // The counts survive a snapshot: decoding recomputes them from the leaders it holds.
    let decoded = iggy_metadata::codec::decode(
        iggy_metadata::codec::PAYLOAD_VERSION,
        &iggy_metadata::codec::encode(&state),
    )
    .unwrap();
    assert_eq!(decoded, state);
}

#[test]
fn the_client_table_makes_requests_at_most_once() {
    let mut state = State::new(1);
    let register = |session| Op::RegisterClient { client: 7, session };
    assert!(state.execute(1, 7, 0, &register(2)).result.unwrap().is_ok());
    let first = state.execute(2, 7, 1, &Op::CreateStream { name: "a".into() });
    assert_eq!(first.result, Some(Ok(Applied::Stream(1))));
    assert_eq!(
        codec::decode_reply(&first.reply),
        Ok(Reply::Applied(Applied::Stream(1)))
    );
    // The same request number again, even carrying another op: the first reply, byte for
    // byte, and nothing applied.
    let before = state.clone();
    let again = state.execute(3, 7, 1, &Op::CreateStream { name: "b".into() });
    assert_eq!(again.reply, first.reply);
    assert_eq!(again.result, None, "a duplicate is not executed");
    assert_eq!(state, before, "a duplicate changes nothing");
    // An older request is refused, changing nothing.
    state.execute(4, 7, 2, &Op::CreateStream { name: "c".into() });
    let stale = state.execute(5, 7, 1, &Op::DeleteStream { stream: 1 });
    assert!(matches!(
        stale.result,
        Some(Err(ApplyError::StaleRequest { .. }))
    ));
    assert_eq!(state.streams.len(), 2);
    assert_ne!(stale.reply, first.reply);
    // A refused op is still the answer to its request: replayed as it was.
    let refused = state.execute(6, 7, 3, &Op::DeleteStream { stream: 99 });
    assert!(matches!(
        refused.result,
        Some(Err(ApplyError::UnknownStream(99)))
    ));
    assert_eq!(
        state
            .execute(7, 7, 3, &Op::DeleteStream { stream: 1 })
            .reply,
        refused.reply
    );
    assert_eq!(state.streams.len(), 2, "the replay did not delete stream 1");
    // A client without a session is told so.
    let unknown = state.execute(8, 8, 1, &Op::CreateStream { name: "d".into() });
    assert_eq!(
        unknown.result,
        Some(Err(ApplyError::NoSession { client: 8 }))
    );
    assert_eq!(
        state.apply(&register(1)),
        Err(ApplyError::StaleSession {
            client: 7,
            session: 1
        })
    );
    state.execute(9, 7, 0, &register(3));
    assert_eq!(
        state.clients[&7].last_request, 0,
        "a new session starts afresh"
    );
}

/// A full client table evicts the session whose last request is the oldest op, instead of
/// refusing the registration; the evicted client is told it has no session.
#[test]
fn a_full_client_table_evicts_the_least_recently_used_session() {
    let mut state = State::new(1);
    let max = u128::try_from(CLIENTS_MAX).unwrap();
    let mut op = 0u64;
    for client in 1..=max {
        op += 1;
        let done = state.execute(op, client, 0, &Op::RegisterClient { client, session: 1 });
        assert_eq!(done.result, Some(Ok(Applied::Client)));
    }
    // Client 1 registered first but is the most recent to send a request.
    op += 1;
    state.execute(op, 1, 1, &Op::CreateStream { name: "s".into() });
    op += 1;
    let newcomer = max + 1;
    let done = state.execute(
        op,
        newcomer,
        0,
        &Op::RegisterClient {
            client: newcomer,
            session: 1,
        },
    );
    assert_eq!(
        done.result,
        Some(Ok(Applied::Client)),
        "registration never fails for room"
    );
    assert_eq!(state.clients.len(), CLIENTS_MAX);
    assert!(
        state.clients.contains_key(&1),
        "a recently used session stays"
    );
    assert!(
        !state.clients.contains_key(&2),
        "the least recently used one goes"
    );
    op += 1;
    let evicted = state.execute(op, 2, 1, &Op::CreateStream { name: "t".into() });
    assert_eq!(
        evicted.result,
        Some(Err(ApplyError::NoSession { client: 2 }))
    );
    // Deterministic: the same ops give the same table (and snapshot) elsewhere.
    assert_eq!(
        codec::decode(PAYLOAD_VERSION, &codec::encode(&state)).unwrap(),
        state
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
        codec::decode(1, &bytes),
        Err(DecodeError::UnknownVersion(1)),
        "payload version 1 (sessions without reply bytes) is refused"
    );
    assert_eq!(
        codec::decode(PAYLOAD_VERSION + 1, &bytes),
        Err(DecodeError::UnknownVersion(PAYLOAD_VERSION + 1))
    );
    // Version 4 has no next partition id after each topic's partitions: read as one, this
    // payload's bytes are out of step.
    assert!(codec::decode(4, &bytes).is_err());
    // Version 2 has no request checksum after each session's reply: this payload's 16 bytes
    // of it are trailing bytes there.
    assert!(codec::decode(2, &bytes).is_err());
    let mut trailing = bytes.clone();
    trailing.push(0);
    assert!(matches!(
        codec::decode(PAYLOAD_VERSION, &trailing),
        Err(DecodeError::Invalid { .. })
    ));
    assert!(codec::decode(PAYLOAD_VERSION, &bytes[..bytes.len() - 1]).is_err());
    // A count far larger than the bytes could hold is refused before anything is built.
    let mut huge = bytes.clone();
    huge[5..9].copy_from_slice(&u32::MAX.to_le_bytes());
    match codec::decode(PAYLOAD_VERSION, &huge) {
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
        (1u32..5, name).prop_map(|(stream, name)| Op::UpdateStream { stream, name }),
        (1u32..5, 1u32..4, name, 0u64..3, 0u64..3).prop_map(|(stream, topic, name, age, bytes)| {
            Op::UpdateTopic {
                stream,
                topic,
                name,
                retention: Retention {
                    max_age_seconds: age,
                    max_bytes: bytes,
                },
            }
        }),
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
        (1u32..5, 1u32..4, 0u32..4).prop_map(|(stream, topic, count)| Op::DeletePartitions {
            stream,
            topic,
            count
        }),
        (1u32..5, 1u32..4).prop_map(|(stream, topic)| Op::PurgeTopic { stream, topic }),
        (1u32..5).prop_map(|stream| Op::PurgeStream { stream }),
        (1u32..5, 1u32..4, 1u32..8, 0u64..100).prop_map(|(stream, topic, partition, below)| {
            Op::DeleteSegments {
                stream,
                topic,
                partition,
                below,
            }
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
        (1u32..5, 1u32..4, 1u32..4, 0u128..4, 0u8..4, 0u64..3).prop_map(
            |(stream, topic, group, member, node, boot)| Op::JoinConsumerGroup {
                stream,
                topic,
                group,
                member,
                node,
                boot
            }
        ),
        (1u32..5, 1u32..4, 1u32..4, 0u128..4).prop_map(|(stream, topic, group, member)| {
            Op::LeaveConsumerGroup {
                stream,
                topic,
                group,
                member,
            }
        }),
        (0u128..4).prop_map(|member| Op::LeaveGroups { member }),
        (0u8..4, 0u64..4).prop_map(|(node, boot_before)| Op::DropNodeMembers { node, boot_before }),
        (
            name,
            0u8..4,
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..8))
        )
            .prop_map(|(username, status, permissions)| Op::CreateUser {
                username,
                password_hash: "$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA".into(),
                status,
                permissions,
            }),
        (1u32..4).prop_map(|user| Op::DeleteUser { user }),
        (
            1u32..4,
            proptest::option::of(name),
            proptest::option::of(0u8..4)
        )
            .prop_map(|(user, username, status)| Op::UpdateUser {
                user,
                username,
                status
            }),
        (
            1u32..4,
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..8))
        )
            .prop_map(|(user, permissions)| Op::UpdatePermissions { user, permissions }),
        (1u32..4, name).prop_map(|(user, password_hash)| Op::ChangePassword {
            user,
            password_hash
        }),
        (0u32..4, name, 0u64..3).prop_map(|(user, name, expiry_at)| Op::CreateToken {
            user,
            name,
            hash: "5e88489".into(),
            expiry_at
        }),
        (0u32..4, name).prop_map(|(user, name)| Op::DeleteToken { user, name }),
    ]
}

proptest! {
    /// Any op sequence gives a state that survives encoding and a snapshot.bin round trip, and
    /// replaying the same ops gives the same state (determinism).
    #[test]
    fn states_survive_a_snapshot_round_trip(ops in proptest::collection::vec((any_op(), 0u128..4, 0u64..6), 0..60)) {
        let mut state = State::new(3);
        let mut again = State::new(3);
        for (number, (op, client, request)) in ops.iter().enumerate() {
            let number = number as u64 + 1;
            let first = state.execute(number, *client, *request, op);
            prop_assert_eq!(first, again.execute(number, *client, *request, op));
        }
        prop_assert_eq!(&state, &again);
        let payload = codec::encode(&state);
        prop_assert_eq!(&codec::decode(PAYLOAD_VERSION, &payload).unwrap(), &state);

        prop_assert!(ops.iter().all(|(op, _, _)| codec::encode_op(op).map(|body| codec::decode_op(&body) == Ok(op.clone())).unwrap_or(true)));
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

/// Issue #47: a stream renamed keeps its id and topics; a name another stream holds, an unknown
/// stream and an empty name are refused and change nothing; the op round-trips through the log's
/// encoding.
#[test]
fn a_stream_is_renamed_in_place() {
    let mut state = State::new(3);
    for name in ["orders", "payments"] {
        state
            .apply(&Op::CreateStream { name: name.into() })
            .unwrap();
    }
    state.apply(&topic(1, "t", 2)).unwrap();
    let rename = |stream, name: &str| Op::UpdateStream {
        stream,
        name: name.into(),
    };
    assert_eq!(state.apply(&rename(1, "sales")), Ok(Applied::Stream(1)));
    assert_eq!(state.streams[&1].name, "sales");
    assert_eq!(state.streams[&1].topics.len(), 1);
    let before = state.clone();
    assert!(matches!(
        state.apply(&rename(1, "payments")),
        Err(ApplyError::DuplicateName { .. })
    ));
    assert_eq!(
        state.apply(&rename(9, "x")),
        Err(ApplyError::UnknownStream(9))
    );
    assert!(matches!(
        state.apply(&rename(1, "")),
        Err(ApplyError::NameLength { len: 0 })
    ));
    assert_eq!(state, before, "a refused rename changed the state");
    assert_eq!(
        state.apply(&rename(1, "sales")),
        Ok(Applied::Stream(1)),
        "its own name"
    );
    let op = rename(2, "refunds");
    assert_eq!(
        codec::decode_op(&codec::encode_op(&op).unwrap()).unwrap(),
        op
    );
}

/// Issue #47: a topic's update renames it and sets its retention; a name another topic of the
/// stream holds is refused and changes nothing; the op round-trips through the log's encoding.
#[test]
fn a_topic_is_updated_in_place() {
    let mut state = State::new(3);
    state.apply(&Op::CreateStream { name: "s".into() }).unwrap();
    state.apply(&topic(1, "a", 2)).unwrap();
    state.apply(&topic(1, "b", 1)).unwrap();
    let retention = Retention {
        max_age_seconds: 60,
        max_bytes: 1 << 20,
    };
    let update = |topic, name: &str| Op::UpdateTopic {
        stream: 1,
        topic,
        name: name.into(),
        retention,
    };
    assert_eq!(state.apply(&update(1, "c")), Ok(Applied::Topic(1)));
    let t = &state.streams[&1].topics[&1];
    assert_eq!(
        (t.name.as_str(), t.retention, t.partitions.len()),
        ("c", retention, 2)
    );
    let before = state.clone();
    assert!(matches!(
        state.apply(&update(1, "b")),
        Err(ApplyError::DuplicateName { .. })
    ));
    assert_eq!(
        state.apply(&update(7, "x")),
        Err(ApplyError::UnknownTopic(1, 7))
    );
    assert_eq!(state, before);
    let op = update(2, "d");
    assert_eq!(
        codec::decode_op(&codec::encode_op(&op).unwrap()).unwrap(),
        op
    );
}

/// Issue #47: consumer-group membership. Members take the partitions round-robin in member-id
/// order; every change of the split bumps the generation; a session leaves one group, all its
/// groups (its end), or goes with its node's restart; the members survive a snapshot round
/// trip (version 3 payloads, without members, are `tests/golden.rs`'s).
#[test]
fn consumer_group_members_split_the_partitions_and_leave() {
    let mut state = State::new(3);
    state.apply(&Op::CreateStream { name: "s".into() }).unwrap();
    state.apply(&topic(1, "t", 5)).unwrap();
    state
        .apply(&Op::CreateConsumerGroup {
            stream: 1,
            topic: 1,
            name: "g".into(),
        })
        .unwrap();
    let join = |member: u128, node: u8, boot: u64| Op::JoinConsumerGroup {
        stream: 1,
        topic: 1,
        group: 1,
        member,
        node,
        boot,
    };
    let group = |state: &State| state.streams[&1].topics[&1].groups[&1].clone();
    assert_eq!(state.apply(&join(0xa, 0, 100)), Ok(Applied::Group(1)));
    assert_eq!(group(&state).generation, 1);
    assert_eq!(
        group(&state).assignment(5).into_iter().collect::<Vec<_>>(),
        vec![(1, vec![1, 2, 3, 4, 5])]
    );
    // Joining again changes nothing (a replayed join, or the SDK joining twice).
    assert_eq!(state.apply(&join(0xa, 0, 100)), Ok(Applied::Group(1)));
    assert_eq!(group(&state).generation, 1);
    state.apply(&join(0xb, 1, 200)).unwrap();
    state.apply(&join(0xc, 0, 100)).unwrap();
    let split = group(&state).assignment(5);
    assert_eq!(split[&1], vec![1, 4]);
    assert_eq!(split[&2], vec![2, 5]);
    assert_eq!(split[&3], vec![3]);
    assert_eq!(group(&state).generation, 3);
    assert_eq!(state.memberships(0xb), vec![(1, 1, 1)]);
    // The fence's shortcuts agree with the whole split, whatever the partition count.
    for partitions in 0..8 {
        let g = group(&state);
        let split = g.assignment(partitions);
        for (member, held) in &split {
            assert_eq!(&g.partitions_of(*member, partitions), held);
            for partition in held {
                assert_eq!(g.holder(*partition), Some(*member));
            }
        }
    }
    assert_eq!(group(&state).partitions_of(99, 5), Vec::<u32>::new());
    // Snapshot round trip, members and all.
    assert_eq!(
        codec::decode(PAYLOAD_VERSION, &codec::encode(&state)).unwrap(),
        state
    );
    // A node outside the cluster cannot hold a member (its snapshot would not decode).
    assert!(state.apply(&join(0xd, 3, 1)).is_err());
    // New partitions change the split: the generation moves.
    state
        .apply(&Op::CreatePartitions {
            stream: 1,
            topic: 1,
            count: 1,
        })
        .unwrap();
    assert_eq!(group(&state).generation, 4);
    assert_eq!(group(&state).assignment(6)[&3], vec![3, 6]);
    // One leave; a leave by a non-member is refused and changes nothing.
    let leave = |member: u128| Op::LeaveConsumerGroup {
        stream: 1,
        topic: 1,
        group: 1,
        member,
    };
    assert_eq!(state.apply(&leave(0xa)), Ok(Applied::Left(1)));
    let before = state.clone();
    assert_eq!(
        state.apply(&leave(0xa)),
        Err(ApplyError::NotMember(1, 1, 1, 0xa))
    );
    assert_eq!(state, before);
    // Node 0 restarted at boot 150: its members from boot 100 go, node 1's stays.
    assert_eq!(
        state.apply(&Op::DropNodeMembers {
            node: 0,
            boot_before: 150
        }),
        Ok(Applied::Left(1))
    );
    assert!(!state.has_node_members(0, u64::MAX));
    assert!(state.has_node_members(1, u64::MAX));
    // The session of node 1's member ends.
    assert_eq!(
        state.apply(&Op::LeaveGroups { member: 0xb }),
        Ok(Applied::Left(1))
    );
    assert!(group(&state).members.is_empty());
    assert!(group(&state).assignment(6).is_empty());
    for op in [
        join(0xa, 2, 7),
        leave(0xa),
        Op::LeaveGroups { member: 3 },
        Op::DropNodeMembers {
            node: 1,
            boot_before: u64::MAX,
        },
    ] {
        assert_eq!(codec::decode_op(&codec::encode_op(&op).unwrap()), Ok(op));
    }
}

/// Issue #47: users. Names are unique, the status is 1 or 2, a refused op changes nothing, and
/// the users (hash, status, permissions bytes) survive a snapshot round trip and the log's op
/// encoding.
#[test]
fn users_are_created_updated_and_deleted() {
    let mut state = State::new(3);
    let create = |name: &str, status| Op::CreateUser {
        username: name.into(),
        password_hash: format!("$argon2id$hash-of-{name}"),
        status,
        permissions: Some(vec![1, 0, 1]),
    };
    assert_eq!(state.apply(&create("alice", 1)), Ok(Applied::User(1)));
    assert_eq!(state.apply(&create("bob", 2)), Ok(Applied::User(2)));
    let before = state.clone();
    assert!(matches!(
        state.apply(&create("alice", 1)),
        Err(ApplyError::DuplicateName { .. })
    ));
    assert_eq!(
        state.apply(&create("carol", 3)),
        Err(ApplyError::UserStatus(3))
    );
    assert!(matches!(
        state.apply(&Op::UpdateUser {
            user: 2,
            username: Some("alice".into()),
            status: None
        }),
        Err(ApplyError::DuplicateName { .. })
    ));
    assert_eq!(
        state.apply(&Op::DeleteUser { user: 9 }),
        Err(ApplyError::UnknownUser(9))
    );
    assert_eq!(state, before, "refusals change nothing");
    state
        .apply(&Op::UpdateUser {
            user: 2,
            username: Some("robert".into()),
            status: Some(1),
        })
        .unwrap();
    state
        .apply(&Op::UpdatePermissions {
            user: 1,
            permissions: None,
        })
        .unwrap();
    state
        .apply(&Op::ChangePassword {
            user: 1,
            password_hash: "$argon2id$new".into(),
        })
        .unwrap();
    assert_eq!(state.users[&2].username, "robert");
    assert_eq!(state.users[&2].status, 1);
    assert_eq!(state.users[&1].permissions, None);
    assert_eq!(state.users[&1].password_hash, "$argon2id$new");
    assert_eq!(
        codec::decode(PAYLOAD_VERSION, &codec::encode(&state)).unwrap(),
        state
    );
    state.apply(&Op::DeleteUser { user: 1 }).unwrap();
    assert_eq!(
        state.apply(&create("dave", 1)),
        Ok(Applied::User(3)),
        "ids are not reused"
    );
    for op in [
        create("erin", 2),
        Op::UpdateUser {
            user: 3,
            username: None,
            status: Some(2),
        },
        Op::UpdatePermissions {
            user: 3,
            permissions: Some(vec![0; 11]),
        },
        Op::ChangePassword {
            user: 3,
            password_hash: "h".into(),
        },
        Op::DeleteUser { user: 3 },
    ] {
        assert_eq!(codec::decode_op(&codec::encode_op(&op).unwrap()), Ok(op));
    }
}

/// Issue #47: partitions deleted or purged never give their ids again, so a partition's
/// directory and consensus group always belong to one incarnation: deleting the last two of
/// four and creating two gives ids 5 and 6, a purge gives every partition a new id on the same
/// leader; deleting more than the topic has, or none, is refused and changes nothing; groups
/// with members see the split change; the ops round-trip through the log's encoding.
#[test]
fn deleted_and_purged_partitions_never_give_their_ids_again() {
    let mut state = State::new(3);
    state
        .apply(&Op::CreateStream {
            name: "orders".into(),
        })
        .unwrap();
    state.apply(&topic(1, "eu", 4)).unwrap();
    state.apply(&topic(1, "us", 1)).unwrap();
    state
        .apply(&Op::CreateConsumerGroup {
            stream: 1,
            topic: 1,
            name: "billing".into(),
        })
        .unwrap();
    state
        .apply(&Op::JoinConsumerGroup {
            stream: 1,
            topic: 1,
            group: 1,
            member: 7,
            node: 0,
            boot: 1,
        })
        .unwrap();
    let ids = |state: &State, topic: u32| -> Vec<u32> {
        state.streams[&1].topics[&topic]
            .partitions
            .iter()
            .map(|p| p.id)
            .collect()
    };
    let generation = |state: &State| state.streams[&1].topics[&1].groups[&1].generation;
    let before = state.clone();
    for count in [0, 5] {
        let refused = state.apply(&Op::DeletePartitions {
            stream: 1,
            topic: 1,
            count,
        });
        assert_eq!(
            refused,
            Err(ApplyError::PartitionCount {
                have: 4,
                asked: count
            })
        );
        assert_eq!(
            state, before,
            "a refused delete of {count} changed the state"
        );
    }
    let joined = generation(&state);
    let ops = [
        Op::DeletePartitions {
            stream: 1,
            topic: 1,
            count: 2,
        },
        Op::CreatePartitions {
            stream: 1,
            topic: 1,
            count: 2,
        },
    ];
    for op in &ops {
        state.apply(op).unwrap();
        assert_eq!(
            codec::decode_op(&codec::encode_op(op).unwrap()),
            Ok(op.clone())
        );
    }
    assert_eq!(ids(&state, 1), [1, 2, 5, 6]);
    assert_eq!(
        generation(&state),
        joined + 2,
        "each change of the count re-splits"
    );
    assert_eq!(state.partition_count, 5);
    let topic = &state.streams[&1].topics[&1];
    assert_eq!((topic.slot_of(5), topic.slot_of(3)), (Some(3), None));
    assert_eq!(topic.at_slot(4).map(|p| p.id), Some(6));

    let leaders: Vec<u8> = state.streams[&1].topics[&1]
        .partitions
        .iter()
        .map(|p| p.leader)
        .collect();
    let primaries = state.primaries.clone();
    let purge = Op::PurgeTopic {
        stream: 1,
        topic: 1,
    };
    assert_eq!(state.apply(&purge), Ok(Applied::Deleted));
    assert_eq!(
        codec::decode_op(&codec::encode_op(&purge).unwrap()),
        Ok(purge)
    );
    assert_eq!(ids(&state, 1), [7, 8, 9, 10]);
    let after: Vec<u8> = state.streams[&1].topics[&1]
        .partitions
        .iter()
        .map(|p| p.leader)
        .collect();
    assert_eq!(after, leaders, "a purge keeps each partition's leader");
    assert_eq!(state.primaries, primaries);
    assert_eq!(state.partition_count, 5);

    let purge = Op::PurgeStream { stream: 1 };
    assert_eq!(state.apply(&purge), Ok(Applied::Deleted));
    assert_eq!(
        codec::decode_op(&codec::encode_op(&purge).unwrap()),
        Ok(purge)
    );
    assert_eq!(
        (ids(&state, 1), ids(&state, 2)),
        (vec![11, 12, 13, 14], vec![2])
    );
    assert_eq!(
        state.apply(&Op::PurgeStream { stream: 9 }),
        Err(ApplyError::UnknownStream(9))
    );
    // The partitions every node hosts are the new ids: the old ones' directories go.
    let keys = state.partition_keys();
    assert!(keys.contains(&(1, 1, 14)) && !keys.contains(&(1, 1, 1)));

    let payload = codec::encode(&state);
    assert_eq!(codec::decode(PAYLOAD_VERSION, &payload).unwrap(), state);
}

/// Issue #47's `DeleteSegments`: a partition's floor only rises; an unknown partition (or one
/// a purge renumbered away) is refused and changes nothing; a purge starts the new partition
/// at floor 0.
#[test]
fn a_partitions_floor_only_rises_and_a_purge_clears_it() {
    let mut state = State::new(3);
    state
        .apply(&Op::CreateStream {
            name: "orders".into(),
        })
        .unwrap();
    state.apply(&topic(1, "eu", 2)).unwrap();
    let floor = |state: &State| -> Vec<u64> {
        state.streams[&1].topics[&1]
            .partitions
            .iter()
            .map(|p| p.floor)
            .collect()
    };
    let delete = |partition, below| Op::DeleteSegments {
        stream: 1,
        topic: 1,
        partition,
        below,
    };
    for (op, after) in [
        (delete(2, 300), [0, 300]),
        (delete(2, 100), [0, 300]),
        (delete(1, 50), [50, 300]),
    ] {
        assert_eq!(state.apply(&op), Ok(Applied::Deleted));
        assert_eq!(
            codec::decode_op(&codec::encode_op(&op).unwrap()),
            Ok(op.clone())
        );
        assert_eq!(floor(&state), after);
    }
    let before = state.clone();
    assert_eq!(
        state.apply(&delete(3, 10)),
        Err(ApplyError::UnknownPartition(1, 1, 3))
    );
    assert_eq!(state, before);
    state
        .apply(&Op::PurgeTopic {
            stream: 1,
            topic: 1,
        })
        .unwrap();
    assert_eq!(floor(&state), [0, 0]);
    assert_eq!(
        state.apply(&delete(2, 10)),
        Err(ApplyError::UnknownPartition(1, 1, 2)),
        "the purged partition's id is gone"
    );
    let payload = codec::encode(&state);
    assert_eq!(codec::decode(PAYLOAD_VERSION, &payload).unwrap(), state);
}
