//! The WAL as a component, on the real file system: a batch of 250 records of 1000 bytes
//! appended and published (two fdatasyncs: the entries, then the frontier), appended without
//! publishing, and one record published. Side-by-side figures against the raw baselines and
//! peer logs come from `iggy-bench compare` (see `docs/benchmarks.md`).
//!
//! Run: `cargo bench -p iggy-benches --bench wal`

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use iggy_io::OsStorage;
use iggy_wal::{Config, Wal};

fn wal(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage = OsStorage::open(dir.path()).expect("root");
    let config = Config {
        unpublished_bytes_max: u64::MAX / 2,
        ..Config::new(1)
    };
    let wal = Wal::create(storage, Path::new("wal"), config, 1, 0).expect("create");
    let records = iggy_benches::compare::records(250, 1000, 3);

    let mut group = c.benchmark_group("wal");
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(5));
    group.throughput(Throughput::Elements(250));
    group.bench_function("append_250_then_publish", |b| {
        b.iter(|| {
            for record in &records {
                wal.append_body(black_box(record), 1, 0).expect("append");
            }
            wal.publish().expect("publish");
        });
    });
    group.bench_function("append_250_unpublished", |b| {
        b.iter(|| {
            for record in &records {
                wal.append_body(black_box(record), 1, 0).expect("append");
            }
        });
    });
    wal.publish().expect("publish");
    group.throughput(Throughput::Elements(1));
    group.bench_function("append_1_then_publish", |b| {
        b.iter(|| {
            wal.append_body(black_box(&records[0]), 1, 0)
                .expect("append");
            wal.publish().expect("publish");
        });
    });
    group.finish();
}

criterion_group!(benches, wal);
criterion_main!(benches);
