//! The metadata group as a replicated state machine: a primary prepares, a backup journals the
//! same bytes, commit executes in order and returns replies, a cut never reaches the commit
//! point, and boot replays exactly the committed prefix.
#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    reason = "test code: a failed unwrap is a failed test; casts are of small test values"
)]

use std::path::Path;

use iggy_format::{Header, PrepareMeta};
use iggy_io::{DirOrder, EnumerationConfig, ReadOnly, ReadStorage, SimStorage, enumerate};
use iggy_metadata::codec::{self, Reply};
use iggy_metadata::group::{self, GROUP_ID, GroupError, MetadataGroup};
use iggy_metadata::{Applied, Op, State};
use iggy_superblock::{Identity, VsrState};
use iggy_wal::Config;

const PRIMARY: Identity = Identity {
    cluster: 0x3C,
    replica: 0,
    replica_count: 3,
};
const BACKUP: Identity = Identity {
    replica: 1,
    ..PRIMARY
};
const CLIENT: u128 = 0xC11E_0001;

fn dir() -> &'static Path {
    Path::new("metadata")
}

fn wal_config() -> Config {
    Config {
        file_size_bytes: 2048,
        ..Config::new(GROUP_ID)
    }
}

fn stream(i: u64) -> Op {
    Op::CreateStream {
        name: format!("stream-{i}"),
    }
}

/// The meta of request `request` of the test client, in view `view`.
fn meta(view: u32, request: u64) -> PrepareMeta {
    PrepareMeta {
        view,
        client: CLIENT,
        request,
        request_checksum: u128::from(request) << 64 | 0xABC,
        now_us: 1_000 + request,
        ..PrepareMeta::default()
    }
}

fn create(storage: &SimStorage, identity: Identity) -> MetadataGroup<SimStorage> {
    MetadataGroup::create(storage.clone(), dir(), identity, wal_config()).unwrap()
}

fn reopen(storage: &SimStorage, identity: &Identity) -> MetadataGroup<SimStorage> {
    MetadataGroup::open(storage.clone(), dir(), identity, wal_config())
        .unwrap()
        .unwrap()
}

/// Prepares the registration of the test client and `count` streams (requests 1..=count).
fn prepare_all(group: &mut MetadataGroup<SimStorage>, count: u64) -> Vec<(Header, Vec<u8>)> {
    let register = Op::RegisterClient {
        client: CLIENT,
        session: 1,
    };
    let mut prepared = vec![group.prepare(&register, &meta(0, 0)).unwrap().unwrap()];
    for i in 1..=count {
        prepared.push(group.prepare(&stream(i), &meta(0, i)).unwrap().unwrap());
    }
    prepared
}

/// The state of executing `prepared` in order, from scratch.
fn executed(prepared: &[(Header, Vec<u8>)]) -> State {
    let mut state = State::new(PRIMARY.replica_count);
    for (header, body) in prepared {
        let op = codec::decode_op(body).unwrap();
        state.execute_at(
            (header.view, header.timestamp_ns / 1_000),
            header.op,
            (header.client, header.request, header.request_checksum),
            &op,
        );
    }
    state
}

fn commit_durably(group: &mut MetadataGroup<SimStorage>, op: u64) {
    group.commit(op).unwrap();
    let current = group.vsr_state();
    group
        .write_vsr(VsrState {
            commit_max: op,
            ..current
        })
        .unwrap();
}

#[test]
fn boot_applies_exactly_the_ops_up_to_commit_max() {
    let storage = SimStorage::new(1);
    let mut group = create(&storage, PRIMARY);
    let prepared = prepare_all(&mut group, 9);
    assert_eq!(group.applied_op(), 0, "journaling applies nothing");
    commit_durably(&mut group, 6);
    assert_eq!(*group.state(), executed(&prepared[..6]));
    drop(group);
    let mut booted = reopen(&storage, &PRIMARY);
    assert_eq!(booted.applied_op(), 6);
    assert_eq!(
        booted.head_op(),
        10,
        "the uncommitted suffix stays journaled"
    );
    assert_eq!(*booted.state(), executed(&prepared[..6]));
    let checked = group::check(&ReadOnly::new(storage.clone()), dir(), &PRIMARY)
        .unwrap()
        .unwrap();
    assert_eq!((checked.commit_op, checked.head_op), (6, 10));
    assert_eq!(checked.state, *booted.state());
    // The suffix commits later, as the cluster decides.
    let committed = booted.commit(10).unwrap();
    assert_eq!(
        committed.iter().map(|c| c.op).collect::<Vec<_>>(),
        [7, 8, 9, 10]
    );
    assert_eq!(*booted.state(), executed(&prepared));
    // A single replica commits what it journals: a boot replays it all.
    let single = Identity {
        replica_count: 1,
        ..PRIMARY
    };
    let storage = SimStorage::new(2);
    let mut group = create(&storage, single);
    prepare_all(&mut group, 3);
    drop(group);
    assert_eq!(reopen(&storage, &single).applied_op(), 4);
}

