//! What node boot found and does: a list of findings, a verdict per group, and the exit code
//! `iggy-fsck` derives from them. The JSON form (`serde`) is the stable schema documented in
//! `docs/recovery.md`, "fsck JSON".

use std::path::PathBuf;

use serde::Serialize;

/// The schema version of the JSON report.
pub const SCHEMA_VERSION: u32 = 1;

/// Which part of a group a finding is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Component {
    Node,
    Superblock,
    Wal,
    Snapshot,
    Segments,
    Index,
    Offsets,
    Install,
}

impl Component {
    /// The name the JSON uses.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Node => "node",
            Self::Superblock => "superblock",
            Self::Wal => "wal",
            Self::Snapshot => "snapshot",
            Self::Segments => "segments",
            Self::Index => "index",
            Self::Offsets => "offsets",
            Self::Install => "install",
        }
    }
}

/// What boot does about a finding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    /// Nothing (reported for information).
    None,
    /// Remove a leftover file or directory (a temp file, a finished install's tree).
    RemoveLeftover,
    /// Zero or remove bytes past the published frontier.
    DiscardUnpublished,
    /// Rewrite a segment's index from its log.
    RebuildIndex,
    /// Restore a partition's old files from an install that did not commit.
    RollbackInstall,
    /// Rewrite a damaged or stale copy (superblock copy, frontier slot) from the good one.
    RepairCopy,
    /// Create what a crash left uncreated: a group's log, or the first file of an empty log.
    FinishCreate,
    /// Finish a metadata snapshot install whose commit point (the superblock's checkpoint) was
    /// durable: rename its staged snapshot over `snapshot.bin`, make the log anew after the
    /// checkpoint.
    FinishInstall,
    /// Write entries a publication carried in the frontier file's ring back into the log.
    RestoreCarried,
    /// Carry out a committed entry the crashed process had not applied yet (a consumer offset
    /// store).
    ApplyCommitted,
    /// Published data is damaged or missing in a replicated group: the group must be repaired
    /// from peers.
    NeedsPeerRepair,
    /// The node's boot moved a damaged replicated partition's files aside (into `.damaged-*`
    /// in its directory, kept for inspection) and created it anew, empty, in its old views,
    /// behind a rebuild marker: its replica catches up from its peers.
    RebuildFromPeers,
    /// Boot refuses the group.
    Refuse,
}

impl Action {
    /// Whether boot changes the disk for it, locally and without losing published data.
    #[must_use]
    pub fn is_local_repair(self) -> bool {
        matches!(
            self,
            Self::RemoveLeftover
                | Self::DiscardUnpublished
                | Self::RebuildIndex
                | Self::RollbackInstall
                | Self::RepairCopy
                | Self::FinishCreate
                | Self::FinishInstall
                | Self::RestoreCarried
                | Self::ApplyCommitted
        )
    }

    /// The one name of the action, in the text reports and the JSON of both tools.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::RemoveLeftover => "remove-leftover",
            Self::DiscardUnpublished => "discard-unpublished",
            Self::RebuildIndex => "rebuild-index",
            Self::RollbackInstall => "rollback-install",
            Self::RepairCopy => "repair-copy",
            Self::FinishCreate => "finish-create",
            Self::FinishInstall => "finish-install",
            Self::RestoreCarried => "restore-carried",
            Self::ApplyCommitted => "apply-committed",
            Self::NeedsPeerRepair => "needs-peer-repair",
            Self::RebuildFromPeers => "rebuild-from-peers",
            Self::Refuse => "refuse",
        }
    }
}

/// One finding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub component: Component,
    /// What kind of finding, a stable name (`docs/recovery.md` lists every kind, its action and
    /// what an operator does next).
    pub kind: &'static str,
    /// `metadata`, `partition <stream>.<topic>.<partition>` or `node`.
    pub group: String,
    /// Relative to the data directory.
    pub file: PathBuf,
    pub offset: u64,
    /// What was found, in words.
    pub what: String,
    pub action: Action,
    /// Bytes the action affects (0 when it does not apply).
    pub bytes: u64,
}

/// A group's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    Clean,
    /// Boot repairs it locally without losing published data.
    Repair,
    NeedsPeerRepair,
    Refuse,
}

/// One group's summary.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Group {
    pub group: String,
    pub dir: PathBuf,
    pub status: Status,
    /// The refusal, when there is one.
    pub error: Option<String>,
    /// Whether the refusal is an I/O failure (not a verdict about the data).
    pub io_error: bool,
}

