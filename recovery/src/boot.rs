//! Node boot: the metadata group, then every partition, each with the rules of its own crate.
//! [`check`] decides on a read-only storage; [`boot`] (`Open`, `Repair`) applies exactly what the
//! same analysis decided, group by group. Partitions are independent: one refused partition does
//! not stop the others from being checked or opened.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use iggy_io::{EntryKind, ReadFile, ReadStorage, Storage};
use iggy_metadata::group::{self as metadata_group, GroupError, MetadataGroup};
use iggy_segments::{Partition, PartitionError};
use iggy_superblock::copy::{self, Slot};
use iggy_superblock::{Identity, SuperblockError};
use iggy_wal::{Mode, WalError};

use crate::report::{
    Action, Component, Finding, Group, PartitionSummary, Report, SCHEMA_VERSION, Status,
};

/// The metadata group's directory in a data directory.
pub const METADATA_DIR: &str = "metadata";
/// The directory holding one directory per partition.
pub const PARTITIONS_DIR: &str = "partitions";

/// A partition's identity: `partitions/<stream>.<topic>.<partition>/`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartitionKey {
    pub stream: u32,
    pub topic: u32,
    pub partition: u32,
}

impl PartitionKey {
    #[must_use]
    pub fn dir_name(self) -> String {
        format!("{}.{}.{}", self.stream, self.topic, self.partition)
    }

    /// Parses a partition directory name (numeric ids only).
    #[must_use]
    pub fn parse(name: &str) -> Option<Self> {
        let mut parts = name.split('.');
        let mut next = || -> Option<u32> {
            let part = parts.next()?;
            (!part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()))
                .then(|| part.parse().ok())
                .flatten()
        };
        let key = Self {
            stream: next()?,
            topic: next()?,
            partition: next()?,
        };
        parts.next().is_none().then_some(key)
    }

    /// The partition's consensus group id (the metadata group is 0): bit 96 set, then stream,
    /// topic and partition in 32 bits each.
    #[must_use]
    pub fn group_id(self) -> u128 {
        1u128 << 96
            | u128::from(self.stream) << 64
            | u128::from(self.topic) << 32
            | u128::from(self.partition)
    }

    /// How reports name the group.
    #[must_use]
    pub fn label(self) -> String {
        format!("partition {}", self.dir_name())
    }
}

/// The configuration a partition boots with.
#[must_use]
pub fn partition_config(
    identity: Identity,
    key: PartitionKey,
    segment_size_bytes: Option<u64>,
) -> iggy_segments::Config {
    let mut config = iggy_segments::Config::new(key.group_id(), u64::from(key.partition), identity);
    if let Some(size) = segment_size_bytes {
        config.segment_size_bytes = size;
    }
    config
}

/// The configuration of the metadata group's WAL.
#[must_use]
pub fn metadata_wal_config() -> iggy_wal::Config {
    iggy_wal::Config::new(metadata_group::GROUP_ID)
}

/// What boot opened.
pub struct NodeState<S: Storage + Clone> {
    pub identity: Option<Identity>,
    pub metadata: Option<MetadataGroup<S>>,
    pub partitions: BTreeMap<PartitionKey, Partition<S>>,
}

/// The message of [`RecoveryError::NotANode`]. A node at the storage root has the empty path:
/// the tools name the directory they opened before the message, so no empty `: ` prefix.
fn not_a_node(dir: &Path) -> String {
    const WHAT: &str = "not a node data directory (no metadata/ and no partitions/)";
    if dir.as_os_str().is_empty() {
        WHAT.to_string()
    } else {
        format!("{}: {WHAT}", dir.display())
    }
}

