//! The replica bus at its edges, over real loopback sockets: a peer without the key (or of
//! another cluster, or claiming this node's own index) is refused and counted; a frame that does
//! not decode, or that names a sender other than the handshake's, closes that connection and is
//! counted while the node goes on; a good frame after a reconnect is delivered.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::channel;
use std::time::Duration;

use iggy_server::bus::{self, BusConfig, BusCounters};
use iggy_vsr::{From, Message};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn config(replica: u8, peers: &[SocketAddr], key: &[u8]) -> BusConfig {
    BusConfig {
        cluster: 7,
        replica,
        peers: peers.to_vec(),
        key: key.to_vec(),
        tls: None,
    }
}

/// The handshake proves the key both ways over fresh nonces (issue #46): a full exchange
/// passes; the wrong key fails on both sides; a proof recorded in one handshake fails in the
/// next (the listener's nonce is new); an answer cannot stand in for a confirmation (the roles
/// are in the proof), nor a confirmation made for another index; another cluster, the node's own
/// index and an index past the roster are refused at the hello.
#[test]
fn a_handshake_is_checked_for_cluster_index_and_key() {
    let peers: Vec<SocketAddr> = (0..3)
        .map(|i| format!("127.0.0.1:{}", 9000 + i).parse().expect("address"))
        .collect();
    let node0 = config(0, &peers, b"key");
    let node1 = config(1, &peers, b"key");
    // Node 1 dials node 0.
    let (dialer_nonce, listener_nonce) = (
        bus::nonce().expect("a nonce"),
        bus::nonce().expect("a nonce"),
    );
    assert_ne!(dialer_nonce, listener_nonce);
    let hello = bus::hello(&node1, &dialer_nonce);
    assert_eq!(bus::check_hello(&node0, &hello), Ok((1, dialer_nonce)));
    let answer = bus::answer(&node0, 1, &dialer_nonce, &listener_nonce);
    assert_eq!(
        bus::check_answer(&node1, 0, &dialer_nonce, &answer),
        Ok(listener_nonce)
    );
    let confirm = bus::confirm(&node1, 0, &dialer_nonce, &listener_nonce);
    assert_eq!(
        bus::check_confirm(&node0, 1, (&dialer_nonce, &listener_nonce), &confirm),
        Ok(())
    );
    // Another key: the dialler refuses the answer, the listener the confirmation.
    let guess = config(1, &peers, b"kez");
    assert!(
        bus::check_answer(&guess, 0, &dialer_nonce, &answer)
            .unwrap_err()
            .contains("key")
    );
    let forged = bus::confirm(&guess, 0, &dialer_nonce, &listener_nonce);
    assert!(
        bus::check_confirm(&node0, 1, (&dialer_nonce, &listener_nonce), &forged)
            .unwrap_err()
            .contains("key")
    );
    // A recorded confirmation, replayed into a handshake with a fresh listener nonce.
    let fresh = bus::nonce().expect("a nonce");
    assert!(bus::check_confirm(&node0, 1, (&dialer_nonce, &fresh), &confirm).is_err());
    // The listener's answer reflected back as the dialler's confirmation.
    assert!(bus::check_confirm(&node0, 1, (&dialer_nonce, &listener_nonce), &answer).is_err());
    // Node 2 replaying node 1's confirmation under its own index.
    let mut as_two = confirm;
    as_two[24] = 2;
    assert!(bus::check_confirm(&node0, 2, (&dialer_nonce, &listener_nonce), &as_two).is_err());
    // Refused at the hello: itself, another cluster, past the roster, a hello with a proof.
    let itself = bus::check_hello(&node0, &bus::hello(&node0, &dialer_nonce));
    assert!(itself.unwrap_err().contains("not a peer"));
    let mut other_cluster = config(1, &peers, b"key");
    other_cluster.cluster = 8;
    assert!(
        bus::check_hello(&node0, &bus::hello(&other_cluster, &dialer_nonce))
            .unwrap_err()
            .contains("cluster")
    );
    let mut beyond = hello;
    beyond[24] = 3;
    assert!(bus::check_hello(&node0, &beyond).is_err());
    assert!(bus::check_hello(&node0, &confirm).is_err());
}

