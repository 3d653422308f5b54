//! What the mechanisms the policy drives cost, in nanoseconds of virtual time, and where each
//! figure comes from.
//!
//! Three sets: [`Costs::measured`] (this machine class's figures, the default), [`Costs::paper`]
//! (the Shenango paper's), and [`Costs::from_bench_json`] (a `corral-bench-iokernel --json`
//! output). [`Costs::zero`] is for tests and for an idealised machine.

use serde::Serialize;

/// One cost: its value and where it comes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Cost {
    pub ns: u64,
    pub source: String,
}

impl Cost {
    fn new(ns: u64, source: impl Into<String>) -> Self {
        Self {
            ns,
            source: source.into(),
        }
    }
}

/// The simulated machine's costs. How each one is charged is documented on its field.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Costs {
    /// Time between the daemon's allocation passes.
    pub interval: Cost,
    /// From the daemon's wake decision to the kthread running on the core. The core belongs
    /// to the runtime (counts as its core time) from the decision on.
    pub grant: Cost,
    /// From a preemption decision to the daemon seeing the victim park, when the victim is
    /// signalled. The victim keeps running its work until then.
    pub preempt: Cost,
    /// The same when the victim cedes cooperatively (no signal; `--cede cooperative`).
    pub cede: Cost,
    /// How long a kthread that found no work holds its core (spinning, then parking) before
    /// the daemon sees the park; work that shows up meanwhile is picked up.
    pub park: Cost,
    /// Extra delay before a kthread runs on a core whose previous user was another runtime
    /// (a reallocation): the daemon's hand-over work and the switch.
    pub handover: Cost,
    /// Per request (and per resumption of a preempted request): core time spent dispatching
    /// it (uthread creation and switch), not counted as useful work.
    pub dispatch: Cost,
    /// Per request, once: core time the server's kthread spends on its packets (taking the
    /// request off the ingress ring, the UDP receive, building and posting the reply), run
    /// before the service and not counted as useful work. Zero for work made locally.
    pub net_core: Cost,
    /// Per request: time on the packet path that no core of the runtime spends (the
    /// request's way from the client to the ingress ring and the reply's way back), added to
    /// its latency. Arrivals shifted by a constant leave an open-loop run's dynamics alone,
    /// so the whole path is charged at the end.
    pub net_latency: Cost,
}

/// The runtime's spin before park (`corral::Config::default().spin_before_park`), which the
/// iokerneld benchmark reports but does not put in its JSON.
pub const SPIN_BEFORE_PARK_NS: u64 = 2_000;

/// The packet path of the demo's spin server alone on a spinning core, fed by iokerneld's
/// generator with no work asked (`scripts/sim_validate.py`): net_core = 1 / capacity - dispatch,
/// net_latency = the round trip at a low rate - 1 / capacity.
const NET_CORE_NS: u64 = 1_288;
const NET_LATENCY_NS: u64 = 1_017;
const NET_SOURCE: &str = "the spin server alone on a spinning core, no work asked, under \
    iokerneld's generator: round trip p50 2.77 us at 5,000/s (median of 3), capacity 570,036/s \
    (1.75 us a request, of which dispatch 0.47), measured on this machine class: \
    scripts/sim_validate.py, 2026-11-29 17:50 UTC, docs/benchmarks-history.md";

/// The bench run the measured set comes from.
const MEASURED: &str = "measured on this machine class: corral-bench-iokernel --handover local, \
                        2026-11-23 20:40 UTC, docs/benchmarks-history.md";

impl Costs {
    /// Everything zero: an idealised machine.
    pub fn zero() -> Self {
        let zero = || Cost::new(0, "zero");
        Self {
            interval: Cost::new(5_000, "iokerneld's default interval_us = 5"),
            grant: zero(),
            preempt: zero(),
            cede: zero(),
            park: zero(),
            handover: zero(),
            dispatch: zero(),
            net_core: zero(),
            net_latency: zero(),
        }
    }

    /// This machine class's measurements (2 vCPUs, Corral's iokerneld with local hand-over
    /// helpers), from the run recorded in docs/benchmarks-history.md, mapped as
    /// [`Costs::from_bench_json`] maps the benchmark's JSON.
    pub fn measured() -> Self {
        Self {
            interval: Cost::new(5_000, "iokerneld's default interval_us = 5"),
            grant: Cost::new(
                4_330,
                format!("wake_ns (grant to an idle core), {MEASURED}"),
            ),
            preempt: Cost::new(
                20_730 + 1_190,
                format!("preempt_signal_ns + preempt_park_ns (20.73 + 1.19 us), {MEASURED}"),
            ),
            cede: Cost::new(
                10_980 - 4_330,
                format!("coop_preempt_ns - wake_ns (10.98 - 4.33 us), {MEASURED}"),
            ),
            park: Cost::new(
                SPIN_BEFORE_PARK_NS + 1_190,
                format!(
                    "spin before park 2 us (runtime default) + preempt_park_ns 1.19 us, {MEASURED}"
                ),
            ),
            handover: Cost::new(
                370,
                format!(
                    "preempt_ns - signal - park - wake phases (iokerneld: park seen -> wake word rung), {MEASURED}"
                ),
            ),
            dispatch: Cost::new(
                466,
                "spawn_join 465.7 ns (a uthread per request), measured on this machine class: \
                 corral-bench-threading, 2026-11-22 02:29 UTC, docs/benchmarks-history.md",
            ),
            net_core: Cost::new(NET_CORE_NS, NET_SOURCE),
            net_latency: Cost::new(NET_LATENCY_NS, NET_SOURCE),
        }
    }

