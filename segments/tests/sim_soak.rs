//! Seeded simulation soak of a partition: appends, publications, retention, reads, staged
//! installs of another partition's content (state transfer), process crashes and power losses on a `SimStorage` that also injects short reads and writes and EIO on
//! writes and syncs. After a failed operation the harness keeps using the partition, as a
//! careless caller would; the partition must refuse by itself (its WAL or superblock poisoned),
//! and then the "process" crashes and boots again. After every boot: boot succeeded, every
//! acknowledged batch at or past the first retained offset is present and unchanged, offsets are
//! continuous, the next offset is past every acknowledged batch, and nothing was deleted that
//! retention could not have deleted; after an install, the partition is wholly the old one or
//! wholly the new one (the new one if `commit` returned). A run is a pure function of its seed.
//!
//! `SEGMENTS_SIM_SEEDS=N` runs N seeds (default 16); `SEGMENTS_SIM_SEED=S` runs only seed S.
#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    reason = "test code: a failed unwrap is a failed test; casts are of small test values"
)]

mod common;

use std::collections::BTreeMap;

use common::{client_batch, config, dir, read_all};
use iggy_io::SimStorage;
use iggy_segments::offsets::{ConsumerKind, OffsetError};
use iggy_segments::{Install, Partition, PartitionError, StateArtifact};
use iggy_superblock::SuperblockError;
use iggy_wal::{Mode, WalError};

type Rng = iggy_io::soak::SeedRng;

/// What the harness does after an error.
enum Outcome {
    /// An injected I/O failure: keep going (the partition must refuse later work itself).
    Failed,
    /// The partition refuses everything: restart the process.
    Poisoned,
    Ignored,
}

fn outcome(error: &PartitionError) -> Result<Outcome, String> {
    Ok(match error {
        PartitionError::Wal(error) => match **error {
            WalError::Io(_) => Outcome::Failed,
            WalError::Poisoned { .. } => Outcome::Poisoned,
            WalError::Backpressure { .. } => Outcome::Ignored,
            ref other => return Err(format!("unexpected WAL error {other}")),
        },
        PartitionError::Superblock(error) => match **error {
            SuperblockError::Io(_) => Outcome::Failed,
            SuperblockError::Poisoned { .. } => Outcome::Poisoned,
            ref other => return Err(format!("unexpected superblock error {other}")),
        },
        PartitionError::Io(_) | PartitionError::Offsets(OffsetError::Io(_)) => Outcome::Failed,
        other => return Err(format!("unexpected error {other}")),
    })
}

/// Boots after rot in `rotted`. `Ok(None)`: boot refused the damage, which it may only do when
/// the rot hit data it must trust: a segment, a consumer offset, or the newest frontier slot when
/// the older one no longer reaches the files left (boot cannot tell then what was published). A
/// rotten index or superblock copy is repaired, never refused.
fn boot_after_rot(
    storage: &SimStorage,
    rng: &mut Rng,
    model: &mut Model,
    rotted: &std::path::Path,
) -> Result<Option<Partition<SimStorage>>, String> {
    let name = rotted.file_name().unwrap().to_string_lossy().into_owned();
    let refusal_allowed = name.ends_with(".log")
        || name == "frontier"
        || rotted.parent().is_some_and(|p| p.ends_with("offsets"));
    match open_retrying(storage, rng)? {
        Ok((partition, report)) => {
            match verify(&partition, &report, roll_back(rotted, &report, model)) {
                Ok(()) => Ok(Some(partition)),
                // A segment the frontier passed is taken from its seal at boot, its bodies left to
                // the reads that serve them: the rot is refused by the read that meets it, naming
                // the file (never served). A deep check must then refuse too.
                Err(error)
                    if name.ends_with(".log")
                        && error.starts_with("read: ")
                        && error.contains(&rotted.display().to_string())
                        && error.contains("does not verify on read") =>
                {
                    drop(partition);
                    let deep = iggy_segments::Config {
                        verify: iggy_wal::boot::Verify::Everything,
                        ..config()
                    };
                    match iggy_segments::check(
                        &iggy_io::ReadOnly::new(storage.clone()),
                        dir(),
                        &deep,
                    ) {
                        Err(_) => Ok(None),
                        Ok(_) => Err(format!("a read refused ({error}), a deep check did not")),
                    }
                }
                Err(error) => Err(error),
            }
        }
        Err(_) if refusal_allowed => Ok(None),
        Err(error) => Err(format!("boot refused: {error}")),
    }
}

