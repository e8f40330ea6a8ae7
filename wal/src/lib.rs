//! The write-ahead log: hash-chained entries `[256-byte header][body]` in files named by their
//! first op, group commit, and a published durable frontier that boot trusts and nothing else.
//!
//! Invariants:
//! - the log is one hash chain: op `n + 1` follows op `n`, and its `parent` is op `n`'s header
//!   checksum, across file boundaries;
//! - [`Wal::published`] names only bytes that were `fdatasync`ed before the frontier naming them
//!   was written, and the frontier itself was `fdatasync`ed before the publication returned;
//! - a publication in flight never blocks appends: they go to a buffer the next publication takes;
//! - unpublished bytes are bounded by `Config::unpublished_bytes_max` (an append past it is
//!   refused with `Backpressure`, never dropped);
//! - after a failed write or sync the log is poisoned and refuses everything until reopened;
//! - boot ([`Wal::open`], [`check`]) trusts the published prefix only; see [`boot`].

pub mod boot;
mod error;
pub mod frontier;
pub mod scan;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};

use iggy_format::checksum::Checksum;
use iggy_format::constants::HEADER_SIZE;
use iggy_format::{Header, header::stored_checksum};
use iggy_io::{OpenMode, ReadFile, Storage, WriteFile};

pub use boot::{Action, Finding, FindingKind, Mode, Naming, Report, check, check_named};
pub use error::WalError;
pub use frontier::Frontier;
pub use scan::StopReason;

use boot::{FRONTIER_FILE, FRONTIER_TEMP_FILE};

/// The default bound on unpublished bytes: a replica's checkpoint interval (it publishes
/// whatever a backup acknowledged only at checkpoints, DESIGN §4) plus the largest prepare.
pub const UNPUBLISHED_BYTES_MAX: u64 = CHECKPOINT_INTERVAL_BYTES + PREPARE_BYTES_MAX;

/// Bytes a replica appends between checkpoints.
pub const CHECKPOINT_INTERVAL_BYTES: u64 = 128 << 20;

/// The largest prepare (header and body) a group takes.
pub const PREPARE_BYTES_MAX: u64 = 16 << 20;

/// How a log is laid out and bounded.
#[derive(Clone, Debug)]
pub struct Config {
    /// The consensus group this log belongs to (checked at boot against the frontier).
    pub group: u128,
    /// This process's boot incarnation, stamped on every publication.
    pub incarnation: u64,
    /// Each file is preallocated to this size; an entry that does not fit starts a new file.
    pub file_size_bytes: u64,
    /// Write zeros over a new file's preallocated space, so later `fdatasync`s need no metadata.
    pub zero_fill: bool,
    /// Buffered bytes written out (without a sync) once this many accumulate.
    pub flush_bytes: usize,
    /// Most bytes appended but not published; an append past it fails with `Backpressure`.
    pub unpublished_bytes_max: u64,
    /// How files are named: by first op (`.wal`), or by a key the appender gives (`.log`).
    pub naming: Naming,
}

impl Config {
    /// Defaults for a group: 64 MiB files preallocated with `fallocate` (not zero-filled: see
    /// `docs/benchmarks.md`, "Zero-fill"), 1 MiB flushes, and [`UNPUBLISHED_BYTES_MAX`]
    /// unpublished.
    #[must_use]
    pub fn new(group: u128) -> Self {
        Self {
            group,
            incarnation: 0,
            file_size_bytes: 64 << 20,
            zero_fill: false,
            flush_bytes: 1 << 20,
            unpublished_bytes_max: UNPUBLISHED_BYTES_MAX,
            naming: Naming::ByOp,
        }
    }
}

/// A verified entry read back from the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub header: Header,
    pub body: Vec<u8>,
}

/// A retained file of the log (see [`Wal::files`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileInfo {
    /// The key in its name (its first op in an op-named log).
    pub key: u64,
    pub first_op: u64,
    /// Entries appended to it (published or not).
    pub entries: u64,
    /// End of those entries.
    pub end: u64,
    pub path: PathBuf,
}

/// An entry to read: its op, its file, and its offset and size there.
type EntryLocation<F> = (u64, Arc<F>, u64, u64);

/// Where an entry lies (see [`Wal::locate`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Location {
    pub key: u64,
    pub offset: u64,
    pub size: u64,
}

/// What an append did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Appended {
    /// Queued as the new head; durable once a publication covers it.
    Queued { op: u64 },
    /// The entry is the current head already (same checksum): nothing to do.
    Duplicate { op: u64 },
}

struct LogFile<F> {
    first_op: u64,
    /// The key in the file's name (`first_op` for op-named logs).
    key: u64,
    path: PathBuf,
    file: Arc<F>,
    /// Offset of op `first_op + i` at `offsets[i]`.
    offsets: Vec<u64>,
    /// End of the bytes assigned to entries (written or buffered).
    end: u64,
    /// Bytes from the start known to be written (entries or zeros), not merely allocated: a
    /// publication into them needs no block-map update in its `fdatasync`.
    prepared: u64,
}

struct Chunk<F> {
    first_op: u64,
    file: Arc<F>,
    offset: u64,
    bytes: Vec<u8>,
}

struct State<F> {
    files: Vec<LogFile<F>>,
    head_op: u64,
    head_checksum: Checksum,
    pending: Vec<Chunk<F>>,
    pending_bytes: usize,
    /// Files written since the last publication (keyed by first op).
    dirty: Vec<(u64, Arc<F>)>,
    published: Frontier,
    publishing: bool,
    /// The publication in flight writes zeros ahead of the head file's end: appends must not
    /// write there meanwhile (they stay buffered).
    padding: bool,
    /// Callers of `wait_published` asleep while a publication is in flight. Whenever none is in
    /// flight and this is not empty, one of them has been woken to look again (and lead).
    waiters: Vec<Waiter>,
    poisoned: Option<String>,
    appended_bytes: u64,
    published_bytes: u64,
}

