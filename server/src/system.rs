//! The system commands of the client port (issue #47): `GetStats` (10), `GetMe` (20),
//! `GetClient` (21) and `GetClients` (22). They read this node only: its client connections,
//! its process's figures from `/proc`, and what its partitions hold. None of them is replicated
//! state, so any node answers for itself (a client that asks another node sees that node's
//! connections and figures, as with upstream's single server).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use iggy_protocol::response::{ClientInfo, StatsInfo};

/// The wire's user id of a connection that has not logged in (`WIRE_NO_USER_ID` of 0.11.0).
pub const NO_USER: u32 = u32::MAX;
/// The wire's transport of a TCP connection (TLS runs over TCP).
const TCP: u8 = 1;

/// This node's client connections, by the id `GetClients` lists (from 1, never reused while the
/// process runs).
#[derive(Debug, Default)]
pub struct Connections {
    next: AtomicU32,
    open: Mutex<BTreeMap<u32, Connection>>,
}

#[derive(Clone, Copy, Debug)]
struct Connection {
    address: SocketAddr,
    user_id: u32,
}

/// One open connection's entry: removed when dropped (its connection task ended).
pub struct Registered<'a> {
    connections: &'a Connections,
    pub id: u32,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.connections.lock().remove(&self.id);
    }
}

impl Connections {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, Connection>> {
        self.open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Registers a connection from `address`, not logged in yet.
    pub fn open(&self, address: SocketAddr) -> Registered<'_> {
        let id = self.next.fetch_add(1, Relaxed).wrapping_add(1);
        self.lock().insert(
            id,
            Connection {
                address,
                user_id: NO_USER,
            },
        );
        Registered {
            connections: self,
            id,
        }
    }

    /// Connection `id` logged in as `user_id`.
    pub fn logged_in(&self, id: u32, user_id: u32) {
        if let Some(connection) = self.lock().get_mut(&id) {
            connection.user_id = user_id;
        }
    }

    pub fn count(&self) -> u32 {
        u32::try_from(self.lock().len()).unwrap_or(u32::MAX)
    }

    /// Connection `id` as the wire describes it (`None`: no such connection open).
    pub fn get(&self, id: u32) -> Option<ClientInfo> {
        self.lock().get(&id).map(|c| info(id, c))
    }

    /// Every open connection, by id.
    pub fn all(&self) -> Vec<ClientInfo> {
        self.lock().iter().map(|(id, c)| info(*id, c)).collect()
    }
}

fn info(id: u32, connection: &Connection) -> ClientInfo {
    ClientInfo {
        client_id: id,
        user_id: connection.user_id,
        transport: TCP,
        address: connection.address.to_string(),
        // Consumer groups are not built yet: no connection is a member of one.
        consumer_groups_count: 0,
    }
}

/// What the node's streams hold, counted by the caller from the metadata and the partitions.
#[derive(Clone, Copy, Debug, Default)]
pub struct Holdings {
    pub streams: u32,
    pub topics: u32,
    pub partitions: u32,
    pub segments: u32,
    pub messages: u64,
    pub bytes: u64,
}

/// The process figures `GetStats` reports, and the last CPU sample (the usage is over the time
/// since the previous `GetStats`, or since the process started for the first).
pub struct Process {
    started: Instant,
    started_unix_us: u64,
    cpu: Mutex<Option<CpuSample>>,
}

#[derive(Clone, Copy, Debug)]
struct CpuSample {
    at: Instant,
    /// This process's user and system time, and the machine's busy and total time, in clock
    /// ticks.
    process_ticks: u64,
    busy_ticks: u64,
    total_ticks: u64,
}

impl Default for Process {
    fn default() -> Self {
        Self {
            started: Instant::now(),
            started_unix_us: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX)),
            cpu: Mutex::new(None),
        }
    }
}