/// The model as boot may find it after rot in `rotted`. Rot of an offset file's newest slot
/// looks like a store a crash tore (the slot does not verify; the format cannot tell the two
/// apart, and refusing a torn store would refuse every crash in the middle of one), so the file
/// reads as the store before it, and boot writes that over the damaged slot (reported as
/// `OffsetSlotDamaged`; a boot retried after an injected fault finds it repaired already). That
/// one step back is allowed only for the consumer whose file the rot hit, and only to exactly
/// the offset its last store replaced; anything else is still a failure.
fn roll_back<'m>(
    rotted: &std::path::Path,
    report: &iggy_segments::Report,
    model: &'m mut Model,
) -> &'m mut Model {
    if !rotted.parent().is_some_and(|p| p.ends_with("offsets")) {
        return model;
    }
    for found in &report.offsets {
        let consumer = (found.kind, found.id);
        if rotted.ends_with(iggy_segments::offsets::file_name(found.kind, found.id))
            && model.offsets_before.get(&consumer) == Some(&found.offset)
        {
            model.offsets.insert(consumer, found.offset);
            // Both slots hold it now.
            model.offsets_before.remove(&consumer);
        }
    }
    model
}

fn crash(storage: &SimStorage, rng: &mut Rng) {
    if rng.below(2) == 0 {
        storage.crash_process();
    } else {
        storage.power_loss();
    }
}

/// The model: what the partition has acknowledged, and how far retention may have deleted.
#[derive(Clone, Default)]
struct Model {
    /// Base offset -> stamped batch, for every batch a publication covered.
    acknowledged: BTreeMap<u64, Vec<u8>>,
    /// (WAL op, base offset, bytes) appended since the last publication.
    pending: Vec<(u64, u64, Vec<u8>)>,
    /// Retention never deletes at or past this offset (the head segment's start when it ran).
    deletable_below: u64,
    /// Consumer offsets whose store returned.
    offsets: BTreeMap<(ConsumerKind, u32), u64>,
    /// A store that failed: it may or may not have landed.
    offset_in_doubt: Option<((ConsumerKind, u32), u64)>,
    /// Each consumer's offset before its last store returned: what its file's other slot holds.
    offsets_before: BTreeMap<(ConsumerKind, u32), u64>,
}

impl Model {
    /// The offset after the last acknowledged batch (0 when there is none).
    fn acknowledged_end(&self) -> u64 {
        self.acknowledged
            .iter()
            .next_back()
            .map_or(0, |(offset, bytes)| {
                let header = iggy_format::batch::decode(bytes).unwrap().header;
                offset + u64::from(header.message_count)
            })
    }
}

/// Boots the partition, crashing and retrying when an injected fault fails the boot itself,
/// and checks it against the model.
fn boot(
    storage: &SimStorage,
    rng: &mut Rng,
    model: &mut Model,
) -> Result<Partition<SimStorage>, String> {
    boot_either(storage, rng, model, None)
}

/// [`boot`], accepting instead the `installed` model when the partition matches it (an
/// install whose outcome the harness does not know).
fn boot_either(
    storage: &SimStorage,
    rng: &mut Rng,
    model: &mut Model,
    installed: Option<&Model>,
) -> Result<Partition<SimStorage>, String> {
    let (partition, report) =
        open_retrying(storage, rng)?.map_err(|error| format!("boot refused: {error}"))?;
    let mut old = model.clone();
    if let Err(as_old) = verify(&partition, &report, &mut old) {
        let Some(new) = installed else {
            return Err(as_old);
        };
        let mut new = new.clone();
        verify(&partition, &report, &mut new).map_err(|as_new| {
            format!("neither the old partition ({as_old}) nor the new ({as_new})")
        })?;
        *model = new;
    } else {
        *model = old;
    }
    Ok(partition)
}

/// Opens the partition, crashing and retrying while an injected I/O fault fails the boot itself.
/// The outer error fails the test; the inner one is boot's refusal.
#[allow(clippy::type_complexity, reason = "test helper; named at its two uses")]
fn open_retrying(
    storage: &SimStorage,
    rng: &mut Rng,
) -> Result<Result<(Partition<SimStorage>, iggy_segments::Report), PartitionError>, String> {
    for _ in 0..20 {
        match Partition::open(storage.clone(), dir(), config(), Mode::Open) {
            Ok(Some(opened)) => return Ok(Ok(opened)),
            Ok(None) => return Err("the partition vanished".into()),
            Err(error) => match outcome(&error) {
                Ok(Outcome::Failed) => crash(storage, rng),
                _ => return Ok(Err(error)),
            },
        }
    }
    Err("boot failed 20 times in a row".into())
}

