//! What survives a view change, as pure functions: the new primary's [`merge`] of a quorum of
//! `DoViewChange`s, and [`consistent_prefix`], how much of a replica's own storage belongs to a
//! log it adopts (the merged log, or a `StartView`'s). `docs/vsr.md`, "What survives the view
//! change", states the rules; the tests below pin each.
//!
//! Invariants:
//! - an op above the merged commit point is dropped (with everything after it) only on a nack
//!   quorum, or when every replica was heard and none holds it;
//! - an op a `DoViewChange` may hold but did not send (below its headers' window while its head
//!   says the log goes on) is never read as "the log ends here": the merge waits;
//! - storage is kept only as far as it provably agrees with the adopted log: executed ops
//!   always, then what the commit point's checksum and the adopted headers confirm.

use std::collections::BTreeMap;

use iggy_format::{Checksum, Header};

use crate::config::{HEADERS_MAX, nack_quorum, view_change_quorum};
use crate::message::ViewHeader;

/// A `DoViewChange` as the new primary keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Dvc {
    pub log_view: u32,
    pub op: u64,
    pub commit: u64,
    pub commit_checksum: Checksum,
    pub headers: BTreeMap<u64, ViewHeader>,
    pub forgotten_view: Option<u32>,
    /// With a forgotten view: the highest op the sender may have acknowledged (`None`:
    /// unbounded).
    pub forgotten_bound: Option<u64>,
}

impl Dvc {
    /// Whether the sender's log holds every op it acknowledged: it forgot nothing, or it has
    /// started a view after the ones it forgot.
    pub fn holds_its_acknowledgments(&self) -> bool {
        self.forgotten_view.is_none_or(|v| self.log_view > v)
    }

    /// Whether what the sender may have forgotten is known to the merge anyway: every op it may
    /// have acknowledged (through its bound) is at or below `reach`, the higher of the merged
    /// commit point and the longest log of the latest log_view heard. Such an op, if it
    /// committed, is in the latest log_view's log (an earlier view's commit is in every later
    /// view's log; one of that view, in the view's own log, which every replica of it holds
    /// as a prefix), so the merge knows its header whoever else forgot it.
    pub fn forgot_below(&self, reach: u64) -> bool {
        self.forgotten_bound.is_some_and(|b| b <= reach)
    }

    /// Whether the sender lacking `header` proves it never acknowledged it: it forgot nothing
    /// of the header's view, or the header's op is above the highest op it ever acknowledged.
    pub fn nacks_by_absence(&self, header: &Header) -> bool {
        self.forgotten_view.is_none_or(|v| header.view > v)
            || self.forgotten_bound.is_some_and(|b| header.op > b)
    }

    /// The lowest op whose header the sender would have sent: its headers cover the commit
    /// point to its head, at most [`HEADERS_MAX`] of them (the top ones).
    pub fn window_start(&self) -> u64 {
        (self.commit + 1).max(self.op.saturating_sub(HEADERS_MAX as u64 - 1))
    }
}

/// The merged log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Merged {
    /// The latest log_view heard: its logs are the authority.
    pub log_view: u32,
    /// The highest commit point heard, with its checksum.
    pub commit: u64,
    pub commit_checksum: Checksum,
    /// The merged head and the headers above the commit point through it.
    pub head: u64,
    pub headers: Vec<Header>,
    /// For each kept op, the replicas that announced its body (a bit per replica).
    pub sources: BTreeMap<u64, u64>,
}

/// What the merge decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Merge {
    /// Not yet: wait for more `DoViewChange`s (the reason, for the counters).
    Wait(&'static str),
    Log(Merged),
}

