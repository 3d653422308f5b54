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
//! ingress item queued at the previous check is still unread, or if the earliest timer deadline
//! it publishes in its region (`KthreadView::timer_deadline_ns`) has been overdue for a whole
//! period. So a kthread gets at most one kick per period, and none at all while its uthreads
//! yield or block (its scheduler then keeps the ring and the timers current). What the runtime
//! writes is untrusted: a lying consumer position or deadline earns its own kthreads at most
//! that one signal per period, and nobody else anything.

use corral_policy::RingPositions;

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
}

impl NetWatch {
    /// The kthread holds no core (or is giving it back): nothing to watch.
    pub(super) fn stop(&mut self) {
        self.watching = false;
    }

    /// Whether the kthread, which holds a core, has stalled: `ingress` is its ingress ring now
    /// (iokerneld's own producer position, the runtime's untrusted consumer position), `timer`
    /// the deadline it publishes. Checks at most once per [`KICK_AFTER_NS`].
    pub(super) fn check(
        &mut self,
        ingress: RingPositions,
        timer: Option<u64>,
        now: u64,
    ) -> Option<Stall> {
        if !self.watching {
            *self = NetWatch {
                watching: true,
                next_check: now.saturating_add(KICK_AFTER_NS),
                ingress_last: ingress,
            };
            return None;
        }
        if now < self.next_check {
            return None;
        }
        let waited = ingress.has_waited_since(self.ingress_last);
        self.ingress_last = ingress;
        self.next_check = now.saturating_add(KICK_AFTER_NS);
        if waited {
            Some(Stall::Ingress)
        } else if timer.is_some_and(|t| t.saturating_add(KICK_AFTER_NS) <= now) {
            Some(Stall::Timer)
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

    #[test]
    fn an_item_unread_for_a_whole_period_is_a_stall() {
        let mut w = NetWatch::default();
        assert_eq!(
            w.check(ring(1, 0), None, 1_000),
            None,
            "the first look only starts"
        );
        assert_eq!(w.check(ring(1, 0), None, 1_000 + KICK_AFTER_NS - 1), None);
        assert_eq!(
            w.check(ring(2, 0), None, 1_000 + KICK_AFTER_NS),
            Some(Stall::Ingress)
        );
        // Checked again only a period later, and the item queued at the kick is read by then.
        assert_eq!(w.check(ring(2, 0), None, 1_000 + KICK_AFTER_NS + 1), None);
        assert_eq!(w.check(ring(3, 2), None, 1_000 + 2 * KICK_AFTER_NS), None);
    }

    #[test]
    fn a_kthread_that_keeps_reading_is_never_kicked() {
        let mut w = NetWatch::default();
        let mut now = 0;
        for i in 0..100u32 {
            // Packets keep arriving, and each is read before the next check.
            assert_eq!(w.check(ring(i * 10 + 5, i * 10), None, now), None);
            now += KICK_AFTER_NS;
        }
    }

    #[test]
    fn an_overdue_timer_is_a_stall_once_per_period() {
        let mut w = NetWatch::default();
        let t = 10 * KICK_AFTER_NS;
        assert_eq!(w.check(ring(0, 0), Some(t), 0), None);
        assert_eq!(w.check(ring(0, 0), Some(t), t), None, "due, not overdue");
        let late = t + KICK_AFTER_NS;
        assert_eq!(w.check(ring(0, 0), Some(t), late), Some(Stall::Timer));
        assert_eq!(w.check(ring(0, 0), Some(t), late + 1), None);
        assert_eq!(
            w.check(ring(0, 0), Some(t), late + KICK_AFTER_NS),
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
            if w.check(ring(i, u32::MAX / 2), Some(1), now).is_some() {
                kicks += 1;
            }
            now += KICK_AFTER_NS / 10;
        }
        assert!(kicks <= 100 + 1, "{kicks} kicks in 100 periods");
    }

    #[test]
    fn a_new_watch_forgets_what_was_left_before_the_park() {
        let mut w = NetWatch::default();
        w.check(ring(5, 0), None, 0);
        w.stop();
        assert_eq!(w.check(ring(5, 0), None, 10 * KICK_AFTER_NS), None);
    }
}