#[test]
fn a_replayed_request_gets_its_original_reply_bytes() {
    let storage = SimStorage::new(3);
    let mut group = create(&storage, PRIMARY);
    let prepared = prepare_all(&mut group, 2);
    let committed = group.commit(3).unwrap();
    let original = committed.last().unwrap().clone();
    assert_eq!(original.request, 2);
    assert_eq!(
        codec::decode_reply(&original.reply).unwrap(),
        Reply::Applied(Applied::Stream(2))
    );
    // The same request prepared again (a client retrying across a view change): the reply it
    // got the first time, and nothing applied twice.
    let retry = group.prepare(&stream(2), &meta(1, 2)).unwrap().unwrap();
    let again = group.commit(retry.0.op).unwrap();
    assert_eq!(again[0].reply, original.reply);
    assert_eq!(again[0].result, None);
    assert_eq!(group.state().streams.len(), 2);
    // Across a boot that replays the log, and one that restores a snapshot.
    commit_durably(&mut group, retry.0.op);
    drop(group);
    for checkpoint in [false, true] {
        let mut booted = reopen(&storage, &PRIMARY);
        if checkpoint {
            booted.checkpoint().unwrap();
            drop(booted);
            booted = reopen(&storage, &PRIMARY);
            assert_eq!(booted.superblock().state().checkpoint_op, 4);
        }
        assert_eq!(booted.state().clients[&CLIENT].reply, original.reply);
        let retry = booted.prepare(&stream(2), &meta(2, 2)).unwrap().unwrap();
        assert_eq!(booted.commit(retry.0.op).unwrap()[0].reply, original.reply);
        assert_eq!(booted.state(), &executed(&prepared));
        // The commit of this retry is not made durable: the next boot leaves it journaled and
        // unapplied, and commits it as a duplicate too.
    }
}

#[test]
fn a_backup_journaling_the_primarys_prepares_is_byte_identical() {
    let primary_storage = SimStorage::new(4);
    let backup_storage = SimStorage::new(5);
    let mut primary = create(&primary_storage, PRIMARY);
    let mut backup = create(&backup_storage, BACKUP);
    let prepared = prepare_all(&mut primary, 20);
    for (header, body) in &prepared {
        backup.journal(header, body).unwrap();
        // Again: the head journaled twice is a no-op.
        backup.journal(header, body).unwrap();
    }
    let files = |storage: &SimStorage| {
        let wal = dir().join(group::WAL_DIR);
        let mut names: Vec<_> = storage
            .list_dir(&wal)
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .filter(|n| n.to_string_lossy().ends_with(".wal"))
            .collect();
        names.sort();
        names
            .into_iter()
            .map(|n| (n.clone(), storage.read_all(wal.join(n)).unwrap()))
            .collect::<Vec<_>>()
    };
    assert!(files(&primary_storage).len() > 1, "several WAL files");
    assert_eq!(files(&primary_storage), files(&backup_storage));
    primary.commit(21).unwrap();
    backup.commit(21).unwrap();
    assert_eq!(primary.state(), backup.state());
}

#[test]
fn journal_refuses_what_is_not_this_groups_next_prepare() {
    let storage = SimStorage::new(6);
    let mut primary = create(&storage, PRIMARY);
    let prepared = prepare_all(&mut primary, 2);
    let backup_storage = SimStorage::new(7);
    let mut backup = create(&backup_storage, BACKUP);
    let (header, body) = &prepared[0];
    let refusals = [
        (
            Header {
                cluster: 0x99,
                ..*header
            },
            body.clone(),
            "another cluster",
        ),
        (
            Header {
                operation: iggy_format::operation::MESSAGES,
                ..*header
            },
            body.clone(),
            "not a metadata operation",
        ),
        (
            Header {
                checksum_body: iggy_format::checksum(&[0xEE]),
                size: 257,
                ..*header
            },
            vec![0xEE],
            "does not decode",
        ),
        (prepared[1].0, prepared[1].1.clone(), "parent"),
    ];
    for (header, body, why) in refusals {
        let error = backup.journal(&header, &body).unwrap_err();
        assert!(
            error.to_string().contains(why) || matches!(error, GroupError::Wal(_)),
            "{why}: {error}"
        );
        assert_eq!(backup.head_op(), 0, "{why}: nothing journaled");
    }
}

