//! The 256-byte header in front of every WAL entry (`[header][body]`).
//!
//! Invariants:
//! - `checksum` covers bytes `[16, 256)` of the encoded header, so every other field, the body
//!   checksum and the parent link included, is protected by it;
//! - `checksum_body` covers exactly `size - 256` body bytes;
//! - `parent` is the `checksum` of the previous entry's header: the log is a hash chain, and an
//!   entry cannot be moved, dropped or replaced without breaking the link after it;
//! - `size >= 256`, `version == 2`, `command != 0`, and the reserved bytes are zero;
//! - the header is the VSR prepare: a primary builds it once, every replica journals it byte
//!   for byte, so `client`, `request` and `request_checksum` match a replayed request to its
//!   original reply and `group` names the consensus group the entry belongs to.
//!
//! Layout (little-endian; see `docs/format.md`, "Entry header"):
//!
//! ```text
//!   0 checksum u128 | 16 checksum_body u128 | 32 parent u128 | 48 cluster u128
//!  64 op u64 | 72 commit u64 | 80 timestamp_ns u64 | 88 view u32 | 92 size u32
//!  96 version u16 | 98 command u8 | 99 replica u8 | 100 operation u32
//! 104 client u128 | 120 request_checksum u128 | 136 group u128 | 152 request u64
//! 160..256 reserved (zero)
//! ```

use crate::checksum::{Checksum, checksum};
use crate::constants::HEADER_SIZE;
use crate::le;

pub const CHECKSUM_OFFSET: usize = 0;
pub const CHECKSUM_BODY_OFFSET: usize = CHECKSUM_OFFSET + size_of::<u128>();
pub const PARENT_OFFSET: usize = CHECKSUM_BODY_OFFSET + size_of::<u128>();
pub const CLUSTER_OFFSET: usize = PARENT_OFFSET + size_of::<u128>();
pub const OP_OFFSET: usize = CLUSTER_OFFSET + size_of::<u128>();
pub const COMMIT_OFFSET: usize = OP_OFFSET + size_of::<u64>();
pub const TIMESTAMP_OFFSET: usize = COMMIT_OFFSET + size_of::<u64>();
pub const VIEW_OFFSET: usize = TIMESTAMP_OFFSET + size_of::<u64>();
pub const SIZE_OFFSET: usize = VIEW_OFFSET + size_of::<u32>();
pub const VERSION_OFFSET: usize = SIZE_OFFSET + size_of::<u32>();
pub const COMMAND_OFFSET: usize = VERSION_OFFSET + size_of::<u16>();
pub const REPLICA_OFFSET: usize = COMMAND_OFFSET + size_of::<u8>();
pub const OPERATION_OFFSET: usize = REPLICA_OFFSET + size_of::<u8>();
pub const CLIENT_OFFSET: usize = OPERATION_OFFSET + size_of::<u32>();
pub const REQUEST_CHECKSUM_OFFSET: usize = CLIENT_OFFSET + size_of::<u128>();
pub const GROUP_OFFSET: usize = REQUEST_CHECKSUM_OFFSET + size_of::<u128>();
pub const REQUEST_OFFSET: usize = GROUP_OFFSET + size_of::<u128>();
pub const RESERVED_OFFSET: usize = REQUEST_OFFSET + size_of::<u64>();
/// The first byte covered by the header checksum.
pub const CHECKSUMMED_OFFSET: usize = CHECKSUM_BODY_OFFSET;

const _: () = assert!(CHECKSUM_BODY_OFFSET == 16);
const _: () = assert!(PARENT_OFFSET == 32);
const _: () = assert!(CLUSTER_OFFSET == 48);
const _: () = assert!(OP_OFFSET == 64);
const _: () = assert!(VIEW_OFFSET == 88);
const _: () = assert!(SIZE_OFFSET == 92);
const _: () = assert!(VERSION_OFFSET == 96);
const _: () = assert!(OPERATION_OFFSET == 100);
const _: () = assert!(CLIENT_OFFSET == 104);
const _: () = assert!(REQUEST_CHECKSUM_OFFSET == 120);
const _: () = assert!(GROUP_OFFSET == 136);
const _: () = assert!(REQUEST_OFFSET == 152);
const _: () = assert!(RESERVED_OFFSET == 160);
const _: () = assert!(RESERVED_OFFSET < HEADER_SIZE);
const _: () = assert!(HEADER_SIZE == 256);

/// [`HEADER_SIZE`] as the `u32` the `size` field holds.
const HEADER_SIZE_U32: u32 = 256;
const _: () = assert!(HEADER_SIZE_U32 as usize == HEADER_SIZE);

