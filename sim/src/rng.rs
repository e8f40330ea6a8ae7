//! Seeded random streams, one per concern (network, storage latency, faults, workload, disks),
//! each split from the run's seed by its own name, so adding draws to one never shifts another.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// One named stream of a run.
#[derive(Clone, Debug)]
pub struct Stream(ChaCha8Rng);

impl Stream {
    /// The stream `name` of the run seeded `seed`.
    #[must_use]
    pub fn new(seed: u64, name: &str) -> Self {
        // FNV-1a of the name, mixed with the seed: independent streams per (seed, name).
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in name.bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        let mut key = [0u8; 32];
        key[..8].copy_from_slice(&seed.to_le_bytes());
        key[8..16].copy_from_slice(&hash.to_le_bytes());
        Self(ChaCha8Rng::from_seed(key))
    }

    /// A number in `0..n` (`n` at least 1).
    pub fn below(&mut self, n: u64) -> u64 {
        self.0.random_range(0..n.max(1))
    }

    /// A number in `low..=high`.
    pub fn between(&mut self, low: u64, high: u64) -> u64 {
        self.0.random_range(low..=high.max(low))
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.0.random_bool(p.min(1.0))
    }

    /// A fresh 64-bit number (seeds of sub-streams, nonces).
    pub fn draw(&mut self) -> u64 {
        self.0.random()
    }
}
