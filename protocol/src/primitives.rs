//! The small encodings bodies are made of.

use crate::wire::{Put, Reader, WireError, len_u8, len_u32};

/// Names (of streams, topics, users) are 1 to 255 bytes of UTF-8 behind a u8 length.
pub fn read_name(reader: &mut Reader<'_>, what: &'static str) -> Result<String, WireError> {
    let offset = reader.position();
    let len = reader.u8(what)? as usize;
    if len == 0 {
        return Err(reader.invalid(what, offset, "a name of 0 bytes".into()));
    }
    Ok(reader.str(len, what)?.to_owned())
}

pub fn put_name(out: &mut Vec<u8>, name: &str) {
    let bytes = &name.as_bytes()[..name.len().min(255)];
    out.put_u8(len_u8(bytes.len()));
    out.put_bytes(bytes);
}

/// A stream, topic, consumer or group by number or by name. Numbers are the wire's: 0-based.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Identifier {
    Numeric(u32),
    Name(String),
}

impl Identifier {
    pub fn read(reader: &mut Reader<'_>, what: &'static str) -> Result<Self, WireError> {
        let offset = reader.position();
        let kind = reader.u8(what)?;
        let len = reader.u8(what)? as usize;
        match kind {
            1 if len == 4 => Ok(Self::Numeric(reader.u32(what)?)),
            1 => Err(reader.invalid(what, offset, format!("a numeric id of {len} bytes, not 4"))),
            2 if len == 0 => Err(reader.invalid(what, offset, "an empty name".into())),
            2 => Ok(Self::Name(reader.str(len, what)?.to_owned())),
            _ => Err(reader.invalid(what, offset, format!("identifier kind {kind}, not 1 or 2"))),
        }
    }

    pub fn put(&self, out: &mut Vec<u8>) {
        match self {
            Self::Numeric(id) => {
                out.put_bytes(&[1, 4]);
                out.put_u32(*id);
            }
            Self::Name(name) => {
                out.put_u8(2);
                put_name(out, name);
            }
        }
    }
}

impl std::fmt::Display for Identifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Numeric(id) => write!(f, "{id}"),
            Self::Name(name) => write!(f, "{name:?}"),
        }
    }
}

/// Who polls or stores an offset: a consumer (kind 1) or a consumer group (kind 2).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Consumer {
    pub group: bool,
    pub id: Identifier,
}

impl Consumer {
    pub fn read(reader: &mut Reader<'_>) -> Result<Self, WireError> {
        let offset = reader.position();
        let group = match reader.u8("consumer kind")? {
            1 => false,
            2 => true,
            kind => {
                return Err(reader.invalid(
                    "consumer kind",
                    offset,
                    format!("{kind}, not 1 (consumer) or 2 (group)"),
                ));
            }
        };
        Ok(Self {
            group,
            id: Identifier::read(reader, "consumer id")?,
        })
    }

    pub fn put(&self, out: &mut Vec<u8>) {
        out.put_u8(if self.group { 2 } else { 1 });
        self.id.put(out);
    }
}

/// How a send picks its partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Partitioning {
    Balanced,
    /// 0-based, as on the wire.
    PartitionId(u32),
    MessagesKey(Vec<u8>),
}

impl Partitioning {
    pub fn read(reader: &mut Reader<'_>) -> Result<Self, WireError> {
        let what = "partitioning";
        let offset = reader.position();
        let kind = reader.u8(what)?;
        let len = reader.u8(what)? as usize;
        match (kind, len) {
            (1, 0) => Ok(Self::Balanced),
            (2, 4) => Ok(Self::PartitionId(reader.u32(what)?)),
            (3, 1..) => Ok(Self::MessagesKey(reader.bytes(len, what)?.to_vec())),
            _ => Err(reader.invalid(what, offset, format!("kind {kind} with {len} bytes"))),
        }
    }

    pub fn put(&self, out: &mut Vec<u8>) {
        match self {
            Self::Balanced => out.put_bytes(&[1, 0]),
            Self::PartitionId(id) => {
                out.put_bytes(&[2, 4]);
                out.put_u32(*id);
            }
            Self::MessagesKey(key) => {
                let key = &key[..key.len().min(255)];
                out.put_bytes(&[3, len_u8(key.len())]);
                out.put_bytes(key);
            }
        }
    }
}

/// Where a poll starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollingStrategy {
    Offset(u64),
    /// Microseconds since the epoch: the first message at or after it.
    Timestamp(u64),
    First,
    Last,
    /// After the consumer's stored offset.
    Next,
}

impl PollingStrategy {
    pub fn read(reader: &mut Reader<'_>) -> Result<Self, WireError> {
        let offset = reader.position();
        let kind = reader.u8("polling strategy")?;
        let value = reader.u64("polling strategy value")?;
        Ok(match (kind, value) {
            (1, _) => Self::Offset(value),
            (2, _) => Self::Timestamp(value),
            (3, 0) => Self::First,
            (4, 0) => Self::Last,
            (5, 0) => Self::Next,
            (3..=5, _) => {
                return Err(reader.invalid(
                    "polling strategy value",
                    offset + 1,
                    format!("{value} for a strategy that takes none (kind {kind})"),
                ));
            }
            _ => {
                return Err(reader.invalid(
                    "polling strategy",
                    offset,
                    format!("kind {kind}, not 1 to 5"),
                ));
            }
        })
    }