/// Merges `dvcs` (by sender, the new primary's own among them) of a group of `replicas`. See the
/// module docs and `docs/vsr.md`, "What survives the view change". `nack_header_without_body`:
/// the safeguard of that name (a header held above the journaled head is a nack).
pub(crate) fn merge(
    dvcs: &BTreeMap<u8, Dvc>,
    replicas: u8,
    nack_header_without_body: bool,
) -> Merge {
    if dvcs.len() < view_change_quorum(replicas) {
        return Merge::Wait("merge_waits_for_a_quorum");
    }
    let everyone = dvcs.len() >= usize::from(replicas);
    // A log that may lack ops its sender acknowledged stands for no one: the quorum must hold a
    // copy of every op that may have committed (each committed op is on a quorum of logs, and an
    // absent replica or a forgetful one may be where it is). With every replica heard, the best
    // log that survived wins (all of them restarted: what was acknowledged after the last
    // publication is gone from all of them). A forgetful log whose acknowledgment bound the
    // others' logs reach stands again: what it forgot, the merge knows from them.
    let log_view = dvcs.values().map(|d| d.log_view).max().unwrap_or(0);
    let (commit, commit_checksum) = dvcs
        .values()
        .map(|d| (d.commit, d.commit_checksum))
        .max_by_key(|(c, _)| *c)
        .unwrap_or((0, 0));
    let authority: Vec<&Dvc> = dvcs.values().filter(|d| d.log_view == log_view).collect();
    let authority_head = authority.iter().map(|d| d.op).max().unwrap_or(commit);
    let reach = commit.max(authority_head);
    let holding = dvcs
        .values()
        .filter(|d| d.holds_its_acknowledgments() || d.forgot_below(reach))
        .count();
    if holding < view_change_quorum(replicas) && !everyone {
        // Named apart: a log that forgot without a bound, or one whose bound the others'
        // logs have not reached yet.
        let unbounded = dvcs
            .values()
            .any(|d| !d.holds_its_acknowledgments() && d.forgotten_bound.is_none());
        return Merge::Wait(if unbounded {
            "merge_waits_for_a_holder"
        } else {
            "merge_waits_for_a_holder_past_a_bound"
        });
    }
    let mut head = commit;
    let mut headers = Vec::new();
    let mut sources = BTreeMap::new();
    for op in commit + 1..=authority_head {
        let Some(header) = authority
            .iter()
            .find_map(|d| d.headers.get(&op).map(|h| h.header))
        else {
            // Nobody of the authority sent it. If one of them may hold it but did not send it
            // (its window starts above it while its head says its log goes on), this is no end
            // of the log: waiting is all that is safe.
            if authority
                .iter()
                .any(|d| d.op >= op && d.window_start() > op)
            {
                return Merge::Wait("merge_gap");
            }
            // Every authority log that reaches this op sent its header slot, and none holds
            // it: none journaled it, so none acknowledged it or anything after it.
            break;
        };
        let checksum = header.checksum();
        let mut nacks = 0;
        let mut present = 0u64;
        for (&replica, d) in dvcs {
            match d
                .headers
                .get(&op)
                .filter(|h| h.header.checksum() == checksum)
            {
                None if d.nacks_by_absence(&header) => nacks += 1,
                None => {}
                Some(h) => {
                    if h.present {
                        present |= 1u64 << replica;
                    }
                    if nack_header_without_body && h.nack {
                        nacks += 1;
                    }
                }
            }
        }
        if nacks >= nack_quorum(replicas) {
            break;
        }
        if present == 0 {
            if !everyone {
                // Neither provably dead nor servable: wait for another DoViewChange.
                return Merge::Wait("merge_waits_for_a_copy");
            }
            // Every replica answered and none holds the body: the nacks fell short only because
            // replicas that restarted without their unpublished log cannot nack. No copy of the
            // op survives anywhere, so waiting cannot bring it back; the log ends before it
            // (under replicated durability, what was acknowledged after the last publication
            // of more than one node is gone).
            break;
        }
        head = op;
        headers.push(header);
        sources.insert(op, present);
    }
    Merge::Log(Merged {
        log_view,
        commit,
        commit_checksum,
        head,
        headers,
        sources,
    })
}

