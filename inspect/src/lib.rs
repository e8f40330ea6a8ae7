//! `iggy-inspect`: decodes any file of a node for people debugging formats. It never writes (the
//! storage it opens is a `ReadOnly`, so writing does not type-check), decodes as much as it can
//! from damaged input, shows damaged bytes as a hexdump with offsets, names the kind of a file
//! given to the wrong command by its magic, and prints JSON with `--json`.
//!
//! Exit codes: 0 everything inspected verifies; 1 it is the kind asked for, but part of it does
//! not verify (shown), or boot would change or refuse it (`wal`, `node`); 2 not a file of that
//! kind (its magic names another, or none); 8 usage or I/O error.

use std::io::Write;
use std::path::{Path, PathBuf};

mod partition;

pub use partition::{decode_index, decode_log, decode_segment};

use clap::{CommandFactory, Parser, Subcommand};
use iggy_io::{OsStorage, ReadFile, ReadOnly, ReadStorage};
use serde_json::{Value, json};

/// The exit codes, as `-h` and `--help` print them.
const EXIT_CODES: &str = "\
Exit codes:
  0  everything inspected verifies
  1  it is the kind of file asked for, but part of it does not verify (shown, with its bytes),
     or boot would change or refuse it (wal, node)
  2  not a file of that kind: the magic it starts with names another kind (or none)
  8  usage or I/O error";

/// Read-only decoder of the files of an iggy node.
#[derive(Parser, Debug)]
#[command(
    name = "iggy-inspect",
    version,
    about,
    long_about = None,
    after_help = EXIT_CODES,
    arg_required_else_help = true
)]
pub struct Cli {
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// Print a completion script for this shell and exit.
    #[arg(long, value_name = "SHELL", exclusive = true)]
    pub completions: Option<clap_complete::Shell>,
    /// Print the man page (roff) and exit.
    #[arg(long, exclusive = true)]
    pub man: bool,
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// A superblock file: both copies field by field, which one boot picks and why.
    Superblock {
        /// Path to a `superblock` file.
        file: PathBuf,
    },
    /// A WAL frontier file: both slots, and which one boot trusts.
    Frontier {
        /// Path to a `frontier` file.
        file: PathBuf,
    },
    /// A WAL directory: what boot would trust, discard or refuse (the same analysis boot runs),
    /// and per file the trusted prefix (frontier) against the prefix that verifies and the last
    /// non-zero byte.
    Wal {
        /// Path to the directory holding `frontier` and the `.wal` (or keyed `.log`) files.
        dir: PathBuf,
        /// List every entry of every file (op, size, checksums, parent link).
        #[arg(long)]
        entries: bool,
    },
    /// A snapshot.bin: its header, trailer verdict and, for a metadata payload, a summary.
    Snapshot {
        /// Path to a `snapshot.bin` file.
        file: PathBuf,
    },
    /// A partition segment (`{offset:020}.log`): every entry's WAL header and body checksum,
    /// batch offsets, timestamps and message checksums; where and why decoding stops.
    Segment {
        /// Path to a `.log` file.
        file: PathBuf,
        /// List every message with its offset, id and a payload preview.
        #[arg(long)]
        messages: bool,
    },
    /// A segment's sparse index (`{offset:020}.index`): its entries, each checked against the
    /// `.log` beside it.
    Index {
        /// Path to a `.index` file.
        file: PathBuf,
    },
    /// A consumer offset file (`offsets/consumer.N` or `offsets/group.N` in a partition): both
    /// slots field by field, and which one the partition reads as its offset and why.
    Offsets {
        /// Path to an offset file.
        file: PathBuf,
    },
    /// A partition's rebuild marker (`rebuilt-from-peers`): the views through which the replica
    /// of a partition rebuilt from its peers after damage forgot what it acknowledged.
    Rebuilt {
        /// Path to a `rebuilt-from-peers` file.
        file: PathBuf,
    },
    /// A whole node directory: boot's verdict on every group (what `iggy-fsck` reports) and each
    /// partition's segments.
    Node {
        /// The node's data directory (holding `metadata/` and `partitions/`).
        dir: PathBuf,
    },
    /// The compiled layout: sizes, versions and defaults of every format.
    Constants,
}

/// Reads a whole file read-only; the error names the path.
pub(crate) fn read_file(path: &Path) -> Result<Vec<u8>, String> {
    open_file(path)?
        .read_all()
        .map_err(|e| as_given(e, path.parent()))
}

fn open_file(path: &Path) -> Result<<ReadOnly<OsStorage> as ReadStorage>::Reader, String> {
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| format!("{}: not a file path", path.display()))?;
    // A missing directory names the file asked for, then the directory that failed.
    let storage =
        ReadOnly::new(OsStorage::open(parent).map_err(|e| format!("{}: {e}", path.display()))?);
    storage
        .open_read(name)
        .map_err(|e| as_given(e, path.parent()))
}

/// An error on a file opened relative to `parent` (the directory of the path on the command
/// line), naming the file as the user gave it.
fn as_given(mut error: iggy_io::Error, parent: Option<&Path>) -> String {
    if let Some(parent) = parent {
        error.path = parent.join(&error.path);
    }
    error.to_string()
}

