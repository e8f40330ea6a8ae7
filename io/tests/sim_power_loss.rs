//! SimStorage's power-loss model: what survives, what does not, and that it is a pure function
//! of the seed.

#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    reason = "test code: a failed unwrap is a failed test; casts are of small test values"
)]

use iggy_io::{
    CrashPlan, OpenMode, ReadFile, ReadStorage, SimStorage, Storage, TraceOp, WriteFate, WriteFile,
};

/// A file whose name is already durable, so only its data is in question.
fn durable_file(storage: &SimStorage, path: &str, contents: &[u8]) -> iggy_io::sim::SimFile {
    let file = storage.open(path, OpenMode::CreateNew).unwrap();
    file.write_all_at(0, contents).unwrap();
    file.sync_data().unwrap();
    storage.sync_dir("").unwrap();
    file
}

#[test]
fn power_loss_drops_an_unsynced_write() {
    let storage = SimStorage::recording(1);
    let file = durable_file(&storage, "f", b"old old old");
    file.write_all_at(0, b"NEW").unwrap();
    assert_eq!(
        storage.read_all("f").unwrap(),
        b"NEW old old",
        "visible before the crash"
    );
    storage.power_loss_durable_only();
    assert_eq!(storage.read_all("f").unwrap(), b"old old old");
}

#[test]
fn a_synced_write_survives_every_power_loss() {
    for seed in 0..50 {
        let storage = SimStorage::recording(seed);
        let file = durable_file(&storage, "f", b"v1");
        file.write_all_at(0, b"v2 synced").unwrap();
        file.sync_data().unwrap();
        file.write_all_at(100, b"unsynced").unwrap();
        storage.power_loss();
        let contents = storage.read_all("f").unwrap();
        assert_eq!(&contents[..9], b"v2 synced", "seed {seed}");
    }
}

#[test]
fn a_created_file_whose_directory_was_not_synced_vanishes() {
    let storage = SimStorage::recording(1);
    storage.create_dir("d").unwrap();
    storage.sync_dir("").unwrap();
    let file = storage.open("d/new", OpenMode::CreateNew).unwrap();
    file.write_all_at(0, b"data").unwrap();
    file.sync_all().unwrap(); // the data is durable, the name is not
    storage.power_loss_durable_only();
    assert!(!storage.exists("d/new").unwrap());
    assert!(
        storage.exists("d").unwrap(),
        "the directory itself was synced into the root"
    );

    let file = storage.open("d/new", OpenMode::CreateNew).unwrap();
    file.write_all_at(0, b"data").unwrap();
    file.sync_all().unwrap();
    storage.sync_dir("d").unwrap();
    storage.power_loss_durable_only();
    assert_eq!(
        storage.read_all("d/new").unwrap(),
        b"data",
        "with the directory sync it stays"
    );
}

#[test]
fn unsynced_directory_operations_survive_only_as_a_prefix() {
    // create a, create b, create c: after any power loss, c present implies b and a present.
    for seed in 0..100 {
        let storage = SimStorage::recording(seed);
        for name in ["a", "b", "c"] {
            storage.open(name, OpenMode::CreateNew).unwrap();
        }
        storage.power_loss();
        let present: Vec<bool> = ["a", "b", "c"]
            .iter()
            .map(|n| storage.exists(n).unwrap())
            .collect();
        assert!(
            present.windows(2).all(|w| w[0] || !w[1]),
            "seed {seed}: {present:?}"
        );
    }
}

/// Old contents are 0xAA, the unsynced write is 0x55 over [1000, 9000): after a power loss,
/// every byte outside the range is old, and inside it every 512-byte sector piece is wholly old
/// or wholly new. Some seed must produce a real tear, or the model never tears.
#[test]
fn a_torn_write_changes_only_whole_sectors_of_the_unsynced_range() {
    let (start, end) = (1000usize, 9000usize);
    let mut torn_seen = 0;
    for seed in 0..64 {
        let storage = SimStorage::recording(seed);
        let file = durable_file(&storage, "f", &[0xAA; 12_288]);
        file.write_all_at(start as u64, &[0x55; 8000]).unwrap();
        storage.power_loss();
        let contents = storage.read_all("f").unwrap();
        assert_eq!(contents.len(), 12_288, "seed {seed}");
        assert!(
            contents[..start].iter().all(|&b| b == 0xAA),
            "seed {seed}: before the range"
        );
        assert!(
            contents[end..].iter().all(|&b| b == 0xAA),
            "seed {seed}: after the range"
        );
        let mut piece_start = start;
        let mut kinds = Vec::new();
        while piece_start < end {
            let piece_end = ((piece_start / 512 + 1) * 512).min(end);
            let piece = &contents[piece_start..piece_end];
            let all_old = piece.iter().all(|&b| b == 0xAA);
            let all_new = piece.iter().all(|&b| b == 0x55);
            assert!(
                all_old || all_new,
                "seed {seed}: sector piece at {piece_start} is mixed"
            );
            kinds.push(all_new);
            piece_start = piece_end;
        }
        if kinds.iter().any(|&k| k) && kinds.iter().any(|&k| !k) {
            torn_seen += 1;
        }
    }
    assert!(torn_seen > 0, "no seed tore the write");
}

