//! The replica bus: the nodes' replicas talk over TCP. Each node listens on its replica address
//! and dials every peer; a message for peer `i` goes out over this node's own connection to `i`,
//! and what a peer sends arrives over the connection it dialled. So each pair of nodes holds two
//! connections, each carrying one direction.
//!
//! - **Handshake** (a challenge and response both ways over the shared key, `docs/server.md`):
//!   three frames of [`HANDSHAKE_BYTES`], each the magic `IGGYBUS2`, the cluster id (u128), the
//!   sender's replica index (u8), 7 zero bytes, a 16-byte nonce and a 32-byte proof. The dialler's
//!   hello carries its fresh nonce and no proof; the listener's answer carries its own fresh
//!   nonce and an HMAC-SHA256 under the key of the role `listener`, the cluster, both indexes and
//!   both nonces; the dialler's confirmation carries the same for the role `dialer`. Each side
//!   checks the other's proof in constant time against the nonce it just drew, so a recorded
//!   handshake proves nothing in a new one, an answer cannot be reflected as a confirmation, and
//!   a proof names the index it was made for. Anything else is refused, logged with the address
//!   and the reason, and the connection closed. Without TLS the frames after it are not
//!   encrypted or signed: the key keeps out nodes that do not hold it, and the network path
//!   should still be private.
//! - **TLS** (`crate::tls`, optional): the connection is TLS first, the dialler checking the
//!   listener's certificate against the cluster's CA for the address it dialled; the handshake
//!   above then runs inside it.
//! - **Frames** are the replica messages' own encoding (`iggy_vsr::Message::encode`): a 256-byte
//!   header whose size field says how long the frame is. A frame that is too large or does not
//!   decode closes that connection and is counted; the node goes on, and the dialler reconnects.
//! - **Bounded queues.** Each peer has a queue of [`QUEUE_MESSAGES`] messages and at most
//!   [`QUEUE_BYTES`] of large ones; when it is full (the
//!   peer is slow or away) a new message is dropped and counted: the protocol resends what
//!   matters (prepares every 200 ms, heartbeats every 500 ms, repair on demand), and memory stays
//!   bounded through a repair burst of 128 prepares a round.
//! - **A closed connection is evidence.** When a peer's connection ends from its side (its
//!   process exited: the kernel closes its sockets at once), the node is told
//!   ([`start_with_close`]) and every group whose primary is that peer starts its view change
//!   without waiting out the 5 s heartbeat window.
//! - **Keepalives.** Every connection carries a `Ping` every 250 ms (a replica message no
//!   replica acts on, naming the nodes its sender heard in the last second), so every node
//!   hears each live, reachable peer at least four times a second whatever its load, and
//!   learns whom that peer hears.
//! - **Failure detection** ([`watch_peers`]): a peer silent for a second, or hearing fewer nodes
//!   than a quorum for half a second, is reported as a closed connection is.
//! - **Who campaigns.** A node that heard fewer peers than a quorum needs in the last second sends
//!   no `StartViewChange` or `DoViewChange` ([`BusSender::send`]).
//! - **Reconnects** back off from 50 ms to 2 s, doubling, with a log line on the first failure
//!   of a run and on recovery, not on every try.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hmac::{Hmac, Mac};
use iggy_vsr::Message;
use sha2::Sha256;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, mpsc};

/// A bus connection: plain TCP, or TLS over it.
trait Link: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Link for T {}
type Stream = Box<dyn Link>;

/// Writes `bytes` and flushes them (a TLS stream's records go out at the flush).
async fn send_all(stream: &mut Stream, bytes: &[u8]) -> std::io::Result<()> {
    stream.write_all(bytes).await?;
    stream.flush().await
}

/// Writes `message`'s frame and flushes it: a prepare's header, then its body where it lies
/// (`Message::encode_parts`), not a copy of both.
async fn send_message(stream: &mut Stream, message: &Message) -> std::io::Result<()> {
    let (head, body) = message.encode_parts();
    stream.write_all(&head).await?;
    if !body.is_empty() {
        stream.write_all(body).await?;
    }
    stream.flush().await
}

