//! Writes a realistic node directory through the real crates: a metadata group with a snapshot
//! and a WAL, partitions with several segments each, published and unpublished tails, consumer
//! offsets. For tests, demos, fixtures and the README (`cargo run --example populate -p
//! iggy-recovery -- <dir>`). Deterministic for a given [`Options`].

use std::path::{Path, PathBuf};

use iggy_format::PrepareMeta;
use iggy_format::batch::{self, NewMessage};
use iggy_io::Storage;
use iggy_metadata::group::MetadataGroup;
use iggy_metadata::{Durability, Op, Retention};
use iggy_segments::offsets::ConsumerKind;
use iggy_segments::{Partition, Request};
use iggy_superblock::{Identity, VsrState};

use crate::boot::{METADATA_DIR, PARTITIONS_DIR, PartitionKey, partition_config};

/// What to write.
#[derive(Clone, Debug)]
pub struct Options {
    /// Partitions of the one topic (stream 1, topic 1).
    pub partitions: u32,
    /// Batches appended to each partition.
    pub batches: u64,
    /// Batches left unpublished at the end of each partition (written to the files, not synced
    /// and not covered by the frontier: boot discards them).
    pub unpublished_batches: u64,
    pub segment_size_bytes: u64,
    pub metadata_file_bytes: u64,
    /// Messages per batch are 1 to this many.
    pub max_messages: u32,
    /// Replicas in the cluster (the node is replica 0 of them).
    pub replicas: u8,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            partitions: 3,
            batches: 40,
            unpublished_batches: 3,
            segment_size_bytes: 16 << 10,
            metadata_file_bytes: 64 << 10,
            max_messages: 4,
            replicas: 3,
        }
    }
}

/// Writes a new node's genesis at the root of `storage`: the metadata group with `ops`
/// submitted (each must be accepted), then an empty partition for each of `partitions` (key and
/// segment size), behind a durable partitions directory, each starting in the view `first_view`
/// says. What a cluster's nodes all write alike before they first boot (the simulator), or a
/// benchmark's idle node.
pub fn genesis<S: Storage + Clone>(
    storage: &S,
    identity: Identity,
    config: &crate::BootConfig,
    ops: &[Op],
    partitions: &[(PartitionKey, u64)],
    first_view: FirstView,
) -> Result<(), String> {
    let error = |e: &dyn std::fmt::Display| e.to_string();
    let mut metadata = MetadataGroup::create(
        storage.clone(),
        Path::new(METADATA_DIR),
        identity,
        config.metadata_wal(),
    )
    .map_err(|e| error(&e))?;
    for op in ops {
        metadata
            .submit(op)
            .map_err(|e| error(&e))?
            .map_err(|e| error(&e))?;
    }
    let leader = |key: PartitionKey| {
        let topic = metadata
            .state()
            .streams
            .get(&key.stream)?
            .topics
            .get(&key.topic)?;
        let index = usize::try_from(key.partition.checked_sub(1)?).ok()?;
        topic.partitions.get(index).map(|p| p.leader)
    };
    let mut views = Vec::with_capacity(partitions.len());
    for &(key, _) in partitions {
        views.push(match first_view {
            FirstView::Zero => 0,
            FirstView::Leader => {
                u32::from(leader(key).ok_or_else(|| {
                    format!("partition {} is not in the metadata", key.dir_name())
                })?)
            }
        });
    }
    drop(metadata);
    storage.create_dir(PARTITIONS_DIR).map_err(|e| error(&e))?;
    // The partitions directory durable in the root before any partition relies on it.
    storage.sync_dir("").map_err(|e| error(&e))?;
    for (&(key, segment_size_bytes), view) in partitions.iter().zip(views) {
        let dir = Path::new(PARTITIONS_DIR).join(key.dir_name());
        let config = iggy_segments::Config {
            initial_view: view,
            ..config.partition(identity, key, Some(segment_size_bytes))
        };
        drop(Partition::create(storage.clone(), &dir, config).map_err(|e| error(&e))?);
    }
    Ok(())
}

/// The view a new partition's group starts in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FirstView {
    /// View 0 for every group: the metadata group's first primary leads them all (the
    /// article's cluster).
    Zero,
    /// The view whose primary (`view % replicas`) is the partition's leader in the metadata,
    /// which spreads primaries over the nodes ([`iggy_metadata::State`] chooses the leaders).
    Leader,
}

/// The node's identity: replica 0 of a 3-replica cluster.
#[must_use]
pub fn identity() -> Identity {
    identity_of(3)
}

/// The node's identity in a cluster of `replicas`.
#[must_use]
pub fn identity_of(replicas: u8) -> Identity {
    Identity {
        cluster: 0x1667,
        replica: 0,
        replica_count: replicas,
    }
}

/// A client batch for batch `index` of a partition: 1 to `max_messages` messages with payloads
/// that say where they belong.
#[must_use]
pub fn client_batch(key: PartitionKey, index: u64, max_messages: u32) -> Vec<u8> {
    let count = 1 + u32::try_from(index % u64::from(max_messages.max(1))).unwrap_or(0);
    let messages: Vec<NewMessage> = (0..count)
        .map(|i| NewMessage {
            id: u128::from(index) << 32 | u128::from(i),
            timestamp_delta: i,
            payload: format!(
                "partition {} batch {index} message {i}: {}",
                key.dir_name(),
                "x".repeat(usize::try_from(index * 37 % 400).unwrap_or(0))
            )
            .into_bytes(),
            user_headers: Vec::new(),
        })
        .collect();
    batch::encode(1_700_000_000_000_000 + index, &messages).unwrap_or_default()
}

