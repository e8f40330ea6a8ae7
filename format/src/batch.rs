//! The message batch: the layout Apache Iggy's clients send, which the server validates, stamps
//! and stores verbatim as a WAL entry body, and serves polls from (see `docs/format.md`,
//! "Message batch").
//!
//! ```text
//! batch  = [batch header: 256 B][frame]...        frame = [frame header: 48 B][payload][user headers]
//! header =   0 partition_id u64 |   8 base_offset u64 |  16 base_timestamp u64
//!           24 origin_timestamp u64 | 32 batch_length u64 | 40 batch_checksum u64
//!           48 message_count u32 | 52..256 reserved (zero)
//! frame  =   0 checksum u64 | 8 id u128 | 24 offset_delta u32 | 28 timestamp_delta u32
//!           32 user_headers_length u32 | 36 payload_length u32 | 40..48 reserved (zero)
//! ```
//!
//! Invariants a validating [`decode`] checks, each with its own error: `batch_length` equals the
//! bytes given (no trailing bytes), reserved bytes are zero, every frame lies inside the batch,
//! `offset_delta` is the frame's index, every frame checksum verifies, the frame count equals
//! `message_count`, and the batch checksum verifies. Decoding never panics and allocates nothing:
//! [`Batch::messages`] iterates the verified bytes in place.

use crate::le;

pub const BATCH_HEADER_SIZE: usize = 256;
pub const FRAME_HEADER_SIZE: usize = 48;

const PARTITION_ID_OFFSET: usize = 0;
const BASE_OFFSET_OFFSET: usize = 8;
const BASE_TIMESTAMP_OFFSET: usize = 16;
const ORIGIN_TIMESTAMP_OFFSET: usize = 24;
const BATCH_LENGTH_OFFSET: usize = 32;
const BATCH_CHECKSUM_OFFSET: usize = 40;
const MESSAGE_COUNT_OFFSET: usize = 48;
const BATCH_RESERVED_OFFSET: usize = 52;

const FRAME_CHECKSUM_OFFSET: usize = 0;
const FRAME_ID_OFFSET: usize = 8;
const FRAME_OFFSET_DELTA_OFFSET: usize = 24;
const FRAME_TIMESTAMP_DELTA_OFFSET: usize = 28;
const FRAME_USER_HEADERS_LENGTH_OFFSET: usize = 32;
const FRAME_PAYLOAD_LENGTH_OFFSET: usize = 36;
const FRAME_RESERVED_OFFSET: usize = 40;

const _: () = assert!(BATCH_RESERVED_OFFSET == MESSAGE_COUNT_OFFSET + 4);
const _: () = assert!(BATCH_RESERVED_OFFSET < BATCH_HEADER_SIZE);
const _: () = assert!(FRAME_RESERVED_OFFSET == FRAME_PAYLOAD_LENGTH_OFFSET + 4);
const _: () = assert!(FRAME_RESERVED_OFFSET + 8 == FRAME_HEADER_SIZE);

/// Why bytes are not a valid batch. Offsets are from the start of the batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    #[error("batch of {len} bytes is shorter than its {BATCH_HEADER_SIZE}-byte header")]
    Truncated { len: usize },
    #[error("batch_length {declared} does not match the {actual} bytes given")]
    LengthMismatch { declared: u64, actual: usize },
    #[error("reserved byte at offset {offset} is not zero")]
    ReservedNotZero { offset: usize },
    #[error("a batch holds at least one message")]
    Empty,
    #[error("message {index} at offset {offset} runs past the end of the batch")]
    FrameTruncated { index: u32, offset: usize },
    #[error("message {index} at offset {offset}: offset_delta {found}, expected {index}")]
    OffsetDelta {
        index: u32,
        offset: usize,
        found: u32,
    },
    #[error(
        "message {index} at offset {offset}: checksum {stored:#018x}, computed {computed:#018x}"
    )]
    FrameChecksum {
        index: u32,
        offset: usize,
        stored: u64,
        computed: u64,
    },
    #[error("message_count {declared} but the batch holds {found} messages")]
    CountMismatch { declared: u32, found: u32 },
    #[error("batch checksum {stored:#018x}, computed {computed:#018x}")]
    BatchChecksum { stored: u64, computed: u64 },
    #[error("a batch of more than u32::MAX messages or bytes per message")]
    TooLarge,
}

