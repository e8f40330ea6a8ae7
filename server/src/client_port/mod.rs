//! The client port: the Iggy binary protocol of the pinned SDK (`iggy-protocol`) over TCP.
//!
//! Each connection is served in order, one request at a time (the SDK is lockstep): read the
//! 256-byte header, check it (a header that fails is answered with an eviction and the
//! connection closed: its framing cannot be trusted), read the body, answer. A body that does not
//! decode, a command this server does not serve, or a refusal before any group saw the request
//! is a reply with an error status and an empty body; the connection stays.
//!
//! Sessions: only ping is served before login. A login checks the protocol version (an
//! incompatible client is evicted with the accepted window) and the credentials (wrong ones
//! evict with `InvalidCredentials`), then registers the client through the metadata group
//! (`Op::RegisterClient`, session = the server's clock in µs, so a later login of the same client
//! always carries a higher one) and answers the session, which every later request must echo.
//!
//! Writes go to the replica that leads their group: this node's, or another node's over the
//! replica bus, whose reply comes back the same way (so a client may send anything to any node).
//! While a group has no primary (a view change), its replica here refuses
//! (`TransientNotAccepted`, 58: never admitted, the SDK sends it again); no reply within the
//! deadline is
//! `TransientNotCommitted` (57: the SDK replays the same request on the same session, which the
//! group's client table answers if it did commit). Reads (streams, topics, polls, stored offsets)
//! are served from the runtime's views, the committed metadata and the partitions, once a read
//! barrier on their group says this node has executed through a read index its group's primary
//! proved current: a read reflects every write acknowledged before it, on any node
//! (`docs/vsr.md`, "Linearizable reads").

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use iggy_format::operation;
use iggy_io::Storage;
use iggy_metadata::Op;
use iggy_node::GroupKind;
use iggy_protocol::header::{HeaderError, peek_size};
use iggy_protocol::response::{
    self, ClusterMetadata, ClusterNode, ConsumerOffsetInfo, LoginReply, POLL_HEADER_SIZE,
    PollHeader, put_result_ok,
};
use iggy_protocol::{
    Eviction, EvictionReason, HEADER_SIZE, Operation, PollingStrategy, ReplyHeader, Request,
    RequestHeader, status,
};
use iggy_recovery::PartitionKey;
use iggy_segments::offsets::{ConsumerKind, DELETED};
use iggy_vsr::{Message, ReplyStatus};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use crate::runtime::{Clock, Input, Views};
use crate::translate::{self, Route, TopicDefaults};
use crate::users::ROOT_USER_ID;

mod current;
mod groups;
mod logins;
mod messages;
mod node_info;

use groups::*;
pub use groups::{MEMBER_CLOSED_GRACE_MS, MEMBER_TIMEOUT_MS};
use logins::*;
pub use logins::{hash_password, password_matches};
use messages::*;
use node_info::*;

/// One node of the roster, as `GetClusterMetadata` lists it.
#[derive(Clone, Debug)]
pub struct RosterNode {
    pub name: String,
    pub client_address: SocketAddr,
}

