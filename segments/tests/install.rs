//! Crash-state enumeration over the staged install of a partition with 5+ segments onto one
//! with different content: at every crash point boot yields exactly the old partition (every
//! batch, every consumer offset, the same next offset) or exactly the new one, never a mix, and
//! the new one once `commit` has returned. A second run drops the directory fsync after the
//! commit-point rename and shows that the enumeration catches it.
//!
//! `INSTALL_CRASH_FULL=1` checks more states per crash point (slow).
#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    reason = "test code: a failed unwrap is a failed test; casts are of small test values"
)]

mod common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use common::{client_batch, config, dir, read_all, segment_bytes};
use iggy_io::{
    DirEntry, EnumerationConfig, OpenMode, ReadOnly, ReadStorage, SimStorage, Storage, TraceOp,
    enumerate,
};
use iggy_segments::install::{self, RETIRED_DIR};
use iggy_segments::offsets::ConsumerKind;
use iggy_segments::{Install, Partition, StateArtifact, check};
use iggy_superblock::VsrState;
use iggy_wal::Mode;

/// What a partition holds, as boot gives it back.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Content {
    batches: Vec<(u64, Vec<u8>)>,
    offsets: Vec<(ConsumerKind, u32, u64)>,
    next_offset: u64,
}

fn content(partition: &Partition<impl Storage + Clone>, report: &iggy_segments::Report) -> Content {
    let mut offsets: Vec<_> = report
        .offsets
        .iter()
        .map(|o| (o.kind, o.id, o.offset))
        .collect();
    offsets.sort();
    Content {
        batches: read_all(partition)
            .into_iter()
            .map(|b| (b.header.base_offset, b.bytes))
            .collect(),
        offsets,
        next_offset: partition.next_offset(),
    }
}

/// Fills a partition with `count` batches (payloads from `seed`) and two consumer offsets.
fn fill<S: Storage + Clone>(storage: &S, at: &Path, seed: u64, count: u64) -> Content {
    let partition = Partition::create(storage.clone(), at, config()).unwrap();
    for i in 0..count {
        let mut batch = client_batch(seed + i, 1 + ((seed + i) % 3) as u32);
        partition.append(&mut batch, 1_000 + i).unwrap();
    }
    partition.publish().unwrap();
    partition
        .offsets()
        .store(ConsumerKind::Consumer, 1, seed)
        .unwrap();
    partition
        .offsets()
        .store(ConsumerKind::Group, 2, seed + 1)
        .unwrap();
    assert!(
        partition.segments().len() >= 5,
        "{}",
        partition.segments().len()
    );
    partition.close().unwrap();
    let (partition, report) = Partition::open(storage.clone(), at, config(), Mode::Open)
        .unwrap()
        .unwrap();
    content(&partition, &report)
}

/// The set-up of every install here: the old partition in `dir()` and a leader's in `leader/`.
/// Returns the old and the new contents and the leader's segment files (start, bytes).
fn old_and_leader<S: Storage + Clone>(storage: &S) -> (Content, Content, Vec<(u64, Vec<u8>)>) {
    let old = fill(storage, dir(), 0, 45);
    let leader = Path::new("leader");
    let new = fill(storage, leader, 500, 60);
    assert_ne!(old, new);
    let (source, _) = Partition::open(storage.clone(), leader, config(), Mode::Open)
        .unwrap()
        .unwrap();
    let segments = segment_bytes(storage, &source);
    (old, new, segments)
}

/// Records set-up, then the install; returns the trace and the old and new contents.
fn record<S: Storage + Clone>(storage: &S, sim: &SimStorage) -> (Vec<TraceOp>, Content, Content) {
    let (old, new, segments) = old_and_leader(storage);
    sim.mark("install-begin");
    install_from(storage, &segments, &new).unwrap();
    sim.mark("install-done");
    install::finish(storage, dir()).unwrap();
    sim.mark("finished");
    (sim.trace(), old, new)
}

