//! The retransmission timeout (RFC 6298) with exponential backoff and configurable bounds.

use crate::Nanos;

/// Clock granularity G of RFC 6298 §2: the timestamp clock ticks in microseconds.
const GRANULARITY: Nanos = 1_000;
/// Backoff beyond this many doublings is capped by `max` anyway.
const MAX_BACKOFF: u32 = 40;

#[derive(Clone, Debug)]
pub(super) struct RttEstimator {
    srtt: Nanos,
    rttvar: Nanos,
    rto: Nanos,
    backoff: u32,
    has_sample: bool,
    min: Nanos,
    max: Nanos,
}

impl RttEstimator {
    pub(super) fn new(initial: Nanos, min: Nanos, max: Nanos) -> RttEstimator {
        RttEstimator {
            srtt: 0,
            rttvar: 0,
            rto: initial,
            backoff: 0,
            has_sample: false,
            min,
            max,
        }
    }

    /// RFC 6298 §2.2 and §2.3.
    pub(super) fn sample(&mut self, r: Nanos) {
        if self.has_sample {
            let delta = self.srtt.abs_diff(r);
            self.rttvar = (3 * self.rttvar + delta) / 4;
            self.srtt = (7 * self.srtt + r) / 8;
        } else {
            self.srtt = r;
            self.rttvar = r / 2;
            self.has_sample = true;
        }
        self.rto = (self.srtt + GRANULARITY.max(4 * self.rttvar)).clamp(self.min, self.max);
    }

    /// RFC 6298 §5.7: an RTO below `floor` becomes `floor` (capped by the ceiling). Only the
    /// RTO changes: SRTT and RTTVAR, if measured, stay, and the next sample computes the RTO
    /// from them again (§2.3), as a first sample would from nothing (§2.2).
    pub(super) fn raise_to(&mut self, floor: Nanos) {
        if self.rto < floor {
            self.rto = floor.min(self.max);
        }
    }

    /// The timeout to arm now, backoff included.
    #[inline]
    pub(super) fn rto(&self) -> Nanos {
        let factor = 1u64 << self.backoff.min(MAX_BACKOFF);
        self.rto.saturating_mul(factor).min(self.max)
    }

    /// RFC 6298 §5.5.
    #[inline]
    pub(super) fn back_off(&mut self) {
        self.backoff = (self.backoff + 1).min(MAX_BACKOFF);
    }

    #[inline]
    pub(super) fn reset_backoff(&mut self) {
        self.backoff = 0;
    }

    pub(super) fn srtt(&self) -> Option<Nanos> {
        self.has_sample.then_some(self.srtt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc6298_arithmetic_and_bounds() {
        let mut e = RttEstimator::new(1_000_000, 200_000, 10_000_000);
        assert_eq!(e.rto(), 1_000_000);
        e.sample(100_000);
        // srtt 100 us, rttvar 50 us: 300 us.
        assert_eq!(e.rto(), 300_000);
        e.sample(100_000);
        // rttvar 37.5 us: 250 us.
        assert_eq!(e.rto(), 250_000);
        let mut fast = RttEstimator::new(1_000_000, 200_000, 10_000_000);
        fast.sample(1_000);
        assert_eq!(fast.rto(), 200_000, "floored at rto_min");
        e.back_off();
        assert_eq!(e.rto(), 500_000);
        for _ in 0..100 {
            e.back_off();
        }
        assert_eq!(e.rto(), 10_000_000, "capped at rto_max");
        e.reset_backoff();
        assert_eq!(e.rto(), 250_000);
    }
}