/// A replica's own storage, as [`consistent_prefix`] sees it.
pub(crate) struct Storage<'a> {
    /// The last op storage holds (or is handed).
    pub head: u64,
    /// The highest op executed or being executed: committed, so never cut.
    pub executed: u64,
    /// The log_view its superblock names.
    pub log_view: u32,
    /// The checksum of storage's entry at an op, if known.
    pub checksum: &'a dyn Fn(u64) -> Option<Checksum>,
}

/// The log being adopted: of view `log_view`, committed through `commit` (checksum
/// `commit_checksum`), with `headers` above the commit point, ending at `head`.
pub(crate) struct Adopted<'a> {
    pub log_view: u32,
    pub commit: u64,
    pub commit_checksum: Checksum,
    pub headers: &'a [Header],
    pub head: u64,
}

/// The longest prefix of `storage` that belongs to `adopted`.
///
/// When the superblock already names the adopted log_view, storage is a prefix of that view's
/// log (the view's start cut everything else before the log_view was written, and the view
/// only appends): all of it up to the head stays, and this replica's acknowledgments in that
/// view stay true (cutting it lost ops the commit point counted on: seed 748). Otherwise storage
/// may hold another log above what executed: the executed ops always, up to the commit point
/// when storage's entry there is the committed one, then every header that matches. (A storage
/// that stops below the commit point cannot be checked against it: only what executed stays;
/// the replica keeps the entries it cuts as candidates the hash chain may prove, `chain.rs`.)
pub(crate) fn consistent_prefix(
    storage: &Storage<'_>,
    adopted: &Adopted<'_>,
    same_view_keeps_log: bool,
) -> u64 {
    let checksum = storage.checksum;
    let floor = storage.executed.min(storage.head);
    if same_view_keeps_log && storage.log_view == adopted.log_view {
        let mut keep = storage.head.min(adopted.head);
        if keep >= adopted.commit
            && checksum(adopted.commit).is_some_and(|c| c != adopted.commit_checksum)
        {
            keep = adopted.commit.saturating_sub(1);
        }
        if let Some(differs) = adopted
            .headers
            .iter()
            .find(|h| h.op <= keep && checksum(h.op).is_some_and(|c| c != h.checksum()))
        {
            keep = differs.op - 1;
        }
        return keep.max(floor);
    }
    if storage.head < adopted.commit {
        // Everything storage holds is at or below the commit point, whose entry it does not
        // hold: nothing here can tell whether the ops above what executed are the view's.
        return floor;
    }
    let mut keep = floor;
    if checksum(adopted.commit) == Some(adopted.commit_checksum) {
        keep = keep.max(adopted.commit);
    }
    if keep >= adopted.commit {
        for header in adopted.headers {
            if header.op <= keep {
                continue;
            }
            if header.op == keep + 1
                && storage.head >= header.op
                && checksum(header.op) == Some(header.checksum())
            {
                keep = header.op;
            } else {
                break;
            }
        }
    }
    keep.min(storage.head.max(floor))
}

#[cfg(test)]
mod tests {
    use super::*;
    use iggy_format::{Position, PrepareMeta, operation};

    /// A chain of prepares `1..=n` of view `view` (its ops' parents linked), starting from
    /// `parent` after op `after`.
    fn chain(after: u64, parent: Checksum, n: u64, view: u32) -> Vec<Header> {
        let mut out: Vec<Header> = Vec::new();
        let mut parent = parent;
        for op in after + 1..=after + n {
            let header = Header::prepare(
                Position {
                    cluster: 1,
                    group: 2,
                    after: op - 1,
                    parent,
                },
                operation::NOOP,
                &PrepareMeta {
                    view,
                    commit: op.saturating_sub(10),
                    ..PrepareMeta::default()
                },
                &[],
            )
            .unwrap_or_else(|| unreachable!("an empty body fits"));
            parent = header.checksum();
            out.push(header);
        }
        out
    }

