//! The view change: a replica that stops trusting its view moves to the next, writes it, and only
//! then says so (`StartViewChange`, resent every 500 ms); after `f` others it sends the new
//! primary its `DoViewChange` (its log_view, head, commit point and the headers from the commit
//! point to the head, each with a present and a nack bit), fixed once per view so a resend is
//! byte-identical. The new primary merges a quorum of them (`crate::merge`) and carries the
//! merged log through its start (`view_start.rs`). A primary of a started view answers a
//! straggler still asking for that view with a `StartView` of its own.

use super::{Phase, Replica, Starting, ViewChange, bit};
use crate::config::{HEADERS_MAX, view_change_quorum};
use crate::effect::Effect;
use crate::merge::{self, Adopted, Dvc, Merge, Storage};
use crate::message::{From, Message, ViewHeader};

impl Replica {
    pub(super) fn view_change_tick(&mut self) {
        if self.ticks >= self.view_change.started_at + self.config.view_change_timeout_ticks {
            self.count("view_change_timeout");
            self.start_view_change(self.view + 1);
            return;
        }
        let resend = self.config.view_change_resend_ticks;
        if self
            .view_change
            .svc_sent_at
            .is_some_and(|at| self.ticks >= at + resend)
        {
            self.view_change.svc_sent_at = None;
        }
        if self
            .view_change
            .dvc_sent_at
            .is_some_and(|at| self.ticks >= at + resend)
        {
            self.view_change.dvc_sent_at = None;
        }
        if self.ticks >= self.repair_at && self.repair_permitted {
            self.repair();
        }
    }

    pub(super) fn start_view_change(&mut self, view: u32) {
        if view <= self.view {
            return;
        }
        self.view = view;
        self.status = super::Status::ViewChange;
        self.view_change = ViewChange {
            started_at: self.ticks,
            ..ViewChange::default()
        };
        if let Some(starting) = self.starting.take()
            && !starting.primary
            && self.log_view == starting.view
            && self.safeguards.abandoned_adoption_keeps_log
        {
            // An adoption interrupted after its superblock write naming the view as log_view
            // went out: the superblock names that log_view (now, or once the write lands), so
            // the log this replica offers in its `DoViewChange` must be that view's. Its headers
            // (and the bodies held) go into memory as a finished adoption's would; dropping
            // them offered an empty log under the later log_view, which a merge took as the
            // authority and cut a committed op (many-groups seed 198; `replica.rs`
            // `an_adoption_interrupted_after_its_log_view_write_offers_the_adopted_log`).
            self.count("abandoned_adoption_kept_log");
            self.take_adopted_log(starting);
        }
        self.pipeline.clear();
        self.unverified.clear();
        self.write_superblock();
        if self.safeguards.publish_on_view_change && self.journal.journaled_head > 0 {
            // Whatever this replica acknowledged becomes durable here: a view change means a
            // replica failed, and another failure before the view starts must not take an
            // acknowledged op that only memories hold (`docs/vsr.md`, "Publish on a view
            // change"). Queued after the superblock write, so the view change's messages do not
            // wait for it.
            let through = self.journal.journaled_head;
            self.count("view_change_publish");
            self.storage(
                |id| Effect::Publish { id, through },
                super::Pending::Publish(through),
            );
        }
    }

    /// A replica still in a view change for the view this primary started lost its
    /// `StartView` (it resends its `StartViewChange` and `DoViewChange` every 500 ms): it gets
    /// one of its own, so one lost message costs a resend interval, not another view change.
    fn answer_straggler(&mut self, from: From) {
        if self.safeguards.start_view_resend
            && from.view == self.view
            && self.phase() == Phase::Primary
            && self.log_view == self.view
            && self.durable_in(self.view, true)
        {
            self.count("start_view_resent");
            let message = self.start_view_message(0);
            self.send(from.replica, message);
        }
    }

