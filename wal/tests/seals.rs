//! Seals: what boot takes instead of reading a file the frontier passed, and every way a seal
//! that does not describe its file is set aside (the file is scanned) or removed.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::path::{Path, PathBuf};

use iggy_io::{OpenMode, ReadStorage, SimStorage, Storage, WriteFile};
use iggy_wal::boot::Verify;
use iggy_wal::seal::{self, Seal};
use iggy_wal::{Config, FindingKind, Mode, Naming, Report, Wal, check};

const GROUP: u128 = 0x5EA1;

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

fn body(i: u64) -> Vec<u8> {
    vec![u8::try_from(i % 251).unwrap(); 300 + usize::try_from(i % 7).unwrap() * 50]
}

/// 40 entries over several files, published (and synced, so the ring holds nothing boot needs).
fn published(storage: &SimStorage) -> Wal<SimStorage> {
    let wal = Wal::create(storage.clone(), dir(), config(), 1, 0).unwrap();
    for i in 1..=40 {
        wal.append_body(&body(i), 1, i).unwrap();
    }
    wal.publish_synced().unwrap();
    wal
}

/// The files in the log's directory with `extension`, sorted.
fn listed(storage: &SimStorage, extension: &str) -> Vec<PathBuf> {
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

fn log_files(storage: &SimStorage) -> Vec<PathBuf> {
    listed(storage, "wal")
}

fn seals(storage: &SimStorage) -> Vec<PathBuf> {
    listed(storage, "seal")
}

fn report(storage: &SimStorage) -> Report {
    check(storage, dir(), GROUP).unwrap().unwrap()
}

/// What a scan of every file gives: the seals may change how much boot reads, never what it
/// trusts.
fn deep(storage: &SimStorage) -> Report {
    iggy_wal::boot::check_verifying(storage, dir(), GROUP, Naming::ByOp, Verify::Everything)
        .unwrap()
        .unwrap()
}

fn same_trust(sealed: &Report, deep: &Report) {
    assert_eq!(sealed.files, deep.files, "the same files and entries");
    assert_eq!(sealed.head_op, deep.head_op);
    assert_eq!(sealed.durable_bytes, deep.durable_bytes);
    assert_eq!(deep.sealed_bytes, 0, "a deep check reads everything");
}

#[test]
fn every_file_the_frontier_passed_is_sealed_and_boot_reads_only_the_head_file() {
    let storage = SimStorage::new(1);
    drop(published(&storage));
    let files = log_files(&storage);
    assert!(files.len() >= 4, "{files:?}");
    let expected: Vec<PathBuf> = files[..files.len() - 1]
        .iter()
        .map(|f| seal::path_for(f))
        .collect();
    assert_eq!(seals(&storage), expected, "every file but the head file");
    let sealed = report(&storage);
    let head = sealed.files.last().unwrap();
    assert_eq!(
        sealed.sealed_bytes,
        sealed.durable_bytes - head.end,
        "every byte before the head file came from seals"
    );
    assert!(sealed.is_clean(), "{:?}", sealed.findings);
    same_trust(&sealed, &deep(&storage));
    // And the log booted from seals serves every entry.
    let (wal, _) = Wal::open(storage.fork(), dir(), config(), Mode::Open)
        .unwrap()
        .unwrap();
    let entries = wal.read(1, 40).unwrap();
    for (i, entry) in (1..).zip(&entries) {
        assert_eq!(entry.body, body(i), "op {i}");
    }
}

#[test]
fn a_log_without_seals_is_sealed_by_its_first_publication_after_boot() {
    let storage = SimStorage::new(2);
    drop(published(&storage));
    for seal in seals(&storage) {
        storage.unlink(seal).unwrap();
    }
    let scanned = report(&storage);
    assert_eq!(scanned.sealed_bytes, 0);
    let (wal, _) = Wal::open(storage.clone(), dir(), config(), Mode::Open)
        .unwrap()
        .unwrap();
    wal.append_body(b"one more", 1, 41).unwrap();
    wal.publish().unwrap();
    drop(wal);
    let resealed = report(&storage);
    assert!(resealed.sealed_bytes > 0, "sealed again");
    same_trust(&resealed, &deep(&storage));
}

/// Every way a seal can fail to describe its file: each is set aside (the file scanned, the
/// trusted prefix the same) and none is a finding, since nothing on disk is wrong but the seal.
#[test]
fn a_seal_that_does_not_describe_its_file_is_set_aside() {
    let storage = SimStorage::new(3);
    drop(published(&storage));
    let victim = seal::path_for(&log_files(&storage)[1]);
    let good = storage.read_all(&victim).unwrap();
    let decoded = seal::decode(&good).unwrap();
    let all_sealed = report(&storage).sealed_bytes;
    let victim_bytes = decoded.end;
    let variants: Vec<(&str, Vec<u8>)> = vec![
        ("torn", good[..good.len() / 2].to_vec()),
        ("rotten", {
            let mut bytes = good.clone();
            bytes[good.len() - 1] ^= 1;
            bytes
        }),
        (
            "another group's",
            seal::encode(&Seal {
                group: GROUP + 1,
                ..decoded.clone()
            }),
        ),
        (
            "a wrong parent",
            seal::encode(&Seal {
                first_parent: decoded.first_parent ^ 1,
                ..decoded.clone()
            }),
        ),
        (
            "a wrong last checksum",
            seal::encode(&Seal {
                last_checksum: decoded.last_checksum ^ 1,
                ..decoded.clone()
            }),
        ),
        ("one entry short", {
            let mut offsets = decoded.offsets.clone();
            let last = offsets.pop().unwrap();
            seal::encode(&Seal {
                offsets,
                end: last,
                ..decoded.clone()
            })
        }),
    ];
    for (what, bytes) in variants {
        let forked = storage.fork();
        let file = forked.open(&victim, OpenMode::Existing).unwrap();
        file.set_len(0).unwrap();
        file.write_all_at(0, &bytes).unwrap();
        let checked = report(&forked);
        assert_eq!(
            checked.sealed_bytes,
            all_sealed - victim_bytes,
            "{what}: only that file is scanned"
        );
        assert!(checked.is_clean(), "{what}: {:?}", checked.findings);
        same_trust(&checked, &deep(&forked));
    }
}

#[test]
fn a_seal_beside_the_head_file_or_beside_no_file_is_removed_and_never_trusted() {
    let storage = SimStorage::new(4);
    let wal = published(&storage);
    let files = log_files(&storage);
    let old_seals: Vec<(PathBuf, Vec<u8>)> = seals(&storage)
        .into_iter()
        .map(|p| {
            let bytes = storage.read_all(&p).unwrap();
            (p, bytes)
        })
        .collect();
    // A cut back into the second file: its seal and every later one go with it.
    let cut = seal::decode(&old_seals[1].1).unwrap().first_op + 1;
    wal.truncate_after(cut).unwrap();
    let after_cut = seals(&storage);
    assert_eq!(
        after_cut,
        vec![old_seals[0].0.clone()],
        "only the first stays"
    );
    // New entries of another size over the cut: the cut file now holds other bytes.
    for i in 0..3 {
        wal.append_body(&[0xEE; 900], 2, i).unwrap();
    }
    wal.publish_synced().unwrap();
    drop(wal);
    // A crash that lost the seals' removal: the cut file's old seal and a removed file's.
    let removed = &old_seals[old_seals.len() - 1];
    for (path, bytes) in [&old_seals[1], removed] {
        let file = storage.open(path, OpenMode::Create).unwrap();
        file.write_all_at(0, bytes).unwrap();
    }
    let checked = report(&storage);
    let stale: Vec<&PathBuf> = checked
        .findings
        .iter()
        .filter(|f| f.kind == FindingKind::StaleSeal)
        .map(|f| &f.file)
        .collect();
    assert!(stale.contains(&&removed.0), "{:?}", checked.findings);
    let head_file = checked.files.last().unwrap().path.clone();
    // The cut file's old seal is stale when that file is still the head; otherwise its file
    // holds other entries now and the seal fails its end checks (`same_trust` shows it was not
    // taken: its offsets are not the file's).
    assert_eq!(
        stale.contains(&&old_seals[1].0),
        head_file == files[1],
        "{:?}",
        checked.findings
    );
    same_trust(&checked, &deep(&storage));
    let (_, opened) = Wal::open(storage.clone(), dir(), config(), Mode::Open)
        .unwrap()
        .unwrap();
    assert_eq!(opened, checked, "open does what check said");
    for path in stale {
        assert!(!storage.exists(path).unwrap(), "{} removed", path.display());
    }
    assert!(report(&storage).is_clean());
}

#[test]
fn rot_between_a_sealed_files_two_ends_is_refused_by_the_read_and_by_a_deep_check() {
    // The seal proves a file's two ends, not what lies between: a body changed in the middle
    // (rot after it was written) boots, is refused by the read that would serve it, and by a
    // deep check. `refusals.rs` shows the same damage refused by boot without the seal.
    let storage = SimStorage::new(5);
    drop(published(&storage));
    let victim = log_files(&storage)[1].clone();
    let decoded = seal::decode(&storage.read_all(seal::path_for(&victim)).unwrap()).unwrap();
    assert!(decoded.offsets.len() >= 3, "{decoded:?}");
    let middle = decoded.offsets[1] + 256 + 10;
    storage.rot(&victim, middle, 0x10).unwrap();
    let checked = report(&storage);
    assert!(checked.is_clean());
    assert!(
        checked.sealed_bytes >= decoded.end,
        "the victim came from its seal"
    );
    let error =
        iggy_wal::boot::check_verifying(&storage, dir(), GROUP, Naming::ByOp, Verify::Everything)
            .unwrap_err();
    assert!(
        matches!(&error, iggy_wal::WalError::Corrupt { file, offset, .. }
            if *file == victim && *offset == decoded.offsets[1]),
        "{error}"
    );
    let (wal, _) = Wal::open(storage.fork(), dir(), config(), Mode::Open)
        .unwrap()
        .unwrap();
    let op = decoded.first_op + 1;
    assert!(matches!(
        wal.read(op, op),
        Err(iggy_wal::WalError::Corrupt { file, offset, .. })
            if file == victim && offset == decoded.offsets[1]
    ));
}

#[test]
fn a_seal_written_with_wrong_sizes_is_found_by_a_deep_check_and_refused_by_reads() {
    // Its two ends verify, so boot takes it (the seal's checks prove a file's ends, and its
    // sizes are what its writer knew). The read that meets a wrong offset refuses, naming the
    // file; a deep check reads the file, finds the seal disagrees, and removes it.
    let storage = SimStorage::new(6);
    drop(published(&storage));
    let victim_file = log_files(&storage)[1].clone();
    let victim = seal::path_for(&victim_file);
    let decoded = seal::decode(&storage.read_all(&victim).unwrap()).unwrap();
    let mut offsets = decoded.offsets.clone();
    offsets[1] += 1;
    let file = storage.open(&victim, OpenMode::Existing).unwrap();
    file.write_all_at(
        0,
        &seal::encode(&Seal {
            offsets,
            ..decoded.clone()
        }),
    )
    .unwrap();
    let (wal, _) = Wal::open(storage.fork(), dir(), config(), Mode::Open)
        .unwrap()
        .unwrap();
    let op = decoded.first_op + 1;
    assert!(matches!(
        wal.read(op, op),
        Err(iggy_wal::WalError::Corrupt { file, .. }) if file == victim_file
    ));
    let deep = deep(&storage);
    assert_eq!(
        deep.findings
            .iter()
            .filter(|f| f.kind == FindingKind::SealDisagrees)
            .map(|f| &f.file)
            .collect::<Vec<_>>(),
        vec![&victim]
    );
}

#[test]
fn boot_reads_a_seals_fixed_fields_not_its_sizes_and_the_first_read_loads_them() {
    let storage = SimStorage::new(7);
    drop(published(&storage));
    let checked = report(&storage);
    let head_entries = checked.files.last().unwrap().entries;
    assert!(head_entries < 40, "{:?}", checked.files);
    let (wal, _) = Wal::open(storage.fork(), dir(), config(), Mode::Open)
        .unwrap()
        .unwrap();
    assert_eq!(
        wal.offsets_in_memory(),
        head_entries,
        "only the head file's offsets after boot"
    );
    let entries = wal.read(1, 40).unwrap();
    assert_eq!(entries.len(), 40);
    assert_eq!(wal.offsets_in_memory(), 40, "every file read is loaded");
    let first = checked.files[0].entries;
    assert_eq!(
        wal.locate(first + 1).unwrap().offset,
        0,
        "a file's first entry"
    );
}

#[test]
fn a_seal_whose_sizes_rot_is_taken_at_boot_and_its_first_read_reads_the_file_and_writes_it_again() {
    let storage = SimStorage::new(8);
    drop(published(&storage));
    let all_sealed = report(&storage).sealed_bytes;
    let victim = seal::path_for(&log_files(&storage)[1]);
    let good = seal::decode(&storage.read_all(&victim).unwrap()).unwrap();
    assert!(good.offsets.len() >= 3, "{good:?}");
    // The first entry's size: neither the fixed fields boot checks nor the last size.
    storage
        .rot(&victim, seal::HEADER_BYTES as u64 + 1, 0x10)
        .unwrap();
    assert!(seal::decode(&storage.read_all(&victim).unwrap()).is_err());
    let checked = report(&storage);
    assert_eq!(
        checked.sealed_bytes, all_sealed,
        "boot still takes the seal"
    );
    assert!(checked.is_clean(), "{:?}", checked.findings);
    let (wal, _) = Wal::open(storage.clone(), dir(), config(), Mode::Open)
        .unwrap()
        .unwrap();
    let entries = wal.read(1, 40).unwrap();
    for (i, entry) in (1..).zip(&entries) {
        assert_eq!(entry.body, body(i), "op {i}");
    }
    let rewritten = seal::decode(&storage.read_all(&victim).unwrap()).unwrap();
    assert_eq!(rewritten, good, "the seal written again from the file");
}

#[test]
fn a_file_whose_seal_sizes_and_an_entry_both_rot_is_refused_by_the_read_naming_file_and_offset() {
    let storage = SimStorage::new(9);
    drop(published(&storage));
    let victim = log_files(&storage)[1].clone();
    let good = seal::decode(&storage.read_all(seal::path_for(&victim)).unwrap()).unwrap();
    storage
        .rot(seal::path_for(&victim), seal::HEADER_BYTES as u64 + 1, 0x10)
        .unwrap();
    storage
        .rot(&victim, good.offsets[1] + 256 + 10, 0x10)
        .unwrap();
    let (wal, _) = Wal::open(storage.fork(), dir(), config(), Mode::Open)
        .unwrap()
        .unwrap();
    let op = good.first_op + 2;
    let error = wal.read(op, op).unwrap_err();
    assert!(
        matches!(&error, iggy_wal::WalError::Corrupt { file, offset, .. }
            if *file == victim && *offset == good.offsets[1]),
        "{error}"
    );
    assert!(
        matches!(wal.locate(op), Err(iggy_wal::WalError::Corrupt { .. })),
        "locate refuses too"
    );
}

#[test]
fn past_its_limit_a_log_lets_sealed_offsets_go_and_still_serves_every_read() {
    let storage = SimStorage::new(10);
    let config = Config {
        sealed_offsets_in_memory: 2,
        ..config()
    };
    let wal = Wal::create(storage.clone(), dir(), config.clone(), 1, 0).unwrap();
    for i in 1..=200 {
        wal.append_body(&body(i), 1, i).unwrap();
        if i % 10 == 0 {
            wal.publish().unwrap();
        }
    }
    wal.publish_synced().unwrap();
    let files = wal.files();
    assert!(files.len() > 10, "{files:?}");
    let widest = files.iter().map(|f| f.entries).max().unwrap();
    let bound = files.last().unwrap().entries + 2 * widest;
    assert!(
        wal.offsets_in_memory() <= bound,
        "{} offsets in memory after writing, at most {bound}",
        wal.offsets_in_memory()
    );
    drop(wal);
    let (wal, _) = Wal::open(storage.fork(), dir(), config, Mode::Open)
        .unwrap()
        .unwrap();
    // Forward in one read, then back one entry at a time: files are let go and loaded again.
    let entries = wal.read(1, 200).unwrap();
    for (i, entry) in (1..).zip(&entries) {
        assert_eq!(entry.body, body(i), "op {i}");
    }
    assert!(wal.offsets_in_memory() <= bound);
    for op in (1..=200).rev() {
        assert_eq!(wal.read(op, op).unwrap()[0].body, body(op), "op {op}");
        assert!(wal.offsets_in_memory() <= bound, "after op {op}");
    }
}

#[test]
fn a_cut_into_a_file_boot_took_from_its_seal_loads_its_offsets_first() {
    let storage = SimStorage::new(11);
    drop(published(&storage));
    let files = report(&storage).files;
    let victim = &files[1];
    assert!(victim.entries >= 3, "{files:?}");
    let op = victim.first_op + 1;
    let (wal, _) = Wal::open(storage.clone(), dir(), config(), Mode::Open)
        .unwrap()
        .unwrap();
    wal.truncate_after(op).unwrap();
    assert_eq!(wal.head().0, op);
    assert_eq!(wal.files().last().unwrap().first_op, victim.first_op);
    for i in op + 1..=op + 5 {
        wal.append_body(&body(i + 1000), 1, i).unwrap();
    }
    wal.publish_synced().unwrap();
    drop(wal);
    let (wal, _) = Wal::open(storage.fork(), dir(), config(), Mode::Open)
        .unwrap()
        .unwrap();
    let entries = wal.read(1, op + 5).unwrap();
    for (i, entry) in (1..).zip(&entries) {
        let expected = if i <= op { body(i) } else { body(i + 1000) };
        assert_eq!(entry.body, expected, "op {i}");
    }
}
