//! The article's cases, scripted on the simulator (real replicas, real storage, simulated disks
//! and network): each sets up the failure by hand and checks what the cluster does. The same
//! scripts with one safeguard off show the bug that safeguard prevents.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use iggy_sim::network::NetworkConfig;
use iggy_sim::{Cluster, Faults, Options};
use iggy_vsr::{Safeguards, Status};

/// The metadata group's id.
const METADATA: u128 = 0;
const SECOND: u64 = 1_000_000;

/// A quiet cluster (no random faults, a reliable network) running only the metadata group,
/// one client.
fn quiet(seed: u64, safeguards: Safeguards) -> Cluster {
    quiet_with(seed, safeguards, 0)
}

/// A quiet cluster with `replicated` partitions of replicated durability beside the metadata
/// group, one client each.
fn quiet_with(seed: u64, safeguards: Safeguards, replicated: u32) -> Cluster {
    Cluster::new(Options {
        replicated,
        persisted: 0,
        clients_per_group: 1,
        requests_per_client: 400,
        think_us: 100_000,
        fault_phase_us: 3_600 * SECOND,
        faults: Faults::none(),
        network: NetworkConfig::reliable(),
        safeguards,
        draw_history: false,
        // The scripts place node 0 as every group's primary (the article's cluster).
        spread_primaries: false,
        ..Options::new(seed)
    })
    .unwrap()
}

/// Runs in steps of `step_us` until `done` holds (or `limit_us` passes); returns whether it did.
fn run_until(
    cluster: &mut Cluster,
    step_us: u64,
    limit_us: u64,
    mut done: impl FnMut(&Cluster) -> bool,
) -> bool {
    let end = cluster.now() + limit_us;
    while cluster.now() < end {
        if done(cluster) {
            return true;
        }
        if cluster.failure().is_some() {
            return false;
        }
        let next = cluster.now() + step_us;
        cluster.run_until(next);
    }
    done(cluster)
}

/// Whether every one of `nodes` runs a replica of `group` for which `done` holds.
fn every(
    c: &Cluster,
    group: u128,
    nodes: &[u8],
    done: impl Fn(&iggy_vsr::Replica) -> bool,
) -> bool {
    nodes
        .iter()
        .all(|n| c.replica(*n, group).is_some_and(&done))
}

/// The replica of `group` on `node`.
fn at(c: &Cluster, node: u8, group: u128) -> &iggy_vsr::Replica {
    c.replica(node, group).unwrap()
}

/// Runs until replica 0 of the metadata group knows `commits` ops committed.
fn warm_up(cluster: &mut Cluster, commits: u64) {
    assert!(
        run_until(cluster, 10_000, 5 * SECOND, |c| replica(c, 0).commit_max()
            >= commits),
        "the quiet cluster commits:\n{}",
        cluster.status().join("\n")
    );
}

fn replica(cluster: &Cluster, node: u8) -> &iggy_vsr::Replica {
    cluster.replica(node, METADATA).unwrap()
}

/// The ops replicas 1 and 2 executed agree with the canonical history (the checker checked
/// every commit on the way) and cover `through`.
fn survivors_hold(cluster: &Cluster, through: u64) {
    for node in [1, 2] {
        let r = replica(cluster, node);
        assert_eq!(
            r.status(),
            Status::Normal,
            "{}",
            cluster.status().join("\n")
        );
        assert!(
            r.commit_min() >= through,
            "replica {node} executed {} of {through}:\n{}",
            r.commit_min(),
            cluster.status().join("\n")
        );
    }
}

