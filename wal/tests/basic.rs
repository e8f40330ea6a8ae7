//! The log's behaviour without faults: append, publish, read, rotate, truncate, drop, reopen.
#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    reason = "test code: a failed unwrap is a failed test; casts are of small test values"
)]

use std::path::Path;

use iggy_io::{ReadOnly, ReadStorage, SimStorage};
use iggy_wal::{Appended, Config, Mode, Wal, WalError, check, next_header};

fn config() -> Config {
    Config {
        file_size_bytes: 8192,
        flush_bytes: 2048,
        unpublished_bytes_max: 1 << 20,
        ..Config::new(7)
    }
}

fn body(op: u64) -> Vec<u8> {
    vec![op as u8; (op as usize * 37) % 1500]
}

fn dir() -> &'static Path {
    Path::new("wal")
}

#[test]
fn append_publish_read_reopen_across_rotations() {
    let storage = SimStorage::recording(1);
    let wal = Wal::create(storage.clone(), dir(), config(), 1, 0).unwrap();
    for op in 1..=40 {
        assert_eq!(wal.append_body(&body(op), 1, op).unwrap(), op);
        if op % 7 == 0 {
            assert_eq!(wal.publish().unwrap().head_op, op);
        }
    }
    wal.publish().unwrap();
    let entries = wal.read(1, 40).unwrap();
    assert_eq!(entries.len(), 40);
    for (entry, op) in entries.iter().zip(1..) {
        assert_eq!(entry.header.op, op);
        assert_eq!(entry.body, body(op));
    }
    let files = iggy_io::ReadStorage::list_dir(&storage, "wal").unwrap();
    assert!(files.len() > 3, "rotated into several files: {files:?}");
    drop(wal);

    storage.power_loss();
    let report = check(&ReadOnly::new(storage.clone()), dir(), 7)
        .unwrap()
        .unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(report.head_op, 40);
    let (wal, open_report) = Wal::open(storage.clone(), dir(), config(), Mode::Open)
        .unwrap()
        .unwrap();
    assert_eq!(open_report, report);
    assert_eq!(wal.read(1, 40).unwrap(), entries);
    assert_eq!(wal.append_body(b"after reopen", 2, 0).unwrap(), 41);
    wal.publish().unwrap();
    assert_eq!(wal.read(41, 41).unwrap()[0].body, b"after reopen");
}

#[test]
fn unpublished_entries_are_discarded_at_boot_and_reported() {
    let storage = SimStorage::recording(2);
    let wal = Wal::create(storage.clone(), dir(), config(), 1, 0).unwrap();
    for op in 1..=10 {
        wal.append_body(&body(op), 1, op).unwrap();
    }
    wal.publish().unwrap();
    for op in 11..=30 {
        wal.append_body(&body(op), 1, op).unwrap();
    }
    wal.read(11, 11).unwrap(); // flushes the buffer: the bytes are in the files, unpublished
    drop(wal);
    storage.crash_process(); // the page cache keeps them: boot must still discard them
    let report = check(&storage, dir(), 7).unwrap().unwrap();
    assert_eq!(report.head_op, 10);
    assert!(report.discarded_bytes > 0, "{report:?}");
    let (wal, _) = Wal::open(storage.clone(), dir(), config(), Mode::Open)
        .unwrap()
        .unwrap();
    assert_eq!(wal.head().0, 10);
    let again = check(&storage, dir(), 7).unwrap().unwrap();
    assert!(
        again.is_clean(),
        "after open nothing is left to do: {again:?}"
    );
    assert_eq!(wal.read(1, 10).unwrap().len(), 10);
}

