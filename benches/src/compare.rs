//! `iggy-bench compare`: the WAL scenario matrix for every engine in one run, interleaved
//! (A B C, A B C, ...) over rounds so that drift of the disk hits every engine alike; medians
//! and ratios to the raw prefilled baseline.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use crate::engines::{Engine, EngineKind, run_dir};
use crate::stats::{Latencies, Percentiles};

/// The scenarios of the WAL issue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Scenario {
    /// Batches of `batch` records, each batch durable before the next.
    PublishedBatches,
    /// Published batches in a steady state: the engine compacts as it goes, keeping
    /// `steady_retain_bytes`, after an untimed warm-up that did the same (so engines that
    /// recycle retired files have some to reuse).
    SteadyBatches,
    /// Batches of `batch` records, durable only at the end.
    UnpublishedBatches,
    /// One record at a time, each durable before the next.
    SinglePublished,
    /// 64 threads, each appending one record and waiting for it to be durable, repeatedly.
    Concurrent64,
    /// Reading back (and verifying) everything, page cache warm.
    ReplayWarm,
    /// Reading back (and verifying) everything after dropping the page cache.
    ReplayCold,
}

impl Scenario {
    pub const ALL: [Self; 7] = [
        Self::PublishedBatches,
        Self::SteadyBatches,
        Self::UnpublishedBatches,
        Self::SinglePublished,
        Self::Concurrent64,
        Self::ReplayWarm,
        Self::ReplayCold,
    ];

    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::PublishedBatches => "batches of 250, published",
            Self::SteadyBatches => "batches of 250, published, steady state",
            Self::UnpublishedBatches => "batches of 250, unpublished",
            Self::SinglePublished => "single records, published",
            Self::Concurrent64 => "64 appenders, each published",
            Self::ReplayWarm => "boot replay, warm (MB/s)",
            Self::ReplayCold => "boot replay, cold (MB/s)",
        }
    }

    #[must_use]
    pub fn unit(self) -> &'static str {
        match self {
            Self::ReplayWarm | Self::ReplayCold => "MB/s",
            _ => "records/s",
        }
    }
}

/// How much each scenario writes.
#[derive(Clone, Debug, Serialize)]
pub struct Sizes {
    pub record_bytes: usize,
    pub batch_records: usize,
    pub batch_total_bytes: u64,
    pub single_records: u64,
    pub concurrent_records_per_thread: u64,
    pub replay_bytes: u64,
    /// What the steady state keeps behind the head.
    pub steady_retain_bytes: u64,
    /// What its untimed warm-up writes (compacting as it goes) before the timed batches.
    pub steady_warm_up_bytes: u64,
    pub rounds: usize,
}

impl Sizes {
    /// The full matrix (about 15 minutes on the 2-core reference machine).
    #[must_use]
    pub fn full() -> Self {
        Self {
            record_bytes: 1000,
            batch_records: 250,
            batch_total_bytes: 256 << 20,
            single_records: 5000,
            concurrent_records_per_thread: 500,
            replay_bytes: 1 << 30,
            steady_retain_bytes: 128 << 20,
            steady_warm_up_bytes: 384 << 20,
            rounds: 3,
        }
    }

    /// A quick pass (a few minutes): smaller volumes, one round.
    #[must_use]
    pub fn quick() -> Self {
        Self {
            batch_total_bytes: 32 << 20,
            single_records: 1000,
            concurrent_records_per_thread: 20,
            replay_bytes: 128 << 20,
            steady_retain_bytes: 32 << 20,
            steady_warm_up_bytes: 192 << 20,
            rounds: 1,
            ..Self::full()
        }
    }
}

/// One measured cell.
#[derive(Clone, Debug, Serialize)]
pub struct Cell {
    pub scenario: Scenario,
    pub engine: EngineKind,
    /// The median over rounds, in the scenario's unit; `None` when the engine has no such mode.
    pub median: Option<f64>,
    pub samples: Vec<f64>,
    pub note: Option<String>,
    /// Per-append latency over every round (durable scenarios: each append waits for its sync).
    pub latency: Option<Percentiles>,
    /// The latency CDF behind `latency`: (microseconds, quantile), for the chart.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cdf: Vec<(f64, f64)>,
    /// Bytes a cold replay read from the device (its block counters; the median over rounds),
    /// where the kernel exposes them: so two replay figures compare like work.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_read_bytes: Option<u64>,
}

