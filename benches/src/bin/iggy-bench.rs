//! `iggy-bench`: storage benchmarks to size disks with. See `docs/benchmarks.md`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use iggy_benches::compare::{self, Scenario, Sizes};
use iggy_benches::disk::{self, DiskConfig};
use iggy_benches::engines::EngineKind;
use iggy_benches::stats::percentiles;
use iggy_io::OsStorage;

/// Storage benchmarks for the iggy persistence toolkit.
///
/// With no subcommand, runs `disk` in a fresh temporary directory: the raw append, fdatasync and
/// sequential figures of the file system that holds the system temp dir.
#[derive(Parser, Debug)]
#[command(version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Raw limits of the file system under a directory, through pwrite and fdatasync: append
    /// throughput with one fdatasync per batch (growing file, and prefilled file), 4 KiB
    /// write+fdatasync latency percentiles, buffered write and warm read MB/s. These are the
    /// baselines the WAL benchmarks are compared against.
    Disk(DiskArgs),
    /// The toolkit's WAL alone: records/s, MB/s and per-batch latency percentiles for batches
    /// appended by one or more writers, published (durable per batch) or not (durable at end).
    Wal(WalArgs),
    /// The WAL scenario matrix for the raw baselines, the toolkit's WAL and peer logs
    /// (okaywal, raft-engine) in one run, interleaved over rounds; medians and ratios to the
    /// raw prefilled baseline. Scenarios: batches of 250 published; the same in a steady state
    /// (the engine compacting as it goes, after a warm-up, so recycled files are reused);
    /// unpublished; single records published; 64 concurrent appenders each waiting on its own
    /// record; boot replay warm and cold (cold runs `sync; echo 3 > /proc/sys/vm/drop_caches`, which needs root and drops the
    /// page cache of the whole machine, not only this benchmark's files).
    Compare(CompareArgs),
    /// Times boot of an existing iggy WAL directory (for example one written by `iggy-bench wal
    /// --dir D`, whose log is in `D/iggy-bench-wal/wal`): verification of the whole published
    /// prefix, as a server start does.
    Replay(ReplayArgs),
    /// The metadata snapshot at scale: builds a state (default 10,000 streams, 100,000
    /// partitions, 8,192 clients), then times writing snapshot.bin (encode, write, fdatasync,
    /// rename, directory fsync) and loading it (read, verify, decode), and reports its size.
    Snapshot(SnapshotArgs),
    /// Many consensus groups on one node: 1, 4 and 25 WALs in one storage, each publishing single
    /// records from its own thread (each record durable before the next). The aggregate rate
    /// against one group's shows whether groups share the device or queue in the toolkit.
    Groups(GroupsArgs),
    /// A partition through `segments`: append throughput (validate, stamp, WAL entry, sparse
    /// index) against the bare keyed WAL with the same batches, published per batch and
    /// unpublished; then read throughput of a whole partition by offset from a warm page cache,
    /// through memory maps and through `read_at`; then the same partition booted cold (page
    /// cache dropped, with root), against its keyed WAL booted alone, with the bytes each read
    /// from the device. Interleaved over rounds; medians.
    Segments(SegmentsArgs),
    /// A node's boot with many idle partitions, through the boot path the server and the tools
    /// share: after a clean shutdown, and after a crash that left one unpublished batch in every
    /// partition (which boot discards). Reports seconds, device flushes and time per partition.
    Boot(BootArgs),
}

/// Where a benchmark runs.
#[derive(clap::Args, Debug, Default)]
struct DirArgs {
    /// Directory to benchmark in (on the disk to size); it must exist unless --create-dir is
    /// given. Files are created and removed there. Default: a new temporary directory (on the
    /// file system of the system temp dir, which may be tmpfs: the report says).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Create --dir (and its parents) if it does not exist.
    #[arg(long, requires = "dir")]
    create_dir: bool,
}

#[derive(clap::Args, Debug)]
struct GroupsArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// Group counts to run, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 4, 25])]
    groups: Vec<usize>,
    /// Records each group publishes.
    #[arg(long, default_value_t = 2000)]
    records: u64,
    /// Bytes per record.
    #[arg(long, default_value_t = 1000)]
    record_bytes: usize,
    /// How durable writes reach the disk (see `wal --io`).
    #[arg(long, value_enum, default_value_t = IoArg::Uring)]
    io: IoArg,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args, Debug)]
