//! Node boot: the metadata group, then every partition, each with the rules of its own crate.
//! [`check`] decides on a read-only storage; [`boot`] (`Open`, `Repair`) applies exactly what the
//! same analysis decided, group by group. Partitions are independent: one refused partition does
//! not stop the others from being checked or opened.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use iggy_io::{EntryKind, ErrorKind, FileLock, OpenMode, ReadFile, ReadStorage, Storage};
use iggy_metadata::group::{self as metadata_group, GroupError, MetadataGroup};
use iggy_segments::{Partition, PartitionError, rebuilt};
use iggy_superblock::copy::{self, Slot};
use iggy_superblock::{Identity, SuperblockError};
use iggy_wal::{Mode, WalError};

use crate::inventory;
use crate::report::{
    Action, Component, Finding, Group, InUse, PartitionSummary, Report, SCHEMA_VERSION, Status,
    Summary,
};

/// The metadata group's directory in a data directory.
pub const METADATA_DIR: &str = "metadata";
/// The directory holding one directory per partition.
pub const PARTITIONS_DIR: &str = "partitions";
/// The lock file in a data directory: held (`flock`) by the one process that writes the node.
pub const LOCK_FILE: &str = "lock";
/// Written last by a clean shutdown ([`NodeState::shutdown`]) and removed by the next boot
/// before it writes anything: while it exists, every group's trusted state was synced by the
/// process that wrote it, so boot skips the rewrites that guard against a process that died
/// after a failed sync (3 flushes a group).
pub const CLEAN_SHUTDOWN_FILE: &str = "clean-shutdown";

/// A partition's identity: `partitions/<stream>.<topic>.<partition>/`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartitionKey {
    pub stream: u32,
    pub topic: u32,
    pub partition: u32,
}

impl PartitionKey {
    #[must_use]
    pub fn dir_name(self) -> String {
        format!("{}.{}.{}", self.stream, self.topic, self.partition)
    }

    /// Parses a partition directory name: numeric ids in their canonical form only (what
    /// [`PartitionKey::dir_name`] writes), so `01.1.1` or `1.1.+1` is not partition 1.1.1.
    #[must_use]
    pub fn parse(name: &str) -> Option<Self> {
        let mut parts = name.split('.');
        let mut next = || -> Option<u32> {
            let part = parts.next()?;
            (!part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()))
                .then(|| part.parse().ok())
                .flatten()
        };
        let key = Self {
            stream: next()?,
            topic: next()?,
            partition: next()?,
        };
        (parts.next().is_none() && key.dir_name() == name).then_some(key)
    }

    /// The partition's consensus group id (the metadata group is 0): bit 96 set, then stream,
    /// topic and partition in 32 bits each.
    #[must_use]
    pub fn group_id(self) -> u128 {
        1u128 << 96
            | u128::from(self.stream) << 64
            | u128::from(self.topic) << 32
            | u128::from(self.partition)
    }

    /// How reports name the group.
    #[must_use]
    pub fn label(self) -> String {
        format!("partition {}", self.dir_name())
    }
}

/// What a boot opens the groups with: the sizes and budgets a server sets (tests set small
/// ones), and this boot's incarnation, stamped on every publication of every group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootConfig {
    /// This boot's incarnation (fresh per boot: [`BootConfig::fresh`]; a simulator derives it
    /// from its seed).
    pub incarnation: u64,
    /// The metadata WAL's file size.
    pub metadata_file_size_bytes: u64,
    /// The segment size of a partition whose topic the metadata does not give (a topic's own
    /// segment size wins).
    pub segment_size_bytes: u64,
    /// An index entry at least every this many bytes of a partition's log.
    pub index_interval_bytes: u64,
    /// Bytes a group may append unpublished before appends fail with `Backpressure`: at least
    /// a checkpoint interval and the largest prepare.
    pub unpublished_bytes_max: u64,
    /// Partitions booted at once (each mostly waits on its own syncs, and the device takes
    /// several at once). 1 boots them in order on the calling thread: what a deterministic
    /// simulation needs ([`BootConfig::new`]); [`BootConfig::fresh`], the server's and the
    /// tools', uses 8.
    pub boot_threads: usize,
    /// The previous process shut down cleanly: set by boot itself when it finds (and removes)
    /// the clean-shutdown marker; a caller's value is ignored.
    pub previous_shutdown_clean: bool,
    /// Every group's boot writes (the trusted state written again, discarded bytes zeroed,
    /// carried entries written back, superblock copies) go out unsynced, and boot makes them
    /// durable with one [`iggy_io::Storage::sync_filesystem`] before it returns the node:
    /// one device flush for the node instead of about four per group after a crash. Only
    /// where the storage can ([`iggy_io::Storage::can_sync_filesystem`]: Linux 5.8 and later,
    /// the simulator); elsewhere each group syncs its own writes. On by default.
    pub defer_boot_syncs: bool,
    /// How much of each WAL's retained files a check reads: files the frontier passed are
    /// taken from their seals ([`iggy_wal::boot::Verify::Sealed`], every boot), or read and
    /// verified to the last byte ([`iggy_wal::boot::Verify::Everything`], `iggy-fsck --deep`).
    pub verify: iggy_wal::boot::Verify,
    /// Each partition's boot raises its superblock's commit point to the one its prepares
    /// prove (`iggy_segments::Config::commit_from_log`). On in every real use.
    pub commit_from_log: bool,
    /// A partition created after boot's or at run time starts in the view its metadata leader
    /// is the primary of (`view % replicas`), spreading primaries over the nodes; off, in view
    /// 0 (the first replica leads every group). On by default.
    pub spread_primaries: bool,
    /// Every group runs under a consensus replica, a group of one replica included: a
    /// partition commits when its replica says so (`iggy_segments::Config::replicated`), never
    /// by publishing. Set by the node (`iggy-node`); off for the toolkit's own use, where a
    /// single node's partition commits what it publishes. Without it a one-node cluster's
    /// partitions counted a publication as a commit, and the replica's commit of a published op
    /// found nothing left to answer: its client never got a reply.
    pub consensus: bool,
    /// A replicated partition whose published data is damaged (`NEEDS REPAIR FROM PEERS`) is
    /// rebuilt by an `Open` boot instead of kept closed: its files are moved into a
    /// `.damaged-*` directory in its own directory, and it is created anew, empty, in the
    /// views its old superblock (or an earlier rebuild's marker) held, behind a rebuild marker
    /// that makes its replica stand for no quorum until it has caught up
    /// (`iggy_segments::rebuilt`). Set by the node; off for the tools, which never move a
    /// partition's files. A partition whose views are unknown (no superblock copy decodes and
    /// no marker) stays closed.
    pub rebuild_from_peers: bool,
    /// A partition boot must create (its create was pending, or its directory is missing) and
    /// has no room to (a full disk, no descriptors: `PartitionError::is_exhaustion`) is left out instead of failing the boot: finding
    /// `unavailable-partition`; the node hosts every other group and tries it again. Set by the
    /// node of a replicated cluster; off for the tools and a single replica.
    pub unavailable_partitions: bool,
}

/// The finding of a partition boot could not create ([`BootConfig::unavailable_partitions`]).
pub const UNAVAILABLE_PARTITION: &str = "unavailable-partition";

impl BootConfig {
    /// Production sizes (64 MiB metadata WAL files, 1 GiB segments, an index entry every
    /// 4 KiB, a checkpoint interval plus the largest prepare unpublished) with `incarnation`.
    #[must_use]
    pub fn new(incarnation: u64) -> Self {
        let wal = iggy_wal::Config::new(metadata_group::GROUP_ID);
        let partition = iggy_segments::Config::new(0, 0, UNKNOWN_IDENTITY);
        Self {
            incarnation,
            metadata_file_size_bytes: wal.file_size_bytes,
            segment_size_bytes: partition.segment_size_bytes,
            index_interval_bytes: partition.index_interval_bytes,
            unpublished_bytes_max: partition.unpublished_bytes_max,
            boot_threads: 1,
            previous_shutdown_clean: false,
            defer_boot_syncs: true,
            verify: iggy_wal::boot::Verify::Sealed,
            commit_from_log: true,
            spread_primaries: true,
            consensus: false,
            rebuild_from_peers: false,
            unavailable_partitions: false,
        }
    }

    /// Production sizes with a fresh incarnation: a nonce from the process's randomly keyed
    /// hasher, so two boots of a node (or two nodes) never share one but by chance.
    #[must_use]
    pub fn fresh() -> Self {
        use std::hash::{BuildHasher, Hasher};
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        Self {
            boot_threads: 8,
            ..Self::new(hasher.finish())
        }
    }

    /// The configuration partition `key` boots with; `segment_size_bytes` is its topic's (from
    /// the metadata), when known. A partition of a cluster of more than one replica, or of any
    /// cluster run by a node (`consensus`), is one replica of its group (`replicated`: it
    /// commits when its consensus says so).
    #[must_use]
    pub fn partition(
        &self,
        identity: Identity,
        key: PartitionKey,
        segment_size_bytes: Option<u64>,
    ) -> iggy_segments::Config {
        let mut config =
            iggy_segments::Config::new(key.group_id(), u64::from(key.partition), identity);
        config.segment_size_bytes = segment_size_bytes.unwrap_or(self.segment_size_bytes);
        config.index_interval_bytes = self.index_interval_bytes;
        config.unpublished_bytes_max = self.unpublished_bytes_max;
        config.incarnation = self.incarnation;
        config.replicated = self.consensus || identity.replica_count > 1;
        config.previous_shutdown_clean = self.previous_shutdown_clean;
        config.defer_boot_syncs = self.defer_boot_syncs;
        config.verify = self.verify;
        config.commit_from_log = self.commit_from_log;
        config
    }

