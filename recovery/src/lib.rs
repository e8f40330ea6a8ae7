//! Node boot recovery, one path for the server, `iggy-fsck` and the simulator.
//!
//! [`check`] runs every group's boot analysis on a read-only storage and reports what boot would
//! find and do; [`boot`] runs the same analyses and applies them (`Open`, `Repair`). The walk
//! follows DESIGN §3: the metadata group (superblock, snapshot, WAL), then every partition
//! (install roll-back first, superblock, WAL frontier, segments, indexes, consumer offsets).
//! See `docs/recovery.md`.
//!
//! Invariants:
//! - a check never writes: it takes a `ReadStorage`;
//! - for every group, boot applies exactly the plan the check reports (each crate's `check` and
//!   `open` share one analysis), so `iggy-fsck`'s verdict is boot's;
//! - partitions are independent: a refused partition is reported and left closed, and the
//!   others are checked and opened.

pub mod audit;
pub mod boot;
mod inventory;
pub mod populate;
pub mod report;

pub use boot::{
    BootConfig, CLEAN_SHUTDOWN_FILE, LOCK_FILE, METADATA_DIR, NOT_CREATED_FILE, NodeLock,
    NodeState, PARTITIONS_DIR, PartitionKey, RecoveryError, UNAVAILABLE_PARTITION, boot,
    boot_locked, boot_with, check, check_with, create_partition, known_partitions, lock,
    mark_not_created, metadata_wal_config, partition_config, remove_partition, wal_finding,
    write_clean_shutdown,
};
pub use iggy_wal::Mode;
pub use iggy_wal::boot::Verify;
pub use report::{
    Action, Component, Finding, Group, InUse, PartitionSummary, Report, Status, Summary, exit,
    next_step,
};
