//! Every crash state of a node's run-time create and delete of partitions is one `iggy-fsck`
//! calls consistent, and boot brings it back to a node whose partition directories are exactly
//! the ones its metadata lists.
//!
//! The workload is the node's own path (`iggy_node::execute_with` on a metadata commit, with
//! the catalog a node creates partitions with, then `iggy_node::retire`'s removal): a metadata
//! group with a checkpoint due, a topic of three partitions created by a commit that also
//! takes the checkpoint, then the topic deleted. For each crash state: `check` (what
//! `iggy-fsck` runs) must find nothing to refuse and nothing to rebuild from peers (exit 0 or 1),
//! `boot(Open)` must then leave a node that checks clean, with a directory for every partition
//! its metadata lists and none other.
//!
//! Every crash point of the create and the delete is checked, with 4 states a point (1 torn) by
//! default; `NODE_CRASH_FULL=1` takes up to 64 (8 torn).
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::path::Path;

use iggy_format::PrepareMeta;
use iggy_io::{DirOrder, EnumerationConfig, ReadOnly, ReadStorage, SimStorage, enumerate};
use iggy_metadata::group::{CHECKPOINT_INTERVAL_OPS, MetadataGroup};
use iggy_metadata::{Durability, Op, Retention};
use iggy_node::{Catalog, Store, execute_with};
use iggy_recovery::populate::FirstView;
use iggy_recovery::{BootConfig, METADATA_DIR, Mode, PARTITIONS_DIR, PartitionKey};
use iggy_superblock::Identity;
use iggy_vsr::{Effect, Outcome};

const IDENTITY: Identity = Identity {
    cluster: 9,
    replica: 1,
    replica_count: 3,
};

fn boot_config() -> BootConfig {
    BootConfig {
        metadata_file_size_bytes: 64 << 10,
        segment_size_bytes: 64 << 10,
        index_interval_bytes: 1024,
        ..BootConfig::new(7)
    }
}

/// Prepares `op` at the metadata group's head and commits it the way a node's lane does.
fn commit(store: &mut Store<SimStorage>, catalog: &Catalog<SimStorage>, op: &Op) {
    let Store::Metadata(group) = store else {
        unreachable!("the metadata store")
    };
    let (header, _) = group.prepare(op, &PrepareMeta::default()).unwrap().unwrap();
    let effect = Effect::Commit {
        id: 1,
        through: header.op,
    };
    let (outcome, changes) = execute_with(store, effect, 0, 1 << 20, Some(catalog), false);
    assert!(matches!(outcome, Outcome::Committed { .. }), "{outcome:?}");
    // What the node does with a commit's deletes once their groups are dropped.
    for key in changes.deleted {
        iggy_recovery::remove_partition(&catalog.storage, Path::new(""), key).unwrap();
    }
    drop(changes.created);
}

/// The workload; returns the recording disk.
fn workload() -> SimStorage {
    let storage = SimStorage::recording(31);
    let config = boot_config();
    iggy_recovery::populate::genesis(
        &storage,
        IDENTITY,
        &config,
        &[Op::CreateStream { name: "s".into() }],
        &[],
        FirstView::Leader,
    )
    .unwrap();
    let group = MetadataGroup::open(
        storage.clone(),
        Path::new(METADATA_DIR),
        &IDENTITY,
        config.metadata_wal(),
    )
    .unwrap()
    .unwrap();
    let catalog = Catalog {
        storage: storage.clone(),
        boot: config,
        identity: IDENTITY,
    };
    let mut store = Store::Metadata(Box::new(group));
    // Registrations up to one op short of the checkpoint interval.
    let filler = CHECKPOINT_INTERVAL_OPS - 2;
    for client in 0..filler {
        commit(
            &mut store,
            &catalog,
            &Op::RegisterClient {
                client: u128::from(client) + 1,
                session: 1,
            },
        );
    }
    storage.mark("workload");
    // This commit creates three partitions and makes the checkpoint due.
    commit(
        &mut store,
        &catalog,
        &Op::CreateTopic {
            stream: 1,
            name: "t".into(),
            partitions: 3,
            durability: Durability::Persisted,
            segment_size_bytes: 64 << 10,
            retention: Retention::default(),
            replication_factor: 3,
        },
    );
    let Store::Metadata(group) = &store else {
        unreachable!("the metadata store")
    };
    assert!(
        group.vsr_state().checkpoint_op > 0,
        "the create's commit takes the checkpoint"
    );
    commit(
        &mut store,
        &catalog,
        &Op::DeleteTopic {
            stream: 1,
            topic: 1,
        },
    );
    storage.mark("done");
    storage
}

