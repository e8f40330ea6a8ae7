//! A partition on the WAL: appends with rotation, reads by offset, lookups by timestamp,
//! retention, index rebuilds, and each boot refusal naming its file and offset.
#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    reason = "test code: a failed unwrap is a failed test; casts are of small test values"
)]

mod common;

use std::path::PathBuf;

use common::{GROUP, PARTITION, client_batch, config, dir, read_all};
use iggy_io::{OpenMode, ReadOnly, ReadStorage, SimStorage, Storage, WriteFile};
use iggy_segments::{
    Config, FindingKind, Partition, PartitionError, check, index, offsets::ConsumerKind,
};
use iggy_superblock::{Superblock, VsrState};
use iggy_wal::{Mode, Naming, Wal, WalError};

/// A partition with 40 published batches over several segments; returns the storage and the
/// stamped batches.
fn populated() -> (SimStorage, Vec<Vec<u8>>) {
    let storage = SimStorage::new(5);
    let partition = Partition::create(storage.clone(), dir(), config()).unwrap();
    let mut stored = Vec::new();
    for i in 0..40u64 {
        let mut batch = client_batch(i, 1 + (i % 4) as u32);
        partition.append(&mut batch, 1_000 + i * 10).unwrap();
        stored.push(batch);
        if i % 5 == 4 {
            partition.publish().unwrap();
        }
    }
    partition.close().unwrap();
    (storage, stored)
}

fn open(storage: &SimStorage) -> (Partition<SimStorage>, iggy_segments::Report) {
    Partition::open(storage.clone(), dir(), config(), Mode::Open)
        .unwrap()
        .unwrap()
}

fn log_files(storage: &SimStorage) -> Vec<PathBuf> {
    storage
        .list_dir(dir())
        .unwrap()
        .into_iter()
        .filter(|e| Naming::ByKey.parse(&e.name).is_some())
        .map(|e| dir().join(e.name))
        .collect()
}

#[test]
fn appends_rotate_and_read_back_by_offset_across_reopen() {
    let (storage, stored) = populated();
    let (partition, report) = open(&storage);
    assert!(report.is_clean(), "{report:?}");
    let segments = partition.segments();
    assert!(segments.len() >= 4, "{segments:?}");
    // Each segment is named by its first offset, and offsets continue across segments.
    for pair in segments.windows(2) {
        assert_eq!(pair[0].next_offset, pair[1].start_offset);
    }
    for segment in &segments {
        let name = segment.path.file_name().unwrap();
        assert_eq!(Naming::ByKey.parse(name), Some(segment.start_offset));
    }
    let all = read_all(&partition);
    assert_eq!(all.len(), stored.len());
    for (read, written) in all.iter().zip(&stored) {
        assert_eq!(&read.bytes, written);
    }
    let next = partition.next_offset();
    assert_eq!(next, all.last().unwrap().next_offset());
    // Every offset reads from the batch that holds it.
    for offset in 0..next {
        let batches = partition.read(offset, 1).unwrap();
        let first = &batches[0];
        assert!(first.header.base_offset <= offset && offset < first.next_offset());
    }
    assert!(partition.read(next, 1 << 20).unwrap().is_empty());
    // A byte cap returns whole batches, at least one.
    let capped = partition.read(0, 1).unwrap();
    assert_eq!(capped.len(), 1);
}

#[test]
fn find_by_timestamp_returns_the_first_message_at_or_after_it() {
    let (storage, _) = populated();
    let (partition, _) = open(&storage);
    let all = read_all(&partition);
    let mut messages = Vec::new();
    for stored in &all {
        let batch = iggy_format::batch::decode(&stored.bytes).unwrap();
        for m in batch.messages() {
            messages.push((
                stored.header.base_offset + u64::from(m.offset_delta),
                stored.header.base_timestamp + u64::from(m.timestamp_delta),
            ));
        }
    }
    for probe in [0u64, 1_000, 1_005, 1_137, 1_200, 1_389, 1_390, 5_000] {
        let expected = messages.iter().find(|(_, t)| *t >= probe).map(|(o, _)| *o);
        assert_eq!(
            partition.find_by_timestamp(probe).unwrap(),
            expected,
            "{probe}"
        );
    }
}