/// What a walk looked at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Consensus groups: the metadata group and every partition, those refused included.
    pub groups: usize,
    /// Regular files in the node directory.
    pub files: u64,
    /// Their lengths, summed.
    pub bytes: u64,
    /// Of the groups' logs, the bytes of files boot took from their seals (and, for segments,
    /// their facts from their index summaries) without reading them: damage there is found by
    /// the read that serves it or by `--deep`, which reads everything (0 then).
    pub sealed_bytes: u64,
    /// Of the files, retired log files kept for reuse (`{n:020}.spare`, `iggy_wal::Config::
    /// spare_files`): not part of any log, and read by nothing until a log takes one.
    #[serde(skip_serializing_if = "is_zero")]
    pub spare_files: u64,
    /// Wall time of the check, in milliseconds.
    pub elapsed_ms: u64,
}

/// Who holds the node's lock, when a check found it held (see `iggy_recovery::lock`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct InUse {
    /// The pid the holder recorded (`None` when it could not be read).
    pub pid: Option<u32>,
}

/// What boot found in a node directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Report {
    pub schema: u32,
    pub data_dir: PathBuf,
    /// Set when another process held the node's lock during the check: the node is in use and
    /// the verdict may already be stale.
    pub in_use: Option<InUse>,
    pub groups: Vec<Group>,
    pub findings: Vec<Finding>,
    pub summary: Summary,
    /// Each partition that boots: its segments as boot verified them (for `iggy-inspect node`;
    /// not part of fsck's JSON schema).
    #[serde(skip)]
    pub partitions: Vec<PartitionSummary>,
}

/// A partition that boots, as boot verified it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionSummary {
    pub group: String,
    pub next_offset: u64,
    pub segments: Vec<iggy_segments::SegmentInfo>,
    pub consumer_offsets: usize,
}

/// `iggy-fsck`'s exit codes (DESIGN §6).
pub mod exit {
    pub const CLEAN: u8 = 0;
    pub const REPAIR: u8 = 1;
    pub const NEEDS_PEER_REPAIR: u8 = 2;
    pub const REFUSE: u8 = 4;
    pub const USAGE_OR_IO: u8 = 8;
}

/// What an operator does next, for a verdict (an exit code): the text report's last line, and
/// the table in `docs/recovery.md`.
#[must_use]
pub fn next_step(exit_code: u8) -> &'static str {
    match exit_code {
        exit::CLEAN => "start the node.",
        exit::REPAIR => {
            "start the node: boot applies this plan and loses no published data; or run \
             `iggy-fsck --repair` to apply it now and check again."
        }
        exit::NEEDS_PEER_REPAIR => {
            "the groups marked NEEDS REPAIR FROM PEERS lost or damaged published data that the \
             other replicas hold. Check the disk (dmesg, SMART) and that every volume is \
             mounted, then start the node: it moves each such partition's files into \
             `.damaged-<incarnation>` in the partition's directory (kept: `iggy-inspect` shows \
             the damage; remove it once inspected) and rebuilds the partition from the other \
             replicas. A partition with no readable superblock copy, and a damaged metadata \
             group, cannot be rebuilt this way: the node refuses to start. Do not delete their \
             files."
        }
        exit::REFUSE => {
            "boot will not open the groups marked BOOT REFUSES and changes none of their files. \
             Read each reason: an unknown version needs a build that reads it; files of another \
             node, group or log must be moved back where they belong; in a single-replica \
             cluster damaged data can only come back from a backup."
        }
        _ => "fix the error above (a path, permissions, a failing disk) and run iggy-fsck again.",
    }
}

impl Report {
    /// The highest applicable exit code.
    #[must_use]
    pub fn exit_code(&self) -> u8 {
        if self.groups.iter().any(|g| g.io_error) {
            return exit::USAGE_OR_IO;
        }
        match self.groups.iter().map(|g| g.status).max() {
            None | Some(Status::Clean) => exit::CLEAN,
            Some(Status::Repair) => exit::REPAIR,
            Some(Status::NeedsPeerRepair) => exit::NEEDS_PEER_REPAIR,
            Some(Status::Refuse) => exit::REFUSE,
        }
    }

    /// Whether boot changes nothing and refuses nothing.
    #[must_use]
    pub fn is_clean(&self) -> bool {
        self.exit_code() == exit::CLEAN
    }

    /// The planned actions, in a canonical order (what a check and an open must agree on).
    #[must_use]
    pub fn plan(&self) -> Vec<(String, PathBuf, u64, Action, u64)> {
        let mut plan: Vec<_> = self
            .findings
            .iter()
            .filter(|f| f.action != Action::None)
            .map(|f| (f.group.clone(), f.file.clone(), f.offset, f.action, f.bytes))
            .collect();
        plan.sort();
        plan
    }

