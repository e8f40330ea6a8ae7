//! A partition's message log on the WAL ([`partition`]): segments that are the WAL's keyed files,
//! a sparse [`index`] per segment, retention, and boot's continuity checks; its consumer
//! [`offsets`]; and the staged [`install`] through which state transfer replaces a partition.

pub mod index;
pub mod install;
pub mod offsets;
pub mod partition;

pub use install::{Install, InstallFinding, StateArtifact};
pub use partition::{
    Action, Appended, Config, Finding, FindingKind, Partition, PartitionError, ReadPath, Report,
    SegmentInfo, StoredBatch, check,
};
