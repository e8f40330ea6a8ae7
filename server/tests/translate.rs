//! The translation between the Iggy wire and the replicas, on the SDK's own bytes where they
//! exist (`protocol/golden/`).

use iggy_metadata::codec::Reply;
use iggy_metadata::{Applied, Durability, Op, Retention, State};
use iggy_protocol::code;
use iggy_protocol::primitives::OptionEntry;
use iggy_protocol::response::{read_stream_details, read_topic_details, split_result};
use iggy_protocol::{Consumer, Identifier, Partitioning, PollingStrategy, Request, status};
use iggy_recovery::PartitionKey;
use iggy_segments::offsets::ConsumerKind;
use iggy_server::translate::{Route, TopicDefaults, metadata_reply, no_figures, route};

/// The golden files, embedded (the tests read no files at run time).
fn golden(name: &str) -> Vec<u8> {
    macro_rules! files {
        ($($file:literal),*) => {
            match name {
                $($file => include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/../protocol/golden/", $file, ".bin")).to_vec(),)*
                _ => panic!("no golden file {name}"),
            }
        };
    }
    files!(
        "create_topic_body",
        "send_messages_partition_body",
        "store_consumer_offset_body"
    )
}

fn defaults() -> TopicDefaults {
    TopicDefaults {
        segment_size_bytes: 1 << 30,
        durability: Durability::Replicated,
        replication_factor: 3,
    }
}

/// Stream "orders" (id 1, wire 0) with topic "payments" (id 1, wire 0) of 3 partitions.
fn state() -> State {
    let mut state = State::new(3);
    state
        .apply(&Op::CreateStream {
            name: "orders".into(),
        })
        .expect("a valid op");
    state
        .apply(&Op::CreateTopic {
            stream: 1,
            name: "payments".into(),
            partitions: 3,
            durability: Durability::Persisted,
            segment_size_bytes: 1 << 30,
            retention: Retention {
                max_age_seconds: 0,
                max_bytes: 0,
            },
            replication_factor: 3,
        })
        .expect("a valid op");
    state
}

fn key(partition: u32) -> PartitionKey {
    PartitionKey {
        stream: 1,
        topic: 1,
        partition,
    }
}

fn routed(request: &Request) -> Route {
    route(request, &state(), &defaults(), &mut 0, &no_figures)
}

#[test]
fn the_clis_create_topic_becomes_a_metadata_op_with_its_durability() {
    let request = Request::decode(code::CREATE_TOPIC, &golden("create_topic_body")).unwrap();
    let Route::Metadata(Op::CreateTopic {
        stream,
        name,
        partitions,
        durability,
        ..
    }) = route(&request, &only_stream(), &defaults(), &mut 0, &no_figures)
    else {
        panic!("not a topic create");
    };
    assert_eq!(
        (stream, name.as_str(), partitions),
        (1, "payments", 3),
        "wire stream 0 is our 1"
    );
    assert_eq!(durability, Durability::Persisted);
}

/// Stream "orders" and nothing in it.
fn only_stream() -> State {
    let mut state = State::new(3);
    state
        .apply(&Op::CreateStream {
            name: "orders".into(),
        })
        .expect("a valid op");
    state
}

#[test]
fn reads_are_answered_from_the_mirror_with_wire_ids() {
    let Route::Answer(body) = routed(&Request::GetStream {
        stream: Identifier::Name("orders".into()),
    }) else {
        panic!("not answered");
    };
    let (stream, topics) = read_stream_details(&body).unwrap();
    assert_eq!(
        (stream.id, stream.name.as_str(), stream.topics_count),
        (0, "orders", 1)
    );
    assert_eq!((topics[0].id, topics[0].partitions_count), (0, 3));
    assert_eq!(
        topics[0].options[0],
        OptionEntry::string("durability", "persisted")
    );

    let Route::Answer(body) = routed(&Request::GetTopic {
        stream: Identifier::Numeric(0),
        topic: Identifier::Name("payments".into()),
    }) else {
        panic!("not answered");
    };
    let (_, partitions) = read_topic_details(&body).unwrap();
    assert_eq!(
        partitions.iter().map(|p| p.id).collect::<Vec<_>>(),
        vec![0, 1, 2]
    );

    // The SDK reads an empty body as "none".
    assert_eq!(
        routed(&Request::GetStream {
            stream: Identifier::Numeric(1)
        }),
        Route::Answer(vec![])
    );
    assert_eq!(
        routed(&Request::GetTopics {
            stream: Identifier::Numeric(7)
        }),
        Route::Refuse(status::STREAM_ID_NOT_FOUND)
    );
}

#[test]
fn sends_pick_their_partition_as_the_sdk_expects() {
    let sent =
        Request::decode(code::SEND_MESSAGES, &golden("send_messages_partition_body")).unwrap();
    let Route::Messages { key: to, wire } = routed(&sent) else {
        panic!("not a send")
    };
    assert_eq!((to, wire), (key(3), 2), "wire partition 2 is our 3");
    let Request::SendMessages { batch, .. } = &sent else {
        panic!("not a send")
    };
    assert!(iggy_format::batch::decode(batch).is_ok());

    let send = |partitioning: Partitioning| Request::SendMessages {
        stream: Identifier::Numeric(0),
        topic: Identifier::Numeric(0),
        partitioning,
        count: 1,
        batch: vec![],
    };
    let state = state();
    let mut balanced = 0;
    let picks: Vec<_> = (0..4)
        .map(|_| {
            match route(
                &send(Partitioning::Balanced),
                &state,
                &defaults(),
                &mut balanced,
                &no_figures,
            ) {
                Route::Messages { key, .. } => key.partition,
                other => panic!("{other:?}"),
            }
        })
        .collect();
    assert_eq!(
        picks,
        vec![1, 2, 3, 1],
        "round robin over the topic's partitions"
    );

    let by_key = |k: &[u8]| match route(
        &send(Partitioning::MessagesKey(k.to_vec())),
        &state,
        &defaults(),
        &mut 0,
        &no_figures,
    ) {
        Route::Messages { key, .. } => key.partition,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        by_key(b"user-7"),
        by_key(b"user-7"),
        "one key, one partition"
    );
    assert_eq!(
        by_key(b"user-7"),
        1 + twox_hash::XxHash32::oneshot(0, b"user-7") % 3
    );

    assert_eq!(
        routed(&send(Partitioning::PartitionId(3))),
        Route::Refuse(status::PARTITION_NOT_FOUND)
    );
}

#[test]
fn offsets_and_polls_go_to_their_partition() {
    let consumer = Consumer {
        group: false,
        id: Identifier::Numeric(9),
    };
    let poll = Request::PollMessages {
        consumer: consumer.clone(),
        stream: Identifier::Numeric(0),
        topic: Identifier::Numeric(0),
        partition: Some(1),
        strategy: PollingStrategy::Offset(5),
        count: 10,
        auto_commit: false,
    };
    assert!(matches!(
        routed(&poll),
        Route::Poll { key: k, consumer: (ConsumerKind::Consumer, 9), count: 10, .. } if k == key(2)
    ));
    let store = Request::decode(
        code::STORE_CONSUMER_OFFSET,
        &golden("store_consumer_offset_body"),
    )
    .unwrap();
    let Route::StoreOffset { key: to, body } = routed(&store) else {
        panic!("not a store")
    };
    assert_eq!(to, key(3));
    assert_eq!(
        &body[8..16],
        &41u64.to_le_bytes(),
        "the offset the client stored"
    );
    // Issue #47: a named consumer's offsets are kept under the XXH32 (seed 0) of its name, as
    // upstream keys them, and a consumer group's under the group kind: `consumer-offset set -k
    // consumer-group` and `get -k consumer-group` name the same offset, another than the
    // consumer's of the same id.
    let get = |group, id| Request::GetConsumerOffset {
        consumer: Consumer { group, id },
        stream: Identifier::Numeric(0),
        topic: Identifier::Numeric(0),
        partition: Some(0),
    };
    assert_eq!(
        routed(&get(false, Identifier::Name("reader".into()))),
        Route::GetOffset {
            key: key(1),
            wire: 0,
            consumer: (
                ConsumerKind::Consumer,
                twox_hash::XxHash32::oneshot(0, b"reader")
            ),
        }
    );
    // A consumer group's offsets are kept under the group's wire id, resolved by id or by name;
    // a group the topic does not have is refused.
    assert_eq!(
        routed(&get(true, Identifier::Numeric(9))),
        Route::Refuse(status::CONSUMER_GROUP_ID_NOT_FOUND)
    );
    assert_eq!(
        routed(&get(true, Identifier::Name("billing".into()))),
        Route::Refuse(status::CONSUMER_GROUP_NAME_NOT_FOUND)
    );
    let mut with_group = state();
    with_group
        .apply(&Op::CreateConsumerGroup {
            stream: 1,
            topic: 1,
            name: "billing".into(),
        })
        .expect("a valid op");
    let in_group =
        |request: &Request| route(request, &with_group, &defaults(), &mut 0, &no_figures);
    for id in [Identifier::Numeric(0), Identifier::Name("billing".into())] {
        assert_eq!(
            in_group(&get(true, id)),
            Route::GetOffset {
                key: key(1),
                wire: 0,
                consumer: (ConsumerKind::Group, 0),
            }
        );
    }
    let store_as_group = Request::StoreConsumerOffset {
        consumer: Consumer {
            group: true,
            id: Identifier::Name("billing".into()),
        },
        stream: Identifier::Numeric(0),
        topic: Identifier::Numeric(0),
        partition: Some(0),
        offset: 3,
        ack: 1,
    };
    let Route::StoreOffset { body, .. } = in_group(&store_as_group) else {
        panic!("not a store")
    };
    assert_eq!(
        body,
        iggy_segments::entry::encode_consumer_offset(ConsumerKind::Group, 0, 3).to_vec()
    );
}

#[test]
fn options_the_server_does_not_know_are_refused() {
    let create = |options| Request::CreateTopic {
        stream: Identifier::Numeric(0),
        partitions: 1,
        name: "t".into(),
        options,
    };
    assert_eq!(
        routed(&create(vec![OptionEntry::string("flush_interval", "1s")])),
        Route::Refuse(status::UNSUPPORTED_OPTION_KEY)
    );
    assert_eq!(
        routed(&create(vec![OptionEntry::string(
            "durability",
            "eventually"
        )])),
        Route::Refuse(status::INVALID_OPTION_VALUE)
    );
    let Route::Metadata(Op::CreateTopic {
        segment_size_bytes,
        retention,
        ..
    }) = routed(&create(vec![
        OptionEntry::uint64("segment_size", 1 << 20),
        OptionEntry::uint64("message_expiry", 90_000_000),
    ]))
    else {
        panic!("not a create");
    };
    assert_eq!(
        (segment_size_bytes, retention.max_age_seconds),
        (1 << 20, 90)
    );
}

#[test]
fn metadata_replies_are_result_framed_as_the_sdk_reads_them() {
    let state = state();
    let created = metadata_reply(
        &Op::CreateStream {
            name: "orders".into(),
        },
        &Reply::Applied(Applied::Stream(1)),
        &state,
        &no_figures,
    );
    let payload = split_result(&created).unwrap().unwrap();
    let (stream, _) = read_stream_details(payload).unwrap();
    assert_eq!((stream.id, stream.name.as_str()), (0, "orders"));

    let refused = metadata_reply(
        &Op::CreateTopic {
            stream: 1,
            name: "payments".into(),
            partitions: 1,
            durability: Durability::Replicated,
            segment_size_bytes: 1,
            retention: Retention {
                max_age_seconds: 0,
                max_bytes: 0,
            },
            replication_factor: 3,
        },
        &Reply::Refused {
            code: 2,
            message: "topic named \"payments\" exists already".into(),
        },
        &state,
        &no_figures,
    );
    assert_eq!(
        split_result(&refused).unwrap(),
        Err(status::TOPIC_NAME_ALREADY_EXISTS)
    );
}

/// Issue #47: the SDK's never (`u64::MAX`) and server default (0) for a topic's expiry and size
/// are no limit here, and no limit reads back as never and unlimited (it read back as ~584,000
/// years: the wire's microseconds of `u64::MAX / 10^6` seconds); a part of a second expires
/// after a whole one.
#[test]
fn never_and_unlimited_round_trip_as_the_sdk_reads_them() {
    let create = |expiry: u64, size: u64| {
        let request = Request::CreateTopic {
            stream: Identifier::Numeric(0),
            partitions: 1,
            name: "t".into(),
            options: vec![
                OptionEntry::uint64("message_expiry", expiry),
                OptionEntry::uint64("max_topic_size", size),
            ],
        };
        match routed(&request) {
            Route::Metadata(Op::CreateTopic { retention, .. }) => {
                (retention.max_age_seconds, retention.max_bytes)
            }
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(create(u64::MAX, u64::MAX), (0, 0));
    assert_eq!(create(0, 0), (0, 0));
    assert_eq!(create(1_500_000, 1 << 30), (2, 1 << 30));

    let mut state = state();
    let topic = state
        .streams
        .values_mut()
        .flat_map(|s| s.topics.values_mut())
        .next()
        .expect("a topic");
    topic.retention = Retention {
        max_age_seconds: 0,
        max_bytes: 0,
    };
    let info = iggy_server::translate::topic_info(1, topic, &no_figures);
    assert_eq!(
        (info.message_expiry, info.max_topic_size),
        (u64::MAX, u64::MAX)
    );
    topic.retention = Retention {
        max_age_seconds: 90,
        max_bytes: 1 << 30,
    };
    let info = iggy_server::translate::topic_info(1, topic, &no_figures);
    assert_eq!(
        (info.message_expiry, info.max_topic_size),
        (90_000_000, 1 << 30)
    );
}

/// Issue #47: `DescribeOptions` (13) lists what a topic's create accepts, and every key it lists
/// is accepted with its listed default (a descriptor the parser refused would mislead `iggy
/// options`); a stream's create takes none.
#[test]
fn described_topic_options_are_the_ones_a_create_accepts() {
    let Route::Answer(body) = routed(&Request::DescribeOptions { scope: 1 }) else {
        panic!("not answered")
    };
    let descriptors = iggy_protocol::response::read_option_descriptors(&body).unwrap();
    let keys: Vec<&str> = descriptors.iter().map(|d| d.key.as_str()).collect();
    assert!(keys.contains(&"durability") && keys.contains(&"message_expiry"));
    for d in &descriptors {
        let entry = OptionEntry {
            key: d.key.clone(),
            kind: d.kind,
            value: d.default_value.clone(),
        };
        let create = Request::CreateTopic {
            stream: Identifier::Numeric(0),
            partitions: 1,
            name: "t".into(),
            options: vec![entry],
        };
        assert!(
            matches!(routed(&create), Route::Metadata(Op::CreateTopic { .. })),
            "{} with its default: {:?}",
            d.key,
            routed(&create)
        );
    }
    let Route::Answer(body) = routed(&Request::DescribeOptions { scope: 2 }) else {
        panic!("not answered")
    };
    assert!(
        iggy_protocol::response::read_option_descriptors(&body)
            .unwrap()
            .is_empty()
    );
}

/// Issue #47: `UpdateTopic` (304) becomes the topic's new name and retention, resolved against
/// the topic as it stands: the SDK's server default (0) keeps a limit, its never (`u64::MAX`)
/// lifts it, a value sets it; what cannot change is accepted only as it is.
#[test]
fn a_topics_update_is_resolved_against_the_topic() {
    let update = |options| Request::UpdateTopic {
        stream: Identifier::Numeric(0),
        topic: Identifier::Numeric(0),
        name: "renamed".into(),
        options,
    };
    let retention_of = |request: &Request| match routed(request) {
        Route::Metadata(Op::UpdateTopic {
            name, retention, ..
        }) => {
            assert_eq!(name, "renamed");
            (retention.max_age_seconds, retention.max_bytes)
        }
        other => panic!("{other:?}"),
    };
    let current = state().streams[&1].topics[&1].retention;
    let current = (current.max_age_seconds, current.max_bytes);
    assert_eq!(
        retention_of(&update(vec![])),
        current,
        "no options keep both"
    );
    assert_eq!(
        retention_of(&update(vec![
            OptionEntry::uint64("message_expiry", 0),
            OptionEntry::uint64("max_topic_size", 0),
        ])),
        current,
        "the server default keeps both"
    );
    assert_eq!(
        retention_of(&update(vec![
            OptionEntry::uint64("message_expiry", 2_500_000),
            OptionEntry::uint64("max_topic_size", 1 << 30),
        ])),
        (3, 1 << 30)
    );
    assert_eq!(
        retention_of(&update(vec![
            OptionEntry::uint64("message_expiry", u64::MAX),
            OptionEntry::uint64("max_topic_size", u64::MAX),
        ])),
        (0, 0),
        "never and unlimited lift both"
    );
    let other = match state().streams[&1].topics[&1].durability {
        Durability::Replicated => "persisted",
        Durability::Persisted => "replicated",
    };
    assert_eq!(
        routed(&update(vec![OptionEntry::string("durability", other)])),
        Route::Refuse(status::INVALID_OPTION_VALUE),
        "a topic's durability stays"
    );
    assert_eq!(
        routed(&update(vec![OptionEntry::string("flush_interval", "1s")])),
        Route::Refuse(status::UNSUPPORTED_OPTION_KEY)
    );
}