/// A caller of `wait_published` parked until a publication covers `op`. Each is woken on its
/// own (no herd of every caller on one condition variable: docs/benchmarks.md).
struct Waiter {
    op: u64,
    thread: std::thread::Thread,
    /// Set once, just before the caller is unparked: the publication that covers `op`, or `None`
    /// to look again under the lock (to lead the next publication, or to see a poisoned log or
    /// a truncated head).
    outcome: Arc<OnceLock<Option<Frontier>>>,
}

impl Waiter {
    fn wake(self, outcome: Option<Frontier>) {
        // Set at most once: a waiter leaves the list when it is woken.
        let _ = self.outcome.set(outcome);
        self.thread.unpark();
    }
}

/// Wakes every waiter to look again under the lock (poisoned log, truncated head).
fn wake_all_to_look_again(waiters: &mut Vec<Waiter>) {
    for waiter in waiters.drain(..) {
        waiter.wake(None);
    }
}

/// Publications a caller of `wait_published` leads for others after its own, while others wait
/// (each one's own waiters are woken during the next one's I/O).
const EXTRA_PUBLICATIONS: usize = 4;

/// The write-ahead log of one consensus group.
pub struct Wal<S: Storage> {
    storage: S,
    dir: PathBuf,
    config: Config,
    frontier_file: S::File,
    state: Mutex<State<S::File>>,
    published_changed: Condvar,
}

impl<S: Storage> std::fmt::Debug for Wal<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wal")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

fn poisoned_error(dir: &Path, cause: &str) -> WalError {
    WalError::Poisoned {
        dir: dir.to_path_buf(),
        cause: cause.to_string(),
    }
}

impl<S: Storage> Wal<S> {
    /// Creates an empty log in `dir` whose first entry will be `first_op`, chained to `parent`
    /// (the checksum of the entry before it, or 0 for a new history). The first file is keyed
    /// `first_op`; see [`Wal::create_keyed`].
    pub fn create(
        storage: S,
        dir: &Path,
        config: Config,
        first_op: u64,
        parent: Checksum,
    ) -> Result<Self, WalError> {
        Self::create_keyed(storage, dir, config, first_op, parent, first_op)
    }

    /// [`Wal::create`] with the first file named by `first_key` (with [`Naming::ByKey`], e.g.
    /// the offset of a partition's first message).
    pub fn create_keyed(
        storage: S,
        dir: &Path,
        config: Config,
        first_op: u64,
        parent: Checksum,
        first_key: u64,
    ) -> Result<Self, WalError> {
        assert!(first_op >= 1, "ops start at 1");
        assert!(
            config.naming == Naming::ByKey || first_key == first_op,
            "an op-named log's files are keyed by their first op"
        );
        if boot::analyze(&storage, dir, config.group, config.naming)?.is_some() {
            return Err(WalError::AlreadyExists {
                dir: dir.to_path_buf(),
            });
        }
        if !storage.exists(dir)? {
            storage.create_dir(dir)?;
            // The log directory must be durable in its parent before anything relies on it.
            storage.sync_dir(dir.parent().unwrap_or(Path::new("")))?;
        }
        let temp = dir.join(FRONTIER_TEMP_FILE);
        if storage.exists(&temp)? {
            storage.unlink(&temp)?;
        }
        let empty = Frontier {
            sequence: 0,
            generation: 0,
            group: config.group,
            incarnation: config.incarnation,
            head_op: first_op - 1,
            head_checksum: parent,
            head_file: first_op,
            published_length: 0,
            head_file_key: first_key,
        };
        let file = storage.open(&temp, OpenMode::CreateNew)?;
        for sequence in [0, 1] {
            let slot = Frontier { sequence, ..empty };
            file.write_all_at(slot.offset(), &frontier::encode(&slot))?;
        }
        // Both slots durable before the name makes the log exist.
        file.sync_data()?;
        drop(file);
        storage.rename(&temp, dir.join(FRONTIER_FILE))?;
        // The frontier's name must be durable before the first WAL file can exist beside it
        // (WAL files without a frontier refuse to boot).
        storage.sync_dir(dir)?;
        let frontier_file = storage.open(dir.join(FRONTIER_FILE), OpenMode::Existing)?;
        let published = Frontier {
            sequence: 1,
            ..empty
        };
        let wal = Self::from_parts(
            storage,
            dir,
            config,
            frontier_file,
            published,
            Vec::new(),
            parent,
        );
        wal.create_file(&mut wal.lock(), first_op, first_key)?;
        Ok(wal)
    }

    /// Boots the log in `dir`: verifies the published prefix, discards what lies past it, and
    /// opens it for appends. `Ok(None)` when there is no log (fresh). `mode` is `Open` or
    /// `Repair` (use [`check`] for `Check`: it needs only a read-only storage).
    pub fn open(
        storage: S,
        dir: &Path,
        config: Config,
        mode: Mode,
    ) -> Result<Option<(Self, Report)>, WalError> {
        assert!(
            mode != Mode::Check,
            "Check mode is `check()`: it must not hold a writable storage"
        );
        let Some(plan) = boot::plan(&storage, dir, config.group, config.naming)? else {
            return Ok(None);
        };
        Self::open_planned(storage, dir, config, plan).map(Some)
    }