    pub(super) fn on_start_view_change(&mut self, from: From) {
        if self.phase() == Phase::Recovering
            && !(self.safeguards.recovering_joins_view_change && from.view > self.view)
        {
            return;
        }
        if from.view > self.view {
            self.start_view_change(from.view);
        }
        if from.view == self.view {
            if self.phase() == Phase::ViewChange || self.phase() == Phase::Merging {
                self.view_change.svc_from |= bit(from.replica);
            } else {
                self.answer_straggler(from);
            }
        }
    }

    pub(super) fn on_do_view_change(&mut self, from: From, dvc: Dvc) {
        if (self.phase() == Phase::Recovering
            && !(self.safeguards.recovering_joins_view_change && from.view > self.view))
            || self.primary_of(from.view) != self.id.replica
        {
            return;
        }
        if from.view > self.view {
            self.start_view_change(from.view);
        }
        if from.view != self.view {
            return;
        }
        if matches!(self.phase(), Phase::ViewChange | Phase::Merging) {
            if !self.view_change.merged {
                self.view_change.svc_from |= bit(from.replica);
                self.view_change.dvcs.insert(from.replica, dvc);
            }
        } else {
            self.answer_straggler(from);
        }
    }

    /// This replica's `DoViewChange`: fixed once per view, so resends are byte-identical.
    fn own_dvc(&mut self) -> Message {
        if let Some(dvc) = &self.view_change.dvc {
            return dvc.clone();
        }
        let commit = self.commit_max.min(self.journal.head());
        let head = self.journal.head();
        let from_op = (commit + 1).max(head.saturating_sub(HEADERS_MAX as u64 - 1));
        if from_op > commit + 1 {
            // More than a window above the commit point: the merge waits rather than read the
            // missing headers as the end of the log. (The commit point every prepare names
            // keeps this from happening: a head is never more than a pipeline above it.)
            self.count("do_view_change_window_short");
        }
        let forgotten_view = self
            .forgotten_view
            .filter(|_| self.safeguards.forgotten_acknowledgments);
        let forgotten_bound = self.forgotten_bound.filter(|_| forgotten_view.is_some());
        let headers = (from_op..=head)
            .filter_map(|op| {
                let slot = self.journal.slot(op)?;
                let present = slot.body.is_some();
                // Journaled before acknowledged: a header held but not journaled is an op this
                // replica never acknowledged, unless it is of a view it forgot.
                let forgot = forgotten_view.is_some_and(|v| slot.header.view <= v)
                    && forgotten_bound.is_none_or(|b| op <= b);
                Some(ViewHeader {
                    header: slot.header,
                    present,
                    nack: op > self.journal.journaled_head && !forgot,
                })
            })
            .collect();
        let commit_checksum = self
            .journal
            .checksum(commit)
            .or_else(|| self.anchor.filter(|(op, _)| *op == commit).map(|(_, c)| c))
            .unwrap_or(0);
        let message = Message::DoViewChange {
            from: self.from(),
            log_view: self.durable.log_view,
            op: head,
            commit,
            commit_checksum,
            headers,
            forgotten_view,
            forgotten_bound,
        };
        self.view_change.dvc = Some(message.clone());
        message
    }

    pub(super) fn progress_view_change(&mut self) {
        if !matches!(self.phase(), Phase::ViewChange | Phase::Merging)
            || !self.durable_in(self.view, false)
        {
            return;
        }
        if self.view_change.svc_sent_at.is_none() {
            self.view_change.svc_sent_at = Some(self.ticks);
            let message = Message::StartViewChange { from: self.from() };
            self.broadcast(&message);
        }
        let others = (self.view_change.svc_from & !bit(self.id.replica)).count_ones() as usize;
        if others + 1 < view_change_quorum(self.id.replicas) {
            return;
        }
        let primary = self.primary_of(self.view);
        if self.view_change.dvc_sent_at.is_none() {
            self.view_change.dvc_sent_at = Some(self.ticks);
            let dvc = self.own_dvc();
            if primary == self.id.replica {
                if let Message::DoViewChange {
                    log_view,
                    op,
                    commit,
                    commit_checksum,
                    headers,
                    forgotten_view,
                    forgotten_bound,
                    ..
                } = dvc
                {
                    self.view_change.dvcs.insert(
                        self.id.replica,
                        Dvc {
                            log_view,
                            op,
                            commit,
                            commit_checksum,
                            headers: headers.into_iter().map(|h| (h.header.op, h)).collect(),
                            forgotten_view,
                            forgotten_bound,
                        },
                    );
                }
            } else {
                self.send(primary, dvc);
            }
        }
        if primary == self.id.replica && !self.view_change.merged {
            self.merge_log();
        }
    }

