//! Boot's rules where a mutation test found no test that would notice a change: file names,
//! the offsets and byte counts boot reports, the plan moved to another directory, what a keyed
//! log makes of its odd files, and the fallback behind an unreadable frontier slot.
#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    reason = "test code: a failed unwrap is a failed test; casts are of small test values"
)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use iggy_io::{OpenMode, ReadStorage, SimStorage, Storage, WriteFile};
use iggy_wal::boot::{self, FRONTIER_FILE};
use iggy_wal::frontier::{self, Frontier, SlotError};
use iggy_wal::{
    Config, FindingKind, Mode, Naming, StopReason, Wal, WalError, check, check_named, next_header,
};

const GROUP: u128 = 0x5E;

fn config() -> Config {
    Config {
        file_size_bytes: 4096,
        flush_bytes: 1024,
        ..Config::new(GROUP)
    }
}

fn keyed() -> Config {
    Config {
        naming: Naming::ByKey,
        ..config()
    }
}

fn dir() -> &'static Path {
    Path::new("wal")
}

/// `count` published entries of a few hundred bytes each, over several files.
fn published(storage: &SimStorage, count: u8) -> Wal<SimStorage> {
    let wal = Wal::create(storage.clone(), dir(), config(), 1, 0).unwrap();
    for i in 0..count {
        wal.append_body(&vec![i; 300 + usize::from(i) * 11], 1, 0)
            .unwrap();
    }
    // Synced: these tests damage the log itself, with no carried copy to restore from.
    wal.publish_synced().unwrap();
    wal
}

/// A keyed log whose entries carry `body(i)`, keyed `100 + op * 10`.
fn keyed_log(storage: &SimStorage, config: &Config, bodies: &[Vec<u8>]) -> Wal<SimStorage> {
    let wal = Wal::create_keyed(storage.clone(), dir(), config.clone(), 1, 0, 110).unwrap();
    for body in bodies {
        let (head, parent) = wal.head();
        let header = next_header(GROUP, head + 1, parent, 1, 0, body);
        wal.append_keyed(&header, body, 100 + (head + 1) * 10)
            .unwrap();
    }
    // Synced: these tests damage the log itself, with no carried copy to restore from.
    wal.publish_synced().unwrap();
    wal
}

fn files(storage: &SimStorage, extension: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = storage
        .list_dir(dir())
        .unwrap()
        .into_iter()
        .map(|e| dir().join(e.name))
        .filter(|p| p.extension().is_some_and(|x| x == extension))
        .collect();
    files.sort();
    files
}

fn write_at(storage: &SimStorage, path: impl AsRef<Path>, offset: u64, bytes: &[u8]) {
    let file = storage.open(path, OpenMode::Existing).unwrap();
    file.write_all_at(offset, bytes).unwrap();
    file.sync_data().unwrap();
}

fn newest_slot(storage: &SimStorage) -> Frontier {
    let bytes = storage.read_all(dir().join(FRONTIER_FILE)).unwrap();
    frontier::decode_file(&bytes)
        .into_iter()
        .flatten()
        .max_by_key(|f| f.sequence)
        .unwrap()
}

#[test]
fn file_names_parse_only_in_their_canonical_form() {
    for naming in [Naming::ByOp, Naming::ByKey] {
        let name = naming.file_name(42);
        assert_eq!(name.len(), 24, "{name}");
        assert_eq!(naming.parse(OsStr::new(&name)), Some(42));
        let extension = name.rsplit('.').next().unwrap();
        for odd in [
            format!("42.{extension}"),
            format!("0000000000000000000042.{extension}"),
            format!("0000000000000000004x.{extension}"),
            "00000000000000000042".to_string(),
            format!("00000000000000000042.{extension}.tmp"),
        ] {
            assert_eq!(naming.parse(OsStr::new(&odd)), None, "{odd}");
        }
    }
    assert_eq!(
        boot::parse_file_name(OsStr::new("00000000000000000042.wal")),
        Some(42)
    );
    assert_eq!(
        boot::parse_file_name(OsStr::new("00000000000000000007.wal")),
        Some(7)
    );
    assert_eq!(
        boot::parse_file_name(OsStr::new("00000000000000000042.log")),
        None
    );
    assert_eq!(boot::file_name(7), "00000000000000000007.wal");
}

