//! The codec against bytes the pinned crates produced (`protocol/golden/`, written by
//! `scripts/protocol-golden.sh` with `iggy_binary_protocol` and `iggy_common` 0.11.0). Each
//! request body decodes to the fields the generator put in and encodes back to the same bytes;
//! each reply our server would send is byte-identical to the SDK's own encoding of it, which is
//! what the SDK's decoder reads.

use iggy_protocol::codes::code;
use iggy_protocol::header::request_checksum;
use iggy_protocol::primitives::OptionEntry;
use iggy_protocol::response::{
    CacheMetric, ClientGroup, ClientInfo, ClusterMetadata, ClusterNode, ConsumerOffsetInfo,
    LoginReply, OptionDescriptor, PartitionInfo, PollHeader, SendConfirmation, StatsInfo,
    StreamInfo, TopicInfo, put_client_details, put_clients, put_option_descriptors,
    put_send_confirmations, put_stream_details, put_topic_details, put_topics, read_client_details,
    read_clients, read_option_descriptors, read_send_confirmations, read_stream_details,
    read_topic_details, read_topics,
};
use iggy_protocol::response::{
    ConsumerGroupInfo, GroupMemberInfo, put_consumer_group_details, put_consumer_groups,
    put_group_assignment, read_consumer_group_details, read_consumer_groups, read_group_assignment,
};
use iggy_protocol::{
    ClientVersion, Consumer, Eviction, EvictionReason, HEADER_SIZE, Identifier, Operation,
    Partitioning, PollingStrategy, ReplyHeader, Request, RequestHeader,
};

