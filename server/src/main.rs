//! `iggy-server`: one node of the cluster as a process (`run`), or a local cluster of them on
//! loopback (`dev`). `iggy-server --help` explains; `docs/server.md` is the operator's guide.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use iggy_io::{OsStorage, ReadStorage};
use iggy_node::NodeConfig;
use iggy_recovery::{BootConfig, METADATA_DIR, PARTITIONS_DIR};
use iggy_server::bus::BusConfig;
use iggy_server::client_port::{PortConfig, RosterNode, hash_password};
use iggy_server::config::FileConfig;
use iggy_server::load;
use iggy_server::process::{Listen, ServerNode};
use iggy_server::translate::TopicDefaults;

#[derive(Parser)]
#[command(
    name = "iggy-server",
    version,
    about = "A node of a Viewstamped-Replication cluster of Iggy streams, speaking the Iggy binary protocol (iggy 0.11.0 / iggy-cli 0.14.0) on its client port",
    long_about = "A node of a Viewstamped-Replication cluster of Iggy streams. `run` starts one node from a TOML configuration (every key in docs/server.md); its data directory is created on first start and locked for the process's life. SIGTERM or SIGINT stop it cleanly (every group published, the clean-shutdown marker written); a replica whose storage fails stops it with a message naming the group and the reason (exit 1: let a supervisor restart it; boot takes over, and iggy-fsck explains a node that will not boot). `dev` runs a local cluster on loopback in one command."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one node from its configuration file.
    Run {
        /// The node's TOML configuration.
        #[arg(long)]
        config: PathBuf,
        /// Overrides `data_dir`.
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// Overrides `replica` (this node's index in `nodes`).
        #[arg(long)]
        replica: Option<u8>,
    },
    /// A local cluster on loopback: writes a configuration per node under DIR, starts one
    /// process per node, prints their addresses and an iggy-cli command line, and stops them all
    /// cleanly on Ctrl-C.
    Dev {
        /// Nodes in the cluster.
        #[arg(long, default_value_t = 3)]
        nodes: u8,
        /// Where the nodes' configurations and data go, kept between runs [default: iggy-dev;
        /// with --demo, a temporary directory removed afterwards].
        #[arg(long)]
        dir: Option<PathBuf>,
        /// The first node's client port; node i listens on BASE+i for clients, BASE+1000+i for
        /// its peers and BASE+2000+i for metrics scrapes (`GET /metrics`).
        #[arg(long, default_value_t = 8090)]
        base_port: u16,
        /// Also run a short load (a producer per partition, each on another node), read every
        /// partition back, check that every acknowledged message is there exactly once, stop the
        /// cluster and exit: 0 when nothing was missing or duplicated and every node stopped
        /// cleanly.
        #[arg(long)]
        demo: bool,
        /// Every new partition led by node 0 (the article's cluster) instead of primaries
        /// spread over the nodes.
        #[arg(long)]
        no_spread: bool,
        /// Both ports over TLS: a CA and a certificate per node (for 127.0.0.1) are written
        /// to DIR/tls the first time; clients take `--tls-ca DIR/tls/ca.pem`.
        #[arg(long)]
        tls: bool,
    },
    /// Producers on the client wire: one per partition, each its own connection (moving to the
    /// next node when its node fails), a set rate of batches of a set size, every batch and its
    /// outcome recorded in a ledger for `verify`. Prints MB/s, latency percentiles, the longest
    /// write gap and the errors by kind.
    Load {
        #[command(flatten)]
        cluster: ClusterArgs,
        /// The stream the topics are in.
        #[arg(long, default_value = "load")]
        stream: String,
        /// Partitions of topic "replicated" (replicated durability).
        #[arg(long, default_value_t = 3)]
        replicated: u32,
        /// Partitions of topic "persisted" (persisted durability).
        #[arg(long, default_value_t = 0)]
        persisted: u32,
        /// Create the stream and topics first (they must not exist).
        #[arg(long)]
        create: bool,
        /// Batches per second per producer; 0 sends each batch as soon as the last is answered.
        #[arg(long, default_value_t = 0.0)]
        rate: f64,
        /// Messages per batch.
        #[arg(long, default_value_t = 250)]
        batch: u32,
        /// Payload bytes per message (at least 16).
        #[arg(long, default_value_t = 1000)]
        message_size: usize,
        /// How long to send ("10s", "2m").
        #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
        duration: Duration,
        /// Where the ledger goes (JSON lines, one per batch).
        #[arg(long, default_value = "load.ledger")]
        ledger: PathBuf,
        /// Print the summary as one JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// Also a consumer per partition: it polls its partition (`Next`, auto-commit) from
        /// another node than its producer's, checks the offsets come in order with no gap and
        /// the payloads are the ones sent, and reads on after the producers stop until it has
        /// read their last acknowledged message (up to 30 s).
        #[arg(long)]
        consumers: bool,
        /// With --create: each partition keeps at most this many bytes (the topics'
        /// `max_topic_size`: the nodes delete the oldest segments past it). 0 keeps everything.
        /// Verify such a run with `verify --retained`.
        #[arg(long, default_value_t = 0)]
        max_topic_size: u64,
        /// How long a producer or consumer waits for a reply before it takes its node for
        /// paused or cut off, records the batch's outcome as unknown and moves to the next node.
        #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
        request_timeout: Duration,
        /// The server is Apache Iggy's (0.9 edge, `--nodes 127.0.0.1:8090`): its replies are
        /// taken under the client id it assigned, and with --create the topics get its options,
        /// not our `durability`: "replicated" none (its default, no fsync), "persisted"
        /// `enforce_fsync` (an fsync each time a partition saves: every 1,024 messages or 1 MiB
        /// unless --apache-fsync-every-batch).
        #[arg(long)]
        apache_iggy: bool,
        /// With --apache-iggy: "persisted" also `messages_required_to_save = 1`, an fsync per
        /// batch before the reply, as our persisted durability does.
        #[arg(long, requires = "apache_iggy")]
        apache_fsync_every_batch: bool,
        /// With --consumers: the consumers start once the producers stopped and read back what
        /// they wrote; the report gives their MB/s over that read.
        #[arg(long, requires = "consumers")]
        consume_after: bool,
    },
    /// Reads a `load` ledger and every node's partitions (through each node's client port) and
    /// reports, per node and partition, every acknowledged message missing, duplicated, at
    /// another offset than acknowledged, or with another payload. Exit 1 if any.
    Verify {
        #[command(flatten)]
        cluster: ClusterArgs,
        /// The ledger `load` wrote.
        #[arg(long, default_value = "load.ledger")]
        ledger: PathBuf,
        /// How long a node still catching up is read again before what it lacks is reported (a
        /// budget per node, shared by its partitions).
        #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
        patience: Duration,
        /// Print every partition's check as JSON lines instead of text.
        #[arg(long)]
        json: bool,
        /// The topics retain (`load --max-topic-size`): each node is held to the acknowledged
        /// messages from the first offset it serves on; those below it are counted as retained,
        /// not missing. A read that retention overtakes starts again from the new first offset.
        #[arg(long)]
        retained: bool,
    },
    /// A TCP proxy on loopback for the fault harness's network partitions: each route listens on
    /// one address and forwards to another; the routes named in the control file (read every
    /// 10 ms) are blocked: nothing crosses them either way and no connection is made, but none
    /// is closed, as across a real partition. `scripts/fault-harness.sh` gives each directed pair
    /// of nodes a route (`docs/testing.md`).
    Proxy {
        /// A route, `NAME=LISTEN>TARGET` (both loopback), e.g. `0>1=127.0.0.1:11591>127.0.0.1:9591`;
        /// repeat for more.
        #[arg(long = "route", required = true)]
        routes: Vec<iggy_server::proxy::Route>,
        /// The file naming the blocked routes (whitespace-separated).
        #[arg(long)]
        control: PathBuf,
        /// Also write the first 160 bytes each route's first connection carried towards its
        /// target (on the replica bus: the dialler's handshake) to DIR/ROUTE.up, for
        /// `hostile --replay`.
        #[arg(long)]
        capture: Option<PathBuf>,
    },
    /// What a careless or hostile client does, against a running cluster (issue #46): oversized
    /// creates, idle and slow connections on both ports, bodies just under the size limit from
    /// many clients, a flood of wrong passwords, strangers and a replayed handshake on the
    /// replica bus. Each case prints what it saw against the documented answer, and every node
    /// must still take a login after each. Exit 1 if a case failed or a node stopped answering.
    /// `scripts/hostile-clients.sh` runs it beside `load` and checks memory, `verify` and
    /// `iggy-fsck` (`docs/testing.md`).
    Hostile {
        #[command(flatten)]
        cluster: ClusterArgs,
        /// The nodes' replica-bus addresses, comma-separated.
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "127.0.0.1:9090,127.0.0.1:9091,127.0.0.1:9092"
        )]
        buses: Vec<SocketAddr>,
        /// The cluster id (`cluster_id` in the nodes' configuration; `dev` writes 1).
        #[arg(long, default_value = "1", value_parser = parse_cluster_id)]
        cluster_id: u128,
        /// The cases to run (comma-separated; all by default): oversized-topic, huge-segment,
        /// tiny-segment, many-partitions, idle-connections, slowloris, big-bodies,
        /// wrong-passwords, bus-stranger, bus-replay.
        #[arg(long, value_delimiter = ',')]
        cases: Vec<String>,
        /// Smaller sizes (500 idle connections, 10 large bodies, 1,000 wrong passwords).
        #[arg(long)]
        short: bool,
        /// A handshake `proxy --capture` recorded, and the bus address it went to
        /// (`FILE@ADDRESS`), for `bus-replay` (skipped without it).
        #[arg(long, value_parser = parse_replay)]
        replay: Option<(PathBuf, SocketAddr)>,
    },
}