/// The fields of the 256-byte batch header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BatchHeader {
    pub partition_id: u64,
    pub base_offset: u64,
    pub base_timestamp: u64,
    pub origin_timestamp: u64,
    pub batch_length: u64,
    pub batch_checksum: u64,
    pub message_count: u32,
}

impl BatchHeader {
    fn read(bytes: &[u8]) -> Self {
        let u64_at = |offset| le::u64_at(bytes, offset).unwrap_or_default();
        Self {
            partition_id: u64_at(PARTITION_ID_OFFSET),
            base_offset: u64_at(BASE_OFFSET_OFFSET),
            base_timestamp: u64_at(BASE_TIMESTAMP_OFFSET),
            origin_timestamp: u64_at(ORIGIN_TIMESTAMP_OFFSET),
            batch_length: u64_at(BATCH_LENGTH_OFFSET),
            batch_checksum: u64_at(BATCH_CHECKSUM_OFFSET),
            message_count: le::u32_at(bytes, MESSAGE_COUNT_OFFSET).unwrap_or_default(),
        }
    }
}

/// One message of a verified batch, borrowed from its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message<'a> {
    pub checksum: u64,
    pub id: u128,
    pub offset_delta: u32,
    pub timestamp_delta: u32,
    pub payload: &'a [u8],
    pub user_headers: &'a [u8],
}

/// A batch whose every check passed ([`decode`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Batch<'a> {
    pub header: BatchHeader,
    bytes: &'a [u8],
}

impl<'a> Batch<'a> {
    /// The verified bytes.
    #[must_use]
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The messages, in order (parsed in place; the bounds were checked by `decode`).
    pub fn messages(&self) -> impl Iterator<Item = Message<'a>> + 'a {
        let bytes = self.bytes;
        let mut offset = BATCH_HEADER_SIZE;
        std::iter::from_fn(move || {
            let (message, next) = frame_at(bytes, offset)?;
            offset = next;
            Some(message)
        })
    }
}

/// Parses the frame at `offset`: the message and the next frame's offset; `None` past the end
/// or if the frame does not fit.
fn frame_at(bytes: &[u8], offset: usize) -> Option<(Message<'_>, usize)> {
    let header = bytes.get(offset..offset.checked_add(FRAME_HEADER_SIZE)?)?;
    let user_headers_length = le::u32_at(header, FRAME_USER_HEADERS_LENGTH_OFFSET)? as usize;
    let payload_length = le::u32_at(header, FRAME_PAYLOAD_LENGTH_OFFSET)? as usize;
    let payload_start = offset + FRAME_HEADER_SIZE;
    let headers_start = payload_start.checked_add(payload_length)?;
    let end = headers_start.checked_add(user_headers_length)?;
    let message = Message {
        checksum: le::u64_at(header, FRAME_CHECKSUM_OFFSET)?,
        id: le::u128_at(header, FRAME_ID_OFFSET)?,
        offset_delta: le::u32_at(header, FRAME_OFFSET_DELTA_OFFSET)?,
        timestamp_delta: le::u32_at(header, FRAME_TIMESTAMP_DELTA_OFFSET)?,
        payload: bytes.get(payload_start..headers_start)?,
        user_headers: bytes.get(headers_start..end)?,
    };
    Some((message, end))
}

/// XXH3-64 of a frame: its header after the checksum field, its payload and user headers.
fn frame_checksum(frame: &[u8]) -> u64 {
    crate::checksum::checksum_64(&frame[FRAME_ID_OFFSET..])
}