/// "The write we put back": op N is acknowledged by replicas 0 and 2 and its client has the
/// reply; replica 1 missed the Prepare; replica 0 dies. Replica 1 wins view 1 without the
/// write, so it must fetch the body from replica 2 before it starts the view.
fn write_put_back(safeguards: Safeguards) -> Cluster {
    let mut cluster = quiet(1, safeguards);
    warm_up(&mut cluster, 8);
    // Replica 1 hears nothing of replica 0 from here on.
    cluster.network().cut_link(0, 1);
    let base = replica(&cluster, 0).commit_max();
    assert!(run_until(&mut cluster, 1_000, 5 * SECOND, |c| replica(
        c, 0
    )
    .commit_max()
        >= base + 3));
    let acknowledged = replica(&cluster, 0).commit_max();
    assert!(
        replica(&cluster, 1).journaled_head() < acknowledged,
        "replica 1 missed the prepares"
    );
    assert!(replica(&cluster, 2).journaled_head() >= acknowledged);
    cluster.crash_node(0, true);
    cluster.network().restore_link(0, 1);
    let target = acknowledged;
    run_until(&mut cluster, 10_000, 30 * SECOND, |c| {
        every(c, METADATA, &[1, 2], |r| {
            r.status() == Status::Normal && r.view() >= 1 && r.commit_min() >= target + 2
        })
    });
    cluster
}

#[test]
fn the_write_acknowledged_by_0_and_2_survives_when_0_dies() {
    let cluster = write_put_back(Safeguards::default());
    assert_eq!(cluster.failure(), None);
    let acknowledged = replica(&cluster, 2).commit_min();
    survivors_hold(&cluster, acknowledged);
    assert!(replica(&cluster, 1).view() >= 1);
}

/// Replica 0 prepares op N and dies for good; replica 1 holds N's header without its body;
/// replica 2 has nothing. One nack and no copy: N counts a second nack (replica 1 journals before
/// it acknowledges, so a header it cannot serve is one it never acknowledged), is dropped, and
/// the view starts within two view changes.
fn header_without_body(safeguards: Safeguards) -> (Cluster, u64) {
    let mut cluster = quiet(2, safeguards);
    warm_up(&mut cluster, 6);
    // Replica 1 goes down; replica 2 is cut off from replica 0 both ways.
    cluster.crash_node(1, false);
    cluster.network().cut_link(0, 2);
    cluster.network().cut_link(2, 0);
    // Replica 0 prepares what it cannot commit.
    assert!(run_until(&mut cluster, 1_000, 5 * SECOND, |c| {
        let r = replica(c, 0);
        r.head() > r.commit_max()
    }));
    let op = replica(&cluster, 0).head();
    // Replica 1 comes back, asks who leads, and adopts replica 0's view: header N, no body.
    cluster.restart_node(1);
    assert!(run_until(&mut cluster, 100, 5 * SECOND, |c| {
        c.replica(1, METADATA)
            .is_some_and(|r| r.status() == Status::Normal && r.header(op).is_some() && !r.holds(op))
    }));
    // Before it can fetch the body, replica 0 dies for good.
    cluster.crash_node(0, true);
    cluster.network().restore_link(0, 2);
    cluster.network().restore_link(2, 0);
    run_until(&mut cluster, 10_000, 40 * SECOND, |c| {
        every(c, METADATA, &[1, 2], |r| {
            r.status() == Status::Normal && r.view() >= 1
        })
    });
    (cluster, op)
}

#[test]
fn a_header_without_its_body_is_a_nack_and_the_view_starts() {
    let (cluster, op) = header_without_body(Safeguards::default());
    assert_eq!(cluster.failure(), None);
    for node in [1, 2] {
        let r = replica(&cluster, node);
        assert_eq!(
            r.status(),
            Status::Normal,
            "{}",
            cluster.status().join("\n")
        );
        assert!(
            r.view() <= 2,
            "the view started within two view changes: {}",
            r.view()
        );
        assert!(
            r.header(op).is_none_or(|h| h.view >= 1),
            "op {op} of view 0 was dropped (what is there now was prepared later)"
        );
    }
}

