//! Repair served from disk: a replica asked for ops that left its ring emits
//! `Effect::ReadPrepares`; the node queues it here, off the group's lane, and hands out a bounded
//! number of reads a tick ([`crate::Node::take_reads`]). The host runs each ([`Read::run`], on a
//! thread of its own in the server, at once in the simulator) and sends what it returns.
//!
//! Invariants:
//! - what is sent is what the log holds, verified by each entry's header and body checksums
//!   (`Wal::read`): a rotten entry ends the answer with nothing of the range shipped;
//! - ops the log no longer holds (retention, a metadata checkpoint) are answered `RangeEvicted`
//!   naming the oldest op it holds, never silently skipped;
//! - a snapshot chunk (`Effect::ReadSnapshot`, the metadata group's transfer) is read from the
//!   live `snapshot.bin`, checked against the identity the group recorded when it wrote it; a
//!   group with no snapshot answers a zero `SnapshotChunk` (the asker repairs instead);
//! - a node holds at most [`READS_QUEUED_MAX`] reads waiting and starts at most
//!   [`READS_PER_TICK`] a tick, [`READS_IN_FLIGHT_MAX`] at once: a request beyond them is
//!   dropped (its replica asks again, or another peer).

use std::sync::{Arc, Mutex};

use iggy_io::Storage;
use iggy_segments::Partition;
use iggy_vsr::{Destination, From, Message, SnapshotRef};

use crate::store::Store;

/// Reads a node starts a tick (each at most a repair round: 128 prepares).
pub const READS_PER_TICK: usize = 4;
/// Reads a node has handed out and not heard back of.
pub const READS_IN_FLIGHT_MAX: usize = 8;
/// Reads waiting to start; a request beyond is dropped.
pub const READS_QUEUED_MAX: usize = 256;

/// One peer's repair round to read back from a group's log, or a chunk of its snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Wanted {
    pub group: u128,
    pub to: u8,
    pub from: From,
    pub asked: Asked,
}

/// What a peer asked to be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Asked {
    Prepares { first: u64, last: u64 },
    SnapshotChunk { offset: u64 },
}

/// Where a read reads: a partition needs no lock (it synchronizes its own log); the metadata
/// group's log is read under its store's lock, between two effects of its lane.
pub(crate) enum Source<S: Storage + Clone> {
    Partition(Arc<Partition<S>>),
    Metadata(Arc<Mutex<Store<S>>>),
}

/// A read handed out to be run on any thread.
pub struct Read<S: Storage + Clone> {
    pub group: u128,
    /// The group's label (`partition 1.1.1`), for a refusal's log line.
    pub label: String,
    wanted: Wanted,
    source: Source<S>,
}

/// What a read returns: the messages to send, and why it shipped nothing if it refused.
#[derive(Debug, Default)]
pub struct Served {
    pub group: u128,
    pub sends: Vec<(Destination, Message)>,
    /// The log failed to read or verify an entry of the range (file, offset, reason).
    pub refused: Option<String>,
}

impl<S: Storage + Clone> Read<S> {
    pub(crate) fn new(group: u128, label: String, wanted: Wanted, source: Source<S>) -> Self {
        Self {
            group,
            label,
            wanted,
            source,
        }
    }

    /// Reads the range back and builds the answer.
    #[must_use]
    pub fn run(self) -> Served {
        let served = match &self.source {
            Source::Partition(partition) => answer(partition.wal(), &self.wanted),
            Source::Metadata(store) => {
                let store = store
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                match (&*store, self.wanted.asked) {
                    (Store::Metadata(group), Asked::SnapshotChunk { offset }) => {
                        snapshot_chunk(group, &self.wanted, offset)
                    }
                    (Store::Metadata(group), _) => answer(group.wal(), &self.wanted),
                    (Store::Partition { partition, .. }, _) => {
                        answer(partition.wal(), &self.wanted)
                    }
                }
            }
        };
        Served {
            group: self.group,
            ..served
        }
    }
}

/// A chunk of the metadata group's live snapshot (a zero `SnapshotChunk`: it has none).
fn snapshot_chunk<S: Storage + Clone>(
    group: &iggy_metadata::group::MetadataGroup<S>,
    wanted: &Wanted,
    offset: u64,
) -> Served {
    let to = Destination::Replica(wanted.to);
    let mut served = Served::default();
    let (snapshot, bytes) = match group.snapshot_chunk(offset) {
        Ok(Some((id, checksum, bytes))) => (
            SnapshotRef {
                op: id.checkpoint_op,
                checksum,
                trailer: id.trailer,
                length: id.length,
            },
            bytes,
        ),
        Ok(None) => (SnapshotRef::default(), Vec::new()),
        Err(e) => {
            served.refused = Some(format!("snapshot chunk at {offset}: {e}"));
            return served;
        }
    };
    served.sends.push((
        to,
        Message::SnapshotChunk {
            from: wanted.from,
            snapshot,
            offset: if snapshot.is_none() { 0 } else { offset },
            bytes,
        },
    ));
    served
}

fn answer<S: Storage + Clone>(wal: &iggy_wal::Wal<S>, wanted: &Wanted) -> Served {
    let to = Destination::Replica(wanted.to);
    let mut served = Served::default();
    let Asked::Prepares { first, last } = wanted.asked else {
        served.refused = Some("a snapshot chunk of a group with no snapshots".into());
        return served;
    };
    let oldest = wal.first_op();
    let mut first = first;
    if first < oldest {
        served.sends.push((
            to,
            Message::RangeEvicted {
                from: wanted.from,
                oldest,
            },
        ));
        first = oldest;
    }
    let last = last.min(wal.head().0);
    if first > last {
        return served;
    }
    match wal.read(first, last) {
        Ok(entries) => served.sends.extend(entries.into_iter().map(|entry| {
            (
                to,
                Message::Prepare {
                    header: entry.header,
                    body: entry.body,
                },
            )
        })),
        Err(e) => served.refused = Some(format!("ops {first}..={last}: {e}")),
    }
    served
}