/// Receives `segments` and `new`'s offsets into `dir()` and commits.
fn install_from<S: Storage + Clone>(
    storage: &S,
    segments: &[(u64, Vec<u8>)],
    new: &Content,
) -> Result<(), iggy_segments::PartitionError> {
    let mut install = Install::new(storage.clone(), dir(), config());
    for (start, bytes) in segments {
        install.receive_segment(*start, bytes)?;
    }
    install.receive_state(StateArtifact {
        next_offset: new.next_offset,
        offsets: new.offsets.clone(),
        dedup: Vec::new(),
    })?;
    install.commit(VsrState::default())
}

fn enumerate_install(
    trace: &[TraceOp],
    old: &Content,
    new: &Content,
    dir_order: iggy_io::DirOrder,
) -> Result<iggy_io::Enumeration, iggy_io::CrashFailure> {
    let full = std::env::var_os("INSTALL_CRASH_FULL").is_some();
    let config_e = EnumerationConfig {
        max_states_per_point: if full { 256 } else { 8 },
        torn_states_per_point: if full { 8 } else { 1 },
        start_at_mark: Some("install-begin".into()),
        dir_order,
        ..EnumerationConfig::default()
    };
    enumerate(trace, &config_e, |crash| {
        let committed = crash.marks.iter().any(|m| m == "install-done");
        let checked = check(&ReadOnly::new(crash.storage.clone()), dir(), &config())
            .map_err(|e| format!("check refused: {e}"))?
            .ok_or("check: fresh")?;
        let (partition, report) =
            Partition::open(crash.storage.clone(), dir(), config(), Mode::Open)
                .map_err(|e| format!("open refused: {e}"))?
                .ok_or("open: fresh")?;
        let found = content(&partition, &report);
        if checked.next_offset != found.next_offset
            || checked.segments.len() != report.segments.len()
        {
            return Err("check and open disagree".into());
        }
        let after = check(&crash.storage, dir(), &config())
            .map_err(|e| e.to_string())?
            .ok_or("fresh after open")?;
        if !after.is_clean() {
            return Err(format!("open left work: {:?}", after.findings));
        }
        if found == *new {
            return Ok(());
        }
        if found == *old && !committed {
            return Ok(());
        }
        Err(format!(
            "committed={committed}: neither the old nor the new partition (next offset {}, {} batches)",
            found.next_offset,
            found.batches.len()
        ))
    })
}

#[test]
fn every_crash_state_boots_to_the_whole_old_or_the_whole_new_partition() {
    let sim = SimStorage::recording(31);
    let (trace, old, new) = record(&sim, &sim);
    // Both models of directory changes: in order (ext4, xfs), and any subset (where every
    // directory sync of the install shows).
    for dir_order in [iggy_io::DirOrder::Ordered, iggy_io::DirOrder::Unordered] {
        let counts = enumerate_install(&trace, &old, &new, dir_order)
            .unwrap_or_else(|f| panic!("{dir_order:?}: {f}"));
        assert!(counts.points > 50, "{counts:?}");
        eprintln!("{dir_order:?}: checked {counts:?}");
    }
}

/// A `SimStorage` with one of two faults planted in the install's directory operations.
#[derive(Clone)]
struct Hooked {
    inner: SimStorage,
    hook: Hook,
    /// Set by the rename the hook keys on.
    armed: Arc<AtomicBool>,
    /// Directory operations left before `FailAfterBackup` fails them all.
    budget: Arc<std::sync::atomic::AtomicUsize>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Hook {
    /// Drop the one `sync_dir` that follows the rename onto `.install-retired` (the commit).
    SkipCommitSync,
    /// Fail every directory operation once the budget is spent after `.install-backup` exists
    /// (a process that dies part-way through `commit`).
    FailAfterBackup,
}

impl Hooked {
    fn new(inner: SimStorage, hook: Hook, budget: usize) -> Self {
        Self {
            inner,
            hook,
            armed: Arc::new(AtomicBool::new(false)),
            budget: Arc::new(std::sync::atomic::AtomicUsize::new(budget)),
        }
    }

