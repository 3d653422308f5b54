//! One connection as the runtime holds it: the engine behind a per-connection lock that never
//! makes the receive path wait, the wait queues of blocked readers and writers, and the timer.
//!
//! # The lock and resequencing
//!
//! After packet stealing, segments of one flow may be handled by several kthreads at once, and
//! the receive path runs in the scheduler with preemption disabled, so it must never wait for
//! the connection. The lock is an *owner flag* plus a small queue of pending segments, both
//! behind the gate (a spinlock held for a few instructions, never across engine work):
//!
//! * A kthread with a segment takes the gate; if nobody owns the connection it becomes the
//!   owner, else it copies the segment into the pending queue (bounded, [`PENDING_MAX`]) and
//!   goes on with its next packet at once.
//! * The owner, before giving ownership up, takes the gate again and processes every pending
//!   segment, oldest first, so segments reach the engine in the order they reached the runtime.
//! * An application call (read, write, connect, close) or a timer needs the engine itself: it
//!   waits for ownership by spinning on the gate. Owners never block and keep preemption
//!   disabled, so that wait is one engine call long at most.
//!
//! Copying happens only under contention; the uncontended path takes the gate twice and
//! copies nothing.
//!
//! # ACKs per receive batch
//!
//! Segments taken off an ingress ring in one pass form a receive batch
//! (`NetStack::receive_in_batch`). The engine then owes the ACK that every second full segment
//! asks for to the batch's end ([`Connection::on_segment_in_batch`]); a connection that owes
//! one goes on the layer's list when its owner releases it, and the pass ends by sending those
//! ACKs (`TcpLayer::end_receive_batch`), one per connection instead of one per two segments.
//! Any other release of the connection (an application call, a timer) sends an owed ACK too.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::collections::VecDeque;
use std::sync::{Arc, Weak};

use corral_tcp::{ConnStats, Connection, Endpoints, Events, State, TcpDrop};
use corral_wire::TcpSegment;

use super::listen::ListenerCell;
use crate::net::stack::NetStack;
use crate::sync::spin::SpinLock;
use crate::sync::waitq::WaitQueue;
use crate::timer::{self, TimerAction};

/// Segments a connection holds for its current owner; beyond it they are dropped (TCP recovers
/// them like any loss) and counted.
pub const PENDING_MAX: usize = 64;

/// Delay before a connection that found no transmit buffer tries again.
const TX_RETRY_NS: u64 = 10_000;

struct Gate {
    /// Someone owns the engine.
    busy: bool,
    pending: VecDeque<Vec<u8>>,
    /// Buffers of processed pending segments, reused.
    spare: Vec<Vec<u8>>,
    /// Pending segments dropped because the queue was full.
    overflow: u64,
}

/// What only the owner touches.
pub(crate) struct Owned {
    pub conn: Connection,
    /// A passive connection's listener, until the connection is accepted or closes.
    pub listener: Option<Arc<ListenerCell>>,
    /// Counted in its listener's SYN backlog.
    pub half_open: bool,
    /// Still in the connection table.
    pub in_table: bool,
    /// The last transmission stopped for want of a transmit buffer.
    pub tx_blocked: bool,
    /// The next hop's MAC and until when to use it without asking the ARP table.
    pub neighbour: Option<(corral_wire::MacAddr, u64)>,
    /// The engine's stats when the counters were last reported to iokerneld (see
    /// `TcpLayer::report_counters`).
    pub reported: ConnStats,
    /// Counted in the layer's connections that need bare ACKs promptly
    /// (`Connection::needs_prompt_acks`, as of the last engine call).
    pub needs_prompt_acks: bool,
}

/// One connection.
pub(crate) struct ConnCell {
    ends: Endpoints,
    gate: SpinLock<Gate>,
    owned: UnsafeCell<Owned>,
    pub readers: WaitQueue,
    pub writers: WaitQueue,
    /// Earliest deadline a runtime timer is armed for, `u64::MAX` for none.
    armed: AtomicU64,
    /// On the layer's list of connections whose stats changed since they were last reported.
    unreported: AtomicBool,
    /// On the layer's list of connections that owe their receive batch an ACK.
    owes_batch_ack: AtomicBool,
}

// SAFETY: `owned` is only touched by the owner, which the gate makes unique (see `enter`).
unsafe impl Sync for ConnCell {}
// SAFETY: as above.
unsafe impl Send for ConnCell {}

