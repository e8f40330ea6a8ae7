//! Each boot refusal has its own error, and damage inside the published prefix is never
//! truncated away: boot names the file and the offset.
#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    reason = "test code: a failed unwrap is a failed test; casts are of small test values"
)]

use std::path::{Path, PathBuf};

use iggy_io::{OpenMode, ReadStorage, SimStorage, Storage, WriteFile};
use iggy_wal::frontier::{self, Frontier};
use iggy_wal::{Config, FindingKind, Mode, StopReason, Wal, WalError, check, check_named};

const GROUP: u128 = 9;

fn config() -> Config {
    Config {
        file_size_bytes: 4096,
        flush_bytes: 1024,
        // The slots' refusals (the carried ring's are in `carried.rs`).
        carry_small_publications: false,
        ..Config::new(GROUP)
    }
}

fn dir() -> &'static Path {
    Path::new("wal")
}

/// A log of 30 published entries over several files, and the bodies written.
fn published_log() -> (SimStorage, Vec<Vec<u8>>) {
    let storage = SimStorage::new(11);
    let wal = Wal::create(storage.clone(), dir(), config(), 1, 0).unwrap();
    let bodies: Vec<Vec<u8>> = (0..30u8)
        .map(|i| vec![i; 300 + usize::from(i) * 11])
        .collect();
    for body in &bodies {
        wal.append_body(body, 1, 0).unwrap();
    }
    wal.publish().unwrap();
    (storage, bodies)
}

fn wal_files(storage: &SimStorage) -> Vec<PathBuf> {
    storage
        .list_dir(dir())
        .unwrap()
        .into_iter()
        .map(|e| dir().join(e.name))
        .filter(|p| p.extension().is_some_and(|x| x == "wal"))
        .collect()
}

fn refusal(storage: &SimStorage) -> WalError {
    let checked = check(storage, dir(), GROUP).unwrap_err();
    let opened = Wal::open(storage.clone(), dir(), config(), Mode::Open).unwrap_err();
    assert_eq!(checked, opened, "check and open refuse alike");
    checked
}

fn frontier_slots(storage: &SimStorage) -> [Result<Frontier, frontier::SlotError>; 2] {
    let bytes = storage.read_all(dir().join("frontier")).unwrap();
    [0, 1].map(|slot| frontier::decode(&bytes[slot * frontier::SLOT_SIZE..], slot))
}

fn write_frontier_bytes(storage: &SimStorage, offset: u64, bytes: &[u8]) {
    let file = storage
        .open(dir().join("frontier"), OpenMode::Existing)
        .unwrap();
    file.write_all_at(offset, bytes).unwrap();
    file.sync_data().unwrap();
}

#[test]
fn a_rotten_byte_in_the_published_prefix_refuses_naming_file_and_offset() {
    let (storage, _) = published_log();
    let files = wal_files(&storage);
    let victim = &files[1];
    // Find the entry boundaries of the victim file by reading it back through the log.
    let (wal, _) = Wal::open(storage.fork(), dir(), config(), Mode::Open)
        .unwrap()
        .unwrap();
    let first_op: u64 = victim
        .file_stem()
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let entries = wal.read(first_op, first_op + 1).unwrap();
    let second_entry_offset = u64::from(entries[0].header.size);
    // A byte inside the body of the victim file's second entry.
    storage
        .rot(victim, second_entry_offset + 300, 0x04)
        .unwrap();
    let expect_named = |error: WalError| match error {
        WalError::Corrupt {
            file,
            offset,
            reason,
        } => {
            assert_eq!(&file, victim);
            assert_eq!(
                offset, second_entry_offset,
                "names the damaged entry's offset"
            );
            assert_eq!(reason, StopReason::Body { op: first_op + 1 });
        }
        other => panic!("{other}"),
    };
    // The victim is sealed (the frontier passed it): boot takes its entries from the seal and
    // does not read the body, but every read of the entry verifies it and refuses to serve it.
    let (sealed, _) = Wal::open(storage.fork(), dir(), config(), Mode::Open)
        .unwrap()
        .unwrap();
    expect_named(sealed.read(first_op + 1, first_op + 1).unwrap_err());
    assert_eq!(
        sealed.read(first_op, first_op).unwrap()[0].body,
        entries[0].body,
        "the undamaged entry beside it is served"
    );
    // A deep verification reads every body: it refuses, naming file and offset.
    let deep = iggy_wal::boot::check_verifying(
        &storage,
        dir(),
        GROUP,
        iggy_wal::Naming::ByOp,
        iggy_wal::boot::Verify::Everything,
    );
    expect_named(deep.unwrap_err());
    // Without its seal the file is scanned, and boot itself refuses.
    let unsealed = storage.fork();
    unsealed.unlink(iggy_wal::seal::path_for(victim)).unwrap();
    expect_named(refusal(&unsealed));
    let at = usize::try_from(second_entry_offset).unwrap() + 300;
    assert_eq!(
        storage.read_all(victim).unwrap()[at],
        entries[1].body[300 - 256] ^ 0x04,
        "the damaged byte is still there: nothing was truncated or rewritten"
    );
}

