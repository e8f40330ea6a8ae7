//! [`ReadOnly`]: a storage that can only be read, enforced by the type system.

use std::path::Path;

use crate::error::Result;
use crate::storage::{DirEntry, LockHolder, ReadStorage};

/// Wraps a storage and exposes only [`ReadStorage`]. The inner storage is private, so code that
/// holds a `ReadOnly<S>` has no way to write, and files it opens are [`crate::ReadFile`]s only.
///
/// ```compile_fail
/// use iggy_io::{OpenMode, ReadOnly, SimStorage, Storage};
/// let storage = ReadOnly::new(SimStorage::new(1));
/// storage.open("x", OpenMode::Create); // ReadOnly is not a Storage: this does not compile
/// ```
///
/// ```compile_fail
/// use iggy_io::{ReadOnly, ReadStorage, SimStorage, WriteFile};
/// let storage = ReadOnly::new(SimStorage::new(1));
/// let file = storage.open_read("x").unwrap();
/// file.write_at(0, b"x"); // readers are not WriteFiles: this does not compile
/// ```
#[derive(Clone, Debug)]
pub struct ReadOnly<S> {
    inner: S,
}

impl<S: ReadStorage> ReadOnly<S> {
    pub fn new(inner: S) -> Self {
        Self { inner }
    }
}

impl<S: ReadStorage> ReadStorage for ReadOnly<S> {
    type Reader = S::Reader;

    fn reads_in_parallel(&self) -> bool {
        self.inner.reads_in_parallel()
    }

    fn open_read(&self, path: impl AsRef<Path>) -> Result<Self::Reader> {
        self.inner.open_read(path)
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
