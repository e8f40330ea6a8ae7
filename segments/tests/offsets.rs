//! Consumer offsets: every crash state of a sequence of stores yields the last acknowledged
//! offset or the one in flight; damage is reported with the file, never read as 0.
#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    reason = "test code: a failed unwrap is a failed test; casts are of small test values"
)]

use std::path::Path;

use iggy_io::{
    EnumerationConfig, OpenMode, ReadFile, ReadOnly, ReadStorage, SimStorage, Storage, WriteFile,
    enumerate,
};
use iggy_segments::offsets::{
    self, ConsumerKind, ConsumerOffset, OffsetError, OffsetStore, load, scan,
};
use proptest::prelude::*;

fn dir() -> &'static Path {
    Path::new("partition/offsets")
}

fn partition() -> SimStorage {
    let storage = SimStorage::recording(1);
    storage.create_dir("partition").unwrap();
    storage.sync_dir("").unwrap();
    storage
}

#[test]
fn every_crash_state_holds_the_acknowledged_or_the_in_flight_offset() {
    let storage = partition();
    let store = OffsetStore::new(storage.clone(), dir());
    for round in 1..=20u64 {
        for (kind, id) in [(ConsumerKind::Consumer, 1), (ConsumerKind::Group, 7)] {
            storage.mark(format!("storing {kind:?} {id} {}", round * 10));
            store.store(kind, id, round * 10).unwrap();
            storage.mark(format!("stored {kind:?} {id} {}", round * 10));
        }
    }
    let trace = storage.trace();
    let mut check_crash = |crash: &iggy_io::CrashState<'_>| {
        for (kind, id) in [(ConsumerKind::Consumer, 1u32), (ConsumerKind::Group, 7)] {
            let tag = format!("{kind:?} {id} ");
            let last = |phase: &str| {
                crash.marks.iter().rev().find_map(|m| {
                    m.strip_prefix(phase)?
                        .strip_prefix(&tag)?
                        .parse::<u64>()
                        .ok()
                })
            };
            let acknowledged = last("stored ");
            let in_flight = last("storing ");
            let found = load(&ReadOnly::new(crash.storage.clone()), dir(), kind, id)
                .map_err(|e| format!("{kind:?} {id}: {e}"))?
                .map(|o| o.offset);
            let ok = found == acknowledged || (found.is_some() && found == in_flight);
            if !ok {
                return Err(format!(
                    "{kind:?} {id}: found {found:?}, acknowledged {acknowledged:?}, in flight {in_flight:?}"
                ));
            }
        }
        Ok(())
    };
    // Both models of directory changes: in order (ext4, xfs), and any subset (where every
    // directory sync shows).
    let mut counts = iggy_io::Enumeration::default();
    for dir_order in [iggy_io::DirOrder::Ordered, iggy_io::DirOrder::Unordered] {
        let config = EnumerationConfig {
            dir_order,
            ..EnumerationConfig::default()
        };
        counts = enumerate(&trace, &config, &mut check_crash)
            .unwrap_or_else(|failure| panic!("{dir_order:?}: {failure}"));
    }
    // Each store after a file's first is one write and one sync in place, so the 40 stores
    // give about a hundred crash points; fewer would mean the enumeration stopped short.
    assert!(counts.points > 80, "{counts:?}");
}

#[test]
fn damage_is_reported_with_the_file_never_read_as_zero() {
    let storage = partition();
    let store = OffsetStore::new(storage.clone(), dir());
    store.store(ConsumerKind::Consumer, 1, 500).unwrap();
    store.store(ConsumerKind::Consumer, 2, 600).unwrap();
    let file = dir().join("consumer.0000000001");

    storage.rot(&file, 33, 0x01).unwrap();
    match load(&storage, dir(), ConsumerKind::Consumer, 1) {
        Err(OffsetError::Corrupt { file: named, .. }) => assert_eq!(named, file),
        other => panic!("{other:?}"),
    }
    let scanned = scan(&storage, dir()).unwrap();
    assert_eq!(
        scanned.offsets.len(),
        1,
        "the healthy consumer is still read"
    );
    assert_eq!(scanned.damaged.len(), 1);

    // A file cut short (a device that tore inside a sector, or a truncation).
    storage
        .open(&file, OpenMode::Existing)
        .unwrap()
        .set_len(40)
        .unwrap();
    assert!(matches!(
        load(&storage, dir(), ConsumerKind::Consumer, 1),
        Err(OffsetError::Corrupt { .. })
    ));

    // Storing again replaces the damaged file.
    assert_eq!(
        store
            .store(ConsumerKind::Consumer, 1, 700)
            .unwrap()
            .sequence,
        1
    );
    assert_eq!(
        load(&storage, dir(), ConsumerKind::Consumer, 1)
            .unwrap()
            .unwrap()
            .offset,
        700
    );
}

#[test]
fn a_file_under_another_consumers_name_is_refused() {
    let storage = partition();
    let store = OffsetStore::new(storage.clone(), dir());
    store.store(ConsumerKind::Consumer, 1, 500).unwrap();
    storage
        .rename(
            dir().join("consumer.0000000001"),
            dir().join("group.0000000001"),
        )
        .unwrap();
    assert!(matches!(
        load(&storage, dir(), ConsumerKind::Group, 1),
        Err(OffsetError::WrongOwner { .. })
    ));
}

