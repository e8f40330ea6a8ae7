//! Command codes, operations, statuses and eviction reasons of the pinned wire (iggy 0.11.0).
//!
//! A client names what it wants twice: the 32-bit command code of the classic protocol, and the
//! one-byte VSR operation in the request header. A replicated command travels as its operation
//! alone (the code follows from it); everything else travels as [`Operation::NonReplicated`] with
//! the code in the header's reserved bytes.

/// Command codes (`iggy_binary_protocol` 0.11.0 `codes.rs`), the ones this crate decodes.
pub mod code {
    pub const PING: u32 = 1;
    pub const GET_STATS: u32 = 10;
    pub const GET_SNAPSHOT: u32 = 11;
    pub const GET_CLUSTER_METADATA: u32 = 12;
    pub const DESCRIBE_OPTIONS: u32 = 13;
    pub const GET_ME: u32 = 20;
    pub const GET_CLIENT: u32 = 21;
    pub const GET_CLIENTS: u32 = 22;
    pub const GET_USER: u32 = 31;
    pub const GET_USERS: u32 = 32;
    pub const CREATE_USER: u32 = 33;
    pub const DELETE_USER: u32 = 34;
    pub const UPDATE_USER: u32 = 35;
    pub const UPDATE_PERMISSIONS: u32 = 36;
    pub const CHANGE_PASSWORD: u32 = 37;
    pub const LOGIN_USER: u32 = 38;
    pub const GET_PERSONAL_ACCESS_TOKENS: u32 = 41;
    pub const CREATE_PERSONAL_ACCESS_TOKEN: u32 = 42;
    pub const DELETE_PERSONAL_ACCESS_TOKEN: u32 = 43;
    pub const LOGOUT_USER: u32 = 39;
    pub const LOGIN_REGISTER: u32 = 40;
    pub const LOGIN_WITH_PERSONAL_ACCESS_TOKEN: u32 = 44;
    pub const LOGIN_REGISTER_WITH_PAT: u32 = 45;
    pub const POLL_MESSAGES: u32 = 100;
    pub const SEND_MESSAGES: u32 = 101;
    pub const FLUSH_UNSAVED_BUFFER: u32 = 102;
    pub const GET_CONSUMER_OFFSET: u32 = 120;
    pub const STORE_CONSUMER_OFFSET: u32 = 121;
    pub const DELETE_CONSUMER_OFFSET: u32 = 122;
    pub const GET_STREAM: u32 = 200;
    pub const GET_STREAMS: u32 = 201;
    pub const CREATE_STREAM: u32 = 202;
    pub const DELETE_STREAM: u32 = 203;
    pub const UPDATE_STREAM: u32 = 204;
    pub const PURGE_STREAM: u32 = 205;
    pub const GET_TOPIC: u32 = 300;
    pub const GET_TOPICS: u32 = 301;
    pub const CREATE_TOPIC: u32 = 302;
    pub const DELETE_TOPIC: u32 = 303;
    pub const UPDATE_TOPIC: u32 = 304;
    pub const PURGE_TOPIC: u32 = 305;
    pub const CREATE_PARTITIONS: u32 = 402;
    pub const DELETE_PARTITIONS: u32 = 403;
    pub const DELETE_SEGMENTS: u32 = 503;
    pub const ATTACH_CONSUMER_SESSION: u32 = 14;
    pub const GET_POLL_ROUTING: u32 = 103;
    pub const POLL_MESSAGES_ON_PRIMARY: u32 = 104;
    pub const GET_CONSUMER_OFFSET_ROUTING: u32 = 123;
    pub const GET_CONSUMER_GROUP: u32 = 600;
    pub const GET_CONSUMER_GROUPS: u32 = 601;
    pub const CREATE_CONSUMER_GROUP: u32 = 602;
    pub const DELETE_CONSUMER_GROUP: u32 = 603;
    pub const JOIN_CONSUMER_GROUP: u32 = 604;
    pub const LEAVE_CONSUMER_GROUP: u32 = 605;
    pub const SYNC_CONSUMER_GROUP: u32 = 606;
}

