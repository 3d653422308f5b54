//! memcached's text protocol, the client's half: requests encoded into a buffer, and replies
//! parsed incrementally from a byte stream (TCP, pipelined) or from UDP datagrams with
//! memcached's 8-byte frame header (a reply may span several datagrams).
//!
//! The parser works on whatever bytes have arrived: [`parse_element`] either returns one
//! complete reply element and how many bytes it took, or says that more bytes are needed. It
//! never panics on any input, and where the stream is split does not change what it parses
//! (both are property tests below). A reply to `get` is a run of [`Element::Value`]s ended by
//! [`Element::End`]; every other reply is one element.

use std::fmt;

/// Longest key memcached accepts.
pub const MAX_KEY_LEN: usize = 250;

/// Longest reply line the parser waits for before calling the stream broken. memcached's
/// longest lines are a `VALUE` header (a 250-byte key and four numbers) and error messages.
pub const MAX_LINE: usize = 2048;

/// Largest value the parser accepts in a `VALUE` header (memcached's own limit is 1 GiB).
pub const MAX_VALUE_LEN: usize = 1 << 30;

/// Bytes of the frame header memcached puts before every UDP request and reply datagram.
pub const UDP_HEADER_LEN: usize = 8;

/// A key memcached would refuse: empty, over 250 bytes, or with a space or control byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadKey {
    pub len: usize,
}

impl fmt::Display for BadKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid key of {} bytes: expected 1 to {MAX_KEY_LEN} bytes with no space or control byte",
            self.len
        )
    }
}

impl std::error::Error for BadKey {}

fn check_key(key: &[u8]) -> Result<(), BadKey> {
    if key.is_empty() || key.len() > MAX_KEY_LEN || key.iter().any(|&b| b <= b' ' || b == 0x7f) {
        return Err(BadKey { len: key.len() });
    }
    Ok(())
}

/// Appends `get <key>\r\n`.
pub fn encode_get(out: &mut Vec<u8>, key: &[u8]) -> Result<(), BadKey> {
    check_key(key)?;
    out.extend_from_slice(b"get ");
    out.extend_from_slice(key);
    out.extend_from_slice(b"\r\n");
    Ok(())
}

/// Appends `set <key> <flags> <exptime> <bytes>\r\n<value>\r\n`.
pub fn encode_set(
    out: &mut Vec<u8>,
    key: &[u8],
    flags: u32,
    exptime: u32,
    value: &[u8],
) -> Result<(), BadKey> {
    check_key(key)?;
    out.extend_from_slice(b"set ");
    out.extend_from_slice(key);
    push_decimal(out, b' ', u64::from(flags));
    push_decimal(out, b' ', u64::from(exptime));
    push_decimal(out, b' ', value.len() as u64);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
    Ok(())
}

/// Appends `delete <key>\r\n`.
pub fn encode_delete(out: &mut Vec<u8>, key: &[u8]) -> Result<(), BadKey> {
    check_key(key)?;
    out.extend_from_slice(b"delete ");
    out.extend_from_slice(key);
    out.extend_from_slice(b"\r\n");
    Ok(())
}

/// `sep` then `n` in decimal, without going through `fmt`.
fn push_decimal(out: &mut Vec<u8>, sep: u8, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.push(sep);
    out.extend_from_slice(&digits[at..]);
}

