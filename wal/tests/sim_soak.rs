//! Seeded simulation soak: a random workload (appends, publications, truncations, dropped
//! prefixes that recycle files, process crashes, power losses, now and then a flipped bit at
//! rest) on a `SimStorage` that also injects short reads and writes and EIO on
//! writes and syncs. After a failed operation the harness keeps using the log, as a careless
//! caller would; the log must refuse (poisoned), and then the "process" crashes and boots again. After every boot: boot succeeded, and every acknowledged entry
//! is present, unchanged, and chained. A run is a pure function of its seed; a failure prints
//! the seed and how to replay it.
//!
//! `WAL_SIM_SEEDS=N` runs N seeds (default 24); `WAL_SIM_SEED=S` runs only seed S.
#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    reason = "test code: a failed unwrap is a failed test; casts are of small test values"
)]

use std::path::Path;

use iggy_io::SimStorage;
use iggy_wal::{Config, Mode, Wal, WalError};

fn config() -> Config {
    Config {
        file_size_bytes: 16 << 10,
        flush_bytes: 2048,
        // Sealed files' offsets let go and loaded again from their seals on nearly every read.
        sealed_offsets_in_memory: 1,
        ..Config::new(0x50AC)
    }
}

fn dir() -> &'static Path {
    Path::new("wal")
}

type Rng = iggy_io::soak::SeedRng;

/// Boots the log, crashing and retrying when an injected fault fails the boot itself.
fn boot(storage: &SimStorage, rng: &mut Rng) -> Result<Wal<SimStorage>, String> {
    for _ in 0..20 {
        match Wal::open(storage.clone(), dir(), config(), Mode::Open) {
            Ok(Some((wal, _))) => return Ok(wal),
            Ok(None) => return Err("the log vanished".into()),
            // An injected I/O fault during boot: the process dies and boots again.
            Err(WalError::Io(_)) => crash(storage, rng),
            Err(error) => return Err(format!("boot refused: {error}")),
        }
    }
    Err("boot failed 20 times in a row".into())
}

fn crash(storage: &SimStorage, rng: &mut Rng) {
    if rng.below(2) == 0 {
        storage.crash_process();
    } else {
        storage.power_loss();
    }
}

/// Checks the log against the acknowledged ops `1..=acknowledged.len()`, of which a prefix
/// through `dropped` (the highest `drop_prefix` asked for) may be gone: the log's first op is at
/// most one past it, and every acknowledged op from there is present and unchanged.
fn verify(wal: &Wal<SimStorage>, acknowledged: &[Vec<u8>], dropped: u64) -> Result<(), String> {
    let head = wal.head().0;
    let durable_head = acknowledged.len() as u64;
    if head < durable_head {
        return Err(format!("head {head} below the acknowledged {durable_head}"));
    }
    let first_op = wal.first_op();
    if first_op > dropped + 1 {
        return Err(format!(
            "first op {first_op} past the dropped prefix (through {dropped})"
        ));
    }
    if durable_head < first_op {
        return Ok(());
    }
    let entries = wal
        .read(first_op, durable_head)
        .map_err(|e| format!("read: {e}"))?;
    let from = usize::try_from(first_op - 1).unwrap();
    for (entry, body) in entries.iter().zip(&acknowledged[from..]) {
        if &entry.body != body {
            return Err(format!("acknowledged op {} changed", entry.header.op));
        }
    }
    for pair in entries.windows(2) {
        if pair[1].header.parent != pair[0].header.checksum() {
            return Err(format!("chain broken at op {}", pair[1].header.op));
        }
    }
    Ok(())
}

/// The "process" dies (crash or power loss), boots, and checks every acknowledged entry.
fn restart(
    storage: &SimStorage,
    rng: &mut Rng,
    acknowledged: &[Vec<u8>],
    dropped: u64,
) -> Result<Wal<SimStorage>, String> {
    crash(storage, rng);
    let wal = boot(storage, rng)?;
    verify(&wal, acknowledged, dropped)?;
    // Whatever this boot trusts must survive the next power loss: a booted node relies on it.
    // (A slot left in the page cache by a failed sync must not be trusted without being made
    // durable.) Check it before the cut below publishes anew.
    let trusted = wal.head().0;
    drop(wal);
    storage.power_loss();
    let wal = boot(storage, rng)?;
    if wal.head().0 < trusted {
        return Err(format!(
            "a boot trusted op {trusted}, the next boot after a power loss only {}",
            wal.head().0
        ));
    }
    // Boot may keep entries past the acknowledged head only if a publication that was in
    // flight landed; they were never acknowledged, so cut them.
    let cut = acknowledged.len() as u64;
    if wal.head().0 > cut {
        wal.truncate_after(cut).ok();
    }
    Ok(wal)
}