fn parse_cluster_id(text: &str) -> Result<u128, String> {
    match text.strip_prefix("0x") {
        Some(hex) => u128::from_str_radix(hex, 16),
        None => text.parse(),
    }
    .map_err(|e| format!("{text:?}: {e}"))
}

fn parse_replay(text: &str) -> Result<(PathBuf, SocketAddr), String> {
    let (file, address) = text
        .rsplit_once('@')
        .ok_or_else(|| format!("{text:?}: expected FILE@ADDRESS"))?;
    let address = address
        .parse()
        .map_err(|e| format!("{text:?}: the address: {e}"))?;
    Ok((PathBuf::from(file), address))
}

#[derive(clap::Args)]
struct ClusterArgs {
    /// The nodes' client addresses, comma-separated (`iggy-server dev` prints them).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "127.0.0.1:8090,127.0.0.1:8091,127.0.0.1:8092"
    )]
    nodes: Vec<SocketAddr>,
    #[arg(long, default_value = "iggy")]
    username: String,
    #[arg(long, default_value = "iggy")]
    password: String,
    /// Connect over TLS, checking each node's certificate (for the IP address dialled) against
    /// this CA (PEM; `dev --tls` writes DIR/tls/ca.pem).
    #[arg(long)]
    tls_ca: Option<PathBuf>,
}

