//! Appending to a partition: the primary prepares an entry (stamps a batch's offsets and
//! timestamp once, builds the prepare header) and journals it; a backup journals the primary's
//! prepare byte for byte after validating it. Either way the entry is queued in the WAL,
//! durable once a publication covers it.

use iggy_format::batch;
use iggy_format::{Header, Position, PrepareMeta, operation};
use iggy_io::Storage;
use iggy_wal::Naming;

use crate::boot::add_batch;
use crate::entry::{self, Kind, OffsetEntry};
use crate::error::PartitionError;
use crate::offsets::ConsumerKind;
use crate::partition::{Partition, Segment, State};
use crate::report::SegmentInfo;

/// What a primary's request asks the partition to log.
#[derive(Debug)]
pub enum Request<'a> {
    /// A client's message batch, stamped in place with its offsets and timestamp.
    Messages(&'a mut [u8]),
    /// The same, owned: stamped in place and kept as the entry's body, never copied (a
    /// primary's hot path: the batch is up to `max_request_bytes`).
    Batch(Vec<u8>),
    /// A consumer's offset.
    StoreOffset {
        kind: ConsumerKind,
        id: u32,
        offset: u64,
    },
    /// Nothing: the op a new primary commits to start its view.
    Noop,
}

/// An entry a primary prepared: the prepare to send to the backups, as journaled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prepared {
    pub header: Header,
    pub body: Vec<u8>,
    pub appended: Appended,
}

/// What an append did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Appended {
    pub op: u64,
    /// The first offset of a batch (the next offset, for other kinds).
    pub base_offset: u64,
    /// Messages in a batch (0 for other kinds).
    pub message_count: u32,
    /// The entry's timestamp, in microseconds.
    pub timestamp: u64,
}

impl<S: Storage + Clone> Partition<S> {
    /// Validates a client's batch, stamps it with the next offset and `now_us` (kept
    /// non-decreasing), and queues it in the WAL (a single node's append: view 0, no client).
    /// Durable once published ([`Partition::publish`]).
    pub fn append(&self, batch: &mut [u8], now_us: u64) -> Result<Appended, PartitionError> {
        let meta = PrepareMeta {
            now_us,
            ..PrepareMeta::default()
        };
        Ok(self.prepare(Request::Messages(batch), &meta)?.appended)
    }

    /// The primary's half: builds the next entry from `request` (a batch is validated and
    /// stamped with the next offset and the timestamp, once, here), journals it, and returns the
    /// prepare the backups journal byte for byte.
    pub fn prepare(
        &self,
        request: Request<'_>,
        meta: &PrepareMeta,
    ) -> Result<Prepared, PartitionError> {
        let mut state = self.lock();
        let (head_op, parent) = self.wal.head();
        let timestamp = meta.now_us.max(state.last_timestamp);
        let base_offset = state.next_offset;
        let (operation, body): (u32, Vec<u8>) = match request {
            Request::Messages(batch) => {
                batch::stamp(batch, self.config.partition_id, base_offset, timestamp)?;
                (operation::MESSAGES, batch.to_vec())
            }
            Request::Batch(mut batch) => {
                batch::stamp(&mut batch, self.config.partition_id, base_offset, timestamp)?;
                (operation::MESSAGES, batch)
            }
            Request::StoreOffset { kind, id, offset } => (
                operation::CONSUMER_OFFSET,
                entry::encode_consumer_offset(kind, id, offset).to_vec(),
            ),
            Request::Noop => (operation::NOOP, Vec::new()),
        };
        let position = Position {
            cluster: self.config.identity.cluster,
            group: self.config.group,
            after: head_op,
            parent,
        };
        let stamped = PrepareMeta {
            now_us: timestamp,
            ..*meta
        };
        let header = Header::prepare(position, operation, &stamped, &body).ok_or_else(|| {
            PartitionError::Refused {
                dir: self.dir.clone(),
                op: head_op + 1,
                reason: format!("a body of {} bytes", body.len()),
            }
        })?;
        let kind = entry::peek(&header, &body).map_err(|error| self.refused(&header, error))?;
        let appended = self.journal_locked(&mut state, &header, &body, kind)?;
        Ok(Prepared {
            header,
            body,
            appended,
        })
    }

