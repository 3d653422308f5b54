//! Clients of the services, over any [`Net`].

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::net::Net;
use crate::pattern;

/// Sends `len` pattern bytes for `seed` to a sink at `addr`, half-closes, and returns the
/// sink's answer: the hex SHA-256 of what it read. `timeout` bounds each connect and read.
pub fn upload<N: Net>(
    addr: SocketAddr,
    len: u64,
    seed: u64,
    timeout: Duration,
) -> io::Result<String> {
    let mut stream = N::connect(addr, timeout)?;
    N::set_read_timeout(&stream, Some(timeout))?;
    let mut result = Ok(());
    pattern::for_each_chunk(len, seed, |chunk| {
        if result.is_ok() {
            result = stream.write_all(chunk);
        }
    });
    result?;
    N::shutdown(&stream, Shutdown::Write)?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply)?;
    Ok(reply.trim().to_string())
}

/// Reads a source at `addr` to its FIN, then half-closes; returns the byte count and SHA-256.
pub fn download<N: Net>(addr: SocketAddr, timeout: Duration) -> io::Result<(u64, [u8; 32])> {
    let mut stream = N::connect(addr, timeout)?;
    N::set_read_timeout(&stream, Some(timeout))?;
    let mut hasher = Sha256::new();
    let mut total = 0u64;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                hasher.update(&buf[..n]);
                total += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    N::shutdown(&stream, Shutdown::Write)?;
    Ok((total, hasher.finalize().into()))
}
