//! The logs `iggy-bench compare` runs side by side, behind one small interface: the raw
//! baselines (what the disk does with the same bytes and no log at all), the toolkit's WAL, and
//! peer Rust logs. Every "durable" append really reaches `fdatasync`/`fsync` (a test counts them).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use iggy_io::{IoPath, OpenMode, OsStorage, ReadFile, ReadStorage, Storage, WriteFile};
use iggy_wal::{Config, Mode, Wal};

/// A log under test.
pub trait Engine: Send + Sync {
    /// Appends `records` as one batch on `stream` (a thread's own stream where the engine has
    /// them); when `durable`, returns only once the batch is durable.
    fn append(&self, stream: usize, records: &[&[u8]], durable: bool) -> Result<(), String>;
    /// Makes everything appended so far durable.
    fn sync(&self) -> Result<(), String>;
    /// Drops what lies more than `keep_records` behind the last durable record, as a replica
    /// does after a checkpoint (the steady-state scenario). `false`: the bench does not drive
    /// this engine's compaction.
    fn compact(&self, keep_records: u64) -> Result<bool, String> {
        let _ = keep_records;
        Ok(false)
    }
}

/// The engines, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum EngineKind {
    /// `pwrite` into a preallocated, zero-filled file, `fdatasync` per batch.
    RawPrefilled,
    /// `raw-prefilled`, then a 4 KiB record `pwrite` + `fdatasync` into a second prefilled file
    /// per batch: the floor of any log that publishes a frontier once its data is durable.
    RawFrontier,
    /// `raw-frontier` into a data file `fallocate`d but never written, as the WAL's files are:
    /// the floor of a two-flush publication into new blocks (every data `fdatasync` also
    /// commits the block map).
    RawFreshFrontier,
    /// `pwrite` at the end of a growing file, `fdatasync` per batch.
    RawAppend,
    /// The toolkit's WAL (`iggy-wal`).
    IggyWal,
    /// `okaywal` 0.3: every committed entry is durable.
    OkayWal,
    /// TiKV's `raft-engine` 0.4.
    RaftEngine,
    /// `commitlog` 0.2. Its `flush` does not fsync the segment (see `sync_reaches_disk`).
    CommitLog,
    /// `fjall` 3: a write batch per batch, `persist(SyncData)` (its journal's fdatasync).
    Fjall,
}

impl EngineKind {
    pub const ALL: [Self; 9] = [
        Self::RawPrefilled,
        Self::RawFrontier,
        Self::RawFreshFrontier,
        Self::RawAppend,
        Self::IggyWal,
        Self::OkayWal,
        Self::RaftEngine,
        Self::CommitLog,
        Self::Fjall,
    ];

    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::RawPrefilled => "raw-prefilled",
            Self::RawFrontier => "raw-frontier",
            Self::RawFreshFrontier => "raw-fresh-frontier",
            Self::RawAppend => "raw-append",
            Self::IggyWal => "iggy-wal",
            Self::OkayWal => "okaywal",
            Self::RaftEngine => "raft-engine",
            Self::CommitLog => "commitlog",
            Self::Fjall => "fjall",
        }
    }

    /// Whether the engine's "durable" append really reaches `fsync`/`fdatasync`. commitlog
    /// 0.2's `CommitLog::flush` calls `std::fs::File::flush` (a no-op for files) on its segment
    /// and only msyncs its index, so its figures are not durable ones: shown, marked, not ranked.
    #[must_use]
    pub fn sync_reaches_disk(self) -> bool {
        self != Self::CommitLog
    }

    /// Whether the engine can append without making each batch durable.
    #[must_use]
    pub fn has_unpublished_mode(self) -> bool {
        self != Self::OkayWal
    }

    /// Whether the replay scenarios measure something of its own (the frontier baselines' data
    /// files are read as `raw-prefilled`'s is).
    #[must_use]
    pub fn has_own_replay(self) -> bool {
        !matches!(self, Self::RawFrontier | Self::RawFreshFrontier)
    }

    /// Whether concurrent appenders are meaningful (the raw baselines have no group commit).
    #[must_use]
    pub fn has_group_commit(self) -> bool {
        matches!(
            self,
            Self::IggyWal | Self::OkayWal | Self::RaftEngine | Self::Fjall
        )
    }

    /// Whether the engine writes its one preallocated file (or appends to it) with nothing to
    /// compact: a raw baseline.
    #[must_use]
    pub fn is_raw(self) -> bool {
        matches!(
            self,
            Self::RawPrefilled | Self::RawFrontier | Self::RawFreshFrontier | Self::RawAppend
        )
    }

    /// Opens a fresh engine in the empty directory `dir`; `capacity_bytes` sizes preallocation.
    pub fn open(self, dir: &Path, capacity_bytes: u64) -> Result<Box<dyn Engine>, String> {
        Ok(match self {
            Self::RawPrefilled => {
                Box::new(RawFile::open(dir, Blocks::Zeroed(capacity_bytes), false)?)
            }
            Self::RawFrontier => {
                Box::new(RawFile::open(dir, Blocks::Zeroed(capacity_bytes), true)?)
            }
            Self::RawFreshFrontier => {
                Box::new(RawFile::open(dir, Blocks::Allocated(capacity_bytes), true)?)
            }
            Self::RawAppend => Box::new(RawFile::open(dir, Blocks::Appended, false)?),
            Self::IggyWal => Box::new(IggyWal::open(dir)?),
            Self::OkayWal => Box::new(OkayWal::open(dir)?),
            Self::RaftEngine => Box::new(RaftEngine::open(dir)?),
            Self::CommitLog => Box::new(CommitLogEngine::open(dir)?),
            Self::Fjall => Box::new(FjallEngine::open(dir)?),
        })
    }

    /// Reads back everything `open` wrote in `dir`, verifying it as the engine's own boot does;
    /// returns the number of records.
    pub fn replay(self, dir: &Path, record_bytes: usize) -> Result<u64, String> {
        match self {
            Self::RawPrefilled | Self::RawFrontier | Self::RawFreshFrontier | Self::RawAppend => {
                RawFile::replay(dir, record_bytes)
            }
            Self::IggyWal => IggyWal::replay(dir),
            Self::OkayWal => OkayWal::replay(dir),
            Self::RaftEngine => RaftEngine::replay(dir),
            Self::CommitLog => CommitLogEngine::replay(dir),
            Self::Fjall => FjallEngine::replay(dir),
        }
    }
}

