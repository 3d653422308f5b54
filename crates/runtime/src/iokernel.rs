//! iokerneld mode: the runtime's side of core allocation.
//!
//! At start the runtime lays out a shared region in a sealed memfd, creates one eventfd per
//! kthread, starts its kthreads parked (each blocked reading its eventfd), and registers with
//! iokerneld over the control socket, passing the region and the eventfds. From then on:
//!
//! * iokerneld reads each running kthread's run-queue counters, which live in the region (see
//!   `sched/runqueue.rs`), and kthread 0's counters of the queue shared by all kthreads, to see
//!   when work has waited a whole interval;
//! * a kthread that finds no work pushes `Park` on its command ring and blocks on its eventfd.
//!   The last one to park first reports the runtime's earliest timer, so that iokerneld wakes
//!   the runtime at that deadline;
//! * iokerneld wakes a kthread by pinning it to a core, pushing `Grant` (with the core) on its
//!   ingress ring and writing its eventfd;
//! * iokerneld takes a core back by pushing `Preempt` and sending the preemption signal. The
//!   signal puts the running uthread back on its run queue and returns to the scheduler, which
//!   sees `Preempt`, pushes `Yielded` (flagged if work was left behind) and parks.
//!
//! Closing the control connection (the runtime exits or dies) tells iokerneld to reclaim
//! everything at once.

use core::cell::{Cell, UnsafeCell};
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use corral_abi::control::{Registration, Reply, Request};
use corral_abi::{
    Command, Consumer, Producer, QueuePositions, RawRegion, Region, RegionBuilder, RingKind, Slot,
    flags,
};

use crate::config::{Config, IokernelSettings};
use crate::sched::kthread::KThread;
use crate::sched::runqueue::RUNQ_CAPACITY;

/// Slots in each kthread's egress command ring: parks and timer reports, at most a few in
/// flight, since iokerneld drains the ring every loop.
const COMMAND_SLOTS: u32 = 64;
/// Slots in each ingress ring: grants and preemption requests for now.
const INGRESS_SLOTS: u32 = 256;
/// How long to wait for iokerneld's answer to a registration.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(10);

/// State of a runtime under iokerneld shared by its kthreads.
pub(crate) struct IokShared {
    region: Region<'static>,
    /// The control connection. Closing it unregisters the runtime.
    connection: Mutex<Option<OwnedFd>>,
    /// Kthreads not parked (holding a core, or about to learn they lost it).
    pub active: AtomicUsize,
    /// Kthreads `0..spinning` never park once granted a core.
    pub spinning: usize,
    runtime_id: AtomicU64,
}

/// One kthread's end of the region, and its eventfd.
pub(crate) struct IokKthread {
    eventfd: OwnedFd,
    /// Owner only, with preemption disabled.
    ingress: UnsafeCell<Consumer<'static>>,
    /// Owner only, with preemption disabled.
    commands: UnsafeCell<Producer<'static>>,
    /// The counters iokerneld reads; the run queue's live here.
    pub positions: &'static QueuePositions,
    /// When iokerneld decided to give this kthread its current core.
    wake_decision: &'static AtomicU64,
    /// A `Preempt` arrived after the latest `Grant`.
    preempt_requested: Cell<bool>,
    /// The core iokerneld last granted (`u32::MAX` before the first grant).
    pub cpu: AtomicU32,
    /// Grants and preemptions seen, for tests and statistics.
    pub grants: AtomicU64,
    pub preemptions: AtomicU64,
}

impl IokShared {
    /// Kthread 0's line, which also carries the shared queue's counters.
    fn shared_queue(&self) -> &'static QueuePositions {
        self.kthread_positions(0)
    }

    fn kthread_positions(&self, index: usize) -> &'static QueuePositions {
        self.region
            .kthread(index as u32)
            .expect("kthread index within the region")
            .positions()
    }

    /// Work was added to the shared queue (from outside the kthreads, or spilled).
    #[inline]
    pub fn shared_added(&self, n: usize) {
        self.shared_queue()
            .shared_tail
            .fetch_add(n as u32, Ordering::Release);
    }

    /// Work was taken from the shared queue.
    #[inline]
    pub fn shared_taken(&self, n: usize) {
        self.shared_queue()
            .shared_head
            .fetch_add(n as u32, Ordering::Release);
    }

    /// The id iokerneld gave this runtime.
    pub fn runtime_id(&self) -> u64 {
        self.runtime_id.load(Ordering::Relaxed)
    }

    /// Closes the control connection: iokerneld reclaims the runtime's cores.
    pub fn disconnect(&self) {
        let connection = self
            .connection
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        drop(connection);
    }
}

