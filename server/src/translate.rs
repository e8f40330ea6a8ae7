//! Between the Iggy client wire and the replicas: which group a decoded request goes to and with
//! which body, what the mirror of the committed metadata answers directly, and how a group's
//! reply becomes the body the SDK decodes. Pure: the caller owns sessions, sockets and the node.
//!
//! Ids: the wire's streams, topics and partitions count from 0, the metadata's from 1; a wire id
//! `n` is the metadata's `n + 1` everywhere in this module and nowhere else.

use iggy_metadata::codec::Reply;
use iggy_metadata::{ConsumerGroup, Durability, Op, Retention, State, Stream, Topic};
use iggy_protocol::primitives::OptionEntry;
use iggy_protocol::response::{
    self, PartitionInfo, StreamInfo, TopicInfo, put_result_ok, put_stream_details,
    put_topic_details, put_topics, result_error,
};
use iggy_protocol::{Identifier, Partitioning, Request, status};
use iggy_recovery::PartitionKey;
use iggy_segments::entry::encode_consumer_offset;
use iggy_segments::offsets::ConsumerKind;

/// Defaults of a topic the client did not size (and the server's limits on what it may ask).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicDefaults {
    pub segment_size_bytes: u64,
    pub durability: Durability,
    pub replication_factor: u8,
}

/// Where a decoded request goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// Answered now, from the mirror: a reply body (already result-framed where the operation
    /// is), status 0.
    Answer(Vec<u8>),
    /// Refused before any group saw it: the reply's status, empty body.
    Refuse(u32),
    /// A metadata operation for the metadata group.
    Metadata(Op),
    /// A send's batch for a partition's group (the batch, as the client built it, stays in the
    /// request: the caller moves it on, never copies it). `wire` is the partition's wire id,
    /// which the reply names (as do a poll's and an offset read's).
    Messages { key: PartitionKey, wire: u32 },
    /// A consumer offset store for a partition's group.
    StoreOffset { key: PartitionKey, body: Vec<u8> },
    /// A consumer's stored offset to delete (a tombstone stored like an offset), if it has one.
    DeleteOffset {
        key: PartitionKey,
        kind: ConsumerKind,
        id: u32,
    },
    /// A read of a partition (the read pool's), for a consumer (its kind and id).
    Poll {
        key: PartitionKey,
        wire: u32,
        consumer: (ConsumerKind, u32),
        strategy: iggy_protocol::PollingStrategy,
        count: u32,
        auto_commit: bool,
    },
    /// A read of a consumer's stored offset (the read pool's).
    GetOffset {
        key: PartitionKey,
        wire: u32,
        consumer: (ConsumerKind, u32),
    },
    /// `FlushUnsavedBuffer` (102): answered once the node asked holds what the partition
    /// acknowledged before it, durably with `fsync`.
    Flush { key: PartitionKey, fsync: bool },
    /// `DeleteSegments` (503): the answering node resolves the count to the offset past that
    /// many of its oldest committed segments, after a read barrier, and proposes the floor.
    DeleteSegments { key: PartitionKey, count: u32 },
}

impl Route {
    /// Whether the route names a partition's group (resolved by the metadata this node holds).
    #[must_use]
    pub fn is_partition(&self) -> bool {
        match self {
            Self::Answer(_) | Self::Refuse(_) | Self::Metadata(_) => false,
            Self::Messages { .. }
            | Self::StoreOffset { .. }
            | Self::DeleteOffset { .. }
            | Self::Poll { .. }
            | Self::GetOffset { .. }
            | Self::Flush { .. }
            | Self::DeleteSegments { .. } => true,
        }
    }
}

/// The metadata's id of a wire id.
fn ours(wire: u32) -> Option<u32> {
    wire.checked_add(1)
}

/// The wire's id of a metadata id.
fn wire(id: u32) -> u32 {
    id.saturating_sub(1)
}

pub fn find_stream<'a>(state: &'a State, id: &Identifier) -> Result<&'a Stream, u32> {
    match id {
        Identifier::Numeric(n) => ours(*n)
            .and_then(|id| state.streams.get(&id))
            .ok_or(status::STREAM_ID_NOT_FOUND),
        Identifier::Name(name) => state
            .streams
            .values()
            .find(|stream| stream.name == *name)
            .ok_or(status::STREAM_NAME_NOT_FOUND),
    }
}

pub fn find_topic<'a>(
    state: &'a State,
    stream: &Identifier,
    topic: &Identifier,
) -> Result<(&'a Stream, &'a Topic), u32> {
    let stream = find_stream(state, stream)?;
    let topic = match topic {
        Identifier::Numeric(n) => ours(*n)
            .and_then(|id| stream.topics.get(&id))
            .ok_or(status::TOPIC_ID_NOT_FOUND),
        Identifier::Name(name) => stream
            .topics
            .values()
            .find(|topic| topic.name == *name)
            .ok_or(status::TOPIC_NAME_NOT_FOUND),
    }?;
    Ok((stream, topic))
}

