//! One file per case: `<name>.bin`, the exact bytes the pinned crates encode. The case names are
//! the contract with `protocol/tests/golden.rs`.

use bytes::{Bytes, BytesMut};
use iggy_binary_protocol::consensus::{
    Command, EvictionHeader, Operation, ReplyHeader, RequestHeader,
};
use iggy_binary_protocol::primitives::polling_strategy::WirePollingStrategy;
use iggy_binary_protocol::requests::consumer_offsets::{
    DeleteConsumerOffsetRequest, GetConsumerOffsetRequest, StoreConsumerOffsetRequest,
};
use iggy_binary_protocol::requests::consumer_groups::{
    CreateConsumerGroupRequest, DeleteConsumerGroupRequest, GetConsumerGroupRequest,
    GetConsumerGroupsRequest, JoinConsumerGroupRequest, LeaveConsumerGroupRequest,
    SyncConsumerGroupRequest,
};
use iggy_binary_protocol::responses::consumer_groups::{
    ConsumerGroupDetailsResponse, ConsumerGroupMemberResponse, ConsumerGroupResponse,
    GetConsumerGroupsResponse, SyncConsumerGroupResponse,
};
use iggy_binary_protocol::requests::messages::{FlushUnsavedBufferRequest, PollMessagesRequest};
use iggy_binary_protocol::requests::messages::send_messages::{RawMessage, SendMessagesEncoder};
use iggy_binary_protocol::requests::partitions::{CreatePartitionsRequest, DeletePartitionsRequest};
use iggy_binary_protocol::requests::segments::DeleteSegmentsRequest;
use iggy_binary_protocol::requests::streams::{
    CreateStreamRequest, DeleteStreamRequest, GetStreamRequest, PurgeStreamRequest,
    UpdateStreamRequest,
};
use iggy_binary_protocol::requests::topics::{
    CreateTopicRequest, DeleteTopicRequest, GetTopicRequest, PurgeTopicRequest,
    UpdateTopicRequest,
};
use iggy_binary_protocol::requests::personal_access_tokens::{
    CreatePersonalAccessTokenRequest, DeletePersonalAccessTokenRequest,
};
use iggy_binary_protocol::responses::personal_access_tokens::{
    GetPersonalAccessTokensResponse, PersonalAccessTokenResponse, RawPersonalAccessTokenResponse,
};
use iggy_binary_protocol::requests::users::LoginRegisterWithPatRequest;
use iggy_binary_protocol::requests::users::{
    ChangePasswordRequest, CreateUserRequest, DeleteUserRequest, GetUserRequest,
    LoginRegisterRequest, UpdatePermissionsRequest, UpdateUserRequest,
};
use iggy_binary_protocol::responses::users::{GetUsersResponse, UserDetailsResponse, UserResponse};
use iggy_binary_protocol::primitives::permissions::{
    WireGlobalPermissions, WirePermissions, WireStreamPermissions, WireTopicPermissions,
};
use iggy_binary_protocol::responses::consumer_offsets::ConsumerOffsetResponse;
use iggy_binary_protocol::responses::messages::{
    PollMessagesResponseHeader, SendMessagesConfirmationResponse, SendMessagesResponse,
};
use iggy_binary_protocol::responses::streams::{GetStreamResponse, StreamResponse, TopicHeader};
use iggy_binary_protocol::responses::system::get_cluster_metadata::{
    ClusterMetadataResponse, ClusterNodeResponse,
};
use iggy_binary_protocol::responses::topics::{
    GetTopicResponse, GetTopicsResponse, PartitionResponse,
};
use iggy_binary_protocol::requests::system::AttachConsumerSessionRequest;
use iggy_binary_protocol::requests::system::DescribeOptionsRequest;
use iggy_binary_protocol::requests::system::GetSnapshotRequest;
use iggy_binary_protocol::responses::messages::PollRoutingResponse;
use iggy_binary_protocol::requests::system::get_client::GetClientRequest;
use iggy_binary_protocol::responses::system::{DescribeOptionsResponse, OptionDescriptor};
use iggy_binary_protocol::responses::clients::client_response::{
    ClientResponse, ConsumerGroupInfoResponse,
};
use iggy_binary_protocol::responses::clients::get_client::ClientDetailsResponse;
use iggy_binary_protocol::responses::clients::get_clients::GetClientsResponse;
use iggy_binary_protocol::responses::system::get_stats::{CacheMetricEntry, StatsResponse};
use iggy_binary_protocol::responses::users::LoginRegisterResponse;
use iggy_binary_protocol::{
    AckLevel, ClientVersionInfo, EvictionReason, WireConsumer, WireEncode, WireIdentifier,
    WireName, WireOptions, WirePartitioning,
};
use iggy_common::{Durability, TopicCreateOptions};
use secrecy::SecretString;
use std::path::{Path, PathBuf};

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    std::fs::write(dir.join(format!("{name}.bin")), bytes).expect("write a golden file");
    println!("{name}.bin {} bytes", bytes.len());
}

