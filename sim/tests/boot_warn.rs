//! Boot's WARN line for what it discards, as the restarted node of the article's case prints
//! it: one line per segment file with the group, the incarnation, the file's start offset, the
//! durable bytes and the discarded bytes, adding up to what the boot report says. Alone in its
//! test binary: `tracing` caches which call sites are enabled, and a subscriber set for one
//! thread while other tests run in parallel would see no line.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::io::Write;
use std::sync::{Arc, Mutex};

use iggy_sim::failover::{self, Scale, Setup};

/// A `tracing` writer that keeps what it is given.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_restart_names_every_discarded_tail_with_its_byte_counts() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .finish();
    tracing::subscriber::set_global_default(subscriber).unwrap();
    let report = failover::restart(Setup::article(1), &Scale::scaled()).unwrap();
    let text = failover::render_restart(&report);
    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    for r in report.recovered.iter().filter(|r| r.label != "metadata") {
        let discarded = report.discarded.get(&r.label).copied().unwrap_or(0);
        assert!(discarded > 0, "{}:\n{text}", r.label);
        let partition: u32 = r.label.rsplit('.').next().unwrap().parse().unwrap();
        let group = iggy_recovery::PartitionKey {
            stream: 1,
            topic: 1,
            partition,
        }
        .group_id();
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| {
                l.contains("discarding unpublished bytes beyond the durable WAL frontier")
                    && l.contains(&format!("group={group:#x} "))
            })
            .collect();
        assert!(!lines.is_empty(), "no WARN line for {}:\n{log}", r.label);
        let mut sum = 0;
        for line in &lines {
            assert!(line.contains("WARN"), "{line}");
            assert!(line.contains("incarnation="), "{line}");
            assert!(line.contains("start_offset="), "{line}");
            // Nothing of the partition was published.
            assert!(line.contains("durable_bytes=0 "), "{line}");
            let bytes = line.split("discarded_bytes=").nth(1).unwrap();
            let bytes: u64 = bytes
                .split(|c: char| !c.is_ascii_digit())
                .next()
                .unwrap()
                .parse()
                .unwrap();
            sum += bytes;
        }
        assert_eq!(sum, discarded, "{}: {lines:?}", r.label);
    }
}
