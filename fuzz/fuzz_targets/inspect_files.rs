//! Any bytes as every file kind `iggy-inspect` decodes: the pure segment and index decoders, and
//! the real commands on the bytes written as `superblock`, `frontier`, `snapshot.bin`, a segment,
//! an index (checked against the same bytes as its log), a WAL directory and a consumer offset
//! file. No panic, and
//! every command succeeds (damage is reported, not an error).
#![no_main]

use clap::Parser;
use libfuzzer_sys::fuzz_target;

fn inspect(args: &[&str]) {
    let cli = iggy_inspect::Cli::try_parse_from(std::iter::once("iggy-inspect").chain(args.iter().copied()))
        .expect("valid arguments");
    let mut out = Vec::new();
    // The frontier- and superblock-based commands may refuse to read a directory, never panic.
    let _ = iggy_inspect::run(&cli, &mut out);
}

fuzz_target!(|data: &[u8]| {
    let _ = iggy_inspect::decode_segment(data, true);
    let _ = iggy_inspect::decode_index(data, 0, Some(data));
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path();
    let files = [
        "superblock",
        "frontier",
        "snapshot.bin",
        "00000000000000000000.log",
        "00000000000000000000.index",
        "00000000000000000001.wal",
        "consumer.0000000001",
    ];
    for name in files {
        std::fs::write(root.join(name), data).expect("write");
    }
    let path = |name: &str| root.join(name).display().to_string();
    inspect(&["superblock", &path("superblock")]);
    inspect(&["frontier", &path("frontier")]);
    inspect(&["snapshot", &path("snapshot.bin")]);
    inspect(&["segment", "--messages", &path("00000000000000000000.log")]);
    inspect(&["index", "--json", &path("00000000000000000000.index")]);
    inspect(&["wal", "--entries", &root.display().to_string()]);
    inspect(&["offsets", "--json", &path("consumer.0000000001")]);
});
