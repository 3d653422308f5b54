//! One AF_XDP socket: its UMEM (the frames it shares with the kernel), its four rings, and a
//! burst API over them.
//!
//! Every frame of the UMEM is, at any time, in exactly one place: free in user space (the
//! socket's free list), lent to the kernel to receive into (the fill ring, or the RX ring on
//! its way back), held by the caller's callback during [`XskSocket::recv_burst`], or lent to the
//! kernel to send (the TX ring, or the completion ring on its way back). At most
//! [`SocketConfig::rx_frames`] frames are lent for receiving at once, so that the rest is always
//! there for sending.
//!
//! The fill ring is twice that size by default. The kernel publishes how far it has read the
//! fill ring only when it flushes a batch (and it publishes the batch's RX descriptors first),
//! so a fill ring only as big as what is lent can look full, for a moment or for as long as
//! the interface is idle, while frames are owed to it: they would then wait, and with the
//! ring run dry the kernel drops what arrives.
//!
//! With `XDP_USE_NEED_WAKEUP` the kernel says, through a ring's flags word, when it needs a
//! system call to look at the ring again; the socket makes one only then: a `sendto` when
//! [flushing](XskSocket::flush) a TX ring that asks for it, a `recvfrom` when the fill ring
//! asks for it. In copy mode the kernel sends only inside `sendto`, so every flush that has
//! frames to send costs one (frames queued one at a time with [`XskSocket::enqueue`] share
//! it); receiving costs none. [`Counters`] counts both, and the frames moved.

use core::sync::atomic::AtomicU32;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::time::Duration;

use rustix::io::Errno;
use rustix::mm::{MapFlags, ProtFlags};
use rustix::net::xdp::{
    SocketAddrXdp, SocketAddrXdpFlags, XDP_PGOFF_RX_RING, XDP_PGOFF_TX_RING,
    XDP_UMEM_PGOFF_COMPLETION_RING, XDP_UMEM_PGOFF_FILL_RING, XdpOptionsFlags, XdpRingOffset,
    XdpUmemReg, XdpUmemRegFlags,
};
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType, sockopt};

use crate::error::Error;
use crate::iface::Interface;
use crate::ring::{Consumer, Desc, Producer, RingParts, Slot};

/// Frames handled per call at most.
pub const MAX_BURST: usize = 64;

/// Where the kernel puts a received frame in copy mode: this far into its UMEM frame
/// (`XDP_PACKET_HEADROOM`).
pub const RX_HEADROOM: u32 = 256;

/// How long `bind` may find its queue taken before giving up: the kernel releases a closed
/// socket's hold on its queue in deferred work, so closing one and binding another to the same
/// queue at once can find it still taken.
const BIND_BUSY_WAIT: Duration = Duration::from_millis(500);

/// Whether to ask for zero-copy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ZeroCopy {
    /// Zero-copy if the driver supports it, else copy (the kernel's own fallback when `bind`
    /// asks for neither).
    #[default]
    Auto,
    /// Zero-copy or fail (`XDP_ZEROCOPY`).
    Require,
    /// Copy (`XDP_COPY`).
    Never,
}

/// A socket's sizes and modes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SocketConfig {
    /// Bytes per UMEM frame: 2048 or 4096. A received frame starts [`RX_HEADROOM`] bytes in,
    /// so 2048 leaves 1792 bytes, room for a 1500-byte MTU's frames.
    pub frame_size: u32,
    /// Frames in the UMEM.
    pub frame_count: u32,
    /// Frames lent for receiving (on the fill ring or the RX ring) at most. Must be below
    /// `frame_count`, so that some are left to send with, and at most `fill_size`.
    pub rx_frames: u32,
    /// Fill ring entries (a power of two): best twice `rx_frames` (see the module's
    /// documentation).
    pub fill_size: u32,
    /// Completion ring entries (a power of two).
    pub completion_size: u32,
    /// RX ring entries (a power of two).
    pub rx_size: u32,
    /// TX ring entries (a power of two).
    pub tx_size: u32,
    /// Zero-copy or copy.
    pub zero_copy: ZeroCopy,
    /// Bind with `XDP_USE_NEED_WAKEUP` (make system calls only when the kernel asks). Without
    /// it, every transmitted burst is kicked with `sendto`.
    pub need_wakeup: bool,
}