/// A plan made where a directory is now, carried out where it will be: every path moves.
#[test]
fn a_rebased_plan_names_the_new_directory() {
    let storage = SimStorage::new(1);
    drop(published(&storage, 10));
    // An unpublished tail, so the plan zeroes bytes in a named file.
    let head = files(&storage, "wal").pop().unwrap();
    let end = iggy_wal::check(&storage, dir(), GROUP)
        .unwrap()
        .unwrap()
        .files
        .last()
        .unwrap()
        .end;
    assert!(end + 256 <= 4096, "room for a header after the entries");
    write_at(&storage, &head, end, b"tail");
    let mut plan = boot::plan(&storage, dir(), GROUP, Naming::ByOp)
        .unwrap()
        .unwrap();
    assert!(!plan.report().findings.is_empty());
    plan.rebase(dir(), Path::new("moved"));
    let report = plan.report();
    assert_eq!(report.dir, Path::new("moved"));
    for finding in &report.findings {
        assert!(finding.file.starts_with("moved"), "{finding:?}");
    }
    for file in &report.files {
        assert!(file.path.starts_with("moved"), "{file:?}");
    }
    // Carried out there, it boots the log that moved.
    storage.rename(dir(), "moved").unwrap();
    let (wal, _) = Wal::open_planned(storage.clone(), Path::new("moved"), config(), plan).unwrap();
    assert_eq!(wal.head().0, 10);
    assert!(
        check(&storage, Path::new("moved"), GROUP)
            .unwrap()
            .unwrap()
            .is_clean()
    );
}

/// A damaged or refused slot is named by its own offset in the frontier file.
#[test]
fn frontier_findings_and_refusals_name_the_slot_offset() {
    for slot in 0..2usize {
        let storage = SimStorage::new(2);
        let wal = published(&storage, 3);
        // Publish once more so that both slots hold a valid frontier.
        wal.append_body(b"more", 1, 0).unwrap();
        wal.publish().unwrap();
        drop(wal);
        let offset = (slot * frontier::SLOT_SIZE) as u64;
        let damaged = storage.fork();
        write_at(&damaged, dir().join(FRONTIER_FILE), offset + 90, &[0xEE]);
        let report = check(&damaged, dir(), GROUP).unwrap().unwrap();
        let finding = report
            .findings
            .iter()
            .find(|f| matches!(f.kind, FindingKind::FrontierSlotDamaged { .. }))
            .unwrap();
        assert_eq!(
            (finding.offset, finding.bytes),
            (offset, frontier::SLOT_SIZE as u64),
            "slot {slot}"
        );
        // A slot of an unknown version (resealed) refuses, naming its slot and offset.
        let bytes = storage.read_all(dir().join(FRONTIER_FILE)).unwrap();
        let at = slot * frontier::SLOT_SIZE;
        let mut one = bytes[at..at + frontier::SLOT_SIZE].to_vec();
        one[40] = 9;
        let sum = iggy_format::checksum(&one[32..]);
        one[..16].copy_from_slice(&sum.to_le_bytes());
        write_at(&storage, dir().join(FRONTIER_FILE), offset, &one);
        match check(&storage, dir(), GROUP).unwrap_err() {
            WalError::FrontierRefused {
                slot: named,
                offset: at,
                error: SlotError::UnknownVersion { version: 9 },
                ..
            } => assert_eq!((named, at), (slot, offset)),
            other => panic!("slot {slot}: {other:?}"),
        }
    }
}