/// A partition of a topic by wire id (its slot in the topic, from 0), as a partition key (which
/// names it by its id, never given again within the topic).
fn partition_key(stream: &Stream, topic: &Topic, wire_partition: u32) -> Result<PartitionKey, u32> {
    let partition = ours(wire_partition)
        .and_then(|slot| topic.at_slot(slot))
        .ok_or(status::PARTITION_NOT_FOUND)?;
    Ok(PartitionKey {
        stream: stream.id,
        topic: topic.id,
        partition: partition.id,
    })
}

/// The partition a send picks: by id, by the key's XXH32 (seed 0) modulo the count (what the
/// SDK's key partitioner computes), or round robin from `balanced` (the connection's counter).
pub fn pick_partition(
    topic: &Topic,
    partitioning: &Partitioning,
    balanced: &mut u32,
) -> Result<u32, u32> {
    let count = u32::try_from(topic.partitions.len()).unwrap_or(u32::MAX);
    if count == 0 {
        return Err(status::NO_PARTITIONS);
    }
    Ok(match partitioning {
        Partitioning::PartitionId(id) => *id,
        Partitioning::MessagesKey(key) => twox_hash::XxHash32::oneshot(0, key) % count,
        Partitioning::Balanced => {
            let pick = *balanced % count;
            *balanced = balanced.wrapping_add(1);
            pick
        }
    })
}

/// The kind and id a consumer's offsets are kept under. The storage keys offsets by a u32 id: a
/// named consumer's is the XXH32 (seed 0) of its name, as upstream keys it; a consumer group's
/// is the group's wire id, resolved in `topic` (by id or by name: the group must exist).
fn consumer_id(
    consumer: &iggy_protocol::Consumer,
    topic: &Topic,
) -> Result<(ConsumerKind, u32), u32> {
    if consumer.group {
        let group = find_group(topic, &consumer.id)?;
        return Ok((ConsumerKind::Group, wire(group.id)));
    }
    match &consumer.id {
        Identifier::Numeric(id) => Ok((ConsumerKind::Consumer, *id)),
        Identifier::Name(name) => Ok((
            ConsumerKind::Consumer,
            twox_hash::XxHash32::oneshot(0, name.as_bytes()),
        )),
    }
}

/// A topic's consumer group by wire id or name.
pub fn find_group<'a>(topic: &'a Topic, id: &Identifier) -> Result<&'a ConsumerGroup, u32> {
    match id {
        Identifier::Numeric(n) => ours(*n)
            .and_then(|id| topic.groups.get(&id))
            .ok_or(status::CONSUMER_GROUP_ID_NOT_FOUND),
        Identifier::Name(name) => topic
            .groups
            .values()
            .find(|group| group.name == *name)
            .ok_or(status::CONSUMER_GROUP_NAME_NOT_FOUND),
    }
}

fn topic_partition_count(topic: &Topic) -> u32 {
    u32::try_from(topic.partitions.len()).unwrap_or(u32::MAX)
}

/// A group as the listings show it.
pub fn group_info(topic: &Topic, group: &ConsumerGroup) -> response::ConsumerGroupInfo {
    response::ConsumerGroupInfo {
        id: wire(group.id),
        partitions_count: topic_partition_count(topic),
        members_count: u32::try_from(group.members.len()).unwrap_or(u32::MAX),
        name: group.name.clone(),
    }
}

/// `GetConsumerGroup`'s body: the group and each member with its partitions (wire ids).
pub fn put_group_details(out: &mut Vec<u8>, topic: &Topic, group: &ConsumerGroup) {
    let members: Vec<response::GroupMemberInfo> = group
        .assignment(topic_partition_count(topic))
        .into_iter()
        .map(|(id, partitions)| response::GroupMemberInfo {
            id,
            partitions: partitions.into_iter().map(wire).collect(),
        })
        .collect();
    response::put_consumer_group_details(out, &group_info(topic, group), &members);
}

/// `SyncConsumerGroup`'s body for session `member`: the group's generation and the member's
/// partitions (wire ids), or an empty body when it is not a member (the SDK's "rejoin").
pub fn group_assignment(
    state: &State,
    (stream, topic, group): (&Identifier, &Identifier, &Identifier),
    member: u128,
) -> Result<Vec<u8>, u32> {
    let (_, topic) = find_topic(state, stream, topic)?;
    let group = find_group(topic, group)?;
    let mut out = Vec::new();
    if let Some(id) = group.member_of(member) {
        let partitions: Vec<u32> = group
            .partitions_of(id, topic_partition_count(topic))
            .into_iter()
            .map(wire)
            .collect();
        response::put_group_assignment(&mut out, group.generation, &partitions);
    }
    Ok(out)
}