    /// Carries out a boot [`boot::Plan`] made on `dir` (by [`boot::plan`], on this storage) and
    /// opens the log: what [`Wal::open`] does after deciding. The caller decided between the two
    /// whether to boot the group at all, so nothing is changed for a group it refuses.
    pub fn open_planned(
        storage: S,
        dir: &Path,
        config: Config,
        plan: boot::Plan,
    ) -> Result<(Self, Report), WalError> {
        let mut analysis = plan.0;
        boot::apply(&storage, &analysis, config.incarnation)?;
        let published = analysis.new_frontier.unwrap_or(analysis.frontier);
        let mut files = Vec::new();
        let mut missing_head = None;
        for boot_file in std::mem::take(&mut analysis.files) {
            if !storage.exists(&boot_file.path)? {
                missing_head = Some((boot_file.first_op, boot_file.key));
                continue;
            }
            files.push(LogFile {
                first_op: boot_file.first_op,
                key: boot_file.key,
                path: boot_file.path.clone(),
                file: Arc::new(storage.open(&boot_file.path, OpenMode::Existing)?),
                offsets: boot_file.offsets,
                end: boot_file.end,
                prepared: boot_file.end,
            });
        }
        let frontier_file = storage.open(dir.join(FRONTIER_FILE), OpenMode::Existing)?;
        let wal = Self::from_parts(
            storage,
            dir,
            config,
            frontier_file,
            published,
            files,
            analysis.head_checksum,
        );
        if let Some((first_op, key)) = missing_head {
            wal.create_file(&mut wal.lock(), first_op, key)?;
        }
        Ok((wal, analysis.report))
    }

    fn from_parts(
        storage: S,
        dir: &Path,
        config: Config,
        frontier_file: S::File,
        published: Frontier,
        files: Vec<LogFile<S::File>>,
        head_checksum: Checksum,
    ) -> Self {
        let state = State {
            files,
            head_op: published.head_op,
            head_checksum,
            pending: Vec::new(),
            pending_bytes: 0,
            dirty: Vec::new(),
            published,
            publishing: false,
            padding: false,
            waiters: Vec::new(),
            poisoned: None,
            appended_bytes: 0,
            published_bytes: 0,
        };
        Self {
            storage,
            dir: dir.to_path_buf(),
            config,
            frontier_file,
            state: Mutex::new(state),
            published_changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<S::File>> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn wait<'a>(&self, guard: MutexGuard<'a, State<S::File>>) -> MutexGuard<'a, State<S::File>> {
        self.published_changed
            .wait(guard)
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Locks, waits for no publication in flight, and checks the log is not poisoned.
    fn lock_idle(&self) -> Result<MutexGuard<'_, State<S::File>>, WalError> {
        let mut state = self.lock();
        while state.publishing {
            state = self.wait(state);
        }
        match &state.poisoned {
            Some(cause) => Err(poisoned_error(&self.dir, cause)),
            None => Ok(state),
        }
    }

    fn poison(&self, state: &mut State<S::File>, error: &WalError) {
        if state.poisoned.is_none() {
            tracing::error!(dir = %self.dir.display(), %error, "WAL poisoned");
            state.poisoned = Some(error.to_string());
        }
        wake_all_to_look_again(&mut state.waiters);
    }

    /// Creates the file whose first op is `first_op`, named by `key`, preallocated, and makes
    /// its name durable.
    fn create_file(
        &self,
        state: &mut State<S::File>,
        first_op: u64,
        key: u64,
    ) -> Result<(), WalError> {
        if let Some(last) = state.files.last()
            && key <= last.key
        {
            return Err(WalError::KeyNotIncreasing {
                dir: self.dir.clone(),
                key,
                last_key: last.key,
            });
        }
        let result = (|| {
            let path = self.dir.join(self.config.naming.file_name(key));
            let file = self.storage.open(&path, OpenMode::CreateNew)?;
            file.allocate(0, self.config.file_size_bytes)?;
            if self.config.zero_fill {
                file.write_zeros(0, self.config.file_size_bytes)?;
            }
            // The preallocated extent (and its zeros) durable now, so that publishing into it
            // later is a data-only fdatasync.
            file.sync_all()?;
            // The file's name must be durable before a frontier may name it.
            self.storage.sync_dir(&self.dir)?;
            Ok::<_, iggy_io::Error>(LogFile {
                first_op,
                key,
                path,
                file: Arc::new(file),
                offsets: Vec::new(),
                end: 0,
                prepared: if self.config.zero_fill {
                    self.config.file_size_bytes
                } else {
                    0
                },
            })
        })();
        match result {
            Ok(file) => {
                state.files.push(file);
                Ok(())
            }
            Err(error) => {
                let error = WalError::from(error);
                self.poison(state, &error);
                Err(error)
            }
        }
    }

    /// Queues an entry as the new head. It is durable once a publication covers it
    /// ([`Wal::publish`], [`Wal::wait_published`]).
    pub fn append(&self, header: &Header, body: &[u8]) -> Result<Appended, WalError> {
        self.append_entry(header, body, header.op)
    }

    /// [`Wal::append`] for a keyed log: if the entry starts a new file, the file is named `key`
    /// (which must exceed every earlier file's key).
    pub fn append_keyed(
        &self,
        header: &Header,
        body: &[u8],
        key: u64,
    ) -> Result<Appended, WalError> {
        self.append_entry(header, body, key)
    }