impl Default for SocketConfig {
    fn default() -> SocketConfig {
        SocketConfig {
            frame_size: 2048,
            frame_count: 4096,
            rx_frames: 2048,
            fill_size: 4096,
            completion_size: 2048,
            rx_size: 2048,
            tx_size: 2048,
            zero_copy: ZeroCopy::Auto,
            need_wakeup: true,
        }
    }
}

impl SocketConfig {
    /// Checks the sizes.
    pub fn validate(&self) -> Result<(), Error> {
        if self.frame_size != 2048 && self.frame_size != 4096 {
            return Err(Error::Config(format!(
                "frame size {} is neither 2048 nor 4096",
                self.frame_size
            )));
        }
        for (what, size) in [
            ("fill", self.fill_size),
            ("completion", self.completion_size),
            ("RX", self.rx_size),
            ("TX", self.tx_size),
        ] {
            if !size.is_power_of_two() || size > 1 << 20 {
                return Err(Error::Config(format!(
                    "{what} ring size {size} is not a power of two up to 2^20"
                )));
            }
        }
        if self.rx_frames == 0 || self.rx_frames >= self.frame_count {
            return Err(Error::Config(format!(
                "{} frames lent for receiving of {} leave none to receive or none to send with",
                self.rx_frames, self.frame_count
            )));
        }
        if self.rx_frames > self.fill_size {
            return Err(Error::Config(format!(
                "{} frames lent for receiving do not fit a fill ring of {}",
                self.rx_frames, self.fill_size
            )));
        }
        if u64::from(self.frame_count) * u64::from(self.frame_size) > 1 << 32 {
            return Err(Error::Config("a UMEM of more than 4 GiB".into()));
        }
        Ok(())
    }
}

/// What [`XskSocket::recv_burst`]'s callback does with a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Done with it: the frame goes back to the free list.
    Release,
    /// Send it out of the same queue as it now is, its first `len` bytes (clamped to what its
    /// UMEM frame holds), without copying. `Transmit(0)` is a release.
    Transmit(usize),
}

/// What a socket has done, counted in user space.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Frames received.
    pub rx_frames: u64,
    /// Their bytes.
    pub rx_bytes: u64,
    /// Frames put on the TX ring.
    pub tx_frames: u64,
    /// Their bytes.
    pub tx_bytes: u64,
    /// Sent frames whose completion came back.
    pub tx_completed: u64,
    /// Frames not sent: no free frame, too long, or the TX ring full.
    pub tx_dropped: u64,
    /// RX descriptors outside the UMEM (never seen from a sane kernel).
    pub rx_invalid: u64,
    /// `recvfrom` calls made because the fill ring asked for a wakeup.
    pub rx_wakeups: u64,
    /// `sendto` calls made to have the kernel send.
    pub tx_kicks: u64,
    /// `sendto` calls that failed other than for a transient reason.
    pub kick_errors: u64,
    /// `poll` calls made by [`XskSocket::wait`].
    pub waits: u64,
}

impl std::ops::AddAssign for Counters {
    fn add_assign(&mut self, o: Counters) {
        self.rx_frames += o.rx_frames;
        self.rx_bytes += o.rx_bytes;
        self.tx_frames += o.tx_frames;
        self.tx_bytes += o.tx_bytes;
        self.tx_completed += o.tx_completed;
        self.tx_dropped += o.tx_dropped;
        self.rx_invalid += o.rx_invalid;
        self.rx_wakeups += o.rx_wakeups;
        self.tx_kicks += o.tx_kicks;
        self.kick_errors += o.kick_errors;
        self.waits += o.waits;
    }
}

