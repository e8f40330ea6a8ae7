//! Request bodies: decoded by the server from a header's code and the body, encoded by our client.
//! Every body must be consumed exactly; a byte too many is as wrong as a byte too few.

use crate::codes::code;
use crate::permissions::Permissions;
use crate::primitives::{
    Consumer, Identifier, OptionEntry, Partitioning, PollingStrategy, put_name,
    put_optional_partition, put_options, read_name, read_optional_partition, read_options,
};
use crate::wire::{Put, Reader, WireError, len_u8, len_u32};

/// What a client's SDK says about itself at login.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientVersion {
    /// Packed `major << 20 | minor << 10 | patch`.
    pub protocol: u32,
    pub sdk_name: String,
    pub sdk_version: String,
}

/// The requests this crate decodes. `Other` is every other code: the server answers it with an
/// error status, it never drops the connection for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Ping,
    LoginRegister {
        version: ClientVersion,
        username: String,
        password: String,
        context: Option<String>,
    },
    /// A login with a personal access token (45, or 40 with the token form's body).
    LoginRegisterWithToken {
        version: ClientVersion,
        token: String,
        context: Option<String>,
    },
    /// 41: the asking user's tokens.
    GetPersonalAccessTokens,
    /// 42: a token for the asking user, named, expiring after `expiry` µs (0: the server's
    /// default, never; `u64::MAX`: never).
    CreatePersonalAccessToken {
        name: String,
        expiry: u64,
    },
    /// 43: one of the asking user's tokens, by name.
    DeletePersonalAccessToken {
        name: String,
    },
    Logout,
    GetClusterMetadata,
    /// The node's figures (`StatsInfo`).
    GetStats,
    /// The asking client's own connection (`ClientInfo` and its consumer groups).
    GetMe,
    /// One connection of the node, by the id `GetClients` lists.
    GetClient {
        client_id: u32,
    },
    /// Every client connection of the node.
    GetClients,
    /// A zip archive of the node's diagnostics: `compression` 1 (stored) to 6, `kinds` each 1
    /// to 6 or 100 (all).
    GetSnapshot {
        compression: u8,
        kinds: Vec<u8>,
    },
    /// The option keys a create of `scope` accepts (1 topic, 2 stream, 3 user).
    DescribeOptions {
        scope: u8,
    },
    GetStream {
        stream: Identifier,
    },
    GetStreams,
    CreateStream {
        name: String,
        options: Vec<OptionEntry>,
    },
    DeleteStream {
        stream: Identifier,
    },
    /// Renames a stream; its options (the rest of the body) as a create's.
    UpdateStream {
        stream: Identifier,
        name: String,
        options: Vec<OptionEntry>,
    },
    GetTopic {
        stream: Identifier,
        topic: Identifier,
    },
    GetTopics {
        stream: Identifier,
    },
    CreateTopic {
        stream: Identifier,
        partitions: u32,
        name: String,
        options: Vec<OptionEntry>,
    },
    DeleteTopic {
        stream: Identifier,
        topic: Identifier,
    },
    /// Renames a topic and changes its options (the rest of the body, as a create's).
    UpdateTopic {
        stream: Identifier,
        topic: Identifier,
        name: String,
        options: Vec<OptionEntry>,
    },
    CreatePartitions {
        stream: Identifier,
        topic: Identifier,
        count: u32,
    },
    /// Makes what the partition holds durable on the node asked (with `fsync`).
    FlushUnsavedBuffer {
        stream: Identifier,
        topic: Identifier,
        partition: u32,
        fsync: bool,
    },
    /// Deletes the topic's last `count` partitions.
    DeletePartitions {
        stream: Identifier,
        topic: Identifier,
        count: u32,
    },
    /// Deletes the partition's oldest `count` segments.
    DeleteSegments {
        stream: Identifier,
        topic: Identifier,
        partition: u32,
        count: u32,
    },
    /// Deletes every message of every topic of the stream; offsets start at 0 again.
    PurgeStream {
        stream: Identifier,
    },
    /// Deletes every message of the topic; offsets start at 0 again.
    PurgeTopic {
        stream: Identifier,
        topic: Identifier,
    },
    SendMessages {
        stream: Identifier,
        topic: Identifier,
        partitioning: Partitioning,
        count: u32,
        /// The 256-byte batch header and its frames, as the client built them (the server
        /// checks them with the storage's batch codec and stamps offsets and timestamps).
        batch: Vec<u8>,
    },
    PollMessages {
        consumer: Consumer,
        stream: Identifier,
        topic: Identifier,
        partition: Option<u32>,
        strategy: PollingStrategy,
        count: u32,
        auto_commit: bool,
    },
    GetConsumerOffset {
        consumer: Consumer,
        stream: Identifier,
        topic: Identifier,
        partition: Option<u32>,
    },
    StoreConsumerOffset {
        consumer: Consumer,
        stream: Identifier,
        topic: Identifier,
        partition: Option<u32>,
        offset: u64,
        /// 0: the reply may precede replication; 1: after a quorum.
        ack: u8,
    },
    DeleteConsumerOffset {
        consumer: Consumer,
        stream: Identifier,
        topic: Identifier,
        partition: Option<u32>,
        ack: u8,
    },
    /// One consumer group and its members with their partitions (600).
    GetConsumerGroup {
        stream: Identifier,
        topic: Identifier,
        group: Identifier,
    },
    /// A topic's consumer groups (601).
    GetConsumerGroups {
        stream: Identifier,
        topic: Identifier,
    },
    CreateConsumerGroup {
        stream: Identifier,
        topic: Identifier,
        name: String,
    },
    DeleteConsumerGroup {
        stream: Identifier,
        topic: Identifier,
        group: Identifier,
    },
    /// The asking session joins the group (604, replicated).
    JoinConsumerGroup {
        stream: Identifier,
        topic: Identifier,
        group: Identifier,
    },
    /// The asking session leaves the group (605, replicated).
    LeaveConsumerGroup {
        stream: Identifier,
        topic: Identifier,
        group: Identifier,
    },
    /// The asking member's assignment: the group's generation and its partitions (606).
    SyncConsumerGroup {
        stream: Identifier,
        topic: Identifier,
        group: Identifier,
    },
    /// 31: one user, by id or name.
    GetUser {
        user: Identifier,
    },
    /// 32: every user.
    GetUsers,
    /// 33: a user with a password (at most 255 bytes), a status (1 active, 2 inactive) and
    /// optional permissions; the options block is the rest of the body.
    CreateUser {
        username: String,
        password: String,
        status: u8,
        permissions: Option<Permissions>,
        options: Vec<OptionEntry>,
    },
    /// 34.
    DeleteUser {
        user: Identifier,
    },
    /// 35: a new name and/or status; the options block is the rest of the body.
    UpdateUser {
        user: Identifier,
        username: Option<String>,
        status: Option<u8>,
        options: Vec<OptionEntry>,
    },
    /// 36: the user's permissions, replaced (none: no permissions).
    UpdatePermissions {
        user: Identifier,
        permissions: Option<Permissions>,
    },
    /// 37.
    ChangePassword {
        user: Identifier,
        current_password: String,
        new_password: String,
    },
    /// 14: binds a routed data connection to the coordinator connection's session (the
    /// identity a consumer group knows), as `GetPollRouting` handed it out.
    AttachConsumerSession {
        client_id: u128,
        session: u64,
        metadata_watermark: u64,
    },
    /// 103: where a clustered SDK sends an auto-commit poll (a [`Request::PollMessages`]).
    GetPollRouting(Box<Request>),
    /// 104: an auto-commit poll on a routed data connection (a [`Request::PollMessages`]).
    PollMessagesOnPrimary(Box<Request>),
    /// 123: where a clustered SDK sends an offset store or delete (a
    /// [`Request::GetConsumerOffset`]: the target alone).
    GetConsumerOffsetRouting(Box<Request>),
    Other {
        code: u32,
    },
}