    /// The configuration of the metadata group's WAL.
    #[must_use]
    pub fn metadata_wal(&self) -> iggy_wal::Config {
        iggy_wal::Config {
            incarnation: self.incarnation,
            file_size_bytes: self.metadata_file_size_bytes,
            unpublished_bytes_max: self.unpublished_bytes_max,
            previous_shutdown_clean: self.previous_shutdown_clean,
            defer_boot_syncs: self.defer_boot_syncs,
            ..iggy_wal::Config::new(metadata_group::GROUP_ID)
        }
    }
}

/// The configuration a partition boots with, at production sizes and incarnation 0 (what
/// `populate` and the tests build nodes with).
#[must_use]
pub fn partition_config(
    identity: Identity,
    key: PartitionKey,
    segment_size_bytes: Option<u64>,
) -> iggy_segments::Config {
    BootConfig::new(0).partition(identity, key, segment_size_bytes)
}

/// The configuration of the metadata group's WAL, at production sizes and incarnation 0.
#[must_use]
pub fn metadata_wal_config() -> iggy_wal::Config {
    BootConfig::new(0).metadata_wal()
}

/// What boot opened, and the node's lock: no other process may open the node for writing
/// while this lives.
pub struct NodeState<S: Storage + Clone> {
    pub identity: Option<Identity>,
    pub metadata: Option<MetadataGroup<S>>,
    pub partitions: BTreeMap<PartitionKey, Partition<S>>,
    pub lock: NodeLock,
}

impl<S: Storage + Clone> NodeState<S> {
    /// Shuts the node down cleanly: every group publishes what it appended with its log synced,
    /// and only if every one succeeded (no failed write poisoned a log or a superblock) the
    /// clean-shutdown marker is written, made durable, and the lock released. The next boot
    /// then skips rewriting each group's trusted state. On an error the marker is not written:
    /// the next boot does every rewrite, as after a crash.
    pub fn shutdown(self, storage: &S, data_dir: &Path) -> Result<(), String> {
        let Self {
            metadata,
            partitions,
            lock,
            ..
        } = self;
        if let Some(metadata) = metadata {
            metadata
                .prepare_shutdown()
                .map_err(|e| format!("metadata: {e}"))?;
        }
        // Each partition closed once it is done: publishing opens its frontier file, and a
        // node of 10,000 partitions holding them all would pass the file limit.
        for (key, partition) in partitions {
            partition
                .prepare_shutdown()
                .map_err(|e| format!("{}: {e}", key.label()))?;
        }
        write_clean_shutdown(storage, data_dir).map_err(|e| e.to_string())?;
        drop(lock);
        Ok(())
    }
}

/// Writes the clean-shutdown marker durably, for a process that made every group's state
/// durable and writes nothing after. The marker is an empty file: its name is the whole
/// statement, so creating it and syncing the directory is all there is (a crash leaves it
/// either absent or whole).
pub fn write_clean_shutdown<S: Storage>(
    storage: &S,
    data_dir: &Path,
) -> Result<(), iggy_io::Error> {
    drop(storage.open(
        data_dir.join(CLEAN_SHUTDOWN_FILE),
        iggy_io::OpenMode::Create,
    )?);
    storage.sync_dir(data_dir)
}

/// Whether the previous process shut down cleanly: removes the marker durably before boot
/// writes anything, so a crash during this boot is never taken for a clean shutdown.
fn consume_clean_shutdown<S: Storage>(
    storage: &S,
    data_dir: &Path,
) -> Result<bool, iggy_io::Error> {
    let marker = data_dir.join(CLEAN_SHUTDOWN_FILE);
    let clean = storage.exists(&marker)?;
    if clean {
        storage.unlink(&marker)?;
        storage.sync_dir(data_dir)?;
    }
    Ok(clean)
}

/// A partition's boot outcome, with the leftover `superblock.tmp` it found first.
type Opened<S> = (
    Option<PathBuf>,
    Result<Option<(Partition<S>, iggy_segments::Report)>, PartitionError>,
);

/// Boots every partition of `jobs` on up to `threads` threads; outcomes in `jobs`' order.
fn open_partitions<S: Storage + Clone>(
    storage: &S,
    jobs: &[(PartitionKey, PathBuf, iggy_segments::Config)],
    mode: Mode,
    threads: usize,
) -> Vec<Opened<S>> {
    let open_one = |(_, dir, config): &(PartitionKey, PathBuf, iggy_segments::Config)| {
        let temp = iggy_superblock::leftover_temp(storage, dir).ok().flatten();
        let outcome = Partition::open(storage.clone(), dir, config.clone(), mode);
        (temp, outcome)
    };
    let threads = threads.min(jobs.len());
    if threads <= 1 {
        return jobs.iter().map(open_one).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut outcomes: Vec<Option<Opened<S>>> = jobs.iter().map(|_| None).collect();
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let index = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(job) = jobs.get(index) else { break };
                        done.push((index, open_one(job)));
                    }
                    done
                })
            })
            .collect();
        for worker in workers {
            let done = worker
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            for (index, outcome) in done {
                outcomes[index] = Some(outcome);
            }
        }
    });
    outcomes
        .into_iter()
        .map(|o| o.unwrap_or_else(|| unreachable!("every job ran")))
        .collect()
}

/// The exclusive lock on a node directory ([`lock`]), held until dropped (the kernel frees it if
/// the process dies).
#[derive(Debug)]
pub struct NodeLock {
    _lock: FileLock,
}

/// Takes the lock of the node in `data_dir`: every process that writes the node holds it for
/// its life (boot in `Open` and `Repair`, `iggy-fsck --repair`, the server). Refuses a
/// directory that is not a node (without creating anything there) and a node another process
/// holds, naming its pid.
pub fn lock<S: Storage>(storage: &S, data_dir: &Path) -> Result<NodeLock, RecoveryError> {
    if !is_node(storage, data_dir)? {
        return Err(RecoveryError::NotANode {
            dir: data_dir.to_path_buf(),
        });
    }
    lock_file(storage, data_dir)
}

/// Takes the lock file of `data_dir` (a node, or one being created).
pub(crate) fn lock_file<S: Storage>(
    storage: &S,
    data_dir: &Path,
) -> Result<NodeLock, RecoveryError> {
    match storage.lock(data_dir.join(LOCK_FILE)) {
        Ok(lock) => Ok(NodeLock { _lock: lock }),
        Err(error) => match error.kind {
            ErrorKind::Locked { pid } => Err(RecoveryError::Locked {
                dir: data_dir.to_path_buf(),
                pid,
            }),
            _ => Err(error.into()),
        },
    }
}

/// Whether `data_dir` holds a node (a metadata or a partitions directory).
fn is_node<R: ReadStorage>(storage: &R, data_dir: &Path) -> Result<bool, iggy_io::Error> {
    Ok(storage.exists(data_dir.join(METADATA_DIR))?
        || storage.exists(data_dir.join(PARTITIONS_DIR))?)
}

/// The message of [`RecoveryError::NotANode`]. A node at the storage root has the empty path:
/// the tools name the directory they opened before the message, so no empty `: ` prefix.
fn not_a_node(dir: &Path) -> String {
    const WHAT: &str = "not a node data directory (no metadata/ and no partitions/)";
    if dir.as_os_str().is_empty() {
        WHAT.to_string()
    } else {
        format!("{}: {WHAT}", dir.display())
    }
}

/// The message of [`RecoveryError::Locked`].
fn locked(dir: &Path, pid: Option<u32>) -> String {
    let holder = pid.map_or_else(|| "another process".to_string(), |p| format!("process {p}"));
    let what = format!(
        "the node is in use: {holder} holds its lock ({LOCK_FILE}); stop it first (nothing was \
         changed)"
    );
    if dir.as_os_str().is_empty() {
        what
    } else {
        format!("{}: {what}", dir.display())
    }
}

/// Why a node directory could not be looked at at all, or not opened for writing.
#[derive(Debug, thiserror::Error)]
pub enum RecoveryError {
    #[error("{}", not_a_node(dir))]
    NotANode { dir: PathBuf },
    #[error("{}", locked(dir, *pid))]
    Locked { dir: PathBuf, pid: Option<u32> },
    /// The one sync of everything boot wrote failed (`BootConfig::defer_boot_syncs`): none of
    /// it may be taken as durable, so the node is not handed out.
    #[error(
        "boot of {}: the sync of everything boot wrote failed ({source}): none of it can be \
         taken as durable, so the node did not start; boot again (every group's trusted state \
         is written again)",
        dir.display()
    )]
    BootSync {
        dir: PathBuf,
        source: iggy_io::Error,
    },
    /// Boot could not finish the creation of a partition the metadata created.
    #[error("boot of {}: creating partition {label}: {source}", dir.display())]
    CreatePartition {
        dir: PathBuf,
        label: String,
        source: Box<PartitionError>,
    },
    #[error("boot of {}: rebuilding damaged partition {label} from its peers: {source}", dir.display())]
    RebuildPartition {
        dir: PathBuf,
        label: String,
        source: Box<PartitionError>,
    },
    #[error(transparent)]
    Io(#[from] iggy_io::Error),
}

