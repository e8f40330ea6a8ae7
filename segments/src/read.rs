//! Reading a partition: verified batches by offset, up to the published head (a single node)
//! or up to a commit point the caller passes (a replica: under `replicated` durability a
//! committed entry may be unpublished until the next checkpoint, and consumers must see it).
//! Entries of other kinds (consumer offset stores, no-ops) are stepped over.

use std::sync::Arc;

use iggy_format::Header;
use iggy_format::batch::{self, BatchHeader};
use iggy_format::constants::HEADER_SIZE;
use iggy_format::operation;
use iggy_io::{Mapping, ReadFile, Storage};

use crate::config::ReadPath;
use crate::error::PartitionError;
use crate::index::IndexEntry;
use crate::partition::Partition;

/// One batch read back: verified, the bytes as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredBatch {
    pub op: u64,
    pub header: BatchHeader,
    pub bytes: Vec<u8>,
}

impl StoredBatch {
    /// One past the last message's offset.
    #[must_use]
    pub fn next_offset(&self) -> u64 {
        self.header.base_offset + u64::from(self.header.message_count)
    }
}

/// Reads of a partition that retention overtook, started again from its new first offset,
/// before a failure is returned ([`Partition::read_through`]).
const RETENTION_RACE_RETRIES: usize = 3;

/// One entry of a segment, read at a position.
enum Read {
    /// The segment ends here (zeros or the end of the file).
    End,
    /// An entry of another kind, `size` bytes in all, verified by its header checksum.
    Other { size: u64 },
    /// A batch, its body (`len` bytes) appended to the buffer the read was given.
    Batch { header: BatchHeader, len: usize },
}

/// Where a read puts the batches it finds: each body is appended to [`Batches::buffer`], then
/// [`Batches::found`] names it.
trait Batches {
    /// The buffer the next batch's body is appended to.
    fn buffer(&mut self) -> &mut Vec<u8>;
    /// The batch of entry `op` whose body, `len` bytes, the buffer's end now holds.
    fn found(&mut self, op: u64, header: BatchHeader, len: usize);
    fn is_empty(&self) -> bool;
    /// Forgets every batch found (the read starts again).
    fn clear(&mut self);
}

/// Each batch in a buffer of its own ([`Partition::read`]).
#[derive(Default)]
struct Separate {
    batches: Vec<StoredBatch>,
    next: Vec<u8>,
}

impl Batches for Separate {
    fn buffer(&mut self) -> &mut Vec<u8> {
        &mut self.next
    }
    fn found(&mut self, op: u64, header: BatchHeader, _len: usize) {
        let bytes = std::mem::take(&mut self.next);
        self.batches.push(StoredBatch { op, header, bytes });
    }
    fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }
    fn clear(&mut self) {
        self.batches.clear();
    }
}

/// The batches' bodies one after another behind what `out` held
/// ([`Partition::read_through_into`]).
struct Joined<'a> {
    out: &'a mut Vec<u8>,
    start: usize,
    headers: Vec<(BatchHeader, usize)>,
}

impl Batches for Joined<'_> {
    fn buffer(&mut self) -> &mut Vec<u8> {
        self.out
    }
    fn found(&mut self, _op: u64, header: BatchHeader, len: usize) {
        self.headers.push((header, len));
    }
    fn is_empty(&self) -> bool {
        self.headers.is_empty()
    }
    fn clear(&mut self) {
        self.out.truncate(self.start);
        self.headers.clear();
    }
}

impl<S: Storage + Clone> Partition<S> {
    /// The published batches holding `offset` and after, up to `max_bytes` of batch bytes (at
    /// least one batch when any is there). Each batch is verified (WAL header and body
    /// checksums) as it is read. An offset before the first retained one reads from the first.
    pub fn read(&self, offset: u64, max_bytes: u64) -> Result<Vec<StoredBatch>, PartitionError> {
        let published = self.wal.published().head_op;
        let mut batches = Separate::default();
        self.read_until(offset, max_bytes, published, &mut batches)?;
        Ok(batches.batches)
    }

    /// Like [`Partition::read`], but serving every entry up to op `through` (the caller's
    /// commit point), published or not. Entries past the head are not there to read.
    pub fn read_through(
        &self,
        offset: u64,
        max_bytes: u64,
        through: u64,
    ) -> Result<Vec<StoredBatch>, PartitionError> {
        let through = self.written_through(through)?;
        let mut batches = Separate::default();
        self.read_until(offset, max_bytes, through, &mut batches)?;
        Ok(batches.batches)
    }

