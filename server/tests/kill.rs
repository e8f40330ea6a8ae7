//! Real processes killed with SIGKILL under load: three `iggy-server run` nodes, producers from
//! `iggy-server load` (a process, writing its ledger), a node killed and restarted on a schedule,
//! then all three at the same moment. Afterwards `iggy-server verify` must find every
//! acknowledged message on every node exactly once, a fresh load must be acknowledged in full
//! (the cluster serves again), every node must stop cleanly on SIGTERM and check clean.
//!
//! At the moment all three are dead, each data directory is checked as `iggy-fsck` does
//! (`iggy_recovery::check_with`, the server's boot configuration), and what the check names (each
//! unpublished tail discarded, with its bytes; each file removed; each index rebuilt) must be
//! exactly what the next boot logs doing.
//!
//! The default run is a short form (6 partitions, 2 single-node kills, about a minute).
//! `IGGY_KILL_LOOP=1` runs the form: 24 partitions (12 of each durability), a random node
//! killed every 20 s and restarted 10 s later, 20 cycles (about 8 minutes); `IGGY_KILL_SEED`
//! picks the victims (the seed is printed).

#![allow(
    clippy::disallowed_types,
    clippy::disallowed_methods,
    reason = "configurations, logs and ledgers of the test are not a node's durable files"
)]

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::channel;
use std::time::{Duration, Instant};

use iggy_io::OsStorage;

mod common;

const EXE: &str = env!("CARGO_BIN_EXE_iggy-server");
const SEGMENT_BYTES: u64 = 8 << 20;

struct Form {
    replicated: u32,
    persisted: u32,
    rate: u32,
    batch: u32,
    message_size: u32,
    cycles: u32,
    /// From one kill to the next.
    period: Duration,
    /// From a kill to the restart.
    down: Duration,
}

impl Form {
    fn chosen() -> Self {
        if std::env::var_os("IGGY_KILL_LOOP").is_some() {
            Self {
                replicated: 12,
                persisted: 12,
                rate: 4,
                batch: 100,
                message_size: 1000,
                cycles: 20,
                period: Duration::from_secs(20),
                down: Duration::from_secs(10),
            }
        } else {
            Self {
                replicated: 3,
                persisted: 3,
                rate: 20,
                batch: 50,
                message_size: 200,
                cycles: 2,
                period: Duration::from_secs(5),
                down: Duration::from_secs(2),
            }
        }
    }
}

/// One node: its configuration, its process of the moment, and a log file per life.
struct Node {
    index: usize,
    config: PathBuf,
    data: PathBuf,
    client: SocketAddr,
    child: Option<Child>,
    lives: u32,
    /// The current life's stderr, copied by a thread.
    log_path: PathBuf,
}

impl Node {
    /// Starts the node and waits for its "node running" line (a node that exits first, or
    /// takes longer than 60 s, fails the test with its log).
    fn start(&mut self) {
        self.lives += 1;
        self.log_path = self.data.with_extension(format!("life-{}.log", self.lives));
        let mut child = Command::new(EXE)
            .args(["run", "--config"])
            .arg(&self.config)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("iggy-server run starts");
        let stderr = child.stderr.take().expect("stderr piped");
        let (tx, rx) = channel();
        let path = self.log_path.clone();
        std::thread::spawn(move || {
            let mut file = std::fs::File::create(&path).expect("log file");
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { return };
                let _ = writeln!(file, "{line}");
                let _ = tx.send(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(line) if line.contains("node running") => break,
                Ok(_) => {}
                Err(_) => panic!(
                    "node {} life {} did not start within 60 s:\n{}",
                    self.index,
                    self.lives,
                    std::fs::read_to_string(&self.log_path).unwrap_or_default()
                ),
            }
        }
        self.child = Some(child);
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().expect("SIGKILL");
            child.wait().expect("reaped");
        }
    }

