//! `iggy-server` as an operator runs it: `iggy-server dev` starts three node processes on
//! loopback, prints where they listen, serves a client on the wire, and on SIGINT stops every
//! node cleanly (exit 0) leaving data directories that check clean; started again on the same
//! directory, the nodes boot to what was committed. `run` refuses a bad configuration with the
//! file and the key. A hung process fails the test by its deadline, with what it printed.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

use iggy_io::OsStorage;
use iggy_protocol::response::{PollHeader, split_result};
use iggy_protocol::{Consumer, Identifier, Partitioning, PollingStrategy, Request, status};

mod common;
use common::{Answer, Client, scrape};

const EXE: &str = env!("CARGO_BIN_EXE_iggy-server");

/// A base port with BASE..BASE+2 and BASE+1000..BASE+1002 free a moment ago.
fn free_base() -> u16 {
    // Tests of this file run in parallel: each call starts from its own offset.
    static CALLS: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    for attempt in (call * 20)..(call * 20 + 200) {
        let salt = u16::try_from(std::process::id() % 97).unwrap_or(0);
        let base = 20_000 + salt * 100 + attempt * 7;
        let ports = (0..3).flat_map(|i| [base + i, base + 1000 + i, base + 2000 + i]);
        let held: Vec<_> = ports
            .map(|p| std::net::TcpListener::bind(("127.0.0.1", p)))
            .collect();
        if held.iter().all(Result::is_ok) {
            return base;
        }
    }
    panic!("no free ports");
}

/// The child's stdout lines, read on a thread.
fn lines(child: &mut Child) -> Receiver<String> {
    read_lines(child.stdout.take().expect("stdout piped"))
}

/// The lines of `from`, read on a thread.
fn read_lines(from: impl std::io::Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// `iggy-server dev` as a child of the test. A test that ends without [`interrupt`] (an
/// assertion failed) sends it SIGINT on the way out, which stops its nodes: a failed test
/// leaves no cluster holding its ports.
struct Dev(Option<Child>);

impl Dev {
    fn child(&mut self) -> &mut Child {
        self.0.as_mut().expect("dev not stopped yet")
    }

    fn id(&self) -> u32 {
        self.0.as_ref().map_or(0, Child::id)
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        if let Some(child) = &self.0
            && let Some(pid) = i32::try_from(child.id())
                .ok()
                .and_then(rustix::process::Pid::from_raw)
        {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::INT);
        }
    }
}

fn start_dev(dir: &Path, base: u16) -> (Dev, Vec<String>) {
    let mut child = Command::new(EXE)
        .args([
            "dev",
            "--nodes",
            "3",
            "--base-port",
            &base.to_string(),
            "--dir",
        ])
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("iggy-server dev starts");
    let lines = lines(&mut child);
    let mut seen = Vec::new();
    loop {
        match lines.recv_timeout(Duration::from_secs(60)) {
            Ok(line) => {
                let done = line.starts_with("Ctrl-C");
                seen.push(line);
                if done {
                    return (Dev(Some(child)), seen);
                }
            }
            Err(_) => {
                let _ = child.kill();
                let output = child.wait_with_output().expect("output");
                panic!(
                    "iggy-server dev printed no ready line within 60 s: {seen:?}\nstderr: {}",
                    String::from_utf8_lossy(&output.stderr)
                );
            }
        }
    }
}

/// SIGINT, as Ctrl-C in a terminal; waits (at most 60 s) and returns the exit code and stderr.
fn interrupt(mut dev: Dev) -> (i32, String) {
    let child = dev.0.take().expect("dev not stopped yet");
    let pid = rustix::process::Pid::from_raw(i32::try_from(child.id()).expect("pid")).expect("pid");
    rustix::process::kill_process(pid, rustix::process::Signal::INT).expect("signal");
    // Waited for on a thread (its stdout was taken by `lines`; stderr is read to the end).
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(output) => {
            let output = output.expect("wait");
            (
                output.status.code().unwrap_or(-1),
                String::from_utf8_lossy(&output.stderr).into_owned(),
            )
        }
        Err(_) => {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            panic!("iggy-server dev did not stop within 60 s of SIGINT");
        }
    }
}

fn login(address: SocketAddr, id: u128) -> Client {
    let mut client = Client::connect(address, id);
    assert!(matches!(client.login("iggy"), Answer::Reply(..)));
    assert_ne!(client.session, 0, "logged in");
    client
}