    /// The files boot changes (creates, rewrites or removes) for its plan: each local
    /// repair's file. A crash test compares them with what a boot really changed.
    #[must_use]
    pub fn planned_files(&self) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = self
            .findings
            .iter()
            .filter(|f| f.action.is_local_repair())
            .map(|f| f.file.clone())
            .collect();
        files.sort();
        files.dedup();
        files
    }

    /// The verdict's name in the JSON.
    fn verdict(&self) -> Status {
        self.groups
            .iter()
            .map(|g| g.status)
            .max()
            .unwrap_or(Status::Clean)
    }

    /// The report as JSON in the documented schema, with the verdict and exit code.
    #[must_use]
    pub fn to_json(&self) -> serde_json::Value {
        let mut value = serde_json::to_value(self).unwrap_or_default();
        if let Some(object) = value.as_object_mut() {
            object.insert("exit_code".into(), self.exit_code().into());
            object.insert(
                "verdict".into(),
                serde_json::to_value(self.verdict()).unwrap_or_default(),
            );
        }
        value
    }

    /// The human report: a line per group with its findings, the node's own findings, a
    /// summary of what was checked, the verdict and what to do next.
    #[must_use]
    pub fn render(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let _ = writeln!(out, "iggy-fsck {}", self.data_dir.display());
        if let Some(in_use) = &self.in_use {
            let holder = in_use.pid.map_or_else(
                || "another process".to_string(),
                |pid| format!("process {pid}"),
            );
            let _ = writeln!(
                out,
                "  IN USE: {holder} holds the node's lock: it may be writing, so this verdict may \
                 already be stale"
            );
        }
        for group in &self.groups {
            let status = match group.status {
                Status::Clean => "clean",
                Status::Repair => "boot repairs locally",
                Status::NeedsPeerRepair => "NEEDS REPAIR FROM PEERS",
                Status::Refuse => "BOOT REFUSES",
            };
            let _ = writeln!(out, "  {:<28} {status}", group.group);
            let findings: Vec<&Finding> = self
                .findings
                .iter()
                .filter(|f| f.group == group.group)
                .collect();
            if let Some(error) = &group.error
                && !findings.iter().any(|f| &f.what == error)
            {
                // A refusal that no finding already states.
                let _ = writeln!(out, "      {error}");
            }
            for finding in findings {
                render_finding(&mut out, finding);
            }
        }
        let node: Vec<&Finding> = self.findings.iter().filter(|f| f.group == "node").collect();
        if !node.is_empty() {
            let _ = writeln!(out, "  node directory");
            for finding in node {
                render_finding(&mut out, finding);
            }
        }
        let summary = &self.summary;
        let _ = writeln!(
            out,
            "checked {} group(s), {} file(s), {} bytes in {} ms",
            summary.groups, summary.files, summary.bytes, summary.elapsed_ms
        );
        if summary.sealed_bytes > 0 {
            let _ = writeln!(
                out,
                "  of them, {} bytes of sealed log files were taken from their seals, not read \
                 (--deep reads and verifies every byte)",
                summary.sealed_bytes
            );
        }
        if summary.spare_files > 0 {
            let _ = writeln!(
                out,
                "  of them, {} spare log file(s): retired files a log keeps for reuse (not part of \
                 any log; the next file it needs is one of them, renamed)",
                summary.spare_files
            );
        }
        let verdict = match self.exit_code() {
            exit::CLEAN => "clean: boot changes nothing",
            exit::REPAIR => "boot would repair locally, without losing published data",
            exit::NEEDS_PEER_REPAIR => "a group needs repair from its peers",
            exit::REFUSE => "boot would refuse",
            _ => "an I/O error stopped the check",
        };
        let _ = writeln!(out, "verdict: {verdict} (exit {})", self.exit_code());
        let _ = writeln!(out, "next: {}", next_step(self.exit_code()));
        out
    }
}

/// One finding line: `<component> <file> @<offset>: <what> -> <action> (<bytes> bytes)`. A
/// reason that starts with the file again (an error's own text) is not repeated.
fn render_finding(out: &mut String, finding: &Finding) {
    use std::fmt::Write;
    let file = finding.file.display().to_string();
    let what = finding
        .what
        .strip_prefix(file.as_str())
        .and_then(|rest| rest.strip_prefix(": "))
        .unwrap_or(&finding.what);
    let _ = writeln!(
        out,
        "      {} {file} @{}: {what} -> {}{}",
        finding.component.name(),
        finding.offset,
        finding.action.name(),
        if finding.bytes > 0 {
            format!(" ({} bytes)", finding.bytes)
        } else {
            String::new()
        }
    );
}

#[allow(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if passes a reference"
)]
fn is_zero(value: &u64) -> bool {
    *value == 0
}