/// A file's bytes: mapped read-only where the file system allows, so that a 1 GiB segment
/// costs page cache, not a 1 GiB allocation; read into memory otherwise. Mapping is safe for the
/// files it is used on (segments and indexes): nothing in a node ever shrinks them; retention
/// and installs unlink or rename, which leaves a mapping valid.
pub(crate) enum FileBytes {
    Mapped(iggy_io::Mapping),
    Read(Vec<u8>),
}

impl std::ops::Deref for FileBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Self::Mapped(map) => map,
            Self::Read(bytes) => bytes,
        }
    }
}

impl FileBytes {
    /// The bytes of `file`: mapped where the storage can, read otherwise.
    pub(crate) fn of(file: &impl ReadFile) -> Result<Self, String> {
        Ok(match file.map().map_err(|e| e.to_string())? {
            Some(map) => Self::Mapped(map),
            None => Self::Read(file.read_all().map_err(|e| e.to_string())?),
        })
    }
}

pub(crate) fn map_file(path: &Path) -> Result<FileBytes, String> {
    FileBytes::of(&open_file(path)?)
}

/// A hexdump of `bytes`, offsets counted from `base`.
#[must_use]
pub fn hexdump(bytes: &[u8], base: u64) -> String {
    let mut out = String::new();
    for (index, line) in bytes.chunks(16).enumerate() {
        let hex: Vec<String> = line.iter().map(|b| format!("{b:02x}")).collect();
        let text: String = line
            .iter()
            .map(|&b| if b.is_ascii_graphic() { b as char } else { '.' })
            .collect();
        out.push_str(&format!(
            "  {:08x}  {:<47}  {text}\n",
            base + index as u64 * 16,
            hex.join(" ")
        ));
    }
    out
}

pub(crate) fn hex128(value: u128) -> String {
    format!("{value:#034x}")
}

/// How what was inspected stands: the exit code's meaning.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    /// Everything verifies (exit 0).
    Verified,
    /// The right kind, but part of it does not verify, or boot would change it (exit 1).
    Damaged,
    /// Not a file of this kind (exit 2).
    WrongKind,
}

impl Verdict {
    #[must_use]
    pub fn exit_code(self) -> u8 {
        match self {
            Self::Verified => 0,
            Self::Damaged => 1,
            Self::WrongKind => 2,
        }
    }
}

/// What one command produced: the JSON, the text, and the verdict.
pub(crate) struct Inspected {
    pub value: Value,
    pub text: String,
    pub verdict: Verdict,
}

/// The kind of node file `bytes` look like, by the magic each kind starts with: the command
/// that reads it, and where the magic was found. `None`: no magic this build knows.
#[must_use]
pub fn sniff(bytes: &[u8]) -> Option<(&'static str, String)> {
    let magic_at = |offset: usize, magic: u64| {
        bytes
            .get(offset..offset + 8)
            .is_some_and(|b| b == magic.to_le_bytes())
    };
    let named = |command: &'static str, offset: usize, magic: u64| {
        let text = String::from_utf8_lossy(&magic.to_le_bytes()).into_owned();
        Some((command, format!("magic \"{text}\" at offset {offset}")))
    };
    if magic_at(32, iggy_superblock::copy::MAGIC) {
        return named("superblock", 32, iggy_superblock::copy::MAGIC);
    }
    if magic_at(32, iggy_wal::frontier::MAGIC) {
        return named("frontier", 32, iggy_wal::frontier::MAGIC);
    }
    if magic_at(0, iggy_snapshot::MAGIC) {
        return named("snapshot", 0, iggy_snapshot::MAGIC);
    }
    if magic_at(16, iggy_segments::index::MAGIC) {
        return named("index", 16, iggy_segments::index::MAGIC);
    }
    if magic_at(16, iggy_segments::offsets::MAGIC) {
        return named("offsets", 16, iggy_segments::offsets::MAGIC);
    }
    let rebuilt = u64::from_le_bytes(*iggy_segments::rebuilt::MAGIC);
    if magic_at(0, rebuilt) {
        return named("rebuilt", 0, rebuilt);
    }
    let header = bytes.get(..iggy_format::constants::HEADER_SIZE)?;
    iggy_format::Header::decode(header)
        .ok()
        .map(|_| ("segment", "a WAL entry header at offset 0".to_string()))
}

/// The verdict on a file that did not decode as `wanted`: another kind when its magic says so
/// (with the words that say which), else damage.
pub(crate) fn misread(bytes: &[u8], wanted: &str, text: &mut String) -> Verdict {
    match sniff(bytes) {
        Some((kind, evidence)) if kind != wanted => {
            let hint = format!("try `iggy-inspect {kind}`");
            text.push_str(&format!(
                "not a {wanted} file: it looks like a {kind} file ({evidence}); {hint}\n"
            ));
            Verdict::WrongKind
        }
        _ => Verdict::Damaged,
    }
}

/// A batch or index timestamp (microseconds since the Unix epoch) as RFC 3339, UTC.
#[must_use]
pub fn timestamp_text(micros: u64) -> String {
    std::time::UNIX_EPOCH
        .checked_add(std::time::Duration::from_micros(micros))
        .map_or_else(
            || format!("{micros} us"),
            |at| humantime::format_rfc3339_micros(at).to_string(),
        )
}