#[test]
fn truncate_after_cuts_the_uncommitted_suffix_and_never_the_committed() {
    let storage = SimStorage::new(8);
    let mut group = create(&storage, PRIMARY);
    let prepared = prepare_all(&mut group, 9);
    commit_durably(&mut group, 5);
    assert!(matches!(
        group.truncate_after(4),
        Err(GroupError::BelowCommit {
            op: 4,
            commit: 5,
            ..
        })
    ));
    group.truncate_after(7).unwrap();
    assert_eq!(group.head_op(), 7);
    // The new view's prepares take the cut ops' place.
    let replacement = group.prepare(&stream(100), &meta(1, 8)).unwrap().unwrap();
    assert_eq!(replacement.0.op, 8);
    assert_eq!(replacement.0.parent, prepared[6].0.checksum());
    drop(group);
    let mut booted = reopen(&storage, &PRIMARY);
    assert_eq!(booted.head_op(), 8, "the cut is durable");
    booted.commit(8).unwrap();
    let mut expected = prepared[..7].to_vec();
    expected.push(replacement);
    assert_eq!(*booted.state(), executed(&expected));
}

/// Journal, commit (made durable in the superblock), a cut of an uncommitted suffix and the
/// new view's prepares in its place, and checkpoints: at every crash point and every allowed
/// torn or lost state, boot restores exactly the state of executing the committed prefix
/// (never less than the durable commit point), the journal is a prefix of the log as it was
/// (before the cut, or after it once the cut returned) holding every prepare acknowledged
/// as journaled, and `check()` decides as the open does.
#[test]
fn every_crash_state_of_journal_commit_truncate_and_checkpoint_boots_consistently() {
    let storage = SimStorage::recording(11);
    let mut group = create(&storage, PRIMARY);
    storage.mark("created".to_string());
    let mut before_cut = prepare_all(&mut group, 5);
    storage.mark("journaled 6".to_string());
    commit_durably(&mut group, 3);
    storage.mark("committed 3".to_string());
    for i in 6..=12 {
        before_cut.push(group.prepare(&stream(i), &meta(0, i)).unwrap().unwrap());
        storage.mark(format!("journaled {}", before_cut.len()));
        if i == 9 {
            commit_durably(&mut group, 8);
            storage.mark("committed 8".to_string());
            group.checkpoint().unwrap();
            storage.mark("checkpointed 8".to_string());
        }
    }
    // A view change: the new primary's log agrees up to op 10.
    storage.mark("cutting".to_string());
    group.truncate_after(10).unwrap();
    storage.mark("cut".to_string());
    let mut after_cut = before_cut[..10].to_vec();
    for i in 0..3u64 {
        after_cut.push(
            group
                .prepare(&stream(200 + i), &meta(1, 13 + i))
                .unwrap()
                .unwrap(),
        );
        storage.mark(format!("journaled {}", after_cut.len()));
    }
    commit_durably(&mut group, 12);
    storage.mark("committed 12".to_string());
    let trace = storage.trace();
    let check_crash = |crash: &iggy_io::CrashState<'_>| {
        let last = |prefix: &str| {
            crash
                .marks
                .iter()
                .rev()
                .find_map(|m| m.strip_prefix(prefix)?.parse::<u64>().ok())
        };
        let checked = group::check(&ReadOnly::new(crash.storage.clone()), dir(), &PRIMARY)
            .map_err(|e| format!("check refused: {e}"))?;
        let Some(opened) =
            MetadataGroup::open(crash.storage.clone(), dir(), &PRIMARY, wal_config())
                .map_err(|e| format!("refused: {e}"))?
        else {
            return if crash.marks.is_empty() {
                Ok(())
            } else {
                Err("a created group vanished".into())
            };
        };
        let checked = checked.ok_or("check found no group")?;
        let durable_commit = last("committed ").unwrap_or(0);
        let commit = opened.applied_op();
        if commit < durable_commit {
            return Err(format!(
                "restored to op {commit}, below the durable commit {durable_commit}"
            ));
        }
        if checked.commit_op != commit || checked.state != *opened.state() {
            return Err(format!(
                "check restores to {}, open to {commit}",
                checked.commit_op
            ));
        }
        let cut_done = crash.marks.iter().any(|m| m == "cut");
        let cut_started = crash.marks.iter().any(|m| m == "cutting");
        let head = opened.head_op();
        let journaled = last("journaled ").unwrap_or(0);
        let entries = if head == 0 {
            Vec::new()
        } else {
            let first = opened.wal().first_op();
            opened.wal().read(first, head).map_err(|e| e.to_string())?
        };
        let matches = |log: &[(Header, Vec<u8>)]| {
            head as usize <= log.len()
                && entries
                    .iter()
                    .all(|e| log[e.header.op as usize - 1].0 == e.header)
        };
        let log = if cut_done || (cut_started && matches(&after_cut) && !matches(&before_cut)) {
            &after_cut
        } else {
            &before_cut
        };
        if !matches(log) {
            return Err(format!(
                "the journal (head {head}) is not a prefix of the log (cut started {cut_started})"
            ));
        }
        let acknowledged = if cut_started {
            // The cut keeps 10 (what lay past it may go before it returns); after it, what the
            // new view journaled.
            let after = crash.marks.iter().skip_while(|m| *m != "cut");
            after
                .filter_map(|m| m.strip_prefix("journaled ")?.parse::<u64>().ok())
                .last()
                .unwrap_or(10)
        } else {
            journaled
        };
        if head < acknowledged {
            return Err(format!(
                "head {head} lost journaled prepares (acknowledged {acknowledged})"
            ));
        }
        if *opened.state() != executed(&log[..commit as usize]) {
            return Err(format!(
                "the state at op {commit} is not the committed prefix"
            ));
        }
        Ok(())
    };
    let mut points = 0;
    for dir_order in [DirOrder::Ordered, DirOrder::Unordered] {
        let config = EnumerationConfig {
            dir_order,
            ..EnumerationConfig::default()
        };
        points = enumerate(&trace, &config, check_crash)
            .unwrap_or_else(|failure| panic!("{dir_order:?}: {failure}"))
            .points;
    }
    assert!(points > 100, "{points} crash points");
}

