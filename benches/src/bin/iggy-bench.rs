//! `iggy-bench`: storage benchmarks to size disks with. See `docs/benchmarks.md`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use iggy_benches::disk::{self, DiskConfig};
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
}

#[derive(clap::Args, Debug, Default)]
struct DiskArgs {
    /// Directory to benchmark in (files are created and removed there). Default: a new
    /// temporary directory.
    #[arg(long)]
    dir: Option<PathBuf>,
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let args = match cli.command {
        Some(Command::Disk(args)) => args,
        None => DiskArgs {
            record_bytes: 1000,
            batch: 250,
            total_mib: 64,
            sync_iterations: 2000,
            ..DiskArgs::default()
        },
    };
    match run_disk(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("iggy-bench: {message}");
            ExitCode::from(8)
        }
    }
}

fn run_disk(args: &DiskArgs) -> Result<(), String> {
    if args.record_bytes == 0 || args.batch == 0 || args.total_mib == 0 {
        return Err("--record-bytes, --batch and --total-mib must be positive".into());
    }
    let temp;
    let dir = match &args.dir {
        Some(dir) => dir.clone(),
        None => {
            temp = tempfile::tempdir().map_err(|e| format!("creating a temp dir: {e}"))?;
            temp.path().to_path_buf()
        }
    };
    let storage = OsStorage::create(&dir).map_err(|e| e.to_string())?;
    let config = DiskConfig {
        record_bytes: args.record_bytes,
        batch_records: args.batch,
        total_bytes: args.total_mib << 20,
        sync_iterations: args.sync_iterations,
    };
    if !args.json {
        println!("iggy-bench disk in {}", dir.display());
    }
    let json = args.json;
    let report = disk::run(&storage, &config, |step| {
        if !json {
            eprintln!("  measuring: {step}");
        }
    })
    .map_err(|e| e.to_string())?;
    if args.json {
        let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        println!("{text}");
    } else {
        print!("{}", disk::render(&report));
    }
    Ok(())
}
