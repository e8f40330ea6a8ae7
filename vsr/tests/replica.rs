//! The replica's rules one at a time, on a hand-driven cluster (`common`): each test stages the
//! moment a rule is for and fails without it (checked by undoing each fix or turning its
//! safeguard off; `docs/vsr.md` lists them).
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

mod common;

use common::{CLUSTER, Cluster, GROUP, chain, request, session};
use iggy_vsr::{
    ACK_BOUND_UNKNOWN, Boot, Config, Destination, Durable, Effect, From, Identity, Message,
    Outcome, Replica, Safeguards, Status,
};

fn new_group() -> Durable {
    Durable::default()
}

fn restarted(view: u32) -> Durable {
    Durable {
        view,
        log_view: view,
        commit_max: 0,
        incarnation: 1,
        ack_bound: ACK_BOUND_UNKNOWN,
    }
}

fn from(replica: u8, view: u32) -> From {
    From {
        cluster: CLUSTER,
        group: GROUP,
        replica,
        view,
    }
}

fn count(cluster: &Cluster, from: u8, kind: fn(&Message) -> bool) -> usize {
    cluster
        .outbox
        .iter()
        .filter(|(f, _, m)| *f == from && kind(m))
        .count()
}

/// Item 7 of #31, `restarted` as a durable fact: a group that never booted (incarnation 0 in
/// its superblock) starts in normal status, records its incarnation first and sends nothing
/// until that is durable; a boot that finds it recorded recovers.
#[test]
fn a_new_group_records_its_first_boot_before_it_sends_anything() {
    let mut cluster = Cluster::new(vec![Vec::new(); 3], new_group(), 0, Safeguards::default());
    assert_eq!(cluster.replica(0).status(), Status::Normal);
    assert!(matches!(
        cluster.nodes[0].lane.front(),
        Some(Effect::WriteSuperblock { durable, .. }) if durable.incarnation == 100
    ));
    // Ticks before the record is durable: the primary's commit broadcasts are not sent.
    for _ in 0..60 {
        cluster.nodes[0].replica.tick();
        cluster.collect(0);
    }
    assert_eq!(count(&cluster, 0, |_| true), 0);
    assert!(cluster.replica(0).counters()["send_before_first_boot_recorded"] > 0);
    cluster.settle_storage();
    assert_eq!(cluster.nodes[0].superblock.incarnation, 100);
    cluster.run(60, |_, _, _| true);
    assert!(cluster.replica(1).commit_max() == 0 && cluster.replica(1).status() == Status::Normal);

    // Booted again from that superblock: a restart, whatever the host says.
    let again = Cluster::new(vec![Vec::new(); 3], restarted(0), 0, Safeguards::default());
    assert_eq!(again.replica(0).status(), Status::Recovering);
}

/// A new group's backup that has not recorded its first boot sends nothing to its peers, but it
/// refuses a client's request (`NotAccepted`): the refusal says nothing about its log or its
/// votes, and a server that routed the request to it (it knew no primary yet) would otherwise
/// wait for its reply deadline. Without the exception the request goes unanswered.
#[test]
fn a_new_group_refuses_requests_before_its_first_boot_is_recorded() {
    let mut cluster = Cluster::new(vec![Vec::new(); 3], new_group(), 0, Safeguards::default());
    for replica in [1, 2] {
        cluster.nodes[replica].replica.on_message(Message::Request {
            cluster: CLUSTER,
            group: GROUP,
            client: 0xC1,
            request: 1,
            operation: iggy_format::operation::MESSAGES,
            body: vec![1, 2, 3],
        });
        cluster.collect(replica);
        let refused = cluster.outbox.iter().any(|(from, to, message)| {
            usize::from(*from) == replica
                && *to == iggy_vsr::Destination::Client(0xC1)
                && matches!(
                    message,
                    Message::Reply {
                        status: iggy_vsr::ReplyStatus::NotAccepted,
                        request: 1,
                        ..
                    }
                )
        });
        assert!(refused, "replica {replica} answered the request");
    }
    // Nothing else left before the record is durable.
    assert!(
        cluster
            .outbox
            .iter()
            .all(|(_, to, _)| matches!(to, iggy_vsr::Destination::Client(_)))
    );
}

/// Item 7: effect ids of two lives of a replica never meet, so a completion of an effect of an
/// earlier life (a host that did not drop it) cannot be taken for one of this life.
#[test]
fn effect_ids_of_two_lives_never_meet() {
    let boot = |incarnation| Boot {
        durable: new_group(),
        applied: 0,
        head: 0,
        head_checksum: 0,
        entries: Vec::new(),
        forgot_acknowledged: false,
        forgotten_through: None,
        incarnation,
        clients: Vec::new(),
    };
    let id = Identity {
        cluster: CLUSTER,
        group: GROUP,
        replica: 1,
        replicas: 3,
    };
    let mut first = Replica::new(Config::default(), Safeguards::default(), id, boot(1));
    let mut second = Replica::new(Config::default(), Safeguards::default(), id, boot(2));
    let first_id = first.take_effects()[0].id().unwrap();
    let second_id = second.take_effects()[0].id().unwrap();
    assert_ne!(first_id, second_id);
    second.on_completion(first_id, Outcome::Done);
    assert_eq!(
        second.durable().incarnation,
        0,
        "the earlier life's completion is ignored"
    );
    second.on_completion(second_id, Outcome::Done);
    assert_eq!(second.durable().incarnation, 2);
}

/// Item 7: a completion of another kind than the effect's (a prepare answered `Done`) is the
/// host's bug; the replica stops rather than reason on from a log it no longer knows.
#[test]
fn an_outcome_of_another_effect_halts_the_replica() {
    let mut cluster = Cluster::new(vec![Vec::new(); 3], new_group(), 0, Safeguards::default());
    cluster.settle_storage();
    cluster.nodes[0].replica.on_message(Message::Request {
        cluster: CLUSTER,
        group: GROUP,
        client: 0xC1,
        request: 1,
        operation: iggy_format::operation::MESSAGES,
        body: vec![1, 2, 3],
    });
    cluster.collect(0);
    let Some(Effect::Prepare { id, .. }) = cluster.nodes[0].lane.pop_front() else {
        panic!("a prepare");
    };
    cluster.nodes[0].replica.on_completion(id, Outcome::Done);
    assert_eq!(cluster.replica(0).status(), Status::Halted);
    assert_eq!(
        cluster.replica(0).counters()["outcome_of_another_effect"],
        1
    );
}