fn err(error: impl std::fmt::Display) -> String {
    error.to_string()
}

/// What a raw baseline's data file holds before the timer starts.
#[derive(Clone, Copy)]
enum Blocks {
    /// This many bytes of zeros, written and synced: the writes overwrite written blocks.
    Zeroed(u64),
    /// This many bytes `fallocate`d (unwritten extents), size and allocation synced: each
    /// write's `fdatasync` also converts the extents it wrote.
    Allocated(u64),
    /// Nothing: the writes extend the file.
    Appended,
}

/// The raw baselines: one file, the batch's bytes written with one `pwrite`; with a frontier,
/// also a 4 KiB record naming the durable end, written and synced after the data.
struct RawFile {
    file: iggy_io::os::OsFile,
    frontier: Option<iggy_io::os::OsFile>,
    /// The end of the bytes written, and the publications made.
    end: Mutex<(u64, u64)>,
}

impl RawFile {
    fn open(dir: &Path, blocks: Blocks, frontier: bool) -> Result<Self, String> {
        let storage = OsStorage::open(dir).map_err(err)?;
        let prefilled = |name: &str, blocks: Blocks| {
            let file = storage.open(name, OpenMode::CreateNew).map_err(err)?;
            match blocks {
                Blocks::Zeroed(len) => file.write_zeros(0, len).map_err(err)?,
                Blocks::Allocated(len) => file.allocate(0, len).map_err(err)?,
                Blocks::Appended => {}
            }
            // Durable zeros or allocation: the measured writes then need no metadata in their
            // fdatasync beyond what the blocks themselves ask for.
            file.sync_all().map_err(err)?;
            Ok::<_, String>(file)
        };
        let file = prefilled("raw.log", blocks)?;
        let frontier = if frontier {
            Some(prefilled("raw.frontier", Blocks::Zeroed(8192))?)
        } else {
            None
        };
        storage.sync_dir("").map_err(err)?;
        Ok(Self {
            file,
            frontier,
            end: Mutex::new((0, 0)),
        })
    }

    /// Makes the data durable, then (with a frontier) a 4 KiB record of its end, in one of two
    /// slots written alternately.
    fn publish(&self, end: u64, publications: &mut u64) -> Result<(), String> {
        self.file.sync_data().map_err(err)?;
        if let Some(frontier) = &self.frontier {
            let mut slot = [0u8; 4096];
            slot[..8].copy_from_slice(&end.to_le_bytes());
            frontier
                .write_all_at(*publications % 2 * 4096, &slot)
                .map_err(err)?;
            frontier.sync_data().map_err(err)?;
            *publications += 1;
        }
        Ok(())
    }

