//! `segment`, `index` and `node`: a partition's files and a whole node. The decoders take bytes
//! (any bytes: they are fuzzed) and return JSON and text; the commands read the files read-only.

use std::fmt::Write as _;
use std::path::Path;

use iggy_format::batch::{self, BATCH_HEADER_SIZE};
use iggy_format::constants::HEADER_SIZE;
use iggy_format::{Header, operation};
use iggy_io::{OsStorage, ReadOnly};
use iggy_segments::index::{self, IndexEntry};
use serde_json::{Value, json};

use crate::{Inspected, Verdict, hex128, hexdump, map_file, misread, read_file, timestamp_text};

/// Most entries a segment listing shows in full (the totals always cover the whole file).
const SHOWN_ENTRIES_MAX: usize = 100_000;
/// Payload bytes shown per message with `--messages`.
const PREVIEW_BYTES: usize = 48;

fn preview(bytes: &[u8]) -> String {
    bytes
        .iter()
        .take(PREVIEW_BYTES)
        .map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                b as char
            } else {
                '.'
            }
        })
        .collect()
}

/// Decodes a segment file (a keyed WAL file whose bodies are message batches) entry by entry:
/// each WAL header and body checksum, each batch header, and each message checksum. It stops at
/// the first entry whose header does not verify and shows its bytes; zeros there mean the end
/// of the written part.
#[must_use]
pub fn decode_segment(bytes: &[u8], messages: bool) -> (Value, String) {
    decode_log(bytes, true, messages)
}