/// Rebuilds the damaged replicated partition `key` ([`BootConfig::rebuild_from_peers`]): the
/// views the old replica may have acknowledged in (from any superblock copy that decodes, and
/// an earlier rebuild's marker), the marker written durably first, then the superblock moved
/// into `.damaged-<incarnation>` (durably: from then on a crash boots to a directory without
/// one, which is rebuilt again), then every other file of the partition, then the partition
/// created anew, empty, in those views. `Ok(None)`: the views are unknown (no copy decodes, no
/// marker, or a marker that does not verify), so nothing was touched. Returns the partition,
/// the marker and the directory the damaged files went to.
pub fn rebuild_partition<S: Storage + Clone>(
    storage: &S,
    data_dir: &Path,
    config: &BootConfig,
    identity: Identity,
    state: &iggy_metadata::State,
    key: PartitionKey,
) -> Result<Option<(Partition<S>, rebuilt::Marker, PathBuf)>, PartitionError> {
    let dir = data_dir.join(PARTITIONS_DIR).join(key.dir_name());
    let Ok(existing) = rebuilt::read(storage, &dir) else {
        return Ok(None);
    };
    let old = superblock_views(storage, &dir);
    let marker = match (existing, old) {
        (None, None) => return Ok(None),
        (Some(m), None) => m,
        (None, Some((view, log_view))) => rebuilt::Marker {
            view,
            forgotten_through: log_view,
        },
        (Some(m), Some((view, log_view))) => rebuilt::Marker {
            view: m.view.max(view),
            forgotten_through: m.forgotten_through.max(log_view),
        },
    };
    // Views are known only from a superblock copy or a marker, so `dir` exists.
    if existing != Some(marker) {
        rebuilt::write(storage, &dir, marker)?;
    }
    let damaged = dir.join(format!(
        "{}{:016x}",
        rebuilt::DAMAGED_PREFIX,
        config.incarnation
    ));
    let mut moving: Vec<String> = storage
        .list_dir(&dir)?
        .into_iter()
        .map(|e| e.name.to_string_lossy().into_owned())
        .filter(|name| !rebuilt::is_rebuild_entry(name))
        .collect();
    if !moving.is_empty() {
        if !storage.exists(&damaged)? {
            storage.create_dir(&damaged)?;
            // Durable in the partition's directory before anything moves into it: a rename
            // into a directory whose creation a power loss undid loses the file.
            storage.sync_dir(&dir)?;
        }
        // The superblock first, durably: a crash after this boots to a directory without one
        // (lost state, damage), which is rebuilt again with the marker's views.
        moving.sort_by_key(|name| name != iggy_superblock::FILE_NAME);
        for (i, name) in moving.iter().enumerate() {
            storage.rename(dir.join(name), damaged.join(name))?;
            if i == 0 {
                storage.sync_dir(&damaged)?;
                storage.sync_dir(&dir)?;
            }
        }
        storage.sync_dir(&damaged)?;
        storage.sync_dir(&dir)?;
    }
    let partition = iggy_segments::Config {
        initial_incarnation: config.incarnation.max(1),
        ..config.partition(identity, key, segment_size(Some(state), key))
    };
    let vsr = iggy_superblock::VsrState {
        view: marker.view,
        log_view: marker.forgotten_through,
        incarnation: config.incarnation.max(1),
        ..iggy_superblock::VsrState::default()
    };
    let created = Partition::create_rebuilt(storage.clone(), &dir, partition, vsr)?;
    Ok(Some((created, marker, damaged)))
}

/// The highest view and log_view of any superblock copy in `dir` that decodes (the old
/// replica promised at most these), `None` when none does.
fn superblock_views<R: ReadStorage>(storage: &R, dir: &Path) -> Option<(u32, u32)> {
    decoded_copies(storage, dir)
        .into_iter()
        .map(|record| (record.state.view, record.state.log_view))
        .reduce(|a, b| (a.0.max(b.0), a.1.max(b.1)))
}

/// Creates partition `key`, which `state` (the metadata) lists, in `data_dir/partitions`:
/// durably (the partitions directory in the root, the partition's directory, its superblock,
/// then its WAL), in the view the spread rule gives it (`config.spread_primaries`), with its
/// topic's segment size. `recovering`: the superblock records this boot's incarnation, so the
/// group's replica recovers from its peers before it takes part (a create boot finishes, where
/// a directory lost after its creation would look the same); otherwise the group is new (the
/// run-time create of a committed metadata op). A leftover `superblock.tmp` of an interrupted
/// create is removed first; any other file in the directory refuses.
pub fn create_partition<S: Storage + Clone>(
    storage: &S,
    data_dir: &Path,
    config: &BootConfig,
    identity: Identity,
    state: &iggy_metadata::State,
    key: PartitionKey,
    recovering: bool,
) -> Result<Partition<S>, PartitionError> {
    let partitions = data_dir.join(PARTITIONS_DIR);
    if !storage.exists(&partitions)? {
        storage.create_dir(&partitions)?;
        // Durable in the root before any partition relies on it.
        storage.sync_dir(data_dir)?;
    }
    let dir = partitions.join(key.dir_name());
    let temp = dir.join(iggy_superblock::TEMP_FILE_NAME);
    if storage.exists(&temp)? {
        storage.unlink(&temp)?;
    }
    let marker = dir.join(NOT_CREATED_FILE);
    if storage.exists(&marker)? {
        storage.unlink(&marker)?;
    }
    let leader = state
        .streams
        .get(&key.stream)
        .and_then(|s| s.topics.get(&key.topic))
        .and_then(|t| t.partitions.iter().find(|p| p.id == key.partition))
        .map_or(0, |p| p.leader);
    let partition = iggy_segments::Config {
        initial_view: if config.spread_primaries {
            u32::from(leader)
        } else {
            0
        },
        initial_incarnation: if recovering && identity.replica_count > 1 {
            config.incarnation.max(1)
        } else {
            0
        },
        ..config.partition(identity, key, segment_size(Some(state), key))
    };
    Partition::create(storage.clone(), &dir, partition)
}

/// The file a partition's directory holds alone when its create found no room (a full disk):
/// boot creates the partition then as one created after the checkpoint, not as a directory
/// whose files were lost (which must be rebuilt from peers under a marker of what it may have
/// acknowledged). A replica whose create failed never booted, so it acknowledged nothing.
pub const NOT_CREATED_FILE: &str = "not-created";

/// Leaves partition `key`'s directory empty but for [`NOT_CREATED_FILE`], durable: what a
/// create that found no room leaves, so that boot knows it never existed. An empty file takes no
/// data blocks, so it can usually be written on a full disk; if even that fails the directory
/// is removed, and boot (the metadata's checkpoint listing the partition) reports it missing.
pub fn mark_not_created<S: Storage>(
    storage: &S,
    data_dir: &Path,
    key: PartitionKey,
) -> Result<(), iggy_io::Error> {
    remove_partition(storage, data_dir, key)?;
    let partitions = data_dir.join(PARTITIONS_DIR);
    let dir = partitions.join(key.dir_name());
    let marked = (|| {
        storage.create_dir(&dir)?;
        drop(storage.open(dir.join(NOT_CREATED_FILE), OpenMode::CreateNew)?);
        storage.sync_dir(&dir)?;
        storage.sync_dir(&partitions)
    })();
    if marked.is_err() {
        remove_partition(storage, data_dir, key)?;
    }
    marked
}

/// Removes the directory of partition `key`, which the metadata deleted (its stream or topic),
/// and makes the removal durable. A crash part way leaves a directory boot reports as
/// `deleted-partition` and removes.
pub fn remove_partition<S: Storage>(
    storage: &S,
    data_dir: &Path,
    key: PartitionKey,
) -> Result<(), iggy_io::Error> {
    let partitions = data_dir.join(PARTITIONS_DIR);
    let dir = partitions.join(key.dir_name());
    if storage.exists(&dir)? {
        storage.remove_dir_all(&dir)?;
        storage.sync_dir(&partitions)?;
    }
    Ok(())
}

/// The identity used when no superblock copy decodes: the superblock's own rules then decide
/// (a missing file is fresh or lost state; copies that do not decode refuse), before the
/// identity is ever compared.
const UNKNOWN_IDENTITY: Identity = Identity {
    cluster: 0,
    replica: 0,
    replica_count: 1,
};

/// The identity recorded in the first copy that decodes of `dir/superblock`, if any.
fn discover_identity<R: ReadStorage>(storage: &R, dir: &Path) -> Option<Identity> {
    decoded_copies(storage, dir)
        .first()
        .map(|record| record.identity)
}

/// The records of the copies of `dir/superblock` that decode, in slot order (none when the file
/// cannot be read): what is known of a group whose superblock `read` refuses.
fn decoded_copies<R: ReadStorage>(storage: &R, dir: &Path) -> Vec<copy::Record> {
    let path = dir.join(iggy_superblock::FILE_NAME);
    let Ok(file) = storage.open_read(&path) else {
        return Vec::new();
    };
    let Some(len) = file
        .len()
        .ok()
        .and_then(|l| usize::try_from(l.min(copy::FILE_SIZE)).ok())
    else {
        return Vec::new();
    };
    let mut bytes = vec![0u8; len];
    if file.read_exact_at(0, &mut bytes).is_err() {
        return Vec::new();
    }
    Slot::ALL
        .iter()
        .filter_map(|slot| {
            let from = usize::try_from(slot.offset()).ok()?;
            copy::decode(bytes.get(from..)?, *slot)
                .ok()
                .map(|(record, _)| record)
        })
        .collect()
}

