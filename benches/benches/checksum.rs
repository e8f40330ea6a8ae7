//! Checksum families on this machine, at the sizes the formats checksum: a 256-byte header, a
//! 1000-byte record, a 4 KiB superblock copy or frontier sector, a 64 KiB batch, a 1 MiB body.
//! The choice written in `docs/format.md` ("Checksums") comes from this bench. `xxh3_*` are the
//! toolkit's functions (`iggy_format::checksum`: twox-hash, AVX2 picked at run time);
//! `xxhash_rust_*` are the same functions from xxhash-rust, whose SIMD path is fixed at build
//! time (SSE2 in a portable build).
//!
//! Run: `cargo bench -p iggy-benches --bench checksum`
//! With AVX2 compiled in: `RUSTFLAGS="-C target-cpu=x86-64-v3" cargo bench -p iggy-benches --bench checksum`

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use std::time::Duration;

fn checksums(c: &mut Criterion) {
    let mut group = c.benchmark_group("checksum");
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(2));
    for size in [256usize, 1000, 4096, 65_536, 1 << 20] {
        let data: Vec<u8> = (0..=250u8).cycle().step_by(31).take(size).collect();
        group.throughput(Throughput::Bytes(size as u64));
        group.bench_with_input(BenchmarkId::new("crc32c", size), &data, |b, data| {
            b.iter(|| crc32c::crc32c(black_box(data)));
        });
        group.bench_with_input(BenchmarkId::new("xxh3_64", size), &data, |b, data| {
            b.iter(|| iggy_format::checksum::checksum_64(black_box(data)));
        });
        group.bench_with_input(BenchmarkId::new("xxh3_128", size), &data, |b, data| {
            b.iter(|| iggy_format::checksum::checksum(black_box(data)));
        });
        group.bench_with_input(
            BenchmarkId::new("xxhash_rust_64", size),
            &data,
            |b, data| {
                b.iter(|| xxhash_rust::xxh3::xxh3_64(black_box(data)));
            },
        );
        group.bench_with_input(
            BenchmarkId::new("xxhash_rust_128", size),
            &data,
            |b, data| {
                b.iter(|| xxhash_rust::xxh3::xxh3_128(black_box(data)));
            },
        );
    }
    group.finish();
}

criterion_group!(benches, checksums);
criterion_main!(benches);
