//! Kicks: keeping a runtime's network work and timers going while its uthreads do not yield.
//!
//! A kthread processes its ingress ring and fires its timers only when it passes through its
//! scheduler. If every uthread of a runtime spins without yielding, received packets (TCP
//! segments that want an ACK) and due timers (retransmissions) would wait for as long as they
//! spin. The allocator's answer to an ingress item that waited a whole interval is another
//! core; when there is none, or the stall lasts, iokerneld sends the kthread the preemption
//! signal with no `Preempt` behind it: a *kick*. The runtime's handler enters its scheduler,
//! which drains the ring (processing the packets), fires the due timers, queues the uthreads
//! they woke ahead of the interrupted one, and goes on (`corral`'s `sched::kicked`).
//!
//! A kthread holding a core is checked at most once per [`KICK_AFTER_NS`]: it is kicked if an
//! ingress item queued at the previous check is still unread, if the earliest timer deadline
//! it publishes in its region (`KthreadView::timer_deadline_ns`) has been overdue for a whole
//! period, or if a uthread that was runnable at the previous check still waits on its run
//! queue (a uthread a packet or a timer woke, stuck behind one that spins: without this it
//! would wait for as long as the spinner runs, since its wake-up left nothing on the ring). That
//! last rule is time slicing at the period's granularity, only for a kthread whose queue has
//! not moved for a whole period; the allocator, which sees the same congestion first, grants
//! another core instead whenever it has one. Work can also be stranded on a kthread that has no core (a timer it kept while
//! parking because no other kthread was running yet, a frame that reached its ring just before
//! it parked), which only a running kthread's scheduler picks up: the runtime's first kthread
//! holding a core is checked for that work as well, and the runtime's handler fires every
//! kthread's due timers and drains parked kthreads' rings. So a kthread gets at most one kick per period, and none at all while its uthreads
//! yield or block (its scheduler then keeps the ring and the timers current). What the runtime
//! writes is untrusted: a lying consumer position or deadline earns its own kthreads at most
//! that one signal per period, and nobody else anything.

use corral_policy::{QueueSnapshot, RingPositions};

/// How long a kthread may leave an ingress item unread, or a timer overdue, before it is
/// kicked; also the least time between two kicks of one kthread. A kick costs the interrupted
/// uthread a signal and two context switches (a few microseconds), so a spinning runtime that
/// keeps receiving loses a few percent of its CPU at most; a delayed ACK (0.5 ms) or an RTO
/// (5 ms at least) of the runtime's TCP leaves within about twice this of its time.
pub(super) const KICK_AFTER_NS: u64 = 250_000;

/// Why a kthread is kicked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stall {
    /// An ingress item (a packet, a transmit completion) stayed unread a whole period.
    Ingress,
    /// Its earliest timer has been overdue a whole period.
    Timer,
    /// A runnable uthread waited a whole period on its run queue while the running one did
    /// not yield (a uthread a packet or timer woke, behind one that spins).
    RunQueue,
}

/// One kthread's watch, kept by iokerneld.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct NetWatch {
    /// Whether the kthread held a core at the previous check (a watch starts afresh when it
    /// gets one, so that items left from before it parked do not count).
    watching: bool,
    /// When the kthread is next checked.
    next_check: u64,
    /// Its ingress ring at the previous check.
    ingress_last: RingPositions,
    /// Its run queue at the previous check.
    runq_last: RingPositions,
}

impl NetWatch {
    /// The kthread holds no core (or is giving it back): nothing to watch.
    pub(super) fn stop(&mut self) {
        self.watching = false;
    }

