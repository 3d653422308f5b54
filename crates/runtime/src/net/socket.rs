//! UDP sockets: [`UdpSocket`], mirroring `std::net::UdpSocket`, and [`UdpSpawner`], which runs
//! one uthread per datagram.
//!
//! The receive path copies each datagram's payload out of the packet buffer, so the buffer goes
//! back to iokerneld at once however long the application takes to read it. A receiver blocks
//! its uthread on the socket's wait queue (an OS thread outside the runtime parks instead).

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::collections::VecDeque;
use std::io;
use std::net::SocketAddrV4;
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::net::stack::{NetStack, SocketStats};
use crate::sync::spin::SpinLock;
use crate::sync::waitq::{WaitNode, WaitQueue, WaitRef, block_with, block_with_deadline};
use crate::timer;

/// Datagrams a socket holds before it drops new ones (counted per socket).
pub const RECV_QUEUE_CAPACITY: usize = 1024;

/// Handlers a [`UdpSpawner`] runs at once (started and not yet finished); a datagram beyond
/// them is dropped and counted, as a full receive queue drops one. Without the bound, a server
/// offered more than it can answer starts a uthread with a stack for every datagram, until
/// stacks can no longer be mapped, and answers less the more it is offered; with it, the
/// excess costs a parse and a drop, and what is admitted waits at most this many handlers.
pub const SPAWNER_IN_FLIGHT_CAPACITY: usize = RECV_QUEUE_CAPACITY;

/// One received datagram.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Datagram {
    pub payload: Vec<u8>,
    pub src: SocketAddrV4,
    /// When the stack took the datagram in (`now_ns`, `CLOCK_MONOTONIC`).
    pub received_ns: u64,
}

struct RecvQueue {
    items: VecDeque<Datagram>,
    closed: bool,
}

type SpawnFn = Box<dyn Fn(Datagram) -> bool + Send + Sync>;

enum Sink {
    /// Datagrams wait in a bounded queue for `recv`.
    Queue {
        queue: SpinLock<RecvQueue>,
        waiters: WaitQueue,
    },
    /// Each datagram is handed to a function, which returns false if it could not take it;
    /// `in_flight` counts the handlers it started that have not finished.
    Spawn {
        spawn: SpawnFn,
        in_flight: Arc<AtomicUsize>,
    },
}

/// A bound port, as the stack's socket table holds it.
pub(crate) struct Socket {
    local: SocketAddrV4,
    peer: SpinLock<Option<SocketAddrV4>>,
    sink: Sink,
    rx: AtomicU64,
    rx_dropped: AtomicU64,
    tx: AtomicU64,
}

impl Socket {
    pub fn queued(local: SocketAddrV4) -> Socket {
        Socket::with_sink(
            local,
            Sink::Queue {
                queue: SpinLock::new(RecvQueue {
                    items: VecDeque::new(),
                    closed: false,
                }),
                waiters: WaitQueue::new(),
            },
        )
    }

    pub fn spawning(local: SocketAddrV4, spawn: SpawnFn, in_flight: Arc<AtomicUsize>) -> Socket {
        Socket::with_sink(local, Sink::Spawn { spawn, in_flight })
    }

    fn with_sink(local: SocketAddrV4, sink: Sink) -> Socket {
        Socket {
            local,
            peer: SpinLock::new(None),
            sink,
            rx: AtomicU64::new(0),
            rx_dropped: AtomicU64::new(0),
            tx: AtomicU64::new(0),
        }
    }

    pub fn local(&self) -> SocketAddrV4 {
        self.local
    }

    pub fn peer(&self) -> Option<SocketAddrV4> {
        *self.peer.lock()
    }

    pub fn set_peer(&self, peer: Option<SocketAddrV4>) {
        *self.peer.lock() = peer;
    }

