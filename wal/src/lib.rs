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

mod apply;
pub mod boot;
pub mod carried;
mod check_reads;
mod error;
mod files;
pub mod frontier;
mod offsets;
mod overlay;

use offsets::Offsets;
mod past;
mod publish;
mod retained;
pub mod ring;
pub mod scan;
pub mod seal;

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};

use iggy_format::checksum::Checksum;
use iggy_format::constants::HEADER_SIZE;
use iggy_format::{Header, header::stored_checksum};
use iggy_io::{OpenMode, ReadFile, Storage, WriteFile};

pub use boot::{Action, Finding, FindingKind, Mode, Naming, Report, check, check_named};
pub use error::WalError;
pub use frontier::Frontier;
pub use scan::StopReason;

use files::mark_dirty;
use publish::{Waiter, wake_all_to_look_again};

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
    /// Small publications carry their entries in the frontier file's ring (one flush each; see
    /// [`ring`]). `false`: every publication syncs the log, then writes a slot (two flushes).
    pub carry_small_publications: bool,
    /// The process before this boot shut down cleanly (it synced everything it published), so
    /// boot need not write the trusted frontier again (rule 7's rewrite is for a process that
    /// died, perhaps after a failed sync). Set by the node's boot, never by default.
    pub previous_shutdown_clean: bool,
    /// Boot makes its writes (rules 5 and 7 of `docs/format.md`, "WAL boot": discarded bytes
    /// zeroed, later files removed, carried entries written back, the trusted frontier written
    /// again) without syncing them, and the caller makes them durable with one
    /// [`iggy_io::Storage::sync_filesystem`] before anything is appended, published or
    /// acknowledged: a node of 10,000 partitions pays one device flush, not four per group.
    /// Each of those writes stands alone (the same bytes again, or bytes past the frontier), so
    /// a crash before the caller's sync leaves a log the next boot opens the same way. A boot
    /// that adopts entries still syncs them, in order, before the new frontier that names them.
    /// Set by the node's boot where the storage can sync its file system; off by default.
    pub defer_boot_syncs: bool,
    /// Files `drop_prefix` retires are kept, up to this many, as spares (`{n:020}.spare`) that
    /// later become new log files: their blocks are written already, so a publication into
    /// them needs no block-map update in its `fdatasync` (`docs/benchmarks.md`, "Recycled
    /// files"). 0 unlinks every retired file, as a partition does (its files are segments,
    /// and retention is how it frees disk).
    pub spare_files: usize,
    /// Sealed files whose entry offsets (8 bytes per entry) the log holds in memory at once,
    /// loaded from their seals by the reads that need them; the oldest loaded lets its offsets
    /// go past this many. The head file, and any file without a seal on disk, hold theirs
    /// always. So a log's memory follows what it reads, not what it retains. At least 1.
    pub sealed_offsets_in_memory: usize,
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
            carry_small_publications: true,
            previous_shutdown_clean: false,
            defer_boot_syncs: false,
            spare_files: 2,
            sealed_offsets_in_memory: offsets::SEALED_IN_MEMORY,
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
    /// Offset of op `first_op + i` at offset `i`: in memory, or (a sealed file's) in its seal
    /// until a read needs them ([`Wal::load_offsets`]).
    offsets: Offsets,
    /// End of the bytes assigned to entries (written or buffered).
    end: u64,
    /// Bytes from the start known to be written (entries or zeros), not merely allocated: a
    /// publication into them needs no block-map update in its `fdatasync`.
    prepared: u64,
    /// The parent its first entry names.
    first_parent: Checksum,
    /// Its seal is written (or was found valid at boot), or its writing failed: not tried again.
    sealed: bool,
    /// Past its entries the file may hold non-zero bytes that are not this log's: a spare taken
    /// into use (an earlier use's entries), or a file boot opened (boot zeroes only what could
    /// join the chain). Every publication into such a head file writes zeros past its entries
    /// (see [`files::terminator`]), so at each sync the chain is followed by zeros, as in a
    /// fresh file.
    stale_tail: bool,
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
    /// Files written since the log files were last synced (keyed by first op).
    dirty: Vec<(u64, Arc<F>)>,
    /// A copy of the entries appended since the last publication while they fit a carried
    /// record and form one run that ends the head file; `None` once they do not.
    carry: Option<CarryRun>,
    /// The last publication that synced the log files (every entry through its head is durable
    /// in the log itself).
    synced_sequence: u64,
    /// Ring records that may hold data (bit `i`: record `i`), zeroed when the log is cut back.
    ring_written: u64,
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
    /// Every file starting before this op is sealed (or its seal was tried).
    sealed_below: u64,
    /// Sealed files (by first op) whose offsets are in memory and in a seal on disk, in the
    /// order they were loaded or sealed: past [`Config::sealed_offsets_in_memory`], the oldest lets
    /// its offsets go.
    loaded_sealed: VecDeque<u64>,
    /// Retired files kept for reuse, in the order they were retired (see [`Config::spare_files`]).
    spares: Vec<PathBuf>,
    /// The number the next spare is named by (one more than any spare's seen or made).
    next_spare: u64,
}

