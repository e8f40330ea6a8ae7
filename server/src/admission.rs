//! Admission of metadata ops (issue #46): an op that this node could not carry out is refused
//! with a status before it is proposed, never committed and then failed. A committed create the
//! node cannot apply would be a storage failure on every node at about the same moment (their
//! disks fill in lockstep), and the committed op would fail it again at every boot.
//!
//! The bounds are the node's configuration (`[limits]`), checked on the node the request
//! arrives at: the segment size of a new topic, the partitions a topic and a node may hold, and
//! the free space the new partitions preallocate (a segment each) above a reserve the node keeps
//! for its logs, offsets and metadata.

use std::path::PathBuf;

use iggy_metadata::{Op, State};
use iggy_protocol::status;

/// The smallest segment a topic may ask for. Each sealed segment keeps a descriptor, so a tiny
/// one (the issue's `segment_size = 1`) runs a node out of descriptors.
pub const SEGMENT_BYTES_MIN: u64 = 1 << 20;
/// The largest: a segment is preallocated whole when it opens.
pub const SEGMENT_BYTES_MAX: u64 = 16 << 30;

/// Upstream's `InvalidSegmentSize`.
pub const INVALID_SEGMENT_SIZE: u32 = 4002;
/// Upstream's `CannotCreatePartition`: the node has no room for the partitions asked for.
pub const CANNOT_CREATE_PARTITION: u32 = 3000;
/// Upstream's `CannotAppendMessage`: a node's disk is below its reserve, writes wait for space.
pub const DISK_LOW: u32 = 4010;

#[derive(Clone, Debug)]
pub struct Admission {
    /// The node's data directory, whose file system's free space is checked (`None`: not
    /// checked).
    pub data_dir: Option<PathBuf>,
    pub max_partitions_per_topic: u32,
    /// Partitions the node hosts in all (each a replica, a lane and open files).
    pub max_partitions: u64,
    /// Free bytes a create must leave on the data directory's file system; below it, every
    /// node refuses client writes (`crate::bus::DISK_LOW`).
    pub free_reserve_bytes: u64,
    /// The free bytes to go by instead of the data directory's file system's (tests).
    pub free_bytes_source: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
}

impl Admission {
    /// The free bytes of the data directory's file system (`None`: not checked).
    pub fn free_bytes(&self) -> Option<std::io::Result<u64>> {
        if let Some(source) = &self.free_bytes_source {
            return Some(Ok(source.load(std::sync::atomic::Ordering::Relaxed)));
        }
        self.data_dir.as_deref().map(free_bytes)
    }
}

impl Default for Admission {
    fn default() -> Self {
        Self {
            data_dir: None,
            max_partitions_per_topic: 1_000,
            max_partitions: 10_000,
            free_reserve_bytes: 1 << 30,
            free_bytes_source: None,
        }
    }
}

/// A refusal: the status for the client and the reason for the log.
#[derive(Debug, PartialEq, Eq)]
pub struct Refusal {
    pub status: u32,
    pub reason: String,
}

/// Whether this node admits `op` against the committed `state`.
pub fn admit(op: &Op, state: &State, admission: &Admission) -> Result<(), Refusal> {
    let refuse = |status, reason: String| Err(Refusal { status, reason });
    let (new_partitions, segment_bytes, in_topic) = match op {
        Op::CreateTopic {
            partitions,
            segment_size_bytes,
            ..
        } => {
            if !(SEGMENT_BYTES_MIN..=SEGMENT_BYTES_MAX).contains(segment_size_bytes) {
                return refuse(
                    INVALID_SEGMENT_SIZE,
                    format!(
                        "segment_size {segment_size_bytes}: {} to {} bytes",
                        SEGMENT_BYTES_MIN, SEGMENT_BYTES_MAX
                    ),
                );
            }
            (*partitions, *segment_size_bytes, *partitions)
        }
        Op::CreatePartitions {
            stream,
            topic,
            count,
        } => {
            let Some(topic) = state.streams.get(stream).and_then(|s| s.topics.get(topic)) else {
                // The state machine answers an unknown stream or topic.
                return Ok(());
            };
            let existing = u32::try_from(topic.partitions.len()).unwrap_or(u32::MAX);
            (
                *count,
                topic.segment_size_bytes,
                existing.saturating_add(*count),
            )
        }
        _ => return Ok(()),
    };
    if in_topic > admission.max_partitions_per_topic {
        return refuse(
            status::TOO_MANY_PARTITIONS,
            format!(
                "{in_topic} partitions in one topic: at most {} (limits.max_partitions_per_topic)",
                admission.max_partitions_per_topic
            ),
        );
    }
    let total = state.partition_count as u64 + u64::from(new_partitions);
    if total > admission.max_partitions {
        return refuse(
            status::TOO_MANY_PARTITIONS,
            format!(
                "{total} partitions on the node: at most {} (limits.max_partitions)",
                admission.max_partitions
            ),
        );
    }
    if let Some(free) = admission.free_bytes() {
        let dir = admission.data_dir.clone().unwrap_or_default();
        let needed = u64::from(new_partitions)
            .saturating_mul(segment_bytes)
            .saturating_add(admission.free_reserve_bytes);
        match free {
            Ok(free) if free < needed => {
                return refuse(
                    CANNOT_CREATE_PARTITION,
                    format!(
                        "{new_partitions} partitions of {segment_bytes}-byte segments need {} MiB free on {} with the {} MiB reserve (limits.free_reserve_bytes); {} MiB are",
                        needed >> 20,
                        dir.display(),
                        admission.free_reserve_bytes >> 20,
                        free >> 20
                    ),
                );
            }
            Ok(_) => {}
            Err(e) => {
                return refuse(
                    CANNOT_CREATE_PARTITION,
                    format!("the free space of {}: {e}", dir.display()),
                );
            }
        }
    }
    Ok(())
}