impl Process {
    /// The whole `GetStats` answer. `data_dir`: the file system whose space is reported (none:
    /// 0). Reads `/proc`; a figure that cannot be read is 0.
    pub fn stats(
        &self,
        holdings: Holdings,
        clients: u32,
        data_dir: Option<&std::path::Path>,
        server_version: &str,
    ) -> StatsInfo {
        let (cpu_usage, total_cpu_usage) = self.cpu_usage();
        let meminfo = read("/proc/meminfo");
        let kib = |key: &str| field(&meminfo, key).map_or(0, |kib| kib.saturating_mul(1024));
        let io = read("/proc/self/io");
        let (free_disk_space, total_disk_space) = data_dir
            .and_then(|dir| rustix::fs::statvfs(dir).ok())
            .map_or((0, 0), |s| {
                (
                    s.f_bavail.saturating_mul(s.f_frsize),
                    s.f_blocks.saturating_mul(s.f_frsize),
                )
            });
        let uname = rustix::system::uname();
        let os_release = read("/etc/os-release");
        let os = |key: &str| {
            os_release
                .lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
                .map(|v| v.trim_matches('"').to_owned())
        };
        StatsInfo {
            process_id: std::process::id(),
            cpu_usage,
            total_cpu_usage,
            memory_usage: resident_bytes(),
            total_memory: kib("MemTotal:"),
            available_memory: kib("MemAvailable:"),
            run_time: u64::try_from(self.started.elapsed().as_micros()).unwrap_or(u64::MAX),
            start_time: self.started_unix_us,
            read_bytes: field(&io, "read_bytes:").unwrap_or(0),
            written_bytes: field(&io, "write_bytes:").unwrap_or(0),
            messages_size_bytes: holdings.bytes,
            streams_count: holdings.streams,
            topics_count: holdings.topics,
            partitions_count: holdings.partitions,
            segments_count: holdings.segments,
            messages_count: holdings.messages,
            clients_count: clients,
            consumer_groups_count: 0,
            hostname: uname.nodename().to_string_lossy().into_owned(),
            os_name: os("NAME").unwrap_or_else(|| uname.sysname().to_string_lossy().into_owned()),
            os_version: os("VERSION_ID")
                .or_else(|| os("VERSION"))
                .unwrap_or_default(),
            kernel_version: uname.release().to_string_lossy().into_owned(),
            server_version: server_version.to_owned(),
            server_semver: semver(server_version),
            cache_metrics: Vec::new(),
            threads_count: u32::try_from(
                field(&read("/proc/self/status"), "Threads:").unwrap_or(0),
            )
            .unwrap_or(u32::MAX),
            free_disk_space,
            total_disk_space,
        }
    }

    /// (this process's CPU in percent of one core, the machine's busy share of all cores in
    /// percent), over the time since the last sample.
    fn cpu_usage(&self) -> (f32, f32) {
        let Some(now) = cpu_sample() else {
            return (0.0, 0.0);
        };
        let mut last = self
            .cpu
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let previous = last.replace(now);
        drop(last);
        let ticks_per_second = rustix::param::clock_ticks_per_second().max(1) as f64;
        let (process, wall, busy, total) = match previous {
            Some(p) => (
                now.process_ticks.saturating_sub(p.process_ticks),
                now.at.duration_since(p.at).as_secs_f64() * ticks_per_second,
                now.busy_ticks.saturating_sub(p.busy_ticks),
                now.total_ticks.saturating_sub(p.total_ticks),
            ),
            None => (
                now.process_ticks,
                self.started.elapsed().as_secs_f64() * ticks_per_second,
                now.busy_ticks,
                now.total_ticks,
            ),
        };
        #[allow(clippy::cast_possible_truncation, reason = "a percentage")]
        let percent = |part: f64, whole: f64| {
            if whole > 0.0 {
                (part / whole * 100.0) as f32
            } else {
                0.0
            }
        };
        #[allow(clippy::cast_precision_loss, reason = "tick counts far below 2^52")]
        (
            percent(process as f64, wall),
            percent(busy as f64, total as f64),
        )
    }
}

