//! Single faults boot to the latest state and name the bad copy; two faults refuse; each refusal
//! has its own error.

#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    reason = "test code: a failed unwrap is a failed test; casts are of small test values"
)]

mod common;

use std::path::Path;

use common::{ID, dir, raw_write, states};
use iggy_io::{Fault, ReadOnly, ReadStorage, SimStorage, Storage};
use iggy_superblock::copy::{self, COPY_SIZE, Record, Slot};
use iggy_superblock::{
    CopyError, Damage, Identity, Opened, RepairPolicy, RepairReason, Superblock, SuperblockError,
    VsrState, read,
};

/// A superblock after `updates` updates, with the states it went through.
fn setup(updates: usize) -> (SimStorage, Superblock<SimStorage>, Vec<VsrState>) {
    let states = states(7, updates + 1);
    let storage = SimStorage::new(3);
    let mut superblock = Superblock::create(storage.clone(), dir(), ID, states[0]).expect("create");
    for state in &states[1..] {
        superblock.write(*state).expect("write");
    }
    (storage, superblock, states)
}

fn superblock_bytes(storage: &SimStorage) -> Vec<u8> {
    storage.read_all(dir().join("superblock")).expect("read")
}

#[test]
fn any_single_rotten_byte_boots_to_the_latest_state_and_names_the_copy() {
    for updates in [0usize, 1, 6] {
        let (storage, superblock, states) = setup(updates);
        let latest = *superblock.record();
        for offset in 0..copy::FILE_SIZE {
            for mask in [0x01u8, 0xFF] {
                let damaged = storage.fork();
                damaged.rot(dir().join("superblock"), offset, mask).unwrap();
                let slot = if offset < COPY_SIZE as u64 {
                    Slot::A
                } else {
                    Slot::B
                };
                match read(&damaged, dir(), &ID) {
                    Ok(Opened::Present {
                        record, repairs, ..
                    }) => {
                        assert_eq!(record, latest, "offset {offset}");
                        assert_eq!(record.state, states[updates]);
                        assert_eq!(repairs.len(), 1, "offset {offset}");
                        assert_eq!(repairs[0].slot, slot, "offset {offset}");
                        assert!(matches!(repairs[0].reason, RepairReason::Damaged(_)));
                    }
                    other => panic!("updates {updates}, offset {offset}, mask {mask}: {other:?}"),
                }
            }
        }
    }
}

#[test]
fn repair_rewrites_the_bad_copy_and_report_only_leaves_the_file_alone() {
    let (storage, superblock, _) = setup(3);
    let latest = *superblock.record();
    storage
        .rot(dir().join("superblock"), 4096 + 200, 0x40)
        .unwrap();
    let before = superblock_bytes(&storage);

    let (_, repairs) = Superblock::open(storage.clone(), dir(), &ID, RepairPolicy::ReportOnly)
        .unwrap()
        .unwrap();
    assert_eq!(repairs.len(), 1);
    assert_eq!(
        superblock_bytes(&storage),
        before,
        "report-only wrote nothing"
    );

    let (reopened, repairs) = Superblock::open(storage.clone(), dir(), &ID, RepairPolicy::Repair)
        .unwrap()
        .unwrap();
    assert_eq!(repairs[0].slot, Slot::B);
    assert_eq!(*reopened.record(), latest);
    assert_eq!(
        &superblock_bytes(&storage)[4096..],
        &copy::encode(&latest, Slot::B)[..]
    );
    storage.power_loss();
    match read(&storage, dir(), &ID).unwrap() {
        Opened::Present {
            record, repairs, ..
        } => {
            assert_eq!(record, latest);
            assert!(repairs.is_empty(), "the repair was durable: {repairs:?}");
        }
        Opened::Fresh => panic!("fresh"),
    }
}

