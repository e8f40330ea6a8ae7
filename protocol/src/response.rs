//! Reply bodies: encoded by the server, decoded by our client. Layouts are those of
//! `iggy_binary_protocol` 0.11.0 `responses/`.

use crate::primitives::{OptionEntry, put_name, put_options_prefixed, read_name, read_options};
use crate::wire::{Put, Reader, WireError, len_u32};

/// The result section of a result-framed reply that succeeded: `count = 0`. The typed payload
/// follows it.
pub fn put_result_ok(out: &mut Vec<u8>) {
    out.put_u32(0);
}

/// A result-framed rejection: `count = 1`, `{index 0, code}`, no payload.
pub fn result_error(code: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(12);
    out.put_u32(1);
    out.put_u32(0);
    out.put_u32(code);
    out
}

/// Splits a result-framed body: `Ok(payload)` or `Err(code)` of its first entry.
pub fn split_result(body: &[u8]) -> Result<Result<&[u8], u32>, WireError> {
    let mut r = Reader::new(body);
    let count = r.u32("result count")? as usize;
    if count == 0 {
        return Ok(Ok(r.rest()));
    }
    r.u32("result index")?;
    let code = r.u32("result code")?;
    Ok(Err(code))
}

/// The login's payload (after the result section).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginReply {
    pub user_id: u32,
    /// Nonzero: the client echoes it on every later request.
    pub session: u64,
    pub protocol: u32,
    pub server_version: String,
}

impl LoginReply {
    pub fn put(&self, out: &mut Vec<u8>) {
        out.put_u32(self.user_id);
        out.put_u64(self.session);
        out.put_u32(self.protocol);
        put_name(out, &self.server_version);
    }

    pub fn read(r: &mut Reader<'_>) -> Result<Self, WireError> {
        Ok(Self {
            user_id: r.u32("user id")?,
            session: r.u64("session")?,
            protocol: r.u32("server protocol")?,
            server_version: read_name(r, "server version")?,
        })
    }
}

impl ClusterNode {
    pub fn put(&self, out: &mut Vec<u8>) {
        out.put_long_str(&self.name);
        out.put_long_str(&self.ip);
        out.put_u16(self.tcp_port);
        out.put_u16(self.quic_port);
        out.put_u16(self.http_port);
        out.put_u16(self.websocket_port);
        out.put_u8(self.role);
        out.put_u8(self.status);
    }

    pub fn read(r: &mut Reader<'_>) -> Result<Self, WireError> {
        let read_long = |r: &mut Reader<'_>, what| -> Result<String, WireError> {
            let len = r.u32(what)? as usize;
            Ok(r.str(len, what)?.to_owned())
        };
        Ok(Self {
            name: read_long(r, "node name")?,
            ip: read_long(r, "node ip")?,
            tcp_port: r.u16("tcp port")?,
            quic_port: r.u16("quic port")?,
            http_port: r.u16("http port")?,
            websocket_port: r.u16("websocket port")?,
            role: r.u8("role")?,
            status: r.u8("status")?,
        })
    }
}

/// `GetPollRouting` and `GetConsumerOffsetRouting`: the session a routed data connection
/// attaches (`AttachConsumerSession`'s 32 bytes), then the node to connect to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PollRoute {
    pub client_id: u128,
    pub session: u64,
    pub metadata_watermark: u64,
    pub primary: ClusterNode,
}

impl PollRoute {
    pub fn put(&self, out: &mut Vec<u8>) {
        out.put_u128(self.client_id);
        out.put_u64(self.session);
        out.put_u64(self.metadata_watermark);
        self.primary.put(out);
    }

    pub fn read(body: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(body);
        let route = Self {
            client_id: r.u128("client id")?,
            session: r.u64("session")?,
            metadata_watermark: r.u64("metadata watermark")?,
            primary: ClusterNode::read(&mut r)?,
        };
        r.finish("poll route")?;
        Ok(route)
    }
}