fn poll(client: &mut Client) -> (u32, PollHeader) {
    let (code, body) = client.ask(&Request::PollMessages {
        consumer: Consumer {
            group: false,
            id: Identifier::Numeric(1),
        },
        stream: Identifier::Name("orders".into()),
        topic: Identifier::Name("payments".into()),
        partition: Some(0),
        strategy: PollingStrategy::First,
        count: 100,
        auto_commit: false,
    });
    let header = if code == 0 {
        PollHeader::read(&body).expect("poll").0
    } else {
        PollHeader {
            partition_id: 0,
            current_offset: 0,
            messages_count: 0,
        }
    };
    (code, header)
}

#[test]
fn dev_runs_a_cluster_that_stops_cleanly_and_boots_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let base = free_base();
    let (dev, printed) = start_dev(dir.path(), base);
    assert!(
        printed
            .iter()
            .any(|l| l.contains(&format!("127.0.0.1:{base}"))),
        "{printed:?}"
    );
    assert!(
        printed
            .iter()
            .any(|l| l.starts_with("try: iggy --tcp-server-address")),
        "{printed:?}"
    );

    let address: SocketAddr = ([127, 0, 0, 1], base).into();
    let mut client = login(address, 0x77);
    let (code, body) = client.ask_until_accepted(&Request::CreateStream {
        name: "orders".into(),
        options: vec![],
    });
    assert_eq!(
        (code, split_result(&body).map(|r| r.is_ok())),
        (0, Ok(true))
    );
    let (code, _) = client.ask_until_accepted(&Request::CreateTopic {
        stream: Identifier::Name("orders".into()),
        partitions: 1,
        name: "payments".into(),
        options: vec![],
    });
    assert_eq!(code, 0);
    let messages: Vec<iggy_format::batch::NewMessage> = (0..3u32)
        .map(|i| iggy_format::batch::NewMessage {
            id: u128::from(i) + 1,
            timestamp_delta: i,
            payload: format!("message {i}").into_bytes(),
            user_headers: Vec::new(),
        })
        .collect();
    let (code, _) = client.ask_until_accepted(&Request::SendMessages {
        stream: Identifier::Name("orders".into()),
        topic: Identifier::Name("payments".into()),
        partitioning: Partitioning::Balanced,
        count: 3,
        batch: iggy_format::batch::encode(1_700_000_000_000_000, &messages).expect("batch"),
    });
    assert_eq!(code, 0);
    drop(client);

    // Every node serves its metrics. The one the client talked to knew the topic before it
    // took the send, so it hosts the metadata group and the partition, and it timed the
    // client's writes; the others host the partition once their replicas execute the create
    // (within a heartbeat).
    let scrapes: Vec<String> = (0..3u16)
        .map(|i| scrape(([127, 0, 0, 1], base + 2000 + i).into()))
        .collect();
    for (i, text) in scrapes.iter().enumerate() {
        assert!(text.starts_with("HTTP/1.1 200 OK"), "node {i}: {text}");
        assert!(
            text.contains("\niggy_groups 2\n") || (i > 0 && text.contains("\niggy_groups 1\n")),
            "node {i}: {text}"
        );
    }
    assert!(scrapes[0].contains("\niggy_groups 2\n"), "{}", scrapes[0]);
    assert!(
        !scrapes[0].contains("iggy_commit_latency_seconds_count 0\n"),
        "node 0 timed the client's three writes: {}",
        scrapes[0]
    );

    let (code, stderr) = interrupt(dev);
    assert_eq!(code, 0, "dev's exit code after SIGINT; stderr:\n{stderr}");
    assert_eq!(stderr.matches("stopped cleanly").count(), 3, "{stderr}");
    for i in 0..3 {
        let storage =
            OsStorage::open(dir.path().join(format!("node-{i}"))).expect("the node's directory");
        let report = iggy_recovery::check(&storage, Path::new(""), |_, _| {}).expect("check");
        assert!(report.is_clean(), "node {i} after a clean stop: {report:?}");
    }

    // The same directory again: the nodes boot to what was committed, and the partition's
    // primary serves it.
    let (dev, _) = start_dev(dir.path(), base);
    let mut served = None;
    for node in 0..3u16 {
        let mut client = login(
            ([127, 0, 0, 1], base + node).into(),
            0x78 + u128::from(node),
        );
        let (code, header) = poll(&mut client);
        assert!(
            code == 0 || code == status::PARTITION_NOT_FOUND,
            "node {node}: status {code}"
        );
        if header.messages_count == 3 {
            served = Some(node);
        }
    }
    assert!(
        served.is_some(),
        "no node served the committed batch after the restart"
    );
    let (code, stderr) = interrupt(dev);
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn dev_demo_loads_verifies_and_exits_0() {
    let base = free_base();
    let output = iggy_testkit::Run::new({
        let mut command = Command::new(EXE);
        command.args(["dev", "--demo", "--base-port", &base.to_string()]);
        command
    })
    .deadline(Duration::from_secs(300))
    .output();
    let stdout = &output.stdout;
    assert_eq!(output.code(), 0, "{}", output.describe());
    assert!(
        stdout.contains("demo: 600 messages acknowledged"),
        "{stdout}"
    );
    assert!(stdout.contains("demo: 0 missing, 0 duplicated"), "{stdout}");
    assert!(stdout.contains("every node stopped cleanly"), "{stdout}");
}

