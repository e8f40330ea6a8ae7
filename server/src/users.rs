//! Users and their permissions (issue #47): who may log in, and what each request needs.
//!
//! The root user is the configuration's (`[root]`, id 0) and may do anything. Every other user
//! is metadata state (`iggy_metadata::User`): a name, an argon2id hash computed by the node that
//! took the create or the password change (the op carries the hash, so every replica stores the
//! same), a status (an inactive user cannot log in) and permissions in the client wire's own
//! encoding (`iggy_protocol::permissions`), checked on every request by [`authorize`].
//!
//! What a permission grants, as upstream's validator reads them: a global flag covers every
//! stream, a stream's flag every topic in it; `manage` implies `read`; `manage_streams` implies
//! managing topics too; polls and offsets need `poll_messages` or a read of the topic; a send
//! needs `send_messages` or managing the topic. Reading the server (stats, clients) needs
//! `read_servers` or `manage_servers`; users need `read_users` or `manage_users`, except a user
//! reading itself or changing its own password.

use iggy_metadata::State;
use iggy_protocol::permissions::{
    GlobalPermissions, Permissions, StreamPermissions, TopicPermissions,
};
use iggy_protocol::response::UserInfo;
use iggy_protocol::{Identifier, Request, status};

use crate::client_port::PortConfig;

/// The root user's id (the configuration's user).
pub const ROOT_USER_ID: u32 = 0;

/// The user `username` names, if it may log in: `(id, password hash)` of the root or of an
/// active user of `state`.
pub fn account(state: &State, config: &PortConfig, username: &str) -> Option<(u32, String)> {
    if username == config.root_username {
        return Some((ROOT_USER_ID, config.root_password_hash.clone()));
    }
    state
        .users
        .values()
        .find(|u| u.username == username && u.status == 1)
        .map(|u| (u.id, u.password_hash.clone()))
}

/// The user an identifier names: the root (id 0 or its name) or a user of `state`.
pub fn find_user(state: &State, config: &PortConfig, id: &Identifier) -> Result<u32, u32> {
    match id {
        Identifier::Numeric(ROOT_USER_ID) => Ok(ROOT_USER_ID),
        Identifier::Numeric(n) if state.users.contains_key(n) => Ok(*n),
        Identifier::Name(name) if *name == config.root_username => Ok(ROOT_USER_ID),
        Identifier::Name(name) => state
            .users
            .values()
            .find(|u| u.username == *name)
            .map(|u| u.id)
            .ok_or(status::RESOURCE_NOT_FOUND),
        Identifier::Numeric(_) => Err(status::RESOURCE_NOT_FOUND),
    }
}

/// Every user as `GetUsers` lists them, the root first.
pub fn user_infos(state: &State, config: &PortConfig) -> Vec<UserInfo> {
    let mut out = vec![root_info(config)];
    out.extend(state.users.values().map(|u| UserInfo {
        id: u.id,
        created_at: u.created_at,
        status: u.status,
        username: u.username.clone(),
        options: Vec::new(),
    }));
    out
}

fn root_info(config: &PortConfig) -> UserInfo {
    UserInfo {
        id: ROOT_USER_ID,
        created_at: 0,
        status: 1,
        username: config.root_username.clone(),
        options: Vec::new(),
    }
}

/// One user and its permissions (`GetUser`); the root holds every global permission.
pub fn user_details(
    state: &State,
    config: &PortConfig,
    id: u32,
) -> Option<(UserInfo, Option<Permissions>)> {
    if id == ROOT_USER_ID {
        return Some((root_info(config), Some(root_permissions())));
    }
    state_user_details(state, id)
}