/// One node of `GetClusterMetadata`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterNode {
    pub name: String,
    pub ip: String,
    pub tcp_port: u16,
    pub quic_port: u16,
    pub http_port: u16,
    pub websocket_port: u16,
    /// 0 leader, 1 follower.
    pub role: u8,
    /// 0 healthy.
    pub status: u8,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterMetadata {
    pub name: String,
    pub nodes: Vec<ClusterNode>,
}

impl ClusterMetadata {
    pub fn put(&self, out: &mut Vec<u8>) {
        out.put_long_str(&self.name);
        out.put_u32(len_u32(self.nodes.len()));
        for node in &self.nodes {
            node.put(out);
        }
    }

    pub fn read(r: &mut Reader<'_>) -> Result<Self, WireError> {
        let read_long = |r: &mut Reader<'_>, what| -> Result<String, WireError> {
            let len = r.u32(what)? as usize;
            Ok(r.str(len, what)?.to_owned())
        };
        let name = read_long(r, "cluster name")?;
        let count = r.u32("nodes count")?;
        let mut nodes = Vec::new();
        for _ in 0..count {
            nodes.push(ClusterNode::read(r)?);
        }
        Ok(Self { name, nodes })
    }
}

/// A stream as `GetStream(s)` and `CreateStream` describe it (33 fixed bytes, the name, the
/// length-prefixed options).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamInfo {
    /// 0-based on the wire.
    pub id: u32,
    pub created_at: u64,
    pub topics_count: u32,
    pub size_bytes: u64,
    pub messages_count: u64,
    pub name: String,
    pub options: Vec<OptionEntry>,
}

impl StreamInfo {
    pub fn put(&self, out: &mut Vec<u8>) {
        out.put_u32(self.id);
        out.put_u64(self.created_at);
        out.put_u32(self.topics_count);
        out.put_u64(self.size_bytes);
        out.put_u64(self.messages_count);
        put_name(out, &self.name);
        put_options_prefixed(out, &self.options);
    }

    pub fn read(r: &mut Reader<'_>) -> Result<Self, WireError> {
        Ok(Self {
            id: r.u32("stream id")?,
            created_at: r.u64("created at")?,
            topics_count: r.u32("topics count")?,
            size_bytes: r.u64("size bytes")?,
            messages_count: r.u64("messages count")?,
            name: read_name(r, "stream name")?,
            options: read_prefixed_options(r)?,
        })
    }
}

fn read_prefixed_options(r: &mut Reader<'_>) -> Result<Vec<OptionEntry>, WireError> {
    let len = r.u32("options length")? as usize;
    read_options(r, len)
}

/// A topic's header (`TopicHeader` of 0.11.0: 49 fixed bytes, the name, options, derived
/// options).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicInfo {
    pub id: u32,
    pub created_at: u64,
    pub partitions_count: u32,
    /// Microseconds; 0 is never.
    pub message_expiry: u64,
    /// 1 none.
    pub compression_algorithm: u8,
    /// 0 is unlimited.
    pub max_topic_size: u64,
    pub size_bytes: u64,
    pub messages_count: u64,
    pub name: String,
    pub options: Vec<OptionEntry>,
    pub derived_options: Vec<OptionEntry>,
}

impl TopicInfo {
    pub fn put(&self, out: &mut Vec<u8>) {
        out.put_u32(self.id);
        out.put_u64(self.created_at);
        out.put_u32(self.partitions_count);
        out.put_u64(self.message_expiry);
        out.put_u8(self.compression_algorithm);
        out.put_u64(self.max_topic_size);
        out.put_u64(self.size_bytes);
        out.put_u64(self.messages_count);
        put_name(out, &self.name);
        put_options_prefixed(out, &self.options);
        put_options_prefixed(out, &self.derived_options);
    }

    pub fn read(r: &mut Reader<'_>) -> Result<Self, WireError> {
        Ok(Self {
            id: r.u32("topic id")?,
            created_at: r.u64("created at")?,
            partitions_count: r.u32("partitions count")?,
            message_expiry: r.u64("message expiry")?,
            compression_algorithm: r.u8("compression algorithm")?,
            max_topic_size: r.u64("max topic size")?,
            size_bytes: r.u64("size bytes")?,
            messages_count: r.u64("messages count")?,
            name: read_name(r, "topic name")?,
            options: read_prefixed_options(r)?,
            derived_options: read_prefixed_options(r)?,
        })
    }
}

