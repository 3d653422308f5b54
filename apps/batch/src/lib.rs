//! The batch job: CPU-bound floating-point work in the manner of PARSEC's swaptions, which
//! prices a portfolio of instruments by Monte Carlo simulation of many random paths.
//!
//! Here the portfolio holds arithmetic-average (Asian) call options on one asset following
//! geometric Brownian motion. One *work unit* prices one instrument with a few dozen paths of a
//! few dozen steps, using the geometric-average option (which has a closed form) as a control
//! variate; normals come from Box–Muller on a fast per-worker RNG. Units are small (tens of
//! microseconds) so that throughput can be sampled finely and a worker gives up its core quickly
//! between units. The European and geometric-Asian prices are checked against their closed forms
//! in the tests, which is what makes the throughput number honest work.

use std::f64::consts::PI;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Contract and market parameters of one option.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OptionSpec {
    pub spot: f64,
    pub strike: f64,
    /// Risk-free rate, continuously compounded.
    pub rate: f64,
    /// Volatility (annualized).
    pub vol: f64,
    /// Years to expiry.
    pub maturity: f64,
}

/// A Monte Carlo estimate with its standard error.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Estimate {
    pub price: f64,
    pub std_error: f64,
}

/// Standard normal draws by the Box–Muller transform: two uniforms give two independent
/// normals, the second kept for the next call.
pub struct Normals {
    rng: fastrand::Rng,
    spare: Option<f64>,
}

impl Normals {
    pub fn new(seed: u64) -> Self {
        Normals {
            rng: fastrand::Rng::with_seed(seed),
            spare: None,
        }
    }

    /// A uniform in the open interval (0, 1), so that `ln` never sees 0.
    #[inline]
    fn open_unit(&mut self) -> f64 {
        const SCALE: f64 = 1.0 / (1u64 << 53) as f64;
        (self.rng.u64(..) >> 11) as f64 * SCALE + SCALE / 2.0
    }

    #[inline]
    pub fn next_normal(&mut self) -> f64 {
        if let Some(z) = self.spare.take() {
            return z;
        }
        let r = (-2.0 * self.open_unit().ln()).sqrt();
        let (s, c) = (2.0 * PI * self.open_unit()).sin_cos();
        self.spare = Some(r * s);
        r * c
    }
}

/// The standard normal CDF, by Abramowitz & Stegun 26.2.17 (absolute error below 7.5e-8,
/// far below any Monte Carlo error here).
pub fn normal_cdf(x: f64) -> f64 {
    const P: f64 = 0.231_641_9;
    const B: [f64; 5] = [
        0.319_381_530,
        -0.356_563_782,
        1.781_477_937,
        -1.821_255_978,
        1.330_274_429,
    ];
    let a = x.abs();
    let t = 1.0 / (1.0 + P * a);
    let poly = t * (B[0] + t * (B[1] + t * (B[2] + t * (B[3] + t * B[4]))));
    let pdf = (-0.5 * a * a).exp() / (2.0 * PI).sqrt();
    let upper_tail = pdf * poly;
    if x >= 0.0 {
        1.0 - upper_tail
    } else {
        upper_tail
    }
}

/// Black–Scholes price of a European call.
pub fn black_scholes_call(o: &OptionSpec) -> f64 {
    let sd = o.vol * o.maturity.sqrt();
    let d1 = ((o.spot / o.strike).ln() + (o.rate + 0.5 * o.vol * o.vol) * o.maturity) / sd;
    let d2 = d1 - sd;
    o.spot * normal_cdf(d1) - o.strike * (-o.rate * o.maturity).exp() * normal_cdf(d2)
}

