//! CUBIC (RFC 9438).
//!
//! After a congestion event the window follows `W_cubic(t) = C (t - K)^3 + W_max` (RFC 9438
//! §4.2), where `t` is the time since the congestion-avoidance epoch began and `K` the time the
//! curve takes back to `W_max`, the window before the last reduction. Each ACK moves `cwnd` a
//! step towards `W_cubic(t + RTT)` (§4.4, §4.5), unless the Reno-friendly estimate `W_est`
//! (§4.3) is ahead, in which case `cwnd` follows `W_est`. Windows are computed in segments as
//! floating point, as the RFC writes them, and kept in bytes.

use super::{CcAlgorithm, CongestionControl};
use crate::Nanos;

/// RFC 9438 §5: the scaling constant, in segments per second cubed.
const C: f64 = 0.4;
/// RFC 9438 §4.6: the multiplicative decrease factor.
const BETA: f64 = 0.7;
/// RFC 9438 §4.3: the Reno-friendly additive increase, `3 (1 - β) / (1 + β)`.
const ALPHA: f64 = 3.0 * (1.0 - BETA) / (1.0 + BETA);
const NANOS_PER_SEC: f64 = 1e9;

/// Cubic's window arithmetic.
#[derive(Clone, Debug)]
pub struct Cubic {
    mss: u32,
    initial_window: u32,
    cwnd: u32,
    ssthresh: u32,
    /// Growth below one byte, carried to the next ACK.
    carry: f64,
    /// The window before the last reduction, in segments (fast convergence may lower it).
    w_max: f64,
    /// The window when ssthresh was last set, in segments (§4.3's switch of α to 1).
    cwnd_prior: f64,
    /// Start of the current congestion-avoidance epoch, `None` until the next ACK in it.
    epoch_start: Option<Nanos>,
    /// The current epoch's K, in seconds, and the window the curve returns to.
    k: f64,
    origin: f64,
    /// The Reno-friendly estimate, in segments.
    w_est: f64,
    /// Smoothed RTT from the samples this algorithm was given.
    srtt: Option<Nanos>,
    /// The next epoch follows a retransmission timeout (§4.8: K = 0, W_max = its first cwnd).
    after_timeout: bool,
}

impl Cubic {
    pub fn new(mss: u32, initial_window: u32) -> Cubic {
        let mss = mss.max(1);
        let initial_window = initial_window.max(mss);
        Cubic {
            mss,
            initial_window,
            cwnd: initial_window,
            ssthresh: u32::MAX,
            carry: 0.0,
            w_max: 0.0,
            cwnd_prior: 0.0,
            epoch_start: None,
            k: 0.0,
            origin: 0.0,
            w_est: 0.0,
            srtt: None,
            after_timeout: false,
        }
    }

    fn segments(&self, bytes: u32) -> f64 {
        f64::from(bytes) / f64::from(self.mss)
    }

    /// RFC 9438 eq. 1, in segments, `t` seconds into the epoch.
    fn w_cubic(&self, t: f64) -> f64 {
        C * (t - self.k).powi(3) + self.origin
    }

    /// RFC 9438 eq. 2 with `cwnd_epoch` the window the epoch starts from.
    fn start_epoch(&mut self, now: Nanos) {
        let cwnd_epoch = self.segments(self.cwnd);
        self.epoch_start = Some(now);
        self.w_est = cwnd_epoch;
        if self.after_timeout || self.w_max <= cwnd_epoch {
            self.k = 0.0;
            self.origin = cwnd_epoch;
        } else {
            self.k = ((self.w_max - cwnd_epoch) / C).cbrt();
            self.origin = self.w_max;
        }
        self.after_timeout = false;
        self.carry = 0.0;
    }

    /// Sets ssthresh and W_max on a loss or timeout (§4.6, §4.7).
    fn reduce(&mut self, flight: u32) {
        let cwnd = self.segments(self.cwnd);
        self.w_max = if cwnd < self.w_max {
            cwnd * (1.0 + BETA) / 2.0
        } else {
            cwnd
        };
        self.cwnd_prior = cwnd;
        self.ssthresh = ((f64::from(flight) * BETA) as u32).max(2 * self.mss);
        self.epoch_start = None;
        self.carry = 0.0;
    }