/// Reads `len` more bytes onto the end of `buf` without zeroing them first.
pub(crate) async fn read_onto<R: AsyncRead + Unpin>(
    stream: &mut R,
    buf: &mut Vec<u8>,
    len: usize,
) -> std::io::Result<()> {
    let end = buf.len() + len;
    buf.reserve_exact(len);
    while buf.len() < end {
        let wanted = u64::try_from(end - buf.len()).unwrap_or(u64::MAX);
        if (&mut *stream).take(wanted).read_buf(buf).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(())
}

const MAGIC: &[u8; 8] = b"IGGYBUS2";
/// A handshake frame: magic, cluster, index, padding, nonce, proof.
pub const HANDSHAKE_BYTES: usize = 80;
/// How long each handshake frame may take to arrive.
const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(5);
/// At most this many connections may be in their handshake at once; past it a new one is
/// closed unanswered. Peers are a handful and finish theirs in a round trip, so a stranger
/// opening connections by the thousand holds at most this many descriptors, each for at most
/// [`HANDSHAKE_DEADLINE`].
pub const HANDSHAKES_PENDING: u64 = 64;
const FRAME_HEADER: usize = 256;
/// The largest frame taken: a prepare of the largest batch, with room for its header.
pub const FRAME_BYTES_MAX: usize = 64 << 20;
/// A frame's body is read this much at a time (each counts as hearing its peer).
const FRAME_CHUNK: usize = 1 << 20;
/// Messages queued for one peer before new ones are dropped.
pub const QUEUE_MESSAGES: usize = 4096;

/// Who this node is on the bus.
#[derive(Clone, Debug)]
pub struct BusConfig {
    pub cluster: u128,
    pub replica: u8,
    /// Every node's replica address, by index (this node's own included).
    pub peers: Vec<SocketAddr>,
    /// The shared secret every node of the cluster is configured with.
    pub key: Vec<u8>,
    /// Run the connections over TLS (`crate::tls`); `None`: plain TCP.
    pub tls: Option<BusTls>,
}

/// The bus's TLS: this node's certificate for the connections it accepts, and the CA its
/// dialers check a peer's certificate against (for the IP address dialled).
#[derive(Clone)]
pub struct BusTls {
    pub server: Arc<rustls::ServerConfig>,
    pub client: Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for BusTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BusTls")
    }
}

/// What the bus counted, for the metrics.
#[derive(Debug, Default)]
pub struct BusCounters {
    pub frames_in: AtomicU64,
    pub frames_out: AtomicU64,
    pub dropped_queue_full: AtomicU64,
    pub bad_frames: AtomicU64,
    pub refused_handshakes: AtomicU64,
    /// Connections whose handshake has not finished yet (at most [`HANDSHAKES_PENDING`]).
    pub handshakes_pending: AtomicU64,
    /// When a refused handshake was last logged ([`epoch_ms`]): at most one line per 10 s.
    refusal_logged_ms: AtomicU64,
    pub connects: AtomicU64,
    /// View-change messages not sent because this node heard too few peers lately.
    pub campaigns_held_back: AtomicU64,
    /// Per peer index (the first [`HEARD_PEERS`]): when a frame of it last arrived, in
    /// milliseconds since the bus's epoch, plus one (0: never).
    pub heard: [AtomicU64; HEARD_PEERS],
    /// Per peer index: when its connection to this node last ended from its side (an
    /// [`epoch_ms`] reading, plus one; 0: never), the evidence a process died.
    pub closed: [AtomicU64; HEARD_PEERS],
    /// Per peer index: the `hears` of its last `Ping` (which nodes it heard lately).
    pub peer_hears: [AtomicU64; HEARD_PEERS],
    /// Per peer index: since when (an [`epoch_ms`] reading, plus one; 0: it does not) every
    /// ping of it said it heard fewer nodes than a quorum.
    pub peer_deaf_since: [AtomicU64; HEARD_PEERS],
    /// Peers taken for gone because nothing of them arrived for [`SILENT_MS`], or because
    /// their pings said they heard too few nodes to lead.
    pub silent_peers: AtomicU64,
    pub deaf_peers: AtomicU64,
    /// This node's data directory has less free space than its reserve (the client port's
    /// monitor sets it); its pings say so ([`DISK_LOW`]).
    pub disk_low: std::sync::atomic::AtomicBool,
    /// Per peer index: its last ping said its disk was below its reserve.
    pub peer_disk_low: [std::sync::atomic::AtomicBool; HEARD_PEERS],
}

/// The bit of a `Ping`'s `hears` that says the sender's disk is below its reserve (a node
/// index never reaches it: rosters hold at most 32 nodes). Every node then refuses client
/// writes: every node holds every partition, and a node whose disk fills fails its next
/// segment's allocation.
pub const DISK_LOW: u64 = 1 << 63;

/// Every connection carries a [`Message::Ping`] this often, whatever else it carries.
pub const PING_INTERVAL: Duration = Duration::from_millis(250);

/// A peer whose pings said it heard fewer nodes than a quorum for this long (two pings apart)
/// is taken for unable to lead.
pub const DEAF_MS: u64 = 500;

/// A peer of which nothing arrived for this long (four pings) is taken for gone: its
/// primaryships end at once, as when its connection closes.
pub const SILENT_MS: u64 = 1_000;

/// How recently a node must have heard a quorum of peers to send view-change messages
/// ([`BusSender::send`]): the silence after which it takes its peers for gone, so that the view
/// changes that silence starts on a node cut off are held back (with a longer window, a node
/// cut off for between one and two seconds pulled its peers into views it was to lead).
pub const CAMPAIGN_WINDOW_MS: u64 = SILENT_MS;

/// Peers whose last frame is timed ([`BusCounters::heard`]).
pub const HEARD_PEERS: usize = 16;

/// Milliseconds since the first call in this process: the clock of [`BusCounters::heard`].
pub fn epoch_ms() -> u64 {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let epoch = EPOCH.get_or_init(std::time::Instant::now);
    u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
}

impl BusCounters {
    fn closed_from(&self, peer: u8) {
        if let Some(slot) = self.closed.get(usize::from(peer)) {
            slot.fetch_max(epoch_ms() + 1, Ordering::Relaxed);
        }
    }

