//! Consumer-group membership tied to sessions: a session that ends leaves its groups, and the
//! member keeper drops the members of a node that restarted, died or went silent.

use super::*;

/// A session that ended (its connection closed) leaves every consumer group it is in, so its
/// partitions go to the other members. Tried a few times (a view change refuses, a lost reply
/// is replayed under the same number); if it still fails, the node's member keeper
/// ([`keep_members`]) drops it when this node restarts.
pub(super) async fn leave_groups<S: Storage + Clone + Send + Sync + 'static>(
    shared: &Arc<Shared<S>>,
    session: &mut Session,
) {
    if shared
        .views
        .metadata()
        .memberships(session.internal)
        .is_empty()
    {
        return;
    }
    let op = Op::LeaveGroups {
        member: session.internal,
    };
    for attempt in 0..5u32 {
        match propose(shared, session, &op).await {
            Ok(reply) => {
                tracing::info!(
                    session = format_args!("{:#x}", session.internal),
                    ?reply,
                    "client port: a session ended; it left its consumer groups"
                );
                return;
            }
            Err(code) => {
                tracing::debug!(
                    session = format_args!("{:#x}", session.internal),
                    code,
                    attempt,
                    "client port: a session's leave of its consumer groups failed"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    tracing::warn!(
        session = format_args!("{:#x}", session.internal),
        "client port: a session ended but could not leave its consumer groups; they keep it until this node restarts"
    );
}

/// A member whose node was not heard for this long is dropped from its groups by the node that
/// leads the metadata group (its consumers reconnect elsewhere and join again). Three times the
/// bus's silence for a gone peer ([`crate::bus::SILENT_MS`]): a kill -9 (the partitions of the
/// dead node's members wait this long, about 4 s with the keeper's tick), while a blip of a
/// second or two does not churn the groups; a longer pause does, and its consumers join again
/// when it ends (at least once: what they read past their last commit is read again).
pub const MEMBER_TIMEOUT_MS: u64 = 3 * crate::bus::SILENT_MS;

/// A peer whose bus connection ended from its side (its process exited: the kernel closes its
/// sockets at once) and that sent nothing since for this long has its members dropped without
/// waiting out [`MEMBER_TIMEOUT_MS`]; a peer that reconnects within it (a restart) is heard
/// again and keeps them (its own keeper drops those of its earlier boot).
pub const MEMBER_CLOSED_GRACE_MS: u64 = 1_000;

/// The node's member keeper: once a second, members that joined through this node before its
/// boot (their sessions died with the last process) are dropped, and, on the node leading the
/// metadata group, so are the members of a peer not heard for [`MEMBER_TIMEOUT_MS`]. The
/// proposals go under the node's own session, registered when first needed.
pub(super) async fn keep_members<S: Storage + Clone + Send + Sync + 'static>(
    shared: Arc<Shared<S>>,
) {
    let mut own: Option<Session> = None;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        let state = shared.views.metadata();
        let me = shared.config.replica;
        let mut drops = Vec::new();
        if state.has_node_members(me, shared.boot) {
            drops.push((me, shared.boot));
        }
        if shared.views.leader(GroupKind::Metadata.id()) == Some(me) {
            let now = crate::bus::epoch_ms();
            for peer in 0..u8::try_from(shared.config.roster.len()).unwrap_or(u8::MAX) {
                let counters = shared.bus.counters();
                let gone = counters.closed_and_silent(peer, MEMBER_CLOSED_GRACE_MS)
                    || now.saturating_sub(counters.last_heard_ms(peer)) >= MEMBER_TIMEOUT_MS;
                if peer != me && gone && state.has_node_members(peer, u64::MAX) {
                    drops.push((peer, u64::MAX));
                }
            }
        }
        drop(state);
        for (node, boot_before) in drops {
            if own.is_none() {
                let client = NODE_CLIENT ^ u128::from(me);
                match register_session(&shared, client, 0).await {
                    Ok((session, _)) => own = Some(session),
                    Err(code) => {
                        tracing::debug!(
                            code,
                            "member keeper: the node's session is not registered yet"
                        );
                        break;
                    }
                }
            }
            let Some(session) = own.as_mut() else { break };
            match propose(&shared, session, &Op::DropNodeMembers { node, boot_before }).await {
                Ok(reply) => {
                    tracing::info!(
                        node,
                        boot_before,
                        ?reply,
                        "member keeper: dropped the consumer-group members of a node that restarted, closed its connection or was not heard for {MEMBER_TIMEOUT_MS} ms"
                    );
                }
                Err(code) => {
                    tracing::debug!(
                        node,
                        code,
                        "member keeper: dropping a node's members failed; tried again in a second"
                    );
                }
            }
        }
    }
}
