//! The control plane: the control socket, polled from the busy loop. It accepts connections,
//! reads requests and notices hang-ups, and hands each to the daemon as an [`Incoming`]; it
//! sends replies and keeps, per connection, the process on the other end and the runtime it
//! registered.

use std::collections::VecDeque;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use corral_abi::control::{ControlError, Reply, Request};
use log::{info, warn};
use rustix::event::epoll;

use super::log_limit::LogLimit;
use crate::control::{self, Received, RecvBuffers, send_reply};
use crate::sys::now_ns;
use corral_policy::RuntimeId;

/// Messages read from one connection per poll, so that a chatty client cannot stall the loop.
const MESSAGES_PER_POLL: usize = 8;

/// Token of the listening socket in the epoll set; connection tokens have a generation in
/// their high half and so never equal it.
const LISTENER_TOKEN: u64 = u64::MAX;

/// Most control connections open at once; more are closed as soon as they are accepted.
const MAX_CONNECTIONS: usize = 4096;

/// Lines about refused requests and connections, which any local process can provoke: this many
/// at once, then this many a second; the rest are counted and summed up in one line at most
/// every `REFUSAL_SUMMARY_NS`.
const REFUSAL_LOG_BURST: u32 = 20;
const REFUSAL_LOG_PER_SECOND: u32 = 5;
const REFUSAL_SUMMARY_NS: u64 = 5_000_000_000;

/// Sends a reply that may be long (statistics, a run's results). A whole message must fit in
/// the socket's send buffer, which with many runtimes or windows the text outgrows.
fn send_text_reply(fd: BorrowedFd<'_>, reply: &Reply) -> std::io::Result<()> {
    let text = match reply {
        Reply::Stats { json } | Reply::Gen { json } => json.len(),
        Reply::Error { message } => message.len(),
        Reply::Registered { .. } => 0,
    };
    let room = 2 * text + 4096;
    if room > 200 << 10 {
        let _ = rustix::net::sockopt::set_socket_send_buffer_size_force(fd, room)
            .or_else(|_| rustix::net::sockopt::set_socket_send_buffer_size(fd, room));
    }
    send_reply(fd, reply)
}

/// One control connection, as long as it stays open: its slot in the table and the generation
/// that slot had when it was accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ConnRef {
    index: usize,
    generation: u32,
}

/// A control connection.
struct Conn {
    fd: OwnedFd,
    generation: u32,
    pid: i32,
    runtime: Option<RuntimeId>,
}

/// What came in on the control socket, for the daemon to handle.
pub(super) enum Incoming {
    Request {
        conn: ConnRef,
        request: Result<Request, ControlError>,
        fds: Vec<OwnedFd>,
    },
    /// A message that could not be received (bad descriptors, say), and why.
    Unreadable { conn: ConnRef, message: String },
    /// The peer closed its connection.
    HangUp(ConnRef),
}

/// What a closed connection leaves for the daemon to clean up.
pub(super) struct Closed {
    /// It asked for the NIC backend's job in progress.
    pub(super) owned_job: bool,
    /// The runtime it registered.
    pub(super) runtime: Option<RuntimeId>,
}

/// Refusals, for the statistics.
#[derive(Clone, Debug, Default)]
pub(super) struct ControlCounters {
    pub(super) refused_registrations: u64,
    pub(super) last_refusal: Option<String>,
}

/// The control socket and its connections. See the module documentation.
pub(super) struct ControlPlane {
    conns: Vec<Option<Conn>>,
    free_conns: Vec<usize>,
    conn_generation: u32,
    listener: OwnedFd,
    epoll: OwnedFd,
    events: Vec<epoll::Event>,
    recv: RecvBuffers,
    /// Read this poll, not yet handled.
    inbox: VecDeque<Incoming>,
    /// The connection that asked for the NIC backend's job in progress.
    job_owner: Option<ConnRef>,
    counters: ControlCounters,
    /// Rate limit on the log lines about refusals.
    refusal_log: LogLimit,
}

