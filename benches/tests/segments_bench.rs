//! `iggy-bench segments` runs end to end on a small partition and reports every cell.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use iggy_benches::segments::{Sizes, render, run};

#[test]
fn every_scenario_reports_a_rate() {
    let dir = tempfile::tempdir().unwrap();
    let sizes = Sizes {
        messages_per_batch: 10,
        message_bytes: 100,
        append_bytes: 256 << 10,
        read_bytes: 1 << 20,
        read_chunk_bytes: 4096,
        segment_bytes: 128 << 10,
        rounds: 1,
        cold_boots: false,
    };
    let mut steps = 0;
    let cells = run(dir.path(), &sizes, |_| steps += 1).unwrap();
    assert_eq!(cells.len(), 8);
    // Two append scenarios and one read scenario per round, plus writing the read partition
    // and the boots.
    assert_eq!(steps, 3 * sizes.rounds + 2);
    for cell in &cells {
        assert!(cell.megabytes_per_second > 0.0, "{cell:?}");
    }
    let table = render(&cells);
    assert!(
        table.contains("partition mmap")
            && table.contains("keyed WAL")
            && table.contains("boot (warm"),
        "{table}"
    );
}