#[test]
fn a_crash_between_the_two_copies_uses_the_newer_and_reports_the_stale_one() {
    let (storage, superblock, _) = setup(2);
    let old = *superblock.record();
    let new = Record {
        sequence: old.sequence + 1,
        parent: superblock.checksum(),
        identity: old.identity,
        state: VsrState {
            view: old.state.view + 1,
            ..old.state
        },
    };
    raw_write(&storage, 0, &copy::encode(&new, Slot::A));
    match read(&storage, dir(), &ID).unwrap() {
        Opened::Present {
            record, repairs, ..
        } => {
            assert_eq!(record, new);
            assert_eq!(repairs[0].slot, Slot::B);
            assert_eq!(
                repairs[0].reason,
                RepairReason::Stale {
                    sequence: old.sequence
                }
            );
        }
        Opened::Fresh => panic!("fresh"),
    }
}

#[test]
fn two_rotten_copies_refuse() {
    let (storage, _, _) = setup(4);
    storage.rot(dir().join("superblock"), 100, 0x01).unwrap();
    storage
        .rot(dir().join("superblock"), 4096 + 3000, 0x01)
        .unwrap();
    let error = read(&storage, dir(), &ID).unwrap_err();
    assert!(
        matches!(error, SuperblockError::BothInvalid { .. }),
        "{error}"
    );
    assert!(
        error.to_string().contains("offset 4096"),
        "names both copies: {error}"
    );
}

#[test]
fn a_rotten_copy_plus_a_torn_update_of_the_other_refuses_rather_than_going_back() {
    let (storage, superblock, _) = setup(4);
    let old = *superblock.record();
    storage
        .rot(dir().join("superblock"), 4096 + 60, 0x08)
        .unwrap();
    let new = Record {
        sequence: old.sequence + 1,
        parent: superblock.checksum(),
        identity: old.identity,
        state: VsrState {
            commit_max: old.state.commit_max + 1,
            ..old.state
        },
    };
    let new_a = copy::encode(&new, Slot::A);

    // Torn at a sector boundary: every field lives in the first sector and the rest of a copy is
    // zero in both records, so copy A is wholly new (or wholly old): boot takes it, and never a
    // state older than the last acknowledged one.
    let sector_torn = storage.fork();
    raw_write(&sector_torn, 0, &new_a[..512]);
    match read(&sector_torn, dir(), &ID).unwrap() {
        Opened::Present { record, .. } => assert_eq!(record, new),
        Opened::Fresh => panic!("fresh"),
    }

    // Torn inside the sector (a device without atomic sector writes): copy A is damaged too.
    raw_write(&storage, 0, &new_a[..100]);
    let error = read(&storage, dir(), &ID).unwrap_err();
    assert!(
        matches!(error, SuperblockError::BothInvalid { .. }),
        "{error}"
    );
}

fn with_copies(a: &[u8], b: &[u8]) -> SimStorage {
    let (storage, _, _) = setup(0);
    raw_write(&storage, 0, a);
    raw_write(&storage, COPY_SIZE as u64, b);
    storage
}

fn record(sequence: u64, parent: u128, view: u32) -> Record {
    Record {
        sequence,
        parent,
        identity: ID,
        state: VsrState {
            view,
            log_view: view,
            commit_max: 10,
            ..VsrState::default()
        },
    }
}

#[test]
fn a_fork_refuses() {
    let a = record(5, 1, 2);
    let b = record(5, 1, 3);
    let storage = with_copies(&copy::encode(&a, Slot::A), &copy::encode(&b, Slot::B));
    let error = read(&storage, dir(), &ID).unwrap_err();
    assert!(
        matches!(error, SuperblockError::Fork { sequence: 5, .. }),
        "{error}"
    );
}

#[test]
fn a_sequence_gap_refuses() {
    let older = record(3, 1, 2);
    let newer = record(5, copy::record_checksum(&older), 2);
    let storage = with_copies(
        &copy::encode(&newer, Slot::A),
        &copy::encode(&older, Slot::B),
    );
    let error = read(&storage, dir(), &ID).unwrap_err();
    assert!(
        matches!(
            error,
            SuperblockError::SequenceGap {
                sequence_a: 5,
                sequence_b: 3,
                ..
            }
        ),
        "{error}"
    );
}