/// The view change's hole check: replica 1 hears nothing from replica 0 (one way), so it misses
/// every op replicas 0 and 2 commit, until its liveness window runs out and it starts view 1,
/// which it leads. The merge's commit point is above what it executed: it is promoted only once
/// it journaled every op from what it executed up, and the cluster goes on with them.
fn hole_below_commit(safeguards: Safeguards) -> (Cluster, u64) {
    let mut cluster = quiet(3, safeguards);
    warm_up(&mut cluster, 5);
    cluster.network().cut_link(0, 1);
    assert!(run_until(&mut cluster, 1_000, 10 * SECOND, |c| replica(
        c, 1
    )
    .status()
        == Status::ViewChange));
    let committed = replica(&cluster, 2).commit_min();
    assert!(
        replica(&cluster, 1).journaled_head() + 5 < committed,
        "replica 1 starts the view change with a hole below the commit point"
    );
    run_until(&mut cluster, 10_000, 30 * SECOND, |c| {
        every(c, METADATA, &[0, 1, 2], |r| {
            r.status() == Status::Normal && r.view() >= 1 && r.commit_min() >= committed + 3
        })
    });
    (cluster, committed)
}

#[test]
fn a_new_primary_with_a_hole_below_the_commit_point_is_not_promoted_until_it_is_filled() {
    let (cluster, committed) = hole_below_commit(Safeguards::default());
    assert_eq!(cluster.failure(), None);
    survivors_hold(&cluster, committed + 3);
}

/// The durable view: replica 2 restarts with view 1 on disk (replicas 1 and 2 started it while
/// replica 0 was cut off) and ignores the Prepares replica 0 keeps sending in view 0.
#[test]
fn a_replica_that_restarts_with_its_view_on_disk_ignores_a_prepare_of_the_old_view() {
    let mut cluster = quiet(4, Safeguards::default());
    warm_up(&mut cluster, 5);
    for other in [1, 2] {
        cluster.network().cut_link(0, other);
        cluster.network().cut_link(other, 0);
    }
    assert!(run_until(&mut cluster, 10_000, 20 * SECOND, |c| every(
        c,
        METADATA,
        &[1, 2],
        |r| r.status() == Status::Normal && r.view() >= 1
    )));
    let view = replica(&cluster, 2).view();
    cluster.crash_node(2, false);
    cluster.restart_node(2);
    assert!(replica(&cluster, 2).durable().view >= view);
    // Replica 0 (still in view 0, the primary it thinks) reaches replica 2 again.
    cluster.network().restore_link(0, 2);
    cluster.network().restore_link(2, 0);
    run_until(&mut cluster, 10_000, 10 * SECOND, |_| false);
    assert_eq!(cluster.failure(), None);
    let r2 = replica(&cluster, 2);
    assert!(r2.view() >= view, "{}", cluster.status().join("\n"));
    let dropped = r2
        .counters()
        .get("prepare_while_recovering")
        .copied()
        .unwrap_or(0)
        + r2.counters()
            .get("prepare_unverified")
            .copied()
            .unwrap_or(0);
    // Replica 0's prepares of view 0 reached it (its pipeline's retransmissions) and were
    // dropped: the test saw the old view's traffic, not an idle old primary.
    assert!(dropped > 0, "{}", cluster.status().join("\n"));
    for op in r2.commit_min() + 1..=r2.head() {
        if let Some(header) = r2.header(op) {
            assert!(
                header.view >= 1,
                "replica 2 holds op {op} of view 0 above its commit point"
            );
        }
    }
}

/// Every node goes down at once and comes back: each recovers, probes, finds no primary, and
/// after its probes runs out starts a view change offering its log; the cluster resumes from
/// the best log and every request completes.
#[test]
fn all_three_nodes_restart_at_once_and_the_cluster_resumes() {
    let mut cluster = quiet(5, Safeguards::default());
    warm_up(&mut cluster, 10);
    let committed = (0..3)
        .map(|n| replica(&cluster, n).commit_min())
        .min()
        .unwrap();
    for node in 0..3 {
        cluster.crash_node(node, true);
    }
    for node in 0..3 {
        cluster.restart_node(node);
    }
    for node in 0..3 {
        assert_eq!(replica(&cluster, node).status(), Status::Recovering);
    }
    assert!(
        run_until(&mut cluster, 10_000, 30 * SECOND, |c| every(
            c,
            METADATA,
            &[0, 1, 2],
            |r| r.status() == Status::Normal && r.commit_min() >= committed + 5
        )),
        "{}",
        cluster.status().join("\n")
    );
    assert_eq!(cluster.failure(), None);
}