impl ControlPlane {
    /// Serves `listener`.
    pub(super) fn new(listener: OwnedFd) -> std::io::Result<Self> {
        let epoll_fd = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        epoll::add(
            &epoll_fd,
            &listener,
            epoll::EventData::new_u64(LISTENER_TOKEN),
            epoll::EventFlags::IN,
        )?;
        Ok(ControlPlane {
            conns: Vec::new(),
            free_conns: Vec::new(),
            conn_generation: 0,
            listener,
            epoll: epoll_fd,
            events: Vec::with_capacity(64),
            recv: RecvBuffers::default(),
            inbox: VecDeque::with_capacity(64),
            job_owner: None,
            counters: ControlCounters::default(),
            refusal_log: LogLimit::new(
                REFUSAL_LOG_BURST,
                REFUSAL_LOG_PER_SECOND,
                REFUSAL_SUMMARY_NS,
            ),
        })
    }

    /// Reads whatever happened on the control socket since the last poll, without waiting:
    /// new connections are accepted, requests and hang-ups queued for [`ControlPlane::next`].
    pub(super) fn poll(&mut self) {
        if let Some(suppressed) = self.refusal_log.take_summary(now_ns()) {
            info!(
                "{suppressed} refused-request messages suppressed (at most \
                 {REFUSAL_LOG_BURST} at once, then {REFUSAL_LOG_PER_SECOND} a second, are logged)"
            );
        }
        self.events.clear();
        let zero = rustix::time::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        if let Err(e) = epoll::wait(
            &self.epoll,
            rustix::buffer::spare_capacity(&mut self.events),
            Some(&zero),
        ) {
            if e != rustix::io::Errno::INTR {
                warn!("epoll_wait on the control socket failed: {e}");
            }
            return;
        }
        for i in 0..self.events.len() {
            let event = self.events[i];
            let token = event.data.u64();
            let flags = event.flags;
            if token == LISTENER_TOKEN {
                self.accept_all();
                continue;
            }
            let conn = ConnRef {
                index: (token & u64::from(u32::MAX)) as usize,
                generation: (token >> 32) as u32,
            };
            if flags.contains(epoll::EventFlags::IN) {
                self.read_conn(conn);
            }
            let hung_up =
                epoll::EventFlags::HUP | epoll::EventFlags::RDHUP | epoll::EventFlags::ERR;
            if flags.intersects(hung_up) {
                self.inbox.push_back(Incoming::HangUp(conn));
            }
        }
    }

    /// The next request or hang-up read by [`ControlPlane::poll`], in order.
    pub(super) fn next(&mut self) -> Option<Incoming> {
        self.inbox.pop_front()
    }

    fn conn(&self, conn: ConnRef) -> Option<&Conn> {
        self.conns
            .get(conn.index)?
            .as_ref()
            .filter(|c| c.generation == conn.generation)
    }

    fn conn_mut(&mut self, conn: ConnRef) -> Option<&mut Conn> {
        self.conns
            .get_mut(conn.index)?
            .as_mut()
            .filter(|c| c.generation == conn.generation)
    }

    /// Whether the connection is still open.
    pub(super) fn is_open(&self, conn: ConnRef) -> bool {
        self.conn(conn).is_some()
    }

    /// The process on the other end of an open connection.
    pub(super) fn pid(&self, conn: ConnRef) -> Option<i32> {
        self.conn(conn).map(|c| c.pid)
    }

    /// The runtime registered on the connection.
    pub(super) fn runtime(&self, conn: ConnRef) -> Option<RuntimeId> {
        self.conn(conn)?.runtime
    }

    /// Records that the connection registered runtime `id`.
    pub(super) fn set_runtime(&mut self, conn: ConnRef, id: RuntimeId) {
        if let Some(c) = self.conn_mut(conn) {
            c.runtime = Some(id);
        }
    }

    /// Sends a short reply.
    pub(super) fn reply(&self, conn: ConnRef, reply: &Reply) -> std::io::Result<()> {
        match self.conn(conn) {
            Some(c) => send_reply(c.fd.as_fd(), reply),
            None => Err(std::io::Error::from(std::io::ErrorKind::NotConnected)),
        }
    }

    /// Sends a reply that may be long (see [`send_text_reply`]).
    pub(super) fn reply_text(&self, conn: ConnRef, reply: &Reply) -> std::io::Result<()> {
        match self.conn(conn) {
            Some(c) => send_text_reply(c.fd.as_fd(), reply),
            None => Err(std::io::Error::from(std::io::ErrorKind::NotConnected)),
        }
    }

    /// The connection asked for the NIC backend's job now in progress.
    pub(super) fn own_job(&mut self, conn: ConnRef) {
        self.job_owner = Some(conn);
    }

    /// The connection that asked for the job in progress.
    pub(super) fn job_owner(&self) -> Option<ConnRef> {
        self.job_owner
    }