    fn grow(&mut self, bytes: f64) {
        let total = bytes + self.carry;
        let whole = total.floor();
        self.carry = total - whole;
        self.cwnd = self.cwnd.saturating_add(whole as u32);
    }

    /// Congestion avoidance (§4.2–§4.5) for `acked` bytes.
    fn avoid(&mut self, now: Nanos, acked: u32) {
        if self.epoch_start.is_none() {
            self.start_epoch(now);
        }
        let start = self.epoch_start.unwrap_or(now);
        let t = now.saturating_sub(start) as f64 / NANOS_PER_SEC;
        let rtt = self.srtt.unwrap_or(0) as f64 / NANOS_PER_SEC;
        let cwnd = self.segments(self.cwnd);
        let acked_segments = self.segments(acked);

        let alpha = if self.w_est >= self.cwnd_prior {
            1.0
        } else {
            ALPHA
        };
        self.w_est += alpha * acked_segments / cwnd;

        if self.w_cubic(t) < self.w_est {
            // The Reno-friendly region.
            let est = self.w_est * f64::from(self.mss);
            if est > f64::from(self.cwnd) {
                self.carry = 0.0;
                self.cwnd = est.min(f64::from(u32::MAX)) as u32;
            }
            return;
        }
        let target = self.w_cubic(t + rtt).clamp(cwnd, 1.5 * cwnd);
        self.grow((target - cwnd) / cwnd * f64::from(acked));
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
    fn on_ack(&mut self, now: Nanos, acked: u32, flight: u32, rtt: Option<Nanos>) {
        if let Some(sample) = rtt {
            self.srtt = Some(match self.srtt {
                None => sample,
                Some(s) => s - s / 8 + sample / 8,
            });
        }
        // A window the sender does not fill says nothing about the path (RFC 9438 §5.8):
        // neither grow it nor let the epoch's clock run ahead of it.
        if flight.saturating_add(self.mss) < self.cwnd / 2 {
            return;
        }
        if self.cwnd < self.ssthresh {
            // RFC 5681 slow start with appropriate byte counting, L = 1 SMSS.
            self.cwnd = self.cwnd.saturating_add(acked.min(self.mss));
            return;
        }
        self.avoid(now, acked);
    }
    fn on_congestion_event(&mut self, _now: Nanos, flight: u32) {
        self.reduce(flight);
        self.cwnd = self.ssthresh;
    }
    fn on_recovery_end(&mut self, _now: Nanos, cwnd: u32) {
        self.cwnd = cwnd.max(self.mss);
        self.epoch_start = None;
    }
    fn on_rto(&mut self, _now: Nanos, flight: u32) {
        self.reduce(flight);
        self.cwnd = self.mss;
        self.after_timeout = true;
    }
    fn on_idle_restart(&mut self, _now: Nanos) {
        self.cwnd = self.cwnd.min(self.initial_window);
        self.epoch_start = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: u32 = 1000;
    const MS: Nanos = 1_000_000;
    const S: Nanos = 1_000_000_000;

    fn close(a: f64, b: f64, tolerance: f64) -> bool {
        (a - b).abs() <= tolerance
    }

    /// A CUBIC sender that reached 100 segments and then saw a loss.
    fn after_loss_at_100() -> Cubic {
        let mut cc = Cubic::new(MSS, 100 * MSS);
        cc.on_congestion_event(0, 100 * MSS);
        cc
    }

    /// Acknowledges one whole window, one segment per ACK, at time `now` with RTT `rtt`.
    fn ack_window(cc: &mut Cubic, now: Nanos, rtt: Nanos) {
        let segments = cc.cwnd() / MSS;
        for _ in 0..segments {
            let flight = cc.cwnd();
            cc.on_ack(now, MSS, flight, Some(rtt));
        }
    }

    #[test]
    fn alpha_is_reno_friendly() {
        assert!(close(ALPHA, 0.9 / 1.7, 1e-12));
    }

    #[test]
    fn loss_multiplies_by_beta_and_sets_w_max() {
        let cc = after_loss_at_100();
        assert_eq!((cc.cwnd(), cc.ssthresh()), (70 * MSS, 70 * MSS));
        assert!(close(cc.w_max, 100.0, 1e-9));
        assert!(close(cc.cwnd_prior, 100.0, 1e-9));
    }

    #[test]
    fn the_cubic_function_at_hand_computed_points() {
        let mut cc = after_loss_at_100();
        cc.on_ack(10 * S, MSS, 70 * MSS, None);
        assert_eq!(cc.epoch_start, Some(10 * S));
        // K = cbrt((100 - 70) / 0.4) = cbrt(75).
        assert!(close(cc.k, 4.217_163_326_508_746, 1e-9), "K = {}", cc.k);
        for (t, w) in [
            (0.0, 70.0),
            (1.0, 86.680_763_835_129_88),
            (2.0, 95.640_335_686_638_78),
            (4.217_163_326_508_746, 100.0),
            (5.0, 100.191_899_339_439_5),
            (6.0, 102.266_703_256_464_42),
            (10.0, 177.353_999_088_354_27),
        ] {
            assert!(close(cc.w_cubic(t), w, 1e-6), "W({t}) = {}", cc.w_cubic(t));
        }
    }

    #[test]
    fn cwnd_follows_the_curve_a_round_trip_ahead() {
        let rtt = 100 * MS;
        let mut cc = after_loss_at_100();
        let mut now = 0;
        // One window per RTT for 12 s: the window climbs back to W_max, plateaus, then probes.
        let mut at = Vec::new();
        for _ in 0..120 {
            ack_window(&mut cc, now, rtt);
            at.push((now, cc.cwnd(), cc.w_est));
            now += rtt;
        }
        let start = cc.epoch_start.unwrap() as f64 / 1e9;
        let mut reno_friendly = 0;
        for &(t, cwnd, w_est) in &at[1..] {
            let t = t as f64 / 1e9 - start;
            let cwnd = f64::from(cwnd) / f64::from(MSS);
            if w_est > cc.w_cubic(t) {
                // The Reno-friendly region: cwnd is W_est (or what the curve gave it earlier in
                // the round trip, where the two cross).
                let most = w_est.max(cc.w_cubic(t + 0.1));
                assert!(cwnd >= w_est - 0.01, "t = {t}: {cwnd} below {w_est}");
                assert!(cwnd <= most + 0.01, "t = {t}: {cwnd} above {most}");
                reno_friendly += 1;
                continue;
            }
            // After a window of ACKs at time t, cwnd has moved most of the way to W(t + RTT)
            // but never beyond it.
            let target = cc.w_cubic(t + 0.1);
            assert!(cwnd <= target + 1e-6, "t = {t}: {cwnd} above {target}");
            let before = cc.w_cubic(t);
            assert!(cwnd >= before - 1.0, "t = {t}: {cwnd} below {before}");
        }
        // With 100 ms round trips W_est (α per RTT up to 100 segments at t = 5.67 s, then one
        // segment per RTT) passes the flat part of the curve at about 5.8 s, and the convex part
        // overtakes it again at about 8.3 s (W(8.3) = 127 = W_est).
        assert!((20..30).contains(&reno_friendly), "{reno_friendly}");
        let last = f64::from(at[119].1) / f64::from(MSS);
        assert!(
            close(last, cc.w_cubic(11.9 + 0.1), 20.0) && last > 250.0,
            "{last}"
        );
        // Near K the window sits at W_max.
        let k_index = (cc.k / 0.1) as usize;
        let plateau = f64::from(at[k_index].1) / f64::from(MSS);
        assert!(close(plateau, 100.0, 1.0), "{plateau}");
    }

    #[test]
    fn growth_is_capped_at_half_a_window_per_round_trip() {
        let mut cc = after_loss_at_100();
        // Far past K the curve is steep; each window of ACKs grows cwnd by 1.5x at most.
        cc.on_ack(0, MSS, 70 * MSS, Some(MS));
        let now = 100 * S;
        let before = cc.cwnd();
        ack_window(&mut cc, now, MS);
        assert!(
            cc.cwnd() <= before + before / 2,
            "{before} -> {}",
            cc.cwnd()
        );
        assert!(cc.cwnd() > before + before / 3, "{before} -> {}", cc.cwnd());
    }

    #[test]
    fn short_round_trips_put_cubic_in_the_reno_friendly_region() {
        // With 10 µs round trips the curve barely moves, and W_est grows by α per RTT until it
        // passes cwnd_prior, then by one segment per RTT.
        let rtt = 10_000;
        let mut cc = after_loss_at_100();
        let mut now = 0;
        for _ in 0..40 {
            ack_window(&mut cc, now, rtt);
            now += rtt;
        }
        let expected = 70.0 + 40.0 * ALPHA;
        let cwnd = f64::from(cc.cwnd()) / f64::from(MSS);
        assert!(close(cwnd, expected, 1.0), "{cwnd} vs {expected}");
        assert!(cc.w_cubic(now as f64 / 1e9) < cwnd);
        for _ in 0..40 {
            ack_window(&mut cc, now, rtt);
            now += rtt;
        }
        // 70 + 30 / α ≈ 56.7 round trips at α, then 23.3 at one segment each.
        let rtts_at_alpha = 30.0 / ALPHA;
        let expected = 100.0 + (80.0 - rtts_at_alpha);
        let cwnd = f64::from(cc.cwnd()) / f64::from(MSS);
        assert!(close(cwnd, expected, 2.0), "{cwnd} vs {expected}");
    }

    #[test]
    fn fast_convergence_releases_bandwidth() {
        let mut cc = after_loss_at_100();
        // Lost again at 80 segments, below W_max: W_max drops to 80 (1 + β) / 2 = 68.
        cc.on_ack(0, MSS, 70 * MSS, None);
        cc.cwnd = 80 * MSS;
        cc.on_congestion_event(S, 80 * MSS);
        assert!(close(cc.w_max, 68.0, 1e-9), "{}", cc.w_max);
        assert_eq!(cc.cwnd(), 56 * MSS);
        // cwnd (56) is below W_max (68): K = cbrt(12 / 0.4).
        cc.on_ack(2 * S, MSS, 56 * MSS, None);
        assert!(close(cc.k, 30f64.cbrt(), 1e-9));
        // A loss above W_max takes the window itself as the new W_max.
        cc.cwnd = 90 * MSS;
        cc.on_congestion_event(3 * S, 90 * MSS);
        assert!(close(cc.w_max, 90.0, 1e-9));
    }

    #[test]
    fn slow_start_then_timeout_restarts_with_k_zero() {
        let mut cc = Cubic::new(MSS, 10 * MSS);
        cc.on_ack(0, 3 * MSS, 10 * MSS, None);
        assert_eq!(cc.cwnd(), 11 * MSS, "one SMSS per ACK in slow start");
        cc.on_rto(S, 40 * MSS);
        assert_eq!((cc.cwnd(), cc.ssthresh()), (MSS, 28 * MSS));
        // Slow start back to ssthresh.
        while cc.cwnd() < cc.ssthresh() {
            let flight = cc.cwnd();
            cc.on_ack(2 * S, MSS, flight, None);
        }
        assert_eq!(cc.cwnd(), 28 * MSS);
        cc.on_ack(3 * S, MSS, 28 * MSS, None);
        assert_eq!(cc.k, 0.0, "RFC 9438 §4.8");
        assert!(close(cc.origin, 28.0, 1e-9));
    }

    #[test]
    fn floors_and_restarts() {
        let mut cc = Cubic::new(MSS, 10 * MSS);
        cc.on_congestion_event(0, MSS);
        assert_eq!(cc.ssthresh(), 2 * MSS, "never below two segments");
        cc.on_recovery_end(0, 100);
        assert_eq!(cc.cwnd(), MSS, "never below one segment");
        let mut cc = Cubic::new(MSS, 10 * MSS);
        cc.on_ack(0, MSS, 1000, None);
        assert_eq!(
            cc.cwnd(),
            10 * MSS,
            "an application-limited sender does not grow"
        );
        for _ in 0..20 {
            let flight = cc.cwnd();
            cc.on_ack(0, MSS, flight, None);
        }
        assert_eq!(cc.cwnd(), 30 * MSS);
        cc.on_idle_restart(S);
        assert_eq!(cc.cwnd(), 10 * MSS);
        assert_eq!(cc.algorithm(), CcAlgorithm::Cubic);
    }
}
