//! The crash-state enumerator (ALICE-style).
//!
//! Record a workload's operations on a [`SimStorage`] (its [`SimStorage::trace`]), then call
//! [`enumerate`]: it replays the trace one operation at a time and, after every operation (and
//! before the first), builds the crash states the power-loss model allows there and hands each to
//! a check closure, which typically runs the real recovery on it and checks invariants.
//!
//! The states at one crash point are the durable images plus:
//! - every subset of the pending (unsynced) writes crossed with every prefix of the pending
//!   directory operations (every subset of them, with [`DirOrder::Unordered`]), when there are
//!   at most `max_states_per_point` of them; otherwise the four extremes (nothing, everything,
//!   each kind alone) and a seeded sample up to the bound;
//! - `torn_states_per_point` seeded states in which one multi-sector pending write is torn at a
//!   512-byte or 4 KiB boundary.
//!
//! Marks the workload put in the trace ([`SimStorage::mark`]) are passed to the closure, so it
//! knows what the workload had claimed durable before the crash.

use std::fmt;

use rand::Rng;

use crate::sim::{CrashPlan, DirOrder, SimState, SimStorage, TraceOp, WriteFate};
use crate::sim::{FaultConfig, state::SECTOR_SIZES, state::sector_pieces};

/// Bounds of an enumeration.
#[derive(Clone, Debug)]
pub struct EnumerationConfig {
    /// Seeds the sampling where the space is larger than the bounds.
    pub seed: u64,
    /// Most non-torn states checked at one crash point.
    pub max_states_per_point: usize,
    /// Torn-write states checked at one crash point (when a multi-sector write is pending).
    pub torn_states_per_point: usize,
    /// Check only this many crash points, chosen by seed (all when `None`).
    pub max_points: Option<usize>,
    /// Skip every crash point before the first mark with this label (a workload's set-up).
    pub start_at_mark: Option<String>,
    /// Which pending directory operations may survive: a prefix (`Ordered`), or any subset
    /// (`Unordered`, where every `sync_dir` a protocol relies on shows).
    pub dir_order: DirOrder,
}

impl Default for EnumerationConfig {
    fn default() -> Self {
        Self {
            seed: 0,
            max_states_per_point: 64,
            torn_states_per_point: 8,
            max_points: None,
            start_at_mark: None,
            dir_order: DirOrder::Ordered,
        }
    }
}

/// One crash state handed to the check closure.
pub struct CrashState<'a> {
    /// How many trace operations ran before the crash.
    pub point: usize,
    /// The operation just before the crash, if any.
    pub last_op: Option<&'a TraceOp>,
    /// The marks the workload recorded before the crash, in order.
    pub marks: &'a [String],
    /// What survived beyond the durable images.
    pub plan: &'a CrashPlan,
    /// The disk after the power loss, ready for recovery to open.
    pub storage: SimStorage,
}

/// Counts of what an enumeration checked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Enumeration {
    pub points: usize,
    pub states: usize,
    pub torn_states: usize,
}

/// The first crash state the check closure rejected, with what it takes to understand it.
#[derive(Clone, Debug, thiserror::Error)]
pub struct CrashFailure {
    pub point: usize,
    pub last_op: Option<String>,
    pub marks: Vec<String>,
    /// Boxed: every enumeration's `Result` carries this type.
    pub plan: Box<CrashPlan>,
    pub reason: String,
}

impl fmt::Display for CrashFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "crash after {} operations", self.point)?;
        if let Some(op) = &self.last_op {
            write!(f, " (last: {op})")?;
        }
        write!(f, ", plan {}: {}", self.plan, self.reason)?;
        if let Some(mark) = self.marks.last() {
            write!(f, " [last mark: {mark:?}]")?;
        }
        Ok(())
    }
}