/// Bytes an unprivileged process may still allocate on the file system holding `dir`.
pub fn free_bytes(dir: &std::path::Path) -> std::io::Result<u64> {
    let stat = rustix::fs::statvfs(dir)?;
    Ok(stat.f_bavail.saturating_mul(stat.f_frsize))
}

#[cfg(test)]
mod tests {
    use super::*;
    use iggy_metadata::{Durability, Retention};

    fn topic(partitions: u32, segment_size_bytes: u64) -> Op {
        Op::CreateTopic {
            stream: 1,
            name: "t".into(),
            partitions,
            durability: Durability::Replicated,
            segment_size_bytes,
            retention: Retention {
                max_age_seconds: 0,
                max_bytes: 0,
            },
            replication_factor: 3,
        }
    }

    #[test]
    fn a_topic_out_of_bounds_is_refused_with_the_bound_named() {
        let state = State::new(3);
        let admission = Admission::default();
        let refused = admit(&topic(1, 1), &state, &admission).unwrap_err();
        assert_eq!(refused.status, INVALID_SEGMENT_SIZE);
        assert!(
            refused.reason.contains("segment_size 1"),
            "{}",
            refused.reason
        );
        assert!(admit(&topic(1, 1 << 50), &state, &admission).is_err());
        let refused = admit(&topic(5_000, 1 << 30), &state, &admission).unwrap_err();
        assert_eq!(refused.status, status::TOO_MANY_PARTITIONS);
        assert!(refused.reason.contains("max_partitions_per_topic"));
        let small = Admission {
            max_partitions: 10,
            ..Admission::default()
        };
        let refused = admit(&topic(11, 1 << 30), &state, &small).unwrap_err();
        assert!(
            refused.reason.contains("limits.max_partitions"),
            "{}",
            refused.reason
        );
        assert_eq!(admit(&topic(10, 1 << 30), &state, &small), Ok(()));
    }

    #[test]
    fn a_topic_whose_segments_do_not_fit_the_free_space_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let free = free_bytes(dir.path()).expect("statvfs");
        let state = State::new(3);
        let admission = Admission {
            data_dir: Some(dir.path().to_path_buf()),
            free_reserve_bytes: 0,
            ..Admission::default()
        };
        // Each partition preallocates a segment: more of them than the disk holds is refused...
        let partitions = u32::try_from(free / SEGMENT_BYTES_MAX + 1).unwrap_or(u32::MAX);
        let op = topic(partitions.min(1_000), SEGMENT_BYTES_MAX);
        if u64::from(partitions) <= 1_000 {
            let refused = admit(&op, &state, &admission).unwrap_err();
            assert_eq!(refused.status, CANNOT_CREATE_PARTITION);
            assert!(refused.reason.contains("MiB free"), "{}", refused.reason);
        }
        // ...and so is one that fits but eats into the reserve.
        let reserve = Admission {
            free_reserve_bytes: free,
            ..admission.clone()
        };
        let refused = admit(&topic(1, SEGMENT_BYTES_MIN), &state, &reserve).unwrap_err();
        assert_eq!(refused.status, CANNOT_CREATE_PARTITION);
        assert!(refused.reason.contains("limits.free_reserve_bytes"));
        assert_eq!(
            admit(&topic(1, SEGMENT_BYTES_MIN), &state, &admission),
            Ok(())
        );
    }
}