/// Lays out the region and creates the eventfds for a runtime of `config.kthreads` kthreads.
pub(crate) fn prepare(config: &Config) -> io::Result<(IokShared, Vec<IokKthread>, OwnedFd)> {
    let crate::config::Mode::Iokernel(settings) = &config.mode else {
        unreachable!("prepare is only called in iokerneld mode");
    };
    let builder = RegionBuilder::new(config.kthreads as u32)
        .ingress_slots(INGRESS_SLOTS)
        .egress_command_slots(COMMAND_SLOTS);
    let layout = builder.layout().map_err(io::Error::other)?;
    let size = layout.region_size() as usize;
    let memfd = memfd(size)?;
    let base = map_shared(&memfd, size)?;
    // SAFETY: `base` is a fresh private-to-us mapping of `size` bytes that nothing else has
    // seen yet; the slice is dropped before the region is shared.
    let bytes = unsafe { core::slice::from_raw_parts_mut(base.as_ptr(), size) };
    builder.init(bytes).map_err(io::Error::other)?;
    seal(&memfd)?;
    // SAFETY: the mapping is never unmapped (kthreads, which are leaked, point into it), and
    // this process touches the control lines and rings only through corral-abi.
    let raw = unsafe { RawRegion::new(base, size) };
    let region = raw.attach().map_err(io::Error::other)?;

    let mut kthreads = Vec::with_capacity(config.kthreads);
    for index in 0..config.kthreads {
        let view = region.kthread(index as u32).expect("laid out above");
        kthreads.push(IokKthread {
            eventfd: eventfd()?,
            ingress: UnsafeCell::new(view.ingress_consumer()),
            commands: UnsafeCell::new(view.egress_command_producer()),
            positions: view.positions(),
            wake_decision: view.wake_decision(),
            preempt_requested: Cell::new(false),
            cpu: AtomicU32::new(u32::MAX),
            grants: AtomicU64::new(0),
            preemptions: AtomicU64::new(0),
        });
    }
    let shared = IokShared {
        region,
        connection: Mutex::new(None),
        active: AtomicUsize::new(0),
        spinning: settings.spinning_kthreads,
        runtime_id: AtomicU64::new(0),
    };
    Ok((shared, kthreads, memfd))
}

/// Registers with iokerneld once every kthread has reported its thread id.
pub(crate) fn register(
    shared: &IokShared,
    kthreads: &[&'static KThread],
    settings: &IokernelSettings,
    memfd: OwnedFd,
) -> io::Result<()> {
    let deadline = Instant::now() + REGISTER_TIMEOUT;
    let tids: Vec<i32> = kthreads
        .iter()
        .map(|k| {
            loop {
                let tid = k.tid.load(Ordering::Acquire) as i32;
                if tid != 0 {
                    break Ok(tid);
                }
                if Instant::now() > deadline {
                    break Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "corral: a kthread did not start",
                    ));
                }
                std::thread::yield_now();
            }
        })
        .collect::<io::Result<_>>()?;
    let request = Request::Register(Registration {
        name: settings.name.clone(),
        guaranteed_cores: settings.guaranteed_cores as u16,
        max_cores: kthreads.len() as u16,
        spinning_kthreads: settings.spinning_kthreads as u16,
        run_queue_capacity: RUNQ_CAPACITY as u32,
        tids,
        net: None,
    });
    let mut fds = vec![memfd.as_raw_fd()];
    fds.extend(kthreads.iter().map(|k| k.iok().eventfd.as_raw_fd()));

    let socket = connect(settings)?;
    send_with_fds(&socket, &request.encode(), &fds).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("corral: sending the registration to iokerneld failed: {e}"),
        )
    })?;
    drop(memfd);
    let mut buf = vec![0u8; 4096];
    // SAFETY: reading into our own buffer from our own socket.
    let n = unsafe { libc::recv(socket.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("corral: no answer from iokerneld to the registration: {e}"),
        ));
    }
    match Reply::decode(&buf[..n as usize]) {
        Ok(Reply::Registered { runtime_id }) => {
            shared.runtime_id.store(runtime_id, Ordering::Relaxed);
            *shared.connection.lock().unwrap_or_else(|e| e.into_inner()) = Some(socket);
            Ok(())
        }
        Ok(Reply::Error { message }) => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("corral: iokerneld refused the registration: {message}"),
        )),
        Ok(other) => Err(io::Error::other(format!(
            "corral: unexpected answer from iokerneld: {other:?}"
        ))),
        Err(e) => Err(io::Error::other(format!(
            "corral: unreadable answer from iokerneld: {e}"
        ))),
    }
}

