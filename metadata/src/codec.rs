//! The metadata state's encoding inside `snapshot.bin` (payload version 4: consumer groups keep
//! their members, the state its users and tokens, creates their times; 3: sessions keep their
//! request checksum; 2: sessions keep their reply bytes), the encoding of ops as WAL entry
//! bodies, and of replies. Little-endian,
//! fixed-width integers; strings as a u16 length and UTF-8 bytes; collections as a u32 count
//! and their elements in id order (see `docs/format.md`, "Metadata payload").
//!
//! Decoding never trusts a count: before a collection is read, its count times the smallest
//! possible element must fit in the bytes left, so no untrusted length allocates. It refuses
//! unknown versions, trailing bytes, invalid names, duplicate or unordered ids, id counters
//! not past every id, and leaders outside the cluster, each with the offset where it failed.

use std::collections::BTreeMap;

use crate::{
    Applied, ApplyError, ClientSession, ConsumerGroup, Durability, Member, NAME_BYTES_MAX,
    PERMISSIONS_BYTES_MAX, Partition, REPLY_BYTES_MAX, Retention, State, Stream, Topic, User,
};

/// The payload version this build writes (it reads it; version 4, whose topics lack
/// `next_partition_id` (their partitions' ids run 1 to the count); version 3, whose consumer
/// groups also lack members; and version 2, whose client sessions also lack the request
/// checksum).
pub const PAYLOAD_VERSION: u16 = 5;

/// Why bytes are not a valid metadata payload.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("unknown metadata payload version {0} (this build reads 2 to {PAYLOAD_VERSION})")]
    UnknownVersion(u16),
    #[error("at byte {offset}: {reason}")]
    Invalid { offset: usize, reason: String },
}

struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, value: u8) {
        self.0.push(value);
    }
    fn u16(&mut self, value: u16) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }
    fn u32(&mut self, value: u32) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }
    fn u64(&mut self, value: u64) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }
    fn u128(&mut self, value: u128) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }
    fn count(&mut self, len: usize) {
        self.u32(u32::try_from(len).unwrap_or_else(|_| panic!("{len} elements exceed u32")));
    }
    /// At most [`REPLY_BYTES_MAX`] bytes, with a u16 length.
    fn bytes(&mut self, bytes: &[u8]) {
        assert!(bytes.len() <= REPLY_BYTES_MAX, "a reply is bounded");
        self.u16(u16::try_from(bytes.len()).unwrap_or(u16::MAX));
        self.0.extend_from_slice(bytes);
    }
    /// At most [`PERMISSIONS_BYTES_MAX`] bytes, with a u32 length.
    fn blob(&mut self, bytes: &[u8]) {
        assert!(bytes.len() <= PERMISSIONS_BYTES_MAX, "a blob is bounded");
        self.count(bytes.len());
        self.0.extend_from_slice(bytes);
    }
    fn optional_blob(&mut self, bytes: Option<&[u8]>) {
        match bytes {
            Some(bytes) => {
                self.u8(1);
                self.blob(bytes);
            }
            None => self.u8(0),
        }
    }
    fn name(&mut self, name: &str) {
        assert!(
            name.len() <= NAME_BYTES_MAX,
            "a state holds only valid names"
        );
        self.u16(u16::try_from(name.len()).unwrap_or(u16::MAX));
        self.0.extend_from_slice(name.as_bytes());
    }
}

