//! Linearizable reads (`replica/read.rs`): a read is served only once the replica that serves
//! it has executed through a read index a quorum proved current after the read arrived.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

mod common;

use common::{Cluster, chain, request};
use iggy_vsr::{Durable, Message, Safeguards, Status};

/// A three-replica cluster of a new group that committed `ops` requests through replica 0, every
/// replica executed through them.
fn committed(ops: u64, safeguards: Safeguards) -> Cluster {
    let mut cluster = Cluster::new(vec![Vec::new(); 3], Durable::default(), 0, safeguards);
    cluster.settle_storage();
    for r in 1..=ops {
        cluster.nodes[0].replica.on_message(request(r));
        cluster.collect(0);
        cluster.deliver_all();
    }
    // A heartbeat carries the commit point to the backups.
    cluster.run(60, |_, _, _| true);
    for i in 0..3 {
        assert_eq!(cluster.nodes[i].executed, ops, "replica {i}");
    }
    cluster
}

/// Three replicas of a new group in view 0, each holding the same `ops` prepares of view 0 and
/// having executed `executed` of them, their storage settled.
fn holding(ops: u64, executed: u64, safeguards: Safeguards) -> Cluster {
    let log = chain(0, 0, ops, 0, 1);
    let mut cluster = Cluster::new(
        vec![log.clone(), log.clone(), log],
        Durable::default(),
        executed,
        safeguards,
    );
    cluster.settle_storage();
    cluster
}

#[test]
fn a_read_at_the_primary_waits_for_a_quorum_that_answered_after_it_arrived() {
    let mut cluster = committed(2, Safeguards::default());
    cluster.nodes[0].replica.read(7);
    cluster.collect(0);
    assert!(
        cluster.nodes[0].reads.is_empty(),
        "no answer before a backup confirmed the view"
    );
    let rounds = cluster
        .outbox
        .iter()
        .filter(|(_, _, m)| matches!(m, Message::ReadRound { .. }))
        .count();
    assert_eq!(rounds, 2, "one round to each backup");
    // One backup's answer makes a quorum of two.
    let mut answered = 0;
    cluster.deliver_where(|from, to, m| {
        if matches!(m, Message::ReadRoundOk { .. }) {
            answered += 1;
            return answered == 1;
        }
        from == 0 && to == 1
    });
    assert_eq!(cluster.nodes[0].reads, vec![(7, true, 2)]);
}

/// A round lost on its way (a backup restarting, a peer's connection dropping what it queued)
/// is sent again after a retransmit interval for the read still waiting, though no later read
/// arrives to ask for one: the server asks its metadata barrier one at a time, so without the
/// resend that read waited out its whole timeout (2 s) and was refused, and every send behind it
/// with it (the fault harness's `kill-boot`: a 2 s write gap on every producer).
#[test]
fn a_round_lost_on_its_way_is_sent_again_for_the_read_that_waits() {
    let mut cluster = committed(2, Safeguards::default());
    cluster.nodes[0].replica.read(7);
    cluster.collect(0);
    // Both backups' copies of the round are lost.
    cluster.deliver_where(|_, _, m| !matches!(m, Message::ReadRound { .. }));
    assert!(cluster.nodes[0].reads.is_empty());
    // No other read arrives; within a retransmit interval (20 ticks) and the answer's delivery
    // the read is answered, long before its timeout (200 ticks).
    cluster.run(25, |_, _, _| true);
    assert_eq!(cluster.nodes[0].reads, vec![(7, true, 2)]);
}

#[test]
fn a_backup_serves_a_read_once_it_executed_through_the_primarys_index() {
    let mut cluster = committed(1, Safeguards::default());
    // Ops 2 and 3 commit on the primary; backup 1 journals them but hears no commit point
    // past op 1 (both prepares went out before op 2 committed; the heartbeat is lost).
    for r in 2..=3 {
        cluster.nodes[0].replica.on_message(request(r));
        cluster.collect(0);
    }
    cluster.deliver_where(|_, _, m| !matches!(m, Message::Commit { .. }));
    assert_eq!(cluster.replica(0).commit_min(), 3);
    assert_eq!(cluster.nodes[1].executed, 1);
    cluster.nodes[1].replica.read(9);
    cluster.collect(1);
    assert!(cluster.nodes[1].reads.is_empty());
    cluster.deliver_where(|_, _, m| !matches!(m, Message::Commit { .. }));
    assert_eq!(
        cluster.nodes[1].reads,
        vec![(9, true, 3)],
        "ready only once op 3, acknowledged before the read, executed here"
    );
}