/// What one run of a scenario measured.
#[derive(Debug, Default)]
pub struct Measured {
    /// In the scenario's unit.
    pub value: f64,
    /// Per-append latencies, for the durable scenarios.
    pub latencies: Option<Latencies>,
    /// Bytes read from the device meanwhile (cold replays).
    pub device_read_bytes: Option<u64>,
}

/// Pseudo-random, incompressible record bytes (the same for every engine).
#[must_use]
pub fn records(count: usize, record_bytes: usize, seed: u64) -> Vec<Vec<u8>> {
    let mut x = seed | 1;
    (0..count)
        .map(|_| {
            (0..record_bytes)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x.to_le_bytes()[0]
                })
                .collect()
        })
        .collect()
}

fn rate(count: u64, started: Instant) -> f64 {
    count as f64 / started.elapsed().as_secs_f64().max(f64::MIN_POSITIVE)
}

/// Drops the page cache (needs root); false when the kernel refuses.
pub(crate) fn drop_page_cache() -> bool {
    std::process::Command::new("sh")
        .args(["-c", "sync && echo 3 > /proc/sys/vm/drop_caches"])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// The steady state's compaction: to `keep` records behind the head, after every `every`-th
/// batch (its time counts in the rate, not in a batch's latency).
#[derive(Clone, Copy)]
struct Compaction {
    keep: u64,
    every: u64,
}

fn batches(
    engine: &dyn Engine,
    sizes: &Sizes,
    data: &[Vec<u8>],
    durable: bool,
    mut latencies: Option<&mut Latencies>,
    compaction: Option<Compaction>,
) -> Result<u64, String> {
    let batch_bytes = (sizes.record_bytes * sizes.batch_records) as u64;
    let count = (sizes.batch_total_bytes / batch_bytes).max(1);
    let batch: Vec<&[u8]> = data
        .iter()
        .take(sizes.batch_records)
        .map(Vec::as_slice)
        .collect();
    for index in 0..count {
        let began = Instant::now();
        engine.append(0, &batch, durable)?;
        if let Some(latencies) = latencies.as_deref_mut() {
            latencies.record(began.elapsed());
        }
        if let Some(Compaction { keep, every }) = compaction
            && index % every == every - 1
        {
            engine.compact(keep)?;
        }
    }
    if !durable {
        engine.sync()?;
    }
    Ok(count * sizes.batch_records as u64)
}

/// Compactions per retained volume in the steady state (a checkpoint every quarter of it).
const COMPACTIONS_PER_RETAINED: u64 = 4;

/// The steady state: an untimed warm-up of `steady_warm_up_bytes`, then `batch_total_bytes`
/// timed, each batch durable, the engine compacting to `steady_retain_bytes` each time a quarter
/// of that was written, as checkpoints would ([`Compaction`]). `None` for an engine the bench
/// cannot compact; a raw baseline writes its batches as in `PublishedBatches` (its prefilled
/// file is a steady state already).
fn steady_batches(
    kind: EngineKind,
    engine: &dyn Engine,
    sizes: &Sizes,
    data: &[Vec<u8>],
    latencies: &mut Latencies,
) -> Result<Option<f64>, String> {
    if kind.is_raw() {
        let started = Instant::now();
        let records = batches(engine, sizes, data, true, Some(latencies), None)?;
        return Ok(Some(rate(records, started)));
    }
    let keep = sizes.steady_retain_bytes / sizes.record_bytes as u64;
    if !engine.compact(keep)? {
        return Ok(None);
    }
    let batch_bytes = (sizes.record_bytes * sizes.batch_records) as u64;
    let compaction = Some(Compaction {
        keep,
        every: (sizes.steady_retain_bytes / COMPACTIONS_PER_RETAINED / batch_bytes).max(1),
    });
    let warm_up = Sizes {
        batch_total_bytes: sizes.steady_warm_up_bytes,
        ..sizes.clone()
    };
    batches(engine, &warm_up, data, true, None, compaction)?;
    let started = Instant::now();
    let records = batches(engine, sizes, data, true, Some(latencies), compaction)?;
    Ok(Some(rate(records, started)))
}

/// Boots of the same written data per warm replay round; the round's figure is their median.
pub const WARM_REPLAYS_PER_ROUND: usize = 3;

/// Runs one scenario for one engine in a fresh directory under `base`.
pub fn run_one(
    kind: EngineKind,
    scenario: Scenario,
    sizes: &Sizes,
    base: &Path,
    data: &[Vec<u8>],
) -> Result<Option<Measured>, String> {
    let dir = run_dir(base, kind.name())?;
    let mut latencies = Latencies::new();
    let capacity = sizes.batch_total_bytes.max(sizes.replay_bytes) + (16 << 20);
    let result = match scenario {
        Scenario::PublishedBatches => {
            let engine = kind.open(&dir, capacity)?;
            let started = Instant::now();
            let records = batches(
                engine.as_ref(),
                sizes,
                data,
                true,
                Some(&mut latencies),
                None,
            )?;
            Some(Measured {
                value: rate(records, started),
                latencies: Some(latencies),
                device_read_bytes: None,
            })
        }
        Scenario::SteadyBatches => {
            let engine = kind.open(&dir, capacity)?;
            steady_batches(kind, engine.as_ref(), sizes, data, &mut latencies)?.map(|value| {
                Measured {
                    value,
                    latencies: Some(latencies),
                    device_read_bytes: None,
                }
            })
        }
        Scenario::UnpublishedBatches if kind.has_unpublished_mode() => {
            let engine = kind.open(&dir, capacity)?;
            let started = Instant::now();
            let records = batches(engine.as_ref(), sizes, data, false, None, None)?;
            Some(Measured {
                value: rate(records, started),
                latencies: None,
                device_read_bytes: None,
            })
        }
        Scenario::SinglePublished => {
            let engine = kind.open(&dir, capacity)?;
            let started = Instant::now();
            for index in 0..sizes.single_records {
                let record = &data[usize::try_from(index).unwrap_or(0) % data.len()];
                let began = Instant::now();
                engine.append(0, &[record.as_slice()], true)?;
                latencies.record(began.elapsed());
            }
            Some(Measured {
                value: rate(sizes.single_records, started),
                latencies: Some(latencies),
                device_read_bytes: None,
            })
        }
        Scenario::Concurrent64 if kind.has_group_commit() => {
            let engine: Arc<dyn Engine> = Arc::from(kind.open(&dir, capacity)?);
            let started = Instant::now();
            let per_thread = sizes.concurrent_records_per_thread;
            let threads: Vec<_> = (0..64usize)
                .map(|thread| {
                    let engine = Arc::clone(&engine);
                    let record = data[thread % data.len()].clone();
                    std::thread::spawn(move || -> Result<Latencies, String> {
                        let mut latencies = Latencies::new();
                        for _ in 0..per_thread {
                            let began = Instant::now();
                            engine.append(thread, &[&record], true)?;
                            latencies.record(began.elapsed());
                        }
                        Ok(latencies)
                    })
                })
                .collect();
            for thread in threads {
                let recorded = thread
                    .join()
                    .map_err(|_| "appender panicked".to_string())??;
                latencies.merge(&recorded);
            }
            Some(Measured {
                value: rate(64 * per_thread, started),
                latencies: Some(latencies),
                device_read_bytes: None,
            })
        }
        Scenario::ReplayWarm | Scenario::ReplayCold if kind.has_own_replay() => {
            let engine = kind.open(&dir, capacity)?;
            let replay_sizes = Sizes {
                batch_total_bytes: sizes.replay_bytes,
                ..sizes.clone()
            };
            let written = batches(
                engine.as_ref(),
                &replay_sizes,
                data,
                kind == EngineKind::OkayWal,
                None,
                None,
            )?;
            drop(engine);
            // Warm: the median of several boots of the same data, since one replay of a few
            // gigabytes swings by a third from one second to the next on a shared memory bus.
            // Cold: one, since a second read of the same blocks may come from the virtual
            // disk's host-side cache and no longer be cold.
            let replays = if scenario == Scenario::ReplayWarm {
                WARM_REPLAYS_PER_ROUND
            } else {
                1
            };
            let mut rates = Vec::with_capacity(replays);
            let mut device_read_bytes = None;
            for _ in 0..replays {
                if scenario == Scenario::ReplayCold && !drop_page_cache() {
                    return Err("cannot drop the page cache here (needs root)".into());
                }
                let read_before = iggy_io::device_counters(&dir).map(|c| c.sectors_read);
                let started = Instant::now();
                let replayed = kind.replay(&dir, sizes.record_bytes)?;
                let seconds = started.elapsed().as_secs_f64().max(f64::MIN_POSITIVE);
                if scenario == Scenario::ReplayCold {
                    device_read_bytes = iggy_io::device_counters(&dir)
                        .map(|c| c.sectors_read)
                        .zip(read_before)
                        .map(|(after, before)| after.saturating_sub(before) * 512);
                }
                if replayed != written {
                    return Err(format!("replayed {replayed} records of {written}"));
                }
                rates.push(written as f64 * sizes.record_bytes as f64 / 1e6 / seconds);
            }
            rates.sort_by(f64::total_cmp);
            Some(Measured {
                value: rates[rates.len() / 2],
                latencies: None,
                device_read_bytes,
            })
        }
        Scenario::UnpublishedBatches
        | Scenario::Concurrent64
        | Scenario::ReplayWarm
        | Scenario::ReplayCold => None,
    };
    let storage = iggy_io::OsStorage::open(base).map_err(|e| e.to_string())?;
    iggy_io::Storage::remove_dir_all(&storage, kind.name()).map_err(|e| e.to_string())?;
    Ok(result)
}

/// One engine's values, note and latencies for a scenario, gathered over the rounds.
type EngineSamples = (
    EngineKind,
    Vec<f64>,
    Option<String>,
    Option<Latencies>,
    Vec<u64>,
);

/// Runs the matrix, interleaving engines within each round; `progress` hears each step.
pub fn run_matrix(
    engines: &[EngineKind],
    scenarios: &[Scenario],
    sizes: &Sizes,
    base: &Path,
    mut progress: impl FnMut(&str),
) -> Vec<Cell> {
    let data = records(sizes.batch_records.max(64), sizes.record_bytes, 0x1DEA);
    let mut cells: Vec<Cell> = Vec::new();
    for &scenario in scenarios {
        let mut samples: Vec<EngineSamples> = engines
            .iter()
            .map(|&e| (e, Vec::new(), None, None, Vec::new()))
            .collect();
        for round in 0..sizes.rounds {
            for (kind, values, note, latency, read) in &mut samples {
                progress(&format!(
                    "{} / {} / round {}",
                    scenario.name(),
                    kind.name(),
                    round + 1
                ));
                match run_one(*kind, scenario, sizes, base, &data) {
                    Ok(Some(measured)) => {
                        values.push(measured.value);
                        read.extend(measured.device_read_bytes);
                        if let Some(recorded) = measured.latencies {
                            latency.get_or_insert_with(Latencies::new).merge(&recorded);
                        }
                    }
                    Ok(None) => *note = Some("n/a".into()),
                    Err(error) => *note = Some(error),
                }
            }
        }
        for (engine, mut values, note, latency, mut read) in samples {
            values.sort_by(f64::total_cmp);
            read.sort_unstable();
            let median = (!values.is_empty()).then(|| values[values.len() / 2]);
            cells.push(Cell {
                scenario,
                engine,
                median,
                samples: values,
                note,
                latency: latency.as_ref().map(Latencies::percentiles),
                cdf: latency.map(|l| l.cdf(200)).unwrap_or_default(),
                device_read_bytes: read.get(read.len() / 2).copied(),
            });
        }
    }
    cells
}

/// What a reader of a one-round table must know; `None` for medians of several rounds.
#[must_use]
pub fn caveat(rounds: usize) -> Option<&'static str> {
    (rounds <= 1).then_some(
        "(one round: each ratio is a single measurement, not a median; on a shared or virtual \
         disk one round can be off by several times, even past a baseline an engine cannot beat. \
         Use --rounds 3 or more for figures to keep.)",
    )
}

