//! Shared helpers for the partition tests.
#![allow(dead_code, reason = "each test file uses a subset")]

use std::path::Path;

use iggy_format::batch::{self, NewMessage};
use iggy_io::Storage;
use iggy_segments::{Config, Partition, StoredBatch};
use iggy_superblock::Identity;

pub const GROUP: u128 = 0x9A;
pub const PARTITION: u64 = 3;

pub fn identity() -> Identity {
    Identity {
        cluster: 1,
        replica: 0,
        replica_count: 3,
    }
}

/// Small segments and a small index interval, so a short workload rotates and indexes a lot.
pub fn config() -> Config {
    Config {
        segment_size_bytes: 8192,
        index_interval_bytes: 1024,
        ..Config::new(GROUP, PARTITION, identity())
    }
}

pub fn dir() -> &'static Path {
    Path::new("p")
}

/// A client batch of `count` messages whose payloads derive from `seed`.
pub fn client_batch(seed: u64, count: u32) -> Vec<u8> {
    let messages: Vec<NewMessage> = (0..count)
        .map(|i| NewMessage {
            id: u128::from(seed) << 32 | u128::from(i),
            timestamp_delta: i,
            payload: (0..(40 + (seed * 7 + u64::from(i) * 13) % 300))
                .map(|b| (b as u8) ^ (seed as u8))
                .collect(),
            user_headers: Vec::new(),
        })
        .collect();
    batch::encode(seed, &messages).expect("a valid batch")
}

/// Every published batch from the first retained offset.
pub fn read_all<S: Storage + Clone>(partition: &Partition<S>) -> Vec<StoredBatch> {
    partition
        .read(partition.first_offset(), u64::MAX)
        .expect("read")
}

/// The bytes of every segment of `source` (its entries, without the preallocated tail), oldest
/// first, as a leader sends them in a state transfer.
pub fn segment_bytes<S: Storage + Clone>(
    storage: &S,
    source: &Partition<S>,
) -> Vec<(u64, Vec<u8>)> {
    source
        .segments()
        .iter()
        .map(|s| {
            let file = storage.open_read(&s.path).expect("open a segment");
            let mut bytes = vec![0u8; usize::try_from(s.bytes).expect("segment size")];
            iggy_io::ReadFile::read_exact_at(&file, 0, &mut bytes).expect("read a segment");
            (s.start_offset, bytes)
        })
        .collect()
}
