//! Client sessions: for each client, the last request of it the partition's log holds, the op
//! that carries it and what the client was told (a batch's base offset and message count). A
//! replica's client table starts from the committed ones at boot, so a request replayed after a
//! restart is answered with its original reply instead of being appended again
//! (`docs/vsr.md`, "Dedup across restarts").
//!
//! Invariants:
//! - sessions are derived from the log alone: every entry whose header names a client (`client`
//!   not 0) is its client's session from that op on, until a later request of the client;
//! - a segment keeps the newest session of each of its clients (in its index's summary,
//!   `docs/format.md`, "Segment index"); boot takes a summary's sessions only when every one of
//!   them is at or below the commit point, else it reads the segment, so the sessions it hands
//!   on are exactly the committed ones;
//! - at most [`SESSIONS_MAX`] are handed on, the newest by op (what the replica's table keeps,
//!   least recently used first out).

use std::collections::BTreeMap;

use iggy_format::{Header, operation};

use crate::entry::Kind;

/// Sessions boot hands on, the newest by op (the replica's client table's default size).
pub const SESSIONS_MAX: usize = 16_384;

/// One client's newest request in the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Session {
    pub client: u128,
    pub request: u64,
    /// The entry that carries it.
    pub op: u64,
    /// The entry's operation ([`operation::MESSAGES`], [`operation::CONSUMER_OFFSET`], ...).
    pub operation: u32,
    /// A batch's first offset and message count (0 for other kinds).
    pub base_offset: u64,
    pub message_count: u32,
    /// The request's checksum, as the entry's header records it.
    pub request_checksum: u128,
}

impl Session {
    /// The session `header`'s entry (of kind `kind`) opens, if it names a client.
    #[must_use]
    pub fn of(header: &Header, kind: &Kind) -> Option<Self> {
        if header.client == 0 {
            return None;
        }
        let (base_offset, message_count) = match kind {
            Kind::Messages(batch) => (batch.base_offset, batch.message_count),
            _ => (0, 0),
        };
        Some(Self {
            client: header.client,
            request: header.request,
            op: header.op,
            operation: header.operation,
            base_offset,
            message_count,
            request_checksum: header.request_checksum,
        })
    }

    /// The reply the client got for it: a batch's base offset (u64) and message count (u32),
    /// little-endian; nothing for other kinds.
    #[must_use]
    pub fn reply(&self) -> Vec<u8> {
        if self.operation != operation::MESSAGES {
            return Vec::new();
        }
        let mut reply = self.base_offset.to_le_bytes().to_vec();
        reply.extend_from_slice(&self.message_count.to_le_bytes());
        reply
    }
}

/// Records `session` in `sessions` (sorted by client, the newest of each).
pub(crate) fn note(sessions: &mut Vec<Session>, session: Session) {
    match sessions.binary_search_by_key(&session.client, |s| s.client) {
        Ok(at) => {
            if sessions[at].op <= session.op {
                sessions[at] = session;
            }
        }
        Err(at) => sessions.insert(at, session),
    }
}

/// The committed sessions of a log: the newest at or below `commit` of each client, at most
/// [`SESSIONS_MAX`] (the newest by op).
#[must_use]
pub fn committed(all: impl IntoIterator<Item = Session>, commit: u64) -> Vec<Session> {
    let mut newest: BTreeMap<u128, Session> = BTreeMap::new();
    for session in all {
        if session.op > commit {
            continue;
        }
        let slot = newest.entry(session.client).or_insert(session);
        if slot.op < session.op {
            *slot = session;
        }
    }
    let mut sessions: Vec<Session> = newest.into_values().collect();
    if sessions.len() > SESSIONS_MAX {
        sessions.sort_by_key(|s| std::cmp::Reverse((s.op, s.client)));
        sessions.truncate(SESSIONS_MAX);
        sessions.sort_by_key(|s| s.client);
    }
    sessions
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(client: u128, request: u64, op: u64) -> Session {
        Session {
            client,
            request,
            op,
            operation: operation::MESSAGES,
            base_offset: op * 10,
            message_count: 10,
            request_checksum: u128::from(op) << 64 | u128::from(request),
        }
    }

    #[test]
    fn the_newest_committed_session_of_each_client_is_kept() {
        let all = [
            session(1, 1, 1),
            session(2, 1, 2),
            session(1, 2, 3),
            session(2, 2, 5),
        ];
        // Op 5 is past the commit point: client 2's committed session is its request 1.
        assert_eq!(committed(all, 4), vec![session(1, 2, 3), session(2, 1, 2)]);
        let mut noted = Vec::new();
        for s in all {
            note(&mut noted, s);
        }
        assert_eq!(noted, vec![session(1, 2, 3), session(2, 2, 5)]);
    }

    #[test]
    fn at_most_the_newest_sessions_max_are_kept() {
        let all = (0..SESSIONS_MAX as u64 + 10).map(|i| session(u128::from(i) + 1, 1, i + 1));
        let kept = committed(all, u64::MAX);
        assert_eq!(kept.len(), SESSIONS_MAX);
        // The ten oldest by op (clients 1..=10) went.
        assert_eq!(kept.first().map(|s| s.client), Some(11));
    }

    #[test]
    fn a_batch_reply_is_its_base_offset_and_count() {
        let s = session(7, 1, 3);
        assert_eq!(
            s.reply(),
            [30u64.to_le_bytes().as_slice(), &10u32.to_le_bytes()].concat()
        );
        let store = Session {
            operation: operation::CONSUMER_OFFSET,
            ..s
        };
        assert!(store.reply().is_empty());
    }
}