/// The matrix as a table: one row per scenario, one column per engine, each cell with its
/// ratio to the raw prefilled baseline.
#[must_use]
pub fn render(cells: &[Cell], engines: &[EngineKind]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = write!(out, "{:<30}", "scenario");
    for engine in engines {
        let _ = write!(out, " {:>22}", engine.name());
    }
    out.push('\n');
    let mut scenarios: Vec<Scenario> = Vec::new();
    for cell in cells {
        if !scenarios.contains(&cell.scenario) {
            scenarios.push(cell.scenario);
        }
    }
    for scenario in scenarios {
        let _ = write!(out, "{:<30}", scenario.name());
        let find = |engine| {
            cells
                .iter()
                .find(|c| c.scenario == scenario && c.engine == engine)
        };
        let baseline = find(EngineKind::RawPrefilled).and_then(|c| c.median);
        for &engine in engines {
            let mark = if engine.sync_reaches_disk() {
                ""
            } else {
                "\u{2020}"
            };
            let text = match find(engine) {
                Some(Cell {
                    median: Some(value),
                    ..
                }) => match baseline {
                    Some(base) if engine != EngineKind::RawPrefilled => {
                        format!("{value:.0} ({:.2}x){mark}", value / base)
                    }
                    _ => format!("{value:.0}{mark}"),
                },
                Some(Cell {
                    note: Some(note), ..
                }) if note == "n/a" => "n/a".to_string(),
                Some(Cell { note: Some(_), .. }) => "error".to_string(),
                _ => "-".to_string(),
            };
            let _ = write!(out, " {text:>22}");
        }
        out.push('\n');
    }
    let read: Vec<&Cell> = cells
        .iter()
        .filter(|c| c.device_read_bytes.is_some())
        .collect();
    if !read.is_empty() {
        let _ = write!(out, "{:<30}", "cold replay read (MB, device)");
        for &engine in engines {
            let text = read
                .iter()
                .find(|c| c.engine == engine)
                .and_then(|c| c.device_read_bytes)
                .map_or("-".to_string(), |b| format!("{:.0}", b as f64 / 1e6));
            let _ = write!(out, " {text:>22}");
        }
        out.push('\n');
    }
    let _ = writeln!(out, "\nlatency per durable append, us (p50 / p99 / p999)");
    for scenario in [
        Scenario::PublishedBatches,
        Scenario::SteadyBatches,
        Scenario::SinglePublished,
        Scenario::Concurrent64,
    ] {
        let row: Vec<&Cell> = cells
            .iter()
            .filter(|c| c.scenario == scenario && c.latency.is_some())
            .collect();
        if row.is_empty() {
            continue;
        }
        let _ = write!(out, "{:<30}", scenario.name());
        for &engine in engines {
            let text = row
                .iter()
                .find(|c| c.engine == engine)
                .and_then(|c| c.latency)
                .map_or("-".to_string(), |p| {
                    format!("{:.0}/{:.0}/{:.0}", p.p50_us, p.p99_us, p.p999_us)
                });
            let _ = write!(out, " {text:>22}");
        }
        out.push('\n');
    }
    for engine in engines.iter().filter(|e| !e.sync_reaches_disk()) {
        let _ = writeln!(
            out,
            "\u{2020} {}: its \"sync\" does not reach the disk (no fsync): not a durable figure, not ranked",
            engine.name()
        );
    }
    for cell in cells {
        if let Some(note) = cell.note.as_ref().filter(|n| n.as_str() != "n/a") {
            let _ = writeln!(
                out,
                "note: {} / {}: {note}",
                cell.scenario.name(),
                cell.engine.name()
            );
        }
    }
    out
}
