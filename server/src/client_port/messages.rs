//! The partition commands that read or write a partition's group beside a send: polls, stored
//! offsets, the group poll's ownership fence, flush (102) and segment deletes (503).

use super::*;

/// `FlushUnsavedBuffer`: after a read barrier this node's replica has executed every op the
/// partition acknowledged before the request; with `fsync` the node's replica is asked to
/// publish what it journaled (`Input::Publish`; a persisted partition published before it
/// acknowledged) and the answer waits until the log is published (synced) through those ops.
/// Without `fsync` the barrier is the whole answer: what was acknowledged is in the log and
/// served to reads.
pub(super) async fn flush<S: Storage + Clone + Send + Sync + 'static>(
    shared: &Arc<Shared<S>>,
    key: PartitionKey,
    fsync: bool,
) -> Answer {
    if let Err(code) = read_barrier(shared, key.group_id()).await {
        return error(code);
    }
    if !fsync {
        return ok(Vec::new());
    }
    let Some(partition) = shared.views.partition(key) else {
        return error(status::PARTITION_NOT_FOUND);
    };
    let target = partition.committed();
    let start = tokio::time::Instant::now();
    let deadline = start + shared.config.reply_deadline;
    let mut ask_at = start;
    while partition.wal().published().head_op < target {
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return error(status::TRANSIENT_NOT_ACCEPTED);
        }
        // Asked again every 100 ms: a view change in between may have cut and journaled again
        // what the first publication would have covered.
        if now >= ask_at {
            ask_at = now + Duration::from_millis(100);
            let _ = shared
                .inbox
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .send(Input::Publish {
                    group: key.group_id(),
                });
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    shared
        .counters
        .flushes
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    ok(Vec::new())
}

/// The offset past partition `key`'s oldest `count` sealed, committed segments on this node,
/// read after a barrier (none: it has none, or `count` is 0). Every replica then deletes its
/// own settled segments wholly below it: replicas whose segments end elsewhere keep a few more
/// messages, never fewer.
pub(super) async fn segments_floor<S: Storage + Clone + Send + Sync + 'static>(
    shared: &Arc<Shared<S>>,
    key: PartitionKey,
    count: u32,
) -> Result<Option<u64>, u32> {
    if count == 0 {
        return Ok(None);
    }
    read_barrier(shared, key.group_id()).await?;
    let partition = shared
        .views
        .partition(key)
        .ok_or(status::PARTITION_NOT_FOUND)?;
    let segments = tokio::task::spawn_blocking(move || partition.sealed_committed())
        .await
        .map_err(|_| status::ERROR)?;
    let take = segments.len().min(count as usize);
    Ok(take
        .checked_sub(1)
        .and_then(|last| segments.get(last))
        .map(|s| s.next_offset))
}

/// A consumer-offset entry (a store, or a delete's tombstone) through the partition's group.
pub(super) async fn store_offset<S: Storage + Clone + Send + Sync + 'static>(
    shared: &Arc<Shared<S>>,
    session: &mut Session,
    key: PartitionKey,
    request: u64,
    body: Vec<u8>,
) -> Answer {
    match submit(
        shared,
        session,
        key.group_id(),
        request,
        operation::CONSUMER_OFFSET,
        body,
    )
    .await
    {
        Ok((op, _)) => Answer::Reply {
            status: 0,
            body: translate::offset_stored_reply(),
            op,
        },
        Err(code) => error(code),
    }
}

/// The ownership fence of a group's poll ([`translate::group_fence`]), checked against this
/// node's metadata and, when that refuses, again after a read barrier (a join or a rebalance
/// committed through another node an instant ago counts).
pub(super) async fn group_fence<S: Storage + Clone + Send + Sync + 'static>(
    shared: &Arc<Shared<S>>,
    key: PartitionKey,
    group: u32,
    member: u128,
) -> Result<(), u32> {
    if translate::group_fence(&shared.views.metadata(), key, group, member).is_ok() {
        return Ok(());
    }
    read_barrier(shared, GroupKind::Metadata.id()).await?;
    translate::group_fence(&shared.views.metadata(), key, group, member)
}

/// The largest poll answer, in batch bytes.
const POLL_BYTES_MAX: u64 = 1 << 20;

/// Reads up to `count` messages of a partition from where `strategy` says: whole committed
/// batches, the first holding the start offset. Returns the answer and the offset of the last
/// message in it (none when it holds none). `wire` is the partition's wire id, which the answer
/// names.
pub(super) fn poll<S: Storage + Clone>(
    views: &Views<S>,
    (key, wire): (PartitionKey, u32),
    (kind, consumer): (ConsumerKind, u32),
    strategy: PollingStrategy,
    count: u32,
) -> Result<(Vec<u8>, Option<u64>), u32> {
    let partition = views.partition(key).ok_or(status::PARTITION_NOT_FOUND)?;
    let next = partition.next_offset();
    let start = match strategy {
        PollingStrategy::Offset(offset) => offset,
        PollingStrategy::First => partition.first_offset(),
        PollingStrategy::Last => next.saturating_sub(u64::from(count.max(1))),
        PollingStrategy::Next => partition
            .stored_offset(kind, consumer)
            .map_err(|_| status::ERROR)?
            .filter(|stored| stored.offset != DELETED)
            .map_or(0, |stored| stored.offset + 1),
        PollingStrategy::Timestamp(timestamp) => partition
            .find_by_timestamp(timestamp)
            .map_err(|_| status::ERROR)?
            .unwrap_or(next),
    };
    let mut messages = 0u32;
    let mut last = None;
    // The batches are read straight behind room for the header, which is written once their
    // count is known: one copy of each batch, from the file or its mapping into the answer.
    let mut out = vec![0u8; POLL_HEADER_SIZE];
    if start < next && count > 0 {
        let batches = partition
            .read_through_into(start, POLL_BYTES_MAX, partition.committed(), &mut out)
            .map_err(|error| {
                tracing::warn!(
                    partition = %key.dir_name(),
                    offset = start,
                    %error,
                    "a poll's read failed"
                );
                status::ERROR
            })?;
        // Whole batches until `count` messages are in: the rest read is cut off.
        let mut kept = POLL_HEADER_SIZE;
        for (header, len) in batches {
            if messages >= count {
                break;
            }
            messages = messages.saturating_add(header.message_count);
            if header.message_count > 0 {
                last = Some(header.base_offset + u64::from(header.message_count) - 1);
            }
            kept += len;
        }
        out.truncate(kept);
    }
    let mut header = Vec::with_capacity(POLL_HEADER_SIZE);
    PollHeader {
        partition_id: wire,
        current_offset: next.saturating_sub(1),
        messages_count: messages,
    }
    .put(&mut header);
    // The same length as the room left for it: nothing behind it moves.
    out.splice(..POLL_HEADER_SIZE, header);
    Ok((out, last))
}

pub(super) fn stored_offset<S: Storage + Clone>(
    views: &Views<S>,
    (key, wire): (PartitionKey, u32),
    (kind, consumer): (ConsumerKind, u32),
) -> Result<Vec<u8>, u32> {
    let partition = views.partition(key).ok_or(status::PARTITION_NOT_FOUND)?;
    let stored = partition
        .stored_offset(kind, consumer)
        .map_err(|_| status::ERROR)?;
    let mut out = Vec::new();
    if let Some(stored) = stored.filter(|stored| stored.offset != DELETED) {
        ConsumerOffsetInfo {
            partition_id: wire,
            current_offset: partition.next_offset().saturating_sub(1),
            stored_offset: stored.offset,
        }
        .put(&mut out);
    }
    Ok(out)
}