/// The partition directories under `data_dir/partitions` (canonical names of directories), and
/// findings for every other entry there.
fn list_partitions<R: ReadStorage>(
    storage: &R,
    data_dir: &Path,
    findings: &mut Vec<Finding>,
) -> Result<Vec<PartitionKey>, iggy_io::Error> {
    let dir = data_dir.join(PARTITIONS_DIR);
    if !storage.exists(&dir)? {
        return Ok(Vec::new());
    }
    let mut keys = Vec::new();
    for entry in storage.list_dir(&dir)? {
        let name = entry.name.to_string_lossy();
        let key = PartitionKey::parse(&name);
        match (key, entry.kind) {
            (Some(key), EntryKind::Dir) => keys.push(key),
            (Some(_), _) => findings.push(node_finding(
                "not-a-directory",
                dir.join(&*name),
                "named like a partition directory but is not a directory; left alone".into(),
            )),
            (None, _) => findings.push(node_finding(
                "not-a-partition",
                dir.join(&*name),
                "not a partition directory (partitions are named <stream>.<topic>.<partition> \
                 in decimal without leading zeros); left alone"
                    .into(),
            )),
        }
    }
    keys.sort();
    Ok(keys)
}

/// A finding about the node directory itself: reported, left alone.
pub(crate) fn node_finding(kind: &'static str, file: PathBuf, what: String) -> Finding {
    Finding {
        component: Component::Node,
        kind,
        group: "node".into(),
        file,
        offset: 0,
        what,
        action: Action::None,
        bytes: 0,
    }
}

/// How a refusal is treated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refusal {
    /// Published or durable state is damaged or missing: repairable from peers.
    Damage,
    /// Not something this build or this node may act on (versions, identities).
    Refuse,
    /// The check itself failed.
    Io,
}

struct Classified {
    refusal: Refusal,
    component: Component,
    file: Option<PathBuf>,
    offset: u64,
}

/// An I/O error during a group's boot: a failure of the check (exit 8), unless the path names
/// something that is not a regular file where the group needs one, which is damage (it is
/// reported and never opened).
fn classify_io(error: &iggy_io::Error, component: Component) -> Classified {
    let refusal = match error.kind {
        ErrorKind::NotAFile | ErrorKind::IsADirectory | ErrorKind::NotADirectory => Refusal::Damage,
        _ => Refusal::Io,
    };
    Classified {
        refusal,
        component,
        file: Some(error.path.clone()),
        offset: error.offset.unwrap_or(0),
    }
}

fn classify_wal(error: &WalError) -> Classified {
    let (refusal, file, offset) = match error {
        WalError::HistoryWithoutFrontier { dir, .. } => (Refusal::Damage, Some(dir.clone()), 0),
        WalError::FrontierUnreadable { path, .. } => (Refusal::Damage, Some(path.clone()), 0),
        WalError::FrontierRefused { path, offset, .. } => {
            (Refusal::Refuse, Some(path.clone()), *offset)
        }
        WalError::GroupMismatch { path, .. } => (Refusal::Refuse, Some(path.clone()), 0),
        WalError::ForeignFile { file, .. } => (Refusal::Refuse, Some(file.clone()), 0),
        WalError::UnknownEntryVersion { file, offset, .. } => {
            (Refusal::Refuse, Some(file.clone()), *offset)
        }
        WalError::LostPublishedBytes { file, len, .. } => {
            (Refusal::Damage, Some(file.clone()), *len)
        }
        WalError::LostPublishedFile { file, .. } | WalError::Hole { file, .. } => {
            (Refusal::Damage, Some(file.clone()), 0)
        }
        WalError::Corrupt { file, offset, .. } => (Refusal::Damage, Some(file.clone()), *offset),
        WalError::HeadMismatch { file, end, .. } => (Refusal::Damage, Some(file.clone()), *end),
        WalError::Io(error) => return classify_io(error, Component::Wal),
        _ => (Refusal::Refuse, None, 0),
    };
    Classified {
        refusal,
        component: Component::Wal,
        file,
        offset,
    }
}

fn classify_superblock(error: &SuperblockError) -> Classified {
    let (refusal, file, offset) = match error {
        SuperblockError::UnknownVersion { path, offset, .. }
        | SuperblockError::InvariantBroken { path, offset, .. } => {
            (Refusal::Refuse, Some(path.clone()), *offset)
        }
        SuperblockError::IdentityMismatch { path, .. } => (Refusal::Refuse, Some(path.clone()), 0),
        SuperblockError::Io(error) => return classify_io(error, Component::Superblock),
        SuperblockError::StateLost { path, .. }
        | SuperblockError::BothInvalid { path, .. }
        | SuperblockError::Fork { path, .. }
        | SuperblockError::SequenceGap { path, .. }
        | SuperblockError::ParentMismatch { path, .. }
        | SuperblockError::NotMonotonic { path, .. }
        | SuperblockError::CopiesDisagree { path, .. } => (Refusal::Damage, Some(path.clone()), 0),
        _ => (Refusal::Refuse, None, 0),
    };
    Classified {
        refusal,
        component: Component::Superblock,
        file,
        offset,
    }
}

fn classify_partition(error: &PartitionError) -> Classified {
    use iggy_segments::offsets::OffsetError;
    let damage = |component, file: &PathBuf, offset| Classified {
        refusal: Refusal::Damage,
        component,
        file: Some(file.clone()),
        offset,
    };
    match error {
        PartitionError::Wal(error) => classify_wal(error),
        PartitionError::Superblock(error) => classify_superblock(error),
        PartitionError::Offsets(OffsetError::Corrupt { file, .. })
        | PartitionError::Offsets(OffsetError::WrongOwner { file, .. }) => {
            damage(Component::Offsets, file, 0)
        }
        PartitionError::Offsets(OffsetError::UnknownVersion { file, .. }) => Classified {
            refusal: Refusal::Refuse,
            component: Component::Offsets,
            file: Some(file.clone()),
            offset: 0,
        },
        PartitionError::Io(error) => classify_io(error, Component::Segments),
        PartitionError::Offsets(OffsetError::Io(error)) => classify_io(error, Component::Offsets),
        PartitionError::BadBatch { file, offset, .. }
        | PartitionError::PartitionMismatch { file, offset, .. }
        | PartitionError::OffsetGap { file, offset, .. }
        | PartitionError::Corrupt { file, offset, .. } => {
            damage(Component::Segments, file, *offset)
        }
        PartitionError::NameMismatch { file, .. } | PartitionError::EmptySegment { file } => {
            damage(Component::Segments, file, 0)
        }
        PartitionError::BehindOffsetFrontier { dir, log_end, .. } => {
            damage(Component::Segments, dir, *log_end)
        }
        _ => Classified {
            refusal: Refusal::Refuse,
            component: Component::Segments,
            file: None,
            offset: 0,
        },
    }
}

fn classify_metadata(error: &GroupError, dir: &Path) -> Classified {
    let snapshot = dir.join(iggy_snapshot::FILE_NAME);
    let damage = |file: PathBuf| Classified {
        refusal: Refusal::Damage,
        component: Component::Snapshot,
        file: Some(file),
        offset: 0,
    };
    match error {
        GroupError::Superblock(error) => classify_superblock(error),
        GroupError::Wal(error) => classify_wal(error),
        GroupError::Snapshot(iggy_snapshot::SnapshotError::Io(error)) => {
            classify_io(error, Component::Snapshot)
        }
        GroupError::Snapshot(iggy_snapshot::SnapshotError::UnknownVersion { .. }) => Classified {
            refusal: Refusal::Refuse,
            component: Component::Snapshot,
            file: Some(snapshot),
            offset: 0,
        },
        GroupError::Snapshot(_)
        | GroupError::SnapshotMissing { .. }
        | GroupError::SnapshotBehind { .. }
        | GroupError::ChecksumDisagree { .. }
        | GroupError::SnapshotUnlinked { .. }
        | GroupError::Payload(_) => damage(snapshot),
        GroupError::LogGap { .. } | GroupError::LogMissing { .. } | GroupError::Decode { .. } => {
            Classified {
                refusal: Refusal::Damage,
                component: Component::Wal,
                file: Some(dir.join(metadata_group::WAL_DIR)),
                offset: 0,
            }
        }
        _ => Classified {
            refusal: Refusal::Refuse,
            component: Component::Node,
            file: None,
            offset: 0,
        },
    }
}

/// Builds the node report as groups are checked or opened.
struct Builder {
    report: Report,
    /// A replicated cluster (more than one replica): damage is repaired from peers.
    replicated: bool,
}

impl Builder {
    fn new(data_dir: &Path, identity: Option<Identity>) -> Self {
        Self {
            report: Report {
                schema: SCHEMA_VERSION,
                data_dir: data_dir.to_path_buf(),
                in_use: None,
                groups: Vec::new(),
                findings: Vec::new(),
                summary: Summary::default(),
                partitions: Vec::new(),
            },
            replicated: identity.is_some_and(|i| i.replica_count > 1),
        }
    }

    /// Records a group that boots (or is left alone), with its findings.
    fn group(&mut self, label: &str, dir: &Path, findings: Vec<Finding>) {
        let repairs = findings.iter().any(|f| f.action.is_local_repair());
        self.report.findings.extend(findings);
        self.report.groups.push(Group {
            group: label.into(),
            dir: dir.to_path_buf(),
            status: if repairs {
                Status::Repair
            } else {
                Status::Clean
            },
            error: None,
            io_error: false,
        });
    }

