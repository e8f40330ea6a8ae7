//! The replica's timing and bounds. Every timeout is a count of 10 ms ticks, never randomised:
//! replicas that time out in the same tick ask for the same view with the same primary, so there
//! is no split vote to break.

/// One tick of the replica's clock, in milliseconds.
pub const TICK_MS: u64 = 10;

/// Most headers a `DoViewChange` or `StartView` carries (the uncommitted suffix).
pub const HEADERS_MAX: usize = 128;

/// Most prepares one repair round asks for.
pub const REPAIR_BATCH_MAX: u64 = 128;

/// A replica whose storage refused a journal write (no room: a full disk, no descriptor) hands
/// it storage again after this long (100 ms), not at once: each try costs a failed file creation.
pub const JOURNAL_RETRY_TICKS: u64 = 10;

/// The hard cap on the prepare ring's bytes.
pub const RING_BYTES_LIMIT: u64 = 256 << 20;

/// A replica's timing and bounds (the article's defaults; tests shorten nothing they rely on).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// A backup that hears no commit broadcast of its view's primary for this long starts a view
    /// change (5 s). Only a commit broadcast resets it, not a prepare.
    pub heartbeat_timeout_ticks: u64,
    /// The primary broadcasts its commit point this often, committed anything or not (500 ms).
    pub commit_broadcast_ticks: u64,
    /// The primary resends a prepare to a backup that has not acknowledged it after this long.
    pub prepare_retransmit_ticks: u64,
    /// `StartViewChange` and `DoViewChange` are resent this often while the view has not started.
    pub view_change_resend_ticks: u64,
    /// A view that has not started after this long moves to the next (5 s).
    pub view_change_timeout_ticks: u64,
    /// A restarted replica first asks who leads after this long (100 ms: the bus queues what it
    /// sends before a peer connects, and a late first probe kept a restarted node out of every
    /// quorum a second longer)...
    pub request_start_view_delay_ticks: u64,
    /// ...and asks again this often (1 s)...
    pub request_start_view_interval_ticks: u64,
    /// ...and after this many unanswered probes starts a view change offering its log.
    pub request_start_view_probes: u32,
    /// A backup missing prepares asks again (or another source) after this long.
    pub repair_retry_ticks: u64,
    /// Most client requests the primary has prepared but not committed.
    pub pipeline_max: usize,
    /// The prepare ring serving repair: at most this many entries...
    pub ring_entries_max: usize,
    /// ...and at most this many body bytes, whichever fills first (up to `RING_BYTES_LIMIT`).
    pub ring_bytes_max: u64,
    /// Sessions the replica's client table keeps (least recently used evicted first).
    pub clients_max: usize,
    /// The group's storage keeps snapshots (the metadata group's checkpoints): a replica behind
    /// every peer's log pulls one (`replica/transfer.rs`) instead of probing.
    pub snapshot_transfer: bool,
    /// A read waiting for its read index is refused after this long (2 s): the host asks again
    /// or elsewhere (`replica/read.rs`).
    pub read_timeout_ticks: u64,
    /// A replica of replicated durability publishes what it journaled this often, besides its
    /// host's publications (0, the default: only the host's). The server sets 100 ms: a crash
    /// then forgets at most that much of the log (`replica/ack_bound.rs`).
    pub publish_interval_ticks: u64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            heartbeat_timeout_ticks: 500,
            commit_broadcast_ticks: 50,
            prepare_retransmit_ticks: 20,
            view_change_resend_ticks: 50,
            view_change_timeout_ticks: 500,
            request_start_view_delay_ticks: 10,
            request_start_view_interval_ticks: 100,
            request_start_view_probes: 4,
            repair_retry_ticks: 20,
            pipeline_max: 64,
            ring_entries_max: 65_536,
            ring_bytes_max: 64 << 20,
            clients_max: 16_384,
            snapshot_transfer: false,
            read_timeout_ticks: 200,
            publish_interval_ticks: 0,
        }
    }
}

impl Config {
    /// The configuration with its bounds checked: the pipeline fits the view change's headers, the
    /// ring's bytes are within their cap.
    #[must_use]
    pub fn checked(self) -> Self {
        assert!(
            self.pipeline_max >= 1 && self.pipeline_max < HEADERS_MAX,
            "the pipeline must fit a DoViewChange's headers"
        );
        assert!(
            self.ring_bytes_max <= RING_BYTES_LIMIT,
            "ring bytes above the cap"
        );
        assert!(
            self.ring_entries_max > self.pipeline_max,
            "the ring holds the pipeline"
        );
        assert!(self.heartbeat_timeout_ticks > self.commit_broadcast_ticks);
        assert!(self.request_start_view_probes >= 1);
        self
    }
}

/// Replicas needed to commit (a majority).
#[must_use]
pub fn replication_quorum(replicas: u8) -> usize {
    usize::from(replicas) / 2 + 1
}

/// Replicas needed to start a view (a majority, counting the new primary).
#[must_use]
pub fn view_change_quorum(replicas: u8) -> usize {
    usize::from(replicas) / 2 + 1
}

/// Nacks that prove an op never committed: with that many replicas never having acknowledged it,
/// too few are left to have formed a replication quorum.
#[must_use]
pub fn nack_quorum(replicas: u8) -> usize {
    usize::from(replicas) - replication_quorum(replicas) + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quorums_of_the_article() {
        assert_eq!(replication_quorum(3), 2);
        assert_eq!(nack_quorum(3), 2);
        assert_eq!(view_change_quorum(3), 2);
        assert_eq!(replication_quorum(5), 3);
        assert_eq!(nack_quorum(5), 3);
        assert_eq!(replication_quorum(1), 1);
        assert_eq!(nack_quorum(1), 1);
        let _ = Config::default().checked();
    }
}
