//! [`TcpListener`] and [`TcpStream`], mirroring `std::net`. Blocking calls block the uthread,
//! not its kthread; they wait on the connection's wait queues and are woken only by the event
//! they wait for (data or FIN for readers; space, the handshake's end for writers and
//! connectors; an error or close for both).

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, SocketAddr, SocketAddrV4, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use corral_tcp::{Connection, Endpoints, Events, State, TcpError};

use super::conn::{ConnCell, Held};
use super::listen::ListenerCell;
use super::ports;
use crate::net::stack::NetStack;
use crate::sync::waitq::{WaitNode, WaitQueue, WaitRef, block_with, block_with_deadline};
use crate::timer;

fn os(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}

/// The `io::Error` std's sockets give for an engine error.
fn map_err(e: TcpError) -> io::Error {
    match e {
        TcpError::WouldBlock => io::Error::from(io::ErrorKind::WouldBlock),
        TcpError::NotConnected => os(libc::ENOTCONN),
        TcpError::Refused => os(libc::ECONNREFUSED),
        TcpError::Reset => os(libc::ECONNRESET),
        TcpError::TimedOut => os(libc::ETIMEDOUT),
        TcpError::BrokenPipe => os(libc::EPIPE),
    }
}

/// The first IPv4 address `addr` names.
fn first_v4(addr: impl ToSocketAddrs) -> io::Result<SocketAddrV4> {
    addr.to_socket_addrs()?
        .find_map(|a| match a {
            SocketAddr::V4(v4) => Some(v4),
            SocketAddr::V6(_) => None,
        })
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "no IPv4 address: the runtime speaks IPv4 only",
            )
        })
}

/// Blocks the calling uthread on `queue` until woken or `deadline`; `ready` is checked with
/// the connection owned, after registering, so no wake-up is lost. Returns false on time-out.
fn wait(
    stack: &NetStack,
    cell: &Arc<ConnCell>,
    queue: &WaitQueue,
    deadline: Option<u64>,
    ready: impl Fn(&Connection) -> bool,
) -> bool {
    let register = |w: WaitRef| {
        let mut w = Some(w);
        loop {
            // Deliver what this uthread looped back before it may be queued: delivering it
            // afterwards could wake the uthread itself.
            stack.tcp.flush_loopback(stack);
            let mut held = Held::enter(stack, cell);
            if ready(held.conn()) {
                return false;
            }
            let enqueue = || {
                let w = w.take().expect("enqueued once");
                queue.with(|l| l.push(w));
            };
            match held.leave_enqueued(enqueue) {
                Ok(()) => return true,
                // Segments arrived meanwhile, or an ACK is owed: process them and send it
                // (releasing), and check again.
                Err(held) => held.release(),
            }
        }
    };
    match deadline {
        None => {
            let node = WaitNode::for_current();
            block_with(&node, || register(WaitRef::Stack(&node)));
            true
        }
        Some(deadline) => {
            if timer::now_ns() >= deadline {
                return false;
            }
            let node = Arc::new(WaitNode::for_current());
            let timed_out =
                block_with_deadline(&node, deadline, || register(WaitRef::Shared(node.clone())));
            if timed_out {
                queue.remove(Arc::as_ptr(&node));
            }
            !timed_out
        }
    }
}

fn deadline_after(ns: u64) -> Option<u64> {
    (ns != 0).then(|| timer::now_ns().saturating_add(ns))
}

fn timeout_ns(timeout: Option<Duration>) -> io::Result<u64> {
    match timeout {
        None => Ok(0),
        Some(d) if d.is_zero() => Err(os(libc::EINVAL)),
        Some(d) => Ok(timer::duration_ns(d).max(1)),
    }
}

fn timeout_of(ns: u64) -> Option<Duration> {
    (ns != 0).then(|| Duration::from_nanos(ns))
}

// ---------------------------------------------------------------------------------------------
// TcpListener

/// A TCP socket listening for connections, like `std::net::TcpListener`.
pub struct TcpListener {
    stack: Arc<NetStack>,
    cell: Arc<ListenerCell>,
}

impl TcpListener {
    /// Listens on `addr` (`0.0.0.0` or the runtime's address; port 0 picks a free port) with
    /// the runtime's accept backlog (`TcpSettings::accept_backlog`).
    pub fn bind(addr: impl ToSocketAddrs) -> io::Result<TcpListener> {
        let stack = crate::net::current_stack()?;
        let backlog = stack.tcp.settings().accept_backlog;
        Self::bind_on(stack, first_v4(addr)?, backlog)
    }

