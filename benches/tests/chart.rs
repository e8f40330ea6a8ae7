//! The compare chart names every scenario and engine it has figures for, marks an engine whose
//! sync does not reach the disk, and draws one CDF line per engine with latencies.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use iggy_benches::compare::{Cell, Scenario};
use iggy_benches::engines::EngineKind;
use iggy_benches::stats::Latencies;

#[test]
fn the_chart_labels_every_scenario_and_engine() {
    let engines = [
        EngineKind::RawPrefilled,
        EngineKind::IggyWal,
        EngineKind::CommitLog,
    ];
    let mut cells = Vec::new();
    for scenario in [Scenario::PublishedBatches, Scenario::SinglePublished] {
        for (i, engine) in engines.iter().enumerate() {
            let mut latencies = Latencies::new();
            for us in 1..=100u64 {
                latencies.record(std::time::Duration::from_micros(us * (i as u64 + 1)));
            }
            cells.push(Cell {
                scenario,
                engine: *engine,
                median: Some(1000.0 * (i as f64 + 1.0)),
                samples: vec![1000.0],
                note: None,
                latency: Some(latencies.percentiles()),
                cdf: latencies.cdf(50),
                device_read_bytes: None,
            });
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("chart.svg");
    iggy_benches::chart::write_svg(&cells, &engines, &path).unwrap();
    let storage = iggy_io::OsStorage::open(dir.path()).unwrap();
    let file = iggy_io::ReadStorage::open_read(&storage, "chart.svg").unwrap();
    let mut bytes = vec![0u8; usize::try_from(iggy_io::ReadFile::len(&file).unwrap()).unwrap()];
    iggy_io::ReadFile::read_exact_at(&file, 0, &mut bytes).unwrap();
    let svg = String::from_utf8(bytes).unwrap();
    for label in [
        "batches, published",
        "single, published",
        "raw-prefilled",
        "iggy-wal",
        "commitlog \u{2020}",
    ] {
        assert!(svg.contains(label), "{label} missing");
    }
    // One CDF polyline per engine in the single-record scenario.
    assert!(svg.matches("<polyline").count() >= engines.len(), "{svg}");
}

#[test]
fn the_table_says_what_each_cold_replay_read_from_the_device() {
    let engines = [EngineKind::IggyWal, EngineKind::RaftEngine];
    let cells: Vec<Cell> = engines
        .iter()
        .zip([Some(140_000_000), None])
        .map(|(&engine, read)| Cell {
            scenario: Scenario::ReplayCold,
            engine,
            median: Some(1e6),
            samples: vec![1e6],
            note: None,
            latency: None,
            cdf: Vec::new(),
            device_read_bytes: read,
        })
        .collect();
    let table = iggy_benches::compare::render(&cells, &engines);
    let row = table
        .lines()
        .find(|l| l.starts_with("cold replay read (MB, device)"))
        .unwrap_or_else(|| panic!("no device-read row in\n{table}"));
    let fields: Vec<&str> = row.split_whitespace().rev().take(2).collect();
    assert_eq!(fields, ["-", "140"], "{row}");
}

/// The steady-state scenario runs (warm-up, compactions, timed batches) for the engines it can
/// compact and for the raw baselines, with latencies, and is n/a for an engine it does not
/// drive.
#[test]
fn the_steady_state_scenario_runs_where_the_engine_compacts() {
    let sizes = iggy_benches::compare::Sizes {
        batch_total_bytes: 2 << 20,
        steady_retain_bytes: 1 << 20,
        steady_warm_up_bytes: 2 << 20,
        ..iggy_benches::compare::Sizes::quick()
    };
    let data = iggy_benches::compare::records(sizes.batch_records, sizes.record_bytes, 7);
    let base = tempfile::tempdir().unwrap();
    for engine in [
        EngineKind::RawPrefilled,
        EngineKind::IggyWal,
        EngineKind::RaftEngine,
    ] {
        let measured = iggy_benches::compare::run_one(
            engine,
            Scenario::SteadyBatches,
            &sizes,
            base.path(),
            &data,
        )
        .unwrap()
        .unwrap_or_else(|| panic!("{engine:?}: n/a"));
        assert!(measured.value > 0.0, "{engine:?}");
        assert!(measured.latencies.is_some(), "{engine:?}");
    }
    let okaywal = iggy_benches::compare::run_one(
        EngineKind::OkayWal,
        Scenario::SteadyBatches,
        &sizes,
        base.path(),
        &data,
    )
    .unwrap();
    assert!(okaywal.is_none(), "the bench does not compact okaywal");
}
