//! The protocol's safeguards, each a switch. Every one is on in production; the simulator turns
//! one off at a time to show the bug it prevents (`iggy-sim --without NAME`, `docs/vsr.md`,
//! "Safeguards", names the test or seed that fails without each).

/// The protocol's safeguards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(
    clippy::struct_excessive_bools,
    reason = "one independent switch per safeguard"
)]
pub struct Safeguards {
    /// No message naming a view leaves before the superblock holds it.
    pub durable_view_gate: bool,
    /// The agreed log is published before the superblock names its log_view.
    pub publish_before_log_view: bool,
    /// A header held above the commit point without its body counts as a nack.
    pub nack_header_without_body: bool,
    /// The new primary fetches the bodies it lacks before it starts the view.
    pub body_fetch: bool,
    /// The new primary's hole check starts at the lower of the merged commit point and what it
    /// has executed.
    pub hole_check_lower_bound: bool,
    /// A restarted replica takes only a `StartView` that echoes its incarnation (or a newer
    /// view's broadcast).
    pub incarnation_echo: bool,
    /// Adopting a log of the view the superblock already names as log_view keeps all of
    /// storage (up to the adopted head): this replica's acknowledgments in that view stay true.
    pub same_view_keeps_log: bool,
    /// A replica that restarted without what it acknowledged says so in its `DoViewChange`:
    /// no nack for an op of a view it forgot, and no quorum of the merge stands on its log
    /// until it has started a later view.
    pub forgotten_acknowledgments: bool,
    /// The commit point is raised to the one every prepare it holds names (its boot's log
    /// included, which the storage crates' boot already counts as committed), so a restart's
    /// commit point is never older than its log's head by more than a pipeline, and a
    /// `DoViewChange`'s headers from the commit point to the head always fit its 128.
    pub durable_commit_point: bool,
    /// Adopting a later view whose commit point is past the replica's durable log keeps that
    /// log (unproven, never executed or vouched for) until the hash chain links the view's log
    /// to it, instead of cutting it to what was executed and fetching it again.
    pub keep_durable_log: bool,
    /// A primary answers a `StartViewChange` or `DoViewChange` of its own, started view with a
    /// `StartView` for its sender: a backup whose `StartView` was lost starts the view at its
    /// next resend instead of timing out into another view change.
    pub start_view_resend: bool,
    /// A replica that starts a view change first publishes everything it journaled. Under
    /// replicated durability an acknowledged op may live only in memory; once a replica has
    /// failed, the survivors' memories may be its only copies, and a view change that cannot
    /// finish (its quorum still restarting) leaves them there until the next kill takes them.
    pub publish_on_view_change: bool,
    /// A replica that forgot what it acknowledged in its log_view and rejoined that same view
    /// through the primary's answer to its own probe holds its acknowledgments again once it
    /// has journaled through the head that answer named: it stands for a quorum again without
    /// waiting for a later view.
    pub rejoin_restores_acknowledgments: bool,
    /// A replica serves a repair round below its ring from its log on disk (the host reads it
    /// back, off the group's lane) and answers `RangeEvicted` only for ops its log no longer
    /// holds: a replica down longer than its peers' rings remember catches up by repair.
    pub repair_from_disk: bool,
    /// A replica behind every peer's log, in a group whose storage keeps snapshots, pulls a
    /// peer's snapshot and installs it, then repairs from the op after it, instead of probing
    /// for ops no peer holds any more.
    pub snapshot_transfer: bool,
    /// A primary serves a read (or names a backup's read index) only once a quorum showed it
    /// was still in its view after the read arrived: a primary a later view superseded without
    /// its knowing never answers from a log that lacks what the later view acknowledged.
    pub read_confirmation: bool,
    /// A read index is at least the highest op a new primary's log holds from an earlier view
    /// (committed again in this view only later): the old primary may have acknowledged it.
    pub read_index_earlier_views: bool,
    /// A backup whose adoption of a `StartView` a view change interrupts after the superblock
    /// write naming the view as log_view went out keeps that view's headers: the log its
    /// `DoViewChange` offers under that log_view is the view's log, not what it held before.
    pub abandoned_adoption_keeps_log: bool,
    /// A recovering replica that sees a `StartViewChange` or `DoViewChange` of a later view than
    /// its own joins that view change at once (offering the log it recovered, as its unanswered
    /// probes would have made it do about five seconds later).
    pub recovering_joins_view_change: bool,
    /// Under replicated durability a replica acknowledges (or, as primary, counts for itself)
    /// no op above the acknowledgment bound its superblock holds: the bound its `DoViewChange`
    /// names after a crash covers everything it may have forgotten.
    pub acknowledgment_bound: bool,
    /// A request under a number its client already used (committed, or prepared and not yet
    /// answered) is a replay only if its checksum is the one the prepare recorded; with another
    /// body it is refused (`ReplyStatus::Reused`), never answered with the other body's reply.
    pub request_checksum: bool,
    /// A backup's liveness window is reset only by a commit broadcast that shows the primary
    /// committing (its commit point moved, or it covers every op the backup journaled): a
    /// primary that hears none of its backups' acknowledgments is replaced after the heartbeat
    /// timeout, as a silent one is.
    pub commit_stall: bool,
    /// A journal write storage refuses for want of room (a full disk: nothing written) is
    /// tried again later, acknowledging nothing past it meanwhile, instead of halting the
    /// replica as a storage failure does.
    pub journal_refusal: bool,
}