/// A vote that does not survive its voter: replica 2 joins replica 1's view change (view 1)
/// and crashes the moment it is in it, its superblock write still in the lane. Replica 0 never
/// hears of view 1. Replica 2 comes back with the view its superblock holds (view 0) and
/// acknowledges replica 0's new prepares, which commit in view 0; replica 0 dies with an op
/// executed and answered that replica 2 holds but has not executed. If replica 2's
/// `DoViewChange` left before its superblock held view 1, replica 1 started view 1 on that
/// vote without that op, and once replicas 1 and 2 hear each other view 1's log replaces it.
fn vote_lost_in_a_crash(safeguards: Safeguards) -> (Cluster, u64) {
    let mut cluster = quiet(3, safeguards);
    warm_up(&mut cluster, 8);
    // Replicas 0 and 1 cannot hear each other; replica 2 hears both but speaks only to 1.
    cluster.network().cut_link(0, 1);
    cluster.network().cut_link(1, 0);
    cluster.network().cut_link(2, 0);
    let mut dvc_before_superblock = false;
    assert!(
        run_until(&mut cluster, 10, 30 * SECOND, |c| {
            let r = replica(c, 2);
            dvc_before_superblock = r.sent_do_view_change() && r.durable().view < 1;
            r.status() == Status::ViewChange && r.view() == 1
        }),
        "replica 2 joins the view change:\n{}",
        cluster.status().join("\n")
    );
    assert_eq!(
        dvc_before_superblock, !safeguards.durable_view_gate,
        "the gate holds the vote until the superblock holds the view"
    );
    cluster.crash_node(2, false);
    // Replica 2 comes back speaking to replica 0 and deaf to replica 1 (and its view 1).
    cluster.network().cut_link(1, 2);
    cluster.network().restore_link(2, 0);
    let base = replica(&cluster, 0).commit_max();
    cluster.restart_node(2);
    assert_eq!(
        replica(&cluster, 2).view(),
        0,
        "the superblock never held view 1"
    );
    let committed_in_view_0 = run_until(&mut cluster, 10, 30 * SECOND, |c| {
        let (r0, r2) = (replica(c, 0), replica(c, 2));
        r2.status() == Status::Normal
            && r0.commit_min() >= base + 5
            && r0.commit_min() > r2.commit_min()
    });
    assert!(
        committed_in_view_0,
        "replicas 0 and 2 commit in view 0:\n{}",
        cluster.status().join("\n")
    );
    // Replica 0 executed (and answered) an op replica 2 journaled but has not executed yet;
    // replica 0 dies there, and replicas 1 and 2 hear each other again.
    let target = replica(&cluster, 0).commit_min();
    cluster.crash_node(0, false);
    cluster.network().repair();
    run_until(&mut cluster, 10_000, 60 * SECOND, |c| {
        every(c, METADATA, &[1, 2], |r| {
            r.status() == Status::Normal && r.view() >= 1 && r.commit_min() >= target + 2
        })
    });
    if cluster.failure().is_none() {
        cluster.restart_node(0);
        run_until(&mut cluster, 10_000, 60 * SECOND, |c| {
            c.replica(0, METADATA)
                .is_some_and(|r| r.status() == Status::Normal && r.commit_min() >= target + 2)
        });
    }
    (cluster, target)
}

#[test]
fn a_vote_for_a_view_is_cast_only_once_the_superblock_holds_the_view() {
    let (cluster, target) = vote_lost_in_a_crash(Safeguards::default());
    assert_eq!(cluster.failure(), None);
    for node in 0..3 {
        let r = replica(&cluster, node);
        assert!(r.view() >= 1, "{}", cluster.status().join("\n"));
        assert!(
            r.commit_min() >= target + 2,
            "{}",
            cluster.status().join("\n")
        );
    }
}

