//! The crash-state enumerator must catch the classic mistakes of an atomic file update
//! (write `x.tmp`, fsync it, rename it to `x`, fsync the directory), and pass the correct one.

#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    reason = "test code: a failed unwrap is a failed test; casts are of small test values"
)]

use iggy_io::{
    CrashState, EnumerationConfig, OpenMode, ReadStorage, SimStorage, Storage, WriteFile, enumerate,
};

const CONTENT: &[u8] = &[0x5A; 10_000];

#[derive(Clone, Copy)]
struct Protocol {
    sync_file: bool,
    sync_dir: bool,
}

/// Runs the update protocol and marks the point where it claims `x` durable.
fn record(protocol: Protocol) -> Vec<iggy_io::TraceOp> {
    let storage = SimStorage::recording(7);
    let file = storage.open("x.tmp", OpenMode::CreateNew).unwrap();
    file.write_all_at(0, CONTENT).unwrap();
    if protocol.sync_file {
        file.sync_data().unwrap();
    }
    storage.rename("x.tmp", "x").unwrap();
    if protocol.sync_dir {
        storage.sync_dir("").unwrap();
    }
    storage.mark("x durable");
    storage.trace()
}

fn check(crash: &CrashState<'_>) -> Result<(), String> {
    if !crash.marks.iter().any(|m| m == "x durable") {
        return Ok(()); // nothing was claimed yet: any state is allowed
    }
    if !crash.storage.exists("x").map_err(|e| e.to_string())? {
        return Err("x is missing after it was claimed durable".into());
    }
    let contents = crash.storage.read_all("x").map_err(|e| e.to_string())?;
    if contents != CONTENT {
        return Err(format!("x is torn or empty: {} bytes", contents.len()));
    }
    Ok(())
}

#[test]
fn the_correct_protocol_passes_every_crash_state() {
    let trace = record(Protocol {
        sync_file: true,
        sync_dir: true,
    });
    let counts = enumerate(&trace, &EnumerationConfig::default(), check).unwrap();
    assert_eq!(
        counts.points, 6,
        "before the first op and after each of the 5 storage ops"
    );
    assert!(
        counts.states > counts.points,
        "several states per point: {counts:?}"
    );
    assert!(
        counts.torn_states > 0,
        "the 10 000-byte write was torn at some point: {counts:?}"
    );
}

#[test]
fn omitting_the_directory_fsync_is_caught() {
    let trace = record(Protocol {
        sync_file: true,
        sync_dir: false,
    });
    let failure = enumerate(&trace, &EnumerationConfig::default(), check).unwrap_err();
    assert!(failure.reason.contains("missing"), "{failure}");
    assert_eq!(
        failure.plan.dir_ops_kept, 0,
        "the rename was lost: {failure}"
    );
}

#[test]
fn omitting_the_file_fsync_is_caught() {
    let trace = record(Protocol {
        sync_file: false,
        sync_dir: true,
    });
    let failure = enumerate(&trace, &EnumerationConfig::default(), check).unwrap_err();
    assert!(failure.reason.contains("torn or empty"), "{failure}");
}

/// Sampling bounds the work on a long trace and is itself deterministic.
#[test]
fn sampling_is_bounded_and_seeded() {
    let storage = SimStorage::recording(3);
    let file = storage.open("log", OpenMode::CreateNew).unwrap();
    for i in 0..40u64 {
        file.write_all_at(i * 100, &[i as u8; 100]).unwrap();
    }
    let trace = storage.trace();
    let config = EnumerationConfig {
        max_states_per_point: 16,
        torn_states_per_point: 2,
        max_points: Some(10),
        ..EnumerationConfig::default()
    };
    let mut seen = Vec::new();
    let counts = enumerate(&trace, &config, |crash| {
        seen.push((crash.point, crash.plan.clone()));
        Ok(())
    })
    .unwrap();
    assert_eq!(counts.points, 10);
    assert!(counts.states <= 10 * (16 + 2), "{counts:?}");
    assert!(
        seen.iter().any(|(point, _)| *point == trace.len()),
        "the last point is checked"
    );
    let mut again = Vec::new();
    enumerate(&trace, &config, |crash| {
        again.push((crash.point, crash.plan.clone()));
        Ok(())
    })
    .unwrap();
    assert_eq!(seen, again);
}

/// A protocol that relies on directory changes of different directories reaching the disk in
/// order (an index entry never without its data entry) passes the ordered model, and the
/// unordered one catches it unless the data's directory is synced first.
#[test]
fn an_unordered_enumeration_catches_a_dir_sync_the_ordered_one_cannot() {
    let record = |sync_data_dir: bool| {
        let storage = SimStorage::recording(8);
        for dir in ["data", "index"] {
            storage.create_dir(dir).unwrap();
        }
        storage.sync_dir("").unwrap();
        let data = storage.open("data/x", OpenMode::CreateNew).unwrap();
        data.write_all_and_sync_data(0, b"the data").unwrap();
        if sync_data_dir {
            storage.sync_dir("data").unwrap();
        }
        let index = storage.open("index/x", OpenMode::CreateNew).unwrap();
        index
            .write_all_and_sync_data(0, b"points at data/x")
            .unwrap();
        storage.trace()
    };
    let check = |crash: &CrashState<'_>| {
        let indexed = crash.storage.exists("index/x").map_err(|e| e.to_string())?;
        let present = crash.storage.exists("data/x").map_err(|e| e.to_string())?;
        if indexed && !present {
            return Err("an index entry without its data".into());
        }
        Ok(())
    };
    let unordered = EnumerationConfig {
        dir_order: iggy_io::DirOrder::Unordered,
        ..EnumerationConfig::default()
    };
    enumerate(&record(false), &EnumerationConfig::default(), check).unwrap();
    let failure = enumerate(&record(false), &unordered, check).unwrap_err();
    assert!(failure.reason.contains("without its data"), "{failure}");
    assert!(failure.plan.dir_ops_subset.is_some(), "{failure}");
    enumerate(&record(true), &unordered, check).unwrap();
}

/// A seeded power loss under the unordered model can keep a later directory operation without
/// an earlier one, and keeps the two entries of a rename together.
#[test]
fn an_unordered_power_loss_keeps_operations_independently_and_renames_whole() {
    let mut saw_later_without_earlier = false;
    for seed in 0..64 {
        let storage = SimStorage::recording(seed);
        storage.set_dir_order(iggy_io::DirOrder::Unordered);
        storage.create_dir("a").unwrap();
        storage.create_dir("b").unwrap();
        storage.sync_dir("").unwrap();
        drop(storage.open("a/first", OpenMode::CreateNew).unwrap());
        drop(storage.open("b/old", OpenMode::CreateNew).unwrap());
        storage.sync_dir("b").unwrap();
        storage.rename("b/old", "a/moved").unwrap();
        drop(storage.open("b/later", OpenMode::CreateNew).unwrap());
        storage.power_loss();
        let exists = |p: &str| storage.exists(p).unwrap();
        assert!(
            exists("b/old") != exists("a/moved"),
            "seed {seed}: a rename is kept or lost whole"
        );
        saw_later_without_earlier |= exists("b/later") && !exists("a/first");
    }
    assert!(saw_later_without_earlier);
}
