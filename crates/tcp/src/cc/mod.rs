//! Pluggable congestion control.
//!
//! An algorithm owns `cwnd` and `ssthresh` and decides how they grow and shrink. The connection
//! owns loss detection and recovery (RFC 5681 §3.2, RFC 6582): it tells the algorithm when new
//! data is acknowledged outside recovery, when a loss starts a recovery, when recovery ends and
//! when the retransmission timer expires. Window inflation during fast recovery is the
//! connection's, added on top of [`CongestionControl::cwnd`].

mod cubic;
mod newreno;

pub use cubic::Cubic;
pub use newreno::NewReno;

use crate::Nanos;

/// Which algorithm a connection uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CcAlgorithm {
    /// RFC 5681 slow start and congestion avoidance with RFC 6582 recovery.
    #[default]
    NewReno,
    /// RFC 9438.
    Cubic,
}

impl CcAlgorithm {
    /// The name used in configs and stats.
    pub const fn as_str(self) -> &'static str {
        match self {
            CcAlgorithm::NewReno => "newreno",
            CcAlgorithm::Cubic => "cubic",
        }
    }

    /// Parses a name from a config.
    pub fn from_name(name: &str) -> Option<CcAlgorithm> {
        match name {
            "newreno" | "reno" => Some(CcAlgorithm::NewReno),
            "cubic" => Some(CcAlgorithm::Cubic),
            _ => None,
        }
    }

    /// A fresh instance for a connection whose sender MSS is `mss` bytes and initial window
    /// `initial_window` bytes.
    pub fn build(self, mss: u32, initial_window: u32) -> Box<dyn CongestionControl> {
        match self {
            CcAlgorithm::NewReno => Box::new(NewReno::new(mss, initial_window)),
            CcAlgorithm::Cubic => Box::new(Cubic::new(mss, initial_window)),
        }
    }
}

/// A congestion control algorithm. All sizes in bytes.
pub trait CongestionControl: Send + core::fmt::Debug {
    /// Which algorithm this is.
    fn algorithm(&self) -> CcAlgorithm;
    /// The congestion window.
    fn cwnd(&self) -> u32;
    /// The slow-start threshold.
    fn ssthresh(&self) -> u32;
    /// `acked` new bytes were acknowledged outside recovery, with `flight` bytes outstanding
    /// before this ACK; `rtt` is the sample this ACK gave, if any.
    fn on_ack(&mut self, now: Nanos, acked: u32, flight: u32, rtt: Option<Nanos>);
    /// A loss was detected (three duplicate ACKs or SACK) with `flight` bytes outstanding:
    /// reduce (RFC 5681 eq. 4 for Reno; β for CUBIC). `cwnd` afterwards is the window the
    /// connection uses when recovery ends.
    fn on_congestion_event(&mut self, now: Nanos, flight: u32);
    /// Fast recovery ended: the connection sets `cwnd` to `min(ssthresh, flight + mss)` (RFC
    /// 6582 §3.2 step 3) by calling this with that value.
    fn on_recovery_end(&mut self, now: Nanos, cwnd: u32);
    /// The retransmission timer expired with `flight` bytes outstanding (RFC 5681 eq. 4, then
    /// cwnd = 1 segment).
    fn on_rto(&mut self, now: Nanos, flight: u32);
    /// The connection was idle longer than an RTO (RFC 5681 §4.1): restart from the initial
    /// window.
    fn on_idle_restart(&mut self, now: Nanos);
}
