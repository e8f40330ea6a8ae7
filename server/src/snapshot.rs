//! `GetSnapshot` (11, `iggy snapshot`): a zip archive of what an operator looks at on a node that
//! misbehaves, built on the node asked. One file per kind asked: `filesystem_overview.txt` (every
//! file under the data directory with its size), `process_list.txt` (`ps aux`),
//! `resource_usage.txt` (`top -H -b -n 1`), `test.txt`, `server_logs.txt` and `server_config.txt`
//! (the node's limits and roster; never the bus key, a password or its hash).

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// The kinds a request names (upstream's codes); 100 is every one.
pub const FILESYSTEM_OVERVIEW: u8 = 1;
pub const PROCESS_LIST: u8 = 2;
pub const RESOURCE_USAGE: u8 = 3;
pub const TEST: u8 = 4;
pub const SERVER_LOGS: u8 = 5;
pub const SERVER_CONFIG: u8 = 6;
pub const ALL: u8 = 100;

/// The compression codes a request names: 1 stored; 2 deflated, which also stands in for 3 to 6
/// (bzip2, zstd, lzma, xz), which this build does not carry (each entry names its method, so
/// any unzip reads the archive).
pub const STORED: u8 = 1;

/// At most this many files are listed in the overview (a data directory of many partitions
/// holds a few per partition and segment).
const FILES_LISTED_MAX: usize = 100_000;
/// At most this many bytes of a command's output are kept.
const OUTPUT_BYTES_MAX: usize = 4 << 20;

/// What a snapshot reads from the node.
pub struct Inputs {
    pub data_dir: Option<PathBuf>,
    /// The lines of `server_config.txt`.
    pub config: String,
}

/// The archive for `kinds` (100: all), compressed by `compression`.
pub fn build(inputs: &Inputs, compression: u8, kinds: &[u8]) -> Result<Vec<u8>, String> {
    let all = kinds.contains(&ALL);
    let wanted = |kind: u8| all || kinds.contains(&kind);
    let method = if compression == STORED {
        zip::CompressionMethod::Stored
    } else {
        zip::CompressionMethod::Deflated
    };
    let options = zip::write::SimpleFileOptions::default().compression_method(method);
    let mut archive = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let mut add = |name: &str, text: &str| -> Result<(), String> {
        archive
            .start_file(name, options)
            .and_then(|()| archive.write_all(text.as_bytes()).map_err(Into::into))
            .map_err(|e| format!("writing {name} into the snapshot: {e}"))
    };
    if wanted(FILESYSTEM_OVERVIEW) {
        add(
            "filesystem_overview.txt",
            &overview(inputs.data_dir.as_deref()),
        )?;
    }
    if wanted(PROCESS_LIST) {
        add("process_list.txt", &command("ps", &["aux"]))?;
    }
    if wanted(RESOURCE_USAGE) {
        add(
            "resource_usage.txt",
            &command("top", &["-H", "-b", "-n", "1"]),
        )?;
    }
    if wanted(TEST) {
        add("test.txt", "test\n")?;
    }
    if wanted(SERVER_LOGS) {
        add(
            "server_logs.txt",
            "iggy-server writes its log to its standard error (RUST_LOG sets the level): the \
             supervisor that started it keeps it; there is no log directory to include.\n",
        )?;
    }
    if wanted(SERVER_CONFIG) {
        add("server_config.txt", &inputs.config)?;
    }
    archive
        .finish()
        .map(std::io::Cursor::into_inner)
        .map_err(|e| format!("finishing the snapshot: {e}"))
}

/// Every file under `dir` with its size, in path order.
#[allow(
    clippy::disallowed_methods,
    reason = "a read-only listing for an operator, beside the storage: it writes nothing and \
              follows no durability rule"
)]
fn overview(dir: Option<&Path>) -> String {
    let Some(dir) = dir else {
        return "no data directory (a node in memory)\n".into();
    };
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    let mut out = format!("{}\n", dir.display());
    while let Some(at) = pending.pop() {
        let entries = match std::fs::read_dir(&at) {
            Ok(entries) => entries,
            Err(e) => {
                let _ = writeln!(out, "{}: {e}", at.display());
                continue;
            }
        };
        for entry in entries.flatten() {
            if files.len() >= FILES_LISTED_MAX {
                break;
            }
            let path = entry.path();
            match entry.metadata() {
                Ok(meta) if meta.is_dir() => pending.push(path),
                Ok(meta) => files.push((path, meta.len())),
                Err(e) => {
                    let _ = writeln!(out, "{}: {e}", path.display());
                }
            }
        }
    }
    files.sort();
    for (path, len) in &files {
        let shown = path.strip_prefix(dir).unwrap_or(path);
        let _ = writeln!(out, "{len:>14}  {}", shown.display());
    }
    if files.len() >= FILES_LISTED_MAX {
        let _ = writeln!(out, "(listing stopped at {FILES_LISTED_MAX} files)");
    }
    out
}

/// What `program args` printed, or why it could not run.
fn command(program: &str, args: &[&str]) -> String {
    match std::process::Command::new(program).args(args).output() {
        Ok(output) => {
            let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
            if !output.status.success() {
                let _ = write!(
                    text,
                    "\n{program} exited with {}: {}",
                    output.status,
                    String::from_utf8_lossy(&output.stderr)
                );
            }
            if text.len() > OUTPUT_BYTES_MAX {
                let mut cut = OUTPUT_BYTES_MAX;
                while !text.is_char_boundary(cut) {
                    cut -= 1;
                }
                text.truncate(cut);
                text.push_str("\n(cut)\n");
            }
            text
        }
        Err(e) => format!("{program} {}: {e}\n", args.join(" ")),
    }
}
