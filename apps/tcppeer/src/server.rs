//! The services, one accept loop per port and one thread of control per connection.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};

use crate::net::Net;
use crate::{pattern, sockperf};

/// What a port serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Service {
    /// Every byte back; a FIN after the client's.
    Echo,
    /// Read to the client's FIN, answer the SHA-256 in hex and a newline, close.
    Sink,
    /// Send `len` bytes of [`pattern`] for `seed`, half-close, read to the client's FIN.
    Source { len: u64, seed: u64 },
    /// `sockperf ping-pong --tcp` and `sockperf throughput --tcp`'s server.
    Sockperf,
}

/// One finished connection, as the server saw it.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub service: Service,
    pub peer: SocketAddr,
    /// Bytes read from the client.
    pub received: u64,
    /// SHA-256 of those bytes.
    pub sha256: [u8; 32],
    /// Bytes written to the client.
    pub sent: u64,
    /// The first error, if the connection did not end cleanly.
    pub error: Option<io::ErrorKind>,
}

/// What the server has done so far; shared with the caller.
#[derive(Default)]
pub struct Served {
    outcomes: Mutex<Vec<Outcome>>,
    accepted: AtomicU64,
    finished: AtomicU64,
    accept_errors: AtomicU64,
}

impl Served {
    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Acquire)
    }

    /// Connections whose handler has returned.
    pub fn finished(&self) -> u64 {
        self.finished.load(Ordering::Acquire)
    }

    /// Connections accepted and not finished.
    pub fn live(&self) -> u64 {
        // `finished` first: a connection counted there was counted in `accepted` before.
        let finished = self.finished();
        self.accepted() - finished
    }

    pub fn accept_errors(&self) -> u64 {
        self.accept_errors.load(Ordering::Acquire)
    }

    /// A copy of every outcome so far.
    pub fn outcomes(&self) -> Vec<Outcome> {
        let _uninterrupted = corral::preempt::PreemptGuard::new();
        self.outcomes.lock().expect("outcomes lock").clone()
    }

    fn record(&self, outcome: Outcome) {
        // A uthread preempted while it holds this OS lock would leave the next uthread of its
        // kthread to lock it blocking the kthread itself, so the holder never runs again.
        // (On an OS thread the guard does nothing.)
        let _uninterrupted = corral::preempt::PreemptGuard::new();
        self.outcomes.lock().expect("outcomes lock").push(outcome);
        self.finished.fetch_add(1, Ordering::AcqRel);
    }
}

/// Binds every `(address, service)` and serves them until the process (or runtime) ends.
/// Returns the bound addresses (a port of 0 picks one) and the shared record.
pub fn serve<N: Net>(
    services: &[(SocketAddr, Service)],
) -> io::Result<(Vec<SocketAddr>, Arc<Served>)> {
    let served = Arc::new(Served::default());
    let mut bound = Vec::new();
    for &(addr, service) in services {
        let listener = N::bind(addr)?;
        bound.push(N::local_addr(&listener)?);
        let served = served.clone();
        N::spawn(move || accept_loop::<N>(listener, service, served));
    }
    Ok((bound, served))
}

fn accept_loop<N: Net>(listener: N::Listener, service: Service, served: Arc<Served>) {
    loop {
        match N::accept(&listener) {
            Ok((stream, peer)) => {
                served.accepted.fetch_add(1, Ordering::AcqRel);
                let served = served.clone();
                N::spawn(move || {
                    let outcome = handle::<N>(stream, peer, service);
                    served.record(outcome);
                });
            }
            Err(_) => {
                served.accept_errors.fetch_add(1, Ordering::AcqRel);
            }
        }
    }
}

/// Reads and hashes until the peer's FIN.
struct Reader {
    hasher: Sha256,
    received: u64,
}

impl Reader {
    fn new() -> Reader {
        Reader {
            hasher: Sha256::new(),
            received: 0,
        }
    }

    fn take(&mut self, data: &[u8]) {
        self.hasher.update(data);
        self.received += data.len() as u64;
    }

    fn drain_to_eof(&mut self, stream: &mut impl Read, buf: &mut [u8]) -> io::Result<()> {
        loop {
            match stream.read(buf) {
                Ok(0) => return Ok(()),
                Ok(n) => self.take(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

fn handle<N: Net>(mut stream: N::Stream, peer: SocketAddr, service: Service) -> Outcome {
    let mut reader = Reader::new();
    let mut sent = 0u64;
    let mut buf = vec![0u8; 64 * 1024];
    let result = (|| -> io::Result<()> {
        match service {
            Service::Echo => {
                N::set_nodelay(&stream, true)?;
                loop {
                    let n = match stream.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(e) => return Err(e),
                    };
                    reader.take(&buf[..n]);
                    stream.write_all(&buf[..n])?;
                    sent += n as u64;
                }
                N::shutdown(&stream, Shutdown::Write)
            }
            Service::Sink => {
                reader.drain_to_eof(&mut stream, &mut buf)?;
                let digest = reader.hasher.clone().finalize();
                let line = format!("{}\n", crate::hex(&digest));
                stream.write_all(line.as_bytes())?;
                sent += line.len() as u64;
                N::shutdown(&stream, Shutdown::Write)
            }
            Service::Source { len, seed } => {
                let mut result = Ok(());
                pattern::for_each_chunk(len, seed, |chunk| {
                    if result.is_ok() {
                        result = stream.write_all(chunk);
                        if result.is_ok() {
                            sent += chunk.len() as u64;
                        }
                    }
                });
                result?;
                N::shutdown(&stream, Shutdown::Write)?;
                reader.drain_to_eof(&mut stream, &mut buf)
            }
            Service::Sockperf => {
                N::set_nodelay(&stream, true)?;
                sockperf::serve(&mut stream, &mut |data| reader.take(data), &mut sent)
            }
        }
    })();
    Outcome {
        service,
        peer,
        received: reader.received,
        sha256: reader.hasher.finalize().into(),
        sent,
        error: result.err().map(|e| e.kind()),
    }
}
