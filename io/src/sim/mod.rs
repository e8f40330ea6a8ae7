//! [`SimStorage`]: a seeded, deterministic in-memory disk that loses, tears and corrupts writes.
//!
//! # Model
//!
//! Every file (inode) has a *buffered* image (what reads see: the page cache) and a *durable*
//! image (what survives power loss). Every directory has buffered and durable entries. Each
//! unsynced file change (write, set_len) is kept in one global, ordered list of pending writes;
//! each unsynced directory change (an entry set or removed) in one global, ordered list of pending
//! directory operations.
//!
//! - `sync_data`/`sync_all` on a file apply its pending writes to its durable image, in order.
//! - `sync_dir` applies that directory's pending entry changes to its durable entries.
//! - **Process crash** ([`SimStorage::crash_process`]): buffered state survives (the kernel still
//!   holds it); only open handles become stale.
//! - **Power loss** ([`SimStorage::power_loss`]): every file and directory reverts to its durable
//!   image, then a [`CrashPlan`] decides what else reached the disk: each pending write survives
//!   whole, is lost, or is torn (a seeded subset of its 512-byte or 4 KiB sectors survives); a
//!   prefix of the pending directory operations survives (file systems journal metadata in
//!   order, so a later rename never survives without an earlier create).
//!
//! # Faults
//!
//! Seeded probabilities ([`FaultConfig`]) or one-shot faults armed on a file ([`Fault`]): `EIO` on
//! read, write or sync; short reads and writes; misdirected writes (the bytes land at another
//! offset or in another file while the call reports success); and bit rot at rest
//! ([`SimStorage::rot`]). A failed sync drops the file's pending writes without making them
//! durable, as Linux may after a write-back error ("fsyncgate"): a later successful sync then
//! does not bring them back.
//!
//! # Trace
//!
//! Every effective mutation is recorded in order ([`TraceOp`]), with the bytes written, so a
//! workload's trace can be replayed by the crash-state enumerator ([`crate::enumerate`]). The same
//! seed and the same workload give the same trace and the same crash images.

mod content;
pub(crate) mod state;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::{Error, ErrorKind, Op, Result};
use crate::path::components;
use crate::storage::{
    DirEntry, FileLock, LockHolder, OpenMode, ReadFile, ReadStorage, Storage, WriteFile,
};

pub(crate) use state::SimState;

/// Seeded fault probabilities, each in `[0, 1]`, checked on every matching operation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FaultConfig {
    pub read_error_probability: f64,
    pub write_error_probability: f64,
    pub sync_error_probability: f64,
    pub short_read_probability: f64,
    pub short_write_probability: f64,
    /// A write lands at another sector-aligned offset of the same file and reports success.
    pub misdirect_probability: f64,
}

/// A one-shot fault for the next matching operation on one file (see [`SimStorage::arm`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    ReadError,
    WriteError,
    SyncError,
    /// The next read returns at most this many bytes (at least 1).
    ShortRead(usize),
    /// The next write writes at most this many bytes (at least 1) and reports that count.
    ShortWrite(usize),
    /// The next write lands at `offset` instead, and reports success.
    MisdirectToOffset(u64),
    /// The next write lands in the file at `path` (same offset), and reports success.
    MisdirectToFile(PathBuf),
}

/// `errno`'s "no space left on device".
const ENOSPC: i32 = 28;

/// What became of one pending write at a power loss.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum WriteFate {
    Lost,
    Kept,
    /// Only the sectors marked `true` reached the disk; `kept[i]` is the `i`-th `sector_bytes`-
    /// aligned sector that the write touches, counted from the one holding its first byte.
    Torn {
        sector_bytes: u64,
        kept: Vec<bool>,
    },
}

/// How the pending directory operations survive a power loss.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum DirOrder {
    /// A prefix of them, in the order they were made: file systems that journal metadata in
    /// order (ext4, xfs).
    #[default]
    Ordered,
    /// Any subset, each operation independently (the two entries of a rename together): a
    /// file system that persists directory changes out of order, or of different directories
    /// independently. Under it, every `sync_dir` a protocol relies on shows.
    Unordered,
}

