//! `iggy-fsck` run as the built executable, the way `README.md` and `docs/recovery.md` tell an
//! operator to: stdout and stderr as pipes (a script, a CI log) or stderr on a terminal (an
//! operator watching the progress bar), the exit code read, the JSON parsed. The nodes are the
//! README's example and one of many damaged partitions, so boot's worker threads all log while
//! the main thread waits for them: the case that deadlocked when `main` held stderr's lock for
//! the whole run (issue #30). Every run has a deadline: a hung `iggy-fsck` fails the test with
//! its threads' state instead of hanging the test run.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use iggy_io::{OpenMode, OsStorage, ReadFile, ReadStorage, Storage, WriteFile};
use iggy_recovery::populate::{Options, populate};
use iggy_testkit::{Output, Run, Streams};
use serde_json::Value;

/// Far above what any run here takes (well under a second each): only a hang reaches it.
const DEADLINE: Duration = Duration::from_secs(120);

fn fsck(args: &[&str], streams: Streams, input: &[u8]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_iggy-fsck"));
    command.args(args);
    Run::new(command)
        .streams(streams)
        .input(input)
        .deadline(DEADLINE)
        .output()
}

/// The README's example node: `populate` with its defaults (metadata and 3 partitions, each
/// with an unpublished tail).
fn example_node() -> (tempfile::TempDir, PathBuf) {
    let temp = tempfile::tempdir().unwrap();
    let node = temp.path().join("node");
    let storage = OsStorage::create(&node).unwrap();
    populate(&storage, Path::new(""), &Options::default()).unwrap();
    (temp, node)
}

/// A node of `partitions` partitions, each with an unpublished tail; every third one also lost
/// its first segment's index, and every third (another) has a torn superblock copy.
fn damaged_node(partitions: u32) -> (tempfile::TempDir, PathBuf) {
    let temp = tempfile::tempdir().unwrap();
    let node = temp.path().join("node");
    let storage = OsStorage::create(&node).unwrap();
    let options = Options {
        partitions,
        batches: 12,
        unpublished_batches: 2,
        segment_size_bytes: 4096,
        metadata_file_bytes: 16 << 10,
        max_messages: 3,
        replicas: 3,
    };
    populate(&storage, Path::new(""), &options).unwrap();
    for n in 1..=partitions {
        let dir = PathBuf::from(format!("partitions/1.1.{n}"));
        match n % 3 {
            1 => storage
                .unlink(dir.join("00000000000000000000.index"))
                .unwrap(),
            2 => {
                // One byte of copy B (the second 4 KiB): a torn update of that copy.
                let path = dir.join("superblock");
                let bytes = storage.open_read(&path).unwrap().read_all().unwrap();
                let file = storage.open(&path, OpenMode::Existing).unwrap();
                file.write_all_at(4096 + 100, &[bytes[4096 + 100] ^ 0x20])
                    .unwrap();
                file.sync_data().unwrap();
            }
            _ => {}
        }
    }
    (temp, node)
}

fn path(node: &Path) -> &str {
    node.to_str().unwrap()
}

/// The README's three commands, on its example node, with stderr a pipe and a terminal:
/// the check exits 1, `--repair --yes` prints what it did and exits 0, the next check exits 0.
#[test]
fn the_readme_example_is_repaired_then_checks_clean() {
    for streams in [Streams::Pipes, Streams::StderrOnTerminal] {
        let (_temp, node) = example_node();
        let check = fsck(&[path(&node)], streams, b"");
        assert_eq!(check.code(), 1, "{streams:?}: {}", check.describe());
        assert!(check.stdout.contains("discard"), "{}", check.describe());
        let repair = fsck(&["--repair", "--yes", path(&node)], streams, b"");
        assert_eq!(repair.code(), 0, "{streams:?}: {}", repair.describe());
        assert!(
            repair.stderr.contains("applied") && repair.stderr.contains("action(s)"),
            "{streams:?}: {}",
            repair.describe()
        );
        // Boot's own lines: what it discarded, from its worker threads.
        assert!(
            repair.stderr.contains("beyond the durable WAL frontier"),
            "{streams:?}: {}",
            repair.describe()
        );
        let after = fsck(&[path(&node)], streams, b"");
        assert_eq!(after.code(), 0, "{streams:?}: {}", after.describe());
    }
}