/// The ownership fence of a consumer group's poll: session `member` must be a member of the
/// group (else `ConsumerGroupMemberNotFound`, 5006) holding the partition (else
/// `ConsumerGroupPartitionNotOwned`, 5009, on which the SDK syncs its assignment again).
pub fn group_fence(state: &State, key: PartitionKey, group: u32, member: u128) -> Result<(), u32> {
    let topic = state
        .streams
        .get(&key.stream)
        .and_then(|s| s.topics.get(&key.topic))
        .ok_or(status::TOPIC_ID_NOT_FOUND)?;
    let group = ours(group)
        .and_then(|id| topic.groups.get(&id))
        .ok_or(status::CONSUMER_GROUP_ID_NOT_FOUND)?;
    let id = group
        .member_of(member)
        .ok_or(status::CONSUMER_GROUP_MEMBER_NOT_FOUND)?;
    let slot = topic
        .slot_of(key.partition)
        .ok_or(status::PARTITION_NOT_FOUND)?;
    if group.holder(slot) != Some(id) {
        return Err(status::CONSUMER_GROUP_PARTITION_NOT_OWNED);
    }
    Ok(())
}

/// The groups session `member` is in, as `GetMe` lists them (wire ids).
pub fn client_groups(state: &State, member: u128) -> Vec<response::ClientGroup> {
    state
        .memberships(member)
        .into_iter()
        .map(|(stream, topic, group)| response::ClientGroup {
            stream_id: wire(stream),
            topic_id: wire(topic),
            group_id: wire(group),
        })
        .collect()
}

/// A durability as the `durability` option names it.
fn durability_name(durability: Durability) -> &'static str {
    match durability {
        Durability::Replicated => "replicated",
        Durability::Persisted => "persisted",
    }
}

/// The option keys a topic's create accepts ([`topic_op`] reads them), as `DescribeOptions`
/// (13) lists them for `iggy options`.
pub fn topic_options(defaults: &TopicDefaults) -> Vec<response::OptionDescriptor> {
    use iggy_protocol::primitives::value_kind;
    let string = |key: &str, default: &str, description: &str| response::OptionDescriptor {
        key: key.into(),
        kind: value_kind::STRING,
        default_value: default.as_bytes().to_vec(),
        description: description.into(),
    };
    let number =
        |key: &str, kind: u8, default: Vec<u8>, description: &str| response::OptionDescriptor {
            key: key.into(),
            kind,
            default_value: default,
            description: description.into(),
        };
    let durability = durability_name(defaults.durability);
    vec![
        string(
            "durability",
            durability,
            "replicated: a write is acknowledged once a quorum holds it in memory and will publish it; persisted: once a quorum has it on disk",
        ),
        string(
            "consumer_offset_durability",
            durability,
            "accepted as replicated or persisted; stored offsets take the topic's durability",
        ),
        number(
            "segment_size",
            value_kind::UINT64,
            defaults.segment_size_bytes.to_le_bytes().to_vec(),
            "bytes of a segment before the next one starts",
        ),
        number(
            "message_expiry",
            value_kind::UINT64,
            u64::MAX.to_le_bytes().to_vec(),
            "microseconds a message is kept (whole seconds, rounded up); u64::MAX or 0: no limit",
        ),
        number(
            "max_topic_size",
            value_kind::UINT64,
            u64::MAX.to_le_bytes().to_vec(),
            "bytes a partition keeps before retention deletes its oldest segments; u64::MAX or 0: no limit",
        ),
        number(
            "replication_factor",
            value_kind::UINT8,
            vec![defaults.replication_factor],
            "replicas of each partition: every node of the cluster",
        ),
        string("compression_algorithm", "none", "none only"),
    ]
}

