//! Every durable step of the log shown to matter: each test below fails when one sync (or one
//! rule) of the log is deleted, and passes on the code. They close the gaps that deleting each
//! sync in turn left (docs/testing.md, "Mutation testing"): the crash enumeration cuts a log only
//! where every kept entry was already published, and a seeded power loss may keep a pending write
//! by chance, so these use a power loss that keeps nothing unsynced.
#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    reason = "test code: a failed unwrap is a failed test; casts are of small test values"
)]

use std::path::{Path, PathBuf};

use iggy_io::{Fault, ReadStorage, SimStorage};
use iggy_wal::{Config, FindingKind, Mode, Wal, WalError, check};

const GROUP: u128 = 0x15;

/// Files of 4 KiB: entries of about 1 KB, so 3 or 4 a file.
/// Every publication syncs the log and writes a slot: these tests are about the slots (the
/// carried ring's are in `carried.rs`).
fn config() -> Config {
    Config {
        file_size_bytes: 4096,
        flush_bytes: 1 << 20,
        carry_small_publications: false,
        ..Config::new(GROUP)
    }
}

fn dir() -> &'static Path {
    Path::new("wal")
}

fn body(op: u64) -> Vec<u8> {
    (0..700 + (op as usize * 37) % 200)
        .map(|i| (op as usize * 13 + i) as u8)
        .collect()
}

fn append(wal: &Wal<SimStorage>, ops: std::ops::RangeInclusive<u64>) {
    for op in ops {
        assert_eq!(wal.append_body(&body(op), 1, op).unwrap(), op);
    }
}

fn open(storage: &SimStorage) -> Wal<SimStorage> {
    Wal::open(storage.clone(), dir(), config(), Mode::Open)
        .unwrap_or_else(|e| panic!("boot refused: {e}"))
        .unwrap()
        .0
}

/// The bodies of ops `1..=head`, verified against what was appended.
fn assert_intact(wal: &Wal<SimStorage>, head: u64) {
    assert_eq!(wal.head().0, head);
    for (entry, op) in wal.read(1, head).unwrap().iter().zip(1..) {
        assert_eq!(entry.body, body(op), "op {op}");
    }
}

fn wal_files(storage: &SimStorage) -> Vec<PathBuf> {
    storage
        .list_dir(dir())
        .unwrap()
        .into_iter()
        .filter(|e| e.name.to_string_lossy().ends_with(".wal"))
        .map(|e| dir().join(e.name))
        .collect()
}

/// `truncate_after` into the unpublished suffix makes the kept entries durable before the
/// frontier names them (its sync of the files written since the last publication).
#[test]
fn a_cut_inside_the_unpublished_suffix_keeps_the_entries_it_publishes() {
    let storage = SimStorage::new(1);
    let wal = Wal::create(storage.clone(), dir(), config(), 1, 0).unwrap();
    append(&wal, 1..=5);
    wal.publish().unwrap();
    append(&wal, 6..=10);
    // Written to the files, not synced: the cut below publishes ops 6..=8 of them.
    wal.write_buffered().unwrap();
    wal.truncate_after(8).unwrap();
    drop(wal);
    storage.power_loss_durable_only();
    assert_intact(&open(&storage), 8);
}

/// Boot rewrites the frontier slot it trusts and syncs it before the log is used: a slot left in
/// the page cache by a publication whose frontier sync failed is durable once a boot trusted it.
#[test]
fn what_a_boot_trusts_is_durable_when_it_returns() {
    let storage = SimStorage::new(2);
    let wal = Wal::create(storage.clone(), dir(), config(), 1, 0).unwrap();
    append(&wal, 1..=2);
    wal.publish().unwrap();
    append(&wal, 3..=3);
    storage
        .arm(dir().join("frontier"), Fault::SyncError)
        .unwrap();
    assert!(wal.publish().is_err());
    drop(wal);
    storage.crash_process();
    let trusted = open(&storage).head().0;
    assert_eq!(trusted, 3, "the page cache holds the slot naming op 3");
    storage.power_loss_durable_only();
    assert_intact(&open(&storage), trusted);
}

/// A cut is a new publication in the other slot (its sequence moves on), and the bytes it cut
/// are zeroed durably: behind a rotten pre-cut slot, neither the older slot nor adoption may
/// bring ops 6..=10 back.
#[test]
fn behind_a_rotten_pre_cut_slot_the_cut_entries_stay_cut() {
    let storage = SimStorage::new(3);
    let wal = Wal::create(storage.clone(), dir(), config(), 1, 0).unwrap();
    append(&wal, 1..=8);
    wal.publish().unwrap();
    append(&wal, 9..=10);
    let pre_cut = wal.publish().unwrap();
    wal.truncate_after(5).unwrap();
    assert_ne!(
        wal.published().slot(),
        pre_cut.slot(),
        "the cut goes to the other slot"
    );
    drop(wal);
    storage.power_loss_durable_only();
    storage
        .rot(dir().join("frontier"), pre_cut.offset() + 100, 0x04)
        .unwrap();
    let wal = open(&storage);
    assert_intact(&wal, 5);
}