    fn replay(dir: &Path, record_bytes: usize) -> Result<u64, String> {
        // The raw scan: read everything in 1 MiB windows and checksum every record.
        let storage = OsStorage::open(dir).map_err(err)?;
        let file = storage.open_read("raw.log").map_err(err)?;
        let len = file.len().map_err(err)?;
        let window = (1 << 20) / record_bytes * record_bytes;
        let mut buf = vec![0u8; window];
        let (mut offset, mut records, mut fold) = (0u64, 0u64, 0u64);
        while offset < len {
            let count = usize::try_from((len - offset).min(window as u64)).map_err(err)?;
            file.read_exact_at(offset, &mut buf[..count]).map_err(err)?;
            for record in buf[..count].chunks_exact(record_bytes) {
                if record[0] == 0 && record.iter().all(|&b| b == 0) {
                    return Ok(records); // the prefilled tail
                }
                fold ^= iggy_format::checksum::checksum_64(record);
                records += 1;
            }
            offset += count as u64;
        }
        std::hint::black_box(fold);
        Ok(records)
    }
}

impl Engine for RawFile {
    fn append(&self, _stream: usize, records: &[&[u8]], durable: bool) -> Result<(), String> {
        let bytes = records.concat();
        let mut guard = self.end.lock().map_err(err)?;
        let (end, publications) = &mut *guard;
        self.file.write_all_at(*end, &bytes).map_err(err)?;
        *end += bytes.len() as u64;
        if durable {
            self.publish(*end, publications)?;
        }
        Ok(())
    }

    fn sync(&self) -> Result<(), String> {
        let mut guard = self.end.lock().map_err(err)?;
        let (end, publications) = &mut *guard;
        self.publish(*end, publications)
    }
}

/// The toolkit's WAL with its default configuration (64 MiB files preallocated).
pub struct IggyWal<S: Storage = OsStorage> {
    wal: Wal<S>,
}

/// The configuration the bench runs the toolkit's WAL with.
#[must_use]
pub fn iggy_config() -> Config {
    // Unpublished runs rely on the final publish, as a replicated partition does between
    // checkpoints; the budget is the bench's whole volume.
    Config {
        unpublished_bytes_max: u64::MAX / 2,
        ..Config::new(1)
    }
}

impl IggyWal {
    fn open(dir: &Path) -> Result<Self, String> {
        let config = iggy_config();
        Self::open_with(
            dir,
            config.zero_fill,
            config.carry_small_publications,
            config.file_size_bytes,
            IoPath::Auto,
        )
    }

    /// Creates the log in `dir` with files of `file_size_bytes`, zero-filled or only
    /// preallocated, small publications carried or not, writing through `io_path`.
    pub fn open_with(
        dir: &Path,
        zero_fill: bool,
        carry: bool,
        file_size_bytes: u64,
        io_path: IoPath,
    ) -> Result<Self, String> {
        let storage = OsStorage::open_with(dir, io_path).map_err(err)?;
        let config = Config {
            zero_fill,
            carry_small_publications: carry,
            file_size_bytes,
            ..iggy_config()
        };
        let wal = Wal::create(storage, Path::new("wal"), config, 1, 0).map_err(err)?;
        Ok(Self { wal })
    }
}

impl<S: Storage> IggyWal<S> {
    /// The bench's WAL, with the bench's configuration, on any storage (the honesty test runs it
    /// on a simulated disk and cuts the power).
    pub fn create_on(storage: S) -> Result<Self, String> {
        let wal = Wal::create(storage, Path::new("wal"), iggy_config(), 1, 0).map_err(err)?;
        Ok(Self { wal })
    }

    /// The log, for checking what it holds.
    pub fn wal(&self) -> &Wal<S> {
        &self.wal
    }
}

impl IggyWal {
    fn replay(dir: &Path) -> Result<u64, String> {
        let storage = OsStorage::open(dir).map_err(err)?;
        let (wal, _) = Wal::open(storage, Path::new("wal"), iggy_config(), Mode::Open)
            .map_err(err)?
            .ok_or("no log")?;
        Ok(wal.head().0 + 1 - wal.first_op())
    }
}

impl<S: Storage> Engine for IggyWal<S> {
    fn append(&self, _stream: usize, records: &[&[u8]], durable: bool) -> Result<(), String> {
        let mut last = 0;
        for record in records {
            last = self.wal.append_body(record, 1, 0).map_err(err)?;
        }
        if durable {
            self.wal.wait_published(last).map_err(err)?;
        }
        Ok(())
    }

    fn sync(&self) -> Result<(), String> {
        self.wal.publish().map(|_| ()).map_err(err)
    }

