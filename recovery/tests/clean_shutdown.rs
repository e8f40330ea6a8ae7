//! The clean-shutdown marker: a node shut down cleanly boots without rewriting any group's
//! trusted state; any other end of the previous process (a crash, a failed sync, a boot that
//! crashed) gets every rewrite.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::path::{Path, PathBuf};

use iggy_io::{Fault, ReadStorage, SimStorage, TraceOp};
use iggy_recovery::populate::{Options, populate};
use iggy_recovery::{CLEAN_SHUTDOWN_FILE, Mode, boot};

fn options() -> Options {
    Options {
        partitions: 3,
        batches: 6,
        unpublished_batches: 0,
        segment_size_bytes: 4096,
        metadata_file_bytes: 8192,
        max_messages: 2,
        replicas: 3,
    }
}

/// The superblock and frontier writes in `trace` (each a group's trusted-state rewrite).
fn trusted_writes(trace: &[TraceOp]) -> Vec<PathBuf> {
    trace
        .iter()
        .filter_map(|op| match op {
            TraceOp::Write { path, .. }
                if path.ends_with("superblock") || path.ends_with("frontier") =>
            {
                Some(path.clone())
            }
            _ => None,
        })
        .collect()
}

fn boot_and_trace(storage: &SimStorage) -> (iggy_recovery::NodeState<SimStorage>, Vec<PathBuf>) {
    let before = storage.trace().len();
    let (node, report) = boot(storage.clone(), Path::new(""), Mode::Open).unwrap();
    assert!(
        report.groups.iter().all(|g| g.error.is_none()),
        "{}",
        report.render()
    );
    (node, trusted_writes(&storage.trace()[before..]))
}

/// After a clean shutdown, boot writes no superblock or frontier, and removes the marker; the
/// boot after that one (no marker: that process did not shut down cleanly) rewrites every
/// group's, as after a crash.
#[test]
fn a_clean_shutdown_lets_the_next_boot_skip_the_rewrites_once() {
    let storage = SimStorage::recording(1);
    populate(&storage, Path::new(""), &options()).unwrap();
    let (node, unmarked) = boot_and_trace(&storage);
    // Three partitions and the metadata group: both superblock copies and a frontier each (and
    // the ring records of carried publications populate left).
    let every_group = 3 * (options().partitions as usize + 1);
    assert!(unmarked.len() >= every_group, "{unmarked:?}");
    node.shutdown(&storage, Path::new("")).unwrap();
    assert!(storage.exists(CLEAN_SHUTDOWN_FILE).unwrap());
    let (node, clean) = boot_and_trace(&storage);
    assert_eq!(clean, Vec::<PathBuf>::new());
    assert!(!storage.exists(CLEAN_SHUTDOWN_FILE).unwrap());
    drop(node);
    let (_node, again) = boot_and_trace(&storage);
    assert!(again.len() >= every_group, "{again:?}");
}

/// The marker is durable once `shutdown` returns, and its removal is durable before boot
/// writes anything: a power loss right after the boot that consumed it leaves no marker.
#[test]
fn the_marker_and_its_removal_are_durable() {
    let storage = SimStorage::recording(2);
    populate(&storage, Path::new(""), &options()).unwrap();
    let (node, _) = boot_and_trace(&storage);
    node.shutdown(&storage, Path::new("")).unwrap();
    storage.power_loss_durable_only();
    assert!(storage.exists(CLEAN_SHUTDOWN_FILE).unwrap());
    let (node, _) = boot_and_trace(&storage);
    drop(node);
    storage.power_loss_durable_only();
    assert!(!storage.exists(CLEAN_SHUTDOWN_FILE).unwrap());
}

/// A failed sync poisons a group: its shutdown is not clean, no marker is written, and the next
/// boot rewrites what it trusts (the fsyncgate guard).
#[test]
fn a_poisoned_group_makes_the_shutdown_unclean() {
    let storage = SimStorage::recording(3);
    populate(&storage, Path::new(""), &options()).unwrap();
    let (node, _) = boot_and_trace(&storage);
    let key = *node.partitions.keys().next().unwrap();
    let frontier = Path::new("partitions")
        .join(key.dir_name())
        .join("frontier");
    storage.arm(&frontier, Fault::SyncError).unwrap();
    let error = node.shutdown(&storage, Path::new(""));
    assert!(error.is_err());
    assert!(!storage.exists(CLEAN_SHUTDOWN_FILE).unwrap());
    storage.crash_process();
    let (_node, rewrites) = boot_and_trace(&storage);
    assert!(
        rewrites.len() >= 3 * (options().partitions as usize + 1),
        "{rewrites:?}"
    );
}
