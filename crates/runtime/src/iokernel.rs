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
//! With a network configured, the region also carries the runtime's packet buffers; see
//! [`PacketPool`] for how they are shared out and how packets are stolen between kthreads.
//!
//! Closing the control connection (the runtime exits or dies) tells iokerneld to reclaim
//! everything at once.

use core::cell::UnsafeCell;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use corral_abi::control::{NetIdentity, Registration, Reply, Request};
use corral_abi::{
    Command, Consumer, PacketArea, Producer, QueuePositions, RawRegion, Region, RegionBuilder,
    RingKind, Slot, flags,
};

use crate::config::{Config, IokernelSettings};
use crate::net::stack::{FRAME_CAPACITY, MAX_FRAME, StackDrop};
use crate::sched::Shared;
use crate::sched::kthread::Kthread;
use crate::sched::runqueue::RUNQ_CAPACITY;
use crate::sync::spin::{RawSpinLock, SpinLock};
use crate::sync::waitq::{WaitNode, WaitQueue, WaitRef, block_with};

/// Receive buffers each kthread keeps posted to iokerneld.
pub(crate) const RX_BUFFERS: u32 = 256;
/// Transmit buffers each kthread owns, and the most frames one kthread has in flight.
pub(crate) const TX_BUFFERS: u32 = 128;
/// Bytes of packet area per kthread: its receive buffers, then its transmit buffers (768 KiB).
const KTHREAD_PACKET_BYTES: u64 = (RX_BUFFERS + TX_BUFFERS) as u64 * FRAME_CAPACITY as u64;
/// Slots in each kthread's egress command ring: room for every receive buffer to be posted at
/// once, plus parks and timer reports.
const COMMAND_SLOTS: u32 = 512;
/// Slots in each ingress ring: every posted receive buffer and every transmit completion can
/// be outstanding together with grants and preemption requests, so iokerneld never finds the
/// ring full because of us.
const INGRESS_SLOTS: u32 = 512;
/// Slots in each egress packet ring: at least the frames one kthread may have in flight.
const EGRESS_PACKET_SLOTS: u32 = 256;
const _: () = assert!(RX_BUFFERS + TX_BUFFERS + 64 <= INGRESS_SLOTS);
const _: () = assert!(RX_BUFFERS + 64 <= COMMAND_SLOTS && TX_BUFFERS <= EGRESS_PACKET_SLOTS);
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
    /// The packet buffers, when the runtime has a network configured.
    pub packets: Option<PacketPool>,
}

/// The runtime's packet buffers: per kthread, [`RX_BUFFERS`] receive buffers then
/// [`TX_BUFFERS`] transmit buffers of [`FRAME_CAPACITY`] bytes each. A buffer's offset tells
/// which kthread owns it.
///
/// Receive buffers: each kthread posts its own on its own command ring (`RxBufferPost`), and
/// iokerneld fills them only for frames it puts on that kthread's ingress ring. Any kthread may
/// process any ingress ring (packet stealing, under the ring's consumer lock), so the kthread
/// done with a buffer is not always its owner; it puts the buffer on the owner's repost list,
/// and the owner posts it again at its next pass through the scheduler (a thief also flushes
/// the list itself when it can take the owner's command lock, so a parked owner does not sit on
/// its buffers). So every buffer is posted on its owner's ring only, and at most
/// [`RX_BUFFERS`] are ever outstanding per ring.
///
/// Transmit buffers: a sender takes one from its own kthread's free list (or another's when its
/// own is empty), builds the frame in place and pushes `TxPacket` on its own kthread's egress
/// ring, with preemption disabled throughout. The completion comes back on that kthread's
/// ingress ring; whoever processes it returns the buffer to the free list of the kthread that
/// owns the offset and wakes a sender waiting for a buffer. Each ring has at most
/// [`TX_BUFFERS`] frames in flight, which bounds the completions it can receive.
pub(crate) struct PacketPool {
    area: PacketArea,
    /// Start of the packet area in our mapping.
    base: NonNull<u8>,
    kthreads: usize,
    /// Free transmit buffers across all kthreads.
    tx_free: AtomicUsize,
    /// Uthreads waiting for a transmit buffer.
    tx_waiters: WaitQueue,
}