fn verify(
    partition: &Partition<SimStorage>,
    report: &iggy_segments::Report,
    model: &mut Model,
) -> Result<(), String> {
    // Consumer offsets: each the last one stored, or the one whose store failed.
    let found: BTreeMap<(ConsumerKind, u32), u64> = report
        .offsets
        .iter()
        .map(|o| ((o.kind, o.id), o.offset))
        .collect();
    let mut expected = model.offsets.clone();
    if found != expected {
        if let Some((consumer, offset)) = model.offset_in_doubt {
            expected.insert(consumer, offset);
        }
        if found != expected {
            return Err(format!(
                "consumer offsets {found:?}, expected {:?}",
                model.offsets
            ));
        }
    }
    // A store in doubt that landed: the file's other slot holds the offset it replaced.
    for (consumer, offset) in &found {
        if let Some(before) = model.offsets.get(consumer)
            && before != offset
        {
            model.offsets_before.insert(*consumer, *before);
        }
    }
    model.offsets = found;
    model.offset_in_doubt = None;
    let first = partition.first_offset();
    if first > model.deletable_below {
        return Err(format!(
            "first offset {first} is past what retention could delete ({})",
            model.deletable_below
        ));
    }
    let stored = partition
        .read(first, u64::MAX)
        .map_err(|e| format!("read: {e}"))?;
    for pair in stored.windows(2) {
        if pair[0].next_offset() != pair[1].header.base_offset {
            return Err(format!("offset gap at {}", pair[1].header.base_offset));
        }
    }
    let found: BTreeMap<u64, &Vec<u8>> = stored
        .iter()
        .map(|b| (b.header.base_offset, &b.bytes))
        .collect();
    for (offset, bytes) in model.acknowledged.range(first..) {
        if found.get(offset) != Some(&bytes) {
            return Err(format!(
                "acknowledged batch at offset {offset} lost or changed"
            ));
        }
    }
    let acknowledged_end = model.acknowledged_end();
    if partition.next_offset() < acknowledged_end {
        return Err(format!(
            "next offset {} went back past the acknowledged {acknowledged_end}",
            partition.next_offset()
        ));
    }
    // Whatever boot kept is published now (a publication in flight may have landed).
    model.acknowledged = stored
        .into_iter()
        .map(|b| (b.header.base_offset, b.bytes))
        .collect();
    model.pending.clear();
    Ok(())
}

/// Segments as (start offset, bytes), as a leader sends them.
type Segments = Vec<(u64, Vec<u8>)>;

/// A leader's partition, written before faults are on: its segments' bytes and its model.
fn leader(storage: &SimStorage, seed: u64) -> Result<(Segments, Model), String> {
    let at = std::path::Path::new("leader");
    let leader = Partition::create(storage.clone(), at, config()).map_err(|e| e.to_string())?;
    let mut model = Model::default();
    for i in 0..25u64 {
        let mut batch = client_batch(seed * 1000 + 500 + i, 1 + (i % 3) as u32);
        let appended = leader.append(&mut batch, i).map_err(|e| e.to_string())?;
        model.acknowledged.insert(appended.base_offset, batch);
    }
    leader.publish().map_err(|e| e.to_string())?;
    let segments = common::segment_bytes(storage, &leader);
    Ok((segments, model))
}

/// State transfer onto the (closed) partition; any step may fail under the injected faults.
fn install(
    storage: &SimStorage,
    segments: &[(u64, Vec<u8>)],
    next_offset: u64,
) -> Result<(), PartitionError> {
    let mut install = Install::new(storage.clone(), dir(), config());
    for (start, bytes) in segments {
        install.receive_segment(*start, bytes)?;
    }
    install.receive_state(StateArtifact {
        next_offset,
        offsets: Vec::new(),
        dedup: Vec::new(),
    })?;
    install.commit(iggy_superblock::VsrState::default())
}