/// The operation byte of a request header (offset 176).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Operation {
    Register = 1,
    NonReplicated = 2,
    Logout = 3,
    CreateStream = 128,
    UpdateStream = 129,
    DeleteStream = 130,
    PurgeStream = 131,
    CreateTopic = 132,
    UpdateTopic = 133,
    DeleteTopic = 134,
    PurgeTopic = 135,
    CreatePartitions = 136,
    DeletePartitions = 137,
    DeleteSegments = 138,
    CreateConsumerGroup = 139,
    DeleteConsumerGroup = 140,
    CreateUser = 141,
    UpdateUser = 142,
    DeleteUser = 143,
    ChangePassword = 144,
    UpdatePermissions = 145,
    CreatePersonalAccessToken = 146,
    DeletePersonalAccessToken = 147,
    JoinConsumerGroup = 148,
    LeaveConsumerGroup = 149,
    SendMessages = 160,
    StoreConsumerOffset = 161,
    DeleteConsumerOffset = 162,
}

/// The replicated operations and their command codes (0.11.0 `dispatch.rs`).
const REPLICATED: &[(Operation, u32)] = &[
    (Operation::CreateStream, 202),
    (Operation::UpdateStream, 204),
    (Operation::DeleteStream, 203),
    (Operation::PurgeStream, 205),
    (Operation::CreateTopic, 302),
    (Operation::UpdateTopic, 304),
    (Operation::DeleteTopic, 303),
    (Operation::PurgeTopic, 305),
    (Operation::CreatePartitions, 402),
    (Operation::DeletePartitions, 403),
    (Operation::DeleteSegments, 503),
    (Operation::CreateConsumerGroup, 602),
    (Operation::DeleteConsumerGroup, 603),
    (Operation::CreateUser, 33),
    (Operation::UpdateUser, 35),
    (Operation::DeleteUser, 34),
    (Operation::ChangePassword, 37),
    (Operation::UpdatePermissions, 36),
    (Operation::CreatePersonalAccessToken, 42),
    (Operation::DeletePersonalAccessToken, 43),
    (Operation::JoinConsumerGroup, 604),
    (Operation::LeaveConsumerGroup, 605),
    (Operation::SendMessages, 101),
    (Operation::StoreConsumerOffset, 121),
    (Operation::DeleteConsumerOffset, 122),
];

impl Operation {
    /// The operation of a byte, `None` for 0, the server-internal range (64..128) and unknown bytes.
    pub fn from_u8(byte: u8) -> Option<Self> {
        match byte {
            1 => Some(Self::Register),
            2 => Some(Self::NonReplicated),
            3 => Some(Self::Logout),
            _ => REPLICATED
                .iter()
                .find(|(operation, _)| *operation as u8 == byte)
                .map(|(operation, _)| *operation),
        }
    }

    /// The command code a replicated operation stands for.
    pub fn code(self) -> Option<u32> {
        match self {
            Self::Register => Some(code::LOGIN_REGISTER),
            Self::Logout => Some(code::LOGOUT_USER),
            Self::NonReplicated => None,
            _ => REPLICATED
                .iter()
                .find(|(operation, _)| *operation == self)
                .map(|(_, code)| *code),
        }
    }

    /// The operation a client puts in the header for a command code (the SDK's
    /// `operation_for_code`): login codes register, 39 logs out, the table's codes replicate, and
    /// every other code is non-replicated.
    pub fn for_code(code: u32) -> Self {
        match code {
            code::LOGIN_REGISTER | code::LOGIN_REGISTER_WITH_PAT => Self::Register,
            code::LOGOUT_USER => Self::Logout,
            _ => REPLICATED
                .iter()
                .find(|(_, c)| *c == code)
                .map_or(Self::NonReplicated, |(operation, _)| *operation),
        }
    }

