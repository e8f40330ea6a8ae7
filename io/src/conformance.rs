//! The conformance suite every [`Storage`] backend must pass. Each check takes a fresh, empty
//! storage; [`crate::conformance_suite!`] turns the list into one `#[test]` per check.

use std::ffi::OsString;

use crate::error::ErrorKind;
use crate::storage::{DirEntry, EntryKind, OpenMode, ReadFile, Storage, WriteFile};

fn read_all<F: ReadFile>(file: &F) -> Vec<u8> {
    file.read_all().expect("read_all")
}

fn kind<T: std::fmt::Debug>(result: crate::Result<T>) -> ErrorKind {
    result.expect_err("expected an error").kind
}

pub fn write_read_roundtrip<S: Storage>(storage: &S) {
    let file = storage.open("f", OpenMode::CreateNew).expect("create");
    assert_eq!(file.len().expect("len"), 0);
    let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
    file.write_all_at(0, &data).expect("write");
    file.write_all_at(20_000, b"tail")
        .expect("write past the end");
    file.sync_data().expect("sync_data");
    file.sync_all().expect("sync_all");
    assert_eq!(file.len().expect("len"), 20_004);
    let back = read_all(&file);
    assert_eq!(&back[..10_000], &data[..]);
    assert!(
        back[10_000..20_000].iter().all(|&b| b == 0),
        "a gap reads as zeros"
    );
    assert_eq!(&back[20_000..], b"tail");
    let reader = storage.open_read("f").expect("open_read");
    assert_eq!(
        read_all(&reader),
        back,
        "a reader sees what the writer wrote"
    );
}

pub fn write_zeros_over_a_range<S: Storage>(storage: &S) {
    let file = storage.open("f", OpenMode::CreateNew).expect("create");
    file.write_all_at(0, &[0xEEu8; 3 << 20]).expect("write");
    // More than one internal chunk, starting and ending off any boundary.
    file.write_zeros(1000, (2 << 20) + 77).expect("write_zeros");
    let bytes = read_all(&file);
    let end = 1000 + (2 << 20) + 77;
    assert!(
        bytes[..1000].iter().all(|&b| b == 0xEE),
        "before the range is untouched"
    );
    assert!(
        bytes[1000..end].iter().all(|&b| b == 0),
        "the range reads as zeros"
    );
    assert!(
        bytes[end..].iter().all(|&b| b == 0xEE),
        "after the range is untouched"
    );
    file.write_zeros(bytes.len() as u64, 10)
        .expect("past the end");
    assert_eq!(
        file.len().expect("len"),
        bytes.len() as u64 + 10,
        "zeros past the end extend"
    );
}

pub fn write_and_sync_in_one_step<S: Storage>(storage: &S) {
    let file = storage.open("f", OpenMode::CreateNew).expect("create");
    let data: Vec<u8> = (0..=255u8).cycle().take(100_000).collect();
    file.write_all_and_sync_data(4096, &data)
        .expect("write and sync");
    file.write_all_and_sync_data(0, b"head")
        .expect("write and sync");
    let back = read_all(&file);
    assert_eq!(back.len(), 4096 + data.len());
    assert_eq!(&back[..4], b"head");
    assert!(back[4..4096].iter().all(|&b| b == 0));
    assert_eq!(&back[4096..], &data[..]);
}

/// A publication's chain: the data written and synced, then the record vouching for it; with
/// no data, only the sync and the record.
pub fn publication_chain<S: Storage>(storage: &S) {
    let log = storage.open("log", OpenMode::CreateNew).expect("create");
    let frontier = storage
        .open("frontier", OpenMode::CreateNew)
        .expect("create");
    let data: Vec<u8> = (0..=250u8).cycle().take(300_000).collect();
    let mut ran = 0;
    log.write_sync_then_write_sync(100, &data, &frontier, 4096, b"slot one", &mut || ran += 1)
        .expect("publish");
    log.write_sync_then_write_sync(0, &[], &frontier, 0, b"slot zero", &mut || ran += 1)
        .expect("publish nothing new");
    assert_eq!(ran, 2, "the in-flight work runs once per call");
    let back = read_all(&log);
    assert_eq!(back.len(), 100 + data.len());
    assert!(back[..100].iter().all(|&b| b == 0));
    assert_eq!(&back[100..], &data[..]);
    let slots = read_all(&frontier);
    assert_eq!(slots.len(), 4096 + 8);
    assert_eq!(&slots[..9], b"slot zero");
    assert_eq!(&slots[4096..], b"slot one");
}

