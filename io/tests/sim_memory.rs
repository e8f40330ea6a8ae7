//! `SimStorage` at cluster scale: memory tracks the live written bytes, not file sizes nor
//! history, and a checker's reads change nothing of what happens next.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use iggy_io::{FaultConfig, OpenMode, ReadFile, ReadStorage, SimStorage, Storage, WriteFile};

/// A preallocated gigabyte is a hole: it costs nothing until written.
#[test]
fn allocated_space_costs_nothing_until_written() {
    let storage = SimStorage::new(1);
    let file = storage.open("segment", OpenMode::CreateNew).unwrap();
    file.allocate(0, 1 << 30).unwrap();
    file.sync_data().unwrap();
    assert_eq!(file.len().unwrap(), 1 << 30);
    assert!(
        storage.memory_bytes() < 1 << 20,
        "{}",
        storage.memory_bytes()
    );
    let mut buf = [0xFFu8; 64];
    file.read_exact_at((1 << 30) - 64, &mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == 0), "a hole reads as zeros");
    file.write_all_at(1 << 29, &[7u8; 1 << 20]).unwrap();
    file.sync_data().unwrap();
    let after = storage.memory_bytes();
    assert!(
        (1 << 20..3 << 20).contains(&after),
        "the synced megabyte is held once, by both images: {after}"
    );
}

/// An unlinked file is freed once no handle holds it and the unlink is durable (before, a
/// power loss could bring it back, so it stays until then).
#[test]
fn unlinked_files_are_freed() {
    let storage = SimStorage::new(2);
    for round in 0..50u64 {
        let name = format!("file-{round}");
        let file = storage.open(&name, OpenMode::CreateNew).unwrap();
        file.write_all_and_sync_data(0, &vec![u8::try_from(round).unwrap(); 1 << 20])
            .unwrap();
        storage.sync_dir("").unwrap();
        drop(file);
        storage.unlink(&name).unwrap();
        storage.sync_dir("").unwrap();
    }
    assert!(
        storage.memory_bytes() < 1 << 20,
        "50 MiB written and removed: {} bytes held",
        storage.memory_bytes()
    );
    // A handle keeps an unlinked file readable until it is dropped.
    let file = storage.open("held", OpenMode::CreateNew).unwrap();
    file.write_all_and_sync_data(0, &[9u8; 4096]).unwrap();
    storage.sync_dir("").unwrap();
    storage.unlink("held").unwrap();
    storage.sync_dir("").unwrap();
    let mut back = [0u8; 4096];
    file.read_exact_at(0, &mut back).unwrap();
    assert_eq!(back, [9u8; 4096]);
    drop(file);
    assert!(storage.memory_bytes() < 1 << 20);
}

/// Reads through `quiet()` inject no fault and draw no random number: a run with a checker
/// looking at the disk does the same as one without.
#[test]
fn quiet_reads_draw_no_random_numbers() {
    let run = |look: bool| {
        let storage = SimStorage::with_faults(
            3,
            FaultConfig {
                read_error_probability: 0.3,
                short_read_probability: 0.3,
                ..FaultConfig::default()
            },
        );
        let file = storage.open("f", OpenMode::CreateNew).unwrap();
        file.write_all_at(0, &[5u8; 10_000]).unwrap();
        let mut outcomes = Vec::new();
        for _ in 0..40 {
            if look {
                let quiet = storage.quiet();
                let bytes = quiet.open_read("f").unwrap().read_all().unwrap();
                assert_eq!(bytes.len(), 10_000);
            }
            outcomes.push(file.read_at(0, &mut [0u8; 100]).ok());
        }
        outcomes
    };
    assert_eq!(run(false), run(true));
}

/// A directory created, filled and removed again before its parent's sync is unreachable: it is
/// freed, and a power loss that keeps some of the pending directory changes never looks for it
/// (that panicked once, in the partition soak).
#[test]
fn a_directory_removed_before_any_sync_is_freed_and_survives_a_power_loss() {
    for seed in 0..20 {
        let storage = SimStorage::new(seed);
        storage.create_dir("d").unwrap();
        let file = storage.open("d/f", OpenMode::CreateNew).unwrap();
        file.write_all_and_sync_data(0, &[1u8; 4096]).unwrap();
        drop(file);
        storage.remove_dir_all("d").unwrap();
        storage.sync_dir("").unwrap();
        storage.create_dir("e").unwrap();
        storage.power_loss();
        assert!(!storage.exists("d").unwrap(), "seed {seed}");
        assert!(storage.memory_bytes() < 4096, "seed {seed}");
    }
}