/// The partition directories on disk.
fn directories(storage: &SimStorage) -> Vec<String> {
    if !storage.exists(PARTITIONS_DIR).unwrap() {
        return Vec::new();
    }
    let mut names: Vec<String> = storage
        .list_dir(PARTITIONS_DIR)
        .unwrap()
        .into_iter()
        .map(|e| e.name.to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn every_crash_state_of_a_run_time_create_and_delete_is_consistent() {
    let storage = workload();
    let trace = storage.trace();
    let full = std::env::var_os("NODE_CRASH_FULL").is_some();
    let mut verdicts = [0usize; 9];
    for dir_order in [DirOrder::Ordered, DirOrder::Unordered] {
        let config = EnumerationConfig {
            seed: 3,
            max_states_per_point: if full { 64 } else { 4 },
            torn_states_per_point: if full { 8 } else { 1 },
            // Every point after the mark (the set-up before it is not under test).
            max_points: None,
            start_at_mark: Some("workload".into()),
            dir_order,
        };
        let counts = enumerate(&trace, &config, |crash| {
            let checked = iggy_recovery::check(
                &ReadOnly::new(crash.storage.clone()),
                Path::new(""),
                |_, _| {},
            )
            .map_err(|e| format!("check failed: {e}"))?;
            let code = checked.exit_code();
            if code > 1 {
                return Err(format!(
                    "not consistent (exit {code}):\n{}",
                    checked.render()
                ));
            }
            verdicts[usize::from(code)] += 1;
            let (node, _) = iggy_recovery::boot_with(
                crash.storage.clone(),
                Path::new(""),
                Mode::Open,
                &boot_config(),
            )
            .map_err(|e| format!("boot failed: {e}"))?;
            let listed: Vec<String> = node
                .metadata
                .as_ref()
                .map(|m| {
                    m.state()
                        .partition_keys()
                        .into_iter()
                        .map(|(stream, topic, partition)| {
                            PartitionKey {
                                stream,
                                topic,
                                partition,
                            }
                            .dir_name()
                        })
                        .collect()
                })
                .unwrap_or_default();
            let opened = node.partitions.len();
            drop(node);
            let on_disk = directories(&crash.storage);
            if on_disk != listed || opened != listed.len() {
                return Err(format!(
                    "after boot: directories {on_disk:?}, opened {opened}, the metadata lists \
                     {listed:?}"
                ));
            }
            let after = iggy_recovery::check(
                &ReadOnly::new(crash.storage.clone()),
                Path::new(""),
                |_, _| {},
            )
            .map_err(|e| e.to_string())?;
            if after.exit_code() != 0 {
                return Err(format!("after boot(Open):\n{}", after.render()));
            }
            Ok(())
        })
        .unwrap_or_else(|failure| panic!("{failure}"));
        eprintln!("{dir_order:?}: {counts:?}");
        assert!(counts.states >= 150, "{counts:?}");
    }
    eprintln!("exit codes seen: {verdicts:?}");
    // States a boot repairs (a create or delete to finish) and clean ones are both reached.
    assert!(verdicts[0] > 0 && verdicts[1] > 0, "{verdicts:?}");
}