/// Decodes any WAL file entry by entry (`batches`: decode each body as a message batch too).
/// Besides the entries, the JSON gives `valid_entries` and `valid_end` (the prefix whose bodies
/// and parent links verify) and `seen_end` (just past the last non-zero byte).
#[must_use]
pub fn decode_log(bytes: &[u8], batches_in_bodies: bool, messages: bool) -> (Value, String) {
    let mut text = String::new();
    let mut valid_entries = 0u64;
    let mut valid_end = 0usize;
    let mut valid = true;
    let mut entries = Vec::new();
    let mut offset = 0usize;
    let mut batches = 0u64;
    let mut message_count = 0u64;
    let mut previous: Option<u128> = None;
    let stop = loop {
        let Some(header_bytes) = bytes.get(offset..offset + HEADER_SIZE) else {
            break if offset == bytes.len() {
                "end of file".to_string()
            } else {
                format!(
                    "{} trailing bytes, shorter than a header",
                    bytes.len() - offset
                )
            };
        };
        if header_bytes.iter().all(|b| *b == 0) {
            let written = bytes[offset..].iter().rposition(|b| *b != 0);
            break match written {
                None => "zeros to the end of file (never written)".to_string(),
                Some(last) => format!(
                    "zeros, then non-zero bytes up to offset {}",
                    offset + last + 1
                ),
            };
        }
        let header = match Header::decode(header_bytes) {
            Ok(header) => header,
            Err(error) => {
                let _ = write!(
                    text,
                    "@{offset}: header does not verify: {error}\n{}",
                    hexdump(header_bytes, offset as u64)
                );
                break format!("bad header at offset {offset}: {error}");
            }
        };
        let size = usize::try_from(header.size).unwrap_or(usize::MAX);
        let Some(body) = bytes.get(offset + HEADER_SIZE..offset.saturating_add(size)) else {
            let _ = writeln!(
                text,
                "@{offset}: op {} declares {size} bytes, past the end of file",
                header.op
            );
            break format!("entry at offset {offset} runs past the end of file");
        };
        let body_ok = header.body_matches(body);
        let linked = previous.is_none_or(|p| p == header.parent);
        previous = Some(header.checksum());
        valid &= body_ok && linked;
        if valid {
            valid_entries += 1;
            valid_end = offset + size;
        }
        let mut line = format!(
            "@{offset} op {} size {size} view {} {}{}{}{}",
            header.op,
            header.view,
            operation_text(header.operation),
            client_text(&header),
            if body_ok {
                ""
            } else {
                " BODY CHECKSUM MISMATCH"
            },
            if linked { "" } else { " PARENT LINK BROKEN" }
        );
        let mut entry = json!({
            "offset": offset, "op": header.op, "size": size, "body_ok": body_ok,
            "linked": linked, "checksum": hex128(header.checksum()),
            "view": header.view, "commit": header.commit, "replica": header.replica,
            "operation": operation_text(header.operation), "group": hex128(header.group),
            "client": hex128(header.client), "request": header.request,
            "request_checksum": hex128(header.request_checksum),
            "timestamp_ns": header.timestamp_ns,
        });
        let is_batch = header.operation == operation::MESSAGES;
        if !is_batch {
            describe_other(&header, body, batches_in_bodies, &mut line, &mut entry);
        }
        match (batches_in_bodies && is_batch).then(|| batch::decode(body)) {
            None => {}
            Some(Ok(decoded)) => {
                let h = decoded.header;
                let _ = write!(
                    line,
                    ": batch partition {} offsets {}..{} ({} messages) at {}",
                    h.partition_id,
                    h.base_offset,
                    h.base_offset + u64::from(h.message_count),
                    h.message_count,
                    timestamp_text(h.base_timestamp)
                );
                entry["batch"] = json!({
                    "partition_id": h.partition_id, "base_offset": h.base_offset,
                    "message_count": h.message_count, "base_timestamp": h.base_timestamp,
                    "base_time": timestamp_text(h.base_timestamp),
                    "origin_timestamp": h.origin_timestamp, "valid": true,
                });
                batches += 1;
                message_count += u64::from(h.message_count);
                if messages {
                    let mut listed = Vec::new();
                    for m in decoded.messages() {
                        let _ = write!(
                            line,
                            "\n    offset {} id {:#x} {} bytes: {}",
                            h.base_offset + u64::from(m.offset_delta),
                            m.id,
                            m.payload.len(),
                            preview(m.payload)
                        );
                        listed.push(json!({
                            "offset": h.base_offset + u64::from(m.offset_delta),
                            "id": format!("{:#x}", m.id), "payload_bytes": m.payload.len(),
                            "preview": preview(m.payload),
                        }));
                    }
                    entry["messages"] = Value::Array(listed);
                }
            }
            Some(Err(error)) => {
                let _ = write!(line, ": batch does not verify: {error}");
                let shown = &body[..body.len().min(BATCH_HEADER_SIZE)];
                let _ = write!(line, "\n{}", hexdump(shown, (offset + HEADER_SIZE) as u64));
                entry["batch"] = json!({ "valid": false, "error": error.to_string() });
            }
        }
        if entries.len() < SHOWN_ENTRIES_MAX {
            let _ = writeln!(text, "{line}");
            entries.push(entry);
        }
        offset += size.max(HEADER_SIZE);
    };
    let seen_end = bytes
        .iter()
        .rposition(|b| *b != 0)
        .map_or(0, |last| last + 1);
    if batches_in_bodies {
        let _ = writeln!(
            text,
            "{batches} batches, {message_count} messages in {offset} bytes; stopped: {stop}"
        );
    }
    let _ = writeln!(
        text,
        "valid prefix: {valid_entries} entries ending at {valid_end}; last non-zero byte ends at {seen_end}"
    );
    (
        json!({ "entries": entries, "batches": batches, "messages": message_count,
                "end": offset, "stop": stop, "valid_entries": valid_entries,
                "valid_end": valid_end, "seen_end": seen_end }),
        text,
    )
}

/// An operation's name, or its number when this build does not know it.
fn operation_text(code: u32) -> String {
    match operation::name(code) {
        "unknown" => format!("operation {code}"),
        name => name.to_string(),
    }
}

/// The client and request of a prepare that came from a client, in words (empty otherwise).
fn client_text(header: &Header) -> String {
    if header.client == 0 {
        String::new()
    } else {
        format!(
            " client {} request {}",
            hex128(header.client),
            header.request
        )
    }
}

/// What an entry that is not a message batch holds: a partition's consumer offset store or
/// no-op, or a metadata op (by its name).
fn describe_other(
    header: &Header,
    body: &[u8],
    partition: bool,
    line: &mut String,
    entry: &mut Value,
) {
    if partition {
        match iggy_segments::entry::peek(header, body) {
            Ok(iggy_segments::Kind::ConsumerOffset { kind, id, offset }) => {
                let _ = write!(line, ": {} {id} stores offset {offset}", kind.name());
                entry["consumer_offset"] =
                    json!({ "kind": kind.name(), "id": id, "offset": offset });
            }
            Ok(_) => {}
            Err(error) => {
                let _ = write!(line, ": not a valid partition entry: {error}");
                entry["invalid"] = json!(error.to_string());
            }
        }
    } else if header.operation == operation::METADATA {
        match iggy_metadata::codec::decode_op(body) {
            Ok(op) => {
                let _ = write!(line, ": {}", op_name(&op));
                entry["metadata_op"] = json!(op_name(&op));
            }
            Err(error) => {
                let _ = write!(line, ": the op does not decode: {error}");
                entry["invalid"] = json!(error.to_string());
            }
        }
    }
}

