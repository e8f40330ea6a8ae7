//! The metadata state machine of a cluster: streams, topics (with their partitions and the
//! replica that leads each), consumer groups, and the client table that makes requests
//! at-most-once. Its state is what `snapshot.bin` holds ([`codec`]).
//!
//! Invariants:
//! - [`State::apply`] is deterministic: the same ops in the same order give the same state on
//!   every replica (ids are allocated in order; nothing reads a clock or a random source);
//! - an op that fails validation changes nothing;
//! - names are 1 to [`NAME_BYTES_MAX`] bytes and unique among their siblings; counts are bounded
//!   by the `*_MAX` constants, so a state (and its snapshot) has a bounded size;
//! - the client table keeps one session per client with its last request number and the bytes
//!   of its reply ([`State::execute`]); a request at or below the last is a duplicate, is not
//!   applied again, and the latest gets its original reply bytes; the table holds at most
//!   [`CLIENTS_MAX`] sessions and a registration past it evicts the least recently used one
//!   (the one whose last request is the oldest op), so registering never fails for room.

pub mod codec;
pub mod group;

use std::collections::BTreeMap;

pub const NAME_BYTES_MAX: usize = 255;
pub const STREAMS_MAX: usize = 100_000;
pub const TOPICS_PER_STREAM_MAX: usize = 10_000;
pub const PARTITIONS_PER_TOPIC_MAX: u32 = 100_000;
pub const PARTITIONS_MAX: usize = 1_000_000;
pub const GROUPS_PER_TOPIC_MAX: usize = 10_000;
/// Members of one consumer group (each is a client session).
pub const MEMBERS_PER_GROUP_MAX: usize = 1_000;
/// Users besides the root user (whom the configuration defines, id 0).
pub const USERS_MAX: usize = 10_000;
/// Personal access tokens of one user.
pub const TOKENS_PER_USER_MAX: usize = 100;
/// The largest encoding of a user's permissions the state keeps.
pub const PERMISSIONS_BYTES_MAX: usize = 65_535;
/// Sessions in the client table (each holds up to [`REPLY_BYTES_MAX`] of reply).
pub const CLIENTS_MAX: usize = 16_384;
/// The largest reply a session keeps (a metadata reply is an id or an error message).
pub const REPLY_BYTES_MAX: usize = 512;

/// How a topic's partitions make writes durable (see DESIGN §4, rule 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Durability {
    /// Acknowledged once the WAL queued the write; published on view change, checkpoint,
    /// durable write and clean shutdown.
    Replicated,
    /// Published before it is acknowledged.
    Persisted,
}

/// How long and how much a topic keeps (0: no limit).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Retention {
    pub max_age_seconds: u64,
    pub max_bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partition {
    pub id: u32,
    /// The replica that leads this partition's consensus group.
    pub leader: u8,
    /// Messages below this offset are deleted (`DeleteSegments`): every replica's retention
    /// deletes its settled segments that lie wholly below it (payload version 5; 0: none).
    pub floor: u64,
}

/// A member of a consumer group: a client session, and the node it joined through (a member
/// leaves when its session ends there, or when that node restarts or is gone).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Member {
    /// The session's client id (its id in the groups' client tables).
    pub session: u128,
    /// The node whose client port the session is connected to.
    pub node: u8,
    /// That node's boot stamp (its clock at start, µs): a restart drops members of older boots.
    pub boot: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerGroup {
    pub id: u32,
    pub name: String,
    /// Bumped by every change of who holds which partition (a join, a leave, new partitions):
    /// a member's assignment is current while the generation it read is.
    pub generation: u64,
    pub members: BTreeMap<u32, Member>,
    pub next_member_id: u32,
}

impl ConsumerGroup {
    #[must_use]
    pub fn new(id: u32, name: String) -> Self {
        Self {
            id,
            name,
            generation: 0,
            members: BTreeMap::new(),
            next_member_id: 1,
        }
    }

    /// The member id of `session`, if it is a member.
    #[must_use]
    pub fn member_of(&self, session: u128) -> Option<u32> {
        self.members
            .iter()
            .find(|(_, member)| member.session == session)
            .map(|(id, _)| *id)
    }

    /// Which partitions (ids 1 to `partitions`) each member holds: members in id order take
    /// the partitions round-robin (partition `i` goes to member `(i - 1) % members`), so every
    /// partition has exactly one holder while the group has a member, and the split is the
    /// same on every replica.
    #[must_use]
    pub fn assignment(&self, partitions: u32) -> BTreeMap<u32, Vec<u32>> {
        let ids: Vec<u32> = self.members.keys().copied().collect();
        let mut out: BTreeMap<u32, Vec<u32>> = ids.iter().map(|id| (*id, Vec::new())).collect();
        if ids.is_empty() {
            return out;
        }
        for partition in 1..=partitions {
            let holder = ids[(partition as usize - 1) % ids.len()];
            out.entry(holder).or_default().push(partition);
        }
        out
    }

    /// The partitions `member` holds (empty for a non-member): as [`ConsumerGroup::assignment`]
    /// splits them, the member at index `k` in id order holds `k + 1`, `k + 1 + members`, ...
    #[must_use]
    pub fn partitions_of(&self, member: u32, partitions: u32) -> Vec<u32> {
        let Some(index) = self.members.keys().position(|id| *id == member) else {
            return Vec::new();
        };
        let step = self.members.len();
        (1..=partitions).skip(index).step_by(step).collect()
    }