/// One partition of `GetTopic` (40 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionInfo {
    pub id: u32,
    pub created_at: u64,
    pub segments_count: u32,
    pub current_offset: u64,
    pub size_bytes: u64,
    pub messages_count: u64,
}

impl PartitionInfo {
    pub fn put(&self, out: &mut Vec<u8>) {
        out.put_u32(self.id);
        out.put_u64(self.created_at);
        out.put_u32(self.segments_count);
        out.put_u64(self.current_offset);
        out.put_u64(self.size_bytes);
        out.put_u64(self.messages_count);
    }

    pub fn read(r: &mut Reader<'_>) -> Result<Self, WireError> {
        Ok(Self {
            id: r.u32("partition id")?,
            created_at: r.u64("created at")?,
            segments_count: r.u32("segments count")?,
            current_offset: r.u64("current offset")?,
            size_bytes: r.u64("size bytes")?,
            messages_count: r.u64("messages count")?,
        })
    }
}

/// `GetStream`: the stream, then its topics' headers to the end of the body.
pub fn put_stream_details(out: &mut Vec<u8>, stream: &StreamInfo, topics: &[TopicInfo]) {
    stream.put(out);
    for topic in topics {
        topic.put(out);
    }
}

pub fn read_stream_details(body: &[u8]) -> Result<(StreamInfo, Vec<TopicInfo>), WireError> {
    let mut r = Reader::new(body);
    let stream = StreamInfo::read(&mut r)?;
    let mut topics = Vec::new();
    while r.remaining() > 0 {
        topics.push(TopicInfo::read(&mut r)?);
    }
    Ok((stream, topics))
}

/// `GetStreams`: streams to the end of the body (no count).
pub fn read_streams(body: &[u8]) -> Result<Vec<StreamInfo>, WireError> {
    let mut r = Reader::new(body);
    let mut streams = Vec::new();
    while r.remaining() > 0 {
        streams.push(StreamInfo::read(&mut r)?);
    }
    Ok(streams)
}

/// `GetTopic` and `CreateTopic`: the header, then its partitions to the end of the body.
pub fn put_topic_details(out: &mut Vec<u8>, topic: &TopicInfo, partitions: &[PartitionInfo]) {
    topic.put(out);
    for partition in partitions {
        partition.put(out);
    }
}

pub fn read_topic_details(body: &[u8]) -> Result<(TopicInfo, Vec<PartitionInfo>), WireError> {
    let mut r = Reader::new(body);
    let topic = TopicInfo::read(&mut r)?;
    let mut partitions = Vec::new();
    while r.remaining() > 0 {
        partitions.push(PartitionInfo::read(&mut r)?);
    }
    Ok((topic, partitions))
}

/// `GetTopics`: a count, then the headers.
pub fn put_topics(out: &mut Vec<u8>, topics: &[TopicInfo]) {
    out.put_u32(len_u32(topics.len()));
    for topic in topics {
        topic.put(out);
    }
}

pub fn read_topics(body: &[u8]) -> Result<Vec<TopicInfo>, WireError> {
    let mut r = Reader::new(body);
    let count = r.u32("topics count")?;
    let mut topics = Vec::new();
    for _ in 0..count {
        topics.push(TopicInfo::read(&mut r)?);
    }
    r.finish("topics")?;
    Ok(topics)
}

/// One confirmation of `SendMessages` (20 bytes): where the batch went and its first offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendConfirmation {
    pub stream_id: u32,
    pub topic_id: u32,
    pub partition_id: u32,
    pub base_offset: u64,
}

pub fn put_send_confirmations(out: &mut Vec<u8>, confirmations: &[SendConfirmation]) {
    out.put_u32(len_u32(confirmations.len()));
    for c in confirmations {
        out.put_u32(c.stream_id);
        out.put_u32(c.topic_id);
        out.put_u32(c.partition_id);
        out.put_u64(c.base_offset);
    }
}