/// `seek_data`/`seek_hole` may report holes only where the file reads as zeros, and must
/// report every byte that is not zero as data.
pub fn holes_read_as_zeros<S: Storage>(storage: &S) {
    let file = storage.open("f", OpenMode::CreateNew).expect("create");
    file.allocate(0, 1 << 20).expect("allocate");
    file.write_all_at(300_000, b"data in the middle")
        .expect("write");
    file.write_all_at((1 << 20) - 4, b"tail").expect("write");
    let bytes = read_all(&file);
    let mut offset = 0;
    let mut covered = Vec::new();
    while let Some(start) = file.seek_data(offset).expect("seek_data") {
        let end = file.seek_hole(start).expect("seek_hole");
        assert!(end > start, "a data region is not empty");
        assert!(
            bytes[usize::try_from(offset).expect("fits")..usize::try_from(start).expect("fits")]
                .iter()
                .all(|&b| b == 0),
            "the hole before {start} reads as zeros"
        );
        covered.push((start, end));
        offset = end;
    }
    assert!(
        bytes[usize::try_from(offset).expect("fits")..]
            .iter()
            .all(|&b| b == 0)
    );
    for needle in [300_000u64, (1 << 20) - 1] {
        assert!(
            covered
                .iter()
                .any(|(start, end)| *start <= needle && needle < *end),
            "non-zero byte {needle} is inside a data region: {covered:?}"
        );
    }
}

pub fn reads_at_and_past_the_end<S: Storage>(storage: &S) {
    let file = storage.open("f", OpenMode::Create).expect("create");
    file.write_all_at(0, b"abc").expect("write");
    let mut buf = [0u8; 8];
    assert_eq!(file.read_at(3, &mut buf).expect("read at end"), 0);
    assert_eq!(file.read_at(100, &mut buf).expect("read past end"), 0);
    let error = file
        .read_exact_at(1, &mut buf)
        .expect_err("read_exact past the end");
    assert_eq!(error.kind, ErrorKind::UnexpectedEof);
    assert!(
        error.offset.is_some(),
        "the error names the offset: {error}"
    );
}

pub fn open_modes<S: Storage>(storage: &S) {
    assert_eq!(
        kind(storage.open("f", OpenMode::Existing)),
        ErrorKind::NotFound
    );
    assert_eq!(kind(storage.open_read("f")), ErrorKind::NotFound);
    storage
        .open("f", OpenMode::CreateNew)
        .expect("create new")
        .write_all_at(0, b"x")
        .expect("write");
    assert_eq!(
        kind(storage.open("f", OpenMode::CreateNew)),
        ErrorKind::AlreadyExists
    );
    let again = storage
        .open("f", OpenMode::Create)
        .expect("create opens an existing file");
    assert_eq!(read_all(&again), b"x", "Create does not truncate");
    storage.open("f", OpenMode::Existing).expect("existing");
    assert_eq!(
        kind(storage.open("missing/f", OpenMode::Create)),
        ErrorKind::NotFound
    );
    storage.create_dir("d").expect("create_dir");
    assert_eq!(
        kind(storage.open("d", OpenMode::Existing)),
        ErrorKind::IsADirectory
    );
}