    /// Like [`TcpListener::bind`] with an accept backlog of its own (`listen(2)`'s).
    pub fn bind_with_backlog(addr: impl ToSocketAddrs, backlog: usize) -> io::Result<TcpListener> {
        let stack = crate::net::current_stack()?;
        if !(1..=1 << 20).contains(&backlog) {
            return Err(os(libc::EINVAL));
        }
        Self::bind_on(stack, first_v4(addr)?, backlog)
    }

    pub(crate) fn bind_on(
        stack: Arc<NetStack>,
        addr: SocketAddrV4,
        backlog: usize,
    ) -> io::Result<TcpListener> {
        let ip = *addr.ip();
        if !ip.is_unspecified() && ip != stack.ip() {
            return Err(os(libc::EADDRNOTAVAIL));
        }
        let cell = stack.tcp.listen(ip, stack.ip(), addr.port(), backlog)?;
        Ok(TcpListener { stack, cell })
    }

    /// Waits for a connection; returns it with its peer's address.
    pub fn accept(&self) -> io::Result<(TcpStream, SocketAddrV4)> {
        loop {
            {
                let mut s = self.cell.state.lock();
                if let Some(c) = s.queue.pop_front() {
                    s.engine.pop_accept();
                    drop(s);
                    let peer = c.ends().remote;
                    return Ok((TcpStream::from_cell(self.stack.clone(), c), peer));
                }
                if s.closed {
                    return Err(os(libc::EBADF));
                }
            }
            let node = WaitNode::for_current();
            block_with(&node, || {
                let s = self.cell.state.lock();
                if !s.queue.is_empty() || s.closed {
                    return false;
                }
                self.cell.acceptors.with(|l| l.push(WaitRef::Stack(&node)));
                true
            });
        }
    }

    /// An endless iterator over accepted connections.
    pub fn incoming(&self) -> Incoming<'_> {
        Incoming { listener: self }
    }

    pub fn local_addr(&self) -> io::Result<SocketAddrV4> {
        Ok(self.cell.local())
    }
}

impl Drop for TcpListener {
    fn drop(&mut self) {
        self.stack.tcp.unlisten(&self.stack, &self.cell);
    }
}

impl core::fmt::Debug for TcpListener {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TcpListener")
            .field("local", &self.cell.local())
            .finish()
    }
}

/// [`TcpListener::incoming`]'s iterator.
pub struct Incoming<'a> {
    listener: &'a TcpListener,
}

impl Iterator for Incoming<'_> {
    type Item = io::Result<TcpStream>;

    fn next(&mut self) -> Option<io::Result<TcpStream>> {
        Some(self.listener.accept().map(|(s, _)| s))
    }
}

// ---------------------------------------------------------------------------------------------
// TcpStream

struct StreamInner {
    stack: Arc<NetStack>,
    cell: Arc<ConnCell>,
    /// In ns, 0 for none.
    read_timeout: AtomicU64,
    write_timeout: AtomicU64,
    read_shut: AtomicBool,
}

impl Drop for StreamInner {
    fn drop(&mut self) {
        let mut held = Held::enter(&self.stack, &self.cell);
        let now = timer::now_ns();
        held.conn().close(now);
        held.after(Events::NONE, now);
    }
}

/// A TCP connection, like `std::net::TcpStream`. Dropping the last handle to it (see
/// [`TcpStream::try_clone`]) closes it: a FIN after the data queued, or a RST when received
/// data was left unread.
pub struct TcpStream {
    inner: Arc<StreamInner>,
}

impl TcpStream {
    fn from_cell(stack: Arc<NetStack>, cell: Arc<ConnCell>) -> TcpStream {
        TcpStream {
            inner: Arc::new(StreamInner {
                stack,
                cell,
                read_timeout: AtomicU64::new(0),
                write_timeout: AtomicU64::new(0),
                read_shut: AtomicBool::new(false),
            }),
        }
    }

    /// Connects to the first IPv4 address of `addr`, waiting as long as the engine retries its
    /// SYN (`TcpConfig::syn_retransmits`).
    pub fn connect(addr: impl ToSocketAddrs) -> io::Result<TcpStream> {
        let remote = first_v4(addr)?;
        let stack = crate::net::current_stack()?;
        Self::connect_on(stack, None, remote, None)
    }