/// Which buffer an offset names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BufferRef {
    Rx { owner: usize },
    Tx { owner: usize },
}

impl PacketPool {
    fn locate(&self, offset: u64) -> Option<BufferRef> {
        if !offset.is_multiple_of(FRAME_CAPACITY as u64) {
            return None;
        }
        let owner = (offset / KTHREAD_PACKET_BYTES) as usize;
        if owner >= self.kthreads {
            return None;
        }
        let index = (offset % KTHREAD_PACKET_BYTES) / FRAME_CAPACITY as u64;
        Some(if index < u64::from(RX_BUFFERS) {
            BufferRef::Rx { owner }
        } else {
            BufferRef::Tx { owner }
        })
    }

    fn buffer_offset(kthread: usize, index: u32) -> u64 {
        kthread as u64 * KTHREAD_PACKET_BYTES + u64::from(index) * FRAME_CAPACITY as u64
    }

    /// The bytes of the buffer at `offset`.
    ///
    /// # Safety
    /// `offset` names one of our buffers (checked with `locate`) that this caller owns right
    /// now: a transmit buffer taken off a free list, or a receive buffer iokerneld handed back
    /// with `RxPacket`. Nobody else, iokerneld included, touches an owned buffer.
    #[allow(clippy::mut_from_ref)]
    unsafe fn buffer(&self, offset: u64) -> &mut [u8] {
        debug_assert!(self.area.check(offset, FRAME_CAPACITY as u32).is_ok());
        // SAFETY: the buffer lies inside the packet area (the layout was sized for every
        // kthread's buffers), which is mapped for the process's lifetime; ownership is
        // exclusive per the contract.
        unsafe {
            core::slice::from_raw_parts_mut(self.base.as_ptr().add(offset as usize), FRAME_CAPACITY)
        }
    }
}

/// One kthread's end of the region, and its eventfd.
pub(crate) struct IokKthread {
    eventfd: OwnedFd,
    /// Serializes consumers of the ingress ring: the owner, and thieves (try_lock only).
    ingress_lock: RawSpinLock,
    /// Under `ingress_lock`.
    ingress: UnsafeCell<Consumer<'static>>,
    /// Serializes producers of the command ring: the owner, and thieves flushing its receive
    /// buffers (try_lock only), so the ring keeps one producer at a time.
    commands_lock: RawSpinLock,
    /// Under `commands_lock`.
    commands: UnsafeCell<Producer<'static>>,
    /// Owner only, with preemption disabled.
    egress: UnsafeCell<Producer<'static>>,
    /// Receive buffers of this kthread waiting to be posted again.
    rx_repost: SpinLock<Vec<u64>>,
    /// Free transmit buffers of this kthread.
    tx_free: SpinLock<Vec<u64>>,
    /// Frames pushed on this kthread's egress ring and not yet completed.
    tx_inflight: AtomicU32,
    /// The counters iokerneld reads; the run queue's live here.
    pub positions: &'static QueuePositions,
    /// When iokerneld decided to give this kthread its current core.
    wake_decision: &'static AtomicU64,
    /// When iokerneld last wrote this kthread's eventfd.
    wake_sent: &'static AtomicU64,
    /// Where the preemption signal handler stamps its arrival, for iokerneld's statistics.
    pub preempt_seen: &'static AtomicU64,
    /// A `Preempt` arrived after the latest `Grant`. Atomic: a kthread that steals from this
    /// kthread's ingress ring applies the commands it pops here.
    preempt_requested: AtomicBool,
    /// The core iokerneld last granted (`u32::MAX` before the first grant).
    pub cpu: AtomicU32,
    /// Grants and preemptions seen, for tests and statistics.
    pub grants: AtomicU64,
    pub preemptions: AtomicU64,
    /// Wake-ups that came with no grant, after which the kthread went back to waiting.
    pub spurious_wakes: AtomicU64,
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
    let packet_bytes = if config.net.is_some() {
        config.kthreads as u64 * KTHREAD_PACKET_BYTES
    } else {
        0
    };
    let builder = RegionBuilder::new(config.kthreads as u32)
        .ingress_slots(INGRESS_SLOTS)
        .egress_command_slots(COMMAND_SLOTS)
        .egress_packet_slots(EGRESS_PACKET_SLOTS)
        .packet_area_size(packet_bytes);
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

