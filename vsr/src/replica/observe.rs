//! What a host, a checker or a test may read of a replica; nothing here changes anything.

use iggy_format::{Checksum, Header};

use super::{Phase, Replica, Status};
use crate::clients::Session;
use crate::effect::Durable;
use crate::replica::{Counters, Identity};

impl Replica {
    #[must_use]
    pub fn identity(&self) -> Identity {
        self.id
    }

    #[must_use]
    pub fn status(&self) -> Status {
        self.status
    }

    #[must_use]
    pub fn view(&self) -> u32 {
        self.view
    }

    #[must_use]
    pub fn log_view(&self) -> u32 {
        self.log_view
    }

    /// Whether this replica sent (or, as the new primary, counted) its `DoViewChange` for the
    /// view change it is in.
    #[must_use]
    pub fn sent_do_view_change(&self) -> bool {
        self.status == Status::ViewChange && self.view_change.dvc_sent_at.is_some()
    }

    /// The view whose start (truncate, publish, superblock) is under way, if any.
    #[must_use]
    pub fn starting_view(&self) -> Option<u32> {
        self.starting.as_ref().map(|s| s.view)
    }

    #[must_use]
    pub fn durable(&self) -> Durable {
        self.durable
    }

    /// The op this replica has executed through.
    #[must_use]
    pub fn commit_min(&self) -> u64 {
        self.commit_min
    }

    /// The highest op it knows to be committed.
    #[must_use]
    pub fn commit_max(&self) -> u64 {
        self.commit_max
    }

    /// The highest op of its log it knows the header of.
    #[must_use]
    pub fn head(&self) -> u64 {
        self.journal.head()
    }

    /// The last op its storage journaled.
    #[must_use]
    pub fn journaled_head(&self) -> u64 {
        self.journal.journaled_head
    }

    /// How many of its own cut entries it holds as candidates the chain may prove.
    #[must_use]
    pub fn candidates(&self) -> usize {
        self.candidates.len()
    }

    /// The header of op `op`, if this replica holds it.
    #[must_use]
    pub fn header(&self, op: u64) -> Option<Header> {
        self.journal.header(op).copied()
    }

    /// The checksum of op `op`, if known.
    #[must_use]
    pub fn checksum(&self, op: u64) -> Option<Checksum> {
        self.journal.checksum(op)
    }

    /// Whether it holds the body of op `op` (can serve it).
    #[must_use]
    pub fn holds(&self, op: u64) -> bool {
        self.journal.has_body(op)
    }

    #[must_use]
    pub fn is_primary(&self) -> bool {
        self.primary_of(self.view) == self.id.replica
    }

    /// Who leads the group as far as this replica knows: its view's primary while it is in
    /// normal status in a view that has started here; `None` during a view change or
    /// recovery (a client asking then is told to retry). The routing fact a node answers
    /// clients with.
    #[must_use]
    pub fn leader(&self) -> Option<u8> {
        matches!(self.phase(), Phase::Primary | Phase::Backup).then(|| self.primary_of(self.view))
    }

    /// Whether the replica booted without acknowledgments it may have given and has not yet
    /// earned them back: no quorum of a merge stands on its log (`docs/vsr.md`, "What survives
    /// the view change").
    #[must_use]
    pub fn forgot_acknowledgments(&self) -> bool {
        self.forgotten_view.is_some()
    }

    /// The primary of `view`.
    #[must_use]
    pub fn primary_of(&self, view: u32) -> u8 {
        u8::try_from(u64::from(view) % u64::from(self.id.replicas)).unwrap_or(0)
    }

    #[must_use]
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The ring's slots and body bytes.
    #[must_use]
    pub fn ring_size(&self) -> (usize, u64) {
        self.journal.size()
    }

    /// Changes how many body bytes the prepare ring keeps (`Config::ring_bytes_max`, at most
    /// `RING_BYTES_LIMIT`): a host sharing a memory budget among its groups. Only memory
    /// changes: what leaves the ring is read from the log when a peer asks.
    pub fn set_ring_bytes_max(&mut self, bytes: u64) {
        self.config.ring_bytes_max = bytes.min(crate::config::RING_BYTES_LIMIT);
    }

    /// The body bytes the prepare ring keeps at most.
    #[must_use]
    pub fn ring_bytes_max(&self) -> u64 {
        self.config.ring_bytes_max
    }

    /// Body bytes of the requests this replica admitted as its group's primary and has not
    /// committed: its pipeline's (kept in the prepare ring until committed) and those storage
    /// is preparing. At most [`crate::Config::pipeline_max`] of them, so this is cheap.
    #[must_use]
    pub fn pipeline_bytes(&self) -> u64 {
        let pipeline: u64 = self
            .pipeline
            .keys()
            .filter_map(|op| self.journal.slot(*op))
            .filter_map(|slot| slot.body.as_ref())
            .map(|body| body.len() as u64)
            .sum();
        let preparing: u64 = self
            .prepares_in_flight
            .iter()
            .map(|(_, _, _, _, bytes)| *bytes)
            .sum();
        pipeline + preparing
    }

    /// Lets this replica admit requests of at most `bytes` body bytes into its pipeline until
    /// told otherwise (`u64::MAX`, the default: no bound but `Config::pipeline_max`). A host
    /// sharing one byte budget among the groups it leads sets it before each request; a
    /// request larger is refused [`crate::ReplyStatus::NotAccepted`] (counted
    /// `request_pipeline_bytes`), as one past a full pipeline is.
    pub fn set_pipeline_room(&mut self, bytes: u64) {
        self.pipeline_room = bytes;
    }

    /// The client table's session of `client`, if it has one.
    #[must_use]
    pub fn session(&self, client: u128) -> Option<&Session> {
        self.clients.get(client)
    }

    /// A one-line status, in the article's form.
    #[must_use]
    pub fn describe(&self) -> String {
        format!(
            "status={} view={} log_view={} commit={}..{} head={} journaled={} primary={} \
             repair={}",
            self.status.name(),
            self.view,
            self.log_view,
            self.commit_min,
            self.commit_max,
            self.journal.head(),
            self.journal.journaled_head,
            self.is_primary(),
            if self.behind_ring() {
                "behind-ring"
            } else if self.needs_repair() {
                "yes"
            } else {
                "none"
            }
        )
    }
}
