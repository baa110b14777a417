//! A bounds-checked little-endian reader over the file's bytes: every read that would run past the end, and
//! every length that could not fit in what is left, becomes `Error::Malformed` with the byte offset.

use std::path::Path;

use crate::error::{Error, Result};

pub(crate) struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
    path: &'a Path,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(bytes: &'a [u8], path: &'a Path) -> Self {
        Cursor { bytes, pos: 0, path }
    }

    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    pub(crate) fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    /// An error at the current position.
    pub(crate) fn error(&self, what: impl Into<String>) -> Error {
        self.error_at(self.pos, what)
    }

    pub(crate) fn error_at(&self, offset: usize, what: impl Into<String>) -> Error {
        Error::Malformed { path: self.path.to_path_buf(), offset: offset as u64, what: what.into() }
    }

    pub(crate) fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(self.error(format!("file truncated: {what} needs {n} bytes, {} left", self.remaining())));
        }
        let slice = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(slice)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    pub(crate) fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.array::<1>(what)?[0])
    }
    pub(crate) fn u16(&mut self, what: &str) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }
    pub(crate) fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    pub(crate) fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A u64 count or length that must fit in `usize`.
    pub(crate) fn len(&mut self, what: &str) -> Result<usize> {
        let at = self.pos;
        let n = self.u64(what)?;
        usize::try_from(n).map_err(|_| self.error_at(at, format!("{what} {n} does not fit in memory")))
    }

    /// A GGUF string: u64 byte length, then UTF-8 bytes (no terminator).
    pub(crate) fn string(&mut self, what: &str) -> Result<String> {
        let len = self.len(what)?;
        let at = self.pos;
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|e| self.error_at(at, format!("{what} is not UTF-8: {e}")))
    }
}
