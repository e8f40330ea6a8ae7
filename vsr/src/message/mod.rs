//! The messages of the replica bus and of clients, and their codec. Every message is a 256-byte
//! header and a body. A `Prepare` is the journaled entry header itself (`iggy_format::Header`,
//! command 1), so a backup journals the bytes it received. Every other message is a control
//! frame sealed the same way: an XXH3-128 of header bytes 16..256 and one of the body, a version,
//! a command, the frame's size, reserved bytes zero. Both layouts keep `size` at byte 92 and the
//! command at byte 98, so a receiver can frame and dispatch before it decodes. A frame that does
//! not verify is refused with the reason, never trusted (the receiver drops and counts it).
//!
//! Control frame layout (little-endian; see `docs/vsr.md`, "Messages"):
//!
//! ```text
//!   0 checksum u128 | 16 checksum_body u128 | 32 cluster u128 | 48 group u128
//!  64 op u64 | 72 commit u64 | 80 request u64 | 88 view u32 | 92 size u32
//!  96 version u16 | 98 command u8 | 99 replica u8 | 100 log_view u32 | 104 client u128
//! 120 context u128 | 136 nonce u64 | 144 count u32 | 148 operation u32 | 152 status u8
//! 153..256 reserved (zero)
//! ```

use iggy_format::constants::HEADER_SIZE;
use iggy_format::{Checksum, Header, checksum, le};

use crate::config::HEADERS_MAX;

mod decode;

/// The control frame version this build writes and reads.
pub const FRAME_VERSION: u16 = 1;

const CHECKSUM_OFFSET: usize = 0;
const CHECKSUM_BODY_OFFSET: usize = 16;
const CLUSTER_OFFSET: usize = 32;
const GROUP_OFFSET: usize = 48;
const OP_OFFSET: usize = 64;
const COMMIT_OFFSET: usize = 72;
const REQUEST_OFFSET: usize = 80;
const VIEW_OFFSET: usize = 88;
/// Where both layouts keep the message's size (header plus body).
pub const SIZE_OFFSET: usize = 92;
const VERSION_OFFSET: usize = 96;
/// Where both layouts keep the command.
pub const COMMAND_OFFSET: usize = 98;
const REPLICA_OFFSET: usize = 99;
const LOG_VIEW_OFFSET: usize = 100;
const CLIENT_OFFSET: usize = 104;
const CONTEXT_OFFSET: usize = 120;
const NONCE_OFFSET: usize = 136;
const COUNT_OFFSET: usize = 144;
const OPERATION_OFFSET: usize = 148;
const STATUS_OFFSET: usize = 152;
const RESERVED_OFFSET: usize = 153;

const _: () = assert!(SIZE_OFFSET == iggy_format::header::SIZE_OFFSET);
const _: () = assert!(COMMAND_OFFSET == iggy_format::header::COMMAND_OFFSET);
const _: () = assert!(RESERVED_OFFSET < HEADER_SIZE);

/// Command codes: 1 is the entry header's own `Prepare`.
pub mod command {
    pub const PREPARE: u8 = 1;
    pub const PREPARE_OK: u8 = 2;
    pub const COMMIT: u8 = 3;
    pub const START_VIEW_CHANGE: u8 = 4;
    pub const DO_VIEW_CHANGE: u8 = 5;
    pub const START_VIEW: u8 = 6;
    pub const REQUEST_START_VIEW: u8 = 7;
    pub const REQUEST_PREPARES: u8 = 8;
    pub const RANGE_EVICTED: u8 = 9;
    pub const REQUEST: u8 = 10;
    pub const REPLY: u8 = 11;
    pub const REQUEST_SNAPSHOT: u8 = 12;
    pub const SNAPSHOT_CHUNK: u8 = 13;
    pub const READ_INDEX: u8 = 14;
    pub const READ_INDEX_OK: u8 = 15;
    pub const READ_ROUND: u8 = 16;
    pub const READ_ROUND_OK: u8 = 17;
    pub const PING: u8 = 18;
}

/// Largest chunk of a snapshot a `SnapshotChunk` carries (the snapshot crate's transfer unit).
pub const SNAPSHOT_CHUNK_BYTES_MAX: usize = 256 << 10;