impl ConnCell {
    pub fn new(conn: Connection, listener: Option<Arc<ListenerCell>>, half_open: bool) -> Self {
        ConnCell {
            ends: conn.ends(),
            gate: SpinLock::new(Gate {
                busy: false,
                pending: VecDeque::new(),
                spare: Vec::new(),
                overflow: 0,
            }),
            owned: UnsafeCell::new(Owned {
                conn,
                listener,
                half_open,
                in_table: false,
                tx_blocked: false,
                neighbour: None,
                reported: ConnStats::default(),
                needs_prompt_acks: false,
            }),
            readers: WaitQueue::new(),
            writers: WaitQueue::new(),
            armed: AtomicU64::new(u64::MAX),
            unreported: AtomicBool::new(false),
            owes_batch_ack: AtomicBool::new(false),
        }
    }

    pub fn ends(&self) -> Endpoints {
        self.ends
    }

    /// Becomes the owner, or queues a copy of `segment` for the owner. True: the caller owns
    /// the connection and must process `segment` itself, then [`Held::release`].
    pub fn own_or_queue(&self, segment: &[u8]) -> bool {
        let mut g = self.gate.lock();
        if !g.busy {
            g.busy = true;
            return true;
        }
        if g.pending.len() >= PENDING_MAX {
            g.overflow += 1;
            return false;
        }
        let mut buf = g.spare.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(segment);
        g.pending.push_back(buf);
        false
    }

    /// Becomes the owner if nobody is. Preemption must be disabled.
    fn try_own(&self) -> bool {
        let mut g = self.gate.lock();
        !std::mem::replace(&mut g.busy, true)
    }

    /// Takes the connection off the list of those owing an ACK to a receive batch.
    pub fn clear_owes_batch_ack(&self) {
        self.owes_batch_ack.store(false, Relaxed);
    }

    /// Waits for ownership (short: owners never block). Preemption must be disabled.
    fn own(&self) {
        loop {
            {
                let mut g = self.gate.lock();
                if !g.busy {
                    g.busy = true;
                    return;
                }
            }
            core::hint::spin_loop();
        }
    }

    /// Hands over one pending segment, or gives ownership up when there is none.
    fn next_pending(&self, done: Option<Vec<u8>>) -> Option<Vec<u8>> {
        let mut g = self.gate.lock();
        if let Some(b) = done
            && g.spare.len() < 4
        {
            g.spare.push(b);
        }
        let next = g.pending.pop_front();
        if next.is_none() {
            g.busy = false;
        }
        next
    }

    /// The earliest deadline a runtime timer is armed for, if any.
    pub fn armed_deadline(&self) -> Option<u64> {
        Some(self.armed.load(Relaxed)).filter(|&d| d != u64::MAX)
    }

    /// Takes the connection off the list of those to report; a change after this puts it back.
    pub fn clear_unreported(&self) {
        self.unreported.store(false, Relaxed);
    }

    /// Pending segments dropped because the queue was full.
    pub fn pending_overflow(&self) -> u64 {
        self.gate.lock().overflow
    }
}

/// Ownership of a connection; processes what queued up meanwhile, wakes waiters and sends
/// looped-back frames when released.
pub(crate) struct Held<'a> {
    pub stack: &'a NetStack,
    pub cell: &'a Arc<ConnCell>,
    wake: Events,
    released: bool,
    /// Taken by the receive path for a segment of a receive batch.
    in_receive_batch: bool,
}

