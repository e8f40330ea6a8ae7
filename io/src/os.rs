//! [`OsStorage`]: the real file system, through `rustix` system calls.
//!
//! Every path is resolved from the root directory's descriptor one name at a time with
//! `O_NOFOLLOW`, so neither `..` (refused lexically) nor a symbolic link anywhere in the path can
//! lead outside the root. Operations on a name (`unlinkat`, `renameat`, `linkat`, `mkdirat`) act
//! on the final name relative to its parent's descriptor and never follow a link either.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{AtFlags, FallocateFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use crate::error::{Error, ErrorKind, Op, Result};
use crate::path::{components, split_parent};
use crate::storage::{
    DirEntry, EntryKind, FileLock, LockHolder, Mapping, OpenMode, ReadFile, ReadStorage, Storage,
    WriteFile, lock_contents, parse_lock_contents, write_sync_then_write_sync_in_steps,
};
use crate::uring::{Ring, Step, with_thread_ring};

/// Cumulative I/O counters of the block device that holds a path (`/sys/dev/block/M:m/stat`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceCounters {
    /// 512-byte sectors read.
    pub sectors_read: u64,
    /// 512-byte sectors written.
    pub sectors_written: u64,
    /// Flush requests completed (each `fsync`/`fdatasync` that reaches a device with a volatile
    /// write cache issues one).
    pub flushes: u64,
}

/// The counters of the block device under `path`, or `None` where the kernel does not expose
/// them (no sysfs, a kernel before 5.5 without flush counters, a file system without a device).
#[must_use]
pub fn device_counters(path: impl AsRef<Path>) -> Option<DeviceCounters> {
    use std::os::unix::fs::MetadataExt;
    let device = std::fs::metadata(path).ok()?.dev();
    let (major, minor) = (rustix::fs::major(device), rustix::fs::minor(device));
    let stat = std::fs::read_to_string(format!("/sys/dev/block/{major}:{minor}/stat")).ok()?;
    let fields: Vec<u64> = stat
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .collect();
    Some(DeviceCounters {
        sectors_read: *fields.get(2)?,
        sectors_written: *fields.get(6)?,
        flushes: *fields.get(15)?,
    })
}

/// This process's resident memory and its peak, in bytes (`VmRSS` and `VmHWM` of
/// `/proc/self/status`), or `None` where the kernel does not expose them.
#[must_use]
pub fn resident_bytes() -> Option<(u64, u64)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))?
            .trim()
            .strip_suffix("kB")?
            .trim()
            .parse::<u64>()
            .ok()
            .map(|kib| kib * 1024)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// How many file descriptors this process holds open (the entries of `/proc/self/fd`, the
/// listing's own included), or `None` where the kernel does not expose them.
#[must_use]
pub fn open_file_count() -> Option<u64> {
    std::fs::read_dir("/proc/self/fd")
        .ok()
        .map(|entries| entries.count() as u64)
}

/// The mount that holds a path (from `/proc/self/mountinfo`): what a benchmark measured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountInfo {
    /// Where the file system is mounted.
    pub mount_point: PathBuf,
    /// Its type (`ext4`, `xfs`, `tmpfs`, `overlay`, ...).
    pub file_system: String,
    /// What is mounted: the device (`/dev/nvme0n1p2`) or a pseudo source (`tmpfs`).
    pub source: String,
    /// The mount's options, then the file system's own (`rw,relatime,...`).
    pub options: String,
}

impl MountInfo {
    /// Why figures measured here are not a disk's, if they are not: a file system that keeps
    /// files in memory, or one layered over another.
    #[must_use]
    pub fn warning(&self) -> Option<String> {
        let why = match self.file_system.as_str() {
            "tmpfs" | "ramfs" => "keeps files in memory: fdatasync reaches no disk",
            "overlay" | "overlayfs" | "aufs" => {
                "is layered over another file system: its figures are not the device's alone"
            }
            "9p" | "virtiofs" | "fuse" | "nfs" | "nfs4" | "cifs" => {
                "is a network or host-shared file system: syncs go through another machine"
            }
            other if other.starts_with("fuse.") => {
                "is a FUSE file system: syncs go through a user-space daemon"
            }
            _ => return None,
        };
        Some(format!(
            "{} at {} {why}; these are not disk baselines",
            self.file_system,
            self.mount_point.display()
        ))
    }
}