/// What the client port needs to know.
#[derive(Clone, Debug)]
pub struct PortConfig {
    pub cluster: u128,
    pub cluster_name: String,
    pub replica: u8,
    pub roster: Vec<RosterNode>,
    pub root_username: String,
    /// The root password's argon2id hash in the PHC string form ([`hash_password`]); the
    /// password itself is not kept.
    pub root_password_hash: String,
    /// The largest request taken (header and body).
    pub max_request_bytes: u32,
    /// How long a write waits for its group's reply before it is `TransientNotCommitted`.
    pub reply_deadline: Duration,
    pub topic_defaults: TopicDefaults,
    pub server_version: String,
    /// What a create of partitions must fit (`crate::admission`).
    pub admission: crate::admission::Admission,
    /// Client connections open at once; more are closed as they arrive.
    pub max_connections: u64,
    /// Request bytes the node holds at once, over every connection (at least
    /// `max_request_bytes`): a body past it waits to be read.
    pub in_flight_bytes: u64,
    /// Serve clients over TLS with this configuration (`crate::tls`); `None`: plain TCP.
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

/// The clients connected to this node, by client id: where their replies go.
pub type Clients = Arc<Mutex<HashMap<u128, mpsc::UnboundedSender<Message>>>>;

/// Counters for the metrics.
#[derive(Debug, Default)]
pub struct PortCounters {
    pub connections: std::sync::atomic::AtomicU64,
    /// Connections open now.
    pub open: std::sync::atomic::AtomicU64,
    /// Connections closed at once because `max_connections` were open.
    pub refused_connections: std::sync::atomic::AtomicU64,
    pub requests: std::sync::atomic::AtomicU64,
    pub evictions: std::sync::atomic::AtomicU64,
    /// Client connections closed because no peer was heard while a request waited.
    pub isolated_closes: std::sync::atomic::AtomicU64,
    /// Auto-commit polls not stored because their client had left (see [`peer_closed`]).
    pub orphan_polls: std::sync::atomic::AtomicU64,
    /// Routes handed to clustered SDKs (`GetPollRouting`, `GetConsumerOffsetRouting`).
    pub poll_routes: std::sync::atomic::AtomicU64,
    /// Data connections bound to a coordinator's session (`AttachConsumerSession`).
    pub attached_sessions: std::sync::atomic::AtomicU64,
    /// `FlushUnsavedBuffer` requests with `fsync` answered (this node's log synced through
    /// what the partition had acknowledged).
    pub flushes: std::sync::atomic::AtomicU64,
    /// Logins refused for a wrong username or password.
    pub failed_logins: std::sync::atomic::AtomicU64,
    /// Logins whose connection was closed unchecked because [`PASSWORD_QUEUE`] checks already
    /// waited (a flood of guesses).
    pub logins_shed: std::sync::atomic::AtomicU64,
    /// Client writes refused because a node's disk was below its reserve.
    pub writes_refused_disk_low: std::sync::atomic::AtomicU64,
    /// Error replies, by status code.
    pub errors: Mutex<std::collections::BTreeMap<u32, u64>>,
}

struct Shared<S: Storage + Clone> {
    config: PortConfig,
    bus: crate::bus::BusSender,
    views: Arc<Views<S>>,
    inbox: Mutex<Sender<Input<S>>>,
    clients: Clients,
    clock: Clock,
    counters: Arc<PortCounters>,
    /// Request bytes (in KiB) the node may hold at once ([`PortConfig::in_flight_bytes`]).
    in_flight: Arc<tokio::sync::Semaphore>,
    logins: Logins,
    /// The metadata barriers partition requests share ([`current::metadata_current`]).
    metadata_barriers: current::MetadataBarriers,
    /// This node's client connections (`GetClients`) and its process figures (`GetStats`).
    connections: crate::system::Connections,
    process: crate::system::Process,
    /// This process's boot stamp (its clock at start, µs): consumer-group members that joined
    /// through this node carry it ([`keep_members`]).
    boot: u64,
}

impl<S: Storage + Clone> Shared<S> {
    fn count_sessions(&self) {
        let sessions = self
            .clients
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len() as u64;
        self.views
            .metrics
            .sessions
            .store(sessions, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Binds the client address and serves connections until the runtime goes away. Returns the
/// bound address.
pub async fn start<S: Storage + Clone + Send + Sync + 'static>(
    address: SocketAddr,
    config: PortConfig,
    views: Arc<Views<S>>,
    inbox: Sender<Input<S>>,
    clients: Clients,
    bus: crate::bus::BusSender,
    counters: Arc<PortCounters>,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(address).await?;
    let bound = listener.local_addr()?;
    let kib = usize::try_from(config.in_flight_bytes.div_ceil(1024))
        .unwrap_or(usize::MAX)
        .min(tokio::sync::Semaphore::MAX_PERMITS);
    let clock = Clock::default();
    let boot = clock.now_us();
    let shared = Arc::new(Shared {
        in_flight: Arc::new(tokio::sync::Semaphore::new(kib)),
        config,
        bus,
        views,
        inbox: Mutex::new(inbox),
        clients,
        clock,
        counters,
        logins: Logins::new(),
        metadata_barriers: current::MetadataBarriers::new(),
        connections: crate::system::Connections::default(),
        process: crate::system::Process::default(),
        boot,
    });
    tokio::spawn(watch_free_space(shared.clone()));
    tokio::spawn(keep_members(shared.clone()));
    tokio::spawn(async move {
        loop {
            let (stream, peer) = crate::accept::accept(&listener, "client").await;
            use std::sync::atomic::Ordering::Relaxed;
            let open = shared.counters.open.fetch_add(1, Relaxed);
            if open >= shared.config.max_connections {
                // Over the cap: closed at once, so that the descriptors the node's storage
                // needs are never taken by clients.
                shared.counters.open.fetch_sub(1, Relaxed);
                if shared.counters.refused_connections.fetch_add(1, Relaxed) % 1_000 == 0 {
                    tracing::warn!(%peer, open, cap = shared.config.max_connections, "client port: too many connections; closing new ones (limits.max_connections)");
                }
                drop(stream);
                continue;
            }
            let _ = stream.set_nodelay(true);
            crate::accept::keepalive(&stream);
            shared.counters.connections.fetch_add(1, Relaxed);
            let shared = shared.clone();
            let tls = shared.config.tls.clone();
            tokio::spawn(async move {
                match tls {
                    None => serve(stream, peer, shared.clone()).await,
                    Some(tls) => {
                        // The TLS handshake is part of what a connection must finish before
                        // it logs in.
                        let accept = tokio_rustls::TlsAcceptor::from(tls).accept(stream);
                        match tokio::time::timeout(PRE_LOGIN_IDLE, accept).await {
                            Ok(Ok(stream)) => serve(stream, peer, shared.clone()).await,
                            Ok(Err(e)) => {
                                tracing::debug!(%peer, error = %e, "client port: a TLS handshake failed");
                            }
                            Err(_) => {}
                        }
                    }
                }
                shared.counters.open.fetch_sub(1, Relaxed);
            });
        }
    });
    Ok(bound)
}

/// How long a connection may wait before it logs in, for each request until it has.
const PRE_LOGIN_IDLE: Duration = Duration::from_secs(10);
/// The largest body taken before login (a login is a few hundred bytes).
const PRE_LOGIN_BODY_MAX: usize = 64 << 10;
/// A reply body at least this large is written after its header, not copied behind it.
const SEPARATE_BODY_BYTES: usize = 16 << 10;
/// How long the rest of a request's body may take once its header arrived.
const BODY_DEADLINE: Duration = Duration::from_secs(30);

/// How often the data directory's free space is looked at.
const FREE_SPACE_INTERVAL: Duration = Duration::from_millis(500);

/// Every [`FREE_SPACE_INTERVAL`]: this node's free space (the metric), and whether it is below
/// the reserve (`limits.free_reserve_bytes`), which this node's pings tell its peers: while any
/// node's is, every node refuses client writes ([`crate::bus::DISK_LOW`]). Reads, offset
/// stores, deletes and retention go on, and writes resume once space is freed.
async fn watch_free_space<S: Storage + Clone + Send + Sync + 'static>(shared: Arc<Shared<S>>) {
    use std::sync::atomic::Ordering::Relaxed;
    let mut ticks = tokio::time::interval(FREE_SPACE_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let admission = shared.config.admission.clone();
        let free = tokio::task::spawn_blocking(move || admission.free_bytes()).await;
        let Ok(Some(free)) = free else {
            continue;
        };
        let reserve = shared.config.admission.free_reserve_bytes;
        let (low, no_room) = match free {
            Ok(free) => {
                shared.views.metrics.disk_free_bytes.store(free, Relaxed);
                // A prepare refused for want of room since the last look: low until the next
                // one, whatever the reserve says (the disk filled between two looks).
                let no_room = shared.views.metrics.no_room.swap(false, Relaxed);
                (free < reserve || no_room, no_room && free >= reserve)
            }
            Err(e) => {
                tracing::warn!(error = %e, "client port: the data directory's free space cannot be read");
                continue;
            }
        };
        let was = shared.bus.counters().disk_low.swap(low, Relaxed);
        if low && !was && no_room {
            tracing::warn!(
                reserve_mib = reserve >> 20,
                "a partition had no room for its next segment although free space was above the reserve: every node refuses client writes until the next look at the free space"
            );
        } else if low && !was {
            tracing::warn!(
                reserve_mib = reserve >> 20,
                "the data directory's free space is below its reserve: every node refuses client writes until it is freed"
            );
        } else if was && !low {
            tracing::info!(
                "the data directory's free space is above its reserve again: writes resume"
            );
        }
    }
}

/// A connection's session.
struct Session {
    /// The client id on the wire (every request's header echoes it).
    client: u128,
    /// The id this session's requests carry in the groups' client tables
    /// ([`session_client`]): a new one at every login.
    internal: u128,
    session: u64,
    /// The request number of this session's latest auto-commit (see [`auto_commit_client`]).
    auto_commits: u64,
    /// The highest request number the client sent in this session: the session's end is
    /// proposed as the next one ([`leave_groups`]).
    last_request: u64,
    /// The user logged in (0: the root).
    user_id: u32,
    /// On a routed data connection: the coordinator connection's session (its id in the
    /// client tables) that `AttachConsumerSession` bound, whose consumer-group membership this
    /// connection's polls act for.
    attached: Option<u128>,
    replies: mpsc::UnboundedReceiver<Message>,
    /// The sending half registered for this connection's replies.
    sender: mpsc::UnboundedSender<Message>,
}

enum Answer {
    Reply { status: u32, body: Vec<u8>, op: u64 },
    Evict(EvictionReason),
}

fn ok(body: Vec<u8>) -> Answer {
    Answer::Reply {
        status: 0,
        body,
        op: 0,
    }
}

/// Not a status: the client's connection is closed without a reply (`submit_as` on a node cut
/// off from its peers).
const CLOSE_CONNECTION: u32 = u32::MAX;

/// How long a request waits with no frame of any peer arriving before its node takes itself
/// for cut off (a peer that is up sends something well within it: a prepare's acknowledgment,
/// a forwarded request's reply, a commit broadcast every 500 ms).
const ISOLATED_AFTER_MS: u64 = 1_000;

fn error(status: u32) -> Answer {
    Answer::Reply {
        status,
        body: Vec::new(),
        op: 0,
    }
}

/// A client's connection: plain TCP or TLS over it.
trait ClientStream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + Sync {
    /// Whether the client closed its side (or the connection failed) while a request of it
    /// waited: a look at what arrived, without waiting and without consuming it. A client of
    /// the SDK never half-closes and sends nothing while it awaits a reply, so the end of its
    /// stream means it left.
    fn gone(&self) -> bool;
}

impl ClientStream for TcpStream {
    fn gone(&self) -> bool {
        // The socket itself, not tokio's readiness: the reactor may not have seen the end of
        // stream yet when the node is busy (`poll_peek` then answers pending, and an
        // `an_auto_commit_poll_whose_client_left_stores_no_offset` run on a loaded machine saw
        // its orphan poll answered and its offset stored).
        matches!(peek_first_byte(self), Peeked::End)
    }
}

/// What a non-blocking peek at a client's socket finds.
enum Peeked {
    /// The client closed its side, or the connection failed.
    End,
    /// A byte waits to be read.
    Byte(u8),
    /// Nothing yet.
    Nothing,
}

fn peek_first_byte(socket: &TcpStream) -> Peeked {
    use std::os::fd::AsFd;
    let mut byte = [0u8; 1];
    match rustix::net::recv(
        socket.as_fd(),
        &mut byte,
        rustix::net::RecvFlags::PEEK | rustix::net::RecvFlags::DONTWAIT,
    ) {
        Ok((0, _)) => Peeked::End,
        Ok(_) => Peeked::Byte(byte[0]),
        Err(e) if e == rustix::io::Errno::AGAIN || e == rustix::io::Errno::INTR => Peeked::Nothing,
        Err(_) => Peeked::End,
    }
}

/// The TLS record type of an alert: a client that leaves sends `close_notify` before its end
/// of stream, and an SDK client sends no application data while it awaits a reply.
const TLS_ALERT: u8 = 0x15;

impl ClientStream for tokio_rustls::server::TlsStream<TcpStream> {
    fn gone(&self) -> bool {
        match peek_first_byte(self.get_ref().0) {
            Peeked::End => true,
            Peeked::Byte(byte) => byte == TLS_ALERT,
            Peeked::Nothing => false,
        }
    }
}

async fn serve<S: Storage + Clone + Send + Sync + 'static>(
    mut stream: impl ClientStream,
    peer: SocketAddr,
    shared: Arc<Shared<S>>,
) {
    let mut session: Option<Session> = None;
    let mut balanced = 0u32;
    let mut header_bytes = [0u8; HEADER_SIZE];
    let registered = shared.connections.open(peer);
    loop {
        // Before login a connection must send a request within PRE_LOGIN_IDLE: a descriptor
        // held open by a client that never logs in is not kept.
        let read = stream.read_exact(&mut header_bytes);
        let read = if session.is_none() {
            tokio::time::timeout(PRE_LOGIN_IDLE, read)
                .await
                .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
        } else {
            read.await
        };
        if read.is_err() {
            break;
        }
        let header = match RequestHeader::decode(&header_bytes, shared.config.max_request_bytes) {
            Ok(header) => header,
            Err(reason) => {
                let client =
                    u128::from_le_bytes(header_bytes[128..144].try_into().unwrap_or([0; 16]));
                let eviction = match reason {
                    HeaderError::Operation(_) => EvictionReason::InvalidRequestOperation,
                    HeaderError::SizeAboveLimit { .. } | HeaderError::SizeBelowHeader { .. } => {
                        EvictionReason::InvalidRequestBodySize
                    }
                    HeaderError::NoSession { .. } => EvictionReason::NoSession,
                    _ => EvictionReason::InvalidRequestBody,
                };
                tracing::info!(%peer, %reason, size = peek_size(&header_bytes), "client port: a request header refused; evicting");
                shared
                    .counters
                    .evictions
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let _ = stream
                    .write_all(&Eviction::new(client, eviction).encode())
                    .await;
                break;
            }
        };
        if session.is_none() && header.body_len() > PRE_LOGIN_BODY_MAX {
            // Only a login may come before a session, and a login is small: a larger body is
            // not buffered for a client nobody has authenticated.
            tracing::info!(%peer, size = header.body_len(), "client port: a body too large before login; evicting");
            shared
                .counters
                .evictions
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let _ = stream
                .write_all(
                    &Eviction::new(header.client, EvictionReason::InvalidRequestBodySize).encode(),
                )
                .await;
            break;
        }
        // The node's budget of request bytes in memory: a body is read only once its bytes are
        // granted (in KiB), and they are given back when its answer is written. A client over
        // the budget waits, its body unread in the socket, rather than growing the node.
        let kib = u32::try_from(header.body_len().div_ceil(1024)).unwrap_or(u32::MAX);
        let Ok(_granted) = shared.in_flight.clone().acquire_many_owned(kib).await else {
            break;
        };
        // A body that stops arriving part way is not waited for forever (before login, no
        // longer than its header could have taken).
        let deadline = if session.is_none() {
            PRE_LOGIN_IDLE
        } else {
            BODY_DEADLINE
        };
        let Ok(Ok((body, batch))) = tokio::time::timeout(
            deadline,
            read_body(&mut stream, header.code, header.body_len()),
        )
        .await
        else {
            break;
        };
        shared
            .counters
            .requests
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let gone = || stream.gone();
        let answer = answer(
            &shared,
            &header,
            (&body, batch),
            &mut session,
            &mut balanced,
            (peer, registered.id, &gone),
        )
        .await;
        if matches!(
            answer,
            Answer::Reply {
                status: CLOSE_CONNECTION,
                ..
            }
        ) {
            break;
        }
        if let Answer::Reply { status, .. } = &answer {
            tracing::debug!(%peer, code = header.code, operation = ?header.operation, request = header.request, status, "client port: answered");
        }
        // The reply's header, and its body when large enough to write on its own rather
        // than copy behind the header (a poll's answer is up to a megabyte or more).
        let (bytes, tail) = match answer {
            Answer::Reply { status, body, op } => {
                if status != 0 {
                    *shared
                        .counters
                        .errors
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .entry(status)
                        .or_default() += 1;
                }
                let mut reply =
                    ReplyHeader::answering(&header, if status == 0 { body.len() } else { 0 });
                reply.status = status;
                reply.op = op;
                reply.commit = op;
                reply.replica = shared.config.replica;
                let mut bytes = reply.encode().to_vec();
                if status != 0 {
                    (bytes, Vec::new())
                } else if body.len() >= SEPARATE_BODY_BYTES {
                    (bytes, body)
                } else {
                    bytes.extend_from_slice(&body);
                    (bytes, Vec::new())
                }
            }
            Answer::Evict(reason) => {
                shared
                    .counters
                    .evictions
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let _ = stream
                    .write_all(&Eviction::new(header.client, reason).encode())
                    .await;
                break;
            }
        };
        // (A TLS stream's records go out at the flush.)
        if stream.write_all(&bytes).await.is_err()
            || (!tail.is_empty() && stream.write_all(&tail).await.is_err())
            || stream.flush().await.is_err()
        {
            break;
        }
    }
    // An eviction written just before the loop ended goes out (and TLS says goodbye), within
    // a bound: a client that reads nothing does not hold the task.
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = stream.flush().await;
        let _ = stream.shutdown().await;
    })
    .await;
    if let Some(mut session) = session {
        leave_groups(&shared, &mut session).await;
        forget_session(&shared, &session);
    }
}