impl ClusterArgs {
    /// Makes this process's clients use TLS when `--tls-ca` was given.
    fn use_tls(&self) -> Result<(), String> {
        if let Some(ca) = &self.tls_ca {
            iggy_client::use_tls(iggy_server::tls::client_config(ca)?);
        }
        Ok(())
    }
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(if std::env::var_os("IGGY_SERVER_DEBUG").is_some() {
            tracing::Level::DEBUG
        } else {
            tracing::Level::INFO
        })
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    // A panic on any thread (a storage lane, a read, the tick thread, a network worker) ends
    // the process with a message rather than leaving it up with that thread's work wedged: a
    // supervisor restarts it, and boot takes over (issue #46).
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default_hook(info);
        let thread = std::thread::current();
        tracing::error!(
            thread = thread.name().unwrap_or("unnamed"),
            panic = %info,
            "a thread panicked: stopping the process (exit 101) so that a supervisor restarts it"
        );
        std::process::exit(101);
    }));
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run {
            config,
            data_dir,
            replica,
        } => run(&config, data_dir, replica),
        Command::Proxy {
            routes,
            control,
            capture,
        } => iggy_server::proxy::run(routes, control, capture),
        Command::Hostile {
            cluster,
            buses,
            cluster_id,
            cases,
            short,
            replay,
        } => cluster.use_tls().and_then(|()| {
            run_hostile(
                &iggy_server::hostile::Target {
                    nodes: cluster.nodes,
                    buses,
                    username: cluster.username,
                    password: cluster.password,
                    cluster: cluster_id,
                    replay,
                    short,
                },
                &cases,
            )
        }),
        Command::Dev {
            nodes,
            dir,
            base_port,
            demo,
            no_spread,
            tls,
        } => {
            let temporary = if dir.is_none() && demo {
                match tempfile::tempdir() {
                    Ok(temp) => Some(temp),
                    Err(e) => {
                        eprintln!("iggy-server: a temporary directory: {e}");
                        return ExitCode::FAILURE;
                    }
                }
            } else {
                None
            };
            let dir = dir
                .or_else(|| temporary.as_ref().map(|t| t.path().to_path_buf()))
                .unwrap_or_else(|| PathBuf::from("iggy-dev"));
            dev(nodes, &dir, base_port, demo, !no_spread, tls)
        }
        Command::Load {
            cluster,
            stream,
            replicated,
            persisted,
            create,
            rate,
            batch,
            message_size,
            duration,
            ledger,
            json,
            consumers,
            max_topic_size,
            request_timeout,
            apache_iggy,
            apache_fsync_every_batch,
            consume_after,
        } => {
            if let Err(e) = cluster.use_tls() {
                eprintln!("iggy-server: {e}");
                return ExitCode::FAILURE;
            }
            if apache_iggy {
                iggy_client::for_apache_iggy();
            }
            let topics = [("replicated", replicated), ("persisted", persisted)]
                .into_iter()
                .filter(|(_, partitions)| *partitions > 0)
                .map(|(name, partitions)| load::LoadTopic {
                    name: name.into(),
                    durability: name.into(),
                    partitions,
                })
                .collect();
            let config = load::LoadConfig {
                nodes: cluster.nodes,
                username: cluster.username,
                password: cluster.password,
                stream,
                topics,
                create,
                rate,
                batch_messages: batch,
                message_size,
                duration,
                consumers,
                max_topic_size,
                request_timeout,
                topic_options: if apache_iggy {
                    load::TopicOptions::Apache {
                        every_batch: apache_fsync_every_batch,
                    }
                } else {
                    load::TopicOptions::Ours
                },
                consume_after,
            };
            run_load(&config, &ledger, json)
        }
        Command::Verify {
            cluster,
            ledger,
            patience,
            json,
            retained,
        } => cluster
            .use_tls()
            .and_then(|()| run_verify(&cluster, &ledger, patience, json, retained)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("iggy-server: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run_hostile(target: &iggy_server::hostile::Target, cases: &[String]) -> Result<(), String> {
    let outcomes = iggy_server::hostile::run(target, cases)?;
    let mut failed = 0;
    for outcome in &outcomes {
        println!(
            "{:<17} {:<4} {:>6.1} s  {}",
            outcome.case,
            if outcome.passed { "ok" } else { "FAIL" },
            outcome.seconds,
            outcome.detail
        );
        failed += usize::from(!outcome.passed);
    }
    if failed > 0 {
        return Err(format!("{failed} of {} cases failed", outcomes.len()));
    }
    Ok(())
}

/// A directory for a local cluster's files (not a node's: no `Storage`).
#[allow(clippy::disallowed_methods)]
fn create_dir(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))
}

