//! `iggy-server`: the node of many groups as a process. Built so far: [`translate`], between the
//! Iggy client wire (`iggy-protocol`) and the replicas' requests and replies, and [`runtime`],
//! the node as threads (a tick thread that owns it, storage lanes on a pool), and [`bus`], the
//! replica bus over TCP. The client port, the configuration and the binary are issue #32's next
//! steps (`docs/server.md`).

pub mod bus;
pub mod runtime;
pub mod translate;
