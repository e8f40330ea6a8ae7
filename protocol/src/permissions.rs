//! A user's permissions as the wire carries them (`iggy_binary_protocol` 0.11.0
//! `primitives/permissions.rs`): ten global flags, then the streams, each with six flags and its
//! topics, each topic with four. Lists are chained: a `1` byte before each element (and `0`
//! after the last), `0` alone for none. Flags are `0` or `1` here (the SDK sends nothing else),
//! so a body has one encoding.

use crate::wire::{Put, Reader, WireError};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Permissions {
    pub global: GlobalPermissions,
    pub streams: Vec<StreamPermissions>,
}

#[allow(
    clippy::struct_excessive_bools,
    reason = "the wire's flags, one byte each"
)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GlobalPermissions {
    pub manage_servers: bool,
    pub read_servers: bool,
    pub manage_users: bool,
    pub read_users: bool,
    pub manage_streams: bool,
    pub read_streams: bool,
    pub manage_topics: bool,
    pub read_topics: bool,
    pub poll_messages: bool,
    pub send_messages: bool,
}

#[allow(
    clippy::struct_excessive_bools,
    reason = "the wire's flags, one byte each"
)]
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamPermissions {
    /// The stream's wire id (0-based).
    pub stream_id: u32,
    pub manage_stream: bool,
    pub read_stream: bool,
    pub manage_topics: bool,
    pub read_topics: bool,
    pub poll_messages: bool,
    pub send_messages: bool,
    pub topics: Vec<TopicPermissions>,
}

#[allow(
    clippy::struct_excessive_bools,
    reason = "the wire's flags, one byte each"
)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TopicPermissions {
    /// The topic's wire id (0-based).
    pub topic_id: u32,
    pub manage_topic: bool,
    pub read_topic: bool,
    pub poll_messages: bool,
    pub send_messages: bool,
}

fn flag(r: &mut Reader<'_>, what: &'static str) -> Result<bool, WireError> {
    let at = r.position();
    match r.u8(what)? {
        0 => Ok(false),
        1 => Ok(true),
        other => Err(r.invalid(what, at, format!("{other}, not 0 or 1"))),
    }
}

/// Reads a chained list: `0` for none, else elements each followed by `1` (another) or `0`.
fn chained<T>(
    r: &mut Reader<'_>,
    what: &'static str,
    mut element: impl FnMut(&mut Reader<'_>) -> Result<T, WireError>,
) -> Result<Vec<T>, WireError> {
    let mut out = Vec::new();
    if !flag(r, what)? {
        return Ok(out);
    }
    loop {
        out.push(element(r)?);
        if !flag(r, what)? {
            return Ok(out);
        }
    }
}

fn put_chained<T>(out: &mut Vec<u8>, items: &[T], mut put: impl FnMut(&mut Vec<u8>, &T)) {
    if items.is_empty() {
        out.put_u8(0);
        return;
    }
    out.put_u8(1);
    for (i, item) in items.iter().enumerate() {
        put(out, item);
        out.put_u8(u8::from(i + 1 < items.len()));
    }
}

impl Permissions {
    pub fn read(r: &mut Reader<'_>) -> Result<Self, WireError> {
        let mut g = [false; 10];
        for slot in &mut g {
            *slot = flag(r, "global permission")?;
        }
        let global = GlobalPermissions {
            manage_servers: g[0],
            read_servers: g[1],
            manage_users: g[2],
            read_users: g[3],
            manage_streams: g[4],
            read_streams: g[5],
            manage_topics: g[6],
            read_topics: g[7],
            poll_messages: g[8],
            send_messages: g[9],
        };
        let streams = chained(r, "stream permissions", |r| {
            let stream_id = r.u32("permission stream id")?;
            let mut s = [false; 6];
            for slot in &mut s {
                *slot = flag(r, "stream permission")?;
            }
            let topics = chained(r, "topic permissions", |r| {
                Ok(TopicPermissions {
                    topic_id: r.u32("permission topic id")?,
                    manage_topic: flag(r, "topic permission")?,
                    read_topic: flag(r, "topic permission")?,
                    poll_messages: flag(r, "topic permission")?,
                    send_messages: flag(r, "topic permission")?,
                })
            })?;
            Ok(StreamPermissions {
                stream_id,
                manage_stream: s[0],
                read_stream: s[1],
                manage_topics: s[2],
                read_topics: s[3],
                poll_messages: s[4],
                send_messages: s[5],
                topics,
            })
        })?;
        Ok(Self { global, streams })
    }

    pub fn put(&self, out: &mut Vec<u8>) {
        let g = &self.global;
        for value in [
            g.manage_servers,
            g.read_servers,
            g.manage_users,
            g.read_users,
            g.manage_streams,
            g.read_streams,
            g.manage_topics,
            g.read_topics,
            g.poll_messages,
            g.send_messages,
        ] {
            out.put_u8(u8::from(value));
        }
        put_chained(out, &self.streams, |out, s| {
            out.put_u32(s.stream_id);
            for value in [
                s.manage_stream,
                s.read_stream,
                s.manage_topics,
                s.read_topics,
                s.poll_messages,
                s.send_messages,
            ] {
                out.put_u8(u8::from(value));
            }
            put_chained(out, &s.topics, |out, t| {
                out.put_u32(t.topic_id);
                for value in [
                    t.manage_topic,
                    t.read_topic,
                    t.poll_messages,
                    t.send_messages,
                ] {
                    out.put_u8(u8::from(value));
                }
            });
        });
    }

    /// The encoding alone.
    #[must_use]
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.put(&mut out);
        out
    }

    /// Decodes bytes that must be exactly one encoding.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(bytes);
        let permissions = Self::read(&mut r)?;
        r.finish("permissions")?;
        Ok(permissions)
    }

    /// The flags for stream `stream` (wire id), if listed.
    #[must_use]
    pub fn stream(&self, stream: u32) -> Option<&StreamPermissions> {
        self.streams.iter().find(|s| s.stream_id == stream)
    }
}

impl StreamPermissions {
    /// The flags for topic `topic` (wire id), if listed.
    #[must_use]
    pub fn topic(&self, topic: u32) -> Option<&TopicPermissions> {
        self.topics.iter().find(|t| t.topic_id == topic)
    }
}

/// Optional permissions as requests and replies frame them: `1`, a u32 length, the encoding;
/// or `0` for none.
pub fn read_optional(r: &mut Reader<'_>) -> Result<Option<Permissions>, WireError> {
    if !flag(r, "has permissions")? {
        return Ok(None);
    }
    let at = r.position();
    let len = r.u32("permissions length")? as usize;
    let bytes = r.bytes(len, "permissions")?;
    Permissions::from_bytes(bytes)
        .map(Some)
        .map_err(|e| r.invalid("permissions", at, e.to_string()))
}

pub fn put_optional(out: &mut Vec<u8>, permissions: Option<&Permissions>) {
    match permissions {
        Some(p) => {
            let bytes = p.to_bytes();
            out.put_u8(1);
            out.put_u32(u32::try_from(bytes.len()).unwrap_or(u32::MAX));
            out.put_bytes(&bytes);
        }
        None => out.put_u8(0),
    }
}
