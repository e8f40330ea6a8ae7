//! A partition as one replica of its group: a primary prepares (stamps offsets and timestamps
//! once), a backup journals the same bytes after validating them, commit stores consumer offsets,
//! a cut drops an uncommitted suffix and keeps segments, indexes and the next offset consistent,
//! and reads serve up to a commit point, published or not.
#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    reason = "test code: a failed unwrap is a failed test; casts are of small test values"
)]

mod common;

use common::{GROUP, PARTITION, client_batch, dir, identity};
use iggy_format::{Header, PrepareMeta};
use iggy_io::{EnumerationConfig, ReadFile, ReadOnly, ReadStorage, SimStorage, enumerate};
use iggy_segments::offsets::{ConsumerKind, load};
use iggy_segments::{
    Config, FindingKind, Kind, Partition, PartitionError, Prepared, Request, StoredBatch, check,
    entry,
};
use iggy_superblock::{Identity, VsrState};
use iggy_wal::Mode;

fn config() -> Config {
    Config {
        replicated: true,
        ..common::config()
    }
}

fn backup_config() -> Config {
    Config {
        identity: Identity {
            replica: 1,
            ..identity()
        },
        ..config()
    }
}

fn meta(view: u32, replica: u8, now_us: u64) -> PrepareMeta {
    PrepareMeta {
        view,
        replica,
        client: 0xC1,
        request: now_us,
        now_us,
        ..PrepareMeta::default()
    }
}

/// The `i`-th request of a workload: mostly batches, every fifth a consumer offset store,
/// every seventh a no-op.
fn request(i: u64, batch: &mut Vec<u8>) -> Request<'_> {
    if i % 5 == 4 {
        Request::StoreOffset {
            kind: if i.is_multiple_of(2) {
                ConsumerKind::Consumer
            } else {
                ConsumerKind::Group
            },
            id: (i % 3) as u32,
            offset: i * 2,
        }
    } else if i % 7 == 6 {
        Request::Noop
    } else {
        *batch = client_batch(i, 1 + (i % 4) as u32);
        Request::Messages(batch)
    }
}

fn prepare(partition: &Partition<SimStorage>, i: u64, meta: &PrepareMeta) -> Prepared {
    let mut batch = Vec::new();
    partition.prepare(request(i, &mut batch), meta).unwrap()
}

/// Every `.log` file of the partition in `storage`, by name, with all its bytes.
fn segment_files(storage: &SimStorage) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = storage
        .list_dir(dir())
        .unwrap()
        .into_iter()
        .map(|e| e.name.to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".log"))
        .map(|n| {
            let bytes = storage.read_all(dir().join(&n)).unwrap();
            (n, bytes)
        })
        .collect();
    files.sort();
    files
}

/// A backup fed the primary's prepares holds the same segment files, byte for byte, through a
/// view change in which the old primary's uncommitted suffix is cut and the new primary, which
/// restamps nothing it journaled, prepares the rest.
#[test]
fn a_backup_fed_the_primarys_prepares_is_byte_identical_through_a_view_change() {
    let a_storage = SimStorage::new(1);
    let b_storage = SimStorage::new(2);
    let a = Partition::create(a_storage.clone(), dir(), config()).unwrap();
    let b = Partition::create(b_storage.clone(), dir(), backup_config()).unwrap();
    // View 0: A leads; B journals ops 1..=30.
    for i in 0..30 {
        let prepared = prepare(&a, i, &meta(0, 0, 1_000 + i));
        let journaled = b.journal(&prepared.header, &prepared.body).unwrap();
        assert_eq!(journaled, prepared.appended);
        // Again: the head journaled twice is a no-op.
        assert_eq!(
            b.journal(&prepared.header, &prepared.body).unwrap().op,
            journaled.op
        );
        assert_eq!(b.wal().head().0, journaled.op);
    }
    a.commit(20).unwrap();
    b.commit(20).unwrap();
    // A prepares two more that never reach B, then view 1 starts with B leading.
    for i in 30..32 {
        prepare(&a, i, &meta(0, 0, 1_000 + i));
    }
    a.truncate_after(30).unwrap();
    // B's clock is behind A's: its stamps never go back.
    for i in 32..70 {
        let prepared = prepare(&b, i, &meta(1, 1, 500 + i));
        a.journal(&prepared.header, &prepared.body).unwrap();
    }
    assert!(a.segments().len() > 3, "the workload rotates");
    assert_eq!(a.next_offset(), b.next_offset());
    assert_eq!(a.segments(), b.segments());
    // Both publish (the WAL buffers what it has not written out yet).
    a.publish().unwrap();
    b.publish().unwrap();
    let (a_files, b_files) = (segment_files(&a_storage), segment_files(&b_storage));
    assert_eq!(a_files.len(), a.segments().len());
    for ((a_name, a_bytes), (b_name, b_bytes)) in a_files.iter().zip(&b_files) {
        assert_eq!(a_name, b_name);
        let differ = a_bytes.iter().zip(b_bytes).position(|(x, y)| x != y);
        assert!(
            a_bytes.len() == b_bytes.len() && differ.is_none(),
            "{a_name} differs: {} and {} bytes, first at {differ:?}",
            a_bytes.len(),
            b_bytes.len()
        );
    }
    // Both read back the same verified batches.
    assert_eq!(a.read(0, u64::MAX).unwrap(), b.read(0, u64::MAX).unwrap());
}

