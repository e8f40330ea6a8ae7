//! Crash-state enumeration over a WAL workload of appends, publications, a `truncate_after` and
//! a `drop_prefix` (over 200 storage operations). At every crash point and every allowed lost,
//! kept or torn state, boot must yield a log that
//! (a) holds every entry published before the crash, in order and unchanged,
//! (b) holds nothing past the last frontier that was being written,
//! (c) is one valid hash chain, and
//! (d) whose `Check` report names exactly what `Open` then does (after which all is clean).
//!
//! The workload runs twice: on an op-named log (`.wal`) and on a keyed one (`.log`, named by a
//! key the appender gives, as a partition's segments are), whose boot learns first ops from
//! headers and the frontier instead of from names.
//!
//! `WAL_CRASH_FULL=1` checks every state the model allows up to larger bounds (slow).
#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    reason = "test code: a failed unwrap is a failed test; casts are of small test values"
)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use iggy_io::{
    CrashState, EnumerationConfig, ReadOnly, ReadStorage, SimStorage, TraceOp, enumerate,
};
use iggy_wal::{Config, Mode, Naming, Wal, check_named, next_header};

type Model = BTreeMap<u64, Vec<u8>>;

const GROUP: u128 = 0x51;

fn config(naming: Naming) -> Config {
    Config {
        file_size_bytes: 6144,
        flush_bytes: 1500,
        unpublished_bytes_max: 1 << 20,
        naming,
        ..Config::new(GROUP)
    }
}

/// The key a keyed log's file gets when `op` starts it: increasing, and unlike the op.
fn key_of(op: u64) -> u64 {
    op * 1000 + 7
}

fn dir() -> &'static Path {
    Path::new("wal")
}

/// Records the workload; marks are `"<event> <phase> <arg> #<snapshot index>"`.
fn record(seed: u64, naming: Naming) -> (Vec<TraceOp>, Vec<Model>) {
    let mut x = seed | 1;
    let mut next = move |bound: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % bound
    };
    let storage = SimStorage::recording(seed);
    let mut snapshots: Vec<Model> = Vec::new();
    let mut model = Model::new();
    let mut mark = |storage: &SimStorage, label: String, model: &Model| {
        storage.mark(format!("{label} #{}", snapshots.len()));
        snapshots.push(model.clone());
    };
    let wal = match naming {
        Naming::ByOp => Wal::create(storage.clone(), dir(), config(naming), 1, 0).unwrap(),
        Naming::ByKey => {
            Wal::create_keyed(storage.clone(), dir(), config(naming), 1, 0, key_of(1)).unwrap()
        }
    };
    mark(&storage, "pub done 0".into(), &model);
    let mut since_publish = 0;
    for step in 0..90u64 {
        let len = next(1200) as usize;
        let body: Vec<u8> = (0..len).map(|i| (i as u64 * 31 + step) as u8).collect();
        let op = match naming {
            Naming::ByOp => wal.append_body(&body, 1, step).unwrap(),
            Naming::ByKey => {
                let (head, parent) = wal.head();
                let header = next_header(GROUP, head + 1, parent, 1, step, &body);
                wal.append_keyed(&header, &body, key_of(head + 1)).unwrap();
                head + 1
            }
        };
        model.insert(op, body);
        since_publish += 1;
        if since_publish >= 2 + next(3) {
            mark(&storage, format!("pub begin {op}"), &model);
            wal.publish().unwrap();
            mark(&storage, format!("pub done {op}"), &model);
            since_publish = 0;
        }
        if step == 40 {
            let cut = wal.head().0 - 4;
            model.retain(|op, _| *op <= cut);
            mark(&storage, format!("trunc begin {cut}"), &model);
            wal.truncate_after(cut).unwrap();
            mark(&storage, format!("trunc done {cut}"), &model);
            since_publish = 0;
        }
        if step == 70 {
            let upto = wal.published().head_op - 8;
            mark(&storage, format!("drop begin {upto}"), &model);
            wal.drop_prefix(upto).unwrap();
            let first = wal.first_op();
            model.retain(|op, _| *op >= first);
            mark(&storage, format!("drop done {upto}"), &model);
        }
    }
    let head = wal.head().0;
    mark(&storage, format!("pub begin {head}"), &model);
    wal.publish().unwrap();
    mark(&storage, format!("pub done {head}"), &model);
    // The workload rotated through several files, each named the way `naming` says.
    let names: Vec<String> = storage
        .list_dir(dir())
        .unwrap()
        .into_iter()
        .map(|e| e.name.to_string_lossy().into_owned())
        .filter(|name| name != "frontier")
        .collect();
    assert!(names.len() >= 3, "{names:?}");
    // Every file the frontier passed has its seal (what boot takes instead of reading it).
    let seals = names.iter().filter(|name| name.ends_with(".seal")).count();
    assert!(seals >= 1, "{names:?}");
    // The drop kept its retired files as spares, and the files after it reused them: the
    // enumeration crashes inside both renames and in every publication into a recycled file.
    let renames: Vec<(String, String)> = storage
        .trace()
        .into_iter()
        .filter_map(|op| match op {
            TraceOp::Rename { from, to } => Some((
                from.to_string_lossy().into_owned(),
                to.to_string_lossy().into_owned(),
            )),
            _ => None,
        })
        .collect();
    assert!(
        renames.iter().any(|(_, to)| to.ends_with(".spare")),
        "{renames:?}"
    );
    assert!(
        renames.iter().any(|(from, _)| from.ends_with(".spare")),
        "{renames:?}"
    );
    for name in names.iter().filter(|name| !name.ends_with(".spare")) {
        let name = name.strip_suffix(".seal").unwrap_or(name);
        let key = naming
            .parse(name.as_ref())
            .unwrap_or_else(|| panic!("{name}"));
        if naming == Naming::ByKey {
            assert_eq!(key % 1000, 7, "{name} is not keyed by key_of");
        }
    }
    (storage.trace(), snapshots)
}

