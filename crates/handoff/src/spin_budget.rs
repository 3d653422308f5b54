//! How long a helper spins on an idle core before it sleeps.
//!
//! Spinning catches the next grant with a local wake-up; sleeping gives the CPU back to the
//! host (on a virtual machine, a halted vCPU) but turns the next grant into a cross-CPU
//! wake-up. The budget follows the idle gaps the helper has seen (from its core going idle to
//! the next grant on it): spin about twice the typical gap, within `[min, max]`, while gaps are
//! short enough to catch; once the typical gap is longer than `max`, spinning that long would
//! rarely pay, so spin only `min`.

/// The spin budget of one helper, in nanoseconds.
#[derive(Clone, Copy, Debug)]
pub struct SpinBudget {
    min_ns: u64,
    max_ns: u64,
    /// Exponentially weighted mean of recent idle gaps (weight 1/8 for the newest), each
    /// capped at `4 * max_ns` so that one very long gap cannot hide the short ones for long.
    typical_gap_ns: u64,
}

impl SpinBudget {
    /// A budget between `min_ns` and `max_ns` (swapped if given the wrong way round), starting
    /// at `max_ns`: until gaps are seen, assume grants come soon.
    pub fn new(min_ns: u64, max_ns: u64) -> Self {
        let (min_ns, max_ns) = (min_ns.min(max_ns), min_ns.max(max_ns));
        SpinBudget {
            min_ns,
            max_ns,
            typical_gap_ns: max_ns / 2,
        }
    }

    /// How long to spin now.
    pub fn limit_ns(&self) -> u64 {
        if self.typical_gap_ns > self.max_ns {
            self.min_ns
        } else {
            self.typical_gap_ns
                .saturating_mul(2)
                .clamp(self.min_ns, self.max_ns)
        }
    }

    /// Records one idle gap: from the core going idle to the next grant on it.
    pub fn record_gap(&mut self, gap_ns: u64) {
        let gap = gap_ns.min(self.max_ns.saturating_mul(4));
        self.typical_gap_ns = (self.typical_gap_ns * 7 + gap) / 8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn short_gaps_get_about_twice_their_length() {
        let mut b = SpinBudget::new(5_000, 1_000_000);
        for _ in 0..100 {
            b.record_gap(20_000);
        }
        let limit = b.limit_ns();
        assert!((39_000..=41_000).contains(&limit), "{limit}");
    }

    #[test]
    fn long_gaps_cut_the_spin_to_the_minimum() {
        let mut b = SpinBudget::new(5_000, 1_000_000);
        for _ in 0..100 {
            b.record_gap(50_000_000);
        }
        assert_eq!(b.limit_ns(), 5_000);
        // Gaps getting short again bring spinning back.
        for _ in 0..100 {
            b.record_gap(10_000);
        }
        assert!(b.limit_ns() >= 19_000, "{}", b.limit_ns());
    }

    #[test]
    fn it_starts_by_spinning_the_maximum() {
        assert_eq!(SpinBudget::new(5_000, 1_000_000).limit_ns(), 1_000_000);
    }

    proptest! {
        #[test]
        fn the_limit_stays_within_bounds(
            min in 0u64..10_000_000,
            max in 0u64..10_000_000,
            gaps in proptest::collection::vec(any::<u64>(), 0..200),
        ) {
            let mut b = SpinBudget::new(min, max);
            let (lo, hi) = (min.min(max), min.max(max));
            for g in gaps {
                b.record_gap(g);
                let l = b.limit_ns();
                prop_assert!(lo <= l && l <= hi, "{} not in [{}, {}]", l, lo, hi);
            }
        }
    }
}