/// Item 7: a backup acknowledges a run of journaled ops with one `PrepareOk`, for the newest
/// (it journals in order: the primary counts it for every op up to it). Here the primary's
/// retransmission of op 1 (its acknowledgment lost) makes the backup acknowledge again from op
/// 1: one message, not one per op.
#[test]
fn one_prepare_ok_acknowledges_a_run_of_journaled_ops() {
    let mut cluster = Cluster::new(vec![Vec::new(); 3], new_group(), 0, Safeguards::default());
    cluster.settle_storage();
    for r in 1..=10 {
        cluster.nodes[0].replica.on_message(request(r));
        cluster.collect(0);
    }
    // Every prepare reaches backup 1 and is journaled; its acknowledgments are lost.
    let mut first = None;
    cluster.deliver_where(|_, to, m| {
        if to == 1
            && let Message::Prepare { header, .. } = m
            && header.op == 1
        {
            first = Some(m.clone());
        }
        !matches!(m, Message::PrepareOk { .. })
    });
    assert_eq!(cluster.replica(1).journaled_head(), 10);
    cluster.nodes[1].replica.on_message(first.unwrap());
    cluster.collect(1);
    let oks: Vec<u64> = cluster
        .outbox
        .iter()
        .filter_map(|(f, _, m)| match m {
            Message::PrepareOk { op, .. } if *f == 1 => Some(*op),
            _ => None,
        })
        .collect();
    assert_eq!(oks, vec![10]);
    cluster.deliver_all();
    assert_eq!(cluster.replica(0).commit_max(), 10);
}

/// Item 2 of #31: a `StartView` lost on its way to a backup. The backup resends its
/// `DoViewChange` every 500 ms; the primary answers it with a `StartView` of its own, so the
/// backup starts the view within a resend interval instead of timing out into another view
/// change. Without the safeguard it is still in the view change 2 s later.
#[test]
fn a_lost_start_view_is_resent_at_the_next_do_view_change() {
    for resend in [true, false] {
        let safeguards = Safeguards {
            start_view_resend: resend,
            ..Safeguards::default()
        };
        let log = chain(0, 0, 5, 0, 1);
        let mut cluster = Cluster::new(
            vec![log.clone(), log.clone(), log],
            new_group(),
            5,
            safeguards,
        );
        cluster.settle_storage();
        cluster.run(10, |_, _, _| true);
        // Replica 0 goes quiet; replica 1 leads view 1, and its broadcast StartView to
        // replica 2 is lost.
        let lost = std::cell::Cell::new(false);
        let mut keep = |from: u8, to: u8, m: &Message| {
            if from == 0 || to == 0 {
                return false;
            }
            if !lost.get() && to == 2 && matches!(m, Message::StartView { nonce: 0, .. }) {
                lost.set(true);
                return false;
            }
            true
        };
        cluster.run_some(520, 1..3, &mut keep);
        assert!(lost.get(), "the StartView was sent and lost");
        assert_eq!(cluster.replica(1).status(), Status::Normal);
        cluster.run_some(200, 1..3, &mut keep);
        let backup = cluster.replica(2);
        if resend {
            assert_eq!((backup.status(), backup.view()), (Status::Normal, 1));
            assert!(cluster.replica(1).counters()["start_view_resent"] >= 1);
        } else {
            assert_eq!(backup.status(), Status::ViewChange, "{}", backup.describe());
        }
    }
}

/// Item 3 of #31: a view start's cut queued behind a commit in flight. The backup executes
/// through op 8 (its commit effect not yet done) when a `StartView` arrives whose commit point
/// is past its log: it may keep only what executed, and what executed includes the op the
/// commit in flight reaches. Cutting at what had completed (op 0) landed below the storage's
/// commit point once the commit ran first on the lane: the storage refused, the replica halted.
#[test]
fn a_cut_never_lands_below_a_commit_in_flight() {
    let log = chain(0, 0, 22, 0, 1);
    let mut cluster = Cluster::new(
        vec![log.clone(), log.clone(), log[..10].to_vec()],
        new_group(),
        0,
        Safeguards::default(),
    );
    // Replica 2 booted with ops 1..=10, whose prepares prove ops through 8 committed: its
    // commit effect through 8 waits on its lane.
    assert!(
        cluster.nodes[2]
            .lane
            .iter()
            .any(|e| matches!(e, Effect::Commit { through: 8, .. })),
        "{:?}",
        cluster.nodes[2].lane
    );
    let (head, _) = &log[21];
    let commit = &log[19].0;
    cluster.nodes[2].replica.on_message(Message::StartView {
        from: from(1, 1),
        op: head.op,
        commit: commit.op,
        commit_checksum: commit.checksum(),
        nonce: 0,
        headers: vec![log[20].0, log[21].0],
    });
    cluster.collect(2);
    let cut = cluster.nodes[2].lane.iter().find_map(|e| match e {
        Effect::Truncate { after, .. } => Some(*after),
        _ => None,
    });
    assert_eq!(cut, Some(8));
    cluster.settle_storage();
    assert!(
        cluster.nodes[2].refused.is_empty(),
        "{:?}",
        cluster.nodes[2].refused
    );
    assert_ne!(cluster.replica(2).status(), Status::Halted);
    // The two ops it cut (9 and 10) it keeps as candidates the chain proves.
    assert_eq!(cluster.replica(2).candidates(), 2);
}

/// Item 7: a `Commit` whose checksum is not the backup's entry at that op. The backup's op 6
/// is another log's (and the primary's prepares of op 6 are lost on the way): without the
/// check it executed its own op 6 on the primary's word; now it cuts it, takes the primary's
/// checksum as the anchor and repairs the primary's op 6 before it executes.
#[test]
fn a_commit_naming_another_entry_cuts_it_and_repairs_the_primarys() {
    let ours = chain(0, 0, 6, 0, 1);
    let mut theirs = ours[..5].to_vec();
    theirs.extend(chain(5, ours[4].0.checksum(), 1, 0, 9));
    let mut cluster = Cluster::new(
        vec![ours.clone(), ours.clone(), theirs],
        new_group(),
        0,
        Safeguards::default(),
    );
    // Hold back the primary's retransmitted prepares of op 6 to replica 2 until it has seen
    // the commit point: only the `Commit` tells it.
    let mut seen_commit = false;
    cluster.run(200, |_, to, m| {
        if to == 2 && matches!(m, Message::Commit { commit, .. } if *commit >= 6) {
            seen_commit = true;
        }
        !(to == 2 && !seen_commit && matches!(m, Message::Prepare { header, .. } if header.op == 6))
    });
    let node = &cluster.nodes[2];
    assert!(node.executed >= 6, "{}", node.replica.describe());
    assert_eq!(node.log[5].0.checksum(), ours[5].0.checksum());
    assert!(node.replica.counters()["commit_checksum_mismatch"] >= 1);
}

