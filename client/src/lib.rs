//! `iggy-client`: a small blocking client on the Iggy wire of the pinned SDK (`iggy-protocol`),
//! for our own tools (`iggy-server dev --demo`, load and verify) and tests. One connection, one
//! request at a time, as the SDK.
//!
//! Retries follow the SDK's rules, with one rule stricter: every try of a request carries the
//! same request number on the same session. `TransientNotCommitted` (the outcome is unknown) is
//! replayed under it, so the group's client table answers it if it did commit, and it is never
//! applied twice. `TransientNotAccepted` (this try was never admitted) is sent again under it
//! too: an earlier try of the same request may have been admitted (a `TransientNotCommitted`
//! before it, whose op a view change may keep), and under a new number both could commit.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use iggy_protocol::primitives::OptionEntry;
use iggy_protocol::response::{LoginReply, PollHeader, read_send_confirmations, split_result};
use iggy_protocol::{
    ClientVersion, Consumer, Eviction, EvictionReason, HEADER_SIZE, Identifier, Operation,
    Partitioning, PollingStrategy, Reader, ReplyHeader, Request, RequestHeader, status,
};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{address}: {source}")]
    Io {
        address: SocketAddr,
        source: std::io::Error,
    },
    #[error("{address}: the server ended the session: {reason:?}")]
    Evicted {
        address: SocketAddr,
        reason: EvictionReason,
    },
    #[error("{address}: command {code}: status {status}")]
    Status {
        address: SocketAddr,
        code: u32,
        status: u32,
    },
    #[error("{address}: command {code}: {reason}")]
    Protocol {
        address: SocketAddr,
        code: u32,
        reason: String,
    },
}

/// A message as sent or polled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Polled {
    pub offset: u64,
    pub id: u128,
    pub payload: Vec<u8>,
}

/// A connection's bytes: plain TCP, or TLS over it.
enum Transport {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Transport {
    fn socket(&self) -> &TcpStream {
        match self {
            Self::Plain(stream) => stream,
            Self::Tls(stream) => &stream.sock,
        }
    }
}

impl Read for Transport {
    fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Self::Plain(stream) => stream.read(buffer),
            Self::Tls(stream) => stream.read(buffer),
        }
    }
}

impl Write for Transport {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        match self {
            Self::Plain(stream) => stream.write(bytes),
            Self::Tls(stream) => stream.write(bytes),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Self::Plain(stream) => stream.flush(),
            Self::Tls(stream) => stream.flush(),
        }
    }
}

/// The TLS configuration [`Client::connect`] uses for every connection of this process, once
/// set ([`use_tls`]).
static TLS: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();

/// Makes every later [`Client::connect`] of this process use TLS with `config` (the tools'
/// `--tls-ca`). Returns false if it was set already.
pub fn use_tls(config: Arc<rustls::ClientConfig>) -> bool {
    TLS.set(config).is_ok()
}