    /// SIGTERM and the exit status, within 60 s.
    fn stop(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        let pid =
            rustix::process::Pid::from_raw(i32::try_from(child.id()).expect("pid")).expect("a pid");
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait());
        });
        rx.recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("node {} did not stop within 60 s", self.index))
            .expect("wait")
    }
}

fn cluster(dir: &Path) -> Vec<Node> {
    let addresses = common::free_addresses(9);
    let mut roster = String::new();
    for i in 0..3 {
        roster.push_str(&format!(
            "\n[[nodes]]\nname = \"node-{i}\"\nclient = \"{}\"\nreplica = \"{}\"\nmetrics = \"{}\"\n",
            addresses[i],
            addresses[3 + i],
            addresses[6 + i]
        ));
    }
    (0..3)
        .map(|i| {
            let data = dir.join(format!("node-{i}"));
            let config = dir.join(format!("node-{i}.toml"));
            std::fs::write(
                &config,
                format!(
                    "cluster_id = 7\ncluster_key = \"kill\"\nreplica = {i}\ndata_dir = \"{}\"\n\n[topics]\nsegment_size_bytes = {SEGMENT_BYTES}\n{roster}",
                    data.display()
                ),
            )
            .expect("configuration");
            Node {
                index: i,
                config,
                data,
                client: addresses[i],
                child: None,
                lives: 0,
                log_path: PathBuf::new(),
            }
        })
        .collect()
}

fn nodes_arg(nodes: &[Node]) -> String {
    nodes
        .iter()
        .map(|n| n.client.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// Runs `iggy-server` with `args` to its end (within `limit`): exit code and stdout.
fn run_tool(args: &[String], limit: Duration) -> (i32, String, String) {
    let child = Command::new(EXE)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("iggy-server starts");
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let output = rx
        .recv_timeout(limit)
        .unwrap_or_else(|_| panic!("iggy-server {args:?} did not finish within {limit:?}"))
        .expect("output");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn load_args(
    nodes: &[Node],
    form: &Form,
    create: bool,
    duration: Duration,
    ledger: &Path,
) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "load".into(),
        "--nodes".into(),
        nodes_arg(nodes),
        "--replicated".into(),
        form.replicated.to_string(),
        "--persisted".into(),
        form.persisted.to_string(),
        "--rate".into(),
        form.rate.to_string(),
        "--batch".into(),
        form.batch.to_string(),
        "--message-size".into(),
        form.message_size.to_string(),
        "--duration".into(),
        format!("{}ms", duration.as_millis()),
        "--ledger".into(),
        ledger.display().to_string(),
        "--json".into(),
    ];
    if create {
        args.push("--create".into());
    }
    args
}

fn report_field(json: &str, field: &str) -> u64 {
    let value: serde_json::Value = serde_json::from_str(json.trim()).expect("load's JSON report");
    value[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} in {json}"))
}

/// What a check of a stopped node says its next boot will do, and what a boot logged doing:
/// (action, file relative to the data directory, bytes).
type Acts = BTreeSet<(String, String, u64)>;

fn checked(node: &Node) -> Acts {
    let storage = OsStorage::open(&node.data).expect("data directory");
    let config = iggy_recovery::BootConfig {
        segment_size_bytes: SEGMENT_BYTES,
        ..iggy_recovery::BootConfig::new(0)
    };
    let report =
        iggy_recovery::check_with(&storage, Path::new(""), &config, |_, _| {}).expect("check");
    report
        .findings
        .iter()
        .filter(|f| f.action.is_local_repair())
        .map(|f| {
            let bytes = if f.action == iggy_recovery::Action::DiscardUnpublished {
                f.bytes
            } else {
                0
            };
            (
                f.action.name().to_string(),
                f.file.display().to_string(),
                bytes,
            )
        })
        .collect()
}

fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let start = line.find(&format!(" {key}="))? + key.len() + 2;
    line[start..].split(' ').next()
}