/// Reads a topic's options: `durability` (`replicated` | `persisted`), `segment_size`,
/// `message_expiry` (µs), `max_topic_size` (bytes), `replication_factor`; the
/// `consumer_offset_durability` the CLI always sends is accepted (offsets replicate like the
/// topic's messages); `compression_algorithm` only as `none`. Any other key is refused, as the
/// SDK refuses it.
fn topic_op(
    stream: u32,
    name: &str,
    partitions: u32,
    options: &[OptionEntry],
    defaults: &TopicDefaults,
) -> Result<Op, u32> {
    let mut durability = defaults.durability;
    let mut segment_size_bytes = defaults.segment_size_bytes;
    let mut retention = Retention {
        max_age_seconds: 0,
        max_bytes: 0,
    };
    let mut replication_factor = defaults.replication_factor;
    for entry in options {
        let bad = status::INVALID_OPTION_VALUE;
        match entry.key.as_str() {
            "durability" | "consumer_offset_durability" => {
                let value = match entry.as_str().ok_or(bad)? {
                    "replicated" => Durability::Replicated,
                    "persisted" => Durability::Persisted,
                    _ => return Err(bad),
                };
                if entry.key == "durability" {
                    durability = value;
                }
            }
            "segment_size" => segment_size_bytes = entry.as_u64().ok_or(bad)?,
            "message_expiry" => {
                // Microseconds on the wire, `u64::MAX` for never and 0 for the server's
                // default (none here); a part of a second counts as a whole one.
                let micros = entry.as_u64().ok_or(bad)?;
                retention.max_age_seconds = match micros {
                    u64::MAX => 0,
                    micros => micros.div_ceil(1_000_000),
                };
            }
            "max_topic_size" => {
                // `u64::MAX` for unlimited and 0 for the server's default: no limit here.
                retention.max_bytes = match entry.as_u64().ok_or(bad)? {
                    u64::MAX => 0,
                    bytes => bytes,
                };
            }
            "replication_factor" => {
                replication_factor = u8::try_from(entry.as_u64().ok_or(bad)?).map_err(|_| bad)?;
            }
            "compression_algorithm" => {
                if entry.as_str() != Some("none") {
                    return Err(status::FEATURE_UNAVAILABLE);
                }
            }
            _ => return Err(status::UNSUPPORTED_OPTION_KEY),
        }
    }
    Ok(Op::CreateTopic {
        stream,
        name: name.to_owned(),
        partitions,
        durability,
        segment_size_bytes,
        retention,
        replication_factor,
    })
}

/// A topic's update (`UpdateTopic`, 304): the new name and the retention its options ask for,
/// resolved against `topic` as it stands. `message_expiry` and `max_topic_size` of 0 (the SDK's
/// server default) keep the current value and `u64::MAX` lifts the limit; what cannot change
/// (durability, segment size, replication factor) is accepted only as it is; compression only
/// as `none`. Any other key is refused.
fn update_topic_op(
    stream: u32,
    topic: &Topic,
    name: &str,
    options: &[OptionEntry],
) -> Result<Op, u32> {
    let mut retention = topic.retention;
    let bad = status::INVALID_OPTION_VALUE;
    for entry in options {
        match entry.key.as_str() {
            "durability" | "consumer_offset_durability" => {
                if entry.as_str() != Some(durability_name(topic.durability)) {
                    return Err(bad);
                }
            }
            "segment_size" => {
                if entry.as_u64() != Some(topic.segment_size_bytes) {
                    return Err(bad);
                }
            }
            "replication_factor" => {
                if entry.as_u64() != Some(u64::from(topic.replication_factor)) {
                    return Err(bad);
                }
            }
            "message_expiry" => match entry.as_u64().ok_or(bad)? {
                0 => {}
                u64::MAX => retention.max_age_seconds = 0,
                micros => retention.max_age_seconds = micros.div_ceil(1_000_000),
            },
            "max_topic_size" => match entry.as_u64().ok_or(bad)? {
                0 => {}
                u64::MAX => retention.max_bytes = 0,
                bytes => retention.max_bytes = bytes,
            },
            "compression_algorithm" => {
                if entry.as_str() != Some("none") {
                    return Err(status::FEATURE_UNAVAILABLE);
                }
            }
            _ => return Err(status::UNSUPPORTED_OPTION_KEY),
        }
    }
    Ok(Op::UpdateTopic {
        stream,
        topic: topic.id,
        name: name.to_owned(),
        retention,
    })
}

/// Where `request` goes, given the committed metadata `state`. `balanced`: the connection's
/// round-robin counter for balanced sends; `figures`: what this node's partitions hold (the
/// sizes and counts a listing shows). Login, logout, ping, cluster metadata and the system
/// commands (stats, clients) are the caller's (they need the session, the roster, the
/// connections).
pub fn route(
    request: &Request,
    state: &State,
    defaults: &TopicDefaults,
    balanced: &mut u32,
    figures: Figures<'_>,
) -> Route {
    match route_inner(request, state, defaults, balanced, figures) {
        Ok(route) => route,
        Err(status) => Route::Refuse(status),
    }
}

