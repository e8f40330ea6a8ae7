//! `iggy-fsck`: boot recovery in check mode (see the recovery issue): not built yet.