/// What a restart forgets under replicated durability: replica 0 leads a partition, and ops it
/// commits with replica 2's acknowledgments never reach replica 1. Replica 0 crashes: boot
/// keeps only what its WAL published, so its log no longer has them, though it acknowledged
/// them (it built them). Replica 2 cannot reach replica 1. Replica 0 gives up waiting for a
/// primary and joins replica 1's view change with the log it recovered. Its DoViewChange says
/// it forgot what it acknowledged: replica 1 must wait for replica 2's log, the one that holds
/// those ops, rather than start view 1 from two logs that both lack them.
fn restart_without_acknowledged_ops(safeguards: Safeguards) -> (Cluster, u128, u64) {
    let mut cluster = quiet_with(4, safeguards, 1);
    let group = cluster
        .layout()
        .groups()
        .into_iter()
        .map(|g| g.id())
        .find(|g| *g != METADATA)
        .unwrap();
    assert!(run_until(&mut cluster, 10_000, 5 * SECOND, |c| at(
        c, 0, group
    )
    .commit_min()
        >= 8));
    cluster.network().cut_link(0, 1);
    let base = at(&cluster, 0, group).commit_min();
    assert!(
        run_until(&mut cluster, 1_000, 3 * SECOND, |c| at(c, 0, group)
            .commit_min()
            >= base + 3),
        "replicas 0 and 2 commit without replica 1:\n{}",
        cluster.status().join("\n")
    );
    let committed = at(&cluster, 0, group).commit_min();
    assert!(at(&cluster, 1, group).journaled_head() < committed);
    cluster.crash_node(0, false);
    cluster.network().restore_link(0, 1);
    cluster.network().cut_link(2, 1);
    cluster.restart_node(0);
    assert!(
        at(&cluster, 0, group).head() < committed,
        "boot kept only the published log"
    );
    // Replica 0's probes go unanswered and it joins the view change replica 1 leads.
    assert!(
        run_until(&mut cluster, 1_000, 20 * SECOND, |c| at(c, 0, group)
            .sent_do_view_change()),
        "replica 0 offers its log:\n{}",
        cluster.status().join("\n")
    );
    run_until(&mut cluster, 10_000, 2 * SECOND, |_| false);
    cluster.network().restore_link(2, 1);
    run_until(&mut cluster, 10_000, 60 * SECOND, |c| {
        every(c, group, &[0, 1, 2], |r| {
            r.status() == Status::Normal && r.view() >= 1 && r.commit_min() >= committed + 2
        })
    });
    (cluster, group, committed)
}

#[test]
fn a_restarted_replica_that_forgot_its_acknowledgments_stands_for_no_quorum() {
    let (cluster, group, committed) = restart_without_acknowledged_ops(Safeguards::default());
    assert_eq!(cluster.failure(), None);
    for node in 0..3 {
        let r = cluster.replica(node, group).unwrap();
        assert!(r.view() >= 1, "{}", cluster.status().join("\n"));
        assert!(
            r.commit_min() >= committed + 2,
            "{}",
            cluster.status().join("\n")
        );
    }
}

