//! The state behind [`super::SimStorage`]: images, pending lists, faults, trace. Every mutation
//! goes through here and is recorded; replaying a trace calls the same functions.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::content::Content;
use super::{CrashPlan, DirOrder, Fault, FaultConfig, PendingWrite, TraceOp, WriteFate};
use crate::error::{Error, ErrorKind, Op, Result};
use crate::path::{components, split_parent};
use crate::storage::{DirEntry, EntryKind, OpenMode};

const ROOT: u64 = 0;
/// Sector sizes a torn write may be torn at.
pub(crate) const SECTOR_SIZES: [u64; 2] = [512, 4096];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Node {
    File(u64),
    Dir(u64),
}

#[derive(Clone, Debug, Default)]
pub(crate) struct FileImage {
    /// What reads see (the page cache).
    pub(crate) data: Content,
    /// What survives a power loss. Shares its pages with `data` where they agree.
    durable: Content,
    /// Writes were dropped by a failed sync: `data` holds bytes `durable` never will, so a
    /// later sync applies its pending writes one by one instead of adopting `data`.
    diverged: bool,
}

#[derive(Clone, Debug, Default)]
struct DirImage {
    entries: BTreeMap<OsString, Node>,
    durable: BTreeMap<OsString, Node>,
}

#[derive(Clone, Debug)]
enum FileChange {
    Write { offset: u64, data: Arc<[u8]> },
    SetLen(u64),
}

#[derive(Clone, Debug)]
struct Pending {
    inode: u64,
    change: FileChange,
}

/// The writes not yet durable, in the order they were made, indexed by file: a sync takes its
/// file's writes without walking everyone else's.
#[derive(Clone, Debug, Default)]
struct PendingWrites {
    /// By sequence number: the order of the writes.
    writes: BTreeMap<u64, Pending>,
    by_inode: BTreeMap<u64, Vec<u64>>,
    next: u64,
}

impl PendingWrites {
    fn push(&mut self, pending: Pending) {
        self.by_inode
            .entry(pending.inode)
            .or_default()
            .push(self.next);
        self.writes.insert(self.next, pending);
        self.next += 1;
    }

    fn len(&self) -> usize {
        self.writes.len()
    }

    /// Every pending write, oldest first.
    fn iter(&self) -> impl Iterator<Item = &Pending> {
        self.writes.values()
    }

    /// The files that have pending writes.
    fn inodes(&self) -> impl Iterator<Item = u64> + '_ {
        self.by_inode.keys().copied()
    }

    /// Removes and returns `inode`'s pending writes, oldest first.
    fn take_inode(&mut self, inode: u64) -> Vec<Pending> {
        self.by_inode
            .remove(&inode)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|sequence| self.writes.remove(&sequence))
            .collect()
    }

    /// Removes and returns every pending write, oldest first.
    fn take_all(&mut self) -> Vec<Pending> {
        self.by_inode.clear();
        std::mem::take(&mut self.writes).into_values().collect()
    }
}

#[derive(Clone, Debug)]
pub(crate) struct DirOp {
    dir: u64,
    name: OsString,
    node: Option<Node>,
    /// The operation it belongs to: the two entry changes of a rename share one, so that an
    /// unordered power loss keeps or loses a rename whole.
    operation: u64,
}

#[derive(Clone, Debug)]
pub(crate) struct SimState {
    pub(crate) faults: FaultConfig,
    rng: ChaCha8Rng,
    pub(crate) generation: u64,
    next_id: u64,
    files: BTreeMap<u64, FileImage>,
    dirs: BTreeMap<u64, DirImage>,
    pending: PendingWrites,
    pub(crate) pending_dir_ops: Vec<DirOp>,
    pub(crate) trace: Vec<TraceOp>,
    armed: Vec<(u64, Fault)>,
    /// Held locks: path, the generation (process life) that took it, and the holder's id. A
    /// crash or power loss ends the generation, which frees its locks as a kernel would.
    pub(crate) locks: BTreeMap<std::path::PathBuf, (u64, u32)>,
    pub(crate) next_lock_holder: u32,
    /// How seeded power losses keep pending directory operations.
    pub(crate) dir_order: DirOrder,
    next_dir_operation: u64,
    /// Whether every mutation is kept in `trace` (for the enumerator; it holds every byte ever
    /// written, so it is off unless asked for).
    pub(crate) recording: bool,
    /// A disk that never loses power: every write is durable once written, so no write is kept
    /// pending (and a power loss loses nothing written). For runs that crash processes only: a
    /// process crash sees the page cache either way, and the disk holds one copy of each byte.
    pub(crate) write_through: bool,
    /// The disk's size: a write or an allocation that would make the files' lengths sum past it
    /// fails with `ENOSPC` (`None`: unbounded).
    pub(crate) space_limit: Option<u64>,
    /// Open handles of the current process life, per inode: an unlinked file they hold stays.
    handles: BTreeMap<u64, usize>,
    /// Set when an inode or directory may have become unreachable (an unlink, a rename over a
    /// name, a removal), and kept while an unreachable file is held open: the next collection
    /// (the next dropped handle, at the latest) looks.
    garbage: bool,
    /// An unreachable file is kept only for its pending writes: the next sync looks again.
    /// (Split from `garbage` so that closing a reachable file does not walk the whole state.)
    held_by_pending: bool,
}

