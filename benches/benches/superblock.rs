//! One superblock update (two 4 KiB copies, each written then fdatasync'd) on the real file
//! system, beside, in the same run, the two alternatives it is judged against:
//! - `raw_4k_pwrite_fdatasync`: one 4 KiB pwrite + fdatasync (the floor of any durable update);
//! - `rename_update`: write a temp file, fsync it, rename it over the old one, fsync the
//!   directory (what most engines do for small metadata files).
//!
//! Run: `cargo bench -p iggy-benches --bench superblock` (the temp dir is under $TMPDIR).

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use iggy_io::{OpenMode, OsStorage, Storage, WriteFile};
use iggy_superblock::{Identity, Superblock, VsrState};

fn superblock_updates(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut group = c.benchmark_group("superblock");
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(5));

    let identity = Identity {
        cluster: 1,
        replica: 0,
        replica_count: 3,
    };
    let storage = OsStorage::open(dir.path()).expect("root");
    let mut superblock =
        Superblock::create(storage, Path::new("group"), identity, VsrState::default())
            .expect("create");
    let mut state = VsrState::default();
    group.bench_function("superblock_write", |b| {
        b.iter(|| {
            state.commit_max += 1;
            superblock.write(black_box(state)).expect("write");
        });
    });

    let storage = OsStorage::open(dir.path()).expect("root");
    let raw = storage.open("raw", OpenMode::CreateNew).expect("raw");
    raw.write_all_at(0, &[0u8; 4096]).expect("prefill");
    raw.sync_all().expect("sync");
    let block = [0x5Au8; 4096];
    group.bench_function("raw_4k_pwrite_fdatasync", |b| {
        b.iter(|| {
            raw.write_all_at(0, black_box(&block)).expect("write");
            raw.sync_data().expect("sync");
        });
    });

    group.bench_function("rename_update", |b| {
        b.iter(|| {
            let temp = storage.open("meta.tmp", OpenMode::Create).expect("temp");
            temp.write_all_at(0, black_box(&block)).expect("write");
            temp.sync_all().expect("sync");
            storage.rename("meta.tmp", "meta").expect("rename");
            storage.sync_dir("").expect("sync dir");
        });
    });
    group.finish();
}

criterion_group!(benches, superblock_updates);
criterion_main!(benches);