/// The removal of the files past a cut is durable before `truncate_after` returns.
#[test]
fn files_removed_by_a_cut_stay_removed() {
    let storage = SimStorage::new(4);
    let wal = Wal::create(storage.clone(), dir(), config(), 1, 0).unwrap();
    append(&wal, 1..=12);
    wal.publish().unwrap();
    let before = wal_files(&storage).len();
    wal.truncate_after(2).unwrap();
    let after = wal_files(&storage);
    assert!(after.len() < before, "the cut removed later files");
    drop(wal);
    storage.power_loss_durable_only();
    assert_eq!(wal_files(&storage), after, "removed files came back");
    assert!(check(&storage, dir(), GROUP).unwrap().unwrap().is_clean());
}

/// Boot's removal of a whole file past the frontier is durable before boot returns.
#[test]
fn a_file_boot_discarded_stays_discarded() {
    let storage = SimStorage::new(5);
    let wal = Wal::create(storage.clone(), dir(), config(), 1, 0).unwrap();
    append(&wal, 1..=3);
    wal.publish().unwrap();
    // Rotates into new files, written and synced, never published.
    append(&wal, 4..=12);
    wal.write_buffered().unwrap();
    for file in wal_files(&storage) {
        iggy_io::Storage::open(&storage, &file, iggy_io::OpenMode::Existing)
            .and_then(|f| iggy_io::WriteFile::sync_data(&f))
            .unwrap();
    }
    drop(wal);
    storage.crash_process();
    let report = check(&storage, dir(), GROUP).unwrap().unwrap();
    assert!(!report.is_clean());
    assert!(
        report
            .findings
            .iter()
            .any(|f| matches!(f.kind, FindingKind::FileBeyondFrontier { .. })),
        "{report:?}"
    );
    let kept = {
        let wal = open(&storage);
        assert_intact(&wal, 3);
        wal_files(&storage)
    };
    storage.power_loss_durable_only();
    assert_eq!(wal_files(&storage), kept, "a discarded file came back");
    assert!(check(&storage, dir(), GROUP).unwrap().unwrap().is_clean());
}

/// Entries adopted behind an unreadable slot may be in the page cache only (their publication's
/// data sync failed before the process died): boot writes them again and syncs them before the
/// new frontier names them, so what it adopted survives a power loss.
#[test]
fn entries_adopted_behind_a_rotten_slot_are_made_durable() {
    let storage = SimStorage::new(6);
    let wal = Wal::create(storage.clone(), dir(), config(), 1, 0).unwrap();
    append(&wal, 1..=2);
    let newest = wal.publish().unwrap();
    append(&wal, 3..=3);
    // The data sync fails: op 3 stays in the page cache, dropped from what reaches the disk.
    let head_file = wal_files(&storage).last().cloned().unwrap();
    storage.arm(&head_file, Fault::SyncError).unwrap();
    assert!(wal.publish().is_err());
    drop(wal);
    storage.crash_process();
    storage
        .rot(dir().join("frontier"), newest.offset() + 100, 0x02)
        .unwrap();
    let wal = open(&storage);
    assert_intact(&wal, 3);
    drop(wal);
    storage.power_loss_durable_only();
    assert_intact(&open(&storage), 3);
}

/// Boot zeroes an unpublished tail durably: behind a rotten newest slot, adoption must not find
/// the discarded entries again after a power loss.
#[test]
fn a_tail_boot_discarded_is_not_adopted_later() {
    let storage = SimStorage::new(7);
    let wal = Wal::create(storage.clone(), dir(), config(), 1, 0).unwrap();
    append(&wal, 1..=1);
    wal.publish().unwrap();
    append(&wal, 2..=2);
    let trusted = wal.publish().unwrap();
    append(&wal, 3..=3);
    // Op 3 reaches the disk, its frontier does not: a durable unpublished tail.
    storage
        .arm(dir().join("frontier"), Fault::WriteError)
        .unwrap();
    assert!(wal.publish().is_err());
    drop(wal);
    storage.crash_process();
    assert_intact(&open(&storage), 2);
    storage.power_loss_durable_only();
    storage
        .rot(dir().join("frontier"), trusted.offset() + 100, 0x08)
        .unwrap();
    assert_intact(&open(&storage), 2);
}

