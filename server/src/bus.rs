//! The replica bus: the nodes' replicas talk over TCP. Each node listens on its replica address
//! and dials every peer; a message for peer `i` goes out over this node's own connection to `i`,
//! and what a peer sends arrives over the connection it dialled. So each pair of nodes holds two
//! connections, each carrying one direction.
//!
//! - **Handshake.** The dialler sends 64 bytes: the magic `IGGYBUS1`, the cluster id (u128), its
//!   replica index (u8), 7 zero bytes, and the XXH3-128 of the configured key followed by those
//!   first 32 bytes. The listener answers the same from its side and keeps the connection only
//!   when the cluster matches, the index is a peer's (not its own, within the roster) and the
//!   digest proves the key. Anything else is refused, logged with the address and the reason,
//!   and the connection closed. The key keeps a misconfigured node (another cluster, another
//!   key) out; it is not authentication against someone on the network path, who can replay a
//!   handshake: keep the replica plane on a private network.
//! - **Frames** are the replica messages' own encoding (`iggy_vsr::Message::encode`): a 256-byte
//!   header whose size field says how long the frame is. A frame that is too large or does not
//!   decode closes that connection and is counted; the node goes on, and the dialler reconnects.
//! - **Bounded queues.** Each peer has a queue of [`QUEUE_MESSAGES`] messages; when it is full (the
//!   peer is slow or away) a new message is dropped and counted: the protocol resends what
//!   matters (prepares every 200 ms, heartbeats every 500 ms, repair on demand), and memory stays
//!   bounded through a repair burst of 128 prepares a round.
//! - **A closed connection is evidence.** When a peer's connection ends from its side (its
//!   process exited: the kernel closes its sockets at once), the node is told
//!   ([`start_with_close`]) and every group whose primary is that peer starts its view change
//!   without waiting out the 5 s heartbeat window.
//! - **Reconnects** back off from 50 ms to 2 s, doubling, with a log line on the first failure
//!   of a run and on recovery, not on every try.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use iggy_vsr::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, mpsc};

const MAGIC: &[u8; 8] = b"IGGYBUS1";
const HANDSHAKE_BYTES: usize = 64;
const FRAME_HEADER: usize = 256;
/// The largest frame taken: a prepare of the largest batch, with room for its header.
pub const FRAME_BYTES_MAX: usize = 64 << 20;
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
}

/// What the bus counted, for the metrics.
#[derive(Debug, Default)]
pub struct BusCounters {
    pub frames_in: AtomicU64,
    pub frames_out: AtomicU64,
    pub dropped_queue_full: AtomicU64,
    pub bad_frames: AtomicU64,
    pub refused_handshakes: AtomicU64,
    pub connects: AtomicU64,
}

/// The sending half: one queue per peer.
#[derive(Clone)]
pub struct BusSender {
    queues: Vec<Option<mpsc::Sender<Message>>>,
    counters: Arc<BusCounters>,
}

impl BusSender {
    /// Queues `message` for `replica`; a full queue drops it (counted).
    pub fn send(&self, replica: u8, message: Message) {
        let Some(Some(queue)) = self.queues.get(usize::from(replica)) else {
            return;
        };
        if queue.try_send(message).is_err() {
            self.counters
                .dropped_queue_full
                .fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The handshake this node sends (and answers with).
pub fn handshake_bytes(config: &BusConfig) -> [u8; HANDSHAKE_BYTES] {
    let mut bytes = [0u8; HANDSHAKE_BYTES];
    bytes[..8].copy_from_slice(MAGIC);
    bytes[8..24].copy_from_slice(&config.cluster.to_le_bytes());
    bytes[24] = config.replica;
    let digest = digest(&config.key, &bytes[..32]);
    bytes[32..48].copy_from_slice(&digest.to_le_bytes());
    bytes
}

fn digest(key: &[u8], prefix: &[u8]) -> u128 {
    let mut input = key.to_vec();
    input.extend_from_slice(prefix);
    twox_hash::XxHash3_128::oneshot(&input)
}

/// Checks a peer's handshake; returns its replica index or why it is refused.
pub fn check_handshake(config: &BusConfig, bytes: &[u8; HANDSHAKE_BYTES]) -> Result<u8, String> {
    if &bytes[..8] != MAGIC {
        return Err("not a replica bus handshake (bad magic)".into());
    }
    let cluster = u128::from_le_bytes(bytes[8..24].try_into().expect("16 bytes"));
    if cluster != config.cluster {
        return Err(format!(
            "cluster {cluster:#x}, this node's is {:#x}",
            config.cluster
        ));
    }
    let replica = bytes[24];
    if usize::from(replica) >= config.peers.len() || replica == config.replica {
        return Err(format!(
            "replica index {replica} is not a peer (this node is {} of {})",
            config.replica,
            config.peers.len()
        ));
    }
    let claimed = u128::from_le_bytes(bytes[32..48].try_into().expect("16 bytes"));
    if claimed != digest(&config.key, &bytes[..32]) || bytes[48..].iter().any(|b| *b != 0) {
        return Err("the handshake does not prove the cluster key".into());
    }
    Ok(replica)
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
                let Ok((stream, address)) = listener.accept().await else {
                    continue;
                };
                let _ = stream.set_nodelay(true);
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
            receiver,
            (counters.clone(), up[index].clone()),
        ));
        queues.push(Some(sender));
    }
    Ok((BusSender { queues, counters }, bound))
}