/// The SHA-256 of a token's secret, in hex: what the state keeps and a login looks up (a
/// token is 256 random bits, so a fast hash is as good as a slow one).
pub fn token_hash(token: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(token.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// A fresh secret: 32 random bytes in hex (64 characters, within a wire name).
pub fn new_token() -> String {
    let mut bytes = [0u8; 32];
    if let Err(e) = getrandom::fill(&mut bytes) {
        tracing::error!(error = %e, "no randomness for a token");
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// When a token created at `now_us` with the wire's `expiry` stops working: 0 (never) for the
/// SDK's server default (0) and never (`u64::MAX`), else `now_us + expiry`.
pub fn token_expiry_at(now_us: u64, expiry: u64) -> u64 {
    match expiry {
        0 | u64::MAX => 0,
        duration => now_us.saturating_add(duration).max(1),
    }
}

/// The user a token's hash logs in as, if the token exists, has not expired at `now_us`, and
/// its user is the root or active.
pub fn token_user(state: &State, hash: &str, now_us: u64) -> Option<u32> {
    let ((user, _), token) = state.tokens.iter().find(|(_, t)| t.hash == hash)?;
    if token.expiry_at != 0 && now_us >= token.expiry_at {
        return None;
    }
    (*user == ROOT_USER_ID || state.users.get(user).is_some_and(|u| u.status == 1)).then_some(*user)
}

/// A user's tokens as `GetPersonalAccessTokens` lists them: name and expiry (0: never).
pub fn tokens_of(state: &State, user: u32) -> Vec<(String, u64)> {
    state
        .tokens
        .iter()
        .filter(|((owner, _), _)| *owner == user)
        .map(|((_, name), token)| (name.clone(), token.expiry_at))
        .collect()
}

/// Usernames are 3 to 50 bytes, passwords 3 to 100 (upstream's bounds).
pub fn check_username(username: &str) -> Result<(), u32> {
    if (3..=50).contains(&username.len()) {
        Ok(())
    } else {
        Err(status::INVALID_USERNAME)
    }
}

pub fn check_password(password: &str) -> Result<(), u32> {
    if (3..=100).contains(&password.len()) {
        Ok(())
    } else {
        Err(status::INVALID_PASSWORD)
    }
}

/// A user of the state and its permissions (the reply to a create).
pub fn state_user_details(state: &State, id: u32) -> Option<(UserInfo, Option<Permissions>)> {
    let user = state.users.get(&id)?;
    Some((
        UserInfo {
            id: user.id,
            created_at: user.created_at,
            status: user.status,
            username: user.username.clone(),
            options: Vec::new(),
        },
        user.permissions
            .as_deref()
            .and_then(|bytes| Permissions::from_bytes(bytes).ok()),
    ))
}

fn root_permissions() -> Permissions {
    Permissions {
        global: GlobalPermissions {
            manage_servers: true,
            read_servers: true,
            manage_users: true,
            read_users: true,
            manage_streams: true,
            read_streams: true,
            manage_topics: true,
            read_topics: true,
            poll_messages: true,
            send_messages: true,
        },
        streams: Vec::new(),
    }
}

/// What a user may do where: its global flags and those of one stream and topic.
struct Scope<'a> {
    g: GlobalPermissions,
    stream: Option<&'a StreamPermissions>,
    topic: Option<&'a TopicPermissions>,
}

impl Scope<'_> {
    fn manage_streams(&self) -> bool {
        self.g.manage_streams
    }
    fn manage_stream(&self) -> bool {
        self.g.manage_streams || self.stream.is_some_and(|s| s.manage_stream)
    }
    fn read_stream(&self) -> bool {
        self.manage_stream() || self.g.read_streams || self.stream.is_some_and(|s| s.read_stream)
    }
    fn manage_topics(&self) -> bool {
        self.manage_stream() || self.g.manage_topics || self.stream.is_some_and(|s| s.manage_topics)
    }
    fn read_topics(&self) -> bool {
        self.manage_topics()
            || self.read_stream()
            || self.g.read_topics
            || self.stream.is_some_and(|s| s.read_topics)
    }
    fn manage_topic(&self) -> bool {
        self.manage_topics() || self.topic.is_some_and(|t| t.manage_topic)
    }
    fn read_topic(&self) -> bool {
        self.manage_topic() || self.read_topics() || self.topic.is_some_and(|t| t.read_topic)
    }
    fn poll(&self) -> bool {
        self.read_topic()
            || self.g.poll_messages
            || self.stream.is_some_and(|s| s.poll_messages)
            || self.topic.is_some_and(|t| t.poll_messages)
    }
    fn send(&self) -> bool {
        self.manage_topic()
            || self.g.send_messages
            || self.stream.is_some_and(|s| s.send_messages)
            || self.topic.is_some_and(|t| t.send_messages)
    }
}

/// The stream and topic a request names, as wire ids (unknown names resolve to none: the
/// request is then judged by the global flags, and routing answers the not-found).
fn target(state: &State, request: &Request) -> (Option<u32>, Option<u32>) {
    let (stream, topic) = match request {
        Request::GetStream { stream }
        | Request::DeleteStream { stream }
        | Request::UpdateStream { stream, .. }
        | Request::PurgeStream { stream }
        | Request::GetTopics { stream }
        | Request::CreateTopic { stream, .. } => (stream, None),
        Request::GetTopic { stream, topic }
        | Request::DeleteTopic { stream, topic }
        | Request::UpdateTopic { stream, topic, .. }
        | Request::CreatePartitions { stream, topic, .. }
        | Request::DeletePartitions { stream, topic, .. }
        | Request::PurgeTopic { stream, topic }
        | Request::FlushUnsavedBuffer { stream, topic, .. }
        | Request::DeleteSegments { stream, topic, .. }
        | Request::SendMessages { stream, topic, .. }
        | Request::PollMessages { stream, topic, .. }
        | Request::GetConsumerOffset { stream, topic, .. }
        | Request::StoreConsumerOffset { stream, topic, .. }
        | Request::DeleteConsumerOffset { stream, topic, .. }
        | Request::GetConsumerGroup { stream, topic, .. }
        | Request::GetConsumerGroups { stream, topic }
        | Request::CreateConsumerGroup { stream, topic, .. }
        | Request::DeleteConsumerGroup { stream, topic, .. }
        | Request::JoinConsumerGroup { stream, topic, .. }
        | Request::LeaveConsumerGroup { stream, topic, .. }
        | Request::SyncConsumerGroup { stream, topic, .. } => (stream, Some(topic)),
        Request::GetPollRouting(inner)
        | Request::PollMessagesOnPrimary(inner)
        | Request::GetConsumerOffsetRouting(inner) => return target(state, inner),
        _ => return (None, None),
    };
    let Ok(stream) = crate::translate::find_stream(state, stream) else {
        return (None, None);
    };
    let topic = topic.and_then(|topic| {
        crate::translate::find_topic(state, &Identifier::Numeric(stream.id - 1), topic).ok()
    });
    (Some(stream.id - 1), topic.map(|(_, topic)| topic.id - 1))
}

/// Whether user `user` may send `request`: `Ok`, or the status to refuse it with
/// (`Unauthorized`, 41). The root may do anything; a user the state no longer holds (deleted
/// since its login) nothing but what needs no permission.
pub fn authorize(
    state: &State,
    config: &PortConfig,
    user: u32,
    request: &Request,
) -> Result<(), u32> {
    if user == ROOT_USER_ID {
        return Ok(());
    }
    let permissions = state
        .users
        .get(&user)
        .and_then(|u| u.permissions.as_deref())
        .and_then(|bytes| Permissions::from_bytes(bytes).ok())
        .unwrap_or_default();
    let (stream_id, topic_id) = target(state, request);
    let stream = stream_id.and_then(|id| permissions.stream(id));
    let scope = Scope {
        g: permissions.global,
        stream,
        topic: topic_id.and_then(|id| stream.and_then(|s| s.topic(id))),
    };
    let g = permissions.global;
    let allowed = match request {
        Request::Ping
        | Request::LoginRegister { .. }
        | Request::LoginRegisterWithToken { .. }
        | Request::Logout
        | Request::GetMe
        | Request::GetClusterMetadata
        | Request::DescribeOptions { .. }
        | Request::AttachConsumerSession { .. }
        | Request::GetPersonalAccessTokens
        | Request::CreatePersonalAccessToken { .. }
        | Request::DeletePersonalAccessToken { .. }
        | Request::Other { .. } => true,
        Request::GetStats
        | Request::GetSnapshot { .. }
        | Request::GetClients
        | Request::GetClient { .. } => g.read_servers || g.manage_servers,
        Request::GetUser { user: id } => {
            g.read_users || g.manage_users || find_user(state, config, id) == Ok(user)
        }
        Request::GetUsers => g.read_users || g.manage_users,
        Request::CreateUser { .. }
        | Request::DeleteUser { .. }
        | Request::UpdateUser { .. }
        | Request::UpdatePermissions { .. } => g.manage_users,
        Request::ChangePassword { user: id, .. } => {
            g.manage_users || find_user(state, config, id) == Ok(user)
        }
        Request::GetStreams => g.read_streams || g.manage_streams,
        Request::CreateStream { .. } => scope.manage_streams(),
        Request::GetStream { .. } => scope.read_stream(),
        Request::DeleteStream { .. }
        | Request::UpdateStream { .. }
        | Request::PurgeStream { .. } => scope.manage_stream(),
        Request::GetTopics { .. } => scope.read_topics(),
        Request::CreateTopic { .. } => scope.manage_topics(),
        Request::GetTopic { .. }
        | Request::GetConsumerGroup { .. }
        | Request::GetConsumerGroups { .. } => scope.read_topic(),
        Request::DeleteTopic { .. }
        | Request::UpdateTopic { .. }
        | Request::CreatePartitions { .. }
        | Request::DeletePartitions { .. }
        | Request::DeleteSegments { .. }
        | Request::PurgeTopic { .. }
        | Request::CreateConsumerGroup { .. }
        | Request::DeleteConsumerGroup { .. } => scope.manage_topic(),
        Request::SendMessages { .. } | Request::FlushUnsavedBuffer { .. } => scope.send(),
        Request::PollMessages { .. }
        | Request::GetPollRouting(_)
        | Request::PollMessagesOnPrimary(_)
        | Request::GetConsumerOffsetRouting(_)
        | Request::GetConsumerOffset { .. }
        | Request::StoreConsumerOffset { .. }
        | Request::DeleteConsumerOffset { .. }
        | Request::JoinConsumerGroup { .. }
        | Request::LeaveConsumerGroup { .. }
        | Request::SyncConsumerGroup { .. } => scope.poll(),
    };
    if allowed {
        Ok(())
    } else {
        Err(status::UNAUTHORIZED)
    }
}
