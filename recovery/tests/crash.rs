//! For crash states of the populate workload (a metadata group with a checkpoint, three
//! partitions with rotations, publications and unpublished tails, consumer offsets), `check`
//! (what `iggy-fsck` runs) reports exactly the verdict and the plan that `boot(Open)` then carries
//! out, the files boot changes are exactly the files that plan names (`iggy_recovery::audit`),
//! and after `boot(Open)` nothing is left that boot could do: the node checks clean, or only
//! partitions whose directories a crash kept from being created remain. (`populate` checkpoints
//! the metadata before it creates the partitions, unlike a node, so the checkpoint lists them:
//! `missing-partition`, repaired from peers. A node's own order, where boot finishes the create,
//! is enumerated in `node/tests/crash.rs`.)
//!
//! The default run samples crash points so that at least 1,000 states are checked;
//! `RECOVERY_CRASH_FULL=1` checks every crash point, with every state the model allows there up
//! to 256 subsets of pending writes and 16 torn writes.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::path::Path;

use iggy_io::{EnumerationConfig, ReadOnly, SimStorage, enumerate};
use iggy_recovery::populate::{Options, populate};
use iggy_recovery::{Mode, Status, audit, boot, check, exit};

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

#[test]
fn fsck_verdict_and_plan_equal_what_boot_does_in_every_crash_state() {
    let storage = SimStorage::recording(77);
    populate(&storage, Path::new(""), &options()).unwrap();
    let trace = storage.trace();
    let storage_ops = trace.iter().filter(|op| op.is_storage_op()).count();
    let full = std::env::var_os("RECOVERY_CRASH_FULL").is_some();
    let config = EnumerationConfig {
        seed: 5,
        max_states_per_point: if full { 256 } else { 8 },
        torn_states_per_point: if full { 16 } else { 1 },
        max_points: if full { None } else { Some(190) },
        ..EnumerationConfig::default()
    };
    let mut verdicts = [0usize; 9];
    let mut missing = 0usize;
    let counts = enumerate(&trace, &config, |crash| {
        let checked = match check(
            &ReadOnly::new(crash.storage.clone()),
            Path::new(""),
            |_, _| {},
        ) {
            Ok(report) => report,
            // Before the first directory exists there is no node to check or boot.
            Err(iggy_recovery::RecoveryError::NotANode { .. }) => return Ok(()),
            Err(error) => return Err(format!("check failed: {error}")),
        };
        let files_before =
            audit::snapshot(&crash.storage, Path::new("")).map_err(|e| e.to_string())?;
        let (_, booted) = boot(crash.storage.clone(), Path::new(""), Mode::Open)
            .map_err(|e| format!("boot failed: {e}"))?;
        let files_after =
            audit::snapshot(&crash.storage, Path::new("")).map_err(|e| e.to_string())?;
        audit::compare(&checked, &audit::changed(&files_before, &files_after))?;
        if checked.plan() != booted.plan() {
            return Err(format!(
                "check plans {:?}\nboot did {:?}",
                checked.plan(),
                booted.plan()
            ));
        }
        if checked.exit_code() != booted.exit_code() || checked.groups != booted.groups {
            return Err(format!(
                "verdicts differ: check {:?}, boot {:?}",
                checked.groups, booted.groups
            ));
        }
        verdicts[usize::from(checked.exit_code())] += 1;
        let after = check(
            &ReadOnly::new(crash.storage.clone()),
            Path::new(""),
            |_, _| {},
        )
        .map_err(|e| e.to_string())?;

        let left = after.groups.iter().any(|group| {
            group.status != Status::Clean
                && !after
                    .findings
                    .iter()
                    .any(|f| f.group == group.group && f.kind == "missing-partition")
        });
        if left || !after.planned_files().is_empty() {
            return Err(format!("after boot(Open): {}", after.render()));
        }
        if after.exit_code() != exit::CLEAN {
            missing += 1;
        }
        Ok(())
    })
    .unwrap_or_else(|failure| panic!("{failure}"));
    eprintln!(
        "{counts:?} over {storage_ops} storage operations; exit codes seen: {verdicts:?}; \
         {missing} states with partitions not yet created"
    );
    assert!(counts.states >= 1000, "{counts:?}");
    // The sample reaches both clean states and states boot repairs.
    assert!(verdicts[0] > 0 && verdicts[1] > 0, "{verdicts:?}");
}