struct Event<'a> {
    kind: &'a str,
    phase: &'a str,
    arg: u64,
    snapshot: usize,
}

fn parse(mark: &str) -> Event<'_> {
    let parts: Vec<&str> = mark.split(' ').collect();
    Event {
        kind: parts[0],
        phase: parts[1],
        arg: parts[2].parse().unwrap(),
        snapshot: parts[3].trim_start_matches('#').parse().unwrap(),
    }
}

fn check_state(
    crash: &CrashState<'_>,
    snapshots: &[Model],
    naming: Naming,
    sealed_states: &AtomicUsize,
) -> Result<(), String> {
    let check = |storage: &dyn Fn() -> SimStorage| {
        check_named(&ReadOnly::new(storage()), dir(), GROUP, naming).map_err(|e| e.to_string())
    };
    let events: Vec<Event<'_>> = crash.marks.iter().map(|m| parse(m)).collect();
    let Some(created) = events.first() else {
        // Creation had not returned: fresh or a created empty log are both fine.
        return match check(&|| crash.storage.clone()) {
            Ok(None) => Ok(()),
            Ok(Some(report)) if report.head_op == 0 => Ok(()),
            other => Err(format!("during creation: {other:?}")),
        };
    };
    assert_eq!(created.kind, "pub");
    // The last completed publication or truncation, and the one in flight (if any).
    let durable = events
        .iter()
        .rev()
        .find(|e| e.phase == "done" && e.kind != "drop")
        .ok_or("no durable event")?;
    let last = events
        .iter()
        .rev()
        .find(|e| e.kind != "drop")
        .ok_or("no event")?;
    let in_flight = (last.phase == "begin").then_some(last);
    let drop_bound = events
        .iter()
        .filter(|e| e.kind == "drop")
        .map(|e| e.arg + 1)
        .max();

    // (d) Check names exactly what Open does, and Open leaves nothing to do.
    let checked = check(&|| crash.storage.clone())
        .map_err(|e| format!("check refused: {e}"))?
        .ok_or("check saw a fresh log")?;
    let (wal, opened) = Wal::open(crash.storage.clone(), dir(), config(naming), Mode::Open)
        .map_err(|e| format!("open refused: {e}"))?
        .ok_or("open saw a fresh log")?;
    if checked != opened {
        return Err(format!("check {checked:?} != open {opened:?}"));
    }
    let after = check(&|| crash.storage.clone())
        .map_err(|e| e.to_string())?
        .ok_or("fresh")?;
    if !after.is_clean() {
        return Err(format!("open left work behind: {after:?}"));
    }
    if checked.sealed_bytes > 0 {
        sealed_states.fetch_add(1, Ordering::Relaxed);
    }

    let (head, _) = wal.head();
    let first = wal.first_op();
    let entries = if head >= first {
        wal.read(first, head).map_err(|e| e.to_string())?
    } else {
        Vec::new()
    };
    // (c) One chain.
    for pair in entries.windows(2) {
        if pair[1].header.parent != pair[0].header.checksum() {
            return Err(format!("chain broken at op {}", pair[1].header.op));
        }
    }
    // (a) Every published entry, unchanged (a truncation in flight may already have cut).
    let durable_model = &snapshots[durable.snapshot];
    let mut required = durable.arg;
    if let Some(e) = in_flight.filter(|e| e.kind == "trunc") {
        required = required.min(e.arg);
    }
    if head < required {
        return Err(format!("head {head} is below the published {required}"));
    }
    if first > drop_bound.unwrap_or(1) {
        return Err(format!(
            "first op {first} is past every drop_prefix ({drop_bound:?})"
        ));
    }
    // (b) Nothing past the frontier being written.
    let mut upper = durable.arg;
    if let Some(e) = in_flight.filter(|e| e.kind == "pub") {
        upper = upper.max(e.arg);
    }
    if head > upper {
        return Err(format!(
            "head {head} is past every frontier written ({upper})"
        ));
    }
    let in_flight_model = in_flight.map(|e| &snapshots[e.snapshot]);
    for entry in &entries {
        let op = entry.header.op;
        let matches = |model: &Model| model.get(&op) == Some(&entry.body);
        if op <= required && !matches(durable_model) {
            return Err(format!("published op {op} changed"));
        }
        if op > required && !matches(durable_model) && !in_flight_model.is_some_and(matches) {
            return Err(format!(
                "op {op} past the published prefix is not one that was written"
            ));
        }
    }
    Ok(())
}