/// The dialler's side of the handshake, as `config`'s node, to listener `listener`; with `check`
/// off it confirms whatever the answer proved (a stranger trying its key).
async fn dial(
    stream: &mut TcpStream,
    config: &BusConfig,
    listener: u8,
    check: bool,
) -> Result<(), String> {
    let mine = bus::nonce().expect("a nonce");
    stream
        .write_all(&bus::hello(config, &mine))
        .await
        .map_err(|e| e.to_string())?;
    let mut answer = [0u8; bus::HANDSHAKE_BYTES];
    stream
        .read_exact(&mut answer)
        .await
        .map_err(|e| e.to_string())?;
    let theirs = match bus::check_answer(config, listener, &mine, &answer) {
        Ok(theirs) => theirs,
        Err(e) if check => return Err(e),
        Err(_) => answer[32..48].try_into().expect("16 bytes"),
    };
    stream
        .write_all(&bus::confirm(config, listener, &mine, &theirs))
        .await
        .map_err(|e| e.to_string())
}

/// Reads until the peer closes (a refusal), failing the test after 10 s.
async fn closed(stream: &mut TcpStream) -> bool {
    let mut buf = [0u8; 512];
    loop {
        match tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => {}
            Err(_) => return false,
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio")
}

/// A roster whose node 0 gets a free loopback port and whose peers 1 and 2 are never up (their
/// dialers back off quietly).
fn lone_node_peers() -> Vec<SocketAddr> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let own = listener.local_addr().expect("address");
    drop(listener);
    vec![
        own,
        "127.0.0.1:9".parse().expect("a"),
        "127.0.0.1:9".parse().expect("a"),
    ]
}

#[test]
fn bad_peers_and_bad_frames_close_their_connection_and_the_node_goes_on() {
    runtime().block_on(async {
        let peers = lone_node_peers();
        let counters = Arc::new(BusCounters::default());
        let (delivered, heard) = channel();
        let (_bus, bound) = bus::start(
            config(0, &peers, b"key"),
            move |_peer, message| {
                let _ = delivered.send(message);
            },
            counters.clone(),
        )
        .await
        .expect("the bus starts");

        // Without the key: refused, closed, counted.
        let mut stranger = TcpStream::connect(bound).await.expect("connect");
        let _ = dial(&mut stranger, &config(1, &peers, b"guess"), 0, false).await;
        assert!(
            closed(&mut stranger).await,
            "a peer without the key was kept"
        );
        assert_eq!(counters.refused_handshakes.load(Ordering::Relaxed), 1);

        // With the key, then a frame whose size field is impossible: closed, counted.
        let peer1 = config(1, &peers, b"key");
        let mut peer = TcpStream::connect(bound).await.expect("connect");
        dial(&mut peer, &peer1, 0, true)
            .await
            .expect("the node proves the key");
        let mut garbage = [0xa5u8; 256];
        garbage[92..96].copy_from_slice(&u32::MAX.to_le_bytes());
        peer.write_all(&garbage).await.expect("write");
        assert!(
            closed(&mut peer).await,
            "a frame of impossible size kept the connection"
        );
        assert_eq!(counters.bad_frames.load(Ordering::Relaxed), 1);

        // A well-formed frame that claims to come from replica 2 over replica 1's connection.
        let commit = |replica| Message::Commit {
            from: From {
                cluster: 7,
                group: 0,
                replica,
                view: 0,
            },
            commit: 0,
            checksum: 0,
        };
        let mut peer = TcpStream::connect(bound).await.expect("connect");
        dial(&mut peer, &peer1, 0, true).await.expect("handshake");
        peer.write_all(&commit(2).encode()).await.expect("write");
        assert!(
            closed(&mut peer).await,
            "a frame of another sender kept the connection"
        );
        assert_eq!(counters.bad_frames.load(Ordering::Relaxed), 2);

        // The node went on: a good frame is delivered.
        let mut peer = TcpStream::connect(bound).await.expect("connect");
        dial(&mut peer, &peer1, 0, true).await.expect("handshake");
        peer.write_all(&commit(1).encode()).await.expect("write");
        let message =
            tokio::task::spawn_blocking(move || heard.recv_timeout(Duration::from_secs(10)))
                .await
                .expect("join")
                .expect("the good frame was delivered");
        assert_eq!(message, commit(1));
        assert_eq!(counters.frames_in.load(Ordering::Relaxed), 1);
    });
}