    fn compact(&self, keep_records: u64) -> Result<bool, String> {
        // One record per entry: the ops more than `keep_records` behind the published head go
        // (whole files only; retired ones become spares, `Config::spare_files`).
        let head = self.wal.published().head_op;
        if head > keep_records {
            self.wal.drop_prefix(head - keep_records).map_err(err)?;
        }
        Ok(true)
    }
}

#[derive(Debug)]
struct CountingManager(Arc<AtomicU64>);

impl okaywal::LogManager for CountingManager {
    fn recover(&mut self, entry: &mut okaywal::Entry<'_>) -> std::io::Result<()> {
        if let Some(chunks) = entry.read_all_chunks()? {
            self.0.fetch_add(chunks.len() as u64, Ordering::Relaxed);
        }
        Ok(())
    }

    fn checkpoint_to(
        &mut self,
        _last_checkpointed_id: okaywal::EntryId,
        _checkpointed_entries: &mut okaywal::SegmentReader,
        _wal: &okaywal::WriteAheadLog,
    ) -> std::io::Result<()> {
        Ok(())
    }
}

fn okaywal_config(dir: &Path) -> okaywal::Configuration {
    let mut config = okaywal::Configuration::default_for(dir.join("okaywal"));
    // Like ours: 64 MiB preallocated files; no checkpoint during a run, so replay sees it all.
    config.preallocate_bytes = 64 << 20;
    config.checkpoint_after_bytes = u64::MAX;
    config
}

struct OkayWal {
    log: okaywal::WriteAheadLog,
}

impl OkayWal {
    fn open(dir: &Path) -> Result<Self, String> {
        let counter = Arc::new(AtomicU64::new(0));
        let log = okaywal_config(dir)
            .open(CountingManager(counter))
            .map_err(err)?;
        Ok(Self { log })
    }

    fn replay(dir: &Path) -> Result<u64, String> {
        let counter = Arc::new(AtomicU64::new(0));
        let log = okaywal_config(dir)
            .open(CountingManager(Arc::clone(&counter)))
            .map_err(err)?;
        log.shutdown().map_err(err)?;
        Ok(counter.load(Ordering::Relaxed))
    }
}

impl Engine for OkayWal {
    fn append(&self, _stream: usize, records: &[&[u8]], durable: bool) -> Result<(), String> {
        if !durable {
            return Err("okaywal has no unpublished mode: every commit is durable".into());
        }
        let mut writer = self.log.begin_entry().map_err(err)?;
        for record in records {
            writer.write_chunk(record).map_err(err)?;
        }
        writer.commit().map(|_| ()).map_err(err)
    }

    fn sync(&self) -> Result<(), String> {
        Ok(()) // every commit already was
    }
}

#[derive(Clone)]
struct RaftEntry;

impl raft_engine::MessageExt for RaftEntry {
    type Entry = raft::eraftpb::Entry;

    fn index(entry: &Self::Entry) -> u64 {
        entry.index
    }
}

fn raft_config(dir: &Path) -> raft_engine::Config {
    raft_engine::Config {
        dir: dir.join("raft-engine").display().to_string(),
        // Records are incompressible; no compression keeps the comparison about I/O.
        batch_compression_threshold: raft_engine::ReadableSize(0),
        ..raft_engine::Config::default()
    }
}

struct RaftEngine {
    engine: raft_engine::Engine,
    next_index: Vec<AtomicU64>,
}

impl RaftEngine {
    fn open(dir: &Path) -> Result<Self, String> {
        let engine = raft_engine::Engine::open(raft_config(dir)).map_err(err)?;
        Ok(Self {
            engine,
            next_index: (0..256).map(|_| AtomicU64::new(1)).collect(),
        })
    }

    fn replay(dir: &Path) -> Result<u64, String> {
        let engine = raft_engine::Engine::open(raft_config(dir)).map_err(err)?;
        let region = 1;
        Ok(
            match (engine.first_index(region), engine.last_index(region)) {
                (Some(first), Some(last)) => last + 1 - first,
                _ => 0,
            },
        )
    }
}

impl Engine for RaftEngine {
    fn append(&self, stream: usize, records: &[&[u8]], durable: bool) -> Result<(), String> {
        let counter = self.next_index.get(stream).ok_or("too many streams")?;
        let first = counter.fetch_add(records.len() as u64, Ordering::Relaxed);
        let entries: Vec<raft::eraftpb::Entry> = records
            .iter()
            .zip(first..)
            .map(|(record, index)| {
                let mut entry = raft::eraftpb::Entry::default();
                entry.set_index(index);
                entry.set_data(bytes::Bytes::copy_from_slice(record));
                entry
            })
            .collect();
        let mut batch = raft_engine::LogBatch::default();
        batch
            .add_entries::<RaftEntry>(stream as u64 + 1, &entries)
            .map_err(err)?;
        self.engine
            .write(&mut batch, durable)
            .map(|_| ())
            .map_err(err)
    }

