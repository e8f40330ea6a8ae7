//! `iggy-fsck`: tells an operator, before a crashed node starts, what boot will do to its data
//! directory: which bytes it discards, which installs it rolls back, which copies it repairs,
//! whether it refuses and why, and whether a group needs repair from its peers. It runs boot's
//! own analysis ([`iggy_recovery::check`]) on a storage that cannot write (`ReadOnly`), so its
//! verdict is boot's and it never changes a byte. `--repair` takes the node's lock, checks,
//! prints the plan, and runs boot in `Repair` mode under the same lock, so the plan it applies
//! is the plan it printed.

use std::ffi::OsString;
use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};

use clap::{CommandFactory, Parser};
use iggy_io::{OsStorage, ReadOnly};
use iggy_recovery::{Mode, Report, exit};

/// The exit codes, as `-h` and `--help` print them.
const EXIT_CODES: &str = "\
Exit codes (the highest that applies):
  0  clean: boot changes nothing
  1  boot repairs locally without losing published data (discards unpublished bytes, rebuilds
     an index, rolls back an install, rewrites a damaged copy, finishes a creation)
  2  a group needs repair from its peers (published data damaged or missing in a replicated
     cluster)
  4  boot refuses a group (unknown version, files of another node or group, damage in a
     single-replica cluster)
  8  usage error, not a node directory, the node is locked by another process (--repair), or an
     I/O error during the check

See docs/recovery.md for every finding kind, its action and what to do next.";

/// What node boot would do to a data directory, without changing it.
///
/// Runs the very analysis a booting node runs, on a read-only handle: every group's superblock,
/// WAL frontier, segments, indexes, consumer offsets and staged installs, every partition
/// checked against the metadata, and every file of the directory either understood or
/// reported. `--repair` applies the plan it printed.
#[derive(Parser, Debug)]
#[command(name = "iggy-fsck", version, about, long_about, after_help = EXIT_CODES)]
pub struct Cli {
    /// The node's data directory (holding `metadata/` and `partitions/`).
    #[arg(required_unless_present_any = ["completions", "man"])]
    pub data_dir: Option<PathBuf>,
    /// Print the report as JSON (schema: docs/recovery.md, "fsck JSON"); with --repair, one
    /// document with the reports before and after and what was applied.
    #[arg(long)]
    pub json: bool,
    /// After printing the plan, apply it: take the node's lock (refusing a node another process
    /// holds), run boot in Repair mode, then check again.
    #[arg(long)]
    pub repair: bool,
    /// Read and verify every retained WAL byte and segment. Without it, the check reads what
    /// boot reads: a WAL file the durable frontier has passed is taken from its seal (its two
    /// ends verified, its bodies verified by each read that serves them), and a sealed
    /// segment's facts from its index summary, so damage inside such a file is found by the
    /// read that meets it, or by this. Slower: it reads every retained byte of every group.
    /// Checks only (not with --repair).
    #[arg(long, conflicts_with = "repair")]
    pub deep: bool,
    /// With --repair: do not ask for confirmation.
    #[arg(long, requires = "repair")]
    pub yes: bool,
    /// Print a completion script for this shell and exit.
    #[arg(long, value_name = "SHELL", exclusive = true)]
    pub completions: Option<clap_complete::Shell>,
    /// Print the man page (roff) and exit.
    #[arg(long, exclusive = true)]
    pub man: bool,
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
            // `--help` and `--version` are answers, on stdout (`iggy-fsck --help | less`).
            if error.use_stderr() {
                let _ = write!(err, "{error}");
                return exit::USAGE_OR_IO;
            }
            let _ = write!(out, "{error}");
            return exit::CLEAN;
        }
    };
    if let Some(shell) = cli.completions {
        clap_complete::generate(shell, &mut Cli::command(), "iggy-fsck", out);
        return exit::CLEAN;
    }
    if cli.man {
        return match clap_mangen::Man::new(Cli::command()).render(out) {
            Ok(()) => exit::CLEAN,
            Err(error) => {
                let _ = writeln!(err, "iggy-fsck: {error}");
                exit::USAGE_OR_IO
            }
        };
    }
    let Some(data_dir) = cli.data_dir.clone() else {
        let _ = writeln!(err, "iggy-fsck: a data directory is required");
        return exit::USAGE_OR_IO;
    };
    match fsck(&cli, &data_dir, out, err, input) {
        Ok(code) => code,
        Err(message) => {
            let _ = writeln!(err, "iggy-fsck: {message}");
            exit::USAGE_OR_IO
        }
    }
}