/// One element of a reply, borrowing from the bytes it was parsed from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Element<'a> {
    /// `VALUE <key> <flags> <bytes> [<cas>]` and its data block.
    Value {
        key: &'a [u8],
        flags: u32,
        data: &'a [u8],
        cas: Option<u64>,
    },
    /// The end of a `get`'s values.
    End,
    Stored,
    NotStored,
    Exists,
    NotFound,
    Deleted,
    Touched,
    Ok,
    /// The new value after `incr` or `decr`.
    Number(u64),
    Version(&'a [u8]),
    /// An unknown command.
    Error,
    ClientError(&'a [u8]),
    ServerError(&'a [u8]),
}

/// Bytes that cannot be the start of a memcached reply: the stream is broken from here on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParseError {
    /// No line end within [`MAX_LINE`] bytes.
    LineTooLong,
    /// A line that is no reply memcached sends.
    Unrecognized,
    /// A `VALUE` line whose fields do not parse, or whose length is over [`MAX_VALUE_LEN`].
    BadValueHeader,
    /// A value's data block not followed by `\r\n`.
    BadDataEnd,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ParseError::LineTooLong => "a reply line longer than 2048 bytes",
            ParseError::Unrecognized => "a line that is not a memcached reply",
            ParseError::BadValueHeader => "a malformed VALUE line",
            ParseError::BadDataEnd => "a value's data not followed by CRLF",
        })
    }
}

impl std::error::Error for ParseError {}

/// Parses the reply element at the start of `buf`: `Ok(None)` if more bytes are needed, else
/// the element and the bytes it spans.
pub fn parse_element(buf: &[u8]) -> Result<Option<(Element<'_>, usize)>, ParseError> {
    let window = &buf[..buf.len().min(MAX_LINE)];
    let Some(nl) = window.iter().position(|&b| b == b'\n') else {
        return if buf.len() >= MAX_LINE {
            Err(ParseError::LineTooLong)
        } else {
            Ok(None)
        };
    };
    if nl == 0 || buf[nl - 1] != b'\r' {
        return Err(ParseError::Unrecognized);
    }
    let line = &buf[..nl - 1];
    let line_len = nl + 1;
    let simple = |e| Ok(Some((e, line_len)));
    match line {
        b"END" => simple(Element::End),
        b"STORED" => simple(Element::Stored),
        b"NOT_STORED" => simple(Element::NotStored),
        b"EXISTS" => simple(Element::Exists),
        b"NOT_FOUND" => simple(Element::NotFound),
        b"DELETED" => simple(Element::Deleted),
        b"TOUCHED" => simple(Element::Touched),
        b"OK" => simple(Element::Ok),
        b"ERROR" => simple(Element::Error),
        _ => {
            if let Some(rest) = line.strip_prefix(b"VALUE ") {
                return parse_value(buf, rest, line_len);
            }
            if let Some(msg) = line.strip_prefix(b"CLIENT_ERROR ") {
                return simple(Element::ClientError(msg));
            }
            if let Some(msg) = line.strip_prefix(b"SERVER_ERROR ") {
                return simple(Element::ServerError(msg));
            }
            if let Some(v) = line.strip_prefix(b"VERSION ") {
                return simple(Element::Version(v));
            }
            match decimal(line) {
                Some(n) => simple(Element::Number(n)),
                None => Err(ParseError::Unrecognized),
            }
        }
    }
}

fn parse_value<'a>(
    buf: &'a [u8],
    header: &'a [u8],
    line_len: usize,
) -> Result<Option<(Element<'a>, usize)>, ParseError> {
    let mut fields = header.split(|&b| b == b' ');
    let key = fields.next().filter(|k| check_key(k).is_ok());
    let flags = fields.next().and_then(decimal);
    let bytes = fields.next().and_then(decimal);
    let cas = match fields.next() {
        None => Some(None),
        Some(c) => decimal(c).map(Some),
    };
    let (Some(key), Some(flags), Some(bytes), Some(cas), None) =
        (key, flags, bytes, cas, fields.next())
    else {
        return Err(ParseError::BadValueHeader);
    };
    let flags = u32::try_from(flags).map_err(|_| ParseError::BadValueHeader)?;
    let len = usize::try_from(bytes)
        .ok()
        .filter(|&n| n <= MAX_VALUE_LEN)
        .ok_or(ParseError::BadValueHeader)?;
    let end = line_len + len + 2;
    if buf.len() < end {
        return Ok(None);
    }
    if &buf[end - 2..end] != b"\r\n" {
        return Err(ParseError::BadDataEnd);
    }
    let data = &buf[line_len..line_len + len];
    Ok(Some((
        Element::Value {
            key,
            flags,
            data,
            cas,
        },
        end,
    )))
}

