//! Node directories for the fsck tests and the golden fixtures: a populated node, optionally
//! booted clean, with one kind of damage applied.
#![allow(
    dead_code,
    clippy::unwrap_used,
    reason = "test code: each file uses a subset; a failed unwrap is a failed test"
)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use iggy_io::{EntryKind, OpenMode, OsStorage, ReadFile, ReadStorage, Storage, WriteFile};
use iggy_recovery::populate::{Options, populate};
use iggy_recovery::{Mode, boot};

/// Each fixture kind and the exit code `iggy-fsck` must give it.
pub const KINDS: [(&str, u8); 8] = [
    ("clean", 0),
    ("unpublished", 1),
    ("rebuild-index", 1),
    ("leftover", 1),
    ("rollback-install", 1),
    ("repair-copy", 1),
    ("needs-peer-repair", 2),
    ("refuse", 4),
];

pub fn options() -> Options {
    Options {
        partitions: 3,
        batches: 14,
        unpublished_batches: 2,
        segment_size_bytes: 4096,
        metadata_file_bytes: 16 << 10,
        max_messages: 3,
        replicas: 3,
    }
}

pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures")
}

fn read_all(storage: &OsStorage, path: &Path) -> Vec<u8> {
    storage.open_read(path).unwrap().read_all().unwrap()
}

fn write_at(storage: &OsStorage, path: &Path, offset: u64, bytes: &[u8]) {
    let file = storage.open(path, OpenMode::Existing).unwrap();
    file.write_all_at(offset, bytes).unwrap();
    file.sync_data().unwrap();
}

/// The byte offsets of the first entries of a segment file (from their headers).
pub fn entry_offsets(storage: &OsStorage, path: &Path, count: usize) -> Vec<u64> {
    let bytes = read_all(storage, path);
    let mut offsets = Vec::new();
    let mut at = 0usize;
    for _ in 0..count {
        offsets.push(at as u64);
        let header = iggy_format::Header::decode(&bytes[at..at + 256]).unwrap();
        at += header.size as usize;
    }
    offsets
}

/// Writes a node of kind `kind` into `root` (created).
pub fn build(kind: &str, root: &Path) -> OsStorage {
    let storage = OsStorage::create(root).unwrap();
    populate(&storage, Path::new(""), &options()).unwrap();
    if kind != "unpublished" {
        boot(storage.clone(), Path::new(""), Mode::Open).unwrap();
    }
    let partition = |n: u32| PathBuf::from(format!("partitions/1.1.{n}"));
    match kind {
        "clean" | "unpublished" => {}
        "rebuild-index" => {
            storage
                .unlink(partition(1).join("00000000000000000000.index"))
                .unwrap();
        }
        "leftover" => {
            let path = partition(3).join("00000000000000009999.log.staging");
            let file = storage.open(&path, OpenMode::CreateNew).unwrap();
            file.write_all_at(0, b"a segment received for an install that never ran")
                .unwrap();
        }
        "rollback-install" => {
            // The backup of an install that stopped right after its backup was renamed into
            // place: links to every live file, a copy of the superblock.
            let dir = partition(2);
            let backup = dir.join(".install-backup");
            storage.create_dir(&backup).unwrap();
            for entry in storage.list_dir(&dir).unwrap() {
                let name = entry.name.to_string_lossy().into_owned();
                if name.starts_with('.') {
                    continue;
                }
                if entry.kind == EntryKind::Dir {
                    storage.create_dir(backup.join(&name)).unwrap();
                    for inner in storage.list_dir(dir.join(&name)).unwrap() {
                        storage
                            .hard_link(
                                dir.join(&name).join(&inner.name),
                                backup.join(&name).join(&inner.name),
                            )
                            .unwrap();
                    }
                } else if name == "superblock" {
                    let bytes = read_all(&storage, &dir.join(&name));
                    let copy = storage
                        .open(backup.join(&name), OpenMode::CreateNew)
                        .unwrap();
                    copy.write_all_at(0, &bytes).unwrap();
                } else {
                    storage
                        .hard_link(dir.join(&name), backup.join(&name))
                        .unwrap();
                }
            }
        }
        "repair-copy" => {
            let path = partition(1).join("superblock");
            let mut byte = read_all(&storage, &path)[4096 + 100];
            byte ^= 0x20;
            write_at(&storage, &path, 4096 + 100, &[byte]);
        }
        "needs-peer-repair" => {
            let path = partition(2).join("00000000000000000000.log");
            let second = entry_offsets(&storage, &path, 2)[1];
            let at = second + 256 + 10;
            let mut byte = read_all(&storage, &path)[usize::try_from(at).unwrap()];
            byte ^= 0x01;
            write_at(&storage, &path, at, &[byte]);
            // Its seal (and the index's summary that relies on it) lost, as a power loss can
            // lose them: the check reads the file and meets the damage. With the seal, the
            // read that serves the batch or `--deep` finds it (`fsck/tests/fixtures.rs`).
            let seal = iggy_wal::seal::path_for(&path);
            if storage.exists(&seal).unwrap() {
                storage.unlink(&seal).unwrap();
            }
        }
        "refuse" => {
            use iggy_superblock::copy::{self, Slot};
            let path = partition(3).join("superblock");
            let bytes = read_all(&storage, &path);
            let (record, _) = copy::decode(&bytes, Slot::A).unwrap();
            write_at(
                &storage,
                &path,
                0,
                &copy::encode_with_version(&record, Slot::A, 9),
            );
        }
        other => panic!("unknown fixture kind {other}"),
    }
    // The lock file holds the pid of the last writer: left out so that regenerating the
    // fixtures does not change them (a node that never had a writer has none either).
    if storage.exists(iggy_recovery::LOCK_FILE).unwrap() {
        storage.unlink(iggy_recovery::LOCK_FILE).unwrap();
    }
    storage
}

