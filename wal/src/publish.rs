//! Group commit: a publication makes the entries appended before it durable, then records
//! the frontier that names them; concurrent callers share one (see [`Wal::wait_published`]).
//! A small publication carries its entries in the frontier file's ring and is one flush
//! (`crate::ring`); the rest sync the log files, then write a frontier slot.

use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use iggy_io::{Storage, WriteFile};

use crate::files::{Pad, mark_dirty, terminator, zeros_ahead};
use crate::frontier::{self, Frontier};
use crate::ring::{self, Carried};
use crate::{CarryRun, Chunk, State, Wal, WalError, poisoned_error};

/// A caller of `wait_published` parked until a publication covers `op`. Each is woken on its
/// own (no herd of every caller on one condition variable: docs/benchmarks.md).
pub(crate) struct Waiter {
    op: u64,
    thread: std::thread::Thread,
    /// Set once, just before the caller is unparked: the publication that covers `op`, or `None`
    /// to look again under the lock (to lead the next publication, or to see a poisoned log or
    /// a truncated head); and other callers the same publication covers, which this one wakes
    /// in turn (see [`wake_covered`]).
    outcome: Arc<OnceLock<Woken>>,
}

/// What a parked caller is woken with (see [`Waiter::outcome`]).
struct Woken {
    published: Option<Frontier>,
    /// Others the same publication covers, for this caller to wake ([`wake_tree`]).
    relay: Mutex<Vec<Waiter>>,
}

impl Waiter {
    fn wake(self, outcome: Option<Frontier>) {
        self.wake_relaying(outcome, Vec::new());
    }

    fn wake_relaying(self, outcome: Option<Frontier>, relay: Vec<Waiter>) {
        // Set at most once: a waiter leaves the list when it is woken.
        let _ = self.outcome.set(Woken {
            published: outcome,
            relay: Mutex::new(relay),
        });
        self.thread.unpark();
    }
}

/// Wakes the callers a publication covers without making the waking thread pay a wake-up for
/// each: it wakes one and hands it the rest, which [`wake_tree`] spreads from there. A leader's
/// next flush then starts after one wake-up, not one per covered caller (64 appenders on tmpfs,
/// where only this path costs: 191k-205k records/s against 150k-162k, docs/benchmarks.md).
fn wake_covered(mut covered: Vec<Waiter>, published: Frontier) {
    if let Some(first) = covered.pop() {
        first.wake_relaying(Some(published), covered);
    }
}

/// A woken caller's share of [`wake_covered`]: it wakes one and hands it half of what it holds,
/// again and again, so the wake-ups spread over the cores the woken callers run on (each caller
/// wakes about log2 of its share).
fn wake_tree(mut covered: Vec<Waiter>, published: Frontier) {
    while let Some(next) = covered.pop() {
        let half = covered.split_off(covered.len() / 2);
        next.wake_relaying(Some(published), half);
    }
}

/// The waiters the published frontier covers, taken out of the queue.
fn take_covered<F>(state: &mut State<F>) -> Vec<Waiter> {
    let head = state.published.head_op;
    let (covered, rest) = std::mem::take(&mut state.waiters)
        .into_iter()
        .partition(|waiter| waiter.op <= head);
    state.waiters = rest;
    covered
}

/// Wakes every waiter to look again under the lock (poisoned log, truncated head).
pub(crate) fn wake_all_to_look_again(waiters: &mut Vec<Waiter>) {
    for waiter in waiters.drain(..) {
        waiter.wake(None);
    }
}

/// Publications a caller of `wait_published` leads for others after its own, while others wait
/// (each one's own waiters are woken during the next one's I/O).
const EXTRA_PUBLICATIONS: usize = 4;

impl<S: Storage> Wal<S> {
    /// Publishes everything appended before this call: makes it durable, then records the new
    /// frontier durably. Concurrent callers share one publication (group commit).
    pub fn publish(&self) -> Result<Frontier, WalError> {
        let head = self.lock().head_op;
        self.wait_published(head)
    }

    /// Publishes everything appended, and syncs the log files with it so that the frontier no
    /// longer relies on the carried ring: the next boot reads the log alone (what a clean
    /// shutdown wants). Two flushes, like any publication too large to carry.
    pub fn publish_synced(&self) -> Result<Frontier, WalError> {
        let mut state = self.lock_idle()?;
        state.carry = None;
        let mut state = self.run_publication(state, Vec::new())?;
        let covered = take_covered(&mut state);
        Ok(self.stop_leading(state, covered))
    }

