//! Each sync of a partition's boot and retention shown to matter: what boot rebuilt or removed,
//! and what retention deleted, stays so through a power loss right after it (each test fails
//! when its sync is deleted: docs/testing.md, "Mutation testing"). Also: a partition's log moved
//! into another partition's directory refuses, and a report that has work is not clean.
#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    reason = "test code: a failed unwrap is a failed test; casts are of small test values"
)]

mod common;

use common::{client_batch, config, dir};
use iggy_io::{OpenMode, ReadOnly, ReadStorage, SimStorage, Storage, WriteFile};
use iggy_segments::{Config, FindingKind, Partition, PartitionError, check, index};
use iggy_wal::{Mode, WalError};

/// A partition with 30 batches over several segments, every one published and closed: its
/// indexes are written, but (derived data) not synced.
fn partition(storage: &SimStorage) {
    let partition = Partition::create(storage.clone(), dir(), config()).unwrap();
    for i in 0..30u64 {
        let mut batch = client_batch(i, 1 + (i % 3) as u32);
        partition.append(&mut batch, 1_000 + i).unwrap();
    }
    partition.publish().unwrap();
    partition
        .offsets()
        .store(iggy_segments::offsets::ConsumerKind::Consumer, 1, 7)
        .unwrap();
    partition.close().unwrap();
}

fn checked(storage: &SimStorage) -> iggy_segments::Report {
    check(&ReadOnly::new(storage.clone()), dir(), &config())
        .unwrap()
        .unwrap()
}

fn boot(storage: &SimStorage, mode: Mode) -> iggy_segments::Report {
    let (_, report) = Partition::open(storage.clone(), dir(), config(), mode)
        .unwrap()
        .unwrap();
    report
}

/// Indexes boot rebuilt are synced, and their names: a power loss right after finds them.
#[test]
fn indexes_boot_rebuilt_survive_a_power_loss() {
    let storage = SimStorage::new(1);
    partition(&storage);
    storage.power_loss_durable_only();
    let before = checked(&storage);
    assert!(!before.is_clean(), "the indexes were never synced");
    let rebuilt = before
        .findings
        .iter()
        .filter(|f| matches!(f.kind, FindingKind::IndexRebuild { .. }))
        .count();
    assert!(rebuilt >= 3, "{before:?}");
    boot(&storage, Mode::Open);
    storage.power_loss_durable_only();
    assert!(checked(&storage).is_clean(), "{:?}", checked(&storage));
}

/// A repair leaves a partition clean through a power loss: the indexes it found in order (in
/// the page cache only, written by the process that crashed) are synced too.
#[test]
fn a_repaired_partition_is_clean_after_a_power_loss() {
    let storage = SimStorage::new(2);
    partition(&storage);
    storage.crash_process();
    assert!(checked(&storage).is_clean());
    boot(&storage, Mode::Repair);
    storage.power_loss_durable_only();
    assert!(checked(&storage).is_clean(), "{:?}", checked(&storage));
}

/// What boot swept (an orphan index, a staged file, an offset store's temp file) stays gone.
#[test]
fn leftovers_boot_removed_stay_removed() {
    let storage = SimStorage::new(3);
    partition(&storage);
    // Everything durable first (the repair syncs the indexes close wrote).
    boot(&storage, Mode::Repair);
    let orphan = dir().join(index::file_name(999_999));
    let staging = dir().join("00000000000000999999.log.staging");
    let temp = dir().join("offsets/consumer.0000000009.tmp");
    for path in [&orphan, &staging, &temp] {
        let file = storage.open(path, OpenMode::CreateNew).unwrap();
        file.write_all_at(0, b"left over").unwrap();
        file.sync_data().unwrap();
    }
    storage.sync_dir(dir()).unwrap();
    storage.sync_dir(dir().join("offsets")).unwrap();
    let before = checked(&storage);
    assert_eq!(before.findings.len(), 3, "{before:?}");
    boot(&storage, Mode::Open);
    storage.power_loss_durable_only();
    let after = checked(&storage);
    assert!(after.is_clean(), "{after:?}");
    for path in [&orphan, &staging, &temp] {
        assert!(!storage.exists(path).unwrap(), "{}", path.display());
    }
}

/// Retention leaves nothing for the next boot, even through a power loss right after it: the
/// deleted segments' indexes are gone durably too.
#[test]
fn retention_leaves_nothing_behind_after_a_power_loss() {
    let storage = SimStorage::new(4);
    partition(&storage);
    boot(&storage, Mode::Repair);
    let (partition, _) = Partition::open(storage.clone(), dir(), config(), Mode::Repair)
        .unwrap()
        .unwrap();
    let deleted = partition.apply_retention(0, None, Some(8_000)).unwrap();
    assert!(deleted > 0);
    drop(partition);
    storage.power_loss_durable_only();
    let after = checked(&storage);
    assert!(after.is_clean(), "{after:?}");
}

/// A partition's log (its frontier) put in another partition's directory: boot refuses it as
/// another group's, never reads its segments as this partition's.
#[test]
fn another_partitions_log_refuses_as_another_group() {
    let storage = SimStorage::new(5);
    partition(&storage);
    let other = std::path::Path::new("other");
    let other_config = Config {
        group: config().group + 1,
        ..config()
    };
    let log = Partition::create(storage.clone(), other, other_config).unwrap();
    let mut batch = client_batch(1, 1);
    log.append(&mut batch, 5).unwrap();
    log.close().unwrap();
    let frontier = storage.read_all(other.join("frontier")).unwrap();
    let file = storage
        .open(dir().join("frontier"), OpenMode::Existing)
        .unwrap();
    file.write_all_at(0, &frontier).unwrap();
    file.sync_data().unwrap();
    let refused = Partition::open(storage.clone(), dir(), config(), Mode::Open).unwrap_err();
    assert!(
        matches!(&refused, PartitionError::Wal(e) if matches!(**e, WalError::GroupMismatch { .. })),
        "{refused}"
    );
    assert!(matches!(
        check(&ReadOnly::new(storage), dir(), &config()),
        Err(PartitionError::Wal(_))
    ));
}