pub fn set_len_and_allocate<S: Storage>(storage: &S) {
    let file = storage.open("f", OpenMode::Create).expect("create");
    file.write_all_at(0, &[7u8; 100]).expect("write");
    file.set_len(10).expect("shrink");
    assert_eq!(read_all(&file), vec![7u8; 10]);
    file.set_len(50).expect("grow");
    let back = read_all(&file);
    assert_eq!(&back[..10], &[7u8; 10]);
    assert!(back[10..].iter().all(|&b| b == 0), "growth reads as zeros");
    file.allocate(0, 8192).expect("allocate");
    assert_eq!(file.len().expect("len"), 8192, "allocate grows the file");
    file.allocate(0, 100).expect("allocate inside");
    assert_eq!(file.len().expect("len"), 8192, "allocate never shrinks");
    assert!(read_all(&file)[10..].iter().all(|&b| b == 0));
}

pub fn directories<S: Storage>(storage: &S) {
    storage.create_dir("a").expect("create_dir a");
    storage.create_dir("a/b").expect("create_dir a/b");
    assert_eq!(kind(storage.create_dir("a")), ErrorKind::AlreadyExists);
    assert_eq!(kind(storage.create_dir("x/y")), ErrorKind::NotFound);
    storage.open("a/z", OpenMode::Create).expect("file in a");
    storage
        .open("a/b/c", OpenMode::Create)
        .expect("file in a/b");
    let entries = storage.list_dir("a").expect("list a");
    let expected = vec![
        DirEntry {
            name: OsString::from("b"),
            kind: EntryKind::Dir,
        },
        DirEntry {
            name: OsString::from("z"),
            kind: EntryKind::File,
        },
    ];
    assert_eq!(entries, expected);
    assert_eq!(storage.list_dir("").expect("list root").len(), 1);
    assert_eq!(kind(storage.list_dir("a/z")), ErrorKind::NotADirectory);
    assert!(storage.exists("a/b/c").expect("exists"));
    assert!(storage.exists("").expect("root exists"));
    assert!(!storage.exists("a/nope").expect("exists"));
    assert!(
        !storage
            .exists("nope/deeper")
            .expect("missing parent is false")
    );
    assert!(
        !storage
            .exists("a/z/deeper")
            .expect("a file as parent is false")
    );
    storage.sync_dir("a/b").expect("sync_dir");
    storage.sync_dir("").expect("sync root");
    storage.remove_dir_all("a").expect("remove_dir_all");
    assert!(!storage.exists("a").expect("exists"));
    assert!(storage.list_dir("").expect("list root").is_empty());
    assert_eq!(kind(storage.remove_dir_all("a")), ErrorKind::NotFound);
}

pub fn rename_link_unlink<S: Storage>(storage: &S) {
    let file = storage.open("x.tmp", OpenMode::Create).expect("create");
    file.write_all_at(0, b"new").expect("write");
    storage
        .open("x", OpenMode::Create)
        .expect("old")
        .write_all_at(0, b"old!")
        .expect("write");
    storage.rename("x.tmp", "x").expect("rename replaces");
    assert!(!storage.exists("x.tmp").expect("exists"));
    assert_eq!(read_all(&storage.open_read("x").expect("open")), b"new");
    file.write_all_at(3, b"+")
        .expect("handle follows the file across a rename");
    assert_eq!(read_all(&storage.open_read("x").expect("open")), b"new+");
    assert_eq!(kind(storage.rename("x.tmp", "y")), ErrorKind::NotFound);

    storage.hard_link("x", "y").expect("hard_link");
    assert_eq!(kind(storage.hard_link("x", "y")), ErrorKind::AlreadyExists);
    storage
        .open("y", OpenMode::Existing)
        .expect("y")
        .write_all_at(0, b"N")
        .expect("write");
    assert_eq!(
        read_all(&storage.open_read("x").expect("x")),
        b"New+",
        "one file, two names"
    );
    storage.unlink("x").expect("unlink");
    assert!(!storage.exists("x").expect("exists"));
    assert_eq!(read_all(&storage.open_read("y").expect("y")), b"New+");
    assert_eq!(kind(storage.unlink("x")), ErrorKind::NotFound);

    storage.create_dir("d").expect("dir");
    storage
        .rename("y", "d/y")
        .expect("rename across directories");
    storage.rename("d", "e").expect("rename a directory");
    assert!(storage.exists("e/y").expect("exists"));
    assert_eq!(kind(storage.unlink("e")), ErrorKind::IsADirectory);
}