/// Runs the command line (completions, man page, or one command), writing to `out`; returns
/// the exit code (see [`Verdict`]). `Err`: usage or I/O error (exit 8).
pub fn run(cli: &Cli, out: &mut dyn Write) -> Result<u8, String> {
    if let Some(shell) = cli.completions {
        clap_complete::generate(shell, &mut Cli::command(), "iggy-inspect", out);
        return Ok(0);
    }
    if cli.man {
        clap_mangen::Man::new(Cli::command())
            .render(out)
            .map_err(|e| e.to_string())?;
        return Ok(0);
    }
    let Some(command) = &cli.command else {
        return Err("a command is required (see --help)".into());
    };
    let inspected = match command {
        Command::Superblock { file } => superblock(file)?,
        Command::Frontier { file } => frontier(file)?,
        Command::Wal { dir, entries } => wal(dir, *entries)?,
        Command::Snapshot { file } => snapshot(file)?,
        Command::Rebuilt { file } => rebuilt(file)?,
        Command::Offsets { file } => offsets(file)?,
        Command::Segment { file, messages } => partition::segment(file, *messages)?,
        Command::Index { file } => partition::index_file(file)?,
        Command::Node { dir } => partition::node(dir)?,
        Command::Constants => constants(),
    };
    let written = if cli.json {
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&inspected.value).map_err(|e| e.to_string())?
        )
    } else {
        write!(out, "{}", inspected.text)
    };
    match written {
        // `| head` closed the pipe: what was wanted has been printed.
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => {}
        other => other.map_err(|e| e.to_string())?,
    }
    Ok(inspected.verdict.exit_code())
}

fn superblock(path: &Path) -> Result<Inspected, String> {
    use iggy_superblock::copy::{self, COPY_SIZE, Slot};
    let bytes = read_file(path)?;
    let mut text = format!("superblock {} ({} bytes)\n", path.display(), bytes.len());
    let mut copies = Vec::new();
    let mut identity = None;
    let mut verdict = Verdict::Verified;
    for slot in Slot::ALL {
        let start = usize::try_from(slot.offset()).unwrap_or(usize::MAX);
        let region = bytes.get(start..).unwrap_or(&[]);
        match copy::decode(region, slot) {
            Ok((record, checksum)) => {
                identity.get_or_insert(record.identity);
                let state = record.state;
                text.push_str(&format!(
                    "copy {slot} (offset {start}): valid, sequence {}, checksum {}, parent {}\n  \
                     cluster {:#x} replica {}/{}; view {} log_view {} commit_max {} checkpoint {} ({}) \
                     offset_frontier {} incarnation {}\n",
                    record.sequence,
                    hex128(checksum),
                    hex128(record.parent),
                    record.identity.cluster,
                    record.identity.replica,
                    record.identity.replica_count,
                    state.view,
                    state.log_view,
                    state.commit_max,
                    state.checkpoint_op,
                    hex128(state.checkpoint_checksum),
                    state.offset_frontier,
                    state.incarnation,
                ));
                copies.push(json!({
                    "copy": slot.to_string(), "offset": start, "valid": true,
                    "sequence": record.sequence, "checksum": hex128(checksum),
                    "parent": hex128(record.parent), "cluster": format!("{:#x}", record.identity.cluster),
                    "replica": record.identity.replica, "replica_count": record.identity.replica_count,
                    "view": state.view, "log_view": state.log_view, "commit_max": state.commit_max,
                    "checkpoint_op": state.checkpoint_op,
                    "checkpoint_checksum": hex128(state.checkpoint_checksum),
                    "offset_frontier": state.offset_frontier, "incarnation": state.incarnation,
                }));
            }
            Err(error) => {
                verdict = Verdict::Damaged;
                let shown = &region[..region.len().min(160)];
                text.push_str(&format!(
                    "copy {slot} (offset {start}): {error}\n{}",
                    hexdump(shown, start as u64)
                ));
                copies.push(json!({
                    "copy": slot.to_string(), "offset": start, "valid": false,
                    "error": error.to_string(), "bytes": region.len().min(COPY_SIZE),
                }));
            }
        }
    }
    if identity.is_none() {
        verdict = misread(&bytes, "superblock", &mut text);
    }
    // What boot decides, through the very function boot calls.
    let dir = path.parent().unwrap_or(Path::new("."));
    let boot = match identity {
        None => "refuse: no copy is valid".to_string(),
        Some(identity) => {
            let parent = dir
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            let storage = ReadOnly::new(OsStorage::open(parent).map_err(|e| e.to_string())?);
            let group = dir.file_name().map_or_else(PathBuf::new, PathBuf::from);
            match iggy_superblock::read(&storage, &group, &identity) {
                Ok(iggy_superblock::Opened::Present {
                    record, repairs, ..
                }) => {
                    let repairs: Vec<String> = repairs.iter().map(ToString::to_string).collect();
                    format!(
                        "boot uses sequence {}; repairs: {}",
                        record.sequence,
                        if repairs.is_empty() {
                            "none".into()
                        } else {
                            repairs.join(", ")
                        }
                    )
                }
                Ok(iggy_superblock::Opened::Fresh) => "fresh".into(),
                Err(error) => {
                    verdict = verdict.max(Verdict::Damaged);
                    format!("refuse: {error}")
                }
            }
        }
    };
    text.push_str(&format!("boot: {boot}\n"));
    Ok(Inspected {
        value: json!({ "file": path.display().to_string(), "copies": copies, "boot": boot }),
        text,
        verdict,
    })
}