    /// A backup's half: validates the primary's prepare (its group, chain and body checksum,
    /// and its body for its kind: a batch must be this partition's, start at the next offset,
    /// never go back in time, and verify message by message) and journals it byte for byte.
    /// Journaling the head again is a no-op.
    pub fn journal(&self, header: &Header, body: &[u8]) -> Result<Appended, PartitionError> {
        let mut state = self.lock();
        let (head_op, head_checksum) = self.wal.head();
        if header.op == head_op && header.checksum() == head_checksum {
            // The head again (a retransmission): already journaled, nothing to check.
            return Ok(Appended {
                op: head_op,
                base_offset: state.next_offset,
                message_count: 0,
                timestamp: header.timestamp_ns / 1000,
            });
        }
        if header.cluster != self.config.identity.cluster {
            return Err(self.refused(
                header,
                entry::EntryError::Invalid(format!(
                    "another cluster's entry ({:#x})",
                    header.cluster
                )),
            ));
        }
        let kind = entry::peek(header, body).map_err(|error| self.refused(header, error))?;
        if let Kind::Messages(batch) = &kind {
            // The whole batch, message by message: a backup trusts nothing it did not verify.
            batch::decode(body)?;
            let reason = if batch.partition_id != self.config.partition_id {
                Some(format!(
                    "a batch of partition {}, not {}",
                    batch.partition_id, self.config.partition_id
                ))
            } else if batch.base_offset != state.next_offset {
                Some(format!(
                    "a batch at offset {} where the next offset is {}",
                    batch.base_offset, state.next_offset
                ))
            } else if batch.base_timestamp < state.last_timestamp {
                Some(format!(
                    "a batch stamped {} before the last one ({})",
                    batch.base_timestamp, state.last_timestamp
                ))
            } else {
                None
            };
            if let Some(reason) = reason {
                return Err(self.refused(header, entry::EntryError::Invalid(reason)));
            }
        }
        self.journal_locked(&mut state, header, body, kind)
    }

    fn refused(&self, header: &Header, error: entry::EntryError) -> PartitionError {
        PartitionError::Refused {
            dir: self.dir.clone(),
            op: header.op,
            reason: error.to_string(),
        }
    }

    /// Queues the entry in the WAL and moves the partition's state past it, under the lock.
    fn journal_locked(
        &self,
        state: &mut State<S::Reader>,
        header: &Header,
        body: &[u8],
        kind: Kind,
    ) -> Result<Appended, PartitionError> {
        // A segment is named by the next offset when it starts (its first batch's).
        let key = state.next_offset;
        let timestamp = header.timestamp_ns / 1000;
        if let Kind::ConsumerOffset { kind, id, .. } = kind {
            // The consumer's file exists before its store is journaled: the commit then writes
            // in place, and a full disk refuses this journal write instead of failing it.
            if !self.lock_offset_files().contains_key(&(kind, id))
                && let Some(known) = self.offset_store().prepare_known(kind, id)?
            {
                self.lock_offset_files().insert((kind, id), known);
            }
        }
        if let iggy_wal::Appended::Duplicate { op } = self.wal.append_keyed(header, body, key)? {
            return Ok(Appended {
                op,
                base_offset: state.next_offset,
                message_count: 0,
                timestamp,
            });
        }
        let op = header.op;
        let location = self.wal.locate(op).unwrap_or_else(|error| {
            unreachable!("op {op} was just appended to the head file: {error}")
        });
        let rotated = state
            .segments
            .last()
            .is_none_or(|s| s.info.start_offset != location.key);
        // From here nothing may fail: the WAL holds the entry, and the state must move on.
        if rotated {
            if let Some(sealed) = state.segments.last()
                && let Err(error) = self.write_index(&sealed.info)
            {
                // Derived data: boot rebuilds a missing or partial index from the log.
                tracing::warn!(segment = %sealed.info.path.display(), %error, "segment index not written");
            }
            let path = self.dir.join(Naming::ByKey.file_name(location.key));
            let info = SegmentInfo {
                path,
                start_offset: location.key,
                next_offset: location.key,
                first_op: op,
                entries: 0,
                batches: 0,
                bytes: 0,
                min_timestamp: timestamp,
                max_timestamp: timestamp,
                index: Vec::new(),
                stores: Vec::new(),
                sessions: Vec::new(),
                last_checksum: None,
            };
            state.segments.push(Segment::new(info));
        }
        let base_offset = state.next_offset;
        let segment = &mut state
            .segments
            .last_mut()
            .unwrap_or_else(|| unreachable!("a head segment"))
            .info;
        segment.entries += 1;
        segment.bytes = location.offset + location.size;
        segment.last_checksum = Some(header.checksum());
        if let Some(session) = crate::sessions::Session::of(header, &kind) {
            segment.note_session(session);
        }
        let mut message_count = 0;
        if let Kind::ConsumerOffset { kind, id, offset } = kind {
            let store = OffsetEntry {
                op,
                kind,
                id,
                offset,
            };
            segment.note_store(store);
            state.uncommitted_offsets.push(store);
        } else if let Kind::Messages(batch) = kind {
            add_batch(
                segment,
                &batch,
                location.offset,
                op,
                self.config.index_interval_bytes,
            );
            message_count = batch.message_count;
            state.next_offset = segment.next_offset;
            state.last_timestamp = batch.base_timestamp;
        }
        Ok(Appended {
            op,
            base_offset,
            message_count,
            timestamp,
        })
    }
}