/// Why a node directory could not be looked at at all.
#[derive(Debug, thiserror::Error)]
pub enum RecoveryError {
    #[error("{}", not_a_node(dir))]
    NotANode { dir: PathBuf },
    #[error(transparent)]
    Io(#[from] iggy_io::Error),
}

/// The identity used when no superblock copy decodes: the superblock's own rules then decide
/// (a missing file is fresh or lost state; copies that do not decode refuse), before the
/// identity is ever compared.
const UNKNOWN_IDENTITY: Identity = Identity {
    cluster: 0,
    replica: 0,
    replica_count: 1,
};

/// The identity recorded in the first copy that decodes of `dir/superblock`, if any.
fn discover_identity<R: ReadStorage>(storage: &R, dir: &Path) -> Option<Identity> {
    let path = dir.join(iggy_superblock::FILE_NAME);
    let file = storage.open_read(&path).ok()?;
    let len = usize::try_from(file.len().ok()?.min(copy::FILE_SIZE)).ok()?;
    let mut bytes = vec![0u8; len];
    file.read_exact_at(0, &mut bytes).ok()?;
    Slot::ALL.iter().find_map(|slot| {
        let from = usize::try_from(slot.offset()).ok()?;
        copy::decode(bytes.get(from..)?, *slot)
            .ok()
            .map(|(record, _)| record.identity)
    })
}

/// The partitions under `data_dir/partitions`, and findings for names that are not partitions.
fn list_partitions<R: ReadStorage>(
    storage: &R,
    data_dir: &Path,
    findings: &mut Vec<Finding>,
) -> Result<Vec<PartitionKey>, iggy_io::Error> {
    let dir = data_dir.join(PARTITIONS_DIR);
    if !storage.exists(&dir)? {
        return Ok(Vec::new());
    }
    let mut keys = Vec::new();
    for entry in storage.list_dir(&dir)? {
        let name = entry.name.to_string_lossy();
        match PartitionKey::parse(&name).filter(|_| entry.kind == EntryKind::Dir) {
            Some(key) => keys.push(key),
            None => findings.push(Finding {
                component: Component::Node,
                group: "node".into(),
                file: dir.join(&*name),
                offset: 0,
                what: "not a partition directory; left alone".into(),
                action: Action::None,
                bytes: 0,
            }),
        }
    }
    keys.sort();
    Ok(keys)
}

/// How a refusal is treated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refusal {
    /// Published or durable state is damaged or missing: repairable from peers.
    Damage,
    /// Not something this build or this node may act on (versions, identities).
    Refuse,
    /// The check itself failed.
    Io,
}

struct Classified {
    refusal: Refusal,
    component: Component,
    file: Option<PathBuf>,
    offset: u64,
}

fn classify_wal(error: &WalError) -> Classified {
    let (refusal, file, offset) = match error {
        WalError::HistoryWithoutFrontier { dir, .. } => (Refusal::Damage, Some(dir.clone()), 0),
        WalError::FrontierUnreadable { path, .. } => (Refusal::Damage, Some(path.clone()), 0),
        WalError::FrontierRefused { path, offset, .. } => {
            (Refusal::Refuse, Some(path.clone()), *offset)
        }
        WalError::GroupMismatch { path, .. } => (Refusal::Refuse, Some(path.clone()), 0),
        WalError::LostPublishedBytes { file, len, .. } => {
            (Refusal::Damage, Some(file.clone()), *len)
        }
        WalError::LostPublishedFile { file, .. } | WalError::Hole { file, .. } => {
            (Refusal::Damage, Some(file.clone()), 0)
        }
        WalError::Corrupt { file, offset, .. } => (Refusal::Damage, Some(file.clone()), *offset),
        WalError::HeadMismatch { file, end, .. } => (Refusal::Damage, Some(file.clone()), *end),
        WalError::Io(error) => (
            Refusal::Io,
            Some(error.path.clone()),
            error.offset.unwrap_or(0),
        ),
        _ => (Refusal::Refuse, None, 0),
    };
    Classified {
        refusal,
        component: Component::Wal,
        file,
        offset,
    }
}