    /// [`Partition::read_through`] into one buffer: the batches' bodies, as stored, appended to
    /// `out` one after another (each copied once, from the file or its mapping), and their
    /// headers and lengths returned in order. On an error `out` holds what it held before.
    pub fn read_through_into(
        &self,
        offset: u64,
        max_bytes: u64,
        through: u64,
        out: &mut Vec<u8>,
    ) -> Result<Vec<(BatchHeader, usize)>, PartitionError> {
        let through = self.written_through(through)?;
        let start = out.len();
        let mut batches = Joined {
            out,
            start,
            headers: Vec::new(),
        };
        let read = self.read_until(offset, max_bytes, through, &mut batches);
        if read.is_err() {
            batches.clear();
        }
        read.map(|()| batches.headers)
    }

    /// The op a read up to `through` may serve (the log's head at most), with the WAL's
    /// buffered entries written out to the segment files when it reaches past what was
    /// published (not synced: a read needs them in the files, not durable).
    fn written_through(&self, through: u64) -> Result<u64, PartitionError> {
        let through = through.min(self.wal.head().0);
        if through > self.wal.published().head_op {
            self.wal.write_buffered()?;
        }
        Ok(through)
    }

    /// Reads from `offset`; a read that retention overtook is read again from the new first
    /// offset. Retention retires a segment's file (the WAL may recycle it for a new segment)
    /// while a reader that found it before may still be reading it: the entries there then
    /// fail their checks, or the file is gone. A failure with the partition's first offset now
    /// past `offset` is that race, not damage; the read starts again where the partition now
    /// starts, as a read below the first offset does. A second failure there is returned.
    fn read_until(
        &self,
        offset: u64,
        max_bytes: u64,
        through: u64,
        out: &mut impl Batches,
    ) -> Result<(), PartitionError> {
        let mut from = offset;
        for _ in 0..RETENTION_RACE_RETRIES {
            match self.read_until_once(from, max_bytes, through, out) {
                Err(_) if self.first_offset() > from => {
                    from = self.first_offset();
                    out.clear();
                }
                done => return done,
            }
        }
        out.clear();
        self.read_until_once(from, max_bytes, through, out)
    }

    fn read_until_once(
        &self,
        offset: u64,
        max_bytes: u64,
        through: u64,
        out: &mut impl Batches,
    ) -> Result<(), PartitionError> {
        let mut total = 0u64;
        let mut from = offset;
        loop {
            let Some((reader, map, start, bytes)) = self.locate_read(from)? else {
                return Ok(());
            };
            if !out.is_empty() && start.offset > from {
                // Retention deleted the segment holding `from` since this read began: what was
                // read stands, and the next read starts at the new first offset. Reading on
                // from there would put a gap inside one answer.
                return Ok(());
            }
            let before = from;
            let mut position = start.position;
            let mut op = start.op;
            // The segment's entries end where boot (or the last append) says: past that a file
            // may hold zeros, or entries a cut discarded whose zeroing a crash undid. Those are
            // no part of the log, and a read must not serve them.
            let end = reader.len()?.min(bytes);
            while op <= through {
                let buffer = out.buffer();
                let at = buffer.len();
                let (header, len) =
                    match read_entry(&*reader, map.as_deref(), position, op, end, buffer)? {
                        Read::End => break,
                        Read::Other { size } => {
                            position += size;
                            op += 1;
                            continue;
                        }
                        Read::Batch { header, len } => (header, len),
                    };
                position += (HEADER_SIZE + len) as u64;
                let next = header.base_offset + u64::from(header.message_count);
                if next <= from {
                    // Before the offset asked: not part of the answer.
                    out.buffer().truncate(at);
                    op += 1;
                    continue;
                }
                out.found(op, header, len);
                op += 1;
                total += len as u64;
                from = next;
                if total >= max_bytes {
                    return Ok(());
                }
            }
            if op > through || from == before {
                // Past what may be served, or a segment that gave nothing new.
                return Ok(());
            }
        }
    }

