//! How a partition is laid out and bounded.

use iggy_superblock::Identity;
use iggy_wal::{self as wal, Naming};

/// The suffix of files received for a staged install (swept by boot).
pub const STAGING_SUFFIX: &str = ".staging";

/// Bytes a replicated partition appends between checkpoints, when its WAL publishes whatever a
/// backup acknowledged (DESIGN §4, rule 1).
pub const CHECKPOINT_BYTES: u64 = wal::CHECKPOINT_INTERVAL_BYTES;

/// The largest prepare a partition takes (a batch of 1 MB messages, say, plus headers).
pub const PREPARE_BYTES_MAX: u64 = wal::PREPARE_BYTES_MAX;

/// How a partition is laid out and bounded.
#[derive(Clone, Debug)]
pub struct Config {
    /// The partition's consensus group (checked against its WAL frontier and every entry).
    pub group: u128,
    /// Stamped on every batch and checked at boot.
    pub partition_id: u64,
    /// Checked against the superblock.
    pub identity: Identity,
    /// This boot's incarnation, stamped on every publication.
    pub incarnation: u64,
    /// The view a new partition starts in (so primaries can be spread across nodes: the
    /// primary of a view is `view % replicas`). Used by `create` only.
    pub initial_view: u32,
    /// The superblock incarnation a created partition starts with: 0 for a group new to the
    /// cluster (its replica starts in normal status), a boot's incarnation for one created
    /// where a directory may have been lost (its replica recovers from its peers first).
    pub initial_incarnation: u64,
    /// A segment is rotated once the next entry would not fit (the topic's segment size).
    pub segment_size_bytes: u64,
    /// An index entry at least every this many bytes of log.
    pub index_interval_bytes: u64,
    /// Bytes appended but not published before appends fail with `Backpressure`: at least a
    /// checkpoint's worth and the largest prepare.
    pub unpublished_bytes_max: u64,
    /// How reads of sealed segments get their bytes.
    pub read_path: ReadPath,
    /// One replica of a group: an entry commits when the caller says so
    /// ([`crate::Partition::commit`], a quorum's decision), and retention keeps everything past
    /// the commit point. Otherwise (a single node) an entry commits once published.
    pub replicated: bool,
    /// The process before this boot shut down cleanly: boot rewrites only damaged copies of
    /// the superblock and not the trusted frontier (see `iggy_wal::Config`). Set by the
    /// node's boot.
    pub previous_shutdown_clean: bool,
    /// Boot leaves its rewrites of the superblock and the WAL unsynced, and the caller syncs
    /// the file system before the partition is used (see `iggy_wal::Config::defer_boot_syncs`).
    /// Set by the node's boot; off by default.
    pub defer_boot_syncs: bool,
    /// How much of the WAL's retained files boot reads (`Verify::Everything`: `iggy-fsck
    /// --deep`).
    pub verify: wal::boot::Verify,
    /// Boot raises the superblock's commit point to the one its prepares prove. On in every
    /// real use; off only to show what that prevents (`iggy-sim --without
    /// durable-commit-point`: a restarted quorum then ends the log at a stale commit point).
    pub commit_from_log: bool,
}

impl Config {
    /// Defaults: 1 GiB segments, an index entry every 4 KiB, a checkpoint plus the largest
    /// prepare unpublished, view 0, reads through memory maps of sealed segments, a single
    /// node.
    #[must_use]
    pub fn new(group: u128, partition_id: u64, identity: Identity) -> Self {
        Self {
            group,
            partition_id,
            identity,
            incarnation: 0,
            initial_view: 0,
            initial_incarnation: 0,
            segment_size_bytes: 1 << 30,
            index_interval_bytes: 4096,
            unpublished_bytes_max: CHECKPOINT_BYTES + PREPARE_BYTES_MAX,
            read_path: ReadPath::Mapped,
            replicated: false,
            previous_shutdown_clean: false,
            defer_boot_syncs: false,
            verify: wal::boot::Verify::Sealed,
            commit_from_log: true,
        }
    }

    /// How boot repairs the superblock.
    pub(crate) fn superblock_policy(&self) -> iggy_superblock::RepairPolicy {
        iggy_superblock::RepairPolicy::at_boot(self.previous_shutdown_clean, self.defer_boot_syncs)
    }

    pub(crate) fn wal(&self) -> wal::Config {
        wal::Config {
            incarnation: self.incarnation,
            file_size_bytes: self.segment_size_bytes,
            unpublished_bytes_max: self.unpublished_bytes_max,
            naming: Naming::ByKey,
            previous_shutdown_clean: self.previous_shutdown_clean,
            defer_boot_syncs: self.defer_boot_syncs,
            // A partition's WAL files are its segments: retention removes them to free disk.
            spare_files: 0,
            ..wal::Config::new(self.group)
        }
    }
}

/// How sealed segments are read (the head segment is always read with `read_at`: it grows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadPath {
    /// `read_at` into a buffer per batch.
    ReadAt,
    /// A read-only memory map per sealed segment, where the storage offers one.
    Mapped,
}
