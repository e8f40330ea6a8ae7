//! `iggy-bench segments`: a partition's append and read throughput.
//!
//! - Append: the same client batches appended through `segments::Partition` (validate, stamp,
//!   WAL entry, index) and as opaque bodies through the bare keyed WAL, published per batch and
//!   unpublished (one publication at the end), interleaved A B A B over rounds. The ratio is the
//!   partition's overhead over the WAL it is built on.
//! - Read: a partition of `read_bytes` is written once, rebooted (which verifies it and warms
//!   the page cache), then read end to end by offset in `read_chunk_bytes` steps, through memory
//!   maps and through `read_at`, interleaved over rounds.

use std::path::{Path, PathBuf};
use std::time::Instant;

use iggy_format::batch::{self, NewMessage};
use iggy_io::{OsStorage, Storage};
use iggy_segments::{Config, Partition, ReadPath};
use iggy_superblock::Identity;
use iggy_wal::{Mode, Naming, Wal};
use serde::Serialize;

/// What to run.
#[derive(Clone, Debug, Serialize)]
pub struct Sizes {
    pub messages_per_batch: u32,
    pub message_bytes: usize,
    /// Bytes appended per append measurement.
    pub append_bytes: u64,
    /// Size of the partition read back.
    pub read_bytes: u64,
    pub read_chunk_bytes: u64,
    pub segment_bytes: u64,
    pub rounds: usize,
    /// Drop the page cache before each boot (needs root; the tests leave it warm).
    pub cold_boots: bool,
}

/// One measured cell: a scenario on one engine, the median over rounds.
#[derive(Clone, Debug, Serialize)]
pub struct Cell {
    pub scenario: &'static str,
    pub engine: &'static str,
    pub megabytes_per_second: f64,
    pub batches_per_second: f64,
    pub rounds: Vec<f64>,
    /// What the scenario read from the block device (median over rounds), where measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_read_mb: Option<f64>,
}

const GROUP: u128 = 0x5E6;

fn identity() -> Identity {
    Identity {
        cluster: 1,
        replica: 0,
        replica_count: 1,
    }
}

fn config(sizes: &Sizes, read_path: ReadPath) -> Config {
    Config {
        segment_size_bytes: sizes.segment_bytes,
        unpublished_bytes_max: u64::MAX / 2,
        read_path,
        ..Config::new(GROUP, 1, identity())
    }
}

/// One client batch of the configured shape (payload bytes vary per message).
#[must_use]
pub fn client_batch(sizes: &Sizes) -> Vec<u8> {
    let messages: Vec<NewMessage> = (0..sizes.messages_per_batch)
        .map(|i| NewMessage {
            id: u128::from(i),
            timestamp_delta: 0,
            payload: (0..sizes.message_bytes as u64)
                .map(|b| (b.wrapping_mul(31) ^ u64::from(i)).to_le_bytes()[0])
                .collect(),
            user_headers: Vec::new(),
        })
        .collect();
    batch::encode(1, &messages).unwrap_or_default()
}

fn batches_for(bytes: u64, batch: &[u8]) -> u64 {
    (bytes / batch.len().max(1) as u64).max(1)
}

/// Appends `count` batches through a new partition in `dir`; seconds taken.
fn append_partition(
    storage: &OsStorage,
    dir: &Path,
    sizes: &Sizes,
    batch: &[u8],
    count: u64,
    published: bool,
) -> Result<f64, String> {
    let partition = Partition::create(storage.clone(), dir, config(sizes, ReadPath::Mapped))
        .map_err(|e| e.to_string())?;
    // Each append stamps its batch in place, as a server does with a request buffer: the copies
    // are made before the clock starts (the bare WAL below appends the same bytes uncopied).
    let mut copies: Vec<Vec<u8>> = (0..count).map(|_| batch.to_vec()).collect();
    let started = Instant::now();
    for (i, bytes) in copies.iter_mut().enumerate() {
        partition
            .append(bytes, i as u64)
            .map_err(|e| e.to_string())?;
        if published {
            partition.publish().map_err(|e| e.to_string())?;
        }
    }
    partition.publish().map_err(|e| e.to_string())?;
    Ok(started.elapsed().as_secs_f64())
}

