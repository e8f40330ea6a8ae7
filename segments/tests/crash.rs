//! Crash-state enumeration over a partition's appends with rotation, publications, and a
//! retention deletion: at every crash point and every allowed lost, kept or torn state, boot
//! (a) keeps every batch published before the crash, unchanged, from the first retained offset,
//! (b) never lets the next offset go back past a published one,
//! (c) refuses nothing (no orphan index, half-deleted segment or stray file makes it refuse), and
//! (d) `check` names exactly what `open` then does, after which all is clean.
//!
//! `SEGMENTS_CRASH_FULL=1` checks more states per crash point (slow).
#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    reason = "test code: a failed unwrap is a failed test; casts are of small test values"
)]

mod common;

use std::collections::BTreeMap;
use std::sync::Mutex;

use common::{client_batch, config, dir, read_all};
use iggy_io::{CrashState, EnumerationConfig, ReadOnly, SimStorage, TraceOp, enumerate};
use iggy_segments::{Partition, check};
use iggy_wal::Mode;

/// Base offset -> stamped batch bytes.
type Model = BTreeMap<u64, Vec<u8>>;

/// Marks: `"<event> <phase> <next offset> #<snapshot>"`.
fn record() -> (Vec<TraceOp>, Vec<Model>) {
    let storage = SimStorage::recording(21);
    let partition = Partition::create(storage.clone(), dir(), config()).unwrap();
    let mut snapshots: Vec<Model> = Vec::new();
    let mut model = Model::new();
    let mut mark = |label: String, model: &Model| {
        storage.mark(format!("{label} #{}", snapshots.len()));
        snapshots.push(model.clone());
    };
    mark("pub done 0".into(), &model);
    for i in 0..36u64 {
        let mut batch = client_batch(i, 1 + (i % 3) as u32);
        let appended = partition.append(&mut batch, 100 + i).unwrap();
        model.insert(appended.base_offset, batch);
        if i % 3 == 2 {
            let next = partition.next_offset();
            mark(format!("pub begin {next}"), &model);
            partition.publish().unwrap();
            mark(format!("pub done {next}"), &model);
        }
        if i == 26 {
            let next = partition.next_offset();
            mark(format!("ret begin {next}"), &model);
            let deleted = partition.apply_retention(0, None, Some(12_000)).unwrap();
            assert!(deleted >= 1, "the workload must delete segments");
            let first = partition.first_offset();
            model.retain(|offset, _| *offset >= first);
            mark(format!("ret done {next}"), &model);
        }
    }
    assert!(partition.segments().len() >= 2);
    (storage.trace(), snapshots)
}

fn check_state(crash: &CrashState<'_>, snapshots: &[Model]) -> Result<(), String> {
    let events: Vec<(&str, &str, u64, usize)> = crash
        .marks
        .iter()
        .map(|m| {
            let p: Vec<&str> = m.split(' ').collect();
            (
                p[0],
                p[1],
                p[2].parse().unwrap(),
                p[3].trim_start_matches('#').parse().unwrap(),
            )
        })
        .collect();
    if events.is_empty() {
        // Creation had not returned: nothing, or an empty partition.
        return match Partition::open(crash.storage.clone(), dir(), config(), Mode::Open) {
            Ok(None) => Ok(()),
            Ok(Some((p, _))) if p.next_offset() == 0 => Ok(()),
            other => Err(format!("during creation: {:?}", other.map(|o| o.is_some()))),
        };
    }
    let published = events
        .iter()
        .rev()
        .find(|e| e.0 == "pub" && e.1 == "done")
        .ok_or("no publication")?;
    let in_flight = events.last().filter(|e| e.1 == "begin" && e.0 == "pub");
    let checked = check(&ReadOnly::new(crash.storage.clone()), dir(), &config())
        .map_err(|e| format!("check refused: {e}"))?
        .ok_or("check: fresh")?;
    let (partition, opened) = Partition::open(crash.storage.clone(), dir(), config(), Mode::Open)
        .map_err(|e| format!("open refused: {e}"))?
        .ok_or("open: fresh")?;
    if checked != opened {
        return Err(format!("check {checked:?}\n!= open {opened:?}"));
    }
    let after = check(&crash.storage, dir(), &config())
        .map_err(|e| e.to_string())?
        .ok_or("fresh after open")?;
    if !after.is_clean() {
        return Err(format!("open left work: {after:?}"));
    }
    // (b) The next offset never goes back past what was published.
    let next = partition.next_offset();
    if next < published.2 {
        return Err(format!("next offset {next} < published {}", published.2));
    }
    let upper = in_flight.map_or(published.2, |e| e.2);
    if next > upper {
        return Err(format!(
            "next offset {next} past every frontier written ({upper})"
        ));
    }
    // (a) Every published batch from the first retained offset, unchanged.
    let durable = &snapshots[published.3];
    let first = partition.first_offset();
    let batches = read_all(&partition);
    let read: Model = batches
        .iter()
        .map(|b| (b.header.base_offset, b.bytes.clone()))
        .collect();
    for (offset, bytes) in durable.range(first..) {
        if read.get(offset) != Some(bytes) {
            return Err(format!(
                "published batch at offset {offset} lost or changed"
            ));
        }
    }
    let retention_started = events.iter().any(|e| e.0 == "ret");
    if !retention_started && first != 0 {
        return Err(format!("first offset {first} before any retention"));
    }
    Ok(())
}

#[test]
fn every_crash_state_keeps_the_published_batches_and_the_next_offset() {
    let (trace, snapshots) = record();
    let storage_ops = trace.iter().filter(|op| op.is_storage_op()).count();
    let full = std::env::var_os("SEGMENTS_CRASH_FULL").is_some();
    let snapshots = Mutex::new(snapshots);
    // Both models of directory changes: in order (ext4, xfs), and any subset (where every
    // directory sync shows).
    for dir_order in [iggy_io::DirOrder::Ordered, iggy_io::DirOrder::Unordered] {
        let config = EnumerationConfig {
            max_states_per_point: if full { 256 } else { 16 },
            torn_states_per_point: if full { 16 } else { 3 },
            dir_order,
            ..EnumerationConfig::default()
        };
        let counts = enumerate(&trace, &config, |crash| {
            check_state(crash, &snapshots.lock().unwrap())
        })
        .unwrap_or_else(|failure| panic!("{dir_order:?}: {failure}"));
        assert_eq!(counts.points, storage_ops + 1);
        assert!(counts.torn_states > 0, "{counts:?}");
        eprintln!("{dir_order:?}: checked {counts:?} over {storage_ops} storage operations");
    }
}