/// A file a group's log does not know is reported (and left alone); in a keyed log (a
/// partition directory, which holds its indexes and offsets too) it is not the log's to name.
#[test]
fn unknown_files_are_reported_in_a_group_log_only() {
    let storage = SimStorage::new(3);
    drop(published(&storage, 3));
    let stray = storage
        .open(dir().join("notes.txt"), OpenMode::CreateNew)
        .unwrap();
    stray.write_all_at(0, b"x").unwrap();
    drop(stray);
    let report = check(&storage, dir(), GROUP).unwrap().unwrap();
    let unknown: Vec<_> = report
        .findings
        .iter()
        .filter(|f| f.kind == FindingKind::UnknownFile)
        .map(|f| f.file.clone())
        .collect();
    assert_eq!(unknown, [dir().join("notes.txt")]);

    let storage = SimStorage::new(4);
    drop(keyed_log(&storage, &keyed(), &[vec![1u8; 100]]));
    let stray = storage
        .open(dir().join("notes.txt"), OpenMode::CreateNew)
        .unwrap();
    stray.write_all_at(0, b"x").unwrap();
    drop(stray);
    let report = check_named(&storage, dir(), GROUP, Naming::ByKey)
        .unwrap()
        .unwrap();
    assert!(report.is_clean(), "{:?}", report.findings);
}

/// The hole a missing file leaves is named with the op expected there.
#[test]
fn a_missing_file_names_the_op_expected() {
    let storage = SimStorage::new(5);
    let wal = published(&storage, 30);
    let listed = wal.files();
    drop(wal);
    assert!(listed.len() >= 4);
    storage.unlink(&listed[1].path).unwrap();
    match check(&storage, dir(), GROUP).unwrap_err() {
        WalError::Hole {
            file,
            expected,
            found,
        } => {
            assert_eq!(file, listed[2].path);
            assert_eq!(expected, listed[1].first_op);
            assert_eq!(found, listed[2].first_op);
        }
        other => panic!("{other:?}"),
    }
}

/// A whole file past the frontier: reported with its bytes, counted as discarded, removed.
#[test]
fn a_file_beyond_the_frontier_counts_its_bytes_as_discarded() {
    let storage = SimStorage::new(6);
    let wal = published(&storage, 8);
    let head = wal.head().0;
    drop(wal);
    // A file the crashed process started after the last publication.
    let name = dir().join(boot::file_name(head + 1));
    let file = storage.open(&name, OpenMode::CreateNew).unwrap();
    let body = b"never published";
    let header = next_header(GROUP, head + 1, 0, 1, 0, body);
    file.write_all_at(0, &header.encode()).unwrap();
    file.write_all_at(256, body).unwrap();
    drop(file);
    let report = check(&storage, dir(), GROUP).unwrap().unwrap();
    let beyond: Vec<_> = report
        .findings
        .iter()
        .filter(|f| matches!(f.kind, FindingKind::FileBeyondFrontier { .. }))
        .collect();
    assert_eq!(beyond.len(), 1, "{:?}", report.findings);
    assert_eq!(beyond[0].bytes, 256 + body.len() as u64);
    assert_eq!(report.discarded_bytes, beyond[0].bytes);
    let (_, opened) = Wal::open(storage.clone(), dir(), config(), Mode::Open)
        .unwrap()
        .unwrap();
    assert_eq!(opened, report);
    assert!(!storage.exists(&name).unwrap());
}

/// Entries with empty bodies in files of exactly one header each: a file of 256 bytes holds an
/// entry, and boot reads every one.
#[test]
fn a_keyed_file_of_one_header_holds_an_entry() {
    let storage = SimStorage::new(7);
    let config = Config {
        file_size_bytes: 256,
        ..keyed()
    };
    let wal = keyed_log(&storage, &config, &[Vec::new(), Vec::new(), Vec::new()]);
    assert_eq!(wal.files().len(), 3);
    drop(wal);
    for file in files(&storage, "log") {
        assert_eq!(storage.read_all(&file).unwrap().len(), 256);
    }
    let report = check_named(&storage, dir(), GROUP, Naming::ByKey)
        .unwrap()
        .unwrap();
    assert!(report.is_clean(), "{:?}", report.findings);
    assert_eq!(report.head_op, 3);
}