/// Whether replies may name another client id than their request's ([`for_apache_iggy`]).
static ANY_REPLY_CLIENT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes every later exchange of this process accept a reply to its request number whatever
/// client id the reply names. Apache Iggy's server (0.9 edge) answers some requests under an id
/// of its own (a send under the id it gave the connection, not the request's), which this
/// client otherwise refuses as a reply to someone else's request (`load --apache-iggy`).
pub fn for_apache_iggy() {
    ANY_REPLY_CLIENT.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// One connection.
pub struct Client {
    address: SocketAddr,
    stream: Transport,
    client: u128,
    request: u64,
    session: u64,
    /// How long transient refusals are retried.
    pub patience: Duration,
}

impl Client {
    /// Connects as client `client` (any nonzero id, unique per connection).
    /// Over TLS when [`use_tls`] was called.
    pub fn connect(address: SocketAddr, client: u128) -> Result<Self, ClientError> {
        Self::connect_with(address, client, TLS.get().cloned())
    }

    /// Connects over TLS with `tls` (the node's certificate checked for `address`'s IP), or
    /// plain TCP without.
    pub fn connect_with(
        address: SocketAddr,
        client: u128,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Result<Self, ClientError> {
        let io = |source| ClientError::Io { address, source };
        let socket = TcpStream::connect(address).map_err(io)?;
        socket
            .set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(io)?;
        let _ = socket.set_nodelay(true);
        let stream = match tls {
            None => Transport::Plain(socket),
            Some(config) => {
                let name = rustls::pki_types::ServerName::IpAddress(address.ip().into());
                let connection = rustls::ClientConnection::new(config, name)
                    .map_err(|e| io(std::io::Error::other(e)))?;
                Transport::Tls(Box::new(rustls::StreamOwned::new(connection, socket)))
            }
        };
        Ok(Self {
            address,
            stream,
            client,
            request: 0,
            session: 0,
            patience: Duration::from_secs(30),
        })
    }

    pub fn session(&self) -> u64 {
        self.session
    }

    /// The connection, the session and the client id, for a caller that writes its own
    /// frames on it (`iggy-server hostile`).
    /// `None` over TLS.
    pub fn into_parts(self) -> Option<(TcpStream, u64, u128)> {
        match self.stream {
            Transport::Plain(stream) => Some((stream, self.session, self.client)),
            Transport::Tls(_) => None,
        }
    }

    /// How long a reply may take before the call fails with a timeout (30 s unless set). A
    /// request that times out has an unknown outcome, and the connection is of no further use:
    /// drop it and connect again (to another node, if this one may be paused or cut off).
    pub fn set_reply_timeout(&mut self, timeout: Duration) -> Result<(), ClientError> {
        let address = self.address;
        self.stream
            .socket()
            .set_read_timeout(Some(timeout.max(Duration::from_millis(1))))
            .map_err(|source| ClientError::Io { address, source })
    }

    /// Sends one request under `number` and reads the reply.
    fn exchange(
        &mut self,
        code: u32,
        body: &[u8],
        number: u64,
    ) -> Result<(ReplyHeader, Vec<u8>), ClientError> {
        let address = self.address;
        let io = |source| ClientError::Io { address, source };
        let operation = Operation::for_code(code);
        let header = RequestHeader {
            size: u32::try_from(HEADER_SIZE + body.len()).unwrap_or(u32::MAX),
            client: self.client,
            request_checksum: if operation.is_partition() || operation == Operation::NonReplicated {
                0
            } else {
                iggy_protocol::header::request_checksum(body)
            },
            timestamp: 0,
            request: number,
            operation,
            session: if operation == Operation::Register {
                0
            } else {
                self.session
            },
            user_id: 0,
            code,
        };
        self.stream.write_all(&header.encode()).map_err(io)?;
        self.stream.write_all(body).map_err(io)?;
        self.stream.flush().map_err(io)?;
        let mut head = [0u8; HEADER_SIZE];
        self.stream.read_exact(&mut head).map_err(io)?;
        if let Ok(eviction) = Eviction::decode(&head) {
            return Err(ClientError::Evicted {
                address,
                reason: eviction.reason,
            });
        }
        let reply = ReplyHeader::decode(&head).map_err(|e| ClientError::Protocol {
            address,
            code,
            reason: e.to_string(),
        })?;
        let mut reply_body = vec![0u8; (reply.size as usize).saturating_sub(HEADER_SIZE)];
        self.stream.read_exact(&mut reply_body).map_err(io)?;
        let any_client = ANY_REPLY_CLIENT.load(std::sync::atomic::Ordering::Relaxed);
        if reply.request != number || (reply.client != self.client && !any_client) {
            return Err(ClientError::Protocol {
                address,
                code,
                reason: format!(
                    "a reply (status {}) to request {} of client {:#x}, not to this one's \
                     request {number} of client {:#x}",
                    reply.status, reply.request, reply.client, self.client
                ),
            });
        }
        Ok((reply, reply_body))
    }

    /// Sends `request` with the SDK's retries and returns the reply body of status 0. Every try
    /// carries the same request number (see the module's doc).
    pub fn call(&mut self, request: &Request) -> Result<Vec<u8>, ClientError> {
        let (code, body) = request.encode();
        let operation = Operation::for_code(code);
        let deadline = Instant::now() + self.patience;
        let number = self.next_number(operation);
        loop {
            let (reply, reply_body) = self.exchange(code, &body, number)?;
            match reply.status {
                0 => return Ok(reply_body),
                // Same number, same session: the client table answers it if an earlier try
                // committed, and a try never admitted commits once.
                status::TRANSIENT_NOT_ACCEPTED | status::TRANSIENT_NOT_COMMITTED
                    if Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(50));
                }
                status => {
                    return Err(ClientError::Status {
                        address: self.address,
                        code,
                        status,
                    });
                }
            }
        }
    }

    fn next_number(&mut self, operation: Operation) -> u64 {
        match operation {
            Operation::Register => 0,
            Operation::NonReplicated => self.request,
            _ => {
                self.request += 1;
                self.request
            }
        }
    }

    /// The payload of a result-framed reply, or its error code as a `Status` error.
    fn framed(&self, code: u32, body: &[u8]) -> Result<Vec<u8>, ClientError> {
        match split_result(body) {
            Ok(Ok(payload)) => Ok(payload.to_vec()),
            Ok(Err(status)) => Err(ClientError::Status {
                address: self.address,
                code,
                status,
            }),
            Err(e) => Err(ClientError::Protocol {
                address: self.address,
                code,
                reason: e.to_string(),
            }),
        }
    }

    pub fn login(&mut self, username: &str, password: &str) -> Result<(), ClientError> {
        let body = self.call(&Request::LoginRegister {
            version: ClientVersion {
                protocol: iggy_protocol::PROTOCOL_VERSION,
                sdk_name: "iggy-client".into(),
                sdk_version: env!("CARGO_PKG_VERSION").into(),
            },
            username: username.into(),
            password: password.into(),
            context: None,
        })?;
        let payload = self.framed(iggy_protocol::code::LOGIN_REGISTER, &body)?;
        let reply =
            LoginReply::read(&mut Reader::new(&payload)).map_err(|e| ClientError::Protocol {
                address: self.address,
                code: iggy_protocol::code::LOGIN_REGISTER,
                reason: e.to_string(),
            })?;
        self.session = reply.session;
        Ok(())
    }

    pub fn create_stream(&mut self, name: &str) -> Result<(), ClientError> {
        let body = self.call(&Request::CreateStream {
            name: name.into(),
            options: Vec::new(),
        })?;
        self.framed(iggy_protocol::code::CREATE_STREAM, &body)
            .map(|_| ())
    }

    pub fn create_topic(
        &mut self,
        stream: &str,
        name: &str,
        partitions: u32,
        durability: &str,
    ) -> Result<(), ClientError> {
        self.create_topic_retaining(stream, name, partitions, durability, 0)
    }

    /// [`Client::create_topic`], each partition keeping at most `max_topic_size` bytes (the
    /// topic's `max_topic_size` option; 0 keeps everything).
    pub fn create_topic_retaining(
        &mut self,
        stream: &str,
        name: &str,
        partitions: u32,
        durability: &str,
        max_topic_size: u64,
    ) -> Result<(), ClientError> {
        let mut options = vec![OptionEntry::string("durability", durability)];
        if max_topic_size > 0 {
            options.push(OptionEntry::uint64("max_topic_size", max_topic_size));
        }
        self.create_topic_with(stream, name, partitions, options)
    }

    /// Creates a topic with exactly these options (another server's keys, for one: `load
    /// --apache-iggy`).
    pub fn create_topic_with(
        &mut self,
        stream: &str,
        name: &str,
        partitions: u32,
        options: Vec<OptionEntry>,
    ) -> Result<(), ClientError> {
        let body = self.call(&Request::CreateTopic {
            stream: Identifier::Name(stream.into()),
            partitions,
            name: name.into(),
            options,
        })?;
        self.framed(iggy_protocol::code::CREATE_TOPIC, &body)
            .map(|_| ())
    }

    /// Sends `messages` (id, payload) to partition `partition` (0-based); returns the first
    /// message's offset.
    pub fn send(
        &mut self,
        stream: &str,
        topic: &str,
        partition: u32,
        messages: &[(u128, Vec<u8>)],
    ) -> Result<u64, ClientError> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(0));
        let frames: Vec<iggy_format::batch::NewMessage> = messages
            .iter()
            .map(|(id, payload)| iggy_format::batch::NewMessage {
                id: *id,
                timestamp_delta: 0,
                payload: payload.clone(),
                user_headers: Vec::new(),
            })
            .collect();
        let batch =
            iggy_format::batch::encode(now, &frames).map_err(|e| ClientError::Protocol {
                address: self.address,
                code: iggy_protocol::code::SEND_MESSAGES,
                reason: e.to_string(),
            })?;
        let body = self.call(&Request::SendMessages {
            stream: Identifier::Name(stream.into()),
            topic: Identifier::Name(topic.into()),
            partitioning: Partitioning::PartitionId(partition),
            count: u32::try_from(messages.len()).unwrap_or(u32::MAX),
            batch,
        })?;
        let confirmations = read_send_confirmations(&body).map_err(|e| ClientError::Protocol {
            address: self.address,
            code: iggy_protocol::code::SEND_MESSAGES,
            reason: e.to_string(),
        })?;
        Ok(confirmations.first().map_or(0, |c| c.base_offset))
    }

    /// Polls up to `count` messages of partition `partition` from `offset`.
    pub fn poll(
        &mut self,
        stream: &str,
        topic: &str,
        partition: u32,
        offset: u64,
        count: u32,
    ) -> Result<Vec<Polled>, ClientError> {
        let mut polled = self.poll_as(
            stream,
            topic,
            partition,
            0,
            PollingStrategy::Offset(offset),
            count,
            false,
        )?;
        polled.retain(|m| m.offset >= offset);
        Ok(polled)
    }

    /// Polls as consumer `consumer` from where `strategy` says; with `auto_commit` the server
    /// stores the consumer's offset at the last message it answers. Every message of the batches
    /// answered, the first batch's from its start.
    #[allow(clippy::too_many_arguments)]
    pub fn poll_as(
        &mut self,
        stream: &str,
        topic: &str,
        partition: u32,
        consumer: u32,
        strategy: PollingStrategy,
        count: u32,
        auto_commit: bool,
    ) -> Result<Vec<Polled>, ClientError> {
        let body = self.call(&Request::PollMessages {
            consumer: Consumer {
                group: false,
                id: Identifier::Numeric(consumer),
            },
            stream: Identifier::Name(stream.into()),
            topic: Identifier::Name(topic.into()),
            partition: Some(partition),
            strategy,
            count,
            auto_commit,
        })?;
        let protocol = |reason: String| ClientError::Protocol {
            address: self.address,
            code: iggy_protocol::code::POLL_MESSAGES,
            reason,
        };
        let (_, mut batches) = PollHeader::read(&body).map_err(|e| protocol(e.to_string()))?;
        let mut out = Vec::new();
        while batches.len() >= iggy_format::batch::BATCH_HEADER_SIZE {
            let length = u64::from_le_bytes(batches[32..40].try_into().unwrap_or([0; 8]));
            let length = usize::try_from(length).unwrap_or(usize::MAX);
            let Some(bytes) = batches.get(..length) else {
                return Err(protocol("a batch runs past the reply".into()));
            };
            let batch = iggy_format::batch::decode(bytes).map_err(|e| protocol(e.to_string()))?;
            for message in batch.messages() {
                out.push(Polled {
                    offset: batch.header.base_offset + u64::from(message.offset_delta),
                    id: message.id,
                    payload: message.payload.to_vec(),
                });
            }
            batches = &batches[length..];
        }
        Ok(out)
    }
}
