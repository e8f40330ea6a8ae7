//! The reads a `Check` makes without opening the log for writing: the trusted entries and
//! headers, verified, through a boot report's files and the carried entries it relies on (what
//! the metadata group's read-only restore replays). Re-exported from [`crate::boot`].

use iggy_format::Header;
use iggy_format::constants::HEADER_SIZE;
use iggy_io::{ReadFile, ReadStorage};

use crate::boot::{Report, corrupt};
use crate::error::WalError;
use crate::scan::{From, Scan, StopReason, scan};

/// The trusted entries `from..=to`, verified (headers, bodies, chain), read through `report`'s
/// files without opening the log for writing: what a `Check` replays where `Open` would read
/// through [`crate::Wal::read`].
pub fn read_entries<R: ReadStorage>(
    storage: &R,
    report: &Report,
    from: u64,
    to: u64,
) -> Result<Vec<crate::Entry>, WalError> {
    if from < report.first_op || to > report.head_op {
        return Err(WalError::OutOfRange {
            what: "read_entries",
            op: if from < report.first_op { from } else { to },
            first_op: report.first_op,
            head_op: report.head_op,
        });
    }
    let mut entries = Vec::new();
    for file in &report.files {
        let last = file.first_op + file.entries;
        if file.entries == 0 || last <= from || file.first_op > to {
            continue;
        }
        let until = to.min(last - 1);
        let (reader, scanned) = scan_through(storage, report, file, until)?;
        let start = from.max(file.first_op);
        for op in start..=until {
            let Some((offset, end)) = scanned.offsets.span(op - file.first_op, scanned.end) else {
                return Err(corrupt(file.path.clone(), scanned.end, scanned.stop));
            };
            let mut bytes = vec![0u8; usize::try_from(end - offset).unwrap_or(0)];
            reader.read_exact_at(offset, &mut bytes)?;
            let corrupt = |reason| WalError::Corrupt {
                file: file.path.clone(),
                offset,
                reason,
            };
            let header = Header::decode(&bytes).map_err(|e| corrupt(StopReason::Header(e)))?;
            let body = bytes.split_off(HEADER_SIZE);
            if header.op != op || !header.body_matches(&body) {
                return Err(corrupt(StopReason::Body { op }));
            }
            entries.push(crate::Entry { header, body });
        }
    }
    Ok(entries)
}

/// The verified header of the trusted entry `op`, read through `report`'s files without opening
/// the log for writing (for restore decisions in `Check` mode).
pub fn header_at<R: ReadStorage>(
    storage: &R,
    report: &Report,
    op: u64,
) -> Result<iggy_format::Header, WalError> {
    let out_of_range = || WalError::OutOfRange {
        what: "header_at",
        op,
        first_op: report.first_op,
        head_op: report.head_op,
    };
    let file = report
        .files
        .iter()
        .find(|f| f.first_op <= op && op < f.first_op + f.entries)
        .ok_or_else(out_of_range)?;
    let (reader, scanned) = scan_through(storage, report, file, op)?;
    let offset = scanned
        .offsets
        .last()
        .filter(|_| scanned.first_op + scanned.offsets.len() - 1 == op)
        .ok_or(corrupt(file.path.clone(), scanned.end, scanned.stop))?;
    let mut bytes = [0u8; HEADER_SIZE];
    reader.read_exact_at(offset, &mut bytes)?;
    Header::decode(&bytes).map_err(|error| WalError::Corrupt {
        file: file.path.clone(),
        offset,
        reason: StopReason::Header(error),
    })
}

/// Opens `file` through the carried entries `report` relies on and verifies it from its start
/// through op `until` (the report's boot verified the chain between files).
fn scan_through<'a, R: ReadStorage>(
    storage: &'a R,
    report: &Report,
    file: &crate::FileInfo,
    until: u64,
) -> Result<
    (
        <crate::overlay::Overlay<'a, R> as ReadStorage>::Reader,
        Scan,
    ),
    WalError,
> {
    let reader = report.overlay(storage).open_read(&file.path)?;
    let scanned = scan(
        &reader,
        From {
            start: 0,
            first_op: file.first_op,
            parent: None,
            until_op: Some(until),
            group: report.group,
        },
    )?;
    Ok((reader, scanned))
}