    /// The job in progress is over; returns who asked for it.
    pub(super) fn end_job(&mut self) -> Option<ConnRef> {
        self.job_owner.take()
    }

    pub(super) fn counters(&self) -> &ControlCounters {
        &self.counters
    }

    /// Whether a line about a refused request or connection may be logged now (see
    /// [`REFUSAL_LOG_BURST`]); if not, it is counted as suppressed.
    pub(super) fn may_log_refusal(&mut self) -> bool {
        self.refusal_log.admit(now_ns())
    }

    /// Lines about refusals left out of the log so far.
    pub(super) fn refusal_messages_suppressed(&self) -> u64 {
        self.refusal_log.suppressed()
    }

    fn accept_all(&mut self) {
        loop {
            let fd = match control::accept(self.listener.as_fd()) {
                Ok(Some(fd)) => fd,
                Ok(None) => return,
                Err(e) => {
                    warn!("accept on the control socket failed: {e}");
                    return;
                }
            };
            let open = self.conns.len() - self.free_conns.len();
            if open >= MAX_CONNECTIONS {
                if self.may_log_refusal() {
                    warn!("refusing a control connection: {MAX_CONNECTIONS} already open");
                }
                continue;
            }
            let pid = match control::peer_pid(fd.as_fd()) {
                Ok(pid) => pid,
                Err(e) => {
                    if self.may_log_refusal() {
                        warn!("refusing a control connection: SO_PEERCRED failed: {e}");
                    }
                    continue;
                }
            };
            self.conn_generation = self.conn_generation.wrapping_add(1);
            let generation = self.conn_generation;
            let index = match self.free_conns.pop() {
                Some(index) => index,
                None => {
                    self.conns.push(None);
                    self.conns.len() - 1
                }
            };
            let token = index as u64 | u64::from(generation) << 32;
            if let Err(e) = epoll::add(
                &self.epoll,
                &fd,
                epoll::EventData::new_u64(token),
                epoll::EventFlags::IN | epoll::EventFlags::RDHUP,
            ) {
                warn!("refusing a control connection: epoll_ctl failed: {e}");
                self.free_conns.push(index);
                continue;
            }
            self.conns[index] = Some(Conn {
                fd,
                generation,
                pid,
                runtime: None,
            });
        }
    }

    fn read_conn(&mut self, conn: ConnRef) {
        for _ in 0..MESSAGES_PER_POLL {
            let Some(c) = self
                .conns
                .get(conn.index)
                .and_then(Option::as_ref)
                .filter(|c| c.generation == conn.generation)
            else {
                return;
            };
            match control::recv_message(c.fd.as_fd(), &mut self.recv) {
                Ok(Received::Nothing) => return,
                Ok(Received::Closed) => {
                    self.inbox.push_back(Incoming::HangUp(conn));
                    return;
                }
                Ok(Received::Message { len, fds }) => {
                    let request = Request::decode(&self.recv.data()[..len], fds.len());
                    self.inbox
                        .push_back(Incoming::Request { conn, request, fds });
                }
                Err(e) => {
                    let message = e.to_string();
                    self.inbox.push_back(Incoming::Unreadable { conn, message });
                }
            }
        }
    }

    /// Answers a request that did not make sense. Returns whether the connection is to be
    /// closed: a registered runtime keeps its connection, anyone else loses it.
    pub(super) fn refuse(&mut self, conn: ConnRef, message: String) -> bool {
        let Some(c) = self.conn(conn) else {
            return false;
        };
        let registered = c.runtime.is_some();
        let pid = c.pid;
        let _ = send_reply(
            c.fd.as_fd(),
            &Reply::Error {
                message: message.clone(),
            },
        );
        if !registered {
            if self.may_log_refusal() {
                info!("refused a request from pid {pid}: {message}");
            }
            self.counters.refused_registrations += 1;
            self.counters.last_refusal = Some(message);
        }
        !registered
    }

    /// Closes a connection; returns what the daemon has to clean up after it.
    pub(super) fn close(&mut self, conn: ConnRef) -> Option<Closed> {
        self.conn(conn)?;
        let c = self.conns[conn.index].take()?;
        let _ = epoll::delete(&self.epoll, &c.fd);
        self.free_conns.push(conn.index);
        let owned_job = self.job_owner == Some(conn);
        if owned_job {
            self.job_owner = None;
        }
        Some(Closed {
            owned_job,
            runtime: c.runtime,
        })
    }
}