/// The only header version this build reads and writes. Version 1 (no client, request or
/// group) is refused: nothing was deployed with it.
pub const HEADER_VERSION: u16 = 2;

/// What an entry's body is (the `operation` field): the state machine operation it carries.
pub mod operation {
    /// Nothing: the empty op a new primary commits to start its view.
    pub const NOOP: u32 = 1;
    /// A message batch appended to a partition.
    pub const MESSAGES: u32 = 2;
    /// A consumer's (or consumer group's) offset stored in a partition.
    pub const CONSUMER_OFFSET: u32 = 3;
    /// An operation of the metadata state machine.
    pub const METADATA: u32 = 4;

    /// The name of an operation, for tools.
    #[must_use]
    pub fn name(operation: u32) -> &'static str {
        match operation {
            NOOP => "noop",
            MESSAGES => "messages",
            CONSUMER_OFFSET => "consumer-offset",
            METADATA => "metadata",
            _ => "unknown",
        }
    }
}

/// What an entry is. `0` is never valid, so an all-zero (never written) region never decodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Command {
    /// A replicated operation in the log.
    Prepare,
    /// A command this build does not know; kept so offline tools can still show the header.
    Other(u8),
}

impl Command {
    #[must_use]
    pub fn to_u8(self) -> u8 {
        match self {
            Self::Prepare => 1,
            Self::Other(code) => code,
        }
    }

    #[must_use]
    pub fn from_u8(code: u8) -> Self {
        match code {
            1 => Self::Prepare,
            code => Self::Other(code),
        }
    }
}

/// A decoded, verified entry header. `checksum` is derived: [`Header::encode`] computes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Header {
    pub checksum_body: Checksum,
    pub parent: Checksum,
    pub cluster: u128,
    pub op: u64,
    pub commit: u64,
    pub timestamp_ns: u64,
    pub view: u32,
    /// Header plus body, in bytes.
    pub size: u32,
    pub command: Command,
    /// The replica that built the prepare (the primary of `view`).
    pub replica: u8,
    /// What the body is ([`operation`]).
    pub operation: u32,
    /// The client session the request came from (0: none, e.g. a primary's no-op).
    pub client: u128,
    /// The client's request number: a replay under the same number gets the original reply.
    pub request: u64,
    /// The checksum of the client's request message (what the client wire echoes).
    pub request_checksum: Checksum,
    /// The consensus group the entry belongs to (0: the metadata group).
    pub group: u128,
}

/// Why 256 bytes are not a valid header. Each reason is distinct so tools can say which.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    #[error("header shorter than {HEADER_SIZE} bytes: {len}")]
    Truncated { len: usize },
    #[error("header checksum mismatch: stored {stored:#034x}, computed {computed:#034x}")]
    ChecksumMismatch {
        stored: Checksum,
        computed: Checksum,
    },
    #[error("unknown header version {version} (this build reads {HEADER_VERSION})")]
    UnknownVersion { version: u16 },
    #[error("command 0 is reserved (never-written or zeroed space)")]
    ZeroCommand,
    #[error("size {size} is smaller than the {HEADER_SIZE}-byte header")]
    SizeTooSmall { size: u32 },
    #[error("reserved byte at header offset {offset} is {value:#04x}, not zero")]
    ReservedNotZero { offset: usize, value: u8 },
}

/// The fields of a prepare that come from the replica and the client rather than from the log
/// it joins (its op, parent and group).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PrepareMeta {
    pub view: u32,
    /// The primary's commit point when it prepared (piggybacked to the backups).
    pub commit: u64,
    /// The replica preparing (the primary of `view`).
    pub replica: u8,
    pub client: u128,
    pub request: u64,
    pub request_checksum: Checksum,
    /// The primary's clock, in microseconds.
    pub now_us: u64,
}

/// Where a prepare joins a log: the log's cluster and group, and the op and checksum of the
/// entry it follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Position {
    pub cluster: u128,
    pub group: u128,
    /// The op of the entry before (the new prepare is `after + 1`).
    pub after: u64,
    /// That entry's header checksum.
    pub parent: Checksum,
}