    /// The reader, mapping (sealed segments, when `ReadPath::Mapped`), starting index entry and
    /// end of the entries of the segment for reading `offset`. `None` when nothing is stored at
    /// or after it.
    #[allow(
        clippy::type_complexity,
        reason = "a private quadruple, named at its one use"
    )]
    fn locate_read(
        &self,
        offset: u64,
    ) -> Result<Option<(Arc<S::Reader>, Option<Arc<Mapping>>, IndexEntry, u64)>, PartitionError>
    {
        let mut state = self.lock();
        if offset >= state.next_offset {
            return Ok(None);
        }
        let count = state.segments.len();
        let index = state
            .segments
            .partition_point(|s| s.info.start_offset <= offset)
            .saturating_sub(1);
        let sealed = index + 1 < count;
        let mapped = self.config.read_path == ReadPath::Mapped;
        let segment = &mut state.segments[index];
        let Some(start) = segment
            .info
            .index
            .get(
                segment
                    .info
                    .index
                    .partition_point(|e| e.offset <= offset)
                    .saturating_sub(1),
            )
            .copied()
        else {
            return Ok(None);
        };
        let reader = match &segment.reader {
            Some(reader) => Arc::clone(reader),
            None => {
                let reader = Arc::new(self.storage.open_read(&segment.info.path)?);
                segment.reader = Some(Arc::clone(&reader));
                reader
            }
        };
        if sealed && mapped && segment.map.is_none() {
            segment.map = reader.map()?.map(Arc::new);
        }
        let map = if sealed { segment.map.clone() } else { None };
        Ok(Some((reader, map, start, segment.info.bytes)))
    }

    /// The offset of the first message whose timestamp is at or after `timestamp` (published
    /// batches only); `None` if every message is older.
    pub fn find_by_timestamp(&self, timestamp: u64) -> Result<Option<u64>, PartitionError> {
        let start = {
            let state = self.lock();
            let Some(segment) = state
                .segments
                .iter()
                .find(|s| s.info.batches > 0 && s.info.max_timestamp >= timestamp)
            else {
                return Ok(None);
            };
            let index = &segment.info.index;
            let at = index
                .partition_point(|e| e.timestamp < timestamp)
                .saturating_sub(1);
            index.get(at).map(|e| e.offset)
        };
        let Some(mut from) = start else {
            return Ok(None);
        };
        loop {
            let batches = self.read(from, 1 << 20)?;
            if batches.is_empty() {
                return Ok(None);
            }
            for stored in &batches {
                let decoded = batch::decode(&stored.bytes)?;
                for message in decoded.messages() {
                    let at = stored.header.base_timestamp + u64::from(message.timestamp_delta);
                    if at >= timestamp {
                        return Ok(Some(
                            stored.header.base_offset + u64::from(message.offset_delta),
                        ));
                    }
                }
                from = stored.next_offset();
            }
        }
    }
}

/// Reads and verifies the entry at `position` of a segment, expected to be `op`; a batch's body
/// is appended to `buffer` (which is left as it was on an error or any other kind of entry).
fn read_entry<F: ReadFile>(
    reader: &F,
    map: Option<&Mapping>,
    position: u64,
    op: u64,
    end: u64,
    buffer: &mut Vec<u8>,
) -> Result<Read, PartitionError> {
    if position + HEADER_SIZE as u64 > end {
        return Ok(Read::End);
    }
    let corrupt = |reason: String| PartitionError::Corrupt {
        file: reader.path().to_path_buf(),
        offset: position,
        reason,
    };
    let mut header_bytes = [0u8; HEADER_SIZE];
    let from = usize::try_from(position).unwrap_or(usize::MAX);
    match map {
        Some(map) if from + HEADER_SIZE <= map.len() => {
            header_bytes.copy_from_slice(&map[from..from + HEADER_SIZE]);
        }
        _ => reader.read_exact_at(position, &mut header_bytes)?,
    }
    if header_bytes.iter().all(|b| *b == 0) {
        return Ok(Read::End);
    }
    let header = Header::decode(&header_bytes).map_err(|e| corrupt(e.to_string()))?;
    if header.op != op {
        return Err(corrupt(format!("op {} where {op} was expected", header.op)));
    }
    if header.operation != operation::MESSAGES {
        return Ok(Read::Other {
            size: u64::from(header.size),
        });
    }
    let body_len = usize::try_from(header.body_size()).unwrap_or(0);
    let body_from = from + HEADER_SIZE;
    let at = buffer.len();
    match map {
        Some(map) if body_from + body_len <= map.len() => {
            buffer.extend_from_slice(&map[body_from..body_from + body_len]);
        }
        _ => {
            buffer.resize(at + body_len, 0);
            if let Err(error) =
                reader.read_exact_at(position + HEADER_SIZE as u64, &mut buffer[at..])
            {
                buffer.truncate(at);
                return Err(error.into());
            }
        }
    }
    let body = &buffer[at..];
    if !header.body_matches(body) {
        buffer.truncate(at);
        return Err(corrupt("body checksum mismatch".into()));
    }
    match batch::peek_header(body, body.len()) {
        Ok(batch) => Ok(Read::Batch {
            header: batch,
            len: body_len,
        }),
        Err(error) => {
            buffer.truncate(at);
            Err(PartitionError::BadBatch {
                file: reader.path().to_path_buf(),
                offset: position,
                error,
            })
        }
    }
}