    pub fn put(&self, out: &mut Vec<u8>) {
        let (kind, value) = match *self {
            Self::Offset(value) => (1, value),
            Self::Timestamp(value) => (2, value),
            Self::First => (3, 0),
            Self::Last => (4, 0),
            Self::Next => (5, 0),
        };
        out.put_u8(kind);
        out.put_u64(value);
    }
}

/// The optional partition of polls and offsets: a flag byte and a u32 (`0, 0` when absent).
pub fn read_optional_partition(reader: &mut Reader<'_>) -> Result<Option<u32>, WireError> {
    let offset = reader.position();
    let flag = reader.u8("partition flag")?;
    let id = reader.u32("partition id")?;
    match flag {
        0 if id == 0 => Ok(None),
        0 => Err(reader.invalid(
            "partition id",
            offset + 1,
            format!("{id} with the flag saying there is none"),
        )),
        1 => Ok(Some(id)),
        _ => Err(reader.invalid("partition flag", offset, format!("{flag}, not 0 or 1"))),
    }
}

pub fn put_optional_partition(out: &mut Vec<u8>, partition: Option<u32>) {
    out.put_u8(u8::from(partition.is_some()));
    out.put_u32(partition.unwrap_or(0));
}

/// Kind of an option's value (the user-header kinds): the ones this server reads.
pub mod value_kind {
    pub const RAW: u8 = 1;
    pub const STRING: u8 = 2;
    pub const BOOL: u8 = 3;
    pub const UINT8: u8 = 9;
    pub const UINT16: u8 = 10;
    pub const UINT32: u8 = 11;
    pub const UINT64: u8 = 12;
}

/// One `key = value` of an options block: `[key kind u8 = 2][key len u32][key][value kind u8]
/// [value len u32][value]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptionEntry {
    pub key: String,
    pub kind: u8,
    pub value: Vec<u8>,
}

/// At most this many entries, and this many bytes, in a block (the SDK's own limits).
pub const MAX_OPTIONS: usize = 1024;
pub const MAX_OPTIONS_BYTES: usize = 100_000;

/// Reads `len` bytes of options entries. Keys are strings and never repeat.
pub fn read_options(reader: &mut Reader<'_>, len: usize) -> Result<Vec<OptionEntry>, WireError> {
    let start = reader.position();
    if len > MAX_OPTIONS_BYTES {
        return Err(reader.invalid(
            "options",
            start,
            format!("{len} bytes, above {MAX_OPTIONS_BYTES}"),
        ));
    }
    let mut block = Reader::new(reader.bytes(len, "options")?);
    let mut entries: Vec<OptionEntry> = Vec::new();
    while block.remaining() > 0 {
        let at = start + block.position();
        let key_kind = block.u8("option key kind")?;
        if key_kind != value_kind::STRING {
            return Err(reader.invalid("option key", at, format!("kind {key_kind}, not string")));
        }
        let key_len = block.u32("option key length")? as usize;
        let key = block.str(key_len, "option key")?.to_owned();
        let kind = block.u8("option value kind")?;
        let value_len = block.u32("option value length")? as usize;
        let value = block.bytes(value_len, "option value")?.to_vec();
        if entries.iter().any(|entry| entry.key == key) {
            return Err(reader.invalid("option key", at, format!("{key:?} given twice")));
        }
        if entries.len() == MAX_OPTIONS {
            return Err(reader.invalid("options", at, format!("more than {MAX_OPTIONS} entries")));
        }
        entries.push(OptionEntry { key, kind, value });
    }
    Ok(entries)
}

pub fn put_options(out: &mut Vec<u8>, entries: &[OptionEntry]) {
    for entry in entries {
        out.put_u8(value_kind::STRING);
        out.put_u32(len_u32(entry.key.len()));
        out.put_bytes(entry.key.as_bytes());
        out.put_u8(entry.kind);
        out.put_u32(len_u32(entry.value.len()));
        out.put_bytes(&entry.value);
    }
}

/// The length-prefixed options of a response.
pub fn put_options_prefixed(out: &mut Vec<u8>, entries: &[OptionEntry]) {
    let mut block = Vec::new();
    put_options(&mut block, entries);
    out.put_u32(len_u32(block.len()));
    out.put_bytes(&block);
}

impl OptionEntry {
    pub fn string(key: &str, value: &str) -> Self {
        Self {
            key: key.to_owned(),
            kind: value_kind::STRING,
            value: value.as_bytes().to_vec(),
        }
    }

    pub fn uint64(key: &str, value: u64) -> Self {
        Self {
            key: key.to_owned(),
            kind: value_kind::UINT64,
            value: value.to_le_bytes().to_vec(),
        }
    }

    /// The value as text, if it is a string.
    pub fn as_str(&self) -> Option<&str> {
        (self.kind == value_kind::STRING)
            .then(|| std::str::from_utf8(&self.value).ok())
            .flatten()
    }

    /// The value as an unsigned number, if it is one of the unsigned kinds.
    pub fn as_u64(&self) -> Option<u64> {
        match (self.kind, self.value.len()) {
            (value_kind::UINT64, 8) => Some(u64::from_le_bytes(self.value[..].try_into().ok()?)),
            (value_kind::UINT32, 4) => Some(u64::from(u32::from_le_bytes(
                self.value[..].try_into().ok()?,
            ))),
            (value_kind::UINT16, 2) => Some(u64::from(u16::from_le_bytes(
                self.value[..].try_into().ok()?,
            ))),
            (value_kind::UINT8, 1) => Some(u64::from(self.value[0])),
            _ => None,
        }
    }
}
