//! A metadata replica behind every peer's log installs a peer's snapshot (issue #33): the chunks
//! are staged, the install commits at the superblock's checkpoint, and boot takes every crash
//! state across it to the old group or the installed one, never a mix, with a log that chains to
//! the checkpoint. A snapshot that does not verify is refused and changes nothing.
#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    reason = "test code: a failed unwrap is a failed test; casts are of small test values"
)]

use std::path::Path;

use iggy_format::{Header, PrepareMeta};
use iggy_io::{
    DirOrder, EnumerationConfig, ReadFile, ReadOnly, ReadStorage, SimStorage, Storage, enumerate,
};
use iggy_metadata::codec;
use iggy_metadata::group::{self, GROUP_ID, MetadataGroup, SUPERSEDED_WAL_DIR};
use iggy_metadata::{Op, State};
use iggy_snapshot::transfer::{RECEIVING_FILE_NAME, SnapshotId};
use iggy_superblock::{Identity, VsrState};
use iggy_wal::Config;

const PRIMARY: Identity = Identity {
    cluster: 0x5A,
    replica: 0,
    replica_count: 3,
};
const BACKUP: Identity = Identity {
    replica: 2,
    ..PRIMARY
};
const CLIENT: u128 = 0xC11E_0002;
/// Ops the backup has before it falls behind; the primary's checkpoint; its head.
const BACKUP_HEAD: u64 = 12;
const CHECKPOINT: u64 = 40;
const HEAD: u64 = 48;

fn dir() -> &'static Path {
    Path::new("metadata")
}

fn wal_config() -> Config {
    Config {
        file_size_bytes: 2048,
        ..Config::new(GROUP_ID)
    }
}

fn meta(request: u64) -> PrepareMeta {
    PrepareMeta {
        client: CLIENT,
        request,
        request_checksum: u128::from(request) << 64 | 0xABC,
        now_us: 1_000 + request,
        ..PrepareMeta::default()
    }
}

fn commit_durably(group: &mut MetadataGroup<SimStorage>, op: u64) {
    group.commit(op).unwrap();
    let current = group.vsr_state();
    group
        .write_vsr(VsrState {
            commit_max: op,
            ..current
        })
        .unwrap();
}

/// The state of executing `prepared` in order, from scratch.
fn executed(prepared: &[(Header, Vec<u8>)]) -> State {
    let mut state = State::new(PRIMARY.replica_count);
    for (header, body) in prepared {
        let op = codec::decode_op(body).unwrap();
        state.execute_at(
            (header.view, header.timestamp_ns / 1_000),
            header.op,
            (header.client, header.request, header.request_checksum),
            &op,
        );
    }
    state
}

/// A primary's prepares, its snapshot's identity and checkpoint checksum, and its bytes.
type Primary = (Vec<(Header, Vec<u8>)>, SnapshotId, u128, Vec<u8>);

/// The primary: ops 1..=HEAD prepared and committed, a checkpoint at CHECKPOINT. Returns its
/// prepares, its snapshot's identity and checkpoint checksum, and the snapshot's bytes.
fn primary() -> Primary {
    let storage = SimStorage::new(1);
    let mut group = MetadataGroup::create(storage, dir(), PRIMARY, wal_config()).unwrap();
    let mut prepared = vec![
        group
            .prepare(
                &Op::RegisterClient {
                    client: CLIENT,
                    session: 1,
                },
                &meta(0),
            )
            .unwrap()
            .unwrap(),
    ];
    for i in 1..HEAD {
        let op = Op::CreateStream {
            name: format!("stream-{i}"),
        };
        prepared.push(group.prepare(&op, &meta(i)).unwrap().unwrap());
        if i + 1 == CHECKPOINT {
            commit_durably(&mut group, CHECKPOINT);
            group.checkpoint().unwrap();
        }
    }
    commit_durably(&mut group, HEAD);
    let (id, checksum) = group.snapshot().unwrap();
    assert_eq!(id.checkpoint_op, CHECKPOINT);
    assert_eq!(checksum, prepared[CHECKPOINT as usize - 1].0.checksum());
    let bytes = group.snapshot_chunk(0).unwrap().unwrap().2;
    assert_eq!(
        bytes.len() as u64,
        id.length,
        "the whole snapshot is one chunk"
    );
    (prepared, id, checksum, bytes)
}

