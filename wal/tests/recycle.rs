//! Recycled files: `drop_prefix` keeps retired files as spares, a new file is a spare renamed,
//! and what an earlier use left past the entries is never taken for the log's (see
//! `docs/format.md`, "Recycled files"). The crash enumeration (`crash.rs`) crashes inside both
//! renames and every publication into a recycled file; these tests pin each rule by itself.
#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    reason = "test code: a failed unwrap is a failed test; casts are of small test values"
)]

use std::path::{Path, PathBuf};

use iggy_io::{OpenMode, ReadStorage, SimStorage, Storage, TraceOp, WriteFile};
use iggy_wal::{Config, FindingKind, Mode, Wal};

const GROUP: u128 = 0x5C;
const FILE: u64 = 16 << 10;

fn config() -> Config {
    Config {
        file_size_bytes: FILE,
        // Every append written out at once (unsynced until a publication).
        flush_bytes: 1,
        // Synced publications: the log's files hold every published entry, with no carried
        // copy in the ring to stand in for them.
        carry_small_publications: false,
        ..Config::new(GROUP)
    }
}

fn dir() -> &'static Path {
    Path::new("wal")
}

fn names(storage: &SimStorage, suffix: &str) -> Vec<PathBuf> {
    let mut names: Vec<PathBuf> = storage
        .list_dir(dir())
        .unwrap()
        .into_iter()
        .map(|e| dir().join(e.name))
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    names.sort();
    names
}

/// Entries of `len`-byte bodies, published every `per` entries, until `count` are appended.
fn append(wal: &Wal<SimStorage>, count: usize, len: usize, per: usize) {
    for i in 0..count {
        wal.append_body(&vec![(i % 251) as u8 + 1; len], 1, 0)
            .unwrap();
        if (i + 1) % per == 0 {
            wal.publish().unwrap();
        }
    }
    wal.publish().unwrap();
}

/// A log whose first files were filled with 1,000-byte entries and retired into spares, and
/// whose head file is now one of them, holding a few 300-byte entries: past them lie the bytes
/// of the earlier use.
fn recycled(storage: &SimStorage) -> Wal<SimStorage> {
    let wal = Wal::create(storage.clone(), dir(), config(), 1, 0).unwrap();
    append(&wal, 60, 1000, 4);
    let dropped = wal.drop_prefix(wal.published().head_op - 1).unwrap();
    assert!(dropped >= 2, "{dropped}");
    assert_eq!(names(storage, ".spare").len(), 2, "two spares kept");
    // Fill the head file, then a few entries into the next: a spare taken into use.
    let head = wal.files().last().unwrap().first_op;
    while wal.files().last().unwrap().first_op == head {
        wal.append_body(&[7u8; 300], 1, 0).unwrap();
    }
    // Past the spare's first 4 KiB (zeroed when it was taken), into the earlier use's bytes.
    append(&wal, 12, 300, 3);
    assert!(wal.files().last().unwrap().end > 4096);
    let reused = storage.trace().into_iter().any(|op| {
        matches!(op, TraceOp::Rename { from, .. } if from.to_string_lossy().ends_with(".spare"))
    });
    assert!(reused, "the new head file is a spare renamed");
    assert_eq!(names(storage, ".spare").len(), 1);
    wal
}

/// Damages the slot holding the newest publication (one sector of rot).
fn rot_newest_slot(storage: &SimStorage, sequence: u64) {
    let file = storage
        .open(dir().join("frontier"), OpenMode::Existing)
        .unwrap();
    file.write_all_at((sequence % 2) * 4096 + 60, &[0xA5; 4])
        .unwrap();
    file.sync_data().unwrap();
}

/// Behind an unreadable slot boot adopts the chain past the other slot's head only up to zeros
/// (rule 6): anything else might be a published entry that rotted. A recycled file holds an
/// earlier use's bytes there, so every publication into it writes zeros past its entries; the
/// rotted slot's publication is then adopted whole. Without those zeros this boot refuses
/// (`Corrupt` at the end of the chain).
#[test]
fn behind_an_unreadable_slot_a_recycled_head_file_is_adopted_up_to_its_zeros() {
    let storage = SimStorage::recording(5);
    let wal = recycled(&storage);
    let published = wal.published();
    let expected = wal.read(wal.first_op(), published.head_op).unwrap();
    drop(wal);
    storage.power_loss();
    rot_newest_slot(&storage, published.sequence);
    let (wal, report) = Wal::open(storage.clone(), dir(), config(), Mode::Open)
        .unwrap()
        .unwrap();
    assert!(
        report
            .findings
            .iter()
            .any(|f| matches!(f.kind, FindingKind::Adopted { .. })),
        "{:?}",
        report.findings
    );
    assert_eq!(wal.head().0, published.head_op);
    assert_eq!(
        wal.read(wal.first_op(), published.head_op).unwrap(),
        expected
    );
}

