//! One replica of one Viewstamped Replication group, sans I/O: the protocol of Apache Iggy's
//! clustering article as a value. Ticks (10 ms), messages and the completions of its effects go
//! in; effects (send, write the superblock, prepare, journal, truncate, publish, commit) come
//! out. It never blocks, never reads a clock (time is its tick count) and draws no random number.
//! The server runs it over the network and the storage crates; the simulator (`sim`) runs the
//! same code over a simulated network and disks. See `docs/vsr.md`.
//!
//! Invariants:
//! - no message that names a view leaves before the superblock holds that view (view before
//!   `StartViewChange` and `DoViewChange`; log_view before `StartView`, `PrepareOk`, `Prepare`
//!   and `Commit`), and the agreed log is published before the superblock names its log_view;
//! - in-memory state that depends on a durable step changes only when that step completes, and
//!   records exactly the values written;
//! - every header the replica holds is known good: its own storage's, the view authority's, or
//!   proved by the hash chain against one that is;
//! - an op above the merged commit point is dropped only on a nack quorum, and a view does not
//!   start while an op can be neither proved dead nor served;
//! - a restarted replica stays out of every quorum until a primary's `StartView` (echoing its
//!   incarnation) makes it a backup, and then acknowledges only what it journaled.

pub mod clients;
pub mod config;
pub mod effect;
mod journal;
mod merge;
pub mod message;
pub mod ration;
pub mod replica;
pub mod safeguards;

pub use clients::Session;
pub use config::{Config, TICK_MS, nack_quorum, replication_quorum, view_change_quorum};
pub use effect::{ACK_BOUND_UNKNOWN, Destination, Durable, Effect, EffectId, Outcome};
pub use message::{
    DecodeError, From, Message, ReplyStatus, SNAPSHOT_CHUNK_BYTES_MAX, SnapshotRef, ViewHeader,
};
pub use ration::RepairRation;
pub use replica::{Boot, Counters, Identity, Replica, Status};
pub use safeguards::Safeguards;
