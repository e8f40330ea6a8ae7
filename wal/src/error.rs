//! Errors of the WAL: boot refusals (each its own variant, naming file and offset) and the
//! refusals of the running log.

use std::path::PathBuf;

use crate::frontier::SlotError;
use crate::scan::StopReason;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WalError {
    #[error("{dir}: history without its frontier: WAL files {files:?} but no frontier file")]
    HistoryWithoutFrontier { dir: PathBuf, files: Vec<String> },
    #[error(
        "{path}: both frontier slots are unusable: slot 0: {}; slot 1: {}",
        slots[0],
        slots[1]
    )]
    FrontierUnreadable {
        path: PathBuf,
        /// Why each slot is unusable (boxed: every `Result` of the log carries this type).
        slots: Box<[SlotError; 2]>,
    },
    #[error("{path}: frontier slot {slot} (offset {offset}): {error}")]
    FrontierRefused {
        path: PathBuf,
        slot: usize,
        offset: u64,
        error: SlotError,
    },
    #[error("{path}: carried ring record {record} (offset {offset}): {error}")]
    CarriedRefused {
        path: PathBuf,
        record: usize,
        offset: u64,
        error: SlotError,
    },
    #[error("{path}: the frontier belongs to group {found:#x}, expected {expected:#x}")]
    GroupMismatch {
        path: PathBuf,
        expected: u128,
        found: u128,
    },
    #[error(
        "{file}: lost published bytes: the file is {len} bytes, the frontier publishes {published_length}"
    )]
    LostPublishedBytes {
        file: PathBuf,
        len: u64,
        published_length: u64,
    },
    #[error("{file}: lost published file: the frontier's head op {head_op} lives in it")]
    LostPublishedFile { file: PathBuf, head_op: u64 },
    #[error(
        "{file}: the entry at offset {offset} has header version {version}; this build reads \
         version {current} only (version 1 logs predate the replicated header)",
        current = iggy_format::header::HEADER_VERSION
    )]
    UnknownEntryVersion {
        file: PathBuf,
        offset: u64,
        version: u16,
    },
    #[error("{file}: published entry at offset {offset} is damaged: {reason}")]
    Corrupt {
        file: PathBuf,
        offset: u64,
        reason: StopReason,
    },
    #[error(
        "{file}: the published prefix ends at offset {end} with checksum {checksum:#034x}, but the frontier names op {head_op} ending at {published_length} with {head_checksum:#034x}"
    )]
    HeadMismatch {
        file: PathBuf,
        head_op: u64,
        end: u64,
        published_length: u64,
        checksum: u128,
        head_checksum: u128,
    },
    #[error("{file}: hole in the log: the file starts at op {found}, the previous file ends at op {expected_minus_one}", expected_minus_one = expected - 1)]
    Hole {
        file: PathBuf,
        expected: u64,
        found: u64,
    },
    #[error(
        "{file}: a file past the published frontier whose first entry (op {first_op} of group \
         {group:#x}) this log did not write after its published head op {head_op}: it is not \
         an unpublished tail (copied in from another log?); move it away"
    )]
    ForeignFile {
        file: PathBuf,
        first_op: u64,
        group: u128,
        head_op: u64,
    },
    #[error("{dir}: a log already exists")]
    AlreadyExists { dir: PathBuf },
    #[error("{dir}: a new file's key {key} does not exceed the last file's key {last_key}")]
    KeyNotIncreasing {
        dir: PathBuf,
        key: u64,
        last_key: u64,
    },
    #[error(
        "{dir}: poisoned by an earlier failed write or sync ({cause}); reopen to recover from disk"
    )]
    Poisoned { dir: PathBuf, cause: String },
    #[error(
        "{dir}: back-pressure: {unpublished_bytes} bytes unpublished, budget {budget_bytes}: publish first"
    )]
    Backpressure {
        dir: PathBuf,
        unpublished_bytes: u64,
        budget_bytes: u64,
    },
    #[error("append of op {found}: the head is op {head}, so the next op is {}", head + 1)]
    OpGap { head: u64, found: u64 },
    #[error("append of op {op}: conflicts with the entry already at that op")]
    Conflict { op: u64 },
    #[error(
        "append of op {op}: parent {parent:#034x} is not the head's checksum {head_checksum:#034x}"
    )]
    ParentMismatch {
        op: u64,
        parent: u128,
        head_checksum: u128,
    },
    #[error("append of op {op}: {reason}")]
    BadEntry { op: u64, reason: &'static str },
    #[error("{what}: op {op} is outside the log [{first_op}, {head_op}]")]
    OutOfRange {
        what: &'static str,
        op: u64,
        first_op: u64,
        head_op: u64,
    },
    #[error(transparent)]
    Io(#[from] iggy_io::Error),
}

// Every `Result` of the log carries a `WalError`: keep it small (box large payloads).
const _: () = assert!(size_of::<WalError>() <= 96);