fn frontier(path: &Path) -> Result<Inspected, String> {
    use iggy_wal::frontier::{self, SLOT_SIZE};
    let bytes = read_file(path)?;
    let mut verdict = Verdict::Verified;
    let mut text = format!("frontier {} ({} bytes)\n", path.display(), bytes.len());
    let decoded = frontier::decode_file(&bytes);
    let mut slots = Vec::new();
    for (slot, result) in decoded.iter().enumerate() {
        let start = slot * SLOT_SIZE;
        let region = bytes.get(start..).unwrap_or(&[]);
        match result {
            Ok(f) => {
                text.push_str(&format!(
                    "slot {slot} (offset {start}): sequence {} generation {} group {:#x} incarnation {}\n  \
                     head op {} checksum {} in the file keyed {:020} (first op {}), published length {}\n",
                    f.sequence, f.generation, f.group, f.incarnation, f.head_op,
                    hex128(f.head_checksum), f.head_file_key, f.head_file, f.published_length
                ));
                slots.push(json!({
                    "slot": slot, "valid": true, "sequence": f.sequence, "generation": f.generation,
                    "group": format!("{:#x}", f.group), "incarnation": f.incarnation,
                    "head_op": f.head_op, "head_checksum": hex128(f.head_checksum),
                    "head_file": f.head_file, "head_file_key": f.head_file_key,
                    "published_length": f.published_length,
                }));
            }
            Err(error) => {
                verdict = Verdict::Damaged;
                let shown = &region[..region.len().min(160)];
                text.push_str(&format!(
                    "slot {slot} (offset {start}): {error}\n{}",
                    hexdump(shown, start as u64)
                ));
                slots.push(json!({ "slot": slot, "valid": false, "error": error.to_string() }));
            }
        }
    }
    if decoded.iter().all(Result::is_err) {
        verdict = misread(&bytes, "frontier", &mut text);
    }
    let ring = iggy_wal::carried::decode_ring(&bytes);
    let mut records = Vec::new();
    for (record, result) in ring.records.iter().enumerate() {
        let Some(result) = result else { continue };
        let start = iggy_wal::ring::offset(record);
        match result {
            Ok(c) => {
                let entries = iggy_wal::carried::carried_entries(&c.entries);
                let f = &c.frontier;
                let carries = match entries {
                    0 => {
                        "carries no entries (nothing new since the publication before)".to_string()
                    }
                    n => format!(
                        "carries {n} {} (ops {}..={}, {} bytes at offset {})",
                        if n == 1 { "entry" } else { "entries" },
                        f.head_op + 1 - n,
                        f.head_op,
                        c.entries.len(),
                        c.log_offset()
                    ),
                };
                text.push_str(&format!(
                    "ring record {record} (offset {start}): sequence {} head op {} in the file keyed \
                     {:020}, published length {}; {carries}; log synced through publication {}\n",
                    f.sequence, f.head_op, f.head_file_key, f.published_length, c.synced_sequence
                ));
                records.push(json!({
                    "record": record, "offset": start, "valid": true, "sequence": f.sequence,
                    "generation": f.generation, "head_op": f.head_op,
                    "head_file_key": f.head_file_key, "published_length": f.published_length,
                    "carried_entries": entries, "carried_bytes": c.entries.len(),
                    "carried_first_op": f.head_op + 1 - entries, "log_offset": c.log_offset(),
                    "synced_sequence": c.synced_sequence,
                }));
            }
            Err(error) => {
                // A torn or stale record is normal in a ring; boot says whether it matters.
                let at = usize::try_from(start).unwrap_or(usize::MAX);
                let shown = bytes.get(at..).unwrap_or(&[]);
                text.push_str(&format!(
                    "ring record {record} (offset {start}): {error}\n{}",
                    hexdump(&shown[..shown.len().min(160)], start)
                ));
                records.push(json!({
                    "record": record, "offset": start, "valid": false, "error": error.to_string(),
                }));
            }
        }
    }
    let mut repairs = Vec::new();
    let chosen = iggy_wal::boot::choose_frontier(path, decoded, &mut repairs)
        .and_then(|(f, _)| iggy_wal::carried::choose(path, f, &ring, &mut repairs));
    let boot = match chosen {
        Ok((f, carried)) => {
            let mut boot = format!(
                "boot trusts sequence {} (head op {})",
                f.sequence, f.head_op
            );
            if let (Some(first), Some(last)) = (carried.first(), carried.last()) {
                boot.push_str(&format!(
                    ", carried: it relies on the ring records of publications {}..={}",
                    first.frontier.sequence, last.frontier.sequence
                ));
            }
            for finding in &repairs {
                let finding = iggy_recovery::wal_finding("", finding);
                boot.push_str(&format!("; {} -> {}", finding.what, finding.action.name()));
            }
            boot
        }
        Err(error) => format!("refuse: {error}"),
    };
    text.push_str(&format!("boot: {boot}\n"));
    Ok(Inspected {
        value: json!({
            "file": path.display().to_string(), "slots": slots, "ring": records, "boot": boot,
        }),
        text,
        verdict,
    })
}