/// What survives a power loss beyond the durable images: one fate per pending write (in the
/// order they were issued) and which pending directory operations reached the disk: the first
/// `dir_ops_kept` operations (a rename's two entries are one), or, when `dir_ops_subset` is set ([`DirOrder::Unordered`]),
/// exactly the operations it flags (one flag per pending operation, in order).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CrashPlan {
    pub writes: Vec<WriteFate>,
    pub dir_ops_kept: usize,
    pub dir_ops_subset: Option<Vec<bool>>,
}

impl fmt::Display for CrashPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.dir_ops_subset {
            None => write!(f, "dir_ops_kept={} writes=[", self.dir_ops_kept)?,
            Some(subset) => {
                f.write_str("dir_ops=")?;
                for &kept in subset {
                    f.write_str(if kept { "1" } else { "0" })?;
                }
                f.write_str(" writes=[")?;
            }
        }
        for (index, fate) in self.writes.iter().enumerate() {
            if index > 0 {
                f.write_str(" ")?;
            }
            match fate {
                WriteFate::Lost => f.write_str("lost")?,
                WriteFate::Kept => f.write_str("kept")?,
                WriteFate::Torn { sector_bytes, kept } => {
                    write!(f, "torn/{sector_bytes}:")?;
                    for &sector in kept {
                        f.write_str(if sector { "1" } else { "0" })?;
                    }
                }
            }
        }
        f.write_str("]")
    }
}

/// One recorded, effective mutation (or marker) of a [`SimStorage`].
#[derive(Clone, PartialEq, Eq)]
pub enum TraceOp {
    Create {
        path: PathBuf,
        inode: u64,
    },
    Write {
        path: PathBuf,
        inode: u64,
        offset: u64,
        data: Arc<[u8]>,
    },
    SetLen {
        path: PathBuf,
        inode: u64,
        len: u64,
    },
    SyncData {
        path: PathBuf,
        inode: u64,
    },
    SyncAll {
        path: PathBuf,
        inode: u64,
    },
    /// A sync failed: the file's pending writes were dropped without becoming durable.
    SyncFailed {
        path: PathBuf,
        inode: u64,
    },
    SyncDir {
        path: PathBuf,
    },
    /// `sync_filesystem`: every pending write and directory operation made durable at once,
    /// but the writes of the files in `failed` (inodes), whose write-back failed and which are
    /// dropped as after a failed sync.
    SyncFs {
        failed: Vec<u64>,
    },
    CreateDir {
        path: PathBuf,
    },
    Rename {
        from: PathBuf,
        to: PathBuf,
    },
    HardLink {
        from: PathBuf,
        to: PathBuf,
    },
    Unlink {
        path: PathBuf,
    },
    RemoveDirAll {
        path: PathBuf,
    },
    /// Bit rot at rest: `mask` was XORed into the byte at `offset` of both images.
    Rot {
        path: PathBuf,
        inode: u64,
        offset: u64,
        mask: u8,
    },
    ProcessCrash,
    PowerLoss(CrashPlan),
    /// A label the workload put in the trace (e.g. "acknowledged op 7").
    Mark(String),
}

impl TraceOp {
    /// Whether the operation changes storage state (every op but a mark).
    #[must_use]
    pub fn is_storage_op(&self) -> bool {
        !matches!(self, Self::Mark(_))
    }
}