#[test]
fn a_read_is_refused_during_a_view_change_and_when_nobody_answers() {
    let mut cluster = committed(1, Safeguards::default());
    // Backup 1's primary never answers: refused after the read timeout.
    cluster.nodes[1].replica.read(1);
    cluster.collect(1);
    cluster.run_some(199, 1..2, |_, _, _| false);
    assert!(cluster.nodes[1].reads.is_empty());
    cluster.run_some(1, 1..2, |_, _, _| false);
    assert_eq!(cluster.nodes[1].reads, vec![(1, false, 1)]);
    // The backups lose the primary and change view: a read asked there is refused at once.
    cluster.run_some(600, 1..3, |from, to, _| from != 0 && to != 0);
    cluster.nodes[2].replica.read(2);
    cluster.collect(2);
    assert_eq!(cluster.replica(2).view(), 1);
    let status = cluster.replica(2).status();
    if status == Status::Normal {
        // The view started: backup 2 asks its new primary, replica 1.
        cluster.deliver_where(|from, to, _| from != 0 && to != 0);
        assert_eq!(cluster.nodes[2].reads, vec![(2, true, 1)]);
    } else {
        assert_eq!(cluster.nodes[2].reads, vec![(2, false, 1)]);
    }
}

/// The safeguard `read-confirmation`: replica 0 leads view 0 and is cut off; replicas 1 and 2
/// start view 1 and commit op 2. Replica 0 still believes it leads. A read it is asked must
/// not be answered from its log, which lacks op 2: its backups moved on, so no quorum confirms
/// its view. Without the confirmation it answers at once, missing an acknowledged write.
#[test]
fn a_superseded_primary_never_serves_a_read_that_misses_the_later_views_writes() {
    for confirmation in [true, false] {
        let safeguards = Safeguards {
            read_confirmation: confirmation,
            ..Safeguards::default()
        };
        let mut cluster = holding(1, 1, safeguards);
        let cut_off = |from: u8, to: u8, _: &Message| from != 0 && to != 0;
        cluster.run_some(600, 1..3, cut_off);
        assert_eq!(
            cluster.replica(1).leader(),
            Some(1),
            "{}",
            cluster.replica(1).describe()
        );
        cluster.nodes[1].replica.on_message(request(2));
        cluster.collect(1);
        cluster.deliver_where(cut_off);
        cluster.run_some(60, 1..3, cut_off);
        assert_eq!(cluster.nodes[1].executed, 2, "op 2 committed in view 1");
        assert_eq!(
            cluster.replica(0).leader(),
            Some(0),
            "replica 0 still believes it leads"
        );

        // The read reaches replica 0; its rounds reach the backups, who are in view 1.
        cluster.nodes[0].replica.read(5);
        cluster.collect(0);
        cluster.deliver_where(|from, _, m| from == 0 && matches!(m, Message::ReadRound { .. }));
        cluster.run_some(250, 0..1, |from, _, m| {
            from == 0 && matches!(m, Message::ReadRound { .. })
        });
        let stale: Vec<_> = cluster.nodes[0]
            .reads
            .iter()
            .filter(|(_, ready, executed)| *ready && *executed < 2)
            .collect();
        if confirmation {
            assert!(stale.is_empty(), "served without op 2: {stale:?}");
            assert_eq!(
                cluster.nodes[0].reads,
                vec![(5, false, 1)],
                "refused at the timeout"
            );
        } else {
            assert_eq!(
                stale,
                vec![&(5, true, 1)],
                "the bug: a read that misses op 2"
            );
        }
    }
}

/// The safeguard `read-index-earlier-views`: replica 0 led view 0, prepared op 2 and may have
/// acknowledged it (the backups hold it; their commit point is op 1). Replicas 1 and 2 start
/// view 1 without replica 0; op 2 is in the new primary's log but not committed again yet
/// (backup 2's acknowledgment is held back). A read at the new primary waits until op 2 has
/// executed there; without the rule its index is the commit point, op 1, and it is served
/// without op 2.
#[test]
fn a_new_primary_serves_a_read_only_after_the_earlier_views_ops_committed_again() {
    for rule in [true, false] {
        let safeguards = Safeguards {
            read_index_earlier_views: rule,
            ..Safeguards::default()
        };
        let mut cluster = holding(2, 1, safeguards);
        let without_acks = |from: u8, to: u8, m: &Message| {
            from != 0 && to != 0 && !matches!(m, Message::PrepareOk { .. })
        };
        cluster.run_some(600, 1..3, without_acks);
        assert_eq!(
            cluster.replica(1).leader(),
            Some(1),
            "{}",
            cluster.replica(1).describe()
        );
        assert_eq!(cluster.nodes[1].executed, 1, "op 2 not committed again yet");
        cluster.nodes[1].replica.read(3);
        cluster.collect(1);
        cluster.deliver_where(without_acks);
        if rule {
            assert!(
                cluster.nodes[1].reads.is_empty(),
                "{:?}",
                cluster.nodes[1].reads
            );
            cluster.run_some(30, 1..3, |from, to, _| from != 0 && to != 0);
            assert_eq!(cluster.nodes[1].reads, vec![(3, true, 2)]);
        } else {
            assert_eq!(
                cluster.nodes[1].reads,
                vec![(3, true, 1)],
                "the bug: op 2 missing"
            );
        }
    }
}
