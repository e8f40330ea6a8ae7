//! The dual-copy superblock of a consensus group: not built yet.