#[test]
fn a_backup_refuses_a_prepare_it_cannot_journal_as_is() {
    let a = Partition::create(SimStorage::new(3), dir(), config()).unwrap();
    let b = Partition::create(SimStorage::new(4), dir(), backup_config()).unwrap();
    let first = prepare(&a, 0, &meta(0, 0, 100));
    b.journal(&first.header, &first.body).unwrap();
    let second = prepare(&a, 1, &meta(0, 0, 200));
    let resealed = |header: Header, body: &[u8]| Header {
        checksum_body: iggy_format::checksum(body),
        ..header
    };
    let restamped = |partition: u64, offset: u64, timestamp: u64| {
        let mut body = second.body.clone();
        iggy_format::batch::stamp(&mut body, partition, offset, timestamp).unwrap();
        let header = resealed(second.header, &body);
        (header, body)
    };
    let cases = [
        (restamped(PARTITION + 1, 1, 200), "a batch of partition"),
        (restamped(PARTITION, 7, 200), "where the next offset is"),
        (restamped(PARTITION, 1, 50), "before the last one"),
        (
            (
                Header {
                    cluster: 0xBAD,
                    ..second.header
                },
                second.body.clone(),
            ),
            "another cluster",
        ),
        (
            (
                Header {
                    operation: iggy_format::operation::METADATA,
                    ..second.header
                },
                second.body.clone(),
            ),
            "not a partition operation",
        ),
    ];
    for ((header, body), why) in cases {
        match b.journal(&header, &body) {
            Err(PartitionError::Refused { reason, op, .. }) => {
                assert_eq!(op, 2);
                assert!(reason.contains(why), "{why}: {reason}");
            }
            other => panic!("{why}: {other:?}"),
        }
    }
    // Another group's entry: the WAL refuses it.
    let foreign = Header {
        group: GROUP + 1,
        ..second.header
    };
    assert!(b.journal(&foreign, &second.body).is_err());
    assert_eq!(b.wal().head().0, 1, "nothing was journaled");
    b.journal(&second.header, &second.body).unwrap();
}