/// A body that did not decode: the command and the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("command {code}: {error}")]
pub struct BodyError {
    pub code: u32,
    pub error: WireError,
}

fn read_version(r: &mut Reader<'_>) -> Result<ClientVersion, WireError> {
    Ok(ClientVersion {
        protocol: r.u32("protocol version")?,
        sdk_name: read_name(r, "sdk name")?,
        sdk_version: read_name(r, "sdk version")?,
    })
}

fn put_version(out: &mut Vec<u8>, version: &ClientVersion) {
    out.put_u32(version.protocol);
    put_name(out, &version.sdk_name);
    put_name(out, &version.sdk_version);
}

fn read_context(r: &mut Reader<'_>) -> Result<Option<String>, WireError> {
    let len = r.u32("client context length")? as usize;
    (len > 0)
        .then(|| r.str(len, "client context").map(str::to_owned))
        .transpose()
}

fn read_login(r: &mut Reader<'_>, version: ClientVersion) -> Result<Request, WireError> {
    let username = read_name(r, "username")?;
    let len = r.u8("password length")? as usize;
    let password = r.str(len, "password")?.to_owned();
    let context = read_context(r)?;
    Ok(Request::LoginRegister {
        version,
        username,
        password,
        context,
    })
}

/// A token login: the version, a u8-long token, the context.
fn read_token_login(r: &mut Reader<'_>, version: ClientVersion) -> Result<Request, WireError> {
    let len = r.u8("token length")? as usize;
    let token = r.str(len, "token")?.to_owned();
    let context = read_context(r)?;
    Ok(Request::LoginRegisterWithToken {
        version,
        token,
        context,
    })
}

