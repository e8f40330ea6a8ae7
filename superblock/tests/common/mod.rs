//! Helpers shared by the superblock tests.
#![allow(
    dead_code,
    reason = "each test crate uses a different part of the helpers"
)]

use std::path::Path;

use iggy_io::{OpenMode, SimStorage, Storage, WriteFile};
use iggy_superblock::{Identity, VsrState};

pub const DIR: &str = "g";
pub const ID: Identity = Identity {
    cluster: 0xC1,
    replica: 1,
    replica_count: 3,
};

pub fn dir() -> &'static Path {
    Path::new(DIR)
}

/// A deterministic sequence of states that only move forward, from a tiny xorshift.
pub fn states(seed: u64, count: usize) -> Vec<VsrState> {
    let mut x = seed | 1;
    let mut next = move |bound: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % bound
    };
    let mut state = VsrState::default();
    let mut out = vec![state];
    for _ in 1..count {
        state.view += u32::try_from(next(2)).expect("below 2");
        if next(2) == 0 {
            state.log_view = state.view;
        }
        state.commit_max += next(50);
        if next(3) == 0 {
            state.checkpoint_op = state.commit_max - next(state.commit_max.min(5) + 1);
            state.checkpoint_checksum = u128::from(next(u64::MAX));
        }
        state.offset_frontier += next(1000);
        state.incarnation += next(2);
        out.push(state);
    }
    out
}

/// Overwrites bytes of the superblock file directly and makes them durable (a fault injection
/// that bypasses the superblock's own write path).
pub fn raw_write(storage: &SimStorage, offset: u64, bytes: &[u8]) {
    let file = storage
        .open(Path::new(DIR).join("superblock"), OpenMode::Existing)
        .expect("open");
    file.write_all_at(offset, bytes).expect("write");
    file.sync_data().expect("sync");
}