#[test]
fn every_crash_state_boots_to_the_published_prefix() {
    enumerate_workload(Naming::ByOp);
}

#[test]
fn every_crash_state_of_a_keyed_log_boots_to_the_published_prefix() {
    enumerate_workload(Naming::ByKey);
}

fn enumerate_workload(naming: Naming) {
    let (trace, snapshots) = record(0xC0FFEE, naming);
    let storage_ops = trace.iter().filter(|op| op.is_storage_op()).count();
    assert!(storage_ops >= 200, "only {storage_ops} storage operations");
    let full = std::env::var_os("WAL_CRASH_FULL").is_some();
    let snapshots = Arc::new(Mutex::new(snapshots));
    // Both models of directory changes: in order (ext4, xfs), and any subset (where every
    // directory sync shows).
    for dir_order in [iggy_io::DirOrder::Ordered, iggy_io::DirOrder::Unordered] {
        let config = EnumerationConfig {
            max_states_per_point: if full { 256 } else { 24 },
            torn_states_per_point: if full { 16 } else { 4 },
            dir_order,
            ..EnumerationConfig::default()
        };
        let sealed_states = AtomicUsize::new(0);
        let counts = enumerate(&trace, &config, |crash| {
            check_state(crash, &snapshots.lock().unwrap(), naming, &sealed_states)
        })
        .unwrap_or_else(|failure| panic!("{dir_order:?}: {failure}"));
        // Boots that took files from their seals are among the states checked (every check
        // above held for them: the seals never changed what boot trusts).
        let sealed_states = sealed_states.into_inner();
        assert!(sealed_states > 0, "no state booted from a seal");
        eprintln!("{dir_order:?}: {sealed_states} states booted with sealed files");
        assert_eq!(counts.points, storage_ops + 1);
        assert!(counts.torn_states > 0, "{counts:?}");
        eprintln!("{dir_order:?}: checked {counts:?} over {storage_ops} storage operations");
    }
}