/// Which ring records carry entries boot relies on (publications since the log was last
/// synced), one line each.
fn carried_in_use(frontier_path: &Path, bytes: &[u8]) -> Vec<String> {
    let slots = iggy_wal::frontier::decode_file(bytes);
    let ring = iggy_wal::carried::decode_ring(bytes);
    let Ok((slot, _)) = iggy_wal::boot::choose_frontier(frontier_path, slots, &mut Vec::new())
    else {
        return Vec::new();
    };
    let Ok((_, carried)) = iggy_wal::carried::choose(frontier_path, slot, &ring, &mut Vec::new())
    else {
        return Vec::new();
    };
    carried
        .iter()
        .map(|c| {
            let entries = iggy_wal::carried::carried_entries(&c.entries);
            let [a, b] = iggy_wal::ring::records_of(c.frontier.sequence);
            format!(
                "publication {} carries ops {}..={} in ring records {a} and {b}: {} bytes for the \
                 file keyed {:020} at offset {} (the log's copy is not synced yet: boot writes \
                 it back if it was lost)",
                c.frontier.sequence,
                c.frontier.head_op + 1 - entries,
                c.frontier.head_op,
                c.entries.len(),
                c.frontier.head_file_key,
                c.log_offset()
            )
        })
        .collect()
}

fn wal(dir: &Path, list_entries: bool) -> Result<Inspected, String> {
    // The group is the one named by the frontier slot boot would choose: inspect checks the log
    // against itself.
    let frontier_path = dir.join(iggy_wal::boot::FRONTIER_FILE);
    let bytes = read_file(&frontier_path)?;
    let slots = iggy_wal::frontier::decode_file(&bytes);
    let parent = dir
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = dir.file_name().map_or_else(PathBuf::new, PathBuf::from);
    let storage = ReadOnly::new(OsStorage::open(parent).map_err(|e| e.to_string())?);
    let mut text = format!("wal {}\n", dir.display());
    // A partition's log is keyed (its files are `.log` segments); a group's is by op.
    let keyed = storage.list_dir(&name).is_ok_and(|entries| {
        entries
            .iter()
            .any(|e| iggy_wal::Naming::ByKey.parse(&e.name).is_some())
    });
    let naming = if keyed {
        iggy_wal::Naming::ByKey
    } else {
        iggy_wal::Naming::ByOp
    };
    let checked = match iggy_wal::boot::choose_frontier(&frontier_path, slots, &mut Vec::new()) {
        Ok((frontier, _)) => iggy_wal::check_named(&storage, &name, frontier.group, naming)
            .map(|report| (frontier.group, report)),
        Err(refusal) => Err(refusal),
    };
    let mut verdict = Verdict::Verified;
    let report = match checked {
        Ok((_, None)) => json!({ "dir": dir.display().to_string(), "verdict": "fresh" }),
        Ok((group, Some(report))) => {
            text.push_str(&format!(
                "boot trusts ops {}..={} ({} bytes, {} of them from seals); discards {} bytes\n",
                report.first_op,
                report.head_op,
                report.durable_bytes,
                report.sealed_bytes,
                report.discarded_bytes
            ));
            if !report.is_clean() {
                verdict = Verdict::Damaged;
            }
            let carried = carried_in_use(&frontier_path, &bytes);
            for line in &carried {
                text.push_str(&format!("  {line}\n"));
            }
            let spares: Vec<String> = report
                .spares
                .iter()
                .map(|path| path.display().to_string())
                .collect();
            for spare in &spares {
                text.push_str(&format!(
                    "  {spare}: a spare (a retired file kept for reuse: the next file the log \
                     needs is one renamed; its bytes are an earlier use's, not the log's)\n"
                ));
            }
            // In the words and actions of iggy-fsck.
            let findings: Vec<Value> = report
                .findings
                .iter()
                .map(|f| {
                    let finding = iggy_recovery::wal_finding("", f);
                    text.push_str(&format!(
                        "  {} at offset {} ({} bytes): {} -> {}\n",
                        f.file.display(),
                        f.offset,
                        f.bytes,
                        finding.what,
                        finding.action.name()
                    ));
                    json!({
                        "file": f.file.display().to_string(), "offset": f.offset, "bytes": f.bytes,
                        "kind": finding.kind, "what": finding.what, "action": finding.action,
                    })
                })
                .collect();
            let files = wal_files(
                &storage,
                &name,
                naming,
                Some(&report),
                list_entries,
                &mut text,
            )?;
            json!({
                "dir": dir.display().to_string(), "group": format!("{group:#x}"),
                "first_op": report.first_op, "head_op": report.head_op,
                "durable_bytes": report.durable_bytes, "discarded_bytes": report.discarded_bytes,
                "sealed_bytes": report.sealed_bytes, "findings": findings, "files": files, "carried": carried,
                "spares": spares,
            })
        }
        Err(error) => {
            verdict = Verdict::Damaged;
            text.push_str(&format!("boot refuses: {error}\n"));
            // What each file holds is what the reader of a refusal needs next.
            let files = wal_files(&storage, &name, naming, None, list_entries, &mut text)?;
            json!({ "dir": dir.display().to_string(), "refusal": error.to_string(), "files": files })
        }
    };
    Ok(Inspected {
        value: report,
        text,
        verdict,
    })
}