impl<'a> Held<'a> {
    /// Waits for ownership of `cell` (an application call or a timer).
    pub fn enter(stack: &'a NetStack, cell: &'a Arc<ConnCell>) -> Held<'a> {
        crate::preempt::disable();
        cell.own();
        Held {
            stack,
            cell,
            wake: Events::NONE,
            released: false,
            in_receive_batch: false,
        }
    }

    /// Ownership if nobody else has it, for a receive batch's end: an owner may be up this
    /// kthread's own stack (a transmission that drained the ingress ring), so it must not wait.
    pub fn try_enter(stack: &'a NetStack, cell: &'a Arc<ConnCell>) -> Option<Held<'a>> {
        crate::preempt::disable();
        if cell.try_own() {
            Some(Held {
                stack,
                cell,
                wake: Events::NONE,
                released: false,
                in_receive_batch: false,
            })
        } else {
            crate::preempt::enable();
            None
        }
    }

    /// Ownership already taken with [`ConnCell::own_or_queue`] (preemption is disabled by the
    /// receive path's caller or here); `in_receive_batch` for a segment of a receive batch.
    pub fn owned(stack: &'a NetStack, cell: &'a Arc<ConnCell>, in_receive_batch: bool) -> Held<'a> {
        crate::preempt::disable();
        Held {
            stack,
            cell,
            wake: Events::NONE,
            released: false,
            in_receive_batch,
        }
    }

    /// The owner's state.
    #[allow(clippy::mut_from_ref)]
    pub fn owned_state(&mut self) -> &mut Owned {
        // SAFETY: this `Held` is the owner (the gate's busy flag), so nobody else touches
        // `owned`; the borrow is tied to `&mut self`.
        unsafe { &mut *self.cell.owned.get() }
    }

    pub fn conn(&mut self) -> &mut Connection {
        &mut self.owned_state().conn
    }

    /// After every engine call: sends what the engine wants to send, re-arms the timer, and
    /// handles the handshake's end and the connection's close.
    pub fn after(&mut self, events: Events, now: u64) {
        self.wake |= events;
        let stack = self.stack;
        // The flag is only an optimisation: changes made while it is set are read by the
        // reporter, which takes ownership after clearing it.
        if !self.cell.unreported.load(Relaxed) && !self.cell.unreported.swap(true, Relaxed) {
            stack.tcp.note_unreported(self.cell);
        }
        let o = self.owned_state();
        o.tx_blocked = !stack.tcp.transmit(stack, o, now);
        if events.contains(Events::ESTABLISHED) && o.half_open {
            o.half_open = false;
            if let Some(l) = o.listener.take() {
                l.half_open_done();
                let cell = self.cell.clone();
                if !l.push_accepted(cell) {
                    stack.tcp.count_drop(TcpDrop::AcceptQueueFull);
                    let o = self.owned_state();
                    o.conn.abort(now);
                    o.tx_blocked = !stack.tcp.transmit(stack, o, now);
                }
            }
        }
        let o = self.owned_state();
        if o.conn.state() == State::Closed {
            self.closed();
        } else {
            self.arm(now);
        }
        let o = self.owned_state();
        let needs = o.in_table && o.conn.needs_prompt_acks();
        if needs != o.needs_prompt_acks {
            o.needs_prompt_acks = needs;
            stack.tcp.count_needing_prompt_acks(needs);
        }
    }

    fn closed(&mut self) {
        self.wake |= Events::CLOSED;
        let stack = self.stack;
        let cell = self.cell;
        let o = self.owned_state();
        if o.half_open {
            o.half_open = false;
            if let Some(l) = o.listener.take() {
                l.half_open_done();
            }
        }
        if o.in_table {
            o.in_table = false;
            stack.tcp.remove(cell, o.conn.stats());
        }
    }

    /// Arms a runtime timer for the engine's next deadline if none is armed early enough.
    fn arm(&mut self, now: u64) {
        let o = self.owned_state();
        let mut deadline = o.conn.next_deadline().unwrap_or(u64::MAX);
        if o.tx_blocked {
            deadline = deadline.min(now + TX_RETRY_NS);
        }
        if deadline >= self.cell.armed.load(Relaxed) {
            return;
        }
        let Some(k) = crate::sched::kthread::current_kthread() else {
            // Off the runtime (a stream moved to a foreign thread): the next call on the
            // connection or segment for it re-arms.
            return;
        };
        self.cell.armed.store(deadline, Relaxed);
        k.timers.insert(
            deadline,
            TimerAction::Tcp {
                conn: Arc::downgrade(self.cell),
                deadline,
            },
        );
        k.shared().timer_added(deadline);
    }

    /// Feeds one segment (already verified) to the engine. Returns false when the segment is
    /// a new SYN for a TIME-WAIT connection that was just retired: the caller gives it to the
    /// listener.
    pub fn segment(&mut self, bytes: &[u8], now: u64) -> bool {
        let Ok(seg) = TcpSegment::parse_unverified(bytes) else {
            return true;
        };
        let o = self.owned_state();
        if o.conn.state() == State::TimeWait && o.conn.time_wait_accepts_syn(&seg) {
            o.conn.abort(now);
            self.after(Events::NONE, now);
            return false;
        }
        if seg.flags().contains(corral_wire::TcpFlags::RST) {
            self.stack.tcp.count_reset_received();
        }
        let in_batch = self.in_receive_batch;
        let conn = self.conn();
        let ev = if in_batch {
            conn.on_segment_in_batch(now, &seg)
        } else {
            conn.on_segment(now, &seg)
        };
        self.after(ev, now);
        true
    }

    /// Before ownership is given up: an ACK owed to a receive batch is listed for the batch's
    /// end if this is the receive path, else sent now.
    fn settle_owed_ack(&mut self) {
        if !self.conn().ack_owed_by_batch() {
            return;
        }
        if self.in_receive_batch {
            if !self.cell.owes_batch_ack.swap(true, Relaxed) {
                self.stack.tcp.note_owes_batch_ack(self.cell);
            }
        } else {
            self.end_receive_batch(timer::now_ns());
        }
    }

    /// Sends the ACK a receive batch left owed, if any.
    pub fn end_receive_batch(&mut self, now: u64) {
        let conn = self.conn();
        if conn.ack_owed_by_batch() {
            conn.end_receive_batch();
            self.after(Events::NONE, now);
        }
    }

    /// Adds what the connection's stats grew by since they were last reported to `growth`,
    /// and takes them as reported. The caller cleared `unreported` before taking ownership.
    pub fn report_growth(&mut self, growth: &mut ConnStats) {
        let o = self.owned_state();
        let now = o.conn.stats();
        growth.add_growth(now, &o.reported);
        o.reported.clone_from(now);
    }

    /// For a uthread about to block: runs `enqueue` (which puts it on one of the connection's
    /// wait queues) and gives ownership up in one step, unless segments are pending or an ACK
    /// is owed to a receive batch (whose end may have found the connection owned by this
    /// call); then it returns false and the caller releases (processing them, sending the ACK)
    /// and checks again. Processing anything after enqueueing could wake the caller itself
    /// before it has switched away, which the scheduler does not allow on its own kthread. The
    /// caller must have made no engine call through this `Held` (nothing to send or wake).
    pub fn leave_enqueued(mut self, enqueue: impl FnOnce()) -> Result<(), Held<'a>> {
        debug_assert!(self.wake.is_empty(), "an engine call was made");
        if self.conn().ack_owed_by_batch() {
            return Err(self);
        }
        {
            let mut g = self.cell.gate.lock();
            if !g.pending.is_empty() {
                drop(g);
                return Err(self);
            }
            enqueue();
            g.busy = false;
        }
        self.released = true;
        crate::preempt::enable();
        Ok(())
    }

    /// Processes queued segments and gives ownership up; then wakes waiters and sends looped-back
    /// frames.
    pub fn release(mut self) {
        self.finish();
    }

    fn finish(&mut self) {
        if self.released {
            return;
        }
        self.released = true;
        let mut done = None;
        loop {
            // Still the owner here: `next_pending` gives ownership up when it finds nothing.
            self.settle_owed_ack();
            let Some(bytes) = self.cell.next_pending(done.take()) else {
                break;
            };
            let now = timer::now_ns();
            if !self.segment(&bytes, now) {
                let ends = self.cell.ends;
                self.stack.tcp.to_listener(self.stack, ends, &bytes, now);
            }
            done = Some(bytes);
        }
        let w = self.wake;
        let all = Events(Events::ERROR.0 | Events::CLOSED.0);
        if w.0 & (Events::READABLE.0 | all.0) != 0 && self.cell.readers.maybe_waiters() {
            self.cell.readers.wake_all();
        }
        let wmask = Events::WRITABLE.0 | Events::ESTABLISHED.0 | all.0;
        if w.0 & wmask != 0 && self.cell.writers.maybe_waiters() {
            self.cell.writers.wake_all();
        }
        crate::preempt::enable();
        self.stack.tcp.flush_loopback(self.stack);
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.finish();
    }
}

