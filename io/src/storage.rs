//! The `Storage` traits: the only way the toolkit touches files.
//!
//! Reading and writing are split. [`ReadStorage`] and [`ReadFile`] can only look; [`Storage`] and
//! [`WriteFile`] can change things. Code that must not write (fsck's check mode, inspect) takes a
//! `ReadStorage`, and [`crate::ReadOnly`] wraps any storage so that it offers nothing else: a
//! write there is a compile error, not a runtime refusal.
//!
//! # Durability contract (every backend)
//!
//! Modelled on Linux and ext4/xfs, and exactly what `SimStorage` simulates on power loss:
//! - `write_at` and `set_len` change the buffered image at once (visible to every later read
//!   through any handle) and become durable only after `sync_data` or `sync_all` on the file
//!   returns. Until then a power loss may keep each unsynced write whole, drop it, or keep some of
//!   its sectors (torn at a 512-byte or 4 KiB boundary).
//! - `sync_data` makes the file's data and its size durable; `sync_all` also its other metadata.
//!   Neither makes the file's *name* durable.
//! - Creating a file, `create_dir`, `rename`, `hard_link`, `unlink` and `remove_dir_all` are
//!   visible at once and atomic for visibility, but durable only after `sync_dir` on each parent
//!   directory they changed (both parents for a rename across directories). Unsynced directory
//!   changes are lost after a power loss in order: a later one never survives without every
//!   earlier one.
//! - A failed `sync_*` or write may have lost data even though a later sync succeeds (the kernel
//!   may drop dirty pages after a write-back error). Callers must treat the failure as sticky:
//!   poison the component and recover from disk after reopening; never retry.

use std::ffi::OsString;
use std::path::Path;

use crate::error::{Error, ErrorKind, Op, Result};

/// A read-only memory map of a whole file (see [`ReadFile::map`]).
pub struct Mapping {
    pub(crate) map: memmap2::Mmap,
}

impl std::ops::Deref for Mapping {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.map
    }
}

impl std::fmt::Debug for Mapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Mapping({} bytes)", self.map.len())
    }
}

/// What a directory entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EntryKind {
    File,
    Dir,
    /// A symbolic link or special file: listed so tools can report it, never opened.
    Other,
}

/// One entry of [`ReadStorage::list_dir`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DirEntry {
    pub name: OsString,
    pub kind: EntryKind,
}

/// How [`Storage::open`] treats a missing or present file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenMode {
    /// The file must exist.
    Existing,
    /// Open the file, creating it empty if it does not exist.
    Create,
    /// Create the file; fail with `AlreadyExists` if it exists.
    CreateNew,
}

/// A file open for reading.
pub trait ReadFile: Send + Sync + std::fmt::Debug {
    /// The path this handle was opened under (relative to the storage root). After a rename the
    /// handle still reads the same file; the path is for messages only.
    fn path(&self) -> &Path;

    /// Reads up to `buf.len()` bytes at `offset`. May return fewer bytes than asked even before
    /// the end of file; returns 0 only at or past the end of file.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize>;

    /// The current length of the file in bytes (buffered image).
    fn len(&self) -> Result<u64>;

    /// Whether the file is empty.
    fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// The whole file mapped read-only into memory, where the backend can (`OsStorage`);
    /// `None` otherwise, and callers read with `read_at`. A mapping is a view of the file as
    /// it is: the caller must own the file (no other process may truncate it while mapped).
    fn map(&self) -> Result<Option<Mapping>> {
        Ok(None)
    }

    /// The start of the first region at or after `offset` that may hold data, or `None` if
    /// everything from `offset` to the end is a hole (reads as zeros). Holes include space that
    /// was preallocated and never written. The default treats the whole file as data.
    fn seek_data(&self, offset: u64) -> Result<Option<u64>> {
        Ok((offset < self.len()?).then_some(offset))
    }

    /// The start of the first hole at or after `offset` (the end of the file if none). The
    /// default: the end of the file.
    fn seek_hole(&self, _offset: u64) -> Result<u64> {
        self.len()
    }

    /// The whole file (its length as [`ReadFile::len`] reports it), looping over short reads.
    fn read_all(&self) -> Result<Vec<u8>> {
        let len = self.len()?;
        // EFBIG: a file larger than this platform's address space.
        let len = usize::try_from(len)
            .map_err(|_| Error::new(Op::Read, self.path(), ErrorKind::Os(27)).at(0))?;
        let mut bytes = vec![0u8; len];
        self.read_exact_at(0, &mut bytes)?;
        Ok(bytes)
    }

    /// Reads exactly `buf.len()` bytes at `offset`, looping over short reads.
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let mut done = 0usize;
        while done < buf.len() {
            let position = offset + done as u64;
            let count = self.read_at(position, &mut buf[done..])?;
            if count == 0 {
                return Err(
                    Error::new(Op::Read, self.path(), ErrorKind::UnexpectedEof).at(position)
                );
            }
            done += count;
        }
        Ok(())
    }
}

