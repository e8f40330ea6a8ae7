//! The carried ring (`iggy_wal::ring`): a small publication is one flush of the frontier file,
//! durable in its two ring records; the log is synced lazily; boot writes carried entries back.
//! Each durable step is shown to matter here: the test named for it fails when the step is
//! removed (docs/testing.md, "The carried ring").
#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    reason = "test code: a failed unwrap is a failed test; casts are of small test values"
)]

use std::path::{Path, PathBuf};

use iggy_io::{OpenMode, ReadFile, ReadStorage, SimStorage, Storage, TraceOp, WriteFile};
use iggy_wal::ring::{self, PAIRS};
use iggy_wal::{Config, FindingKind, Mode, Wal, WalError, check};

const GROUP: u128 = 0x16;

/// Files of 16 KiB: entries of about 1 KB, so a ring's worth of publications spans files.
fn config() -> Config {
    Config {
        file_size_bytes: 16 << 10,
        ..Config::new(GROUP)
    }
}

fn dir() -> &'static Path {
    Path::new("wal")
}

fn frontier_path() -> PathBuf {
    dir().join("frontier")
}

fn body(op: u64) -> Vec<u8> {
    (0..700 + (op as usize * 37) % 200)
        .map(|i| (op as usize * 13 + i) as u8)
        .collect()
}

/// Appends and publishes each op of `ops` on its own (every publication small).
fn publish_each(wal: &Wal<SimStorage>, ops: std::ops::RangeInclusive<u64>) {
    for op in ops {
        assert_eq!(wal.append_body(&body(op), 1, op).unwrap(), op);
        wal.wait_published(op).unwrap();
    }
}

fn open(storage: &SimStorage) -> (Wal<SimStorage>, iggy_wal::Report) {
    Wal::open(storage.clone(), dir(), config(), Mode::Open)
        .unwrap_or_else(|e| panic!("boot refused: {e}"))
        .unwrap()
}

fn assert_intact(wal: &Wal<SimStorage>, head: u64) {
    assert_eq!(wal.head().0, head);
    for (entry, op) in wal.read(1, head).unwrap().iter().zip(1..) {
        assert_eq!(entry.body, body(op), "op {op}");
    }
}

fn syncs(trace: &[TraceOp]) -> Vec<PathBuf> {
    trace
        .iter()
        .filter_map(|op| match op {
            TraceOp::SyncData { path, .. } | TraceOp::SyncAll { path, .. } => Some(path.clone()),
            _ => None,
        })
        .collect()
}

/// A small publication is one flush, of the frontier file only; after a power loss that keeps
/// nothing unsynced, the entry is back: boot restored it from the ring, said so, and the check
/// before it said the same.
#[test]
fn a_small_publication_is_one_flush_and_survives_in_the_ring() {
    let storage = SimStorage::recording(1);
    let wal = Wal::create(storage.clone(), dir(), config(), 1, 0).unwrap();
    let before = storage.trace().len();
    publish_each(&wal, 1..=1);
    let trace = storage.trace();
    assert_eq!(syncs(&trace[before..]), vec![frontier_path()]);
    drop(wal);
    storage.power_loss_durable_only();
    let checked = check(&storage, dir(), GROUP).unwrap().unwrap();
    let restored = |report: &iggy_wal::Report| {
        report.findings.iter().any(|f| {
            matches!(
                f.kind,
                FindingKind::CarriedRestored {
                    first_op: 1,
                    head_op: 1,
                    ..
                }
            )
        })
    };
    assert!(restored(&checked), "{checked:?}");
    // A check's reads (what the metadata group replays read-only) see the entry too.
    let read = iggy_wal::boot::read_entries(&storage, &checked, 1, 1).unwrap();
    assert_eq!(read[0].body, body(1));
    assert_eq!(
        iggy_wal::boot::header_at(&storage, &checked, 1).unwrap(),
        read[0].header
    );
    let (wal, opened) = open(&storage);
    assert_eq!(checked, opened, "check and open agree");
    assert_intact(&wal, 1);
    drop(wal);
    // Written back and synced by that boot: the next needs nothing restored.
    storage.power_loss_durable_only();
    let (wal, report) = open(&storage);
    assert!(!restored(&report), "{report:?}");
    assert_intact(&wal, 1);
}

/// Before a ring pair is reused, the log is synced: the publication after `PAIRS` carried ones
/// syncs the log files. Without that sync, a power loss after the ring wrapped loses the
/// entries whose only durable copy was overwritten.
#[test]
fn the_log_is_synced_before_a_ring_pair_is_reused() {
    let storage = SimStorage::recording(2);
    let wal = Wal::create(storage.clone(), dir(), config(), 1, 0).unwrap();
    let count = 3 * PAIRS as u64 + 5;
    let before = storage.trace().len();
    publish_each(&wal, 1..=count);
    let log_syncs = syncs(&storage.trace()[before..])
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "wal"))
        .count();
    assert!(log_syncs >= 3, "the log was synced {log_syncs} times");
    drop(wal);
    storage.power_loss_durable_only();
    assert_intact(&open(&storage).0, count);
}

/// Every publication is durable when it returns, the ones that sync the log beside their own
/// flush too: a power loss right after the last of any run of small publications keeps all of
/// them. (With the side sync's publication skipping its frontier flush, only the log is
/// durable and the publication is lost; the tests above publish more after it, whose flush
/// hides that.)
#[test]
fn a_power_loss_after_any_publication_keeps_every_one() {
    for count in 1..=2 * PAIRS as u64 + 2 {
        let storage = SimStorage::new(count);
        let wal = Wal::create(storage.clone(), dir(), config(), 1, 0).unwrap();
        publish_each(&wal, 1..=count);
        drop(wal);
        storage.power_loss_durable_only();
        let (wal, _) = open(&storage);
        assert_eq!(wal.published().head_op, count, "after {count} publications");
        assert_intact(&wal, count);
    }
}