/// The only copy: replica 2 is down while replicas 0 and 1 commit ops of a partition with
/// replicated durability (a backup acknowledges once its WAL queued the prepare, in memory).
/// Replica 0, the primary, crashes and forgets them at boot. Replica 1 holds the only copy; it
/// gives up on its primary and starts a view change nobody else can join yet. Then it crashes
/// too, before anyone came back. Its view change published what it had journaled, so its boot
/// keeps the ops and the view all three start once they are back holds them. Without that
/// publish every replica's boot drops them: committed ops lost by one crash after another.
fn only_copy_in_a_stalled_view_change(safeguards: Safeguards) -> (Cluster, u128, u64) {
    let mut cluster = quiet_with(4, safeguards, 1);
    let group = cluster
        .layout()
        .groups()
        .into_iter()
        .map(|g| g.id())
        .find(|g| *g != METADATA)
        .unwrap();
    assert!(run_until(&mut cluster, 10_000, 5 * SECOND, |c| at(
        c, 0, group
    )
    .commit_min()
        >= 8));
    cluster.crash_node(2, false);
    let base = at(&cluster, 0, group).commit_min();
    assert!(
        run_until(&mut cluster, 1_000, 3 * SECOND, |c| at(c, 0, group)
            .commit_min()
            >= base + 3),
        "replicas 0 and 1 commit without replica 2:\n{}",
        cluster.status().join("\n")
    );
    let committed = at(&cluster, 0, group).commit_min();
    cluster.crash_node(0, false);
    assert!(
        run_until(&mut cluster, 1_000, 10 * SECOND, |c| at(c, 1, group)
            .status()
            == Status::ViewChange),
        "replica 1 gives up on its primary:\n{}",
        cluster.status().join("\n")
    );
    run_until(&mut cluster, 1_000, SECOND, |_| false);
    cluster.crash_node(1, false);
    for node in 0..3 {
        cluster.restart_node(node);
    }
    assert!(
        at(&cluster, 0, group).head() < committed,
        "replica 0's boot kept only its published log"
    );
    run_until(&mut cluster, 10_000, 60 * SECOND, |c| {
        every(c, group, &[0, 1, 2], |r| {
            r.status() == Status::Normal && r.commit_min() >= committed
        })
    });
    (cluster, group, committed)
}

#[test]
fn a_view_change_publishes_what_only_its_memory_may_hold() {
    let (cluster, group, committed) = only_copy_in_a_stalled_view_change(Safeguards::default());
    assert_eq!(cluster.failure(), None);
    for node in 0..3 {
        let r = cluster.replica(node, group).unwrap();
        assert_eq!(
            r.status(),
            Status::Normal,
            "{}",
            cluster.status().join("\n")
        );
        assert!(
            r.commit_min() >= committed,
            "{}",
            cluster.status().join("\n")
        );
    }
}

#[test]
fn without_the_publish_on_a_view_change_two_crashes_in_a_row_lose_commits() {
    let (cluster, group, committed) = only_copy_in_a_stalled_view_change(Safeguards {
        publish_on_view_change: false,
        ..Safeguards::default()
    });
    let (checker, what) = cluster.failure().expect("a checker fires");
    assert!(
        checker == "commit history" || checker == "replies",
        "{checker}: {what}"
    );
    // Every replica's boot dropped the ops: the view they started holds none of them.
    assert!(
        (0..3).all(|node| cluster
            .replica(node, group)
            .is_some_and(|r| r.head() < committed)),
        "{}",
        cluster.status().join("\n")
    );
}

/// A late answer to a previous life: replica 2 restarts and asks who leads; replica 0's answer
/// takes four seconds (the link is clogged). Replica 2's next probe is answered at once, it
/// becomes a backup and journals more ops, then restarts again and asks again, slowly
/// answered too. The first answer arrives now: it describes replica 0's log as it was four
/// seconds ago. Taken, it would cut what replica 2 journaled since (the ops it acknowledged);
/// the answer echoes the incarnation of the life that asked, so the new life refuses it.
fn late_answer_to_a_previous_life(safeguards: Safeguards) -> Cluster {
    let mut cluster = quiet(5, safeguards);
    warm_up(&mut cluster, 8);
    cluster.crash_node(2, false);
    cluster.network().clog_link(0, 2, 4 * SECOND);
    cluster.restart_node(2);
    // The first probe (100 ms after boot) is answered, slowly.
    run_until(&mut cluster, 10_000, 3 * SECOND / 2, |_| false);
    // At least the head the slow answer names.
    let answered_head = replica(&cluster, 0).head();
    cluster.network().unclog_link(0, 2);
    assert!(
        run_until(&mut cluster, 1_000, 3 * SECOND, |c| replica(c, 2).status()
            == Status::Normal),
        "replica 2 adopts the answer to its second probe:\n{}",
        cluster.status().join("\n")
    );
    assert!(
        run_until(&mut cluster, 1_000, 3 * SECOND, |c| {
            let r = replica(c, 2);
            r.journaled_head() >= answered_head + 3 && r.journaled_head() > r.commit_min()
        }),
        "replica 2 journals past the head the late answer names:\n{}",
        cluster.status().join("\n")
    );
    cluster.crash_node(2, false);
    cluster.network().clog_link(0, 2, 4 * SECOND);
    cluster.restart_node(2);
    run_until(&mut cluster, 10_000, 3 * SECOND, |_| false);
    cluster.network().unclog_link(0, 2);
    run_until(&mut cluster, 10_000, 20 * SECOND, |c| {
        let (r0, r2) = (replica(c, 0), replica(c, 2));
        r2.status() == Status::Normal && r2.commit_min() >= r0.commit_min().min(answered_head + 10)
    });
    cluster
}