async fn serve_peer(
    mut stream: TcpStream,
    address: SocketAddr,
    config: Arc<BusConfig>,
    (deliver, closed): (
        Arc<impl Fn(u8, Message) + Send + Sync + 'static>,
        Arc<impl Fn(u8) + Send + Sync + 'static>,
    ),
    (counters, up): (Arc<BusCounters>, Arc<Vec<Arc<Notify>>>),
) {
    let mut handshake = [0u8; HANDSHAKE_BYTES];
    let peer = match tokio::time::timeout(Duration::from_secs(5), stream.read_exact(&mut handshake))
        .await
    {
        Ok(Ok(_)) => check_handshake(&config, &handshake),
        Ok(Err(e)) => Err(format!("reading the handshake: {e}")),
        Err(_) => Err("no handshake within 5 s".into()),
    };
    let peer = match peer {
        Ok(peer) => peer,
        Err(reason) => {
            counters.refused_handshakes.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(%address, %reason, "replica bus: refused a connection");
            return;
        }
    };
    if stream.write_all(&handshake_bytes(&config)).await.is_err() {
        return;
    }
    // The peer is back: this node's connection to it (in backoff while it was down, up to 2 s)
    // is made now, so its first messages to the peer do not wait out the backoff (about 1 s
    // of every write gap after a node restarted while another failed).
    if let Some(up) = up.get(usize::from(peer)) {
        up.notify_one();
    }
    let mut header = [0u8; FRAME_HEADER];
    loop {
        if stream.read_exact(&mut header).await.is_err() {
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
        let mut frame = vec![0u8; size];
        frame[..FRAME_HEADER].copy_from_slice(&header);
        if stream.read_exact(&mut frame[FRAME_HEADER..]).await.is_err() {
            closed(peer);
            return;
        }
        match Message::decode(&frame) {
            Ok(message)
                if message.cluster_and_group().0 != config.cluster
                    || message.sender().is_some_and(|from| from.replica != peer) =>
            {
                counters.bad_frames.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%address, peer, message = %message.summary(), "replica bus: a frame of another cluster or sender than the handshake's; closing the connection");
                return;
            }
            Ok(message) => {
                counters.frames_in.fetch_add(1, Ordering::Relaxed);
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
    mut queue: mpsc::Receiver<Message>,
    (counters, up): (Arc<BusCounters>, Arc<Notify>),
) {
    let mut backoff = Duration::from_millis(50);
    let mut failing = false;
    loop {
        match connect(address, &config).await {
            Ok(mut stream) => {
                counters.connects.fetch_add(1, Ordering::Relaxed);
                if failing {
                    tracing::info!(%address, peer = index, "replica bus: connected");
                }
                failing = false;
                backoff = Duration::from_millis(50);
                while let Some(message) = queue.recv().await {
                    if stream.write_all(&message.encode()).await.is_err() {
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
                while queue.try_recv().is_ok() {}
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

async fn connect(address: SocketAddr, config: &BusConfig) -> Result<TcpStream, String> {
    let mut stream = TcpStream::connect(address)
        .await
        .map_err(|e| e.to_string())?;
    let _ = stream.set_nodelay(true);
    stream
        .write_all(&handshake_bytes(config))
        .await
        .map_err(|e| e.to_string())?;
    let mut answer = [0u8; HANDSHAKE_BYTES];
    tokio::time::timeout(Duration::from_secs(5), stream.read_exact(&mut answer))
        .await
        .map_err(|_| "no handshake answer within 5 s".to_string())?
        .map_err(|e| format!("the peer closed the handshake: {e}"))?;
    check_handshake(config, &answer)?;
    Ok(stream)
}