/// The check. `ours`: this process holds the node's lock (`--repair`), so a holder with this
/// pid is not "another process".
/// `deep`: read every retained WAL byte (`--deep`).
fn check(storage: &OsStorage, data_dir: &Path, ours: bool, deep: bool) -> Result<Report, String> {
    let bar = indicatif::ProgressBar::hidden();
    let mut shown = false;
    let config = iggy_recovery::BootConfig {
        verify: if deep {
            iggy_recovery::Verify::Everything
        } else {
            iggy_recovery::Verify::Sealed
        },
        ..iggy_recovery::BootConfig::new(0)
    };
    let mut report = iggy_recovery::check_with(
        &ReadOnly::new(storage.clone()),
        Path::new(""),
        &config,
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
    report.data_dir = data_dir.to_path_buf();
    if ours
        && report
            .in_use
            .is_some_and(|u| u.pid == Some(std::process::id()))
    {
        report.in_use = None;
    }
    Ok(report)
}

/// Writes `text`; a closed pipe (`| head`) is not a failure of the check.
fn emit(out: &mut dyn Write, text: &str) -> Result<(), String> {
    match out.write_all(text.as_bytes()) {
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.map_err(|e| e.to_string()),
    }
}

fn json_text(value: &serde_json::Value) -> Result<String, String> {
    let mut text = serde_json::to_string_pretty(value).map_err(|e| e.to_string())?;
    text.push('\n');
    Ok(text)
}

fn fsck(
    cli: &Cli,
    data_dir: &Path,
    out: &mut dyn Write,
    err: &mut dyn Write,
    input: &mut dyn BufRead,
) -> Result<u8, String> {
    let storage = OsStorage::open(data_dir).map_err(|e| format!("{}: {e}", data_dir.display()))?;
    if !cli.repair {
        let report = check(&storage, data_dir, false, cli.deep)?;
        if report.in_use.is_some() {
            let _ = writeln!(
                err,
                "iggy-fsck: warning: the node is in use by another process; the verdict may be \
                 stale"
            );
        }
        let text = if cli.json {
            json_text(&report.to_json())?
        } else {
            report.render()
        };
        emit(out, &text)?;
        return Ok(report.exit_code());
    }
    // The lock first, then the check: no other process can change the node between the plan
    // printed here and the plan applied below.
    let lock = iggy_recovery::lock(&storage, Path::new(""))
        .map_err(|e| format!("{}: {e}", data_dir.display()))?;
    let before = check(&storage, data_dir, true, false)?;
    let applied: Vec<&iggy_recovery::Finding> = before
        .findings
        .iter()
        .filter(|f| f.action.is_local_repair())
        .collect();
    if !cli.json {
        emit(out, &before.render())?;
    }
    let after = if applied.is_empty() || before.exit_code() == exit::USAGE_OR_IO {
        let why = match before.exit_code() {
            exit::CLEAN => "nothing to repair".to_string(),
            exit::USAGE_OR_IO => "the check failed; nothing was changed".to_string(),
            _ => format!(
                "nothing boot can repair locally; nothing was changed. Next: {}",
                iggy_recovery::next_step(before.exit_code())
            ),
        };
        let _ = writeln!(err, "iggy-fsck: {why}");
        None
    } else {
        if !cli.yes {
            let _ = write!(
                err,
                "apply these {} action(s) to {}? [y/N] ",
                applied.len(),
                data_dir.display()
            );
            let _ = err.flush();
            let mut answer = String::new();
            input.read_line(&mut answer).map_err(|e| e.to_string())?;
            if !matches!(answer.trim(), "y" | "Y" | "yes") {
                let _ = writeln!(err, "iggy-fsck: not applied; nothing was changed");
                if cli.json {
                    emit(out, &json_text(&repair_json(&before, &[], None))?)?;
                }
                return Ok(before.exit_code());
            }
        }
        // Everything boot writes is synced before it returns: the verdict below survives a
        // power loss.
        let (node, _) = iggy_recovery::boot_locked(
            lock,
            storage.clone(),
            Path::new(""),
            Mode::Repair,
            &iggy_recovery::BootConfig::fresh(),
        )
        .map_err(|e| format!("{}: {e}", data_dir.display()))?;
        // Closes every group; the lock goes with it, after the check below.
        let after = check(&storage, data_dir, true, false)?;
        drop(node);
        let _ = writeln!(
            err,
            "iggy-fsck: applied {} action(s); the directory now checks as:",
            applied.len()
        );
        Some(after)
    };
    if cli.json {
        emit(
            out,
            &json_text(&repair_json(&before, &applied, after.as_ref()))?,
        )?;
    } else if let Some(after) = &after {
        emit(out, &after.render())?;
    }
    Ok(after.as_ref().unwrap_or(&before).exit_code())
}

/// The one JSON document of `--repair --json`: the report before, what was applied, the report
/// after (`null` when nothing was applied), and the exit code.
fn repair_json(
    before: &Report,
    applied: &[&iggy_recovery::Finding],
    after: Option<&Report>,
) -> serde_json::Value {
    serde_json::json!({
        "schema": iggy_recovery::report::SCHEMA_VERSION,
        "before": before.to_json(),
        "applied": applied,
        "after": after.map(Report::to_json),
        "exit_code": after.unwrap_or(before).exit_code(),
    })
}
