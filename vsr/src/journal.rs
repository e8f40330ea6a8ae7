//! A replica's view of its log in memory: every header it knows to be part of the log it holds
//! (from its own journal, a `StartView`, the view change merge, or a prepare of its view's
//! primary), the bodies it holds (the prepare ring that serves repair), and how far its storage
//! has journaled them.
//!
//! Invariants:
//! - every header in the journal is known good: it is in the replica's storage, or came from the
//!   authority of the view (the primary's prepares and `StartView`, the merged log), or was
//!   verified by the hash chain against one that is;
//! - `storage_head` is the last op handed to storage (in order, each linked to the one before),
//!   `journaled_head` the last whose journal completed; `journaled_head <= storage_head`;
//! - bodies are evicted only for ops at or below the commit point, oldest first, once the ring
//!   holds more than its caps.

use std::collections::BTreeMap;

use iggy_format::{Checksum, Header};

/// One op of the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Slot {
    pub header: Header,
    pub body: Option<Vec<u8>>,
}

/// The log in memory.
#[derive(Clone, Debug)]
pub(crate) struct Journal {
    slots: BTreeMap<u64, Slot>,
    /// The op just below the first slot and its checksum: the anchor of the chain (op 0 and
    /// checksum 0 for a log that starts at op 1).
    base: (u64, Checksum),
    pub storage_head: u64,
    pub journaled_head: u64,
    body_bytes: u64,
}

impl Journal {
    /// A journal whose storage holds everything up to `head` (checksum `head_checksum`), and
    /// nothing in memory yet.
    pub fn new(head: u64, head_checksum: Checksum) -> Self {
        Self {
            slots: BTreeMap::new(),
            base: (head, head_checksum),
            storage_head: head,
            journaled_head: head,
            body_bytes: 0,
        }
    }

    /// The highest op with a known header (or the base).
    pub fn head(&self) -> u64 {
        self.slots
            .keys()
            .next_back()
            .copied()
            .unwrap_or(self.base.0)
    }

    /// The lowest op the journal knows (the base's successor when there are slots).
    pub fn oldest(&self) -> u64 {
        self.slots.keys().next().copied().unwrap_or(self.base.0 + 1)
    }

    pub fn slot(&self, op: u64) -> Option<&Slot> {
        self.slots.get(&op)
    }

    pub fn header(&self, op: u64) -> Option<&Header> {
        self.slots.get(&op).map(|s| &s.header)
    }

    /// The checksum of op `op`, if known (a slot, or the base).
    pub fn checksum(&self, op: u64) -> Option<Checksum> {
        match self.slots.get(&op) {
            Some(slot) => Some(slot.header.checksum()),
            None if op == self.base.0 => Some(self.base.1),
            None => None,
        }
    }

    pub fn has_body(&self, op: u64) -> bool {
        self.slots.get(&op).is_some_and(|s| s.body.is_some())
    }

    /// Records a known-good header (and its body, if given). An existing slot of the same
    /// checksum keeps its body unless one is given.
    pub fn insert(&mut self, header: Header, body: Option<Vec<u8>>) {
        let op = header.op;
        if op <= self.base.0 {
            return;
        }
        match self.slots.get_mut(&op) {
            Some(slot) if slot.header.checksum() == header.checksum() => {
                if slot.body.is_none()
                    && let Some(body) = body
                {
                    self.body_bytes += body.len() as u64;
                    slot.body = Some(body);
                }
            }
            _ => {
                if let Some(old) = self.slots.insert(op, Slot { header, body: None }) {
                    self.body_bytes -= old.body.map_or(0, |b| b.len() as u64);
                }
                if let Some(body) = body {
                    self.body_bytes += body.len() as u64;
                    if let Some(slot) = self.slots.get_mut(&op) {
                        slot.body = Some(body);
                    }
                }
            }
        }
    }

    /// Forgets every slot after `op` (the log there is not this view's). What storage holds is
    /// the caller's to truncate.
    pub fn drop_after(&mut self, op: u64) {
        let removed = self.slots.split_off(&(op + 1));
        for slot in removed.into_values() {
            self.body_bytes -= slot.body.map_or(0, |b| b.len() as u64);
        }
    }

    /// Storage dropped everything after `op` (what a truncate effect does): slots stay (their
    /// headers may still be this view's), but nothing after `op` is journaled any more.
    pub fn storage_truncated(&mut self, op: u64) {
        self.storage_head = self.storage_head.min(op);
        self.journaled_head = self.journaled_head.min(op);
    }

    /// The headers from `from` to `to` the journal knows, in order.
    pub fn headers(&self, from: u64, to: u64) -> Vec<Header> {
        if from > to {
            return Vec::new();
        }
        self.slots.range(from..=to).map(|(_, s)| s.header).collect()
    }

    /// Evicts bodies (and slots) at or below `commit` from the oldest while the ring holds
    /// more than `entries_max` slots or `bytes_max` body bytes. The newest evicted op becomes
    /// the base.
    pub fn evict(&mut self, commit: u64, entries_max: usize, bytes_max: u64) {
        while self.slots.len() > entries_max || self.body_bytes > bytes_max {
            let Some((&op, _)) = self.slots.first_key_value() else {
                break;
            };
            if op > commit || op > self.journaled_head {
                break;
            }
            if let Some(slot) = self.slots.remove(&op) {
                self.body_bytes -= slot.body.map_or(0, |b| b.len() as u64);
                self.base = (op, slot.header.checksum());
            }
        }
    }

    /// Storage now holds the state through `op` (a snapshot installed) and nothing of the log
    /// after it: slots at or below `op` are forgotten, `op` becomes the base, the ones above
    /// stay (headers of the view above the checkpoint).
    pub fn rebase(&mut self, op: u64, checksum: Checksum) {
        let above = self.slots.split_off(&(op + 1));
        for slot in std::mem::replace(&mut self.slots, above).into_values() {
            self.body_bytes -= slot.body.map_or(0, |b| b.len() as u64);
        }
        self.base = (op, checksum);
        self.storage_head = op;
        self.journaled_head = op;
    }

    /// How many slots and body bytes the ring holds.
    pub fn size(&self) -> (usize, u64) {
        (self.slots.len(), self.body_bytes)
    }
}