/// A session ended (a logout, or its connection closed): its reply routes go.
fn forget_session<S: Storage + Clone>(shared: &Shared<S>, session: &Session) {
    let mut clients = shared
        .clients
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // Only this connection's entries: the same client may have logged in again on another.
    for client in [session.internal, auto_commit_client(session.internal)] {
        if clients
            .get(&client)
            .is_some_and(|sender| sender.same_channel(&session.sender))
        {
            clients.remove(&client);
        }
    }
    drop(clients);
    shared.count_sessions();
}

/// A request's body, read unzeroed into buffers of its own: a send's in two, its metadata
/// (length and fields) and its batch, so the batch moves on into the prepare uncopied
/// ([`Request::decode_send`]); any other (or a send whose metadata length overruns it) in one.
async fn read_body(
    stream: &mut (impl tokio::io::AsyncRead + Unpin),
    code: u32,
    len: usize,
) -> std::io::Result<(Vec<u8>, Option<Vec<u8>>)> {
    let mut body = Vec::new();
    if code != iggy_protocol::code::SEND_MESSAGES || len < 4 {
        crate::bus::read_onto(stream, &mut body, len).await?;
        return Ok((body, None));
    }
    crate::bus::read_onto(stream, &mut body, 4).await?;
    let metadata = u32::from_le_bytes([body[0], body[1], body[2], body[3]]) as usize;
    let rest = len - 4;
    if metadata > rest {
        crate::bus::read_onto(stream, &mut body, rest).await?;
        return Ok((body, None));
    }
    crate::bus::read_onto(stream, &mut body, metadata).await?;
    let mut batch = Vec::new();
    crate::bus::read_onto(stream, &mut batch, rest - metadata).await?;
    Ok((body, Some(batch)))
}

