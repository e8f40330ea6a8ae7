//! A view's start, on the new primary (its merged log) and on a backup (an adopted `StartView`):
//! truncate storage to what agrees with the view's log (`crate::merge::consistent_prefix`),
//! journal the fetched bodies (the new primary), publish, write the superblock naming the
//! log_view, each waiting for the one before; only then does the replica speak in the view.
//! The primary's `StartView` carries its head, commit point and the headers above it; a
//! recovering replica's probe (`RequestStartView`) gets one that echoes its incarnation.

use iggy_format::{Checksum, Header};

use super::{Inflight, Pending, Phase, Replica, Starting, Status, ViewChange, bit};
use crate::config::HEADERS_MAX;
use crate::effect::Effect;
use crate::merge::{self, Adopted, Storage};
use crate::message::{From, Message};

impl Replica {
    /// The bodies this replica holds of `headers` (same checksum).
    pub(super) fn held_bodies(&self, headers: &[Header]) -> Vec<(Header, Vec<u8>)> {
        headers
            .iter()
            .filter_map(|h| {
                let slot = self.journal.slot(h.op)?;
                let body = slot.body.clone()?;
                (slot.header.checksum() == h.checksum()).then_some((*h, body))
            })
            .collect()
    }

    /// Truncates storage after `keep` for a view start (marking the start truncated when there
    /// is nothing to cut).
    pub(super) fn truncate_to_keep(&mut self, keep: u64) {
        if self.journal.storage_head > keep {
            self.truncate_storage(keep);
            // What the truncate effect will say it cut after (never below what executed).
            let after = keep.max(self.executed());
            if let Some(starting) = &mut self.starting {
                starting.keep = after;
            }
        } else if let Some(starting) = &mut self.starting {
            starting.truncated = true;
        }
    }

    /// Carries a view start (merged log or adopted `StartView`) through its durable steps:
    /// truncate, journal (the new primary), publish, then the superblock naming the log_view.
    pub(super) fn progress_start(&mut self) {
        let Some(starting) = self.starting.clone() else {
            return;
        };
        if starting.view != self.view || !starting.truncated {
            return;
        }
        let journaled_to = if starting.primary {
            starting.head
        } else {
            starting.keep.min(self.journal.journaled_head)
        };
        if starting.primary && self.safeguards.body_fetch {
            let ready = if self.safeguards.hole_check_lower_bound {
                // Every op from the lower of the merged commit point and what this replica
                // executed is journaled (storage appends in order: no hole below the head).
                self.journal.journaled_head >= starting.head
            } else {
                // The check as it was: bodies held above the merged commit point.
                (starting.commit + 1..=starting.head).all(|op| self.journal.has_body(op))
            };
            if !ready {
                return;
            }
        }
        if !starting.published {
            if starting.publish.is_none() {
                if self.safeguards.publish_before_log_view {
                    let through = journaled_to.min(self.journal.journaled_head);
                    let id = self.storage(
                        |id| Effect::Publish { id, through },
                        Pending::Publish(through),
                    );
                    if let Some(s) = &mut self.starting {
                        s.publish = Some(id);
                    }
                    return;
                }
                if let Some(s) = &mut self.starting {
                    s.published = true;
                }
            } else {
                return;
            }
        }
        if self.log_view != starting.view {
            self.log_view = starting.view;
            self.commit_max = self.commit_max.max(starting.commit);
            self.write_superblock();
        }
        // Every op known committed is in the view's log (a quorum held it, and the merge heard a
        // quorum), so the view's head bounds the commit point. One past it names ops no log held
        // any more: every copy was lost (every node of a replicated group failed with them
        // unpublished, the superblock's commit point written before the publication it
        // covered). Kept, it made the view's new ops at those numbers count as committed on the
        // primary's word alone (`replica.rs`
        // `a_commit_point_past_every_log_commits_nothing_the_new_view_prepares`). On a rejoin
        // of the same view too: the superblock's stale commit point never decreases there, and
        // every boot reads it back.
        self.commit_max = self.commit_max.min(starting.head.max(self.commit_min));
        if !self.durable_in(starting.view, true) {
            return;
        }
        self.finish_start(starting);
    }

    fn finish_start(&mut self, starting: Starting) {
        self.starting = None;
        self.status = Status::Normal;
        self.heartbeat_at = self.ticks + self.config.heartbeat_timeout_ticks;
        self.heartbeat_commit = self.commit_max;
        self.commit_broadcast_at = self.ticks;
        self.repair_at = self.ticks;
        self.repair_rounds.clear();
        self.view_change = ViewChange::default();
        if starting.primary {
            let replicas = usize::from(self.id.replicas);
            self.pipeline.clear();
            for op in self.commit_max + 1..=starting.head {
                self.pipeline.insert(
                    op,
                    Inflight {
                        acks: bit(self.id.replica),
                        sent_at: vec![self.ticks; replicas],
                    },
                );
            }
            let message = self.start_view_message(0);
            self.broadcast(&message);
            self.advance_commit();
        } else {
            self.take_adopted_log(starting);
            self.acked_through = self.commit_max;
        }
    }

