//! `iggy-sim` run as the built executable, the way `README.md` tells a person to: a range of
//! seeds, a safeguard turned off (the failure it prints, and its replay command reproducing it
//! byte for byte), a failover case, a closed pipe, usage errors. Each run has a deadline that
//! turns a hang into a failure naming the process's threads.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::process::Command;
use std::time::Duration;

use iggy_testkit::{Output, Run};

const DEADLINE: Duration = Duration::from_secs(300);

fn sim(args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_iggy-sim"));
    command.args(args);
    Run::new(command).deadline(DEADLINE).output()
}

/// `iggy-sim --seeds A..B` prints a line per seed and a summary, exit 0.
#[test]
fn a_range_of_seeds_passes_with_a_line_each() {
    let out = sim(&["--seeds", "0..3"]);
    assert_eq!(out.code(), 0, "{}", out.describe());
    assert_eq!(out.stdout.matches(": ok").count(), 3, "{}", out.describe());
    assert!(
        out.stdout.contains("3 seeds, 0 failed"),
        "{}",
        out.describe()
    );
}

/// The README's safeguard command fails with exit 1, names the checker and prints the command
/// that replays it; that command (as a process) prints the same failure: a seed replays.
#[test]
fn a_safeguard_off_fails_and_its_replay_command_reproduces_it() {
    let out = sim(&["--seed", "0", "--without", "body-fetch"]);
    assert_eq!(out.code(), 1, "{}", out.describe());
    assert!(out.stdout.contains("checker `"), "{}", out.describe());
    let replay = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("replay: cargo run --release -p iggy-sim -- "))
        .unwrap_or_else(|| panic!("no replay line: {}", out.describe()));
    let args: Vec<&str> = replay.split_whitespace().collect();
    let again = sim(&args);
    assert_eq!(again.code(), 1, "{}", again.describe());
    let failure = |text: &str| {
        text.lines()
            .find(|l| l.starts_with("checker `"))
            .map(str::to_string)
    };
    assert_eq!(failure(&again.stdout), failure(&out.stdout));
}

/// `iggy-sim failover kill-leader` at the scaled load: the timeline and the integrity check,
/// exit 0.
#[test]
fn a_failover_case_prints_its_timeline_and_integrity() {
    let out = sim(&["failover", "kill-leader"]);
    assert_eq!(out.code(), 0, "{}", out.describe());
    assert!(
        out.stdout.contains("groups changed view"),
        "{}",
        out.describe()
    );
    assert!(
        out.stdout.contains("integrity: ") && !out.stdout.contains("FAILED"),
        "{}",
        out.describe()
    );
}

/// `iggy-sim --seeds 0..50 | head -c 100`: the reader leaves, the simulator stops without a
/// panic; usage errors exit 2.
#[test]
fn a_closed_pipe_stops_it_and_usage_errors_exit_2() {
    let mut command = Command::new(env!("CARGO_BIN_EXE_iggy-sim"));
    command.args(["--seeds", "0..50"]);
    let out = Run::new(command)
        .close_stdout_after(100)
        .deadline(DEADLINE)
        .output();
    assert!(!out.stderr.contains("panicked"), "{}", out.describe());
    let bad = sim(&["--seeds", "5..1"]);
    assert_eq!(bad.code(), 2, "{}", bad.describe());
    let unknown = sim(&["--without", "no-such-safeguard", "--seed", "1"]);
    assert_eq!(unknown.code(), 2, "{}", unknown.describe());
}