    /// Hands a datagram to the socket; false (and counted) if it had no room.
    pub fn deliver(&self, d: Datagram) -> bool {
        match &self.sink {
            Sink::Queue { queue, waiters } => {
                {
                    let mut q = queue.lock();
                    if q.closed || q.items.len() >= RECV_QUEUE_CAPACITY {
                        drop(q);
                        self.rx_dropped.fetch_add(1, Relaxed);
                        return false;
                    }
                    q.items.push_back(d);
                }
                self.rx.fetch_add(1, Relaxed);
                // A receiver registers itself while holding the queue lock, which we took after
                // it, so its registration is visible here.
                if waiters.maybe_waiters() {
                    waiters.wake_one();
                }
                true
            }
            Sink::Spawn { spawn, .. } => {
                if spawn(d) {
                    self.rx.fetch_add(1, Relaxed);
                    true
                } else {
                    self.rx_dropped.fetch_add(1, Relaxed);
                    false
                }
            }
        }
    }

    /// Takes the oldest datagram, blocking until one arrives, the socket closes (`EBADF`) or
    /// `deadline` (monotonic ns) passes (`EAGAIN`, as a std socket with a read timeout).
    pub fn recv(&self, deadline: Option<u64>) -> io::Result<Datagram> {
        let Sink::Queue { queue, waiters } = &self.sink else {
            return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP));
        };
        loop {
            {
                let mut q = queue.lock();
                if let Some(d) = q.items.pop_front() {
                    return Ok(d);
                }
                if q.closed {
                    return Err(io::Error::from_raw_os_error(libc::EBADF));
                }
            }
            // Register under the queue lock, so that a datagram delivered after our check finds
            // us in the wait queue.
            let register = |w: WaitRef| {
                let q = queue.lock();
                if !q.items.is_empty() || q.closed {
                    return false;
                }
                waiters.with(|l| l.push(w));
                true
            };
            match deadline {
                None => {
                    let node = WaitNode::for_current();
                    block_with(&node, || register(WaitRef::Stack(&node)));
                }
                Some(deadline) => {
                    if timer::now_ns() >= deadline {
                        return Err(io::Error::from_raw_os_error(libc::EAGAIN));
                    }
                    let node = Arc::new(WaitNode::for_current());
                    let timed_out = block_with_deadline(&node, deadline, || {
                        register(WaitRef::Shared(node.clone()))
                    });
                    if timed_out {
                        waiters.remove(Arc::as_ptr(&node));
                    }
                }
            }
        }
    }

    /// Wakes every receiver with `EBADF`; later datagrams are dropped.
    pub fn close(&self) {
        if let Sink::Queue { queue, waiters } = &self.sink {
            queue.lock().closed = true;
            waiters.wake_all();
        }
    }

    pub fn stats(&self) -> SocketStats {
        let queued = match &self.sink {
            Sink::Queue { queue, .. } => queue.lock().items.len() as u64,
            Sink::Spawn { in_flight, .. } => in_flight.load(Relaxed) as u64,
        };
        SocketStats {
            local: self.local,
            peer: self.peer(),
            rx_datagrams: self.rx.load(Relaxed),
            rx_dropped: self.rx_dropped.load(Relaxed),
            tx_datagrams: self.tx.load(Relaxed),
            queued,
        }
    }
}

fn not_connected() -> io::Error {
    io::Error::from_raw_os_error(libc::ENOTCONN)
}

/// A UDP socket of the calling uthread's runtime, like `std::net::UdpSocket`. Blocking calls
/// block the uthread, not its kthread. Datagrams larger than one frame
/// ([`crate::net::MAX_UDP_PAYLOAD`] bytes) are refused with `EMSGSIZE`: nothing fragments.
pub struct UdpSocket {
    stack: Arc<NetStack>,
    socket: Arc<Socket>,
    /// Read timeout in ns, 0 for none.
    read_timeout: AtomicU64,
}