#[test]
fn append_validation() {
    let storage = SimStorage::recording(3);
    let wal = Wal::create(storage, dir(), config(), 5, 0xFEED).unwrap();
    let first = next_header(7, 5, 0xFEED, 1, 0, b"a");
    assert_eq!(
        wal.append(&first, b"a").unwrap(),
        Appended::Queued { op: 5 }
    );
    assert_eq!(
        wal.append(&first, b"a").unwrap(),
        Appended::Duplicate { op: 5 }
    );
    let conflicting = next_header(7, 5, 0xFEED, 1, 0, b"b");
    assert!(matches!(
        wal.append(&conflicting, b"b"),
        Err(WalError::Conflict { op: 5 })
    ));
    let gap = next_header(7, 7, first.checksum(), 1, 0, b"c");
    assert!(matches!(
        wal.append(&gap, b"c"),
        Err(WalError::OpGap { head: 5, found: 7 })
    ));
    let unlinked = next_header(7, 6, 0xBAD, 1, 0, b"c");
    assert!(matches!(
        wal.append(&unlinked, b"c"),
        Err(WalError::ParentMismatch { op: 6, .. })
    ));
    let good = next_header(7, 6, first.checksum(), 1, 0, b"c");
    assert!(matches!(
        wal.append(&good, b"not c"),
        Err(WalError::BadEntry { op: 6, .. })
    ));
    assert!(matches!(wal.read(4, 5), Err(WalError::OutOfRange { .. })));
    assert!(
        matches!(wal.wait_published(6), Err(WalError::OutOfRange { .. })),
        "an op never appended is not acknowledged"
    );
    assert_eq!(wal.wait_published(5).unwrap().head_op, 5);
    assert_eq!(wal.append(&good, b"c").unwrap(), Appended::Queued { op: 6 });
}

#[test]
fn back_pressure_refuses_rather_than_drops() {
    let storage = SimStorage::recording(4);
    let config = Config {
        unpublished_bytes_max: 4096,
        ..config()
    };
    let wal = Wal::create(storage, dir(), config, 1, 0).unwrap();
    let mut accepted = 0;
    let error = loop {
        match wal.append_body(&[1u8; 700], 1, 0) {
            Ok(_) => accepted += 1,
            Err(error) => break error,
        }
    };
    assert!(
        matches!(
            error,
            WalError::Backpressure {
                budget_bytes: 4096,
                ..
            }
        ),
        "{error}"
    );
    assert_eq!(accepted, 4, "4 entries of 956 bytes fit in 4096");
    wal.publish().unwrap();
    wal.append_body(&[1u8; 700], 1, 0).unwrap();
    assert_eq!(
        wal.read(1, 5).unwrap().len(),
        5,
        "nothing accepted was dropped"
    );
}

/// A file system with no room for the next file: the append that needed it fails with an
/// exhaustion error, the log is not poisoned and holds what it held (no half-made file left in
/// its directory), and once there is room the same append goes through.
#[test]
fn no_room_for_the_next_file_fails_the_append_and_keeps_the_log() {
    let storage = SimStorage::recording(5);
    let wal = Wal::create(storage.clone(), dir(), config(), 1, 0).unwrap();
    let mut op = 0;
    // Fill the first file (8 KiB) to within one entry of its end.
    while wal.unpublished_bytes() + 2 * 956 <= 8192 {
        op = wal.append_body(&[3u8; 700], 1, 0).unwrap();
    }
    wal.publish().unwrap();
    let files_before = iggy_io::ReadStorage::list_dir(&storage, "wal").unwrap();
    storage.set_space_limit(Some(storage.used_bytes()));
    let error = loop {
        match wal.append_body(&[3u8; 700], 1, 0) {
            Ok(appended) => op = appended,
            Err(error) => break error,
        }
    };
    assert!(
        matches!(&error, WalError::Io(e) if e.is_exhaustion()),
        "{error}"
    );
    assert_eq!(
        wal.head().0,
        op,
        "the failed append left the head where it was"
    );
    assert_eq!(
        iggy_io::ReadStorage::list_dir(&storage, "wal").unwrap(),
        files_before,
        "the file that could not be made is gone"
    );
    // Not poisoned: publications and reads go on, and so do appends once there is room.
    wal.publish().unwrap();
    assert_eq!(wal.read(1, op).unwrap().len() as u64, op);
    assert!(wal.append_body(&[3u8; 700], 1, 0).is_err(), "still no room");
    storage.set_space_limit(None);
    assert_eq!(wal.append_body(&[3u8; 700], 1, 0).unwrap(), op + 1);
    assert_eq!(wal.publish().unwrap().head_op, op + 1);
    drop(wal);
    storage.power_loss();
    let (wal, report) = Wal::open(storage.clone(), dir(), config(), Mode::Open)
        .unwrap()
        .unwrap();
    assert_eq!(report.head_op, op + 1, "every published entry survives");
    assert_eq!(report.discarded_bytes, 0);
    assert_eq!(wal.read(1, op + 1).unwrap().len() as u64, op + 1);
}