    /// Metadata mutations (the metadata group's operations other than sessions).
    pub fn is_metadata(self) -> bool {
        (128..160).contains(&(self as u8))
    }

    /// Operations of a partition's group.
    pub fn is_partition(self) -> bool {
        self as u8 >= 160
    }

    /// Replies whose body starts with a result section (`[count u32]` then `count` pairs of
    /// `{index u32, code u32}`): metadata mutations and the two consumer-offset writes, and a
    /// non-empty `Register` reply.
    pub fn is_result_framed(self) -> bool {
        self.is_metadata()
            || matches!(
                self,
                Self::Register | Self::StoreConsumerOffset | Self::DeleteConsumerOffset
            )
    }
}

/// Status codes (`IggyError` codes of `iggy_common` 0.11.0) this server sends.
pub mod status {
    pub const ERROR: u32 = 1;
    pub const INVALID_COMMAND: u32 = 3;
    pub const INVALID_FORMAT: u32 = 4;
    pub const FEATURE_UNAVAILABLE: u32 = 5;
    pub const INVALID_IDENTIFIER: u32 = 6;
    pub const RESOURCE_NOT_FOUND: u32 = 20;
    pub const STALE_CLIENT: u32 = 30;
    pub const UNAUTHENTICATED: u32 = 40;
    pub const UNAUTHORIZED: u32 = 41;
    pub const INVALID_CREDENTIALS: u32 = 42;
    pub const INVALID_USERNAME: u32 = 43;
    pub const INVALID_PASSWORD: u32 = 44;
    pub const INVALID_USER_STATUS: u32 = 45;
    pub const USER_ALREADY_EXISTS: u32 = 46;
    pub const CANNOT_DELETE_USER: u32 = 48;
    pub const CANNOT_CHANGE_PERMISSIONS: u32 = 49;
    pub const INVALID_PERSONAL_ACCESS_TOKEN_NAME: u32 = 50;
    pub const PERSONAL_ACCESS_TOKEN_ALREADY_EXISTS: u32 = 51;
    pub const PERSONAL_ACCESS_TOKENS_LIMIT_REACHED: u32 = 52;
    pub const INVALID_PERSONAL_ACCESS_TOKEN: u32 = 53;
    pub const USERS_LIMIT_REACHED: u32 = 55;
    /// The outcome is unknown: the same request on the same session may have committed.
    pub const TRANSIENT_NOT_COMMITTED: u32 = 57;
    /// The request was never admitted; it may be sent anywhere again.
    pub const TRANSIENT_NOT_ACCEPTED: u32 = 58;
    pub const NOT_PRIMARY: u32 = 89;
    pub const STREAM_ID_NOT_FOUND: u32 = 1009;
    pub const STREAM_NAME_NOT_FOUND: u32 = 1010;
    pub const STREAM_NAME_ALREADY_EXISTS: u32 = 1012;
    pub const TOPIC_ID_NOT_FOUND: u32 = 2010;
    pub const TOPIC_NAME_NOT_FOUND: u32 = 2011;
    pub const TOPIC_NAME_ALREADY_EXISTS: u32 = 2013;
    pub const INVALID_PARTITIONS_COUNT: u32 = 2019;
    pub const PARTITION_NOT_FOUND: u32 = 3007;
    pub const NO_PARTITIONS: u32 = 3008;
    pub const CONSUMER_OFFSET_NOT_FOUND: u32 = 3021;
    pub const INVALID_MESSAGES_COUNT: u32 = 4009;
    pub const TOO_BIG_MESSAGE_PAYLOAD: u32 = 4022;
    pub const INVALID_OFFSET: u32 = 4100;
    pub const INVALID_STREAM_NAME: u32 = 1013;
    pub const INVALID_TOPIC_NAME: u32 = 2014;
    pub const TOO_MANY_PARTITIONS: u32 = 2015;
    pub const INVALID_REPLICATION_FACTOR: u32 = 2018;
    pub const INVALID_MESSAGE_CHECKSUM: u32 = 4027;
    pub const UNSUPPORTED_OPTION_KEY: u32 = 4041;
    pub const INVALID_OPTION_VALUE: u32 = 4042;
    pub const CONSUMER_GROUP_ID_NOT_FOUND: u32 = 5000;
    pub const CONSUMER_GROUP_NAME_NOT_FOUND: u32 = 5003;
    pub const CONSUMER_GROUP_NAME_ALREADY_EXISTS: u32 = 5004;
    pub const INVALID_CONSUMER_GROUP_NAME: u32 = 5005;
    pub const CONSUMER_GROUP_MEMBER_NOT_FOUND: u32 = 5006;
    pub const CANNOT_CREATE_CONSUMER_GROUP_INFO: u32 = 5007;
    pub const CONSUMER_GROUP_PARTITION_NOT_OWNED: u32 = 5009;
    pub const INCOMPATIBLE_PROTOCOL_VERSION: u32 = 14003;
}

