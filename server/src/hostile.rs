//! `iggy-server hostile`: what a careless or hostile client does to a running cluster (issue
//! #46), each case checked against the answer `docs/server.md` documents for it, and every node
//! checked alive after each case. `scripts/hostile-clients.sh` runs it beside a loaded cluster
//! and then verifies the load's ledger, the nodes' memory and `iggy-fsck`.
//!
//! Cases (the `--short` sizes in brackets):
//!
//! - `oversized-topic`: 1,000 partitions of 16 GiB segments: refused 3000 (no room).
//! - `huge-segment`, `tiny-segment`: `segment_size` 2^50 and 1: refused 4002.
//! - `many-partitions`: a topic of 100,000 partitions, and 100,000 more in a topic: 2015.
//! - `idle-connections`: 2,000 [500] connections on a client port and as many on a replica
//!   port that send nothing; a new client still logs in meanwhile, and the node closes every
//!   one of them by itself (10 s before login; 5 s for a bus handshake, and past 64 waiting
//!   handshakes at once).
//! - `slowloris`: 50 connections on each port that send a request or a handshake a byte at a
//!   time: each closed by the node within its deadline (a header or body before login: 10 s;
//!   a handshake frame: 5 s; a logged-in body: 30 s).
//! - `big-bodies`: 50 [10] logged-in clients at once each send a body just under
//!   `max_request_bytes` (answered, in order, within the node's byte budget), and 50 clients
//!   announce one before login (evicted from the header, nothing read: a send `NoSession`, a
//!   ping `InvalidRequestBodySize`).
//! - `wrong-passwords`: 10,000 [1,000] logins with a wrong password from 100 connections at
//!   once: each evicted `InvalidCredentials` or closed unchecked (a flood past the node's
//!   queue of password checks); the right password still logs in.
//! - `bus-stranger`: replica-bus connections that send garbage, or a hello and a confirmation
//!   without the key: closed.
//! - `bus-replay` (with `--replay`): a handshake recorded between two nodes (by `iggy-server
//!   proxy --capture`) sent again: closed.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use iggy_client::{Client, ClientError};
use iggy_protocol::{
    EvictionReason, HEADER_SIZE, Identifier, Operation, OptionEntry, Request, RequestHeader,
};

/// What `hostile` is pointed at.
#[derive(Clone, Debug)]
pub struct Target {
    pub nodes: Vec<SocketAddr>,
    /// The nodes' replica-bus addresses.
    pub buses: Vec<SocketAddr>,
    pub username: String,
    pub password: String,
    /// The cluster id (a stranger's hello carries it, to reach the key's check).
    pub cluster: u128,
    /// A recorded handshake: the dialler's 160 bytes (hello, confirmation), for `bus-replay`,
    /// and the bus address it was sent to.
    pub replay: Option<(PathBuf, SocketAddr)>,
    /// The smaller sizes (CI).
    pub short: bool,
}

/// Every case, in the order they run.
pub const CASES: &[&str] = &[
    "oversized-topic",
    "huge-segment",
    "tiny-segment",
    "many-partitions",
    "idle-connections",
    "slowloris",
    "big-bodies",
    "wrong-passwords",
    "bus-stranger",
    "bus-replay",
];

/// One case's outcome.
#[derive(Debug)]
pub struct Outcome {
    pub case: String,
    pub passed: bool,
    /// What was seen, against what was expected.
    pub detail: String,
    pub seconds: f64,
}

const STREAM: &str = "hostile";

static NEXT_CLIENT: AtomicU64 = AtomicU64::new(1);

/// A client id no other connection of this process uses (high bits from the clock, so that
/// two runs differ).
fn client_id() -> u128 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    (now << 32) | u128::from(NEXT_CLIENT.fetch_add(1, Ordering::Relaxed))
}

fn logged_in(target: &Target, node: SocketAddr) -> Result<Client, ClientError> {
    let mut client = Client::connect(node, client_id())?;
    client.patience = Duration::from_secs(20);
    client.login(&target.username, &target.password)?;
    Ok(client)
}

