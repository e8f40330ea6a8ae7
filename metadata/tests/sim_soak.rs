//! Seeded fault soak of the metadata group: ops submitted one by one (each published before it
//! is acknowledged), checkpoints (snapshot, superblock, WAL prefix), process crashes and power
//! losses, and now and then a flipped bit at rest, on a `SimStorage` injecting short I/O and EIO
//! on writes and syncs. After rot, boot refuses (a single rotten superblock copy must be
//! repaired, never refused) or restores exactly the acknowledged state. After a failed
//! call the harness keeps going; a poisoned WAL or superblock makes it restart. After every
//! boot the state is exactly the replay of the acknowledged ops, or of those plus the one that
//! failed (its publication may have landed), and what one boot restored survives a power loss
//! right after it.
//!
//! `METADATA_SIM_SEEDS=N` runs N seeds (default 12); `METADATA_SIM_SEED=S` runs only seed S.
#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    reason = "test code: a failed unwrap is a failed test; casts are of small test values"
)]

use std::path::Path;

use iggy_io::SimStorage;
use iggy_metadata::group::{GROUP_ID, GroupError, MetadataGroup};
use iggy_metadata::{Durability, Op, Retention, State};
use iggy_superblock::{Identity, SuperblockError};
use iggy_wal::{Config, WalError};

const ID: Identity = Identity {
    cluster: 0x5A,
    replica: 0,
    replica_count: 3,
};

fn dir() -> &'static Path {
    Path::new("metadata")
}

fn wal_config() -> Config {
    Config {
        file_size_bytes: 4096,
        ..Config::new(GROUP_ID)
    }
}

type Rng = iggy_io::soak::SeedRng;

fn op(rng: &mut Rng, step: u64) -> Op {
    match rng.below(4) {
        0 => Op::CreateStream {
            name: format!("stream-{step}"),
        },
        1 => Op::CreateTopic {
            stream: 1 + rng.below(8) as u32,
            name: format!("topic-{step}"),
            partitions: 1 + rng.below(3) as u32,
            durability: Durability::Replicated,
            segment_size_bytes: 1 << 20,
            retention: Retention::default(),
            replication_factor: 3,
        },
        2 => Op::RegisterClient {
            client: u128::from(rng.below(6)),
            session: step,
        },
        _ => Op::DeleteStream {
            stream: 1 + rng.below(8) as u32,
        },
    }
}

fn replay(ops: &[Op]) -> State {
    let mut state = State::new(ID.replica_count);
    for op in ops {
        let _ = state.apply(op);
    }
    state
}

/// Whether the error means "restart": a component refuses everything until reopened.
fn poisoned(error: &GroupError) -> Result<bool, String> {
    match error {
        GroupError::Wal(error) => match **error {
            WalError::Io(_) => Ok(false),
            WalError::Poisoned { .. } => Ok(true),
            ref other => Err(format!("unexpected WAL error {other}")),
        },
        GroupError::Superblock(error) => match **error {
            SuperblockError::Io(_) => Ok(false),
            SuperblockError::Poisoned { .. } => Ok(true),
            ref other => Err(format!("unexpected superblock error {other}")),
        },
        GroupError::Snapshot(iggy_snapshot::SnapshotError::Io(_)) => Ok(false),
        other => Err(format!("unexpected error {other}")),
    }
}

fn open(storage: &SimStorage) -> Result<Option<MetadataGroup<SimStorage>>, GroupError> {
    MetadataGroup::open(storage.clone(), dir(), &ID, wal_config())
}

/// Crashes, boots (retrying after injected I/O faults), and checks the restored state.
/// Whether `error` is damage in a file this run rotted: a refusal it must make (a WAL file the
/// frontier passed is taken from its seal, and a seal is written without a sync, so a later boot
/// may scan the file and meet the rot an earlier one did not read).
fn refused_rot(error: &GroupError, rotted: &[std::path::PathBuf]) -> bool {
    matches!(error, GroupError::Wal(wal_error)
        if matches!(&**wal_error, WalError::Corrupt { file, .. } if rotted.contains(file)))
}

/// The "process" dies and boots; `None`: boot refused damage in a file this run rotted (the
/// replica needs its peers now; the run ends).
fn restart(
    storage: &SimStorage,
    rng: &mut Rng,
    acknowledged: &mut Vec<Op>,
    failed: Option<Op>,
    rotted: &[std::path::PathBuf],
) -> Result<Option<MetadataGroup<SimStorage>>, String> {
    for _ in 0..20 {
        if rng.below(2) == 0 {
            storage.crash_process();
        } else {
            storage.power_loss();
        }
        let group = match open(storage) {
            Ok(Some(group)) => group,
            Ok(None) => return Err("the group vanished".into()),
            Err(error) if refused_rot(&error, rotted) => return Ok(None),
            Err(error) if !poisoned(&error)? => continue,
            Err(error) => return Err(format!("boot refused: {error}")),
        };
        let state = group.state().clone();
        if state != replay(acknowledged) {
            let mut with_failed = acknowledged.clone();
            with_failed.extend(failed.clone());
            if failed.is_none() || state != replay(&with_failed) {
                return Err(format!(
                    "restored state is not the replay of the {} acknowledged ops",
                    acknowledged.len()
                ));
            }
            *acknowledged = with_failed;
        }
        // What this boot restored must survive a power loss right after it.
        drop(group);
        storage.power_loss();
        match open(storage) {
            Ok(Some(again)) if *again.state() == state => return Ok(Some(again)),
            Ok(Some(_)) => return Err("a power loss after boot took back restored ops".into()),
            Ok(None) => return Err("the group vanished".into()),
            Err(error) if refused_rot(&error, rotted) => return Ok(None),
            Err(error) if !poisoned(&error)? => {}
            Err(error) => return Err(format!("boot refused: {error}")),
        }
    }
    Err("boot failed 20 times in a row".into())
}