#[test]
fn wal_files_without_a_frontier_refuse() {
    let (storage, _) = published_log();
    storage.unlink(dir().join("frontier")).unwrap();
    assert!(matches!(
        refusal(&storage),
        WalError::HistoryWithoutFrontier { .. }
    ));
}

#[test]
fn both_frontier_slots_unreadable_refuse() {
    let (storage, _) = published_log();
    storage.rot(dir().join("frontier"), 40, 1).unwrap();
    storage.rot(dir().join("frontier"), 4096 + 40, 1).unwrap();
    assert!(matches!(
        refusal(&storage),
        WalError::FrontierUnreadable { .. }
    ));
}

#[test]
fn an_unknown_frontier_version_refuses() {
    let (storage, _) = published_log();
    let bytes = storage.read_all(dir().join("frontier")).unwrap();
    let mut slot: Vec<u8> = bytes[..4096].to_vec();
    slot[40] = 3; // version 3
    let sum = iggy_format::checksum(&slot[32..]);
    slot[..16].copy_from_slice(&sum.to_le_bytes());
    write_frontier_bytes(&storage, 0, &slot);
    let error = refusal(&storage);
    assert!(
        matches!(
            error,
            WalError::FrontierRefused {
                slot: 0,
                error: frontier::SlotError::UnknownVersion { version: 3 },
                ..
            }
        ),
        "{error}"
    );
}

#[test]
fn another_groups_log_refuses() {
    let (storage, _) = published_log();
    let error = check(&storage, dir(), GROUP + 1).unwrap_err();
    assert!(
        matches!(
            error,
            WalError::GroupMismatch {
                expected: 10,
                found: 9,
                ..
            }
        ),
        "{error}"
    );
}

#[test]
fn a_head_file_shorter_than_the_published_length_refuses() {
    let (storage, _) = published_log();
    let newest = frontier_slots(&storage)
        .into_iter()
        .flatten()
        .max_by_key(|f| f.sequence)
        .unwrap();
    let head = dir().join(format!("{:020}.wal", newest.head_file));
    storage
        .open(&head, OpenMode::Existing)
        .unwrap()
        .set_len(newest.published_length - 1)
        .unwrap();
    let error = refusal(&storage);
    assert!(
        matches!(error, WalError::LostPublishedBytes { .. }),
        "{error}"
    );
}

#[test]
fn a_missing_head_file_refuses() {
    let (storage, _) = published_log();
    let files = wal_files(&storage);
    storage.unlink(files.last().unwrap()).unwrap();
    assert!(matches!(
        refusal(&storage),
        WalError::LostPublishedFile { .. }
    ));
}

#[test]
fn a_frontier_that_names_another_head_refuses() {
    let (storage, _) = published_log();
    let newest = frontier_slots(&storage)
        .into_iter()
        .flatten()
        .max_by_key(|f| f.sequence)
        .unwrap();
    let forged = Frontier {
        sequence: newest.sequence + 1,
        head_checksum: newest.head_checksum ^ 1,
        ..newest
    };
    write_frontier_bytes(&storage, forged.offset(), &frontier::encode(&forged));
    assert!(matches!(refusal(&storage), WalError::HeadMismatch { .. }));
}

#[test]
fn a_missing_middle_file_is_a_hole() {
    let (storage, _) = published_log();
    let files = wal_files(&storage);
    assert!(files.len() >= 4, "{files:?}");
    storage.unlink(&files[1]).unwrap();
    let error = refusal(&storage);
    assert!(
        matches!(&error, WalError::Hole { file, .. } if file == &files[2]),
        "{error}"
    );
}

#[test]
fn an_unreadable_newest_slot_adopts_the_verified_entries_past_the_older_one() {
    let (storage, bodies) = published_log();
    let wal = Wal::open(storage.clone(), dir(), config(), Mode::Open)
        .unwrap()
        .unwrap()
        .0;
    wal.append_body(b"thirty-one", 1, 0).unwrap();
    wal.publish().unwrap(); // sequence n: head 31; the other slot holds head 30
    let newest = wal.published();
    drop(wal);
    storage
        .rot(dir().join("frontier"), newest.offset() + 90, 0x10)
        .unwrap();
    let report = check(&storage, dir(), GROUP).unwrap().unwrap();
    assert!(
        report
            .findings
            .iter()
            .any(|f| matches!(f.kind, FindingKind::FrontierSlotDamaged { .. }))
    );
    assert!(report.findings.iter().any(|f| matches!(
        f.kind,
        FindingKind::Adopted {
            entries: 1,
            head_op: 31
        }
    )));
    let (wal, opened) = Wal::open(storage.clone(), dir(), config(), Mode::Open)
        .unwrap()
        .unwrap();
    assert_eq!(opened, report);
    assert_eq!(
        wal.head().0,
        31,
        "the acknowledged entry behind the rotten slot survives"
    );
    let entries = wal.read(1, 31).unwrap();
    assert_eq!(entries[30].body, b"thirty-one");
    assert_eq!(
        entries[..30]
            .iter()
            .map(|e| e.body.clone())
            .collect::<Vec<_>>(),
        bodies
    );
    assert!(
        check(&storage, dir(), GROUP).unwrap().unwrap().is_clean(),
        "the slot was repaired"
    );
}