/// Per file of the log: the prefix the frontier vouches for (what boot trusts; unknown when boot
/// refuses, `report` `None`), the prefix that verifies, and the last non-zero byte; with
/// `list_entries`, every entry.
fn wal_files(
    storage: &ReadOnly<OsStorage>,
    dir: &Path,
    naming: iggy_wal::Naming,
    report: Option<&iggy_wal::Report>,
    list_entries: bool,
    text: &mut String,
) -> Result<Vec<Value>, String> {
    let mut files = Vec::new();
    for entry in storage.list_dir(dir).map_err(|e| e.to_string())? {
        if naming.parse(&entry.name).is_none() {
            continue;
        }
        if entry.kind != iggy_io::EntryKind::File {
            // Named like a log file, but a directory or a FIFO: never opened (boot skips it).
            text.push_str(&format!(
                "  {}: not a regular file; not read\n",
                entry.name.to_string_lossy()
            ));
            continue;
        }
        let path = dir.join(&entry.name);
        let file = storage.open_read(&path).map_err(|e| e.to_string())?;
        let bytes = FileBytes::of(&file)?;
        let (decoded, listing) = partition::decode_log(&bytes, false, false);
        // Boot trusts nothing of a file the report does not list.
        let trusted = report.map(|report| {
            report
                .files
                .iter()
                .find(|f| f.path == path)
                .map_or((0, 0), |f| (f.entries, f.end))
        });
        let vouched = match trusted {
            Some((entries, end)) => format!("frontier vouches for {entries} entries to byte {end}"),
            None => "boot trusts nothing (it refuses)".to_string(),
        };
        text.push_str(&format!(
            "  {}: {vouched}; {} entries verify to byte {}; last non-zero byte ends at {}\n",
            entry.name.to_string_lossy(),
            decoded["valid_entries"],
            decoded["valid_end"],
            decoded["seen_end"],
        ));
        let seal = seal_of(storage, &path, &decoded);
        if let Some(line) = seal["text"].as_str() {
            text.push_str(&format!("    {line}\n"));
        }
        let (trusted_entries, trusted_end) = trusted.unzip();
        if list_entries {
            for line in listing.lines() {
                text.push_str(&format!("    {line}\n"));
            }
        }
        files.push(json!({
            "file": entry.name.to_string_lossy(), "trusted_entries": trusted_entries,
            "trusted_end": trusted_end, "valid_entries": decoded["valid_entries"],
            "valid_end": decoded["valid_end"], "seen_end": decoded["seen_end"],
            "entries": if list_entries { decoded["entries"].clone() } else { Value::Null },
            "seal": seal,
        }));
    }
    Ok(files)
}

/// What the seal beside a log file at `path` says (`docs/format.md`, "Seals"), against what the
/// file's own entries (`decoded`) verify to: `null` without a seal.
fn seal_of(storage: &ReadOnly<OsStorage>, path: &Path, decoded: &Value) -> Value {
    let seal_path = iggy_wal::seal::path_for(path);
    let Ok(bytes) = storage.open_read(&seal_path).and_then(|f| f.read_all()) else {
        return Value::Null;
    };
    match iggy_wal::seal::decode(&bytes) {
        Ok(seal) => {
            let entries = seal.offsets.len() as u64;
            let agrees = decoded["valid_entries"].as_u64() == Some(entries)
                && decoded["valid_end"].as_u64() == Some(seal.end);
            json!({
                "file": seal_path.display().to_string(), "valid": true, "entries": entries,
                "end": seal.end, "first_op": seal.first_op,
                "first_parent": hex128(seal.first_parent),
                "last_checksum": hex128(seal.last_checksum), "agrees": agrees,
                "text": format!(
                    "sealed: {entries} entries (ops {}..) to byte {}, last checksum {}; {}",
                    seal.first_op,
                    seal.end,
                    hex128(seal.last_checksum),
                    if agrees {
                        "agrees with the file (boot takes the file from its seal if it links)"
                    } else {
                        "disagrees with what the file verifies to (boot scans the file)"
                    }
                ),
            })
        }
        Err(error) => json!({
            "file": seal_path.display().to_string(), "valid": false,
            "error": error.to_string(),
            "text": format!("seal unusable ({error}): boot scans the file"),
        }),
    }
}

/// What a consumer offset record means, in words.
fn offset_meaning(record: &iggy_segments::offsets::ConsumerOffset) -> String {
    use iggy_segments::offsets::DELETED;
    match (record.sequence, record.offset) {
        (0, _) => "no offset yet (the placeholder made when its first store was journaled)".into(),
        (_, DELETED) => "no offset (deleted: a DeleteConsumerOffset's tombstone)".into(),
        (_, offset) => format!("offset {offset}"),
    }
}