fn route_inner(
    request: &Request,
    state: &State,
    defaults: &TopicDefaults,
    balanced: &mut u32,
    figures: Figures<'_>,
) -> Result<Route, u32> {
    Ok(match request {
        Request::GetStreams => {
            let mut out = Vec::new();
            for stream in state.streams.values() {
                stream_info(stream, figures).put(&mut out);
            }
            Route::Answer(out)
        }
        Request::GetStream { stream } => match find_stream(state, stream) {
            Ok(stream) => {
                let mut out = Vec::new();
                let topics: Vec<_> = stream
                    .topics
                    .values()
                    .map(|t| topic_info(stream.id, t, figures))
                    .collect();
                put_stream_details(&mut out, &stream_info(stream, figures), &topics);
                Route::Answer(out)
            }
            // The SDK reads an empty body as "no such stream".
            Err(_) => Route::Answer(Vec::new()),
        },
        Request::GetTopics { stream } => {
            let stream = find_stream(state, stream)?;
            let topics: Vec<_> = stream
                .topics
                .values()
                .map(|t| topic_info(stream.id, t, figures))
                .collect();
            let mut out = Vec::new();
            put_topics(&mut out, &topics);
            Route::Answer(out)
        }
        Request::GetTopic { stream, topic } => match find_topic(state, stream, topic) {
            Ok((stream, topic)) => {
                let mut out = Vec::new();
                put_topic_details(
                    &mut out,
                    &topic_info(stream.id, topic, figures),
                    &partition_infos(stream.id, topic, figures),
                );
                Route::Answer(out)
            }
            Err(_) => Route::Answer(Vec::new()),
        },
        Request::CreateStream { name, options } => {
            if !options.is_empty() {
                return Err(status::UNSUPPORTED_OPTION_KEY);
            }
            Route::Metadata(Op::CreateStream { name: name.clone() })
        }
        Request::DeleteStream { stream } => Route::Metadata(Op::DeleteStream {
            stream: find_stream(state, stream)?.id,
        }),
        Request::UpdateStream {
            stream,
            name,
            options,
        } => {
            if !options.is_empty() {
                return Err(status::UNSUPPORTED_OPTION_KEY);
            }
            Route::Metadata(Op::UpdateStream {
                stream: find_stream(state, stream)?.id,
                name: name.clone(),
            })
        }
        Request::CreateTopic {
            stream,
            partitions,
            name,
            options,
        } => Route::Metadata(topic_op(
            find_stream(state, stream)?.id,
            name,
            *partitions,
            options,
            defaults,
        )?),
        Request::UpdateTopic {
            stream,
            topic,
            name,
            options,
        } => {
            let (stream, topic) = find_topic(state, stream, topic)?;
            Route::Metadata(update_topic_op(stream.id, topic, name, options)?)
        }
        Request::FlushUnsavedBuffer {
            stream,
            topic,
            partition,
            fsync,
        } => {
            let (stream, topic) = find_topic(state, stream, topic)?;
            Route::Flush {
                key: partition_key(stream, topic, *partition)?,
                fsync: *fsync,
            }
        }
        Request::DeleteSegments {
            stream,
            topic,
            partition,
            count,
        } => {
            let (stream, topic) = find_topic(state, stream, topic)?;
            Route::DeleteSegments {
                key: partition_key(stream, topic, *partition)?,
                count: *count,
            }
        }
        Request::PurgeStream { stream } => Route::Metadata(Op::PurgeStream {
            stream: find_stream(state, stream)?.id,
        }),
        Request::PurgeTopic { stream, topic } => {
            let (stream, topic) = find_topic(state, stream, topic)?;
            Route::Metadata(Op::PurgeTopic {
                stream: stream.id,
                topic: topic.id,
            })
        }
        Request::DeletePartitions {
            stream,
            topic,
            count,
        } => {
            let (stream, topic) = find_topic(state, stream, topic)?;
            Route::Metadata(Op::DeletePartitions {
                stream: stream.id,
                topic: topic.id,
                count: *count,
            })
        }
        Request::DeleteTopic { stream, topic } => {
            let (stream, topic) = find_topic(state, stream, topic)?;
            Route::Metadata(Op::DeleteTopic {
                stream: stream.id,
                topic: topic.id,
            })
        }
        Request::CreatePartitions {
            stream,
            topic,
            count,
        } => {
            let (stream, topic) = find_topic(state, stream, topic)?;
            Route::Metadata(Op::CreatePartitions {
                stream: stream.id,
                topic: topic.id,
                count: *count,
            })
        }
        Request::SendMessages {
            stream,
            topic,
            partitioning,
            ..
        } => {
            let (stream, topic) = find_topic(state, stream, topic)?;
            let partition = pick_partition(topic, partitioning, balanced)?;
            Route::Messages {
                key: partition_key(stream, topic, partition)?,
                wire: partition,
            }
        }
        Request::PollMessages {
            consumer,
            stream,
            topic,
            partition,
            strategy,
            count,
            auto_commit,
        } => {
            let (stream, topic) = find_topic(state, stream, topic)?;
            let consumer = consumer_id(consumer, topic)?;
            Route::Poll {
                key: partition_key(stream, topic, partition.unwrap_or(0))?,
                wire: partition.unwrap_or(0),
                consumer,
                strategy: *strategy,
                count: *count,
                auto_commit: *auto_commit,
            }
        }
        Request::StoreConsumerOffset {
            consumer,
            stream,
            topic,
            partition,
            offset,
            ..
        } => {
            let (stream, topic) = find_topic(state, stream, topic)?;
            let (kind, id) = consumer_id(consumer, topic)?;
            Route::StoreOffset {
                key: partition_key(stream, topic, partition.unwrap_or(0))?,
                body: encode_consumer_offset(kind, id, *offset).to_vec(),
            }
        }
        Request::GetConsumerOffset {
            consumer,
            stream,
            topic,
            partition,
        } => {
            let (stream, topic) = find_topic(state, stream, topic)?;
            let consumer = consumer_id(consumer, topic)?;
            Route::GetOffset {
                key: partition_key(stream, topic, partition.unwrap_or(0))?,
                wire: partition.unwrap_or(0),
                consumer,
            }
        }
        Request::DeleteConsumerOffset {
            consumer,
            stream,
            topic,
            partition,
            ..
        } => {
            let (stream, topic) = find_topic(state, stream, topic)?;
            let (kind, id) = consumer_id(consumer, topic)?;
            Route::DeleteOffset {
                key: partition_key(stream, topic, partition.unwrap_or(0))?,
                kind,
                id,
            }
        }
        Request::GetConsumerGroups { stream, topic } => {
            let (_, topic) = find_topic(state, stream, topic)?;
            let groups: Vec<_> = topic
                .groups
                .values()
                .map(|group| group_info(topic, group))
                .collect();
            let mut out = Vec::new();
            response::put_consumer_groups(&mut out, &groups);
            Route::Answer(out)
        }
        Request::GetConsumerGroup {
            stream,
            topic,
            group,
        } => {
            let (_, topic) = find_topic(state, stream, topic)?;
            let mut out = Vec::new();
            // The SDK reads an empty body as "no such group".
            if let Ok(group) = find_group(topic, group) {
                put_group_details(&mut out, topic, group);
            }
            Route::Answer(out)
        }
        Request::CreateConsumerGroup {
            stream,
            topic,
            name,
        } => {
            let (stream, topic) = find_topic(state, stream, topic)?;
            Route::Metadata(Op::CreateConsumerGroup {
                stream: stream.id,
                topic: topic.id,
                name: name.clone(),
            })
        }
        Request::DeleteConsumerGroup {
            stream,
            topic,
            group,
        } => {
            let (stream, topic) = find_topic(state, stream, topic)?;
            Route::Metadata(Op::DeleteConsumerGroup {
                stream: stream.id,
                topic: topic.id,
                group: find_group(topic, group)?.id,
            })
        }
        // The member, its node and boot are the caller's to fill in ([`bind_member`]).
        Request::JoinConsumerGroup {
            stream,
            topic,
            group,
        } => {
            let (stream, topic) = find_topic(state, stream, topic)?;
            Route::Metadata(Op::JoinConsumerGroup {
                stream: stream.id,
                topic: topic.id,
                group: find_group(topic, group)?.id,
                member: 0,
                node: 0,
                boot: 0,
            })
        }
        Request::LeaveConsumerGroup {
            stream,
            topic,
            group,
        } => {
            let (stream, topic) = find_topic(state, stream, topic)?;
            Route::Metadata(Op::LeaveConsumerGroup {
                stream: stream.id,
                topic: topic.id,
                group: find_group(topic, group)?.id,
                member: 0,
            })
        }
        // A routed poll is a poll (the data connection's session answers it).
        Request::PollMessagesOnPrimary(poll) => {
            return route_inner(poll, state, defaults, balanced, figures);
        }
        Request::LoginRegisterWithToken { .. } => return Err(status::FEATURE_UNAVAILABLE),
        Request::Ping
        | Request::LoginRegister { .. }
        | Request::Logout
        | Request::GetClusterMetadata
        | Request::GetStats
        | Request::GetSnapshot { .. }
        | Request::GetMe
        | Request::GetClient { .. }
        | Request::GetClients
        | Request::SyncConsumerGroup { .. }
        | Request::AttachConsumerSession { .. }
        | Request::GetPollRouting(_)
        | Request::GetConsumerOffsetRouting(_)
        | Request::GetUser { .. }
        | Request::GetUsers
        | Request::CreateUser { .. }
        | Request::DeleteUser { .. }
        | Request::UpdateUser { .. }
        | Request::UpdatePermissions { .. }
        | Request::ChangePassword { .. }
        | Request::GetPersonalAccessTokens
        | Request::CreatePersonalAccessToken { .. }
        | Request::DeletePersonalAccessToken { .. } => return Err(status::INVALID_COMMAND),
        Request::DescribeOptions { scope } => {
            let mut out = Vec::new();
            let descriptors = if *scope == 1 {
                topic_options(defaults)
            } else {
                // A stream's create takes no options, and users are not built.
                Vec::new()
            };
            response::put_option_descriptors(&mut out, &descriptors);
            Route::Answer(out)
        }
        Request::Other { .. } => return Err(status::INVALID_COMMAND),
    })
}

