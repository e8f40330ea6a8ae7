//! `iggy-bench boot`: how long a node takes to boot with many idle partitions, through the one
//! boot path the server and the tools share (`iggy_recovery::boot_with`, `Open` mode). Builds a
//! node (the metadata group, a stream, a topic of N partitions, and the N partition
//! directories) and times three boots: one after the creating process simply exited (no
//! clean-shutdown marker: every group's trusted state is written again, as after a crash), one
//! after a clean shutdown (`NodeState::shutdown`: the marker lets boot skip those rewrites),
//! and one after a crash that left one unpublished batch in every partition (appended without
//! publishing, then everything dropped, as a process killed there leaves the node). Each boot's device flushes are read from
//! the block device's counters where the kernel exposes them.

use std::path::Path;
use std::time::Instant;

use iggy_io::{OsStorage, Storage};
use iggy_metadata::{Durability, Op, Retention};
use iggy_recovery::{BootConfig, Mode, PartitionKey, populate};
use serde::Serialize;

/// What to run.
#[derive(Clone, Debug, Serialize)]
pub struct Sizes {
    /// Partition counts, each a node of its own.
    pub partitions: Vec<u32>,
    pub segment_size_bytes: u64,
    /// Boot writes synced once for the node (`BootConfig::defer_boot_syncs`), or by each group.
    pub defer_boot_syncs: bool,
}

/// One node.
#[derive(Clone, Debug, Serialize)]
pub struct Run {
    pub partitions: u32,
    /// Creating the node (not a boot: for scale).
    pub create_seconds: f64,
    /// Boot after the creating process exited without the clean-shutdown marker.
    pub unmarked_seconds: f64,
    pub unmarked_flushes: Option<u64>,
    /// Boot after a clean shutdown (the marker).
    pub clean_seconds: f64,
    pub clean_flushes: Option<u64>,
    /// Boot after a crash that left one unpublished batch in every partition.
    pub crash_seconds: f64,
    pub crash_flushes: Option<u64>,
    /// File descriptors the booted node holds open (`/proc/self/fd`, less those before).
    pub open_files: Option<u64>,
}

fn err(e: &dyn std::fmt::Display) -> String {
    e.to_string()
}

/// Runs each partition count of `sizes` in `dir`, one after another; stops at the first that
/// fails, returning the runs done and why.
pub fn run(
    dir: &Path,
    sizes: &Sizes,
    mut progress: impl FnMut(&str),
) -> (Vec<Run>, Option<String>) {
    let mut runs = Vec::new();
    for &partitions in &sizes.partitions {
        match run_one(dir, sizes, partitions, &mut progress) {
            Ok(run) => runs.push(run),
            Err(error) => {
                // The node it built stays only as long as the run (segments are preallocated).
                if let Ok(parent) = OsStorage::open(dir) {
                    let _ = parent.remove_dir_all(format!("boot-{partitions}"));
                }
                return (runs, Some(error));
            }
        }
    }
    (runs, None)
}

fn run_one(
    dir: &Path,
    sizes: &Sizes,
    partitions: u32,
    progress: &mut impl FnMut(&str),
) -> Result<Run, String> {
    {
        let label = format!("boot-{partitions}");
        let base = crate::engines::run_dir(dir, &label)?;
        let storage = OsStorage::open(&base).map_err(|e| err(&e))?;
        let config = BootConfig {
            metadata_file_size_bytes: 4 << 20,
            segment_size_bytes: sizes.segment_size_bytes,
            // As the server and the tools boot (`BootConfig::fresh`).
            boot_threads: BootConfig::fresh().boot_threads,
            defer_boot_syncs: sizes.defer_boot_syncs,
            ..BootConfig::new(1)
        };
        progress(&format!("{partitions} partitions: creating"));
        let started = Instant::now();
        create(&storage, partitions, sizes.segment_size_bytes, &config)?;
        let create_seconds = started.elapsed().as_secs_f64();

        progress(&format!("{partitions} partitions: boot without the marker"));
        let (unmarked_seconds, unmarked_flushes, state) =
            timed_boot(&storage, &base, &config, 2).map_err(|e| too_many_files(e, partitions))?;
        state.shutdown(&storage, Path::new(""))?;
        progress(&format!(
            "{partitions} partitions: boot after a clean shutdown"
        ));
        let files_before = iggy_io::open_file_count();
        let (clean_seconds, clean_flushes, state) =
            timed_boot(&storage, &base, &config, 3).map_err(|e| too_many_files(e, partitions))?;
        let open_files = iggy_io::open_file_count()
            .zip(files_before)
            .map(|(after, before)| after.saturating_sub(before));
        // A batch queued in every partition and never published, then the process gone.
        for (key, partition) in &state.partitions {
            let mut batch = populate::client_batch(*key, 1, 4);
            partition
                .append(&mut batch, 1_700_000_000_000_000)
                .map_err(|e| err(&e))?;
            // In the file (the page cache), not published: what a kill leaves.
            partition.wal().write_buffered().map_err(|e| err(&e))?;
        }
        drop(state);

        progress(&format!("{partitions} partitions: boot after a crash"));
        let (crash_seconds, crash_flushes, state) =
            timed_boot(&storage, &base, &config, 4).map_err(|e| too_many_files(e, partitions))?;
        let discarded: u64 = state
            .partitions
            .values()
            .map(|p| p.unpublished_bytes())
            .sum();
        if discarded != 0 {
            return Err(format!("boot kept {discarded} unpublished bytes"));
        }
        drop(state);
        OsStorage::open(dir)
            .and_then(|parent| parent.remove_dir_all(&label))
            .map_err(|e| err(&e))?;
        Ok(Run {
            partitions,
            create_seconds,
            unmarked_seconds,
            unmarked_flushes,
            clean_seconds,
            clean_flushes,
            crash_seconds,
            crash_flushes,
            open_files,
        })
    }
}

