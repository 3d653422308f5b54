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
}

impl NewReno {
    pub fn new(mss: u32, initial_window: u32) -> NewReno {
        let _ = (mss, initial_window);
        todo!("engine: RFC 5681 state")
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
