//! A partition under faults and concurrency: a failed sync poisons its WAL and no batch is
//! acknowledged that was not made durable; appenders on many threads, each waiting on its own
//! batch, get continuous offsets and every acknowledged batch survives a power loss; a read that
//! meets a rotten batch says where.
#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    reason = "test code: a failed unwrap is a failed test; casts are of small test values"
)]

mod common;

use std::sync::{Arc, Mutex};

use common::{client_batch, config, dir, read_all};
use iggy_io::{Fault, SimStorage};
use iggy_segments::{Partition, PartitionError};
use iggy_wal::{Mode, Naming, WalError};

fn open(storage: &SimStorage) -> Partition<SimStorage> {
    Partition::open(storage.clone(), dir(), config(), Mode::Open)
        .unwrap()
        .unwrap()
        .0
}

#[test]
fn a_failed_sync_poisons_the_partition_and_boot_keeps_what_was_published() {
    let storage = SimStorage::new(51);
    let partition = Partition::create(storage.clone(), dir(), config()).unwrap();
    for i in 0..5u64 {
        partition.append(&mut client_batch(i, 2), i).unwrap();
    }
    partition.publish().unwrap();
    let published = read_all(&partition);
    partition.append(&mut client_batch(5, 2), 5).unwrap();
    // The frontier's sync: every publication makes one (a small one carries its entries there
    // and syncs nothing else).
    storage
        .arm(dir().join("frontier"), Fault::SyncError)
        .unwrap();
    let failed = partition.publish().unwrap_err();
    assert!(
        matches!(failed, PartitionError::Wal(ref e) if matches!(**e, WalError::Io(_))),
        "{failed:?}"
    );
    // Poisoned: nothing more is accepted until the partition is reopened.
    let refused = partition.append(&mut client_batch(6, 2), 6).unwrap_err();
    assert!(
        matches!(refused, PartitionError::Wal(ref e) if matches!(**e, WalError::Poisoned { .. })),
        "{refused:?}"
    );
    assert!(partition.publish().is_err());
    drop(partition);
    storage.power_loss();
    let partition = open(&storage);
    let after = read_all(&partition);
    assert_eq!(after[..published.len()], published[..]);
    assert!(after.len() <= published.len() + 1);
    // The partition continues from what boot kept.
    let appended = partition.append(&mut client_batch(7, 1), 7).unwrap();
    assert_eq!(appended.base_offset, after.last().unwrap().next_offset());
}

#[test]
fn concurrent_appenders_each_waiting_on_their_batch_keep_every_acknowledged_batch() {
    let storage = SimStorage::new(52);
    let partition = Arc::new(Partition::create(storage.clone(), dir(), config()).unwrap());
    let acknowledged = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..8u64)
        .map(|thread| {
            let partition = Arc::clone(&partition);
            let acknowledged = Arc::clone(&acknowledged);
            std::thread::spawn(move || {
                for i in 0..12u64 {
                    let mut batch = client_batch(thread * 100 + i, 1 + (i % 3) as u32);
                    let appended = partition.append(&mut batch, 1_000 + i).unwrap();
                    partition.wait_published(appended.op).unwrap();
                    acknowledged
                        .lock()
                        .unwrap()
                        .push((appended.base_offset, batch));
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let acknowledged = Arc::try_unwrap(acknowledged).unwrap().into_inner().unwrap();
    assert_eq!(acknowledged.len(), 96);
    drop(partition);
    storage.power_loss();
    let partition = open(&storage);
    let stored = read_all(&partition);
    // Offsets are continuous and every acknowledged batch is there, byte for byte.
    for pair in stored.windows(2) {
        assert_eq!(pair[0].next_offset(), pair[1].header.base_offset);
    }
    for (offset, bytes) in &acknowledged {
        let found = stored
            .iter()
            .find(|b| b.header.base_offset == *offset)
            .unwrap();
        assert_eq!(&found.bytes, bytes, "offset {offset}");
    }
}

#[test]
fn a_read_that_meets_a_rotten_batch_names_file_and_offset() {
    let storage = SimStorage::new(53);
    let partition = Partition::create(storage.clone(), dir(), config()).unwrap();
    for i in 0..20u64 {
        partition.append(&mut client_batch(i, 3), i).unwrap();
    }
    partition.publish().unwrap();
    let segment = partition.segments()[0].clone();
    assert_eq!(
        Naming::ByKey.parse(segment.path.file_name().unwrap()),
        Some(0)
    );
    // Rot after boot verified it: the read path verifies every batch it returns.
    let first = read_all(&partition)[0].clone();
    let second_entry = 256 + first.bytes.len() as u64;
    storage
        .rot(&segment.path, second_entry + 300, 0x08)
        .unwrap();
    match partition.read(0, u64::MAX).unwrap_err() {
        PartitionError::Corrupt { file, offset, .. } => {
            assert_eq!(file, segment.path);
            assert_eq!(offset, second_entry);
        }
        other => panic!("{other:?}"),
    }
}

/// A read into one buffer (a poll's answer, `read_through_into`) holds behind what the buffer
/// held exactly the bodies a read of separate batches returns, with the same headers, from any
/// offset and byte limit; a read that meets a rotten batch leaves the buffer as it was.
#[test]
fn a_read_into_one_buffer_holds_what_a_read_of_separate_batches_returns() {
    let storage = SimStorage::new(54);
    let partition = Partition::create(storage.clone(), dir(), config()).unwrap();
    for i in 0..20u64 {
        partition.append(&mut client_batch(i, 3), i).unwrap();
    }
    partition.publish().unwrap();
    let through = partition.committed();
    for offset in [0, 1, 7, 30, 59, 60, 100] {
        for max in [1, 500, 4096, u64::MAX] {
            let separate = partition.read_through(offset, max, through).unwrap();
            let mut out = b"prefix".to_vec();
            let joined = partition
                .read_through_into(offset, max, through, &mut out)
                .unwrap();
            let bodies: Vec<u8> = separate.iter().flat_map(|b| b.bytes.clone()).collect();
            assert_eq!(&out[..6], b"prefix", "offset {offset}, max {max}");
            assert_eq!(out[6..], bodies[..], "offset {offset}, max {max}");
            let expected: Vec<_> = separate.iter().map(|b| (b.header, b.bytes.len())).collect();
            assert_eq!(joined, expected, "offset {offset}, max {max}");
        }
    }
    let segment = partition.segments()[0].clone();
    let first = read_all(&partition)[0].clone();
    storage
        .rot(&segment.path, 256 + first.bytes.len() as u64 + 300, 0x08)
        .unwrap();
    let mut out = b"prefix".to_vec();
    assert!(matches!(
        partition.read_through_into(0, u64::MAX, through, &mut out),
        Err(PartitionError::Corrupt { .. })
    ));
    assert_eq!(out, b"prefix", "a failed read leaves the buffer as it was");
}
