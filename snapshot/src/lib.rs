//! The metadata snapshot (`snapshot.bin`): not built yet.