/// Item 4 of #31: a replica every peer answered `RangeEvicted` cannot repair op by op. It no
/// longer counts as wanting repair (so a node's ration does not keep a slot for it) and no
/// longer asks every 200 ms: it probes one peer every 5 s.
#[test]
fn a_replica_behind_every_peers_ring_leaves_the_ration_and_probes_slowly() {
    let log = chain(0, 0, 300, 0, 1);
    let config = Config {
        ring_entries_max: 100,
        ..Config::default()
    };
    let mut cluster = Cluster::with_config(
        vec![log.clone(), log.clone(), log[..10].to_vec()],
        new_group(),
        298,
        Safeguards::default(),
        config,
    );
    // Retention deleted what left the peers' rings: their disks cannot serve it either.
    cluster.nodes[0].retained_from = 200;
    cluster.nodes[1].retained_from = 200;
    cluster.settle_storage();
    cluster.run(100, |_, _, _| true);
    let behind = cluster.replica(2);
    assert!(behind.behind_ring(), "{}", behind.describe());
    assert!(!behind.wants_repair());
    let mut asked = 0;
    cluster.run(1_500, |from, _, m| {
        if from == 2 && matches!(m, Message::RequestPrepares { .. }) {
            asked += 1;
        }
        true
    });
    // 1,500 ticks: three probes (one every 500), not 75 rounds (one every 20).
    assert!((2..=4).contains(&asked), "asked {asked} times");
    assert!(cluster.replica(2).behind_ring());
}

/// Issue #33: behind every peer's log in a group that keeps snapshots, a replica asks a peer for
/// its snapshot instead of probing for ops no one holds, and holds no ration slot meanwhile; a
/// peer that answers it has none (its log would start at op 1) ends the transfer and repair
/// resumes. With `snapshot-transfer` off it probes, as before.
#[test]
fn a_replica_behind_every_peers_log_asks_for_a_snapshot_and_a_peer_with_none_ends_it() {
    for on in [true, false] {
        let log = chain(0, 0, 300, 0, 1);
        let config = Config {
            ring_entries_max: 100,
            snapshot_transfer: true,
            ..Config::default()
        };
        let safeguards = Safeguards {
            snapshot_transfer: on,
            ..Safeguards::default()
        };
        let mut cluster = Cluster::with_config(
            vec![log.clone(), log.clone(), log[..10].to_vec()],
            new_group(),
            298,
            safeguards,
            config,
        );
        cluster.nodes[0].retained_from = 200;
        cluster.nodes[1].retained_from = 200;
        cluster.settle_storage();
        let (mut snapshot_asks, mut probes, mut source) = (0, 0, None);
        cluster.run(1_000, |from, to, m| {
            if from == 2 {
                match m {
                    Message::RequestSnapshot { .. } => {
                        snapshot_asks += 1;
                        source = Some(to);
                    }
                    Message::RequestPrepares { .. } => probes += 1,
                    _ => {}
                }
            }
            true
        });
        let behind = cluster.replica(2);
        assert!(!behind.wants_repair(), "{}", behind.describe());
        if !on {
            assert_eq!(snapshot_asks, 0);
            assert!(!behind.transferring());
            continue;
        }
        // Asked once a second (no peer of this harness answers), of the peers in turn.
        assert!(
            (5..=11).contains(&snapshot_asks),
            "asked {snapshot_asks} times"
        );
        assert!(behind.transferring(), "{}", behind.describe());
        let source = source.unwrap();
        let view = behind.view();
        let asked_before = probes;
        cluster.nodes[2].replica.on_message(Message::SnapshotChunk {
            from: iggy_vsr::From {
                cluster: CLUSTER,
                group: GROUP,
                replica: source,
                view,
            },
            snapshot: iggy_vsr::SnapshotRef::default(),
            offset: 0,
            bytes: Vec::new(),
        });
        let behind = cluster.replica(2);
        assert!(!behind.transferring(), "{}", behind.describe());
        assert_eq!(behind.counters().get("snapshot_none"), Some(&1));
        assert!(!behind.behind_ring() && behind.wants_repair());
        cluster.run(100, |from, _, m| {
            if from == 2 && matches!(m, Message::RequestPrepares { .. }) {
                probes += 1;
            }
            true
        });
        assert!(probes > asked_before, "repair resumed");
    }
}

/// A replica down while its peers' rings moved past it (ring of 100 entries, 288 ops missed)
/// catches up by repair: the peers serve the rounds below their rings from their logs on disk.
/// Without `repair-from-disk` the peers answer `RangeEvicted` and it stays behind the ring for
/// good (before issue #33 the only outcome).
#[test]
fn a_replica_down_past_every_ring_repairs_from_the_peers_disks() {
    for on in [true, false] {
        let log = chain(0, 0, 300, 0, 1);
        let config = Config {
            ring_entries_max: 100,
            ..Config::default()
        };
        let safeguards = Safeguards {
            repair_from_disk: on,
            ..Safeguards::default()
        };
        let mut cluster = Cluster::with_config(
            vec![log.clone(), log.clone(), log[..10].to_vec()],
            new_group(),
            298,
            safeguards,
            config,
        );
        cluster.settle_storage();
        cluster.run(1_000, |_, _, _| true);
        let behind = cluster.replica(2);
        let served: u64 = (0..2)
            .map(|i| {
                cluster
                    .replica(i)
                    .counters()
                    .get("repair_served_from_disk")
                    .copied()
                    .unwrap_or(0)
            })
            .sum();
        if on {
            assert!(!behind.behind_ring(), "{}", behind.describe());
            // Journaled through the primary's head, every op proved by the hash chain.
            assert_eq!(cluster.nodes[2].head(), cluster.nodes[0].head());
            assert_eq!(cluster.nodes[2].log, log);
            // 10 to 199 left the rings: at least two rounds read from disk.
            assert!(served >= 2, "served {served} rounds from disk");
        } else {
            assert!(behind.behind_ring(), "{}", behind.describe());
            assert_eq!(served, 0);
            assert_eq!(cluster.nodes[2].head().0, 10);
        }
    }
}

/// 300 ops committed in view 0 on replicas 0 and 1; replica 2 holds the first 10 (its
/// storage settled): a backup that must repair 290.
fn backup_2_behind() -> (common::Log, Cluster) {
    let log = chain(0, 0, 300, 0, 1);
    let mut cluster = Cluster::new(
        vec![log.clone(), log.clone(), log[..10].to_vec()],
        new_group(),
        298,
        Safeguards::default(),
    );
    cluster.settle_storage();
    (log, cluster)
}

