//! What an operator does to a crashed node, one test per class of what went wrong before (each
//! failed on the code before this change): a node another process holds, a "clean" verdict on
//! an unfinished creation, a node that does not match its own metadata, names and kinds of
//! files, the output of `--repair`, and the command-line conventions.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{copy_tree, fixtures_dir, fsck, fsck_all, hash_tree};
use iggy_io::{OpenMode, OsStorage, ReadStorage, Storage, WriteFile};
use serde_json::Value;

/// A node of `kind` (a fixture kind) in a fresh temp dir.
fn node_of(kind: &str) -> (tempfile::TempDir, PathBuf) {
    let temp = tempfile::tempdir().unwrap();
    let node = temp.path().join("node");
    copy_tree(&fixtures_dir().join(kind).join("node"), &node);
    (temp, node)
}

fn json(node: &Path) -> (u8, Value) {
    let (code, out) = fsck(&[node.to_str().unwrap(), "--json"]);
    (code, serde_json::from_str(&out).unwrap())
}

/// The findings of a JSON report of one kind.
fn findings<'a>(report: &'a Value, kind: &str) -> Vec<&'a Value> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == kind)
        .collect()
}

fn write(storage: &OsStorage, path: impl AsRef<Path>, bytes: &[u8]) {
    let file = storage.open(path, OpenMode::Create).unwrap();
    file.set_len(0).unwrap();
    file.write_all_at(0, bytes).unwrap();
}

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success(), "mkfifo {}", path.display());
}

const HOLD_ENV: &str = "IGGY_FSCK_TEST_HOLD_NODE";

/// Item 1: `--repair` against a node another process holds open refuses with exit 8, names the
/// holder's pid and changes nothing; a read-only check runs but says the node is in use.
#[test]
fn repair_of_a_node_another_process_holds_refuses_with_exit_8_and_changes_nothing() {
    if let Some(dir) = std::env::var_os(HOLD_ENV) {
        // The child: a writer of the node that holds its lock (as a server does from before its
        // boot until it exits) until its stdin closes. It has not booted yet, so the plan is
        // still there to be applied.
        let storage = OsStorage::open(&dir).unwrap();
        let lock = iggy_recovery::lock(&storage, Path::new("")).unwrap();
        println!("ready");
        std::io::stdout().flush().unwrap();
        let mut line = String::new();
        while std::io::stdin().read_line(&mut line).unwrap() > 0 {}
        drop(lock);
        std::process::exit(0);
    }
    let (_temp, node) = node_of("unpublished");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "repair_of_a_node_another_process_holds_refuses_with_exit_8_and_changes_nothing",
            "--nocapture",
        ])
        .env(HOLD_ENV, &node)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    // Waits for the child to hold the node (a line on a pipe, not a sleep).
    assert!(
        lines.any(|line| line.unwrap() == "ready"),
        "the child never came up"
    );
    let before = hash_tree(&node);
    let (code, out, err) = fsck_all(&[node.to_str().unwrap(), "--repair", "--yes"]);
    assert_eq!(code, 8, "{out}{err}");
    assert!(
        err.contains(&format!("in use: process {} holds its lock", child.id())),
        "{err}"
    );
    assert_eq!(
        hash_tree(&node),
        before,
        "a refused repair changed the node"
    );
    // A read-only check still runs, and says the verdict may be stale.
    let (code, report) = json(&node);
    assert_eq!(code, 1);
    assert_eq!(report["in_use"]["pid"], child.id());
    let (_, text, err) = fsck_all(&[node.to_str().unwrap()]);
    assert!(text.contains("IN USE: process"), "{text}");
    assert!(err.contains("in use by another process"), "{err}");
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    // The holder is gone: the same repair now runs.
    let (code, _, err) = fsck_all(&[node.to_str().unwrap(), "--repair", "--yes"]);
    assert_eq!(code, 0, "{err}");
}

