//! A deterministic simulator of an Iggy cluster: three nodes, each a real node directory on its
//! own `SimStorage` booted through `recovery::boot`, a VSR replica (`vsr`) per consensus group
//! (the metadata group and the partitions) over the real storage crates, a packet simulator,
//! clients, and a fault placer, all driven from one seed as discrete events. Checkers read the
//! state without faults and without drawing random numbers. See `docs/vsr.md`, "Simulator".
//!
//! Invariants:
//! - a run is a pure function of its seed: separate random streams for the network, storage
//!   latency, faults, workload and each disk, split from the seed by name;
//! - faults are placed so that a quorum keeps every committed op: a node crashes, loses power
//!   or has storage faults only while every node is up and every replica of every group holds
//!   every op its group committed (one failure at a time, what replicated durability covers);
//! - a checker failure names the checker, what it saw, every replica's status and the last
//!   events, and the seed replays it exactly.

pub mod checker;
pub mod client;
pub mod cluster;
pub mod consumer;
pub mod failover;
pub mod network;
pub mod node;
pub mod producer;
pub mod rng;

pub use cluster::{Cluster, Failure, Faults, Options, Report, Workload, run};
