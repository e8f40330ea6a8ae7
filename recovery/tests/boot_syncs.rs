//! A node's boot writes every group's trusted state again (and zeroes what lies past each
//! frontier) without a sync per group, then makes it all durable with one sync of the file
//! system before it hands the node out (`BootConfig::defer_boot_syncs`). These tests show that a
//! crash anywhere in such a boot leaves a node that boots to exactly what that boot trusted, and
//! that nothing the boot wrote is left undurable when it returns.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::path::Path;

use iggy_io::{EnumerationConfig, SimStorage, TraceOp, enumerate};
use iggy_recovery::populate::{Options, populate};
use iggy_recovery::{BootConfig, Mode, NodeState, boot_with};

fn options() -> Options {
    Options {
        partitions: 3,
        batches: 12,
        unpublished_batches: 2,
        segment_size_bytes: 4096,
        metadata_file_bytes: 16 << 10,
        max_messages: 3,
        replicas: 3,
    }
}

/// What a booted node trusts: every group's head entry and superblock state, and each
/// partition's next offset.
fn trusted(node: &NodeState<SimStorage>) -> String {
    let mut out = String::new();
    if let Some(metadata) = &node.metadata {
        out += &format!(
            "metadata head {:?} applied {} vsr {:?}\n",
            metadata.wal().head(),
            metadata.applied_op(),
            metadata.vsr_state()
        );
    }
    for (key, partition) in &node.partitions {
        out += &format!(
            "{} head {:?} next_offset {} vsr {:?}\n",
            key.label(),
            partition.wal().head(),
            partition.next_offset(),
            partition.vsr_state()
        );
    }
    out
}

fn boot_node(storage: &SimStorage) -> Result<NodeState<SimStorage>, String> {
    let (node, report) = boot_with(
        storage.clone(),
        Path::new(""),
        Mode::Open,
        &BootConfig::new(1),
    )
    .map_err(|e| format!("boot failed: {e}"))?;
    if let Some(group) = report.groups.iter().find(|g| g.error.is_some()) {
        return Err(format!("{group:?} refused\n{}", report.render()));
    }
    Ok(node)
}

/// The populate workload left unpublished batches and no clean-shutdown marker, so the boot
/// zeroes tails and writes every superblock and frontier again: all of it unsynced until the
/// one `sync_filesystem`, which leaves nothing pending.
#[test]
fn a_deferred_boot_leaves_nothing_pending_and_syncs_once() {
    let storage = SimStorage::recording(31);
    populate(&storage, Path::new(""), &options()).unwrap();
    storage.crash_process();
    let before = storage.trace().len();
    let node = boot_node(&storage).unwrap();
    let trace = &storage.trace()[before..];
    let syncs = trace
        .iter()
        .filter(|op| matches!(op, TraceOp::SyncData { .. } | TraceOp::SyncAll { .. }))
        .count();
    let syncfs = trace
        .iter()
        .filter(|op| matches!(op, TraceOp::SyncFs { .. }))
        .count();
    let rewrites = trace
        .iter()
        .filter(|op| matches!(op, TraceOp::Write { path, .. } if path.ends_with("superblock") || path.ends_with("frontier")))
        .count();
    assert_eq!(syncfs, 1, "{trace:#?}");
    assert_eq!(syncs, 0, "a file synced on its own: {trace:#?}");
    assert!(
        rewrites >= 3 * (options().partitions as usize + 1),
        "every group's trusted state written again: {rewrites}"
    );
    assert!(
        storage.pending_writes().is_empty(),
        "a boot write left unsynced"
    );
    assert_eq!(storage.pending_dir_ops(), 0);
    drop(node);
}

/// Every crash state of that boot (before, inside and after its writes, each subset of them, torn
/// ones too) boots to what the uninterrupted boot trusted: each deferred write stands alone.
#[test]
fn a_crash_anywhere_in_a_deferred_boot_boots_to_what_that_boot_trusted() {
    let storage = SimStorage::recording(32);
    populate(&storage, Path::new(""), &options()).unwrap();
    storage.crash_process();
    storage.mark("boot");
    let expected = trusted(&boot_node(&storage).unwrap());
    let full = std::env::var_os("RECOVERY_CRASH_FULL").is_some();
    let config = EnumerationConfig {
        seed: 9,
        max_states_per_point: if full { 256 } else { 16 },
        torn_states_per_point: if full { 16 } else { 2 },
        start_at_mark: Some("boot".into()),
        ..EnumerationConfig::default()
    };
    let counts = enumerate(&storage.trace(), &config, |crash| {
        let node = boot_node(&crash.storage)?;
        let got = trusted(&node);
        if got != expected {
            return Err(format!(
                "trusted\n{got}\nwhere the boot trusted\n{expected}"
            ));
        }
        drop(node);
        // The crash state's boot is durable too: a power loss right after changes nothing.
        crash.storage.power_loss();
        let again = trusted(&boot_node(&crash.storage)?);
        if again != expected {
            return Err(format!("after a second power loss\n{again}"));
        }
        Ok(())
    })
    .unwrap_or_else(|failure| panic!("{failure}"));
    eprintln!("{counts:?}");
    assert!(counts.points >= 20 && counts.states >= 200, "{counts:?}");
}