async fn answer<S: Storage + Clone + Send + Sync + 'static>(
    shared: &Arc<Shared<S>>,
    header: &RequestHeader,
    (body, batch): (&[u8], Option<Vec<u8>>),
    session: &mut Option<Session>,
    balanced: &mut u32,
    (peer, connection, client_gone): (SocketAddr, u32, &(dyn Fn() -> bool + Sync)),
) -> Answer {
    // The session is checked from the header before the body is decoded: a client that has
    // not logged in, or sends under another's session, costs no decoding.
    if header.operation != Operation::Register && header.code != iggy_protocol::code::PING {
        let Some(current) = session.as_ref() else {
            return error(status::UNAUTHENTICATED);
        };
        if header.client != current.client
            || (header.operation != Operation::NonReplicated && header.session != current.session)
        {
            return error(status::STALE_CLIENT);
        }
    }
    let decoded = match batch {
        Some(batch) => Request::decode_send(body, batch),
        None => Request::decode(header.code, body),
    };
    let request = match decoded {
        Ok(request) => request,
        Err(_) if header.operation == Operation::Register => {
            return Answer::Evict(EvictionReason::MalformedLogin);
        }
        Err(_) => return error(status::INVALID_FORMAT),
    };
    match &request {
        Request::Ping => return ok(Vec::new()),
        Request::LoginRegister {
            version,
            username,
            password,
            ..
        } => {
            let answer = login(
                shared,
                (header, peer),
                version.protocol,
                username,
                password,
                session,
            )
            .await;
            if matches!(answer, Answer::Reply { status: 0, .. })
                && let Some(current) = session.as_ref()
            {
                shared.connections.logged_in(connection, current.user_id);
            }
            return answer;
        }
        Request::LoginRegisterWithToken { version, token, .. } => {
            let answer =
                login_with_token(shared, (header, peer), version.protocol, token, session).await;
            if matches!(answer, Answer::Reply { status: 0, .. })
                && let Some(current) = session.as_ref()
            {
                shared.connections.logged_in(connection, current.user_id);
            }
            return answer;
        }
        _ => {}
    }
    // Checked from the header above (every request but a ping or a login needs the session).
    let Some(current) = session.as_mut() else {
        return error(status::UNAUTHENTICATED);
    };
    current.last_request = current.last_request.max(header.request);
    if let Err(code) = authorized(shared, current.user_id, &request).await {
        return error(code);
    }
    match &request {
        Request::Logout => {
            // The session ends here: its reply routes go, and the connection is as before its
            // login (every request but a ping or a login is refused `Unauthenticated`). The
            // groups' client tables keep its entries until they evict them.
            if let Some(mut ended) = session.take() {
                leave_groups(shared, &mut ended).await;
                forget_session(shared, &ended);
            }
            shared
                .connections
                .logged_in(connection, crate::system::NO_USER);
            return ok(Vec::new());
        }
        Request::GetClusterMetadata => return ok(cluster_metadata(shared)),
        Request::GetStats => return ok(stats(shared).await),
        Request::GetSnapshot { compression, kinds } => {
            return snapshot(shared, *compression, kinds.clone()).await;
        }
        Request::GetMe => {
            let mut out = Vec::new();
            if let Some(mut me) = shared.connections.get(connection) {
                let groups = translate::client_groups(&shared.views.metadata(), current.internal);
                me.consumer_groups_count = u32::try_from(groups.len()).unwrap_or(u32::MAX);
                response::put_client_details(&mut out, &me, &groups);
            }
            return ok(out);
        }
        Request::AttachConsumerSession {
            client_id, session, ..
        } => {
            // The coordinator's session must be one the metadata group registered (read
            // current: it logged in through another node an instant ago).
            let coordinator = session_client(*client_id, *session);
            if !shared.views.metadata().clients.contains_key(&coordinator) {
                if let Err(code) = read_barrier(shared, GroupKind::Metadata.id()).await {
                    return error(code);
                }
                if !shared.views.metadata().clients.contains_key(&coordinator) {
                    return error(status::STALE_CLIENT);
                }
            }
            current.attached = Some(coordinator);
            shared
                .counters
                .attached_sessions
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return ok(Vec::new());
        }
        Request::GetPollRouting(target) | Request::GetConsumerOffsetRouting(target) => {
            // The node that leads the partition's group answers the routed poll or offset
            // write (any node could: reads pass a barrier; the SDK asks where, and this says
            // the primary, as upstream does).
            let key = match route_when_known(shared, target, balanced).await {
                Route::Poll { key, .. } | Route::GetOffset { key, .. } => key,
                Route::Refuse(code) => return error(code),
                _ => return error(status::INVALID_COMMAND),
            };
            let primary = shared
                .views
                .leader(key.group_id())
                .unwrap_or(shared.config.replica);
            let Some(node) = roster_node(shared, primary) else {
                return error(status::ERROR);
            };
            shared
                .counters
                .poll_routes
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let mut out = Vec::new();
            response::PollRoute {
                client_id: current.client,
                session: current.session,
                metadata_watermark: 0,
                primary: node,
            }
            .put(&mut out);
            return ok(out);
        }
        Request::SyncConsumerGroup {
            stream,
            topic,
            group,
        } => {
            // Membership is read current: a join acknowledged through another node counts.
            if let Err(code) = read_barrier(shared, GroupKind::Metadata.id()).await {
                return error(code);
            }
            return match translate::group_assignment(
                &shared.views.metadata(),
                (stream, topic, group),
                current.internal,
            ) {
                Ok(body) => ok(body),
                Err(code) => error(code),
            };
        }
        Request::GetClient { client_id } => {
            // An unknown id answers an empty body: the SDK reads it as none.
            let mut out = Vec::new();
            if let Some(client) = shared.connections.get(*client_id) {
                response::put_client_details(&mut out, &client, &[]);
            }
            return ok(out);
        }
        Request::GetClients => {
            let mut out = Vec::new();
            response::put_clients(&mut out, &shared.connections.all());
            return ok(out);
        }
        _ => {}
    }
    if let Some(answer) = user_request(shared, current, header, &request).await {
        return answer;
    }
    let route = route_when_known(shared, &request, balanced).await;
    // A send's batch, moved out of the request (routing only borrowed it).
    let mut request = request;
    let batch = match &mut request {
        Request::SendMessages { batch, .. } => std::mem::take(batch),
        _ => Vec::new(),
    };
    match route {
        Route::Answer(body) => ok(body),
        Route::Refuse(code) => error(code),
        Route::Metadata(mut op) => {
            translate::bind_member(
                &mut op,
                current.internal,
                shared.config.replica,
                shared.boot,
            );
            propose_for_client(shared, current, header, &op).await
        }
        Route::Messages { key, wire } => {
            if iggy_format::batch::decode(&batch).is_err() {
                return error(status::INVALID_MESSAGE_CHECKSUM);
            }
            if let Some(node) = shared.bus.counters().low_disk_node(shared.config.replica) {
                // A node's disk is below its reserve: nothing is appended until it is freed.
                tracing::debug!(node, partition = %key.dir_name(), "client port: a write refused: a node's disk is below its reserve");
                shared
                    .counters
                    .writes_refused_disk_low
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                return error(crate::admission::DISK_LOW);
            }
            match submit(
                shared,
                current,
                key.group_id(),
                header.request,
                operation::MESSAGES,
                batch,
            )
            .await
            {
                Ok((op, reply)) => {
                    let base_offset = reply
                        .get(..8)
                        .and_then(|b| b.try_into().ok())
                        .map_or(0, u64::from_le_bytes);
                    Answer::Reply {
                        status: 0,
                        body: translate::send_reply(key, wire, base_offset),
                        op,
                    }
                }
                Err(code) => error(code),
            }
        }
        Route::StoreOffset { key, body } => {
            store_offset(shared, current, key, header.request, body).await
        }
        Route::DeleteOffset { key, kind, id } => {
            // Only a consumer with a stored offset has one to delete (as Iggy answers), read
            // after a barrier: a store acknowledged through another node an instant ago counts.
            if let Err(code) = read_barrier(shared, key.group_id()).await {
                return error(code);
            }
            let views = shared.views.clone();
            let stored = tokio::task::spawn_blocking(move || {
                views
                    .partition(key)
                    .ok_or(status::PARTITION_NOT_FOUND)?
                    .stored_offset(kind, id)
                    .map_err(|_| status::ERROR)
            })
            .await
            .unwrap_or(Err(status::ERROR));
            match stored {
                Ok(Some(stored)) if stored.offset != DELETED => {
                    let body = iggy_segments::entry::encode_consumer_offset(kind, id, DELETED);
                    store_offset(shared, current, key, header.request, body.to_vec()).await
                }
                Ok(_) => error(status::CONSUMER_OFFSET_NOT_FOUND),
                Err(code) => error(code),
            }
        }
        Route::Poll {
            key,
            wire,
            consumer,
            strategy,
            count,
            auto_commit,
        } => {
            if consumer.0 == ConsumerKind::Group
                && let Err(code) = group_fence(
                    shared,
                    key,
                    consumer.1,
                    current.attached.unwrap_or(current.internal),
                )
                .await
            {
                return error(code);
            }
            if let Err(code) = read_barrier(shared, key.group_id()).await {
                return error(code);
            }
            let views = shared.views.clone();
            let polled = tokio::task::spawn_blocking(move || {
                poll(&views, (key, wire), consumer, strategy, count)
            })
            .await
            .unwrap_or(Err(status::ERROR));
            match polled {
                Ok((_, Some(last))) if auto_commit && client_gone() => {
                    // The client closed its connection while the poll waited (it timed out on
                    // a paused or cut-off node and moved on): nobody reads the answer, so the
                    // offset stays. Storing it would skip these messages for the consumer, and
                    // from a request this stale, perhaps messages it read since elsewhere.
                    tracing::info!(partition = %key.dir_name(), consumer = consumer.1, kind = ?consumer.0, last, "client port: a poll's client left before its answer; its offset is not stored");
                    shared
                        .counters
                        .orphan_polls
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    Answer::Reply {
                        status: CLOSE_CONNECTION,
                        body: Vec::new(),
                        op: 0,
                    }
                }
                Ok((body, Some(last))) if auto_commit => {
                    // The consumer's offset moves to the last message answered, committed
                    // through the partition's group before the messages go out: a `Next` poll
                    // that follows (on this node) starts after them. A store that fails leaves
                    // the offset where it was and still answers the messages (at least once).
                    let store =
                        iggy_segments::entry::encode_consumer_offset(consumer.0, consumer.1, last);
                    // Request numbers that only grow, across logins of the same client id too.
                    current.auto_commits = (current.auto_commits + 1).max(shared.clock.now_us());
                    let request = current.auto_commits;
                    if let Err(code) = submit_as(
                        shared,
                        current,
                        auto_commit_client(current.internal),
                        key.group_id(),
                        request,
                        operation::CONSUMER_OFFSET,
                        store.to_vec(),
                    )
                    .await
                    {
                        tracing::debug!(partition = %key.dir_name(), consumer = consumer.1, kind = ?consumer.0, last, code, "client port: a poll's auto-commit failed");
                    }
                    ok(body)
                }
                Ok((body, _)) => ok(body),
                Err(code) => error(code),
            }
        }
        Route::Flush { key, fsync } => flush(shared, key, fsync).await,
        Route::DeleteSegments { key, count } => {
            let below = match segments_floor(shared, key, count).await {
                Ok(Some(below)) => below,
                // Nothing sealed and committed to delete.
                Ok(None) => return ok(Vec::new()),
                Err(code) => return error(code),
            };
            let op = iggy_metadata::Op::DeleteSegments {
                stream: key.stream,
                topic: key.topic,
                partition: key.partition,
                below,
            };
            propose_for_client(shared, current, header, &op).await
        }
        Route::GetOffset {
            key,
            wire,
            consumer,
        } => {
            if let Err(code) = read_barrier(shared, key.group_id()).await {
                return error(code);
            }
            let views = shared.views.clone();
            tokio::task::spawn_blocking(move || stored_offset(&views, (key, wire), consumer))
                .await
                .unwrap_or(Err(status::ERROR))
                .map_or_else(error, ok)
        }
    }
}