#[test]
fn a_broken_parent_link_refuses() {
    let older = record(4, 1, 2);
    let newer = record(5, copy::record_checksum(&older) ^ 1, 2);
    let storage = with_copies(
        &copy::encode(&newer, Slot::A),
        &copy::encode(&older, Slot::B),
    );
    let error = read(&storage, dir(), &ID).unwrap_err();
    assert!(
        matches!(error, SuperblockError::ParentMismatch { sequence: 5, .. }),
        "{error}"
    );
}

#[test]
fn a_view_going_backwards_between_linked_copies_refuses() {
    let older = record(4, 1, 9);
    let newer = record(5, copy::record_checksum(&older), 8);
    let storage = with_copies(
        &copy::encode(&newer, Slot::A),
        &copy::encode(&older, Slot::B),
    );
    let error = read(&storage, dir(), &ID).unwrap_err();
    assert!(
        matches!(error, SuperblockError::NotMonotonic { field: "view", .. }),
        "{error}"
    );
}

#[test]
fn an_identity_mismatch_refuses() {
    let (storage, _, _) = setup(1);
    for (expected, field) in [
        (
            Identity {
                cluster: 0xC2,
                ..ID
            },
            "cluster",
        ),
        (Identity { replica: 2, ..ID }, "replica"),
        (
            Identity {
                replica_count: 5,
                ..ID
            },
            "replica_count",
        ),
    ] {
        let error = read(&storage, dir(), &expected).unwrap_err();
        assert!(
            matches!(&error, SuperblockError::IdentityMismatch { field: f, .. } if *f == field),
            "{error}"
        );
    }
    let other = Record {
        identity: Identity { replica: 0, ..ID },
        ..record(4, 1, 2)
    };
    let mine = record(5, copy::record_checksum(&other), 2);
    let storage = with_copies(
        &copy::encode(&mine, Slot::A),
        &copy::encode(&other, Slot::B),
    );
    let error = read(&storage, dir(), &ID).unwrap_err();
    assert!(
        matches!(error, SuperblockError::CopiesDisagree { .. }),
        "{error}"
    );
}

#[test]
fn log_view_above_view_on_disk_refuses() {
    let mut bad = record(2, 1, 3);
    bad.state.log_view = 4;
    let storage = with_copies(&copy::encode(&bad, Slot::A), &copy::encode(&bad, Slot::B));
    let error = read(&storage, dir(), &ID).unwrap_err();
    assert!(
        matches!(
            error,
            SuperblockError::InvariantBroken {
                reason: "log_view > view",
                ..
            }
        ),
        "{error}"
    );
}

#[test]
fn an_unknown_version_refuses_even_beside_a_valid_copy() {
    let good = record(2, 1, 3);
    let future = copy::encode_with_version(&good, Slot::A, 3);
    let storage = with_copies(&future, &copy::encode(&good, Slot::B));
    let error = read(&storage, dir(), &ID).unwrap_err();
    assert!(
        matches!(
            error,
            SuperblockError::UnknownVersion {
                version: 3,
                slot: Slot::A,
                ..
            }
        ),
        "{error}"
    );
}

