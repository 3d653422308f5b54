//! An open-loop UDP load generator on Linux sockets: the baseline client.
//!
//! One sender thread plays the schedule: it waits for each request's due time by spinning (so
//! it is not at the mercy of timer slack), sends it, and never waits for a response. One
//! receiver thread polls the sockets, decodes responses and matches them by id. The two share
//! nothing while the run is on but the sockets and one atomic: each owns its half of the
//! recorder, and the halves are combined at the end.
//!
//! Requests of client `c` leave from socket `c % flows`, each socket bound to its own port, so
//! a server (or a NIC's RSS) sees `flows` distinct 5-tuples.

use corral_affinity::{allowed_cpus, pin_current_thread};
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::recorder::Outcome;
use crate::recorder::{
    AdherencePolicy, ResponseRecorder, RunInfo, SendRecorder, Summary, summarize,
};
use crate::schedule::ScheduleConfig;
use crate::split::{Timeline, Unsplit};
use crate::wire::{self, Message, ServerStamps};

/// How a run is set up.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClientConfig {
    pub server: SocketAddr,
    pub schedule: ScheduleConfig,
    /// Bytes of each request's UDP payload (at least [`wire::HEADER_LEN`]).
    pub payload: usize,
    /// Sockets (source ports) to spread clients over.
    pub flows: usize,
    /// CPU to pin the sender to.
    pub cpu: Option<usize>,
    /// CPU to pin the receiver to.
    pub rx_cpu: Option<usize>,
    /// How long after the last send responses still count.
    pub grace_ns: u64,
    pub policy: AdherencePolicy,
}

impl ClientConfig {
    pub fn new(server: SocketAddr, schedule: ScheduleConfig) -> Self {
        ClientConfig {
            server,
            schedule,
            payload: 64,
            flows: 1,
            cpu: None,
            rx_cpu: None,
            grace_ns: 100_000_000,
            policy: AdherencePolicy::default(),
        }
    }

    /// Checks every value; the error says which and why.
    pub fn validate(&self) -> io::Result<()> {
        self.schedule.validate().map_err(invalid)?;
        if !(wire::HEADER_LEN..=wire::MAX_LEN).contains(&self.payload) {
            return Err(invalid(format!(
                "invalid payload = {}: expected {} to {} bytes",
                self.payload,
                wire::HEADER_LEN,
                wire::MAX_LEN
            )));
        }
        if self.flows == 0 || self.flows > 4096 {
            return Err(invalid(format!(
                "invalid flows = {}: expected 1 to 4096 sockets",
                self.flows
            )));
        }
        for (key, cpu) in [("cpu", self.cpu), ("rx-cpu", self.rx_cpu)] {
            if let Some(c) = cpu
                && !allowed_cpus()?.contains(&c)
            {
                return Err(invalid(format!(
                    "invalid {key} = {c}: expected a CPU this process may run on ({:?})",
                    allowed_cpus()?
                )));
            }
        }
        Ok(())
    }
}

fn invalid(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, e)
}

/// What the sender stores when it could not play the schedule: the receiver stops at once.
pub(crate) const SENDER_FAILED: u64 = u64::MAX;

/// `CLOCK_MONOTONIC` in nanoseconds: the clock every process on the machine shares, which the
/// servers stamp responses with.
#[inline]
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec to a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Time since the run's epoch (a `CLOCK_MONOTONIC` time), which both threads share.
#[derive(Clone, Copy)]
pub(crate) struct Clock {
    pub(crate) epoch_ns: u64,
}

impl Clock {
    #[inline]
    pub(crate) fn now_ns(&self) -> u64 {
        monotonic_ns().saturating_sub(self.epoch_ns)
    }

    /// A time on this clock as a `CLOCK_MONOTONIC` time.
    #[inline]
    fn absolute(&self, at_ns: u64) -> u64 {
        self.epoch_ns.saturating_add(at_ns)
    }
}