    /// Ends a leader's run: wakes the callers its last publication covered and, if others still
    /// wait, one of them to lead; returns that publication's frontier.
    fn stop_leading(
        &self,
        mut state: MutexGuard<'_, State<S::File>>,
        covered: Vec<Waiter>,
    ) -> Frontier {
        self.seal_passed(&mut state);
        let next_leader = state.waiters.pop();
        let published = state.published;
        drop(state);
        wake_covered(covered, published);
        if let Some(waiter) = next_leader {
            waiter.wake(None);
        }
        // Callers of `lock_idle` wait for no publication in flight.
        self.published_changed.notify_all();
        published
    }

    /// Returns once a publication covers `op`, publishing if no other caller is (group commit:
    /// waiters arriving during a publication are covered by the next one, which one of them runs).
    /// A caller that publishes goes on to lead up to `EXTRA_PUBLICATIONS` more while others wait
    /// on entries appended meanwhile, so the disk is not idle while a new leader wakes.
    /// An `op` past the head (never appended, or cut by `truncate_after`) is `OutOfRange`.
    pub fn wait_published(&self, op: u64) -> Result<Frontier, WalError> {
        let mut state = self.lock();
        let mut yielded = false;
        loop {
            if let Some(cause) = &state.poisoned {
                return Err(poisoned_error(&self.dir, cause));
            }
            if state.head_op < op {
                // Never appended (or cut by truncate_after): nothing to vouch for.
                let first_op = state.first_op();
                let head_op = state.head_op;
                return Err(WalError::OutOfRange {
                    what: "wait_published",
                    op,
                    first_op,
                    head_op,
                });
            }
            if state.published.head_op >= op {
                let published = state.published;
                if !state.publishing
                    && let Some(next) = state.waiters.pop()
                {
                    // Woken to lead, and found its op published by another caller since: the
                    // rest still need a leader.
                    drop(state);
                    next.wake(None);
                }
                return Ok(published);
            }
            if state.publishing {
                let outcome = Arc::new(OnceLock::new());
                state.waiters.push(Waiter {
                    op,
                    thread: std::thread::current(),
                    outcome: Arc::clone(&outcome),
                });
                drop(state);
                let outcome = loop {
                    // `park` may return spuriously; the outcome is set before the unpark.
                    if let Some(Woken { published, relay }) = outcome.get() {
                        // The others this publication covers, handed to this caller to wake
                        // (`wake_covered`); only a covered caller is handed any.
                        let relay = std::mem::take(
                            &mut *relay.lock().unwrap_or_else(PoisonError::into_inner),
                        );
                        if let Some(published) = published {
                            wake_tree(relay, *published);
                        }
                        break *published;
                    }
                    std::thread::park();
                };
                if let Some(published) = outcome {
                    return Ok(published);
                }
                state = self.lock();
                continue;
            }
            if !yielded {
                // Before leading a publication, let the appenders the last one just released
                // append again, so this one carries a larger group (64 appenders: 44-51k to
                // 53-67k records/s, docs/benchmarks.md). A scheduling hint, not a wait; every
                // check above runs again.
                yielded = true;
                drop(state);
                std::thread::yield_now();
                state = self.lock();
                continue;
            }
            // This publication takes every entry appended so far, `op` among them.
            state = self.run_publication(state, Vec::new())?;
            let mine = state.published;
            let mut extra = 0;
            loop {
                let head = state.published.head_op;
                let covered = take_covered(&mut state);
                if extra < EXTRA_PUBLICATIONS && !state.waiters.is_empty() && state.head_op > head {
                    // Callers sleep on entries appended during that publication: lead theirs
                    // at once, and wake the callers it published while the disk works on this
                    // one (waking dozens of threads costs more than a sync here:
                    // docs/benchmarks.md).
                    match self.run_publication(state, covered) {
                        Ok(next) => state = next,
                        // It failed, poisoned the log and woke every caller; this caller's
                        // entries were published before it.
                        Err(_) => return Ok(mine),
                    }
                    extra += 1;
                    continue;
                }
                // The callers still waiting need a leader: one of them looks again.
                return Ok(self.stop_leading(state, covered));
            }
        }
    }

