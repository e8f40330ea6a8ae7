//! Pure codecs for the toolkit's on-disk formats. No I/O happens here, so every decoder can be
//! fuzzed and shared by the engine crates and the offline tools alike.
//!
//! Invariants kept by every codec in this crate:
//! - integers are little-endian and of a fixed width (`u16`, `u32`, `u64`, `u128`), never `usize`;
//! - every fixed-size record has its size and field offsets locked by `const` assertions;
//! - decoding never panics and never allocates more than the input justifies;
//! - reserved bytes are written as zero and rejected when they are not zero, so that a later
//!   version can give them a meaning without old readers misreading them.

pub mod batch;
pub mod checksum;
pub mod constants;
pub mod header;
pub mod le;

pub use checksum::{Checksum, checksum};
pub use header::{Command, Header, HeaderError, Position, PrepareMeta, operation};
