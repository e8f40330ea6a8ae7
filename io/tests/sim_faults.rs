//! Injected faults: EIO, short I/O, misdirected writes, bit rot, and the fsync-failure hazard.

#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    reason = "test code: a failed unwrap is a failed test; casts are of small test values"
)]

use iggy_io::{
    ErrorKind, Fault, FaultConfig, OpenMode, ReadFile, SimStorage, Storage, TraceOp, WriteFile,
};

fn setup() -> (SimStorage, iggy_io::sim::SimFile) {
    let storage = SimStorage::recording(5);
    let file = storage.open("f", OpenMode::CreateNew).unwrap();
    file.write_all_at(0, &[1u8; 8192]).unwrap();
    file.sync_data().unwrap();
    storage.sync_dir("").unwrap();
    (storage, file)
}

#[test]
fn armed_eio_fails_exactly_one_operation() {
    let (storage, file) = setup();
    storage.arm("f", Fault::ReadError).unwrap();
    storage.arm("f", Fault::WriteError).unwrap();
    let mut buf = [0u8; 4];
    let error = file.read_at(0, &mut buf).unwrap_err();
    assert!(matches!(error.kind, ErrorKind::Injected(_)), "{error}");
    assert_eq!(file.read_at(0, &mut buf).unwrap(), 4, "one-shot");
    assert!(file.write_at(0, b"zz").is_err());
    assert_eq!(
        storage.read_all("f").unwrap()[..2],
        [1, 1],
        "a failed write changes nothing"
    );
    file.write_all_at(0, b"zz").unwrap();
}

/// After a failed sync the kernel may have dropped the dirty pages: the data stays readable but
/// a later "successful" sync does not make it durable. Only poisoning protects against this.
#[test]
fn a_failed_sync_loses_the_pending_writes_even_if_a_later_sync_succeeds() {
    let (storage, file) = setup();
    file.write_all_at(0, &[2u8; 100]).unwrap();
    storage.arm("f", Fault::SyncError).unwrap();
    assert!(file.sync_data().is_err());
    assert_eq!(
        storage.read_all("f").unwrap()[0],
        2,
        "still visible in the page cache"
    );
    file.sync_data().unwrap();
    storage.power_loss();
    assert_eq!(
        storage.read_all("f").unwrap()[0],
        1,
        "the write never reached the disk"
    );
    assert!(
        storage
            .trace()
            .iter()
            .any(|op| matches!(op, TraceOp::SyncFailed { .. }))
    );
}

#[test]
fn short_reads_and_writes_report_what_they_moved() {
    let (storage, file) = setup();
    storage.arm("f", Fault::ShortWrite(3)).unwrap();
    assert_eq!(file.write_at(0, &[9u8; 100]).unwrap(), 3);
    assert_eq!(&storage.read_all("f").unwrap()[..4], &[9, 9, 9, 1]);
    storage.arm("f", Fault::ShortRead(5)).unwrap();
    let mut buf = [0u8; 100];
    assert_eq!(file.read_at(0, &mut buf).unwrap(), 5);
    // Random short I/O: every call moves at least one byte and loops still complete.
    storage.set_faults(FaultConfig {
        short_read_probability: 0.9,
        short_write_probability: 0.9,
        ..FaultConfig::default()
    });
    file.write_all_at(0, &[7u8; 4096]).unwrap();
    let mut back = vec![0u8; 4096];
    file.read_exact_at(0, &mut back).unwrap();
    assert!(back.iter().all(|&b| b == 7));
}

#[test]
fn a_misdirected_write_lands_elsewhere_and_reports_success() {
    let (storage, file) = setup();
    let other = storage.open("g", OpenMode::CreateNew).unwrap();
    other.write_all_at(0, &[0u8; 16]).unwrap();
    storage.arm("f", Fault::MisdirectToOffset(4096)).unwrap();
    file.write_all_at(0, b"MISDIRECT").unwrap();
    let contents = storage.read_all("f").unwrap();
    assert_eq!(
        &contents[..9],
        &[1u8; 9],
        "the intended target keeps its old data"
    );
    assert_eq!(&contents[4096..4105], b"MISDIRECT");
    storage
        .arm("f", Fault::MisdirectToFile("g".into()))
        .unwrap();
    file.write_all_at(0, b"ELSEWHERE").unwrap();
    assert_eq!(&storage.read_all("g").unwrap()[..9], b"ELSEWHERE");
    assert_eq!(storage.read_all("f").unwrap()[0], 1);
}

#[test]
fn bit_rot_at_rest_survives_power_loss() {
    let (storage, _file) = setup();
    storage.rot("f", 100, 0x10).unwrap();
    assert_eq!(storage.read_all("f").unwrap()[100], 1 ^ 0x10);
    storage.power_loss_durable_only();
    assert_eq!(
        storage.read_all("f").unwrap()[100],
        1 ^ 0x10,
        "rot is in the durable image"
    );
    let (offset, mask) = storage.rot_random("f").unwrap();
    assert_ne!(mask, 0);
    assert!(offset < 8192);
    assert!(
        storage.rot("f", 8192, 1).is_err(),
        "rot past the end is refused"
    );
}

#[test]
fn probabilistic_eio_is_seeded() {
    let run = |seed| {
        let storage = SimStorage::with_faults(
            seed,
            FaultConfig {
                write_error_probability: 0.3,
                ..FaultConfig::default()
            },
        );
        let file = storage.open("f", OpenMode::Create).unwrap();
        (0..64)
            .map(|i| file.write_at(i, b"x").is_ok())
            .collect::<Vec<bool>>()
    };
    assert_eq!(run(1), run(1));
    assert_ne!(run(1), run(2));
    assert!(run(1).contains(&false) && run(1).contains(&true));
}