/// Whether a connection's timer entry for `deadline`, not due yet, is still needed: `false`
/// when the connection is gone, when an earlier entry covers it, or when the engine needs no
/// timer by `deadline` any more; in that last case the connection is armed again for what it
/// needs now (an entry on the calling kthread). Scheduler context.
pub(crate) fn timer_still_needed(conn: &Weak<ConnCell>, deadline: u64, now: u64) -> bool {
    let Some(cell) = conn.upgrade() else {
        return false;
    };
    let Ok(stack) = crate::net::current_stack() else {
        return true;
    };
    let mut held = Held::enter(&stack, &cell);
    if cell.armed.load(Relaxed) < deadline {
        // An earlier entry exists; when it fires, the connection is armed again.
        return false;
    }
    let o = held.owned_state();
    let mut needed = match o.conn.state() {
        State::Closed => u64::MAX,
        _ => o.conn.next_deadline().unwrap_or(u64::MAX),
    };
    if o.tx_blocked {
        needed = needed.min(now + TX_RETRY_NS);
    }
    if needed <= deadline {
        return true;
    }
    cell.armed.store(u64::MAX, Relaxed);
    held.arm(now);
    false
}

/// A connection's timer fired (armed for `deadline`).
pub(crate) fn timer_fired(conn: Weak<ConnCell>, deadline: u64) {
    let Some(cell) = conn.upgrade() else {
        return;
    };
    let Ok(stack) = crate::net::current_stack() else {
        return;
    };
    let mut held = Held::enter(&stack, &cell);
    if cell.armed.load(Relaxed) == deadline {
        cell.armed.store(u64::MAX, Relaxed);
    }
    let now = timer::now_ns();
    let o = held.owned_state();
    if o.conn.state() == State::Closed {
        return;
    }
    let due = o.conn.next_deadline().is_some_and(|d| d <= now);
    let ev = if due {
        o.conn.on_timer(now)
    } else {
        Events::NONE
    };
    held.after(ev, now);
}
