//! The metadata a partition request is routed by, made current: one metadata read barrier at a
//! time, shared by every request that arrived before it was asked.
//!
//! A send, a poll or an offset names its partition by stream, topic and wire id, and this node
//! resolves that to a partition (a consensus group) by its metadata mirror. A backup's mirror
//! learns a metadata commit with the primary's next prepare or heartbeat, up to 500 ms after
//! the client had its answer, so a purge or a partition delete acknowledged through another
//! node could be missed: the send would be acknowledged into the retired partition (and deleted
//! with it) and the poll would serve its messages. So every partition request is routed again
//! once a metadata read barrier asked after it arrived answered (`docs/vsr.md`, "Linearizable
//! reads": the mirror then holds every metadata write acknowledged before).
//!
//! Invariant: a request is released only by a barrier whose sequence number was taken after the
//! request took its own (`need`), and a barrier asks the replica only after it took its number.
//! One barrier is in flight at a time: under any load the metadata group answers one read round
//! per round trip, not one per request.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use iggy_io::Storage;
use iggy_node::GroupKind;
use iggy_protocol::status;

use super::Shared;

/// The barriers asked and the newest answer.
pub(super) struct MetadataBarriers {
    asked: Mutex<Asked>,
    answered: tokio::sync::watch::Sender<Answered>,
}

#[derive(Default)]
struct Asked {
    /// The sequence number of the newest barrier asked (0: none yet).
    newest: u64,
    in_flight: bool,
}

#[derive(Clone, Copy, Default)]
struct Answered {
    sequence: u64,
    ready: bool,
}

impl MetadataBarriers {
    pub(super) fn new() -> Self {
        Self {
            asked: Mutex::new(Asked::default()),
            answered: tokio::sync::watch::Sender::new(Answered::default()),
        }
    }

    fn asked(&self) -> std::sync::MutexGuard<'_, Asked> {
        self.asked.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Waits until this node's metadata reflects every metadata write acknowledged before the call
/// (a barrier asked after it answered ready). A refused barrier (a view change) is asked again
/// 20 ms later until the reply deadline, then `TransientNotAccepted` (nothing was done: the
/// client may send it again anywhere).
pub(super) async fn metadata_current<S: Storage + Clone + Send + Sync + 'static>(
    shared: &Arc<Shared<S>>,
) -> Result<(), u32> {
    if shared.views.metadata_is_current() {
        // A node that is the whole cluster, its metadata caught up: nothing to wait for.
        return Ok(());
    }
    let barriers = &shared.metadata_barriers;
    let mut answers = barriers.answered.subscribe();
    let need = barriers.asked().newest + 1;
    let deadline = tokio::time::Instant::now() + shared.config.reply_deadline;
    loop {
        let last = *answers.borrow_and_update();
        if last.sequence >= need && last.ready {
            return Ok(());
        }
        // The newest barrier that covers this request was refused: the next one waits a little.
        let refused = last.sequence >= need;
        if refused && tokio::time::Instant::now() >= deadline {
            return Err(status::TRANSIENT_NOT_ACCEPTED);
        }
        let sequence = {
            let mut asked = barriers.asked();
            (!asked.in_flight).then(|| {
                asked.in_flight = true;
                asked.newest += 1;
                asked.newest
            })
        };
        if let Some(sequence) = sequence {
            // Its own task: a request whose client leaves must not strand the others.
            let shared = shared.clone();
            tokio::spawn(async move {
                if refused {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                let ready = shared
                    .views
                    .read_barrier(&shared.inbox, GroupKind::Metadata.id())
                    .await;
                if !ready {
                    shared.views.metrics.read_barrier_refused();
                }
                let barriers = &shared.metadata_barriers;
                barriers.asked().in_flight = false;
                barriers.answered.send_replace(Answered { sequence, ready });
            });
        }
        if !matches!(
            tokio::time::timeout_at(deadline, answers.changed()).await,
            Ok(Ok(()))
        ) {
            return Err(status::TRANSIENT_NOT_ACCEPTED);
        }
    }
}