/// Behind an unreadable newest slot, adoption continues into the next file when it starts
/// exactly at the next op, and the new frontier names that later file as the head file.
#[test]
fn adoption_crosses_into_the_next_file_and_the_new_frontier_names_it() {
    let storage = SimStorage::new(8);
    let wal = Wal::create(storage.clone(), dir(), config(), 1, 0).unwrap();
    append(&wal, 1..=2);
    let older = wal.publish().unwrap();
    append(&wal, 3..=9);
    let newest = wal.publish().unwrap();
    assert_ne!(older.head_file, newest.head_file, "ops 3..=9 rotated");
    drop(wal);
    storage
        .rot(dir().join("frontier"), newest.offset() + 100, 0x01)
        .unwrap();
    let (wal, report) = Wal::open(storage.clone(), dir(), config(), Mode::Open)
        .unwrap()
        .unwrap();
    assert_intact(&wal, 9);
    assert!(report.findings.iter().any(|f| matches!(
        f.kind,
        FindingKind::Adopted {
            entries: 7,
            head_op: 9
        }
    )));
    assert_eq!(wal.published().head_op, 9);
    assert_eq!(
        wal.published().head_file,
        newest.head_file,
        "the new frontier names the file holding op 9"
    );
    // And what it wrote is the log from now on.
    append(&wal, 10..=10);
    wal.publish().unwrap();
    drop(wal);
    storage.power_loss_durable_only();
    assert_intact(&open(&storage), 10);
}

/// Behind an unreadable newest slot, a later file that does not start where the adopted chain
/// ends is not adopted (it may be another history): boot refuses it as a hole.
#[test]
fn adoption_does_not_cross_into_a_file_that_does_not_continue_the_chain() {
    let storage = SimStorage::new(9);
    let wal = Wal::create(storage.clone(), dir(), config(), 1, 0).unwrap();
    append(&wal, 1..=2);
    wal.publish().unwrap();
    append(&wal, 3..=9);
    let newest = wal.publish().unwrap();
    drop(wal);
    // The file after the older slot's head file goes, so the chain cannot reach the last one.
    let files = wal_files(&storage);
    let middle = files
        .iter()
        .find(|f| {
            let name = f.file_name().unwrap().to_string_lossy().into_owned();
            let first: u64 = name.trim_end_matches(".wal").parse().unwrap();
            first > 2 && first < newest.head_file
        })
        .cloned()
        .expect("a file between the older head and the newest head file");
    iggy_io::Storage::unlink(&storage, &middle).unwrap();
    storage
        .rot(dir().join("frontier"), newest.offset() + 100, 0x01)
        .unwrap();
    let refused = Wal::open(storage.clone(), dir(), config(), Mode::Open).unwrap_err();
    assert!(matches!(refused, WalError::Hole { .. }), "{refused}");
}

/// `Wal::read` verifies every body it returns.
#[test]
fn a_read_of_a_rotten_body_refuses_naming_file_and_offset() {
    let storage = SimStorage::new(10);
    let wal = Wal::create(storage.clone(), dir(), config(), 1, 0).unwrap();
    append(&wal, 1..=3);
    wal.publish().unwrap();
    let location = wal.locate(2).unwrap();
    let file = dir().join(iggy_wal::boot::file_name(location.key));
    storage.rot(&file, location.offset + 300, 0x40).unwrap();
    match wal.read(2, 2) {
        Err(WalError::Corrupt {
            file: named,
            offset,
            ..
        }) => {
            assert_eq!(named, file);
            assert_eq!(offset, location.offset);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(wal.read(1, 1).unwrap()[0].body, body(1));
}

/// A cut past the head is refused (`OutOfRange`) and changes nothing.
#[test]
fn a_cut_past_the_head_is_out_of_range() {
    let storage = SimStorage::new(11);
    let wal = Wal::create(storage.clone(), dir(), config(), 1, 0).unwrap();
    append(&wal, 1..=3);
    wal.publish().unwrap();
    assert!(matches!(
        wal.truncate_after(4),
        Err(WalError::OutOfRange {
            what: "truncate_after",
            op: 4,
            ..
        })
    ));
    assert_intact(&wal, 3);
    append(&wal, 4..=4);
    wal.publish().unwrap();
}

/// A new file's preallocated extent (and, with `zero_fill`, its zeros) is durable before any
/// entry is written into it, so that a publication's `fdatasync` there has no block map to
/// update (docs/benchmarks.md, "Zero-fill").
#[test]
fn a_new_files_preallocation_is_durable_before_it_is_used() {
    for zero_fill in [false, true] {
        let storage = SimStorage::new(12);
        let config = Config {
            zero_fill,
            ..config()
        };
        let wal = Wal::create(storage.clone(), dir(), config.clone(), 1, 0).unwrap();
        drop(wal);
        storage.power_loss_durable_only();
        let head = wal_files(&storage).pop().unwrap();
        let len = iggy_io::ReadFile::len(&storage.open_read(&head).unwrap()).unwrap();
        assert_eq!(len, config.file_size_bytes, "zero_fill {zero_fill}");
    }
}
