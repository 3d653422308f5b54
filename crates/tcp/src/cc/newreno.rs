//! RFC 5681 slow start and congestion avoidance; recovery follows RFC 6582 in the connection.

use super::{CcAlgorithm, CongestionControl};
use crate::Nanos;

/// NewReno's window arithmetic.
#[derive(Clone, Debug)]
pub struct NewReno {
    mss: u32,
    initial_window: u32,
    cwnd: u32,
    ssthresh: u32,
    /// Bytes acknowledged in congestion avoidance since cwnd last grew (RFC 5681 §3.1, the
    /// byte-counting variant).
    acked_in_ca: u32,
}

impl NewReno {
    pub fn new(mss: u32, initial_window: u32) -> NewReno {
        let mss = mss.max(1);
        NewReno {
            mss,
            initial_window: initial_window.max(mss),
            cwnd: initial_window.max(mss),
            // RFC 5681 §3.1: arbitrarily high at first.
            ssthresh: u32::MAX,
            acked_in_ca: 0,
        }
    }

    /// RFC 5681 eq. 4.
    fn halve(&self, flight: u32) -> u32 {
        (flight / 2).max(2 * self.mss)
    }
}

impl CongestionControl for NewReno {
    fn algorithm(&self) -> CcAlgorithm {
        CcAlgorithm::NewReno
    }
    fn cwnd(&self) -> u32 {
        self.cwnd
    }
    fn ssthresh(&self) -> u32 {
        self.ssthresh
    }
    fn on_ack(&mut self, _now: Nanos, acked: u32, flight: u32, _rtt: Option<Nanos>) {
        // A window the sender does not fill says nothing about the path (RFC 7661's idea, in
        // its simplest form): do not grow it.
        if flight.saturating_add(self.mss) < self.cwnd / 2 {
            return;
        }
        if self.cwnd < self.ssthresh {
            // Appropriate byte counting with L = 1 SMSS (RFC 5681 §3.1, RFC 3465).
            self.cwnd = self.cwnd.saturating_add(acked.min(self.mss));
        } else {
            self.acked_in_ca = self.acked_in_ca.saturating_add(acked);
            if self.acked_in_ca >= self.cwnd {
                self.acked_in_ca -= self.cwnd;
                self.cwnd = self.cwnd.saturating_add(self.mss);
            }
        }
    }
    fn on_congestion_event(&mut self, _now: Nanos, flight: u32) {
        self.ssthresh = self.halve(flight);
        self.cwnd = self.ssthresh;
        self.acked_in_ca = 0;
    }
    fn on_recovery_end(&mut self, _now: Nanos, cwnd: u32) {
        self.cwnd = cwnd.max(self.mss);
        self.acked_in_ca = 0;
    }
    fn on_rto(&mut self, _now: Nanos, flight: u32) {
        self.ssthresh = self.halve(flight);
        self.cwnd = self.mss;
        self.acked_in_ca = 0;
    }
    fn on_idle_restart(&mut self, _now: Nanos) {
        self.cwnd = self.cwnd.min(self.initial_window);
        self.acked_in_ca = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_start_then_avoidance_then_loss() {
        let mut cc = NewReno::new(1000, 10_000);
        assert_eq!((cc.cwnd(), cc.ssthresh()), (10_000, u32::MAX));
        cc.on_ack(0, 3000, 10_000, None);
        assert_eq!(cc.cwnd(), 11_000, "one SMSS per ACK at most in slow start");
        cc.on_congestion_event(0, 11_000);
        assert_eq!((cc.cwnd(), cc.ssthresh()), (5500, 5500));
        for _ in 0..5 {
            cc.on_ack(0, 1000, 5500, None);
        }
        assert_eq!(
            cc.cwnd(),
            5500,
            "congestion avoidance grows once per window"
        );
        cc.on_ack(0, 1000, 5500, None);
        assert_eq!(cc.cwnd(), 6500);
        cc.on_rto(0, 6000);
        assert_eq!((cc.cwnd(), cc.ssthresh()), (1000, 3000));
        cc.on_congestion_event(0, 1000);
        assert_eq!(cc.ssthresh(), 2000, "never below two segments");
        cc.on_recovery_end(0, 2500);
        assert_eq!(cc.cwnd(), 2500);
    }

    #[test]
    fn an_idle_or_application_limited_sender_does_not_grow() {
        let mut cc = NewReno::new(1000, 10_000);
        cc.on_ack(0, 1000, 1000, None);
        assert_eq!(cc.cwnd(), 10_000);
        cc.on_ack(0, 1000, 40_000, None);
        cc.on_ack(0, 1000, 40_000, None);
        assert_eq!(cc.cwnd(), 12_000);
        cc.on_idle_restart(0);
        assert_eq!(cc.cwnd(), 10_000);
    }
}