fn name(s: &str) -> WireName {
    WireName::new(s).expect("a valid name")
}

fn options(block: &[u8]) -> WireOptions {
    WireOptions::from_slice(block).expect("a valid options block")
}

const CLIENT: u128 = 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210;

fn request_header(
    operation: Operation,
    code: u32,
    request: u64,
    session: u64,
    body: &[u8],
) -> RequestHeader {
    // What `iggy::vsr::encode_request_header` fills in (0.11.0): metadata and session ops carry
    // XXH3-64 of the body widened, partition and non-replicated ops 0; a non-replicated op's code
    // in reserved[0..4].
    let request_checksum = if operation.is_partition() || operation == Operation::NonReplicated {
        0
    } else {
        u128::from(iggy_common::calculate_checksum(body))
    };
    let mut reserved = [0; 60];
    if operation == Operation::NonReplicated {
        reserved[0..4].copy_from_slice(&code.to_le_bytes());
    }
    RequestHeader {
        command: Command::Request,
        operation,
        size: (256 + body.len()) as u32,
        client: CLIENT,
        request,
        session,
        request_checksum,
        timestamp: 0,
        reserved,
        ..Default::default()
    }
}

fn main() {
    let dir: PathBuf = std::env::args()
        .nth(1)
        .expect("usage: golden-gen DIR")
        .into();
    std::fs::create_dir_all(&dir).expect("create the golden directory");

    // Login.
    let login = LoginRegisterRequest {
        version_info: ClientVersionInfo {
            protocol_version: iggy_binary_protocol::version::IGGY_PROTOCOL_VERSION,
            sdk_name: name("rust-sdk"),
            sdk_version: name("0.11.0"),
        },
        username: name("iggy"),
        password: SecretString::from("iggy"),
        client_context: None,
    }
    .to_bytes();
    write(&dir, "login_register_body", &login);
    write(
        &dir,
        "login_register_header",
        bytemuck::bytes_of(&request_header(Operation::Register, 40, 0, 0, &login)),
    );
    let login_reply = LoginRegisterResponse {
        user_id: 0,
        session: 17,
        server_protocol_version: iggy_binary_protocol::version::IGGY_PROTOCOL_VERSION,
        server_version: name("0.1.0"),
    }
    .to_bytes();
    write(&dir, "login_register_reply_payload", &login_reply);

    // Ping: non-replicated, before login.
    write(
        &dir,
        "ping_header",
        bytemuck::bytes_of(&request_header(Operation::NonReplicated, 1, 0, 0, &[])),
    );

    // Streams.
    let create_stream = CreateStreamRequest {
        name: name("orders"),
        options: WireOptions::empty(),
    }
    .to_bytes();
    write(&dir, "create_stream_body", &create_stream);
    write(
        &dir,
        "create_stream_header",
        bytemuck::bytes_of(&request_header(
            Operation::CreateStream,
            202,
            1,
            17,
            &create_stream,
        )),
    );
    write(
        &dir,
        "get_stream_body",
        &GetStreamRequest {
            stream_id: WireIdentifier::named("orders").unwrap(),
        }
        .to_bytes(),
    );
    write(
        &dir,
        "delete_stream_body",
        &DeleteStreamRequest {
            stream_id: WireIdentifier::numeric(0),
        }
        .to_bytes(),
    );

    // Topics: the options the CLI sends for `iggy topic create ... --durability persisted`.
    let topic_options = TopicCreateOptions {
        durability: Durability::Persisted,
        ..Default::default()
    }
    .to_explicit_wire(|_| true)
    .expect("topic options");
    write(&dir, "topic_options_durability", topic_options.as_bytes());
    let create_topic = CreateTopicRequest {
        stream_id: WireIdentifier::numeric(0),
        partitions_count: 3,
        name: name("payments"),
        options: topic_options.clone(),
    }
    .to_bytes();
    write(&dir, "create_topic_body", &create_topic);
    write(
        &dir,
        "get_topic_body",
        &GetTopicRequest {
            stream_id: WireIdentifier::numeric(0),
            topic_id: WireIdentifier::named("payments").unwrap(),
        }
        .to_bytes(),
    );
    write(
        &dir,
        "delete_topic_body",
        &DeleteTopicRequest {
            stream_id: WireIdentifier::numeric(0),
            topic_id: WireIdentifier::numeric(1),
        }
        .to_bytes(),
    );
    write(
        &dir,
        "create_partitions_body",
        &CreatePartitionsRequest {
            stream_id: WireIdentifier::numeric(0),
            topic_id: WireIdentifier::numeric(0),
            partitions_count: 2,
        }
        .to_bytes(),
    );
    write(
        &dir,
        "delete_partitions_body",
        &DeletePartitionsRequest {
            stream_id: WireIdentifier::numeric(0),
            topic_id: WireIdentifier::named("payments").unwrap(),
            partitions_count: 3,
        }
        .to_bytes(),
    );
    write(
        &dir,
        "get_snapshot_body",
        &GetSnapshotRequest {
            compression: 2,
            snapshot_types: vec![1, 2, 3, 5],
        }
        .to_bytes(),
    );
    write(
        &dir,
        "delete_segments_body",
        &DeleteSegmentsRequest {
            stream_id: WireIdentifier::numeric(0),
            topic_id: WireIdentifier::named("payments").unwrap(),
            partition_id: 1,
            segments_count: 4,
        }
        .to_bytes(),
    );
    write(
        &dir,
        "flush_unsaved_buffer_body",
        &FlushUnsavedBufferRequest {
            stream_id: WireIdentifier::named("orders").unwrap(),
            topic_id: WireIdentifier::numeric(0),
            partition_id: 2,
            fsync: true,
        }
        .to_bytes(),
    );
    write(
        &dir,
        "purge_stream_body",
        &PurgeStreamRequest {
            stream_id: WireIdentifier::named("orders").unwrap(),
        }
        .to_bytes(),
    );
    write(
        &dir,
        "purge_topic_body",
        &PurgeTopicRequest {
            stream_id: WireIdentifier::numeric(0),
            topic_id: WireIdentifier::numeric(1),
        }
        .to_bytes(),
    );

    // Messages: two messages, one with user headers, sent to partition 2.
    let headers: &[u8] = &[
        2, 3, 0, 0, 0, b'k', b'e', b'y', 2, 5, 0, 0, 0, b'v', b'a', b'l', b'u', b'e',
    ];
    let messages = [
        RawMessage {
            id: 1,
            origin_timestamp: 1_700_000_000_000_000,
            headers: None,
            payload: b"hello",
        },
        RawMessage {
            id: 2,
            origin_timestamp: 1_700_000_000_000_250,
            headers: Some(headers),
            payload: b"world!",
        },
    ];
    for (case, partitioning) in [
        (
            "send_messages_partition_body",
            WirePartitioning::PartitionId(2),
        ),
        ("send_messages_balanced_body", WirePartitioning::Balanced),
        (
            "send_messages_key_body",
            WirePartitioning::MessagesKey(b"user-7".to_vec()),
        ),
    ] {
        let mut buf = BytesMut::new();
        SendMessagesEncoder::encode(
            &mut buf,
            &WireIdentifier::numeric(0),
            &WireIdentifier::numeric(0),
            &partitioning,
            &messages,
        )
        .expect("encode send");
        write(&dir, case, &buf);
        if case == "send_messages_partition_body" {
            write(
                &dir,
                "send_messages_header",
                bytemuck::bytes_of(&request_header(Operation::SendMessages, 101, 2, 17, &buf)),
            );
        }
    }
    let confirmations = SendMessagesResponse {
        confirmations: vec![SendMessagesConfirmationResponse {
            stream_id: 0,
            topic_id: 0,
            partition_id: 2,
            base_offset: 40,
        }],
    }
    .to_bytes();
    write(&dir, "send_messages_reply", &confirmations);

    let poll = PollMessagesRequest {
        consumer: WireConsumer::consumer(WireIdentifier::numeric(9)),
        stream_id: WireIdentifier::numeric(0),
        topic_id: WireIdentifier::numeric(0),
        partition_id: Some(2),
        strategy: WirePollingStrategy::offset(40),
        count: 100,
        auto_commit: true,
    }
    .to_bytes();
    write(&dir, "poll_messages_body", &poll);
    write(
        &dir,
        "poll_messages_next_body",
        &PollMessagesRequest {
            consumer: WireConsumer::consumer_group(WireIdentifier::named("readers").unwrap()),
            stream_id: WireIdentifier::named("orders").unwrap(),
            topic_id: WireIdentifier::named("payments").unwrap(),
            partition_id: None,
            strategy: WirePollingStrategy::next(),
            count: 10,
            auto_commit: false,
        }
        .to_bytes(),
    );
    write(
        &dir,
        "poll_reply_header",
        &PollMessagesResponseHeader {
            partition_id: 2,
            current_offset: 41,
            messages_count: 2,
        }
        .to_bytes(),
    );

    // Consumer offsets.
    let consumer = WireConsumer::consumer(WireIdentifier::numeric(9));
    write(
        &dir,
        "store_consumer_offset_body",
        &StoreConsumerOffsetRequest {
            consumer: consumer.clone(),
            stream_id: WireIdentifier::numeric(0),
            topic_id: WireIdentifier::numeric(0),
            partition_id: Some(2),
            offset: 41,
            ack: AckLevel::Quorum,
        }
        .to_bytes(),
    );
    write(
        &dir,
        "get_consumer_offset_body",
        &GetConsumerOffsetRequest {
            consumer: consumer.clone(),
            stream_id: WireIdentifier::numeric(0),
            topic_id: WireIdentifier::numeric(0),
            partition_id: Some(2),
        }
        .to_bytes(),
    );
    write(
        &dir,
        "delete_consumer_offset_body",
        &DeleteConsumerOffsetRequest {
            consumer,
            stream_id: WireIdentifier::numeric(0),
            topic_id: WireIdentifier::numeric(0),
            partition_id: None,
            ack: AckLevel::NoAck,
        }
        .to_bytes(),
    );
    write(
        &dir,
        "consumer_offset_reply",
        &ConsumerOffsetResponse {
            partition_id: 2,
            current_offset: 41,
            stored_offset: 40,
        }
        .to_bytes(),
    );

    // Metadata replies.
    write(
        &dir,
        "cluster_metadata_reply",
        &ClusterMetadataResponse {
            name: "iggy-cluster".into(),
            nodes: vec![
                ClusterNodeResponse {
                    name: "node-0".into(),
                    ip: "127.0.0.1".into(),
                    tcp_port: 8090,
                    quic_port: 0,
                    http_port: 0,
                    websocket_port: 0,
                    role: 0,
                    status: 0,
                },
                ClusterNodeResponse {
                    name: "node-1".into(),
                    ip: "127.0.0.1".into(),
                    tcp_port: 8091,
                    quic_port: 0,
                    http_port: 0,
                    websocket_port: 0,
                    role: 1,
                    status: 0,
                },
            ],
        }
        .to_bytes(),
    );
    let stream = StreamResponse {
        id: 0,
        created_at: 1_700_000_000_000_000,
        topics_count: 1,
        size_bytes: 1024,
        messages_count: 2,
        name: name("orders"),
        options: WireOptions::empty(),
    };
    let topic = TopicHeader {
        id: 0,
        created_at: 1_700_000_000_000_001,
        partitions_count: 3,
        message_expiry: 0,
        compression_algorithm: 1,
        max_topic_size: 0,
        size_bytes: 1024,
        messages_count: 2,
        name: name("payments"),
        options: options(topic_options.as_bytes()),
        derived_options: WireOptions::empty(),
    };
    write(&dir, "stream_reply", &stream.to_bytes());
    write(
        &dir,
        "get_stream_reply",
        &GetStreamResponse {
            stream: stream.clone(),
            topics: vec![topic.clone()],
        }
        .to_bytes(),
    );
    let partitions: Vec<PartitionResponse> = (0..3)
        .map(|id| PartitionResponse {
            id,
            created_at: 1_700_000_000_000_002,
            segments_count: 1,
            current_offset: 41,
            size_bytes: 512,
            messages_count: 42,
        })
        .collect();
    write(
        &dir,
        "get_topic_reply",
        &GetTopicResponse {
            topic: topic.clone(),
            partitions,
        }
        .to_bytes(),
    );
    write(
        &dir,
        "get_topics_reply",
        &GetTopicsResponse {
            topics: vec![topic],
        }
        .to_bytes(),
    );

    // Reply and eviction headers.
    let reply = ReplyHeader {
        command: Command::Reply,
        size: 256 + 4,
        view: 3,
        replica: 1,
        request_checksum: 0x55,
        client: CLIENT,
        op: 12,
        commit: 12,
        timestamp: 1_700_000_000_000_003,
        request: 1,
        operation: Operation::CreateStream,
        status: 0,
        ..Default::default()
    };
    write(&dir, "reply_header", bytemuck::bytes_of(&reply));
    let eviction = EvictionHeader::new(0, 0, 0, CLIENT, EvictionReason::InvalidCredentials);
    write(
        &dir,
        "eviction_invalid_credentials",
        bytemuck::bytes_of(&eviction),
    );

    // System: stats, clients (issue #47).
    let stats = StatsResponse {
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
        iggy_server_version: "0.1.0".into(),
        iggy_server_semver: Some(1_000),
        cache_metrics: vec![CacheMetricEntry {
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
    write(&dir, "get_stats_reply", &stats.to_bytes());
    let client = ClientResponse {
        client_id: 7,
        user_id: 0,
        transport: 1,
        address: "127.0.0.1:53412".into(),
        consumer_groups_count: 1,
    };
    write(
        &dir,
        "get_me_reply",
        &ClientDetailsResponse {
            client: client.clone(),
            consumer_groups: vec![ConsumerGroupInfoResponse {
                stream_id: 0,
                topic_id: 1,
                group_id: 2,
            }],
        }
        .to_bytes(),
    );
    write(
        &dir,
        "get_clients_reply",
        &GetClientsResponse {
            clients: vec![
                client,
                ClientResponse {
                    client_id: 8,
                    user_id: 0,
                    transport: 1,
                    address: "10.0.0.2:40000".into(),
                    consumer_groups_count: 0,
                },
            ],
        }
        .to_bytes(),
    );
    write(
        &dir,
        "get_client_body",
        &GetClientRequest { client_id: 7 }.to_bytes(),
    );
    write(
        &dir,
        "update_stream_body",
        &UpdateStreamRequest {
            stream_id: WireIdentifier::named("orders").expect("a name"),
            name: name("sales"),
            options: options(&[]),
        }
        .to_bytes(),
    );
    write(
        &dir,
        "update_topic_body",
        &UpdateTopicRequest {
            stream_id: WireIdentifier::named("orders").expect("a name"),
            topic_id: WireIdentifier::numeric(0),
            name: name("ledger"),
            options: options(&[]),
        }
        .to_bytes(),
    );
    write(
        &dir,
        "describe_options_body",
        &DescribeOptionsRequest { scope: 1 }.to_bytes(),
    );
    write(
        &dir,
        "describe_options_reply",
        &DescribeOptionsResponse {
            entries: vec![
                OptionDescriptor {
                    key: name("durability"),
                    kind: 2,
                    default_value: Bytes::from_static(b"replicated"),
                    description: "what an acknowledgment means".into(),
                },
                OptionDescriptor {
                    key: name("segment_size"),
                    kind: 12,
                    default_value: Bytes::copy_from_slice(&(1u64 << 30).to_le_bytes()),
                    description: String::new(),
                },
            ],
        }
        .to_bytes(),
    );
    // Consumer groups (600-606): the requests' bodies, and the replies as the SDK decodes them.
    let group_target = || {
        (
            WireIdentifier::numeric(1),
            WireIdentifier::named("orders").expect("a valid name"),
            WireIdentifier::named("billing").expect("a valid name"),
        )
    };
    let (stream_id, topic_id, group_id) = group_target();
    write(
        &dir,
        "get_consumer_group_body",
        &GetConsumerGroupRequest {
            stream_id,
            topic_id,
            group_id,
        }
        .to_bytes(),
    );
    write(
        &dir,
        "get_consumer_groups_body",
        &GetConsumerGroupsRequest {
            stream_id: WireIdentifier::numeric(1),
            topic_id: WireIdentifier::numeric(2),
        }
        .to_bytes(),
    );
    write(
        &dir,
        "create_consumer_group_body",
        &CreateConsumerGroupRequest {
            stream_id: WireIdentifier::numeric(1),
            topic_id: WireIdentifier::numeric(2),
            name: name("billing"),
        }
        .to_bytes(),
    );
    let (stream_id, topic_id, group_id) = group_target();
    write(
        &dir,
        "delete_consumer_group_body",
        &DeleteConsumerGroupRequest {
            stream_id,
            topic_id,
            group_id,
        }
        .to_bytes(),
    );
    let (stream_id, topic_id, group_id) = group_target();
    write(
        &dir,
        "join_consumer_group_body",
        &JoinConsumerGroupRequest {
            stream_id,
            topic_id,
            group_id,
        }
        .to_bytes(),
    );
    let (stream_id, topic_id, group_id) = group_target();
    write(
        &dir,
        "leave_consumer_group_body",
        &LeaveConsumerGroupRequest {
            stream_id,
            topic_id,
            group_id,
        }
        .to_bytes(),
    );
    let (stream_id, topic_id, group_id) = group_target();
    write(
        &dir,
        "sync_consumer_group_body",
        &SyncConsumerGroupRequest {
            stream_id,
            topic_id,
            group_id,
        }
        .to_bytes(),
    );
    let group = ConsumerGroupResponse {
        id: 0,
        partitions_count: 3,
        members_count: 2,
        name: name("billing"),
    };
    write(
        &dir,
        "get_consumer_groups_reply",
        &GetConsumerGroupsResponse {
            groups: vec![
                group.clone(),
                ConsumerGroupResponse {
                    id: 1,
                    partitions_count: 3,
                    members_count: 0,
                    name: name("audit"),
                },
            ],
        }
        .to_bytes(),
    );
    write(
        &dir,
        "get_consumer_group_reply",
        &ConsumerGroupDetailsResponse {
            group,
            members: vec![
                ConsumerGroupMemberResponse {
                    id: 1,
                    partitions_count: 2,
                    partitions: vec![0, 2],
                },
                ConsumerGroupMemberResponse {
                    id: 2,
                    partitions_count: 1,
                    partitions: vec![1],
                },
            ],
        }
        .to_bytes(),
    );
    write(
        &dir,
        "sync_consumer_group_reply",
        &SyncConsumerGroupResponse {
            generation: 5,
            partitions: vec![0, 2],
        }
        .to_bytes(),
    );
    // Poll routing (14, 103/104 carry a poll body, 123 an offset target): the attach body and
    // the routing reply.
    write(
        &dir,
        "attach_consumer_session_body",
        &AttachConsumerSessionRequest {
            client_id: CLIENT,
            session: 1_700_000_000_000_001,
            metadata_watermark: 42,
        }
        .to_bytes(),
    );
    write(
        &dir,
        "poll_routing_reply",
        &PollRoutingResponse {
            consumer_session: AttachConsumerSessionRequest {
                client_id: CLIENT,
                session: 1_700_000_000_000_001,
                metadata_watermark: 0,
            },
            primary: ClusterNodeResponse {
                name: "node-2".into(),
                ip: "127.0.0.1".into(),
                tcp_port: 8092,
                quic_port: 0,
                http_port: 0,
                websocket_port: 0,
                role: 1,
                status: 0,
            },
        }
        .to_bytes(),
    );
    // Users (31-37): bodies and replies, permissions with a stream and its topics.
    let permissions = WirePermissions {
        global: WireGlobalPermissions {
            manage_servers: false,
            read_servers: true,
            manage_users: false,
            read_users: true,
            manage_streams: false,
            read_streams: true,
            manage_topics: false,
            read_topics: true,
            poll_messages: true,
            send_messages: false,
        },
        streams: vec![
            WireStreamPermissions {
                stream_id: 0,
                manage_stream: false,
                read_stream: true,
                manage_topics: true,
                read_topics: true,
                poll_messages: true,
                send_messages: true,
                topics: vec![
                    WireTopicPermissions {
                        topic_id: 1,
                        manage_topic: true,
                        read_topic: true,
                        poll_messages: false,
                        send_messages: true,
                    },
                    WireTopicPermissions {
                        topic_id: 2,
                        manage_topic: false,
                        read_topic: true,
                        poll_messages: true,
                        send_messages: false,
                    },
                ],
            },
            WireStreamPermissions {
                stream_id: 3,
                manage_stream: true,
                read_stream: true,
                manage_topics: false,
                read_topics: false,
                poll_messages: false,
                send_messages: false,
                topics: vec![],
            },
        ],
    };
    write(
        &dir,
        "create_user_body",
        &CreateUserRequest {
            username: name("alice"),
            password: "s3cret-pw".into(),
            status: 1,
            permissions: Some(permissions.clone()),
            options: WireOptions::empty(),
        }
        .to_bytes(),
    );
    write(
        &dir,
        "create_user_plain_body",
        &CreateUserRequest {
            username: name("bob"),
            password: "pw-of-bob".into(),
            status: 2,
            permissions: None,
            options: WireOptions::empty(),
        }
        .to_bytes(),
    );
    write(
        &dir,
        "get_user_body",
        &GetUserRequest {
            user_id: WireIdentifier::named("alice").unwrap(),
        }
        .to_bytes(),
    );
    write(
        &dir,
        "delete_user_body",
        &DeleteUserRequest {
            user_id: WireIdentifier::numeric(3),
        }
        .to_bytes(),
    );
    write(
        &dir,
        "update_user_body",
        &UpdateUserRequest {
            user_id: WireIdentifier::numeric(1),
            username: Some(name("alicia")),
            status: Some(2),
            options: WireOptions::empty(),
        }
        .to_bytes(),
    );
    write(
        &dir,
        "update_user_status_only_body",
        &UpdateUserRequest {
            user_id: WireIdentifier::numeric(1),
            username: None,
            status: Some(1),
            options: WireOptions::empty(),
        }
        .to_bytes(),
    );
    write(
        &dir,
        "update_permissions_body",
        &UpdatePermissionsRequest {
            user_id: WireIdentifier::named("alice").unwrap(),
            permissions: Some(permissions.clone()),
        }
        .to_bytes(),
    );
    write(
        &dir,
        "update_permissions_none_body",
        &UpdatePermissionsRequest {
            user_id: WireIdentifier::numeric(1),
            permissions: None,
        }
        .to_bytes(),
    );
    write(
        &dir,
        "change_password_body",
        &ChangePasswordRequest {
            user_id: WireIdentifier::named("alice").unwrap(),
            current_password: "s3cret-pw".into(),
            new_password: "n3w-secret".into(),
        }
        .to_bytes(),
    );
    let alice = UserResponse {
        id: 1,
        created_at: 0,
        status: 1,
        username: name("alice"),
        options: WireOptions::empty(),
    };
    write(
        &dir,
        "get_users_reply",
        &GetUsersResponse {
            users: vec![
                UserResponse {
                    id: 0,
                    created_at: 0,
                    status: 1,
                    username: name("iggy"),
                    options: WireOptions::empty(),
                },
                alice.clone(),
            ],
        }
        .to_bytes(),
    );
    write(
        &dir,
        "get_user_reply",
        &UserDetailsResponse {
            user: alice.clone(),
            permissions: Some(permissions),
        }
        .to_bytes(),
    );
    write(
        &dir,
        "get_user_plain_reply",
        &UserDetailsResponse {
            user: alice,
            permissions: None,
        }
        .to_bytes(),
    );
    // Personal access tokens (41-43, and the token login, 45).
    write(
        &dir,
        "create_token_body",
        &CreatePersonalAccessTokenRequest {
            name: name("deploy"),
            expiry: 3_600_000_000,
        }
        .to_bytes(),
    );
    write(
        &dir,
        "delete_token_body",
        &DeletePersonalAccessTokenRequest {
            name: name("deploy"),
        }
        .to_bytes(),
    );
    write(
        &dir,
        "create_token_reply",
        &RawPersonalAccessTokenResponse {
            token: name("c6f8f6d00fe1ddf9dfbbeed53e32bd665f5daeb2d23219d9ce8d6e65b9da27a3"),
        }
        .to_bytes(),
    );
    write(
        &dir,
        "get_tokens_reply",
        &GetPersonalAccessTokensResponse {
            tokens: vec![
                PersonalAccessTokenResponse {
                    name: name("deploy"),
                    expiry_at: 0,
                },
                PersonalAccessTokenResponse {
                    name: name("brief"),
                    expiry_at: 1_800_000_000_000_000,
                },
            ],
        }
        .to_bytes(),
    );
    write(
        &dir,
        "login_token_body",
        &LoginRegisterWithPatRequest {
            version_info: ClientVersionInfo {
                protocol_version: iggy_binary_protocol::version::IGGY_PROTOCOL_VERSION,
                sdk_name: name("rust-sdk"),
                sdk_version: name("0.11.0"),
            },
            token: SecretString::from(
                "c6f8f6d00fe1ddf9dfbbeed53e32bd665f5daeb2d23219d9ce8d6e65b9da27a3",
            ),
            client_context: None,
        }
        .to_bytes(),
    );
    let _ = Bytes::new();
}