/// Why the server ends a client's session (the eviction header's last byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum EvictionReason {
    NoSession = 1,
    ClientReleaseTooLow = 2,
    ClientReleaseTooHigh = 3,
    InvalidRequestOperation = 4,
    InvalidRequestBody = 5,
    InvalidRequestBodySize = 6,
    SessionTooLow = 7,
    SessionReleaseMismatch = 8,
    InvalidCredentials = 9,
    InvalidToken = 10,
    UserInactive = 11,
    SessionError = 12,
    StaleClient = 13,
    IncompatibleProtocol = 14,
    MalformedLogin = 15,
}

impl EvictionReason {
    pub fn from_u8(byte: u8) -> Option<Self> {
        use EvictionReason::*;
        [
            NoSession,
            ClientReleaseTooLow,
            ClientReleaseTooHigh,
            InvalidRequestOperation,
            InvalidRequestBody,
            InvalidRequestBodySize,
            SessionTooLow,
            SessionReleaseMismatch,
            InvalidCredentials,
            InvalidToken,
            UserInactive,
            SessionError,
            StaleClient,
            IncompatibleProtocol,
            MalformedLogin,
        ]
        .into_iter()
        .find(|reason| *reason as u8 == byte)
    }
}

/// The protocol version packed as the SDK packs it: `major << 20 | minor << 10 | patch`.
pub const fn pack_version(major: u32, minor: u32, patch: u32) -> u32 {
    (major << 20) | (minor << 10) | patch
}

/// The version this crate speaks: 0.11.0.
pub const PROTOCOL_VERSION: u32 = pack_version(0, 11, 0);

/// The oldest client version accepted: the same minor (the SDK's own rule, patch-compatible).
pub const PROTOCOL_VERSION_MIN: u32 = PROTOCOL_VERSION & !0x3ff;

/// Whether a client's packed version is one this crate speaks.
pub fn is_compatible(client: u32) -> bool {
    client >= PROTOCOL_VERSION_MIN && (client >> 10) <= (PROTOCOL_VERSION >> 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_replicated_operation_maps_to_its_code_and_back() {
        for (operation, code) in REPLICATED {
            assert_eq!(Operation::from_u8(*operation as u8), Some(*operation));
            assert_eq!(operation.code(), Some(*code));
            assert_eq!(Operation::for_code(*code), *operation);
        }
        assert_eq!(Operation::for_code(code::PING), Operation::NonReplicated);
        assert_eq!(
            Operation::for_code(code::LOGIN_REGISTER_WITH_PAT),
            Operation::Register
        );
        assert_eq!(Operation::from_u8(0), None);
        assert_eq!(
            Operation::from_u8(64),
            None,
            "internal operations are not a client's"
        );
    }

    #[test]
    fn versions() {
        assert_eq!(PROTOCOL_VERSION, 11 << 10);
        assert!(is_compatible(pack_version(0, 11, 3)));
        assert!(!is_compatible(pack_version(0, 10, 9)));
        assert!(!is_compatible(pack_version(0, 12, 2)));
    }
}
