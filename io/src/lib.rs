//! The storage layer: the one crate that touches the file system.
//!
//! - [`Storage`] / [`ReadStorage`]: the traits every durable protocol is written against, with
//!   their durability contract (see [`storage`]).
//! - [`OsStorage`]: the real file system through `rustix`.
//! - [`SimStorage`]: a seeded in-memory disk with power loss, torn writes and injected faults.
//! - [`ShortIo`]: a wrapper whose reads and writes are short.
//! - [`ReadOnly`]: a wrapper through which writing does not type-check.
//! - [`enumerate`]: every crash state of a recorded workload, for recovery to be checked on.
//! - [`conformance`]: the tests every backend passes.

pub mod conformance;
pub mod enumerate;
mod error;
pub mod os;
mod path;
mod read_only;
pub mod short;
pub mod sim;
pub mod soak;
pub mod storage;
mod uring;

pub use enumerate::{CrashFailure, CrashState, Enumeration, EnumerationConfig, enumerate};
pub use error::{Error, ErrorKind, Op, Result};
pub use os::{
    DeviceCounters, IoPath, MountInfo, OsStorage, device_counters, mount_info, open_file_count,
    resident_bytes,
};
pub use read_only::ReadOnly;
pub use short::ShortIo;
pub use sim::{CrashPlan, DirOrder, Fault, FaultConfig, QuietSim, SimStorage, TraceOp, WriteFate};
pub use storage::{
    DirEntry, EntryKind, FileLock, LockHolder, Mapping, OpenMode, ReadFile, ReadStorage, Storage,
    WriteFile,
};