    /// `append`: the header is checked against the head, and the body against the header.
    fn append_entry(&self, header: &Header, body: &[u8], key: u64) -> Result<Appended, WalError> {
        let encoded = header.encode();
        let checksum = stored_checksum(&encoded);
        let mut state = self.lock();
        if let Some(cause) = &state.poisoned {
            return Err(poisoned_error(&self.dir, cause));
        }
        if header.op == state.head_op && checksum == state.head_checksum {
            return Ok(Appended::Duplicate { op: header.op });
        }
        if header.op <= state.head_op {
            return Err(WalError::Conflict { op: header.op });
        }
        if header.op != state.head_op + 1 {
            return Err(WalError::OpGap {
                head: state.head_op,
                found: header.op,
            });
        }
        if header.parent != state.head_checksum {
            return Err(WalError::ParentMismatch {
                op: header.op,
                parent: header.parent,
                head_checksum: state.head_checksum,
            });
        }
        if !header.body_matches(body) {
            return Err(WalError::BadEntry {
                op: header.op,
                reason: "body does not match the header's size and body checksum",
            });
        }
        if header.group != self.config.group {
            return Err(WalError::BadEntry {
                op: header.op,
                reason: "the entry belongs to another group",
            });
        }
        self.append_locked(&mut state, header.op, &encoded, checksum, body, key)
    }

    /// Queues the entry `encoded` + `body` (op `op`, header checksum `checksum`), already checked
    /// to be the head's successor, under the lock.
    fn append_locked(
        &self,
        state: &mut MutexGuard<'_, State<S::File>>,
        op: u64,
        encoded: &[u8; HEADER_SIZE],
        checksum: Checksum,
        body: &[u8],
        key: u64,
    ) -> Result<Appended, WalError> {
        let size = (HEADER_SIZE + body.len()) as u64;
        let unpublished = state.appended_bytes - state.published_bytes;
        if unpublished + size > self.config.unpublished_bytes_max {
            return Err(WalError::Backpressure {
                dir: self.dir.clone(),
                unpublished_bytes: unpublished,
                budget_bytes: self.config.unpublished_bytes_max,
            });
        }
        // A keyed file is named by the key when it starts; one whose key would not grow (a
        // partition segment with no batch yet: only offset stores and no-ops) keeps growing
        // past its size instead of taking a second file of the same name.
        let needs_new_file = state.files.last().is_none_or(|head| {
            head.end > 0
                && head.end + size > self.config.file_size_bytes
                && (self.config.naming == Naming::ByOp || key > head.key)
        });
        if needs_new_file {
            self.create_file(state, op, key)?;
        }
        let state = &mut **state;
        let head = state
            .files
            .last_mut()
            .unwrap_or_else(|| unreachable!("a head file exists"));
        let offset = head.end;
        head.offsets.push(offset);
        head.end += size;
        let first_op = head.first_op;
        match state.pending.last_mut() {
            Some(chunk)
                if chunk.first_op == first_op
                    && chunk.offset + chunk.bytes.len() as u64 == offset =>
            {
                chunk.bytes.extend_from_slice(encoded);
                chunk.bytes.extend_from_slice(body);
            }
            _ => {
                let mut bytes = Vec::with_capacity(HEADER_SIZE + body.len());
                bytes.extend_from_slice(encoded);
                bytes.extend_from_slice(body);
                state.pending.push(Chunk {
                    first_op,
                    file: Arc::clone(&head.file),
                    offset,
                    bytes,
                });
            }
        }
        state.pending_bytes += HEADER_SIZE + body.len();
        state.head_op = op;
        state.head_checksum = checksum;
        state.appended_bytes += size;
        if state.pending_bytes >= self.config.flush_bytes && !state.padding {
            self.flush(state)?;
        }
        Ok(Appended::Queued { op })
    }

    /// Appends `body` as the next op and returns the op. The body is hashed before the lock is
    /// taken and the header is built on the head under it, so concurrent appenders need no
    /// coordination of their own (and never retry).
    pub fn append_body(&self, body: &[u8], view: u32, timestamp_ns: u64) -> Result<u64, WalError> {
        self.append_body_with_key(body, view, timestamp_ns, None)
    }

    /// [`Wal::append_body`] for a keyed log: if the entry starts a new file, the file is named
    /// `key` (see [`Wal::append_keyed`]).
    pub fn append_body_keyed(
        &self,
        body: &[u8],
        view: u32,
        timestamp_ns: u64,
        key: u64,
    ) -> Result<u64, WalError> {
        self.append_body_with_key(body, view, timestamp_ns, Some(key))
    }

    fn append_body_with_key(
        &self,
        body: &[u8],
        view: u32,
        timestamp_ns: u64,
        key: Option<u64>,
    ) -> Result<u64, WalError> {
        let checksum_body = iggy_format::checksum(body);
        let mut state = self.lock();
        if let Some(cause) = &state.poisoned {
            return Err(poisoned_error(&self.dir, cause));
        }
        let op = state.head_op + 1;
        let header = header_with(
            self.config.group,
            op,
            state.head_checksum,
            view,
            timestamp_ns,
            body,
            checksum_body,
        );
        let encoded = header.encode();
        let checksum = stored_checksum(&encoded);
        self.append_locked(&mut state, op, &encoded, checksum, body, key.unwrap_or(op))?;
        Ok(op)
    }

    /// Writes the buffered chunks (no sync), under the lock.
    fn flush(&self, state: &mut State<S::File>) -> Result<(), WalError> {
        let chunks = std::mem::take(&mut state.pending);
        state.pending_bytes = 0;
        for chunk in chunks {
            if let Err(error) = chunk.file.write_all_at(chunk.offset, &chunk.bytes) {
                let error = WalError::from(error);
                self.poison(state, &error);
                return Err(error);
            }
            mark_dirty(&mut state.dirty, chunk.first_op, &chunk.file);
        }
        Ok(())
    }