fn classify_superblock(error: &SuperblockError) -> Classified {
    let (refusal, file, offset) = match error {
        SuperblockError::UnknownVersion { path, offset, .. }
        | SuperblockError::InvariantBroken { path, offset, .. } => {
            (Refusal::Refuse, Some(path.clone()), *offset)
        }
        SuperblockError::IdentityMismatch { path, .. } => (Refusal::Refuse, Some(path.clone()), 0),
        SuperblockError::Io(error) => (
            Refusal::Io,
            Some(error.path.clone()),
            error.offset.unwrap_or(0),
        ),
        SuperblockError::StateLost { path, .. }
        | SuperblockError::BothInvalid { path, .. }
        | SuperblockError::Fork { path, .. }
        | SuperblockError::SequenceGap { path, .. }
        | SuperblockError::ParentMismatch { path, .. }
        | SuperblockError::NotMonotonic { path, .. }
        | SuperblockError::CopiesDisagree { path, .. } => (Refusal::Damage, Some(path.clone()), 0),
        _ => (Refusal::Refuse, None, 0),
    };
    Classified {
        refusal,
        component: Component::Superblock,
        file,
        offset,
    }
}

fn classify_partition(error: &PartitionError) -> Classified {
    use iggy_segments::offsets::OffsetError;
    let damage = |component, file: &PathBuf, offset| Classified {
        refusal: Refusal::Damage,
        component,
        file: Some(file.clone()),
        offset,
    };
    match error {
        PartitionError::Wal(error) => classify_wal(error),
        PartitionError::Superblock(error) => classify_superblock(error),
        PartitionError::Offsets(OffsetError::Corrupt { file, .. })
        | PartitionError::Offsets(OffsetError::WrongOwner { file, .. }) => {
            damage(Component::Offsets, file, 0)
        }
        PartitionError::Offsets(OffsetError::UnknownVersion { file, .. }) => Classified {
            refusal: Refusal::Refuse,
            component: Component::Offsets,
            file: Some(file.clone()),
            offset: 0,
        },
        PartitionError::Io(error) | PartitionError::Offsets(OffsetError::Io(error)) => Classified {
            refusal: Refusal::Io,
            component: Component::Segments,
            file: Some(error.path.clone()),
            offset: error.offset.unwrap_or(0),
        },
        PartitionError::BadBatch { file, offset, .. }
        | PartitionError::PartitionMismatch { file, offset, .. }
        | PartitionError::OffsetGap { file, offset, .. }
        | PartitionError::Corrupt { file, offset, .. } => {
            damage(Component::Segments, file, *offset)
        }
        PartitionError::NameMismatch { file, .. } | PartitionError::EmptySegment { file } => {
            damage(Component::Segments, file, 0)
        }
        PartitionError::BehindOffsetFrontier { dir, log_end, .. } => {
            damage(Component::Segments, dir, *log_end)
        }
        _ => Classified {
            refusal: Refusal::Refuse,
            component: Component::Segments,
            file: None,
            offset: 0,
        },
    }
}

fn classify_metadata(error: &GroupError, dir: &Path) -> Classified {
    let snapshot = dir.join(iggy_snapshot::FILE_NAME);
    let damage = |file: PathBuf| Classified {
        refusal: Refusal::Damage,
        component: Component::Snapshot,
        file: Some(file),
        offset: 0,
    };
    match error {
        GroupError::Superblock(error) => classify_superblock(error),
        GroupError::Wal(error) => classify_wal(error),
        GroupError::Snapshot(iggy_snapshot::SnapshotError::Io(error)) => Classified {
            refusal: Refusal::Io,
            component: Component::Snapshot,
            file: Some(error.path.clone()),
            offset: error.offset.unwrap_or(0),
        },
        GroupError::Snapshot(iggy_snapshot::SnapshotError::UnknownVersion { .. }) => Classified {
            refusal: Refusal::Refuse,
            component: Component::Snapshot,
            file: Some(snapshot),
            offset: 0,
        },
        GroupError::Snapshot(_)
        | GroupError::SnapshotMissing { .. }
        | GroupError::SnapshotBehind { .. }
        | GroupError::ChecksumDisagree { .. }
        | GroupError::SnapshotUnlinked { .. }
        | GroupError::Payload(_) => damage(snapshot),
        GroupError::LogGap { .. } | GroupError::LogMissing { .. } | GroupError::Decode { .. } => {
            Classified {
                refusal: Refusal::Damage,
                component: Component::Wal,
                file: Some(dir.join(metadata_group::WAL_DIR)),
                offset: 0,
            }
        }
        _ => Classified {
            refusal: Refusal::Refuse,
            component: Component::Node,
            file: None,
            offset: 0,
        },
    }
}

