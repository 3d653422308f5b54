//! Arachne's core estimator for one runtime: what it averages over an interval, and the verdict
//! it reaches at the interval's end.
//!
//! Arachne's runtime measures, per core, *load factor* (runnable user threads, weighted by the
//! time the dispatcher took to scan them, over elapsed cycles) and *utilization* (the fraction
//! of cycles spent running user threads rather than looking for work). iokerneld sees neither;
//! what it sees at every pass is which kthreads are active and how many items wait on each
//! one's run queue and ingress ring. [`Window`] builds the two figures from those samples, one
//! sample per pass:
//!
//! * a core's utilization is the fraction of passes in which a kthread of the runtime was
//!   active on it (a kthread that runs out of work parks, so an active kthread is one that is
//!   running work or about to); the runtime's *total utilization* is their sum: active
//!   kthreads averaged over the window's passes, in cores.
//! * the load factor of a pass is the number of runnable items per core the runtime owns: one
//!   for each active kthread (the item it runs) plus the items waiting on its queues. A core
//!   the runtime owns but left idle (its kthread parked) counts as a core with nothing
//!   runnable, as in Arachne, where an idle core's dispatcher finds no thread. The window's
//!   *average load factor* is the sum of runnable items over the passes divided by the sum of
//!   owned cores over the same passes.

/// What the estimator compares its averages against. See [`super::ArachneConfig`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Thresholds {
    pub(super) scale_up_load_factor: f64,
    pub(super) scale_down_hysteresis: f64,
}

/// One runtime's samples since the estimator last judged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Window {
    passes: u64,
    /// Active kthreads, summed over the passes.
    active_kthreads: u64,
    /// Active kthreads plus the items waiting on their queues, summed over the passes.
    runnable_items: u64,
    /// Cores the runtime owned, summed over the passes.
    owned_cores: u64,
}

impl Window {
    /// One pass's sample: `active` kthreads on cores, `waiting` items on their queues, `owned`
    /// cores (active or left idle).
    pub(super) fn record_pass(&mut self, active: u32, waiting: u64, owned: u32) {
        self.passes += 1;
        self.active_kthreads += u64::from(active);
        self.runnable_items = self
            .runnable_items
            .saturating_add(u64::from(active))
            .saturating_add(waiting);
        self.owned_cores += u64::from(owned);
    }

    /// Active kthreads on average over the window, in cores; `None` for an empty window.
    pub(super) fn total_utilization(&self) -> Option<f64> {
        (self.passes > 0).then(|| self.active_kthreads as f64 / self.passes as f64)
    }

    /// Runnable items per owned core on average over the window; `None` if it owned no core
    /// in any of its passes.
    pub(super) fn load_factor(&self) -> Option<f64> {
        (self.owned_cores > 0).then(|| self.runnable_items as f64 / self.owned_cores as f64)
    }
}

/// What the estimator recommends for the runtime's core count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    ScaleUp,
    ScaleDown,
    Hold,
}

/// The estimator's state for one runtime: the current window and, per core count, the total
/// utilization at which it last scaled up from that count.
#[derive(Clone, Debug)]
pub(super) struct Estimator {
    pub(super) window: Window,
    /// `utilization_at_scale_up[k]`: the total utilization when it last recommended going from
    /// `k` cores to `k + 1`. Going back from `k + 1` to `k` waits until utilization falls below
    /// it by the hysteresis. `None` for a count it never scaled up from (the first core, cores
    /// granted for a guarantee): the estimator never scales below such a count.
    utilization_at_scale_up: Vec<Option<f64>>,
}

impl Estimator {
    /// For a runtime that may hold up to `max_cores`.
    pub(super) fn new(max_cores: u16) -> Self {
        Self {
            window: Window::default(),
            utilization_at_scale_up: vec![None; usize::from(max_cores)],
        }
    }