    /// Writes the buffered entries to their files without a sync (they stay unpublished: boot
    /// discards them unless a publication covers them first).
    pub fn write_buffered(&self) -> Result<(), WalError> {
        let mut state = self.lock_idle()?;
        self.flush(&mut state)
    }

    /// Publishes everything appended before this call: makes it durable, then records the new
    /// frontier durably. Concurrent callers share one publication (group commit).
    pub fn publish(&self) -> Result<Frontier, WalError> {
        let head = self.lock().head_op;
        self.wait_published(head)
    }

    /// Returns once a publication covers `op`, publishing if no other caller is (group commit:
    /// waiters arriving during a publication are covered by the next one, which one of them runs).
    /// A caller that publishes goes on to lead up to `EXTRA_PUBLICATIONS` more while others wait
    /// on entries appended meanwhile, so the disk is not idle while a new leader wakes.
    /// An `op` past the head (never appended, or cut by `truncate_after`) is `OutOfRange`.
    pub fn wait_published(&self, op: u64) -> Result<Frontier, WalError> {
        let mut state = self.lock();
        let mut yielded = false;
        loop {
            if let Some(cause) = &state.poisoned {
                return Err(poisoned_error(&self.dir, cause));
            }
            if state.head_op < op {
                // Never appended (or cut by truncate_after): nothing to vouch for.
                let first_op = state.first_op();
                let head_op = state.head_op;
                return Err(WalError::OutOfRange {
                    what: "wait_published",
                    op,
                    first_op,
                    head_op,
                });
            }
            if state.published.head_op >= op {
                let published = state.published;
                if !state.publishing
                    && let Some(next) = state.waiters.pop()
                {
                    // Woken to lead, and found its op published by another caller since: the
                    // rest still need a leader.
                    drop(state);
                    next.wake(None);
                }
                return Ok(published);
            }
            if state.publishing {
                let outcome = Arc::new(OnceLock::new());
                state.waiters.push(Waiter {
                    op,
                    thread: std::thread::current(),
                    outcome: Arc::clone(&outcome),
                });
                drop(state);
                let outcome = loop {
                    // `park` may return spuriously; the outcome is set before the unpark.
                    if let Some(outcome) = outcome.get() {
                        break *outcome;
                    }
                    std::thread::park();
                };
                if let Some(published) = outcome {
                    return Ok(published);
                }
                state = self.lock();
                continue;
            }
            if !yielded {
                // Before leading a publication, let the appenders the last one just released
                // append again, so this one carries a larger group (64 appenders: 44-51k to
                // 53-67k records/s, docs/benchmarks.md). A scheduling hint, not a wait; every
                // check above runs again.
                yielded = true;
                drop(state);
                std::thread::yield_now();
                state = self.lock();
                continue;
            }
            // This publication takes every entry appended so far, `op` among them.
            state = self.run_publication(state, Vec::new())?;
            let mine = state.published;
            let mut extra = 0;
            loop {
                let head = state.published.head_op;
                let (covered, rest) = std::mem::take(&mut state.waiters)
                    .into_iter()
                    .partition(|waiter| waiter.op <= head);
                state.waiters = rest;
                if extra < EXTRA_PUBLICATIONS && !state.waiters.is_empty() && state.head_op > head {
                    // Callers sleep on entries appended during that publication: lead theirs
                    // at once, and wake the callers it published while the disk works on this
                    // one (waking dozens of threads costs more than a sync here:
                    // docs/benchmarks.md).
                    match self.run_publication(state, covered) {
                        Ok(next) => state = next,
                        // It failed, poisoned the log and woke every caller; this caller's
                        // entries were published before it.
                        Err(_) => return Ok(mine),
                    }
                    extra += 1;
                    continue;
                }
                // The callers still waiting need a leader: one of them looks again.
                let next_leader = state.waiters.pop();
                let published = state.published;
                drop(state);
                for waiter in covered {
                    waiter.wake(Some(published));
                }
                if let Some(waiter) = next_leader {
                    waiter.wake(None);
                }
                // Callers of `lock_idle` wait for no publication in flight.
                self.published_changed.notify_all();
                return Ok(published);
            }
        }
    }

