//! A token bucket for log lines that a client can provoke (refused requests), so that a
//! hostile or broken client cannot flood the log: a burst is logged in full, then a few lines a
//! second; what is left out is counted, and one summary line per period says how many.
//!
//! Pure: the caller passes the time, in nanoseconds of a monotonic clock.

const NS_PER_SEC: u64 = 1_000_000_000;

/// The bucket. See the module documentation.
#[derive(Clone, Debug)]
pub(super) struct LogLimit {
    /// Nanoseconds of credit that one line costs.
    cost_ns: u64,
    /// Most credit kept, in nanoseconds: `burst` lines.
    cap_ns: u64,
    credit_ns: u64,
    /// When credit was last added; `None` before the first line.
    last_ns: Option<u64>,
    summary_period_ns: u64,
    /// Lines left out since the last summary, and when the first of them was.
    unsummarized: u64,
    window_start_ns: u64,
    /// Lines left out, ever.
    suppressed: u64,
}

impl LogLimit {
    /// Lets `burst` lines through at once, then `per_second` lines a second; a summary is due
    /// at most once per `summary_period_ns`.
    pub(super) fn new(burst: u32, per_second: u32, summary_period_ns: u64) -> Self {
        let cost_ns = NS_PER_SEC / u64::from(per_second.max(1));
        let cap_ns = cost_ns * u64::from(burst.max(1));
        LogLimit {
            cost_ns,
            cap_ns,
            credit_ns: cap_ns,
            last_ns: None,
            summary_period_ns,
            unsummarized: 0,
            window_start_ns: 0,
            suppressed: 0,
        }
    }

    /// Whether a line may be logged at `now_ns`; if not, it is counted as suppressed.
    pub(super) fn admit(&mut self, now_ns: u64) -> bool {
        if let Some(last) = self.last_ns {
            let earned = now_ns.saturating_sub(last);
            self.credit_ns = self.credit_ns.saturating_add(earned).min(self.cap_ns);
        }
        // Time going back (it does not, with a monotonic clock) earns nothing.
        self.last_ns = Some(self.last_ns.map_or(now_ns, |last| last.max(now_ns)));
        if self.credit_ns >= self.cost_ns {
            self.credit_ns -= self.cost_ns;
            return true;
        }
        if self.unsummarized == 0 {
            self.window_start_ns = now_ns;
        }
        self.unsummarized += 1;
        self.suppressed += 1;
        false
    }

    /// The number of lines suppressed since the last summary, once a summary period has passed
    /// since the first of them; `None` otherwise. Taking it starts a new period.
    pub(super) fn take_summary(&mut self, now_ns: u64) -> Option<u64> {
        if self.unsummarized == 0
            || now_ns.saturating_sub(self.window_start_ns) < self.summary_period_ns
        {
            return None;
        }
        Some(std::mem::take(&mut self.unsummarized))
    }

    /// Lines suppressed since the bucket was made.
    pub(super) fn suppressed(&self) -> u64 {
        self.suppressed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_burst_passes_then_lines_are_suppressed_and_counted() {
        let mut limit = LogLimit::new(5, 2, 10_000 * MS);
        let start = 1_000 * MS;
        let admitted = (0..100).filter(|_| limit.admit(start)).count();
        assert_eq!(admitted, 5);
        assert_eq!(limit.suppressed(), 95);
    }

    #[test]
    fn credit_comes_back_at_the_steady_rate_and_is_capped_at_the_burst() {
        let mut limit = LogLimit::new(3, 4, 10_000 * MS);
        let mut now = 0;
        assert_eq!((0..10).filter(|_| limit.admit(now)).count(), 3);
        // 4 lines a second: one every 250 ms.
        now += 249 * MS;
        assert!(!limit.admit(now));
        now += MS;
        assert!(limit.admit(now));
        assert!(!limit.admit(now));
        // A long quiet spell refills no more than the burst.
        now += 3_600_000 * MS;
        assert_eq!((0..10).filter(|_| limit.admit(now)).count(), 3);
    }

    #[test]
    fn over_a_long_flood_the_admitted_lines_stay_near_the_rate() {
        let mut limit = LogLimit::new(20, 5, 5_000 * MS);
        let mut admitted = 0;
        // A line every 10 µs for 10 seconds.
        for i in 0..1_000_000u64 {
            if limit.admit(i * 10_000) {
                admitted += 1;
            }
        }
        // The burst at once, then one every 200 ms from 200 ms to 9.8 s.
        assert_eq!(admitted, 20 + 49);
        assert_eq!(limit.suppressed(), 1_000_000 - 69);
    }

    #[test]
    fn a_summary_is_due_one_period_after_the_first_suppressed_line() {
        let mut limit = LogLimit::new(1, 1, 1_000 * MS);
        assert_eq!(limit.take_summary(0), None);
        assert!(limit.admit(0));
        assert_eq!(
            limit.take_summary(5_000 * MS),
            None,
            "nothing suppressed yet"
        );
        let first = 100 * MS;
        assert!(!limit.admit(first));
        assert!(!limit.admit(first + MS));
        assert_eq!(limit.take_summary(first + 999 * MS), None);
        assert_eq!(limit.take_summary(first + 1_000 * MS), Some(2));
        assert_eq!(
            limit.take_summary(first + 5_000 * MS),
            None,
            "already summarized"
        );
        assert_eq!(limit.suppressed(), 2, "the total is kept");
        // The next period starts with the next suppressed line.
        let later = 10_000 * MS;
        assert!(limit.admit(later));
        assert!(!limit.admit(later));
        assert_eq!(limit.take_summary(later + 999 * MS), None);
        assert_eq!(limit.take_summary(later + 1_000 * MS), Some(1));
        assert_eq!(limit.suppressed(), 3);
    }

    #[test]
    fn time_going_back_earns_nothing() {
        let mut limit = LogLimit::new(1, 1, 1_000 * MS);
        assert!(limit.admit(10_000 * MS));
        assert!(!limit.admit(0));
        assert!(!limit.admit(10_500 * MS));
        assert!(limit.admit(11_000 * MS));
    }
}