#[test]
fn truncate_after_and_drop_prefix() {
    let storage = SimStorage::recording(5);
    let wal = Wal::create(storage.clone(), dir(), config(), 1, 0).unwrap();
    for op in 1..=30 {
        wal.append_body(&body(op), 1, op).unwrap();
    }
    wal.publish().unwrap();
    wal.truncate_after(12).unwrap();
    assert_eq!(wal.head().0, 12);
    assert_eq!(wal.published().head_op, 12, "the cut is published");
    assert_eq!(wal.published().generation, 1);
    for op in 13..=60 {
        wal.append_body(b"new history", 2, op).unwrap();
    }
    wal.publish().unwrap();
    // Seals beside the files the frontier passed; dropping a file drops its seal.
    let names = || -> Vec<String> {
        iggy_io::ReadStorage::list_dir(&storage, "wal")
            .unwrap()
            .into_iter()
            .map(|e| e.name.to_string_lossy().into_owned())
            .collect()
    };
    let is_seal = |name: &String| name.ends_with(".seal");
    let is_log = |name: &String| !name.ends_with(".seal") && !name.ends_with(".spare");
    assert!(names().iter().any(is_seal), "passed files are sealed");
    let files_before = names().iter().filter(|n| is_log(n)).count();
    assert!(
        matches!(wal.drop_prefix(61), Err(WalError::OutOfRange { .. })),
        "unpublished"
    );
    let dropped = wal.drop_prefix(60).unwrap();
    assert!(dropped > 0);
    let files_after = names().iter().filter(|n| is_log(n)).count();
    assert_eq!(files_after, files_before - dropped);
    assert!(
        !names().iter().any(is_seal),
        "the seals went with their files"
    );
    assert_eq!(files_after, 2, "the frontier and the head file remain");
    let spares = names().iter().filter(|n| n.ends_with(".spare")).count();
    assert_eq!(
        spares,
        dropped.min(iggy_wal::Config::new(0).spare_files),
        "the oldest retired files are kept as spares"
    );
    let first = wal.first_op();
    assert!(first > 13, "first op {first}");
    assert!(matches!(
        wal.read(first - 1, first),
        Err(WalError::OutOfRange { .. })
    ));
    let expected = wal.read(first, 60).unwrap();
    assert_eq!(expected.last().unwrap().body, b"new history");
    drop(wal);
    storage.power_loss();
    let (wal, report) = Wal::open(storage, dir(), config(), Mode::Open)
        .unwrap()
        .unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(wal.first_op(), first);
    assert_eq!(wal.read(first, 60).unwrap(), expected);
}

/// Found by the partition soak: entries appended after the last publication may have started a
/// new file, so the published head can be the last entry of a file that is no longer the last
/// one. Dropping the prefix up to the published head must keep that file: the frontier names it,
/// and a boot without it refuses (`LostPublishedFile`).
#[test]
fn drop_prefix_keeps_the_file_holding_the_published_head() {
    let storage = SimStorage::recording(9);
    let wal = Wal::create(storage.clone(), dir(), config(), 1, 0).unwrap();
    let wal_files = || {
        wal.storage()
            .list_dir(dir())
            .unwrap()
            .into_iter()
            .filter(|e| e.name.to_string_lossy().ends_with(".wal"))
            .count()
    };
    // Append until op `n` starts a third file, then cut it off: the published head, op n - 1,
    // is now the last entry of the last file.
    let mut n = 0;
    while wal_files() < 3 {
        n += 1;
        wal.append_body(&body(n), 1, n).unwrap();
    }
    wal.truncate_after(n - 1).unwrap();
    let published = wal.published();
    assert_eq!(published.head_op, n - 1);
    // The same entry again, unpublished: it starts a new file after the published head's file.
    wal.append_body(&body(n), 1, n).unwrap();
    assert_eq!(wal_files(), 3);
    wal.drop_prefix(n - 1).unwrap();
    assert!(wal.first_op() < n, "the published head's file is kept");
    drop(wal);
    storage.power_loss();
    let (wal, report) = Wal::open(storage, dir(), config(), Mode::Open)
        .unwrap()
        .unwrap();
    assert_eq!(report.head_op, n - 1);
    assert_eq!(wal.read(n - 1, n - 1).unwrap()[0].body, body(n - 1));
}