    /// The member that holds `partition` (1-based), as [`ConsumerGroup::assignment`] splits
    /// them; none while the group has no member. What a group poll's fence asks, without
    /// building the whole split.
    #[must_use]
    pub fn holder(&self, partition: u32) -> Option<u32> {
        let index = (partition.checked_sub(1)? as usize).checked_rem(self.members.len())?;
        self.members.keys().nth(index).copied()
    }

    /// Removes every member `leaves` selects; bumps the generation if any went.
    fn remove_members(&mut self, leaves: impl Fn(&Member) -> bool) -> usize {
        let before = self.members.len();
        self.members.retain(|_, member| !leaves(member));
        let removed = before - self.members.len();
        if removed > 0 {
            self.generation += 1;
        }
        removed
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topic {
    pub id: u32,
    pub name: String,
    /// When the create was prepared (the metadata primary's clock, µs since the epoch; 0: before
    /// payload version 4).
    pub created_at: u64,
    pub durability: Durability,
    pub segment_size_bytes: u64,
    pub retention: Retention,
    pub replication_factor: u8,
    /// In wire order: the wire's partition `n` (from 0) is `partitions[n]`. A partition's `id`
    /// names its directory and consensus group, and is never given again within the topic: a
    /// deleted or purged partition's group can never be mistaken for the one that follows it.
    pub partitions: Vec<Partition>,
    /// The id the next created partition gets (payload version 5; before it, partitions were
    /// never deleted and their ids ran 1 to the count).
    pub next_partition_id: u32,
    pub groups: BTreeMap<u32, ConsumerGroup>,
    pub next_group_id: u32,
}

impl Topic {
    /// The 1-based slot of the partition whose id is `id` (the wire's id plus one, what
    /// [`ConsumerGroup::assignment`] counts in); none if the topic no longer has it.
    #[must_use]
    pub fn slot_of(&self, id: u32) -> Option<u32> {
        // Ids only grow along the list (a create appends higher ones, a purge renumbers in order).
        let index = self.partitions.binary_search_by_key(&id, |p| p.id).ok()?;
        u32::try_from(index + 1).ok()
    }

    /// The partition in 1-based slot `slot`.
    #[must_use]
    pub fn at_slot(&self, slot: u32) -> Option<&Partition> {
        self.partitions
            .get(usize::try_from(slot.checked_sub(1)?).ok()?)
    }

    /// The partition whose id is `id`.
    #[must_use]
    pub fn partition(&self, id: u32) -> Option<&Partition> {
        self.at_slot(self.slot_of(id)?)
    }

    /// The ids the next `count` partitions get, refused past `u32::MAX`.
    fn next_ids(&self, count: u32) -> Result<std::ops::Range<u32>, ApplyError> {
        let first = self.next_partition_id;
        let end = first.checked_add(count).ok_or(ApplyError::Limit {
            what: "partition ids of a topic",
            max: u32::MAX as usize,
        })?;
        Ok(first..end)
    }

    /// The partition count changed: every group with members splits the partitions anew.
    fn resplit(&mut self) {
        for group in self.groups.values_mut() {
            if !group.members.is_empty() {
                group.generation += 1;
            }
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stream {
    pub id: u32,
    pub name: String,
    /// When the create was prepared (as [`Topic::created_at`]).
    pub created_at: u64,
    pub topics: BTreeMap<u32, Topic>,
    pub next_topic_id: u32,
}

/// A user of the client port (the root user is the configuration's, not the state's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub id: u32,
    pub username: String,
    /// When the create was prepared (as [`Topic::created_at`]).
    pub created_at: u64,
    /// The password's argon2id hash in PHC form, computed by the node that took the request
    /// (the op carries it, so every replica stores the same).
    pub password_hash: String,
    /// 1 active, 2 inactive (an inactive user cannot log in).
    pub status: u8,
    /// The permissions in the client wire's encoding (`iggy_protocol::permissions`), as the
    /// request carried them; none: no permissions.
    pub permissions: Option<Vec<u8>>,
}

/// A personal access token: what logs in is the secret whose SHA-256 this holds (the secret is
/// shown once, to the user who created it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Token {
    /// SHA-256 of the secret, in hex.
    pub hash: String,
    /// When it stops logging in (µs since the epoch, the creating node's clock); 0: never.
    pub expiry_at: u64,
}

/// One client's session in the client table.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ClientSession {
    pub session: u64,
    /// The request number of the last request executed (the registration's, at first: 0 on
    /// the Iggy wire).
    pub last_request: u64,
    /// The op that last executed a request of this session (its registration, at first): the
    /// least recently used session is evicted first.
    pub last_op: u64,
    /// The reply to the last request, as sent ([`codec::encode_reply`]).
    pub reply: Vec<u8>,
    /// The checksum of the last request as its prepare recorded it (0: unknown, a session
    /// read from a payload of version 2).
    pub request_checksum: u128,
}

/// Partitions as `(stream, topic, partition)`, in order.
pub type PartitionKeys = std::collections::BTreeSet<(u32, u32, u32)>;

/// The whole metadata state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct State {
    /// Replicas in the cluster: partition leaders are spread over them.
    pub replica_count: u8,
    pub streams: BTreeMap<u32, Stream>,
    pub next_stream_id: u32,
    pub clients: BTreeMap<u128, ClientSession>,
    /// Partitions across all topics (kept to bound the total).
    pub partition_count: usize,
    /// Partitions each replica leads (index: replica), kept to spread new ones.
    pub primaries: Vec<u32>,
    pub users: BTreeMap<u32, User>,
    pub next_user_id: u32,
    /// Personal access tokens by (user, name) (user 0: the root).
    pub tokens: BTreeMap<(u32, String), Token>,
}

/// A metadata operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    CreateStream {
        name: String,
    },
    DeleteStream {
        stream: u32,
    },
    /// Renames a stream (`UpdateStream`, 204; op tag 9).
    UpdateStream {
        stream: u32,
        name: String,
    },
    CreateTopic {
        stream: u32,
        name: String,
        partitions: u32,
        durability: Durability,
        segment_size_bytes: u64,
        retention: Retention,
        replication_factor: u8,
    },
    DeleteTopic {
        stream: u32,
        topic: u32,
    },
    /// Renames a topic and sets its retention (`UpdateTopic`, 304; op tag 10). The op carries
    /// the values to hold, resolved against the state the request was read with.
    UpdateTopic {
        stream: u32,
        topic: u32,
        name: String,
        retention: Retention,
    },
    CreatePartitions {
        stream: u32,
        topic: u32,
        count: u32,
    },
    /// Deletes a topic's last `count` partitions, their messages and offsets with them
    /// (`DeletePartitions`, 403; op tag 22).
    DeletePartitions {
        stream: u32,
        topic: u32,
        count: u32,
    },
    /// Replaces every partition of a topic with a new, empty one under a new id, on the same
    /// leader: the messages and consumer offsets go, offsets start at 0 again (`PurgeTopic`,
    /// 305; op tag 23).
    PurgeTopic {
        stream: u32,
        topic: u32,
    },
    /// [`Op::PurgeTopic`] of every topic of a stream (`PurgeStream`, 205; op tag 24).
    PurgeStream {
        stream: u32,
    },
    /// Raises partition `partition`'s (its id) floor to `below` (`DeleteSegments`, 503; op tag
    /// 25): the node that took the request resolved the count of segments to the offset past
    /// them, as its own segments lie.
    DeleteSegments {
        stream: u32,
        topic: u32,
        partition: u32,
        below: u64,
    },
    CreateConsumerGroup {
        stream: u32,
        topic: u32,
        name: String,
    },
    DeleteConsumerGroup {
        stream: u32,
        topic: u32,
        group: u32,
    },
    /// Session `member` joins a group through `node` (booted at `boot`); joining again changes
    /// nothing (tag 11).
    JoinConsumerGroup {
        stream: u32,
        topic: u32,
        group: u32,
        member: u128,
        node: u8,
        boot: u64,
    },
    /// Session `member` leaves a group (tag 12).
    LeaveConsumerGroup {
        stream: u32,
        topic: u32,
        group: u32,
        member: u128,
    },
    /// Session `member` ended: it leaves every group it is in (tag 13).
    LeaveGroups {
        member: u128,
    },
    /// Node `node` restarted (or is gone): members that joined through it before `boot_before`
    /// leave (`u64::MAX`: all of them) (tag 14).
    DropNodeMembers {
        node: u8,
        boot_before: u64,
    },
    /// A user (tag 15).
    CreateUser {
        username: String,
        password_hash: String,
        status: u8,
        permissions: Option<Vec<u8>>,
    },
    /// Tag 16.
    DeleteUser {
        user: u32,
    },
    /// A new name and/or status (tag 17).
    UpdateUser {
        user: u32,
        username: Option<String>,
        status: Option<u8>,
    },
    /// The user's permissions, replaced (tag 18).
    UpdatePermissions {
        user: u32,
        permissions: Option<Vec<u8>>,
    },
    /// The user's new password hash (tag 19).
    ChangePassword {
        user: u32,
        password_hash: String,
    },
    /// A personal access token of `user` (tag 20).
    CreateToken {
        user: u32,
        name: String,
        hash: String,
        expiry_at: u64,
    },
    /// Tag 21.
    DeleteToken {
        user: u32,
        name: String,
    },
    /// Registers a client session (or replaces an older session of the same client).
    RegisterClient {
        client: u128,
        session: u64,
    },
}