/// A retained keyed file (before the head) whose first header is zeros: refused at offset 0,
/// saying zeros (never taken for the log's end).
#[test]
fn a_retained_keyed_file_that_starts_with_zeros_refuses() {
    let storage = SimStorage::new(8);
    let bodies: Vec<Vec<u8>> = (0..30u8).map(|i| vec![i; 300]).collect();
    drop(keyed_log(&storage, &keyed(), &bodies));
    let logs = files(&storage, "log");
    assert!(logs.len() >= 3);
    write_at(&storage, &logs[1], 0, &[0u8; 256]);
    match check_named(&storage, dir(), GROUP, Naming::ByKey).unwrap_err() {
        WalError::Corrupt {
            file,
            offset: 0,
            reason: StopReason::Zeros,
        } => assert_eq!(file, logs[1]),
        other => panic!("{other:?}"),
    }
}

/// A keyed file past the head that is a copy of a published one (its first op is at or below
/// the published head): another log's, never deleted as an unpublished tail.
#[test]
fn a_copy_of_a_published_file_past_the_head_refuses_as_foreign() {
    let storage = SimStorage::new(9);
    let bodies: Vec<Vec<u8>> = (0..30u8).map(|i| vec![i; 300]).collect();
    let wal = keyed_log(&storage, &keyed(), &bodies);
    let head = wal.head().0;
    drop(wal);
    let logs = files(&storage, "log");
    let copy = dir().join(Naming::ByKey.file_name(100 + (head + 5) * 10));
    let bytes = storage.read_all(&logs[0]).unwrap();
    let file = storage.open(&copy, OpenMode::CreateNew).unwrap();
    file.write_all_at(0, &bytes).unwrap();
    drop(file);
    match check_named(&storage, dir(), GROUP, Naming::ByKey).unwrap_err() {
        WalError::ForeignFile {
            file,
            first_op,
            head_op,
            ..
        } => {
            assert_eq!(file, copy);
            assert_eq!((first_op, head_op), (1, head));
        }
        other => panic!("{other:?}"),
    }
}

/// Behind an unreadable newest slot, boot adopts entries past the older slot's head, across
/// into the next file; the frontier it writes names the file they end in (by first op and key),
/// so the next boot is clean.
#[test]
fn adoption_behind_an_unreadable_slot_crosses_into_the_next_file_and_reboots_clean() {
    let storage = SimStorage::new(10);
    let wal = published(&storage, 5);
    let older = wal.published();
    let files_before = wal.files().len();
    // Enough to start new files; published once, so only the newest slot names them.
    for i in 0..12u8 {
        wal.append_body(&vec![i; 700], 1, 0).unwrap();
    }
    let newest = wal.publish().unwrap();
    assert!(
        wal.files().len() > files_before,
        "the appends started a new file"
    );
    let last = wal.files().last().unwrap().clone();
    drop(wal);
    assert_ne!(older.head_file, newest.head_file);
    write_at(
        &storage,
        dir().join(FRONTIER_FILE),
        newest.offset() + 90,
        &[0xEE],
    );
    let (wal, report) = Wal::open(storage.clone(), dir(), config(), Mode::Open)
        .unwrap()
        .unwrap();
    assert!(report.findings.iter().any(|f| matches!(
        f.kind,
        FindingKind::Adopted {
            entries: 12,
            head_op: 17
        }
    )));
    assert_eq!(wal.head().0, 17);
    let rewritten = wal.published();
    assert_eq!(
        (rewritten.head_file, rewritten.head_file_key),
        (last.first_op, last.key)
    );
    drop(wal);
    let again = check(&storage, dir(), GROUP).unwrap().unwrap();
    assert!(again.is_clean(), "{:?}", again.findings);
    assert_eq!(again.head_op, 17);
    assert_eq!(newest_slot(&storage).head_op, 17);
}