/// A file open for reading and writing.
pub trait WriteFile: ReadFile {
    /// Writes up to `buf.len()` bytes at `offset`, extending the file (and zero-filling any gap)
    /// as needed. May write fewer bytes than asked. Durable only after `sync_data`/`sync_all`.
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<usize>;

    /// Sets the length: bytes past a shrink are gone, bytes of a growth read as zero. Durable only
    /// after `sync_data`/`sync_all`.
    fn set_len(&self, len: u64) -> Result<()>;

    /// Reserves space for `[offset, offset + len)` so later writes there cannot fail for lack of
    /// space, growing the file (with zeros) if the range ends past it; never shrinks. Durable
    /// like `set_len`. Backends without preallocation grow the file instead.
    fn allocate(&self, offset: u64, len: u64) -> Result<()>;

    /// Makes the file's data and size durable (`fdatasync`).
    fn sync_data(&self) -> Result<()>;

    /// Makes the file's data and all its metadata durable (`fsync`).
    fn sync_all(&self) -> Result<()>;

    /// Writes all of `buf` at `offset`, then makes the file's data durable: the two steps of
    /// every durable append. `OsStorage` submits them as one linked io_uring chain where the
    /// kernel allows it; the default is `write_all_at` then `sync_data`.
    fn write_all_and_sync_data(&self, offset: u64, buf: &[u8]) -> Result<()> {
        self.write_all_at(offset, buf)?;
        self.sync_data()
    }

    /// A publication's two steps, in order: writes `buf` at `offset` of this file and makes its
    /// data durable, then writes `then_buf` at `then_offset` of `then` and makes that durable.
    /// The second write starts only once the first sync has completed, so it may vouch for the
    /// first (a WAL's frontier naming its entries). An empty `buf` only syncs.
    ///
    /// `in_flight` is other work for the caller to do while the disk works: `OsStorage` submits
    /// the whole sequence as one linked io_uring chain where the kernel allows it and runs
    /// `in_flight` while the chain is in flight; the default runs `in_flight` first, then the
    /// steps one by one.
    fn write_sync_then_write_sync(
        &self,
        offset: u64,
        buf: &[u8],
        then: &Self,
        then_offset: u64,
        then_buf: &[u8],
        in_flight: &mut dyn FnMut(),
    ) -> Result<()>
    where
        Self: Sized,
    {
        in_flight();
        write_sync_then_write_sync_in_steps(self, offset, buf, then, then_offset, then_buf)
    }

    /// Writes zeros over `[offset, offset + len)`, through a bounded (1 MiB) buffer whatever the
    /// length. Durable only after `sync_data`/`sync_all`, like any write.
    fn write_zeros(&self, offset: u64, len: u64) -> Result<()> {
        const CHUNK: u64 = 1 << 20;
        let zeros = vec![0u8; usize::try_from(len.min(CHUNK)).unwrap_or(0)];
        let mut done = 0u64;
        while done < len {
            let count = (len - done).min(CHUNK);
            self.write_all_at(offset + done, &zeros[..usize::try_from(count).unwrap_or(0)])?;
            done += count;
        }
        Ok(())
    }

    /// Writes all of `buf` at `offset`, looping over short writes.
    fn write_all_at(&self, offset: u64, buf: &[u8]) -> Result<()> {
        let mut done = 0usize;
        while done < buf.len() {
            let position = offset + done as u64;
            let count = self.write_at(position, &buf[done..])?;
            if count == 0 {
                return Err(Error::new(Op::Write, self.path(), ErrorKind::WriteZero).at(position));
            }
            done += count;
        }
        Ok(())
    }
}

/// [`WriteFile::write_sync_then_write_sync`] one step at a time (its default, and what a backend
/// with a faster way falls back to).
pub fn write_sync_then_write_sync_in_steps<F: WriteFile>(
    file: &F,
    offset: u64,
    buf: &[u8],
    then: &F,
    then_offset: u64,
    then_buf: &[u8],
) -> Result<()> {
    if buf.is_empty() {
        file.sync_data()?;
    } else {
        file.write_all_and_sync_data(offset, buf)?;
    }
    then.write_all_and_sync_data(then_offset, then_buf)
}

/// An exclusive advisory lock on a file ([`Storage::lock`]), held until this value is dropped.
/// The kernel releases it when the holding process dies, so a crashed holder never leaves a
/// node locked.
pub struct FileLock {
    _held: Box<dyn Send + Sync>,
}

impl FileLock {
    pub(crate) fn new(held: impl Send + Sync + 'static) -> Self {
        Self {
            _held: Box::new(held),
        }
    }
}

impl std::fmt::Debug for FileLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FileLock")
    }
}

