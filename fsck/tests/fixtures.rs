//! Golden fixtures: one node directory per finding kind under `tests/fixtures/<kind>/node`, with
//! the JSON report (`expected.json`) and exit code (`exit_code`) `iggy-fsck` must give it.
//! `iggy-fsck` must not change a byte of any of them.
//!
//! Regenerate after a format change, then review the diff of the expected reports:
//! `IGGY_REGEN_FIXTURES=1 cargo test -p iggy-fsck --test fixtures -- --test-threads=1`.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

mod common;

use common::{KINDS, build, fixtures_dir, fsck, hash_tree};
use iggy_io::{OpenMode, OsStorage, ReadFile, ReadStorage, Storage, WriteFile};

fn normalized(json: &str) -> serde_json::Value {
    let mut value: serde_json::Value = serde_json::from_str(json).unwrap();
    value["data_dir"] = "node".into();
    // The one field that is a measurement, not a verdict.
    value["summary"]["elapsed_ms"] = 0.into();
    value
}

fn read_text(storage: &OsStorage, name: &str) -> String {
    String::from_utf8(storage.open_read(name).unwrap().read_all().unwrap()).unwrap()
}

fn write_text(storage: &OsStorage, name: &str, text: &str) {
    let file = storage.open(name, OpenMode::Create).unwrap();
    file.set_len(0).unwrap();
    file.write_all_at(0, text.as_bytes()).unwrap();
}

#[test]
fn every_fixture_gives_its_expected_report_and_exit_code_without_changing_a_byte() {
    let root = fixtures_dir();
    if std::env::var_os("IGGY_REGEN_FIXTURES").is_some() {
        let fixtures = OsStorage::create(&root).unwrap();
        for (kind, _) in KINDS {
            if fixtures.exists(kind).unwrap() {
                fixtures.remove_dir_all(kind).unwrap();
            }
            build(kind, &root.join(kind).join("node"));
            let (code, json) = fsck(&[root.join(kind).join("node").to_str().unwrap(), "--json"]);
            let dir = OsStorage::open(root.join(kind)).unwrap();
            let pretty = serde_json::to_string_pretty(&normalized(&json)).unwrap();
            write_text(&dir, "expected.json", &format!("{pretty}\n"));
            write_text(&dir, "exit_code", &format!("{code}\n"));
        }
    }
    for (kind, expected_code) in KINDS {
        let node = root.join(kind).join("node");
        let dir = OsStorage::open(root.join(kind)).unwrap();
        let before = hash_tree(&node);
        let (code, json) = fsck(&[node.to_str().unwrap(), "--json"]);
        assert_eq!(hash_tree(&node), before, "{kind}: fsck changed a file");
        assert_eq!(code, expected_code, "{kind}: {json}");
        let stored: u8 = read_text(&dir, "exit_code").trim().parse().unwrap();
        assert_eq!(code, stored, "{kind}");
        let expected: serde_json::Value =
            serde_json::from_str(&read_text(&dir, "expected.json")).unwrap();
        assert_eq!(normalized(&json), expected, "{kind}");
        // The human report too, without changing anything.
        let (text_code, text) = fsck(&[node.to_str().unwrap()]);
        assert_eq!(text_code, code);
        assert!(text.contains("verdict:"), "{text}");
        assert_eq!(hash_tree(&node), before, "{kind}: fsck changed a file");
    }
}

#[test]
fn a_flipped_bit_in_one_partition_needs_peer_repair_naming_partition_file_and_offset() {
    let root = fixtures_dir().join("needs-peer-repair");
    let node = root.join("node");
    let (code, json) = fsck(&[node.to_str().unwrap(), "--json"]);
    assert_eq!(code, 2);
    // A deep check reads every byte: it finds the same.
    let (deep_code, _) = fsck(&[node.to_str().unwrap(), "--deep", "--json"]);
    assert_eq!(deep_code, 2);
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    let storage = OsStorage::open(&node).unwrap();
    let segment = "partitions/1.1.2/00000000000000000000.log";
    let second_entry = common::entry_offsets(&storage, segment.as_ref(), 2)[1];
    let damaged: Vec<&serde_json::Value> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["action"] == "needs-peer-repair")
        .collect();
    assert_eq!(damaged.len(), 1, "{json}");
    assert_eq!(damaged[0]["group"], "partition 1.1.2");
    assert_eq!(damaged[0]["file"], segment);
    assert_eq!(damaged[0]["offset"], second_entry);
    for group in report["groups"].as_array().unwrap() {
        let expected = if group["group"] == "partition 1.1.2" {
            "needs-peer-repair"
        } else {
            "clean"
        };
        assert_eq!(group["status"], expected, "{group}");
    }
}

/// A plain check says how much it took from seals without reading it, and that `--deep` reads
/// it; a deep check takes nothing from seals.
#[test]
fn a_check_says_what_it_took_from_seals_and_a_deep_check_takes_nothing() {
    let node = fixtures_dir().join("clean").join("node");
    let (_, json) = fsck(&[node.to_str().unwrap(), "--json"]);
    let plain: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(
        plain["summary"]["sealed_bytes"].as_u64().unwrap() > 0,
        "{json}"
    );
    let (_, text) = fsck(&[node.to_str().unwrap()]);
    assert!(
        text.contains("taken from their seals, not read (--deep reads"),
        "{text}"
    );
    let (code, json) = fsck(&[node.to_str().unwrap(), "--deep", "--json"]);
    assert_eq!(code, 0);
    let deep: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(deep["summary"]["sealed_bytes"], 0, "{json}");
}