/// A backup that lacks 290 ops while the other backup is gone (killed, cut off) asks the
/// primary for every new round, so it catches up in a few round trips. Rotating the source on
/// every round sent every other round to the dead backup, and each of those waited a second
/// (100 ticks) for a first answer before it was asked again: a restarted node's catch-up after
/// a second kill took 1.0 s (the fault harness's `kill-boot`), and with it every write of the
/// groups that needed its acknowledgment.
#[test]
fn a_backup_asks_the_primary_first_while_the_other_backup_is_gone() {
    let (log, mut cluster) = backup_2_behind();
    let mut ticks = 0;
    while cluster.nodes[2].log.len() < 300 && ticks < 1_000 {
        cluster.run(1, |from, to, _| from != 1 && to != 1);
        ticks += 1;
    }
    assert_eq!(
        cluster.nodes[2].log,
        log,
        "{}",
        cluster.replica(2).describe()
    );
    assert!(
        ticks < 50,
        "caught up in {ticks} ticks: a round went to the dead backup"
    );
}

/// A repair round whose answers take longer than a retry interval to arrive (128 prepares of
/// 100 KB over a loaded link: `scripts/failover-processes.sh` measured a restarted node fetching
/// 960 MB for the 430 MB it lacked) is not asked again while its answers keep coming, and its
/// last answer makes the next round due at once.
#[test]
fn a_repair_round_still_arriving_is_not_asked_again() {
    let (_, mut cluster) = backup_2_behind();
    // Every prepare for replica 2 waits in `held`; one a tick reaches it (a round of 128 takes
    // 128 ticks, six retry intervals).
    let mut held: std::collections::VecDeque<(u8, Message)> = std::collections::VecDeque::new();
    let mut asked: Vec<u64> = Vec::new();
    for _ in 0..2_000 {
        if let Some((from, message)) = held.pop_front() {
            cluster
                .outbox
                .push_front((from, iggy_vsr::Destination::Replica(2), message));
        }
        let mut released = true;
        cluster.run(1, |from, to, m| {
            if from == 2
                && let Message::RequestPrepares { first, .. } = m
            {
                asked.push(*first);
            }
            if to == 2 && matches!(m, Message::Prepare { .. }) {
                if std::mem::take(&mut released) {
                    return true;
                }
                held.push_back((from, m.clone()));
                return false;
            }
            true
        });
        if cluster.nodes[2].log.len() >= 298 && held.is_empty() {
            break;
        }
    }
    assert!(
        cluster.nodes[2].log.len() >= 298,
        "{}",
        cluster.replica(2).describe()
    );
    let mut distinct = asked.clone();
    distinct.dedup();
    // 288 ops lacked: three rounds (11, 139, 267), each asked once.
    assert_eq!(
        asked, distinct,
        "a round asked again while it arrived: {asked:?}"
    );
    assert!(asked.len() <= 4, "{asked:?}");
}

/// A round's first answer may wait behind other groups' answers on the same link (a restarted
/// node asks for 8 groups' rounds at once): before anything it asked has arrived, a round is
/// asked again only after a second, not after the 200 ms retry. At the article's batch shape a
/// restarted `iggy-server` node asked every range twice (2.6 GB fetched for 0.88 GB lacked)
/// until this rule.
#[test]
fn a_round_waits_a_second_for_its_first_answer() {
    let log = chain(0, 0, 100, 0, 1);
    let mut cluster = Cluster::new(
        vec![log.clone(), log.clone(), log[..10].to_vec()],
        new_group(),
        98,
        Safeguards::default(),
    );
    cluster.settle_storage();
    // Every prepare for replica 2 is held until 80 ticks after its first request, then all
    // arrive at once.
    let mut held: Vec<(u8, Message)> = Vec::new();
    let mut asked: Vec<(u64, u64)> = Vec::new();
    let mut first_asked: Option<u64> = None;
    for tick in 0..1_000u64 {
        let open = first_asked.is_some_and(|at| tick >= at + 80);
        if open {
            for (from, message) in held.drain(..) {
                cluster
                    .outbox
                    .push_back((from, iggy_vsr::Destination::Replica(2), message));
            }
        }
        cluster.run(1, |from, to, m| {
            if from == 2
                && let Message::RequestPrepares { first, .. } = m
            {
                asked.push((tick, *first));
                first_asked.get_or_insert(tick);
            }
            if to == 2 && !open && matches!(m, Message::Prepare { .. }) {
                held.push((from, m.clone()));
                return false;
            }
            true
        });
        if cluster.nodes[2].log.len() >= 98 && open && held.is_empty() {
            break;
        }
    }
    assert!(
        cluster.nodes[2].log.len() >= 98,
        "{}",
        cluster.replica(2).describe()
    );
    let firsts: Vec<u64> = asked.iter().map(|a| a.1).collect();
    let mut distinct = firsts.clone();
    distinct.dedup();
    assert_eq!(
        firsts, distinct,
        "a round asked again before its first answer could come: {asked:?}"
    );
}

/// Item 6 of #31: the client table a boot hands over answers a replayed request with its
/// original reply (no second prepare), drops an older one, and prepares a newer one.
/// A new group's replica 0 (the primary of view 0) booted with ops 1 to 4 executed and the
/// client table `session` of client 0xC1, its first superblock write done.
fn primary_with_session(safeguards: Safeguards, session: iggy_vsr::Session) -> Replica {
    let log = chain(0, 0, 4, 0, 1);
    let (head, checksum) = (log[3].0.op, log[3].0.checksum());
    let mut primary = Replica::new(
        Config::default(),
        safeguards,
        Identity {
            cluster: CLUSTER,
            group: GROUP,
            replica: 0,
            replicas: 3,
        },
        Boot {
            durable: new_group(),
            applied: 4,
            head,
            head_checksum: checksum,
            entries: log,
            forgot_acknowledged: false,
            forgotten_through: None,
            incarnation: 6,
            clients: vec![(0xC1, session)],
        },
    );
    for effect in primary.take_effects() {
        if let Effect::WriteSuperblock { id, .. } = effect {
            primary.on_completion(id, Outcome::Done);
        }
    }
    primary
}

#[test]
fn a_replay_after_a_restart_is_answered_from_the_table() {
    let mut primary = primary_with_session(Safeguards::default(), session(5, 3, b"original"));
    let request = |request: u64| Message::Request {
        cluster: CLUSTER,
        group: GROUP,
        client: 0xC1,
        request,
        operation: iggy_format::operation::MESSAGES,
        body: vec![1],
    };
    primary.on_message(request(5));
    let effects = primary.take_effects();
    assert!(
        matches!(
            effects.as_slice(),
            [Effect::Send { message: Message::Reply { op: 3, body, .. }, .. }] if body == b"original"
        ),
        "{effects:?}"
    );
    primary.on_message(request(4));
    assert!(
        primary.take_effects().is_empty(),
        "an older request is dropped"
    );
    primary.on_message(request(6));
    assert!(matches!(
        primary.take_effects().as_slice(),
        [Effect::Prepare { .. }]
    ));
}

