//! Work off the lanes. Repair served from disk: a replica asked for ops that left its ring emits
//! `Effect::ReadPrepares`; the node queues it here, off the group's lane, and hands out a bounded
//! number of reads a tick ([`crate::Node::take_reads`]). The host runs each ([`Read::run`], on a
//! thread of its own in the server, at once in the simulator) and sends what it returns.
//!
//! Invariants:
//! - what is sent is what the log holds, verified by each entry's header and body checksums
//!   (`Wal::read`): a rotten entry ends the answer with nothing of the range shipped;
//! - ops the log no longer holds (retention, a metadata checkpoint) are answered `RangeEvicted`
//!   naming the oldest op it holds, never silently skipped;
//! - a snapshot chunk (`Effect::ReadSnapshot`) of the metadata group is read from the live
//!   `snapshot.bin`, checked against the identity the group recorded when it wrote it; a
//!   group with no snapshot answers a zero `SnapshotChunk` (the asker repairs instead); a
//!   partition's is read from its transfer image (`crate::image`), built at the first chunk
//!   asked and kept while asked;
//! - a retention pass (`Node::maintain` queues one a second per retaining partition that serves
//!   no transfer) runs under the group's store lock, between two effects of its lane;
//! - a node holds at most [`READS_QUEUED_MAX`] reads waiting and starts at most
//!   [`READS_PER_TICK`] a tick, [`READS_IN_FLIGHT_MAX`] at once: a request beyond them is
//!   dropped (its replica asks again, or another peer).

use std::sync::{Arc, Mutex};

use iggy_io::Storage;
use iggy_segments::Partition;
use iggy_vsr::{Destination, From, Message, SnapshotRef};

use crate::image::Image;
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
/// group's log, and a partition retention changes, under its store's lock, between two effects
/// of its lane.
pub(crate) enum Source<S: Storage + Clone> {
    Partition(Arc<Partition<S>>),
    Locked(Arc<Mutex<Store<S>>>),
}

/// What a read does.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Task {
    /// Serves a peer.
    Serve(Wanted),
    /// Runs retention over the partition (`Partition::apply_retention`) at the host's clock.
    Retain {
        now_us: u64,
        retention: crate::store::Retention,
    },
}

/// A partition's image slot: the image it serves transfers from, once built.
pub(crate) type ImageSlot = Arc<Mutex<Option<Arc<Image>>>>;

/// A read handed out to be run on any thread: a peer's repair round or transfer chunk, or a
/// retention pass (the work a node does off its groups' lanes).
pub struct Read<S: Storage + Clone> {
    pub group: u128,
    /// The group's label (`partition 1.1.1`), for a refusal's log line.
    pub label: String,
    task: Task,
    source: Source<S>,
    image: Option<ImageSlot>,
}

/// What a read returns: the messages to send, and why it shipped nothing if it refused.
#[derive(Debug, Default)]
pub struct Served {
    pub group: u128,
    pub sends: Vec<(Destination, Message)>,
    /// The log failed to read or verify an entry of the range (file, offset, reason), or
    /// retention failed.
    pub refused: Option<String>,
    /// Segments a retention pass deleted.
    pub retained: usize,
}

impl<S: Storage + Clone> Read<S> {
    pub(crate) fn new(
        group: u128,
        label: String,
        task: Task,
        source: Source<S>,
        image: Option<ImageSlot>,
    ) -> Self {
        Self {
            group,
            label,
            task,
            source,
            image,
        }
    }

    /// Reads the range back and builds the answer (or runs the retention pass).
    #[must_use]
    pub fn run(self) -> Served {
        let served = match (&self.source, self.task) {
            (Source::Partition(partition), Task::Serve(wanted)) => match wanted.asked {
                Asked::SnapshotChunk { offset } => {
                    image_chunk(partition, self.image.as_ref(), &wanted, offset)
                }
                Asked::Prepares { .. } => answer(partition.wal(), &wanted),
            },
            (Source::Partition(_), Task::Retain { .. }) => Served {
                refused: Some("retention of an unlocked partition".into()),
                ..Served::default()
            },
            (Source::Locked(store), task) => {
                let store = store
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                match (&*store, task) {
                    (Store::Partition { partition, .. }, Task::Retain { now_us, retention }) => {
                        retain(partition, now_us, retention)
                    }
                    (Store::Metadata(_), Task::Retain { .. }) => Served::default(),
                    (Store::Metadata(group), Task::Serve(wanted)) => match wanted.asked {
                        Asked::SnapshotChunk { offset } => snapshot_chunk(group, &wanted, offset),
                        Asked::Prepares { .. } => answer(group.wal(), &wanted),
                    },
                    (Store::Partition { partition, .. }, Task::Serve(wanted)) => {
                        answer(partition.wal(), &wanted)
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

/// A retention pass over `partition` by its topic's `retention`.
fn retain<S: Storage + Clone>(
    partition: &Partition<S>,
    now_us: u64,
    retention: crate::store::Retention,
) -> Served {
    let max_age_us = (retention.max_age_seconds > 0)
        .then(|| retention.max_age_seconds.saturating_mul(1_000_000));
    let max_bytes = (retention.max_bytes > 0).then_some(retention.max_bytes);
    match partition.apply_retention_below(now_us, max_age_us, max_bytes, retention.floor) {
        Ok(retained) => Served {
            retained,
            ..Served::default()
        },
        Err(e) => Served {
            refused: Some(format!("retention: {e}")),
            ..Served::default()
        },
    }
}

/// A chunk of the image `partition` serves transfers from (built at the first chunk asked; a
/// zero `SnapshotChunk` when it has no settled segment to ship).
fn image_chunk<S: Storage + Clone>(
    partition: &Partition<S>,
    slot: Option<&ImageSlot>,
    wanted: &Wanted,
    offset: u64,
) -> Served {
    let to = Destination::Replica(wanted.to);
    let mut served = Served::default();
    let Some(slot) = slot else {
        served.refused = Some("a transfer chunk with no image slot".into());
        return served;
    };
    let mut slot = slot
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if slot.is_none() {
        match Image::build(partition) {
            Ok(image) => *slot = image.map(Arc::new),
            Err(e) => {
                served.refused = Some(format!("building a transfer image: {e}"));
                return served;
            }
        }
    }
    let (snapshot, offset, bytes) = match slot.as_ref() {
        None => (SnapshotRef::default(), 0, Vec::new()),
        Some(image) => match image.chunk(partition.wal().storage(), offset) {
            Ok(bytes) => (image.snapshot, offset, bytes),
            Err(e) => {
                // Built again at the next chunk asked (a segment gone since, a read that failed):
                // the asker sees a new image and starts over.
                *slot = None;
                served.refused = Some(format!("transfer chunk at {offset}: {e}"));
                return served;
            }
        },
    };
    served.sends.push((
        to,
        Message::SnapshotChunk {
            from: wanted.from,
            snapshot,
            offset,
            bytes,
        },
    ));
    served
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
        served.refused = Some("a snapshot chunk where prepares were asked".into());
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
