//! The raw baselines and every peer marked as syncing really make a "published" append durable:
//! for N published appends of one 1000-byte record, the block device under the bench directory
//! must see at least N flush requests and at least N records' worth of written sectors. Other
//! activity on the machine can only add to both counters, so the check cannot pass by accident
//! the other way. (commitlog is marked as not syncing from its source: its `flush` msyncs an
//! index, which itself issues flushes, while its segment data stays in the page cache; so flush
//! counts alone would not expose it, and this test does not try to.)
//!
//! Needs the kernel's block device counters (`/sys/dev/block/M:m/stat`, Linux 5.5+); CI sets
//! `IGGY_REQUIRE_DEVICE_STATS=1` so a machine without them fails instead of skipping.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use iggy_benches::compare::records;
use iggy_benches::engines::EngineKind;

const APPENDS: u64 = 40;

#[test]
fn every_syncing_engine_makes_each_published_append_durable() {
    let dir = tempfile::tempdir().unwrap();
    let Some(_) = iggy_io::device_counters(dir.path()) else {
        assert!(
            std::env::var_os("IGGY_REQUIRE_DEVICE_STATS").is_none(),
            "block device counters required but unavailable"
        );
        eprintln!("no block device counters here: nothing checked");
        return;
    };
    let data = records(1, 1000, 5);
    for kind in EngineKind::ALL
        .into_iter()
        .filter(|kind| kind.sync_reaches_disk())
    {
        let run = iggy_benches::engines::run_dir(dir.path(), kind.name()).unwrap();
        let engine = kind.open(&run, 8 << 20).unwrap();
        let before = iggy_io::device_counters(&run).unwrap();
        for _ in 0..APPENDS {
            engine.append(0, &[data[0].as_slice()], true).unwrap();
        }
        let after = iggy_io::device_counters(&run).unwrap();
        let flushes = after.flushes - before.flushes;
        let written = (after.sectors_written - before.sectors_written) * 512;
        assert!(
            flushes >= APPENDS,
            "{}: {flushes} flushes for {APPENDS} published appends",
            kind.name()
        );
        assert!(
            written >= APPENDS * 1000,
            "{}: {written} bytes reached the device for {APPENDS} published 1000-byte records",
            kind.name()
        );
        eprintln!(
            "{}: {flushes} flushes, {written} bytes written",
            kind.name()
        );
    }
}

/// The bench's own WAL engine, in its "published" mode, on a simulated disk: cut the power after
/// a run of appends of batches and single records, some waiting to be durable and some not;
/// every append whose durable call returned is present and unchanged after boot.
#[test]
fn the_benchs_wal_under_published_keeps_every_acknowledged_record_through_power_loss() {
    use iggy_benches::engines::{Engine, IggyWal, iggy_config};
    use iggy_io::SimStorage;
    for seed in 0..8u64 {
        let storage = SimStorage::new(seed);
        let engine = IggyWal::create_on(storage.clone()).unwrap();
        let data = records(64, 1000, seed);
        let mut acknowledged = 0u64;
        let mut appended = 0u64;
        for round in 0..30u64 {
            let count = 1 + usize::try_from((round * 7 + seed) % 12).unwrap();
            let batch: Vec<&[u8]> = data.iter().take(count).map(Vec::as_slice).collect();
            let durable = (round + seed) % 3 != 0;
            engine.append(0, &batch, durable).unwrap();
            appended += count as u64;
            if durable {
                acknowledged = appended;
            }
        }
        drop(engine);
        storage.power_loss();
        let (wal, _) = iggy_wal::Wal::open(
            storage,
            std::path::Path::new("wal"),
            iggy_config(),
            iggy_wal::Mode::Open,
        )
        .unwrap()
        .unwrap();
        let head = wal.head().0;
        assert!(
            head >= acknowledged,
            "seed {seed}: head {head} < acknowledged {acknowledged}"
        );
        assert!(head <= appended);
        let entries = wal.read(1, acknowledged).unwrap();
        assert_eq!(entries.len() as u64, acknowledged);
        let mut expected = Vec::new();
        for round in 0..30u64 {
            let count = 1 + usize::try_from((round * 7 + seed) % 12).unwrap();
            expected.extend(data.iter().take(count));
        }
        for (entry, record) in entries.iter().zip(&expected) {
            assert_eq!(&entry.body, *record, "seed {seed}: op {}", entry.header.op);
        }
    }
}