/// A peer's connection that ends from its side is reported (`bus::start_with_close`), once per
/// connection; one this node closes over a bad frame, or a stranger's refused handshake, is not.
#[test]
fn a_peers_closed_connection_is_reported_and_a_refused_one_is_not() {
    runtime().block_on(async {
        let peers = lone_node_peers();
        let (reported, closes) = channel();
        let (_bus, bound) = bus::start_with_close(
            config(0, &peers, b"key"),
            |_peer, _message| {},
            move |peer| {
                let _ = reported.send(peer);
            },
            Arc::new(BusCounters::default()),
        )
        .await
        .expect("the bus starts");

        // A stranger: refused, not reported.
        let mut stranger = TcpStream::connect(bound).await.expect("connect");
        let _ = dial(&mut stranger, &config(1, &peers, b"guess"), 0, false).await;
        assert!(closed(&mut stranger).await);
        // Peer 1 sends a bad frame: this node closes it, not reported.
        let mut peer = TcpStream::connect(bound).await.expect("connect");
        dial(&mut peer, &config(1, &peers, b"key"), 0, true)
            .await
            .expect("handshake");
        let mut garbage = [0xa5u8; 256];
        garbage[92..96].copy_from_slice(&u32::MAX.to_le_bytes());
        peer.write_all(&garbage).await.expect("write");
        assert!(closed(&mut peer).await);
        // Peer 2 connects and goes away: reported as 2.
        let mut peer = TcpStream::connect(bound).await.expect("connect");
        dial(&mut peer, &config(2, &peers, b"key"), 0, true)
            .await
            .expect("handshake");
        drop(peer);
        // Both refusals ended (their connections closed) before peer 2 connected: had either
        // been reported, as 1, it would come first.
        let heard = tokio::task::spawn_blocking(move || {
            let first = closes.recv_timeout(Duration::from_secs(10));
            (first, closes.try_recv())
        })
        .await
        .expect("join");
        assert_eq!(
            heard.0,
            Ok(2),
            "peer 2's close reported, and nothing before it"
        );
        assert!(heard.1.is_err(), "reported once: {:?}", heard.1);
    });
}

fn ping(replica: u8, hears: u64) -> Vec<u8> {
    Message::Ping {
        from: From {
            cluster: 7,
            group: 0,
            replica,
            view: 0,
        },
        hears,
    }
    .encode()
}

/// Failure detection on the bus: a peer heard and then silent for a second is reported (as a
/// closed connection is), and so is one whose pings say, for half a second, that it hears fewer
/// nodes than a quorum (a deaf node: its messages arrive, nothing reaches it); a node that heard
/// no quorum of peers lately sends no view-change message.
#[test]
fn a_silent_peer_and_a_deaf_one_are_reported_and_a_node_hearing_no_quorum_holds_back() {
    runtime().block_on(async {
        let peers = lone_node_peers();
        let (reported, reports) = channel();
        let counters = Arc::new(BusCounters::default());
        let (bus, bound) = bus::start_with_close(
            config(0, &peers, b"key"),
            |_peer, _message| {},
            move |peer| {
                let _ = reported.send(peer);
            },
            counters.clone(),
        )
        .await
        .expect("the bus starts");
        // Nobody heard yet: a StartViewChange is held back, not queued.
        let svc = Message::StartViewChange {
            from: From {
                cluster: 7,
                group: 0,
                replica: 0,
                view: 1,
            },
        };
        assert!(!bus.hears_a_quorum());
        bus.send(1, svc.clone());
        assert_eq!(counters.campaigns_held_back.load(Ordering::Relaxed), 1);

        // Peer 1 says once that it hears nodes 0 and 1 (a quorum), then says nothing.
        let mut one = TcpStream::connect(bound).await.expect("connect");
        dial(&mut one, &config(1, &peers, b"key"), 0, true)
            .await
            .expect("handshake");
        one.write_all(&ping(1, 0b011)).await.expect("write");
        // Peer 2 hears a quorum at first, then only itself, a ping every 100 ms.
        let mut two = TcpStream::connect(bound).await.expect("connect");
        dial(&mut two, &config(2, &peers, b"key"), 0, true)
            .await
            .expect("handshake");
        two.write_all(&ping(2, 0b101)).await.expect("write");
        let deaf = tokio::spawn(async move {
            for _ in 0..40 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                if two.write_all(&ping(2, 0b100)).await.is_err() {
                    break;
                }
            }
            two
        });
        let got = tokio::task::spawn_blocking(move || {
            let mut got = Vec::new();
            while got.len() < 2 {
                match reports.recv_timeout(Duration::from_secs(10)) {
                    Ok(peer) => got.push(peer),
                    Err(_) => break,
                }
            }
            got.sort_unstable();
            got
        })
        .await
        .expect("join");
        assert_eq!(got, vec![1, 2], "both peers reported");
        assert_eq!(counters.silent_peers.load(Ordering::Relaxed), 1);
        assert_eq!(counters.deaf_peers.load(Ordering::Relaxed), 1);
        // Peer 2 is heard (its pings keep coming): a quorum, so a view change goes out.
        assert!(bus.hears_a_quorum());
        bus.send(2, svc);
        assert_eq!(counters.campaigns_held_back.load(Ordering::Relaxed), 1);
        drop(one);
        let _ = deaf.await;
    });
}