    /// One publication, with the lock released during its I/O so appends continue.
    ///
    /// `covered` are callers the previous publication covers: they are woken while this one's
    /// I/O is in flight. A publication that succeeds does not wake its own waiters: its caller
    /// does, or the next publication. One that fails wakes everyone.
    fn run_publication<'a>(
        &'a self,
        mut state: MutexGuard<'a, State<S::File>>,
        mut covered: Vec<Waiter>,
    ) -> Result<MutexGuard<'a, State<S::File>>, WalError> {
        state.publishing = true;
        let previous = state.published;
        let chunks = std::mem::take(&mut state.pending);
        state.pending_bytes = 0;
        let mut dirty = std::mem::take(&mut state.dirty);
        for chunk in &chunks {
            mark_dirty(&mut dirty, chunk.first_op, &chunk.file);
        }
        let head = state
            .files
            .last()
            .unwrap_or_else(|| unreachable!("a head file exists"));
        let next = Frontier {
            sequence: state.published.sequence + 1,
            incarnation: self.config.incarnation,
            head_op: state.head_op,
            head_checksum: state.head_checksum,
            head_file: head.first_op,
            published_length: head.end,
            head_file_key: head.key,
            ..state.published
        };
        let appended_bytes = state.appended_bytes;
        let pad = zeros_ahead(head, &chunks, self.config.file_size_bytes);
        state.padding = pad.is_some();
        drop(state);

        let frontier_bytes = frontier::encode(&next);
        let mut wake = || {
            for waiter in covered.drain(..) {
                waiter.wake(Some(previous));
            }
        };
        let result = (|| {
            // The entries must be durable before the frontier that names them is written. Each
            // dirty file's last write goes out with its sync; the last file's also carries the
            // frontier's write and sync (one io_uring chain where the kernel allows it).
            for (index, (first_op, file)) in dirty.iter().enumerate() {
                let mine: Vec<&Chunk<S::File>> = chunks
                    .iter()
                    .filter(|chunk| chunk.first_op == *first_op)
                    .collect();
                let (last, before) = match mine.split_last() {
                    Some((last, before)) => ((last.offset, last.bytes.as_slice()), before),
                    // Flushed earlier without a sync: the sync alone.
                    None => ((0, &[][..]), &[][..]),
                };
                for chunk in before {
                    file.write_all_at(chunk.offset, &chunk.bytes)?;
                }
                if let Some(pad) = pad.filter(|pad| pad.first_op == *first_op) {
                    // Zeros past the entries, synced with them: the next publications write
                    // into written blocks.
                    file.write_zeros(pad.from, pad.to - pad.from)?;
                }
                if index + 1 < dirty.len() {
                    if last.1.is_empty() {
                        file.sync_data()?;
                    } else {
                        file.write_all_and_sync_data(last.0, last.1)?;
                    }
                } else {
                    // The publication exists once this returns: nothing is acknowledged
                    // before it.
                    file.write_sync_then_write_sync(
                        last.0,
                        last.1,
                        &self.frontier_file,
                        next.offset(),
                        &frontier_bytes,
                        &mut wake,
                    )?;
                }
            }
            if dirty.is_empty() {
                self.frontier_file
                    .write_all_and_sync_data(next.offset(), &frontier_bytes)?;
            }
            Ok::<_, iggy_io::Error>(())
        })();
        // Where no chain ran: nothing written since the last publication, or a write failed
        // before the chain.
        wake();

        let mut state = self.lock();
        state.publishing = false;
        state.padding = false;
        let outcome = match result {
            Ok(()) => {
                if let Some(pad) = pad
                    && let Some(file) = state.files.iter_mut().find(|f| f.first_op == pad.first_op)
                {
                    file.prepared = file.prepared.max(pad.to);
                }
                state.published = next;
                state.published_bytes = appended_bytes;
                Ok(())
            }
            Err(error) => {
                let error = WalError::from(error);
                self.poison(&mut state, &error);
                // Callers of `lock_idle`; the poison woke every waiter.
                self.published_changed.notify_all();
                Err(error)
            }
        };
        outcome.map(|()| state)
    }

    /// The latest durable publication.
    pub fn published(&self) -> Frontier {
        self.lock().published
    }

    /// Bytes appended but not yet published (what the next publication makes durable; a
    /// replica publishes at its checkpoint once this reaches the checkpoint interval).
    pub fn unpublished_bytes(&self) -> u64 {
        let state = self.lock();
        state.appended_bytes - state.published_bytes
    }

    /// The appended head: op and header checksum.
    pub fn head(&self) -> (u64, Checksum) {
        let state = self.lock();
        (state.head_op, state.head_checksum)
    }

    /// The first retained op.
    pub fn first_op(&self) -> u64 {
        let state = self.lock();
        state.first_op()
    }

    /// Where each entry of `from..=to` lies (op, file, offset, size), with what is buffered
    /// written out first, so that every one can be read; an op outside the log is refused.
    fn locations(&self, from: u64, to: u64) -> Result<Vec<EntryLocation<S::File>>, WalError> {
        let mut state = self.lock_idle()?;
        let first_op = state.first_op();
        for op in [from, to] {
            if op < first_op || op > state.head_op {
                return Err(WalError::OutOfRange {
                    what: "read",
                    op,
                    first_op,
                    head_op: state.head_op,
                });
            }
        }
        self.flush(&mut state)?;
        let mut locations = Vec::new();
        for op in from..=to {
            let index = state.files.partition_point(|f| f.first_op <= op) - 1;
            let file = &state.files[index];
            let position = usize::try_from(op - file.first_op).unwrap_or(usize::MAX);
            let offset = file.offsets[position];
            let end = file.offsets.get(position + 1).copied().unwrap_or(file.end);
            locations.push((op, Arc::clone(&file.file), offset, end - offset));
        }
        Ok(locations)
    }

    /// Reads and verifies the entries `from..=to`.
    pub fn read(&self, from: u64, to: u64) -> Result<Vec<Entry>, WalError> {
        let locations = self.locations(from, to)?;
        let mut entries = Vec::with_capacity(locations.len());
        for (op, file, offset, size) in locations {
            let mut bytes = vec![0u8; usize::try_from(size).unwrap_or(0)];
            file.read_exact_at(offset, &mut bytes)?;
            let header = Header::decode(&bytes).map_err(|error| WalError::Corrupt {
                file: file.path().to_path_buf(),
                offset,
                reason: StopReason::Header(error),
            })?;
            let body = bytes.split_off(HEADER_SIZE);
            // Paired with the checks at append: what comes back is what went in.
            if header.op != op || !header.body_matches(&body) {
                return Err(WalError::Corrupt {
                    file: file.path().to_path_buf(),
                    offset,
                    reason: StopReason::Body { op },
                });
            }
            entries.push(Entry { header, body });
        }
        Ok(entries)
    }

    /// Reads the headers of the entries `from..=to`, each verified by its own checksum and op
    /// (their bodies are not read: a header names its body's checksum, so a body read later is
    /// still verified against it). For a caller that needs who wrote each entry and its
    /// checksum, not its bytes.
    pub fn read_headers(&self, from: u64, to: u64) -> Result<Vec<Header>, WalError> {
        let locations = self.locations(from, to)?;
        let mut headers = Vec::with_capacity(locations.len());
        for (op, file, offset, _) in locations {
            let mut bytes = [0u8; HEADER_SIZE];
            file.read_exact_at(offset, &mut bytes)?;
            let corrupt = |reason| WalError::Corrupt {
                file: file.path().to_path_buf(),
                offset,
                reason,
            };
            let header = Header::decode(&bytes).map_err(|e| corrupt(StopReason::Header(e)))?;
            if header.op != op {
                return Err(corrupt(StopReason::Body { op }));
            }
            headers.push(header);
        }
        Ok(headers)
    }

    /// Drops every entry after `op` (a view change cutting an uncommitted suffix). Durable
    /// before it returns: the cut is published first, then the bytes past it are zeroed and
    /// later files removed.
    pub fn truncate_after(&self, op: u64) -> Result<(), WalError> {
        let mut guard = self.lock_idle()?;
        let state = &mut *guard;
        let first_op = state.first_op();
        if op == state.head_op {
            return Ok(());
        }
        if op > state.head_op || op + 1 < first_op {
            return Err(WalError::OutOfRange {
                what: "truncate_after",
                op,
                first_op,
                head_op: state.head_op,
            });
        }
        let result = self.truncate_locked(state, op);
        if let Err(error) = &result {
            self.poison(state, error);
        }
        result
    }

    fn truncate_locked(&self, state: &mut State<S::File>, op: u64) -> Result<(), WalError> {
        // Everything kept must be durable before a frontier names it.
        self.flush(state)?;
        for (_, file) in std::mem::take(&mut state.dirty) {
            file.sync_data()?;
        }
        let index = state
            .files
            .iter()
            .rposition(|f| f.first_op <= op)
            .unwrap_or(0);
        let keep = usize::try_from(op + 1 - state.files[index].first_op).unwrap_or(0);
        let file = &state.files[index];
        let (new_end, head_checksum) = if keep == 0 {
            // Nothing kept in this file: the new head is the entry before it, named by the
            // first entry's parent (or the current frontier's when that is the same place).
            let mut header = [0u8; HEADER_SIZE];
            file.file.read_exact_at(0, &mut header)?;
            (
                0,
                Header::decode(&header)
                    .map(|h| h.parent)
                    .map_err(|error| WalError::Corrupt {
                        file: file.path.clone(),
                        offset: 0,
                        reason: StopReason::Header(error),
                    })?,
            )
        } else {
            let offset = file.offsets[keep - 1];
            let mut header = [0u8; HEADER_SIZE];
            file.file.read_exact_at(offset, &mut header)?;
            let end = file.offsets.get(keep).copied().unwrap_or(file.end);
            (end, stored_checksum(&header))
        };
        let next = Frontier {
            sequence: state.published.sequence + 1,
            generation: state.published.generation + 1,
            incarnation: self.config.incarnation,
            head_op: op,
            head_checksum,
            head_file: file.first_op,
            published_length: new_end,
            head_file_key: file.key,
            ..state.published
        };
        self.frontier_file
            .write_all_at(next.offset(), &frontier::encode(&next))?;
        // The cut is durable before anything past it is touched.
        self.frontier_file.sync_data()?;
        state.published = next;
        let old_end = file.end;
        file.file.write_zeros(new_end, old_end - new_end)?;
        // Zeroed so the dropped entries cannot reappear behind entries appended over them.
        file.file.sync_data()?;
        let removed: Vec<LogFile<S::File>> = state.files.drain(index + 1..).collect();
        for file in &removed {
            self.storage.unlink(&file.path)?;
        }
        if !removed.is_empty() {
            // The removals are durable before a file of the same name can be created again.
            self.storage.sync_dir(&self.dir)?;
        }
        let head = &mut state.files[index];
        head.offsets.truncate(keep);
        head.end = new_end;
        state.head_op = op;
        state.head_checksum = head_checksum;
        // Callers waiting on ops past the cut learn it's gone; the rest need a leader.
        wake_all_to_look_again(&mut state.waiters);
        state.published_bytes = state.appended_bytes;
        Ok(())
    }

    /// Removes whole files whose entries are all at or before `op` (after a checkpoint or
    /// retention). Neither the last file nor the one holding the published head is removed.
    /// `op` must be published.
    pub fn drop_prefix(&self, op: u64) -> Result<usize, WalError> {
        let mut state = self.lock();
        if let Some(cause) = &state.poisoned {
            return Err(poisoned_error(&self.dir, cause));
        }
        if op > state.published.head_op {
            let first_op = state.first_op();
            return Err(WalError::OutOfRange {
                what: "drop_prefix",
                op,
                first_op,
                head_op: state.published.head_op,
            });
        }
        // A file goes when every entry in it is at or before `op`, and never the file holding
        // the published head: the frontier names it, and boot refuses a frontier whose head
        // file is gone (`LostPublishedFile`). Entries appended since may already have started
        // later files, so the last file is not necessarily that one.
        let published_file = state.published.head_file;
        let count = state
            .files
            .windows(2)
            .take_while(|pair| pair[1].first_op <= op + 1 && pair[0].first_op < published_file)
            .count();
        let removed: Vec<PathBuf> = state.files.drain(..count).map(|f| f.path).collect();
        drop(state);
        // Oldest first, each removal durable before the next: a crash leaves a shorter prefix,
        // never a hole, even on a file system that persists directory changes out of order
        // (found by the unordered crash enumeration of the metadata group's checkpoints). The
        // last sync also makes the removals durable before the caller relies on them, and before
        // a file of the same name could be created again.
        let result = removed.iter().try_for_each(|path| {
            self.storage.unlink(path)?;
            self.storage.sync_dir(&self.dir)
        });
        if let Err(error) = result {
            let error = WalError::from(error);
            self.poison(&mut self.lock(), &error);
            return Err(error);
        }
        Ok(removed.len())
    }

    /// The retained files, oldest first (what a partition lists as its segments).
    pub fn files(&self) -> Vec<FileInfo> {
        let state = self.lock();
        state
            .files
            .iter()
            .map(|f| FileInfo {
                key: f.key,
                first_op: f.first_op,
                entries: f.offsets.len() as u64,
                end: f.end,
                path: f.path.clone(),
            })
            .collect()
    }

    /// Where the entry `op` lies: its file's key, its byte offset there, and its size.
    pub fn locate(&self, op: u64) -> Option<Location> {
        let state = self.lock();
        if op < state.first_op() || op > state.head_op {
            return None;
        }
        let index = state
            .files
            .partition_point(|f| f.first_op <= op)
            .checked_sub(1)?;
        let file = &state.files[index];
        let position = usize::try_from(op - file.first_op).ok()?;
        let offset = *file.offsets.get(position)?;
        let end = file.offsets.get(position + 1).copied().unwrap_or(file.end);
        Some(Location {
            key: file.key,
            offset,
            size: end - offset,
        })
    }

    /// The log's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The storage the log writes through.
    pub fn storage(&self) -> &S {
        &self.storage
    }
}