/// Runs `cases` (every one when empty) and returns their outcomes; after each, every node must
/// still take a login and a ping.
pub fn run(target: &Target, cases: &[String]) -> Result<Vec<Outcome>, String> {
    // Many connections need many descriptors.
    crate::accept::raise_descriptor_limit();
    for case in cases {
        if !CASES.contains(&case.as_str()) {
            return Err(format!(
                "no case {case:?}; the cases are {}",
                CASES.join(", ")
            ));
        }
    }
    let chosen: Vec<&str> = if cases.is_empty() {
        CASES.to_vec()
    } else {
        cases.iter().map(String::as_str).collect()
    };
    let mut setup = logged_in(target, target.nodes[0]).map_err(|e| format!("setup: {e}"))?;
    match setup.create_stream(STREAM) {
        Ok(()) => {}
        Err(ClientError::Status { status, .. })
            if status == iggy_protocol::status::STREAM_NAME_ALREADY_EXISTS => {}
        Err(e) => return Err(format!("setup: creating stream {STREAM}: {e}")),
    }
    let mut outcomes = Vec::new();
    for case in chosen {
        let started = Instant::now();
        let (passed, detail) = match case {
            "oversized-topic" => refused_topic(target, "oversized", 1_000, 16 << 30, 3000),
            "huge-segment" => refused_topic(target, "huge", 1, 1 << 50, 4002),
            "tiny-segment" => refused_topic(target, "tiny", 1, 1, 4002),
            "many-partitions" => many_partitions(target),
            "idle-connections" => idle_connections(target),
            "slowloris" => slowloris(target),
            "big-bodies" => big_bodies(target),
            "wrong-passwords" => wrong_passwords(target),
            "bus-stranger" => bus_stranger(target),
            "bus-replay" => bus_replay(target),
            _ => unreachable!("checked above"),
        };
        let alive = alive(target);
        let (passed, detail) = match alive {
            Ok(()) => (passed, detail),
            Err(e) => (false, format!("{detail}; and then {e}")),
        };
        outcomes.push(Outcome {
            case: case.to_string(),
            passed,
            detail,
            seconds: started.elapsed().as_secs_f64(),
        });
    }
    Ok(outcomes)
}

/// Every node takes a login and answers a ping.
fn alive(target: &Target) -> Result<(), String> {
    for &node in &target.nodes {
        let mut client = logged_in(target, node).map_err(|e| format!("node {node}: {e}"))?;
        client
            .call(&Request::Ping)
            .map_err(|e| format!("node {node}: ping: {e}"))?;
    }
    Ok(())
}

fn status_of<T>(result: &Result<T, ClientError>) -> String {
    match result {
        Ok(_) => "OK".into(),
        Err(ClientError::Status { status, .. }) => format!("status {status}"),
        Err(ClientError::Evicted { reason, .. }) => format!("evicted {reason:?}"),
        Err(e) => e.to_string(),
    }
}

fn create_topic(
    client: &mut Client,
    name: &str,
    partitions: u32,
    segment_size: u64,
) -> Result<Vec<u8>, ClientError> {
    client.call(&Request::CreateTopic {
        stream: Identifier::Name(STREAM.into()),
        partitions,
        name: name.into(),
        options: vec![
            OptionEntry::string("durability", "replicated"),
            OptionEntry::uint64("segment_size", segment_size),
        ],
    })
}

fn refused_topic(
    target: &Target,
    name: &str,
    partitions: u32,
    segment_size: u64,
    expected: u32,
) -> (bool, String) {
    let result = logged_in(target, target.nodes[0])
        .and_then(|mut client| create_topic(&mut client, name, partitions, segment_size));
    let seen = status_of(&result);
    (
        matches!(result, Err(ClientError::Status { status, .. }) if status == expected),
        format!(
            "{partitions} partitions of segment_size {segment_size}: {seen} (expected status {expected})"
        ),
    )
}

