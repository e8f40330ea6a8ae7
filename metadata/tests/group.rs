//! The metadata group's checkpoints under every crash state, and the refusals when the snapshot
//! and the superblock disagree.
#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    reason = "test code: a failed unwrap is a failed test; casts are of small test values"
)]

use std::path::Path;

use iggy_io::{EnumerationConfig, SimStorage, Storage, enumerate};
use iggy_metadata::group::{GROUP_ID, GroupError, MetadataGroup};
use iggy_metadata::{Durability, Op, Retention, State};
use iggy_superblock::Identity;
use iggy_wal::Config;

const ID: Identity = Identity {
    cluster: 0x1D,
    replica: 0,
    replica_count: 3,
};

fn dir() -> &'static Path {
    Path::new("metadata")
}

fn wal_config() -> Config {
    // Small files, so that each checkpoint's drop_prefix really removes some.
    Config {
        file_size_bytes: 2048,
        ..Config::new(GROUP_ID)
    }
}

fn ops() -> Vec<Op> {
    let mut ops = Vec::new();
    for i in 0..12u32 {
        ops.push(Op::CreateStream {
            name: format!("stream-{i}"),
        });
        ops.push(Op::CreateTopic {
            stream: i + 1,
            name: "events".into(),
            partitions: 1 + i % 4,
            durability: if i % 2 == 0 {
                Durability::Replicated
            } else {
                Durability::Persisted
            },
            segment_size_bytes: 1 << 30,
            retention: Retention {
                max_age_seconds: 3600,
                max_bytes: 0,
            },
            replication_factor: 3,
        });
        ops.push(if i % 3 == 0 {
            Op::DeleteStream { stream: i }
        } else {
            Op::CreateConsumerGroup {
                stream: i + 1,
                topic: 1,
                name: "readers".into(),
            }
        });
        ops.push(Op::RegisterClient {
            client: u128::from(i % 5),
            session: u64::from(i) + 1,
        });
    }
    ops
}

fn replay(ops: &[Op]) -> State {
    let mut state = State::new(ID.replica_count);
    for op in ops {
        let _ = state.apply(op);
    }
    state
}

/// Three checkpoints with ops in between: at every crash point and every allowed torn or lost
/// state, boot restores exactly the state of replaying every published op from scratch, with
/// at least every acknowledged op.
#[test]
fn every_crash_state_restores_the_replayed_state() {
    let storage = SimStorage::recording(8);
    let ops = ops();
    let mut group = MetadataGroup::create(storage.clone(), dir(), ID, wal_config()).unwrap();
    storage.mark("created 0".to_string());
    for (index, op) in ops.iter().enumerate() {
        storage.mark(format!("submitting {}", index + 1));
        group.submit(op).unwrap().ok();
        storage.mark(format!("acked {}", index + 1));
        if (index + 1) % 16 == 0 {
            group.checkpoint().unwrap();
        }
    }
    assert!(
        group.superblock().state().checkpoint_op >= 32,
        "three checkpoints happened"
    );
    let trace = storage.trace();
    let mut check_crash = |crash: &iggy_io::CrashState<'_>| {
        let last = |prefix: &str| {
            crash
                .marks
                .iter()
                .rev()
                .find_map(|m| m.strip_prefix(prefix)?.parse::<usize>().ok())
        };
        let acknowledged = last("acked ").unwrap_or(0);
        let in_flight = last("submitting ").unwrap_or(0);
        // The read-only check decides as open does.
        let checked =
            iggy_metadata::group::check(&iggy_io::ReadOnly::new(crash.storage.clone()), dir(), &ID)
                .map_err(|e| format!("check refused: {e}"))?;
        let opened = MetadataGroup::open(crash.storage.clone(), dir(), &ID, wal_config())
            .map_err(|e| format!("refused: {e}"))?;
        if checked.is_some() != opened.is_some() {
            return Err(format!("check found a group: {}", checked.is_some()));
        }
        let Some(restored) = opened else {
            return if last("created ").is_none() {
                Ok(())
            } else {
                Err("a created group vanished".into())
            };
        };
        let head = usize::try_from(restored.applied_op()).unwrap();
        if head < acknowledged || head > in_flight.max(acknowledged) {
            return Err(format!(
                "restored to op {head}, acknowledged {acknowledged}, in flight {in_flight}"
            ));
        }
        if *restored.state() != replay(&ops[..head]) {
            return Err(format!(
                "the state at op {head} differs from replaying ops 1..={head}"
            ));
        }
        Ok(())
    };
    // Both models of directory changes: in order (ext4, xfs), and any subset (where every
    // directory sync shows).
    let mut counts = iggy_io::Enumeration::default();
    for dir_order in [iggy_io::DirOrder::Ordered, iggy_io::DirOrder::Unordered] {
        let config = EnumerationConfig {
            dir_order,
            ..EnumerationConfig::default()
        };
        counts = enumerate(&trace, &config, &mut check_crash)
            .unwrap_or_else(|failure| panic!("{dir_order:?}: {failure}"));
    }
    assert!(counts.points > 200, "{counts:?}");
}