/// The journal holds `JOURNAL_OPS` past the checkpoint: a prepare past it is refused (the
/// primary must checkpoint first), and nothing is journaled.
#[test]
fn a_prepare_past_the_journal_is_refused() {
    let storage = SimStorage::new(12);
    let mut group = create(&storage, PRIMARY);
    for i in 1..=group::JOURNAL_OPS {
        group.prepare(&stream(i), &meta(0, i)).unwrap().unwrap();
    }
    match group.prepare(&stream(0), &meta(0, 0)) {
        Err(GroupError::JournalFull {
            op,
            checkpoint_op: 0,
            ..
        }) => assert_eq!(op, group::JOURNAL_OPS + 1),
        other => panic!("{other:?}"),
    }
    assert_eq!(group.head_op(), group::JOURNAL_OPS);
    // Committing takes a checkpoint on the way, and the journal has room again.
    group.commit(group::JOURNAL_OPS).unwrap();
    assert!(group.superblock().state().checkpoint_op > 0);
    group.prepare(&stream(0), &meta(0, 0)).unwrap().unwrap();
}

/// A replica's superblock records the commit point at view changes and checkpoints, not at every
/// commit: boot restores through the one its head prepare names (every op up to it committed).
/// A boot that restores past the checkpoint interval that way takes the checkpoint it skipped
/// once the journal needs the room, rather than refusing the next prepare as a full journal.
#[test]
fn boot_restores_through_the_commit_point_the_head_prepare_names() {
    let storage = SimStorage::new(11);
    let mut group = create(&storage, PRIMARY);
    let mut prepared = Vec::new();
    let mut prepare = |group: &mut MetadataGroup<SimStorage>, op: &Op, request: u64| {
        let (head, _) = group.wal().head();
        let meta = PrepareMeta {
            commit: head.saturating_sub(2),
            ..meta(0, request)
        };
        let entry = group.prepare(op, &meta).unwrap().unwrap();
        prepared.push(entry);
    };
    let register = Op::RegisterClient {
        client: CLIENT,
        session: 1,
    };
    prepare(&mut group, &register, 0);
    for i in 1..1_000 {
        prepare(&mut group, &stream(i), i);
    }
    assert_eq!((group.applied_op(), group.head_op()), (0, 1_000));
    drop(group);
    // The head (op 1,000) names commit point 997: boot applies through it.
    let mut booted = reopen(&storage, &PRIMARY);
    assert_eq!(booted.applied_op(), 997);
    assert_eq!(*booted.state(), executed(&prepared[..997]));
    let checked = group::check(&ReadOnly::new(storage.clone()), dir(), &PRIMARY)
        .unwrap()
        .unwrap();
    assert_eq!(
        (checked.commit_op, checked.state),
        (997, booted.state().clone())
    );
    // Past checkpoint 0 plus the journal's 1,024 ops: the checkpoint is taken first.
    for i in 1_000..1_040 {
        let meta = PrepareMeta {
            commit: 997,
            ..meta(0, i)
        };
        booted.prepare(&stream(i), &meta).unwrap().unwrap();
    }
    assert_eq!(booted.head_op(), 1_040);
    assert_eq!(booted.vsr_state().checkpoint_op, 997);
}
