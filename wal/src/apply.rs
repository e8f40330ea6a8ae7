//! Carrying out a boot plan (`Open`, `Repair`): exactly what the analysis decided, each change
//! made durable before the log is used (`docs/format.md`, "WAL boot", rules 5 to 7).

use iggy_io::{Storage, WriteFile};

use crate::boot::{Analysis, FRONTIER_FILE};
use crate::error::WalError;
use crate::frontier;

/// Carries out the plan of `analysis` (Open and Repair modes) for the boot of `incarnation`.
pub(crate) fn apply<S: Storage>(
    storage: &S,
    analysis: &Analysis,
    incarnation: u64,
    previous_shutdown_clean: bool,
    defer_syncs: bool,
) -> Result<(), WalError> {
    let report = &analysis.report;
    // Adopted entries must be durable before the new frontier that names them: that order is
    // kept. Every other write here stands alone (`Config::defer_boot_syncs`).
    let sync = !defer_syncs || analysis.new_frontier.is_some();
    crate::carried::write_back(storage, analysis, sync)?;
    for (path, from, to) in &analysis.zero {
        // The file's key: a partition segment's first offset (`.log`), a `.wal` file's first op.
        let start = path
            .file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| s.parse::<u64>().ok());
        tracing::warn!(
            group = %format_args!("{:#x}", report.group),
            incarnation,
            published_by = report.incarnation,
            file = %path.display(),
            start_offset = start,
            durable_bytes = report.durable_bytes,
            discarded_bytes = to - from,
            "discarding unpublished bytes beyond the durable WAL frontier"
        );
        let file = storage.open(path, iggy_io::OpenMode::Existing)?;
        file.write_zeros(*from, to - from)?;
        // The discarded bytes must stay discarded: a later crash must not bring them back
        // behind entries appended over them (deferred: nothing is appended before the caller's
        // sync).
        if sync {
            file.sync_data()?;
        }
    }
    for path in &analysis.remove {
        if crate::seal::sealed_name(path.file_name().unwrap_or_default()).is_some() {
            // Derived data, not entries: nothing is discarded.
            tracing::info!(file = %path.display(), "removing a stale WAL seal");
            storage.unlink(path)?;
            continue;
        }
        // The unpublished bytes that go with the file, as the check (`iggy-fsck`) names them.
        let discarded = report
            .findings
            .iter()
            .find(|f| {
                f.file == *path
                    && matches!(f.kind, crate::boot::FindingKind::FileBeyondFrontier { .. })
            })
            .map_or(0, |f| f.bytes);
        tracing::warn!(
            group = %format_args!("{:#x}", report.group),
            incarnation,
            published_by = report.incarnation,
            file = %path.display(),
            durable_bytes = report.durable_bytes,
            discarded_bytes = discarded,
            "removing a file beyond the durable WAL frontier"
        );
        storage.unlink(path)?;
    }
    if !analysis.remove.is_empty() && sync {
        // The removals must be durable before a new file of the same name can be created.
        storage.sync_dir(&report.dir)?;
    }
    for (path, from, to) in &analysis.adopted_files {
        // Adopted entries were read, perhaps from the page cache of a crashed process whose sync
        // failed: after a failed fsync the kernel may keep pages that no later fsync writes. So
        // they are written again, then synced, before a frontier names them.
        let file = storage.open(path, iggy_io::OpenMode::Existing)?;
        rewrite(&file, *from, *to)?;
        file.sync_data()?;
    }
    if previous_shutdown_clean && analysis.new_frontier.is_none() && analysis.carried.is_empty() {
        // Everything the clean process published was synced before it exited: nothing to
        // make durable, and no descriptor held for it.
        return Ok(());
    }
    let frontier_file =
        storage.open(report.dir.join(FRONTIER_FILE), iggy_io::OpenMode::Existing)?;
    match &analysis.new_frontier {
        Some(new) => {
            tracing::warn!(
                group = %format_args!("{:#x}", report.group),
                head_op = new.head_op,
                "rewriting the WAL frontier"
            );
            frontier_file.write_all_at(new.offset(), &frontier::encode(new))?;
        }
        None if analysis.carried.is_empty() => {
            // The same bytes again: the trusted slot may be in the page cache only, written by
            // a publication whose sync failed before the process died (its acknowledgment was
            // never given, but this boot trusts it). Writing it again makes it durable.
            let trusted = &analysis.frontier;
            frontier_file.write_all_at(trusted.offset(), &frontier::encode(trusted))?;
        }
        None => {
            // The trusted publication is carried: its records again, both copies, for the same
            // reason (and to repair a damaged copy).
            for carried in &analysis.carried {
                for record in crate::ring::records_of(carried.frontier.sequence) {
                    frontier_file.write_all_at(
                        crate::ring::offset(record),
                        &crate::ring::encode(carried, record),
                    )?;
                }
            }
        }
    }
    // What this boot trusts is durable before the log is used: the next boot trusts it too.
    if sync {
        frontier_file.sync_data()?;
    }
    Ok(())
}

/// Writes `[from, to)` of `file` again with the bytes it reads there, through a bounded buffer.
fn rewrite<F: WriteFile>(file: &F, from: u64, to: u64) -> iggy_io::Result<()> {
    const CHUNK: u64 = 1 << 20;
    let mut buffer = vec![0u8; usize::try_from((to - from).min(CHUNK)).unwrap_or(0)];
    let mut at = from;
    while at < to {
        let len = usize::try_from((to - at).min(CHUNK)).unwrap_or(0);
        file.read_exact_at(at, &mut buffer[..len])?;
        file.write_all_at(at, &buffer[..len])?;
        at += len as u64;
    }
    Ok(())
}
