//! The spin server's work: each request names a service time, which the server spends as real
//! CPU work before echoing the request.
//!
//! The work is a fixed number of iterations of a floating-point loop, calibrated once at start
//! against the clock, not a wait on the clock: if the core is taken away mid-request, the
//! request takes longer, as real work would.

use std::time::Instant;

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

/// Handles one request: decodes it, burns its service time, and returns whether to echo it.
/// Malformed requests are not answered.
pub fn serve(calibration: &Calibration, request: &[u8]) -> bool {
    match corral_loadgen::wire::Message::decode(request) {
        Ok(message) => {
            std::hint::black_box(burn(calibration.iterations(message.service_ns)));
            true
        }
        Err(_) => false,
    }
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
        assert!(!serve(&c, b"not a request"));
        let mut buf = [0u8; 64];
        corral_loadgen::wire::Message {
            id: 7,
            scheduled_send_ns: 1,
            service_ns: 1000,
            client: 3,
        }
        .encode(&mut buf)
        .unwrap();
        assert!(serve(&c, &buf));
    }
}