    fn sync(&self) -> Result<(), String> {
        self.engine.sync().map_err(err)
    }

    fn compact(&self, keep_records: u64) -> Result<bool, String> {
        // Stream 0's region; its purged files go to raft-engine's recycling pool
        // (`enable-log-recycle`, on by default in 0.4).
        let next = self.next_index[0].load(Ordering::Relaxed);
        if next > keep_records + 1 {
            self.engine.compact_to(1, next - keep_records);
            self.engine.purge_expired_files().map_err(err)?;
        }
        Ok(true)
    }
}

struct CommitLogEngine {
    log: Mutex<commitlog::CommitLog>,
}

fn commitlog_options(dir: &Path) -> commitlog::LogOptions {
    let mut options = commitlog::LogOptions::new(dir.join("commitlog"));
    options.segment_max_bytes(64 << 20);
    options
}

impl CommitLogEngine {
    fn open(dir: &Path) -> Result<Self, String> {
        let log = commitlog::CommitLog::new(commitlog_options(dir)).map_err(err)?;
        Ok(Self {
            log: Mutex::new(log),
        })
    }

    fn replay(dir: &Path) -> Result<u64, String> {
        use commitlog::message::MessageSet;
        let log = commitlog::CommitLog::new(commitlog_options(dir)).map_err(err)?;
        let (mut offset, mut records) = (0u64, 0u64);
        loop {
            let buf = log
                .read(offset, commitlog::ReadLimit::max_bytes(1 << 20))
                .map_err(err)?;
            if buf.len() == 0 {
                return Ok(records);
            }
            for message in buf.iter() {
                if !message.verify_hash() {
                    return Err(format!(
                        "commitlog: bad message at offset {}",
                        message.offset()
                    ));
                }
                offset = message.offset() + 1;
                records += 1;
            }
        }
    }
}

impl Engine for CommitLogEngine {
    fn append(&self, _stream: usize, records: &[&[u8]], durable: bool) -> Result<(), String> {
        let mut buf = commitlog::message::MessageBuf::default();
        for record in records {
            buf.push(record)
                .map_err(|error| format!("commitlog: {error:?}"))?;
        }
        let mut log = self.log.lock().map_err(err)?;
        log.append(&mut buf).map_err(err)?;
        if durable {
            log.flush().map_err(err)?; // not an fsync: see EngineKind::sync_reaches_disk
        }
        Ok(())
    }

    fn sync(&self) -> Result<(), String> {
        self.log.lock().map_err(err)?.flush().map_err(err)
    }
}

struct FjallEngine {
    db: fjall::Database,
    keyspace: fjall::Keyspace,
    next_key: AtomicU64,
}

impl FjallEngine {
    fn open(dir: &Path) -> Result<Self, String> {
        let db = fjall::Database::builder(dir.join("fjall"))
            .open()
            .map_err(err)?;
        let keyspace = db
            .keyspace("log", fjall::KeyspaceCreateOptions::default)
            .map_err(err)?;
        Ok(Self {
            db,
            keyspace,
            next_key: AtomicU64::new(0),
        })
    }

    fn replay(dir: &Path) -> Result<u64, String> {
        let engine = Self::open(dir)?;
        Ok(engine.keyspace.len().map_err(err)? as u64)
    }
}

impl Engine for FjallEngine {
    fn append(&self, _stream: usize, records: &[&[u8]], durable: bool) -> Result<(), String> {
        let first = self
            .next_key
            .fetch_add(records.len() as u64, Ordering::Relaxed);
        let mut batch = self.db.batch();
        for (record, key) in records.iter().zip(first..) {
            batch.insert(&self.keyspace, key.to_le_bytes(), *record);
        }
        batch.commit().map_err(err)?;
        if durable {
            self.db.persist(fjall::PersistMode::SyncData).map_err(err)?;
        }
        Ok(())
    }

    fn sync(&self) -> Result<(), String> {
        self.db.persist(fjall::PersistMode::SyncData).map_err(err)
    }
}

/// A fresh, empty directory for one run under `base`.
pub fn run_dir(base: &Path, label: &str) -> Result<PathBuf, String> {
    let storage = OsStorage::create(base).map_err(err)?;
    if storage.exists(label).map_err(err)? {
        storage.remove_dir_all(label).map_err(err)?;
    }
    storage.create_dir(label).map_err(err)?;
    Ok(base.join(label))
}