    /// The new primary merges a quorum of `DoViewChange`s, its own among them (see
    /// `crate::merge`), and starts carrying the merged log through the view's start.
    fn merge_log(&mut self) {
        if !self.view_change.dvcs.contains_key(&self.id.replica) {
            return;
        }
        let merged = match merge::merge(
            &self.view_change.dvcs,
            self.id.replicas,
            self.safeguards.nack_header_without_body,
        ) {
            Merge::Wait(why) => {
                self.count(why);
                return;
            }
            Merge::Log(merged) => merged,
        };
        if self
            .view_change
            .dvcs
            .values()
            .any(|d| !d.holds_its_acknowledgments() && d.forgotten_bound.is_some())
        {
            // A forgetful log stood in this merge (or could have) on its acknowledgment bound.
            self.count("merge_heard_a_bounded_forgetful_log");
        }
        let commit = merged.commit;
        let commit_checksum = merged.commit_checksum;
        let mut head = merged.head;
        let mut headers = merged.headers;
        let mut sources = merged.sources;
        if !self.safeguards.body_fetch {
            // Without the fetch (the fix of "The write we put back" undone): the log ends where
            // this replica's own journal stops holding the merged ops.
            let own = headers
                .iter()
                .take_while(|h| {
                    self.journal.has_body(h.op) && self.journal.checksum(h.op) == Some(h.checksum())
                })
                .last()
                .map_or(commit, |h| h.op);
            head = head.min(own);
            headers.retain(|h| h.op <= own);
        }
        // Committed ops this replica lacks can be served by those that executed them.
        for (&replica, d) in &self.view_change.dvcs {
            for op in self.commit_min + 1..=d.commit.min(commit) {
                *sources.entry(op).or_default() |= bit(replica);
            }
        }
        self.view_change.merged = true;
        self.view_change.sources = sources;
        let checksum = |op: u64| self.journal.checksum(op);
        let keep = merge::consistent_prefix(
            &Storage {
                head: self.journal.storage_head,
                executed: self.executed(),
                log_view: self.durable.log_view,
                checksum: &checksum,
            },
            &Adopted {
                log_view: merged.log_view,
                commit,
                commit_checksum,
                headers: &headers,
                head,
            },
            self.safeguards.same_view_keeps_log,
        );
        // Memory keeps only what is proved: the storage prefix kept, and the merged headers
        // (with the bodies this replica holds of them). Anything else it held above the kept
        // prefix may be another log's (a view it led or saw, never committed); what storage
        // held of it stays as candidates.
        let held = self.held_bodies(&headers);
        self.keep_candidates(keep);
        self.journal.drop_after(keep);
        for header in &headers {
            self.learn_commit(header);
            self.journal.insert(*header, None);
        }
        for (header, body) in held {
            self.journal.insert(header, Some(body));
        }
        if self.journal.checksum(commit).is_none() {
            self.anchor = Some((commit, commit_checksum));
        }
        self.commit_max = self.commit_max.max(commit);
        self.starting = Some(Starting {
            view: self.view,
            head,
            commit,
            commit_checksum,
            headers,
            keep,
            held: Vec::new(),
            truncated: false,
            publish: None,
            published: false,
            primary: true,
        });
        self.truncate_to_keep(keep);
        self.repair_at = self.ticks;
        self.repair_rounds.clear();
    }
}