/// Appends `count` batches as opaque bodies through a bare keyed WAL in `dir`; seconds taken.
fn append_wal(
    storage: &OsStorage,
    dir: &Path,
    sizes: &Sizes,
    batch: &[u8],
    count: u64,
    published: bool,
) -> Result<f64, String> {
    let wal_config = iggy_wal::Config {
        file_size_bytes: sizes.segment_bytes,
        unpublished_bytes_max: u64::MAX / 2,
        naming: Naming::ByKey,
        ..iggy_wal::Config::new(GROUP)
    };
    let wal =
        Wal::create_keyed(storage.clone(), dir, wal_config, 1, 0, 0).map_err(|e| e.to_string())?;
    let messages = u64::from(sizes.messages_per_batch);
    let started = Instant::now();
    for i in 0..count {
        wal.append_body_keyed(batch, 0, i, i * messages)
            .map_err(|e| e.to_string())?;
        if published {
            wal.publish().map_err(|e| e.to_string())?;
        }
    }
    wal.publish().map_err(|e| e.to_string())?;
    Ok(started.elapsed().as_secs_f64())
}

/// Reads the whole partition in `dir` by offset; seconds taken and bytes read.
fn read_partition(
    storage: &OsStorage,
    dir: &Path,
    sizes: &Sizes,
    read_path: ReadPath,
) -> Result<(f64, u64), String> {
    let (partition, _) =
        Partition::open(storage.clone(), dir, config(sizes, read_path), Mode::Open)
            .map_err(|e| e.to_string())?
            .ok_or("no partition")?;
    let started = Instant::now();
    let mut offset = partition.first_offset();
    let mut total = 0u64;
    loop {
        let batches = partition
            .read(offset, sizes.read_chunk_bytes)
            .map_err(|e| e.to_string())?;
        let Some(last) = batches.last() else {
            break;
        };
        offset = last.next_offset();
        total += batches.iter().map(|b| b.bytes.len() as u64).sum::<u64>();
    }
    Ok((started.elapsed().as_secs_f64(), total))
}