    /// The `DoViewChange` of a replica holding `log` (journaled through `journaled`, bodies of
    /// every journaled op), of `log_view`, with commit point `commit`, sending the window from
    /// the commit point to its head (at most `HEADERS_MAX`).
    fn dvc(log: &[Header], journaled: u64, commit: u64, log_view: u32) -> Dvc {
        let head = log.last().map_or(0, |h| h.op);
        let window = (commit + 1).max(head.saturating_sub(HEADERS_MAX as u64 - 1));
        Dvc {
            log_view,
            op: head,
            commit,
            commit_checksum: log
                .iter()
                .find(|h| h.op == commit)
                .map_or(0, Header::checksum),
            headers: log
                .iter()
                .filter(|h| h.op >= window)
                .map(|h| {
                    (
                        h.op,
                        ViewHeader {
                            header: *h,
                            present: h.op <= journaled,
                            nack: h.op > journaled,
                        },
                    )
                })
                .collect(),
            forgotten_view: None,
            forgotten_bound: None,
        }
    }

    fn merged(m: Merge) -> Merged {
        match m {
            Merge::Log(merged) => merged,
            Merge::Wait(why) => panic!("the merge waits: {why}"),
        }
    }

    #[test]
    fn the_latest_log_view_is_the_authority_and_the_highest_commit_point_wins() {
        let log = chain(0, 0, 20, 1);
        let older = chain(0, 0, 25, 0);
        let dvcs: BTreeMap<u8, Dvc> =
            [(0, dvc(&log, 20, 12, 1)), (1, dvc(&older[..15], 15, 15, 0))]
                .into_iter()
                .collect();
        // Replica 1's older log has a higher commit point of its own view's log: the commit
        // point is the highest heard, but the headers are the authority's.
        let m = merged(merge(&dvcs, 3, true));
        assert_eq!((m.log_view, m.commit, m.head), (1, 15, 20));
        assert!(m.headers.iter().all(|h| h.view == 1));
        assert_eq!(m.headers.first().map(|h| h.op), Some(16));
    }

    #[test]
    fn an_op_is_dropped_on_a_nack_quorum_and_kept_on_one_copy() {
        let log = chain(0, 0, 30, 0);
        // Replica 0 journaled through 30, replica 1 only through 27 (its headers 28..=30 are
        // nacks): one nack each, and replica 0 holds them: kept.
        let dvcs: BTreeMap<u8, Dvc> = [(0, dvc(&log, 30, 20, 0)), (1, dvc(&log, 27, 20, 0))]
            .into_iter()
            .collect();
        assert_eq!(merged(merge(&dvcs, 3, true)).head, 30);
        // Replica 0 journaled only through 25: 26 and 27 have one nack and replica 1's copy
        // (kept), 28..=30 two nacks each (dropped).
        let dvcs: BTreeMap<u8, Dvc> = [(0, dvc(&log, 25, 20, 0)), (1, dvc(&log, 27, 20, 0))]
            .into_iter()
            .collect();
        assert_eq!(merged(merge(&dvcs, 3, true)).head, 27);
        // Without the nack rule a header without its body proves nothing: 26 and 27 have a
        // copy (replica 1), 28 none and no nack quorum: the merge waits for the third replica.
        assert_eq!(
            merge(&dvcs, 3, false),
            Merge::Wait("merge_waits_for_a_copy")
        );
    }

    #[test]
    fn a_header_nobody_holds_ends_the_log_only_where_every_sender_sent_its_window() {
        let log = chain(0, 0, 30, 0);
        // Neither holds 24 (a hole in both journals' headers): the log ends at 23.
        let mut a = dvc(&log, 30, 20, 0);
        let mut b = dvc(&log, 30, 20, 0);
        for d in [&mut a, &mut b] {
            d.headers.remove(&24);
        }
        let dvcs: BTreeMap<u8, Dvc> = [(0, a), (1, b)].into_iter().collect();
        assert_eq!(merged(merge(&dvcs, 3, true)).head, 23);
    }

