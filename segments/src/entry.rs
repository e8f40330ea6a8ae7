//! The kinds of entry a partition's log carries, by the header's `operation`: message batches,
//! consumer offset stores (Iggy's `StoreConsumerOffset` is a partition-plane operation, so it is
//! replicated with the partition), and the empty op a new primary commits. Every replica
//! journals the same bytes; boot, `iggy-fsck` and `iggy-inspect` read every kind.
//!
//! A consumer offset store's body (16 bytes, little-endian; see `docs/format.md`, "Partition
//! entries"):
//!
//! ```text
//! 0 kind u8 (1 consumer, 2 group) | 1..4 zero | 4 id u32 | 8 offset u64
//! ```

use iggy_format::batch::{self, BatchError, BatchHeader};
use iggy_format::{Header, le, operation};

use crate::offsets::ConsumerKind;

/// The body size of a consumer offset store.
pub const CONSUMER_OFFSET_BODY_SIZE: usize = 16;

/// What one partition entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A message batch (its header, peeked).
    Messages(BatchHeader),
    /// A consumer's offset.
    ConsumerOffset {
        kind: ConsumerKind,
        id: u32,
        offset: u64,
    },
    /// Nothing (a new primary's op).
    Noop,
}

/// A consumer offset store in the log: the entry `op` sets the consumer's offset once it
/// commits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OffsetEntry {
    pub op: u64,
    pub kind: ConsumerKind,
    pub id: u32,
    pub offset: u64,
}

/// The body of a consumer offset store.
#[must_use]
pub fn encode_consumer_offset(
    kind: ConsumerKind,
    id: u32,
    offset: u64,
) -> [u8; CONSUMER_OFFSET_BODY_SIZE] {
    let mut body = [0u8; CONSUMER_OFFSET_BODY_SIZE];
    body[0] = kind.code();
    le::put_u32(&mut body, 4, id);
    le::put_u64(&mut body, 8, offset);
    body
}

/// Why an entry's body does not fit its operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntryError {
    /// A message batch whose header does not verify.
    Batch(BatchError),
    /// Any other kind that does not hold together.
    Invalid(String),
}

impl std::fmt::Display for EntryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Batch(error) => error.fmt(f),
            Self::Invalid(reason) => f.write_str(reason),
        }
    }
}

/// What `header`'s entry is, from its body's first bytes (`head`: at least the batch header of
/// a batch, the whole body of the other kinds) and the body's length. Only the batch *header*
/// is checked here (boot reads no more; every body was verified by its checksum); a backup's
/// journal verifies a whole batch first.
pub fn peek(header: &Header, head: &[u8]) -> Result<Kind, EntryError> {
    let body_len = usize::try_from(header.body_size()).unwrap_or(usize::MAX);
    let invalid = |reason: String| Err(EntryError::Invalid(reason));
    match header.operation {
        operation::MESSAGES => batch::peek_header(head, body_len)
            .map(Kind::Messages)
            .map_err(EntryError::Batch),
        operation::CONSUMER_OFFSET => {
            let Some(body) = head
                .get(..CONSUMER_OFFSET_BODY_SIZE)
                .filter(|_| body_len == CONSUMER_OFFSET_BODY_SIZE)
            else {
                return invalid(format!(
                    "a consumer offset store of {body_len} bytes, not {CONSUMER_OFFSET_BODY_SIZE}"
                ));
            };
            let Some(kind) = ConsumerKind::from_code(body[0]) else {
                return invalid(format!("unknown consumer kind {}", body[0]));
            };
            if body[1..4].iter().any(|b| *b != 0) {
                return invalid("reserved bytes of a consumer offset store are not zero".into());
            }
            Ok(Kind::ConsumerOffset {
                kind,
                id: le::u32_at(body, 4).unwrap_or_default(),
                offset: le::u64_at(body, 8).unwrap_or_default(),
            })
        }
        operation::NOOP if body_len == 0 => Ok(Kind::Noop),
        operation::NOOP => invalid(format!("a no-op with a {body_len}-byte body")),
        other => invalid(format!(
            "operation {other} ({}) is not a partition operation",
            operation::name(other)
        )),
    }
}