fn connect(settings: &IokernelSettings) -> io::Result<OwnedFd> {
    // SAFETY: plain socket creation.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor we own.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_un is plain data.
    let mut addr: libc::sockaddr_un = unsafe { core::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let path = settings.socket.as_os_str().as_bytes();
    if path.len() >= addr.sun_path.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "corral: iokerneld socket path {} is longer than {} bytes",
                settings.socket.display(),
                addr.sun_path.len() - 1
            ),
        ));
    }
    for (dst, &src) in addr.sun_path.iter_mut().zip(path) {
        *dst = src as libc::c_char;
    }
    let timeout = libc::timeval {
        tv_sec: REGISTER_TIMEOUT.as_secs() as libc::time_t,
        tv_usec: 0,
    };
    // SAFETY: valid option value of the right size on our socket.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&timeout as *const libc::timeval).cast(),
            core::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    // SAFETY: addr is a valid sockaddr_un of the size passed.
    let rc = unsafe {
        libc::connect(
            fd,
            (&addr as *const libc::sockaddr_un).cast(),
            core::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!(
                "corral: cannot reach iokerneld at {}: {e} (is iokerneld running?)",
                settings.socket.display()
            ),
        ));
    }
    Ok(socket)
}

/// Sends one message with `fds` attached as `SCM_RIGHTS`.
fn send_with_fds(socket: &OwnedFd, bytes: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let fd_bytes = core::mem::size_of_val(fds);
    // SAFETY: CMSG_SPACE is a pure size computation.
    let space = unsafe { libc::CMSG_SPACE(fd_bytes as u32) } as usize;
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // SAFETY: msghdr is plain data.
    let mut msg: libc::msghdr = unsafe { core::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space;
    // SAFETY: msg_control points at `space` zeroed, 8-aligned bytes, enough for one header
    // carrying `fds`; CMSG_FIRSTHDR/CMSG_DATA stay inside it.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(fd_bytes as u32) as usize;
        core::ptr::copy_nonoverlapping(
            fds.as_ptr(),
            libc::CMSG_DATA(cmsg).cast::<RawFd>(),
            fds.len(),
        );
    }
    // SAFETY: msg describes valid buffers for the duration of the call.
    let n = unsafe { libc::sendmsg(socket.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn memfd(size: usize) -> io::Result<OwnedFd> {
    // SAFETY: the name is a valid C string.
    let fd = unsafe {
        libc::memfd_create(
            c"corral-region".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: resizing our own memfd.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), size as libc::off_t) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Seals the size, so that iokerneld can map it without fear of a later truncation.
fn seal(fd: &OwnedFd) -> io::Result<()> {
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
    // SAFETY: adding seals to our own memfd.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn map_shared(fd: &OwnedFd, size: usize) -> io::Result<NonNull<u8>> {
    // SAFETY: mapping `size` bytes of a memfd of that size, shared, at an address the kernel
    // picks.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(NonNull::new(p.cast()).expect("mmap never returns null on success"))
}

fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: plain eventfd creation; blocking, since a parked kthread sleeps in read.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl IokKthread {
    /// Drains the ingress ring. Returns whether iokerneld wants this kthread's core back.
    ///
    /// # Safety
    /// Called only by the owning kthread, with preemption disabled.
    pub unsafe fn poll_ingress(&self) -> bool {
        // SAFETY: owner only (caller's contract), so nobody else touches the consumer.
        let ingress = unsafe { &mut *self.ingress.get() };
        while let Some(slot) = ingress.try_pop() {
            match slot.command_on(RingKind::Ingress) {
                Ok(Command::Grant) => {
                    // A grant supersedes any preemption sent before it: that one concerned
                    // the core this kthread held before it last parked.
                    self.preempt_requested.set(false);
                    self.cpu.store(slot.payload() as u32, Ordering::Relaxed);
                    self.grants.fetch_add(1, Ordering::Relaxed);
                }
                Ok(Command::Preempt) => {
                    self.preempt_requested.set(true);
                    self.preemptions.fetch_add(1, Ordering::Relaxed);
                }
                // Packets arrive once the network stack exists; nothing else is sent here.
                _ => {}
            }
        }
        self.preempt_requested.get()
    }

    /// Pushes a command, waiting for room (iokerneld drains the ring every loop).
    ///
    /// # Safety
    /// Called only by the owning kthread, with preemption disabled.
    pub unsafe fn send(&self, slot: Slot) {
        // SAFETY: owner only (caller's contract).
        let commands = unsafe { &mut *self.commands.get() };
        while commands.try_push(slot).is_err() {
            crate::arch::pause();
        }
    }

    /// Reports that the kthread parks: `Yielded` (flagged when work was left behind) after a
    /// preemption, `Park` otherwise.
    ///
    /// # Safety
    /// As for [`IokKthread::send`].
    pub unsafe fn send_park(&self, preempted: bool, left_work: bool) {
        let slot = if preempted {
            let f = if left_work { flags::HAS_WORK } else { 0 };
            Slot::new(Command::Yielded, f, 0, 0)
        } else {
            Slot::value(Command::Park, 0)
        };
        self.preempt_requested.set(false);
        // SAFETY: forwarded.
        unsafe { self.send(slot) };
    }

    /// Blocks until the eventfd is written (by iokerneld, or by the runtime at shutdown).
    ///
    /// iokerneld makes the eventfd non-blocking (so that no runtime can ever block its
    /// write), and the flag is shared with this copy: sleep in `poll`, then read.
    pub fn wait(&self) {
        let fd = self.eventfd.as_raw_fd();
        let mut value = 0u64;
        loop {
            // SAFETY: reading 8 bytes into a u64 from our own eventfd.
            let n = unsafe { libc::read(fd, (&mut value as *mut u64).cast(), 8) };
            if n == 8 {
                return;
            }
            let mut pfd = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd. EINTR (a stale preemption signal) just loops.
            unsafe { libc::poll(&mut pfd, 1, -1) };
        }
    }

    /// Wakes the kthread without iokerneld (shutdown only).
    pub fn kick(&self) {
        let one = 1u64;
        // SAFETY: writing 8 bytes to our own eventfd.
        unsafe { libc::write(self.eventfd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }
}

/// When iokerneld decided to give the calling uthread's kthread its current core, in
/// `CLOCK_MONOTONIC` nanoseconds (comparable with [`crate::now_ns`]): for measuring how long a
/// wake-up or a preemption took to reach a uthread. `None` outside a runtime in iokerneld mode
/// or before iokerneld recorded a decision.
pub fn core_granted_at_ns() -> Option<u64> {
    let _guard = crate::preempt::PreemptGuard::new();
    let k = crate::sched::kthread::current_kthread()?;
    let ns = k.iok.as_ref()?.wake_decision.load(Ordering::Acquire);
    (ns != 0).then_some(ns)
}

/// The shared counters behind a kthread's run queue.
pub(crate) fn runq_counters(k: &IokKthread) -> (&'static AtomicU32, &'static AtomicU32) {
    (&k.positions.runq_head, &k.positions.runq_tail)
}

/// Reports the runtime's earliest timer (`u64::MAX`: none) before its last kthread parks.
///
/// # Safety
/// As for [`IokKthread::send`].
pub(crate) unsafe fn send_timer_deadline(k: &IokKthread, deadline: u64) {
    // SAFETY: forwarded.
    unsafe { k.send(Slot::value(Command::TimerDeadline, deadline)) };
}

// `IokShared` is reached from every kthread; its fields are atomics, a mutex and a validated
// region view (which hands out only atomics).
// SAFETY: see above.
unsafe impl Sync for IokShared {}
// SAFETY: see above.
unsafe impl Send for IokShared {}
// SAFETY: the UnsafeCells and Cell are touched only by the owning kthread with preemption
// disabled; the rest is atomics and an fd.
unsafe impl Sync for IokKthread {}
// SAFETY: as above.
unsafe impl Send for IokKthread {}