    let with_net = packet_bytes != 0;
    let mut kthreads = Vec::with_capacity(config.kthreads);
    for index in 0..config.kthreads {
        let view = region.kthread(index as u32).expect("laid out above");
        let mut commands = view.egress_command_producer();
        let mut tx_free = Vec::new();
        if with_net {
            // Post every receive buffer before registering, so that iokerneld has somewhere
            // to put the first frames even before this kthread first runs. The ring is fresh
            // and large enough for all of them.
            for i in 0..RX_BUFFERS {
                let offset = PacketPool::buffer_offset(index, i);
                commands
                    .try_push(Slot::packet(
                        Command::RxBufferPost,
                        offset,
                        FRAME_CAPACITY as u32,
                    ))
                    .expect("the command ring holds every receive buffer");
            }
            tx_free = (RX_BUFFERS..RX_BUFFERS + TX_BUFFERS)
                .map(|i| PacketPool::buffer_offset(index, i))
                .collect();
        }
        kthreads.push(IokKthread {
            eventfd: eventfd()?,
            ingress_lock: RawSpinLock::new(),
            ingress: UnsafeCell::new(view.ingress_consumer()),
            commands_lock: RawSpinLock::new(),
            commands: UnsafeCell::new(commands),
            egress: UnsafeCell::new(view.egress_packet_producer()),
            rx_repost: SpinLock::new(Vec::with_capacity(RX_BUFFERS as usize)),
            tx_free: SpinLock::new(tx_free),
            tx_inflight: AtomicU32::new(0),
            positions: view.positions(),
            wake_decision: view.wake_decision(),
            wake_sent: view.wake_sent(),
            preempt_seen: view.preempt_seen(),
            preempt_requested: AtomicBool::new(false),
            cpu: AtomicU32::new(u32::MAX),
            grants: AtomicU64::new(0),
            spurious_wakes: AtomicU64::new(0),
            preemptions: AtomicU64::new(0),
        });
    }
    let packets = with_net.then(|| {
        let area = region.packet_area();
        PacketPool {
            area,
            // SAFETY: the packet area lies inside the mapping (validated by attach).
            base: unsafe { base.add(area.offset as usize) },
            kthreads: config.kthreads,
            tx_free: AtomicUsize::new(config.kthreads * TX_BUFFERS as usize),
            tx_waiters: WaitQueue::new(),
        }
    });
    let shared = IokShared {
        region,
        connection: Mutex::new(None),
        active: AtomicUsize::new(0),
        spinning: settings.spinning_kthreads,
        runtime_id: AtomicU64::new(0),
        packets,
    };
    Ok((shared, kthreads, memfd))
}

