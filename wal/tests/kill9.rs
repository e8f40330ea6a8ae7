//! kill -9 of a real process writing a real log (DESIGN §5): a child process appends and
//! publishes on `OsStorage` (io_uring where available), printing every op it has had
//! acknowledged; the parent reads a number of acknowledgments, sends SIGKILL, boots the log and
//! checks that every acknowledged record is there, unchanged and chained, then lets the next
//! child continue the same log. The kill point is chosen by counting acknowledgments, not by
//! time. A killed process keeps the page cache, so this exercises process-crash recovery,
//! including the discard of unpublished bytes already in the files.
//!
//! `WAL_KILL9_ROUNDS=N` runs more rounds (default 5).
#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    reason = "test code: a failed unwrap is a failed test; casts are of small test values"
)]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use iggy_io::OsStorage;
use iggy_wal::{Config, Mode, Wal};

const CHILD_ENV: &str = "IGGY_WAL_KILL9_CHILD_DIR";

fn config() -> Config {
    // Small files so the children rotate often; a budget that the loop below never reaches.
    // Every append is written to its file at once (flush_bytes 1): a kill then usually leaves
    // unpublished bytes in the page cache for boot to discard.
    Config {
        file_size_bytes: 256 << 10,
        flush_bytes: 1,
        ..Config::new(0x9)
    }
}

/// The body of op `op`: its length and bytes follow from the op, so the parent can check it.
fn body(op: u64) -> Vec<u8> {
    let len = 100 + (op * 7919 % 1800) as usize;
    (0..len).map(|i| (op as usize * 31 + i) as u8).collect()
}

/// Child mode: append forever, publishing every few records, printing `acked <op>` after each
/// publication returns.
fn child(dir: &Path) -> ! {
    let storage = OsStorage::open(dir).unwrap();
    let wal = match Wal::open(storage, Path::new("wal"), config(), Mode::Open).unwrap() {
        Some((wal, _)) => wal,
        None => Wal::create(
            OsStorage::open(dir).unwrap(),
            Path::new("wal"),
            config(),
            1,
            0,
        )
        .unwrap(),
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    loop {
        for _ in 0..3 {
            let op = wal.head().0 + 1;
            assert_eq!(wal.append_body(&body(op), 1, op).unwrap(), op);
        }
        // A few unpublished appends flushed to the file before each publication, so that kills
        // land with unpublished bytes in the page cache too.
        let published = wal.publish().unwrap();
        writeln!(out, "acked {}", published.head_op).unwrap();
        out.flush().unwrap();
    }
}

#[test]
fn kill_nine_never_loses_an_acknowledged_record() {
    if let Some(dir) = std::env::var_os(CHILD_ENV) {
        child(Path::new(&dir));
    }
    let rounds: usize = std::env::var("WAL_KILL9_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(5);
    let dir = tempfile::tempdir().unwrap();
    let mut acknowledged = 0u64;
    for round in 0..rounds {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "kill_nine_never_loses_an_acknowledged_record",
                "--nocapture",
            ])
            .env(CHILD_ENV, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let reader = BufReader::new(child.stdout.take().unwrap());
        let mut seen = 0;
        for line in reader.lines() {
            let line = line.unwrap();
            if let Some(op) = line.strip_prefix("acked ") {
                acknowledged = acknowledged.max(op.parse().unwrap());
                seen += 1;
                // Kill at a different depth each round.
                if seen >= 40 + round * 17 {
                    break;
                }
            }
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();

        let storage = OsStorage::open(dir.path()).unwrap();
        let (wal, report) = Wal::open(storage, Path::new("wal"), config(), Mode::Open)
            .unwrap_or_else(|error| panic!("round {round}: boot refused: {error}"))
            .unwrap();
        let head = wal.head().0;
        assert!(
            head >= acknowledged,
            "round {round}: head {head} < acknowledged {acknowledged}"
        );
        let entries = wal.read(1, head).unwrap();
        for (entry, op) in entries.iter().zip(1..) {
            assert_eq!(entry.header.op, op);
            assert_eq!(entry.body, body(op), "round {round}: op {op} changed");
        }
        for pair in entries.windows(2) {
            assert_eq!(pair[1].header.parent, pair[0].header.checksum());
        }
        eprintln!(
            "round {round}: acknowledged {acknowledged}, booted to {head}, discarded {} bytes",
            report.discarded_bytes
        );
    }
    assert!(acknowledged > 0);
}