impl UdpSocket {
    /// Binds `addr` (`0.0.0.0` or the runtime's address; port 0 picks a free ephemeral port)
    /// on the calling uthread's runtime. `EADDRINUSE` if the port is taken, `EADDRNOTAVAIL`
    /// for another address, `ENETDOWN` outside a runtime with a network configured.
    pub fn bind(addr: SocketAddrV4) -> io::Result<UdpSocket> {
        let stack = super::current_stack()?;
        Self::bind_on(stack, addr)
    }

    pub(crate) fn bind_on(stack: Arc<NetStack>, addr: SocketAddrV4) -> io::Result<UdpSocket> {
        let socket = stack.bind(addr, |local| Arc::new(Socket::queued(local)))?;
        Ok(UdpSocket {
            stack,
            socket,
            read_timeout: AtomicU64::new(0),
        })
    }

    /// Sets the only address `send` sends to and `recv` receives from.
    pub fn connect(&self, addr: SocketAddrV4) -> io::Result<()> {
        if addr.port() == 0 || addr.ip().is_unspecified() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        self.socket.set_peer(Some(addr));
        Ok(())
    }

    /// Sends `buf` as one datagram to `addr`; returns `buf.len()`.
    pub fn send_to(&self, buf: &[u8], addr: SocketAddrV4) -> io::Result<usize> {
        self.stack
            .send_udp(self.socket.local().port(), addr, buf, true, timer::now_ns())?;
        self.socket.tx.fetch_add(1, Relaxed);
        Ok(buf.len())
    }

    /// Sends to the connected peer (`EDESTADDRREQ` if not connected).
    pub fn send(&self, buf: &[u8]) -> io::Result<usize> {
        let peer = self
            .socket
            .peer()
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EDESTADDRREQ))?;
        self.send_to(buf, peer)
    }

    /// Receives one datagram into `buf` (the excess of a longer one is discarded, as with std)
    /// and returns its length as copied and its source.
    pub fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddrV4)> {
        let d = self.socket.recv(self.deadline())?;
        let n = d.payload.len().min(buf.len());
        buf[..n].copy_from_slice(&d.payload[..n]);
        Ok((n, d.src))
    }

    /// Receives from the connected peer (`ENOTCONN` if not connected).
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        if self.socket.peer().is_none() {
            return Err(not_connected());
        }
        self.recv_from(buf).map(|(n, _)| n)
    }

    /// Receives one datagram as an owned buffer, however long it is.
    pub fn recv_vec(&self) -> io::Result<(Vec<u8>, SocketAddrV4)> {
        let d = self.socket.recv(self.deadline())?;
        Ok((d.payload, d.src))
    }

    fn deadline(&self) -> Option<u64> {
        match self.read_timeout.load(Relaxed) {
            0 => None,
            ns => Some(timer::now_ns().saturating_add(ns)),
        }
    }

    /// `None` blocks forever; a zero duration is `EINVAL`, as with std.
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        let ns = match timeout {
            None => 0,
            Some(d) if d.is_zero() => return Err(io::Error::from_raw_os_error(libc::EINVAL)),
            Some(d) => timer::duration_ns(d).max(1),
        };
        self.read_timeout.store(ns, Relaxed);
        Ok(())
    }

    pub fn read_timeout(&self) -> io::Result<Option<Duration>> {
        Ok(match self.read_timeout.load(Relaxed) {
            0 => None,
            ns => Some(Duration::from_nanos(ns)),
        })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddrV4> {
        Ok(self.socket.local())
    }

    pub fn peer_addr(&self) -> io::Result<SocketAddrV4> {
        self.socket.peer().ok_or_else(not_connected)
    }
}

impl Drop for UdpSocket {
    fn drop(&mut self) {
        self.stack.unbind(&self.socket);
        self.socket.close();
    }
}

impl core::fmt::Debug for UdpSocket {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("UdpSocket")
            .field("local", &self.socket.local())
            .field("peer", &self.socket.peer())
            .finish()
    }
}