fn booted(log: &str) -> Acts {
    let mut acts = Acts::new();
    for line in log.lines() {
        let action = if line.contains("discarding unpublished bytes") {
            "discard-unpublished"
        } else if line.contains("removing a file beyond the durable WAL frontier")
            || line.contains("removing a leftover file")
        {
            "remove-leftover"
        } else if line.contains("rebuilding segment index") {
            "rebuild-index"
        } else {
            continue;
        };
        let file = field(line, "file").unwrap_or_default().to_string();
        let bytes = if action == "discard-unpublished" {
            field(line, "discarded_bytes")
                .and_then(|b| b.parse().ok())
                .unwrap_or(0)
        } else {
            0
        };
        acts.insert((action.to_string(), file, bytes));
    }
    acts
}

/// `verify` of `ledger` on every node, as JSON checks (exit code, checks).
fn verify(nodes: &[Node], ledger: &Path, patience: &str) -> (i32, Vec<serde_json::Value>, String) {
    let (code, stdout, stderr) = run_tool(
        &[
            "verify".into(),
            "--nodes".into(),
            nodes_arg(nodes),
            "--ledger".into(),
            ledger.display().to_string(),
            "--patience".into(),
            patience.into(),
            "--json".into(),
        ],
        Duration::from_secs(900),
    );
    let checks = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("a check as JSON"))
        .collect();
    (code, checks, format!("{stdout}\n{stderr}"))
}

fn number(check: &serde_json::Value, key: &str) -> u64 {
    check[key].as_u64().unwrap_or(0)
}