/// Runs the schedule against `cfg.server` and returns the summary.
pub fn run(cfg: &ClientConfig) -> io::Result<Summary> {
    cfg.validate()?;
    let sockets = open_sockets(cfg)?;
    // Start a little in the future so that both threads are pinned and waiting when the first
    // request is due, instead of starting the run late.
    let clock = Clock {
        epoch_ns: monotonic_ns() + Duration::from_millis(20).as_nanos() as u64,
    };
    // 0 while sending; then 1 + the time of the last send, or SENDER_FAILED.
    let sender_done = Arc::new(AtomicU64::new(0));

    let rx = {
        let fds: Vec<RawFd> = sockets.iter().map(|s| s.as_raw_fd()).collect();
        let done = Arc::clone(&sender_done);
        let cfg = cfg.clone();
        thread::Builder::new()
            .name("loadgen-rx".into())
            .spawn(move || receive(&cfg, &fds, clock, &done))?
    };
    let tx = {
        let done = Arc::clone(&sender_done);
        let cfg = cfg.clone();
        let sockets = sockets
            .iter()
            .map(|s| s.try_clone())
            .collect::<io::Result<Vec<_>>>()?;
        thread::Builder::new()
            .name("loadgen-tx".into())
            .spawn(move || send(&cfg, &sockets, clock, &done))?
    };
    let sent = tx
        .join()
        .map_err(|_| io::Error::other("sender thread panicked"));
    // The sender reports how it ended in every case but a panic; make sure the receiver stops.
    if sender_done.load(Ordering::Acquire) == 0 {
        sender_done.store(SENDER_FAILED, Ordering::Release);
    }
    let received = rx
        .join()
        .map_err(|_| io::Error::other("receiver thread panicked"))?;
    let (send_rec, scheduled) = sent??;
    let resp_rec = received?;
    drop(sockets);
    Ok(summarize(
        &RunInfo::of(&cfg.schedule, scheduled),
        &send_rec,
        &resp_rec,
        &cfg.policy,
    ))
}

fn open_sockets(cfg: &ClientConfig) -> io::Result<Vec<UdpSocket>> {
    open_udp_sockets(cfg.server, cfg.flows)
}

/// `flows` sockets on ports of their own, each connected to `server`, with large buffers.
pub(crate) fn open_udp_sockets(server: SocketAddr, flows: usize) -> io::Result<Vec<UdpSocket>> {
    let local: SocketAddr = if server.is_ipv4() {
        "0.0.0.0:0".parse().expect("literal address")
    } else {
        "[::]:0".parse().expect("literal address")
    };
    (0..flows)
        .map(|_| {
            let s = UdpSocket::bind(local)?;
            s.connect(server)?;
            // Room for bursts of responses while the receiver is descheduled; best effort.
            set_buffer(&s, libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, 8 << 20);
            set_buffer(&s, libc::SO_SNDBUFFORCE, libc::SO_SNDBUF, 8 << 20);
            Ok(s)
        })
        .collect()
}

fn set_buffer(s: &UdpSocket, force: libc::c_int, plain: libc::c_int, bytes: libc::c_int) {
    for opt in [force, plain] {
        // SAFETY: a valid socket fd and a pointer to a c_int of the size passed.
        let rc = unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&bytes as *const libc::c_int).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        // The FORCE variant needs CAP_NET_ADMIN; without it the plain one is capped by
        // net.core.*mem_max, which is still better than the default.
        if rc == 0 {
            return;
        }
    }
}

/// The sender: returns its recorder and how many requests the schedule produced.
fn send(
    cfg: &ClientConfig,
    sockets: &[UdpSocket],
    clock: Clock,
    done: &AtomicU64,
) -> io::Result<(SendRecorder, u64)> {
    let result = (|| {
        if let Some(cpu) = cfg.cpu {
            pin_current_thread(cpu)?;
        }
        let mut rec = SendRecorder::new();
        let mut buf = vec![0u8; cfg.payload];
        let mut scheduled = 0u64;
        // Only a receiver that may run on this CPU needs the sender to step aside.
        let apart = matches!((cfg.cpu, cfg.rx_cpu), (Some(a), Some(b)) if a != b);
        for req in cfg.schedule.iter() {
            scheduled += 1;
            let now = wait_until(&clock, req.send_ns, !apart);
            Message {
                sent_ns: clock.absolute(now),
                ..Message::from(&req)
            }
            .encode(&mut buf)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
            let sock = &sockets[req.client as usize % sockets.len()];
            match sock.send(&buf) {
                Ok(_) => rec.record_sent(req.send_ns, now),
                // A full socket buffer or an ICMP error from an earlier datagram: the request
                // is not on the wire, but the schedule goes on regardless (open loop).
                Err(_) => rec.record_send_error(req.send_ns, now),
            }
        }
        Ok((rec, scheduled))
    })();
    done.store(sender_mark(&result), Ordering::Release);
    result
}

/// What a sender that ended with `result` stores for its receiver (see [`RunEnd`]).
pub(crate) fn sender_mark(result: &io::Result<(SendRecorder, u64)>) -> u64 {
    match result {
        Ok((rec, _)) => rec
            .last_actual_ns()
            .saturating_add(1)
            .min(SENDER_FAILED - 1),
        Err(_) => SENDER_FAILED,
    }
}

