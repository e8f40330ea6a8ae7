//! Metrics in the Prometheus text format, on a small HTTP endpoint per node (`GET /metrics`).
//! `docs/server.md` lists every metric and what it means.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::bus::BusCounters;
use crate::client_port::PortCounters;

/// Upper bounds of the commit latency histogram's buckets, in microseconds.
pub const LATENCY_BUCKETS_US: [u64; 10] = [
    250, 500, 1_000, 2_000, 5_000, 10_000, 50_000, 100_000, 1_000_000, 10_000_000,
];

/// What the runtime and the client port record.
#[derive(Debug, Default)]
pub struct NodeMetrics {
    /// Messages from peers and clients in the tick thread's inbox, not yet taken
    /// ([`crate::runtime::INBOX_MESSAGES`] at most).
    pub inbox_messages: AtomicU64,
    /// Their bytes, about (frame headers and bodies; [`crate::runtime::INBOX_BYTES`] at most).
    pub inbox_bytes: AtomicU64,
    /// Messages not queued because the inbox held its most (messages or bytes): a peer's
    /// dropped (the protocol resends), a client's refused `TransientNotAccepted`.
    pub inbox_refused: AtomicU64,
    /// Views a replica of this node entered (each group's view changes).
    pub view_changes: AtomicU64,
    /// Groups hosted, and those in normal status with a known primary.
    pub groups: AtomicU64,
    pub groups_led_here: AtomicU64,
    pub groups_without_primary: AtomicU64,
    /// Body bytes of requests the groups this node leads admitted and have not committed
    /// (`limits.pipeline_budget_bytes` bounds it).
    pub pipeline_bytes: AtomicU64,
    /// Partitions the metadata lists that this node could not create (a full disk): their
    /// peers serve them, and the node tries again every 10 s.
    pub partitions_unavailable: AtomicU64,
    /// The data directory's free bytes, as last looked at (every 500 ms).
    pub disk_free_bytes: AtomicU64,
    /// Prepares refused because a partition had no room for its next segment (the disk filled
    /// between two looks at its free space, or faster than the reserve).
    pub prepares_refused_no_room: AtomicU64,
    /// Journal writes (a backup's, or a new primary's of its view's log) refused for want of
    /// room: the replica acknowledges nothing past them and tries again every 100 ms.
    pub journals_refused_no_room: AtomicU64,
    /// Set by such a refusal, taken by the next look at the free space: the node then says its
    /// disk is low until that look, as below its reserve (every node refuses client writes
    /// with 4010), and writes are tried again after it.
    pub no_room: std::sync::atomic::AtomicBool,
    /// Bytes boot discarded past the published frontiers at this process's start.
    pub boot_discarded_bytes: AtomicU64,
    /// Client sessions connected to this node.
    pub sessions: AtomicU64,
    /// Prepare bytes (header and body) this node sent in answer to each peer's repair requests,
    /// by the peer's index (peers past the 16th are counted under the 16th).
    pub repair_sent_bytes: [AtomicU64; 16],
    /// The replicas' own event counters (`iggy_vsr::Replica::counters`), summed over this
    /// node's groups, refreshed once a second.
    pub replica_events: std::sync::Mutex<std::collections::BTreeMap<&'static str, u64>>,
    /// Read barriers this node's replicas refused (a view change, no primary, no answer in
    /// time): each was asked again, up to the reply deadline.
    pub read_barriers_refused: AtomicU64,
    /// Commit latency of client writes, from the request reaching this node to its reply.
    latency_buckets: [AtomicU64; LATENCY_BUCKETS_US.len()],
    latency_count: AtomicU64,
    latency_sum_us: AtomicU64,
}