    /// Records a partition's outcome (checked or opened): its findings, or its refusal. Returns
    /// what was opened, if anything. `Ok(None)`: the directory holds no partition (creation
    /// never got to its superblock), reported as missing.
    fn partition<T>(
        &mut self,
        label: &str,
        dir: &Path,
        temp: Option<PathBuf>,
        outcome: Result<Option<(T, iggy_segments::Report)>, PartitionError>,
        pending: bool,
    ) -> Option<T> {
        match outcome {
            Ok(None) if pending => {
                // Creation stopped before the superblock's rename, after the op that created the
                // partition: boot finishes the create (the leftover temp goes with it).
                self.pending(label, dir, false);
                None
            }
            Ok(Some((opened, report))) => {
                self.group(label, dir, partition_findings(label, dir, &report));
                self.report.summary.sealed_bytes += report.wal.sealed_bytes;
                self.report.summary.spare_files += report.wal.spares.len() as u64;
                self.report.partitions.push(PartitionSummary {
                    group: label.into(),
                    next_offset: report.next_offset,
                    segments: report.segments,
                    consumer_offsets: report.offsets.len(),
                });
                Some(opened)
            }
            Ok(None) => {
                // A directory without a superblock: creation stopped before it existed. Boot
                // does not create partitions; the superblock's open removes a leftover temp.
                self.missing(label, dir, "holds no partition (no superblock)");
                if let Some(file) = temp {
                    self.report.findings.push(leftover_finding(
                        label,
                        Component::Superblock,
                        file,
                        "a leftover superblock.tmp (the partition's creation stopped before its \
                         rename was durable)",
                    ));
                }
                None
            }
            Err(error) => {
                self.refused(label, dir, classify_partition(&error), error.to_string());
                None
            }
        }
    }

    /// Notes a partition that an earlier boot rebuilt from its peers (its marker), naming the
    /// damaged files kept beside it, which are the operator's to inspect and remove. A marker
    /// that does not verify refuses the partition: the views its replica forgot are unknown.
    /// Returns whether the partition may open.
    fn rebuilt_before<R: ReadStorage>(
        &mut self,
        storage: &R,
        label: &str,
        dir: &Path,
    ) -> Result<bool, iggy_io::Error> {
        match rebuilt::read(storage, dir) {
            Ok(None) => Ok(true),
            Ok(Some(marker)) => {
                let mut kept: Vec<String> = storage
                    .list_dir(dir)?
                    .into_iter()
                    .map(|e| e.name.to_string_lossy().into_owned())
                    .filter(|n| n.starts_with(rebuilt::DAMAGED_PREFIX))
                    .collect();
                kept.sort();
                let what = if kept.is_empty() {
                    String::new()
                } else {
                    format!(
                        "; the damaged files are kept in {}: inspect them (iggy-inspect), then \
                         remove them",
                        kept.join(", ")
                    )
                };
                self.report.findings.push(Finding {
                    component: Component::Node,
                    kind: "rebuilt-partition",
                    group: label.into(),
                    file: dir.join(rebuilt::FILE_NAME),
                    offset: 0,
                    what: format!(
                        "rebuilt from its peers after damage (its replica forgot what it \
                         acknowledged through view {}){what}",
                        marker.forgotten_through
                    ),
                    action: Action::None,
                    bytes: 0,
                });
                Ok(true)
            }
            Err(error) => {
                let what = error.to_string();
                self.report.findings.push(Finding {
                    component: Component::Node,
                    kind: "refused",
                    group: label.into(),
                    file: dir.join(rebuilt::FILE_NAME),
                    offset: 0,
                    what: what.clone(),
                    action: Action::Refuse,
                    bytes: 0,
                });
                if let Some(group) = self.report.groups.last_mut() {
                    group.status = Status::Refuse;
                    group.error = Some(what);
                }
                Ok(false)
            }
        }
    }

    /// Whether the last group recorded is `label`, needing repair from its peers.
    fn needs_peers(&self, label: &str) -> bool {
        self.report
            .groups
            .last()
            .is_some_and(|g| g.group == label && g.status == Status::NeedsPeerRepair)
    }

    /// Records that boot rebuilt the last group recorded (`label`, which needed repair from its
    /// peers): it is open, empty, and still needs its peers.
    fn rebuilt(&mut self, label: &str, dir: &Path, marker: rebuilt::Marker, damaged: &Path) {
        if let Some(group) = self.report.groups.last_mut() {
            group.error = None;
        }
        self.report.findings.push(Finding {
            component: Component::Node,
            kind: "rebuilt-from-peers",
            group: label.into(),
            file: dir.join(rebuilt::FILE_NAME),
            offset: 0,
            what: format!(
                "the damaged files were moved to {} and the partition created anew, empty, in \
                 view {}; its replica catches up from its peers and stands for no quorum until \
                 it has (it may have acknowledged ops through view {})",
                damaged.display(),
                marker.view,
                marker.forgotten_through
            ),
            action: Action::RebuildFromPeers,
            bytes: 0,
        });
    }

    /// Records a partition whose directory is missing (the metadata lists it) or holds nothing:
    /// its data, if it had any, is on the peers, or, in a single-replica cluster, gone.
    fn missing(&mut self, label: &str, dir: &Path, why: &str) {
        let (status, action, then) = if self.replicated {
            (
                Status::NeedsPeerRepair,
                Action::NeedsPeerRepair,
                "it must be rebuilt from the other replicas",
            )
        } else {
            (
                Status::Refuse,
                Action::Refuse,
                "a single-replica cluster has no other copy",
            )
        };
        let what = format!("the partition's directory {why}: {then}");
        self.report.findings.push(Finding {
            component: Component::Node,
            kind: "missing-partition",
            group: label.into(),
            file: dir.to_path_buf(),
            offset: 0,
            what: what.clone(),
            action,
            bytes: 0,
        });
        self.report.groups.push(Group {
            group: label.into(),
            dir: dir.to_path_buf(),
            status,
            error: Some(what),
            io_error: false,
        });
    }

    /// Records a partition the metadata created after its last checkpoint whose directory is
    /// missing or holds nothing: the node stopped between the metadata op and the directory's
    /// creation, which boot finishes (empty; with more than one replica it recovers from its
    /// peers, since a directory lost after its creation looks the same).
    /// `root_missing`: the partitions directory is missing too (the create makes it: the
    /// finding then names the partition's directory, whose parent the create writes).
    fn pending(&mut self, label: &str, dir: &Path, root_missing: bool) {
        self.group(
            label,
            dir,
            vec![Finding {
                component: Component::Node,
                kind: "pending-create",
                group: label.into(),
                file: if root_missing {
                    dir.to_path_buf()
                } else {
                    dir.join(iggy_superblock::FILE_NAME)
                },
                offset: 0,
                what: "the metadata created this partition after its last checkpoint and the \
                       node stopped before its directory was created: boot creates it empty, \
                       recovering from its peers in a replicated cluster"
                    .into(),
                action: Action::FinishCreate,
                bytes: 0,
            }],
        );
    }

    /// Records that boot could not create partition `label` (its directory missing or never
    /// made): the node boots without it and tries again, its peers serving it meanwhile.
    fn unavailable(&mut self, label: &str, dir: &Path, reason: &str) {
        let what = format!(
            "the partition could not be created: {reason}; the node boots without it, serves \
             every other group and tries again every 10 s (its peers serve this one meanwhile)"
        );
        let finding = Finding {
            component: Component::Node,
            kind: UNAVAILABLE_PARTITION,
            group: label.into(),
            file: dir.to_path_buf(),
            offset: 0,
            what,
            action: Action::NeedsPeerRepair,
            bytes: 0,
        };
        match self.report.groups.last_mut() {
            Some(group) if group.group == label => {
                group.status = Status::NeedsPeerRepair;
                group.error = None;
                self.report.findings.push(finding);
            }
            _ => self.group(label, dir, vec![finding]),
        }
    }

    /// Records a partition directory the metadata does not list; boot does not open it, and
    /// removes it when the metadata deleted it (a delete the node stopped in the middle of).
    fn unknown(&mut self, label: &str, dir: &Path, deleted: bool) {
        let (kind, what, action, status) = if deleted {
            (
                "deleted-partition",
                "the metadata deleted this partition (its stream or topic, or the partition \
                 itself: a partition delete or a purge): boot removes the directory (a delete \
                 the node stopped before it finished)",
                Action::RemoveLeftover,
                Status::Repair,
            )
        } else {
            (
                "unknown-partition",
                "the metadata never created this partition (a directory of another node, or \
                 metadata behind its partitions): boot does not open it",
                Action::Refuse,
                Status::Refuse,
            )
        };
        self.report.findings.push(Finding {
            component: Component::Node,
            kind,
            group: label.into(),
            file: dir.to_path_buf(),
            offset: 0,
            what: what.into(),
            action,
            bytes: 0,
        });
        self.report.groups.push(Group {
            group: label.into(),
            dir: dir.to_path_buf(),
            status,
            error: (!deleted).then(|| what.to_string()),
            io_error: false,
        });
    }

    /// Records a group that boot refuses.
    fn refused(&mut self, label: &str, dir: &Path, classified: Classified, error: String) {
        let (status, action) = match classified.refusal {
            Refusal::Damage if self.replicated => {
                (Status::NeedsPeerRepair, Action::NeedsPeerRepair)
            }
            Refusal::Damage | Refusal::Refuse | Refusal::Io => (Status::Refuse, Action::Refuse),
        };
        self.report.findings.push(Finding {
            component: classified.component,
            kind: match classified.refusal {
                Refusal::Damage => "damaged",
                Refusal::Refuse => "refused",
                Refusal::Io => "io-error",
            },
            group: label.into(),
            file: classified.file.unwrap_or_else(|| dir.to_path_buf()),
            offset: classified.offset,
            what: error.clone(),
            action,
            bytes: 0,
        });
        self.report.groups.push(Group {
            group: label.into(),
            dir: dir.to_path_buf(),
            status,
            error: Some(error),
            io_error: classified.refusal == Refusal::Io,
        });
    }

