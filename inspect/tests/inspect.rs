//! iggy-inspect on a real node directory: every command in text and JSON, damaged input shown
//! with its bytes, a closed pipe is not an error, and the files are never changed.
#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    reason = "test code: a failed unwrap is a failed test; casts are of small test values"
)]

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Parser;
use iggy_io::{OpenMode, OsStorage, ReadFile, Storage, WriteFile};
use iggy_metadata::group::MetadataGroup;
use iggy_metadata::{Durability, Op, Retention};
use iggy_superblock::Identity;

const ID: Identity = Identity {
    cluster: 0xAB,
    replica: 1,
    replica_count: 3,
};

/// A node's metadata directory: superblock, WAL with an unpublished tail, snapshot.
fn node() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let storage = OsStorage::open(dir.path()).unwrap();
    let config = iggy_wal::Config::new(iggy_metadata::group::GROUP_ID);
    let mut group =
        MetadataGroup::create(storage, Path::new("metadata"), ID, config.clone()).unwrap();
    group
        .submit(&Op::CreateStream {
            name: "orders".into(),
        })
        .unwrap()
        .unwrap();
    group
        .submit(&Op::CreateTopic {
            stream: 1,
            name: "eu".into(),
            partitions: 3,
            durability: Durability::Persisted,
            segment_size_bytes: 1 << 20,
            retention: Retention::default(),
            replication_factor: 3,
        })
        .unwrap()
        .unwrap();
    group.checkpoint().unwrap();
    group
        .submit(&Op::RegisterClient {
            client: 9,
            session: 1,
        })
        .unwrap()
        .unwrap();
    drop(group);
    // An unpublished tail: bytes past the frontier in the head file.
    let wal_dir = dir.path().join("metadata/wal");
    let storage = OsStorage::open(&wal_dir).unwrap();
    let head = iggy_io::ReadStorage::list_dir(&storage, "")
        .unwrap()
        .into_iter()
        .rfind(|e| e.name.to_string_lossy().ends_with(".wal"))
        .unwrap();
    let file = storage.open(&head.name, OpenMode::Existing).unwrap();
    // Where the next entry's header would go (boot reads no further: bytes past a gap cannot
    // join the chain).
    let end = iggy_wal::check(
        &iggy_io::ReadOnly::new(storage.clone()),
        Path::new(""),
        iggy_metadata::group::GROUP_ID,
    )
    .unwrap()
    .unwrap()
    .files
    .last()
    .unwrap()
    .end;
    file.write_all_at(end, b"unpublished garbage").unwrap();
    dir
}

/// The golden node directories shared with iggy-fsck's tests.
fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures")
}