/// A request number the client already used is a replay only with the same body: with another
/// body (a client that reused its number) it is refused as `Reused`, whether the first request
/// committed (the table, here as boot handed it over) or is still being prepared. Without the
/// rule (`request-checksum`), the committed case is answered with the other body's reply: the
/// client is told its new body was appended when nothing of it was.
#[test]
fn a_request_number_reused_with_another_body_is_refused_not_answered() {
    let reply_to = |safeguards: Safeguards| {
        let message = |request: u64, body: &[u8]| Message::Request {
            cluster: CLUSTER,
            group: GROUP,
            client: 0xC1,
            request,
            operation: iggy_format::operation::MESSAGES,
            body: body.to_vec(),
        };
        let committed = iggy_vsr::message::frame_checksum(&message(5, b"first").encode());
        let mut primary = primary_with_session(
            safeguards,
            iggy_vsr::Session {
                request_checksum: committed,
                ..session(5, 3, b"original")
            },
        );
        let mut statuses = Vec::new();
        let mut answer = |primary: &mut Replica| {
            let effects = primary.take_effects();
            statuses.push(match effects.as_slice() {
                [] => "nothing".to_string(),
                [
                    Effect::Send {
                        message: Message::Reply { status, op, .. },
                        ..
                    },
                ] => format!("{status:?} op {op}"),
                [Effect::Prepare { .. }] => "prepared".to_string(),
                other => format!("{other:?}"),
            });
        };
        // The committed request 5: its own body is a replay, another is refused.
        primary.on_message(message(5, b"first"));
        answer(&mut primary);
        primary.on_message(message(5, b"second"));
        answer(&mut primary);
        // Request 6 is being prepared: its body again waits for the commit, another is refused.
        primary.on_message(message(6, b"third"));
        answer(&mut primary);
        primary.on_message(message(6, b"third"));
        answer(&mut primary);
        primary.on_message(message(6, b"fourth"));
        answer(&mut primary);
        statuses
    };
    assert_eq!(
        reply_to(Safeguards::default()),
        [
            "Committed op 3",
            "Reused op 0",
            "prepared",
            "nothing",
            "Reused op 0"
        ]
    );
    assert_eq!(
        reply_to(Safeguards::without("request-checksum").unwrap()),
        [
            "Committed op 3",
            "Committed op 3",
            "prepared",
            "nothing",
            "nothing"
        ]
    );
}

/// Item 7: an incarnation of 0 is refused at boot: a `StartView` broadcast carries nonce 0, and
/// a replica of incarnation 0 took every broadcast as the answer to its probe.
#[test]
#[should_panic(expected = "an incarnation is never 0")]
fn an_incarnation_of_0_is_refused() {
    let _ = Replica::new(
        Config::default(),
        Safeguards::default(),
        Identity {
            cluster: CLUSTER,
            group: GROUP,
            replica: 0,
            replicas: 3,
        },
        Boot {
            durable: restarted(0),
            applied: 0,
            head: 0,
            head_checksum: 0,
            entries: Vec::new(),
            forgot_acknowledged: false,
            forgotten_through: None,
            incarnation: 0,
            clients: Vec::new(),
        },
    );
}

/// Item 7: a `StartView` broadcast (nonce 0) of the view a recovering replica already holds is
/// not the answer to its probe: it could describe an older log than the one this life journaled.
#[test]
fn a_broadcast_start_view_is_no_echo() {
    let log = chain(0, 0, 4, 2, 1);
    let mut cluster = Cluster::new(
        vec![log.clone(), log.clone(), log.clone()],
        restarted(2),
        4,
        Safeguards::default(),
    );
    let commit = &log[3].0;
    cluster.nodes[1].replica.on_message(Message::StartView {
        from: from(2, 2),
        op: 4,
        commit: 4,
        commit_checksum: commit.checksum(),
        nonce: 0,
        headers: Vec::new(),
    });
    assert_eq!(cluster.replica(1).status(), Status::Recovering);
    assert_eq!(cluster.replica(1).counters()["start_view_not_echoed"], 1);
}

/// Items 1 and 5 of #31: a restarted replica's commit point is never older than its log's head
/// by more than a pipeline (its prepares name their primaries' commit points), so its
/// `DoViewChange` carries every header from the commit point to the head. Without the safeguard
/// the commit point stays the superblock's (0 here) and the headers stop 128 below the head.
#[test]
fn a_restart_knows_the_commit_point_its_log_proves() {
    let log = chain(0, 0, 2_833, 0, 1);
    for on in [true, false] {
        let safeguards = Safeguards {
            durable_commit_point: on,
            ..Safeguards::default()
        };
        let cluster = Cluster::new(vec![log.clone(); 3], restarted(0), 0, safeguards);
        let r = cluster.replica(0);
        assert_eq!(
            r.commit_max(),
            if on { 2_831 } else { 0 },
            "{}",
            r.describe()
        );
    }
}

/// Item 1 of #31: a restarted replica adopting a later view whose commit point is past its log
/// cannot check its log against it, so it keeps only what executed; the entries it cuts stay in
/// memory as candidates, proved by the view's entries above them as repair brings those, and
/// journaled again without being fetched. Here the commit point it booted with is 0 (the
/// durable commit point off), so all 50 ops of its log are cut: it fetches 30, not 80.
#[test]
fn a_cut_durable_log_is_proved_from_above_not_fetched_again() {
    for keep in [true, false] {
        let safeguards = Safeguards {
            durable_commit_point: false,
            keep_durable_log: keep,
            ..Safeguards::default()
        };
        let log = chain(0, 0, 80, 0, 1);
        let leading = Durable {
            view: 1,
            log_view: 1,
            ..new_group()
        };
        let mut cluster = Cluster::with_boots(
            vec![
                (log.clone(), leading, 78),
                (log.clone(), leading, 78),
                (log[..50].to_vec(), restarted(0), 0),
            ],
            safeguards,
            Config::default(),
        );
        let mut fetched = std::collections::BTreeSet::new();
        cluster.run(400, |_, to, m| {
            if to == 2
                && let Message::Prepare { header, .. } = m
            {
                fetched.insert(header.op);
            }
            true
        });
        let node = &cluster.nodes[2];
        assert!(node.executed >= 78, "{}", node.replica.describe());
        assert_eq!(node.log.len(), 80);
        if keep {
            assert_eq!(fetched.first(), Some(&51), "{fetched:?}");
            assert!(node.replica.counters()["candidate_proved"] >= 50);
        } else {
            assert_eq!(fetched.first(), Some(&1), "{fetched:?}");
        }
    }
}