/// The cut of an uncommitted suffix spanning segments, with batches, consumer offset stores
/// and no-ops in it: the next offset, segments and indexes agree with the log (what a boot
/// derives from it), nothing of the cut is stored, and the new view's prepares follow.
#[test]
fn truncate_after_keeps_the_partition_consistent_with_its_log() {
    let storage = SimStorage::new(5);
    let partition = Partition::create(storage.clone(), dir(), config()).unwrap();
    let mut prepared = Vec::new();
    for i in 0..60 {
        prepared.push(prepare(&partition, i, &meta(0, 0, 1_000 + i)));
    }
    partition.publish().unwrap();
    partition.commit(12).unwrap();
    assert!(matches!(
        partition.truncate_after(11),
        Err(PartitionError::BelowCommit {
            op: 11,
            commit: 12,
            ..
        })
    ));
    let segments_before = partition.segments().len();
    let cut = 25;
    partition.truncate_after(cut).unwrap();
    let kept = &prepared[..cut as usize];
    assert!(
        partition.segments().len() < segments_before,
        "the cut removed segments"
    );
    let expected_next = kept
        .iter()
        .rev()
        .find(|p| p.appended.message_count > 0)
        .map_or(0, |p| {
            p.appended.base_offset + u64::from(p.appended.message_count)
        });
    assert_eq!(partition.next_offset(), expected_next);
    assert_eq!(partition.wal().head().0, cut);
    // What a boot of the same files derives: the same segments, with their indexes.
    let derived = check(&ReadOnly::new(storage.clone()), dir(), &config())
        .unwrap()
        .unwrap();
    assert_eq!(derived.segments, partition.segments());
    assert_eq!(derived.next_offset, partition.next_offset());
    assert!(
        derived
            .findings
            .iter()
            .all(|f| !matches!(f.kind, FindingKind::IndexRebuild { .. })),
        "every index agrees with its log: {:?}",
        derived.findings
    );
    // Every index file belongs to a kept segment.
    for entry in storage.list_dir(dir()).unwrap() {
        let name = entry.name.to_string_lossy().into_owned();
        if let Some(start) = iggy_segments::index::parse_file_name(&name) {
            assert!(
                partition.segments().iter().any(|s| s.start_offset == start),
                "{name} outlived its segment"
            );
        }
    }
    // The new view's prepares take the cut ops' place, at the next offset.
    let mut log: Vec<Prepared> = kept.to_vec();
    for i in 100..110 {
        log.push(prepare(&partition, i, &meta(1, 1, 2_000 + i)));
    }
    partition.commit(35).unwrap();
    partition.close().unwrap();
    let (partition, report) = Partition::open(storage.clone(), dir(), config(), Mode::Open)
        .unwrap()
        .unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(partition.wal().head().0, 35);
    // Each consumer's stored offset is its last store in the log as it is now (the cut's
    // stores never committed, so none was stored).
    let mut expected = std::collections::BTreeMap::new();
    for p in &log {
        if let Ok(Kind::ConsumerOffset { kind, id, offset }) = entry::peek(&p.header, &p.body) {
            expected.insert((kind, id), (offset, p.header.op));
        }
    }
    assert!(expected.len() >= 3, "the workload stores offsets");
    for kind in [ConsumerKind::Consumer, ConsumerKind::Group] {
        for id in 0..3 {
            let stored = load(&storage, &dir().join("offsets"), kind, id)
                .unwrap()
                .map(|o| (o.offset, o.op));
            assert_eq!(stored, expected.get(&(kind, id)).copied(), "{kind:?} {id}");
        }
    }
}

#[test]
fn commit_stores_consumer_offsets_and_boot_applies_what_a_crash_left() {
    let storage = SimStorage::new(6);
    let partition = Partition::create(storage.clone(), dir(), config()).unwrap();
    let mut batch = client_batch(1, 2);
    partition
        .prepare(Request::Messages(&mut batch), &meta(0, 0, 10))
        .unwrap();
    let store = |offset| Request::StoreOffset {
        kind: ConsumerKind::Consumer,
        id: 9,
        offset,
    };
    let first = partition.prepare(store(1), &meta(0, 0, 11)).unwrap();
    let second = partition.prepare(store(2), &meta(0, 0, 12)).unwrap();
    partition.publish().unwrap();
    let offsets_dir = dir().join("offsets");
    assert_eq!(
        load(&storage, &offsets_dir, ConsumerKind::Consumer, 9).unwrap(),
        None
    );
    partition.commit(first.appended.op).unwrap();
    let stored = load(&storage, &offsets_dir, ConsumerKind::Consumer, 9)
        .unwrap()
        .unwrap();
    assert_eq!((stored.offset, stored.op), (1, first.appended.op));
    // The cluster's commit point reaches the second store and is made durable; the process
    // dies before storing it.
    partition
        .write_vsr(VsrState {
            commit_max: second.appended.op,
            ..partition.vsr_state()
        })
        .unwrap();
    drop(partition);
    storage.crash_process();
    let checked = check(&ReadOnly::new(storage.clone()), dir(), &config())
        .unwrap()
        .unwrap();
    let applied: Vec<_> = checked
        .findings
        .iter()
        .filter(|f| matches!(f.kind, FindingKind::OffsetNotApplied { .. }))
        .collect();
    assert_eq!(applied.len(), 1, "{:?}", checked.findings);
    assert_eq!(
        applied[0].kind,
        FindingKind::OffsetNotApplied {
            kind: ConsumerKind::Consumer,
            id: 9,
            offset: 2,
            op: second.appended.op
        }
    );
    let (partition, report) = Partition::open(storage.clone(), dir(), config(), Mode::Open)
        .unwrap()
        .unwrap();
    assert_eq!(report.findings, checked.findings);
    let stored = load(&storage, &offsets_dir, ConsumerKind::Consumer, 9)
        .unwrap()
        .unwrap();
    assert_eq!((stored.offset, stored.op), (2, second.appended.op));
    assert_eq!(partition.committed(), second.appended.op);
    // Stored durably: a power loss right after the boot keeps it, and the next boot is clean.
    drop(partition);
    storage.power_loss();
    let (_, report) = Partition::open(storage.clone(), dir(), config(), Mode::Open)
        .unwrap()
        .unwrap();
    assert!(report.is_clean(), "{:?}", report.findings);
}

