//! The DNS server around `corral-dns-proto`: zones loaded from files named on the command
//! line or in a config file, counters for every kind of answer and drop, and the loops that
//! move UDP datagrams and TCP frames (RFC 7766: a 2-byte length before each message, any
//! number of queries on one connection) between sockets and [`Catalog::respond`]. [`linux`]
//! serves on Linux sockets, [`corral`] on Corral's runtime.

pub mod config;
pub mod corral;
pub mod linux;

use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use corral_dns_proto::wire::UDP_MAX_PAYLOAD;
use corral_dns_proto::{Catalog, Dropped, Outcome, Transport};

/// Counts of what the server did with each message, readable while it runs.
#[derive(Default, Debug)]
pub struct Counters {
    pub udp_queries: AtomicU64,
    pub tcp_queries: AtomicU64,
    pub tcp_connections: AtomicU64,
    pub noerror: AtomicU64,
    pub nxdomain: AtomicU64,
    /// FORMERR: malformed queries.
    pub formerr: AtomicU64,
    /// REFUSED: names outside every zone, or classes other than IN.
    pub refused: AtomicU64,
    /// NOTIMP: opcodes other than QUERY.
    pub notimp: AtomicU64,
    /// BADVERS: EDNS versions other than 0.
    pub badvers: AtomicU64,
    pub other_rcode: AtomicU64,
    /// Responses cut short with TC set.
    pub truncated: AtomicU64,
    /// Dropped unanswered: shorter than a DNS header.
    pub dropped_short: AtomicU64,
    /// Dropped unanswered: QR set, a response rather than a query.
    pub dropped_response: AtomicU64,
    /// TCP connections closed because a frame announced fewer bytes than a header.
    pub tcp_bad_frames: AtomicU64,
    /// Replies the socket would not send.
    pub send_errors: AtomicU64,
}

impl Counters {
    fn count(&self, o: Outcome) {
        let c = match o {
            Outcome::Dropped(Dropped::TooShort) => &self.dropped_short,
            Outcome::Dropped(Dropped::NotAQuery) => &self.dropped_response,
            Outcome::Answered { rcode, truncated } => {
                if truncated {
                    self.truncated.fetch_add(1, Relaxed);
                }
                match rcode {
                    0 => &self.noerror,
                    1 => &self.formerr,
                    3 => &self.nxdomain,
                    4 => &self.notimp,
                    5 => &self.refused,
                    16 => &self.badvers,
                    _ => &self.other_rcode,
                }
            }
        };
        c.fetch_add(1, Relaxed);
    }

    /// One line of `name=value` pairs.
    pub fn line(&self) -> String {
        let f = |c: &AtomicU64| c.load(Relaxed);
        format!(
            "udp_queries={} tcp_queries={} tcp_connections={} noerror={} nxdomain={} \
             formerr={} refused={} notimp={} badvers={} other_rcode={} truncated={} \
             dropped_short={} dropped_response={} tcp_bad_frames={} send_errors={}",
            f(&self.udp_queries),
            f(&self.tcp_queries),
            f(&self.tcp_connections),
            f(&self.noerror),
            f(&self.nxdomain),
            f(&self.formerr),
            f(&self.refused),
            f(&self.notimp),
            f(&self.badvers),
            f(&self.other_rcode),
            f(&self.truncated),
            f(&self.dropped_short),
            f(&self.dropped_response),
            f(&self.tcp_bad_frames),
            f(&self.send_errors),
        )
    }
}

/// The zones and the counters, shared by every thread or uthread that answers.
pub struct Server {
    pub catalog: Catalog,
    pub counters: Counters,
}

/// Buffer for the largest UDP response the server sends.
pub const UDP_BUF: usize = UDP_MAX_PAYLOAD as usize;

impl Server {
    pub fn new(catalog: Catalog) -> Server {
        Server {
            catalog,
            counters: Counters::default(),
        }
    }

    /// Answers one datagram into `out`; returns the response's length, 0 for no response.
    pub fn answer_datagram(&self, datagram: &[u8], out: &mut [u8; UDP_BUF]) -> usize {
        self.counters.udp_queries.fetch_add(1, Relaxed);
        let (len, outcome) = self.catalog.respond(datagram, Transport::Udp, out);
        self.counters.count(outcome);
        len
    }

    /// Serves one TCP connection until the client closes it (or a read fails or times out):
    /// each 2-byte length and message in, each 2-byte length and response out, in order.
    pub fn serve_tcp<S: Read + Write>(&self, mut stream: S) -> io::Result<()> {
        self.counters.tcp_connections.fetch_add(1, Relaxed);
        let mut query = vec![0u8; usize::from(u16::MAX)];
        let mut out = vec![0u8; 2 + usize::from(u16::MAX)];
        loop {
            let mut len = [0u8; 2];
            if !read_full(&mut stream, &mut len)? {
                return Ok(());
            }
            let len = usize::from(u16::from_be_bytes(len));
            if !read_full(&mut stream, &mut query[..len])? {
                return Ok(());
            }
            self.counters.tcp_queries.fetch_add(1, Relaxed);
            let (n, outcome) = self
                .catalog
                .respond(&query[..len], Transport::Tcp, &mut out[2..]);
            self.counters.count(outcome);
            if len < corral_dns_proto::wire::HEADER_LEN {
                // Nothing in it says where the next message starts, if the peer even speaks
                // DNS: close rather than guess.
                self.counters.tcp_bad_frames.fetch_add(1, Relaxed);
                return Ok(());
            }
            if n == 0 {
                continue;
            }
            out[..2].copy_from_slice(&(n as u16).to_be_bytes());
            stream.write_all(&out[..2 + n])?;
        }
    }
}

/// Fills `buf`; false when the peer closed the connection before the first byte of it.
fn read_full<S: Read>(stream: &mut S, buf: &mut [u8]) -> io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        match stream.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}