/// Writes the node into `data_dir` (which must not hold one). Returns the partition keys.
pub fn populate<S: Storage + Clone>(
    storage: &S,
    data_dir: &Path,
    options: &Options,
) -> Result<Vec<PartitionKey>, String> {
    let error = |e: &dyn std::fmt::Display| e.to_string();
    if !data_dir.as_os_str().is_empty() && !storage.exists(data_dir).map_err(|e| error(&e))? {
        storage.create_dir(data_dir).map_err(|e| error(&e))?;
        // The data directory durable in its parent before anything inside relies on it.
        storage
            .sync_dir(data_dir.parent().unwrap_or(Path::new("")))
            .map_err(|e| error(&e))?;
    }
    // A writer of the node, like any other: it holds the node's lock while it writes.
    let _lock = crate::boot::lock_file(storage, data_dir).map_err(|e| error(&e))?;
    let wal = iggy_wal::Config {
        file_size_bytes: options.metadata_file_bytes,
        ..crate::boot::metadata_wal_config()
    };
    let identity = identity_of(options.replicas);
    let mut metadata =
        MetadataGroup::create(storage.clone(), &data_dir.join(METADATA_DIR), identity, wal)
            .map_err(|e| error(&e))?;
    let submit = |metadata: &mut MetadataGroup<S>, op: Op| -> Result<(), String> {
        metadata
            .submit(&op)
            .map_err(|e| error(&e))?
            .map(|_| ())
            .map_err(|e| error(&e))
    };
    submit(
        &mut metadata,
        Op::CreateStream {
            name: "orders".into(),
        },
    )?;
    submit(
        &mut metadata,
        Op::CreateTopic {
            stream: 1,
            name: "events".into(),
            partitions: options.partitions,
            durability: Durability::Replicated,
            segment_size_bytes: options.segment_size_bytes,
            retention: Retention {
                max_age_seconds: 7 * 24 * 3600,
                max_bytes: 0,
            },
            replication_factor: options.replicas.min(3),
        },
    )?;
    for client in 0..8u128 {
        submit(
            &mut metadata,
            Op::RegisterClient {
                client: client << 64 | 0xC11E,
                session: 1,
            },
        )?;
    }
    metadata.checkpoint().map_err(|e| error(&e))?;
    // A client's request: its prepare names the client and request, and its session keeps the
    // reply.
    let request = PrepareMeta {
        client: 0xC11E,
        request: 1,
        request_checksum: 0x00C1_1E00_0000_0001,
        now_us: 1_700_000_000_000_000,
        ..PrepareMeta::default()
    };
    metadata
        .submit_with(
            &Op::CreateConsumerGroup {
                stream: 1,
                topic: 1,
                name: "billing".into(),
            },
            &request,
        )
        .map_err(|e| error(&e))?
        .map_err(|e| error(&e))?;
    drop(metadata);

    let partitions_dir = data_dir.join(PARTITIONS_DIR);
    storage.create_dir(&partitions_dir).map_err(|e| error(&e))?;
    // The partitions directory durable before partitions are created in it.
    storage.sync_dir(data_dir).map_err(|e| error(&e))?;
    let mut keys = Vec::new();
    for partition in 1..=options.partitions {
        let key = PartitionKey {
            stream: 1,
            topic: 1,
            partition,
        };
        let dir: PathBuf = partitions_dir.join(key.dir_name());
        let config = partition_config(identity, key, Some(options.segment_size_bytes));
        let log = Partition::create(storage.clone(), &dir, config).map_err(|e| error(&e))?;
        let published = options.batches.saturating_sub(options.unpublished_batches);
        for index in 0..options.batches {
            let mut bytes = client_batch(key, index, options.max_messages);
            log.append(&mut bytes, 1_700_000_000_000_000 + index * 1_000)
                .map_err(|e| error(&e))?;
            if index + 1 == published {
                // Entries of the other kinds: a consumer offset store (committed, so stored
                // with its op) and a new primary's no-op.
                let store = Request::StoreOffset {
                    kind: ConsumerKind::Consumer,
                    id: 2,
                    offset: u64::from(partition) * 4,
                };
                let meta = PrepareMeta {
                    now_us: 1_700_000_000_000_000 + index * 1_000,
                    ..PrepareMeta::default()
                };
                let stored = log.prepare(store, &meta).map_err(|e| error(&e))?;
                log.prepare(Request::Noop, &meta).map_err(|e| error(&e))?;
                log.publish().map_err(|e| error(&e))?;
                log.commit(stored.appended.op).map_err(|e| error(&e))?;
                log.write_vsr(VsrState {
                    commit_max: stored.appended.op,
                    ..log.vsr_state()
                })
                .map_err(|e| error(&e))?;
            } else if index + 1 < published && index % 7 == 6 {
                log.publish().map_err(|e| error(&e))?;
            }
        }
        log.wal().write_buffered().map_err(|e| error(&e))?;
        let offsets = log.offsets();
        offsets
            .store(ConsumerKind::Consumer, 1, u64::from(partition) * 5)
            .map_err(|e| error(&e))?;
        offsets
            .store(ConsumerKind::Group, 1, u64::from(partition) * 3)
            .map_err(|e| error(&e))?;
        // Dropped without `close`: the head segment's index is never written, as after a crash.
        drop(log);
        keys.push(key);
    }
    Ok(keys)
}