impl Header {
    /// The prepare of `operation` with `body` at `position`, stamped with `meta` (its timestamp
    /// in nanoseconds: `meta.now_us * 1000`). `None` when the body is too large for a header's
    /// `size`.
    #[must_use]
    pub fn prepare(
        position: Position,
        operation: u32,
        meta: &PrepareMeta,
        body: &[u8],
    ) -> Option<Self> {
        Some(Self {
            checksum_body: crate::checksum(body),
            parent: position.parent,
            cluster: position.cluster,
            op: position.after + 1,
            commit: meta.commit,
            timestamp_ns: meta.now_us.saturating_mul(1000),
            view: meta.view,
            size: u32::try_from(HEADER_SIZE + body.len()).ok()?,
            command: Command::Prepare,
            replica: meta.replica,
            operation,
            client: meta.client,
            request: meta.request,
            request_checksum: meta.request_checksum,
            group: position.group,
        })
    }

    /// Length of the body that follows this header.
    #[must_use]
    pub fn body_size(&self) -> u32 {
        self.size.saturating_sub(HEADER_SIZE_U32)
    }

    /// Encodes the header and computes its checksum.
    #[must_use]
    pub fn encode(&self) -> [u8; HEADER_SIZE] {
        assert!(
            self.size as usize >= HEADER_SIZE,
            "encoding a header with size {}",
            self.size
        );
        assert!(
            self.command.to_u8() != 0,
            "encoding a header with command 0"
        );
        let mut bytes = [0u8; HEADER_SIZE];
        le::put_u128(&mut bytes, CHECKSUM_BODY_OFFSET, self.checksum_body);
        le::put_u128(&mut bytes, PARENT_OFFSET, self.parent);
        le::put_u128(&mut bytes, CLUSTER_OFFSET, self.cluster);
        le::put_u64(&mut bytes, OP_OFFSET, self.op);
        le::put_u64(&mut bytes, COMMIT_OFFSET, self.commit);
        le::put_u64(&mut bytes, TIMESTAMP_OFFSET, self.timestamp_ns);
        le::put_u32(&mut bytes, VIEW_OFFSET, self.view);
        le::put_u32(&mut bytes, SIZE_OFFSET, self.size);
        le::put_u16(&mut bytes, VERSION_OFFSET, HEADER_VERSION);
        bytes[COMMAND_OFFSET] = self.command.to_u8();
        bytes[REPLICA_OFFSET] = self.replica;
        le::put_u32(&mut bytes, OPERATION_OFFSET, self.operation);
        le::put_u128(&mut bytes, CLIENT_OFFSET, self.client);
        le::put_u128(&mut bytes, REQUEST_CHECKSUM_OFFSET, self.request_checksum);
        le::put_u128(&mut bytes, GROUP_OFFSET, self.group);
        le::put_u64(&mut bytes, REQUEST_OFFSET, self.request);
        let sum = checksum(&bytes[CHECKSUMMED_OFFSET..]);
        le::put_u128(&mut bytes, CHECKSUM_OFFSET, sum);
        bytes
    }

    /// The checksum [`Header::encode`] would store: the value the next entry's `parent` names.
    #[must_use]
    pub fn checksum(&self) -> Checksum {
        stored_checksum(&self.encode())
    }

    /// Decodes and verifies a header from the first 256 bytes of `bytes`.
    ///
    /// The checksum is verified before any field is trusted; version, command, size and reserved
    /// bytes are checked after it, so a valid checksum over a future version still reports
    /// `UnknownVersion` rather than misreading fields.
    pub fn decode(bytes: &[u8]) -> Result<Self, HeaderError> {
        let bytes: &[u8; HEADER_SIZE] = bytes
            .get(..HEADER_SIZE)
            .and_then(|b| b.try_into().ok())
            .ok_or(HeaderError::Truncated { len: bytes.len() })?;
        let stored = stored_checksum(bytes);
        let computed = checksum(&bytes[CHECKSUMMED_OFFSET..]);
        if stored != computed {
            return Err(HeaderError::ChecksumMismatch { stored, computed });
        }
        Self::decode_fields(bytes)
    }

    /// Decodes the fields without verifying the checksum, for offline tools that show what a
    /// damaged header claims. Never use the result to decide what is durable.
    pub fn decode_unverified(bytes: &[u8; HEADER_SIZE]) -> Result<Self, HeaderError> {
        Self::decode_fields(bytes)
    }