    /// Whether the kthread, which holds a core, has stalled: `ingress` is its ingress ring now
    /// (iokerneld's own producer position, the runtime's untrusted consumer position), `timer`
    /// the earliest deadline it is to fire (its own, or one stranded on a parked kthread), and
    /// `rx_stranded` whether frames wait unread on a parked kthread's ring. Checks at most once
    /// per [`KICK_AFTER_NS`].
    pub(super) fn check(
        &mut self,
        queues: QueueSnapshot,
        timer: Option<u64>,
        rx_stranded: bool,
        now: u64,
    ) -> Option<Stall> {
        if !self.watching {
            *self = NetWatch {
                watching: true,
                next_check: now.saturating_add(KICK_AFTER_NS),
                ingress_last: queues.ingress,
                runq_last: queues.run_queue,
            };
            return None;
        }
        if now < self.next_check {
            return None;
        }
        let ingress_waited = queues.ingress.has_waited_since(self.ingress_last);
        let runq_waited = queues.run_queue.has_waited_since(self.runq_last);
        self.ingress_last = queues.ingress;
        self.runq_last = queues.run_queue;
        self.next_check = now.saturating_add(KICK_AFTER_NS);
        if ingress_waited || rx_stranded {
            Some(Stall::Ingress)
        } else if timer.is_some_and(|t| t.saturating_add(KICK_AFTER_NS) <= now) {
            Some(Stall::Timer)
        } else if runq_waited {
            Some(Stall::RunQueue)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(produced: u32, consumed: u32) -> RingPositions {
        RingPositions { produced, consumed }
    }

    /// An ingress ring at these positions and an empty run queue.
    fn q(produced: u32, consumed: u32) -> QueueSnapshot {
        QueueSnapshot {
            run_queue: ring(0, 0),
            ingress: ring(produced, consumed),
        }
    }

    #[test]
    fn an_item_unread_for_a_whole_period_is_a_stall() {
        let mut w = NetWatch::default();
        assert_eq!(
            w.check(q(1, 0), None, false, 1_000),
            None,
            "the first look only starts"
        );
        assert_eq!(
            w.check(q(1, 0), None, false, 1_000 + KICK_AFTER_NS - 1),
            None
        );
        assert_eq!(
            w.check(q(2, 0), None, false, 1_000 + KICK_AFTER_NS),
            Some(Stall::Ingress)
        );
        // Checked again only a period later, and the item queued at the kick is read by then.
        assert_eq!(
            w.check(q(2, 0), None, false, 1_000 + KICK_AFTER_NS + 1),
            None
        );
        assert_eq!(
            w.check(q(3, 2), None, false, 1_000 + 2 * KICK_AFTER_NS),
            None
        );
    }

    #[test]
    fn a_kthread_that_keeps_reading_is_never_kicked() {
        let mut w = NetWatch::default();
        let mut now = 0;
        for i in 0..100u32 {
            // Packets keep arriving, and each is read before the next check.
            assert_eq!(w.check(q(i * 10 + 5, i * 10), None, false, now), None);
            now += KICK_AFTER_NS;
        }
    }

    #[test]
    fn an_overdue_timer_is_a_stall_once_per_period() {
        let mut w = NetWatch::default();
        let t = 10 * KICK_AFTER_NS;
        assert_eq!(w.check(q(0, 0), Some(t), false, 0), None);
        assert_eq!(
            w.check(q(0, 0), Some(t), false, t),
            None,
            "due, not overdue"
        );
        let late = t + KICK_AFTER_NS;
        assert_eq!(w.check(q(0, 0), Some(t), false, late), Some(Stall::Timer));
        assert_eq!(w.check(q(0, 0), Some(t), false, late + 1), None);
        assert_eq!(
            w.check(q(0, 0), Some(t), false, late + KICK_AFTER_NS),
            Some(Stall::Timer)
        );
    }

    #[test]
    fn lies_cost_at_most_one_kick_per_period() {
        let mut w = NetWatch::default();
        let mut kicks = 0;
        let mut now = 0;
        for i in 0..1000u32 {
            // A consumer position far behind, and a deadline at 1 ns.
            if w.check(q(i, u32::MAX / 2), Some(1), false, now).is_some() {
                kicks += 1;
            }
            now += KICK_AFTER_NS / 10;
        }
        assert!(kicks <= 100 + 1, "{kicks} kicks in 100 periods");
    }

    #[test]
    fn stranded_frames_are_a_stall_once_per_period() {
        let mut w = NetWatch::default();
        assert_eq!(w.check(q(0, 0), None, true, 0), None);
        assert_eq!(
            w.check(q(0, 0), None, true, KICK_AFTER_NS),
            Some(Stall::Ingress)
        );
        assert_eq!(w.check(q(0, 0), None, true, KICK_AFTER_NS + 1), None);
    }

    #[test]
    fn a_uthread_kept_waiting_behind_one_that_spins_is_a_stall() {
        let mut w = NetWatch::default();
        let queues = |rq: RingPositions| QueueSnapshot {
            run_queue: rq,
            ingress: ring(0, 0),
        };
        assert_eq!(w.check(queues(ring(3, 1)), None, false, 0), None);
        assert_eq!(
            w.check(queues(ring(3, 1)), None, false, KICK_AFTER_NS),
            Some(Stall::RunQueue)
        );
        // The head moved past what waited: uthreads yield, nothing to do.
        assert_eq!(
            w.check(queues(ring(5, 3)), None, false, 2 * KICK_AFTER_NS),
            None
        );
    }

    #[test]
    fn a_new_watch_forgets_what_was_left_before_the_park() {
        let mut w = NetWatch::default();
        w.check(q(5, 0), None, false, 0);
        w.stop();
        assert_eq!(w.check(q(5, 0), None, false, 10 * KICK_AFTER_NS), None);
    }
}