/// Behind an unreadable slot, a later file that holds nothing verifiable is discarded (it cannot
/// be published history); one holding entries the chain does not reach refuses, naming the op
/// the chain expected.
#[test]
fn behind_an_unreadable_slot_a_later_file_refuses_only_if_it_holds_entries() {
    for garbage in [true, false] {
        let storage = SimStorage::new(11);
        let wal = published(&storage, 5);
        wal.append_body(b"six", 1, 0).unwrap();
        let newest = wal.publish().unwrap();
        let head = wal.head().0;
        drop(wal);
        write_at(
            &storage,
            dir().join(FRONTIER_FILE),
            newest.offset() + 90,
            &[0xEE],
        );
        // A later file that does not continue the chain.
        let name = dir().join(boot::file_name(head + 3));
        let file = storage.open(&name, OpenMode::CreateNew).unwrap();
        if garbage {
            file.write_all_at(0, &[0xAB; 300]).unwrap();
        } else {
            let body = b"later";
            let header = next_header(GROUP, head + 3, 0, 1, 0, body);
            file.write_all_at(0, &header.encode()).unwrap();
            file.write_all_at(256, body).unwrap();
        }
        drop(file);
        let result = check(&storage, dir(), GROUP);
        if garbage {
            let report = result.unwrap().unwrap();
            assert!(report.findings.iter().any(|f| f.file == name
                && matches!(f.kind, FindingKind::FileBeyondFrontier { entries: 0 })));
        } else {
            match result.unwrap_err() {
                WalError::Hole {
                    file,
                    expected,
                    found,
                } => {
                    assert_eq!(file, name);
                    assert_eq!((expected, found), (head + 1, head + 3));
                }
                other => panic!("{other:?}"),
            }
        }
    }
}

/// A frontier (valid by its checksum) that says "no bytes published" while naming published
/// ops, with its head file gone: not the empty log it half resembles; refused as a lost file.
#[test]
fn a_frontier_that_contradicts_itself_about_an_empty_log_refuses() {
    let storage = SimStorage::new(12);
    let wal = published(&storage, 3);
    let frontier = wal.published();
    drop(wal);
    for file in files(&storage, "wal") {
        storage.unlink(file).unwrap();
    }
    let forged = Frontier {
        sequence: frontier.sequence + 1,
        published_length: 0,
        ..frontier
    };
    write_at(
        &storage,
        dir().join(FRONTIER_FILE),
        forged.offset(),
        &frontier::encode(&forged),
    );
    assert!(matches!(
        check(&storage, dir(), GROUP).unwrap_err(),
        WalError::LostPublishedFile { .. }
    ));
}

/// A log written with header version 1 (before the replicated header) is refused with the file,
/// the offset and the version, never read as damage to discard or repair.
#[test]
fn a_version_1_entry_is_refused_by_name() {
    for entry in [0usize, 1] {
        let storage = SimStorage::new(13);
        let wal = published(&storage, 6);
        let first = wal.files()[0].clone();
        let offset = if entry == 0 {
            0
        } else {
            wal.locate(first.first_op + 1).unwrap().offset
        };
        drop(wal);
        let mut header =
            storage.read_all(&first.path).unwrap()[offset as usize..offset as usize + 256].to_vec();
        header[iggy_format::header::VERSION_OFFSET..][..2].copy_from_slice(&1u16.to_le_bytes());
        let sum = iggy_format::checksum(&header[16..]);
        header[..16].copy_from_slice(&sum.to_le_bytes());
        write_at(&storage, &first.path, offset, &header);
        let checked = check(&storage, dir(), GROUP).unwrap_err();
        let opened = Wal::open(storage.clone(), dir(), config(), Mode::Open).unwrap_err();
        assert_eq!(checked, opened);
        match checked {
            WalError::UnknownEntryVersion {
                file,
                offset: at,
                version: 1,
            } => assert_eq!((file, at), (first.path.clone(), offset)),
            other => panic!("entry {entry}: {other:?}"),
        }
        assert!(opened.to_string().contains("version 1"), "{opened}");
    }
}

