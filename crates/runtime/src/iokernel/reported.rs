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

/// The slot named `$name` in [`REPORTED_COUNTERS`], found at compile time.
macro_rules! slot {
    ($name:literal) => {
        const {
            match reported_index($name) {
                Some(i) => i,
                None => panic!(concat!($name, " is not in corral_abi::REPORTED_COUNTERS")),
            }
        }
    };
}

/// The runtime's end of the block.
pub(crate) struct Reporter {
    block: &'static ReportedCounters,
    /// When the block is next due (monotonic ns); claimed with a compare-exchange so that one
    /// kthread writes it per period.
    next_due: AtomicU64,
    /// The slot of each TCP drop reason (by `TcpDrop as usize`); past the block for a reason
    /// without one, which `store` ignores.
    tcp_drop_slots: [usize; corral_tcp::TcpDrop::COUNT],
}

impl Reporter {
    pub(crate) fn new(block: &'static ReportedCounters) -> Self {
        Reporter {
            block,
            next_due: AtomicU64::new(0),
            tcp_drop_slots: corral_tcp::TcpDrop::ALL.map(|r| drop_slot(r).unwrap_or(usize::MAX)),
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
        let kicks = rt
            .kthreads
            .iter()
            .filter_map(|k| k.iok.as_ref())
            .map(|k| k.kicks.load(Ordering::Relaxed))
            .sum();
        self.put(slot!("sched.kicks"), kicks);
        if let Some(net) = &rt.net {
            let s = net.totals();
            for (slot, value) in [
                (slot!("net.rx_packets"), s.rx_packets),
                (slot!("net.rx_bytes"), s.rx_bytes),
                (slot!("net.tx_packets"), s.tx_packets),
                (slot!("net.tx_bytes"), s.tx_bytes),
                (slot!("net.loopback_packets"), s.loopback_packets),
                (slot!("net.icmp_echo_requests"), s.icmp_echo_requests),
                (
                    slot!("net.icmp_echo_replies_sent"),
                    s.icmp_echo_replies_sent,
                ),
                (slot!("net.udp_rx_datagrams"), s.udp_rx_datagrams),
                (slot!("net.udp_tx_datagrams"), s.udp_tx_datagrams),
                (slot!("net.drops"), s.total_drops()),
            ] {
                self.put(slot, value);
            }
            let t = &s.tcp.counters;
            let c = &t.conns;
            for (slot, value) in [
                (slot!("tcp.segments_in"), c.segments_in),
                (slot!("tcp.segments_out"), c.segments_out),
                (slot!("tcp.bytes_in"), c.bytes_in),
                (slot!("tcp.bytes_out"), c.bytes_out),
                (slot!("tcp.rto_retransmits"), c.rto_retransmits),
                (slot!("tcp.fast_retransmits"), c.fast_retransmits),
                (slot!("tcp.syn_retransmits"), c.syn_retransmits),
                (slot!("tcp.timeouts"), c.timeouts),
                (slot!("tcp.recoveries"), c.recoveries),
                (slot!("tcp.dup_acks_in"), c.dup_acks_in),
                (slot!("tcp.ooo_segments"), c.ooo_segments),
                (slot!("tcp.duplicate_segments"), c.duplicate_segments),
                (slot!("tcp.delayed_acks"), c.delayed_acks),
                (slot!("tcp.challenge_acks"), c.challenge_acks),
                (slot!("tcp.out_of_window_acks"), c.out_of_window_acks),
                (slot!("tcp.acks_rate_limited"), c.acks_rate_limited),
                (slot!("tcp.zero_window_probes"), c.zero_window_probes),
                (slot!("tcp.keepalive_probes"), c.keepalive_probes),
                (slot!("tcp.active_opens"), t.active_opens),
                (slot!("tcp.passive_opens"), t.passive_opens),
                (slot!("tcp.failed_opens"), t.failed_opens),
                (slot!("tcp.resets_sent"), t.resets_sent),
                (slot!("tcp.resets_received"), t.resets_received),
                (slot!("tcp.syn_cookies_sent"), t.syn_cookies_sent),
                (slot!("tcp.syn_cookies_accepted"), t.syn_cookies_accepted),
                (slot!("tcp.established_now"), t.established_now),
                (slot!("tcp.table_peak"), t.table_peak),
            ] {
                self.put(slot, value);
            }
            for (reason, &slot) in self.tcp_drop_slots.iter().enumerate() {
                self.put(slot, c.drops[reason]);
            }
        }
        self.put(slot!("published_at_ns"), now);
    }

    fn put(&self, slot: usize, value: u64) {
        self.block.store(slot, value);
    }
}

/// The slot of a TCP drop reason: `tcp.drops.` and its name.
fn drop_slot(reason: corral_tcp::TcpDrop) -> Option<usize> {
    const PREFIX: &str = "tcp.drops.";
    REPORTED_COUNTERS.iter().position(|n| {
        n.strip_prefix(PREFIX)
            .is_some_and(|rest| rest == reason.as_str())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tcp_drop_reason_has_a_slot_under_its_own_name() {
        for reason in corral_tcp::TcpDrop::ALL {
            assert!(
                drop_slot(reason).is_some(),
                "corral_abi::REPORTED_COUNTERS lacks tcp.drops.{}",
                reason.as_str()
            );
        }
        let slots = REPORTED_COUNTERS
            .iter()
            .filter(|n| n.starts_with("tcp.drops."))
            .count();
        assert_eq!(
            slots,
            corral_tcp::TcpDrop::COUNT,
            "a slot for a reason TCP does not have"
        );
    }

    #[test]
    fn names_are_unique() {
        let mut names = REPORTED_COUNTERS.to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), REPORTED_COUNTERS.len());
    }
}
