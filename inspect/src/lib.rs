//! `iggy-inspect`: the read-only decoder of every file kind (see the recovery issue): not built yet.