    /// One publication, with the lock released during its I/O so appends continue.
    ///
    /// `covered` are callers the previous publication covers: they are woken while this one's
    /// I/O is in flight. A publication that succeeds does not wake its own waiters: its caller
    /// does, or the next publication. One that fails wakes everyone.
    fn run_publication<'a>(
        &'a self,
        mut state: MutexGuard<'a, State<S::File>>,
        mut covered: Vec<Waiter>,
    ) -> Result<MutexGuard<'a, State<S::File>>, WalError> {
        state.publishing = true;
        let previous = state.published;
        let chunks = std::mem::take(&mut state.pending);
        state.pending_bytes = 0;
        let mut dirty = std::mem::take(&mut state.dirty);
        for chunk in &chunks {
            mark_dirty(&mut dirty, chunk.first_op, &chunk.file);
        }
        let head = state
            .files
            .last()
            .unwrap_or_else(|| unreachable!("a head file exists"));
        let next = Frontier {
            sequence: state.published.sequence + 1,
            incarnation: self.config.incarnation,
            head_op: state.head_op,
            head_checksum: state.head_checksum,
            head_file: head.first_op,
            published_length: head.end,
            head_file_key: head.key,
            ..state.published
        };
        let since = if previous.head_file == head.first_op {
            previous.published_length
        } else {
            0
        };
        let ending = terminator(head, since, self.config.file_size_bytes);
        // A carried publication writes no zeros ahead (a megabyte of them in the 16th's log
        // sync measured no faster and a longer p999: docs/benchmarks.md), only a stale tail's.
        let carried_pad = ending.map(|pad| (pad, Arc::clone(&head.file)));
        let appended_bytes = state.appended_bytes;
        let (head_first_op, head_end) = (next.head_file, next.published_length);
        let run = state.carry.replace(CarryRun::default());
        let carries = |run: &CarryRun| {
            run.bytes.is_empty()
                || (run.file_first_op == head_first_op
                    && run.offset + run.bytes.len() as u64 == head_end)
        };
        // The records this one needs at boot (those after the last sync) must all be in the
        // ring: at most `PAIRS`, or the pair it takes still holds the only copy of something.
        let unsynced = next.sequence - state.synced_sequence;
        if self.ring_available
            && self.config.carry_small_publications
            && unsynced <= ring::PAIRS as u64
            && let Some(run) = run.filter(carries)
        {
            let record = Carried {
                frontier: next,
                synced_sequence: state.synced_sequence,
                entries: run.bytes,
            };
            // The last one the ring has room for syncs the log alongside its own flush; the
            // others leave the files dirty.
            let sync_log = if unsynced == ring::PAIRS as u64 {
                Some(dirty)
            } else {
                state.dirty = dirty;
                None
            };
            state.padding = carried_pad.is_some();
            drop(state);
            return self.run_carried(
                LogWrites {
                    chunks,
                    pad: carried_pad,
                },
                record,
                sync_log,
                covered,
                previous,
                appended_bytes,
            );
        }
        let head = state
            .files
            .last()
            .unwrap_or_else(|| unreachable!("a head file exists"));
        let pad = zeros_ahead(head, &chunks, self.config.file_size_bytes).or(ending);
        state.padding = pad.is_some();
        drop(state);

        let frontier_bytes = frontier::encode(&next);
        let covered_waiters = !covered.is_empty();
        let mut wake = || wake_covered(std::mem::take(&mut covered), previous);
        let result = (|| {
            // The entries must be durable before the frontier that names them is written. Each
            // dirty file's last write goes out with its sync; the last file's also carries the
            // frontier's write and sync (one io_uring chain where the kernel allows it).
            for (index, (first_op, file)) in dirty.iter().enumerate() {
                let mine: Vec<&Chunk<S::File>> = chunks
                    .iter()
                    .filter(|chunk| chunk.first_op == *first_op)
                    .collect();
                let (last, before) = match mine.split_last() {
                    Some((last, before)) => ((last.offset, last.bytes.as_slice()), before),
                    // Flushed earlier without a sync: the sync alone.
                    None => ((0, &[][..]), &[][..]),
                };
                for chunk in before {
                    file.write_all_at(chunk.offset, &chunk.bytes)?;
                }
                if let Some(pad) = pad.filter(|pad| pad.first_op == *first_op) {
                    // Zeros past the entries, synced with them: the next publications write
                    // into written blocks.
                    file.write_zeros(pad.from, pad.to - pad.from)?;
                }
                if index + 1 < dirty.len() {
                    if last.1.is_empty() {
                        file.sync_data()?;
                    } else {
                        file.write_all_and_sync_data(last.0, last.1)?;
                    }
                } else if covered_waiters {
                    // The publication exists once this returns: nothing is acknowledged
                    // before it. Waking the callers the previous publication covered overlaps
                    // this chain's I/O.
                    file.write_sync_then_write_sync(
                        last.0,
                        last.1,
                        self.frontier_file()?,
                        next.offset(),
                        &frontier_bytes,
                        &mut wake,
                    )?;
                } else {
                    // Nothing to do while the I/O runs: the same four steps as system calls,
                    // which skip the hand-offs to io_uring's workers.
                    file.write_all_at(last.0, last.1)?;
                    file.sync_data()?;
                    let frontier = self.frontier_file()?;
                    frontier.write_all_at(next.offset(), &frontier_bytes)?;
                    frontier.sync_data()?;
                }
            }
            if dirty.is_empty() {
                self.frontier_file()?
                    .write_all_and_sync_data(next.offset(), &frontier_bytes)?;
            }
            Ok::<_, iggy_io::Error>(())
        })();
        // Where no chain ran: nothing written since the last publication, or a write failed
        // before the chain.
        wake();

        let mut state = self.lock();
        state.publishing = false;
        state.padding = false;
        let outcome = match result {
            Ok(()) => {
                if let Some(pad) = pad
                    && let Some(file) = state.files.iter_mut().find(|f| f.first_op == pad.first_op)
                {
                    file.prepared = file.prepared.max(pad.to);
                }
                state.published = next;
                state.published_bytes = appended_bytes;
                // Every file written before it was synced: the ring's older records are no
                // longer the only copy of anything.
                state.synced_sequence = next.sequence;
                Ok(())
            }
            Err(error) => {
                let error = WalError::from(error);
                self.poison(&mut state, &error);
                // Callers of `lock_idle`; the poison woke every waiter.
                self.published_changed.notify_all();
                Err(error)
            }
        };
        outcome.map(|()| state)
    }

    /// A publication whose entries travel in its ring records: the log's copy is written but
    /// not synced, and both records go out in one flush of the frontier file. At most
    /// [`ring::PAIRS`] publications since the log was last synced (checked by the caller), so
    /// the pair it overwrites holds nothing that exists only there. With `sync_log` (the last
    /// publication the ring has room for), those files and this one's are synced too, on a
    /// second thread while the frontier's flush is in flight (the device takes both at once),
    /// and every entry through this publication is then durable in the log.
    fn run_carried<'a>(
        &'a self,
        writes: LogWrites<S::File>,
        record: Carried,
        sync_log: Option<Vec<(u64, Arc<S::File>)>>,
        mut covered: Vec<Waiter>,
        previous: Frontier,
        appended_bytes: u64,
    ) -> Result<MutexGuard<'a, State<S::File>>, WalError> {
        let LogWrites { chunks, pad } = writes;
        let [first, second] = ring::records_of(record.frontier.sequence);
        let syncs_log = sync_log.is_some();
        let mut sync_log = sync_log.unwrap_or_default();
        if syncs_log {
            for chunk in &chunks {
                mark_dirty(&mut sync_log, chunk.first_op, &chunk.file);
            }
        }
        let result = (|| {
            for chunk in &chunks {
                chunk.file.write_all_at(chunk.offset, &chunk.bytes)?;
            }
            if let Some((pad, file)) = &pad {
                // A stale tail: zeros after the entries (synced with them by the 16th).
                file.write_zeros(pad.from, pad.to - pad.from)?;
            }
            wake_covered(std::mem::take(&mut covered), previous);
            let frontier = self.frontier_file()?;
            frontier.write_all_at(ring::offset(first), &ring::encode(&record, first))?;
            frontier.write_all_at(ring::offset(second), &ring::encode(&record, second))?;
            // Both copies in one flush: the publication exists once it returns, and nothing is
            // acknowledged before. Plain system calls: two page-cache writes and one flush gain
            // nothing from a linked chain, and handing them to io_uring's workers costs a
            // thread wake-up on every publication (p50 68-72 us against 85-89 us, single
            // records, `iggy-bench wal --batch 1 --io syscalls|uring`).
            if !syncs_log {
                return frontier.sync_data();
            }
            std::thread::scope(|scope| {
                // Every entry of this publication and the ones before it was written above or
                // earlier: this sync makes them all durable in the log.
                let log =
                    scope.spawn(|| sync_log.iter().try_for_each(|(_, file)| file.sync_data()));
                let ring = frontier.sync_data();
                let log = log
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
                ring.and(log)
            })
        })();
        wake_covered(std::mem::take(&mut covered), previous);
        let mut state = self.lock();
        state.publishing = false;
        state.padding = false;
        match result {
            Ok(()) => {
                if let Some((pad, _)) = &pad
                    && let Some(file) = state.files.iter_mut().find(|f| f.first_op == pad.first_op)
                {
                    file.prepared = file.prepared.max(pad.to);
                }
                if syncs_log {
                    state.synced_sequence = record.frontier.sequence;
                } else {
                    for chunk in &chunks {
                        mark_dirty(&mut state.dirty, chunk.first_op, &chunk.file);
                    }
                }
                state.published = record.frontier;
                state.published_bytes = appended_bytes;
                state.ring_written |= (1 << first) | (1 << second);
                Ok(state)
            }
            Err(error) => {
                let error = WalError::from(error);
                self.poison(&mut state, &error);
                self.published_changed.notify_all();
                Err(error)
            }
        }
    }
}

