//! Boot's rules 5 and 6 (`docs/format.md`, "WAL boot"): what lies past the frontier, discarded
//! as far as it could join the chain, or, behind an unreadable slot, adopted as far as it
//! verifies as the chain.

use std::path::PathBuf;

use iggy_format::constants::HEADER_SIZE;
use iggy_io::{ReadFile, ReadStorage};

use crate::WalError;
use crate::boot::{Analysis, BootFile, Finding, FindingKind, corrupt, first_header};
use crate::frontier::Frontier;
use crate::offsets::Offsets;
use crate::scan::{From, Scan, StopReason, scan};

/// Rules 5 and 6: what lies past the frontier.
pub(crate) fn past_the_frontier<R: ReadStorage>(
    storage: &R,
    analysis: &mut Analysis,
    later_files: &[(u64, PathBuf)],
    later_keys: &[u64],
    fallback: bool,
) -> Result<(), WalError> {
    let mut later = later_files.iter().zip(later_keys).peekable();
    let mut adopted = 0u64;
    loop {
        let head = analysis
            .files
            .last_mut()
            .unwrap_or_else(|| unreachable!("a head file"));
        if !storage.exists(&head.path)? {
            // The empty log whose first file is missing: nothing past it; open creates it.
            analysis.report.findings.push(Finding {
                file: head.path.clone(),
                offset: 0,
                bytes: 0,
                kind: FindingKind::MissingHeadFile,
            });
            break;
        }
        let file = storage.open_read(&head.path)?;
        let next_op = head.first_op + head.offsets.len();
        let tail: Scan = scan(
            &file,
            From {
                start: head.end,
                first_op: next_op,
                parent: Some(analysis.head_checksum),
                until_op: None,
                group: analysis.report.group,
            },
        )?;
        if fallback && !tail.offsets.is_empty() {
            adopted += tail.offsets.len();
            let from = head.end;
            let adopted_offsets = tail.offsets.loaded().unwrap_or_default();
            head.offsets.loaded_mut().extend_from_slice(adopted_offsets);
            head.end = tail.end;
            analysis.head_checksum = tail.last_checksum.unwrap_or(analysis.head_checksum);
            analysis
                .adopted_files
                .push((head.path.clone(), from, tail.end));
        }
        let head_end = head.end;
        let head_path = head.path.clone();
        let next_op = head.first_op + head.offsets.len();
        // Adoption continues into the next file when it starts exactly where this one stopped
        // (whatever lies past this file's last entry: a file before the head is not padded, and
        // a recycled one holds an earlier use's bytes there). The next file's scan checks that
        // its first entry names this chain's last.
        if fallback
            && later.peek().is_some_and(|((op, _), _)| *op == next_op)
            && let Some(((first_op, path), key)) = later.next()
        {
            analysis.files.push(BootFile {
                first_op: *first_op,
                key: *key,
                path: path.clone(),
                offsets: Offsets::default(),
                end: 0,
                first_parent: analysis.head_checksum,
                sealed_last: None,
            });
            continue;
        }
        if fallback && !matches!(tail.stop, StopReason::EndOfFile | StopReason::Zeros) {
            // Behind an unreadable slot, boot cannot tell an entry that does not verify from a
            // published one that rotted: refuse rather than discard it (rule 6).
            return Err(corrupt(head_path, tail.end, tail.stop));
        }
        let seen_end = discard_end(&tail, file.len()?);
        if seen_end > head_end {
            let entries = if fallback { 0 } else { tail.offsets.len() };
            analysis.report.findings.push(Finding {
                file: head_path,
                offset: head_end,
                bytes: seen_end - head_end,
                kind: FindingKind::UnpublishedTail { entries },
            });
        }
        break;
    }
    let next_op = analysis
        .files
        .last()
        .map_or(0, |f| f.first_op + f.offsets.len());
    let published_head = analysis.frontier.head_op;
    for ((first_op, path), _) in later {
        let file = storage.open_read(path)?;
        // A first entry that verifies but belongs to another group, or is at or before the
        // published head, cannot have been written by this log after its last publication: it
        // is not an unpublished tail but a file copied in from another log. Never delete it as
        // if it were ours.
        if let Ok(header) = first_header(&file)?
            && (header.group != analysis.report.group || header.op <= published_head)
        {
            return Err(WalError::ForeignFile {
                file: path.clone(),
                first_op: header.op,
                group: header.group,
                head_op: published_head,
            });
        }
        let scanned = scan(
            &file,
            From {
                start: 0,
                first_op: *first_op,
                parent: None,
                until_op: None,
                group: analysis.report.group,
            },
        )?;
        let entries = scanned.offsets.len();
        if fallback && entries > 0 {
            // Entries the adopted chain does not reach: behind an unreadable slot they may be
            // published history (the newest slot may have named them). Refuse (rule 6).
            return Err(WalError::Hole {
                file: path.clone(),
                expected: next_op,
                found: *first_op,
            });
        }
        let bytes = discard_end(&scanned, file.len()?);
        analysis.report.findings.push(Finding {
            file: path.clone(),
            offset: 0,
            bytes,
            kind: FindingKind::FileBeyondFrontier { entries },
        });
    }
    let head = analysis
        .files
        .last()
        .unwrap_or_else(|| unreachable!("a head file"));
    let head_op = head.first_op + head.offsets.len() - 1;
    if adopted > 0 {
        analysis.report.findings.push(Finding {
            file: head.path.clone(),
            offset: analysis.frontier.published_length,
            bytes: 0,
            kind: FindingKind::Adopted {
                entries: adopted,
                head_op,
            },
        });
    }
    analysis.report.head_op = head_op;
    if fallback {
        let old = analysis.frontier;
        analysis.new_frontier = Some(Frontier {
            sequence: old.sequence + 1,
            head_op,
            head_checksum: analysis.head_checksum,
            head_file: head.first_op,
            published_length: head.end,
            head_file_key: head.key,
            ..old
        });
    }
    Ok(())
}

/// Where the bytes a boot discards past the frontier end, for a scan of them: the entries that
/// still verify as the chain's continuation, and the header where the scan stopped unless it
/// stopped at zeros or the file's end (a torn entry, or bytes that are not this log's). Zeroed,
/// these can never join the chain again. Bytes further on are not read: each header names its
/// parent, so nothing past them can follow the chain unless they do, and in a recycled file
/// they are an earlier use's (reading to the last non-zero byte would read the whole file).
fn discard_end(tail: &Scan, len: u64) -> u64 {
    match tail.stop {
        StopReason::Zeros | StopReason::EndOfFile | StopReason::Reached => tail.end,
        _ => (tail.end + HEADER_SIZE as u64).min(len).max(tail.end),
    }
}