/// The mount holding `path` (the longest mount point above it), or `None` where
/// `/proc/self/mountinfo` is not available.
#[must_use]
pub fn mount_info(path: impl AsRef<Path>) -> Option<MountInfo> {
    let path = std::fs::canonicalize(path).ok()?;
    let table = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mut best: Option<MountInfo> = None;
    for line in table.lines() {
        // id parent major:minor root mount-point options [optional...] - type source super
        let Some((before, after)) = line.split_once(" - ") else {
            continue;
        };
        let fields: Vec<&str> = before.split(' ').collect();
        let rest: Vec<&str> = after.split(' ').collect();
        let (Some(mount_point), Some(options)) = (fields.get(4), fields.get(5)) else {
            continue;
        };
        let mount_point = PathBuf::from(unescape_mount_field(mount_point));
        if !path.starts_with(&mount_point) {
            continue;
        }
        let longer = best
            .as_ref()
            .is_none_or(|b| mount_point.as_os_str().len() >= b.mount_point.as_os_str().len());
        if longer {
            best = Some(MountInfo {
                mount_point,
                file_system: rest.first().copied().unwrap_or("").to_string(),
                source: rest.get(1).copied().unwrap_or("").to_string(),
                options: merge_options(options, rest.get(2).copied().unwrap_or("")),
            });
        }
    }
    best
}

/// The mount's options, then those of the file system it does not repeat.
fn merge_options(mount: &str, file_system: &str) -> String {
    let mut merged: Vec<&str> = mount.split(',').filter(|o| !o.is_empty()).collect();
    for option in file_system.split(',').filter(|o| !o.is_empty()) {
        if !merged.contains(&option) {
            merged.push(option);
        }
    }
    merged.join(",")
}