pub fn read_send_confirmations(body: &[u8]) -> Result<Vec<SendConfirmation>, WireError> {
    let mut r = Reader::new(body);
    if r.remaining() == 0 {
        return Ok(Vec::new());
    }
    let count = r.u32("confirmations count")?;
    let mut out = Vec::new();
    for _ in 0..count {
        out.push(SendConfirmation {
            stream_id: r.u32("stream id")?,
            topic_id: r.u32("topic id")?,
            partition_id: r.u32("partition id")?,
            base_offset: r.u64("base offset")?,
        });
    }
    r.finish("send confirmations")?;
    Ok(out)
}

/// The 16 bytes before a poll's batches: the partition, its current (last) offset, and how many
/// messages follow. The stored batches follow verbatim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollHeader {
    pub partition_id: u32,
    pub current_offset: u64,
    pub messages_count: u32,
}

pub const POLL_HEADER_SIZE: usize = 16;

impl PollHeader {
    pub fn put(&self, out: &mut Vec<u8>) {
        out.put_u32(self.partition_id);
        out.put_u64(self.current_offset);
        out.put_u32(self.messages_count);
    }

    /// The header and the batch bytes after it.
    pub fn read(body: &[u8]) -> Result<(Self, &[u8]), WireError> {
        let mut r = Reader::new(body);
        let header = Self {
            partition_id: r.u32("partition id")?,
            current_offset: r.u64("current offset")?,
            messages_count: r.u32("messages count")?,
        };
        Ok((header, r.rest()))
    }
}

/// `GetConsumerOffset` (20 bytes; an empty body means none stored).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumerOffsetInfo {
    pub partition_id: u32,
    pub current_offset: u64,
    pub stored_offset: u64,
}

impl ConsumerOffsetInfo {
    pub fn put(&self, out: &mut Vec<u8>) {
        out.put_u32(self.partition_id);
        out.put_u64(self.current_offset);
        out.put_u64(self.stored_offset);
    }

    pub fn read(body: &[u8]) -> Result<Option<Self>, WireError> {
        if body.is_empty() {
            return Ok(None);
        }
        let mut r = Reader::new(body);
        let info = Self {
            partition_id: r.u32("partition id")?,
            current_offset: r.u64("current offset")?,
            stored_offset: r.u64("stored offset")?,
        };
        r.finish("consumer offset")?;
        Ok(Some(info))
    }
}

/// `GetStats` (0.11.0 `responses/system/get_stats.rs`): 108 fixed bytes of figures, five
/// u32-length-prefixed strings, the server's packed semver (0: none), per-partition cache
/// figures, the thread count and the disk's free and total bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct StatsInfo {
    pub process_id: u32,
    /// Percent of one core.
    pub cpu_usage: f32,
    pub total_cpu_usage: f32,
    pub memory_usage: u64,
    pub total_memory: u64,
    pub available_memory: u64,
    /// Microseconds since the process started.
    pub run_time: u64,
    /// Unix microseconds when it started.
    pub start_time: u64,
    pub read_bytes: u64,
    pub written_bytes: u64,
    pub messages_size_bytes: u64,
    pub streams_count: u32,
    pub topics_count: u32,
    pub partitions_count: u32,
    pub segments_count: u32,
    pub messages_count: u64,
    pub clients_count: u32,
    pub consumer_groups_count: u32,
    pub hostname: String,
    pub os_name: String,
    pub os_version: String,
    pub kernel_version: String,
    pub server_version: String,
    /// `major * 1_000_000 + minor * 1_000 + patch`; `None` travels as 0.
    pub server_semver: Option<u32>,
    pub cache_metrics: Vec<CacheMetric>,
    pub threads_count: u32,
    pub free_disk_space: u64,
    pub total_disk_space: u64,
}