impl Request {
    /// Decodes the body of a request with command `code` (the header's). Login travels as
    /// operation `Register` for both of its forms; the form whose fields end exactly at the
    /// body's end is the one sent.
    pub fn decode(code: u32, body: &[u8]) -> Result<Self, BodyError> {
        Self::decode_inner(code, body).map_err(|error| BodyError { code, error })
    }

    /// [`Request::decode`] of a `SendMessages` body read in two parts, so that its batch, the
    /// bulk of it, moves into the request uncopied: `head` its metadata length and metadata
    /// (exactly), `batch` the rest. The same request and the same errors as `decode` of the
    /// two parts joined.
    pub fn decode_send(head: &[u8], batch: Vec<u8>) -> Result<Self, BodyError> {
        let code = code::SEND_MESSAGES;
        let mut r = Reader::new(head);
        let (stream, topic, partitioning, count) =
            read_send_metadata(&mut r).map_err(|error| BodyError { code, error })?;
        if r.remaining() != 0 {
            // Not a split `decode` makes: decoded joined, for its own error.
            let mut joined = head.to_vec();
            joined.extend_from_slice(&batch);
            return Self::decode(code, &joined);
        }
        Ok(Self::SendMessages {
            stream,
            topic,
            partitioning,
            count,
            batch,
        })
    }