#[test]
fn run_refuses_a_bad_configuration_naming_the_file_and_the_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("node.toml");
    let text = "cluster_id = 1\ncluster_key = \"k\"\nreplica = 3\ndata_dir = \"x\"\n\n[[nodes]]\nname = \"a\"\nclient = \"127.0.0.1:1\"\nreplica = \"127.0.0.1:2\"\n";
    // The exit code and stderr of `run` on `text`.
    let run = |text: &str| {
        #[allow(clippy::disallowed_methods)]
        std::fs::write(&config, text).expect("write");
        let output = Command::new(EXE)
            .args(["run", "--config"])
            .arg(&config)
            .output()
            .expect("run");
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (code, stderr) = run(text);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("node.toml") && stderr.contains("replica = 3"),
        "{stderr}"
    );
    let (code, stderr) = run(&text.replace("replica = 3", "replica = 0\ncolour = \"blue\""));
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("colour"),
        "an unknown key is named: {stderr}"
    );
    // A ring too small for the default publication interval is refused, naming both.
    let good = text.replace("replica = 3", "replica = 0");
    let (code, stderr) = run(&format!("{good}\n[limits]\nring_bytes = 4194304\n"));
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("node.toml") && stderr.contains("limits.checkpoint_bytes"),
        "{stderr}"
    );
    let (code, stderr) = run(&format!("{good}\n[limits]\nring_bytes = 4096\n"));
    assert_eq!(code, Some(1));
    assert!(stderr.contains("limits.ring_bytes = 4096"), "{stderr}");
    // A publication interval below the replica's 10 ms tick is refused, naming its range.
    let (code, stderr) = run(&format!("{good}\n[limits]\npublish_interval_ms = 5\n"));
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("limits.publish_interval_ms = 5") && stderr.contains("10 to 60000"),
        "{stderr}"
    );
    // Requests past what one prepare holds, segments outside their range (issue #46).
    let (code, stderr) = run(&format!("{good}\n[limits]\nmax_request_bytes = 67108864\n"));
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("limits.max_request_bytes = 67108864") && stderr.contains("prepare"),
        "{stderr}"
    );
    let (code, stderr) = run(&format!("{good}\n[limits]\nin_flight_bytes = 1048576\n"));
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("limits.in_flight_bytes = 1048576"),
        "{stderr}"
    );
    let (code, stderr) = run(&format!(
        "{good}\n[limits]\nmax_request_bytes = 1048576\npipeline_budget_bytes = 65536\n"
    ));
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("limits.pipeline_budget_bytes = 65536"),
        "{stderr}"
    );
    let (code, stderr) = run(&format!("{good}\n[topics]\nsegment_size_bytes = 1\n"));
    assert_eq!(code, Some(1));
    assert!(stderr.contains("topics.segment_size_bytes = 1"), "{stderr}");
}

/// The pid of `dev`'s child that runs node `node` (from `/proc`: its parent and its command
/// line, which names the node's configuration file).
#[allow(clippy::disallowed_methods)] // /proc, not storage
fn node_pid(dev: &Dev, node: u8) -> i32 {
    let config = format!("node-{node}.toml");
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // After the command's closing parenthesis: the state, then the parent's pid.
        let parent = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.split(' ').nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        let command = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if parent == Some(dev.id()) && String::from_utf8_lossy(&command).contains(&config) {
            return pid;
        }
    }
    panic!("no child of dev ({}) runs {config}", dev.id());
}

/// Descriptors `pid` has open.
#[allow(clippy::disallowed_methods)] // /proc, not storage
fn open_descriptors(pid: i32) -> u64 {
    let count = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("/proc/PID/fd")
        .count();
    u64::try_from(count).unwrap_or(u64::MAX)
}

