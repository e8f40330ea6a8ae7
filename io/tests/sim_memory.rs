//! `SimStorage` at cluster scale: memory tracks the live written bytes, not file sizes nor
//! history, and a checker's reads change nothing of what happens next.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use iggy_io::{FaultConfig, OpenMode, ReadFile, ReadStorage, SimStorage, Storage, WriteFile};

/// `len` bytes that repeat no page: pages of the same bytes are held once (see
/// `a_page_shared_across_disks_is_copied_before_one_disk_changes_it`), which these tests do not measure.
fn varied(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state.to_le_bytes()[0]
        })
        .collect()
}

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
    file.write_all_at(1 << 29, &varied(7, 1 << 20)).unwrap();
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

/// Unsynced writes are held twice (the page cache and the pending write a power loss decides
/// on); a disk that never loses power holds them once, and a power loss keeps every byte
/// written.
#[test]
fn a_write_through_disk_holds_unsynced_writes_once_and_loses_none() {
    let written = 8 << 20;
    let measure = |write_through: bool| {
        let storage = SimStorage::new(3);
        storage.set_write_through(write_through);
        let file = storage.open("log", OpenMode::CreateNew).unwrap();
        storage.sync_dir("").unwrap();
        file.write_all_at(0, &varied(3, usize::try_from(written).unwrap()))
            .unwrap();
        let memory = storage.memory_bytes();
        drop(file);
        storage.power_loss();
        (memory, storage.read_all("log").unwrap())
    };
    let (twice, _) = measure(false);
    assert!(twice >= 2 * written, "{twice}");
    let (once, survived) = measure(true);
    assert!(once < written + (1 << 20), "{once}");
    assert_eq!(survived, varied(3, usize::try_from(written).unwrap()));
}

/// Pages a write fills whole are shared with every live page of the same bytes, across disks
/// (`content.rs` checks the sharing itself): a later write into one disk's copy copies the page
/// first, so the others keep their bytes, and each disk still counts what it holds.
#[test]
fn a_page_shared_across_disks_is_copied_before_one_disk_changes_it() {
    let bytes = varied(11, 4 << 20);
    let disks: Vec<SimStorage> = (0..3).map(SimStorage::new).collect();
    for disk in &disks {
        let file = disk.open("segment", OpenMode::CreateNew).unwrap();
        file.write_all_and_sync_data(0, &bytes).unwrap();
    }
    // Each disk counts what it holds...
    for disk in &disks {
        assert!(disk.memory_bytes() >= 4 << 20, "{}", disk.memory_bytes());
    }
    // ...and after one replica overwrites a byte, the others still read their own.
    let file = disks[1].open("segment", OpenMode::Existing).unwrap();
    file.write_all_and_sync_data(100, &[!bytes[100]]).unwrap();
    assert_eq!(disks[0].read_all("segment").unwrap(), bytes);
    assert_eq!(disks[2].read_all("segment").unwrap(), bytes);
    assert_eq!(disks[1].read_all("segment").unwrap()[100], !bytes[100]);
}