    fn decode_inner(code: u32, body: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(body);
        let request = match code {
            code::PING => Self::Ping,
            code::LOGIN_REGISTER | code::LOGIN_REGISTER_WITH_PAT => {
                let version = read_version(&mut r)?;
                let after_version = r.clone();
                match read_login(&mut r, version.clone()) {
                    Ok(login) if r.remaining() == 0 => login,
                    password_form => {
                        let mut token = after_version;
                        match read_token_login(&mut token, version) {
                            Ok(login) if token.remaining() == 0 => return Ok(login),
                            _ => password_form?,
                        }
                    }
                }
            }
            code::LOGOUT_USER => Self::Logout,
            code::GET_CLUSTER_METADATA => Self::GetClusterMetadata,
            code::GET_STATS => Self::GetStats,
            code::GET_ME => Self::GetMe,
            code::GET_CLIENT => Self::GetClient {
                client_id: r.u32("client id")?,
            },
            code::GET_CLIENTS => Self::GetClients,
            code::DESCRIBE_OPTIONS => {
                let at = r.position();
                let scope = r.u8("options scope")?;
                if !(1..=3).contains(&scope) {
                    return Err(r.invalid(
                        "options scope",
                        at,
                        format!("{scope} (1 topic, 2 stream, 3 user)"),
                    ));
                }
                Self::DescribeOptions { scope }
            }
            code::GET_SNAPSHOT => {
                let at = r.position();
                let compression = r.u8("compression")?;
                if !(1..=6).contains(&compression) {
                    return Err(r.invalid(
                        "compression",
                        at,
                        format!("{compression} (1 stored to 6 xz)"),
                    ));
                }
                let count = r.u8("snapshot types count")?;
                let mut kinds = Vec::with_capacity(usize::from(count));
                for _ in 0..count {
                    let at = r.position();
                    let kind = r.u8("snapshot type")?;
                    if !matches!(kind, 1..=6 | 100) {
                        return Err(r.invalid(
                            "snapshot type",
                            at,
                            format!("{kind} (1 to 6, or 100 for all)"),
                        ));
                    }
                    kinds.push(kind);
                }
                Self::GetSnapshot { compression, kinds }
            }
            code::GET_STREAM => Self::GetStream {
                stream: Identifier::read(&mut r, "stream id")?,
            },
            code::GET_STREAMS => Self::GetStreams,
            code::CREATE_STREAM => {
                let name = read_name(&mut r, "stream name")?;
                let len = r.remaining();
                Self::CreateStream {
                    name,
                    options: read_options(&mut r, len)?,
                }
            }
            code::DELETE_STREAM => Self::DeleteStream {
                stream: Identifier::read(&mut r, "stream id")?,
            },
            code::UPDATE_STREAM => {
                let stream = Identifier::read(&mut r, "stream id")?;
                let name = read_name(&mut r, "stream name")?;
                let len = r.remaining();
                Self::UpdateStream {
                    stream,
                    name,
                    options: read_options(&mut r, len)?,
                }
            }
            code::GET_TOPIC => Self::GetTopic {
                stream: Identifier::read(&mut r, "stream id")?,
                topic: Identifier::read(&mut r, "topic id")?,
            },
            code::GET_TOPICS => Self::GetTopics {
                stream: Identifier::read(&mut r, "stream id")?,
            },
            code::CREATE_TOPIC => {
                let stream = Identifier::read(&mut r, "stream id")?;
                let partitions = r.u32("partitions count")?;
                let name = read_name(&mut r, "topic name")?;
                let len = r.remaining();
                Self::CreateTopic {
                    stream,
                    partitions,
                    name,
                    options: read_options(&mut r, len)?,
                }
            }
            code::DELETE_TOPIC => Self::DeleteTopic {
                stream: Identifier::read(&mut r, "stream id")?,
                topic: Identifier::read(&mut r, "topic id")?,
            },
            code::UPDATE_TOPIC => {
                let stream = Identifier::read(&mut r, "stream id")?;
                let topic = Identifier::read(&mut r, "topic id")?;
                let name = read_name(&mut r, "topic name")?;
                let len = r.remaining();
                Self::UpdateTopic {
                    stream,
                    topic,
                    name,
                    options: read_options(&mut r, len)?,
                }
            }
            code::GET_CONSUMER_GROUP
            | code::DELETE_CONSUMER_GROUP
            | code::JOIN_CONSUMER_GROUP
            | code::LEAVE_CONSUMER_GROUP
            | code::SYNC_CONSUMER_GROUP => {
                let stream = Identifier::read(&mut r, "stream id")?;
                let topic = Identifier::read(&mut r, "topic id")?;
                let group = Identifier::read(&mut r, "consumer group id")?;
                match code {
                    code::GET_CONSUMER_GROUP => Self::GetConsumerGroup {
                        stream,
                        topic,
                        group,
                    },
                    code::DELETE_CONSUMER_GROUP => Self::DeleteConsumerGroup {
                        stream,
                        topic,
                        group,
                    },
                    code::JOIN_CONSUMER_GROUP => Self::JoinConsumerGroup {
                        stream,
                        topic,
                        group,
                    },
                    code::LEAVE_CONSUMER_GROUP => Self::LeaveConsumerGroup {
                        stream,
                        topic,
                        group,
                    },
                    _ => Self::SyncConsumerGroup {
                        stream,
                        topic,
                        group,
                    },
                }
            }
            code::GET_CONSUMER_GROUPS => Self::GetConsumerGroups {
                stream: Identifier::read(&mut r, "stream id")?,
                topic: Identifier::read(&mut r, "topic id")?,
            },
            code::CREATE_CONSUMER_GROUP => Self::CreateConsumerGroup {
                stream: Identifier::read(&mut r, "stream id")?,
                topic: Identifier::read(&mut r, "topic id")?,
                name: read_name(&mut r, "consumer group name")?,
            },
            code::CREATE_PARTITIONS => Self::CreatePartitions {
                stream: Identifier::read(&mut r, "stream id")?,
                topic: Identifier::read(&mut r, "topic id")?,
                count: r.u32("partitions count")?,
            },
            code::DELETE_PARTITIONS => Self::DeletePartitions {
                stream: Identifier::read(&mut r, "stream id")?,
                topic: Identifier::read(&mut r, "topic id")?,
                count: r.u32("partitions count")?,
            },
            code::FLUSH_UNSAVED_BUFFER => Self::FlushUnsavedBuffer {
                stream: Identifier::read(&mut r, "stream id")?,
                topic: Identifier::read(&mut r, "topic id")?,
                partition: r.u32("partition id")?,
                fsync: {
                    let at = r.position();
                    match r.u8("fsync")? {
                        0 => false,
                        1 => true,
                        other => return Err(r.invalid("fsync", at, format!("{other}"))),
                    }
                },
            },
            code::DELETE_SEGMENTS => Self::DeleteSegments {
                stream: Identifier::read(&mut r, "stream id")?,
                topic: Identifier::read(&mut r, "topic id")?,
                partition: r.u32("partition id")?,
                count: r.u32("segments count")?,
            },
            code::PURGE_STREAM => Self::PurgeStream {
                stream: Identifier::read(&mut r, "stream id")?,
            },
            code::PURGE_TOPIC => Self::PurgeTopic {
                stream: Identifier::read(&mut r, "stream id")?,
                topic: Identifier::read(&mut r, "topic id")?,
            },
            code::SEND_MESSAGES => {
                let (stream, topic, partitioning, count) = read_send_metadata(&mut r)?;
                Self::SendMessages {
                    stream,
                    topic,
                    partitioning,
                    count,
                    batch: r.rest().to_vec(),
                }
            }
            code::POLL_MESSAGES => {
                let (consumer, stream, topic, partition) = read_target(&mut r)?;
                Self::PollMessages {
                    consumer,
                    stream,
                    topic,
                    partition,
                    strategy: PollingStrategy::read(&mut r)?,
                    count: r.u32("count")?,
                    auto_commit: {
                        let at = r.position();
                        match r.u8("auto commit")? {
                            0 => false,
                            1 => true,
                            other => {
                                return Err(r.invalid("auto commit", at, format!("{other}")));
                            }
                        }
                    },
                }
            }
            code::GET_POLL_ROUTING | code::POLL_MESSAGES_ON_PRIMARY => {
                let poll = Box::new(Self::decode_inner(code::POLL_MESSAGES, body)?);
                return Ok(if code == code::GET_POLL_ROUTING {
                    Self::GetPollRouting(poll)
                } else {
                    Self::PollMessagesOnPrimary(poll)
                });
            }
            code::GET_CONSUMER_OFFSET_ROUTING => {
                return Ok(Self::GetConsumerOffsetRouting(Box::new(
                    Self::decode_inner(code::GET_CONSUMER_OFFSET, body)?,
                )));
            }
            code::GET_USER => Self::GetUser {
                user: Identifier::read(&mut r, "user id")?,
            },
            code::GET_USERS => Self::GetUsers,
            code::GET_PERSONAL_ACCESS_TOKENS => Self::GetPersonalAccessTokens,
            code::CREATE_PERSONAL_ACCESS_TOKEN => Self::CreatePersonalAccessToken {
                name: read_name(&mut r, "token name")?,
                expiry: r.u64("token expiry")?,
            },
            code::DELETE_PERSONAL_ACCESS_TOKEN => Self::DeletePersonalAccessToken {
                name: read_name(&mut r, "token name")?,
            },
            code::CREATE_USER => {
                let username = read_name(&mut r, "username")?;
                let password = read_password(&mut r, "password")?;
                let status = read_status(&mut r)?;
                let permissions = crate::permissions::read_optional(&mut r)?;
                let len = r.remaining();
                Self::CreateUser {
                    username,
                    password,
                    status,
                    permissions,
                    options: read_options(&mut r, len)?,
                }
            }
            code::DELETE_USER => Self::DeleteUser {
                user: Identifier::read(&mut r, "user id")?,
            },
            code::UPDATE_USER => {
                let user = Identifier::read(&mut r, "user id")?;
                let username = read_flag(&mut r, "has username")?
                    .then(|| read_name(&mut r, "username"))
                    .transpose()?;
                let status = read_flag(&mut r, "has status")?
                    .then(|| read_status(&mut r))
                    .transpose()?;
                let len = r.remaining();
                Self::UpdateUser {
                    user,
                    username,
                    status,
                    options: read_options(&mut r, len)?,
                }
            }
            code::UPDATE_PERMISSIONS => Self::UpdatePermissions {
                user: Identifier::read(&mut r, "user id")?,
                permissions: crate::permissions::read_optional(&mut r)?,
            },
            code::CHANGE_PASSWORD => Self::ChangePassword {
                user: Identifier::read(&mut r, "user id")?,
                current_password: read_password(&mut r, "current password")?,
                new_password: read_password(&mut r, "new password")?,
            },
            code::ATTACH_CONSUMER_SESSION => Self::AttachConsumerSession {
                client_id: r.u128("client id")?,
                session: r.u64("session")?,
                metadata_watermark: r.u64("metadata watermark")?,
            },
            code::GET_CONSUMER_OFFSET => {
                let (consumer, stream, topic, partition) = read_target(&mut r)?;
                Self::GetConsumerOffset {
                    consumer,
                    stream,
                    topic,
                    partition,
                }
            }
            code::STORE_CONSUMER_OFFSET => {
                let (consumer, stream, topic, partition) = read_target(&mut r)?;
                Self::StoreConsumerOffset {
                    consumer,
                    stream,
                    topic,
                    partition,
                    offset: r.u64("offset")?,
                    ack: read_ack(&mut r)?,
                }
            }
            code::DELETE_CONSUMER_OFFSET => {
                let (consumer, stream, topic, partition) = read_target(&mut r)?;
                Self::DeleteConsumerOffset {
                    consumer,
                    stream,
                    topic,
                    partition,
                    ack: read_ack(&mut r)?,
                }
            }
            code => {
                r.rest();
                Self::Other { code }
            }
        };
        r.finish("body")?;
        Ok(request)
    }