fn apply_change(data: &mut Content, change: &FileChange) {
    match change {
        FileChange::Write {
            offset,
            data: bytes,
        } => data.write(*offset, bytes),
        FileChange::SetLen(len) => data.set_len(*len),
    }
}

fn to_usize(value: u64) -> usize {
    usize::try_from(value).unwrap_or(usize::MAX)
}

/// The sector-aligned pieces `[start, end)` of a write, at the given sector size.
pub(crate) fn sector_pieces(offset: u64, len: u64, sector_bytes: u64) -> Vec<(u64, u64)> {
    let end = offset + len;
    let mut pieces = Vec::new();
    let mut start = offset;
    while start < end {
        let sector_end = (start / sector_bytes + 1) * sector_bytes;
        pieces.push((start, sector_end.min(end)));
        start = sector_end.min(end);
    }
    pieces
}

impl SimState {
    pub(crate) fn new(seed: u64, faults: FaultConfig) -> Self {
        let mut dirs = BTreeMap::new();
        dirs.insert(ROOT, DirImage::default());
        Self {
            faults,
            rng: ChaCha8Rng::seed_from_u64(seed),
            generation: 0,
            next_id: 1,
            files: BTreeMap::new(),
            dirs,
            pending: PendingWrites::default(),
            pending_dir_ops: Vec::new(),
            trace: Vec::new(),
            armed: Vec::new(),
            locks: BTreeMap::new(),
            next_lock_holder: 1,
            dir_order: DirOrder::Ordered,
            next_dir_operation: 0,
            recording: false,
            write_through: false,
            space_limit: None,
            handles: BTreeMap::new(),
            garbage: false,
            held_by_pending: false,
        }
    }

    /// Bytes held in memory (see `SimStorage::memory_bytes`).
    /// The sum of the files' lengths (what a file system would have allocated).
    pub(crate) fn used_bytes(&self) -> u64 {
        self.files.values().map(|f| f.data.len()).sum()
    }

    /// Whether file `inode` may grow to `end` bytes within [`SimState::space_limit`].
    pub(crate) fn room_for(&self, inode: u64, end: u64) -> bool {
        let Some(limit) = self.space_limit else {
            return true;
        };
        let current = self.files.get(&inode).map_or(0, |f| f.data.len());
        end <= current || self.used_bytes() - current + end <= limit
    }

    pub(crate) fn memory_bytes(&self) -> u64 {
        let mut pages = std::collections::BTreeSet::new();
        for file in self.files.values() {
            for page in file.data.pages().chain(file.durable.pages()) {
                pages.insert(std::sync::Arc::as_ptr(page) as usize);
            }
        }
        let pending: u64 = self
            .pending
            .iter()
            .map(|p| match &p.change {
                FileChange::Write { data, .. } => data.len() as u64,
                FileChange::SetLen(_) => 0,
            })
            .sum();
        let traced: u64 = self
            .trace
            .iter()
            .map(|op| match op {
                TraceOp::Write { data, .. } => data.len() as u64,
                _ => 0,
            })
            .sum();
        pages.len() as u64 * super::content::PAGE as u64 + pending + traced
    }

    /// Keeps `op` in the trace, when recording.
    pub(crate) fn record(&mut self, op: TraceOp) {
        if self.recording {
            self.trace.push(op);
        }
    }

    /// A handle on `inode` was opened.
    pub(crate) fn hold(&mut self, inode: u64) {
        *self.handles.entry(inode).or_default() += 1;
    }

    /// A handle on `inode` of process life `generation` was dropped.
    pub(crate) fn release(&mut self, inode: u64, generation: u64) {
        if generation != self.generation {
            return; // a stale handle: its life's counts were reset by the crash
        }
        if let Some(count) = self.handles.get_mut(&inode) {
            *count -= 1;
            if *count == 0 {
                self.handles.remove(&inode);
                // Only an unreachable file held open can go now, and then `garbage` is set.
                self.collect_garbage();
            }
        }
    }

    /// Frees every inode and directory nothing can reach any more: no entry (buffered or
    /// durable), no pending directory change, no open handle, and (for a file) no pending write
    /// (a power loss plan counts those). Memory then tracks what the disk holds, not its history.
    pub(crate) fn collect_garbage(&mut self) {
        use std::collections::BTreeSet;
        if !std::mem::take(&mut self.garbage) {
            return;
        }
        // What a name can reach, now or after a power loss.
        let mut dirs = BTreeSet::new();
        let mut reachable = BTreeSet::new();
        let mut stack = vec![Node::Dir(ROOT)];
        stack.extend(self.pending_dir_ops.iter().filter_map(|op| op.node));
        while let Some(node) = stack.pop() {
            match node {
                Node::File(inode) => {
                    reachable.insert(inode);
                }
                Node::Dir(dir) if dirs.insert(dir) => {
                    if let Some(image) = self.dirs.get(&dir) {
                        stack.extend(image.entries.values().chain(image.durable.values()));
                    }
                }
                Node::Dir(_) => {}
            }
        }
        // What no name reaches but a handle or a pending write still holds.
        let held: BTreeSet<u64> = self
            .handles
            .keys()
            .copied()
            .chain(self.pending.inodes())
            .filter(|inode| !reachable.contains(inode))
            .collect();
        self.dirs.retain(|dir, _| dirs.contains(dir));
        // A pending change to a directory no name reaches (one created and removed again
        // before its parent's sync) cannot matter after a power loss either.
        self.pending_dir_ops.retain(|op| dirs.contains(&op.dir));
        self.files
            .retain(|inode, _| reachable.contains(inode) || held.contains(inode));
        // Those go once their handles and writes do: look again then (after a dropped handle
        // or a sync).
        let by_handle = held.iter().any(|inode| self.handles.contains_key(inode));
        self.garbage = by_handle;
        self.held_by_pending = !held.is_empty() && !by_handle;
    }

