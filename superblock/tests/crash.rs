//! Crash-state enumeration over the creation of a superblock and 50 random updates: at every
//! crash point and every allowed lost, kept or torn state, boot must see the last state whose
//! write returned or the one being written: never anything else, never a refusal.

#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    reason = "test code: a failed unwrap is a failed test; casts are of small test values"
)]

mod common;

use common::{DIR, ID, dir, states};
use iggy_io::{EnumerationConfig, ReadOnly, SimStorage, enumerate};
use iggy_superblock::{Opened, RepairPolicy, Superblock, read};

const UPDATES: usize = 50;

#[test]
fn every_crash_state_boots_to_the_acknowledged_or_the_in_flight_state() {
    let states = states(0x5EED, UPDATES + 1);
    let storage = SimStorage::recording(1);
    storage.mark("writing 0");
    let mut superblock = Superblock::create(storage.clone(), dir(), ID, states[0]).unwrap();
    storage.mark("written 0");
    for (index, state) in states.iter().enumerate().skip(1) {
        storage.mark(format!("writing {index}"));
        superblock.write(*state).unwrap();
        storage.mark(format!("written {index}"));
    }
    let trace = storage.trace();

    let mut check_crash = |crash: &iggy_io::CrashState<'_>| {
        let number = |prefix: &str| {
            crash
                .marks
                .iter()
                .rev()
                .find_map(|m| m.strip_prefix(prefix)?.parse::<usize>().ok())
        };
        let acknowledged = number("written ");
        let in_flight = number("writing ").filter(|&w| Some(w) != acknowledged);
        // Check mode first: a read-only view of the crash state.
        let opened = read(&ReadOnly::new(crash.storage.clone()), dir(), &ID)
            .map_err(|e| format!("refused: {e}"))?;
        let record = match opened {
            Opened::Fresh if acknowledged.is_none() => return Ok(()),
            Opened::Fresh => return Err(format!("fresh after state {acknowledged:?} was written")),
            Opened::Present { record, .. } => record,
        };
        let index = usize::try_from(record.sequence - 1).unwrap();
        if Some(index) != acknowledged && Some(index) != in_flight {
            return Err(format!(
                "booted to sequence {} but acknowledged {acknowledged:?}, in flight {in_flight:?}",
                record.sequence
            ));
        }
        if record.state != states[index] {
            return Err(format!(
                "sequence {} carries the wrong state",
                record.sequence
            ));
        }
        // A node's boot repairs without syncing and syncs the file system once after every
        // group: a power loss before that sync, keeping, losing or tearing each copy write,
        // still leaves copies that choose the same record.
        let deferred = crash.storage.fork();
        Superblock::open(deferred.clone(), dir(), &ID, RepairPolicy::RepairUnsynced)
            .map_err(|e| format!("unsynced repair refused: {e}"))?;
        deferred.power_loss();
        match read(&ReadOnly::new(deferred), dir(), &ID) {
            Ok(Opened::Present { record: again, .. }) if again == record => {}
            other => {
                return Err(format!(
                    "after an unsynced repair and a power loss: {other:?}"
                ));
            }
        }
        // Open mode repairs, after which the superblock is clean and says the same.
        let (repaired, _) =
            Superblock::open(crash.storage.clone(), dir(), &ID, RepairPolicy::Repair)
                .map_err(|e| format!("open refused: {e}"))?
                .ok_or("open saw a fresh group")?;
        match read(&crash.storage, dir(), &ID).map_err(|e| e.to_string())? {
            Opened::Present {
                record: again,
                repairs,
                ..
            } if again == record && repairs.is_empty() && *repaired.record() == record => Ok(()),
            other => Err(format!("after repair: {other:?}")),
        }
    };
    // Both models of directory changes: in order (ext4, xfs), and any subset (where every
    // directory sync shows).
    let mut counts = iggy_io::Enumeration::default();
    for dir_order in [iggy_io::DirOrder::Ordered, iggy_io::DirOrder::Unordered] {
        let config = EnumerationConfig {
            dir_order,
            ..EnumerationConfig::default()
        };
        counts = enumerate(&trace, &config, &mut check_crash)
            .unwrap_or_else(|failure| panic!("{dir_order:?}: {failure}"));
    }
    assert!(counts.points > 4 * UPDATES, "{counts:?}");
    assert!(counts.torn_states > 0, "{counts:?}");
    assert!(SimStorage::recording(0).trace().is_empty());
    assert_eq!(DIR, "g");
}