/// Reads a small text file the operator wrote (not a durable file of the node: no `Storage`).
#[allow(clippy::disallowed_methods)]
fn read_text(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// The client connections a node keeps open: `configured`, but at most half of what the
/// descriptor limit leaves after 1,024 for the node's own files, so that clients can never take
/// the descriptors a segment roll or an offset store needs.
fn connection_cap(configured: u64, descriptors: Option<u64>) -> u64 {
    let Some(descriptors) = descriptors else {
        return configured;
    };
    let cap = (descriptors.saturating_sub(1_024) / 2).max(16);
    if cap < configured {
        tracing::warn!(
            configured,
            cap,
            descriptors,
            "limits.max_connections lowered to what the open-descriptor limit allows"
        );
    }
    configured.min(cap)
}

fn run(path: &Path, data_dir: Option<PathBuf>, replica: Option<u8>) -> Result<(), String> {
    let mut config = FileConfig::load(&read_text(path)?, &path.display().to_string())?;
    if let Some(dir) = data_dir {
        config.data_dir = dir;
    }
    if let Some(replica) = replica {
        config.replica = replica;
    }
    config.check()?;
    if config.root.password == iggy_server::config::Root::default().password {
        tracing::warn!(
            username = %config.root.username,
            "the root user's password is the default (\"iggy\"): anyone who can reach the client port can log in; set [root] password in the configuration"
        );
    }
    // TLS files are named relative to the configuration file.
    let tls = match &config.tls {
        Some(tls) => {
            let base = path.parent().unwrap_or(Path::new("."));
            let tls = iggy_server::tls::TlsConfig {
                cert: base.join(&tls.cert),
                key: base.join(&tls.key),
                ca: base.join(&tls.ca),
                ..tls.clone()
            };
            Some((
                iggy_server::tls::server_config(&tls)?,
                iggy_server::tls::client_config(&tls.ca)?,
                tls,
            ))
        }
        None => None,
    };
    let descriptors = iggy_server::accept::raise_descriptor_limit();
    let max_connections = connection_cap(config.limits.max_connections, descriptors);
    let cluster = config.cluster_id.value()?;
    let replicas = u8::try_from(config.nodes.len()).map_err(|_| "too many nodes".to_string())?;
    let storage = open_or_create(&config.data_dir)?;
    // A new node: its metadata group, no partitions.
    if !storage
        .exists(Path::new(METADATA_DIR))
        .map_err(|e| e.to_string())?
    {
        if storage
            .exists(Path::new(PARTITIONS_DIR))
            .map_err(|e| e.to_string())?
        {
            return Err(format!(
                "{}: partitions but no {METADATA_DIR}/: not a new node, and not one that boots; run iggy-fsck {}",
                config.data_dir.display(),
                config.data_dir.display()
            ));
        }
        let identity = iggy_superblock::Identity {
            cluster,
            replica: config.replica,
            replica_count: replicas,
        };
        iggy_recovery::populate::genesis(
            &storage,
            identity,
            &boot_config(&config, 0),
            &[],
            &[],
            iggy_recovery::populate::FirstView::Zero,
        )?;
        tracing::info!(dir = %config.data_dir.display(), replica = config.replica, "created a new node");
    }
    let incarnation = incarnation(config.replica);
    let node_config = NodeConfig {
        metadata_vsr: None,
        cluster,
        replica: config.replica,
        replicas,
        vsr: iggy_vsr::Config {
            ring_bytes_max: config.limits.ring_bytes,
            publish_interval_ticks: config.limits.publish_interval_ms / iggy_vsr::TICK_MS,
            ..iggy_vsr::Config::default()
        },
        safeguards: iggy_vsr::Safeguards::default(),
        checkpoint_bytes: config.limits.checkpoint_bytes,
        repair_ration: true,
        boot: boot_config(&config, incarnation),
        mirror_metadata: true,
        ring_budget_bytes: config.limits.ring_budget_bytes,
        pipeline_budget_bytes: config.limits.pipeline_budget_bytes,
    };
    let bus = BusConfig {
        cluster,
        replica: config.replica,
        peers: config.nodes.iter().map(|n| n.replica).collect(),
        key: config.cluster_key.as_bytes().to_vec(),
        tls: tls
            .as_ref()
            .filter(|(_, _, files)| files.replica_bus)
            .map(|(server, client, _)| iggy_server::bus::BusTls {
                server: server.clone(),
                client: client.clone(),
            }),
    };
    let port = PortConfig {
        cluster,
        cluster_name: config.cluster_name.clone(),
        replica: config.replica,
        roster: config
            .nodes
            .iter()
            .map(|n| RosterNode {
                name: n.name.clone(),
                client_address: n.client,
            })
            .collect(),
        root_username: config.root.username.clone(),
        root_password_hash: hash_password(&config.root.password),
        max_request_bytes: config.limits.max_request_bytes,
        reply_deadline: config.reply_deadline(),
        topic_defaults: TopicDefaults {
            segment_size_bytes: config.topics.segment_size_bytes,
            durability: if config.topics.durability == "persisted" {
                iggy_metadata::Durability::Persisted
            } else {
                iggy_metadata::Durability::Replicated
            },
            replication_factor: replicas,
        },
        server_version: env!("CARGO_PKG_VERSION").into(),
        admission: iggy_server::admission::Admission {
            data_dir: Some(config.data_dir.clone()),
            max_partitions_per_topic: config.limits.max_partitions_per_topic,
            max_partitions: config.limits.max_partitions,
            free_reserve_bytes: config.limits.free_reserve_bytes,
            free_bytes_source: None,
            check_descriptors: true,
            connections: max_connections,
        },
        max_connections,
        in_flight_bytes: config.limits.in_flight_bytes,
        tls: tls
            .as_ref()
            .filter(|(_, _, files)| files.client_port)
            .map(|(server, _, _)| server.clone()),
    };
    let own = &config.nodes[usize::from(config.replica)];
    let listen = Listen {
        client: own.client,
        metrics: own.metrics,
        storage_threads: config.limits.storage_threads,
        network_threads: config.limits.network_threads,
    };
    let node = ServerNode::start(storage, &node_config, bus, port, &listen)?;
    tracing::info!(
        replica = config.replica,
        client = %node.client_address,
        peers = %node.replica_address,
        "node running"
    );
    let signal = wait_for_stop(&node);
    match signal {
        Ok(name) => {
            tracing::info!(signal = name, "stopping cleanly");
            node.stop()?;
            tracing::info!("stopped cleanly");
            Ok(())
        }
        Err(()) => {
            // The runtime ended on its own: a replica halted.
            let reason = node
                .stop()
                .err()
                .unwrap_or_else(|| "the node stopped".into());
            Err(reason)
        }
    }
}

/// Blocks until SIGTERM or SIGINT (`Ok(name)`), or until the node's tick thread ends on its own
/// (`Err`: a halt).
fn wait_for_stop(node: &ServerNode<OsStorage>) -> Result<&'static str, ()> {
    let Ok(signals) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return Ok("none (no signal handling)");
    };
    signals.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(|_| ())?;
        let mut ticker = tokio::time::interval(Duration::from_millis(200));
        loop {
            tokio::select! {
                _ = term.recv() => return Ok("SIGTERM"),
                _ = tokio::signal::ctrl_c() => return Ok("SIGINT"),
                _ = ticker.tick() => {
                    if node.runtime.finished() {
                        return Err(());
                    }
                }
            }
        }
    })
}

