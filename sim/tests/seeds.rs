//! Random seeds of the whole simulator: three nodes, a metadata group and four partitions (two
//! of each durability), every fault, then the liveness phase. The default run takes
//! `SIM_SEEDS` seeds from `SIM_SEED_FROM` (200 from 0); `docs/testing.md` has the long runs.
//! The safeguards that random seeds find are shown here too: with one off, a seed among the
//! first few fails, and the checker that fires is the one that names the bug (the fault placer
//! aims some faults at the protocol's moments: a crash right after a `DoViewChange`, a late
//! answer to a probe while its asker restarts).
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use iggy_sim::{Options, run};
use iggy_vsr::Safeguards;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn every_seed_keeps_every_commit_and_reply_and_converges() {
    let from = env("SIM_SEED_FROM", 0);
    let seeds = env("SIM_SEEDS", 200);
    let mut simulated_us = 0;
    let mut wall = std::time::Duration::ZERO;
    let (mut longest, mut two_node_crashes, mut stop_alls) = (0, 0, 0);
    let mut from_disk = 0;
    let mut installed = 0;
    let mut transferred = 0;
    for seed in from..from + seeds {
        let report = run(Options::new(seed));
        installed += u64::from(report.snapshots_installed > report.partitions_installed);
        transferred += u64::from(report.partitions_installed > 0);
        longest = longest.max(report.group_ops.iter().max().copied().unwrap_or(0));
        from_disk += u64::from(report.disk_read_prepares > 0);
        two_node_crashes += report.two_node_crashes;
        stop_alls += report.stop_alls;
        simulated_us += report.simulated_us;
        wall += report.wall;
        eprintln!(
            "seed {seed}: {:.1} simulated s in {:.3} wall s, {} ops committed, {} crashes, {} \
             view changes",
            report.simulated_us as f64 / 1e6,
            report.wall.as_secs_f64(),
            report.committed_ops,
            report.crashes,
            report.view_changes
        );
        if let Some(failure) = report.failure {
            panic!(
                "seed {seed} failed:\n{}\nreplay: cargo run --release -p iggy-sim -- --seed {seed}",
                failure.render()
            );
        }
        assert!(report.committed_ops > 0, "seed {seed} committed nothing");
        // Outages pass the drawn rings and repair reads from the peers' disks, a metadata
        // replica below every peer's log installs a snapshot, and a partition replica below
        // what its peers' retention kept (three seeds in ten retain) installs their segments;
        // nothing leaves a replica behind them.
        assert_eq!(
            report.behind_ring, 0,
            "seed {seed}: a replica fell behind the ring"
        );
    }
    eprintln!(
        "{seeds} seeds from {from}: {:.0} simulated s in {:.1} wall s; longest group {longest} \
         ops; {two_node_crashes} two-node crashes, {stop_alls} clean stops of every node; \
         {from_disk} seeds repaired from the peers' disks, {installed} installed a metadata \
         snapshot, {transferred} a partition's segments",
        simulated_us as f64 / 1e6,
        wall.as_secs_f64()
    );
    // The run reached past the protocol's bounds it is meant to test: a group of thousands of
    // ops (the 128-header window, the metadata checkpoint), two nodes down at once, every node
    // stopped and started together, replicas back below their peers' rings.
    if seeds >= 50 {
        assert!(longest >= 1_000, "the longest group had {longest} ops");
        assert!(two_node_crashes > 0 && stop_alls > 0);
        assert!(from_disk > 0, "no seed repaired from the peers' disks");
        assert!(installed > 0, "no seed installed a metadata snapshot");
        assert!(transferred > 0, "no seed transferred a partition");
    }
}