    /// The Shenango paper's figures (NSDI '19). It gives few: the 5 us interval (§4.1,
    /// Algorithm 1), "core reallocations complete in only 5.9 µs and require less than two
    /// microseconds of IOKernel compute time" (§3), and the runtime's spin of "a couple of
    /// microseconds" before parking (§5). It gives no separate preemption or dispatch time
    /// in its text (Figure 6 shows preemption costing more than a wake, without numbers).
    pub fn paper() -> Self {
        Self {
            interval: Cost::new(5_000, "paper §4.1: congestion detection every 5 us"),
            grant: Cost::new(
                3_900,
                "paper §3: a reallocation completes in 5.9 us, less the 2 us of IOKernel time (handover)",
            ),
            preempt: Cost::new(
                5_900,
                "paper §3's 5.9 us reallocation (the paper gives no separate signal time)",
            ),
            cede: Cost::new(
                5_900,
                "paper §3's 5.9 us reallocation (Shenango has no cooperative cede)",
            ),
            park: Cost::new(
                2_000,
                "paper §5: the scheduler spins a couple of microseconds before parking",
            ),
            handover: Cost::new(
                2_000,
                "paper §3: under 2 us of IOKernel compute per reallocation",
            ),
            dispatch: Cost::new(
                466,
                "not in the paper's text; this machine class's spawn_join (corral-bench-threading)",
            ),
            net_core: Cost::new(
                0,
                "not in the paper's text (its Figure 1 workload is made locally); --cost net_core=NS",
            ),
            net_latency: Cost::new(
                0,
                "not in the paper's text (its Figure 1 workload is made locally); --cost net_latency=NS",
            ),
        }
    }

    /// The costs a `corral-bench-iokernel --json` output implies. Its JSON holds one value
    /// per repetition for each field; the median is used:
    ///
    /// * grant = `wake_ns`
    /// * preempt = `preempt_signal_ns` + `preempt_park_ns`
    /// * cede = `coop_preempt_ns` - `wake_ns` (at least 0)
    /// * park = [`SPIN_BEFORE_PARK_NS`] + `preempt_park_ns`
    /// * handover = `preempt_ns` - `preempt_signal_ns` - `preempt_park_ns` - `preempt_wake_ns`
    ///   (at least 0)
    ///
    /// The interval, dispatch and network costs are not measured there and keep the measured
    /// set's values. `text` may be the benchmark's whole stdout: the JSON is its last line that
    /// starts with `{`.
    pub fn from_bench_json(text: &str, file: &str) -> Result<Self, String> {
        let json_text = if serde_json::from_str::<serde_json::Value>(text).is_ok() {
            text
        } else {
            text.lines()
                .rev()
                .find(|line| line.trim_start().starts_with('{'))
                .ok_or_else(|| format!("{file}: no JSON object found"))?
        };
        let json: serde_json::Value =
            serde_json::from_str(json_text).map_err(|e| format!("{file}: {e}"))?;
        let median = |field: &str| -> Result<f64, String> {
            let values = json[field]
                .as_array()
                .ok_or_else(|| format!("{file}: no array `{field}`"))?;
            let mut numbers: Vec<f64> = values.iter().filter_map(|v| v.as_f64()).collect();
            if numbers.is_empty() || numbers.len() != values.len() {
                return Err(format!(
                    "{file}: `{field}` must be a non-empty array of numbers"
                ));
            }
            numbers.sort_by(f64::total_cmp);
            let n = numbers.len();
            Ok(if n % 2 == 1 {
                numbers[n / 2]
            } else {
                (numbers[n / 2 - 1] + numbers[n / 2]) / 2.0
            })
        };
        let ns = |v: f64| v.max(0.0).round() as u64;
        let wake = median("wake_ns")?;
        let signal = median("preempt_signal_ns")?;
        let park = median("preempt_park_ns")?;
        let total = median("preempt_ns")?;
        let wake_phase = median("preempt_wake_ns")?;
        let coop = median("coop_preempt_ns")?;
        let from = |what: &str| format!("{what}, median of {file}");
        let defaults = Self::measured();
        Ok(Self {
            interval: defaults.interval,
            grant: Cost::new(ns(wake), from("wake_ns")),
            preempt: Cost::new(
                ns(signal + park),
                from("preempt_signal_ns + preempt_park_ns"),
            ),
            cede: Cost::new(ns(coop - wake), from("coop_preempt_ns - wake_ns")),
            park: Cost::new(
                SPIN_BEFORE_PARK_NS + ns(park),
                from("spin before park 2 us (runtime default) + preempt_park_ns"),
            ),
            handover: Cost::new(
                ns(total - signal - park - wake_phase),
                from("preempt_ns - preempt_signal_ns - preempt_park_ns - preempt_wake_ns"),
            ),
            dispatch: defaults.dispatch,
            net_core: defaults.net_core,
            net_latency: defaults.net_latency,
        })
    }

