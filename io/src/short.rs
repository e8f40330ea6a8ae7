//! [`ShortIo`]: wraps any storage so that reads and writes move a seeded, often small, number of
//! bytes per call. Code that assumes `read_at`/`write_at` move everything breaks under it; code
//! that loops (or uses `read_exact_at`/`write_all_at`) does not.

use std::path::Path;
use std::sync::{Arc, Mutex};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::error::Result;
use crate::storage::{
    DirEntry, FileLock, LockHolder, OpenMode, ReadFile, ReadStorage, Storage, WriteFile,
};

/// A storage whose files do short reads and writes.
#[derive(Clone, Debug)]
pub struct ShortIo<S> {
    inner: S,
    rng: Arc<Mutex<ChaCha8Rng>>,
}

impl<S> ShortIo<S> {
    pub fn new(inner: S, seed: u64) -> Self {
        Self {
            inner,
            rng: Arc::new(Mutex::new(ChaCha8Rng::seed_from_u64(seed))),
        }
    }
}

/// A file of [`ShortIo`].
#[derive(Debug)]
pub struct ShortFile<F> {
    inner: F,
    rng: Arc<Mutex<ChaCha8Rng>>,
}

impl<F> ShortFile<F> {
    /// At most how many of `len` bytes the next call moves: 1 to `len`, skewed small.
    fn limit(&self, len: usize) -> usize {
        if len <= 1 {
            return len;
        }
        let mut rng = self
            .rng
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if rng.random_bool(0.25) {
            len
        } else {
            rng.random_range(1..=len.min(64))
        }
    }
}

impl<F: ReadFile> ReadFile for ShortFile<F> {
    fn path(&self) -> &Path {
        self.inner.path()
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let limit = self.limit(buf.len());
        self.inner.read_at(offset, &mut buf[..limit])
    }

    fn len(&self) -> Result<u64> {
        self.inner.len()
    }

    fn seek_data(&self, offset: u64) -> Result<Option<u64>> {
        self.inner.seek_data(offset)
    }

    fn seek_hole(&self, offset: u64) -> Result<u64> {
        self.inner.seek_hole(offset)
    }
}

impl<F: WriteFile> WriteFile for ShortFile<F> {
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<usize> {
        let limit = self.limit(buf.len());
        self.inner.write_at(offset, &buf[..limit])
    }

    fn set_len(&self, len: u64) -> Result<()> {
        self.inner.set_len(len)
    }

    fn allocate(&self, offset: u64, len: u64) -> Result<()> {
        self.inner.allocate(offset, len)
    }

    fn sync_data(&self) -> Result<()> {
        self.inner.sync_data()
    }

    fn sync_all(&self) -> Result<()> {
        self.inner.sync_all()
    }
}

impl<S: ReadStorage> ReadStorage for ShortIo<S> {
    type Reader = ShortFile<S::Reader>;

    fn reads_in_parallel(&self) -> bool {
        false // short reads draw from the seeded stream
    }

    fn open_read(&self, path: impl AsRef<Path>) -> Result<Self::Reader> {
        Ok(ShortFile {
            inner: self.inner.open_read(path)?,
            rng: Arc::clone(&self.rng),
        })
    }

    fn list_dir(&self, path: impl AsRef<Path>) -> Result<Vec<DirEntry>> {
        self.inner.list_dir(path)
    }

    fn exists(&self, path: impl AsRef<Path>) -> Result<bool> {
        self.inner.exists(path)
    }

    fn lock_holder(&self, path: impl AsRef<Path>) -> Result<Option<LockHolder>> {
        self.inner.lock_holder(path)
    }
}

impl<S: Storage> Storage for ShortIo<S> {
    type File = ShortFile<S::File>;

    fn open(&self, path: impl AsRef<Path>, mode: OpenMode) -> Result<Self::File> {
        Ok(ShortFile {
            inner: self.inner.open(path, mode)?,
            rng: Arc::clone(&self.rng),
        })
    }

    fn create_dir(&self, path: impl AsRef<Path>) -> Result<()> {
        self.inner.create_dir(path)
    }

    fn sync_dir(&self, path: impl AsRef<Path>) -> Result<()> {
        self.inner.sync_dir(path)
    }

    fn rename(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> Result<()> {
        self.inner.rename(from, to)
    }

    fn hard_link(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> Result<()> {
        self.inner.hard_link(from, to)
    }

    fn unlink(&self, path: impl AsRef<Path>) -> Result<()> {
        self.inner.unlink(path)
    }

    fn remove_dir_all(&self, path: impl AsRef<Path>) -> Result<()> {
        self.inner.remove_dir_all(path)
    }

    fn sync_filesystem(&self) -> Result<()> {
        self.inner.sync_filesystem()
    }

    fn can_sync_filesystem(&self) -> bool {
        self.inner.can_sync_filesystem()
    }

    fn lock(&self, path: impl AsRef<Path>) -> Result<FileLock> {
        self.inner.lock(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SimStorage;

    #[test]
    fn calls_really_are_short_and_loops_still_complete() {
        let storage = ShortIo::new(SimStorage::new(1), 7);
        let file = storage.open("f", OpenMode::Create).unwrap();
        let data: Vec<u8> = (0..=255u8).cycle().take(4096).collect();
        let short_writes = (0..32)
            .filter(|_| file.write_at(0, &data).unwrap() < data.len())
            .count();
        assert!(
            short_writes >= 16,
            "only {short_writes} of 32 writes were short"
        );
        file.write_all_at(0, &data).unwrap();
        let mut back = vec![0; data.len()];
        assert!(file.read_at(0, &mut back).unwrap() <= data.len());
        file.read_exact_at(0, &mut back).unwrap();
        assert_eq!(back, data);
    }
}
