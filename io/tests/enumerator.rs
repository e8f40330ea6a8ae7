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
    let storage = SimStorage::new(7);
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
    let storage = SimStorage::new(3);
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