    /// The metadata group is absent (or never got a superblock) while partitions exist: the
    /// node's partitions cannot be checked against it and the node cannot serve them.
    fn metadata_missing(&mut self, dir: &Path) {
        self.refused(
            "metadata",
            dir,
            Classified {
                refusal: Refusal::Damage,
                component: Component::Node,
                file: Some(dir.to_path_buf()),
                offset: 0,
            },
            format!(
                "{}: no metadata group, but the node has partitions (a lost or unmounted \
                 volume?): partitions are not checked against it",
                dir.display()
            ),
        );
        if let Some(finding) = self.report.findings.last_mut() {
            finding.kind = "metadata-missing";
        }
    }
}

/// What every walk of a node starts from.
struct Walk {
    started: Instant,
    metadata_dir: PathBuf,
    identity: Option<Identity>,
    builder: Builder,
    /// The canonical partition directories.
    dirs: Vec<PartitionKey>,
    /// Those of them holding a [`NOT_CREATED_FILE`]: a create that found no room.
    not_created: BTreeSet<PartitionKey>,
    /// Findings about the node directory itself, reported after the groups'.
    node_findings: Vec<Finding>,
}

impl Walk {
    fn start<R: ReadStorage>(storage: &R, data_dir: &Path) -> Result<Self, RecoveryError> {
        let started = Instant::now();
        if !is_node(storage, data_dir)? {
            return Err(RecoveryError::NotANode {
                dir: data_dir.to_path_buf(),
            });
        }
        let metadata_dir = data_dir.join(METADATA_DIR);
        let identity = discover_identity(storage, &metadata_dir);
        let mut node_findings = Vec::new();
        let dirs = list_partitions(storage, data_dir, &mut node_findings)?;
        let mut not_created = BTreeSet::new();
        for key in &dirs {
            let marker = data_dir
                .join(PARTITIONS_DIR)
                .join(key.dir_name())
                .join(NOT_CREATED_FILE);
            if storage.exists(&marker)? {
                not_created.insert(*key);
            }
        }
        Ok(Self {
            started,
            metadata_dir,
            identity,
            builder: Builder::new(data_dir, identity),
            dirs,
            not_created,
            node_findings,
        })
    }

    /// What to do with each partition: the directories present against the partitions the
    /// metadata lists (when it could be read).
    fn plan(&self, metadata: Option<&Restored>) -> Vec<(PartitionKey, Disposition)> {
        let Some(Restored { state, base }) = metadata else {
            return self
                .dirs
                .iter()
                .map(|k| (*k, Disposition::Open { pending: false }))
                .collect();
        };
        let known = known_partitions(state);
        let present: BTreeSet<PartitionKey> = self.dirs.iter().copied().collect();
        let created_since_checkpoint =
            |key: &PartitionKey| !base.contains(&(key.stream, key.topic, key.partition));
        let mut plan: Vec<(PartitionKey, Disposition)> = known
            .union(&present)
            .map(|key| {
                let disposition = match (known.contains(key), present.contains(key)) {
                    // A create that found no room: nothing of the group was ever written (its
                    // replica sent nothing), so it is created as a pending one is.
                    (true, true) if self.not_created.contains(key) => Disposition::Pending,
                    (true, true) => Disposition::Open {
                        pending: created_since_checkpoint(key),
                    },
                    (true, false) if created_since_checkpoint(key) => Disposition::Pending,
                    (true, false) => Disposition::Missing,
                    (false, _) => Disposition::Unknown {
                        deleted: was_deleted(state, *key),
                    },
                };
                (*key, disposition)
            })
            .collect();
        plan.sort_by_key(|(key, _)| *key);
        plan
    }

    /// Ends the walk: the node's findings, the inventory of every file, the summary.
    fn finish<R: ReadStorage>(
        mut self,
        storage: &R,
        data_dir: &Path,
    ) -> Result<Report, RecoveryError> {
        let mut builder = self.builder;
        builder.report.findings.append(&mut self.node_findings);
        let counted = inventory::walk(storage, data_dir, &builder.report.findings)?;
        builder.report.findings.extend(counted.findings);
        builder.report.summary = Summary {
            groups: builder.report.groups.len(),
            files: counted.files,
            bytes: counted.bytes,
            sealed_bytes: builder.report.summary.sealed_bytes,
            spare_files: builder.report.summary.spare_files,
            elapsed_ms: u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX),
        };
        Ok(builder.report)
    }
}

/// What a walk does with one partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Disposition {
    /// Known to the metadata (or the metadata could not be read) and present: check or open it.
    /// `pending`: an op after the metadata's checkpoint created it, so a directory without a
    /// superblock is a create to finish.
    Open { pending: bool },
    /// Known to the metadata from an op after its checkpoint, no directory: a create to finish.
    Pending,
    /// Known to the metadata's checkpoint, no directory.
    Missing,
    /// A directory the metadata does not list; `deleted`: the metadata deleted it.
    Unknown { deleted: bool },
}

/// Every partition the metadata state lists.
#[must_use]
pub fn known_partitions(state: &iggy_metadata::State) -> BTreeSet<PartitionKey> {
    state
        .partition_keys()
        .into_iter()
        .map(|(stream, topic, partition)| PartitionKey {
            stream,
            topic,
            partition,
        })
        .collect()
}

/// The metadata state a boot restored, and the partitions its checkpoint lists.
struct Restored {
    state: iggy_metadata::State,
    base: BTreeSet<(u32, u32, u32)>,
}

/// Whether the metadata once had `key` and deleted it: its stream or topic id was allocated
/// and is gone. (Partitions are only ever added to a topic, so a topic that still exists never
/// lost one.)
fn was_deleted(state: &iggy_metadata::State, key: PartitionKey) -> bool {
    match state.streams.get(&key.stream) {
        None => key.stream >= 1 && key.stream < state.next_stream_id,
        Some(stream) => match stream.topics.get(&key.topic) {
            None => key.topic >= 1 && key.topic < stream.next_topic_id,
            // A partition deleted or purged: its id was given, and is listed no longer (ids are
            // never given again, so its directory can be nobody else's).
            Some(topic) => {
                key.partition >= 1
                    && key.partition < topic.next_partition_id
                    && topic.slot_of(key.partition).is_none()
            }
        },
    }
}

/// The findings of a WAL boot report.
pub fn wal_findings(label: &str, report: &iggy_wal::Report) -> Vec<Finding> {
    report
        .findings
        .iter()
        .map(|finding| wal_finding(label, finding))
        .collect()
}

/// One WAL finding in the node report's words (what `iggy-inspect wal` prints too).
#[must_use]
pub fn wal_finding(label: &str, finding: &iggy_wal::Finding) -> Finding {
    use iggy_wal::FindingKind;
    let (kind, what, action) = match &finding.kind {
        FindingKind::UnpublishedTail { entries } => (
            "unpublished-tail",
            format!("unpublished bytes past the published frontier ({entries} verified entries)"),
            Action::DiscardUnpublished,
        ),
        FindingKind::FileBeyondFrontier { entries } => (
            "file-beyond-frontier",
            format!("a whole file past the published frontier ({entries} verified entries)"),
            Action::DiscardUnpublished,
        ),
        FindingKind::FrontierSlotDamaged { slot, error } => (
            "frontier-slot-damaged",
            format!("frontier slot {slot} is unusable: {error}"),
            Action::RepairCopy,
        ),
        FindingKind::Adopted { entries, head_op } => (
            "adopted-entries",
            format!("{entries} verified entries past the valid slot adopted (head op {head_op})"),
            Action::RepairCopy,
        ),
        FindingKind::CarriedRestored {
            sequence,
            first_op,
            head_op,
        } => (
            "carried-restored",
            format!(
                "ops {first_op}..={head_op} are durable only in the ring record of publication \
                 {sequence} (the log's copy was never synced): boot writes them back"
            ),
            Action::RestoreCarried,
        ),
        FindingKind::CarriedCopyDamaged {
            record,
            sequence,
            error,
        } => (
            "carried-copy-damaged",
            match error {
                Some(error) => format!(
                    "ring record {record}, a copy of publication {sequence}, is unusable: {error}"
                ),
                None => format!(
                    "ring record {record} should hold publication {sequence} and does not (empty \
                     or older: a lost or misdirected write)"
                ),
            },
            Action::RepairCopy,
        ),
        FindingKind::CarriedPublicationUnreadable { sequence } => (
            "carried-unreadable",
            format!(
                "both ring records of publication {sequence} are unusable: its entries are \
                 verified from the log alone"
            ),
            Action::None,
        ),
        FindingKind::LeftoverTemp => (
            "leftover-temp",
            "a leftover frontier.tmp".into(),
            Action::RemoveLeftover,
        ),
        FindingKind::StaleSeal => (
            "stale-seal",
            "a seal beside no file it may describe (its file removed, or the head file, after \
             a crash or a cut): never trusted, removed"
                .into(),
            Action::RemoveLeftover,
        ),
        FindingKind::SealDisagrees => (
            "seal-disagrees",
            "a seal whose entry sizes are not its file's (only a deep check reads the file; a \
             plain boot takes the seal, and reads at its offsets refuse): remove it by hand \
             before starting the node (derived data: the next boot reads the file)"
                .into(),
            Action::RemoveLeftover,
        ),
        FindingKind::UnknownFile => (
            "unknown-file",
            "a file the log does not know; left alone".into(),
            Action::None,
        ),
        FindingKind::NotCreated => (
            "log-not-created",
            "the group's log was never created (creation stopped after the superblock): boot \
             creates it empty"
                .into(),
            Action::FinishCreate,
        ),
        FindingKind::MissingHeadFile => (
            "missing-head-file",
            "the empty log's first file is missing (a crash before it was made durable): boot \
             creates it empty"
                .into(),
            Action::FinishCreate,
        ),
    };
    Finding {
        component: Component::Wal,
        kind,
        group: label.into(),
        file: finding.file.clone(),
        offset: finding.offset,
        what,
        action,
        bytes: finding.bytes,
    }
}