    /// The command code and body a client sends.
    pub fn encode(&self) -> (u32, Vec<u8>) {
        let mut out = Vec::new();
        let code = match self {
            Self::Ping => code::PING,
            Self::LoginRegister {
                version,
                username,
                password,
                context,
            } => {
                put_version(&mut out, version);
                put_name(&mut out, username);
                let password = &password.as_bytes()[..password.len().min(255)];
                out.put_u8(len_u8(password.len()));
                out.put_bytes(password);
                out.put_long_str(context.as_deref().unwrap_or(""));
                code::LOGIN_REGISTER
            }
            Self::LoginRegisterWithToken {
                version,
                token,
                context,
            } => {
                put_version(&mut out, version);
                put_password(&mut out, token);
                out.put_long_str(context.as_deref().unwrap_or(""));
                code::LOGIN_REGISTER_WITH_PAT
            }
            Self::GetPersonalAccessTokens => code::GET_PERSONAL_ACCESS_TOKENS,
            Self::CreatePersonalAccessToken { name, expiry } => {
                put_name(&mut out, name);
                out.put_u64(*expiry);
                code::CREATE_PERSONAL_ACCESS_TOKEN
            }
            Self::DeletePersonalAccessToken { name } => {
                put_name(&mut out, name);
                code::DELETE_PERSONAL_ACCESS_TOKEN
            }
            Self::Logout => code::LOGOUT_USER,
            Self::GetClusterMetadata => code::GET_CLUSTER_METADATA,
            Self::GetStats => code::GET_STATS,
            Self::GetMe => code::GET_ME,
            Self::GetClient { client_id } => {
                out.put_u32(*client_id);
                code::GET_CLIENT
            }
            Self::GetClients => code::GET_CLIENTS,
            Self::GetSnapshot { compression, kinds } => {
                out.put_u8(*compression);
                out.put_u8(u8::try_from(kinds.len()).unwrap_or(u8::MAX));
                for kind in kinds.iter().take(usize::from(u8::MAX)) {
                    out.put_u8(*kind);
                }
                code::GET_SNAPSHOT
            }
            Self::DescribeOptions { scope } => {
                out.put_u8(*scope);
                code::DESCRIBE_OPTIONS
            }
            Self::GetStream { stream } => {
                stream.put(&mut out);
                code::GET_STREAM
            }
            Self::GetStreams => code::GET_STREAMS,
            Self::CreateStream { name, options } => {
                put_name(&mut out, name);
                put_options(&mut out, options);
                code::CREATE_STREAM
            }
            Self::DeleteStream { stream } => {
                stream.put(&mut out);
                code::DELETE_STREAM
            }
            Self::UpdateStream {
                stream,
                name,
                options,
            } => {
                stream.put(&mut out);
                put_name(&mut out, name);
                put_options(&mut out, options);
                code::UPDATE_STREAM
            }
            Self::GetTopic { stream, topic } => {
                stream.put(&mut out);
                topic.put(&mut out);
                code::GET_TOPIC
            }
            Self::GetTopics { stream } => {
                stream.put(&mut out);
                code::GET_TOPICS
            }
            Self::CreateTopic {
                stream,
                partitions,
                name,
                options,
            } => {
                stream.put(&mut out);
                out.put_u32(*partitions);
                put_name(&mut out, name);
                put_options(&mut out, options);
                code::CREATE_TOPIC
            }
            Self::DeleteTopic { stream, topic } => {
                stream.put(&mut out);
                topic.put(&mut out);
                code::DELETE_TOPIC
            }
            Self::UpdateTopic {
                stream,
                topic,
                name,
                options,
            } => {
                stream.put(&mut out);
                topic.put(&mut out);
                put_name(&mut out, name);
                put_options(&mut out, options);
                code::UPDATE_TOPIC
            }
            Self::CreatePartitions {
                stream,
                topic,
                count,
            } => {
                stream.put(&mut out);
                topic.put(&mut out);
                out.put_u32(*count);
                code::CREATE_PARTITIONS
            }
            Self::DeletePartitions {
                stream,
                topic,
                count,
            } => {
                stream.put(&mut out);
                topic.put(&mut out);
                out.put_u32(*count);
                code::DELETE_PARTITIONS
            }
            Self::PurgeStream { stream } => {
                stream.put(&mut out);
                code::PURGE_STREAM
            }
            Self::DeleteSegments {
                stream,
                topic,
                partition,
                count,
            } => {
                stream.put(&mut out);
                topic.put(&mut out);
                out.put_u32(*partition);
                out.put_u32(*count);
                code::DELETE_SEGMENTS
            }
            Self::FlushUnsavedBuffer {
                stream,
                topic,
                partition,
                fsync,
            } => {
                stream.put(&mut out);
                topic.put(&mut out);
                out.put_u32(*partition);
                out.put_u8(u8::from(*fsync));
                code::FLUSH_UNSAVED_BUFFER
            }
            Self::PurgeTopic { stream, topic } => {
                stream.put(&mut out);
                topic.put(&mut out);
                code::PURGE_TOPIC
            }
            Self::SendMessages {
                stream,
                topic,
                partitioning,
                count,
                batch,
            } => {
                let mut metadata = Vec::new();
                stream.put(&mut metadata);
                topic.put(&mut metadata);
                partitioning.put(&mut metadata);
                metadata.put_u32(*count);
                out.put_u32(len_u32(metadata.len()));
                out.put_bytes(&metadata);
                out.put_bytes(batch);
                code::SEND_MESSAGES
            }
            Self::PollMessages {
                consumer,
                stream,
                topic,
                partition,
                strategy,
                count,
                auto_commit,
            } => {
                put_target(&mut out, consumer, stream, topic, *partition);
                strategy.put(&mut out);
                out.put_u32(*count);
                out.put_u8(u8::from(*auto_commit));
                code::POLL_MESSAGES
            }
            Self::GetConsumerOffset {
                consumer,
                stream,
                topic,
                partition,
            } => {
                put_target(&mut out, consumer, stream, topic, *partition);
                code::GET_CONSUMER_OFFSET
            }
            Self::StoreConsumerOffset {
                consumer,
                stream,
                topic,
                partition,
                offset,
                ack,
            } => {
                put_target(&mut out, consumer, stream, topic, *partition);
                out.put_u64(*offset);
                out.put_u8(*ack);
                code::STORE_CONSUMER_OFFSET
            }
            Self::DeleteConsumerOffset {
                consumer,
                stream,
                topic,
                partition,
                ack,
            } => {
                put_target(&mut out, consumer, stream, topic, *partition);
                out.put_u8(*ack);
                code::DELETE_CONSUMER_OFFSET
            }
            Self::GetConsumerGroup {
                stream,
                topic,
                group,
            }
            | Self::DeleteConsumerGroup {
                stream,
                topic,
                group,
            }
            | Self::JoinConsumerGroup {
                stream,
                topic,
                group,
            }
            | Self::LeaveConsumerGroup {
                stream,
                topic,
                group,
            }
            | Self::SyncConsumerGroup {
                stream,
                topic,
                group,
            } => {
                stream.put(&mut out);
                topic.put(&mut out);
                group.put(&mut out);
                match self {
                    Self::GetConsumerGroup { .. } => code::GET_CONSUMER_GROUP,
                    Self::DeleteConsumerGroup { .. } => code::DELETE_CONSUMER_GROUP,
                    Self::JoinConsumerGroup { .. } => code::JOIN_CONSUMER_GROUP,
                    Self::LeaveConsumerGroup { .. } => code::LEAVE_CONSUMER_GROUP,
                    _ => code::SYNC_CONSUMER_GROUP,
                }
            }
            Self::GetConsumerGroups { stream, topic } => {
                stream.put(&mut out);
                topic.put(&mut out);
                code::GET_CONSUMER_GROUPS
            }
            Self::CreateConsumerGroup {
                stream,
                topic,
                name,
            } => {
                stream.put(&mut out);
                topic.put(&mut out);
                put_name(&mut out, name);
                code::CREATE_CONSUMER_GROUP
            }
            Self::GetUser { user } => {
                user.put(&mut out);
                code::GET_USER
            }
            Self::GetUsers => code::GET_USERS,
            Self::CreateUser {
                username,
                password,
                status,
                permissions,
                options,
            } => {
                put_name(&mut out, username);
                put_password(&mut out, password);
                out.put_u8(*status);
                crate::permissions::put_optional(&mut out, permissions.as_ref());
                put_options(&mut out, options);
                code::CREATE_USER
            }
            Self::DeleteUser { user } => {
                user.put(&mut out);
                code::DELETE_USER
            }
            Self::UpdateUser {
                user,
                username,
                status,
                options,
            } => {
                user.put(&mut out);
                out.put_u8(u8::from(username.is_some()));
                if let Some(username) = username {
                    put_name(&mut out, username);
                }
                out.put_u8(u8::from(status.is_some()));
                if let Some(status) = status {
                    out.put_u8(*status);
                }
                put_options(&mut out, options);
                code::UPDATE_USER
            }
            Self::UpdatePermissions { user, permissions } => {
                user.put(&mut out);
                crate::permissions::put_optional(&mut out, permissions.as_ref());
                code::UPDATE_PERMISSIONS
            }
            Self::ChangePassword {
                user,
                current_password,
                new_password,
            } => {
                user.put(&mut out);
                put_password(&mut out, current_password);
                put_password(&mut out, new_password);
                code::CHANGE_PASSWORD
            }
            Self::AttachConsumerSession {
                client_id,
                session,
                metadata_watermark,
            } => {
                out.put_u128(*client_id);
                out.put_u64(*session);
                out.put_u64(*metadata_watermark);
                code::ATTACH_CONSUMER_SESSION
            }
            Self::GetPollRouting(inner)
            | Self::PollMessagesOnPrimary(inner)
            | Self::GetConsumerOffsetRouting(inner) => {
                let (_, body) = inner.encode();
                out = body;
                match self {
                    Self::GetPollRouting(_) => code::GET_POLL_ROUTING,
                    Self::PollMessagesOnPrimary(_) => code::POLL_MESSAGES_ON_PRIMARY,
                    _ => code::GET_CONSUMER_OFFSET_ROUTING,
                }
            }
            Self::Other { code } => *code,
        };
        (code, out)
    }
}