/// One partition's cache figures in `StatsInfo` (32 bytes).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CacheMetric {
    pub stream_id: u32,
    pub topic_id: u32,
    pub partition_id: u32,
    pub hits: u64,
    pub misses: u64,
    pub hit_ratio: f32,
}

impl StatsInfo {
    pub fn put(&self, out: &mut Vec<u8>) {
        out.put_u32(self.process_id);
        out.put_u32(self.cpu_usage.to_bits());
        out.put_u32(self.total_cpu_usage.to_bits());
        for value in [
            self.memory_usage,
            self.total_memory,
            self.available_memory,
            self.run_time,
            self.start_time,
            self.read_bytes,
            self.written_bytes,
            self.messages_size_bytes,
        ] {
            out.put_u64(value);
        }
        out.put_u32(self.streams_count);
        out.put_u32(self.topics_count);
        out.put_u32(self.partitions_count);
        out.put_u32(self.segments_count);
        out.put_u64(self.messages_count);
        out.put_u32(self.clients_count);
        out.put_u32(self.consumer_groups_count);
        for text in [
            &self.hostname,
            &self.os_name,
            &self.os_version,
            &self.kernel_version,
            &self.server_version,
        ] {
            out.put_long_str(text);
        }
        out.put_u32(self.server_semver.unwrap_or(0));
        out.put_u32(len_u32(self.cache_metrics.len()));
        for metric in &self.cache_metrics {
            out.put_u32(metric.stream_id);
            out.put_u32(metric.topic_id);
            out.put_u32(metric.partition_id);
            out.put_u64(metric.hits);
            out.put_u64(metric.misses);
            out.put_u32(metric.hit_ratio.to_bits());
        }
        out.put_u32(self.threads_count);
        out.put_u64(self.free_disk_space);
        out.put_u64(self.total_disk_space);
    }

    pub fn read(body: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(body);
        let long_str = |r: &mut Reader<'_>, what: &'static str| -> Result<String, WireError> {
            let len = r.u32(what)? as usize;
            Ok(r.str(len, what)?.to_owned())
        };
        let mut stats = Self {
            process_id: r.u32("process id")?,
            cpu_usage: f32::from_bits(r.u32("cpu usage")?),
            total_cpu_usage: f32::from_bits(r.u32("total cpu usage")?),
            memory_usage: r.u64("memory usage")?,
            total_memory: r.u64("total memory")?,
            available_memory: r.u64("available memory")?,
            run_time: r.u64("run time")?,
            start_time: r.u64("start time")?,
            read_bytes: r.u64("read bytes")?,
            written_bytes: r.u64("written bytes")?,
            messages_size_bytes: r.u64("messages size")?,
            streams_count: r.u32("streams count")?,
            topics_count: r.u32("topics count")?,
            partitions_count: r.u32("partitions count")?,
            segments_count: r.u32("segments count")?,
            messages_count: r.u64("messages count")?,
            clients_count: r.u32("clients count")?,
            consumer_groups_count: r.u32("consumer groups count")?,
            hostname: long_str(&mut r, "hostname")?,
            os_name: long_str(&mut r, "os name")?,
            os_version: long_str(&mut r, "os version")?,
            kernel_version: long_str(&mut r, "kernel version")?,
            server_version: long_str(&mut r, "server version")?,
            server_semver: None,
            cache_metrics: Vec::new(),
            threads_count: 0,
            free_disk_space: 0,
            total_disk_space: 0,
        };
        stats.server_semver = Some(r.u32("server semver")?).filter(|v| *v != 0);
        let count = r.u32("cache metrics count")? as usize;
        // Each entry is 32 bytes: a count past what the body holds fails below, never allocates.
        stats.cache_metrics = Vec::with_capacity(count.min(r.remaining() / 32));
        for _ in 0..count {
            stats.cache_metrics.push(CacheMetric {
                stream_id: r.u32("cache stream id")?,
                topic_id: r.u32("cache topic id")?,
                partition_id: r.u32("cache partition id")?,
                hits: r.u64("cache hits")?,
                misses: r.u64("cache misses")?,
                hit_ratio: f32::from_bits(r.u32("cache hit ratio")?),
            });
        }
        stats.threads_count = r.u32("threads count")?;
        stats.free_disk_space = r.u64("free disk space")?;
        stats.total_disk_space = r.u64("total disk space")?;
        r.finish("stats")?;
        Ok(stats)
    }
}