/// What a carried publication writes to the log files (unsynced, but for the 16th): its entries,
/// and the zeros ending a stale tail past them.
struct LogWrites<F> {
    chunks: Vec<Chunk<F>>,
    pad: Option<(Pad, Arc<F>)>,
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::{Arc, OnceLock};

    use super::{Waiter, Woken, wake_covered, wake_tree};
    use crate::boot::FRONTIER_FILE;
    use crate::frontier::Frontier;
    use crate::{Config, Wal, carried, frontier};

    /// The callers a publication covers are each woken once, with that publication, though the
    /// thread that covered them wakes only one: the rest are relayed by the woken (each woken
    /// caller's relay is run here as its thread would run it after `park`). A relay that dropped
    /// its share would leave callers asleep for good.
    #[test]
    fn covered_callers_are_woken_once_each_through_the_relay() {
        for callers in [0usize, 1, 2, 3, 64, 100] {
            let published = Frontier {
                sequence: 9,
                generation: 1,
                group: 7,
                incarnation: 1,
                head_op: 500,
                head_checksum: 5,
                head_file: 1,
                published_length: 4096,
                head_file_key: 1,
            };
            let outcomes: Vec<_> = (0..callers).map(|_| Arc::new(OnceLock::new())).collect();
            let waiters = outcomes
                .iter()
                .enumerate()
                .map(|(op, outcome)| Waiter {
                    op: op as u64,
                    thread: std::thread::current(),
                    outcome: Arc::clone(outcome),
                })
                .collect();
            wake_covered(waiters, published);
            let woken = |outcomes: &[Arc<OnceLock<Woken>>]| {
                outcomes
                    .iter()
                    .filter(|outcome| outcome.get().is_some())
                    .count()
            };
            assert_eq!(
                woken(&outcomes),
                callers.min(1),
                "the waking thread wakes one"
            );
            let mut relayed = vec![false; callers];
            while let Some(index) =
                (0..callers).find(|&index| !relayed[index] && outcomes[index].get().is_some())
            {
                relayed[index] = true;
                let woken = outcomes[index].get().expect("woken");
                assert_eq!(woken.published, Some(published), "caller {index}");
                wake_tree(
                    std::mem::take(&mut *woken.relay.lock().expect("relay")),
                    published,
                );
            }
            assert_eq!(woken(&outcomes), callers, "{callers} callers, all woken");
            for (index, outcome) in outcomes.iter().enumerate() {
                let woken = outcome.get().expect("woken");
                assert!(
                    woken.relay.lock().expect("relay").is_empty(),
                    "caller {index}"
                );
            }
        }
    }