/// The golden files, embedded (the tests read no files at run time).
fn golden(name: &str) -> Vec<u8> {
    macro_rules! files {
        ($($file:literal),*) => {
            match name {
                $($file => include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/golden/", $file, ".bin")).to_vec(),)*
                _ => panic!("no golden file {name}"),
            }
        };
    }
    files!(
        "attach_consumer_session_body",
        "change_password_body",
        "cluster_metadata_reply",
        "consumer_offset_reply",
        "create_consumer_group_body",
        "create_partitions_body",
        "create_stream_body",
        "create_stream_header",
        "create_token_body",
        "create_token_reply",
        "create_topic_body",
        "create_user_body",
        "create_user_plain_body",
        "delete_consumer_group_body",
        "delete_consumer_offset_body",
        "delete_partitions_body",
        "delete_segments_body",
        "delete_stream_body",
        "delete_token_body",
        "delete_topic_body",
        "delete_user_body",
        "describe_options_body",
        "describe_options_reply",
        "eviction_invalid_credentials",
        "flush_unsaved_buffer_body",
        "get_client_body",
        "get_clients_reply",
        "get_consumer_group_body",
        "get_consumer_group_reply",
        "get_consumer_groups_body",
        "get_consumer_groups_reply",
        "get_consumer_offset_body",
        "get_me_reply",
        "get_snapshot_body",
        "get_stats_reply",
        "get_stream_body",
        "get_stream_reply",
        "get_tokens_reply",
        "get_topic_body",
        "get_topic_reply",
        "get_topics_reply",
        "get_user_body",
        "get_user_plain_reply",
        "get_user_reply",
        "get_users_reply",
        "join_consumer_group_body",
        "leave_consumer_group_body",
        "login_register_body",
        "login_register_header",
        "login_register_reply_payload",
        "login_token_body",
        "ping_header",
        "poll_messages_body",
        "poll_messages_next_body",
        "poll_reply_header",
        "poll_routing_reply",
        "purge_stream_body",
        "purge_topic_body",
        "reply_header",
        "send_messages_balanced_body",
        "send_messages_header",
        "send_messages_key_body",
        "send_messages_partition_body",
        "send_messages_reply",
        "store_consumer_offset_body",
        "stream_reply",
        "sync_consumer_group_body",
        "sync_consumer_group_reply",
        "topic_options_durability",
        "update_permissions_body",
        "update_permissions_none_body",
        "update_stream_body",
        "update_topic_body",
        "update_user_body",
        "update_user_status_only_body"
    )
}

const CLIENT: u128 = 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210;

fn header(name: &str) -> [u8; HEADER_SIZE] {
    golden(name).try_into().expect("a header file is 256 bytes")
}

/// Decodes `name` as the body of `code`, checks it is `expected`, and that it encodes back.
fn body_round_trip(name: &str, code: u32, expected: Request) {
    let bytes = golden(name);
    let decoded = Request::decode(code, &bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(decoded, expected, "{name}");
    assert_eq!(decoded.encode(), (code, bytes), "{name} encodes back");
}

fn name(s: &str) -> Identifier {
    Identifier::Name(s.into())
}

fn durability_options() -> Vec<OptionEntry> {
    vec![
        OptionEntry::string("consumer_offset_durability", "replicated"),
        OptionEntry::string("durability", "persisted"),
    ]
}

#[test]
fn request_headers_decode_as_the_sdk_encodes_them() {
    let login = RequestHeader::decode(&header("login_register_header"), 1 << 20).unwrap();
    let body = golden("login_register_body");
    assert_eq!(login.operation, Operation::Register);
    assert_eq!((login.client, login.request, login.session), (CLIENT, 0, 0));
    assert_eq!(login.code, code::LOGIN_REGISTER);
    assert_eq!(login.body_len(), body.len());
    assert_eq!(login.request_checksum, request_checksum(&body));
    assert_eq!(login.encode(), header("login_register_header"));

    let ping = RequestHeader::decode(&header("ping_header"), 1 << 20).unwrap();
    assert_eq!(ping.operation, Operation::NonReplicated);
    assert_eq!((ping.code, ping.session, ping.size), (code::PING, 0, 256));
    assert_eq!(ping.encode(), header("ping_header"));

    let create = RequestHeader::decode(&header("create_stream_header"), 1 << 20).unwrap();
    assert_eq!(create.operation, Operation::CreateStream);
    assert_eq!(
        (create.code, create.request, create.session),
        (code::CREATE_STREAM, 1, 17)
    );
    assert_eq!(
        create.request_checksum,
        request_checksum(&golden("create_stream_body"))
    );
    assert_eq!(create.encode(), header("create_stream_header"));

    let send = RequestHeader::decode(&header("send_messages_header"), 1 << 20).unwrap();
    assert_eq!(send.operation, Operation::SendMessages);
    assert_eq!(
        (send.code, send.request, send.request_checksum),
        (code::SEND_MESSAGES, 2, 0)
    );
    assert_eq!(
        send.body_len(),
        golden("send_messages_partition_body").len()
    );
    assert_eq!(send.encode(), header("send_messages_header"));
}

#[test]
fn reply_and_eviction_headers_are_the_sdks() {
    let reply = ReplyHeader {
        size: 260,
        view: 3,
        replica: 1,
        request_checksum: 0x55,
        context: 0,
        client: CLIENT,
        op: 12,
        commit: 12,
        timestamp: 1_700_000_000_000_003,
        request: 1,
        operation: Operation::CreateStream as u8,
        status: 0,
    };
    assert_eq!(reply.encode(), header("reply_header"));
    assert_eq!(ReplyHeader::decode(&header("reply_header")), Ok(reply));
    let eviction = Eviction::new(CLIENT, EvictionReason::InvalidCredentials);
    assert_eq!(eviction.encode(), header("eviction_invalid_credentials"));
}

#[test]
fn login_and_metadata_request_bodies() {
    body_round_trip(
        "login_register_body",
        code::LOGIN_REGISTER,
        Request::LoginRegister {
            version: ClientVersion {
                protocol: iggy_protocol::PROTOCOL_VERSION,
                sdk_name: "rust-sdk".into(),
                sdk_version: "0.11.0".into(),
            },
            username: "iggy".into(),
            password: "iggy".into(),
            context: None,
        },
    );
    body_round_trip(
        "create_stream_body",
        code::CREATE_STREAM,
        Request::CreateStream {
            name: "orders".into(),
            options: vec![],
        },
    );
    body_round_trip(
        "get_stream_body",
        code::GET_STREAM,
        Request::GetStream {
            stream: name("orders"),
        },
    );
    body_round_trip(
        "delete_stream_body",
        code::DELETE_STREAM,
        Request::DeleteStream {
            stream: Identifier::Numeric(0),
        },
    );
    body_round_trip(
        "create_topic_body",
        code::CREATE_TOPIC,
        Request::CreateTopic {
            stream: Identifier::Numeric(0),
            partitions: 3,
            name: "payments".into(),
            options: durability_options(),
        },
    );
    body_round_trip(
        "get_topic_body",
        code::GET_TOPIC,
        Request::GetTopic {
            stream: Identifier::Numeric(0),
            topic: name("payments"),
        },
    );
    body_round_trip(
        "delete_topic_body",
        code::DELETE_TOPIC,
        Request::DeleteTopic {
            stream: Identifier::Numeric(0),
            topic: Identifier::Numeric(1),
        },
    );
    body_round_trip(
        "create_partitions_body",
        code::CREATE_PARTITIONS,
        Request::CreatePartitions {
            stream: Identifier::Numeric(0),
            topic: Identifier::Numeric(0),
            count: 2,
        },
    );
    body_round_trip(
        "delete_partitions_body",
        code::DELETE_PARTITIONS,
        Request::DeletePartitions {
            stream: Identifier::Numeric(0),
            topic: name("payments"),
            count: 3,
        },
    );
    body_round_trip(
        "get_snapshot_body",
        code::GET_SNAPSHOT,
        Request::GetSnapshot {
            compression: 2,
            kinds: vec![1, 2, 3, 5],
        },
    );
    body_round_trip(
        "delete_segments_body",
        code::DELETE_SEGMENTS,
        Request::DeleteSegments {
            stream: Identifier::Numeric(0),
            topic: name("payments"),
            partition: 1,
            count: 4,
        },
    );
    body_round_trip(
        "flush_unsaved_buffer_body",
        code::FLUSH_UNSAVED_BUFFER,
        Request::FlushUnsavedBuffer {
            stream: name("orders"),
            topic: Identifier::Numeric(0),
            partition: 2,
            fsync: true,
        },
    );
    body_round_trip(
        "purge_stream_body",
        code::PURGE_STREAM,
        Request::PurgeStream {
            stream: name("orders"),
        },
    );
    body_round_trip(
        "purge_topic_body",
        code::PURGE_TOPIC,
        Request::PurgeTopic {
            stream: Identifier::Numeric(0),
            topic: Identifier::Numeric(1),
        },
    );
}

#[test]
fn send_bodies_carry_a_batch_the_storage_accepts() {
    for (case, partitioning) in [
        ("send_messages_partition_body", Partitioning::PartitionId(2)),
        ("send_messages_balanced_body", Partitioning::Balanced),
        (
            "send_messages_key_body",
            Partitioning::MessagesKey(b"user-7".to_vec()),
        ),
    ] {
        let bytes = golden(case);
        let Request::SendMessages {
            stream,
            topic,
            partitioning: decoded,
            count,
            batch,
        } = Request::decode(code::SEND_MESSAGES, &bytes).unwrap()
        else {
            panic!("{case} is not a send");
        };
        assert_eq!(
            (stream, topic, count),
            (Identifier::Numeric(0), Identifier::Numeric(0), 2)
        );
        assert_eq!(decoded, partitioning, "{case}");
        // The SDK's batch is the storage's batch: every checksum and bound checks out.
        let checked = iggy_format::batch::decode(&batch).unwrap_or_else(|e| panic!("{case}: {e}"));
        let messages: Vec<_> = checked.messages().collect();
        assert_eq!(messages.len(), 2);
        assert_eq!(
            (messages[0].payload, messages[1].payload),
            (&b"hello"[..], &b"world!"[..])
        );
        assert_eq!(messages[1].timestamp_delta, 250);
        assert_eq!(checked.header.origin_timestamp, 1_700_000_000_000_000);
        let request = Request::decode(code::SEND_MESSAGES, &bytes).unwrap();
        assert_eq!(request.encode().1, bytes, "{case} encodes back");
        // Read in two parts as the client port reads a send (its metadata, then the batch into
        // a buffer of its own): the same request.
        let head = 4 + u32::from_le_bytes(bytes[..4].try_into().unwrap()) as usize;
        let split = Request::decode_send(&bytes[..head], bytes[head..].to_vec()).unwrap();
        assert_eq!(split, request, "{case} read in two parts");
    }
}

/// A send's body split anywhere decodes as the whole body does, errors included (the client
/// port splits at the metadata length the client wrote, which may lie).
#[test]
fn a_send_read_in_two_parts_decodes_as_the_whole() {
    let bytes = golden("send_messages_partition_body");
    let whole = Request::decode(code::SEND_MESSAGES, &bytes);
    let head = 4 + u32::from_le_bytes(bytes[..4].try_into().unwrap()) as usize;
    for at in 0..bytes.len().min(64) {
        let split = Request::decode_send(&bytes[..at], bytes[at..].to_vec());
        if at == head {
            assert_eq!(split, whole, "split at the metadata's end");
        } else {
            assert!(split.is_err() || split == whole, "split at {at}: {split:?}");
        }
    }
    // A metadata length past its fields, in either form: the same error.
    let mut lying = bytes.clone();
    lying[0] += 1;
    let head = 4 + u32::from_le_bytes(lying[..4].try_into().unwrap()) as usize;
    assert_eq!(
        Request::decode_send(&lying[..head], lying[head..].to_vec()),
        Request::decode(code::SEND_MESSAGES, &lying)
    );
    assert!(Request::decode(code::SEND_MESSAGES, &lying).is_err());
}

#[test]
fn poll_and_offset_request_bodies() {
    let consumer = Consumer {
        group: false,
        id: Identifier::Numeric(9),
    };
    body_round_trip(
        "poll_messages_body",
        code::POLL_MESSAGES,
        Request::PollMessages {
            consumer: consumer.clone(),
            stream: Identifier::Numeric(0),
            topic: Identifier::Numeric(0),
            partition: Some(2),
            strategy: PollingStrategy::Offset(40),
            count: 100,
            auto_commit: true,
        },
    );
    body_round_trip(
        "poll_messages_next_body",
        code::POLL_MESSAGES,
        Request::PollMessages {
            consumer: Consumer {
                group: true,
                id: name("readers"),
            },
            stream: name("orders"),
            topic: name("payments"),
            partition: None,
            strategy: PollingStrategy::Next,
            count: 10,
            auto_commit: false,
        },
    );
    body_round_trip(
        "store_consumer_offset_body",
        code::STORE_CONSUMER_OFFSET,
        Request::StoreConsumerOffset {
            consumer: consumer.clone(),
            stream: Identifier::Numeric(0),
            topic: Identifier::Numeric(0),
            partition: Some(2),
            offset: 41,
            ack: 1,
        },
    );
    body_round_trip(
        "get_consumer_offset_body",
        code::GET_CONSUMER_OFFSET,
        Request::GetConsumerOffset {
            consumer: consumer.clone(),
            stream: Identifier::Numeric(0),
            topic: Identifier::Numeric(0),
            partition: Some(2),
        },
    );
    body_round_trip(
        "delete_consumer_offset_body",
        code::DELETE_CONSUMER_OFFSET,
        Request::DeleteConsumerOffset {
            consumer,
            stream: Identifier::Numeric(0),
            topic: Identifier::Numeric(0),
            partition: None,
            ack: 0,
        },
    );
}

fn stream() -> StreamInfo {
    StreamInfo {
        id: 0,
        created_at: 1_700_000_000_000_000,
        topics_count: 1,
        size_bytes: 1024,
        messages_count: 2,
        name: "orders".into(),
        options: vec![],
    }
}

fn topic() -> TopicInfo {
    TopicInfo {
        id: 0,
        created_at: 1_700_000_000_000_001,
        partitions_count: 3,
        message_expiry: 0,
        compression_algorithm: 1,
        max_topic_size: 0,
        size_bytes: 1024,
        messages_count: 2,
        name: "payments".into(),
        options: durability_options(),
        derived_options: vec![],
    }
}

#[test]
fn replies_are_byte_identical_to_the_sdks_encoding() {
    let mut out = Vec::new();
    LoginReply {
        user_id: 0,
        session: 17,
        protocol: iggy_protocol::PROTOCOL_VERSION,
        server_version: "0.1.0".into(),
    }
    .put(&mut out);
    assert_eq!(out, golden("login_register_reply_payload"));

    let metadata = ClusterMetadata {
        name: "iggy-cluster".into(),
        nodes: (0u16..2)
            .map(|i| ClusterNode {
                name: format!("node-{i}"),
                ip: "127.0.0.1".into(),
                tcp_port: 8090 + i,
                quic_port: 0,
                http_port: 0,
                websocket_port: 0,
                role: u8::from(i != 0),
                status: 0,
            })
            .collect(),
    };
    out.clear();
    metadata.put(&mut out);
    assert_eq!(out, golden("cluster_metadata_reply"));
    let mut r = iggy_protocol::Reader::new(&out);
    assert_eq!(ClusterMetadata::read(&mut r).unwrap(), metadata);

    out.clear();
    stream().put(&mut out);
    assert_eq!(out, golden("stream_reply"));

    out.clear();
    put_stream_details(&mut out, &stream(), &[topic()]);
    assert_eq!(out, golden("get_stream_reply"));
    assert_eq!(
        read_stream_details(&out).unwrap(),
        (stream(), vec![topic()])
    );

    let partitions: Vec<_> = (0..3)
        .map(|id| PartitionInfo {
            id,
            created_at: 1_700_000_000_000_002,
            segments_count: 1,
            current_offset: 41,
            size_bytes: 512,
            messages_count: 42,
        })
        .collect();
    out.clear();
    put_topic_details(&mut out, &topic(), &partitions);
    assert_eq!(out, golden("get_topic_reply"));
    assert_eq!(read_topic_details(&out).unwrap(), (topic(), partitions));

    out.clear();
    put_topics(&mut out, &[topic()]);
    assert_eq!(out, golden("get_topics_reply"));
    assert_eq!(read_topics(&out).unwrap(), vec![topic()]);

    let confirmation = SendConfirmation {
        stream_id: 0,
        topic_id: 0,
        partition_id: 2,
        base_offset: 40,
    };
    out.clear();
    put_send_confirmations(&mut out, &[confirmation]);
    assert_eq!(out, golden("send_messages_reply"));
    assert_eq!(read_send_confirmations(&out).unwrap(), vec![confirmation]);

    out.clear();
    PollHeader {
        partition_id: 2,
        current_offset: 41,
        messages_count: 2,
    }
    .put(&mut out);
    assert_eq!(out, golden("poll_reply_header"));

    let offset = ConsumerOffsetInfo {
        partition_id: 2,
        current_offset: 41,
        stored_offset: 40,
    };
    out.clear();
    offset.put(&mut out);
    assert_eq!(out, golden("consumer_offset_reply"));
    assert_eq!(ConsumerOffsetInfo::read(&out).unwrap(), Some(offset));
    assert_eq!(ConsumerOffsetInfo::read(&[]).unwrap(), None);
}

#[test]
fn topic_options_are_the_clis() {
    let bytes = golden("topic_options_durability");
    let mut r = iggy_protocol::Reader::new(&bytes);
    let entries = iggy_protocol::primitives::read_options(&mut r, bytes.len()).unwrap();
    assert_eq!(entries, durability_options());
    assert_eq!(entries[1].as_str(), Some("persisted"));
}

/// Issue #47: `GetStats`, `GetMe`, `GetClient` and `GetClients` replies as the pinned crates
/// encode them (the same figures the generator put in), and `GetClient`'s body.
#[test]
fn system_replies_are_the_sdks() {
    let stats = StatsInfo {
        process_id: 4242,
        cpu_usage: 12.5,
        total_cpu_usage: 37.25,
        memory_usage: 123_456_789,
        total_memory: 25_769_803_776,
        available_memory: 20_000_000_000,
        run_time: 3_600_000_000,
        start_time: 1_700_000_000_000_000,
        read_bytes: 1_000,
        written_bytes: 2_000_000,
        messages_size_bytes: 1_500_000,
        streams_count: 2,
        topics_count: 3,
        partitions_count: 7,
        segments_count: 9,
        messages_count: 1_500,
        clients_count: 4,
        consumer_groups_count: 1,
        hostname: "node-0".into(),
        os_name: "Linux".into(),
        os_version: "Debian 13".into(),
        kernel_version: "6.12.0".into(),
        server_version: "0.1.0".into(),
        server_semver: Some(1_000),
        cache_metrics: vec![CacheMetric {
            stream_id: 0,
            topic_id: 1,
            partition_id: 2,
            hits: 10,
            misses: 5,
            hit_ratio: 0.5,
        }],
        threads_count: 11,
        free_disk_space: 36_000_000_000,
        total_disk_space: 252_000_000_000,
    };
    let mut out = Vec::new();
    stats.put(&mut out);
    assert_eq!(out, golden("get_stats_reply"));
    assert_eq!(StatsInfo::read(&out).unwrap(), stats);
    // Cut anywhere, it is refused, never misread.
    for cut in 0..out.len() {
        assert!(StatsInfo::read(&out[..cut]).is_err(), "cut at {cut}");
    }

    let me = ClientInfo {
        client_id: 7,
        user_id: 0,
        transport: 1,
        address: "127.0.0.1:53412".into(),
        consumer_groups_count: 1,
    };
    let groups = [ClientGroup {
        stream_id: 0,
        topic_id: 1,
        group_id: 2,
    }];
    out.clear();
    put_client_details(&mut out, &me, &groups);
    assert_eq!(out, golden("get_me_reply"));
    assert_eq!(
        read_client_details(&out).unwrap(),
        (me.clone(), groups.to_vec())
    );

    let other = ClientInfo {
        client_id: 8,
        user_id: 0,
        transport: 1,
        address: "10.0.0.2:40000".into(),
        consumer_groups_count: 0,
    };
    out.clear();
    put_clients(&mut out, &[me.clone(), other.clone()]);
    assert_eq!(out, golden("get_clients_reply"));
    assert_eq!(read_clients(&out).unwrap(), vec![me, other]);

    body_round_trip(
        "get_client_body",
        code::GET_CLIENT,
        Request::GetClient { client_id: 7 },
    );
    for (code, request) in [
        (code::GET_STATS, Request::GetStats),
        (code::GET_ME, Request::GetMe),
        (code::GET_CLIENTS, Request::GetClients),
    ] {
        assert_eq!(Request::decode(code, &[]).unwrap(), request);
        assert!(Request::decode(code, &[0]).is_err(), "a byte too many");
    }
}

/// Issue #47: `DescribeOptions` (13), the body and the reply as the pinned crates encode them.
#[test]
fn describe_options_is_the_sdks() {
    body_round_trip(
        "describe_options_body",
        code::DESCRIBE_OPTIONS,
        Request::DescribeOptions { scope: 1 },
    );
    assert!(
        Request::decode(code::DESCRIBE_OPTIONS, &[4]).is_err(),
        "no scope 4"
    );
    let descriptors = vec![
        OptionDescriptor {
            key: "durability".into(),
            kind: 2,
            default_value: b"replicated".to_vec(),
            description: "what an acknowledgment means".into(),
        },
        OptionDescriptor {
            key: "segment_size".into(),
            kind: 12,
            default_value: (1u64 << 30).to_le_bytes().to_vec(),
            description: String::new(),
        },
    ];
    let mut out = Vec::new();
    put_option_descriptors(&mut out, &descriptors);
    assert_eq!(out, golden("describe_options_reply"));
    assert_eq!(read_option_descriptors(&out).unwrap(), descriptors);
}

/// Issue #47: `UpdateStream` (204) as the pinned crates encode it: the stream, the new name, an
/// empty options block.
#[test]
fn update_stream_body_is_the_sdks() {
    body_round_trip(
        "update_stream_body",
        code::UPDATE_STREAM,
        Request::UpdateStream {
            stream: name("orders"),
            name: "sales".into(),
            options: vec![],
        },
    );
}

/// Issue #47: `UpdateTopic` (304) as the pinned crates encode it.
#[test]
fn update_topic_body_is_the_sdks() {
    body_round_trip(
        "update_topic_body",
        code::UPDATE_TOPIC,
        Request::UpdateTopic {
            stream: name("orders"),
            topic: Identifier::Numeric(0),
            name: "ledger".into(),
            options: vec![],
        },
    );
}

#[test]
fn consumer_group_bodies_and_replies_are_the_sdks() {
    let target = || (Identifier::Numeric(1), name("orders"), name("billing"));
    let (stream, topic, group) = target();
    body_round_trip(
        "get_consumer_group_body",
        code::GET_CONSUMER_GROUP,
        Request::GetConsumerGroup {
            stream,
            topic,
            group,
        },
    );
    let (stream, topic, group) = target();
    body_round_trip(
        "delete_consumer_group_body",
        code::DELETE_CONSUMER_GROUP,
        Request::DeleteConsumerGroup {
            stream,
            topic,
            group,
        },
    );
    let (stream, topic, group) = target();
    body_round_trip(
        "join_consumer_group_body",
        code::JOIN_CONSUMER_GROUP,
        Request::JoinConsumerGroup {
            stream,
            topic,
            group,
        },
    );
    let (stream, topic, group) = target();
    body_round_trip(
        "leave_consumer_group_body",
        code::LEAVE_CONSUMER_GROUP,
        Request::LeaveConsumerGroup {
            stream,
            topic,
            group,
        },
    );
    let (stream, topic, group) = target();
    body_round_trip(
        "sync_consumer_group_body",
        code::SYNC_CONSUMER_GROUP,
        Request::SyncConsumerGroup {
            stream,
            topic,
            group,
        },
    );
    body_round_trip(
        "get_consumer_groups_body",
        code::GET_CONSUMER_GROUPS,
        Request::GetConsumerGroups {
            stream: Identifier::Numeric(1),
            topic: Identifier::Numeric(2),
        },
    );
    body_round_trip(
        "create_consumer_group_body",
        code::CREATE_CONSUMER_GROUP,
        Request::CreateConsumerGroup {
            stream: Identifier::Numeric(1),
            topic: Identifier::Numeric(2),
            name: "billing".into(),
        },
    );

    let billing = ConsumerGroupInfo {
        id: 0,
        partitions_count: 3,
        members_count: 2,
        name: "billing".into(),
    };
    let audit = ConsumerGroupInfo {
        id: 1,
        partitions_count: 3,
        members_count: 0,
        name: "audit".into(),
    };
    let mut out = Vec::new();
    put_consumer_groups(&mut out, &[billing.clone(), audit.clone()]);
    assert_eq!(out, golden("get_consumer_groups_reply"));
    assert_eq!(
        read_consumer_groups(&out).unwrap(),
        vec![billing.clone(), audit]
    );

    let members = vec![
        GroupMemberInfo {
            id: 1,
            partitions: vec![0, 2],
        },
        GroupMemberInfo {
            id: 2,
            partitions: vec![1],
        },
    ];
    out.clear();
    put_consumer_group_details(&mut out, &billing, &members);
    assert_eq!(out, golden("get_consumer_group_reply"));
    assert_eq!(
        read_consumer_group_details(&out).unwrap(),
        (billing, members)
    );
    for cut in 0..out.len() {
        assert!(
            read_consumer_group_details(&out[..cut]).is_err(),
            "cut at {cut}"
        );
    }

    out.clear();
    put_group_assignment(&mut out, 5, &[0, 2]);
    assert_eq!(out, golden("sync_consumer_group_reply"));
    assert_eq!(read_group_assignment(&out).unwrap(), Some((5, vec![0, 2])));
    assert_eq!(read_group_assignment(&[]).unwrap(), None);
}

/// Issue #47: the routed poll's commands (a clustered SDK's auto-commit polls and offset
/// writes): 103 and 104 carry a poll's body, 123 an offset target, 14 the coordinator's session;
/// the routing reply is the SDK's own encoding.
#[test]
fn poll_routing_bodies_and_reply_are_the_sdks() {
    body_round_trip(
        "attach_consumer_session_body",
        code::ATTACH_CONSUMER_SESSION,
        Request::AttachConsumerSession {
            client_id: CLIENT,
            session: 1_700_000_000_000_001,
            metadata_watermark: 42,
        },
    );
    let poll = Request::decode(code::POLL_MESSAGES, &golden("poll_messages_body")).unwrap();
    for code in [code::GET_POLL_ROUTING, code::POLL_MESSAGES_ON_PRIMARY] {
        let routed = Request::decode(code, &golden("poll_messages_body")).unwrap();
        let inner = match &routed {
            Request::GetPollRouting(inner) | Request::PollMessagesOnPrimary(inner) => inner,
            other => panic!("{other:?}"),
        };
        assert_eq!(**inner, poll);
        assert_eq!(routed.encode(), (code, golden("poll_messages_body")));
    }
    let target = Request::decode(
        code::GET_CONSUMER_OFFSET,
        &golden("get_consumer_offset_body"),
    )
    .unwrap();
    let routed = Request::decode(
        code::GET_CONSUMER_OFFSET_ROUTING,
        &golden("get_consumer_offset_body"),
    )
    .unwrap();
    assert_eq!(routed, Request::GetConsumerOffsetRouting(Box::new(target)));

    let route = iggy_protocol::response::PollRoute {
        client_id: CLIENT,
        session: 1_700_000_000_000_001,
        metadata_watermark: 0,
        primary: ClusterNode {
            name: "node-2".into(),
            ip: "127.0.0.1".into(),
            tcp_port: 8092,
            quic_port: 0,
            http_port: 0,
            websocket_port: 0,
            role: 1,
            status: 0,
        },
    };
    let mut out = Vec::new();
    route.put(&mut out);
    assert_eq!(out, golden("poll_routing_reply"));
    assert_eq!(
        iggy_protocol::response::PollRoute::read(&out).unwrap(),
        route
    );
}

fn permissions() -> iggy_protocol::permissions::Permissions {
    use iggy_protocol::permissions::{
        GlobalPermissions, Permissions, StreamPermissions, TopicPermissions,
    };
    Permissions {
        global: GlobalPermissions {
            read_servers: true,
            read_users: true,
            read_streams: true,
            read_topics: true,
            poll_messages: true,
            ..GlobalPermissions::default()
        },
        streams: vec![
            StreamPermissions {
                stream_id: 0,
                manage_stream: false,
                read_stream: true,
                manage_topics: true,
                read_topics: true,
                poll_messages: true,
                send_messages: true,
                topics: vec![
                    TopicPermissions {
                        topic_id: 1,
                        manage_topic: true,
                        read_topic: true,
                        poll_messages: false,
                        send_messages: true,
                    },
                    TopicPermissions {
                        topic_id: 2,
                        manage_topic: false,
                        read_topic: true,
                        poll_messages: true,
                        send_messages: false,
                    },
                ],
            },
            StreamPermissions {
                stream_id: 3,
                manage_stream: true,
                read_stream: true,
                ..StreamPermissions::default()
            },
        ],
    }
}

/// Issue #47: the user commands' bodies (31-37) and replies, permissions and all.
#[test]
fn user_bodies_and_replies_are_the_sdks() {
    body_round_trip(
        "create_user_body",
        code::CREATE_USER,
        Request::CreateUser {
            username: "alice".into(),
            password: "s3cret-pw".into(),
            status: 1,
            permissions: Some(permissions()),
            options: vec![],
        },
    );
    body_round_trip(
        "create_user_plain_body",
        code::CREATE_USER,
        Request::CreateUser {
            username: "bob".into(),
            password: "pw-of-bob".into(),
            status: 2,
            permissions: None,
            options: vec![],
        },
    );
    body_round_trip(
        "get_user_body",
        code::GET_USER,
        Request::GetUser {
            user: name("alice"),
        },
    );
    body_round_trip(
        "delete_user_body",
        code::DELETE_USER,
        Request::DeleteUser {
            user: Identifier::Numeric(3),
        },
    );
    body_round_trip(
        "update_user_body",
        code::UPDATE_USER,
        Request::UpdateUser {
            user: Identifier::Numeric(1),
            username: Some("alicia".into()),
            status: Some(2),
            options: vec![],
        },
    );
    body_round_trip(
        "update_user_status_only_body",
        code::UPDATE_USER,
        Request::UpdateUser {
            user: Identifier::Numeric(1),
            username: None,
            status: Some(1),
            options: vec![],
        },
    );
    body_round_trip(
        "update_permissions_body",
        code::UPDATE_PERMISSIONS,
        Request::UpdatePermissions {
            user: name("alice"),
            permissions: Some(permissions()),
        },
    );
    body_round_trip(
        "update_permissions_none_body",
        code::UPDATE_PERMISSIONS,
        Request::UpdatePermissions {
            user: Identifier::Numeric(1),
            permissions: None,
        },
    );
    body_round_trip(
        "change_password_body",
        code::CHANGE_PASSWORD,
        Request::ChangePassword {
            user: name("alice"),
            current_password: "s3cret-pw".into(),
            new_password: "n3w-secret".into(),
        },
    );
    let user = |id: u32, name: &str| iggy_protocol::response::UserInfo {
        id,
        created_at: 0,
        status: 1,
        username: name.into(),
        options: vec![],
    };
    let mut out = Vec::new();
    iggy_protocol::response::put_users(&mut out, &[user(0, "iggy"), user(1, "alice")]);
    assert_eq!(out, golden("get_users_reply"));
    assert_eq!(
        iggy_protocol::response::read_users(&out).unwrap(),
        vec![user(0, "iggy"), user(1, "alice")]
    );
    out.clear();
    let with = permissions();
    iggy_protocol::response::put_user_details(&mut out, &user(1, "alice"), Some(&with));
    assert_eq!(out, golden("get_user_reply"));
    assert_eq!(
        iggy_protocol::response::read_user_details(&out).unwrap(),
        (user(1, "alice"), Some(with))
    );
    out.clear();
    iggy_protocol::response::put_user_details(&mut out, &user(1, "alice"), None);
    assert_eq!(out, golden("get_user_plain_reply"));
    assert_eq!(
        iggy_protocol::response::read_user_details(&out).unwrap(),
        (user(1, "alice"), None)
    );
}

/// Issue #47: the personal access token commands (41-43) and the token login (45).
#[test]
fn token_bodies_and_replies_are_the_sdks() {
    const SECRET: &str = "c6f8f6d00fe1ddf9dfbbeed53e32bd665f5daeb2d23219d9ce8d6e65b9da27a3";
    body_round_trip(
        "create_token_body",
        code::CREATE_PERSONAL_ACCESS_TOKEN,
        Request::CreatePersonalAccessToken {
            name: "deploy".into(),
            expiry: 3_600_000_000,
        },
    );
    body_round_trip(
        "delete_token_body",
        code::DELETE_PERSONAL_ACCESS_TOKEN,
        Request::DeletePersonalAccessToken {
            name: "deploy".into(),
        },
    );
    let login =
        Request::decode(code::LOGIN_REGISTER_WITH_PAT, &golden("login_token_body")).unwrap();
    let Request::LoginRegisterWithToken { token, context, .. } = &login else {
        panic!("{login:?}")
    };
    assert_eq!((token.as_str(), context), (SECRET, &None));
    assert_eq!(login.encode().1, golden("login_token_body"));
    let mut out = Vec::new();
    iggy_protocol::response::put_raw_token(&mut out, SECRET);
    assert_eq!(out, golden("create_token_reply"));
    assert_eq!(
        iggy_protocol::response::read_raw_token(&out).unwrap(),
        SECRET
    );
    out.clear();
    let tokens = vec![
        ("deploy".to_string(), 0),
        ("brief".to_string(), 1_800_000_000_000_000),
    ];
    iggy_protocol::response::put_tokens(&mut out, &tokens);
    assert_eq!(out, golden("get_tokens_reply"));
    assert_eq!(iggy_protocol::response::read_tokens(&out).unwrap(), tokens);
}