/// Waits until `due_ns` and returns the time it saw then. Spins, so that sends go out within
/// a few hundred ns of their time. With `share`, while more than 20 µs remain it yields between
/// checks, so that a receiver on the same CPU still runs (a yield to an idle receiver costs
/// well under 20 µs). Without it, it never yields: a yield would also hand the CPU to unrelated
/// work for a whole time slice.
#[inline]
pub(crate) fn wait_until(clock: &Clock, due_ns: u64, share: bool) -> u64 {
    const YIELD_ABOVE_NS: u64 = 20_000;
    loop {
        let now = clock.now_ns();
        if now >= due_ns {
            return now;
        }
        if share && due_ns - now > YIELD_ABOVE_NS {
            thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

/// The receiver: matches responses until the grace period after the last send has passed.
fn receive(
    cfg: &ClientConfig,
    fds: &[RawFd],
    clock: Clock,
    done: &AtomicU64,
) -> io::Result<ResponseRecorder> {
    if let Some(cpu) = cfg.rx_cpu {
        pin_current_thread(cpu)?;
    }
    let mut rec = ResponseRecorder::for_schedule(&cfg.schedule);
    let mut buf = vec![0u8; wire::MAX_LEN + 1];
    let end = RunEnd {
        done,
        duration_ns: cfg.schedule.duration_ns,
        grace_ns: cfg.grace_ns,
    };
    poll_until_end(fds, clock, &end, &mut rec, |_, fd, rec| {
        drain(fd, &mut buf, &clock, rec)
    })?;
    Ok(rec)
}

/// How a receiver knows the run is over: the sender's mark in `done` (0 while sending, then
/// the time of its last send plus 1, or [`SENDER_FAILED`]), and the grace after the later of
/// that send and the schedule's end.
pub(crate) struct RunEnd<'a> {
    pub(crate) done: &'a AtomicU64,
    pub(crate) duration_ns: u64,
    pub(crate) grace_ns: u64,
}

/// Polls `fds` until the run's end (setting `rec`'s deadline once it is known), calling
/// `ready(index, fd, rec)` for each readable one.
pub(crate) fn poll_until_end(
    fds: &[RawFd],
    clock: Clock,
    end: &RunEnd<'_>,
    rec: &mut ResponseRecorder,
    mut ready: impl FnMut(usize, RawFd, &mut ResponseRecorder) -> io::Result<()>,
) -> io::Result<()> {
    let mut pollfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let mut deadline = u64::MAX;
    loop {
        if deadline == u64::MAX {
            let d = end.done.load(Ordering::Acquire);
            if d == SENDER_FAILED {
                break;
            }
            if d != 0 {
                let last_send = d - 1;
                deadline = last_send.max(end.duration_ns).saturating_add(end.grace_ns);
                rec.set_deadline(deadline);
            }
        }
        let now = clock.now_ns();
        if now > deadline {
            break;
        }
        // Wake at least every 10 ms to notice the end of the run.
        let timeout_ms = ((deadline - now) / 1_000_000).clamp(1, 10) as libc::c_int;
        // SAFETY: pollfds is a valid array of this length.
        let n = unsafe {
            libc::poll(
                pollfds.as_mut_ptr(),
                pollfds.len() as libc::nfds_t,
                timeout_ms,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        for (i, p) in pollfds.iter_mut().enumerate() {
            if p.revents != 0 {
                p.revents = 0;
                ready(i, p.fd, rec)?;
            }
        }
    }
    Ok(())
}

/// Splits a matched response's latency from its stamps and the client's own times.
fn record_split(
    rec: &mut ResponseRecorder,
    clock: &Clock,
    m: &Message,
    payload: &[u8],
    seen_ns: u64,
    latency_ns: u64,
) {
    let split = ServerStamps::read(payload)
        .map_err(|_| Unsplit::Unstamped)
        .and_then(|stamps| {
            Timeline::of_response(
                clock.epoch_ns,
                m.scheduled_send_ns,
                m.sent_ns,
                stamps,
                clock.absolute(seen_ns),
            )
            .split()
            .map_err(|e| Unsplit::OutOfOrder(e.stage))
        });
    match split {
        Ok(split) => rec.record_split(latency_ns, split),
        Err(why) => rec.record_unsplit(why),
    }
}

/// Reads every datagram waiting on `fd` without blocking.
fn drain(fd: RawFd, buf: &mut [u8], clock: &Clock, rec: &mut ResponseRecorder) -> io::Result<()> {
    loop {
        // SAFETY: buf is valid for writes of its length. MSG_DONTWAIT keeps the socket itself
        // blocking for the sender, which shares its file description.
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN) => Ok(()),
                // An ICMP error for an earlier send (the server was not listening yet, or has
                // gone): that request is lost and counted as such; keep reading.
                Some(libc::ECONNREFUSED) | Some(libc::EINTR) => continue,
                _ => Err(e),
            };
        }
        let now = clock.now_ns();
        let payload = &buf[..n as usize];
        match Message::decode(payload) {
            Ok(m) => {
                if let Outcome::Matched { latency_ns } =
                    rec.record_response(m.id, m.scheduled_send_ns, now)
                {
                    record_split(rec, clock, &m, payload, now, latency_ns);
                }
            }
            Err(_) => rec.record_malformed(),
        }
    }
}
