//! Relative paths under a storage root. A path is a list of plain names: absolute paths, `..`,
//! and anything else that could leave the root are refused before any system call is made.

use std::ffi::OsStr;
use std::path::{Component, Path};

use crate::error::{Error, ErrorKind, Op, Result};

/// Splits `path` into its plain names. The empty path and `.` name the root itself.
pub(crate) fn components(op: Op, path: &Path) -> Result<Vec<&OsStr>> {
    let mut names = Vec::new();
    for component in path.components() {
        match component {
            Component::Normal(name) => names.push(name),
            Component::CurDir => {}
            Component::ParentDir => {
                return Err(Error::new(
                    op,
                    path,
                    ErrorKind::InvalidPath("`..` is not allowed"),
                ));
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(Error::new(
                    op,
                    path,
                    ErrorKind::InvalidPath("path must be relative"),
                ));
            }
        }
    }
    Ok(names)
}

/// Splits `path` into its parent's names and its final name; the root itself has no final name.
pub(crate) fn split_parent(op: Op, path: &Path) -> Result<(Vec<&OsStr>, &OsStr)> {
    let mut names = components(op, path)?;
    let name = names
        .pop()
        .ok_or_else(|| Error::new(op, path, ErrorKind::InvalidPath("the root has no name")))?;
    Ok((names, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_are_refused() {
        for bad in ["../x", "a/../../x", "a/..", "/etc/x", "/"] {
            let error = components(Op::Open, Path::new(bad)).expect_err(bad);
            assert!(
                matches!(error.kind, ErrorKind::InvalidPath(_)),
                "{bad}: {error}"
            );
        }
        assert_eq!(
            components(Op::Open, Path::new("./a/b")).unwrap(),
            ["a", "b"]
        );
        assert!(components(Op::Open, Path::new("")).unwrap().is_empty());
        assert!(split_parent(Op::Unlink, Path::new(".")).is_err());
    }
}