/// Encodes `state` as payload version [`PAYLOAD_VERSION`].
#[must_use]
pub fn encode(state: &State) -> Vec<u8> {
    let mut w = Writer(Vec::new());
    w.u8(state.replica_count);
    w.u32(state.next_stream_id);
    w.count(state.streams.len());
    for stream in state.streams.values() {
        w.u32(stream.id);
        w.name(&stream.name);
        w.u64(stream.created_at);
        w.u32(stream.next_topic_id);
        w.count(stream.topics.len());
        for topic in stream.topics.values() {
            w.u32(topic.id);
            w.name(&topic.name);
            w.u64(topic.created_at);
            w.u8(match topic.durability {
                Durability::Replicated => 1,
                Durability::Persisted => 2,
            });
            w.u64(topic.segment_size_bytes);
            w.u64(topic.retention.max_age_seconds);
            w.u64(topic.retention.max_bytes);
            w.u8(topic.replication_factor);
            w.count(topic.partitions.len());
            for partition in &topic.partitions {
                w.u32(partition.id);
                w.u8(partition.leader);
                w.u64(partition.floor);
            }
            w.u32(topic.next_partition_id);
            w.u32(topic.next_group_id);
            w.count(topic.groups.len());
            for group in topic.groups.values() {
                w.u32(group.id);
                w.name(&group.name);
                w.u64(group.generation);
                w.u32(group.next_member_id);
                w.count(group.members.len());
                for (id, member) in &group.members {
                    w.u32(*id);
                    w.u128(member.session);
                    w.u8(member.node);
                    w.u64(member.boot);
                }
            }
        }
    }
    w.count(state.clients.len());
    for (client, session) in &state.clients {
        w.u128(*client);
        w.u64(session.session);
        w.u64(session.last_request);
        w.u64(session.last_op);
        w.bytes(&session.reply);
        w.u128(session.request_checksum);
    }
    w.u32(state.next_user_id);
    w.count(state.users.len());
    for user in state.users.values() {
        w.u32(user.id);
        w.name(&user.username);
        w.u64(user.created_at);
        w.name(&user.password_hash);
        w.u8(user.status);
        w.optional_blob(user.permissions.as_deref());
    }
    w.count(state.tokens.len());
    for ((user, name), token) in &state.tokens {
        w.u32(*user);
        w.name(name);
        w.name(&token.hash);
        w.u64(token.expiry_at);
    }
    w.0
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn fail<T>(&self, reason: impl Into<String>) -> Result<T, DecodeError> {
        Err(DecodeError::Invalid {
            offset: self.at,
            reason: reason.into(),
        })
    }

    fn take(&mut self, len: usize) -> Result<&'a [u8], DecodeError> {
        let Some(bytes) = self
            .at
            .checked_add(len)
            .and_then(|end| self.bytes.get(self.at..end))
        else {
            return self.fail(format!(
                "{len} bytes needed, {} left",
                self.bytes.len() - self.at
            ));
        };
        self.at += len;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let bytes = self.take(N)?;
        Ok(bytes.try_into().unwrap_or([0; N]))
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, DecodeError> {
        self.array().map(u16::from_le_bytes)
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        self.array().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Result<u64, DecodeError> {
        self.array().map(u64::from_le_bytes)
    }
    fn u128(&mut self) -> Result<u128, DecodeError> {
        self.array().map(u128::from_le_bytes)
    }

    /// A collection count, refused if `count` elements of at least `min_bytes` cannot fit.
    fn count(&mut self, min_bytes: usize, max: usize) -> Result<usize, DecodeError> {
        let count = self.u32()? as usize;
        let left = self.bytes.len() - self.at;
        if count > max || count.saturating_mul(min_bytes) > left {
            return self.fail(format!(
                "count {count} cannot fit in {left} bytes (limit {max})"
            ));
        }
        Ok(count)
    }

    fn bytes(&mut self) -> Result<Vec<u8>, DecodeError> {
        let len = usize::from(self.u16()?);
        if len > REPLY_BYTES_MAX {
            return self.fail(format!(
                "a reply of {len} bytes (at most {REPLY_BYTES_MAX})"
            ));
        }
        Ok(self.take(len)?.to_vec())
    }

    fn blob(&mut self) -> Result<Vec<u8>, DecodeError> {
        let len = self.u32()? as usize;
        if len > PERMISSIONS_BYTES_MAX {
            return self.fail(format!(
                "a blob of {len} bytes (at most {PERMISSIONS_BYTES_MAX})"
            ));
        }
        Ok(self.take(len)?.to_vec())
    }

    fn optional_blob(&mut self) -> Result<Option<Vec<u8>>, DecodeError> {
        match self.u8()? {
            0 => Ok(None),
            1 => self.blob().map(Some),
            other => self.fail(format!("optional flag {other}")),
        }
    }

    fn optional_name(&mut self) -> Result<Option<String>, DecodeError> {
        match self.u8()? {
            0 => Ok(None),
            1 => self.name().map(Some),
            other => self.fail(format!("optional flag {other}")),
        }
    }

    fn name(&mut self) -> Result<String, DecodeError> {
        let len = usize::from(self.u16()?);
        if len == 0 || len > NAME_BYTES_MAX {
            return self.fail(format!("name of {len} bytes"));
        }
        let bytes = self.take(len)?;
        match std::str::from_utf8(bytes) {
            Ok(name) => Ok(name.to_string()),
            Err(_) => self.fail("name is not UTF-8"),
        }
    }
}

/// Inserts `value` at `id`, refusing ids that repeat or go backwards.
fn insert_ordered<T>(
    reader: &Reader<'_>,
    map: &mut BTreeMap<u32, T>,
    id: u32,
    value: T,
) -> Result<(), DecodeError> {
    if map.last_key_value().is_some_and(|(last, _)| *last >= id) {
        return reader.fail(format!("id {id} out of order or repeated"));
    }
    map.insert(id, value);
    Ok(())
}

/// Decodes a payload of `version`.
pub fn decode(version: u16, bytes: &[u8]) -> Result<State, DecodeError> {
    if !(2..=PAYLOAD_VERSION).contains(&version) {
        return Err(DecodeError::UnknownVersion(version));
    }
    let mut r = Reader { bytes, at: 0 };
    let replica_count = r.u8()?;
    if replica_count == 0 {
        return r.fail("replica_count 0");
    }
    let mut state = State::new(replica_count);
    state.next_stream_id = r.u32()?;
    let stamped = version >= 4;
    let stream_count = r.count(if stamped { 23 } else { 15 }, crate::STREAMS_MAX)?;
    for _ in 0..stream_count {
        let id = r.u32()?;
        let name = r.name()?;
        let created_at = if stamped { r.u64()? } else { 0 };
        let next_topic_id = r.u32()?;
        let mut topics = BTreeMap::new();
        // A topic's least bytes: version 4 stamped its creation, version 5 its next partition id.
        let topic_bytes = match version {
            5.. => 57,
            4 => 53,
            _ => 45,
        };
        for _ in 0..r.count(topic_bytes, crate::TOPICS_PER_STREAM_MAX)? {
            let topic = decode_topic(&mut r, replica_count, version)?;
            insert_ordered(&r, &mut topics, topic.id, topic)?;
        }
        if topics
            .last_key_value()
            .is_some_and(|(last, _)| *last >= next_topic_id)
        {
            return r.fail("next_topic_id not past every topic id");
        }
        state.partition_count += topics.values().map(|t| t.partitions.len()).sum::<usize>();
        for topic in topics.values() {
            state.count_primaries(&topic.partitions, true);
        }
        insert_ordered(
            &r,
            &mut state.streams,
            id,
            Stream {
                id,
                name,
                created_at,
                topics,
                next_topic_id,
            },
        )?;
    }
    if state
        .streams
        .last_key_value()
        .is_some_and(|(last, _)| *last >= state.next_stream_id)
    {
        return r.fail("next_stream_id not past every stream id");
    }
    if state.partition_count > crate::PARTITIONS_MAX {
        return r.fail("more partitions than the limit");
    }
    let mut last_client = None;
    let client_bytes = if version >= 3 { 58 } else { 42 };
    for _ in 0..r.count(client_bytes, crate::CLIENTS_MAX)? {
        let client = r.u128()?;
        if last_client.is_some_and(|last| last >= client) {
            return r.fail("client ids out of order or repeated");
        }
        last_client = Some(client);
        let session = ClientSession {
            session: r.u64()?,
            last_request: r.u64()?,
            last_op: r.u64()?,
            reply: r.bytes()?,
            request_checksum: if version >= 3 { r.u128()? } else { 0 },
        };
        state.clients.insert(client, session);
    }
    if version >= 4 {
        state.next_user_id = r.u32()?;
        for _ in 0..r.count(20, crate::USERS_MAX)? {
            let user = User {
                id: r.u32()?,
                username: r.name()?,
                created_at: r.u64()?,
                password_hash: r.name()?,
                status: r.u8()?,
                permissions: r.optional_blob()?,
            };
            if !(1..=2).contains(&user.status) || user.id == 0 {
                return r.fail(format!("user {} (status {})", user.id, user.status));
            }
            let id = user.id;
            insert_ordered(&r, &mut state.users, id, user)?;
        }
        if state
            .users
            .last_key_value()
            .is_some_and(|(last, _)| *last >= state.next_user_id)
        {
            return r.fail("next_user_id not past every user id");
        }
        let mut last: Option<(u32, String)> = None;
        for _ in 0..r.count(18, crate::USERS_MAX * crate::TOKENS_PER_USER_MAX)? {
            let key = (r.u32()?, r.name()?);
            let token = crate::Token {
                hash: r.name()?,
                expiry_at: r.u64()?,
            };
            if last.as_ref().is_some_and(|last| *last >= key) {
                return r.fail("tokens out of order or repeated");
            }
            if key.0 != 0 && !state.users.contains_key(&key.0) {
                return r.fail(format!("a token of user {}, who does not exist", key.0));
            }
            last = Some(key.clone());
            state.tokens.insert(key, token);
        }
    }
    if r.at != bytes.len() {
        return r.fail(format!("{} trailing bytes", bytes.len() - r.at));
    }
    Ok(state)
}

fn decode_topic(r: &mut Reader<'_>, replica_count: u8, version: u16) -> Result<Topic, DecodeError> {
    let id = r.u32()?;
    let name = r.name()?;
    let created_at = if version >= 4 { r.u64()? } else { 0 };
    let durability = match r.u8()? {
        1 => Durability::Replicated,
        2 => Durability::Persisted,
        other => return r.fail(format!("durability {other}")),
    };
    let segment_size_bytes = r.u64()?;
    let retention = Retention {
        max_age_seconds: r.u64()?,
        max_bytes: r.u64()?,
    };
    let replication_factor = r.u8()?;
    if segment_size_bytes == 0 || replication_factor == 0 || replication_factor > replica_count {
        return r.fail("segment size 0 or replication factor outside the cluster");
    }
    let partition_count = r.count(
        if version >= 5 { 13 } else { 5 },
        crate::PARTITIONS_PER_TOPIC_MAX as usize,
    )?;
    let mut partitions = Vec::with_capacity(partition_count);
    for index in 0..partition_count {
        let partition = Partition {
            id: r.u32()?,
            leader: r.u8()?,
            floor: if version >= 5 { r.u64()? } else { 0 },
        };
        // Before version 5 the ids ran 1 to the count; since, they only grow along the list.
        let in_order = if version >= 5 {
            partitions
                .last()
                .map_or(partition.id >= 1, |last: &Partition| partition.id > last.id)
        } else {
            partition.id as usize == index + 1
        };
        if !in_order || partition.leader >= replica_count {
            return r.fail(format!(
                "partition {} (leader {})",
                partition.id, partition.leader
            ));
        }
        partitions.push(partition);
    }
    let next_partition_id = if version >= 5 {
        let next = r.u32()?;
        if partitions.last().is_some_and(|last| last.id >= next) || next == 0 {
            return r.fail(format!(
                "next_partition_id {next} not past every partition id"
            ));
        }
        next
    } else {
        u32::try_from(partition_count).unwrap_or(u32::MAX) + 1
    };
    let next_group_id = r.u32()?;
    let mut groups = BTreeMap::new();
    let group_bytes = if version >= 4 { 23 } else { 7 };
    for _ in 0..r.count(group_bytes, crate::GROUPS_PER_TOPIC_MAX)? {
        let mut group = ConsumerGroup::new(r.u32()?, r.name()?);
        if version >= 4 {
            group.generation = r.u64()?;
            group.next_member_id = r.u32()?;
            for _ in 0..r.count(29, crate::MEMBERS_PER_GROUP_MAX)? {
                let id = r.u32()?;
                let member = Member {
                    session: r.u128()?,
                    node: r.u8()?,
                    boot: r.u64()?,
                };
                if member.node >= replica_count {
                    return r.fail(format!("member {id} joined through node {}", member.node));
                }
                insert_ordered(r, &mut group.members, id, member)?;
            }
            if group
                .members
                .last_key_value()
                .is_some_and(|(last, _)| *last >= group.next_member_id)
            {
                return r.fail("next_member_id not past every member id");
            }
        }
        insert_ordered(r, &mut groups, group.id, group)?;
    }
    if groups
        .last_key_value()
        .is_some_and(|(last, _)| *last >= next_group_id)
    {
        return r.fail("next_group_id not past every group id");
    }
    Ok(Topic {
        id,
        name,
        created_at,
        durability,
        segment_size_bytes,
        retention,
        replication_factor,
        partitions,
        next_partition_id,
        groups,
        next_group_id,
    })
}

/// Encodes an op as a metadata WAL entry body (tag u8, then its fields as in the state). An op
/// whose name the log cannot hold (empty, or over 255 bytes) is refused before it is logged.
pub fn encode_op(op: &crate::Op) -> Result<Vec<u8>, crate::ApplyError> {
    use crate::Op;
    let name = match op {
        Op::CreateStream { name }
        | Op::UpdateStream { name, .. }
        | Op::UpdateTopic { name, .. }
        | Op::CreateTopic { name, .. }
        | Op::CreateConsumerGroup { name, .. }
        | Op::CreateUser { username: name, .. }
        | Op::UpdateUser {
            username: Some(name),
            ..
        }
        | Op::ChangePassword {
            password_hash: name,
            ..
        }
        | Op::CreateToken { name, .. }
        | Op::DeleteToken { name, .. } => Some(name),
        _ => None,
    };
    if let Op::CreateUser { password_hash, .. } = op
        && (password_hash.is_empty() || password_hash.len() > NAME_BYTES_MAX)
    {
        return Err(crate::ApplyError::NameLength {
            len: password_hash.len(),
        });
    }
    if let Op::CreateUser {
        permissions: Some(p),
        ..
    }
    | Op::UpdatePermissions {
        permissions: Some(p),
        ..
    } = op
        && p.len() > PERMISSIONS_BYTES_MAX
    {
        return Err(crate::ApplyError::Limit {
            what: "bytes of a user's permissions",
            max: PERMISSIONS_BYTES_MAX,
        });
    }
    if let Some(name) = name
        && (name.is_empty() || name.len() > NAME_BYTES_MAX)
    {
        return Err(crate::ApplyError::NameLength { len: name.len() });
    }
    let mut w = Writer(Vec::new());
    match op {
        Op::CreateStream { name } => {
            w.u8(1);
            w.name(name);
        }
        Op::DeleteStream { stream } => {
            w.u8(2);
            w.u32(*stream);
        }
        Op::CreateTopic {
            stream,
            name,
            partitions,
            durability,
            segment_size_bytes,
            retention,
            replication_factor,
        } => {
            w.u8(3);
            w.u32(*stream);
            w.name(name);
            w.u32(*partitions);
            w.u8(match durability {
                Durability::Replicated => 1,
                Durability::Persisted => 2,
            });
            w.u64(*segment_size_bytes);
            w.u64(retention.max_age_seconds);
            w.u64(retention.max_bytes);
            w.u8(*replication_factor);
        }
        Op::DeleteTopic { stream, topic } => {
            w.u8(4);
            w.u32(*stream);
            w.u32(*topic);
        }
        Op::CreatePartitions {
            stream,
            topic,
            count,
        } => {
            w.u8(5);
            w.u32(*stream);
            w.u32(*topic);
            w.u32(*count);
        }
        Op::CreateConsumerGroup {
            stream,
            topic,
            name,
        } => {
            w.u8(6);
            w.u32(*stream);
            w.u32(*topic);
            w.name(name);
        }
        Op::DeleteConsumerGroup {
            stream,
            topic,
            group,
        } => {
            w.u8(7);
            w.u32(*stream);
            w.u32(*topic);
            w.u32(*group);
        }
        Op::RegisterClient { client, session } => {
            w.u8(8);
            w.u128(*client);
            w.u64(*session);
        }
        Op::UpdateStream { stream, name } => {
            w.u8(9);
            w.u32(*stream);
            w.name(name);
        }
        Op::UpdateTopic {
            stream,
            topic,
            name,
            retention,
        } => {
            w.u8(10);
            w.u32(*stream);
            w.u32(*topic);
            w.name(name);
            w.u64(retention.max_age_seconds);
            w.u64(retention.max_bytes);
        }
        Op::JoinConsumerGroup {
            stream,
            topic,
            group,
            member,
            node,
            boot,
        } => {
            w.u8(11);
            w.u32(*stream);
            w.u32(*topic);
            w.u32(*group);
            w.u128(*member);
            w.u8(*node);
            w.u64(*boot);
        }
        Op::LeaveConsumerGroup {
            stream,
            topic,
            group,
            member,
        } => {
            w.u8(12);
            w.u32(*stream);
            w.u32(*topic);
            w.u32(*group);
            w.u128(*member);
        }
        Op::LeaveGroups { member } => {
            w.u8(13);
            w.u128(*member);
        }
        Op::DropNodeMembers { node, boot_before } => {
            w.u8(14);
            w.u8(*node);
            w.u64(*boot_before);
        }
        Op::CreateUser {
            username,
            password_hash,
            status,
            permissions,
        } => {
            w.u8(15);
            w.name(username);
            w.name(password_hash);
            w.u8(*status);
            w.optional_blob(permissions.as_deref());
        }
        Op::DeleteUser { user } => {
            w.u8(16);
            w.u32(*user);
        }
        Op::UpdateUser {
            user,
            username,
            status,
        } => {
            w.u8(17);
            w.u32(*user);
            match username {
                Some(name) => {
                    w.u8(1);
                    w.name(name);
                }
                None => w.u8(0),
            }
            match status {
                Some(status) => {
                    w.u8(1);
                    w.u8(*status);
                }
                None => w.u8(0),
            }
        }
        Op::UpdatePermissions { user, permissions } => {
            w.u8(18);
            w.u32(*user);
            w.optional_blob(permissions.as_deref());
        }
        Op::ChangePassword {
            user,
            password_hash,
        } => {
            w.u8(19);
            w.u32(*user);
            w.name(password_hash);
        }
        Op::CreateToken {
            user,
            name,
            hash,
            expiry_at,
        } => {
            if hash.is_empty() || hash.len() > NAME_BYTES_MAX {
                return Err(crate::ApplyError::NameLength { len: hash.len() });
            }
            w.u8(20);
            w.u32(*user);
            w.name(name);
            w.name(hash);
            w.u64(*expiry_at);
        }
        Op::DeleteToken { user, name } => {
            w.u8(21);
            w.u32(*user);
            w.name(name);
        }
        Op::DeletePartitions {
            stream,
            topic,
            count,
        } => {
            w.u8(22);
            w.u32(*stream);
            w.u32(*topic);
            w.u32(*count);
        }
        Op::PurgeTopic { stream, topic } => {
            w.u8(23);
            w.u32(*stream);
            w.u32(*topic);
        }
        Op::PurgeStream { stream } => {
            w.u8(24);
            w.u32(*stream);
        }
        Op::DeleteSegments {
            stream,
            topic,
            partition,
            below,
        } => {
            w.u8(25);
            w.u32(*stream);
            w.u32(*topic);
            w.u32(*partition);
            w.u64(*below);
        }
    }
    Ok(w.0)
}

/// Decodes a metadata WAL entry body; refuses unknown tags and trailing bytes.
pub fn decode_op(bytes: &[u8]) -> Result<crate::Op, DecodeError> {
    use crate::Op;
    let mut r = Reader { bytes, at: 0 };
    let op = match r.u8()? {
        1 => Op::CreateStream { name: r.name()? },
        2 => Op::DeleteStream { stream: r.u32()? },
        3 => Op::CreateTopic {
            stream: r.u32()?,
            name: r.name()?,
            partitions: r.u32()?,
            durability: match r.u8()? {
                1 => Durability::Replicated,
                2 => Durability::Persisted,
                other => return r.fail(format!("durability {other}")),
            },
            segment_size_bytes: r.u64()?,
            retention: Retention {
                max_age_seconds: r.u64()?,
                max_bytes: r.u64()?,
            },
            replication_factor: r.u8()?,
        },
        4 => Op::DeleteTopic {
            stream: r.u32()?,
            topic: r.u32()?,
        },
        5 => Op::CreatePartitions {
            stream: r.u32()?,
            topic: r.u32()?,
            count: r.u32()?,
        },
        6 => Op::CreateConsumerGroup {
            stream: r.u32()?,
            topic: r.u32()?,
            name: r.name()?,
        },
        7 => Op::DeleteConsumerGroup {
            stream: r.u32()?,
            topic: r.u32()?,
            group: r.u32()?,
        },
        8 => Op::RegisterClient {
            client: r.u128()?,
            session: r.u64()?,
        },
        9 => Op::UpdateStream {
            stream: r.u32()?,
            name: r.name()?,
        },
        10 => Op::UpdateTopic {
            stream: r.u32()?,
            topic: r.u32()?,
            name: r.name()?,
            retention: Retention {
                max_age_seconds: r.u64()?,
                max_bytes: r.u64()?,
            },
        },
        11 => Op::JoinConsumerGroup {
            stream: r.u32()?,
            topic: r.u32()?,
            group: r.u32()?,
            member: r.u128()?,
            node: r.u8()?,
            boot: r.u64()?,
        },
        12 => Op::LeaveConsumerGroup {
            stream: r.u32()?,
            topic: r.u32()?,
            group: r.u32()?,
            member: r.u128()?,
        },
        13 => Op::LeaveGroups { member: r.u128()? },
        14 => Op::DropNodeMembers {
            node: r.u8()?,
            boot_before: r.u64()?,
        },
        15 => Op::CreateUser {
            username: r.name()?,
            password_hash: r.name()?,
            status: r.u8()?,
            permissions: r.optional_blob()?,
        },
        16 => Op::DeleteUser { user: r.u32()? },
        17 => Op::UpdateUser {
            user: r.u32()?,
            username: r.optional_name()?,
            status: match r.u8()? {
                0 => None,
                1 => Some(r.u8()?),
                other => return r.fail(format!("optional flag {other}")),
            },
        },
        18 => Op::UpdatePermissions {
            user: r.u32()?,
            permissions: r.optional_blob()?,
        },
        19 => Op::ChangePassword {
            user: r.u32()?,
            password_hash: r.name()?,
        },
        20 => Op::CreateToken {
            user: r.u32()?,
            name: r.name()?,
            hash: r.name()?,
            expiry_at: r.u64()?,
        },
        21 => Op::DeleteToken {
            user: r.u32()?,
            name: r.name()?,
        },
        22 => Op::DeletePartitions {
            stream: r.u32()?,
            topic: r.u32()?,
            count: r.u32()?,
        },
        23 => Op::PurgeTopic {
            stream: r.u32()?,
            topic: r.u32()?,
        },
        24 => Op::PurgeStream { stream: r.u32()? },
        25 => Op::DeleteSegments {
            stream: r.u32()?,
            topic: r.u32()?,
            partition: r.u32()?,
            below: r.u64()?,
        },
        tag => {
            return Err(DecodeError::Invalid {
                offset: 0,
                reason: format!("unknown op tag {tag}"),
            });
        }
    };
    if r.at != bytes.len() {
        return r.fail(format!("{} trailing bytes", bytes.len() - r.at));
    }
    Ok(op)
}

/// A reply as a client decodes it: what the op produced, or the refusal's code and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Applied(Applied),
    Refused { code: u8, message: String },
}