/// A non-empty run of ASCII digits that fits in a u64.
fn decimal(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    let mut n: u64 = 0;
    for &b in s {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(n)
}

/// The bytes of a reply stream not parsed yet. Read into [`spare`](ReplyStream::spare), say
/// how much arrived with [`filled`](ReplyStream::filled), then take elements with
/// [`next_element`](ReplyStream::next_element) until it returns `None`.
#[derive(Clone, Debug, Default)]
pub struct ReplyStream {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Set once a parse error was seen: nothing after it is parsed.
    broken: Option<ParseError>,
}

impl ReplyStream {
    pub fn new() -> Self {
        Self::default()
    }

    /// Room for at least `min` more bytes at the end of the stream.
    pub fn spare(&mut self, min: usize) -> &mut [u8] {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.start > 0 && self.buf.len() - self.end < min {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.buf.len() - self.end < min {
            self.buf.resize(self.end + min, 0);
        }
        &mut self.buf[self.end..]
    }

    /// `n` bytes were written at the start of the last [`spare`](ReplyStream::spare).
    pub fn filled(&mut self, n: usize) {
        self.end = (self.end + n).min(self.buf.len());
    }

    /// Appends bytes (a copy; [`spare`](ReplyStream::spare) avoids it).
    pub fn extend(&mut self, bytes: &[u8]) {
        self.spare(bytes.len())[..bytes.len()].copy_from_slice(bytes);
        self.filled(bytes.len());
    }

    /// Bytes received and not yet parsed.
    pub fn pending(&self) -> usize {
        self.end - self.start
    }

    /// The next complete element, `None` if more bytes are needed. After an error the stream
    /// stays broken and returns that error.
    pub fn next_element(&mut self) -> Result<Option<Element<'_>>, ParseError> {
        if let Some(e) = self.broken {
            return Err(e);
        }
        match parse_element(&self.buf[self.start..self.end]) {
            Ok(Some((element, len))) => {
                self.start += len;
                Ok(Some(element))
            }
            Ok(None) => Ok(None),
            Err(e) => {
                self.broken = Some(e);
                Err(e)
            }
        }
    }
}

/// memcached's UDP frame header: a request id the reply echoes, the datagram's sequence
/// number within its message, and how many datagrams the message has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpFrame {
    pub request_id: u16,
    pub seq: u16,
    pub total: u16,
}

/// A datagram too short for the frame header, or with a sequence number outside its count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadUdpFrame;

impl fmt::Display for BadUdpFrame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a datagram without a valid memcached UDP frame header")
    }
}

impl std::error::Error for BadUdpFrame {}

impl UdpFrame {
    /// The header of a one-datagram request.
    pub fn request(request_id: u16) -> Self {
        UdpFrame {
            request_id,
            seq: 0,
            total: 1,
        }
    }

    pub fn encode(&self) -> [u8; UDP_HEADER_LEN] {
        let [a, b] = self.request_id.to_be_bytes();
        let [c, d] = self.seq.to_be_bytes();
        let [e, f] = self.total.to_be_bytes();
        [a, b, c, d, e, f, 0, 0]
    }

    /// The header and the payload after it.
    pub fn decode(datagram: &[u8]) -> Result<(UdpFrame, &[u8]), BadUdpFrame> {
        let Some((h, payload)) = datagram.split_first_chunk::<UDP_HEADER_LEN>() else {
            return Err(BadUdpFrame);
        };
        let frame = UdpFrame {
            request_id: u16::from_be_bytes([h[0], h[1]]),
            seq: u16::from_be_bytes([h[2], h[3]]),
            total: u16::from_be_bytes([h[4], h[5]]),
        };
        if frame.total == 0 || frame.seq >= frame.total {
            return Err(BadUdpFrame);
        }
        Ok((frame, payload))
    }
}