/// Fills in who a membership op is for: session `member`, connected through `node` (booted at
/// `boot`). Other ops are unchanged.
pub fn bind_member(op: &mut Op, session: u128, replica: u8, boot_stamp: u64) {
    match op {
        Op::JoinConsumerGroup {
            member, node, boot, ..
        } => {
            *member = session;
            *node = replica;
            *boot = boot_stamp;
        }
        Op::LeaveConsumerGroup { member, .. } => *member = session,
        _ => {}
    }
}

/// What this node's partitions hold, by key ([`iggy_segments::partition::Figures`]; default for a
/// partition not open here).
pub type Figures<'a> = &'a dyn Fn(PartitionKey) -> iggy_segments::partition::Figures;

/// No partition open: every figure 0 (tests, and replies built without a node).
pub fn no_figures(_: PartitionKey) -> iggy_segments::partition::Figures {
    iggy_segments::partition::Figures::default()
}

/// The sum of a topic's partitions' figures: (messages held, bytes).
fn topic_totals(stream: u32, topic: &Topic, figures: Figures<'_>) -> (u64, u64) {
    topic
        .partitions
        .iter()
        .fold((0, 0), |(messages, bytes), p| {
            let f = figures(PartitionKey {
                stream,
                topic: topic.id,
                partition: p.id,
            });
            (
                messages + f.next_offset.saturating_sub(f.first_offset),
                bytes + f.bytes,
            )
        })
}