#[test]
fn fresh_only_when_nothing_of_the_group_exists() {
    let storage = SimStorage::new(1);
    assert_eq!(
        read(&storage, dir(), &ID).unwrap(),
        Opened::Fresh,
        "no directory"
    );
    storage.create_dir("g").unwrap();
    assert_eq!(
        read(&storage, dir(), &ID).unwrap(),
        Opened::Fresh,
        "empty directory"
    );
    storage
        .open("g/superblock.tmp", iggy_io::OpenMode::CreateNew)
        .unwrap();
    assert_eq!(
        read(&storage, dir(), &ID).unwrap(),
        Opened::Fresh,
        "an interrupted create"
    );
    Superblock::create(storage.clone(), dir(), ID, VsrState::default()).unwrap();
    assert!(!storage.exists("g/superblock.tmp").unwrap());
    let error = Superblock::create(storage.clone(), dir(), ID, VsrState::default()).unwrap_err();
    assert!(
        matches!(error, SuperblockError::AlreadyExists { .. }),
        "{error}"
    );

    storage.unlink("g/superblock").unwrap();
    storage.open("g/wal", iggy_io::OpenMode::CreateNew).unwrap();
    let error = read(&storage, dir(), &ID).unwrap_err();
    assert!(matches!(&error, SuperblockError::StateLost { files, .. } if files == &["wal"]));
}

#[test]
fn a_failed_sync_poisons_and_the_state_does_not_advance() {
    let (storage, mut superblock, states) = setup(2);
    let next = VsrState {
        view: states[2].view + 1,
        ..states[2]
    };
    storage
        .arm(dir().join("superblock"), Fault::SyncError)
        .unwrap();
    let error = superblock.write(next).unwrap_err();
    assert!(matches!(error, SuperblockError::Io(_)), "{error}");
    assert_eq!(
        *superblock.state(),
        states[2],
        "the caller may not act on the new state"
    );
    let error = superblock.write(next).unwrap_err();
    assert!(matches!(error, SuperblockError::Poisoned { .. }), "{error}");
    storage.power_loss();
    let (reopened, _) = Superblock::open(storage.clone(), dir(), &ID, RepairPolicy::Repair)
        .unwrap()
        .unwrap();
    assert_eq!(*reopened.state(), states[2]);
}

#[test]
#[should_panic(expected = "log_view 3 > view 2")]
fn writing_log_view_above_view_panics() {
    let (_, mut superblock, _) = setup(0);
    superblock
        .write(VsrState {
            view: 2,
            log_view: 3,
            ..VsrState::default()
        })
        .unwrap();
}

#[test]
#[should_panic(expected = "moves commit_max back")]
fn writing_commit_max_backwards_panics() {
    let (_, mut superblock, _) = setup(0);
    superblock
        .write(VsrState {
            commit_max: 5,
            ..VsrState::default()
        })
        .unwrap();
    superblock
        .write(VsrState {
            commit_max: 4,
            ..VsrState::default()
        })
        .unwrap();
}

#[test]
fn only_state_transfer_may_move_the_checkpoint_back() {
    let (storage, mut superblock, _) = setup(0);
    let ahead = VsrState {
        commit_max: 100,
        checkpoint_op: 90,
        ..VsrState::default()
    };
    superblock.write(ahead).unwrap();
    let behind = VsrState {
        checkpoint_op: 50,
        ..ahead
    };
    let refused = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        superblock.write(behind).is_ok()
    }));
    assert!(
        refused.is_err(),
        "write() must not move the checkpoint back"
    );
    let (mut superblock, _) = Superblock::open(storage.clone(), dir(), &ID, RepairPolicy::Repair)
        .unwrap()
        .unwrap();
    superblock.write_state_transfer(behind).unwrap();
    match read(&ReadOnly::new(storage), dir(), &ID).unwrap() {
        Opened::Present { record, .. } => assert_eq!(record.state.checkpoint_op, 50),
        Opened::Fresh => panic!("fresh"),
    }
}

#[test]
fn a_short_file_reports_the_missing_copy() {
    let (storage, superblock, _) = setup(1);
    let file = storage
        .open(Path::new("g/superblock"), iggy_io::OpenMode::Existing)
        .unwrap();
    iggy_io::WriteFile::set_len(&file, 4096).unwrap();
    match read(&storage, dir(), &ID).unwrap() {
        Opened::Present {
            record, repairs, ..
        } => {
            assert_eq!(record, *superblock.record());
            assert_eq!(repairs[0].reason, RepairReason::Damaged(Damage::Missing));
        }
        Opened::Fresh => panic!("fresh"),
    }
    let _ = CopyError::Damaged(Damage::Missing);
}

