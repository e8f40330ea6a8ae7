//! A node's configuration: a TOML file, with flags over it. Every key is in `docs/server.md`.
//!
//! ```toml
//! cluster_id = 6545             # the same on every node (a number; hex as "0x1991")
//! cluster_name = "iggy"
//! cluster_key = "change me"     # the same on every node: the replica bus refuses peers without it
//! replica = 0                   # this node's index in `nodes`
//! data_dir = "/var/lib/iggy"
//!
//! [[nodes]]                     # every node of the cluster, in index order
//! name = "node-0"
//! client = "10.0.0.1:8090"      # the Iggy client port
//! replica = "10.0.0.1:9090"     # the replica bus
//!
//! [root]
//! username = "iggy"
//! password = "iggy"             # kept only as a salted hash once loaded
//!
//! [topics]
//! durability = "replicated"     # or "persisted"
//! segment_size_bytes = 1073741824
//! spread_primaries = true      # off: the first node leads every new partition
//!
//! [limits]
//! max_request_bytes = 15728640
//! reply_deadline_ms = 10000
//! storage_threads = 4
//! network_threads = 2
//! checkpoint_bytes = 16777216     # at most half the prepare ring
//! publish_interval_ms = 100       # replicated partitions also publish this often; 0: by size only
//! ring_bytes = 67108864           # each group's prepare ring (memory), 1 MiB to 256 MiB
//! ring_budget_bytes = 1073741824  # every partition's ring together (0: no budget)
//!
//! [tls]                            # optional: both ports over TLS (docs/server.md, "Security")
//! cert = "tls/node-0.pem"          # relative to this file
//! key = "tls/node-0.key"
//! ca = "tls/ca.pem"
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub cluster_id: ClusterId,
    #[serde(default = "default_cluster_name")]
    pub cluster_name: String,
    pub cluster_key: String,
    pub replica: u8,
    pub data_dir: PathBuf,
    pub nodes: Vec<NodeEntry>,
    #[serde(default)]
    pub root: Root,
    #[serde(default)]
    pub topics: Topics,
    #[serde(default)]
    pub limits: Limits,
    /// TLS on the client port and the replica bus (`crate::tls`); absent: plain TCP.
    #[serde(default)]
    pub tls: Option<crate::tls::TlsConfig>,
}

/// A cluster id as a number or a string (decimal, or hex with `0x`).
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum ClusterId {
    Number(u64),
    Text(String),
}