    /// Connects to `addr`, failing with `TimedOut` after `timeout`.
    pub fn connect_timeout(addr: &SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
        let SocketAddr::V4(remote) = *addr else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "no IPv4 address: the runtime speaks IPv4 only",
            ));
        };
        let ns = timeout_ns(Some(timeout))?;
        let stack = crate::net::current_stack()?;
        Self::connect_on(stack, None, remote, Some(ns))
    }

    /// Connects from a given local port (bind-before-connect); `EADDRINUSE` when that 4-tuple
    /// is in use (TIME-WAIT included).
    pub fn connect_from(local_port: u16, addr: impl ToSocketAddrs) -> io::Result<TcpStream> {
        let remote = first_v4(addr)?;
        let stack = crate::net::current_stack()?;
        Self::connect_on(stack, Some(local_port), remote, None)
    }

    fn connect_on(
        stack: Arc<NetStack>,
        local_port: Option<u16>,
        remote: SocketAddrV4,
        timeout: Option<u64>,
    ) -> io::Result<TcpStream> {
        let rip = *remote.ip();
        if remote.port() == 0 || rip.is_unspecified() || rip.is_broadcast() || rip.is_multicast() {
            return Err(os(libc::EINVAL));
        }
        // 127.0.0.0/8 is the runtime itself, as for UDP.
        let remote = if rip.is_loopback() {
            SocketAddrV4::new(stack.ip(), remote.port())
        } else {
            remote
        };
        if stack.next_hop(*remote.ip()).is_none() {
            return Err(os(libc::ENETUNREACH));
        }
        let deadline = timeout.map(|ns| timer::now_ns().saturating_add(ns));
        let tcp = &stack.tcp;
        let config = tcp.settings().tcp.clone();
        let local_ip = stack.ip();
        let mut made: Option<io::Result<Arc<ConnCell>>> = None;
        let mut try_port = |port: u16| {
            let now = timer::now_ns();
            let ends = Endpoints {
                local: SocketAddrV4::new(local_ip, port),
                remote,
            };
            let iss = corral_tcp::listener::initial_sequence(tcp.secret(), now, ends);
            let cell = Arc::new(ConnCell::new(
                Connection::connect(&config, ends, iss, now),
                None,
                false,
            ));
            let mut held = Held::enter(&stack, &cell);
            match tcp.insert_active(&mut held) {
                Ok(()) => {
                    held.after(Events::NONE, now);
                    drop(held);
                    made = Some(Ok(cell));
                    true
                }
                Err(e) => {
                    let busy = e.raw_os_error() == Some(libc::EADDRINUSE);
                    if !busy {
                        made = Some(Err(e));
                    }
                    // A full table ends the search; a taken 4-tuple tries the next port.
                    !busy
                }
            }
        };
        match local_port {
            Some(p) => {
                if !try_port(p) {
                    return Err(os(libc::EADDRINUSE));
                }
            }
            None => {
                let found = ports::choose(
                    tcp.next_port(),
                    tcp.rss(),
                    local_ip,
                    remote,
                    stack.steered(),
                    |e| tcp.contains(e),
                    try_port,
                );
                if !found {
                    return Err(os(libc::EADDRNOTAVAIL));
                }
            }
        }
        let cell = made.expect("a port was taken or failed")?;
        let stream = TcpStream::from_cell(stack.clone(), cell.clone());
        // Wait for the handshake's outcome.
        loop {
            let state = {
                let mut held = Held::enter(&stack, &cell);
                let c = held.conn();
                (c.state(), c.error())
            };
            match state {
                (_, Some(e)) => {
                    tcp.count_active_open(false);
                    return Err(map_err(e));
                }
                (State::SynSent, None) => {}
                (State::Closed, None) => {
                    tcp.count_active_open(false);
                    return Err(os(libc::ECONNREFUSED));
                }
                _ => {
                    tcp.count_active_open(true);
                    return Ok(stream);
                }
            }
            let in_time = wait(&stack, &cell, &cell.writers, deadline, |c| {
                c.state() != State::SynSent || c.error().is_some()
            });
            if !in_time {
                let mut held = Held::enter(&stack, &cell);
                let now = timer::now_ns();
                held.conn().abort(now);
                held.after(Events::NONE, now);
                drop(held);
                tcp.count_active_open(false);
                return Err(os(libc::ETIMEDOUT));
            }
        }
    }

    fn stack(&self) -> &NetStack {
        &self.inner.stack
    }

    fn cell(&self) -> &Arc<ConnCell> {
        &self.inner.cell
    }

    /// Runs `f` with the connection owned, then sends what it queued.
    fn with<R>(&self, f: impl FnOnce(&mut Connection, u64) -> R) -> R {
        let mut held = Held::enter(self.stack(), self.cell());
        let now = timer::now_ns();
        let r = f(held.conn(), now);
        held.after(Events::NONE, now);
        r
    }

    fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        let deadline = deadline_after(self.inner.read_timeout.load(Relaxed));
        loop {
            if self.inner.read_shut.load(Relaxed) {
                return Ok(0);
            }
            match self.with(|c, now| c.recv(now, buf)) {
                Ok(n) => return Ok(n),
                Err(TcpError::WouldBlock) => {}
                Err(e) => return Err(map_err(e)),
            }
            let shut = &self.inner.read_shut;
            let readable =
                |c: &Connection| c.readable() || c.state() == State::Closed || shut.load(Relaxed);
            if !wait(
                self.stack(),
                self.cell(),
                &self.cell().readers,
                deadline,
                readable,
            ) {
                return Err(io::Error::from(io::ErrorKind::WouldBlock));
            }
        }
    }

    fn send(&self, bufs: &[&[u8]]) -> io::Result<usize> {
        if bufs.iter().all(|b| b.is_empty()) {
            return Ok(0);
        }
        let deadline = deadline_after(self.inner.write_timeout.load(Relaxed));
        loop {
            match self.with(|c, now| c.send_vectored(now, bufs)) {
                Ok(n) => return Ok(n),
                Err(TcpError::WouldBlock) => {}
                Err(e) => return Err(map_err(e)),
            }
            let writable = |c: &Connection| c.writable() || c.state() == State::Closed;
            if !wait(
                self.stack(),
                self.cell(),
                &self.cell().writers,
                deadline,
                writable,
            ) {
                return Err(io::Error::from(io::ErrorKind::WouldBlock));
            }
        }
    }

    /// Shuts down reading (later reads return 0), writing (a FIN after the queued data), or both.
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        if matches!(how, Shutdown::Read | Shutdown::Both) {
            // Under ownership: a reader checks the flag and enqueues itself under ownership too,
            // so it either sees the flag or is in the queue for the wake-up below.
            let held = Held::enter(self.stack(), self.cell());
            self.inner.read_shut.store(true, Relaxed);
            held.release();
            if self.cell().readers.maybe_waiters() {
                self.cell().readers.wake_all();
            }
        }
        if matches!(how, Shutdown::Write | Shutdown::Both) {
            self.with(|c, now| c.shutdown_write(now)).map_err(map_err)?;
        }
        Ok(())
    }

    pub fn set_nodelay(&self, nodelay: bool) -> io::Result<()> {
        self.with(|c, _| c.set_nodelay(nodelay));
        Ok(())
    }

    pub fn nodelay(&self) -> io::Result<bool> {
        Ok(self.with(|c, _| c.nodelay()))
    }

    /// `None` blocks forever; a zero duration is `EINVAL`, as with std. A read that times out
    /// fails with `WouldBlock`, as std's does on Linux.
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.inner.read_timeout.store(timeout_ns(timeout)?, Relaxed);
        Ok(())
    }

    pub fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.inner
            .write_timeout
            .store(timeout_ns(timeout)?, Relaxed);
        Ok(())
    }

    pub fn read_timeout(&self) -> io::Result<Option<Duration>> {
        Ok(timeout_of(self.inner.read_timeout.load(Relaxed)))
    }

    pub fn write_timeout(&self) -> io::Result<Option<Duration>> {
        Ok(timeout_of(self.inner.write_timeout.load(Relaxed)))
    }

    pub fn peer_addr(&self) -> io::Result<SocketAddrV4> {
        Ok(self.cell().ends().remote)
    }

    pub fn local_addr(&self) -> io::Result<SocketAddrV4> {
        Ok(self.cell().ends().local)
    }

    /// Another handle to the same connection (it closes when the last handle drops).
    pub fn try_clone(&self) -> io::Result<TcpStream> {
        Ok(TcpStream {
            inner: self.inner.clone(),
        })
    }

    /// The connection's state (for diagnostics and tests).
    pub fn state(&self) -> State {
        self.with(|c, _| c.state())
    }
}

impl Read for &TcpStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.recv(buf)
    }
}

impl Read for TcpStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.recv(buf)
    }
}

impl Write for &TcpStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.send(&[buf])
    }

    /// One engine call over every slice: they are copied into the send buffer in order and go
    /// out as full segments, not one segment per slice.
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        const MAX_SLICES: usize = 64;
        let mut slices: [&[u8]; MAX_SLICES] = [&[]; MAX_SLICES];
        let n = bufs.len().min(MAX_SLICES);
        for (s, b) in slices.iter_mut().zip(bufs) {
            *s = b;
        }
        self.send(&slices[..n])
    }

    /// Segments leave as soon as the engine may send them; nothing is held back here.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Write for TcpStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        (&*self).write(buf)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        (&*self).write_vectored(bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl core::fmt::Debug for TcpStream {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let ends = self.cell().ends();
        f.debug_struct("TcpStream")
            .field("local", &ends.local)
            .field("peer", &ends.remote)
            .finish()
    }
}