    /// Whether `peer`'s connection ended from its side at least `grace_ms` ago and nothing of
    /// it arrived since (a process that died, not one that reconnected).
    pub fn closed_and_silent(&self, peer: u8, grace_ms: u64) -> bool {
        let closed = self
            .closed
            .get(usize::from(peer))
            .map_or(0, |slot| slot.load(Ordering::Relaxed));
        closed != 0 && closed >= self.last_heard_ms(peer) && epoch_ms() + 1 >= closed + grace_ms
    }

    fn heard_from(&self, peer: u8) {
        if let Some(slot) = self.heard.get(usize::from(peer)) {
            slot.fetch_max(epoch_ms() + 1, Ordering::Relaxed);
        }
    }

    /// The nodes heard in the last [`SILENT_MS`], as a `Ping`'s `hears` (this node's own bit
    /// set).
    pub fn hears(&self, own: u8) -> u64 {
        let since = epoch_ms().saturating_sub(SILENT_MS);
        let bit = |i: u32| 1u64.checked_shl(i).unwrap_or(0);
        let mut bits = bit(u32::from(own));
        for (i, slot) in (0u32..).zip(self.heard.iter()) {
            if slot.load(Ordering::Relaxed) > since {
                bits |= bit(i);
            }
        }
        bits
    }

    /// Whether a refused handshake may be logged now: one line per 10 s, so that a stranger's
    /// flood does not flood the log while a misconfigured peer still shows.
    fn log_refusal(&self) -> bool {
        let now = epoch_ms() + 1;
        let last = self.refusal_logged_ms.load(Ordering::Relaxed);
        (last == 0 || now >= last + 10_000)
            && self
                .refusal_logged_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    /// Whether some peer heard in the last [`SILENT_MS`] says, in its last ping, that it hears
    /// this node (`own`): what this node sends arrives somewhere.
    pub fn heard_by_a_peer(&self, own: u8) -> bool {
        let since = epoch_ms().saturating_sub(SILENT_MS);
        let mine = 1u64.checked_shl(u32::from(own)).unwrap_or(0);
        self.heard
            .iter()
            .zip(self.peer_hears.iter())
            .any(|(heard, hears)| {
                heard.load(Ordering::Relaxed) > since && hears.load(Ordering::Relaxed) & mine != 0
            })
    }

    /// A node whose disk is below its reserve: this one (`own`), or a peer heard in the last
    /// [`SILENT_MS`] whose last ping said so.
    pub fn low_disk_node(&self, own: u8) -> Option<u8> {
        if self.disk_low.load(Ordering::Relaxed) {
            return Some(own);
        }
        let since = epoch_ms().saturating_sub(SILENT_MS);
        (0u8..)
            .zip(self.heard.iter().zip(self.peer_disk_low.iter()))
            .find(|(_, (heard, low))| {
                heard.load(Ordering::Relaxed) > since && low.load(Ordering::Relaxed)
            })
            .map(|(peer, _)| peer)
    }

    /// When a frame of `peer` last arrived ([`epoch_ms`]; 0: not since this process began).
    pub fn last_heard_ms(&self, peer: u8) -> u64 {
        self.heard
            .get(usize::from(peer))
            .map_or(0, |slot| slot.load(Ordering::Relaxed))
    }

    /// Whether a frame of any peer arrived at or after `since` (an [`epoch_ms`] reading).
    pub fn heard_any_since(&self, since: u64) -> bool {
        self.heard
            .iter()
            .any(|slot| slot.load(Ordering::Relaxed) > since)
    }
}

/// The sending half: one queue per peer.
#[derive(Clone)]
pub struct BusSender {
    queues: Vec<Option<mpsc::Sender<Message>>>,
    /// Per peer: the bytes its queue holds ([`queued_bytes`]), at most [`QUEUE_BYTES`].
    queued: Vec<Arc<AtomicU64>>,
    counters: Arc<BusCounters>,
}

/// The bytes a queued message holds, about (its bodies and headers; a small message counts as
/// its 256-byte header).
/// What a queued `message` holds in memory, about: its frame header and its body.
pub(crate) fn queued_bytes(message: &Message) -> u64 {
    let body = match message {
        Message::Prepare { body, .. }
        | Message::Request { body, .. }
        | Message::Reply { body, .. } => body.len(),
        Message::SnapshotChunk { bytes, .. } => bytes.len(),
        Message::DoViewChange { headers, .. } => headers.len() * 128,
        Message::StartView { headers, .. } => headers.len() * 128,
        _ => 0,
    };
    (FRAME_HEADER + body) as u64
}

/// Each peer's queue holds at most this many bytes of large messages besides its count
/// ([`QUEUE_MESSAGES`]): past it a message with a body is dropped (counted), as for a full
/// queue. Small messages (pings, acknowledgments, commits) always fit the count. Without it a
/// burst of 15 MiB requests from many clients held gigabytes in the queues of a node.
pub const QUEUE_BYTES: u64 = 128 << 20;
/// Messages at most this large are queued whatever [`QUEUE_BYTES`] says.
const SMALL_MESSAGE: u64 = 64 << 10;

impl BusSender {
    /// Whether this node heard, in the last [`CAMPAIGN_WINDOW_MS`], as many peers as a quorum
    /// needs besides itself (a majority of the roster, this node counted).
    pub fn hears_a_quorum(&self) -> bool {
        let roster = self.queues.len();
        let needed = roster / 2;
        let since = epoch_ms().saturating_sub(CAMPAIGN_WINDOW_MS);
        let heard = self
            .counters
            .heard
            .iter()
            .filter(|slot| slot.load(Ordering::Relaxed) > since)
            .count();
        heard >= needed
    }

