//! The benchmark harness behind `iggy-bench`: raw disk figures first (the limits every engine is
//! measured against), then the toolkit and its peers as their issues land.

pub mod boot;
pub mod chart;
pub mod compare;
pub mod disk;
pub mod engines;
pub mod environment;
pub mod groups;
pub mod segments;
pub mod snapshot;
pub mod stats;