/// Boot discards what lies past the frontier up to where the chain stops, plus the header's
/// place there: in a recycled file the rest is an earlier use's, and zeroing to the last
/// non-zero byte would rewrite the whole file. What it discards is exactly the unpublished
/// entries and that header.
#[test]
fn boot_discards_the_unpublished_entries_not_the_earlier_use_of_a_recycled_file() {
    let storage = SimStorage::recording(6);
    let wal = recycled(&storage);
    let published = wal.published();
    // Unpublished entries, written out (flush_bytes) but never synced.
    for _ in 0..3 {
        wal.append_body(&[9u8; 600], 1, 0).unwrap();
    }
    drop(wal);
    storage.crash_process(); // the written-out entries stay in the page cache
    let report = iggy_wal::check(&storage, dir(), GROUP).unwrap().unwrap();
    let unpublished = 3 * (256 + 600);
    assert_eq!(report.head_op, published.head_op);
    assert!(
        (unpublished..=unpublished + 256).contains(&report.discarded_bytes),
        "{} discarded: {:?}",
        report.discarded_bytes,
        report.findings
    );
    let (wal, _) = Wal::open(storage.clone(), dir(), config(), Mode::Open)
        .unwrap()
        .unwrap();
    // The log goes on over the discarded place, and boots clean after a power loss.
    append(&wal, 5, 100, 2);
    let head = wal.published().head_op;
    let expected = wal.read(wal.first_op(), head).unwrap();
    drop(wal);
    storage.power_loss();
    let (wal, report) = Wal::open(storage, dir(), config(), Mode::Open)
        .unwrap()
        .unwrap();
    assert!(report.findings.is_empty(), "{:?}", report.findings);
    assert_eq!(wal.read(wal.first_op(), head).unwrap(), expected);
}

/// Spares outlive a boot (the report names them and the log takes them), and a log that keeps
/// none unlinks what it retires.
#[test]
fn spares_survive_a_boot_and_none_are_kept_when_the_config_says_so() {
    let storage = SimStorage::new(7);
    let wal = Wal::create(storage.clone(), dir(), config(), 1, 0).unwrap();
    append(&wal, 60, 1000, 4);
    wal.drop_prefix(wal.published().head_op - 1).unwrap();
    drop(wal);
    storage.power_loss();
    let (wal, report) = Wal::open(storage.clone(), dir(), config(), Mode::Open)
        .unwrap()
        .unwrap();
    assert_eq!(report.spares, names(&storage, ".spare"));
    assert_eq!(report.spares.len(), 2);
    append(&wal, 40, 1000, 4);
    assert!(names(&storage, ".spare").is_empty(), "both taken");

    let storage = SimStorage::new(8);
    let config = Config {
        spare_files: 0,
        ..config()
    };
    let wal = Wal::create(storage.clone(), dir(), config, 1, 0).unwrap();
    append(&wal, 60, 1000, 4);
    assert!(wal.drop_prefix(wal.published().head_op - 1).unwrap() > 0);
    assert!(names(&storage, ".spare").is_empty());
}

/// Behind an unreadable slot the adopted chain goes on into the next file when that file starts
/// at the next op, whatever lies past the last entry of this one: a file the log moved on from
/// is not padded, and a recycled one holds its earlier use's bytes there. Without this the boot
/// refuses at the end of the older slot's head file.
#[test]
fn behind_an_unreadable_slot_adoption_crosses_from_a_recycled_file_into_the_next() {
    let storage = SimStorage::recording(9);
    let wal = recycled(&storage);
    // One publication that ends the head file (a recycled one) and starts the next.
    let head_file = wal.files().last().unwrap().first_op;
    while wal.files().last().unwrap().first_op == head_file {
        wal.append_body(&[3u8; 300], 1, 0).unwrap();
    }
    wal.append_body(&[4u8; 300], 1, 0).unwrap();
    wal.publish().unwrap();
    let published = wal.published();
    assert_ne!(published.head_file, head_file);
    let expected = wal.read(wal.first_op(), published.head_op).unwrap();
    drop(wal);
    storage.power_loss();
    rot_newest_slot(&storage, published.sequence);
    let (wal, _) = Wal::open(storage, dir(), config(), Mode::Open)
        .unwrap()
        .unwrap();
    assert_eq!(wal.head().0, published.head_op);
    assert_eq!(
        wal.read(wal.first_op(), published.head_op).unwrap(),
        expected
    );
}