    /// A backup's adopted view log goes into memory: the `StartView`'s headers above what
    /// executed, with the bodies this replica held of them, and the commit point as the anchor.
    pub(super) fn take_adopted_log(&mut self, starting: Starting) {
        for header in &starting.headers {
            if header.op > self.commit_min {
                self.learn_commit(header);
                self.journal.insert(*header, None);
            }
        }
        for (header, body) in starting.held {
            if header.op > self.commit_min {
                self.journal.insert(header, Some(body));
            }
        }
        if starting.commit > self.commit_min && self.journal.checksum(starting.commit).is_none() {
            self.anchor = Some((starting.commit, starting.commit_checksum));
        }
    }

    /// The primary's `StartView`: its head, commit point (with its checksum) and the headers
    /// from the commit point to the head (at most `HEADERS_MAX`, the top ones). `nonce`: the
    /// probe's incarnation echoed (0 for the broadcast).
    pub(super) fn start_view_message(&self, nonce: u64) -> Message {
        let commit = self.commit_max.min(self.journal.head());
        let head = self.journal.head();
        let from_op = (commit + 1).max(head.saturating_sub(HEADERS_MAX as u64 - 1));
        Message::StartView {
            from: self.from(),
            op: head,
            commit,
            commit_checksum: self.journal.checksum(commit).unwrap_or(0),
            nonce,
            headers: self.journal.headers(from_op, head),
        }
    }

    pub(super) fn on_request_start_view(&mut self, from: From, nonce: u64) {
        if self.phase() != Phase::Primary
            || self.log_view != self.view
            || !self.durable_in(self.view, true)
        {
            return;
        }
        let message = self.start_view_message(nonce);
        self.send(from.replica, message);
    }

    #[allow(clippy::too_many_arguments, reason = "the fields of one message")]
    pub(super) fn on_start_view(
        &mut self,
        from: From,
        op: u64,
        commit: u64,
        commit_checksum: Checksum,
        nonce: u64,
        headers: Vec<Header>,
    ) {
        if from.replica != self.primary_of(from.view) || from.view < self.view {
            return;
        }
        // The answer to this life's probe, in the view whose acknowledgments it forgot.
        let rejoins_forgotten_view = self.phase() == Phase::Recovering
            && nonce != 0
            && nonce == self.incarnation
            && self.forgotten_view == Some(from.view);
        match self.phase() {
            Phase::Recovering => {
                // A broadcast carries nonce 0, never an incarnation: it is an echo of nothing.
                let echoed = nonce != 0 && nonce == self.incarnation;
                let newer = from.view > self.durable.view;
                if self.safeguards.incarnation_echo && !echoed && !newer {
                    self.count("start_view_not_echoed");
                    return;
                }
            }
            Phase::Primary | Phase::Backup if from.view == self.view => {
                // Already in this view (a probe's answer racing the broadcast).
                return;
            }
            _ => {}
        }
        if self.starting.as_ref().is_some_and(|s| s.view == from.view) {
            return;
        }
        let headers: Vec<Header> = headers
            .into_iter()
            .filter(|h| h.op > commit && h.op <= op)
            .collect();
        // What the storage may keep: the executed ops, then whatever agrees with the view's log.
        let checksum = |op: u64| self.journal.checksum(op);
        let keep = merge::consistent_prefix(
            &Storage {
                head: self.journal.storage_head,
                executed: self.executed(),
                log_view: self.durable.log_view,
                checksum: &checksum,
            },
            &Adopted {
                log_view: from.view,
                commit,
                commit_checksum,
                headers: &headers,
                head: op,
            },
            self.safeguards.same_view_keeps_log,
        );
        self.view = from.view;
        self.status = Status::Normal;
        self.pipeline.clear();
        self.unverified.clear();
        self.view_change = ViewChange::default();
        self.heartbeat_at = self.ticks + self.config.heartbeat_timeout_ticks;
        self.heartbeat_commit = self.commit_max;
        // Memory keeps only what is proved: the storage prefix kept, then (once the log_view is
        // durable) the view's headers with the bodies held of them.
        let held = self.held_bodies(&headers);
        self.keep_candidates(keep);
        self.journal.drop_after(keep);
        self.rejoined_through = rejoins_forgotten_view.then_some(op);
        self.starting = Some(Starting {
            view: from.view,
            head: op,
            commit,
            commit_checksum,
            headers,
            keep,
            held,
            truncated: false,
            publish: None,
            published: false,
            primary: false,
        });
        self.truncate_to_keep(keep);
        // A backup adopting a view is in normal status but silent (no acknowledgment) until the
        // log_view is durable.
        self.write_superblock();
    }
}