fn superblock_findings(
    label: &str,
    dir: &Path,
    repairs: &[iggy_superblock::CopyRepair],
) -> Vec<Finding> {
    repairs
        .iter()
        .map(|repair| Finding {
            component: Component::Superblock,
            kind: match repair.reason {
                iggy_superblock::RepairReason::Damaged(_) => "superblock-copy-damaged",
                iggy_superblock::RepairReason::Stale { .. } => "superblock-copy-stale",
            },
            group: label.into(),
            file: dir.join(iggy_superblock::FILE_NAME),
            offset: repair.slot.offset(),
            what: repair.to_string(),
            action: Action::RepairCopy,
            bytes: copy::COPY_SIZE as u64,
        })
        .collect()
}

/// A leftover temporary file of a group, which boot removes.
fn leftover_finding(label: &str, component: Component, file: PathBuf, what: &str) -> Finding {
    Finding {
        component,
        kind: "leftover-temp",
        group: label.into(),
        file,
        offset: 0,
        what: what.into(),
        action: Action::RemoveLeftover,
        bytes: 0,
    }
}

fn partition_findings(label: &str, dir: &Path, report: &iggy_segments::Report) -> Vec<Finding> {
    use iggy_segments::{FindingKind, InstallFinding};
    let mut findings = superblock_findings(label, dir, &report.superblock_repairs);
    findings.extend(wal_findings(label, &report.wal));
    for finding in &report.findings {
        let (component, kind, what, action) = match &finding.kind {
            FindingKind::IndexRebuild { reason } => (
                Component::Index,
                "index-rebuild",
                format!("index {reason}"),
                Action::RebuildIndex,
            ),
            FindingKind::OrphanIndex => (
                Component::Index,
                "orphan-index",
                "an index whose segment is gone".into(),
                Action::RemoveLeftover,
            ),
            FindingKind::StagingLeftover => (
                Component::Install,
                "staging-leftover",
                "a staged file no install committed".into(),
                Action::RemoveLeftover,
            ),
            FindingKind::OffsetsLeftover => (
                Component::Offsets,
                "offsets-leftover",
                "a leftover temporary offset file".into(),
                Action::RemoveLeftover,
            ),
            FindingKind::SuperblockTemp => (
                Component::Superblock,
                "leftover-temp",
                "a leftover superblock.tmp (a creation whose rename was lost)".into(),
                Action::RemoveLeftover,
            ),
            FindingKind::OffsetNotApplied {
                kind,
                id,
                offset,
                op,
            } => (
                Component::Offsets,
                "offset-not-applied",
                format!(
                    "the committed store of offset {offset} for {} {id} (op {op}) is not in its file",
                    kind.name()
                ),
                Action::ApplyCommitted,
            ),
            FindingKind::OffsetSlotDamaged { slot, reason, kept } => (
                Component::Offsets,
                "offset-slot-damaged",
                format!(
                    "slot {slot} does not verify ({reason}): the file reads as {} for {} {} \
                     (sequence {}), the other slot's; a store a crash tore, or rot of the newest",
                    match (kept.sequence, kept.offset) {
                        (0, _) => "no offset yet (its placeholder)".to_string(),
                        (_, iggy_segments::offsets::DELETED) => "no offset (deleted)".to_string(),
                        (_, offset) => format!("offset {offset}"),
                    },
                    kept.kind.name(),
                    kept.id,
                    kept.sequence
                ),
                Action::RepairCopy,
            ),
            FindingKind::Install(InstallFinding::Uncommitted) => (
                Component::Install,
                "install-uncommitted",
                "an install that did not commit: the old files are restored".into(),
                Action::RollbackInstall,
            ),
            FindingKind::Install(InstallFinding::Abandoned) => (
                Component::Install,
                "install-abandoned",
                "an install abandoned while building its backup".into(),
                Action::RemoveLeftover,
            ),
            FindingKind::Install(InstallFinding::Committed) => (
                Component::Install,
                "install-committed",
                "a committed install's retired files".into(),
                Action::RemoveLeftover,
            ),
        };
        findings.push(Finding {
            component,
            kind,
            group: label.into(),
            file: finding.file.clone(),
            offset: 0,
            what,
            action,
            bytes: 0,
        });
    }
    findings
}

fn metadata_findings(label: &str, dir: &Path, checked: &metadata_group::Checked) -> Vec<Finding> {
    let mut findings = superblock_findings(label, dir, &checked.superblock_repairs);
    for file in &checked.leftovers {
        let component = if file.ends_with(iggy_superblock::TEMP_FILE_NAME) {
            Component::Superblock
        } else {
            Component::Snapshot
        };
        findings.push(leftover_finding(
            label,
            component,
            file.clone(),
            "a leftover temporary file of an interrupted write",
        ));
    }
    if let Some(install) = &checked.install {
        let mut what = format!(
            "a snapshot install of checkpoint {} committed (the superblock names it) but did \
             not finish:",
            install.checkpoint_op
        );
        if install.publish_staged {
            what.push_str(" snapshot.bin.receiving becomes snapshot.bin;");
        }
        if install.reset_log {
            match install.superseded {
                Some((first, head)) => what.push_str(&format!(
                    " the log (ops {first}..={head}) ends below it and is made anew after it"
                )),
                None => what.push_str(" the log is made anew after it"),
            }
        }
        findings.push(Finding {
            component: Component::Snapshot,
            kind: "install-unfinished",
            group: label.into(),
            file: dir.join(iggy_snapshot::FILE_NAME),
            offset: 0,
            what: what.trim_end_matches(';').into(),
            action: Action::FinishInstall,
            bytes: 0,
        });
    }
    if let Some(aside) = &checked.superseded_log {
        findings.push(leftover_finding(
            label,
            Component::Wal,
            aside.clone(),
            "the log a snapshot install superseded",
        ));
    }
    if let Some(wal) = &checked.wal {
        findings.extend(wal_findings(label, wal));
    }
    findings.extend(
        checked
            .wal_creation
            .iter()
            .map(|finding| wal_finding(label, finding)),
    );
    findings
}

/// The metadata group of a node whose creation never got to the superblock: what is there
/// (a `superblock.tmp`, which boot removes), reported as the group.
fn fresh_metadata<R: ReadStorage>(
    storage: &R,
    dir: &Path,
) -> Result<Option<Finding>, RecoveryError> {
    Ok(iggy_superblock::leftover_temp(storage, dir)?.map(|file| {
        leftover_finding(
            "metadata",
            Component::Superblock,
            file,
            "a leftover superblock.tmp (the group's creation stopped before its rename was \
             durable)",
        )
    }))
}

/// Records the metadata group's outcome (checked or opened): its findings, or its refusal.
/// Returns what was opened, if anything, and the metadata state the partitions are checked
/// against (`None` when it could not be read).
fn record_metadata<T>(
    builder: &mut Builder,
    dir: &Path,
    fresh: Option<Finding>,
    has_partitions: bool,
    outcome: Result<Option<(T, metadata_group::Checked)>, GroupError>,
) -> (Option<T>, Option<Restored>) {
    let label = "metadata";
    match outcome {
        Ok(Some((opened, checked))) => {
            builder.group(label, dir, metadata_findings(label, dir, &checked));
            builder.report.summary.sealed_bytes +=
                checked.wal.as_ref().map_or(0, |wal| wal.sealed_bytes);
            builder.report.summary.spare_files += checked
                .wal
                .as_ref()
                .map_or(0, |wal| wal.spares.len() as u64);
            (
                Some(opened),
                Some(Restored {
                    state: checked.state,
                    base: checked.base_partitions,
                }),
            )
        }
        Ok(None) => {
            if has_partitions {
                builder.metadata_missing(dir);
                builder.report.findings.extend(fresh);
            } else if let Some(finding) = fresh {
                builder.group(label, dir, vec![finding]);
            }
            (None, None)
        }
        Err(error) => {
            builder.refused(
                label,
                dir,
                classify_metadata(&error, dir),
                error.to_string(),
            );
            (None, None)
        }
    }
}

/// Checks the node in `data_dir` without writing (the storage may be read-only): what
/// [`boot`] would find and do. `progress(done, total)` hears each group.
pub fn check<R: ReadStorage>(
    storage: &R,
    data_dir: &Path,
    progress: impl FnMut(usize, usize),
) -> Result<Report, RecoveryError> {
    check_with(storage, data_dir, &BootConfig::new(0), progress)
}

