//! Property tests of the copy codec: every valid record round-trips through both slots.

#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    reason = "test code: a failed unwrap is a failed test; casts are of small test values"
)]

use iggy_superblock::copy::{self, Identity, Record, Slot, VsrState};
use proptest::prelude::*;

fn any_record() -> impl Strategy<Value = Record> {
    (
        (1u64.., any::<u128>(), any::<u128>(), 1u8..=255),
        (
            any::<u32>(),
            any::<u64>(),
            any::<u128>(),
            any::<u64>(),
            any::<u64>(),
        ),
    )
        .prop_flat_map(|((sequence, parent, cluster, replica_count), rest)| {
            (
                Just((sequence, parent, cluster, replica_count)),
                0..replica_count,
                Just(rest),
            )
        })
        .prop_flat_map(
            |(ids, replica, (view, commit_max, checkpoint_checksum, offset, inc))| {
                (
                    Just(ids),
                    Just(replica),
                    Just(view),
                    0..=view,
                    Just(commit_max),
                    0..=commit_max,
                )
                    .prop_map(
                        move |(ids, replica, view, log_view, commit_max, checkpoint_op)| {
                            let (sequence, parent, cluster, replica_count) = ids;
                            Record {
                                sequence,
                                parent,
                                identity: Identity {
                                    cluster,
                                    replica,
                                    replica_count,
                                },
                                state: VsrState {
                                    view,
                                    log_view,
                                    commit_max,
                                    checkpoint_op,
                                    checkpoint_checksum,
                                    offset_frontier: offset,
                                    incarnation: inc,
                                    ack_bound: offset ^ inc,
                                },
                            }
                        },
                    )
            },
        )
}

proptest! {
    #[test]
    fn encode_then_decode_is_identity(record in any_record()) {
        for slot in Slot::ALL {
            let bytes = copy::encode(&record, slot);
            let (decoded, sum) = copy::decode(&bytes, slot).unwrap();
            prop_assert_eq!(decoded, record);
            prop_assert_eq!(sum, copy::record_checksum(&record));
        }
    }

    #[test]
    fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..5000)) {
        let _ = copy::decode(&bytes, Slot::A);
    }
}

/// The words `iggy-fsck` and `iggy-inspect` print for a repair name the copy and why.
#[test]
fn repairs_and_slots_are_named_in_words() {
    use iggy_superblock::{CopyRepair, RepairReason, copy::Damage};
    assert_eq!(Slot::A.to_string(), "A");
    assert_eq!(Slot::B.to_string(), "B");
    let stale = CopyRepair {
        slot: Slot::B,
        reason: RepairReason::Stale { sequence: 4 },
    };
    assert_eq!(stale.to_string(), "copy B stale (sequence 4)");
    let damaged = CopyRepair {
        slot: Slot::A,
        reason: RepairReason::Damaged(Damage::Misplaced {
            slot: Slot::A,
            found: 1,
        }),
    };
    assert_eq!(
        damaged.to_string(),
        "copy A damaged: copy index 1 in slot A (a misdirected write)"
    );
}
