//! A partition's message log on the WAL (segments, sparse index, retention, staged install: to
//! come) and its consumer offsets ([`offsets`]).

pub mod offsets;
