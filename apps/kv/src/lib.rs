//! The key-value server around `corral-memcache`: the clock, the per-connection loop and the
//! UDP framing, written against `std::io::{Read, Write}` so that any byte-stream backend can
//! serve connections. [`linux`] is the Linux-socket backend (a thread per connection);
//! [`corral`] runs the same calls on Corral's runtime (a uthread per connection or datagram).

pub mod corral;
pub mod linux;

use std::io::{self, Read, Write};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use corral_memcache::{Limits, Session, ShardWait, Status, Store, StoreConfig};

/// Seconds since the server started, as memcached's `current_time`; relative time 0 is
/// `process_started`, 62 s before the real start as in memcached, so that no item is stamped 0
/// and a fresh item already counts as bumped within the last minute.
pub struct Clock {
    started: Instant,
    process_started: i64,
}

const CLOCK_HEADROOM_S: i64 = 62;

impl Clock {
    pub fn start() -> Self {
        let unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        Clock {
            started: Instant::now(),
            process_started: unix - CLOCK_HEADROOM_S,
        }
    }

    pub fn process_started(&self) -> i64 {
        self.process_started
    }

    pub fn now(&self) -> u32 {
        (self.started.elapsed().as_secs() as i64 + CLOCK_HEADROOM_S) as u32
    }
}

/// Settings, as memcached's flags name them.
#[derive(Clone, Debug)]
pub struct Settings {
    pub tcp_port: u16,
    pub udp_port: u16,
    pub listen: String,
    pub memory_mb: usize,
    pub max_connections: usize,
    pub item_size_max: usize,
    pub threads: usize,
    /// How a connection waits for a store shard another one holds: OS threads sleep in the
    /// kernel, uthreads spin and yield to the runtime.
    pub shard_wait: ShardWait,
}

/// Everything a connection needs: the store, the clock and the session limits.
pub struct Server {
    pub store: Store,
    pub clock: Clock,
    pub limits: Limits,
    pub settings: Settings,
}

/// memcached's answer to a connection beyond `-c`.
pub const TOO_MANY_CONNECTIONS: &[u8] = b"ERROR Too many open connections\r\n";

/// A connection counted in the store's `curr_connections` and `total_connections`; it stops
/// counting as current when dropped, however its thread or uthread ends (or fails to start).
pub struct Admitted(Arc<Server>);

impl Admitted {
    pub fn server(&self) -> &Server {
        &self.0
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.0
            .store
            .counters
            .curr_connections
            .fetch_sub(1, Ordering::Relaxed);
    }
}

impl Server {
    /// Counts a new connection, or refuses it (`None`) when `-c` connections are open already.
    /// Called by the one thread or uthread that accepts, so the check and the count need not
    /// be one atomic step.
    pub fn admit(self: &Arc<Self>) -> Option<Admitted> {
        let counters = &self.store.counters;
        if counters.curr_connections.load(Ordering::Relaxed) as usize
            >= self.settings.max_connections
        {
            return None;
        }
        counters.curr_connections.fetch_add(1, Ordering::Relaxed);
        counters.total_connections.fetch_add(1, Ordering::Relaxed);
        Some(Admitted(self.clone()))
    }

    pub fn new(settings: Settings) -> Arc<Self> {
        let clock = Clock::start();
        let mut cfg = StoreConfig::new(
            settings.memory_mb << 20,
            settings.item_size_max,
            clock.process_started(),
        );
        cfg.shards = (settings.threads * 16).next_power_of_two();
        cfg.threads = settings.threads;
        cfg.max_connections = settings.max_connections;
        cfg.tcp_port = settings.tcp_port;
        cfg.udp_port = settings.udp_port;
        cfg.wait = settings.shard_wait;
        Arc::new(Server {
            store: Store::new(cfg),
            clock,
            limits: Limits::default(),
            settings,
        })
    }

    /// Serves one connection until the client leaves or the protocol closes it. Reads only
    /// while the replies so far are written, so a client that never reads its replies stalls
    /// only its own connection, with bounded memory.
    pub fn serve<S: Read + Write>(&self, mut stream: S) -> io::Result<()> {
        let mut session = Session::new(self.limits);
        let mut inbuf = vec![0u8; 16 << 10];
        let mut out = Vec::with_capacity(16 << 10);
        loop {
            match session.run(&self.store, self.clock.now(), &mut out) {
                Status::OutputFull => {
                    stream.write_all(&out)?;
                    out.clear();
                }
                Status::Close => {
                    stream.write_all(&out)?;
                    stream.flush()?;
                    return Ok(());
                }
                Status::NeedInput => {
                    if !out.is_empty() {
                        stream.write_all(&out)?;
                        out.clear();
                    }
                    let n = stream.read(&mut inbuf)?;
                    if n == 0 {
                        return Ok(());
                    }
                    session.feed(&inbuf[..n]);
                }
            }
        }
    }

    /// Answers one UDP datagram (memcached's 8-byte frame header, then one request) with the
    /// datagrams of its reply, each at most 1400 bytes. Multi-datagram requests are dropped, as
    /// memcached drops them.
    pub fn answer_datagram(&self, datagram: &[u8], replies: &mut Vec<Vec<u8>>) {
        if datagram.len() <= UDP_HEADER || datagram[4] != 0 || datagram[5] != 1 {
            return;
        }
        let request_id = [datagram[0], datagram[1]];
        let mut session = Session::new(self.limits);
        session.feed(&datagram[UDP_HEADER..]);
        let mut out = Vec::new();
        // A datagram's reply is bounded by what one request can ask for.
        while session.run(&self.store, self.clock.now(), &mut out) == Status::OutputFull {}
        let total = out.len().div_ceil(UDP_DATA).min(usize::from(u16::MAX));
        for (seq, chunk) in out.chunks(UDP_DATA).take(total).enumerate() {
            let mut d = Vec::with_capacity(UDP_HEADER + chunk.len());
            d.extend_from_slice(&request_id);
            d.extend_from_slice(&(seq as u16).to_be_bytes());
            d.extend_from_slice(&(total as u16).to_be_bytes());
            d.extend_from_slice(&[0, 0]);
            d.extend_from_slice(chunk);
            replies.push(d);
        }
    }
}

const UDP_HEADER: usize = 8;
/// memcached's `UDP_DATA_SIZE`: 1400-byte datagrams less the header.
const UDP_DATA: usize = 1392;