/// Builds the node report as groups are checked or opened.
struct Builder {
    report: Report,
    /// A replicated cluster (more than one replica): damage is repaired from peers.
    replicated: bool,
}

impl Builder {
    fn new(data_dir: &Path, identity: Option<Identity>) -> Self {
        Self {
            report: Report {
                schema: SCHEMA_VERSION,
                data_dir: data_dir.to_path_buf(),
                groups: Vec::new(),
                findings: Vec::new(),
                partitions: Vec::new(),
            },
            replicated: identity.is_some_and(|i| i.replica_count > 1),
        }
    }

    /// Records a group that boots, with its findings.
    fn group(&mut self, label: &str, dir: &Path, findings: Vec<Finding>) {
        let repairs = findings.iter().any(|f| f.action.is_local_repair());
        self.report.findings.extend(findings);
        self.report.groups.push(Group {
            group: label.into(),
            dir: dir.to_path_buf(),
            status: if repairs {
                Status::Repair
            } else {
                Status::Clean
            },
            error: None,
            io_error: false,
        });
    }

    /// Records a partition's outcome (checked or opened): its findings, or its refusal. Returns
    /// what was opened, if anything.
    fn partition<T>(
        &mut self,
        label: &str,
        dir: &Path,
        outcome: Result<Option<(T, iggy_segments::Report)>, PartitionError>,
    ) -> Option<T> {
        match outcome {
            Ok(Some((opened, report))) => {
                self.group(label, dir, partition_findings(label, dir, &report));
                self.report.partitions.push(PartitionSummary {
                    group: label.into(),
                    next_offset: report.next_offset,
                    segments: report.segments,
                    consumer_offsets: report.offsets.len(),
                });
                Some(opened)
            }
            Ok(None) => {
                self.group(label, dir, Vec::new());
                None
            }
            Err(error) => {
                self.refused(label, dir, classify_partition(&error), error.to_string());
                None
            }
        }
    }

    /// Records a group that boot refuses.
    fn refused(&mut self, label: &str, dir: &Path, classified: Classified, error: String) {
        let (status, action) = match classified.refusal {
            Refusal::Damage if self.replicated => {
                (Status::NeedsPeerRepair, Action::NeedsPeerRepair)
            }
            Refusal::Damage | Refusal::Refuse | Refusal::Io => (Status::Refuse, Action::Refuse),
        };
        self.report.findings.push(Finding {
            component: classified.component,
            group: label.into(),
            file: classified.file.unwrap_or_else(|| dir.to_path_buf()),
            offset: classified.offset,
            what: error.clone(),
            action,
            bytes: 0,
        });
        self.report.groups.push(Group {
            group: label.into(),
            dir: dir.to_path_buf(),
            status,
            error: Some(error),
            io_error: classified.refusal == Refusal::Io,
        });
    }
}

/// What every walk of a node starts from.
struct Walk {
    metadata_dir: PathBuf,
    identity: Option<Identity>,
    builder: Builder,
    keys: Vec<PartitionKey>,
    /// Findings about the node directory itself, reported after the groups'.
    node_findings: Vec<Finding>,
}

impl Walk {
    fn start<R: ReadStorage>(storage: &R, data_dir: &Path) -> Result<Self, RecoveryError> {
        let metadata_dir = data_dir.join(METADATA_DIR);
        let mut is_node = false;
        for dir in [&metadata_dir, &data_dir.join(PARTITIONS_DIR)] {
            is_node |= storage.exists(dir)?;
        }
        if !is_node {
            return Err(RecoveryError::NotANode {
                dir: data_dir.to_path_buf(),
            });
        }
        let identity = discover_identity(storage, &metadata_dir);
        let mut node_findings = Vec::new();
        let keys = list_partitions(storage, data_dir, &mut node_findings)?;
        Ok(Self {
            metadata_dir,
            identity,
            builder: Builder::new(data_dir, identity),
            keys,
            node_findings,
        })
    }
}

