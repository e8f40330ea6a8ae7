//! What a replica asks its host to do, and what the host tells it back. Storage effects run on
//! one ordered lane per group, in the order the replica emitted them (truncate, then journal,
//! then publish, then the superblock that names a new log_view); each completes with an
//! [`Outcome`] the host hands to `Replica::on_completion`. Sends complete nothing, and neither
//! does a read of prepares or of a snapshot chunk to serve a peer from disk (it runs off the
//! lane).

use iggy_format::{Checksum, Header, PrepareMeta};

use crate::clients::Session;
use crate::message::{Message, SnapshotRef};

/// Names one effect, for its completion.
pub type EffectId = u64;

/// Where a message goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Destination {
    Replica(u8),
    Client(u128),
}

/// The replica's durable VSR state: what its superblock holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Durable {
    pub view: u32,
    pub log_view: u32,
    pub commit_max: u64,
    /// The incarnation of the group's first boot; 0 until that boot recorded it (a new group).
    pub incarnation: u64,
    /// The highest op this replica may acknowledge, raised ahead of what it journals (never
    /// lowered); [`ACK_BOUND_UNKNOWN`] when no bound was ever kept (`docs/vsr.md`, "The
    /// acknowledgment bound").
    pub ack_bound: u64,
}

/// A [`Durable::ack_bound`] that bounds nothing: the superblock predates the bound.
pub const ACK_BOUND_UNKNOWN: u64 = u64::MAX;

/// One thing for the host to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Send `message` (no completion: the network may lose it).
    Send { to: Destination, message: Message },
    /// Write `durable` to the superblock (both copies, synced).
    WriteSuperblock { id: EffectId, durable: Durable },
    /// The primary's prepare of a client's request: the host builds the entry at the head of
    /// the group's log (stamping it: a batch's offsets and timestamps, `meta.now_us` filled in
    /// from its clock), journals it, and returns it ([`Outcome::Prepared`]).
    Prepare {
        id: EffectId,
        meta: PrepareMeta,
        operation: u32,
        body: Vec<u8>,
    },
    /// Journal a prepare another replica built, byte for byte, as the next entry.
    Journal {
        id: EffectId,
        header: Header,
        body: Vec<u8>,
    },
    /// Drop every entry after `after`, durably.
    Truncate { id: EffectId, after: u64 },
    /// Make every journaled entry up to `through` durable.
    Publish { id: EffectId, through: u64 },
    /// Execute every journaled entry up to `through` ([`Outcome::Committed`] gives the replies).
    Commit { id: EffectId, through: u64 },
    /// Serve a peer's repair from disk: ops `first..=last` left the ring, so the host reads them
    /// back from the group's log (verified by their checksums) and sends each to replica `to` as
    /// a `Prepare`, byte for byte what was journaled, off the group's lane. Ops the log no longer
    /// holds (retention deleted them, or a checkpoint dropped them) are answered with
    /// `RangeEvicted` from `from`, naming the oldest op the log holds; an entry that fails its
    /// checksum ships nothing of the range (the peer asks again, elsewhere). No completion.
    ReadPrepares {
        to: u8,
        from: crate::message::From,
        first: u64,
        last: u64,
    },
    /// Serve a peer's snapshot transfer: the host reads at most `SNAPSHOT_CHUNK_BYTES_MAX`
    /// bytes of its current snapshot from `offset` and sends them to replica `to` as a
    /// `SnapshotChunk` from `from` (naming the snapshot; a zero one if it has none), off the
    /// group's lane. No completion.
    ReadSnapshot {
        to: u8,
        from: crate::message::From,
        offset: u64,
    },
    /// Stage a received chunk of `snapshot` (the host keeps one snapshot's staging file; a chunk
    /// of another snapshot starts it anew). Nothing live changes. [`Outcome::Done`], or
    /// [`Outcome::Refused`] for a chunk the staging refuses.
    WriteSnapshotChunk {
        id: EffectId,
        snapshot: SnapshotRef,
        offset: u64,
        bytes: Vec<u8>,
    },
    /// Install the staged `snapshot` whole: verify it, then make the group's storage the state
    /// at `snapshot.op` with an empty log after it (the superblock's checkpoint is the install's
    /// commit point). [`Outcome::Installed`] gives the client table the snapshot holds;
    /// [`Outcome::Refused`] leaves the group as it was (a staged file that does not verify).
    InstallSnapshot { id: EffectId, snapshot: SnapshotRef },
    /// The answer to the host's read `token` (`Replica::read`): `ready`, the replica has
    /// executed through a read index proved current, so what its storage holds now reflects
    /// every write acknowledged before the read was asked; not ready, refused (no primary, a
    /// view change, no answer in time): ask again, here or elsewhere. No completion.
    ReadBarrier { token: u64, ready: bool },
}

impl Effect {
    /// The effect's id, for those that complete.
    #[must_use]
    pub fn id(&self) -> Option<EffectId> {
        match self {
            Self::Send { .. }
            | Self::ReadPrepares { .. }
            | Self::ReadSnapshot { .. }
            | Self::ReadBarrier { .. } => None,
            Self::WriteSnapshotChunk { id, .. }
            | Self::InstallSnapshot { id, .. }
            | Self::WriteSuperblock { id, .. }
            | Self::Prepare { id, .. }
            | Self::Journal { id, .. }
            | Self::Truncate { id, .. }
            | Self::Publish { id, .. }
            | Self::Commit { id, .. } => Some(*id),
        }
    }

    /// The effect's name, for traces.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            Self::Send { .. } => "send",
            Self::WriteSuperblock { .. } => "write_superblock",
            Self::Prepare { .. } => "prepare",
            Self::Journal { .. } => "journal",
            Self::Truncate { .. } => "truncate",
            Self::Publish { .. } => "publish",
            Self::Commit { .. } => "commit",
            Self::ReadPrepares { .. } => "read_prepares",
            Self::ReadSnapshot { .. } => "read_snapshot",
            Self::WriteSnapshotChunk { .. } => "write_snapshot_chunk",
            Self::InstallSnapshot { .. } => "install_snapshot",
            Self::ReadBarrier { .. } => "read_barrier",
        }
    }
}

/// How a storage effect ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Done (superblock, journal, truncate, publish).
    Done,
    /// The prepare the host built and journaled.
    Prepared { header: Header, body: Vec<u8> },
    /// Executed: the reply bytes of each committed entry that came from a client, by op.
    Committed { replies: Vec<(u64, Vec<u8>)> },
    /// The host refused to prepare the request (its body is not a valid operation), or to stage
    /// or install a snapshot that does not verify; nothing was journaled or installed.
    Refused(String),
    /// A snapshot installed: the client table it holds (each client's last committed request
    /// and its reply).
    Installed { clients: Vec<(u128, Session)> },
    /// The storage failed: the replica stops (it stays silent until the host restarts it).
    Failed(String),
}

/// The checksum that names an entry: its header's.
#[must_use]
pub fn entry_checksum(header: &Header) -> Checksum {
    header.checksum()
}