#[test]
fn a_missing_or_rotten_index_is_rebuilt_and_lookups_agree() {
    let (storage, _) = populated();
    let (partition, _) = open(&storage);
    let before: Vec<_> = (0..partition.next_offset())
        .map(|o| partition.read(o, 1).unwrap()[0].op)
        .collect();
    let segments = partition.segments();
    drop(partition);
    let first = dir().join(index::file_name(segments[0].start_offset));
    let second = dir().join(index::file_name(segments[1].start_offset));
    storage.unlink(&first).unwrap();
    storage.rot(&second, 70, 0x10).unwrap();
    let checked = check(&ReadOnly::new(storage.clone()), dir(), &config())
        .unwrap()
        .unwrap();
    let (partition, report) = open(&storage);
    assert_eq!(checked.findings, report.findings);
    let rebuilt: Vec<&PathBuf> = report
        .findings
        .iter()
        .filter(|f| matches!(f.kind, FindingKind::IndexRebuild { .. }))
        .map(|f| &f.file)
        .collect();
    assert_eq!(rebuilt, vec![&first, &second]);
    let after: Vec<_> = (0..partition.next_offset())
        .map(|o| partition.read(o, 1).unwrap()[0].op)
        .collect();
    assert_eq!(before, after);
    drop(partition);
    let (_, report) = open(&storage);
    assert!(report.is_clean(), "{report:?}");
}