/// The batch checksum: XXH3-64 over the header fields (partition_id, base_offset,
/// base_timestamp, origin_timestamp, batch_length, each 8 bytes LE; message_count, 4 bytes LE)
/// followed by every frame's 8-byte checksum field.
fn batch_checksum(header: &BatchHeader, frame_checksums: impl Iterator<Item = u64>) -> u64 {
    // One contiguous input and one-shot hashing: the same digest as feeding the pieces to a
    // streaming hasher, at a fraction of the per-piece cost (a batch has hundreds of frames).
    let mut input = Vec::with_capacity(44 + 8 * usize::try_from(header.message_count).unwrap_or(0));
    for field in [
        header.partition_id,
        header.base_offset,
        header.base_timestamp,
        header.origin_timestamp,
        header.batch_length,
    ] {
        input.extend_from_slice(&field.to_le_bytes());
    }
    input.extend_from_slice(&header.message_count.to_le_bytes());
    for checksum in frame_checksums {
        input.extend_from_slice(&checksum.to_le_bytes());
    }
    crate::checksum::checksum_64(&input)
}

/// Checks only the batch header of a batch of `batch_len` bytes whose first bytes are
/// `header_bytes`: its length, reserved bytes and message count, not the frames or checksums.
/// For stored batches whose bytes are already vouched for (a WAL entry's body checksum), when
/// only the header is needed (boot's continuity checks, index rebuilds).
pub fn peek_header(header_bytes: &[u8], batch_len: usize) -> Result<BatchHeader, BatchError> {
    let header_bytes = header_bytes
        .get(..BATCH_HEADER_SIZE)
        .ok_or(BatchError::Truncated { len: batch_len })?;
    let header = BatchHeader::read(header_bytes);
    if header.batch_length != batch_len as u64 {
        return Err(BatchError::LengthMismatch {
            declared: header.batch_length,
            actual: batch_len,
        });
    }
    if let Some(position) = le::first_nonzero(&header_bytes[BATCH_RESERVED_OFFSET..]) {
        return Err(BatchError::ReservedNotZero {
            offset: BATCH_RESERVED_OFFSET + position,
        });
    }
    if header.message_count == 0 {
        return Err(BatchError::Empty);
    }
    Ok(header)
}

/// Validates `bytes` as one whole batch.
pub fn decode(bytes: &[u8]) -> Result<Batch<'_>, BatchError> {
    let header = peek_header(bytes, bytes.len())?;
    let mut offset = BATCH_HEADER_SIZE;
    let mut index = 0u32;
    while offset < bytes.len() {
        let truncated = BatchError::FrameTruncated { index, offset };
        let (message, next) = frame_at(bytes, offset).ok_or(truncated)?;
        let frame = &bytes[offset..next];
        if let Some(position) = le::first_nonzero(&frame[FRAME_RESERVED_OFFSET..FRAME_HEADER_SIZE])
        {
            let offset = offset + FRAME_RESERVED_OFFSET + position;
            return Err(BatchError::ReservedNotZero { offset });
        }
        if message.offset_delta != index {
            return Err(BatchError::OffsetDelta {
                index,
                offset,
                found: message.offset_delta,
            });
        }
        let computed = frame_checksum(frame);
        if computed != message.checksum {
            return Err(BatchError::FrameChecksum {
                index,
                offset,
                stored: message.checksum,
                computed,
            });
        }
        offset = next;
        index = index.checked_add(1).ok_or(BatchError::TooLarge)?;
    }
    if index != header.message_count {
        return Err(BatchError::CountMismatch {
            declared: header.message_count,
            found: index,
        });
    }
    let batch = Batch { header, bytes };
    let computed = batch_checksum(&header, batch.messages().map(|m| m.checksum));
    if computed != header.batch_checksum {
        return Err(BatchError::BatchChecksum {
            stored: header.batch_checksum,
            computed,
        });
    }
    Ok(batch)
}

/// A message to put in a batch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NewMessage {
    pub id: u128,
    /// Microseconds after the batch's `origin_timestamp`.
    pub timestamp_delta: u32,
    pub payload: Vec<u8>,
    pub user_headers: Vec<u8>,
}