impl<F> State<F> {
    /// The first retained op (the head's successor when the log is empty).
    fn first_op(&self) -> u64 {
        self.files.first().map_or(self.head_op + 1, |f| f.first_op)
    }
}

/// Publications that write less than this to the head file write zeros ahead of it.
const SMALL_PUBLICATION: u64 = 64 << 10;
/// How far ahead of the entries those zeros reach.
const ZEROS_AHEAD: u64 = 1 << 20;

/// Zeros a publication writes past its entries in the head file.
#[derive(Clone, Copy)]
struct Pad {
    first_op: u64,
    from: u64,
    to: u64,
}

/// The zeros a publication of `chunks` writes ahead of the head file's end, if any: when it is
/// small and the end is near the prepared (written) part of the file. In an `fallocate`d block
/// that was never written, the first write makes its `fdatasync` update the file's block map as
/// well (about 100 us here: docs/benchmarks.md); small publications would pay that every few
/// blocks, so they prepare a megabyte at a time. Large ones pay it once per publication anyway.
fn zeros_ahead<F>(head: &LogFile<F>, chunks: &[Chunk<F>], file_size: u64) -> Option<Pad> {
    let written: u64 = chunks
        .iter()
        .filter(|chunk| chunk.first_op == head.first_op)
        .map(|chunk| chunk.bytes.len() as u64)
        .sum();
    if written == 0 || written >= SMALL_PUBLICATION || head.prepared >= head.end + SMALL_PUBLICATION
    {
        return None;
    }
    let from = head.prepared.max(head.end);
    let to = (head.end + ZEROS_AHEAD).min(file_size);
    (to > from).then_some(Pad {
        first_op: head.first_op,
        from,
        to,
    })
}

