//! The conformance suite on every backend: the real file system, the simulator, and both under
//! the short-I/O wrapper.

#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    reason = "test code: a failed unwrap is a failed test; casts are of small test values"
)]

mod os {
    // The default: io_uring for durable appends where the kernel allows it.
    iggy_io::conformance_suite!(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        (
            iggy_io::OsStorage::open(dir.path()).expect("open root"),
            dir,
        )
    });
}

mod os_syscalls {
    // The fallback: plain system calls only.
    iggy_io::conformance_suite!(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage = iggy_io::OsStorage::open_with(dir.path(), iggy_io::IoPath::Syscalls);
        (storage.expect("open root"), dir)
    });
}

/// The io_uring path is really taken where the kernel allows it (CI sets
/// `IGGY_REQUIRE_IO_URING=1`, so a machine that silently fell back would fail there), and the
/// fallback really is the fallback.
#[test]
fn both_io_paths_are_what_they_claim() {
    let dir = tempfile::tempdir().unwrap();
    let auto = iggy_io::OsStorage::open(dir.path()).unwrap();
    if std::env::var_os("IGGY_REQUIRE_IO_URING").is_some() {
        assert!(auto.uses_io_uring(), "io_uring required but unavailable");
    }
    let syscalls = iggy_io::OsStorage::open_with(dir.path(), iggy_io::IoPath::Syscalls).unwrap();
    assert!(!syscalls.uses_io_uring());
}

mod sim {
    iggy_io::conformance_suite!(|| (iggy_io::SimStorage::new(42), ()));
}

mod short_sim {
    iggy_io::conformance_suite!(|| (iggy_io::ShortIo::new(iggy_io::SimStorage::new(42), 3), ()));
}

mod short_os {
    iggy_io::conformance_suite!(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        (
            iggy_io::ShortIo::new(iggy_io::OsStorage::open(dir.path()).expect("root"), 5),
            dir,
        )
    });
}

/// A symbolic link inside the root that points outside it is never followed, whatever the
/// operation, so the root cannot be escaped through one.
#[test]
fn os_storage_never_follows_symlinks() {
    use iggy_io::{ErrorKind, OpenMode, ReadStorage, Storage};
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), b"outside").unwrap();
    let root = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), root.path().join("link")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret"), root.path().join("file")).unwrap();
    let storage = iggy_io::OsStorage::open(root.path()).unwrap();

    for path in ["link/secret", "file"] {
        let error = storage.open_read(path).expect_err(path);
        assert!(
            matches!(error.kind, ErrorKind::Symlink | ErrorKind::NotADirectory),
            "{path}: {error}"
        );
        assert!(storage.open(path, OpenMode::Create).is_err(), "{path}");
    }
    assert!(storage.list_dir("link").is_err());
    assert!(storage.create_dir("link/new").is_err());
    assert!(
        !outside.path().join("new").exists(),
        "nothing was created outside the root"
    );
    assert!(
        storage.remove_dir_all("link").is_err(),
        "a link is not a directory to remove"
    );
    assert!(
        outside.path().join("secret").exists(),
        "nothing outside the root was removed"
    );
    assert_eq!(
        std::fs::read(outside.path().join("secret")).unwrap(),
        b"outside"
    );
}

/// Errors name the operation, the path and (for I/O) the offset, so an operator can act on them.
#[test]
fn errors_name_the_path_and_offset() {
    use iggy_io::{OpenMode, ReadFile, Storage};
    let root = tempfile::tempdir().unwrap();
    let storage = iggy_io::OsStorage::open(root.path()).unwrap();
    let error = storage.open("dir/missing", OpenMode::Existing).unwrap_err();
    assert_eq!(error.to_string(), "open dir/missing: not found");
    let file = storage.open("short", OpenMode::Create).unwrap();
    let error = file.read_exact_at(0, &mut [0u8; 4]).unwrap_err();
    assert_eq!(
        error.to_string(),
        "read short at offset 0: unexpected end of file"
    );
}
