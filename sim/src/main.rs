//! `iggy-sim`: runs seeds of the cluster simulator and prints what each did; a failing seed
//! prints the checker that fired, every replica's status, the last events, and the command that
//! replays it.

use std::io::Write;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use iggy_sim::{Options, run};

/// Deterministic cluster simulator: three nodes of real VSR replicas on the real storage crates,
/// simulated disks and network, crashes, power losses, storage and network faults, then a
/// liveness phase that heals everything and requires every request to complete.
#[derive(Debug, Parser)]
#[command(
    version,
    after_help = "Exit codes:\n  0  every seed passed\n  1  a checker fired (the seed and the command replaying it are printed)\n  2  usage error"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Run this one seed.
    #[arg(long, conflicts_with = "seeds")]
    seed: Option<u64>,
    /// Run the seeds A..B (B excluded).
    #[arg(long, value_parser = parse_range)]
    seeds: Option<(u64, u64)>,
    /// Partitions with replicated durability.
    #[arg(long, default_value_t = 2)]
    replicated: u32,
    /// Partitions with persisted durability.
    #[arg(long, default_value_t = 2)]
    persisted: u32,
    /// A node of many groups: 12 replicated and 12 persisted partitions, a random client per
    /// group and a producer per partition (overrides --replicated, --persisted, --requests).
    #[arg(long)]
    many_groups: bool,
    /// Every topic keeps at most this many bytes per partition: the nodes run retention, so a
    /// replica down long enough comes back below its peers' logs and transfers their state.
    /// 0 (the default): each seed draws it with its history (three in ten keep 256 KiB, the
    /// rest everything; `--requests` turns the draws off and keeps everything).
    #[arg(long, default_value_t = 0, value_name = "BYTES")]
    retention_bytes: u64,
    /// Also damage partitions at rest: a restart finds one of the node's partitions without its
    /// WAL frontier three times in ten, and the node's boot rebuilds it from the peers.
    #[arg(long)]
    damage: bool,
    /// Also fill disks: half the storage faults leave a node's disk with less room than a log
    /// file for 0.2 to 2 s (a primary refuses what needs a new file, a backup's journal is
    /// refused and tried again); a node that halts for it fails the seed (`full-disk`).
    #[arg(long)]
    full_disk: bool,
    /// Start every group at view 0, so node 0 leads them all (the article's cluster); by
    /// default each partition starts at its metadata leader's view, spreading the primaries.
    #[arg(long)]
    no_spread: bool,
    /// Replicated partitions' replicas also publish what they journaled this often, as the
    /// server's do every 100 ms (0, the default: only by size, every 256 KiB here, which
    /// leaves restarts longer tails to forget and repair).
    #[arg(long, default_value_t = 0)]
    publish_interval_ms: u64,
    /// Clients misbehave: after one committed request in N, a client sends its number again
    /// with another body, which the group must refuse (checker `request reuse`). 0, the
    /// default: never.
    #[arg(long, default_value_t = 0, value_name = "N")]
    reuse_one_in: u64,
    /// Each node's primaries refuse requests (`NotAccepted`, the producer sends again) while
    /// the groups they lead hold this many body bytes admitted and not committed, as the
    /// server's `limits.pipeline_budget_bytes` (0, the default: no budget).
    #[arg(long, default_value_t = 0, value_name = "BYTES")]
    pipeline_budget_bytes: u64,
    /// Requests each client sends (default: 40, or for most seeds more, drawn from the seed:
    /// a history 5 or 25 times longer, with producers' batches to match).
    #[arg(long)]
    requests: Option<u64>,
    /// Simulated seconds of the fault phase.
    #[arg(long, default_value_t = 20)]
    fault_seconds: u64,
    /// Events kept for the trace of a failure.
    #[arg(long, default_value_t = 64)]
    trace: usize,
    /// Turn one protocol safeguard off (to show the simulator finds the bug it prevents):
    /// durable-view-gate, publish-before-log-view, nack-header-without-body, body-fetch,
    /// hole-check-lower-bound, incarnation-echo, same-view-keeps-log,
    /// forgotten-acknowledgments, durable-commit-point, keep-durable-log, start-view-resend,
    /// publish-on-view-change, rejoin-restores-acknowledgments, repair-from-disk,
    /// snapshot-transfer, read-confirmation, read-index-earlier-views,
    /// abandoned-adoption-keeps-log, recovering-joins-view-change, acknowledgment-bound,
    /// request-checksum, commit-stall.
    /// Also for a failover case (`iggy-sim --without NAME failover CASE`).
    #[arg(long)]
    without: Option<String>,
    /// Put every message delivered to and every storage effect of this group into the trace
    /// (the group id in hex, as failures print it; 0 is the metadata group).
    #[arg(long, value_parser = parse_group)]
    watch: Option<u128>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// One of the article's failover cases on a quiet cluster of 24 partitions with a producer
    /// each (and a consumer each at the scaled load), measured: per-group elections and write gaps, every failed send, boot's discards,
    /// repair times and bytes, and the check that every acknowledged batch is where it must be.
    /// Exit 1 if a checker fired or the check failed.
    Failover {
        case: Case,
        /// The article's load (24 producers, 40 batches a second of 250 messages of 1000
        /// bytes, the kill 20 s in) instead of the scaled one of the tests.
        #[arg(long)]
        full: bool,
        /// The seed of the run's random streams (network delays, storage latencies).
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Print the storage crates' WARN lines (boot's discards, frontier rewrites) to stderr.
        #[arg(long)]
        warnings: bool,
        /// Simulated seconds of load before the fault (default: 3 at the scaled load, 20 at
        /// the article's). Long warm-ups take every group past the protocol's bounds (the
        /// 128-header window, checkpoints) before the fault.
        #[arg(long, value_name = "SECONDS")]
        warm_up: Option<u64>,
    },
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Case {
    /// Kill node 0, which leads all 25 groups (primaries not spread).
    KillLeader,
    /// Kill node 0 with primaries spread: only the groups it leads change view.
    KillLeaderSpread,
    /// Kill node 2, a backup of every group (primaries not spread).
    KillBackup,
    /// Kill node 0 (leading everything), restart it 30 s later with nothing published.
    Restart,
    /// The same with persisted partitions.
    RestartPersisted,
    /// Kill node 0 (the restart cases' load, rings of 3.2 s of it), restart it 30 s later: each
    /// partition misses about 9 times its ring and repairs from the peers' disks.
    RestartPastRing,
    /// The same with retention deleting what node 0 missed on its peers: each partition
    /// catches up by one state transfer of a peer's settled segments, then repair.
    RestartPastRetention,
    /// Every node loses power at once (replicated partitions), and all boot together.
    PowerLoss,
    /// The same with persisted partitions.
    PowerLossPersisted,
    /// The producers stop, every node shuts down cleanly, and all three start together.
    RestartAll,
}

