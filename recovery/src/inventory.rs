//! Every entry of a node directory is either understood or reported: the layout of DESIGN §3
//! (which names belong where, and of which kind) checked entry by entry, after the groups were
//! checked. Anything else (a stray file, a node copied into a partition directory, a FIFO in
//! place of a file) is reported and left alone; nothing that is not a regular file is opened.
//! The walk also counts the regular files and their bytes for the report's summary.

use std::path::{Path, PathBuf};

use iggy_io::{EntryKind, ReadFile, ReadStorage};

use crate::boot::{
    CLEAN_SHUTDOWN_FILE, LOCK_FILE, METADATA_DIR, PARTITIONS_DIR, PartitionKey, node_finding,
};
use crate::report::Finding;

/// Where in the layout a directory is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Level {
    Root,
    Metadata,
    MetadataWal,
    Partitions,
    Partition,
    Offsets,
    /// Install machinery and staged offsets: understood as a whole (their own code checks
    /// them); their files are only counted.
    Opaque,
}

/// What an entry named `name` in a directory at `level` is expected to be: its kind and, for a
/// directory, its level. `None`: the layout has no such name there.
fn expected(level: Level, name: &str) -> Option<(EntryKind, Option<Level>)> {
    let file = Some((EntryKind::File, None));
    let dir = |inner| Some((EntryKind::Dir, Some(inner)));
    let numbered = |extension: &str| {
        name.strip_suffix(extension)
            .and_then(|digits| digits.strip_suffix('.'))
            .is_some_and(|digits| digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
    };
    match level {
        Level::Root => match name {
            METADATA_DIR => dir(Level::Metadata),
            PARTITIONS_DIR => dir(Level::Partitions),
            LOCK_FILE | CLEAN_SHUTDOWN_FILE => file,
            _ => None,
        },
        Level::Metadata => match name {
            iggy_superblock::FILE_NAME
            | iggy_superblock::TEMP_FILE_NAME
            | iggy_snapshot::FILE_NAME
            | iggy_snapshot::TEMP_FILE_NAME
            | iggy_snapshot::transfer::RECEIVING_FILE_NAME => file,
            iggy_metadata::group::WAL_DIR => dir(Level::MetadataWal),
            _ => None,
        },
        Level::MetadataWal => match name {
            iggy_wal::boot::FRONTIER_FILE | iggy_wal::boot::FRONTIER_TEMP_FILE => file,
            _ if numbered(iggy_wal::boot::EXTENSION)
                || numbered(iggy_wal::boot::SEALED_EXTENSION)
                || numbered(iggy_wal::boot::SPARE_EXTENSION) =>
            {
                file
            }
            _ => None,
        },
        Level::Partitions => PartitionKey::parse(name).and_then(|_| dir(Level::Partition)),
        Level::Partition => match name {
            iggy_superblock::FILE_NAME
            | iggy_superblock::TEMP_FILE_NAME
            | iggy_wal::boot::FRONTIER_FILE
            | iggy_wal::boot::FRONTIER_TEMP_FILE
            | iggy_segments::install::FRONTIER_STAGING => file,
            iggy_segments::offsets::DIR_NAME => dir(Level::Offsets),
            iggy_segments::install::OFFSETS_STAGING_DIR
            | iggy_segments::install::BUILDING_DIR
            | iggy_segments::install::BACKUP_DIR
            | iggy_segments::install::RETIRED_DIR => dir(Level::Opaque),
            _ if numbered(iggy_wal::boot::KEYED_EXTENSION)
                || numbered(iggy_wal::boot::KEYED_SEALED_EXTENSION)
                || numbered(iggy_wal::boot::SPARE_EXTENSION)
                || numbered("index")
                || name
                    .strip_suffix(iggy_segments::STAGING_SUFFIX)
                    .is_some_and(|log| {
                        log.strip_suffix(".log").is_some_and(|digits| {
                            digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit())
                        })
                    }) =>
            {
                file
            }
            _ => None,
        },
        Level::Offsets => {
            iggy_segments::offsets::is_file_name(name).then_some((EntryKind::File, None))
        }
        // Never asked: the walk only counts what is inside.
        Level::Opaque => None,
    }
}

