//! `iggy-fsck --repair` applies boot's plan and leaves a directory that checks clean; a declined
//! prompt changes nothing; usage and I/O errors exit 8.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

mod common;

use common::{copy_tree, fixtures_dir, fsck, hash_tree};
use iggy_io::{OpenMode, OsStorage, ReadFile, ReadStorage, Storage, WriteFile};

#[test]
fn repair_applies_the_plan_and_the_directory_then_checks_clean() {
    for (kind, after) in [
        ("unpublished", 0u8),
        ("rebuild-index", 0),
        ("leftover", 0),
        ("rollback-install", 0),
        ("repair-copy", 0),
        // Boot repairs nothing it cannot: the damaged partition still needs its peers.
        ("needs-peer-repair", 2),
    ] {
        let temp = tempfile::tempdir().unwrap();
        let node = temp.path().join("node");
        copy_tree(&fixtures_dir().join(kind).join("node"), &node);
        let (code, _) = fsck(&[node.to_str().unwrap(), "--repair", "--yes"]);
        assert_eq!(code, after, "{kind}");
        let (code, text) = fsck(&[node.to_str().unwrap()]);
        assert_eq!(code, after, "{kind}: {text}");
    }
}

#[test]
fn a_declined_repair_changes_nothing_but_the_lock_file() {
    let temp = tempfile::tempdir().unwrap();
    let node = temp.path().join("node");
    copy_tree(&fixtures_dir().join("unpublished").join("node"), &node);
    let before = hash_tree(&node);
    let mut out = Vec::new();
    let mut err = Vec::new();
    let mut input: &[u8] = b"n\n";
    let code = iggy_fsck::run(
        ["iggy-fsck", node.to_str().unwrap(), "--repair"],
        &mut out,
        &mut err,
        &mut input,
    );
    assert_eq!(code, 1);
    assert!(String::from_utf8(err).unwrap().contains("not applied"));
    // `--repair` took the node's lock before its check, which creates the lock file (it holds
    // the pid of the holder, not data); nothing else changed.
    let mut after = hash_tree(&node);
    assert!(
        after
            .remove(std::path::Path::new(iggy_recovery::LOCK_FILE))
            .is_some()
    );
    assert_eq!(after, before);
}

#[test]
fn usage_and_io_errors_exit_8_and_help_exits_0() {
    assert_eq!(fsck(&["--no-such-flag"]).0, 8);
    assert_eq!(fsck(&[]).0, 8);
    assert_eq!(fsck(&["--yes", "somewhere"]).0, 8, "--yes needs --repair");
    assert_eq!(fsck(&["/definitely/not/a/node"]).0, 8);
    let empty = tempfile::tempdir().unwrap();
    assert_eq!(fsck(&[empty.path().to_str().unwrap()]).0, 8, "not a node");
    // The message names the directory as given, once.
    let mut err = Vec::new();
    iggy_fsck::run(
        ["iggy-fsck", empty.path().to_str().unwrap()],
        &mut Vec::new(),
        &mut err,
        &mut &b""[..],
    );
    let err = String::from_utf8(err).unwrap();
    assert!(
        err.contains(&format!(
            "{}: not a node data directory",
            empty.path().display()
        )) && !err.contains(": :"),
        "{err}"
    );
    assert_eq!(fsck(&["--help"]).0, 0);
}

/// The human report says each thing once: a refusal that a finding states is not printed again
/// above it (no line is repeated inside a later one), and a finding line names its file once
/// (before the offset), not again inside the reason.
#[test]
fn the_human_report_names_each_finding_and_file_once() {
    for (kind, _) in common::KINDS {
        let node = fixtures_dir().join(kind).join("node");
        let (_, text) = fsck(&[node.to_str().unwrap()]);
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        for (index, line) in lines.iter().enumerate() {
            assert!(
                !lines[index + 1..].iter().any(|later| later.contains(line)),
                "{kind}: said twice: {line}\n{text}"
            );
            // A finding line: `<Component> <file> @<offset>: <reason> -> <action>`.
            if let Some((file, _)) = line.split_once(" @")
                && let Some((_, file)) = file.split_once(' ')
            {
                assert_eq!(
                    line.matches(file).count(),
                    1,
                    "{kind}: names {file} twice: {line}"
                );
            }
        }
    }
}

/// A spare (a retired WAL file kept for reuse) is neither a finding nor part of a log: the check
/// stays clean, says how many it saw, and `--json` counts them.
#[test]
fn a_spare_log_file_is_counted_not_judged() {
    let temp = tempfile::tempdir().unwrap();
    let node = temp.path().join("node");
    copy_tree(&fixtures_dir().join("clean").join("node"), &node);
    let wal = OsStorage::open(node.join("metadata/wal")).unwrap();
    let log = wal
        .list_dir("")
        .unwrap()
        .into_iter()
        .find(|e| e.name.to_string_lossy().ends_with(".wal"))
        .unwrap();
    // An earlier use's bytes: a copy of a log file, as `drop_prefix` leaves one.
    let bytes = wal.open_read(&log.name).unwrap().read_all().unwrap();
    wal.open("00000000000000000000.spare", OpenMode::CreateNew)
        .unwrap()
        .write_all_at(0, &bytes)
        .unwrap();
    let (code, text) = fsck(&[node.to_str().unwrap()]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("1 spare log file(s)"), "{text}");
    let (_, json) = fsck(&[node.to_str().unwrap(), "--json"]);
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(json["summary"]["spare_files"], 1, "{json}");
    assert!(json["findings"].as_array().unwrap().is_empty(), "{json}");
}