    /// What the bus counted (and when each peer was last heard).
    pub fn counters(&self) -> &BusCounters {
        &self.counters
    }

    /// Queues `message` for `replica`; a full queue drops it (counted).
    ///
    /// A node that has heard fewer peers than a quorum needs besides itself in the last
    /// [`CAMPAIGN_WINDOW_MS`] sends no `StartViewChange` or `DoViewChange` (counted): its
    /// replicas time out on primaries they cannot hear, but a view change they start cannot
    /// complete (they would not hear the answers), and it would pull the peers that can still
    /// commit into a view led by this node or waiting for it. Dropping a message is always
    /// safe; the node campaigns again as soon as it hears its peers. (A deaf node, one whose
    /// peers hear it and it none of them, made every group it backed wait out the partition.)
    pub fn send(&self, replica: u8, message: Message) {
        let Some(Some(queue)) = self.queues.get(usize::from(replica)) else {
            return;
        };
        if matches!(
            message,
            Message::StartViewChange { .. } | Message::DoViewChange { .. }
        ) && !self.hears_a_quorum()
        {
            self.counters
                .campaigns_held_back
                .fetch_add(1, Ordering::Relaxed);
            return;
        }
        let bytes = queued_bytes(&message);
        let queued = &self.queued[usize::from(replica)];
        if bytes > SMALL_MESSAGE && queued.load(Ordering::Relaxed) + bytes > QUEUE_BYTES {
            self.counters
                .dropped_queue_full
                .fetch_add(1, Ordering::Relaxed);
            return;
        }
        queued.fetch_add(bytes, Ordering::Relaxed);
        if queue.try_send(message).is_err() {
            queued.fetch_sub(bytes, Ordering::Relaxed);
            self.counters
                .dropped_queue_full
                .fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A handshake nonce: drawn fresh for each handshake from the operating system.
pub type Nonce = [u8; 16];

/// A fresh nonce, or why the operating system gave none: the handshake then fails rather than
/// run on a predictable nonce, which would make a recorded handshake pass again.
pub fn nonce() -> Result<Nonce, String> {
    let mut nonce = [0u8; 16];
    getrandom::fill(&mut nonce).map_err(|e| format!("no random nonce for the handshake: {e}"))?;
    Ok(nonce)
}

/// A handshake frame from `config`'s node: `nonce` and `proof` (zero in a hello).
fn frame(config: &BusConfig, nonce: &Nonce, proof: &[u8; 32]) -> [u8; HANDSHAKE_BYTES] {
    let mut bytes = [0u8; HANDSHAKE_BYTES];
    bytes[..8].copy_from_slice(MAGIC);
    bytes[8..24].copy_from_slice(&config.cluster.to_le_bytes());
    bytes[24] = config.replica;
    bytes[32..48].copy_from_slice(nonce);
    bytes[48..80].copy_from_slice(proof);
    bytes
}

/// The parts of a frame whose magic and cluster are this node's: the sender's index, nonce and
/// proof.
fn parse(
    config: &BusConfig,
    bytes: &[u8; HANDSHAKE_BYTES],
) -> Result<(u8, Nonce, [u8; 32]), String> {
    if &bytes[..8] != MAGIC {
        return Err("not a replica bus handshake (bad magic: a node of another version?)".into());
    }
    let cluster = u128::from_le_bytes(bytes[8..24].try_into().expect("16 bytes"));
    if cluster != config.cluster {
        return Err(format!(
            "cluster {cluster:#x}, this node's is {:#x}",
            config.cluster
        ));
    }
    if bytes[25..32].iter().any(|b| *b != 0) {
        return Err("a handshake frame with bytes where zeros belong".into());
    }
    let nonce: Nonce = bytes[32..48].try_into().expect("16 bytes");
    let proof: [u8; 32] = bytes[48..80].try_into().expect("32 bytes");
    Ok((bytes[24], nonce, proof))
}

/// The HMAC a side of a handshake proves the key with: over its role, the cluster, the
/// dialler's and the listener's indexes and both nonces.
fn mac(
    config: &BusConfig,
    role: &[u8],
    (dialer, listener): (u8, u8),
    (dialer_nonce, listener_nonce): (&Nonce, &Nonce),
) -> Hmac<Sha256> {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&config.key)
        .unwrap_or_else(|_| unreachable!("HMAC takes a key of any length"));
    mac.update(b"iggy replica bus v2 ");
    mac.update(role);
    mac.update(&config.cluster.to_le_bytes());
    mac.update(&[dialer, listener]);
    mac.update(dialer_nonce);
    mac.update(listener_nonce);
    mac
}

fn prove(config: &BusConfig, role: &[u8], indexes: (u8, u8), nonces: (&Nonce, &Nonce)) -> [u8; 32] {
    mac(config, role, indexes, nonces)
        .finalize()
        .into_bytes()
        .into()
}

fn verify(
    config: &BusConfig,
    role: &[u8],
    indexes: (u8, u8),
    nonces: (&Nonce, &Nonce),
    proof: &[u8; 32],
) -> Result<(), String> {
    // `verify_slice` compares in constant time.
    mac(config, role, indexes, nonces)
        .verify_slice(proof)
        .map_err(|_| "the handshake does not prove the cluster key".to_string())
}

const DIALER: &[u8] = b"dialer";
const LISTENER: &[u8] = b"listener";

/// The dialler's first frame: who it is and its fresh nonce.
pub fn hello(config: &BusConfig, nonce: &Nonce) -> [u8; HANDSHAKE_BYTES] {
    frame(config, nonce, &[0; 32])
}

/// The listener's check of a hello: the dialler's index (a peer's, within the roster) and nonce.
pub fn check_hello(
    config: &BusConfig,
    bytes: &[u8; HANDSHAKE_BYTES],
) -> Result<(u8, Nonce), String> {
    let (replica, nonce, proof) = parse(config, bytes)?;
    if usize::from(replica) >= config.peers.len() || replica == config.replica {
        return Err(format!(
            "replica index {replica} is not a peer (this node is {} of {})",
            config.replica,
            config.peers.len()
        ));
    }
    if proof != [0; 32] {
        return Err("a hello with a proof (a replayed answer or confirmation?)".into());
    }
    Ok((replica, nonce))
}

/// The listener's answer to dialler `dialer`'s hello: its fresh nonce and its proof of the key.
pub fn answer(
    config: &BusConfig,
    dialer: u8,
    dialer_nonce: &Nonce,
    nonce: &Nonce,
) -> [u8; HANDSHAKE_BYTES] {
    let proof = prove(
        config,
        LISTENER,
        (dialer, config.replica),
        (dialer_nonce, nonce),
    );
    frame(config, nonce, &proof)
}

/// The dialler's check of the answer of `listener` (the peer it dialled) to its hello of
/// `dialer_nonce`: the listener's nonce.
pub fn check_answer(
    config: &BusConfig,
    listener: u8,
    dialer_nonce: &Nonce,
    bytes: &[u8; HANDSHAKE_BYTES],
) -> Result<Nonce, String> {
    let (replica, nonce, proof) = parse(config, bytes)?;
    if replica != listener {
        return Err(format!(
            "answered by replica {replica}, {listener} was dialled"
        ));
    }
    verify(
        config,
        LISTENER,
        (config.replica, listener),
        (dialer_nonce, &nonce),
        &proof,
    )?;
    Ok(nonce)
}

/// The dialler's confirmation: its proof of the key over both nonces.
pub fn confirm(
    config: &BusConfig,
    listener: u8,
    dialer_nonce: &Nonce,
    listener_nonce: &Nonce,
) -> [u8; HANDSHAKE_BYTES] {
    let proof = prove(
        config,
        DIALER,
        (config.replica, listener),
        (dialer_nonce, listener_nonce),
    );
    frame(config, &[0; 16], &proof)
}

/// The listener's check of dialler `dialer`'s confirmation of the nonces.
pub fn check_confirm(
    config: &BusConfig,
    dialer: u8,
    (dialer_nonce, listener_nonce): (&Nonce, &Nonce),
    bytes: &[u8; HANDSHAKE_BYTES],
) -> Result<(), String> {
    let (replica, _, proof) = parse(config, bytes)?;
    if replica != dialer {
        return Err(format!(
            "confirmed by replica {replica}, {dialer} said hello"
        ));
    }
    verify(
        config,
        DIALER,
        (dialer, config.replica),
        (dialer_nonce, listener_nonce),
        &proof,
    )
}

/// The dialler's side of the handshake on a blocking stream (the tools' and tests' way).
pub fn dial_blocking(
    stream: &mut std::net::TcpStream,
    config: &BusConfig,
    listener: u8,
) -> Result<(), String> {
    use std::io::{Read, Write};
    let mine = nonce()?;
    stream
        .write_all(&hello(config, &mine))
        .map_err(|e| e.to_string())?;
    let mut bytes = [0u8; HANDSHAKE_BYTES];
    stream
        .read_exact(&mut bytes)
        .map_err(|e| format!("the peer closed the handshake: {e}"))?;
    let theirs = check_answer(config, listener, &mine, &bytes)?;
    stream
        .write_all(&confirm(config, listener, &mine, &theirs))
        .map_err(|e| e.to_string())
}

/// Reads one handshake frame within [`HANDSHAKE_DEADLINE`].
async fn read_frame(stream: &mut Stream) -> Result<[u8; HANDSHAKE_BYTES], String> {
    let mut bytes = [0u8; HANDSHAKE_BYTES];
    match tokio::time::timeout(HANDSHAKE_DEADLINE, stream.read_exact(&mut bytes)).await {
        Ok(Ok(_)) => Ok(bytes),
        Ok(Err(e)) => Err(format!("reading the handshake: {e}")),
        Err(_) => Err(format!(
            "no handshake frame within {} s",
            HANDSHAKE_DEADLINE.as_secs()
        )),
    }
}

/// The listener's side: the dialler's index once it proved the key.
async fn accept_handshake(stream: &mut Stream, config: &BusConfig) -> Result<u8, String> {
    let (dialer, dialer_nonce) = check_hello(config, &read_frame(stream).await?)?;
    let mine = nonce()?;
    send_all(stream, &answer(config, dialer, &dialer_nonce, &mine))
        .await
        .map_err(|e| e.to_string())?;
    check_confirm(
        config,
        dialer,
        (&dialer_nonce, &mine),
        &read_frame(stream).await?,
    )?;
    Ok(dialer)
}

/// Starts the bus: binds this node's replica address, accepts peers (each frame goes to
/// `deliver` with the sending peer's index), and dials every peer. Returns the sender for the outbox and the bound
/// address (the configured one, or the port the OS chose for port 0).
pub async fn start(
    config: BusConfig,
    deliver: impl Fn(u8, Message) + Send + Sync + 'static,
    counters: Arc<BusCounters>,
) -> std::io::Result<(BusSender, SocketAddr)> {
    start_with_close(config, deliver, |_| {}, counters).await
}

/// [`start`], and `closed` is called with a peer's index when its connection to this node
/// ends from the peer's side (end of stream or a read error after the handshake: its process
/// exited, or the network ended the connection), not when this node closes it over a bad frame.
/// The server makes it evidence for the replicas that the peer's primaryships are over.
pub async fn start_with_close(
    config: BusConfig,
    deliver: impl Fn(u8, Message) + Send + Sync + 'static,
    closed: impl Fn(u8) + Send + Sync + 'static,
    counters: Arc<BusCounters>,
) -> std::io::Result<(BusSender, SocketAddr)> {
    let own = config.peers[usize::from(config.replica)];
    let listener = TcpListener::bind(own).await?;
    let bound = listener.local_addr()?;
    let config = Arc::new(config);
    let deliver = Arc::new(deliver);
    let closed = Arc::new(closed);
    tokio::spawn(watch_peers(
        config.clone(),
        counters.clone(),
        closed.clone(),
    ));
    // A peer that connects to this node is up: its dialer stops waiting out its backoff.
    let up: Arc<Vec<Arc<Notify>>> = Arc::new(
        (0..config.peers.len())
            .map(|_| Arc::new(Notify::new()))
            .collect(),
    );
    {
        let config = config.clone();
        let counters = counters.clone();
        let up = up.clone();
        tokio::spawn(async move {
            loop {
                let (stream, address) = crate::accept::accept(&listener, "replica bus").await;
                if counters.handshakes_pending.fetch_add(1, Ordering::Relaxed) >= HANDSHAKES_PENDING
                {
                    counters.handshakes_pending.fetch_sub(1, Ordering::Relaxed);
                    let refused = counters.refused_handshakes.fetch_add(1, Ordering::Relaxed) + 1;
                    if counters.log_refusal() {
                        tracing::warn!(%address, pending = HANDSHAKES_PENDING, refused, "replica bus: too many connections in their handshake; closing new ones (one line per 10 s)");
                    }
                    continue;
                }
                let _ = stream.set_nodelay(true);
                crate::accept::keepalive(&stream);
                tokio::spawn(serve_peer(
                    stream,
                    address,
                    config.clone(),
                    (deliver.clone(), closed.clone()),
                    (counters.clone(), up.clone()),
                ));
            }
        });
    }
    let mut queues = Vec::new();
    let queued: Vec<Arc<AtomicU64>> = (0..config.peers.len())
        .map(|_| Arc::new(AtomicU64::new(0)))
        .collect();
    for (index, address) in config.peers.iter().enumerate() {
        if index == usize::from(config.replica) {
            queues.push(None);
            continue;
        }
        let (sender, receiver) = mpsc::channel(QUEUE_MESSAGES);
        tokio::spawn(dial_peer(
            *address,
            index,
            config.clone(),
            (receiver, queued[index].clone()),
            (counters.clone(), up[index].clone()),
        ));
        queues.push(Some(sender));
    }
    Ok((
        BusSender {
            queues,
            queued,
            counters,
        },
        bound,
    ))
}

/// Tells the node (`gone`, as for a closed connection) when a peer it heard goes silent for
/// [`SILENT_MS`] (paused, cut off, or its messages no longer reach this node), and when a peer's
/// pings say it hears fewer nodes than a quorum (it cannot lead: nothing it prepares can commit,
/// nor can it learn of a later view). Once per episode: a peer heard again, or hearing a quorum
/// again, arms it anew.
async fn watch_peers(
    config: Arc<BusConfig>,
    counters: Arc<BusCounters>,
    gone: Arc<impl Fn(u8) + Send + Sync + 'static>,
) {
    let peers = config.peers.len().min(HEARD_PEERS);
    let quorum = config.peers.len() / 2 + 1;
    // Armed: the peer was heard (hearing a quorum) since it was last reported.
    let mut silent_armed = vec![false; peers];
    let mut deaf_armed = vec![false; peers];
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    let mut last_tick = epoch_ms();
    // No judgment before this (an [`epoch_ms`] reading): this node was itself stopped or starved.
    let mut grace_until = 0;
    loop {
        tick.tick().await;
        let now = epoch_ms();
        if now.saturating_sub(last_tick) > 300 {
            // This node was paused (SIGSTOP, a VM stall) or starved: its peers' silence is its
            // own. Judge again only after a fresh second of listening (a node resumed after a
            // pause took every peer for gone at its first look).
            grace_until = now + SILENT_MS;
        }
        last_tick = now;
        if now < grace_until {
            continue;
        }
        let since = now.saturating_sub(SILENT_MS);
        for peer in 0..peers {
            if peer == usize::from(config.replica) {
                continue;
            }
            let index = u8::try_from(peer).unwrap_or(u8::MAX);
            let heard = counters.heard[peer].load(Ordering::Relaxed);
            if heard > since {
                silent_armed[peer] = true;
            } else if silent_armed[peer] && heard > 0 {
                silent_armed[peer] = false;
                counters.silent_peers.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    peer,
                    "replica bus: nothing of a peer for a second; its primaryships end"
                );
                gone(index);
            }
            let hears = counters.peer_hears[peer].load(Ordering::Relaxed);
            if hears == 0 || heard <= since {
                continue;
            }
            // Deaf for [`DEAF_MS`] of this node's clock, not one ping: the pings a partition
            // held back arrive in a burst when it heals, each saying what the peer heard then.
            let deaf_since = counters.peer_deaf_since[peer].load(Ordering::Relaxed);
            if hears.count_ones() as usize >= quorum {
                deaf_armed[peer] = true;
            } else if deaf_armed[peer] && deaf_since > 0 && epoch_ms() + 1 >= deaf_since + DEAF_MS {
                deaf_armed[peer] = false;
                counters.deaf_peers.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    peer,
                    hears = format_args!("{hears:#b}"),
                    "replica bus: a peer hears fewer nodes than a quorum; its primaryships end"
                );
                gone(index);
            }
        }
    }
}

async fn serve_peer(
    tcp: TcpStream,
    address: SocketAddr,
    config: Arc<BusConfig>,
    (deliver, closed): (
        Arc<impl Fn(u8, Message) + Send + Sync + 'static>,
        Arc<impl Fn(u8) + Send + Sync + 'static>,
    ),
    (counters, up): (Arc<BusCounters>, Arc<Vec<Arc<Notify>>>),
) {
    let stream: Result<Stream, String> = match &config.tls {
        None => Ok(Box::new(tcp)),
        Some(tls) => {
            let accept = tokio_rustls::TlsAcceptor::from(tls.server.clone()).accept(tcp);
            match tokio::time::timeout(HANDSHAKE_DEADLINE, accept).await {
                Ok(Ok(stream)) => Ok(Box::new(stream)),
                Ok(Err(e)) => Err(format!("TLS: {e}")),
                Err(_) => Err("no TLS handshake within 5 s".into()),
            }
        }
    };
    let handshake = match stream {
        Ok(mut stream) => accept_handshake(&mut stream, &config)
            .await
            .map(|peer| (peer, stream)),
        Err(reason) => Err(reason),
    };
    counters.handshakes_pending.fetch_sub(1, Ordering::Relaxed);
    let (peer, mut stream) = match handshake {
        Ok(done) => done,
        Err(reason) => {
            let refused = counters.refused_handshakes.fetch_add(1, Ordering::Relaxed) + 1;
            if counters.log_refusal() {
                tracing::warn!(%address, %reason, refused, "replica bus: refused a connection (one line per 10 s)");
            }
            return;
        }
    };
    // The peer is back: this node's connection to it (in backoff while it was down, up to 2 s)
    // is made now, so its first messages to the peer do not wait out the backoff (about 1 s
    // of every write gap after a node restarted while another failed).
    if let Some(up) = up.get(usize::from(peer)) {
        up.notify_one();
    }
    let mut header = [0u8; FRAME_HEADER];
    loop {
        if stream.read_exact(&mut header).await.is_err() {
            counters.closed_from(peer);
            closed(peer);
            return;
        }
        let size = u32::from_le_bytes(
            header[iggy_vsr::message::SIZE_OFFSET..iggy_vsr::message::SIZE_OFFSET + 4]
                .try_into()
                .expect("4 bytes"),
        ) as usize;
        if !(FRAME_HEADER..=FRAME_BYTES_MAX).contains(&size) {
            counters.bad_frames.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(%address, peer, size, "replica bus: a frame of impossible size; closing the connection");
            return;
        }
        // The body goes into a buffer of its own, unzeroed, which a prepare keeps as its body
        // (`Message::decode_parts`). A large frame is read a chunk at a time, and each chunk
        // counts as hearing the peer: one whose bytes keep arriving is alive, even while its
        // pings queue behind a burst of large prepares (15 MiB requests from 50 clients at once
        // took longer than a second to cross, and both sides took the other for gone).
        let body_len = size - FRAME_HEADER;
        let mut body = Vec::with_capacity(body_len);
        while body.len() < body_len {
            let chunk = FRAME_CHUNK.min(body_len - body.len());
            if read_onto(&mut stream, &mut body, chunk).await.is_err() {
                counters.closed_from(peer);
                closed(peer);
                return;
            }
            if body.len() < body_len {
                counters.heard_from(peer);
            }
        }
        match Message::decode_parts(&header, body) {
            Ok(message)
                if message.cluster_and_group().0 != config.cluster
                    || message.sender().is_some_and(|from| from.replica != peer) =>
            {
                counters.bad_frames.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%address, peer, message = %message.summary(), "replica bus: a frame of another cluster or sender than the handshake's; closing the connection");
                return;
            }
            Ok(Message::Ping { hears, .. }) => {
                counters.frames_in.fetch_add(1, Ordering::Relaxed);
                counters.heard_from(peer);
                let index = usize::from(peer);
                if let Some(low) = counters.peer_disk_low.get(index) {
                    low.store(hears & DISK_LOW != 0, Ordering::Relaxed);
                }
                let hears = hears & !DISK_LOW;
                if let (Some(slot), Some(since)) = (
                    counters.peer_hears.get(index),
                    counters.peer_deaf_since.get(index),
                ) {
                    slot.store(hears, Ordering::Relaxed);
                    if hears.count_ones() as usize > config.peers.len() / 2 {
                        since.store(0, Ordering::Relaxed);
                    } else if since.load(Ordering::Relaxed) == 0 {
                        since.store(epoch_ms() + 1, Ordering::Relaxed);
                    }
                }
            }
            Ok(message) => {
                counters.frames_in.fetch_add(1, Ordering::Relaxed);
                counters.heard_from(peer);
                deliver(peer, message);
            }
            Err(error) => {
                counters.bad_frames.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%address, peer, %error, "replica bus: a frame that does not decode; closing the connection");
                return;
            }
        }
    }
}

