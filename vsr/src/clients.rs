//! The replica's client table: the last committed request of each client session and its reply,
//! so a request executes at most once and a replay under its original number gets the original
//! reply. Every replica records replies as it commits, so whichever becomes primary answers
//! replays the same way. Bounded: the least recently used session goes first.

use std::collections::{BTreeMap, BTreeSet};

/// One client's last committed request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Session {
    pub request: u64,
    pub op: u64,
    pub reply: Vec<u8>,
    /// The checksum of the request as its prepare recorded it (`Header::request_checksum`), so
    /// a replay under the same number with another body is told apart from a true replay. 0:
    /// unknown (a session boot handed over from a log or a snapshot that does not keep it).
    pub request_checksum: u128,
}

/// Sessions by client.
#[derive(Clone, Debug, Default)]
pub struct ClientTable {
    sessions: BTreeMap<u128, Session>,
    /// Every session as (its op, its client): the first is the one a full table evicts, found
    /// without a scan of every session.
    by_op: BTreeSet<(u64, u128)>,
    max: usize,
}

impl ClientTable {
    #[must_use]
    pub fn new(max: usize) -> Self {
        Self {
            sessions: BTreeMap::new(),
            by_op: BTreeSet::new(),
            max: max.max(1),
        }
    }

    #[must_use]
    pub fn get(&self, client: u128) -> Option<&Session> {
        self.sessions.get(&client)
    }

    /// Records `session`, the committed request of `client` (its op and reply). An older request
    /// never replaces a newer one.
    pub fn record(&mut self, client: u128, session: Session) {
        if let Some(newer) = self.sessions.get(&client)
            && newer.request > session.request
        {
            return;
        }
        if !self.sessions.contains_key(&client)
            && self.sessions.len() >= self.max
            && let Some((_, oldest)) = self.by_op.pop_first()
        {
            // The session whose last request is the oldest op (the lowest client among equals):
            // every replica evicts the same one.
            self.sessions.remove(&oldest);
        }
        let op = session.op;
        if let Some(old) = self.sessions.insert(client, session) {
            self.by_op.remove(&(old.op, client));
        }
        self.by_op.insert((op, client));
    }

    #[must_use]
    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::{ClientTable, Session};

    fn session(request: u64, op: u64) -> Session {
        Session {
            request,
            op,
            reply: Vec::new(),
            request_checksum: 0,
        }
    }

    proptest! {
        /// The table keeps exactly the sessions a scan for the oldest (op, client) would keep,
        /// whatever the order of records: every replica evicts the same sessions, and the index
        /// that finds the oldest never drifts from the sessions it indexes.
        #[test]
        fn evicts_the_session_of_the_oldest_op_as_a_scan_would(
            records in proptest::collection::vec((0u128..12, 0u64..6, 0u64..40), 1..200),
            max in 1usize..8,
        ) {
            let mut table = ClientTable::new(max);
            let mut model: std::collections::BTreeMap<u128, (u64, u64)> = Default::default();
            for (client, request, op) in records {
                table.record(client, session(request, op));
                if model.get(&client).is_some_and(|(r, _)| *r > request) {
                    continue;
                }
                if !model.contains_key(&client) && model.len() >= max {
                    let oldest = model
                        .iter()
                        .min_by_key(|(c, (_, op))| (*op, **c))
                        .map(|(c, _)| *c)
                        .unwrap();
                    model.remove(&oldest);
                }
                model.insert(client, (request, op));
                prop_assert_eq!(table.len(), model.len());
                prop_assert_eq!(table.by_op.len(), model.len());
                for (c, (r, o)) in &model {
                    let held = table.get(*c).map(|s| (s.request, s.op));
                    prop_assert_eq!(held, Some((*r, *o)));
                }
            }
        }
    }
}