/// Encodes a batch as a client sends it: `partition_id`, `base_offset` and `base_timestamp` are
/// zero (the server stamps them with [`stamp`]); offset deltas are the message indexes.
pub fn encode(origin_timestamp: u64, messages: &[NewMessage]) -> Result<Vec<u8>, BatchError> {
    if messages.is_empty() {
        return Err(BatchError::Empty);
    }
    let message_count = u32::try_from(messages.len()).map_err(|_| BatchError::TooLarge)?;
    let mut bytes = vec![0u8; BATCH_HEADER_SIZE];
    for (index, message) in messages.iter().enumerate() {
        let start = bytes.len();
        let mut frame = [0u8; FRAME_HEADER_SIZE];
        let too_large = |_| BatchError::TooLarge;
        le::put_u128(&mut frame, FRAME_ID_OFFSET, message.id);
        le::put_u32(
            &mut frame,
            FRAME_OFFSET_DELTA_OFFSET,
            u32::try_from(index).map_err(too_large)?,
        );
        le::put_u32(
            &mut frame,
            FRAME_TIMESTAMP_DELTA_OFFSET,
            message.timestamp_delta,
        );
        let headers_length = u32::try_from(message.user_headers.len()).map_err(too_large)?;
        let payload_length = u32::try_from(message.payload.len()).map_err(too_large)?;
        le::put_u32(&mut frame, FRAME_USER_HEADERS_LENGTH_OFFSET, headers_length);
        le::put_u32(&mut frame, FRAME_PAYLOAD_LENGTH_OFFSET, payload_length);
        bytes.extend_from_slice(&frame);
        bytes.extend_from_slice(&message.payload);
        bytes.extend_from_slice(&message.user_headers);
        let checksum = frame_checksum(&bytes[start..]);
        le::put_u64(&mut bytes, start + FRAME_CHECKSUM_OFFSET, checksum);
    }
    let header = BatchHeader {
        origin_timestamp,
        batch_length: bytes.len() as u64,
        message_count,
        ..BatchHeader::default()
    };
    write_header(&mut bytes, header);
    Ok(bytes)
}

/// Writes `header` (with a recomputed batch checksum) into the first 256 bytes of a batch whose
/// frames are already in place and verified.
fn write_header(bytes: &mut [u8], mut header: BatchHeader) {
    let frames = Batch {
        header,
        bytes: &*bytes,
    };
    header.batch_checksum = batch_checksum(&header, frames.messages().map(|m| m.checksum));
    le::put_u64(bytes, PARTITION_ID_OFFSET, header.partition_id);
    le::put_u64(bytes, BASE_OFFSET_OFFSET, header.base_offset);
    le::put_u64(bytes, BASE_TIMESTAMP_OFFSET, header.base_timestamp);
    le::put_u64(bytes, ORIGIN_TIMESTAMP_OFFSET, header.origin_timestamp);
    le::put_u64(bytes, BATCH_LENGTH_OFFSET, header.batch_length);
    le::put_u64(bytes, BATCH_CHECKSUM_OFFSET, header.batch_checksum);
    le::put_u32(bytes, MESSAGE_COUNT_OFFSET, header.message_count);
}