/// Whether the session's user may send `request` ([`crate::users::authorize`]), against this
/// node's metadata and, when that refuses, again after a read barrier (a permission granted
/// through another node an instant ago counts).
async fn authorized<S: Storage + Clone + Send + Sync + 'static>(
    shared: &Arc<Shared<S>>,
    user: u32,
    request: &Request,
) -> Result<(), u32> {
    // The root may do anything: every request of the hot path skips the metadata.
    if user == ROOT_USER_ID {
        return Ok(());
    }
    let check = |state: &iggy_metadata::State| {
        crate::users::authorize(state, &shared.config, user, request)
    };
    if check(&shared.views.metadata()).is_ok() {
        return Ok(());
    }
    read_barrier(shared, GroupKind::Metadata.id()).await?;
    check(&shared.views.metadata())
}

/// The user commands (31-37): reads answered after a metadata read barrier, writes proposed as
/// metadata ops (a password hashed off the async threads first). `None`: not a user command.
async fn user_request<S: Storage + Clone + Send + Sync + 'static>(
    shared: &Arc<Shared<S>>,
    current: &mut Session,
    header: &RequestHeader,
    request: &Request,
) -> Option<Answer> {
    use crate::users::{ROOT_USER_ID, find_user};
    let is_user_command = matches!(
        request,
        Request::GetPersonalAccessTokens
            | Request::CreatePersonalAccessToken { .. }
            | Request::DeletePersonalAccessToken { .. }
            | Request::GetUser { .. }
            | Request::GetUsers
            | Request::CreateUser { .. }
            | Request::DeleteUser { .. }
            | Request::UpdateUser { .. }
            | Request::UpdatePermissions { .. }
            | Request::ChangePassword { .. }
    );
    if !is_user_command {
        return None;
    }
    if let Err(code) = read_barrier(shared, GroupKind::Metadata.id()).await {
        return Some(error(code));
    }
    let state = shared.views.metadata();
    let config = &shared.config;
    // Hashes and checks run on the password thread, whose queue bounds what users' creates and
    // password changes can cost the node (as it bounds logins).
    let logins = &shared.logins;
    let op = match request {
        Request::GetPersonalAccessTokens => {
            let mut out = Vec::new();
            response::put_tokens(&mut out, &crate::users::tokens_of(&state, current.user_id));
            return Some(ok(out));
        }
        Request::CreatePersonalAccessToken { name, expiry } => {
            if !(3..=30).contains(&name.len()) {
                return Some(error(status::INVALID_PERSONAL_ACCESS_TOKEN_NAME));
            }
            if state.tokens.contains_key(&(current.user_id, name.clone())) {
                return Some(error(status::PERSONAL_ACCESS_TOKEN_ALREADY_EXISTS));
            }
            let secret = crate::users::new_token();
            let hash = crate::users::token_hash(&secret);
            let op = Op::CreateToken {
                user: current.user_id,
                name: name.clone(),
                hash: hash.clone(),
                expiry_at: crate::users::token_expiry_at(shared.clock.now_us(), *expiry),
            };
            drop(state);
            // The secret is in the reply alone: the state keeps its hash. A replayed request
            // is answered from the client table without applying this proposal, so the hash
            // committed may be an earlier try's: the secret is answered only if it is this
            // one's (else the token exists, its secret lost with the first reply).
            let name = name.clone();
            return Some(
                match propose_for_client(shared, current, header, &op).await {
                    Answer::Reply {
                        status: 0,
                        body,
                        op,
                    } if matches!(response::split_result(&body), Ok(Ok(_))) => {
                        let committed = shared
                            .views
                            .metadata()
                            .tokens
                            .get(&(current.user_id, name))
                            .is_some_and(|t| t.hash == hash);
                        if committed {
                            let mut out = Vec::new();
                            put_result_ok(&mut out);
                            response::put_raw_token(&mut out, &secret);
                            Answer::Reply {
                                status: 0,
                                body: out,
                                op,
                            }
                        } else {
                            error(status::PERSONAL_ACCESS_TOKEN_ALREADY_EXISTS)
                        }
                    }
                    other => other,
                },
            );
        }
        Request::DeletePersonalAccessToken { name } => Op::DeleteToken {
            user: current.user_id,
            name: name.clone(),
        },
        Request::GetUsers => {
            let mut out = Vec::new();
            response::put_users(&mut out, &crate::users::user_infos(&state, config));
            return Some(ok(out));
        }
        Request::GetUser { user } => {
            let mut out = Vec::new();
            // An unknown user is an empty body (the SDK's none).
            if let Some((info, permissions)) = find_user(&state, config, user)
                .ok()
                .and_then(|id| crate::users::user_details(&state, config, id))
            {
                response::put_user_details(&mut out, &info, permissions.as_ref());
            }
            return Some(ok(out));
        }
        Request::CreateUser {
            username,
            password,
            status,
            permissions,
            options,
        } => {
            if !options.is_empty() {
                return Some(error(status::UNSUPPORTED_OPTION_KEY));
            }
            if let Err(code) = crate::users::check_username(username)
                .and_then(|()| crate::users::check_password(password))
            {
                return Some(error(code));
            }
            if *username == config.root_username {
                return Some(error(status::USER_ALREADY_EXISTS));
            }
            let password_hash = match logins.hash(password).await {
                Ok(hash) => hash,
                Err(code) => return Some(error(code)),
            };
            Op::CreateUser {
                username: username.clone(),
                password_hash,
                status: *status,
                permissions: permissions.as_ref().map(|p| p.to_bytes()),
            }
        }
        Request::DeleteUser { user } => match find_user(&state, config, user) {
            Ok(ROOT_USER_ID) => return Some(error(status::CANNOT_DELETE_USER)),
            Ok(user) => Op::DeleteUser { user },
            Err(code) => return Some(error(code)),
        },
        Request::UpdateUser {
            user,
            username,
            status,
            options,
        } => {
            if !options.is_empty() {
                return Some(error(status::UNSUPPORTED_OPTION_KEY));
            }
            if let Some(name) = username {
                if let Err(code) = crate::users::check_username(name) {
                    return Some(error(code));
                }
                if *name == config.root_username {
                    return Some(error(status::USER_ALREADY_EXISTS));
                }
            }
            match find_user(&state, config, user) {
                // The root is the configuration's: renamed or deactivated there.
                Ok(ROOT_USER_ID) => return Some(error(status::FEATURE_UNAVAILABLE)),
                Ok(user) => Op::UpdateUser {
                    user,
                    username: username.clone(),
                    status: *status,
                },
                Err(code) => return Some(error(code)),
            }
        }
        Request::UpdatePermissions { user, permissions } => match find_user(&state, config, user) {
            Ok(ROOT_USER_ID) => return Some(error(status::CANNOT_CHANGE_PERMISSIONS)),
            Ok(user) => Op::UpdatePermissions {
                user,
                permissions: permissions.as_ref().map(|p| p.to_bytes()),
            },
            Err(code) => return Some(error(code)),
        },
        Request::ChangePassword {
            user,
            current_password,
            new_password,
        } => {
            let user = match find_user(&state, config, user) {
                // The root's password is the configuration's.
                Ok(ROOT_USER_ID) => return Some(error(status::FEATURE_UNAVAILABLE)),
                Ok(user) => user,
                Err(code) => return Some(error(code)),
            };
            if let Err(code) = crate::users::check_password(new_password) {
                return Some(error(code));
            }
            let Some(stored) = state.users.get(&user).map(|u| u.password_hash.clone()) else {
                return Some(error(status::RESOURCE_NOT_FOUND));
            };
            match logins.verify(&stored, current_password).await {
                Some(true) => {}
                Some(false) => return Some(error(status::INVALID_CREDENTIALS)),
                None => return Some(error(status::TRANSIENT_NOT_ACCEPTED)),
            }
            match logins.hash(new_password).await {
                Ok(password_hash) => Op::ChangePassword {
                    user,
                    password_hash,
                },
                Err(code) => return Some(error(code)),
            }
        }
        _ => return None,
    };
    drop(state);
    Some(propose_for_client(shared, current, header, &op).await)
}