/// A `SendMessages` body's metadata: its length (u32), then stream, topic, partitioning and
/// messages count, exactly as long as the length says.
fn read_send_metadata(
    r: &mut Reader<'_>,
) -> Result<(Identifier, Identifier, Partitioning, u32), WireError> {
    let at = r.position();
    let metadata_len = r.u32("metadata length")? as usize;
    let mut metadata = Reader::new(r.bytes(metadata_len, "send metadata")?);
    let stream = Identifier::read(&mut metadata, "stream id")?;
    let topic = Identifier::read(&mut metadata, "topic id")?;
    let partitioning = Partitioning::read(&mut metadata)?;
    let count = metadata.u32("messages count")?;
    if metadata.remaining() != 0 {
        return Err(r.invalid(
            "metadata length",
            at,
            format!(
                "{metadata_len} bytes, {} more than its fields",
                metadata.remaining()
            ),
        ));
    }
    Ok((stream, topic, partitioning, count))
}

/// Who and where, as polls and consumer offsets begin: the consumer, the stream, the topic and
/// the optional partition.
fn read_target(
    r: &mut Reader<'_>,
) -> Result<(Consumer, Identifier, Identifier, Option<u32>), WireError> {
    Ok((
        Consumer::read(r)?,
        Identifier::read(r, "stream id")?,
        Identifier::read(r, "topic id")?,
        read_optional_partition(r)?,
    ))
}