/// Issue #45, linearizable reads: every consumer polls through the node it is connected to,
/// after a read barrier there, and checker `linearizable` requires each read to reflect every
/// write acknowledged before it was asked. Off, each safeguard lets a read miss one: many-groups
/// seed 2 without `read-confirmation` (a primary serves without a quorum proving its view after
/// the read arrived), seed 7 without `read-index-earlier-views` (a new primary's index below an
/// op of an earlier view it has not committed again; seed 0 until the acknowledgment bound's
/// superblock writes moved the seeds' timings). Both seeds pass with them on.
#[test]
fn without_the_read_safeguards_a_read_misses_an_acknowledged_write() {
    for (seed, safeguard) in [(2, "read-confirmation"), (7, "read-index-earlier-views")] {
        let with = run(Options::many_groups(seed));
        assert!(
            with.failure.is_none(),
            "seed {seed}: {:?}",
            with.failure.map(|f| f.render())
        );
        assert!(with.reads_served > 0);
        let without = run(Options {
            safeguards: Safeguards::without(safeguard).unwrap(),
            ..Options::many_groups(seed)
        });
        let failure = without
            .failure
            .unwrap_or_else(|| panic!("seed {seed} passes without {safeguard}"));
        assert_eq!(
            failure.checker, "linearizable",
            "seed {seed} without {safeguard}"
        );
    }
}

/// The node of many groups: the metadata group and 24 partitions, a random client per group and
/// a producer per partition routed by its node, every fault. `SIM_MANY_SEEDS` seeds (40: with
/// the drawn histories the longest of them run 37,000 ops in 5 s) from `SIM_MANY_SEED_FROM` (0).
#[test]
fn every_seed_of_a_node_of_many_groups_keeps_every_acknowledged_batch_and_converges() {
    let from = env("SIM_MANY_SEED_FROM", 0);
    let seeds = env("SIM_MANY_SEEDS", 40);
    let mut sends = 0;
    let mut expected = 0;
    let mut longest = 0;
    let mut from_disk = 0;
    let mut transferred = 0;
    let mut reads = 0;
    for seed in from..from + seeds {
        let report = run(Options::many_groups(seed));
        reads += report.reads_served;
        expected += 24 * 40 * report.history_factor;
        longest = longest.max(report.group_ops.iter().max().copied().unwrap_or(0));
        if let Some(failure) = report.failure {
            panic!(
                "seed {seed} failed:\n{}\nreplay: cargo run --release -p iggy-sim -- --seed \
                 {seed} --many-groups",
                failure.render()
            );
        }
        assert!(report.committed_ops > 0, "seed {seed} committed nothing");
        assert_eq!(
            report.behind_ring, 0,
            "seed {seed}: a replica fell behind the ring"
        );
        sends += report.producer_sends;
        from_disk += u64::from(report.disk_read_prepares > 0);
        transferred += u64::from(report.partitions_installed > 0);
    }
    // Every producer's batches (40, times the seed's history factor) reached an outcome (the
    // liveness phase waits for them).
    assert_eq!(sends, expected);
    if seeds >= 20 {
        assert!(longest >= 1_000, "the longest group had {longest} ops");
        assert!(from_disk > 0, "no seed repaired from the peers' disks");
        assert!(transferred > 0, "no seed transferred a partition");
        assert!(reads > 0, "no consumer's poll was read after its barrier");
    }
}

/// Partitions damaged at rest (`Faults::damage`): a restart finds one of the node's partitions
/// without its WAL frontier, while the other two nodes hold every committed op, and the node's
/// boot rebuilds it from its peers. `SIM_DAMAGE_SEEDS` seeds (30) from `SIM_DAMAGE_SEED_FROM`
/// (0): every checker holds and every group converges, and partitions were rebuilt.
#[test]
fn every_seed_with_damaged_partitions_rebuilds_them_and_converges() {
    let from = env("SIM_DAMAGE_SEED_FROM", 0);
    let seeds = env("SIM_DAMAGE_SEEDS", 30);
    let mut rebuilt = 0;
    for seed in from..from + seeds {
        let mut options = Options::new(seed);
        options.faults.damage = true;
        let report = run(options);
        if let Some(failure) = report.failure {
            panic!(
                "seed {seed} failed:\n{}\nreplay: cargo run --release -p iggy-sim -- --seed \
                 {seed} --damage",
                failure.render()
            );
        }
        assert_eq!(report.behind_ring, 0, "seed {seed}: a replica fell behind");
        rebuilt += report.rebuilt;
    }
    if seeds >= 10 {
        assert!(rebuilt > 0, "no partition was rebuilt");
    }
    eprintln!("{seeds} seeds from {from}: {rebuilt} partitions rebuilt from their peers");
}