fn offsets(path: &Path) -> Result<Inspected, String> {
    use iggy_segments::offsets::{self, FILE_SIZE, LEGACY_FILE_SIZE, RECORD_SIZE, Slot};
    let bytes = read_file(path)?;
    let mut verdict = Verdict::Verified;
    let mut text = format!("offsets {} ({} bytes)\n", path.display(), bytes.len());
    let slots: Vec<Slot> = if bytes.len() == LEGACY_FILE_SIZE {
        text.push_str("version 2: one record\n");
        match offsets::decode(path, &bytes) {
            Ok(record) => vec![Slot::Record(record)],
            Err(error) => vec![Slot::Damaged(error.to_string())],
        }
    } else {
        text.push_str("version 3: two slots, written in turn\n");
        if bytes.len() != FILE_SIZE {
            verdict = Verdict::Damaged;
            text.push_str(&format!(
                "{} bytes, expected {FILE_SIZE} (two slots of {RECORD_SIZE}): the slots past the \
                 end are damaged\n",
                bytes.len()
            ));
        }
        offsets::decode_slots(path, &bytes).to_vec()
    };
    let mut json_slots = Vec::new();
    for (slot, decoded) in slots.iter().enumerate() {
        let start = slot * RECORD_SIZE;
        match decoded {
            Slot::Empty => {
                text.push_str(&format!(
                    "slot {slot} (offset {start}): empty (never written)\n"
                ));
                json_slots.push(json!({ "slot": slot, "state": "empty" }));
            }
            Slot::Record(r) => {
                text.push_str(&format!(
                    "slot {slot} (offset {start}): {} {}, {}, sequence {}, op {}\n",
                    r.kind.name(),
                    r.id,
                    offset_meaning(r),
                    r.sequence,
                    r.op
                ));
                json_slots.push(json!({
                    "slot": slot, "state": "record", "kind": r.kind.name(), "id": r.id,
                    "offset": r.offset, "sequence": r.sequence, "op": r.op,
                    "meaning": offset_meaning(r),
                }));
            }
            Slot::Damaged(reason) => {
                verdict = Verdict::Damaged;
                let region = bytes.get(start..).unwrap_or(&[]);
                text.push_str(&format!(
                    "slot {slot} (offset {start}): does not verify: {reason}\n{}",
                    hexdump(&region[..region.len().min(RECORD_SIZE)], start as u64)
                ));
                json_slots.push(json!({ "slot": slot, "state": "damaged", "error": reason }));
            }
        }
    }
    let chosen = match slots.as_slice() {
        [Slot::Record(record)] => Some((0, *record)),
        [first, second] => offsets::current(&[first.clone(), second.clone()]),
        _ => None,
    };
    let reads = match chosen {
        Some((slot, record)) => {
            let named = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let owner = offsets::file_name(record.kind, record.id);
            let mut line = format!(
                "reads as slot {slot}: {} {}, {} (sequence {}, op {})",
                record.kind.name(),
                record.id,
                offset_meaning(&record),
                record.sequence,
                record.op
            );
            if slots.len() == 2 {
                line.push_str(if slots.iter().all(|s| matches!(s, Slot::Record(_))) {
                    ", the higher sequence of the two"
                } else {
                    ", the one slot that verifies"
                });
            }
            if named != owner {
                verdict = Verdict::Damaged;
                line.push_str(&format!(
                    "; but the file is named {named}, not {owner}: the partition refuses it \
                     (a misdirected or renamed file)"
                ));
            }
            line
        }
        None => {
            verdict = misread(&bytes, "offsets", &mut text);
            "no slot verifies: the partition refuses the file (never read as offset 0)".into()
        }
    };
    text.push_str(&format!("{reads}\n"));
    Ok(Inspected {
        value: json!({
            "file": path.display().to_string(), "bytes": bytes.len(), "slots": json_slots,
            "reads_as": chosen.map(|(slot, _)| slot), "reads": reads,
        }),
        text,
        verdict,
    })
}

fn rebuilt(path: &Path) -> Result<Inspected, String> {
    let bytes = read_file(path)?;
    let mut text = format!(
        "rebuild marker {} ({} bytes)\n",
        path.display(),
        bytes.len()
    );
    match iggy_segments::rebuilt::Marker::decode(&bytes) {
        Ok(marker) => {
            text.push_str(&format!(
                "valid: a node's boot rebuilt this partition from its peers after damage, in view \
                 {}; its replica forgot what it acknowledged through view {}, so its log stands \
                 for no view-change quorum until it has started a later view or rejoined that one\n",
                marker.view, marker.forgotten_through
            ));
            Ok(Inspected {
                value: json!({
                    "file": path.display().to_string(), "valid": true,
                    "view": marker.view, "forgotten_through": marker.forgotten_through,
                }),
                text,
                verdict: Verdict::Verified,
            })
        }
        Err(error) => {
            text.push_str(&format!("does not verify: {error}\n"));
            let verdict = misread(&bytes, "rebuilt", &mut text);
            Ok(Inspected {
                value: json!({
                    "file": path.display().to_string(), "valid": false, "error": error,
                }),
                text,
                verdict,
            })
        }
    }
}

