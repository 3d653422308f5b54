//! CUBIC (RFC 9438).

use super::{CcAlgorithm, CongestionControl};
use crate::Nanos;

/// Cubic's window arithmetic.
#[derive(Clone, Debug)]
pub struct Cubic {
    mss: u32,
    initial_window: u32,
    cwnd: u32,
    ssthresh: u32,
}

impl Cubic {
    pub fn new(mss: u32, initial_window: u32) -> Cubic {
        let _ = (mss, initial_window);
        todo!("CUBIC state")
    }
}

impl CongestionControl for Cubic {
    fn algorithm(&self) -> CcAlgorithm {
        CcAlgorithm::Cubic
    }
    fn cwnd(&self) -> u32 {
        self.cwnd
    }
    fn ssthresh(&self) -> u32 {
        self.ssthresh
    }
    fn on_ack(&mut self, _now: Nanos, _acked: u32, _flight: u32, _rtt: Option<Nanos>) {
        let _ = (self.mss, self.initial_window);
        todo!()
    }
    fn on_congestion_event(&mut self, _now: Nanos, _flight: u32) {
        todo!()
    }
    fn on_recovery_end(&mut self, _now: Nanos, _cwnd: u32) {
        todo!()
    }
    fn on_rto(&mut self, _now: Nanos, _flight: u32) {
        todo!()
    }
    fn on_idle_restart(&mut self, _now: Nanos) {
        todo!()
    }
}
