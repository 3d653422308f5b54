//! Writes a response into a caller's buffer, compressing names (RFC 1035 section 4.1.4) and
//! stopping at a byte limit: the client's UDP payload size, or 65535 over TCP. Nothing here
//! allocates.

use crate::wire::{HEADER_LEN, rtype};

/// Label starts remembered as compression targets; a name past them is written whole, which
/// costs bytes but never correctness.
const MAX_MARKS: usize = 96;
/// A pointer holds 14 bits of offset.
const MAX_POINTER: usize = 0x3fff;

/// The write would pass the limit; the writer is unchanged past the last checkpoint's bytes
/// (the caller rolls back to it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Full;

/// A point to roll back to when a record set does not fit whole.
#[derive(Clone, Copy, Debug)]
pub struct Mark {
    len: usize,
    marks: usize,
}

pub struct Writer<'a> {
    buf: &'a mut [u8],
    len: usize,
    limit: usize,
    marks: [u16; MAX_MARKS],
    n_marks: usize,
}

impl<'a> Writer<'a> {
    /// A writer whose message starts after a 12-byte header left for [`Writer::header`].
    pub fn new(buf: &'a mut [u8], limit: usize) -> Writer<'a> {
        let limit = limit.min(buf.len());
        Writer {
            buf,
            len: HEADER_LEN.min(limit),
            limit,
            marks: [0; MAX_MARKS],
            n_marks: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    pub fn set_limit(&mut self, limit: usize) {
        self.limit = limit.min(self.buf.len()).max(self.len);
    }

    pub fn header_bytes(&mut self) -> &mut [u8] {
        &mut self.buf[..HEADER_LEN]
    }

    pub fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// Continues a message whose first `len` bytes are already in the buffer, with no
    /// compression targets in them.
    pub fn rollback_to_len(&mut self, len: usize) {
        self.len = len;
        self.n_marks = 0;
    }

    pub fn mark(&self) -> Mark {
        Mark {
            len: self.len,
            marks: self.n_marks,
        }
    }

    pub fn rollback(&mut self, m: Mark) {
        self.len = m.len;
        self.n_marks = m.marks;
    }

    pub fn put(&mut self, bytes: &[u8]) -> Result<(), Full> {
        let end = self.len + bytes.len();
        if end > self.limit {
            return Err(Full);
        }
        self.buf[self.len..end].copy_from_slice(bytes);
        self.len = end;
        Ok(())
    }

    pub fn put_u16(&mut self, v: u16) -> Result<(), Full> {
        self.put(&v.to_be_bytes())
    }

    pub fn put_u32(&mut self, v: u32) -> Result<(), Full> {
        self.put(&v.to_be_bytes())
    }

    fn patch_u16(&mut self, at: usize, v: u16) {
        self.buf[at..at + 2].copy_from_slice(&v.to_be_bytes());
    }

    /// Writes a well-formed wire name, pointing at the longest suffix already in the message
    /// (compared without case) and remembering its new labels as targets for later names.
    pub fn name(&mut self, name: &[u8]) -> Result<(), Full> {
        let mut head = 0;
        let mut pointer = None;
        while name[head] != 0 {
            if let Some(at) = self.find(&name[head..]) {
                pointer = Some(at);
                break;
            }
            head += 1 + name[head] as usize;
        }
        let start = self.len;
        self.put(&name[..head])?;
        match pointer {
            Some(at) => self.put_u16(0xc000 | at as u16)?,
            None => self.put(&[0])?,
        }
        let mut i = 0;
        while i < head {
            let at = start + i;
            if at <= MAX_POINTER && self.n_marks < MAX_MARKS {
                self.marks[self.n_marks] = at as u16;
                self.n_marks += 1;
            }
            i += 1 + name[i] as usize;
        }
        Ok(())
    }

    /// Writes a name as-is, neither compressed nor a compression target (the OPT owner, and
    /// names in record data that RFC 3597 forbids compressing).
    pub fn name_uncompressed(&mut self, name: &[u8]) -> Result<(), Full> {
        self.put(name)
    }

    fn find(&self, suffix: &[u8]) -> Option<usize> {
        self.marks[..self.n_marks]
            .iter()
            .map(|&m| m as usize)
            .find(|&m| self.matches_at(m, suffix))
    }

    /// Whether the name written at `at` (pointers followed; the writer only ever wrote
    /// backward ones) equals `suffix` without regard to case.
    fn matches_at(&self, mut at: usize, mut suffix: &[u8]) -> bool {
        loop {
            let b = self.buf[at];
            if b >= 0xc0 {
                at = (usize::from(b & 0x3f) << 8) | usize::from(self.buf[at + 1]);
                continue;
            }
            let l = b as usize;
            if suffix[0] as usize != l {
                return false;
            }
            if l == 0 {
                return true;
            }
            if !self.buf[at + 1..at + 1 + l].eq_ignore_ascii_case(&suffix[1..1 + l]) {
                return false;
            }
            at += 1 + l;
            suffix = &suffix[1 + l..];
        }
    }

    /// Writes one record of class IN. Names in the data of the types RFC 1035 defined are
    /// compressed, as RFC 3597 section 4 allows for those types only.
    pub fn record(&mut self, owner: &[u8], t: u16, ttl: u32, rdata: &[u8]) -> Result<(), Full> {
        self.name(owner)?;
        self.put_u16(t)?;
        self.put_u16(crate::wire::class::IN)?;
        self.put_u32(ttl)?;
        let len_at = self.len;
        self.put_u16(0)?;
        let data_at = self.len;
        match t {
            rtype::NS | rtype::CNAME | rtype::PTR => self.name(rdata)?,
            rtype::MX => {
                self.put(&rdata[..2])?;
                self.name(&rdata[2..])?;
            }
            rtype::SOA => {
                let m = crate::name_len(rdata);
                let r = crate::name_len(&rdata[m..]);
                self.name(&rdata[..m])?;
                self.name(&rdata[m..m + r])?;
                self.put(&rdata[m + r..])?;
            }
            _ => self.put(rdata)?,
        }
        let rdlen = (self.len - data_at) as u16;
        self.patch_u16(len_at, rdlen);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compresses_shared_suffixes_without_case() {
        let mut buf = [0u8; 512];
        let mut w = Writer::new(&mut buf, 512);
        w.name(b"\x03www\x07Example\x03com\x00").unwrap();
        w.name(b"\x04mail\x07example\x03COM\x00").unwrap();
        w.name(b"\x03www\x07example\x03com\x00").unwrap();
        assert_eq!(
            &w.bytes()[12..],
            b"\x03www\x07Example\x03com\x00\x04mail\xc0\x10\xc0\x0c"
        );
    }

    #[test]
    fn stops_at_the_limit() {
        let mut buf = [0u8; 512];
        let mut w = Writer::new(&mut buf, 20);
        let m = w.mark();
        assert_eq!(w.name(b"\x03www\x07example\x03com\x00"), Err(Full));
        w.rollback(m);
        assert_eq!(w.len(), 12);
        w.name(b"\x03www\x00").unwrap();
        assert_eq!(w.len(), 17);
    }
}