impl Counters {
    /// System calls on the data path: wakeups, kicks and waits.
    pub fn syscalls(&self) -> u64 {
        self.rx_wakeups + self.tx_kicks + self.waits
    }
}

/// The kernel's counters for the socket (`XDP_STATISTICS`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelStats {
    /// Frames dropped for any reason other than the two below.
    pub rx_dropped: u64,
    /// Invalid fill ring descriptors.
    pub rx_invalid_descs: u64,
    /// Invalid TX ring descriptors.
    pub tx_invalid_descs: u64,
    /// Frames dropped because the RX ring was full.
    pub rx_ring_full: u64,
    /// Times the fill ring was found empty.
    pub rx_fill_ring_empty: u64,
    /// Times the TX ring was found empty.
    pub tx_ring_empty: u64,
}

/// A memory mapping, unmapped when dropped.
struct Mmap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping belongs to this value alone; nothing about it is tied to a thread.
unsafe impl Send for Mmap {}

impl Mmap {
    /// `len` bytes of private zeroed memory, faulted in now.
    fn anonymous(len: usize) -> io::Result<Mmap> {
        // SAFETY: a new anonymous mapping at an address of the kernel's choosing aliases
        // nothing.
        let ptr = unsafe {
            rustix::mm::mmap_anonymous(
                core::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE | MapFlags::POPULATE,
            )
        }?;
        Ok(Mmap {
            ptr: NonNull::new(ptr.cast()).expect("mmap returned null"),
            len,
        })
    }

    /// `len` bytes of the socket's shared memory at `offset` (one of its rings).
    fn shared(fd: BorrowedFd<'_>, len: usize, offset: u64) -> io::Result<Mmap> {
        // SAFETY: a new shared mapping of the socket's ring at an address of the kernel's
        // choosing aliases no Rust object.
        let ptr = unsafe {
            rustix::mm::mmap(
                core::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED | MapFlags::POPULATE,
                fd,
                offset,
            )
        }?;
        Ok(Mmap {
            ptr: NonNull::new(ptr.cast()).expect("mmap returned null"),
            len,
        })
    }

    /// `len` bytes at `off`, if inside the mapping.
    fn bytes_mut(&mut self, off: u64, len: usize) -> Option<&mut [u8]> {
        let end = off.checked_add(len as u64)?;
        if end > self.len as u64 {
            return None;
        }
        // SAFETY: in bounds of the mapping, which lives as long as `self`; `&mut self` makes
        // this the only Rust reference into it. The kernel writes only frames lent to it, and
        // callers only ask for frames they own.
        Some(unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr().add(off as usize), len) })
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: the mapping was made by this value and nothing refers to it any more (ring
        // views into it are dropped first: see XskSocket's field order).
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// A ring's parts inside its mapping, checked against the mapping's size.
fn ring_parts<T>(
    map: &Mmap,
    off: &XdpRingOffset,
    entries: u32,
) -> Result<RingParts<'static, T>, Error> {
    let flags = off.flags.ok_or_else(|| Error::Unsupported {
        what: "AF_XDP ring flags (need_wakeup, Linux 5.4)".into(),
        source: io::Error::from_raw_os_error(libc::EOPNOTSUPP),
    })?;
    let word = |at: u64| -> Result<&'static AtomicU32, Error> {
        if !at.is_multiple_of(4) || at + 4 > map.len as u64 {
            return Err(Error::os(
                "mapping an AF_XDP ring",
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("offset {at} out of place"),
                ),
            ));
        }
        // SAFETY: 4-aligned and inside the mapping (checked above); the mapping outlives the
        // reference because the socket drops its ring views before its mappings and never
        // hands the reference out. The kernel accesses the word only atomically.
        Ok(unsafe { &*map.ptr.as_ptr().add(at as usize).cast::<AtomicU32>() })
    };
    let (producer, consumer, flags) = (word(off.producer)?, word(off.consumer)?, word(flags)?);
    let bytes = u64::from(entries) * size_of::<T>() as u64;
    if !off.desc.is_multiple_of(align_of::<T>() as u64) || off.desc + bytes > map.len as u64 {
        return Err(Error::os(
            "mapping an AF_XDP ring",
            io::Error::new(io::ErrorKind::InvalidData, "descriptors out of place"),
        ));
    }
    // SAFETY: `entries` Slot<T>s (each a T: plain integers, valid for any bits) fit inside the
    // mapping at an aligned offset (checked above); lifetime as for the words.
    let slots = unsafe {
        core::slice::from_raw_parts(
            map.ptr.as_ptr().add(off.desc as usize).cast::<Slot<T>>(),
            entries as usize,
        )
    };
    Ok(RingParts {
        producer,
        consumer,
        flags,
        slots,
    })
}