/// A file from another history spliced in under the right name: every entry in it verifies on
/// its own, but its first entry does not name the previous file's last. The cross-file link
/// (checked after the files are verified in parallel) must refuse it at offset 0.
#[test]
fn a_file_from_another_history_breaks_the_link_between_files() {
    let (storage, _) = published_log();
    let other = SimStorage::new(99);
    let wal = Wal::create(other.clone(), dir(), config(), 1, 0xDEAD).unwrap();
    for i in 0..30u8 {
        wal.append_body(&vec![i; 300 + usize::from(i) * 11], 1, 0)
            .unwrap();
    }
    wal.publish().unwrap();
    let ours = wal_files(&storage);
    let theirs = wal_files(&other);
    assert_eq!(ours[1], theirs[1], "same layout, so the same file names");
    let bytes = other.read_all(&theirs[1]).unwrap();
    let file = storage.open(&ours[1], OpenMode::Existing).unwrap();
    file.write_all_at(0, &bytes).unwrap();
    file.sync_data().unwrap();
    let first_op: u64 = ours[1]
        .file_stem()
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    match refusal(&storage) {
        WalError::Corrupt {
            file,
            offset: 0,
            reason: StopReason::Parent { op },
        } => {
            assert_eq!(file, ours[1]);
            assert_eq!(op, first_op);
        }
        other => panic!("{other}"),
    }
}

#[test]
fn a_keyed_log_refuses_a_retained_file_whose_first_header_is_rotten() {
    let storage = SimStorage::new(12);
    let config = Config {
        naming: iggy_wal::Naming::ByKey,
        ..config()
    };
    let wal = Wal::create_keyed(storage.clone(), dir(), config.clone(), 1, 0, 100).unwrap();
    for i in 0..30u64 {
        let body = vec![i as u8; 300 + i as usize * 11];
        let (head, parent) = wal.head();
        let header = iggy_wal::next_header(GROUP, head + 1, parent, 1, 0, &body);
        wal.append_keyed(&header, &body, 100 + (head + 1) * 10)
            .unwrap();
    }
    wal.publish().unwrap();
    drop(wal);
    let logs: Vec<PathBuf> = storage
        .list_dir(dir())
        .unwrap()
        .into_iter()
        .map(|e| dir().join(e.name))
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    assert!(logs.len() >= 3, "{logs:?}");
    // Intact, it boots clean with every entry.
    let report = check_named(&storage, dir(), GROUP, iggy_wal::Naming::ByKey)
        .unwrap()
        .unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(report.head_op, 30);
    let victim = &logs[1];
    storage.rot(victim, 70, 0x01).unwrap();
    let checked = check_named(&storage, dir(), GROUP, iggy_wal::Naming::ByKey).unwrap_err();
    let opened = Wal::open(storage.clone(), dir(), config, Mode::Open).unwrap_err();
    assert_eq!(checked, opened);
    match checked {
        WalError::Corrupt {
            file,
            offset: 0,
            reason: StopReason::Header(_),
        } => assert_eq!(&file, victim),
        other => panic!("{other:?}"),
    }
}

/// Found by the partition soak: behind an unreadable newest slot, boot falls back to the older
/// one; when that one predates a `drop_prefix`, the files left do not continue its chain. Those
/// entries may be published history, so boot refuses (rule 6) instead of discarding them as
/// files beyond the frontier, and changes nothing on disk.
#[test]
fn behind_an_unreadable_slot_entries_the_chain_does_not_reach_refuse() {
    let storage = SimStorage::new(13);
    let wal = Wal::create(storage.clone(), dir(), config(), 1, 0).unwrap();
    for i in 0..30u8 {
        wal.append_body(&vec![i; 300 + usize::from(i) * 11], 1, 0)
            .unwrap();
    }
    let published = wal.publish().unwrap();
    assert_eq!(published.sequence, 2, "one publication after creation");
    assert!(wal.drop_prefix(published.head_op).unwrap() >= 1);
    drop(wal);
    // The newest slot rots; the other still holds the creation record (an empty log).
    write_frontier_bytes(&storage, published.offset() + 100, &[0xFF]);
    let files_before = wal_files(&storage);
    match refusal(&storage) {
        WalError::Hole { file, .. } => assert_eq!(file, files_before[0]),
        other => panic!("{other:?}"),
    }
    assert_eq!(wal_files(&storage), files_before, "nothing was removed");
}