/// A metadata op's name, as an operator reads it.
fn op_name(op: &iggy_metadata::Op) -> &'static str {
    use iggy_metadata::Op;
    match op {
        Op::CreateStream { .. } => "create stream",
        Op::DeleteStream { .. } => "delete stream",
        Op::UpdateStream { .. } => "rename stream",
        Op::CreateTopic { .. } => "create topic",
        Op::DeleteTopic { .. } => "delete topic",
        Op::UpdateTopic { .. } => "update topic",
        Op::CreatePartitions { .. } => "create partitions",
        Op::DeletePartitions { .. } => "delete partitions",
        Op::PurgeTopic { .. } => "purge topic",
        Op::PurgeStream { .. } => "purge stream",
        Op::DeleteSegments { .. } => "delete segments below an offset",
        Op::CreateConsumerGroup { .. } => "create consumer group",
        Op::DeleteConsumerGroup { .. } => "delete consumer group",
        Op::JoinConsumerGroup { .. } => "join consumer group",
        Op::LeaveConsumerGroup { .. } => "leave consumer group",
        Op::LeaveGroups { .. } => "session ended: leave its groups",
        Op::DropNodeMembers { .. } => "node restarted: drop its members",
        Op::CreateUser { .. } => "create user",
        Op::DeleteUser { .. } => "delete user",
        Op::UpdateUser { .. } => "update user",
        Op::UpdatePermissions { .. } => "update permissions",
        Op::ChangePassword { .. } => "change password",
        Op::CreateToken { .. } => "create personal access token",
        Op::DeleteToken { .. } => "delete personal access token",
        Op::RegisterClient { .. } => "register client",
    }
}

