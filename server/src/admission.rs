//! Admission of metadata ops (issue #46): an op that this node could not carry out is refused
//! with a status before it is proposed, never committed and then failed. A committed create the
//! node cannot apply would be a storage failure on every node at about the same moment (their
//! disks fill in lockstep), and the committed op would fail it again at every boot.
//!
//! The bounds are the node's configuration (`[limits]`), checked on the node the request
//! arrives at: the segment size of a new topic, the partitions a topic and a node may hold, and
//! the free space the new partitions preallocate (a segment each) above a reserve the node keeps
//! for its logs, offsets and metadata, and the descriptors the new partitions keep open beside
//! those kept for client connections and the node's own sockets.

use std::path::PathBuf;

use iggy_metadata::{Op, State};
use iggy_protocol::status;

/// The smallest segment a topic may ask for. Each sealed segment keeps a descriptor, so a tiny
/// one (the issue's `segment_size = 1`) runs a node out of descriptors.
pub const SEGMENT_BYTES_MIN: u64 = 1 << 20;
/// The largest: a segment is preallocated whole when it opens.
pub const SEGMENT_BYTES_MAX: u64 = 16 << 30;

/// Descriptors a partition keeps open on a node: its superblock, its WAL's frontier, its log's
/// current file twice (the appender's and the reader's polls use), and one spare for a sealed
/// segment being read or a file opened for a moment (an offset store's, a retention pass's).
/// `server/tests/process.rs` counts a node's descriptors before and after a create of 24
/// partitions written and read through every node (4 each on this machine, session 62) and
/// fails if a partition takes more than this.
pub const DESCRIPTORS_PER_PARTITION: u64 = 5;
/// Descriptors a create leaves beside `max_connections` for the node's own sockets and short
/// uses: its listeners, the replica bus's peers and handshakes in progress (at most 64), the
/// runtime's, and files opened for a moment.
pub const DESCRIPTORS_RESERVED: u64 = 256;

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
    /// Check creates against the process's open-descriptor limit (read at each create, so a
    /// limit an operator changes under a running node counts): the new partitions'
    /// [`DESCRIPTORS_PER_PARTITION`] must fit beside the files open now, `connections` and
    /// [`DESCRIPTORS_RESERVED`].
    pub check_descriptors: bool,
    /// Descriptors kept for client connections (the node's `max_connections`).
    pub connections: u64,
}

/// The process's open descriptors and its limit on them, as a create sees them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Descriptors {
    /// Descriptors open now (`/proc/self/fd`).
    pub open: u64,
    /// Of them, client connections (`Admission::connections` holds their place already).
    pub connections_open: u64,
    /// The soft `RLIMIT_NOFILE` (`None`: unlimited).
    pub limit: Option<u64>,
}

impl Descriptors {
    /// This process's, with `connections_open` client connections among them (`None`: `/proc`
    /// cannot be read, and the check is skipped).
    #[allow(clippy::disallowed_methods)] // /proc, not storage
    pub fn of_this_process(connections_open: u64) -> Option<Self> {
        let open = std::fs::read_dir("/proc/self/fd").ok()?.count();
        Some(Self {
            open: u64::try_from(open).unwrap_or(u64::MAX),
            connections_open,
            limit: rustix::process::getrlimit(rustix::process::Resource::Nofile).current,
        })
    }
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
            check_descriptors: false,
            connections: 0,
        }
    }
}

/// A refusal: the status for the client and the reason for the log.
#[derive(Debug, PartialEq, Eq)]
pub struct Refusal {
    pub status: u32,
    pub reason: String,
}