fn run(seed: u64) -> Result<(), String> {
    let mut rng = Rng::new(seed);
    let storage = SimStorage::new(seed);
    let (leader_segments, leader_model) = leader(&storage, seed)?;
    let leader_next = leader_model.acknowledged_end();
    let mut partition =
        Partition::create(storage.clone(), dir(), config()).map_err(|e| e.to_string())?;
    storage.set_faults(iggy_io::soak::faults());
    let mut model = Model::default();
    let mut failures = 0;
    for step in 0..300u64 {
        let result: Result<(), PartitionError> = match rng.below(100) {
            0..=54 => {
                let mut batch = client_batch(seed * 1000 + step, 1 + rng.below(3) as u32);
                partition.append(&mut batch, step).map(|appended| {
                    model
                        .pending
                        .push((appended.op, appended.base_offset, batch));
                })
            }
            55..=74 => partition.publish().map(|()| {
                let head = partition.wal().published().head_op;
                for (op, offset, bytes) in model.pending.drain(..) {
                    if op <= head {
                        model.acknowledged.insert(offset, bytes);
                    }
                }
            }),
            75..=79 => {
                if let Some(head) = partition.segments().last() {
                    model.deletable_below = model.deletable_below.max(head.start_offset);
                }
                partition.apply_retention(0, None, Some(6000)).map(|_| ())
            }
            80..=85 => {
                drop(partition);
                crash(&storage, &mut rng);
                partition = boot(&storage, &mut rng, &mut model)
                    .map_err(|e| format!("step {step}: {e}"))?;
                Ok(())
            }
            86 => {
                // State transfer: the partition is closed, the leader's content installed, and
                // the process restarts. A committed install must show; a failed one may not.
                drop(partition);
                let committed = install(&storage, &leader_segments, leader_next).is_ok();
                crash(&storage, &mut rng);
                let mut new = leader_model.clone();
                new.deletable_below = 0;
                // The artifact carries no consumer offsets: the new partition has none.
                new.offsets.clear();
                partition = if committed {
                    model = new;
                    boot(&storage, &mut rng, &mut model)
                } else {
                    boot_either(&storage, &mut rng, &mut model, Some(&new))
                }
                .map_err(|e| format!("step {step}: install (committed: {committed}): {e}"))?;
                Ok(())
            }
            87..=90 => {
                let kind = if rng.below(2) == 0 {
                    ConsumerKind::Consumer
                } else {
                    ConsumerKind::Group
                };
                let consumer = (kind, rng.below(3) as u32);
                let offset = rng.below(1000);
                match partition.offsets().store(consumer.0, consumer.1, offset) {
                    Ok(_) => {
                        match model.offsets.insert(consumer, offset) {
                            Some(before) => model.offsets_before.insert(consumer, before),
                            None => model.offsets_before.remove(&consumer),
                        };
                        model.offset_in_doubt = None;
                        Ok(())
                    }
                    Err(OffsetError::Io(error)) => {
                        // Only one store can be in doubt at a time: restart to settle it.
                        model.offset_in_doubt = Some((consumer, offset));
                        drop(partition);
                        crash(&storage, &mut rng);
                        partition = boot(&storage, &mut rng, &mut model).map_err(|e| {
                            format!("step {step}: after a failed store ({error}): {e}")
                        })?;
                        Ok(())
                    }
                    Err(other) => return Err(format!("step {step}: store: {other}")),
                }
            }
            91 => {
                // Bit rot at rest in one file of the partition, then a restart. Boot either
                // refuses (damage in what it must trust) or comes up with every batch intact:
                // never silently different data.
                drop(partition);
                let Some(rotted) = iggy_io::soak::rot_one_file(&storage, dir(), &mut rng) else {
                    return Err(format!("step {step}: nothing to rot"));
                };
                crash(&storage, &mut rng);
                match boot_after_rot(&storage, &mut rng, &mut model, &rotted)
                    .map_err(|e| format!("step {step}: rot in {}: {e}", rotted.display()))?
                {
                    Some(booted) => partition = booted,
                    // Damage refused, as it must be: this partition needs its peers now.
                    None => return Ok(()),
                }
                Ok(())
            }
            _ => partition
                .read(partition.first_offset(), 16 << 10)
                .map(|_| ()),
        };
        if let Err(error) = result {
            match outcome(&error).map_err(|e| format!("step {step}: {e}"))? {
                Outcome::Failed => failures += 1,
                Outcome::Poisoned => {
                    drop(partition);
                    crash(&storage, &mut rng);
                    partition = boot(&storage, &mut rng, &mut model)
                        .map_err(|e| format!("step {step}: {e}"))?;
                }
                Outcome::Ignored => {}
            }
        }
    }
    drop(partition);
    storage.power_loss();
    let partition = boot(&storage, &mut rng, &mut model)?;
    if read_all(&partition).is_empty() && failures == 0 {
        return Err("the run kept nothing".into());
    }
    Ok(())
}

#[test]
fn seeded_faults_and_crashes_never_lose_an_acknowledged_batch() {
    iggy_io::soak::run_seeds(
        "SEGMENTS_SIM",
        16,
        "cargo test -p iggy-segments --test sim_soak",
        run,
    );
}