/// Which snapshot a chunk is of: the checkpoint it holds (its op and the checksum of the
/// prepare there: what the receiver's log continues from), its trailer checksum and its length.
/// All zero: the sender has no snapshot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SnapshotRef {
    pub op: u64,
    pub checksum: Checksum,
    pub trailer: Checksum,
    pub length: u64,
}

impl SnapshotRef {
    /// Whether this names no snapshot (the sender has none).
    #[must_use]
    pub fn is_none(&self) -> bool {
        self.length == 0
    }
}

/// Who sent a replica message, for which group, in which view.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct From {
    pub cluster: u128,
    pub group: u128,
    pub replica: u8,
    pub view: u32,
}

/// One header of a `DoViewChange`, with what the sender can say about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ViewHeader {
    pub header: Header,
    /// The sender holds the body: it can serve it.
    pub present: bool,
    /// The sender never acknowledged this prepare (it journals before it acknowledges, so a
    /// header it cannot serve above its commit point is one it never acknowledged).
    pub nack: bool,
}

/// How a request ended, as a reply says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReplyStatus {
    /// Committed: the body is the reply.
    Committed,
    /// The cluster never took the request (this replica does not lead, or is not in normal
    /// status): sending it again is safe.
    NotAccepted,
    /// The outcome cannot be known (what a client reports when it gives up after sending).
    NotCommitted,
    /// Refused: the client already used this request number for a request with another body
    /// (committed, or prepared and not yet answered). Nothing of this one is applied; the
    /// earlier one keeps its outcome.
    Reused,
}

impl ReplyStatus {
    fn code(self) -> u8 {
        match self {
            Self::Committed => 0,
            Self::NotAccepted => 1,
            Self::NotCommitted => 2,
            Self::Reused => 3,
        }
    }

    fn from_code(code: u8) -> Option<Self> {
        match code {
            0 => Some(Self::Committed),
            1 => Some(Self::NotAccepted),
            2 => Some(Self::NotCommitted),
            3 => Some(Self::Reused),
            _ => None,
        }
    }
}

/// A message on the replica bus or between a client and a replica.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// The primary's prepare (also a repair reply): the journaled entry, as it is journaled.
    Prepare { header: Header, body: Vec<u8> },
    /// A backup journaled the prepare `op` whose header checksum is `checksum`.
    PrepareOk {
        from: From,
        op: u64,
        checksum: Checksum,
    },
    /// The primary's commit point (its heartbeat) and the checksum of the entry there.
    Commit {
        from: From,
        commit: u64,
        checksum: Checksum,
    },
    /// The sender gave up on the views before `from.view`.
    StartViewChange { from: From },
    /// The sender's log for the new primary: its log_view, head, commit point (and the
    /// checksum of the entry there) and the headers after its commit point (at most
    /// `HEADERS_MAX`).
    DoViewChange {
        from: From,
        log_view: u32,
        op: u64,
        commit: u64,
        commit_checksum: Checksum,
        headers: Vec<ViewHeader>,
        /// The sender restarted without what it acknowledged past its last publication
        /// (replicated durability) in the views up to this one: it cannot say it never saw an
        /// op of those views, and until it starts a later view its log stands for no one else's.
        forgotten_view: Option<u32>,
        /// With a forgotten view, the highest op the sender may have acknowledged and forgotten
        /// (its superblock's acknowledgment bound, `docs/vsr.md`, "The acknowledgment bound");
        /// `None`: unbounded (or nothing forgotten).
        forgotten_bound: Option<u64>,
    },
    /// The new view's log: head, commit point (and the checksum of the entry there) and the
    /// headers after it; `nonce` echoes a restarted replica's probe (0 for the broadcast that
    /// starts a view).
    StartView {
        from: From,
        op: u64,
        commit: u64,
        commit_checksum: Checksum,
        nonce: u64,
        headers: Vec<Header>,
    },
    /// A restarted replica asks who leads; `nonce` is its boot's incarnation.
    RequestStartView { from: From, nonce: u64 },
    /// Asks for the prepares `first..=last` (at most `REPAIR_BATCH_MAX`).
    RequestPrepares { from: From, first: u64, last: u64 },
    /// The sender no longer holds the start of a requested range: its oldest prepare is `oldest`.
    RangeEvicted { from: From, oldest: u64 },
    /// Asks for the bytes of the sender's current snapshot from `offset` (at most
    /// [`SNAPSHOT_CHUNK_BYTES_MAX`]): a replica behind every peer's log catches up from a
    /// checkpoint.
    RequestSnapshot { from: From, offset: u64 },
    /// Bytes `offset..offset + bytes.len()` of `snapshot` (an empty body and a zero `snapshot`:
    /// the sender has none).
    SnapshotChunk {
        from: From,
        snapshot: SnapshotRef,
        offset: u64,
        bytes: Vec<u8>,
    },
    /// A replica serving a read asks the primary of `from.view` for a read index: the commit
    /// point through which it must have executed to answer (`nonce` names the read).
    ReadIndex { from: From, nonce: u64 },
    /// The primary's read index for the read `nonce`: its commit point (and the checksum of the
    /// entry there), taken once a quorum confirmed the primary's view after the read arrived.
    ReadIndexOk {
        from: From,
        nonce: u64,
        commit: u64,
        checksum: Checksum,
    },
    /// The primary asks its backups to confirm they are still in its view (round `nonce`):
    /// reads that arrived before it was sent wait for a quorum of answers.
    ReadRound { from: From, nonce: u64 },
    /// A backup in normal status in `from.view` answers round `nonce`.
    ReadRoundOk { from: From, nonce: u64 },
    /// The replica bus's keepalive: the sending node is up and its messages reach this one,
    /// and `hears` has bit `i` set for each node it heard lately (its own included). No
    /// replica acts on it (the host's transport does; `group` is the metadata group's).
    Ping { from: From, hears: u64 },
    /// A client's request.
    Request {
        cluster: u128,
        group: u128,
        client: u128,
        request: u64,
        operation: u32,
        body: Vec<u8>,
    },
    /// The answer to a client's request: committed as `op`, or refused.
    Reply {
        from: From,
        client: u128,
        request: u64,
        op: u64,
        status: ReplyStatus,
        body: Vec<u8>,
    },
}

