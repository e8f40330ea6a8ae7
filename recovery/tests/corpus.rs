//! A corpus of crashed nodes on the real file system: a child process writes a node (populate,
//! then a workload of appends, publications, retention, consumer offsets and metadata ops with
//! restarts in between, as the node soak does) through `OsStorage`, and dies at its `n`-th
//! storage operation, as a `kill -9` there would leave it (the page cache survives). For every
//! such state: `check` (what `iggy-fsck` runs) plans exactly what `boot(Open)` does, the files
//! boot changes are exactly the files that plan names (`iggy_recovery::audit`), and afterwards
//! nothing is left that boot could do.
//!
//! The kill points step through the whole run (about 70 by default); `RECOVERY_CORPUS_FULL=1`
//! kills at every storage operation.
#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    reason = "test code: a failed unwrap is a failed test; casts are of small test values"
)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use iggy_io::{
    DirEntry, FileLock, LockHolder, OpenMode, OsStorage, ReadFile, ReadOnly, ReadStorage, Storage,
    WriteFile,
};
use iggy_metadata::Op;
use iggy_recovery::populate::{Options, client_batch, populate};
use iggy_recovery::{Mode, Status, audit, boot, check};
use iggy_segments::offsets::ConsumerKind;

const CHILD_ENV: &str = "IGGY_RECOVERY_CORPUS_CHILD";

/// A storage that ends the process at its `n`-th mutating operation (0: never), the way
/// SIGKILL would: no destructor runs, the kernel keeps what was written.
#[derive(Clone)]
struct DiesAt {
    inner: OsStorage,
    done: Arc<AtomicU64>,
    at: u64,
}

impl DiesAt {
    fn tick(&self) {
        let done = self.done.fetch_add(1, Ordering::SeqCst) + 1;
        if done == self.at {
            std::process::abort();
        }
    }
}

struct File {
    inner: <OsStorage as Storage>::File,
    storage: DiesAt,
}

