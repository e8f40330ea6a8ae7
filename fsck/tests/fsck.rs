//! `iggy-fsck --repair` applies boot's plan and leaves a directory that checks clean; a declined
//! prompt changes nothing; usage and I/O errors exit 8.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

mod common;

use common::{copy_tree, fixtures_dir, fsck, hash_tree};

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