fn run(seed: u64) -> Result<(), String> {
    let mut rng = Rng::new(seed);
    let storage = SimStorage::new(seed);
    let mut group = MetadataGroup::create(storage.clone(), dir(), ID, wal_config())
        .map_err(|e| e.to_string())?;
    storage.set_faults(iggy_io::soak::faults());
    let mut acknowledged: Vec<Op> = Vec::new();
    // Files rotted at rest so far: a WAL file the frontier passed is taken from its seal at
    // boot, its bodies verified by the reads that serve them, so the rot may surface later.
    let mut rotted_files: Vec<std::path::PathBuf> = Vec::new();
    let mut checkpoints = 0;
    for step in 0..250u64 {
        let choice = rng.below(100);
        let (result, failed) = if choice < 85 {
            let op = op(&mut rng, step);
            match group.submit(&op) {
                Ok(_) => {
                    acknowledged.push(op);
                    (Ok(()), None)
                }
                Err(error) => (Err(error), Some(op)),
            }
        } else if choice < 93 {
            let result = group.checkpoint();
            checkpoints += usize::from(result.is_ok());
            (result, None)
        } else if choice == 93 {
            // Bit rot at rest, then a boot: a refusal, or exactly the acknowledged state.
            drop(group);
            let rotted =
                iggy_io::soak::rot_one_file(&storage, dir(), &mut rng).ok_or("nothing to rot")?;
            rotted_files.push(rotted.clone());
            let mut opened = None;
            for _ in 0..20 {
                match open(&storage) {
                    Ok(Some(booted)) => {
                        opened = Some(booted);
                        break;
                    }
                    Ok(None) => return Err(format!("step {step}: the group vanished")),
                    // An injected I/O fault during the boot: crash and boot again.
                    Err(error) if poisoned(&error).is_ok() => storage.crash_process(),
                    Err(error) => {
                        // Only what boot must trust may refuse: one superblock copy is repaired.
                        if rotted.ends_with(iggy_superblock::FILE_NAME) {
                            return Err(format!(
                                "step {step}: one rotten superblock copy refused: {error}"
                            ));
                        }
                        return Ok(());
                    }
                }
            }
            let opened = opened.ok_or(format!("step {step}: boot failed 20 times"))?;
            if *opened.state() != replay(&acknowledged) {
                return Err(format!(
                    "step {step}: rot in {} changed the restored state",
                    rotted.display()
                ));
            }
            group = opened;
            (Ok(()), None)
        } else {
            drop(group);
            match restart(&storage, &mut rng, &mut acknowledged, None, &rotted_files)
                .map_err(|e| format!("step {step}: {e}"))?
            {
                Some(booted) => group = booted,
                None => return Ok(()),
            }
            (Ok(()), None)
        };
        if let Err(error) = &result
            && let GroupError::Wal(wal_error) = error
            && let WalError::Corrupt { file, .. } = &**wal_error
        {
            // A read met rot at rest in a sealed file and refused to serve it, naming the
            // file: only a file rotted here may be named, and a deep check must refuse the
            // group too. The replica needs its peers now, as after a refusal at boot.
            if !rotted_files.contains(file) {
                return Err(format!(
                    "step {step}: damage in a file never rotted: {error}"
                ));
            }
            drop(group);
            let deep = iggy_metadata::group::check_verifying(
                &iggy_io::ReadOnly::new(storage.clone()),
                dir(),
                &ID,
                iggy_wal::boot::Verify::Everything,
            );
            if deep.is_ok() {
                return Err(format!(
                    "step {step}: a read refused ({error}), a deep check did not"
                ));
            }
            return Ok(());
        }
        if let Err(error) = result {
            // A failed submit may have been published anyway; the restart decides.
            if poisoned(&error).map_err(|e| format!("step {step}: {e}"))? || failed.is_some() {
                drop(group);
                match restart(&storage, &mut rng, &mut acknowledged, failed, &rotted_files)
                    .map_err(|e| format!("step {step}: {e}"))?
                {
                    Some(booted) => group = booted,
                    None => return Ok(()),
                }
            }
        }
    }
    drop(group);
    restart(&storage, &mut rng, &mut acknowledged, None, &rotted_files)?;
    if checkpoints == 0 {
        return Err("no checkpoint succeeded".into());
    }
    Ok(())
}

#[test]
fn seeded_faults_and_crashes_restore_exactly_the_acknowledged_ops() {
    iggy_io::soak::run_seeds(
        "METADATA_SIM",
        12,
        "cargo test -p iggy-metadata --test sim_soak",
        run,
    );
}