pub fn stream_info(stream: &Stream, figures: Figures<'_>) -> StreamInfo {
    let (messages_count, size_bytes) = stream
        .topics
        .values()
        .map(|t| topic_totals(stream.id, t, figures))
        .fold((0, 0), |(m, b), (tm, tb)| (m + tm, b + tb));
    StreamInfo {
        id: wire(stream.id),
        created_at: stream.created_at,
        topics_count: u32::try_from(stream.topics.len()).unwrap_or(u32::MAX),
        size_bytes,
        messages_count,
        name: stream.name.clone(),
        options: Vec::new(),
    }
}

/// The wire's message expiry: microseconds, `u64::MAX` for never (`IggyExpiry::NeverExpire`;
/// 0 would read as the server's default).
fn message_expiry(max_age_seconds: u64) -> u64 {
    match max_age_seconds {
        0 => u64::MAX,
        seconds => seconds.saturating_mul(1_000_000),
    }
}

/// The wire's topic size limit: `u64::MAX` for unlimited (0 would read as the server's
/// default).
fn max_topic_size(max_bytes: u64) -> u64 {
    match max_bytes {
        0 => u64::MAX,
        bytes => bytes,
    }
}

pub fn topic_info(stream: u32, topic: &Topic, figures: Figures<'_>) -> TopicInfo {
    let durability = durability_name(topic.durability);
    let (messages_count, size_bytes) = topic_totals(stream, topic, figures);
    TopicInfo {
        id: wire(topic.id),
        created_at: topic.created_at,
        partitions_count: u32::try_from(topic.partitions.len()).unwrap_or(u32::MAX),
        message_expiry: message_expiry(topic.retention.max_age_seconds),
        compression_algorithm: 1,
        max_topic_size: max_topic_size(topic.retention.max_bytes),
        size_bytes,
        messages_count,
        name: topic.name.clone(),
        options: vec![
            OptionEntry::string("durability", durability),
            OptionEntry::uint64("segment_size", topic.segment_size_bytes),
        ],
        derived_options: Vec::new(),
    }
}

/// A topic's partitions as the wire lists them, with what this node holds of each.
pub fn partition_infos(stream: u32, topic: &Topic, figures: Figures<'_>) -> Vec<PartitionInfo> {
    topic
        .partitions
        .iter()
        .zip(0..)
        .map(|(p, wire_id)| {
            let f = figures(PartitionKey {
                stream,
                topic: topic.id,
                partition: p.id,
            });
            PartitionInfo {
                id: wire_id,
                created_at: topic.created_at,
                segments_count: u32::try_from(f.segments).unwrap_or(u32::MAX),
                // The offset of the last message (0 when empty, as upstream's).
                current_offset: f.next_offset.saturating_sub(1),
                size_bytes: f.bytes,
                messages_count: f.next_offset.saturating_sub(f.first_offset),
            }
        })
        .collect()
}

