//! A lockstep client on the SDK's wire for the server's tests (what `client/` will become).

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use iggy_protocol::response::{LoginReply, split_result};
use iggy_protocol::{
    ClientVersion, Eviction, HEADER_SIZE, Operation, Reader, ReplyHeader, Request, RequestHeader,
    status,
};

/// A lockstep client on the SDK's wire.
pub struct Client {
    pub stream: TcpStream,
    pub client: u128,
    pub request: u64,
    pub session: u64,
}

pub enum Answer {
    Reply(ReplyHeader, Vec<u8>),
    Evicted(Eviction),
}

impl Client {
    pub fn connect(address: SocketAddr, client: u128) -> Self {
        let stream = TcpStream::connect(address).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        Self {
            stream,
            client,
            request: 0,
            session: 0,
        }
    }

    pub fn send_raw(&mut self, header: &RequestHeader, body: &[u8]) -> Answer {
        self.stream
            .write_all(&header.encode())
            .expect("write header");
        self.stream.write_all(body).expect("write body");
        let mut head = [0u8; HEADER_SIZE];
        self.stream
            .read_exact(&mut head)
            .expect("a reply within 30 s");
        if head[60] == 13 {
            return Answer::Evicted(Eviction::decode(&head).expect("eviction"));
        }
        let reply = ReplyHeader::decode(&head).expect("a reply header");
        let mut body = vec![0u8; reply.size as usize - HEADER_SIZE];
        self.stream.read_exact(&mut body).expect("the reply body");
        assert_eq!(
            (reply.client, reply.request),
            (self.client, header.request),
            "echoes"
        );
        Answer::Reply(reply, body)
    }

    pub fn call(&mut self, request: &Request) -> Answer {
        let (code, body) = request.encode();
        let operation = Operation::for_code(code);
        let (number, session) = match operation {
            Operation::Register => (0, 0),
            Operation::NonReplicated => (self.request, self.session),
            _ => {
                self.request += 1;
                (self.request, self.session)
            }
        };
        let header = RequestHeader {
            size: u32::try_from(HEADER_SIZE + body.len()).expect("a small request"),
            client: self.client,
            request_checksum: 0,
            timestamp: 0,
            request: number,
            operation,
            session,
            user_id: 0,
            code,
        };
        self.send_raw(&header, &body)
    }

    /// The reply's status and body (panics on an eviction).
    pub fn ask(&mut self, request: &Request) -> (u32, Vec<u8>) {
        match self.call(request) {
            Answer::Reply(header, body) => (header.status, body),
            Answer::Evicted(e) => panic!("evicted: {:?}", e.reason),
        }
    }

    /// Like [`Client::ask`], resending on `TransientNotAccepted` as the SDK does (the request
    /// was never admitted: a group still starting its view); at most 500 times, 10 ms apart.
    pub fn ask_until_accepted(&mut self, request: &Request) -> (u32, Vec<u8>) {
        for _ in 0..500 {
            let (code, body) = self.ask(request);
            if code != status::TRANSIENT_NOT_ACCEPTED {
                return (code, body);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("never accepted: {request:?}");
    }

    pub fn login(&mut self, password: &str) -> Answer {
        self.login_as("iggy", password)
    }

    /// [`Client::login`] as `username`.
    pub fn login_as(&mut self, username: &str, password: &str) -> Answer {
        let mut answer = self.login_once_as(username, password);
        for _ in 0..500 {
            match &answer {
                Answer::Reply(header, _) if header.status == status::TRANSIENT_NOT_ACCEPTED => {
                    std::thread::sleep(Duration::from_millis(10));
                    answer = self.login_once_as(username, password);
                }
                _ => break,
            }
        }
        answer
    }

    /// A login with a personal access token (45).
    pub fn login_with_token(&mut self, token: &str) -> Answer {
        let answer = self.call(&Request::LoginRegisterWithToken {
            version: ClientVersion {
                protocol: iggy_protocol::PROTOCOL_VERSION,
                sdk_name: "test".into(),
                sdk_version: "0".into(),
            },
            token: token.into(),
            context: None,
        });
        if let Answer::Reply(header, body) = &answer
            && header.status == 0
        {
            let payload = split_result(body).expect("framed").expect("a session");
            let reply = LoginReply::read(&mut Reader::new(payload)).expect("login reply");
            self.session = reply.session;
        }
        answer
    }

    pub fn login_once(&mut self, password: &str) -> Answer {
        self.login_once_as("iggy", password)
    }

    pub fn login_once_as(&mut self, username: &str, password: &str) -> Answer {
        let answer = self.call(&Request::LoginRegister {
            version: ClientVersion {
                protocol: iggy_protocol::PROTOCOL_VERSION,
                sdk_name: "test".into(),
                sdk_version: "0".into(),
            },
            username: username.into(),
            password: password.into(),
            context: None,
        });
        if let Answer::Reply(header, body) = &answer
            && header.status == 0
        {
            let payload = split_result(body).expect("framed").expect("a session");
            let reply = LoginReply::read(&mut Reader::new(payload)).expect("login reply");
            assert_ne!(reply.session, 0);
            self.session = reply.session;
        }
        answer
    }
}

/// Loopback addresses with ports free a moment ago, one per node.
pub fn free_addresses(count: usize) -> Vec<SocketAddr> {
    // Below the kernel's ephemeral range (32768 and up on Linux), so that no outgoing
    // connection and no bind to port 0 takes one between this check and the node's bind (port 0
    // handed a just-freed port to a peer's connection, and a node then failed to start); each
    // call takes ports no earlier call of this process took, and processes start apart.
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    const FIRST: u32 = 20_000;
    const SPAN: u32 = 12_000;
    let start = std::process::id().wrapping_mul(97) % SPAN;
    let mut listeners = Vec::with_capacity(count);
    while listeners.len() < count {
        let taken = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        assert!(taken < SPAN, "no free port left below the ephemeral range");
        let port = u16::try_from(FIRST + (start + taken) % SPAN).expect("a port");
        if let Ok(listener) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            listeners.push(listener);
        }
    }
    listeners
        .iter()
        .map(|l| l.local_addr().expect("address"))
        .collect()
}

/// One `GET /metrics`, the whole response (status line, headers, body).
pub fn scrape(address: SocketAddr) -> String {
    let mut stream = TcpStream::connect(address).expect("the metrics port");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("write");
    let mut text = String::new();
    stream.read_to_string(&mut text).expect("the response");
    text
}

/// The `iggy-fsck` binary of this build, the one a person runs on a stopped node's directory.
/// `cargo test --workspace` (the README's command) has built it beside `iggy-server`; a run of
/// this package alone builds it here first.
pub fn fsck_binary() -> std::path::PathBuf {
    let server = std::path::Path::new(env!("CARGO_BIN_EXE_iggy-server"));
    let dir = server.parent().expect("the binaries' directory");
    let fsck = dir.join(format!("iggy-fsck{}", std::env::consts::EXE_SUFFIX));
    if !fsck.exists() {
        let mut build = std::process::Command::new(env!("CARGO"));
        build.args(["build", "--quiet", "-p", "iggy-fsck", "--bin", "iggy-fsck"]);
        if dir.file_name().is_some_and(|name| name == "release") {
            build.arg("--release");
        }
        let status = build.status().expect("cargo build -p iggy-fsck");
        assert!(status.success(), "cargo build -p iggy-fsck: {status}");
    }
    assert!(fsck.exists(), "{} after the build", fsck.display());
    fsck
}
