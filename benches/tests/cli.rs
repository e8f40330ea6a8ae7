//! `iggy-bench` tells what it measured and refuses to measure the wrong place: it names the
//! device and file system (and warns on tmpfs), gives medians and spreads over several runs,
//! creates `--dir` only when asked, and says when a compare table is one round.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::process::Command;

use iggy_io::ReadStorage;

fn bench(args: &[&str]) -> (i32, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_iggy-bench"))
        .args(args)
        .output()
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

const TINY: [&str; 7] = [
    "--total-mib",
    "1",
    "--sync-iterations",
    "4",
    "--batch",
    "16",
    "--json",
];

/// A `--dir` that does not exist is refused and not created (the README's `/your/disk` was
/// created at the root before); `--create-dir` creates it.
#[test]
fn a_missing_dir_is_refused_unless_asked_to_create_it() {
    let temp = tempfile::tempdir().unwrap();
    let missing = temp.path().join("your/disk");
    let missing = missing.to_str().unwrap();
    let (code, _, err) = bench(&["disk", "--dir", missing, "--runs", "1"]);
    assert_eq!(code, 8, "{err}");
    assert!(
        err.contains("does not exist") && err.contains("--create-dir"),
        "{err}"
    );
    assert!(!temp.path().join("your").exists());
    let mut args = vec!["disk", "--dir", missing, "--create-dir", "--runs", "1"];
    args.extend(TINY);
    let (code, _, err) = bench(&args);
    assert_eq!(code, 0, "{err}");
    assert!(temp.path().join("your/disk").is_dir());
}

/// The report names what was measured, and gives a median and range for every figure over the
/// runs; on tmpfs it warns that these are not disk figures.
#[test]
fn the_report_names_the_file_system_and_spreads_over_runs() {
    let temp = tempfile::tempdir().unwrap();
    let mut args = vec![
        "disk",
        "--dir",
        temp.path().to_str().unwrap(),
        "--runs",
        "3",
    ];
    args.extend(TINY);
    let (code, out, err) = bench(&args);
    assert_eq!(code, 0, "{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(report["environment"]["file_system"].is_string(), "{report}");
    assert!(report["environment"]["device"].is_string(), "{report}");
    assert_eq!(report["runs"].as_array().unwrap().len(), 3);
    let spread = &report["summary"]["append_prefilled_records_per_second"];
    assert!(
        spread["min"].as_f64() <= spread["median"].as_f64(),
        "{spread}"
    );
    assert!(
        spread["median"].as_f64() <= spread["max"].as_f64(),
        "{spread}"
    );
    let shm = std::path::Path::new("/dev/shm");
    if iggy_io::mount_info(shm).is_some_and(|m| m.file_system == "tmpfs") {
        let dir = tempfile::tempdir_in(shm).unwrap();
        let mut args = vec!["disk", "--dir", dir.path().to_str().unwrap(), "--runs", "1"];
        args.extend(&TINY[..6]);
        let (code, out, _) = bench(&args);
        assert_eq!(code, 0);
        assert!(
            out.contains("WARNING: tmpfs") && out.contains("not disk baselines"),
            "{out}"
        );
        assert!(out.contains("one run"), "a single run says so: {out}");
    }
}

#[test]
fn a_one_round_compare_says_so() {
    let caveat = iggy_benches::compare::caveat(1).unwrap();
    assert!(caveat.contains("one round") && caveat.contains("--rounds 3"));
    assert_eq!(iggy_benches::compare::caveat(3), None);
}

/// `boot` builds a node of idle partitions, boots it without the clean-shutdown marker, after a
/// clean shutdown and after a crash that left an unpublished batch in every partition, and
/// removes the node after.
#[test]
fn boot_times_both_boots_and_counts_what_they_hold_open() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().to_str().unwrap();
    let (code, out, err) = bench(&["boot", "--dir", dir, "--partitions", "3,7", "--json"]);
    assert_eq!(code, 0, "{err}");
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    let runs = json["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    for (run, partitions) in runs.iter().zip([3u64, 7]) {
        assert_eq!(run["partitions"], partitions);
        assert!(run["unmarked_seconds"].as_f64().unwrap() > 0.0);
        assert!(run["clean_seconds"].as_f64().unwrap() > 0.0);
        assert!(run["crash_seconds"].as_f64().unwrap() > 0.0);
        // An idle partition keeps only its head segment open (its frontier and superblock are
        // opened by the first write that needs them), and the metadata group a few of its own.
        if let Some(open) = run["open_files"].as_u64() {
            assert!(
                (partitions..=partitions + 4).contains(&open),
                "{open} open files: {run}"
            );
        }
    }
    assert!(json["failed"].is_null());
    // The nodes it built are gone.
    let parent = iggy_io::OsStorage::open(temp.path()).unwrap();
    assert_eq!(parent.list_dir("").unwrap(), Vec::new());
}

fn tiny_disk(dir: &str, json: bool) -> std::process::Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_iggy-bench"));
    command.args(["disk", "--dir", dir, "--runs", "1"]);
    command.args(if json { &TINY[..] } else { &TINY[..6] });
    command
}

/// On a terminal, stderr shows the progress bar while it measures; on a pipe it shows none and
/// stdout gets the same report.
#[test]
fn a_terminal_gets_a_progress_bar_and_a_pipe_does_not() {
    use iggy_testkit::{Run, Streams};
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().to_str().unwrap();
    let piped = Run::new(tiny_disk(dir, false)).output();
    assert_eq!(piped.code(), 0, "{}", piped.describe());
    assert!(!piped.stderr.contains("[="), "{}", piped.describe());
    assert!(
        piped.stdout.contains("iggy-bench disk in"),
        "{}",
        piped.describe()
    );
    let shown = Run::new(tiny_disk(dir, false))
        .streams(Streams::StderrOnTerminal)
        .output();
    assert_eq!(shown.code(), 0, "{}", shown.describe());
    assert!(
        shown.stderr.contains("/5"),
        "no progress bar: {}",
        shown.describe()
    );
    assert!(
        shown.stdout.contains("iggy-bench disk in"),
        "{}",
        shown.describe()
    );
}

/// `iggy-bench disk ... | head -c 20`: the reader leaves; the bench stops quietly with exit 0
/// (before, `println!` panicked on the closed pipe with exit 101).
#[test]
fn a_reader_that_goes_away_stops_the_bench_quietly() {
    use iggy_testkit::Run;
    let temp = tempfile::tempdir().unwrap();
    let out = Run::new(tiny_disk(temp.path().to_str().unwrap(), false))
        .close_stdout_after(20)
        .output();
    assert_eq!(out.code(), 0, "{}", out.describe());
    assert!(!out.stderr.contains("panicked"), "{}", out.describe());
}