/// XXH3-128 of every file under `root`, by relative path.
pub fn hash_tree(root: &Path) -> BTreeMap<PathBuf, u128> {
    let storage = OsStorage::open(root).unwrap();
    let mut hashes = BTreeMap::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(dir) = pending.pop() {
        for entry in storage.list_dir(&dir).unwrap() {
            let path = dir.join(&entry.name);
            match entry.kind {
                EntryKind::Dir => pending.push(path),
                EntryKind::File => {
                    let bytes = read_all(&storage, &path);
                    hashes.insert(path, iggy_format::checksum(&bytes));
                }
                // A FIFO or device: present, never read.
                EntryKind::Other => {
                    hashes.insert(path, 0);
                }
            }
        }
    }
    hashes
}

/// Copies the tree under `from` to `to` (created).
pub fn copy_tree(from: &Path, to: &Path) {
    let source = OsStorage::open(from).unwrap();
    let target = OsStorage::create(to).unwrap();
    let mut pending = vec![PathBuf::new()];
    while let Some(dir) = pending.pop() {
        for entry in source.list_dir(&dir).unwrap() {
            let path = dir.join(&entry.name);
            if entry.kind == EntryKind::Dir {
                target.create_dir(&path).unwrap();
                pending.push(path);
            } else {
                let bytes = read_all(&source, &path);
                let file = target.open(&path, OpenMode::CreateNew).unwrap();
                file.write_all_at(0, &bytes).unwrap();
            }
        }
    }
}

/// Runs `iggy-fsck` in process; returns the exit code, stdout and stderr.
pub fn fsck_all(args: &[&str]) -> (u8, String, String) {
    let mut out = Vec::new();
    let mut err = Vec::new();
    let mut input: &[u8] = b"";
    let mut argv = vec!["iggy-fsck"];
    argv.extend_from_slice(args);
    let code = iggy_fsck::run(argv, &mut out, &mut err, &mut input);
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

/// Runs `iggy-fsck` in process; returns the exit code and stdout.
pub fn fsck(args: &[&str]) -> (u8, String) {
    let mut out = Vec::new();
    let mut err = Vec::new();
    let mut input: &[u8] = b"";
    let mut argv = vec!["iggy-fsck"];
    argv.extend_from_slice(args);
    let code = iggy_fsck::run(argv, &mut out, &mut err, &mut input);
    (code, String::from_utf8(out).unwrap())
}