/// Found by the partition soak (fsyncgate): an update whose copy B sync failed leaves copy B in
/// the page cache only, where no later sync writes it. After a process crash both copies read
/// as the new record, so nothing looks stale; `open(Repair)` must still make them durable, or a
/// later update plus a power loss leaves copies two sequences apart (a refusal).
#[test]
fn open_makes_a_copy_that_is_in_the_page_cache_only_durable() {
    let (storage, superblock, states) = setup(2);
    let next = Record {
        sequence: superblock.record().sequence + 1,
        parent: superblock.checksum(),
        identity: superblock.record().identity,
        state: VsrState {
            commit_max: states.last().unwrap().commit_max + 1,
            ..*states.last().unwrap()
        },
    };
    drop(superblock);
    // Copy A durable; copy B written but never synced (its sync failed).
    raw_write(&storage, Slot::A.offset(), &copy::encode(&next, Slot::A));
    let file = storage
        .open(dir().join("superblock"), iggy_io::OpenMode::Existing)
        .unwrap();
    iggy_io::WriteFile::write_all_at(&file, Slot::B.offset(), &copy::encode(&next, Slot::B))
        .unwrap();
    storage
        .arm(dir().join("superblock"), Fault::SyncError)
        .unwrap();
    assert!(iggy_io::WriteFile::sync_data(&file).is_err());
    drop(file);
    storage.crash_process();
    let (opened, repairs) = Superblock::open(storage.clone(), dir(), &ID, RepairPolicy::Repair)
        .unwrap()
        .unwrap();
    assert!(repairs.is_empty(), "both copies read as the new record");
    assert_eq!(opened.record().sequence, next.sequence);
    drop(opened);
    storage.power_loss();
    match read(&storage, dir(), &ID).unwrap() {
        Opened::Present {
            record, repairs, ..
        } => {
            assert_eq!(record.sequence, next.sequence);
            assert!(
                repairs.is_empty(),
                "copy B was not made durable: {repairs:?}"
            );
        }
        Opened::Fresh => panic!("fresh"),
    }
}

/// A `superblock.tmp` left by a creation (beside a superblock, or alone in a group that never
/// got one) is removed by the open that repairs, durably: a power loss right after does not
/// bring it back for the next boot to report again.
#[test]
fn a_leftover_temp_the_repairing_open_removed_stays_removed() {
    for with_superblock in [true, false] {
        let storage = SimStorage::new(9);
        if with_superblock {
            drop(Superblock::create(storage.clone(), dir(), ID, VsrState::default()).unwrap());
        } else {
            storage.create_dir(dir()).unwrap();
            storage.sync_dir("").unwrap();
        }
        let temp = dir().join(iggy_superblock::TEMP_FILE_NAME);
        let file = storage.open(&temp, iggy_io::OpenMode::CreateNew).unwrap();
        iggy_io::WriteFile::write_all_and_sync_data(&file, 0, b"half a superblock").unwrap();
        storage.sync_dir(dir()).unwrap();
        assert_eq!(
            iggy_superblock::leftover_temp(&storage, dir()).unwrap(),
            Some(temp.clone())
        );
        let opened = Superblock::open(storage.clone(), dir(), &ID, RepairPolicy::Repair).unwrap();
        assert_eq!(opened.is_some(), with_superblock);
        storage.power_loss_durable_only();
        assert_eq!(
            iggy_superblock::leftover_temp(&storage, dir()).unwrap(),
            None
        );
        // Reporting only leaves it.
        let file = storage.open(&temp, iggy_io::OpenMode::CreateNew).unwrap();
        drop(file);
        drop(Superblock::open(storage.clone(), dir(), &ID, RepairPolicy::ReportOnly).unwrap());
        assert!(storage.exists(&temp).unwrap());
    }
}
