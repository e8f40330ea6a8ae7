//! Group commit under 64 concurrent appenders, and faults: a failed sync poisons, a short write is
//! completed, a failed write is never half-trusted.
#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    reason = "test code: a failed unwrap is a failed test; casts are of small test values"
)]

use std::path::Path;
use std::sync::{Arc, Barrier, Mutex};

use iggy_io::{Fault, SimStorage, Storage, TraceOp};
use iggy_wal::{Config, Mode, Wal, WalError};

const GROUP: u128 = 3;

fn config() -> Config {
    Config {
        file_size_bytes: 1 << 20,
        zero_fill: false,
        ..Config::new(GROUP)
    }
}

fn dir() -> &'static Path {
    Path::new("wal")
}

fn frontier_syncs(storage: &SimStorage) -> usize {
    storage
        .trace()
        .iter()
        .filter(|op| matches!(op, TraceOp::SyncData { path, .. } if path.ends_with("frontier")))
        .count()
}

/// Runs `THREADS` appenders for `rounds` rounds, each appending its own record and waiting
/// until it is durable; with `barrier`, every thread appends before any waits.
fn run_appenders(wal: &Arc<Wal<SimStorage>>, rounds: usize, barrier: bool) -> Vec<(u64, Vec<u8>)> {
    const THREADS: usize = 64;
    let acknowledged = Arc::new(Mutex::new(Vec::new()));
    let gate = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|thread| {
            let (wal, acknowledged, gate) = (
                Arc::clone(wal),
                Arc::clone(&acknowledged),
                Arc::clone(&gate),
            );
            std::thread::spawn(move || {
                for round in 0..rounds {
                    let body =
                        format!("thread {thread} round {round} barrier {barrier}").into_bytes();
                    let op = wal.append_body(&body, 1, 0).unwrap();
                    if barrier {
                        gate.wait();
                    }
                    wal.wait_published(op).unwrap();
                    acknowledged.lock().unwrap().push((op, body));
                    if barrier {
                        gate.wait(); // nobody appends the next round before all are durable
                    }
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
    Arc::try_unwrap(acknowledged).unwrap().into_inner().unwrap()
}

/// Group commit: 64 threads each wait on their own record. In lock-step rounds (every record
/// queued before anyone waits) one publication must cover all 64; then the threads run free.
/// Every acknowledged record must be there after a power loss.
#[test]
fn sixty_four_appenders_share_syncs_and_every_acknowledged_record_survives() {
    const ROUNDS: usize = 10;
    let storage = SimStorage::recording(21);
    let wal = Arc::new(Wal::create(storage.clone(), dir(), config(), 1, 0).unwrap());
    let before = frontier_syncs(&storage);
    let mut acknowledged = run_appenders(&wal, ROUNDS, true);
    let lock_step_syncs = frontier_syncs(&storage) - before;
    assert_eq!(acknowledged.len(), 64 * ROUNDS);
    assert_eq!(
        lock_step_syncs, ROUNDS,
        "one publication per round of 64 appends"
    );

    acknowledged.extend(run_appenders(&wal, ROUNDS, false));
    assert_eq!(acknowledged.len(), 2 * 64 * ROUNDS);
    let total_syncs = frontier_syncs(&storage) - before;
    eprintln!("{} appends, {total_syncs} publications", acknowledged.len());
    assert!(
        total_syncs < acknowledged.len(),
        "{total_syncs} publications"
    );

    drop(wal);
    storage.power_loss();
    let (wal, _) = Wal::open(storage, dir(), config(), Mode::Open)
        .unwrap()
        .unwrap();
    for (op, body) in &acknowledged {
        assert_eq!(&wal.read(*op, *op).unwrap()[0].body, body, "op {op}");
    }
}

/// A failed sync poisons the log, in either publication path: the log file's sync when every
/// publication syncs it, the frontier file's when the entries are carried.
#[test]
fn a_failed_sync_poisons_the_log_until_it_is_reopened() {
    for carry in [false, true] {
        let storage = SimStorage::recording(22);
        let config = Config {
            carry_small_publications: carry,
            ..config()
        };
        let wal = Wal::create(storage.clone(), dir(), config.clone(), 1, 0).unwrap();
        wal.append_body(b"durable", 1, 0).unwrap();
        wal.publish().unwrap();
        wal.append_body(b"lost", 1, 0).unwrap();
        let armed = if carry {
            dir().join("frontier")
        } else {
            dir().join(format!("{:020}.wal", 1))
        };
        storage.arm(armed, Fault::SyncError).unwrap();
        assert!(matches!(wal.publish(), Err(WalError::Io(_))));
        assert_eq!(
            wal.published().head_op,
            1,
            "the failed publication did not happen"
        );
        for result in [
            wal.append_body(b"x", 1, 0).map(|_| ()),
            wal.publish().map(|_| ()),
            wal.read(1, 1).map(|_| ()),
            wal.truncate_after(1),
            wal.drop_prefix(1).map(|_| ()),
        ] {
            assert!(
                matches!(result, Err(WalError::Poisoned { .. })),
                "{result:?}"
            );
        }
        drop(wal);
        storage.power_loss();
        let (wal, _) = Wal::open(storage, dir(), config, Mode::Open)
            .unwrap()
            .unwrap();
        assert_eq!(wal.head().0, 1, "carry {carry}");
        assert_eq!(wal.read(1, 1).unwrap()[0].body, b"durable");
    }
}

#[test]
fn a_short_write_is_completed() {
    let storage = SimStorage::recording(23);
    let config = Config {
        flush_bytes: 1,
        ..config()
    };
    let wal = Wal::create(storage.clone(), dir(), config.clone(), 1, 0).unwrap();
    storage
        .arm(dir().join(format!("{:020}.wal", 1)), Fault::ShortWrite(10))
        .unwrap();
    wal.append_body(&[7u8; 3000], 1, 0).unwrap();
    wal.publish().unwrap();
    drop(wal);
    storage.power_loss();
    let (wal, _) = Wal::open(storage, dir(), config, Mode::Open)
        .unwrap()
        .unwrap();
    assert_eq!(wal.read(1, 1).unwrap()[0].body, vec![7u8; 3000]);
}

#[test]
fn a_failed_write_is_reported_and_never_half_trusted() {
    let storage = SimStorage::recording(24);
    let config = Config {
        flush_bytes: 1,
        ..config()
    };
    let wal = Wal::create(storage.clone(), dir(), config.clone(), 1, 0).unwrap();
    wal.append_body(b"one", 1, 0).unwrap();
    wal.publish().unwrap();
    // The next write moves a few bytes, then fails.
    let file = dir().join(format!("{:020}.wal", 1));
    storage.arm(&file, Fault::ShortWrite(100)).unwrap();
    storage.arm(&file, Fault::WriteError).unwrap();
    let error = wal.append_body(&[9u8; 2000], 1, 0).unwrap_err();
    assert!(matches!(error, WalError::Io(_)), "{error}");
    assert!(matches!(wal.publish(), Err(WalError::Poisoned { .. })));
    drop(wal);
    storage.crash_process(); // the 100 bytes stay in the page cache
    let report = iggy_wal::check(&storage, dir(), GROUP).unwrap().unwrap();
    assert_eq!(report.head_op, 1);
    // The 100 bytes are a header that does not verify: discarded as one header's room (boot
    // zeroes the place where the chain stopped, not the file to its last non-zero byte).
    assert_eq!(report.discarded_bytes, 256, "{report:?}");
    let (wal, _) = Wal::open(storage, dir(), config, Mode::Open)
        .unwrap()
        .unwrap();
    assert_eq!(wal.head().0, 1);
    assert_eq!(wal.read(1, 1).unwrap()[0].body, b"one");
}

/// Found by the partition soak (fsyncgate): a publication whose frontier sync fails leaves the
/// new slot in the page cache only, where no later sync writes it. A process crash keeps the
/// page cache, so the next boot reads and trusts that slot. Boot must make what it trusts
/// durable, or a later power loss takes back entries that a booted node already relied on.
#[test]
fn what_a_boot_trusts_survives_a_later_power_loss_even_after_a_failed_frontier_sync() {
    let storage = SimStorage::recording(23);
    let wal = Wal::create(storage.clone(), dir(), config(), 1, 0).unwrap();
    wal.append_body(b"durable", 1, 0).unwrap();
    wal.publish().unwrap();
    wal.append_body(b"published, but its frontier sync failed", 1, 0)
        .unwrap();
    storage
        .arm(dir().join("frontier"), Fault::SyncError)
        .unwrap();
    assert!(wal.publish().is_err());
    drop(wal);
    storage.crash_process();
    let (wal, _) = Wal::open(storage.clone(), dir(), config(), Mode::Open)
        .unwrap()
        .unwrap();
    let trusted = wal.head().0;
    drop(wal);
    storage.power_loss();
    let (wal, _) = Wal::open(storage, dir(), config(), Mode::Open)
        .unwrap()
        .unwrap();
    assert_eq!(
        wal.head().0,
        trusted,
        "a boot trusted entries that were not durable"
    );
}

/// The same with `defer_boot_syncs`: boot writes the trusted slot again without a sync, and the
/// caller's one `sync_filesystem` is what makes it durable. Without that sync, the power loss
/// takes back what the boot trusted (the second half shows the step matters).
#[test]
fn a_deferred_boot_is_durable_once_the_caller_syncs_the_file_system() {
    let deferred = Config {
        defer_boot_syncs: true,
        ..config()
    };
    for caller_syncs in [true, false] {
        let storage = SimStorage::recording(24);
        let wal = Wal::create(storage.clone(), dir(), config(), 1, 0).unwrap();
        wal.append_body(b"durable", 1, 0).unwrap();
        wal.publish().unwrap();
        wal.append_body(b"published, but its frontier sync failed", 1, 0)
            .unwrap();
        storage
            .arm(dir().join("frontier"), Fault::SyncError)
            .unwrap();
        assert!(wal.publish().is_err());
        drop(wal);
        storage.crash_process();
        let (wal, _) = Wal::open(storage.clone(), dir(), deferred.clone(), Mode::Open)
            .unwrap()
            .unwrap();
        let trusted = wal.head().0;
        assert_eq!(trusted, 2, "boot trusts the slot in the page cache");
        assert!(
            !storage.pending_writes().is_empty(),
            "the rewrite of the trusted slot waits for the caller's sync"
        );
        if caller_syncs {
            storage.sync_filesystem().unwrap();
        }
        drop(wal);
        storage.power_loss();
        let (wal, _) = Wal::open(storage, dir(), config(), Mode::Open)
            .unwrap()
            .unwrap();
        if caller_syncs {
            assert_eq!(
                wal.head().0,
                trusted,
                "a boot trusted entries that were not durable"
            );
        } else {
            assert_eq!(
                wal.head().0,
                1,
                "without the caller's sync the rewrite is lost"
            );
        }
    }
}

/// A sync fails while 64 threads append and wait, with leaders going on to publish for others:
/// every call returns (no waiter is left asleep by the failure), an `Ok` from `wait_published`
/// is never taken back (every record acknowledged so survives a power loss, including a leader's
/// own records when a publication it led for others failed), and after the failure the log only
/// refuses.
#[test]
fn a_sync_failing_under_sixty_four_appenders_wakes_everyone_and_keeps_every_acknowledgment() {
    const THREADS: usize = 64;
    for seed in 0..8u64 {
        let storage = SimStorage::recording(100 + seed);
        let wal = Arc::new(Wal::create(storage.clone(), dir(), config(), 1, 0).unwrap());
        let acknowledged = Arc::new(Mutex::new(Vec::new()));
        let refused = Arc::new(Mutex::new(0usize));
        let threads: Vec<_> = (0..THREADS)
            .map(|thread| {
                let (wal, acknowledged, refused, storage) = (
                    Arc::clone(&wal),
                    Arc::clone(&acknowledged),
                    Arc::clone(&refused),
                    storage.clone(),
                );
                std::thread::spawn(move || {
                    for round in 0..40 {
                        if thread == 0 && round == 3 + seed {
                            // Somewhere in the middle of the run (how far the others got
                            // varies).
                            storage
                                .arm(dir().join(format!("{:020}.wal", 1)), Fault::SyncError)
                                .unwrap();
                        }
                        let body =
                            format!("seed {seed} thread {thread} round {round}").into_bytes();
                        let Ok(op) = wal.append_body(&body, 1, 0) else {
                            *refused.lock().unwrap() += 1;
                            return;
                        };
                        match wal.wait_published(op) {
                            Ok(frontier) => {
                                assert!(frontier.head_op >= op);
                                acknowledged.lock().unwrap().push((op, body));
                            }
                            Err(WalError::Io(_) | WalError::Poisoned { .. }) => {
                                *refused.lock().unwrap() += 1;
                                return;
                            }
                            Err(other) => panic!("{other}"),
                        }
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert!(
            *refused.lock().unwrap() > 0,
            "seed {seed}: the failure was seen"
        );
        assert!(matches!(
            wal.append_body(b"after", 1, 0),
            Err(WalError::Poisoned { .. })
        ));
        drop(wal);
        storage.power_loss();
        let (wal, _) = Wal::open(storage, dir(), config(), Mode::Open)
            .unwrap()
            .unwrap();
        for (op, body) in acknowledged.lock().unwrap().iter() {
            assert_eq!(
                &wal.read(*op, *op).unwrap()[0].body,
                body,
                "seed {seed} op {op}"
            );
        }
    }
}
