//! The packet pool: the runtime's packet buffers in the region, posting receive buffers,
//! processing received frames and transmit completions, and transmitting.

use core::ptr::NonNull;
use core::sync::atomic::{AtomicUsize, Ordering, fence};

use corral_abi::{Command, FRAME_CAPACITY, MAX_FRAME, PacketArea, Slot, flags};

use super::IokKthread;
use super::Kthread;
use crate::net::stack::StackDrop;
use crate::sched::Shared;
use crate::sync::waitq::{WaitNode, WaitQueue, WaitRef, block_with};

/// Receive buffers each kthread keeps posted to iokerneld.
pub(super) const RX_BUFFERS: u32 = 256;
/// Transmit buffers each kthread owns, and the most frames one kthread has in flight.
pub(super) const TX_BUFFERS: u32 = 128;
/// Bytes of packet area per kthread: its receive buffers, then its transmit buffers (768 KiB).
pub(super) const KTHREAD_PACKET_BYTES: u64 =
    (RX_BUFFERS + TX_BUFFERS) as u64 * FRAME_CAPACITY as u64;

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
    /// The pool of a runtime of `kthreads` kthreads whose packet area is `area`, mapped from
    /// `base` on.
    pub(super) fn new(area: PacketArea, base: NonNull<u8>, kthreads: usize) -> Self {
        PacketPool {
            area,
            base,
            kthreads,
            tx_free: AtomicUsize::new(kthreads * TX_BUFFERS as usize),
            tx_waiters: WaitQueue::new(),
        }
    }

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

    pub(super) fn buffer_offset(kthread: usize, index: u32) -> u64 {
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

impl IokKthread {
    /// Posts this kthread's returned receive buffers on its command ring, as far as there is
    /// room (the rest wait for the next pass). `wait`: take the command lock even if another
    /// kthread holds it (the owner does); a thief only tries.
    pub(super) fn flush_reposts(&self, wait: bool) {
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
}

pub(super) fn rx_packet(rt: &Shared, slot: Slot, now: u64) {
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
        net.receive_in_batch(frame, now);
    } else {
        net.count(StackDrop::BadDescriptor);
    }
    // The stack copied out everything it keeps, so the buffer can go back at once.
    rt.kthreads[owner].iok().rx_repost.lock().push(offset);
}

pub(super) fn tx_completion(rt: &Shared, ring: &IokKthread, slot: Slot) {
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