/// Reassembles replies that memcached split over several datagrams (it sends at most 1400
/// bytes of reply per datagram). One-datagram replies pass through without a copy. Parts are
/// kept per request id until the message is whole or the id is [`forget`](Self::forget)-ten,
/// which a client does when it reuses the id.
#[derive(Debug, Default)]
pub struct UdpReassembler {
    partial: std::collections::HashMap<u16, Partial>,
}

#[derive(Debug)]
struct Partial {
    total: u16,
    parts: Vec<Option<Vec<u8>>>,
    have: u16,
}

/// A request id and its whole reply (borrowed when it came in one datagram).
pub type WholeReply<'a> = (u16, std::borrow::Cow<'a, [u8]>);

/// Most parts a reply may have: a 1 MiB value in 1400-byte datagrams needs 750.
pub const MAX_UDP_PARTS: u16 = 1024;

impl UdpReassembler {
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes one datagram; returns the request id and the whole reply once every part of it
    /// has arrived.
    pub fn accept<'a>(
        &mut self,
        datagram: &'a [u8],
    ) -> Result<Option<WholeReply<'a>>, BadUdpFrame> {
        let (frame, payload) = UdpFrame::decode(datagram)?;
        if frame.total == 1 {
            self.partial.remove(&frame.request_id);
            return Ok(Some((frame.request_id, payload.into())));
        }
        if frame.total > MAX_UDP_PARTS {
            return Err(BadUdpFrame);
        }
        let partial = self
            .partial
            .entry(frame.request_id)
            .or_insert_with(|| Partial {
                total: frame.total,
                parts: vec![None; frame.total as usize],
                have: 0,
            });
        if partial.total != frame.total {
            // A different message under the same id: the old one cannot complete.
            *partial = Partial {
                total: frame.total,
                parts: vec![None; frame.total as usize],
                have: 0,
            };
        }
        let slot = &mut partial.parts[frame.seq as usize];
        if slot.is_none() {
            *slot = Some(payload.to_vec());
            partial.have += 1;
        }
        if partial.have < partial.total {
            return Ok(None);
        }
        let whole = self
            .partial
            .remove(&frame.request_id)
            .map(|p| p.parts.into_iter().flatten().flatten().collect::<Vec<u8>>())
            .unwrap_or_default();
        Ok(Some((frame.request_id, whole.into())))
    }

    /// Drops any parts kept for `request_id`.
    pub fn forget(&mut self, request_id: u16) {
        self.partial.remove(&request_id);
    }

    /// Messages waiting for parts.
    pub fn incomplete(&self) -> usize {
        self.partial.len()
    }
}

/// An owned copy of an element, for tests and diagnostics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OwnedElement {
    Value {
        key: Vec<u8>,
        flags: u32,
        data: Vec<u8>,
        cas: Option<u64>,
    },
    Other(String),
}