fn put_target(
    out: &mut Vec<u8>,
    consumer: &Consumer,
    stream: &Identifier,
    topic: &Identifier,
    partition: Option<u32>,
) {
    consumer.put(out);
    stream.put(out);
    topic.put(out);
    put_optional_partition(out, partition);
}

/// A password: a u8 length and UTF-8 (empty allowed on the wire; the server refuses it).
fn read_password(r: &mut Reader<'_>, what: &'static str) -> Result<String, WireError> {
    let len = r.u8(what)? as usize;
    Ok(r.str(len, what)?.to_owned())
}

fn put_password(out: &mut Vec<u8>, password: &str) {
    let bytes = &password.as_bytes()[..password.len().min(255)];
    out.put_u8(len_u8(bytes.len()));
    out.put_bytes(bytes);
}

/// A user's status: 1 active, 2 inactive.
fn read_status(r: &mut Reader<'_>) -> Result<u8, WireError> {
    let at = r.position();
    match r.u8("user status")? {
        status @ (1 | 2) => Ok(status),
        other => Err(r.invalid("user status", at, format!("{other}, not 1 or 2"))),
    }
}

fn read_flag(r: &mut Reader<'_>, what: &'static str) -> Result<bool, WireError> {
    let at = r.position();
    match r.u8(what)? {
        0 => Ok(false),
        1 => Ok(true),
        other => Err(r.invalid(what, at, format!("{other}, not 0 or 1"))),
    }
}

fn read_ack(r: &mut Reader<'_>) -> Result<u8, WireError> {
    let at = r.position();
    match r.u8("ack level")? {
        ack @ (0 | 1) => Ok(ack),
        other => Err(r.invalid("ack level", at, format!("{other}, not 0 or 1"))),
    }
}