async fn dial_peer(
    address: SocketAddr,
    index: usize,
    config: Arc<BusConfig>,
    (mut queue, queued): (mpsc::Receiver<Message>, Arc<AtomicU64>),
    (counters, up): (Arc<BusCounters>, Arc<Notify>),
) {
    let mut backoff = Duration::from_millis(50);
    let mut failing = false;
    loop {
        match connect(address, &config, u8::try_from(index).unwrap_or(u8::MAX)).await {
            Ok(mut stream) => {
                counters.connects.fetch_add(1, Ordering::Relaxed);
                if failing {
                    tracing::info!(%address, peer = index, "replica bus: connected");
                }
                failing = false;
                backoff = Duration::from_millis(50);
                let mut pings = tokio::time::interval(PING_INTERVAL);
                pings.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    let message = tokio::select! {
                        message = queue.recv() => match message {
                            Some(message) => {
                                queued.fetch_sub(queued_bytes(&message), Ordering::Relaxed);
                                message
                            }
                            None => break,
                        },
                        _ = pings.tick() => Message::Ping {
                            from: iggy_vsr::From {
                                cluster: config.cluster,
                                group: 0,
                                replica: config.replica,
                                view: 0,
                            },
                            hears: counters.hears(config.replica)
                                | if counters.disk_low.load(Ordering::Relaxed) {
                                    DISK_LOW
                                } else {
                                    0
                                },
                        },
                    };
                    if send_message(&mut stream, &message).await.is_err() {
                        break;
                    }
                    counters.frames_out.fetch_add(1, Ordering::Relaxed);
                }
                if queue.is_closed() {
                    return;
                }
            }
            Err(reason) => {
                if !failing {
                    tracing::warn!(%address, peer = index, %reason, "replica bus: cannot reach a peer; retrying with backoff");
                }
                failing = true;
                // What queued meanwhile is stale by the time the peer is back: drop it.
                while let Ok(message) = queue.try_recv() {
                    queued.fetch_sub(queued_bytes(&message), Ordering::Relaxed);
                }
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {
                        backoff = (backoff * 2).min(Duration::from_secs(2));
                    }
                    () = up.notified() => backoff = Duration::from_millis(50),
                }
            }
        }
    }
}