struct BootArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// Partition counts, comma-separated, each a node of its own (10,000 needs about
    /// 10,000 x the segment size of disk: segments are preallocated).
    #[arg(long, value_delimiter = ',', default_values_t = [100u32, 1000])]
    partitions: Vec<u32>,
    /// Each partition's segment size, in KiB.
    #[arg(long, default_value_t = 256)]
    segment_kib: u64,
    /// Each group syncs its own boot writes (superblock copies, frontier, zeroed tail) instead
    /// of the node's one `syncfs` after every group booted: the code before deferred boot
    /// syncs, for a side-by-side run.
    #[arg(long)]
    per_group_syncs: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args, Debug)]
struct SegmentsArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// Messages per batch.
    #[arg(long, default_value_t = 250)]
    messages_per_batch: u32,
    /// Payload bytes per message.
    #[arg(long, default_value_t = 1000)]
    message_bytes: usize,
    /// MiB appended per append measurement.
    #[arg(long, default_value_t = 256)]
    append_mib: u64,
    /// MiB of the partition read back.
    #[arg(long, default_value_t = 1024)]
    read_mib: u64,
    /// Bytes asked for per read call, KiB.
    #[arg(long, default_value_t = 1024)]
    read_chunk_kib: u64,
    /// Segment size, MiB.
    #[arg(long, default_value_t = 256)]
    segment_mib: u64,
    /// Rounds per scenario.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args, Debug)]
struct SnapshotArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// Streams (each with one topic).
    #[arg(long, default_value_t = 10_000)]
    streams: u32,
    /// Partitions per topic.
    #[arg(long, default_value_t = 10)]
    partitions_per_topic: u32,
    /// Clients in the client table.
    #[arg(long, default_value_t = 8192)]
    clients: u32,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args, Debug)]
struct ReplayArgs {
    /// The directory that holds the log's `frontier` file.
    #[arg(long)]
    log_dir: PathBuf,
    /// The log's group id (the benchmarks use 1).
    #[arg(long, default_value_t = 1)]
    group: u128,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Durability {
    /// Each batch is durable (published) before the next is appended.
    Published,
    /// Batches are queued; one publication at the end.
    Unpublished,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum IoArg {
    Uring,
    Syscalls,
}

#[derive(clap::Args, Debug)]
struct WalArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// Bytes per record.
    #[arg(long, default_value_t = 1000)]
    record_bytes: usize,
    /// Records per batch.
    #[arg(long, default_value_t = 250)]
    batch: usize,
    /// Concurrent writers, each appending its own batches.
    #[arg(long, default_value_t = 1)]
    writers: usize,
    /// Whether each batch waits to be durable.
    #[arg(long, value_enum, default_value_t = Durability::Published)]
    durability: Durability,
    /// MiB written in total.
    #[arg(long, default_value_t = 256)]
    total_mib: u64,
    /// Bytes written in total, instead of --total-mib (any size, e.g. for a quick probe).
    #[arg(long, conflicts_with = "total_mib")]
    total_bytes: Option<u64>,
    /// Size of each WAL file, MiB (files are preallocated to it).
    #[arg(long, default_value_t = 64)]
    file_mib: u64,
    /// Zero-fill each new WAL file (true) or only preallocate it with fallocate (false).
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    zero_fill: bool,
    /// Small publications carry their entries in the frontier file's ring, one flush each
    /// (true), or every publication syncs the log, then writes a frontier slot (false).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    carry: bool,
    /// How durable writes reach the disk: io_uring (each publication one linked chain of data
    /// write, fdatasync, frontier write, fdatasync, where the kernel allows it) or plain system
    /// calls.
    #[arg(long, value_enum, default_value_t = IoArg::Uring)]
    io: IoArg,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args, Debug)]
struct CompareArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// Smaller volumes and one round (a few minutes on 2 cores).
    #[arg(long)]
    quick: bool,
    /// Rounds per scenario (default 3, or 1 with --quick).
    #[arg(long)]
    rounds: Option<usize>,
    /// MiB written and then replayed by the boot replay scenarios (default 1024, or 128 with
    /// --quick).
    #[arg(long)]
    replay_mib: Option<u64>,
    /// Only these engines, comma-separated (names as in the table: raw-prefilled, raw-frontier,
    /// raw-fresh-frontier, raw-append, iggy-wal, okaywal, raft-engine, commitlog, fjall). Ratios need
    /// raw-prefilled. Default: all.
    #[arg(long, value_delimiter = ',', value_parser = parse_engine)]
    engines: Vec<EngineKind>,
    /// Only these scenarios, comma-separated: published, steady, unpublished, single,
    /// concurrent, replay-warm, replay-cold. Default: all.
    #[arg(long, value_delimiter = ',', value_parser = parse_scenario)]
    scenarios: Vec<Scenario>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Also draw the results as an SVG chart at this path: throughput per scenario as a ratio
    /// to the raw baseline, and the latency CDF of single published records per engine.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(clap::Args, Debug, Default)]
