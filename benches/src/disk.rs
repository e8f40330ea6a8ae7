//! `iggy-bench disk`: what the file system under a directory can do, through the same
//! `OsStorage` (pwrite, fdatasync) the toolkit uses. These are the raw baselines of the WAL
//! benchmarks: a log cannot publish faster than the disk appends and syncs.

use std::time::{Duration, Instant};

use iggy_io::{OpenMode, OsStorage, ReadFile, Storage, WriteFile};
use serde::Serialize;

use crate::stats::{Percentiles, percentiles};

/// What to measure and how much.
#[derive(Clone, Debug)]
pub struct DiskConfig {
    pub record_bytes: usize,
    pub batch_records: usize,
    /// Bytes written by each append scenario.
    pub total_bytes: u64,
    /// Iterations of the 4 KiB write + fdatasync latency probe.
    pub sync_iterations: usize,
}

impl Default for DiskConfig {
    fn default() -> Self {
        Self {
            record_bytes: 1000,
            batch_records: 250,
            total_bytes: 64 << 20,
            sync_iterations: 2000,
        }
    }
}

/// One append scenario: batches of records written then synced.
#[derive(Clone, Debug, Serialize)]
pub struct AppendResult {
    pub scenario: &'static str,
    pub records: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub records_per_second: f64,
    pub megabytes_per_second: f64,
    /// Latency of one batch: its write plus its fdatasync.
    pub batch_latency: Percentiles,
}

/// Everything `iggy-bench disk` reports.
#[derive(Clone, Debug, Serialize)]
pub struct DiskReport {
    pub record_bytes: usize,
    pub batch_records: usize,
    /// Appending at the end of a growing file, fdatasync per batch.
    pub append_grow: AppendResult,
    /// Overwriting a preallocated, zero-filled file, fdatasync per batch.
    pub append_prefilled: AppendResult,
    /// 4 KiB pwrite + fdatasync at sequential offsets of a prefilled file.
    pub sync_4k: Percentiles,
    /// Buffered sequential writes in 1 MiB calls, no sync (page-cache speed).
    pub buffered_write_megabytes_per_second: f64,
    /// Sequential reads in 1 MiB calls of the file just written (warm page cache).
    pub warm_read_megabytes_per_second: f64,
    /// Sequential `O_DIRECT` writes in 1 MiB calls, then one fdatasync; `None` when the file
    /// system does not allow direct I/O.
    pub direct_write_megabytes_per_second: Option<f64>,
    /// Whether `OsStorage` submits durable appends through io_uring here.
    pub io_uring_usable: bool,
}

fn megabytes_per_second(bytes: u64, elapsed: Duration) -> f64 {
    bytes as f64 / 1e6 / elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
}

fn batch_bytes(config: &DiskConfig) -> Vec<u8> {
    let len = config.record_bytes * config.batch_records;
    (0..=250u8).cycle().take(len).collect()
}

fn append<F: WriteFile>(
    scenario: &'static str,
    file: &F,
    config: &DiskConfig,
) -> iggy_io::Result<AppendResult> {
    let batch = batch_bytes(config);
    let batches = (config.total_bytes / batch.len() as u64).max(1);
    let mut latencies = Vec::with_capacity(usize::try_from(batches).unwrap_or(0));
    let start = Instant::now();
    for index in 0..batches {
        let began = Instant::now();
        file.write_all_at(index * batch.len() as u64, &batch)?;
        // The sync is the point of the measurement: a published batch is a durable batch.
        file.sync_data()?;
        latencies.push(began.elapsed());
    }
    let elapsed = start.elapsed();
    let records = batches * config.batch_records as u64;
    let bytes = batches * batch.len() as u64;
    Ok(AppendResult {
        scenario,
        records,
        bytes,
        seconds: elapsed.as_secs_f64(),
        records_per_second: records as f64 / elapsed.as_secs_f64().max(f64::MIN_POSITIVE),
        megabytes_per_second: megabytes_per_second(bytes, elapsed),
        batch_latency: percentiles(&latencies),
    })
}

