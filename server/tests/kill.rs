//! Real processes killed with SIGKILL under load: three `iggy-server run` nodes, producers from
//! `iggy-server load` (a process, writing its ledger), a node killed and restarted on a schedule,
//! then all three at the same moment. Afterwards `iggy-server verify` must find every
//! acknowledged message on every node exactly once, a fresh load must be acknowledged in full
//! (the cluster serves again), every node must stop cleanly on SIGTERM, and `iggy-fsck --deep`
//! (the binary, as a process) must exit 0 on each data directory.
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
/// Small segments: an unpublished tail spans several files, so the fsck comparison covers whole
/// files removed past the frontier, not only a tail cut inside one.
const SEGMENT_BYTES: u64 = 1 << 20;

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
    metrics: SocketAddr,
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

/// A failed test does not leave its nodes running.
impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

fn cluster(dir: &Path) -> Vec<Node> {
    cluster_of(dir, 3, "")
}

/// `count` nodes; `limits` is the body of each configuration's `[limits]` section.
fn cluster_of(dir: &Path, count: usize, limits: &str) -> Vec<Node> {
    let addresses = common::free_addresses(3 * count);
    let mut roster = String::new();
    for i in 0..count {
        roster.push_str(&format!(
            "\n[[nodes]]\nname = \"node-{i}\"\nclient = \"{}\"\nreplica = \"{}\"\nmetrics = \"{}\"\n",
            addresses[i],
            addresses[count + i],
            addresses[2 * count + i]
        ));
    }
    (0..count)
        .map(|i| {
            let data = dir.join(format!("node-{i}"));
            let config = dir.join(format!("node-{i}.toml"));
            std::fs::write(
                &config,
                format!(
                    "cluster_id = 7\ncluster_key = \"kill\"\nreplica = {i}\ndata_dir = \"{}\"\n\n[topics]\nsegment_size_bytes = {SEGMENT_BYTES}\n\n[limits]\n{limits}\n{roster}",
                    data.display()
                ),
            )
            .expect("configuration");
            Node {
                index: i,
                config,
                data,
                client: addresses[i],
                metrics: addresses[2 * count + i],
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
        "--consumers".into(),
    ];
    if create {
        args.push("--create".into());
    }
    args
}

/// A load with no fault running into it: it exits 0, acknowledges something and leaves no
/// batch of unknown outcome. Its JSON report.
fn fault_free_load(
    nodes: &[Node],
    form: &Form,
    create: bool,
    duration: Duration,
    ledger: &Path,
) -> String {
    let (code, stdout, stderr) = run_tool(
        &load_args(nodes, form, create, duration, ledger),
        Duration::from_secs(600),
    );
    assert_eq!(code, 0, "load: {stdout}\n{stderr}");
    assert_eq!(report_field(&stdout, "batches_unknown"), 0, "{stdout}");
    assert!(
        report_field(&stdout, "batches_acknowledged") > 0,
        "{stdout}"
    );
    // Its consumers read every message it sent, in order, each once (there was no unknown
    // outcome), and nothing else of this run.
    assert_consumers(&stdout, form);
    assert_eq!(
        consumers_field(&stdout, "consumed"),
        report_field(&stdout, "messages_acknowledged"),
        "{stdout}"
    );
    assert_eq!(consumers_field(&stdout, "missed"), 0, "{stdout}");
    stdout
}

/// A load's consumers each read through their producer's last acknowledged message, with no
/// offset skipped and no payload damaged.
fn assert_consumers(stdout: &str, form: &Form) {
    assert_eq!(
        consumers_field(stdout, "caught_up"),
        u64::from(form.replicated + form.persisted),
        "{stdout}"
    );
    assert_eq!(consumers_field(stdout, "skipped"), 0, "{stdout}");
    assert_eq!(consumers_field(stdout, "damaged"), 0, "{stdout}");
    assert_eq!(consumers_field(stdout, "changed"), 0, "{stdout}");
    assert!(
        consumers_field(stdout, "missed") <= consumers_field(stdout, "lost_with_a_reply"),
        "{stdout}"
    );
}

fn consumers_field(json: &str, field: &str) -> u64 {
    let value: serde_json::Value = serde_json::from_str(json.trim()).expect("load's JSON report");
    value["consumers"][field]
        .as_u64()
        .unwrap_or_else(|| panic!("consumers.{field} in {json}"))
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
        // A whole file past the frontier is removed with its unpublished bytes: the check
        // names that a discard of those bytes.
        let action = if line.contains("discarding unpublished bytes")
            || line.contains("removing a file beyond the durable WAL frontier")
        {
            "discard-unpublished"
        } else if line.contains("removing a leftover file") {
            "remove-leftover"
        } else if line.contains("rebuilding segment index") {
            "rebuild-index"
        } else if line.contains("repairing a superblock copy") {
            "repair-copy"
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
    // Replicated partitions publish by size only (every 16 MiB), not every 100 ms: the check
    // below compares what `iggy-fsck` predicts each boot discards with what it discards, and
    // needs unpublished tails to compare (with the 100 ms publications a kill found none).
    let mut nodes = cluster_of(dir.path(), 3, "publish_interval_ms = 0");
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
    println!("kill loop: load {}", stdout.trim());
    // Single kills lose nothing: every acknowledged message on every node, exactly once. (Run
    // before the load's own verdict, so a failing load still shows what the nodes hold.)
    let (verify_code, checks, output) = verify(&nodes, &ledger, "60s");
    assert_eq!(code, 0, "load: {stdout}\n{stderr}\nverify: {output}");
    assert!(
        report_field(&stdout, "batches_acknowledged") > 0,
        "{stdout}"
    );
    // Consumers read on across the kills (again after a reconnect, never past a gap, never a
    // message that changed under them), and read every acknowledged message but those whose
    // offsets went by with a poll answer lost to a kill.
    assert_consumers(&stdout, &form);
    println!(
        "kill loop: consumers read {} of {} acknowledged messages, {} never",
        consumers_field(&stdout, "consumed"),
        report_field(&stdout, "messages_acknowledged"),
        consumers_field(&stdout, "missed"),
    );
    assert_eq!(verify_code, 0, "verify after the single kills: {output}");
    assert_eq!(
        checks.len(),
        3 * (form.replicated + form.persisted) as usize
    );
    let copies: u64 = checks.iter().map(|c| number(c, "acknowledged")).sum();
    println!("kill loop: after the single kills, {copies} acknowledged message copies verified");

    // What the operator sees of it. Each victim led some groups (primaries are spread): the
    // survivors logged those groups' view changes, with how long each took. Each restart
    // discarded replicated tails nobody had published and fetched them back from the others'
    // rings: the survivors counted the repair bytes they sent.
    let elections: Vec<String> = nodes
        .iter()
        .flat_map(|node| {
            (1..=node.lives).flat_map(move |life| {
                let path = node.data.with_extension(format!("life-{life}.log"));
                std::fs::read_to_string(path)
                    .unwrap_or_default()
                    .lines()
                    .filter(|l| {
                        l.contains("view change done")
                            && l.contains("from_status=\"view_change\"")
                            && l.contains("view_change_ms=")
                    })
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    assert!(
        !elections.is_empty(),
        "no node logged a view change it went through"
    );
    let repaired: u64 = nodes
        .iter()
        .map(|node| {
            common::scrape(node.metrics)
                .lines()
                .filter(|l| l.starts_with("iggy_repair_sent_bytes_total{"))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
                .sum::<u64>()
        })
        .sum();
    assert!(repaired > 0, "no node counted repair bytes sent");
    println!(
        "kill loop: {} view changes logged, {repaired} repair bytes sent",
        elections.len()
    );

    // All three at the same moment, with a second load running into it.
    let second = dir.path().join("all.ledger");
    let load = {
        // No consumers: a replicated partition cut back under them is a loss the verify below
        // accounts for, not a consumer's fault.
        let mut args = load_args(&nodes, &form, false, Duration::from_secs(8), &second);
        args.retain(|a| a != "--consumers");
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
    assert!(
        expected.iter().any(
            |acts| acts.iter().filter(|a| a.0 == "discard-unpublished").count()
                > form.replicated as usize
        ),
        "no unpublished tail spanned segment files: whole-file removals went untested"
    );

    // The cluster serves again: a load with no fault is acknowledged in full.
    let third = dir.path().join("after.ledger");
    fault_free_load(&nodes, &form, false, Duration::from_secs(2), &third);

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
                number(check, "duplicated")
                    + number(check, "moved")
                    + number(check, "damaged")
                    + number(check, "offset_gaps"),
                0,
                "{what}\n{output}"
            );
            if topic == "persisted" {
                assert_eq!(number(check, "missing"), 0, "{what}\n{output}");
                continue;
            }
            // The loss is one run of the producer's sequence, the log cut back once below it and
            // continued from the cut.
            let parsed: iggy_server::load::PartitionCheck =
                serde_json::from_value(check.clone()).expect("verify's JSON line");
            assert!(parsed.lost_only_a_suffix(), "a hole, not a suffix: {what}");
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
        assert_fsck_clean(&node.data);
    }
}

/// `iggy-fsck --deep DATA_DIR`, the process an operator runs on a stopped node, exits 0: every
/// retained byte verified, nothing for boot to do.
fn assert_fsck_clean(data: &Path) {
    let output = Command::new(common::fsck_binary())
        .arg("--deep")
        .arg(data)
        .output()
        .expect("run iggy-fsck");
    assert_eq!(
        output.status.code(),
        Some(0),
        "iggy-fsck --deep {} after a clean stop:\n{}{}",
        data.display(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// What came back on a connection after bad input: the server closed it, or answered with an
/// eviction or an error status. Anything else (a success, or silence for 15 s) is `None`.
fn refused(stream: &mut std::net::TcpStream) -> Option<String> {
    use std::io::Read;
    stream
        .set_read_timeout(Some(Duration::from_secs(15)))
        .expect("timeout");
    let mut head = [0u8; iggy_protocol::HEADER_SIZE];
    let mut got = 0;
    while got < head.len() {
        match stream.read(&mut head[got..]) {
            Ok(0) => return Some("closed".into()),
            Ok(n) => got += n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
                ) =>
            {
                return Some("reset".into());
            }
            Err(_) => return None,
        }
    }
    if let Ok(eviction) = iggy_protocol::Eviction::decode(&head) {
        return Some(format!("evicted: {:?}", eviction.reason));
    }
    match iggy_protocol::ReplyHeader::decode(&head) {
        Ok(reply) if reply.status != 0 => Some(format!("status {}", reply.status)),
        _ => None,
    }
}

fn request_header(
    code: u32,
    body_len: usize,
    client: u128,
    session: u64,
    request: u64,
) -> iggy_protocol::RequestHeader {
    iggy_protocol::RequestHeader {
        size: u32::try_from(iggy_protocol::HEADER_SIZE + body_len).expect("small"),
        client,
        request_checksum: 0,
        timestamp: 0,
        request,
        operation: iggy_protocol::Operation::for_code(code),
        session,
        user_id: 0,
        code,
    }
}

/// Garbage, truncated, oversized and wrong-cluster input on a running node's client port and
/// replica bus, and clients that send before logging in or under another's session: each is
/// refused (closed, evicted or answered with an error status), every node stays up, and a load
/// that ran before the attack is whole afterwards on every node.
#[test]
fn bad_input_on_both_ports_is_refused_and_loses_nothing() {
    use std::io::Write as _;
    let form = Form {
        replicated: 2,
        persisted: 1,
        rate: 20,
        batch: 20,
        message_size: 100,
        cycles: 0,
        period: Duration::ZERO,
        down: Duration::ZERO,
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let mut nodes = cluster(dir.path());
    for node in &mut nodes {
        node.start();
    }
    let ledger = dir.path().join("before.ledger");
    fault_free_load(&nodes, &form, true, Duration::from_secs(2), &ledger);

    let client_port = nodes[0].client;
    let connect = || std::net::TcpStream::connect(client_port).expect("connect");
    let send_messages = iggy_protocol::code::SEND_MESSAGES;
    let mut outcomes = Vec::new();

    // Client port: garbage bytes.
    let mut stream = connect();
    let garbage: Vec<u8> = (0..600u32).map(|i| (i * 131 % 251) as u8).collect();
    stream.write_all(&garbage).expect("write");
    outcomes.push(("client port: garbage", refused(&mut stream)));
    // A header whose size says more than the configured limit.
    let mut stream = connect();
    let mut header = request_header(send_messages, 0, 0x51, 0, 1);
    header.size = u32::MAX;
    stream.write_all(&header.encode()).expect("write");
    outcomes.push(("client port: oversized", refused(&mut stream)));
    // From a logged-in client, a header that promises a body, the body cut short and the
    // write side closed.
    let mut cut = common::Client::connect(client_port, 0x52);
    assert!(matches!(cut.login("iggy"), common::Answer::Reply(h, _) if h.status == 0));
    let header = request_header(send_messages, 4000, 0x52, cut.session, 1);
    cut.stream.write_all(&header.encode()).expect("write");
    cut.stream.write_all(&[7u8; 100]).expect("write");
    cut.stream
        .shutdown(std::net::Shutdown::Write)
        .expect("shutdown");
    outcomes.push(("client port: truncated", refused(&mut cut.stream)));
    // A send before logging in.
    let mut stream = connect();
    let (code, body) = iggy_protocol::Request::SendMessages {
        stream: iggy_protocol::Identifier::Name("load".into()),
        topic: iggy_protocol::Identifier::Name("replicated".into()),
        partitioning: iggy_protocol::Partitioning::PartitionId(0),
        count: 1,
        batch: iggy_format::batch::encode(
            1,
            &[iggy_format::batch::NewMessage {
                id: 1,
                timestamp_delta: 0,
                payload: b"not logged in".to_vec(),
                user_headers: Vec::new(),
            }],
        )
        .expect("batch"),
    }
    .encode();
    stream
        .write_all(&request_header(code, body.len(), 0x53, 0, 1).encode())
        .expect("write");
    stream.write_all(&body).expect("write");
    outcomes.push(("client port: send before login", refused(&mut stream)));
    // Another client's session number.
    let mut owner = common::Client::connect(client_port, 0x54);
    assert!(matches!(owner.login("iggy"), common::Answer::Reply(h, _) if h.status == 0));
    let mut stream = connect();
    stream
        .write_all(&request_header(code, body.len(), 0x55, owner.session, 1).encode())
        .expect("write");
    stream.write_all(&body).expect("write");
    outcomes.push(("client port: another's session", refused(&mut stream)));

    // Replica bus of node 1: garbage, another cluster's handshake, a handshake without the key,
    // and with the right handshake a frame of impossible size.
    let bus = |cluster: u128, key: &[u8]| iggy_server::bus::BusConfig {
        cluster,
        replica: 2,
        peers: Vec::new(),
        key: key.to_vec(),
        tls: None,
    };
    let peer_port = {
        let text = std::fs::read_to_string(&nodes[1].config).expect("configuration");
        let config = iggy_server::config::FileConfig::load(&text, "node-1").expect("parses");
        config.nodes[1].replica
    };
    let mut stream = std::net::TcpStream::connect(peer_port).expect("connect");
    stream.write_all(&garbage).expect("write");
    outcomes.push(("bus: garbage", refused(&mut stream)));
    let mut stream = std::net::TcpStream::connect(peer_port).expect("connect");
    stream
        .write_all(&iggy_server::bus::hello(
            &bus(8, b"kill"),
            &iggy_server::bus::nonce().expect("a nonce"),
        ))
        .expect("write");
    outcomes.push(("bus: another cluster", refused(&mut stream)));
    // Without the key: the node's answer does not verify, and a confirmation under the guessed
    // key is refused.
    let mut stream = std::net::TcpStream::connect(peer_port).expect("connect");
    {
        use std::io::Read;
        let guess = bus(7, b"guess");
        let mine = iggy_server::bus::nonce().expect("a nonce");
        stream
            .write_all(&iggy_server::bus::hello(&guess, &mine))
            .expect("write");
        let mut answer = [0u8; iggy_server::bus::HANDSHAKE_BYTES];
        stream.read_exact(&mut answer).expect("the hello answered");
        assert!(iggy_server::bus::check_answer(&guess, 1, &mine, &answer).is_err());
        let theirs: [u8; 16] = answer[32..48].try_into().expect("16 bytes");
        stream
            .write_all(&iggy_server::bus::confirm(&guess, 1, &mine, &theirs))
            .expect("write");
    }
    outcomes.push(("bus: without the key", refused(&mut stream)));
    let mut stream = std::net::TcpStream::connect(peer_port).expect("connect");
    iggy_server::bus::dial_blocking(&mut stream, &bus(7, b"kill"), 1).expect("the handshake");
    let mut frame = [0xa5u8; 256];
    frame[92..96].copy_from_slice(&u32::MAX.to_le_bytes());
    stream.write_all(&frame).expect("write");
    outcomes.push(("bus: impossible frame size", refused(&mut stream)));

    for (what, outcome) in &outcomes {
        assert!(outcome.is_some(), "{what}: neither refused nor closed");
        println!("{what}: {}", outcome.as_deref().unwrap_or_default());
    }
    // Every node is still up and serving: a load with no fault is acknowledged in full...
    for node in &mut nodes {
        let child = node.child.as_mut().expect("started");
        assert!(
            child.try_wait().expect("status").is_none(),
            "node {} exited after the bad input",
            node.index
        );
    }
    let after = dir.path().join("after.ledger");
    fault_free_load(&nodes, &form, false, Duration::from_secs(2), &after);
    // ...and nothing acknowledged before or after is missing on any node.
    for ledger in [&ledger, &after] {
        let (code, _, output) = verify(&nodes, ledger, "60s");
        assert_eq!(code, 0, "{output}");
    }
    for node in &mut nodes {
        assert!(node.stop().success(), "node {} stops cleanly", node.index);
    }
}

/// A cluster of one node: every group is a replica of one, whose own journal write is the
/// quorum. Persisted partitions publish every op and replicated ones every 1 MiB here, and every
/// write is still answered and served. Failed (persisted: no reply ever; replicated: none after
/// the first publication) while a one-replica partition took a publication for a commit.
#[test]
fn a_one_node_cluster_answers_every_write() {
    let form = Form {
        replicated: 1,
        persisted: 1,
        rate: 0,
        batch: 100,
        message_size: 1000,
        cycles: 0,
        period: Duration::ZERO,
        down: Duration::ZERO,
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let mut nodes = cluster_of(dir.path(), 1, "checkpoint_bytes = 1048576");
    nodes[0].start();
    let ledger = dir.path().join("one.ledger");
    let stdout = fault_free_load(&nodes, &form, true, Duration::from_secs(3), &ledger);
    // More than a publication's worth went through the replicated partition.
    assert!(
        report_field(&stdout, "messages_acknowledged") * 1000 > 2 * 1_048_576,
        "{stdout}"
    );
    let (code, _, output) = verify(&nodes, &ledger, "10s");
    assert_eq!(code, 0, "{output}");
    assert!(nodes[0].stop().success());
    // iggy-fsck finds the one-node directory clean after the stop.
    assert_fsck_clean(&nodes[0].data);
}

/// The partition directories of a data directory, with their segment files (path, length),
/// oldest first.
fn segment_files(data: &Path) -> Vec<(PathBuf, Vec<(PathBuf, u64)>)> {
    let mut partitions: Vec<_> = std::fs::read_dir(data.join("partitions"))
        .expect("partitions")
        .map(|e| e.expect("entry").path())
        .collect();
    partitions.sort();
    partitions
        .into_iter()
        .map(|dir| {
            let mut logs: Vec<(PathBuf, u64)> = std::fs::read_dir(&dir)
                .expect("a partition")
                .map(|e| e.expect("entry").path())
                .filter(|p| p.extension().is_some_and(|x| x == "log"))
                .map(|p| {
                    let len = std::fs::metadata(&p).expect("metadata").len();
                    (p, len)
                })
                .collect();
            logs.sort();
            (dir, logs)
        })
        .collect()
}

/// Issue #33, a node whose own partitions are damaged: three `iggy-server run` processes take a
/// load; node 2 is killed (SIGKILL) and two of its partitions lose published data, one its head
/// segment file, the other its WAL frontier file. `iggy-fsck` (the
/// process) exits 2 naming both. Node 2 then starts anyway (it used to refuse, and only wiping
/// the node brought it back): its boot logs each partition rebuilt from its peers, and `verify`
/// finds every acknowledged message on every node, node 2 included, from its own client port.
/// After a clean stop `iggy-fsck --deep` exits 0 on node 2, the damaged files kept in
/// `.damaged-*` beside the rebuilt partitions.
#[test]
fn a_node_whose_partitions_were_damaged_rebuilds_them_from_its_peers() {
    let form = Form::chosen();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut nodes = cluster(dir.path());
    for node in &mut nodes {
        node.start();
    }
    let ledger = dir.path().join("load.ledger");
    fault_free_load(&nodes, &form, true, Duration::from_secs(4), &ledger);
    nodes[2].kill();

    // Two partitions of node 2 lose published data: of the persisted topic (the load creates it
    // second), whose segments are published before they are acknowledged.
    let mut damaged = Vec::new();
    for (partition, logs) in segment_files(&nodes[2].data) {
        if !partition
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("1.2."))
        {
            continue;
        }
        let Some((head, len)) = logs.last().cloned() else {
            continue;
        };
        if len < 4096 {
            continue;
        }
        if damaged.is_empty() {
            std::fs::remove_file(&head).expect("lose the head segment");
        } else {
            // The WAL's durable frontier: its log is history nothing vouches for.
            std::fs::remove_file(partition.join("frontier")).expect("lose the frontier");
        }
        damaged.push(partition);
        if damaged.len() == 2 {
            break;
        }
    }
    assert_eq!(damaged.len(), 2, "two partitions held published data");
    let fsck = Command::new(common::fsck_binary())
        .arg(&nodes[2].data)
        .output()
        .expect("run iggy-fsck");
    let report = String::from_utf8_lossy(&fsck.stdout).into_owned();
    assert_eq!(fsck.status.code(), Some(2), "{report}");
    let needs_peers: Vec<&str> = report
        .lines()
        .filter(|l| {
            l.trim_start().starts_with("partition ") && l.ends_with("NEEDS REPAIR FROM PEERS")
        })
        .collect();
    assert_eq!(needs_peers.len(), 2, "{report}");

    nodes[2].start();
    let log = std::fs::read_to_string(&nodes[2].log_path).expect("boot log");
    assert_eq!(
        log.matches("the damaged files were moved to").count(),
        2,
        "node 2 logs each rebuild:\n{log}"
    );
    let (code, _, output) = verify(&nodes, &ledger, "60s");
    assert_eq!(code, 0, "verify after the rebuild: {output}");

    for node in &mut nodes {
        let status = node.stop();
        assert!(status.success(), "node {}: {status}", node.index);
    }
    assert_fsck_clean(&nodes[2].data);
    for partition in &damaged {
        let kept = std::fs::read_dir(partition)
            .expect("the rebuilt partition")
            .filter_map(Result::ok)
            .any(|e| e.file_name().to_string_lossy().starts_with(".damaged-"));
        assert!(kept, "{}: the damaged files are kept", partition.display());
    }
}

/// A replica event counter of a node (`iggy_replica_events_total{event=...}`), summed over its
/// groups.
fn replica_events(node: &Node, event: &str) -> u64 {
    let wanted = format!("iggy_replica_events_total{{event=\"{event}\"}} ");
    common::scrape(node.metrics)
        .lines()
        .filter_map(|l| l.strip_prefix(wanted.as_str()))
        .filter_map(|v| v.trim().parse::<u64>().ok())
        .sum()
}

/// Issue #33's partition state transfer on processes: topics that keep at most 2 MiB a
/// partition (`max_topic_size`, segments of 1 MiB) and prepare rings of 2 MiB (`ring_bytes`),
/// node 2 SIGKILLed while a load writes several times that on the other two, whose retention
/// deletes what node 2 lacks. Node 2 restarted
/// learns it is below every peer's log, pulls a peer's committed segments over the replica bus
/// (the server's read thread serving the chunks), installs them, and serves its client port
/// from the installed partitions: `verify --retained` finds, on every node, every acknowledged
/// message from the first offset it serves on. Its metrics count an install for every partition
/// that took 8 MiB meanwhile and no transfer started twice; after SIGTERM `iggy-fsck --deep`
/// exits 0 on node 2.
#[test]
fn a_node_down_past_retention_installs_its_peers_segments_and_serves_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Rings of 2 MiB: what node 2 misses passes them, so its peers' retention decides.
    let mut nodes = cluster_of(
        dir.path(),
        3,
        "ring_bytes = 4194304\ncheckpoint_bytes = 1048576",
    );
    for node in &mut nodes {
        node.start();
    }
    let keep = 2 * SEGMENT_BYTES;
    let addresses = nodes_arg(&nodes);
    let args = |ledger: &Path, create: bool, duration: &str| -> Vec<String> {
        let mut args: Vec<String> = [
            "load",
            "--nodes",
            &addresses,
            "--replicated",
            "2",
            "--persisted",
            "2",
            "--batch",
            "100",
            "--message-size",
            "1000",
            "--duration",
            duration,
            "--json",
            "--max-topic-size",
            &keep.to_string(),
            "--ledger",
        ]
        .iter()
        .map(|s| (*s).to_string())
        .collect();
        args.push(ledger.display().to_string());
        if create {
            args.push("--create".into());
        }
        args
    };
    let first = dir.path().join("first.ledger");
    let (code, stdout, stderr) = run_tool(&args(&first, true, "1s"), Duration::from_secs(120));
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    nodes[2].kill();
    // Several times what a partition keeps, written while node 2 is down.
    let second = dir.path().join("second.ledger");
    let (code, stdout, stderr) = run_tool(&args(&second, false, "8s"), Duration::from_secs(300));
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let written = report_field(&stdout, "messages_acknowledged") * 1000 / 4;
    assert!(
        written > 3 * keep,
        "{written} bytes a partition: not past retention"
    );

    nodes[2].start();
    // `verify` reads node 2 last; the transfers run meanwhile.
    let mut checks: Vec<serde_json::Value> = Vec::new();
    let mut output = String::new();
    let mut while_down = 0;
    for ledger in [&first, &second] {
        while_down = checks.len();
        let (code, stdout, stderr) = run_tool(
            &[
                "verify".into(),
                "--nodes".into(),
                addresses.clone(),
                "--ledger".into(),
                ledger.display().to_string(),
                "--patience".into(),
                "90s".into(),
                "--retained".into(),
                "--json".into(),
            ],
            Duration::from_secs(900),
        );
        output.push_str(&format!("{stdout}\n{stderr}"));
        assert_eq!(
            code,
            0,
            "verify --retained: {output}\nthe nodes' warnings:\n{}",
            warnings(&nodes)
        );
        checks.extend(
            stdout
                .lines()
                .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("a check as JSON")),
        );
    }
    // The check is not empty: node 2 serves what it installed, and retention did delete.
    let node2 = nodes[2].client.to_string();
    for check in checks.iter().filter(|c| c["node"] == node2.as_str()) {
        assert!(number(check, "served") > 0, "{check}");
        println!(
            "node 2 {}/{}: {} acknowledged, {} served, {} retained away",
            check["topic"],
            check["partition"],
            number(check, "acknowledged"),
            number(check, "served"),
            number(check, "retained")
        );
    }
    assert!(
        checks.iter().any(|c| number(c, "retained") > 0),
        "retention deleted nothing: {output}"
    );
    // A partition that took 8 MiB while node 2 was down is past its peers' rings and what
    // their retention keeps: node 2 installs a transfer for it, once. (How many took that much
    // depends on the machine's speed; at least one must have.)
    let node0 = nodes[0].client.to_string();
    let far_behind = checks[while_down..]
        .iter()
        .filter(|c| c["node"] == node0.as_str() && number(c, "acknowledged") * 1000 >= 8 << 20)
        .count() as u64;
    let installed = replica_events(&nodes[2], "snapshot_installed");
    let started = replica_events(&nodes[2], "snapshot_transfer_started");
    assert!(far_behind >= 1, "no partition took 8 MiB: {output}");
    assert!(
        installed >= far_behind,
        "{installed} installs for {far_behind} partitions far behind"
    );
    assert_eq!(started, installed, "a transfer started over");
    println!("node 2: {installed} partition transfers installed");

    for node in &mut nodes {
        let status = node.stop();
        assert!(status.success(), "node {}: {status}", node.index);
    }
    assert_fsck_clean(&nodes[2].data);
}

/// Every WARN and ERROR line of every life of every node, for a failure's message.
fn warnings(nodes: &[Node]) -> String {
    let mut out = String::new();
    for node in nodes {
        for life in 1..=node.lives {
            let path = node.data.with_extension(format!("life-{life}.log"));
            for line in std::fs::read_to_string(&path).unwrap_or_default().lines() {
                if line.contains(" WARN ") || line.contains(" ERROR ") {
                    out.push_str(&format!("node {} life {life}: {line}\n", node.index));
                }
            }
        }
    }
    out
}

/// Issue #47: the consumer-group members of a node killed with SIGKILL leave their groups. Two
/// sessions, on nodes 1 and 2, split a topic's two partitions; node 1 is killed and stays down;
/// the node leading the metadata group drops node 1's member (its connection ended and nothing
/// of it arrives, `client_port/groups.rs` `keep_members`), and the surviving member holds both
/// partitions. Without the keeper's rule for peers the dead session keeps its partition, and
/// nobody reads it while node 1 is down.
#[test]
fn a_killed_nodes_group_members_leave_their_groups() {
    use iggy_protocol::{Identifier, Request, response, status};
    let dir = tempfile::tempdir().expect("temp dir");
    let mut nodes = cluster(dir.path());
    for node in &mut nodes {
        node.start();
    }
    let login = |address, client| {
        let mut c = common::Client::connect(address, client);
        assert!(matches!(c.login("iggy"), common::Answer::Reply(h, _) if h.status == 0));
        c
    };
    let mut admin = login(nodes[0].client, 0xb00);
    for request in [
        Request::CreateStream {
            name: "g".into(),
            options: vec![],
        },
        Request::CreateTopic {
            stream: Identifier::Name("g".into()),
            partitions: 2,
            name: "t".into(),
            options: vec![],
        },
        Request::CreateConsumerGroup {
            stream: Identifier::Name("g".into()),
            topic: Identifier::Name("t".into()),
            name: "billing".into(),
        },
    ] {
        assert_eq!(admin.ask_until_accepted(&request).0, 0, "{request:?}");
    }
    let group = || {
        (
            Identifier::Name("g".into()),
            Identifier::Name("t".into()),
            Identifier::Name("billing".into()),
        )
    };
    let join = || {
        let (stream, topic, group) = group();
        Request::JoinConsumerGroup {
            stream,
            topic,
            group,
        }
    };
    let held = |c: &mut common::Client| {
        let (stream, topic, group) = group();
        let (code, body) = c.ask(&Request::SyncConsumerGroup {
            stream,
            topic,
            group,
        });
        if code != 0 {
            // A view change of the metadata group after the kill: asked again.
            assert_eq!(code, status::TRANSIENT_NOT_ACCEPTED);
            return None;
        }
        response::read_group_assignment(&body)
            .expect("an assignment")
            .map(|(_, partitions)| partitions)
    };
    let mut doomed = login(nodes[1].client, 0xb01);
    assert_eq!(doomed.ask_until_accepted(&join()).0, 0);
    let mut survivor = login(nodes[2].client, 0xb02);
    assert_eq!(survivor.ask_until_accepted(&join()).0, 0);
    assert_eq!(held(&mut survivor).expect("a member").len(), 1);

    nodes[1].kill();
    let mut last = None;
    for _ in 0..1_200 {
        last = held(&mut survivor);
        if last.as_ref().is_some_and(|p| p.len() == 2) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        last,
        Some(vec![0, 1]),
        "the killed node's member still holds its partition"
    );
    drop(doomed);
}