/// A group after two checkpoints, with the snapshot bytes of the first kept aside.
fn two_checkpoints() -> (SimStorage, Vec<u8>) {
    let storage = SimStorage::recording(9);
    let mut group = MetadataGroup::create(storage.clone(), dir(), ID, wal_config()).unwrap();
    let ops = ops();
    for op in &ops[..10] {
        group.submit(op).unwrap().ok();
    }
    group.checkpoint().unwrap();
    let first = storage.read_all(dir().join("snapshot.bin")).unwrap();
    for op in &ops[10..20] {
        group.submit(op).unwrap().ok();
    }
    group.checkpoint().unwrap();
    (storage, first)
}

fn replace_snapshot(storage: &SimStorage, bytes: &[u8]) {
    iggy_snapshot::install(storage, dir(), bytes).unwrap();
}

fn open_error(storage: &SimStorage) -> GroupError {
    // The read-only check refuses alike.
    let checked = iggy_metadata::group::check(&iggy_io::ReadOnly::new(storage.clone()), dir(), &ID)
        .expect_err("check refuses too");
    match MetadataGroup::open(storage.clone(), dir(), &ID, wal_config()) {
        Err(error) if error.to_string() == checked.to_string() => error,
        Err(error) => panic!("open: {error}; check: {checked}"),
        Ok(_) => panic!("opened"),
    }
}

#[test]
fn a_missing_snapshot_refuses() {
    let (storage, _) = two_checkpoints();
    storage.unlink(dir().join("snapshot.bin")).unwrap();
    assert!(matches!(
        open_error(&storage),
        GroupError::SnapshotMissing {
            checkpoint_op: 20,
            ..
        }
    ));
}

#[test]
fn a_snapshot_older_than_the_checkpoint_refuses() {
    let (storage, first) = two_checkpoints();
    replace_snapshot(&storage, &first);
    assert!(matches!(
        open_error(&storage),
        GroupError::SnapshotBehind {
            snapshot_op: 10,
            checkpoint_op: 20,
            ..
        }
    ));
}

#[test]
fn a_snapshot_whose_checksum_disagrees_refuses() {
    let (storage, _) = two_checkpoints();
    let (header, payload) = iggy_snapshot::read(&storage, dir()).unwrap().unwrap();
    let forged = iggy_snapshot::encode(
        20,
        header.checkpoint_checksum ^ 1,
        header.payload_version,
        &payload,
    );
    replace_snapshot(&storage, &forged);
    assert!(matches!(
        open_error(&storage),
        GroupError::ChecksumDisagree { op: 20, .. }
    ));
}

#[test]
fn a_newer_snapshot_is_used_only_when_the_wal_links_it() {
    let (storage, _) = two_checkpoints();
    let mut group = MetadataGroup::open(storage.clone(), dir(), &ID, wal_config())
        .unwrap()
        .unwrap();
    let ops = ops();
    for op in &ops[20..25] {
        group.submit(op).unwrap().ok();
    }
    let state = group.state().clone();
    drop(group);
    // A snapshot at op 25 that names a checksum the WAL does not hold: refused.
    let payload = iggy_metadata::codec::encode(&state);
    replace_snapshot(&storage, &iggy_snapshot::encode(25, 0xBAD, 1, &payload));
    assert!(matches!(
        open_error(&storage),
        GroupError::SnapshotUnlinked {
            snapshot_op: 25,
            ..
        }
    ));
}