/// Runs a handler in a new uthread for every datagram that reaches a port, straight from the
/// receive path (no dispatcher thread in between), at most [`SPAWNER_IN_FLIGHT_CAPACITY`] at
/// once. Dropping it closes the port; handlers already started run to completion.
pub struct UdpSpawner {
    stack: Arc<NetStack>,
    socket: Arc<Socket>,
}

impl UdpSpawner {
    /// Binds `addr` (as [`UdpSocket::bind`]) and calls `handler(payload, source, reply)` in a
    /// fresh uthread for each datagram.
    pub fn bind<F>(addr: SocketAddrV4, handler: F) -> io::Result<UdpSpawner>
    where
        F: Fn(Vec<u8>, SocketAddrV4, UdpReply) + Send + Sync + 'static,
    {
        let stack = super::current_stack()?;
        let weak = Arc::downgrade(&stack);
        let handler = Arc::new(handler);
        let in_flight = Arc::new(AtomicUsize::new(0));
        let socket = stack.bind(addr, move |local| {
            let counted = in_flight.clone();
            let spawn = move |d: Datagram| spawn_handler(&weak, local, &handler, &counted, d);
            Arc::new(Socket::spawning(local, Box::new(spawn), in_flight))
        })?;
        Ok(UdpSpawner { stack, socket })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddrV4> {
        Ok(self.socket.local())
    }
}

/// One handler of a [`UdpSpawner`] started and not yet finished, until dropped (when the
/// handler returns or unwinds, or if it could not be started).
struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    /// Counts one more handler, unless [`SPAWNER_IN_FLIGHT_CAPACITY`] already run.
    fn admit(counter: &Arc<AtomicUsize>) -> Option<InFlight> {
        if counter.fetch_add(1, Relaxed) >= SPAWNER_IN_FLIGHT_CAPACITY {
            counter.fetch_sub(1, Relaxed);
            return None;
        }
        Some(InFlight(counter.clone()))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

fn spawn_handler<F>(
    weak: &Weak<NetStack>,
    local: SocketAddrV4,
    handler: &Arc<F>,
    in_flight: &Arc<AtomicUsize>,
    d: Datagram,
) -> bool
where
    F: Fn(Vec<u8>, SocketAddrV4, UdpReply) + Send + Sync + 'static,
{
    // The socket table holds this closure and the stack holds the table: a weak reference
    // keeps that from being a cycle.
    let Some(stack) = weak.upgrade() else {
        return false;
    };
    let Some(admitted) = InFlight::admit(in_flight) else {
        return false;
    };
    let handler = handler.clone();
    let reply = UdpReply {
        stack,
        local,
        peer: d.src,
        received_ns: d.received_ns,
    };
    crate::sched::uthread::Builder::new()
        .spawn_detached(move || {
            let _admitted = admitted;
            handler(d.payload, d.src, reply)
        })
        .is_ok()
}

impl Drop for UdpSpawner {
    fn drop(&mut self) {
        self.stack.unbind(&self.socket);
    }
}

/// Answers the datagram a [`UdpSpawner`] handler was started for.
pub struct UdpReply {
    stack: Arc<NetStack>,
    local: SocketAddrV4,
    peer: SocketAddrV4,
    received_ns: u64,
}

impl UdpReply {
    /// Sends `buf` back to the datagram's source, from the spawner's port.
    pub fn send(&self, buf: &[u8]) -> io::Result<usize> {
        self.stack
            .send_udp(self.local.port(), self.peer, buf, true, timer::now_ns())?;
        Ok(buf.len())
    }

    pub fn peer_addr(&self) -> SocketAddrV4 {
        self.peer
    }

    pub fn local_addr(&self) -> SocketAddrV4 {
        self.local
    }

    /// When the runtime's receive path took the datagram in, in [`crate::now_ns`] terms
    /// (`CLOCK_MONOTONIC`): the time before the handler started is the datagram's wait for it.
    pub fn received_ns(&self) -> u64 {
        self.received_ns
    }
}