/// Boots the partition in `dir` cold (page cache dropped), then its keyed WAL alone (the
/// seals, the head file), each `rounds` times; the retained volume over the boot's seconds, and
/// the bytes each boot read from the device. Without root (no cache drop) the boots are warm
/// and say so.
fn cold_boots(
    storage: &OsStorage,
    dir: &Path,
    sizes: &Sizes,
    retained: u64,
) -> Result<Vec<Cell>, String> {
    let cold = sizes.cold_boots && crate::compare::drop_page_cache();
    let drop_cache = || {
        if cold {
            crate::compare::drop_page_cache();
        }
    };
    let scenario = if cold {
        "boot (cold)"
    } else {
        "boot (warm: no cache drop)"
    };
    let mut partition_rates = Vec::new();
    let mut wal_rates = Vec::new();
    let mut partition_read = Vec::new();
    let mut wal_read = Vec::new();
    let base = storage.root_path().join(dir);
    let sectors = || iggy_io::device_counters(&base).map(|c| c.sectors_read);
    // Megabytes the device read since `before` (none where the counters cannot be read).
    let read_since = |before: Option<u64>| {
        sectors()
            .zip(before)
            .map(|(a, b)| (a - b) as f64 * 512.0 / 1e6)
    };
    for _ in 0..sizes.rounds {
        drop_cache();
        let before = sectors();
        let started = Instant::now();
        let opened = Partition::open(
            storage.clone(),
            dir,
            config(sizes, ReadPath::Mapped),
            Mode::Open,
        )
        .map_err(|e| e.to_string())?
        .ok_or("no partition")?;
        partition_rates.push(retained as f64 / 1e6 / started.elapsed().as_secs_f64());
        partition_read.extend(read_since(before));
        drop(opened);

        drop_cache();
        let before = sectors();
        let started = Instant::now();
        let wal_config = iggy_wal::Config {
            file_size_bytes: sizes.segment_bytes,
            naming: Naming::ByKey,
            ..iggy_wal::Config::new(GROUP)
        };
        let (wal, _) = Wal::open(storage.clone(), dir, wal_config, Mode::Open)
            .map_err(|e| e.to_string())?
            .ok_or("no log")?;
        wal_rates.push(retained as f64 / 1e6 / started.elapsed().as_secs_f64());
        wal_read.extend(read_since(before));
        drop(wal);
    }
    let cell = |engine, mut rates: Vec<f64>, mut read: Vec<f64>| Cell {
        scenario,
        engine,
        megabytes_per_second: median(&mut rates),
        batches_per_second: 0.0,
        rounds: rates,
        device_read_mb: (!read.is_empty()).then(|| median(&mut read)),
    };
    Ok(vec![
        cell("partition", partition_rates, partition_read),
        cell("its keyed WAL alone", wal_rates, wal_read),
    ])
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// Runs every scenario; `progress` hears each step.
pub fn run(
    base: &Path,
    sizes: &Sizes,
    mut progress: impl FnMut(&str),
) -> Result<Vec<Cell>, String> {
    let storage = OsStorage::create(base).map_err(|e| e.to_string())?;
    let batch = client_batch(sizes);
    let count = batches_for(sizes.append_bytes, &batch);
    let mut cells = Vec::new();
    for (scenario, published) in [("append published", true), ("append unpublished", false)] {
        let mut partition_rounds = Vec::new();
        let mut wal_rounds = Vec::new();
        for round in 0..sizes.rounds {
            progress(&format!("{scenario}: round {round}"));
            let dir = PathBuf::from(format!("p{round}"));
            let seconds = append_partition(&storage, &dir, sizes, &batch, count, published)?;
            partition_rounds.push(seconds);
            storage.remove_dir_all(&dir).map_err(|e| e.to_string())?;
            let dir = PathBuf::from(format!("w{round}"));
            let seconds = append_wal(&storage, &dir, sizes, &batch, count, published)?;
            wal_rounds.push(seconds);
            storage.remove_dir_all(&dir).map_err(|e| e.to_string())?;
        }
        let bytes = count as f64 * batch.len() as f64;
        for (engine, rounds) in [("partition", partition_rounds), ("keyed WAL", wal_rounds)] {
            let mut rates: Vec<f64> = rounds.iter().map(|s| bytes / 1e6 / s).collect();
            let mb = median(&mut rates);
            cells.push(Cell {
                scenario,
                engine,
                megabytes_per_second: mb,
                batches_per_second: mb * 1e6 / batch.len() as f64,
                rounds: rates,
                device_read_mb: None,
            });
        }
    }

    progress("read: writing the partition");
    let dir = PathBuf::from("read");
    let read_count = batches_for(sizes.read_bytes, &batch);
    append_partition(&storage, &dir, sizes, &batch, read_count, false)?;
    // A first boot verifies everything and leaves the page cache warm.
    read_partition(&storage, &dir, sizes, ReadPath::ReadAt)?;
    let mut mapped = Vec::new();
    let mut read_at = Vec::new();
    let mut read_total = 0;
    for round in 0..sizes.rounds {
        progress(&format!("read: round {round}"));
        for (path, rates) in [
            (ReadPath::Mapped, &mut mapped),
            (ReadPath::ReadAt, &mut read_at),
        ] {
            let (seconds, total) = read_partition(&storage, &dir, sizes, path)?;
            read_total = total;
            rates.push(total as f64 / 1e6 / seconds);
        }
    }
    progress("boot: cold, the partition and its bare WAL");
    cells.extend(cold_boots(&storage, &dir, sizes, read_total)?);
    storage.remove_dir_all(&dir).map_err(|e| e.to_string())?;
    for (engine, mut rates) in [("partition mmap", mapped), ("partition read_at", read_at)] {
        let mb = median(&mut rates);
        cells.push(Cell {
            scenario: "read by offset (warm)",
            engine,
            megabytes_per_second: mb,
            batches_per_second: mb * 1e6 / batch.len() as f64,
            rounds: rates,
            device_read_mb: None,
        });
    }
    if read_total == 0 {
        return Err("the read scenario read nothing".into());
    }
    Ok(cells)
}

/// A table of the cells with ratios within each scenario to its second engine.
#[must_use]
pub fn render(cells: &[Cell]) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "{:<28} {:<20} {:>10} {:>12} {:>8} {:>12}\n",
        "scenario", "engine", "MB/s", "batches/s", "ratio", "device MB"
    ));
    for pair in cells.chunks(2) {
        let baseline = pair.get(1).map_or(1.0, |c| c.megabytes_per_second);
        for cell in pair {
            let read = cell
                .device_read_mb
                .map_or_else(String::new, |mb| format!("{mb:.0}"));
            out.push_str(&format!(
                "{:<28} {:<20} {:>10.0} {:>12.0} {:>7.2}x {:>12}\n",
                cell.scenario,
                cell.engine,
                cell.megabytes_per_second,
                cell.batches_per_second,
                cell.megabytes_per_second / baseline,
                read
            ));
        }
    }
    out
}