/// One client connection (`ClientResponse` of 0.11.0: 17 fixed bytes and the address).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientInfo {
    pub client_id: u32,
    pub user_id: u32,
    /// 1: TCP.
    pub transport: u8,
    pub address: String,
    pub consumer_groups_count: u32,
}

/// A consumer group a client is a member of (12 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientGroup {
    pub stream_id: u32,
    pub topic_id: u32,
    pub group_id: u32,
}

impl ClientInfo {
    pub fn put(&self, out: &mut Vec<u8>) {
        out.put_u32(self.client_id);
        out.put_u32(self.user_id);
        out.put_u8(self.transport);
        out.put_long_str(&self.address);
        out.put_u32(self.consumer_groups_count);
    }

    pub fn read(r: &mut Reader<'_>) -> Result<Self, WireError> {
        let client_id = r.u32("client id")?;
        let user_id = r.u32("user id")?;
        let transport = r.u8("transport")?;
        let len = r.u32("address length")? as usize;
        Ok(Self {
            client_id,
            user_id,
            transport,
            address: r.str(len, "address")?.to_owned(),
            consumer_groups_count: r.u32("consumer groups count")?,
        })
    }
}

/// `GetMe` and `GetClient`: the client, then its `consumer_groups_count` groups. `GetClient` of
/// an unknown id answers an empty body.
pub fn put_client_details(out: &mut Vec<u8>, client: &ClientInfo, groups: &[ClientGroup]) {
    client.put(out);
    for group in groups {
        out.put_u32(group.stream_id);
        out.put_u32(group.topic_id);
        out.put_u32(group.group_id);
    }
}

pub fn read_client_details(body: &[u8]) -> Result<(ClientInfo, Vec<ClientGroup>), WireError> {
    let mut r = Reader::new(body);
    let client = ClientInfo::read(&mut r)?;
    let count = client.consumer_groups_count as usize;
    let mut groups = Vec::with_capacity(count.min(r.remaining() / 12));
    for _ in 0..count {
        groups.push(ClientGroup {
            stream_id: r.u32("group stream id")?,
            topic_id: r.u32("group topic id")?,
            group_id: r.u32("group id")?,
        });
    }
    r.finish("client")?;
    Ok((client, groups))
}

/// `GetClients`: the clients one after another, no count.
pub fn put_clients(out: &mut Vec<u8>, clients: &[ClientInfo]) {
    for client in clients {
        client.put(out);
    }
}

pub fn read_clients(body: &[u8]) -> Result<Vec<ClientInfo>, WireError> {
    let mut r = Reader::new(body);
    let mut clients = Vec::new();
    while r.remaining() > 0 {
        clients.push(ClientInfo::read(&mut r)?);
    }
    Ok(clients)
}

/// One option key a create accepts (`DescribeOptions`, 13): the key, its value kind (the
/// options block's kind codes), its default as that kind's bytes, and what it does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptionDescriptor {
    pub key: String,
    pub kind: u8,
    pub default_value: Vec<u8>,
    pub description: String,
}

/// `DescribeOptions`: a u32 count, then each descriptor (the key as a name, the kind, the
/// u32-prefixed default and description).
pub fn put_option_descriptors(out: &mut Vec<u8>, descriptors: &[OptionDescriptor]) {
    out.put_u32(len_u32(descriptors.len()));
    for d in descriptors {
        put_name(out, &d.key);
        out.put_u8(d.kind);
        out.put_u32(len_u32(d.default_value.len()));
        out.put_bytes(&d.default_value);
        out.put_long_str(&d.description);
    }
}