/// 18 damaged partitions (tails everywhere, missing indexes and torn superblock copies spread
/// among them): `--repair --yes` and `--repair --json`, with stderr a pipe and a terminal, each
/// followed by a check that exits 0.
#[test]
fn many_damaged_partitions_repair_with_yes_and_with_json_then_check_clean() {
    for streams in [Streams::Pipes, Streams::StderrOnTerminal] {
        let (_temp, node) = damaged_node(18);
        let repair = fsck(&["--repair", "--yes", path(&node)], streams, b"");
        assert_eq!(repair.code(), 0, "{streams:?}: {}", repair.describe());
        // One WARN line per partition's discard, each from the worker thread that opened it.
        let discards = repair
            .stderr
            .matches("beyond the durable WAL frontier")
            .count();
        assert_eq!(discards, 18, "{streams:?}: {}", repair.describe());
        let after = fsck(&[path(&node), "--json"], Streams::Pipes, b"");
        assert_eq!(after.code(), 0, "{}", after.describe());
        let report: Value = serde_json::from_str(&after.stdout).unwrap();
        assert_eq!(report["exit_code"], 0, "{report}");

        let (_temp, node) = damaged_node(18);
        let repair = fsck(&["--repair", "--json", "--yes", path(&node)], streams, b"");
        assert_eq!(repair.code(), 0, "{streams:?}: {}", repair.describe());
        let document: Value = serde_json::from_str(&repair.stdout).unwrap();
        assert_eq!(document["before"]["exit_code"], 1, "{document}");
        assert_eq!(document["after"]["exit_code"], 0, "{document}");
        assert_eq!(document["exit_code"], 0, "{document}");
        let applied = document["applied"].as_array().unwrap();
        for kind in ["discard-unpublished", "rebuild-index", "repair-copy"] {
            assert!(
                applied.iter().any(|f| f["action"] == kind),
                "no {kind} among {applied:?}"
            );
        }
        let check = fsck(&[path(&node)], streams, b"");
        assert_eq!(check.code(), 0, "{streams:?}: {}", check.describe());
    }
}

/// Without `--yes`, `--repair` asks on stderr and reads the answer on stdin: "n" changes
/// nothing (exit 1 again), "y" repairs (exit 0), with every stream on one terminal as at a
/// prompt.
#[test]
fn repair_asks_and_takes_the_answer_from_stdin() {
    let (_temp, node) = damaged_node(16);
    let declined = fsck(&["--repair", path(&node)], Streams::Pipes, b"n\n");
    assert_eq!(declined.code(), 1, "{}", declined.describe());
    assert!(
        declined.stderr.contains("? [y/N]") && declined.stderr.contains("not applied"),
        "{}",
        declined.describe()
    );
    assert_eq!(fsck(&[path(&node)], Streams::Pipes, b"").code(), 1);
    let accepted = fsck(&["--repair", path(&node)], Streams::AllOnTerminal, b"y\n");
    assert_eq!(accepted.code(), 0, "{}", accepted.describe());
    assert_eq!(fsck(&[path(&node)], Streams::Pipes, b"").code(), 0);
}

/// `iggy-fsck ... | head -c 64`: the reader goes away; the check still exits with its verdict,
/// without a panic on stderr.
#[test]
fn a_reader_that_goes_away_is_not_an_error() {
    let (_temp, node) = damaged_node(16);
    let mut command = Command::new(env!("CARGO_BIN_EXE_iggy-fsck"));
    command.arg(path(&node));
    let out = Run::new(command)
        .close_stdout_after(64)
        .deadline(DEADLINE)
        .output();
    assert_eq!(out.code(), 1, "{}", out.describe());
    assert!(!out.stderr.contains("panicked"), "{}", out.describe());
}

/// Usage errors exit 8 with the reason on stderr; `--help` goes to stdout with the exit codes.
#[test]
fn usage_errors_exit_8_and_help_lists_the_exit_codes() {
    let missing = fsck(&["/nonexistent/node"], Streams::Pipes, b"");
    assert_eq!(missing.code(), 8, "{}", missing.describe());
    assert!(
        missing.stderr.contains("/nonexistent/node"),
        "{}",
        missing.describe()
    );
    let wrong = fsck(&["--repair", "--deep", "/tmp"], Streams::Pipes, b"");
    assert_eq!(wrong.code(), 8, "{}", wrong.describe());
    let help = fsck(&["--help"], Streams::Pipes, b"");
    assert_eq!(help.code(), 0);
    assert!(help.stdout.contains("Exit codes"), "{}", help.describe());
}