#[test]
fn a_restarted_replica_refuses_an_answer_to_its_previous_life() {
    let cluster = late_answer_to_a_previous_life(Safeguards::default());
    assert_eq!(cluster.failure(), None);
    let r = replica(&cluster, 2);
    assert!(
        r.counters()
            .get("start_view_not_echoed")
            .copied()
            .unwrap_or(0)
            >= 1,
        "the late answer arrived and was refused: {:?}",
        r.counters()
    );
    assert_eq!(
        r.status(),
        Status::Normal,
        "{}",
        cluster.status().join("\n")
    );
}

// ---- the same scripts with one safeguard off ----

#[test]
fn without_the_body_fetch_the_write_put_back_is_lost() {
    let cluster = write_put_back(Safeguards {
        body_fetch: false,
        ..Safeguards::default()
    });
    let (checker, what) = cluster.failure().expect("a checker fires");
    assert!(
        checker == "commit history" || checker == "replies",
        "{checker}: {what}"
    );
}

#[test]
fn without_the_nack_rule_the_view_never_starts() {
    let (cluster, _) = header_without_body(Safeguards {
        nack_header_without_body: false,
        ..Safeguards::default()
    });
    for node in [1, 2] {
        let r = replica(&cluster, node);
        assert_ne!(
            r.status(),
            Status::Normal,
            "{}",
            cluster.status().join("\n")
        );
        assert!(
            r.view() > 3,
            "views asked for and none started: {}",
            r.view()
        );
    }
}

#[test]
fn without_the_hole_check_lower_bound_a_new_primary_overwrites_committed_ops() {
    let (cluster, _) = hole_below_commit(Safeguards {
        hole_check_lower_bound: false,
        ..Safeguards::default()
    });
    let (checker, what) = cluster.failure().expect("a checker fires");
    assert_eq!(checker, "commit history", "{what}");
}

#[test]
fn without_the_durable_view_gate_a_vote_lost_in_a_crash_undoes_commits() {
    let (cluster, _) = vote_lost_in_a_crash(Safeguards {
        durable_view_gate: false,
        ..Safeguards::default()
    });
    let (checker, what) = cluster.failure().expect("a checker fires");
    assert!(
        checker == "commit history" || checker == "replies" || checker == "view log",
        "{checker}: {what}"
    );
}

#[test]
fn without_the_forgotten_acknowledgments_a_restart_and_a_slow_replica_lose_commits() {
    let (cluster, _, _) = restart_without_acknowledged_ops(Safeguards {
        forgotten_acknowledgments: false,
        ..Safeguards::default()
    });
    let (checker, what) = cluster.failure().expect("a checker fires");
    assert!(
        checker == "commit history" || checker == "replies",
        "{checker}: {what}"
    );
}

#[test]
fn without_the_incarnation_echo_a_late_answer_cuts_acknowledged_ops() {
    let cluster = late_answer_to_a_previous_life(Safeguards {
        incarnation_echo: false,
        ..Safeguards::default()
    });
    let (checker, what) = cluster.failure().expect("a checker fires");
    assert_eq!(checker, "held log", "{what}");
}