    /// The bug of issue #31: a commit point more than 128 ops below the head (stale after a
    /// restart) makes a `DoViewChange` send only the top 128 headers. The merge used to find
    /// nothing at the commit point's successor and end the log there, cutting every
    /// acknowledged op above it; now it waits.
    #[test]
    fn a_commit_point_more_than_a_window_below_the_head_makes_the_merge_wait() {
        let log = chain(0, 0, 2_833, 0);
        let dvcs: BTreeMap<u8, Dvc> = [(0, dvc(&log, 2_833, 0, 0)), (1, dvc(&log, 2_833, 0, 0))]
            .into_iter()
            .collect();
        assert_eq!(dvcs[&0].headers.len(), HEADERS_MAX);
        assert_eq!(merge(&dvcs, 3, true), Merge::Wait("merge_gap"));
        // One sender's commit point is current: its window starts above the stale one's
        // commit point, the merged commit point is its, and the log is whole.
        let dvcs: BTreeMap<u8, Dvc> =
            [(0, dvc(&log, 2_833, 0, 0)), (1, dvc(&log, 2_833, 2_820, 0))]
                .into_iter()
                .collect();
        let m = merged(merge(&dvcs, 3, true));
        assert_eq!((m.commit, m.head, m.headers.len()), (2_820, 2_833, 13));
    }

    #[test]
    fn a_forgetful_replica_stands_for_no_quorum_and_its_absence_is_no_nack() {
        let log = chain(0, 0, 30, 1);
        let mut forgetful = dvc(&log[..22], 22, 20, 1);
        forgetful.forgotten_view = Some(1);
        let holder = dvc(&log, 30, 20, 1);
        // Two of three, one of them forgetful: wait for a second holder (or everyone).
        let dvcs: BTreeMap<u8, Dvc> = [(0, forgetful.clone()), (1, holder.clone())]
            .into_iter()
            .collect();
        assert_eq!(
            merge(&dvcs, 3, true),
            Merge::Wait("merge_waits_for_a_holder")
        );
        // Everyone heard: the forgetful one's absence above 22 is no nack, so the holder's log
        // stands whole.
        let mut third = dvc(&log[..20], 20, 20, 1);
        third.forgotten_view = Some(1);
        let dvcs: BTreeMap<u8, Dvc> = [(0, forgetful), (1, holder), (2, third)]
            .into_iter()
            .collect();
        assert_eq!(merged(merge(&dvcs, 3, true)).head, 30);
    }

    /// The acknowledgment bound: a forgetful log stands once the other logs reach its bound
    /// (what it may have forgotten, they hold), and its absence above the bound is a nack.
    #[test]
    fn a_forgetful_replica_whose_bound_the_other_log_reaches_stands_for_the_quorum() {
        let log = chain(0, 0, 30, 1);
        let mut forgetful = dvc(&log[..22], 22, 20, 1);
        forgetful.forgotten_view = Some(1);
        // It may have acknowledged up to op 31: the holder's log ends at 30, so op 31 may be
        // an acknowledged op nobody heard here holds. Wait.
        forgetful.forgotten_bound = Some(31);
        let holder = dvc(&log, 30, 20, 1);
        let pair = |f: &Dvc| -> BTreeMap<u8, Dvc> {
            [(0, f.clone()), (1, holder.clone())].into_iter().collect()
        };
        assert_eq!(
            merge(&pair(&forgetful), 3, true),
            Merge::Wait("merge_waits_for_a_holder_past_a_bound")
        );
        // Bounded at 26: everything it may have forgotten is in the holder's log.
        forgetful.forgotten_bound = Some(26);
        let m = merged(merge(&pair(&forgetful), 3, true));
        assert_eq!((m.head, m.headers.len()), (30, 10));
        // Its absence above the bound is a nack: with the other's bodies of 28..30 missing (a
        // header held without its body nacks too), those ops end the log.
        let short = dvc(&log, 27, 20, 1);
        let dvcs: BTreeMap<u8, Dvc> = [(0, forgetful.clone()), (1, short.clone())]
            .into_iter()
            .collect();
        assert_eq!(merged(merge(&dvcs, 3, true)).head, 27);
        // Bounded at 30, its absence at op 28 is no nack: with one nack and no body heard, op
        // 28 waits for another DoViewChange.
        forgetful.forgotten_bound = Some(30);
        let dvcs: BTreeMap<u8, Dvc> = [(0, forgetful), (1, short)].into_iter().collect();
        assert_eq!(merge(&dvcs, 3, true), Merge::Wait("merge_waits_for_a_copy"));
    }