struct DiskArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// How many times to run every scenario; the report gives the median and the spread (a
    /// shared or virtual disk can differ several times from one run to the next).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Bytes per record.
    #[arg(long, default_value_t = 1000)]
    record_bytes: usize,
    /// Records per batch (one fdatasync per batch).
    #[arg(long, default_value_t = 250)]
    batch: usize,
    /// MiB written by each append scenario.
    #[arg(long, default_value_t = 64)]
    total_mib: u64,
    /// Iterations of the 4 KiB write+fdatasync probe.
    #[arg(long, default_value_t = 2000)]
    sync_iterations: usize,
    /// Print the report as JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// `print!` that stops the program quietly (exit 0) when stdout's reader went away
/// (`iggy-bench ... | head`): what was printed is what the reader wanted. (`print!` panics there.)
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let mut stdout = std::io::stdout();
        if let Err(error) = write!(stdout, $($arg)*).and_then(|()| stdout.flush()) {
            if error.kind() == std::io::ErrorKind::BrokenPipe {
                std::process::exit(0);
            }
            eprintln!("iggy-bench: writing to stdout: {error}");
            std::process::exit(8);
        }
    }};
}

/// `println!` as [`out!`] prints.
macro_rules! outln {
    ($($arg:tt)*) => {{
        out!($($arg)*);
        out!("\n");
    }};
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::Wal(args)) => run_wal(&args),
        Some(Command::Compare(args)) => run_compare(&args),
        Some(Command::Disk(args)) => run_disk(&args),
        Some(Command::Replay(args)) => run_replay(&args),
        Some(Command::Snapshot(args)) => run_snapshot(&args),
        Some(Command::Segments(args)) => run_segments(&args),
        Some(Command::Groups(args)) => run_groups(&args),
        Some(Command::Boot(args)) => run_boot(&args),
        None => run_disk(&DiskArgs {
            record_bytes: 1000,
            batch: 250,
            total_mib: 64,
            sync_iterations: 2000,
            runs: 3,
            ..DiskArgs::default()
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("iggy-bench: {message}");
            ExitCode::from(8)
        }
    }
}

/// Prints `value` as pretty JSON on stdout (every `--json`).
fn print_json(value: &impl serde::Serialize) -> Result<(), String> {
    let text = serde_json::to_string_pretty(value).map_err(|e| e.to_string())?;
    outln!("{text}");
    Ok(())
}

/// The directory to run in: the one given (which must exist, or is created with
/// `--create-dir`), or a new temp dir kept alive by the guard. `announce`: print what is
/// measured there (device, file system, mount options, a warning for tmpfs and the like) on
/// stderr, for the commands whose own report does not say it.
fn bench_dir(
    args: &DirArgs,
    announce: bool,
) -> Result<(PathBuf, Option<tempfile::TempDir>), String> {
    let (dir, guard) = match &args.dir {
        Some(dir) => {
            let storage = OsStorage::open(dir);
            match storage {
                Ok(_) => {}
                Err(error) if error.is_not_found() && args.create_dir => {
                    OsStorage::create(dir).map_err(|e| format!("--dir: {e}"))?;
                }
                Err(error) if error.is_not_found() => {
                    return Err(format!(
                        "--dir {}: does not exist (give a directory on the disk to measure, or \
                         add --create-dir)",
                        dir.display()
                    ));
                }
                Err(error) => return Err(format!("--dir: {error}")),
            }
            (dir.clone(), None)
        }
        None => {
            let temp = tempfile::tempdir().map_err(|e| format!("creating a temp dir: {e}"))?;
            (temp.path().to_path_buf(), Some(temp))
        }
    };
    if announce {
        eprint!(
            "{}",
            iggy_benches::environment::render(&iggy_benches::environment::describe(&dir))
        );
    }
    Ok((dir, guard))
}