/// Proposes a client's metadata op (admitted first) under its request number and answers what
/// it did.
async fn propose_for_client<S: Storage + Clone + Send + Sync + 'static>(
    shared: &Arc<Shared<S>>,
    current: &mut Session,
    header: &RequestHeader,
    op: &Op,
) -> Answer {
    if let Err(refusal) = crate::admission::admit(
        op,
        &shared.views.metadata(),
        &shared.config.admission,
        || {
            crate::admission::Descriptors::of_this_process(
                shared
                    .counters
                    .open
                    .load(std::sync::atomic::Ordering::Relaxed),
            )
        },
    ) {
        tracing::warn!(client = %format_args!("{:#x}", header.client), status = refusal.status, reason = %refusal.reason, "client port: a metadata request refused before it was proposed");
        return error(refusal.status);
    }
    let Ok(encoded) = iggy_metadata::codec::encode_op(op) else {
        return error(status::INVALID_FORMAT);
    };
    let (op_number, reply) = match submit(
        shared,
        current,
        GroupKind::Metadata.id(),
        header.request,
        operation::METADATA,
        encoded,
    )
    .await
    {
        Ok(reply) => reply,
        Err(code) => return error(code),
    };
    let Ok(decoded) = iggy_metadata::codec::decode_reply(&reply) else {
        return error(status::ERROR);
    };
    // The reply describes what the op created from this node's state: a node that does
    // not lead the metadata group executes the commit a moment after the primary's
    // reply, so it first reads through a barrier (the commit is acknowledged: the
    // barrier's index covers it). Without it, a stream created through a backup was
    // answered with an empty body.
    if shared.views.leader(GroupKind::Metadata.id()) != Some(shared.config.replica) {
        let _ = read_barrier(shared, GroupKind::Metadata.id()).await;
    }
    Answer::Reply {
        status: 0,
        body: translate::metadata_reply(op, &decoded, &shared.views.metadata(), &|key| {
            partition_figures(shared, key)
        }),
        op: op_number,
    }
}

/// Statuses that say a name or id is not in this node's committed metadata.
const NOT_FOUND: [u32; 7] = [
    status::STREAM_ID_NOT_FOUND,
    status::STREAM_NAME_NOT_FOUND,
    status::TOPIC_ID_NOT_FOUND,
    status::TOPIC_NAME_NOT_FOUND,
    status::PARTITION_NOT_FOUND,
    status::CONSUMER_GROUP_ID_NOT_FOUND,
    status::CONSUMER_GROUP_NAME_NOT_FOUND,
];

