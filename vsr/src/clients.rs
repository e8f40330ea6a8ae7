//! The replica's client table: the last committed request of each client session and its reply,
//! so a request executes at most once and a replay under its original number gets the original
//! reply. Every replica records replies as it commits, so whichever becomes primary answers
//! replays the same way. Bounded: the least recently used session goes first.

use std::collections::BTreeMap;

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
    max: usize,
}

impl ClientTable {
    #[must_use]
    pub fn new(max: usize) -> Self {
        Self {
            sessions: BTreeMap::new(),
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
        if !self.sessions.contains_key(&client) && self.sessions.len() >= self.max {
            // The session whose last request is the oldest op (the lowest client among equals):
            // every replica evicts the same one.
            if let Some(oldest) = self
                .sessions
                .iter()
                .min_by_key(|(client, session)| (session.op, **client))
                .map(|(client, _)| *client)
            {
                self.sessions.remove(&oldest);
            }
        }
        self.sessions.insert(client, session);
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