fn run_wal(args: &WalArgs) -> Result<(), String> {
    let total_bytes = args.total_bytes.unwrap_or(args.total_mib << 20);
    if args.record_bytes == 0 || args.batch == 0 || total_bytes == 0 || args.writers == 0 {
        return Err("--record-bytes, --batch, --writers and the total must be positive".into());
    }
    let (dir, _guard) = bench_dir(&args.dir, true)?;
    let base = iggy_benches::engines::run_dir(&dir, "iggy-bench-wal")?;
    let wal = std::sync::Arc::new(iggy_benches::engines::IggyWal::open_with(
        &base,
        args.zero_fill,
        args.carry,
        args.file_mib << 20,
        match args.io {
            IoArg::Uring => iggy_io::IoPath::Auto,
            IoArg::Syscalls => iggy_io::IoPath::Syscalls,
        },
    )?);
    let engine: std::sync::Arc<dyn iggy_benches::engines::Engine> = wal.clone();
    let first_sequence = wal.wal().published().sequence;
    let data = compare::records(args.batch, args.record_bytes, 7);
    let batch_bytes = (args.batch * args.record_bytes) as u64;
    let batches_per_writer = (total_bytes / batch_bytes / args.writers as u64).max(1);
    let durable = args.durability == Durability::Published;
    let started = std::time::Instant::now();
    let threads: Vec<_> = (0..args.writers)
        .map(|writer| {
            let engine = std::sync::Arc::clone(&engine);
            let data = data.clone();
            std::thread::spawn(move || -> Result<Vec<std::time::Duration>, String> {
                let batch: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
                let mut latencies = Vec::new();
                for _ in 0..batches_per_writer {
                    let began = std::time::Instant::now();
                    engine.append(writer, &batch, durable)?;
                    latencies.push(began.elapsed());
                }
                Ok(latencies)
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for thread in threads {
        latencies.extend(thread.join().map_err(|_| "writer panicked".to_string())??);
    }
    engine.sync()?;
    let seconds = started.elapsed().as_secs_f64();
    let records = batches_per_writer * args.writers as u64 * args.batch as u64;
    let publications = wal.wal().published().sequence - first_sequence;
    let latency = percentiles(&latencies);
    let report = serde_json::json!({
        "records": records,
        "publications": publications,
        "seconds": seconds,
        "records_per_second": records as f64 / seconds,
        "megabytes_per_second": records as f64 * args.record_bytes as f64 / 1e6 / seconds,
        "batch_latency": latency,
        "writers": args.writers,
        "durability": format!("{:?}", args.durability),
    });
    if args.json {
        print_json(&report)?;
    } else {
        outln!(
            "iggy-wal: {records} records of {} bytes, batches of {}, {} writer(s), {:?}",
            args.record_bytes,
            args.batch,
            args.writers,
            args.durability
        );
        outln!(
            "  {:.0} records/s, {:.1} MB/s; batch latency p50 {:.0}us p99 {:.0}us p999 {:.0}us",
            records as f64 / seconds,
            records as f64 * args.record_bytes as f64 / 1e6 / seconds,
            latency.p50_us,
            latency.p99_us,
            latency.p999_us
        );
        outln!(
            "  {publications} publications, {:.1} records each",
            records as f64 / publications.max(1) as f64
        );
    }
    Ok(())
}

fn run_groups(args: &GroupsArgs) -> Result<(), String> {
    if args.groups.is_empty() || args.groups.contains(&0) || args.records == 0 {
        return Err("--groups must be positive counts and --records positive".into());
    }
    let (dir, _guard) = bench_dir(&args.dir, true)?;
    let io_path = match args.io {
        IoArg::Uring => iggy_io::IoPath::Auto,
        IoArg::Syscalls => iggy_io::IoPath::Syscalls,
    };
    let sizes = iggy_benches::groups::Sizes {
        groups: args.groups.clone(),
        records_per_group: args.records,
        record_bytes: args.record_bytes,
        io_path: if io_path == iggy_io::IoPath::Auto {
            "uring"
        } else {
            "syscalls"
        },
    };
    let bar = progress_bar(args.groups.len() as u64);
    let runs = iggy_benches::groups::run(&dir, &sizes, io_path, |step| {
        bar.set_message(step.to_string());
        bar.inc(1);
    })?;
    bar.finish_and_clear();
    if args.json {
        print_json(&serde_json::json!({ "sizes": sizes, "runs": runs }))?;
    } else {
        outln!(
            "iggy-bench groups in {}: each group publishes {} records of {} bytes, one at a time",
            dir.display(),
            args.records,
            args.record_bytes
        );
        out!("{}", iggy_benches::groups::render(&runs));
    }
    Ok(())
}

fn run_boot(args: &BootArgs) -> Result<(), String> {
    if args.partitions.is_empty() || args.partitions.contains(&0) || args.segment_kib < 64 {
        return Err("--partitions must be positive counts and --segment-kib at least 64".into());
    }
    let (dir, _guard) = bench_dir(&args.dir, true)?;
    let sizes = iggy_benches::boot::Sizes {
        partitions: args.partitions.clone(),
        segment_size_bytes: args.segment_kib << 10,
        defer_boot_syncs: !args.per_group_syncs,
    };
    let bar = progress_bar(3 * args.partitions.len() as u64);
    let (runs, failed) = iggy_benches::boot::run(&dir, &sizes, |step| {
        bar.set_message(step.to_string());
        bar.inc(1);
    });
    bar.finish_and_clear();
    if args.json {
        print_json(&serde_json::json!({ "sizes": sizes, "runs": runs, "failed": failed }))?;
    } else {
        outln!(
            "iggy-bench boot in {}: idle partitions of {} KiB segments, one topic, boot(Open), \
             boot writes synced {}",
            dir.display(),
            args.segment_kib,
            if args.per_group_syncs {
                "by each group"
            } else {
                "once for the node (syncfs)"
            }
        );
        out!("{}", iggy_benches::boot::render(&runs));
    }
    failed.map_or(Ok(()), Err)
}

fn run_segments(args: &SegmentsArgs) -> Result<(), String> {
    if args.messages_per_batch == 0
        || args.message_bytes == 0
        || args.append_mib == 0
        || args.read_mib == 0
        || args.rounds == 0
        || args.segment_mib == 0
    {
        return Err("every size and --rounds must be positive".into());
    }
    let (dir, _guard) = bench_dir(&args.dir, true)?;
    let sizes = iggy_benches::segments::Sizes {
        messages_per_batch: args.messages_per_batch,
        message_bytes: args.message_bytes,
        append_bytes: args.append_mib << 20,
        read_bytes: args.read_mib << 20,
        read_chunk_bytes: args.read_chunk_kib << 10,
        segment_bytes: args.segment_mib << 20,
        rounds: args.rounds,
        cold_boots: true,
    };
    let bar = progress_bar((3 * args.rounds + 2) as u64);
    let cells = iggy_benches::segments::run(&dir, &sizes, |step| {
        bar.set_message(step.to_string());
        bar.inc(1);
    })?;
    bar.finish_and_clear();
    if args.json {
        let report = serde_json::json!({ "sizes": sizes, "cells": cells });
        print_json(&report)?;
    } else {
        outln!(
            "iggy-bench segments in {} ({} round(s); median; ratio to the second row)",
            dir.display(),
            args.rounds
        );
        out!("{}", iggy_benches::segments::render(&cells));
    }
    Ok(())
}

fn run_snapshot(args: &SnapshotArgs) -> Result<(), String> {
    let (dir, _guard) = bench_dir(&args.dir, true)?;
    let sizes = iggy_benches::snapshot::Sizes {
        streams: args.streams,
        partitions_per_topic: args.partitions_per_topic,
        clients: args.clients,
    };
    let report = iggy_benches::snapshot::run(&dir, &sizes)?;
    if args.json {
        print_json(&report)?;
    } else {
        out!("{}", iggy_benches::snapshot::render(&report));
    }
    Ok(())
}

fn run_replay(args: &ReplayArgs) -> Result<(), String> {
    let parent = args.log_dir.parent().ok_or("--log-dir has no parent")?;
    let name = args.log_dir.file_name().ok_or("--log-dir has no name")?;
    let storage = OsStorage::open(parent).map_err(|e| e.to_string())?;
    let started = std::time::Instant::now();
    let report = iggy_wal::check(
        &iggy_io::ReadOnly::new(storage),
        std::path::Path::new(name),
        args.group,
    )
    .map_err(|e| e.to_string())?
    .ok_or("no log there")?;
    let seconds = started.elapsed().as_secs_f64();
    outln!(
        "verified ops {}..={} ({} bytes) in {:.3}s: {:.0} MB/s; {} finding(s)",
        report.first_op,
        report.head_op,
        report.durable_bytes,
        seconds,
        report.durable_bytes as f64 / 1e6 / seconds,
        report.findings.len()
    );
    Ok(())
}

/// A progress bar on stderr when it is a terminal; invisible on a pipe or a file.
fn progress_bar(steps: u64) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(steps);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{elapsed_precise} [{bar:30}] {pos}/{len} {wide_msg}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

fn parse_engine(name: &str) -> Result<EngineKind, String> {
    EngineKind::ALL
        .into_iter()
        .find(|kind| kind.name() == name)
        .ok_or_else(|| format!("unknown engine {name:?}"))
}

fn parse_scenario(name: &str) -> Result<Scenario, String> {
    Ok(match name {
        "published" => Scenario::PublishedBatches,
        "steady" => Scenario::SteadyBatches,
        "unpublished" => Scenario::UnpublishedBatches,
        "single" => Scenario::SinglePublished,
        "concurrent" => Scenario::Concurrent64,
        "replay-warm" => Scenario::ReplayWarm,
        "replay-cold" => Scenario::ReplayCold,
        other => return Err(format!("unknown scenario {other:?}")),
    })
}

fn run_compare(args: &CompareArgs) -> Result<(), String> {
    let (dir, _guard) = bench_dir(&args.dir, true)?;
    let mut sizes = if args.quick {
        Sizes::quick()
    } else {
        Sizes::full()
    };
    if let Some(rounds) = args.rounds {
        sizes.rounds = rounds.max(1);
    }
    if let Some(mib) = args.replay_mib {
        sizes.replay_bytes = mib.max(1) << 20;
    }
    let engines = if args.engines.is_empty() {
        EngineKind::ALL.to_vec()
    } else {
        args.engines.clone()
    };
    let scenarios = if args.scenarios.is_empty() {
        Scenario::ALL.to_vec()
    } else {
        args.scenarios.clone()
    };
    let steps = (scenarios.len() * sizes.rounds * engines.len()) as u64;
    let bar = progress_bar(steps);
    let cells = compare::run_matrix(&engines, &scenarios, &sizes, &dir, |step| {
        bar.set_message(step.to_string());
        bar.inc(1);
    });
    bar.finish_and_clear();
    if let Some(path) = &args.out {
        iggy_benches::chart::write_svg(&cells, &engines, path)?;
        eprintln!("iggy-bench: chart written to {}", path.display());
    }
    if args.json {
        let report = serde_json::json!({ "sizes": sizes, "cells": cells });
        print_json(&report)?;
    } else {
        outln!(
            "iggy-bench compare in {} ({} round(s); median; ratio to raw-prefilled)",
            dir.display(),
            sizes.rounds
        );
        out!("{}", compare::render(&cells, &engines));
        if let Some(caveat) = compare::caveat(sizes.rounds) {
            outln!("{caveat}");
        }
    }
    Ok(())
}

fn run_disk(args: &DiskArgs) -> Result<(), String> {
    if args.record_bytes == 0 || args.batch == 0 || args.total_mib == 0 || args.runs == 0 {
        return Err("--record-bytes, --batch, --total-mib and --runs must be positive".into());
    }
    let (dir, _guard) = bench_dir(&args.dir, false)?;
    let storage = OsStorage::open(&dir).map_err(|e| e.to_string())?;
    let config = DiskConfig {
        record_bytes: args.record_bytes,
        batch_records: args.batch,
        total_bytes: args.total_mib << 20,
        sync_iterations: args.sync_iterations,
    };
    let environment = iggy_benches::environment::describe(&dir);
    if !args.json {
        outln!("iggy-bench disk in {}", dir.display());
        out!("{}", iggy_benches::environment::render(&environment));
    }
    let bar = progress_bar(5 * args.runs as u64);
    let mut reports = Vec::with_capacity(args.runs);
    for run in 0..args.runs {
        let report = disk::run(&storage, &config, |step| {
            bar.set_message(format!("run {}/{}: {step}", run + 1, args.runs));
            bar.inc(1);
        })
        .map_err(|e| e.to_string())?;
        reports.push(report);
    }
    bar.finish_and_clear();
    let summary = disk::summarize(&reports);
    if args.json {
        print_json(&serde_json::json!({
            "environment": environment, "summary": summary, "runs": reports,
        }))?;
    } else {
        // The last run in full (latency percentiles, io_uring), then every figure's spread.
        if let Some(last) = reports.last() {
            out!("{}", disk::render(last));
        }
        out!("{}", disk::render_summary(&summary));
    }
    Ok(())
}