/// A kernel table (`/proc`, `/etc/os-release`): not data, so not through `iggy_io::Storage`.
#[allow(
    clippy::disallowed_methods,
    reason = "kernel tables, not the node's data"
)]
fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// The first number after `key` on its line of a `/proc` table (`key: value [kB]`).
fn field(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// Resident bytes of this process (`/proc/self/statm`'s second field, in pages).
fn resident_bytes() -> u64 {
    read("/proc/self/statm")
        .split_whitespace()
        .nth(1)
        .and_then(|pages| pages.parse::<u64>().ok())
        .map_or(0, |pages| {
            pages.saturating_mul(rustix::param::page_size() as u64)
        })
}

fn cpu_sample() -> Option<CpuSample> {
    let stat = read("/proc/self/stat");
    // Fields after the command name (which may hold spaces) in parentheses: utime and stime
    // are the 14th and 15th of the line, the 12th and 13th after the name.
    let after = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    let machine = read("/proc/stat");
    let cpu: Vec<u64> = machine
        .lines()
        .next()?
        .strip_prefix("cpu ")?
        .split_whitespace()
        .filter_map(|v| v.parse().ok())
        .collect();
    let total: u64 = cpu.iter().sum();
    // idle and iowait.
    let idle = cpu.get(3).copied().unwrap_or(0) + cpu.get(4).copied().unwrap_or(0);
    Some(CpuSample {
        at: Instant::now(),
        process_ticks: utime + stime,
        busy_ticks: total.saturating_sub(idle),
        total_ticks: total,
    })
}

/// `major * 1_000_000 + minor * 1_000 + patch` of a `major.minor.patch[-...]` version, as
/// upstream packs it (`SemanticVersion::get_numeric_version`).
pub fn semver(version: &str) -> Option<u32> {
    let core = version.split(['-', '+']).next()?;
    let mut parts = core.split('.').map(|p| p.parse::<u32>().ok());
    let (major, minor, patch) = (parts.next()??, parts.next()??, parts.next()??);
    if minor > 999 || patch > 999 {
        return None;
    }
    major
        .checked_mul(1_000_000)?
        .checked_add(minor * 1_000 + patch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn semver_packs_as_upstream() {
        assert_eq!(semver("0.1.0"), Some(1_000));
        assert_eq!(semver("1.2.3-edge.1"), Some(1_002_003));
        assert_eq!(semver("1.1000.0"), None);
        assert_eq!(semver("x"), None);
    }

    #[test]
    fn connections_are_listed_until_their_entry_drops() {
        let connections = Connections::default();
        let address: SocketAddr = "127.0.0.1:5000".parse().unwrap_or_else(|e| panic!("{e}"));
        let first = connections.open(address);
        let second = connections.open(address);
        connections.logged_in(second.id, 0);
        assert_eq!(connections.count(), 2);
        assert_eq!(connections.get(first.id).map(|c| c.user_id), Some(NO_USER));
        assert_eq!(connections.get(second.id).map(|c| c.user_id), Some(0));
        let gone = first.id;
        drop(first);
        assert_eq!(connections.get(gone), None);
        assert_eq!(
            connections
                .all()
                .iter()
                .map(|c| c.client_id)
                .collect::<Vec<_>>(),
            vec![second.id]
        );
    }

    #[test]
    fn the_process_figures_are_this_process() {
        let process = Process::default();
        let stats = process.stats(
            Holdings::default(),
            1,
            Some(std::path::Path::new("/")),
            "0.1.0",
        );
        assert_eq!(stats.process_id, std::process::id());
        assert!(stats.memory_usage > 0, "resident bytes");
        assert!(stats.total_memory >= stats.available_memory && stats.total_memory > 0);
        assert!(stats.threads_count >= 1);
        assert!(stats.total_disk_space >= stats.free_disk_space && stats.total_disk_space > 0);
        assert!(!stats.kernel_version.is_empty() && !stats.hostname.is_empty());
        assert_eq!(stats.server_semver, Some(1_000));
    }
}