    /// Judges the window that just closed for a runtime whose core count is `cores`, and
    /// starts the next window. Scales up when the average load factor reaches the threshold
    /// (and `cores` is below the runtime's maximum); scales down, never below `floor`, when
    /// total utilization is below the one recorded at the last scale-up to `cores` by more
    /// than the hysteresis. Scaling up has precedence: a runtime whose cores are crowded needs
    /// more, however busy they were before.
    pub(super) fn judge(&mut self, cores: u32, floor: u32, thresholds: &Thresholds) -> Verdict {
        let window = core::mem::take(&mut self.window);
        let (Some(load_factor), Some(utilization)) =
            (window.load_factor(), window.total_utilization())
        else {
            return Verdict::Hold;
        };
        let cores = cores as usize;
        if load_factor >= thresholds.scale_up_load_factor
            && cores < self.utilization_at_scale_up.len()
        {
            self.utilization_at_scale_up[cores] = Some(utilization);
            return Verdict::ScaleUp;
        }
        if cores > floor as usize
            && let Some(Some(at_scale_up)) = self.utilization_at_scale_up.get(cores - 1)
            && utilization < at_scale_up - thresholds.scale_down_hysteresis
        {
            return Verdict::ScaleDown;
        }
        Verdict::Hold
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const THRESHOLDS: Thresholds = Thresholds {
        scale_up_load_factor: 1.5,
        scale_down_hysteresis: 0.09,
    };

    fn window(passes: u32, active: u32, waiting: u64, owned: u32) -> Window {
        let mut window = Window::default();
        for _ in 0..passes {
            window.record_pass(active, waiting, owned);
        }
        window
    }

    #[test]
    fn averages_count_runnable_items_per_owned_core_and_active_kthreads() {
        // Two cores owned, one kthread active with three items waiting behind it.
        let busy = window(10, 1, 3, 2);
        assert_eq!(busy.load_factor(), Some(2.0));
        assert_eq!(busy.total_utilization(), Some(1.0));
        let empty = Window::default();
        assert_eq!((empty.load_factor(), empty.total_utilization()), (None, None));
        assert_eq!(window(4, 0, 0, 0).load_factor(), None);
    }

    #[test]
    fn scales_up_at_the_threshold_and_records_the_utilization() {
        let mut estimator = Estimator::new(4);
        // 1.4 runnable items per core: below the threshold.
        estimator.window = window(5, 2, 5, 5);
        assert_eq!(estimator.window.load_factor(), Some(1.4));
        assert_eq!(estimator.judge(3, 1, &THRESHOLDS), Verdict::Hold);
        // Exactly 1.5 reaches it.
        estimator.window = window(5, 2, 1, 2);
        assert_eq!(estimator.judge(2, 1, &THRESHOLDS), Verdict::ScaleUp);
        assert_eq!(estimator.utilization_at_scale_up[2], Some(2.0));
        // The window was consumed: nothing to judge on.
        assert_eq!(estimator.judge(3, 1, &THRESHOLDS), Verdict::Hold);
        // Never beyond the maximum.
        estimator.window = window(5, 4, 40, 4);
        assert_eq!(estimator.judge(4, 1, &THRESHOLDS), Verdict::Hold);
    }

    #[test]
    fn scales_down_only_past_the_hysteresis_and_never_below_the_floor() {
        let mut estimator = Estimator::new(8);
        estimator.window = window(10, 2, 2, 2);
        assert_eq!(estimator.judge(2, 1, &THRESHOLDS), Verdict::ScaleUp);
        // At three cores, utilization 1.95: within 0.09 of the 2.0 recorded, so it holds.
        let mut holding = Window::default();
        for pass in 0..20 {
            holding.record_pass(if pass == 0 { 1 } else { 2 }, 0, 3);
        }
        estimator.window = holding;
        assert_eq!(estimator.judge(3, 1, &THRESHOLDS), Verdict::Hold);
        // 1.9 is below 2.0 - 0.09.
        let mut falling = Window::default();
        for pass in 0..10 {
            falling.record_pass(if pass == 0 { 1 } else { 2 }, 0, 3);
        }
        estimator.window = falling;
        assert_eq!(estimator.judge(3, 1, &THRESHOLDS), Verdict::ScaleDown);
        // No record for two cores' predecessor (it never scaled up from one): no lower.
        estimator.window = window(10, 0, 0, 2);
        assert_eq!(estimator.judge(2, 1, &THRESHOLDS), Verdict::Hold);
        // Nor below the floor, whatever was recorded.
        estimator.window = window(10, 0, 0, 3);
        assert_eq!(estimator.judge(3, 3, &THRESHOLDS), Verdict::Hold);
    }
}