/// Item 2: A partition whose creation stopped (only `superblock` and `frontier.tmp`) and the
/// metadata's leftover `superblock.tmp` and `snapshot.bin.tmp` are findings with actions, not
/// "clean"; `--repair` does exactly that and the node then checks clean.
#[test]
fn an_unfinished_creation_and_leftover_temp_files_are_planned_and_repaired() {
    let (_temp, node) = node_of("clean");
    let storage = OsStorage::open(&node).unwrap();
    let partition = Path::new("partitions/1.1.3");
    for entry in storage.list_dir(partition).unwrap() {
        let path = partition.join(&entry.name);
        if entry.name != "superblock" {
            if entry.kind == iggy_io::EntryKind::Dir {
                storage.remove_dir_all(&path).unwrap();
            } else {
                storage.unlink(&path).unwrap();
            }
        }
    }
    write(&storage, partition.join("frontier.tmp"), b"half a frontier");
    write(&storage, "metadata/superblock.tmp", b"half a superblock");
    write(&storage, "metadata/snapshot.bin.tmp", b"half a snapshot");
    let (code, report) = json(&node);
    assert_eq!(code, 1, "{report}");
    let created = findings(&report, "log-not-created");
    assert_eq!(created.len(), 1, "{report}");
    assert_eq!(created[0]["file"], "partitions/1.1.3/frontier");
    assert_eq!(created[0]["action"], "finish-create");
    let leftovers: Vec<&str> = findings(&report, "leftover-temp")
        .iter()
        .map(|f| f["file"].as_str().unwrap())
        .collect();
    assert_eq!(
        leftovers,
        [
            "metadata/superblock.tmp",
            "metadata/snapshot.bin.tmp",
            "partitions/1.1.3/frontier.tmp"
        ],
        "{report}"
    );
    let (code, _, err) = fsck_all(&[node.to_str().unwrap(), "--repair", "--yes"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("applied 4 action(s)"), "{err}");
    for gone in [
        "metadata/superblock.tmp",
        "metadata/snapshot.bin.tmp",
        "partitions/1.1.3/frontier.tmp",
    ] {
        assert!(!storage.exists(gone).unwrap(), "{gone}");
    }
    assert!(storage.exists(partition.join("frontier")).unwrap());
    assert!(
        storage
            .exists(partition.join("00000000000000000000.log"))
            .unwrap()
    );
}

/// A metadata snapshot install that crashed after its commit point (the superblock names the
/// installed checkpoint, the snapshot is still staged as `snapshot.bin.receiving`; issue #33) is
/// reported as an unfinished install, not as a leftover to remove (which would leave a
/// superblock naming a checkpoint with no snapshot), and `--repair` finishes it.
#[test]
fn an_unfinished_snapshot_install_is_finished_not_swept() {
    let (_temp, node) = node_of("clean");
    let storage = OsStorage::open(&node).unwrap();
    storage
        .rename("metadata/snapshot.bin", "metadata/snapshot.bin.receiving")
        .unwrap();
    let (code, report) = json(&node);
    assert_eq!(code, 1, "{report}");
    let unfinished = findings(&report, "install-unfinished");
    assert_eq!(unfinished.len(), 1, "{report}");
    assert_eq!(unfinished[0]["file"], "metadata/snapshot.bin");
    assert_eq!(unfinished[0]["action"], "finish-install");
    assert!(
        unfinished[0]["what"]
            .as_str()
            .unwrap()
            .contains("checkpoint 10"),
        "{report}"
    );
    assert!(findings(&report, "leftover-temp").is_empty(), "{report}");
    let (code, _, err) = fsck_all(&[node.to_str().unwrap(), "--repair", "--yes"]);
    assert_eq!(code, 0, "{err}");
    assert!(storage.exists("metadata/snapshot.bin").unwrap());
    assert!(!storage.exists("metadata/snapshot.bin.receiving").unwrap());
    let (code, report) = json(&node);
    assert_eq!(code, 0, "{report}");
}

/// Item 3: The node is checked against its own metadata: partitions the metadata lists whose
/// directories are gone (a volume that failed to mount) need repair from peers; a directory the
/// metadata never created is refused; one whose topic the metadata deleted is left alone. The
/// report says what it checked.
#[test]
fn partitions_are_checked_against_the_metadata() {
    for how in ["deleted", "emptied", "one-emptied"] {
        let (_temp, node) = node_of("clean");
        let storage = OsStorage::open(&node).unwrap();
        match how {
            "deleted" => storage.remove_dir_all("partitions").unwrap(),
            "emptied" => {
                for entry in storage.list_dir("partitions").unwrap() {
                    storage
                        .remove_dir_all(Path::new("partitions").join(&entry.name))
                        .unwrap();
                }
            }
            _ => {
                storage.remove_dir_all("partitions/1.1.2").unwrap();
                storage.create_dir("partitions/1.1.2").unwrap();
            }
        }
        let (code, report) = json(&node);
        assert_eq!(code, 2, "{how}: {report}");
        let missing = findings(&report, "missing-partition");
        assert_eq!(
            missing.len(),
            if how == "one-emptied" { 1 } else { 3 },
            "{how}"
        );
        assert!(missing.iter().all(|f| f["action"] == "needs-peer-repair"));
        let (_, text) = fsck(&[node.to_str().unwrap()]);
        assert!(text.contains("checked 4 group(s), "), "{how}: {text}");
    }

    // A directory of a partition the metadata never had.
    let (_temp, node) = node_of("clean");
    copy_tree(
        &node.join("partitions/1.1.1"),
        &node.join("partitions/1.2.1"),
    );
    let (code, report) = json(&node);
    assert_eq!(code, 4, "{report}");
    let unknown = findings(&report, "unknown-partition");
    assert_eq!(unknown.len(), 1);
    assert_eq!(unknown[0]["file"], "partitions/1.2.1");

    // A stream the metadata deleted, and a node that stopped before it removed the stream's
    // partitions: boot removes them, and the node boots.
    let (_temp, node) = node_of("clean");
    let storage = OsStorage::open(&node).unwrap();
    let mut group = iggy_metadata::group::MetadataGroup::open(
        storage,
        Path::new("metadata"),
        &iggy_recovery::populate::identity(),
        iggy_recovery::metadata_wal_config(),
    )
    .unwrap()
    .unwrap();
    group
        .submit(&iggy_metadata::Op::DeleteStream { stream: 1 })
        .unwrap()
        .unwrap();
    drop(group);
    let (code, report) = json(&node);
    assert_eq!(code, 1, "{report}");
    let deleted = findings(&report, "deleted-partition");
    assert_eq!(deleted.len(), 3, "{report}");
    assert!(deleted.iter().all(|f| f["action"] == "remove-leftover"));
    let (code, text) = fsck(&[node.to_str().unwrap(), "--repair", "--yes"]);
    assert_eq!(code, 0, "{text}");
    assert!(!node.join("partitions/1.1.1").exists(), "{text}");
    let (code, report) = json(&node);
    assert_eq!(code, 0, "{report}");

    // A partition deleted (issue #47's `DeletePartitions`) and a topic purged (every partition
    // under a new id), on a node that stopped before it removed the old directories: boot
    // removes them as a deleted stream's, instead of refusing them as partitions the metadata
    // never had (what it did before `was_deleted` knew of partition ids).
    let (_temp, node) = node_of("clean");
    let storage = OsStorage::open(&node).unwrap();
    let mut group = iggy_metadata::group::MetadataGroup::open(
        storage,
        Path::new("metadata"),
        &iggy_recovery::populate::identity(),
        iggy_recovery::metadata_wal_config(),
    )
    .unwrap()
    .unwrap();
    for op in [
        iggy_metadata::Op::DeletePartitions {
            stream: 1,
            topic: 1,
            count: 1,
        },
        iggy_metadata::Op::PurgeTopic {
            stream: 1,
            topic: 1,
        },
    ] {
        group.submit(&op).unwrap().unwrap();
    }
    drop(group);
    let (code, report) = json(&node);
    assert_ne!(code, 4, "refused: {report}");
    let deleted = findings(&report, "deleted-partition");
    assert_eq!(deleted.len(), 3, "{report}");
    assert!(
        findings(&report, "unknown-partition").is_empty(),
        "{report}"
    );
    let (code, text) = fsck(&[node.to_str().unwrap(), "--repair", "--yes"]);
    assert_eq!(code, 0, "{text}");
    for old in ["1.1.1", "1.1.2", "1.1.3"] {
        assert!(!node.join("partitions").join(old).exists(), "{old}: {text}");
    }
    let (code, report) = json(&node);
    assert_eq!(code, 0, "{report}");
}

/// A topic the metadata created after its checkpoint, on a node that stopped before it created
/// the partitions' directories (or in the middle of one): the check plans to finish each create,
/// boot (here `--repair`) does, and the partitions it creates recover from their peers before
/// they take part (their superblocks record the boot's incarnation).
#[test]
fn partitions_created_after_the_checkpoint_are_finished_by_boot() {
    let (_temp, node) = node_of("clean");
    let storage = OsStorage::open(&node).unwrap();
    let mut group = iggy_metadata::group::MetadataGroup::open(
        storage.clone(),
        Path::new("metadata"),
        &iggy_recovery::populate::identity(),
        iggy_recovery::metadata_wal_config(),
    )
    .unwrap()
    .unwrap();
    group
        .submit(&iggy_metadata::Op::CreateTopic {
            stream: 1,
            name: "late".into(),
            partitions: 2,
            durability: iggy_metadata::Durability::Replicated,
            segment_size_bytes: 1 << 20,
            retention: iggy_metadata::Retention::default(),
            replication_factor: 3,
        })
        .unwrap()
        .unwrap();
    drop(group);
    // The second create stopped with the directory made and the superblock not yet renamed.
    storage.create_dir("partitions/1.2.2").unwrap();
    let temp = storage
        .open("partitions/1.2.2/superblock.tmp", OpenMode::CreateNew)
        .unwrap();
    temp.write_all_at(0, &[7; 100]).unwrap();
    drop(temp);

    let (code, report) = json(&node);
    assert_eq!(code, 1, "{report}");
    let pending = findings(&report, "pending-create");
    assert_eq!(pending.len(), 2, "{report}");
    assert!(pending.iter().all(|f| f["action"] == "finish-create"));
    assert!(
        findings(&report, "missing-partition").is_empty(),
        "{report}"
    );

    let (code, text) = fsck(&[node.to_str().unwrap(), "--repair", "--yes"]);
    assert_eq!(code, 0, "{text}");
    let (code, report) = json(&node);
    assert_eq!(code, 0, "{report}");
    for dir in ["partitions/1.2.1", "partitions/1.2.2"] {
        assert!(!node.join(dir).join("superblock.tmp").exists(), "{dir}");
        let state = iggy_superblock::read(
            &storage,
            Path::new(dir),
            &iggy_recovery::populate::identity(),
        )
        .unwrap();
        let iggy_superblock::Opened::Present { record, .. } = state else {
            panic!("{dir}: no superblock");
        };
        assert_ne!(
            record.state.incarnation, 0,
            "{dir} must recover before it takes part"
        );
    }
}

/// Item 4: Only canonical names are partitions; nothing that is not a regular file is opened (a FIFO
/// made both tools hang); every entry of the node is understood or reported, in the text too; a
/// segment copied in from another partition is refused, never discarded as unpublished.
#[test]
fn names_and_kinds_of_files_are_checked_and_reported() {
    let (_temp, node) = node_of("clean");
    let storage = OsStorage::open(&node).unwrap();
    // A copy of partition 1.1.1 under a non-canonical name, with damage in it.
    copy_tree(
        &node.join("partitions/1.1.1"),
        &node.join("partitions/01.1.1"),
    );
    storage
        .unlink("partitions/01.1.1/00000000000000000000.index")
        .unwrap();
    // A FIFO where an index should be.
    storage
        .unlink("partitions/1.1.2/00000000000000000000.index")
        .unwrap();
    mkfifo(&node.join("partitions/1.1.2/00000000000000000000.index"));
    // Strays: a file in a partition directory, a regular file where a partition directory
    // should be, a node copied into a partition directory, a README.
    write(&storage, "partitions/1.1.3/notes.txt", b"operator notes");
    write(&storage, "partitions/1.1.9", b"not a directory");
    copy_tree(
        &node.join("metadata"),
        &node.join("partitions/1.1.1/metadata"),
    );
    write(&storage, "partitions/README", b"partitions live here");
    let (code, report) = json(&node);
    assert_eq!(code, 1, "{report}");
    let groups: Vec<&str> = report["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["group"].as_str().unwrap())
        .collect();
    assert_eq!(
        groups,
        [
            "metadata",
            "partition 1.1.1",
            "partition 1.1.2",
            "partition 1.1.3"
        ]
    );
    let files_of = |kind| -> Vec<String> {
        findings(&report, kind)
            .iter()
            .map(|f| f["file"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        files_of("not-a-partition"),
        ["partitions/01.1.1", "partitions/README"]
    );
    assert_eq!(files_of("not-a-directory"), ["partitions/1.1.9"]);
    assert_eq!(
        files_of("unknown-entry"),
        ["partitions/1.1.1/metadata", "partitions/1.1.3/notes.txt"]
    );
    let index = findings(&report, "index-rebuild");
    assert_eq!(
        index.len(),
        1,
        "only the FIFO, not the copy's missing index"
    );
    assert_eq!(index[0]["group"], "partition 1.1.2");
    let (_, text) = fsck(&[node.to_str().unwrap()]);
    for stray in ["partitions/README", "partitions/1.1.9", "notes.txt"] {
        assert!(text.contains(stray), "{stray} not in the text: {text}");
    }
    // iggy-inspect node does not hang either.
    let cli = <iggy_inspect::Cli as clap::Parser>::try_parse_from([
        "iggy-inspect",
        "node",
        node.to_str().unwrap(),
    ])
    .unwrap();
    assert_eq!(iggy_inspect::run(&cli, &mut Vec::new()), Ok(1));
    // Repair replaces the FIFO with the index and leaves every stray alone.
    let (code, _, err) = fsck_all(&[node.to_str().unwrap(), "--repair", "--yes"]);
    assert_eq!(code, 0, "{err}");
    assert!(storage.exists("partitions/README").unwrap());
    assert!(
        storage
            .exists("partitions/1.1.1/metadata/superblock")
            .unwrap()
    );

    // A FIFO in place of a superblock: the group is damaged, named, and nothing hangs.
    let (_temp, node) = node_of("clean");
    let storage = OsStorage::open(&node).unwrap();
    storage.unlink("partitions/1.1.2/superblock").unwrap();
    mkfifo(&node.join("partitions/1.1.2/superblock"));
    let (code, report) = json(&node);
    assert_eq!(code, 2, "{report}");
    let damaged = findings(&report, "damaged");
    assert_eq!(
        damaged[0]["file"], "partitions/1.1.2/superblock",
        "{report}"
    );

    // A segment of another partition copied in past the head: refused, not discarded.
    let (_temp, node) = node_of("clean");
    let storage = OsStorage::open(&node).unwrap();
    let foreign = "partitions/1.1.1/00000000000000099999.log";
    let bytes = iggy_io::ReadFile::read_all(
        &storage
            .open_read("partitions/1.1.2/00000000000000000000.log")
            .unwrap(),
    )
    .unwrap();
    write(&storage, foreign, &bytes);
    let (code, report) = json(&node);
    assert_eq!(code, 4, "{report}");
    let refused = findings(&report, "refused");
    assert_eq!(refused[0]["file"], foreign, "{report}");
    assert!(
        findings(&report, "file-beyond-frontier").is_empty(),
        "{report}"
    );
    let (code, _) = fsck(&[node.to_str().unwrap(), "--repair", "--yes"]);
    assert_eq!(code, 4);
    assert!(
        storage.exists(foreign).unwrap(),
        "the foreign segment was kept"
    );
}

/// Item 5: `--repair --json` prints one JSON document; a repair with nothing local to do says so
/// (not "repaired"); every report ends with what to do next.
#[test]
fn repair_output_is_one_document_honest_and_says_what_next() {
    let (_temp, node) = node_of("unpublished");
    let (code, out, _) = fsck_all(&[node.to_str().unwrap(), "--repair", "--yes", "--json"]);
    assert_eq!(code, 0);
    let document: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(document["before"]["exit_code"], 1);
    assert_eq!(document["after"]["exit_code"], 0);
    assert_eq!(
        document["applied"].as_array().unwrap().len(),
        6,
        "{document}"
    );
    assert_eq!(document["exit_code"], 0);

    let (_temp, node) = node_of("needs-peer-repair");
    let before = hash_tree(&node);
    let (code, out, err) = fsck_all(&[node.to_str().unwrap(), "--repair", "--yes"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("nothing boot can repair locally") && !err.contains("applied"),
        "{err}"
    );
    assert!(
        out.contains("next: the groups marked NEEDS REPAIR FROM PEERS"),
        "{out}"
    );
    let mut after = hash_tree(&node);
    after.remove(Path::new(iggy_recovery::LOCK_FILE));
    assert_eq!(after, before);

    for (kind, _) in common::KINDS {
        let (code, text) = fsck(&[fixtures_dir().join(kind).join("node").to_str().unwrap()]);
        let next = text.lines().last().unwrap();
        assert_eq!(
            next,
            format!("next: {}", iggy_recovery::next_step(code)),
            "{kind}"
        );
    }
}

/// Item 6: Help and version go to stdout, `-h` lists the exit codes too, completions and the man
/// page are generated, and both tools name an action the same way.
#[test]
fn command_line_conventions() {
    for flag in ["--help", "-h", "--version"] {
        let (code, out, err) = fsck_all(&[flag]);
        assert_eq!(code, 0, "{flag}");
        assert!(!out.is_empty() && err.is_empty(), "{flag}: {out:?} {err:?}");
    }
    for flag in ["--help", "-h"] {
        let (_, out, _) = fsck_all(&[flag]);
        assert!(
            out.contains("Exit codes") && out.contains("8  usage error"),
            "{out}"
        );
    }
    let (code, script, _) = fsck_all(&["--completions", "zsh"]);
    assert_eq!(code, 0);
    assert!(
        script.contains("iggy-fsck") && script.contains("--repair"),
        "{script}"
    );
    let (code, man, _) = fsck_all(&["--man"]);
    assert_eq!(code, 0);
    assert!(man.contains(".TH") && man.contains("iggy\\-fsck"), "{man}");

    // The same finding, by both tools: the same action name.
    let node = fixtures_dir().join("unpublished/node");
    let (_, report) = json(&node);
    let fsck_actions: Vec<&str> = findings(&report, "unpublished-tail")
        .iter()
        .map(|f| f["action"].as_str().unwrap())
        .collect();
    let cli = <iggy_inspect::Cli as clap::Parser>::try_parse_from([
        "iggy-inspect",
        "--json",
        "wal",
        node.join("partitions/1.1.1").to_str().unwrap(),
    ])
    .unwrap();
    let mut out = Vec::new();
    iggy_inspect::run(&cli, &mut out).unwrap();
    let inspected: Value = serde_json::from_slice(&out).unwrap();
    let inspect_actions: Vec<&str> = inspected["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["action"].as_str().unwrap())
        .collect();
    assert_eq!(inspect_actions, ["discard-unpublished"]);
    assert!(fsck_actions.iter().all(|a| *a == "discard-unpublished"));
}
