//! A read-only view of a storage with byte ranges of some files replaced: boot verifies the log
//! as it will be once the carried entries are written back (`crate::ring`), without writing
//! anything, so that `Check` and `Open` decide on the same bytes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use iggy_io::{DirEntry, LockHolder, Mapping, ReadFile, ReadStorage};

/// Bytes that replace a file's at `offset`.
#[derive(Clone, Debug)]
pub(crate) struct Patch {
    pub offset: u64,
    pub bytes: Arc<[u8]>,
}

impl Patch {
    fn end(&self) -> u64 {
        self.offset + self.bytes.len() as u64
    }
}

/// `inner`, with the files named in `patches` read through their patches.
pub(crate) struct Overlay<'a, R> {
    inner: &'a R,
    patches: BTreeMap<PathBuf, Arc<[Patch]>>,
}

impl<'a, R> Overlay<'a, R> {
    pub(crate) fn new(inner: &'a R, patches: BTreeMap<PathBuf, Vec<Patch>>) -> Self {
        Self {
            inner,
            patches: patches
                .into_iter()
                .map(|(path, patches)| (path, patches.into()))
                .collect(),
        }
    }
}

/// A file of an [`Overlay`].
#[derive(Debug)]
pub(crate) enum OverlayFile<F> {
    Plain(F),
    Patched { file: F, patches: Arc<[Patch]> },
}

impl<F: ReadFile> ReadFile for OverlayFile<F> {
    fn path(&self) -> &Path {
        match self {
            Self::Plain(file) | Self::Patched { file, .. } => file.path(),
        }
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> iggy_io::Result<usize> {
        let (file, patches) = match self {
            Self::Plain(file) => return file.read_at(offset, buf),
            Self::Patched { file, patches } => (file, patches),
        };
        let len = self.len()?;
        if offset >= len {
            return Ok(0);
        }
        let count = usize::try_from((len - offset).min(buf.len() as u64)).unwrap_or(0);
        let buf = &mut buf[..count];
        let inner_len = file.len()?;
        let from_file = usize::try_from(inner_len.saturating_sub(offset))
            .unwrap_or(usize::MAX)
            .min(count);
        file.read_exact_at(offset, &mut buf[..from_file])?;
        buf[from_file..].fill(0);
        let end = offset + count as u64;
        for patch in patches.iter() {
            let from = patch.offset.max(offset);
            let to = patch.end().min(end);
            if from < to {
                let (a, b) = (
                    usize::try_from(from - offset).unwrap_or(0),
                    usize::try_from(to - offset).unwrap_or(0),
                );
                let at = usize::try_from(from - patch.offset).unwrap_or(0);
                buf[a..b].copy_from_slice(&patch.bytes[at..at + (b - a)]);
            }
        }
        Ok(count)
    }

    fn len(&self) -> iggy_io::Result<u64> {
        match self {
            Self::Plain(file) => file.len(),
            Self::Patched { file, patches } => {
                Ok(patches.iter().map(Patch::end).fold(file.len()?, u64::max))
            }
        }
    }

    fn map(&self) -> iggy_io::Result<Option<Mapping>> {
        match self {
            Self::Plain(file) => file.map(),
            Self::Patched { .. } => Ok(None),
        }
    }

    fn seek_data(&self, offset: u64) -> iggy_io::Result<Option<u64>> {
        match self {
            Self::Plain(file) => file.seek_data(offset),
            // Everything may be data: always safe.
            Self::Patched { .. } => Ok((offset < self.len()?).then_some(offset)),
        }
    }

    fn seek_hole(&self, offset: u64) -> iggy_io::Result<u64> {
        match self {
            Self::Plain(file) => file.seek_hole(offset),
            Self::Patched { .. } => self.len(),
        }
    }
}

impl<R: ReadStorage> ReadStorage for Overlay<'_, R> {
    type Reader = OverlayFile<R::Reader>;

    fn reads_in_parallel(&self) -> bool {
        self.inner.reads_in_parallel()
    }

    fn open_read(&self, path: impl AsRef<Path>) -> iggy_io::Result<Self::Reader> {
        let file = self.inner.open_read(path.as_ref())?;
        Ok(match self.patches.get(path.as_ref()) {
            Some(patches) => OverlayFile::Patched {
                file,
                patches: Arc::clone(patches),
            },
            None => OverlayFile::Plain(file),
        })
    }

    fn list_dir(&self, path: impl AsRef<Path>) -> iggy_io::Result<Vec<DirEntry>> {
        self.inner.list_dir(path)
    }

    fn exists(&self, path: impl AsRef<Path>) -> iggy_io::Result<bool> {
        self.inner.exists(path)
    }

    fn lock_holder(&self, path: impl AsRef<Path>) -> iggy_io::Result<Option<LockHolder>> {
        self.inner.lock_holder(path)
    }
}
