//! Things that are not regular files are never opened, and locks are per holder, freed by a
//! crash.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use iggy_io::{
    EntryKind, ErrorKind, OpenMode, OsStorage, ReadOnly, ReadStorage, SimStorage, Storage,
};

/// A FIFO where a file should be: listed as `Other`, and every open refuses at once with
/// `NotAFile` (before this, `open_read` blocked forever waiting for a writer).
#[test]
fn a_fifo_is_listed_and_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        dir.path().join("index"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    let storage = OsStorage::open(dir.path()).unwrap();
    let entries = storage.list_dir("").unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].kind, EntryKind::Other);
    assert_eq!(
        storage.open_read("index").unwrap_err().kind,
        ErrorKind::NotAFile
    );
    for mode in [OpenMode::Existing, OpenMode::Create] {
        assert_eq!(
            storage.open("index", mode).unwrap_err().kind,
            ErrorKind::NotAFile
        );
    }
    // A probe of a lock "file" that is a FIFO refuses the same way, without blocking.
    assert_eq!(
        ReadOnly::new(storage.clone())
            .lock_holder("index")
            .unwrap_err()
            .kind,
        ErrorKind::NotAFile
    );
    // It can still be removed by name.
    storage.unlink("index").unwrap();
}

/// Two opens of the same directory are two holders: the second is refused with the first's pid
/// (as another process would be).
#[test]
fn a_lock_held_through_one_open_refuses_another() {
    let dir = tempfile::tempdir().unwrap();
    let first = OsStorage::open(dir.path()).unwrap();
    let second = OsStorage::open(dir.path()).unwrap();
    let held = first.lock("lock").unwrap();
    let error = second.lock("lock").unwrap_err();
    assert_eq!(
        error.kind,
        ErrorKind::Locked {
            pid: Some(std::process::id())
        }
    );
    assert!(error.to_string().contains("locked by process"), "{error}");
    drop(held);
    drop(second.lock("lock").unwrap());
}

/// A simulated process crash (or power loss) frees the crashed process's locks, as the kernel
/// does; a lock dropped after the crash does not free a new holder's.
#[test]
fn a_crash_frees_the_simulated_lock() {
    let storage = SimStorage::new(1);
    let before = storage.lock("lock").unwrap();
    assert!(storage.lock("lock").is_err());
    storage.crash_process();
    let after = storage.lock("lock").unwrap();
    drop(before);
    assert!(storage.lock_holder("lock").unwrap().is_some(), "still held");
    drop(after);
    storage.power_loss();
    assert_eq!(storage.lock_holder("lock").unwrap(), None);
}

/// The mount under a path is named (what a benchmark measured), and a file system that keeps
/// files in memory is called out.
#[test]
fn the_mount_under_a_path_is_found_and_tmpfs_is_called_out() {
    let dir = tempfile::tempdir().unwrap();
    let mount = iggy_io::mount_info(dir.path()).unwrap();
    assert!(
        dir.path()
            .canonicalize()
            .unwrap()
            .starts_with(&mount.mount_point)
    );
    assert!(
        !mount.file_system.is_empty() && !mount.options.is_empty(),
        "{mount:?}"
    );
    if let Some(shm) = iggy_io::mount_info("/dev/shm").filter(|m| m.file_system == "tmpfs") {
        let warning = shm.warning().unwrap();
        assert!(warning.contains("fdatasync reaches no disk"), "{warning}");
    }
    let root = iggy_io::mount_info("/").unwrap();
    assert_eq!(root.mount_point, std::path::Path::new("/"));
}