/// A small publication writes zeros over the next megabyte past its entries, synced with them,
/// so the publications after it write into written blocks (no block-map update in their
/// `fdatasync`); those publications write no zeros of their own, and no zero ever lands on an
/// entry. (Publications that sync the log: with the carried ring, the small ones do not.)
#[test]
fn small_publications_write_zeros_ahead_once_per_megabyte() {
    use iggy_io::TraceOp;
    let storage = SimStorage::recording(9);
    let config = Config {
        file_size_bytes: 4 << 20,
        // Publications that sync the log (a carried one syncs it only every 16th, on the side).
        carry_small_publications: false,
        ..Config::new(7)
    };
    let wal = Wal::create(storage.clone(), dir(), config, 1, 0).unwrap();
    let file = dir().join(format!("{:020}.wal", 1));
    let zero_writes = |trace: &[TraceOp]| -> Vec<(u64, u64)> {
        trace
            .iter()
            .filter_map(|op| match op {
                TraceOp::Write {
                    path, offset, data, ..
                } if *path == file && data.iter().all(|&b| b == 0) => {
                    Some((*offset, *offset + data.len() as u64))
                }
                _ => None,
            })
            .collect()
    };
    let record = vec![7u8; 744]; // 1000 bytes with its header
    for _ in 0..10 {
        let op = wal.append_body(&record, 1, 0).unwrap();
        wal.wait_published(op).unwrap();
    }
    let trace = storage.trace();
    let zeros = zero_writes(&trace);
    assert_eq!(
        zeros.len(),
        1,
        "one run of zeros for ten small publications: {zeros:?}"
    );
    let (from, to) = zeros[0];
    assert_eq!(
        (from, to),
        (1000, 1000 + (1 << 20)),
        "right after the first entry"
    );
    // Synced by the same publication, before its frontier names the entry.
    let written = trace
        .iter()
        .position(|op| matches!(op, TraceOp::Write { path, offset, .. } if *path == file && *offset == from))
        .unwrap();
    let synced = trace[written..]
        .iter()
        .position(|op| matches!(op, TraceOp::SyncData { path, .. } if *path == file))
        .unwrap();
    let frontier = trace[written..]
        .iter()
        .position(|op| matches!(op, TraceOp::Write { path, .. } if path.ends_with("frontier")))
        .unwrap();
    assert!(synced < frontier);
    // Every entry reads back: the zeros went past them, and later entries over the zeros.
    for entry in wal.read(1, 10).unwrap() {
        assert_eq!(entry.body, record);
    }
}

/// `read_headers` returns what `read` does without the bodies, buffered entries included, and a
/// header that does not verify is refused with its file and offset.
#[test]
fn read_headers_verifies_each_header_without_reading_bodies() {
    let storage = SimStorage::new(9);
    let wal = Wal::create(storage.clone(), dir(), config(), 1, 0).unwrap();
    for op in 1..=30 {
        wal.append_body(&body(op), 1, op).unwrap();
        if op == 20 {
            wal.publish().unwrap();
        }
    }
    let headers = wal.read_headers(1, 30).unwrap();
    let entries = wal.read(1, 30).unwrap();
    assert_eq!(
        headers,
        entries.iter().map(|e| e.header).collect::<Vec<_>>()
    );
    assert!(matches!(
        wal.read_headers(0, 3),
        Err(WalError::OutOfRange { .. })
    ));
    // Rot one bit of op 12's header: refused at that entry, naming its file and offset.
    let location = wal.locate(12).unwrap();
    let file = wal
        .files()
        .into_iter()
        .find(|f| f.key == location.key)
        .unwrap();
    storage.rot(&file.path, location.offset + 40, 0x04).unwrap();
    match wal.read_headers(10, 14) {
        Err(WalError::Corrupt {
            file: at, offset, ..
        }) => {
            assert_eq!(at, file.path);
            assert_eq!(offset, location.offset);
        }
        other => panic!("{other:?}"),
    }
    assert!(wal.read_headers(13, 14).is_ok());
}