/// The Iggy status of a metadata refusal (the code of `iggy_metadata::codec`'s reply), for the
/// operation that was refused.
pub fn refusal_status(op: &Op, code: u8) -> u32 {
    let topic_level = matches!(
        op,
        Op::CreateTopic { .. }
            | Op::UpdateTopic { .. }
            | Op::DeleteTopic { .. }
            | Op::CreatePartitions { .. }
            | Op::DeletePartitions { .. }
            | Op::DeleteSegments { .. }
            | Op::PurgeTopic { .. }
    );
    let group_level = matches!(
        op,
        Op::CreateConsumerGroup { .. }
            | Op::DeleteConsumerGroup { .. }
            | Op::JoinConsumerGroup { .. }
            | Op::LeaveConsumerGroup { .. }
    );
    let user_level = matches!(
        op,
        Op::CreateUser { .. }
            | Op::DeleteUser { .. }
            | Op::UpdateUser { .. }
            | Op::UpdatePermissions { .. }
            | Op::ChangePassword { .. }
    );
    let token_level = matches!(op, Op::CreateToken { .. } | Op::DeleteToken { .. });
    match code {
        1 if token_level => status::INVALID_PERSONAL_ACCESS_TOKEN_NAME,
        2 if token_level => status::PERSONAL_ACCESS_TOKEN_ALREADY_EXISTS,
        6 if token_level => status::PERSONAL_ACCESS_TOKENS_LIMIT_REACHED,
        1 if user_level => status::INVALID_USERNAME,
        2 if user_level => status::USER_ALREADY_EXISTS,
        6 if user_level => status::USERS_LIMIT_REACHED,
        13 | 15 => status::RESOURCE_NOT_FOUND,
        14 => status::INVALID_USER_STATUS,
        1 if group_level => status::INVALID_CONSUMER_GROUP_NAME,
        2 if group_level => status::CONSUMER_GROUP_NAME_ALREADY_EXISTS,
        6 if group_level => status::CANNOT_CREATE_CONSUMER_GROUP_INFO,
        1 if topic_level => status::INVALID_TOPIC_NAME,
        1 => status::INVALID_STREAM_NAME,
        2 if topic_level => status::TOPIC_NAME_ALREADY_EXISTS,
        2 => status::STREAM_NAME_ALREADY_EXISTS,
        3 => status::STREAM_ID_NOT_FOUND,
        4 => status::TOPIC_ID_NOT_FOUND,
        5 => status::CONSUMER_GROUP_ID_NOT_FOUND,
        6 => status::TOO_MANY_PARTITIONS,
        7 => status::INVALID_REPLICATION_FACTOR,
        8 => status::INVALID_OPTION_VALUE,
        16 => status::INVALID_PARTITIONS_COUNT,
        17 => status::PARTITION_NOT_FOUND,
        9 | 11 => status::STALE_CLIENT,
        10 => status::UNAUTHENTICATED,
        12 => status::CONSUMER_GROUP_MEMBER_NOT_FOUND,
        _ => status::ERROR,
    }
}

/// The body the SDK gets for a committed metadata operation: the result section and, for a
/// create, what it created, read from `state` after the commit (`CreateStream` answers the
/// stream, `CreateTopic` the topic with its partitions, the rest nothing).
pub fn metadata_reply(op: &Op, reply: &Reply, state: &State, figures: Figures<'_>) -> Vec<u8> {
    let applied = match reply {
        Reply::Refused { code, .. } => return result_error(refusal_status(op, *code)),
        Reply::Applied(applied) => applied,
    };
    let mut out = Vec::new();
    put_result_ok(&mut out);
    match (op, applied) {
        (Op::CreateStream { .. }, iggy_metadata::Applied::Stream(id)) => {
            if let Some(stream) = state.streams.get(id) {
                stream_info(stream, figures).put(&mut out);
            }
        }
        (Op::CreateTopic { stream, .. }, iggy_metadata::Applied::Topic(id)) => {
            if let Some(topic) = state.streams.get(stream).and_then(|s| s.topics.get(id)) {
                put_topic_details(
                    &mut out,
                    &topic_info(*stream, topic, figures),
                    &partition_infos(*stream, topic, figures),
                );
            }
        }
        (Op::CreateUser { .. }, iggy_metadata::Applied::User(id)) => {
            if let Some((user, permissions)) = crate::users::state_user_details(state, *id) {
                response::put_user_details(&mut out, &user, permissions.as_ref());
            }
        }
        (Op::CreateConsumerGroup { stream, topic, .. }, iggy_metadata::Applied::Group(id)) => {
            if let Some(topic) = state.streams.get(stream).and_then(|s| s.topics.get(topic))
                && let Some(group) = topic.groups.get(id)
            {
                put_group_details(&mut out, topic, group);
            }
        }
        _ => {}
    }
    out
}

/// The body of a committed consumer offset store: the result section, nothing after it.
pub fn offset_stored_reply() -> Vec<u8> {
    let mut out = Vec::new();
    put_result_ok(&mut out);
    out
}

/// The SDK's send confirmation for a batch committed at `base_offset` of partition `key`, whose
/// wire id is `partition`.
pub fn send_reply(key: PartitionKey, partition: u32, base_offset: u64) -> Vec<u8> {
    let mut out = Vec::new();
    response::put_send_confirmations(
        &mut out,
        &[response::SendConfirmation {
            stream_id: wire(key.stream),
            topic_id: wire(key.topic),
            partition_id: partition,
            base_offset,
        }],
    );
    out
}