/// Many-groups seed 480: a view's primary whose commit point is one below its head (the
/// `DoViewChange`s it started the view from named no later commit) while both backups had
/// executed that op in the view before. The primary prepares the op again and waits for a
/// quorum; a backup acknowledges it though it executed it already (an acknowledgment says only
/// that it journaled through the op), or the primary waits for ever with no new request to
/// carry the acknowledgment (the seed's liveness check fired: 60 s without converging).
#[test]
fn a_backup_acknowledges_an_op_it_executed_to_a_primary_that_has_not() {
    let log = chain(0, 0, 5, 0, 1);
    let durable = |commit_max| Durable {
        view: 1,
        log_view: 1,
        commit_max,
        incarnation: 0,
        ack_bound: 0,
    };
    let boots = vec![
        (log.clone(), durable(5), 5),
        (log.clone(), durable(4), 4),
        (log, durable(5), 5),
    ];
    let mut cluster = Cluster::with_boots(boots, Safeguards::default(), Config::default());
    cluster.settle_storage();
    assert_eq!(cluster.replica(1).commit_max(), 4);
    assert_eq!(cluster.replica(0).commit_min(), 5);
    cluster.run(300, |_, _, _| true);
    assert_eq!(cluster.replica(1).leader(), Some(1));
    assert_eq!(
        cluster.replica(1).commit_max(),
        5,
        "{}",
        cluster.replica(1).describe()
    );
}

/// A backup restarts having forgotten what it acknowledged (replicated durability), rejoins its
/// view through the primary's answer to its probe and repairs through the head that answer
/// named; then the primary dies. With the rule the rejoined backup holds its acknowledgments
/// again, so the two survivors form the merge's quorum and view 1 starts holding every
/// committed op. Without it the backup stands for no quorum until it starts a later view, and
/// no later view can start without the dead primary: the kill -9 loop on processes saw write
/// gaps of up to 159 s this way (`docs/testing.md`).
#[test]
fn a_forgetful_replica_that_rejoined_its_view_counts_in_the_next_quorum() {
    for on in [true, false] {
        let safeguards = Safeguards {
            rejoin_restores_acknowledgments: on,
            ..Safeguards::default()
        };
        let mut cluster = Cluster::new(vec![Vec::new(); 3], new_group(), 0, safeguards);
        cluster.settle_storage();
        for r in 1..=10 {
            cluster.nodes[0].replica.on_message(request(r));
            cluster.collect(0);
            cluster.deliver_all();
        }
        cluster.run(10, |_, _, _| true);
        assert_eq!(cluster.replica(2).journaled_head(), 10);

        // Replica 2 restarts with ops 7 to 10 gone, rejoins view 0 and repairs them; more
        // requests commit with its acknowledgments.
        cluster.restart(2, 6, true, safeguards);
        assert_eq!(cluster.replica(2).status(), Status::Recovering);
        cluster.run(300, |_, _, _| true);
        for r in 11..=15 {
            cluster.nodes[0].replica.on_message(request(r));
            cluster.collect(0);
            cluster.deliver_all();
        }
        cluster.run(10, |_, _, _| true);
        let rejoined = cluster.replica(2);
        assert_eq!(
            (
                rejoined.status(),
                rejoined.view(),
                rejoined.journaled_head()
            ),
            (Status::Normal, 0, 15),
            "{}",
            rejoined.describe()
        );
        assert_eq!(
            rejoined
                .counters()
                .get("forgotten_acknowledgments_restored")
                .copied(),
            on.then_some(1)
        );
        assert_eq!(cluster.replica(0).commit_max(), 15);

        // The primary dies.
        cluster.run_some(1_500, 1..3, |from, to, _| from != 0 && to != 0);
        let survivor = cluster.replica(1);
        if on {
            assert_eq!(
                (survivor.status(), survivor.view(), survivor.is_primary()),
                (Status::Normal, 1, true),
                "{}",
                survivor.describe()
            );
            assert_eq!(survivor.commit_max(), 15);
        } else {
            assert_ne!(survivor.status(), Status::Normal, "{}", survivor.describe());
        }
    }
}

/// A backup told that its primary's connection closed (the process exited) starts the view
/// change at once instead of waiting out the 5 s heartbeat window; the survivors elect the next
/// primary within a few ticks. A closed connection of another backup changes nothing.
#[test]
fn a_closed_connection_of_the_primary_starts_the_view_change_at_once() {
    let log = chain(0, 0, 3, 0, 1);
    let mut cluster = Cluster::new(
        vec![log.clone(), log.clone(), log],
        new_group(),
        3,
        Safeguards::default(),
    );
    cluster.settle_storage();
    cluster.run(10, |_, _, _| true);
    cluster.nodes[1].replica.peer_connection_closed(2);
    assert_eq!(
        cluster.replica(1).status(),
        Status::Normal,
        "a backup closed: nothing"
    );
    for i in 1..3 {
        cluster.nodes[i].replica.peer_connection_closed(0);
        cluster.collect(i);
    }
    assert_eq!(
        (cluster.replica(1).status(), cluster.replica(1).view()),
        (Status::ViewChange, 1)
    );
    cluster.run_some(5, 1..3, |from, to, _| from != 0 && to != 0);
    assert_eq!(
        cluster.replica(1).leader(),
        Some(1),
        "elected within 5 ticks: {}",
        cluster.replica(1).describe()
    );
    assert_eq!(cluster.replica(2).leader(), Some(1));
    assert_eq!(
        cluster.replica(1).counters()["primary_connection_closed"],
        1
    );
}

/// Issue #45, safeguard `recovering-joins-view-change`: the primary is gone and replica 1 has
/// been changing view alone (replica 2 was down too). Replica 2 restarts, recovering; replica
/// 1's resent `StartViewChange` makes it join at once, and the view starts within a second.
/// Without the rule it ignores it and waits out its four probes (about five seconds).
#[test]
fn a_recovering_replica_joins_a_view_change_under_way() {
    for rule in [true, false] {
        let safeguards = Safeguards {
            recovering_joins_view_change: rule,
            ..Safeguards::default()
        };
        let log = chain(0, 0, 10, 0, 1);
        let mut cluster = Cluster::new(
            vec![log.clone(), log.clone(), log],
            new_group(),
            10,
            safeguards,
        );
        cluster.settle_storage();
        cluster.run(10, |_, _, _| true);
        // Replicas 0 and 2 go down; replica 1 times out and changes view alone.
        cluster.run_some(600, 1..2, |from, to, _| from == 1 && to == 1);
        assert_eq!(cluster.replica(1).status(), Status::ViewChange);
        cluster.restart(2, 10, false, safeguards);
        assert_eq!(cluster.replica(2).status(), Status::Recovering);
        cluster.run_some(100, 1..3, |from, to, _| from != 0 && to != 0);
        let (one, two) = (cluster.replica(1), cluster.replica(2));
        if rule {
            assert_eq!(one.status(), Status::Normal, "{}", one.describe());
            assert_eq!(two.status(), Status::Normal, "{}", two.describe());
            assert_eq!(one.leader(), two.leader());
            assert!(one.leader().is_some());
        } else {
            assert_eq!(two.status(), Status::Recovering, "{}", two.describe());
        }
    }
}