/// The code of a refusal in a reply.
fn error_code(error: &ApplyError) -> u8 {
    match error {
        ApplyError::NameLength { .. } => 1,
        ApplyError::DuplicateName { .. } => 2,
        ApplyError::UnknownStream(_) => 3,
        ApplyError::UnknownTopic(..) => 4,
        ApplyError::UnknownGroup(..) => 5,
        ApplyError::Limit { .. } => 6,
        ApplyError::ReplicationFactor { .. } => 7,
        ApplyError::SegmentSize => 8,
        ApplyError::StaleSession { .. } => 9,
        ApplyError::NoSession { .. } => 10,
        ApplyError::StaleRequest { .. } => 11,
        ApplyError::NotMember(..) => 12,
        ApplyError::UnknownUser(_) => 13,
        ApplyError::UserStatus(_) => 14,
        ApplyError::UnknownToken(..) => 15,
        ApplyError::PartitionCount { .. } => 16,
        ApplyError::UnknownPartition(..) => 17,
    }
}

/// Encodes an op's outcome as the reply a client gets (and a session keeps): `0` and the
/// result's tag and fields, or `1`, the refusal's code and its message (cut at a character
/// boundary to keep the reply within [`REPLY_BYTES_MAX`]).
#[must_use]
pub fn encode_reply(result: &Result<Applied, ApplyError>) -> Vec<u8> {
    let mut w = Writer(Vec::new());
    match result {
        Ok(applied) => {
            w.u8(0);
            match applied {
                Applied::Stream(id) => {
                    w.u8(1);
                    w.u32(*id);
                }
                Applied::Topic(id) => {
                    w.u8(2);
                    w.u32(*id);
                }
                Applied::Partitions { first, count } => {
                    w.u8(3);
                    w.u32(*first);
                    w.u32(*count);
                }
                Applied::Group(id) => {
                    w.u8(4);
                    w.u32(*id);
                }
                Applied::Deleted => w.u8(5),
                Applied::Client => w.u8(6),
                Applied::Left(count) => {
                    w.u8(7);
                    w.u32(*count);
                }
                Applied::User(id) => {
                    w.u8(8);
                    w.u32(*id);
                }
            }
        }
        Err(error) => {
            w.u8(1);
            w.u8(error_code(error));
            let message = error.to_string();
            let mut len = message.len().min(REPLY_BYTES_MAX - 4);
            while !message.is_char_boundary(len) {
                len -= 1;
            }
            w.u16(u16::try_from(len).unwrap_or(0));
            w.0.extend_from_slice(&message.as_bytes()[..len]);
        }
    }
    w.0
}