/// One AF_XDP socket bound to one receive queue, with a UMEM of its own.
pub struct XskSocket {
    // The ring views come first: they point into `ring_maps` and are dropped before them.
    fill: Producer<'static, u64>,
    completion: Consumer<'static, u64>,
    rx: Consumer<'static, Desc>,
    tx: Producer<'static, Desc>,
    _ring_maps: [Mmap; 4],
    // Closed before the UMEM is unmapped.
    fd: OwnedFd,
    umem: Mmap,
    queue: u32,
    zero_copy: bool,
    need_wakeup: bool,
    frame_size: u32,
    /// Frames free in user space, by address of their first byte.
    free: Vec<u64>,
    /// Frames lent for receiving (in the fill or RX ring), and the most there may be.
    rx_lent: u32,
    rx_budget: u32,
    /// Frames lent for sending (in the TX or completion ring).
    tx_lent: u32,
    counters: Counters,
}

impl XskSocket {
    /// Opens a socket on `queue` of `iface`. `force_copy` binds in copy mode whatever the
    /// configuration says (the program runs in generic mode, where zero-copy means nothing).
    pub fn open(
        iface: &Interface,
        queue: u32,
        config: &SocketConfig,
        force_copy: bool,
    ) -> Result<XskSocket, Error> {
        config.validate()?;
        let at = format!("{} queue {queue}", iface.name());
        let fd = rustix::net::socket_with(
            AddressFamily::XDP,
            SocketType::RAW,
            SocketFlags::CLOEXEC,
            None,
        )
        .map_err(|e| match e {
            Errno::AFNOSUPPORT => Error::Unsupported {
                what: "AF_XDP sockets (CONFIG_XDP_SOCKETS, Linux 4.18)".into(),
                source: e.into(),
            },
            e => crate::maps::bpf_error("creating an AF_XDP socket", e.into()),
        })?;

        let umem_len = config.frame_count as usize * config.frame_size as usize;
        let umem = Mmap::anonymous(umem_len)
            .map_err(|e| Error::os(format!("allocating a {umem_len}-byte UMEM"), e))?;
        sockopt::set_xdp_umem_reg(
            &fd,
            XdpUmemReg {
                addr: umem.ptr.as_ptr() as u64,
                len: umem_len as u64,
                chunk_size: config.frame_size,
                headroom: 0,
                flags: XdpUmemRegFlags::empty(),
                tx_metadata_len: 0,
            },
        )
        .map_err(|e| {
            Error::os(
                format!(
                    "registering the UMEM (XDP_UMEM_REG) for {at}; it is pinned, and counts \
                     against RLIMIT_MEMLOCK without CAP_IPC_LOCK"
                ),
                e.into(),
            )
        })?;
        let ring_size = |what: &str, r: rustix::io::Result<()>| {
            r.map_err(|e| Error::os(format!("sizing the {what} ring of {at}"), e.into()))
        };
        ring_size(
            "fill",
            sockopt::set_xdp_umem_fill_ring_size(&fd, config.fill_size),
        )?;
        ring_size(
            "completion",
            sockopt::set_xdp_umem_completion_ring_size(&fd, config.completion_size),
        )?;
        ring_size("RX", sockopt::set_xdp_rx_ring_size(&fd, config.rx_size))?;
        ring_size("TX", sockopt::set_xdp_tx_ring_size(&fd, config.tx_size))?;
        let off = sockopt::xdp_mmap_offsets(&fd)
            .map_err(|e| Error::os(format!("reading the ring offsets of {at}"), e.into()))?;

        let map = |what: &str, o: &XdpRingOffset, entries: u32, entry: usize, pgoff: u64| {
            let len = o.desc as usize + entries as usize * entry;
            Mmap::shared(fd.as_fd(), len, pgoff)
                .map_err(|e| Error::os(format!("mapping the {what} ring of {at}"), e))
        };
        let fill_map = map(
            "fill",
            &off.fr,
            config.fill_size,
            8,
            XDP_UMEM_PGOFF_FILL_RING,
        )?;
        let comp_map = map(
            "completion",
            &off.cr,
            config.completion_size,
            8,
            XDP_UMEM_PGOFF_COMPLETION_RING,
        )?;
        let rx_map = map("RX", &off.rx, config.rx_size, 16, XDP_PGOFF_RX_RING)?;
        let tx_map = map("TX", &off.tx, config.tx_size, 16, XDP_PGOFF_TX_RING)?;

        let ring_error = |e: crate::ring::BadSize| Error::Config(format!("a ring of {at}: {e}"));
        let fill = ring_parts(&fill_map, &off.fr, config.fill_size)?
            .producer()
            .map_err(ring_error)?;
        let completion = ring_parts(&comp_map, &off.cr, config.completion_size)?
            .consumer()
            .map_err(ring_error)?;
        let rx = ring_parts(&rx_map, &off.rx, config.rx_size)?
            .consumer()
            .map_err(ring_error)?;
        let tx = ring_parts(&tx_map, &off.tx, config.tx_size)?
            .producer()
            .map_err(ring_error)?;

        let mut flags = SocketAddrXdpFlags::empty();
        if config.need_wakeup {
            flags |= SocketAddrXdpFlags::XDP_USE_NEED_WAKEUP;
        }
        let copy = force_copy || config.zero_copy == ZeroCopy::Never;
        if copy {
            flags |= SocketAddrXdpFlags::XDP_COPY;
        } else if config.zero_copy == ZeroCopy::Require {
            flags |= SocketAddrXdpFlags::XDP_ZEROCOPY;
        }
        let addr = SocketAddrXdp::new(flags, iface.index(), queue);
        let mut busy_since = None;
        loop {
            match rustix::net::bind(&fd, &addr) {
                Ok(()) => break,
                // A socket closed a moment ago keeps its queue until the kernel's deferred
                // release runs: wait for it, a little.
                Err(Errno::BUSY)
                    if busy_since
                        .get_or_insert_with(std::time::Instant::now)
                        .elapsed()
                        < BIND_BUSY_WAIT =>
                {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(bind_error(iface, queue, config, e)),
            }
        }
        let zero_copy = sockopt::xdp_options(&fd)
            .map_err(|e| Error::os(format!("reading the options of {at}"), e.into()))?
            .contains(XdpOptionsFlags::XDP_OPTIONS_ZEROCOPY);

        let step = u64::from(config.frame_size);
        let mut socket = XskSocket {
            fill,
            completion,
            rx,
            tx,
            _ring_maps: [fill_map, comp_map, rx_map, tx_map],
            fd,
            umem,
            queue,
            zero_copy,
            need_wakeup: config.need_wakeup,
            frame_size: config.frame_size,
            // Popped from the end: lowest addresses first.
            free: (0..u64::from(config.frame_count))
                .rev()
                .map(|i| i * step)
                .collect(),
            rx_lent: 0,
            rx_budget: config.rx_frames,
            tx_lent: 0,
            counters: Counters::default(),
        };
        socket.refill();
        Ok(socket)
    }

    /// The receive queue it is bound to.
    pub fn queue(&self) -> u32 {
        self.queue
    }

    /// Whether the kernel gave zero-copy (`XDP_OPTIONS_ZEROCOPY`).
    pub fn zero_copy(&self) -> bool {
        self.zero_copy
    }

    /// Its descriptor (for an XSKMAP entry, or to poll).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The counters so far.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Frames free in user space now.
    pub fn free_frames(&self) -> usize {
        self.free.len()
    }

    /// Frames lent to the kernel to send and not yet completed.
    pub fn tx_in_flight(&self) -> u32 {
        self.tx_lent
    }

    /// The first byte of the UMEM frame holding `addr`.
    fn frame_base(&self, addr: u64) -> u64 {
        addr & !u64::from(self.frame_size - 1)
    }

    /// Receives up to `max` (at most [`MAX_BURST`]) frames without waiting, handing each to
    /// `f` as a mutable slice valid during the call only; returns how many. Frames released go
    /// back to the fill ring before returning; frames to transmit go on the TX ring (see
    /// [`Verdict::Transmit`]).
    pub fn recv_burst(&mut self, max: usize, mut f: impl FnMut(&mut [u8]) -> Verdict) -> usize {
        let mut descs = [Desc::default(); MAX_BURST];
        let n = self.rx.pop_batch(&mut descs[..max.min(MAX_BURST)]);
        if n == 0 {
            // Frames the last refill could not lend (the kernel had not yet published how far
            // it had read the fill ring) must not wait for the next frame: with the fill ring
            // empty, that frame would never come.
            if self.rx_lent < self.rx_budget && !self.free.is_empty() {
                self.refill();
            } else if self.need_wakeup && self.fill.needs_wakeup() {
                self.wake_rx();
            }
            return 0;
        }
        self.rx_lent = self.rx_lent.saturating_sub(n as u32);
        let mut out = [Desc::default(); MAX_BURST];
        let mut transmit = 0;
        for d in &descs[..n] {
            let base = self.frame_base(d.addr);
            let room = (base + u64::from(self.frame_size)).saturating_sub(d.addr) as usize;
            let Some(frame) = self
                .umem
                .bytes_mut(d.addr, d.len as usize)
                .filter(|_| d.len as usize <= room)
            else {
                self.counters.rx_invalid += 1;
                if base < self.umem.len as u64 {
                    self.free.push(base);
                }
                continue;
            };
            self.counters.rx_frames += 1;
            self.counters.rx_bytes += u64::from(d.len);
            match f(frame) {
                // The kernel drops an empty TX descriptor without completing it, which would
                // lose the frame: nothing to send is a release.
                Verdict::Release | Verdict::Transmit(0) => self.free.push(base),
                Verdict::Transmit(len) => {
                    out[transmit] = Desc {
                        addr: d.addr,
                        len: len.min(room) as u32,
                        options: 0,
                    };
                    transmit += 1;
                }
            }
        }
        if transmit > 0 {
            self.put_tx(&out[..transmit]);
            self.flush();
        }
        self.refill();
        n
    }

    /// Lends free frames to the fill ring, up to the receive budget; wakes the kernel if it
    /// asks. Returns how many were lent.
    pub fn refill(&mut self) -> usize {
        let want = self.rx_budget.saturating_sub(self.rx_lent) as usize;
        let n = want.min(self.free.len());
        if n == 0 {
            return 0;
        }
        let free = &self.free;
        let top = free.len();
        let pushed = self.fill.push_with(n, |i| free[top - 1 - i]);
        self.free.truncate(top - pushed);
        self.rx_lent += pushed as u32;
        if pushed > 0 && self.need_wakeup && self.fill.needs_wakeup() {
            self.wake_rx();
        }
        pushed
    }

    /// Copies up to [`MAX_BURST`] frames into free UMEM frames, puts them on the TX ring and
    /// [flushes](XskSocket::flush) it; returns how many were queued. Frames that cannot go
    /// (empty, longer than a UMEM frame, no free frame, TX ring full) are counted in
    /// `tx_dropped`.
    pub fn send_burst<'f>(&mut self, frames: impl IntoIterator<Item = &'f [u8]>) -> usize {
        let n = self.enqueue_burst(frames);
        self.flush();
        n
    }