/// Why bytes are not a message. Each reason is its own, so a counter can say which.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("{len} bytes, shorter than a header")]
    Truncated { len: usize },
    #[error("the header says {size} bytes, {len} arrived")]
    Size { size: u32, len: usize },
    #[error("prepare header: {0}")]
    Prepare(iggy_format::HeaderError),
    #[error("prepare body does not match its header")]
    PrepareBody,
    #[error("header checksum mismatch")]
    Checksum,
    #[error("body checksum mismatch")]
    BodyChecksum,
    #[error("unknown frame version {0}")]
    Version(u16),
    #[error("unknown command {0}")]
    Command(u8),
    #[error("reserved byte at header offset {offset} is not zero")]
    Reserved { offset: usize },
    #[error("{0}")]
    Invalid(&'static str),
}

/// The flat fields of a control frame (each command uses some of them).
#[derive(Clone, Copy, Debug, Default)]
struct Fields {
    cluster: u128,
    group: u128,
    op: u64,
    commit: u64,
    request: u64,
    view: u32,
    command: u8,
    replica: u8,
    log_view: u32,
    client: u128,
    context: u128,
    nonce: u64,
    count: u32,
    operation: u32,
    status: u8,
}

impl Fields {
    fn from(command: u8, from: &From) -> Self {
        Self {
            cluster: from.cluster,
            group: from.group,
            view: from.view,
            replica: from.replica,
            command,
            ..Self::default()
        }
    }

    fn sender(&self) -> From {
        From {
            cluster: self.cluster,
            group: self.group,
            replica: self.replica,
            view: self.view,
        }
    }
}

fn bits_len(count: usize) -> usize {
    count.div_ceil(8)
}

fn seal(fields: &Fields, body: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(HEADER_SIZE + body.len());
    bytes.extend_from_slice(&seal_header(fields, body));
    bytes.extend_from_slice(body);
    bytes
}