/// Closed-form price of a call on the geometric average of the prices at `steps` equally spaced
/// dates `T/n, 2T/n, .., T`. The log of that average is normal with mean
/// `ln S + (r - σ²/2) T (n+1) / 2n` and variance `σ² T (n+1)(2n+1) / 6n²`.
pub fn geometric_asian_call(o: &OptionSpec, steps: usize) -> f64 {
    let n = steps as f64;
    let mean = o.spot.ln() + (o.rate - 0.5 * o.vol * o.vol) * o.maturity * (n + 1.0) / (2.0 * n);
    let var = o.vol * o.vol * o.maturity * (n + 1.0) * (2.0 * n + 1.0) / (6.0 * n * n);
    let sd = var.sqrt();
    let d1 = (mean - o.strike.ln() + var) / sd;
    let d2 = d1 - sd;
    (-o.rate * o.maturity).exp()
        * ((mean + 0.5 * var).exp() * normal_cdf(d1) - o.strike * normal_cdf(d2))
}

/// Running mean and variance (Welford), so estimates need no per-path storage.
#[derive(Default)]
struct Moments {
    n: f64,
    mean: f64,
    m2: f64,
}

impl Moments {
    #[inline]
    fn push(&mut self, x: f64) {
        self.n += 1.0;
        let d = x - self.mean;
        self.mean += d / self.n;
        self.m2 += d * (x - self.mean);
    }

    fn estimate(&self, scale: f64) -> Estimate {
        let var = if self.n > 1.0 {
            self.m2 / (self.n - 1.0)
        } else {
            0.0
        };
        Estimate {
            price: scale * self.mean,
            std_error: scale * (var / self.n).sqrt(),
        }
    }
}

/// Monte Carlo price of a European call from terminal prices alone.
pub fn european_call_mc(o: &OptionSpec, paths: usize, normals: &mut Normals) -> Estimate {
    let drift = (o.rate - 0.5 * o.vol * o.vol) * o.maturity;
    let diffusion = o.vol * o.maturity.sqrt();
    let mut m = Moments::default();
    for _ in 0..paths {
        let st = o.spot * (drift + diffusion * normals.next_normal()).exp();
        m.push((st - o.strike).max(0.0));
    }
    m.estimate((-o.rate * o.maturity).exp())
}

/// Simulates one path over `steps` dates; returns its arithmetic and geometric averages.
#[inline]
fn asian_path(o: &OptionSpec, steps: usize, normals: &mut Normals) -> (f64, f64) {
    let dt = o.maturity / steps as f64;
    let drift = (o.rate - 0.5 * o.vol * o.vol) * dt;
    let diffusion = o.vol * dt.sqrt();
    let mut log_s = o.spot.ln();
    let (mut sum, mut sum_log) = (0.0, 0.0);
    for _ in 0..steps {
        log_s += drift + diffusion * normals.next_normal();
        sum += log_s.exp();
        sum_log += log_s;
    }
    let n = steps as f64;
    (sum / n, (sum_log / n).exp())
}

/// Monte Carlo price of the geometric-average call (to check the path simulation against
/// [`geometric_asian_call`]).
pub fn geometric_asian_call_mc(
    o: &OptionSpec,
    steps: usize,
    paths: usize,
    normals: &mut Normals,
) -> Estimate {
    let mut m = Moments::default();
    for _ in 0..paths {
        let (_, geo) = asian_path(o, steps, normals);
        m.push((geo - o.strike).max(0.0));
    }
    m.estimate((-o.rate * o.maturity).exp())
}

/// Monte Carlo price of the arithmetic-average call without a control variate.
pub fn arithmetic_asian_call_mc(
    o: &OptionSpec,
    steps: usize,
    paths: usize,
    normals: &mut Normals,
) -> Estimate {
    let mut m = Moments::default();
    for _ in 0..paths {
        let (arith, _) = asian_path(o, steps, normals);
        m.push((arith - o.strike).max(0.0));
    }
    m.estimate((-o.rate * o.maturity).exp())
}