/// Who holds a lock ([`ReadStorage::lock_holder`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockHolder {
    /// The process id the holder wrote into the lock file (`None`: not yet written, or
    /// unreadable).
    pub pid: Option<u32>,
}

/// The bytes a lock holder writes into its lock file.
pub(crate) fn lock_contents(pid: u32) -> String {
    format!("pid {pid}\n")
}

/// The pid in a lock file's bytes, if they are what [`lock_contents`] wrote.
pub(crate) fn parse_lock_contents(bytes: &[u8]) -> Option<u32> {
    std::str::from_utf8(bytes)
        .ok()?
        .trim()
        .strip_prefix("pid ")?
        .parse()
        .ok()
}

/// Read access to a tree of files under a root. Paths are relative to the root; the empty path
/// names the root. Absolute paths, `..` and symbolic links are refused.
pub trait ReadStorage: Send + Sync {
    type Reader: ReadFile;

    /// Opens an existing file for reading.
    fn open_read(&self, path: impl AsRef<Path>) -> Result<Self::Reader>;

    /// The entries of a directory, sorted by name (`.` and `..` excluded).
    fn list_dir(&self, path: impl AsRef<Path>) -> Result<Vec<DirEntry>>;

    /// Whether a file or directory exists at `path` (a missing parent is `false`).
    fn exists(&self, path: impl AsRef<Path>) -> Result<bool>;

    /// Whether someone holds the lock on `path` ([`Storage::lock`]), and who: `None` when the
    /// file does not exist or nobody holds it. Changes nothing; on `OsStorage` it takes a shared
    /// lock for the instant of the probe.
    fn lock_holder(&self, path: impl AsRef<Path>) -> Result<Option<LockHolder>>;

    /// Whether reads from several threads at once behave as the same reads in any order would.
    /// `false` for a simulated disk whose reads draw from its seeded stream (short reads,
    /// `EIO`): its callers read in one thread, so that a seed runs the same every time.
    fn reads_in_parallel(&self) -> bool {
        true
    }
}

/// Read and write access to a tree of files under a root. See the module docs for the
/// durability contract every method keeps.
pub trait Storage: ReadStorage {
    type File: WriteFile;

    /// Opens a file for reading and writing. A file this creates is durable by name only after
    /// `sync_dir` of its parent.
    fn open(&self, path: impl AsRef<Path>, mode: OpenMode) -> Result<Self::File>;

    /// Creates a directory (its parent must exist). Durable after `sync_dir` of the parent.
    fn create_dir(&self, path: impl AsRef<Path>) -> Result<()>;

    /// Makes the directory's entries durable: files created in it, renamed into or out of it,
    /// linked or unlinked in it. The empty path is the root.
    fn sync_dir(&self, path: impl AsRef<Path>) -> Result<()>;

    /// Renames a file or directory, atomically replacing a file at `to`. Atomic for visibility;
    /// durable after `sync_dir` of both parents.
    fn rename(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> Result<()>;

    /// Gives the file at `from` a second name `to` (which must not exist). Durable after
    /// `sync_dir` of `to`'s parent.
    fn hard_link(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> Result<()>;

    /// Removes a file's name. Durable after `sync_dir` of the parent.
    fn unlink(&self, path: impl AsRef<Path>) -> Result<()>;

    /// Removes a directory and everything under it. Durable after `sync_dir` of the parent.
    fn remove_dir_all(&self, path: impl AsRef<Path>) -> Result<()>;

    /// Makes every write and directory operation made through this storage durable at once,
    /// with every other on its file system (Linux `syncfs`: one device flush, where a sync per file
    /// is one each). Fails if any write-back on the file system failed since this storage
    /// was opened: after an error, nothing written since may be taken as durable. Only where
    /// [`Storage::can_sync_filesystem`] says so; otherwise it refuses with
    /// [`ErrorKind::Unsupported`](crate::ErrorKind).
    fn sync_filesystem(&self) -> Result<()> {
        Err(crate::Error::new(
            crate::Op::SyncFs,
            Path::new(""),
            crate::ErrorKind::Unsupported("sync_filesystem"),
        ))
    }

    /// Whether [`Storage::sync_filesystem`] makes everything durable and reports every failed
    /// write-back (Linux 5.8 and later; before, `syncfs` returned success whatever happened).
    /// A caller that may defer syncs to it checks this first.
    fn can_sync_filesystem(&self) -> bool {
        false
    }

    /// Takes an exclusive lock on the file at `path` (created if missing) and writes this
    /// process's id into it; fails at once with [`ErrorKind::Locked`] (naming the holder's pid)
    /// if someone else holds it. The lock lasts until the returned value is dropped. It says
    /// who owns a directory; it is not durable state (nothing is synced).
    fn lock(&self, path: impl AsRef<Path>) -> Result<FileLock>;
}