/// Says what an "os error 24" means here.
fn too_many_files(error: String, partitions: u32) -> String {
    if !error.contains("os error 24") {
        return error;
    }
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    format!(
        "{error}\n  {partitions} booted partitions hold more files open than this process may \
         (RLIMIT_NOFILE soft {:?}, hard {:?}); a booted idle partition holds one (its head \
         segment), one more for each sealed segment: raise the limit (ulimit -n) or boot \
         fewer partitions",
        limit.current, limit.maximum
    )
}

/// A node of `partitions` idle partitions in one topic.
fn create(
    storage: &OsStorage,
    partitions: u32,
    segment_size_bytes: u64,
    config: &BootConfig,
) -> Result<(), String> {
    let ops = [
        Op::CreateStream {
            name: "bench".into(),
        },
        Op::CreateTopic {
            stream: 1,
            name: "idle".into(),
            partitions,
            durability: Durability::Replicated,
            segment_size_bytes,
            retention: Retention::default(),
            replication_factor: 1,
        },
    ];
    let keys: Vec<(PartitionKey, u64)> = (1..=partitions)
        .map(|partition| {
            let key = PartitionKey {
                stream: 1,
                topic: 1,
                partition,
            };
            (key, segment_size_bytes)
        })
        .collect();
    populate::genesis(
        storage,
        populate::identity(),
        config,
        &ops,
        &keys,
        populate::FirstView::Zero,
    )
}

type Booted = (f64, Option<u64>, iggy_recovery::NodeState<OsStorage>);

fn timed_boot(
    storage: &OsStorage,
    base: &Path,
    config: &BootConfig,
    incarnation: u64,
) -> Result<Booted, String> {
    let config = BootConfig {
        incarnation,
        ..config.clone()
    };
    let flushes_before = iggy_io::device_counters(base).map(|c| c.flushes);
    let started = Instant::now();
    let (state, report) =
        iggy_recovery::boot_with(storage.clone(), Path::new(""), Mode::Open, &config)
            .map_err(|e| format!("boot: {e}"))?;
    let seconds = started.elapsed().as_secs_f64();
    let flushes = iggy_io::device_counters(base)
        .map(|c| c.flushes)
        .zip(flushes_before)
        .map(|(after, before)| after.saturating_sub(before));
    if let Some(refused) = report
        .groups
        .iter()
        .find(|g| g.status == iggy_recovery::Status::Refuse)
    {
        return Err(format!(
            "boot (incarnation {incarnation}) refused {}: {}{}",
            refused.group,
            refused.error.as_deref().unwrap_or("no reason given"),
            if refused.io_error {
                " (an I/O error)"
            } else {
                ""
            }
        ));
    }
    Ok((seconds, flushes, state))
}

/// The table.
#[must_use]
pub fn render(runs: &[Run]) -> String {
    let mut out = String::from(
        "partitions   create s   no marker s   flushes   clean s   flushes   ms/partition   after crash s   flushes   ms/partition   open files\n",
    );
    let flushes = |f: Option<u64>| f.map_or_else(|| "-".to_string(), |f| f.to_string());
    for r in runs {
        let per = |s: f64| s * 1000.0 / f64::from(r.partitions.max(1));
        out += &format!(
            "{:>10} {:>10.2} {:>13.3} {:>9} {:>9.3} {:>9} {:>14.3} {:>15.3} {:>9} {:>14.3} {:>12}\n",
            r.partitions,
            r.create_seconds,
            r.unmarked_seconds,
            flushes(r.unmarked_flushes),
            r.clean_seconds,
            flushes(r.clean_flushes),
            per(r.clean_seconds),
            r.crash_seconds,
            flushes(r.crash_flushes),
            per(r.crash_seconds),
            flushes(r.open_files),
        );
    }
    out
}