/// Writes `len` zero bytes and syncs them, so later overwrites do not change the file size.
fn prefill<F: WriteFile>(file: &F, len: u64) -> iggy_io::Result<()> {
    file.write_zeros(0, len)?;
    // Durable zeros: the measured overwrites then need no metadata in their fdatasync.
    file.sync_all()
}

/// Runs every disk scenario in `storage` (files are removed afterwards).
pub fn run(
    storage: &OsStorage,
    config: &DiskConfig,
    mut progress: impl FnMut(&str),
) -> iggy_io::Result<DiskReport> {
    progress("append, growing file, fdatasync per batch");
    let grow = storage.open("bench-append-grow", OpenMode::CreateNew)?;
    let append_grow = append("append (growing file)", &grow, config)?;
    drop(grow);

    progress("append, prefilled file, fdatasync per batch");
    let prefilled = storage.open("bench-append-prefilled", OpenMode::CreateNew)?;
    prefill(
        &prefilled,
        config.total_bytes + batch_bytes(config).len() as u64,
    )?;
    let append_prefilled = append("append (prefilled file)", &prefilled, config)?;

    progress("4 KiB write + fdatasync latency");
    let block = vec![0xA5u8; 4096];
    let mut latencies = Vec::with_capacity(config.sync_iterations);
    for index in 0..config.sync_iterations as u64 {
        let began = Instant::now();
        prefilled.write_all_at(index * 4096 % config.total_bytes.max(4096), &block)?;
        // Each probe is one durable 4 KiB write: the floor of any publish.
        prefilled.sync_data()?;
        latencies.push(began.elapsed());
    }
    let sync_4k = percentiles(&latencies);
    drop(prefilled);

    progress("buffered sequential write and warm read");
    let buffered = storage.open("bench-buffered", OpenMode::CreateNew)?;
    let chunk = vec![0x3Cu8; 1 << 20];
    let start = Instant::now();
    let mut offset = 0u64;
    while offset < config.total_bytes {
        buffered.write_all_at(offset, &chunk)?;
        offset += chunk.len() as u64;
    }
    let buffered_write_megabytes_per_second = megabytes_per_second(offset, start.elapsed());
    let mut read_buf = vec![0u8; 1 << 20];
    let start = Instant::now();
    let len = buffered.len()?;
    let mut offset = 0u64;
    while offset < len {
        let count = buffered.read_at(offset, &mut read_buf)?;
        if count == 0 {
            break;
        }
        offset += count as u64;
    }
    let warm_read_megabytes_per_second = megabytes_per_second(offset, start.elapsed());
    drop(buffered);

    progress("O_DIRECT sequential write");
    let direct_write_megabytes_per_second = direct_write(storage, config.total_bytes)?;

    for name in [
        "bench-append-grow",
        "bench-append-prefilled",
        "bench-buffered",
    ] {
        storage.unlink(name)?;
    }
    Ok(DiskReport {
        record_bytes: config.record_bytes,
        batch_records: config.batch_records,
        append_grow,
        append_prefilled,
        sync_4k,
        buffered_write_megabytes_per_second,
        warm_read_megabytes_per_second,
        direct_write_megabytes_per_second,
        io_uring_usable: storage.uses_io_uring(),
    })
}

/// `O_DIRECT` writes of 1 MiB from a 4 KiB-aligned buffer, then one fdatasync; `None` if the
/// file system refuses direct I/O.
fn direct_write(storage: &OsStorage, total_bytes: u64) -> iggy_io::Result<Option<f64>> {
    const CHUNK: usize = 1 << 20;
    let Some(file) = storage.open_direct("bench-direct")? else {
        return Ok(None);
    };
    let mut buffer = vec![0x6Bu8; CHUNK + 4096];
    let start = buffer.as_ptr().align_offset(4096);
    let aligned = &mut buffer[start..start + CHUNK];
    aligned.fill(0x6B);
    let started = Instant::now();
    let mut offset = 0u64;
    while offset < total_bytes {
        file.write_all_at(offset, aligned)?;
        offset += CHUNK as u64;
    }
    // Direct writes bypass the page cache but not the device cache: one sync to be durable.
    file.sync_data()?;
    let rate = megabytes_per_second(offset, started.elapsed());
    drop(file);
    storage.unlink("bench-direct")?;
    Ok(Some(rate))
}

