//! What a booted group hands its replica: the superblock's durable state, the op storage
//! executed through (boot's commit point), the log's tail for the ring and the client table
//! storage kept; and a clean shutdown's record of the replica's commit point.

use iggy_format::Header;
use iggy_io::Storage;
use iggy_metadata::group::MetadataGroup;
use iggy_segments::Partition;
use iggy_superblock::VsrState;
use iggy_vsr::{Boot, Durable};

use crate::node::Group;
use crate::store::Store;

/// A log's head op, its checksum, and its tail of entries.
type Tail = (u64, u128, Vec<(Header, Vec<u8>)>);

/// The log's head, and the tail boot hands the replica: every entry above what storage executed
/// (at most a pipeline: boot's commit point is the one the head prepare names), read in bounded
/// batches. Nothing below is read back: the replica's ring starts empty there and a peer's
/// repair round below it is served from disk (`crate::serve`), so a boot reads a pipeline, not
/// a ring (25 groups' rings were 0.8 to 1.6 GB a boot, 1.6 to 28.8 s of a debug build).
fn entries_of<S: Storage + Clone>(wal: &iggy_wal::Wal<S>, applied: u64) -> Result<Tail, String> {
    let (head, head_checksum) = wal.head();
    let first = wal.first_op().max(applied + 1);
    let mut entries: Vec<(Header, Vec<u8>)> = Vec::new();
    let mut from = first;
    while from <= head {
        let to = head.min(from + 63);
        let batch = wal
            .read(from, to)
            .map_err(|e| format!("reading the journal back (ops {from}..={to}): {e}"))?;
        entries.extend(batch.into_iter().map(|e| (e.header, e.body)));
        from = to + 1;
    }
    Ok((head, head_checksum, entries))
}

pub(crate) fn durable_of(state: &VsrState) -> Durable {
    Durable {
        view: state.view,
        log_view: state.log_view,
        commit_max: state.commit_max,
        incarnation: state.incarnation,
        ack_bound: state.ack_bound,
    }
}

/// Writes the replica's commit point into its group's superblock (a clean shutdown's last word
/// on it: exact, where a boot otherwise raises the superblock's to what the log proves).
pub(crate) fn record_commit_point<S: Storage + Clone>(group: &mut Group<S>) -> Result<(), String> {
    let commit_max = group.replica.commit_max();
    let raise = |state: VsrState| VsrState {
        commit_max: state.commit_max.max(commit_max),
        ..state
    };
    match &mut *group.store() {
        Store::Metadata(group) => {
            let state = group.vsr_state();
            if state.commit_max < commit_max {
                group.write_vsr(raise(state)).map_err(|e| e.to_string())?;
            }
        }
        Store::Partition { partition, .. } => {
            let state = partition.vsr_state();
            if state.commit_max < commit_max {
                partition
                    .write_vsr(raise(state))
                    .map_err(|e| e.to_string())?;
            }
        }
    }
    Ok(())
}

pub(crate) fn metadata_boot<S: Storage + Clone>(
    group: &MetadataGroup<S>,
    incarnation: u64,
) -> Result<Boot, String> {
    let applied = group.applied_op();
    let (head, head_checksum, entries) = entries_of(group.wal(), applied)?;
    let clients = sessions(group.state());
    Ok(Boot {
        durable: durable_of(&group.vsr_state()),
        applied,
        head,
        head_checksum,
        entries,
        // Journaled and synced before it is acknowledged.
        forgot_acknowledged: false,
        forgotten_through: None,
        incarnation,
        clients,
    })
}

/// The metadata state machine's own client table, as a replica keeps it: each session's last
/// executed request and its reply.
pub(crate) fn sessions(state: &iggy_metadata::State) -> Vec<(u128, iggy_vsr::Session)> {
    state
        .clients
        .iter()
        // A session a client's request opened (one a node's own op registered has no op).
        .filter(|(_, s)| s.last_op != 0)
        .map(|(client, s)| {
            (
                *client,
                iggy_vsr::Session {
                    request: s.last_request,
                    op: s.last_op,
                    reply: s.reply.clone(),
                    request_checksum: s.request_checksum,
                },
            )
        })
        .collect()
}

/// The committed client sessions the booted `partition`'s log holds (through `applied`), as the
/// replica's client table takes them (handed over once: `Partition::take_sessions`).
pub(crate) fn partition_sessions<S: Storage + Clone>(
    partition: &Partition<S>,
    applied: u64,
) -> Vec<(u128, iggy_vsr::Session)> {
    partition
        .take_sessions()
        .into_iter()
        .filter(|s| s.op <= applied)
        .map(|s| {
            (
                s.client,
                iggy_vsr::Session {
                    request: s.request,
                    op: s.op,
                    reply: s.reply(),
                    request_checksum: s.request_checksum,
                },
            )
        })
        .collect()
}

pub(crate) fn partition_boot<S: Storage + Clone>(
    partition: &Partition<S>,
    persisted: bool,
    incarnation: u64,
) -> Result<Boot, String> {
    let durable = durable_of(&partition.vsr_state());
    let applied = partition.committed();
    let (head, head_checksum, entries) = entries_of(partition.wal(), applied)?;
    let clients = partition_sessions(partition, applied);
    // A partition rebuilt from its peers after damage lacks what its replica acknowledged
    // before, whatever its durability.
    let rebuilt = iggy_segments::rebuilt::read(partition.wal().storage(), partition.dir())
        .map_err(|e| e.to_string())?;
    Ok(Boot {
        durable,
        applied,
        head,
        head_checksum,
        entries,
        // Replicated durability acknowledges what the WAL queued; boot keeps only what it
        // published. Persisted publishes before it acknowledges.
        forgot_acknowledged: !persisted,
        forgotten_through: rebuilt.map(|m| m.forgotten_through),
        incarnation,
        clients,
    })
}
