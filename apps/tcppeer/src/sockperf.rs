//! The server side of sockperf's TCP protocol (`sockperf sr --tcp`), as seen on the wire from
//! sockperf 3.7: a stream of messages, each a 14-byte header followed by the payload,
//!
//! | bytes | field |
//! |---|---|
//! | 0..8 | sequence number, big-endian |
//! | 8..10 | flags, big-endian: 1 = from the client, 2 = a reply is wanted, 4 = warm-up |
//! | 10..14 | the whole message's length (header included), big-endian |
//!
//! The server answers each message that wants a reply with the same bytes, the client flag
//! cleared; the others (throughput mode) it only reads.

use std::io::{self, Read, Write};

pub const HEADER: usize = 14;
pub const FLAG_CLIENT: u16 = 1;
pub const FLAG_PONG_REQUEST: u16 = 2;
/// sockperf's own upper bound on a message (`MAX_PAYLOAD_SIZE`).
pub const MAX_MESSAGE: usize = 65_507;

/// Serves one connection until the client's FIN; `received` sees every byte read.
pub fn serve(
    stream: &mut (impl Read + Write),
    received: &mut dyn FnMut(&[u8]),
    sent: &mut u64,
) -> io::Result<()> {
    let mut message = vec![0u8; MAX_MESSAGE];
    loop {
        if !read_full(stream, &mut message[..HEADER], received)? {
            return Ok(());
        }
        let len = u32::from_be_bytes(message[10..14].try_into().expect("4 bytes")) as usize;
        if !(HEADER..=MAX_MESSAGE).contains(&len) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("sockperf message of {len} bytes"),
            ));
        }
        if !read_full(stream, &mut message[HEADER..len], received)? {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let flags = u16::from_be_bytes([message[8], message[9]]);
        if flags & FLAG_PONG_REQUEST != 0 {
            message[8..10].copy_from_slice(&(flags & !FLAG_CLIENT).to_be_bytes());
            stream.write_all(&message[..len])?;
            *sent += len as u64;
        }
    }
}

/// Fills `buf`; false if the stream ended before its first byte.
fn read_full(
    stream: &mut impl Read,
    buf: &mut [u8],
    received: &mut dyn FnMut(&[u8]),
) -> io::Result<bool> {
    let mut filled = 0;
    while filled < buf.len() {
        match stream.read(&mut buf[filled..]) {
            Ok(0) if filled == 0 => return Ok(false),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                received(&buf[filled..filled + n]);
                filled += n;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}