/// Issue #46: a node out of descriptors (its limit lowered under it, as a thousand idle clients
/// would exhaust it) neither exits nor spins on `accept`: it logs the failure once, asks again
/// after a pause that grows to a second (so it counts a handful of failures, where the loop
/// without the pause counted millions), serves the clients it has meanwhile, and accepts again
/// once descriptors are free. Without the retry the port would stay deaf (the last login
/// fails); without the pause the failure count is far above the bound.
#[test]
fn a_node_out_of_descriptors_backs_off_its_accepts_and_serves_again() {
    use rustix::process::{Pid, Resource, Rlimit, prlimit};
    let dir = tempfile::tempdir().expect("tempdir");
    let base = free_base();
    let (mut dev, _) = start_dev(dir.path(), base);
    // The nodes' log lines (they share dev's stderr), read as they come.
    let log = read_lines(dev.child().stderr.take().expect("stderr piped"));
    let wait_for = |what: &str| -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
            match log.recv_timeout(left) {
                Ok(line) if line.contains(what) => return line,
                Ok(_) => {}
                Err(_) => break,
            }
        }
        panic!("no log line with {what:?} within 60 s");
    };
    let address: SocketAddr = ([127, 0, 0, 1], base).into();
    let mut before = login(address, 0x91);
    let pid = node_pid(&dev, 0);
    let raw = Pid::from_raw(pid).expect("pid");
    let open = open_descriptors(pid);
    // The soft limit only: raising a hard limit back needs a privilege.
    let hard = rustix::process::getrlimit(Resource::Nofile).maximum;
    let original = prlimit(
        Some(raw),
        Resource::Nofile,
        Rlimit {
            current: Some(open + 4),
            maximum: hard,
        },
    )
    .expect("lowering node 0's descriptor limit");
    // More connections than it has descriptors for: the kernel completes them (the listen
    // backlog) while the node's accept fails.
    let waiting: Vec<std::net::TcpStream> = (0..16)
        .map(|_| std::net::TcpStream::connect(address).expect("connect"))
        .collect();
    let warned = wait_for("cannot accept a connection");
    assert!(warned.contains("client"), "{warned}");
    // The node still serves the session it had.
    for _ in 0..20 {
        let (code, _) = before.ask(&Request::Ping);
        assert_eq!(code, 0, "a ping on the session opened before");
    }
    prlimit(Some(raw), Resource::Nofile, original).expect("restoring the limit");
    drop(waiting);
    let again = wait_for("accepting connections again");
    let failures: u64 = again
        .split("failures=")
        .nth(1)
        .and_then(|rest| {
            rest.split(|c: char| !c.is_ascii_digit())
                .next()
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or_else(|| panic!("no failure count in {again:?}"));
    // The pauses (10 ms doubling to a second) allow about 10 failures in the first 5 s and
    // one a second after: 60 is a minute of them.
    assert!(
        (1..=60).contains(&failures),
        "{failures} failed accepts: the loop did not back off ({again})"
    );
    let mut after = login(address, 0x92);
    let (code, _) = after.ask(&Request::Ping);
    assert_eq!(code, 0, "a ping from a connection accepted after");
    drop((before, after));
    let (code, _) = interrupt(dev);
    assert_eq!(code, 0, "dev's exit code after SIGINT");
}

/// Issue #46: a create of partitions whose descriptors would not fit beside the files a node
/// has open, its connections and its reserve, under its open-descriptor limit, is refused with
/// 3000 before it commits (every node would otherwise find the partitions unavailable for
/// want of descriptors); the limit is read at each create, so an operator's change counts.
/// And the figure the rule counts a partition at is honest: 24 partitions, each written and
/// read back through every node, keep at most `DESCRIPTORS_PER_PARTITION` each open on every
/// node. Without the check the 12-partition create commits.
#[test]
fn a_create_past_the_descriptor_limit_is_refused_and_a_partition_keeps_what_it_counts() {
    use iggy_server::admission::{
        CANNOT_CREATE_PARTITION, DESCRIPTORS_PER_PARTITION, DESCRIPTORS_RESERVED,
    };
    use rustix::process::{Pid, Resource, Rlimit, getrlimit, prlimit};
    const PARTITIONS: u32 = 24;
    let dir = tempfile::tempdir().expect("tempdir");
    let base = free_base();
    let (dev, _) = start_dev(dir.path(), base);
    let addresses: Vec<SocketAddr> = (0..3u16)
        .map(|i| ([127, 0, 0, 1], base + i).into())
        .collect();
    let mut clients: Vec<Client> = (0u128..)
        .zip(&addresses)
        .map(|(i, a)| login(*a, 0xa1 + i))
        .collect();
    let (code, _) = clients[0].ask_until_accepted(&Request::CreateStream {
        name: "fds".into(),
        options: vec![],
    });
    assert_eq!(code, 0);
    let pids: Vec<i32> = (0..3).map(|n| node_pid(&dev, n)).collect();
    let before: Vec<u64> = pids.iter().map(|p| open_descriptors(*p)).collect();
    let topic = |name: &str, partitions| Request::CreateTopic {
        stream: Identifier::Name("fds".into()),
        partitions,
        name: name.into(),
        options: vec![],
    };
    let (code, _) = clients[0].ask_until_accepted(&topic("wide", PARTITIONS));
    assert_eq!(code, 0);
    for p in 0..PARTITIONS {
        let message = iggy_format::batch::NewMessage {
            id: u128::from(p) + 1,
            timestamp_delta: 0,
            payload: format!("to {p}").into_bytes(),
            user_headers: Vec::new(),
        };
        let (code, _) = clients[0].ask_until_accepted(&Request::SendMessages {
            stream: Identifier::Name("fds".into()),
            topic: Identifier::Name("wide".into()),
            partitioning: Partitioning::PartitionId(p),
            count: 1,
            batch: iggy_format::batch::encode(1_700_000_000_000_000, &[message]).expect("batch"),
        });
        assert_eq!(code, 0, "send to partition {p}");
        for (n, client) in clients.iter_mut().enumerate() {
            let poll = Request::PollMessages {
                consumer: Consumer {
                    group: false,
                    id: Identifier::Numeric(1),
                },
                stream: Identifier::Name("fds".into()),
                topic: Identifier::Name("wide".into()),
                partition: Some(p),
                strategy: PollingStrategy::Offset(0),
                count: 10,
                auto_commit: true,
            };
            let (code, body) = client.ask_until_accepted(&poll);
            assert_eq!(code, 0, "poll of partition {p} through node {n}");
            let (header, _) = PollHeader::read(&body).expect("poll");
            assert_eq!(header.messages_count, 1, "partition {p} through node {n}");
        }
    }
    for (n, pid) in pids.iter().enumerate() {
        let after = open_descriptors(*pid);
        let kept = after.saturating_sub(before[n]);
        eprintln!("node {n}: {kept} descriptors more for {PARTITIONS} partitions");
        assert!(
            kept <= u64::from(PARTITIONS) * DESCRIPTORS_PER_PARTITION,
            "node {n} keeps {kept} descriptors more for {PARTITIONS} partitions: more than {DESCRIPTORS_PER_PARTITION} each"
        );
    }
    // Node 0's limit lowered to leave about two partitions' descriptors beside its files, the
    // connections it keeps room for (what `run` computes from the hard limit) and the reserve.
    let hard = getrlimit(Resource::Nofile).maximum;
    let connections = hard.map_or(4_096, |h| (h.saturating_sub(1_024) / 2).clamp(16, 4_096));
    let raw = Pid::from_raw(pids[0]).expect("pid");
    let limit = open_descriptors(pids[0])
        + connections
        + DESCRIPTORS_RESERVED
        + 2 * DESCRIPTORS_PER_PARTITION;
    let original = prlimit(
        Some(raw),
        Resource::Nofile,
        Rlimit {
            current: Some(limit),
            maximum: hard,
        },
    )
    .expect("lowering node 0's descriptor limit");
    let (code, _) = clients[0].ask_until_accepted(&topic("past", 12));
    assert_eq!(code, CANNOT_CREATE_PARTITION, "a create past the limit");
    let (code, _) = clients[0].ask_until_accepted(&topic("fits", 1));
    assert_eq!(code, 0, "a create within the limit");
    prlimit(Some(raw), Resource::Nofile, original).expect("restoring the limit");
    // Nothing of the refused create committed, on any node.
    for (n, client) in clients.iter_mut().enumerate() {
        let (code, body) = client.ask(&Request::GetTopics {
            stream: Identifier::Name("fds".into()),
        });
        assert_eq!(code, 0);
        let topics = iggy_protocol::response::read_topics(&body).expect("topics");
        let mut names: Vec<&str> = topics.iter().map(|t| t.name.as_str()).collect();
        names.sort_unstable();
        assert_eq!(names, vec!["fits", "wide"], "node {n}'s topics");
    }
    drop(clients);
    let (code, stderr) = interrupt(dev);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("open-descriptor limit"),
        "no WARN naming the limit: {stderr}"
    );
}