impl std::fmt::Debug for File {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

impl ReadFile for File {
    fn path(&self) -> &Path {
        self.inner.path()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> iggy_io::Result<usize> {
        self.inner.read_at(offset, buf)
    }
    fn len(&self) -> iggy_io::Result<u64> {
        self.inner.len()
    }
}

impl WriteFile for File {
    fn write_at(&self, offset: u64, buf: &[u8]) -> iggy_io::Result<usize> {
        self.storage.tick();
        self.inner.write_at(offset, buf)
    }
    fn set_len(&self, len: u64) -> iggy_io::Result<()> {
        self.storage.tick();
        self.inner.set_len(len)
    }
    fn allocate(&self, offset: u64, len: u64) -> iggy_io::Result<()> {
        self.storage.tick();
        self.inner.allocate(offset, len)
    }
    fn sync_data(&self) -> iggy_io::Result<()> {
        self.storage.tick();
        self.inner.sync_data()
    }
    fn sync_all(&self) -> iggy_io::Result<()> {
        self.storage.tick();
        self.inner.sync_all()
    }
}

impl ReadStorage for DiesAt {
    type Reader = <OsStorage as ReadStorage>::Reader;
    fn open_read(&self, path: impl AsRef<Path>) -> iggy_io::Result<Self::Reader> {
        self.inner.open_read(path)
    }
    fn list_dir(&self, path: impl AsRef<Path>) -> iggy_io::Result<Vec<DirEntry>> {
        self.inner.list_dir(path)
    }
    fn exists(&self, path: impl AsRef<Path>) -> iggy_io::Result<bool> {
        self.inner.exists(path)
    }
    fn lock_holder(&self, path: impl AsRef<Path>) -> iggy_io::Result<Option<LockHolder>> {
        self.inner.lock_holder(path)
    }
}

impl Storage for DiesAt {
    type File = File;
    fn open(&self, path: impl AsRef<Path>, mode: OpenMode) -> iggy_io::Result<File> {
        if mode != OpenMode::Existing {
            self.tick();
        }
        Ok(File {
            inner: self.inner.open(path, mode)?,
            storage: self.clone(),
        })
    }
    fn create_dir(&self, path: impl AsRef<Path>) -> iggy_io::Result<()> {
        self.tick();
        self.inner.create_dir(path)
    }
    fn sync_dir(&self, path: impl AsRef<Path>) -> iggy_io::Result<()> {
        self.tick();
        self.inner.sync_dir(path)
    }
    fn rename(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> iggy_io::Result<()> {
        self.tick();
        self.inner.rename(from, to)
    }
    fn hard_link(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> iggy_io::Result<()> {
        self.tick();
        self.inner.hard_link(from, to)
    }
    fn unlink(&self, path: impl AsRef<Path>) -> iggy_io::Result<()> {
        self.tick();
        self.inner.unlink(path)
    }
    fn remove_dir_all(&self, path: impl AsRef<Path>) -> iggy_io::Result<()> {
        self.tick();
        self.inner.remove_dir_all(path)
    }
    fn lock(&self, path: impl AsRef<Path>) -> iggy_io::Result<FileLock> {
        self.inner.lock(path)
    }
}

fn options() -> Options {
    Options {
        partitions: 3,
        batches: 10,
        unpublished_batches: 2,
        segment_size_bytes: 4096,
        metadata_file_bytes: 8192,
        max_messages: 3,
        replicas: 3,
    }
}

/// The child: populate, then a node workload with restarts, dying at op `at` (0: never, and
/// then it prints how many ops the run made).
fn child(dir: &Path, at: u64) -> ! {
    let storage = DiesAt {
        inner: OsStorage::open(dir).unwrap(),
        done: Arc::new(AtomicU64::new(0)),
        at,
    };
    populate(&storage, Path::new(""), &options()).unwrap();
    for round in 0..3u64 {
        let (node, _) = boot(storage.clone(), Path::new(""), Mode::Open).unwrap();
        let keys: Vec<_> = node.partitions.keys().copied().collect();
        for step in 0..12u64 {
            let key = keys[(step as usize + round as usize) % keys.len()];
            let partition = &node.partitions[&key];
            let mut batch = client_batch(key, 100 + round * 20 + step, 3);
            partition.append(&mut batch, 2_000 + step).unwrap();
            match step % 6 {
                1 | 4 => partition.publish().unwrap(),
                2 => drop(partition.apply_retention(0, None, Some(6000)).unwrap()),
                3 => drop(
                    partition
                        .offsets()
                        .store(ConsumerKind::Consumer, 1, step)
                        .unwrap(),
                ),
                _ => {}
            }
        }
        let mut node = node;
        if let Some(metadata) = node.metadata.as_mut() {
            metadata
                .submit(&Op::CreateStream {
                    name: format!("round-{round}"),
                })
                .unwrap()
                .unwrap();
        }
        // A crash of the process between rounds, as far as the files go: nothing is closed
        // (the groups are leaked, not dropped); only the lock is let go, as a kernel would.
        let iggy_recovery::NodeState {
            metadata,
            partitions,
            lock,
            ..
        } = node;
        std::mem::forget(metadata);
        std::mem::forget(partitions);
        drop(lock);
    }
    println!("ops {}", storage.done.load(Ordering::SeqCst));
    std::process::exit(0);
}

/// Runs the child dying at `at` in a fresh directory; returns the directory and, for a run
/// that was not killed, the op count it printed.
fn run_child(at: u64) -> (tempfile::TempDir, Option<u64>) {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "every_state_of_a_killed_node_boots_to_exactly_the_plan_of_its_check",
            "--nocapture",
        ])
        .env(CHILD_ENV, format!("{}:{at}", dir.path().display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let ops = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .find_map(|line| line.strip_prefix("ops ").map(|n| n.parse().unwrap()));
    let status = child.wait().unwrap();
    assert_eq!(status.success(), at == 0, "child dying at {at}: {status}");
    (dir, ops)
}

/// Checks one crashed node: the plan of its check is what boot does, file by file, and nothing
/// is left afterwards but partitions a crash kept from being created.
fn audit_state(dir: &Path) -> Result<(), String> {
    let storage = OsStorage::open(dir).unwrap();
    let root = Path::new("");
    let checked = match check(&ReadOnly::new(storage.clone()), root, |_, _| {}) {
        Ok(report) => report,
        Err(iggy_recovery::RecoveryError::NotANode { .. }) => return Ok(()),
        Err(error) => return Err(format!("check failed: {error}")),
    };
    let before = audit::snapshot(&storage, root).map_err(|e| e.to_string())?;
    let (node, booted) = boot(storage.clone(), root, Mode::Open).map_err(|e| e.to_string())?;
    drop(node);
    let after = audit::snapshot(&storage, root).map_err(|e| e.to_string())?;
    if checked.plan() != booted.plan() || checked.groups != booted.groups {
        return Err(format!(
            "check and boot disagree:\n{}\n{}",
            checked.render(),
            booted.render()
        ));
    }
    audit::compare(&checked, &audit::changed(&before, &after))?;
    let again = check(&ReadOnly::new(storage), root, |_, _| {}).map_err(|e| e.to_string())?;
    let left = again.groups.iter().any(|group| {
        group.status != Status::Clean
            && !again
                .findings
                .iter()
                .any(|f| f.group == group.group && f.kind == "missing-partition")
    });
    if left || !again.planned_files().is_empty() {
        return Err(format!("boot left work:\n{}", again.render()));
    }
    Ok(())
}

#[test]
fn every_state_of_a_killed_node_boots_to_exactly_the_plan_of_its_check() {
    if let Ok(value) = std::env::var(CHILD_ENV) {
        let (dir, at) = value.rsplit_once(':').unwrap();
        child(Path::new(dir), at.parse().unwrap());
    }
    let (_, total) = run_child(0);
    let total = total.expect("the full run prints its op count");
    let full = std::env::var_os("RECOVERY_CORPUS_FULL").is_some();
    let stride = if full { 1 } else { (total / 70).max(1) };
    let mut states = 0;
    let mut at = 1;
    while at <= total {
        let (dir, _) = run_child(at);
        audit_state(dir.path()).unwrap_or_else(|error| {
            panic!("killed at storage op {at} of {total}: {error}\nreplay: the child with {CHILD_ENV}=<dir>:{at}")
        });
        states += 1;
        at += stride;
    }
    eprintln!("{states} killed states of {total} storage operations, every one as planned");
    assert!(states >= 50 || full, "only {states} states");
}
