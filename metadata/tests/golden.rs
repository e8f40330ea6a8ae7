//! Golden snapshots holding a real metadata state, container version 1: `snapshot-v1.bin` with
//! payload version 2 must still decode to the state below (its client session without a request
//! checksum), `snapshot-v1-payload-3.bin` (payload version 3) must decode to it (its consumer
//! groups without members), `snapshot-v1-payload-4.bin` (payload version 4, the state with
//! two members, a user, a token and creation times) must decode to it, and
//! `snapshot-v1-payload-5.bin` (payload version 5: also partitions deleted and purged, so that
//! their ids no longer run 1 to the count) must decode to it and re-encode byte for byte, so
//! changing the container or the state encoding without a version bump breaks these tests.
//! Regenerate the newest (only with a version bump): `IGGY_REGENERATE_GOLDEN=1 cargo test -p iggy-metadata --test golden`.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use iggy_metadata::codec::{self, PAYLOAD_VERSION};
use iggy_metadata::{Durability, Op, Retention, State};

/// The golden state; the session's last request has the request checksum `request_checksum`
/// (0: unknown, as payload version 2 reads it).
fn golden_state(request_checksum: u128, with_members: bool) -> State {
    golden_state_of(request_checksum, with_members, false)
}

/// [`golden_state`], with (payload version 5) partitions created, deleted and purged.
fn golden_state_of(request_checksum: u128, with_members: bool, renumbered: bool) -> State {
    let mut state = State::new(3);
    let ops = [
        Op::CreateStream {
            name: "orders".into(),
        },
        Op::CreateStream {
            name: "audit".into(),
        },
        Op::CreateTopic {
            stream: 1,
            name: "eu-west".into(),
            partitions: 4,
            durability: Durability::Replicated,
            segment_size_bytes: 1 << 30,
            retention: Retention {
                max_age_seconds: 86_400,
                max_bytes: 0,
            },
            replication_factor: 3,
        },
        Op::CreateTopic {
            stream: 2,
            name: "events".into(),
            partitions: 1,
            durability: Durability::Persisted,
            segment_size_bytes: 64 << 20,
            retention: Retention {
                max_age_seconds: 0,
                max_bytes: 10 << 30,
            },
            replication_factor: 1,
        },
        Op::CreateConsumerGroup {
            stream: 1,
            topic: 1,
            name: "billing".into(),
        },
    ];
    // Payload version 4 records creation times (the prepare's timestamp); older versions
    // read them as 0.
    for (stamp, op) in (1_765_000_000_000_000u64..).zip(&ops) {
        state
            .apply_at(op, 0, if with_members { stamp } else { 0 })
            .unwrap();
    }
    // The fixture was written when leaders went round-robin by stream + topic + partition; the
    // codec stores whichever leader the state holds, so the state takes those leaders back.
    let leaders = [(1, 1, [0, 1, 2, 0].as_slice()), (2, 1, [1].as_slice())];
    for (stream, topic, leaders) in leaders {
        let partitions = &mut state
            .streams
            .get_mut(&stream)
            .unwrap()
            .topics
            .get_mut(&topic)
            .unwrap()
            .partitions;
        for (partition, leader) in partitions.iter_mut().zip(leaders) {
            partition.leader = *leader;
        }
    }
    state.primaries = vec![2, 2, 1];
    if with_members {
        state
            .apply(&Op::CreateUser {
                username: "alice".into(),
                password_hash: "$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHQ$aGFzaGhhc2g".into(),
                status: 1,
                permissions: Some(vec![0, 1, 0, 1, 0, 1, 0, 1, 1, 0, 0]),
            })
            .unwrap();
        state
            .apply(&Op::CreateToken {
                user: 1,
                name: "ci".into(),
                hash: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08".into(),
                expiry_at: 1_800_000_000_000_000,
            })
            .unwrap();
        for (member, node, boot) in [(0xAB, 0, 1_000), (0xCD, 2, 2_000)] {
            state
                .apply(&Op::JoinConsumerGroup {
                    stream: 1,
                    topic: 1,
                    group: 1,
                    member,
                    node,
                    boot,
                })
                .unwrap();
        }
    }
    if renumbered {
        // Topic 1.1 grows to partitions 1 to 6 and loses 6 (1 to 5 stay, the next id is 7);
        // topic 2.1's one partition is purged into partition 2; partition 1.1.2 deletes below
        // offset 500.
        for op in [
            Op::CreatePartitions {
                stream: 1,
                topic: 1,
                count: 2,
            },
            Op::DeletePartitions {
                stream: 1,
                topic: 1,
                count: 1,
            },
            Op::PurgeTopic {
                stream: 2,
                topic: 1,
            },
            Op::DeleteSegments {
                stream: 1,
                topic: 1,
                partition: 2,
                below: 500,
            },
        ] {
            state.apply(&op).unwrap();
        }
    }
    // A session that registered (op 6) and whose request 3 was answered (op 7): the table keeps
    // its reply bytes.
    let client = 0x00C1_1E47;
    let registered = state.execute(6, client, 0, &Op::RegisterClient { client, session: 7 });
    assert_eq!(registered.result, Some(Ok(iggy_metadata::Applied::Client)));
    let request = Op::CreateConsumerGroup {
        stream: 1,
        topic: 1,
        name: "analytics".into(),
    };
    assert!(
        state
            .execute_in_view(0, 7, (client, 3, request_checksum), &request)
            .result
            .unwrap()
            .is_ok()
    );
    state
}