#[test]
fn a_flipped_bit_in_a_sealed_segment_refuses_with_file_and_offset() {
    let (storage, stored) = populated();
    let (partition, _) = open(&storage);
    let segment = partition.segments()[1].clone();
    drop(partition);
    // The second batch of the second segment: its WAL position from the first batch's size.
    let second_batch = 256
        + stored
            .iter()
            .find(|b| {
                iggy_format::batch::decode(b).unwrap().header.base_offset == segment.start_offset
            })
            .unwrap()
            .len() as u64
        + 256;
    // Past the batch header (which boot's segment scan reads and checks): in a message.
    let victim = second_batch + iggy_format::batch::BATCH_HEADER_SIZE as u64 + 20;
    storage.rot(&segment.path, victim, 0x04).unwrap();
    // The segment is sealed (the frontier passed it): boot takes its entries from the seal,
    // and the read that meets the damaged batch refuses it, naming file and offset.
    let (partition, _) = open(&storage);
    match partition.read(segment.start_offset, u64::MAX).unwrap_err() {
        PartitionError::Corrupt { file, offset, .. } => {
            assert_eq!(file, segment.path);
            assert_eq!(offset, second_batch - 256);
        }
        other => panic!("{other:?}"),
    }
    drop(partition);
    // A deep check (`iggy-fsck --deep`), and a boot without the seal, read every body: they
    // refuse the partition.
    let deep = Config {
        verify: iggy_wal::boot::Verify::Everything,
        ..config()
    };
    assert!(check(&ReadOnly::new(storage.clone()), dir(), &deep).is_err());
    storage
        .unlink(iggy_wal::seal::path_for(&segment.path))
        .unwrap();
    let error = Partition::open(storage.clone(), dir(), config(), Mode::Open).unwrap_err();
    match error {
        PartitionError::Wal(boxed) => match *boxed {
            WalError::Corrupt { file, offset, .. } => {
                assert_eq!(file, segment.path);
                assert_eq!(offset, second_batch - 256);
            }
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
    assert!(check(&ReadOnly::new(storage.clone()), dir(), &config()).is_err());
}

#[test]
fn a_torn_tail_past_the_frontier_is_discarded_and_reported() {
    let storage = SimStorage::new(6);
    let partition = Partition::create(storage.clone(), dir(), config()).unwrap();
    for i in 0..3u64 {
        partition.append(&mut client_batch(i, 2), 10 + i).unwrap();
    }
    partition.publish().unwrap();
    let published_next = partition.next_offset();
    for i in 3..5u64 {
        partition.append(&mut client_batch(i, 2), 10 + i).unwrap();
    }
    // Written (not published), then power is lost with the unsynced tail torn or kept.
    partition.wal().read(1, 1).unwrap();
    drop(partition);
    storage.crash_process();
    let (partition, report) = open(&storage);
    assert_eq!(partition.next_offset(), published_next);
    assert!(report.wal.discarded_bytes > 0, "{report:?}");
    assert_eq!(read_all(&partition).len(), 3);
}

/// Issue #47's `DeleteSegments`: a floor deletes the settled segments wholly below it and no
/// other; a floor inside a segment keeps that segment (its messages at and past the floor are
/// still read).
#[test]
fn a_floor_deletes_the_whole_segments_below_it() {
    let (storage, _) = populated();
    let (partition, _) = open(&storage);
    let segments = partition.segments();
    assert!(segments.len() >= 3, "{segments:?}");
    // Inside the second segment: only the first goes.
    let floor = segments[1].start_offset + 1;
    assert_eq!(
        partition
            .apply_retention_below(0, None, None, floor)
            .unwrap(),
        1
    );
    assert_eq!(partition.first_offset(), segments[1].start_offset);
    // At the third's start: the second goes too. Again: nothing more.
    let floor = segments[2].start_offset;
    assert_eq!(
        partition
            .apply_retention_below(0, None, None, floor)
            .unwrap(),
        1
    );
    assert_eq!(
        partition
            .apply_retention_below(0, None, None, floor)
            .unwrap(),
        0
    );
    assert_eq!(partition.first_offset(), floor);
    // A floor past everything keeps the head segment.
    partition
        .apply_retention_below(0, None, None, u64::MAX)
        .unwrap();
    assert_eq!(partition.segments().len(), 1);
}

#[test]
fn retention_deletes_whole_old_segments_and_the_next_offset_never_goes_back() {
    let (storage, _) = populated();
    let (partition, _) = open(&storage);
    let segments = partition.segments();
    let next = partition.next_offset();
    let total: u64 = segments.iter().map(|s| s.bytes).sum();
    // By size: down to half.
    let deleted = partition.apply_retention(0, None, Some(total / 2)).unwrap();
    assert!(deleted >= 1);
    let left = partition.segments();
    assert_eq!(left[0].start_offset, segments[deleted].start_offset);
    assert!(left.iter().map(|s| s.bytes).sum::<u64>() <= total / 2 || left.len() == 1);
    for gone in &segments[..deleted] {
        assert!(!storage.exists(&gone.path).unwrap());
        assert!(
            !storage
                .exists(dir().join(index::file_name(gone.start_offset)))
                .unwrap()
        );
    }
    // By age: everything sealed is old; the head segment stays.
    partition.apply_retention(u64::MAX, Some(1), None).unwrap();
    assert_eq!(partition.segments().len(), 1);
    assert_eq!(partition.next_offset(), next);
    drop(partition);
    let (partition, report) = open(&storage);
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(partition.next_offset(), next);
    assert_eq!(partition.first_offset(), left.last().unwrap().start_offset);
}

#[test]
fn damaged_consumer_offsets_refuse_never_read_as_zero() {
    let (storage, _) = populated();
    let (partition, _) = open(&storage);
    partition
        .offsets()
        .store(ConsumerKind::Consumer, 7, 12)
        .unwrap();
    drop(partition);
    let (_, report) = open(&storage);
    assert_eq!(report.offsets[0].offset, 12);
    storage
        .rot(dir().join("offsets").join("consumer.0000000007"), 33, 0x01)
        .unwrap();
    let error = Partition::open(storage.clone(), dir(), config(), Mode::Open).unwrap_err();
    assert!(matches!(error, PartitionError::Offsets(_)), "{error:?}");
}

/// A partition directory written through a raw keyed WAL, to build what the partition itself
/// never writes.
fn raw_partition(bodies: &[(u64, Vec<u8>)]) -> SimStorage {
    let storage = SimStorage::new(8);
    Superblock::create(
        storage.clone(),
        dir(),
        common::identity(),
        VsrState::default(),
    )
    .unwrap();
    let wal_config = iggy_wal::Config {
        file_size_bytes: 8192,
        naming: Naming::ByKey,
        ..iggy_wal::Config::new(GROUP)
    };
    let wal = Wal::create_keyed(storage.clone(), dir(), wal_config, 1, 0, bodies[0].0).unwrap();
    for (key, body) in bodies {
        let (head, parent) = wal.head();
        let header = iggy_format::Header {
            operation: iggy_format::operation::MESSAGES,
            ..iggy_wal::next_header(GROUP, head + 1, parent, 0, 0, body)
        };
        wal.append_keyed(&header, body, *key).unwrap();
    }
    wal.publish().unwrap();
    storage
}

fn stamped(partition: u64, base: u64, count: u32) -> Vec<u8> {
    let mut batch = client_batch(base, count);
    iggy_format::batch::stamp(&mut batch, partition, base, 0).unwrap();
    batch
}

fn refusal(storage: &SimStorage) -> PartitionError {
    let checked = check(&ReadOnly::new(storage.clone()), dir(), &config()).unwrap_err();
    let opened = Partition::open(storage.clone(), dir(), config(), Mode::Open).unwrap_err();
    assert_eq!(checked.to_string(), opened.to_string());
    opened
}

#[test]
fn a_batch_of_another_partition_refuses() {
    let storage = raw_partition(&[(0, stamped(PARTITION, 0, 2)), (0, stamped(99, 2, 2))]);
    match refusal(&storage) {
        PartitionError::PartitionMismatch {
            found: 99, offset, ..
        } => assert!(offset > 0),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_segment_named_for_another_offset_refuses() {
    let storage = raw_partition(&[(5, stamped(PARTITION, 0, 2))]);
    assert!(matches!(
        refusal(&storage),
        PartitionError::NameMismatch {
            key: 5,
            found: 0,
            ..
        }
    ));
}

#[test]
fn a_gap_in_offsets_refuses() {
    let storage = raw_partition(&[
        (0, stamped(PARTITION, 0, 2)),
        (0, stamped(PARTITION, 10, 2)),
    ]);
    assert!(matches!(
        refusal(&storage),
        PartitionError::OffsetGap {
            expected: 2,
            found: 10,
            ..
        }
    ));
}

#[test]
fn a_malformed_batch_refuses() {
    let storage = raw_partition(&[(0, stamped(PARTITION, 0, 2)), (0, vec![7u8; 300])]);
    assert!(matches!(
        refusal(&storage),
        PartitionError::BadBatch { offset, .. } if offset > 0
    ));
}

#[test]
fn an_empty_segment_before_the_last_refuses() {
    let (storage, _) = populated();
    let (partition, _) = open(&storage);
    let segment = partition.segments()[1].clone();
    drop(partition);
    let file = storage.open(&segment.path, OpenMode::Existing).unwrap();
    file.write_zeros(0, segment.bytes).unwrap();
    file.sync_data().unwrap();
    match refusal(&storage) {
        PartitionError::Wal(boxed) => match *boxed {
            WalError::Corrupt {
                file, offset: 0, ..
            } => assert_eq!(file, segment.path),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
}

#[test]
fn orphan_indexes_and_staging_leftovers_are_swept() {
    let (storage, _) = populated();
    let orphan = dir().join(index::file_name(999_999));
    let staging = dir().join("00000000000000999999.log.staging");
    for path in [&orphan, &staging] {
        let file = storage.open(path, OpenMode::CreateNew).unwrap();
        file.write_all_at(0, b"left over").unwrap();
    }
    let (_, report) = open(&storage);
    let kinds: Vec<(&PathBuf, &FindingKind)> =
        report.findings.iter().map(|f| (&f.file, &f.kind)).collect();
    assert!(
        kinds.contains(&(&orphan, &FindingKind::OrphanIndex)),
        "{kinds:?}"
    );
    assert!(
        kinds.contains(&(&staging, &FindingKind::StagingLeftover)),
        "{kinds:?}"
    );
    assert!(!storage.exists(&orphan).unwrap());
    assert!(!storage.exists(&staging).unwrap());
    let _ = log_files(&storage);
}

#[test]
fn a_log_that_ends_below_the_offset_frontier_refuses() {
    let (storage, _) = populated();
    let (partition, _) = open(&storage);
    let next = partition.next_offset();
    drop(partition);
    let (mut superblock, _) = Superblock::open(
        storage.clone(),
        dir(),
        &common::identity(),
        iggy_superblock::RepairPolicy::Repair,
    )
    .unwrap()
    .unwrap();
    let state = VsrState {
        offset_frontier: next + 5,
        ..*superblock.state()
    };
    superblock.write(state).unwrap();
    drop(superblock);
    match refusal(&storage) {
        PartitionError::BehindOffsetFrontier {
            log_end,
            offset_frontier,
            ..
        } => assert_eq!((log_end, offset_frontier), (next, next + 5)),
        other => panic!("{other:?}"),
    }
}

/// Found by the partition soak (seed 182 of 200, after segment summaries changed its path): a
/// sealed segment's file may hold a valid entry past its last one, an entry of the next op that
/// was discarded (unpublished at a crash) and whose zeroing a later crash undid, while the op
/// itself went on into the next segment with other bytes. Boot trusts exactly the segment's
/// entries; a read must stop at their end too, or it serves the discarded batch beside the
/// real one (fails without the bound in `read_until`).
#[test]
fn a_read_stops_at_a_sealed_segments_last_entry_whatever_lies_past_it() {
    let storage = SimStorage::new(12);
    let partition = Partition::create(storage.clone(), dir(), config()).unwrap();
    // Fill the first segment to a little under its 8 KiB.
    let mut i = 0u64;
    while partition.segments()[0].bytes < 6000 {
        let mut batch = client_batch(i, 2);
        partition.append(&mut batch, 1_000 + i).unwrap();
        i += 1;
    }
    partition.publish().unwrap();
    let first = partition.segments()[0].clone();
    // Another history: a small batch that fits in the first segment, as the discarded op did.
    let other = storage.fork();
    drop(partition);
    let (alternative, _) = Partition::open(other.clone(), dir(), config(), Mode::Open)
        .unwrap()
        .unwrap();
    let mut small = client_batch(900, 1);
    alternative.append(&mut small, 5_000).unwrap();
    alternative.publish().unwrap();
    let grown = alternative.segments()[0].bytes;
    assert!(
        grown > first.bytes,
        "the small batch went into the first segment"
    );
    let stale = other.read_all(&first.path).unwrap()[first.bytes as usize..grown as usize].to_vec();
    drop(alternative);
    // This history: the same op with a batch too large for the first segment starts a second.
    let (partition, _) = open(&storage);
    let mut large = client_batch(901, 40);
    partition.append(&mut large, 5_000).unwrap();
    partition.publish().unwrap();
    assert_eq!(partition.segments().len(), 2);
    let expected = read_all(&partition);
    drop(partition);
    // The discarded entry reappears past the first segment's end.
    storage
        .open(&first.path, OpenMode::Existing)
        .unwrap()
        .write_all_at(first.bytes, &stale)
        .unwrap();
    let (partition, _) = open(&storage);
    assert_eq!(read_all(&partition), expected);
}

/// Reads racing retention: one thread appends, publishes and deletes the oldest segments (the
/// WAL recycles their files for new ones) while another reads from the partition's first
/// offset over and over. A read whose segment retention retired under it is read again from
/// the new first offset, so no read fails and every batch read is one that was appended, in
/// offset order. Without the retry (`read_until`), reads here failed on retired files.
#[test]
fn reads_racing_retention_never_fail_and_serve_only_appended_batches() {
    let root = tempfile::tempdir().unwrap();
    let storage = iggy_io::OsStorage::open(root.path()).unwrap();
    let partition = std::sync::Arc::new(Partition::create(storage, dir(), config()).unwrap());
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let partition = std::sync::Arc::clone(&partition);
        let stop = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut reads = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || reads < 100 {
                let batches = partition
                    .read(0, 1 << 20)
                    .unwrap_or_else(|e| panic!("read {reads} failed: {e}"));
                for pair in batches.windows(2) {
                    assert_eq!(pair[1].header.base_offset, pair[0].next_offset());
                }
                for batch in &batches {
                    let seed = batch.header.base_offset;
                    assert!(batch.header.message_count >= 1, "batch at {seed}");
                }
                reads += 1;
            }
            reads
        })
    };
    let mut deleted = 0;
    for i in 0..3_000u64 {
        let mut batch = client_batch(i, 2);
        partition.append(&mut batch, 1_000 + i).unwrap();
        if i % 3 == 2 {
            partition.publish().unwrap();
            deleted += partition.apply_retention(0, None, Some(24_000)).unwrap();
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let reads = reader.join().expect("the reader never failed");
    assert!(deleted > 100, "retention deleted {deleted} segments");
    eprintln!("{reads} reads while retention deleted {deleted} segments");
}