impl Safeguards {
    /// The names of the safeguards, as `without` takes them.
    pub const NAMES: [&'static str; 23] = [
        "durable-view-gate",
        "publish-before-log-view",
        "nack-header-without-body",
        "body-fetch",
        "hole-check-lower-bound",
        "incarnation-echo",
        "same-view-keeps-log",
        "forgotten-acknowledgments",
        "durable-commit-point",
        "keep-durable-log",
        "start-view-resend",
        "publish-on-view-change",
        "rejoin-restores-acknowledgments",
        "repair-from-disk",
        "snapshot-transfer",
        "read-confirmation",
        "read-index-earlier-views",
        "abandoned-adoption-keeps-log",
        "recovering-joins-view-change",
        "acknowledgment-bound",
        "request-checksum",
        "commit-stall",
        "journal-refusal",
    ];

    /// Every safeguard but the one named `name` (`None` for a name that is none of them).
    #[must_use]
    pub fn without(name: &str) -> Option<Self> {
        let mut s = Self::default();
        match name {
            "durable-view-gate" => s.durable_view_gate = false,
            "publish-before-log-view" => s.publish_before_log_view = false,
            "nack-header-without-body" => s.nack_header_without_body = false,
            "body-fetch" => s.body_fetch = false,
            "hole-check-lower-bound" => s.hole_check_lower_bound = false,
            "incarnation-echo" => s.incarnation_echo = false,
            "same-view-keeps-log" => s.same_view_keeps_log = false,
            "forgotten-acknowledgments" => s.forgotten_acknowledgments = false,
            "durable-commit-point" => s.durable_commit_point = false,
            "keep-durable-log" => s.keep_durable_log = false,
            "start-view-resend" => s.start_view_resend = false,
            "publish-on-view-change" => s.publish_on_view_change = false,
            "rejoin-restores-acknowledgments" => s.rejoin_restores_acknowledgments = false,
            "repair-from-disk" => s.repair_from_disk = false,
            "snapshot-transfer" => s.snapshot_transfer = false,
            "read-confirmation" => s.read_confirmation = false,
            "read-index-earlier-views" => s.read_index_earlier_views = false,
            "abandoned-adoption-keeps-log" => s.abandoned_adoption_keeps_log = false,
            "recovering-joins-view-change" => s.recovering_joins_view_change = false,
            "acknowledgment-bound" => s.acknowledgment_bound = false,
            "request-checksum" => s.request_checksum = false,
            "commit-stall" => s.commit_stall = false,
            "journal-refusal" => s.journal_refusal = false,
            _ => return None,
        }
        Some(s)
    }
}

impl Default for Safeguards {
    fn default() -> Self {
        Self {
            durable_view_gate: true,
            publish_before_log_view: true,
            nack_header_without_body: true,
            body_fetch: true,
            hole_check_lower_bound: true,
            incarnation_echo: true,
            same_view_keeps_log: true,
            forgotten_acknowledgments: true,
            durable_commit_point: true,
            keep_durable_log: true,
            start_view_resend: true,
            publish_on_view_change: true,
            rejoin_restores_acknowledgments: true,
            repair_from_disk: true,
            snapshot_transfer: true,
            read_confirmation: true,
            read_index_earlier_views: true,
            abandoned_adoption_keeps_log: true,
            recovering_joins_view_change: true,
            acknowledgment_bound: true,
            request_checksum: true,
            commit_stall: true,
            journal_refusal: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_turns_off_exactly_one_safeguard() {
        for name in Safeguards::NAMES {
            let without = Safeguards::without(name).unwrap_or_else(|| panic!("{name}"));
            assert_ne!(without, Safeguards::default(), "{name}");
        }
        assert_eq!(Safeguards::without("no-such"), None);
        let distinct: std::collections::BTreeSet<String> = Safeguards::NAMES
            .iter()
            .map(|n| format!("{:?}", Safeguards::without(n)))
            .collect();
        assert_eq!(distinct.len(), Safeguards::NAMES.len());
    }
}
