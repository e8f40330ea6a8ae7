//! One server node put together: the node booted from its directory, its runtime (tick thread,
//! storage threads), the replica bus and the client port on a tokio runtime of their own.

use std::net::SocketAddr;
use std::sync::Arc;

use iggy_io::Storage;
use iggy_node::{Node, NodeConfig};

use crate::bus::{self, BusConfig, BusCounters};
use crate::client_port::{self, Clients, Forwarded, PortConfig, PortCounters, ServerOutbox};
use crate::runtime::{Input, Runtime, Views};

/// A running node.
pub struct ServerNode<S: Storage + Clone + Send + Sync + 'static> {
    pub runtime: Runtime<S>,
    pub views: Arc<Views<S>>,
    pub bus_counters: Arc<BusCounters>,
    pub port_counters: Arc<PortCounters>,
    /// Where the client port and the replica bus listen (the OS's ports when configured as 0).
    pub client_address: SocketAddr,
    pub replica_address: SocketAddr,
    pub metrics_address: Option<SocketAddr>,
    /// Kept for the sockets' life; dropped after the runtime stopped.
    tokio: Option<tokio::runtime::Runtime>,
}

/// Where a node listens and how its parts are sized.
#[derive(Clone, Debug)]
pub struct Listen {
    pub client: SocketAddr,
    /// The metrics endpoint (`GET /metrics`), if any.
    pub metrics: Option<SocketAddr>,
    pub storage_threads: usize,
    pub network_threads: usize,
}

impl<S: Storage + Clone + Send + Sync + 'static> ServerNode<S> {
    /// Boots the node in `storage` and starts everything; an error names what failed (boot's
    /// refusal names the group and the reason).
    pub fn start(
        storage: S,
        node_config: &NodeConfig,
        bus_config: BusConfig,
        port_config: PortConfig,
        listen: &Listen,
    ) -> Result<Self, String> {
        let (node, _report) = Node::boot(storage.clone(), node_config)?;
        let discarded: u64 = node.discarded.values().sum();
        let tokio = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(listen.network_threads.max(1))
            .thread_name(format!("node{}-net", node_config.replica))
            .enable_all()
            .build()
            .map_err(|e| format!("the network runtime: {e}"))?;
        let views = Views::new(node_config.replicas);
        views.bound_inbox(node_config.replicas, port_config.in_flight_bytes);
        views
            .metrics
            .boot_discarded_bytes
            .store(discarded, std::sync::atomic::Ordering::Relaxed);
        let (inbox, inputs) = Runtime::<S>::inbox_channel();
        let bus_counters = Arc::new(BusCounters::default());
        let clients = Clients::default();
        let forwarded = Forwarded::default();
        let deliver = {
            let inbox = inbox.clone();
            let clients = clients.clone();
            let forwarded = forwarded.clone();
            let views = views.clone();
            move |peer, message| {
                client_port::deliver_from_bus(
                    peer,
                    message,
                    (&inbox, &views),
                    &clients,
                    &forwarded,
                );
            }
        };
        let closed = {
            let inbox = inbox.clone();
            move |peer| {
                let _ = inbox.send(Input::PeerClosed(peer));
            }
        };
        let (bus, replica_address) = tokio
            .block_on(bus::start_with_close(
                bus_config,
                deliver,
                closed,
                bus_counters.clone(),
            ))
            .map_err(|e| format!("the replica bus: {e}"))?;
        let outbox = ServerOutbox {
            bus: bus.clone(),
            clients: clients.clone(),
            forwarded,
        };
        let runtime = Runtime::start(
            node,
            storage,
            outbox,
            listen.storage_threads,
            (inbox.clone(), inputs),
            views.clone(),
        )
        .map_err(|e| format!("the node's threads: {e}"))?;
        let port_counters = Arc::new(PortCounters::default());
        let client_address = tokio
            .block_on(client_port::start(
                listen.client,
                port_config,
                views.clone(),
                inbox,
                clients,
                bus,
                port_counters.clone(),
            ))
            .map_err(|e| format!("the client port on {}: {e}", listen.client))?;
        let metrics_address = match listen.metrics {
            Some(address) => Some(
                tokio
                    .block_on(crate::metrics::start(
                        address,
                        views.clone(),
                        bus_counters.clone(),
                        port_counters.clone(),
                    ))
                    .map_err(|e| format!("the metrics endpoint on {address}: {e}"))?,
            ),
            None => None,
        };
        Ok(Self {
            metrics_address,
            runtime,
            views,
            bus_counters,
            port_counters,
            client_address,
            replica_address,
            tokio: Some(tokio),
        })
    }

    /// A clean stop: the node shuts down (publish, commit points, clean marker), then the
    /// sockets close.
    pub fn stop(mut self) -> Result<(), String> {
        let result = self.runtime.stop_in_place();
        if let Some(tokio) = self.tokio.take() {
            tokio.shutdown_background();
        }
        result
    }
}