/// Decodes an index file and, given the `.log` beside it, checks every entry against it.
#[must_use]
pub fn decode_index(bytes: &[u8], start_offset: u64, log: Option<&[u8]>) -> (Value, String) {
    let mut text = String::new();
    match index::decode(bytes, start_offset) {
        Ok(index::IndexFile {
            interval_bytes: interval,
            entries,
            summary,
            version,
            ..
        }) => {
            let _ = writeln!(
                text,
                "valid: segment {start_offset}, interval {interval} bytes, {} entries",
                entries.len()
            );
            let summary_json = match &summary {
                None => {
                    let _ = writeln!(
                        text,
                        "  version {version}: {} (boot reads the segment and writes version {})",
                        if version == 1 {
                            "no summary"
                        } else {
                            "a summary without client sessions"
                        },
                        index::VERSION
                    );
                    Value::Null
                }
                Some(summary) => {
                    let last = log.map(|log| last_entry_checksum(log, summary.bytes));
                    let _ = writeln!(
                        text,
                        "  summary: offsets {start_offset}..{}, {} entries ({} batches) from op {}, \
                         {} bytes, timestamps {} to {}, last entry checksum {:#034x}{}; \
                         {} consumer offset stores, {} client sessions",
                        summary.next_offset,
                        summary.entries,
                        summary.batches,
                        summary.first_op,
                        summary.bytes,
                        timestamp_text(summary.min_timestamp),
                        timestamp_text(summary.max_timestamp),
                        summary.last_checksum,
                        match last {
                            Some(Some(found)) if found == summary.last_checksum => {
                                " (the .log's last entry: boot may take a sealed segment from \
                                 this summary)"
                                    .to_string()
                            }
                            Some(Some(found)) => format!(
                                " (the .log's entry ending there is {found:#034x}: stale, boot \
                                 reads the segment)"
                            ),
                            Some(None) => " (no entry of the .log ends there: stale)".into(),
                            None => String::new(),
                        },
                        summary.stores.len(),
                        summary.sessions.len()
                    );
                    for store in &summary.stores {
                        let at = if store.offset == iggy_segments::offsets::DELETED {
                            "deleted".to_string()
                        } else {
                            format!("at offset {}", store.offset)
                        };
                        let _ = writeln!(
                            text,
                            "    {} {} {at} (op {})",
                            store.kind.name(),
                            store.id,
                            store.op
                        );
                    }
                    for session in &summary.sessions {
                        let _ = writeln!(
                            text,
                            "    client {:#x} request {} at op {} ({}{})",
                            session.client,
                            session.request,
                            session.op,
                            iggy_format::operation::name(session.operation),
                            if session.operation == iggy_format::operation::MESSAGES {
                                format!(
                                    ": offsets {}..{}",
                                    session.base_offset,
                                    session.base_offset + u64::from(session.message_count)
                                )
                            } else {
                                String::new()
                            }
                        );
                    }
                    json!({
                        "next_offset": summary.next_offset, "entries": summary.entries,
                        "batches": summary.batches, "bytes": summary.bytes,
                        "first_op": summary.first_op,
                        "min_timestamp": summary.min_timestamp,
                        "max_timestamp": summary.max_timestamp,
                        "last_checksum": format!("{:#034x}", summary.last_checksum),
                        "last_checksum_matches_log": last.map(|l| l == Some(summary.last_checksum)),
                        "stores": summary.stores.iter().map(|s| json!({
                            "kind": s.kind.name(), "id": s.id, "offset": s.offset, "op": s.op,
                        })).collect::<Vec<_>>(),
                        "sessions": summary.sessions.iter().map(|s| json!({
                            "client": format!("{:#x}", s.client), "request": s.request,
                            "op": s.op, "operation": iggy_format::operation::name(s.operation),
                            "base_offset": s.base_offset, "message_count": s.message_count,
                        })).collect::<Vec<_>>(),
                    })
                }
            };
            let checked: Vec<Value> = entries
                .iter()
                .map(|entry| {
                    let verdict = log.map(|log| check_entry(entry, log));
                    let _ = writeln!(
                        text,
                        "  offset {} at {} position {} op {}{}",
                        entry.offset,
                        timestamp_text(entry.timestamp),
                        entry.position,
                        entry.op,
                        verdict.as_ref().map_or(String::new(), |v| format!(": {v}"))
                    );
                    json!({
                        "offset": entry.offset, "timestamp": entry.timestamp,
                        "position": entry.position, "op": entry.op, "against_log": verdict,
                    })
                })
                .collect();
            (
                json!({ "valid": true, "start_offset": start_offset, "interval": interval,
                        "entries": checked, "summary": summary_json }),
                text,
            )
        }
        Err(error) => {
            let _ = write!(
                text,
                "invalid (boot rebuilds it from the .log): {error}\n{}",
                hexdump(&bytes[..bytes.len().min(index::HEADER_SIZE + 64)], 0)
            );
            (
                json!({ "valid": false, "error": error.to_string(), "bytes": bytes.len() }),
                text,
            )
        }
    }
}

/// The header checksum of the entry of `log` that ends at `end`, walking the entries from 0
/// (`None` if no verified entry ends exactly there).
fn last_entry_checksum(log: &[u8], end: u64) -> Option<u128> {
    let mut at = 0usize;
    let end = usize::try_from(end).ok()?;
    let mut last = None;
    while at < end {
        let bytes = log.get(at..at.checked_add(HEADER_SIZE)?)?;
        let header = Header::decode(bytes).ok()?;
        last = Some(iggy_format::header::stored_checksum(bytes.try_into().ok()?));
        at = at.checked_add(usize::try_from(header.size).ok()?)?;
    }
    (at == end).then_some(last).flatten()
}

/// Whether the log holds, at the entry's position, the batch the entry names.
fn check_entry(entry: &IndexEntry, log: &[u8]) -> String {
    let Ok(at) = usize::try_from(entry.position) else {
        return "position past the log".into();
    };
    let Some(header) = log
        .get(at..at.saturating_add(HEADER_SIZE))
        .and_then(|b| Header::decode(b).ok())
    else {
        return "no valid entry header at that position".into();
    };
    let size = usize::try_from(header.size).unwrap_or(0);
    let Some(body) = log.get(at + HEADER_SIZE..at.saturating_add(size)) else {
        return "entry runs past the log".into();
    };
    match batch::peek_header(body, body.len()) {
        Ok(h) if header.op == entry.op && h.base_offset == entry.offset => {
            if h.base_timestamp == entry.timestamp {
                "matches the log".into()
            } else {
                format!(
                    "timestamp differs (log {})",
                    timestamp_text(h.base_timestamp)
                )
            }
        }
        Ok(h) => format!("log has op {} at offset {} there", header.op, h.base_offset),
        Err(error) => format!("batch header does not verify: {error}"),
    }
}