/// The header [`seal`] puts before `body`.
fn seal_header(fields: &Fields, body: &[u8]) -> [u8; HEADER_SIZE] {
    let size = u32::try_from(HEADER_SIZE + body.len()).unwrap_or_else(|_| {
        panic!(
            "a message body of {} bytes does not fit a frame",
            body.len()
        )
    });
    let mut bytes = [0u8; HEADER_SIZE];
    let header = &mut bytes[..];
    le::put_u128(header, CHECKSUM_BODY_OFFSET, checksum(body));
    le::put_u128(header, CLUSTER_OFFSET, fields.cluster);
    le::put_u128(header, GROUP_OFFSET, fields.group);
    le::put_u64(header, OP_OFFSET, fields.op);
    le::put_u64(header, COMMIT_OFFSET, fields.commit);
    le::put_u64(header, REQUEST_OFFSET, fields.request);
    le::put_u32(header, VIEW_OFFSET, fields.view);
    le::put_u32(header, SIZE_OFFSET, size);
    le::put_u16(header, VERSION_OFFSET, FRAME_VERSION);
    header[COMMAND_OFFSET] = fields.command;
    header[REPLICA_OFFSET] = fields.replica;
    le::put_u32(header, LOG_VIEW_OFFSET, fields.log_view);
    le::put_u128(header, CLIENT_OFFSET, fields.client);
    le::put_u128(header, CONTEXT_OFFSET, fields.context);
    le::put_u64(header, NONCE_OFFSET, fields.nonce);
    le::put_u32(header, COUNT_OFFSET, fields.count);
    le::put_u32(header, OPERATION_OFFSET, fields.operation);
    header[STATUS_OFFSET] = fields.status;
    let sum = checksum(&header[CHECKSUM_BODY_OFFSET..]);
    le::put_u128(header, CHECKSUM_OFFSET, sum);
    bytes
}

/// The fields of a request's frame.
fn request_fields(
    cluster: u128,
    group: u128,
    client: u128,
    request: u64,
    operation: u32,
) -> Fields {
    Fields {
        cluster,
        group,
        client,
        request,
        operation,
        command: command::REQUEST,
        ..Fields::default()
    }
}

/// The [`frame_checksum`] of the request's frame ([`Message::Request`] encoded), without
/// building the frame: the body is hashed where it lies (a send's body is a batch of up to
/// `max_request_bytes`, and the primary checksums every request it takes).
#[must_use]
pub fn request_checksum(
    cluster: u128,
    group: u128,
    (client, request): (u128, u64),
    operation: u32,
    body: &[u8],
) -> Checksum {
    let fields = request_fields(cluster, group, client, request, operation);
    frame_checksum(&seal_header(&fields, body))
}

/// The checksum a sealed control frame carries (a request's is what its reply echoes).
#[must_use]
pub fn frame_checksum(bytes: &[u8]) -> Checksum {
    bytes
        .get(..HEADER_SIZE)
        .and_then(|h| le::u128_at(h, CHECKSUM_OFFSET))
        .unwrap_or_default()
}

impl Message {
    /// The command code.
    #[must_use]
    pub fn command(&self) -> u8 {
        match self {
            Self::Prepare { .. } => command::PREPARE,
            Self::PrepareOk { .. } => command::PREPARE_OK,
            Self::Commit { .. } => command::COMMIT,
            Self::StartViewChange { .. } => command::START_VIEW_CHANGE,
            Self::DoViewChange { .. } => command::DO_VIEW_CHANGE,
            Self::StartView { .. } => command::START_VIEW,
            Self::RequestStartView { .. } => command::REQUEST_START_VIEW,
            Self::RequestPrepares { .. } => command::REQUEST_PREPARES,
            Self::RangeEvicted { .. } => command::RANGE_EVICTED,
            Self::Request { .. } => command::REQUEST,
            Self::Reply { .. } => command::REPLY,
            Self::RequestSnapshot { .. } => command::REQUEST_SNAPSHOT,
            Self::SnapshotChunk { .. } => command::SNAPSHOT_CHUNK,
            Self::ReadIndex { .. } => command::READ_INDEX,
            Self::ReadIndexOk { .. } => command::READ_INDEX_OK,
            Self::ReadRound { .. } => command::READ_ROUND,
            Self::ReadRoundOk { .. } => command::READ_ROUND_OK,
            Self::Ping { .. } => command::PING,
        }
    }

