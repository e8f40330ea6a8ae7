//! The 256-byte headers every message on the client wire starts with.
//!
//! The first 128 bytes are the VSR frame prefix shared by every header: `checksum` u128 @0,
//! `checksum_body` u128 @16, `cluster` u128 @32, `size` u32 @48 (header plus body), `view` u32
//! @52, `release` u32 @56, `command` u8 @60, `replica` u8 @61, reserved to 128. Clients leave the
//! checksums and the cluster at zero and do not check them on replies, so neither side seals.

use crate::codes::{EvictionReason, Operation};
use thiserror::Error;

pub const HEADER_SIZE: usize = 256;

const SIZE: usize = 48;
const VIEW: usize = 52;
const COMMAND: usize = 60;
const REPLICA: usize = 61;

/// The command byte at offset 60.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Command {
    Request = 5,
    Reply = 8,
    Eviction = 13,
}

/// Why a header was refused. The server answers all of these with an eviction (or closes a
/// connection whose framing it can no longer trust: a size it cannot read past).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HeaderError {
    #[error("command byte {0} at offset 60 is not a {1}")]
    Command(u8, &'static str),
    #[error("size {size} at offset 48 is below the header's 256 bytes")]
    SizeBelowHeader { size: u32 },
    #[error("size {size} at offset 48 is above the limit of {max} bytes")]
    SizeAboveLimit { size: u32, max: u32 },
    #[error("operation byte {0} at offset 176 is not a client operation")]
    Operation(u8),
    #[error("client id at offset 128 is zero")]
    ClientZero,
    #[error("a Register must carry session 0 and request 0 (session {session}, request {request})")]
    RegisterNotFresh { session: u64, request: u64 },
    #[error("{operation:?} needs the session the login returned (session is 0)")]
    NoSession { operation: Operation },
}

fn u32_at(bytes: &[u8; HEADER_SIZE], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}
fn u64_at(bytes: &[u8; HEADER_SIZE], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}
fn u128_at(bytes: &[u8; HEADER_SIZE], at: usize) -> u128 {
    u128::from_le_bytes(bytes[at..at + 16].try_into().expect("16 bytes"))
}
fn put(bytes: &mut [u8; HEADER_SIZE], at: usize, value: &[u8]) {
    bytes[at..at + value.len()].copy_from_slice(value);
}

/// The size field of any header: how many bytes the whole message has. What a reader of the
/// stream needs before it knows anything else.
pub fn peek_size(header: &[u8; HEADER_SIZE]) -> u32 {
    u32_at(header, SIZE)
}

/// A client's request. Offsets: `client` u128 @128, `request_checksum` u128 @144, `timestamp`
/// u64 @160, `request` u64 @168, `operation` u8 @176 (7 bytes padding), `session` u64 @184,
/// `user_id` u32 @192, reserved 196..256 with the command code of a non-replicated request at
/// 196..200.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHeader {
    /// Header plus body.
    pub size: u32,
    pub client: u128,
    /// XXH3-64 of the body, widened, for metadata and session operations; 0 for partition and
    /// non-replicated ones. A retry with the same request number carries the same stamp.
    pub request_checksum: u128,
    pub timestamp: u64,
    /// The client's request number: 0 for `Register`, one more for each replicated request; a
    /// non-replicated request repeats the current one.
    pub request: u64,
    pub operation: Operation,
    /// What the login's reply handed the client; 0 before login.
    pub session: u64,
    pub user_id: u32,
    /// The command code: from the reserved bytes for a non-replicated request, else the
    /// operation's own.
    pub code: u32,
}

const CLIENT: usize = 128;
const REQUEST_CHECKSUM: usize = 144;
const TIMESTAMP: usize = 160;
const REQUEST: usize = 168;
const OPERATION: usize = 176;
const SESSION: usize = 184;
const USER_ID: usize = 192;
const NON_REPLICATED_CODE: usize = 196;

impl RequestHeader {
    /// Decodes and validates a request header as the server must before it reads the body:
    /// the command, the size within `max_size`, a client operation, a nonzero client, a fresh
    /// `Register`, a session on everything but `Register` and non-replicated requests.
    pub fn decode(bytes: &[u8; HEADER_SIZE], max_size: u32) -> Result<Self, HeaderError> {
        if bytes[COMMAND] != Command::Request as u8 {
            return Err(HeaderError::Command(bytes[COMMAND], "request (5)"));
        }
        let size = u32_at(bytes, SIZE);
        if (size as usize) < HEADER_SIZE {
            return Err(HeaderError::SizeBelowHeader { size });
        }
        if size > max_size {
            return Err(HeaderError::SizeAboveLimit {
                size,
                max: max_size,
            });
        }
        let operation =
            Operation::from_u8(bytes[OPERATION]).ok_or(HeaderError::Operation(bytes[OPERATION]))?;
        let client = u128_at(bytes, CLIENT);
        if client == 0 {
            return Err(HeaderError::ClientZero);
        }
        let request = u64_at(bytes, REQUEST);
        let session = u64_at(bytes, SESSION);
        match operation {
            Operation::Register if session != 0 || request != 0 => {
                return Err(HeaderError::RegisterNotFresh { session, request });
            }
            Operation::Register | Operation::NonReplicated => {}
            _ if session == 0 => return Err(HeaderError::NoSession { operation }),
            _ => {}
        }
        let code = match operation {
            Operation::NonReplicated => u32_at(bytes, NON_REPLICATED_CODE),
            _ => operation
                .code()
                .expect("every client operation but NonReplicated has a code"),
        };
        Ok(Self {
            size,
            client,
            request_checksum: u128_at(bytes, REQUEST_CHECKSUM),
            timestamp: u64_at(bytes, TIMESTAMP),
            request,
            operation,
            session,
            user_id: u32_at(bytes, USER_ID),
            code,
        })
    }