impl From<Element<'_>> for OwnedElement {
    fn from(e: Element<'_>) -> Self {
        match e {
            Element::Value {
                key,
                flags,
                data,
                cas,
            } => OwnedElement::Value {
                key: key.to_vec(),
                flags,
                data: data.to_vec(),
                cas,
            },
            other => OwnedElement::Other(format!("{other:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn all(bytes: &[u8]) -> Result<Vec<OwnedElement>, ParseError> {
        let mut s = ReplyStream::new();
        s.extend(bytes);
        let mut out = Vec::new();
        while let Some(e) = s.next_element()? {
            out.push(e.into());
        }
        Ok(out)
    }

    #[test]
    fn requests_are_memcached_text() {
        let mut out = Vec::new();
        encode_get(&mut out, b"k1").unwrap();
        encode_set(&mut out, b"k2", 7, 0, b"hello").unwrap();
        encode_delete(&mut out, b"k3").unwrap();
        assert_eq!(
            out,
            b"get k1\r\nset k2 7 0 5\r\nhello\r\ndelete k3\r\n".to_vec()
        );
        for bad in [&b""[..], b"a b", b"a\r\n", &[b'x'; 251][..]] {
            assert!(encode_get(&mut out, bad).is_err());
        }
        let mut out = Vec::new();
        encode_set(&mut out, b"k", u32::MAX, 0, b"").unwrap();
        assert_eq!(out, b"set k 4294967295 0 0\r\n\r\n".to_vec());
    }

    #[test]
    fn every_reply_kind_parses() {
        let stream =
            b"VALUE foo 5 3\r\nbar\r\nVALUE k 0 0 99\r\n\r\nEND\r\nSTORED\r\nNOT_STORED\r\n\
EXISTS\r\nNOT_FOUND\r\nDELETED\r\nTOUCHED\r\nOK\r\n42\r\nVERSION 1.6.18\r\nERROR\r\n\
CLIENT_ERROR bad data chunk\r\nSERVER_ERROR out of memory storing object\r\n";
        let mut s = ReplyStream::new();
        s.extend(stream);
        let mut got = Vec::new();
        while let Some(e) = s.next_element().unwrap() {
            got.push(format!("{e:?}"));
        }
        assert_eq!(got.len(), 15);
        assert_eq!(s.pending(), 0);
        let (e, n) = parse_element(b"VALUE foo 5 3\r\nbar\r\n").unwrap().unwrap();
        assert_eq!(n, 20);
        assert_eq!(
            e,
            Element::Value {
                key: b"foo",
                flags: 5,
                data: b"bar",
                cas: None
            }
        );
        assert_eq!(
            parse_element(b"VALUE k 0 0 99\r\n\r\n").unwrap().unwrap().0,
            Element::Value {
                key: b"k",
                flags: 0,
                data: b"",
                cas: Some(99)
            }
        );
        assert_eq!(
            parse_element(b"SERVER_ERROR out of memory\r\n")
                .unwrap()
                .unwrap()
                .0,
            Element::ServerError(b"out of memory")
        );
    }

    #[test]
    fn incomplete_input_waits_and_bad_input_is_an_error() {
        for partial in [
            &b""[..],
            b"VAL",
            b"VALUE foo 5 3\r\n",
            b"VALUE foo 5 3\r\nbar",
            b"VALUE foo 5 3\r\nbar\r",
            b"STORED\r",
        ] {
            assert_eq!(parse_element(partial), Ok(None), "{partial:?}");
        }
        for (bad, why) in [
            (&b"HELLO\r\n"[..], ParseError::Unrecognized),
            (b"STORED\n", ParseError::Unrecognized),
            (b"VALUE foo x 3\r\n", ParseError::BadValueHeader),
            (b"VALUE foo 1 3 4 5\r\n", ParseError::BadValueHeader),
            (b"VALUE foo 4294967296 3\r\n", ParseError::BadValueHeader),
            (b"VALUE foo 1 2000000000\r\n", ParseError::BadValueHeader),
            (b"VALUE foo 1 3\r\nbarXY", ParseError::BadDataEnd),
            (b"99999999999999999999999\r\n", ParseError::Unrecognized),
        ] {
            assert_eq!(parse_element(bad), Err(why), "{bad:?}");
        }
        assert_eq!(
            parse_element(&[b'a'; MAX_LINE]),
            Err(ParseError::LineTooLong)
        );
        // A broken stream stays broken.
        let mut s = ReplyStream::new();
        s.extend(b"STORED\r\nBOGUS\r\nSTORED\r\n");
        assert!(s.next_element().unwrap().is_some());
        assert!(s.next_element().is_err());
        assert!(s.next_element().is_err());
    }

    #[test]
    fn udp_frames_and_multi_datagram_replies() {
        let h = UdpFrame::request(0xBEEF).encode();
        assert_eq!(h, [0xBE, 0xEF, 0, 0, 0, 1, 0, 0]);
        assert!(UdpFrame::decode(&h[..7]).is_err());
        assert!(UdpFrame::decode(&[0, 1, 0, 2, 0, 2, 0, 0]).is_err());
        assert!(UdpFrame::decode(&[0, 1, 0, 0, 0, 0, 0, 0]).is_err());

        let reply = b"VALUE k 0 10\r\n0123456789\r\nEND\r\n";
        let mut r = UdpReassembler::new();
        let mut d = UdpFrame::request(3).encode().to_vec();
        d.extend_from_slice(reply);
        let (id, whole) = r.accept(&d).unwrap().unwrap();
        assert_eq!((id, &*whole), (3, &reply[..]));
        // Three parts arriving out of order, with a duplicate.
        let parts: Vec<Vec<u8>> = reply
            .chunks(12)
            .enumerate()
            .map(|(i, c)| {
                let mut d = UdpFrame {
                    request_id: 9,
                    seq: i as u16,
                    total: 3,
                }
                .encode()
                .to_vec();
                d.extend_from_slice(c);
                d
            })
            .collect();
        assert!(r.accept(&parts[2]).unwrap().is_none());
        assert!(r.accept(&parts[0]).unwrap().is_none());
        assert!(r.accept(&parts[0]).unwrap().is_none());
        assert_eq!(r.incomplete(), 1);
        let (id, whole) = r.accept(&parts[1]).unwrap().unwrap();
        assert_eq!((id, &*whole), (9, &reply[..]));
        assert_eq!(r.incomplete(), 0);
        assert!(r.accept(&parts[0]).unwrap().is_none());
        r.forget(9);
        assert_eq!(r.incomplete(), 0);
    }

    fn reply_stream() -> impl Strategy<Value = Vec<u8>> {
        let value = (
            "[a-z0-9:]{1,20}",
            any::<u32>(),
            proptest::collection::vec(any::<u8>(), 0..300),
            proptest::option::of(any::<u64>()),
        )
            .prop_map(|(k, flags, data, cas)| {
                let mut v = format!("VALUE {k} {flags} {}", data.len()).into_bytes();
                if let Some(c) = cas {
                    v.extend_from_slice(format!(" {c}").as_bytes());
                }
                v.extend_from_slice(b"\r\n");
                v.extend_from_slice(&data);
                v.extend_from_slice(b"\r\n");
                v
            });
        let simple = prop_oneof![
            Just(b"END\r\n".to_vec()),
            Just(b"STORED\r\n".to_vec()),
            Just(b"NOT_FOUND\r\n".to_vec()),
            Just(b"ERROR\r\n".to_vec()),
            any::<u64>().prop_map(|n| format!("{n}\r\n").into_bytes()),
            "[ -~]{0,40}".prop_map(|m| format!("SERVER_ERROR {m}\r\n").into_bytes()),
        ];
        proptest::collection::vec(prop_oneof![value, simple], 0..20).prop_map(|v| v.concat())
    }

    proptest! {
        #[test]
        fn random_splits_parse_the_same(stream in reply_stream(), cuts in proptest::collection::vec(any::<usize>(), 0..10)) {
            let whole = all(&stream).unwrap();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (stream.len() + 1)).collect();
            cuts.sort_unstable();
            cuts.push(stream.len());
            let mut s = ReplyStream::new();
            let mut got = Vec::new();
            let mut at = 0;
            for c in cuts {
                s.extend(&stream[at..c]);
                at = c;
                while let Some(e) = s.next_element().unwrap() {
                    got.push(OwnedElement::from(e));
                }
            }
            prop_assert_eq!(got, whole);
            prop_assert_eq!(s.pending(), 0);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..3000), step in 1usize..64) {
            let mut s = ReplyStream::new();
            for chunk in bytes.chunks(step) {
                s.extend(chunk);
                while let Ok(Some(_)) = s.next_element() {}
            }
            let _ = parse_element(&bytes);
            let mut r = UdpReassembler::new();
            let _ = r.accept(&bytes);
        }

        #[test]
        fn mutated_streams_never_panic(stream in reply_stream(), flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8)) {
            let mut stream = stream;
            if !stream.is_empty() {
                for (at, b) in flips {
                    let n = stream.len();
                    stream[at % n] = b;
                }
            }
            let _ = all(&stream);
        }
    }
}