    /// The message's name, for traces.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            Self::Prepare { .. } => "prepare",
            Self::PrepareOk { .. } => "prepare_ok",
            Self::Commit { .. } => "commit",
            Self::StartViewChange { .. } => "start_view_change",
            Self::DoViewChange { .. } => "do_view_change",
            Self::StartView { .. } => "start_view",
            Self::RequestStartView { .. } => "request_start_view",
            Self::RequestPrepares { .. } => "request_prepares",
            Self::RangeEvicted { .. } => "range_evicted",
            Self::Request { .. } => "request",
            Self::Reply { .. } => "reply",
            Self::RequestSnapshot { .. } => "request_snapshot",
            Self::SnapshotChunk { .. } => "snapshot_chunk",
            Self::ReadIndex { .. } => "read_index",
            Self::ReadIndexOk { .. } => "read_index_ok",
            Self::ReadRound { .. } => "read_round",
            Self::ReadRoundOk { .. } => "read_round_ok",
            Self::Ping { .. } => "ping",
        }
    }

    /// One line saying what the message carries (for traces): the sender, its view, the ops.
    #[must_use]
    pub fn summary(&self) -> String {
        let short = |c: Checksum| c >> 96;
        match self {
            Self::Prepare { header, .. } => format!(
                "prepare op {} view {} from {} ({:08x}, parent {:08x}) client {:#x} request {}",
                header.op,
                header.view,
                header.replica,
                short(header.checksum()),
                short(header.parent),
                header.client,
                header.request
            ),
            Self::PrepareOk { from, op, .. } => {
                format!(
                    "prepare_ok op {op} from {} view {}",
                    from.replica, from.view
                )
            }
            Self::Commit { from, commit, .. } => {
                format!("commit {commit} from {} view {}", from.replica, from.view)
            }
            Self::StartViewChange { from } => {
                format!("start_view_change view {} from {}", from.view, from.replica)
            }
            Self::DoViewChange {
                from,
                log_view,
                op,
                commit,
                headers,
                forgotten_view,
                forgotten_bound,
                ..
            } => {
                let flags: String = headers
                    .iter()
                    .map(|h| match (h.present, h.nack) {
                        (true, _) => 'p',
                        (false, true) => 'n',
                        (false, false) => '-',
                    })
                    .collect();
                let forgot = forgotten_view.map_or(String::new(), |v| format!(" forgot {v}"));
                let bound = forgotten_bound.map_or(String::new(), |b| format!(" through op {b}"));
                format!(
                    "do_view_change view {} from {} log_view {log_view} op {op} commit {commit} \
                     headers [{flags}]{forgot}{bound}",
                    from.view, from.replica
                )
            }
            Self::StartView {
                from,
                op,
                commit,
                nonce,
                headers,
                ..
            } => format!(
                "start_view view {} from {} op {op} commit {commit} nonce {nonce:#x} {} headers",
                from.view,
                from.replica,
                headers.len()
            ),
            Self::RequestStartView { from, nonce } => format!(
                "request_start_view from {} view {} nonce {nonce:#x}",
                from.replica, from.view
            ),
            Self::RequestPrepares { from, first, last } => format!(
                "request_prepares {first}..={last} from {} view {}",
                from.replica, from.view
            ),
            Self::RangeEvicted { from, oldest } => {
                format!("range_evicted oldest {oldest} from {}", from.replica)
            }
            Self::Request {
                client, request, ..
            } => format!("request client {client:#x} request {request}"),
            Self::Reply {
                client,
                request,
                op,
                status,
                ..
            } => format!("reply client {client:#x} request {request} op {op} {status:?}"),
            Self::RequestSnapshot { from, offset } => format!(
                "request_snapshot offset {offset} from {} view {}",
                from.replica, from.view
            ),
            Self::SnapshotChunk {
                from,
                snapshot,
                offset,
                bytes,
            } => format!(
                "snapshot_chunk op {} ({:08x}) {offset}+{} of {} from {}",
                snapshot.op,
                short(snapshot.trailer),
                bytes.len(),
                snapshot.length,
                from.replica
            ),
            Self::ReadIndex { from, nonce } => format!(
                "read_index nonce {nonce} from {} view {}",
                from.replica, from.view
            ),
            Self::ReadIndexOk {
                from,
                nonce,
                commit,
                ..
            } => format!(
                "read_index_ok nonce {nonce} commit {commit} from {} view {}",
                from.replica, from.view
            ),
            Self::ReadRound { from, nonce } => format!(
                "read_round {nonce} from {} view {}",
                from.replica, from.view
            ),
            Self::ReadRoundOk { from, nonce } => format!(
                "read_round_ok {nonce} from {} view {}",
                from.replica, from.view
            ),
            Self::Ping { from, hears } => format!("ping from {} hears {hears:#b}", from.replica),
        }
    }

    /// The replica that sent a replica message (`None` for a client's request or a prepare,
    /// whose header says who built it).
    #[must_use]
    pub fn sender(&self) -> Option<From> {
        match self {
            Self::Prepare { .. } | Self::Request { .. } => None,
            Self::PrepareOk { from, .. }
            | Self::Commit { from, .. }
            | Self::StartViewChange { from }
            | Self::DoViewChange { from, .. }
            | Self::StartView { from, .. }
            | Self::RequestStartView { from, .. }
            | Self::RequestPrepares { from, .. }
            | Self::RangeEvicted { from, .. }
            | Self::RequestSnapshot { from, .. }
            | Self::SnapshotChunk { from, .. }
            | Self::ReadIndex { from, .. }
            | Self::ReadIndexOk { from, .. }
            | Self::ReadRound { from, .. }
            | Self::ReadRoundOk { from, .. }
            | Self::Ping { from, .. }
            | Self::Reply { from, .. } => Some(*from),
        }
    }

    /// The cluster and group the message is for.
    #[must_use]
    pub fn cluster_and_group(&self) -> (u128, u128) {
        match self {
            Self::Prepare { header, .. } => (header.cluster, header.group),
            Self::Request { cluster, group, .. } => (*cluster, *group),
            other => other
                .sender()
                .map_or((0, 0), |from| (from.cluster, from.group)),
        }
    }

    /// The group the message is for.
    #[must_use]
    pub fn group(&self) -> u128 {
        self.cluster_and_group().1
    }

    /// The bytes on the wire.
    #[must_use]
    /// [`Message::encode`] as the frame's first bytes and the body that follows them, which a
    /// transport writes after them: a prepare's body is not copied behind its header (the
    /// same bytes on the wire as `encode`'s); any other message is all in the first part.
    pub fn encode_parts(&self) -> (Vec<u8>, &[u8]) {
        match self {
            Self::Prepare { header, body } => (header.encode().to_vec(), body),
            _ => (self.encode(), &[]),
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        match self {
            Self::Prepare { header, body } => {
                let mut bytes = header.encode().to_vec();
                bytes.extend_from_slice(body);
                bytes
            }
            Self::PrepareOk { from, op, checksum } => {
                let fields = Fields {
                    op: *op,
                    context: *checksum,
                    ..Fields::from(command::PREPARE_OK, from)
                };
                seal(&fields, &[])
            }
            Self::Commit {
                from,
                commit,
                checksum,
            } => {
                let fields = Fields {
                    commit: *commit,
                    context: *checksum,
                    ..Fields::from(command::COMMIT, from)
                };
                seal(&fields, &[])
            }
            Self::StartViewChange { from } => {
                seal(&Fields::from(command::START_VIEW_CHANGE, from), &[])
            }
            Self::DoViewChange {
                from,
                log_view,
                op,
                commit,
                commit_checksum,
                headers,
                forgotten_view,
                forgotten_bound,
            } => {
                assert!(
                    headers.len() <= HEADERS_MAX,
                    "a DoViewChange of too many headers"
                );
                let count = headers.len();
                let mut body = Vec::with_capacity(count * HEADER_SIZE + 2 * bits_len(count));
                for h in headers {
                    body.extend_from_slice(&h.header.encode());
                }
                let mut present = vec![0u8; bits_len(count)];
                let mut nack = vec![0u8; bits_len(count)];
                for (i, h) in headers.iter().enumerate() {
                    present[i / 8] |= u8::from(h.present) << (i % 8);
                    nack[i / 8] |= u8::from(h.nack) << (i % 8);
                }
                body.extend_from_slice(&present);
                body.extend_from_slice(&nack);
                let fields = Fields {
                    log_view: *log_view,
                    op: *op,
                    commit: *commit,
                    context: *commit_checksum,
                    count: u32::try_from(count).unwrap_or(u32::MAX),
                    nonce: forgotten_view.map_or(0, |v| u64::from(v) + 1),
                    request: forgotten_bound.map_or(0, |b| b.saturating_add(1)),
                    ..Fields::from(command::DO_VIEW_CHANGE, from)
                };
                seal(&fields, &body)
            }
            Self::StartView {
                from,
                op,
                commit,
                commit_checksum,
                nonce,
                headers,
            } => {
                assert!(
                    headers.len() <= HEADERS_MAX,
                    "a StartView of too many headers"
                );
                let mut body = Vec::with_capacity(headers.len() * HEADER_SIZE);
                for h in headers {
                    body.extend_from_slice(&h.encode());
                }
                let fields = Fields {
                    op: *op,
                    commit: *commit,
                    context: *commit_checksum,
                    nonce: *nonce,
                    count: u32::try_from(headers.len()).unwrap_or(u32::MAX),
                    ..Fields::from(command::START_VIEW, from)
                };
                seal(&fields, &body)
            }
            Self::RequestStartView { from, nonce } => {
                let fields = Fields {
                    nonce: *nonce,
                    ..Fields::from(command::REQUEST_START_VIEW, from)
                };
                seal(&fields, &[])
            }
            Self::RequestPrepares { from, first, last } => {
                let fields = Fields {
                    op: *first,
                    commit: *last,
                    ..Fields::from(command::REQUEST_PREPARES, from)
                };
                seal(&fields, &[])
            }
            Self::RangeEvicted { from, oldest } => {
                let fields = Fields {
                    op: *oldest,
                    ..Fields::from(command::RANGE_EVICTED, from)
                };
                seal(&fields, &[])
            }
            Self::RequestSnapshot { from, offset } => {
                let fields = Fields {
                    request: *offset,
                    ..Fields::from(command::REQUEST_SNAPSHOT, from)
                };
                seal(&fields, &[])
            }
            Self::SnapshotChunk {
                from,
                snapshot,
                offset,
                bytes,
            } => {
                let fields = Fields {
                    op: snapshot.op,
                    context: snapshot.checksum,
                    client: snapshot.trailer,
                    commit: snapshot.length,
                    request: *offset,
                    ..Fields::from(command::SNAPSHOT_CHUNK, from)
                };
                seal(&fields, bytes)
            }
            Self::ReadIndex { from, nonce } => {
                let fields = Fields {
                    nonce: *nonce,
                    ..Fields::from(command::READ_INDEX, from)
                };
                seal(&fields, &[])
            }
            Self::ReadIndexOk {
                from,
                nonce,
                commit,
                checksum,
            } => {
                let fields = Fields {
                    nonce: *nonce,
                    commit: *commit,
                    context: *checksum,
                    ..Fields::from(command::READ_INDEX_OK, from)
                };
                seal(&fields, &[])
            }
            Self::ReadRound { from, nonce } => {
                let fields = Fields {
                    nonce: *nonce,
                    ..Fields::from(command::READ_ROUND, from)
                };
                seal(&fields, &[])
            }
            Self::ReadRoundOk { from, nonce } => {
                let fields = Fields {
                    nonce: *nonce,
                    ..Fields::from(command::READ_ROUND_OK, from)
                };
                seal(&fields, &[])
            }
            Self::Ping { from, hears } => {
                let fields = Fields {
                    nonce: *hears,
                    ..Fields::from(command::PING, from)
                };
                seal(&fields, &[])
            }
            Self::Request {
                cluster,
                group,
                client,
                request,
                operation,
                body,
            } => seal(
                &request_fields(*cluster, *group, *client, *request, *operation),
                body,
            ),
            Self::Reply {
                from,
                client,
                request,
                op,
                status,
                body,
            } => {
                let fields = Fields {
                    client: *client,
                    request: *request,
                    op: *op,
                    status: status.code(),
                    ..Fields::from(command::REPLY, from)
                };
                seal(&fields, body)
            }
        }
    }
}