    /// Spends one directory operation of the budget, or fails once it is spent.
    fn spend(&self) -> iggy_io::Result<()> {
        if self.hook != Hook::FailAfterBackup || !self.armed.load(Ordering::SeqCst) {
            return Ok(());
        }
        let left = self.budget.load(Ordering::SeqCst);
        if left == 0 {
            return Err(iggy_io::Error::new(
                iggy_io::Op::Rename,
                "interrupted",
                iggy_io::ErrorKind::Injected("interrupted by the test"),
            ));
        }
        self.budget.store(left - 1, Ordering::SeqCst);
        Ok(())
    }
}

impl ReadStorage for Hooked {
    type Reader = <SimStorage as ReadStorage>::Reader;
    fn open_read(&self, path: impl AsRef<Path>) -> iggy_io::Result<Self::Reader> {
        self.inner.open_read(path)
    }
    fn list_dir(&self, path: impl AsRef<Path>) -> iggy_io::Result<Vec<DirEntry>> {
        self.inner.list_dir(path)
    }
    fn exists(&self, path: impl AsRef<Path>) -> iggy_io::Result<bool> {
        self.inner.exists(path)
    }
    fn lock_holder(&self, path: impl AsRef<Path>) -> iggy_io::Result<Option<iggy_io::LockHolder>> {
        self.inner.lock_holder(path)
    }
}

impl Storage for Hooked {
    type File = <SimStorage as Storage>::File;
    fn open(&self, path: impl AsRef<Path>, mode: OpenMode) -> iggy_io::Result<Self::File> {
        self.spend()?;
        self.inner.open(path, mode)
    }
    fn create_dir(&self, path: impl AsRef<Path>) -> iggy_io::Result<()> {
        self.spend()?;
        self.inner.create_dir(path)
    }
    fn sync_dir(&self, path: impl AsRef<Path>) -> iggy_io::Result<()> {
        self.spend()?;
        if self.hook == Hook::SkipCommitSync && self.armed.swap(false, Ordering::SeqCst) {
            return Ok(());
        }
        self.inner.sync_dir(path)
    }
    fn rename(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> iggy_io::Result<()> {
        self.spend()?;
        self.inner.rename(from, to.as_ref())?;
        let key = match self.hook {
            Hook::SkipCommitSync => RETIRED_DIR,
            Hook::FailAfterBackup => install::BACKUP_DIR,
        };
        if to.as_ref().ends_with(key) {
            self.armed.store(true, Ordering::SeqCst);
        }
        Ok(())
    }
    fn hard_link(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> iggy_io::Result<()> {
        self.spend()?;
        self.inner.hard_link(from, to)
    }
    fn unlink(&self, path: impl AsRef<Path>) -> iggy_io::Result<()> {
        self.spend()?;
        self.inner.unlink(path)
    }
    fn remove_dir_all(&self, path: impl AsRef<Path>) -> iggy_io::Result<()> {
        self.spend()?;
        self.inner.remove_dir_all(path)
    }
    fn lock(&self, path: impl AsRef<Path>) -> iggy_io::Result<iggy_io::FileLock> {
        self.inner.lock(path)
    }
}

#[test]
fn the_enumeration_catches_a_missing_commit_point_fsync() {
    let sim = SimStorage::recording(31);
    let storage = Hooked::new(sim.clone(), Hook::SkipCommitSync, 0);
    let (trace, old, new) = record(&storage, &sim);
    let failure = enumerate_install(&trace, &old, &new, iggy_io::DirOrder::Ordered)
        .expect_err("without the commit-point fsync a committed install can roll back");
    assert!(failure.reason.contains("committed=true"), "{failure}");
}

/// An install that dies part-way through moving the new files in leaves `.install-backup`; the
/// recovery that follows is itself crash-enumerated: from every crash point of the recovery,
/// the next boot yields exactly the old partition (the restore links files back and never moves
/// them out of the backup, so it can run again).
#[test]
fn a_recovery_interrupted_by_a_crash_still_restores_the_old_partition() {
    for budget in [1usize, 6, 13, 21] {
        let sim = SimStorage::recording(41);
        let (old, new, segments) = old_and_leader(&sim);
        let interrupted = Hooked::new(sim.clone(), Hook::FailAfterBackup, budget);
        assert!(install_from(&interrupted, &segments, &new).is_err());
        assert!(sim.exists(dir().join(install::BACKUP_DIR)).unwrap());
        sim.crash_process();
        sim.mark("recover-begin");
        let (partition, report) = Partition::open(sim.clone(), dir(), config(), Mode::Open)
            .unwrap()
            .unwrap();
        assert_eq!(content(&partition, &report), old, "budget {budget}");
        drop(partition);
        sim.mark("recover-done");
        for dir_order in [iggy_io::DirOrder::Ordered, iggy_io::DirOrder::Unordered] {
            let config_e = EnumerationConfig {
                max_states_per_point: 8,
                torn_states_per_point: 1,
                start_at_mark: Some("recover-begin".into()),
                dir_order,
                ..EnumerationConfig::default()
            };
            let counts = enumerate(&sim.trace(), &config_e, |crash| {
                let (partition, report) =
                    Partition::open(crash.storage.clone(), dir(), config(), Mode::Open)
                        .map_err(|e| format!("open refused: {e}"))?
                        .ok_or("fresh")?;
                if content(&partition, &report) == old {
                    Ok(())
                } else {
                    Err(format!("budget {budget}: not the old partition"))
                }
            })
            .unwrap_or_else(|f| panic!("{dir_order:?}: {f}"));
            assert!(counts.points > 10, "{counts:?}");
        }
    }
}

/// With an install that did not commit, `check` analyses the partition recovery will restore,
/// and names its files where they will be: its report equals what `open` then reports.
#[test]
fn check_of_an_uncommitted_install_reports_what_open_does() {
    for budget in [0usize, 4, 9, 17] {
        let sim = SimStorage::recording(43);
        let (_, new, segments) = old_and_leader(&sim);
        let interrupted = Hooked::new(sim.clone(), Hook::FailAfterBackup, budget);
        assert!(install_from(&interrupted, &segments, &new).is_err());
        sim.crash_process();
        let checked = check(&ReadOnly::new(sim.clone()), dir(), &config())
            .unwrap()
            .unwrap();
        assert!(
            checked
                .findings
                .iter()
                .filter(|f| !matches!(f.kind, iggy_segments::FindingKind::Install(_)))
                .all(|f| !f.file.starts_with(dir().join(install::BACKUP_DIR))),
            "{checked:?}"
        );
        let (_, opened) = Partition::open(sim.clone(), dir(), config(), Mode::Open)
            .unwrap()
            .unwrap();
        assert_eq!(checked, opened, "budget {budget}");
    }
}

/// Every batch is verified as it lands: a flipped bit anywhere in a received segment (40 random
/// flips) refuses it, the live partition is untouched, and boot sweeps what was staged.
#[test]
fn a_damaged_segment_is_refused_as_it_lands_and_nothing_live_changes() {
    let sim = SimStorage::recording(44);
    let (old, _, segments) = old_and_leader(&sim);
    let mut rng = iggy_io::soak::SeedRng::new(7);
    for _ in 0..40 {
        let (start, bytes) = &segments[rng.below(segments.len() as u64) as usize];
        let mut damaged = bytes.clone();
        let at = rng.below(damaged.len() as u64) as usize;
        damaged[at] ^= 1 << rng.below(8);
        let mut install = Install::new(sim.clone(), dir(), config());
        let mut received = Ok(());
        for (s, b) in &segments {
            let b = if s == start { &damaged } else { b };
            received = install.receive_segment(*s, b);
            if received.is_err() {
                break;
            }
        }
        assert!(
            received.is_err(),
            "a flipped bit at byte {at} of segment {start} was accepted"
        );
    }
    let (partition, report) = Partition::open(sim.clone(), dir(), config(), Mode::Open)
        .unwrap()
        .unwrap();
    assert_eq!(content(&partition, &report), old);
    assert!(
        report
            .findings
            .iter()
            .any(|f| f.kind == iggy_segments::FindingKind::StagingLeftover),
        "{:?}",
        report.findings
    );
}

/// The install rewrites the superblock's offset frontier to the installed log's end, whatever
/// the transfer brings (the old partition's frontier may be ahead of the leader's log), and
/// stages both frontier slots (sequences 0 and 1): the installed partition boots with nothing
/// to repair but its indexes, the superblock naming exactly the log's end.
#[test]
fn an_install_sets_the_offset_frontier_to_the_log_end_and_boots_clean() {
    for brought in [0, 10_000_000] {
        let storage = SimStorage::recording(41);
        let (_, new, segments) = old_and_leader(&storage);
        let mut install = Install::new(storage.clone(), dir(), config());
        for (start, bytes) in &segments {
            install.receive_segment(*start, bytes).unwrap();
        }
        install
            .receive_state(StateArtifact {
                next_offset: new.next_offset,
                offsets: new.offsets.clone(),
                dedup: Vec::new(),
            })
            .unwrap();
        install
            .commit(VsrState {
                offset_frontier: brought,
                ..VsrState::default()
            })
            .unwrap();
        install::finish(&storage, dir()).unwrap();
        let superblock = iggy_superblock::read(&storage, dir(), &config().identity).unwrap();
        let iggy_superblock::Opened::Present { record, .. } = superblock else {
            panic!("no superblock")
        };
        assert_eq!(
            record.state.offset_frontier, new.next_offset,
            "brought {brought}"
        );
        let report = check(&ReadOnly::new(storage.clone()), dir(), &config())
            .unwrap()
            .unwrap();
        // Indexes are not shipped (boot builds them); the frontier and the superblock the
        // install wrote need nothing.
        assert!(report.wal.is_clean(), "brought {brought}: {:?}", report.wal);
        assert!(report.superblock_repairs.is_empty());
        assert!(
            report
                .findings
                .iter()
                .all(|f| matches!(f.kind, iggy_segments::FindingKind::IndexRebuild { .. })),
            "{:?}",
            report.findings
        );
        let (partition, _) = Partition::open(storage.clone(), dir(), config(), Mode::Open)
            .unwrap()
            .unwrap();
        assert_eq!(partition.next_offset(), new.next_offset);
    }
}

/// An artifact claiming a next offset past the received log's end does not describe these
/// segments: the commit refuses it and changes nothing live; one at the end is accepted.
#[test]
fn an_artifact_past_the_log_end_is_refused_at_commit() {
    let storage = SimStorage::recording(42);
    let (old, new, segments) = old_and_leader(&storage);
    let attempt = |next_offset| {
        let mut install = Install::new(storage.clone(), dir(), config());
        for (start, bytes) in &segments {
            install.receive_segment(*start, bytes).unwrap();
        }
        install
            .receive_state(StateArtifact {
                next_offset,
                offsets: new.offsets.clone(),
                dedup: Vec::new(),
            })
            .unwrap();
        install.commit(VsrState::default())
    };
    assert!(matches!(
        attempt(new.next_offset + 1),
        Err(iggy_segments::PartitionError::BehindOffsetFrontier { .. })
    ));
    let (partition, report) = Partition::open(storage.clone(), dir(), config(), Mode::Open)
        .unwrap()
        .unwrap();
    assert_eq!(content(&partition, &report), old, "nothing live changed");
    drop(partition);
    attempt(new.next_offset).unwrap();
}

/// Boot's recovery of each install state is durable before it reports the partition clean: a
/// power loss right after it brings back neither an abandoned backup under construction, nor a
/// committed install's retired tree, nor an uncommitted install's backup (which would roll back
/// again).
#[test]
fn recovered_installs_stay_recovered_through_a_power_loss() {
    // Abandoned: a `.install-building` with a link in it (the rest of the partition durable,
    // so that its boot has nothing else to sync).
    let sim = SimStorage::recording(51);
    let (old, _, _) = old_and_leader(&sim);
    drop(Partition::open(sim.clone(), dir(), config(), Mode::Repair).unwrap());
    sim.create_dir(dir().join(install::BUILDING_DIR)).unwrap();
    sim.hard_link(
        dir().join("superblock"),
        dir().join(install::BUILDING_DIR).join("superblock"),
    )
    .unwrap();
    sim.sync_dir(dir().join(install::BUILDING_DIR)).unwrap();
    sim.sync_dir(dir()).unwrap();
    // Committed: the install returned, `finish` never ran.
    let committed = SimStorage::recording(52);
    let (_, new, segments) = old_and_leader(&committed);
    install_from(&committed, &segments, &new).unwrap();
    // Uncommitted: the install failed after its backup existed (the old partition durable
    // first, indexes included, so that the rollback brings back durable files).
    let uncommitted = SimStorage::recording(53);
    let (old_u, new_u, segments_u) = old_and_leader(&uncommitted);
    drop(Partition::open(uncommitted.clone(), dir(), config(), Mode::Repair).unwrap());
    let interrupted = Hooked::new(uncommitted.clone(), Hook::FailAfterBackup, 6);
    assert!(install_from(&interrupted, &segments_u, &new_u).is_err());
    for (storage, expected) in [(&sim, &old), (&committed, &new), (&uncommitted, &old_u)] {
        storage.crash_process();
        let before = check(&ReadOnly::new(storage.clone()), dir(), &config())
            .unwrap()
            .unwrap();
        assert!(
            before
                .findings
                .iter()
                .any(|f| matches!(f.kind, iggy_segments::FindingKind::Install(_))),
            "{:?}",
            before.findings
        );
        drop(Partition::open(storage.clone(), dir(), config(), Mode::Open).unwrap());
        storage.power_loss_durable_only();
        let after = check(&ReadOnly::new(storage.clone()), dir(), &config())
            .unwrap()
            .unwrap();
        assert!(after.is_clean(), "{:?}", after.findings);
        let (partition, report) = Partition::open(storage.clone(), dir(), config(), Mode::Open)
            .unwrap()
            .unwrap();
        assert_eq!(&content(&partition, &report), expected);
    }
}

/// `finish` (which the server runs off the critical path once an install committed) removes the
/// retired tree durably.
#[test]
fn a_finished_install_leaves_no_retired_tree_after_a_power_loss() {
    let storage = SimStorage::recording(54);
    let (_, new, segments) = old_and_leader(&storage);
    install_from(&storage, &segments, &new).unwrap();
    assert!(storage.exists(dir().join(RETIRED_DIR)).unwrap());
    install::finish(&storage, dir()).unwrap();
    storage.power_loss_durable_only();
    assert!(!storage.exists(dir().join(RETIRED_DIR)).unwrap());
}

/// An install from a reader (`Install::receive_segment_from`, how a node installs a transfer
/// image staged on disk) asks for one entry's header, then its body, never more: memory is
/// bounded by the largest prepare, not a segment. The installed partition is the one the
/// whole-segment path installs, and a reader that fails is refused with the segment's name.
#[test]
fn an_install_from_a_reader_holds_one_entry_at_a_time() {
    let storage = SimStorage::new(41);
    let (old, new, segments) = old_and_leader(&storage);
    let mut install = Install::new(storage.clone(), dir(), config());
    let mut largest_ask = 0usize;
    let mut asked = 0u64;
    for (start, bytes) in &segments {
        let mut read = |at: u64, buf: &mut [u8]| -> Result<(), String> {
            largest_ask = largest_ask.max(buf.len());
            asked += buf.len() as u64;
            let at = at as usize;
            buf.copy_from_slice(&bytes[at..at + buf.len()]);
            Ok(())
        };
        install
            .receive_segment_from(*start, bytes.len() as u64, &mut read)
            .unwrap();
    }
    let total: u64 = segments.iter().map(|(_, b)| b.len() as u64).sum();
    let largest_segment = segments.iter().map(|(_, b)| b.len()).max().unwrap();
    assert_eq!(asked, total, "every byte read once");
    assert!(
        largest_ask * 4 < largest_segment,
        "asked {largest_ask} bytes at once of segments up to {largest_segment}"
    );
    install
        .receive_state(StateArtifact {
            next_offset: new.next_offset,
            offsets: new.offsets.clone(),
            dedup: Vec::new(),
        })
        .unwrap();
    install.commit(VsrState::default()).unwrap();
    install::finish(&storage, dir()).unwrap();
    let (partition, report) = Partition::open(storage.clone(), dir(), config(), Mode::Open)
        .unwrap()
        .unwrap();
    assert_eq!(content(&partition, &report), new);
    assert_ne!(new, old);

    let mut failing = |_: u64, _: &mut [u8]| -> Result<(), String> { Err("EIO".into()) };
    let mut again = Install::new(storage, dir(), config());
    let refused = again
        .receive_segment_from(segments[0].0, segments[0].1.len() as u64, &mut failing)
        .unwrap_err();
    assert!(refused.to_string().contains("EIO"), "{refused}");
}