const REQUEST_CHECKSUM: u128 = 0x0005_EC0D_0000_0000_0000_0000_0000_0003;

const CHECKPOINT_OP: u64 = 7;
const CHECKPOINT_CHECKSUM: u128 = 0x00C0_FFEE_0000_0000_0000_0000_0000_0007;

#[test]
fn the_golden_metadata_snapshot_decodes_and_re_encodes_byte_for_byte() {
    let payload = codec::encode(&golden_state_of(REQUEST_CHECKSUM, true, true));
    let bytes = iggy_snapshot::encode(
        CHECKPOINT_OP,
        CHECKPOINT_CHECKSUM,
        PAYLOAD_VERSION,
        &payload,
    );
    let name = "snapshot-v1-payload-5.bin";
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    if std::env::var_os("IGGY_REGENERATE_GOLDEN").is_some() {
        let root = iggy_io::OsStorage::open(&path).unwrap();
        let file = iggy_io::Storage::open(&root, name, iggy_io::OpenMode::Create).unwrap();
        iggy_io::WriteFile::set_len(&file, 0).unwrap();
        iggy_io::WriteFile::write_all_at(&file, 0, &bytes).unwrap();
        iggy_io::WriteFile::sync_data(&file).unwrap();
    }
    let golden = include_bytes!("fixtures/snapshot-v1-payload-5.bin");
    let (header, body) = iggy_snapshot::decode(name, golden).unwrap();
    assert_eq!(header.checkpoint_op, CHECKPOINT_OP);
    assert_eq!(header.checkpoint_checksum, CHECKPOINT_CHECKSUM);
    assert_eq!(header.payload_version, 5);
    let decoded = codec::decode(header.payload_version, body).unwrap();
    assert_eq!(decoded, golden_state_of(REQUEST_CHECKSUM, true, true));
    let ids: Vec<u32> = decoded.streams[&1].topics[&1]
        .partitions
        .iter()
        .map(|p| p.id)
        .collect();
    assert_eq!(ids, [1, 2, 3, 4, 5]);
    assert_eq!(decoded.streams[&1].topics[&1].next_partition_id, 7);
    assert_eq!(decoded.streams[&2].topics[&1].partitions[0].id, 2);
    assert_eq!(decoded.streams[&1].topics[&1].partitions[1].floor, 500);
    assert_eq!(
        &bytes[..],
        &golden[..],
        "the encoding changed without a version bump"
    );
}

/// What a node of the previous build wrote still boots: payload version 2, whose sessions lack
/// the request checksum (read as 0, unknown).
#[test]
fn the_golden_snapshot_of_payload_version_2_still_decodes() {
    let golden = include_bytes!("fixtures/snapshot-v1.bin");
    let (header, body) = iggy_snapshot::decode("snapshot-v1.bin", golden).unwrap();
    assert_eq!(header.payload_version, 2);
    assert_eq!(
        codec::decode(header.payload_version, body).unwrap(),
        golden_state(0, false)
    );
}

/// Payload version 4 (topics without `next_partition_id`: their ids ran 1 to the count) still
/// boots, and its topics give the next partition the id past the count.
#[test]
fn the_golden_snapshot_of_payload_version_4_still_decodes() {
    let golden = include_bytes!("fixtures/snapshot-v1-payload-4.bin");
    let (header, body) = iggy_snapshot::decode("snapshot-v1-payload-4.bin", golden).unwrap();
    assert_eq!(header.payload_version, 4);
    let decoded = codec::decode(header.payload_version, body).unwrap();
    assert_eq!(decoded, golden_state(REQUEST_CHECKSUM, true));
    assert_eq!(decoded.streams[&1].topics[&1].next_partition_id, 5);
}

/// Payload version 3 (consumer groups without members) still boots.
#[test]
fn the_golden_snapshot_of_payload_version_3_still_decodes() {
    let golden = include_bytes!("fixtures/snapshot-v1-payload-3.bin");
    let (header, body) = iggy_snapshot::decode("snapshot-v1-payload-3.bin", golden).unwrap();
    assert_eq!(header.payload_version, 3);
    assert_eq!(
        codec::decode(header.payload_version, body).unwrap(),
        golden_state(REQUEST_CHECKSUM, false)
    );
}