    pub(crate) fn file(&self, inode: u64) -> &FileImage {
        self.files
            .get(&inode)
            .unwrap_or_else(|| panic!("inode {inode} missing: handle outlived it"))
    }

    /// The image of `inode`, recreated empty if it was collected: a replayed trace has no open
    /// handles, so an unlinked file its recording kept open for writing may be gone there.
    fn file_mut(&mut self, inode: u64) -> &mut FileImage {
        self.files.entry(inode).or_default()
    }

    fn dir_mut(&mut self, dir: u64) -> &mut DirImage {
        self.dirs
            .get_mut(&dir)
            .unwrap_or_else(|| panic!("directory {dir} missing"))
    }

    fn new_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    fn chance(&mut self, probability: f64) -> bool {
        probability > 0.0 && self.rng.random_bool(probability.min(1.0))
    }

    // ---- name resolution (buffered view) ----

    fn lookup_in(&self, dir: u64, name: &OsStr) -> Option<Node> {
        self.dirs
            .get(&dir)
            .and_then(|d| d.entries.get(name).copied())
    }

    pub(crate) fn lookup(&self, names: &[&OsStr]) -> Option<()> {
        let mut dir = ROOT;
        for (index, name) in names.iter().enumerate() {
            match self.lookup_in(dir, name)? {
                Node::Dir(child) => dir = child,
                Node::File(_) if index + 1 == names.len() => return Some(()),
                Node::File(_) => return None,
            }
        }
        Some(())
    }

    fn resolve_dir(&self, op: Op, path: &Path, names: &[&OsStr]) -> Result<u64> {
        let mut dir = ROOT;
        for name in names {
            dir = match self.lookup_in(dir, name) {
                Some(Node::Dir(child)) => child,
                Some(Node::File(_)) => return Err(Error::new(op, path, ErrorKind::NotADirectory)),
                None => return Err(Error::new(op, path, ErrorKind::NotFound)),
            };
        }
        Ok(dir)
    }

