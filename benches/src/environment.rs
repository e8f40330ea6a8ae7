//! What a benchmark measured: the directory, the file system under it, its device and mount
//! options, and a warning when that file system is not a disk (tmpfs, overlay, network).

use std::path::{Path, PathBuf};

use serde::Serialize;

/// Where a benchmark ran.
#[derive(Clone, Debug, Serialize)]
pub struct Environment {
    pub dir: PathBuf,
    pub mount_point: Option<PathBuf>,
    pub file_system: Option<String>,
    /// The device (or pseudo source) mounted there.
    pub device: Option<String>,
    pub mount_options: Option<String>,
    /// Why these are not disk figures, when they are not.
    pub warning: Option<String>,
}

/// The environment of `dir`.
#[must_use]
pub fn describe(dir: &Path) -> Environment {
    let mount = iggy_io::mount_info(dir);
    Environment {
        dir: dir.to_path_buf(),
        mount_point: mount.as_ref().map(|m| m.mount_point.clone()),
        file_system: mount.as_ref().map(|m| m.file_system.clone()),
        device: mount.as_ref().map(|m| m.source.clone()),
        mount_options: mount.as_ref().map(|m| m.options.clone()),
        warning: mount.as_ref().and_then(iggy_io::MountInfo::warning),
    }
}

/// Two lines for a text report: what was measured, and the warning if any.
#[must_use]
pub fn render(environment: &Environment) -> String {
    let mut out = match (
        &environment.device,
        &environment.file_system,
        &environment.mount_point,
    ) {
        (Some(device), Some(file_system), Some(mount_point)) => format!(
            "measured in {}: {device} ({file_system}, {}) mounted at {}\n",
            environment.dir.display(),
            environment.mount_options.as_deref().unwrap_or(""),
            mount_point.display()
        ),
        _ => format!(
            "measured in {} (its file system could not be named: no /proc/self/mountinfo)\n",
            environment.dir.display()
        ),
    };
    if let Some(warning) = &environment.warning {
        out.push_str(&format!("WARNING: {warning}\n"));
    }
    out
}