/// What a successful op produced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    Stream(u32),
    Topic(u32),
    Partitions {
        first: u32,
        count: u32,
    },
    Group(u32),
    Deleted,
    Client,
    /// Members that left (a session's end, a node's restart).
    Left(u32),
    User(u32),
}

/// What executing a committed request did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Executed {
    /// The reply bytes the client gets ([`codec::encode_reply`]).
    pub reply: Vec<u8>,
    /// The op's outcome; `None` for a duplicate, which got the stored reply of its first
    /// execution instead.
    pub result: Option<Result<Applied, ApplyError>>,
}

/// Why an op was refused (the state is unchanged).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    #[error("name must be 1 to {NAME_BYTES_MAX} bytes, got {len}")]
    NameLength { len: usize },
    #[error("{what} named {name:?} exists already")]
    DuplicateName { what: &'static str, name: String },
    #[error("no stream {0}")]
    UnknownStream(u32),
    #[error("no topic {1} in stream {0}")]
    UnknownTopic(u32, u32),
    #[error("no consumer group {2} in topic {1} of stream {0}")]
    UnknownGroup(u32, u32, u32),
    #[error("session {member:#x} is not a member of consumer group {2} in topic {1} of stream {0}", member = .3)]
    NotMember(u32, u32, u32, u128),
    #[error("no token {1:?} of user {0}")]
    UnknownToken(u32, String),
    #[error("no user {0}")]
    UnknownUser(u32),
    #[error("user status {0} (1 active, 2 inactive)")]
    UserStatus(u8),
    #[error("{what}: at most {max}")]
    Limit { what: &'static str, max: usize },
    #[error("replication factor {factor} must be 1 to {replicas} (the cluster size)")]
    ReplicationFactor { factor: u8, replicas: u8 },
    #[error("segment size must be positive")]
    SegmentSize,
    #[error("cannot delete {asked} partitions of a topic that has {have}")]
    PartitionCount { have: u32, asked: u32 },
    #[error("no partition {2} in topic {1} of stream {0}")]
    UnknownPartition(u32, u32, u32),
    #[error("session {session} of client {client:#x} is older than its current one")]
    StaleSession { client: u128, session: u64 },
    #[error("client {client:#x} has no session (never registered, or evicted)")]
    NoSession { client: u128 },
    #[error("request {request} of client {client:#x} is older than its last one ({last})")]
    StaleRequest {
        client: u128,
        request: u64,
        last: u64,
    },
}

fn check_name(name: &str) -> Result<(), ApplyError> {
    if name.is_empty() || name.len() > NAME_BYTES_MAX {
        return Err(ApplyError::NameLength { len: name.len() });
    }
    Ok(())
}

fn check_user(status: u8, permissions: Option<&[u8]>) -> Result<(), ApplyError> {
    if !(1..=2).contains(&status) {
        return Err(ApplyError::UserStatus(status));
    }
    if permissions.is_some_and(|p| p.len() > PERMISSIONS_BYTES_MAX) {
        return Err(ApplyError::Limit {
            what: "bytes of a user's permissions",
            max: PERMISSIONS_BYTES_MAX,
        });
    }
    Ok(())
}

/// The ids a purge of `topic` gives its partitions: the next ones, one each.
fn purge_ids(topic: &Topic) -> Result<std::ops::Range<u32>, ApplyError> {
    topic.next_ids(u32::try_from(topic.partitions.len()).unwrap_or(u32::MAX))
}

/// Gives every partition of `topic` a new id ([`Op::PurgeTopic`]); leaders stay.
fn purge(topic: &mut Topic) -> Result<(), ApplyError> {
    let ids = purge_ids(topic)?;
    topic.next_partition_id = ids.end;
    for (partition, id) in topic.partitions.iter_mut().zip(ids) {
        partition.id = id;
        partition.floor = 0;
    }
    Ok(())
}

impl State {
    /// An empty state for a cluster of `replica_count` replicas.
    #[must_use]
    pub fn new(replica_count: u8) -> Self {
        assert!(replica_count >= 1, "a cluster has at least one replica");
        Self {
            replica_count,
            streams: BTreeMap::new(),
            next_stream_id: 1,
            clients: BTreeMap::new(),
            partition_count: 0,
            primaries: vec![0; usize::from(replica_count)],
            users: BTreeMap::new(),
            next_user_id: 1,
            tokens: BTreeMap::new(),
        }
    }

    /// Every partition the state lists, as `(stream, topic, partition)`.
    #[must_use]
    pub fn partition_keys(&self) -> PartitionKeys {
        let mut keys = std::collections::BTreeSet::new();
        for (stream_id, stream) in &self.streams {
            for (topic_id, topic) in &stream.topics {
                for partition in &topic.partitions {
                    keys.insert((*stream_id, *topic_id, partition.id));
                }
            }
        }
        keys
    }

    /// Counts `partitions` as created (`+1`) or deleted.
    pub(crate) fn count_primaries(&mut self, partitions: &[Partition], created: bool) {
        for partition in partitions {
            let count = &mut self.primaries[usize::from(partition.leader)];
            *count = if created {
                *count + 1
            } else {
                count.saturating_sub(1)
            };
        }
    }

    /// Leaders for `count` new partitions: each goes to the replica that leads the fewest
    /// groups so far (the lowest index on a tie), counting the metadata group's primary in
    /// `view` (the view the create was prepared in, so every replica computes the same).
    fn spread(&self, count: u32, view: u32) -> Vec<u8> {
        let replicas = u64::from(self.replica_count);
        let mut load: Vec<u64> = self.primaries.iter().map(|c| u64::from(*c)).collect();
        let metadata = usize::try_from(u64::from(view) % replicas).unwrap_or(0);
        load[metadata] += 1;
        (0..count)
            .map(|_| {
                let (replica, _) = load
                    .iter()
                    .enumerate()
                    .min_by_key(|(r, l)| (**l, *r))
                    .unwrap_or((0, &0));
                load[replica] += 1;
                u8::try_from(replica).unwrap_or(0)
            })
            .collect()
    }

    fn stream_mut(&mut self, stream: u32) -> Result<&mut Stream, ApplyError> {
        self.streams
            .get_mut(&stream)
            .ok_or(ApplyError::UnknownStream(stream))
    }

    fn topic_mut(&mut self, stream: u32, topic: u32) -> Result<&mut Topic, ApplyError> {
        self.stream_mut(stream)?
            .topics
            .get_mut(&topic)
            .ok_or(ApplyError::UnknownTopic(stream, topic))
    }

    /// Applies `op` as if prepared in view 0 (see [`State::apply_in_view`]).
    pub fn apply(&mut self, op: &Op) -> Result<Applied, ApplyError> {
        self.apply_in_view(op, 0)
    }

    /// Applies `op`, prepared by the metadata group in `view` (it decides where new
    /// partitions' primaries go). Validation happens before any change, so a refused op
    /// changes nothing.
    pub fn apply_in_view(&mut self, op: &Op, view: u32) -> Result<Applied, ApplyError> {
        self.apply_at(op, view, 0)
    }

    /// [`State::apply_in_view`] of a prepare stamped `now_us` by the metadata group's primary
    /// (its header's timestamp: every replica executes the same): what a create makes records
    /// it as its creation time.
    pub fn apply_at(&mut self, op: &Op, view: u32, now_us: u64) -> Result<Applied, ApplyError> {
        match op {
            Op::CreateStream { name } => {
                check_name(name)?;
                if self.streams.len() >= STREAMS_MAX {
                    return Err(ApplyError::Limit {
                        what: "streams",
                        max: STREAMS_MAX,
                    });
                }
                if self.streams.values().any(|s| s.name == *name) {
                    return Err(ApplyError::DuplicateName {
                        what: "stream",
                        name: name.clone(),
                    });
                }
                let id = self.next_stream_id;
                self.next_stream_id += 1;
                let stream = Stream {
                    id,
                    name: name.clone(),
                    created_at: now_us,
                    topics: BTreeMap::new(),
                    next_topic_id: 1,
                };
                self.streams.insert(id, stream);
                Ok(Applied::Stream(id))
            }
            Op::UpdateStream { stream, name } => {
                check_name(name)?;
                if !self.streams.contains_key(stream) {
                    return Err(ApplyError::UnknownStream(*stream));
                }
                if self
                    .streams
                    .values()
                    .any(|s| s.name == *name && s.id != *stream)
                {
                    return Err(ApplyError::DuplicateName {
                        what: "stream",
                        name: name.clone(),
                    });
                }
                if let Some(renamed) = self.streams.get_mut(stream) {
                    renamed.name.clone_from(name);
                }
                Ok(Applied::Stream(*stream))
            }
            Op::DeleteStream { stream } => {
                let removed = self
                    .streams
                    .remove(stream)
                    .ok_or(ApplyError::UnknownStream(*stream))?;
                self.partition_count -= removed
                    .topics
                    .values()
                    .map(|t| t.partitions.len())
                    .sum::<usize>();
                for topic in removed.topics.values() {
                    self.count_primaries(&topic.partitions, false);
                }
                Ok(Applied::Deleted)
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
                check_name(name)?;
                if *replication_factor == 0 || *replication_factor > self.replica_count {
                    return Err(ApplyError::ReplicationFactor {
                        factor: *replication_factor,
                        replicas: self.replica_count,
                    });
                }
                if *segment_size_bytes == 0 {
                    return Err(ApplyError::SegmentSize);
                }
                self.check_partition_budget(*partitions, 0)?;
                let parent = self
                    .streams
                    .get(stream)
                    .ok_or(ApplyError::UnknownStream(*stream))?;
                if parent.topics.len() >= TOPICS_PER_STREAM_MAX {
                    return Err(ApplyError::Limit {
                        what: "topics per stream",
                        max: TOPICS_PER_STREAM_MAX,
                    });
                }
                if parent.topics.values().any(|t| t.name == *name) {
                    return Err(ApplyError::DuplicateName {
                        what: "topic",
                        name: name.clone(),
                    });
                }
                let id = parent.next_topic_id;
                let leaders: Vec<Partition> = (1..=*partitions)
                    .zip(self.spread(*partitions, view))
                    .map(|(partition, leader)| Partition {
                        id: partition,
                        leader,
                        floor: 0,
                    })
                    .collect();
                self.partition_count += leaders.len();
                self.count_primaries(&leaders, true);
                let parent = self.stream_mut(*stream)?;
                parent.next_topic_id += 1;
                parent.topics.insert(
                    id,
                    Topic {
                        id,
                        name: name.clone(),
                        created_at: now_us,
                        durability: *durability,
                        segment_size_bytes: *segment_size_bytes,
                        retention: *retention,
                        replication_factor: *replication_factor,
                        partitions: leaders,
                        next_partition_id: partitions + 1,
                        groups: BTreeMap::new(),
                        next_group_id: 1,
                    },
                );
                Ok(Applied::Topic(id))
            }
            Op::UpdateTopic {
                stream,
                topic,
                name,
                retention,
            } => {
                check_name(name)?;
                let parent = self.stream_mut(*stream)?;
                if !parent.topics.contains_key(topic) {
                    return Err(ApplyError::UnknownTopic(*stream, *topic));
                }
                if parent
                    .topics
                    .values()
                    .any(|t| t.name == *name && t.id != *topic)
                {
                    return Err(ApplyError::DuplicateName {
                        what: "topic",
                        name: name.clone(),
                    });
                }
                if let Some(updated) = parent.topics.get_mut(topic) {
                    updated.name.clone_from(name);
                    updated.retention = *retention;
                }
                Ok(Applied::Topic(*topic))
            }
            Op::DeleteTopic { stream, topic } => {
                let parent = self.stream_mut(*stream)?;
                let removed = parent
                    .topics
                    .remove(topic)
                    .ok_or(ApplyError::UnknownTopic(*stream, *topic))?;
                self.partition_count -= removed.partitions.len();
                self.count_primaries(&removed.partitions, false);
                Ok(Applied::Deleted)
            }
            Op::CreatePartitions {
                stream,
                topic,
                count,
            } => {
                let grown = self
                    .streams
                    .get(stream)
                    .ok_or(ApplyError::UnknownStream(*stream))?
                    .topics
                    .get(topic)
                    .ok_or(ApplyError::UnknownTopic(*stream, *topic))?;
                let existing = u32::try_from(grown.partitions.len()).unwrap_or(u32::MAX);
                self.check_partition_budget(*count, existing)?;
                let ids = grown.next_ids(*count)?;
                let first = ids.start;
                let added: Vec<Partition> = ids
                    .clone()
                    .zip(self.spread(*count, view))
                    .map(|(partition, leader)| Partition {
                        id: partition,
                        leader,
                        floor: 0,
                    })
                    .collect();
                self.partition_count += added.len();
                self.count_primaries(&added, true);
                let grown = self.topic_mut(*stream, *topic)?;
                grown.partitions.extend(added);
                grown.next_partition_id = ids.end;
                grown.resplit();
                Ok(Applied::Partitions {
                    first,
                    count: *count,
                })
            }
            Op::DeletePartitions {
                stream,
                topic,
                count,
            } => {
                let shrunk = self.topic_mut(*stream, *topic)?;
                let have = u32::try_from(shrunk.partitions.len()).unwrap_or(u32::MAX);
                if *count == 0 || *count > have {
                    return Err(ApplyError::PartitionCount {
                        have,
                        asked: *count,
                    });
                }
                let kept = (have - count) as usize;
                let removed = shrunk.partitions.split_off(kept);
                shrunk.resplit();
                self.partition_count -= removed.len();
                self.count_primaries(&removed, false);
                Ok(Applied::Deleted)
            }
            Op::DeleteSegments {
                stream,
                topic,
                partition,
                below,
            } => {
                let parent = self.topic_mut(*stream, *topic)?;
                let found = parent
                    .partitions
                    .iter_mut()
                    .find(|p| p.id == *partition)
                    .ok_or(ApplyError::UnknownPartition(*stream, *topic, *partition))?;
                found.floor = found.floor.max(*below);
                Ok(Applied::Deleted)
            }
            Op::PurgeTopic { stream, topic } => {
                let purged = self.topic_mut(*stream, *topic)?;
                purge(purged)?;
                Ok(Applied::Deleted)
            }
            Op::PurgeStream { stream } => {
                let purged = self.stream_mut(*stream)?;
                // Checked for every topic first: a refused op changes nothing.
                for topic in purged.topics.values() {
                    purge_ids(topic)?;
                }
                for topic in purged.topics.values_mut() {
                    purge(topic)?;
                }
                Ok(Applied::Deleted)
            }
            Op::CreateConsumerGroup {
                stream,
                topic,
                name,
            } => {
                check_name(name)?;
                let parent = self.topic_mut(*stream, *topic)?;
                if parent.groups.len() >= GROUPS_PER_TOPIC_MAX {
                    return Err(ApplyError::Limit {
                        what: "consumer groups per topic",
                        max: GROUPS_PER_TOPIC_MAX,
                    });
                }
                if parent.groups.values().any(|g| g.name == *name) {
                    return Err(ApplyError::DuplicateName {
                        what: "consumer group",
                        name: name.clone(),
                    });
                }
                let id = parent.next_group_id;
                parent.next_group_id += 1;
                parent
                    .groups
                    .insert(id, ConsumerGroup::new(id, name.clone()));
                Ok(Applied::Group(id))
            }
            Op::DeleteConsumerGroup {
                stream,
                topic,
                group,
            } => {
                let parent = self.topic_mut(*stream, *topic)?;
                parent
                    .groups
                    .remove(group)
                    .ok_or(ApplyError::UnknownGroup(*stream, *topic, *group))?;
                Ok(Applied::Deleted)
            }
            Op::JoinConsumerGroup {
                stream,
                topic,
                group,
                member,
                node,
                boot,
            } => {
                if *node >= self.replica_count {
                    return Err(ApplyError::Limit {
                        what: "node index of a member",
                        max: usize::from(self.replica_count) - 1,
                    });
                }
                let joined = self
                    .topic_mut(*stream, *topic)?
                    .groups
                    .get_mut(group)
                    .ok_or(ApplyError::UnknownGroup(*stream, *topic, *group))?;
                if joined.member_of(*member).is_some() {
                    return Ok(Applied::Group(*group));
                }
                if joined.members.len() >= MEMBERS_PER_GROUP_MAX {
                    return Err(ApplyError::Limit {
                        what: "members per consumer group",
                        max: MEMBERS_PER_GROUP_MAX,
                    });
                }
                let id = joined.next_member_id;
                joined.next_member_id += 1;
                joined.members.insert(
                    id,
                    Member {
                        session: *member,
                        node: *node,
                        boot: *boot,
                    },
                );
                joined.generation += 1;
                Ok(Applied::Group(*group))
            }
            Op::LeaveConsumerGroup {
                stream,
                topic,
                group,
                member,
            } => {
                let left = self
                    .topic_mut(*stream, *topic)?
                    .groups
                    .get_mut(group)
                    .ok_or(ApplyError::UnknownGroup(*stream, *topic, *group))?;
                if left.remove_members(|m| m.session == *member) == 0 {
                    return Err(ApplyError::NotMember(*stream, *topic, *group, *member));
                }
                Ok(Applied::Left(1))
            }
            Op::LeaveGroups { member } => {
                Ok(Applied::Left(self.remove_members(|m| m.session == *member)))
            }
            Op::DropNodeMembers { node, boot_before } => {
                Ok(Applied::Left(self.remove_members(|m| {
                    m.node == *node && m.boot < *boot_before
                })))
            }
            Op::CreateUser {
                username,
                password_hash,
                status,
                permissions,
            } => {
                check_name(username)?;
                check_name(password_hash)?;
                check_user(*status, permissions.as_deref())?;
                if self.users.len() >= USERS_MAX {
                    return Err(ApplyError::Limit {
                        what: "users",
                        max: USERS_MAX,
                    });
                }
                if self.users.values().any(|u| u.username == *username) {
                    return Err(ApplyError::DuplicateName {
                        what: "user",
                        name: username.clone(),
                    });
                }
                let id = self.next_user_id;
                self.next_user_id += 1;
                self.users.insert(
                    id,
                    User {
                        id,
                        username: username.clone(),
                        created_at: now_us,
                        password_hash: password_hash.clone(),
                        status: *status,
                        permissions: permissions.clone(),
                    },
                );
                Ok(Applied::User(id))
            }
            Op::DeleteUser { user } => {
                self.users
                    .remove(user)
                    .ok_or(ApplyError::UnknownUser(*user))?;
                // Its tokens go with it.
                self.tokens.retain(|(owner, _), _| owner != user);
                Ok(Applied::Deleted)
            }
            Op::CreateToken {
                user,
                name,
                hash,
                expiry_at,
            } => {
                check_name(name)?;
                check_name(hash)?;
                if *user != 0 && !self.users.contains_key(user) {
                    return Err(ApplyError::UnknownUser(*user));
                }
                if self.tokens.contains_key(&(*user, name.clone())) {
                    return Err(ApplyError::DuplicateName {
                        what: "token",
                        name: name.clone(),
                    });
                }
                if self
                    .tokens
                    .keys()
                    .filter(|(owner, _)| owner == user)
                    .count()
                    >= TOKENS_PER_USER_MAX
                {
                    return Err(ApplyError::Limit {
                        what: "tokens per user",
                        max: TOKENS_PER_USER_MAX,
                    });
                }
                self.tokens.insert(
                    (*user, name.clone()),
                    Token {
                        hash: hash.clone(),
                        expiry_at: *expiry_at,
                    },
                );
                Ok(Applied::User(*user))
            }
            Op::DeleteToken { user, name } => {
                self.tokens
                    .remove(&(*user, name.clone()))
                    .ok_or_else(|| ApplyError::UnknownToken(*user, name.clone()))?;
                Ok(Applied::Deleted)
            }
            Op::UpdateUser {
                user,
                username,
                status,
            } => {
                if let Some(name) = username {
                    check_name(name)?;
                    if self
                        .users
                        .values()
                        .any(|u| u.username == *name && u.id != *user)
                    {
                        return Err(ApplyError::DuplicateName {
                            what: "user",
                            name: name.clone(),
                        });
                    }
                }
                if let Some(status) = status {
                    check_user(*status, None)?;
                }
                let updated = self
                    .users
                    .get_mut(user)
                    .ok_or(ApplyError::UnknownUser(*user))?;
                if let Some(name) = username {
                    updated.username.clone_from(name);
                }
                if let Some(status) = status {
                    updated.status = *status;
                }
                Ok(Applied::User(*user))
            }
            Op::UpdatePermissions { user, permissions } => {
                check_user(1, permissions.as_deref())?;
                self.users
                    .get_mut(user)
                    .ok_or(ApplyError::UnknownUser(*user))?
                    .permissions
                    .clone_from(permissions);
                Ok(Applied::User(*user))
            }
            Op::ChangePassword {
                user,
                password_hash,
            } => {
                check_name(password_hash)?;
                self.users
                    .get_mut(user)
                    .ok_or(ApplyError::UnknownUser(*user))?
                    .password_hash
                    .clone_from(password_hash);
                Ok(Applied::User(*user))
            }
            Op::RegisterClient { client, session } => {
                match self.clients.get(client) {
                    Some(current) if current.session > *session => {
                        return Err(ApplyError::StaleSession {
                            client: *client,
                            session: *session,
                        });
                    }
                    Some(current) if current.session == *session => return Ok(Applied::Client),
                    _ => {}
                }
                if !self.clients.contains_key(client) && self.clients.len() >= CLIENTS_MAX {
                    self.evict_least_recently_used();
                }
                let entry = ClientSession {
                    session: *session,
                    last_request: 0,
                    last_op: 0,
                    reply: Vec::new(),
                    request_checksum: 0,
                };
                self.clients.insert(*client, entry);
                Ok(Applied::Client)
            }
        }
    }

    /// Removes every member `leaves` selects from every group; how many went.
    fn remove_members(&mut self, leaves: impl Fn(&Member) -> bool) -> u32 {
        let mut removed = 0;
        for stream in self.streams.values_mut() {
            for topic in stream.topics.values_mut() {
                for group in topic.groups.values_mut() {
                    removed += group.remove_members(&leaves);
                }
            }
        }
        u32::try_from(removed).unwrap_or(u32::MAX)
    }

    /// The groups `session` is a member of, as `(stream, topic, group)`.
    #[must_use]
    pub fn memberships(&self, session: u128) -> Vec<(u32, u32, u32)> {
        let mut out = Vec::new();
        for stream in self.streams.values() {
            for topic in stream.topics.values() {
                for group in topic.groups.values() {
                    if group.member_of(session).is_some() {
                        out.push((stream.id, topic.id, group.id));
                    }
                }
            }
        }
        out
    }

    /// Whether any group has a member that joined through `node` before `boot_before`.
    #[must_use]
    pub fn has_node_members(&self, node: u8, boot_before: u64) -> bool {
        self.streams.values().any(|stream| {
            stream.topics.values().any(|topic| {
                topic.groups.values().any(|group| {
                    group
                        .members
                        .values()
                        .any(|m| m.node == node && m.boot < boot_before)
                })
            })
        })
    }

    /// Evicts the session whose last request is the oldest op (the lowest client id among
    /// equals): deterministic, so every replica evicts the same one.
    fn evict_least_recently_used(&mut self) {
        let oldest = self
            .clients
            .iter()
            .min_by_key(|(client, session)| (session.last_op, **client))
            .map(|(client, _)| *client);
        if let Some(client) = oldest {
            self.clients.remove(&client);
        }
    }

    /// Executes the committed prepare `op_number`, the request `request` of `client`
    /// (`client` 0: no session, e.g. a single node's own op). A client's request is executed
    /// once: the same request again gets the reply it got (byte for byte) without applying
    /// anything, an older one is refused, and a client without a session gets an error.
    /// Executing and recording the reply are one step, so a replica that executed a request
    /// also remembers its reply.
    pub fn execute(&mut self, op_number: u64, client: u128, request: u64, op: &Op) -> Executed {
        self.execute_in_view(0, op_number, (client, request, 0), op)
    }

    /// [`State::execute`] of a prepare of the metadata group's `view` (which places new
    /// partitions' primaries, [`State::apply_in_view`]), whose header names `(client, request,
    /// request_checksum)`; the session keeps the checksum (0: unknown).
    pub fn execute_in_view(
        &mut self,
        view: u32,
        op_number: u64,
        header: (u128, u64, u128),
        op: &Op,
    ) -> Executed {
        self.execute_at((view, 0), op_number, header, op)
    }

    /// [`State::execute_in_view`] of a prepare stamped `now_us` ([`State::apply_at`]).
    pub fn execute_at(
        &mut self,
        (view, now_us): (u32, u64),
        op_number: u64,
        (client, request, request_checksum): (u128, u64, u128),
        op: &Op,
    ) -> Executed {
        let executed = |result: Result<Applied, ApplyError>| Executed {
            reply: codec::encode_reply(&result),
            result: Some(result),
        };
        if client == 0 {
            return executed(self.apply_at(op, view, now_us));
        }
        if let Op::RegisterClient {
            client: registered, ..
        } = op
        {
            let done = executed(self.apply_at(op, view, now_us));
            if done.result.as_ref().is_some_and(Result::is_ok)
                && let Some(session) = self.clients.get_mut(registered)
            {
                // The registration is the session's first request (a replay of it is
                // answered like any other).
                session.last_request = request;
                session.last_op = op_number;
                session.reply.clone_from(&done.reply);
                session.request_checksum = request_checksum;
            }
            return done;
        }
        let Some(session) = self.clients.get(&client) else {
            return executed(Err(ApplyError::NoSession { client }));
        };
        if request == session.last_request {
            return Executed {
                reply: session.reply.clone(),
                result: None,
            };
        }
        if request < session.last_request {
            let last = session.last_request;
            return executed(Err(ApplyError::StaleRequest {
                client,
                request,
                last,
            }));
        }
        let done = executed(self.apply_at(op, view, now_us));
        if let Some(session) = self.clients.get_mut(&client) {
            session.last_request = request;
            session.last_op = op_number;
            session.reply.clone_from(&done.reply);
            session.request_checksum = request_checksum;
        }
        done
    }

    fn check_partition_budget(&self, adding: u32, existing: u32) -> Result<(), ApplyError> {
        if u64::from(existing) + u64::from(adding) > u64::from(PARTITIONS_PER_TOPIC_MAX) {
            let max = PARTITIONS_PER_TOPIC_MAX as usize;
            return Err(ApplyError::Limit {
                what: "partitions per topic",
                max,
            });
        }
        if self.partition_count + adding as usize > PARTITIONS_MAX {
            return Err(ApplyError::Limit {
                what: "partitions",
                max: PARTITIONS_MAX,
            });
        }
        Ok(())
    }
}