/// Runs `check` on every crash state of `trace` (see the module docs).
pub fn enumerate(
    trace: &[TraceOp],
    config: &EnumerationConfig,
    mut check: impl FnMut(&CrashState<'_>) -> Result<(), String>,
) -> Result<Enumeration, CrashFailure> {
    let mut state = SimState::new(config.seed, FaultConfig::default());
    let storage_ops = trace.iter().filter(|op| op.is_storage_op()).count();
    let chosen = choose_points(storage_ops + 1, config, &mut state);
    let mut marks = Vec::new();
    let mut counts = Enumeration::default();
    let mut point = 0usize;
    let mut last_op = None;
    let mut visit =
        |state: &mut SimState, point: usize, last_op: Option<&TraceOp>, marks: &[String]| {
            if !chosen.as_ref().is_none_or(|c| c.contains(&point)) {
                return Ok(());
            }
            if let Some(start) = &config.start_at_mark
                && !marks.iter().any(|m| m == start)
            {
                return Ok(());
            }
            counts.points += 1;
            for (plan, torn) in plans(state, config) {
                counts.states += 1;
                counts.torn_states += usize::from(torn);
                let storage = SimStorage::from_state(state.crash_image(&plan));
                let crash = CrashState {
                    point,
                    last_op,
                    marks,
                    plan: &plan,
                    storage,
                };
                check(&crash).map_err(|reason| CrashFailure {
                    point,
                    last_op: last_op.map(|op| format!("{op:?}")),
                    marks: marks.to_vec(),
                    plan: Box::new(plan.clone()),
                    reason,
                })?;
            }
            Ok(())
        };
    // A crash at point k happens somewhere between operation k and operation k + 1, so every
    // mark recorded in that window is in force: visit each point just before the next operation.
    for op in trace {
        if let TraceOp::Mark(label) = op {
            marks.push(label.clone());
            continue;
        }
        visit(&mut state, point, last_op, &marks)?;
        state.replay(op);
        point += 1;
        last_op = Some(op);
    }
    visit(&mut state, point, last_op, &marks)?;
    Ok(counts)
}

fn choose_points(
    total: usize,
    config: &EnumerationConfig,
    state: &mut SimState,
) -> Option<Vec<usize>> {
    let max = config.max_points?;
    if total <= max {
        return None;
    }
    let mut points: Vec<usize> = (0..total).collect();
    // A seeded partial shuffle; the final point (everything issued) is always checked.
    for index in 0..max.saturating_sub(1) {
        let other = state.rng().random_range(index..total - 1);
        points.swap(index, other);
    }
    points.truncate(max.saturating_sub(1));
    points.push(total - 1);
    Some(points)
}

/// Which pending directory operations survive a plan: the first `kept` entry changes, or the
/// operations `subset` flags.
#[derive(Clone)]
struct DirChoice {
    kept: usize,
    subset: Option<Vec<bool>>,
}

/// The directory side of the crash states at the current point: how many there are, the one
/// numbered `index` (`0..count`, when they can be listed), a seeded one, and the two extremes.
struct DirSpace {
    order: DirOrder,
    operations: usize,
}

impl DirSpace {
    /// How many choices there are (`None`: too many to count).
    fn count(&self) -> Option<usize> {
        match self.order {
            DirOrder::Ordered => Some(self.operations + 1),
            DirOrder::Unordered => u32::try_from(self.operations)
                .ok()
                .and_then(|n| 1usize.checked_shl(n)),
        }
    }

    fn nth(&self, index: usize) -> DirChoice {
        match self.order {
            DirOrder::Ordered => DirChoice {
                kept: index,
                subset: None,
            },
            DirOrder::Unordered => DirChoice {
                kept: 0,
                subset: Some((0..self.operations).map(|i| index >> i & 1 == 1).collect()),
            },
        }
    }

    /// Nothing (`all` false) or everything.
    fn extreme(&self, all: bool) -> DirChoice {
        match self.order {
            DirOrder::Ordered => DirChoice {
                kept: if all { self.operations } else { 0 },
                subset: None,
            },
            DirOrder::Unordered => DirChoice {
                kept: 0,
                subset: Some(vec![all; self.operations]),
            },
        }
    }

    fn random(&self, state: &mut SimState) -> DirChoice {
        match self.order {
            DirOrder::Ordered => DirChoice {
                kept: state.rng().random_range(0..=self.operations),
                subset: None,
            },
            DirOrder::Unordered => DirChoice {
                kept: 0,
                subset: Some(
                    (0..self.operations)
                        .map(|_| state.rng().random_bool(0.5))
                        .collect(),
                ),
            },
        }
    }
}

/// The plans to check at the current point, each flagged whether it tears a write.
fn plans(state: &mut SimState, config: &EnumerationConfig) -> Vec<(CrashPlan, bool)> {
    let writes = state.pending_write_summary();
    let dirs = DirSpace {
        order: config.dir_order,
        operations: state.pending_dir_operations().len(),
    };
    let subset_plan = |mask: &dyn Fn(usize) -> bool, dir: DirChoice| CrashPlan {
        writes: (0..writes.len())
            .map(|i| {
                if mask(i) {
                    WriteFate::Kept
                } else {
                    WriteFate::Lost
                }
            })
            .collect(),
        dir_ops_kept: dir.kept,
        dir_ops_subset: dir.subset,
    };
    let mut plans = Vec::new();
    let exhaustive = u32::try_from(writes.len())
        .ok()
        .and_then(|w| 1usize.checked_shl(w))
        .zip(dirs.count())
        .and_then(|(subsets, dir_choices)| subsets.checked_mul(dir_choices))
        .is_some_and(|total| total <= config.max_states_per_point);
    if exhaustive {
        for mask in 0..1usize << writes.len() {
            for choice in 0..dirs.count().unwrap_or(0) {
                plans.push((
                    subset_plan(&|i| mask >> i & 1 == 1, dirs.nth(choice)),
                    false,
                ));
            }
        }
    } else {
        for (all_writes, all_dirs) in [(false, false), (true, true), (false, true), (true, false)] {
            plans.push((subset_plan(&|_| all_writes, dirs.extreme(all_dirs)), false));
        }
        while plans.len() < config.max_states_per_point {
            let mask: Vec<bool> = writes
                .iter()
                .map(|_| state.rng().random_bool(0.5))
                .collect();
            let choice = dirs.random(state);
            plans.push((subset_plan(&|i| mask[i], choice), false));
        }
    }
    let tearable: Vec<usize> = (0..writes.len())
        .filter(|&i| {
            !writes[i].is_set_len && sector_pieces(writes[i].offset, writes[i].len, 512).len() > 1
        })
        .collect();
    if tearable.is_empty() {
        return plans;
    }
    for _ in 0..config.torn_states_per_point {
        let choice = dirs.random(state);
        let rng = state.rng();
        let target = tearable[rng.random_range(0..tearable.len())];
        let mut sector_bytes = SECTOR_SIZES[rng.random_range(0..SECTOR_SIZES.len())];
        let write = &writes[target];
        if sector_pieces(write.offset, write.len, sector_bytes).len() < 2 {
            sector_bytes = SECTOR_SIZES[0];
        }
        let sectors = sector_pieces(write.offset, write.len, sector_bytes).len();
        // Neither all nor none: at least one sector of each.
        let mut kept: Vec<bool> = (0..sectors).map(|_| rng.random_bool(0.5)).collect();
        let flip = rng.random_range(0..sectors);
        if kept.iter().all(|&k| k) || kept.iter().all(|&k| !k) {
            kept[flip] = !kept[flip];
        }
        let mut plan = CrashPlan {
            writes: (0..writes.len())
                .map(|_| {
                    if rng.random_bool(0.5) {
                        WriteFate::Kept
                    } else {
                        WriteFate::Lost
                    }
                })
                .collect(),
            dir_ops_kept: choice.kept,
            dir_ops_subset: choice.subset,
        };
        plan.writes[target] = WriteFate::Torn { sector_bytes, kept };
        plans.push((plan, true));
    }
    plans
}
