//! Partition segment files and the staged install: not built yet.