/// `/proc/self/mountinfo` escapes space, tab, newline and backslash as octal (`\040`).
fn unescape_mount_field(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let octal = bytes
            .get(index + 1..index + 4)
            .filter(|d| bytes[index] == b'\\' && d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match octal {
            Some(digits) => {
                let value = digits.iter().fold(0u32, |v, d| v * 8 + u32::from(d - b'0'));
                out.push(u8::try_from(value).unwrap_or(b'?'));
                index += 4;
            }
            None => {
                out.push(bytes[index]);
                index += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Storage on a directory of the real file system. Clones share the root directory's
/// descriptor, as `SimStorage` clones share one disk. Durable writes go through the io_uring
/// of the calling thread, where the kernel allows one.
#[derive(Clone, Debug)]
pub struct OsStorage {
    root: Arc<OwnedFd>,
    root_path: PathBuf,
    /// Whether durable writes use io_uring (the kernel allowed a ring when this was opened).
    uring: bool,
}

/// Which system interface `OsStorage` uses for durable appends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoPath {
    /// io_uring where the kernel allows it, plain system calls otherwise.
    Auto,
    /// Plain system calls only (`pwrite`, `fdatasync`).
    Syscalls,
}

fn kind_of(errno: Errno) -> ErrorKind {
    match errno {
        Errno::NOENT => ErrorKind::NotFound,
        Errno::EXIST => ErrorKind::AlreadyExists,
        Errno::NOTDIR => ErrorKind::NotADirectory,
        Errno::ISDIR => ErrorKind::IsADirectory,
        Errno::NOTEMPTY => ErrorKind::DirectoryNotEmpty,
        Errno::LOOP => ErrorKind::Symlink,
        other => ErrorKind::Os(other.raw_os_error()),
    }
}

fn os_error(op: Op, path: &Path, errno: Errno) -> Error {
    Error::new(op, path, kind_of(errno))
}

/// Retries a system call interrupted by a signal.
fn retry<T>(mut call: impl FnMut() -> rustix::io::Result<T>) -> rustix::io::Result<T> {
    loop {
        match call() {
            Err(Errno::INTR) => {}
            other => return other,
        }
    }
}

const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

impl OsStorage {
    /// Opens an existing directory as the storage root.
    pub fn open(root: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(root, IoPath::Auto)
    }

    /// Opens an existing directory as the storage root, choosing the I/O path.
    pub fn open_with(root: impl AsRef<Path>, io_path: IoPath) -> Result<Self> {
        let root_path = root.as_ref().to_path_buf();
        let fd = retry(|| rustix::fs::open(&root_path, DIR_FLAGS, Mode::empty()))
            .map_err(|errno| os_error(Op::Open, &root_path, errno))?;
        let uring = match io_path {
            IoPath::Auto => Ring::new().is_some(),
            IoPath::Syscalls => false,
        };
        Ok(Self {
            root: Arc::new(fd),
            root_path,
            uring,
        })
    }

    /// Opens `path` for writing with `O_DIRECT` (creating it), for benchmarks of the device
    /// itself. `Ok(None)` when the file system refuses direct I/O (tmpfs, some FUSE). Writes
    /// through the handle must use buffers, lengths and offsets aligned to the logical block
    /// size (4096 covers every device here).
    pub fn open_direct(&self, path: impl AsRef<Path>) -> Result<Option<OsFile>> {
        let flags = OFlags::RDWR | OFlags::CREATE | OFlags::DIRECT;
        match self.open_file(path.as_ref(), flags) {
            Ok(file) => Ok(Some(file)),
            Err(error) if error.kind == ErrorKind::Os(Errno::INVAL.raw_os_error()) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// Whether durable appends go through io_uring.
    #[must_use]
    pub fn uses_io_uring(&self) -> bool {
        self.uring
    }

    /// Creates the root directory (and its parents) if missing, then opens it.
    pub fn create(root: impl AsRef<Path>) -> Result<Self> {
        let root_path = root.as_ref();
        std::fs::create_dir_all(root_path).map_err(|error| {
            let kind = error.raw_os_error().map_or(ErrorKind::Os(0), |errno| {
                kind_of(Errno::from_raw_os_error(errno))
            });
            Error::new(Op::CreateDir, root_path, kind)
        })?;
        Self::open(root_path)
    }

    /// The directory this storage is rooted at, for messages.
    #[must_use]
    pub fn root_path(&self) -> &Path {
        &self.root_path
    }

    /// Opens the directory named by `names` (empty: the root), refusing symbolic links.
    fn walk(&self, op: Op, path: &Path, names: &[&OsStr]) -> Result<Option<OwnedFd>> {
        let mut current: Option<OwnedFd> = None;
        for name in names {
            let parent = current.as_ref().map_or(self.root.as_fd(), AsFd::as_fd);
            let fd = retry(|| rustix::fs::openat(parent, *name, DIR_FLAGS, Mode::empty()))
                .map_err(|errno| os_error(op, path, errno))?;
            current = Some(fd);
        }
        Ok(current)
    }

    fn with_dir<T>(
        &self,
        op: Op,
        path: &Path,
        names: &[&OsStr],
        action: impl FnOnce(BorrowedFd<'_>) -> rustix::io::Result<T>,
    ) -> Result<T> {
        let fd = self.walk(op, path, names)?;
        let dir = fd.as_ref().map_or(self.root.as_fd(), AsFd::as_fd);
        action(dir).map_err(|errno| os_error(op, path, errno))
    }

    fn open_file(&self, path: &Path, flags: OFlags) -> Result<OsFile> {
        let (parent, name) = split_parent(Op::Open, path)?;
        let dir = self.walk(Op::Open, path, &parent)?;
        let dir = dir.as_ref().map_or(self.root.as_fd(), AsFd::as_fd);
        let not_regular = |file_type: FileType| match file_type {
            FileType::RegularFile => None,
            FileType::Directory => Some(Error::new(Op::Open, path, ErrorKind::IsADirectory)),
            FileType::Symlink => Some(Error::new(Op::Open, path, ErrorKind::Symlink)),
            _ => Some(Error::new(Op::Open, path, ErrorKind::NotAFile)),
        };
        // Looked at before it is opened: opening a FIFO for reading blocks until a writer
        // comes, and opening a device may act on it. A missing file falls through to `openat`,
        // which creates it or reports it missing.
        if let Ok(stat) = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
            && let Some(error) = not_regular(FileType::from_raw_mode(stat.st_mode))
        {
            return Err(error);
        }
        // Non-blocking, in case the name was replaced by a FIFO since: the open then returns at
        // once and the `fstat` below refuses it.
        let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
        let fd = retry(|| rustix::fs::openat(dir, name, flags, Mode::from_raw_mode(0o644)))
            .map_err(|errno| os_error(Op::Open, path, errno))?;
        let stat = rustix::fs::fstat(&fd).map_err(|errno| os_error(Op::Open, path, errno))?;
        if let Some(error) = not_regular(FileType::from_raw_mode(stat.st_mode)) {
            return Err(error);
        }
        // A regular file: back to blocking mode (it has no effect on regular files on Linux,
        // but nothing downstream should depend on that).
        rustix::fs::fcntl_getfl(&fd)
            .and_then(|status| rustix::fs::fcntl_setfl(&fd, status - OFlags::NONBLOCK))
            .map_err(|errno| os_error(Op::Open, path, errno))?;
        Ok(OsFile {
            fd,
            path: path.to_path_buf(),
            uring: self.uring,
        })
    }

    fn remove_tree(&self, path: &Path, dir: BorrowedFd<'_>) -> Result<()> {
        for entry in read_entries(Op::RemoveDirAll, path, dir)? {
            if entry.kind == EntryKind::Dir {
                let child =
                    retry(|| rustix::fs::openat(dir, &entry.name, DIR_FLAGS, Mode::empty()))
                        .map_err(|errno| os_error(Op::RemoveDirAll, path, errno))?;
                self.remove_tree(&path.join(&entry.name), child.as_fd())?;
                rustix::fs::unlinkat(dir, &entry.name, AtFlags::REMOVEDIR)
            } else {
                rustix::fs::unlinkat(dir, &entry.name, AtFlags::empty())
            }
            .map_err(|errno| os_error(Op::RemoveDirAll, &path.join(&entry.name), errno))?;
        }
        Ok(())
    }
}

fn read_entries(op: Op, path: &Path, dir: BorrowedFd<'_>) -> Result<Vec<DirEntry>> {
    let mut entries = Vec::new();
    let reader = rustix::fs::Dir::read_from(dir).map_err(|errno| os_error(op, path, errno))?;
    for entry in reader {
        let entry = entry.map_err(|errno| os_error(op, path, errno))?;
        let name = OsStr::from_bytes(entry.file_name().to_bytes());
        if name == "." || name == ".." {
            continue;
        }
        let file_type = match entry.file_type() {
            FileType::Unknown => rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
                .map(|stat| FileType::from_raw_mode(stat.st_mode))
                .map_err(|errno| os_error(op, path, errno))?,
            known => known,
        };
        let kind = match file_type {
            FileType::RegularFile => EntryKind::File,
            FileType::Directory => EntryKind::Dir,
            _ => EntryKind::Other,
        };
        entries.push(DirEntry {
            name: OsString::from(name),
            kind,
        });
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(entries)
}

impl ReadStorage for OsStorage {
    type Reader = OsReader;

    fn open_read(&self, path: impl AsRef<Path>) -> Result<OsReader> {
        self.open_file(path.as_ref(), OFlags::RDONLY).map(OsReader)
    }

    fn list_dir(&self, path: impl AsRef<Path>) -> Result<Vec<DirEntry>> {
        let path = path.as_ref();
        let names = components(Op::ListDir, path)?;
        let fd = self.walk(Op::ListDir, path, &names)?;
        read_entries(
            Op::ListDir,
            path,
            fd.as_ref().map_or(self.root.as_fd(), AsFd::as_fd),
        )
    }

    fn exists(&self, path: impl AsRef<Path>) -> Result<bool> {
        let path = path.as_ref();
        let names = components(Op::Exists, path)?;
        let Some((name, parent)) = names.split_last() else {
            return Ok(true);
        };
        // A missing parent, or a parent that is a file, means the path does not exist.
        let dir = match self.walk(Op::Exists, path, parent) {
            Ok(dir) => dir,
            Err(error) if matches!(error.kind, ErrorKind::NotFound | ErrorKind::NotADirectory) => {
                return Ok(false);
            }
            Err(error) => return Err(error),
        };
        let dir = dir.as_ref().map_or(self.root.as_fd(), AsFd::as_fd);
        match rustix::fs::statat(dir, *name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(_) => Ok(true),
            Err(Errno::NOENT | Errno::NOTDIR) => Ok(false),
            Err(errno) => Err(os_error(Op::Exists, path, errno)),
        }
    }

    fn lock_holder(&self, path: impl AsRef<Path>) -> Result<Option<LockHolder>> {
        let path = path.as_ref();
        let file = match self.open_file(path, OFlags::RDONLY) {
            Ok(file) => file,
            Err(error) if error.is_not_found() => return Ok(None),
            Err(error) => return Err(error),
        };
        // A shared lock conflicts only with an exclusive holder; it is dropped with `file`.
        match rustix::fs::flock(&file.fd, rustix::fs::FlockOperation::NonBlockingLockShared) {
            Ok(()) => Ok(None),
            Err(Errno::WOULDBLOCK) => Ok(Some(LockHolder {
                pid: read_lock_pid(&file),
            })),
            Err(errno) => Err(os_error(Op::Lock, path, errno)),
        }
    }
}

/// The pid a lock holder wrote into its lock file, if it can be read.
fn read_lock_pid(file: &OsFile) -> Option<u32> {
    let mut bytes = [0u8; 64];
    let count = file.read_at(0, &mut bytes).ok()?;
    parse_lock_contents(&bytes[..count])
}

/// Whether this kernel's `syncfs` returns write-back errors: Linux 5.8 and later (before, it
/// returned success whatever happened, so nothing may rely on it).
static SYNCFS_REPORTS_ERRORS: std::sync::LazyLock<bool> = std::sync::LazyLock::new(|| {
    let uname = rustix::system::uname();
    let release = uname.release().to_string_lossy();
    let mut numbers = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse::<u32>().unwrap_or(0));
    let major = numbers.next().unwrap_or(0);
    let minor = numbers.next().unwrap_or(0);
    (major, minor) >= (5, 8)
});

impl Storage for OsStorage {
    type File = OsFile;

    fn open(&self, path: impl AsRef<Path>, mode: OpenMode) -> Result<OsFile> {
        let flags = match mode {
            OpenMode::Existing => OFlags::RDWR,
            OpenMode::Create => OFlags::RDWR | OFlags::CREATE,
            OpenMode::CreateNew => OFlags::RDWR | OFlags::CREATE | OFlags::EXCL,
        };
        self.open_file(path.as_ref(), flags)
    }

    fn create_dir(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let (parent, name) = split_parent(Op::CreateDir, path)?;
        self.with_dir(Op::CreateDir, path, &parent, |dir| {
            rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o755))
        })
    }

    fn sync_dir(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let names = components(Op::SyncDir, path)?;
        self.with_dir(Op::SyncDir, path, &names, |dir| {
            retry(|| rustix::fs::fsync(dir))
        })
    }

    fn rename(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> Result<()> {
        let (from, to) = (from.as_ref(), to.as_ref());
        let (from_parent, from_name) = split_parent(Op::Rename, from)?;
        let (to_parent, to_name) = split_parent(Op::Rename, to)?;
        let from_dir = self.walk(Op::Rename, from, &from_parent)?;
        let to_dir = self.walk(Op::Rename, to, &to_parent)?;
        rustix::fs::renameat(
            from_dir.as_ref().map_or(self.root.as_fd(), AsFd::as_fd),
            from_name,
            to_dir.as_ref().map_or(self.root.as_fd(), AsFd::as_fd),
            to_name,
        )
        .map_err(|errno| os_error(Op::Rename, from, errno))
    }

    fn hard_link(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> Result<()> {
        let (from, to) = (from.as_ref(), to.as_ref());
        let (from_parent, from_name) = split_parent(Op::HardLink, from)?;
        let (to_parent, to_name) = split_parent(Op::HardLink, to)?;
        let from_dir = self.walk(Op::HardLink, from, &from_parent)?;
        let to_dir = self.walk(Op::HardLink, to, &to_parent)?;
        rustix::fs::linkat(
            from_dir.as_ref().map_or(self.root.as_fd(), AsFd::as_fd),
            from_name,
            to_dir.as_ref().map_or(self.root.as_fd(), AsFd::as_fd),
            to_name,
            AtFlags::empty(),
        )
        .map_err(|errno| os_error(Op::HardLink, to, errno))
    }

    fn unlink(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let (parent, name) = split_parent(Op::Unlink, path)?;
        self.with_dir(Op::Unlink, path, &parent, |dir| {
            rustix::fs::unlinkat(dir, name, AtFlags::empty())
        })
    }

    fn remove_dir_all(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let (parent, name) = split_parent(Op::RemoveDirAll, path)?;
        let parent_fd = self.walk(Op::RemoveDirAll, path, &parent)?;
        let parent_fd = parent_fd.as_ref().map_or(self.root.as_fd(), AsFd::as_fd);
        let dir = retry(|| rustix::fs::openat(parent_fd, name, DIR_FLAGS, Mode::empty()))
            .map_err(|errno| os_error(Op::RemoveDirAll, path, errno))?;
        self.remove_tree(path, dir.as_fd())?;
        rustix::fs::unlinkat(parent_fd, name, AtFlags::REMOVEDIR)
            .map_err(|errno| os_error(Op::RemoveDirAll, path, errno))
    }

    fn sync_filesystem(&self) -> Result<()> {
        if !self.can_sync_filesystem() {
            return Err(Error::new(
                Op::SyncFs,
                Path::new(""),
                ErrorKind::Unsupported("syncfs that reports write-back errors (Linux 5.8)"),
            ));
        }
        // On the root's descriptor, opened with this storage: `syncfs` reports every write-back
        // error on the file system since the descriptor was opened (the kernel keeps one error
        // sequence per file system and a cursor per open file), so an error in a write-back the
        // kernel started on its own, before this call, is reported too.
        retry(|| rustix::fs::syncfs(self.root.as_fd()))
            .map_err(|errno| os_error(Op::SyncFs, Path::new(""), errno))
    }

    fn can_sync_filesystem(&self) -> bool {
        *SYNCFS_REPORTS_ERRORS
    }

    fn lock(&self, path: impl AsRef<Path>) -> Result<FileLock> {
        let path = path.as_ref();
        let file = self.open_file(path, OFlags::RDWR | OFlags::CREATE)?;
        // flock: held by this open file description until it is closed, released by the kernel
        // if the process dies.
        match rustix::fs::flock(
            &file.fd,
            rustix::fs::FlockOperation::NonBlockingLockExclusive,
        ) {
            Ok(()) => {}
            Err(Errno::WOULDBLOCK) => {
                let pid = read_lock_pid(&file);
                return Err(Error::new(Op::Lock, path, ErrorKind::Locked { pid }));
            }
            Err(errno) => return Err(os_error(Op::Lock, path, errno)),
        }
        // Who holds it, for the refusals of others (not durable: nothing relies on it).
        file.set_len(0)?;
        file.write_all_at(0, lock_contents(std::process::id()).as_bytes())?;
        Ok(FileLock::new(file))
    }
}

/// A file of [`OsStorage`] open for reading and writing.
#[derive(Debug)]
pub struct OsFile {
    fd: OwnedFd,
    path: PathBuf,
    /// Durable writes through this thread's io_uring (see [`OsStorage`]).
    uring: bool,
}

/// A file of [`OsStorage`] open for reading only (`O_RDONLY`).
#[derive(Debug)]
pub struct OsReader(OsFile);

impl OsFile {
    fn error(&self, op: Op, errno: Errno) -> Error {
        os_error(op, &self.path, errno)
    }

    /// The bytes an io_uring write at `offset` moved, or its error (a completion's result is
    /// the count, or a negative errno).
    fn ring_written(&self, result: i32, offset: u64) -> Result<usize> {
        if result < 0 {
            return Err(self
                .error(Op::Write, Errno::from_raw_os_error(-result))
                .at(offset));
        }
        Ok(usize::try_from(result).unwrap_or(0))
    }

    /// An io_uring fdatasync's result.
    fn ring_synced(&self, result: i32) -> Result<()> {
        if result < 0 {
            return Err(self.error(Op::SyncData, Errno::from_raw_os_error(-result)));
        }
        Ok(())
    }
}

impl ReadFile for OsFile {
    fn path(&self) -> &Path {
        &self.path
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        retry(|| rustix::io::pread(&self.fd, &mut *buf, offset))
            .map_err(|errno| self.error(Op::Read, errno).at(offset))
    }

    fn len(&self) -> Result<u64> {
        let stat = rustix::fs::fstat(&self.fd).map_err(|errno| self.error(Op::Len, errno))?;
        Ok(u64::try_from(stat.st_size).unwrap_or(0))
    }

    fn map(&self) -> Result<Option<Mapping>> {
        if self.len()? == 0 {
            return Ok(None); // an empty mapping is an error on Linux; nothing to read anyway
        }
        // SAFETY: the mapping is read-only and private to this process. It is only sound while
        // no other process truncates the file: the toolkit owns its data directory, and the
        // trait documents that callers must own the file they map.
        #[expect(
            unsafe_code,
            reason = "memory-mapping a file is unsafe by nature (see SAFETY)"
        )]
        let map = unsafe { memmap2::Mmap::map(&self.fd) };
        match map {
            Ok(map) => {
                // Boot reads front to back: let the kernel read ahead.
                let _ = map.advise(memmap2::Advice::Sequential);
                Ok(Some(Mapping { map }))
            }
            Err(_) => Ok(None), // e.g. a file system without mmap: read_at still works
        }
    }

    fn seek_data(&self, offset: u64) -> Result<Option<u64>> {
        match rustix::fs::seek(&self.fd, rustix::fs::SeekFrom::Data(offset)) {
            Ok(start) => Ok(Some(start)),
            // No data at or after `offset`.
            Err(Errno::NXIO) => Ok(None),
            // A file system without SEEK_DATA: everything is data.
            Err(Errno::INVAL | Errno::OPNOTSUPP) => Ok((offset < self.len()?).then_some(offset)),
            Err(errno) => Err(self.error(Op::Read, errno).at(offset)),
        }
    }

    fn seek_hole(&self, offset: u64) -> Result<u64> {
        match rustix::fs::seek(&self.fd, rustix::fs::SeekFrom::Hole(offset)) {
            Ok(start) => Ok(start),
            Err(Errno::NXIO | Errno::INVAL | Errno::OPNOTSUPP) => self.len(),
            Err(errno) => Err(self.error(Op::Read, errno).at(offset)),
        }
    }
}
impl ReadFile for OsReader {
    fn path(&self) -> &Path {
        self.0.path()
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.0.read_at(offset, buf)
    }

    fn len(&self) -> Result<u64> {
        self.0.len()
    }

    fn seek_data(&self, offset: u64) -> Result<Option<u64>> {
        self.0.seek_data(offset)
    }

    fn map(&self) -> Result<Option<Mapping>> {
        self.0.map()
    }

    fn seek_hole(&self, offset: u64) -> Result<u64> {
        self.0.seek_hole(offset)
    }
}

impl WriteFile for OsFile {
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<usize> {
        retry(|| rustix::io::pwrite(&self.fd, buf, offset))
            .map_err(|errno| self.error(Op::Write, errno).at(offset))
    }

    fn set_len(&self, len: u64) -> Result<()> {
        retry(|| rustix::fs::ftruncate(&self.fd, len))
            .map_err(|errno| self.error(Op::SetLen, errno))
    }

    fn allocate(&self, offset: u64, len: u64) -> Result<()> {
        match retry(|| rustix::fs::fallocate(&self.fd, FallocateFlags::empty(), offset, len)) {
            Ok(()) => Ok(()),
            // File systems without preallocation (tmpfs on old kernels, some FUSE): grow instead.
            Err(Errno::OPNOTSUPP) => {
                let end = offset.saturating_add(len);
                if end > self.len()? {
                    self.set_len(end)
                } else {
                    Ok(())
                }
            }
            Err(errno) => Err(self.error(Op::Allocate, errno).at(offset)),
        }
    }

    fn sync_data(&self) -> Result<()> {
        retry(|| rustix::fs::fdatasync(&self.fd)).map_err(|errno| self.error(Op::SyncData, errno))
    }

    fn sync_all(&self) -> Result<()> {
        retry(|| rustix::fs::fsync(&self.fd)).map_err(|errno| self.error(Op::SyncAll, errno))
    }

    fn write_all_and_sync_data(&self, offset: u64, buf: &[u8]) -> Result<()> {
        let outcome = self
            .uring
            .then(|| with_thread_ring(|ring| ring.write_and_sync(self.fd.as_fd(), offset, buf)))
            .flatten();
        let Some(outcome) = outcome else {
            self.write_all_at(offset, buf)?;
            return self.sync_data();
        };
        let written = self.ring_written(outcome.write, offset)?;
        if written < buf.len() {
            // A short write broke the link (the sync was cancelled): finish with system calls.
            self.write_all_at(offset + written as u64, &buf[written..])?;
            return self.sync_data();
        }
        self.ring_synced(outcome.sync)
    }

    fn write_sync_then_write_sync(
        &self,
        offset: u64,
        buf: &[u8],
        then: &Self,
        then_offset: u64,
        then_buf: &[u8],
        in_flight: &mut dyn FnMut(),
    ) -> Result<()> {
        if !self.uring {
            in_flight();
            return write_sync_then_write_sync_in_steps(
                self,
                offset,
                buf,
                then,
                then_offset,
                then_buf,
            );
        }
        let mut steps = Vec::with_capacity(4);
        if !buf.is_empty() {
            steps.push(Step::Write {
                fd: self.fd.as_fd(),
                offset,
                buf,
            });
        }
        steps.push(Step::SyncData {
            fd: self.fd.as_fd(),
        });
        steps.push(Step::Write {
            fd: then.fd.as_fd(),
            offset: then_offset,
            buf: then_buf,
        });
        steps.push(Step::SyncData {
            fd: then.fd.as_fd(),
        });
        let mut in_flight = Some(in_flight);
        let results = with_thread_ring(|ring| {
            ring.chain(
                &steps,
                in_flight.take().unwrap_or_else(|| unreachable!("once")),
            )
        });
        let Some(results) = results else {
            // No ring on this thread: the steps one by one.
            if let Some(in_flight) = in_flight {
                in_flight();
            }
            return write_sync_then_write_sync_in_steps(
                self,
                offset,
                buf,
                then,
                then_offset,
                then_buf,
            );
        };
        let mut results = results[..steps.len()].iter().copied();
        let mut next = || results.next().unwrap_or(0);
        // Checked in order: a failed step cancelled every later one (`-ECANCELED`), so the
        // first failure is the one to report, and nothing after it happened.
        if !buf.is_empty() {
            let written = self.ring_written(next(), offset)?;
            if written < buf.len() {
                // A short write broke the link: finish the rest step by step.
                return write_sync_then_write_sync_in_steps(
                    self,
                    offset + written as u64,
                    &buf[written..],
                    then,
                    then_offset,
                    then_buf,
                );
            }
        }
        self.ring_synced(next())?;
        let written = then.ring_written(next(), then_offset)?;
        if written < then_buf.len() {
            then.write_all_at(then_offset + written as u64, &then_buf[written..])?;
            return then.sync_data();
        }
        then.ring_synced(next())
    }
}
