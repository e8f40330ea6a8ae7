//! The node of many consensus groups, as a library: boot through `iggy_recovery`, one VSR
//! replica per group (the metadata group and every partition the metadata lists), each group's
//! ordered lane of storage effects and the executor that carries them out through the storage
//! crates, the repair ration the groups share, and who leads each group (the routing fact a node
//! answers clients with). Generic over `iggy_io::Storage`; no threads, no clock, no network: the
//! simulator drives it on simulated disks, the server on real ones (`DESIGN.md` §9).
//!
//! - [`node`]: the node, its groups, draining a replica's effects, running a lane's head, the
//!   observer hooks a host's checkers use, clean shutdown;
//! - [`store`]: a group's storage and the effect executor;
//! - [`boot`]: what a booted group hands its replica;
//! - [`serve`]: peers' repair rounds and transfer chunks read back from disk, and retention
//!   passes, off the lanes;
//! - [`image`]: partition state transfer: the image a peer serves, the staging and install.

pub mod boot;
pub mod image;
pub mod node;
pub mod serve;
pub mod store;

pub use node::{
    Done, Drained, Group, Job, Node, NodeConfig, Observer, Ran, Retired, Unobserved, retire,
};
pub use serve::{Read, Served};
pub use store::{Catalog, Changes, Created, GroupKind, Store, WriteOut, execute, execute_with};