impl NodeMetrics {
    pub fn observe_repair_sent(&self, to: u8, bytes: u64) {
        let slot = usize::from(to).min(self.repair_sent_bytes.len() - 1);
        self.repair_sent_bytes[slot].fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn read_barrier_refused(&self) {
        self.read_barriers_refused.fetch_add(1, Ordering::Relaxed);
    }

    pub fn observe_commit(&self, latency: Duration) {
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        for (bucket, bound) in self.latency_buckets.iter().zip(LATENCY_BUCKETS_US) {
            if us <= bound {
                bucket.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.latency_count.fetch_add(1, Ordering::Relaxed);
        self.latency_sum_us.fetch_add(us, Ordering::Relaxed);
    }
}

fn counter(out: &mut String, name: &str, help: &str, kind: &str, value: u64) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
    );
}

/// The text a scrape gets.
pub fn render(node: &NodeMetrics, bus: &BusCounters, port: &PortCounters) -> String {
    let mut out = String::new();
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    out.push_str("# HELP iggy_commit_latency_seconds Client writes, from the request reaching this node to its committed reply.\n# TYPE iggy_commit_latency_seconds histogram\n");
    for (bucket, bound) in node.latency_buckets.iter().zip(LATENCY_BUCKETS_US) {
        #[allow(clippy::cast_precision_loss)]
        let seconds = bound as f64 / 1e6;
        let _ = writeln!(
            out,
            "iggy_commit_latency_seconds_bucket{{le=\"{seconds}\"}} {}",
            load(bucket)
        );
    }
    let count = load(&node.latency_count);
    #[allow(clippy::cast_precision_loss)]
    let sum = load(&node.latency_sum_us) as f64 / 1e6;
    let _ = writeln!(
        out,
        "iggy_commit_latency_seconds_bucket{{le=\"+Inf\"}} {count}\niggy_commit_latency_seconds_sum {sum}\niggy_commit_latency_seconds_count {count}"
    );
    counter(
        &mut out,
        "iggy_view_changes_total",
        "Views this node's replicas entered after their first.",
        "counter",
        load(&node.view_changes),
    );
    out.push_str("# HELP iggy_repair_sent_bytes_total Prepare bytes (header and body) this node sent in answer to a peer's repair requests, by the peer.\n# TYPE iggy_repair_sent_bytes_total counter\n");
    for (to, bytes) in node.repair_sent_bytes.iter().enumerate() {
        let bytes = load(bytes);
        if bytes > 0 {
            let _ = writeln!(out, "iggy_repair_sent_bytes_total{{to=\"{to}\"}} {bytes}");
        }
    }
    out.push_str("# HELP iggy_replica_events_total The replicas' event counters (docs/server.md), summed over this node's groups.\n# TYPE iggy_replica_events_total counter\n");
    for (event, count) in node
        .replica_events
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
    {
        let _ = writeln!(
            out,
            "iggy_replica_events_total{{event=\"{event}\"}} {count}"
        );
    }
    counter(
        &mut out,
        "iggy_prepares_refused_no_room_total",
        "Client writes a primary here refused because the partition had no room for its next segment (ENOSPC, EDQUOT, EMFILE or ENFILE creating it): nothing was appended, and every node refuses writes until the next look at the free space.",
        "counter",
        load(&node.prepares_refused_no_room),
    );
    counter(
        &mut out,
        "iggy_journals_refused_no_room_total",
        "Journal writes of a replica here refused for want of room (a disk fuller than its primary's): the replica acknowledges nothing past them and tries again every 100 ms; the node refuses client writes until the next look at the free space.",
        "counter",
        load(&node.journals_refused_no_room),
    );
    counter(
        &mut out,
        "iggy_read_barriers_refused_total",
        "Read barriers this node's replicas refused (a view change, no primary, no answer in time); each is asked again up to the reply deadline.",
        "counter",
        load(&node.read_barriers_refused),
    );
    counter(
        &mut out,
        "iggy_groups",
        "Consensus groups this node hosts (the metadata group and one per partition).",
        "gauge",
        load(&node.groups),
    );
    counter(
        &mut out,
        "iggy_groups_led",
        "Groups whose primary is this node.",
        "gauge",
        load(&node.groups_led_here),
    );
    counter(
        &mut out,
        "iggy_pipeline_bytes",
        "Body bytes of requests the groups this node leads admitted and have not committed (at most limits.pipeline_budget_bytes).",
        "gauge",
        load(&node.pipeline_bytes),
    );
    counter(
        &mut out,
        "iggy_groups_without_primary",
        "Groups in a view change or recovering on this node.",
        "gauge",
        load(&node.groups_without_primary),
    );
    counter(
        &mut out,
        "iggy_disk_free_bytes",
        "The data directory's free bytes (below limits.free_reserve_bytes, every node refuses client writes).",
        "gauge",
        load(&node.disk_free_bytes),
    );
    counter(
        &mut out,
        "iggy_partitions_unavailable",
        "Partitions the metadata lists that this node could not create (a full disk); it tries again every 10 s.",
        "gauge",
        load(&node.partitions_unavailable),
    );
    counter(
        &mut out,
        "iggy_boot_discarded_bytes",
        "Bytes boot discarded past the published frontiers when this process started.",
        "gauge",
        load(&node.boot_discarded_bytes),
    );
    counter(
        &mut out,
        "iggy_client_sessions",
        "Clients logged in on this node.",
        "gauge",
        load(&node.sessions),
    );
    counter(
        &mut out,
        "iggy_client_connections_total",
        "Client connections accepted.",
        "counter",
        load(&port.connections),
    );
    counter(
        &mut out,
        "iggy_client_requests_total",
        "Client requests answered.",
        "counter",
        load(&port.requests),
    );
    counter(
        &mut out,
        "iggy_client_evictions_total",
        "Client sessions ended with an eviction.",
        "counter",
        load(&port.evictions),
    );
    counter(
        &mut out,
        "iggy_client_isolated_closes_total",
        "Client connections closed because this node heard no peer, or no peer heard it, for a second while a request waited (it was cut off).",
        "counter",
        load(&port.isolated_closes),
    );
    counter(
        &mut out,
        "iggy_client_writes_refused_disk_low_total",
        "Client writes refused with 4010 because a node's disk was below its reserve.",
        "counter",
        load(&port.writes_refused_disk_low),
    );
    counter(
        &mut out,
        "iggy_client_failed_logins_total",
        "Logins refused for a wrong username or password (each logged with the peer's address).",
        "counter",
        load(&port.failed_logins),
    );
    counter(
        &mut out,
        "iggy_inbox_refused_total",
        "Messages of peers (dropped) and clients (refused 58) not queued because the tick thread's inbox held 16,384 messages or 1 GiB.",
        "counter",
        load(&node.inbox_refused),
    );
    counter(
        &mut out,
        "iggy_client_logins_shed_total",
        "Logins closed unchecked because 64 password checks already waited (a flood of guesses).",
        "counter",
        load(&port.logins_shed),
    );
    counter(
        &mut out,
        "iggy_client_orphan_polls_total",
        "Auto-commit polls whose client closed its connection before the answer: the consumer offset was not stored.",
        "counter",
        load(&port.orphan_polls),
    );
    counter(
        &mut out,
        "iggy_client_poll_routes_total",
        "Routes answered to clustered SDKs for an auto-commit poll or an offset write (GetPollRouting, GetConsumerOffsetRouting).",
        "counter",
        load(&port.poll_routes),
    );
    counter(
        &mut out,
        "iggy_client_attached_sessions_total",
        "Routed data connections bound to their coordinator connection's session (AttachConsumerSession).",
        "counter",
        load(&port.attached_sessions),
    );
    counter(
        &mut out,
        "iggy_client_flushes_total",
        "FlushUnsavedBuffer requests with fsync answered: this node's log synced through what the partition had acknowledged.",
        "counter",
        load(&port.flushes),
    );
    out.push_str("# HELP iggy_client_errors_total Error replies to clients, by status code.\n# TYPE iggy_client_errors_total counter\n");
    for (code, n) in port
        .errors
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
    {
        let _ = writeln!(out, "iggy_client_errors_total{{code=\"{code}\"}} {n}");
    }
    counter(
        &mut out,
        "iggy_bus_frames_in_total",
        "Replica messages received from peers.",
        "counter",
        load(&bus.frames_in),
    );
    counter(
        &mut out,
        "iggy_bus_frames_out_total",
        "Replica messages sent to peers.",
        "counter",
        load(&bus.frames_out),
    );
    counter(
        &mut out,
        "iggy_bus_dropped_total",
        "Replica messages dropped on a full peer queue.",
        "counter",
        load(&bus.dropped_queue_full),
    );
    counter(
        &mut out,
        "iggy_bus_bad_frames_total",
        "Peer connections closed for a frame that was not a message of that peer.",
        "counter",
        load(&bus.bad_frames),
    );
    counter(
        &mut out,
        "iggy_bus_refused_handshakes_total",
        "Peer connections refused at the handshake.",
        "counter",
        load(&bus.refused_handshakes),
    );
    counter(
        &mut out,
        "iggy_bus_connects_total",
        "Connections this node opened to its peers.",
        "counter",
        load(&bus.connects),
    );
    counter(
        &mut out,
        "iggy_bus_campaigns_held_back_total",
        "StartViewChange and DoViewChange messages not sent because this node heard fewer peers than a quorum needs in the last second.",
        "counter",
        load(&bus.campaigns_held_back),
    );
    counter(
        &mut out,
        "iggy_bus_silent_peers_total",
        "Peers taken for gone because nothing of them arrived for a second (their primaryships end).",
        "counter",
        load(&bus.silent_peers),
    );
    counter(
        &mut out,
        "iggy_bus_deaf_peers_total",
        "Peers taken for gone because their pings said they heard fewer nodes than a quorum.",
        "counter",
        load(&bus.deaf_peers),
    );
    out
}

/// Serves `GET /metrics` on `address`; returns the bound address.
pub async fn start<S: iggy_io::Storage + Clone + Send + Sync + 'static>(
    address: SocketAddr,
    node: Arc<crate::runtime::Views<S>>,
    bus: Arc<BusCounters>,
    port: Arc<PortCounters>,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(address).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = crate::accept::accept(&listener, "metrics").await;
            let (node, bus, port) = (node.clone(), bus.clone(), port.clone());
            tokio::spawn(async move {
                // The whole request head (a reply sent and the socket closed with some of it
                // unread resets the connection, and the client may lose the reply).
                let mut request = [0u8; 1024];
                let mut n = 0;
                let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
                while n < request.len() && !request[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                    match tokio::time::timeout_at(deadline, stream.read(&mut request[n..])).await {
                        Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
                        Ok(Ok(read)) => n += read,
                    }
                }
                if n == 0 {
                    return;
                }
                let line = String::from_utf8_lossy(&request[..n]);
                let response = if line.starts_with("GET /metrics ") {
                    let body = render(&node.metrics, &bus, &port);
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    )
                } else {
                    "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                        .to_string()
                };
                let _ = stream.write_all(response.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    Ok(bound)
}