fn open_or_create(dir: &Path) -> Result<OsStorage, String> {
    match OsStorage::open(dir) {
        Ok(storage) => Ok(storage),
        Err(error) if error.is_not_found() => {
            OsStorage::create(dir).map_err(|e| format!("{}: {e}", dir.display()))
        }
        Err(error) => Err(format!("{}: {error}", dir.display())),
    }
}

fn boot_config(config: &FileConfig, incarnation: u64) -> BootConfig {
    BootConfig {
        segment_size_bytes: config.topics.segment_size_bytes,
        spread_primaries: config.topics.spread_primaries,
        ..BootConfig::new(incarnation)
    }
}

/// This life's incarnation: the node's index in the top byte, the clock below (never 0).
fn incarnation(replica: u8) -> u64 {
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| u64::try_from(d.as_micros()).unwrap_or(1));
    (u64::from(replica) << 56) | (micros & ((1 << 56) - 1)).max(1)
}

/// Writes a small text file for the operator (not a durable file of a node: no `Storage`).
#[allow(clippy::disallowed_methods)]
fn write_text(path: &Path, text: &str) -> Result<(), String> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

fn dev(
    nodes: u8,
    dir: &Path,
    base_port: u16,
    demo: bool,
    spread: bool,
    tls: bool,
) -> Result<(), String> {
    if nodes == 0 || nodes > 9 {
        return Err(format!("--nodes {nodes}: 1 to 9"));
    }
    let tls_section = |i: u8| {
        if tls {
            format!(
                "\n[tls]\ncert = \"tls/node-{i}.pem\"\nkey = \"tls/node-{i}.key\"\nca = \"tls/ca.pem\"\n"
            )
        } else {
            String::new()
        }
    };
    if tls && !dir.join("tls").join("ca.pem").exists() {
        let tls_dir = dir.join("tls");
        create_dir(&tls_dir)?;
        let names: Vec<(String, Vec<String>)> = (0..nodes)
            .map(|i| {
                (
                    format!("node-{i}"),
                    vec!["127.0.0.1".to_string(), "localhost".to_string()],
                )
            })
            .collect();
        iggy_server::tls::generate(&tls_dir, &names)?;
    }
    if tls && demo {
        iggy_client::use_tls(iggy_server::tls::client_config(
            &dir.join("tls").join("ca.pem"),
        )?);
    }
    let address = |port: u16| -> SocketAddr { SocketAddr::from(([127, 0, 0, 1], port)) };
    let mut roster = String::new();
    for i in 0..u16::from(nodes) {
        roster.push_str(&format!(
            "\n[[nodes]]\nname = \"node-{i}\"\nclient = \"{}\"\nreplica = \"{}\"\nmetrics = \"{}\"\n",
            address(base_port + i),
            address(base_port + 1000 + i),
            address(base_port + 2000 + i)
        ));
    }
    let exe = std::env::current_exe().map_err(|e| format!("finding this program: {e}"))?;
    let mut children = Vec::new();
    for i in 0..nodes {
        let config = dir.join(format!("node-{i}.toml"));
        write_text(
            &config,
            &format!(
                "cluster_id = 1\ncluster_key = \"dev\"\nreplica = {i}\ndata_dir = \"{}\"\n\n[topics]\n# Segments are preallocated: 64 MiB keeps a local cluster small.\ndurability = \"replicated\"\nsegment_size_bytes = 67108864\nspread_primaries = {spread}\n{}{roster}",
                dir.join(format!("node-{i}")).display(),
                tls_section(i)
            ),
        )?;
        let child = std::process::Command::new(&exe)
            .args(["run", "--config"])
            .arg(&config)
            .spawn()
            .map_err(|e| format!("starting node {i}: {e}"))?;
        children.push(child);
    }
    // Ready when every node's client port accepts; a node that exits first fails the run.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    for i in 0..u16::from(nodes) {
        loop {
            if std::net::TcpStream::connect(address(base_port + i)).is_ok() {
                break;
            }
            for (n, child) in children.iter_mut().enumerate() {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(format!("node {n} exited while starting: {status}"));
                }
            }
            if std::time::Instant::now() > deadline {
                return Err(format!(
                    "node {i} did not listen on {} within 60 s",
                    address(base_port + i)
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    println!("iggy-server dev: {nodes} nodes under {}", dir.display());
    for i in 0..u16::from(nodes) {
        println!(
            "  node-{i}: clients {}  peers {}  metrics http://{}/metrics",
            address(base_port + i),
            address(base_port + 1000 + i),
            address(base_port + 2000 + i)
        );
    }
    println!(
        "try: iggy --tcp-server-address {} -u iggy -p iggy stream list",
        address(base_port)
    );
    let mut demo_result = Ok(());
    if demo {
        let addresses: Vec<SocketAddr> = (0..u16::from(nodes))
            .map(|i| address(base_port + i))
            .collect();
        demo_result = run_demo(&addresses);
    } else {
        println!("Ctrl-C (or SIGTERM to this process) stops every node cleanly.");
        let stop = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        stop.block_on(async {
            // SIGTERM too: a supervisor or `kill` that stops `dev` must not orphan its nodes.
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut term) => {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = tokio::signal::ctrl_c() => {}
                    }
                }
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        });
    }
    let mut failed = Vec::new();
    for child in &children {
        if let Ok(pid) = i32::try_from(child.id())
            && let Some(pid) = rustix::process::Pid::from_raw(pid)
        {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
    }
    for (i, mut child) in children.into_iter().enumerate() {
        match child.wait() {
            Ok(status) if status.success() => {}
            Ok(status) => failed.push(format!("node {i}: {status}")),
            Err(e) => failed.push(format!("node {i}: {e}")),
        }
    }
    if !failed.is_empty() {
        return Err(failed.join("; "));
    }
    if demo {
        println!("every node stopped cleanly");
    }
    demo_result
}

/// The demo's load: a stream and a topic with a partition per node, a producer per partition
/// connected to another node than the next one's (so sends are forwarded to the primaries), then
/// every partition read back and checked against what was acknowledged.
fn run_demo(addresses: &[SocketAddr]) -> Result<(), String> {
    const BATCHES: u32 = 20;
    const MESSAGES: u32 = 10;
    let error = |e: iggy_client::ClientError| e.to_string();
    let partitions = u32::try_from(addresses.len()).unwrap_or(1);
    let started = std::time::Instant::now();
    let mut admin = iggy_client::Client::connect(addresses[0], 1).map_err(error)?;
    admin.login("iggy", "iggy").map_err(error)?;
    admin.create_stream("demo").map_err(error)?;
    admin
        .create_topic("demo", "events", partitions, "replicated")
        .map_err(error)?;
    println!("demo: stream \"demo\", topic \"events\" of {partitions} partitions");
    let producers: Vec<_> = (0..partitions)
        .map(|partition| {
            let address = addresses[partition as usize % addresses.len()];
            std::thread::spawn(move || -> Result<Vec<(u64, u128, Vec<u8>)>, String> {
                let mut client =
                    iggy_client::Client::connect(address, 0x100 + u128::from(partition))
                        .map_err(|e| e.to_string())?;
                client.login("iggy", "iggy").map_err(|e| e.to_string())?;
                let mut acknowledged = Vec::new();
                for batch in 0..BATCHES {
                    let messages: Vec<(u128, Vec<u8>)> = (0..MESSAGES)
                        .map(|i| {
                            let id = u128::from(partition) << 64
                                | u128::from(batch) << 32
                                | u128::from(i);
                            (id, format!("p{partition} b{batch} m{i}").into_bytes())
                        })
                        .collect();
                    let base = client
                        .send("demo", "events", partition, &messages)
                        .map_err(|e| e.to_string())?;
                    for (k, (id, payload)) in messages.into_iter().enumerate() {
                        acknowledged.push((base + k as u64, id, payload));
                    }
                }
                Ok(acknowledged)
            })
        })
        .collect();
    let mut ledger = Vec::new();
    for (partition, producer) in producers.into_iter().enumerate() {
        let acknowledged = producer
            .join()
            .map_err(|_| format!("producer {partition} panicked"))??;
        ledger.push(acknowledged);
    }
    let sent: usize = ledger.iter().map(Vec::len).sum();
    println!(
        "demo: {sent} messages acknowledged in {} ms",
        started.elapsed().as_millis()
    );
    // Read back: each partition through every node until one serves all of it (a backup serves
    // what it executed, which trails its primary by up to a heartbeat).
    let mut missing = 0;
    let mut duplicated = 0;
    for (partition, acknowledged) in (0u32..).zip(&ledger) {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let read = loop {
            let mut best: Vec<iggy_client::Polled> = Vec::new();
            for (n, address) in addresses.iter().enumerate() {
                let mut client =
                    iggy_client::Client::connect(*address, 0x200 + n as u128).map_err(error)?;
                client.login("iggy", "iggy").map_err(error)?;
                let mut all = Vec::new();
                loop {
                    let next = all.last().map_or(0, |m: &iggy_client::Polled| m.offset + 1);
                    let page = client
                        .poll("demo", "events", partition, next, 1000)
                        .map_err(error)?;
                    if page.is_empty() {
                        break;
                    }
                    all.extend(page);
                }
                if all.len() > best.len() {
                    best = all;
                }
            }
            if best.len() >= acknowledged.len() || std::time::Instant::now() > deadline {
                break best;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let mut seen = std::collections::HashMap::new();
        for message in &read {
            *seen.entry(message.id).or_insert(0u32) += 1;
        }
        for (offset, id, payload) in acknowledged {
            match seen.get(id) {
                None => missing += 1,
                Some(1) => {
                    let found = read.iter().find(|m| m.id == *id);
                    if found.map(|m| (&m.payload, m.offset)) != Some((payload, *offset)) {
                        missing += 1;
                    }
                }
                Some(_) => duplicated += 1,
            }
        }
        println!(
            "demo: partition {partition}: {} acknowledged, {} read back",
            acknowledged.len(),
            read.len()
        );
    }
    println!("demo: {missing} missing, {duplicated} duplicated");
    if missing + duplicated > 0 {
        return Err(format!(
            "the demo lost {missing} and duplicated {duplicated} acknowledged messages"
        ));
    }
    Ok(())
}

fn run_load(config: &load::LoadConfig, ledger: &Path, json: bool) -> Result<(), String> {
    let producers: u32 = config.topics.iter().map(|t| t.partitions).sum();
    if producers == 0 {
        return Err("no partitions: --replicated and --persisted are both 0".into());
    }
    if !json {
        println!(
            "load: {producers} producers, {} messages of {} B a batch, {} for {}; ledger {}",
            config.batch_messages,
            config.message_size,
            if config.rate > 0.0 {
                format!("{} batches/s each", config.rate)
            } else {
                "as fast as answered".to_string()
            },
            humantime::format_duration(config.duration),
            ledger.display()
        );
    }
    let report = load::load(config, ledger, None)?;
    if json {
        println!(
            "{}",
            serde_json::to_string(&report).map_err(|e| e.to_string())?
        );
    } else {
        println!(
            "load: {} batches ({} messages) acknowledged in {:.1} s: {:.1} MB/s; latency p50 {} us, p99 {} us, p999 {} us, max {} us; longest write gap {} ms",
            report.batches_acknowledged,
            report.messages_acknowledged,
            report.seconds,
            report.mb_per_s,
            report.p50_us,
            report.p99_us,
            report.p999_us,
            report.max_us,
            report.max_gap_ms
        );
        if report.batches_unknown > 0 {
            let kinds: Vec<String> = report
                .errors
                .iter()
                .map(|(kind, count)| format!("{count} {kind}"))
                .collect();
            println!(
                "load: {} batches with an unknown outcome ({})",
                report.batches_unknown,
                kinds.join(", ")
            );
        }
        if let Some(read) = &report.consumers {
            println!(
                "load: consumers read {} messages in order ({} again, at most {} in a row, {} of those changed), {} of {} read through their producer's last acknowledged message; {} acknowledged never read; {} offsets skipped, {} passed over with a lost poll answer, {} damaged{}",
                read.consumed,
                read.reread,
                read.reread_at_once,
                read.changed,
                read.caught_up,
                producers,
                read.missed,
                read.skipped,
                read.lost_with_a_reply,
                read.damaged,
                if read.errors.is_empty() {
                    String::new()
                } else {
                    format!("; failed polls: {:?}", read.errors)
                }
            );
        }
    }
    if let Some(read) = &report.consumers {
        // On stderr: stdout may be the JSON report.
        for example in &read.changed_examples {
            eprintln!("load: changed: {example}");
        }
        for example in &read.jump_examples {
            eprintln!("load: jumped: {example}");
        }
        let unexplained = if u64::from(read.caught_up) == u64::from(report.producers) {
            read.missed.saturating_sub(read.lost_with_a_reply)
        } else {
            0
        };
        if read.skipped + read.damaged + read.changed + unexplained > 0 {
            return Err(format!(
                "consumers read past {} offsets they never saw, {} damaged messages and {} \
                 offsets whose message changed, and never read {} acknowledged messages \
                 ({} more than the offsets passed over with a lost poll answer)",
                read.skipped, read.damaged, read.changed, read.missed, unexplained
            ));
        }
    }
    Ok(())
}

fn run_verify(
    cluster: &ClusterArgs,
    ledger: &Path,
    patience: Duration,
    json: bool,
    retained: bool,
) -> Result<(), String> {
    let checks = load::verify(
        ledger,
        &cluster.nodes,
        &cluster.username,
        &cluster.password,
        patience,
        retained,
    )?;
    let mut bad = 0;
    for check in &checks {
        if !check.clean() {
            bad += 1;
        }
        if json {
            println!(
                "{}",
                serde_json::to_string(check).map_err(|e| e.to_string())?
            );
        } else if !check.clean() {
            println!(
                "verify: node {} {}/{}: {} acknowledged: {} missing, {} duplicated, {} moved, {} damaged, {} offset gaps; {}",
                check.node,
                check.topic,
                check.partition,
                check.acknowledged,
                check.missing,
                check.duplicated,
                check.moved,
                check.damaged,
                check.offset_gaps,
                check.examples.join("; ")
            );
        }
    }
    let acknowledged: u64 = checks.iter().map(|c| c.acknowledged).sum();
    let unknown: u64 = checks.iter().map(|c| c.unknown_present).sum();
    if !json {
        println!(
            "verify: {} partition copies on {} nodes, {} acknowledged message copies checked, {} of unknown outcome present; {}",
            checks.len(),
            cluster.nodes.len(),
            acknowledged,
            unknown,
            if bad == 0 {
                "every acknowledged message is on every node exactly once".to_string()
            } else {
                format!("{bad} partition copies are wrong")
            }
        );
    }
    if bad > 0 {
        return Err(format!(
            "{bad} partition copies lack or repeat acknowledged messages"
        ));
    }
    Ok(())
}
