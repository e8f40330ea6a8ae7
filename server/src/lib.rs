//! `iggy-server`: the node of many groups as a process. Built so far, as a library:
//! [`translate`] (the Iggy client wire to the replicas' requests and back), [`runtime`] (the node
//! as threads: a tick thread that owns it, storage lanes on a pool), [`bus`] (the replica bus
//! over TCP), [`client_port`] (the Iggy binary protocol, with forwarding to each group's primary)
//! and [`process`], which puts one node together. The configuration, the binary, metrics and
//! `dev` are issue #32's next steps (`docs/server.md`).

pub mod bus;
pub mod client_port;
pub mod config;
pub mod metrics;
pub mod process;
pub mod runtime;
pub mod translate;