/// A backup that journaled and committed ops 1..=BACKUP_HEAD, then fell behind.
fn backup(storage: &SimStorage, prepared: &[(Header, Vec<u8>)]) -> MetadataGroup<SimStorage> {
    let mut group = MetadataGroup::create(storage.clone(), dir(), BACKUP, wal_config()).unwrap();
    for (header, body) in &prepared[..BACKUP_HEAD as usize] {
        group.journal(header, body).unwrap();
    }
    commit_durably(&mut group, BACKUP_HEAD);
    group
}

/// Stages `bytes` as three chunks (out of order, as the network may deliver them).
fn stage(group: &mut MetadataGroup<SimStorage>, id: SnapshotId, bytes: &[u8]) {
    let third = bytes.len() / 3;
    for (from, to) in [(third, 2 * third), (2 * third, bytes.len()), (0, third)] {
        group
            .stage_chunk(id, from as u64, &bytes[from..to])
            .unwrap()
            .unwrap();
    }
}

fn open(storage: &SimStorage) -> MetadataGroup<SimStorage> {
    MetadataGroup::open(storage.clone(), dir(), &BACKUP, wal_config())
        .unwrap()
        .unwrap()
}

/// Every crash state from the first staged chunk to the first op journaled after the install:
/// boot (and the read-only check, which must agree) gives the old group (applied through the
/// backup's own ops, no staged or superseded files left) or the installed one (the primary's
/// state at the checkpoint or later, and a log that takes the checkpoint's successor).
#[test]
fn every_crash_state_across_an_install_boots_the_old_group_or_the_new() {
    let (prepared, id, checksum, bytes) = primary();
    let storage = SimStorage::recording(2);
    let mut group = backup(&storage, &prepared);
    storage.mark("staging");
    stage(&mut group, id, &bytes);
    storage.mark("installing");
    group
        .install_staged(id, CHECKPOINT, checksum)
        .unwrap()
        .unwrap();
    storage.mark("installed");
    assert_eq!(group.applied_op(), CHECKPOINT);
    assert_eq!(*group.state(), executed(&prepared[..CHECKPOINT as usize]));
    for (header, body) in &prepared[CHECKPOINT as usize..] {
        group.journal(header, body).unwrap();
    }
    commit_durably(&mut group, HEAD);
    assert_eq!(*group.state(), executed(&prepared));
    drop(group);

    let trace = storage.trace();
    let mut installed_states = 0u64;
    let mut old_states = 0u64;
    let mut check_crash = |crash: &iggy_io::CrashState<'_>| {
        let storage = crash.storage.clone();
        let listing: Vec<String> = storage
            .list_dir(dir())
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|e| format!("{:?}", e))
            .collect();
        let checked = group::check(&ReadOnly::new(storage.clone()), dir(), &BACKUP)
            .map_err(|e| format!("check refused: {e} {listing:?}"))?
            .ok_or("check found no group")?;
        let mut restored = MetadataGroup::open(storage.clone(), dir(), &BACKUP, wal_config())
            .map_err(|e| format!("open refused: {e}"))?
            .ok_or("open found no group")?;
        let applied = restored.applied_op();
        if checked.commit_op != applied || checked.state != *restored.state() {
            return Err(format!(
                "check restores op {}, open op {applied}",
                checked.commit_op
            ));
        }
        for leftover in [RECEIVING_FILE_NAME, SUPERSEDED_WAL_DIR] {
            if storage
                .exists(dir().join(leftover))
                .map_err(|e| e.to_string())?
            {
                return Err(format!("{leftover} left after boot"));
            }
        }
        if applied < CHECKPOINT {
            if applied != BACKUP_HEAD
                || *restored.state() != executed(&prepared[..BACKUP_HEAD as usize])
            {
                return Err(format!("an old group at op {applied}, not {BACKUP_HEAD}"));
            }
            old_states += 1;
            return Ok(());
        }
        if *restored.state() != executed(&prepared[..applied as usize]) {
            return Err(format!(
                "the installed state at op {applied} is not the primary's"
            ));
        }
        // The log chains to the checkpoint: the primary's next prepare is journaled.
        let next = restored.head_op() as usize;
        if let Some((header, body)) = prepared.get(next) {
            restored
                .journal(header, body)
                .map_err(|e| format!("the log after op {next} refuses its successor: {e}"))?;
        }
        installed_states += 1;
        Ok(())
    };
    let mut counts = Vec::new();
    for dir_order in [DirOrder::Ordered, DirOrder::Unordered] {
        let config = EnumerationConfig {
            dir_order,
            start_at_mark: Some("staging".into()),
            ..EnumerationConfig::default()
        };
        counts.push(
            enumerate(&trace, &config, &mut check_crash)
                .unwrap_or_else(|failure| panic!("{dir_order:?}: {failure}")),
        );
    }
    assert!(old_states > 0 && installed_states > 0, "{counts:?}");
    eprintln!(
        "install crash states: {counts:?}; {old_states} old group, {installed_states} installed"
    );
}