    /// A publication with nothing written since the last one (no public call reaches this
    /// today, the branch is defensive) makes its frontier durable when it returns, through the
    /// ring (zero entries carried) and through a slot when publications do not carry.
    #[test]
    fn a_publication_with_nothing_written_makes_its_frontier_durable() {
        for slots_only in [false, true] {
            let storage = iggy_io::SimStorage::new(1);
            let dir = Path::new("wal");
            let config = Config {
                carry_small_publications: !slots_only,
                ..Config::new(7)
            };
            let wal = Wal::create(storage.clone(), dir, config, 1, 0).expect("create");
            let before = wal.published();
            let state = wal
                .run_publication(wal.lock(), Vec::new())
                .expect("publish");
            let after = state.published;
            drop(state);
            assert_eq!(after.sequence, before.sequence + 1);
            drop(wal);
            storage.power_loss_durable_only();
            let bytes = storage.read_all(dir.join(FRONTIER_FILE)).expect("frontier");
            let slots = frontier::decode_file(&bytes);
            if slots_only {
                assert_eq!(slots[after.slot()], Ok(after), "the publication is durable");
            } else {
                let file = iggy_io::ReadStorage::open_read(&storage, dir.join(FRONTIER_FILE))
                    .expect("open");
                let ring = carried::read_ring(&file).expect("ring");
                let (chosen, needed) =
                    carried::choose(Path::new("f"), before, &ring, &mut Vec::new())
                        .expect("choose");
                assert_eq!(chosen, after, "the publication is durable in the ring");
                assert_eq!(needed.len(), 1);
            }
        }
    }
}