#[test]
fn a_group_survives_power_loss_between_checkpoint_steps() {
    let (storage, _) = two_checkpoints();
    storage.power_loss();
    let group = MetadataGroup::open(storage, dir(), &ID, wal_config())
        .unwrap()
        .unwrap();
    assert_eq!(*group.state(), replay(&ops()[..20]));
}

#[test]
fn a_superblock_that_moved_on_without_its_log_refuses() {
    let (storage, _) = two_checkpoints();
    storage.remove_dir_all(dir().join("wal")).unwrap();
    assert!(matches!(
        open_error(&storage),
        GroupError::LogMissing { .. }
    ));
}

#[test]
fn a_log_that_no_longer_reaches_the_snapshot_refuses() {
    let (storage, _) = two_checkpoints();
    let mut group = MetadataGroup::open(storage.clone(), dir(), &ID, wal_config())
        .unwrap()
        .unwrap();
    for op in &ops()[20..40] {
        group.submit(op).unwrap().ok();
    }
    drop(group);
    let mut files: Vec<_> = iggy_io::ReadStorage::list_dir(&storage, dir().join("wal"))
        .unwrap()
        .into_iter()
        .filter(|entry| entry.name.to_string_lossy().ends_with(".wal"))
        .map(|entry| dir().join("wal").join(entry.name))
        .collect();
    files.sort();
    assert!(files.len() >= 2, "{files:?}");
    // The oldest retained file holds op 21, the first the restore needs after the snapshot.
    storage.unlink(&files[0]).unwrap();
    assert!(matches!(
        open_error(&storage),
        GroupError::LogGap { needed: 21, .. }
    ));
}

/// Without any explicit checkpoint, the group checkpoints every 960 ops on its own, so the log
/// stays within its 1024-op journal.
#[test]
fn checkpoints_happen_every_960_ops() {
    let storage = SimStorage::recording(10);
    let mut group = MetadataGroup::create(storage.clone(), dir(), ID, wal_config()).unwrap();
    for index in 0..2000u64 {
        group
            .submit(&Op::RegisterClient {
                client: u128::from(index % 50),
                session: index + 1,
            })
            .unwrap()
            .ok();
        let behind = group.applied_op() - group.superblock().state().checkpoint_op;
        assert!(
            behind < iggy_metadata::group::CHECKPOINT_INTERVAL_OPS,
            "op {index}: {behind} ops since the checkpoint"
        );
    }
    assert_eq!(group.superblock().state().checkpoint_op, 1920);
    drop(group);
    storage.power_loss();
    let restored = MetadataGroup::open(storage, dir(), &ID, wal_config())
        .unwrap()
        .unwrap();
    assert_eq!(restored.applied_op(), 2000);
}

/// A checkpoint on a disk with no room for its snapshot fails as an exhaustion
/// (`GroupError::is_exhaustion`) and leaves the group as it was: the node puts the checkpoint
/// off on that error instead of stopping, so the group must go on, checkpoint once there is
/// room, and restore to every op after a power loss.
#[test]
fn a_checkpoint_with_no_room_for_its_snapshot_leaves_the_group_as_it_was() {
    let storage = SimStorage::recording(10);
    let mut group = MetadataGroup::create(storage.clone(), dir(), ID, wal_config()).unwrap();
    let submit = |group: &mut MetadataGroup<SimStorage>, index: u64| {
        group
            .submit(&Op::RegisterClient {
                client: u128::from(index % 50),
                session: index + 1,
            })
            .unwrap()
            .ok();
    };
    for index in 0..100 {
        submit(&mut group, index);
    }
    storage.set_space_limit(Some(storage.used_bytes()));
    let error = group.checkpoint().unwrap_err();
    assert!(error.is_exhaustion(), "{error}");
    assert_eq!(group.superblock().state().checkpoint_op, 0);
    assert_eq!(group.applied_op(), 100);

    storage.set_space_limit(None);
    for index in 100..110 {
        submit(&mut group, index);
    }
    group.checkpoint().unwrap();
    assert_eq!(group.superblock().state().checkpoint_op, 110);
    drop(group);
    storage.power_loss();
    let restored = MetadataGroup::open(storage, dir(), &ID, wal_config())
        .unwrap()
        .unwrap();
    assert_eq!(restored.applied_op(), 110);
}