    #[test]
    fn present_bits_name_the_sources_of_each_body() {
        let log = chain(0, 0, 24, 0);
        let dvcs: BTreeMap<u8, Dvc> = [(0, dvc(&log, 22, 20, 0)), (2, dvc(&log, 24, 20, 0))]
            .into_iter()
            .collect();
        let m = merged(merge(&dvcs, 3, true));
        assert_eq!(m.sources.get(&21), Some(&0b101));
        assert_eq!(m.sources.get(&23), Some(&0b100));
    }

    fn keep(
        own: &[Header],
        executed: u64,
        log_view: u32,
        adopted: &[Header],
        adopted_view: u32,
        commit: u64,
    ) -> u64 {
        let checksum = |op: u64| own.iter().find(|h| h.op == op).map(Header::checksum);
        let commit_checksum = adopted
            .iter()
            .find(|h| h.op == commit)
            .map_or(0, Header::checksum);
        let above: Vec<Header> = adopted.iter().filter(|h| h.op > commit).copied().collect();
        consistent_prefix(
            &Storage {
                head: own.last().map_or(0, |h| h.op),
                executed,
                log_view,
                checksum: &checksum,
            },
            &Adopted {
                log_view: adopted_view,
                commit,
                commit_checksum,
                headers: &above,
                head: adopted.last().map_or(0, |h| h.op),
            },
            true,
        )
    }

    #[test]
    fn storage_of_the_same_view_stays_whole() {
        let log = chain(0, 0, 40, 2);
        assert_eq!(keep(&log[..35], 10, 2, &log, 2, 30), 35);
    }

    #[test]
    fn another_views_storage_is_kept_as_far_as_it_matches() {
        let common = chain(0, 0, 20, 0);
        let last = common.last().map_or(0, Header::checksum);
        // Our view-0 suffix 21..=26, the adopted view-1 log 21..=30.
        let ours = [common.clone(), chain(20, last, 6, 0)].concat();
        let theirs = [common.clone(), chain(20, last, 10, 1)].concat();
        // Committed through 18: 19 and 20 match its headers; 21 differs.
        assert_eq!(keep(&ours, 5, 0, &theirs, 1, 18), 20);
        // Committed through 24, which our entry is not: only what executed stays.
        assert_eq!(keep(&ours, 5, 0, &theirs, 1, 24), 5);
        // A stale commit point below what executed: what executed stays, and matches above.
        assert_eq!(keep(&ours, 19, 0, &theirs, 1, 10), 20);
    }

    /// Another view's log committed past everything storage holds: nothing can be checked
    /// against its commit point, so only what executed stays (the replica keeps the cut
    /// entries as candidates the chain proves as repair brings the view's ops above them).
    #[test]
    fn a_storage_below_another_views_commit_point_keeps_what_executed() {
        let log = chain(0, 0, 100, 0);
        assert_eq!(keep(&log[..60], 40, 0, &log, 1, 90), 40);
        // The same view: all of it (the view only appended to it).
        assert_eq!(keep(&log[..60], 40, 1, &log, 1, 90), 60);
    }

    #[test]
    fn what_executed_or_is_executing_is_never_cut() {
        let common = chain(0, 0, 20, 0);
        let last = common.last().map_or(0, Header::checksum);
        let ours = [common.clone(), chain(20, last, 6, 0)].concat();
        let theirs = [common.clone(), chain(20, last, 10, 1)].concat();
        // A commit through 23 is in flight (executed 23): storage's commit point checksum
        // differs, yet nothing at or below 23 is cut.
        assert_eq!(keep(&ours, 23, 0, &theirs, 1, 24), 23);
    }
}
