//! A partition's message log on the WAL ([`partition`]): segments that are the WAL's keyed
//! files, entries that are VSR prepares ([`append`]: a primary prepares, a backup journals the
//! same bytes), reads up to a commit point ([`read`]), commit and cut ([`truncate`]), retention,
//! a sparse [`index`] per segment and boot's checks ([`boot`]); its consumer [`offsets`]; and the
//! staged [`install`] through which state transfer replaces a partition.
//!
//! Modules depend one way: `config`, `error`, `entry`, `index`, `offsets` and `report` at the
//! bottom; `install` on them; `boot` on `install`; `partition` on `boot`; and the partition's
//! operations (`append`, `read`, `retention`, `truncate`) on `partition`.

pub mod append;
pub mod boot;
pub mod config;
pub mod entry;
pub mod error;
pub mod index;
pub mod install;
pub mod offsets;
pub mod partition;
pub mod read;
pub mod rebuilt;
pub mod report;
mod retention;
pub mod sessions;
mod truncate;

pub use append::{Appended, Prepared, Request};
pub use boot::check;
pub use config::{CHECKPOINT_BYTES, Config, PREPARE_BYTES_MAX, ReadPath, STAGING_SUFFIX};
pub use entry::{Kind, OffsetEntry};
pub use error::PartitionError;
pub use iggy_format::PrepareMeta;
pub use install::{Install, InstallFinding, StateArtifact};
pub use partition::Partition;
pub use read::StoredBatch;
pub use report::{Action, Finding, FindingKind, Report, SegmentInfo};
pub use sessions::Session;