/// The findings of a WAL boot report.
fn wal_findings(label: &str, report: &iggy_wal::Report) -> Vec<Finding> {
    use iggy_wal::FindingKind;
    report
        .findings
        .iter()
        .map(|finding| {
            let (what, action) = match &finding.kind {
                FindingKind::UnpublishedTail { entries } => (
                    format!(
                        "unpublished bytes past the published frontier ({entries} verified entries)"
                    ),
                    Action::DiscardUnpublished,
                ),
                FindingKind::FileBeyondFrontier { entries } => (
                    format!(
                        "a whole file past the published frontier ({entries} verified entries)"
                    ),
                    Action::DiscardUnpublished,
                ),
                FindingKind::FrontierSlotDamaged { slot, error } => (
                    format!("frontier slot {slot} is unusable: {error}"),
                    Action::RepairCopy,
                ),
                FindingKind::Adopted { entries, head_op } => (
                    format!(
                        "{entries} verified entries past the valid slot adopted (head op {head_op})"
                    ),
                    Action::RepairCopy,
                ),
                FindingKind::LeftoverTemp => {
                    ("a leftover frontier.tmp".into(), Action::RemoveLeftover)
                }
                FindingKind::UnknownFile => (
                    "a file the log does not know; left alone".into(),
                    Action::None,
                ),
            };
            Finding {
                component: Component::Wal,
                group: label.into(),
                file: finding.file.clone(),
                offset: finding.offset,
                what,
                action,
                bytes: finding.bytes,
            }
        })
        .collect()
}

fn superblock_findings(
    label: &str,
    dir: &Path,
    repairs: &[iggy_superblock::CopyRepair],
) -> Vec<Finding> {
    repairs
        .iter()
        .map(|repair| Finding {
            component: Component::Superblock,
            group: label.into(),
            file: dir.join(iggy_superblock::FILE_NAME),
            offset: repair.slot.offset(),
            what: repair.to_string(),
            action: Action::RepairCopy,
            bytes: copy::COPY_SIZE as u64,
        })
        .collect()
}

fn partition_findings(label: &str, dir: &Path, report: &iggy_segments::Report) -> Vec<Finding> {
    use iggy_segments::{FindingKind, InstallFinding};
    let mut findings = superblock_findings(label, dir, &report.superblock_repairs);
    findings.extend(wal_findings(label, &report.wal));
    for finding in &report.findings {
        let (component, what, action) = match &finding.kind {
            FindingKind::IndexRebuild { reason } => (
                Component::Index,
                format!("index {reason}"),
                Action::RebuildIndex,
            ),
            FindingKind::OrphanIndex => (
                Component::Index,
                "an index whose segment is gone".into(),
                Action::RemoveLeftover,
            ),
            FindingKind::StagingLeftover => (
                Component::Install,
                "a staged file no install committed".into(),
                Action::RemoveLeftover,
            ),
            FindingKind::OffsetsLeftover => (
                Component::Offsets,
                "a leftover temporary offset file".into(),
                Action::RemoveLeftover,
            ),
            FindingKind::Install(InstallFinding::Uncommitted) => (
                Component::Install,
                "an install that did not commit: the old files are restored".into(),
                Action::RollbackInstall,
            ),
            FindingKind::Install(InstallFinding::Abandoned) => (
                Component::Install,
                "an install abandoned while building its backup".into(),
                Action::RemoveLeftover,
            ),
            FindingKind::Install(InstallFinding::Committed) => (
                Component::Install,
                "a committed install's retired files".into(),
                Action::RemoveLeftover,
            ),
        };
        findings.push(Finding {
            component,
            group: label.into(),
            file: finding.file.clone(),
            offset: 0,
            what,
            action,
            bytes: 0,
        });
    }
    findings
}

fn metadata_findings(label: &str, dir: &Path, checked: &metadata_group::Checked) -> Vec<Finding> {
    let mut findings = superblock_findings(label, dir, &checked.superblock_repairs);
    if let Some(wal) = &checked.wal {
        findings.extend(wal_findings(label, wal));
    }
    findings
}