    /// The bytes a client sends (our client; the golden tests hold it to the SDK's).
    pub fn encode(&self) -> [u8; HEADER_SIZE] {
        let mut bytes = [0; HEADER_SIZE];
        put(&mut bytes, SIZE, &self.size.to_le_bytes());
        bytes[COMMAND] = Command::Request as u8;
        put(&mut bytes, CLIENT, &self.client.to_le_bytes());
        put(
            &mut bytes,
            REQUEST_CHECKSUM,
            &self.request_checksum.to_le_bytes(),
        );
        put(&mut bytes, TIMESTAMP, &self.timestamp.to_le_bytes());
        put(&mut bytes, REQUEST, &self.request.to_le_bytes());
        bytes[OPERATION] = self.operation as u8;
        put(&mut bytes, SESSION, &self.session.to_le_bytes());
        put(&mut bytes, USER_ID, &self.user_id.to_le_bytes());
        if self.operation == Operation::NonReplicated {
            put(&mut bytes, NON_REPLICATED_CODE, &self.code.to_le_bytes());
        }
        bytes
    }

    pub fn body_len(&self) -> usize {
        self.size as usize - HEADER_SIZE
    }
}

/// The server's answer. Offsets: `request_checksum` u128 @128 (echoed), `context` u128 @144,
/// `client` u128 @160 (echoed), `op` u64 @176, `commit` u64 @184, `timestamp` u64 @192,
/// `request` u64 @200 (echoed), `operation` u8 @208 (echoed), `status` u32 @216, reserved to
/// 256. A nonzero status is an error code and the body is then empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReplyHeader {
    pub size: u32,
    pub view: u32,
    pub replica: u8,
    pub request_checksum: u128,
    pub context: u128,
    pub client: u128,
    /// The op that executed the request (0 for a read).
    pub op: u64,
    /// The replying replica's commit point; the SDK keeps the highest a metadata reply showed.
    pub commit: u64,
    pub timestamp: u64,
    pub request: u64,
    /// The request's operation byte, echoed (the SDK decodes the body by it).
    pub operation: u8,
    pub status: u32,
}

impl ReplyHeader {
    /// The reply to `request` with a body of `body_len` bytes and status 0: the echoes filled in.
    pub fn answering(request: &RequestHeader, body_len: usize) -> Self {
        Self {
            size: crate::wire::len_u32(HEADER_SIZE + body_len),
            request_checksum: request.request_checksum,
            client: request.client,
            request: request.request,
            operation: request.operation as u8,
            ..Self::default()
        }
    }

    pub fn encode(&self) -> [u8; HEADER_SIZE] {
        let mut bytes = [0; HEADER_SIZE];
        put(&mut bytes, SIZE, &self.size.to_le_bytes());
        put(&mut bytes, VIEW, &self.view.to_le_bytes());
        bytes[COMMAND] = Command::Reply as u8;
        bytes[REPLICA] = self.replica;
        put(&mut bytes, 128, &self.request_checksum.to_le_bytes());
        put(&mut bytes, 144, &self.context.to_le_bytes());
        put(&mut bytes, 160, &self.client.to_le_bytes());
        put(&mut bytes, 176, &self.op.to_le_bytes());
        put(&mut bytes, 184, &self.commit.to_le_bytes());
        put(&mut bytes, 192, &self.timestamp.to_le_bytes());
        put(&mut bytes, 200, &self.request.to_le_bytes());
        bytes[208] = self.operation;
        put(&mut bytes, 216, &self.status.to_le_bytes());
        bytes
    }

    pub fn decode(bytes: &[u8; HEADER_SIZE]) -> Result<Self, HeaderError> {
        if bytes[COMMAND] != Command::Reply as u8 {
            return Err(HeaderError::Command(bytes[COMMAND], "reply (8)"));
        }
        let size = u32_at(bytes, SIZE);
        if (size as usize) < HEADER_SIZE {
            return Err(HeaderError::SizeBelowHeader { size });
        }
        Ok(Self {
            size,
            view: u32_at(bytes, VIEW),
            replica: bytes[REPLICA],
            request_checksum: u128_at(bytes, 128),
            context: u128_at(bytes, 144),
            client: u128_at(bytes, 160),
            op: u64_at(bytes, 176),
            commit: u64_at(bytes, 184),
            timestamp: u64_at(bytes, 192),
            request: u64_at(bytes, 200),
            operation: bytes[208],
            status: u32_at(bytes, 216),
        })
    }
}