fn run(seed: u64) -> Result<(), String> {
    let mut rng = Rng::new(seed);
    let storage = SimStorage::new(seed);
    let mut wal = Wal::create(storage.clone(), dir(), config(), 1, 0).map_err(|e| e.to_string())?;
    storage.set_faults(iggy_io::soak::faults());
    // The acknowledged log: bodies of ops 1..=acknowledged.len().
    let mut acknowledged: Vec<Vec<u8>> = Vec::new();
    // Bodies appended since the last acknowledgment (the candidates of the next one).
    let mut pending: Vec<Vec<u8>> = Vec::new();
    let mut failures = 0;
    // The highest op a `drop_prefix` was asked to drop through (the files it retires become
    // spares, and later files are spares renamed: the soak recycles files under its faults).
    let mut dropped = 0u64;
    for step in 0..400u64 {
        let result: Result<(), WalError> = match rng.below(100) {
            0..=59 => {
                let len = rng.below(900) as usize;
                let body: Vec<u8> = (0..len).map(|i| (i as u64 + step) as u8).collect();
                wal.append_body(&body, 1, step).map(|_| pending.push(body))
            }
            60..=84 => wal.publish().map(|published| {
                let acknowledged_head = acknowledged.len() as u64;
                let newly = usize::try_from(published.head_op - acknowledged_head).unwrap();
                acknowledged.extend(pending.drain(..newly));
                pending.clear();
            }),
            85..=86 => {
                // A view change cuts the unacknowledged suffix.
                let cut = acknowledged.len() as u64;
                wal.truncate_after(cut).map(|()| pending.clear())
            }
            87..=92 => {
                drop(wal);
                pending.clear();
                wal = restart(&storage, &mut rng, &acknowledged, dropped)
                    .map_err(|e| format!("step {step}: {e}"))?;
                Ok(())
            }
            93 => {
                // Bit rot at rest, then a boot: a refusal (damage in what boot must trust, or a
                // frontier slot the older one cannot stand in for), or every acknowledged entry
                // intact.
                drop(wal);
                pending.clear();
                let rotted = iggy_io::soak::rot_one_file(&storage, dir(), &mut rng);
                let mut booted = None;
                for _ in 0..20 {
                    match Wal::open(storage.clone(), dir(), config(), Mode::Open) {
                        Ok(Some((opened, _))) => {
                            booted = Some(opened);
                            break;
                        }
                        Ok(None) => return Err(format!("step {step}: the log vanished")),
                        Err(WalError::Io(_)) => storage.crash_process(),
                        // Refused: this replica needs its peers now; the run ends.
                        Err(_) => return Ok(()),
                    }
                }
                let opened = booted.ok_or(format!("step {step}: boot failed 20 times"))?;
                if let Err(error) = verify(&opened, &acknowledged, dropped) {
                    // A file the frontier passed is taken from its seal: its bodies are left to
                    // the reads that serve them, and the read that meets the rot refuses it,
                    // naming the file (never serving it). A deep check must refuse too; the
                    // replica needs its peers then, as after a refusal at boot.
                    let in_rotted = rotted.as_ref().is_some_and(|path| {
                        error.starts_with("read: ")
                            && error.contains(&path.display().to_string())
                            && error.contains("is damaged")
                    });
                    let deep = iggy_wal::boot::check_verifying(
                        &iggy_io::ReadOnly::new(storage.clone()),
                        dir(),
                        config().group,
                        iggy_wal::Naming::ByOp,
                        iggy_wal::boot::Verify::Everything,
                    );
                    if in_rotted && deep.is_err() {
                        return Ok(());
                    }
                    return Err(format!(
                        "step {step}: after rot: {error} (deep check: {deep:?})"
                    ));
                }
                wal = opened;
                let cut = acknowledged.len() as u64;
                if wal.head().0 > cut {
                    wal.truncate_after(cut).ok();
                }
                Ok(())
            }
            94..=95 => {
                // A checkpoint: drop what lies some way behind the published head.
                let upto = wal.published().head_op.saturating_sub(rng.below(24));
                dropped = dropped.max(upto);
                wal.drop_prefix(upto).map(|_| ())
            }
            _ => match wal.read(wal.first_op(), wal.head().0) {
                Ok(_) | Err(WalError::OutOfRange { .. }) => Ok(()),
                Err(other) => Err(other),
            },
        };
        if let Err(error) = result {
            match error {
                // Keep using the log as a careless caller would: it is the log's job to refuse
                // everything from now on (poisoning), not the caller's.
                WalError::Io(_) => failures += 1,
                WalError::Poisoned { .. } => {
                    drop(wal);
                    pending.clear();
                    wal = restart(&storage, &mut rng, &acknowledged, dropped)
                        .map_err(|e| format!("step {step}: {e}"))?;
                }
                WalError::Backpressure { .. } => {}
                other => return Err(format!("step {step}: unexpected error {other}")),
            }
        }
    }
    drop(wal);
    storage.power_loss();
    let wal = boot(&storage, &mut rng)?;
    verify(&wal, &acknowledged, dropped)?;
    if acknowledged.is_empty() && failures == 0 {
        return Err("the run acknowledged nothing".into());
    }
    Ok(())
}

#[test]
fn seeded_faults_and_crashes_never_lose_an_acknowledged_entry() {
    iggy_io::soak::run_seeds("WAL_SIM", 24, "cargo test -p iggy-wal --test sim_soak", run);
}
