//! The spin server's work: each request names a service time, which the server spends as real
//! CPU work before echoing the request.
//!
//! The work is a fixed number of iterations of a floating-point loop, calibrated once at start
//! against the clock, not a wait on the clock: if the core is taken away mid-request, the
//! request takes longer, as real work would.

use std::time::Instant;

use corral_loadgen::wire::{Message, ServerStamps};

/// Iterations of [`burn`] per microsecond on this machine.
#[derive(Clone, Copy, Debug)]
pub struct Calibration {
    pub iterations_per_us: f64,
}

impl Calibration {
    /// Times `burn` over a few milliseconds, several times, and keeps the fastest (least
    /// disturbed) rate.
    pub fn measure() -> Calibration {
        const ITERATIONS: u64 = 200_000;
        let best = (0..7)
            .map(|_| {
                let start = Instant::now();
                std::hint::black_box(burn(ITERATIONS));
                ITERATIONS as f64 / start.elapsed().as_secs_f64().max(1e-9) / 1e6
            })
            .fold(0.0f64, f64::max);
        Calibration {
            iterations_per_us: best,
        }
    }

    /// Iterations for `service_ns` of work.
    pub fn iterations(&self, service_ns: u32) -> u64 {
        (f64::from(service_ns) / 1e3 * self.iterations_per_us).round() as u64
    }
}

/// `iterations` steps of a dependent floating-point recurrence, which the compiler cannot
/// shorten or vectorize away.
#[inline(never)]
pub fn burn(iterations: u64) -> f64 {
    let mut x = 1.000_001f64;
    for _ in 0..iterations {
        x = x * 1.000_000_1 + 1e-9;
        x = std::hint::black_box(x);
    }
    x
}

/// Handles one request, which the server got at `received_ns` (`CLOCK_MONOTONIC`): decodes
/// it, burns its service time, stamps the receipt, service start and service end into it, and
/// returns whether to echo it. Malformed requests are not answered.
pub fn serve(calibration: &Calibration, request: &mut [u8], received_ns: u64) -> bool {
    let Ok(message) = Message::decode(request) else {
        return false;
    };
    let start_ns = corral::now_ns();
    std::hint::black_box(burn(calibration.iterations(message.service_ns)));
    let stamps = ServerStamps {
        received_ns,
        start_ns,
        end_ns: corral::now_ns(),
    };
    // Stamps that cannot be written (a receipt time from a clock that is not
    // CLOCK_MONOTONIC, or a wait of over 4 s) leave the area empty: the response still
    // counts, and the generator counts it as unsplit.
    let _ = stamps.write(request);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_scales_with_the_requested_service_time() {
        let c = Calibration {
            iterations_per_us: 250.0,
        };
        assert_eq!(c.iterations(10_000), 2500);
        assert_eq!(c.iterations(0), 0);
        assert_eq!(c.iterations(55_000), 13_750);
    }

    #[test]
    fn calibration_finds_a_positive_rate() {
        assert!(Calibration::measure().iterations_per_us > 0.0);
    }

    #[test]
    fn malformed_requests_are_not_served() {
        let c = Calibration {
            iterations_per_us: 1.0,
        };
        assert!(!serve(&c, &mut b"not a request".to_vec(), corral::now_ns()));
    }

    #[test]
    fn a_served_request_carries_the_servers_times() {
        let c = Calibration::measure();
        let request = Message {
            id: 7,
            scheduled_send_ns: 1,
            service_ns: 50_000,
            client: 3,
            sent_ns: 2,
        };
        let mut buf = [0u8; 64];
        request.encode(&mut buf).unwrap();
        let received_ns = corral::now_ns();
        assert!(serve(&c, &mut buf, received_ns));
        let after = corral::now_ns();
        // The request itself is echoed unchanged.
        assert_eq!(Message::decode(&buf), Ok(request));
        let s = ServerStamps::read(&buf).unwrap();
        assert_eq!(s.received_ns, received_ns);
        assert!(s.start_ns >= received_ns && s.end_ns <= after, "{s:?}");
        // The work is calibrated, not timed, so only a generous lower bound holds.
        assert!(s.end_ns - s.start_ns >= 10_000, "{s:?}");
    }
}
