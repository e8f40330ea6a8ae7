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
    /// Published data is damaged in a replicated group: the group must be repaired from peers.
    NeedsPeerRepair,
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
        )
    }
}

/// One finding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub component: Component,
    /// `metadata` or `partition <stream>.<topic>.<partition>`.
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

/// What boot found in a node directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Report {
    pub schema: u32,
    pub data_dir: PathBuf,
    pub groups: Vec<Group>,
    pub findings: Vec<Finding>,
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

    /// The report as JSON in the documented schema, with the verdict and exit code.
    #[must_use]
    pub fn to_json(&self) -> serde_json::Value {
        let mut value = serde_json::to_value(self).unwrap_or_default();
        if let Some(object) = value.as_object_mut() {
            object.insert("exit_code".into(), self.exit_code().into());
            let verdict = self
                .groups
                .iter()
                .map(|g| g.status)
                .max()
                .unwrap_or(Status::Clean);
            object.insert(
                "verdict".into(),
                serde_json::to_value(verdict).unwrap_or_default(),
            );
        }
        value
    }

    /// The human report.
    #[must_use]
    pub fn render(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let _ = writeln!(out, "iggy-fsck {}", self.data_dir.display());
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
                // The line names the file and offset first; a reason that starts with the file
                // again (an error's own text) is not repeated.
                let file = finding.file.display().to_string();
                let what = finding
                    .what
                    .strip_prefix(file.as_str())
                    .and_then(|rest| rest.strip_prefix(": "))
                    .unwrap_or(&finding.what);
                let _ = writeln!(
                    out,
                    "      {:?} {file} @{}: {what} -> {}{}",
                    finding.component,
                    finding.offset,
                    serde_json::to_value(finding.action)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_default(),
                    if finding.bytes > 0 {
                        format!(" ({} bytes)", finding.bytes)
                    } else {
                        String::new()
                    }
                );
            }
        }
        let verdict = match self.exit_code() {
            exit::CLEAN => "clean: boot changes nothing",
            exit::REPAIR => "boot would repair locally, without losing published data",
            exit::NEEDS_PEER_REPAIR => "a group needs repair from its peers",
            exit::REFUSE => "boot would refuse",
            _ => "an I/O error stopped the check",
        };
        let _ = writeln!(out, "verdict: {verdict} (exit {})", self.exit_code());
        out
    }
}
