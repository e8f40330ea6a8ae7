//! Three server nodes on loopback (real files, the TCP replica bus, the client port) and a client
//! that speaks the SDK's wire with `iggy-protocol`: the session rules, the metadata commands, a
//! send to each partition's primary, polls and consumer offsets, and the refusals that keep the
//! connection or end it. Every read has a deadline that fails the test.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

use iggy_io::OsStorage;
use iggy_node::NodeConfig;
use iggy_protocol::primitives::OptionEntry;
use iggy_protocol::response::{
    self, ClusterMetadata, ConsumerOffsetInfo, PollHeader, read_send_confirmations,
    read_stream_details, read_streams, read_topic_details, read_topics, split_result,
};
use iggy_protocol::{
    Consumer, Eviction, EvictionReason, HEADER_SIZE, Identifier, Operation, Partitioning,
    PollingStrategy, Reader, Request, RequestHeader, status,
};
use iggy_recovery::BootConfig;
use iggy_recovery::populate::FirstView;
use iggy_server::bus::BusConfig;
use iggy_server::client_port::{PortConfig, RosterNode, hash_password};
use iggy_server::process::{Listen, ServerNode};
use iggy_server::translate::TopicDefaults;

mod common;
use common::{Answer, Client, free_addresses};
use iggy_superblock::Identity;
use iggy_vsr::{Config, Safeguards};

const CLUSTER: u128 = 0x1991;

fn boot_config(incarnation: u64) -> BootConfig {
    BootConfig {
        metadata_file_size_bytes: 1 << 20,
        segment_size_bytes: 1 << 20,
        index_interval_bytes: 4096,
        ..BootConfig::new(incarnation)
    }
}

/// A client logged in as root on each of `addresses`, client ids from `first` up.
fn logged_in(addresses: &[SocketAddr], first: u128) -> Vec<Client> {
    (0u128..)
        .zip(addresses)
        .map(|(i, address)| {
            let mut c = Client::connect(*address, first + i);
            assert!(matches!(c.login("iggy"), Answer::Reply(..)));
            c
        })
        .collect()
}

struct Cluster {
    nodes: Vec<ServerNode<OsStorage>>,
    _dirs: Vec<tempfile::TempDir>,
}

thread_local! {
    /// The `in_flight_bytes` of the nodes this test's thread starts.
    static IN_FLIGHT: std::cell::Cell<u64> = const { std::cell::Cell::new(64 << 20) };
}

fn start_cluster() -> Cluster {
    start_cluster_with(|_| iggy_server::admission::Admission::default(), 1_000)
}

/// [`start_cluster`], node `i` admitting by `admission(i)`, each keeping `max_connections`.
fn start_cluster_with(
    admission: impl Fn(u8) -> iggy_server::admission::Admission,
    max_connections: u64,
) -> Cluster {
    start_cluster_tls(admission, max_connections, None)
}

/// [`start_cluster_with`], both ports over TLS with the certificates `tls` names.
fn start_cluster_tls(
    admission: impl Fn(u8) -> iggy_server::admission::Admission,
    max_connections: u64,
    tls: Option<&iggy_server::tls::Generated>,
) -> Cluster {
    let replica_addresses = free_addresses(3);
    let client_addresses = free_addresses(3);
    let roster: Vec<RosterNode> = client_addresses
        .iter()
        .enumerate()
        .map(|(i, a)| RosterNode {
            name: format!("node-{i}"),
            client_address: *a,
        })
        .collect();
    let dirs: Vec<tempfile::TempDir> = (0..3)
        .map(|_| tempfile::tempdir().expect("tempdir"))
        .collect();
    let mut nodes = Vec::new();
    for (i, dir) in (0u8..).zip(&dirs) {
        let storage = OsStorage::open(dir.path()).expect("open");
        let identity = Identity {
            cluster: CLUSTER,
            replica: i,
            replica_count: 3,
        };
        iggy_recovery::populate::genesis(
            &storage,
            identity,
            &boot_config(0),
            &[],
            &[],
            FirstView::Zero,
        )
        .expect("a new node");
        let node_config = NodeConfig {
            metadata_vsr: None,
            cluster: CLUSTER,
            replica: i,
            replicas: 3,
            vsr: Config::default(),
            safeguards: Safeguards::default(),
            checkpoint_bytes: 4 << 20,
            repair_ration: true,
            boot: boot_config(u64::from(i) << 48 | 1),
            mirror_metadata: true,
            ring_budget_bytes: 0,
            pipeline_budget_bytes: 0,
        };
        let bus = BusConfig {
            cluster: CLUSTER,
            replica: i,
            peers: replica_addresses.clone(),
            key: b"secret".to_vec(),
            tls: tls.map(|tls| iggy_server::bus::BusTls {
                server: server_tls(tls, i),
                client: iggy_server::tls::client_config(&tls.ca).expect("the CA"),
            }),
        };
        let port = PortConfig {
            cluster: CLUSTER,
            cluster_name: "test".into(),
            replica: i,
            roster: roster.clone(),
            root_username: "iggy".into(),
            root_password_hash: hash_password("iggy"),
            max_request_bytes: 8 << 20,
            reply_deadline: Duration::from_secs(10),
            topic_defaults: TopicDefaults {
                segment_size_bytes: 1 << 20,
                durability: iggy_metadata::Durability::Replicated,
                replication_factor: 3,
            },
            server_version: "0.1.0".into(),
            admission: admission(i),
            max_connections,
            in_flight_bytes: IN_FLIGHT.get(),
            tls: tls.map(|tls| server_tls(tls, i)),
        };
        let listen = Listen {
            client: client_addresses[usize::from(i)],
            metrics: None,
            storage_threads: 2,
            network_threads: 1,
        };
        nodes.push(
            ServerNode::start(storage, &node_config, bus, port, &listen).expect("the node starts"),
        );
    }
    Cluster { nodes, _dirs: dirs }
}

fn server_tls(tls: &iggy_server::tls::Generated, i: u8) -> std::sync::Arc<rustls::ServerConfig> {
    let (cert, key) = tls.nodes[usize::from(i)].clone();
    iggy_server::tls::server_config(&iggy_server::tls::TlsConfig {
        cert,
        key,
        ca: tls.ca.clone(),
        client_port: true,
        replica_bus: true,
    })
    .expect("the node's certificate")
}

fn batch(messages: &[&[u8]]) -> Vec<u8> {
    let messages: Vec<iggy_format::batch::NewMessage> = messages
        .iter()
        .zip(0u32..)
        .map(|(payload, i)| iggy_format::batch::NewMessage {
            id: u128::from(i) + 1,
            timestamp_delta: i,
            payload: payload.to_vec(),
            user_headers: Vec::new(),
        })
        .collect();
    iggy_format::batch::encode(1_700_000_000_000_000, &messages).expect("batch")
}

