//! `iggy-server`: the node of many groups as a process. Built so far, as a library:
//! [`translate`] (the Iggy client wire to the replicas' requests and back), [`runtime`] (the node
//! as threads: a tick thread that owns it, storage lanes on a pool), [`bus`] (the replica bus
//! over TCP), [`client_port`] (the Iggy binary protocol, with forwarding to each group's primary)
//! [`process`], which puts one node together, [`config`] and [`metrics`]; [`load`] is
//! `iggy-server load` and `verify`. `docs/server.md` is the operator's guide.

pub mod accept;
pub mod admission;
pub mod bus;
pub mod client_port;
pub mod config;
pub mod hostile;
pub mod load;
pub mod metrics;
pub mod process;
pub mod proxy;
pub mod runtime;
pub mod snapshot;
pub mod system;
pub mod tls;
pub mod translate;
pub mod users;
