//! `iggy-inspect` run as the built executable on a populated node, the way `README.md` tells an
//! operator to: pipes and a terminal, `| head` (a reader that goes away), exit codes for each
//! verdict, JSON parsed. Each run has a deadline that turns a hang into a failure naming the
//! process's threads.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use iggy_io::OsStorage;
use iggy_recovery::populate::{Options, populate};
use iggy_testkit::{Output, Run, Streams};
use serde_json::Value;

const DEADLINE: Duration = Duration::from_secs(120);

fn inspect(args: &[&str], streams: Streams) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_iggy-inspect"));
    command.args(args);
    Run::new(command)
        .streams(streams)
        .deadline(DEADLINE)
        .output()
}

/// The README's example node (metadata and 3 partitions with unpublished tails).
fn node() -> (tempfile::TempDir, PathBuf) {
    let temp = tempfile::tempdir().unwrap();
    let node = temp.path().join("node");
    let storage = OsStorage::create(&node).unwrap();
    populate(&storage, Path::new(""), &Options::default()).unwrap();
    (temp, node)
}

fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// The README's command (`segment --messages` of a partition's first segment) and `node`, on a
/// pipe and on a terminal: the same text, exit 0 for a segment that verifies, 1 for a node boot
/// would change (its unpublished tails).
#[test]
fn the_readme_commands_print_the_same_on_a_pipe_and_a_terminal() {
    let (_temp, node) = node();
    let segment = node.join("partitions/1.1.1/00000000000000000000.log");
    let piped = inspect(&["segment", "--messages", s(&segment)], Streams::Pipes);
    assert_eq!(piped.code(), 0, "{}", piped.describe());
    assert!(piped.stdout.contains("offset"), "{}", piped.describe());
    let shown = inspect(
        &["segment", "--messages", s(&segment)],
        Streams::AllOnTerminal,
    );
    assert_eq!(shown.code(), 0, "{}", shown.describe());
    // A terminal turns "\n" into "\r\n"; nothing else differs.
    assert_eq!(shown.stdout.replace("\r\n", "\n"), piped.stdout);

    let verdict = inspect(&["node", s(&node)], Streams::Pipes);
    assert_eq!(verdict.code(), 1, "{}", verdict.describe());
    let json = inspect(&["node", s(&node), "--json"], Streams::Pipes);
    assert_eq!(json.code(), 1, "{}", json.describe());
    let value: Value = serde_json::from_str(&json.stdout).unwrap();
    assert!(value.is_object(), "{value}");
}

/// `iggy-inspect wal <dir> --entries | head -c 200`: the reader leaves after 200 bytes; the
/// process ends by itself with its verdict, and nothing panics.
#[test]
fn a_reader_that_goes_away_ends_the_output_quietly() {
    let (_temp, node) = node();
    let mut command = Command::new(env!("CARGO_BIN_EXE_iggy-inspect"));
    command.args(["wal", "--entries", s(&node.join("partitions/1.1.1"))]);
    let out = Run::new(command)
        .close_stdout_after(200)
        .deadline(DEADLINE)
        .output();
    assert!(matches!(out.code(), 0 | 1), "{}", out.describe());
    assert!(!out.stderr.contains("panicked"), "{}", out.describe());
}

/// Exit codes as `--help` lists them: a file of another kind is 2 (named by its magic), a
/// missing path 8 with the path on stderr, `--help` 0.
#[test]
fn exit_codes_name_the_verdict() {
    let (_temp, node) = node();
    let wrong = inspect(
        &[
            "superblock",
            s(&node.join("partitions/1.1.1/00000000000000000000.log")),
        ],
        Streams::Pipes,
    );
    assert_eq!(wrong.code(), 2, "{}", wrong.describe());
    let missing = inspect(&["superblock", "/nonexistent/superblock"], Streams::Pipes);
    assert_eq!(missing.code(), 8, "{}", missing.describe());
    assert!(
        missing.stderr.contains("/nonexistent/superblock"),
        "{}",
        missing.describe()
    );
    let help = inspect(&["--help"], Streams::Pipes);
    assert_eq!(help.code(), 0, "{}", help.describe());
    assert!(help.stdout.contains("Exit codes"), "{}", help.describe());
    let constants = inspect(&["constants", "--json"], Streams::Pipes);
    assert_eq!(constants.code(), 0, "{}", constants.describe());
    let _: Value = serde_json::from_str(&constants.stdout).unwrap();
}