#[test]
fn reads_serve_up_to_the_commit_point_published_or_not() {
    let storage = SimStorage::new(7);
    let partition = Partition::create(storage, dir(), config()).unwrap();
    let mut prepared = Vec::new();
    for i in 0..12u64 {
        let mut batch = client_batch(i, 2);
        prepared.push(
            partition
                .prepare(Request::Messages(&mut batch), &meta(0, 0, 10 + i))
                .unwrap(),
        );
        if i == 3 {
            partition.publish().unwrap();
        }
    }
    let offsets = |batches: Vec<StoredBatch>| {
        batches
            .iter()
            .map(|b| b.header.base_offset)
            .collect::<Vec<_>>()
    };
    assert_eq!(offsets(partition.read(0, u64::MAX).unwrap()), [0, 2, 4, 6]);
    assert_eq!(
        offsets(partition.read_through(0, u64::MAX, 9).unwrap()),
        (0..9).map(|i| i * 2).collect::<Vec<_>>(),
        "committed through op 9, published through op 4"
    );
    let through = partition.read_through(5, u64::MAX, 12).unwrap();
    assert_eq!(through.first().unwrap().header.base_offset, 4);
    assert_eq!(through.len(), 10);
    assert_eq!(through.last().unwrap().bytes, prepared[11].body);
    // Past the head there is nothing more.
    assert_eq!(partition.read_through(0, u64::MAX, 99).unwrap().len(), 12);
}

/// A segment that holds no batch (only offset stores and no-ops) cannot be rotated (the next
/// would take its name): it grows past the segment size until a batch comes, and boots.
#[test]
fn a_segment_of_offset_stores_alone_grows_and_boots() {
    let storage = SimStorage::new(8);
    let partition = Partition::create(storage.clone(), dir(), config()).unwrap();
    let mut batch = client_batch(0, 1);
    partition
        .prepare(Request::Messages(&mut batch), &meta(0, 0, 1))
        .unwrap();
    for i in 0..100u64 {
        let store = Request::StoreOffset {
            kind: ConsumerKind::Group,
            id: 1,
            offset: i,
        };
        partition.prepare(store, &meta(0, 0, 2 + i)).unwrap();
    }
    let segments = partition.segments();
    assert!(
        segments
            .iter()
            .any(|s| s.bytes > config().segment_size_bytes)
    );
    let mut batch = client_batch(1, 1);
    partition
        .prepare(Request::Messages(&mut batch), &meta(0, 0, 200))
        .unwrap();
    partition.commit(partition.wal().head().0).unwrap();
    partition.close().unwrap();
    let (partition, report) = Partition::open(storage, dir(), config(), Mode::Open)
        .unwrap()
        .unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(partition.next_offset(), 2);
}

