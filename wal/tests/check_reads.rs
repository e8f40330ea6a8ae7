//! The reads a `Check` makes without opening the log for writing (`boot::read_entries`,
//! `boot::header_at`: what the metadata group's read-only restore replays) agree with
//! `Wal::read` on every range, refuse what lies outside the trusted ops, and name the file and
//! offset of damage; and the findings of a log whose creation stopped.
#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    reason = "test code: a failed unwrap is a failed test; casts are of small test values"
)]

use std::path::Path;

use iggy_io::{OpenMode, SimStorage, Storage, WriteFile};
use iggy_wal::boot::{self, FRONTIER_FILE, FRONTIER_TEMP_FILE};
use iggy_wal::{Config, FindingKind, Wal, WalError, check};

const GROUP: u128 = 0x77;

fn config() -> Config {
    Config {
        file_size_bytes: 4096,
        flush_bytes: 1024,
        ..Config::new(GROUP)
    }
}

fn dir() -> &'static Path {
    Path::new("wal")
}

/// 30 published entries over several files, then the first files dropped: ops 1.. are gone.
fn log() -> (SimStorage, Wal<SimStorage>) {
    let storage = SimStorage::new(3);
    let wal = Wal::create(storage.clone(), dir(), config(), 1, 0).unwrap();
    for i in 0..30u8 {
        wal.append_body(&vec![i; 200 + usize::from(i) * 13], 1, 0)
            .unwrap();
    }
    wal.publish().unwrap();
    wal.drop_prefix(8).unwrap();
    (storage, wal)
}

#[test]
fn read_entries_and_header_at_agree_with_the_log_on_every_range() {
    let (storage, wal) = log();
    let report = check(&storage, dir(), GROUP).unwrap().unwrap();
    assert!(report.first_op > 1, "a prefix was dropped");
    assert!(report.files.len() >= 3, "several files");
    assert_eq!(report.head_op, 30);
    for from in report.first_op..=report.head_op {
        for to in from..=report.head_op {
            let read = boot::read_entries(&storage, &report, from, to).unwrap();
            assert_eq!(read, wal.read(from, to).unwrap(), "{from}..={to}");
        }
        let header = boot::header_at(&storage, &report, from).unwrap();
        assert_eq!(header, wal.read(from, from).unwrap()[0].header, "op {from}");
    }
}

#[test]
fn reads_outside_the_trusted_ops_are_refused() {
    let (storage, _wal) = log();
    let report = check(&storage, dir(), GROUP).unwrap().unwrap();
    let (first, head) = (report.first_op, report.head_op);
    for (from, to) in [
        (first - 1, head),
        (first, head + 1),
        (0, 0),
        (head + 1, head + 1),
    ] {
        match boot::read_entries(&storage, &report, from, to) {
            Err(WalError::OutOfRange {
                op,
                first_op,
                head_op,
                ..
            }) => {
                assert_eq!((first_op, head_op), (first, head));
                // The error names the end that is out of range.
                let outside = if from < first { from } else { to };
                assert_eq!(op, outside, "{from}..={to}");
            }
            other => panic!("{from}..={to}: {other:?}"),
        }
    }
    for op in [0, first - 1, head + 1] {
        assert!(
            matches!(
                boot::header_at(&storage, &report, op),
                Err(WalError::OutOfRange { .. })
            ),
            "op {op}"
        );
    }
}

/// Damage inside a trusted entry after the report was made is refused with the file and
/// offset, never returned as an entry.
#[test]
fn damage_under_a_read_is_named() {
    let (storage, wal) = log();
    let report = check(&storage, dir(), GROUP).unwrap().unwrap();
    let target = report.head_op - 1;
    let location = wal.locate(target).unwrap();
    let file = report
        .files
        .iter()
        .find(|f| f.first_op <= target && target < f.first_op + f.entries)
        .unwrap()
        .path
        .clone();
    drop(wal);
    // A bit in the body, then one in the header.
    storage
        .rot(&file, location.offset + location.size - 1, 0x01)
        .unwrap();
    match boot::read_entries(&storage, &report, target, target) {
        Err(WalError::Corrupt { file: named, .. }) => assert_eq!(named, file),
        other => panic!("{other:?}"),
    }
    storage.rot(&file, location.offset + 40, 0x01).unwrap();
    for result in [
        boot::read_entries(&storage, &report, target, target).map(|_| ()),
        boot::header_at(&storage, &report, target).map(|_| ()),
    ] {
        match result {
            Err(WalError::Corrupt { file: named, .. }) => assert_eq!(named, file),
            other => panic!("{other:?}"),
        }
    }
    // The entries before it still read.
    let before = boot::read_entries(&storage, &report, report.first_op, target - 1).unwrap();
    assert_eq!(before.len() as u64, target - report.first_op);
}

/// A read opens only the files that hold its range: damage in another file does not fail it.
#[test]
fn a_read_touches_only_the_files_of_its_range() {
    let (storage, wal) = log();
    let report = check(&storage, dir(), GROUP).unwrap().unwrap();
    let first = &report.files[0];
    let last = report.files.last().unwrap();
    assert!(first.entries > 0 && last.first_op > first.first_op + first.entries);
    let location = wal.locate(first.first_op).unwrap();
    drop(wal);
    storage
        .rot(&first.path, location.offset + location.size - 1, 0x01)
        .unwrap();
    let read = boot::read_entries(&storage, &report, last.first_op, report.head_op).unwrap();
    assert_eq!(read.len() as u64, report.head_op - last.first_op + 1);
    assert!(matches!(
        boot::read_entries(&storage, &report, first.first_op, first.first_op),
        Err(WalError::Corrupt { .. })
    ));
}

/// A directory where creation stopped before the frontier: the finding says open creates the
/// log, and a leftover `frontier.tmp` is named to be removed.
#[test]
fn an_uncreated_log_reports_what_creating_it_does() {
    let storage = SimStorage::new(4);
    storage.create_dir(dir()).unwrap();
    let kinds = |storage: &SimStorage| {
        boot::creation_findings(storage, dir())
            .unwrap()
            .into_iter()
            .map(|f| (f.file, f.kind))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        kinds(&storage),
        [(dir().join(FRONTIER_FILE), FindingKind::NotCreated)]
    );
    let temp = storage
        .open(dir().join(FRONTIER_TEMP_FILE), OpenMode::CreateNew)
        .unwrap();
    temp.write_all_at(0, &[1u8; 64]).unwrap();
    drop(temp);
    assert_eq!(
        kinds(&storage),
        [
            (dir().join(FRONTIER_TEMP_FILE), FindingKind::LeftoverTemp),
            (dir().join(FRONTIER_FILE), FindingKind::NotCreated),
        ]
    );
    assert!(check(&storage, dir(), GROUP).unwrap().is_none());
}
