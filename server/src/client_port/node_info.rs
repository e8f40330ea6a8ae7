//! What the node asked answers for itself: `GetStats` (10), `GetSnapshot` (11) and the roster of
//! `GetClusterMetadata` (12).

use super::*;

/// One snapshot is built at a time on a node (each runs `ps` and `top`): another asked
/// meanwhile is refused `TransientNotAccepted`, and its client asks again.
static SNAPSHOT_BUILDING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `GetSnapshot` (`crate::snapshot`), built off the async threads.
pub(super) async fn snapshot<S: Storage + Clone + Send + Sync + 'static>(
    shared: &Arc<Shared<S>>,
    compression: u8,
    kinds: Vec<u8>,
) -> Answer {
    use std::sync::atomic::Ordering;
    if SNAPSHOT_BUILDING.swap(true, Ordering::AcqRel) {
        return error(status::TRANSIENT_NOT_ACCEPTED);
    }
    let config = &shared.config;
    let mut lines = format!(
        "cluster {} ({:#x}), replica {}, version {}\n",
        config.cluster_name, config.cluster, config.replica, config.server_version
    );
    for node in &config.roster {
        lines.push_str(&format!("roster: {node:?}\n"));
    }
    lines.push_str(&format!(
        "max_request_bytes {}, reply_deadline {:?}, max_connections {}, in_flight_bytes {}, tls {}\n\
         limits: max_partitions_per_topic {}, max_partitions {}, free_reserve_bytes {}\n\
         topic defaults: {:?}\n",
        config.max_request_bytes,
        config.reply_deadline,
        config.max_connections,
        config.in_flight_bytes,
        config.tls.is_some(),
        config.admission.max_partitions_per_topic,
        config.admission.max_partitions,
        config.admission.free_reserve_bytes,
        config.topic_defaults,
    ));
    let inputs = crate::snapshot::Inputs {
        data_dir: config.admission.data_dir.clone(),
        config: lines,
    };
    let built =
        tokio::task::spawn_blocking(move || crate::snapshot::build(&inputs, compression, &kinds))
            .await;
    SNAPSHOT_BUILDING.store(false, Ordering::Release);
    match built {
        Ok(Ok(archive)) => ok(archive),
        Ok(Err(reason)) => {
            tracing::warn!(%reason, "client port: a snapshot failed");
            error(status::ERROR)
        }
        Err(_) => error(status::ERROR),
    }
}

/// What this node's replica of partition `key` holds (nothing when it is not open here).
pub(super) fn partition_figures<S: Storage + Clone>(
    shared: &Shared<S>,
    key: PartitionKey,
) -> iggy_segments::partition::Figures {
    shared
        .views
        .partitions
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(&key)
        .map(|p| p.figures())
        .unwrap_or_default()
}

/// `GetStats`: this node's process and what its partitions hold (`crate::system`). `/proc`
/// and `statvfs` are read off the async threads.
pub(super) async fn stats<S: Storage + Clone + Send + Sync + 'static>(
    shared: &Arc<Shared<S>>,
) -> Vec<u8> {
    let state = shared.views.metadata();
    let mut holdings = crate::system::Holdings {
        streams: u32::try_from(state.streams.len()).unwrap_or(u32::MAX),
        ..Default::default()
    };
    for stream in state.streams.values() {
        for topic in stream.topics.values() {
            holdings.topics += 1;
            for partition in &topic.partitions {
                holdings.partitions += 1;
                let f = partition_figures(
                    shared,
                    PartitionKey {
                        stream: stream.id,
                        topic: topic.id,
                        partition: partition.id,
                    },
                );
                holdings.segments += u32::try_from(f.segments).unwrap_or(u32::MAX);
                holdings.messages += f.next_offset.saturating_sub(f.first_offset);
                holdings.bytes += f.bytes;
            }
        }
    }
    let clients = shared.connections.count();
    let shared = shared.clone();
    let stats = tokio::task::spawn_blocking(move || {
        shared.process.stats(
            holdings,
            clients,
            shared.config.admission.data_dir.as_deref(),
            &shared.config.server_version,
        )
    })
    .await;
    let mut out = Vec::new();
    if let Ok(stats) = stats {
        stats.put(&mut out);
    }
    out
}

/// Node `index` of the roster as `GetClusterMetadata` lists it (role: whether it leads the
/// metadata group).
pub(super) fn roster_node<S: Storage + Clone>(
    shared: &Shared<S>,
    index: u8,
) -> Option<ClusterNode> {
    let leader = shared.views.leader(GroupKind::Metadata.id());
    let node = shared.config.roster.get(usize::from(index))?;
    Some(ClusterNode {
        name: node.name.clone(),
        ip: node.client_address.ip().to_string(),
        tcp_port: node.client_address.port(),
        quic_port: 0,
        http_port: 0,
        websocket_port: 0,
        role: u8::from(leader != Some(index)),
        status: 0,
    })
}

pub(super) fn cluster_metadata<S: Storage + Clone>(shared: &Shared<S>) -> Vec<u8> {
    let nodes = (0..u8::try_from(shared.config.roster.len()).unwrap_or(u8::MAX))
        .filter_map(|index| roster_node(shared, index))
        .collect();
    let mut out = Vec::new();
    ClusterMetadata {
        name: shared.config.cluster_name.clone(),
        nodes,
    }
    .put(&mut out);
    out
}
