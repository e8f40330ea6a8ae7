//! Bounds-checked little-endian reading and writing. Every read names what it read and where, so
//! a refusal says which field of which body was wrong.

use thiserror::Error;

/// Why bytes did not decode. `offset` counts from the start of the body (or header) decoded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum WireError {
    #[error("{what} at byte {offset}: needs {need} bytes, {have} left")]
    Short {
        what: &'static str,
        offset: usize,
        need: usize,
        have: usize,
    },
    #[error("{what} at byte {offset}: {reason}")]
    Invalid {
        what: &'static str,
        offset: usize,
        reason: String,
    },
    #[error("{trailing} bytes after the {what}, which ends at byte {offset}")]
    Trailing {
        what: &'static str,
        offset: usize,
        trailing: usize,
    },
}

/// A cursor over a body.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    pub fn position(&self) -> usize {
        self.pos
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub fn bytes(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], WireError> {
        if self.remaining() < n {
            return Err(WireError::Short {
                what,
                offset: self.pos,
                need: n,
                have: self.remaining(),
            });
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], WireError> {
        let bytes = self.bytes(N, what)?;
        let mut out = [0; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    pub fn u8(&mut self, what: &'static str) -> Result<u8, WireError> {
        Ok(self.array::<1>(what)?[0])
    }

    pub fn u16(&mut self, what: &'static str) -> Result<u16, WireError> {
        self.array(what).map(u16::from_le_bytes)
    }

    pub fn u32(&mut self, what: &'static str) -> Result<u32, WireError> {
        self.array(what).map(u32::from_le_bytes)
    }

    pub fn u64(&mut self, what: &'static str) -> Result<u64, WireError> {
        self.array(what).map(u64::from_le_bytes)
    }

    pub fn u128(&mut self, what: &'static str) -> Result<u128, WireError> {
        self.array(what).map(u128::from_le_bytes)
    }

    /// UTF-8 of `n` bytes.
    pub fn str(&mut self, n: usize, what: &'static str) -> Result<&'a str, WireError> {
        let offset = self.pos;
        let bytes = self.bytes(n, what)?;
        std::str::from_utf8(bytes).map_err(|error| self.invalid(what, offset, error.to_string()))
    }

    /// Everything not read yet.
    pub fn rest(&mut self) -> &'a [u8] {
        let out = &self.buf[self.pos..];
        self.pos = self.buf.len();
        out
    }

    pub fn invalid(&self, what: &'static str, offset: usize, reason: String) -> WireError {
        WireError::Invalid {
            what,
            offset,
            reason,
        }
    }

    /// The body must end here.
    pub fn finish(&self, what: &'static str) -> Result<(), WireError> {
        match self.remaining() {
            0 => Ok(()),
            trailing => Err(WireError::Trailing {
                what,
                offset: self.pos,
                trailing,
            }),
        }
    }
}

/// Little-endian appends.
pub trait Put {
    fn put_u8(&mut self, value: u8);
    fn put_u16(&mut self, value: u16);
    fn put_u32(&mut self, value: u32);
    fn put_u64(&mut self, value: u64);
    fn put_u128(&mut self, value: u128);
    fn put_bytes(&mut self, value: &[u8]);
    /// A length as a u32 prefix, then the bytes.
    fn put_long_str(&mut self, value: &str);
}

impl Put for Vec<u8> {
    fn put_u8(&mut self, value: u8) {
        self.push(value);
    }
    fn put_u16(&mut self, value: u16) {
        self.extend_from_slice(&value.to_le_bytes());
    }
    fn put_u32(&mut self, value: u32) {
        self.extend_from_slice(&value.to_le_bytes());
    }
    fn put_u64(&mut self, value: u64) {
        self.extend_from_slice(&value.to_le_bytes());
    }
    fn put_u128(&mut self, value: u128) {
        self.extend_from_slice(&value.to_le_bytes());
    }
    fn put_bytes(&mut self, value: &[u8]) {
        self.extend_from_slice(value);
    }
    fn put_long_str(&mut self, value: &str) {
        self.put_u32(u32::try_from(value.len()).unwrap_or(u32::MAX));
        self.put_bytes(&value.as_bytes()[..value.len().min(u32::MAX as usize)]);
    }
}

/// A length as the u32 the wire carries (lengths here never reach 4 GiB: bodies are bounded by
/// the header's u32 size).
pub fn len_u32(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

/// A length the caller cut to at most 255 bytes, as a u8.
pub fn len_u8(len: usize) -> u8 {
    u8::try_from(len).unwrap_or(u8::MAX)
}
