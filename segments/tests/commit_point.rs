//! Boot's commit point and client sessions: a partition whose superblock never recorded a
//! commit point (a replica's superblock is written at view changes) boots at the commit point
//! its prepares prove, applies the consumer offset stores up to it, and hands on each client's
//! newest committed request, whether a segment is read or taken from its index's summary.
#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    reason = "test code: a failed unwrap is a failed test; casts are of small test values"
)]

mod common;

use std::collections::BTreeMap;

use common::{client_batch, dir};
use iggy_format::PrepareMeta;
use iggy_io::{ReadOnly, SimStorage};
use iggy_segments::offsets::{ConsumerKind, load};
use iggy_segments::{Config, FindingKind, Partition, Request, Session, check};
use iggy_wal::Mode;

fn config() -> Config {
    Config {
        replicated: true,
        ..common::config()
    }
}

/// How far the commit point lags the head in this workload (a primary's pipeline).
const LAG: u64 = 12;

/// Prepares `ops` entries as a primary whose commit point trails its head by `lag`: four
/// clients' requests (batches, and every fourth a consumer's offset store), nothing ever
/// committed on this replica (no `commit` call, no superblock write). Returns each entry's
/// session.
fn workload(partition: &Partition<SimStorage>, ops: u64, lag: u64) -> Vec<Session> {
    let mut sessions = Vec::new();
    for i in 0..ops {
        let op = i + 1;
        let client = 0xC0 + u128::from(i % 4);
        let meta = PrepareMeta {
            view: 0,
            commit: op.saturating_sub(lag + 1),
            client,
            request: 100 + i,
            now_us: 1_000 + i,
            ..PrepareMeta::default()
        };
        let mut batch = client_batch(i, 1 + (i % 3) as u32);
        let request = if i % 4 == 3 {
            Request::StoreOffset {
                kind: ConsumerKind::Consumer,
                id: 7,
                offset: i,
            }
        } else {
            Request::Messages(&mut batch)
        };
        let prepared = partition.prepare(request, &meta).unwrap();
        assert_eq!(prepared.header.op, op);
        let kind = iggy_segments::entry::peek(&prepared.header, &prepared.body).unwrap();
        sessions.push(Session::of(&prepared.header, &kind).unwrap());
    }
    partition.publish().unwrap();
    sessions
}

/// What boot must hand on: each client's newest session at or below `commit`.
fn expected(sessions: &[Session], commit: u64) -> Vec<Session> {
    let mut newest: BTreeMap<u128, Session> = BTreeMap::new();
    for s in sessions.iter().filter(|s| s.op <= commit) {
        newest.insert(s.client, *s);
    }
    newest.into_values().collect()
}

#[test]
fn boot_raises_the_commit_point_to_what_the_prepares_prove() {
    let storage = SimStorage::new(7);
    let partition = Partition::create(storage.clone(), dir(), config()).unwrap();
    let sessions = workload(&partition, 300, LAG);
    assert!(
        partition.segments().len() > 5,
        "the workload rotates through sealed segments"
    );
    assert_eq!(partition.vsr_state().commit_max, 0);
    assert_eq!(partition.committed(), 0);
    drop(partition);
    storage.crash_process();

    // The head prepare (op 300) names commit 287: boot's commit point, whatever the superblock.
    let commit = 300 - LAG - 1;
    let checked = check(&ReadOnly::new(storage.clone()), dir(), &config())
        .unwrap()
        .unwrap();
    assert_eq!(checked.commit, commit);
    assert_eq!(checked.sessions, expected(&sessions, commit));
    // Every store at or below it is applied at boot; the consumer's newest such store wins.
    let applied: Vec<(u64, u64)> = checked
        .findings
        .iter()
        .filter_map(|f| match f.kind {
            FindingKind::OffsetNotApplied { offset, op, .. } => Some((offset, op)),
            _ => None,
        })
        .collect();
    let newest_store = (1..=commit).rev().find(|op| (op - 1) % 4 == 3).unwrap();
    assert_eq!(applied, vec![(newest_store - 1, newest_store)]);
    assert_eq!(
        checked.uncommitted_offsets.len() as u64,
        (commit + 1..=300).filter(|op| (op - 1) % 4 == 3).count() as u64
    );

    let (opened, report) = Partition::open(storage.clone(), dir(), config(), Mode::Open)
        .unwrap()
        .unwrap();
    assert_eq!(report.commit, commit);
    assert_eq!(opened.committed(), commit);
    assert_eq!(opened.take_sessions(), expected(&sessions, commit));
    assert!(opened.take_sessions().is_empty(), "handed over once");
    let stored = load(
        opened.wal().storage(),
        &dir().join(iggy_segments::offsets::DIR_NAME),
        ConsumerKind::Consumer,
        7,
    )
    .unwrap()
    .unwrap();
    assert_eq!((stored.offset, stored.op), (newest_store - 1, newest_store));
    drop(opened);

    // Booted again (the indexes now written): sealed segments wholly below the commit point are
    // taken from their summaries, the one that straddles it is read, and the sessions agree.
    storage.crash_process();
    let again = check(&ReadOnly::new(storage.clone()), dir(), &config())
        .unwrap()
        .unwrap();
    assert_eq!(again.commit, commit);
    assert_eq!(again.sessions, expected(&sessions, commit));
}

/// A summary whose newest session of a client is past the commit point cannot tell whether the
/// client's earlier request in that segment committed: boot reads the segment. Here the commit
/// point lags the head by more than a segment, so sealed segments straddle it.
#[test]
fn a_summary_with_a_session_past_the_commit_point_is_not_taken() {
    let storage = SimStorage::new(8);
    let partition = Partition::create(storage.clone(), dir(), config()).unwrap();
    let lag = 40;
    let sessions = workload(&partition, 160, lag);
    let commit = 160 - lag - 1;
    let segments = partition.segments();
    drop(partition);
    storage.crash_process();
    // A sealed segment holding, for one client, a request at or below the commit point and a
    // newer one past it: its summary keeps only the newer.
    let straddling = segments[..segments.len() - 1].iter().any(|segment| {
        let ops = segment.first_op..segment.first_op + segment.entries;
        (0xC0..0xC4).any(|client| {
            let mine: Vec<u64> = sessions
                .iter()
                .filter(|s| s.client == client && ops.contains(&s.op))
                .map(|s| s.op)
                .collect();
            mine.iter().any(|op| *op <= commit) && mine.iter().any(|op| *op > commit)
        })
    });
    assert!(
        straddling,
        "the workload must put the commit point inside a sealed segment"
    );
    let checked = check(&ReadOnly::new(storage.clone()), dir(), &config())
        .unwrap()
        .unwrap();
    assert_eq!(checked.commit, commit);
    assert_eq!(checked.sessions, expected(&sessions, commit));
}