#[test]
fn a_client_on_the_sdks_wire_creates_sends_polls_and_stores_offsets() {
    let cluster = start_cluster();
    let addresses: Vec<SocketAddr> = cluster.nodes.iter().map(|n| n.client_address).collect();
    let mut client = Client::connect(addresses[0], 0xabc);

    // Before login: ping only. A read is refused with a status; a write without a session
    // cannot even be framed as one (the SDK never sends it) and ends the connection.
    assert_eq!(client.ask(&Request::Ping), (0, vec![]));
    assert_eq!(client.ask(&Request::GetStreams).0, status::UNAUTHENTICATED);
    // Its body is not even decoded: one that could not be is refused for the session, not
    // for its format.
    let garbage = RequestHeader {
        size: u32::try_from(HEADER_SIZE + 3).expect("small"),
        client: 0xabc,
        request_checksum: 0,
        timestamp: 0,
        request: 0,
        operation: Operation::NonReplicated,
        session: 0,
        user_id: 0,
        code: iggy_protocol::code::GET_STREAM,
    };
    let Answer::Reply(reply, _) = client.send_raw(&garbage, &[0xff, 0xff, 0xff]) else {
        panic!("an unauthenticated request was evicted, not refused")
    };
    assert_eq!(reply.status, status::UNAUTHENTICATED);
    let create = Request::CreateStream {
        name: "orders".into(),
        options: vec![],
    };
    let Answer::Evicted(eviction) = client.call(&create) else {
        panic!("a write without a session was taken")
    };
    assert_eq!(eviction.reason, EvictionReason::NoSession);
    let mut client = Client::connect(addresses[0], 0xabc);

    // A wrong password ends the connection with an eviction.
    let Answer::Evicted(eviction) = client.login("wrong") else {
        panic!("a wrong password was let in")
    };
    assert_eq!(eviction.reason, EvictionReason::InvalidCredentials);
    let mut client = Client::connect(addresses[0], 0xabc);
    assert!(matches!(client.login("iggy"), Answer::Reply(..)));

    let (code, body) = client.ask(&Request::GetClusterMetadata);
    assert_eq!(code, 0);
    let metadata = ClusterMetadata::read(&mut Reader::new(&body)).expect("cluster metadata");
    assert_eq!(metadata.nodes.len(), 3);
    assert_eq!(
        metadata.nodes.iter().filter(|n| n.role == 0).count(),
        1,
        "one leader"
    );
    assert_eq!(metadata.nodes[0].tcp_port, addresses[0].port());

    let (code, body) = client.ask_until_accepted(&create);
    assert_eq!(code, 0);
    let (stream, _) =
        read_stream_details(split_result(&body).expect("framed").expect("ok")).expect("stream");
    assert_eq!((stream.id, stream.name.as_str()), (0, "orders"));
    let (code, body) = client.ask_until_accepted(&create);
    assert_eq!(code, 0, "a refusal is a result section, not a status");
    assert_eq!(
        split_result(&body).expect("framed"),
        Err(status::STREAM_NAME_ALREADY_EXISTS)
    );

    let (code, body) = client.ask_until_accepted(&Request::CreateTopic {
        stream: Identifier::Numeric(0),
        partitions: 3,
        name: "payments".into(),
        options: vec![
            OptionEntry::string("consumer_offset_durability", "replicated"),
            OptionEntry::string("durability", "persisted"),
        ],
    });
    assert_eq!(code, 0);
    let (topic, partitions) =
        read_topic_details(split_result(&body).expect("framed").expect("ok")).expect("topic");
    assert_eq!((topic.name.as_str(), partitions.len()), ("payments", 3));
    assert_eq!(
        topic.options[0],
        OptionEntry::string("durability", "persisted")
    );
    let (_, body) = client.ask(&Request::GetStreams);
    assert_eq!(read_streams(&body).expect("streams").len(), 1);

    // A send to each partition through a different node: each takes it, whichever node leads
    // the partition (a node that does not forwards the request to the one that does, over the
    // replica bus, and the reply comes back the same way).
    let mut sessions: Vec<Client> = Vec::new();
    for (i, address) in addresses.iter().enumerate() {
        let mut c = Client::connect(*address, 0x100 + i as u128);
        assert!(matches!(c.login("iggy"), Answer::Reply(..)));
        assert_ne!(c.session, 0, "node {i} logged the client in");
        sessions.push(c);
    }
    let mut forwarded = 0;
    for partition in 0..3u32 {
        let send = Request::SendMessages {
            stream: Identifier::Name("orders".into()),
            topic: Identifier::Name("payments".into()),
            partitioning: Partitioning::PartitionId(partition),
            count: 2,
            batch: batch(&[b"first", b"second"]),
        };
        let via = partition as usize;
        let (code, body) = sessions[via].ask_until_accepted(&send);
        assert_eq!(code, 0, "partition {partition} via node {via}");
        let confirmations = read_send_confirmations(&body).expect("confirmation");
        assert_eq!(
            (confirmations[0].partition_id, confirmations[0].base_offset),
            (partition, 0)
        );
        let group = iggy_recovery::PartitionKey {
            stream: 1,
            topic: 1,
            partition: partition + 1,
        }
        .group_id();
        if cluster.nodes[via].views.leader(group).map(usize::from) != Some(via) {
            forwarded += 1;
        }
    }
    assert!(
        forwarded > 0,
        "the primaries are spread, so some send went through another node"
    );
    // Polls read committed data where it is committed first: on the partition's primary.
    let leaders: Vec<usize> = (0..3u32)
        .map(|p| {
            let group = iggy_recovery::PartitionKey {
                stream: 1,
                topic: 1,
                partition: p + 1,
            }
            .group_id();
            usize::from(cluster.nodes[0].views.leader(group).expect("a primary"))
        })
        .collect();

    // Polls on the leader read what was committed.
    for (partition, node) in (0u32..).zip(&leaders) {
        let session = &mut sessions[*node];
        let consumer = Consumer {
            group: false,
            id: Identifier::Numeric(1),
        };
        let (code, body) = session.ask(&Request::PollMessages {
            consumer: consumer.clone(),
            stream: Identifier::Numeric(0),
            topic: Identifier::Numeric(0),
            partition: Some(partition),
            strategy: PollingStrategy::Offset(0),
            count: 10,
            auto_commit: false,
        });
        assert_eq!(code, 0);
        let (header, batches) = PollHeader::read(&body).expect("poll");
        assert_eq!((header.messages_count, header.current_offset), (2, 1));
        let batch = iggy_format::batch::decode(batches).expect("a stored batch");
        let payloads: Vec<&[u8]> = batch.messages().map(|m| m.payload).collect();
        assert_eq!(payloads, vec![&b"first"[..], &b"second"[..]]);

        let offset_of = |session: &mut Client| {
            let (code, body) = session.ask(&Request::GetConsumerOffset {
                consumer: consumer.clone(),
                stream: Identifier::Numeric(0),
                topic: Identifier::Numeric(0),
                partition: Some(partition),
            });
            assert_eq!(code, 0);
            ConsumerOffsetInfo::read(&body).expect("offset")
        };
        assert_eq!(offset_of(session), None);
        let (code, body) = session.ask(&Request::StoreConsumerOffset {
            consumer: consumer.clone(),
            stream: Identifier::Numeric(0),
            topic: Identifier::Numeric(0),
            partition: Some(partition),
            offset: 1,
            ack: 1,
        });
        assert_eq!(
            (code, split_result(&body).expect("framed")),
            (0, Ok(&[][..]))
        );
        assert_eq!(offset_of(session).map(|o| o.stored_offset), Some(1));
    }

    // Auto-commit: a `Next` poll answers from after the consumer's stored offset and stores the
    // last offset it answered, committed before the answer. The session's latest replicated
    // request is a send to the same partition: a poll repeats its request number, and under the
    // session's own client id the store would be taken for that send's replay and never applied.
    let session = &mut sessions[leaders[0]];
    let (code, _) = session.ask_until_accepted(&Request::SendMessages {
        stream: Identifier::Name("orders".into()),
        topic: Identifier::Name("payments".into()),
        partitioning: Partitioning::PartitionId(0),
        count: 2,
        batch: batch(&[b"third", b"fourth"]),
    });
    assert_eq!(code, 0);
    let consumer = Consumer {
        group: false,
        id: Identifier::Numeric(2),
    };
    let next = |session: &mut Client| {
        let (code, body) = session.ask(&Request::PollMessages {
            consumer: consumer.clone(),
            stream: Identifier::Numeric(0),
            topic: Identifier::Numeric(0),
            partition: Some(0),
            strategy: PollingStrategy::Next,
            count: 1,
            auto_commit: true,
        });
        assert_eq!(code, 0);
        let (header, batches) = PollHeader::read(&body).expect("poll");
        let payloads: Vec<Vec<u8>> = if header.messages_count == 0 {
            vec![]
        } else {
            let batch = iggy_format::batch::decode(batches).expect("a stored batch");
            batch.messages().map(|m| m.payload.to_vec()).collect()
        };
        let (code, body) = session.ask(&Request::GetConsumerOffset {
            consumer: consumer.clone(),
            stream: Identifier::Numeric(0),
            topic: Identifier::Numeric(0),
            partition: Some(0),
        });
        assert_eq!(code, 0);
        let stored = ConsumerOffsetInfo::read(&body)
            .expect("offset")
            .map(|o| o.stored_offset);
        (payloads, stored)
    };
    assert_eq!(
        next(session),
        (vec![b"first".to_vec(), b"second".to_vec()], Some(1)),
        "the first poll answers the first batch and stores its last offset"
    );
    assert_eq!(
        next(session),
        (vec![b"third".to_vec(), b"fourth".to_vec()], Some(3))
    );
    assert_eq!(
        next(session),
        (vec![], Some(3)),
        "nothing after: nothing stored"
    );

    // DeleteConsumerOffset: the consumer has no offset any more (a tombstone through the
    // partition's log), so `Next` starts from the beginning; a delete of none is refused.
    let delete = Request::DeleteConsumerOffset {
        consumer: consumer.clone(),
        stream: Identifier::Numeric(0),
        topic: Identifier::Numeric(0),
        partition: Some(0),
        ack: 1,
    };
    let (code, body) = session.ask_until_accepted(&delete);
    assert_eq!(
        (code, split_result(&body).expect("framed")),
        (0, Ok(&[][..]))
    );
    assert_eq!(
        next(session),
        (vec![b"first".to_vec(), b"second".to_vec()], Some(1)),
        "after the delete, Next reads from the start (and stores again)"
    );
    assert_eq!(session.ask_until_accepted(&delete).0, 0);
    assert_eq!(
        session.ask(&delete).0,
        status::CONSUMER_OFFSET_NOT_FOUND,
        "nothing left to delete"
    );

    // A request number sent again is a replay only with the same body: the original's reply,
    // nothing appended twice. With another body (a client that reused its number) it is
    // refused with `StaleClient`, never answered with the first body's confirmation.
    let send = |payload: &[u8]| Request::SendMessages {
        stream: Identifier::Name("orders".into()),
        topic: Identifier::Name("payments".into()),
        partitioning: Partitioning::PartitionId(0),
        count: 1,
        batch: batch(&[payload]),
    };
    let (code, body) = session.ask_until_accepted(&send(b"fifth"));
    assert_eq!(code, 0);
    let appended = read_send_confirmations(&body).expect("confirmation")[0].base_offset;
    session.request -= 1;
    let (code, body) = session.ask(&send(b"fifth"));
    assert_eq!(code, 0, "a replay");
    assert_eq!(
        read_send_confirmations(&body).expect("confirmation")[0].base_offset,
        appended
    );
    session.request -= 1;
    assert_eq!(
        session.ask(&send(b"sixth")).0,
        status::STALE_CLIENT,
        "a reused number with another body"
    );
    let consumer = Consumer {
        group: false,
        id: Identifier::Numeric(3),
    };
    let (code, body) = session.ask(&Request::PollMessages {
        consumer,
        stream: Identifier::Numeric(0),
        topic: Identifier::Numeric(0),
        partition: Some(0),
        strategy: PollingStrategy::Offset(appended),
        count: 10,
        auto_commit: false,
    });
    assert_eq!(code, 0);
    let (header, _) = PollHeader::read(&body).expect("poll");
    assert_eq!(
        header.messages_count, 1,
        "only the first body was appended, once"
    );

    // A command this server does not serve is an error status; the connection stays.
    let (code, body) = client.ask(&Request::Other { code: 15 });
    assert_eq!((code, body.len()), (status::INVALID_COMMAND, 0));
    assert_eq!(client.ask(&Request::Ping), (0, vec![]));
    // A header no client sends ends the connection with an eviction.
    let mut bad = RequestHeader {
        size: 256,
        client: client.client,
        request_checksum: 0,
        timestamp: 0,
        request: 0,
        operation: Operation::NonReplicated,
        session: client.session,
        user_id: 0,
        code: 1,
    }
    .encode();
    bad[176] = 64;
    client.stream.write_all(&bad).expect("write");
    let mut head = [0u8; HEADER_SIZE];
    client.stream.read_exact(&mut head).expect("an eviction");
    assert_eq!(
        Eviction::decode(&head).expect("eviction").reason,
        EvictionReason::InvalidRequestOperation
    );

    for node in cluster.nodes {
        node.stop().expect("a clean stop");
    }
}

/// Linearizable reads (`docs/vsr.md`, "Linearizable reads"): a message acknowledged to one
/// client is returned by the next poll any client sends to any node, and a stored offset by the
/// next offset read, whichever node took the write and whichever leads the partition. A backup
/// serving from what it executed trails the primary by up to a heartbeat (500 ms); each poll
/// here goes out the instant the send's reply is read.
#[test]
fn every_acknowledged_write_is_read_by_the_next_poll_through_any_node() {
    let cluster = start_cluster();
    let addresses: Vec<SocketAddr> = cluster.nodes.iter().map(|n| n.client_address).collect();
    let mut sessions = logged_in(&addresses, 0x200);
    let (code, _) = sessions[0].ask_until_accepted(&Request::CreateStream {
        name: "reads".into(),
        options: vec![],
    });
    assert_eq!(code, 0);
    // Created through node 0, found at once through node 2 (a metadata read after a barrier).
    let (code, body) = sessions[2].ask_until_accepted(&Request::CreateTopic {
        stream: Identifier::Name("reads".into()),
        partitions: 3,
        name: "t".into(),
        options: vec![],
    });
    assert_eq!(
        (code, split_result(&body).map(|r| r.is_ok())),
        (0, Ok(true))
    );
    for session in &mut sessions {
        let (code, body) = session.ask(&Request::GetTopic {
            stream: Identifier::Name("reads".into()),
            topic: Identifier::Name("t".into()),
        });
        assert_eq!(code, 0);
        let (topic, _) = read_topic_details(&body).expect("the topic, not an empty answer");
        assert_eq!(topic.name, "t");
    }
    // The same client id logs in again on a new connection (its login is request 0, its next
    // write request 1 again): a new session, neither dropped as stale nor answered from the
    // first session's table.
    let mut again = Client::connect(addresses[1], 0x200);
    let Answer::Reply(header, _) = again.login("iggy") else {
        panic!("evicted")
    };
    assert_eq!(header.status, 0, "a second login under the same id");
    assert_ne!(again.session, sessions[0].session);
    let (code, body) = again.ask_until_accepted(&Request::CreateStream {
        name: "again".into(),
        options: vec![],
    });
    assert_eq!(code, 0);
    let (stream, _) =
        read_stream_details(split_result(&body).expect("framed").expect("a new stream"))
            .expect("stream");
    assert_eq!(
        stream.name, "again",
        "applied, not the first session's reply"
    );

    let mut stale = Vec::new();
    for round in 0..12u32 {
        for partition in 0..3u32 {
            let via = ((round + partition) % 3) as usize;
            let payload = format!("{round}-{partition}");
            let (code, body) = sessions[via].ask_until_accepted(&Request::SendMessages {
                stream: Identifier::Name("reads".into()),
                topic: Identifier::Name("t".into()),
                partitioning: Partitioning::PartitionId(partition),
                count: 1,
                batch: batch(&[payload.as_bytes()]),
            });
            assert_eq!(code, 0);
            let offset = read_send_confirmations(&body).expect("confirmation")[0].base_offset;
            assert_eq!(offset, u64::from(round));
            for (node, session) in sessions.iter_mut().enumerate() {
                let (code, body) = session.ask(&Request::PollMessages {
                    consumer: Consumer {
                        group: false,
                        id: Identifier::Numeric(9),
                    },
                    stream: Identifier::Name("reads".into()),
                    topic: Identifier::Name("t".into()),
                    partition: Some(partition),
                    strategy: PollingStrategy::Offset(offset),
                    count: 1,
                    auto_commit: false,
                });
                assert_eq!(code, 0);
                let (header, batches) = PollHeader::read(&body).expect("poll");
                let read = (header.messages_count > 0)
                    .then(|| iggy_format::batch::decode(batches).expect("a stored batch"))
                    .and_then(|b| b.messages().next().map(|m| m.payload.to_vec()));
                if read.as_deref() != Some(payload.as_bytes()) {
                    stale.push((round, partition, via, node, read));
                }
            }
            // An offset stored through one node is read back through the next.
            let consumer = Consumer {
                group: false,
                id: Identifier::Numeric(round + 1),
            };
            let (code, _) = sessions[via].ask_until_accepted(&Request::StoreConsumerOffset {
                consumer: consumer.clone(),
                stream: Identifier::Name("reads".into()),
                topic: Identifier::Name("t".into()),
                partition: Some(partition),
                offset,
                ack: 1,
            });
            assert_eq!(code, 0);
            let other = (via + 1) % 3;
            let (code, body) = sessions[other].ask(&Request::GetConsumerOffset {
                consumer,
                stream: Identifier::Name("reads".into()),
                topic: Identifier::Name("t".into()),
                partition: Some(partition),
            });
            assert_eq!(code, 0);
            let stored = ConsumerOffsetInfo::read(&body)
                .expect("offset")
                .map(|o| o.stored_offset);
            if stored != Some(offset) {
                stale.push((round, partition, via, other, None));
            }
        }
    }
    assert!(
        stale.is_empty(),
        "reads that missed an acknowledged write (round, partition, written via, read via, read): {stale:?}"
    );
}