fn many_partitions(target: &Target) -> (bool, String) {
    let expected = iggy_protocol::status::TOO_MANY_PARTITIONS;
    let client = logged_in(target, target.nodes[1 % target.nodes.len()]);
    let Ok(mut client) = client else {
        return (false, format!("login: {}", status_of(&client)));
    };
    let topic = create_topic(&mut client, "many", 100_000, 1 << 20);
    // A topic of one partition, then 100,000 more in it.
    let small = create_topic(&mut client, "few", 1, 1 << 20);
    let more = client.call(&Request::CreatePartitions {
        stream: Identifier::Name(STREAM.into()),
        topic: Identifier::Name("few".into()),
        count: 100_000,
    });
    let refused = |result: &Result<Vec<u8>, ClientError>| matches!(result, Err(ClientError::Status { status, .. }) if *status == expected);
    let small_ok = small.is_ok()
        || matches!(&small, Err(ClientError::Status { status, .. }) if *status == iggy_protocol::status::TOPIC_NAME_ALREADY_EXISTS);
    (
        refused(&topic) && small_ok && refused(&more),
        format!(
            "a topic of 100,000: {}; 100,000 added to a topic: {} (expected status {expected} both)",
            status_of(&topic),
            status_of(&more)
        ),
    )
}

/// Waits (up to `limit`) for the far end to close each of `streams`; returns how many it
/// closed and the time the last of them took.
fn closed_by_peer(streams: Vec<TcpStream>, limit: Duration) -> (usize, Duration) {
    let started = Instant::now();
    let mut open = streams;
    let mut closed = 0;
    let mut last = Duration::ZERO;
    while !open.is_empty() && started.elapsed() < limit {
        let mut still = Vec::new();
        for mut stream in open {
            let _ = stream.set_nonblocking(true);
            let mut byte = [0u8; 1];
            match stream.read(&mut byte) {
                Ok(0) => {
                    closed += 1;
                    last = started.elapsed();
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => still.push(stream),
                // Bytes (an eviction) or a reset: the node answered and will close; a reset
                // is a close.
                Ok(_) => still.push(stream),
                Err(_) => {
                    closed += 1;
                    last = started.elapsed();
                }
            }
        }
        open = still;
        std::thread::sleep(Duration::from_millis(50));
    }
    (closed, last)
}

fn idle_connections(target: &Target) -> (bool, String) {
    let count = if target.short { 500 } else { 2_000 };
    let node = target.nodes[0];
    let bus = target.buses.first().copied();
    let mut clients = Vec::new();
    let mut buses = Vec::new();
    for _ in 0..count {
        match TcpStream::connect(node) {
            Ok(stream) => clients.push(stream),
            Err(e) => {
                return (
                    false,
                    format!("connecting idle client {}: {e}", clients.len()),
                );
            }
        }
        if let Some(bus) = bus {
            // The bus may close a connection past its 64 pending handshakes at once; a
            // refused connect is the same answer.
            if let Ok(stream) = TcpStream::connect(bus) {
                buses.push(stream);
            }
        }
    }
    // With them all open, a real client still gets in.
    let login = logged_in(target, node).and_then(|mut client| client.call(&Request::Ping));
    let client_count = clients.len();
    let bus_count = buses.len();
    let bus_wait = std::thread::spawn(move || closed_by_peer(buses, Duration::from_secs(15)));
    let (clients_closed, clients_last) = closed_by_peer(clients, Duration::from_secs(15));
    let (bus_closed, bus_last) = bus_wait.join().unwrap_or((0, Duration::ZERO));
    (
        login.is_ok() && clients_closed == client_count && bus_closed == bus_count,
        format!(
            "{client_count} idle client connections: a login meanwhile {}, {clients_closed} closed by the node (the last after {:.1} s); {bus_count} idle bus connections: {bus_closed} closed (the last after {:.1} s)",
            status_of(&login),
            clients_last.as_secs_f64(),
            bus_last.as_secs_f64()
        ),
    )
}

fn raw_header(code: u32, body_len: usize, session: u64, client: u128) -> [u8; HEADER_SIZE] {
    let operation = Operation::for_code(code);
    RequestHeader {
        size: u32::try_from(HEADER_SIZE + body_len).unwrap_or(u32::MAX),
        client,
        request_checksum: 0,
        timestamp: 0,
        // A login is request 0; anything else the first of its session.
        request: u64::from(operation != Operation::Register),
        operation,
        session,
        user_id: 0,
        code,
    }
    .encode()
}

/// Sends `prefix`, then a byte every 500 ms until the far end closes (or `limit`); the time
/// that took, or `None` if it never closed.
fn trickle(mut stream: TcpStream, prefix: &[u8], limit: Duration) -> Option<Duration> {
    let started = Instant::now();
    if stream.write_all(prefix).is_err() {
        return Some(started.elapsed());
    }
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    while started.elapsed() < limit {
        let mut buffer = [0u8; 512];
        match stream.read(&mut buffer) {
            Ok(0) => return Some(started.elapsed()),
            Ok(_) => {} // an eviction on its way to a close
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return Some(started.elapsed()),
        }
        if stream.write_all(&[0]).is_err() {
            return Some(started.elapsed());
        }
    }
    None
}

fn slowloris(target: &Target) -> (bool, String) {
    let node = target.nodes[0];
    let mut runs: Vec<(&str, Duration, std::thread::JoinHandle<Option<Duration>>)> = Vec::new();
    let connections = 50;
    for i in 0..connections {
        let Ok(stream) = TcpStream::connect(node) else {
            return (false, "cannot connect".into());
        };
        // Half send part of a header, half a whole login header and part of its body.
        let prefix: Vec<u8> = if i % 2 == 0 {
            raw_header(iggy_protocol::code::LOGIN_REGISTER, 1_000, 0, client_id())[..100].to_vec()
        } else {
            let mut bytes =
                raw_header(iggy_protocol::code::LOGIN_REGISTER, 1_000, 0, client_id()).to_vec();
            bytes.extend_from_slice(&[0; 10]);
            bytes
        };
        let limit = Duration::from_secs(14);
        runs.push((
            "client port before login (10 s)",
            limit,
            std::thread::spawn(move || trickle(stream, &prefix, limit)),
        ));
    }
    if let Some(&bus) = target.buses.first() {
        for _ in 0..connections {
            let Ok(stream) = TcpStream::connect(bus) else {
                return (false, "cannot connect to the bus".into());
            };
            let limit = Duration::from_secs(9);
            runs.push((
                "bus handshake (5 s)",
                limit,
                std::thread::spawn(move || trickle(stream, b"IGGY", limit)),
            ));
        }
    }
    // Logged in: a send whose body stops arriving.
    for _ in 0..if target.short { 2 } else { 10 } {
        let Ok(client) = logged_in(target, node) else {
            return (false, "a login failed".into());
        };
        let Some((stream, session, id)) = client.into_parts() else {
            return (true, "skipped: the cluster speaks TLS".into());
        };
        let prefix = raw_header(iggy_protocol::code::SEND_MESSAGES, 1 << 20, session, id).to_vec();
        let limit = Duration::from_secs(34);
        runs.push((
            "client port logged in (30 s)",
            limit,
            std::thread::spawn(move || trickle(stream, &prefix, limit)),
        ));
    }
    let mut by_kind: std::collections::BTreeMap<&str, (usize, usize, Duration)> =
        std::collections::BTreeMap::new();
    for (kind, _, run) in runs {
        let entry = by_kind.entry(kind).or_default();
        entry.0 += 1;
        if let Ok(Some(took)) = run.join() {
            entry.1 += 1;
            entry.2 = entry.2.max(took);
        }
    }
    let passed = by_kind.values().all(|(all, closed, _)| all == closed);
    let detail = by_kind
        .iter()
        .map(|(kind, (all, closed, slowest))| {
            format!(
                "{kind}: {closed} of {all} closed, the last after {:.1} s",
                slowest.as_secs_f64()
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    (passed, detail)
}

fn big_bodies(target: &Target) -> (bool, String) {
    let clients = if target.short { 10 } else { 50 };
    // The default max_request_bytes (15 MiB): a batch of 14 messages whose request is just
    // under it.
    let max_request = 15usize << 20;
    let message = (max_request - HEADER_SIZE - 64 * 1024) / 14;
    if let Ok(mut client) = logged_in(target, target.nodes[0]) {
        let _ = create_topic(&mut client, "big", 1, 64 << 20);
    }
    let mut runs = Vec::new();
    for i in 0..clients {
        let target = target.clone();
        let node = target.nodes[i % target.nodes.len()];
        runs.push(std::thread::spawn(move || {
            let mut client = logged_in(&target, node)?;
            // The burst is 50 x 15 MiB into one partition, written by three nodes that share
            // this machine's disk beside the load: its tail commits 18 to 30 s after it starts
            // (session 62; one run of three left 6 sends past the usual 20 s of patience,
            // answered TransientNotCommitted). A client of such a queue waits for it.
            client.patience = Duration::from_secs(120);
            let messages: Vec<(u128, Vec<u8>)> = (0..14)
                .map(|m| {
                    (
                        client_id() + m,
                        vec![u8::try_from(i % 251).unwrap_or(0); message],
                    )
                })
                .collect();
            client.send(STREAM, "big", 0, &messages)
        }));
    }
    // Acknowledged, or the connection closed by the node (a documented answer: a node that
    // hears no peer for a second while a request waits closes its client's connection so the
    // client moves on, docs/server.md "Failure detection"). A status is not.
    let mut answered = 0;
    let mut closed = 0;
    let mut failures = Vec::new();
    for run in runs {
        match run.join() {
            Ok(Ok(_)) => answered += 1,
            Ok(Err(ClientError::Io { .. })) => closed += 1,
            Ok(Err(e)) => failures.push(status_of::<u64>(&Err(e))),
            Err(_) => failures.push("a client thread panicked".into()),
        }
    }
    // Before login, the same size is refused from its header: a send for want of a session,
    // a ping (served before login) for its size.
    let mut evicted = 0;
    let before = 50;
    for i in 0..before {
        let Ok(mut stream) = TcpStream::connect(target.nodes[0]) else {
            continue;
        };
        let (code, reason) = if i % 2 == 0 {
            (
                iggy_protocol::code::SEND_MESSAGES,
                EvictionReason::NoSession,
            )
        } else {
            (
                iggy_protocol::code::PING,
                EvictionReason::InvalidRequestBodySize,
            )
        };
        let header = raw_header(code, max_request - HEADER_SIZE - 1, 0, client_id());
        let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
        let mut reply = [0u8; HEADER_SIZE];
        if stream.write_all(&header).is_ok()
            && stream.read_exact(&mut reply).is_ok()
            && iggy_protocol::Eviction::decode(&reply).is_ok_and(|e| e.reason == reason)
        {
            evicted += 1;
        }
    }
    failures.sort();
    failures.dedup();
    (
        answered > 0 && answered + closed == clients && evicted == before,
        format!(
            "{clients} logged-in sends of {:.1} MiB at once: {answered} acknowledged, {closed} closed by the node{}; {evicted} of {before} such bodies before login evicted from their header (a send NoSession, a ping InvalidRequestBodySize)",
            (14 * message) as f64 / f64::from(1u32 << 20),
            if failures.is_empty() {
                String::new()
            } else {
                format!(" (failures: {})", failures.join(", "))
            }
        ),
    )
}

fn wrong_passwords(target: &Target) -> (bool, String) {
    let tries = if target.short { 1_000 } else { 10_000 };
    let threads = 100;
    let left = Arc::new(AtomicU64::new(tries));
    let refused = Arc::new(AtomicU64::new(0));
    let shed = Arc::new(AtomicU64::new(0));
    let other = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let started = Instant::now();
    let mut runs = Vec::new();
    for t in 0..threads {
        let (left, refused, shed, other) =
            (left.clone(), refused.clone(), shed.clone(), other.clone());
        let node = target.nodes[t % target.nodes.len()];
        let username = target.username.clone();
        runs.push(std::thread::spawn(move || {
            while left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok()
            {
                let result = Client::connect(node, client_id())
                    .and_then(|mut client| client.login(&username, "not the password"));
                match result {
                    Err(ClientError::Evicted {
                        reason: EvictionReason::InvalidCredentials,
                        ..
                    }) => {
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(ClientError::Io { .. }) => {
                        shed.fetch_add(1, Ordering::Relaxed);
                    }
                    other_result => other
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(status_of(&other_result)),
                }
            }
        }));
    }
    for run in runs {
        let _ = run.join();
    }
    let flood = started.elapsed();
    // The right password, on every node, right after.
    let login_started = Instant::now();
    let logins = target
        .nodes
        .iter()
        .map(|&node| logged_in(target, node).map(|_| ()))
        .collect::<Result<Vec<()>, _>>();
    let login_took = login_started.elapsed();
    let mut other = other
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    other.sort();
    other.dedup();
    (
        other.is_empty() && logins.is_ok(),
        format!(
            "{tries} wrong passwords in {:.1} s: {} evicted InvalidCredentials, {} closed unchecked{}; the right one on every node: {} in {:.2} s",
            flood.as_secs_f64(),
            refused.load(Ordering::Relaxed),
            shed.load(Ordering::Relaxed),
            if other.is_empty() {
                String::new()
            } else {
                format!(", other answers: {}", other.join(", "))
            },
            status_of(&logins),
            login_took.as_secs_f64()
        ),
    )
}

/// Whether the far end of `stream` closes it within `limit` after `bytes` are sent; the bytes
/// the node answered with before it did.
fn send_and_wait_close(stream: &mut TcpStream, bytes: &[u8], limit: Duration) -> (bool, usize) {
    if stream.write_all(bytes).is_err() {
        return (true, 0);
    }
    let _ = stream.set_read_timeout(Some(limit));
    let mut answered = 0;
    let mut buffer = [0u8; 256];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => return (true, answered),
            Ok(n) => answered += n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return (false, answered);
            }
            Err(_) => return (true, answered),
        }
    }
}

fn stranger_hello(cluster: u128, replica: u8, nonce: [u8; 16]) -> [u8; 80] {
    let mut bytes = [0u8; 80];
    bytes[..8].copy_from_slice(b"IGGYBUS2");
    bytes[8..24].copy_from_slice(&cluster.to_le_bytes());
    bytes[24] = replica;
    bytes[32..48].copy_from_slice(&nonce);
    bytes
}

fn bus_stranger(target: &Target) -> (bool, String) {
    let mut cases = 0;
    let mut closed = 0;
    for &bus in &target.buses {
        // Garbage where a hello belongs.
        if let Ok(mut stream) = TcpStream::connect(bus) {
            cases += 1;
            let (was_closed, answered) =
                send_and_wait_close(&mut stream, &[0x5a; 80], Duration::from_secs(8));
            closed += usize::from(was_closed && answered == 0);
        }
        // A well-formed hello (the node answers any), then a confirmation without the key.
        if let Ok(mut stream) = TcpStream::connect(bus) {
            cases += 1;
            let replica = 1u8;
            let mut hello = stranger_hello(target.cluster, replica, [7; 16]);
            let _ = stream.write_all(&hello);
            let mut answer = [0u8; 80];
            let _ = stream.set_read_timeout(Some(Duration::from_secs(8)));
            if stream.read_exact(&mut answer).is_ok() {
                hello[32..48].fill(0);
                hello[48..80].fill(0x33);
                let (was_closed, _) =
                    send_and_wait_close(&mut stream, &hello, Duration::from_secs(8));
                closed += usize::from(was_closed);
            } else {
                // Refused at the hello (another cluster id, or index 1 is this node): closed
                // without an answer is the same answer.
                closed += 1;
            }
        }
    }
    (
        cases > 0 && closed == cases,
        format!("{cases} stranger connections on the bus: {closed} closed without admission"),
    )
}

fn bus_replay(target: &Target) -> (bool, String) {
    let Some((file, bus)) = &target.replay else {
        return (true, "skipped: no --replay capture given".into());
    };
    // A capture the proxy wrote: not a node's durable file.
    #[allow(clippy::disallowed_methods)]
    let captured = match std::fs::read(file) {
        Ok(bytes) => bytes,
        Err(e) => return (false, format!("{}: {e}", file.display())),
    };
    if captured.len() < 160 {
        return (
            false,
            format!(
                "{}: {} bytes, a hello and a confirmation need 160",
                file.display(),
                captured.len()
            ),
        );
    }
    let Ok(mut stream) = TcpStream::connect(bus) else {
        return (false, format!("cannot connect to {bus}"));
    };
    let _ = stream.write_all(&captured[..80]);
    let mut answer = [0u8; 80];
    let _ = stream.set_read_timeout(Some(Duration::from_secs(8)));
    let answered = stream.read_exact(&mut answer).is_ok();
    let (closed, more) =
        send_and_wait_close(&mut stream, &captured[80..160], Duration::from_secs(8));
    (
        answered && closed && more == 0,
        format!(
            "a recorded hello {} with a fresh nonce; the recorded confirmation: {}",
            if answered {
                "was answered"
            } else {
                "was not answered"
            },
            if closed && more == 0 {
                "closed, nothing admitted"
            } else {
                "NOT closed"
            }
        ),
    )
}