impl fmt::Debug for TraceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Create { path, inode } => write!(f, "create {} (inode {inode})", path.display()),
            Self::Write {
                path, offset, data, ..
            } => {
                write!(
                    f,
                    "write {} [{offset}, {})",
                    path.display(),
                    offset + data.len() as u64
                )
            }
            Self::SetLen { path, len, .. } => write!(f, "set_len {} {len}", path.display()),
            Self::SyncData { path, .. } => write!(f, "sync_data {}", path.display()),
            Self::SyncAll { path, .. } => write!(f, "sync_all {}", path.display()),
            Self::SyncFailed { path, .. } => write!(f, "sync FAILED {}", path.display()),
            Self::SyncDir { path } => write!(f, "sync_dir {:?}", path.display().to_string()),
            Self::SyncFs { failed } if failed.is_empty() => f.write_str("sync_filesystem"),
            Self::SyncFs { failed } => write!(f, "sync_filesystem FAILED for inodes {failed:?}"),
            Self::CreateDir { path } => write!(f, "create_dir {}", path.display()),
            Self::Rename { from, to } => write!(f, "rename {} -> {}", from.display(), to.display()),
            Self::HardLink { from, to } => {
                write!(f, "hard_link {} -> {}", from.display(), to.display())
            }
            Self::Unlink { path } => write!(f, "unlink {}", path.display()),
            Self::RemoveDirAll { path } => write!(f, "remove_dir_all {}", path.display()),
            Self::Rot {
                path, offset, mask, ..
            } => {
                write!(f, "rot {} at {offset} mask {mask:#04x}", path.display())
            }
            Self::ProcessCrash => f.write_str("process crash"),
            Self::PowerLoss(plan) => write!(f, "power loss ({plan})"),
            Self::Mark(label) => write!(f, "mark {label:?}"),
        }
    }
}

/// A summary of one pending (unsynced) write, for tests and the enumerator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingWrite {
    pub inode: u64,
    pub offset: u64,
    pub len: u64,
    pub is_set_len: bool,
}

/// The simulated disk. Clones share one disk (like two handles on the same device); use
/// [`SimStorage::fork`] for an independent copy.
#[derive(Clone)]
pub struct SimStorage {
    shared: Arc<Mutex<SimState>>,
}

impl fmt::Debug for SimStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimStorage").finish_non_exhaustive()
    }
}

impl SimStorage {
    /// An empty disk with no injected faults.
    #[must_use]
    pub fn new(seed: u64) -> Self {
        Self::with_faults(seed, FaultConfig::default())
    }

    /// An empty disk injecting faults with the given probabilities.
    #[must_use]
    pub fn with_faults(seed: u64, faults: FaultConfig) -> Self {
        Self::from_state(SimState::new(seed, faults))
    }

    /// Makes this a disk that never loses power (`true`): from now on every write is durable
    /// once written and none is kept pending, so a run that only crashes processes holds one
    /// copy of each byte instead of two (the page cache and the pending write). A power loss
    /// then loses nothing written (and the writes pending before the switch are kept too).
    pub fn set_write_through(&self, on: bool) {
        self.lock().write_through = on;
    }

    /// An empty disk that records every mutation in its [`SimStorage::trace`], for the crash
    /// enumerator. The trace holds every byte ever written, so a disk does not record unless
    /// asked to.
    #[must_use]
    pub fn recording(seed: u64) -> Self {
        let storage = Self::new(seed);
        storage.lock().recording = true;
        storage
    }

    /// Bytes this disk holds in memory: every distinct page of every file image (pages that the
    /// buffered and durable images of a file share count once), the pending writes, and the
    /// trace. What a simulated cluster costs.
    #[must_use]
    pub fn memory_bytes(&self) -> u64 {
        self.lock().memory_bytes()
    }

    /// Makes the disk `bytes` large (`None`: unbounded, the default): a write, an allocation or
    /// a length change that would take the files' lengths past it fails with `ENOSPC`, as a full
    /// file system does. Nothing already written is lost.
    pub fn set_space_limit(&self, bytes: Option<u64>) {
        self.lock().space_limit = bytes;
    }

    /// The sum of the files' lengths (what [`SimStorage::set_space_limit`] counts).
    pub fn used_bytes(&self) -> u64 {
        self.lock().used_bytes()
    }