pub fn read_option_descriptors(body: &[u8]) -> Result<Vec<OptionDescriptor>, WireError> {
    let mut r = Reader::new(body);
    let count = r.u32("descriptors count")? as usize;
    let mut out = Vec::with_capacity(count.min(r.remaining() / 10));
    for _ in 0..count {
        let key = read_name(&mut r, "option key")?;
        let kind = r.u8("option kind")?;
        let len = r.u32("default length")? as usize;
        let default_value = r.bytes(len, "default value")?.to_vec();
        let len = r.u32("description length")? as usize;
        let description = r.str(len, "description")?.to_owned();
        out.push(OptionDescriptor {
            key,
            kind,
            default_value,
            description,
        });
    }
    r.finish("descriptors")?;
    Ok(out)
}

/// A consumer group as `GetConsumerGroups` lists it (`ConsumerGroupResponse` of 0.11.0: 12
/// fixed bytes and the name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerGroupInfo {
    /// 0-based on the wire.
    pub id: u32,
    pub partitions_count: u32,
    pub members_count: u32,
    pub name: String,
}

impl ConsumerGroupInfo {
    pub fn put(&self, out: &mut Vec<u8>) {
        out.put_u32(self.id);
        out.put_u32(self.partitions_count);
        out.put_u32(self.members_count);
        put_name(out, &self.name);
    }

    pub fn read(r: &mut Reader<'_>) -> Result<Self, WireError> {
        Ok(Self {
            id: r.u32("consumer group id")?,
            partitions_count: r.u32("partitions count")?,
            members_count: r.u32("members count")?,
            name: read_name(r, "consumer group name")?,
        })
    }
}

/// One member of a group and the partitions it holds (`ConsumerGroupMemberResponse`: id, count,
/// the 0-based partition ids).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMemberInfo {
    pub id: u32,
    pub partitions: Vec<u32>,
}

/// `GetConsumerGroups`: the groups one after another, no count.
pub fn put_consumer_groups(out: &mut Vec<u8>, groups: &[ConsumerGroupInfo]) {
    for group in groups {
        group.put(out);
    }
}

pub fn read_consumer_groups(body: &[u8]) -> Result<Vec<ConsumerGroupInfo>, WireError> {
    let mut r = Reader::new(body);
    let mut groups = Vec::new();
    while r.remaining() > 0 {
        groups.push(ConsumerGroupInfo::read(&mut r)?);
    }
    Ok(groups)
}

/// `GetConsumerGroup` and `CreateConsumerGroup`'s payload: the group, then its
/// `members_count` members. `GetConsumerGroup` of an unknown group answers an empty body.
pub fn put_consumer_group_details(
    out: &mut Vec<u8>,
    group: &ConsumerGroupInfo,
    members: &[GroupMemberInfo],
) {
    group.put(out);
    for member in members {
        out.put_u32(member.id);
        out.put_u32(len_u32(member.partitions.len()));
        for partition in &member.partitions {
            out.put_u32(*partition);
        }
    }
}

pub fn read_consumer_group_details(
    body: &[u8],
) -> Result<(ConsumerGroupInfo, Vec<GroupMemberInfo>), WireError> {
    let mut r = Reader::new(body);
    let group = ConsumerGroupInfo::read(&mut r)?;
    let mut members = Vec::new();
    for _ in 0..group.members_count {
        let id = r.u32("member id")?;
        let count = r.u32("member partitions count")? as usize;
        let mut partitions = Vec::with_capacity(count.min(r.remaining() / 4));
        for _ in 0..count {
            partitions.push(r.u32("member partition id")?);
        }
        members.push(GroupMemberInfo { id, partitions });
    }
    r.finish("consumer group")?;
    Ok((group, members))
}

/// `SyncConsumerGroup`: the group's generation and the asking member's partitions (0-based).
/// A session that is not a member gets an empty body.
pub fn put_group_assignment(out: &mut Vec<u8>, generation: u64, partitions: &[u32]) {
    out.put_u64(generation);
    out.put_u32(len_u32(partitions.len()));
    for partition in partitions {
        out.put_u32(*partition);
    }
}