/// A client logged in at `address` as `client`, with stream `stream` and its topic `t` of one
/// partition created.
fn one_partition_topic(address: SocketAddr, client: u128, stream: &str) -> Client {
    let mut c = Client::connect(address, client);
    assert!(matches!(c.login("iggy"), Answer::Reply(..)));
    let (code, _) = c.ask_until_accepted(&Request::CreateStream {
        name: stream.into(),
        options: vec![],
    });
    assert_eq!(code, 0);
    let (code, _) = c.ask_until_accepted(&Request::CreateTopic {
        stream: Identifier::Name(stream.into()),
        partitions: 1,
        name: "t".into(),
        options: vec![],
    });
    assert_eq!(code, 0);
    c
}

/// A client that sends an auto-commit poll and leaves before the answer (it timed out on a
/// paused node and moved on) does not move its consumer's offset: nobody reads the answer, and
/// a store from so stale a request would skip messages for the consumer's next poll elsewhere.
/// Without the check (`peer_closed` in `client_port.rs`) the poll is answered into the closed
/// connection and the consumer's next poll starts past the batch it took.
#[test]
fn an_auto_commit_poll_whose_client_left_stores_no_offset() {
    let cluster = start_cluster();
    let addresses: Vec<SocketAddr> = cluster.nodes.iter().map(|n| n.client_address).collect();
    let mut c = one_partition_topic(addresses[0], 0x300, "orphans");
    let (code, _) = c.ask_until_accepted(&Request::SendMessages {
        stream: Identifier::Name("orphans".into()),
        topic: Identifier::Name("t".into()),
        partitioning: Partitioning::PartitionId(0),
        count: 3,
        batch: batch(&[b"a", b"b", b"c"]),
    });
    assert_eq!(code, 0);
    let poll = |auto_commit| Request::PollMessages {
        consumer: Consumer {
            group: false,
            id: Identifier::Numeric(7),
        },
        stream: Identifier::Name("orphans".into()),
        topic: Identifier::Name("t".into()),
        partition: Some(0),
        strategy: PollingStrategy::Next,
        count: 1,
        auto_commit,
    };
    // The leaving client: logged in on node 1, its poll sent, its side closed at once.
    let mut leaving = Client::connect(addresses[1], 0x301);
    assert!(matches!(leaving.login("iggy"), Answer::Reply(..)));
    let (code, body) = poll(true).encode();
    let header = RequestHeader {
        size: u32::try_from(HEADER_SIZE + body.len()).expect("small"),
        client: leaving.client,
        request_checksum: 0,
        timestamp: 0,
        request: leaving.request,
        operation: Operation::for_code(code),
        session: leaving.session,
        user_id: 0,
        code,
    };
    leaving
        .stream
        .write_all(&header.encode())
        .expect("write header");
    leaving.stream.write_all(&body).expect("write body");
    leaving
        .stream
        .shutdown(std::net::Shutdown::Write)
        .expect("shutdown");
    let mut rest = Vec::new();
    let _ = leaving.stream.read_to_end(&mut rest);
    assert!(
        rest.is_empty(),
        "the node answered a poll whose client had left ({} bytes)",
        rest.len()
    );
    // The consumer's next poll, through another node, starts at the first message.
    let (code, body) = c.ask(&poll(true));
    assert_eq!(code, 0);
    let (header, batches) = PollHeader::read(&body).expect("poll");
    assert!(
        header.messages_count > 0,
        "the orphan poll's offset was stored: the consumer's next poll found nothing"
    );
    let first = iggy_format::batch::decode(batches).expect("a stored batch");
    let message = first.messages().next().expect("a message");
    assert_eq!(
        message.payload,
        &b"a"[..],
        "the orphan poll's offset was stored: the consumer skipped a message"
    );
}

/// Issue #46: a create the nodes could not carry out is refused before it is proposed (the
/// status names the bound), and the cluster goes on: the next create within the bounds commits.
/// Without the admission check, the 5,000-partition topic commits and every node halts creating
/// it (on a small disk) or runs out of descriptors.
#[test]
fn a_topic_out_of_bounds_is_refused_before_it_commits() {
    let cluster = start_cluster();
    let addresses: Vec<SocketAddr> = cluster.nodes.iter().map(|n| n.client_address).collect();
    let mut c = Client::connect(addresses[1], 0x400);
    assert!(matches!(c.login("iggy"), Answer::Reply(..)));
    let (code, _) = c.ask_until_accepted(&Request::CreateStream {
        name: "bounds".into(),
        options: vec![],
    });
    assert_eq!(code, 0);
    let create = |name: &str, partitions, options| Request::CreateTopic {
        stream: Identifier::Name("bounds".into()),
        partitions,
        name: name.into(),
        options,
    };
    let (code, _) = c.ask(&create(
        "tiny",
        1,
        vec![OptionEntry::uint64("segment_size", 1)],
    ));
    assert_eq!(code, iggy_server::admission::INVALID_SEGMENT_SIZE);
    let (code, _) = c.ask(&create(
        "huge",
        1,
        vec![OptionEntry::uint64("segment_size", 1 << 50)],
    ));
    assert_eq!(code, iggy_server::admission::INVALID_SEGMENT_SIZE);
    let (code, _) = c.ask(&create("wide", 5_000, vec![]));
    assert_eq!(code, status::TOO_MANY_PARTITIONS);
    // Nothing of them committed, and the cluster takes the next create.
    let (code, body) = c.ask_until_accepted(&create("fits", 2, vec![]));
    assert_eq!(
        (code, split_result(&body).map(|r| r.is_ok())),
        (0, Ok(true))
    );
    let (code, body) = c.ask(&Request::GetTopics {
        stream: Identifier::Name("bounds".into()),
    });
    assert_eq!(code, 0);
    let topics = read_topics(&body).expect("topics");
    let names: Vec<&str> = topics.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, vec!["fits"]);
}

/// Issue #46: while one node's disk is below its reserve, every node refuses client writes
/// with 4010 (the low node's pings say so), reads and offset stores go on, and writes resume by
/// themselves once space is freed. Without the refusal the sends commit and the low node's next
/// segment allocation fails.
#[test]
fn writes_wait_while_a_nodes_disk_is_below_its_reserve() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    let free = Arc::new(AtomicU64::new(u64::MAX));
    let cluster = start_cluster_with(
        |i| iggy_server::admission::Admission {
            free_bytes_source: (i == 2).then(|| free.clone()),
            ..iggy_server::admission::Admission::default()
        },
        1_000,
    );
    let addresses: Vec<SocketAddr> = cluster.nodes.iter().map(|n| n.client_address).collect();
    let mut c = one_partition_topic(addresses[0], 0x500, "full");
    let send = |i: u32| Request::SendMessages {
        stream: Identifier::Name("full".into()),
        topic: Identifier::Name("t".into()),
        partitioning: Partitioning::PartitionId(0),
        count: 1,
        batch: batch(&[format!("m{i}").as_bytes()]),
    };
    let (code, _) = c.ask_until_accepted(&send(0));
    assert_eq!(code, 0);
    // Node 2's disk fills: within a ping or two, node 0 refuses.
    free.store(0, Ordering::Relaxed);
    let mut committed = 1u64;
    let mut refused = false;
    for i in 1..2_000u32 {
        let (code, _) = c.ask_until_accepted(&send(i));
        if code == iggy_server::admission::DISK_LOW {
            refused = true;
            break;
        }
        assert_eq!(code, 0);
        committed += 1;
    }
    assert!(
        refused,
        "no write refused while node 2's disk was below its reserve"
    );
    // Reads and offset stores go on.
    let (code, body) = c.ask(&Request::PollMessages {
        consumer: Consumer {
            group: false,
            id: Identifier::Numeric(1),
        },
        stream: Identifier::Name("full".into()),
        topic: Identifier::Name("t".into()),
        partition: Some(0),
        strategy: PollingStrategy::Offset(0),
        count: 100_000,
        auto_commit: false,
    });
    assert_eq!(code, 0);
    let (header, _) = PollHeader::read(&body).expect("poll");
    assert_eq!(u64::from(header.messages_count), committed);
    let (code, _) = c.ask_until_accepted(&Request::StoreConsumerOffset {
        consumer: Consumer {
            group: false,
            id: Identifier::Numeric(1),
        },
        stream: Identifier::Name("full".into()),
        topic: Identifier::Name("t".into()),
        partition: Some(0),
        offset: 0,
        ack: 1,
    });
    assert_eq!(code, 0, "an offset store while the disk is low");
    // Space freed: writes resume by themselves.
    free.store(u64::MAX, Ordering::Relaxed);
    let mut resumed = false;
    for i in 0..2_000u32 {
        let (code, _) = c.ask_until_accepted(&send(10_000 + i));
        if code == 0 {
            resumed = true;
            break;
        }
        assert_eq!(code, iggy_server::admission::DISK_LOW);
        // A refusal is answered at once; node 2's next pings (every 250 ms) say it has room.
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(resumed, "writes did not resume once space was freed");
}

/// Issue #46: a node keeps at most `max_connections` client connections (the next is closed as
/// it arrives, and one that ends makes room), and before login a body larger than a login is
/// evicted without being buffered. Without the cap the third connection is served; without the
/// pre-login limit the 1 MiB header is answered by waiting for its body.
#[test]
fn connections_past_the_cap_and_large_bodies_before_login_are_refused() {
    let cluster = start_cluster_with(|_| iggy_server::admission::Admission::default(), 2);
    let address = cluster.nodes[0].client_address;
    let mut first = Client::connect(address, 0x600);
    assert!(matches!(first.login("iggy"), Answer::Reply(..)));
    let second = Client::connect(address, 0x601);
    // A login on a new connection: answered, or (past the cap) closed at once unanswered.
    let served = || {
        let mut stream = std::net::TcpStream::connect(address).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        let (code, body) = Request::LoginRegister {
            version: iggy_protocol::ClientVersion {
                protocol: iggy_protocol::PROTOCOL_VERSION,
                sdk_name: "test".into(),
                sdk_version: "0".into(),
            },
            username: "iggy".into(),
            password: "iggy".into(),
            context: None,
        }
        .encode();
        let header = RequestHeader {
            size: u32::try_from(HEADER_SIZE + body.len()).expect("small"),
            client: 0x603,
            request_checksum: 0,
            timestamp: 0,
            request: 0,
            operation: Operation::Register,
            session: 0,
            user_id: 0,
            code,
        };
        let mut byte = [0u8; 1];
        stream.write_all(&header.encode()).is_ok()
            && stream.write_all(&body).is_ok()
            && matches!(stream.read(&mut byte), Ok(1))
    };
    assert!(!served(), "a connection past the cap was served");
    // The second's connection, never logged in, sends a 1 MiB header: evicted at once.
    let mut second = second;
    let header = RequestHeader {
        size: u32::try_from(HEADER_SIZE + (1 << 20)).expect("small"),
        client: second.client,
        request_checksum: 0,
        timestamp: 0,
        request: 0,
        operation: Operation::Register,
        session: 0,
        user_id: 0,
        code: iggy_protocol::code::LOGIN_REGISTER,
    };
    second
        .stream
        .write_all(&header.encode())
        .expect("write header");
    let mut head = [0u8; HEADER_SIZE];
    second
        .stream
        .read_exact(&mut head)
        .expect("an eviction, not a wait for the body");
    let eviction = Eviction::decode(&head).expect("an eviction");
    assert_eq!(eviction.reason, EvictionReason::InvalidRequestBodySize);
    drop(second);
    // Its connection ended: a new one is served (once the node has counted the end, which
    // follows the eviction's write by a moment).
    assert!(
        (0..500).any(|_| served() || {
            std::thread::sleep(Duration::from_millis(10));
            false
        }),
        "a connection after one ended was never served"
    );
    let (code, _) = first.ask(&Request::Ping);
    assert_eq!(code, 0);
}