/// Issue #45, safeguard `abandoned-adoption-keeps-log` (found as many-groups seed 198 by the
/// read checker, and by `commit history` with it off): replica 2, back with nothing of its log,
/// adopts view 1's `StartView` (ops 1 to 3, commit point 1); once its publish is done the
/// superblock write naming log_view 1 goes out, and a `StartViewChange` for view 3 interrupts
/// the adoption. The superblock will name log_view 1, so the `DoViewChange` it sends view 3's
/// primary must offer view 1's log: ops 2 and 3 as headers. Without the rule it offered an empty
/// log under log_view 1, which a merge takes as the authority (the latest log_view) and ends
/// the log before ops that view 1's primary may have committed.
#[test]
fn an_adoption_interrupted_after_its_log_view_write_offers_the_adopted_log() {
    for rule in [true, false] {
        let safeguards = Safeguards {
            abandoned_adoption_keeps_log: rule,
            ..Safeguards::default()
        };
        let mut cluster = Cluster::new(vec![Vec::new(); 3], restarted(0), 0, safeguards);
        cluster.settle_storage();
        cluster.restart(2, 0, true, safeguards);
        let log = chain(0, 0, 3, 1, 1);
        cluster.nodes[2].replica.on_message(Message::StartView {
            from: from(1, 1),
            op: 3,
            commit: 1,
            commit_checksum: log[0].0.checksum(),
            nonce: 0,
            headers: log[1..].iter().map(|(h, _)| *h).collect(),
        });
        cluster.collect(2);
        // The publish completes; the superblock write naming log_view 1 is issued, not done.
        while !matches!(
            cluster.nodes[2].lane.front(),
            Some(Effect::WriteSuperblock { durable, .. }) if durable.log_view == 1
        ) {
            assert!(
                cluster.complete_one(2),
                "the write naming log_view 1 is never issued"
            );
        }
        assert!(
            matches!(
                cluster.nodes[2].lane.front(),
                Some(Effect::WriteSuperblock { durable, .. }) if durable.log_view == 1
            ),
            "{:?}",
            cluster.nodes[2].lane
        );
        cluster.nodes[2]
            .replica
            .on_message(Message::StartViewChange { from: from(1, 3) });
        cluster.collect(2);
        cluster.settle_storage();
        let dvc = cluster.outbox.iter().find_map(|(f, _, m)| match m {
            Message::DoViewChange {
                log_view,
                op,
                headers,
                ..
            } if *f == 2 => Some((
                *log_view,
                *op,
                headers.iter().map(|h| h.header.op).collect::<Vec<_>>(),
            )),
            _ => None,
        });
        if rule {
            assert_eq!(
                dvc,
                Some((1, 3, vec![2, 3])),
                "view 1's log under log_view 1"
            );
        } else {
            assert_eq!(
                dvc,
                Some((1, 0, vec![])),
                "the bug: an empty log under log_view 1"
            );
        }
    }
}

/// Issue #45, the acknowledgment bound (`docs/vsr.md`, "The acknowledgment bound"): a replica of
/// replicated durability crashes (its unpublished ops 7 to 10 gone) and, before it has
/// rejoined, the primary dies too. The survivor's log reaches the restarted replica's bound,
/// so everything the restarted replica may have forgotten is in the survivor's log: their two
/// logs start view 1 without the dead primary. Without a bound (a superblock that never kept
/// one) the merge waits for the primary's log, as it must.
#[test]
fn a_forgetful_replica_whose_bound_the_survivor_passed_starts_a_view_with_it() {
    for bounded in [true, false] {
        let safeguards = Safeguards::default();
        let mut cluster = Cluster::replicated(3, safeguards);
        cluster.settle_storage();
        // One request every 100 ms: the bound stays about an op ahead.
        cluster.requests_at_a_pace(1..=10);
        assert_eq!(cluster.replica(1).journaled_head(), 10);
        let bound = cluster.nodes[1].superblock.ack_bound;
        assert!((10..=12).contains(&bound), "bound {bound}");
        if !bounded {
            cluster.nodes[1].forgets = false;
        }
        cluster.restart(1, 6, true, safeguards);
        assert_eq!(cluster.replica(1).status(), Status::Recovering);
        // The primary and replica 2 commit ten more while replica 1 hears nothing.
        for r in 11..=20 {
            cluster.nodes[0].replica.on_message(request(r));
            cluster.collect(0);
            cluster.deliver_where(|from, to, _| from != 1 && to != 1);
        }
        assert_eq!(cluster.replica(0).commit_max(), 20);
        // The primary dies; replica 2 sees its connection close.
        cluster.nodes[2].replica.peer_connection_closed(0);
        cluster.collect(2);
        cluster.run_some(100, 1..3, |from, to, _| from != 0 && to != 0);
        let (one, two) = (cluster.replica(1), cluster.replica(2));
        if bounded {
            assert_eq!(
                (one.status(), one.view(), one.is_primary()),
                (Status::Normal, 1, true),
                "{}",
                one.describe()
            );
            assert_eq!(two.status(), Status::Normal, "{}", two.describe());
            assert_eq!(one.commit_max(), 20);
            assert_eq!(one.journaled_head(), 20);
        } else {
            assert_ne!(two.status(), Status::Normal, "{}", two.describe());
            assert!(
                one.counters().contains_key("merge_waits_for_a_holder"),
                "{}",
                one.describe()
            );
        }
    }
}