fn mark_dirty<F>(dirty: &mut Vec<(u64, Arc<F>)>, first_op: u64, file: &Arc<F>) {
    if !dirty.iter().any(|(op, _)| *op == first_op) {
        dirty.push((first_op, Arc::clone(file)));
    }
}

/// Builds the header of group `group`'s entry `op` after `parent` for `body` (no client, an
/// opaque body): a convenience for callers and tests that append opaque bodies.
#[must_use]
pub fn next_header(
    group: u128,
    op: u64,
    parent: Checksum,
    view: u32,
    timestamp_ns: u64,
    body: &[u8],
) -> Header {
    header_with(
        group,
        op,
        parent,
        view,
        timestamp_ns,
        body,
        iggy_format::checksum(body),
    )
}

/// [`next_header`] with the body's checksum already computed.
fn header_with(
    group: u128,
    op: u64,
    parent: Checksum,
    view: u32,
    timestamp_ns: u64,
    body: &[u8],
    checksum_body: Checksum,
) -> Header {
    Header {
        checksum_body,
        parent,
        cluster: 0,
        op,
        commit: 0,
        timestamp_ns,
        view,
        size: u32::try_from(HEADER_SIZE + body.len())
            .unwrap_or_else(|_| panic!("entry of {} bytes", body.len())),
        command: iggy_format::Command::Prepare,
        replica: 0,
        operation: 0,
        client: 0,
        request: 0,
        request_checksum: 0,
        group,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A publication with nothing written since the last one (no file dirty: no public call
    /// reaches this today, the branch is defensive) writes and syncs its frontier alone, and the
    /// publication is durable when it returns.
    #[test]
    fn a_publication_with_nothing_written_makes_its_frontier_durable() {
        let storage = iggy_io::SimStorage::new(1);
        let dir = Path::new("wal");
        let wal = Wal::create(storage.clone(), dir, Config::new(7), 1, 0).expect("create");
        let before = wal.published();
        let state = wal
            .run_publication(wal.lock(), Vec::new())
            .expect("publish");
        let after = state.published;
        drop(state);
        assert_eq!(after.sequence, before.sequence + 1);
        drop(wal);
        storage.power_loss_durable_only();
        let bytes = storage.read_all(dir.join(FRONTIER_FILE)).expect("frontier");
        let slots = frontier::decode_file(&bytes);
        assert_eq!(slots[after.slot()], Ok(after), "the publication is durable");
    }
}
