//! `iggy-bench groups`: many consensus groups on one node, each with its own WAL and its own
//! thread publishing single records (each record durable before the next), all through one
//! `OsStorage` as a node's groups are. The aggregate rate against one group's says whether the
//! groups share the device or queue behind something in the toolkit.

use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::Instant;

use iggy_io::{IoPath, OsStorage, Storage};
use iggy_wal::{Config, Wal};
use serde::Serialize;

use crate::stats::{Latencies, Percentiles};

/// What to run.
#[derive(Clone, Debug, Serialize)]
pub struct Sizes {
    /// Group counts to measure, each in its own run.
    pub groups: Vec<usize>,
    /// Records each group publishes per run.
    pub records_per_group: u64,
    pub record_bytes: usize,
    pub io_path: &'static str,
}

/// One run: `groups` groups publishing in parallel.
#[derive(Clone, Debug, Serialize)]
pub struct Run {
    pub groups: usize,
    pub records: u64,
    pub seconds: f64,
    pub records_per_second: f64,
    /// The aggregate rate over one group's rate in the same command.
    pub ratio_to_one_group: f64,
    /// Latency of one publication of one record.
    pub latency: Percentiles,
    /// Device flushes per second, where the kernel exposes them.
    pub device_flushes_per_second: Option<f64>,
}

/// Runs each group count of `sizes` in `dir`, one after another.
pub fn run(
    dir: &Path,
    sizes: &Sizes,
    io_path: IoPath,
    mut progress: impl FnMut(&str),
) -> Result<Vec<Run>, String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let mut runs: Vec<Run> = Vec::new();
    for &groups in &sizes.groups {
        progress(&format!("{groups} group(s)"));
        let label = format!("groups-{groups}");
        let base = crate::engines::run_dir(dir, &label)?;
        let storage = OsStorage::open_with(&base, io_path).map_err(|e| err(&e))?;
        let wals: Vec<Arc<Wal<OsStorage>>> = (0..groups)
            .map(|group| {
                let config = Config {
                    file_size_bytes: 64 << 20,
                    ..Config::new(group as u128 + 1)
                };
                let name = format!("group-{group}");
                Wal::create(storage.clone(), Path::new(&name), config, 1, 0)
                    .map(Arc::new)
                    .map_err(|e| err(&e))
            })
            .collect::<Result<_, _>>()?;
        let record = vec![0xA7u8; sizes.record_bytes];
        let start = Arc::new(Barrier::new(groups + 1));
        let before = iggy_io::device_counters(&base);
        let threads: Vec<_> = wals
            .iter()
            .map(|wal| {
                let (wal, start, record) = (Arc::clone(wal), Arc::clone(&start), record.clone());
                let count = sizes.records_per_group;
                std::thread::spawn(move || -> Result<Latencies, String> {
                    let mut latencies = Latencies::new();
                    start.wait();
                    for _ in 0..count {
                        let began = Instant::now();
                        let op = wal.append_body(&record, 1, 0).map_err(|e| e.to_string())?;
                        wal.wait_published(op).map_err(|e| e.to_string())?;
                        latencies.record(began.elapsed());
                    }
                    Ok(latencies)
                })
            })
            .collect();
        start.wait();
        let began = Instant::now();
        let mut latencies = Latencies::new();
        for thread in threads {
            let done = thread
                .join()
                .map_err(|_| "a group's thread panicked".to_string())??;
            latencies.merge(&done);
        }
        let seconds = began.elapsed().as_secs_f64().max(f64::MIN_POSITIVE);
        let flushes = before
            .zip(iggy_io::device_counters(&base))
            .map(|(b, a)| a.flushes.saturating_sub(b.flushes) as f64 / seconds);
        drop(wals);
        drop(storage);
        OsStorage::open(dir)
            .and_then(|parent| parent.remove_dir_all(&label))
            .map_err(|e| err(&e))?;
        let records = sizes.records_per_group * groups as u64;
        let rate = records as f64 / seconds;
        let one = runs
            .iter()
            .find(|r| r.groups == 1)
            .map_or(rate, |r| r.records_per_second);
        runs.push(Run {
            groups,
            records,
            seconds,
            records_per_second: rate,
            ratio_to_one_group: rate / one,
            latency: latencies.percentiles(),
            device_flushes_per_second: flushes,
        });
    }
    Ok(runs)
}

/// The runs as a table.
#[must_use]
pub fn render(runs: &[Run]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>7} {:>12} {:>12} {:>10} {:>10} {:>10} {:>14}",
        "groups", "records/s", "x 1 group", "p50", "p99", "p999", "flushes/s"
    );
    for run in runs {
        let _ = writeln!(
            out,
            "{:>7} {:>12.0} {:>11.2}x {:>8.0}us {:>8.0}us {:>8.0}us {:>14}",
            run.groups,
            run.records_per_second,
            run.ratio_to_one_group,
            run.latency.p50_us,
            run.latency.p99_us,
            run.latency.p999_us,
            run.device_flushes_per_second
                .map_or_else(|| "n/a".to_string(), |f| format!("{f:.0}"))
        );
    }
    out
}