/// Issue #45, safeguard `acknowledgment-bound`: the primary (replicated durability) prepares
/// ops 11 to 13 in one burst, so the superblock write raising its bound past 11 is queued
/// behind their journal writes and still out when they complete. Replica 1 journals all three
/// and acknowledges; replica 2 gets only op 11. With the rule the primary counts itself only
/// through its durable bound (11), so ops 12 and 13 do not commit; without it they commit on
/// its own count and replica 1's. Then the primary crashes before its bound is written (ops 11
/// to 13 unpublished) and replica 1 is cut off: the restarted primary's bound (11) is within
/// replica 2's log, so the two start view 2 without replica 1, and the new log ends at op 11.
/// Without the rule that lost ops 12 and 13, which had committed.
#[test]
fn without_the_acknowledgment_bound_a_burst_the_primary_counted_for_itself_is_lost() {
    /// Delivers what `keep` accepts, settling every lane but the primary's (its bound's write
    /// stays out).
    fn deliver(cluster: &mut Cluster, keep: impl Fn(u8, u8, &Message) -> bool) {
        while let Some((from, to, message)) = cluster.outbox.pop_front() {
            let Destination::Replica(to) = to else {
                continue;
            };
            if !keep(from, to, &message) {
                continue;
            }
            let i = usize::from(to);
            cluster.nodes[i].replica.on_message(message);
            cluster.collect(i);
            for other in 1..3 {
                while cluster.complete_one(other) {}
            }
        }
    }
    for rule in [true, false] {
        let safeguards = Safeguards {
            acknowledgment_bound: rule,
            ..Safeguards::default()
        };
        let mut cluster = Cluster::replicated(3, safeguards);
        cluster.settle_storage();
        cluster.requests_at_a_pace(1..=10);
        assert_eq!(cluster.replica(0).commit_max(), 10);
        assert_eq!(cluster.nodes[0].superblock.ack_bound, 11);
        for r in 11..=13 {
            cluster.nodes[0].replica.on_message(request(r));
            cluster.collect(0);
        }
        // The three prepares complete; the bound's write (queued behind them) does not.
        for _ in 0..3 {
            assert!(matches!(
                cluster.nodes[0].lane.front(),
                Some(Effect::Prepare { .. })
            ));
            assert!(cluster.complete_one(0));
        }
        assert_eq!(cluster.nodes[0].superblock.ack_bound, 11);
        deliver(&mut cluster, |_, to, message| {
            to != 2 || matches!(message, Message::Prepare { header, .. } if header.op <= 11)
        });
        let acknowledged = cluster.replica(0).commit_max();
        assert_eq!(acknowledged, if rule { 11 } else { 13 });
        // The primary crashes (its unpublished ops and the bound's write gone); replica 1 is
        // cut off.
        cluster.restart(0, 10, true, safeguards);
        cluster.run(2_000, |from, to, _| from != 1 && to != 1);
        let two = cluster.replica(2);
        assert_eq!(
            (two.status(), two.view(), two.is_primary()),
            (Status::Normal, 2, true),
            "{}",
            two.describe()
        );
        if rule {
            assert!(two.head() >= acknowledged, "{}", two.describe());
        } else {
            assert_eq!(two.head(), 11, "{}", two.describe());
        }
    }
}

/// Issue #45: every replica restarts with ops 7 to 10 gone from every log (replicated
/// durability loses what no node published when every node fails) while its superblock still
/// names commit point 10 (a view change's write records the commit point before the
/// publication it covers). The view the three start ends at op 6. The new primary's next
/// request takes op 7, which no backup has acknowledged yet: it must not commit. Without the
/// clamp the stale commit point counted op 7 (and every op up to 10) as committed on the
/// primary's word alone, and the primary executed it.
#[test]
fn a_commit_point_past_every_log_commits_nothing_the_new_view_prepares() {
    let safeguards = Safeguards::default();
    let log = chain(0, 0, 6, 0, 1);
    let stale = Durable {
        view: 0,
        log_view: 0,
        commit_max: 10,
        incarnation: 1,
        ack_bound: ACK_BOUND_UNKNOWN,
    };
    let mut cluster = Cluster::new(vec![log.clone(), log.clone(), log], stale, 6, safeguards);
    cluster.settle_storage();
    // Probes go unanswered; after four the replicas change view together.
    cluster.run(800, |_, _, _| true);
    let primary = (0..3)
        .find(|&i| cluster.replica(i).is_primary())
        .unwrap_or_else(|| panic!("no view started: {}", cluster.replica(0).describe()));
    assert_eq!(cluster.replica(primary).head(), 6);
    cluster.nodes[primary].replica.on_message(request(1));
    cluster.collect(primary);
    // The prepare goes out; no acknowledgment comes back.
    cluster.deliver_where(|from, _, message| {
        !(usize::from(from) != primary && matches!(message, Message::PrepareOk { .. }))
    });
    let p = cluster.replica(primary);
    assert_eq!(p.head(), 7, "{}", p.describe());
    assert!(p.commit_max() <= 6, "{}", p.describe());
    assert_eq!(p.commit_min(), 6, "{}", p.describe());
}

/// Issue #45, safeguard `commit-stall` (a liveness rule): the primary stops hearing its backups
/// (a one-way partition: its prepares and commit broadcasts still reach them). Its backups
/// acknowledge a new op that never commits; with the rule they stop taking the stalled commit
/// point as a heartbeat, start view 1 after the heartbeat timeout and commit the op there.
/// Without it they follow the deaf primary for good: after 20 s the op is still uncommitted.
#[test]
fn backups_replace_a_primary_that_stopped_hearing_them() {
    for rule in [true, false] {
        let safeguards = Safeguards {
            commit_stall: rule,
            ..Safeguards::default()
        };
        let mut cluster = Cluster::new(vec![Vec::new(); 3], new_group(), 0, safeguards);
        cluster.settle_storage();
        cluster.nodes[0].replica.on_message(request(1));
        cluster.collect(0);
        // A commit broadcast (every 50 ticks) tells the backups op 1 committed.
        cluster.run(100, |_, _, _| true);
        assert_eq!(cluster.replica(1).commit_max(), 1);
        // Replica 0 hears nobody from now on; a second request arrives.
        cluster.nodes[0].replica.on_message(request(2));
        cluster.collect(0);
        cluster.run(2_000, |from, to, _| to != 0 || from == 0);
        let (one, two) = (cluster.replica(1), cluster.replica(2));
        assert_eq!(one.journaled_head(), 2, "{}", one.describe());
        if rule {
            assert_eq!(one.view(), 1, "{}", one.describe());
            assert_eq!(one.status(), Status::Normal, "{}", one.describe());
            assert_eq!(two.view(), 1, "{}", two.describe());
            assert_eq!(one.commit_max(), 2, "{}", one.describe());
            assert!(one.counters().get("commit_stalled").copied().unwrap_or(0) > 0);
        } else {
            assert_eq!(one.view(), 0, "{}", one.describe());
            assert_eq!(two.view(), 0, "{}", two.describe());
            assert_eq!(one.commit_max(), 1, "{}", one.describe());
        }
    }
}
