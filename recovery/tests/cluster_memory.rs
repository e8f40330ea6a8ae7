//! A whole simulated cluster in one process: 3 nodes, each with its metadata group and 24
//! partitions at production file sizes (1 GiB segments, 64 MiB metadata WAL files), 100 MB of
//! messages prepared by each partition's primary and journaled by its two backups. `SimStorage`
//! holds what is written, not what is allocated or what happened, so the process stays well
//! under 1 GiB resident (the figure and the one before are in `docs/testing.md`).
//!
//! The only test in its binary: the resident size it reads is the whole process's.
#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    reason = "test code: a failed unwrap is a failed test; casts are of small test values"
)]

use std::path::PathBuf;

use iggy_format::PrepareMeta;
use iggy_format::batch::{self, NewMessage};
use iggy_io::{SimStorage, Storage};
use iggy_metadata::Op;
use iggy_metadata::group::MetadataGroup;
use iggy_recovery::{BootConfig, PartitionKey};
use iggy_segments::{Partition, Request};
use iggy_superblock::Identity;

const NODES: u8 = 3;
const PARTITIONS: u32 = 24;
const PAYLOAD_BYTES: u64 = 100_000_000;
const MESSAGE_BYTES: usize = 1000;
const MESSAGES_PER_BATCH: u32 = 250;

fn identity(replica: u8) -> Identity {
    Identity {
        cluster: 0xC1,
        replica,
        replica_count: NODES,
    }
}

fn batch(seed: u64) -> Vec<u8> {
    let messages: Vec<NewMessage> = (0..MESSAGES_PER_BATCH)
        .map(|i| NewMessage {
            id: u128::from(seed) << 32 | u128::from(i),
            timestamp_delta: i,
            payload: vec![(seed as u8) ^ (i as u8); MESSAGE_BYTES],
            user_headers: Vec::new(),
        })
        .collect();
    batch::encode(seed, &messages).unwrap()
}

struct Node {
    storage: SimStorage,
    metadata: MetadataGroup<SimStorage>,
    partitions: Vec<Partition<SimStorage>>,
}

#[test]
fn three_nodes_of_24_partitions_at_production_sizes_stay_under_a_gibibyte() {
    let boot = BootConfig::new(1);
    let keys: Vec<PartitionKey> = (1..=PARTITIONS)
        .map(|partition| PartitionKey {
            stream: 1,
            topic: 1,
            partition,
        })
        .collect();
    let mut nodes: Vec<Node> = (0..NODES)
        .map(|replica| {
            let storage = SimStorage::new(u64::from(replica));
            let metadata = MetadataGroup::create(
                storage.clone(),
                "metadata".as_ref(),
                identity(replica),
                boot.metadata_wal(),
            )
            .unwrap();
            storage.create_dir("partitions").unwrap();
            let partitions = keys
                .iter()
                .map(|key| {
                    let config = boot.partition(identity(replica), *key, None);
                    assert_eq!(config.segment_size_bytes, 1 << 30, "production segments");
                    let dir = PathBuf::from("partitions").join(key.dir_name());
                    Partition::create(storage.clone(), &dir, config).unwrap()
                })
                .collect();
            Node {
                storage,
                metadata,
                partitions,
            }
        })
        .collect();
    assert_eq!(boot.metadata_wal().file_size_bytes, 64 << 20);
    // The metadata: the primary prepares, the backups journal.
    let create = Op::CreateStream {
        name: "orders".into(),
    };
    let (header, body) = nodes[0]
        .metadata
        .prepare(&create, &PrepareMeta::default())
        .unwrap()
        .unwrap();
    for node in &mut nodes[1..] {
        node.metadata.journal(&header, &body).unwrap();
    }
    // The messages: partition p's primary is node p % 3.
    let mut written = 0u64;
    let mut seed = 0u64;
    while written < PAYLOAD_BYTES {
        for (index, _) in keys.iter().enumerate() {
            let primary = index % usize::from(NODES);
            let mut bytes = batch(seed);
            seed += 1;
            let meta = PrepareMeta {
                now_us: 1_000 + seed,
                replica: primary as u8,
                ..PrepareMeta::default()
            };
            let prepared = nodes[primary].partitions[index]
                .prepare(Request::Messages(&mut bytes), &meta)
                .unwrap();
            for (replica, node) in nodes.iter().enumerate() {
                if replica != primary {
                    node.partitions[index]
                        .journal(&prepared.header, &prepared.body)
                        .unwrap();
                }
            }
            written += u64::from(MESSAGES_PER_BATCH) * MESSAGE_BYTES as u64;
        }
        if seed.is_multiple_of(4 * u64::from(PARTITIONS)) {
            for node in &nodes {
                for partition in &node.partitions {
                    partition.publish().unwrap();
                }
            }
        }
    }
    for node in &nodes {
        for partition in &node.partitions {
            partition.publish().unwrap();
            assert_eq!(
                partition.next_offset(),
                nodes[0].partitions[0].next_offset()
            );
        }
    }
    let held: u64 = nodes.iter().map(|n| n.storage.memory_bytes()).sum();
    let (resident, peak) = iggy_io::resident_bytes().expect("/proc/self/status");
    eprintln!(
        "3 nodes x (metadata + {PARTITIONS} partitions), {written} payload bytes prepared: \
         SimStorage holds {held} bytes; resident {resident} bytes, peak {peak}"
    );
    // Each node holds every partition's log once: about the payload and the headers, three
    // times over, and nothing for the gigabytes allocated.
    assert!(
        held < 4 * PAYLOAD_BYTES,
        "SimStorage holds {held} bytes for 3 x {PAYLOAD_BYTES}"
    );
    assert!(peak < 1 << 30, "peak resident {peak} bytes");
}