/// Monte Carlo price of the arithmetic-average call with the geometric one as control variate:
/// the simulated difference of the two payoffs (small variance, since the averages move
/// together) plus the geometric option's exact price.
pub fn arithmetic_asian_call_cv(
    o: &OptionSpec,
    steps: usize,
    paths: usize,
    normals: &mut Normals,
) -> Estimate {
    let mut m = Moments::default();
    for _ in 0..paths {
        let (arith, geo) = asian_path(o, steps, normals);
        m.push((arith - o.strike).max(0.0) - (geo - o.strike).max(0.0));
    }
    let diff = m.estimate((-o.rate * o.maturity).exp());
    Estimate {
        price: diff.price + geometric_asian_call(o, steps),
        std_error: diff.std_error,
    }
}

/// A deterministic portfolio of `n` options with varied strikes, volatilities and maturities,
/// as swaptions prices a varied set of instruments rather than one repeatedly.
pub fn portfolio(n: usize, seed: u64) -> Vec<OptionSpec> {
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..n)
        .map(|_| OptionSpec {
            spot: 100.0,
            strike: 80.0 + 40.0 * rng.f64(),
            rate: 0.01 + 0.04 * rng.f64(),
            vol: 0.1 + 0.3 * rng.f64(),
            maturity: 0.25 + 2.75 * rng.f64(),
        })
        .collect()
}

/// The size of a work unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnitSize {
    pub paths: usize,
    pub steps: usize,
}

/// One worker's counter on its own cache line, so that workers counting units do not slow each
/// other down through false sharing.
#[repr(align(128))]
#[derive(Default)]
pub struct Counter(pub AtomicU64);

/// What the workers share: the stop flag and one counter each.
pub struct Shared {
    pub stop: AtomicBool,
    pub counters: Vec<Counter>,
    pub portfolio: Vec<OptionSpec>,
    pub size: UnitSize,
    pub seed: u64,
}

impl Shared {
    pub fn new(workers: usize, size: UnitSize, seed: u64) -> Self {
        Shared {
            stop: AtomicBool::new(false),
            counters: (0..workers).map(|_| Counter::default()).collect(),
            portfolio: portfolio(64, seed),
            size,
            seed,
        }
    }

    /// Units completed so far by all workers.
    pub fn total(&self) -> u64 {
        self.counters
            .iter()
            .map(|c| c.0.load(Ordering::Relaxed))
            .sum()
    }
}