/// Every entry names its consensus group: the log refuses to journal another group's, boot
/// refuses a published entry of another group (damage, or a file spliced in from another group's
/// log), and a file past the frontier that starts with another group's entry is not an
/// unpublished tail to delete.
#[test]
fn another_groups_entries_are_refused_where_they_appear() {
    let storage = SimStorage::new(14);
    let wal = published(&storage, 6);
    let (head, parent) = wal.head();
    let foreign = next_header(GROUP + 1, head + 1, parent, 1, 0, b"theirs");
    match wal.append(&foreign, b"theirs") {
        Err(WalError::BadEntry { op, reason }) => {
            assert_eq!(op, head + 1);
            assert!(reason.contains("another group"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(wal.head().0, head, "nothing was journaled");
    let first = wal.files()[0].clone();
    let location = wal.locate(first.first_op + 1).unwrap();
    drop(wal);

    // A file past the frontier that starts with another group's entry (its op past the head).
    let name = dir().join(boot::file_name(head + 1));
    let file = storage.open(&name, OpenMode::CreateNew).unwrap();
    let header = next_header(GROUP + 1, head + 1, parent, 1, 0, b"theirs");
    file.write_all_at(0, &header.encode()).unwrap();
    file.write_all_at(256, b"theirs").unwrap();
    drop(file);
    match check(&storage, dir(), GROUP).unwrap_err() {
        WalError::ForeignFile {
            file,
            group,
            first_op,
            ..
        } => assert_eq!((file, group, first_op), (name.clone(), GROUP + 1, head + 1)),
        other => panic!("{other:?}"),
    }
    storage.unlink(&name).unwrap();

    // A published entry resealed as another group's: refused where it lies.
    let offset = location.offset;
    let mut bytes = storage.read_all(&first.path).unwrap()[offset as usize..][..256].to_vec();
    bytes[iggy_format::header::GROUP_OFFSET..][..16].copy_from_slice(&(GROUP + 1).to_le_bytes());
    let sum = iggy_format::checksum(&bytes[16..]);
    bytes[..16].copy_from_slice(&sum.to_le_bytes());
    write_at(&storage, &first.path, offset, &bytes);
    match check(&storage, dir(), GROUP).unwrap_err() {
        WalError::Corrupt {
            file,
            offset: at,
            reason: StopReason::Group { op, found },
        } => {
            assert_eq!((file, at), (first.path.clone(), offset));
            assert_eq!((op, found), (first.first_op + 1, GROUP + 1));
        }
        other => panic!("{other:?}"),
    }
}

/// An empty log whose head file is gone, beside a file of a lower key that holds entries (a
/// file of another log put there): an empty log has no history, so the file is foreign; boot
/// refuses and never deletes it as if it were an unpublished tail (a mutation test found boot
/// taking it for a retained file of no entries).
#[test]
fn a_lower_keyed_file_beside_an_empty_log_is_never_deleted() {
    let storage = SimStorage::new(15);
    let config = keyed();
    drop(Wal::create_keyed(storage.clone(), dir(), config.clone(), 1, 0, 500).unwrap());
    let head = dir().join(Naming::ByKey.file_name(500));
    storage.unlink(&head).unwrap();
    // Another log's published file, under a lower key.
    let other = SimStorage::new(16);
    let bodies: Vec<Vec<u8>> = (0..3u8).map(|i| vec![i; 100]).collect();
    drop(keyed_log(&other, &config, &bodies));
    let theirs = files(&other, "log").remove(0);
    let bytes = other.read_all(&theirs).unwrap();
    let planted = dir().join(Naming::ByKey.file_name(300));
    let file = storage.open(&planted, OpenMode::CreateNew).unwrap();
    file.write_all_at(0, &bytes).unwrap();
    drop(file);
    let checked = check_named(&storage, dir(), GROUP, Naming::ByKey).unwrap_err();
    let opened = Wal::open(storage.clone(), dir(), config, Mode::Open).unwrap_err();
    assert_eq!(checked, opened);
    match checked {
        WalError::ForeignFile { file, first_op, .. } => {
            assert_eq!((file, first_op), (planted.clone(), 1));
        }
        other => panic!("{other:?}"),
    }
    assert!(storage.exists(&planted).unwrap(), "the file was deleted");
}
