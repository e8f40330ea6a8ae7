//! The packet simulator: each message between two endpoints is lost, delayed, reordered (delays
//! differ) or duplicated by the seeded network stream; links between nodes can be cut one way
//! or both ways, or clogged (a long extra delay). A healed network delivers everything once.

use std::collections::{BTreeMap, BTreeSet};

use crate::rng::Stream;

/// One end of a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Endpoint {
    Node(u8),
    Client(usize),
    Producer(usize),
    Consumer(usize),
}

/// How the network misbehaves while faults are on.
#[derive(Clone, Debug)]
pub struct NetworkConfig {
    pub delay_min_us: u64,
    pub delay_max_us: u64,
    pub loss: f64,
    pub duplicate: f64,
    /// Each machine's outgoing bandwidth, bytes a second (`None`: a message's size costs no
    /// time). A message waits for what its sender sent before it and takes its size over the
    /// bandwidth on top of its delay; the clients share one machine, as the article's did.
    pub egress_bytes_per_second: Option<u64>,
}

impl Default for NetworkConfig {
    fn default() -> Self {
        Self {
            delay_min_us: 100,
            delay_max_us: 5_000,
            loss: 0.02,
            duplicate: 0.01,
            egress_bytes_per_second: None,
        }
    }
}

impl NetworkConfig {
    /// A network that loses and duplicates nothing, 100 to 500 us a message, bandwidth
    /// unlimited: the scripted cases' and the failover cases' (which add egress).
    #[must_use]
    pub fn reliable() -> Self {
        Self {
            delay_min_us: 100,
            delay_max_us: 500,
            loss: 0.0,
            duplicate: 0.0,
            egress_bytes_per_second: None,
        }
    }
}

/// The network of a run.
#[derive(Debug)]
pub struct Network {
    config: NetworkConfig,
    rng: Stream,
    /// Node links cut, from one node to another.
    cut: BTreeSet<(u8, u8)>,
    /// Node links clogged: the extra delay of each.
    clogged: BTreeMap<(u8, u8), u64>,
    /// Faults off: every message arrives once, after the minimum delay.
    healed: bool,
    /// When each machine's outgoing link is free again (`None`: the clients' machine).
    busy_until: BTreeMap<Option<u8>, u64>,
    pub sent: u64,
    pub lost: u64,
}

impl Network {
    #[must_use]
    pub fn new(config: NetworkConfig, rng: Stream) -> Self {
        Self {
            config,
            rng,
            cut: BTreeSet::new(),
            clogged: BTreeMap::new(),
            healed: false,
            busy_until: BTreeMap::new(),
            sent: 0,
            lost: 0,
        }
    }

    /// The delays after which one message of `bytes` sent at `now_us` from `from` to `to`
    /// arrives: none (lost or cut), one, or two (duplicated).
    pub fn route(&mut self, from: Endpoint, to: Endpoint, bytes: usize, now_us: u64) -> Vec<u64> {
        let queued = self.transmit(from, bytes, now_us);
        self.route_after(from, to)
            .into_iter()
            .map(|delay| delay + queued)
            .collect()
    }

    /// The time the sender's link takes to put `bytes` out, waiting included.
    fn transmit(&mut self, from: Endpoint, bytes: usize, now_us: u64) -> u64 {
        let Some(rate) = self.config.egress_bytes_per_second else {
            return 0;
        };
        let machine = match from {
            Endpoint::Node(n) => Some(n),
            Endpoint::Client(_) | Endpoint::Producer(_) | Endpoint::Consumer(_) => None,
        };
        let free = self.busy_until.entry(machine).or_insert(0);
        let start = (*free).max(now_us);
        let took = (bytes as u64).saturating_mul(1_000_000) / rate.max(1);
        *free = start + took;
        *free - now_us
    }

    fn route_after(&mut self, from: Endpoint, to: Endpoint) -> Vec<u64> {
        self.sent += 1;
        if self.healed {
            return vec![self.config.delay_min_us];
        }
        if let (Endpoint::Node(a), Endpoint::Node(b)) = (from, to)
            && self.cut.contains(&(a, b))
        {
            self.lost += 1;
            return Vec::new();
        }
        if self.rng.chance(self.config.loss) {
            self.lost += 1;
            return Vec::new();
        }
        let extra = match (from, to) {
            (Endpoint::Node(a), Endpoint::Node(b)) => {
                self.clogged.get(&(a, b)).copied().unwrap_or(0)
            }
            _ => 0,
        };
        let mut delays = vec![
            self.rng
                .between(self.config.delay_min_us, self.config.delay_max_us)
                + extra,
        ];
        if self.rng.chance(self.config.duplicate) {
            delays.push(
                self.rng
                    .between(self.config.delay_min_us, self.config.delay_max_us * 4)
                    + extra,
            );
        }
        delays
    }

    /// Cuts the links of `node` to every other node (both ways, or only outgoing).
    pub fn isolate(&mut self, node: u8, nodes: u8, one_way: bool) {
        for other in (0..nodes).filter(|o| *o != node) {
            self.cut.insert((node, other));
            if !one_way {
                self.cut.insert((other, node));
            }
        }
    }

    /// Cuts the one link from `from` to `to`.
    pub fn cut_link(&mut self, from: u8, to: u8) {
        self.cut.insert((from, to));
    }

    /// Restores the one link from `from` to `to`.
    pub fn restore_link(&mut self, from: u8, to: u8) {
        self.cut.remove(&(from, to));
    }

    /// Clogs the links of `node` both ways with `extra_us` of delay.
    pub fn clog(&mut self, node: u8, nodes: u8, extra_us: u64) {
        for other in (0..nodes).filter(|o| *o != node) {
            self.clogged.insert((node, other), extra_us);
            self.clogged.insert((other, node), extra_us);
        }
    }

    /// Delays everything sent from `from` to `to` by `extra_us` more (until `unclog_link`).
    pub fn clog_link(&mut self, from: u8, to: u8, extra_us: u64) {
        self.clogged.insert((from, to), extra_us);
    }

    /// Ends the delay of the one link from `from` to `to` (what is in flight still arrives late).
    pub fn unclog_link(&mut self, from: u8, to: u8) {
        self.clogged.remove(&(from, to));
    }

    /// Restores every link (faults may go on).
    pub fn repair(&mut self) {
        self.cut.clear();
        self.clogged.clear();
    }

    /// Restores every link and stops every network fault.
    pub fn heal(&mut self) {
        self.repair();
        self.healed = true;
    }

    /// Whether the link from `from` to `to` is cut.
    #[must_use]
    pub fn is_cut(&self, from: u8, to: u8) -> bool {
        !self.healed && self.cut.contains(&(from, to))
    }

    #[must_use]
    pub fn is_partitioned(&self) -> bool {
        !self.cut.is_empty() || !self.clogged.is_empty()
    }
}