pub fn read_group_assignment(body: &[u8]) -> Result<Option<(u64, Vec<u32>)>, WireError> {
    if body.is_empty() {
        return Ok(None);
    }
    let mut r = Reader::new(body);
    let generation = r.u64("generation")?;
    let count = r.u32("partitions count")? as usize;
    let mut partitions = Vec::with_capacity(count.min(r.remaining() / 4));
    for _ in 0..count {
        partitions.push(r.u32("partition id")?);
    }
    r.finish("assignment")?;
    Ok(Some((generation, partitions)))
}

/// A user as `GetUsers` lists it (`UserResponse` of 0.11.0: id, created at, status, name, the
/// u32-prefixed options block).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserInfo {
    pub id: u32,
    pub created_at: u64,
    /// 1 active, 2 inactive.
    pub status: u8,
    pub username: String,
    pub options: Vec<OptionEntry>,
}

impl UserInfo {
    pub fn put(&self, out: &mut Vec<u8>) {
        out.put_u32(self.id);
        out.put_u64(self.created_at);
        out.put_u8(self.status);
        put_name(out, &self.username);
        put_options_prefixed(out, &self.options);
    }

    pub fn read(r: &mut Reader<'_>) -> Result<Self, WireError> {
        Ok(Self {
            id: r.u32("user id")?,
            created_at: r.u64("created at")?,
            status: r.u8("user status")?,
            username: read_name(r, "username")?,
            options: read_prefixed_options(r)?,
        })
    }
}

/// `GetUsers`: the users one after another, no count.
pub fn put_users(out: &mut Vec<u8>, users: &[UserInfo]) {
    for user in users {
        user.put(out);
    }
}

pub fn read_users(body: &[u8]) -> Result<Vec<UserInfo>, WireError> {
    let mut r = Reader::new(body);
    let mut users = Vec::new();
    while r.remaining() > 0 {
        users.push(UserInfo::read(&mut r)?);
    }
    Ok(users)
}

/// `GetUser`: the user, then its permissions as `1`, a u32 length and the encoding, or four
/// zero bytes for none (the reply's form, unlike a request's single `0`). An unknown user is an
/// empty body.
pub fn put_user_details(
    out: &mut Vec<u8>,
    user: &UserInfo,
    permissions: Option<&crate::permissions::Permissions>,
) {
    user.put(out);
    match permissions {
        Some(_) => crate::permissions::put_optional(out, permissions),
        None => out.put_u32(0),
    }
}

pub fn read_user_details(
    body: &[u8],
) -> Result<(UserInfo, Option<crate::permissions::Permissions>), WireError> {
    let mut r = Reader::new(body);
    let user = UserInfo::read(&mut r)?;
    let permissions = if body.get(r.position()) == Some(&0) {
        let at = r.position();
        if r.u32("no permissions")? != 0 {
            return Err(r.invalid("no permissions", at, "not four zero bytes".into()));
        }
        None
    } else {
        crate::permissions::read_optional(&mut r)?
    };
    r.finish("user")?;
    Ok((user, permissions))
}

/// `CreatePersonalAccessToken`'s payload: the token, as a u8-long name (shown once).
pub fn put_raw_token(out: &mut Vec<u8>, token: &str) {
    put_name(out, token);
}

pub fn read_raw_token(body: &[u8]) -> Result<String, WireError> {
    let mut r = Reader::new(body);
    let token = read_name(&mut r, "token")?;
    r.finish("token")?;
    Ok(token)
}

/// `GetPersonalAccessTokens`: each token's name and when it expires (µs since the epoch; 0:
/// never), one after another.
pub fn put_tokens(out: &mut Vec<u8>, tokens: &[(String, u64)]) {
    for (name, expiry_at) in tokens {
        put_name(out, name);
        out.put_u64(*expiry_at);
    }
}

pub fn read_tokens(body: &[u8]) -> Result<Vec<(String, u64)>, WireError> {
    let mut r = Reader::new(body);
    let mut tokens = Vec::new();
    while r.remaining() > 0 {
        tokens.push((read_name(&mut r, "token name")?, r.u64("token expiry")?));
    }
    Ok(tokens)
}