/// The report as a plain-text table.
#[must_use]
pub fn render(report: &DiskReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "records of {} bytes, batches of {} records, fdatasync per batch",
        report.record_bytes, report.batch_records
    );
    let _ = writeln!(
        out,
        "{:<26} {:>12} {:>10} {:>12} {:>12}",
        "scenario", "records/s", "MB/s", "batch p50", "batch p99"
    );
    for result in [&report.append_grow, &report.append_prefilled] {
        let _ = writeln!(
            out,
            "{:<26} {:>12.0} {:>10.1} {:>10.0}us {:>10.0}us",
            result.scenario,
            result.records_per_second,
            result.megabytes_per_second,
            result.batch_latency.p50_us,
            result.batch_latency.p99_us
        );
    }
    let sync = &report.sync_4k;
    let _ = writeln!(
        out,
        "4 KiB write+fdatasync:     p50 {:.0}us  p99 {:.0}us  p999 {:.0}us  max {:.0}us  ({} samples, {:.0}/s at p50)",
        sync.p50_us,
        sync.p99_us,
        sync.p999_us,
        sync.max_us,
        sync.count,
        1e6 / sync.p50_us.max(f64::MIN_POSITIVE)
    );
    let _ = writeln!(
        out,
        "buffered write:            {:.0} MB/s (1 MiB calls, no sync)",
        report.buffered_write_megabytes_per_second
    );
    let _ = writeln!(
        out,
        "warm sequential read:      {:.0} MB/s (1 MiB calls, page cache)",
        report.warm_read_megabytes_per_second
    );
    let _ = match report.direct_write_megabytes_per_second {
        Some(rate) => writeln!(
            out,
            "O_DIRECT sequential write: {rate:.0} MB/s (1 MiB calls, one fdatasync)"
        ),
        None => writeln!(
            out,
            "O_DIRECT sequential write: not measured: the file system refuses O_DIRECT"
        ),
    };
    let _ = writeln!(
        out,
        "io_uring:                  {}",
        if report.io_uring_usable {
            "usable (a WAL publication is one linked chain: write, fdatasync, frontier write, fdatasync)"
        } else {
            "not usable here (plain system calls)"
        }
    );
    out
}

/// One figure over several runs: the median, and the smallest and largest run.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    /// Of `values` (at least one).
    #[must_use]
    pub fn of(values: &[f64]) -> Self {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let median = if sorted.is_empty() {
            0.0
        } else if sorted.len() % 2 == 1 {
            sorted[sorted.len() / 2]
        } else {
            f64::midpoint(sorted[sorted.len() / 2 - 1], sorted[sorted.len() / 2])
        };
        Self {
            median,
            min: sorted.first().copied().unwrap_or(0.0),
            max: sorted.last().copied().unwrap_or(0.0),
        }
    }
}

/// The figures of several runs of `iggy-bench disk`, each with its spread.
#[derive(Clone, Debug, Serialize)]
pub struct DiskSummary {
    pub runs: usize,
    pub append_grow_records_per_second: Spread,
    pub append_prefilled_records_per_second: Spread,
    pub sync_4k_p50_us: Spread,
    pub sync_4k_p99_us: Spread,
    pub buffered_write_megabytes_per_second: Spread,
    pub warm_read_megabytes_per_second: Spread,
    pub direct_write_megabytes_per_second: Option<Spread>,
}

