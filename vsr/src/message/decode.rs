//! Decoding and verifying a frame: `Message::decode` and the checks of each command
//! (`docs/vsr.md`, "Messages": every field a command does not use is zero, one encoding per
//! message).

use iggy_format::constants::HEADER_SIZE;
use iggy_format::{Header, le};

use super::*;

impl Message {
    /// [`Message::decode`] of a frame read as its header and its body: a prepare keeps `body`
    /// as it is (a transport reads the body into a buffer of its own, and nothing copies it
    /// again); any other command is decoded from the two put together.
    pub fn decode_parts(header: &[u8; HEADER_SIZE], body: Vec<u8>) -> Result<Self, DecodeError> {
        let size = le::u32_at(header, SIZE_OFFSET).unwrap_or_default();
        if usize::try_from(size).ok() != Some(HEADER_SIZE + body.len()) {
            return Err(DecodeError::Size {
                size,
                len: HEADER_SIZE + body.len(),
            });
        }
        if header[COMMAND_OFFSET] == command::PREPARE {
            let header = Header::decode(header).map_err(DecodeError::Prepare)?;
            if !header.body_matches(&body) {
                return Err(DecodeError::PrepareBody);
            }
            return Ok(Self::Prepare { header, body });
        }
        let mut frame = Vec::with_capacity(HEADER_SIZE + body.len());
        frame.extend_from_slice(header);
        frame.extend_from_slice(&body);
        Self::decode(&frame)
    }

    /// Decodes and verifies one message (exactly `bytes`).
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        if bytes.len() < HEADER_SIZE {
            return Err(DecodeError::Truncated { len: bytes.len() });
        }
        let header = &bytes[..HEADER_SIZE];
        let size = le::u32_at(header, SIZE_OFFSET).unwrap_or_default();
        if usize::try_from(size).ok() != Some(bytes.len()) {
            return Err(DecodeError::Size {
                size,
                len: bytes.len(),
            });
        }
        let body = &bytes[HEADER_SIZE..];
        if header[COMMAND_OFFSET] == command::PREPARE {
            let header = Header::decode(header).map_err(DecodeError::Prepare)?;
            if !header.body_matches(body) {
                return Err(DecodeError::PrepareBody);
            }
            return Ok(Self::Prepare {
                header,
                body: body.to_vec(),
            });
        }
        let stored = le::u128_at(header, CHECKSUM_OFFSET).unwrap_or_default();
        if checksum(&header[CHECKSUM_BODY_OFFSET..]) != stored {
            return Err(DecodeError::Checksum);
        }
        let version = le::u16_at(header, VERSION_OFFSET).unwrap_or_default();
        if version != FRAME_VERSION {
            return Err(DecodeError::Version(version));
        }
        if let Some(offset) = header[RESERVED_OFFSET..].iter().position(|b| *b != 0) {
            return Err(DecodeError::Reserved {
                offset: RESERVED_OFFSET + offset,
            });
        }
        if le::u128_at(header, CHECKSUM_BODY_OFFSET) != Some(checksum(body)) {
            return Err(DecodeError::BodyChecksum);
        }
        let u64_at = |offset| le::u64_at(header, offset).unwrap_or_default();
        let u32_at = |offset| le::u32_at(header, offset).unwrap_or_default();
        let u128_at = |offset| le::u128_at(header, offset).unwrap_or_default();
        let fields = Fields {
            cluster: u128_at(CLUSTER_OFFSET),
            group: u128_at(GROUP_OFFSET),
            op: u64_at(OP_OFFSET),
            commit: u64_at(COMMIT_OFFSET),
            request: u64_at(REQUEST_OFFSET),
            view: u32_at(VIEW_OFFSET),
            command: header[COMMAND_OFFSET],
            replica: header[REPLICA_OFFSET],
            log_view: u32_at(LOG_VIEW_OFFSET),
            client: u128_at(CLIENT_OFFSET),
            context: u128_at(CONTEXT_OFFSET),
            nonce: u64_at(NONCE_OFFSET),
            count: u32_at(COUNT_OFFSET),
            operation: u32_at(OPERATION_OFFSET),
            status: header[STATUS_OFFSET],
        };
        let decoded = decode_fields(&fields, body)?;
        // One encoding per message: the fields a command does not use are zero, so a frame that
        // decodes re-encodes to the same bytes.
        if decoded.encode() != bytes {
            return Err(DecodeError::Invalid(
                "a field this command does not use is set",
            ));
        }
        Ok(decoded)
    }
}

fn empty(body: &[u8]) -> Result<(), DecodeError> {
    if body.is_empty() {
        Ok(())
    } else {
        Err(DecodeError::Invalid("a body where the command has none"))
    }
}

fn decode_headers(body: &[u8], count: usize) -> Result<Vec<Header>, DecodeError> {
    (0..count)
        .map(|i| {
            Header::decode(&body[i * HEADER_SIZE..(i + 1) * HEADER_SIZE])
                .map_err(|_| DecodeError::Invalid("a carried header does not verify"))
        })
        .collect()
}