/// Decodes a reply; refuses unknown tags and trailing bytes.
pub fn decode_reply(bytes: &[u8]) -> Result<Reply, DecodeError> {
    let mut r = Reader { bytes, at: 0 };
    let reply = match r.u8()? {
        0 => Reply::Applied(match r.u8()? {
            1 => Applied::Stream(r.u32()?),
            2 => Applied::Topic(r.u32()?),
            3 => Applied::Partitions {
                first: r.u32()?,
                count: r.u32()?,
            },
            4 => Applied::Group(r.u32()?),
            5 => Applied::Deleted,
            6 => Applied::Client,
            7 => Applied::Left(r.u32()?),
            8 => Applied::User(r.u32()?),
            tag => return r.fail(format!("unknown reply tag {tag}")),
        }),
        1 => {
            let code = r.u8()?;
            let len = usize::from(r.u16()?);
            let message = match std::str::from_utf8(r.take(len)?) {
                Ok(message) => message.to_string(),
                Err(_) => return r.fail("message is not UTF-8"),
            };
            Reply::Refused { code, message }
        }
        tag => return r.fail(format!("unknown reply kind {tag}")),
    };
    if r.at != bytes.len() {
        return r.fail(format!("{} trailing bytes", bytes.len() - r.at));
    }
    Ok(reply)
}