/// Full disks (`Faults::full_disk`): half the storage faults leave a node's disk with less room
/// than a log file for 0.2 to 2 s. `SIM_FULL_DISK_SEEDS` seeds (20) from
/// `SIM_FULL_DISK_SEED_FROM` (0): every checker holds (checker `full-disk`: no replica halts
/// while its disk is full), every group converges, and backups' journal writes were refused
/// and tried again. Without `journal-refusal` the first such refusal halts its replica.
#[test]
fn every_seed_with_full_disks_refuses_and_goes_on() {
    let from = env("SIM_FULL_DISK_SEED_FROM", 0);
    let seeds = env("SIM_FULL_DISK_SEEDS", 20);
    let (mut full_disks, mut refused) = (0, 0);
    for seed in from..from + seeds {
        let mut options = Options::new(seed);
        options.faults.full_disk = true;
        let report = run(options);
        if let Some(failure) = report.failure {
            panic!(
                "seed {seed} failed:\n{}\nreplay: cargo run --release -p iggy-sim -- --seed \
                 {seed} --full-disk",
                failure.render()
            );
        }
        full_disks += report.full_disks;
        refused += report.journals_refused;
    }
    if seeds >= 10 {
        assert!(refused > 0, "no journal write met a full disk");
    }
    eprintln!("{seeds} seeds from {from}: {full_disks} full disks, {refused} journals refused");
}

#[test]
fn without_journal_refusal_a_full_disk_halts_a_replica() {
    let safeguards = Safeguards::without("journal-refusal").unwrap();
    let (seed, checker) = (0..40)
        .find_map(|seed| {
            let mut options = Options {
                safeguards,
                ..Options::new(seed)
            };
            options.faults.full_disk = true;
            run(options).failure.map(|f| (seed, f.checker))
        })
        .expect("a seed fails");
    assert_eq!(checker, "full-disk", "seed {seed}");
}

/// The first seed below `limit` that fails with `safeguard` off, and the checker that fired.
fn first_failure(safeguard: &str, limit: u64) -> Option<(u64, String)> {
    let safeguards = Safeguards::without(safeguard).unwrap();
    (0..limit).find_map(|seed| {
        run(Options {
            safeguards,
            ..Options::new(seed)
        })
        .failure
        .map(|f| (seed, f.checker))
    })
}

#[test]
fn without_publish_before_log_view_a_restart_finds_its_log_view_without_its_log() {
    let (seed, checker) = first_failure("publish-before-log-view", 20).expect("a seed fails");
    assert_eq!(checker, "durable log_view", "seed {seed}");
}

#[test]
fn without_same_view_keeps_log_a_recovering_replica_cuts_what_it_acknowledged() {
    let (seed, checker) = first_failure("same-view-keeps-log", 20).expect("a seed fails");
    assert_eq!(checker, "held log", "seed {seed}");
}

#[test]
fn without_the_body_fetch_a_random_seed_loses_a_commit() {
    let (seed, checker) = first_failure("body-fetch", 60).expect("a seed fails");
    assert!(
        checker == "commit history" || checker == "replies",
        "seed {seed}: {checker}"
    );
}

#[test]
fn without_the_hole_check_lower_bound_a_random_seed_overwrites_a_commit() {
    let (seed, checker) = first_failure("hole-check-lower-bound", 60).expect("a seed fails");
    assert!(
        checker == "commit history" || checker == "replies",
        "seed {seed}: {checker}"
    );
}

#[test]
fn without_the_incarnation_echo_a_late_probe_answer_cuts_acknowledged_ops() {
    let (seed, checker) = first_failure("incarnation-echo", 30).expect("a seed fails");
    assert_eq!(checker, "held log", "seed {seed}");
}