/// The median and spread of every figure over `reports`.
#[must_use]
pub fn summarize(reports: &[DiskReport]) -> DiskSummary {
    let of = |figure: &dyn Fn(&DiskReport) -> f64| {
        Spread::of(&reports.iter().map(figure).collect::<Vec<_>>())
    };
    let direct: Vec<f64> = reports
        .iter()
        .filter_map(|r| r.direct_write_megabytes_per_second)
        .collect();
    DiskSummary {
        runs: reports.len(),
        append_grow_records_per_second: of(&|r| r.append_grow.records_per_second),
        append_prefilled_records_per_second: of(&|r| r.append_prefilled.records_per_second),
        sync_4k_p50_us: of(&|r| r.sync_4k.p50_us),
        sync_4k_p99_us: of(&|r| r.sync_4k.p99_us),
        buffered_write_megabytes_per_second: of(&|r| r.buffered_write_megabytes_per_second),
        warm_read_megabytes_per_second: of(&|r| r.warm_read_megabytes_per_second),
        direct_write_megabytes_per_second: (!direct.is_empty()).then(|| Spread::of(&direct)),
    }
}

/// The summary as a table: median, then the range of the runs and how wide it is.
#[must_use]
pub fn render_summary(summary: &DiskSummary) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "over {} run(s): median (smallest .. largest run; the spread is (max - min) / median)",
        summary.runs
    );
    let mut row = |name: &str, spread: &Spread, unit: &str| {
        let width = if spread.median > 0.0 {
            (spread.max - spread.min) / spread.median * 100.0
        } else {
            0.0
        };
        let _ = writeln!(
            out,
            "  {name:<36} {:>12.0} {unit:<10} ({:.0} .. {:.0}; spread {width:.0}%)",
            spread.median, spread.min, spread.max
        );
    };
    row(
        "append, growing file",
        &summary.append_grow_records_per_second,
        "records/s",
    );
    row(
        "append, prefilled file",
        &summary.append_prefilled_records_per_second,
        "records/s",
    );
    row("4 KiB write+fdatasync p50", &summary.sync_4k_p50_us, "us");
    row("4 KiB write+fdatasync p99", &summary.sync_4k_p99_us, "us");
    row(
        "buffered write",
        &summary.buffered_write_megabytes_per_second,
        "MB/s",
    );
    row(
        "warm sequential read",
        &summary.warm_read_megabytes_per_second,
        "MB/s",
    );
    if let Some(direct) = &summary.direct_write_megabytes_per_second {
        row("O_DIRECT sequential write", direct, "MB/s");
    }
    if summary.runs == 1 {
        let _ = writeln!(
            out,
            "  (one run: on a shared or virtual disk one run can be off by several times; use \
             --runs 3 or more)"
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny run on a temp dir: every scenario produces figures and leaves no file behind.
    #[test]
    fn a_small_run_measures_every_scenario_and_cleans_up() {
        let dir = tempfile::tempdir().unwrap();
        let storage = OsStorage::open(dir.path()).unwrap();
        let config = DiskConfig {
            record_bytes: 100,
            batch_records: 10,
            total_bytes: 64 << 10,
            sync_iterations: 8,
        };
        let mut steps = 0;
        let report = run(&storage, &config, |_| steps += 1).unwrap();
        assert_eq!(steps, 5);
        if let Some(rate) = report.direct_write_megabytes_per_second {
            assert!(rate > 0.0);
        }
        assert_eq!(report.append_grow.bytes, 65_000, "65 batches of 1000 bytes");
        assert_eq!(report.append_grow.records, 650);
        assert_eq!(report.sync_4k.count, 8);
        assert!(report.append_prefilled.records_per_second > 0.0);
        assert!(
            iggy_io::ReadStorage::list_dir(&storage, "")
                .unwrap()
                .is_empty()
        );
        assert!(render(&report).contains("append (prefilled file)"));
    }

    #[test]
    fn a_spread_is_the_median_and_the_range() {
        let spread = Spread::of(&[0.17, 1.19, 0.76]);
        assert!((spread.median - 0.76).abs() < 1e-9);
        assert!((spread.min - 0.17).abs() < 1e-9 && (spread.max - 1.19).abs() < 1e-9);
        assert!((Spread::of(&[1.0, 3.0]).median - 2.0).abs() < 1e-9);
    }
}