    /// Sends one frame: a burst of one, so one `sendto` in copy mode. To send frames one at a
    /// time without a system call each, [`enqueue`](XskSocket::enqueue) them and flush once.
    pub fn send(&mut self, frame: &[u8]) -> bool {
        self.send_burst([frame]) == 1
    }

    /// As [`send_burst`](XskSocket::send_burst) without the flush: the frames wait on the TX
    /// ring for the next [`flush`](XskSocket::flush) (or the next call that flushes).
    pub fn enqueue_burst<'f>(&mut self, frames: impl IntoIterator<Item = &'f [u8]>) -> usize {
        if self.free.len() < MAX_BURST {
            self.take_completions();
        }
        let mut descs = [Desc::default(); MAX_BURST];
        let mut n = 0;
        for frame in frames.into_iter().take(MAX_BURST) {
            if frame.is_empty() || frame.len() > self.frame_size as usize {
                self.counters.tx_dropped += 1;
                continue;
            }
            let Some(base) = self.free.pop() else {
                self.counters.tx_dropped += 1;
                continue;
            };
            let dst = self
                .umem
                .bytes_mut(base, frame.len())
                .expect("free frames are inside the UMEM");
            dst.copy_from_slice(frame);
            descs[n] = Desc {
                addr: base,
                len: frame.len() as u32,
                options: 0,
            };
            n += 1;
        }
        self.put_tx(&descs[..n])
    }

    /// Queues one frame without a system call (see [`enqueue_burst`](XskSocket::enqueue_burst)).
    pub fn enqueue(&mut self, frame: &[u8]) -> bool {
        self.enqueue_burst([frame]) == 1
    }

    /// Has the kernel send what waits on the TX ring: one `sendto` if anything waits and the
    /// kernel asks for it (in copy mode it always does, and sends during the call, a bounded
    /// batch at a time: frames left over go at the next flush).
    pub fn flush(&mut self) {
        let size = self.tx.size();
        if self.tx.free(size) < size && (!self.need_wakeup || self.tx.needs_wakeup()) {
            self.kick_tx();
        }
    }

    /// Puts `descs` on the TX ring; frames that do not fit go back to the free list.
    fn put_tx(&mut self, descs: &[Desc]) -> usize {
        let k = self.tx.push_batch(descs);
        for d in &descs[k..] {
            let base = self.frame_base(d.addr);
            self.free.push(base);
            self.counters.tx_dropped += 1;
        }
        self.tx_lent += k as u32;
        self.counters.tx_frames += k as u64;
        self.counters.tx_bytes += descs[..k].iter().map(|d| u64::from(d.len)).sum::<u64>();
        k
    }

    /// Takes back the frames whose sending completed, and flushes the TX ring; returns how
    /// many came back.
    pub fn reap(&mut self) -> usize {
        let n = self.take_completions();
        self.flush();
        n
    }

    /// Moves completed frames from the completion ring to the free list; returns how many.
    fn take_completions(&mut self) -> usize {
        let mask = !u64::from(self.frame_size - 1);
        let free = &mut self.free;
        let n = self
            .completion
            .pop_with(self.completion.size() as usize, |addr| {
                free.push(addr & mask)
            });
        self.tx_lent = self.tx_lent.saturating_sub(n as u32);
        self.counters.tx_completed += n as u64;
        n
    }

    /// Waits up to `timeout` (forever if `None`) for frames to receive; whether some are
    /// there. One `poll`, counted in `waits`.
    pub fn wait(&mut self, timeout: Option<Duration>) -> Result<bool, Error> {
        self.counters.waits += 1;
        let mut fds = [rustix::event::PollFd::new(
            &self.fd,
            rustix::event::PollFlags::IN,
        )];
        let timeout = timeout.map(|d| rustix::event::Timespec {
            tv_sec: d.as_secs() as i64,
            tv_nsec: i64::from(d.subsec_nanos()),
        });
        match rustix::event::poll(&mut fds, timeout.as_ref()) {
            Ok(n) => Ok(n > 0),
            Err(Errno::INTR) => Ok(false),
            Err(e) => Err(Error::os("polling an AF_XDP socket", e.into())),
        }
    }

    /// The kernel's counters (one `getsockopt`, not counted as a data-path call).
    pub fn kernel_stats(&self) -> Result<KernelStats, Error> {
        let s = sockopt::xdp_statistics(&self.fd)
            .map_err(|e| Error::os("reading XDP_STATISTICS", e.into()))?;
        Ok(KernelStats {
            rx_dropped: s.rx_dropped,
            rx_invalid_descs: s.rx_invalid_descs,
            tx_invalid_descs: s.tx_invalid_descs,
            rx_ring_full: s.rx_ring_full.unwrap_or(0),
            rx_fill_ring_empty: s.rx_fill_ring_empty_descs.unwrap_or(0),
            tx_ring_empty: s.tx_ring_empty_descs.unwrap_or(0),
        })
    }

    /// `sendto(fd, NULL, 0, MSG_DONTWAIT)`: in copy mode the kernel sends from the TX ring
    /// during the call; in zero-copy mode it wakes the driver.
    fn kick_tx(&mut self) {
        self.counters.tx_kicks += 1;
        match rustix::net::send(&self.fd, &[], SendFlags::DONTWAIT) {
            Ok(_) => {}
            // The ring had more than one call sends, the device was busy or out of room, or
            // it is down: the next kick or reap retries.
            Err(Errno::AGAIN | Errno::BUSY | Errno::NOBUFS | Errno::NETDOWN) => {}
            Err(_) => self.counters.kick_errors += 1,
        }
    }

    /// `recvfrom(fd, NULL, 0, MSG_DONTWAIT)`: tells the driver the fill ring has frames.
    fn wake_rx(&mut self) {
        self.counters.rx_wakeups += 1;
        let mut none: [u8; 0] = [];
        let _ = rustix::net::recv(&self.fd, &mut none[..], RecvFlags::DONTWAIT);
    }
}

fn bind_error(iface: &Interface, queue: u32, config: &SocketConfig, e: Errno) -> Error {
    let name = iface.name();
    match e {
        Errno::BUSY => Error::os(
            format!("binding to {name} queue {queue}: another AF_XDP socket is bound there"),
            e.into(),
        ),
        Errno::INVAL => {
            let queues = iface
                .rx_queues()
                .map_or_else(|_| "?".to_owned(), |n| n.to_string());
            Error::os(
                format!(
                    "binding to {name} queue {queue} (the interface has {queues} receive queues)"
                ),
                e.into(),
            )
        }
        Errno::OPNOTSUPP if config.zero_copy == ZeroCopy::Require => Error::Unsupported {
            what: format!("{name}'s driver has no zero-copy AF_XDP"),
            source: e.into(),
        },
        Errno::NODEV => Error::NoSuchInterface(name.to_owned()),
        e => Error::os(format!("binding to {name} queue {queue}"), e.into()),
    }
}