/// Routes `request` by this node's committed metadata, made current first where the answer
/// depends on it: a metadata read (a listing, a stream or topic) and a name or id this node
/// does not know are routed again after a read barrier on the metadata group, so they reflect
/// every metadata write acknowledged before the request arrived, whichever node took it (a
/// topic created through another node an instant ago is found; a deleted one is gone). A
/// request for a partition is routed again, if the metadata moved meanwhile, once a metadata
/// barrier asked after it arrived answered (`current.rs`): a partition purged or deleted
/// through another node an instant ago is not the one it reaches.
async fn route_when_known<S: Storage + Clone + Send + Sync + 'static>(
    shared: &Arc<Shared<S>>,
    request: &Request,
    balanced: &mut u32,
) -> Route {
    let state = shared.views.metadata();
    let figures = |key| partition_figures(shared, key);
    let first = *balanced;
    let route = translate::route(
        request,
        &state,
        &shared.config.topic_defaults,
        balanced,
        &figures,
    );
    let current = match &route {
        Route::Refuse(code) => !NOT_FOUND.contains(code),
        Route::Answer(_) => false,
        _ => true,
    };
    if current {
        if !route.is_partition() {
            return route;
        }
        if let Err(code) = current::metadata_current(shared).await {
            return Route::Refuse(code);
        }
        let now = shared.views.metadata();
        if Arc::ptr_eq(&now, &state) {
            return route;
        }
        // Routed as if the first routing had not happened (a balanced send takes the same
        // turn), by the metadata as it now stands.
        *balanced = first;
        return translate::route(
            request,
            &now,
            &shared.config.topic_defaults,
            balanced,
            &figures,
        );
    }
    if let Err(code) = read_barrier(shared, GroupKind::Metadata.id()).await {
        return Route::Refuse(code);
    }
    let state = shared.views.metadata();
    translate::route(
        request,
        &state,
        &shared.config.topic_defaults,
        balanced,
        &figures,
    )
}

/// A partition this node could not create (a full disk) has no replica here to serve or
/// forward a request: the client's connection is closed, so that a client of several nodes
/// moves to one that hosts it (its peers serve it), as from a node cut off.
fn refuse_if_unavailable<S: Storage + Clone + Send + Sync + 'static>(
    shared: &Arc<Shared<S>>,
    group: u128,
) -> Result<(), u32> {
    if shared.views.is_unavailable(group) {
        tracing::info!(group = %format_args!("{group:#x}"), "client port: a request for a partition unavailable on this node; closing the client's connection");
        return Err(CLOSE_CONNECTION);
    }
    Ok(())
}

/// Waits until this node's replica of `group` has executed through a read index its primary
/// proved current (`iggy_vsr::Replica::read`): what this node then reads of the group reflects
/// every write acknowledged before. A refusal (a view change, no primary yet) is asked again
/// until the reply deadline, then answered `TransientNotAccepted` (nothing was read: the client
/// may ask again anywhere).
async fn read_barrier<S: Storage + Clone + Send + Sync + 'static>(
    shared: &Arc<Shared<S>>,
    group: u128,
) -> Result<(), u32> {
    refuse_if_unavailable(shared, group)?;
    let deadline = tokio::time::Instant::now() + shared.config.reply_deadline;
    loop {
        if shared.views.read_barrier(&shared.inbox, group).await {
            return Ok(());
        }
        shared.views.metrics.read_barrier_refused();
        if tokio::time::Instant::now() >= deadline {
            return Err(status::TRANSIENT_NOT_ACCEPTED);
        }
        // A view change takes tens of milliseconds: ask again shortly.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Registers the session of a login that passed, for `user_id`, and answers the login.
async fn start_session<S: Storage + Clone + Send + Sync + 'static>(
    shared: &Arc<Shared<S>>,
    header: &RequestHeader,
    user_id: u32,
    session: &mut Option<Session>,
) -> Answer {
    let config = &shared.config;
    let (mut fresh, op_number) = match register_session(shared, header.client, header.request).await
    {
        Ok(registered) => registered,
        Err(code) => return error(code),
    };
    fresh.user_id = user_id;
    let mut body = Vec::new();
    put_result_ok(&mut body);
    LoginReply {
        user_id,
        session: fresh.session,
        protocol: iggy_protocol::PROTOCOL_VERSION,
        server_version: config.server_version.clone(),
    }
    .put(&mut body);
    // A second login on the same connection: the first session's reply routes go (the
    // connection's end removes only the session it ends with).
    if let Some(mut old) = session.replace(fresh) {
        // It ended: it leaves its consumer groups as if its connection had closed.
        leave_groups(shared, &mut old).await;
        forget_session(shared, &old);
    }
    shared.count_sessions();
    Answer::Reply {
        status: 0,
        body,
        op: op_number,
    }
}

/// Registers a new session of wire client `client` through the metadata group (its login,
/// request `request`): its reply routes are in place when this returns, with the registration's
/// op.
async fn register_session<S: Storage + Clone + Send + Sync + 'static>(
    shared: &Arc<Shared<S>>,
    client: u128,
    request: u64,
) -> Result<(Session, u64), u32> {
    let (sender, replies) = mpsc::unbounded_channel();
    let number = shared.clock.now_us();
    let internal = session_client(client, number);
    {
        let mut clients = shared
            .clients
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        clients.insert(internal, sender.clone());
        clients.insert(auto_commit_client(internal), sender.clone());
    }
    let mut fresh = Session {
        client,
        internal,
        session: number,
        auto_commits: 0,
        last_request: request,
        user_id: ROOT_USER_ID,
        attached: None,
        replies,
        sender,
    };
    // Registered under the session's own id: the metadata group's table then takes this
    // session's requests (numbered from the login's 0 again), whatever an earlier login of the
    // same wire id left there.
    let op = Op::RegisterClient {
        client: internal,
        session: number,
    };
    let registered = match iggy_metadata::codec::encode_op(&op) {
        Ok(encoded) => {
            submit(
                shared,
                &mut fresh,
                GroupKind::Metadata.id(),
                request,
                operation::METADATA,
                encoded,
            )
            .await
        }
        Err(_) => Err(status::ERROR),
    };
    let registered = registered.and_then(|(op_number, reply)| {
        match iggy_metadata::codec::decode_reply(&reply) {
            Ok(iggy_metadata::codec::Reply::Applied(_)) => Ok(op_number),
            _ => Err(status::STALE_CLIENT),
        }
    });
    match registered {
        Ok(op_number) => Ok((fresh, op_number)),
        Err(code) => {
            forget_session(shared, &fresh);
            Err(code)
        }
    }
}

/// Proposes `op` through the metadata group under `session`'s next request number; the
/// metadata reply, or the status.
async fn propose<S: Storage + Clone + Send + Sync + 'static>(
    shared: &Arc<Shared<S>>,
    session: &mut Session,
    op: &Op,
) -> Result<iggy_metadata::codec::Reply, u32> {
    let encoded = iggy_metadata::codec::encode_op(op).map_err(|_| status::ERROR)?;
    session.last_request += 1;
    let request = session.last_request;
    let submitted = submit(
        shared,
        session,
        GroupKind::Metadata.id(),
        request,
        operation::METADATA,
        encoded,
    )
    .await;
    if submitted == Err(status::TRANSIENT_NOT_COMMITTED) {
        // It may have committed: the next proposal replays it under the same number, and the
        // group's client table answers it if it did (a new number could apply it twice).
        session.last_request -= 1;
    }
    let (_, reply) = submitted?;
    iggy_metadata::codec::decode_reply(&reply).map_err(|_| status::ERROR)
}

