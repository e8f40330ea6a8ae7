//! The marker of a partition rebuilt from its peers after damage (`docs/recovery.md`, "A
//! damaged partition"; layout in `docs/format.md`, "The rebuild marker").
//!
//! When boot finds a replicated partition whose published data is damaged, the node does not
//! refuse to start: it writes this marker, moves the partition's files into a `.damaged-*`
//! directory beside it (kept for `iggy-inspect`) and creates the partition anew, empty, in the
//! views its old superblock held; its replica then catches up from its peers. The marker is
//! what tells every later boot that this replica's log lacks whatever it acknowledged in views
//! up to `forgotten_through`, so its log stands for no view-change quorum until it has started
//! a later view or rejoined that one (`iggy_vsr::Boot::forgotten_through`). It is written
//! before anything is moved and never removed: once the replica has moved past that view it
//! changes nothing.
//!
//! Invariants:
//! - the marker is durable before the first file moves, so a crash anywhere in a rebuild boots
//!   to a directory that is rebuilt again, with the same views;
//! - a marker that does not verify refuses (the views it held are unknown), never reads as
//!   "nothing forgotten".
//!
//! Layout (40 bytes, little-endian):
//!
//! ```text
//!  0 magic "IGREBILT" | 8 version u32 | 12 view u32 | 16 forgotten_through u32
//! 20 zero u32 | 24 checksum u128 (XXH3-128 of bytes [0, 24))
//! ```

use std::path::Path;

use iggy_format::checksum::checksum;
use iggy_io::{OpenMode, ReadFile, ReadStorage, Storage, WriteFile};

use crate::error::PartitionError;

/// The marker's file name in the partition's directory.
pub const FILE_NAME: &str = "rebuilt-from-peers";
/// The prefix of the directory a rebuild moves the damaged files into (then the boot's
/// incarnation in hex).
pub const DAMAGED_PREFIX: &str = ".damaged-";
const TEMP_NAME: &str = "rebuilt-from-peers.tmp";
/// The marker's first 8 bytes.
pub const MAGIC: &[u8; 8] = b"IGREBILT";
const VERSION: u32 = 1;
const SIZE: usize = 40;

/// What a rebuild recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Marker {
    /// The highest view the old replica had promised (the new superblock's view).
    pub view: u32,
    /// The old replica's log_view: it may have acknowledged ops in this view and earlier ones.
    pub forgotten_through: u32,
}

impl Marker {
    #[must_use]
    pub fn encode(&self) -> [u8; SIZE] {
        let mut out = [0u8; SIZE];
        out[..8].copy_from_slice(MAGIC);
        out[8..12].copy_from_slice(&VERSION.to_le_bytes());
        out[12..16].copy_from_slice(&self.view.to_le_bytes());
        out[16..20].copy_from_slice(&self.forgotten_through.to_le_bytes());
        let sum = checksum(&out[..24]);
        out[24..].copy_from_slice(&sum.to_le_bytes());
        out
    }

    /// Decodes a marker's bytes; `Err` names what is wrong.
    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        if bytes.len() != SIZE {
            return Err(format!("{} bytes, a marker has {SIZE}", bytes.len()));
        }
        let sum = u128::from_le_bytes(bytes[24..].try_into().unwrap_or_default());
        if checksum(&bytes[..24]) != sum || &bytes[..8] != MAGIC {
            return Err("checksum or magic does not match (torn or rotten)".into());
        }
        let u32_at =
            |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or_default());
        if u32_at(8) != VERSION {
            return Err(format!("version {}, this build reads {VERSION}", u32_at(8)));
        }
        let marker = Self {
            view: u32_at(12),
            forgotten_through: u32_at(16),
        };
        if marker.forgotten_through > marker.view {
            return Err(format!(
                "forgotten through view {} past its view {}",
                marker.forgotten_through, marker.view
            ));
        }
        Ok(marker)
    }
}

/// The marker in the partition directory `dir`, if any. A marker that does not verify is an
/// error naming the file.
pub fn read<R: ReadStorage>(storage: &R, dir: &Path) -> Result<Option<Marker>, PartitionError> {
    let path = dir.join(FILE_NAME);
    if !storage.exists(&path)? {
        return Ok(None);
    }
    let file = storage.open_read(&path)?;
    let len = usize::try_from(file.len()?).unwrap_or(usize::MAX);
    if len != SIZE {
        return Err(PartitionError::Rebuilt {
            path,
            reason: format!("{len} bytes, a marker has {SIZE}"),
        });
    }
    let mut bytes = [0u8; SIZE];
    file.read_exact_at(0, &mut bytes)?;
    Marker::decode(&bytes)
        .map(Some)
        .map_err(|reason| PartitionError::Rebuilt { path, reason })
}

/// Writes `marker` into `dir` durably (a temporary file synced, renamed, the directory synced).
pub fn write<S: Storage>(storage: &S, dir: &Path, marker: Marker) -> Result<(), PartitionError> {
    let temp = dir.join(TEMP_NAME);
    let file = storage.open(&temp, OpenMode::Create)?;
    file.set_len(0)?;
    file.write_all_at(0, &marker.encode())?;
    file.sync_data()?;
    drop(file);
    storage.rename(&temp, dir.join(FILE_NAME))?;
    storage.sync_dir(dir)?;
    Ok(())
}

/// Whether `name`, an entry of a partition's directory, is rebuild machinery (the marker, its
/// temporary file, a directory of damaged files), not part of the partition's state.
#[must_use]
pub fn is_rebuild_entry(name: &str) -> bool {
    name == FILE_NAME || name == TEMP_NAME || name.starts_with(DAMAGED_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_round_trips_and_every_flipped_bit_is_refused() {
        let marker = Marker {
            view: 7,
            forgotten_through: 5,
        };
        let bytes = marker.encode();
        assert_eq!(Marker::decode(&bytes), Ok(marker));
        for bit in 0..SIZE * 8 {
            let mut rotten = bytes;
            rotten[bit / 8] ^= 1 << (bit % 8);
            assert!(Marker::decode(&rotten).is_err(), "bit {bit}");
        }
        let backwards = Marker {
            view: 4,
            forgotten_through: 5,
        };
        assert!(Marker::decode(&backwards.encode()).is_err());
    }
}
