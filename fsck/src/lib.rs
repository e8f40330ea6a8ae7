//! `iggy-fsck`: tells an operator, before a crashed node starts, what boot will do to its data
//! directory: which bytes it discards, which installs it rolls back, which copies it repairs,
//! whether it refuses and why, and whether a group needs repair from its peers. It runs boot's
//! own analysis ([`iggy_recovery::check`]) on a storage that cannot write (`ReadOnly`), so its
//! verdict is boot's and it never changes a byte. `--repair` runs boot in `Repair` mode after
//! printing the plan.
//!
//! Exit codes (the highest that applies): 0 clean; 1 boot would repair locally without losing
//! published data; 2 a group needs repair from its peers; 4 boot would refuse; 8 usage or I/O
//! error.

use std::ffi::OsString;
use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};

use clap::Parser;
use iggy_io::{OsStorage, ReadOnly};
use iggy_recovery::{Mode, Report, exit};

/// What node boot would do to a data directory, without changing it.
///
/// Runs the very analysis a booting node runs, on a read-only handle. Exit codes (the highest
/// that applies): 0 clean; 1 boot would repair locally without losing published data (discard
/// unpublished bytes, rebuild an index, roll back an install, rewrite a damaged copy); 2 a group
/// needs repair from its peers (published data damaged in a replicated group); 4 boot would
/// refuse; 8 usage or I/O error.
#[derive(Parser, Debug)]
#[command(name = "iggy-fsck", version, about, long_about)]
pub struct Cli {
    /// The node's data directory (holding `metadata/` and `partitions/`).
    pub data_dir: PathBuf,
    /// Print the report as JSON (schema: docs/recovery.md, "fsck JSON").
    #[arg(long)]
    pub json: bool,
    /// After printing the plan, apply it: run boot in Repair mode, then check again.
    #[arg(long)]
    pub repair: bool,
    /// With --repair: do not ask for confirmation.
    #[arg(long, requires = "repair")]
    pub yes: bool,
}

/// Runs `iggy-fsck` with `args` (the first is the program name); returns the exit code.
pub fn run(
    args: impl IntoIterator<Item = impl Into<OsString> + Clone>,
    out: &mut dyn Write,
    err: &mut dyn Write,
    input: &mut dyn BufRead,
) -> u8 {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(error) => {
            let _ = write!(err, "{error}");
            return if error.use_stderr() {
                exit::USAGE_OR_IO
            } else {
                exit::CLEAN
            };
        }
    };
    match fsck(&cli, out, err, input) {
        Ok(code) => code,
        Err(message) => {
            let _ = writeln!(err, "iggy-fsck: {message}");
            exit::USAGE_OR_IO
        }
    }
}

fn check(storage: &OsStorage, data_dir: &Path) -> Result<Report, String> {
    let bar = indicatif::ProgressBar::hidden();
    let mut shown = false;
    let report = iggy_recovery::check(
        &ReadOnly::new(storage.clone()),
        Path::new(""),
        |done, total| {
            // A bar for many partitions, on a terminal only (indicatif draws nothing elsewhere).
            if !shown && total >= 16 && std::io::stderr().is_terminal() {
                bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
                bar.set_length(total as u64);
                shown = true;
            }
            bar.set_position(done as u64);
        },
    )
    .map_err(|e| format!("{}: {e}", data_dir.display()))?;
    bar.finish_and_clear();
    Ok(report)
}

fn print(cli: &Cli, report: &Report, out: &mut dyn Write) -> Result<(), String> {
    let text = if cli.json {
        let mut text =
            serde_json::to_string_pretty(&report.to_json()).map_err(|e| e.to_string())?;
        text.push('\n');
        text
    } else {
        report.render()
    };
    match out.write_all(text.as_bytes()) {
        // A closed pipe (`| head`) is not a failure of the check.
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.map_err(|e| e.to_string()),
    }
}

fn fsck(
    cli: &Cli,
    out: &mut dyn Write,
    err: &mut dyn Write,
    input: &mut dyn BufRead,
) -> Result<u8, String> {
    let storage =
        OsStorage::open(&cli.data_dir).map_err(|e| format!("{}: {e}", cli.data_dir.display()))?;
    let mut report = check(&storage, &cli.data_dir)?;
    report.data_dir.clone_from(&cli.data_dir);
    print(cli, &report, out)?;
    if !cli.repair {
        return Ok(report.exit_code());
    }
    if report.exit_code() == exit::CLEAN {
        let _ = writeln!(err, "iggy-fsck: nothing to repair");
        return Ok(exit::CLEAN);
    }
    if !cli.yes {
        let _ = write!(err, "apply this plan to {}? [y/N] ", cli.data_dir.display());
        let _ = err.flush();
        let mut answer = String::new();
        input.read_line(&mut answer).map_err(|e| e.to_string())?;
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            let _ = writeln!(err, "iggy-fsck: not applied");
            return Ok(report.exit_code());
        }
    }
    iggy_recovery::boot(storage.clone(), Path::new(""), Mode::Repair)
        .map_err(|e| format!("{}: {e}", cli.data_dir.display()))?;
    let mut after = check(&storage, &cli.data_dir)?;
    after.data_dir.clone_from(&cli.data_dir);
    let _ = writeln!(err, "iggy-fsck: repaired; the directory now checks as:");
    print(cli, &after, out)?;
    Ok(after.exit_code())
}
