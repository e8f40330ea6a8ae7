//! Node boot's own promises beyond the crash enumeration: one writer at a time, and what a boot
//! wrote is durable before it reports the node clean.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::path::Path;

use iggy_io::{ReadOnly, SimStorage};
use iggy_recovery::populate::{Options, populate};
use iggy_recovery::{Mode, RecoveryError, boot, check, exit};

fn options() -> Options {
    Options {
        partitions: 2,
        batches: 10,
        unpublished_batches: 2,
        segment_size_bytes: 4096,
        metadata_file_bytes: 8192,
        max_messages: 2,
        replicas: 3,
    }
}

/// While a boot's node is open, a second boot (another writer) is refused naming the holder,
/// and a check says the node is in use; once the first is dropped the second boots.
#[test]
fn a_second_writer_is_refused_while_the_node_is_open() {
    let storage = SimStorage::new(5);
    populate(&storage, Path::new(""), &options()).unwrap();
    let (node, _) = boot(storage.clone(), Path::new(""), Mode::Open).unwrap();
    match boot(storage.clone(), Path::new(""), Mode::Repair) {
        Err(error @ RecoveryError::Locked { pid: Some(_), .. }) => {
            assert!(error.to_string().contains("the node is in use"), "{error}");
        }
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("two writers opened the same node"),
    }
    let report = check(&ReadOnly::new(storage.clone()), Path::new(""), |_, _| {}).unwrap();
    assert!(report.in_use.is_some());
    assert!(report.render().contains("IN USE"));
    drop(node);
    let report = check(&ReadOnly::new(storage.clone()), Path::new(""), |_, _| {}).unwrap();
    assert!(report.in_use.is_none());
    drop(boot(storage, Path::new(""), Mode::Repair).unwrap());
}

/// What boot (and so `iggy-fsck --repair`) rebuilds is synced before it returns: a power loss
/// right after a boot that rebuilt indexes finds them there. Before, a rebuilt index was
/// written without a sync and a power loss brought back exit 1.
#[test]
fn indexes_a_boot_rebuilt_survive_a_power_loss() {
    let storage = SimStorage::new(6);
    populate(&storage, Path::new(""), &options()).unwrap();
    // The indexes populate wrote at rotation were never synced: gone.
    storage.power_loss_durable_only();
    let before = check(&ReadOnly::new(storage.clone()), Path::new(""), |_, _| {}).unwrap();
    let rebuilt = before
        .findings
        .iter()
        .filter(|f| f.kind == "index-rebuild")
        .count();
    assert!(rebuilt >= 2, "{}", before.render());
    drop(boot(storage.clone(), Path::new(""), Mode::Open).unwrap());
    storage.power_loss_durable_only();
    let after = check(&ReadOnly::new(storage), Path::new(""), |_, _| {}).unwrap();
    assert_eq!(after.exit_code(), exit::CLEAN, "{}", after.render());
}

/// `iggy-fsck --repair` (boot in `Repair` mode) reports the node clean, so that must survive a
/// power loss right after it, even for the indexes it found in order: they may be in the page
/// cache only, written without a sync by the process that crashed.
#[test]
fn a_repaired_node_is_still_clean_after_a_power_loss() {
    let storage = SimStorage::new(6);
    populate(&storage, Path::new(""), &options()).unwrap();
    drop(boot(storage.clone(), Path::new(""), Mode::Repair).unwrap());
    let repaired = check(&ReadOnly::new(storage.clone()), Path::new(""), |_, _| {}).unwrap();
    assert_eq!(repaired.exit_code(), exit::CLEAN, "{}", repaired.render());
    storage.power_loss_durable_only();
    let after = check(&ReadOnly::new(storage), Path::new(""), |_, _| {}).unwrap();
    assert_eq!(after.exit_code(), exit::CLEAN, "{}", after.render());
}