/// Worker `w`'s loop: prices instruments until told to stop, calling `between_units` after
/// each unit (a Corral runtime's preemption point); returns the sum of its prices (reported, so
/// that the work cannot be optimized away, and a check that runs agree).
pub fn worker_loop(w: usize, shared: &Shared, between_units: impl Fn()) -> f64 {
    let mut normals = Normals::new(shared.seed ^ (w as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let workers = shared.counters.len().max(1);
    let mut next = w;
    let mut done = 0u64;
    let mut checksum = 0.0;
    while !shared.stop.load(Ordering::Relaxed) {
        let o = &shared.portfolio[next % shared.portfolio.len()];
        let est = arithmetic_asian_call_cv(o, shared.size.steps, shared.size.paths, &mut normals);
        checksum += est.price;
        next += workers;
        done += 1;
        // Only this worker writes its counter: a plain store is enough.
        shared.counters[w].0.store(done, Ordering::Relaxed);
        between_units();
    }
    checksum
}

#[cfg(test)]
mod tests {
    use super::*;

    const ATM: OptionSpec = OptionSpec {
        spot: 100.0,
        strike: 100.0,
        rate: 0.05,
        vol: 0.2,
        maturity: 1.0,
    };

    #[test]
    fn normal_cdf_known_values() {
        assert!((normal_cdf(0.0) - 0.5).abs() < 1e-7);
        assert!((normal_cdf(1.959_963_985) - 0.975).abs() < 1e-7);
        assert!((normal_cdf(-1.0) - 0.158_655_254).abs() < 1e-7);
        assert!((normal_cdf(3.0) - 0.998_650_102).abs() < 1e-7);
        assert!(normal_cdf(-40.0) >= 0.0 && normal_cdf(40.0) <= 1.0);
    }

    #[test]
    fn black_scholes_known_value() {
        // The textbook at-the-money example: 10.4506.
        assert!((black_scholes_call(&ATM) - 10.450_58).abs() < 1e-4);
    }

    #[test]
    fn box_muller_moments() {
        let mut z = Normals::new(3);
        let n = 1_000_000;
        let (mut s1, mut s2, mut s4) = (0.0, 0.0, 0.0);
        for _ in 0..n {
            let x = z.next_normal();
            s1 += x;
            s2 += x * x;
            s4 += x * x * x * x;
        }
        let n = n as f64;
        assert!((s1 / n).abs() < 0.005);
        assert!((s2 / n - 1.0).abs() < 0.005);
        assert!((s4 / n - 3.0).abs() < 0.05);
    }

    #[test]
    fn european_mc_converges_to_black_scholes() {
        for (o, seed) in [
            (ATM, 1),
            (
                OptionSpec {
                    strike: 120.0,
                    vol: 0.35,
                    maturity: 2.0,
                    ..ATM
                },
                2,
            ),
        ] {
            let paths = 400_000;
            let est = european_call_mc(&o, paths, &mut Normals::new(seed));
            let exact = black_scholes_call(&o);
            // Four standard errors: a correct estimator misses this 1 time in 16,000; the
            // error itself shrinks like 1/sqrt(paths).
            assert!(
                (est.price - exact).abs() < 4.0 * est.std_error,
                "{o:?}: MC {est:?} vs exact {exact}"
            );
            assert!(est.std_error < 0.01 * exact, "{est:?}");
        }
    }

    #[test]
    fn geometric_asian_path_simulation_matches_its_closed_form() {
        let est = geometric_asian_call_mc(&ATM, 16, 200_000, &mut Normals::new(5));
        let exact = geometric_asian_call(&ATM, 16);
        assert!(
            (est.price - exact).abs() < 4.0 * est.std_error,
            "MC {est:?} vs exact {exact}"
        );
        // One date at expiry: the geometric average is the terminal price.
        assert!((geometric_asian_call(&ATM, 1) - black_scholes_call(&ATM)).abs() < 1e-9);
    }

    #[test]
    fn control_variate_agrees_with_plain_mc_and_cuts_the_error() {
        let plain = arithmetic_asian_call_mc(&ATM, 32, 200_000, &mut Normals::new(7));
        let cv = arithmetic_asian_call_cv(&ATM, 32, 200_000, &mut Normals::new(8));
        let both = (plain.std_error.powi(2) + cv.std_error.powi(2)).sqrt();
        assert!(
            (plain.price - cv.price).abs() < 4.0 * both,
            "{plain:?} {cv:?}"
        );
        assert!(cv.std_error * 10.0 < plain.std_error, "{plain:?} {cv:?}");
        // The arithmetic average is at least the geometric one, and so is the option.
        assert!(cv.price > geometric_asian_call(&ATM, 32));
    }

    #[test]
    fn pricing_is_deterministic_per_seed() {
        let price = |seed| {
            let mut normals = Normals::new(seed);
            portfolio(5, seed)
                .iter()
                .map(|o| arithmetic_asian_call_cv(o, 8, 16, &mut normals).price)
                .sum::<f64>()
        };
        assert_eq!(price(1), price(1));
        assert_ne!(price(1), price(2));
    }

    #[test]
    fn worker_loop_counts_units_and_stops() {
        let shared = std::sync::Arc::new(Shared::new(2, UnitSize { paths: 8, steps: 8 }, 1));
        let s2 = std::sync::Arc::clone(&shared);
        let t = std::thread::spawn(move || worker_loop(1, &s2, || {}));
        while shared.total() < 10 {
            std::thread::yield_now();
        }
        shared.stop.store(true, Ordering::Relaxed);
        let checksum = t.join().unwrap();
        assert!(checksum > 0.0);
        assert_eq!(shared.counters[0].0.load(Ordering::Relaxed), 0);
        assert!(shared.counters[1].0.load(Ordering::Relaxed) >= 10);
    }
}
