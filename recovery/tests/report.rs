//! The report's verdicts: an I/O error during a check is an operational failure (exit 8), not
//! a verdict about the data, and it names the group it happened in.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::path::Path;

use iggy_io::{Fault, ReadOnly, SimStorage};
use iggy_recovery::populate::{Options, populate};
use iggy_recovery::{BootConfig, Status, Verify, check, check_with, exit};

#[test]
fn an_io_error_during_the_check_exits_8_and_names_its_group() {
    let storage = SimStorage::new(3);
    let options = Options {
        partitions: 2,
        batches: 6,
        unpublished_batches: 0,
        segment_size_bytes: 4096,
        metadata_file_bytes: 8192,
        max_messages: 2,
        replicas: 3,
    };
    populate(&storage, Path::new(""), &options).unwrap();
    storage
        .arm("partitions/1.1.2/superblock", Fault::ReadError)
        .unwrap();
    let report = check(&ReadOnly::new(storage.clone()), Path::new(""), |_, _| {}).unwrap();
    assert_eq!(report.exit_code(), exit::USAGE_OR_IO, "{}", report.render());
    let failed: Vec<_> = report.groups.iter().filter(|g| g.io_error).collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].group, "partition 1.1.2");
    // The other groups were still checked.
    assert!(
        report
            .groups
            .iter()
            .filter(|g| !g.io_error)
            .all(|g| g.status != Status::Refuse),
        "{}",
        report.render()
    );
    // Without the fault, the same node is no refusal.
    let again = check(&ReadOnly::new(storage), Path::new(""), |_, _| {}).unwrap();
    assert!(again.exit_code() <= exit::REPAIR, "{}", again.render());
}

/// Damage to published data is repaired from the peers in a replicated cluster, and refused in
/// a single-replica one (there is no other copy); either way the report is not clean, and the
/// finding names the file.
#[test]
fn damage_needs_peers_when_replicated_and_refuses_with_one_replica() {
    for (replicas, status, code) in [
        (3u8, Status::NeedsPeerRepair, exit::NEEDS_PEER_REPAIR),
        (1, Status::Refuse, exit::REFUSE),
    ] {
        let storage = SimStorage::new(8);
        let options = Options {
            partitions: 2,
            batches: 6,
            unpublished_batches: 0,
            segment_size_bytes: 4096,
            metadata_file_bytes: 8192,
            max_messages: 2,
            replicas,
        };
        populate(&storage, Path::new(""), &options).unwrap();
        let segment = "partitions/1.1.1/00000000000000000000.log";
        storage.rot(segment, 300, 0x01).unwrap();
        // The rotten file is sealed (the frontier passed it): boot takes it from its seal and
        // leaves the body to the read that serves it; a deep check reads it (`iggy-fsck
        // --deep`). `wal/tests/seals.rs` shows the read refusing.
        let sealed = check(&ReadOnly::new(storage.clone()), Path::new(""), |_, _| {}).unwrap();
        assert!(
            !sealed.findings.iter().any(|f| f.kind == "damaged"),
            "{}",
            sealed.render()
        );
        let deep = BootConfig {
            verify: Verify::Everything,
            ..BootConfig::new(0)
        };
        let report = check_with(
            &ReadOnly::new(storage.clone()),
            Path::new(""),
            &deep,
            |_, _| {},
        )
        .unwrap();
        assert!(!report.is_clean());
        assert_eq!(report.exit_code(), code, "{}", report.render());
        let group = report
            .groups
            .iter()
            .find(|g| g.group == "partition 1.1.1")
            .unwrap();
        assert_eq!(group.status, status);
        assert!(
            report
                .findings
                .iter()
                .any(|f| f.kind == "damaged" && f.file == Path::new(segment)),
            "{}",
            report.render()
        );
    }
}

/// A consumer offset file whose newest slot rotted: the check plans `offset-slot-damaged`
/// (`repair-copy`), naming the file and the offset it reads as in words; boot writes the good
/// slot over the bad one, and a check after it finds nothing left of it.
#[test]
fn a_rotten_offset_slot_is_planned_in_words_and_repaired_by_boot() {
    use iggy_io::{Storage, WriteFile};
    use iggy_segments::offsets::{ConsumerKind, OffsetStore};
    let storage = SimStorage::new(4);
    let options = Options {
        partitions: 1,
        batches: 4,
        unpublished_batches: 0,
        segment_size_bytes: 4096,
        metadata_file_bytes: 8192,
        max_messages: 2,
        replicas: 3,
    };
    populate(&storage, Path::new(""), &options).unwrap();
    let dir = Path::new("partitions/1.1.1/offsets");
    OffsetStore::new(storage.clone(), dir)
        .store(ConsumerKind::Group, 1, 77)
        .unwrap();
    let file = dir.join("group.0000000001");
    // The store just made went into slot 1 (the file's first store filled slot 0).
    storage
        .open(&file, iggy_io::OpenMode::Existing)
        .unwrap()
        .write_all_at(64 + 40, &[0xA5])
        .unwrap();
    let report = check(&ReadOnly::new(storage.clone()), Path::new(""), |_, _| {}).unwrap();
    let damaged: Vec<_> = report
        .findings
        .iter()
        .filter(|f| f.kind == "offset-slot-damaged")
        .collect();
    assert_eq!(damaged.len(), 1, "{}", report.render());
    assert_eq!(damaged[0].file, file);
    assert_eq!(damaged[0].action, iggy_recovery::Action::RepairCopy);
    assert!(
        damaged[0].what.contains("slot 1 does not verify")
            && damaged[0].what.contains("reads as offset 3 for group 1"),
        "{}",
        damaged[0].what
    );
    let (node, _) = iggy_recovery::boot_with(
        storage.clone(),
        Path::new(""),
        iggy_recovery::Mode::Open,
        &BootConfig::new(1),
    )
    .unwrap();
    drop(node);
    let again = check(&ReadOnly::new(storage), Path::new(""), |_, _| {}).unwrap();
    assert!(
        again
            .findings
            .iter()
            .all(|f| f.kind != "offset-slot-damaged"),
        "{}",
        again.render()
    );
}