/// Issue #46: the root password is kept as an argon2id hash under a fresh salt (two hashes of
/// one password differ, each verifies it, neither verifies another), and a login with a wrong
/// password is evicted with `InvalidCredentials` and counted.
#[test]
fn passwords_are_argon2id_and_a_wrong_one_is_refused() {
    let one = hash_password("secret");
    let two = hash_password("secret");
    assert!(one.starts_with("$argon2id$"), "{one}");
    assert_ne!(one, two, "the salt is fresh");
    assert!(iggy_server::client_port::password_matches(&one, "secret"));
    assert!(iggy_server::client_port::password_matches(&two, "secret"));
    assert!(!iggy_server::client_port::password_matches(&one, "Secret"));
    assert!(!iggy_server::client_port::password_matches(
        "not a hash",
        "secret"
    ));
    let cluster = start_cluster();
    let mut c = Client::connect(cluster.nodes[0].client_address, 0x700);
    let Answer::Evicted(eviction) = c.login("wrong") else {
        panic!("a wrong password was answered")
    };
    assert_eq!(eviction.reason, EvictionReason::InvalidCredentials);
    assert_eq!(
        cluster.nodes[0]
            .port_counters
            .failed_logins
            .load(std::sync::atomic::Ordering::Relaxed),
        1,
        "the failed login was not counted"
    );
    let mut c = Client::connect(cluster.nodes[0].client_address, 0x701);
    assert!(matches!(c.login("iggy"), Answer::Reply(..)));
    // A second login on the same connection replaces the first session's reply routes: the
    // node's count of them does not grow (it did by two a login).
    let sessions = || {
        cluster.nodes[0]
            .views
            .metrics
            .sessions
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let before = sessions();
    assert!(matches!(c.login("iggy"), Answer::Reply(..)));
    assert!(matches!(c.login("iggy"), Answer::Reply(..)));
    assert_eq!(sessions(), before);
}

/// TLS on both ports: the nodes' bus runs over it (a write commits, so the replicas talk), a
/// client that checks the nodes' certificates against the CA logs in, writes through one node and
/// reads it back through another; a plain client, and a TLS client trusting another CA, get
/// nothing from the port.
#[test]
fn both_ports_over_tls_serve_a_client_that_trusts_the_ca_and_no_other() {
    let certificates = tempfile::tempdir().expect("tempdir");
    let names: Vec<(String, Vec<String>)> = (0..3)
        .map(|i| (format!("node-{i}"), vec!["127.0.0.1".to_string()]))
        .collect();
    let tls = iggy_server::tls::generate(certificates.path(), &names).expect("certificates");
    let cluster = start_cluster_tls(
        |_| iggy_server::admission::Admission::default(),
        1_000,
        Some(&tls),
    );
    let addresses: Vec<SocketAddr> = cluster.nodes.iter().map(|n| n.client_address).collect();
    let trusted = iggy_server::tls::client_config(&tls.ca).expect("the CA");

    let mut writer = iggy_client::Client::connect_with(addresses[0], 0x71, Some(trusted.clone()))
        .expect("connect");
    writer.login("iggy", "iggy").expect("a login over TLS");
    writer.create_stream("secure").expect("a stream");
    writer
        .create_topic("secure", "t", 1, "replicated")
        .expect("a topic");
    let messages = vec![(1u128, b"over tls".to_vec()), (2, b"and back".to_vec())];
    let offset = writer
        .send("secure", "t", 0, &messages)
        .expect("a send over TLS");
    let mut reader =
        iggy_client::Client::connect_with(addresses[1], 0x72, Some(trusted)).expect("connect");
    reader.login("iggy", "iggy").expect("a login over TLS");
    let polled = reader
        .poll("secure", "t", 0, offset, 10)
        .expect("a poll over TLS");
    let payloads: Vec<Vec<u8>> = polled.into_iter().map(|m| m.payload).collect();
    assert_eq!(payloads, vec![b"over tls".to_vec(), b"and back".to_vec()]);

    // Plain TCP: the node takes its login header for a TLS hello and closes.
    let plain = iggy_client::Client::connect_with(addresses[0], 0x73, None)
        .and_then(|mut client| client.login("iggy", "iggy"));
    assert!(plain.is_err(), "a plain client was served: {plain:?}");

    // A client trusting another CA refuses the node's certificate.
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let other = iggy_server::tls::generate(elsewhere.path(), &names).expect("certificates");
    let stranger = iggy_client::Client::connect_with(
        addresses[0],
        0x74,
        Some(iggy_server::tls::client_config(&other.ca).expect("the other CA")),
    )
    .and_then(|mut client| client.login("iggy", "iggy"));
    assert!(stranger.is_err(), "a certificate of another CA was taken");
}

/// `in_flight_bytes`: with a budget of one largest request (8 MiB), four clients sending 5 MiB
/// at once on one node, three rounds, each wait for the others' bytes to come back, and every
/// send is answered and read back. A path that kept its grant (a body's bytes not returned with
/// its answer) would leave the next sends waiting for good: their replies would not come within
/// the client's 30 s.
#[test]
fn sends_past_the_in_flight_budget_wait_their_turn_and_all_commit() {
    IN_FLIGHT.set(8 << 20);
    let cluster = start_cluster();
    let addresses: Vec<SocketAddr> = cluster.nodes.iter().map(|n| n.client_address).collect();
    drop(one_partition_topic(addresses[0], 0x500, "budget"));
    let payload = vec![7u8; 5 << 20];
    let senders: Vec<_> = (0..4u128)
        .map(|k| {
            let address = addresses[0];
            let payload = payload.clone();
            std::thread::spawn(move || {
                let mut c = Client::connect(address, 0x510 + k);
                assert!(matches!(c.login("iggy"), Answer::Reply(..)));
                for round in 0..3u128 {
                    let (code, _) = c.ask_until_accepted(&Request::SendMessages {
                        stream: Identifier::Name("budget".into()),
                        topic: Identifier::Name("t".into()),
                        partitioning: Partitioning::PartitionId(0),
                        count: 1,
                        batch: batch(&[&payload]),
                    });
                    assert_eq!(code, 0, "client {k}, round {round}");
                }
            })
        })
        .collect();
    for sender in senders {
        sender.join().expect("every send answered");
    }
    let mut reader = Client::connect(addresses[1], 0x520);
    assert!(matches!(reader.login("iggy"), Answer::Reply(..)));
    let mut read = 0;
    while read < 12 {
        let (code, body) = reader.ask_until_accepted(&Request::PollMessages {
            consumer: Consumer {
                group: false,
                id: Identifier::Numeric(1),
            },
            stream: Identifier::Name("budget".into()),
            topic: Identifier::Name("t".into()),
            partition: Some(0),
            strategy: PollingStrategy::Offset(read),
            count: 12,
            auto_commit: false,
        });
        assert_eq!(code, 0);
        let (header, _) = PollHeader::read(&body).expect("a poll header");
        assert!(
            header.messages_count > 0,
            "offset {read}: nothing more to read"
        );
        read += u64::from(header.messages_count);
    }
    assert_eq!(read, 12, "every send of every round, once");
}

/// Issue #47: `GetStats`, `GetMe`, `GetClient` and `GetClients` on the SDK's wire, and the sizes
/// and counts a listing shows. Sent through node 1 after a poll there (its read barrier: node 1
/// has executed every acknowledged send), they count exactly what was sent; the clients are this
/// node's connections, one not logged in yet among them; the figures are this process's.
#[test]
fn stats_and_clients_describe_the_node_that_answers() {
    let cluster = start_cluster();
    let addresses: Vec<SocketAddr> = cluster.nodes.iter().map(|n| n.client_address).collect();
    let mut c = one_partition_topic(addresses[0], 0x470, "figures");
    let sent = [&b"one"[..], b"two", b"three"];
    for _ in 0..2 {
        let (code, _) = c.ask_until_accepted(&Request::SendMessages {
            stream: Identifier::Name("figures".into()),
            topic: Identifier::Name("t".into()),
            partitioning: Partitioning::PartitionId(0),
            count: 3,
            batch: batch(&sent),
        });
        assert_eq!(code, 0);
    }
    let mut reader = Client::connect(addresses[1], 0x471);
    assert!(matches!(reader.login("iggy"), Answer::Reply(..)));
    let stranger = Client::connect(addresses[1], 0x472);
    let (code, _) = reader.ask(&Request::PollMessages {
        consumer: Consumer {
            group: false,
            id: Identifier::Numeric(1),
        },
        stream: Identifier::Name("figures".into()),
        topic: Identifier::Name("t".into()),
        partition: Some(0),
        strategy: PollingStrategy::Offset(0),
        count: 100,
        auto_commit: false,
    });
    assert_eq!(code, 0);

    let (code, body) = reader.ask(&Request::GetTopic {
        stream: Identifier::Name("figures".into()),
        topic: Identifier::Name("t".into()),
    });
    assert_eq!(code, 0);
    let (topic, partitions) = response::read_topic_details(&body).expect("topic");
    assert_eq!((topic.messages_count, partitions[0].messages_count), (6, 6));
    assert_eq!(partitions[0].current_offset, 5);
    assert!(topic.size_bytes > 0 && topic.size_bytes == partitions[0].size_bytes);
    assert!(partitions[0].segments_count >= 1);
    assert_eq!(
        (topic.message_expiry, topic.max_topic_size),
        (u64::MAX, u64::MAX),
        "a topic without limits reads back as never expiring and unlimited"
    );
    let (code, body) = reader.ask(&Request::GetStreams);
    assert_eq!(code, 0);
    let streams = response::read_streams(&body).expect("streams");
    assert_eq!(
        (streams[0].messages_count, streams[0].size_bytes),
        (6, topic.size_bytes)
    );

    let (code, body) = reader.ask(&Request::GetStats);
    assert_eq!(code, 0);
    let stats = response::StatsInfo::read(&body).expect("stats");
    assert_eq!(
        stats.process_id,
        std::process::id(),
        "this process's figures"
    );
    assert_eq!(
        (
            stats.streams_count,
            stats.topics_count,
            stats.partitions_count
        ),
        (1, 1, 1)
    );
    assert_eq!(stats.messages_count, 6);
    assert_eq!(stats.messages_size_bytes, topic.size_bytes);
    assert!(stats.segments_count >= 1 && stats.threads_count > 1);
    assert!(stats.memory_usage > 0 && stats.total_memory >= stats.available_memory);
    assert_eq!(stats.clients_count, 2, "node 1's two connections");
    assert!(stats.total_disk_space >= stats.free_disk_space);

    let (code, body) = reader.ask(&Request::GetMe);
    assert_eq!(code, 0);
    let (me, groups) = response::read_client_details(&body).expect("me");
    assert!(groups.is_empty());
    assert_eq!(me.user_id, 0, "root");
    assert_eq!(me.transport, 1, "TCP");
    assert_eq!(
        me.address,
        reader
            .stream
            .local_addr()
            .expect("local address")
            .to_string()
    );

    let (code, body) = reader.ask(&Request::GetClients);
    assert_eq!(code, 0);
    let clients = response::read_clients(&body).expect("clients");
    assert_eq!(clients.len(), 2);
    assert!(clients.contains(&me));
    let other = clients.iter().find(|c| **c != me).expect("the stranger");
    assert_eq!(
        other.address,
        stranger
            .stream
            .local_addr()
            .expect("local address")
            .to_string()
    );
    assert_eq!(other.user_id, u32::MAX, "not logged in");

    let (code, body) = reader.ask(&Request::GetClient {
        client_id: me.client_id,
    });
    assert_eq!(code, 0);
    assert_eq!(response::read_client_details(&body).expect("client").0, me);
    let (code, body) = reader.ask(&Request::GetClient {
        client_id: u32::MAX,
    });
    assert_eq!(
        (code, body.len()),
        (0, 0),
        "an unknown id answers an empty body"
    );

    // Before login, none of them is answered.
    let mut stranger = stranger;
    let (code, _) = stranger.ask(&Request::GetStats);
    assert_eq!(code, status::UNAUTHENTICATED);

    // A logout ends the session (it answered OK and kept it): the connection stays, not
    // logged in, and is listed so.
    let (code, _) = reader.ask(&Request::Logout);
    assert_eq!(code, 0);
    let (code, _) = reader.ask(&Request::GetMe);
    assert_eq!(
        code,
        status::UNAUTHENTICATED,
        "the session outlived its logout"
    );
    assert_eq!(reader.ask(&Request::Ping), (0, vec![]));
    let mut admin = Client::connect(addresses[1], 0x473);
    assert!(matches!(admin.login("iggy"), Answer::Reply(..)));
    let (code, body) = admin.ask(&Request::GetClient {
        client_id: me.client_id,
    });
    assert_eq!(code, 0);
    let (after, _) = response::read_client_details(&body).expect("client");
    assert_eq!(after.user_id, u32::MAX, "logged out");
}

/// Issue #47: a named consumer (`iggy -c name`, `client.consumer("name", ..)`) stores and reads
/// its offset, and a consumer group's offset is another than the consumer's of the same id, on
/// the store, the read and a `Next` poll (both were status 5, and the kind was ignored).
#[test]
fn named_consumers_and_group_offsets_are_kept_apart() {
    let cluster = start_cluster();
    let addresses: Vec<SocketAddr> = cluster.nodes.iter().map(|n| n.client_address).collect();
    let mut c = one_partition_topic(addresses[0], 0x480, "kinds");
    let (code, _) = c.ask_until_accepted(&Request::SendMessages {
        stream: Identifier::Name("kinds".into()),
        topic: Identifier::Name("t".into()),
        partitioning: Partitioning::PartitionId(0),
        count: 3,
        batch: batch(&[b"a", b"b", b"c"]),
    });
    assert_eq!(code, 0);
    // The group whose offsets are stored (wire id 0, the same number as the consumer's below).
    let (code, _) = c.ask_until_accepted(&Request::CreateConsumerGroup {
        stream: Identifier::Name("kinds".into()),
        topic: Identifier::Name("t".into()),
        name: "g".into(),
    });
    assert_eq!(code, 0);
    let target = |group, id: Identifier| {
        (
            Consumer { group, id },
            Identifier::Name("kinds".into()),
            Identifier::Name("t".into()),
        )
    };
    let store = |group, id: Identifier, offset| {
        let (consumer, stream, topic) = target(group, id);
        Request::StoreConsumerOffset {
            consumer,
            stream,
            topic,
            partition: Some(0),
            offset,
            ack: 1,
        }
    };
    let get = |group, id: Identifier| {
        let (consumer, stream, topic) = target(group, id);
        Request::GetConsumerOffset {
            consumer,
            stream,
            topic,
            partition: Some(0),
        }
    };
    for request in [
        store(false, Identifier::Name("reader".into()), 1),
        store(true, Identifier::Numeric(0), 2),
        store(false, Identifier::Numeric(0), 0),
    ] {
        let (code, _) = c.ask_until_accepted(&request);
        assert_eq!(code, 0, "{request:?}");
    }
    let mut other = Client::connect(addresses[2], 0x481);
    assert!(matches!(other.login("iggy"), Answer::Reply(..)));
    for (request, stored) in [
        (get(false, Identifier::Name("reader".into())), 1),
        (get(true, Identifier::Numeric(0)), 2),
        (get(false, Identifier::Numeric(0)), 0),
    ] {
        let (code, body) = other.ask(&request);
        assert_eq!(code, 0);
        let info = ConsumerOffsetInfo::read(&body)
            .expect("offset")
            .unwrap_or_else(|| panic!("nothing stored for {request:?}"));
        assert_eq!(info.stored_offset, stored, "{request:?}");
    }
    // A `Next` poll of the group (by a member: it joins first) starts after the group's offset,
    // not the consumer's.
    let (code, _) = other.ask_until_accepted(&Request::JoinConsumerGroup {
        stream: Identifier::Name("kinds".into()),
        topic: Identifier::Name("t".into()),
        group: Identifier::Numeric(0),
    });
    assert_eq!(code, 0);
    let (consumer, stream, topic) = target(true, Identifier::Numeric(0));
    let (code, body) = other.ask(&Request::PollMessages {
        consumer,
        stream,
        topic,
        partition: Some(0),
        strategy: PollingStrategy::Next,
        count: 10,
        auto_commit: false,
    });
    assert_eq!(code, 0);
    let (header, _) = PollHeader::read(&body).expect("poll");
    assert_eq!(
        header.messages_count, 0,
        "the group had read through offset 2"
    );
}

/// Issue #47: `UpdateStream` (204) renames a stream through the metadata group: the new name
/// resolves on another node at once (its read barrier), the old one no longer does, and a name
/// another stream holds is refused with the SDK's status.
#[test]
fn a_stream_renamed_through_one_node_is_found_by_its_new_name_on_another() {
    let cluster = start_cluster();
    let addresses: Vec<SocketAddr> = cluster.nodes.iter().map(|n| n.client_address).collect();
    let mut c = one_partition_topic(addresses[0], 0x490, "before");
    let (code, _) = c.ask_until_accepted(&Request::CreateStream {
        name: "taken".into(),
        options: vec![],
    });
    assert_eq!(code, 0);
    let rename = |name: &str| Request::UpdateStream {
        stream: Identifier::Name("before".into()),
        name: name.into(),
        options: vec![],
    };
    let (code, body) = c.ask_until_accepted(&rename("taken"));
    assert_eq!(code, 0);
    assert_eq!(
        split_result(&body).expect("framed"),
        Err(status::STREAM_NAME_ALREADY_EXISTS)
    );
    let (code, body) = c.ask_until_accepted(&rename("after"));
    assert_eq!(code, 0);
    assert_eq!(split_result(&body).expect("framed"), Ok(&[][..]));
    let mut other = Client::connect(addresses[2], 0x491);
    assert!(matches!(other.login("iggy"), Answer::Reply(..)));
    let (code, body) = other.ask(&Request::GetStream {
        stream: Identifier::Name("after".into()),
    });
    assert_eq!(code, 0);
    let (stream, topics) = read_stream_details(&body).expect("the renamed stream");
    assert_eq!((stream.name.as_str(), topics.len()), ("after", 1));
    let (code, body) = other.ask(&Request::GetStream {
        stream: Identifier::Name("before".into()),
    });
    assert_eq!((code, body.len()), (0, 0), "the old name still resolves");
}

/// Issue #47: consumer groups. A group is created through one node and listed through another;
/// two sessions on different nodes join it and split its three partitions between them (each
/// partition held by exactly one); a poll of a partition the member does not hold is fenced
/// (`ConsumerGroupPartitionNotOwned`, on which the SDK syncs again) and a non-member's poll is
/// refused (`ConsumerGroupMemberNotFound`); when one member's connection closes, its session
/// leaves the group and the other member holds every partition. Without `leave_groups` in
/// `client_port.rs` the closed session keeps its partitions and nobody reads them.
#[test]
fn consumer_group_members_split_partitions_and_a_closed_session_leaves() {
    let cluster = start_cluster();
    let addresses: Vec<SocketAddr> = cluster.nodes.iter().map(|n| n.client_address).collect();
    let mut admin = Client::connect(addresses[0], 0x600);
    assert!(matches!(admin.login("iggy"), Answer::Reply(..)));
    let (code, _) = admin.ask_until_accepted(&Request::CreateStream {
        name: "cg".into(),
        options: vec![],
    });
    assert_eq!(code, 0);
    let (code, _) = admin.ask_until_accepted(&Request::CreateTopic {
        stream: Identifier::Name("cg".into()),
        partitions: 3,
        name: "t".into(),
        options: vec![],
    });
    assert_eq!(code, 0);
    let (code, body) = admin.ask_until_accepted(&Request::CreateConsumerGroup {
        stream: Identifier::Name("cg".into()),
        topic: Identifier::Name("t".into()),
        name: "billing".into(),
    });
    assert_eq!(code, 0);
    let payload = split_result(&body).expect("framed").expect("ok");
    let (created, members) = response::read_consumer_group_details(payload).expect("details");
    assert_eq!((created.id, created.name.as_str()), (0, "billing"));
    assert!(members.is_empty());
    let (code, body) = admin.ask_until_accepted(&Request::CreateConsumerGroup {
        stream: Identifier::Name("cg".into()),
        topic: Identifier::Name("t".into()),
        name: "billing".into(),
    });
    assert_eq!(code, 0, "a committed refusal is a result section");
    assert_eq!(
        split_result(&body).expect("framed"),
        Err(status::CONSUMER_GROUP_NAME_ALREADY_EXISTS)
    );

    let group = || {
        (
            Identifier::Name("cg".into()),
            Identifier::Name("t".into()),
            Identifier::Name("billing".into()),
        )
    };
    let join = || {
        let (stream, topic, group) = group();
        Request::JoinConsumerGroup {
            stream,
            topic,
            group,
        }
    };
    let sync = || {
        let (stream, topic, group) = group();
        Request::SyncConsumerGroup {
            stream,
            topic,
            group,
        }
    };
    let poll = |partition| Request::PollMessages {
        consumer: Consumer {
            group: true,
            id: Identifier::Name("billing".into()),
        },
        stream: Identifier::Name("cg".into()),
        topic: Identifier::Name("t".into()),
        partition: Some(partition),
        strategy: PollingStrategy::Next,
        count: 10,
        auto_commit: false,
    };
    let assignment = |c: &mut Client| {
        let (code, body) = c.ask(&sync());
        assert_eq!(code, 0);
        response::read_group_assignment(&body).expect("assignment")
    };

    let mut a = Client::connect(addresses[1], 0x601);
    assert!(matches!(a.login("iggy"), Answer::Reply(..)));
    assert_eq!(assignment(&mut a), None, "not a member yet");
    assert_eq!(a.ask(&poll(0)).0, status::CONSUMER_GROUP_MEMBER_NOT_FOUND);
    assert_eq!(a.ask_until_accepted(&join()).0, 0);
    let mut b = Client::connect(addresses[2], 0x602);
    assert!(matches!(b.login("iggy"), Answer::Reply(..)));
    assert_eq!(b.ask_until_accepted(&join()).0, 0);
    let (_, held_by_a) = assignment(&mut a).expect("a member");
    let (generation, held_by_b) = assignment(&mut b).expect("a member");
    let mut all: Vec<u32> = held_by_a.iter().chain(&held_by_b).copied().collect();
    all.sort_unstable();
    assert_eq!(
        all,
        vec![0, 1, 2],
        "each partition held by exactly one member"
    );
    assert!(!held_by_a.is_empty() && !held_by_b.is_empty());
    assert_eq!(a.ask(&poll(held_by_a[0])).0, 0);
    assert_eq!(
        a.ask(&poll(held_by_b[0])).0,
        status::CONSUMER_GROUP_PARTITION_NOT_OWNED
    );
    // The group as the listings show it, through the node that took neither join.
    let (stream, topic, g) = group();
    let (code, body) = admin.ask(&Request::GetConsumerGroup {
        stream,
        topic,
        group: g,
    });
    assert_eq!(code, 0);
    let (info, members) = response::read_consumer_group_details(&body).expect("details");
    assert_eq!((info.members_count, info.partitions_count), (2, 3));
    assert_eq!(members.len(), 2);
    let (code, body) = admin.ask(&Request::GetConsumerGroups {
        stream: Identifier::Name("cg".into()),
        topic: Identifier::Name("t".into()),
    });
    assert_eq!(code, 0);
    assert_eq!(
        response::read_consumer_groups(&body).expect("groups").len(),
        1
    );

    // A's connection closes: its session leaves, and B holds all three partitions.
    drop(a);
    let mut last = None;
    for _ in 0..1_000 {
        last = assignment(&mut b);
        if last.as_ref().is_some_and(|(_, held)| held.len() == 3) {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let (after, held) = last.expect("still a member");
    assert_eq!(held, vec![0, 1, 2], "the closed session's partitions moved");
    assert!(
        after > generation,
        "the split changed, so did the generation"
    );
    // B leaves explicitly; leaving again is refused.
    let leave = || {
        let (stream, topic, group) = group();
        Request::LeaveConsumerGroup {
            stream,
            topic,
            group,
        }
    };
    let (code, body) = b.ask_until_accepted(&leave());
    assert_eq!(code, 0);
    assert_eq!(split_result(&body).expect("framed"), Ok(&[][..]));
    let (code, body) = b.ask_until_accepted(&leave());
    assert_eq!(code, 0);
    assert_eq!(
        split_result(&body).expect("framed"),
        Err(status::CONSUMER_GROUP_MEMBER_NOT_FOUND)
    );
    assert_eq!(assignment(&mut b), None);
}

/// Issue #47: poll routing for clustered SDKs. The coordinator connection (a group member) asks
/// where to send an auto-commit poll (`GetPollRouting`, 103) and gets the partition's primary
/// and its own session; a data connection to that node polls (`PollMessagesOnPrimary`, 104) for
/// the coordinator's membership once it attached that session (`AttachConsumerSession`, 14),
/// and is refused as a non-member before (without `attached` in `client_port.rs` every routed
/// group poll is refused). An unknown session cannot be attached. `GetConsumerOffsetRouting`
/// (123) answers the same route for the partition's offset writes.
#[test]
fn a_routed_poll_acts_for_the_attached_coordinator_session() {
    let cluster = start_cluster();
    let addresses: Vec<SocketAddr> = cluster.nodes.iter().map(|n| n.client_address).collect();
    let mut coordinator = one_partition_topic(addresses[0], 0x700, "routed");
    let (code, _) = coordinator.ask_until_accepted(&Request::CreateConsumerGroup {
        stream: Identifier::Name("routed".into()),
        topic: Identifier::Name("t".into()),
        name: "g".into(),
    });
    assert_eq!(code, 0);
    let (code, _) = coordinator.ask_until_accepted(&Request::JoinConsumerGroup {
        stream: Identifier::Name("routed".into()),
        topic: Identifier::Name("t".into()),
        group: Identifier::Name("g".into()),
    });
    assert_eq!(code, 0);
    let (code, _) = coordinator.ask_until_accepted(&Request::SendMessages {
        stream: Identifier::Name("routed".into()),
        topic: Identifier::Name("t".into()),
        partitioning: Partitioning::PartitionId(0),
        count: 2,
        batch: batch(&[b"x", b"y"]),
    });
    assert_eq!(code, 0);
    let poll = Request::PollMessages {
        consumer: Consumer {
            group: true,
            id: Identifier::Name("g".into()),
        },
        stream: Identifier::Name("routed".into()),
        topic: Identifier::Name("t".into()),
        partition: Some(0),
        strategy: PollingStrategy::Next,
        count: 10,
        auto_commit: true,
    };
    let (code, body) = coordinator.ask(&Request::GetPollRouting(Box::new(poll.clone())));
    assert_eq!(code, 0);
    let route = response::PollRoute::read(&body).expect("a route");
    assert_eq!(route.client_id, 0x700, "the coordinator's own session");
    let node = addresses
        .iter()
        .position(|a| a.port() == route.primary.tcp_port)
        .expect("a node of the roster");
    let (code, body) = coordinator.ask(&Request::GetConsumerOffsetRouting(Box::new(
        Request::GetConsumerOffset {
            consumer: Consumer {
                group: true,
                id: Identifier::Name("g".into()),
            },
            stream: Identifier::Name("routed".into()),
            topic: Identifier::Name("t".into()),
            partition: Some(0),
        },
    )));
    assert_eq!(code, 0);
    assert_eq!(response::PollRoute::read(&body).expect("a route"), route);

    let mut data = Client::connect(addresses[node], 0x701);
    assert!(matches!(data.login("iggy"), Answer::Reply(..)));
    let on_primary = Request::PollMessagesOnPrimary(Box::new(poll));
    assert_eq!(
        data.ask(&on_primary).0,
        status::CONSUMER_GROUP_MEMBER_NOT_FOUND,
        "not attached: the data session is no member"
    );
    let attach = |client_id, session| Request::AttachConsumerSession {
        client_id,
        session,
        metadata_watermark: route.metadata_watermark,
    };
    assert_eq!(
        data.ask(&attach(0x999, route.session)).0,
        status::STALE_CLIENT,
        "no such session"
    );
    assert_eq!(data.ask(&attach(route.client_id, route.session)).0, 0);
    let (code, body) = data.ask(&on_primary);
    assert_eq!(code, 0);
    let (header, _) = PollHeader::read(&body).expect("poll");
    assert_eq!(header.messages_count, 2);
}

/// Issue #47: users and permissions. The root creates a user allowed to read streams only,
/// through node 0; the user logs in through node 1, lists streams, and is refused a create
/// (`Unauthorized`, 41) until the root grants `manage_streams` through node 2, after which the
/// same session creates (the grant is read through a barrier, not waited for). A password
/// change needs the current password, and then only the new one logs in; a deactivated user
/// cannot log in; a deleted user's session may do nothing that needs a permission. Without
/// `authorized` in `client_port.rs` the first create succeeds.
#[test]
fn users_log_in_and_are_held_to_their_permissions() {
    use iggy_protocol::permissions::{GlobalPermissions, Permissions};
    let cluster = start_cluster();
    let addresses: Vec<SocketAddr> = cluster.nodes.iter().map(|n| n.client_address).collect();
    let mut root = Client::connect(addresses[0], 0x800);
    assert!(matches!(root.login("iggy"), Answer::Reply(..)));
    let reader = Permissions {
        global: GlobalPermissions {
            read_streams: true,
            ..GlobalPermissions::default()
        },
        streams: vec![],
    };
    let (code, body) = root.ask_until_accepted(&Request::CreateUser {
        username: "alice".into(),
        password: "alice-pw-1".into(),
        status: 1,
        permissions: Some(reader.clone()),
        options: vec![],
    });
    assert_eq!(code, 0);
    let (created, permissions) =
        response::read_user_details(split_result(&body).expect("framed").expect("ok"))
            .expect("the user");
    assert_eq!((created.username.as_str(), created.status), ("alice", 1));
    assert_eq!(permissions, Some(reader));
    let (code, _) = root.ask_until_accepted(&Request::CreateUser {
        username: "x".into(),
        password: "long-enough".into(),
        status: 1,
        permissions: None,
        options: vec![],
    });
    assert_eq!(code, status::INVALID_USERNAME);

    let mut alice = Client::connect(addresses[1], 0x801);
    assert!(matches!(alice.login_as("alice", "alice-pw-1"), Answer::Reply(h, _) if h.status == 0));
    let (code, _) = alice.ask(&Request::GetStreams);
    assert_eq!(code, 0, "read_streams lists streams");
    let create = |name: &str| Request::CreateStream {
        name: name.into(),
        options: vec![],
    };
    assert_eq!(alice.ask(&create("by-alice")).0, status::UNAUTHORIZED);
    assert_eq!(alice.ask(&Request::GetUsers).0, status::UNAUTHORIZED);
    assert_eq!(alice.ask(&Request::GetStats).0, status::UNAUTHORIZED);
    // Purges, deletes and flushes take the manage (or send) rights a reader lacks, a snapshot
    // the read-servers right, as `GetStats`.
    let s = || Identifier::Name("nowhere".into());
    for request in [
        Request::PurgeStream { stream: s() },
        Request::PurgeTopic {
            stream: s(),
            topic: s(),
        },
        Request::DeletePartitions {
            stream: s(),
            topic: s(),
            count: 1,
        },
        Request::DeleteSegments {
            stream: s(),
            topic: s(),
            partition: 0,
            count: 1,
        },
        Request::FlushUnsavedBuffer {
            stream: s(),
            topic: s(),
            partition: 0,
            fsync: true,
        },
        Request::GetSnapshot {
            compression: 1,
            kinds: vec![4],
        },
    ] {
        assert_eq!(alice.ask(&request).0, status::UNAUTHORIZED, "{request:?}");
    }
    // Her own user she may read.
    let (code, body) = alice.ask(&Request::GetUser {
        user: Identifier::Name("alice".into()),
    });
    assert_eq!(code, 0);
    assert_eq!(
        response::read_user_details(&body).expect("me").0.id,
        created.id
    );

    let mut other_root = Client::connect(addresses[2], 0x802);
    assert!(matches!(other_root.login("iggy"), Answer::Reply(..)));
    let (code, _) = other_root.ask_until_accepted(&Request::UpdatePermissions {
        user: Identifier::Name("alice".into()),
        permissions: Some(Permissions {
            global: GlobalPermissions {
                read_streams: true,
                manage_streams: true,
                ..GlobalPermissions::default()
            },
            streams: vec![],
        }),
    });
    assert_eq!(code, 0);
    assert_eq!(alice.ask_until_accepted(&create("by-alice")).0, 0);

    // A password change needs the current password; then only the new one logs in.
    let change = |current: &str, new: &str| Request::ChangePassword {
        user: Identifier::Name("alice".into()),
        current_password: current.into(),
        new_password: new.into(),
    };
    assert_eq!(
        alice.ask_until_accepted(&change("wrong", "alice-pw-2")).0,
        status::INVALID_CREDENTIALS
    );
    assert_eq!(
        alice
            .ask_until_accepted(&change("alice-pw-1", "alice-pw-2"))
            .0,
        0
    );
    let mut again = Client::connect(addresses[0], 0x803);
    assert!(matches!(
        again.login_once_as("alice", "alice-pw-1"),
        Answer::Evicted(_)
    ));
    let mut again = Client::connect(addresses[0], 0x804);
    assert!(matches!(again.login_as("alice", "alice-pw-2"), Answer::Reply(h, _) if h.status == 0));

    // Listed beside the root; the root cannot be deleted.
    let (code, body) = root.ask(&Request::GetUsers);
    assert_eq!(code, 0);
    let names: Vec<String> = response::read_users(&body)
        .expect("users")
        .into_iter()
        .map(|u| u.username)
        .collect();
    assert_eq!(names, vec!["iggy".to_string(), "alice".to_string()]);
    assert_eq!(
        root.ask(&Request::DeleteUser {
            user: Identifier::Numeric(0)
        })
        .0,
        status::CANNOT_DELETE_USER
    );

    // Deactivated: no login. Deleted: the open session may do nothing that needs a permission.
    assert_eq!(
        root.ask_until_accepted(&Request::UpdateUser {
            user: Identifier::Name("alice".into()),
            username: None,
            status: Some(2),
            options: vec![],
        })
        .0,
        0
    );
    let mut inactive = Client::connect(addresses[2], 0x805);
    assert!(matches!(
        inactive.login_once_as("alice", "alice-pw-2"),
        Answer::Evicted(_)
    ));
    assert_eq!(
        root.ask_until_accepted(&Request::DeleteUser {
            user: Identifier::Name("alice".into())
        })
        .0,
        0
    );
    // A revocation takes effect on a node when it executes the commit (a backup trails by up
    // to a heartbeat; a grant is read through a barrier, a revocation is not waited for).
    let mut refused = false;
    for _ in 0..1_000 {
        if alice.ask(&Request::GetStreams).0 == status::UNAUTHORIZED {
            refused = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(refused, "a deleted user's session keeps its permissions");
}

/// Issue #47: personal access tokens. A token created through one node logs in through another
/// as its user (the secret is in the create's reply alone; the state keeps its SHA-256); the
/// list shows it with its expiry; a deleted token, a token past its expiry and a made-up one are
/// refused with `InvalidToken`.
#[test]
fn personal_access_tokens_log_in_until_deleted_or_expired() {
    let cluster = start_cluster();
    let addresses: Vec<SocketAddr> = cluster.nodes.iter().map(|n| n.client_address).collect();
    let mut root = Client::connect(addresses[0], 0x900);
    assert!(matches!(root.login("iggy"), Answer::Reply(..)));
    let create = |name: &str, expiry| Request::CreatePersonalAccessToken {
        name: name.into(),
        expiry,
    };
    let (code, body) = root.ask_until_accepted(&create("deploy", 0));
    assert_eq!(code, 0);
    let secret =
        response::read_raw_token(split_result(&body).expect("framed").expect("ok")).expect("token");
    assert_eq!(secret.len(), 64);
    // Expires a microsecond after its creation: refused by the time anyone logs in with it.
    let (code, body) = root.ask_until_accepted(&create("brief", 1));
    assert_eq!(code, 0);
    let brief =
        response::read_raw_token(split_result(&body).expect("framed").expect("ok")).expect("token");
    let (code, body) = root.ask(&Request::GetPersonalAccessTokens);
    assert_eq!(code, 0);
    let tokens = response::read_tokens(&body).expect("tokens");
    assert_eq!(tokens.len(), 2);
    assert!(
        tokens
            .iter()
            .any(|(name, expiry)| name == "deploy" && *expiry == 0)
    );
    assert!(
        tokens
            .iter()
            .any(|(name, expiry)| name == "brief" && *expiry != 0)
    );

    let mut ci = Client::connect(addresses[1], 0x901);
    match ci.login_with_token(&secret) {
        Answer::Reply(header, body) => {
            assert_eq!(header.status, 0);
            let payload = split_result(&body).expect("framed").expect("a session");
            let reply = response::LoginReply::read(&mut Reader::new(payload)).expect("reply");
            assert_eq!(reply.user_id, 0, "the root's token");
        }
        Answer::Evicted(e) => panic!("evicted: {:?}", e.reason),
    }
    assert_eq!(ci.ask(&Request::GetStreams).0, 0);
    for refused in [
        brief.as_str(),
        "0000000000000000000000000000000000000000000000000000000000000000",
    ] {
        let mut c = Client::connect(addresses[2], 0x902);
        assert!(matches!(
            c.login_with_token(refused),
            Answer::Evicted(e) if e.reason == EvictionReason::InvalidToken
        ));
    }
    let (code, _) = root.ask_until_accepted(&Request::DeletePersonalAccessToken {
        name: "deploy".into(),
    });
    assert_eq!(code, 0);
    let mut late = Client::connect(addresses[2], 0x903);
    assert!(matches!(late.login_with_token(&secret), Answer::Evicted(_)));
}

/// Issue #47: a stream's and a topic's creation time is the metadata primary's clock at the
/// create's prepare, the same through every node (each replica executes the same header), and
/// within the test's own clock window. Before payload version 4 it was 0 (1970 in the CLI).
#[test]
fn creation_times_are_recorded_once_and_read_alike_through_every_node() {
    let cluster = start_cluster();
    let addresses: Vec<SocketAddr> = cluster.nodes.iter().map(|n| n.client_address).collect();
    let now_us = || {
        u64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("after 1970")
                .as_micros(),
        )
        .expect("fits")
    };
    let before = now_us();
    let _c = one_partition_topic(addresses[0], 0xa00, "stamped");
    let after = now_us();
    let mut seen = Vec::new();
    for (i, address) in addresses.iter().enumerate() {
        let mut c = Client::connect(*address, 0xa01 + i as u128);
        assert!(matches!(c.login("iggy"), Answer::Reply(..)));
        let (code, body) = c.ask(&Request::GetStream {
            stream: Identifier::Name("stamped".into()),
        });
        assert_eq!(code, 0);
        let (stream, topics) = read_stream_details(&body).expect("stream");
        seen.push((stream.created_at, topics[0].created_at));
    }
    let (stream_at, topic_at) = seen[0];
    assert!(
        (before..=after).contains(&stream_at) && (stream_at..=after).contains(&topic_at),
        "{before} <= {stream_at} <= {topic_at} <= {after}"
    );
    assert!(seen.iter().all(|s| *s == seen[0]), "{seen:?}");
}

/// Issue #47: `PurgeTopic` (305), `PurgeStream` (205) and `DeletePartitions` (403). Every write
/// is read back through another node at once. A deleted partition is gone (its wire id answers
/// `PartitionNotFound`) and one created after it starts empty at offset 0; a purge empties every
/// partition of the topic or stream: the next send is at offset 0, the messages and the stored
/// offsets are gone, through every node. (The metadata tests pin that the new partitions take
/// ids never given before: `deleted_and_purged_partitions_never_give_their_ids_again`.)
#[test]
fn purged_and_deleted_partitions_start_again_empty() {
    let cluster = start_cluster();
    let addresses: Vec<SocketAddr> = cluster.nodes.iter().map(|n| n.client_address).collect();
    let mut sessions = logged_in(&addresses, 0x700);
    let stream = || Identifier::Name("purges".into());
    let topic = || Identifier::Name("t".into());
    let (code, _) = sessions[0].ask_until_accepted(&Request::CreateStream {
        name: "purges".into(),
        options: vec![],
    });
    assert_eq!(code, 0);
    for name in ["t", "u"] {
        let (code, body) = sessions[0].ask_until_accepted(&Request::CreateTopic {
            stream: stream(),
            partitions: 3,
            name: name.into(),
            options: vec![],
        });
        assert_eq!(
            (code, split_result(&body).map(|r| r.is_ok())),
            (0, Ok(true))
        );
    }
    let consumer = Consumer {
        group: false,
        id: Identifier::Numeric(5),
    };
    // Sends `count` messages to `partition` of `topic` through node `via`; the base offsets.
    let send = |sessions: &mut [Client], via: usize, topic: &str, partition: u32, count: u32| {
        (0..count)
            .map(|i| {
                let (code, body) = sessions[via].ask_until_accepted(&Request::SendMessages {
                    stream: Identifier::Name("purges".into()),
                    topic: Identifier::Name(topic.into()),
                    partitioning: Partitioning::PartitionId(partition),
                    count: 1,
                    batch: batch(&[format!("{topic}-{partition}-{i}").as_bytes()]),
                });
                assert_eq!(code, 0, "send to {topic} {partition}");
                let confirmed = read_send_confirmations(&body).expect("confirmation")[0];
                assert_eq!(
                    confirmed.partition_id, partition,
                    "the wire id, not the group's"
                );
                confirmed.base_offset
            })
            .collect::<Vec<u64>>()
    };
    // What `partition` of `topic` holds from offset 0 through node `via`: the status and count.
    let held = |sessions: &mut [Client], via: usize, topic: &str, partition: u32| {
        // (A poll that meets a group going away mid-read is answered TransientNotAccepted, which
        // a client retries.)
        let (code, body) = sessions[via].ask_until_accepted(&Request::PollMessages {
            consumer: Consumer {
                group: false,
                id: Identifier::Numeric(9),
            },
            stream: Identifier::Name("purges".into()),
            topic: Identifier::Name(topic.into()),
            partition: Some(partition),
            strategy: PollingStrategy::Offset(0),
            count: 100,
            auto_commit: false,
        });
        if code != 0 {
            return (code, 0);
        }
        let (header, _) = PollHeader::read(&body).expect("poll");
        assert_eq!(header.partition_id, partition);
        (code, header.messages_count)
    };
    for partition in 0..3 {
        assert_eq!(send(&mut sessions, 0, "t", partition, 2), [0, 1]);
        assert_eq!(send(&mut sessions, 1, "u", partition, 1), [0]);
    }
    let (code, _) = sessions[0].ask_until_accepted(&Request::StoreConsumerOffset {
        consumer: consumer.clone(),
        stream: stream(),
        topic: topic(),
        partition: Some(0),
        offset: 1,
        ack: 1,
    });
    assert_eq!(code, 0);

    // Deleting more partitions than the topic has is refused; deleting one goes through.
    let (code, body) = sessions[1].ask_until_accepted(&Request::DeletePartitions {
        stream: stream(),
        topic: topic(),
        count: 4,
    });
    assert_eq!(
        (code, split_result(&body).map(|r| r.map(<[u8]>::len))),
        (0, Ok(Err(status::INVALID_PARTITIONS_COUNT)))
    );
    let (code, body) = sessions[1].ask_until_accepted(&Request::DeletePartitions {
        stream: stream(),
        topic: topic(),
        count: 1,
    });
    assert_eq!(
        (code, split_result(&body).map(|r| r.is_ok())),
        (0, Ok(true))
    );
    for via in 0..3 {
        assert_eq!(
            held(&mut sessions, via, "t", 2).0,
            status::PARTITION_NOT_FOUND
        );
        assert_eq!(held(&mut sessions, via, "t", 1), (0, 2));
    }
    let (code, _) = sessions[2].ask_until_accepted(&Request::CreatePartitions {
        stream: stream(),
        topic: topic(),
        count: 1,
    });
    assert_eq!(code, 0);
    for via in 0..3 {
        assert_eq!(
            held(&mut sessions, via, "t", 2),
            (0, 0),
            "through node {via}"
        );
    }
    assert_eq!(
        send(&mut sessions, 2, "t", 2, 1),
        [0],
        "the new partition starts at 0"
    );

    // A purge of the topic: every partition empty through every node, the stored offset gone,
    // the next send at offset 0; the stream's other topic keeps its messages.
    let (code, body) = sessions[2].ask_until_accepted(&Request::PurgeTopic {
        stream: stream(),
        topic: topic(),
    });
    assert_eq!(
        (code, split_result(&body).map(|r| r.is_ok())),
        (0, Ok(true))
    );
    for via in 0..3 {
        for partition in 0..3 {
            assert_eq!(held(&mut sessions, via, "t", partition), (0, 0));
            assert_eq!(held(&mut sessions, via, "u", partition), (0, 1));
        }
        let (code, body) = sessions[via].ask(&Request::GetConsumerOffset {
            consumer: consumer.clone(),
            stream: stream(),
            topic: topic(),
            partition: Some(0),
        });
        assert_eq!(code, 0);
        assert_eq!(ConsumerOffsetInfo::read(&body).expect("offset"), None);
        let (code, body) = sessions[via].ask(&Request::GetTopic {
            stream: stream(),
            topic: topic(),
        });
        assert_eq!(code, 0);
        let (info, partitions) = read_topic_details(&body).expect("topic");
        assert_eq!(info.messages_count, 0);
        let ids: Vec<u32> = partitions.iter().map(|p| p.id).collect();
        assert_eq!(
            ids,
            [0, 1, 2],
            "wire ids are slots, whatever the groups' ids"
        );
    }
    assert_eq!(send(&mut sessions, 0, "t", 0, 2), [0, 1]);

    // A purge of the stream empties its other topic too.
    let (code, body) = sessions[0].ask_until_accepted(&Request::PurgeStream { stream: stream() });
    assert_eq!(
        (code, split_result(&body).map(|r| r.is_ok())),
        (0, Ok(true))
    );
    for via in 0..3 {
        for partition in 0..3 {
            assert_eq!(held(&mut sessions, via, "t", partition), (0, 0));
            assert_eq!(held(&mut sessions, via, "u", partition), (0, 0));
        }
    }
    assert_eq!(send(&mut sessions, 1, "u", 1, 1), [0]);
}

/// Issue #45: a purge or a partition delete acknowledged through one node is reflected by the
/// next send and poll any client sends to any other node, whose metadata learns the commit only
/// with the primary's next prepare or heartbeat (up to 500 ms later). Each round purges (or
/// deletes a partition) through one node and at once, through the two others, sends to every
/// partition (the send must land in the new, empty partition: offset 0, or be refused for a
/// deleted one) and polls it from offset 0 (only what was sent since the purge). Without the
/// metadata barrier a lagging node routes by the partition it still knows: the send is
/// acknowledged at offset 1 of the purged partition (and then deleted with it) and the poll
/// returns the purged message.
#[test]
fn a_purge_or_delete_acknowledged_anywhere_routes_every_nodes_next_send_and_poll() {
    let cluster = start_cluster();
    let addresses: Vec<SocketAddr> = cluster.nodes.iter().map(|n| n.client_address).collect();
    let mut sessions = logged_in(&addresses, 0x740);
    let stream = || Identifier::Name("fresh".into());
    let topic = || Identifier::Name("t".into());
    let (code, _) = sessions[0].ask_until_accepted(&Request::CreateStream {
        name: "fresh".into(),
        options: vec![],
    });
    assert_eq!(code, 0);
    let (code, body) = sessions[0].ask_until_accepted(&Request::CreateTopic {
        stream: stream(),
        partitions: 3,
        name: "t".into(),
        options: vec![],
    });
    assert_eq!(
        (code, split_result(&body).map(|r| r.is_ok())),
        (0, Ok(true))
    );
    let send = |c: &mut Client, partition: u32, text: &str| {
        c.ask_until_accepted(&Request::SendMessages {
            stream: stream(),
            topic: topic(),
            partitioning: Partitioning::PartitionId(partition),
            count: 1,
            batch: batch(&[text.as_bytes()]),
        })
    };
    // The payloads `partition` holds from offset 0 through `c`, or the refusal.
    let held = |c: &mut Client, partition: u32| -> Result<Vec<Vec<u8>>, u32> {
        let (code, body) = c.ask_until_accepted(&Request::PollMessages {
            consumer: Consumer {
                group: false,
                id: Identifier::Numeric(9),
            },
            stream: stream(),
            topic: topic(),
            partition: Some(partition),
            strategy: PollingStrategy::Offset(0),
            count: 100,
            auto_commit: false,
        });
        if code != 0 {
            return Err(code);
        }
        let (header, mut batches) = PollHeader::read(&body).expect("poll");
        assert_eq!(header.partition_id, partition);
        let mut payloads = Vec::new();
        while !batches.is_empty() {
            // Stored batches back to back, each naming its length at byte 32.
            let length = u64::from_le_bytes(batches[32..40].try_into().expect("8 bytes"));
            let (one, rest) = batches.split_at(usize::try_from(length).expect("a length"));
            let decoded = iggy_format::batch::decode(one).expect("a stored batch");
            payloads.extend(decoded.messages().map(|m| m.payload.to_vec()));
            batches = rest;
        }
        Ok(payloads)
    };
    let mut partitions = 3u32;
    for round in 0..6usize {
        // Every partition holds a message from before.
        for partition in 0..partitions {
            let (code, _) = send(&mut sessions[round % 3], partition, "before");
            assert_eq!(code, 0);
        }
        let via = round % 3;
        let request = if round % 3 == 2 {
            Request::DeletePartitions {
                stream: stream(),
                topic: topic(),
                count: 1,
            }
        } else {
            Request::PurgeTopic {
                stream: stream(),
                topic: topic(),
            }
        };
        let (code, body) = sessions[via].ask_until_accepted(&request);
        assert_eq!(
            (code, split_result(&body).map(|r| r.is_ok())),
            (0, Ok(true)),
            "round {round}: {request:?}"
        );
        let deleted = matches!(request, Request::DeletePartitions { .. });
        if deleted {
            partitions -= 1;
        }
        for other in [(via + 1) % 3, (via + 2) % 3] {
            let c = &mut sessions[other];
            if deleted {
                let (code, _) = send(c, partitions, "into a deleted partition");
                assert_eq!(
                    code,
                    status::PARTITION_NOT_FOUND,
                    "round {round}: a send through node {other} to the partition deleted through node {via}"
                );
                assert_eq!(held(c, partitions), Err(status::PARTITION_NOT_FOUND));
                continue;
            }
            for partition in 0..partitions {
                let text = format!("after-{round}-{other}");
                let (code, body) = send(c, partition, &text);
                assert_eq!(code, 0);
                let confirmed = read_send_confirmations(&body).expect("confirmation")[0];
                let expected = if other == (via + 1) % 3 { 0 } else { 1 };
                assert_eq!(
                    confirmed.base_offset, expected,
                    "round {round}: a send through node {other} to partition {partition} purged through node {via}"
                );
                let payloads = held(c, partition).expect("poll");
                assert!(
                    !payloads.iter().any(|p| p == b"before"),
                    "round {round}: node {other} served partition {partition}'s purged message"
                );
                assert_eq!(payloads.last().map(Vec::as_slice), Some(text.as_bytes()));
            }
        }
        if !deleted {
            // The partitions start again empty for the next round.
            let (code, _) = sessions[via].ask_until_accepted(&Request::PurgeTopic {
                stream: stream(),
                topic: topic(),
            });
            assert_eq!(code, 0);
        }
    }
}

/// Issue #47: `FlushUnsavedBuffer` (102, `iggy message flush`). With `fsync` through any node,
/// the answer comes once that node's log has published (synced) every op the partition
/// acknowledged before it; a replicated partition otherwise publishes within 100 ms, so the
/// answer would often come before. An unknown partition is `PartitionNotFound`, a client
/// without the send permission is refused.
#[test]
fn a_flush_answers_once_the_node_asked_synced_what_was_acknowledged() {
    let cluster = start_cluster();
    let addresses: Vec<SocketAddr> = cluster.nodes.iter().map(|n| n.client_address).collect();
    let mut c = one_partition_topic(addresses[0], 0x800, "flushes");
    let key = iggy_recovery::PartitionKey {
        stream: 1,
        topic: 1,
        partition: 1,
    };
    let mut sessions: Vec<Client> = addresses
        .iter()
        .enumerate()
        .map(|(i, address)| {
            let mut s = Client::connect(*address, 0x810 + i as u128);
            assert!(matches!(s.login("iggy"), Answer::Reply(..)));
            s
        })
        .collect();
    for round in 0..5u32 {
        let (code, _) = c.ask_until_accepted(&Request::SendMessages {
            stream: Identifier::Name("flushes".into()),
            topic: Identifier::Name("t".into()),
            partitioning: Partitioning::PartitionId(0),
            count: 1,
            batch: batch(&[format!("flush-{round}").as_bytes()]),
        });
        assert_eq!(code, 0);
        // Known on the node asked once it committed the send (a view every replica started).
        let leader = usize::from(
            cluster.nodes[0]
                .views
                .leader(key.group_id())
                .expect("a primary"),
        );
        let acknowledged = cluster.nodes[leader]
            .views
            .partition(key)
            .expect("the leader's partition")
            .committed();
        let via = (round as usize) % 3;
        let (code, _) = sessions[via].ask_until_accepted(&Request::FlushUnsavedBuffer {
            stream: Identifier::Name("flushes".into()),
            topic: Identifier::Name("t".into()),
            partition: 0,
            fsync: true,
        });
        assert_eq!(code, 0, "flush through node {via}");
        let published = cluster.nodes[via]
            .views
            .partition(key)
            .expect("the partition")
            .wal()
            .published()
            .head_op;
        assert!(
            published >= acknowledged,
            "node {via} answered the flush with its log published through {published}, below op {acknowledged}"
        );
    }
    let (code, _) = sessions[1].ask(&Request::FlushUnsavedBuffer {
        stream: Identifier::Name("flushes".into()),
        topic: Identifier::Name("t".into()),
        partition: 7,
        fsync: false,
    });
    assert_eq!(code, status::PARTITION_NOT_FOUND);
}

/// Issue #47: `DeleteSegments` (503, `iggy segment delete`). The node asked resolves "the
/// oldest two segments" to the offset past them on its own disk, after a read barrier, and
/// commits that floor through the metadata; every node's retention then deletes its settled
/// segments wholly below it, and no message at or past it. A partition the topic lacks is
/// `PartitionNotFound`.
#[test]
fn deleted_segments_go_on_every_node_and_nothing_past_them() {
    let cluster = start_cluster();
    let addresses: Vec<SocketAddr> = cluster.nodes.iter().map(|n| n.client_address).collect();
    let mut sessions: Vec<Client> = addresses
        .iter()
        .enumerate()
        .map(|(i, address)| {
            let mut s = Client::connect(*address, 0x900 + i as u128);
            assert!(matches!(s.login("iggy"), Answer::Reply(..)));
            s
        })
        .collect();
    let (code, _) = sessions[0].ask_until_accepted(&Request::CreateStream {
        name: "segments".into(),
        options: vec![],
    });
    assert_eq!(code, 0);
    let (code, _) = sessions[0].ask_until_accepted(&Request::CreateTopic {
        stream: Identifier::Name("segments".into()),
        partitions: 1,
        name: "t".into(),
        options: vec![OptionEntry::uint64("segment_size", 1 << 20)],
    });
    assert_eq!(code, 0);
    // About 4 MiB: four or more segments of 1 MiB on every node.
    let payload = vec![7u8; 100_000];
    for _ in 0..44 {
        let (code, _) = sessions[0].ask_until_accepted(&Request::SendMessages {
            stream: Identifier::Name("segments".into()),
            topic: Identifier::Name("t".into()),
            partitioning: Partitioning::PartitionId(0),
            count: 1,
            batch: batch(&[&payload]),
        });
        assert_eq!(code, 0);
    }
    // Every node's log published through what it holds, so that its sealed segments are
    // settled (what retention may delete).
    for session in &mut sessions {
        let (code, _) = session.ask_until_accepted(&Request::FlushUnsavedBuffer {
            stream: Identifier::Name("segments".into()),
            topic: Identifier::Name("t".into()),
            partition: 0,
            fsync: true,
        });
        assert_eq!(code, 0);
    }
    let key = iggy_recovery::PartitionKey {
        stream: 1,
        topic: 1,
        partition: 1,
    };
    let segments = |node: usize| {
        cluster.nodes[node]
            .views
            .partition(key)
            .expect("the partition")
            .segments()
    };
    let before = segments(1);
    assert!(before.len() >= 4, "{before:?}");
    let floor = before[1].next_offset;
    let (code, body) = sessions[1].ask_until_accepted(&Request::DeleteSegments {
        stream: Identifier::Name("segments".into()),
        topic: Identifier::Name("t".into()),
        partition: 0,
        count: 2,
    });
    assert_eq!(
        (code, split_result(&body).map(|r| r.is_ok())),
        (0, Ok(true))
    );
    // Retention passes run once a second on every node.
    for (node, session) in sessions.iter_mut().enumerate() {
        let mut left = segments(node);
        for _ in 0..200 {
            if left.first().is_some_and(|s| s.next_offset > floor) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
            left = segments(node);
        }
        let first = left.first().expect("the head segment stays");
        let spans: Vec<(u64, u64)> = left
            .iter()
            .map(|s| (s.start_offset, s.next_offset))
            .collect();
        assert!(
            first.next_offset > floor && first.start_offset <= floor,
            "node {node}: segments below {floor} left, or past it deleted: {spans:?}"
        );
        let (code, body) = session.ask(&Request::PollMessages {
            consumer: Consumer {
                group: false,
                id: Identifier::Numeric(1),
            },
            stream: Identifier::Name("segments".into()),
            topic: Identifier::Name("t".into()),
            partition: Some(0),
            strategy: PollingStrategy::First,
            count: 1,
            auto_commit: false,
        });
        assert_eq!(code, 0);
        let (header, batches) = PollHeader::read(&body).expect("poll");
        assert_eq!(header.messages_count, 1);
        let read = iggy_format::batch::decode(batches).expect("a stored batch");
        assert_eq!(read.header.base_offset, first.start_offset, "node {node}");
    }
    let (code, body) = sessions[2].ask(&Request::DeleteSegments {
        stream: Identifier::Name("segments".into()),
        topic: Identifier::Name("t".into()),
        partition: 5,
        count: 1,
    });
    assert_eq!((code, body.len()), (status::PARTITION_NOT_FOUND, 0));
}

/// Issue #47: `GetSnapshot` (11, `iggy snapshot`) answers a zip archive of the kinds asked, built
/// on the node asked: its data directory's files, a test file, its configuration without the
/// bus key or the root password's hash. A kind outside upstream's codes is refused by the
/// decoder before anything runs.
#[test]
fn a_snapshot_is_a_zip_of_the_kinds_asked() {
    // Node 1 names a directory of its own as its data directory (what the overview lists; the
    // test nodes' storage has none to name), with no reserve to refuse creates by.
    let data = tempfile::tempdir().expect("a directory");
    let root = OsStorage::open(data.path()).expect("the directory");
    iggy_io::Storage::create_dir(&root, "metadata").expect("a subdirectory");
    let file = iggy_io::Storage::open(&root, "metadata/superblock", iggy_io::OpenMode::Create)
        .expect("a file");
    iggy_io::WriteFile::write_all_at(&file, 0, &[0u8; 4096]).expect("its bytes");
    drop(file);
    let cluster = start_cluster_with(
        |i| iggy_server::admission::Admission {
            data_dir: (i == 1).then(|| data.path().to_path_buf()),
            free_reserve_bytes: 0,
            ..Default::default()
        },
        1_000,
    );
    let mut c = Client::connect(cluster.nodes[1].client_address, 0xA00);
    assert!(matches!(c.login("iggy"), Answer::Reply(..)));
    let (code, body) = c.ask(&Request::GetSnapshot {
        compression: 1,
        kinds: vec![1, 4, 6],
    });
    assert_eq!(code, 0);
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(body)).expect("a zip archive");
    let mut names: Vec<String> = archive
        .file_names()
        .map(|name| name.expect("a name").into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["filesystem_overview.txt", "server_config.txt", "test.txt"]
    );
    let mut read = |name: &str| {
        let mut text = String::new();
        archive
            .by_name(name)
            .expect("the entry")
            .read_to_string(&mut text)
            .expect("text");
        text
    };
    assert_eq!(read("test.txt"), "test\n");
    let overview = read("filesystem_overview.txt");
    assert!(
        overview
            .lines()
            .any(|l| l.trim() == "4096  metadata/superblock"),
        "{overview}"
    );
    let config = read("server_config.txt");
    assert!(config.contains("replica 1"), "{config}");
    assert!(
        !config.contains("secret") && !config.contains("argon2"),
        "{config}"
    );
    // `all`, deflated: every kind.
    let (code, body) = c.ask(&Request::GetSnapshot {
        compression: 2,
        kinds: vec![100],
    });
    assert_eq!(code, 0);
    let archive = zip::ZipArchive::new(std::io::Cursor::new(body)).expect("a zip archive");
    assert_eq!(archive.len(), 6);
}