/// What the walk found beyond the groups' own findings.
pub(crate) struct Counted {
    pub findings: Vec<Finding>,
    pub files: u64,
    pub bytes: u64,
}

/// Walks the node in `data_dir`: reports every entry the layout does not have (or has with
/// another kind) unless a finding already names it or a directory above it, and counts the
/// regular files and their bytes.
pub(crate) fn walk<R: ReadStorage>(
    storage: &R,
    data_dir: &Path,
    named: &[Finding],
) -> Result<Counted, iggy_io::Error> {
    let mut counted = Counted {
        findings: Vec::new(),
        files: 0,
        bytes: 0,
    };
    // A set, and each path's ancestors looked up in it: a node booted after a crash has a
    // finding per partition, and comparing every path with every finding made the walk
    // quadratic (about 39 of the 43 s of a 10,000-partition boot after a crash).
    let named: std::collections::HashSet<&Path> = named
        .iter()
        .map(|f| f.file.as_path())
        .filter(|file| *file != data_dir)
        .collect();
    let already = |path: &Path| path.ancestors().any(|above| named.contains(above));
    let mut pending: Vec<(PathBuf, Level)> = vec![(data_dir.to_path_buf(), Level::Root)];
    while let Some((dir, level)) = pending.pop() {
        for entry in storage.list_dir(&dir)? {
            let path = dir.join(&entry.name);
            let expectation = expected(level, &entry.name.to_string_lossy());
            match (entry.kind, expectation) {
                (EntryKind::File, _) => {
                    counted.files += 1;
                    counted.bytes += storage.open_read(&path)?.len()?;
                }
                (EntryKind::Dir, Some((EntryKind::Dir, Some(inner)))) => {
                    pending.push((path.clone(), inner));
                }
                // Counted, not judged: an unknown directory is reported once, as a whole.
                (EntryKind::Dir, _) => pending.push((path.clone(), Level::Opaque)),
                (EntryKind::Other, _) => {}
            }
            if level == Level::Opaque || already(&path) {
                continue;
            }
            let finding = match (entry.kind, expectation) {
                (kind, Some((wanted, _))) if kind == wanted => continue,
                (EntryKind::Other, _) => node_finding(
                    "not-a-regular-file",
                    path,
                    "a FIFO, socket, device or symbolic link: never opened; left alone".into(),
                ),
                (_, Some((wanted, _))) => node_finding(
                    "wrong-kind",
                    path,
                    format!(
                        "the layout has a {} of this name here, not a {}; left alone",
                        kind_name(wanted),
                        kind_name(entry.kind)
                    ),
                ),
                (_, None) => node_finding(
                    "unknown-entry",
                    path,
                    format!(
                        "a {} the node layout does not have here; left alone",
                        kind_name(entry.kind)
                    ),
                ),
            };
            counted.findings.push(Finding {
                group: group_of(data_dir, &finding.file),
                ..finding
            });
        }
    }
    counted.findings.sort_by(|a, b| a.file.cmp(&b.file));
    Ok(counted)
}

/// The group an entry belongs to, by where it is: a partition's directory, the metadata's, or
/// the node's own.
fn group_of(data_dir: &Path, path: &Path) -> String {
    let Ok(relative) = path.strip_prefix(data_dir) else {
        return "node".into();
    };
    let mut names = relative.iter().map(|n| n.to_string_lossy());
    match (names.next().as_deref(), names.next(), names.next()) {
        (Some(METADATA_DIR), Some(_), _) => "metadata".into(),
        (Some(PARTITIONS_DIR), Some(dir), Some(_)) => {
            PartitionKey::parse(&dir).map_or_else(|| "node".into(), PartitionKey::label)
        }
        _ => "node".into(),
    }
}

fn kind_name(kind: EntryKind) -> &'static str {
    match kind {
        EntryKind::File => "file",
        EntryKind::Dir => "directory",
        EntryKind::Other => "special file",
    }
}