/// The server's stamp: validates the client's batch, then sets its partition, base offset and
/// base timestamp and recomputes the batch checksum, in place. The frames are unchanged, so
/// the client's per-message checksums still verify.
pub fn stamp(
    bytes: &mut [u8],
    partition_id: u64,
    base_offset: u64,
    base_timestamp: u64,
) -> Result<BatchHeader, BatchError> {
    let header = decode(bytes)?.header;
    let stamped = BatchHeader {
        partition_id,
        base_offset,
        base_timestamp,
        ..header
    };
    write_header(bytes, stamped);
    // Paired check: what was stamped reads back as stamped, and its batch checksum verifies. The
    // frames were verified by the decode above and are unchanged, so their checksums are not
    // recomputed (that would hash every payload a second time).
    let verified = peek_header(bytes, bytes.len())?;
    let frames = Batch {
        header: verified,
        bytes: &*bytes,
    };
    let recomputed = batch_checksum(&verified, frames.messages().map(|m| m.checksum));
    assert!(
        verified.base_offset == base_offset && recomputed == verified.batch_checksum,
        "a stamped batch must verify"
    );
    Ok(verified)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages() -> Vec<NewMessage> {
        (0..3u8)
            .map(|i| NewMessage {
                id: u128::from(i) + 100,
                timestamp_delta: u32::from(i) * 10,
                payload: vec![i; 10 + usize::from(i)],
                user_headers: if i == 1 { b"h=v".to_vec() } else { Vec::new() },
            })
            .collect()
    }

    #[test]
    fn batch_checksum_is_the_streaming_digest_of_the_documented_fields() {
        let bytes = encode(1_000, &messages()).unwrap();
        let batch = decode(&bytes).unwrap();
        let header = batch.header;
        let mut hasher = xxhash_rust::xxh3::Xxh3::new();
        for field in [
            header.partition_id,
            header.base_offset,
            header.base_timestamp,
            header.origin_timestamp,
            header.batch_length,
        ] {
            hasher.update(&field.to_le_bytes());
        }
        hasher.update(&header.message_count.to_le_bytes());
        for message in batch.messages() {
            hasher.update(&message.checksum.to_le_bytes());
        }
        assert_eq!(hasher.digest(), header.batch_checksum);
    }

    #[test]
    fn encode_decode_stamp() {
        let mut bytes = encode(1_000, &messages()).unwrap();
        let batch = decode(&bytes).unwrap();
        assert_eq!(batch.header.message_count, 3);
        assert_eq!(batch.header.base_offset, 0);
        let decoded: Vec<Message<'_>> = batch.messages().collect();
        assert_eq!(decoded.len(), 3);
        assert_eq!(decoded[1].user_headers, b"h=v");
        assert_eq!(decoded[2].payload, vec![2u8; 12]);
        let frames_before = bytes[BATCH_HEADER_SIZE..].to_vec();
        let header = stamp(&mut bytes, 7, 42, 99).unwrap();
        assert_eq!(
            (
                header.partition_id,
                header.base_offset,
                header.base_timestamp
            ),
            (7, 42, 99)
        );
        assert_eq!(
            &bytes[BATCH_HEADER_SIZE..],
            &frames_before[..],
            "frames stored verbatim"
        );
        assert_eq!(decode(&bytes).unwrap().header, header);
    }

    #[test]
    fn each_defect_has_its_own_error() {
        let good = encode(5, &messages()).unwrap();
        assert_eq!(
            decode(&good[..100]),
            Err(BatchError::Truncated { len: 100 })
        );
        let mut extended = good.clone();
        extended.push(0);
        assert!(matches!(
            decode(&extended),
            Err(BatchError::LengthMismatch { .. })
        ));
        let mut reserved = good.clone();
        reserved[200] = 1;
        assert_eq!(
            decode(&reserved),
            Err(BatchError::ReservedNotZero { offset: 200 })
        );
        assert_eq!(encode(5, &[]), Err(BatchError::Empty));
        let mut frame = good.clone();
        frame[BATCH_HEADER_SIZE + 50] ^= 1; // payload byte of message 0
        assert!(matches!(
            decode(&frame),
            Err(BatchError::FrameChecksum { index: 0, .. })
        ));
        let mut delta = good.clone();
        delta[BATCH_HEADER_SIZE + FRAME_OFFSET_DELTA_OFFSET] = 5;
        assert!(matches!(
            decode(&delta),
            Err(BatchError::OffsetDelta {
                index: 0,
                found: 5,
                ..
            })
        ));
        let mut cut = good.clone();
        cut.truncate(cut.len() - 1);
        let len = cut.len() as u64;
        le::put_u64(&mut cut, BATCH_LENGTH_OFFSET, len);
        assert!(matches!(
            decode(&cut),
            Err(BatchError::FrameTruncated { index: 2, .. })
        ));
        let mut count = good.clone();
        count[MESSAGE_COUNT_OFFSET] = 4;
        assert!(matches!(
            decode(&count),
            Err(BatchError::CountMismatch {
                declared: 4,
                found: 3
            })
        ));
        let mut checksum = good;
        checksum[ORIGIN_TIMESTAMP_OFFSET] ^= 1;
        assert!(matches!(
            decode(&checksum),
            Err(BatchError::BatchChecksum { .. })
        ));
    }
}
