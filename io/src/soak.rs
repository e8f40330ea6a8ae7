//! Support for seeded soak tests on [`crate::SimStorage`]: a small deterministic generator for
//! the workload, and the seed loop every soak shares (how many seeds, replaying one, and the
//! message that says how to replay a failure).

/// The faults every soak injects while its workload runs: short reads and writes one time in
/// twenty, EIO on about one write in 330 and one sync in 100 (the harness then sees the
/// component refuse by itself, or restarts it).
#[must_use]
pub fn faults() -> crate::FaultConfig {
    crate::FaultConfig {
        short_read_probability: 0.05,
        short_write_probability: 0.05,
        write_error_probability: 0.003,
        sync_error_probability: 0.01,
        ..crate::FaultConfig::default()
    }
}

/// A xorshift generator: the workload of a soak is a pure function of its seed.
#[derive(Clone, Debug)]
pub struct SeedRng(u64);

impl SeedRng {
    #[must_use]
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// A value in `0..bound` (`bound` > 0).
    pub fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound
    }
}

/// Runs `run` for each seed: only `{prefix}_SEED` when it is set, else `0..{prefix}_SEEDS`
/// (default `default_seeds`). Panics at the first failure, naming the seed and the command that
/// replays it (`replay`, for example `cargo test -p iggy-wal --test sim_soak`).
pub fn run_seeds(
    prefix: &str,
    default_seeds: u64,
    replay: &str,
    mut run: impl FnMut(u64) -> Result<(), String>,
) {
    let seeds: Vec<u64> = match std::env::var(format!("{prefix}_SEED")) {
        Ok(seed) => vec![
            seed.parse()
                .unwrap_or_else(|_| panic!("{prefix}_SEED={seed} is not a number")),
        ],
        Err(_) => {
            let count = std::env::var(format!("{prefix}_SEEDS"))
                .ok()
                .and_then(|n| n.parse().ok());
            (0..count.unwrap_or(default_seeds)).collect()
        }
    };
    for seed in seeds {
        if let Err(failure) = run(seed) {
            panic!("seed {seed}: {failure}\nreplay: {prefix}_SEED={seed} {replay}");
        }
    }
}

/// Flips one bit inside the written part (up to the last non-zero byte) of one file anywhere
/// under `dir`, chosen by `rng`: bit rot at rest. Returns the file, or `None` when there is none.
pub fn rot_one_file(
    storage: &crate::SimStorage,
    dir: &std::path::Path,
    rng: &mut SeedRng,
) -> Option<std::path::PathBuf> {
    use crate::{EntryKind, ReadStorage};
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(at) = pending.pop() {
        for entry in storage.list_dir(&at).ok()? {
            let path = at.join(&entry.name);
            match entry.kind {
                EntryKind::File => files.push(path),
                EntryKind::Dir => pending.push(path),
                EntryKind::Other => {}
            }
        }
    }
    let path = files
        .get(usize::try_from(rng.below(files.len().max(1) as u64)).ok()?)?
        .clone();
    let bytes = storage.read_all(&path).ok()?;
    let written = bytes
        .iter()
        .rposition(|b| *b != 0)
        .map_or(0, |last| last + 1);
    if written > 0 {
        let mask = 1u8 << rng.below(8);
        storage.rot(&path, rng.below(written as u64), mask).ok()?;
    }
    Some(path)
}