/// Checks the node in `data_dir` without writing (the storage may be read-only): what
/// [`boot`] would find and do. `progress(done, total)` hears each group.
pub fn check<R: ReadStorage>(
    storage: &R,
    data_dir: &Path,
    mut progress: impl FnMut(usize, usize),
) -> Result<Report, RecoveryError> {
    let Walk {
        metadata_dir,
        identity,
        mut builder,
        keys,
        node_findings,
    } = Walk::start(storage, data_dir)?;
    let total = keys.len() + 1;
    if storage.exists(&metadata_dir)? {
        check_metadata(
            storage,
            &metadata_dir,
            identity.unwrap_or(UNKNOWN_IDENTITY),
            &mut builder,
        );
    }
    progress(1, total);
    for (done, key) in keys.iter().enumerate() {
        let dir = data_dir.join(PARTITIONS_DIR).join(key.dir_name());
        let label = key.label();
        let identity = identity
            .or_else(|| discover_identity(storage, &dir))
            .unwrap_or(UNKNOWN_IDENTITY);
        let config = partition_config(identity, *key, None);
        let checked = iggy_segments::check(storage, &dir, &config).map(|r| r.map(|r| ((), r)));
        builder.partition(&label, &dir, checked);
        progress(done + 2, total);
    }
    builder.report.findings.extend(node_findings);
    Ok(builder.report)
}

fn check_metadata<R: ReadStorage>(
    storage: &R,
    dir: &Path,
    identity: Identity,
    builder: &mut Builder,
) {
    let checked = metadata_group::check(storage, dir, &identity);
    record_metadata(builder, dir, checked.map(|c| c.map(|c| ((), c))));
}

/// Records the metadata group's outcome (checked or opened): its findings, or its refusal.
/// Returns what was opened, if anything.
fn record_metadata<T>(
    builder: &mut Builder,
    dir: &Path,
    outcome: Result<Option<(T, metadata_group::Checked)>, GroupError>,
) -> Option<T> {
    let label = "metadata";
    match outcome {
        Ok(Some((opened, checked))) => {
            builder.group(label, dir, metadata_findings(label, dir, &checked));
            Some(opened)
        }
        Ok(None) => None,
        Err(error) => {
            builder.refused(
                label,
                dir,
                classify_metadata(&error, dir),
                error.to_string(),
            );
            None
        }
    }
}

/// Boots the node in `data_dir` (`Open`: what the server runs; `Repair`: the same, then the
/// caller stops). Each group's findings come from the same analysis [`check`] runs, and the
/// group then applies exactly that plan. Refused groups are reported and left closed.
pub fn boot<S: Storage + Clone>(
    storage: S,
    data_dir: &Path,
    mode: Mode,
) -> Result<(NodeState<S>, Report), RecoveryError> {
    assert!(
        mode != Mode::Check,
        "Check mode is `check()`: it needs only a read-only storage"
    );
    let Walk {
        metadata_dir,
        identity,
        mut builder,
        keys,
        node_findings,
    } = Walk::start(&storage, data_dir)?;
    let mut metadata = None;
    if storage.exists(&metadata_dir)? {
        // One analysis: open reports what it found as `check` would.
        let opened = MetadataGroup::open_reporting(
            storage.clone(),
            &metadata_dir,
            &identity.unwrap_or(UNKNOWN_IDENTITY),
            metadata_wal_config(),
        );
        metadata = record_metadata(&mut builder, &metadata_dir, opened);
    }
    let mut partitions = BTreeMap::new();
    for key in keys {
        let dir = data_dir.join(PARTITIONS_DIR).join(key.dir_name());
        let label = key.label();
        let identity = identity
            .or_else(|| discover_identity(&storage, &dir))
            .unwrap_or(UNKNOWN_IDENTITY);
        let segment_size = metadata.as_ref().and_then(|group: &MetadataGroup<S>| {
            let stream = group.state().streams.get(&key.stream)?;
            Some(stream.topics.get(&key.topic)?.segment_size_bytes)
        });
        let config = partition_config(identity, key, segment_size);
        let opened = Partition::open(storage.clone(), &dir, config, mode);
        if let Some(partition) = builder.partition(&label, &dir, opened) {
            partitions.insert(key, partition);
        }
    }
    builder.report.findings.extend(node_findings);
    Ok((
        NodeState {
            identity,
            metadata,
            partitions,
        },
        builder.report,
    ))
}