    /// (name, cost) for every cost, in a fixed order, for printing.
    pub fn all(&self) -> [(&'static str, &Cost); 9] {
        [
            ("interval", &self.interval),
            ("grant", &self.grant),
            ("preempt", &self.preempt),
            ("cede", &self.cede),
            ("park", &self.park),
            ("handover", &self.handover),
            ("dispatch", &self.dispatch),
            ("net_core", &self.net_core),
            ("net_latency", &self.net_latency),
        ]
    }

    /// Overrides one cost by name (as [`Costs::all`] names them), from the command line.
    pub fn set(&mut self, name: &str, ns: u64) -> Result<(), String> {
        let cost = match name {
            "interval" => &mut self.interval,
            "grant" => &mut self.grant,
            "preempt" => &mut self.preempt,
            "cede" => &mut self.cede,
            "park" => &mut self.park,
            "handover" => &mut self.handover,
            "dispatch" => &mut self.dispatch,
            "net_core" => &mut self.net_core,
            "net_latency" => &mut self.net_latency,
            _ => {
                let names: Vec<&str> = self.all().iter().map(|(name, _)| *name).collect();
                return Err(format!(
                    "unknown cost {name:?}; costs: {}",
                    names.join(", ")
                ));
            }
        };
        *cost = Cost::new(ns, "set on the command line");
        Ok(())
    }

    /// The same costs for work made inside the runtime, with no packets: the network costs
    /// zeroed, saying why.
    pub fn without_network(mut self) -> Self {
        let local = |name: &str| {
            Cost::new(
                0,
                format!("{name}: none, the requests are made inside the runtime"),
            )
        };
        self.net_core = local("net_core");
        self.net_latency = local("net_latency");
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BENCH: &str = r#"{"reps":3,"wake_ns":[4000.0,5000.0,4500.0],
        "preempt_ns":[30000.0,29000.0,31000.0],"preempt_signal_ns":[20000.0,20000.0,20000.0],
        "preempt_park_ns":[1000.0,1200.0,1100.0],"preempt_wake_ns":[7000.0,7000.0,7000.0],
        "coop_preempt_ns":[11000.0,11000.0,11000.0]}"#;

    #[test]
    fn bench_json_maps_medians_onto_costs() {
        let costs = Costs::from_bench_json(BENCH, "bench.json").unwrap();
        assert_eq!(costs.grant.ns, 4_500);
        assert_eq!(costs.preempt.ns, 21_100);
        assert_eq!(costs.cede.ns, 6_500);
        assert_eq!(costs.park.ns, SPIN_BEFORE_PARK_NS + 1_100);
        assert_eq!(costs.handover.ns, 30_000 - 20_000 - 1_100 - 7_000);
        assert!(costs.grant.source.contains("bench.json"));
    }

    #[test]
    fn bench_json_is_found_after_the_table() {
        let text = format!(
            "measure corral peer\nrow 1.0us\n{}\n",
            BENCH.replace('\n', "")
        );
        assert_eq!(
            Costs::from_bench_json(&text, "out.txt").unwrap().grant.ns,
            4_500
        );
        assert!(Costs::from_bench_json("no json here", "x").is_err());
        assert!(Costs::from_bench_json(r#"{"wake_ns":[]}"#, "x").is_err());
    }

    #[test]
    fn every_set_has_a_source_for_every_cost_and_no_zero_mechanism_costs() {
        for (set, costs) in [("measured", Costs::measured()), ("paper", Costs::paper())] {
            for (name, cost) in costs.all() {
                assert!(!cost.source.is_empty(), "{set} {name}");
                // The paper gives no packet-path figure; its Figure 1 has no packets.
                let unstated = set == "paper" && name.starts_with("net_");
                assert_eq!(cost.ns > 0, !unstated, "{set} {name}");
            }
        }
    }

    #[test]
    fn local_work_has_no_network_costs_and_says_so() {
        let costs = Costs::measured().without_network();
        assert_eq!((costs.net_core.ns, costs.net_latency.ns), (0, 0));
        assert!(costs.net_core.source.contains("inside the runtime"));
        assert_eq!(costs.grant, Costs::measured().grant);
    }

    #[test]
    fn costs_are_set_by_name() {
        let mut costs = Costs::zero();
        costs.set("grant", 7).unwrap();
        assert_eq!(costs.grant.ns, 7);
        assert!(costs.set("nonsense", 1).unwrap_err().contains("dispatch"));
    }
}
