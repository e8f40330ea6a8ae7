//! Seeded soak of a whole node: appends, publications, retention, consumer offsets and metadata
//! ops over the populated node, with short I/O and EIO injected on writes and syncs, now and then
//! a flipped bit at rest in any file, and a process crash or power loss every so often. After
//! each crash (with faults paused): `check` (what `iggy-fsck` runs) reports exactly the groups,
//! verdicts and plan that `boot(Open)` then has, the files boot changes are the ones that plan
//! names (`iggy_recovery::audit`), boot refuses nothing unless a bit was flipped,
//! and after boot only refused groups remain unclean. This reaches states the crash enumeration
//! of `populate` does not: retention, failed writes, poisoned groups, damage.
//!
//! `RECOVERY_SIM_SEEDS=N` runs N seeds (default 6); `RECOVERY_SIM_SEED=S` runs only seed S.
#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    reason = "test code: a failed unwrap is a failed test; casts are of small test values"
)]

use std::path::Path;

use iggy_io::soak::{SeedRng, run_seeds};
use iggy_io::{FaultConfig, ReadOnly, SimStorage};
use iggy_metadata::Op;
use iggy_recovery::populate::{Options, client_batch, populate};
use iggy_recovery::{Mode, NodeState, Status, audit, boot, check, exit};
use iggy_segments::offsets::ConsumerKind;

/// Crashes the node, then checks and boots it with faults paused. `damaged`: a bit was flipped
/// at rest, so a group may be refused; check and boot must still agree exactly, and afterwards
/// only refused groups may remain unclean.
fn restart(
    storage: &SimStorage,
    rng: &mut SeedRng,
    damaged: bool,
) -> Result<NodeState<SimStorage>, String> {
    if rng.below(2) == 0 {
        storage.crash_process();
    } else {
        storage.power_loss();
    }
    storage.set_faults(FaultConfig::default());
    let root = Path::new("");
    let checked =
        check(&ReadOnly::new(storage.clone()), root, |_, _| {}).map_err(|e| e.to_string())?;
    let files_before = audit::snapshot(storage, root).map_err(|e| e.to_string())?;
    let (node, booted) = boot(storage.clone(), root, Mode::Open).map_err(|e| e.to_string())?;
    let files_after = audit::snapshot(storage, root).map_err(|e| e.to_string())?;
    audit::compare(&checked, &audit::changed(&files_before, &files_after))?;
    if checked.plan() != booted.plan() || checked.groups != booted.groups {
        return Err(format!(
            "check and boot disagree:\n{}\n{}",
            checked.render(),
            booted.render()
        ));
    }
    if booted.exit_code() > exit::REPAIR && !damaged {
        return Err(format!("boot did not come up:\n{}", booted.render()));
    }
    let after =
        check(&ReadOnly::new(storage.clone()), root, |_, _| {}).map_err(|e| e.to_string())?;
    for group in &after.groups {
        let was = booted.groups.iter().find(|g| g.group == group.group);
        let refused_before = was.is_some_and(|g| g.error.is_some());
        if group.status != Status::Clean && !refused_before {
            return Err(format!("boot left work:\n{}", after.render()));
        }
    }
    storage.set_faults(iggy_io::soak::faults());
    Ok(node)
}

fn run(seed: u64) -> Result<(), String> {
    let mut rng = SeedRng::new(seed);
    let storage = SimStorage::new(seed);
    let options = Options {
        partitions: 3,
        batches: 10,
        unpublished_batches: 1,
        segment_size_bytes: 4096,
        metadata_file_bytes: 8192,
        max_messages: 3,
        replicas: 3,
    };
    populate(&storage, Path::new(""), &options)?;
    let mut node = restart(&storage, &mut rng, false)?;
    let mut damaged = false;
    let mut restarts = 0;
    for step in 0..200u64 {
        let keys: Vec<_> = node.partitions.keys().copied().collect();
        if keys.is_empty() {
            // Every partition refused after rot: nothing left to drive.
            break;
        }
        let key = keys[rng.below(keys.len() as u64) as usize];
        let partition = &node.partitions[&key];
        // Errors are expected under the faults; a component that failed refuses by itself
        // until the restart below.
        let failed = match rng.below(100) {
            0..=49 => {
                let mut batch = client_batch(key, 100 + step, 3);
                partition.append(&mut batch, 1_000 + step).is_err()
            }
            50..=69 => partition.publish().is_err(),
            70..=74 => partition.apply_retention(0, None, Some(8000)).is_err(),
            75..=79 => partition
                .offsets()
                .store(ConsumerKind::Consumer, 1, step)
                .is_err(),
            80..=84 => match node.metadata.as_mut() {
                Some(group) => group
                    .submit(&Op::CreateStream {
                        name: format!("soak-{step}"),
                    })
                    .is_err(),
                None => false,
            },
            85 => {
                // A flipped bit at rest somewhere in the node, found at the next restart.
                iggy_io::soak::rot_one_file(&storage, Path::new(""), &mut rng);
                damaged = true;
                true
            }
            _ => partition.read(partition.first_offset(), 8192).is_err(),
        };
        if failed || rng.below(25) == 0 {
            drop(node);
            node = restart(&storage, &mut rng, damaged).map_err(|e| format!("step {step}: {e}"))?;
            restarts += 1;
        }
    }
    drop(node);
    restart(&storage, &mut rng, damaged)?;
    if restarts == 0 {
        return Err("the run never restarted".into());
    }
    Ok(())
}

#[test]
fn after_every_crash_fsck_plans_what_boot_does_and_boot_leaves_the_node_clean() {
    run_seeds(
        "RECOVERY_SIM",
        6,
        "cargo test -p iggy-recovery --test soak",
        run,
    );
}