    fn decode_fields(bytes: &[u8; HEADER_SIZE]) -> Result<Self, HeaderError> {
        let field = |offset| le::u128_at(bytes, offset).unwrap_or_default();
        let field_u64 = |offset| le::u64_at(bytes, offset).unwrap_or_default();
        let field_u32 = |offset| le::u32_at(bytes, offset).unwrap_or_default();
        let version = le::u16_at(bytes, VERSION_OFFSET).unwrap_or_default();
        if version != HEADER_VERSION {
            return Err(HeaderError::UnknownVersion { version });
        }
        if bytes[COMMAND_OFFSET] == 0 {
            return Err(HeaderError::ZeroCommand);
        }
        let size = field_u32(SIZE_OFFSET);
        if size < HEADER_SIZE_U32 {
            return Err(HeaderError::SizeTooSmall { size });
        }
        if let Some(position) = le::first_nonzero(&bytes[RESERVED_OFFSET..]) {
            let offset = RESERVED_OFFSET + position;
            return Err(HeaderError::ReservedNotZero {
                offset,
                value: bytes[offset],
            });
        }
        Ok(Self {
            checksum_body: field(CHECKSUM_BODY_OFFSET),
            parent: field(PARENT_OFFSET),
            cluster: field(CLUSTER_OFFSET),
            op: field_u64(OP_OFFSET),
            commit: field_u64(COMMIT_OFFSET),
            timestamp_ns: field_u64(TIMESTAMP_OFFSET),
            view: field_u32(VIEW_OFFSET),
            size,
            command: Command::from_u8(bytes[COMMAND_OFFSET]),
            replica: bytes[REPLICA_OFFSET],
            operation: field_u32(OPERATION_OFFSET),
            client: field(CLIENT_OFFSET),
            request: field_u64(REQUEST_OFFSET),
            request_checksum: field(REQUEST_CHECKSUM_OFFSET),
            group: field(GROUP_OFFSET),
        })
    }

    /// Whether `body` is the body this header vouches for (length and checksum).
    #[must_use]
    pub fn body_matches(&self, body: &[u8]) -> bool {
        body.len() as u64 == u64::from(self.body_size()) && checksum(body) == self.checksum_body
    }
}

/// The checksum stored in the first 16 bytes of an encoded header.
#[must_use]
pub fn stored_checksum(bytes: &[u8; HEADER_SIZE]) -> Checksum {
    le::u128_at(bytes, CHECKSUM_OFFSET).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Header {
        let body = b"body bytes";
        Header {
            checksum_body: checksum(body),
            parent: 0xAB,
            cluster: 7,
            op: 42,
            commit: 40,
            timestamp_ns: 1_700_000_000_000_000_000,
            view: 3,
            size: HEADER_SIZE_U32 + u32::try_from(body.len()).unwrap(),
            command: Command::Prepare,
            replica: 1,
            operation: 9,
            client: 0xC11E_0001,
            request: 77,
            request_checksum: 0xFACE,
            group: 1 << 96 | 3,
        }
    }

    #[test]
    fn decode_rejects_each_defect_with_its_own_error() {
        let good = sample().encode();
        assert_eq!(Header::decode(&good), Ok(sample()));
        assert!(sample().body_matches(b"body bytes"));
        assert!(!sample().body_matches(b"body byteS"));

        assert_eq!(
            Header::decode(&good[..255]),
            Err(HeaderError::Truncated { len: 255 })
        );
        assert!(matches!(
            Header::decode(&[0u8; HEADER_SIZE]),
            Err(HeaderError::ChecksumMismatch { .. })
        ));

        // Re-seal a modified header so that only the semantic check can catch it.
        let reseal = |mut bytes: [u8; HEADER_SIZE]| {
            let sum = checksum(&bytes[CHECKSUMMED_OFFSET..]);
            le::put_u128(&mut bytes, CHECKSUM_OFFSET, sum);
            bytes
        };
        for version in [1, 3] {
            let mut bytes = good;
            le::put_u16(&mut bytes, VERSION_OFFSET, version);
            assert_eq!(
                Header::decode(&reseal(bytes)),
                Err(HeaderError::UnknownVersion { version })
            );
        }
        let mut bytes = good;
        bytes[COMMAND_OFFSET] = 0;
        assert_eq!(
            Header::decode(&reseal(bytes)),
            Err(HeaderError::ZeroCommand)
        );
        let mut bytes = good;
        le::put_u32(&mut bytes, SIZE_OFFSET, 255);
        assert_eq!(
            Header::decode(&reseal(bytes)),
            Err(HeaderError::SizeTooSmall { size: 255 })
        );
        let mut bytes = good;
        bytes[200] = 1;
        assert_eq!(
            Header::decode(&reseal(bytes)),
            Err(HeaderError::ReservedNotZero {
                offset: 200,
                value: 1
            })
        );
    }

    #[test]
    fn parent_is_the_previous_header_checksum() {
        let first = sample();
        let second = Header {
            parent: first.checksum(),
            op: first.op + 1,
            ..first
        };
        assert_eq!(stored_checksum(&first.encode()), second.parent);
        assert_ne!(first.checksum(), second.checksum());
    }
}