fn snapshot(path: &Path) -> Result<Inspected, String> {
    let bytes = read_file(path)?;
    let mut text = format!("snapshot {} ({} bytes)\n", path.display(), bytes.len());
    match iggy_snapshot::decode(&path.display().to_string(), &bytes) {
        Ok((header, payload)) => {
            text.push_str(&format!(
                "valid: checkpoint op {} ({}), payload version {}, {} payload bytes, trailer {}\n",
                header.checkpoint_op,
                hex128(header.checkpoint_checksum),
                header.payload_version,
                header.payload_length,
                hex128(iggy_snapshot::trailer(&bytes)),
            ));
            let summary = match iggy_metadata::codec::decode(header.payload_version, payload) {
                Ok(state) => {
                    let topics: usize = state.streams.values().map(|s| s.topics.len()).sum();
                    let groups: usize = state
                        .streams
                        .values()
                        .flat_map(|s| s.topics.values())
                        .map(|t| t.groups.len())
                        .sum();
                    text.push_str(&format!(
                        "metadata: {} streams, {topics} topics, {} partitions, {groups} consumer groups, {} clients\n",
                        state.streams.len(), state.partition_count, state.clients.len()
                    ));
                    json!({ "streams": state.streams.len(), "topics": topics,
                            "partitions": state.partition_count, "consumer_groups": groups,
                            "clients": state.clients.len() })
                }
                Err(error) => {
                    text.push_str(&format!("metadata payload does not decode: {error}\n"));
                    json!({ "error": error.to_string() })
                }
            };
            Ok(Inspected {
                value: json!({
                    "file": path.display().to_string(), "valid": true,
                    "checkpoint_op": header.checkpoint_op,
                    "checkpoint_checksum": hex128(header.checkpoint_checksum),
                    "payload_version": header.payload_version, "payload_length": header.payload_length,
                    "metadata": summary,
                }),
                text,
                verdict: if summary.get("error").is_some() {
                    Verdict::Damaged
                } else {
                    Verdict::Verified
                },
            })
        }
        Err(error) => {
            let shown = &bytes[..bytes.len().min(160)];
            text.push_str(&format!("invalid: {error}\n{}", hexdump(shown, 0)));
            let verdict = misread(&bytes, "snapshot", &mut text);
            Ok(Inspected {
                value: json!({ "file": path.display().to_string(), "valid": false, "error": error.to_string() }),
                text,
                verdict,
            })
        }
    }
}

fn constants() -> Inspected {
    let values = json!({
        "sector_size": iggy_format::constants::SECTOR_SIZE,
        "entry_header_size": iggy_format::constants::HEADER_SIZE,
        "entry_header_version": iggy_format::header::HEADER_VERSION,
        "consumer_offset_entry_body_size": iggy_segments::entry::CONSUMER_OFFSET_BODY_SIZE,
        "superblock_copy_size": iggy_superblock::copy::COPY_SIZE,
        "superblock_copies": iggy_superblock::copy::COPIES,
        "superblock_version": iggy_superblock::copy::VERSION,
        "frontier_slot_size": iggy_wal::frontier::SLOT_SIZE,
        "frontier_version": iggy_wal::frontier::VERSION,
        "wal_file_size_default": iggy_wal::Config::new(0).file_size_bytes,
        "wal_unpublished_bytes_max_default": iggy_wal::Config::new(0).unpublished_bytes_max,
        "snapshot_version": iggy_snapshot::VERSION,
        "snapshot_chunk_bytes_max": iggy_snapshot::transfer::CHUNK_BYTES_MAX,
        "metadata_payload_version": iggy_metadata::codec::PAYLOAD_VERSION,
        "metadata_checkpoint_interval_ops": iggy_metadata::group::CHECKPOINT_INTERVAL_OPS,
        "message_batch_header_size": iggy_format::batch::BATCH_HEADER_SIZE,
        "message_frame_header_size": iggy_format::batch::FRAME_HEADER_SIZE,
        "segment_index_header_size": iggy_segments::index::HEADER_SIZE,
        "segment_index_entry_size": iggy_segments::index::ENTRY_SIZE,
        "segment_index_version": iggy_segments::index::VERSION,
        "segment_size_default": iggy_segments::Config::new(0, 0, iggy_recovery::populate::identity()).segment_size_bytes,
        "segment_index_interval_default": iggy_segments::Config::new(0, 0, iggy_recovery::populate::identity()).index_interval_bytes,
        "consumer_offset_file_size": iggy_segments::offsets::FILE_SIZE,
        "consumer_offset_file_version": iggy_segments::offsets::VERSION,
        "metadata_reply_bytes_max": iggy_metadata::REPLY_BYTES_MAX,
        "metadata_clients_max": iggy_metadata::CLIENTS_MAX,
    });
    let mut text = String::new();
    if let Value::Object(map) = &values {
        for (key, value) in map {
            text.push_str(&format!("{key:<36} {value}\n"));
        }
    }
    Inspected {
        value: values,
        text,
        verdict: Verdict::Verified,
    }
}