/// A leftover temporary file (a crash before a store's rename) is reported by a scan and
/// never read as an offset, and a later store of the same consumer goes on beside it. (Boot
/// removes leftovers: `segments/tests/durability.rs`.)
#[test]
fn leftover_temporary_files_are_reported_and_never_read() {
    let storage = partition();
    let store = OffsetStore::new(storage.clone(), dir());
    store.store(ConsumerKind::Group, 3, 9).unwrap();
    let leftover = storage
        .open(dir().join("group.0000000003.tmp"), OpenMode::CreateNew)
        .unwrap();
    leftover.write_all_at(0, b"half").unwrap();
    let scanned = scan(&storage, dir()).unwrap();
    assert_eq!(scanned.leftovers, vec![dir().join("group.0000000003.tmp")]);
    assert_eq!(scanned.offsets.len(), 1);
    assert_eq!(store.store(ConsumerKind::Group, 3, 10).unwrap().sequence, 2);
    let scanned = scan(&storage, dir()).unwrap();
    assert_eq!(scanned.offsets.len(), 1);
    assert_eq!(scanned.offsets[0].offset, 10);
}

/// Stores alternate between a file's two slots: a slot torn or rotten beside a good one reads
/// as the good one (the store in flight when a crash tore it had not returned), and the next
/// store writes over the bad slot, never over the good.
#[test]
fn a_torn_newest_slot_reads_as_the_one_before_and_is_stored_over() {
    let storage = partition();
    let store = OffsetStore::new(storage.clone(), dir());
    let file = dir().join("consumer.0000000001");
    for (n, offset) in [100u64, 200, 300].into_iter().enumerate() {
        store.store(ConsumerKind::Consumer, 1, offset).unwrap();
        let size = storage.open_read(&file).unwrap().len().unwrap();
        assert_eq!(size, offsets::FILE_SIZE as u64, "after store {n}");
    }
    // Stores 1 and 3 are in slot 0 (the file's first store, then in turn), store 2 in slot 1.
    let newest = load(&storage, dir(), ConsumerKind::Consumer, 1)
        .unwrap()
        .unwrap();
    assert_eq!((newest.offset, newest.sequence), (300, 3));
    storage.rot(&file, 40, 0x10).unwrap();
    let older = load(&storage, dir(), ConsumerKind::Consumer, 1)
        .unwrap()
        .unwrap();
    assert_eq!((older.offset, older.sequence), (200, 2));
    let scanned = scan(&storage, dir()).unwrap();
    assert_eq!(scanned.damaged_slots.len(), 1, "{scanned:?}");
    assert_eq!(scanned.damaged_slots[0].slot, 0);
    assert_eq!(scanned.damaged_slots[0].kept, older);
    // The next store goes into slot 0 (not slot 1, which holds the only good record).
    store.store(ConsumerKind::Consumer, 1, 400).unwrap();
    storage
        .rot(&file, offsets::RECORD_SIZE as u64 + 40, 0x10)
        .unwrap();
    let stored = load(&storage, dir(), ConsumerKind::Consumer, 1)
        .unwrap()
        .unwrap();
    assert_eq!((stored.offset, stored.sequence), (400, 3));
    // Both slots bad: refused with both reasons, never read as 0.
    storage.rot(&file, 40, 0x10).unwrap();
    match load(&storage, dir(), ConsumerKind::Consumer, 1) {
        Err(OffsetError::Corrupt { reason, .. }) => {
            assert!(
                reason.contains("slot 0") && reason.contains("slot 1"),
                "{reason}"
            );
        }
        other => panic!("{other:?}"),
    }
}

/// A file of version 2 (one 64-byte record, as stores before two slots wrote it) is read as it
/// is, and its next store replaces it with a file of two slots that goes on from its sequence.
#[test]
fn a_one_record_file_of_version_two_is_read_and_replaced_by_two_slots() {
    let storage = partition();
    let store = OffsetStore::new(storage.clone(), dir());
    store.store(ConsumerKind::Group, 5, 1).unwrap();
    let file = dir().join("group.0000000005");
    let record = ConsumerOffset {
        kind: ConsumerKind::Group,
        id: 5,
        offset: 777,
        sequence: 9,
        op: 41,
    };
    let mut legacy = offsets::encode(&record);
    legacy[24..26].copy_from_slice(&offsets::LEGACY_VERSION.to_le_bytes());
    let checksum = iggy_format::checksum::checksum(&legacy[16..]);
    legacy[..16].copy_from_slice(&checksum.to_le_bytes());
    let handle = storage.open(&file, OpenMode::Existing).unwrap();
    handle.set_len(0).unwrap();
    handle.write_all_at(0, &legacy).unwrap();
    drop(handle);
    assert_eq!(
        load(&storage, dir(), ConsumerKind::Group, 5).unwrap(),
        Some(record)
    );
    let next = store.store(ConsumerKind::Group, 5, 800).unwrap();
    assert_eq!(next.sequence, 10);
    let size = storage.open_read(&file).unwrap().len().unwrap();
    assert_eq!(size, offsets::FILE_SIZE as u64);
    assert_eq!(
        load(&storage, dir(), ConsumerKind::Group, 5).unwrap(),
        Some(next)
    );
}

proptest! {
    #[test]
    fn encode_decode_round_trip(group in any::<bool>(), id in any::<u32>(), offset in any::<u64>(), sequence in any::<u64>()) {
        let kind = if group { ConsumerKind::Group } else { ConsumerKind::Consumer };
        let record = ConsumerOffset { kind, id, offset, sequence, op: sequence ^ 0x55 };
        let bytes = offsets::encode(&record);
        prop_assert_eq!(offsets::decode(Path::new("f"), &bytes), Ok(record));
        for bit in [0usize, 130, 200, 260, 400, 511] {
            let mut damaged = bytes;
            damaged[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(offsets::decode(Path::new("f"), &damaged).is_err());
        }
    }
}