impl ClusterId {
    pub fn value(&self) -> Result<u128, String> {
        match self {
            Self::Number(n) => Ok(u128::from(*n)),
            Self::Text(text) => {
                let parsed = match text.strip_prefix("0x") {
                    Some(hex) => u128::from_str_radix(hex, 16),
                    None => text.parse(),
                };
                parsed.map_err(|e| format!("cluster_id {text:?}: {e}"))
            }
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeEntry {
    pub name: String,
    pub client: SocketAddr,
    pub replica: SocketAddr,
    /// The metrics endpoint (`GET /metrics`); none when absent.
    #[serde(default)]
    pub metrics: Option<SocketAddr>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Root {
    pub username: String,
    pub password: String,
}

impl Default for Root {
    fn default() -> Self {
        Self {
            username: "iggy".into(),
            password: "iggy".into(),
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Topics {
    pub durability: String,
    pub segment_size_bytes: u64,
    /// A new partition's group starts in the view its creator (the metadata group's primary)
    /// spreads it to, so primaries spread over the nodes; off, every group starts in view 0 and
    /// the first node leads them all (the article's cluster).
    pub spread_primaries: bool,
}

impl Default for Topics {
    fn default() -> Self {
        Self {
            durability: "replicated".into(),
            segment_size_bytes: 1 << 30,
            spread_primaries: true,
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    pub max_request_bytes: u32,
    pub reply_deadline_ms: u64,
    pub storage_threads: usize,
    pub network_threads: usize,
    pub checkpoint_bytes: u64,
    /// A replicated partition's replica also publishes what it journaled this often (0: only
    /// every `checkpoint_bytes`): a kill forgets at most this long of its log.
    pub publish_interval_ms: u64,
    /// Each group's prepare ring: the prepares a node keeps in memory to serve its peers'
    /// repair (below it repair reads the log on disk, and below retention a partition is
    /// transferred). A node holds up to this much per group...
    pub ring_bytes: u64,
    /// ...and at most this much for every partition's ring together (0: no budget): each
    /// ring gets the smaller of `ring_bytes` and an even share (at least 1 MiB).
    pub ring_budget_bytes: u64,
    /// Partitions one topic may have (a create or an add past it is refused).
    pub max_partitions_per_topic: u32,
    /// Partitions the cluster may hold in all (each node hosts every one).
    pub max_partitions: u64,
    /// Free bytes a create of partitions must leave on the data directory's file system, after
    /// the segment each preallocates.
    pub free_reserve_bytes: u64,
    /// Client connections a node keeps open at once (each a descriptor); more are closed as
    /// they arrive.
    pub max_connections: u64,
    /// Request bytes a node holds at once over all its client connections; a body past it
    /// waits, unread, until earlier requests are answered.
    pub in_flight_bytes: u64,
    /// Body bytes the groups a node leads hold admitted and not yet committed, together; a
    /// request past it is refused `TransientNotAccepted` before it is prepared.
    pub pipeline_budget_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_request_bytes: MAX_REQUEST_BYTES_LIMIT,
            reply_deadline_ms: 10_000,
            storage_threads: 4,
            network_threads: 2,
            checkpoint_bytes: CHECKPOINT_BYTES,
            publish_interval_ms: 100,
            ring_bytes: iggy_vsr::Config::default().ring_bytes_max,
            ring_budget_bytes: 1 << 30,
            max_partitions_per_topic: crate::admission::Admission::default()
                .max_partitions_per_topic,
            max_partitions: crate::admission::Admission::default().max_partitions,
            free_reserve_bytes: crate::admission::Admission::default().free_reserve_bytes,
            max_connections: 4_096,
            in_flight_bytes: 256 << 20,
            pipeline_budget_bytes: 512 << 20,
        }
    }
}

/// The largest `max_request_bytes`: a prepare's bound less 1 MiB for what a request's body
/// gains on the way to its prepare (the prepare header, a batch's offsets and stamps).
pub const MAX_REQUEST_BYTES_LIMIT: u32 = 15 << 20;
const _: () =
    assert!(MAX_REQUEST_BYTES_LIMIT as u64 + (1 << 20) <= iggy_segments::PREPARE_BYTES_MAX);

/// A replicated partition's default publication interval. A node killed or powered off loses
/// what its replicated partitions had not published and repairs it from its peers' prepare rings
/// (64 MiB a group), so the interval must be well inside the ring: at 128 MiB (the WAL's own
/// checkpoint, the article's figure) a kill -9 under load left partitions behind every peer's
/// ring, with nothing to catch up from until state transfer exists (issue #33). 16 MiB leaves
/// three quarters of the ring for what the cluster appends while the node is down.
pub const CHECKPOINT_BYTES: u64 = 16 << 20;

fn default_cluster_name() -> String {
    "iggy".into()
}

impl FileConfig {
    /// Reads and checks a configuration file; errors name the file and the key.
    pub fn load(text: &str, path: &str) -> Result<Self, String> {
        let config: Self = toml::from_str(text).map_err(|e| format!("{path}: {e}"))?;
        config.check().map_err(|e| format!("{path}: {e}"))?;
        Ok(config)
    }

    pub fn check(&self) -> Result<(), String> {
        self.cluster_id.value()?;
        if self.nodes.is_empty() || self.nodes.len() > 32 {
            return Err(format!(
                "nodes: {} listed, 1 to 32 expected",
                self.nodes.len()
            ));
        }
        if usize::from(self.replica) >= self.nodes.len() {
            return Err(format!(
                "replica = {} but nodes lists {} (indexes 0 to {})",
                self.replica,
                self.nodes.len(),
                self.nodes.len() - 1
            ));
        }
        if self.cluster_key.is_empty() {
            return Err("cluster_key is empty: every node needs the same secret".into());
        }
        if !matches!(self.topics.durability.as_str(), "replicated" | "persisted") {
            return Err(format!(
                "topics.durability = {:?}: replicated or persisted",
                self.topics.durability
            ));
        }
        let segments = crate::admission::SEGMENT_BYTES_MIN..=crate::admission::SEGMENT_BYTES_MAX;
        if !segments.contains(&self.topics.segment_size_bytes) {
            return Err(format!(
                "topics.segment_size_bytes = {}: {} to {}",
                self.topics.segment_size_bytes,
                segments.start(),
                segments.end()
            ));
        }
        if self.limits.in_flight_bytes < u64::from(self.limits.max_request_bytes) {
            return Err(format!(
                "limits.in_flight_bytes = {}: at least limits.max_request_bytes ({}), or the largest request could never be read",
                self.limits.in_flight_bytes, self.limits.max_request_bytes
            ));
        }
        if self.limits.pipeline_budget_bytes < u64::from(self.limits.max_request_bytes) {
            return Err(format!(
                "limits.pipeline_budget_bytes = {}: at least limits.max_request_bytes ({}), the largest request a primary admits",
                self.limits.pipeline_budget_bytes, self.limits.max_request_bytes
            ));
        }
        if self.limits.max_partitions_per_topic == 0 || self.limits.max_partitions == 0 {
            return Err(
                "limits.max_partitions_per_topic and limits.max_partitions must be positive".into(),
            );
        }
        let ring = self.limits.ring_bytes;
        if !(1 << 20..=iggy_vsr::config::RING_BYTES_LIMIT).contains(&ring) {
            return Err(format!(
                "limits.ring_bytes = {ring}: 1 MiB to {} MiB",
                iggy_vsr::config::RING_BYTES_LIMIT >> 20
            ));
        }
        if self.limits.checkpoint_bytes == 0 || self.limits.checkpoint_bytes > ring / 2 {
            return Err(format!(
                "limits.checkpoint_bytes = {}: 1 to {} (half the {} MiB prepare ring a restarted node repairs its unpublished tail from)",
                self.limits.checkpoint_bytes,
                ring / 2,
                ring >> 20
            ));
        }
        let interval = self.limits.publish_interval_ms;
        if interval != 0 && !(iggy_vsr::TICK_MS..=60_000).contains(&interval) {
            return Err(format!(
                "limits.publish_interval_ms = {interval}: 0 (only every checkpoint_bytes) or {} to 60000",
                iggy_vsr::TICK_MS
            ));
        }
        if !(256..=MAX_REQUEST_BYTES_LIMIT).contains(&self.limits.max_request_bytes) {
            return Err(format!(
                "limits.max_request_bytes = {}: 256 (a header) to {MAX_REQUEST_BYTES_LIMIT} (a request becomes one prepare, and a prepare is at most {} bytes: the WAL's append, the bus's frames and a partition transfer's entries all hold to it)",
                self.limits.max_request_bytes,
                iggy_segments::PREPARE_BYTES_MAX
            ));
        }
        Ok(())
    }

    pub fn reply_deadline(&self) -> Duration {
        Duration::from_millis(self.limits.reply_deadline_ms)
    }
}