/// Crash-state enumeration of a cut: prepares over rotating segments (batches, consumer offset
/// stores and no-ops), a commit made durable, a cut of the uncommitted suffix, and the new
/// view's prepares. At every crash point and every allowed state, boot yields a log that is a
/// prefix of the log before the cut or (once the cut returned) after it, holding every entry
/// published before the crash that the cut kept; its next offset and segments are what its
/// entries give; `check()` decides as the open does; and every published batch reads back.
#[test]
fn every_crash_state_of_a_cut_boots_to_a_consistent_log() {
    let storage = SimStorage::recording(9);
    let partition = Partition::create(storage.clone(), dir(), config()).unwrap();
    storage.mark("created".to_string());
    let mut before = Vec::new();
    for i in 0..40 {
        before.push(prepare(&partition, i, &meta(0, 0, 1_000 + i)));
        if i % 6 == 5 {
            partition.publish().unwrap();
            storage.mark(format!("published {}", before.len()));
        }
    }
    partition.commit(10).unwrap();
    partition
        .write_vsr(VsrState {
            commit_max: 10,
            ..partition.vsr_state()
        })
        .unwrap();
    storage.mark("committed 10".to_string());
    let cut = 14u64;
    storage.mark("cutting".to_string());
    partition.truncate_after(cut).unwrap();
    storage.mark("cut".to_string());
    let mut after: Vec<Prepared> = before[..cut as usize].to_vec();
    for i in 100..112 {
        after.push(prepare(&partition, i, &meta(1, 1, 3_000 + i)));
        if i % 4 == 3 {
            partition.publish().unwrap();
            storage.mark(format!("published {}", after.len()));
        }
    }
    drop(partition);
    let trace = storage.trace();
    let check_crash = |crash: &iggy_io::CrashState<'_>| {
        let last_published = |marks: &mut dyn Iterator<Item = &String>| {
            marks
                .filter_map(|m| m.strip_prefix("published ")?.parse::<u64>().ok())
                .last()
                .unwrap_or(0)
        };
        let cut_started = crash.marks.iter().any(|m| m == "cutting");
        let cut_done = crash.marks.iter().any(|m| m == "cut");
        let published = if cut_done {
            last_published(&mut crash.marks.iter().skip_while(|m| *m != "cut")).max(cut)
        } else if cut_started {
            cut
        } else {
            last_published(&mut crash.marks.iter())
        };
        let checked = check(&ReadOnly::new(crash.storage.clone()), dir(), &config())
            .map_err(|e| format!("check refused: {e}"))?;
        let Some((partition, report)) =
            Partition::open(crash.storage.clone(), dir(), config(), Mode::Open)
                .map_err(|e| format!("open refused: {e}"))?
        else {
            return if crash.marks.is_empty() {
                Ok(())
            } else {
                Err("the partition vanished".into())
            };
        };
        if checked.as_ref() != Some(&report) {
            return Err("check() and open disagree".into());
        }
        let head = partition.wal().head().0;
        if head < published {
            return Err(format!(
                "head {head} lost published entries (up to {published})"
            ));
        }
        let entries = if head == 0 {
            Vec::new()
        } else {
            partition.wal().read(1, head).map_err(|e| e.to_string())?
        };
        let is_prefix = |log: &[Prepared]| {
            entries.len() <= log.len()
                && entries
                    .iter()
                    .zip(log)
                    .all(|(e, p)| e.header == p.header && e.body == p.body)
        };
        let log = if cut_done || (cut_started && !is_prefix(&before)) {
            &after
        } else {
            &before
        };
        if !is_prefix(log) {
            return Err(format!(
                "the log (head {head}) is not a prefix of the expected one"
            ));
        }
        let expected_next = log[..entries.len()]
            .iter()
            .rev()
            .find(|p| p.appended.message_count > 0)
            .map_or(0, |p| {
                p.appended.base_offset + u64::from(p.appended.message_count)
            });
        if partition.next_offset() != expected_next {
            return Err(format!(
                "next offset {} where the log gives {expected_next}",
                partition.next_offset()
            ));
        }
        let read = partition.read(0, u64::MAX).map_err(|e| e.to_string())?;
        let batches: Vec<&Prepared> = log[..entries.len()]
            .iter()
            .filter(|p| p.appended.message_count > 0)
            .collect();
        if read.len() != batches.len() || read.iter().zip(&batches).any(|(r, p)| r.bytes != p.body)
        {
            return Err("the published batches do not read back".into());
        }
        Ok(())
    };
    let mut points = 0;
    for dir_order in [iggy_io::DirOrder::Ordered, iggy_io::DirOrder::Unordered] {
        let config = EnumerationConfig {
            dir_order,
            start_at_mark: Some("committed 10".to_string()),
            ..EnumerationConfig::default()
        };
        points = enumerate(&trace, &config, check_crash)
            .unwrap_or_else(|failure| panic!("{dir_order:?}: {failure}"))
            .points;
    }
    assert!(points > 30, "{points} crash points");
}