/// A snapshot whose staged bytes do not verify (a chunk corrupted on the way or on the peer's
/// disk) is refused: the live snapshot, the superblock and the log are as they were, and the
/// group goes on; the same snapshot staged right then installs.
#[test]
fn a_corrupted_chunk_is_refused_and_leaves_the_live_group_untouched() {
    let (prepared, id, checksum, bytes) = primary();
    let storage = SimStorage::new(3);
    let mut group = backup(&storage, &prepared);
    group.checkpoint().unwrap();
    let live = storage
        .open_read(dir().join("snapshot.bin"))
        .unwrap()
        .read_all()
        .unwrap();
    let superblock = group.vsr_state();
    let mut rotten = bytes.clone();
    rotten[bytes.len() / 2] ^= 0x40;
    stage(&mut group, id, &rotten);
    let refused = group.install_staged(id, CHECKPOINT, checksum).unwrap();
    assert!(
        refused.as_ref().is_err_and(|e| e.contains("trailer")),
        "{refused:?}"
    );
    let after = storage
        .open_read(dir().join("snapshot.bin"))
        .unwrap()
        .read_all()
        .unwrap();
    assert_eq!(after, live, "the live snapshot changed");
    assert_eq!(group.vsr_state(), superblock);
    assert_eq!(group.applied_op(), BACKUP_HEAD);
    assert_eq!(group.head_op(), BACKUP_HEAD);
    // A snapshot that names another checkpoint than the one asked for is refused too.
    stage(&mut group, id, &bytes);
    let refused = group.install_staged(id, CHECKPOINT - 1, checksum).unwrap();
    assert!(refused.is_err(), "{refused:?}");
    assert_eq!(group.vsr_state(), superblock);
    // The group still takes its next op, and a good transfer installs.
    let (header, body) = &prepared[BACKUP_HEAD as usize];
    group.journal(header, body).unwrap();
    stage(&mut group, id, &bytes);
    group
        .install_staged(id, CHECKPOINT, checksum)
        .unwrap()
        .unwrap();
    assert_eq!(*group.state(), executed(&prepared[..CHECKPOINT as usize]));
    drop(group);
    let reopened = open(&storage);
    assert_eq!(reopened.applied_op(), CHECKPOINT);
    assert_eq!(
        *reopened.state(),
        executed(&prepared[..CHECKPOINT as usize])
    );
}

/// A `wal.superseded` that reaches the checkpoint is no install's leftover (an install moves
/// aside only a log that ends below it): boot refuses rather than remove ops it may need.
#[test]
fn a_log_moved_aside_that_reaches_the_checkpoint_is_refused() {
    let (prepared, id, checksum, bytes) = primary();
    let storage = SimStorage::new(4);
    let mut group = backup(&storage, &prepared);
    stage(&mut group, id, &bytes);
    group
        .install_staged(id, CHECKPOINT, checksum)
        .unwrap()
        .unwrap();
    for (header, body) in &prepared[CHECKPOINT as usize..] {
        group.journal(header, body).unwrap();
    }
    drop(group);
    storage
        .rename(dir().join("wal"), dir().join(SUPERSEDED_WAL_DIR))
        .unwrap();
    let refused = MetadataGroup::open(storage.clone(), dir(), &BACKUP, wal_config())
        .err()
        .expect("refused");
    assert!(
        matches!(
            refused,
            group::GroupError::SupersededAhead {
                head_op: HEAD,
                checkpoint_op: CHECKPOINT,
                ..
            }
        ),
        "{refused}"
    );
    assert!(storage.exists(dir().join(SUPERSEDED_WAL_DIR)).unwrap());
}