/// Registers with iokerneld once every kthread has reported its thread id.
pub(crate) fn register(
    shared: &IokShared,
    kthreads: &[&'static Kthread],
    settings: &IokernelSettings,
    net: Option<&crate::net::NetConfig>,
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
        net: net.map(|n| NetIdentity {
            mac: n.effective_mac().0,
            ipv4: n.ip.octets(),
        }),
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
    /// Pushes a command, waiting for room (iokerneld drains the ring every loop).
    ///
    /// # Safety
    /// Called only by the owning kthread, with preemption disabled.
    pub unsafe fn send(&self, slot: Slot) {
        self.commands_lock.lock();
        // SAFETY: commands_lock held.
        let commands = unsafe { &mut *self.commands.get() };
        while commands.try_push(slot).is_err() {
            crate::arch::pause();
        }
        // SAFETY: we hold the lock.
        unsafe { self.commands_lock.unlock() };
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
        self.preempt_requested.store(false, Ordering::Release);
        // SAFETY: forwarded.
        unsafe { self.send(slot) };
    }

    /// Posts this kthread's returned receive buffers on its command ring, as far as there is
    /// room (the rest wait for the next pass). `wait`: take the command lock even if another
    /// kthread holds it (the owner does); a thief only tries.
    fn flush_reposts(&self, wait: bool) {
        if self.rx_repost.lock().is_empty() {
            return;
        }
        if wait {
            self.commands_lock.lock();
        } else if !self.commands_lock.try_lock() {
            return;
        }
        // SAFETY: commands_lock held.
        let commands = unsafe { &mut *self.commands.get() };
        let mut list = self.rx_repost.lock();
        while let Some(&offset) = list.last() {
            let post = Slot::packet(Command::RxBufferPost, offset, FRAME_CAPACITY as u32);
            if commands.try_push(post).is_err() {
                break;
            }
            list.pop();
        }
        drop(list);
        // SAFETY: we hold the lock.
        unsafe { self.commands_lock.unlock() };
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

/// When iokerneld last signalled the eventfd of the calling uthread's kthread, in
/// `CLOCK_MONOTONIC` nanoseconds: the wake-up proper (eventfd write to running) is the time
/// since, if the kthread has not parked since. `None` outside a runtime in iokerneld mode or
/// before the first wake-up.
pub fn core_wake_sent_at_ns() -> Option<u64> {
    let _guard = crate::preempt::PreemptGuard::new();
    let k = crate::sched::kthread::current_kthread()?;
    let ns = k.iok.as_ref()?.wake_sent.load(Ordering::Acquire);
    (ns != 0).then_some(ns)
}

/// The shared counters behind a kthread's run queue.
pub(crate) fn runq_counters(k: &IokKthread) -> (&'static AtomicU32, &'static AtomicU32) {
    (&k.positions.runq_head, &k.positions.runq_tail)
}

/// The owner's pass over its own ingress ring, from its scheduler: applies grants and
/// preemption requests, processes packets and completions, and posts returned receive buffers.
/// Returns whether iokerneld wants the core back.
///
/// If a thief is draining the ring right now this skips it: the thief applies whatever it pops
/// to this kthread's state, and the next pass sees the outcome.
pub(crate) fn poll_own(k: &Kthread) -> bool {
    let kio = k.iok();
    if kio.ingress_lock.try_lock() {
        // SAFETY: we hold the ring's consumer lock.
        unsafe { drain_locked(k.shared(), k.index, crate::timer::now_ns()) };
        // SAFETY: taken above.
        unsafe { kio.ingress_lock.unlock() };
    }
    if k.shared().net.is_some() {
        kio.flush_reposts(true);
    }
    kio.preempt_requested.load(Ordering::Acquire)
}

/// After a wake-up: drains the kthread's own ingress ring, waiting for a thief that is
/// draining it to finish (a grant it pops still counts), and returns the grants seen so far.
/// iokerneld pushes a grant before it writes the eventfd, so once the eventfd was read the grant
/// is in the ring or already counted. Scheduler context.
pub(crate) fn drain_own_after_wake(k: &Kthread) -> u64 {
    let kio = k.iok();
    kio.ingress_lock.lock();
    // SAFETY: we hold the ring's consumer lock.
    unsafe { drain_locked(k.shared(), k.index, crate::timer::now_ns()) };
    // SAFETY: taken above.
    unsafe { kio.ingress_lock.unlock() };
    kio.grants.load(Ordering::Acquire)
}

/// Packet stealing: drains the ingress ring of any other kthread that nobody is draining.
/// Returns whether anything was processed. Scheduler context.
pub(crate) fn steal_ingress(k: &Kthread) -> bool {
    let rt = k.shared();
    if rt.net.is_none() {
        // Only packets are worth stealing; grants and preemptions wait for their owner.
        return false;
    }
    let n = rt.kthreads.len();
    let start = k.next_random() as usize % n;
    let mut any = false;
    for i in 0..n {
        let index = (start + i) % n;
        if index == k.index {
            continue;
        }
        let victim = rt.kthreads[index].iok();
        if victim.ingress_lock.try_lock() {
            // SAFETY: we hold the victim's consumer lock.
            let drained = unsafe { drain_locked(rt, index, crate::timer::now_ns()) };
            // SAFETY: taken above.
            unsafe { victim.ingress_lock.unlock() };
            if drained > 0 {
                any = true;
                victim.flush_reposts(false);
            }
        }
    }
    any
}

/// Pops everything on kthread `owner`'s ingress ring. Commands concern `owner`; packets are
/// processed here, on the calling kthread. Returns how many slots were popped.
///
/// # Safety
/// The caller holds `owner`'s `ingress_lock` and runs with preemption disabled.
unsafe fn drain_locked(rt: &Shared, owner: usize, now: u64) -> usize {
    let kio = rt.kthreads[owner].iok();
    // SAFETY: the consumer lock is held (caller's contract).
    let ingress = unsafe { &mut *kio.ingress.get() };
    let mut popped = 0;
    while let Some(slot) = ingress.try_pop() {
        popped += 1;
        match slot.command_on(RingKind::Ingress) {
            Ok(Command::Grant) => {
                // A grant supersedes any preemption sent before it: that one concerned the
                // core this kthread held before it last parked.
                kio.preempt_requested.store(false, Ordering::Release);
                kio.cpu.store(slot.payload() as u32, Ordering::Relaxed);
                kio.grants.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Command::Preempt) => {
                kio.preempt_requested.store(true, Ordering::Release);
                kio.preemptions.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Command::RxPacket) => rx_packet(rt, slot, now),
            Ok(Command::TxCompletion) => tx_completion(rt, kio, slot),
            // Join (and anything unexpected) needs no action: the woken kthread steals anyway.
            _ => {}
        }
    }
    popped
}

fn rx_packet(rt: &Shared, slot: Slot, now: u64) {
    let (Some(pool), Some(net)) = (rt.iok.as_ref().and_then(|i| i.packets.as_ref()), &rt.net)
    else {
        return;
    };
    let offset = slot.payload();
    let Some(BufferRef::Rx { owner }) = pool.locate(offset) else {
        net.count(StackDrop::BadDescriptor);
        return;
    };
    let len = slot.length() as usize;
    if len <= FRAME_CAPACITY {
        // SAFETY: `offset` is one of our receive buffers, and iokerneld handed it back with
        // this RxPacket: it is ours until we post it again below.
        let frame = unsafe { &pool.buffer(offset)[..len] };
        net.receive(frame, now);
    } else {
        net.count(StackDrop::BadDescriptor);
    }
    // The stack copied out everything it keeps, so the buffer can go back at once.
    rt.kthreads[owner].iok().rx_repost.lock().push(offset);
}

fn tx_completion(rt: &Shared, ring: &IokKthread, slot: Slot) {
    let (Some(pool), Some(net)) = (rt.iok.as_ref().and_then(|i| i.packets.as_ref()), &rt.net)
    else {
        return;
    };
    let offset = slot.payload();
    let Some(BufferRef::Tx { owner }) = pool.locate(offset) else {
        net.count(StackDrop::BadDescriptor);
        return;
    };
    if slot.flags() & flags::DROPPED != 0 {
        net.count(StackDrop::TxRejected);
    }
    let _ = ring
        .tx_inflight
        .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| n.checked_sub(1));
    release_tx(rt, pool, owner, offset);
}

/// Puts a transmit buffer back on its owner's free list and wakes a sender waiting for one.
fn release_tx(rt: &Shared, pool: &PacketPool, owner: usize, offset: u64) {
    rt.kthreads[owner].iok().tx_free.lock().push(offset);
    pool.tx_free.fetch_add(1, Ordering::SeqCst);
    // Pairs with the fence in `wait_for_tx`: either the waiter sees the buffer, or we see it
    // queued.
    fence(Ordering::SeqCst);
    if pool.tx_waiters.maybe_waiters() {
        pool.tx_waiters.wake_one();
    }
}

/// Takes a free transmit buffer: the calling kthread's own first, else any other's.
fn take_tx(rt: &Shared, k: &Kthread, pool: &PacketPool) -> Option<(usize, u64)> {
    if pool.tx_free.load(Ordering::Relaxed) == 0 {
        return None;
    }
    let own = k.iok().tx_free.lock().pop().map(|o| (k.index, o));
    let found = own.or_else(|| {
        rt.kthreads.iter().find_map(|other| {
            let mut list = other.iok().tx_free.try_lock()?;
            list.pop().map(|o| (other.index, o))
        })
    });
    if found.is_some() {
        pool.tx_free.fetch_sub(1, Ordering::Relaxed);
    }
    found
}

/// Sends one frame through iokerneld from the calling kthread's egress ring (see
/// [`crate::net::stack::Link::transmit`]).
pub(crate) fn transmit(
    may_block: bool,
    build: &mut dyn FnMut(&mut [u8]) -> usize,
) -> Result<(), StackDrop> {
    loop {
        crate::preempt::disable();
        let Some(k) = crate::sched::kthread::current_kthread() else {
            crate::preempt::enable();
            // Only a kthread has an egress ring to push on.
            return Err(StackDrop::NoLink);
        };
        let rt = k.shared();
        let Some(pool) = rt.iok.as_ref().and_then(|i| i.packets.as_ref()) else {
            crate::preempt::enable();
            return Err(StackDrop::NoLink);
        };
        let kio = k.iok();
        let taken = if kio.tx_inflight.load(Ordering::Acquire) < TX_BUFFERS {
            take_tx(rt, k, pool)
        } else {
            None
        };
        if let Some((owner, offset)) = taken {
            // SAFETY: taken off a free list: ours until pushed.
            let buf = unsafe { pool.buffer(offset) };
            let len = build(buf);
            let result = if len == 0 || len > MAX_FRAME {
                release_tx(rt, pool, owner, offset);
                Ok(())
            } else {
                kio.tx_inflight.fetch_add(1, Ordering::AcqRel);
                // SAFETY: this kthread's egress ring, with preemption disabled.
                let egress = unsafe { &mut *kio.egress.get() };
                match egress.try_push(Slot::packet(Command::TxPacket, offset, len as u32)) {
                    Ok(()) => Ok(()),
                    Err(_) => {
                        kio.tx_inflight.fetch_sub(1, Ordering::AcqRel);
                        release_tx(rt, pool, owner, offset);
                        Err(StackDrop::TxRingFull)
                    }
                }
            };
            crate::preempt::enable();
            return result;
        }
        let in_uthread = !k.current().is_null();
        crate::preempt::enable();
        if !may_block || !in_uthread || !crate::preempt::is_enabled() {
            return Err(StackDrop::TxNoBuffer);
        }
        if pool.tx_free.load(Ordering::Relaxed) > 0 {
            // Buffers are free but this kthread has its most frames in flight: their
            // completions are on the way.
            crate::sched::yield_now();
        } else {
            wait_for_tx(pool);
        }
    }
}

/// Blocks the calling uthread until a transmit buffer is released (or one already was).
fn wait_for_tx(pool: &PacketPool) {
    let node = WaitNode::for_current();
    block_with(&node, || {
        pool.tx_waiters.with(|l| {
            l.push(WaitRef::Stack(&node));
            // Pairs with the fence in `release_tx`.
            fence(Ordering::SeqCst);
            if pool.tx_free.load(Ordering::SeqCst) > 0 {
                // Nobody can have taken the node yet: releasers pop under this lock.
                l.remove(&node);
                return false;
            }
            true
        })
    });
}

/// Reports the runtime's earliest timer (`u64::MAX`: none) before its last kthread parks.
///
/// # Safety
/// As for [`IokKthread::send`].
pub(crate) unsafe fn send_timer_deadline(k: &IokKthread, deadline: u64) {
    // SAFETY: forwarded.
    unsafe { k.send(Slot::value(Command::TimerDeadline, deadline)) };
}

// `IokShared` is reached from every kthread; its fields are atomics, a mutex, a validated
// region view (which hands out only atomics) and the packet pool, whose buffers are handed
// out one owner at a time.
// SAFETY: see above.
unsafe impl Sync for IokShared {}
// SAFETY: see above.
unsafe impl Send for IokShared {}
// SAFETY: the ingress consumer and command producer are touched only under their locks, the
// egress producer only by the owning kthread with preemption disabled; the rest is atomics,
// spinlocks and an fd.
unsafe impl Sync for IokKthread {}
// SAFETY: as above.
unsafe impl Send for IokKthread {}