/// The end of a client's session (256 bytes, no body): `client` u128 @128, the accepted protocol
/// window (max u32 @144, min u32 @148, only for `IncompatibleProtocol`), `reason` u8 @255.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Eviction {
    pub client: u128,
    pub reason: EvictionReason,
    pub protocol_max: u32,
    pub protocol_min: u32,
}

impl Eviction {
    pub fn new(client: u128, reason: EvictionReason) -> Self {
        let (protocol_max, protocol_min) = if reason == EvictionReason::IncompatibleProtocol {
            (
                crate::codes::PROTOCOL_VERSION,
                crate::codes::PROTOCOL_VERSION_MIN,
            )
        } else {
            (0, 0)
        };
        Self {
            client,
            reason,
            protocol_max,
            protocol_min,
        }
    }

    pub fn encode(&self) -> [u8; HEADER_SIZE] {
        let mut bytes = [0; HEADER_SIZE];
        put(
            &mut bytes,
            SIZE,
            &crate::wire::len_u32(HEADER_SIZE).to_le_bytes(),
        );
        bytes[COMMAND] = Command::Eviction as u8;
        put(&mut bytes, 128, &self.client.to_le_bytes());
        put(&mut bytes, 144, &self.protocol_max.to_le_bytes());
        put(&mut bytes, 148, &self.protocol_min.to_le_bytes());
        bytes[255] = self.reason as u8;
        bytes
    }

    pub fn decode(bytes: &[u8; HEADER_SIZE]) -> Result<Self, HeaderError> {
        if bytes[COMMAND] != Command::Eviction as u8 {
            return Err(HeaderError::Command(bytes[COMMAND], "eviction (13)"));
        }
        Ok(Self {
            client: u128_at(bytes, 128),
            reason: EvictionReason::from_u8(bytes[255]).unwrap_or(EvictionReason::SessionError),
            protocol_max: u32_at(bytes, 144),
            protocol_min: u32_at(bytes, 148),
        })
    }
}

/// XXH3-64 of a body, widened: the `request_checksum` the SDK stamps on metadata and session
/// requests.
pub fn request_checksum(body: &[u8]) -> u128 {
    u128::from(twox_hash::XxHash3_64::oneshot(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(operation: Operation, session: u64, request: u64) -> RequestHeader {
        RequestHeader {
            size: 256,
            client: 7,
            request_checksum: 0,
            timestamp: 0,
            request,
            operation,
            session,
            user_id: 0,
            code: operation.code().unwrap_or(1),
        }
    }

    #[test]
    fn a_request_round_trips_and_each_rule_refuses() {
        let ping = request(Operation::NonReplicated, 0, 0);
        assert_eq!(RequestHeader::decode(&ping.encode(), 1 << 20), Ok(ping));
        let create = request(Operation::CreateStream, 3, 1);
        assert_eq!(RequestHeader::decode(&create.encode(), 1 << 20), Ok(create));

        let mut bytes = request(Operation::CreateStream, 0, 1).encode();
        assert_eq!(
            RequestHeader::decode(&bytes, 1 << 20),
            Err(HeaderError::NoSession {
                operation: Operation::CreateStream
            })
        );
        bytes = request(Operation::Register, 1, 0).encode();
        assert!(matches!(
            RequestHeader::decode(&bytes, 1 << 20),
            Err(HeaderError::RegisterNotFresh { .. })
        ));
        bytes = ping.encode();
        bytes[128..144].fill(0);
        assert_eq!(
            RequestHeader::decode(&bytes, 1 << 20),
            Err(HeaderError::ClientZero)
        );
        bytes = ping.encode();
        bytes[176] = 64;
        assert_eq!(
            RequestHeader::decode(&bytes, 1 << 20),
            Err(HeaderError::Operation(64))
        );
        bytes = ping.encode();
        bytes[48..52].copy_from_slice(&255u32.to_le_bytes());
        assert_eq!(
            RequestHeader::decode(&bytes, 1 << 20),
            Err(HeaderError::SizeBelowHeader { size: 255 })
        );
        bytes[48..52].copy_from_slice(&(2u32 << 20).to_le_bytes());
        assert!(matches!(
            RequestHeader::decode(&bytes, 1 << 20),
            Err(HeaderError::SizeAboveLimit { .. })
        ));
        bytes = ping.encode();
        bytes[60] = 8;
        assert!(matches!(
            RequestHeader::decode(&bytes, 1 << 20),
            Err(HeaderError::Command(8, _))
        ));
    }

    #[test]
    fn a_reply_and_an_eviction_round_trip() {
        let reply = ReplyHeader {
            size: 300,
            view: 2,
            replica: 1,
            request_checksum: 9,
            context: 0,
            client: 7,
            op: 5,
            commit: 5,
            timestamp: 11,
            request: 3,
            operation: 128,
            status: 0,
        };
        assert_eq!(ReplyHeader::decode(&reply.encode()), Ok(reply));
        let eviction = Eviction::new(7, EvictionReason::IncompatibleProtocol);
        assert_eq!(Eviction::decode(&eviction.encode()), Ok(eviction));
    }
}