/// One rotten copy of a publication leaves the other: boot uses it, reports the damaged copy,
/// and rewrites both.
#[test]
fn one_rotten_copy_of_a_carried_publication_leaves_the_other() {
    for copy in [0usize, 1] {
        let storage = SimStorage::new(3);
        let wal = Wal::create(storage.clone(), dir(), config(), 1, 0).unwrap();
        publish_each(&wal, 1..=3);
        let newest = wal.published();
        drop(wal);
        storage.power_loss_durable_only();
        let record = ring::records_of(newest.sequence)[copy];
        storage
            .rot(frontier_path(), ring::offset(record) + 300, 0x10)
            .unwrap();
        let (wal, report) = open(&storage);
        assert_intact(&wal, 3);
        assert!(
            report.findings.iter().any(|f| matches!(
                f.kind,
                FindingKind::CarriedCopyDamaged {
                    record: r,
                    sequence: q,
                    error: Some(iggy_wal::frontier::SlotError::Checksum { .. }),
                } if r == record && q == newest.sequence
            )),
            "{report:?}"
        );
        drop(wal);
        // Rewritten: the other copy may rot now.
        storage
            .rot(
                frontier_path(),
                ring::offset(ring::records_of(newest.sequence)[1 - copy]) + 300,
                0x10,
            )
            .unwrap();
        storage.power_loss_durable_only();
        assert_intact(&open(&storage).0, 3);
    }
}

/// A carried entry rotten in the log while its ring copy is good is read through the copy and
/// written back; one rotten in the log after the log was synced (no ring copy relied on) still
/// refuses with the file and the offset.
#[test]
fn damage_in_the_log_is_mended_from_the_ring_or_refused() {
    let storage = SimStorage::new(4);
    let wal = Wal::create(storage.clone(), dir(), config(), 1, 0).unwrap();
    publish_each(&wal, 1..=2);
    let location = wal.locate(2).unwrap();
    let file = dir().join(format!("{:020}.wal", location.key));
    drop(wal);
    storage.rot(&file, location.offset + 600, 0x04).unwrap();
    let (wal, report) = open(&storage);
    assert_intact(&wal, 2);
    assert!(
        report
            .findings
            .iter()
            .any(|f| matches!(f.kind, FindingKind::CarriedRestored { head_op: 2, .. })),
        "{report:?}"
    );
    // Synced: the ring is no longer relied on, and damage in the log refuses.
    wal.publish_synced().unwrap();
    drop(wal);
    storage.rot(&file, location.offset + 600, 0x04).unwrap();
    match check(&storage, dir(), GROUP).unwrap_err() {
        WalError::Corrupt {
            file: at, offset, ..
        } => {
            assert_eq!((at, offset), (file, location.offset));
        }
        other => panic!("{other:?}"),
    }
}

/// A cut empties the ring: with the cut's slot rotten, boot falls back to the other slot and
/// must not take the newest ring record (older than the cut) as the frontier, which would bring
/// the cut entries back.
#[test]
fn truncate_empties_the_ring_so_a_rotten_cut_cannot_bring_entries_back() {
    let storage = SimStorage::new(5);
    let wal = Wal::create(storage.clone(), dir(), config(), 1, 0).unwrap();
    publish_each(&wal, 1..=6);
    wal.truncate_after(4).unwrap();
    let cut = wal.published();
    drop(wal);
    storage.power_loss_durable_only();
    storage
        .rot(frontier_path(), cut.offset() + 100, 0x01)
        .unwrap();
    let (wal, _) = open(&storage);
    assert_intact(&wal, 4);
}

/// A record of an unknown version refuses, naming the record and its offset.
#[test]
fn a_ring_record_of_an_unknown_version_refuses() {
    let storage = SimStorage::new(6);
    let wal = Wal::create(storage.clone(), dir(), config(), 1, 0).unwrap();
    publish_each(&wal, 1..=1);
    let record = ring::records_of(wal.published().sequence)[0];
    drop(wal);
    let at = ring::offset(record);
    let mut bytes = vec![0u8; ring::SECTOR];
    storage
        .open_read(frontier_path())
        .unwrap()
        .read_exact_at(at, &mut bytes)
        .unwrap();
    bytes[40] = 9;
    let len = 256 + usize::from(u16::from_le_bytes([bytes[144], bytes[145]]));
    let sum = iggy_format::checksum(&bytes[32..len]);
    bytes[..16].copy_from_slice(&sum.to_le_bytes());
    let file = storage.open(frontier_path(), OpenMode::Existing).unwrap();
    file.write_all_at(at, &bytes).unwrap();
    file.sync_data().unwrap();
    drop(file);
    let checked = check(&storage, dir(), GROUP).unwrap_err();
    assert!(
        matches!(
            checked,
            WalError::CarriedRefused {
                record: r,
                offset,
                error: iggy_wal::frontier::SlotError::UnknownVersion { version: 9 },
                ..
            } if r == record && offset == at
        ),
        "{checked}"
    );
}

/// A clean shutdown's `publish_synced` leaves nothing for the ring: the next boot restores
/// nothing.
#[test]
fn publish_synced_leaves_nothing_to_restore() {
    let storage = SimStorage::new(7);
    let wal = Wal::create(storage.clone(), dir(), config(), 1, 0).unwrap();
    publish_each(&wal, 1..=5);
    wal.publish_synced().unwrap();
    drop(wal);
    storage.power_loss_durable_only();
    let (wal, report) = open(&storage);
    assert!(report.is_clean(), "{report:?}");
    assert_intact(&wal, 5);
}