pub fn paths_outside_the_root_are_refused<S: Storage>(storage: &S) {
    for bad in ["../x", "/etc/x", "a/../../x", "/", ".."] {
        let is_invalid = |k: ErrorKind| matches!(k, ErrorKind::InvalidPath(_));
        assert!(
            is_invalid(kind(storage.open(bad, OpenMode::Create))),
            "open {bad}"
        );
        assert!(is_invalid(kind(storage.open_read(bad))), "open_read {bad}");
        assert!(
            is_invalid(kind(storage.create_dir(bad))),
            "create_dir {bad}"
        );
        assert!(is_invalid(kind(storage.unlink(bad))), "unlink {bad}");
        assert!(is_invalid(kind(storage.rename("f", bad))), "rename {bad}");
        assert!(is_invalid(kind(storage.list_dir(bad))), "list_dir {bad}");
        assert!(is_invalid(kind(storage.exists(bad))), "exists {bad}");
    }
}

/// Generates one `#[test]` per conformance check. `$make` is an expression that returns
/// `(storage, guard)`: the guard (a temp dir, say) lives as long as the test.
/// A lock is exclusive: a second taker fails at once naming the holder's pid, a probe sees the
/// holder without taking the lock, and dropping the lock frees it.
pub fn sync_filesystem_where_offered<S: Storage>(storage: &S) {
    let file = storage.open("f", OpenMode::CreateNew).expect("create");
    file.write_all_at(0, b"data").expect("write");
    storage.create_dir("d").expect("create_dir");
    let result = storage.sync_filesystem();
    if storage.can_sync_filesystem() {
        result.expect("sync_filesystem where the storage offers it");
        storage
            .sync_filesystem()
            .expect("a second sync_filesystem with nothing new");
    } else {
        assert!(
            matches!(kind(result), ErrorKind::Unsupported(_)),
            "a storage that cannot syncfs refuses instead of pretending"
        );
    }
    assert_eq!(read_all(&file), b"data");
}

pub fn locks_are_exclusive_until_dropped<S: Storage>(storage: &S) {
    assert_eq!(storage.lock_holder("lock").expect("probe"), None, "no file");
    let held = storage.lock("lock").expect("lock");
    let holder = storage.lock_holder("lock").expect("probe").expect("held");
    assert!(holder.pid.is_some(), "the holder wrote its pid");
    match kind(storage.lock("lock")) {
        ErrorKind::Locked { pid } => assert_eq!(pid, holder.pid),
        other => panic!("a second lock: {other:?}"),
    }
    assert_eq!(
        storage.lock_holder("lock").expect("probe").map(|h| h.pid),
        Some(holder.pid),
        "a probe does not take or free the lock"
    );
    drop(held);
    assert_eq!(storage.lock_holder("lock").expect("probe"), None, "freed");
    drop(storage.lock("lock").expect("lock again"));
}

#[macro_export]
macro_rules! conformance_suite {
    ($make:expr) => {
        $crate::conformance_suite!(@each $make;
            write_read_roundtrip,
            write_and_sync_in_one_step,
            publication_chain,
            write_zeros_over_a_range,
            holes_read_as_zeros,
            reads_at_and_past_the_end,
            open_modes,
            set_len_and_allocate,
            directories,
            rename_link_unlink,
            paths_outside_the_root_are_refused,
            sync_filesystem_where_offered,
            locks_are_exclusive_until_dropped
        );
    };
    (@each $make:expr; $($check:ident),*) => {
        $(
            #[test]
            fn $check() {
                let (storage, _guard) = ($make)();
                $crate::conformance::$check(&storage);
            }
        )*
    };
}