/// [`check`] of a node the server boots with `config` (its index interval decides whether an
/// index needs rebuilding).
pub fn check_with<R: ReadStorage>(
    storage: &R,
    data_dir: &Path,
    config: &BootConfig,
    mut progress: impl FnMut(usize, usize),
) -> Result<Report, RecoveryError> {
    let mut walk = Walk::start(storage, data_dir)?;
    // A lock file that is not a file is reported by the inventory; here it only means no holder.
    walk.builder.report.in_use = storage
        .lock_holder(data_dir.join(LOCK_FILE))
        .ok()
        .flatten()
        .map(|holder| InUse { pid: holder.pid });
    let metadata_dir = walk.metadata_dir.clone();
    let has_partitions = !walk.dirs.is_empty();
    let fresh = fresh_metadata(storage, &metadata_dir)?;
    let checked = if storage.exists(&metadata_dir)? {
        metadata_group::check_verifying(
            storage,
            &metadata_dir,
            &walk.identity.unwrap_or(UNKNOWN_IDENTITY),
            config.verify,
        )
        .map(|c| c.map(|c| ((), c)))
    } else {
        Ok(None)
    };
    let (_, restored) = record_metadata(
        &mut walk.builder,
        &metadata_dir,
        fresh,
        has_partitions,
        checked,
    );
    let state = restored.as_ref().map(|r| &r.state);
    let plan = walk.plan(restored.as_ref());
    let root_missing = !storage.exists(data_dir.join(PARTITIONS_DIR))?;
    let total = plan.len() + 1;
    progress(1, total);
    for (done, (key, disposition)) in plan.into_iter().enumerate() {
        let dir = data_dir.join(PARTITIONS_DIR).join(key.dir_name());
        let label = key.label();
        match disposition {
            Disposition::Missing => walk.builder.missing(
                &label,
                &dir,
                "is missing though the metadata's checkpoint lists the partition",
            ),
            Disposition::Pending => walk.builder.pending(&label, &dir, root_missing),
            Disposition::Unknown { deleted } => walk.builder.unknown(&label, &dir, deleted),
            Disposition::Open { pending } => {
                let identity = walk
                    .identity
                    .or_else(|| discover_identity(storage, &dir))
                    .unwrap_or(UNKNOWN_IDENTITY);
                let partition = config.partition(identity, key, segment_size(state, key));
                let temp = iggy_superblock::leftover_temp(storage, &dir).ok().flatten();
                let checked =
                    iggy_segments::check(storage, &dir, &partition).map(|r| r.map(|r| ((), r)));
                if walk
                    .builder
                    .partition(&label, &dir, temp, checked, pending)
                    .is_some()
                {
                    walk.builder.rebuilt_before(storage, &label, &dir)?;
                }
            }
        }
        progress(done + 2, total);
    }
    walk.finish(storage, data_dir)
}

/// The segment size the metadata gives a partition's topic.
fn segment_size(state: Option<&iggy_metadata::State>, key: PartitionKey) -> Option<u64> {
    let stream = state?.streams.get(&key.stream)?;
    Some(stream.topics.get(&key.topic)?.segment_size_bytes)
}

/// Boots the node in `data_dir` (`Open`: what the server runs; `Repair`: the same, then the
/// caller stops), holding its lock (see [`lock`]) for as long as the returned state lives.
/// Each group's findings come from the same analysis [`check`] runs, and the group then applies
/// exactly that plan. Refused groups are reported and left closed, as are partitions the
/// metadata does not list.
/// Production sizes and a fresh incarnation ([`BootConfig::fresh`]); [`boot_with`] takes them.
pub fn boot<S: Storage + Clone>(
    storage: S,
    data_dir: &Path,
    mode: Mode,
) -> Result<(NodeState<S>, Report), RecoveryError> {
    boot_with(storage, data_dir, mode, &BootConfig::fresh())
}

/// [`boot`] with the caller's sizes, budgets and incarnation.
pub fn boot_with<S: Storage + Clone>(
    storage: S,
    data_dir: &Path,
    mode: Mode,
    config: &BootConfig,
) -> Result<(NodeState<S>, Report), RecoveryError> {
    let lock = lock(&storage, data_dir)?;
    boot_locked(lock, storage, data_dir, mode, config)
}

/// [`boot_with`] under a lock the caller already holds (`iggy-fsck --repair` takes it before
/// its check, so that the plan it prints is the plan it applies).
pub fn boot_locked<S: Storage + Clone>(
    lock: NodeLock,
    storage: S,
    data_dir: &Path,
    mode: Mode,
    config: &BootConfig,
) -> Result<(NodeState<S>, Report), RecoveryError> {
    assert!(
        mode != Mode::Check,
        "Check mode is `check()`: it needs only a read-only storage"
    );
    let mut walk = Walk::start(&storage, data_dir)?;
    let config = &BootConfig {
        previous_shutdown_clean: consume_clean_shutdown(&storage, data_dir)?,
        defer_boot_syncs: config.defer_boot_syncs && storage.can_sync_filesystem(),
        ..config.clone()
    };
    let metadata_dir = walk.metadata_dir.clone();
    let has_partitions = !walk.dirs.is_empty();
    let fresh = fresh_metadata(&storage, &metadata_dir)?;
    let opened = if storage.exists(&metadata_dir)? {
        // One analysis: open reports what it found as `check` would.
        MetadataGroup::open_reporting(
            storage.clone(),
            &metadata_dir,
            &walk.identity.unwrap_or(UNKNOWN_IDENTITY),
            config.metadata_wal(),
        )
    } else {
        Ok(None)
    };
    let (metadata, restored) = record_metadata(
        &mut walk.builder,
        &metadata_dir,
        fresh,
        has_partitions,
        opened,
    );
    let state = restored.as_ref().map(|r| &r.state);
    let mut partitions = BTreeMap::new();
    let plan = walk.plan(restored.as_ref());
    let root_missing = !storage.exists(data_dir.join(PARTITIONS_DIR))?;
    // The partitions open in parallel: each boot is mostly waiting on its own syncs, and the
    // device takes several at once (a node of 10,000 partitions: docs/benchmarks.md). The
    // report is then built in key order, as one thread would.
    let jobs: Vec<(PartitionKey, PathBuf, iggy_segments::Config)> = plan
        .iter()
        .filter(|(_, disposition)| matches!(disposition, Disposition::Open { .. }))
        .map(|(key, _)| {
            let dir = data_dir.join(PARTITIONS_DIR).join(key.dir_name());
            let identity = walk
                .identity
                .or_else(|| discover_identity(&storage, &dir))
                .unwrap_or(UNKNOWN_IDENTITY);
            let partition = config.partition(identity, *key, segment_size(state, *key));
            (*key, dir, partition)
        })
        .collect();
    let mut opened = open_partitions(&storage, &jobs, mode, config.boot_threads).into_iter();
    for (key, disposition) in plan {
        let dir = data_dir.join(PARTITIONS_DIR).join(key.dir_name());
        let label = key.label();
        let create = match disposition {
            Disposition::Missing => {
                walk.builder.missing(
                    &label,
                    &dir,
                    "is missing though the metadata's checkpoint lists the partition",
                );
                false
            }
            Disposition::Pending => {
                walk.builder.pending(&label, &dir, root_missing);
                true
            }
            Disposition::Unknown { deleted } => {
                walk.builder.unknown(&label, &dir, deleted);
                if deleted {
                    remove_partition(&storage, data_dir, key)?;
                }
                false
            }
            Disposition::Open { pending } => {
                let (temp, outcome) = opened
                    .next()
                    .unwrap_or_else(|| unreachable!("one outcome per partition to open"));
                let empty = matches!(outcome, Ok(None));
                match walk.builder.partition(&label, &dir, temp, outcome, pending) {
                    Some(partition) => {
                        if walk.builder.rebuilt_before(&storage, &label, &dir)? {
                            partitions.insert(key, partition);
                        }
                        false
                    }
                    None => pending && empty,
                }
            }
        };
        if create && let (Some(state), Some(identity)) = (state, walk.identity) {
            match create_partition(&storage, data_dir, config, identity, state, key, true) {
                Ok(partition) => {
                    partitions.insert(key, partition);
                }
                // A node boots without a partition it has no room to create (a full disk, no
                // descriptors): the node hosts every other group and tries it again
                // (`iggy-node`'s unavailable partitions); its peers serve it meanwhile. Any
                // other failure is the storage's, and a single-replica node refuses.
                Err(source) if config.unavailable_partitions && source.is_exhaustion() => {
                    let _ = mark_not_created(&storage, data_dir, key);
                    walk.builder.unavailable(&label, &dir, &source.to_string());
                }
                Err(source) => {
                    return Err(RecoveryError::CreatePartition {
                        dir: data_dir.to_path_buf(),
                        label: label.clone(),
                        source: Box::new(source),
                    });
                }
            }
        } else if config.rebuild_from_peers
            && mode == Mode::Open
            && walk.builder.needs_peers(&label)
            && let (Some(state), Some(identity)) = (state, walk.identity)
        {
            let existed = storage.exists(&dir)?;
            match rebuild_partition(&storage, data_dir, config, identity, state, key) {
                Ok(Some((partition, marker, damaged))) => {
                    walk.builder.rebuilt(&label, &dir, marker, &damaged);
                    partitions.insert(key, partition);
                }
                Ok(None) => {}
                // A partition whose directory is gone (or was never made, its create having
                // failed) and that cannot be created now: as above.
                Err(source)
                    if config.unavailable_partitions && !existed && source.is_exhaustion() =>
                {
                    let _ = mark_not_created(&storage, data_dir, key);
                    walk.builder.unavailable(&label, &dir, &source.to_string());
                }
                Err(source) => {
                    return Err(RecoveryError::RebuildPartition {
                        dir: data_dir.to_path_buf(),
                        label: label.clone(),
                        source: Box::new(source),
                    });
                }
            }
        }
    }
    if config.defer_boot_syncs {
        // Every group's boot writes at once, before anything is appended, published or
        // acknowledged: the node is handed out only once they are durable. `syncfs` also
        // writes back whatever else on the file system is dirty (other processes' files too),
        // so its time is logged apart from the rest of the boot's.
        let started = std::time::Instant::now();
        storage
            .sync_filesystem()
            .map_err(|source| RecoveryError::BootSync {
                dir: data_dir.to_path_buf(),
                source,
            })?;
        tracing::info!(
            elapsed_ms = started.elapsed().as_secs_f64() * 1e3,
            "boot's writes synced with the file system"
        );
    }
    let identity = walk.identity;
    let report = walk.finish(&storage, data_dir)?;
    Ok((
        NodeState {
            identity,
            metadata,
            partitions,
            lock,
        },
        report,
    ))
}