async fn connect(address: SocketAddr, config: &BusConfig, peer: u8) -> Result<Stream, String> {
    let tcp = TcpStream::connect(address)
        .await
        .map_err(|e| e.to_string())?;
    let _ = tcp.set_nodelay(true);
    crate::accept::keepalive(&tcp);
    let mut stream: Stream = match &config.tls {
        None => Box::new(tcp),
        Some(tls) => {
            // The peer's certificate must be the CA's, for the address dialled.
            let connect = tokio_rustls::TlsConnector::from(tls.client.clone())
                .connect(crate::tls::server_name(address.ip()), tcp);
            match tokio::time::timeout(HANDSHAKE_DEADLINE, connect).await {
                Ok(Ok(stream)) => Box::new(stream),
                Ok(Err(e)) => return Err(format!("TLS: {e}")),
                Err(_) => return Err("no TLS handshake within 5 s".into()),
            }
        }
    };
    let mine = nonce()?;
    send_all(&mut stream, &hello(config, &mine))
        .await
        .map_err(|e| e.to_string())?;
    let theirs = check_answer(config, peer, &mine, &read_frame(&mut stream).await?)?;
    send_all(&mut stream, &confirm(config, peer, &mine, &theirs))
        .await
        .map_err(|e| e.to_string())?;
    Ok(stream)
}