fn failover(
    case: Case,
    full: bool,
    seed: u64,
    warm_up: Option<u64>,
    safeguards: iggy_vsr::Safeguards,
) -> ExitCode {
    use iggy_sim::failover;
    let mut scale = if full {
        failover::Scale::article()
    } else {
        failover::Scale::scaled()
    };
    if let Some(seconds) = warm_up {
        scale.warm_up_us = seconds * 1_000_000;
    }
    let result = match case {
        Case::KillLeader | Case::KillLeaderSpread | Case::KillBackup => {
            let setup = failover::Setup {
                spread: matches!(case, Case::KillLeaderSpread),
                ..article(seed, safeguards)
            };
            let dead = if matches!(case, Case::KillBackup) {
                2
            } else {
                0
            };
            failover::kill(setup, &scale, dead).map(|r| {
                let ok = r.integrity.is_ok();
                (failover::render_kill(&r), ok)
            })
        }
        Case::Restart | Case::RestartPersisted => {
            let persisted = matches!(case, Case::RestartPersisted);
            failover::restart(
                failover::Setup {
                    persisted,
                    ..article(seed, safeguards)
                },
                &scale,
            )
            .map(|r| {
                let ok = r.integrity.is_ok() && r.kill.integrity.is_ok();
                (failover::render_restart(&r), ok)
            })
        }
        Case::RestartPastRing => failover::restart_past_ring(article(seed, safeguards), &scale)
            .map(|r| {
                let ok = r.integrity.is_ok()
                    && r.kill.integrity.is_ok()
                    && r.range_evicted == 0
                    && r.recovered.iter().all(|g| g.caught_up_us.is_some());
                (failover::render_restart(&r), ok)
            }),
        Case::RestartPastRetention => {
            failover::restart_past_retention(article(seed, safeguards), &scale).map(|r| {
                let ok = r.integrity.is_ok()
                    && r.kill.integrity.is_ok()
                    && r.evicted_after_install == 0
                    && r.behind_ring == 0
                    && r.recovered.iter().all(|g| g.caught_up_us.is_some());
                (failover::render_restart(&r), ok)
            })
        }
        Case::RestartAll => failover::restart_all(
            failover::Setup {
                spread: true,
                ..article(seed, safeguards)
            },
            &scale,
        )
        .map(|r| {
            let ok = r.integrity.is_ok() && r.leaderless.is_empty() && r.fetched_bytes == 0;
            (failover::render_restart_all(&r), ok)
        }),
        Case::PowerLoss | Case::PowerLossPersisted => {
            let persisted = matches!(case, Case::PowerLossPersisted);
            failover::power_loss_all(
                failover::Setup {
                    persisted,
                    spread: true,
                    ..article(seed, safeguards)
                },
                &scale,
            )
            .map(|r| {
                let ok = r.lost_published.is_empty() && (!persisted || r.lost == 0);
                (failover::render_power_loss(&r), ok)
            })
        }
    };
    match result {
        Ok((text, ok)) => {
            say(&text);
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(error) => {
            eprintln!("iggy-sim failover: {error}");
            ExitCode::from(1)
        }
    }
}

fn article(seed: u64, safeguards: iggy_vsr::Safeguards) -> iggy_sim::failover::Setup {
    iggy_sim::failover::Setup {
        safeguards,
        ..iggy_sim::failover::Setup::article(seed)
    }
}

fn parse_group(text: &str) -> Result<u128, String> {
    let digits = text.trim_start_matches("0x");
    u128::from_str_radix(digits, 16).map_err(|_| format!("{text:?} is not a group id in hex"))
}

fn safeguards(without: Option<&str>) -> Result<iggy_vsr::Safeguards, String> {
    match without {
        None => Ok(iggy_vsr::Safeguards::default()),
        Some(name) => iggy_vsr::Safeguards::without(name).ok_or_else(|| {
            format!(
                "no safeguard named {name:?} (there are: {})",
                iggy_vsr::Safeguards::NAMES.join(", ")
            )
        }),
    }
}

fn parse_range(text: &str) -> Result<(u64, u64), String> {
    let (a, b) = text
        .split_once("..")
        .ok_or_else(|| format!("{text:?} is not A..B"))?;
    let a = a.parse().map_err(|_| format!("{a:?} is not a number"))?;
    let b = b.parse().map_err(|_| format!("{b:?} is not a number"))?;
    if b <= a {
        return Err(format!("{text:?} is empty"));
    }
    Ok((a, b))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(Command::Failover {
        case,
        full,
        seed,
        warnings,
        warm_up,
    }) = cli.command
    {
        if warnings {
            tracing_subscriber::fmt()
                .with_writer(std::io::stderr)
                .with_max_level(tracing_subscriber::filter::LevelFilter::WARN)
                .init();
        }
        return match safeguards(cli.without.as_deref()) {
            Ok(safeguards) => failover(case, full, seed, warm_up, safeguards),
            Err(error) => {
                eprintln!("iggy-sim: {error}");
                ExitCode::from(2)
            }
        };
    }
    let safeguards = match safeguards(cli.without.as_deref()) {
        Ok(s) => s,
        Err(error) => {
            eprintln!("iggy-sim: {error}");
            return ExitCode::from(2);
        }
    };
    let (from, to) = match (cli.seed, cli.seeds) {
        (Some(seed), _) => (seed, seed + 1),
        (None, Some(range)) => range,
        (None, None) => (0, 1),
    };
    let mut failed = 0u64;
    let mut behind = 0u64;
    let mut from_disk = 0u64;
    let mut installed = 0u64;
    let mut deaf = 0u64;
    let mut full_disks = 0u64;
    let mut journals_refused = 0u64;
    let mut pipeline_refusals = 0u64;
    let mut simulated = 0u64;
    let mut wall = std::time::Duration::ZERO;
    // Ops committed per group, over every group of every seed.
    let mut group_ops: Vec<u64> = Vec::new();
    for seed in from..to {
        let base = if cli.many_groups {
            Options::many_groups(seed)
        } else {
            Options {
                replicated: cli.replicated,
                persisted: cli.persisted,
                requests_per_client: cli.requests.unwrap_or(40),
                ..Options::new(seed)
            }
        };
        let options = Options {
            vsr: iggy_vsr::Config {
                publish_interval_ticks: cli.publish_interval_ms / iggy_vsr::TICK_MS,
                ..base.vsr.clone()
            },
            fault_phase_us: cli.fault_seconds * 1_000_000,
            trace_events: cli.trace,
            watch: cli.watch,
            safeguards,
            spread_primaries: !cli.no_spread,
            draw_history: cli.requests.is_none(),
            retention_bytes: cli.retention_bytes,
            reuse_one_in: cli.reuse_one_in,
            pipeline_budget_bytes: cli.pipeline_budget_bytes,
            faults: iggy_sim::Faults {
                damage: cli.damage,
                full_disk: cli.full_disk,
                ..base.faults
            },
            ..base
        };
        let report = run(options);
        group_ops.extend(&report.group_ops);
        simulated += report.simulated_us;
        behind += u64::from(report.behind_ring > 0);
        from_disk += u64::from(report.disk_read_prepares > 0);
        installed += u64::from(report.snapshots_installed > 0);
        deaf += report.deaf_faults;
        full_disks += report.full_disks;
        journals_refused += report.journals_refused;
        pipeline_refusals += report.pipeline_refusals;
        wall += report.wall;
        let line = format!(
            "seed {seed}: {} simulated s in {:.2} wall s; {} ops committed ({} to {} a group, \
             history x{}, ring {}, retention {}), {} replies, {} unknown outcomes, {} crashes, {} view changes, {} \
             repair rounds read from disk ({} prepares), {} snapshots installed ({} of \
             partitions), {} rebuilt, {} behind the ring{}{}{}{}{}: {}",
            report.simulated_us / 1_000_000,
            report.wall.as_secs_f64(),
            report.committed_ops,
            report.group_ops.iter().min().copied().unwrap_or(0),
            report.group_ops.iter().max().copied().unwrap_or(0),
            report.history_factor,
            report.ring_entries,
            if report.retention_bytes == 0 {
                "none".to_string()
            } else {
                format!("{} KiB", report.retention_bytes >> 10)
            },
            report.replies,
            report.not_committed,
            report.crashes,
            report.view_changes,
            report.disk_reads,
            report.disk_read_prepares,
            report.snapshots_installed,
            report.partitions_installed,
            report.rebuilt,
            report.behind_ring,
            if report.reads_served + report.reads_refused > 0 {
                format!(
                    ", {} polls read after their barrier ({} refused)",
                    report.reads_served, report.reads_refused
                )
            } else {
                String::new()
            },
            if report.impostors > 0 {
                format!(
                    ", {} requests reused with another body ({} refused)",
                    report.impostors, report.impostors_refused
                )
            } else {
                String::new()
            },
            if report.deaf_faults > 0 {
                ", a deaf primary"
            } else {
                ""
            },
            if report.full_disks > 0 {
                format!(
                    ", {} full disks ({} journal writes refused)",
                    report.full_disks, report.journals_refused
                )
            } else {
                String::new()
            },
            if report.pipeline_refusals > 0 {
                format!(
                    ", {} requests refused for the pipeline budget",
                    report.pipeline_refusals
                )
            } else {
                String::new()
            },
            if report.failure.is_some() {
                "FAILED"
            } else {
                "ok"
            }
        );
        let mut text = line + "\n";
        if let Some(failure) = report.failure {
            failed += 1;
            text += &failure.render();
            let without = cli
                .without
                .as_deref()
                .map_or(String::new(), |w| format!(" --without {w}"));
            let requests = cli
                .requests
                .map_or(String::new(), |r| format!(" --requests {r}"));
            let requests = if cli.retention_bytes > 0 {
                format!("{requests} --retention-bytes {}", cli.retention_bytes)
            } else {
                requests
            };
            let requests = if cli.pipeline_budget_bytes > 0 {
                format!(
                    "{requests} --pipeline-budget-bytes {}",
                    cli.pipeline_budget_bytes
                )
            } else {
                requests
            };
            let requests = if cli.damage {
                format!("{requests} --damage")
            } else {
                requests
            };
            let requests = if cli.full_disk {
                format!("{requests} --full-disk")
            } else {
                requests
            };
            let requests = if cli.reuse_one_in > 0 {
                format!("{requests} --reuse-one-in {}", cli.reuse_one_in)
            } else {
                requests
            };
            let requests = if cli.publish_interval_ms > 0 {
                format!(
                    "{requests} --publish-interval-ms {}",
                    cli.publish_interval_ms
                )
            } else {
                requests
            };
            let layout = if cli.many_groups {
                format!(" --many-groups{requests}")
            } else {
                format!(
                    " --replicated {} --persisted {}{requests}",
                    cli.replicated, cli.persisted
                )
            };
            text += &format!(
                "replay: cargo run --release -p iggy-sim -- --seed {seed}{layout} \
                 --fault-seconds {}{}{without}\n",
                cli.fault_seconds,
                if cli.no_spread { " --no-spread" } else { "" }
            );
        }
        if !say(&text) {
            // The reader went away (`| head`): stop quietly with what is known so far.
            return exit(failed);
        }
    }
    let seeds = to - from;
    group_ops.sort_unstable();
    let at = |q: usize| {
        group_ops
            .get(q.min(group_ops.len().saturating_sub(1)))
            .copied()
    };
    let quantile = |n: usize, d: usize| at(group_ops.len() * n / d).unwrap_or(0);
    say(&format!(
        "{seeds} seeds, {failed} failed, {behind} with a replica behind every peer's ring at the \
         end, {from_disk} with repair read from disk (a replica below a peer's ring), \
         {installed} with a peer's state installed (a metadata snapshot or a partition's segments: a replica below a peer's log), \
         {deaf} with a deaf primary, {full_disks} full disks ({journals_refused} journal writes refused), \
         {pipeline_refusals} requests refused for the pipeline budget; ops \
         committed per group: min {}, median {}, p90 {}, max {}; {:.0} simulated s per wall s\n",
        group_ops.first().copied().unwrap_or(0),
        quantile(1, 2),
        quantile(9, 10),
        group_ops.last().copied().unwrap_or(0),
        simulated as f64 / 1e6 / wall.as_secs_f64().max(1e-9)
    ));
    exit(failed)
}

/// Writes `text` to stdout; false when stdout is closed.
fn say(text: &str) -> bool {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .is_ok()
}

fn exit(failed: u64) -> ExitCode {
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