    pub(crate) fn from_state(state: SimState) -> Self {
        Self {
            shared: Arc::new(Mutex::new(state)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, SimState> {
        // A panic while holding the lock leaves the state as consistent as the panicking test
        // left it; recovering the guard keeps the other threads' assertions meaningful.
        self.shared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// An independent copy of the whole disk (images, pending lists, trace, seed state).
    #[must_use]
    pub fn fork(&self) -> Self {
        Self::from_state(self.lock().clone())
    }

    /// Replaces the fault probabilities.
    pub fn set_faults(&self, faults: FaultConfig) {
        self.lock().faults = faults;
    }

    /// How the seeded plans of [`SimStorage::power_loss`] keep pending directory operations.
    pub fn set_dir_order(&self, order: DirOrder) {
        self.lock().dir_order = order;
    }

    /// Arms a one-shot fault for the next matching operation on the file at `path`.
    pub fn arm(&self, path: impl AsRef<Path>, fault: Fault) -> Result<()> {
        self.lock().arm(path.as_ref(), fault)
    }

    /// Flips the bits of `mask` in the byte at `offset` of the file, in both images (bit rot at
    /// rest, after the page cache dropped the good copy).
    pub fn rot(&self, path: impl AsRef<Path>, offset: u64, mask: u8) -> Result<()> {
        self.lock().rot(path.as_ref(), offset, mask)
    }

    /// Flips one seeded bit somewhere in the file; returns the offset and mask.
    pub fn rot_random(&self, path: impl AsRef<Path>) -> Result<(u64, u8)> {
        self.lock().rot_random(path.as_ref())
    }

    /// Puts a label in the trace, for the enumerator's check closure to read.
    pub fn mark(&self, label: impl Into<String>) {
        self.lock().record(TraceOp::Mark(label.into()));
    }

    /// The operations recorded so far. Panics on a disk that does not record (make it with
    /// [`SimStorage::recording`]): an empty trace would make an enumeration check nothing.
    #[must_use]
    pub fn trace(&self) -> Vec<TraceOp> {
        let state = self.lock();
        assert!(
            state.recording,
            "SimStorage::trace: this disk does not record; create it with SimStorage::recording"
        );
        state.trace.clone()
    }

    /// The pending (unsynced) writes, in issue order.
    #[must_use]
    pub fn pending_writes(&self) -> Vec<PendingWrite> {
        self.lock().pending_write_summary()
    }

    /// How many directory entry changes are not yet durable (a rename is two).
    #[must_use]
    pub fn pending_dir_ops(&self) -> usize {
        self.lock().pending_dir_ops.len()
    }

    /// A process crash: buffered state survives, every open handle becomes stale.
    pub fn crash_process(&self) {
        self.lock().apply(TraceOp::ProcessCrash);
    }

    /// A power loss with a seeded plan; returns the plan that was applied.
    pub fn power_loss(&self) -> CrashPlan {
        let mut state = self.lock();
        let plan = state.random_plan();
        state.apply_power_loss(&plan);
        plan
    }

    /// A power loss with the given plan (it must have one fate per pending write).
    pub fn power_loss_with(&self, plan: &CrashPlan) {
        self.lock().apply_power_loss(plan);
    }

    /// A power loss in which nothing unsynced survives.
    pub fn power_loss_durable_only(&self) {
        let mut state = self.lock();
        let plan = state.durable_only_plan();
        state.apply_power_loss(&plan);
    }

    /// A read-only view for checkers: its reads see what the disk's readers see, but inject no
    /// fault and draw no random number, so looking at a simulated disk never changes what
    /// happens to it next.
    #[must_use]
    pub fn quiet(&self) -> QuietSim {
        QuietSim(self.clone())
    }

    /// The buffered contents of a file (a test convenience; errors if it does not exist).
    pub fn read_all(&self, path: impl AsRef<Path>) -> Result<Vec<u8>> {
        let file = self.open_read(path)?;
        let mut bytes = vec![0; usize::try_from(file.len()?).unwrap_or(usize::MAX)];
        file.read_exact_at(0, &mut bytes)?;
        Ok(bytes)
    }
}

impl ReadStorage for SimStorage {
    type Reader = SimReader;

    fn reads_in_parallel(&self) -> bool {
        false // reads may draw from the seeded stream: in order, so a seed replays
    }

    fn open_read(&self, path: impl AsRef<Path>) -> Result<SimReader> {
        let path = path.as_ref();
        let mut state = self.lock();
        let inode = state.open(path, OpenMode::Existing)?;
        state.hold(inode);
        let generation = state.generation;
        drop(state);
        Ok(SimReader(SimFile {
            shared: Arc::clone(&self.shared),
            inode,
            path: path.to_path_buf(),
            generation,
            quiet: false,
        }))
    }

    fn list_dir(&self, path: impl AsRef<Path>) -> Result<Vec<DirEntry>> {
        self.lock().list_dir(path.as_ref())
    }

    fn exists(&self, path: impl AsRef<Path>) -> Result<bool> {
        let path = path.as_ref();
        let names = components(Op::Exists, path)?;
        Ok(self.lock().lookup(&names).is_some())
    }

    fn lock_holder(&self, path: impl AsRef<Path>) -> Result<Option<LockHolder>> {
        let state = self.lock();
        Ok(state
            .locks
            .get(path.as_ref())
            .filter(|(generation, _)| *generation == state.generation)
            .map(|(_, holder)| LockHolder { pid: Some(*holder) }))
    }
}

impl Storage for SimStorage {
    type File = SimFile;

    fn open(&self, path: impl AsRef<Path>, mode: OpenMode) -> Result<SimFile> {
        let path = path.as_ref();
        let mut state = self.lock();
        let inode = state.open(path, mode)?;
        state.hold(inode);
        let generation = state.generation;
        drop(state);
        Ok(SimFile {
            shared: Arc::clone(&self.shared),
            inode,
            path: path.to_path_buf(),
            generation,
            quiet: false,
        })
    }

    fn create_dir(&self, path: impl AsRef<Path>) -> Result<()> {
        self.lock().create_dir(path.as_ref())
    }

    fn sync_dir(&self, path: impl AsRef<Path>) -> Result<()> {
        self.lock().sync_dir(path.as_ref())
    }

    fn sync_filesystem(&self) -> Result<()> {
        self.lock().sync_filesystem()
    }

    fn can_sync_filesystem(&self) -> bool {
        true
    }

    fn rename(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> Result<()> {
        self.lock().rename(from.as_ref(), to.as_ref())
    }

    fn hard_link(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> Result<()> {
        self.lock().hard_link(from.as_ref(), to.as_ref())
    }

    fn unlink(&self, path: impl AsRef<Path>) -> Result<()> {
        self.lock().unlink(path.as_ref())
    }

    fn remove_dir_all(&self, path: impl AsRef<Path>) -> Result<()> {
        self.lock().remove_dir_all(path.as_ref())
    }

    fn lock(&self, path: impl AsRef<Path>) -> Result<FileLock> {
        let path = path.as_ref();
        // The lock file exists, as on a real file system (an `open` that creates it).
        drop(self.open(path, OpenMode::Create)?);
        let mut state = self.lock();
        let generation = state.generation;
        if let Some((held_in, holder)) = state.locks.get(path)
            && *held_in == generation
        {
            let pid = Some(*holder);
            return Err(Error::new(Op::Lock, path, ErrorKind::Locked { pid }));
        }
        let holder = state.next_lock_holder;
        state.next_lock_holder += 1;
        state.locks.insert(path.to_path_buf(), (generation, holder));
        Ok(FileLock::new(SimLock {
            shared: Arc::clone(&self.shared),
            path: path.to_path_buf(),
            generation,
            holder,
        }))
    }
}

/// A lock taken on a [`SimStorage`]: released when dropped, or by a crash of its generation.
struct SimLock {
    shared: Arc<Mutex<SimState>>,
    path: PathBuf,
    generation: u64,
    holder: u32,
}

impl Drop for SimLock {
    fn drop(&mut self) {
        let mut state = self
            .shared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if state.locks.get(&self.path) == Some(&(self.generation, self.holder)) {
            state.locks.remove(&self.path);
        }
    }
}

/// A read-only view of a [`SimStorage`] that injects no fault and draws no random number
/// ([`SimStorage::quiet`]).
#[derive(Clone, Debug)]
pub struct QuietSim(SimStorage);

impl ReadStorage for QuietSim {
    type Reader = SimReader;

    fn open_read(&self, path: impl AsRef<Path>) -> Result<SimReader> {
        let mut reader = self.0.open_read(path)?;
        reader.0.quiet = true;
        Ok(reader)
    }

    fn list_dir(&self, path: impl AsRef<Path>) -> Result<Vec<DirEntry>> {
        self.0.list_dir(path)
    }

    fn exists(&self, path: impl AsRef<Path>) -> Result<bool> {
        self.0.exists(path)
    }

    fn lock_holder(&self, path: impl AsRef<Path>) -> Result<Option<LockHolder>> {
        self.0.lock_holder(path)
    }
}

/// A file of [`SimStorage`] open for reading and writing.
pub struct SimFile {
    shared: Arc<Mutex<SimState>>,
    inode: u64,
    path: PathBuf,
    generation: u64,
    /// Reads draw no random number and inject no fault ([`SimStorage::quiet`]).
    quiet: bool,
}

/// A file of [`SimStorage`] open for reading only.
#[derive(Debug)]
pub struct SimReader(SimFile);

impl fmt::Debug for SimFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SimFile({}, inode {})", self.path.display(), self.inode)
    }
}

impl Drop for SimFile {
    fn drop(&mut self) {
        self.shared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .release(self.inode, self.generation);
    }
}

impl SimFile {
    fn state(&self, op: Op) -> Result<MutexGuard<'_, SimState>> {
        let state = self
            .shared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if state.generation != self.generation {
            return Err(Error::new(op, &self.path, ErrorKind::StaleHandle));
        }
        Ok(state)
    }
}

impl ReadFile for SimFile {
    fn path(&self) -> &Path {
        &self.path
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let state = self.state(Op::Read)?;
        if self.quiet {
            return Ok(state.file(self.inode).data.read(offset, buf));
        }
        let mut state = state;
        state.read(self.inode, &self.path, offset, buf)
    }

    fn len(&self) -> Result<u64> {
        Ok(self.state(Op::Len)?.file(self.inode).data.len())
    }
}

impl ReadFile for SimReader {
    fn path(&self) -> &Path {
        self.0.path()
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.0.read_at(offset, buf)
    }

    fn len(&self) -> Result<u64> {
        self.0.len()
    }
}

impl WriteFile for SimFile {
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<usize> {
        let mut state = self.state(Op::Write)?;
        if !state.room_for(self.inode, offset.saturating_add(buf.len() as u64)) {
            return Err(Error::new(Op::Write, &self.path, ErrorKind::Os(ENOSPC)).at(offset));
        }
        state.write(self.inode, &self.path, offset, buf)
    }

    fn set_len(&self, len: u64) -> Result<()> {
        let mut state = self.state(Op::SetLen)?;
        if !state.room_for(self.inode, len) {
            return Err(Error::new(Op::SetLen, &self.path, ErrorKind::Os(ENOSPC)));
        }
        state.set_len(self.inode, &self.path, len);
        Ok(())
    }

    fn allocate(&self, offset: u64, len: u64) -> Result<()> {
        let mut state = self.state(Op::Allocate)?;
        let end = offset.saturating_add(len);
        if !state.room_for(self.inode, end) {
            return Err(Error::new(Op::Allocate, &self.path, ErrorKind::Os(ENOSPC)).at(offset));
        }
        if end > state.file(self.inode).data.len() {
            state.set_len(self.inode, &self.path, end);
        }
        Ok(())
    }

    fn sync_data(&self) -> Result<()> {
        self.state(Op::SyncData)?
            .sync_file(self.inode, &self.path, Op::SyncData)
    }

    fn sync_all(&self) -> Result<()> {
        self.state(Op::SyncAll)?
            .sync_file(self.inode, &self.path, Op::SyncAll)
    }
}
