//! Segment summaries (index version 2): boot takes a sealed segment from its index file's
//! summary instead of reading it, when the WAL took the file from its seal and the summary names
//! the same last entry; it agrees with a deep boot that reads every segment, and any summary
//! that does not say what the seal says is set aside and the segment read.
#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    reason = "test code: a failed unwrap is a failed test; casts are of small test values"
)]

mod common;

use common::{client_batch, dir};
use iggy_format::PrepareMeta;
use iggy_io::{OpenMode, ReadOnly, SimStorage, Storage, WriteFile};
use iggy_segments::index::{self, Summary};
use iggy_segments::offsets::ConsumerKind;
use iggy_segments::{Config, FindingKind, Partition, Report, Request, check};
use iggy_superblock::VsrState;

fn config() -> Config {
    Config {
        replicated: true,
        ..common::config()
    }
}

fn deep() -> Config {
    Config {
        verify: iggy_wal::boot::Verify::Everything,
        ..config()
    }
}

/// A replicated partition of batches with a consumer offset store every fifth op, all
/// published and committed, closed: several sealed segments, some with stores.
fn build() -> SimStorage {
    let storage = SimStorage::new(11);
    let partition = Partition::create(storage.clone(), dir(), config()).unwrap();
    for i in 0..60u64 {
        let mut batch = client_batch(i, 1 + (i % 3) as u32);
        let request = if i % 5 == 4 {
            Request::StoreOffset {
                kind: if i % 2 == 0 {
                    ConsumerKind::Consumer
                } else {
                    ConsumerKind::Group
                },
                id: (i % 3) as u32,
                offset: i,
            }
        } else {
            Request::Messages(&mut batch)
        };
        let meta = PrepareMeta {
            now_us: 1_000 + i,
            ..PrepareMeta::default()
        };
        partition.prepare(request, &meta).unwrap();
        if i % 4 == 3 {
            partition.publish().unwrap();
        }
    }
    partition.publish().unwrap();
    let head = partition.wal().head().0;
    partition.commit(head).unwrap();
    partition
        .write_vsr(VsrState {
            commit_max: head,
            ..partition.vsr_state()
        })
        .unwrap();
    partition.close().unwrap();
    storage
}

fn checked(storage: &SimStorage, config: &Config) -> Report {
    check(&ReadOnly::new(storage.clone()), dir(), config)
        .unwrap()
        .unwrap()
}

/// What a boot derives about the partition, for comparing a boot from summaries with a deep one.
fn derived(report: &Report) -> String {
    format!(
        "{:?}\nnext {} offsets {:?} uncommitted {:?}",
        report.segments, report.next_offset, report.offsets, report.uncommitted_offsets
    )
}

fn index_path(start_offset: u64) -> std::path::PathBuf {
    dir().join(index::file_name(start_offset))
}

fn read_index(storage: &SimStorage, start_offset: u64) -> index::IndexFile {
    let bytes = storage.read_all(index_path(start_offset)).unwrap();
    index::decode(&bytes, start_offset).unwrap()
}

fn write_index(storage: &SimStorage, start_offset: u64, interval: u64, file: &index::IndexFile) {
    let summary = file.summary.clone().unwrap();
    let bytes = index::encode(start_offset, interval, &file.entries, &summary);
    let out = storage
        .open(index_path(start_offset), OpenMode::Existing)
        .unwrap();
    out.set_len(0).unwrap();
    out.write_all_at(0, &bytes).unwrap();
}

#[test]
fn sealed_segments_boot_from_their_summaries_as_a_deep_boot_reads_them() {
    let storage = build();
    let sealed = checked(&storage, &config());
    let everything = checked(&storage, &deep());
    assert!(sealed.is_clean(), "{sealed:?}");
    assert!(everything.is_clean(), "{everything:?}");
    assert_eq!(derived(&sealed), derived(&everything));
    assert!(sealed.segments.len() >= 4, "{:?}", sealed.segments);
    assert!(
        sealed.segments[..sealed.segments.len() - 1]
            .iter()
            .any(|s| !s.stores.is_empty()),
        "a sealed segment holds consumer offset stores"
    );
    // That the summary was what boot used: damage in the partition id of a sealed segment's
    // first batch, which a read of the segment refuses (`PartitionMismatch`), leaves the boot
    // from summaries unchanged; a deep check, or a boot without the summary, refuses.
    let victim = sealed.segments[1].clone();
    let header_at = victim.index[0].position + iggy_format::constants::HEADER_SIZE as u64;
    storage.rot(&victim.path, header_at, 0x01).unwrap();
    let after = checked(&storage, &config());
    assert_eq!(derived(&after), derived(&sealed));
    assert!(check(&ReadOnly::new(storage.clone()), dir(), &deep()).is_err());
    storage.unlink(index_path(victim.start_offset)).unwrap();
    assert!(check(&ReadOnly::new(storage.clone()), dir(), &config()).is_err());
}

