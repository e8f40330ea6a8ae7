//! Whether boot did exactly what its check planned, measured on the files: a snapshot of a
//! node's tree before and after a boot, the paths that changed, and how they compare with the
//! plan of the check. The crash enumerations and the crashed-node corpus run it on every state;
//! it is what makes "`iggy-fsck` names every change boot makes" a tested claim, not only "the
//! verdicts agree".

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use iggy_io::{EntryKind, ReadFile, ReadStorage};

use crate::boot::{CLEAN_SHUTDOWN_FILE, LOCK_FILE};
use crate::report::{Action, Report};

/// What one path of a tree is: a directory, or a file with its bytes' checksum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Node {
    Dir,
    File(u128),
    /// A FIFO, socket or device: listed, never read.
    Other,
}

/// Every path under `root`, relative to it, with what it is. The lock file is left out: it
/// records who holds the node, not data, and every writer creates it.
pub fn snapshot<R: ReadStorage>(
    storage: &R,
    root: &Path,
) -> Result<BTreeMap<PathBuf, Node>, iggy_io::Error> {
    let mut tree = BTreeMap::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in storage.list_dir(&dir)? {
            let path = dir.join(&entry.name);
            let relative = path.strip_prefix(root).unwrap_or(&path).to_path_buf();
            // The clean-shutdown marker says how the last process ended, not data; boot
            // removes it before it writes anything.
            if relative == Path::new(LOCK_FILE) || relative == Path::new(CLEAN_SHUTDOWN_FILE) {
                continue;
            }
            let node = match entry.kind {
                EntryKind::Dir => {
                    pending.push(path);
                    Node::Dir
                }
                EntryKind::File => Node::File(iggy_format::checksum(
                    &storage.open_read(&path)?.read_all()?,
                )),
                EntryKind::Other => Node::Other,
            };
            tree.insert(relative, node);
        }
    }
    Ok(tree)
}

/// The paths created, removed or changed from `before` to `after`.
#[must_use]
pub fn changed(before: &BTreeMap<PathBuf, Node>, after: &BTreeMap<PathBuf, Node>) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = before
        .iter()
        .filter(|(path, node)| after.get(*path) != Some(node))
        .map(|(path, _)| path.clone())
        .chain(
            after
                .keys()
                .filter(|path| !before.contains_key(*path))
                .cloned(),
        )
        .collect();
    paths.sort();
    paths.dedup();
    paths
}

/// What a plan's finding covers: its file (and everything under it); for a roll-back or the
/// creation of a log, the whole directory it acts on.
fn covers(action: Action, file: &Path, path: &Path) -> bool {
    let scope = match action {
        Action::RollbackInstall | Action::FinishCreate => file.parent().unwrap_or(file),
        _ => file,
    };
    path.starts_with(scope)
}

/// Compares the paths a boot changed (relative to the data directory, see [`changed`]) with
/// the plan of the check that came before it: every change must be covered by a planned local
/// repair, and every planned local repair must have changed something (except the rewrite of
/// adopted entries, which writes the bytes it read). `Err` says which side is wrong.
pub fn compare(plan: &Report, changed: &[PathBuf]) -> Result<(), String> {
    let relative = |file: &Path| {
        file.strip_prefix(&plan.data_dir)
            .unwrap_or(file)
            .to_path_buf()
    };
    let planned: Vec<_> = plan
        .findings
        .iter()
        .filter(|f| f.action.is_local_repair())
        .map(|f| (f, relative(&f.file)))
        .collect();
    let unplanned: Vec<&PathBuf> = changed
        .iter()
        .filter(|path| !planned.iter().any(|(f, file)| covers(f.action, file, path)))
        .collect();
    if !unplanned.is_empty() {
        return Err(format!(
            "boot changed {unplanned:?}, which the check did not plan\n{}",
            plan.render()
        ));
    }
    let idle: Vec<String> = planned
        .iter()
        .filter(|(f, file)| {
            f.kind != "adopted-entries" && !changed.iter().any(|path| covers(f.action, file, path))
        })
        .map(|(f, file)| format!("{} {} ({})", f.action.name(), file.display(), f.kind))
        .collect();
    if !idle.is_empty() {
        return Err(format!(
            "the check planned {idle:?}, which boot did not change\n{}",
            plan.render()
        ));
    }
    Ok(())
}