#[test]
fn an_explicit_torn_plan_keeps_exactly_the_named_sectors() {
    let storage = SimStorage::recording(9);
    let file = durable_file(&storage, "f", &[0u8; 2048]);
    file.write_all_at(256, &[1u8; 1024]).unwrap(); // pieces [256,512) [512,1024) [1024,1280)
    let plan = CrashPlan {
        writes: vec![WriteFate::Torn {
            sector_bytes: 512,
            kept: vec![true, false, true],
        }],
        dir_ops_kept: 0,
        dir_ops_subset: None,
    };
    storage.power_loss_with(&plan);
    let contents = storage.read_all("f").unwrap();
    assert!(contents[256..512].iter().all(|&b| b == 1));
    assert!(contents[512..1024].iter().all(|&b| b == 0));
    assert!(contents[1024..1280].iter().all(|&b| b == 1));
    assert!(contents[1280..].iter().all(|&b| b == 0));
}

fn workload(seed: u64) -> (Vec<TraceOp>, Vec<Vec<u8>>) {
    let storage = SimStorage::recording(seed);
    durable_file(&storage, "f", &[0u8; 65_536]);
    let mut images = Vec::new();
    for round in 0..4u8 {
        let file = storage.open("f", OpenMode::Existing).unwrap();
        for chunk in 0..8u64 {
            file.write_all_at(chunk * 8000 + u64::from(round), &[round + 1; 7000])
                .unwrap();
        }
        storage.power_loss();
        images.push(storage.read_all("f").unwrap());
    }
    (storage.trace(), images)
}

#[test]
fn the_same_seed_gives_the_same_trace_and_crash_images() {
    let (trace_a, images_a) = workload(11);
    let (trace_b, images_b) = workload(11);
    assert_eq!(trace_a, trace_b);
    assert_eq!(images_a, images_b);
    assert!(trace_a.iter().any(|op| matches!(op, TraceOp::PowerLoss(_))));
}

#[test]
fn a_different_seed_tears_different_sectors() {
    let (trace_a, images_a) = workload(11);
    let (trace_b, images_b) = workload(12);
    let plans = |trace: &[TraceOp]| -> Vec<CrashPlan> {
        trace
            .iter()
            .filter_map(|op| match op {
                TraceOp::PowerLoss(plan) => Some(plan.clone()),
                _ => None,
            })
            .collect()
    };
    assert_ne!(plans(&trace_a), plans(&trace_b));
    assert_ne!(images_a, images_b);
}

#[test]
fn handles_from_before_a_crash_are_stale() {
    let storage = SimStorage::recording(1);
    let file = durable_file(&storage, "f", b"x");
    file.write_all_at(0, b"y").unwrap();
    storage.crash_process();
    assert_eq!(
        file.write_at(0, b"z").unwrap_err().kind,
        iggy_io::ErrorKind::StaleHandle
    );
    assert_eq!(
        storage.read_all("f").unwrap(),
        b"y",
        "a process crash keeps buffered data"
    );
    storage.power_loss_durable_only();
    assert_eq!(
        storage.read_all("f").unwrap(),
        b"x",
        "...which is still not durable"
    );
    let reopened = storage.open_read("f").unwrap();
    assert_eq!(reopened.len().unwrap(), 1);
}

/// `sync_filesystem` is every sync at once: data in several directories, a created file's
/// name, an unlink and a rename all survive a power loss that keeps nothing pending.
#[test]
fn sync_filesystem_makes_every_pending_write_and_name_durable() {
    let storage = SimStorage::recording(3);
    assert!(storage.can_sync_filesystem());
    storage.create_dir("a").unwrap();
    storage.create_dir("a/b").unwrap();
    storage.sync_dir("").unwrap();
    storage.sync_dir("a").unwrap();
    let old = durable_file(&storage, "a/old", b"old");
    let gone = durable_file(&storage, "a/b/gone", b"gone");
    drop(gone);
    old.write_all_at(0, b"NEW").unwrap();
    let created = storage.open("a/b/created", OpenMode::CreateNew).unwrap();
    created.write_all_at(0, b"created").unwrap();
    storage.unlink("a/b/gone").unwrap();
    storage.rename("a/old", "a/renamed").unwrap();
    storage.sync_filesystem().unwrap();
    storage.power_loss_durable_only();
    assert_eq!(storage.read_all("a/renamed").unwrap(), b"NEW");
    assert!(!storage.exists("a/old").unwrap());
    assert_eq!(storage.read_all("a/b/created").unwrap(), b"created");
    assert!(!storage.exists("a/b/gone").unwrap());
    assert!(storage.pending_writes().is_empty());
    assert_eq!(storage.pending_dir_ops(), 0);
}

/// A write-back that fails inside `sync_filesystem` fails the call and loses that file's
/// pending writes for good (as after a failed `fsync`), while the other files' are durable.
#[test]
fn a_failed_sync_filesystem_loses_the_failed_files_writes_and_keeps_the_others() {
    let storage = SimStorage::recording(4);
    let bad = durable_file(&storage, "bad", b"1");
    let good = durable_file(&storage, "good", b"1");
    bad.write_all_at(0, b"2").unwrap();
    good.write_all_at(0, b"2").unwrap();
    storage.arm("bad", iggy_io::Fault::SyncError).unwrap();
    let error = storage.sync_filesystem().unwrap_err();
    assert_eq!(error.op, iggy_io::Op::SyncFs);
    assert!(
        storage
            .trace()
            .iter()
            .any(|op| matches!(op, TraceOp::SyncFs { failed } if failed.len() == 1))
    );
    storage.sync_filesystem().unwrap();
    storage.power_loss_durable_only();
    assert_eq!(storage.read_all("good").unwrap(), b"2");
    assert_eq!(
        storage.read_all("bad").unwrap(),
        b"1",
        "the failed write-back never reached the disk, though a later syncfs succeeded"
    );
}