/// The wire client id the node's own session is derived from (its replica index xored in).
const NODE_CLIENT: u128 = 0x6e6f_6465_u128 << 96;

/// Sends a request to this node's replica of `group` and waits for its reply: the op and body
/// of a committed one, or the status to answer.
async fn submit<S: Storage + Clone + Send + Sync + 'static>(
    shared: &Arc<Shared<S>>,
    session: &mut Session,
    group: u128,
    request: u64,
    operation: u32,
    body: Vec<u8>,
) -> Result<(u64, Vec<u8>), u32> {
    let client = session.internal;
    submit_as(shared, session, client, group, request, operation, body).await
}

/// The client id a session's requests carry in the groups' client tables: the wire's client id
/// and the session (the server's clock at login, so never the same twice), hashed. Each login
/// starts with no entry in any group's table, so a client that logs in again under the same
/// id (its request numbers start over, its login is request 0) is never taken for a replay or
/// dropped as stale. A replay within one session (the SDK's rule for `TransientNotCommitted`)
/// keeps its id and is answered from the table.
fn session_client(client: u128, session: u64) -> u128 {
    let mut input = [0u8; 24];
    input[..16].copy_from_slice(&client.to_le_bytes());
    input[16..].copy_from_slice(&session.to_le_bytes());
    twox_hash::XxHash3_128::oneshot(&input).max(1)
}

/// The client id a session's auto-commits are requested under. A poll is not replicated, so it
/// repeats the number of the session's latest replicated request; under the session's own id
/// the store would be that request's replay (answered from the client table, never applied).
/// Its own id, with request numbers of its own, keeps the two apart; its replies come to the
/// same connection.
fn auto_commit_client(client: u128) -> u128 {
    client ^ (0xa070_c033_u128 << 96)
}

/// [`submit`] under client id `client` (the session's own, or its auto-commit id).
async fn submit_as<S: Storage + Clone + Send + Sync + 'static>(
    shared: &Arc<Shared<S>>,
    session: &mut Session,
    client: u128,
    group: u128,
    request: u64,
    operation: u32,
    body: Vec<u8>,
) -> Result<(u64, Vec<u8>), u32> {
    refuse_if_unavailable(shared, group)?;
    let message = Message::Request {
        cluster: shared.config.cluster,
        group,
        client,
        request,
        operation,
        body,
    };
    // A request for a group another node leads goes to that node's replica over the bus; its
    // reply comes back the same way (`ServerOutbox`). Unknown leader (a view change): to this
    // node's replica, which refuses until the group has a primary again.
    let sent_to = shared.views.leader(group);
    match sent_to {
        Some(leader) if leader != shared.config.replica => shared.bus.send(leader, message),
        _ => {
            let inbox = shared
                .inbox
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone();
            if !shared.views.enqueue(&inbox, message) {
                return Err(status::TRANSIENT_NOT_ACCEPTED);
            }
        }
    }
    let started = std::time::Instant::now();
    let submitted_ms = crate::bus::epoch_ms();
    let deadline = tokio::time::Instant::now() + shared.config.reply_deadline;
    // A request sent to a primary that is no longer the group's (it died, or lost its view) is
    // answered as not committed as soon as this node learns of the new view, instead of at the
    // deadline: the client replays it under the same number and the new primary's client table
    // answers it if it did commit. Checked a few times a second while waiting.
    let mut leader_check = tokio::time::interval(std::time::Duration::from_millis(100));
    loop {
        let reply = tokio::select! {
            reply = tokio::time::timeout_at(deadline, session.replies.recv()) => reply,
            _ = leader_check.tick() => {
                let now = shared.views.leader(group);
                if sent_to.is_some() && now.is_some() && now != sent_to {
                    tracing::debug!(group = format_args!("{group:#x}"), request, ?sent_to, leader = ?now, "client port: the primary changed while a request waited");
                    return Err(status::TRANSIENT_NOT_COMMITTED);
                }
                let counters = shared.bus.counters();
                if shared.config.roster.len() > 1
                    && crate::bus::epoch_ms().saturating_sub(submitted_ms) >= ISOLATED_AFTER_MS
                    && (!counters.heard_any_since(submitted_ms)
                        || !counters.heard_by_a_peer(shared.config.replica))
                {
                    // Not one frame of any peer since the request went out, or no peer that
                    // says it hears this node: it is cut off (a partition, or one way), and
                    // nothing it forwards or prepares can commit until that ends. The client is
                    // sent elsewhere by a closed connection, as if this node had died; it
                    // replays there.
                    tracing::warn!(group = format_args!("{group:#x}"), request, "client port: no peer heard, or none hearing this node, for a second while a request waited; closing the client's connection so it moves to another node");
                    shared.counters.isolated_closes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    return Err(CLOSE_CONNECTION);
                }
                continue;
            }
        };
        let Ok(Some(reply)) = reply else {
            tracing::debug!(group = format_args!("{group:#x}"), request, ?sent_to, leader = ?shared.views.leader(group), "client port: no reply by the deadline");
            return Err(status::TRANSIENT_NOT_COMMITTED);
        };
        let Message::Reply {
            request: answered,
            op,
            status: reply_status,
            body,
            from,
            ..
        } = reply
        else {
            continue;
        };
        if answered != request || from.group != group {
            continue;
        }
        return match reply_status {
            ReplyStatus::Committed => {
                shared.views.metrics.observe_commit(started.elapsed());
                Ok((op, body))
            }
            ReplyStatus::NotAccepted => Err(status::TRANSIENT_NOT_ACCEPTED),
            ReplyStatus::NotCommitted => Err(status::TRANSIENT_NOT_COMMITTED),
            ReplyStatus::Reused => {
                tracing::warn!(
                    group = format_args!("{group:#x}"),
                    client = format_args!("{client:#x}"),
                    request,
                    "client port: refused a request whose number the session already used for another body"
                );
                Err(status::STALE_CLIENT)
            }
        };
    }
}

/// Which peer forwarded each client's latest request to this node (its reply goes back there,
/// and the entry with it).
pub type Forwarded = Arc<Mutex<HashMap<u128, u8>>>;

/// Where a server node's replicas' messages go: peers over the bus; a reply to the connection of
/// the client it answers, or, for a request a peer forwarded, back to that peer.
pub struct ServerOutbox {
    pub bus: crate::bus::BusSender,
    pub clients: Clients,
    pub forwarded: Forwarded,
}

impl crate::runtime::Outbox for ServerOutbox {
    fn to_replica(&mut self, replica: u8, message: Message) {
        self.bus.send(replica, message);
    }

    fn to_client(&mut self, client: u128, message: Message) {
        if let Some(connection) = self
            .clients
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&client)
        {
            let _ = connection.send(message);
            return;
        }
        // The route goes with the reply it carries: a client has one request out at a time,
        // and its next forwarded request notes the route again. Kept, the map grew by a client
        // id per session for the node's life.
        let forwarder = self
            .forwarded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&client);
        if let Some(peer) = forwarder {
            self.bus.send(peer, message);
        }
    }
}

/// What the bus delivers on a server node: a reply goes to its client's connection here (it
/// answers a request this node forwarded); a request a peer forwarded is noted (its reply goes
/// back there) and goes to the replica; everything else goes to the replica.
pub fn deliver_from_bus<S: Storage + Clone>(
    peer: u8,
    message: Message,
    (inbox, views): (&Sender<Input<S>>, &Views<S>),
    clients: &Clients,
    forwarded: &Forwarded,
) {
    match &message {
        Message::Reply { client, .. } => {
            if let Some(connection) = clients
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get(client)
            {
                let _ = connection.send(message);
            }
        }
        Message::Request { client, .. } => {
            forwarded
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(*client, peer);
            views.enqueue(inbox, message);
        }
        _ => {
            views.enqueue(inbox, message);
        }
    }
}