/// `segment <file>`.
pub(crate) fn segment(path: &Path, messages: bool) -> Result<Inspected, String> {
    let bytes = map_file(path)?;
    let (mut value, body) = decode_segment(&bytes, messages);
    value["file"] = path.display().to_string().into();
    let mut text = format!("segment {} ({} bytes)\n{body}", path.display(), bytes.len());
    // Every written byte belongs to an entry that verifies (zeros after them were never
    // written); anything else is damage, or a file of another kind when not even the first
    // entry decodes.
    let verified_to = value["valid_end"].as_u64().unwrap_or(0);
    let written_to = value["seen_end"].as_u64().unwrap_or(0);
    let verdict = if value["valid_entries"] == 0 && written_to > 0 {
        misread(&bytes, "segment", &mut text)
    } else if written_to <= verified_to {
        Verdict::Verified
    } else {
        Verdict::Damaged
    };
    Ok(Inspected {
        value,
        text,
        verdict,
    })
}

/// `index <file>`: the `.log` beside it (same start offset) is read to check the entries.
pub(crate) fn index_file(path: &Path) -> Result<Inspected, String> {
    let bytes = read_file(path)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let start = index::parse_file_name(&name).unwrap_or(0);
    let log_path = path.with_extension("log");
    let log = map_file(&log_path).ok();
    let (mut value, body) = decode_index(&bytes, start, log.as_deref());
    value["file"] = path.display().to_string().into();
    let against = if log.is_some() {
        format!("checked against {}", log_path.display())
    } else {
        format!("{} not readable: entries not checked", log_path.display())
    };
    let mut text = format!(
        "index {} ({} bytes); {against}\n{body}",
        path.display(),
        bytes.len()
    );
    let verdict = if value["valid"] != true {
        misread(&bytes, "index", &mut text)
    } else if value["entries"].as_array().is_some_and(|entries| {
        entries.iter().any(|e| {
            e["against_log"]
                .as_str()
                .is_some_and(|v| v != "matches the log")
        })
    }) {
        Verdict::Damaged
    } else {
        Verdict::Verified
    };
    Ok(Inspected {
        value,
        text,
        verdict,
    })
}

/// `node <dir>`: boot's verdict on every group (the analysis `iggy-fsck` runs), and each
/// partition's segments.
pub(crate) fn node(dir: &Path) -> Result<Inspected, String> {
    let storage =
        ReadOnly::new(OsStorage::open(dir).map_err(|e| format!("{}: {e}", dir.display()))?);
    let mut report = iggy_recovery::check(&storage, Path::new(""), |_, _| {})
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    report.data_dir = dir.to_path_buf();
    let mut text = report.render();
    // The segments come from the same analysis: each partition is verified once.
    let mut partitions = Vec::new();
    for partition in &report.partitions {
        let _ = writeln!(
            text,
            "  {}: next offset {}, {} segments",
            partition.group,
            partition.next_offset,
            partition.segments.len()
        );
        let segments: Vec<Value> = partition
            .segments
            .iter()
            .map(|s| {
                let _ = writeln!(
                    text,
                    "      {} offsets {}..{} ({} batches, {} bytes, {} index entries)",
                    s.path.display(),
                    s.start_offset,
                    s.next_offset,
                    s.batches,
                    s.bytes,
                    s.index.len()
                );
                json!({ "file": s.path.display().to_string(), "start_offset": s.start_offset,
                        "next_offset": s.next_offset, "batches": s.batches, "bytes": s.bytes })
            })
            .collect();
        partitions.push(
            json!({ "group": partition.group, "next_offset": partition.next_offset,
                                "segments": segments,
                                "consumer_offsets": partition.consumer_offsets }),
        );
    }
    let mut value = report.to_json();
    value["partitions"] = Value::Array(partitions);
    Ok(Inspected {
        value,
        text,
        verdict: if report.is_clean() {
            Verdict::Verified
        } else {
            Verdict::Damaged
        },
    })
}
