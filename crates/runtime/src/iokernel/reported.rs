//! The counters a runtime reports to iokerneld's statistics (`iokerneld stats`).
//!
//! iokerneld cannot call into the runtime, so the runtime copies its network counters into a
//! fixed block of its region (`corral_abi::ReportedCounters`, in kthread 0's area) now and
//! then: whichever kthread passes through its scheduler first once [`REPORT_EVERY_NS`] has
//! passed, and the last kthread to park, so that a runtime gone quiet leaves its final figures.
//! Never per packet. iokerneld treats the numbers as the runtime's say-so and decides nothing
//! by them.

use core::sync::atomic::{AtomicU64, Ordering};

use corral_abi::{REPORTED_COUNTERS, ReportedCounters, reported_index};

use crate::sched::Shared;

/// How often the block is refreshed while the runtime runs.
pub(crate) const REPORT_EVERY_NS: u64 = 10_000_000;

/// The runtime's end of the block.
pub(crate) struct Reporter {
    block: &'static ReportedCounters,
    /// When the block is next due (monotonic ns); claimed with a compare-exchange so that one
    /// kthread writes it per period.
    next_due: AtomicU64,
}

impl Reporter {
    pub(crate) fn new(block: &'static ReportedCounters) -> Self {
        Reporter {
            block,
            next_due: AtomicU64::new(0),
        }
    }

    /// Refreshes the block if it is due (or `force`). Scheduler context: cheap when not due
    /// (one load and a compare).
    pub(crate) fn maybe_publish(&self, rt: &Shared, now: u64, force: bool) {
        let due = self.next_due.load(Ordering::Relaxed);
        if !force && now < due {
            return;
        }
        if self
            .next_due
            .compare_exchange(
                due,
                now + REPORT_EVERY_NS,
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .is_err()
        {
            return; // Another kthread is writing it.
        }
        self.publish(rt, now);
    }

    fn publish(&self, rt: &Shared, now: u64) {
        let put = |name: &str, value: u64| {
            if let Some(i) = reported_index(name) {
                self.block.store(i, value);
            } else {
                debug_assert!(false, "{name} is not in corral_abi::REPORTED_COUNTERS");
            }
        };
        let kicks = rt
            .kthreads
            .iter()
            .filter_map(|k| k.iok.as_ref())
            .map(|k| k.net_kicks.load(Ordering::Relaxed))
            .sum();
        put("sched.net_kicks", kicks);
        if let Some(net) = &rt.net {
            let s = net.stats();
            put("net.rx_packets", s.rx_packets);
            put("net.rx_bytes", s.rx_bytes);
            put("net.tx_packets", s.tx_packets);
            put("net.tx_bytes", s.tx_bytes);
            put("net.loopback_packets", s.loopback_packets);
            put("net.icmp_echo_requests", s.icmp_echo_requests);
            put("net.icmp_echo_replies_sent", s.icmp_echo_replies_sent);
            put("net.udp_rx_datagrams", s.udp_rx_datagrams);
            put("net.udp_tx_datagrams", s.udp_tx_datagrams);
            put("net.drops", s.total_drops());
        }
        put(REPORTED_COUNTERS[0], now);
    }
}