/// The entries since the last publication, as one contiguous run of a file.
#[derive(Default)]
struct CarryRun {
    file_first_op: u64,
    offset: u64,
    bytes: Vec<u8>,
}

/// What a log starts with of the carried ring: whether its file has room for it, and which
/// records may hold something.
struct RingUse {
    available: bool,
    written: u64,
}

/// The write-ahead log of one consensus group.
pub struct Wal<S: Storage> {
    storage: S,
    dir: PathBuf,
    config: Config,
    /// Opened at the first write that needs it: an idle group holds no descriptor for it (a
    /// node of 10,000 partitions has a file limit to respect).
    frontier_file: OnceLock<S::File>,
    /// The frontier file has room for the carried ring (a log created by this build).
    ring_available: bool,
    state: Mutex<State<S::File>>,
    published_changed: Condvar,
    /// `State::head_op`, for [`Wal::head_op`] to read without the lock (a flush holds it
    /// through its write).
    head_op: AtomicU64,
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
        if boot::analyze(
            &storage,
            dir,
            config.group,
            config.naming,
            boot::Verify::Sealed,
        )?
        .is_some()
        {
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
        // Room for the carried ring, allocated now: a sparse ring took its blocks at each
        // record's first write, which a full disk then failed (and the log with it).
        file.set_len(ring::FILE_SIZE)?;
        file.allocate(0, ring::FILE_SIZE)?;
        // Both slots durable before the name makes the log exist.
        file.sync_data()?;
        drop(file);
        storage.rename(&temp, dir.join(FRONTIER_FILE))?;
        // The frontier's name must be durable before the first WAL file can exist beside it
        // (WAL files without a frontier refuse to boot).
        storage.sync_dir(dir)?;
        let published = Frontier {
            sequence: 1,
            ..empty
        };
        let ring = RingUse {
            available: true,
            written: 0,
        };
        let wal = Self::from_parts(storage, dir, config, ring, published, Vec::new(), parent);
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
        boot::apply(
            &storage,
            &analysis,
            config.incarnation,
            config.previous_shutdown_clean,
            config.defer_boot_syncs,
        )?;
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
                first_parent: boot_file.first_parent,
                sealed: boot_file.sealed_last.is_some(),
                stale_tail: true,
            });
        }
        let ring_available = storage.open_read(dir.join(FRONTIER_FILE))?.len()? >= ring::FILE_SIZE;
        let wal = Self::from_parts(
            storage,
            dir,
            config,
            RingUse {
                available: ring_available,
                written: analysis.ring_written,
            },
            published,
            files,
            analysis.head_checksum,
        );
        wal.adopt_spares(&mut wal.lock(), &analysis.report.spares);
        if let Some((first_op, key)) = missing_head {
            wal.create_file(&mut wal.lock(), first_op, key)?;
        }
        Ok((wal, analysis.report))
    }

    fn from_parts(
        storage: S,
        dir: &Path,
        config: Config,
        ring: RingUse,
        published: Frontier,
        files: Vec<LogFile<S::File>>,
        head_checksum: Checksum,
    ) -> Self {
        let head_op = AtomicU64::new(published.head_op);
        let state = State {
            files,
            head_op: published.head_op,
            head_checksum,
            pending: Vec::new(),
            pending_bytes: 0,
            dirty: Vec::new(),
            carry: Some(CarryRun::default()),
            // Created, or booted: boot synced every file holding published entries (carried
            // ones written back first), so nothing earlier is needed from the ring.
            synced_sequence: published.sequence,
            ring_written: ring.written,
            published,
            publishing: false,
            padding: false,
            waiters: Vec::new(),
            poisoned: None,
            appended_bytes: 0,
            published_bytes: 0,
            sealed_below: 0,
            loaded_sealed: VecDeque::new(),
            spares: Vec::new(),
            next_spare: 0,
        };
        Self {
            storage,
            dir: dir.to_path_buf(),
            config,
            frontier_file: OnceLock::new(),
            ring_available: ring.available,
            state: Mutex::new(state),
            published_changed: Condvar::new(),
            head_op,
        }
    }

    /// The frontier file, opened on first use.
    fn frontier_file(&self) -> iggy_io::Result<&S::File> {
        if let Some(file) = self.frontier_file.get() {
            return Ok(file);
        }
        let file = self
            .storage
            .open(self.dir.join(FRONTIER_FILE), OpenMode::Existing)?;
        // A ring made sparse (before its blocks were allocated at creation) takes them now, if
        // there is room; if not, its records take them as they are first written, as before.
        if self.ring_available {
            let _ = file.allocate(0, ring::FILE_SIZE);
        }
        // Another caller may have opened it meanwhile: one handle is kept, the other dropped.
        let _ = self.frontier_file.set(file);
        Ok(self
            .frontier_file
            .get()
            .unwrap_or_else(|| unreachable!("set above")))
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
        head.offsets.loaded_mut().push(offset);
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
        if let Some(run) = &mut state.carry {
            if run.bytes.is_empty() {
                run.file_first_op = first_op;
                run.offset = offset;
            }
            let continues = run.file_first_op == first_op
                && run.offset + run.bytes.len() as u64 == offset
                && run.bytes.len() + HEADER_SIZE + body.len() <= ring::CARRIED_MAX;
            if continues {
                run.bytes.extend_from_slice(encoded);
                run.bytes.extend_from_slice(body);
            } else {
                state.carry = None;
            }
        }
        state.head_op = op;
        self.head_op.store(op, Ordering::Release);
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

    /// [`Wal::write_buffered`] unless a publication is in flight, which it would wait for
    /// (the publication pads and ends its head file past what it writes: a write beside it
    /// could be overwritten). What it leaves stays buffered for the next publication, or for
    /// the next write or read that needs it in the files.
    pub fn write_buffered_if_idle(&self) -> Result<(), WalError> {
        let mut state = self.lock();
        if state.publishing {
            return Ok(());
        }
        if let Some(cause) = &state.poisoned {
            return Err(poisoned_error(&self.dir, cause));
        }
        self.flush(&mut state)
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

    /// Bytes appended and still in the log's buffer, not yet written to their files.
    pub fn buffered_bytes(&self) -> u64 {
        self.lock().pending_bytes as u64
    }

    /// The appended head's op, without waiting for the log's lock: what [`Wal::head`] would
    /// answer once the append or cut under way (if any) returns.
    pub fn head_op(&self) -> u64 {
        self.head_op.load(Ordering::Acquire)
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
            let (file, offset, end) = self.span_of(&mut state, index, op)?;
            locations.push((op, file, offset, end - offset));
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

    /// How many entries' offsets the log holds in memory (8 bytes each): its head file's and
    /// any unsealed file's, plus at most [`Config::sealed_offsets_in_memory`] sealed files'.
    pub fn offsets_in_memory(&self) -> u64 {
        let state = self.lock();
        state
            .files
            .iter()
            .filter_map(|f| f.offsets.loaded())
            .map(|offsets| offsets.len() as u64)
            .sum()
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
                entries: f.offsets.len(),
                end: f.end,
                path: f.path.clone(),
            })
            .collect()
    }

    /// Where the entry `op` lies: its file's key, its byte offset there, and its size. An op
    /// outside the log is refused; so is one in a sealed file whose offsets cannot be loaded
    /// (its seal and the file itself both fail to verify: the error names the file).
    pub fn locate(&self, op: u64) -> Result<Location, WalError> {
        let mut state = self.lock();
        let first_op = state.first_op();
        if op < first_op || op > state.head_op {
            return Err(WalError::OutOfRange {
                what: "locate",
                op,
                first_op,
                head_op: state.head_op,
            });
        }
        let index = state.files.partition_point(|f| f.first_op <= op) - 1;
        let key = state.files[index].key;
        let (_, offset, end) = self.span_of(&mut state, index, op)?;
        Ok(Location {
            key,
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