/// Each check of a summary against its seal (or against the partition) matters: a summary that
/// names another last entry, first op, entry count or end, another index interval, an index
/// entry outside the segment, or a store past the commit point is not taken. The segment is read
/// instead, the index rebuilt, and boot derives what a deep boot does.
#[test]
fn a_summary_that_does_not_say_what_the_seal_says_is_set_aside() {
    let storage = build();
    let expected = derived(&checked(&storage, &deep()));
    let report = checked(&storage, &config());
    let victim = report
        .segments
        .iter()
        .find(|s| !s.stores.is_empty() && s.path != report.segments.last().unwrap().path)
        .unwrap()
        .clone();
    let original = read_index(&storage, victim.start_offset);
    let interval = original.interval_bytes;
    type Mutation = Box<dyn Fn(&mut index::IndexFile) -> u64>;
    let field = |f: fn(&mut Summary)| -> Mutation {
        Box::new(move |file: &mut index::IndexFile| {
            f(file.summary.as_mut().unwrap());
            interval
        })
    };
    let mutations: Vec<(&str, Mutation)> = vec![
        ("last checksum", field(|s| s.last_checksum ^= 1)),
        ("first op", field(|s| s.first_op += 1)),
        ("entries", field(|s| s.entries += 1)),
        ("bytes", field(|s| s.bytes -= 1)),
        (
            "store past the commit point",
            field(|s| s.stores[0].op = u64::MAX),
        ),
        (
            "timestamps out of order",
            field(|s| s.min_timestamp = s.max_timestamp + 1),
        ),
        ("interval", Box::new(move |_| interval + 1)),
        (
            "index entry outside the segment",
            Box::new(move |file| {
                file.entries.last_mut().unwrap().offset =
                    file.summary.as_ref().unwrap().next_offset;
                interval
            }),
        ),
    ];
    for (name, mutate) in mutations {
        let storage = storage.fork();
        let mut file = original.clone();
        let interval = mutate(&mut file);
        write_index(&storage, victim.start_offset, interval, &file);
        let report = checked(&storage, &config());
        assert_eq!(
            derived(&report),
            expected,
            "{name}: a wrong summary was taken"
        );
        assert!(
            report
                .findings
                .iter()
                .any(|f| f.file == index_path(victim.start_offset)
                    && matches!(f.kind, FindingKind::IndexRebuild { .. })),
            "{name}: {:?}",
            report.findings
        );
    }
}

/// A version 1 index (no summary: what nodes wrote before) agrees with its segment, which boot
/// reads; boot writes it again as version 2.
#[test]
fn a_version_1_index_is_read_around_and_written_again() {
    let storage = build();
    let report = checked(&storage, &config());
    let victim = report.segments[0].clone();
    let original = read_index(&storage, victim.start_offset);
    // Version 1: the 64-byte header (count at 48, zero at 56), the entries, no summary.
    let mut bytes = vec![0u8; 64 + original.entries.len() * index::ENTRY_SIZE];
    bytes[16..24].copy_from_slice(&index::MAGIC.to_le_bytes());
    bytes[24..26].copy_from_slice(&1u16.to_le_bytes());
    bytes[32..40].copy_from_slice(&victim.start_offset.to_le_bytes());
    bytes[40..48].copy_from_slice(&original.interval_bytes.to_le_bytes());
    bytes[48..56].copy_from_slice(&(original.entries.len() as u64).to_le_bytes());
    for (i, entry) in original.entries.iter().enumerate() {
        let at = 64 + i * index::ENTRY_SIZE;
        for (j, value) in [entry.offset, entry.timestamp, entry.position, entry.op]
            .iter()
            .enumerate()
        {
            bytes[at + 8 * j..at + 8 * j + 8].copy_from_slice(&value.to_le_bytes());
        }
    }
    let sum = iggy_format::checksum::checksum(&bytes[16..]);
    bytes[..16].copy_from_slice(&sum.to_le_bytes());
    let out = storage
        .open(index_path(victim.start_offset), OpenMode::Existing)
        .unwrap();
    out.set_len(0).unwrap();
    out.write_all_at(0, &bytes).unwrap();
    drop(out);
    let report = checked(&storage, &config());
    let finding = report
        .findings
        .iter()
        .find(|f| f.file == index_path(victim.start_offset))
        .unwrap();
    assert_eq!(
        finding.kind,
        FindingKind::IndexRebuild {
            reason: "version 1 (no summary)".into()
        }
    );
    let (partition, _) = Partition::open(storage.clone(), dir(), config(), iggy_wal::Mode::Open)
        .unwrap()
        .unwrap();
    drop(partition);
    assert!(read_index(&storage, victim.start_offset).summary.is_some());
    assert!(checked(&storage, &config()).is_clean());
}