/// An installed partition's log end is its offset frontier: a cut that would bring the next
/// offset below it (batches another replica's state transfer vouched for) is refused before
/// anything changes, even where the commit point would allow it.
#[test]
fn a_cut_below_the_offset_frontier_is_refused_and_changes_nothing() {
    let leader_storage = SimStorage::new(10);
    let leader = Partition::create(leader_storage.clone(), dir(), config()).unwrap();
    for i in 0..12u64 {
        let mut batch = client_batch(i, 2);
        leader
            .prepare(Request::Messages(&mut batch), &meta(0, 0, 10 + i))
            .unwrap();
    }
    leader.publish().unwrap();
    let segments = common::segment_bytes(&leader_storage, &leader);
    let storage = SimStorage::new(11);
    // A new replica's empty partition, replaced by the transfer.
    drop(Partition::create(storage.clone(), dir(), config()).unwrap());
    let mut install = iggy_segments::Install::new(storage.clone(), dir(), config());
    for (start, bytes) in &segments {
        install.receive_segment(*start, bytes).unwrap();
    }
    install
        .receive_state(iggy_segments::StateArtifact {
            next_offset: leader.next_offset(),
            offsets: Vec::new(),
            dedup: Vec::new(),
        })
        .unwrap();
    install.commit(VsrState::default()).unwrap();
    let (partition, _) = Partition::open(storage.clone(), dir(), config(), Mode::Open)
        .unwrap()
        .unwrap();
    assert_eq!(partition.vsr_state().offset_frontier, 24);
    assert_eq!(partition.committed(), 0);
    let before = segment_files(&storage);
    match partition.truncate_after(9) {
        Err(PartitionError::BehindOffsetFrontier {
            log_end: 18,
            offset_frontier: 24,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(partition.wal().head().0, 12);
    assert_eq!(partition.next_offset(), 24);
    assert_eq!(
        segment_files(&storage),
        before,
        "the refusal changed a file"
    );
}

/// A state transfer's segment of another group is refused as it lands.
#[test]
fn an_install_refuses_another_groups_segment() {
    let other = Config {
        group: GROUP + 1,
        ..config()
    };
    let storage = SimStorage::new(12);
    let leader = Partition::create(storage.clone(), dir(), other).unwrap();
    let mut batch = client_batch(0, 2);
    leader
        .prepare(Request::Messages(&mut batch), &meta(0, 0, 1))
        .unwrap();
    leader.publish().unwrap();
    let segments = common::segment_bytes(&storage, &leader);
    let mut install = iggy_segments::Install::new(SimStorage::new(13), dir(), config());
    match install.receive_segment(segments[0].0, &segments[0].1) {
        Err(PartitionError::Corrupt {
            reason, offset: 0, ..
        }) => {
            assert!(reason.contains("belongs to group"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

/// Retention on a replica deletes committed segments only, and makes the commit point durable
/// through them before they go: a crash right after leaves a log whose first op is at most one
/// past the durable commit point, so the next view may cut the log back to that commit point.
/// Before, the superblock kept an older commit point: the boot's commit point fell below the
/// first retained op and the view's cut was refused as a storage failure (simulator seed 20965:
/// both restarted replicas halted at every boot).
#[test]
fn retention_makes_the_commit_point_durable_through_what_it_deletes() {
    let storage = SimStorage::new(12);
    let partition = Partition::create(storage.clone(), dir(), config()).unwrap();
    let mut last = 0;
    for i in 0..40u64 {
        let mut batch = client_batch(i, 4);
        last = partition
            .prepare(Request::Messages(&mut batch), &meta(0, 0, 10 + i))
            .unwrap()
            .appended
            .op;
    }
    partition.publish().unwrap();
    // The cluster committed everything; the superblock still names commit point 0 (it is
    // written at view changes and by the publication, not at every commit).
    partition.commit(last).unwrap();
    assert_eq!(partition.vsr_state().commit_max, 0);
    let deleted = partition.apply_retention(u64::MAX, Some(1), None).unwrap();
    assert!(deleted >= 2, "{deleted}");
    let first_retained = partition.wal().files()[0].first_op;
    assert!(first_retained > 1);
    assert!(
        partition.vsr_state().commit_max + 1 >= first_retained,
        "commit point {} durable, first retained op {first_retained}",
        partition.vsr_state().commit_max
    );
    drop(partition);
    storage.crash_process();
    let (partition, _) = Partition::open(storage.clone(), dir(), config(), Mode::Open)
        .unwrap()
        .unwrap();
    let commit = partition.vsr_state().commit_max;
    assert_eq!(commit + 1, first_retained);
    // A view that cuts everything after the commit point: allowed, the first file stays empty.
    partition.truncate_after(commit).unwrap();
    assert_eq!(partition.wal().head().0, commit);
}

/// Issue #46: a consumer's offset file is made (holding a placeholder, which reads as no offset)
/// when its first store is journaled, so on a disk with no room left the journal write of a new
/// consumer's store is refused, nothing appended, and every store of a consumer with a file
/// journals and commits in place, needing no new block. Without `prepare_file` the commit of
/// the first store is what fails, after the op is in the log.
#[test]
fn on_a_full_disk_a_new_consumers_store_is_refused_at_its_journal_and_others_commit() {
    let storage = SimStorage::new(8);
    let partition = Partition::create(storage.clone(), dir(), config()).unwrap();
    let store = |id, offset| Request::StoreOffset {
        kind: ConsumerKind::Consumer,
        id,
        offset,
    };
    let first = partition.prepare(store(1, 10), &meta(0, 0, 10)).unwrap();
    let offsets_dir = dir().join("offsets");
    // Journaled, not committed: reads as no offset.
    assert_eq!(
        load(&storage, &offsets_dir, ConsumerKind::Consumer, 1).unwrap(),
        None
    );
    partition.commit(first.appended.op).unwrap();

    storage.set_space_limit(Some(storage.used_bytes()));
    let head = partition.wal().head().0;
    let refused = partition
        .prepare(store(2, 20), &meta(0, 0, 11))
        .expect_err("no room for a new consumer's file");
    assert!(
        storage
            .exists(offsets_dir.join("consumer.0000000001"))
            .unwrap()
    );
    assert!(refused.is_exhaustion(), "{refused}");
    assert_eq!(partition.wal().head().0, head, "nothing appended");
    assert!(
        !storage
            .exists(offsets_dir.join("consumer.0000000002"))
            .unwrap()
    );
    for (n, offset) in [11u64, 12, 13].into_iter().enumerate() {
        let stored = partition
            .prepare(store(1, offset), &meta(0, 0, 12 + n as u64))
            .unwrap();
        partition.commit(stored.appended.op).unwrap();
        let read = load(&storage, &offsets_dir, ConsumerKind::Consumer, 1)
            .unwrap()
            .unwrap();
        assert_eq!((read.offset, read.op), (offset, stored.appended.op));
    }
    storage.set_space_limit(None);
    let second = partition.prepare(store(2, 20), &meta(0, 0, 20)).unwrap();
    partition.commit(second.appended.op).unwrap();
    assert_eq!(
        load(&storage, &offsets_dir, ConsumerKind::Consumer, 2)
            .unwrap()
            .map(|o| o.offset),
        Some(20)
    );
}

/// What a partition knows of its consumers' offset files (the slot holding each file's current
/// record, kept from the store's journal and each commit) follows every store exactly: after
/// each commit a read through the partition answers what the file on disk holds, the file's
/// slots alternate and its sequence counts the stores, and between a store's journal and its
/// commit the read still answers the store before. A store made directly on the files
/// (`Partition::offsets`) is seen by the next read and continued by the next commit. A stale
/// slot would make a commit write over the current record (the sequence would stop counting);
/// a store made around the partition and not forgotten would be read as the old offset.
#[test]
fn what_a_partition_knows_of_offset_files_follows_every_store() {
    use iggy_segments::offsets::{self, ConsumerOffset};
    let storage = SimStorage::new(8);
    let partition = Partition::create(storage.clone(), dir(), config()).unwrap();
    let offsets_dir = dir().join("offsets");
    let consumers = [(ConsumerKind::Consumer, 1u32), (ConsumerKind::Group, 2u32)];
    let mut stores = [0u64; 2];
    let on_disk = |kind: ConsumerKind, id: u32| -> (usize, ConsumerOffset) {
        let path = offsets_dir.join(offsets::file_name(kind, id));
        let file = storage.open_read(&path).unwrap();
        let mut bytes = [0u8; offsets::FILE_SIZE];
        file.read_exact_at(0, &mut bytes).unwrap();
        offsets::current(&offsets::decode_slots(&path, &bytes)).expect("a slot verifies")
    };
    for i in 1..=12u64 {
        let which = usize::try_from(i % 2).unwrap();
        let (kind, id) = consumers[which];
        let before = partition.stored_offset(kind, id).unwrap();
        let prepared = partition
            .prepare(
                Request::StoreOffset {
                    kind,
                    id,
                    offset: i * 10,
                },
                &meta(0, 0, 100 + i),
            )
            .unwrap();
        assert_eq!(
            partition.stored_offset(kind, id).unwrap(),
            before,
            "store {i} journaled, not committed"
        );
        partition.commit(prepared.appended.op).unwrap();
        stores[which] += 1;
        let (slot, record) = on_disk(kind, id);
        // The first store fills the slot beside the placeholder; then they alternate.
        assert_eq!(
            slot,
            usize::try_from(stores[which] % 2).unwrap(),
            "store {i}"
        );
        assert_eq!(
            (record.offset, record.sequence, record.op),
            (i * 10, stores[which], prepared.appended.op),
            "store {i}"
        );
        assert_eq!(partition.stored_offset(kind, id).unwrap(), Some(record));
        assert_eq!(
            load(&storage, &offsets_dir, kind, id).unwrap(),
            Some(record)
        );
    }
    // Around the partition, then through it again.
    let (kind, id) = consumers[0];
    let direct = partition.offsets().store(kind, id, 7).unwrap();
    assert_eq!(partition.stored_offset(kind, id).unwrap(), Some(direct));
    let prepared = partition
        .prepare(
            Request::StoreOffset {
                kind,
                id,
                offset: 500,
            },
            &meta(0, 0, 200),
        )
        .unwrap();
    partition.commit(prepared.appended.op).unwrap();
    let (_, record) = on_disk(kind, id);
    assert_eq!((record.offset, record.sequence), (500, direct.sequence + 1));
    assert_eq!(partition.stored_offset(kind, id).unwrap(), Some(record));
}

/// A commit writes a consumer's offset into its file without a sync (issue #48): its log entry
/// keeps it through a power loss that takes the file's write (boot stores it again, synced), and
/// retention settles the files before it deletes the segments holding those entries. Without
/// the settle, a power loss right after retention takes both the write and the entry, and the
/// consumer's offset goes back to the one before.
#[test]
fn an_offset_store_a_commit_did_not_sync_survives_a_power_loss_by_its_log_entry_and_retention() {
    let storage = SimStorage::new(14);
    let partition = Partition::create(storage.clone(), dir(), config()).unwrap();
    let kind = ConsumerKind::Group;
    let offsets_dir = dir().join("offsets");
    let store = |offset| Request::StoreOffset {
        kind,
        id: 4,
        offset,
    };
    // A first store, settled by a clean close and reopen.
    let first = partition.prepare(store(3), &meta(0, 0, 1)).unwrap();
    partition.commit(first.appended.op).unwrap();
    partition.close().unwrap();
    let (partition, _) = Partition::open(storage.clone(), dir(), config(), Mode::Open)
        .unwrap()
        .unwrap();
    // The second store in the first segment, then enough batches to seal a few segments.
    let second = partition.prepare(store(17), &meta(0, 0, 2)).unwrap();
    let mut last = second.appended.op;
    for i in 0..40u64 {
        let mut batch = client_batch(i, 4);
        last = partition
            .prepare(Request::Messages(&mut batch), &meta(0, 0, 10 + i))
            .unwrap()
            .appended
            .op;
    }
    partition.commit(last).unwrap();
    partition.publish().unwrap();
    partition
        .write_vsr(VsrState {
            commit_max: last,
            ..partition.vsr_state()
        })
        .unwrap();
    let stored = |storage: &SimStorage| {
        load(storage, &offsets_dir, kind, 4)
            .unwrap()
            .map(|o| (o.offset, o.op))
    };
    assert_eq!(stored(&storage), Some((17, second.appended.op)));

    // A power loss that takes every unsynced write: the log entry brings the store back.
    let lost = storage.fork();
    lost.power_loss_durable_only();
    assert_eq!(
        stored(&lost),
        Some((3, first.appended.op)),
        "the write was lost"
    );
    let (booted, report) = Partition::open(lost.clone(), dir(), config(), Mode::Open)
        .unwrap()
        .unwrap();
    assert!(
        report
            .findings
            .iter()
            .any(|f| matches!(f.kind, FindingKind::OffsetNotApplied { offset: 17, .. })),
        "{:?}",
        report.findings
    );
    assert_eq!(stored(&lost), Some((17, second.appended.op)));
    assert_eq!(
        booted.stored_offset(kind, 4).unwrap().map(|o| o.offset),
        Some(17)
    );

    // Retention deletes the segment holding the entry: it settles the file first. A sync that
    // fails (and drops the file's write-back, as Linux may) fails the pass before anything is
    // deleted; the next pass writes the record again before its sync.
    let files = partition.wal().files().len();
    storage
        .arm(
            offsets_dir.join(iggy_segments::offsets::file_name(kind, 4)),
            iggy_io::Fault::SyncError,
        )
        .unwrap();
    partition
        .apply_retention(u64::MAX, Some(1), None)
        .unwrap_err();
    assert_eq!(partition.wal().files().len(), files, "nothing deleted");
    let deleted = partition.apply_retention(u64::MAX, Some(1), None).unwrap();
    assert!(deleted >= 2, "{deleted}");
    assert!(partition.wal().files()[0].first_op > second.appended.op);
    drop(partition);
    storage.power_loss_durable_only();
    let (partition, _) = Partition::open(storage.clone(), dir(), config(), Mode::Open)
        .unwrap()
        .unwrap();
    assert_eq!(stored(&storage), Some((17, second.appended.op)));
    assert_eq!(
        partition.stored_offset(kind, 4).unwrap().map(|o| o.offset),
        Some(17)
    );
}