/// Whether this node admits `op` against the committed `state`, with `descriptors` open (looked
/// at only for a create, when [`Admission::check_descriptors`]).
pub fn admit(
    op: &Op,
    state: &State,
    admission: &Admission,
    descriptors: impl FnOnce() -> Option<Descriptors>,
) -> Result<(), Refusal> {
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
    if admission.check_descriptors
        && let Some(Descriptors {
            open,
            connections_open,
            limit: Some(limit),
        }) = descriptors()
    {
        // Files may take what the limit leaves beside every connection the node may open and
        // its reserve; the connections open now are among `open` and already counted there.
        let for_files = limit
            .saturating_sub(admission.connections)
            .saturating_sub(DESCRIPTORS_RESERVED);
        let files_open = open.saturating_sub(connections_open);
        let needed = u64::from(new_partitions).saturating_mul(DESCRIPTORS_PER_PARTITION);
        if files_open.saturating_add(needed) > for_files {
            return refuse(
                CANNOT_CREATE_PARTITION,
                format!(
                    "{new_partitions} partitions keep {needed} descriptors open ({DESCRIPTORS_PER_PARTITION} each); {files_open} are open for files of the {for_files} the open-descriptor limit {limit} leaves beside limits.max_connections {} and {DESCRIPTORS_RESERVED} for the node's sockets",
                    admission.connections
                ),
            );
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
        let refused = admit(&topic(1, 1), &state, &admission, || None).unwrap_err();
        assert_eq!(refused.status, INVALID_SEGMENT_SIZE);
        assert!(
            refused.reason.contains("segment_size 1"),
            "{}",
            refused.reason
        );
        assert!(admit(&topic(1, 1 << 50), &state, &admission, || None).is_err());
        let refused = admit(&topic(5_000, 1 << 30), &state, &admission, || None).unwrap_err();
        assert_eq!(refused.status, status::TOO_MANY_PARTITIONS);
        assert!(refused.reason.contains("max_partitions_per_topic"));
        let small = Admission {
            max_partitions: 10,
            ..Admission::default()
        };
        let refused = admit(&topic(11, 1 << 30), &state, &small, || None).unwrap_err();
        assert!(
            refused.reason.contains("limits.max_partitions"),
            "{}",
            refused.reason
        );
        assert_eq!(admit(&topic(10, 1 << 30), &state, &small, || None), Ok(()));
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
            let refused = admit(&op, &state, &admission, || None).unwrap_err();
            assert_eq!(refused.status, CANNOT_CREATE_PARTITION);
            assert!(refused.reason.contains("MiB free"), "{}", refused.reason);
        }
        // ...and so is one that fits but eats into the reserve.
        let reserve = Admission {
            free_reserve_bytes: free,
            ..admission.clone()
        };
        let refused = admit(&topic(1, SEGMENT_BYTES_MIN), &state, &reserve, || None).unwrap_err();
        assert_eq!(refused.status, CANNOT_CREATE_PARTITION);
        assert!(refused.reason.contains("limits.free_reserve_bytes"));
        assert_eq!(
            admit(&topic(1, SEGMENT_BYTES_MIN), &state, &admission, || None),
            Ok(())
        );
    }

    #[test]
    fn a_create_whose_partitions_do_not_fit_the_descriptor_limit_is_refused() {
        let state = State::new(3);
        let admission = Admission {
            check_descriptors: true,
            connections: 1_000,
            ..Admission::default()
        };
        // 200 open, 50 of them connections: 150 for files. A limit of 1,000 connections + the
        // reserve + 150 + 40 leaves room for ten partitions' descriptors, not eleven.
        let limit = 1_000 + DESCRIPTORS_RESERVED + 150 + 10 * DESCRIPTORS_PER_PARTITION;
        let seen = || {
            Some(Descriptors {
                open: 200,
                connections_open: 50,
                limit: Some(limit),
            })
        };
        assert_eq!(admit(&topic(10, 1 << 20), &state, &admission, seen), Ok(()));
        let refused = admit(&topic(11, 1 << 20), &state, &admission, seen).unwrap_err();
        assert_eq!(refused.status, CANNOT_CREATE_PARTITION);
        assert!(
            refused.reason.contains("open-descriptor limit")
                && refused.reason.contains("55 descriptors"),
            "{}",
            refused.reason
        );
        // Unlimited, unreadable, or not asked: not checked.
        let unlimited = || {
            Some(Descriptors {
                limit: None,
                ..seen().unwrap()
            })
        };
        assert_eq!(
            admit(&topic(11, 1 << 20), &state, &admission, unlimited),
            Ok(())
        );
        assert_eq!(
            admit(&topic(11, 1 << 20), &state, &admission, || None),
            Ok(())
        );
        let off = Admission {
            check_descriptors: false,
            ..admission.clone()
        };
        assert_eq!(admit(&topic(11, 1 << 20), &state, &off, seen), Ok(()));
        // This process's own figures are readable and plausible.
        let own = Descriptors::of_this_process(0).expect("/proc/self/fd");
        assert!(own.open >= 3, "{own:?}");
    }
}