/// Issue #33: many-groups seed 1 (17 until the consumers read through barriers, then 7 until the
/// acknowledgment bound's superblock writes moved the seeds' timings) with every partition keeping at most 256 KiB (the nodes run
/// retention): replicas down or cut off come back below both peers' logs (retention deleted what
/// they lack) and install a peer's committed segments; the seed converges. With
/// `snapshot-transfer` off a replica stays behind every peer's log and the liveness check fires.
#[test]
fn many_groups_with_retention_catch_up_by_partition_transfers() {
    let options = || Options {
        retention_bytes: 256 << 10,
        ..Options::many_groups(1)
    };
    let report = run(options());
    assert!(
        report.failure.is_none(),
        "{:?}",
        report.failure.map(|f| f.render())
    );
    assert!(report.snapshots_installed >= 1, "seed 1 installed nothing");
    assert_eq!(report.behind_ring, 0);
    let without = run(Options {
        safeguards: Safeguards::without("snapshot-transfer").unwrap(),
        ..options()
    });
    assert_eq!(without.snapshots_installed, 0);
    let failure = without.failure.expect("seed 1 fails without the transfer");
    assert_eq!(failure.checker, "liveness");
    assert!(without.behind_ring >= 1);
}

/// Issue #48: a commit writes a consumer's offset into its file without a sync, and retention
/// settles the files before it deletes a segment (`Partition::settle_offsets`). Many-groups seed
/// 5 with retention, whose consumers rest 3 to 15 s between stores while the producers go on,
/// powers a node off after its retention deleted the segment holding a resting consumer's last
/// store: without the settle in `apply_retention_below` that node boots reading no offset for
/// the consumer (checker `stored-offsets`, run by hand: the rule is the partition's, not a
/// replica safeguard to turn off here).
#[test]
fn many_groups_with_retention_keep_a_resting_consumers_offset_through_a_power_loss() {
    let report = run(Options {
        retention_bytes: 256 << 10,
        ..Options::many_groups(5)
    });
    assert!(
        report.failure.is_none(),
        "{:?}",
        report.failure.map(|f| f.render())
    );
    assert!(report.crashes >= 1, "seed 5 crashed no node");
}

/// Issue #33: seed 43 (35 until session 49's recovering replicas joined view changes at once,
/// then 9 until the acknowledgment bound's superblock writes moved the seeds' timings again,
/// then 158 until session 52's first probe at 100 ms, then 76 until session 57's repair rounds
/// asked the primary first and read rounds were sent again, then 35 until session 64 wrote a
/// partition's entries out after their prepare instead of at their commit, which moved the
/// storage faults' draws; 91 and 240 of seeds 0..400 do it too) leaves a metadata replica below
/// both peers' checkpoints (their logs start after them). It installs a peer's snapshot and
/// converges; with `snapshot-transfer` off it stays behind every peer's log and the liveness
/// check fires.
#[test]
fn a_metadata_replica_below_every_peers_checkpoint_installs_a_snapshot() {
    let report = run(Options::new(43));
    assert!(
        report.failure.is_none(),
        "{:?}",
        report.failure.map(|f| f.render())
    );
    assert!(
        report.snapshots_installed > report.partitions_installed,
        "seed 43 installed no metadata snapshot"
    );
    let without = run(Options {
        safeguards: Safeguards::without("snapshot-transfer").unwrap(),
        ..Options::new(43)
    });
    assert_eq!(without.snapshots_installed, 0);
    let failure = without.failure.expect("seed 43 fails without the transfer");
    assert_eq!(failure.checker, "liveness");
    assert!(without.behind_ring >= 1);
}

/// Issue #45: the deaf fault (`Faults::deaf`, about one seed in four): a group's primary stops
/// hearing its peers for 12 to 18 s while they still hear it, and checker `availability`
/// requires every group with a request waiting to commit again within 11 s. Without
/// `commit-stall` the backups take the deaf primary's commit broadcasts, whose commit point never
/// moves, for a live primary and follow it for the whole fault (seed 9 is the first of the
/// default seeds to fail: its group waits 11 s at commit point 151).
#[test]
fn without_the_commit_stall_rule_a_deaf_primary_stalls_its_group() {
    let (seed, checker) = first_failure("commit-stall", 20).expect("a seed fails");
    assert_eq!(checker, "availability", "seed {seed}");
    let with = run(Options::new(seed));
    assert!(
        with.failure.is_none(),
        "seed {seed}: {:?}",
        with.failure.map(|f| f.render())
    );
    assert_eq!(with.deaf_faults, 1, "seed {seed} drew no deaf fault");
}
