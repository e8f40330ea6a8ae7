//! The write-ahead log (see the WAL issue): not built yet. Generic over `iggy_io::Storage`.
