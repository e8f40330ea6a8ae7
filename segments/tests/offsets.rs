//! Consumer offsets: every crash state of a sequence of stores yields the last acknowledged
//! offset or the one in flight; damage is reported with the file, never read as 0.
#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    reason = "test code: a failed unwrap is a failed test; casts are of small test values"
)]

use std::path::Path;

use iggy_io::{EnumerationConfig, OpenMode, ReadOnly, SimStorage, Storage, WriteFile, enumerate};
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
    assert!(counts.points > 200, "{counts:?}");
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
/// never read as an offset; a later store of the same consumer writes over it. (Boot removes
/// leftovers: `segments/tests/durability.rs`.)
#[test]
fn leftover_temporary_files_are_reported_and_stored_over() {
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
    assert!(scan(&storage, dir()).unwrap().leftovers.is_empty());
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