    fn resolve_parent<'p>(&self, op: Op, path: &'p Path) -> Result<(u64, &'p OsStr)> {
        let (parent, name) = split_parent(op, path)?;
        Ok((self.resolve_dir(op, path, &parent)?, name))
    }

    fn resolve_file(&self, op: Op, path: &Path) -> Result<u64> {
        let (dir, name) = self.resolve_parent(op, path)?;
        match self.lookup_in(dir, name) {
            Some(Node::File(inode)) => Ok(inode),
            Some(Node::Dir(_)) => Err(Error::new(op, path, ErrorKind::IsADirectory)),
            None => Err(Error::new(op, path, ErrorKind::NotFound)),
        }
    }

    /// A new directory operation: the entry changes it makes share its number.
    fn dir_operation(&mut self) -> u64 {
        self.next_dir_operation += 1;
        self.next_dir_operation
    }

    /// Changes a buffered directory entry and records the change as pending, as part of
    /// `operation`.
    fn set_entry(&mut self, dir: u64, name: &OsStr, node: Option<Node>, operation: u64) {
        let entries = &mut self.dir_mut(dir).entries;
        match node {
            Some(node) => entries.insert(name.to_os_string(), node),
            None => entries.remove(name),
        };
        self.pending_dir_ops.push(DirOp {
            dir,
            name: name.to_os_string(),
            node,
            operation,
        });
    }

    /// The pending directory operations, in order (each once, however many entries it changed).
    pub(crate) fn pending_dir_operations(&self) -> Vec<u64> {
        let mut operations: Vec<u64> = Vec::new();
        for op in &self.pending_dir_ops {
            if operations.last() != Some(&op.operation) {
                operations.push(op.operation);
            }
        }
        operations
    }

    // ---- directory operations ----

    pub(crate) fn open(&mut self, path: &Path, mode: OpenMode) -> Result<u64> {
        let (dir, name) = self.resolve_parent(Op::Open, path)?;
        match (self.lookup_in(dir, name), mode) {
            (Some(Node::Dir(_)), _) => Err(Error::new(Op::Open, path, ErrorKind::IsADirectory)),
            (Some(Node::File(_)), OpenMode::CreateNew) => {
                Err(Error::new(Op::Open, path, ErrorKind::AlreadyExists))
            }
            (Some(Node::File(inode)), _) => Ok(inode),
            (None, OpenMode::Existing) => Err(Error::new(Op::Open, path, ErrorKind::NotFound)),
            (None, OpenMode::Create | OpenMode::CreateNew) => {
                let inode = self.new_id();
                self.files.insert(inode, FileImage::default());
                let operation = self.dir_operation();
                self.set_entry(dir, name, Some(Node::File(inode)), operation);
                self.record(TraceOp::Create {
                    path: path.to_path_buf(),
                    inode,
                });
                Ok(inode)
            }
        }
    }

    pub(crate) fn create_dir(&mut self, path: &Path) -> Result<()> {
        let (parent, name) = self.resolve_parent(Op::CreateDir, path)?;
        if self.lookup_in(parent, name).is_some() {
            return Err(Error::new(Op::CreateDir, path, ErrorKind::AlreadyExists));
        }
        let dir = self.new_id();
        self.dirs.insert(dir, DirImage::default());
        let operation = self.dir_operation();
        self.set_entry(parent, name, Some(Node::Dir(dir)), operation);
        self.record(TraceOp::CreateDir {
            path: path.to_path_buf(),
        });
        Ok(())
    }

    pub(crate) fn sync_dir(&mut self, path: &Path) -> Result<()> {
        let names = components(Op::SyncDir, path)?;
        let dir = self.resolve_dir(Op::SyncDir, path, &names)?;
        let (mine, others): (Vec<DirOp>, Vec<DirOp>) = std::mem::take(&mut self.pending_dir_ops)
            .into_iter()
            .partition(|op| op.dir == dir);
        self.pending_dir_ops = others;
        self.make_dir_ops_durable(mine);
        self.record(TraceOp::SyncDir {
            path: path.to_path_buf(),
        });
        self.collect_garbage();
        Ok(())
    }

    /// Applies `ops` to their directories' durable images.
    fn make_dir_ops_durable(&mut self, ops: Vec<DirOp>) {
        let mut replaced = false;
        for op in ops {
            let durable = &mut self.dir_mut(op.dir).durable;
            // A durable removal or replacement may leave an inode no name reaches any more.
            replaced |= match op.node {
                Some(node) => durable.insert(op.name, node).is_some(),
                None => durable.remove(&op.name).is_some(),
            };
        }
        self.garbage |= replaced;
    }

    /// `syncfs`: every pending write and directory operation durable at once. A file whose
    /// write-back fails (an armed `SyncError`, or the configured chance, drawn per file with
    /// pending writes) loses its pending writes as after a failed sync, and the call fails.
    pub(crate) fn sync_filesystem(&mut self) -> Result<()> {
        let inodes: Vec<u64> = self.pending.inodes().collect();
        let eio = self.faults.sync_error_probability;
        let mut failed = Vec::new();
        for inode in inodes {
            let armed = self.take_armed(inode, |f| *f == Fault::SyncError);
            if armed.is_some() || self.chance(eio) {
                failed.push(inode);
            }
        }
        let ok = failed.is_empty();
        self.apply(TraceOp::SyncFs { failed });
        if ok {
            Ok(())
        } else {
            Err(Error::new(
                Op::SyncFs,
                Path::new(""),
                ErrorKind::Injected("EIO in a write-back during syncfs"),
            ))
        }
    }

    pub(crate) fn rename(&mut self, from: &Path, to: &Path) -> Result<()> {
        let (from_dir, from_name) = self.resolve_parent(Op::Rename, from)?;
        let (to_dir, to_name) = self.resolve_parent(Op::Rename, to)?;
        let node = self
            .lookup_in(from_dir, from_name)
            .ok_or_else(|| Error::new(Op::Rename, from, ErrorKind::NotFound))?;
        if from_dir == to_dir && from_name == to_name {
            return Ok(());
        }
        match (node, self.lookup_in(to_dir, to_name)) {
            (Node::File(_), Some(Node::Dir(_))) => {
                return Err(Error::new(Op::Rename, to, ErrorKind::IsADirectory));
            }
            (Node::Dir(_), Some(Node::File(_))) => {
                return Err(Error::new(Op::Rename, to, ErrorKind::NotADirectory));
            }
            (Node::Dir(_), Some(Node::Dir(target)))
                if self
                    .dirs
                    .get(&target)
                    .is_some_and(|d| !d.entries.is_empty()) =>
            {
                return Err(Error::new(Op::Rename, to, ErrorKind::DirectoryNotEmpty));
            }
            _ => {}
        }
        if let Node::Dir(moved) = node {
            // A directory cannot move under itself.
            let to_names = components(Op::Rename, to)?;
            let mut dir = ROOT;
            for name in &to_names[..to_names.len().saturating_sub(1)] {
                match self.lookup_in(dir, name) {
                    Some(Node::Dir(child)) => dir = child,
                    _ => break,
                }
                if dir == moved {
                    return Err(Error::new(
                        Op::Rename,
                        to,
                        ErrorKind::InvalidPath("into itself"),
                    ));
                }
            }
        }
        let operation = self.dir_operation();
        self.set_entry(from_dir, from_name, None, operation);
        self.set_entry(to_dir, to_name, Some(node), operation);
        self.record(TraceOp::Rename {
            from: from.to_path_buf(),
            to: to.to_path_buf(),
        });
        // A rename over a name unlinks what was there.
        self.garbage = true;
        self.collect_garbage();
        Ok(())
    }

    pub(crate) fn hard_link(&mut self, from: &Path, to: &Path) -> Result<()> {
        let inode = self.resolve_file(Op::HardLink, from)?;
        let (to_dir, to_name) = self.resolve_parent(Op::HardLink, to)?;
        if self.lookup_in(to_dir, to_name).is_some() {
            return Err(Error::new(Op::HardLink, to, ErrorKind::AlreadyExists));
        }
        let operation = self.dir_operation();
        self.set_entry(to_dir, to_name, Some(Node::File(inode)), operation);
        self.record(TraceOp::HardLink {
            from: from.to_path_buf(),
            to: to.to_path_buf(),
        });
        Ok(())
    }

    pub(crate) fn unlink(&mut self, path: &Path) -> Result<()> {
        self.resolve_file(Op::Unlink, path)?;
        let (dir, name) = self.resolve_parent(Op::Unlink, path)?;
        let operation = self.dir_operation();
        self.set_entry(dir, name, None, operation);
        self.record(TraceOp::Unlink {
            path: path.to_path_buf(),
        });
        self.garbage = true;
        self.collect_garbage();
        Ok(())
    }

    pub(crate) fn remove_dir_all(&mut self, path: &Path) -> Result<()> {
        let (parent, name) = self.resolve_parent(Op::RemoveDirAll, path)?;
        match self.lookup_in(parent, name) {
            Some(Node::Dir(_)) => {}
            Some(Node::File(_)) => {
                return Err(Error::new(Op::RemoveDirAll, path, ErrorKind::NotADirectory));
            }
            None => return Err(Error::new(Op::RemoveDirAll, path, ErrorKind::NotFound)),
        }
        let operation = self.dir_operation();
        self.set_entry(parent, name, None, operation);
        self.record(TraceOp::RemoveDirAll {
            path: path.to_path_buf(),
        });
        self.garbage = true;
        self.collect_garbage();
        Ok(())
    }

    pub(crate) fn list_dir(&self, path: &Path) -> Result<Vec<DirEntry>> {
        let names = components(Op::ListDir, path)?;
        let dir = self.resolve_dir(Op::ListDir, path, &names)?;
        let entries = &self.dirs[&dir].entries;
        Ok(entries
            .iter()
            .map(|(name, node)| DirEntry {
                name: name.clone(),
                kind: match node {
                    Node::File(_) => EntryKind::File,
                    Node::Dir(_) => EntryKind::Dir,
                },
            })
            .collect())
    }

    // ---- file operations ----

    fn take_armed(&mut self, inode: u64, matches: impl Fn(&Fault) -> bool) -> Option<Fault> {
        let index = self
            .armed
            .iter()
            .position(|(i, f)| *i == inode && matches(f))?;
        Some(self.armed.remove(index).1)
    }

    pub(crate) fn arm(&mut self, path: &Path, fault: Fault) -> Result<()> {
        let inode = self.resolve_file(Op::Open, path)?;
        if let Fault::MisdirectToFile(target) = &fault {
            self.resolve_file(Op::Open, target)?;
        }
        self.armed.push((inode, fault));
        Ok(())
    }

    pub(crate) fn read(
        &mut self,
        inode: u64,
        path: &Path,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<usize> {
        let armed = self.take_armed(inode, |f| {
            matches!(f, Fault::ReadError | Fault::ShortRead(_))
        });
        let eio = self.faults.read_error_probability;
        if armed == Some(Fault::ReadError) || self.chance(eio) {
            return Err(Error::new(Op::Read, path, ErrorKind::Injected("EIO on read")).at(offset));
        }
        let len = self.file(inode).data.len();
        let mut count = to_usize(len.saturating_sub(offset)).min(buf.len());
        if let Some(Fault::ShortRead(max)) = armed {
            count = count.min(max.max(1));
        } else if count > 1 && self.chance(self.faults.short_read_probability) {
            count = self.rng.random_range(1..count);
        }
        Ok(self.file(inode).data.read(offset, &mut buf[..count]))
    }

    pub(crate) fn write(
        &mut self,
        inode: u64,
        path: &Path,
        offset: u64,
        buf: &[u8],
    ) -> Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let armed = self.take_armed(inode, |f| {
            matches!(
                f,
                Fault::WriteError
                    | Fault::ShortWrite(_)
                    | Fault::MisdirectToOffset(_)
                    | Fault::MisdirectToFile(_)
            )
        });
        let eio = self.faults.write_error_probability;
        if armed == Some(Fault::WriteError) || self.chance(eio) {
            return Err(
                Error::new(Op::Write, path, ErrorKind::Injected("EIO on write")).at(offset),
            );
        }
        let mut count = buf.len();
        if let Some(Fault::ShortWrite(max)) = armed {
            count = count.min(max.max(1));
        } else if count > 1 && self.chance(self.faults.short_write_probability) {
            count = self.rng.random_range(1..count);
        }
        if self.write_through
            && !self.recording
            && armed.is_none()
            && self.faults.misdirect_probability == 0.0
        {
            // Nothing keeps the write but the page cache: no copy of it for a pending list
            // or a trace.
            self.file_mut(inode).data.write(offset, &buf[..count]);
            return Ok(count);
        }
        let bytes: Arc<[u8]> = Arc::from(&buf[..count]);
        let (target_inode, target_path, target_offset) = match armed {
            Some(Fault::MisdirectToOffset(other)) => (inode, path.to_path_buf(), other),
            Some(Fault::MisdirectToFile(other)) => {
                (self.resolve_file(Op::Write, &other)?, other, offset)
            }
            _ if self.chance(self.faults.misdirect_probability) => {
                let sectors = (self.file(inode).data.len() / 512).max(1);
                let other = self.rng.random_range(0..sectors) * 512;
                (inode, path.to_path_buf(), other)
            }
            _ => (inode, path.to_path_buf(), offset),
        };
        self.apply(TraceOp::Write {
            path: target_path,
            inode: target_inode,
            offset: target_offset,
            data: bytes,
        });
        Ok(count)
    }

    pub(crate) fn set_len(&mut self, inode: u64, path: &Path, len: u64) {
        self.apply(TraceOp::SetLen {
            path: path.to_path_buf(),
            inode,
            len,
        });
    }

    pub(crate) fn sync_file(&mut self, inode: u64, path: &Path, op: Op) -> Result<()> {
        let armed = self.take_armed(inode, |f| *f == Fault::SyncError);
        let eio = self.faults.sync_error_probability;
        if armed.is_some() || self.chance(eio) {
            self.apply(TraceOp::SyncFailed {
                path: path.to_path_buf(),
                inode,
            });
            return Err(Error::new(op, path, ErrorKind::Injected("EIO on sync")));
        }
        let path = path.to_path_buf();
        self.apply(match op {
            Op::SyncAll => TraceOp::SyncAll { path, inode },
            _ => TraceOp::SyncData { path, inode },
        });
        Ok(())
    }

    pub(crate) fn rot(&mut self, path: &Path, offset: u64, mask: u8) -> Result<()> {
        let inode = self.resolve_file(Op::Write, path)?;
        let len = self.file(inode).data.len();
        if offset >= len {
            return Err(Error::new(Op::Write, path, ErrorKind::UnexpectedEof).at(offset));
        }
        self.apply(TraceOp::Rot {
            path: path.to_path_buf(),
            inode,
            offset,
            mask,
        });
        Ok(())
    }

    pub(crate) fn rot_random(&mut self, path: &Path) -> Result<(u64, u8)> {
        let inode = self.resolve_file(Op::Write, path)?;
        let len = self.file(inode).data.len();
        if len == 0 {
            return Err(Error::new(Op::Write, path, ErrorKind::UnexpectedEof).at(0));
        }
        let offset = self.rng.random_range(0..len);
        let mask = 1u8 << self.rng.random_range(0..8u32);
        self.rot(path, offset, mask)?;
        Ok((offset, mask))
    }

    // ---- replay: the one place a recorded mutation changes state ----

    /// Applies one recorded mutation and appends it to the trace. Directory operations are
    /// re-resolved by path (they resolve to the same nodes, since ids are allocated in order);
    /// file operations name their inode.
    pub(crate) fn apply(&mut self, op: TraceOp) {
        match &op {
            TraceOp::Write {
                inode,
                offset,
                data,
                ..
            } => {
                let change = FileChange::Write {
                    offset: *offset,
                    data: Arc::clone(data),
                };
                apply_change(&mut self.file_mut(*inode).data, &change);
                if !self.write_through {
                    self.pending.push(Pending {
                        inode: *inode,
                        change,
                    });
                }
            }
            TraceOp::SetLen { inode, len, .. } => {
                let change = FileChange::SetLen(*len);
                apply_change(&mut self.file_mut(*inode).data, &change);
                if !self.write_through {
                    self.pending.push(Pending {
                        inode: *inode,
                        change,
                    });
                }
            }
            TraceOp::SyncFs { failed } => {
                let inodes: Vec<u64> = self.pending.inodes().collect();
                for inode in inodes {
                    if failed.contains(&inode) {
                        self.drop_pending(inode);
                    } else {
                        self.make_durable(inode);
                    }
                }
                let ops = std::mem::take(&mut self.pending_dir_ops);
                self.make_dir_ops_durable(ops);
                self.garbage |= std::mem::take(&mut self.held_by_pending);
                self.collect_garbage();
            }
            TraceOp::SyncData { .. } | TraceOp::SyncAll { .. } if self.write_through => {
                // Written is durable: the durable images are made from the data at a power
                // loss, not at every sync.
                self.garbage |= std::mem::take(&mut self.held_by_pending);
                self.collect_garbage();
            }
            TraceOp::SyncData { inode, .. } | TraceOp::SyncAll { inode, .. } => {
                self.make_durable(*inode);
                // An unlinked file kept for its pending writes may go now.
                self.garbage |= std::mem::take(&mut self.held_by_pending);
                self.collect_garbage();
            }
            TraceOp::SyncFailed { inode, .. } => {
                if self.drop_pending(*inode) {
                    self.garbage |= std::mem::take(&mut self.held_by_pending);
                    self.collect_garbage();
                }
            }
            TraceOp::Rot {
                inode,
                offset,
                mask,
                ..
            } => {
                let file = self.file_mut(*inode);
                file.data.flip(*offset, *mask);
                file.durable.flip(*offset, *mask);
            }
            TraceOp::ProcessCrash => {
                self.generation += 1;
                self.handles.clear();
                self.garbage = true;
                self.collect_garbage();
            }
            TraceOp::PowerLoss(plan) => self.power_loss_state(plan),
            TraceOp::Mark(_) => {}
            TraceOp::Create { .. }
            | TraceOp::CreateDir { .. }
            | TraceOp::SyncDir { .. }
            | TraceOp::Rename { .. }
            | TraceOp::HardLink { .. }
            | TraceOp::Unlink { .. }
            | TraceOp::RemoveDirAll { .. } => {
                unreachable!("directory operations are applied by replay(), not apply()")
            }
        }
        self.record(op);
    }

    /// Makes `inode`'s pending writes durable (a sync that succeeded).
    fn make_durable(&mut self, inode: u64) {
        let mine = self.pending.take_inode(inode);
        let file = self.file_mut(inode);
        if file.diverged {
            for pending in mine {
                apply_change(&mut file.durable, &pending.change);
            }
        } else {
            // Every write since the durable image is now durable: the images agree, and share
            // every page (applying the writes again would copy each page the write had unshared).
            file.durable.clone_from(&file.data);
        }
    }

    /// Drops `inode`'s pending writes without making them durable (a sync that failed): the
    /// kernel may mark the pages clean after a write-back error, so the writes stay visible
    /// until evicted but will never reach the disk. Whether there were any.
    fn drop_pending(&mut self, inode: u64) -> bool {
        if self.pending.take_inode(inode).is_empty() {
            return false;
        }
        self.file_mut(inode).diverged = true;
        true
    }

    /// Replays a recorded operation on this state (used by the enumerator).
    pub(crate) fn replay(&mut self, op: &TraceOp) {
        let result = match op {
            TraceOp::Create { path, inode } => {
                self.open(path, OpenMode::CreateNew).map(|created| {
                    assert_eq!(created, *inode, "replay of {} diverged", path.display());
                })
            }
            TraceOp::CreateDir { path } => self.create_dir(path),
            TraceOp::SyncDir { path } => self.sync_dir(path),
            TraceOp::Rename { from, to } => self.rename(from, to),
            TraceOp::HardLink { from, to } => self.hard_link(from, to),
            TraceOp::Unlink { path } => self.unlink(path),
            TraceOp::RemoveDirAll { path } => self.remove_dir_all(path),
            other => {
                self.apply(other.clone());
                Ok(())
            }
        };
        if let Err(error) = result {
            panic!("replay of {op:?} failed: {error}: the trace does not come from this model");
        }
    }

    // ---- crashes ----

    pub(crate) fn pending_write_summary(&self) -> Vec<PendingWrite> {
        self.pending
            .iter()
            .map(|p| match &p.change {
                FileChange::Write { offset, data } => PendingWrite {
                    inode: p.inode,
                    offset: *offset,
                    len: data.len() as u64,
                    is_set_len: false,
                },
                FileChange::SetLen(len) => PendingWrite {
                    inode: p.inode,
                    offset: *len,
                    len: 0,
                    is_set_len: true,
                },
            })
            .collect()
    }

    pub(crate) fn durable_only_plan(&self) -> CrashPlan {
        CrashPlan {
            writes: vec![WriteFate::Lost; self.pending.len()],
            dir_ops_kept: 0,
            dir_ops_subset: None,
        }
    }

    /// A seeded plan: each write kept, lost or torn with equal chance; a random prefix of the
    /// directory operations.
    pub(crate) fn random_plan(&mut self) -> CrashPlan {
        let sector_bytes = SECTOR_SIZES[self.rng.random_range(0..SECTOR_SIZES.len())];
        let summary = self.pending_write_summary();
        let writes = summary
            .iter()
            .map(|write| match self.rng.random_range(0..3u32) {
                0 => WriteFate::Lost,
                1 => WriteFate::Kept,
                _ if write.is_set_len => WriteFate::Lost,
                _ => {
                    let sectors = sector_pieces(write.offset, write.len, sector_bytes).len();
                    let kept = (0..sectors).map(|_| self.rng.random_bool(0.5)).collect();
                    WriteFate::Torn { sector_bytes, kept }
                }
            })
            .collect();
        let dir_ops_kept = self
            .rng
            .random_range(0..=self.pending_dir_operations().len());
        let dir_ops_subset = match self.dir_order {
            DirOrder::Ordered => None,
            DirOrder::Unordered => Some(
                (0..self.pending_dir_operations().len())
                    .map(|_| self.rng.random_bool(0.5))
                    .collect(),
            ),
        };
        CrashPlan {
            writes,
            dir_ops_kept,
            dir_ops_subset,
        }
    }

    /// Reverts to the durable images plus what `plan` says survived.
    fn power_loss_state(&mut self, plan: &CrashPlan) {
        if self.write_through {
            // Everything written was durable.
            for file in self.files.values_mut() {
                file.durable.clone_from(&file.data);
                file.diverged = false;
            }
        }
        assert_eq!(
            plan.writes.len(),
            self.pending.len(),
            "a crash plan needs one fate per write"
        );
        let operations = self.pending_dir_operations();
        assert!(
            plan.dir_ops_kept <= operations.len(),
            "more directory ops than pending"
        );
        if let Some(subset) = &plan.dir_ops_subset {
            assert_eq!(
                subset.len(),
                operations.len(),
                "an unordered plan needs one flag per pending directory operation"
            );
        }
        for dir in self.dirs.values_mut() {
            dir.entries.clone_from(&dir.durable);
        }
        let kept: Vec<DirOp> = match &plan.dir_ops_subset {
            // A prefix of the operations: a rename's two entries survive together, as on a
            // journaling file system (POSIX makes a rename atomic).
            None => std::mem::take(&mut self.pending_dir_ops)
                .into_iter()
                .filter(|op| {
                    operations
                        .iter()
                        .position(|&o| o == op.operation)
                        .is_some_and(|index| index < plan.dir_ops_kept)
                })
                .collect(),
            Some(subset) => std::mem::take(&mut self.pending_dir_ops)
                .into_iter()
                .filter(|op| {
                    operations
                        .iter()
                        .position(|&o| o == op.operation)
                        .is_some_and(|index| subset[index])
                })
                .collect(),
        };
        for op in kept {
            if !self.dirs.contains_key(&op.dir) {
                continue; // unreachable (see `collect_garbage`)
            }
            let entries = &mut self.dir_mut(op.dir).entries;
            match op.node {
                Some(node) => entries.insert(op.name, node),
                None => entries.remove(&op.name),
            };
        }
        for dir in self.dirs.values_mut() {
            dir.durable.clone_from(&dir.entries);
        }
        for file in self.files.values_mut() {
            file.data.clone_from(&file.durable);
        }
        for (pending, fate) in self.pending.take_all().into_iter().zip(&plan.writes) {
            let data = &mut self.file_mut(pending.inode).data;
            match (fate, &pending.change) {
                (WriteFate::Lost, _) => {}
                (WriteFate::Kept, change) => apply_change(data, change),
                (WriteFate::Torn { .. }, FileChange::SetLen(_)) => {}
                (
                    WriteFate::Torn { sector_bytes, kept },
                    FileChange::Write {
                        offset,
                        data: bytes,
                    },
                ) => {
                    let pieces = sector_pieces(*offset, bytes.len() as u64, *sector_bytes);
                    assert_eq!(pieces.len(), kept.len(), "torn fate must name every sector");
                    for ((start, end), _) in pieces.into_iter().zip(kept).filter(|(_, k)| **k) {
                        let from = to_usize(start - offset);
                        let to = to_usize(end - offset);
                        data.write(start, &bytes[from..to]);
                    }
                }
            }
        }
        for file in self.files.values_mut() {
            file.durable.clone_from(&file.data);
            file.diverged = false;
        }
        self.armed.clear();
        self.generation += 1;
        // Every handle went with the process; what no name reaches is gone.
        self.handles.clear();
        self.garbage = true;
        self.collect_garbage();
    }

    pub(crate) fn apply_power_loss(&mut self, plan: &CrashPlan) {
        self.apply(TraceOp::PowerLoss(plan.clone()));
    }

    /// A copy of this state after a power loss with `plan`, with an empty trace.
    pub(crate) fn crash_image(&self, plan: &CrashPlan) -> Self {
        let mut image = Self {
            trace: Vec::new(),
            pending: self.pending.clone(),
            pending_dir_ops: self.pending_dir_ops.clone(),
            ..self.clone_without_trace()
        };
        image.power_loss_state(plan);
        image
    }

    fn clone_without_trace(&self) -> Self {
        Self {
            faults: self.faults.clone(),
            rng: self.rng.clone(),
            generation: self.generation,
            next_id: self.next_id,
            files: self.files.clone(),
            dirs: self.dirs.clone(),
            pending: PendingWrites::default(),
            pending_dir_ops: Vec::new(),
            trace: Vec::new(),
            armed: Vec::new(),
            locks: BTreeMap::new(),
            next_lock_holder: self.next_lock_holder,
            dir_order: self.dir_order,
            next_dir_operation: self.next_dir_operation,
            recording: self.recording,
            write_through: self.write_through,
            space_limit: self.space_limit,
            handles: BTreeMap::new(),
            garbage: true,
            held_by_pending: false,
        }
    }

    pub(crate) fn rng(&mut self) -> &mut ChaCha8Rng {
        &mut self.rng
    }
}

#[cfg(test)]
mod tests {
    use super::sector_pieces;

    #[test]
    fn sector_pieces_split_at_absolute_boundaries() {
        assert_eq!(
            sector_pieces(100, 1000, 512),
            vec![(100, 512), (512, 1024), (1024, 1100)]
        );
        assert_eq!(sector_pieces(0, 4096, 4096), vec![(0, 4096)]);
        assert_eq!(
            sector_pieces(4095, 2, 4096),
            vec![(4095, 4096), (4096, 4097)]
        );
        assert!(sector_pieces(10, 0, 512).is_empty());
    }
}