fn decode_fields(f: &Fields, body: &[u8]) -> Result<Message, DecodeError> {
    let from = f.sender();
    let count = usize::try_from(f.count).unwrap_or(usize::MAX);
    Ok(match f.command {
        command::PREPARE_OK => {
            empty(body)?;
            Message::PrepareOk {
                from,
                op: f.op,
                checksum: f.context,
            }
        }
        command::COMMIT => {
            empty(body)?;
            Message::Commit {
                from,
                commit: f.commit,
                checksum: f.context,
            }
        }
        command::START_VIEW_CHANGE => {
            empty(body)?;
            Message::StartViewChange { from }
        }
        command::DO_VIEW_CHANGE => {
            if count > HEADERS_MAX {
                return Err(DecodeError::Invalid(
                    "more headers than a view change carries",
                ));
            }
            if body.len() != count * HEADER_SIZE + 2 * bits_len(count) {
                return Err(DecodeError::Invalid(
                    "the body is not the headers and their bits",
                ));
            }
            let headers = decode_headers(body, count)?;
            let bits = &body[count * HEADER_SIZE..];
            let (present, nack) = bits.split_at(bits_len(count));
            let bit = |bytes: &[u8], i: usize| bytes[i / 8] >> (i % 8) & 1 == 1;
            if (count..bits_len(count) * 8).any(|i| bit(present, i) || bit(nack, i)) {
                return Err(DecodeError::Invalid("a bit set past the last header"));
            }
            let forgotten_view = match f.nonce {
                0 => None,
                n => match u32::try_from(n - 1) {
                    Ok(v) if v <= f.log_view => Some(v),
                    _ => {
                        return Err(DecodeError::Invalid(
                            "a forgotten view after the log_view of a view change",
                        ));
                    }
                },
            };
            let forgotten_bound = match f.request {
                0 => None,
                _ if forgotten_view.is_none() => {
                    return Err(DecodeError::Invalid(
                        "an acknowledgment bound without a forgotten view",
                    ));
                }
                n => Some(n - 1),
            };
            Message::DoViewChange {
                forgotten_view,
                forgotten_bound,
                from,
                log_view: f.log_view,
                op: f.op,
                commit: f.commit,
                commit_checksum: f.context,
                headers: headers
                    .into_iter()
                    .enumerate()
                    .map(|(i, header)| ViewHeader {
                        header,
                        present: bit(present, i),
                        nack: bit(nack, i),
                    })
                    .collect(),
            }
        }
        command::START_VIEW => {
            if count > HEADERS_MAX || body.len() != count * HEADER_SIZE {
                return Err(DecodeError::Invalid("the body is not the counted headers"));
            }
            Message::StartView {
                from,
                op: f.op,
                commit: f.commit,
                commit_checksum: f.context,
                nonce: f.nonce,
                headers: decode_headers(body, count)?,
            }
        }
        command::REQUEST_START_VIEW => {
            empty(body)?;
            Message::RequestStartView {
                from,
                nonce: f.nonce,
            }
        }
        command::REQUEST_PREPARES => {
            empty(body)?;
            if f.commit < f.op {
                return Err(DecodeError::Invalid("a range that ends before it starts"));
            }
            Message::RequestPrepares {
                from,
                first: f.op,
                last: f.commit,
            }
        }
        command::RANGE_EVICTED => {
            empty(body)?;
            Message::RangeEvicted { from, oldest: f.op }
        }
        command::REQUEST_SNAPSHOT => {
            empty(body)?;
            Message::RequestSnapshot {
                from,
                offset: f.request,
            }
        }
        command::SNAPSHOT_CHUNK => {
            let snapshot = SnapshotRef {
                op: f.op,
                checksum: f.context,
                trailer: f.client,
                length: f.commit,
            };
            if body.len() > SNAPSHOT_CHUNK_BYTES_MAX {
                return Err(DecodeError::Invalid("a snapshot chunk larger than 256 KiB"));
            }
            if snapshot.is_none() {
                if snapshot != SnapshotRef::default() || f.request != 0 || !body.is_empty() {
                    return Err(DecodeError::Invalid(
                        "a chunk of an empty snapshot that carries something",
                    ));
                }
            } else if body.is_empty()
                || f.request
                    .checked_add(body.len() as u64)
                    .is_none_or(|end| end > snapshot.length)
            {
                return Err(DecodeError::Invalid(
                    "a snapshot chunk empty or past the snapshot's end",
                ));
            }
            Message::SnapshotChunk {
                from,
                snapshot,
                offset: f.request,
                bytes: body.to_vec(),
            }
        }
        command::READ_INDEX => {
            empty(body)?;
            Message::ReadIndex {
                from,
                nonce: f.nonce,
            }
        }
        command::READ_INDEX_OK => {
            empty(body)?;
            Message::ReadIndexOk {
                from,
                nonce: f.nonce,
                commit: f.commit,
                checksum: f.context,
            }
        }
        command::READ_ROUND => {
            empty(body)?;
            Message::ReadRound {
                from,
                nonce: f.nonce,
            }
        }
        command::READ_ROUND_OK => {
            empty(body)?;
            Message::ReadRoundOk {
                from,
                nonce: f.nonce,
            }
        }
        command::PING => {
            empty(body)?;
            Message::Ping {
                from,
                hears: f.nonce,
            }
        }
        command::REQUEST => Message::Request {
            cluster: f.cluster,
            group: f.group,
            client: f.client,
            request: f.request,
            operation: f.operation,
            body: body.to_vec(),
        },
        command::REPLY => Message::Reply {
            from,
            client: f.client,
            request: f.request,
            op: f.op,
            status: ReplyStatus::from_code(f.status)
                .ok_or(DecodeError::Invalid("an unknown reply status"))?,
            body: body.to_vec(),
        },
        other => return Err(DecodeError::Command(other)),
    })
}