fn run(args: &[&str]) -> String {
    let cli = iggy_inspect::Cli::try_parse_from(
        std::iter::once("iggy-inspect").chain(args.iter().copied()),
    )
    .unwrap();
    let mut out = Vec::new();
    iggy_inspect::run(&cli, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

/// Runs a command; returns its exit code and output.
fn run_code(args: &[&str]) -> (u8, String) {
    let cli = iggy_inspect::Cli::try_parse_from(
        std::iter::once("iggy-inspect").chain(args.iter().copied()),
    )
    .unwrap();
    let mut out = Vec::new();
    let code = iggy_inspect::run(&cli, &mut out).unwrap();
    (code, String::from_utf8(out).unwrap())
}

fn path(dir: &tempfile::TempDir, rel: &str) -> String {
    dir.path().join(rel).display().to_string()
}

fn hashes(root: &Path) -> Vec<(PathBuf, u128)> {
    let storage = OsStorage::open(root).unwrap();
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(dir) = stack.pop() {
        for entry in iggy_io::ReadStorage::list_dir(&storage, &dir).unwrap() {
            let rel = dir.join(&entry.name);
            match entry.kind {
                iggy_io::EntryKind::Dir => stack.push(rel),
                _ => out.push((
                    rel.clone(),
                    iggy_format::checksum(&{
                        let file = iggy_io::ReadStorage::open_read(&storage, &rel).unwrap();
                        let mut bytes = vec![0u8; iggy_io::ReadFile::len(&file).unwrap() as usize];
                        iggy_io::ReadFile::read_exact_at(&file, 0, &mut bytes).unwrap();
                        bytes
                    }),
                )),
            }
        }
    }
    out.sort();
    out
}

#[test]
fn every_command_decodes_a_real_node_and_changes_nothing() {
    let dir = node();
    let before = hashes(dir.path());

    let text = run(&["superblock", &path(&dir, "metadata/superblock")]);
    assert!(text.contains("copy A (offset 0): valid"), "{text}");
    assert!(
        text.contains("boot: boot uses sequence 5; repairs: none"),
        "{text}"
    );
    let json: serde_json::Value = serde_json::from_str(&run(&[
        "--json",
        "superblock",
        &path(&dir, "metadata/superblock"),
    ]))
    .unwrap();
    assert_eq!(json["copies"][1]["checkpoint_op"], 2);
    assert_eq!(json["copies"][0]["replica"], 1);

    let text = run(&["frontier", &path(&dir, "metadata/wal/frontier")]);
    assert!(text.contains("boot trusts sequence"), "{text}");

    let text = run(&["wal", &path(&dir, "metadata/wal")]);
    assert!(text.contains("boot trusts ops 1..=3"), "{text}");
    assert!(
        text.contains("unpublished bytes past the published frontier")
            && text.contains("-> discard-unpublished"),
        "the garbage past the frontier is named, in iggy-fsck's words: {text}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&run(&["--json", "wal", &path(&dir, "metadata/wal")])).unwrap();
    assert_eq!(json["head_op"], 3);
    assert!(json["discarded_bytes"].as_u64().unwrap() > 0);

    let text = run(&["snapshot", &path(&dir, "metadata/snapshot.bin")]);
    assert!(text.contains("checkpoint op 2"), "{text}");
    assert!(
        text.contains("1 streams, 1 topics, 3 partitions, 0 consumer groups, 0 clients"),
        "{text}"
    );

    let json: serde_json::Value = serde_json::from_str(&run(&["--json", "constants"])).unwrap();
    assert_eq!(json["entry_header_size"], 256);
    assert_eq!(json["metadata_checkpoint_interval_ops"], 960);

    assert_eq!(hashes(dir.path()), before, "inspect changed a file");
}

#[test]
fn damaged_files_are_decoded_as_far_as_possible_with_their_bytes() {
    let dir = node();
    let storage = OsStorage::open(dir.path().join("metadata")).unwrap();
    let file = storage.open("superblock", OpenMode::Existing).unwrap();
    file.write_all_at(4096 + 100, &[0xFF; 4]).unwrap();
    let text = run(&["superblock", &path(&dir, "metadata/superblock")]);
    assert!(
        text.contains("copy B (offset 4096): copy is damaged"),
        "{text}"
    );
    assert!(
        text.contains("  00001000  "),
        "a hexdump at the copy's offset: {text}"
    );
    assert!(
        text.contains("repairs: copy B damaged"),
        "boot's verdict names the repair: {text}"
    );

    let snapshot = storage.open("snapshot.bin", OpenMode::Existing).unwrap();
    snapshot.write_all_at(130, b"X").unwrap();
    let text = run(&["snapshot", &path(&dir, "metadata/snapshot.bin")]);
    assert!(
        text.contains("invalid: ") && text.contains("checksum trailer"),
        "{text}"
    );
    assert!(
        text.contains("  00000000  49 47 47 59 53 4e 41 50"),
        "{text}"
    );

    // The frontier's verdict is boot's: a rotten slot is repaired, a slot of an unknown version
    // refuses (even though the other slot is valid).
    let frontier = storage.open("wal/frontier", OpenMode::Existing).unwrap();
    frontier.write_all_at(4096 + 200, &[0xFF]).unwrap();
    let text = run(&["frontier", &path(&dir, "metadata/wal/frontier")]);
    assert!(
        text.contains("boot: boot trusts sequence")
            && text.contains("frontier slot 1 is unusable")
            && text.contains("-> repair-copy"),
        "{text}"
    );
    let mut slot = [0u8; 4096];
    frontier.read_exact_at(0, &mut slot).unwrap();
    slot[40..42].copy_from_slice(&3u16.to_le_bytes());
    let sum = iggy_format::checksum::checksum(&slot[32..]);
    slot[..16].copy_from_slice(&sum.to_le_bytes());
    frontier.write_all_at(0, &slot).unwrap();
    let text = run(&["frontier", &path(&dir, "metadata/wal/frontier")]);
    assert!(
        text.contains("boot: refuse: ") && text.contains("unknown version 3"),
        "{text}"
    );
    let text = run(&["wal", &path(&dir, "metadata/wal")]);
    assert!(
        text.contains("boot refuses: ") && text.contains("unknown version 3"),
        "{text}"
    );
}

/// `iggy-inspect ... | head`: a closed pipe ends the output quietly.
#[test]
fn a_closed_pipe_is_not_an_error() {
    struct Closed;
    impl Write for Closed {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let cli = iggy_inspect::Cli::try_parse_from(["iggy-inspect", "constants"]).unwrap();
    assert_eq!(iggy_inspect::run(&cli, &mut Closed), Ok(0));
}

/// The inspect command for a file of a node, by its name.
fn command_for(path: &Path) -> Vec<String> {
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    let shown = path.display().to_string();
    if name == "superblock" {
        vec!["superblock".into(), shown]
    } else if name == "frontier" {
        vec!["frontier".into(), shown]
    } else if name == "snapshot.bin" {
        vec!["snapshot".into(), shown]
    } else if name.ends_with(".log") {
        vec!["segment".into(), "--messages".into(), shown]
    } else if name.ends_with(".index") {
        vec!["index".into(), shown]
    } else if name.ends_with(".wal") {
        vec!["wal".into(), path.parent().unwrap().display().to_string()]
    } else if path.parent().is_some_and(|p| p.ends_with("offsets")) {
        vec!["offsets".into(), shown]
    } else {
        // Staging files and others: decoded as a segment (any bytes must not panic).
        vec!["segment".into(), shown]
    }
}

#[test]
fn every_fixture_file_prints_in_text_and_json_without_changing() {
    let fixtures = fixtures();
    let storage = OsStorage::open(&fixtures).unwrap();
    let mut files = 0;
    for fixture in iggy_io::ReadStorage::list_dir(&storage, "").unwrap() {
        let node = fixtures.join(&fixture.name).join("node");
        let before = hashes(&node);
        for (rel, _) in &before {
            let path = node.join(rel);
            let command = command_for(&path);
            let args: Vec<&str> = command.iter().map(String::as_str).collect();
            let text = run(&args);
            assert!(!text.is_empty(), "{}", path.display());
            let mut json_args = args.clone();
            json_args.push("--json");
            let json: serde_json::Value = serde_json::from_str(&run(&json_args)).unwrap();
            assert!(json.is_object(), "{}", path.display());
            files += 1;
        }
        let summary = run(&["node", &node.display().to_string()]);
        assert!(summary.contains("verdict:"), "{summary}");
        assert_eq!(hashes(&node), before, "{}", node.display());
    }
    assert!(files > 100, "only {files} fixture files");
}

#[test]
fn a_damaged_segment_is_decoded_up_to_the_damage_with_its_bytes() {
    let segment =
        fixtures().join("needs-peer-repair/node/partitions/1.1.2/00000000000000000000.log");
    let text = run(&["segment", &segment.display().to_string()]);
    assert!(text.contains("BODY CHECKSUM MISMATCH"), "{text}");
    // Entries after the damaged one are still listed: a bad body does not hide the rest.
    assert!(
        text.lines().filter(|l| l.starts_with('@')).count() > 3,
        "{text}"
    );
    let mut bytes = vec![0u8; 700];
    bytes[..300].fill(0xAB);
    let (value, text) = iggy_inspect::decode_segment(&bytes, true);
    assert!(text.contains("header does not verify"), "{text}");
    assert!(text.contains("00000000  ab ab"), "{text}");
    assert_eq!(value["batches"], 0);
}

#[test]
fn wal_shows_the_frontier_against_what_verifies_and_what_was_written() {
    let partition = fixtures().join("unpublished/node/partitions/1.1.1");
    let json: serde_json::Value =
        serde_json::from_str(&run(&["--json", "wal", &partition.display().to_string()])).unwrap();
    let files = json["files"].as_array().unwrap();
    assert!(files.len() >= 2, "{json}");
    let head = files.last().unwrap();
    // The unpublished tail: entries that verify past what the frontier vouches for.
    assert!(
        head["valid_entries"].as_u64() > head["trusted_entries"].as_u64(),
        "{head}"
    );
    assert!(
        head["seen_end"].as_u64() >= head["valid_end"].as_u64(),
        "{head}"
    );
    for sealed in &files[..files.len() - 1] {
        assert_eq!(sealed["valid_end"], sealed["trusted_end"], "{sealed}");
    }
    let listed = run(&["wal", "--entries", &partition.display().to_string()]);
    assert!(listed.contains("@0 op 1 size"), "{listed}");
}

/// A refused log still shows what each file holds: the damaged file's entries verify only up to
/// the damage, while its written bytes go on past it. That is where a reader of the refusal
/// looks next.
#[test]
fn a_refused_wal_still_shows_each_file_up_to_its_damage() {
    let partition = fixtures().join("needs-peer-repair/node/partitions/1.1.2");
    let text = run(&["wal", &partition.display().to_string()]);
    assert!(text.contains("boot refuses: "), "{text}");
    let json: serde_json::Value =
        serde_json::from_str(&run(&["--json", "wal", &partition.display().to_string()])).unwrap();
    assert!(json["refusal"].is_string(), "{json}");
    let files = json["files"].as_array().unwrap();
    let damaged = files
        .iter()
        .find(|f| f["file"] == "00000000000000000000.log")
        .unwrap();
    // The fixture's damage is the body of the entry at offset 595.
    assert_eq!(damaged["valid_end"], 595, "{damaged}");
    assert!(
        damaged["seen_end"].as_u64() > damaged["valid_end"].as_u64(),
        "{damaged}"
    );
    assert!(damaged["trusted_end"].is_null(), "{damaged}");
}

/// An error names the path as it was given: a directory where a file was expected, a missing
/// file, a directory that is not a node.
#[test]
fn errors_name_the_path_as_given() {
    let dir = node();
    let error = |args: &[&str]| {
        let cli = iggy_inspect::Cli::try_parse_from(
            std::iter::once("iggy-inspect").chain(args.iter().copied()),
        )
        .unwrap();
        iggy_inspect::run(&cli, &mut Vec::new()).unwrap_err()
    };
    let metadata = path(&dir, "metadata");
    let text = error(&["segment", &metadata]);
    assert!(
        text.contains(&format!("{metadata}: is a directory")),
        "{text}"
    );
    let missing = path(&dir, "metadata/no-such-snapshot.bin");
    let text = error(&["snapshot", &missing]);
    assert!(text.contains(&format!("{missing}: not found")), "{text}");
    let text = error(&["node", &metadata]);
    assert!(
        text.contains(&format!("{metadata}: not a node data directory")) && !text.contains(": :"),
        "{text}"
    );
}

/// Exit codes: 0 when what was inspected verifies, 1 when it is damaged (or boot would change
/// it), 2 when it is not a file of that kind, naming the kind its magic says. Before, a file of
/// the wrong kind exited 0 with a page of "checksum mismatch".
#[test]
fn the_exit_code_says_verified_damaged_or_wrong_kind() {
    let node = fixtures().join("clean/node");
    let file = |rel: &str| node.join(rel).display().to_string();
    let superblock = file("partitions/1.1.1/superblock");
    let segment = file("partitions/1.1.1/00000000000000000000.log");
    let index = file("partitions/1.1.1/00000000000000000000.index");
    let snapshot = file("metadata/snapshot.bin");
    let frontier = file("partitions/1.1.1/frontier");
    for args in [
        vec!["superblock", superblock.as_str()],
        vec!["frontier", frontier.as_str()],
        vec!["segment", segment.as_str()],
        vec!["index", index.as_str()],
        vec!["snapshot", snapshot.as_str()],
    ] {
        assert_eq!(run_code(&args).0, 0, "{args:?}");
    }
    for (command, given, kind) in [
        ("superblock", &segment, "segment"),
        ("snapshot", &superblock, "superblock"),
        ("index", &frontier, "frontier"),
        ("frontier", &index, "index"),
        ("segment", &snapshot, "snapshot"),
    ] {
        let (code, text) = run_code(&[command, given]);
        assert_eq!(code, 2, "{command} {given}: {text}");
        assert!(
            text.contains(&format!(
                "not a {command} file: it looks like a {kind} file"
            )),
            "{text}"
        );
        assert!(text.contains("magic") || kind == "segment", "{text}");
    }
    let damaged =
        fixtures().join("needs-peer-repair/node/partitions/1.1.2/00000000000000000000.log");
    assert_eq!(run_code(&["segment", &damaged.display().to_string()]).0, 1);
    let repair_copy = fixtures().join("repair-copy/node/partitions/1.1.1/superblock");
    assert_eq!(
        run_code(&["superblock", &repair_copy.display().to_string()]).0,
        1
    );
    assert_eq!(run_code(&["node", &node.display().to_string()]).0, 0);
    let unpublished = fixtures().join("unpublished/node");
    assert_eq!(run_code(&["node", &unpublished.display().to_string()]).0, 1);
}

/// The text is for people: no Rust debug forms, timestamps as dates, and the actions in the
/// words iggy-fsck uses.
#[test]
fn the_text_has_no_debug_forms_and_shows_dates() {
    let node = fixtures().join("unpublished/node");
    let partition = node.join("partitions/1.1.1");
    let segment = partition.join("00000000000000000000.log");
    let index = partition.join("00000000000000000000.index");
    let wal = run(&["wal", &partition.display().to_string()]);
    let segment_text = run(&["segment", &segment.display().to_string()]);
    let index_text = run(&["index", &index.display().to_string()]);
    for text in [&wal, &segment_text, &index_text] {
        for debug in ["{ ", "Some(", "UnpublishedTail", "DiscardUnpublished"] {
            assert!(!text.contains(debug), "{debug:?} in {text}");
        }
    }
    assert!(wal.contains("-> discard-unpublished"), "{wal}");
    // populate stamps batches from 1_700_000_000_000_000 us.
    assert!(
        segment_text.contains("at 2023-11-14T22:13:20"),
        "{segment_text}"
    );
    assert!(
        index_text.contains("at 2023-11-14T22:13:20"),
        "{index_text}"
    );
    // A sealed segment's index shows its summary and whether boot may take it.
    assert!(
        index_text.contains("summary: offsets 0..")
            && index_text.contains("the .log's last entry: boot may take a sealed segment"),
        "{index_text}"
    );
}

/// `-h` and `--help` list the exit codes; completions and the man page come from the tool.
#[test]
fn help_lists_the_exit_codes_and_completions_and_man_page_are_generated() {
    use clap::CommandFactory;
    let mut command = iggy_inspect::Cli::command();
    let short = command.render_help().to_string();
    let long = command.render_long_help().to_string();
    for help in [&short, &long] {
        assert!(
            help.contains("Exit codes:") && help.contains("2  not a file of that kind"),
            "{help}"
        );
    }
    let (code, script) = run_code(&["--completions", "bash"]);
    assert_eq!(code, 0);
    assert!(
        script.contains("iggy-inspect") && script.contains("superblock"),
        "{script}"
    );
    let (code, man) = run_code(&["--man"]);
    assert_eq!(code, 0);
    assert!(man.contains(".TH") && man.contains("iggy-inspect"), "{man}");
}

/// A log whose small publications carried their entries: `frontier` lists each ring record with
/// the ops it carries, and `wal` says which publications' ring records the frontier relies on.
#[test]
fn frontier_and_wal_say_which_ring_record_carries_which_entries() {
    let dir = node();
    let wal = path(&dir, "metadata/wal");
    let frontier = run(&["frontier", &format!("{wal}/frontier")]);
    let json: serde_json::Value =
        serde_json::from_str(&run(&["--json", "frontier", &format!("{wal}/frontier")])).unwrap();
    // The node's three small publications after its first each carried one entry, in both
    // records of the pair their sequence names.
    let ring = json["ring"].as_array().unwrap();
    assert_eq!(ring.len(), 6, "{json:#}");
    let mut ops = Vec::new();
    for pair in ring.chunks(2) {
        let sequence = pair[0]["sequence"].as_u64().unwrap();
        for (copy, record) in pair.iter().enumerate() {
            assert_eq!(record["valid"], true, "{record}");
            assert_eq!(record["sequence"].as_u64(), Some(sequence), "{record}");
            let index = record["record"].as_u64().unwrap();
            assert_eq!(index, (sequence % 16) * 2 + copy as u64, "{record}");
            assert!(
                frontier.contains(&format!(
                    "ring record {index} (offset {}): sequence {sequence} head op {}",
                    record["offset"], record["head_op"]
                )),
                "{frontier}"
            );
        }
        assert_eq!(pair[0]["carried_entries"], 1, "{}", pair[0]);
        ops.push(pair[0]["carried_first_op"].as_u64().unwrap());
    }
    assert_eq!(ops, [1, 2, 3], "{json:#}");
    assert!(
        frontier.contains("carries 1 entry (ops 1..=1, "),
        "{frontier}"
    );
    assert!(
        frontier.contains("relies on the ring records of publications 2..=4"),
        "{frontier}"
    );
    // `wal` names the publication, its ops, its two records and what boot does with them.
    let shown = run(&["wal", &wal]);
    for (publication, op, records) in [(2, 1, "4 and 5"), (3, 2, "6 and 7"), (4, 3, "8 and 9")] {
        let line =
            format!("publication {publication} carries ops {op}..={op} in ring records {records}");
        assert!(shown.contains(&line), "{line} missing:\n{shown}");
    }
    assert!(
        shown.contains("boot writes it back if it was lost"),
        "{shown}"
    );
    // The log holds its copy (no power loss here): nothing is restored.
    assert!(!shown.contains("restore-carried"), "{shown}");
}

/// Which files boot takes from their seals: each sealed file's line says what its seal holds
/// and whether it agrees with what the file verifies to; a rotten seal is named unusable.
#[test]
fn wal_shows_each_files_seal_and_whether_it_agrees() {
    let dir = tempfile::tempdir().unwrap();
    let storage = OsStorage::open(dir.path()).unwrap();
    let config = iggy_wal::Config {
        file_size_bytes: 8192,
        ..iggy_wal::Config::new(7)
    };
    let wal = iggy_wal::Wal::create(storage.clone(), Path::new("log"), config, 1, 0).unwrap();
    for i in 0..40u8 {
        wal.append_body(&[i; 700], 1, 0).unwrap();
        wal.publish().unwrap();
    }
    drop(wal);
    let log = path(&dir, "log");
    let text = run(&["wal", &log]);
    assert!(text.contains("of them from seals"), "{text}");
    assert!(
        text.contains("sealed: ") && text.contains("agrees with the file"),
        "{text}"
    );
    let json: serde_json::Value = serde_json::from_str(&run(&["--json", "wal", &log])).unwrap();
    assert!(json["sealed_bytes"].as_u64().unwrap() > 0, "{json}");
    let files = json["files"].as_array().unwrap();
    assert!(files.len() >= 3, "{json}");
    let first = &files[0];
    assert_eq!(first["seal"]["valid"], true, "{first}");
    assert_eq!(first["seal"]["agrees"], true, "{first}");
    assert_eq!(first["seal"]["entries"], first["valid_entries"], "{first}");
    assert!(
        files.last().unwrap()["seal"].is_null(),
        "the head file has none"
    );
    // A rotten seal: unusable, and boot scans its file.
    let seal = iggy_wal::seal::path_for(&Path::new("log").join(first["file"].as_str().unwrap()));
    let file = storage.open(&seal, OpenMode::Existing).unwrap();
    let last = file.len().unwrap() - 1;
    let mut byte = [0u8];
    file.read_exact_at(last, &mut byte).unwrap();
    file.write_all_at(last, &[byte[0] ^ 1]).unwrap();
    let text = run(&["wal", &log]);
    assert!(text.contains("seal unusable (checksum mismatch"), "{text}");
}

/// A spare in a WAL directory is listed as what it is (a retired file kept for reuse, not part
/// of the log), in text and JSON, and changes nothing about what boot trusts.
#[test]
fn wal_lists_a_spare_as_a_retired_file_not_the_logs() {
    let dir = node();
    let wal_dir = dir.path().join("metadata/wal");
    let storage = OsStorage::open(&wal_dir).unwrap();
    let log = iggy_io::ReadStorage::list_dir(&storage, "")
        .unwrap()
        .into_iter()
        .find(|e| e.name.to_string_lossy().ends_with(".wal"))
        .unwrap();
    let bytes = iggy_io::ReadStorage::open_read(&storage, &log.name)
        .unwrap()
        .read_all()
        .unwrap();
    storage
        .open("00000000000000000003.spare", OpenMode::CreateNew)
        .unwrap()
        .write_all_at(0, &bytes)
        .unwrap();
    let text = run(&["wal", &path(&dir, "metadata/wal")]);
    assert!(text.contains("boot trusts ops 1..=3"), "{text}");
    assert!(
        text.contains("00000000000000000003.spare: a spare (a retired file kept for reuse"),
        "{text}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&run(&["wal", &path(&dir, "metadata/wal"), "--json"])).unwrap();
    let spares = json["spares"].as_array();
    assert_eq!(spares.map(Vec::len), Some(1), "{json}");
}

/// `index` shows a sealed segment's client sessions (version 3): each client's newest request,
/// its op and, for a batch, the offsets it was given.
#[test]
fn index_shows_the_client_sessions_of_its_segment() {
    let dir = tempfile::tempdir().unwrap();
    let storage = OsStorage::open(dir.path()).unwrap();
    let config = iggy_segments::Config {
        segment_size_bytes: 4096,
        index_interval_bytes: 1024,
        replicated: true,
        ..iggy_segments::Config::new(0x9A, 1, ID)
    };
    let partition = iggy_segments::Partition::create(storage, Path::new("p"), config).unwrap();
    for request in 1..=40u64 {
        let mut batch = iggy_format::batch::encode(
            request,
            &[iggy_format::batch::NewMessage {
                id: u128::from(request),
                timestamp_delta: 0,
                payload: vec![7; 200],
                user_headers: Vec::new(),
            }],
        )
        .unwrap();
        let meta = iggy_format::PrepareMeta {
            client: 0xC0 + u128::from(request % 2),
            request,
            now_us: 1_700_000_000_000_000 + request,
            ..iggy_format::PrepareMeta::default()
        };
        partition
            .prepare(iggy_segments::Request::Messages(&mut batch), &meta)
            .unwrap();
    }
    let sealed = partition.segments()[0].clone();
    drop(partition);
    let index = dir
        .path()
        .join("p")
        .join(iggy_segments::index::file_name(sealed.start_offset));
    let text = run(&["index", index.to_str().unwrap()]);
    assert!(text.contains("2 client sessions"), "{text}");
    assert!(text.contains("client 0xc1 request"), "{text}");
    let json: serde_json::Value =
        serde_json::from_str(&run(&["--json", "index", index.to_str().unwrap()])).unwrap();
    let sessions = json["summary"]["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 2, "{json}");
    assert_eq!(sessions[0]["operation"], "messages");
}

/// A rebuild marker (`rebuilt-from-peers`, written by a node that rebuilt a damaged partition
/// from its peers) decodes with its views; a flipped bit is damage (exit 1), and another kind of
/// file is named by its magic (exit 2), both ways.
#[test]
fn a_rebuild_marker_shows_the_views_its_replica_forgot() {
    let dir = tempfile::tempdir().unwrap();
    let marker = iggy_segments::rebuilt::Marker {
        view: 9,
        forgotten_through: 7,
    };
    let file = dir.path().join(iggy_segments::rebuilt::FILE_NAME);
    #[allow(clippy::disallowed_methods)]
    std::fs::write(&file, marker.encode()).unwrap();
    let file = file.display().to_string();
    let (code, text) = run_code(&["rebuilt", &file]);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("in view 9") && text.contains("through view 7"),
        "{text}"
    );
    let json = run(&["--json", "rebuilt", &file]);
    assert!(json.contains("\"forgotten_through\": 7"), "{json}");

    let mut rotten = marker.encode();
    rotten[14] ^= 0x10;
    #[allow(clippy::disallowed_methods)]
    std::fs::write(&file, rotten).unwrap();
    let (code, text) = run_code(&["rebuilt", &file]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("does not verify"), "{text}");

    let superblock = fixtures()
        .join("clean/node/partitions/1.1.1/superblock")
        .display()
        .to_string();
    let (code, text) = run_code(&["rebuilt", &superblock]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("it looks like a superblock file"), "{text}");
    #[allow(clippy::disallowed_methods)]
    std::fs::write(dir.path().join("m"), marker.encode()).unwrap();
    let (code, text) = run_code(&["superblock", &path(&dir, "m")]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("it looks like a rebuilt file"), "{text}");
}

/// A consumer offset file: both slots, which one the partition reads and why; a rotten slot
/// with its bytes beside the good one (exit 1); no good slot, a misnamed file, a version 2 file,
/// and a file of another kind (exit 2).
#[test]
fn offsets_shows_both_slots_and_which_one_the_partition_reads() {
    use iggy_segments::offsets::{ConsumerKind, OffsetStore};
    let dir = tempfile::tempdir().unwrap();
    let storage = OsStorage::open(dir.path()).unwrap();
    storage.create_dir("offsets").unwrap();
    let store = OffsetStore::new(storage.clone(), Path::new("offsets"));
    store.prepare_file(ConsumerKind::Group, 4).unwrap();
    let file = path(&dir, "offsets/group.0000000004");
    let (code, text) = run_code(&["offsets", &file]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("no offset yet (the placeholder"), "{text}");
    for offset in [100, 200, 300] {
        store.store(ConsumerKind::Group, 4, offset).unwrap();
    }
    let (code, text) = run_code(&["offsets", &file]);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("slot 0 (offset 0): group 4, offset 200, sequence 2")
            && text.contains("slot 1 (offset 64): group 4, offset 300, sequence 3")
            && text.contains("reads as slot 1: group 4, offset 300 (sequence 3, op 0), the higher"),
        "{text}"
    );
    let json = run(&["--json", "offsets", &file]);
    assert!(json.contains("\"reads_as\": 1"), "{json}");

    let handle = storage
        .open("offsets/group.0000000004", OpenMode::Existing)
        .unwrap();
    handle.write_all_at(64 + 40, &[0xFF]).unwrap();
    let (code, text) = run_code(&["offsets", &file]);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("slot 1 (offset 64): does not verify")
            && text.contains("reads as slot 0: group 4, offset 200")
            && text.contains("the one slot that verifies"),
        "{text}"
    );
    handle.write_all_at(40, &[0xFF]).unwrap();
    let (code, text) = run_code(&["offsets", &file]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("never read as offset 0"), "{text}");

    store.store(ConsumerKind::Consumer, 9, 5).unwrap();
    storage
        .rename("offsets/consumer.0000000009", "offsets/consumer.0000000008")
        .unwrap();
    let (code, text) = run_code(&["offsets", &path(&dir, "offsets/consumer.0000000008")]);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("not consumer.0000000008") || text.contains("named consumer.0000000008"),
        "{text}"
    );

    let legacy = fixtures()
        .join("refuse/node/partitions/1.1.1/offsets/consumer.0000000001")
        .display()
        .to_string();
    let (code, text) = run_code(&["offsets", &legacy]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("version 2: one record"), "{text}");

    let superblock = fixtures()
        .join("clean/node/partitions/1.1.1/superblock")
        .display()
        .to_string();
    let (code, text) = run_code(&["offsets", &superblock]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("it looks like a superblock file"), "{text}");
}

/// Any bytes as an offset file, of every length around one and two slots: decoded without a
/// panic, every exit code one of the verdicts. (The fuzz target `inspect_files` runs it too.)
#[test]
fn offsets_decodes_any_bytes_without_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("consumer.0000000001");
    let shown = file.display().to_string();
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    for len in (0..=200).chain([64, 128, 128, 128]) {
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        #[allow(clippy::disallowed_methods)]
        std::fs::write(&file, &bytes).unwrap();
        let (code, _) = run_code(&["offsets", &shown]);
        assert!(matches!(code, 1 | 2), "{len} random bytes: exit {code}");
        let _ = run(&["--json", "offsets", &shown]);
    }
}