#[test]
fn nodes_killed_under_load_keep_every_acknowledged_message() {
    let form = Form::chosen();
    let seed: u64 = std::env::var("IGGY_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x1991);
    println!("kill loop: seed {seed}, {} cycles", form.cycles);
    let dir = tempfile::tempdir().expect("temp dir");
    let mut nodes = cluster(dir.path());
    for node in &mut nodes {
        node.start();
    }

    // The load, as a process, for the whole schedule and a tail after the last restart.
    let schedule = form.period * form.cycles + Duration::from_secs(4);
    let ledger = dir.path().join("kill.ledger");
    let load = {
        let args = load_args(&nodes, &form, true, schedule, &ledger);
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let _ = tx.send(run_tool(&args, Duration::from_secs(3600)));
        });
        rx
    };

    // Single kills: a node chosen by the seed, killed with SIGKILL, restarted `down` later.
    let mut state = seed;
    let started = Instant::now();
    for cycle in 0..form.cycles {
        let due = started + form.period * cycle + form.period / 2;
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let victim = usize::try_from((state >> 33) % 3).expect("small");
        nodes[victim].kill();
        std::thread::sleep(form.down);
        nodes[victim].start();
        println!(
            "kill loop: cycle {cycle}: node {victim} killed and restarted (life {})",
            nodes[victim].lives
        );
    }
    let (code, stdout, stderr) = load
        .recv_timeout(Duration::from_secs(600))
        .expect("the load ends");
    assert_eq!(code, 0, "load: {stdout}\n{stderr}");
    assert!(
        report_field(&stdout, "batches_acknowledged") > 0,
        "{stdout}"
    );
    println!("kill loop: load {}", stdout.trim());

    // Single kills lose nothing: every acknowledged message on every node, exactly once.
    let (code, checks, output) = verify(&nodes, &ledger, "60s");
    assert_eq!(code, 0, "verify after the single kills: {output}");
    assert_eq!(
        checks.len(),
        3 * (form.replicated + form.persisted) as usize
    );
    let copies: u64 = checks.iter().map(|c| number(c, "acknowledged")).sum();
    println!("kill loop: after the single kills, {copies} acknowledged message copies verified");

    // All three at the same moment, with a second load running into it.
    let second = dir.path().join("all.ledger");
    let load = {
        let args = load_args(&nodes, &form, false, Duration::from_secs(8), &second);
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let _ = tx.send(run_tool(&args, Duration::from_secs(600)));
        });
        rx
    };
    std::thread::sleep(Duration::from_secs(2));
    for node in &mut nodes {
        node.kill();
    }
    // What iggy-fsck says each node's boot will do...
    let expected: Vec<Acts> = nodes.iter().map(checked).collect();
    for node in &mut nodes {
        node.start();
    }
    let (code, stdout, stderr) = load
        .recv_timeout(Duration::from_secs(600))
        .expect("the second load ends");
    assert_eq!(code, 0, "load: {stdout}\n{stderr}");
    // ...is what it did.
    for (node, expected) in nodes.iter().zip(&expected) {
        let log = std::fs::read_to_string(&node.log_path).expect("boot log");
        assert_eq!(
            &booted(&log),
            expected,
            "node {}: the check's findings against the boot's log:\n{log}",
            node.index
        );
    }
    assert!(
        expected.iter().any(|acts| !acts.is_empty()),
        "the kill left nothing to repair on any node: the comparison tested nothing"
    );

    // The cluster serves again: a load with no fault is acknowledged in full.
    let third = dir.path().join("after.ledger");
    let (code, stdout, stderr) = run_tool(
        &load_args(&nodes, &form, false, Duration::from_secs(2), &third),
        Duration::from_secs(600),
    );
    assert_eq!(code, 0, "load: {stdout}\n{stderr}");
    assert_eq!(report_field(&stdout, "batches_unknown"), 0, "{stdout}");
    assert!(
        report_field(&stdout, "batches_acknowledged") > 0,
        "{stdout}"
    );

    // After the whole cluster was killed: persisted partitions (each op on disk before it is
    // acknowledged) keep everything. Replicated partitions promise to survive a minority's
    // failure: with every node killed at once, boot discards what no node had published (it
    // cannot tell a kill from a power loss), so they may lose acknowledged messages, but only a
    // suffix (nothing served above the first missing message), the same on every node, and
    // nothing duplicated, moved or damaged.
    for ledger in [&ledger, &second] {
        let (_, checks, output) = verify(&nodes, ledger, "5s");
        let mut lost_by_partition = std::collections::HashMap::new();
        for check in &checks {
            let topic = check["topic"].as_str().expect("topic");
            let what = format!("{} {check}", ledger.display());
            assert_eq!(
                number(check, "duplicated") + number(check, "moved") + number(check, "damaged"),
                0,
                "{what}\n{output}"
            );
            if topic == "persisted" {
                assert_eq!(number(check, "missing"), 0, "{what}\n{output}");
                continue;
            }
            if let (Some(from), Some(through)) = (
                check["missing_from"].as_u64(),
                check["served_through"].as_u64(),
            ) {
                assert!(from > through, "a hole, not a suffix: {what}");
            }
            let lost = lost_by_partition
                .entry(check["partition"].as_u64())
                .or_insert(number(check, "missing"));
            assert_eq!(*lost, number(check, "missing"), "nodes differ: {what}");
        }
        let lost: u64 = lost_by_partition.values().sum();
        println!(
            "kill loop: after all three were killed, {}: {lost} acknowledged messages of replicated partitions lost (unpublished on every node), none of persisted ones",
            ledger.display()
        );
    }
    // The load after the restart is whole.
    let (code, _, output) = verify(&nodes, &third, "60s");
    assert_eq!(code, 0, "verify after the restart: {output}");

    // A clean stop, and a clean check.
    for node in &mut nodes {
        let status = node.stop();
        assert!(status.success(), "node {}: {status}", node.index);
        let storage = OsStorage::open(&node.data).expect("data directory");
        let report = iggy_recovery::check(&storage, Path::new(""), |_, _| {}).expect("check");
        assert!(
            report.is_clean(),
            "node {} after a clean stop: {:?}",
            node.index,
            report.findings
        );
    }
}
